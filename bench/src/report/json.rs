//! fio 3.x JSON output (`--output-format=json`, stat.c `show_thread_status_json`,
//! `add_ddir_status_json`), keys in fio's order.
//!
//! Layout: `fio version`, `timestamp`, `timestamp_ms`, `time`, `global options`,
//! `jobs` (one entry per job), `disk_util: []`, plus two keys fio does not write
//! (fio consumers ignore unknown keys): `group` (group-reported totals) and, when
//! verifying, `verify`. Latencies are nanoseconds, `bw` KiB/s, `runtime` ms.
//! `clat_ns` is the time from submit call to completion seen; `lat_ns` repeats it
//! and `slat_ns` is empty (N = 0), as for fio engines without a separate submit phase.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::ser::{Serialize, SerializeMap, Serializer};
use serde::Serialize as DeriveSerialize;

use super::fmt::ctime_utc;
use crate::options::{JobSpec, RunOptions};
use crate::result::{
    bw_bytes_per_sec, iops, BenchResult, FaultSummary, GroupResult, InjectedFaults, JobResult,
};
use crate::stats::{DirStats, LatencyStats, FIO_LAT_BOUNDS, FIO_LAT_BUCKETS, FIO_PERCENTILES};

/// A JSON object whose keys keep insertion order.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct OrderedMap<V>(pub Vec<(String, V)>);

impl<V: Serialize> Serialize for OrderedMap<V> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(Some(self.0.len()))?;
        for (k, v) in &self.0 {
            m.serialize_entry(k, v)?;
        }
        m.end()
    }
}

/// fio's latency object (`slat_ns`, `clat_ns`, `lat_ns`), nanoseconds.
#[derive(Debug, Clone, DeriveSerialize)]
pub struct LatJson {
    /// Smallest latency.
    pub min: u64,
    /// Largest latency.
    pub max: u64,
    /// Mean.
    pub mean: f64,
    /// Sample standard deviation.
    pub stddev: f64,
    /// Number of samples.
    #[serde(rename = "N")]
    pub n: u64,
    /// fio's percentile list, keyed `"%f"` of the percent ("99.900000").
    #[serde(skip_serializing_if = "Option::is_none")]
    pub percentile: Option<OrderedMap<u64>>,
}

impl LatJson {
    fn empty() -> Self {
        Self {
            min: 0,
            max: 0,
            mean: 0.0,
            stddev: 0.0,
            n: 0,
            percentile: None,
        }
    }

    fn from_stats(s: &LatencyStats, with_percentiles: bool) -> Self {
        let percentile = (with_percentiles && s.count() > 0).then(|| {
            OrderedMap(
                FIO_PERCENTILES
                    .iter()
                    .map(|&p| (format!("{p:.6}"), s.percentile_ns(p)))
                    .collect(),
            )
        });
        Self {
            min: s.min_ns(),
            max: s.max_ns(),
            mean: s.mean_ns(),
            stddev: s.stddev_ns(),
            n: s.count(),
            percentile,
        }
    }
}

