//! [`AdminKeeper`]: the thread that keeps the controller, as Linux's controller work
//! items do (`nvme_keep_alive_work`, `nvme_rdma_error_recovery_work`,
//! `nvme_rdma_reconnect_ctrl_work`): it drives the admin queue's transport, sends
//! Keep Alive every KATO/2 (each may take KATO), and runs the controller's
//! [`Lifecycle`] (sans-IO, [`crate::lifecycle`]): on a lost Keep Alive, a dead admin
//! queue or an error an I/O path reported ([`ControllerHealth::report_error`]) it
//! tears the queues down, waits `reconnect_delay`, connects the admin queue again
//! (Fabrics Connect with the same host NQN and host ID), enables the controller,
//! connects the I/O queues again ([`IoQueueSet`]) and lets the held I/O go, until
//! `ctrl_loss_tmo`; then the controller is DEAD.
//!
//! Without an [`IoQueueSet`] ([`AdminKeeper::start`], as `nvmf-bench` uses it, whose
//! job threads own their queues) there is no reconnect: the first loss declares the
//! controller dead in [`AdminKeeper::health`], and the thread ends.
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam::channel::{self, Sender, TryRecvError};
use parking_lot::Mutex;
use transport::soft::SoftProvider;
use transport::verbs::{Device as _, DeviceOf, Pd, Provider};

use crate::aen::AsyncEvents;
use crate::controller::{Controller, ControllerOptions};
use crate::error::HostError;
use crate::health::{ControllerHealth, TimedOut};
use crate::lifecycle::{Action, CtrlState, Lifecycle, ReconnectOptions};
use crate::pool::BufferPool;
use crate::queue::NvmeRdmaQueue;

/// How often the [`AdminKeeper`] drives the admin queue's transport between Keep
/// Alives (at most; the soft provider's poll group wakes sooner for packets and RC
/// timers), and how often it looks at the lifecycle's timers and reported errors.
const ADMIN_TICK: Duration = Duration::from_millis(20);

/// How long a controller reset waits for CC.EN 1 -> 0 (the Property Set) on a
/// controller that may not answer.
pub const RESET_DISABLE_WAIT: Duration = Duration::from_secs(1);

/// How long a torn-down queue waits for the target's DREP (a lost target sends none).
pub const TEARDOWN_DISCONNECT_WAIT: Duration = Duration::from_millis(100);

/// The I/O queues of a host that reconnects, as the keeper drives them through a
/// recovery. Implemented by the async [`crate::Host`].
pub trait IoQueueSet<P: Provider>: Send + Sync + 'static {
    /// Tears every I/O queue down (reaps what completed, CM disconnect, QP destroyed,
    /// outstanding commands cancelled) and holds the commands that may be reissued;
    /// `reason` is why.
    fn tear_down(&self, reason: &str);
    /// Connects every I/O queue again on `controller` (a new controller, enabled), each
    /// in its own poll group of `dev`. On an error the queues connected so far are
    /// dropped again.
    fn reconnect(
        &self,
        controller: &mut Controller<P>,
        dev: &Arc<DeviceOf<P>>,
    ) -> Result<(), HostError>;
    /// Fails every held command with `error` (failfast, or the controller given up).
    fn fail_held(&self, error: &HostError);
}

/// Connects the I/O queues `qids` again on a reconnected `controller` in the shape they
/// were first connected in (`depth` entries, `max_io_bytes` per command), each clamped
/// to what the new controller allows (MQES, MDTS; at least 2 entries), each in poll
/// group `qid` of `dev`: the shared part of every [`IoQueueSet::reconnect`].
///
/// # Errors
/// The controller grants fewer I/O queues than `qids` (Set Features Number of Queues),
/// a poll group cannot be opened, or a queue's Fabrics Connect fails; the queues
/// connected so far are dropped.
pub fn reconnect_io_queues<P: Provider>(
    controller: &mut Controller<P>,
    dev: &Arc<DeviceOf<P>>,
    qids: &[u16],
    depth: u16,
    max_io_bytes: usize,
) -> Result<Vec<NvmeRdmaQueue<P>>, HostError> {
    let n = qids.len() as u16;
    let granted = controller.set_number_of_queues(n)?.min(n);
    if granted < n {
        return Err(HostError::Protocol(format!(
            "the controller granted {granted} I/O queues after the reconnect, {n} before"
        )));
    }
    let mqes = controller.max_queue_entries().min(u32::from(u16::MAX)) as u16;
    let depth = depth.min(mqes).max(2);
    let max_io = controller
        .max_transfer_bytes()
        .map_or(max_io_bytes, |m| m.min(max_io_bytes));
    let mut queues = Vec::with_capacity(qids.len());
    for &qid in qids {
        let ctx = dev
            .open_context(u32::from(qid))
            .map_err(|e| HostError::Device(format!("poll group {qid}: {e}")))?;
        queues.push(controller.connect_io_queue(ctx, qid, depth, max_io)?);
    }
    Ok(queues)
}

