//! fio's "normal" text report (stat.c: `show_thread_status_normal`,
//! `show_ddir_status`, `show_group_stats`), with latencies always in microseconds.
//!
//! Per job one block; with more than one job a group block (`jobs=N`) follows; then
//! fio's "Run status group 0 (all jobs)" summary. Each direction prints IOPS, BW,
//! the completion latency (min, max, avg, stdev), a p50/p90/p99/p99.9 summary line,
//! fio's percentile table, bandwidth/IOPS samples and the issued counts.

use std::fmt::Write as _;
use std::time::SystemTime;

use super::fmt::{ctime_utc, num2str, N2sUnit};
use crate::options::BenchArgs;
use crate::result::{bw_bytes_per_sec, BenchResult, FaultSummary, JobError, VerifySummary};
use crate::stats::{DirStats, LatencyStats, FIO_PERCENTILES};

/// fio's default `sig_figs`.
const SIG_FIGS: usize = 4;
const DIR_NAMES: [&str; 2] = ["read", "write"];
const GROUP_DIR_NAMES: [&str; 2] = ["   READ", "  WRITE"];

/// One report block: a job or the group.
struct Block<'a> {
    name: &'a str,
    jobs: usize,
    error: Option<&'a JobError>,
    dirs: &'a [DirStats; 2],
    runtime_ms: [u64; 2],
    depth_dist: &'a [u64; 7],
}

/// The text report of `result`, as fio prints it with `--output-format=normal`.
/// `pid` is printed in the job header (fio prints the job's process ID).
pub fn render_text(result: &BenchResult, pid: u32) -> String {
    let mut out = String::new();
    let time = ctime_utc(SystemTime::now());
    for j in &result.jobs {
        let run = if j.dirs.iter().any(|d| d.ios > 0) {
            j.runtime_ms
        } else {
            0
        };
        render_block(
            &mut out,
            &Block {
                name: &j.spec.name,
                jobs: 1,
                error: j.error.as_ref(),
                dirs: &j.dirs,
                runtime_ms: [run; 2],
                depth_dist: &j.depth_dist,
            },
            result,
            pid,
            &time,
        );
    }
    if result.jobs.len() > 1 {
        let g = &result.group;
        render_block(
            &mut out,
            &Block {
                name: result
                    .jobs
                    .first()
                    .map_or("group", |j| j.spec.name.as_str()),
                jobs: result.jobs.len(),
                error: g.error.as_ref(),
                dirs: &g.dirs,
                runtime_ms: g.max_run_ms,
                depth_dist: &g.depth_dist,
            },
            result,
            pid,
            &time,
        );
    }
    render_group_status(&mut out, result);
    if let Some(f) = &result.faults {
        render_faults(&mut out, f);
    }
    if let Some(b) = &result.baseline {
        out += &crate::baseline::render_text(b, result);
    }
    if let Some(v) = result.verify {
        let _ = writeln!(
            out,
            "\nverify: {} blocks verified, {} mismatches",
            v.verified, v.mismatches
        );
        if let Some(why) = verify_problem(&v, result.interrupted) {
            let _ = writeln!(out, "verify: error: {why}");
        }
    }
    out
}

