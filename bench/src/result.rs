//! What a run produced, in fio's terms: one [`JobResult`] per job (fio's
//! `thread_stat`), summed per reporting group under `group_reporting`
//! ([`JobResult::merge`], fio's `sum_thread_stats`), the per-group run status
//! ([`RunStats`], fio's `group_run_stats`) and the verification summary.

use std::time::{Duration, SystemTime};

use super::jobspec::{JobSpec, RunOptions};
use super::stats::{DepthStats, DirStats, LatencyStats, DDIR_COUNT, FIO_LAT_BUCKETS};

/// `EIO`: an I/O completed with an error (fio's `err=5`).
pub const ERRNO_EIO: i32 = 5;
/// `EINVAL`: a job could not be set up (e.g. its CPUs).
pub const ERRNO_EINVAL: i32 = 22;
/// `EILSEQ`: data verification failed (fio's `err=84`).
pub const ERRNO_EILSEQ: i32 = 84;
/// `ETIMEDOUT`: I/Os still outstanding when the drain timeout expired.
pub const ERRNO_ETIMEDOUT: i32 = 110;

/// The system's message for `errno` (`strerror`), e.g. "Input/output error".
pub fn strerror(errno: i32) -> String {
    let s = std::io::Error::from_raw_os_error(errno).to_string();
    match s.rfind(" (os error ") {
        Some(i) => s[..i].to_string(),
        None => s,
    }
}

/// The error that stopped a job, as fio keeps it (`td_verror`): the errno, where it
/// was raised (`file:` and `func=` of fio's `verror`) and what failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobError {
    /// errno-style code: [`ERRNO_EIO`], [`ERRNO_EILSEQ`], [`ERRNO_ETIMEDOUT`], ...
    pub errno: i32,
    /// What failed, including the byte offset where there is one.
    pub message: String,
    /// fio's `func=`: `io_u error`, `io_u_queued_complete` (verification), ...
    pub func: &'static str,
    /// fio's `file:`: the source file and line that raised it (`job.rs:120`).
    pub location: String,
}

impl JobError {
    /// An error of `errno` raised in `func`, at the caller's source line.
    #[track_caller]
    pub fn new(errno: i32, func: &'static str, message: String) -> Self {
        let loc = std::panic::Location::caller();
        let file = loc.file().rsplit('/').next().unwrap_or(loc.file());
        JobError {
            errno,
            message,
            func,
            location: format!("{file}:{}", loc.line()),
        }
    }

    /// fio's short name for the errno (`EIO`, ...).
    pub fn errno_name(&self) -> &'static str {
        match self.errno {
            ERRNO_EIO => "EIO",
            ERRNO_EINVAL => "EINVAL",
            ERRNO_EILSEQ => "EILSEQ",
            ERRNO_ETIMEDOUT => "ETIMEDOUT",
            _ => "E?",
        }
    }

    /// fio's `verror`: `file:job.rs:120, func=io_u error, error=Input/output error`.
    pub fn verror(&self) -> String {
        format!(
            "file:{}, func={}, error={}",
            self.location,
            self.func,
            strerror(self.errno)
        )
    }
}

/// CPU time and scheduling counts of a job's thread (`getrusage(RUSAGE_THREAD)`
/// between its start and its end), fio's `usr_time` .. `minf`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CpuUsage {
    /// User time, ms.
    pub usr_ms: u64,
    /// System time, ms.
    pub sys_ms: u64,
    /// Context switches, voluntary and involuntary.
    pub ctx: u64,
    /// Major page faults.
    pub majf: u64,
    /// Minor page faults.
    pub minf: u64,
}

impl CpuUsage {
    /// Adds `other` (group reporting).
    pub fn merge(&mut self, o: &CpuUsage) {
        self.usr_ms += o.usr_ms;
        self.sys_ms += o.sys_ms;
        self.ctx += o.ctx;
        self.majf += o.majf;
        self.minf += o.minf;
    }
}

