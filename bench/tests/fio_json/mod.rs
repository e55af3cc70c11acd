//! A fio-JSON consumer for the tests: reads `--output-format=json` output the way
//! tools built on fio's JSON do (fio's own `tools/fio_jsonplus_clat2csv`, fio-plot,
//! result summarizers), independently of the bench's own report types, so a test
//! checks what such a tool would see.
//!
//! What it reads (fio 3.x, `stat.c: show_thread_status_json`): the document from its
//! first `{` (fio may print warnings before it); `fio version`, `timestamp`, `time`,
//! `global options`; per entry of `jobs[]`: `jobname`, `groupid`, `error`,
//! `job options` (strings), `job_runtime` (ms) and per direction (`read`, `write`,
//! `trim`): `io_bytes`, `io_kbytes`, `bw_bytes` (B/s), `bw` (KiB/s), `iops`,
//! `runtime` (ms), `total_ios`, `short_ios`, `drop_ios`, `slat_ns` / `clat_ns` /
//! `lat_ns` (`min`, `max`, `mean`, `stddev`, `N`, `clat_ns.percentile` keyed `"%f"` of
//! the percent, e.g. `"99.000000"`), `bw_min` .. `bw_samples`, `iops_min` ..
//! `iops_samples`. A field a consumer reads that is missing or mistyped is an error.
#![allow(dead_code)] // each test binary uses a different part

use std::collections::BTreeMap;

use serde::Deserialize;

/// The whole document.
#[derive(Debug, Deserialize)]
pub struct FioReport {
    /// Producer and version (fio writes `fio-3.x`).
    #[serde(rename = "fio version")]
    pub fio_version: String,
    /// Unix time of the report, seconds.
    pub timestamp: u64,
    /// The report time, `ctime` format.
    pub time: String,
    /// Options given to every job.
    #[serde(rename = "global options", default)]
    pub global_options: BTreeMap<String, String>,
    /// One entry per job (per clone with `numjobs`).
    pub jobs: Vec<FioJob>,
}

/// One entry of `jobs[]`.
#[derive(Debug, Deserialize)]
pub struct FioJob {
    /// `--name` of the job.
    pub jobname: String,
    /// Reporting group.
    pub groupid: u32,
    /// errno of the error that ended the job, 0 if none.
    pub error: i32,
    /// The job's options as fio prints them (strings).
    #[serde(rename = "job options")]
    pub job_options: BTreeMap<String, String>,
    /// Reads.
    pub read: FioDir,
    /// Writes.
    pub write: FioDir,
    /// Trims.
    pub trim: FioDir,
    /// Run time of the job, ms.
    pub job_runtime: u64,
}

/// One direction of a job.
#[derive(Debug, Deserialize)]
pub struct FioDir {
    /// Bytes transferred.
    pub io_bytes: u64,
    /// KiB transferred.
    pub io_kbytes: u64,
    /// Bandwidth, bytes/s.
    pub bw_bytes: u64,
    /// Bandwidth, KiB/s.
    pub bw: u64,
    /// I/Os per second.
    pub iops: f64,
    /// Time this direction ran, ms.
    pub runtime: u64,
    /// Completed I/Os.
    pub total_ios: u64,
    /// Short I/Os.
    pub short_ios: u64,
    /// Dropped I/Os.
    pub drop_ios: u64,
    /// Submission latency, ns.
    pub slat_ns: FioLat,
    /// Completion latency, ns, with percentiles.
    pub clat_ns: FioLat,
    /// Total latency, ns.
    pub lat_ns: FioLat,
    /// Smallest bandwidth sample, KiB/s.
    pub bw_min: u64,
    /// Largest bandwidth sample, KiB/s.
    pub bw_max: u64,
    /// Share of the group's bandwidth, percent.
    pub bw_agg: f64,
    /// Mean bandwidth sample, KiB/s.
    pub bw_mean: f64,
    /// Standard deviation of the bandwidth samples, KiB/s.
    pub bw_dev: f64,
    /// Number of bandwidth samples.
    pub bw_samples: u64,
    /// Smallest IOPS sample.
    pub iops_min: u64,
    /// Largest IOPS sample.
    pub iops_max: u64,
    /// Mean IOPS sample.
    pub iops_mean: f64,
    /// Standard deviation of the IOPS samples.
    pub iops_stddev: f64,
    /// Number of IOPS samples.
    pub iops_samples: u64,
}

