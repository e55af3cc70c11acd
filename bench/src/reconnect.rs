//! Reconnect for `nvmf-bench` (`--ctrl-loss-tmo`, `--reconnect-delay`,
//! `--fast-io-fail-tmo`): the host library's keeper ([`AdminKeeper`] with an
//! [`IoQueueSet`]) runs the controller's lifecycle; each job's [`QueueEngine`] owns its
//! queue on its own thread, so the two meet in a [`QueueSlot`]:
//!
//! 1. the keeper asks for a teardown ([`QueueSlot::ask_tear_down`]); the engine, at
//!    its next poll, tears its queue down (outstanding commands come back with their
//!    buffers and are held), drops it (freeing its poll group) and says so; the keeper
//!    waits for that (at most [`TEARDOWN_WAIT`]);
//! 2. the keeper connects a new queue per job on the new controller and puts it in the
//!    slot; the engine takes it and reissues what it held (same LBAs, same data: the
//!    tag's buffer);
//! 3. or the keeper gives up (`fast_io_fail_tmo`, `ctrl_loss_tmo`): the slot carries
//!    the error and the engine fails what it holds with it.
//!
//! Every reconnect is a line on standard error; the count goes under the JSON's
//! `"nvmf-bench"` key (`"reconnects"`).
//!
//! [`QueueEngine`]: crate::QueueEngine
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use std::sync::{Condvar, Mutex, MutexGuard};

use nvmf_initiator::keeper::{reconnect_io_queues, AdminKeeper, IoQueueSet};
use nvmf_initiator::{Controller, HostError, NvmeRdmaQueue};
use transport::verbs::{DeviceOf, Provider};

/// How long the keeper waits for the job threads to hand their queues back.
pub const TEARDOWN_WAIT: Duration = Duration::from_secs(5);

/// Where a slot stands.
enum Handoff<P: Provider> {
    /// The engine has its queue.
    Running,
    /// The engine dropped its queue and holds its commands.
    TornDown,
    /// A new queue for the engine.
    New(NvmeRdmaQueue<P>),
    /// The controller was given up (or failfast): fail what is held.
    Failed(HostError),
}

/// One job's meeting point with the keeper: see the module docs.
pub struct QueueSlot<P: Provider> {
    qid: u16,
    asked: AtomicBool,
    reason: Mutex<String>,
    state: Mutex<Handoff<P>>,
    changed: Condvar,
}

impl<P: Provider> std::fmt::Debug for QueueSlot<P> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QueueSlot").field("qid", &self.qid).finish()
    }
}

/// What the engine finds in its slot when it has no queue.
pub enum SlotNews<P: Provider> {
    /// Nothing yet: keep holding.
    Wait,
    /// The new queue.
    Queue(NvmeRdmaQueue<P>),
    /// Give up with this error.
    Failed(HostError),
}

impl<P: Provider> QueueSlot<P> {
    /// The slot of I/O queue `qid`.
    pub fn new(qid: u16) -> Self {
        QueueSlot {
            qid,
            asked: AtomicBool::new(false),
            reason: Mutex::new(String::new()),
            state: Mutex::new(Handoff::Running),
            changed: Condvar::new(),
        }
    }

    /// The keeper asks for a teardown because of `reason`.
    pub fn ask_tear_down(&self, reason: &str) {
        *self.reason.lock().unwrap_or_else(|e| e.into_inner()) = reason.to_string();
        self.asked.store(true, Ordering::Release);
    }

    /// Whether a teardown is asked for (the engine's cheap check, every poll).
    pub fn tear_down_asked(&self) -> bool {
        self.asked.load(Ordering::Acquire)
    }

