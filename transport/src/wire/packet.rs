//! Parsed RoCEv2 packets: headers as plain values, payload as a slice.
//!
//! A RoCEv2 packet is a UDP payload (RoCEv2 Annex A17.2): BTH, the extended transport
//! headers the opcode implies (IBTA Vol 1 Table 38), the payload, PadCnt pad bytes and
//! the 4-byte ICRC. [`parse`] decodes one (without checking the ICRC, see
//! [`icrc`](mod@super::icrc)); [`PacketHeaders::write`] writes the headers back, and
//! [`build`] writes a whole packet including pad and ICRC.
use zerocopy::{FromBytes, IntoBytes};

use super::headers::*;
use super::icrc::{icrc_segments, IcrcIpInfo};
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
    Ack {
        credits: u8,
    },
    /// RNR NAK; `timer` is the 5-bit RNR timer code (IBTA Table 45).
    RnrNak {
        timer: u8,
    },
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

/// Pad bytes (0..=3) that bring a payload of `payload_len` bytes to a multiple of 4
/// (IBTA Vol 1 §9.2, PadCnt).
pub const fn pad_for(payload_len: usize) -> u8 {
    ((4 - payload_len % 4) % 4) as u8
}

/// Zero bytes to send as pad (slice `..pad_count`).
pub const PAD_ZEROS: [u8; 3] = [0; 3];

impl Bth {
    /// A BTH with Linux's defaults: P_Key 0xFFFF, TVer 0, SE 0, MigReq 0, PadCnt 0,
    /// FECN/BECN 0. `dest_qp` and `psn` are truncated to 24 bits.
    pub fn new(opcode: Opcode, dest_qp: u32, psn: u32, ack_req: bool) -> Bth {
        Bth {
            opcode,
            se: false,
            migreq: false,
            pad_count: 0,
            tver: 0,
            pkey: super::DEFAULT_PKEY,
            fecn: false,
            becn: false,
            dest_qp: dest_qp & U24_MASK,
            ack_req,
            psn: psn & U24_MASK,
        }
    }

    /// Decodes the wire layout. Errors: [`ParseError::UnknownOpcode`] for opcodes
    /// [`Opcode::from_u8`] does not know, [`ParseError::BadTver`] for TVer != 0.
    pub fn from_raw(raw: &BthRaw) -> Result<Bth, ParseError> {
        let opcode = Opcode::from_u8(raw.opcode).ok_or(ParseError::UnknownOpcode(raw.opcode))?;
        if raw.tver() != 0 {
            return Err(ParseError::BadTver(raw.tver()));
        }
        let word1 = raw.fecn_becn_dest_qp.get();
        Ok(Bth {
            opcode,
            se: raw.flags & BTH_SE != 0,
            migreq: raw.flags & BTH_MIGREQ != 0,
            pad_count: raw.pad_count(),
            tver: raw.tver(),
            pkey: raw.pkey.get(),
            fecn: word1 & BTH_FECN != 0,
            becn: word1 & BTH_BECN != 0,
            dest_qp: word1 & U24_MASK,
            ack_req: raw.ack_req(),
            psn: raw.psn(),
        })
    }

    /// The wire layout (reserved bits zero; 24-bit fields and PadCnt/TVer truncated).
    pub fn to_raw(&self) -> BthRaw {
        let flags = (if self.se { BTH_SE } else { 0 })
            | (if self.migreq { BTH_MIGREQ } else { 0 })
            | ((self.pad_count & 0x3) << BTH_PAD_SHIFT)
            | (self.tver & BTH_TVER_MASK);
        let word1 = (if self.fecn { BTH_FECN } else { 0 })
            | (if self.becn { BTH_BECN } else { 0 })
            | (self.dest_qp & U24_MASK);
        let word2 = (if self.ack_req { BTH_ACKREQ } else { 0 }) | (self.psn & U24_MASK);
        BthRaw {
            opcode: self.opcode.as_u8(),
            flags,
            pkey: self.pkey.into(),
            fecn_becn_dest_qp: word1.into(),
            ack_req_psn: word2.into(),
        }
    }
}

