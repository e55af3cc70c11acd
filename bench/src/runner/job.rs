//! One job on its own thread, as fio's `thread_main`: pin the thread, then loop
//! without sleeping while there is work: top the job up to its iodepth (paced by
//! `rate`, `thinktime` and the flushes of `fsync`), poll its engine (one I/O queue),
//! account every completion, close sample windows; end with fio's phases: the
//! workload, `end_fsync`, the verify read-back, then the drain.
//!
//! Timing (fio's `slat`, `clat`, `lat`): the submission latency is the submit call
//! (the capsule SEND posted), the completion latency from its return to the poll that
//! returned the completion, the total their sum. I/Os submitted during the ramp are
//! executed but not counted. The workload's run time is from the end of the ramp to
//! the end of the workload (its I/Os drained), for each direction that moved data;
//! the verify read-back's time is added to the reads', whose statistics include the
//! read-back I/Os (fio counts them the same way).
//!
//! A failed I/O, a verification mismatch or an engine failure stops the job with
//! fio's error (`err=`) and its line on standard error (`fio: io_u error on file ...`).
//! A stop request (Ctrl-C) ends every phase and waits at most `stop_grace` for the
//! I/Os in flight, which a dead target never completes.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::pace::Pace;
pub use super::shared::JobShared;
use super::thread::{gettid, pin_to, ThreadUsage};
use super::track::{Timeline, Unchecked};
use super::{Job, IDLE_WAIT};
use crate::engine::{IoCompletion, IoEngine};
use crate::histogram::PlatHistogram;
use crate::iolog::JobLogs;
use crate::jobspec::{JobSpec, RunOptions};
use crate::options::VerifyMode;
use crate::progress::JobPhase;
use crate::result::{
    strerror, JobError, JobResult, SyncStats, ERRNO_EILSEQ, ERRNO_EINVAL, ERRNO_EIO,
    ERRNO_ETIMEDOUT,
};
use crate::stats::{
    batch_bucket, depth_bucket, fio_lat_bucket, DepthStats, DirStats, Sampler, DDIR_COUNT,
    FIO_LAT_BUCKETS, SAMPLE_INTERVAL_MS,
};
use crate::verify::{fill_block_mode, ReadCheck, VerifyTracker};
use crate::workload::{IoOp, IoRequest, Workload};

/// The longest a job sleeps at once while it waits for a pacing deadline, so it still
/// sees stop requests.
const PACE_SLEEP_MAX: Duration = Duration::from_millis(10);

/// What a job thread needs besides its job.
pub struct JobContext<'a> {
    /// Once true, the job stops (Ctrl-C).
    pub stop: Option<&'a AtomicBool>,
    /// The run's verification record (jobs that verify).
    pub tracker: Option<&'a Mutex<VerifyTracker>>,
    /// Run-wide settings.
    pub opts: &'a RunOptions,
    /// Shared with the watching thread.
    pub shared: &'a JobShared,
    /// When the run started (timeline windows, elapsed).
    pub run_start: Instant,
    /// How fio's error lines name the namespace (`on file ...`).
    pub file_name: &'a str,
}

/// How a job ended, besides its statistics.
pub struct JobOutcome {
    /// The statistics.
    pub result: JobResult,
    /// A stop request ended its read-back (final or backlog) before it was done.
    pub read_back_cut: bool,
}

#[derive(Debug, Clone, Copy)]
enum SlotVerify {
    None,
    Write(u64),
    Read(ReadCheck),
    Trim,
}

#[derive(Debug, Clone, Copy)]
struct Slot {
    req: IoRequest,
    issued: Instant,
    slat_ns: u64,
    /// Counted in the statistics (after the ramp; not the end_fsync flush).
    measured: bool,
    verify: SlotVerify,
}

/// Where a job is in its life.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Phase {
    /// Issuing the workload.
    Workload,
    /// `verify_backlog`: reading back the last blocks written, then the workload again.
    Backlog { list: Vec<u64>, next: usize },
    /// Workload issued: wait for it, then flush once (`end_fsync`).
    EndFsync { issued: bool },
    /// Workload issued: waiting for its I/Os before reading back.
    DrainBeforeVerify,
    /// fio's verify phase: reading back the blocks this job wrote.
    Verify { list: Vec<u64>, next: usize },
}

