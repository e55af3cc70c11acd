//! The controller's lifecycle, sans-IO: Linux's controller states
//! (`enum nvme_ctrl_state` in `drivers/nvme/host/nvme.h`: NEW, LIVE, RESETTING,
//! CONNECTING, DELETING, DEAD), the Fabrics reconnect options with Linux's meanings
//! and defaults (`reconnect_delay` 10 s, `ctrl_loss_tmo` 600 s, `fast_io_fail_tmo`
//! off), and Keep Alive loss detection, as one state machine that takes events with
//! `now` and hands out [`Action`]s and its next deadline; no sockets, clocks or
//! threads inside (quinn-proto's manner). The host's controller thread
//! ([`crate::sync_host::AdminKeeper`]) drives it.
//!
//! ```text
//!            connected          error (transport, dead QP, Keep Alive), reset
//!   NEW ───────────────► LIVE ─────────────────────────► RESETTING
//!                          ▲                                 │ torn_down
//!                connected │        connect_failed           ▼
//!                          └──────── CONNECTING ◄────── (wait reconnect_delay;
//!                                        │                  none after a reset)
//!                                        │ ctrl_loss_tmo passed (or 0)
//!                                        ▼
//!                  delete ───────► DELETING ──deleted──► DEAD
//! ```
//!
//! What happens to I/O ([`Lifecycle::io_disposition`]): LIVE submits; NEW,
//! RESETTING and CONNECTING hold it (it is reissued on the new queues once LIVE);
//! once `fast_io_fail_tmo` has passed in CONNECTING the held I/O fails
//! ([`Action::FailHeldIo`]) and new I/O fails at once until the controller is LIVE
//! again (Linux's `NVME_CTRL_FAILFAST_EXPIRED`); DELETING and DEAD fail everything.
//!
//! `ctrl_loss_tmo` is a deadline from the loss: Linux counts attempts instead
//! (`max_reconnects = DIV_ROUND_UP(ctrl_loss_tmo, reconnect_delay)`, `nvmf_should_reconnect`),
//! which is the same while attempts are quick; here an attempt that runs past the
//! deadline (a connect that waits for its timeout) ends the recovery as soon as it
//! fails, so I/O never waits much beyond `ctrl_loss_tmo`. At least one attempt is made
//! when `ctrl_loss_tmo` is not 0 (as Linux's `max_reconnects` is at least 1).
use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// Linux's default `reconnect_delay` (`NVMF_DEF_RECONNECT_DELAY`, 10 s).
pub const DEFAULT_RECONNECT_DELAY: Duration = Duration::from_secs(10);
/// Linux's default `ctrl_loss_tmo` (`NVMF_DEF_CTRL_LOSS_TMO`, 600 s).
pub const DEFAULT_CTRL_LOSS_TMO: Duration = Duration::from_secs(600);
/// Linux's default I/O command timeout (`nvme_core.io_timeout`, 30 s): then Abort,
/// then a controller reset ([`Lifecycle::reset`]).
pub const DEFAULT_IO_TIMEOUT: Duration = Duration::from_secs(30);
/// Times one I/O command is reissued after path errors at most (Linux's
/// `nvme_max_retries`, 5); a command that failed this often fails with its error.
pub const MAX_RETRIES: u8 = 5;

/// The controller states, Linux's (`enum nvme_ctrl_state`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CtrlState {
    /// Created, not connected yet.
    New,
    /// Connected and enabled: I/O runs.
    Live,
    /// An error was seen: the queues are being torn down (I/O held).
    Resetting,
    /// Waiting for or making a reconnect attempt (I/O held, unless failfast expired).
    Connecting,
    /// Being removed (the caller disconnects, or `ctrl_loss_tmo` passed): I/O fails.
    Deleting,
    /// Removed: every call fails.
    Dead,
}

