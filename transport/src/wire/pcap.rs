//! A minimal reader of classic pcap files (libpcap format, little endian, microsecond
//! or nanosecond timestamps) over a byte slice, for golden tests and tools.
//!
//! It walks Ethernet II frames (with at most one 802.1Q tag) or raw IP frames and hands
//! out the IPv4/IPv6 UDP datagrams in them, in particular RoCEv2 packets (UDP
//! destination port [`ROCE_V2_UDP_DPORT`]):
//!
//! ```no_run
//! use transport::wire::{parse, pcap::Pcap};
//! let bytes = std::fs::read("linux-rping-rxe.pcap")?;
//! let pcap = Pcap::new(&bytes)?;
//! for (frame, udp) in pcap.roce() {
//!     let pkt = parse(udp.payload)?;
//!     println!("frame {}: {:?} {} B", frame.number, pkt.hdr.bth.opcode, pkt.payload.len());
//! }
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use super::icrc::IcrcIpInfo;
use super::ROCE_V2_UDP_DPORT;

/// Magic of a little-endian pcap file with microsecond timestamps.
pub const PCAP_MAGIC_US: u32 = 0xA1B2_C3D4;
/// Magic of a little-endian pcap file with nanosecond timestamps.
pub const PCAP_MAGIC_NS: u32 = 0xA1B2_3C4D;
/// Link type of Ethernet frames.
pub const LINKTYPE_ETHERNET: u32 = 1;
/// Link type of raw IPv4/IPv6 packets.
pub const LINKTYPE_RAW: u32 = 101;

const GLOBAL_HDR_LEN: usize = 24;
const RECORD_HDR_LEN: usize = 16;
/// Ethernet II header length (destination MAC, source MAC, EtherType), bytes.
pub const ETH_HDR_LEN: usize = 14;
/// EtherType of IPv4.
pub const ETHERTYPE_IPV4: u16 = 0x0800;
/// EtherType of IPv6.
pub const ETHERTYPE_IPV6: u16 = 0x86DD;
const ETHERTYPE_VLAN: u16 = 0x8100;
/// IP protocol number of UDP.
pub const IPPROTO_UDP: u8 = 17;

/// Why bytes are not a pcap file this reader understands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum PcapError {
    #[error("shorter than the 24-byte pcap file header")]
    TooShort,
    #[error("not a little-endian pcap file (magic {0:#010x})")]
    BadMagic(u32),
    #[error("unsupported link type {0} (Ethernet 1 and raw IP 101 are supported)")]
    UnsupportedLinkType(u32),
    #[error("record {0} is truncated")]
    Truncated(usize),
}

/// A pcap file held in memory; [`Pcap::new`] checks the whole file once so iteration
/// cannot fail.
#[derive(Clone, Copy, Debug)]
pub struct Pcap<'a> {
    records: &'a [u8],
    /// Timestamps' fraction is in nanoseconds (else microseconds).
    pub nanos: bool,
    /// Link type of every frame ([`LINKTYPE_ETHERNET`] or [`LINKTYPE_RAW`]).
    pub linktype: u32,
}

/// One captured frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Frame<'a> {
    /// Frame number, 1-based (as Wireshark counts).
    pub number: usize,
    /// Timestamp, seconds.
    pub ts_sec: u32,
    /// Timestamp fraction: microseconds, or nanoseconds if [`Pcap::nanos`].
    pub ts_frac: u32,
    /// Length of the frame on the wire, bytes (may exceed `data.len()` if snapped).
    pub orig_len: u32,
    /// The captured bytes (link-layer header included).
    pub data: &'a [u8],
    linktype: u32,
}

/// A UDP datagram found in a [`Frame`].
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

impl<'a> Pcap<'a> {
    /// Reads the file header and checks that every record is complete.
    ///
    /// Errors: [`PcapError`] for short input, a magic other than
    /// [`PCAP_MAGIC_US`]/[`PCAP_MAGIC_NS`] little endian, an unsupported link type, or a
    /// truncated record.
    pub fn new(bytes: &'a [u8]) -> Result<Pcap<'a>, PcapError> {
        if bytes.len() < GLOBAL_HDR_LEN {
            return Err(PcapError::TooShort);
        }
        let magic = le32(bytes, 0);
        let nanos = match magic {
            PCAP_MAGIC_US => false,
            PCAP_MAGIC_NS => true,
            m => return Err(PcapError::BadMagic(m)),
        };
        let linktype = le32(bytes, 20) & 0x0FFF_FFFF;
        if linktype != LINKTYPE_ETHERNET && linktype != LINKTYPE_RAW {
            return Err(PcapError::UnsupportedLinkType(linktype));
        }
        let pcap = Pcap {
            records: &bytes[GLOBAL_HDR_LEN..],
            nanos,
            linktype,
        };
        let mut rest = pcap.records;
        let mut n = 0;
        while !rest.is_empty() {
            n += 1;
            if rest.len() < RECORD_HDR_LEN {
                return Err(PcapError::Truncated(n));
            }
            let incl = le32(rest, 8) as usize;
            if rest.len() - RECORD_HDR_LEN < incl {
                return Err(PcapError::Truncated(n));
            }
            rest = &rest[RECORD_HDR_LEN + incl..];
        }
        Ok(pcap)
    }

    /// Every frame, in file order.
    pub fn frames(&self) -> Frames<'a> {
        Frames {
            rest: self.records,
            number: 0,
            linktype: self.linktype,
        }
    }

