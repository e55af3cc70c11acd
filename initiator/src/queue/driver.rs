//! [`NvmeRdmaQueue`]: executes a [`QueueCore`]'s decisions on one poll group, QP and CQ
//! of any provider (`P: Provider`, static dispatch through the transport's provider
//! traits). Every data-path provider call of the host is in this file (`post_send`,
//! `post_recv`, `poll_cq`, progress, the CQ's arming and wait, the CM's disconnect).
use std::time::{Duration, Instant};

use crossbeam::channel::{Receiver, RecvTimeoutError};
use nvme::Sqe;
use transport::cm::{CmEvent, ConnId};
use transport::soft::SoftProvider;
use transport::verbs::{
    CmOf, ConnectionManager as _, Context as _, ContextOf, Cq, MemoryRegion as _, MrOf, Pd,
    Provider, Qp, WcOpcode, WcStatus, WorkCompletion,
};

use super::core::{Action, PostFailure, QueueCore, Submission, CQE_LEN, RSP_LEN};
use super::QueueCompletion;
use crate::capsule::DataDir;
use crate::error::QueueError;
use crate::pool::{BufferPool, IoBuf};

/// Work completions taken from the CQ per `poll_cq` call.
const WC_BATCH: usize = 64;

/// One NVMe queue over one RC QP of provider `P` (the soft provider unless named, so
/// `NvmeRdmaQueue` alone is the soft provider's; `NvmeRdmaQueue<VerbsProvider>` runs on
/// a real RDMA device): see the [module docs](super).
pub struct NvmeRdmaQueue<P: Provider = SoftProvider> {
    pub(super) core: QueueCore,
    pub(super) ctx: ContextOf<P>,
    pub(super) cm: CmOf<P>,
    pub(super) conn: ConnId,
    pub(super) cm_events: Receiver<CmEvent>,
    pub(super) pd: Pd,
    pub(super) qp: Qp,
    pub(super) cq: Cq,
    /// The host's buffer pool (for the copying conveniences, `submit_with`).
    pub(super) pool: BufferPool,
    /// The data buffer each outstanding command carries, by CID: handed back with its
    /// completion.
    pub(super) bufs: Vec<Option<IoBuf>>,
    pub(super) sqe_mr: MrOf<P>,
    pub(super) rsp_mr: MrOf<P>,
    pub(super) wc_buf: Vec<WorkCompletion>,
    /// Completions [`NvmeRdmaQueue::wait`] took from the CQ after arming it
    /// (`wc_buf[..stashed]`), handled first by the next [`NvmeRdmaQueue::poll`].
    pub(super) stashed: usize,
}

impl<P: Provider> std::fmt::Debug for NvmeRdmaQueue<P> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NvmeRdmaQueue")
            .field("qid", &self.core.qid())
            .field("qpn", &self.qp.qpn())
            .field("outstanding", &self.core.outstanding())
            .field("dead", &self.core.dead_reason())
            .finish()
    }
}

/// The work completion buffer of a queue.
pub(super) fn wc_buffer() -> Vec<WorkCompletion> {
    vec![WorkCompletion::new(0, WcStatus::Success, WcOpcode::Send, 0); WC_BATCH]
}

impl<P: Provider> NvmeRdmaQueue<P> {
    /// The queue ID.
    pub fn qid(&self) -> u16 {
        self.core.qid()
    }
    /// Command slots (= command identifiers `0..depth`).
    pub fn depth(&self) -> u16 {
        self.core.depth()
    }
    /// Most commands in flight at once: the SQ size minus one (a full SQ keeps one
    /// entry empty, NVMe Base 2.x §3.3.1.2.2).
    pub fn max_outstanding(&self) -> usize {
        self.core.max_outstanding()
    }
    /// Commands submitted and not yet completed.
    pub fn outstanding(&self) -> usize {
        self.core.outstanding()
    }
    /// Data buffer bytes per command.
    pub fn max_io_bytes(&self) -> usize {
        self.core.max_io_bytes()
    }
    /// In-capsule data bytes a host-to-controller command may carry.
    pub fn in_capsule_bytes(&self) -> usize {
        self.core.in_capsule_bytes()
    }
    /// Whether a transport error or a disconnect ended the queue.
    pub fn is_dead(&self) -> bool {
        self.core.dead_reason().is_some()
    }
    /// What ended the queue, if it is dead.
    pub fn dead_reason(&self) -> Option<&str> {
        self.core.dead_reason()
    }
    /// The protection domain of the queue's memory.
    pub fn pd(&self) -> Pd {
        self.pd
    }
    /// The local QP number.
    pub fn qp_num(&self) -> u32 {
        self.qp.qpn()
    }
    /// The poll group.
    pub fn context(&self) -> &ContextOf<P> {
        &self.ctx
    }
    /// The key last bound on slot `cid`'s memory window (dead once the command that
    /// used it completed); `None` on a queue without windows.
    pub fn window_key(&self, cid: u16) -> Option<u32> {
        self.core.window_key(cid)
    }
    /// The host's buffer pool this queue's commands take their data buffers from.
    pub fn pool(&self) -> &BufferPool {
        &self.pool
    }
    /// Bytes this queue registered itself (its SQE and response slots; data buffers
    /// are the pool's).
    pub fn registered_bytes(&self) -> usize {
        self.sqe_mr.len() + self.rsp_mr.len()
    }