/// Flushes (`fsync`) of a job: issued, and their latency (fio's `sync_stat`).
#[derive(Debug, Clone)]
pub struct SyncStats {
    /// Flushes issued (`total_io_u[DDIR_SYNC]`).
    pub issued: u64,
    /// Latency from submit to completion, with percentiles.
    pub lat: LatencyStats,
}

impl Default for SyncStats {
    fn default() -> Self {
        SyncStats {
            issued: 0,
            lat: LatencyStats::new(),
        }
    }
}

/// One window of a job's timeline (`--plot`): what completed in it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TimelineWindow {
    /// Window start, ms since the run started.
    pub start_ms: u64,
    /// I/Os completed per direction.
    pub ios: [u64; DDIR_COUNT],
    /// Completion latencies, as (fio histogram bucket, count), nonzero buckets only.
    pub clat: Vec<(u16, u32)>,
    /// Longest completion latency, ns.
    pub max_ns: u64,
}

/// One job's outcome (fio's `thread_stat`); under group reporting, a whole group's.
#[derive(Debug, Clone)]
pub struct JobResult {
    /// The job's workload (the first job's, for a group).
    pub spec: JobSpec,
    /// Jobs summed into this one (fio's `members`, `jobs=N`).
    pub members: u32,
    /// The job thread's ID (fio prints it as `pid=` in thread mode).
    pub tid: i32,
    /// Statistics per direction: `[read, write, trim]` (index by `IoOp::index`).
    pub dirs: [DirStats; DDIR_COUNT],
    /// Flushes.
    pub sync: SyncStats,
    /// Run time per direction, ms (fio `runtime[ddir]`): the workload's time after the
    /// ramp for each direction that moved data, plus the verify phase for reads.
    pub runtime_ms: [u64; DDIR_COUNT],
    /// The job thread's whole life, ms (fio `total_run_time`, JSON `job_runtime`).
    pub total_run_time_ms: u64,
    /// Wall time of the job from the run's start to its end.
    pub elapsed: Duration,
    /// The error that stopped the job, if any.
    pub error: Option<JobError>,
    /// IO depths, submit and complete distributions.
    pub depth: DepthStats,
    /// Completions per fio latency bucket ([`crate::stats::fio_lat_bucket`]).
    pub lat_buckets: [u64; FIO_LAT_BUCKETS],
    /// The thread's CPU usage.
    pub cpu: CpuUsage,
    /// The job's timeline (with `--plot`; empty otherwise).
    pub timeline: Vec<TimelineWindow>,
}

impl JobResult {
    /// A job that did nothing (yet).
    pub fn empty(spec: JobSpec) -> Self {
        JobResult {
            spec,
            members: 1,
            tid: 0,
            dirs: Default::default(),
            sync: SyncStats::default(),
            runtime_ms: [0; DDIR_COUNT],
            total_run_time_ms: 0,
            elapsed: Duration::ZERO,
            error: None,
            depth: DepthStats::default(),
            lat_buckets: [0; FIO_LAT_BUCKETS],
            cpu: CpuUsage::default(),
            timeline: Vec::new(),
        }
    }

    /// fio's `error` value: the errno, 0 on success.
    pub fn errno(&self) -> i32 {
        self.error.as_ref().map_or(0, |e| e.errno)
    }

    /// I/Os issued in every direction (fio `ddir_rw_sum(total_io_u)`).
    pub fn issued(&self) -> u64 {
        self.dirs.iter().map(|d| d.issued).sum()
    }

    /// Adds `other` into this one as fio's `sum_thread_stats` (and the group loop of
    /// `__show_run_stats`) do: counts and latencies pooled, bandwidth and IOPS samples
    /// summed, run times the longest per direction, the job run times, CPU and depth
    /// counts added, the first error kept.
    pub fn merge(&mut self, other: &JobResult) {
        for d in 0..DDIR_COUNT {
            self.dirs[d].merge(&other.dirs[d]);
            self.runtime_ms[d] = self.runtime_ms[d].max(other.runtime_ms[d]);
        }
        self.sync.issued += other.sync.issued;
        self.sync.lat.merge(&other.sync.lat);
        self.total_run_time_ms += other.total_run_time_ms;
        self.elapsed = self.elapsed.max(other.elapsed);
        if self.error.is_none() {
            self.error.clone_from(&other.error);
        }
        self.depth.merge(&other.depth);
        for (a, b) in self.lat_buckets.iter_mut().zip(&other.lat_buckets) {
            *a += b;
        }
        self.cpu.merge(&other.cpu);
        self.members += other.members;
    }
}

