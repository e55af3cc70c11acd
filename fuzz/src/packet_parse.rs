//! Target `packet_parse`: every decoder of bytes that come off the network.
//!
//! The whole input is offered, as is, to:
//! - [`wire::parse`] (a RoCEv2 UDP payload: BTH, extended headers, payload, pad, ICRC;
//!   IBTA Vol 1 §9.2-9.3, RoCEv2 Annex A17). Where it succeeds, the headers are
//!   written back and parsed again (same headers, same payload, lengths add up), and
//!   [`wire::build`] makes a packet whose ICRC verifies and that parses to the same
//!   headers (PadCnt normalised) and payload. A UD SEND's payload is decoded as a MAD.
//! - the ICRC ([`wire::verify`], [`wire::icrc_segments`] split at input-chosen points
//!   must equal [`wire::icrc`] of the whole; [`wire::parse_verified`] agrees with
//!   `verify` + `parse`; [`wire::icrc_from_ip_packet`] on the bytes as an IP packet),
//! - the MAD / CM decoders ([`MadHeader::parse_cm`], [`CmMessage::decode`], whose
//!   result must encode and decode back to itself, [`CmaHeader::parse`]) and the
//!   NVMe/RDMA CM private data ([`RdmaCmRequest::parse`] and friends),
//! - the link-frame parser ([`LinkFrame`] as Ethernet and as raw IP: IP packet, UDP
//!   datagram, ICRC inputs) that the AF_XDP path reads received frames with,
//! - the ANA log page ([`nvme::ana::AnaLog::decode`], which must encode back to itself).
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use nvme::rdma::{RdmaCmAccept, RdmaCmReject, RdmaCmRequest};
use transport::wire::cm::{CmMessage, CmaHeader};
use transport::wire::frame::LinkFrame;
use transport::wire::mad::{MadHeader, MAD_LEN};
use transport::wire::{
    self, icrc, icrc_from_ip_packet, icrc_segments, pad_for, parse, parse_verified, verify,
    AethSyndrome, IcrcIpInfo, Opcode, ParseError, ROCE_V2_UDP_DPORT,
};

/// The ICRC inputs used for packets without a real IP header: one IPv4, one IPv6.
fn ip_infos() -> [IcrcIpInfo; 2] {
    [
        IcrcIpInfo {
            src: IpAddr::V4(Ipv4Addr::new(192, 168, 77, 11)),
            dst: IpAddr::V4(Ipv4Addr::new(192, 168, 77, 10)),
            ipv4_id: 0,
            udp_sport: 0xC01A,
            udp_dport: ROCE_V2_UDP_DPORT,
        },
        IcrcIpInfo {
            src: IpAddr::V6(Ipv6Addr::new(0xfd77, 0, 0, 0, 0, 0, 0, 0x11)),
            dst: IpAddr::V6(Ipv6Addr::new(0xfd77, 0, 0, 0, 0, 0, 0, 0x10)),
            ipv4_id: 0,
            udp_sport: 0xD3F2,
            udp_dport: ROCE_V2_UDP_DPORT,
        },
    ]
}

/// Runs one input through every decoder; panics on a broken invariant.
pub fn run(data: &[u8]) {
    roce_packet(data);
    icrc_checks(data);
    mad(data);
    private_data(data);
    link_frames(data);
    ana_log(data);
}

fn roce_packet(data: &[u8]) {
    let Ok(pkt) = parse(data) else {
        return;
    };
    let hdr = pkt.hdr;
    assert!(
        hdr.matches_opcode(),
        "parse gave headers not matching the opcode"
    );
    let pad = usize::from(hdr.bth.pad_count);
    assert!(pad <= 3);
    assert_eq!(
        hdr.len() + pkt.payload.len() + pad + wire::ICRC_LEN,
        data.len(),
        "headers + payload + pad + ICRC must cover the packet"
    );
    // AETH syndrome: decode . encode . decode is decode.
    if let Some(aeth) = hdr.aeth {
        let s = AethSyndrome::decode(aeth.syndrome);
        assert_eq!(AethSyndrome::decode(s.encode()), s);
    }

    // Written back with the same PadCnt and zero pad, it parses to the same thing.
    let mut again = vec![0u8; hdr.len()];
    assert_eq!(hdr.write(&mut again), hdr.len());
    again.extend_from_slice(pkt.payload);
    again.extend_from_slice(&[0u8; 3][..pad]);
    again.extend_from_slice(&[0u8; 4]);
    let p2 = parse(&again).expect("re-serialized packet parses");
    assert_eq!(p2.hdr, hdr);
    assert_eq!(p2.payload, pkt.payload);

    // `build` normalises PadCnt and appends a verifying ICRC.
    for ip in ip_infos() {
        let mut out = Vec::new();
        wire::build(&hdr, pkt.payload, &ip, &mut out);
        assert!(verify(&ip, &out), "built packet's ICRC must verify");
        let p3 = parse_verified(&out, &ip).expect("built packet parses");
        let mut want = hdr;
        want.bth.pad_count = pad_for(pkt.payload.len());
        assert_eq!(p3.hdr, want);
        assert_eq!(p3.payload, pkt.payload);
    }

    // CM MADs travel in UD SEND Only to QP1.
    if hdr.bth.opcode == Opcode::UdSendOnly {
        mad(pkt.payload);
    }
}

