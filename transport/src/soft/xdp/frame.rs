//! Ethernet + IPv4/IPv6 + UDP headers in front of a RoCEv2 packet, written here since
//! an AF_XDP socket sends whole frames. They are what the provider's UDP sockets make
//! the kernel send ([`crate::soft::socket`]), so the ICRC rules stay the same: IPv4
//! without options, ID 0 and DF, ECT(0), TTL 64, the header checksum, UDP checksum 0;
//! IPv6 with traffic class ECT(0), flow label 0, hop limit 64 and the UDP checksum
//! computed (RFC 8200 §8.1). Received frames are parsed by
//! [`crate::wire::frame::LinkFrame::udp`], the one parser of Ethernet frames.
use std::net::{IpAddr, SocketAddr};

use zerocopy::byteorder::network_endian::U16;
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout, Unaligned};

use crate::wire::frame::{
    LinkFrame, UdpDatagram, ETHERTYPE_IPV4, ETHERTYPE_IPV6, ETH_HDR_LEN, IPPROTO_UDP,
};

/// IPv4 header length without options, bytes.
pub const IPV4_HDR_LEN: usize = 20;
/// IPv6 fixed header length, bytes.
pub const IPV6_HDR_LEN: usize = 40;
/// UDP header length, bytes.
pub const UDP_HDR_LEN: usize = 8;
/// ECN field value ECT(0), as the provider's sockets set it.
/// TTL / hop limit of what we send (Linux's default).
const HOP_LIMIT: u8 = 64;
/// IPv4 flags: Don't Fragment.
const IPV4_DF: u16 = 0x4000;

/// A MAC address.
pub type MacAddr = [u8; 6];

/// Ethernet II header.
#[derive(Clone, Copy, FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned)]
#[repr(C)]
struct EthHdr {
    dst: MacAddr,
    src: MacAddr,
    ethertype: U16,
}
const _: () = assert!(core::mem::size_of::<EthHdr>() == ETH_HDR_LEN);

/// IPv4 header without options (RFC 791 §3.1).
#[derive(Clone, Copy, FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned)]
#[repr(C)]
struct Ipv4Hdr {
    version_ihl: u8,
    tos: u8,
    total_len: U16,
    id: U16,
    flags_frag: U16,
    ttl: u8,
    protocol: u8,
    checksum: U16,
    src: [u8; 4],
    dst: [u8; 4],
}
const _: () = assert!(core::mem::size_of::<Ipv4Hdr>() == IPV4_HDR_LEN);

/// IPv6 fixed header (RFC 8200 §3).
#[derive(Clone, Copy, FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned)]
#[repr(C)]
struct Ipv6Hdr {
    /// Version (4 bits), traffic class (8), flow label (20).
    version_tc_flow: [u8; 4],
    payload_len: U16,
    next_header: u8,
    hop_limit: u8,
    src: [u8; 16],
    dst: [u8; 16],
}
const _: () = assert!(core::mem::size_of::<Ipv6Hdr>() == IPV6_HDR_LEN);

/// UDP header (RFC 768).
#[derive(Clone, Copy, FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned)]
#[repr(C)]
struct UdpHdr {
    sport: U16,
    dport: U16,
    len: U16,
    checksum: U16,
}
const _: () = assert!(core::mem::size_of::<UdpHdr>() == UDP_HDR_LEN);

/// Both ends of a frame: link-layer and UDP/IP addresses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FrameEnds {
    pub src_mac: MacAddr,
    pub dst_mac: MacAddr,
    pub src: SocketAddr,
    pub dst: SocketAddr,
    /// The IPv4 ToS / IPv6 traffic class byte: DSCP in bits 7:2, ECN in 1:0
    /// ([`crate::soft::tos_byte`]).
    pub tos: u8,
}

/// Why headers could not be written.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    #[error("source {src} and destination {dst} are not of the same IP family")]
    MixedFamilies { src: IpAddr, dst: IpAddr },
    #[error("a {payload_len}-byte payload does not fit a {buf_len}-byte frame buffer")]
    TooLong { payload_len: usize, buf_len: usize },
}

/// Header bytes in front of the UDP payload: 42 for IPv4, 62 for IPv6.
pub const fn headers_len(ipv6: bool) -> usize {
    ETH_HDR_LEN + UDP_HDR_LEN + if ipv6 { IPV6_HDR_LEN } else { IPV4_HDR_LEN }
}

