//! BTH opcodes (IBTA Vol 1 §9.2, Table 37): the high 3 bits select the transport
//! (000 RC, 011 UD, 100 CNP), the low 5 bits the operation.
//!
//! TODO(wire helper): `Opcode::from_u8` and the header-presence predicates.

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
    UdSendOnly = 0x64,
    UdSendOnlyImm = 0x65,
    /// RoCEv2 Congestion Notification Packet (Annex A17.9.3).
    Cnp = 0x81,
}