/// A latency object (`slat_ns`, `clat_ns`, `lat_ns`), nanoseconds.
#[derive(Debug, Deserialize)]
pub struct FioLat {
    /// Smallest latency.
    pub min: u64,
    /// Largest latency.
    pub max: u64,
    /// Mean.
    pub mean: f64,
    /// Standard deviation.
    pub stddev: f64,
    /// Number of samples.
    #[serde(rename = "N")]
    pub n: u64,
    /// Percentiles keyed `"%f"` of the percent (`"50.000000"`), when reported.
    #[serde(default)]
    pub percentile: BTreeMap<String, u64>,
}

impl FioLat {
    /// The percentile `p` (e.g. 99.0) in ns, as keyed by fio (`"99.000000"`).
    pub fn percentile_ns(&self, p: f64) -> Option<u64> {
        self.percentile.get(&format!("{p:.6}")).copied()
    }
}

/// What a summarizer prints for one direction of a job: IOPS, bandwidth and
/// completion latencies in microseconds.
#[derive(Debug, Clone, PartialEq)]
pub struct DirSummary {
    /// I/Os per second.
    pub iops: f64,
    /// Bandwidth, KiB/s.
    pub bw_kib_s: u64,
    /// Mean completion latency, us.
    pub clat_mean_us: f64,
    /// Median completion latency, us.
    pub p50_us: f64,
    /// 99th percentile completion latency, us.
    pub p99_us: f64,
    /// 99.9th percentile completion latency, us.
    pub p99_9_us: f64,
}

impl FioReport {
    /// Parses fio's JSON output, skipping anything printed before the first `{`.
    pub fn parse(text: &str) -> Result<Self, String> {
        let start = text
            .find('{')
            .ok_or_else(|| "no JSON object in the output".to_string())?;
        serde_json::from_str(&text[start..]).map_err(|e| format!("not fio JSON: {e}"))
    }

    /// Reads and parses a fio JSON file.
    pub fn read(path: &std::path::Path) -> Result<Self, String> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        Self::parse(&text)
    }
}

impl FioJob {
    /// `read` (0) or `write` (1), as a summarizer walks them.
    pub fn dir(&self, rw: &str) -> &FioDir {
        match rw {
            "read" => &self.read,
            "write" => &self.write,
            "trim" => &self.trim,
            other => panic!("no direction {other}"),
        }
    }

    /// The job's block size in bytes from `job options.bs` (`4096`, `4k`, `128K`,
    /// `1m`), `None` if absent or not a size.
    pub fn bs_bytes(&self) -> Option<u64> {
        parse_size(self.job_options.get("bs")?)
    }

    /// The summary of direction `rw` (`read`, `write`), `None` if it did no I/O.
    pub fn summary(&self, rw: &str) -> Option<DirSummary> {
        let d = self.dir(rw);
        if d.total_ios == 0 {
            return None;
        }
        let us = |p| {
            d.clat_ns
                .percentile_ns(p)
                .map_or(f64::NAN, |ns| ns as f64 / 1000.0)
        };
        Some(DirSummary {
            iops: d.iops,
            bw_kib_s: d.bw,
            clat_mean_us: d.clat_ns.mean / 1000.0,
            p50_us: us(50.0),
            p99_us: us(99.0),
            p99_9_us: us(99.9),
        })
    }