/// Writes the headers into `frame[..headers_len]` for the `payload_len`-byte UDP
/// payload that is (already, for IPv6's checksum) at `frame[headers_len..]`; returns
/// the frame's length.
///
/// # Errors
/// [`FrameError`]: addresses of two families, or a payload that does not fit `frame`
/// or a UDP length field.
pub fn write_headers(
    frame: &mut [u8],
    ends: &FrameEnds,
    payload_len: usize,
) -> Result<usize, FrameError> {
    let ipv6 = match (ends.src.ip(), ends.dst.ip()) {
        (IpAddr::V4(_), IpAddr::V4(_)) => false,
        (IpAddr::V6(_), IpAddr::V6(_)) => true,
        (src, dst) => return Err(FrameError::MixedFamilies { src, dst }),
    };
    let hl = headers_len(ipv6);
    let len = hl + payload_len;
    let ip_hdr_len = if ipv6 { IPV6_HDR_LEN } else { IPV4_HDR_LEN };
    if len > frame.len() || len - ETH_HDR_LEN > usize::from(u16::MAX) {
        return Err(FrameError::TooLong {
            payload_len,
            buf_len: frame.len(),
        });
    }
    let udp_len = (UDP_HDR_LEN + payload_len) as u16;
    let eth = EthHdr {
        dst: ends.dst_mac,
        src: ends.src_mac,
        ethertype: U16::new(if ipv6 { ETHERTYPE_IPV6 } else { ETHERTYPE_IPV4 }),
    };
    eth.write_to(&mut frame[..ETH_HDR_LEN])
        .expect("sized above");
    let ip_at = ETH_HDR_LEN;
    let udp_at = ip_at + ip_hdr_len;
    let mut udp = UdpHdr {
        sport: U16::new(ends.src.port()),
        dport: U16::new(ends.dst.port()),
        len: U16::new(udp_len),
        checksum: U16::new(0),
    };
    match (ends.src.ip(), ends.dst.ip()) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            let mut ip = Ipv4Hdr {
                version_ihl: 0x45,
                tos: ends.tos,
                total_len: U16::new((IPV4_HDR_LEN + usize::from(udp_len)) as u16),
                id: U16::new(0),
                flags_frag: U16::new(IPV4_DF),
                ttl: HOP_LIMIT,
                protocol: IPPROTO_UDP,
                checksum: U16::new(0),
                src: s.octets(),
                dst: d.octets(),
            };
            ip.checksum = U16::new(!fold(sum16(ip.as_bytes())));
            ip.write_to(&mut frame[ip_at..udp_at]).expect("sized above");
        }
        (IpAddr::V6(s), IpAddr::V6(d)) => {
            let ip = Ipv6Hdr {
                version_tc_flow: [0x60 | (ends.tos >> 4), ends.tos << 4, 0, 0],
                payload_len: U16::new(udp_len),
                next_header: IPPROTO_UDP,
                hop_limit: HOP_LIMIT,
                src: s.octets(),
                dst: d.octets(),
            };
            ip.write_to(&mut frame[ip_at..udp_at]).expect("sized above");
            // Pseudo-header (addresses, length, next header) + UDP header + payload.
            let sum = sum16(&ip.src)
                + sum16(&ip.dst)
                + u64::from(udp_len)
                + u64::from(IPPROTO_UDP)
                + sum16(udp.as_bytes())
                + sum16(&frame[hl..len]);
            let c = !fold(sum);
            udp.checksum = U16::new(if c == 0 { 0xFFFF } else { c });
        }
        _ => unreachable!("families checked above"),
    }
    udp.write_to(&mut frame[udp_at..hl]).expect("sized above");
    Ok(len)
}

/// The UDP datagram in a received Ethernet frame, or `None` when the frame is not
/// IPv4/IPv6 UDP or is cut short.
pub fn parse(frame: &[u8]) -> Option<UdpDatagram<'_>> {
    LinkFrame::ethernet(frame).udp()
}

