//! BTH opcodes (IBTA Vol 1 §9.2, Table 37): the high 3 bits select the transport
//! (000 RC, 001 UC, 011 UD, 100 CNP), the low 5 bits the operation.
//!
//! The predicates follow IBTA Vol 1 Table 38 ("Packet header layout by opcode"): which
//! extended transport headers follow the BTH, and where the packet sits in a message.

/// The BTH opcodes this implementation speaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Opcode {
    RcSendFirst = 0x00,
    RcSendMiddle = 0x01,
    RcSendLast = 0x02,
    RcSendLastImm = 0x03,
    RcSendOnly = 0x04,
    RcSendOnlyImm = 0x05,
    RcRdmaWriteFirst = 0x06,
    RcRdmaWriteMiddle = 0x07,
    RcRdmaWriteLast = 0x08,
    RcRdmaWriteLastImm = 0x09,
    RcRdmaWriteOnly = 0x0A,
    RcRdmaWriteOnlyImm = 0x0B,
    RcRdmaReadRequest = 0x0C,
    RcRdmaReadResponseFirst = 0x0D,
    RcRdmaReadResponseMiddle = 0x0E,
    RcRdmaReadResponseLast = 0x0F,
    RcRdmaReadResponseOnly = 0x10,
    RcAcknowledge = 0x11,
    RcAtomicAcknowledge = 0x12,
    RcCompareSwap = 0x13,
    RcFetchAdd = 0x14,
    RcSendLastInv = 0x16,
    RcSendOnlyInv = 0x17,
    UcSendFirst = 0x20,
    UcSendMiddle = 0x21,
    UcSendLast = 0x22,
    UcSendLastImm = 0x23,
    UcSendOnly = 0x24,
    UcSendOnlyImm = 0x25,
    UcRdmaWriteFirst = 0x26,
    UcRdmaWriteMiddle = 0x27,
    UcRdmaWriteLast = 0x28,
    UcRdmaWriteLastImm = 0x29,
    UcRdmaWriteOnly = 0x2A,
    UcRdmaWriteOnlyImm = 0x2B,
    UdSendOnly = 0x64,
    UdSendOnlyImm = 0x65,
    /// RoCEv2 Congestion Notification Packet (Annex A17.9.3).
    Cnp = 0x81,
}

use Opcode::*;

impl Opcode {
    /// Every opcode of the enum, in numeric order.
    pub const ALL: [Opcode; 38] = [
        RcSendFirst,
        RcSendMiddle,
        RcSendLast,
        RcSendLastImm,
        RcSendOnly,
        RcSendOnlyImm,
        RcRdmaWriteFirst,
        RcRdmaWriteMiddle,
        RcRdmaWriteLast,
        RcRdmaWriteLastImm,
        RcRdmaWriteOnly,
        RcRdmaWriteOnlyImm,
        RcRdmaReadRequest,
        RcRdmaReadResponseFirst,
        RcRdmaReadResponseMiddle,
        RcRdmaReadResponseLast,
        RcRdmaReadResponseOnly,
        RcAcknowledge,
        RcAtomicAcknowledge,
        RcCompareSwap,
        RcFetchAdd,
        RcSendLastInv,
        RcSendOnlyInv,
        UcSendFirst,
        UcSendMiddle,
        UcSendLast,
        UcSendLastImm,
        UcSendOnly,
        UcSendOnlyImm,
        UcRdmaWriteFirst,
        UcRdmaWriteMiddle,
        UcRdmaWriteLast,
        UcRdmaWriteLastImm,
        UcRdmaWriteOnly,
        UcRdmaWriteOnlyImm,
        UdSendOnly,
        UdSendOnlyImm,
        Cnp,
    ];