/// One reporting group's run status (fio's `group_run_stats`), over the group's
/// reported units (jobs, or the one summed job under group reporting).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RunStats {
    /// The group.
    pub groupid: u32,
    /// Shortest run time per direction among units that ran it, ms.
    pub min_run: [u64; DDIR_COUNT],
    /// Longest run time per direction, ms.
    pub max_run: [u64; DDIR_COUNT],
    /// Lowest unit bandwidth per direction, bytes/s.
    pub min_bw: [u64; DDIR_COUNT],
    /// Highest unit bandwidth per direction, bytes/s.
    pub max_bw: [u64; DDIR_COUNT],
    /// Bytes per direction.
    pub iobytes: [u64; DDIR_COUNT],
    /// Aggregate bandwidth per direction: all bytes over the longest run, bytes/s.
    pub agg: [u64; DDIR_COUNT],
}

impl RunStats {
    /// fio's group run status of `units` (the group's reported entries).
    pub fn of(groupid: u32, units: &[&JobResult]) -> Self {
        let mut rs = RunStats {
            groupid,
            min_run: [u64::MAX; DDIR_COUNT],
            min_bw: [u64::MAX; DDIR_COUNT],
            ..RunStats::default()
        };
        for u in units {
            for d in 0..DDIR_COUNT {
                let run = u.runtime_ms[d];
                if run == 0 {
                    continue;
                }
                rs.min_run[d] = rs.min_run[d].min(run);
                rs.max_run[d] = rs.max_run[d].max(run);
                let bw = bw_bytes_per_sec(u.dirs[d].bytes, run);
                rs.min_bw[d] = rs.min_bw[d].min(bw);
                rs.max_bw[d] = rs.max_bw[d].max(bw);
                rs.iobytes[d] += u.dirs[d].bytes;
            }
        }
        for d in 0..DDIR_COUNT {
            if rs.max_run[d] == 0 {
                rs.min_run[d] = 0;
                rs.min_bw[d] = 0;
            } else {
                rs.agg[d] = bw_bytes_per_sec(rs.iobytes[d], rs.max_run[d]);
            }
        }
        rs
    }
}

/// fio's bandwidth: `1000 * bytes / runtime_ms` in bytes/s (0 when runtime is 0).
pub fn bw_bytes_per_sec(bytes: u64, runtime_ms: u64) -> u64 {
    if runtime_ms == 0 {
        return 0;
    }
    (u128::from(bytes) * 1000 / u128::from(runtime_ms)) as u64
}

/// fio's JSON IOPS: `1000.0 * ios / runtime_ms` (0 when runtime is 0).
pub fn iops(ios: u64, runtime_ms: u64) -> f64 {
    if runtime_ms == 0 {
        return 0.0;
    }
    1000.0 * ios as f64 / runtime_ms as f64
}

/// Outcome of `--verify` over the whole run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct VerifySummary {
    /// Blocks read back and found intact.
    pub verified: u64,
    /// Blocks read back and found damaged (each also stops its job).
    pub mismatches: u64,
    /// Writes that completed successfully (blocks with known content to check).
    pub written: u64,
    /// Blocks written in the run whose last write was never read back and checked.
    pub unchecked: u64,
    /// A stop request (signal) ended a read-back before it was done.
    pub cut_short: bool,
}

impl VerifySummary {
    /// Whether blocks were written and none was read back and checked: a verification
    /// that proved nothing, which fails the run.
    pub fn checked_nothing(&self) -> bool {
        self.written > 0 && self.verified == 0 && self.mismatches == 0
    }