    /// Why the teardown was asked for.
    pub fn reason(&self) -> String {
        self.reason
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// The engine dropped its queue.
    pub fn torn_down(&self) {
        self.asked.store(false, Ordering::Release);
        *self.state.lock().unwrap_or_else(|e| e.into_inner()) = Handoff::TornDown;
        self.changed.notify_all();
    }

    /// What the engine (without a queue) finds.
    pub fn take_news(&self) -> SlotNews<P> {
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        match std::mem::replace(&mut *st, Handoff::TornDown) {
            Handoff::New(q) => {
                *st = Handoff::Running;
                SlotNews::Queue(q)
            }
            Handoff::Failed(e) => {
                *st = Handoff::Failed(e.clone());
                SlotNews::Failed(e)
            }
            other => {
                *st = other;
                SlotNews::Wait
            }
        }
    }

    /// Waits until the engine dropped its queue, at most until `deadline`.
    fn wait_torn_down(&self, deadline: Instant) -> bool {
        let mut st: MutexGuard<'_, Handoff<P>> =
            self.state.lock().unwrap_or_else(|e| e.into_inner());
        while !matches!(*st, Handoff::TornDown | Handoff::Failed(_)) {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            st = match self.changed.wait_timeout(st, left) {
                Ok((g, _)) => g,
                Err(e) => e.into_inner().0,
            };
        }
        true
    }
}

/// The bench's [`IoQueueSet`]: one slot per job.
pub struct BenchQueues<P: Provider> {
    slots: Vec<Arc<QueueSlot<P>>>,
    depth: u16,
    max_io_bytes: usize,
    reconnects: AtomicU64,
    reason: Mutex<String>,
}

impl<P: Provider> BenchQueues<P> {
    /// Slots for `slots` (queue `i + 1` at index `i`), queues of `depth` entries and
    /// `max_io_bytes` per command as first connected.
    pub fn new(slots: Vec<Arc<QueueSlot<P>>>, depth: u16, max_io_bytes: usize) -> Self {
        BenchQueues {
            slots,
            depth,
            max_io_bytes,
            reconnects: AtomicU64::new(0),
            reason: Mutex::new(String::new()),
        }
    }

    /// Reconnects so far.
    pub fn reconnects(&self) -> u64 {
        self.reconnects.load(Ordering::Acquire)
    }
}

impl<P: Provider> IoQueueSet<P> for BenchQueues<P> {
    fn tear_down(&self, reason: &str) {
        *self.reason.lock().unwrap_or_else(|e| e.into_inner()) = reason.to_string();
        for s in &self.slots {
            s.ask_tear_down(reason);
        }
        let deadline = Instant::now() + TEARDOWN_WAIT;
        for s in &self.slots {
            if !s.wait_torn_down(deadline) {
                eprintln!(
                    "nvmf-bench: the job of queue {} did not hand its queue back within {} s",
                    s.qid,
                    TEARDOWN_WAIT.as_secs()
                );
            }
        }
    }

    fn reconnect(
        &self,
        controller: &mut Controller<P>,
        dev: &Arc<DeviceOf<P>>,
    ) -> Result<(), HostError> {
        let qids: Vec<u16> = self.slots.iter().map(|s| s.qid).collect();
        let queues = reconnect_io_queues(controller, dev, &qids, self.depth, self.max_io_bytes)?;
        for (s, q) in self.slots.iter().zip(queues) {
            *s.state.lock().unwrap_or_else(|e| e.into_inner()) = Handoff::New(q);
        }
        let k = self.reconnects.fetch_add(1, Ordering::AcqRel) + 1;
        eprintln!(
            "nvmf-bench: reconnected to {} (controller {}, reconnect {k}) after: {}",
            controller.options().traddr,
            controller.cntlid(),
            self.reason.lock().unwrap_or_else(|e| e.into_inner())
        );
        Ok(())
    }

    fn fail_held(&self, error: &HostError) {
        for s in &self.slots {
            *s.state.lock().unwrap_or_else(|e| e.into_inner()) = Handoff::Failed(error.clone());
        }
    }
}

/// Starts the keeper of `controller` with reconnects over the jobs' `slots`.
pub fn start_keeper<P: Provider>(
    controller: Controller<P>,
    opts: nvmf_initiator::lifecycle::ReconnectOptions,
    queues: Arc<BenchQueues<P>>,
) -> AdminKeeper<P> {
    AdminKeeper::start_with_recovery(
        controller,
        opts,
        nvmf_initiator::ControllerHealth::new(),
        queues,
    )
}