impl Reth {
    /// Decodes the wire layout.
    pub fn from_raw(raw: &RethRaw) -> Reth {
        Reth {
            va: raw.va.get(),
            rkey: raw.rkey.get(),
            dma_len: raw.dma_len.get(),
        }
    }

    /// The wire layout.
    pub fn to_raw(&self) -> RethRaw {
        RethRaw {
            va: self.va.into(),
            rkey: self.rkey.into(),
            dma_len: self.dma_len.into(),
        }
    }
}

impl Deth {
    /// Decodes the wire layout (the reserved byte is ignored).
    pub fn from_raw(raw: &DethRaw) -> Deth {
        Deth {
            qkey: raw.qkey.get(),
            src_qp: raw.src_qp.get() & U24_MASK,
        }
    }

    /// The wire layout (reserved byte zero, `src_qp` truncated to 24 bits).
    pub fn to_raw(&self) -> DethRaw {
        DethRaw {
            qkey: self.qkey.into(),
            src_qp: (self.src_qp & U24_MASK).into(),
        }
    }
}

impl Aeth {
    /// Syndrome Linux sends in every positive ACK: ACK with credit code 31 ("no credit
    /// information", IBTA §9.7.7.2.5).
    pub const ACK_SYNDROME: u8 = 0x1F;

    /// Positive acknowledgement as Linux sends it (syndrome 0x1F). `msn` is truncated to
    /// 24 bits.
    pub fn ack(msn: u32) -> Aeth {
        Aeth {
            syndrome: Self::ACK_SYNDROME,
            msn: msn & U24_MASK,
        }
    }

    /// NAK with the given code (IBTA §9.7.5.2.2, Table 43).
    pub fn nak(code: NakCode, msn: u32) -> Aeth {
        Aeth {
            syndrome: AethSyndrome::Nak(code).encode(),
            msn: msn & U24_MASK,
        }
    }

    /// RNR NAK with the 5-bit RNR timer code `timer` (IBTA §9.7.5.2.8, Table 45).
    pub fn rnr_nak(timer: u8, msn: u32) -> Aeth {
        Aeth {
            syndrome: AethSyndrome::RnrNak { timer }.encode(),
            msn: msn & U24_MASK,
        }
    }

    /// The decoded syndrome.
    pub fn decoded(&self) -> AethSyndrome {
        AethSyndrome::decode(self.syndrome)
    }

    /// Decodes the wire layout.
    pub fn from_raw(raw: &AethRaw) -> Aeth {
        Aeth {
            syndrome: raw.syndrome(),
            msn: raw.msn(),
        }
    }

    /// The wire layout (`msn` truncated to 24 bits).
    pub fn to_raw(&self) -> AethRaw {
        AethRaw {
            syndrome_msn: ((u32::from(self.syndrome) << 24) | (self.msn & U24_MASK)).into(),
        }
    }
}

impl NakCode {
    /// Decodes the 5-bit NAK code of an AETH syndrome (IBTA §9.7.5.2.2, Table 43).
    pub const fn from_u8(code: u8) -> NakCode {
        match code & 0x1F {
            0 => NakCode::PsnSequenceError,
            1 => NakCode::InvalidRequest,
            2 => NakCode::RemoteAccessError,
            3 => NakCode::RemoteOperationalError,
            4 => NakCode::InvalidRdRequest,
            c => NakCode::Reserved(c),
        }
    }

    /// The 5-bit NAK code.
    pub const fn as_u8(self) -> u8 {
        match self {
            NakCode::PsnSequenceError => 0,
            NakCode::InvalidRequest => 1,
            NakCode::RemoteAccessError => 2,
            NakCode::RemoteOperationalError => 3,
            NakCode::InvalidRdRequest => 4,
            NakCode::Reserved(c) => c & 0x1F,
        }
    }
}