    /// Whether verification passed: no mismatch, something was checked if anything
    /// was written, and no read-back was cut short.
    pub fn passed(&self) -> bool {
        self.mismatches == 0 && !self.checked_nothing() && !self.cut_short
    }
}

/// Faults one RDMA device injected on receive during the run (`--inject-*`), with
/// the device counters that show their effect. Counts are packets over the device's
/// life (connect to disconnect).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InjectedFaults {
    /// Which device: `target` (the embedded target's) or `host`.
    pub side: String,
    /// Packets dropped.
    pub dropped: u64,
    /// Packets delivered twice.
    pub duplicated: u64,
    /// Packets held back and delivered late.
    pub reordered: u64,
    /// Packets with a bit flipped.
    pub corrupted: u64,
    /// Packets the ICRC check dropped (the corrupted ones).
    pub icrc_errors: u64,
    /// Packets received with a good ICRC.
    pub rcvd_pkts: u64,
    /// Packets sent.
    pub sent_pkts: u64,
}

/// The fault injection of a run (`--inject-*`): probabilities per received packet,
/// the seed, and what each device injected.
#[derive(Debug, Clone, PartialEq)]
pub struct FaultSummary {
    /// `--inject-loss`.
    pub loss: f64,
    /// `--inject-reorder`.
    pub reorder: f64,
    /// `--inject-dup`.
    pub duplicate: f64,
    /// `--inject-corrupt`.
    pub corrupt: f64,
    /// `--inject-seed`.
    pub seed: u64,
    /// One entry per device that injected faults.
    pub sides: Vec<InjectedFaults>,
}

impl FaultSummary {
    /// The summary of `cfg` as injected by `devices` (a name and the device's
    /// counters after the run each).
    pub fn from_devices(
        cfg: &transport::soft::FaultConfig,
        devices: &[(&str, transport::soft::DeviceCountersSnapshot)],
    ) -> Self {
        FaultSummary {
            loss: cfg.loss,
            reorder: cfg.reorder,
            duplicate: cfg.duplicate,
            corrupt: cfg.corrupt,
            seed: cfg.seed,
            sides: devices
                .iter()
                .map(|(side, c)| InjectedFaults {
                    side: (*side).to_string(),
                    dropped: c.injected_drops,
                    duplicated: c.injected_dups,
                    reordered: c.injected_reorders,
                    corrupted: c.injected_corruptions,
                    icrc_errors: c.icrc_errors,
                    rcvd_pkts: c.rcvd_pkts,
                    sent_pkts: c.sent_pkts,
                })
                .collect(),
        }
    }

    /// Faults injected by all devices together.
    pub fn total_injected(&self) -> u64 {
        self.sides
            .iter()
            .map(|s| s.dropped + s.duplicated + s.reordered + s.corrupted)
            .sum()
    }
}

/// Everything [`super::runner::run`] measured, and what the caller adds.
#[derive(Debug, Clone)]
pub struct BenchResult {
    /// One entry per job, in job order.
    pub jobs: Vec<JobResult>,
    /// Verification outcome, when any job verifies.
    pub verify: Option<VerifySummary>,
    /// Fault injection, when injecting (filled in by the caller that owns the
    /// devices; [`super::runner::run`] leaves it `None`).
    pub faults: Option<FaultSummary>,
    /// The floor measured before the jobs (`--baseline`; filled in by the caller, as
    /// `faults`).
    pub baseline: Option<crate::baseline::Baseline>,
    /// The embedded target's device counters after the run (caller), for the report's
    /// own section.
    pub target_counters: Option<serde_json::Value>,
    /// Reconnects of the host during the run (`--ctrl-loss-tmo`; filled in by the
    /// caller, as `faults`), reported under the JSON's `"nvmf-bench"` key.
    pub reconnects: Option<u64>,
    /// The run-wide options used.
    pub options: RunOptions,
    /// Wall-clock time when the run started.
    pub started: SystemTime,
    /// Wall time of the whole run including the ramp.
    pub elapsed: Duration,
    /// A stop request (Ctrl-C, SIGTERM) ended the run before its jobs were done.
    pub interrupted: bool,
}

