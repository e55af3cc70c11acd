//! The Linux reference captures the tests read: `testdata/captures/` of this
//! repository (its README lists each file, its frame counts and the facts the tests
//! rely on). Compiled into the transport's unit tests as `crate::test_captures` and into
//! integration tests (this crate's and the tools') through `#[path]`, so the location
//! and the reading are written once. The `pcap-file` crate splits a file into frames
//! (a dev-dependency: no pcap reader in the transport's API); the transport's own
//! [`LinkFrame`] parser finds the UDP datagrams in them, as on the AF_XDP path.
#![allow(dead_code)] // each including test uses a part

use transport::wire::frame::{LinkFrame, LinkType, UdpDatagram};

/// The bytes of reference capture `name` (e.g. `"linux-nvme-rdma-rxe.pcap"`).
///
/// # Panics
/// When the file cannot be read: the test fails and names the path; it never skips.
pub fn read(name: &str) -> Vec<u8> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../testdata/captures")
        .join(name);
    std::fs::read(&path).unwrap_or_else(|e| {
        panic!(
            "cannot read reference capture {}: {e}; the captures ship with the repository \
             in testdata/captures/ (restore them with git checkout -- testdata)",
            path.display()
        )
    })
}

/// One frame of a capture.
#[derive(Clone, Debug)]
pub struct CapturedFrame {
    /// Frame number, 1-based (as Wireshark counts).
    pub number: usize,
    /// Length of the frame on the wire, bytes (more than `data.len()` if snapped).
    pub orig_len: u32,
    /// The captured bytes (link-layer header included).
    pub data: Vec<u8>,
    /// What the bytes begin with (the file's link type).
    pub link: LinkType,
}

impl CapturedFrame {
    /// The frame for [`LinkFrame`]'s parser.
    pub fn link_frame(&self) -> LinkFrame<'_> {
        LinkFrame {
            data: &self.data,
            link: self.link,
        }
    }

    /// The IPv4/IPv6 packet in the frame, if any.
    pub fn ip_packet(&self) -> Option<&[u8]> {
        self.link_frame().ip_packet()
    }

    /// The UDP datagram in the frame, if any.
    pub fn udp(&self) -> Option<UdpDatagram<'_>> {
        self.link_frame().udp()
    }

    /// The UDP datagram to port 4791 (RoCEv2) in the frame, if any.
    pub fn roce(&self) -> Option<UdpDatagram<'_>> {
        self.link_frame().roce()
    }
}

/// A capture file's frames, in file order.
#[derive(Clone, Debug)]
pub struct Capture {
    /// Every frame.
    pub frames: Vec<CapturedFrame>,
}

impl Capture {
    /// Splits a pcap file into frames.
    ///
    /// # Errors
    /// The `pcap-file` crate's error for a malformed file, or a link type other than
    /// Ethernet and raw IP, in words.
    pub fn parse(bytes: &[u8]) -> Result<Capture, String> {
        use pcap_file::pcap::PcapParser;
        use pcap_file::DataLink;
        let (mut rest, parser) = PcapParser::new(bytes).map_err(|e| e.to_string())?;
        let link = match parser.header().datalink {
            DataLink::ETHERNET => LinkType::Ethernet,
            DataLink::RAW | DataLink::IPV4 | DataLink::IPV6 => LinkType::RawIp,
            other => return Err(format!("link type {other:?} is not Ethernet or raw IP")),
        };
        let mut frames = Vec::new();
        while !rest.is_empty() {
            let (next, packet) = parser.next_packet(rest).map_err(|e| e.to_string())?;
            frames.push(CapturedFrame {
                number: frames.len() + 1,
                orig_len: packet.orig_len,
                data: packet.data.into_owned(),
                link,
            });
            rest = next;
        }
        Ok(Capture { frames })
    }

    /// Reference capture `name`, read and split.
    ///
    /// # Panics
    /// As [`read`], or when the file does not parse (the test fails and says why).
    pub fn open(name: &str) -> Capture {
        Capture::parse(&read(name)).unwrap_or_else(|e| panic!("capture {name}: {e}"))
    }

    /// Every frame, in file order.
    pub fn frames(&self) -> impl Iterator<Item = &CapturedFrame> {
        self.frames.iter()
    }

    /// Every frame holding an IPv4/IPv6 UDP datagram to port 4791 (RoCEv2), with it.
    pub fn roce(&self) -> impl Iterator<Item = (&CapturedFrame, UdpDatagram<'_>)> {
        self.frames.iter().filter_map(|f| f.roce().map(|u| (f, u)))
    }
}
