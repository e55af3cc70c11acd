//! The benchmark loop, as fio's `thread` mode: every job runs on its own thread with
//! its own engine (one I/O queue each), busy-polling (`runner/job.rs`); the calling thread
//! watches them: the progress line, `--status-interval` reports, stop requests, and
//! the jobs' ends.
//!
//! Jobs run together, except that a job with `stonewall` waits until every job
//! before it has finished (fio's stonewall: the run is a sequence of segments). Jobs
//! that verify share one [`VerifyTracker`], so a block one job wrote can be checked
//! by another that reads it; each job reads back what it wrote itself.
//!
//! The initiator is a run-to-completion poll group (DESIGN.md, principle 2): each
//! job thread should have a core; the embedded target's poll group wants one too. On
//! a machine with fewer cores than that, the threads share them (`cpus_allowed`
//! pins them).

mod job;
mod pace;
mod shared;
pub mod thread;
mod track;

use std::sync::atomic::AtomicBool;
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime};

use self::job::{run_job, JobContext, JobOutcome, JobShared};
use super::engine::IoEngine;
use super::jobspec::{JobSpec, RunOptions};
use super::options::VerifyMode;
use super::progress::{JobPhase, JobProgress, Progress};
use super::result::{BenchResult, JobError, JobResult, VerifySummary, ERRNO_EIO};
use super::verify::VerifyTracker;

/// One job: its workload and the engine (one I/O queue) that executes it. The engine
/// may be borrowed (`Box::new(&mut engine)`) so the caller keeps it after the run.
pub struct Job<'a> {
    /// What to run.
    pub spec: JobSpec,
    /// Where to run it.
    pub engine: Box<dyn IoEngine + Send + 'a>,
}

impl<'a> Job<'a> {
    /// A job running `spec` on `engine`.
    pub fn new(spec: JobSpec, engine: Box<dyn IoEngine + Send + 'a>) -> Self {
        Self { spec, engine }
    }
}

impl std::fmt::Debug for Job<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Job")
            .field("spec", &self.spec)
            .finish_non_exhaustive()
    }
}

/// fio's progress interval (`eta_interval`, 1 s).
pub const PROGRESS_INTERVAL: Duration = Duration::from_secs(1);

/// The longest an engine sleeps in [`IoEngine::idle`] per idle round, so the job
/// still sees deadlines and stop requests.
pub const IDLE_WAIT: Duration = Duration::from_millis(1);

/// How often the watching thread looks at the jobs.
const WATCH_INTERVAL: Duration = Duration::from_millis(10);

/// How long the watching thread waits for a job's status snapshot.
const SNAPSHOT_WAIT: Duration = Duration::from_millis(500);

/// How a caller steers a run from outside: a stop flag, callbacks for the progress
/// line, the status reports and the jobs' ends.
pub struct RunControl<'a> {
    /// Once true, every job stops as at the end of its runtime, but without its
    /// verify phase; the result is marked [`BenchResult::interrupted`].
    pub stop: Option<&'a AtomicBool>,
    /// Called every `progress_interval` while jobs run, with their progress.
    pub progress: Option<&'a mut dyn FnMut(&Progress)>,
    /// How often `progress` is called.
    pub progress_interval: Duration,
    /// Called every [`RunOptions::status_interval`] with the statistics so far.
    pub status: Option<&'a mut dyn FnMut(&BenchResult)>,
    /// Called when a job has ended, with its result (fio prints `fio: pid=N, err=...`
    /// for a job that failed).
    pub job_done: Option<&'a mut dyn FnMut(&JobResult)>,
    /// How fio's error lines name the namespace (`fio: io_u error on file NAME: ...`).
    pub file_name: &'a str,
}

impl Default for RunControl<'_> {
    fn default() -> Self {
        Self {
            stop: None,
            progress: None,
            progress_interval: PROGRESS_INTERVAL,
            status: None,
            job_done: None,
            file_name: "nvmf-rdma",
        }
    }
}

impl std::fmt::Debug for RunControl<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunControl")
            .field("stop", &self.stop)
            .field("progress", &self.progress.is_some())
            .field("progress_interval", &self.progress_interval)
            .field("status", &self.status.is_some())
            .field("file_name", &self.file_name)
            .finish()
    }
}

/// Runs `jobs` to completion (see the module docs) and returns what was measured.
pub fn run(mut jobs: Vec<Job<'_>>, opts: &RunOptions) -> BenchResult {
    run_in_place(&mut jobs, opts, None)
}