    /// The opcode for a BTH opcode byte, or `None` for values this implementation does
    /// not speak (RD, XRC, reserved and manufacturer-specific codes).
    pub const fn from_u8(v: u8) -> Option<Opcode> {
        Some(match v {
            0x00 => RcSendFirst,
            0x01 => RcSendMiddle,
            0x02 => RcSendLast,
            0x03 => RcSendLastImm,
            0x04 => RcSendOnly,
            0x05 => RcSendOnlyImm,
            0x06 => RcRdmaWriteFirst,
            0x07 => RcRdmaWriteMiddle,
            0x08 => RcRdmaWriteLast,
            0x09 => RcRdmaWriteLastImm,
            0x0A => RcRdmaWriteOnly,
            0x0B => RcRdmaWriteOnlyImm,
            0x0C => RcRdmaReadRequest,
            0x0D => RcRdmaReadResponseFirst,
            0x0E => RcRdmaReadResponseMiddle,
            0x0F => RcRdmaReadResponseLast,
            0x10 => RcRdmaReadResponseOnly,
            0x11 => RcAcknowledge,
            0x12 => RcAtomicAcknowledge,
            0x13 => RcCompareSwap,
            0x14 => RcFetchAdd,
            0x16 => RcSendLastInv,
            0x17 => RcSendOnlyInv,
            0x20 => UcSendFirst,
            0x21 => UcSendMiddle,
            0x22 => UcSendLast,
            0x23 => UcSendLastImm,
            0x24 => UcSendOnly,
            0x25 => UcSendOnlyImm,
            0x26 => UcRdmaWriteFirst,
            0x27 => UcRdmaWriteMiddle,
            0x28 => UcRdmaWriteLast,
            0x29 => UcRdmaWriteLastImm,
            0x2A => UcRdmaWriteOnly,
            0x2B => UcRdmaWriteOnlyImm,
            0x64 => UdSendOnly,
            0x65 => UdSendOnlyImm,
            0x81 => Cnp,
            _ => return None,
        })
    }

    /// The BTH opcode byte.
    pub const fn as_u8(self) -> u8 {
        self as u8
    }

    /// RDMA Extended Transport Header (§9.3.3) follows: RDMA WRITE First, Only, Only
    /// with Immediate (RC and UC), and RDMA READ Request.
    pub const fn has_reth(self) -> bool {
        matches!(
            self,
            RcRdmaWriteFirst
                | RcRdmaWriteOnly
                | RcRdmaWriteOnlyImm
                | RcRdmaReadRequest
                | UcRdmaWriteFirst
                | UcRdmaWriteOnly
                | UcRdmaWriteOnlyImm
        )
    }

    /// ACK Extended Transport Header (§9.3.5) follows: Acknowledge, Atomic Acknowledge,
    /// RDMA READ Response First, Last and Only (not Middle).
    pub const fn has_aeth(self) -> bool {
        matches!(
            self,
            RcAcknowledge
                | RcAtomicAcknowledge
                | RcRdmaReadResponseFirst
                | RcRdmaReadResponseLast
                | RcRdmaReadResponseOnly
        )
    }

    /// Immediate Data extended header (§9.3.6) follows: the "with Immediate" SENDs
    /// and RDMA WRITEs.
    pub const fn has_immdt(self) -> bool {
        matches!(
            self,
            RcSendLastImm
                | RcSendOnlyImm
                | RcRdmaWriteLastImm
                | RcRdmaWriteOnlyImm
                | UcSendLastImm
                | UcSendOnlyImm
                | UcRdmaWriteLastImm
                | UcRdmaWriteOnlyImm
                | UdSendOnlyImm
        )
    }

    /// Invalidate Extended Transport Header (§9.3.7) follows: SEND Last / Only with
    /// Invalidate.
    pub const fn has_ieth(self) -> bool {
        matches!(self, RcSendLastInv | RcSendOnlyInv)
    }

    /// Datagram Extended Transport Header (§9.3.2) follows: every UD packet.
    pub const fn has_deth(self) -> bool {
        self.is_ud()
    }

    /// AtomicETH (§9.3.4, 28 bytes) follows: Compare & Swap and Fetch & Add. Not
    /// decoded by [`parse`](super::parse): it stays at the start of the payload.
    pub const fn has_atomic_eth(self) -> bool {
        matches!(self, RcCompareSwap | RcFetchAdd)
    }

    /// AtomicAckETH (§9.3.5, 8 bytes) follows the AETH: Atomic Acknowledge. Not decoded
    /// by [`parse`](super::parse): it stays at the start of the payload.
    pub const fn has_atomic_ack_eth(self) -> bool {
        matches!(self, RcAtomicAcknowledge)
    }

