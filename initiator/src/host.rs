//! The public async API: [`Host`] and [`Namespace`], zero-copy and tokio-native.
//!
//! **Buffers.** Callers take registered buffers from the host's pool
//! ([`Host::alloc`], an owned [`IoBuf`]; it waits while the pool is full) and read into
//! or write from them with no copy ([`Namespace::read_buf`], [`Namespace::write_buf`],
//! [`Namespace::passthrough`]): the buffer goes to the command and comes back with its
//! result, also on error ([`BufError`]). [`Namespace::read`] and [`Namespace::write`]
//! take plain slices and copy through a pool buffer (counted in
//! [`Host::bytes_copied`]).
//!
//! **Queues.** Every I/O queue is shared by the tasks that use it: a command takes one
//! of the queue's credits (`max_outstanding`; a caller waits for one: bounded
//! submission with back-pressure), goes into the queue's submission list, and every
//! command found there is posted in one go by whoever holds the queue next (the
//! submitting task itself, at once, when nobody else does: submissions batch without a
//! thread in between). A [`Namespace`] spreads its commands over the I/O queues round
//! robin, or sticks to one ([`Namespace::on_queue`]), e.g. one per core of the caller.
//!
//! **Completions** ([`Completions`], [`HostOptions::completions`]):
//! - [`Completions::PollThread`]: `poll_threads` threads poll the queues (queue `i` on
//!   thread `i % poll_threads`), busy while commands are outstanding, asleep otherwise,
//!   and wake each waiting task directly (its `Waker`: no channel, no message);
//! - [`Completions::Runtime`]: the tasks that await commands poll their queue
//!   themselves from the runtime (a task whose command is not done yields and polls
//!   again), and a 10 ms tick of a background task keeps idle queues' transports going.
//!
//! A command whose future is dropped (a per-call timeout: [`Namespace::with_timeout`],
//! or the caller gave up) is abandoned, not cancelled: it stays on the wire, its
//! buffer goes back to the pool when the controller completes it or the queue fails
//! (Abort is not sent). Admin commands (Identify, Get Log Page, Get/Set Features,
//! [`Host::admin_passthrough`]) run on the admin queue of the Keep Alive thread
//! ([`AdminKeeper`]), on tokio's blocking pool.
//!
//! **Reconnect: what a caller sees** ([`crate::lifecycle`], driven by the
//! [`crate::keeper::AdminKeeper`] thread; options in [`HostOptions`]):
//! - The controller is lost when a Keep Alive fails or takes longer than KATO, a
//!   queue's QP fails (`IBV_WC_RETRY_EXC_ERR` when the target is gone), the target
//!   disconnects a queue, or a command times out and Abort does not help. The host
//!   then tears every queue down, waits `reconnect_delay` (none after a timeout's
//!   reset) and connects again: admin queue, Fabrics Connect with the same host NQN
//!   and host ID (a new controller ID), CC.EN, the same number of I/O queues.
//! - Meanwhile I/O is **held**: calls do not fail, they take longer. A command that was
//!   on the wire when the path failed comes back from the torn-down queue with its
//!   buffer and is posted again on the new queue: a read or write with the same SLBA,
//!   NLB and buffer (the caller's data, which the call still holds), a flush, write
//!   zeroes or deallocate as it was. Reissuing these is what NVMe allows: the command
//!   either never ran or ran with the same effect; the controller's completion of the
//!   first copy, if it ran, is lost with the old queue, so one acknowledgement comes
//!   per call. A command is reissued at most [`crate::lifecycle::MAX_RETRIES`] times.
//!   A caller's [`Namespace::passthrough`] is not reissued (the library cannot tell
//!   whether running it twice is harmless): it fails with the path error.
//! - `fast_io_fail_tmo` (off by default): once it has passed in the reconnecting
//!   state, held I/O fails with [`HostError::FailFast`], and new I/O fails at once,
//!   until the controller is live again.
//! - `ctrl_loss_tmo` (600 s): once it has passed, the controller is given up (DEAD):
//!   held and later calls fail with [`HostError::ControllerDead`], whose message names
//!   the loss and the last attempt's error. [`Host::disconnect`] still returns.
//! - Admin calls ([`Host::identify_controller`], ...) fail with
//!   [`HostError::Reconnecting`] while the controller reconnects; they are not held.
//! - `io_timeout` (30 s): an I/O command outstanding that long is aborted (Abort,
//!   NVMe Base 2.x §5.1); where the controller does not abort it (our target and
//!   Linux nvmet never do) or the Abort fails, the controller is reset (CC.EN 0,
//!   teardown, reconnect at once) and the command reissued; an aborted command
//!   (Command Abort Requested, no DNR) is reissued too.
//! - [`Host::state`], [`Host::reconnects`], [`Host::reissued`] and [`Host::resets`]
//!   say what happened; the keeper logs each step (`tracing`, with the state).
//!
//! With `ctrl_loss_tmo` `Some(0)` the host does not reconnect: the first loss makes the
//! controller DEAD.
use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam::queue::ArrayQueue;
use nvme::{Cqe, DsmRange, Sqe};
use parking_lot::{Mutex, MutexGuard};
use tokio::sync::Semaphore;
use transport::soft::SoftProvider;
use transport::verbs::{Device, Provider};
use zerocopy::IntoBytes;

use crate::aen::{AsyncEvents, ControllerEvent};
use crate::capsule::DataDir;
use crate::error::{HostError, QueueError};
use crate::health::{ControllerHealth, TimedOut};
use crate::identify::ControllerInfo;
use crate::lifecycle::{CtrlState, IoDisposition};
use crate::options::{Completions, HostOptions};
use crate::pool::{BufferPool, IoBuf};
use crate::queue::{NvmeRdmaQueue, QueueCompletion, SubmitError};
use crate::split;
use crate::sync_host::{AdminKeeper, SyncHost};

mod recovery;

/// Longest sleep of an idle poll thread (or the runtime's tick) between rounds of its
/// queues' transports.
pub const IDLE_WAIT: Duration = Duration::from_millis(10);

/// A command that failed, with the buffer it carried handed back (`None` when the
/// command had none, or was abandoned: a timed-out command keeps its buffer until the
/// controller completes it).
#[derive(Debug, thiserror::Error)]
#[error("{error}")]
pub struct BufError {
    /// Why.
    pub error: HostError,
    /// The buffer.
    pub buf: Option<IoBuf>,
}

impl From<BufError> for HostError {
    fn from(e: BufError) -> Self {
        e.error
    }
}

impl BufError {
    fn plain(error: HostError) -> Self {
        BufError { error, buf: None }
    }
}

/// A command's result as a caller gets it: its CQE and its buffer.
type CmdResult = Result<(Cqe, Option<IoBuf>), BufError>;

/// Where one command is: the record a future and the queue share.
enum RecState {
    Free,
    /// Submitted or waiting to be; the waker of the task that awaits it.
    Waiting(Option<Waker>),
    Done(CmdResult),
    /// Its future was dropped: the record is freed when the command completes.
    Abandoned,
}

