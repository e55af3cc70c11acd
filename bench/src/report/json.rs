//! fio 3.33's JSON output (`--output-format=json`, stat.c `show_thread_status_json`,
//! `add_ddir_status_json`, `add_ddir_lat_json`): the same keys in the same order,
//! written by fio's writer ([`JsonValue::render`]).
//!
//! Top level: `fio version`, `timestamp`, `timestamp_ms`, `time`, `global options`
//! (when any were given), `jobs` (one entry per job, or per group with
//! `group_reporting`), and one key fio does not write, `nvmf-bench`, which holds
//! everything of nvmf-bench's own (its version, the target, verification, injected
//! faults, the baseline, the embedded target's counters, the jobs' error messages);
//! fio's consumers ignore it. `disk_util` is left out, as fio leaves it out when no
//! local disk was used. Latencies are ns, `bw` KiB/s, `runtime` ms; `job options` and
//! `global options` echo the options as given.

use std::time::{SystemTime, UNIX_EPOCH};

use super::fmt::ctime_local;
use super::jsonw::JsonValue;
use super::text::{group_stats, percent_of_agg, FIO_VERSION};
use crate::result::{bw_bytes_per_sec, iops, BenchResult, FaultSummary, JobResult, RunStats};
use crate::stats::{calc_dist, calc_lat, LatencyStats, Moments, DDIR_COUNT, FIO_LAT_BOUNDS};

const DDIR_NAMES: [&str; DDIR_COUNT] = ["read", "write", "trim"];

/// fio's latency object (`slat_ns`, `clat_ns`, `lat_ns`): min, max, mean, stddev, N,
/// and the percentiles of `list` when asked for and there are samples.
fn lat_json(s: &LatencyStats, list: Option<&[f64]>) -> JsonValue {
    let mut o = JsonValue::object();
    let n = s.count();
    let (min, max, mean, dev) = if n > 0 {
        (s.min_ns(), s.max_ns(), s.mean_ns(), s.stddev_ns())
    } else {
        (0, 0, 0.0, 0.0)
    };
    o.push("min", min)
        .push("max", max)
        .push("mean", mean)
        .push("stddev", dev)
        .push("N", n);
    if let Some(list) = list.filter(|_| n > 0) {
        let vals = s.percentiles_ns(list);
        if !vals.is_empty() {
            let mut p = JsonValue::object();
            for (pct, v) in list.iter().zip(vals) {
                p.push(&format!("{pct:.6}"), v);
            }
            o.push("percentile", p);
        }
    }
    o
}

fn samples(o: &mut JsonValue, prefix: &str, m: &Moments, dev_key: &str, agg: Option<f64>) {
    let has = m.count() > 0;
    let v = |x: f64| if has { x } else { 0.0 };
    o.push(&format!("{prefix}_min"), v(m.min()) as u64)
        .push(&format!("{prefix}_max"), v(m.max()) as u64);
    if let Some(a) = agg {
        o.push(&format!("{prefix}_agg"), if has { a } else { 0.0 });
    }
    o.push(&format!("{prefix}_mean"), v(m.mean()))
        .push(&format!("{prefix}_{dev_key}"), v(m.stddev()))
        .push(&format!("{prefix}_samples"), m.count());
}

fn ddir_json(ts: &JobResult, d: usize, rs: &RunStats) -> JsonValue {
    let dir = &ts.dirs[d];
    let runt = ts.runtime_ms[d];
    let bw_bytes = bw_bytes_per_sec(dir.bytes, runt);
    let mut o = JsonValue::object();
    o.push("io_bytes", dir.bytes)
        .push("io_kbytes", dir.bytes >> 10)
        .push("bw_bytes", bw_bytes)
        .push("bw", bw_bytes / 1024)
        .push("iops", iops(dir.issued, runt))
        .push("runtime", runt)
        .push("total_ios", dir.issued)
        .push("short_ios", 0u64)
        .push("drop_ios", 0u64)
        .push("slat_ns", lat_json(&dir.slat, None))
        .push(
            "clat_ns",
            lat_json(&dir.clat, Some(&ts.spec.percentile_list)),
        )
        .push("lat_ns", lat_json(&dir.lat, None));
    let bw = &dir.bw_kib_samples;
    samples(
        &mut o,
        "bw",
        bw,
        "dev",
        Some(percent_of_agg(rs.agg[d], bw.mean())),
    );
    samples(&mut o, "iops", &dir.iops_samples, "stddev", None);
    o
}