    /// Bytes of the extended transport headers [`parse`](super::parse) decodes for this
    /// opcode (DETH, RETH, AETH, ImmDt, IETH; not the atomic ETHs), i.e. header length
    /// minus the 12-byte BTH.
    pub const fn ext_headers_len(self) -> usize {
        use super::headers::*;
        (if self.has_deth() { DETH_LEN } else { 0 })
            + (if self.has_reth() { RETH_LEN } else { 0 })
            + (if self.has_aeth() { AETH_LEN } else { 0 })
            + (if self.has_immdt() { IMMDT_LEN } else { 0 })
            + (if self.has_ieth() { IETH_LEN } else { 0 })
    }

    /// Reliable Connection opcode (high bits 000).
    pub const fn is_rc(self) -> bool {
        (self as u8) >> 5 == 0b000
    }

    /// Unreliable Connection opcode (high bits 001; IBTA Vol 1 §9.2 Table 37).
    pub const fn is_uc(self) -> bool {
        (self as u8) >> 5 == 0b001
    }

    /// Unreliable Datagram opcode (high bits 011).
    pub const fn is_ud(self) -> bool {
        (self as u8) >> 5 == 0b011
    }

    /// A SEND packet (RC and UC First/Middle/Last/Only, with Immediate, RC with
    /// Invalidate; UD).
    pub const fn is_send(self) -> bool {
        matches!(
            self,
            RcSendFirst
                | RcSendMiddle
                | RcSendLast
                | RcSendLastImm
                | RcSendOnly
                | RcSendOnlyImm
                | RcSendLastInv
                | RcSendOnlyInv
                | UcSendFirst
                | UcSendMiddle
                | UcSendLast
                | UcSendLastImm
                | UcSendOnly
                | UcSendOnlyImm
                | UdSendOnly
                | UdSendOnlyImm
        )
    }

    /// An RDMA WRITE packet (RC or UC; First/Middle/Last/Only, with or without
    /// Immediate).
    pub const fn is_rdma_write(self) -> bool {
        matches!(
            self,
            RcRdmaWriteFirst
                | RcRdmaWriteMiddle
                | RcRdmaWriteLast
                | RcRdmaWriteLastImm
                | RcRdmaWriteOnly
                | RcRdmaWriteOnlyImm
                | UcRdmaWriteFirst
                | UcRdmaWriteMiddle
                | UcRdmaWriteLast
                | UcRdmaWriteLastImm
                | UcRdmaWriteOnly
                | UcRdmaWriteOnlyImm
        )
    }

    /// An RDMA READ Response packet (First/Middle/Last/Only).
    pub const fn is_read_response(self) -> bool {
        matches!(
            self,
            RcRdmaReadResponseFirst
                | RcRdmaReadResponseMiddle
                | RcRdmaReadResponseLast
                | RcRdmaReadResponseOnly
        )
    }

    /// An atomic request (Compare & Swap, Fetch & Add).
    pub const fn is_atomic(self) -> bool {
        matches!(self, RcCompareSwap | RcFetchAdd)
    }

    /// Sent by a requester (IBTA §9.7: SENDs, RDMA WRITEs, RDMA READ Requests, atomics),
    /// as opposed to responses (ACK/NAK, READ Responses, Atomic ACK) and CNPs.
    pub const fn is_request(self) -> bool {
        self.is_send()
            || self.is_rdma_write()
            || self.is_atomic()
            || matches!(self, RcRdmaReadRequest)
    }

    /// Sent by a responder: Acknowledge, Atomic Acknowledge, RDMA READ Responses.
    pub const fn is_response(self) -> bool {
        self.is_read_response() || matches!(self, RcAcknowledge | RcAtomicAcknowledge)
    }

    /// First packet of a multi-packet message (SEND / RDMA WRITE / READ Response First).
    pub const fn is_first(self) -> bool {
        matches!(
            self,
            RcSendFirst
                | RcRdmaWriteFirst
                | RcRdmaReadResponseFirst
                | UcSendFirst
                | UcRdmaWriteFirst
        )
    }

    /// Middle packet of a multi-packet message.
    pub const fn is_middle(self) -> bool {
        matches!(
            self,
            RcSendMiddle
                | RcRdmaWriteMiddle
                | RcRdmaReadResponseMiddle
                | UcSendMiddle
                | UcRdmaWriteMiddle
        )
    }