impl AethSyndrome {
    /// Decodes an AETH syndrome byte (IBTA §9.3.5, Table 42): bit 7 reserved, bits 6:5
    /// type (00 ACK, 01 RNR NAK, 10 reserved, 11 NAK), bits 4:0 credit count, RNR
    /// timer or NAK code. For the reserved type the full byte is kept.
    pub const fn decode(syndrome: u8) -> AethSyndrome {
        let value = syndrome & 0x1F;
        match (syndrome >> 5) & 0x3 {
            0b00 => AethSyndrome::Ack { credits: value },
            0b01 => AethSyndrome::RnrNak { timer: value },
            0b11 => AethSyndrome::Nak(NakCode::from_u8(value)),
            _ => AethSyndrome::Reserved(syndrome),
        }
    }

    /// The syndrome byte (bit 7 zero; 5-bit values truncated).
    pub const fn encode(self) -> u8 {
        match self {
            AethSyndrome::Ack { credits } => credits & 0x1F,
            AethSyndrome::RnrNak { timer } => 0x20 | (timer & 0x1F),
            AethSyndrome::Nak(code) => 0x60 | code.as_u8(),
            AethSyndrome::Reserved(s) => s,
        }
    }

    /// A positive acknowledgement.
    pub const fn is_ack(self) -> bool {
        matches!(self, AethSyndrome::Ack { .. })
    }
}

impl PacketHeaders {
    /// Headers with only a BTH; set the extended headers the opcode needs.
    pub fn new(bth: Bth) -> PacketHeaders {
        PacketHeaders {
            bth,
            deth: None,
            reth: None,
            aeth: None,
            imm: None,
            ieth: None,
        }
    }

    /// Bytes of all headers present (BTH and the `Some` extended headers).
    #[allow(clippy::len_without_is_empty)]
    pub fn len(&self) -> usize {
        BTH_LEN
            + self.deth.map_or(0, |_| DETH_LEN)
            + self.reth.map_or(0, |_| RETH_LEN)
            + self.aeth.map_or(0, |_| AETH_LEN)
            + self.imm.map_or(0, |_| IMMDT_LEN)
            + self.ieth.map_or(0, |_| IETH_LEN)
    }

    /// Whether exactly the extended headers the opcode implies (IBTA Table 38) are
    /// present.
    pub fn matches_opcode(&self) -> bool {
        let op = self.bth.opcode;
        op.has_deth() == self.deth.is_some()
            && op.has_reth() == self.reth.is_some()
            && op.has_aeth() == self.aeth.is_some()
            && op.has_immdt() == self.imm.is_some()
            && op.has_ieth() == self.ieth.is_some()
    }

    /// Writes the BTH and the present extended headers in IBTA Table 38 order (BTH,
    /// DETH, RETH, AETH, ImmDt, IETH) to the start of `out`; returns [`Self::len`].
    /// Writes what is present, whether or not it [matches the
    /// opcode](Self::matches_opcode).
    ///
    /// Panics if `out` is shorter than [`Self::len`] (at most [`MAX_HEADERS_LEN`] for
    /// headers that match their opcode).
    pub fn write(&self, out: &mut [u8]) -> usize {
        let len = self.len();
        assert!(
            out.len() >= len,
            "PacketHeaders::write: buffer of {} bytes, headers need {len}",
            out.len()
        );
        let mut at = 0;
        let mut put = |bytes: &[u8]| {
            out[at..at + bytes.len()].copy_from_slice(bytes);
            at += bytes.len();
        };
        put(self.bth.to_raw().as_bytes());
        if let Some(deth) = &self.deth {
            put(deth.to_raw().as_bytes());
        }
        if let Some(reth) = &self.reth {
            put(reth.to_raw().as_bytes());
        }
        if let Some(aeth) = &self.aeth {
            put(aeth.to_raw().as_bytes());
        }
        if let Some(imm) = self.imm {
            put(&imm.to_be_bytes());
        }
        if let Some(rkey) = self.ieth {
            put(&rkey.to_be_bytes());
        }
        at
    }

    /// The headers as a fixed buffer and its used length, for senders that write headers
    /// into a small buffer and send the payload from elsewhere.
    ///
    /// Panics if the headers are longer than [`MAX_HEADERS_LEN`] (not possible for
    /// headers that [match their opcode](Self::matches_opcode)).
    pub fn to_bytes(&self) -> ([u8; MAX_HEADERS_LEN], usize) {
        let mut buf = [0u8; MAX_HEADERS_LEN];
        let n = self.write(&mut buf);
        (buf, n)
    }
}