    /// Notices a DREQ from the target (cheap when no CM event is pending).
    fn check_cm_events(&mut self) {
        if !self.core.is_disconnected() && !self.cm_events.is_empty() {
            self.peer_disconnected();
        }
    }

    /// Whether a command can be submitted now (a free slot and SQ room).
    pub fn can_submit(&self) -> bool {
        self.core.can_submit()
    }

    /// Submits `sqe` (its CID and SGL are filled in here) in a free slot with `data` in
    /// `buf`, a buffer of this queue's pool (from its first byte; `None` only for no
    /// data), which the queue holds until the command completes and then hands back in
    /// its [`QueueCompletion`]; returns the command identifier. No copy: the target
    /// reads or writes `buf` itself (or the capsule SEND gathers it). Errors, with
    /// `buf` handed back: [`QueueError::Full`] (poll and retry), [`QueueError::TooLarge`],
    /// [`QueueError::ShortBuffer`], [`QueueError::Dead`], [`QueueError::Verbs`].
    // The error carries the buffer back by value: no allocation on the data path
    // (`Full` is routine there), so it is not boxed.
    #[allow(clippy::result_large_err)]
    pub fn submit(
        &mut self,
        sqe: Sqe,
        data: DataDir,
        buf: Option<IoBuf>,
    ) -> Result<u16, SubmitError> {
        self.check_cm_events();
        let span = buf.as_ref().map(IoBuf::span);
        match self.core.submit(sqe, data, span) {
            Ok(s) => self.execute(s, buf),
            Err(error) => Err(SubmitError { error, buf }),
        }
    }

    /// Like [`submit`](Self::submit) with a buffer of `data.len()` bytes taken from the
    /// pool (if it has one free now: otherwise [`QueueError::Full`]) and filled by
    /// `fill` first (to copy a write's data in). The buffer comes back with the
    /// completion (a read's data).
    pub fn submit_with(
        &mut self,
        sqe: Sqe,
        data: DataDir,
        fill: impl FnOnce(&mut [u8]),
    ) -> Result<u16, QueueError> {
        self.core.next_free_slot()?;
        let buf = match data.len() {
            0 => None,
            n => Some(self.pool.try_alloc(n)?.ok_or(QueueError::Full)?),
        };
        let mut buf = buf;
        if let Some(b) = buf.as_mut() {
            fill(b);
        }
        self.submit(sqe, data, buf).map_err(|e| e.error)
    }

    /// Like [`submit`](Self::submit) in the slot the caller chose (e.g. a bench tag):
    /// [`QueueError::BadCid`] if `cid` is out of range or in use.
    // The error carries the buffer back by value: no allocation on the data path
    // (`Full` is routine there), so it is not boxed.
    #[allow(clippy::result_large_err)]
    pub fn submit_cid(
        &mut self,
        cid: u16,
        sqe: Sqe,
        data: DataDir,
        buf: Option<IoBuf>,
    ) -> Result<(), SubmitError> {
        self.check_cm_events();
        let span = buf.as_ref().map(IoBuf::span);
        match self.core.submit_cid(cid, sqe, data, span) {
            Ok(s) => self.execute(s, buf).map(|_| ()),
            Err(error) => Err(SubmitError { error, buf }),
        }
    }