impl CtrlState {
    /// The state's name as Linux's sysfs `state` attribute prints it (`live`,
    /// `connecting`, ...).
    pub fn name(self) -> &'static str {
        match self {
            CtrlState::New => "new",
            CtrlState::Live => "live",
            CtrlState::Resetting => "resetting",
            CtrlState::Connecting => "connecting",
            CtrlState::Deleting => "deleting",
            CtrlState::Dead => "dead",
        }
    }

    /// The state from its number ([`CtrlState::to_u8`]); `Dead` for others.
    pub fn from_u8(v: u8) -> CtrlState {
        match v {
            0 => CtrlState::New,
            1 => CtrlState::Live,
            2 => CtrlState::Resetting,
            3 => CtrlState::Connecting,
            4 => CtrlState::Deleting,
            _ => CtrlState::Dead,
        }
    }

    /// A number for the state (to share it through an atomic).
    pub fn to_u8(self) -> u8 {
        self as u8
    }
}

impl std::fmt::Display for CtrlState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// The Fabrics reconnect options (Linux's `nvme connect` options of the same names).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReconnectOptions {
    /// Wait between losing the controller (or a failed attempt) and the next reconnect
    /// attempt (default [`DEFAULT_RECONNECT_DELAY`], 10 s).
    pub reconnect_delay: Duration,
    /// How long after the loss the host keeps trying before it gives the controller
    /// up (DEAD, every held and later call fails); `Some(0)`: no reconnect at all;
    /// `None`: forever (Linux's `-1`). Default [`DEFAULT_CTRL_LOSS_TMO`], 600 s.
    pub ctrl_loss_tmo: Option<Duration>,
    /// How long after the controller started reconnecting held I/O waits before it
    /// fails (new I/O then fails at once until the controller is live again); `None`
    /// (the default, Linux's `-1`): held until `ctrl_loss_tmo`.
    pub fast_io_fail_tmo: Option<Duration>,
    /// Keep Alive Timeout (KATO) in ms, 0 for none: a Keep Alive goes every KATO/2
    /// and may take KATO before it counts as lost (Linux's `rq->timeout = kato`).
    pub kato_ms: u32,
}

impl Default for ReconnectOptions {
    fn default() -> Self {
        ReconnectOptions {
            reconnect_delay: DEFAULT_RECONNECT_DELAY,
            ctrl_loss_tmo: Some(DEFAULT_CTRL_LOSS_TMO),
            fast_io_fail_tmo: None,
            kato_ms: 10_000,
        }
    }
}

impl ReconnectOptions {
    /// No reconnect: the first error ends the controller (`ctrl_loss_tmo` 0).
    pub fn never() -> Self {
        ReconnectOptions {
            ctrl_loss_tmo: Some(Duration::ZERO),
            ..ReconnectOptions::default()
        }
    }

    /// Linux's count of attempts for these options (`max_reconnects`: `ctrl_loss_tmo /
    /// reconnect_delay` rounded up; `None` for forever).
    pub fn max_reconnects(&self) -> Option<u64> {
        let tmo = self.ctrl_loss_tmo?;
        let d = self.reconnect_delay.as_millis().max(1);
        Some(tmo.as_millis().div_ceil(d) as u64)
    }

    /// How often to send Keep Alive (KATO/2), `None` without Keep Alive.
    pub fn keep_alive_interval(&self) -> Option<Duration> {
        (self.kato_ms > 0).then(|| Duration::from_millis(u64::from(self.kato_ms) / 2))
    }

    /// How long one Keep Alive may take (KATO), `None` without Keep Alive.
    pub fn keep_alive_timeout(&self) -> Option<Duration> {
        (self.kato_ms > 0).then(|| Duration::from_millis(u64::from(self.kato_ms)))
    }
}