/// Takes a `T` off the front of `bytes`, advancing it.
fn take<T: FromBytes>(bytes: &mut &[u8]) -> Result<T, ParseError> {
    let (v, rest) = T::read_from_prefix(bytes).map_err(|_| ParseError::TooShort)?;
    *bytes = rest;
    Ok(v)
}

/// Parses a RoCEv2 packet: `udp_payload` is the whole UDP payload (BTH .. ICRC).
///
/// Decodes the BTH and the extended headers its opcode implies (IBTA Vol 1 Table 38),
/// and returns the payload without PadCnt pad bytes and without the 4-byte ICRC. The
/// ICRC is NOT checked (see [`verify`](super::verify) and [`parse_verified`]). The
/// AtomicETH / AtomicAckETH of atomic opcodes are not decoded and stay at the start of
/// the payload.
///
/// Errors: [`ParseError::TooShort`] if the bytes cannot hold BTH, extended headers and
/// ICRC; [`ParseError::UnknownOpcode`]; [`ParseError::BadTver`] for TVer != 0;
/// [`ParseError::BadPad`] if PadCnt exceeds the payload.
pub fn parse(udp_payload: &[u8]) -> Result<Packet<'_>, ParseError> {
    let Some(body_len) = udp_payload.len().checked_sub(ICRC_LEN) else {
        return Err(ParseError::TooShort);
    };
    let mut rest = &udp_payload[..body_len];
    let raw = take::<BthRaw>(&mut rest)?;
    let bth = Bth::from_raw(&raw)?;
    let op = bth.opcode;
    let mut hdr = PacketHeaders::new(bth);
    if op.has_deth() {
        hdr.deth = Some(Deth::from_raw(&take::<DethRaw>(&mut rest)?));
    }
    if op.has_reth() {
        hdr.reth = Some(Reth::from_raw(&take::<RethRaw>(&mut rest)?));
    }
    if op.has_aeth() {
        hdr.aeth = Some(Aeth::from_raw(&take::<AethRaw>(&mut rest)?));
    }
    if op.has_immdt() {
        hdr.imm = Some(take::<ImmDtRaw>(&mut rest)?.imm.get());
    }
    if op.has_ieth() {
        hdr.ieth = Some(take::<IethRaw>(&mut rest)?.rkey.get());
    }
    let Some(payload_len) = rest.len().checked_sub(usize::from(bth.pad_count)) else {
        return Err(ParseError::BadPad);
    };
    Ok(Packet {
        hdr,
        payload: &rest[..payload_len],
    })
}

/// [`verify`](super::verify)s the ICRC against `ip`, then [`parse`]s.
///
/// Errors: [`ParseError::BadIcrc`] (also for fewer than 4 bytes), then those of
/// [`parse`].
pub fn parse_verified<'a>(
    udp_payload: &'a [u8],
    ip: &IcrcIpInfo,
) -> Result<Packet<'a>, ParseError> {
    if !super::icrc::verify(ip, udp_payload) {
        return Err(ParseError::BadIcrc);
    }
    parse(udp_payload)
}

/// Writes a whole RoCEv2 packet (the UDP payload) into `out`, replacing its contents:
/// `hdr` (with PadCnt set to [`pad_for`]`(payload.len())`, whatever `hdr` says), the
/// payload, zero pad bytes and the ICRC computed for `ip` (little endian).
pub fn build(hdr: &PacketHeaders, payload: &[u8], ip: &IcrcIpInfo, out: &mut Vec<u8>) {
    let pad = pad_for(payload.len());
    let mut hdr = *hdr;
    hdr.bth.pad_count = pad;
    let (hbuf, hlen) = hdr.encode_any();
    let pad_bytes = &PAD_ZEROS[..usize::from(pad)];
    let crc = icrc_segments(ip, &[&hbuf[..hlen], payload, pad_bytes]);
    out.clear();
    out.reserve(hlen + payload.len() + pad_bytes.len() + ICRC_LEN);
    out.extend_from_slice(&hbuf[..hlen]);
    out.extend_from_slice(payload);
    out.extend_from_slice(pad_bytes);
    out.extend_from_slice(&crc.to_le_bytes());
}