    /// Submits `sqe` exactly as given (flags, PSDT, SGL and every other byte untouched
    /// but the CID, set to the chosen slot), followed by `in_capsule` as in-capsule data
    /// (copied into a pool buffer), as one SEND of `64 + in_capsule.len()` bytes (NVMe
    /// RDMA Transport 1.x §2.1: a command capsule is the SQE plus optional data). For
    /// tests of how a controller answers malformed capsules; the command completes
    /// through [`poll`](Self::poll) like any other. No memory window is bound: a keyed
    /// SGL in `sqe` grants no key, so it should use identifier 40h (no invalidate),
    /// since a SEND with Invalidate of a key this queue did not grant fails the queue.
    ///
    /// Returns the command identifier. Errors: [`QueueError::Full`] (also when the pool
    /// has no buffer free now), [`QueueError::TooLarge`] (`in_capsule` longer than
    /// `max_io_bytes`), [`QueueError::Dead`], [`QueueError::Verbs`].
    pub fn submit_raw(&mut self, sqe: Sqe, in_capsule: &[u8]) -> Result<u16, QueueError> {
        self.check_cm_events();
        let buf = match in_capsule.len() {
            0 => None,
            n => {
                let mut b = self.pool.try_alloc(n)?.ok_or(QueueError::Full)?;
                b.copy_from_slice(in_capsule);
                Some(b)
            }
        };
        let s = self.core.submit_raw(sqe, buf.as_ref().map(IoBuf::span))?;
        self.execute(s, buf).map_err(|e| e.error)
    }

    /// Sends `bytes` (at most 64) alone as one SEND: a capsule shorter than an SQE,
    /// which a controller cannot answer (it has no CID) and must drop. Takes no SQ
    /// entry and produces no completion; a slot is busy until the SEND completes (seen
    /// by a later [`poll`](Self::poll)). For tests. Errors: [`QueueError::Full`],
    /// [`QueueError::TooLarge`] (over 64 bytes), [`QueueError::Dead`],
    /// [`QueueError::Verbs`].
    pub fn send_runt(&mut self, bytes: &[u8]) -> Result<(), QueueError> {
        self.check_cm_events();
        let s = self.core.send_runt(bytes)?;
        self.execute(s, None).map(|_| ()).map_err(|e| e.error)
    }

    /// Writes a submission's SQE, posts its bind and SEND, and lets the core commit or
    /// undo it; a committed command holds `buf` until it completes.
    // The error carries the buffer back by value: no allocation on the data path
    // (`Full` is routine there), so it is not boxed.
    #[allow(clippy::result_large_err)]
    fn execute(&mut self, s: Submission, buf: Option<IoBuf>) -> Result<u16, SubmitError> {
        if s.turns_on_deferred_acks() {
            // From the first I/O command on, ACKs for what `poll` receives leave with
            // the next command's capsule (or at the next poll/progress/wait).
            self.ctx.set_deferred_transmit(true);
        }
        self.sqe_mr.write(s.sqe_offset(), s.sqe_bytes());
        let posted = match s.bind() {
            Some(bind) => self.ctx.post_send(self.qp, bind).map_err(PostFailure::Bind),
            None => Ok(()),
        }
        .and_then(|()| {
            self.ctx
                .post_send(self.qp, s.send())
                .map_err(PostFailure::Send)
        });
        match self.core.submitted(s, posted) {
            Ok(cid) => {
                self.bufs[usize::from(cid)] = buf;
                Ok(cid)
            }
            Err(error) => Err(SubmitError { error, buf }),
        }
    }

    /// Makes the posts the core asked for after an event.
    fn run_actions(&mut self, out: &mut Vec<QueueCompletion>) {
        while let Some(a) = self.core.poll_action() {
            let r = match &a {
                Action::PostSend(wr) => self.ctx.post_send(self.qp, wr),
                Action::PostRecv(wr) => self.ctx.post_recv(self.qp, wr),
            };
            if let Err(e) = r {
                self.core.post_failed(a.wr_id(), e, out);
            }
        }
    }

    /// Drives the poll group and appends finished commands to `out`; returns how many
    /// it appended. Never blocks. Call it in a loop while commands are outstanding.
    pub fn poll(&mut self, out: &mut Vec<QueueCompletion>) -> usize {
        let before = out.len();
        let mut wcs = std::mem::take(&mut self.wc_buf);
        let mut n = std::mem::take(&mut self.stashed);
        loop {
            if n == 0 {
                n = self.ctx.poll_cq(self.cq, &mut wcs);
            }
            for wc in &wcs[..n] {
                self.handle_wc(wc, out);
            }
            if n < wcs.len() {
                break;
            }
            n = 0;
        }
        self.wc_buf = wcs;
        self.check_cm_events();
        // Also when a submission noticed the DREQ first: what was outstanding then
        // will never complete.
        self.core.fail_if_peer_gone(out);
        for c in &mut out[before..] {
            if let Some(b) = self.bufs.get_mut(usize::from(c.cid)) {
                c.buf = b.take();
            }
        }
        out.len() - before
    }

