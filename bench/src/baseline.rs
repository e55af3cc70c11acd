//! `--baseline`: what the fabric adds, measured in the same run. Before the jobs start
//! (the embedded target up, the host not yet connected), on the addresses the run
//! uses (the host's and the embedded target's):
//!
//! - the UDP round-trip floor, busy-polled, 64 B and 4 KiB
//!   ([`transport::soft::floor::udp_ping_pong`], sockets set up as the soft provider's
//!   send sockets);
//! - a local io_uring 4 KiB read of the embedded target's file at random 4 KiB-aligned
//!   offsets, QD1, busy-polled, the way the target reads (fixed file, fixed buffer,
//!   [`nvmf_target::uring::Ring`]), from the page cache the layout left it in.
//!
//! After the run, [`Fabric`] compares the run's read completion latency p50 with the
//! 4 KiB floor: the overhead (p50 minus the floor) and the ratio (p50 / floor). A 4 KiB
//! read needs at least one round trip, so the ratio is what the fabric costs in units of
//! the kernel's UDP path; at `--iodepth 1` it is the figure BENCHMARKS.md tracks.
use std::fs::File;
use std::net::IpAddr;
use std::os::fd::AsRawFd;
use std::time::Instant;

use nvmf_target::buffers::Slab;
use nvmf_target::uring::Ring;
use serde::Serialize;
use transport::soft::floor::{udp_ping_pong, LatencySummary};

use crate::result::BenchResult;

/// Round trips per datagram size.
pub const ROUND_TRIPS: usize = 20_000;
/// Local 4 KiB reads.
pub const READS: usize = 20_000;
/// Reads run first and left out of the figures.
const WARMUP_READS: usize = 1_000;
/// Bytes of one read, and of the larger datagram.
pub const READ_BYTES: u32 = 4096;
/// The smaller datagram, bytes.
pub const SMALL_DATAGRAM_BYTES: usize = 64;

/// What `--baseline` measured before the jobs.
#[derive(Clone, Debug, PartialEq)]
pub struct Baseline {
    /// The pinging side (the host's address).
    pub local_ip: IpAddr,
    /// The echoing side (the target's address).
    pub peer_ip: IpAddr,
    /// UDP round trip of a 64-byte datagram.
    pub udp_64: LatencySummary,
    /// UDP round trip of a 4 KiB datagram: the floor.
    pub udp_4096: LatencySummary,
    /// Local io_uring 4 KiB read of the namespace file.
    pub uring_read_4096: LatencySummary,
}

/// Measures the [`Baseline`] between `local_ip` and `peer_ip` and on `file`, the
/// embedded target's namespace file of `file_bytes` bytes. Takes about a second: both
/// cores spin meanwhile.
///
/// Errors: a message naming what failed (a socket, no echo, the ring, the read).
pub fn measure(
    local_ip: IpAddr,
    peer_ip: IpAddr,
    file: &File,
    file_bytes: u64,
) -> Result<Baseline, String> {
    let floor =
        |size| udp_ping_pong(local_ip, peer_ip, size, ROUND_TRIPS).map_err(|e| e.to_string());
    Ok(Baseline {
        local_ip,
        peer_ip,
        udp_64: floor(SMALL_DATAGRAM_BYTES)?,
        udp_4096: floor(READ_BYTES as usize)?,
        uring_read_4096: uring_reads(file, file_bytes, READS)
            .map_err(|e| format!("--baseline: local io_uring read of the namespace file: {e}"))?,
    })
}