impl PacketHeaders {
    /// Like [`Self::to_bytes`] but with room for every optional header at once.
    fn encode_any(&self) -> ([u8; ALL_HEADERS_LEN], usize) {
        let mut buf = [0u8; ALL_HEADERS_LEN];
        let n = self.write(&mut buf);
        (buf, n)
    }
}

/// Bytes of a BTH with every optional extended header present.
const ALL_HEADERS_LEN: usize = BTH_LEN + DETH_LEN + RETH_LEN + AETH_LEN + IMMDT_LEN + IETH_LEN;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::icrc::{icrc, verify};
    use std::net::Ipv4Addr;

    fn ip() -> IcrcIpInfo {
        IcrcIpInfo {
            src: Ipv4Addr::new(192, 168, 77, 10).into(),
            dst: Ipv4Addr::new(192, 168, 77, 11).into(),
            ipv4_id: 7,
            udp_sport: 53208,
            udp_dport: 4791,
        }
    }

    /// Headers that match `op`, with distinct values in every field.
    fn headers_for(op: Opcode) -> PacketHeaders {
        let mut h = PacketHeaders::new(Bth::new(op, 0x12_3456, 0xAB_CDEF, true));
        if op.has_deth() {
            h.deth = Some(Deth {
                qkey: 0x8001_0000,
                src_qp: 1,
            });
        }
        if op.has_reth() {
            h.reth = Some(Reth {
                va: 0x7f5d_e0d2_1000,
                rkey: 0x286,
                dma_len: 65536,
            });
        }
        if op.has_aeth() {
            h.aeth = Some(Aeth::ack(5));
        }
        if op.has_immdt() {
            h.imm = Some(0xDEAD_BEEF);
        }
        if op.has_ieth() {
            h.ieth = Some(0x587);
        }
        h
    }

    #[test]
    fn bth_new_uses_linux_defaults_and_known_bytes() {
        let h = PacketHeaders::new(Bth::new(Opcode::RcSendOnly, 0x11, 0x29fa4c, true));
        let (buf, n) = h.to_bytes();
        assert_eq!(
            &buf[..n],
            &[0x04, 0x00, 0xff, 0xff, 0x00, 0x00, 0x00, 0x11, 0x80, 0x29, 0xfa, 0x4c]
        );
        let b = Bth::new(Opcode::RcAcknowledge, 0x1FF_FFFF, 0x100_0001, false);
        assert_eq!(
            (b.dest_qp, b.psn, b.pkey, b.tver),
            (0xFF_FFFF, 1, 0xFFFF, 0)
        );
    }

    #[test]
    fn every_opcode_round_trips_through_build_and_parse() {
        for op in Opcode::ALL {
            for payload_len in [0usize, 1, 2, 3, 4, 61] {
                let hdr = headers_for(op);
                assert!(hdr.matches_opcode());
                assert_eq!(hdr.len(), BTH_LEN + op.ext_headers_len());
                let payload: Vec<u8> = (0..payload_len as u8).collect();
                let mut out = Vec::new();
                build(&hdr, &payload, &ip(), &mut out);
                let pad = pad_for(payload_len);
                assert_eq!(
                    out.len(),
                    hdr.len() + payload_len + usize::from(pad) + ICRC_LEN
                );
                assert_eq!(out.len() % 4, 0, "{op:?}");
                assert!(verify(&ip(), &out));
                let pkt = parse_verified(&out, &ip()).expect("own packet parses");
                let mut want = hdr;
                want.bth.pad_count = pad;
                assert_eq!(pkt.hdr, want, "{op:?}");
                assert_eq!(pkt.payload, &payload[..], "{op:?}");
            }
        }
    }

    #[test]
    fn write_order_follows_table_38() {
        // RDMA WRITE Only with Immediate: BTH, RETH, ImmDt.
        let (buf, n) = headers_for(Opcode::RcRdmaWriteOnlyImm).to_bytes();
        assert_eq!(n, 32);
        assert_eq!(&buf[12..20], &0x7f5d_e0d2_1000u64.to_be_bytes());
        assert_eq!(&buf[28..32], &[0xDE, 0xAD, 0xBE, 0xEF]);
        // UD SEND Only with Immediate: BTH, DETH, ImmDt.
        let (buf, n) = headers_for(Opcode::UdSendOnlyImm).to_bytes();
        assert_eq!(
            &buf[12..n],
            &[0x80, 1, 0, 0, 0, 0, 0, 1, 0xDE, 0xAD, 0xBE, 0xEF]
        );
        // SEND Only with Invalidate: BTH, IETH.
        let (buf, n) = headers_for(Opcode::RcSendOnlyInv).to_bytes();
        assert_eq!(&buf[12..n], &[0, 0, 0x05, 0x87]);
        // READ Response First: BTH, AETH 0x1F + MSN.
        let (buf, n) = headers_for(Opcode::RcRdmaReadResponseFirst).to_bytes();
        assert_eq!(&buf[12..n], &[0x1F, 0, 0, 5]);
    }

    #[test]
    fn parse_rejects_malformed_packets() {
        let mut ok = Vec::new();
        build(
            &headers_for(Opcode::RcRdmaWriteFirst),
            &[1, 2, 3],
            &ip(),
            &mut ok,
        );
        assert!(parse(&ok).is_ok());
        // Too short: every truncation that cuts into BTH + RETH + ICRC.
        for len in 0..(BTH_LEN + RETH_LEN + ICRC_LEN) {
            assert_eq!(parse(&ok[..len]), Err(ParseError::TooShort), "len {len}");
        }
        let mut bad = ok.clone();
        bad[0] = 0x15;
        assert_eq!(parse(&bad), Err(ParseError::UnknownOpcode(0x15)));
        let mut bad = ok.clone();
        bad[1] |= 0x01;
        assert_eq!(parse(&bad), Err(ParseError::BadTver(1)));
        // PadCnt 3 on an empty payload.
        let mut hdr = PacketHeaders::new(Bth::new(Opcode::RcSendOnly, 1, 1, false));
        hdr.bth.pad_count = 3;
        let mut bad = vec![0u8; BTH_LEN + 2 + ICRC_LEN];
        hdr.write(&mut bad);
        assert_eq!(parse(&bad), Err(ParseError::BadPad));
        // A flipped payload bit fails the ICRC check.
        let mut bad = ok.clone();
        bad[BTH_LEN + RETH_LEN] ^= 0x10;
        assert!(parse(&bad).is_ok());
        assert_eq!(parse_verified(&bad, &ip()), Err(ParseError::BadIcrc));
    }

    #[test]
    fn pad_is_stripped() {
        let mut hdr = PacketHeaders::new(Bth::new(Opcode::RcSendOnly, 1, 1, false));
        hdr.bth.pad_count = 3;
        let mut bytes = vec![0u8; BTH_LEN];
        hdr.write(&mut bytes);
        bytes.extend_from_slice(&[0xAA, 0, 0, 0]);
        let crc = icrc(&ip(), &bytes);
        bytes.extend_from_slice(&crc.to_le_bytes());
        let pkt = parse(&bytes).expect("valid");
        assert_eq!(pkt.payload, &[0xAA]);
        assert_eq!(pkt.hdr.bth.pad_count, 3);
        assert_eq!(
            (
                pad_for(0),
                pad_for(1),
                pad_for(2),
                pad_for(3),
                pad_for(1024)
            ),
            (0, 3, 2, 1, 0)
        );
    }

    #[test]
    fn aeth_syndromes() {
        assert_eq!(Aeth::ack(5).syndrome, 0x1F);
        assert_eq!(
            AethSyndrome::decode(0x1F),
            AethSyndrome::Ack { credits: 31 }
        );
        assert_eq!(Aeth::rnr_nak(14, 1).syndrome, 0x2E);
        assert_eq!(
            Aeth::rnr_nak(14, 1).decoded(),
            AethSyndrome::RnrNak { timer: 14 }
        );
        for (code, byte) in [
            (NakCode::PsnSequenceError, 0x60),
            (NakCode::InvalidRequest, 0x61),
            (NakCode::RemoteAccessError, 0x62),
            (NakCode::RemoteOperationalError, 0x63),
            (NakCode::InvalidRdRequest, 0x64),
            (NakCode::Reserved(9), 0x69),
        ] {
            assert_eq!(Aeth::nak(code, 0).syndrome, byte);
            assert_eq!(AethSyndrome::decode(byte), AethSyndrome::Nak(code));
        }
        assert_eq!(AethSyndrome::decode(0x45), AethSyndrome::Reserved(0x45));
        for s in 0..=0x7Fu8 {
            assert_eq!(AethSyndrome::decode(s).encode(), s);
        }
        assert!(Aeth::ack(0).decoded().is_ack() && !Aeth::rnr_nak(0, 0).decoded().is_ack());
        let raw = Aeth {
            syndrome: 0x61,
            msn: 0x12_3456,
        }
        .to_raw();
        assert_eq!(raw.as_bytes(), &[0x61, 0x12, 0x34, 0x56]);
    }
}