/// A command waiting for its queue (or, in `by_cid`, outstanding on it: then without
/// its buffer, which the queue holds).
struct PendingCmd {
    rec: u16,
    sqe: Sqe,
    data: DataDir,
    buf: Option<IoBuf>,
    /// Whether the command may be reissued after a path error (the library's own
    /// reads, writes, flushes, write zeroes and deallocates: same LBAs, same data; not
    /// a caller's passthrough, as Linux fails those: `REQ_FAILFAST_DRIVER`).
    reissue: bool,
    /// Times it was reissued.
    retries: u8,
    /// When it was posted (with an `io_timeout`), or when its Abort was asked for.
    posted_at: Option<Instant>,
    /// An Abort was asked for after `io_timeout`.
    abort_asked: bool,
}

/// The part of a queue that its lock guards.
struct QueueState<P: Provider> {
    /// `None` while the controller reconnects (torn down) or after disconnect.
    queue: Option<NvmeRdmaQueue<P>>,
    /// The command outstanding on each CID (its buffer is the queue's meanwhile).
    by_cid: Vec<Option<PendingCmd>>,
    /// Commands to post, in order: held ones (to reissue) first.
    pending: VecDeque<PendingCmd>,
    done: Vec<QueueCompletion>,
    /// Wakers to call once the lock is released.
    wake: Vec<Waker>,
    /// Drive rounds, for the `io_timeout` check every [`TIMEOUT_CHECK_ROUNDS`].
    rounds: u32,
}

/// Rounds of [`IoQueue::drive`] between two looks for commands past `io_timeout`.
const TIMEOUT_CHECK_ROUNDS: u32 = 256;

/// One queue of the async host: see the module docs.
struct IoQueue<P: Provider> {
    qid: u16,
    state: Mutex<QueueState<P>>,
    credits: Semaphore,
    records: Box<[Mutex<RecState>]>,
    free: ArrayQueue<u16>,
    /// The poll thread sleeps (thread mode) and must be woken for new work.
    sleeping: AtomicBool,
    poller: std::sync::OnceLock<std::thread::Thread>,
    runtime_polled: bool,
    health: ControllerHealth,
    /// Commands that fail with a path error are held and reissued (the host
    /// reconnects: `ctrl_loss_tmo` is not 0).
    recovers: bool,
    /// Commands reissued after a path error.
    reissued: AtomicU64,
    /// How long a command may be outstanding before it is aborted (then the
    /// controller reset); `None`: forever.
    io_timeout: Option<Duration>,
}

impl<P: Provider> IoQueue<P> {
    fn new(
        queue: NvmeRdmaQueue<P>,
        runtime_polled: bool,
        health: ControllerHealth,
        recovers: bool,
        io_timeout: Option<Duration>,
    ) -> Self {
        let n = queue.max_outstanding().max(1);
        let depth = usize::from(queue.depth());
        let free = ArrayQueue::new(n);
        for i in 0..n {
            let _ = free.push(i as u16);
        }
        IoQueue {
            qid: queue.qid(),
            state: Mutex::new(QueueState {
                queue: Some(queue),
                by_cid: (0..depth).map(|_| None).collect(),
                pending: VecDeque::with_capacity(n),
                done: Vec::with_capacity(depth),
                wake: Vec::with_capacity(n),
                rounds: 0,
            }),
            credits: Semaphore::new(n),
            records: (0..n).map(|_| Mutex::new(RecState::Free)).collect(),
            free,
            sleeping: AtomicBool::new(false),
            poller: std::sync::OnceLock::new(),
            runtime_polled,
            health,
            recovers,
            reissued: AtomicU64::new(0),
            io_timeout,
        }
    }

    /// Gives record `rec` and its credit back.
    fn release(&self, rec: u16) {
        let _ = self.free.push(rec);
        self.credits.add_permits(1);
    }

    /// Completes record `rec` with `r` (its waker goes to `wake`), or frees it when
    /// abandoned.
    fn finish(&self, rec: u16, r: CmdResult, wake: &mut Vec<Waker>) {
        let mut st = self.records[usize::from(rec)].lock();
        match std::mem::replace(&mut *st, RecState::Free) {
            RecState::Waiting(w) => {
                *st = RecState::Done(r);
                wake.extend(w);
            }
            _ => {
                drop(st);
                drop(r);
                self.release(rec);
            }
        }
    }

    /// Whether record `rec`'s future was dropped (then frees it).
    fn take_abandoned(&self, rec: u16) -> bool {
        let mut st = self.records[usize::from(rec)].lock();
        if matches!(*st, RecState::Abandoned) {
            *st = RecState::Free;
            drop(st);
            self.release(rec);
            return true;
        }
        false
    }

    /// The error of an I/O command that cannot wait (failfast, deleted, dead,
    /// disconnected).
    fn unavailable(&self) -> HostError {
        crate::lifecycle::unavailable_error(self.health.state(), self.health.reason())
    }

    /// Hands the queue's completions to their records; a command that failed with a
    /// path error while the host reconnects (`path_error`: the queue died, or was torn
    /// down) goes back to the front of `pending` to be reissued, unless it may not be
    /// (see [`PendingCmd::reissue`]) or was reissued [`crate::lifecycle::MAX_RETRIES`] times already.
    fn dispatch(&self, st: &mut QueueState<P>, path_error: bool) {
        let QueueState {
            by_cid,
            pending,
            done,
            wake,
            ..
        } = st;
        let disposition = self.health.io_disposition();
        for c in done.drain(..) {
            let Some(mut cmd) = by_cid.get_mut(usize::from(c.cid)).and_then(Option::take) else {
                continue;
            };
            if crate::lifecycle::may_reissue(
                &c.result,
                path_error,
                self.recovers,
                disposition,
                cmd.reissue,
                cmd.retries,
            ) {
                cmd.retries += 1;
                cmd.posted_at = None;
                cmd.abort_asked = false;
                cmd.buf = c.buf;
                self.reissued.fetch_add(1, Ordering::Relaxed);
                pending.push_front(cmd);
                continue;
            }
            let r = match c.result {
                Ok(cqe) => Ok((cqe, c.buf)),
                Err(error) => Err(BufError { error, buf: c.buf }),
            };
            self.finish(cmd.rec, r, wake);
        }
    }

    /// Looks for commands outstanding past `timeout`: the first time, the keeper is
    /// asked to Abort one (and the clock starts again); the second time (aborted but
    /// still not completed), the controller is reset through a reported error. Either
    /// way the command is reissued on the new queues if it may be.
    fn check_timeouts(&self, st: &mut QueueState<P>, timeout: Duration) {
        let now = Instant::now();
        for (cid, slot) in st.by_cid.iter_mut().enumerate() {
            let Some(p) = slot.as_mut() else { continue };
            let Some(at) = p.posted_at else { continue };
            if now.saturating_duration_since(at) < timeout {
                continue;
            }
            let what = format!(
                "{} (CID {cid}) on queue {}",
                crate::queue::command_name(self.qid, p.sqe.opcode(), p.sqe.fctype()),
                self.qid
            );
            if p.abort_asked {
                p.posted_at = None;
                self.health.report_error(format!(
                    "{what} was aborted after io_timeout ({} ms) but did not complete",
                    timeout.as_millis()
                ));
            } else {
                p.abort_asked = true;
                p.posted_at = Some(now);
                tracing::warn!(
                    qid = self.qid,
                    cid,
                    io_timeout_ms = timeout.as_millis() as u64,
                    "{what} timed out: asking for an Abort"
                );
                self.health.request_abort(TimedOut {
                    qid: self.qid,
                    cid: cid as u16,
                    what,
                });
            }
        }
    }

