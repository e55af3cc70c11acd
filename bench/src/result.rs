//! What a run produced: per-job results, the group totals and the verification
//! summary, in the units fio reports.

use std::time::{Duration, SystemTime};

use super::options::{JobSpec, RunOptions};
use super::stats::DirStats;

/// `EIO`: an I/O completed with an error (fio's `err=5`).
pub const ERRNO_EIO: i32 = 5;
/// `EILSEQ`: data verification failed (fio's `err=84`).
pub const ERRNO_EILSEQ: i32 = 84;
/// `ETIMEDOUT`: I/Os still outstanding when the drain timeout expired.
pub const ERRNO_ETIMEDOUT: i32 = 110;

/// The error that stopped a job, as fio reports it (`err=N (message)`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobError {
    /// errno-style code: [`ERRNO_EIO`], [`ERRNO_EILSEQ`] or [`ERRNO_ETIMEDOUT`].
    pub errno: i32,
    /// What failed, including the byte offset where there is one.
    pub message: String,
}

impl JobError {
    /// fio's short name for the errno (`EIO`, ...).
    pub fn errno_name(&self) -> &'static str {
        match self.errno {
            ERRNO_EIO => "EIO",
            ERRNO_EILSEQ => "EILSEQ",
            ERRNO_ETIMEDOUT => "ETIMEDOUT",
            _ => "E?",
        }
    }
}

/// One job's outcome.
#[derive(Debug, Clone)]
pub struct JobResult {
    /// The job's workload.
    pub spec: JobSpec,
    /// Statistics per direction: `[read, write]` (index by `IoOp::index`).
    pub dirs: [DirStats; 2],
    /// Measured run time in ms: first submit after the ramp to last completion
    /// (at least 1 when any I/O was measured).
    pub runtime_ms: u64,
    /// Wall time of the whole job including the ramp.
    pub elapsed: Duration,
    /// The error that stopped the job, if any.
    pub error: Option<JobError>,
    /// Submissions by queue depth reached, fio's `IO depths` buckets:
    /// 1, 2-3, 4-7, 8-15, 16-31, 32-63, >= 64 outstanding (measured I/Os only).
    pub depth_dist: [u64; 7],
}

/// The `IO depths` bucket (index into `depth_dist`) of `outstanding` I/Os.
pub fn depth_bucket(outstanding: usize) -> usize {
    match outstanding {
        0 | 1 => 0,
        2..=3 => 1,
        4..=7 => 2,
        8..=15 => 3,
        16..=31 => 4,
        32..=63 => 5,
        _ => 6,
    }
}

impl JobResult {
    /// fio's `error` value: the errno, 0 on success.
    pub fn errno(&self) -> i32 {
        self.error.as_ref().map_or(0, |e| e.errno)
    }
}

/// Totals over all jobs of the group (fio `group_reporting` and "Run status").
#[derive(Debug, Clone, Default)]
pub struct GroupResult {
    /// Merged statistics per direction `[read, write]`.
    pub dirs: [DirStats; 2],
    /// Shortest job run time in ms per direction among jobs that did I/O in it.
    pub min_run_ms: [u64; 2],
    /// Longest job run time in ms per direction (fio's `max_run`).
    pub max_run_ms: [u64; 2],
    /// Lowest per-job bandwidth in bytes/s per direction.
    pub min_bw_bytes: [u64; 2],
    /// Highest per-job bandwidth in bytes/s per direction.
    pub max_bw_bytes: [u64; 2],
    /// First nonzero job error.
    pub error: Option<JobError>,
    /// Sum of the jobs' `depth_dist`.
    pub depth_dist: [u64; 7],
}