/// What the driver must do now (take them with [`Lifecycle::poll_action`] after every
/// event).
#[must_use]
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// Tear every queue down (CM disconnect, QPs destroyed) and hold their outstanding
    /// commands for reissue; then [`Lifecycle::torn_down`]. `disable`: a controller
    /// reset ([`Lifecycle::reset`]): clear CC.EN on the admin queue first, if it still
    /// answers.
    TearDown {
        /// Disable the controller (CC.EN 1 -> 0) before tearing down.
        disable: bool,
    },
    /// Make reconnect attempt `attempt` (1, 2, ...) now: admin queue, Fabrics Connect
    /// with the same host NQN and ID, enable, the I/O queues; then
    /// [`Lifecycle::connected`] or [`Lifecycle::connect_failed`].
    Reconnect {
        /// Which attempt this is since the loss.
        attempt: u32,
    },
    /// Send a Keep Alive now (taking at most [`ReconnectOptions::keep_alive_timeout`]);
    /// then [`Lifecycle::keep_alive_done`].
    SendKeepAlive,
    /// `fast_io_fail_tmo` passed: fail the held I/O with [`Lifecycle::reason`]; new
    /// I/O fails too until the controller is live.
    FailHeldIo,
    /// The controller is given up (`ctrl_loss_tmo` passed): fail everything held, tear
    /// down what is left; then [`Lifecycle::deleted`].
    Delete,
}

/// What to do with an I/O command submitted now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IoDisposition {
    /// Post it.
    Submit,
    /// Keep it until the controller is live again.
    Hold,
    /// Fail it: failfast expired, or the controller is being deleted or dead.
    Fail,
}

/// An event that the current state does not allow (Linux's `nvme_change_ctrl_state`
/// returning false).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("controller state {from} does not go to {to}")]
pub struct InvalidTransition {
    /// The current state.
    pub from: CtrlState,
    /// The state the event asked for.
    pub to: CtrlState,
}

/// The lifecycle state machine: see the module docs.
#[derive(Debug)]
pub struct Lifecycle {
    opts: ReconnectOptions,
    state: CtrlState,
    /// When the controller was lost (left LIVE).
    lost_at: Option<Instant>,
    /// When CONNECTING was entered (the failfast timer's start, as Linux's).
    connecting_at: Option<Instant>,
    next_attempt: Option<Instant>,
    attempt_in_progress: bool,
    attempts: u32,
    failfast_expired: bool,
    next_keep_alive: Option<Instant>,
    keep_alive_in_flight: bool,
    reason: Option<String>,
    reconnects: u64,
    /// The current recovery is a controller reset: its first attempt comes at once.
    resetting: bool,
    actions: VecDeque<Action>,
}

impl Lifecycle {
    /// A controller in NEW with `opts`.
    pub fn new(opts: ReconnectOptions) -> Self {
        Lifecycle {
            opts,
            state: CtrlState::New,
            lost_at: None,
            connecting_at: None,
            next_attempt: None,
            attempt_in_progress: false,
            attempts: 0,
            failfast_expired: false,
            next_keep_alive: None,
            keep_alive_in_flight: false,
            reason: None,
            reconnects: 0,
            resetting: false,
            actions: VecDeque::new(),
        }
    }

    /// The current state.
    pub fn state(&self) -> CtrlState {
        self.state
    }
    /// The options.
    pub fn options(&self) -> &ReconnectOptions {
        &self.opts
    }
    /// Why the controller was lost (the first error of the current recovery, or the
    /// last failed attempt's error), if it was.
    pub fn reason(&self) -> Option<&str> {
        self.reason.as_deref()
    }
    /// Successful reconnects since NEW.
    pub fn reconnects(&self) -> u64 {
        self.reconnects
    }
    /// Reconnect attempts made in the current recovery.
    pub fn attempts(&self) -> u32 {
        self.attempts
    }
    /// Whether `fast_io_fail_tmo` has passed in the current recovery.
    pub fn failfast_expired(&self) -> bool {
        self.failfast_expired
    }