    /// Fails every command in `pending` with `error`.
    fn fail_pending(&self, st: &mut QueueState<P>, error: &HostError) {
        while let Some(p) = st.pending.pop_front() {
            if self.take_abandoned(p.rec) {
                continue;
            }
            let e = BufError {
                error: error.clone(),
                buf: p.buf,
            };
            self.finish(p.rec, Err(e), &mut st.wake);
        }
    }

    /// Whether the queue has work a poll can advance: commands outstanding, or
    /// commands to post while the controller is live.
    fn has_work(&self, st: &QueueState<P>) -> bool {
        st.queue.as_ref().is_some_and(|q| q.outstanding() > 0)
            || (!st.pending.is_empty() && self.health.io_disposition() == IoDisposition::Submit)
    }

    /// One round with the lock held: the queue's completions dispatched, the waiting
    /// commands posted (while the controller is live; held while it reconnects; failed
    /// once it cannot wait). Returns [`IoQueue::has_work`].
    fn drive(&self, st: &mut QueueState<P>) -> bool {
        let disposition = self.health.io_disposition();
        if disposition == IoDisposition::Fail && !st.pending.is_empty() {
            let e = self.unavailable();
            self.fail_pending(st, &e);
        }
        let Some(q) = st.queue.as_mut() else {
            return false;
        };
        q.poll(&mut st.done);
        let dead = q.dead_reason().map(str::to_string);
        if !st.done.is_empty() {
            self.dispatch(st, dead.is_some());
        }
        if let Some(r) = dead {
            // The keeper tears this queue down and reconnects (or gives up).
            self.health.report_error(format!("queue {}: {r}", self.qid));
            return false;
        }
        if let Some(t) = self.io_timeout {
            st.rounds = st.rounds.wrapping_add(1);
            if st.rounds.is_multiple_of(TIMEOUT_CHECK_ROUNDS) {
                self.check_timeouts(st, t);
            }
        }
        if disposition != IoDisposition::Submit {
            return self.has_work(st);
        }
        let now = self.io_timeout.map(|_| Instant::now());
        let QueueState {
            queue,
            by_cid,
            pending,
            wake,
            ..
        } = st;
        let Some(q) = queue.as_mut() else {
            return false;
        };
        while let Some(mut p) = pending.pop_front() {
            if self.take_abandoned(p.rec) {
                continue;
            }
            match q.submit(p.sqe, p.data, p.buf.take()) {
                Ok(cid) => {
                    p.posted_at = now;
                    by_cid[usize::from(cid)] = Some(p);
                }
                Err(SubmitError {
                    error: QueueError::Full,
                    buf,
                }) => {
                    p.buf = buf;
                    pending.push_front(p);
                    break;
                }
                Err(SubmitError {
                    error: error @ QueueError::Dead { .. },
                    buf,
                }) if self.recovers && p.reissue => {
                    // Held for the new queue.
                    self.health
                        .report_error(format!("queue {}: {error}", self.qid));
                    p.buf = buf;
                    pending.push_front(p);
                    break;
                }
                Err(SubmitError { error, buf }) => {
                    let e = BufError {
                        error: error.into(),
                        buf,
                    };
                    self.finish(p.rec, Err(e), wake);
                }
            }
        }
        q.outstanding() > 0 || !pending.is_empty()
    }

    /// Releases the lock (handing it to a waiting thread, if any) and wakes the tasks
    /// whose commands completed. `scratch` (empty, with capacity) trades places with
    /// the queue's list, so neither ever reallocates.
    fn unlock_and_wake(mut g: MutexGuard<'_, QueueState<P>>, scratch: &mut Vec<Waker>) {
        std::mem::swap(&mut g.wake, scratch);
        MutexGuard::unlock_fair(g);
        for w in scratch.drain(..) {
            w.wake();
        }
    }

    /// Starts a command: takes a credit (waiting while the queue is full) and a
    /// record, queues it and posts what is waiting (or holds it while the controller
    /// reconnects).
    async fn start(
        self: &Arc<Self>,
        sqe: Sqe,
        data: DataDir,
        buf: Option<IoBuf>,
        reissue: bool,
    ) -> CmdResult {
        if self.health.io_disposition() == IoDisposition::Fail {
            return Err(BufError {
                error: self.unavailable(),
                buf,
            });
        }
        let Ok(permit) = self.credits.acquire().await else {
            return Err(BufError {
                error: HostError::Disconnected,
                buf,
            });
        };
        permit.forget();
        let Some(rec) = self.free.pop() else {
            // Credits and records are counted alike: cannot happen.
            self.credits.add_permits(1);
            return Err(BufError {
                error: HostError::Protocol("no command record for a credit".into()),
                buf,
            });
        };
        *self.records[usize::from(rec)].lock() = RecState::Waiting(None);
        {
            let mut g = self.state.lock();
            if g.queue.is_none() && self.health.io_disposition() != IoDisposition::Hold {
                drop(g);
                *self.records[usize::from(rec)].lock() = RecState::Free;
                self.release(rec);
                return Err(BufError {
                    error: self.unavailable(),
                    buf,
                });
            }
            g.pending.push_back(PendingCmd {
                rec,
                sqe,
                data,
                buf,
                reissue,
                retries: 0,
                posted_at: None,
                abort_asked: false,
            });
            self.drive(&mut g);
            // Rare here (completions found while posting): woken under the lock.
            for w in g.wake.drain(..) {
                w.wake();
            }
        }
        if self.sleeping.load(Ordering::Acquire) {
            if let Some(t) = self.poller.get() {
                t.unpark();
            }
        }
        CmdFuture {
            queue: self,
            rec,
            done: false,
        }
        .await
    }
}

/// Awaits record `rec` of `queue`.
struct CmdFuture<'a, P: Provider> {
    queue: &'a Arc<IoQueue<P>>,
    rec: u16,
    done: bool,
}

