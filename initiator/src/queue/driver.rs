//! [`NvmeRdmaQueue`]: executes a [`QueueCore`]'s decisions on one poll group, QP and CQ
//! of the soft provider. Every data-path provider call of the host is in this file
//! (`post_send`, `post_recv`, `poll_cq`, progress, wait, the CM's disconnect), so the
//! switch to the transport's provider traits touches it and `connect` alone.
use std::time::{Duration, Instant};

use crossbeam::channel::{Receiver, RecvTimeoutError};
use nvme::Sqe;
use transport::cm::{CmEvent, ConnId};
use transport::soft::{CmAgent, Context, Cq, Mr, Pd, Qp};
use transport::verbs::{WcOpcode, WcStatus, WorkCompletion};

use super::core::{Action, PostFailure, QueueCore, Submission, CQE_LEN, RSP_LEN};
use super::QueueCompletion;
use crate::capsule::DataDir;
use crate::error::QueueError;

/// Work completions taken from the CQ per `poll_cq` call.
const WC_BATCH: usize = 64;

/// One NVMe queue over one RC QP: see the [module docs](super).
pub struct NvmeRdmaQueue {
    pub(super) core: QueueCore,
    pub(super) ctx: Context,
    pub(super) cm: CmAgent,
    pub(super) conn: ConnId,
    pub(super) cm_events: Receiver<CmEvent>,
    pub(super) pd: Pd,
    pub(super) qp: Qp,
    pub(super) cq: Cq,
    pub(super) data_mr: Mr,
    pub(super) sqe_mr: Mr,
    pub(super) rsp_mr: Mr,
    pub(super) wc_buf: Vec<WorkCompletion>,
}

impl std::fmt::Debug for NvmeRdmaQueue {
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

impl NvmeRdmaQueue {
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
    /// The protection domain of the queue's memory.
    pub fn pd(&self) -> Pd {
        self.pd
    }
    /// The local QP number.
    pub fn qp_num(&self) -> u32 {
        self.qp.qpn()
    }
    /// The poll group.
    pub fn context(&self) -> &Context {
        &self.ctx
    }
    /// The iova of slot `cid`'s data buffer (what a keyed SGL of that slot names).
    pub fn buffer_addr(&self, cid: u16) -> u64 {
        self.core.buffer_addr(cid)
    }
    /// The key last bound on slot `cid`'s memory window (dead once the command that
    /// used it completed).
    pub fn window_key(&self, cid: u16) -> Option<u32> {
        self.core.window_key(cid)
    }

    /// Slot `cid`'s data buffer (`max_io_bytes`): fill it before submitting a write,
    /// read it after a read completed (until the slot is reused). Panics if `cid` is
    /// not below `depth` (a caller bug).
    pub fn buffer_mut(&mut self, cid: u16) -> &mut [u8] {
        assert!(cid < self.core.depth(), "cid {cid} out of range");
        let off = self.core.buffer_offset(cid);
        // SAFETY: in range of the MR; the provider touches this memory only inside
        // `poll`/`progress`, which need `&mut self` too.
        unsafe {
            std::slice::from_raw_parts_mut(self.data_mr.as_ptr().add(off), self.max_io_bytes())
        }
    }

