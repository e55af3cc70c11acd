//! The RoCEv2 Invariant CRC (IBTA Vol 1 §7.8.1; RoCEv2 Annex A17.3.3).
//!
//! ICRC = CRC-32 (the Ethernet / zlib polynomial, as `crc32fast`) over
//!
//! 1. 8 bytes of 0xFF (the masked LRH of an IB packet),
//! 2. the IP header with its variant fields set to ones: IPv4 ToS, TTL and header
//!    checksum; IPv6 traffic class, flow label and hop limit. The IPv4 identification,
//!    total length, flags / fragment offset, protocol and addresses are covered,
//! 3. the UDP header with the checksum set to ones,
//! 4. the BTH with byte 4 (FECN, BECN, reserved) set to ones,
//! 5. the rest of the UDP payload up to the ICRC (extended headers, payload, pad).
//!
//! The result is stored **little endian** in the last 4 bytes of the UDP payload (as
//! Linux rxe and every capture in `shared/captures` do).
use std::net::{IpAddr, Ipv6Addr};

use super::headers::{BTH_LEN, ICRC_LEN};

/// CRC-32 of the 8 x 0xFF masked-LRH prefix; every ICRC continues from it.
const PREFIX_CRC: u32 = 0x2144_DF1C;
/// Byte of the BTH masked to ones (FECN, BECN, reserved).
const BTH_MASKED_BYTE: usize = 4;
/// IPv4 header length without options, bytes.
const IPV4_HDR_LEN: usize = 20;
/// IPv4 header length with the most options, bytes.
const IPV4_MAX_HDR_LEN: usize = 60;
/// IPv6 fixed header length, bytes.
const IPV6_HDR_LEN: usize = 40;
/// UDP header length, bytes.
const UDP_HDR_LEN: usize = 8;
/// IP protocol / next header number of UDP.
const IPPROTO_UDP: u8 = 17;
/// Room for the masked IP and UDP headers plus the BTH.
const PSEUDO_MAX: usize = IPV4_MAX_HDR_LEN + UDP_HDR_LEN + BTH_LEN;

/// The IP and UDP header fields the ICRC covers, for packets this host sends or
/// receives with the header layout Linux rxe uses.
///
/// IPv4 (both addresses IPv4 or IPv4-mapped IPv6 `::ffff:a.b.c.d`, as a dual-stack
/// socket reports IPv4 peers): version 4, IHL 5, no options, DF set, fragment offset 0,
/// total length = 20 + 8 + UDP payload length (ICRC included), protocol 17.
/// IPv6 (otherwise; an IPv4 address is then taken as IPv4-mapped): payload length =
/// 8 + UDP payload length, next header 17, no extension headers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct IcrcIpInfo {
    pub src: IpAddr,
    pub dst: IpAddr,
    /// IPv4 identification field (covered by the ICRC); unused for IPv6. A Linux UDP
    /// socket sends 0 here on unconnected sockets with DF set.
    pub ipv4_id: u16,
    pub udp_sport: u16,
    /// UDP destination port, normally [`ROCE_V2_UDP_DPORT`](super::ROCE_V2_UDP_DPORT).
    pub udp_dport: u16,
}

impl IcrcIpInfo {
    /// Whether the packet travels over IPv4 (both addresses IPv4 or IPv4-mapped), so
    /// that its header has an identification field.
    pub fn is_ipv4(&self) -> bool {
        matches!(
            (canonical(self.src), canonical(self.dst)),
            (IpAddr::V4(_), IpAddr::V4(_))
        )
    }