impl<P: Provider> Future for CmdFuture<'_, P> {
    type Output = CmdResult;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<CmdResult> {
        let q = self.queue;
        if q.runtime_polled {
            if let Some(mut g) = q.state.try_lock() {
                q.drive(&mut g);
                for w in g.wake.drain(..) {
                    if !w.will_wake(cx.waker()) {
                        w.wake();
                    }
                }
            }
        }
        let mut st = q.records[usize::from(self.rec)].lock();
        match std::mem::replace(&mut *st, RecState::Free) {
            RecState::Done(r) => {
                drop(st);
                q.release(self.rec);
                self.done = true;
                Poll::Ready(r)
            }
            RecState::Waiting(w) => {
                let w = match w {
                    Some(w) if w.will_wake(cx.waker()) => w,
                    _ => cx.waker().clone(),
                };
                *st = RecState::Waiting(Some(w));
                drop(st);
                if q.runtime_polled {
                    // Poll the queue again on the next turn of the runtime.
                    cx.waker().wake_by_ref();
                }
                Poll::Pending
            }
            other => {
                *st = other;
                Poll::Pending
            }
        }
    }
}

impl<P: Provider> Drop for CmdFuture<'_, P> {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        let mut st = self.queue.records[usize::from(self.rec)].lock();
        if let RecState::Done(r) = std::mem::replace(&mut *st, RecState::Abandoned) {
            *st = RecState::Free;
            drop(st);
            drop(r);
            self.queue.release(self.rec);
        }
    }
}

/// What the host's handles share.
struct Shared<P: Provider> {
    io: Vec<Arc<IoQueue<P>>>,
    keeper: Mutex<Option<AdminKeeper<P>>>,
    health: ControllerHealth,
    pool: BufferPool,
    next: AtomicUsize,
    copied: AtomicU64,
    stop: Arc<AtomicBool>,
    /// Bytes per command at most (MDTS, `max_io_bytes`).
    max_transfer: usize,
}

impl<P: Provider> Shared<P> {
    /// Runs `f` on the controller on tokio's blocking pool.
    async fn admin<R: Send + 'static>(
        self: &Arc<Self>,
        f: impl FnOnce(&mut crate::Controller<P>) -> Result<R, HostError> + Send + 'static,
    ) -> Result<R, HostError> {
        let me = self.clone();
        tokio::task::spawn_blocking(move || {
            let k = me.keeper.lock();
            match k.as_ref() {
                Some(k) => k.with_controller(f)?,
                None => Err(HostError::Disconnected),
            }
        })
        .await
        .map_err(|_| HostError::Disconnected)?
    }
}

/// A connected NVMe-oF host (one controller) on provider `P`: see the module docs.
///
/// The provider is a type parameter that defaults to the soft provider, so `Host` and
/// [`Host::connect`] are the soft provider's; [`Host::connect_with`] takes another
/// (`Host::connect_with(VerbsProvider, opts)` with the transport's `verbs` feature),
/// [`Host::connect_with_options`] the provider's own options too, and
/// [`Host::connect_on`] a device the caller opened. The API is the same on every
/// provider.
pub struct Host<P: Provider = SoftProvider> {
    shared: Arc<Shared<P>>,
    events: AsyncEvents,
    info: ControllerInfo,
    threads: Vec<JoinHandle<()>>,
}

impl<P: Provider> std::fmt::Debug for Host<P> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Host")
            .field("subnqn", &self.info.subnqn)
            .field("cntlid", &self.info.cntlid)
            .field("io_queues", &self.shared.io.len())
            .finish()
    }
}

impl Host<SoftProvider> {
    /// Connects on the soft provider with its defaults: [`Host::connect_with`]`(
    /// SoftProvider, opts)`.
    ///
    /// Errors: any [`HostError`] of the bring-up (refused Connect, CM reject, timeout).
    pub async fn connect(opts: HostOptions) -> Result<Self, HostError> {
        Self::connect_with(SoftProvider, opts).await
    }
}

impl<P: Provider> Host<P> {
    /// Connects to the subsystem `opts.subnqn` at `opts.traddr` over provider `P`:
    /// device ([`crate::device::open_device`]), buffer pool, connection manager, admin
    /// queue bring-up and the I/O queues (see [`SyncHost::connect_on`]), on tokio's
    /// blocking pool (the async caller is not blocked meanwhile); then the poll threads
    /// or the runtime's tick ([`HostOptions::completions`]) and the Keep Alive thread.
    /// Call it within a tokio runtime.
    ///
    /// Errors: any [`HostError`] of the device or the bring-up (refused Connect, CM
    /// reject, timeout, the pool against `RLIMIT_MEMLOCK`).
    pub async fn connect_with(_provider: P, opts: HostOptions) -> Result<Self, HostError> {
        Self::connect_with_options(opts, P::Options::default()).await
    }

    /// [`Host::connect_with`] with the provider's own `options` (the soft provider's
    /// `SoftOptions`: fault injection, packet path).
    pub async fn connect_with_options(
        opts: HostOptions,
        options: P::Options,
    ) -> Result<Self, HostError> {
        // Started on the blocking pool too: arming asynchronous events runs admin
        // commands.
        tokio::task::spawn_blocking(move || {
            Self::start(SyncHost::<P>::connect_with_options(&opts, &options)?, &opts)
        })
        .await
        .map_err(|_| HostError::Disconnected)?
    }

    /// Like [`Host::connect_with`] on `dev`, a device the caller opened with at least
    /// `1 + opts.io_queues` poll groups.
    pub async fn connect_on<D>(dev: Arc<D>, opts: HostOptions) -> Result<Self, HostError>
    where
        D: Device<Provider = P>,
        P: Provider<Device = D>,
    {
        tokio::task::spawn_blocking(move || {
            Self::start(SyncHost::<P>::connect_on(&dev, &opts)?, &opts)
        })
        .await
        .map_err(|_| HostError::Disconnected)?
    }

    fn start(host: SyncHost<P>, opts: &HostOptions) -> Result<Self, HostError> {
        let pool = host.pool().clone();
        let (_dev, controller, queues) = host.into_parts();
        let info = controller.info().clone();
        let health = ControllerHealth::new();
        let runtime = opts.completions == Completions::Runtime;
        let max_transfer = queues
            .iter()
            .map(|q| q.max_io_bytes())
            .min()
            .unwrap_or(4096);
        let depth = queues.iter().map(|q| q.depth()).max().unwrap_or(2);
        let reconnect = opts.reconnect_options();
        let recovers = reconnect.ctrl_loss_tmo != Some(Duration::ZERO);
        let io: Vec<Arc<IoQueue<P>>> = queues
            .into_iter()
            .map(|q| {
                Arc::new(IoQueue::new(
                    q,
                    runtime,
                    health.clone(),
                    recovers,
                    opts.io_timeout,
                ))
            })
            .collect();
        let set = Arc::new(recovery::HostQueues {
            io: io.clone(),
            depth,
            max_io_bytes: max_transfer,
        });
        let events = AsyncEvents::new();
        let keeper = AdminKeeper::start_with_events(
            controller,
            reconnect,
            health.clone(),
            Some(set),
            Some(events.clone()),
        );
        let stop = Arc::new(AtomicBool::new(false));
        let mut threads = Vec::new();
        if runtime {
            let io = io.clone();
            let stop = stop.clone();
            tokio::spawn(async move {
                let mut tick = tokio::time::interval(IDLE_WAIT);
                while !stop.load(Ordering::Acquire) {
                    tick.tick().await;
                    for q in &io {
                        if let Some(mut g) = q.state.try_lock() {
                            if !q.drive(&mut g) {
                                if let Some(queue) = g.queue.as_mut() {
                                    queue.progress();
                                }
                            }
                            for w in g.wake.drain(..) {
                                w.wake();
                            }
                        }
                    }
                }
            });
        } else {
            let n = usize::from(opts.poll_threads.max(1)).min(io.len().max(1));
            for t in 0..n {
                let mine: Vec<Arc<IoQueue<P>>> = io.iter().skip(t).step_by(n).cloned().collect();
                let stop = stop.clone();
                let th = std::thread::Builder::new()
                    .name(format!("nvmf-poll{t}"))
                    .spawn(move || poll_thread(mine, stop))
                    .map_err(|e| HostError::Device(format!("spawning a poll thread: {e}")))?;
                for q in io.iter().skip(t).step_by(n) {
                    let _ = q.poller.set(th.thread().clone());
                }
                threads.push(th);
            }
        }
        Ok(Host {
            shared: Arc::new(Shared {
                io,
                keeper: Mutex::new(Some(keeper)),
                health,
                pool,
                next: AtomicUsize::new(0),
                copied: AtomicU64::new(0),
                stop,
                max_transfer,
            }),
            events,
            info,
            threads,
        })
    }