/// What a reconnect needs of the first controller.
struct Recovery<P: Provider> {
    queues: Arc<dyn IoQueueSet<P>>,
    dev: Arc<DeviceOf<P>>,
    cm: P::Cm,
    pd: Pd,
    pool: BufferPool,
    opts: ControllerOptions,
}

/// The keeper thread: see the module docs. Others run admin commands through
/// [`AdminKeeper::with_controller`] meanwhile (the thread hands the controller over
/// between its ticks).
pub struct AdminKeeper<P: Provider = SoftProvider> {
    stop: Option<Sender<()>>,
    thread: Option<JoinHandle<Option<HostError>>>,
    /// Shared with the thread; `None` while the controller reconnects (or after it
    /// was given up); taken back at shutdown.
    controller: Arc<Mutex<Option<Controller<P>>>>,
    health: ControllerHealth,
    /// The thread's result once joined.
    ended: Option<HostError>,
}

impl<P: Provider> std::fmt::Debug for AdminKeeper<P> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AdminKeeper")
            .field("state", &self.health.state())
            .finish()
    }
}

impl<P: Provider> AdminKeeper<P> {
    /// Starts the thread with no reconnect: a lost Keep Alive declares the controller
    /// dead in [`AdminKeeper::health`] and ends the thread.
    pub fn start(controller: Controller<P>) -> Self {
        let opts = ReconnectOptions {
            kato_ms: controller.options().kato_ms,
            ..ReconnectOptions::never()
        };
        Self::spawn(controller, opts, ControllerHealth::new(), None, None)
    }

    /// Starts the thread with reconnects as `opts` say, over `queues`; the state goes
    /// to `health` (which the I/O paths read and report errors to).
    pub fn start_with_recovery(
        controller: Controller<P>,
        opts: ReconnectOptions,
        health: ControllerHealth,
        queues: Arc<dyn IoQueueSet<P>>,
    ) -> Self {
        Self::start_with_events(controller, opts, health, Some(queues), None)
    }

    /// Starts the thread with reconnects over `queues` (none: the first loss ends it)
    /// and, with `events`, asynchronous events: the controller armed at start and
    /// after each reconnect ([`AsyncEvents::arm`]), the events its requests report
    /// handled between ticks ([`AsyncEvents::handle`]).
    pub fn start_with_events(
        controller: Controller<P>,
        opts: ReconnectOptions,
        health: ControllerHealth,
        queues: Option<Arc<dyn IoQueueSet<P>>>,
        events: Option<AsyncEvents>,
    ) -> Self {
        let recovery = queues.map(|queues| Recovery {
            queues,
            dev: controller.device().clone(),
            cm: controller.cm().clone(),
            pd: controller.pd(),
            pool: controller.pool().clone(),
            opts: controller.options().clone(),
        });
        Self::spawn(controller, opts, health, recovery, events)
    }

    fn spawn(
        controller: Controller<P>,
        opts: ReconnectOptions,
        health: ControllerHealth,
        recovery: Option<Recovery<P>>,
        events: Option<AsyncEvents>,
    ) -> Self {
        let (stop, stopped) = channel::bounded::<()>(1);
        let mut controller = controller;
        if let Some(ev) = &events {
            // Before the thread starts, so the namespace list is known on return.
            if let Err(e) = ev.arm(&mut controller) {
                tracing::warn!("enabling asynchronous events failed: {e}");
            }
        }
        let controller = Arc::new(Mutex::new(Some(controller)));
        let shared = controller.clone();
        let h = health.clone();
        let admin_timeout = controller
            .lock()
            .as_ref()
            .map_or(Duration::from_secs(10), |c| c.admin_timeout());
        health.set_state(CtrlState::Live);
        let thread = std::thread::Builder::new()
            .name("nvmf-admin".into())
            .spawn(move || {
                let mut run = Run {
                    lc: Lifecycle::new(opts),
                    controller: shared,
                    health: h,
                    recovery,
                    first_error: None,
                    admin_timeout,
                    events,
                };
                let _ = run.lc.connected(Instant::now());
                run.main(|| !matches!(stopped.try_recv(), Err(TryRecvError::Empty)))
            })
            .ok();
        AdminKeeper {
            stop: Some(stop),
            thread,
            controller,
            health,
            ended: None,
        }
    }