/// Golden tests: every RoCEv2 packet Linux sent in `testdata/captures` parses, writes
/// back byte-exact, and its ICRC recomputes.
#[cfg(test)]
mod golden_tests {
    use super::*;
    use crate::test_captures::Capture;
    use crate::wire::icrc::{icrc_from_ip_packet, icrc_segments, verify};
    use std::collections::BTreeMap;

    use crate::test_captures::read as capture;

    struct Summary {
        roce: usize,
        opcodes: BTreeMap<u8, usize>,
        aeth_syndromes: BTreeMap<u8, usize>,
        /// Frames whose ICRC does not match, with their parse result.
        bad: Vec<(usize, Result<Opcode, ParseError>)>,
    }

    /// Checks every RoCEv2 packet of `name`; packets with a bad ICRC are collected,
    /// everything else must parse, round-trip and build byte-exact.
    fn check(name: &str) -> Summary {
        let bytes = capture(name);
        let pcap = Capture::parse(&bytes).expect("valid pcap");
        let mut s = Summary {
            roce: 0,
            opcodes: BTreeMap::new(),
            aeth_syndromes: BTreeMap::new(),
            bad: Vec::new(),
        };
        for (frame, udp) in pcap.roce() {
            s.roce += 1;
            let n = frame.number;
            let (computed, stored) =
                icrc_from_ip_packet(udp.ip_packet).unwrap_or_else(|| panic!("{name} #{n}: IP"));
            let info = udp.icrc_info();
            assert_eq!(
                verify(&info, udp.payload),
                computed == stored,
                "{name} #{n}"
            );
            if computed != stored {
                s.bad
                    .push((n, parse(udp.payload).map(|p| p.hdr.bth.opcode)));
                continue;
            }
            let pkt = parse(udp.payload).unwrap_or_else(|e| panic!("{name} #{n}: {e}"));
            let hdr = pkt.hdr;
            assert!(hdr.matches_opcode(), "{name} #{n}");
            *s.opcodes.entry(hdr.bth.opcode.as_u8()).or_default() += 1;
            if let Some(aeth) = hdr.aeth {
                *s.aeth_syndromes.entry(aeth.syndrome).or_default() += 1;
            }
            // Headers + payload + pad written back = the UDP payload minus the ICRC.
            let body = &udp.payload[..udp.payload.len() - ICRC_LEN];
            let (hbuf, hlen) = hdr.to_bytes();
            let pad = &PAD_ZEROS[..usize::from(hdr.bth.pad_count)];
            let rewritten = [&hbuf[..hlen], pkt.payload, pad].concat();
            assert_eq!(rewritten, body, "{name} #{n}: rewrite");
            // The ICRC over the split form equals the stored one, and build reproduces
            // the whole UDP payload.
            assert_eq!(
                icrc_segments(&info, &[&hbuf[..hlen], pkt.payload, pad]),
                stored
            );
            let mut built = Vec::new();
            build(&hdr, pkt.payload, &info, &mut built);
            assert_eq!(built, udp.payload, "{name} #{n}: build");
        }
        s
    }

