//! fio's "normal" text report, line for line as fio 3.33 prints it (stat.c
//! `show_thread_status_normal`, `show_ddir_status`, `display_lat`,
//! `show_clat_percentiles`, `show_latencies`, `show_group_stats`), and the job
//! header lines fio prints before the run (init.c `add_job`, backend.c
//! `run_threads`).
//!
//! One block per job, or with `group_reporting` one per reporting group with the
//! group's figures added up (`jobs=N`); then "Run status group N (all jobs)" per
//! group. Units follow fio: latencies in nsec, usec or msec by magnitude, bandwidth
//! by `num2str`. nvmf-bench's own lines (verification, injected faults, the baseline,
//! the embedded target's counters) are not here: see [`crate::report::extras`].

use std::fmt::Write as _;
use std::time::SystemTime;

use super::fmt::{ctime_local, num2str, N2sUnit};
use crate::histogram::PlatHistogram;
use crate::jobspec::JobSpec;
use crate::result::{bw_bytes_per_sec, BenchResult, JobResult, RunStats, VerifySummary};
use crate::stats::{calc_dist, calc_lat, LatencyStats, Moments, DDIR_COUNT};

/// fio's default `sig_figs`.
const SIG_FIGS: usize = 4;
/// fio's default `percentile_precision`.
const PERCENTILE_PRECISION: usize = 2;
const DDIR_NAMES: [&str; DDIR_COUNT] = ["read", "write", "trim"];
const GROUP_DDIR_NAMES: [&str; DDIR_COUNT] = ["   READ", "  WRITE", "   TRIM"];

/// The version fio's output names (`fio-3.33`): nvmf-bench writes fio 3.33's formats.
pub const FIO_VERSION: &str = "fio-3.33";

/// The text report of `result`, as fio prints it after a run with
/// `--output-format=normal`: a blank line, the job (or group) blocks, the run status
/// of each group.
pub fn render_text(result: &BenchResult) -> String {
    render_text_at(result, SystemTime::now())
}

/// [`render_text`] with the job lines' time given (for tests).
pub fn render_text_at(result: &BenchResult, now: SystemTime) -> String {
    let mut out = String::from("\n");
    let time = ctime_local(now);
    let units = result.report_units();
    let groups = group_stats(&units);
    for u in &units {
        let rs = groups
            .iter()
            .find(|g| g.groupid == u.spec.groupid)
            .cloned()
            .unwrap_or_default();
        show_thread_status(&mut out, u, &rs, &time);
    }
    for rs in &groups {
        show_group_stats(&mut out, rs);
    }
    out
}

/// fio's run status of each group in `units`, in group order.
pub fn group_stats(units: &[JobResult]) -> Vec<RunStats> {
    let mut ids: Vec<u32> = units.iter().map(|u| u.spec.groupid).collect();
    ids.sort_unstable();
    ids.dedup();
    ids.into_iter()
        .map(|g| {
            let members: Vec<&JobResult> = units.iter().filter(|u| u.spec.groupid == g).collect();
            RunStats::of(g, &members)
        })
        .collect()
}

/// Why a verification that found no mismatch still failed: blocks were written and
/// none was checked, or a signal cut the read-back short. `None` when it passed or
/// mismatches say it all.
pub fn verify_problem(v: &VerifySummary, interrupted: bool) -> Option<String> {
    if v.cut_short && v.mismatches == 0 {
        return Some(format!(
            "the read-back was cut short by a signal: {} of the blocks written were not \
             read back and checked",
            v.unchecked
        ));
    }
    if !v.checked_nothing() {
        return None;
    }
    let why = if interrupted {
        "the run was interrupted before reading them back"
    } else {
        "the read-back did not run or found nothing it could check"
    };
    Some(format!(
        "{} blocks were written and none was read back and checked ({why})",
        v.written
    ))
}