    /// Identify Controller as read at connect time.
    pub fn controller_info(&self) -> &ControllerInfo {
        &self.info
    }

    /// The controller's asynchronous events from now on ([`crate::aen`]): namespaces
    /// that appeared or went (after the host read the Changed Namespace List and the
    /// active namespace list again), ANA changes, others. `recv().await` on the
    /// receiver.
    pub fn events(&self) -> tokio::sync::broadcast::Receiver<ControllerEvent> {
        self.events.subscribe()
    }

    /// The active namespace IDs as the host last read them: at connect, after each
    /// Namespace Attribute Changed event and after each reconnect (ascending).
    /// [`Host::namespaces`] reads the list now.
    pub fn active_namespace_ids(&self) -> Vec<u32> {
        self.events.namespaces()
    }

    /// The controller's lifecycle state (see [`crate::lifecycle`]): `Live`, or
    /// `Resetting`/`Connecting` while it reconnects, `Dead` once given up.
    pub fn state(&self) -> CtrlState {
        self.shared.health.state()
    }

    /// Successful reconnects since [`Host::connect`].
    pub fn reconnects(&self) -> u64 {
        self.shared.health.reconnects()
    }

    /// Controller resets (a command past `io_timeout` that Abort did not help) since
    /// [`Host::connect`].
    pub fn resets(&self) -> u64 {
        self.shared.health.resets()
    }

    /// I/O commands reissued on new queues after a path error.
    pub fn reissued(&self) -> u64 {
        self.shared
            .io
            .iter()
            .map(|q| q.reissued.load(Ordering::Relaxed))
            .sum()
    }

    /// I/O queues connected.
    pub fn io_queues(&self) -> usize {
        self.shared.io.len()
    }

    /// The host's buffer pool.
    pub fn pool(&self) -> &BufferPool {
        &self.shared.pool
    }

    /// A registered buffer of `len` bytes from the host's pool, waiting while the pool
    /// is full. Errors: [`HostError::Queue`] with the pool's error for a size the pool
    /// can never give.
    pub async fn alloc(&self, len: usize) -> Result<IoBuf, HostError> {
        Ok(self
            .shared
            .pool
            .alloc(len)
            .await
            .map_err(QueueError::from)?)
    }

    /// Bytes the copying conveniences ([`Namespace::read`], [`Namespace::write`])
    /// copied between callers' slices and pool buffers; the zero-copy calls add none.
    pub fn bytes_copied(&self) -> u64 {
        self.shared.copied.load(Ordering::Relaxed)
    }

    /// Runs admin command `sqe` with `buf` (`data` says the direction; `None` for no
    /// data) on the admin queue and returns its CQE and the buffer: the admin
    /// passthrough. `timeout` bounds it (default: `HostOptions::admin_timeout`).
    ///
    /// Errors: the command's NVMe status ([`HostError::Nvme`]), [`HostError::Timeout`],
    /// [`HostError::Disconnected`].
    pub async fn admin_passthrough(
        &self,
        sqe: Sqe,
        data: DataDir,
        buf: Option<IoBuf>,
        timeout: Option<Duration>,
    ) -> Result<(Cqe, Option<IoBuf>), HostError> {
        self.shared
            .admin(move |c| {
                let t = timeout.unwrap_or_else(|| c.admin_timeout());
                c.admin_command_buf(sqe, data, buf, t)
            })
            .await
    }

    async fn admin_read(&self, sqe: Sqe, len: usize) -> Result<(Cqe, Vec<u8>), HostError> {
        let buf = self.alloc(len).await?;
        let (cqe, buf) = self
            .admin_passthrough(sqe, DataDir::ControllerToHost { len }, Some(buf), None)
            .await?;
        let data = buf.map(|b| b[..len].to_vec()).unwrap_or_default();
        Ok((cqe, data))
    }

    /// Identify Controller (CNS 01h), read now.
    pub async fn identify_controller(&self) -> Result<ControllerInfo, HostError> {
        let sqe = Sqe::identify(0, nvme::IdentifyCns::Controller, 0, 0);
        let (_, data) = self.admin_read(sqe, crate::identify::IDENTIFY_LEN).await?;
        ControllerInfo::parse(&data).map_err(|e| HostError::Protocol(e.to_string()))
    }

    /// The active namespace IDs (Identify CNS 02h).
    pub async fn namespaces(&self) -> Result<Vec<u32>, HostError> {
        let sqe = Sqe::identify(0, nvme::IdentifyCns::ActiveNamespaceList, 0, 0);
        let (_, data) = self.admin_read(sqe, crate::identify::IDENTIFY_LEN).await?;
        Ok(crate::identify::parse_ns_list(&data))
    }

    /// Get Log Page (NVMe Base 2.x §5.16): `len` bytes (a multiple of 4) of log `lid`
    /// from byte `offset` (a multiple of 4), for namespace `nsid` (0 or FFFFFFFFh for
    /// the controller). Errors: [`HostError::InvalidArgument`] for a length or offset
    /// that is not a whole number of dwords; the command's.
    pub async fn get_log_page(
        &self,
        lid: u8,
        nsid: u32,
        offset: u64,
        len: usize,
    ) -> Result<Vec<u8>, HostError> {
        if len == 0 || !len.is_multiple_of(4) || !offset.is_multiple_of(4) {
            return Err(HostError::InvalidArgument(format!(
                "Get Log Page of {len} bytes at offset {offset}: both must be whole dwords \
                 (multiples of 4), the length at least 4"
            )));
        }
        let numd = (len / 4 - 1) as u32;
        let mut sqe = Sqe::new(nvme::AdminOpcode::GetLogPage.value(), 0).with_nsid(nsid);
        sqe.set_cdw10(u32::from(lid) | ((numd & 0xFFFF) << 16));
        sqe.set_cdw11(numd >> 16);
        sqe.set_cdw12(offset as u32);
        sqe.set_cdw13((offset >> 32) as u32);
        Ok(self.admin_read(sqe, len).await?.1)
    }