fn dist_json(counts: &[u64], total: u64, keys: [&str; 7]) -> JsonValue {
    let mut o = JsonValue::object();
    for (k, p) in keys.iter().zip(calc_dist(counts, total)) {
        o.push(k, p);
    }
    o
}

fn given(opts: &[(String, Option<String>)]) -> Option<JsonValue> {
    let mut o = JsonValue::object();
    let mut any = false;
    for (k, v) in opts {
        // fio keeps only options with a value.
        if let Some(v) = v.as_ref().filter(|v| !v.is_empty()) {
            o.push(k, v.as_str());
            any = true;
        }
    }
    any.then_some(o)
}

/// One entry of fio's `jobs` array.
fn job_json(ts: &JobResult, rs: &RunStats, elapsed_s: u64) -> JsonValue {
    let mut o = JsonValue::object();
    o.push("jobname", ts.spec.name.as_str())
        .push("groupid", ts.spec.groupid)
        .push("error", ts.errno())
        .push("eta", 0u64)
        .push("elapsed", elapsed_s);
    if let Some(g) = given(&ts.spec.given) {
        o.push("job options", g);
    }
    for (d, name) in DDIR_NAMES.iter().enumerate() {
        o.push(name, ddir_json(ts, d, rs));
    }
    let mut sync = JsonValue::object();
    sync.push("total_ios", ts.sync.issued).push(
        "lat_ns",
        lat_json(&ts.sync.lat, Some(&ts.spec.percentile_list)),
    );
    o.push("sync", sync);
    let runt = ts.total_run_time_ms;
    let cpu = |ms: u64| {
        if runt > 0 {
            ms as f64 * 100.0 / runt as f64
        } else {
            0.0
        }
    };
    o.push("job_runtime", runt)
        .push("usr_cpu", cpu(ts.cpu.usr_ms))
        .push("sys_cpu", cpu(ts.cpu.sys_ms))
        .push("ctx", ts.cpu.ctx)
        .push("majf", ts.cpu.majf)
        .push("minf", ts.cpu.minf);
    let depth = &ts.depth;
    o.push(
        "iodepth_level",
        dist_json(
            &depth.map,
            ts.issued(),
            ["1", "2", "4", "8", "16", "32", ">=64"],
        ),
    );
    let batch = ["0", "4", "8", "16", "32", "64", ">=64"];
    o.push(
        "iodepth_submit",
        dist_json(&depth.submit, depth.total_submit, batch),
    );
    o.push(
        "iodepth_complete",
        dist_json(&depth.complete, depth.total_complete, batch),
    );
    let lat = calc_lat(&ts.lat_buckets, ts.issued());
    let keys: Vec<String> = FIO_LAT_BOUNDS.iter().map(u64::to_string).collect();
    let bucket = |range: std::ops::Range<usize>, extra: &[&str]| {
        let mut m = JsonValue::object();
        let names = keys.iter().map(String::as_str).chain(extra.iter().copied());
        for (k, p) in names.zip(&lat[range]) {
            m.push(k, *p);
        }
        m
    };
    o.push("latency_ns", bucket(0..10, &[]))
        .push("latency_us", bucket(10..20, &[]))
        .push("latency_ms", bucket(20..32, &["2000", ">=2000"]))
        .push("latency_depth", ts.spec.iodepth)
        .push("latency_target", 0u64)
        .push("latency_percentile", 100.0)
        .push("latency_window", 0u64);
    if let Some(d) = ts.spec.description.as_ref().filter(|d| !d.is_empty()) {
        o.push("desc", d.as_str());
    }
    o
}