    #[test]
    fn nvme_rdma_ipv4() {
        let s = check("linux-nvme-rdma-rxe.pcap");
        assert_eq!(s.roce, 490);
        assert!(s.bad.is_empty());
        let want: BTreeMap<u8, usize> = [
            (100, 15),
            (0, 5),
            (1, 12),
            (2, 5),
            (4, 82),
            (23, 33),
            (6, 28),
            (7, 93),
            (8, 28),
            (10, 2),
            (12, 3),
            (13, 1),
            (14, 30),
            (15, 1),
            (16, 2),
            (17, 150),
        ]
        .into();
        assert_eq!(s.opcodes, want);
        assert_eq!(s.aeth_syndromes, [(0x1F, 154)].into());
    }

    #[test]
    fn nvme_rdma_ipv6() {
        let s = check("linux-nvme-rdma-rxe-ipv6.pcap");
        assert_eq!(s.roce, 490);
        assert!(s.bad.is_empty());
        let v4 = check("linux-nvme-rdma-rxe.pcap");
        assert_eq!(s.opcodes, v4.opcodes);
    }

    #[test]
    fn perftest() {
        let s = check("linux-perftest-rxe.pcap");
        assert_eq!(s.roce, 690);
        assert!(s.bad.is_empty());
        let want: BTreeMap<u8, usize> = [
            (6, 5),
            (7, 310),
            (8, 5),
            (12, 5),
            (13, 5),
            (14, 310),
            (15, 5),
            (4, 20),
            (17, 25),
        ]
        .into();
        assert_eq!(s.opcodes, want);
    }

