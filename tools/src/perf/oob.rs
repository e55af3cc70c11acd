//! perftest's out-of-band messages (TCP port 18515, `Data ex. method: Ethernet`), as
//! perftest 4.5 (protocol version string `"6.06"`) writes them; encode and decode only,
//! no sockets ([`super::session`] moves them).
//!
//! Every exchange is symmetric: the client writes its message first, the server reads
//! it and writes its own of the same size (`ctx_xchg_data`, `ctx_hand_shake`).
//!
//! | message | bytes | content |
//! | --- | --- | --- |
//! | version | 16 | ASCII version, NUL padded ([`VERSION`]) |
//! | cycle buffer, cache line | 4 + 4 | big-endian `i32` each (page size, 64) |
//! | MTU | 2 | the `enum ibv_mtu` code as ASCII digit + NUL (`"3\0"` = 1024) |
//! | QP record | 108 | [`QpRecord`]: `LID:OUT_READS:QPN:PSN:RKEY:VADDR:GID(16 x %02x):SRQN:` + NUL |
//! | BW report | 5 x 8 | [`BwReport`]: size, iterations (`u64` BE), BW peak, BW average, msg rate (`f64` BE) |
//! | done | 5 | `"done"` + NUL |
use std::net::{IpAddr, Ipv6Addr};

/// The version perftest 4.5-0.17 sends (`VERSION` in its `perftest_parameters.h`);
/// peers older than 5.70 are refused by perftest itself.
pub const VERSION: &str = "6.06";
/// Size of the version message.
pub const VERSION_LEN: usize = 16;
/// Size of a QP record with a GID (`KEY_MSG_SIZE_GID`): 107 characters and a NUL.
pub const RECORD_LEN: usize = 108;
/// Size of the MTU message (versions 5.31 and later).
pub const MTU_LEN: usize = 2;
/// The closing message.
pub const DONE: &[u8; 5] = b"done\0";
/// perftest's cycle buffer (the page size) and cache line size, the values of its
/// system-data exchange.
pub const CYCLE_BUFFER: i32 = 4096;
/// See [`CYCLE_BUFFER`].
pub const CACHE_LINE: i32 = 64;

/// Why an out-of-band message did not decode.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OobError {
    /// The QP record is not `RECORD_LEN` bytes of perftest's colon-separated hex.
    #[error("malformed perftest QP record ({0}): the peer is not perftest 4.5 or later, or runs without a GID (use -x on both ends)")]
    Record(&'static str),
    /// The version string is not a number, or is older than perftest 5.70.
    #[error("peer perftest version {0:?} is not supported (5.70 or later is needed)")]
    Version(String),
    /// The MTU message is not an `enum ibv_mtu` code.
    #[error("malformed MTU message {0:?} from the peer")]
    Mtu([u8; 2]),
}

/// The version message: [`VERSION`] NUL-padded to [`VERSION_LEN`] bytes.
pub fn encode_version() -> [u8; VERSION_LEN] {
    let mut m = [0u8; VERSION_LEN];
    m[..VERSION.len()].copy_from_slice(VERSION.as_bytes());
    m
}

/// The peer's version as a number (`atof`), checked against perftest's own floor of 5.70.
///
/// # Errors
/// [`OobError::Version`] for text that is not a version or one below 5.70.
pub fn decode_version(m: &[u8; VERSION_LEN]) -> Result<f64, OobError> {
    let end = m.iter().position(|&b| b == 0).unwrap_or(VERSION_LEN);
    let s = String::from_utf8_lossy(&m[..end]).into_owned();
    match s.trim().parse::<f64>() {
        Ok(v) if v >= 5.70 => Ok(v),
        _ => Err(OobError::Version(s)),
    }
}

/// The MTU message for the `enum ibv_mtu` `code` (1 = 256 .. 5 = 4096).
pub fn encode_mtu(code: u8) -> [u8; MTU_LEN] {
    [b'0' + code % 10, 0]
}

/// The peer's MTU code from its MTU message.
///
/// # Errors
/// [`OobError::Mtu`] unless it is a digit 1..=5.
pub fn decode_mtu(m: &[u8; MTU_LEN]) -> Result<u8, OobError> {
    match m[0] {
        b'1'..=b'5' => Ok(m[0] - b'0'),
        _ => Err(OobError::Mtu(*m)),
    }
}

