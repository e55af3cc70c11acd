//! The benchmark loop: one thread drives every job round-robin, busy-polling.
//!
//! The initiator is a run-to-completion poll group (DESIGN.md, principle 2) and the
//! embedded target needs the other core, so jobs are not threads: each loop turn
//! tops every job up to its iodepth, then polls its engine, without sleeping.
//!
//! Per I/O, completion latency is measured from just before [`IoEngine::submit`] to
//! the poll that returned its completion ([`Instant`]), in nanoseconds. I/Os
//! submitted during `ramp_time` are executed but not counted. A job's run time is
//! from its first counted submit to its last counted completion. A failed I/O, a
//! verification mismatch or an engine failure stops the job and is reported as
//! fio's `err=`. A runtime of zero sets no time limit (fio): the job ends when it has
//! issued its `io_size`.
//!
//! With `--verify crc32c`, reads of blocks written earlier in the run are checked
//! as they complete; and, as fio's `do_verify`, a job that writes then reads back
//! every block of its region written in this run (the verify phase, which the
//! runtime does not cut short and the statistics, bandwidth and IOPS samples
//! included, do not count). Unlike fio, the verify phase also follows a write phase
//! that the runtime ended. A stop request ([`RunControl::stop`], e.g. Ctrl-C) ends
//! every phase, the verify phase included, and waits only for the I/Os in flight.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, SystemTime};

use super::engine::{IoCompletion, IoEngine};
use super::options::{JobSpec, RunOptions, VerifyMode};
use super::progress::{JobPhase, JobProgress, Progress};
use super::result::{
    depth_bucket, BenchResult, GroupResult, JobError, JobResult, VerifySummary, ERRNO_EILSEQ,
    ERRNO_EIO, ERRNO_ETIMEDOUT,
};
use super::stats::{DirStats, Sampler};
use super::verify::{fill_block, ReadCheck, VerifyTracker};
use super::workload::{IoOp, IoRequest, Workload};

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

/// The longest an engine sleeps in [`IoEngine::idle`] per idle round, so the runner
/// still sees deadlines, signals and the other jobs' engines.
pub const IDLE_WAIT: Duration = Duration::from_millis(1);

/// How a caller steers a run from outside: a stop flag and a progress callback.
pub struct RunControl<'a> {
    /// Once true, every job stops as at the end of the runtime, but without its
    /// verify phase; the result is marked [`BenchResult::interrupted`]. Polled every
    /// loop turn (an atomic load).
    pub stop: Option<&'a AtomicBool>,
    /// Called every `progress_interval` while jobs run, with their progress.
    pub progress: Option<&'a mut dyn FnMut(&Progress)>,
    /// How often `progress` is called.
    pub progress_interval: Duration,
}

impl Default for RunControl<'_> {
    fn default() -> Self {
        Self {
            stop: None,
            progress: None,
            progress_interval: PROGRESS_INTERVAL,
        }
    }
}

impl std::fmt::Debug for RunControl<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunControl")
            .field("stop", &self.stop)
            .field("progress", &self.progress.is_some())
            .field("progress_interval", &self.progress_interval)
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