    /// The deadline of `ctrl_loss_tmo`, while recovering.
    fn loss_deadline(&self) -> Option<Instant> {
        Some(self.lost_at? + self.opts.ctrl_loss_tmo?)
    }

    fn failfast_deadline(&self) -> Option<Instant> {
        if self.failfast_expired {
            return None;
        }
        Some(self.connecting_at? + self.opts.fast_io_fail_tmo?)
    }

    fn go(&mut self, to: CtrlState, allowed: &[CtrlState]) -> Result<(), InvalidTransition> {
        if !allowed.contains(&self.state) {
            return Err(InvalidTransition {
                from: self.state,
                to,
            });
        }
        self.state = to;
        Ok(())
    }

    /// The controller is connected and enabled with its I/O queues (the first connect
    /// in NEW, or reconnect attempt in CONNECTING): LIVE; held I/O may be reissued;
    /// Keep Alive starts.
    pub fn connected(&mut self, now: Instant) -> Result<(), InvalidTransition> {
        let was = self.state;
        self.go(CtrlState::Live, &[CtrlState::New, CtrlState::Connecting])?;
        if was == CtrlState::Connecting {
            self.reconnects += 1;
        }
        self.lost_at = None;
        self.connecting_at = None;
        self.next_attempt = None;
        self.attempt_in_progress = false;
        self.attempts = 0;
        self.failfast_expired = false;
        self.keep_alive_in_flight = false;
        self.next_keep_alive = self.opts.keep_alive_interval().map(|i| now + i);
        Ok(())
    }

    /// A transport error, a dead QP, the target's disconnect or a lost Keep Alive
    /// (`reason` says which): a LIVE controller goes to RESETTING and asks for
    /// [`Action::TearDown`]. Returns whether this started a recovery (`false` when one
    /// is under way already, or the controller is not live).
    pub fn error(&mut self, now: Instant, reason: impl Into<String>) -> bool {
        if self.state != CtrlState::Live {
            return false;
        }
        self.state = CtrlState::Resetting;
        self.lost_at = Some(now);
        self.reason = Some(reason.into());
        self.next_keep_alive = None;
        self.keep_alive_in_flight = false;
        self.resetting = false;
        self.actions.push_back(Action::TearDown { disable: false });
        true
    }

    /// A controller reset (a command timed out and Abort did not help; Linux's
    /// `nvme_reset_ctrl`): as [`Lifecycle::error`], but the controller is disabled
    /// first ([`Action::TearDown`] with `disable`) and the first reconnect attempt
    /// comes at once instead of after `reconnect_delay` (Linux's `reset_ctrl_work`
    /// sets the controller up again directly; only a failure waits). Returns whether
    /// this started a recovery.
    pub fn reset(&mut self, now: Instant, reason: impl Into<String>) -> bool {
        if !self.error(now, reason) {
            return false;
        }
        self.resetting = true;
        if let Some(Action::TearDown { disable }) = self.actions.back_mut() {
            *disable = true;
        }
        true
    }

    /// The queues are torn down: CONNECTING; the first attempt comes after
    /// `reconnect_delay` (with `ctrl_loss_tmo` 0, [`Action::Delete`] at once).
    pub fn torn_down(&mut self, now: Instant) -> Result<(), InvalidTransition> {
        self.go(CtrlState::Connecting, &[CtrlState::Resetting])?;
        self.connecting_at = Some(now);
        if self.opts.ctrl_loss_tmo == Some(Duration::ZERO) {
            self.delete_now();
        } else if std::mem::take(&mut self.resetting) {
            self.next_attempt = Some(now);
        } else {
            self.next_attempt = Some(now + self.opts.reconnect_delay);
        }
        Ok(())
    }