/// `reads` 4 KiB reads of `file` (`file_bytes` long) at pseudo-random 4 KiB-aligned
/// offsets, one at a time, each submitted and its completion spun for; after
/// [`WARMUP_READS`].
///
/// Errors: the ring could not be set up (io_uring disabled, `RLIMIT_MEMLOCK` too small
/// for one pinned page), a read failed or came back short.
fn uring_reads(file: &File, file_bytes: u64, reads: usize) -> std::io::Result<LatencySummary> {
    let blocks = file_bytes / u64::from(READ_BYTES);
    if blocks == 0 || reads == 0 {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "no whole 4 KiB block to read",
        ));
    }
    let buf = Slab::new(READ_BYTES as usize)?;
    let mut ring = Ring::new(4)?;
    // SAFETY: `buf` outlives the ring (declared before it, dropped after it); no Rust
    // reference to its bytes is held while a read is in flight.
    unsafe { ring.register_buffers(&[(buf.as_ptr(), buf.len())])? };
    ring.register_files(&[file.as_raw_fd()])?;
    let mut x = 0x2545_F491_4F6C_DD1Du64;
    let mut samples = Vec::with_capacity(reads);
    for i in 0..WARMUP_READS + reads {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let offset = (x % blocks) * u64::from(READ_BYTES);
        let t = Instant::now();
        if ring
            .read_fixed(0, 0, buf.as_ptr(), READ_BYTES, offset, 0)
            .is_err()
        {
            return Err(std::io::Error::other("the ring is full"));
        }
        ring.submit()?;
        let mut res = None;
        while res.is_none() {
            ring.poll_completions(|_, r| res = Some(r));
        }
        if i >= WARMUP_READS {
            samples.push(t.elapsed().as_nanos() as u64);
        }
        match res {
            Some(r) if r == READ_BYTES as i32 => {}
            Some(r) if r < 0 => return Err(std::io::Error::from_raw_os_error(-r)),
            r => {
                return Err(std::io::Error::other(format!(
                    "read of {READ_BYTES} bytes at {offset} returned {r:?}"
                )))
            }
        }
    }
    LatencySummary::from_samples(&mut samples)
        .ok_or_else(|| std::io::Error::other("no reads measured"))
}

/// The run's reads against the 4 KiB floor.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Fabric {
    /// The run's read completion latency p50 (all jobs), ns.
    pub read_p50_ns: u64,
    /// `read_p50_ns` minus the 4 KiB UDP round trip p50, ns (negative if below it).
    pub overhead_ns: i64,
    /// `read_p50_ns` / the 4 KiB UDP round trip p50.
    pub ratio: f64,
}

impl Baseline {
    /// The run's reads against the floor; `None` when the run read nothing.
    pub fn fabric(&self, result: &BenchResult) -> Option<Fabric> {
        let all = result.all_jobs()?;
        let reads = &all.dirs[0];
        if reads.ios == 0 || self.udp_4096.p50_ns == 0 {
            return None;
        }
        let read_p50_ns = reads.clat.percentile_ns(50.0);
        Some(Fabric {
            read_p50_ns,
            overhead_ns: read_p50_ns as i64 - self.udp_4096.p50_ns as i64,
            ratio: read_p50_ns as f64 / self.udp_4096.p50_ns as f64,
        })
    }
}

fn us(ns: u64) -> f64 {
    ns as f64 / 1000.0
}

fn line(what: &str, s: &LatencySummary, unit: &str) -> String {
    format!(
        "  {what}: p50 {:.1} us, p90 {:.1} us, p99 {:.1} us ({} {unit})\n",
        us(s.p50_ns),
        us(s.p90_ns),
        us(s.p99_ns),
        s.samples
    )
}

/// The text report's baseline lines (after fio's report).
pub fn render_text(b: &Baseline, result: &BenchResult) -> String {
    let mut out = format!(
        "\nBaseline (same run, before the jobs; busy-polled, {} <-> {}):\n",
        b.local_ip, b.peer_ip
    );
    out += &line("UDP round trip     64 B", &b.udp_64, "round trips");
    out += &line("UDP round trip   4096 B", &b.udp_4096, "round trips");
    out += &line(
        "io_uring read    4096 B",
        &b.uring_read_4096,
        "reads of the namespace file",
    );
    match b.fabric(result) {
        Some(f) => {
            out += &format!(
                "  fabric: read clat p50 {:.1} us = 4 KiB UDP round trip + {:.1} us ({:.2} x the round trip)\n",
                us(f.read_p50_ns),
                f.overhead_ns as f64 / 1000.0,
                f.ratio
            )
        }
        None => out += "  fabric: no reads in this run, nothing to compare\n",
    }
    out
}

