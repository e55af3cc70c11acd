//! What a job thread shares with the thread that watches the run
//! ([`crate::runner::run_with`]): progress counters for fio's progress line, the
//! job's phase, and the snapshots of `--status-interval`. Atomics and one mutex the
//! watcher locks only when it asks for a snapshot.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::Mutex;

use crate::progress::JobPhase;
use crate::result::JobResult;
use crate::stats::DDIR_COUNT;

/// What a job thread shares with the thread that watches the run: progress counters
/// (the progress line), its phase, and status-interval snapshots.
#[derive(Debug, Default)]
pub struct JobShared {
    pub(super) bytes: [AtomicU64; DDIR_COUNT],
    pub(super) ios: [AtomicU64; DDIR_COUNT],
    phase: AtomicU8,
    pub(super) snapshot_wanted: AtomicU64,
    pub(super) snapshot: Mutex<Option<(u64, JobResult)>>,
    started: AtomicBool,
}

impl JobShared {
    /// Bytes and I/Os completed so far per direction (ramp and read-back included).
    pub fn counts(&self) -> ([u64; DDIR_COUNT], [u64; DDIR_COUNT]) {
        let load = |a: &[AtomicU64; DDIR_COUNT]| {
            [
                a[0].load(Ordering::Relaxed),
                a[1].load(Ordering::Relaxed),
                a[2].load(Ordering::Relaxed),
            ]
        };
        (load(&self.bytes), load(&self.ios))
    }

    /// Where the job is; `None` before it started.
    pub fn phase(&self) -> Option<JobPhase> {
        if !self.started.load(Ordering::Acquire) {
            return None;
        }
        Some(match self.phase.load(Ordering::Relaxed) {
            0 => JobPhase::Ramp,
            1 => JobPhase::Running,
            2 => JobPhase::Verifying,
            3 => JobPhase::Finished,
            4 => JobPhase::Failed,
            _ => JobPhase::Killed,
        })
    }

    pub(super) fn set_phase(&self, p: JobPhase) {
        let v = match p {
            JobPhase::Ramp => 0,
            JobPhase::Running => 1,
            JobPhase::Verifying => 2,
            JobPhase::Finished => 3,
            JobPhase::Failed => 4,
            JobPhase::Killed | JobPhase::NotStarted => 5,
        };
        self.phase.store(v, Ordering::Relaxed);
        self.started.store(true, Ordering::Release);
    }

    /// Asks the job for a snapshot of its statistics, tagged `generation`.
    pub fn request_snapshot(&self, generation: u64) {
        self.snapshot_wanted.store(generation, Ordering::Release);
    }

    /// The job's snapshot of `generation` (or its final result), once it has one.
    pub fn snapshot(&self, generation: u64) -> Option<JobResult> {
        let s = self.snapshot.lock().unwrap_or_else(|e| e.into_inner());
        s.as_ref()
            .filter(|(g, _)| *g >= generation)
            .map(|(_, r)| r.clone())
    }
}