/// `thinktime`: completions since the last pause, and the pause.
#[derive(Debug, Default)]
struct Think {
    completed: u32,
    pending: bool,
    until: Option<Instant>,
}

fn describe(req: &IoRequest) -> String {
    if req.op == IoOp::Flush {
        return "flush".into();
    }
    format!(
        "{} at offset {} length {}",
        req.op.fio_name(),
        req.offset,
        req.len
    )
}

fn ns_between(a: Instant, b: Instant) -> u64 {
    u64::try_from(b.saturating_duration_since(a).as_nanos()).unwrap_or(u64::MAX)
}

fn ceil_ms(d: Duration) -> u64 {
    u64::try_from(d.as_micros().div_ceil(1000)).unwrap_or(u64::MAX)
}

struct JobState<'c> {
    ctx: &'c JobContext<'c>,
    spec: JobSpec,
    workload: Workload,
    phase: Phase,
    depth: usize,
    free_tags: Vec<u32>,
    slots: Vec<Option<Slot>>,
    outstanding: usize,
    retry: Option<IoRequest>,
    stop_at: Option<Instant>,
    by_signal: bool,
    read_back_cut: bool,
    done: bool,
    epoch: Instant,
    measure_from: Instant,
    measuring: bool,
    workload_end: Option<Instant>,
    workload_bytes: [u64; DDIR_COUNT],
    verify_start: Option<Instant>,
    end: Option<Instant>,
    error: Option<JobError>,
    dirs: [DirStats; DDIR_COUNT],
    sync: SyncStats,
    depth_stats: DepthStats,
    lat_buckets: [u64; FIO_LAT_BUCKETS],
    sampler: Sampler,
    all_bytes: [u64; DDIR_COUNT],
    all_ios: [u64; DDIR_COUNT],
    verifying: bool,
    read_back: bool,
    unchecked: Unchecked,
    backlog: Vec<u64>,
    writes_since_flush: u32,
    flush_due: bool,
    think: Think,
    pace: Pace,
    logs: JobLogs,
    timeline: Option<Timeline>,
    tid: i32,
    usage_start: ThreadUsage,
    snapshot_served: u64,
    comps: Vec<IoCompletion>,
}

/// Runs `job` on the calling thread (a job thread) to its end; see the module docs.
pub fn run_job(job: &mut Job<'_>, ctx: &JobContext<'_>) -> JobOutcome {
    let Job { spec, engine } = job;
    let tid = gettid();
    let mut setup_error = None;
    if let Some(cpus) = &spec.cpus {
        if let Err(e) = pin_to(cpus) {
            eprintln!(
                "fio: pid={tid}, cannot pin job {} to CPUs {cpus:?}: {e}",
                spec.name
            );
            setup_error = Some(JobError::new(
                e.raw_os_error().unwrap_or(ERRNO_EINVAL),
                "cpu_set_affinity",
                format!("CPUs {cpus:?}: {e}"),
            ));
        }
    }
    let logs = match JobLogs::create(&spec.logs, spec.thread_number) {
        Ok(l) => l,
        Err(m) => {
            eprintln!("fio: {m}");
            setup_error.get_or_insert(JobError::new(ERRNO_EINVAL, "setup_log", m));
            JobLogs::default()
        }
    };
    let epoch = Instant::now();
    let mut st = JobState::new(
        ctx,
        spec.clone(),
        engine.max_outstanding(),
        tid,
        epoch,
        logs,
    );
    if let Some(e) = setup_error {
        st.error = Some(e);
        st.stop(epoch);
    }
    st.ctx.shared.set_phase(if spec.ramp_time.is_zero() {
        JobPhase::Running
    } else {
        JobPhase::Ramp
    });
    st.run(engine.as_mut());
    let now = Instant::now();
    let result = st.result(now);
    let time_ms = now.saturating_duration_since(st.epoch).as_millis() as u64;
    let log_errors = st.logs.finish(time_ms);
    for e in &log_errors {
        eprintln!("fio: {e}");
    }
    st.ctx.shared.set_phase(if result.error.is_some() {
        JobPhase::Failed
    } else if st.by_signal {
        JobPhase::Killed
    } else {
        JobPhase::Finished
    });
    {
        let mut s = ctx
            .shared
            .snapshot
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        *s = Some((u64::MAX, result.clone()));
    }
    JobOutcome {
        result,
        read_back_cut: st.read_back_cut,
    }
}