/// One QP's connection parameters as perftest exchanges them (`struct pingpong_dest`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QpRecord {
    /// LID (0 on RoCE).
    pub lid: u16,
    /// RDMA READs this side accepts outstanding as responder (its `max_dest_rd_atomic`;
    /// the peer uses it as its `max_rd_atomic`).
    pub out_reads: u16,
    /// QP number (24 bits).
    pub qpn: u32,
    /// The PSN of this side's first packet (24 bits).
    pub psn: u32,
    /// The rkey of the buffer the peer may read or write (0 when none is needed).
    pub rkey: u32,
    /// The address in this side's buffer that the peer's RDMA WRITEs and READs target.
    pub vaddr: u64,
    /// The GID (RoCE v2: the IPv4-mapped or IPv6 address).
    pub gid: [u8; 16],
    /// SRQ number (XRC/DC only; 0).
    pub srqn: u32,
}

impl QpRecord {
    /// The GID as an address: IPv4 for an IPv4-mapped GID, IPv6 otherwise.
    pub fn gid_ip(&self) -> IpAddr {
        let v6 = Ipv6Addr::from(self.gid);
        match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6(v6),
        }
    }

    /// The RoCE v2 GID of `ip` (`::ffff:a.b.c.d` for IPv4).
    pub fn gid_of(ip: IpAddr) -> [u8; 16] {
        match ip {
            IpAddr::V4(v4) => v4.to_ipv6_mapped().octets(),
            IpAddr::V6(v6) => v6.octets(),
        }
    }

    /// The 108-byte record: lower-case hex fields separated by `:` with a trailing `:`
    /// and NUL, widths 4, 4, 6, 6, 8, 16, 16 x 2, 8.
    pub fn encode(&self) -> [u8; RECORD_LEN] {
        let mut s = format!(
            "{:04x}:{:04x}:{:06x}:{:06x}:{:08x}:{:016x}:",
            self.lid,
            self.out_reads,
            self.qpn & 0xFF_FFFF,
            self.psn & 0xFF_FFFF,
            self.rkey,
            self.vaddr
        );
        for b in self.gid {
            s.push_str(&format!("{b:02x}:"));
        }
        s.push_str(&format!("{:08x}:", self.srqn));
        let mut m = [0u8; RECORD_LEN];
        let n = s.len().min(RECORD_LEN - 1);
        m[..n].copy_from_slice(&s.as_bytes()[..n]);
        m
    }

    /// Parses a record (the fields by their separators, as perftest's reader does, so
    /// widths may differ).
    ///
    /// # Errors
    /// [`OobError::Record`] naming the field that is missing or not hex.
    pub fn decode(m: &[u8]) -> Result<QpRecord, OobError> {
        let end = m.iter().position(|&b| b == 0).unwrap_or(m.len());
        let text = std::str::from_utf8(&m[..end]).map_err(|_| OobError::Record("not ASCII"))?;
        let mut f = text.split(':');
        let mut next = |what: &'static str| -> Result<u64, OobError> {
            let t = f.next().ok_or(OobError::Record(what))?;
            u64::from_str_radix(t, 16).map_err(|_| OobError::Record(what))
        };
        let lid = next("LID")? as u16;
        let out_reads = next("outstanding reads")? as u16;
        let qpn = next("QPN")? as u32;
        let psn = next("PSN")? as u32;
        let rkey = next("rkey")? as u32;
        let vaddr = next("vaddr")?;
        let mut gid = [0u8; 16];
        for g in gid.iter_mut() {
            *g = next("GID")? as u8;
        }
        let srqn = next("SRQ number")? as u32;
        Ok(QpRecord {
            lid,
            out_reads,
            qpn: qpn & 0xFF_FFFF,
            psn: psn & 0xFF_FFFF,
            rkey,
            vaddr,
            gid,
            srqn,
        })
    }
}

/// A bandwidth result as the client hands it to the server (`xchg_bw_reports`, peers
/// of version 5.33 and later: 64-bit iterations), five 8-byte big-endian values.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct BwReport {
    /// Message size, bytes.
    pub size: u64,
    /// Messages counted.
    pub iters: u64,
    /// BW peak, in the report's unit (MB/sec = MiB/s, or Gb/sec).
    pub bw_peak: f64,
    /// BW average, same unit.
    pub bw_avg: f64,
    /// Message rate, Mpps.
    pub msg_rate: f64,
}