    /// Get Features (NVMe Base 2.x §5.15) of feature `fid`, current value (SEL 000b),
    /// with `cdw11` where the feature takes one: the CQE (DW0 is the value).
    pub async fn get_features(&self, fid: u8, cdw11: u32) -> Result<Cqe, HostError> {
        let mut sqe = Sqe::new(nvme::AdminOpcode::GetFeatures.value(), 0);
        sqe.set_cdw10(u32::from(fid));
        sqe.set_cdw11(cdw11);
        Ok(self
            .admin_passthrough(sqe, DataDir::None, None, None)
            .await?
            .0)
    }

    /// Set Features (NVMe Base 2.x §5.27) of feature `fid` to `cdw11`, saved across
    /// resets when `save` (SV): the CQE.
    pub async fn set_features(&self, fid: u8, cdw11: u32, save: bool) -> Result<Cqe, HostError> {
        let mut sqe = Sqe::new(nvme::AdminOpcode::SetFeatures.value(), 0);
        sqe.set_cdw10(u32::from(fid) | if save { 1 << 31 } else { 0 });
        sqe.set_cdw11(cdw11);
        Ok(self
            .admin_passthrough(sqe, DataDir::None, None, None)
            .await?
            .0)
    }

    /// Identify Namespace (CNS 00h) of `nsid`, read now and parsed: size, block
    /// size, NGUID, EUI-64, ANA group. Errors: the command's; [`HostError::Protocol`]
    /// for an inactive namespace or an unusable format.
    pub async fn identify_namespace(
        &self,
        nsid: u32,
    ) -> Result<crate::identify::NamespaceInfo, HostError> {
        let sqe = Sqe::identify(0, nvme::IdentifyCns::Namespace, nsid, 0);
        let (_, data) = self.admin_read(sqe, crate::identify::IDENTIFY_LEN).await?;
        crate::identify::NamespaceInfo::parse(&data)
            .map_err(|e| HostError::Protocol(format!("namespace {nsid}: {e}")))
    }

    /// The identifiers of namespace `nsid` as Linux's host compares them across
    /// paths: Identify Namespace's NGUID and EUI-64, then the Namespace
    /// Identification Descriptor list (Identify CNS 03h, NVMe Base 2.x §5.17.2.3),
    /// whose UUID, NGUID, EUI-64 and CSI win. A controller that answers CNS 03h with
    /// Invalid Field in Command (before NVMe 1.3) gives the Identify Namespace ones.
    ///
    /// Errors: Identify Namespace's; CNS 03h's other errors; a malformed list
    /// ([`HostError::Protocol`]).
    pub async fn namespace_ids(
        &self,
        nsid: u32,
        info: &crate::identify::NamespaceInfo,
    ) -> Result<crate::identify::NamespaceIds, HostError> {
        let mut ids = crate::identify::NamespaceIds::from_info(info);
        let sqe = Sqe::identify(0, nvme::IdentifyCns::NamespaceIdDescriptorList, nsid, 0);
        match self.admin_read(sqe, crate::identify::IDENTIFY_LEN).await {
            Ok((_, data)) => ids.add_descriptors(&data).map_err(|e| {
                HostError::Protocol(format!(
                    "namespace {nsid}: Namespace Identification Descriptor list: {e}"
                ))
            })?,
            Err(HostError::Nvme { status, .. })
                if status.sct == nvme::StatusCodeType::Generic
                    && status.sc == nvme::GenericStatus::InvalidField.value() =>
            {
                tracing::debug!(
                    nsid,
                    "no Namespace Identification Descriptor list (CNS 03h)"
                );
            }
            Err(e) => return Err(e),
        }
        Ok(ids)
    }

    /// Namespace `nsid` (Identify Namespace: size and block size).
    pub async fn namespace(&self, nsid: u32) -> Result<Namespace<P>, HostError> {
        let info = self.identify_namespace(nsid).await?;
        Ok(Namespace {
            nsid,
            block_size: info.block_size,
            nlb: info.nsze,
            shared: self.shared.clone(),
            queue: None,
            timeout: None,
        })
    }

    /// Disconnects: stops the poll threads, fails commands still waiting with
    /// [`HostError::Disconnected`], disconnects the I/O queues, shuts the controller
    /// down (CC.SHN) and disconnects the admin queue.
    pub async fn disconnect(mut self) -> Result<(), HostError> {
        self.stop_pollers();
        let shared = self.shared.clone();
        tokio::task::spawn_blocking(move || shutdown(&shared))
            .await
            .map_err(|_| HostError::Disconnected)?
    }

    fn stop_pollers(&mut self) {
        self.shared.stop.store(true, Ordering::Release);
        for t in self.threads.drain(..) {
            t.thread().unpark();
            let _ = t.join();
        }
    }
}

/// Takes the queues out (failing what waits in them) and shuts the controller down.
fn shutdown<P: Provider>(shared: &Shared<P>) -> Result<(), HostError> {
    // No recovery from here on (DELETING).
    let mut keeper = shared.keeper.lock().take();
    if let Some(k) = keeper.as_mut() {
        k.stop();
    }
    let mut queues = Vec::new();
    for q in &shared.io {
        let mut g = q.state.lock();
        // Let in-flight commands finish (bounded), then fail what is left.
        let deadline = Instant::now() + Duration::from_secs(2);
        while q.drive(&mut g) && Instant::now() < deadline {}
        if q.qid == shared.io[0].qid {
            shared.health.set_state(CtrlState::Deleting);
        }
        q.fail_pending(&mut g, &HostError::Disconnected);
        let mut wake = std::mem::take(&mut g.wake);
        for cid in 0..g.by_cid.len() {
            if let Some(p) = g.by_cid[cid].take() {
                q.finish(
                    p.rec,
                    Err(BufError::plain(HostError::Disconnected)),
                    &mut wake,
                );
            }
        }
        if let Some(queue) = g.queue.take() {
            queues.push(queue);
        }
        drop(g);
        q.credits.close();
        for w in wake {
            w.wake();
        }
    }
    shared.health.set_state(CtrlState::Deleting);
    let r = match keeper {
        Some(k) => k.shutdown(queues),
        None => Err(HostError::Disconnected),
    };
    shared.health.set_state(CtrlState::Dead);
    r
}

impl<P: Provider> Drop for Host<P> {
    fn drop(&mut self) {
        // Without an explicit disconnect: the pollers stop; the keeper and the queues
        // disconnect when the last handle (a Namespace) goes.
        self.stop_pollers();
    }
}