/// Why a verification that found no mismatch still failed: blocks were written and
/// none was checked. `None` when it passed or mismatches say it all.
pub fn verify_problem(v: &VerifySummary, interrupted: bool) -> Option<String> {
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

/// fio's job header, printed before the run (init.c `add_job`):
/// `name: (g=0): rw=randread, bs=(R) 4096B-4096B, (W) 4096B-4096B, (T) 4096B-4096B,
/// ioengine=nvmf-rdma, iodepth=1`, then `...` when more jobs of the same kind follow.
pub fn render_header(args: &BenchArgs) -> String {
    let bs = num2str(u64::from(args.bs), SIG_FIGS, true, N2sUnit::Byte);
    let mut out = format!(
        "{}: (g=0): rw={}, bs=(R) {bs}-{bs}, (W) {bs}-{bs}, (T) {bs}-{bs}, ioengine=nvmf-rdma, iodepth={}\n",
        args.name,
        args.rw.fio_name(),
        args.iodepth
    );
    if args.numjobs > 1 {
        out.push_str("...\n");
    }
    out
}

/// The `--inject-*` summary: the probabilities, then one line per device.
fn render_faults(out: &mut String, f: &FaultSummary) {
    let _ = writeln!(
        out,
        "\nInjected faults (per received packet: loss={}, reorder={}, dup={}, corrupt={}; seed={}):",
        f.loss, f.reorder, f.duplicate, f.corrupt, f.seed
    );
    for s in &f.sides {
        let _ = writeln!(
            out,
            "  {}: dropped={}, reordered={}, duplicated={}, corrupted={}, icrc_errors={}, rcvd_pkts={}, sent_pkts={}",
            s.side,
            s.dropped,
            s.reordered,
            s.duplicated,
            s.corrupted,
            s.icrc_errors,
            s.rcvd_pkts,
            s.sent_pkts
        );
    }
}

fn render_block(out: &mut String, b: &Block<'_>, result: &BenchResult, pid: u32, time: &str) {
    match b.error {
        None => {
            let _ = writeln!(
                out,
                "{}: (groupid=0, jobs={}): err= 0: pid={pid}: {time}",
                b.name, b.jobs
            );
        }
        Some(e) => {
            let _ = writeln!(
                out,
                "{}: (groupid=0, jobs={}): err={:2} ({}: {}): pid={pid}: {time}",
                b.name,
                b.jobs,
                e.errno,
                e.errno_name(),
                e.message
            );
        }
    }
    for (d, name) in DIR_NAMES.iter().enumerate() {
        if b.dirs[d].bytes > 0 && b.runtime_ms[d] > 0 {
            render_dir(
                out,
                name,
                &b.dirs[d],
                b.runtime_ms[d],
                result.group.agg_bw_bytes(d),
            );
        }
    }
    let total: u64 = b.depth_dist.iter().sum();
    let pct = |n: u64| {
        if total == 0 {
            0.0
        } else {
            let p = 100.0 * n as f64 / total as f64;
            if p < 0.1 && n > 0 {
                0.1
            } else {
                p
            }
        }
    };
    let dd = b.depth_dist;
    let _ = writeln!(
        out,
        "  IO depths    : 1={:3.1}%, 2={:3.1}%, 4={:3.1}%, 8={:3.1}%, 16={:3.1}%, 32={:3.1}%, >=64={:3.1}%",
        pct(dd[0]),
        pct(dd[1]),
        pct(dd[2]),
        pct(dd[3]),
        pct(dd[4]),
        pct(dd[5]),
        pct(dd[6])
    );
    let _ = writeln!(
        out,
        "     issued rwts: total={},{},0,0 short=0,0,0,0 dropped=0,0,0,0",
        b.dirs[0].ios, b.dirs[1].ios
    );
    let _ = writeln!(out);
}

fn render_dir(out: &mut String, name: &str, d: &DirStats, runtime_ms: u64, group_agg_bw: u64) {
    let bw = bw_bytes_per_sec(d.bytes, runtime_ms);
    let iops = (u128::from(d.ios) * 1000 / u128::from(runtime_ms)) as u64;
    let _ = writeln!(
        out,
        "  {name}: IOPS={}, BW={} ({})({}/{runtime_ms}msec)",
        num2str(iops, SIG_FIGS, false, N2sUnit::None),
        num2str(bw, SIG_FIGS, true, N2sUnit::BytePerSec),
        num2str(bw, SIG_FIGS, false, N2sUnit::BytePerSec),
        num2str(d.bytes, SIG_FIGS, true, N2sUnit::Byte),
    );
    render_latency(out, &d.clat);
    render_bw_iops(out, d, group_agg_bw);
}

fn us(ns: u64) -> f64 {
    ns as f64 / 1000.0
}

fn render_latency(out: &mut String, c: &LatencyStats) {
    if c.count() == 0 {
        return;
    }
    let _ = writeln!(
        out,
        "    clat (usec): min={}, max={}, avg={:5.02}, stdev={:5.02}",
        num2str(c.min_ns() / 1000, 6, false, N2sUnit::None),
        num2str(c.max_ns() / 1000, 6, false, N2sUnit::None),
        c.mean_ns() / 1000.0,
        c.stddev_ns() / 1000.0
    );
    let _ = writeln!(
        out,
        "     lat percentiles (usec): p50={:.1}, p90={:.1}, p99={:.1}, p99.9={:.1}",
        us(c.percentile_ns(50.0)),
        us(c.percentile_ns(90.0)),
        us(c.percentile_ns(99.0)),
        us(c.percentile_ns(99.9))
    );
    render_percentile_table(out, c);
}

/// fio's `show_clat_percentiles` with precision 2, scaled to usec (rounded up).
fn render_percentile_table(out: &mut String, c: &LatencyStats) {
    let vals: Vec<u64> = FIO_PERCENTILES
        .iter()
        .map(|&p| c.percentile_ns(p).div_ceil(1000))
        .collect();
    let maxv = vals.iter().copied().max().unwrap_or(0);
    let width = (maxv.checked_ilog10().map_or(1, |d| d as usize + 1)).max(5);
    let per_line = (80 - 7) / (2 + 10 + width);
    out.push_str("    clat percentiles (usec):\n     |");
    for (j, (&p, &v)) in FIO_PERCENTILES.iter().zip(&vals).enumerate() {
        if j != 0 && j % per_line == 0 {
            out.push_str("     |");
        }
        let last = j == vals.len() - 1;
        let _ = write!(
            out,
            " {p:5.2}th=[{v:width$}]{}",
            if last { '\n' } else { ',' }
        );
        if !last && j % per_line == per_line - 1 {
            out.push('\n');
        }
    }
}

fn render_bw_iops(out: &mut String, d: &DirStats, group_agg_bw: u64) {
    let bw = &d.bw_kib_samples;
    if bw.count() > 0 {
        let agg_kib = group_agg_bw as f64 / 1024.0;
        let per = if group_agg_bw > 1024 {
            (bw.mean() * 100.0 / agg_kib).min(100.0)
        } else {
            100.0
        };
        let (div, unit) = if bw.mean() > 1024.0 * 1024.0 {
            (1024.0, "MiB")
        } else {
            (1.0, "KiB")
        };
        let _ = writeln!(
            out,
            "   bw ({unit:>5}/s): min={:5}, max={:5}, per={per:3.2}%, avg={:5.02}, stdev={:5.02}, samples={}",
            (bw.min() / div) as u64,
            (bw.max() / div) as u64,
            bw.mean() / div,
            bw.stddev() / div,
            bw.count()
        );
    }
    let io = &d.iops_samples;
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

fn render_group_status(out: &mut String, result: &BenchResult) {
    let g = &result.group;
    out.push_str("Run status group 0 (all jobs):\n");
    for (d, name) in GROUP_DIR_NAMES.iter().enumerate() {
        if g.max_run_ms[d] == 0 {
            continue;
        }
        let agg = g.agg_bw_bytes(d);
        let s = |n: u64, pow2: bool, unit| num2str(n, SIG_FIGS, pow2, unit);
        let _ = writeln!(
            out,
            "{}: bw={} ({}), {}-{} ({}-{}), io={} ({}), run={}-{}msec",
            name,
            s(agg, true, N2sUnit::BytePerSec),
            s(agg, false, N2sUnit::BytePerSec),
            s(g.min_bw_bytes[d], true, N2sUnit::BytePerSec),
            s(g.max_bw_bytes[d], true, N2sUnit::BytePerSec),
            s(g.min_bw_bytes[d], false, N2sUnit::BytePerSec),
            s(g.max_bw_bytes[d], false, N2sUnit::BytePerSec),
            s(g.dirs[d].bytes, true, N2sUnit::Byte),
            s(g.dirs[d].bytes, false, N2sUnit::Byte),
            g.min_run_ms[d],
            g.max_run_ms[d]
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::testdata;
    use crate::result::{JobError, ERRNO_EILSEQ};
    use clap::Parser;

    #[test]
    fn header_line_is_fios() {
        let a = BenchArgs::parse_from(["nvmf-bench"]);
        assert_eq!(
            render_header(&a),
            "nvmf-bench: (g=0): rw=randread, bs=(R) 4096B-4096B, (W) 4096B-4096B, \
             (T) 4096B-4096B, ioengine=nvmf-rdma, iodepth=1\n"
        );
        let b = BenchArgs::parse_from([
            "nvmf-bench",
            "--name=seq",
            "--rw=rw",
            "--bs=128k",
            "--iodepth=16",
            "--numjobs=2",
        ]);
        assert_eq!(
            render_header(&b),
            "seq: (g=0): rw=rw, bs=(R) 128KiB-128KiB, (W) 128KiB-128KiB, \
             (T) 128KiB-128KiB, ioengine=nvmf-rdma, iodepth=16\n...\n"
        );
        let c = BenchArgs::parse_from(["nvmf-bench", "--bs=1049088"]);
        assert!(render_header(&c).contains("bs=(R) 1025KiB-1025KiB,"));
    }

    #[test]
    fn verifying_nothing_is_reported_as_an_error() {
        let mut r = testdata::result();
        r.verify = Some(VerifySummary {
            verified: 0,
            mismatches: 0,
            written: 41_681,
        });
        let text = render_text(&r, 1);
        assert!(
            text.contains("verify: 0 blocks verified, 0 mismatches\nverify: error: 41681 blocks were written and none was read back and checked"),
            "{text}"
        );
        r.interrupted = true;
        assert!(render_text(&r, 1).contains("interrupted before reading them back"));
        r.verify = Some(VerifySummary::default());
        assert!(!render_text(&r, 1).contains("verify: error"));
    }

    fn job0_block(text: &str) -> &str {
        let end = text.find("\n\n").unwrap();
        &text[..end]
    }

    #[test]
    fn job_block_has_fio_lines_for_known_data() {
        let text = render_text(&testdata::result(), 1234);
        let block = job0_block(&text);
        let lines: Vec<&str> = block.lines().collect();
        assert!(lines[0].starts_with("randread: (groupid=0, jobs=1): err= 0: pid=1234: "));
        assert_eq!(
            lines[1],
            "  read: IOPS=1000, BW=4000KiB/s (4096kB/s)(4000KiB/1000msec)"
        );
        assert_eq!(
            lines[2],
            "    clat (usec): min=10, max=400, avg=10.75, stdev=12.89"
        );
        assert_eq!(
            lines[3],
            "     lat percentiles (usec): p50=10.0, p90=10.0, p99=10.0, p99.9=400.0"
        );
        assert_eq!(lines[4], "    clat percentiles (usec):");
        assert_eq!(
            lines[5],
            "     |  1.00th=[   10],  5.00th=[   10], 10.00th=[   10], 20.00th=[   10],"
        );
        assert_eq!(
            lines[8],
            "     | 99.00th=[   10], 99.50th=[   50], 99.90th=[  400], 99.95th=[  400],"
        );
        assert_eq!(lines[9], "     | 99.99th=[  400]");
        assert_eq!(
            lines[10],
            "   bw (  KiB/s): min= 3900, max= 4100, per=50.00%, avg=4000.00, stdev=141.42, samples=2"
        );
        assert_eq!(
            lines[11],
            "   iops        : min=  975, max= 1025, avg=1000.00, stdev=35.36, samples=2"
        );
        assert_eq!(
            lines[12],
            "  IO depths    : 1=100.0%, 2=0.0%, 4=0.0%, 8=0.0%, 16=0.0%, 32=0.0%, >=64=0.0%"
        );
        assert_eq!(
            lines[13],
            "     issued rwts: total=1000,0,0,0 short=0,0,0,0 dropped=0,0,0,0"
        );
        assert!(!block.contains("write:"), "job 0 did no writes");
    }

    #[test]
    fn group_block_and_run_status() {
        let text = render_text(&testdata::result(), 1);
        assert_eq!(text.matches("(groupid=0, jobs=1)").count(), 2);
        assert!(text.contains("randread: (groupid=0, jobs=2): err= 0: pid=1: "));
        assert!(text.contains("  read: IOPS=2000, BW=8000KiB/s (8192kB/s)(8000KiB/1000msec)\n"));
        assert!(text.contains("  write: IOPS=1000, BW=4000KiB/s (4096kB/s)(2000KiB/500msec)\n"));
        let status = text
            .split("Run status group 0 (all jobs):\n")
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
        assert!(text.ends_with("\nverify: 7 blocks verified, 0 mismatches\n"));
    }

    #[test]
    fn injected_faults_are_listed_before_the_final_verify_line() {
        let mut r = testdata::result();
        r.faults = Some(FaultSummary {
            loss: 0.01,
            reorder: 0.0,
            duplicate: 0.0,
            corrupt: 0.0,
            seed: 5,
            sides: vec![crate::result::InjectedFaults {
                side: "target".into(),
                dropped: 12,
                duplicated: 0,
                reordered: 0,
                corrupted: 0,
                icrc_errors: 0,
                rcvd_pkts: 1188,
                sent_pkts: 1300,
            }],
        });
        let text = render_text(&r, 1);
        assert!(
            text.contains("Injected faults (per received packet: loss=0.01, reorder=0, dup=0, corrupt=0; seed=5):\n  target: dropped=12, reordered=0,"),
            "{text}"
        );
        assert!(text.ends_with("\nverify: 7 blocks verified, 0 mismatches\n"));
    }

    #[test]
    fn single_job_has_no_group_block_and_errors_show() {
        let mut r = testdata::result();
        r.jobs.truncate(1);
        r.jobs[0].error = Some(JobError {
            errno: ERRNO_EILSEQ,
            message: "verify: bad crc32c at offset 8192".into(),
        });
        r.group = crate::result::GroupResult::from_jobs(&r.jobs);
        let text = render_text(&r, 7);
        assert!(!text.contains("jobs=2"));
        assert!(text.starts_with(
            "randread: (groupid=0, jobs=1): err=84 (EILSEQ: verify: bad crc32c at offset 8192): pid=7: "
        ));
    }
}
