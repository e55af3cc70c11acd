//! Wire layouts of the IBA transport headers RoCEv2 carries (IBTA Vol 1 §9.2, §9.3),
//! as zerocopy `#[repr(C)]` structs of network-order (big endian) fields.
//!
//! These are the raw bytes; [`packet`](super::packet) converts them to and from the
//! plain-value structs ([`Bth`](super::Bth), [`Reth`](super::Reth), ...). Fields narrower
//! than a byte or 24 bits wide are packed into a byte or 32-bit word as on the wire and
//! reached through the accessor methods and `*_MASK` constants.
use zerocopy::byteorder::network_endian::{U16, U32, U64};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout, Unaligned};

/// Base Transport Header length (IBTA §9.2), bytes.
pub const BTH_LEN: usize = 12;
/// RDMA Extended Transport Header length (IBTA §9.3.3), bytes.
pub const RETH_LEN: usize = 16;
/// ACK Extended Transport Header length (IBTA §9.3.5), bytes.
pub const AETH_LEN: usize = 4;
/// Datagram Extended Transport Header length (IBTA §9.3.2), bytes.
pub const DETH_LEN: usize = 8;
/// Immediate Data extended header length (IBTA §9.3.6), bytes.
pub const IMMDT_LEN: usize = 4;
/// Invalidate Extended Transport Header length (IBTA §9.3.7), bytes.
pub const IETH_LEN: usize = 4;
/// Atomic Extended Transport Header length (IBTA §9.3.4), bytes.
pub const ATOMIC_ETH_LEN: usize = 28;
/// Atomic Acknowledge Extended Transport Header length (IBTA §9.3.5), bytes.
pub const ATOMIC_ACK_ETH_LEN: usize = 8;
/// Invariant CRC trailer length (IBTA §7.8.1; RoCEv2 Annex A17.3.3), bytes.
pub const ICRC_LEN: usize = 4;
/// Longest header sequence [`PacketHeaders`](super::PacketHeaders) can hold that occurs
/// on the wire (BTH + RETH + ImmDt, RDMA WRITE Only with Immediate), bytes.
pub const MAX_HEADERS_LEN: usize = BTH_LEN + RETH_LEN + IMMDT_LEN;

/// Mask of a 24-bit field (QPN, PSN, MSN).
pub const U24_MASK: u32 = 0x00FF_FFFF;

/// BTH byte 1: Solicited Event bit.
pub const BTH_SE: u8 = 0x80;
/// BTH byte 1: MigReq bit.
pub const BTH_MIGREQ: u8 = 0x40;
/// BTH byte 1: PadCnt field shift (bits 5:4).
pub const BTH_PAD_SHIFT: u8 = 4;
/// BTH byte 1: Transport header version field (bits 3:0).
pub const BTH_TVER_MASK: u8 = 0x0F;
/// BTH word 4..8: FECN bit.
pub const BTH_FECN: u32 = 0x8000_0000;
/// BTH word 4..8: BECN bit.
pub const BTH_BECN: u32 = 0x4000_0000;
/// BTH word 8..12: AckReq bit.
pub const BTH_ACKREQ: u32 = 0x8000_0000;

/// Base Transport Header (IBTA Vol 1 §9.2, Figure 117), 12 bytes:
///
/// | byte | bits |
/// | --- | --- |
/// | 0 | OpCode |
/// | 1 | SE (7), M (6), PadCnt (5:4), TVer (3:0) |
/// | 2-3 | P_Key |
/// | 4 | FECN (7), BECN (6), reserved (5:0) — masked to ones in the ICRC |
/// | 5-7 | DestQP |
/// | 8 | AckReq (7), reserved (6:0) |
/// | 9-11 | PSN |
#[derive(
    Clone,
    Copy,
    Debug,
    Default,
    PartialEq,
    Eq,
    FromBytes,
    IntoBytes,
    KnownLayout,
    Immutable,
    Unaligned,
)]
#[repr(C)]
pub struct BthRaw {
    pub opcode: u8,
    /// SE, MigReq, PadCnt, TVer.
    pub flags: u8,
    pub pkey: U16,
    /// FECN (bit 31), BECN (bit 30), reserved, DestQP (bits 23:0).
    pub fecn_becn_dest_qp: U32,
    /// AckReq (bit 31), reserved, PSN (bits 23:0).
    pub ack_req_psn: U32,
}
const _: () = assert!(core::mem::size_of::<BthRaw>() == BTH_LEN);