    /// Slot `cid`'s data buffer, read-only. Panics if `cid` is out of range.
    pub fn buffer(&self, cid: u16) -> &[u8] {
        assert!(cid < self.core.depth(), "cid {cid} out of range");
        let off = self.core.buffer_offset(cid);
        // SAFETY: as in `buffer_mut`.
        unsafe { std::slice::from_raw_parts(self.data_mr.as_ptr().add(off), self.max_io_bytes()) }
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

    /// Submits `sqe` (its CID and SGL are filled in here) with `data` in a free slot's
    /// buffer; returns the command identifier. Errors: [`QueueError::Full`],
    /// [`QueueError::TooLarge`], [`QueueError::Dead`], [`QueueError::Verbs`].
    pub fn submit(&mut self, sqe: Sqe, data: DataDir) -> Result<u16, QueueError> {
        self.check_cm_events();
        let s = self.core.submit(sqe, data)?;
        self.execute(s)
    }

    /// Like [`submit`](Self::submit), calling `fill` with the chosen slot's data buffer
    /// first (to copy a write's data in).
    pub fn submit_with(
        &mut self,
        sqe: Sqe,
        data: DataDir,
        fill: impl FnOnce(&mut [u8]),
    ) -> Result<u16, QueueError> {
        let cid = self.core.next_free_slot(data.len())?;
        fill(self.buffer_mut(cid));
        self.submit(sqe, data)
    }

    /// Like [`submit`](Self::submit) in the slot the caller chose (e.g. a bench tag):
    /// [`QueueError::BadCid`] if `cid` is out of range or in use.
    pub fn submit_cid(&mut self, cid: u16, sqe: Sqe, data: DataDir) -> Result<(), QueueError> {
        self.check_cm_events();
        let s = self.core.submit_cid(cid, sqe, data)?;
        self.execute(s).map(|_| ())
    }

    /// Submits `sqe` exactly as given (flags, PSDT, SGL and every other byte untouched
    /// but the CID, set to the chosen slot), followed by `in_capsule` as in-capsule data,
    /// as one SEND of `64 + in_capsule.len()` bytes (NVMe RDMA Transport 1.x §2.1: a
    /// command capsule is the SQE plus optional data). For tests of how a controller
    /// answers malformed capsules; the command completes through [`poll`](Self::poll)
    /// like any other. No memory window is bound: a keyed SGL in `sqe` grants no key, so
    /// it should use identifier 40h (no invalidate), since a SEND with Invalidate of a
    /// key this queue did not grant fails the queue.
    ///
    /// Returns the command identifier. Errors: [`QueueError::Full`],
    /// [`QueueError::TooLarge`] (`in_capsule` longer than `max_io_bytes`),
    /// [`QueueError::Dead`], [`QueueError::Verbs`].
    pub fn submit_raw(&mut self, sqe: Sqe, in_capsule: &[u8]) -> Result<u16, QueueError> {
        self.check_cm_events();
        let s = self.core.submit_raw(sqe, in_capsule.len())?;
        self.buffer_mut(s.cid())[..in_capsule.len()].copy_from_slice(in_capsule);
        self.execute(s)
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
        self.execute(s).map(|_| ())
    }

    /// Writes a submission's SQE, posts its bind and SEND, and lets the core commit or
    /// undo it.
    fn execute(&mut self, s: Submission) -> Result<u16, QueueError> {
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
        self.core.submitted(s, posted)
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
    /// it appended. Call it in a loop while commands are outstanding.
    pub fn poll(&mut self, out: &mut Vec<QueueCompletion>) -> usize {
        let before = out.len();
        loop {
            let mut wcs = std::mem::take(&mut self.wc_buf);
            let n = self.ctx.poll_cq(self.cq, &mut wcs);
            for wc in &wcs[..n] {
                let rsp = self.core.response_index(wc).map(|i| {
                    let mut raw = [0u8; CQE_LEN];
                    self.rsp_mr.read(i * RSP_LEN, &mut raw);
                    raw
                });
                self.core.handle_wc(wc, rsp, out);
                self.run_actions(out);
            }
            self.wc_buf = wcs;
            if n < self.wc_buf.len() {
                break;
            }
        }
        self.check_cm_events();
        // Also when a submission noticed the DREQ first: what was outstanding then
        // will never complete.
        self.core.fail_if_peer_gone(out);
        out.len() - before
    }

    /// One round of the poll group without reaping completions (keeps ACKs and
    /// retransmissions going when nothing is outstanding).
    pub fn progress(&mut self) {
        self.ctx.progress();
    }

    /// Sends any ACKs `poll` deferred, then blocks up to `timeout` until a packet
    /// arrives for this poll group.
    pub fn wait(&mut self, timeout: Duration) {
        self.ctx.wait(timeout)
    }

    /// The earliest RC timer of the poll group, as a duration from now.
    pub fn next_timer(&self) -> Option<Duration> {
        let now = self.ctx.now();
        self.ctx.next_timeout().map(|t| {
            if t <= now {
                Duration::ZERO
            } else {
                t.since(now)
            }
        })
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

impl Drop for NvmeRdmaQueue {
    fn drop(&mut self) {
        if !self.core.is_disconnected() {
            let _ = self.cm.disconnect(self.conn);
        }
        let _ = self.ctx.destroy_qp(self.qp);
    }
}