    /// Writes the masked IP and UDP headers for a UDP payload of `udp_payload_len` bytes
    /// (ICRC included) into `buf`; returns their length (28 or 48).
    fn write_masked(&self, udp_payload_len: usize, buf: &mut [u8; GATHER_MAX]) -> usize {
        let udp_len = UDP_HDR_LEN + udp_payload_len;
        let ip_len = match (canonical(self.src), canonical(self.dst)) {
            (IpAddr::V4(src), IpAddr::V4(dst)) => {
                let total = (IPV4_HDR_LEN + udp_len) as u16;
                buf[0] = 0x45;
                buf[1] = 0xFF; // ToS
                buf[2..4].copy_from_slice(&total.to_be_bytes());
                buf[4..6].copy_from_slice(&self.ipv4_id.to_be_bytes());
                buf[6..8].copy_from_slice(&[0x40, 0x00]); // DF, offset 0
                buf[8] = 0xFF; // TTL
                buf[9] = IPPROTO_UDP;
                buf[10..12].copy_from_slice(&[0xFF, 0xFF]); // header checksum
                buf[12..16].copy_from_slice(&src.octets());
                buf[16..20].copy_from_slice(&dst.octets());
                IPV4_HDR_LEN
            }
            (src, dst) => {
                buf[0..4].copy_from_slice(&[0x6F, 0xFF, 0xFF, 0xFF]); // TC, flow label
                buf[4..6].copy_from_slice(&(udp_len as u16).to_be_bytes());
                buf[6] = IPPROTO_UDP;
                buf[7] = 0xFF; // hop limit
                buf[8..24].copy_from_slice(&as_v6(src).octets());
                buf[24..40].copy_from_slice(&as_v6(dst).octets());
                IPV6_HDR_LEN
            }
        };
        let udp = &mut buf[ip_len..ip_len + UDP_HDR_LEN];
        udp[0..2].copy_from_slice(&self.udp_sport.to_be_bytes());
        udp[2..4].copy_from_slice(&self.udp_dport.to_be_bytes());
        udp[4..6].copy_from_slice(&(udp_len as u16).to_be_bytes());
        udp[6..8].copy_from_slice(&[0xFF, 0xFF]); // checksum
        ip_len + UDP_HDR_LEN
    }
}

/// IPv4-mapped IPv6 addresses as IPv4 (they never appear in IPv6 headers on the wire).
fn canonical(a: IpAddr) -> IpAddr {
    match a {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(a, IpAddr::V4),
        IpAddr::V4(_) => a,
    }
}

fn as_v6(a: IpAddr) -> Ipv6Addr {
    match a {
        IpAddr::V4(a) => a.to_ipv6_mapped(),
        IpAddr::V6(a) => a,
    }
}

/// Packets whose UDP payload is at most this long are copied behind the pseudo headers
/// and hashed in one call (faster for small packets such as ACKs).
const SMALL_PAYLOAD_MAX: usize = 192;
/// Stack buffer for the masked headers and, for small packets, the whole payload.
const GATHER_MAX: usize = PSEUDO_MAX + SMALL_PAYLOAD_MAX;

/// CRC over `buf[..n]` (masked IP + UDP headers), then the BTH taken from the front of
/// `segments` with byte 4 masked, then the rest of `segments` (`total` bytes in all).
fn crc_after_headers(
    buf: &mut [u8; GATHER_MAX],
    n: usize,
    segments: &[&[u8]],
    total: usize,
) -> u32 {
    // Gather the BTH (it may straddle segments), or everything if small, behind the
    // IP/UDP headers.
    let want = if total <= SMALL_PAYLOAD_MAX {
        total
    } else {
        BTH_LEN.min(total)
    };
    let end = n + want;
    let mut pos = n;
    let mut seg = 0;
    let mut off = 0;
    while pos < end && seg < segments.len() {
        let s = segments[seg];
        let k = (end - pos).min(s.len());
        buf[pos..pos + k].copy_from_slice(&s[..k]);
        pos += k;
        if k == s.len() {
            seg += 1;
        } else {
            off = k;
        }
    }
    if pos > n + BTH_MASKED_BYTE {
        buf[n + BTH_MASKED_BYTE] = 0xFF;
    }
    let mut h = crc32fast::Hasher::new_with_initial(PREFIX_CRC);
    h.update(&buf[..pos]);
    if let Some((first, rest)) = segments.get(seg..).and_then(<[&[u8]]>::split_first) {
        h.update(&first[off..]);
        for s in rest {
            h.update(s);
        }
    }
    h.finalize()
}

/// The ICRC of a RoCEv2 packet whose UDP payload without the ICRC is `udp_payload`
/// (BTH .. pad), sent with the IP/UDP fields in `ip`.
pub fn icrc(ip: &IcrcIpInfo, udp_payload_without_icrc: &[u8]) -> u32 {
    icrc_segments(ip, &[udp_payload_without_icrc])
}

/// [`icrc`] over a UDP payload (without ICRC) given as consecutive slices, e.g. the
/// headers from one buffer, the payload from registered memory and the pad, without
/// concatenating them. The BTH may straddle slices.
pub fn icrc_segments(ip: &IcrcIpInfo, segments: &[&[u8]]) -> u32 {
    let len: usize = segments.iter().map(|s| s.len()).sum();
    let mut buf = [0u8; GATHER_MAX];
    let n = ip.write_masked(len + ICRC_LEN, &mut buf);
    crc_after_headers(&mut buf, n, segments, len)
}