    /// Last packet of a multi-packet message (including the with-Immediate and
    /// with-Invalidate variants).
    pub const fn is_last(self) -> bool {
        matches!(
            self,
            RcSendLast
                | RcSendLastImm
                | RcSendLastInv
                | RcRdmaWriteLast
                | RcRdmaWriteLastImm
                | RcRdmaReadResponseLast
                | UcSendLast
                | UcSendLastImm
                | UcRdmaWriteLast
                | UcRdmaWriteLastImm
        )
    }

    /// The "Only" opcode of a SEND, RDMA WRITE or READ Response message (one packet).
    /// Opcodes that are always a single packet (READ Request, ACK, atomics, CNP) are
    /// not "Only" by name but do [`start`](Self::starts_message) and
    /// [`end`](Self::ends_message) a message.
    pub const fn is_only(self) -> bool {
        matches!(
            self,
            RcSendOnly
                | RcSendOnlyImm
                | RcSendOnlyInv
                | RcRdmaWriteOnly
                | RcRdmaWriteOnlyImm
                | RcRdmaReadResponseOnly
                | UcSendOnly
                | UcSendOnlyImm
                | UcRdmaWriteOnly
                | UcRdmaWriteOnlyImm
                | UdSendOnly
                | UdSendOnlyImm
        )
    }

    /// The packet begins a message: every opcode except Middle and Last (as Linux rxe's
    /// `RXE_START_MASK`).
    pub const fn starts_message(self) -> bool {
        !self.is_middle() && !self.is_last()
    }

    /// The packet completes a message: every opcode except First and Middle (as Linux
    /// rxe's `RXE_END_MASK`).
    pub const fn ends_message(self) -> bool {
        !self.is_first() && !self.is_middle()
    }
}

impl TryFrom<u8> for Opcode {
    type Error = u8;

    /// [`Opcode::from_u8`]; the error is the unknown byte.
    fn try_from(v: u8) -> Result<Self, u8> {
        Opcode::from_u8(v).ok_or(v)
    }
}