    /// The controller's health as this keeper sees it (shared: clone it to whoever
    /// drives the I/O queues, e.g. `nvmf-bench`'s `QueueEngine::with_health`).
    pub fn health(&self) -> &ControllerHealth {
        &self.health
    }

    /// Runs `f` on the controller (an admin command: blocking), between the keeper's
    /// ticks (waits 20 ms at most for one to end).
    ///
    /// Errors: [`HostError::Reconnecting`] while the controller reconnects,
    /// [`HostError::ControllerDead`] once it was given up.
    pub fn with_controller<R>(
        &self,
        f: impl FnOnce(&mut Controller<P>) -> R,
    ) -> Result<R, HostError> {
        let mut g = self.controller.lock();
        match g.as_mut() {
            Some(c) => Ok(f(c)),
            None => Err(self.unavailable()),
        }
    }

    fn unavailable(&self) -> HostError {
        let why = self.health.reason().unwrap_or_else(|| "lost".into());
        match self.health.state() {
            CtrlState::Dead | CtrlState::Deleting => HostError::ControllerDead(why),
            _ => HostError::Reconnecting(why),
        }
    }

    /// Stops the thread (idempotent); the controller stays for
    /// [`AdminKeeper::shutdown`].
    pub fn stop(&mut self) {
        drop(self.stop.take());
        if let Some(t) = self.thread.take() {
            self.ended = t.join().unwrap_or(Some(HostError::Disconnected));
        }
    }

    /// Stops the thread and shuts the controller down after disconnecting
    /// `io_queues`. Returns a Keep Alive failure seen earlier, or the shutdown's error;
    /// a controller that was given up (or is between reconnect attempts) has nothing
    /// to shut down: its loss is returned.
    pub fn shutdown(mut self, io_queues: Vec<NvmeRdmaQueue<P>>) -> Result<(), HostError> {
        self.stop();
        let ended = self.ended.take();
        let controller = self.controller.lock().take();
        let r = match controller {
            Some(c) => c.shutdown(io_queues),
            None => {
                drop(io_queues);
                Err(self.unavailable())
            }
        };
        match ended {
            Some(e) => Err(e),
            None => r,
        }
    }
}

impl<P: Provider> Drop for AdminKeeper<P> {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The thread's state.
struct Run<P: Provider> {
    lc: Lifecycle,
    controller: Arc<Mutex<Option<Controller<P>>>>,
    health: ControllerHealth,
    recovery: Option<Recovery<P>>,
    /// The loss that ended a keeper without reconnect (returned at shutdown).
    first_error: Option<HostError>,
    /// The controller's admin command timeout.
    admin_timeout: Duration,
    /// Asynchronous events to arm and handle, if the owner wants them.
    events: Option<AsyncEvents>,
}

impl<P: Provider> Run<P> {
    /// Arms the controller's asynchronous events (a failure is logged: the
    /// controller works without them).
    fn arm(&mut self) {
        let Some(ev) = &self.events else { return };
        if let Some(c) = self.controller.lock().as_mut() {
            if let Err(e) = ev.arm(c) {
                tracing::warn!("enabling asynchronous events failed: {e}");
            }
        }
    }

    /// The thread's loop until `stopped()` or the controller is DEAD.
    fn main(&mut self, stopped: impl Fn() -> bool) -> Option<HostError> {
        loop {
            if stopped() {
                return None;
            }
            if let Some(r) = self.health.take_reported() {
                self.lost(r);
            }
            for t in self.health.take_abort_requests() {
                self.abort(t);
            }
            self.tick();
            self.lc.handle_timeout(Instant::now());
            while let Some(a) = self.lc.poll_action() {
                self.act(a);
            }
            if self.lc.state() == CtrlState::Dead {
                return self.first_error.take();
            }
        }
    }