    /// Reconnect attempt failed with `reason`: the next one after `reconnect_delay`
    /// while that is within `ctrl_loss_tmo`; [`Action::Delete`] when the deadline has
    /// passed.
    pub fn connect_failed(
        &mut self,
        now: Instant,
        reason: impl Into<String>,
    ) -> Result<(), InvalidTransition> {
        if self.state != CtrlState::Connecting || !self.attempt_in_progress {
            return Err(InvalidTransition {
                from: self.state,
                to: CtrlState::Connecting,
            });
        }
        self.attempt_in_progress = false;
        self.reason = Some(reason.into());
        let next = now + self.opts.reconnect_delay;
        match self.loss_deadline() {
            Some(d) if now >= d => self.delete_now(),
            Some(d) if next > d => self.next_attempt = None,
            _ => self.next_attempt = Some(next),
        }
        Ok(())
    }

    /// The caller disconnects (or drops the host): DELETING from any state but DEAD;
    /// the driver fails what is held and shuts down, then [`Lifecycle::deleted`].
    pub fn delete(&mut self) -> Result<(), InvalidTransition> {
        self.go(
            CtrlState::Deleting,
            &[
                CtrlState::New,
                CtrlState::Live,
                CtrlState::Resetting,
                CtrlState::Connecting,
                CtrlState::Deleting,
            ],
        )?;
        self.clear_timers();
        Ok(())
    }

    /// Deletion finished: DEAD.
    pub fn deleted(&mut self) -> Result<(), InvalidTransition> {
        self.go(CtrlState::Dead, &[CtrlState::Deleting])
    }

    fn clear_timers(&mut self) {
        self.next_attempt = None;
        self.next_keep_alive = None;
        self.attempt_in_progress = false;
    }

    fn delete_now(&mut self) {
        self.state = CtrlState::Deleting;
        self.clear_timers();
        self.actions.push_back(Action::Delete);
    }

    /// A Keep Alive finished: `Ok` schedules the next one (KATO/2 later); an error (a
    /// failed or timed-out Keep Alive: the controller is lost) starts a recovery as
    /// [`Lifecycle::error`] does, with the error's words as the reason.
    pub fn keep_alive_done<E: std::fmt::Display>(&mut self, now: Instant, result: Result<(), E>) {
        self.keep_alive_in_flight = false;
        if self.state != CtrlState::Live {
            return;
        }
        match result {
            Ok(()) => {
                self.next_keep_alive = self.opts.keep_alive_interval().map(|i| now + i);
            }
            Err(e) => {
                self.error(now, format!("Keep Alive lost: {e}"));
            }
        }
    }

    /// Runs the timers that are due at `now`: a Keep Alive to send, failfast's
    /// expiry, a reconnect attempt, the `ctrl_loss_tmo` deadline.
    pub fn handle_timeout(&mut self, now: Instant) {
        match self.state {
            CtrlState::Live => {
                if self.next_keep_alive.is_some_and(|t| now >= t) && !self.keep_alive_in_flight {
                    self.next_keep_alive = None;
                    self.keep_alive_in_flight = true;
                    self.actions.push_back(Action::SendKeepAlive);
                }
            }
            CtrlState::Connecting => {
                if self.failfast_deadline().is_some_and(|d| now >= d) {
                    self.failfast_expired = true;
                    self.actions.push_back(Action::FailHeldIo);
                }
                if self.attempt_in_progress {
                    return;
                }
                if self.next_attempt.is_some_and(|t| now >= t) {
                    self.next_attempt = None;
                    self.attempt_in_progress = true;
                    self.attempts += 1;
                    self.actions.push_back(Action::Reconnect {
                        attempt: self.attempts,
                    });
                } else if self.next_attempt.is_none()
                    && self.attempts > 0
                    && self.loss_deadline().is_some_and(|d| now >= d)
                {
                    self.delete_now();
                }
            }
            CtrlState::Resetting => {
                // Failfast counts from CONNECTING (Linux: nvme_start_failfast_work).
            }
            CtrlState::New | CtrlState::Deleting | CtrlState::Dead => {}
        }
    }