fn faults_json(f: &FaultSummary) -> JsonValue {
    let mut o = JsonValue::object();
    o.push("loss", f.loss)
        .push("reorder", f.reorder)
        .push("dup", f.duplicate)
        .push("corrupt", f.corrupt)
        .push("seed", f.seed)
        .push("injected_total", f.total_injected());
    let devices = f
        .sides
        .iter()
        .map(|s| {
            let mut d = JsonValue::object();
            d.push("side", s.side.as_str())
                .push("dropped", s.dropped)
                .push("reordered", s.reordered)
                .push("duplicated", s.duplicated)
                .push("corrupted", s.corrupted)
                .push("icrc_errors", s.icrc_errors)
                .push("rcvd_pkts", s.rcvd_pkts)
                .push("sent_pkts", s.sent_pkts);
            d
        })
        .collect();
    o.push("devices", JsonValue::Array(devices));
    o
}

/// The `nvmf-bench` object: what nvmf-bench reports beyond fio's layout.
pub fn own_json(result: &BenchResult, target: &[(String, String)]) -> JsonValue {
    let mut o = JsonValue::object();
    o.push("version", env!("CARGO_PKG_VERSION"));
    let mut t = JsonValue::object();
    for (k, v) in target {
        t.push(k, v.as_str());
    }
    o.push("target", t);
    if let Some(v) = result.verify {
        let mut j = JsonValue::object();
        let modes: Vec<&str> = {
            let mut m: Vec<&str> = result
                .jobs
                .iter()
                .map(|j| j.spec.verify.fio_name())
                .filter(|m| *m != "0")
                .collect();
            m.dedup();
            m
        };
        j.push("mode", modes.join(","))
            .push("verified_blocks", v.verified)
            .push("mismatches", v.mismatches)
            .push("written_blocks", v.written)
            .push("unchecked_blocks", v.unchecked)
            .push("read_back_cut_short", i64::from(v.cut_short))
            .push("passed", i64::from(v.passed()));
        o.push("verify", j);
    }
    if let Some(f) = &result.faults {
        o.push("faults", faults_json(f));
    }
    if let Some(b) = &result.baseline {
        let v = serde_json::to_value(crate::baseline::to_json(b, result)).unwrap_or_default();
        o.push("baseline", JsonValue::from_serde(&v));
    }
    if let Some(c) = &result.target_counters {
        o.push("target_counters", JsonValue::from_serde(c));
    }
    if let Some(n) = result.reconnects {
        o.push("reconnects", n);
    }
    let errors: Vec<JsonValue> = result
        .jobs
        .iter()
        .filter_map(|j| {
            let e = j.error.as_ref()?;
            let mut m = JsonValue::object();
            m.push("jobname", j.spec.name.as_str())
                .push("thread_number", j.spec.thread_number)
                .push("error", e.errno)
                .push("verror", e.verror())
                .push("message", e.message.as_str());
            Some(m)
        })
        .collect();
    if !errors.is_empty() {
        o.push("errors", JsonValue::Array(errors));
    }
    o
}