/// Like [`run_in_place`], steered by `ctl` (stop flag, progress callback).
pub fn run_with(jobs: &mut [Job<'_>], opts: &RunOptions, mut ctl: RunControl<'_>) -> BenchResult {
    let started = SystemTime::now();
    let start = Instant::now();
    let measure_from = start + opts.ramp_time;
    let deadline = (!opts.runtime.is_zero()).then(|| measure_from + opts.runtime);
    let mut tracker = (opts.verify == VerifyMode::Crc32c).then(VerifyTracker::new);
    let mut states: Vec<JobState> = jobs
        .iter()
        .map(|j| JobState::new(j, start, tracker.is_some()))
        .collect();
    let mut comps = Vec::new();
    let mut next_progress = start + ctl.progress_interval;
    let mut interrupted = false;
    let mut idle_turn = 0usize;

    loop {
        let now = Instant::now();
        let past_deadline = deadline.is_some_and(|d| now >= d);
        let stop_flag = ctl.stop.is_some_and(|s| s.load(Ordering::Relaxed));
        interrupted |= stop_flag;
        let mut all_done = true;
        let mut busy = false;
        for (job, st) in jobs.iter_mut().zip(states.iter_mut()) {
            if st.done {
                continue;
            }
            all_done = false;
            let outstanding = st.outstanding;
            if stop_flag {
                st.interrupted = true;
                st.stop(now);
            } else if past_deadline && st.phase == Phase::Workload {
                st.end_workload(now);
            }
            if st.stop_at.is_none() {
                st.fill(job, tracker.as_mut(), measure_from, now);
            }
            busy |= st.outstanding != outstanding;
            busy |= st.poll(job, tracker.as_mut(), measure_from, &mut comps) > 0;
            st.check_done(now, opts.drain_timeout);
        }
        if all_done {
            break;
        }
        if !busy {
            // A round without a submission or a completion: let one engine (in turn)
            // sleep on its completions, if it does (busy polling otherwise).
            let active = states.iter().filter(|st| !st.done).count().max(1);
            let turn = idle_turn % active;
            let sleeper = jobs
                .iter_mut()
                .zip(&states)
                .filter(|(_, st)| !st.done)
                .nth(turn);
            if let Some((job, _)) = sleeper {
                job.engine.idle(IDLE_WAIT);
            }
            idle_turn = idle_turn.wrapping_add(1);
        }
        if now >= next_progress {
            next_progress = now + ctl.progress_interval;
            if let Some(report) = ctl.progress.as_mut() {
                report(&progress(
                    jobs,
                    &states,
                    opts,
                    now - start,
                    measure_from,
                    now,
                ));
            }
        }
    }

    let end = Instant::now();
    let results: Vec<JobResult> = jobs
        .iter()
        .zip(states)
        .map(|(j, st)| st.finish(&j.spec, start, end))
        .collect();
    BenchResult {
        group: GroupResult::from_jobs(&results),
        jobs: results,
        verify: tracker.map(|t| VerifySummary {
            verified: t.verified,
            mismatches: t.mismatches,
            written: t.written,
        }),
        faults: None,
        baseline: None,
        options: opts.clone(),
        started,
        elapsed: end - start,
        interrupted,
    }
}

/// The jobs' progress now.
fn progress(
    jobs: &[Job<'_>],
    states: &[JobState],
    opts: &RunOptions,
    elapsed: Duration,
    measure_from: Instant,
    now: Instant,
) -> Progress {
    let verify = opts.verify == VerifyMode::Crc32c;
    Progress {
        elapsed,
        runtime: opts.runtime,
        ramp_time: opts.ramp_time,
        time_based: opts.time_based,
        jobs: jobs
            .iter()
            .zip(states)
            .map(|(j, st)| {
                let spec = &j.spec;
                let phase = if st.done {
                    if st.error.is_some() {
                        JobPhase::Failed
                    } else if st.interrupted {
                        JobPhase::Killed
                    } else {
                        JobPhase::Finished
                    }
                } else if matches!(st.phase, Phase::Verify(_)) {
                    JobPhase::Verifying
                } else if now < measure_from {
                    JobPhase::Ramp
                } else {
                    JobPhase::Running
                };
                let io_bytes = spec.io_limit.unwrap_or(spec.size);
                JobProgress {
                    rw: spec.rw,
                    rwmixread: spec.rwmixread,
                    phase,
                    bytes: st.all_bytes,
                    ios: st.all_ios,
                    total_bytes: JobProgress::total_with_verify(
                        io_bytes,
                        spec.rw,
                        spec.rwmixread,
                        verify,
                    ),
                }
            })
            .collect(),
    }
}

/// Verification bookkeeping carried by one in-flight I/O.
#[derive(Debug, Clone, Copy)]
enum SlotVerify {
    None,
    Write(u64),
    Read(ReadCheck),
}

/// Where a job is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Issuing the workload.
    Workload,
    /// Workload issued; waiting for its I/Os to finish before reading back.
    DrainBeforeVerify,
    /// fio's verify phase: reading back the region's written blocks, from this block
    /// index on. Not counted in the statistics.
    Verify(u64),
}

#[derive(Debug, Clone, Copy)]
struct Slot {
    req: IoRequest,
    submitted: Instant,
    measured: bool,
    verify: SlotVerify,
}

struct JobState {
    workload: Workload,
    phase: Phase,
    /// Region start, block size and block count, for the verify phase.
    region: (u64, u32, u64),
    /// Whether the job reads back what it wrote (verifying, and the workload writes).
    verify_phase: bool,
    depth: usize,
    free_tags: Vec<u32>,
    slots: Vec<Option<Slot>>,
    outstanding: usize,
    retry: Option<IoRequest>,
    stop_at: Option<Instant>,
    done: bool,
    done_at: Option<Instant>,
    /// The stop flag ended the job.
    interrupted: bool,
    dirs: [DirStats; 2],
    sampler: Sampler,
    sample_tick: Option<Instant>,
    active: [bool; 2],
    first_submit: Option<Instant>,
    last_completion: Option<Instant>,
    error: Option<JobError>,
    depth_dist: [u64; 7],
    /// Every completed I/O's bytes and count, ramp and verify phase included (for the
    /// progress line).
    all_bytes: [u64; 2],
    all_ios: [u64; 2],
}

impl JobState {
    fn new(job: &Job<'_>, now: Instant, verifying: bool) -> Self {
        let depth = (job.spec.iodepth as usize).min(job.engine.max_outstanding());
        let writes = job.spec.rw.read_percent(job.spec.rwmixread) < 100;
        let mut st = Self {
            workload: Workload::new(&job.spec),
            phase: Phase::Workload,
            region: (job.spec.offset, job.spec.bs, job.spec.blocks()),
            verify_phase: verifying && writes,
            depth,
            free_tags: (0..depth as u32).rev().collect(),
            slots: vec![None; depth],
            outstanding: 0,
            retry: None,
            stop_at: None,
            done: false,
            done_at: None,
            interrupted: false,
            dirs: Default::default(),
            sampler: Sampler::default(),
            sample_tick: None,
            active: [false; 2],
            first_submit: None,
            last_completion: None,
            error: None,
            depth_dist: [0; 7],
            all_bytes: [0; 2],
            all_ios: [0; 2],
        };
        if depth == 0 {
            st.fail(
                ERRNO_EIO,
                "engine accepts no outstanding I/O (queue depth 0)".into(),
                now,
            );
        }
        st
    }

    fn stop(&mut self, now: Instant) {
        if self.stop_at.is_none() {
            self.stop_at = Some(now);
        }
    }

    /// The runtime is over: stop issuing the workload, then read back what was
    /// written (verifying) or stop.
    fn end_workload(&mut self, now: Instant) {
        if self.verify_phase {
            self.phase = Phase::DrainBeforeVerify;
            self.retry = None;
        } else {
            self.stop(now);
        }
    }

    fn fail(&mut self, errno: i32, message: String, now: Instant) {
        if self.error.is_none() {
            self.error = Some(JobError { errno, message });
        }
        self.stop(now);
    }

    /// The next request of the current phase; `None` when the phase has nothing to
    /// issue now (the job stops once it has nothing left at all).
    fn next_request(&mut self, tracker: Option<&VerifyTracker>, now: Instant) -> Option<IoRequest> {
        if let Some(r) = self.retry.take() {
            return Some(r);
        }
        loop {
            match self.phase {
                Phase::Workload => {
                    if let Some(r) = self.workload.next_request() {
                        return Some(r);
                    }
                    if !self.verify_phase {
                        self.stop(now);
                        return None;
                    }
                    self.phase = Phase::DrainBeforeVerify;
                }
                Phase::DrainBeforeVerify => {
                    if self.outstanding > 0 {
                        return None;
                    }
                    self.phase = Phase::Verify(0);
                }
                Phase::Verify(mut next) => {
                    let (base, bs, blocks) = self.region;
                    let mut found = None;
                    while next < blocks && found.is_none() {
                        let offset = base + next * u64::from(bs);
                        next += 1;
                        if tracker.is_some_and(|t| t.read_started(offset).is_some()) {
                            found = Some(IoRequest {
                                op: IoOp::Read,
                                offset,
                                len: bs,
                            });
                        }
                    }
                    self.phase = Phase::Verify(next);
                    if found.is_none() {
                        self.stop(now);
                    }
                    return found;
                }
            }
        }
    }

    /// Submits until the job has `depth` I/Os outstanding, the engine is busy, or the
    /// current phase has nothing more to issue.
    fn fill(
        &mut self,
        job: &mut Job<'_>,
        mut tracker: Option<&mut VerifyTracker>,
        measure_from: Instant,
        now: Instant,
    ) {
        while self.outstanding < self.depth {
            let Some(req) = self.next_request(tracker.as_deref(), now) else {
                return;
            };
            let Some(tag) = self.free_tags.pop() else {
                // Unreachable while `outstanding < depth`; keep the request anyway.
                self.retry = Some(req);
                return;
            };
            let len = req.len as usize;
            let verify = match (tracker.as_deref_mut(), req.op) {
                (Some(t), IoOp::Write) => {
                    let generation = t.write_started(req.offset);
                    match job.engine.buffer(tag).get_mut(..len) {
                        Some(block) => fill_block(block, req.offset, generation),
                        None => {
                            t.write_finished(req.offset, generation, false);
                            self.free_tags.push(tag);
                            self.fail(
                                ERRNO_EIO,
                                format!("engine buffer of tag {tag} is shorter than bs {len}"),
                                now,
                            );
                            return;
                        }
                    }
                    SlotVerify::Write(generation)
                }
                (Some(t), IoOp::Read) => t
                    .read_started(req.offset)
                    .map_or(SlotVerify::None, SlotVerify::Read),
                (None, _) => SlotVerify::None,
            };
            let submitted = Instant::now();
            match job.engine.submit(tag, &req) {
                Ok(()) => {
                    let measured = submitted >= measure_from && self.phase == Phase::Workload;
                    if measured && self.first_submit.is_none() {
                        self.first_submit = Some(submitted);
                    }
                    self.slots[tag as usize] = Some(Slot {
                        req,
                        submitted,
                        measured,
                        verify,
                    });
                    self.outstanding += 1;
                    if measured {
                        self.depth_dist[depth_bucket(self.outstanding)] += 1;
                    }
                }
                Err(e) => {
                    self.free_tags.push(tag);
                    if let (Some(t), SlotVerify::Write(g)) = (tracker.as_deref_mut(), verify) {
                        t.write_finished(req.offset, g, false);
                    }
                    if e.is_busy() {
                        self.retry = Some(req);
                    } else {
                        self.fail(
                            ERRNO_EIO,
                            format!("submit of {} failed: {e}", describe(&req)),
                            now,
                        );
                    }
                    return;
                }
            }
        }
    }

    /// Polls the engine once and accounts every completion; an engine failure then
    /// stops the job and abandons what is still outstanding. Returns how many I/Os
    /// the engine completed.
    fn poll(
        &mut self,
        job: &mut Job<'_>,
        mut tracker: Option<&mut VerifyTracker>,
        measure_from: Instant,
        comps: &mut Vec<IoCompletion>,
    ) -> usize {
        comps.clear();
        let failure = job.engine.poll(comps).err();
        let now = Instant::now();
        let completed = comps.len();
        for c in comps.drain(..) {
            let Some(slot) = self.slots.get_mut(c.tag as usize).and_then(Option::take) else {
                self.fail(
                    ERRNO_EIO,
                    format!("engine completed tag {} that is not outstanding", c.tag),
                    now,
                );
                continue;
            };
            self.outstanding -= 1;
            self.free_tags.push(c.tag);
            let req = slot.req;
            let ok = c.result.is_ok();
            match (tracker.as_deref_mut(), slot.verify) {
                (Some(t), SlotVerify::Write(g)) => t.write_finished(req.offset, g, ok),
                (Some(t), SlotVerify::Read(check)) if ok => {
                    let block = job
                        .engine
                        .buffer(c.tag)
                        .get(..req.len as usize)
                        .unwrap_or(&[]);
                    if let Err(e) = t.read_finished(block, req.offset, check) {
                        self.fail(ERRNO_EILSEQ, e.to_string(), now);
                    }
                }
                _ => {}
            }
            if let Err(msg) = c.result {
                self.fail(ERRNO_EIO, format!("{} failed: {msg}", describe(&req)), now);
                continue;
            }
            let d = req.op.index();
            self.all_bytes[d] += u64::from(req.len);
            self.all_ios[d] += 1;
            if slot.measured {
                let ns = now.saturating_duration_since(slot.submitted).as_nanos();
                self.dirs[d]
                    .clat
                    .record(u64::try_from(ns).unwrap_or(u64::MAX));
                self.dirs[d].ios += 1;
                self.dirs[d].bytes += u64::from(req.len);
                self.sampler.add(d, u64::from(req.len));
                self.active[d] = true;
                self.last_completion = Some(now);
            }
        }
        if let Some(e) = failure {
            self.fail(ERRNO_EIO, format!("engine poll failed: {e}"), now);
            // Nothing more will complete: abandon what is outstanding.
            self.outstanding = 0;
            return completed;
        }
        // Bandwidth and IOPS samples cover the workload only: windows stop closing
        // once it ends (verify phase, drain), so they hold no idle or read-back time.
        if now >= measure_from && self.phase == Phase::Workload && self.stop_at.is_none() {
            let tick = self.sample_tick.unwrap_or(measure_from);
            let elapsed = now.saturating_duration_since(tick).as_nanos() as u64;
            self.sampler.advance(elapsed, self.active, &mut self.dirs);
            self.sample_tick = Some(now);
        }
        completed
    }

    fn check_done(&mut self, now: Instant, drain_timeout: Duration) {
        let Some(stop_at) = self.stop_at else {
            return;
        };
        if self.outstanding == 0 {
            self.done = true;
        } else if now.saturating_duration_since(stop_at) > drain_timeout {
            let n = self.outstanding;
            self.fail(
                ERRNO_ETIMEDOUT,
                format!("{n} I/Os still outstanding {drain_timeout:?} after the job stopped"),
                now,
            );
            self.done = true;
        }
        if self.done {
            self.done_at = Some(now);
        }
    }

    fn finish(self, spec: &JobSpec, start: Instant, end: Instant) -> JobResult {
        let runtime_ms = match (self.first_submit, self.last_completion) {
            (Some(a), Some(b)) => {
                let us = b.saturating_duration_since(a).as_micros();
                u64::try_from(us.div_ceil(1000)).unwrap_or(u64::MAX).max(1)
            }
            _ => 0,
        };
        JobResult {
            spec: spec.clone(),
            dirs: self.dirs,
            runtime_ms,
            elapsed: self.done_at.unwrap_or(end).saturating_duration_since(start),
            error: self.error,
            depth_dist: self.depth_dist,
        }
    }
}

fn describe(req: &IoRequest) -> String {
    let op = match req.op {
        IoOp::Read => "read",
        IoOp::Write => "write",
    };
    format!("{op} at offset {} length {}", req.offset, req.len)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::EngineError;
    use crate::mem_engine::{MemEngine, ReadCorruption};
    use crate::options::RwMode;

    const BS: u32 = 4096;

    fn spec(rw: RwMode, index: u32, blocks: u64, io_blocks: u64, iodepth: u32) -> JobSpec {
        JobSpec {
            name: "t".into(),
            index,
            rw,
            rwmixread: 50,
            bs: BS,
            iodepth,
            offset: u64::from(index) * blocks * u64::from(BS),
            size: blocks * u64::from(BS),
            io_limit: Some(io_blocks * u64::from(BS)),
            seed: 0x89 + u64::from(index),
        }
    }

    fn opts(verify: VerifyMode) -> RunOptions {
        RunOptions {
            runtime: Duration::from_secs(3600),
            verify,
            ..RunOptions::default()
        }
    }

    fn mem(blocks: u64, jobs: u64, depth: usize) -> MemEngine {
        MemEngine::new((blocks * jobs) as usize * BS as usize, depth, BS as usize)
    }

    #[test]
    fn counts_every_io_of_a_sized_job() {
        let jobs = vec![
            Job::new(
                spec(RwMode::RandRead, 0, 64, 64, 4),
                Box::new(mem(64, 2, 8)),
            ),
            Job::new(spec(RwMode::Write, 1, 64, 100, 1), Box::new(mem(64, 2, 8))),
        ];
        let r = run(jobs, &opts(VerifyMode::None));
        assert_eq!(r.jobs.len(), 2);
        assert_eq!(r.jobs[0].dirs[0].ios, 64);
        assert_eq!(r.jobs[0].dirs[0].bytes, 64 * 4096);
        assert_eq!(r.jobs[0].dirs[0].clat.count(), 64);
        assert_eq!(r.jobs[0].dirs[1].ios, 0);
        assert_eq!(r.jobs[1].dirs[1].ios, 100);
        assert!(r
            .jobs
            .iter()
            .all(|j| j.error.is_none() && j.runtime_ms >= 1));
        assert_eq!(r.group.dirs[0].ios, 64);
        assert_eq!(r.group.dirs[1].ios, 100);
        assert!(r.verify.is_none());
    }

    #[test]
    fn randrw_with_crc32c_verifies_without_mismatch() {
        let jobs = vec![
            Job::new(
                spec(RwMode::RandRw, 0, 64, 64 * 20, 8),
                Box::new(mem(64, 2, 8)),
            ),
            Job::new(
                spec(RwMode::ReadWrite, 1, 64, 64 * 20, 1),
                Box::new(mem(64, 2, 8)),
            ),
        ];
        let r = run(jobs, &opts(VerifyMode::Crc32c));
        let v = r.verify.unwrap();
        assert_eq!(v.mismatches, 0);
        assert!(v.verified > 100, "only {} blocks verified", v.verified);
        assert!(
            r.jobs.iter().all(|j| j.error.is_none()),
            "{:?}",
            r.jobs[0].error
        );
    }

    #[test]
    fn verification_is_per_run() {
        let mut jobs = vec![Job::new(
            spec(RwMode::Write, 0, 32, 32, 4),
            Box::new(mem(32, 1, 4)),
        )];
        let o = opts(VerifyMode::Crc32c);
        let w = run_in_place(&mut jobs, &o, None);
        assert_eq!(w.jobs[0].dirs[1].ios, 32);
        // fio's verify phase read every written block back, outside the statistics.
        assert_eq!(
            w.verify.unwrap(),
            VerifySummary {
                verified: 32,
                mismatches: 0,
                written: 32
            }
        );
        assert_eq!(w.jobs[0].dirs[0].ios, 0);
        // A second run over the same engine reads the blocks back, but only blocks
        // written in the same run are checked.
        jobs[0].spec.rw = RwMode::Read;
        let r = run_in_place(&mut jobs, &o, None);
        assert_eq!(r.jobs[0].dirs[0].ios, 32);
        assert_eq!(
            r.verify.unwrap(),
            VerifySummary {
                verified: 0,
                mismatches: 0,
                written: 0
            }
        );
        assert!(r.passed(), "nothing written, nothing to verify");
    }

    #[test]
    fn corrupted_reads_are_mismatches_that_stop_the_job() {
        let mut engine = mem(64, 1, 4);
        engine.corrupt_reads(ReadCorruption::FlipLastByte);
        let jobs = vec![Job::new(
            spec(RwMode::RandRw, 0, 64, 64 * 20, 4),
            Box::new(engine),
        )];
        let r = run(jobs, &opts(VerifyMode::Crc32c));
        let v = r.verify.unwrap();
        assert!(v.mismatches > 0);
        let e = r.jobs[0].error.as_ref().unwrap();
        assert_eq!(e.errno, ERRNO_EILSEQ);
        assert!(e.message.contains("bad crc32c at offset"), "{}", e.message);
        assert_eq!(r.group.error.as_ref().unwrap().errno, ERRNO_EILSEQ);
    }

    #[test]
    fn verify_phase_after_writes_catches_corruption() {
        let mut engine = mem(64, 1, 4);
        engine.corrupt_reads(ReadCorruption::FlipLastByte);
        let jobs = vec![Job::new(
            spec(RwMode::RandWrite, 0, 64, 64, 4),
            Box::new(engine),
        )];
        let r = run(jobs, &opts(VerifyMode::Crc32c));
        assert_eq!(r.jobs[0].dirs[1].ios, 64);
        // The reads already in flight when the first mismatch stops the job count too.
        assert!((1..=4).contains(&r.verify.unwrap().mismatches));
        assert_eq!(r.jobs[0].errno(), ERRNO_EILSEQ);
    }

    #[test]
    fn failed_io_stops_the_job_with_eio() {
        let mut engine = mem(16, 1, 1);
        engine.fail_at(5 * 4096);
        let jobs = vec![Job::new(spec(RwMode::Read, 0, 16, 16, 1), Box::new(engine))];
        let r = run(jobs, &opts(VerifyMode::None));
        let e = r.jobs[0].error.as_ref().unwrap();
        assert_eq!(e.errno, ERRNO_EIO);
        assert!(e.message.contains("read at offset 20480"), "{}", e.message);
        assert_eq!(r.jobs[0].dirs[0].ios, 5);
    }

    #[test]
    fn busy_engine_is_retried() {
        let mut engine = mem(16, 1, 4);
        engine.busy_every(3);
        let jobs = vec![Job::new(
            spec(RwMode::RandWrite, 0, 16, 48, 4),
            Box::new(engine),
        )];
        let r = run(jobs, &opts(VerifyMode::Crc32c));
        assert!(r.jobs[0].error.is_none());
        assert_eq!(r.jobs[0].dirs[1].ios, 48);
    }

    #[test]
    fn stop_flag_ends_a_time_based_run() {
        let mut s = spec(RwMode::RandRead, 0, 16, 0, 2);
        s.io_limit = None;
        let mut jobs = vec![Job::new(s, Box::new(mem(16, 1, 2)))];
        let stop = AtomicBool::new(true);
        let r = run_in_place(&mut jobs, &opts(VerifyMode::None), Some(&stop));
        assert!(r.jobs[0].error.is_none());
        assert!(r.interrupted);
    }

    #[test]
    fn runtime_end_of_the_write_phase_still_verifies_every_written_block() {
        // A time-based random write job whose runtime ends the write phase: fio would
        // skip its verify phase; every block written is read back here.
        // Depth 1: no two writes of one block overlap (which would leave its content
        // unknown and unverifiable).
        let mut s = spec(RwMode::RandWrite, 0, 256, 0, 1);
        s.io_limit = None;
        let mut engine = mem(256, 1, 4);
        engine.set_latency(Duration::ZERO, Duration::from_micros(200));
        let mut jobs = vec![Job::new(s, Box::new(engine))];
        let o = RunOptions {
            runtime: Duration::from_millis(30),
            time_based: true,
            verify: VerifyMode::Crc32c,
            ..RunOptions::default()
        };
        let r = run_in_place(&mut jobs, &o, None);
        let v = r.verify.unwrap();
        let writes = r.jobs[0].dirs[1].ios;
        assert!(writes > 0 && v.written == writes, "{v:?}, {writes} writes");
        assert!(v.verified > 0, "{v:?}");
        // Each block written once or more is read back once.
        assert_eq!(v.verified, writes.min(256), "{v:?}");
        assert_eq!(r.jobs[0].dirs[0].ios, 0, "the read-back is not counted");
        assert!(r.passed() && !r.interrupted);
    }

    #[test]
    fn runtime_zero_is_no_limit() {
        let mut engine = mem(64, 1, 2);
        engine.set_latency(Duration::from_millis(1), Duration::ZERO);
        let jobs = vec![Job::new(
            spec(RwMode::RandRead, 0, 64, 64, 2),
            Box::new(engine),
        )];
        let o = RunOptions {
            runtime: Duration::ZERO,
            ..opts(VerifyMode::None)
        };
        let r = run(jobs, &o);
        assert_eq!(r.jobs[0].dirs[0].ios, 64);
        assert!(r.jobs[0].error.is_none());
    }

    #[test]
    fn verify_phase_adds_no_bandwidth_samples() {
        // 16 fast writes (16 ms, inside the first 500 ms sample window), then a
        // read-back of 16 slow reads (1.6 s: three windows). Those windows hold no
        // workload I/O and must add no sample (they would read 0 KiB/s).
        let mut engine = mem(16, 1, 1);
        engine.set_latency(Duration::from_millis(100), Duration::from_millis(1));
        let jobs = vec![Job::new(
            spec(RwMode::Write, 0, 16, 16, 1),
            Box::new(engine),
        )];
        let r = run(jobs, &opts(VerifyMode::Crc32c));
        assert_eq!(r.verify.unwrap().verified, 16);
        let w = &r.jobs[0].dirs[1];
        assert_eq!(w.ios, 16);
        assert_eq!(w.bw_kib_samples.count(), 0, "{:?}", w.bw_kib_samples);
        assert_eq!(w.iops_samples.count(), 0, "{:?}", w.iops_samples);
        assert_eq!(r.jobs[0].dirs[0].bw_kib_samples.count(), 0);
        assert!(r.jobs[0].runtime_ms < 500, "{} ms", r.jobs[0].runtime_ms);
    }

    #[test]
    fn progress_is_reported_while_jobs_run() {
        let mut engine = mem(32, 1, 1);
        engine.set_latency(Duration::from_millis(2), Duration::from_millis(2));
        let mut jobs = vec![Job::new(
            spec(RwMode::Write, 0, 32, 32, 1),
            Box::new(engine),
        )];
        let mut seen: Vec<Progress> = Vec::new();
        let mut hook = |p: &Progress| seen.push(p.clone());
        let r = run_with(
            &mut jobs,
            &opts(VerifyMode::Crc32c),
            RunControl {
                progress: Some(&mut hook),
                progress_interval: Duration::from_millis(10),
                ..RunControl::default()
            },
        );
        assert!(r.passed());
        assert!(seen.len() >= 2, "{} progress reports", seen.len());
        assert!(seen.iter().any(|p| p.jobs[0].phase == JobPhase::Running));
        assert!(seen.iter().any(|p| p.jobs[0].phase == JobPhase::Verifying));
        let last = seen.last().unwrap();
        assert!(last.jobs[0].bytes[1] > 0 && last.elapsed > Duration::ZERO);
        assert_eq!(last.jobs[0].total_bytes, 2 * 32 * 4096);
    }

    /// An engine whose completions show up only every third poll, and which records
    /// its idle calls (and whether its previous poll found nothing).
    struct Sluggish {
        inner: MemEngine,
        held: Vec<IoCompletion>,
        polls: usize,
        last_poll_empty: bool,
        idles: std::sync::Arc<std::sync::atomic::AtomicUsize>,
        idle_after_progress: std::sync::Arc<AtomicBool>,
    }

    impl IoEngine for Sluggish {
        fn max_outstanding(&self) -> usize {
            self.inner.max_outstanding()
        }
        fn submit(&mut self, tag: u32, req: &IoRequest) -> Result<(), EngineError> {
            self.inner.submit(tag, req)
        }
        fn poll(&mut self, out: &mut Vec<IoCompletion>) -> Result<(), EngineError> {
            self.inner.poll(&mut self.held)?;
            self.polls += 1;
            let release = self.polls.is_multiple_of(3);
            self.last_poll_empty = !release || self.held.is_empty();
            if release {
                out.append(&mut self.held);
            }
            Ok(())
        }
        fn buffer(&mut self, tag: u32) -> &mut [u8] {
            self.inner.buffer(tag)
        }
        fn idle(&mut self, _timeout: Duration) {
            self.idles.fetch_add(1, Ordering::Relaxed);
            if !self.last_poll_empty {
                self.idle_after_progress.store(true, Ordering::Relaxed);
            }
        }
    }

    #[test]
    fn an_engine_idles_only_after_a_round_without_progress() {
        let idles = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let after_progress = std::sync::Arc::new(AtomicBool::new(false));
        let engine = Sluggish {
            inner: mem(32, 1, 4),
            held: Vec::new(),
            polls: 0,
            last_poll_empty: true,
            idles: idles.clone(),
            idle_after_progress: after_progress.clone(),
        };
        let jobs = vec![Job::new(
            spec(RwMode::RandRw, 0, 32, 64, 4),
            Box::new(engine),
        )];
        let r = run(jobs, &opts(VerifyMode::Crc32c));
        assert!(r.jobs[0].error.is_none(), "{:?}", r.jobs[0].error);
        assert_eq!(r.jobs[0].dirs[0].ios + r.jobs[0].dirs[1].ios, 64);
        assert!(idles.load(Ordering::Relaxed) > 0, "never idled");
        assert!(
            !after_progress.load(Ordering::Relaxed),
            "idled right after a poll that completed I/Os"
        );
    }
}
