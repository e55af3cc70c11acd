//! The one parser of received link frames: Ethernet II (with at most one 802.1Q tag)
//! or raw IP, down to the IPv4/IPv6 UDP datagram inside, in particular RoCEv2 packets
//! (UDP destination port [`ROCE_V2_UDP_DPORT`]). The AF_XDP path reads its frames with
//! it ([`crate::soft::xdp`]); the tests read Linux's captures with it after the
//! `pcap-file` crate has split the files into frames.
//!
//! ```
//! use transport::wire::frame::LinkFrame;
//! let arp = [0u8; 42];
//! assert!(LinkFrame::ethernet(&arp).udp().is_none());
//! ```
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use super::icrc::IcrcIpInfo;
use super::ROCE_V2_UDP_DPORT;

/// What a frame's bytes begin with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LinkType {
    /// An Ethernet II header (pcap's LINKTYPE_ETHERNET, 1).
    Ethernet,
    /// The IPv4 or IPv6 header (pcap's LINKTYPE_RAW, 101).
    RawIp,
}

/// Ethernet II header length (destination MAC, source MAC, EtherType), bytes.
pub const ETH_HDR_LEN: usize = 14;
/// EtherType of IPv4.
pub const ETHERTYPE_IPV4: u16 = 0x0800;
/// EtherType of IPv6.
pub const ETHERTYPE_IPV6: u16 = 0x86DD;
const ETHERTYPE_VLAN: u16 = 0x8100;
/// IP protocol number of UDP.
pub const IPPROTO_UDP: u8 = 17;

/// One received or captured link frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LinkFrame<'a> {
    /// The frame's bytes, link-layer header included (none for [`LinkType::RawIp`]).
    pub data: &'a [u8],
    /// What the bytes begin with.
    pub link: LinkType,
}

/// The ECN codepoint CE (congestion experienced) in the low two bits of the IPv4 ToS
/// or IPv6 traffic class (RFC 3168).
pub const ECN_CE: u8 = 0x03;

/// A UDP datagram found in a [`LinkFrame`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UdpDatagram<'a> {
    /// The IP packet (header to end of UDP payload; link-layer padding removed).
    pub ip_packet: &'a [u8],
    pub src: IpAddr,
    pub dst: IpAddr,
    /// IPv4 identification; 0 for IPv6.
    pub ipv4_id: u16,
    pub src_port: u16,
    pub dst_port: u16,
    /// The UDP payload (for RoCEv2: BTH .. ICRC).
    pub payload: &'a [u8],
}

impl UdpDatagram<'_> {
    /// The IP header's ECN field (0..=3; [`ECN_CE`] when congestion was experienced).
    pub fn ecn(&self) -> u8 {
        let p = self.ip_packet;
        match p.first().map(|b| b >> 4) {
            Some(4) => p.get(1).map_or(0, |tos| tos & 3),
            // IPv6: the traffic class is bits 4..12 of the first word.
            Some(6) => p.get(1).map_or(0, |b| (b >> 4) & 3),
            _ => 0,
        }
    }
}

impl<'a> LinkFrame<'a> {
    /// An Ethernet II frame.
    pub fn ethernet(data: &'a [u8]) -> LinkFrame<'a> {
        LinkFrame {
            data,
            link: LinkType::Ethernet,
        }
    }

    /// A raw IPv4/IPv6 packet.
    pub fn raw_ip(data: &'a [u8]) -> LinkFrame<'a> {
        LinkFrame {
            data,
            link: LinkType::RawIp,
        }
    }

    /// The IPv4 or IPv6 packet in the frame (up to the end of the captured bytes; may
    /// include link-layer padding), or `None` for other frames.
    pub fn ip_packet(&self) -> Option<&'a [u8]> {
        if self.link == LinkType::RawIp {
            return Some(self.data);
        }
        let mut at = ETH_HDR_LEN;
        let mut ethertype = be16(self.data.get(12..14)?);
        if ethertype == ETHERTYPE_VLAN {
            ethertype = be16(self.data.get(16..18)?);
            at += 4;
        }
        match ethertype {
            ETHERTYPE_IPV4 | ETHERTYPE_IPV6 => self.data.get(at..),
            _ => None,
        }
    }

    /// The UDP datagram in the frame, if it is IPv4 (unfragmented) or IPv6 (next header
    /// UDP, no extension headers) carrying UDP.
    pub fn udp(&self) -> Option<UdpDatagram<'a>> {
        let ip = self.ip_packet()?;
        let (src, dst, ipv4_id, hdr_len, end) = match ip.first()? >> 4 {
            4 => {
                let ihl = usize::from(ip[0] & 0x0F) * 4;
                let total = usize::from(be16(ip.get(2..4)?));
                let frag = be16(ip.get(6..8)?) & 0x3FFF; // MF + offset
                if *ip.get(9)? != IPPROTO_UDP || frag != 0 || ihl < 20 {
                    return None;
                }
                let src: [u8; 4] = ip.get(12..16)?.try_into().ok()?;
                let dst: [u8; 4] = ip.get(16..20)?.try_into().ok()?;
                let id = be16(ip.get(4..6)?);
                (
                    Ipv4Addr::from(src).into(),
                    Ipv4Addr::from(dst).into(),
                    id,
                    ihl,
                    total,
                )
            }
            6 => {
                if *ip.get(6)? != IPPROTO_UDP {
                    return None;
                }
                let plen = usize::from(be16(ip.get(4..6)?));
                let src: [u8; 16] = ip.get(8..24)?.try_into().ok()?;
                let dst: [u8; 16] = ip.get(24..40)?.try_into().ok()?;
                (
                    Ipv6Addr::from(src).into(),
                    Ipv6Addr::from(dst).into(),
                    0,
                    40,
                    40 + plen,
                )
            }
            _ => return None,
        };
        let ip_packet = ip.get(..end)?;
        let udp = ip_packet.get(hdr_len..)?;
        let udp_len = usize::from(be16(udp.get(4..6)?));
        if udp_len < 8 {
            return None;
        }
        Some(UdpDatagram {
            ip_packet,
            src,
            dst,
            ipv4_id,
            src_port: be16(udp.get(0..2)?),
            dst_port: be16(udp.get(2..4)?),
            payload: udp.get(8..udp_len)?,
        })
    }