impl BwReport {
    /// The five 8-byte messages, in order.
    pub fn encode(&self) -> [[u8; 8]; 5] {
        [
            self.size.to_be_bytes(),
            self.iters.to_be_bytes(),
            self.bw_peak.to_bits().to_be_bytes(),
            self.bw_avg.to_bits().to_be_bytes(),
            self.msg_rate.to_bits().to_be_bytes(),
        ]
    }

    /// The report from its five messages.
    pub fn decode(m: &[[u8; 8]; 5]) -> BwReport {
        BwReport {
            size: u64::from_be_bytes(m[0]),
            iters: u64::from_be_bytes(m[1]),
            bw_peak: f64::from_bits(u64::from_be_bytes(m[2])),
            bw_avg: f64::from_bits(u64::from_be_bytes(m[3])),
            msg_rate: f64::from_bits(u64::from_be_bytes(m[4])),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const B_WRITE_BW: &[u8] = b"0000:0001:000011:43cd86:00000294:00007f53cfd26000:00:00:00:00:00:00:00:00:00:00:ff:ff:c0:a8:4d:0b:00000000:\0";

    #[test]
    fn record_round_trips_byte_for_byte() {
        let r = QpRecord::decode(B_WRITE_BW).unwrap();
        assert_eq!(r.qpn, 0x11);
        assert_eq!(r.psn, 0x43cd86);
        assert_eq!(r.rkey, 0x294);
        assert_eq!(r.vaddr, 0x7f53cfd26000);
        assert_eq!(r.out_reads, 1);
        assert_eq!(r.gid_ip(), "192.168.77.11".parse::<IpAddr>().unwrap());
        assert_eq!(B_WRITE_BW.len(), RECORD_LEN);
        assert_eq!(&r.encode()[..], B_WRITE_BW);
    }

    #[test]
    fn ipv6_gid_and_bad_records() {
        let ip: IpAddr = "fd77::10".parse().unwrap();
        let r = QpRecord {
            lid: 0,
            out_reads: 16,
            qpn: 0x123456,
            psn: 0xabcdef,
            rkey: 7,
            vaddr: 1 << 40,
            gid: QpRecord::gid_of(ip),
            srqn: 0,
        };
        let m = r.encode();
        assert_eq!(m[RECORD_LEN - 1], 0);
        assert_eq!(QpRecord::decode(&m).unwrap(), r);
        assert_eq!(QpRecord::decode(&m).unwrap().gid_ip(), ip);
        assert_eq!(
            QpRecord::decode(b"0000:0001:zz"),
            Err(OobError::Record("QPN"))
        );
        assert_eq!(
            QpRecord::decode(b"0000:0001:000011:43cd86:00000294:00007f53cfd26000:00"),
            Err(OobError::Record("GID"))
        );
    }

    #[test]
    fn version_mtu_and_report() {
        let v = encode_version();
        assert_eq!(&v[..5], b"6.06\0");
        assert_eq!(decode_version(&v).unwrap(), 6.06);
        let mut old = [0u8; 16];
        old[..4].copy_from_slice(b"5.60");
        assert!(decode_version(&old).is_err());
        assert_eq!(encode_mtu(3), *b"3\0");
        assert_eq!(decode_mtu(b"3\0").unwrap(), 3);
        assert!(decode_mtu(b"9\0").is_err());
        // The client's report of the capture (frames 347-368): 65536 B, 5 iterations,
        // 11.29 MB/s peak, 10.54 average, 0.000169 Mpps.
        let m = [
            [0, 0, 0, 0, 0, 1, 0, 0],
            [0, 0, 0, 0, 0, 0, 0, 5],
            [0x40, 0x26, 0x95, 0x22, 0x0b, 0x7d, 0x50, 0x0f],
            [0x40, 0x25, 0x12, 0xe3, 0x33, 0xc0, 0xa3, 0xc4],
            [0x3f, 0x26, 0x18, 0xf3, 0x16, 0xa1, 0x01, 0x2e],
        ];
        let r = BwReport::decode(&m);
        assert_eq!((r.size, r.iters), (65536, 5));
        assert!((r.bw_peak - 11.29).abs() < 0.01 && (r.bw_avg - 10.54).abs() < 0.01);
        assert!((r.msg_rate - 0.000169).abs() < 1e-6);
        assert_eq!(r.encode(), m);
    }
}