/// The fio JSON document for `result`, reported at `now`; `target` (e.g.
/// `BenchArgs::fio_global_options`) describes the target under `nvmf-bench`.
pub fn fio_json(result: &BenchResult, target: &[(String, String)], now: SystemTime) -> JsonValue {
    let since = now.duration_since(UNIX_EPOCH).unwrap_or_default();
    let mut root = JsonValue::object();
    root.push("fio version", FIO_VERSION)
        .push("timestamp", since.as_secs())
        .push(
            "timestamp_ms",
            u64::try_from(since.as_millis()).unwrap_or(u64::MAX),
        )
        .push("time", ctime_local(now));
    if let Some(g) = given(&result.options.global_options) {
        root.push("global options", g);
    }
    let units = result.report_units();
    let groups = group_stats(&units);
    let elapsed_s = result.elapsed.as_millis().div_ceil(1000) as u64;
    let jobs = units
        .iter()
        .map(|u| {
            let rs = groups
                .iter()
                .find(|g| g.groupid == u.spec.groupid)
                .cloned()
                .unwrap_or_default();
            job_json(u, &rs, elapsed_s)
        })
        .collect();
    root.push("jobs", JsonValue::Array(jobs));
    root.push("nvmf-bench", own_json(result, target));
    root
}

/// [`fio_json`] at the current time, as fio prints it (with its final newline).
pub fn render_json(result: &BenchResult, target: &[(String, String)]) -> String {
    let mut s = fio_json(result, target, SystemTime::now()).render();
    s.push('\n');
    s
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
    fn top_level_keys_are_fio_3_33s_plus_one_of_ours() {
        let d = doc();
        let keys: Vec<&str> = d.as_object().unwrap().keys().map(String::as_str).collect();
        let mut want = vec![
            "fio version",
            "timestamp",
            "timestamp_ms",
            "time",
            "global options",
            "jobs",
            "nvmf-bench",
        ];
        want.sort_unstable();
        assert_eq!(keys, want, "serde_json sorts keys");
        assert_eq!(d["fio version"], "fio-3.33");
        assert_eq!(d["global options"]["rw"], "randrw");
        assert!(
            d["global options"].get("time_based").is_none(),
            "flags are not echoed"
        );
        assert_eq!(d["jobs"].as_array().unwrap().len(), 2);
        let own = &d["nvmf-bench"];
        assert_eq!(own["target"]["ioengine"], "nvmf-rdma");
        assert_eq!(own["verify"]["verified_blocks"], 7);
        assert_eq!(own["verify"]["passed"], 1);
        assert!(own.get("errors").is_none());
    }

    #[test]
    fn keys_keep_fios_order() {
        let text = render_json(&testdata::result(), &[]);
        let order = [
            "\"fio version\"",
            "\"timestamp\"",
            "\"timestamp_ms\"",
            "\"time\"",
            "\"global options\"",
            "\"jobs\"",
            "\"jobname\"",
            "\"groupid\"",
            "\"error\"",
            "\"eta\"",
            "\"elapsed\"",
            "\"job options\"",
            "\"read\"",
            "\"io_bytes\"",
            "\"slat_ns\"",
            "\"clat_ns\"",
            "\"percentile\"",
            "\"lat_ns\"",
            "\"bw_min\"",
            "\"bw_agg\"",
            "\"iops_samples\"",
            "\"write\"",
            "\"trim\"",
            "\"sync\"",
            "\"job_runtime\"",
            "\"usr_cpu\"",
            "\"minf\"",
            "\"iodepth_level\"",
            "\"iodepth_submit\"",
            "\"iodepth_complete\"",
            "\"latency_ns\"",
            "\"latency_us\"",
            "\"latency_ms\"",
            "\"latency_depth\"",
            "\"latency_target\"",
            "\"latency_percentile\"",
            "\"latency_window\"",
            "\"nvmf-bench\"",
        ];
        let mut at = 0;
        for k in order {
            let i = text[at..]
                .find(k)
                .unwrap_or_else(|| panic!("{k} missing after {at}"));
            at += i;
        }
        assert!(text.starts_with("{\n  \"fio version\" : \"fio-3.33\",\n"));
        assert!(text.ends_with("}\n"));
    }

    #[test]
    fn job_entry_matches_known_data() {
        let d = doc();
        let j = &d["jobs"][0];
        assert_eq!(j["jobname"], "randread");
        assert_eq!(j["groupid"], 0);
        assert_eq!(j["error"], 0);
        assert_eq!(j["job options"]["name"], "randread");
        let r = &j["read"];
        assert_eq!(r["io_bytes"], 4_096_000);
        assert_eq!(r["io_kbytes"], 4000);
        assert_eq!(r["bw_bytes"], 4_096_000);
        assert_eq!(r["bw"], 4000);
        assert_eq!(r["iops"], 1000.0);
        assert_eq!(r["runtime"], 1000);
        assert_eq!(r["total_ios"], 1000);
        assert_eq!(r["slat_ns"]["N"], 1000);
        assert_eq!(r["slat_ns"]["min"], 1000);
        assert!(r["slat_ns"].get("percentile").is_none());
        let c = &r["clat_ns"];
        assert_eq!(
            (c["min"].as_u64(), c["max"].as_u64()),
            (Some(10_000), Some(400_000))
        );
        assert_eq!(c["N"], 1000);
        assert!((c["mean"].as_f64().unwrap() - 10_750.0).abs() < 1e-6);
        let keys: Vec<&String> = c["percentile"].as_object().unwrap().keys().collect();
        assert_eq!(keys.len(), 17);
        // fio's bucket values (see histogram.rs).
        assert_eq!(c["percentile"]["50.000000"], 10_048);
        assert_eq!(c["percentile"]["99.500000"], 49_920);
        assert_eq!(c["percentile"]["99.990000"], 399_360);
        assert_eq!(r["lat_ns"]["min"], 11_000);
        assert!(r["lat_ns"].get("percentile").is_none());
        assert_eq!(r["bw_min"], 3900);
        assert_eq!(r["bw_max"], 4100);
        assert_eq!(r["bw_agg"], 50.0);
        assert_eq!(r["bw_samples"], 2);
        assert_eq!(r["iops_min"], 975);
        assert_eq!(r["iops_samples"], 2);
        // No writes in job 0: fio still writes the object, with zeros.
        assert_eq!(j["write"]["total_ios"], 0);
        assert_eq!(j["write"]["iops"], 0.0);
        assert_eq!(j["write"]["clat_ns"]["N"], 0);
        assert!(j["write"]["clat_ns"].get("percentile").is_none());
        assert_eq!(j["trim"]["total_ios"], 0);
        assert_eq!(j["sync"]["total_ios"], 0);
        assert_eq!(j["job_runtime"], 1000);
        assert_eq!(j["usr_cpu"], 1.0);
        assert_eq!(j["sys_cpu"], 2.0);
        assert_eq!(j["ctx"], 30);
        assert_eq!(j["iodepth_level"]["1"], 100.0);
        assert_eq!(j["iodepth_submit"]["4"], 100.0);
        assert_eq!(j["iodepth_complete"]["0"], 0.0);
        assert_eq!(j["latency_us"]["20"], 99.0);
        assert_eq!(j["latency_us"]["100"], 0.9);
        assert_eq!(j["latency_us"]["500"], 0.1);
        assert_eq!(j["latency_ms"][">=2000"], 0.0);
        assert_eq!(j["latency_depth"], 1);
        assert_eq!(j["latency_percentile"], 100.0);
        assert_eq!(
            d["jobs"][1]["write"]["clat_ns"]["percentile"]["99.990000"],
            20_096
        );
    }

    #[test]
    fn group_reporting_gives_one_entry_per_group() {
        let mut r = testdata::result();
        r.options.group_reporting = true;
        let d: serde_json::Value = serde_json::from_str(&render_json(&r, &[])).unwrap();
        let jobs = d["jobs"].as_array().unwrap();
        assert_eq!(jobs.len(), 1);
        assert_eq!(jobs[0]["read"]["total_ios"], 2000);
        assert_eq!(jobs[0]["read"]["bw_mean"], 8000.0);
        assert_eq!(jobs[0]["read"]["bw_agg"], 100.0);
        assert_eq!(jobs[0]["job_runtime"], 2000);
    }
}