/// fio's `bs=(R) 4096B-4096B, (W) ..., (T) ...` of a job.
fn bs_ranges(spec: &JobSpec) -> String {
    let s = |n: u32| num2str(u64::from(n), SIG_FIGS, true, N2sUnit::Byte);
    let part = |d: usize| {
        let (lo, hi) = spec.bs_range(d);
        format!("{}-{}", s(lo), s(hi))
    };
    format!("(R) {}, (W) {}, (T) {}", part(0), part(1), part(2))
}

/// The header fio prints before a run (normal output only): one line per job
/// section (`name: (g=0): rw=randread, bs=(R) 4096B-4096B, (W) ..., ioengine=...,
/// iodepth=1`), `...` under a section with more than one job, then `fio-3.33` and
/// `Starting N threads` (nvmf-bench's jobs are threads, fio's `thread` mode).
pub fn render_header(jobs: &[JobSpec]) -> String {
    let mut out = String::new();
    for (i, j) in jobs.iter().enumerate() {
        if j.index == 0 {
            let _ = writeln!(
                out,
                "{}: (g={}): rw={}, bs={}, ioengine=nvmf-rdma, iodepth={}",
                j.name,
                j.groupid,
                j.rw.fio_name(),
                bs_ranges(j),
                j.iodepth
            );
            if jobs.get(i + 1).is_some_and(|n| n.index > 0) {
                out.push_str("...\n");
            }
        }
    }
    let _ = writeln!(out, "{FIO_VERSION}");
    let n = jobs.len();
    let _ = writeln!(out, "Starting {n} thread{}", if n > 1 { "s" } else { "" });
    out
}

fn show_thread_status(out: &mut String, ts: &JobResult, rs: &RunStats, time: &str) {
    let bytes: u64 = ts.dirs.iter().map(|d| d.bytes).sum();
    if bytes == 0 && ts.issued() == 0 {
        return;
    }
    let name = &ts.spec.name;
    let (g, m, pid) = (ts.spec.groupid, ts.members, ts.tid);
    match &ts.error {
        None => {
            let _ = writeln!(
                out,
                "{name}: (groupid={g}, jobs={m}): err= 0: pid={pid}: {time}"
            );
        }
        Some(e) => {
            let _ = writeln!(
                out,
                "{name}: (groupid={g}, jobs={m}): err={:2} ({}): pid={pid}: {time}",
                e.errno,
                e.verror()
            );
        }
    }
    if let Some(d) = ts.spec.description.as_ref().filter(|d| !d.is_empty()) {
        let _ = writeln!(out, "  Description  : [{d}]");
    }
    for d in 0..DDIR_COUNT {
        if ts.dirs[d].bytes > 0 {
            show_ddir_status(out, rs, ts, d);
        }
    }
    show_latencies(out, ts);
    if ts.sync.lat.count() > 0 {
        out.push_str("  fsync/fdatasync/sync_file_range:\n");
        let s = &ts.sync.lat;
        display_lat(out, "sync", s);
        if let Some(h) = s.histogram() {
            show_clat_percentiles(out, h, s.count(), &ts.spec.percentile_list, "sync");
        }
    }
    let runt = ts.total_run_time_ms;
    let (usr, sys) = if runt > 0 {
        (
            ts.cpu.usr_ms as f64 * 100.0 / runt as f64,
            ts.cpu.sys_ms as f64 * 100.0 / runt as f64,
        )
    } else {
        (0.0, 0.0)
    };
    let _ = writeln!(
        out,
        "  cpu          : usr={usr:3.2}%, sys={sys:3.2}%, ctx={}, majf={}, minf={}",
        ts.cpu.ctx, ts.cpu.majf, ts.cpu.minf
    );
    let dist = |out: &mut String, label: &str, keys: [&str; 7], v: Vec<f64>| {
        let _ = write!(out, "{label}");
        for (i, (k, p)) in keys.iter().zip(v).enumerate() {
            let sep = if i == 0 { "" } else { ", " };
            let _ = write!(out, "{sep}{k}={p:3.1}%");
        }
        out.push('\n');
    };
    let depth = &ts.depth;
    dist(
        out,
        "  IO depths    : ",
        ["1", "2", "4", "8", "16", "32", ">=64"],
        calc_dist(&depth.map, ts.issued()),
    );
    dist(
        out,
        "     submit    : ",
        ["0", "4", "8", "16", "32", "64", ">=64"],
        calc_dist(&depth.submit, depth.total_submit),
    );
    dist(
        out,
        "     complete  : ",
        ["0", "4", "8", "16", "32", "64", ">=64"],
        calc_dist(&depth.complete, depth.total_complete),
    );
    let _ = writeln!(
        out,
        "     issued rwts: total={},{},{},{} short=0,0,0,0 dropped=0,0,0,0",
        ts.dirs[0].issued, ts.dirs[1].issued, ts.dirs[2].issued, ts.sync.issued
    );
    let _ = writeln!(
        out,
        "     latency   : target=0, window=0, percentile=100.00%, depth={}",
        ts.spec.iodepth
    );
}

