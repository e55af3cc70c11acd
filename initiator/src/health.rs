//! [`ControllerHealth`]: what the thread that keeps the controller (Keep Alive, the
//! lifecycle of [`crate::lifecycle`]) and whoever drives the I/O queues share: the
//! controller's state, whether held I/O must fail (failfast), the reconnect count, the
//! errors the I/O paths report, and, once the controller is given up, why it is dead.
//!
//! When Keep Alive fails (NVMe Base 2.x §3.9: the Keep Alive Timer expired, or the
//! admin queue's transport failed) the controller is gone: commands outstanding on
//! its I/O queues will never complete, even when their own QPs are still in RTS (a
//! target that vanished after ACKing the capsules leaves the host's requester with
//! nothing to resend). Linux's nvme-rdma then cancels them in error recovery; the
//! keeper tears the queues down and reconnects ([`crate::sync_host::AdminKeeper`]),
//! or, without a reconnect, declares the controller dead here for the owner of the
//! I/O queues to fail what they hold.
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, OnceLock};

use parking_lot::Mutex;

use crate::lifecycle::{CtrlState, IoDisposition};

#[derive(Debug)]
struct Inner {
    dead: OnceLock<String>,
    state: AtomicU8,
    failfast: AtomicBool,
    reconnects: AtomicU64,
    resets: AtomicU64,
    /// The first error an I/O path reported that the keeper has not taken yet.
    reported: Mutex<Option<String>>,
    /// Why the controller was lost, while it recovers.
    reason: Mutex<Option<String>>,
    /// Commands past `io_timeout` that the keeper is to abort.
    aborts: Mutex<Vec<TimedOut>>,
}

/// An I/O command that an I/O path found outstanding past `io_timeout`: the keeper
/// sends Abort for it ([`ControllerHealth::request_abort`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TimedOut {
    /// Its queue.
    pub qid: u16,
    /// Its command identifier.
    pub cid: u16,
    /// What it is, for the log and errors (e.g. "Write (CID 3) on queue 1").
    pub what: String,
}

impl Default for Inner {
    fn default() -> Self {
        Inner {
            dead: OnceLock::new(),
            state: AtomicU8::new(CtrlState::Live.to_u8()),
            failfast: AtomicBool::new(false),
            reconnects: AtomicU64::new(0),
            resets: AtomicU64::new(0),
            reported: Mutex::new(None),
            reason: Mutex::new(None),
            aborts: Mutex::new(Vec::new()),
        }
    }
}

/// The shared controller health: see the module docs. Clones share it. A new one is
/// LIVE.
#[derive(Clone, Debug, Default)]
pub struct ControllerHealth(Arc<Inner>);

impl ControllerHealth {
    /// A healthy (LIVE) controller.
    pub fn new() -> Self {
        Self::default()
    }

    /// Declares the controller dead because of `reason` (e.g. the Keep Alive error, or
    /// `ctrl_loss_tmo` passed): state DEAD. Only the first reason is kept.
    pub fn declare_dead(&self, reason: impl Into<String>) {
        let _ = self.0.dead.set(reason.into());
        self.set_state(CtrlState::Dead);
    }

    /// Why the controller was declared dead; `None` while it is not.
    pub fn dead_reason(&self) -> Option<&str> {
        self.0.dead.get().map(String::as_str)
    }

    /// The controller's state as the keeper last set it.
    pub fn state(&self) -> CtrlState {
        CtrlState::from_u8(self.0.state.load(Ordering::Acquire))
    }

    /// Sets the state (the keeper's job); LIVE clears failfast and the loss reason.
    pub fn set_state(&self, s: CtrlState) {
        if s == CtrlState::Live {
            self.0.failfast.store(false, Ordering::Release);
            *self.0.reason.lock() = None;
        }
        self.0.state.store(s.to_u8(), Ordering::Release);
    }

    /// Marks failfast expired (`fast_io_fail_tmo` passed): I/O fails until LIVE.
    pub fn set_failfast(&self) {
        self.0.failfast.store(true, Ordering::Release);
    }