/// Ones' complement sum of big-endian 16-bit words (an odd last byte padded with 0),
/// not yet folded.
fn sum16(b: &[u8]) -> u64 {
    let mut chunks = b.chunks_exact(2);
    let mut s: u64 = chunks
        .by_ref()
        .map(|c| u64::from(u16::from_be_bytes([c[0], c[1]])))
        .sum();
    if let [last] = chunks.remainder() {
        s += u64::from(*last) << 8;
    }
    s
}

fn fold(mut s: u64) -> u16 {
    while s > 0xFFFF {
        s = (s & 0xFFFF) + (s >> 16);
    }
    s as u16
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{Ipv4Addr, Ipv6Addr};

    const A: MacAddr = [0x02, 0, 0, 0, 0, 0xA];
    const B: MacAddr = [0x02, 0, 0, 0, 0, 0xB];

    fn ends(src: IpAddr, dst: IpAddr) -> FrameEnds {
        FrameEnds {
            src_mac: A,
            dst_mac: B,
            src: SocketAddr::new(src, 0xC001),
            dst: SocketAddr::new(dst, 4791),
            tos: crate::soft::ECN_ECT0,
        }
    }

    #[test]
    fn ipv4_headers_round_trip_through_the_parser() {
        let e = ends(
            Ipv4Addr::new(10, 47, 0, 1).into(),
            Ipv4Addr::new(10, 47, 0, 2).into(),
        );
        let mut f = vec![0u8; 128];
        let hl = headers_len(false);
        f[hl..hl + 5].copy_from_slice(b"hello");
        let n = write_headers(&mut f, &e, 5).unwrap();
        assert_eq!(n, 42 + 5);
        // A header checksum over a correct header sums to 0xFFFF.
        assert_eq!(fold(sum16(&f[14..34])), 0xFFFF);
        assert_eq!(&f[14..24], &[0x45, 0x02, 0, 33, 0, 0, 0x40, 0, 64, 17]);
        let d = parse(&f[..n]).unwrap();
        assert_eq!(
            (d.src, d.dst, d.src_port, d.dst_port),
            (e.src.ip(), e.dst.ip(), 0xC001, 4791)
        );
        assert_eq!((d.ipv4_id, d.payload), (0, &b"hello"[..]));
        assert_eq!(&f[..12], &[B, A].concat()[..]);
        assert_eq!(&f[40..42], &[0, 0], "IPv4 UDP checksum 0");
    }

    #[test]
    fn ipv6_udp_checksum_verifies() {
        let (s, d) = (
            Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 1),
            Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 2),
        );
        let e = ends(s.into(), d.into());
        let mut f = vec![0u8; 200];
        let hl = headers_len(true);
        for (i, b) in f[hl..hl + 33].iter_mut().enumerate() {
            *b = i as u8 * 7;
        }
        let n = write_headers(&mut f, &e, 33).unwrap();
        let dg = parse(&f[..n]).unwrap();
        assert_eq!(dg.payload.len(), 33);
        assert_eq!(&f[14..16], &[0x60, 0x20], "version 6, traffic class ECT(0)");
        // Receiver's check: pseudo-header + UDP header + payload (checksum included)
        // sums to 0xFFFF.
        let udp = &f[54..n];
        let sum = sum16(&s.octets()) + sum16(&d.octets()) + udp.len() as u64 + 17 + sum16(udp);
        assert_eq!(fold(sum), 0xFFFF);
    }

    #[test]
    fn bad_input_is_refused_or_ignored_never_a_panic() {
        let e = ends(Ipv4Addr::LOCALHOST.into(), Ipv6Addr::LOCALHOST.into());
        assert!(matches!(
            write_headers(&mut [0; 64], &e, 1),
            Err(FrameError::MixedFamilies { .. })
        ));
        let e = ends(Ipv4Addr::LOCALHOST.into(), Ipv4Addr::LOCALHOST.into());
        assert!(matches!(
            write_headers(&mut [0; 64], &e, 23),
            Err(FrameError::TooLong { .. })
        ));
        let mut f = vec![0u8; 64];
        let n = write_headers(&mut f, &e, 8).unwrap();
        for cut in 0..n {
            assert!(parse(&f[..cut]).is_none(), "a frame cut at {cut} bytes");
        }
        f[12] = 0x08;
        f[13] = 0x06; // ARP
        assert!(parse(&f[..n]).is_none());
        assert!(parse(&[0xFF; 3]).is_none());
    }
}