/// A poll thread of [`Completions::PollThread`]: see the module docs.
fn poll_thread<P: Provider>(queues: Vec<Arc<IoQueue<P>>>, stop: Arc<AtomicBool>) {
    let mut idle_rounds = 0u32;
    let most = queues.iter().map(|q| q.records.len()).max().unwrap_or(1);
    let mut scratch: Vec<Waker> = Vec::with_capacity(most);
    while !stop.load(Ordering::Acquire) {
        let mut busy = false;
        for q in &queues {
            let mut g = q.state.lock();
            busy |= q.drive(&mut g);
            IoQueue::unlock_and_wake(g, &mut scratch);
        }
        if busy {
            idle_rounds = 0;
            continue;
        }
        idle_rounds += 1;
        if idle_rounds < 64 {
            std::hint::spin_loop();
            continue;
        }
        for q in &queues {
            q.sleeping.store(true, Ordering::Release);
        }
        // A submission after the flag was set unparks us; one before is seen here.
        let work = queues.iter().any(|q| {
            let mut g = q.state.lock();
            let w = q.has_work(&g);
            if !w {
                if let Some(queue) = g.queue.as_mut() {
                    queue.progress();
                }
            }
            w
        });
        if !work {
            std::thread::park_timeout(IDLE_WAIT);
        }
        for q in &queues {
            q.sleeping.store(false, Ordering::Release);
        }
        idle_rounds = 0;
    }
}

/// One namespace of a [`Host`]: `nlb` logical blocks of `block_size` bytes. Cheap to
/// clone; clones share the host.
pub struct Namespace<P: Provider = SoftProvider> {
    /// Namespace ID.
    pub nsid: u32,
    /// Logical block size in bytes.
    pub block_size: u32,
    /// Size in logical blocks (NSZE).
    pub nlb: u64,
    shared: Arc<Shared<P>>,
    /// The I/O queue (index) every command of this handle uses; `None`: round robin.
    queue: Option<usize>,
    timeout: Option<Duration>,
}

impl<P: Provider> Clone for Namespace<P> {
    fn clone(&self) -> Self {
        Namespace {
            nsid: self.nsid,
            block_size: self.block_size,
            nlb: self.nlb,
            shared: self.shared.clone(),
            queue: self.queue,
            timeout: self.timeout,
        }
    }
}

impl<P: Provider> std::fmt::Debug for Namespace<P> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Namespace")
            .field("nsid", &self.nsid)
            .field("block_size", &self.block_size)
            .field("nlb", &self.nlb)
            .field("queue", &self.queue)
            .finish()
    }
}

impl<P: Provider> Namespace<P> {
    /// This namespace with every command on I/O queue `index` (0-based: QID `index +
    /// 1`, taken modulo the queues connected): one queue per core or per task of the
    /// caller's choosing.
    pub fn on_queue(&self, index: usize) -> Self {
        let mut n = self.clone();
        n.queue = Some(index % self.shared.io.len().max(1));
        n
    }

    /// This namespace with a deadline of `timeout` on each call: a call not done by
    /// then returns [`HostError::Timeout`] and abandons its commands (see the module
    /// docs; their buffers return to the pool when they complete). Needs a runtime with
    /// the time driver.
    pub fn with_timeout(&self, timeout: Duration) -> Self {
        let mut n = self.clone();
        n.timeout = Some(timeout);
        n
    }

    fn pick(&self) -> Result<&Arc<IoQueue<P>>, HostError> {
        let io = &self.shared.io;
        if io.is_empty() {
            return Err(HostError::InvalidArgument(
                "no I/O queue is connected".into(),
            ));
        }
        let i = match self.queue {
            Some(i) => i,
            None => self.shared.next.fetch_add(1, Ordering::Relaxed),
        };
        Ok(&io[i % io.len()])
    }

    /// Runs `fut` under this handle's deadline.
    async fn timed<T>(
        &self,
        fut: impl Future<Output = Result<T, BufError>>,
    ) -> Result<T, BufError> {
        match self.timeout {
            None => fut.await,
            Some(d) => match tokio::time::timeout(d, fut).await {
                Ok(r) => r,
                Err(_) => Err(BufError::plain(HostError::Timeout(format!(
                    "a command of namespace {} ({} ms)",
                    self.nsid,
                    d.as_millis()
                )))),
            },
        }
    }

    fn check(&self, slba: u64, len: usize) -> Result<u64, HostError> {
        let bs = u64::from(self.block_size);
        if len == 0 || !(len as u64).is_multiple_of(bs) {
            return Err(HostError::InvalidArgument(format!(
                "length {len} is not a non-zero multiple of the {bs}-byte block"
            )));
        }
        let nlb = len as u64 / bs;
        if slba.checked_add(nlb).is_none_or(|end| end > self.nlb) {
            return Err(HostError::InvalidArgument(format!(
                "blocks {slba}..+{nlb} beyond the namespace's {}",
                self.nlb
            )));
        }
        Ok(nlb)
    }

    fn chunk_bytes(&self) -> usize {
        split::max_command_bytes(self.block_size, self.shared.max_transfer)
    }

    /// I/O passthrough: `sqe` as given (NSID, opcode and CDWs the caller's; CID and SGL
    /// filled in) with `buf` (`data` says the direction and length) on an I/O queue.
    /// Returns the CQE and the buffer. No copy, no allocation.
    ///
    /// A passthrough command is never reissued after a path error (the library cannot
    /// know whether doing it twice is harmless; Linux fails them too): while the
    /// controller reconnects it is held like any I/O, but one that was on the wire when
    /// the path failed fails with that error.
    ///
    /// Errors (with the buffer): the command's NVMe status, transport errors,
    /// [`HostError::Timeout`] (without the buffer: the command is abandoned), and those
    /// of a reconnect (see [`crate::host`]).
    pub async fn passthrough(
        &self,
        sqe: Sqe,
        data: DataDir,
        buf: Option<IoBuf>,
    ) -> Result<(Cqe, Option<IoBuf>), BufError> {
        self.command(sqe, data, buf, false).await
    }

    /// One command of the library's own (reissued after a path error: same LBAs, same
    /// data) or the caller's passthrough (`reissue` false).
    async fn command(
        &self,
        sqe: Sqe,
        data: DataDir,
        buf: Option<IoBuf>,
        reissue: bool,
    ) -> Result<(Cqe, Option<IoBuf>), BufError> {
        let q = match self.pick() {
            Ok(q) => q,
            Err(error) => return Err(BufError { error, buf }),
        };
        self.timed(q.start(sqe, data, buf, reissue)).await
    }

    /// Reads `buf.len()` bytes (a multiple of the block size) from block `slba` into
    /// `buf`, a buffer of this host's pool ([`Host::alloc`]), with no copy: the target
    /// writes `buf` itself. Returns the buffer. An I/O larger than one command
    /// (MDTS, 65536 blocks) goes out as several commands on views of `buf`
    /// ([`IoBuf::split_to`]) and comes back whole; one that fits one command allocates
    /// nothing.
    ///
    /// Errors (with the buffer where it came back): [`HostError::InvalidArgument`] for a
    /// length or range outside the namespace; the commands' first error.
    pub async fn read_buf(&self, slba: u64, buf: IoBuf) -> Result<IoBuf, BufError> {
        self.rw_buf(slba, buf, false, false).await
    }