/// fio's `convert_agg_kbytes_percent`: the mean (as an `int`, as fio passes it) as a
/// percentage of the group's aggregate bandwidth in KiB/s, at most 100.
pub fn percent_of_agg(agg_bytes: u64, mean: f64) -> f64 {
    if agg_bytes > 1024 {
        let mean = mean as i32 as f64;
        (mean * 100.0 / (agg_bytes as f64 / 1024.0)).min(100.0)
    } else {
        100.0
    }
}

fn show_ddir_status(out: &mut String, rs: &RunStats, ts: &JobResult, d: usize) {
    let runt = ts.runtime_ms[d];
    if runt == 0 {
        return;
    }
    let dir = &ts.dirs[d];
    let bw = bw_bytes_per_sec(dir.bytes, runt);
    let iops = (u128::from(dir.issued) * 1000 / u128::from(runt)) as u64;
    let post = if d == 1 { "; 0 zone resets" } else { "" };
    let _ = writeln!(
        out,
        "  {}: IOPS={}, BW={} ({})({}/{runt}msec){post}",
        DDIR_NAMES[d],
        num2str(iops, SIG_FIGS, false, N2sUnit::None),
        num2str(bw, SIG_FIGS, true, N2sUnit::BytePerSec),
        num2str(bw, SIG_FIGS, false, N2sUnit::BytePerSec),
        num2str(dir.bytes, SIG_FIGS, true, N2sUnit::Byte),
    );
    if dir.slat.count() > 0 {
        display_lat(out, "slat", &dir.slat);
    }
    if dir.clat.count() > 0 {
        display_lat(out, "clat", &dir.clat);
    }
    if dir.lat.count() > 0 {
        display_lat(out, " lat", &dir.lat);
    }
    if let Some(h) = dir.clat.histogram().filter(|_| dir.clat.count() > 0) {
        show_clat_percentiles(out, h, dir.clat.count(), &ts.spec.percentile_list, "clat");
    }
    show_bw(out, &dir.bw_kib_samples, rs.agg[d]);
    let io = &dir.iops_samples;
    if io.count() > 0 {
        let _ = writeln!(
            out,
            "   iops        : min={:5}, max={:5}, avg={:5.02}, stdev={:5.02}, samples={}",
            io.min() as u64,
            io.max() as u64,
            io.mean(),
            io.stddev(),
            io.count()
        );
    }
}

fn show_bw(out: &mut String, bw: &Moments, agg: u64) {
    if bw.count() == 0 {
        return;
    }
    let per = percent_of_agg(agg, bw.mean());
    let (mut min, mut max, mut mean, mut dev) =
        (bw.min() as u64, bw.max() as u64, bw.mean(), bw.stddev());
    let mut unit = "KiB";
    if mean > 1024.0 * 1024.0 {
        min = (min as f64 / 1024.0) as u64;
        max = (max as f64 / 1024.0) as u64;
        mean /= 1024.0;
        dev /= 1024.0;
        unit = "MiB";
    }
    let _ = writeln!(
        out,
        "   bw ({unit:>5}/s): min={min:5}, max={max:5}, per={per:3.2}%, avg={mean:5.02}, stdev={dev:5.02}, samples={}",
        bw.count()
    );
}