/// One [`LatencySummary`] in the JSON output, microseconds.
#[derive(Debug, Clone, Serialize)]
pub struct LatencyJson {
    pub p50_us: f64,
    pub p90_us: f64,
    pub p99_us: f64,
    pub samples: usize,
}

impl From<&LatencySummary> for LatencyJson {
    fn from(s: &LatencySummary) -> Self {
        LatencyJson {
            p50_us: us(s.p50_ns),
            p90_us: us(s.p90_ns),
            p99_us: us(s.p99_ns),
            samples: s.samples,
        }
    }
}

/// The non-fio `baseline` object of the JSON output. `read_clat_p50_us`,
/// `fabric_overhead_us` and `p50_over_floor` are absent when the run read nothing.
#[derive(Debug, Clone, Serialize)]
pub struct BaselineJson {
    pub local_ip: String,
    pub peer_ip: String,
    pub udp_rtt_64: LatencyJson,
    pub udp_rtt_4096: LatencyJson,
    pub uring_read_4096: LatencyJson,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub read_clat_p50_us: Option<f64>,
    /// Read clat p50 minus the 4 KiB UDP round trip p50.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fabric_overhead_us: Option<f64>,
    /// Read clat p50 / the 4 KiB UDP round trip p50.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub p50_over_floor: Option<f64>,
}

/// The `baseline` object for `b` and the run's `result`.
pub fn to_json(b: &Baseline, result: &BenchResult) -> BaselineJson {
    let f = b.fabric(result);
    BaselineJson {
        local_ip: b.local_ip.to_string(),
        peer_ip: b.peer_ip.to_string(),
        udp_rtt_64: (&b.udp_64).into(),
        udp_rtt_4096: (&b.udp_4096).into(),
        uring_read_4096: (&b.uring_read_4096).into(),
        read_clat_p50_us: f.map(|f| us(f.read_p50_ns)),
        fabric_overhead_us: f.map(|f| f.overhead_ns as f64 / 1000.0),
        p50_over_floor: f.map(|f| f.ratio),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn local_reads_of_a_file_are_measured() {
        let mut f = tempfile::tempfile().unwrap();
        f.write_all(&vec![7u8; 64 << 10]).unwrap();
        let s = uring_reads(&f, 64 << 10, 100).unwrap();
        assert_eq!(s.samples, 100);
        assert!(s.p50_ns > 0, "{s:?}");
    }

    #[test]
    fn a_file_without_a_whole_block_is_refused() {
        let f = tempfile::tempfile().unwrap();
        assert!(uring_reads(&f, 100, 10).is_err());
    }

    #[test]
    fn fabric_figures_follow_from_the_read_p50_and_the_floor() {
        let s = |p50| LatencySummary {
            samples: 1,
            p50_ns: p50,
            p90_ns: p50,
            p99_ns: p50,
        };
        let b = Baseline {
            local_ip: "127.0.0.3".parse().unwrap(),
            peer_ip: "127.0.0.2".parse().unwrap(),
            udp_64: s(6_000),
            udp_4096: s(8_000),
            uring_read_4096: s(1_000),
        };
        let mut r = crate::report::testdata::result();
        let p50 = r.all_jobs().unwrap().dirs[0].clat.percentile_ns(50.0);
        assert!(p50 > 0);
        let f = b.fabric(&r).unwrap();
        assert_eq!(f.read_p50_ns, p50);
        assert_eq!(f.overhead_ns, p50 as i64 - 8_000);
        assert!((f.ratio - p50 as f64 / 8_000.0).abs() < 1e-9);
        let text = render_text(&b, &r);
        assert!(text.contains("fabric: read clat p50"), "{text}");
        let j = serde_json::to_value(to_json(&b, &r)).unwrap();
        assert_eq!(j["udp_rtt_4096"]["p50_us"], 8.0);
        assert!(j["p50_over_floor"].is_number());
        for j in &mut r.jobs {
            j.dirs[0].ios = 0;
        }
        assert!(b.fabric(&r).is_none());
        assert!(render_text(&b, &r).contains("no reads"));
        assert!(serde_json::to_value(to_json(&b, &r)).unwrap()["p50_over_floor"].is_null());
    }
}
