//! RoCEv2 on the wire (IBTA Vol 1 ch. 9 packet formats; RoCEv2 Annex A17).
//!
//! A RoCEv2 packet is the UDP payload (destination port [`ROCE_V2_UDP_DPORT`]):
//! BTH (12 B), then extended headers by opcode (RETH 16, AETH 4, DETH 8, ImmDt 4,
//! IETH 4), the payload, 0..=3 pad bytes, and the 4-byte ICRC, stored little endian.
//!
//! [`parse`] turns bytes into a [`Packet`] (headers as plain values plus a payload
//! slice); [`PacketHeaders::write`] writes headers back. [`icrc()`] computes the ICRC.
//! `mad` and `cm` hold the management datagram and CM message layouts.
pub mod cm;
pub mod frame;
pub mod headers;
pub mod icrc;
pub mod icrc_rx;
pub mod mad;
pub mod opcode;
pub mod packet;

pub use headers::*;
pub use icrc::*;
pub use icrc_rx::{IcrcCheck, IcrcChecker};
pub use opcode::*;
pub use packet::*;

/// UDP destination port of RoCEv2 (IANA), both directions.
pub const ROCE_V2_UDP_DPORT: u16 = 4791;
/// UDP source port Linux rxe uses for QP1 (CM MADs).
pub const ROCE_V2_QP1_UDP_SPORT: u16 = 55410;
/// The Q_Key of QP1 (GSI), IBTA §13.5.3.
pub const GSI_QKEY: u32 = 0x8001_0000;
/// The default P_Key.
pub const DEFAULT_PKEY: u16 = 0xFFFF;

/// RoCEv2 UDP source port from a GRH flow label, as Linux computes it
/// (`rdma_get_udp_sport`): `0xC000 | ((fl & 0x3FFF) ^ ((fl & 0xFC000) >> 14))`.
pub fn udp_sport_from_flow_label(fl: u32) -> u16 {
    let fl = fl & 0xF_FFFF;
    (0xC000 | ((fl & 0x3FFF) ^ ((fl & 0xFC000) >> 14))) as u16
}

/// The flow label RDMA CM derives for a connection from the IP CM source port and the
/// destination port (`rdma_flow_label`-style: `(sport * 31 + dport) & 0xFFFFF`).
pub fn cm_flow_label(src_port: u16, dst_port: u16) -> u32 {
    (src_port as u32 * 31 + dst_port as u32) & 0xF_FFFF
}