    #[test]
    fn nvme_rdma_errors_and_rping() {
        let s = check("linux-nvme-rdma-errors.pcap");
        assert_eq!((s.roce, s.bad.len()), (271, 0));
        let s = check("linux-rping-rxe.pcap");
        assert_eq!((s.roce, s.bad.len()), (41, 0));
    }

    /// Frame 4 is the deliberately corrupted datagram (ASCII text, trailer 0xdeadbeef):
    /// bad ICRC and no valid opcode. Frames 5 (host-built CM REQ) and 6 (Linux's CM REJ)
    /// are UD SEND Only to QP1 with correct ICRCs.
    #[test]
    fn roce_probe() {
        let s = check("e-roce-probe.pcap");
        assert_eq!(s.roce, 3);
        assert_eq!(s.bad, vec![(4, Err(ParseError::UnknownOpcode(0x6E)))]);
        assert_eq!(s.opcodes, [(100, 2)].into());
    }

    /// Known header values from the capture README.
    #[test]
    fn known_headers() {
        let bytes = capture("linux-nvme-rdma-rxe.pcap");
        let pcap = Capture::parse(&bytes).expect("valid pcap");
        let (_, req) = pcap.roce().find(|(f, _)| f.number == 4).expect("frame 4");
        let pkt = parse(req.payload).expect("CM REQ");
        assert_eq!(pkt.hdr.bth.opcode, Opcode::UdSendOnly);
        assert_eq!(pkt.hdr.bth.dest_qp, 1);
        assert_eq!(
            pkt.hdr.deth,
            Some(Deth {
                qkey: crate::wire::GSI_QKEY,
                src_qp: 1
            })
        );
        assert_eq!(pkt.payload.len(), 256);
        assert_eq!(req.src_port, crate::wire::ROCE_V2_QP1_UDP_SPORT);

        let bytes = capture("linux-perftest-rxe.pcap");
        let pcap = Capture::parse(&bytes).expect("valid pcap");
        let (_, first) = pcap.roce().find(|(f, _)| f.number == 22).expect("frame 22");
        let pkt = parse(first.payload).expect("WRITE First");
        let bth = pkt.hdr.bth;
        assert_eq!(
            (bth.opcode, bth.dest_qp, bth.psn),
            (Opcode::RcRdmaWriteFirst, 0x11, 0x43cd86)
        );
        assert_eq!((bth.pkey, bth.ack_req, bth.se), (0xFFFF, false, false));
        let reth = Reth {
            va: 0x0000_7f5d_e0d2_1000,
            rkey: 0x286,
            dma_len: 65536,
        };
        assert_eq!(pkt.hdr.reth, Some(reth));
        assert_eq!(pkt.payload.len(), 1024);
    }
}