impl BthRaw {
    /// Destination QP number (24 bits).
    pub fn dest_qp(&self) -> u32 {
        self.fecn_becn_dest_qp.get() & U24_MASK
    }

    /// Packet sequence number (24 bits).
    pub fn psn(&self) -> u32 {
        self.ack_req_psn.get() & U24_MASK
    }

    /// AckReq bit.
    pub fn ack_req(&self) -> bool {
        self.ack_req_psn.get() & BTH_ACKREQ != 0
    }

    /// PadCnt (0..=3).
    pub fn pad_count(&self) -> u8 {
        (self.flags >> BTH_PAD_SHIFT) & 0x3
    }

    /// TVer (0 for IBTA 1.x).
    pub fn tver(&self) -> u8 {
        self.flags & BTH_TVER_MASK
    }
}

/// RDMA Extended Transport Header (IBTA Vol 1 §9.3.3, Figure 120), 16 bytes: virtual
/// address (64 bits), R_Key (32), DMA length (32, bytes).
#[derive(
    Clone,
    Copy,
    Debug,
    Default,
    PartialEq,
    Eq,
    FromBytes,
    IntoBytes,
    KnownLayout,
    Immutable,
    Unaligned,
)]
#[repr(C)]
pub struct RethRaw {
    pub va: U64,
    pub rkey: U32,
    pub dma_len: U32,
}
const _: () = assert!(core::mem::size_of::<RethRaw>() == RETH_LEN);

/// ACK Extended Transport Header (IBTA Vol 1 §9.3.5, Figure 122), 4 bytes: syndrome
/// (byte 0) and 24-bit MSN (bytes 1-3).
#[derive(
    Clone,
    Copy,
    Debug,
    Default,
    PartialEq,
    Eq,
    FromBytes,
    IntoBytes,
    KnownLayout,
    Immutable,
    Unaligned,
)]
#[repr(C)]
pub struct AethRaw {
    /// Syndrome (bits 31:24), MSN (bits 23:0).
    pub syndrome_msn: U32,
}
const _: () = assert!(core::mem::size_of::<AethRaw>() == AETH_LEN);

impl AethRaw {
    /// The syndrome byte.
    pub fn syndrome(&self) -> u8 {
        (self.syndrome_msn.get() >> 24) as u8
    }

    /// Message sequence number (24 bits).
    pub fn msn(&self) -> u32 {
        self.syndrome_msn.get() & U24_MASK
    }
}

/// Datagram Extended Transport Header (IBTA Vol 1 §9.3.2, Figure 119), 8 bytes: Q_Key
/// (32 bits), reserved byte, source QP (24 bits).
#[derive(
    Clone,
    Copy,
    Debug,
    Default,
    PartialEq,
    Eq,
    FromBytes,
    IntoBytes,
    KnownLayout,
    Immutable,
    Unaligned,
)]
#[repr(C)]
pub struct DethRaw {
    pub qkey: U32,
    /// Reserved (bits 31:24), SrcQP (bits 23:0).
    pub src_qp: U32,
}
const _: () = assert!(core::mem::size_of::<DethRaw>() == DETH_LEN);

/// Immediate Data extended header (IBTA Vol 1 §9.3.6), 4 bytes, opaque to the
/// transport; read here as a big-endian number.
#[derive(
    Clone,
    Copy,
    Debug,
    Default,
    PartialEq,
    Eq,
    FromBytes,
    IntoBytes,
    KnownLayout,
    Immutable,
    Unaligned,
)]
#[repr(C)]
pub struct ImmDtRaw {
    pub imm: U32,
}
const _: () = assert!(core::mem::size_of::<ImmDtRaw>() == IMMDT_LEN);