impl BenchResult {
    /// Whether the run passed: it ran to its end, no job stopped with an error, and
    /// verification (if any) passed ([`VerifySummary::passed`]). `nvmf-bench` exits
    /// non-zero otherwise.
    pub fn passed(&self) -> bool {
        !self.interrupted
            && self.jobs.iter().all(|j| j.error.is_none())
            && self.verify.is_none_or(|v| v.passed())
    }

    /// Every job summed into one (all groups): what `--baseline` compares.
    pub fn all_jobs(&self) -> Option<JobResult> {
        let mut it = self.jobs.iter();
        let mut all = it.next()?.clone();
        for j in it {
            all.merge(j);
        }
        Some(all)
    }

    /// The reported units of each group, in order: every job, or with group
    /// reporting one summed job per group (fio's `threadstats`).
    pub fn report_units(&self) -> Vec<JobResult> {
        if !self.options.group_reporting {
            return self.jobs.clone();
        }
        let mut units: Vec<JobResult> = Vec::new();
        for j in &self.jobs {
            match units.last_mut() {
                Some(u) if u.spec.groupid == j.spec.groupid => u.merge(j),
                _ => units.push(j.clone()),
            }
        }
        units
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verifying_nothing_after_writes_fails_the_run() {
        let mut r = crate::report::testdata::result();
        assert!(r.passed());
        r.verify = Some(VerifySummary {
            written: 41_681,
            ..VerifySummary::default()
        });
        assert!(r.verify.unwrap().checked_nothing());
        assert!(!r.passed());
        // Nothing written: nothing to check, no failure.
        r.verify = Some(VerifySummary::default());
        assert!(r.passed());
        r.verify = Some(VerifySummary {
            verified: 3,
            mismatches: 1,
            written: 3,
            ..VerifySummary::default()
        });
        assert!(!r.passed());
        r.verify = Some(VerifySummary {
            verified: 3,
            written: 5,
            unchecked: 2,
            cut_short: true,
            ..VerifySummary::default()
        });
        assert!(
            !r.passed(),
            "a read-back cut short proves less than it should"
        );
        r.verify = None;
        r.interrupted = true;
        assert!(!r.passed());
    }

    #[test]
    fn errors_carry_fios_verror() {
        let e = JobError::new(ERRNO_EIO, "io_u error", "write at offset 0 failed".into());
        assert!(e.location.starts_with("result.rs:"), "{}", e.location);
        assert_eq!(
            e.verror(),
            format!(
                "file:{}, func=io_u error, error=Input/output error",
                e.location
            )
        );
        assert_eq!(
            strerror(ERRNO_EILSEQ),
            "Invalid or incomplete multibyte or wide character"
        );
    }

    #[test]
    fn group_reporting_sums_per_group_and_run_stats_follow_fio() {
        let mut r = crate::report::testdata::result();
        r.options.group_reporting = true;
        let units = r.report_units();
        assert_eq!(units.len(), 1);
        let g = &units[0];
        assert_eq!(g.members, 2);
        assert_eq!(g.dirs[0].ios, 2000);
        assert_eq!(g.runtime_ms[0], 1000);
        // bw samples add up: two jobs at 4000 KiB/s each make a group mean of 8000.
        assert_eq!(g.dirs[0].bw_kib_samples.mean(), 8000.0);
        let rs = RunStats::of(0, &[g]);
        assert_eq!(rs.agg[0], 8_192_000);
        assert_eq!((rs.min_bw[0], rs.max_bw[0]), (8_192_000, 8_192_000));
        r.options.group_reporting = false;
        let units = r.report_units();
        let refs: Vec<&JobResult> = units.iter().collect();
        let rs = RunStats::of(0, &refs);
        assert_eq!((rs.min_run[0], rs.max_run[0]), (500, 1000));
        assert_eq!(rs.min_bw[0], 4_096_000);
        assert_eq!(rs.max_bw[0], 8_192_000);
    }
}