    /// When [`Lifecycle::handle_timeout`] has something to do next, if ever.
    pub fn poll_timeout(&self) -> Option<Instant> {
        let mut t: Option<Instant> = None;
        let mut at = |x: Option<Instant>| {
            if let Some(x) = x {
                t = Some(t.map_or(x, |t| t.min(x)));
            }
        };
        match self.state {
            CtrlState::Live if !self.keep_alive_in_flight => at(self.next_keep_alive),
            CtrlState::Connecting => {
                at(self.failfast_deadline());
                if !self.attempt_in_progress {
                    at(self.next_attempt);
                    if self.next_attempt.is_none() && self.attempts > 0 {
                        at(self.loss_deadline());
                    }
                }
            }
            _ => {}
        }
        t
    }

    /// The next action to take, in order.
    pub fn poll_action(&mut self) -> Option<Action> {
        self.actions.pop_front()
    }

    /// What to do with an I/O command now (see the module docs).
    pub fn io_disposition(&self) -> IoDisposition {
        match self.state {
            CtrlState::Live => IoDisposition::Submit,
            CtrlState::New | CtrlState::Resetting => IoDisposition::Hold,
            CtrlState::Connecting if self.failfast_expired => IoDisposition::Fail,
            CtrlState::Connecting => IoDisposition::Hold,
            CtrlState::Deleting | CtrlState::Dead => IoDisposition::Fail,
        }
    }
}

/// Whether an I/O command that ended with `result` goes back to be reissued on the
/// controller's next queues, the library's rule ([`crate::host`] module docs):
/// only after a path error (`path_error`: its queue died or was torn down) while the
/// controller recovers (`recovers`: `ctrl_loss_tmo` is not 0) and does not fail I/O
/// (`disposition` not [`IoDisposition::Fail`]); only a command the library may run
/// twice (`reissuable`: its own read, write, flush, write zeroes, deallocate; never a
/// caller's passthrough); at most [`MAX_RETRIES`] times (`retries` so far). A
/// command aborted after `io_timeout` (Command Abort Requested without DNR) counts as
/// failed by the path; any other NVMe status is the command's own answer.
pub fn may_reissue(
    result: &Result<nvme::Cqe, crate::error::HostError>,
    path_error: bool,
    recovers: bool,
    disposition: IoDisposition,
    reissuable: bool,
    retries: u8,
) -> bool {
    use crate::error::HostError;
    let hold = path_error && recovers && disposition != IoDisposition::Fail;
    let retryable = match result {
        Ok(_) => false,
        // Aborted after io_timeout: retried, as Linux's block layer does.
        Err(HostError::Nvme { status, .. }) => {
            !status.dnr && status.as_generic() == Some(nvme::status::GenericStatus::AbortRequested)
        }
        Err(_) => path_error,
    };
    hold && retryable && reissuable && retries < MAX_RETRIES
}

/// The error of an I/O command that cannot wait for the controller in `state`
/// (whose loss `reason` names, if known): [`crate::error::HostError::ControllerDead`]
/// once the controller is given up (`ctrl_loss_tmo` passed: DELETING or DEAD with a
/// reason), [`crate::error::HostError::Disconnected`] after the caller's disconnect
/// (no reason), [`crate::error::HostError::FailFast`] otherwise (`fast_io_fail_tmo`
/// passed while reconnecting).
pub fn unavailable_error(state: CtrlState, reason: Option<String>) -> crate::error::HostError {
    use crate::error::HostError;
    match (state, reason) {
        (CtrlState::Dead | CtrlState::Deleting, Some(r)) => HostError::ControllerDead(r),
        (CtrlState::Dead | CtrlState::Deleting, None) => HostError::Disconnected,
        (_, r) => HostError::FailFast(r.unwrap_or_else(|| "lost".into())),
    }
}

#[cfg(test)]
mod tests;