    /// What to do with an I/O command now: as [`crate::lifecycle::Lifecycle::io_disposition`]
    /// of the keeper's lifecycle.
    pub fn io_disposition(&self) -> IoDisposition {
        match self.state() {
            CtrlState::Live => IoDisposition::Submit,
            CtrlState::Deleting | CtrlState::Dead => IoDisposition::Fail,
            _ if self.0.failfast.load(Ordering::Acquire) => IoDisposition::Fail,
            _ => IoDisposition::Hold,
        }
    }

    /// An I/O path saw its queue fail (`reason`): the keeper starts a recovery. Only
    /// the first report until the keeper takes it is kept.
    pub fn report_error(&self, reason: impl Into<String>) {
        let mut r = self.0.reported.lock();
        if r.is_none() {
            *r = Some(reason.into());
        }
    }

    /// Asks the keeper to Abort a command past `io_timeout`.
    pub fn request_abort(&self, t: TimedOut) {
        self.0.aborts.lock().push(t);
    }

    /// Takes the Abort requests (the keeper's job).
    pub fn take_abort_requests(&self) -> Vec<TimedOut> {
        std::mem::take(&mut *self.0.aborts.lock())
    }

    /// Takes the reported error (the keeper's job).
    pub fn take_reported(&self) -> Option<String> {
        self.0.reported.lock().take()
    }

    /// Records why the controller was lost (shown in the errors of held I/O).
    pub fn set_reason(&self, reason: impl Into<String>) {
        *self.0.reason.lock() = Some(reason.into());
    }

    /// Why the controller was lost (while it recovers), or why it is dead.
    pub fn reason(&self) -> Option<String> {
        if let Some(d) = self.dead_reason() {
            return Some(d.to_string());
        }
        self.0.reason.lock().clone()
    }

    /// Counts a successful reconnect.
    pub fn count_reconnect(&self) {
        self.0.reconnects.fetch_add(1, Ordering::AcqRel);
    }

    /// Counts a controller reset (a command past `io_timeout` that Abort did not
    /// help).
    pub fn count_reset(&self) {
        self.0.resets.fetch_add(1, Ordering::AcqRel);
    }

    /// Controller resets started so far.
    pub fn resets(&self) -> u64 {
        self.0.resets.load(Ordering::Acquire)
    }

    /// Successful reconnects so far.
    pub fn reconnects(&self) -> u64 {
        self.0.reconnects.load(Ordering::Acquire)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_reason_is_shared_by_clones() {
        let h = ControllerHealth::new();
        let seen = h.clone();
        assert_eq!(seen.dead_reason(), None);
        assert_eq!(seen.io_disposition(), IoDisposition::Submit);
        h.declare_dead("Keep Alive timed out");
        h.declare_dead("later");
        assert_eq!(seen.dead_reason(), Some("Keep Alive timed out"));
        assert_eq!(seen.state(), CtrlState::Dead);
        assert_eq!(seen.io_disposition(), IoDisposition::Fail);
    }

    #[test]
    fn holds_while_reconnecting_and_fails_after_failfast() {
        let h = ControllerHealth::new();
        h.report_error("queue 1: IBV_WC_RETRY_EXC_ERR");
        h.report_error("queue 2: too");
        assert_eq!(
            h.take_reported().as_deref(),
            Some("queue 1: IBV_WC_RETRY_EXC_ERR")
        );
        assert_eq!(h.take_reported(), None);
        h.set_state(CtrlState::Connecting);
        h.set_reason("lost");
        assert_eq!(h.io_disposition(), IoDisposition::Hold);
        h.set_failfast();
        assert_eq!(h.io_disposition(), IoDisposition::Fail);
        assert_eq!(h.reason().as_deref(), Some("lost"));
        h.set_state(CtrlState::Live);
        h.count_reconnect();
        assert_eq!(
            (h.io_disposition(), h.reconnects(), h.reason()),
            (IoDisposition::Submit, 1, None)
        );
    }
}