impl<'c> JobState<'c> {
    fn new(
        ctx: &'c JobContext<'c>,
        spec: JobSpec,
        max_outstanding: usize,
        tid: i32,
        epoch: Instant,
        logs: JobLogs,
    ) -> Self {
        let depth = (spec.iodepth as usize).min(max_outstanding);
        let verifying = spec.verify != VerifyMode::None && ctx.tracker.is_some();
        let sample_ms =
            if spec.logs.avg_msec > 0 && (spec.logs.bw.is_some() || spec.logs.iops.is_some()) {
                spec.logs.avg_msec
            } else {
                SAMPLE_INTERVAL_MS
            };
        let measure_from = epoch + spec.ramp_time;
        let mut st = JobState {
            ctx,
            workload: Workload::new(&spec),
            phase: Phase::Workload,
            depth,
            free_tags: (0..depth as u32).rev().collect(),
            slots: vec![None; depth],
            outstanding: 0,
            retry: None,
            stop_at: None,
            by_signal: false,
            read_back_cut: false,
            done: false,
            epoch,
            measure_from,
            measuring: false,
            workload_end: None,
            workload_bytes: [0; DDIR_COUNT],
            verify_start: None,
            end: None,
            error: None,
            dirs: Default::default(),
            sync: SyncStats::default(),
            depth_stats: DepthStats::default(),
            lat_buckets: [0; FIO_LAT_BUCKETS],
            sampler: Sampler::new(sample_ms),
            all_bytes: [0; DDIR_COUNT],
            all_ios: [0; DDIR_COUNT],
            verifying,
            read_back: verifying && spec.writes(),
            unchecked: Unchecked::new(
                spec.offset,
                spec.bs,
                if verifying { spec.blocks() } else { 0 },
            ),
            backlog: Vec::new(),
            writes_since_flush: 0,
            flush_due: false,
            think: Think::default(),
            pace: Pace::new(epoch, spec.rate, spec.rate_iops),
            logs,
            timeline: ctx.opts.timeline_ms.map(|w| Timeline {
                window_ms: w.max(1),
                run_start: ctx.run_start,
                current: None,
                ios: [0; DDIR_COUNT],
                hist: PlatHistogram::new(),
                max_ns: 0,
                out: Vec::new(),
            }),
            tid,
            usage_start: ThreadUsage::now(),
            snapshot_served: 0,
            comps: Vec::with_capacity(depth.max(1)),
            spec,
        };
        if depth == 0 {
            st.fail(
                JobError::new(
                    ERRNO_EIO,
                    "td_io_init",
                    "engine accepts no outstanding I/O (queue depth 0)".into(),
                ),
                epoch,
            );
        }
        st
    }

    fn run(&mut self, engine: &mut dyn IoEngine) {
        let deadline =
            (!self.spec.runtime.is_zero()).then(|| self.measure_from + self.spec.runtime);
        loop {
            let now = Instant::now();
            if !self.measuring && now >= self.measure_from {
                self.measuring = true;
                self.sampler.start(now, &self.dirs);
                self.ctx.shared.set_phase(JobPhase::Running);
            }
            if self.ctx.stop.is_some_and(|s| s.load(Ordering::Relaxed)) && !self.by_signal {
                self.by_signal = true;
                if self.stop_at.is_none() {
                    // A read-back in progress, or one that will now never run.
                    self.read_back_cut |=
                        self.read_back || matches!(self.phase, Phase::Backlog { .. });
                }
                self.stop(now);
            }
            if deadline.is_some_and(|d| now >= d)
                && self.phase == Phase::Workload
                && self.stop_at.is_none()
            {
                self.end_workload(now);
            }
            let before = self.outstanding;
            let mut submitted = 0;
            if self.stop_at.is_none() {
                submitted = self.fill(engine, now);
            }
            let completed = self.poll(engine);
            let busy = submitted > 0 || completed > 0 || self.outstanding != before;
            let now = Instant::now();
            if self.measuring {
                if let Some(samples) = self.sampler.tick(now, &mut self.dirs) {
                    let t = now.saturating_duration_since(self.epoch).as_millis() as u64;
                    for (d, s) in samples.iter().enumerate() {
                        if let Some((bw, io)) = *s {
                            self.logs.sampled(t, d, bw, io);
                        }
                    }
                }
            }
            self.serve_snapshot(now);
            self.check_done(now);
            if self.done {
                self.end = Some(now);
                return;
            }
            if !busy {
                self.wait(engine, now);
            }
        }
    }