/// fio's `display_lat`: `    clat (usec): min=..., max=..., avg=..., stdev=...`, in
/// msec, usec or nsec by fio's thresholds (`nsec_to_msec`, `nsec_to_usec`).
fn display_lat(out: &mut String, name: &str, s: &LatencyStats) {
    let (mut min, mut max, mut mean, mut dev) =
        (s.min_ns(), s.max_ns(), s.mean_ns(), s.stddev_ns());
    let base = if min > 2_000_000 && max > 99_999_999 && dev > 1_000_000.0 {
        min /= 1_000_000;
        max /= 1_000_000;
        mean /= 1_000_000.0;
        dev /= 1_000_000.0;
        "(msec)"
    } else if min > 2000 && max > 99_999 && dev > 1000.0 {
        min /= 1000;
        max /= 1000;
        mean /= 1000.0;
        dev /= 1000.0;
        "(usec)"
    } else {
        "(nsec)"
    };
    let _ = writeln!(
        out,
        "    {name} {base}: min={}, max={}, avg={mean:5.02}, stdev={dev:5.02}",
        num2str(min, 6, false, N2sUnit::None),
        num2str(max, 6, false, N2sUnit::None)
    );
}

/// fio's `show_clat_percentiles` (precision 2): the unit from the percentile values'
/// range, values rounded up into it, as many per line as fit 80 columns.
fn show_clat_percentiles(out: &mut String, h: &PlatHistogram, n: u64, list: &[f64], pre: &str) {
    let vals = h.percentiles(list, n);
    if vals.is_empty() {
        return;
    }
    let minv = vals.iter().copied().min().unwrap_or(0);
    let maxv = vals.iter().copied().max().unwrap_or(0);
    let (scale_down, divisor, unit) = if minv > 2_000_000 && maxv > 99_999_999 {
        (2, 1_000_000, "msec")
    } else if minv > 2000 && maxv > 99_999 {
        (1, 1000, "usec")
    } else {
        (0, 1, "nsec")
    };
    let _ = write!(out, "    {pre} percentiles ({unit}):\n     |");
    let scaled = maxv / divisor;
    let width = if scaled == 0 {
        5
    } else {
        (scaled.ilog10() as usize + 1).max(5)
    };
    let per_line = (80 - 7) / (PERCENTILE_PRECISION + 10 + width);
    for (j, (&p, &v)) in list.iter().zip(&vals).enumerate() {
        if j != 0 && j % per_line == 0 {
            out.push_str("     |");
        }
        let last = j == vals.len() - 1;
        let mut v = v;
        for _ in 0..scale_down {
            v = v.div_ceil(1000);
        }
        let _ = write!(
            out,
            " {p:5.2}th=[{v:width$}]{}",
            if last { '\n' } else { ',' }
        );
        if last {
            break;
        }
        if j % per_line == per_line - 1 {
            out.push('\n');
        }
    }
}

/// fio's `show_latencies`: the share of I/Os per latency bucket, `lat (nsec)`,
/// `lat (usec)`, `lat (msec)`, five buckets a line, empty buckets left out.
fn show_latencies(out: &mut String, ts: &JobResult) {
    let pct = calc_lat(&ts.lat_buckets, ts.issued());
    const NS: [&str; 10] = [
        "2=", "4=", "10=", "20=", "50=", "100=", "250=", "500=", "750=", "1000=",
    ];
    const MS: [&str; 12] = [
        "2=", "4=", "10=", "20=", "50=", "100=", "250=", "500=", "750=", "1000=", "2000=",
        ">=2000=",
    ];
    show_lat(out, &pct[0..10], &NS, "nsec");
    show_lat(out, &pct[10..20], &NS, "usec");
    show_lat(out, &pct[20..32], &MS, "msec");
}