impl From<Opcode> for u8 {
    fn from(op: Opcode) -> u8 {
        op as u8
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn from_u8_round_trips_every_byte() {
        let mut known = 0;
        for v in 0..=255u8 {
            if let Some(op) = Opcode::from_u8(v) {
                assert_eq!(op.as_u8(), v);
                known += 1;
            }
        }
        assert_eq!(known, Opcode::ALL.len());
        for op in Opcode::ALL {
            assert_eq!(Opcode::from_u8(op as u8), Some(op));
        }
        assert_eq!(Opcode::from_u8(0x15), None); // reserved RC code
        assert_eq!(Opcode::from_u8(0x20), Some(UcSendFirst));
        assert_eq!(Opcode::from_u8(0x2C), None); // UC reserved
        assert_eq!(Opcode::from_u8(0x40), None); // RD
        assert_eq!(Opcode::from_u8(0x80), None); // XRC / reserved
        assert_eq!(Opcode::try_from(0x64), Ok(UdSendOnly));
        assert_eq!(Opcode::try_from(0x1F), Err(0x1F));
    }

    /// IBTA Vol 1 Table 38, header presence per opcode: (RETH, AETH, ImmDt, IETH, DETH).
    #[test]
    fn header_presence_matches_table_38() {
        #[rustfmt::skip]
        let table: [(Opcode, [bool; 5]); 38] = [
            (RcSendFirst,              [false, false, false, false, false]),
            (RcSendMiddle,             [false, false, false, false, false]),
            (RcSendLast,               [false, false, false, false, false]),
            (RcSendLastImm,            [false, false, true,  false, false]),
            (RcSendOnly,               [false, false, false, false, false]),
            (RcSendOnlyImm,            [false, false, true,  false, false]),
            (RcRdmaWriteFirst,         [true,  false, false, false, false]),
            (RcRdmaWriteMiddle,        [false, false, false, false, false]),
            (RcRdmaWriteLast,          [false, false, false, false, false]),
            (RcRdmaWriteLastImm,       [false, false, true,  false, false]),
            (RcRdmaWriteOnly,          [true,  false, false, false, false]),
            (RcRdmaWriteOnlyImm,       [true,  false, true,  false, false]),
            (RcRdmaReadRequest,        [true,  false, false, false, false]),
            (RcRdmaReadResponseFirst,  [false, true,  false, false, false]),
            (RcRdmaReadResponseMiddle, [false, false, false, false, false]),
            (RcRdmaReadResponseLast,   [false, true,  false, false, false]),
            (RcRdmaReadResponseOnly,   [false, true,  false, false, false]),
            (RcAcknowledge,            [false, true,  false, false, false]),
            (RcAtomicAcknowledge,      [false, true,  false, false, false]),
            (RcCompareSwap,            [false, false, false, false, false]),
            (RcFetchAdd,               [false, false, false, false, false]),
            (RcSendLastInv,            [false, false, false, true,  false]),
            (RcSendOnlyInv,            [false, false, false, true,  false]),
            (UcSendFirst,              [false, false, false, false, false]),
            (UcSendMiddle,             [false, false, false, false, false]),
            (UcSendLast,               [false, false, false, false, false]),
            (UcSendLastImm,            [false, false, true,  false, false]),
            (UcSendOnly,               [false, false, false, false, false]),
            (UcSendOnlyImm,            [false, false, true,  false, false]),
            (UcRdmaWriteFirst,         [true,  false, false, false, false]),
            (UcRdmaWriteMiddle,        [false, false, false, false, false]),
            (UcRdmaWriteLast,          [false, false, false, false, false]),
            (UcRdmaWriteLastImm,       [false, false, true,  false, false]),
            (UcRdmaWriteOnly,          [true,  false, false, false, false]),
            (UcRdmaWriteOnlyImm,       [true,  false, true,  false, false]),
            (UdSendOnly,               [false, false, false, false, true ]),
            (UdSendOnlyImm,            [false, false, true,  false, true ]),
            (Cnp,                      [false, false, false, false, false]),
        ];
        for (op, [reth, aeth, imm, ieth, deth]) in table {
            assert_eq!(op.has_reth(), reth, "{op:?} RETH");
            assert_eq!(op.has_aeth(), aeth, "{op:?} AETH");
            assert_eq!(op.has_immdt(), imm, "{op:?} ImmDt");
            assert_eq!(op.has_ieth(), ieth, "{op:?} IETH");
            assert_eq!(op.has_deth(), deth, "{op:?} DETH");
            let len = 16 * reth as usize
                + 4 * aeth as usize
                + 4 * imm as usize
                + 4 * ieth as usize
                + 8 * deth as usize;
            assert_eq!(op.ext_headers_len(), len, "{op:?} length");
        }
        assert!(RcCompareSwap.has_atomic_eth() && RcFetchAdd.has_atomic_eth());
        assert!(RcAtomicAcknowledge.has_atomic_ack_eth());
    }

    #[test]
    fn transport_and_kind() {
        for op in Opcode::ALL {
            let v = op as u8;
            assert_eq!(op.is_rc(), v < 0x20, "{op:?}");
            assert_eq!(op.is_ud(), (0x60..0x80).contains(&v), "{op:?}");
            assert_eq!(op.is_uc(), (0x20..0x40).contains(&v), "{op:?}");
            // Every RC/UC/UD opcode is exactly one of request or response.
            if op != Cnp {
                assert!(op.is_request() ^ op.is_response(), "{op:?}");
            }
            // Position: exactly one of first, middle, last, or single-packet.
            let single = op.starts_message() && op.ends_message();
            let n = op.is_first() as u8 + op.is_middle() as u8 + op.is_last() as u8 + single as u8;
            assert_eq!(n, 1, "{op:?}");
            if op.is_only() {
                assert!(single, "{op:?}");
            }
        }
        assert!(!Cnp.is_request() && !Cnp.is_response() && !Cnp.is_rc() && !Cnp.is_ud());
        assert!(RcRdmaReadRequest.is_request() && !RcRdmaReadRequest.is_read_response());
        assert!(RcSendOnlyInv.is_send() && RcSendOnlyInv.is_only());
        assert!(UdSendOnlyImm.is_send() && UdSendOnlyImm.is_ud());
        assert!(RcRdmaWriteLastImm.is_rdma_write() && RcRdmaWriteLastImm.is_last());
        assert!(RcRdmaReadResponseMiddle.is_read_response());
        assert!(RcAcknowledge.starts_message() && RcAcknowledge.ends_message());
        assert!(!RcAcknowledge.is_only());
        assert!(RcSendFirst.starts_message() && !RcSendFirst.ends_message());
        assert!(!RcSendLastInv.starts_message() && RcSendLastInv.ends_message());
    }
}