    /// A round without progress: sleep on the engine's completions, or until the next
    /// pacing deadline when nothing is in flight.
    fn wait(&mut self, engine: &mut dyn IoEngine, now: Instant) {
        if self.outstanding > 0 {
            engine.idle(IDLE_WAIT);
            return;
        }
        let until = [
            self.think.until,
            self.retry.and_then(|r| self.pace.not_before(r.op, now)),
        ]
        .into_iter()
        .flatten()
        .min();
        if let Some(t) = until {
            let d = t.saturating_duration_since(now).min(PACE_SLEEP_MAX);
            if !d.is_zero() {
                std::thread::sleep(d);
            }
        }
    }

    fn serve_snapshot(&mut self, now: Instant) {
        let want = self.ctx.shared.snapshot_wanted.load(Ordering::Acquire);
        if want != self.snapshot_served {
            self.snapshot_served = want;
            let r = self.result(now);
            let mut s = self
                .ctx
                .shared
                .snapshot
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            *s = Some((want, r));
        }
    }

    /// Stops issuing; the job ends once its I/Os in flight are done (check_done), and
    /// a workload stopped so ends then too.
    fn stop(&mut self, now: Instant) {
        if self.stop_at.is_none() {
            self.stop_at = Some(now);
        }
    }

    fn fail(&mut self, e: JobError, now: Instant) {
        if self.error.is_none() {
            self.error = Some(e);
        }
        self.stop(now);
    }

    /// The workload is over (issued, or the runtime ended it): flush, read back what
    /// was written, or stop.
    fn end_workload(&mut self, now: Instant) {
        self.retry = None;
        self.flush_due = false;
        self.think = Think::default();
        if self.spec.end_fsync && self.spec.writes() {
            self.phase = Phase::EndFsync { issued: false };
        } else if self.read_back {
            self.phase = Phase::DrainBeforeVerify;
        } else {
            self.stop(now);
        }
    }

    fn mark_workload_end(&mut self, now: Instant) {
        if self.workload_end.is_none() {
            self.workload_end = Some(now);
            for d in 0..DDIR_COUNT {
                self.workload_bytes[d] = self.dirs[d].bytes;
            }
        }
    }