/// fio's per-direction object (`read`, `write`, `trim`).
#[derive(Debug, Clone, DeriveSerialize)]
pub struct DirJson {
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
    /// Run time, ms.
    pub runtime: u64,
    /// Completed I/Os.
    pub total_ios: u64,
    /// Short I/Os (never, here).
    pub short_ios: u64,
    /// Dropped I/Os (never, here).
    pub drop_ios: u64,
    /// Submission latency (not measured separately: N = 0).
    pub slat_ns: LatJson,
    /// Completion latency with percentiles.
    pub clat_ns: LatJson,
    /// Total latency (same as `clat_ns`).
    pub lat_ns: LatJson,
    /// Smallest bandwidth sample, KiB/s.
    pub bw_min: u64,
    /// Largest bandwidth sample, KiB/s.
    pub bw_max: u64,
    /// Mean sample as a percentage of the group's aggregate bandwidth.
    pub bw_agg: f64,
    /// Mean bandwidth sample, KiB/s.
    pub bw_mean: f64,
    /// Standard deviation of the bandwidth samples, KiB/s.
    pub bw_dev: f64,
    /// Number of bandwidth samples (one per 500 ms).
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

impl DirJson {
    /// The object for `d` measured over `runtime_ms`; `group_agg_bw` (bytes/s) scales
    /// `bw_agg`.
    pub fn new(d: &DirStats, runtime_ms: u64, group_agg_bw: u64) -> Self {
        let runtime = if d.ios > 0 { runtime_ms } else { 0 };
        let bw_bytes = bw_bytes_per_sec(d.bytes, runtime);
        let bw = &d.bw_kib_samples;
        let bw_agg = if bw.count() == 0 {
            0.0
        } else if group_agg_bw > 1024 {
            (bw.mean() * 100.0 / (group_agg_bw as f64 / 1024.0)).min(100.0)
        } else {
            100.0
        };
        let io = &d.iops_samples;
        Self {
            io_bytes: d.bytes,
            io_kbytes: d.bytes >> 10,
            bw_bytes,
            bw: bw_bytes / 1024,
            iops: iops(d.ios, runtime),
            runtime,
            total_ios: d.ios,
            short_ios: 0,
            drop_ios: 0,
            slat_ns: LatJson::empty(),
            clat_ns: LatJson::from_stats(&d.clat, true),
            lat_ns: LatJson::from_stats(&d.clat, false),
            bw_min: bw.min() as u64,
            bw_max: bw.max() as u64,
            bw_agg,
            bw_mean: bw.mean(),
            bw_dev: bw.stddev(),
            bw_samples: bw.count(),
            iops_min: io.min() as u64,
            iops_max: io.max() as u64,
            iops_mean: io.mean(),
            iops_stddev: io.stddev(),
            iops_samples: io.count(),
        }
    }
}

/// fio's `sync` object (no syncs are issued).
#[derive(Debug, Clone, DeriveSerialize)]
pub struct SyncJson {
    /// Always 0.
    pub total_ios: u64,
    /// Empty.
    pub lat_ns: LatJson,
}

/// One entry of fio's `jobs` array.
#[derive(Debug, Clone, DeriveSerialize)]
pub struct JobJson {
    /// Job name.
    pub jobname: String,
    /// Always 0 (one group).
    pub groupid: u32,
    /// errno of the error that stopped the job, 0 if none.
    pub error: i32,
    /// What failed (not in fio's layout).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error_message: Option<String>,
    /// Always 0 (the run is over).
    pub eta: u64,
    /// Wall time of the job in whole seconds.
    pub elapsed: u64,
    /// The job's options, string values.
    #[serde(rename = "job options")]
    pub job_options: OrderedMap<String>,
    /// Reads.
    pub read: DirJson,
    /// Writes.
    pub write: DirJson,
    /// Trims (none).
    pub trim: DirJson,
    /// Syncs (none).
    pub sync: SyncJson,
    /// Measured run time, ms.
    pub job_runtime: u64,
    /// Not measured: 0.
    pub usr_cpu: f64,
    /// Not measured: 0.
    pub sys_cpu: f64,
    /// Not measured: 0.
    pub ctx: u64,
    /// Not measured: 0.
    pub majf: u64,
    /// Not measured: 0.
    pub minf: u64,
    /// Submissions by depth reached, percent ("1", "2", ..., ">=64").
    pub iodepth_level: OrderedMap<f64>,
    /// Share of I/Os per latency bucket under 1 us, percent.
    pub latency_ns: OrderedMap<f64>,
    /// Share of I/Os per latency bucket from 1 us to 1 ms, percent.
    pub latency_us: OrderedMap<f64>,
    /// Share of I/Os per latency bucket from 1 ms, percent.
    pub latency_ms: OrderedMap<f64>,
}

/// The non-fio `group` object: totals over all jobs.
#[derive(Debug, Clone, DeriveSerialize)]
pub struct GroupJson {
    /// Number of jobs.
    pub jobs: usize,
    /// First job error, 0 if none.
    pub error: i32,
    /// Reads of all jobs over the longest job run time.
    pub read: DirJson,
    /// Writes of all jobs over the longest job run time.
    pub write: DirJson,
}

/// The non-fio `verify` object.
#[derive(Debug, Clone, DeriveSerialize)]
pub struct VerifyJson {
    /// Verification mode (`crc32c`).
    pub mode: String,
    /// Blocks read back intact.
    pub verified_blocks: u64,
    /// Blocks read back damaged.
    pub mismatches: u64,
    /// Writes completed (blocks whose content could be checked).
    pub written_blocks: u64,
    /// Whether verification passed: no mismatch, and blocks were checked if any
    /// were written.
    pub passed: bool,
}

/// One device's line of the non-fio `faults` object (see [`InjectedFaults`]).
#[derive(Debug, Clone, DeriveSerialize)]
pub struct InjectedFaultsJson {
    /// `target` or `host`.
    pub side: String,
    /// Packets dropped.
    pub dropped: u64,
    /// Packets held back and delivered late.
    pub reordered: u64,
    /// Packets delivered twice.
    pub duplicated: u64,
    /// Packets with a bit flipped.
    pub corrupted: u64,
    /// Packets the ICRC check dropped.
    pub icrc_errors: u64,
    /// Packets received with a good ICRC.
    pub rcvd_pkts: u64,
    /// Packets sent.
    pub sent_pkts: u64,
}

/// The non-fio `faults` object: `--inject-*` probabilities, seed and counts.
#[derive(Debug, Clone, DeriveSerialize)]
pub struct FaultsJson {
    /// Drop probability per received packet.
    pub loss: f64,
    /// Reorder probability per received packet.
    pub reorder: f64,
    /// Duplication probability per received packet.
    pub dup: f64,
    /// Corruption probability per received packet.
    pub corrupt: f64,
    /// Seed of the decisions.
    pub seed: u64,
    /// All faults injected, every device together.
    pub injected_total: u64,
    /// Per device.
    pub devices: Vec<InjectedFaultsJson>,
}

fn faults_json(f: &FaultSummary) -> FaultsJson {
    FaultsJson {
        loss: f.loss,
        reorder: f.reorder,
        dup: f.duplicate,
        corrupt: f.corrupt,
        seed: f.seed,
        injected_total: f.total_injected(),
        devices: f
            .sides
            .iter()
            .map(|s: &InjectedFaults| InjectedFaultsJson {
                side: s.side.clone(),
                dropped: s.dropped,
                reordered: s.reordered,
                duplicated: s.duplicated,
                corrupted: s.corrupted,
                icrc_errors: s.icrc_errors,
                rcvd_pkts: s.rcvd_pkts,
                sent_pkts: s.sent_pkts,
            })
            .collect(),
    }
}

/// The whole fio JSON document.
#[derive(Debug, Clone, DeriveSerialize)]
pub struct FioJson {
    /// Producer and version (fio writes `fio-3.x`).
    #[serde(rename = "fio version")]
    pub fio_version: String,
    /// Unix time of the report, seconds.
    pub timestamp: u64,
    /// Unix time of the report, ms.
    pub timestamp_ms: u64,
    /// The report time as `ctime` (UTC).
    pub time: String,
    /// Options shared by all jobs (target selection).
    #[serde(rename = "global options")]
    pub global_options: OrderedMap<String>,
    /// One entry per job.
    pub jobs: Vec<JobJson>,
    /// Group totals (not in fio's layout).
    pub group: GroupJson,
    /// Verification outcome (not in fio's layout).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub verify: Option<VerifyJson>,
    /// Fault injection (not in fio's layout).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub faults: Option<FaultsJson>,
    /// The floor and the fabric's overhead, `--baseline` (not in fio's layout).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub baseline: Option<crate::baseline::BaselineJson>,
    /// Disk utilisation (none: the device is remote).
    pub disk_util: Vec<serde_json::Value>,
}

fn percent_dist(counts: &[u64], total: u64, floor: f64) -> Vec<f64> {
    counts
        .iter()
        .map(|&n| {
            if total == 0 {
                0.0
            } else {
                let p = 100.0 * n as f64 / total as f64;
                if p < floor && n > 0 {
                    floor
                } else {
                    p
                }
            }
        })
        .collect()
}

/// fio's `latency_ns` / `latency_us` / `latency_ms` objects: percent of the job's
/// I/Os per bucket, keyed by the bucket's upper bound in its unit.
fn latency_buckets(dirs: &[DirStats; 2]) -> [OrderedMap<f64>; 3] {
    let mut counts = [0u64; FIO_LAT_BUCKETS];
    for d in dirs {
        for (a, b) in counts.iter_mut().zip(d.clat.fio_buckets()) {
            *a += b;
        }
    }
    let total: u64 = counts.iter().sum();
    let pcts = percent_dist(&counts, total, 0.01);
    let keys = |extra: &[&str]| -> Vec<String> {
        FIO_LAT_BOUNDS
            .iter()
            .map(u64::to_string)
            .chain(extra.iter().map(|s| s.to_string()))
            .collect()
    };
    let map = |keys: Vec<String>, range: std::ops::Range<usize>| {
        OrderedMap(keys.into_iter().zip(pcts[range].iter().copied()).collect())
    };
    [
        map(keys(&[]), 0..10),
        map(keys(&[]), 10..20),
        map(keys(&["2000", ">=2000"]), 20..32),
    ]
}

fn iodepth_level(dist: &[u64; 7]) -> OrderedMap<f64> {
    let total = dist.iter().sum();
    let keys = ["1", "2", "4", "8", "16", "32", ">=64"];
    OrderedMap(
        keys.iter()
            .map(|k| k.to_string())
            .zip(percent_dist(dist, total, 0.1))
            .collect(),
    )
}

/// fio-style `job options` of a job: the options that shape its workload.
pub fn fio_job_options(spec: &JobSpec, opts: &RunOptions) -> OrderedMap<String> {
    let secs = |d: Duration| {
        if d.subsec_micros() == 0 {
            d.as_secs().to_string()
        } else {
            format!("{}ms", d.as_millis())
        }
    };
    let mut v = vec![
        ("name".to_string(), spec.name.clone()),
        ("rw".into(), spec.rw.fio_name().into()),
        ("bs".into(), spec.bs.to_string()),
        ("iodepth".into(), spec.iodepth.to_string()),
        ("size".into(), spec.size.to_string()),
        ("offset".into(), spec.offset.to_string()),
    ];
    if spec.rw.is_mixed() {
        v.push(("rwmixread".into(), spec.rwmixread.to_string()));
    }
    if let Some(l) = spec.io_limit {
        v.push(("io_size".into(), l.to_string()));
    }
    v.push(("runtime".into(), secs(opts.runtime)));
    if opts.time_based {
        v.push(("time_based".into(), "1".into()));
    }
    if !opts.ramp_time.is_zero() {
        v.push(("ramp_time".into(), secs(opts.ramp_time)));
    }
    v.push(("randseed".into(), spec.seed.to_string()));
    v.push(("verify".into(), opts.verify.fio_name().into()));
    OrderedMap(v)
}

fn job_json(j: &JobResult, result: &BenchResult) -> JobJson {
    let g = &result.group;
    let [latency_ns, latency_us, latency_ms] = latency_buckets(&j.dirs);
    JobJson {
        jobname: j.spec.name.clone(),
        groupid: 0,
        error: j.errno(),
        error_message: j.error.as_ref().map(|e| e.message.clone()),
        eta: 0,
        elapsed: j.elapsed.as_secs_f64().round() as u64,
        job_options: fio_job_options(&j.spec, &result.options),
        read: DirJson::new(&j.dirs[0], j.runtime_ms, g.agg_bw_bytes(0)),
        write: DirJson::new(&j.dirs[1], j.runtime_ms, g.agg_bw_bytes(1)),
        trim: DirJson::new(&DirStats::default(), 0, 0),
        sync: SyncJson {
            total_ios: 0,
            lat_ns: LatJson::empty(),
        },
        job_runtime: j.runtime_ms,
        usr_cpu: 0.0,
        sys_cpu: 0.0,
        ctx: 0,
        majf: 0,
        minf: 0,
        iodepth_level: iodepth_level(&j.depth_dist),
        latency_ns,
        latency_us,
        latency_ms,
    }
}

fn group_json(g: &GroupResult, jobs: usize) -> GroupJson {
    GroupJson {
        jobs,
        error: g.error.as_ref().map_or(0, |e| e.errno),
        read: DirJson::new(&g.dirs[0], g.max_run_ms[0], g.agg_bw_bytes(0)),
        write: DirJson::new(&g.dirs[1], g.max_run_ms[1], g.agg_bw_bytes(1)),
    }
}

/// The fio JSON document for `result`, reported at `now`. `global_options` go to
/// `global options` (e.g. `BenchArgs::fio_global_options`).
pub fn fio_json(
    result: &BenchResult,
    global_options: &[(String, String)],
    now: SystemTime,
) -> FioJson {
    let since_epoch = now.duration_since(UNIX_EPOCH).unwrap_or_default();
    FioJson {
        fio_version: format!("nvmf-bench-{}", env!("CARGO_PKG_VERSION")),
        timestamp: since_epoch.as_secs(),
        timestamp_ms: u64::try_from(since_epoch.as_millis()).unwrap_or(u64::MAX),
        time: ctime_utc(now),
        global_options: OrderedMap(global_options.to_vec()),
        jobs: result.jobs.iter().map(|j| job_json(j, result)).collect(),
        group: group_json(&result.group, result.jobs.len()),
        verify: result.verify.map(|v| VerifyJson {
            mode: result.options.verify.fio_name().into(),
            verified_blocks: v.verified,
            mismatches: v.mismatches,
            written_blocks: v.written,
            passed: v.passed(),
        }),
        faults: result.faults.as_ref().map(faults_json),
        baseline: result
            .baseline
            .as_ref()
            .map(|b| crate::baseline::to_json(b, result)),
        disk_util: Vec::new(),
    }
}

/// [`fio_json`] at the current time, pretty-printed as fio prints it.
pub fn render_json(result: &BenchResult, global_options: &[(String, String)]) -> String {
    let doc = fio_json(result, global_options, SystemTime::now());
    // Serialising plain structs, maps of strings and finite numbers cannot fail;
    // a non-finite float would become null.
    serde_json::to_string_pretty(&doc).unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::testdata;

    fn doc() -> serde_json::Value {
        let r = testdata::result();
        let text = render_json(&r, &[("ioengine".into(), "nvmf-rdma".into())]);
        serde_json::from_str(&text).unwrap()
    }

    #[test]
    fn top_level_layout_is_fio_3() {
        let d = doc();
        assert!(d["fio version"]
            .as_str()
            .unwrap()
            .starts_with("nvmf-bench-"));
        assert!(d["timestamp"].is_u64());
        assert!(d["timestamp_ms"].is_u64());
        assert!(d["time"].is_string());
        assert_eq!(d["global options"]["ioengine"], "nvmf-rdma");
        assert_eq!(d["jobs"].as_array().unwrap().len(), 2);
        assert_eq!(d["disk_util"], serde_json::json!([]));
        assert_eq!(d["verify"]["verified_blocks"], 7);
        assert_eq!(d["verify"]["mismatches"], 0);
        assert_eq!(d["verify"]["written_blocks"], 7);
        assert_eq!(d["verify"]["passed"], true);
        assert_eq!(d["group"]["jobs"], 2);
        assert_eq!(d["group"]["read"]["total_ios"], 2000);
        assert_eq!(d["group"]["read"]["runtime"], 1000);
        assert_eq!(d["group"]["read"]["iops"], 2000.0);
    }

    #[test]
    fn faults_object_carries_probabilities_and_counts() {
        assert!(doc().get("faults").is_none(), "absent without --inject-*");
        let mut r = testdata::result();
        let side = |name: &str, dropped| InjectedFaults {
            side: name.into(),
            dropped,
            duplicated: 0,
            reordered: 0,
            corrupted: 1,
            icrc_errors: 1,
            rcvd_pkts: 100,
            sent_pkts: 90,
        };
        r.faults = Some(FaultSummary {
            loss: 0.001,
            reorder: 0.0,
            duplicate: 0.0,
            corrupt: 0.0001,
            seed: 3,
            sides: vec![side("target", 4), side("host", 5)],
        });
        let d: serde_json::Value = serde_json::from_str(&render_json(&r, &[])).unwrap();
        let f = &d["faults"];
        assert_eq!(f["loss"], 0.001);
        assert_eq!(f["seed"], 3);
        assert_eq!(f["injected_total"], 11);
        assert_eq!(f["devices"][0]["side"], "target");
        assert_eq!(f["devices"][1]["dropped"], 5);
        assert_eq!(f["devices"][1]["icrc_errors"], 1);
    }

    #[test]
    fn job_entry_matches_known_data() {
        let d = doc();
        let j = &d["jobs"][0];
        assert_eq!(j["jobname"], "randread");
        assert_eq!(j["groupid"], 0);
        assert_eq!(j["error"], 0);
        assert!(j.get("error_message").is_none());
        assert_eq!(j["job options"]["rw"], "randrw");
        assert_eq!(j["job options"]["bs"], "4096");
        assert_eq!(j["job options"]["verify"], "crc32c");
        let r = &j["read"];
        assert_eq!(r["io_bytes"], 4_096_000);
        assert_eq!(r["io_kbytes"], 4000);
        assert_eq!(r["bw_bytes"], 4_096_000);
        assert_eq!(r["bw"], 4000);
        assert_eq!(r["iops"], 1000.0);
        assert_eq!(r["runtime"], 1000);
        assert_eq!(r["total_ios"], 1000);
        assert_eq!(r["short_ios"], 0);
        assert_eq!(r["drop_ios"], 0);
        assert_eq!(r["slat_ns"]["N"], 0);
        let c = &r["clat_ns"];
        assert_eq!(c["min"], 10_000);
        assert_eq!(c["max"], 400_000);
        assert_eq!(c["N"], 1000);
        assert!((c["mean"].as_f64().unwrap() - 10_750.0).abs() < 1e-6);
        let keys: Vec<&str> = c["percentile"]
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        for k in [
            "1.000000",
            "5.000000",
            "10.000000",
            "20.000000",
            "30.000000",
            "40.000000",
            "50.000000",
            "60.000000",
            "70.000000",
            "80.000000",
            "90.000000",
            "95.000000",
            "99.000000",
            "99.500000",
            "99.900000",
            "99.950000",
            "99.990000",
        ] {
            assert!(keys.contains(&k), "missing percentile {k}");
        }
        assert_eq!(keys.len(), 17);
        assert_eq!(c["percentile"]["50.000000"], 10_000);
        // 50 us lies in a 32 ns wide bucket at 3 significant digits: 49984..50015.
        assert_eq!(c["percentile"]["99.500000"], 49_984);
        assert_eq!(r["lat_ns"]["N"], 1000);
        assert!(r["lat_ns"].get("percentile").is_none());
        assert_eq!(r["bw_min"], 3900);
        assert_eq!(r["bw_max"], 4100);
        assert_eq!(r["bw_agg"], 50.0);
        assert_eq!(r["bw_samples"], 2);
        assert_eq!(r["iops_min"], 975);
        assert_eq!(r["iops_max"], 1025);
        assert_eq!(r["iops_samples"], 2);
        // No writes in job 0: fio still writes the object, with zeros.
        assert_eq!(j["write"]["total_ios"], 0);
        assert_eq!(j["write"]["iops"], 0.0);
        assert_eq!(j["write"]["clat_ns"]["N"], 0);
        assert_eq!(j["trim"]["total_ios"], 0);
        assert_eq!(j["iodepth_level"]["1"], 100.0);
        assert_eq!(j["latency_us"]["20"], 99.0);
        assert_eq!(j["latency_us"]["100"], 0.9);
        assert_eq!(j["latency_us"]["500"], 0.1);
        assert_eq!(j["latency_ms"][">=2000"], 0.0);
        assert_eq!(
            d["jobs"][1]["write"]["clat_ns"]["percentile"]["99.990000"],
            20_000
        );
    }

    #[test]
    fn keys_keep_fio_order() {
        let text = render_json(&testdata::result(), &[]);
        let pos = |k: &str| text.find(k).unwrap_or_else(|| panic!("{k} missing"));
        assert!(pos("\"fio version\"") < pos("\"timestamp\""));
        assert!(pos("\"global options\"") < pos("\"jobs\""));
        assert!(pos("\"jobname\"") < pos("\"job options\""));
        assert!(pos("\"read\"") < pos("\"write\""));
        assert!(pos("\"1.000000\"") < pos("\"5.000000\""));
        assert!(pos("\"5.000000\"") < pos("\"10.000000\""));
    }
}