/// Whether the last 4 bytes of `udp_payload_with_icrc` (little endian) are the ICRC of
/// the rest for `ip`. False for fewer than 4 bytes.
pub fn verify(ip: &IcrcIpInfo, udp_payload_with_icrc: &[u8]) -> bool {
    match stored_icrc(udp_payload_with_icrc) {
        Some((body, stored)) => icrc(ip, body) == stored,
        None => false,
    }
}

/// Splits a UDP payload into the part the ICRC covers and the stored (little-endian)
/// ICRC; `None` for fewer than 4 bytes.
pub fn stored_icrc(udp_payload_with_icrc: &[u8]) -> Option<(&[u8], u32)> {
    let body_len = udp_payload_with_icrc.len().checked_sub(ICRC_LEN)?;
    let (body, tail) = udp_payload_with_icrc.split_at(body_len);
    let stored = u32::from_le_bytes(tail.try_into().ok()?);
    Some((body, stored))
}

/// Recomputes the ICRC of a captured IPv4 or IPv6 packet from its real header fields
/// (IPv4 options allowed; IPv6 extension headers not). The packet may carry trailing
/// link-layer padding: the IP length fields bound it. Any UDP port is accepted.
///
/// Returns `(computed, stored)`, or `None` if this is not an IP/UDP packet long enough
/// to hold a BTH and an ICRC, or its length fields disagree with `ip_packet`.
pub fn icrc_from_ip_packet(ip_packet: &[u8]) -> Option<(u32, u32)> {
    let mut buf = [0u8; GATHER_MAX];
    let version = ip_packet.first()? >> 4;
    let (ip_hdr_len, end) = match version {
        4 => {
            let ihl = usize::from(ip_packet[0] & 0x0F) * 4;
            let total = usize::from(u16::from_be_bytes(ip_packet.get(2..4)?.try_into().ok()?));
            if ihl < IPV4_HDR_LEN || *ip_packet.get(9)? != IPPROTO_UDP {
                return None;
            }
            buf[..ihl].copy_from_slice(ip_packet.get(..ihl)?);
            buf[1] = 0xFF; // ToS
            buf[8] = 0xFF; // TTL
            buf[10..12].copy_from_slice(&[0xFF, 0xFF]);
            (ihl, total)
        }
        6 => {
            let plen = usize::from(u16::from_be_bytes(ip_packet.get(4..6)?.try_into().ok()?));
            if *ip_packet.get(6)? != IPPROTO_UDP {
                return None;
            }
            buf[..IPV6_HDR_LEN].copy_from_slice(ip_packet.get(..IPV6_HDR_LEN)?);
            buf[0] |= 0x0F;
            buf[1..4].copy_from_slice(&[0xFF, 0xFF, 0xFF]);
            buf[7] = 0xFF; // hop limit
            (IPV6_HDR_LEN, IPV6_HDR_LEN + plen)
        }
        _ => return None,
    };
    let udp_payload_at = ip_hdr_len + UDP_HDR_LEN;
    if end > ip_packet.len() || end < udp_payload_at + BTH_LEN + ICRC_LEN {
        return None;
    }
    buf[ip_hdr_len..udp_payload_at].copy_from_slice(&ip_packet[ip_hdr_len..udp_payload_at]);
    buf[udp_payload_at - 2..udp_payload_at].copy_from_slice(&[0xFF, 0xFF]); // UDP checksum
    let (body, stored) = stored_icrc(&ip_packet[udp_payload_at..end])?;
    Some((
        crc_after_headers(&mut buf, udp_payload_at, &[body], body.len()),
        stored,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    #[test]
    fn prefix_constant_is_crc_of_eight_ones_bytes() {
        assert_eq!(crc32fast::hash(&[0xFF; 8]), PREFIX_CRC);
    }

    fn v4() -> IcrcIpInfo {
        IcrcIpInfo {
            src: Ipv4Addr::new(192, 168, 77, 11).into(),
            dst: Ipv4Addr::new(192, 168, 77, 10).into(),
            ipv4_id: 0x1234,
            udp_sport: 0xD872,
            udp_dport: 4791,
        }
    }

    /// The ICRC equals the plain zlib CRC-32 over the documented byte sequence.
    #[test]
    fn matches_reference_definition() {
        let payload: Vec<u8> = (0..76u8).collect();
        let mut reference = vec![0xFF; 8];
        #[rustfmt::skip]
        reference.extend_from_slice(&[
            0x45, 0xFF, 0, 20 + 8 + 80, 0x12, 0x34, 0x40, 0, 0xFF, 17, 0xFF, 0xFF,
            192, 168, 77, 11, 192, 168, 77, 10,
            0xD8, 0x72, 0x12, 0xB7, 0, 8 + 80, 0xFF, 0xFF,
        ]);
        let mut masked = payload.clone();
        masked[4] = 0xFF;
        reference.extend_from_slice(&masked);
        assert_eq!(icrc(&v4(), &payload), crc32fast::hash(&reference));
    }

    #[test]
    fn segments_equal_contiguous_wherever_split() {
        let payload: Vec<u8> = (0..200u32).map(|i| (i * 7) as u8).collect();
        let whole = icrc(&v4(), &payload);
        for cut1 in [0, 1, 4, 5, 11, 12, 13, 100, 200] {
            for cut2 in [cut1, cut1 + (200 - cut1) / 2, 200] {
                let segs = [&payload[..cut1], &payload[cut1..cut2], &payload[cut2..]];
                assert_eq!(icrc_segments(&v4(), &segs), whole, "cuts {cut1} {cut2}");
            }
        }
        assert_eq!(icrc_segments(&v4(), &[]), icrc(&v4(), &[]));
    }

    #[test]
    fn verify_detects_any_flipped_bit() {
        let mut pkt: Vec<u8> = (0..64u8).collect();
        let crc = icrc(&v4(), &pkt);
        pkt.extend_from_slice(&crc.to_le_bytes());
        assert!(verify(&v4(), &pkt));
        for bit in 0..(pkt.len() * 8) {
            let mut bad = pkt.clone();
            bad[bit / 8] ^= 1 << (bit % 8);
            // Byte 4 of the BTH is masked: FECN/BECN/reserved changes do not count.
            assert_eq!(verify(&v4(), &bad), bit / 8 == 4, "bit {bit}");
        }
        let mut other = v4();
        other.ipv4_id += 1;
        assert!(!verify(&other, &pkt));
        assert!(!verify(&v4(), &pkt[..3]));
    }

    #[test]
    fn ip_packet_form_agrees_with_info_form() {
        let body: Vec<u8> = (0..40u8).collect();
        for info in [
            v4(),
            IcrcIpInfo {
                src: "fd77::11".parse().expect("addr"),
                dst: "fd77::10".parse().expect("addr"),
                ..v4()
            },
        ] {
            let crc = icrc(&info, &body);
            let udp_len = (8 + body.len() + 4) as u16;
            let mut p = Vec::new();
            match (info.src, info.dst) {
                (IpAddr::V4(s), IpAddr::V4(d)) => {
                    p.extend_from_slice(&[0x45, 0x00]);
                    p.extend_from_slice(&(20 + udp_len).to_be_bytes());
                    p.extend_from_slice(&info.ipv4_id.to_be_bytes());
                    p.extend_from_slice(&[0x40, 0, 64, 17, 0xAB, 0xCD]);
                    p.extend_from_slice(&s.octets());
                    p.extend_from_slice(&d.octets());
                }
                (s, d) => {
                    p.extend_from_slice(&[0x60, 0x01, 0x23, 0x45]);
                    p.extend_from_slice(&udp_len.to_be_bytes());
                    p.extend_from_slice(&[17, 64]);
                    p.extend_from_slice(&as_v6(s).octets());
                    p.extend_from_slice(&as_v6(d).octets());
                }
            }
            p.extend_from_slice(&info.udp_sport.to_be_bytes());
            p.extend_from_slice(&info.udp_dport.to_be_bytes());
            p.extend_from_slice(&udp_len.to_be_bytes());
            p.extend_from_slice(&[0x12, 0x34]);
            p.extend_from_slice(&body);
            p.extend_from_slice(&crc.to_le_bytes());
            p.extend_from_slice(&[0, 0]); // link-layer padding
            assert_eq!(icrc_from_ip_packet(&p), Some((crc, crc)), "{info:?}");
        }
        assert_eq!(icrc_from_ip_packet(&[0x45, 0, 0]), None);
    }

    #[test]
    fn ipv4_mapped_addresses_mean_ipv4() {
        let body = [0x11u8; 16];
        let mut mapped = v4();
        for a in [&mut mapped.src, &mut mapped.dst] {
            if let IpAddr::V4(v) = *a {
                *a = IpAddr::V6(v.to_ipv6_mapped());
            }
        }
        assert_eq!(icrc(&mapped, &body), icrc(&v4(), &body));
        let mut half = v4();
        half.src = mapped.src;
        assert_eq!(icrc(&half, &body), icrc(&v4(), &body));
    }
}