    /// The controller is lost (`reason`): a recovery starts.
    fn lost(&mut self, reason: String) {
        if self.lc.error(Instant::now(), reason.clone()) {
            tracing::warn!(
                state = %CtrlState::Resetting,
                "controller lost: {reason}; {}",
                if self.recovery.is_some() {
                    "tearing the queues down to reconnect"
                } else {
                    "no reconnect (the queues' owner fails their commands)"
                }
            );
            self.health.set_reason(reason.clone());
            self.health.set_state(CtrlState::Resetting);
            self.first_error
                .get_or_insert(HostError::ControllerDead(reason));
        }
    }

    /// A command passed `io_timeout`: Abort it (at most `admin_timeout`, or KATO when
    /// shorter); where the controller does not abort it, or the Abort fails, reset
    /// the controller (the command is reissued on the new queues).
    fn abort(&mut self, t: TimedOut) {
        if self.lc.state() != CtrlState::Live {
            return;
        }
        let wait = self
            .lc
            .options()
            .keep_alive_timeout()
            .unwrap_or(Duration::MAX)
            .min(self.admin_timeout);
        let r = match self.controller.lock().as_mut() {
            Some(c) => c.abort_within(t.qid, t.cid, wait),
            None => return,
        };
        let outcome = match r {
            Ok(true) => {
                tracing::warn!(
                    qid = t.qid,
                    cid = t.cid,
                    "{} timed out (io_timeout): aborted; it is reissued",
                    t.what
                );
                return;
            }
            Ok(false) => "the controller did not abort it".to_string(),
            Err(e) => format!("the Abort failed: {e}"),
        };
        let reason = format!("{} timed out (io_timeout) and {outcome}", t.what);
        if self.lc.reset(Instant::now(), reason.clone()) {
            tracing::warn!(
                state = %CtrlState::Resetting,
                "controller reset: {reason}; tearing the queues down and reconnecting at once"
            );
            self.health.set_reason(reason);
            self.health.set_state(CtrlState::Resetting);
            self.health.count_reset();
        }
    }

    /// One wait: on the admin queue's poll group while there is a controller (its
    /// transport driven: ACKs, retransmissions, timers), else a sleep; at most
    /// [`ADMIN_TICK`] or until the lifecycle's next timer.
    fn tick(&mut self) {
        let now = Instant::now();
        let wait = self
            .lc
            .poll_timeout()
            .map_or(ADMIN_TICK, |t| t.saturating_duration_since(now))
            .clamp(Duration::from_millis(1), ADMIN_TICK);
        let mut g = self.controller.lock();
        let dead = match g.as_mut() {
            Some(c) => {
                let q = c.admin_queue_mut();
                q.progress();
                q.wait(wait);
                // Asynchronous events; completions nobody waits for are dropped.
                let events = c.take_async_events();
                if let (false, Some(ev)) = (events.is_empty(), &self.events) {
                    ev.handle(c, events);
                }
                c.admin_queue_mut()
                    .dead_reason()
                    .map(|r| format!("admin queue: {r}"))
            }
            None => {
                drop(g);
                std::thread::sleep(wait);
                return;
            }
        };
        // Whoever waits for the controller gets it now.
        parking_lot::MutexGuard::unlock_fair(g);
        if let Some(r) = dead {
            self.lost(r);
        }
    }