    /// Writes `buf` (a multiple of the block size, a buffer of this host's pool) at
    /// block `slba`, with no copy; `fua` sets Force Unit Access (NVM Command Set 1.x
    /// §3.3.6). Returns the buffer. As [`Namespace::read_buf`] for large I/Os and
    /// errors.
    pub async fn write_buf(&self, slba: u64, buf: IoBuf, fua: bool) -> Result<IoBuf, BufError> {
        self.rw_buf(slba, buf, true, fua).await
    }

    async fn rw_buf(
        &self,
        slba: u64,
        buf: IoBuf,
        write: bool,
        fua: bool,
    ) -> Result<IoBuf, BufError> {
        if let Err(error) = self.check(slba, buf.len()) {
            return Err(BufError {
                error,
                buf: Some(buf),
            });
        }
        let bs = self.block_size;
        let chunk = self.chunk_bytes();
        let command = |p: &split::Piece| {
            if write {
                (
                    Sqe::write(0, self.nsid, p.slba, p.nlb_0based(), fua),
                    DataDir::HostToController { len: p.len },
                )
            } else {
                (
                    Sqe::read(0, self.nsid, p.slba, p.nlb_0based(), false),
                    DataDir::ControllerToHost { len: p.len },
                )
            }
        };
        if buf.len() <= chunk {
            let p = split::Piece {
                slba,
                nlb: (buf.len() / bs as usize) as u32,
                byte_offset: 0,
                len: buf.len(),
            };
            let (sqe, data) = command(&p);
            let (_, back) = self.command(sqe, data, Some(buf), true).await?;
            return back.ok_or_else(|| BufError::plain(HostError::Protocol("buffer lost".into())));
        }
        // Several commands on disjoint views of `buf`, in flight together.
        let mut rest = buf;
        let mut futs = Vec::new();
        for p in split::split(slba, rest.len(), bs, chunk) {
            let view = rest.split_to(p.len);
            let (sqe, data) = command(&p);
            futs.push(Box::pin(self.command(sqe, data, Some(view), true)));
        }
        let mut whole: Option<IoBuf> = None;
        let mut first_err: Option<HostError> = None;
        for f in futs {
            let back = match f.await {
                Ok((_, b)) => b,
                Err(e) => {
                    first_err.get_or_insert(e.error);
                    e.buf
                }
            };
            match (whole.as_mut(), back) {
                (None, b) => whole = b,
                (Some(w), Some(b)) => {
                    let _ = w.unsplit(b);
                }
                (Some(_), None) => {}
            }
        }
        if let Some(w) = whole.as_mut() {
            let _ = w.unsplit(rest);
        }
        match first_err {
            None => whole.ok_or_else(|| BufError::plain(HostError::Protocol("buffer lost".into()))),
            Some(error) => Err(BufError { error, buf: whole }),
        }
    }

    /// Copies in pieces of at most this many bytes (what the pool can give at once).
    fn copy_chunk(&self) -> usize {
        let bs = self.block_size as usize;
        let max = self.shared.pool.max_alloc().min(4 << 20);
        (max / bs).max(1) * bs
    }

    /// Reads `buf.len()` bytes (a multiple of the block size) from block `slba` into a
    /// plain slice, through pool buffers (a copy; counted in [`Host::bytes_copied`]).
    pub async fn read(&self, slba: u64, buf: &mut [u8]) -> Result<(), HostError> {
        self.check(slba, buf.len())?;
        let step = self.copy_chunk();
        let bs = u64::from(self.block_size);
        for (i, part) in buf.chunks_mut(step).enumerate() {
            let b = self
                .shared
                .pool
                .alloc(part.len())
                .await
                .map_err(QueueError::from)?;
            let at = slba + (i * step) as u64 / bs;
            let b = self.read_buf(at, b).await?;
            part.copy_from_slice(&b[..part.len()]);
            self.shared
                .copied
                .fetch_add(part.len() as u64, Ordering::Relaxed);
        }
        Ok(())
    }

    /// Writes `data` (a multiple of the block size) at block `slba` from a plain slice,
    /// through pool buffers (a copy); `fua` sets Force Unit Access.
    pub async fn write(&self, slba: u64, data: &[u8], fua: bool) -> Result<(), HostError> {
        self.check(slba, data.len())?;
        let step = self.copy_chunk();
        let bs = u64::from(self.block_size);
        for (i, part) in data.chunks(step).enumerate() {
            let mut b = self
                .shared
                .pool
                .alloc(part.len())
                .await
                .map_err(QueueError::from)?;
            b.copy_from_slice(part);
            self.shared
                .copied
                .fetch_add(part.len() as u64, Ordering::Relaxed);
            let at = slba + (i * step) as u64 / bs;
            self.write_buf(at, b, fua).await?;
        }
        Ok(())
    }

    /// Flush (NVMe Base 2.x §7.1): volatile write cache contents of the namespace
    /// become non-volatile.
    pub async fn flush(&self) -> Result<(), HostError> {
        self.command(Sqe::flush(0, self.nsid), DataDir::None, None, true)
            .await?;
        Ok(())
    }

    /// Write Zeroes of `nlb` blocks from `slba` (NVM Command Set 1.x §3.3.8), split
    /// into commands of at most 65536 blocks.
    pub async fn write_zeroes(&self, slba: u64, nlb: u64) -> Result<(), HostError> {
        if nlb == 0 || slba.checked_add(nlb).is_none_or(|e| e > self.nlb) {
            return Err(HostError::InvalidArgument(format!(
                "blocks {slba}..+{nlb} outside the namespace's {}",
                self.nlb
            )));
        }
        let mut at = slba;
        while at < slba + nlb {
            let n = (slba + nlb - at).min(split::MAX_NLB);
            let sqe = Sqe::write_zeroes(0, self.nsid, at, (n - 1) as u16, false);
            self.command(sqe, DataDir::None, None, true).await?;
            at += n;
        }
        Ok(())
    }

    /// Dataset Management with Deallocate of `(slba, nlb)` ranges (NVM Command Set 1.x
    /// §3.3.3), 256 ranges per command.
    pub async fn deallocate(&self, ranges: &[(u64, u32)]) -> Result<(), HostError> {
        for &(s, n) in ranges {
            if s.checked_add(u64::from(n)).is_none_or(|e| e > self.nlb) {
                return Err(HostError::InvalidArgument(format!(
                    "range {s}..+{n} beyond the namespace's {}",
                    self.nlb
                )));
            }
        }
        for group in ranges.chunks(nvme::dsm::DSM_MAX_RANGES) {
            let list: Vec<DsmRange> = group.iter().map(|&(s, n)| DsmRange::new(s, n)).collect();
            let bytes = list.as_slice().as_bytes();
            let mut b = self
                .shared
                .pool
                .alloc(bytes.len())
                .await
                .map_err(QueueError::from)?;
            b.copy_from_slice(bytes);
            let sqe = Sqe::dsm_deallocate(0, self.nsid, (group.len() - 1) as u8);
            let data = DataDir::HostToController { len: bytes.len() };
            self.command(sqe, data, Some(b), true).await?;
        }
        Ok(())
    }
}