/// Invalidate Extended Transport Header (IBTA Vol 1 §9.3.7), 4 bytes: the R_Key the
/// responder invalidates on SEND with Invalidate.
#[derive(
    Clone,
    Copy,
    Debug,
    Default,
    PartialEq,
    Eq,
    FromBytes,
    IntoBytes,
    KnownLayout,
    Immutable,
    Unaligned,
)]
#[repr(C)]
pub struct IethRaw {
    pub rkey: U32,
}
const _: () = assert!(core::mem::size_of::<IethRaw>() == IETH_LEN);

/// Atomic Extended Transport Header (IBTA Vol 1 §9.3.4, Figure 121), 28 bytes: virtual
/// address, R_Key, swap (or add) data, compare data. Follows the BTH of Compare & Swap
/// and Fetch & Add; [`parse`](super::parse) leaves it in the payload.
#[derive(
    Clone,
    Copy,
    Debug,
    Default,
    PartialEq,
    Eq,
    FromBytes,
    IntoBytes,
    KnownLayout,
    Immutable,
    Unaligned,
)]
#[repr(C)]
pub struct AtomicEthRaw {
    pub va: U64,
    pub rkey: U32,
    pub swap_add: U64,
    pub compare: U64,
}
const _: () = assert!(core::mem::size_of::<AtomicEthRaw>() == ATOMIC_ETH_LEN);

/// Atomic Acknowledge Extended Transport Header (IBTA Vol 1 §9.3.5, Figure 123), 8
/// bytes: the original remote data. Follows the AETH of Atomic Acknowledge;
/// [`parse`](super::parse) leaves it in the payload.
#[derive(
    Clone,
    Copy,
    Debug,
    Default,
    PartialEq,
    Eq,
    FromBytes,
    IntoBytes,
    KnownLayout,
    Immutable,
    Unaligned,
)]
#[repr(C)]
pub struct AtomicAckEthRaw {
    pub orig_data: U64,
}
const _: () = assert!(core::mem::size_of::<AtomicAckEthRaw>() == ATOMIC_ACK_ETH_LEN);

#[cfg(test)]
mod tests {
    use super::*;

    /// BTH of frame 7 of linux-nvme-rdma-rxe.pcap-like bytes: SEND Only, P_Key 0xFFFF,
    /// DestQP 0x11, AckReq, PSN 0x29fa4c.
    #[test]
    fn bth_fields_at_their_bytes() {
        let bytes = [
            0x04, 0x00, 0xff, 0xff, 0x00, 0x00, 0x00, 0x11, 0x80, 0x29, 0xfa, 0x4c,
        ];
        let (bth, rest) = BthRaw::ref_from_prefix(&bytes).expect("12 bytes");
        assert!(rest.is_empty());
        assert_eq!(bth.opcode, 0x04);
        assert_eq!(bth.pkey.get(), 0xFFFF);
        assert_eq!(bth.dest_qp(), 0x11);
        assert!(bth.ack_req());
        assert_eq!(bth.psn(), 0x29fa4c);
        assert_eq!(bth.pad_count(), 0);
        assert_eq!(bth.tver(), 0);
        assert_eq!(bth.as_bytes(), &bytes);
    }

    #[test]
    fn aeth_and_deth_fields() {
        let aeth = AethRaw::read_from_bytes(&[0x1f, 0x00, 0x00, 0x05]).expect("4 bytes");
        assert_eq!((aeth.syndrome(), aeth.msn()), (0x1F, 5));
        let deth = DethRaw::read_from_bytes(&[0x80, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01])
            .expect("8 bytes");
        assert_eq!((deth.qkey.get(), deth.src_qp.get()), (0x8001_0000, 1));
    }
}