    /// The arithmetic a consumer relies on, for direction `rw`: bytes are I/Os times
    /// the block size, KiB and KiB/s are the byte figures / 1024, IOPS and bandwidth are
    /// the totals over `runtime`, every completion has a latency sample, and the
    /// percentiles are ordered within min..max. Returns every violation found.
    pub fn check_dir(&self, rw: &str) -> Vec<String> {
        let d = self.dir(rw);
        let mut bad = Vec::new();
        let mut expect = |ok: bool, what: String| {
            if !ok {
                bad.push(format!("{} {rw}: {what}", self.jobname));
            }
        };
        if d.total_ios == 0 {
            expect(d.io_bytes == 0, format!("{} bytes in 0 I/Os", d.io_bytes));
            expect(
                d.clat_ns.n == 0,
                format!("{} samples for 0 I/Os", d.clat_ns.n),
            );
            return bad;
        }
        match self.bs_bytes() {
            Some(bs) => expect(
                d.io_bytes == d.total_ios * bs,
                format!("io_bytes {} != {} I/Os x bs {bs}", d.io_bytes, d.total_ios),
            ),
            None => expect(
                false,
                format!("job options bs {:?}", self.job_options.get("bs")),
            ),
        }
        expect(
            d.io_kbytes == d.io_bytes / 1024,
            format!("io_kbytes {} for {} bytes", d.io_kbytes, d.io_bytes),
        );
        expect(
            d.bw == d.bw_bytes / 1024,
            format!("bw {} KiB/s for bw_bytes {}", d.bw, d.bw_bytes),
        );
        expect(
            d.runtime > 0 && d.runtime <= self.job_runtime,
            format!("runtime {} ms, job_runtime {}", d.runtime, self.job_runtime),
        );
        if d.runtime > 0 {
            let secs = d.runtime as f64 / 1000.0;
            let iops = d.total_ios as f64 / secs;
            expect(
                (d.iops - iops).abs() <= iops * 0.01 + 1.0,
                format!("iops {} for {} I/Os in {secs} s", d.iops, d.total_ios),
            );
            let bw = d.io_bytes as f64 / secs;
            expect(
                (d.bw_bytes as f64 - bw).abs() <= bw * 0.01 + 1024.0,
                format!(
                    "bw_bytes {} for {} bytes in {secs} s",
                    d.bw_bytes, d.io_bytes
                ),
            );
        }
        for (name, lat) in [("clat_ns", &d.clat_ns), ("lat_ns", &d.lat_ns)] {
            expect(
                lat.n == d.total_ios,
                format!("{name}.N {} for {} I/Os", lat.n, d.total_ios),
            );
            expect(
                lat.min as f64 <= lat.mean && lat.mean <= lat.max as f64,
                format!("{name} min {} mean {} max {}", lat.min, lat.mean, lat.max),
            );
        }
        let ps: Vec<Option<u64>> = [1.0, 50.0, 90.0, 99.0, 99.9]
            .iter()
            .map(|&p| d.clat_ns.percentile_ns(p))
            .collect();
        match ps.iter().copied().collect::<Option<Vec<u64>>>() {
            Some(ps) => {
                expect(
                    ps.windows(2).all(|w| w[0] <= w[1]),
                    format!("clat percentiles 1/50/90/99/99.9 out of order: {ps:?}"),
                );
                // Percentiles are fio's histogram buckets' middles: a bucket is up to
                // 1/64 of its value wide, so a percentile may pass min or max by that.
                let (lo, hi) = (
                    d.clat_ns.min as f64 * (1.0 - 1.0 / 64.0),
                    d.clat_ns.max as f64 * (1.0 + 1.0 / 64.0),
                );
                expect(
                    ps.iter().all(|&p| (lo..=hi).contains(&(p as f64))),
                    format!(
                        "clat percentiles {ps:?} outside min {} .. max {}",
                        d.clat_ns.min, d.clat_ns.max
                    ),
                );
            }
            None => expect(
                false,
                format!(
                    "clat_ns.percentile lacks one of 1/50/90/99/99.9: {:?}",
                    d.clat_ns.percentile.keys().collect::<Vec<_>>()
                ),
            ),
        }
        expect(
            d.bw_samples == 0 || (d.bw_min as f64 <= d.bw_mean && d.bw_mean <= d.bw_max as f64),
            format!(
                "bw samples min {} mean {} max {}",
                d.bw_min, d.bw_mean, d.bw_max
            ),
        );
        bad
    }
}

/// A fio size (`4096`, `4k`, `128K`, `1m`, `1g`; binary units as fio's default), by
/// the project's one size parser.
pub fn parse_size(s: &str) -> Option<u64> {
    nvmf_target::config::parse_size(s).ok()
}