    fn act(&mut self, a: Action) {
        match a {
            Action::SendKeepAlive => {
                let timeout = self
                    .lc
                    .options()
                    .keep_alive_timeout()
                    .unwrap_or(Duration::from_secs(10));
                let r = match self.controller.lock().as_mut() {
                    Some(c) => c.keep_alive_within(timeout),
                    None => Err(HostError::Disconnected),
                };
                if let Err(e) = &r {
                    tracing::warn!("Keep Alive failed: {e}");
                    self.health.set_reason(format!("Keep Alive lost: {e}"));
                    self.first_error
                        .get_or_insert(HostError::ControllerDead(format!(
                            "Keep Alive failed: {e}"
                        )));
                }
                self.lc
                    .keep_alive_done(Instant::now(), r.as_ref().map(|_| ()));
                if self.lc.state() == CtrlState::Resetting {
                    self.health.set_state(CtrlState::Resetting);
                }
            }
            Action::TearDown { disable } => {
                let reason = self.lc.reason().unwrap_or("lost").to_string();
                if disable {
                    // A reset: CC.EN 1 -> 0 first, where the admin queue still answers.
                    if let Some(c) = self.controller.lock().as_mut() {
                        if let Err(e) = c.disable_within(RESET_DISABLE_WAIT) {
                            tracing::info!("controller reset: clearing CC.EN failed ({e})");
                        }
                    }
                }
                if let Some(r) = &self.recovery {
                    r.queues.tear_down(&reason);
                }
                // The admin queue goes too: its poll group is needed for the next one.
                if let Some(mut c) = self.controller.lock().take() {
                    c.admin_queue_mut().disconnect(TEARDOWN_DISCONNECT_WAIT);
                }
                let _ = self.lc.torn_down(Instant::now());
                if self.lc.state() == CtrlState::Connecting {
                    tracing::info!(
                        state = %CtrlState::Connecting,
                        reconnect_delay_ms = self.lc.options().reconnect_delay.as_millis() as u64,
                        ctrl_loss_tmo_s = self.lc.options().ctrl_loss_tmo.map(|d| d.as_secs_f64()),
                        "queues torn down; reconnecting after reconnect_delay (I/O is held)"
                    );
                    self.health.set_state(CtrlState::Connecting);
                }
            }
            Action::Reconnect { attempt } => self.reconnect(attempt),
            Action::FailHeldIo => {
                let reason = self.lc.reason().unwrap_or("lost").to_string();
                tracing::warn!(
                    "fast_io_fail_tmo passed: failing held I/O while reconnecting ({reason})"
                );
                self.health.set_failfast();
                if let Some(r) = &self.recovery {
                    r.queues.fail_held(&HostError::FailFast(reason));
                }
            }
            Action::Delete => {
                let reason = format!(
                    "{}{}",
                    match self.lc.options().ctrl_loss_tmo {
                        Some(d) if !d.is_zero() => format!(
                            "not reconnected within ctrl_loss_tmo ({} s) after {} attempts; ",
                            d.as_secs_f64(),
                            self.lc.attempts()
                        ),
                        _ => String::new(),
                    },
                    self.lc.reason().unwrap_or("lost")
                );
                tracing::error!(state = %CtrlState::Dead, "controller given up: {reason}");
                self.health.declare_dead(reason.clone());
                if let Some(r) = &self.recovery {
                    r.queues.tear_down(&reason);
                    r.queues.fail_held(&HostError::ControllerDead(reason));
                }
                self.controller.lock().take();
                let _ = self.lc.deleted();
            }
        }
    }

    /// Attempt `attempt`: a new controller (admin queue, Fabrics Connect, enable,
    /// Identify) and its I/O queues.
    fn reconnect(&mut self, attempt: u32) {
        let Some(r) = &self.recovery else {
            let _ = self
                .lc
                .connect_failed(Instant::now(), "no reconnect configured");
            return;
        };
        tracing::info!(attempt, target = %r.opts.traddr, "reconnecting the controller");
        let started = Instant::now();
        let result = r
            .dev
            .open_context(0)
            .map_err(|e| HostError::Device(format!("poll group 0: {e}")))
            .and_then(|ctx| Controller::connect(ctx, &r.cm, r.opts.clone(), r.pd, &r.pool))
            .and_then(|mut c| r.queues.reconnect(&mut c, &r.dev).map(|()| c));
        match result {
            Ok(c) => {
                tracing::info!(
                    attempt,
                    cntlid = c.cntlid(),
                    took_ms = started.elapsed().as_millis() as u64,
                    state = %CtrlState::Live,
                    "controller reconnected; reissuing held I/O"
                );
                *self.controller.lock() = Some(c);
                self.arm();
                self.first_error = None;
                let _ = self.lc.connected(Instant::now());
                self.health.count_reconnect();
                self.health.set_state(CtrlState::Live);
            }
            Err(e) => {
                tracing::warn!(attempt, "reconnect attempt failed: {e}");
                let _ = self.lc.connect_failed(Instant::now(), e.to_string());
            }
        }
    }
}