/// Like [`run`], but leaves the jobs (and their engines) with the caller, and stops
/// early, as at the end of the runtime, once `stop` becomes true (e.g. on Ctrl-C).
pub fn run_in_place(
    jobs: &mut [Job<'_>],
    opts: &RunOptions,
    stop: Option<&AtomicBool>,
) -> BenchResult {
    run_with(
        jobs,
        opts,
        RunControl {
            stop,
            ..RunControl::default()
        },
    )
}

/// The stonewall segments of `jobs`: ranges of jobs that run together.
fn segments(jobs: &[Job<'_>]) -> Vec<std::ops::Range<usize>> {
    let mut out = Vec::new();
    let mut start = 0;
    for i in 1..=jobs.len() {
        if i == jobs.len() || jobs[i].spec.stonewall {
            out.push(start..i);
            start = i;
        }
    }
    out
}

/// Like [`run_in_place`], steered by `ctl`.
pub fn run_with(jobs: &mut [Job<'_>], opts: &RunOptions, mut ctl: RunControl<'_>) -> BenchResult {
    let started = SystemTime::now();
    let start = Instant::now();
    let tracker = jobs
        .iter()
        .any(|j| j.spec.verify != VerifyMode::None)
        .then(|| Mutex::new(VerifyTracker::new()));
    let shared: Vec<JobShared> = jobs.iter().map(|_| JobShared::default()).collect();
    let mut results: Vec<Option<JobResult>> = vec![None; jobs.len()];
    let mut read_back_cut = false;
    let stopped = |ctl: &RunControl<'_>| {
        ctl.stop
            .is_some_and(|s| s.load(std::sync::atomic::Ordering::Relaxed))
    };
    for seg in segments(jobs) {
        if stopped(&ctl) {
            break;
        }
        let seg_start = Instant::now();
        let specs: Vec<JobSpec> = jobs.iter().map(|j| j.spec.clone()).collect();
        let file_name = ctl.file_name;
        std::thread::scope(|s| {
            let mut handles: Vec<Option<std::thread::ScopedJoinHandle<'_, JobOutcome>>> = jobs
                [seg.clone()]
            .iter_mut()
            .zip(&shared[seg.clone()])
            .map(|(job, sh)| {
                let tracker = tracker.as_ref();
                let stop = ctl.stop;
                let name = format!("{}.{}", job.spec.name, job.spec.thread_number);
                std::thread::Builder::new()
                    .name(name)
                    .spawn_scoped(s, move || {
                        let ctx = JobContext {
                            stop,
                            tracker,
                            opts,
                            shared: sh,
                            run_start: start,
                            file_name,
                        };
                        run_job(job, &ctx)
                    })
                    .ok()
            })
            .collect();
            for (k, h) in handles.iter().enumerate() {
                if h.is_none() {
                    let i = seg.start + k;
                    let mut r = JobResult::empty(specs[i].clone());
                    r.error = Some(JobError::new(
                        ERRNO_EIO,
                        "thread_create",
                        "could not start the job's thread".into(),
                    ));
                    results[i] = Some(r);
                }
            }
            let mut next_progress = seg_start + ctl.progress_interval;
            let mut next_status = opts.status_interval.map(|i| seg_start + i);
            let mut generation = 0u64;
            loop {
                for (k, h) in handles.iter_mut().enumerate() {
                    if h.as_ref().is_some_and(|h| h.is_finished()) {
                        let i = seg.start + k;
                        let outcome = h.take().map(|h| h.join());
                        let result = match outcome {
                            Some(Ok(o)) => {
                                read_back_cut |= o.read_back_cut;
                                o.result
                            }
                            _ => {
                                let mut r = JobResult::empty(specs[i].clone());
                                r.error = Some(JobError::new(
                                    ERRNO_EIO,
                                    "thread_main",
                                    "the job's thread panicked".into(),
                                ));
                                r
                            }
                        };
                        if let Some(cb) = ctl.job_done.as_mut() {
                            cb(&result);
                        }
                        results[i] = Some(result);
                    }
                }
                if handles.iter().all(Option::is_none) {
                    break;
                }
                let now = Instant::now();
                if now >= next_progress {
                    next_progress = now + ctl.progress_interval;
                    if let Some(cb) = ctl.progress.as_mut() {
                        cb(&progress(&specs, &shared, &results, now - seg_start));
                    }
                }
                if next_status.is_some_and(|t| now >= t) {
                    next_status = opts.status_interval.map(|i| now + i);
                    if ctl.status.is_some() {
                        generation += 1;
                        let snapshot = snapshot_result(
                            &specs,
                            &shared,
                            &results,
                            seg.clone(),
                            generation,
                            opts,
                            started,
                            start,
                        );
                        if let Some(cb) = ctl.status.as_mut() {
                            cb(&snapshot);
                        }
                    }
                }
                std::thread::sleep(
                    WATCH_INTERVAL
                        .min(next_progress.saturating_duration_since(now))
                        .max(Duration::from_millis(1)),
                );
            }
        });
    }
    let jobs_out: Vec<JobResult> = results
        .into_iter()
        .zip(jobs.iter())
        .map(|(r, j)| r.unwrap_or_else(|| JobResult::empty(j.spec.clone())))
        .collect();
    let verify = tracker.map(|t| {
        let t = t.into_inner().unwrap_or_else(|e| e.into_inner());
        VerifySummary {
            verified: t.verified,
            mismatches: t.mismatches,
            written: t.written,
            unchecked: t.unchecked(),
            cut_short: read_back_cut,
        }
    });
    let end = Instant::now();
    BenchResult {
        jobs: jobs_out,
        verify,
        faults: None,
        baseline: None,
        target_counters: None,
        reconnects: None,
        options: opts.clone(),
        started,
        elapsed: end - start,
        interrupted: stopped(&ctl),
    }
}

/// The jobs' progress now; `elapsed` since the current segment started.
fn progress(
    specs: &[JobSpec],
    shared: &[JobShared],
    results: &[Option<JobResult>],
    elapsed: Duration,
) -> Progress {
    let first = specs
        .iter()
        .zip(shared)
        .find(|(_, s)| {
            matches!(
                s.phase(),
                Some(JobPhase::Ramp | JobPhase::Running | JobPhase::Verifying)
            )
        })
        .map(|(spec, _)| spec)
        .or(specs.first());
    Progress {
        elapsed,
        runtime: first.map_or(Duration::ZERO, |s| s.runtime),
        ramp_time: first.map_or(Duration::ZERO, |s| s.ramp_time),
        time_based: first.is_some_and(|s| s.time_based),
        jobs: specs
            .iter()
            .zip(shared)
            .zip(results)
            .map(|((spec, sh), done)| {
                let (bytes, ios) = sh.counts();
                let phase = match (done, sh.phase()) {
                    (Some(r), _) if r.error.is_some() => JobPhase::Failed,
                    (_, Some(p)) => p,
                    (_, None) => JobPhase::NotStarted,
                };
                let io_bytes = spec.io_limit.unwrap_or(spec.size);
                JobProgress {
                    rw: spec.rw,
                    rwmixread: spec.rwmixread,
                    phase,
                    bytes: [bytes[0], bytes[1] + bytes[2]],
                    ios: [ios[0], ios[1] + ios[2]],
                    total_bytes: JobProgress::total_with_verify(
                        io_bytes,
                        spec.rw,
                        spec.rwmixread,
                        spec.verify != VerifyMode::None,
                    ),
                }
            })
            .collect(),
    }
}

/// The statistics so far (`--status-interval`): the running jobs' snapshots, the
/// ended jobs' results, nothing for jobs not started.
#[allow(clippy::too_many_arguments)]
fn snapshot_result(
    specs: &[JobSpec],
    shared: &[JobShared],
    results: &[Option<JobResult>],
    seg: std::ops::Range<usize>,
    generation: u64,
    opts: &RunOptions,
    started: SystemTime,
    start: Instant,
) -> BenchResult {
    for sh in &shared[seg.clone()] {
        sh.request_snapshot(generation);
    }
    let deadline = Instant::now() + SNAPSHOT_WAIT;
    let jobs = (0..specs.len())
        .map(|i| {
            if let Some(r) = &results[i] {
                return r.clone();
            }
            if seg.contains(&i) {
                loop {
                    if let Some(r) = shared[i].snapshot(generation) {
                        return r;
                    }
                    if Instant::now() >= deadline {
                        break;
                    }
                    std::thread::sleep(Duration::from_millis(1));
                }
            }
            JobResult::empty(specs[i].clone())
        })
        .collect();
    BenchResult {
        jobs,
        verify: None,
        faults: None,
        baseline: None,
        target_counters: None,
        reconnects: None,
        options: opts.clone(),
        started,
        elapsed: start.elapsed(),
        interrupted: false,
    }
}

#[cfg(test)]
mod tests;
