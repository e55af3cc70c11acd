//! Parsed RoCEv2 packets: headers as plain values, payload as a slice.
//!
//! TODO(wire helper): implement `parse` and `PacketHeaders::{len, write}` on top of the
//! zerocopy layouts in `headers.rs`.
use super::Opcode;

/// Base Transport Header fields (IBTA Vol 1 §9.2, 12 bytes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Bth {
    pub opcode: Opcode,
    /// Solicited event.
    pub se: bool,
    pub migreq: bool,
    /// Pad bytes (0..=3) between the payload and the ICRC.
    pub pad_count: u8,
    /// Transport header version (0).
    pub tver: u8,
    pub pkey: u16,
    /// Forward explicit congestion notification (RoCEv2: carried in IP ECN instead; 0).
    pub fecn: bool,
    pub becn: bool,
    /// Destination QP number (24 bits).
    pub dest_qp: u32,
    /// Acknowledge request (A bit).
    pub ack_req: bool,
    /// Packet sequence number (24 bits).
    pub psn: u32,
}

/// RDMA Extended Transport Header (IBTA §9.3.3, 16 bytes): virtual address, rkey and
/// DMA length of an RDMA WRITE (First/Only) or RDMA READ Request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Reth {
    pub va: u64,
    pub rkey: u32,
    pub dma_len: u32,
}

/// ACK Extended Transport Header (IBTA §9.3.5, 4 bytes): syndrome and 24-bit MSN.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Aeth {
    /// Raw syndrome byte; see [`AethSyndrome`].
    pub syndrome: u8,
    /// Message sequence number (24 bits).
    pub msn: u32,
}

/// Datagram Extended Transport Header (IBTA §9.3.2, 8 bytes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Deth {
    pub qkey: u32,
    /// Source QP (24 bits).
    pub src_qp: u32,
}

/// NAK codes of the AETH syndrome (IBTA §9.7.5.2.2, Table 43).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NakCode {
    PsnSequenceError,
    InvalidRequest,
    RemoteAccessError,
    RemoteOperationalError,
    InvalidRdRequest,
    /// Reserved codes.
    Reserved(u8),
}

/// Decoded AETH syndrome (IBTA §9.3.5 Table 42).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AethSyndrome {
    /// ACK; `credits` is the 5-bit credit code, 0b11111 meaning "no credit information".
    Ack { credits: u8 },
    /// RNR NAK; `timer` is the 5-bit RNR timer code (IBTA Table 45).
    RnrNak { timer: u8 },
    Nak(NakCode),
    /// Reserved syndrome (bits 6:5 = 10).
    Reserved(u8),
}

/// All headers of one packet as plain values.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PacketHeaders {
    pub bth: Bth,
    pub deth: Option<Deth>,
    pub reth: Option<Reth>,
    pub aeth: Option<Aeth>,
    /// Immediate data (ImmDt), big endian on the wire.
    pub imm: Option<u32>,
    /// Invalidate ETH: the rkey to invalidate (SEND with Invalidate).
    pub ieth: Option<u32>,
}

/// A parsed RoCEv2 packet: headers plus the payload (without pad and ICRC).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Packet<'a> {
    pub hdr: PacketHeaders,
    pub payload: &'a [u8],
}

/// Why a UDP payload is not a well-formed RoCEv2 packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    #[error("packet too short for its headers and ICRC")]
    TooShort,
    #[error("unknown or unsupported BTH opcode {0:#04x}")]
    UnknownOpcode(u8),
    #[error("unsupported transport header version {0}")]
    BadTver(u8),
    #[error("pad count larger than the payload")]
    BadPad,
    #[error("bad ICRC")]
    BadIcrc,
}