fn icrc_checks(data: &[u8]) {
    let Some(body_len) = data.len().checked_sub(wire::ICRC_LEN) else {
        for ip in ip_infos() {
            assert!(!verify(&ip, data));
            assert_eq!(parse_verified(data, &ip).err(), Some(ParseError::BadIcrc));
        }
        return;
    };
    let body = &data[..body_len];
    // Split points chosen by the input's first bytes (segments may cut the BTH).
    let a = data.first().map_or(0, |&b| usize::from(b) % (body_len + 1));
    let b = data
        .get(1)
        .map_or(0, |&b| a + usize::from(b) % (body_len - a + 1));
    for ip in ip_infos() {
        let whole = icrc(&ip, body);
        assert_eq!(
            icrc_segments(&ip, &[&body[..a], &body[a..b], &body[b..]]),
            whole,
            "ICRC over segments split at {a}, {b} of {body_len}"
        );
        assert_eq!(icrc_segments(&ip, &[&[], body, &[]]), whole);
        let ok = verify(&ip, data);
        let stored = u32::from_le_bytes(data[body_len..].try_into().expect("4 bytes"));
        assert_eq!(ok, stored == whole);
        match parse_verified(data, &ip) {
            Ok(p) => assert_eq!(Ok(p), parse(data)),
            Err(ParseError::BadIcrc) => assert!(!ok),
            Err(e) => assert_eq!(Err(e), parse(data).map(|_| ())),
        }
    }
    // The same bytes as a whole IPv4/IPv6 packet.
    let _ = icrc_from_ip_packet(data);
}

fn mad(data: &[u8]) {
    if let Ok((hdr, rest)) = MadHeader::parse_cm(data) {
        assert_eq!(rest.len(), MAD_LEN - 24);
        if let Ok((h2, msg)) = CmMessage::decode(data) {
            assert_eq!(h2, hdr);
            assert_eq!(msg.attribute_id(), hdr.attribute_id.get());
            let tid = hdr.transaction_id.get();
            let encoded = msg.encode(tid);
            let (h3, back) = CmMessage::decode(&encoded).expect("encoded CM message decodes");
            assert_eq!(back, msg, "CM message round trip");
            assert_eq!(h3.transaction_id.get(), tid);
            if let CmMessage::Req(req) = &msg {
                private_data(&req.private_data);
            }
        }
    }
}

/// The ANA log page (NVMe Base 2.x §5.16.1.12), as a host reads it from a target: a
/// decoded log encodes to bytes that decode to the same log.
fn ana_log(data: &[u8]) {
    if let Ok(log) = nvme::ana::AnaLog::decode(data) {
        let again = nvme::ana::AnaLog::decode(&log.encode(false));
        assert_eq!(again.as_ref(), Ok(&log), "ANA log round trip");
    }
}

fn private_data(data: &[u8]) {
    if let Some(h) = CmaHeader::parse(data) {
        assert!(matches!(h.ip_version(), 4 | 6));
        assert!(h.src_ip().is_some() && h.dst_ip().is_some());
        let _ = RdmaCmRequest::parse(&data[36..]);
    }
    let _ = RdmaCmRequest::parse(data);
    let _ = RdmaCmAccept::parse(data);
    let _ = RdmaCmReject::parse(data);
}

fn link_frames(data: &[u8]) {
    for f in [LinkFrame::ethernet(data), LinkFrame::raw_ip(data)] {
        let _ = f.ip_packet();
        if let Some(u) = f.udp() {
            assert!(u.payload.len() <= u.ip_packet.len());
            let _ = u.icrc_info();
            if u.dst_port == ROCE_V2_UDP_DPORT {
                let _ = parse_verified(u.payload, &u.icrc_info());
            }
        }
    }
}