fn show_lat(out: &mut String, pct: &[f64], ranges: &[&str], msg: &str) {
    let mut new_line = true;
    let mut shown = false;
    let mut line = 0;
    for (p, r) in pct.iter().zip(ranges) {
        if *p <= 0.0 {
            continue;
        }
        shown = true;
        if new_line {
            if line > 0 {
                out.push('\n');
            }
            let _ = write!(out, "  lat ({msg})   : ");
            new_line = false;
            line = 0;
        }
        if line > 0 {
            out.push_str(", ");
        }
        let _ = write!(out, "{r}{p:3.2}%");
        line += 1;
        if line == 5 {
            new_line = true;
        }
    }
    if shown {
        out.push('\n');
    }
}

fn show_group_stats(out: &mut String, rs: &RunStats) {
    let _ = writeln!(out, "\nRun status group {} (all jobs):", rs.groupid);
    for (d, name) in GROUP_DDIR_NAMES.iter().enumerate().take(DDIR_COUNT) {
        if rs.max_run[d] == 0 {
            continue;
        }
        let s = |n: u64, pow2: bool, unit| num2str(n, SIG_FIGS, pow2, unit);
        let _ = writeln!(
            out,
            "{}: bw={} ({}), {}-{} ({}-{}), io={} ({}), run={}-{}msec",
            name,
            s(rs.agg[d], true, N2sUnit::BytePerSec),
            s(rs.agg[d], false, N2sUnit::BytePerSec),
            s(rs.min_bw[d], true, N2sUnit::BytePerSec),
            s(rs.max_bw[d], true, N2sUnit::BytePerSec),
            s(rs.min_bw[d], false, N2sUnit::BytePerSec),
            s(rs.max_bw[d], false, N2sUnit::BytePerSec),
            s(rs.iobytes[d], true, N2sUnit::Byte),
            s(rs.iobytes[d], false, N2sUnit::Byte),
            rs.min_run[d],
            rs.max_run[d]
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::testdata;
    use crate::result::{JobError, ERRNO_EILSEQ};
    use clap::Parser;

    fn text(r: &BenchResult) -> String {
        render_text_at(r, std::time::UNIX_EPOCH)
    }

    #[test]
    fn header_lines_are_fios() {
        let a = crate::BenchArgs::parse_from(["nvmf-bench"]);
        let specs = a.job_specs(1 << 30).unwrap();
        assert_eq!(
            render_header(&specs),
            "nvmf-bench: (g=0): rw=randread, bs=(R) 4096B-4096B, (W) 4096B-4096B, \
             (T) 4096B-4096B, ioengine=nvmf-rdma, iodepth=1\nfio-3.33\nStarting 1 thread\n"
        );
        let b = crate::BenchArgs::parse_from([
            "nvmf-bench",
            "--name=seq",
            "--rw=rw",
            "--bs=128k",
            "--iodepth=16",
            "--numjobs=2",
        ]);
        assert_eq!(
            render_header(&b.job_specs(1 << 30).unwrap()),
            "seq: (g=0): rw=rw, bs=(R) 128KiB-128KiB, (W) 128KiB-128KiB, \
             (T) 128KiB-128KiB, ioengine=nvmf-rdma, iodepth=16\n...\nfio-3.33\nStarting 2 threads\n"
        );
        let c = crate::BenchArgs::parse_from(["nvmf-bench", "--bssplit=4k/50:16k/50"]);
        assert!(render_header(&c.job_specs(1 << 30).unwrap())
            .contains("bs=(R) 4096B-16.0KiB, (W) 4096B-16.0KiB,"));
    }

    #[test]
    fn verifying_nothing_or_cut_short_is_a_problem() {
        let v = VerifySummary {
            written: 41_681,
            ..VerifySummary::default()
        };
        assert!(verify_problem(&v, false)
            .unwrap()
            .contains("41681 blocks were written and none was read back and checked"));
        assert!(verify_problem(&v, true)
            .unwrap()
            .contains("interrupted before"));
        assert_eq!(verify_problem(&VerifySummary::default(), false), None);
        let cut = VerifySummary {
            verified: 2051,
            written: 3027,
            unchecked: 976,
            cut_short: true,
            ..VerifySummary::default()
        };
        assert!(verify_problem(&cut, true)
            .unwrap()
            .contains("cut short by a signal: 976"));
    }

    fn block(text: &str, job: usize) -> Vec<&str> {
        let starts: Vec<usize> = text.match_indices("(groupid=").map(|(i, _)| i).collect();
        let from = text[..starts[job]].rfind('\n').map_or(0, |i| i + 1);
        let to = starts
            .get(job + 1)
            .map(|&i| text[..i].rfind('\n').unwrap())
            .or_else(|| text.find("\nRun status"))
            .unwrap();
        text[from..to].lines().collect()
    }

    #[test]
    fn job_block_has_fios_lines_for_known_data() {
        let t = text(&testdata::result());
        assert!(
            t.starts_with("\n"),
            "fio starts its report with a blank line"
        );
        let lines = block(&t, 0);
        assert!(lines[0].starts_with("randread: (groupid=0, jobs=1): err= 0: pid=101: "));
        assert_eq!(
            lines[1],
            "  read: IOPS=1000, BW=4000KiB/s (4096kB/s)(4000KiB/1000msec)"
        );
        assert_eq!(
            lines[2],
            "    slat (nsec): min=1000, max=1000, avg=1000.00, stdev= 0.00"
        );
        assert_eq!(
            lines[3],
            "    clat (usec): min=10, max=400, avg=10.75, stdev=12.89"
        );
        assert_eq!(
            lines[4],
            "     lat (usec): min=11, max=401, avg=11.75, stdev=12.89"
        );
        assert_eq!(lines[5], "    clat percentiles (usec):");
        assert_eq!(
            lines[6],
            "     |  1.00th=[   11],  5.00th=[   11], 10.00th=[   11], 20.00th=[   11],"
        );
        // fio's bucket values: 10 us -> 10048 ns, 50 us -> 49920, 400 us -> 399360,
        // rounded up to whole microseconds.
        assert_eq!(
            lines[9],
            "     | 99.00th=[   11], 99.50th=[   50], 99.90th=[  400], 99.95th=[  400],"
        );
        assert_eq!(lines[10], "     | 99.99th=[  400]");
        assert_eq!(
            lines[11],
            "   bw (  KiB/s): min= 3900, max= 4100, per=50.00%, avg=4000.00, stdev=141.42, samples=2"
        );
        assert_eq!(
            lines[12],
            "   iops        : min=  975, max= 1025, avg=1000.00, stdev=35.36, samples=2"
        );
        assert_eq!(
            lines[13],
            "  lat (usec)   : 20=99.00%, 100=0.90%, 500=0.10%"
        );
        assert_eq!(
            lines[14],
            "  cpu          : usr=1.00%, sys=2.00%, ctx=30, majf=0, minf=4"
        );
        assert_eq!(
            lines[15],
            "  IO depths    : 1=100.0%, 2=0.0%, 4=0.0%, 8=0.0%, 16=0.0%, 32=0.0%, >=64=0.0%"
        );
        assert_eq!(
            lines[16],
            "     submit    : 0=0.0%, 4=100.0%, 8=0.0%, 16=0.0%, 32=0.0%, 64=0.0%, >=64=0.0%"
        );
        assert_eq!(
            lines[17],
            "     complete  : 0=0.0%, 4=100.0%, 8=0.0%, 16=0.0%, 32=0.0%, 64=0.0%, >=64=0.0%"
        );
        assert_eq!(
            lines[18],
            "     issued rwts: total=1000,0,0,0 short=0,0,0,0 dropped=0,0,0,0"
        );
        assert_eq!(
            lines[19],
            "     latency   : target=0, window=0, percentile=100.00%, depth=1"
        );
        assert_eq!(lines.len(), 20);
        assert!(
            !lines.iter().any(|l| l.contains("write:")),
            "job 0 did no writes"
        );
        let j1 = block(&t, 1);
        assert!(j1[0].contains("pid=102"), "each job its own thread id");
        assert!(j1.contains(
            &"  write: IOPS=1000, BW=4000KiB/s (4096kB/s)(2000KiB/500msec); 0 zone resets"
        ));
    }

    #[test]
    fn without_group_reporting_there_is_no_group_block() {
        let t = text(&testdata::result());
        assert_eq!(t.matches("(groupid=0, jobs=1)").count(), 2);
        assert!(!t.contains("jobs=2"));
        let status = t
            .split("\nRun status group 0 (all jobs):\n")
            .nth(1)
            .unwrap();
        let mut s = status.lines();
        assert_eq!(
            s.next().unwrap(),
            "   READ: bw=8000KiB/s (8192kB/s), 4000KiB/s-8000KiB/s (4096kB/s-8192kB/s), io=8000KiB (8192kB), run=500-1000msec"
        );
        assert_eq!(
            s.next().unwrap(),
            "  WRITE: bw=4000KiB/s (4096kB/s), 4000KiB/s-4000KiB/s (4096kB/s-4096kB/s), io=2000KiB (2048kB), run=500-500msec"
        );
        assert_eq!(
            s.next(),
            None,
            "nothing of nvmf-bench's own after fio's report"
        );
    }

    #[test]
    fn group_reporting_prints_one_summed_block_per_group() {
        let mut r = testdata::result();
        r.options.group_reporting = true;
        let t = text(&r);
        assert_eq!(t.matches("(groupid=").count(), 1, "{t}");
        let lines = block(&t, 0);
        assert!(lines[0].starts_with("randread: (groupid=0, jobs=2): err= 0: pid=101: "));
        assert_eq!(
            lines[1],
            "  read: IOPS=2000, BW=8000KiB/s (8192kB/s)(8000KiB/1000msec)"
        );
        // The group's bandwidth samples add up: per= and avg= match BW=.
        assert!(lines.contains(
            &"   bw (  KiB/s): min= 7800, max= 8200, per=100.00%, avg=8000.00, stdev=115.47, samples=4"
        ), "{lines:#?}");
        assert!(t.contains("   READ: bw=8000KiB/s (8192kB/s), 8000KiB/s-8000KiB/s (8192kB/s-8192kB/s), io=8000KiB (8192kB), run=1000-1000msec"));
    }

    #[test]
    fn errors_are_fios_verror() {
        let mut r = testdata::result();
        r.jobs.truncate(1);
        r.jobs[0].error = Some(JobError {
            errno: ERRNO_EILSEQ,
            message: "verify: bad crc32c at offset 8192".into(),
            func: "io_u_queued_complete",
            location: "job.rs:100".into(),
        });
        let t = text(&r);
        assert!(t.starts_with(
            "\nrandread: (groupid=0, jobs=1): err=84 (file:job.rs:100, func=io_u_queued_complete, \
             error=Invalid or incomplete multibyte or wide character): pid=101: "
        ), "{t}");
    }

    #[test]
    fn units_follow_the_magnitude() {
        let mut s = LatencyStats::new();
        for ns in [60u64, 90, 150] {
            s.record(ns);
        }
        let mut out = String::new();
        display_lat(&mut out, "clat", &s);
        assert_eq!(
            out,
            "    clat (nsec): min=60, max=150, avg=100.00, stdev=45.83\n"
        );
        let mut m = LatencyStats::new();
        for ms in [3u64, 150, 400] {
            m.record(ms * 1_000_000);
        }
        let mut out = String::new();
        display_lat(&mut out, "clat", &m);
        assert!(
            out.starts_with("    clat (msec): min=3, max=400, avg="),
            "{out}"
        );
        let mut out = String::new();
        show_clat_percentiles(&mut out, m.histogram().unwrap(), 3, &[50.0], "clat");
        assert_eq!(
            out,
            "    clat percentiles (msec):\n     | 50.00th=[  150]\n"
        );
    }
}