    fn tracker(&self) -> Option<std::sync::MutexGuard<'_, VerifyTracker>> {
        if !self.verifying {
            return None;
        }
        self.ctx
            .tracker
            .map(|t| t.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// The next read of a read-back list at `*next`, skipping blocks whose content is
    /// no longer known.
    fn next_read_back(&mut self, list: &[u64], next: &mut usize) -> Option<IoRequest> {
        let t = self.tracker()?;
        while *next < list.len() {
            let offset = list[*next];
            *next += 1;
            if t.read_started(offset).is_some() {
                return Some(IoRequest {
                    op: IoOp::Read,
                    offset,
                    len: self.spec.bs,
                });
            }
        }
        None
    }

    /// The next request of the current phase; `None` when the phase has nothing to
    /// issue now (the job stops once it has nothing left at all).
    fn next_request(&mut self, now: Instant) -> Option<IoRequest> {
        if let Some(r) = self.retry.take() {
            return Some(r);
        }
        loop {
            match std::mem::replace(&mut self.phase, Phase::Workload) {
                Phase::Workload => {
                    if self.flush_due {
                        if self.outstanding > 0 {
                            return None;
                        }
                        self.flush_due = false;
                        return Some(IoRequest {
                            op: IoOp::Flush,
                            offset: 0,
                            len: 0,
                        });
                    }
                    if self.spec.verify_backlog > 0
                        && self.backlog.len() as u64 >= self.spec.verify_backlog
                    {
                        if self.outstanding > 0 {
                            return None;
                        }
                        let mut list = std::mem::take(&mut self.backlog);
                        list.sort_unstable();
                        list.dedup();
                        self.phase = Phase::Backlog { list, next: 0 };
                        continue;
                    }
                    if self.think.pending || self.think.until.is_some_and(|t| now < t) {
                        return None;
                    }
                    self.think.until = None;
                    match self.workload.next_request() {
                        Some(r) => return Some(r),
                        None => {
                            self.end_workload(now);
                            if self.stop_at.is_some() {
                                return None;
                            }
                        }
                    }
                }
                Phase::Backlog { list, mut next } => {
                    let r = self.next_read_back(&list, &mut next);
                    if r.is_some() {
                        self.phase = Phase::Backlog { list, next };
                        return r;
                    }
                    if self.outstanding > 0 {
                        self.phase = Phase::Backlog { list, next };
                        return None;
                    }
                    // Read back: the workload goes on.
                }
                Phase::EndFsync { issued } => {
                    if self.outstanding > 0 {
                        self.phase = Phase::EndFsync { issued };
                        return None;
                    }
                    if !issued {
                        self.phase = Phase::EndFsync { issued: true };
                        return Some(IoRequest {
                            op: IoOp::Flush,
                            offset: 0,
                            len: 0,
                        });
                    }
                    if self.read_back {
                        self.phase = Phase::DrainBeforeVerify;
                    } else {
                        self.mark_workload_end(now);
                        self.stop(now);
                        return None;
                    }
                }
                Phase::DrainBeforeVerify => {
                    if self.outstanding > 0 {
                        self.phase = Phase::DrainBeforeVerify;
                        return None;
                    }
                    self.mark_workload_end(now);
                    self.verify_start = Some(now);
                    self.ctx.shared.set_phase(JobPhase::Verifying);
                    self.phase = Phase::Verify {
                        list: self.unchecked.offsets(),
                        next: 0,
                    };
                }
                Phase::Verify { list, mut next } => {
                    let r = self.next_read_back(&list, &mut next);
                    self.phase = Phase::Verify { list, next };
                    if r.is_none() {
                        self.stop(now);
                    }
                    return r;
                }
            }
        }
    }

    /// Submits until the job has `depth` I/Os outstanding, the engine is busy, pacing
    /// holds the next one, or the current phase has nothing more to issue. Returns how
    /// many it submitted.
    fn fill(&mut self, engine: &mut dyn IoEngine, now: Instant) -> usize {
        let mut n = 0;
        let mut measured_n = 0;
        while self.outstanding < self.depth && self.stop_at.is_none() {
            let Some(req) = self.next_request(now) else {
                break;
            };
            if self.pace.is_active() && self.pace.not_before(req.op, now).is_some() {
                self.retry = Some(req);
                break;
            }
            let Some(tag) = self.free_tags.pop() else {
                self.retry = Some(req);
                break;
            };
            let verify = self.prepare(engine, tag, &req, now);
            let Some(verify) = verify else {
                self.free_tags.push(tag);
                break;
            };
            let start = Instant::now();
            let r = engine.submit(tag, &req);
            let issued = Instant::now();
            match r {
                Ok(()) => {
                    let end_flush =
                        matches!(self.phase, Phase::EndFsync { .. }) && req.op == IoOp::Flush;
                    let measured = issued >= self.measure_from && !end_flush;
                    self.slots[tag as usize] = Some(Slot {
                        req,
                        issued,
                        slat_ns: ns_between(start, issued),
                        measured,
                        verify,
                    });
                    self.outstanding += 1;
                    self.pace.issued(req.op, req.len);
                    n += 1;
                    if measured {
                        measured_n += 1;
                        self.depth_stats.map[depth_bucket(self.outstanding)] += 1;
                        match req.op {
                            IoOp::Flush => self.sync.issued += 1,
                            op => self.dirs[op.index()].issued += 1,
                        }
                    }
                    if req.op == IoOp::Write && self.spec.fsync > 0 && self.phase == Phase::Workload
                    {
                        self.writes_since_flush += 1;
                        if self.writes_since_flush >= self.spec.fsync {
                            self.writes_since_flush = 0;
                            self.flush_due = true;
                        }
                    }
                }
                Err(e) => {
                    self.free_tags.push(tag);
                    self.unprepare(&req, verify);
                    if e.is_busy() {
                        self.retry = Some(req);
                    } else {
                        self.io_error(&req, &e.to_string(), "td_io_queue", now);
                    }
                    break;
                }
            }
        }
        if measured_n > 0 {
            self.depth_stats.submit[batch_bucket(measured_n)] += 1;
            self.depth_stats.total_submit += 1;
        }
        n
    }

    /// Verification bookkeeping and the buffer for `req` before its submission;
    /// `None` when the job failed instead.
    fn prepare(
        &mut self,
        engine: &mut dyn IoEngine,
        tag: u32,
        req: &IoRequest,
        now: Instant,
    ) -> Option<SlotVerify> {
        if !self.verifying {
            return Some(SlotVerify::None);
        }
        let mode = self.spec.verify;
        let pattern = self.spec.verify_pattern.clone();
        match req.op {
            IoOp::Write => {
                let generation = self.tracker()?.write_started(req.offset);
                match engine.buffer(tag).get_mut(..req.len as usize) {
                    Some(block) => {
                        fill_block_mode(block, req.offset, generation, mode, &pattern);
                        Some(SlotVerify::Write(generation))
                    }
                    None => {
                        if let Some(mut t) = self.tracker() {
                            t.write_finished_mode(req.offset, generation, false, mode);
                        }
                        self.fail(
                            JobError::new(
                                ERRNO_EIO,
                                "io_u error",
                                format!(
                                    "engine buffer of tag {tag} is shorter than bs {}",
                                    req.len
                                ),
                            ),
                            now,
                        );
                        None
                    }
                }
            }
            IoOp::Read => Some(
                self.tracker()?
                    .read_started(req.offset)
                    .map_or(SlotVerify::None, SlotVerify::Read),
            ),
            IoOp::Trim => {
                self.tracker()?.trim_started(req.offset);
                Some(SlotVerify::Trim)
            }
            IoOp::Flush => Some(SlotVerify::None),
        }
    }

    /// Undoes [`Self::prepare`] for a request that was not submitted.
    fn unprepare(&mut self, req: &IoRequest, verify: SlotVerify) {
        let mode = self.spec.verify;
        if let Some(mut t) = self.tracker() {
            match verify {
                SlotVerify::Write(g) => t.write_finished_mode(req.offset, g, false, mode),
                SlotVerify::Trim => t.trim_finished(req.offset),
                _ => {}
            }
        }
    }

    /// A failed I/O: fio's lines on standard error, and the job's error.
    fn io_error(&mut self, req: &IoRequest, detail: &str, func: &'static str, now: Instant) {
        eprintln!(
            "fio: io_u error on file {}: {}: {} offset={}, buflen={}",
            self.ctx.file_name,
            strerror(ERRNO_EIO),
            req.op.fio_name(),
            req.offset,
            req.len
        );
        eprintln!("fio: {detail}");
        self.fail(
            JobError::new(
                ERRNO_EIO,
                func,
                format!("{} failed: {detail}", describe(req)),
            ),
            now,
        );
    }

    /// Polls the engine once and accounts every completion; an engine failure then
    /// stops the job and abandons what is still outstanding. Returns how many I/Os
    /// completed.
    fn poll(&mut self, engine: &mut dyn IoEngine) -> usize {
        let mut comps = std::mem::take(&mut self.comps);
        comps.clear();
        let failure = engine.poll(&mut comps).err();
        let now = Instant::now();
        let completed = comps.len();
        let mut measured_n = 0;
        for c in comps.drain(..) {
            let Some(slot) = self.slots.get_mut(c.tag as usize).and_then(Option::take) else {
                self.fail(
                    JobError::new(
                        ERRNO_EIO,
                        "io_u error",
                        format!("engine completed tag {} that is not outstanding", c.tag),
                    ),
                    now,
                );
                continue;
            };
            self.outstanding -= 1;
            self.free_tags.push(c.tag);
            measured_n += usize::from(slot.measured);
            // The report quotes the host's error in words (fio's verror).
            self.complete(
                engine,
                slot,
                c.tag,
                c.result.map_err(|e| e.to_string()),
                now,
            );
        }
        self.comps = comps;
        if measured_n > 0 {
            self.depth_stats.complete[batch_bucket(measured_n)] += 1;
            self.depth_stats.total_complete += 1;
        }
        if completed > 0 {
            self.publish();
        }
        if let Some(e) = failure {
            // Nothing more will complete: abandon what is outstanding.
            let first = self.slots.iter().flatten().next().map(|s| s.req);
            let n = self.outstanding;
            let detail = format!("{e}; {n} I/Os in flight abandoned");
            match first {
                Some(req) => self.io_error(&req, &detail, "io_u error", now),
                None => {
                    eprintln!("fio: {detail}");
                    self.fail(
                        JobError::new(ERRNO_EIO, "io_u error", format!("engine poll failed: {e}")),
                        now,
                    );
                }
            }
            let abandoned: Vec<Slot> = self.slots.iter_mut().filter_map(Option::take).collect();
            for s in abandoned {
                self.unprepare(&s.req, s.verify);
            }
            self.free_tags = (0..self.depth as u32).rev().collect();
            self.outstanding = 0;
        }
        completed
    }

    fn complete(
        &mut self,
        engine: &mut dyn IoEngine,
        slot: Slot,
        tag: u32,
        result: Result<(), String>,
        now: Instant,
    ) {
        let req = slot.req;
        let ok = result.is_ok();
        let mode = self.spec.verify;
        match slot.verify {
            SlotVerify::Write(g) => {
                if let Some(mut t) = self.tracker() {
                    t.write_finished_mode(req.offset, g, ok, mode);
                }
                if ok {
                    self.unchecked.set(req.offset, true);
                    if self.spec.verify_backlog > 0 {
                        self.backlog.push(req.offset);
                    }
                }
            }
            SlotVerify::Trim => {
                if let Some(mut t) = self.tracker() {
                    t.trim_finished(req.offset);
                }
                self.unchecked.set(req.offset, false);
            }
            SlotVerify::Read(check) if ok => {
                let pattern = std::mem::take(&mut self.spec.verify_pattern);
                let verdict = {
                    let block = engine.buffer(tag).get(..req.len as usize).unwrap_or(&[]);
                    self.ctx.tracker.map(|t| {
                        t.lock()
                            .unwrap_or_else(|e| e.into_inner())
                            .read_finished_with(block, req.offset, check, &pattern)
                    })
                };
                self.spec.verify_pattern = pattern;
                match verdict {
                    Some(Ok(true)) => self.unchecked.set(req.offset, false),
                    Some(Err(e)) => {
                        eprintln!("{e}");
                        self.fail(
                            JobError::new(ERRNO_EILSEQ, "io_u_queued_complete", e.to_string()),
                            now,
                        );
                    }
                    _ => {}
                }
            }
            _ => {}
        }
        if let Err(msg) = result {
            self.io_error(&req, &msg, "io_u error", now);
            return;
        }
        let clat = ns_between(slot.issued, now);
        if req.op == IoOp::Flush {
            if slot.measured {
                self.sync.lat.record(clat);
            }
            return;
        }
        let d = req.op.index();
        let bytes = u64::from(req.len);
        self.all_bytes[d] += bytes;
        self.all_ios[d] += 1;
        if slot.measured {
            self.dirs[d].record(bytes, slot.slat_ns, clat);
            self.lat_buckets[fio_lat_bucket(clat)] += 1;
            let t = now.saturating_duration_since(self.epoch).as_millis() as u64;
            self.logs.completed(t, d, bytes, slot.slat_ns, clat);
            if let Some(tl) = self.timeline.as_mut() {
                tl.add(now, d, clat);
            }
        }
        if self.phase == Phase::Workload && self.spec.thinktime > Duration::ZERO {
            self.think.completed += 1;
            if self.think.completed >= self.spec.thinktime_blocks {
                self.think.completed = 0;
                self.think.pending = true;
            }
        }
        if self.think.pending && self.outstanding == 0 {
            self.think.pending = false;
            self.think.until = Some(now + self.spec.thinktime);
        }
    }

    fn publish(&self) {
        for d in 0..DDIR_COUNT {
            self.ctx.shared.bytes[d].store(self.all_bytes[d], Ordering::Relaxed);
            self.ctx.shared.ios[d].store(self.all_ios[d], Ordering::Relaxed);
        }
    }

    fn check_done(&mut self, now: Instant) {
        if self.think.pending && self.outstanding == 0 {
            self.think.pending = false;
            self.think.until = Some(now + self.spec.thinktime);
        }
        let Some(stop_at) = self.stop_at else {
            return;
        };
        let waited = now.saturating_duration_since(stop_at);
        if self.outstanding == 0 {
            self.done = true;
        } else if self.by_signal && waited > self.ctx.opts.stop_grace {
            // A stop request: the I/Os in flight are abandoned (a dead target never
            // answers them).
            self.done = true;
        } else if waited > self.ctx.opts.drain_timeout {
            let n = self.outstanding;
            let t = self.ctx.opts.drain_timeout;
            eprintln!(
                "fio: job {}: {n} I/Os still outstanding {t:?} after it stopped",
                self.spec.name
            );
            self.fail(
                JobError::new(
                    ERRNO_ETIMEDOUT,
                    "io_u_queued_complete",
                    format!("{n} I/Os still outstanding {t:?} after the job stopped"),
                ),
                now,
            );
            self.done = true;
        }
        if self.done {
            self.mark_workload_end(now);
            self.publish();
            if let Some(tl) = self.timeline.as_mut() {
                tl.flush();
            }
        }
    }

    /// The job's statistics as of `now` (a snapshot while it runs, or its result).
    fn result(&self, now: Instant) -> JobResult {
        let end = self.end.unwrap_or(now);
        let workload_end = self.workload_end.unwrap_or(end);
        let workload = workload_end.saturating_duration_since(self.measure_from);
        let workload_ms = if workload_end > self.measure_from {
            ceil_ms(workload)
        } else {
            0
        };
        let mut runtime_ms = [0; DDIR_COUNT];
        for (d, ms) in runtime_ms.iter_mut().enumerate() {
            let bytes = if self.workload_end.is_some() {
                self.workload_bytes[d]
            } else {
                self.dirs[d].bytes
            };
            if bytes > 0 {
                *ms = workload_ms.max(1);
            }
        }
        if let Some(v) = self.verify_start {
            // fio adds the read-back's time to the reads' and rounds the sum up once.
            let read_workload = if runtime_ms[0] > 0 {
                workload
            } else {
                Duration::ZERO
            };
            runtime_ms[0] = ceil_ms(read_workload + end.saturating_duration_since(v)).max(1);
        }
        let mut timeline = self
            .timeline
            .as_ref()
            .map(|t| t.out.clone())
            .unwrap_or_default();
        if self.end.is_none() {
            timeline.clear();
        }
        JobResult {
            spec: self.spec.clone(),
            members: 1,
            tid: self.tid,
            dirs: self.dirs.clone(),
            sync: self.sync.clone(),
            runtime_ms,
            total_run_time_ms: ceil_ms(now.saturating_duration_since(self.epoch)),
            elapsed: end.saturating_duration_since(self.ctx.run_start),
            error: self.error.clone(),
            depth: self.depth_stats,
            lat_buckets: self.lat_buckets,
            cpu: self.usage_start.until(&ThreadUsage::now()),
            timeline,
        }
    }
}