    /// Hands one work completion (with its response capsule's CQE, for a receive) to
    /// the core and makes the posts it asks for.
    fn handle_wc(&mut self, wc: &WorkCompletion, out: &mut Vec<QueueCompletion>) {
        let rsp = self.core.response_index(wc).map(|i| {
            let mut raw = [0u8; CQE_LEN];
            self.rsp_mr.read(i * RSP_LEN, &mut raw);
            raw
        });
        self.core.handle_wc(wc, rsp, out);
        self.run_actions(out);
    }

    /// One round of the poll group without reaping completions (keeps ACKs and
    /// retransmissions going when nothing is outstanding; nothing to do on a provider
    /// whose device works on its own, such as the verbs provider).
    pub fn progress(&mut self) {
        self.ctx.progress();
    }

    /// Sleeps up to `timeout` until the queue's CQ has a completion (or the poll group
    /// has other work: the soft provider wakes for every packet and timer; see
    /// [`transport::verbs::Context::wait`]). Arms the CQ (`ibv_req_notify_cq`) and
    /// polls it once more first, so a completion that arrived after the last
    /// [`poll`](Self::poll) is not slept over: it is kept for the next `poll`, which
    /// should follow every `wait`.
    pub fn wait(&mut self, timeout: Duration) {
        if self.stashed > 0 {
            return;
        }
        if self.ctx.req_notify_cq(self.cq).is_err() {
            // Unknown CQ: cannot happen for the queue's own; sleep the time out.
            self.ctx.wait(timeout);
            return;
        }
        self.stashed = self.ctx.poll_cq(self.cq, &mut self.wc_buf);
        if self.stashed == 0 {
            self.ctx.wait(timeout);
        }
    }

    /// Disconnects (RDMA CM DREQ) and waits up to `timeout` for the DREP. The queue is
    /// dead afterwards; outstanding commands are not completed.
    pub fn disconnect(&mut self, timeout: Duration) {
        if !self.core.on_local_disconnect() {
            return;
        }
        if self.cm.disconnect(self.conn).is_err() {
            return;
        }
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            match self.cm_events.recv_timeout(Duration::from_millis(1)) {
                Ok(CmEvent::Disconnected { .. }) | Ok(CmEvent::Unreachable { .. }) => break,
                Err(RecvTimeoutError::Disconnected) => break,
                _ => self.ctx.progress(),
            };
        }
    }

    /// Tears the queue down for a reconnect: reaps what already completed, disconnects
    /// (RDMA CM DREQ, waiting up to `timeout` for the DREP) so the target can no longer
    /// reach the buffers, then cancels what is still outstanding with `err`. Every
    /// command comes back in `out` with its buffer (completed, or failed with `err`
    /// for reissue).
    pub fn tear_down(
        &mut self,
        err: crate::error::HostError,
        timeout: Duration,
        out: &mut Vec<QueueCompletion>,
    ) {
        let before = out.len();
        self.poll(out);
        self.disconnect(timeout);
        self.core.cancel_all(err, out);
        for c in &mut out[before..] {
            if c.buf.is_none() {
                if let Some(b) = self.bufs.get_mut(usize::from(c.cid)) {
                    c.buf = b.take();
                }
            }
        }
    }

    /// Whether the target disconnected the queue (a DREQ arrived). Non-blocking.
    pub fn peer_disconnected(&mut self) -> bool {
        while let Ok(ev) = self.cm_events.try_recv() {
            if matches!(
                ev,
                CmEvent::Disconnected { .. } | CmEvent::Unreachable { .. }
            ) {
                self.core.on_peer_disconnected();
            }
        }
        self.core.is_disconnected()
    }
}

/// A submission the queue refused, with the buffer handed back.
#[derive(Debug, thiserror::Error)]
#[error("{error}")]
pub struct SubmitError {
    /// Why.
    pub error: QueueError,
    /// The buffer the submission carried.
    pub buf: Option<IoBuf>,
}

impl From<SubmitError> for QueueError {
    fn from(e: SubmitError) -> Self {
        e.error
    }
}

impl From<SubmitError> for crate::error::HostError {
    fn from(e: SubmitError) -> Self {
        e.error.into()
    }
}

impl<P: Provider> Drop for NvmeRdmaQueue<P> {
    fn drop(&mut self) {
        if !self.core.is_disconnected() {
            let _ = self.cm.disconnect(self.conn);
        }
        let _ = self.ctx.destroy_qp(self.qp);
    }
}