impl GroupResult {
    /// Aggregates `jobs` as fio's group statistics do.
    pub fn from_jobs(jobs: &[JobResult]) -> Self {
        let mut g = GroupResult {
            min_run_ms: [u64::MAX; 2],
            min_bw_bytes: [u64::MAX; 2],
            ..Default::default()
        };
        for j in jobs {
            for d in 0..2 {
                g.dirs[d].merge(&j.dirs[d]);
                if j.dirs[d].ios == 0 {
                    continue;
                }
                let run = j.runtime_ms.max(1);
                let bw = bw_bytes_per_sec(j.dirs[d].bytes, run);
                g.min_run_ms[d] = g.min_run_ms[d].min(run);
                g.max_run_ms[d] = g.max_run_ms[d].max(run);
                g.min_bw_bytes[d] = g.min_bw_bytes[d].min(bw);
                g.max_bw_bytes[d] = g.max_bw_bytes[d].max(bw);
            }
            for (a, b) in g.depth_dist.iter_mut().zip(&j.depth_dist) {
                *a += b;
            }
            if g.error.is_none() {
                g.error.clone_from(&j.error);
            }
        }
        for d in 0..2 {
            if g.max_run_ms[d] == 0 {
                g.min_run_ms[d] = 0;
                g.min_bw_bytes[d] = 0;
            }
        }
        g
    }

    /// Aggregate bandwidth in bytes/s of direction `d`: all bytes over the longest run
    /// (fio's `agg`).
    pub fn agg_bw_bytes(&self, d: usize) -> u64 {
        bw_bytes_per_sec(self.dirs[d].bytes, self.max_run_ms[d])
    }
}

/// fio's bandwidth: `1000 * bytes / runtime_ms` in bytes/s (0 when runtime is 0).
pub fn bw_bytes_per_sec(bytes: u64, runtime_ms: u64) -> u64 {
    if runtime_ms == 0 {
        return 0;
    }
    (u128::from(bytes) * 1000 / u128::from(runtime_ms)) as u64
}

/// fio's IOPS: `1000 * ios / runtime_ms` (0 when runtime is 0).
pub fn iops(ios: u64, runtime_ms: u64) -> f64 {
    if runtime_ms == 0 {
        return 0.0;
    }
    1000.0 * ios as f64 / runtime_ms as f64
}

/// Outcome of `--verify crc32c` over the whole run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct VerifySummary {
    /// Blocks read back and found intact.
    pub verified: u64,
    /// Blocks read back and found damaged (each also stops its job).
    pub mismatches: u64,
    /// Writes that completed successfully (blocks with known content to check).
    pub written: u64,
}

impl VerifySummary {
    /// Whether blocks were written and none was read back and checked: a verification
    /// that proved nothing, which fails the run.
    pub fn checked_nothing(&self) -> bool {
        self.written > 0 && self.verified == 0 && self.mismatches == 0
    }

    /// Whether verification passed: no mismatch, and something was checked if
    /// anything was written.
    pub fn passed(&self) -> bool {
        self.mismatches == 0 && !self.checked_nothing()
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

/// Everything [`super::runner::run`] measured.
#[derive(Debug, Clone)]
pub struct BenchResult {
    /// One entry per job, in job order.
    pub jobs: Vec<JobResult>,
    /// Group totals over all jobs.
    pub group: GroupResult,
    /// Verification outcome, when verifying.
    pub verify: Option<VerifySummary>,
    /// Fault injection, when injecting (filled in by the caller that owns the
    /// devices; [`super::runner::run`] leaves it `None`).
    pub faults: Option<FaultSummary>,
    /// The floor measured before the jobs (`--baseline`; filled in by the caller, as
    /// `faults`).
    pub baseline: Option<crate::baseline::Baseline>,
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
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verifying_nothing_after_writes_fails_the_run() {
        let mut r = crate::report::testdata::result();
        assert!(r.passed());
        r.verify = Some(VerifySummary {
            verified: 0,
            mismatches: 0,
            written: 41_681,
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
        });
        assert!(!r.passed());
        r.verify = None;
        r.interrupted = true;
        assert!(!r.passed());
    }
}