    /// [`Self::udp`], if the destination port is 4791 (RoCEv2).
    pub fn roce(&self) -> Option<UdpDatagram<'a>> {
        self.udp().filter(|u| u.dst_port == ROCE_V2_UDP_DPORT)
    }
}

impl UdpDatagram<'_> {
    /// The ICRC inputs of this datagram (exact for IPv4 without options with DF set, and
    /// for IPv6 without extension headers, as Linux rxe sends).
    pub fn icrc_info(&self) -> IcrcIpInfo {
        IcrcIpInfo {
            src: self.src,
            dst: self.dst,
            ipv4_id: self.ipv4_id,
            udp_sport: self.src_port,
            udp_dport: self.dst_port,
        }
    }
}

fn be16(b: &[u8]) -> u16 {
    u16::from_be_bytes([b[0], b[1]])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_captures::Capture;

    #[test]
    fn the_ecn_field_is_read_from_either_ip_version() {
        let d = |ip_packet: &'static [u8]| UdpDatagram {
            ip_packet,
            src: IpAddr::from([127, 0, 0, 1]),
            dst: IpAddr::from([127, 0, 0, 1]),
            ipv4_id: 0,
            src_port: 1,
            dst_port: 4791,
            payload: &[],
        };
        // IPv4: ToS 0xbb (DSCP 46, CE); IPv6: traffic class 0x02 (ECT(0)), then 0x03.
        assert_eq!(d(&[0x45, 0xbb, 0, 0]).ecn(), ECN_CE);
        assert_eq!(d(&[0x60, 0x20, 0, 0]).ecn(), 0x02);
        assert_eq!(d(&[0x60, 0x30, 0, 0]).ecn(), ECN_CE);
        assert_eq!(d(&[]).ecn(), 0);
    }

    /// Frame and UDP/4791 counts of the reference captures (testdata/captures/README.md).
    #[test]
    fn reference_capture_counts() {
        for (name, frames, roce) in [
            ("linux-nvme-rdma-rxe.pcap", 493, 490),
            ("linux-nvme-rdma-rxe-ipv6.pcap", 514, 490),
            ("linux-perftest-rxe.pcap", 802, 690),
            ("linux-nvme-rdma-errors.pcap", 275, 271),
            ("linux-rping-rxe.pcap", 44, 41),
            ("e-roce-probe.pcap", 6, 3),
        ] {
            let pcap = Capture::open(name);
            assert_eq!(pcap.frames().count(), frames, "{name}");
            assert_eq!(pcap.roce().count(), roce, "{name}");
            for (f, udp) in pcap.roce() {
                assert_eq!(f.data.len() as u32, f.orig_len, "{name}: full snaplen");
                assert_eq!(
                    udp.ip_packet.len() + ETH_HDR_LEN,
                    f.data.len(),
                    "{name} #{}",
                    f.number
                );
            }
        }
    }

    #[test]
    fn finds_udp_in_ethernet_vlan_and_raw_ip_frames() {
        let mut ip = vec![0x45, 0, 0, 32, 0x12, 0x34, 0x40, 0, 64, 17, 0, 0];
        ip.extend_from_slice(&[10, 0, 0, 1, 10, 0, 0, 2]);
        ip.extend_from_slice(&[0x30, 0x39, 0x12, 0xB7, 0, 12, 0, 0, 0xAA, 0xBB, 0xCC, 0xDD]);
        let mut eth = vec![0; 12];
        eth.extend_from_slice(&[0x08, 0x00]);
        eth.extend_from_slice(&ip);
        eth.extend_from_slice(&[0; 14]); // padding to 60 bytes
        let mut vlan = vec![0; 12];
        vlan.extend_from_slice(&[0x81, 0x00, 0x00, 0x05, 0x08, 0x00]);
        vlan.extend_from_slice(&ip);
        let arp = [0u8; 42];
        assert_eq!(LinkFrame::ethernet(&arp).udp(), None);
        for f in [
            LinkFrame::ethernet(&eth),
            LinkFrame::ethernet(&vlan),
            LinkFrame::raw_ip(&ip),
        ] {
            let udp = f.roce().expect("a RoCEv2 datagram");
            assert_eq!(udp.payload, &[0xAA, 0xBB, 0xCC, 0xDD], "{f:?}");
            assert_eq!(udp.ip_packet.len(), 32, "link padding removed");
            assert_eq!(
                (udp.src_port, udp.dst_port, udp.ipv4_id),
                (12345, 4791, 0x1234)
            );
            assert_eq!(udp.dst, IpAddr::from([10, 0, 0, 2]));
        }
        // Truncated headers are None, never a panic.
        for n in 0..eth.len() {
            let _ = LinkFrame::ethernet(&eth[..n]).udp();
        }
    }
}