    /// Every frame holding an IPv4/IPv6 UDP datagram to port 4791 (RoCEv2), with it.
    pub fn roce(&self) -> impl Iterator<Item = (Frame<'a>, UdpDatagram<'a>)> + 'a {
        self.frames().filter_map(|f| f.roce().map(|u| (f, u)))
    }
}

/// Iterator over the frames of a [`Pcap`].
#[derive(Clone, Debug)]
pub struct Frames<'a> {
    rest: &'a [u8],
    number: usize,
    linktype: u32,
}

impl<'a> Iterator for Frames<'a> {
    type Item = Frame<'a>;

    fn next(&mut self) -> Option<Frame<'a>> {
        // Pcap::new checked every record, so the slicing below is in bounds; `get`
        // keeps it panic-free anyway.
        let hdr = self.rest.get(..RECORD_HDR_LEN)?;
        let incl = le32(hdr, 8) as usize;
        let data = self.rest.get(RECORD_HDR_LEN..RECORD_HDR_LEN + incl)?;
        self.rest = &self.rest[RECORD_HDR_LEN + incl..];
        self.number += 1;
        Some(Frame {
            number: self.number,
            ts_sec: le32(hdr, 0),
            ts_frac: le32(hdr, 4),
            orig_len: le32(hdr, 12),
            data,
            linktype: self.linktype,
        })
    }
}

impl<'a> Frame<'a> {
    /// An Ethernet II frame that did not come from a file (one received from an
    /// interface), so that [`Self::udp`] parses it.
    pub fn ethernet(data: &'a [u8]) -> Frame<'a> {
        Frame {
            number: 0,
            ts_sec: 0,
            ts_frac: 0,
            orig_len: data.len() as u32,
            data,
            linktype: LINKTYPE_ETHERNET,
        }
    }

    /// The IPv4 or IPv6 packet in the frame (up to the end of the captured bytes; may
    /// include link-layer padding), or `None` for other frames.
    pub fn ip_packet(&self) -> Option<&'a [u8]> {
        if self.linktype == LINKTYPE_RAW {
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

fn le32(b: &[u8], at: usize) -> u32 {
    let mut v = [0u8; 4];
    v.copy_from_slice(&b[at..at + 4]);
    u32::from_le_bytes(v)
}

fn be16(b: &[u8]) -> u16 {
    u16::from_be_bytes([b[0], b[1]])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(records: &[&[u8]]) -> Vec<u8> {
        let mut f = Vec::new();
        f.extend_from_slice(&PCAP_MAGIC_US.to_le_bytes());
        f.extend_from_slice(&[2, 0, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xFF, 0xFF, 0, 0]);
        f.extend_from_slice(&LINKTYPE_ETHERNET.to_le_bytes());
        for r in records {
            f.extend_from_slice(&[1, 0, 0, 0, 2, 0, 0, 0]);
            f.extend_from_slice(&(r.len() as u32).to_le_bytes());
            f.extend_from_slice(&(r.len() as u32).to_le_bytes());
            f.extend_from_slice(r);
        }
        f
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
            let bytes = crate::test_captures::read(name);
            let pcap = Pcap::new(&bytes).expect("valid pcap");
            assert!(!pcap.nanos);
            assert_eq!(pcap.frames().count(), frames, "{name}");
            assert_eq!(pcap.roce().count(), roce, "{name}");
            for (f, udp) in pcap.roce() {
                assert_eq!(f.data.len() as u32, f.orig_len, "{name}: full snaplen");
                assert_eq!(
                    udp.ip_packet.len() + 14,
                    f.data.len(),
                    "{name} #{}",
                    f.number
                );
            }
        }
    }

    #[test]
    fn rejects_bad_files() {
        assert_eq!(Pcap::new(&[0; 10]).err(), Some(PcapError::TooShort));
        let mut f = file(&[]);
        f[0] = 0;
        assert_eq!(Pcap::new(&f).err(), Some(PcapError::BadMagic(0xA1B2_C300)));
        let mut f = file(&[&[1, 2, 3]]);
        f.pop();
        assert_eq!(Pcap::new(&f).err(), Some(PcapError::Truncated(1)));
    }

    #[test]
    fn finds_udp_in_ethernet_and_vlan_frames() {
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
        let f = file(&[&eth, &arp, &vlan]);
        let pcap = Pcap::new(&f).expect("valid");
        assert_eq!(pcap.frames().count(), 3);
        let roce: Vec<_> = pcap.roce().collect();
        assert_eq!(roce.len(), 2);
        for (frame, udp) in &roce {
            assert_eq!(
                udp.payload,
                &[0xAA, 0xBB, 0xCC, 0xDD],
                "frame {}",
                frame.number
            );
            assert_eq!(udp.ip_packet.len(), 32);
            assert_eq!(
                (udp.src_port, udp.dst_port, udp.ipv4_id),
                (12345, 4791, 0x1234)
            );
            assert_eq!(udp.dst, IpAddr::from([10, 0, 0, 2]));
        }
        assert_eq!((roce[0].0.number, roce[1].0.number), (1, 3));
    }
}
