//! The sans-IO core of one NVMe/RDMA host queue (NVMe RDMA Transport 1.x §2, NVMe over
//! Fabrics 1.1 §2): what to post for each command and when a command is complete,
//! with no provider calls, clocks or sockets inside.
//!
//! Slot `i` is command identifier `i`; each slot has a 64-byte SQE buffer, a 64-byte
//! response buffer (receive `i`) and, where the device has them, a type 2 memory
//! window ([`RemoteKeys`]). [`QueueMemory`] says where those buffers are. A command's
//! data buffer is not the slot's: it comes with the submission ([`BufSpan`], a buffer of
//! the host's pool), so a queue's memory does not grow with depth x MDTS.
//!
//! Events in, actions out:
//! - a submission ([`QueueCore::submit`], [`QueueCore::submit_cid`],
//!   [`QueueCore::submit_raw`], [`QueueCore::send_runt`]) returns a [`Submission`]: the
//!   SQE bytes for the slot's SQE buffer and the work requests to post in order (a
//!   Bind MW of the slot's window over the command's buffer for a keyed SGL, then the
//!   capsule SEND; with [`RemoteKeys::Region`] no bind: the SGL carries the region's
//!   rkey). The driver posts them and hands
//!   the outcome to [`QueueCore::submitted`], which commits the command (SQ tail,
//!   window key) or undoes it; a SEND that cannot follow a posted bind kills the queue,
//!   since a window is then bound with no command to use it;
//! - a work completion ([`QueueCore::handle_wc`], with the response buffer's 16 bytes
//!   for a receive, located by [`QueueCore::response_index`]) completes commands into
//!   `out` and queues [`Action`]s: the receive's re-post, and a Local Invalidate when
//!   the target answered a keyed command with a plain SEND instead of SEND with
//!   Invalidate of the granted key (SGL subtype Fh). The driver takes them with
//!   [`QueueCore::poll_action`] right after the event and reports a post it could not
//!   make with [`QueueCore::post_failed`];
//! - a command completes, and its slot is free again, when its response capsule has
//!   arrived and no key it granted is still valid. Neither waits for the completion of
//!   the capsule's SEND (the RC ACK, which the target sends after the response): the
//!   response proves that the target has the capsule, so a retransmission of that
//!   SEND, which reads the slot's SQE buffer (by then perhaps the next command's), can
//!   only reach the target as a duplicate, which an RC responder acknowledges and never
//!   executes again (IBTA Vol 1 §9.9.3);
//! - a failed work completion, a post that failed on the data path, a malformed or
//!   unexpected response, or the target's disconnect
//!   ([`QueueCore::on_peer_disconnected`], then [`QueueCore::fail_if_peer_gone`]) kills
//!   the queue: every outstanding command fails at once and later submissions return
//!   [`QueueError::Dead`].
use std::collections::VecDeque;

use nvme::{Cqe, Sqe};
use transport::verbs::{
    inc_rkey, RecvWr, SendFlags, SendOp, SendWr, SgList, Sge, VerbsError, WcStatus, WorkCompletion,
};

use super::{command_name, QueueCompletion, QueueConfig};
use crate::capsule::{build_capsule, DataDir, DataKey};
use crate::error::{HostError, QueueError};

mod work;
pub use work::*;

#[derive(Clone, Copy, Debug)]
struct InFlight {
    /// The response capsule arrived.
    cqe: Option<Cqe>,
    /// A key granted to the target and not yet invalidated.
    key: Option<u32>,
    /// A Local Invalidate of `key` is posted.
    inv_pending: bool,
    /// The command's place in the sequence of SQ entries ever submitted (its SQ
    /// position is this modulo the SQ size). A sequence number rather than a position:
    /// a command can stay outstanding (an Asynchronous Event Request) while the SQ
    /// wraps and its position is reused.
    sq_seq: u64,
    opcode: u8,
    fctype: Option<u8>,
}

#[derive(Clone, Copy, Debug)]
enum SlotState {
    Free,
    /// Taken by a [`Submission`] not yet passed to [`QueueCore::submitted`].
    Reserved,
    InFlight(InFlight),
    /// A runt SEND ([`QueueCore::send_runt`]): busy until its SENDs complete (see
    /// [`Slot::unacked_sends`]); no response is expected.
    RawSend,
}

#[derive(Debug)]
struct Slot {
    /// The memory window's current key (last bound, or as allocated); `None` when the
    /// queue uses the region's key.
    mw_key: Option<u32>,
    state: SlotState,
    in_free_list: bool,
    /// Capsule SENDs posted from this slot and not completed yet: a command's slot is
    /// reused without waiting for them (see the module docs), a runt's is not.
    unacked_sends: u32,
    /// Of those, the SENDs of commands that have already completed (the oldest ones:
    /// the send queue completes in order).
    lingering_sends: u32,
}

/// The sans-IO queue: see the module docs.
#[derive(Debug)]
pub struct QueueCore {
    qid: u16,
    max_io_bytes: usize,
    in_capsule_bytes: usize,
    mem: QueueMemory,
    /// The data region's rkey when the queue has no memory windows.
    region_rkey: Option<u32>,
    slots: Vec<Slot>,
    /// Free slots in the order they were freed; a slot taken by `submit_cid` stays
    /// listed until a pop finds it busy.
    free: VecDeque<u16>,
    /// SQ entries (HSQSIZE + 1, or fewer if the controller's CRQSIZE is smaller).
    sq_size: u16,
    sq_head: u16,
    sq_tail: u16,
    /// SQ entries submitted, ever (the tail in sequence space).
    sq_submitted: u64,
    /// SQ entries the controller is known to have fetched, ever (the head in sequence
    /// space).
    sq_fetched: u64,
    outstanding: usize,
    dead: Option<String>,
    disconnected: bool,
    /// The target disconnected the queue and the outstanding commands have not been
    /// failed yet.
    peer_gone: bool,
    /// Deferred ACKs were asked for (see [`Submission::turns_on_deferred_acks`]).
    defer_acks: bool,
    /// SENDs of completed commands not yet completed themselves (sum of the slots'
    /// `lingering_sends`). Fewer than [`QueueCore::depth`] of them when a command is
    /// submitted: that bounds the send queue (see [`send_queue_wrs`]).
    lingering_sends: u32,
    actions: VecDeque<Action>,
}

/// Send queue entries a queue of `depth` command slots needs: up to 3 WRs (memory
/// window bind, capsule SEND, Local Invalidate) per command in flight, plus, since a
/// command completes on its response without waiting for its SEND's completion, up to
/// `depth` completed commands whose bind and SEND the send queue still holds (it
/// completes in order, so a SEND whose RC ACK is late holds everything after it).
/// [`QueueCore`] refuses submissions ([`QueueError::Full`]) while `depth` such SENDs
/// linger, so the send queue never overflows.
pub fn send_queue_wrs(depth: u16) -> u32 {
    5 * u32::from(depth)
}

impl QueueCore {
    /// The core of queue `cfg.qid`: `cfg.depth` free slots, SQE and response buffers
    /// at `mem`, and `keys`: a window key per slot (as `ibv_alloc_mw` returned them) or
    /// the data region's rkey. The SQ has `depth` entries until
    /// [`QueueCore::limit_sq_size`].
    ///
    /// Errors: [`HostError::InvalidArgument`] for a configuration
    /// [`QueueConfig::validate`] refuses or a window count other than the depth.
    pub fn new(
        cfg: &QueueConfig,
        mem: QueueMemory,
        keys: RemoteKeys<'_>,
    ) -> Result<Self, HostError> {
        cfg.validate()?;
        let (mw_keys, region_rkey): (Vec<Option<u32>>, _) = match keys {
            RemoteKeys::Windows(k) if k.len() != usize::from(cfg.depth) => {
                return Err(HostError::InvalidArgument(format!(
                    "{} memory window keys for a queue of depth {}",
                    k.len(),
                    cfg.depth
                )))
            }
            RemoteKeys::Windows(k) => (k.iter().map(|&k| Some(k)).collect(), None),
            RemoteKeys::Region { rkey } => (vec![None; usize::from(cfg.depth)], Some(rkey)),
        };
        Ok(QueueCore {
            qid: cfg.qid,
            max_io_bytes: cfg.max_io_bytes,
            in_capsule_bytes: cfg.in_capsule_bytes,
            mem,
            region_rkey,
            slots: mw_keys
                .into_iter()
                .map(|mw_key| Slot {
                    mw_key,
                    state: SlotState::Free,
                    in_free_list: true,
                    unacked_sends: 0,
                    lingering_sends: 0,
                })
                .collect(),
            free: (0..cfg.depth).collect(),
            sq_size: cfg.depth,
            sq_head: 0,
            sq_tail: 0,
            sq_submitted: 0,
            sq_fetched: 0,
            outstanding: 0,
            dead: None,
            disconnected: false,
            peer_gone: false,
            defer_acks: false,
            lingering_sends: 0,
            actions: VecDeque::new(),
        })
    }

    /// Shrinks the SQ to the controller's CRQSIZE (from the RDMA CM accept) when that is
    /// smaller than the depth. Errors: [`HostError::Protocol`] for a CRQSIZE under 2.
    pub fn limit_sq_size(&mut self, crqsize: u16) -> Result<(), HostError> {
        if crqsize < 2 {
            return Err(HostError::Protocol(format!(
                "queue {}: unusable NVMe/RDMA accept (CRQSIZE {crqsize})",
                self.qid
            )));
        }
        self.sq_size = self.sq_size.min(crqsize);
        Ok(())
    }

    /// The receive of response buffer `index` (`index < depth`).
    pub fn receive_wr(&self, index: u16) -> RecvWr {
        let i = usize::from(index);
        RecvWr {
            wr_id: WrId {
                kind: WrKind::Recv,
                index: u32::from(index),
            }
            .to_u64(),
            sg_list: SgList::one(Sge {
                addr: self.mem.rsp.addr + (i * RSP_LEN) as u64,
                length: RSP_LEN as u32,
                lkey: self.mem.rsp.lkey,
            }),
        }
    }

    /// The queue ID.
    pub fn qid(&self) -> u16 {
        self.qid
    }
    /// Command slots (= command identifiers `0..depth`).
    pub fn depth(&self) -> u16 {
        self.slots.len() as u16
    }
    /// Most commands in flight at once: the SQ size minus one (a full SQ keeps one
    /// entry empty, NVMe Base 2.x §3.3.1.2.2).
    pub fn max_outstanding(&self) -> usize {
        usize::from(self.sq_size) - 1
    }
    /// Commands submitted and not yet completed.
    pub fn outstanding(&self) -> usize {
        self.outstanding
    }
    /// Data buffer bytes per command.
    pub fn max_io_bytes(&self) -> usize {
        self.max_io_bytes
    }
    /// In-capsule data bytes a host-to-controller command may carry.
    pub fn in_capsule_bytes(&self) -> usize {
        self.in_capsule_bytes
    }
    /// Where the buffers are.
    pub fn memory(&self) -> &QueueMemory {
        &self.mem
    }
    /// Why the queue is dead, if it is.
    pub fn dead_reason(&self) -> Option<&str> {
        self.dead.as_deref()
    }
    /// Whether the queue is disconnected (by us or by the target).
    pub fn is_disconnected(&self) -> bool {
        self.disconnected
    }
    /// The key last bound on slot `cid`'s memory window (dead once the command that
    /// used it completed); `None` without windows.
    pub fn window_key(&self, cid: u16) -> Option<u32> {
        self.slots.get(usize::from(cid)).and_then(|s| s.mw_key)
    }
    /// Whether keyed commands bind memory windows (else they carry the region's rkey).
    pub fn uses_windows(&self) -> bool {
        self.region_rkey.is_none()
    }

    fn check_submit(&self) -> Result<(), QueueError> {
        if let Some(reason) = &self.dead {
            return Err(QueueError::Dead {
                qid: self.qid,
                reason: reason.clone(),
            });
        }
        let in_sq = (self.sq_tail + self.sq_size - self.sq_head) % self.sq_size;
        if in_sq + 1 >= self.sq_size || self.lingering_sends >= u32::from(self.depth()) {
            return Err(QueueError::Full);
        }
        Ok(())
    }

    fn check_len(&self, len: usize, buf: Option<BufSpan>) -> Result<(), QueueError> {
        if len > self.max_io_bytes {
            return Err(QueueError::TooLarge {
                len,
                max: self.max_io_bytes,
            });
        }
        let have = buf.map_or(0, |b| b.len);
        if len > have {
            return Err(QueueError::ShortBuffer { len, buf: have });
        }
        Ok(())
    }

    /// Whether a command can be submitted now (not dead, SQ room, a free slot).
    pub fn can_submit(&self) -> bool {
        self.check_submit().is_ok()
            && self
                .slots
                .iter()
                .any(|s| matches!(s.state, SlotState::Free))
    }

    /// The slot the next [`QueueCore::submit`] will take, without taking it. Errors:
    /// [`QueueError::Dead`], [`QueueError::Full`].
    pub fn next_free_slot(&mut self) -> Result<u16, QueueError> {
        self.check_submit()?;
        loop {
            let Some(c) = self.free.front().copied() else {
                return Err(QueueError::Full);
            };
            if matches!(self.slots[usize::from(c)].state, SlotState::Free) {
                return Ok(c);
            }
            self.free.pop_front();
            self.slots[usize::from(c)].in_free_list = false;
        }
    }

    /// Pops a free slot from the free list and reserves it.
    fn take_free_slot(&mut self) -> Result<u16, QueueError> {
        loop {
            let Some(c) = self.free.pop_front() else {
                return Err(QueueError::Full);
            };
            let slot = &mut self.slots[usize::from(c)];
            slot.in_free_list = false;
            if matches!(slot.state, SlotState::Free) {
                slot.state = SlotState::Reserved;
                return Ok(c);
            }
        }
    }

    fn release(&mut self, cid: u16) {
        let s = &mut self.slots[usize::from(cid)];
        s.state = SlotState::Free;
        if !s.in_free_list {
            s.in_free_list = true;
            self.free.push_back(cid);
        }
    }

    /// Submits `sqe` (its CID and SGL are filled in here) in a free slot, with `data`
    /// in `buf` (from its first byte; `None` only for no data). Errors:
    /// [`QueueError::Full`], [`QueueError::TooLarge`], [`QueueError::ShortBuffer`],
    /// [`QueueError::Dead`].
    pub fn submit(
        &mut self,
        sqe: Sqe,
        data: DataDir,
        buf: Option<BufSpan>,
    ) -> Result<Submission, QueueError> {
        self.check_submit()?;
        self.check_len(data.len(), buf)?;
        let cid = self.take_free_slot()?;
        self.command(cid, sqe, data, buf)
            .inspect_err(|_| self.release(cid))
    }

    /// Like [`QueueCore::submit`] in the slot the caller chose (e.g. a benchmark tag):
    /// [`QueueError::BadCid`] if `cid` is out of range or in use.
    pub fn submit_cid(
        &mut self,
        cid: u16,
        sqe: Sqe,
        data: DataDir,
        buf: Option<BufSpan>,
    ) -> Result<Submission, QueueError> {
        self.check_submit()?;
        self.check_len(data.len(), buf)?;
        match self.slots.get_mut(usize::from(cid)) {
            Some(s) if matches!(s.state, SlotState::Free) => s.state = SlotState::Reserved,
            _ => return Err(QueueError::BadCid(cid)),
        }
        self.command(cid, sqe, data, buf)
            .inspect_err(|_| self.release(cid))
    }

    /// The capsule of command `cid` (reserved): the bind of a keyed SGL with the
    /// window's next key (or the region's key, unbound), the SEND of the SQE plus any
    /// in-capsule data.
    fn command(
        &mut self,
        cid: u16,
        sqe: Sqe,
        data: DataDir,
        buf: Option<BufSpan>,
    ) -> Result<Submission, QueueError> {
        let defer_acks = !self.defer_acks && self.qid != 0 && sqe.opcode() != nvme::FABRICS_OPCODE;
        let len = data.len();
        let idx = usize::from(cid);
        let span = buf.unwrap_or(BufSpan {
            addr: 0,
            len: 0,
            lkey: 0,
        });
        let mw_key = self.slots[idx].mw_key;
        let key = match (mw_key, self.region_rkey) {
            (Some(k), _) => DataKey::Window(inc_rkey(k)),
            (None, Some(r)) => DataKey::Region(r),
            (None, None) => DataKey::Region(0),
        };
        let cap =
            build_capsule(sqe, cid, data, self.in_capsule_bytes, span.addr, key).map_err(|_| {
                QueueError::TooLarge {
                    len,
                    max: self.max_io_bytes,
                }
            })?;
        let bind = cap.bind.zip(mw_key).map(|(b, mw_key)| SendWr {
            wr_id: WrId {
                kind: WrKind::Bind,
                index: u32::from(cid),
            }
            .to_u64(),
            op: SendOp::BindMw {
                mw_handle: mw_key,
                rkey: b.rkey,
                mr_lkey: span.lkey,
                addr: b.addr,
                length: b.length,
                access: b.access,
            },
            sg_list: SgList::new(),
            // Unsignaled, as Linux posts its REG_MR: only a failure completes.
            flags: SendFlags::empty(),
        });
        self.defer_acks |= defer_acks;
        let granted = bind.as_ref().and(cap.bind).map(|b| b.rkey);
        Ok(Submission {
            cid,
            sqe: cap.sqe.to_array(),
            sqe_len: SQE_LEN,
            bind,
            send: self.capsule_send(cid, SQE_LEN, Some(span), cap.in_capsule_len),
            defer_acks,
            commit: Commit::Command {
                key: granted,
                opcode: cap.sqe.opcode(),
                fctype: cap.sqe.fctype(),
            },
        })
    }

    /// Submits `sqe` exactly as given (every byte but the CID, set to the chosen slot),
    /// followed by the bytes of `in_capsule` (a registered buffer, all of it) as
    /// in-capsule data; no window is bound. For tests of how a controller answers
    /// malformed capsules. Errors: [`QueueError::Full`], [`QueueError::TooLarge`],
    /// [`QueueError::Dead`].
    pub fn submit_raw(
        &mut self,
        mut sqe: Sqe,
        in_capsule: Option<BufSpan>,
    ) -> Result<Submission, QueueError> {
        self.check_submit()?;
        let in_capsule_len = in_capsule.map_or(0, |b| b.len);
        self.check_len(in_capsule_len, in_capsule)?;
        let cid = self.take_free_slot()?;
        sqe.set_cid(cid);
        Ok(Submission {
            cid,
            sqe: sqe.to_array(),
            sqe_len: SQE_LEN,
            bind: None,
            send: self.capsule_send(cid, SQE_LEN, in_capsule, in_capsule_len),
            defer_acks: false,
            commit: Commit::Command {
                key: None,
                opcode: sqe.opcode(),
                fctype: sqe.fctype(),
            },
        })
    }

    /// Sends `bytes` (at most 64) alone as one SEND: a capsule shorter than an SQE,
    /// which a controller cannot answer and must drop. Takes no SQ entry and produces no
    /// completion; the slot is busy until the SEND completes. Errors:
    /// [`QueueError::Full`], [`QueueError::TooLarge`] (over 64 bytes),
    /// [`QueueError::Dead`].
    pub fn send_runt(&mut self, bytes: &[u8]) -> Result<Submission, QueueError> {
        self.check_submit()?;
        if bytes.len() > SQE_LEN {
            return Err(QueueError::TooLarge {
                len: bytes.len(),
                max: SQE_LEN,
            });
        }
        let cid = self.take_free_slot()?;
        let mut sqe = [0u8; SQE_LEN];
        sqe[..bytes.len()].copy_from_slice(bytes);
        Ok(Submission {
            cid,
            sqe,
            sqe_len: bytes.len(),
            bind: None,
            send: self.capsule_send(cid, bytes.len(), None, 0),
            defer_acks: false,
            commit: Commit::RawSend,
        })
    }

    /// The signaled SEND of slot `cid`: `sqe_len` bytes of its SQE buffer, then the
    /// first `data_len` bytes of `data` (none when 0), gathered with no copy.
    fn capsule_send(
        &self,
        cid: u16,
        sqe_len: usize,
        data: Option<BufSpan>,
        data_len: usize,
    ) -> SendWr {
        let sqe_sge = Sge {
            addr: self.mem.sqe.addr + (usize::from(cid) * SQE_LEN) as u64,
            length: sqe_len as u32,
            lkey: self.mem.sqe.lkey,
        };
        let sg_list = if let Some(d) = data.filter(|_| data_len > 0) {
            let data_sge = Sge {
                addr: d.addr,
                length: data_len as u32,
                lkey: d.lkey,
            };
            SgList::from_slice(&[sqe_sge, data_sge]).unwrap_or_else(|| SgList::one(sqe_sge))
        } else {
            SgList::one(sqe_sge)
        };
        SendWr {
            wr_id: WrId {
                kind: WrKind::Send,
                index: u32::from(cid),
            }
            .to_u64(),
            op: SendOp::Send,
            sg_list,
            flags: SendFlags::SIGNALED,
        }
    }

    /// Commits `s` when its posts succeeded (the command is outstanding, its SQ entry
    /// taken) and returns its command identifier; otherwise frees the slot and returns
    /// [`QueueError::Verbs`]. A SEND that failed after a bind was posted also kills the
    /// queue (the window stays bound with no command to use it).
    pub fn submitted(
        &mut self,
        s: Submission,
        posted: Result<(), PostFailure>,
    ) -> Result<u16, QueueError> {
        let cid = s.cid;
        let idx = usize::from(cid);
        match posted {
            Ok(()) => {
                if let Some(SendOp::BindMw { rkey, .. }) = s.bind.map(|b| b.op) {
                    self.slots[idx].mw_key = Some(rkey);
                }
                self.slots[idx].unacked_sends += 1;
                self.slots[idx].state = match s.commit {
                    Commit::RawSend => SlotState::RawSend,
                    Commit::Command {
                        key,
                        opcode,
                        fctype,
                    } => {
                        let sq_seq = self.sq_submitted;
                        self.sq_submitted += 1;
                        self.sq_tail = (self.sq_tail + 1) % self.sq_size;
                        self.outstanding += 1;
                        SlotState::InFlight(InFlight {
                            cqe: None,
                            key,
                            inv_pending: false,
                            sq_seq,
                            opcode,
                            fctype,
                        })
                    }
                };
                Ok(cid)
            }
            Err(PostFailure::Bind(e)) => {
                self.release(cid);
                Err(e.into())
            }
            Err(PostFailure::Send(e)) => {
                if let Some(SendOp::BindMw { rkey, .. }) = s.bind.map(|b| b.op) {
                    self.slots[idx].mw_key = Some(rkey);
                    self.dead.get_or_insert_with(|| {
                        format!("capsule SEND could not be posted after a bind: {e}")
                    });
                }
                self.release(cid);
                Err(e.into())
            }
        }
    }

    /// The response buffer that `wc` filled, if it is a receive of this queue: the
    /// driver passes that buffer's first 16 bytes to [`QueueCore::handle_wc`].
    pub fn response_index(&self, wc: &WorkCompletion) -> Option<usize> {
        match WrId::from_u64(wc.wr_id) {
            Some(WrId {
                kind: WrKind::Recv,
                index,
            }) if (index as usize) < self.slots.len() => Some(index as usize),
            _ => None,
        }
    }

    /// Handles one work completion of the queue's CQ; `rsp` is the CQE from the response
    /// buffer of a receive ([`QueueCore::response_index`]). Finished commands go to
    /// `out`; posts to make go to [`QueueCore::poll_action`].
    pub fn handle_wc(
        &mut self,
        wc: &WorkCompletion,
        rsp: Option<[u8; CQE_LEN]>,
        out: &mut Vec<QueueCompletion>,
    ) {
        if self.dead.is_some() && self.outstanding == 0 {
            return;
        }
        if wc.status != WcStatus::Success {
            let err = HostError::Transport {
                qid: self.qid,
                status: wc.status,
                what: WrId::what(wc.wr_id),
            };
            self.fail_all(err, out);
            return;
        }
        let Some(id) = WrId::from_u64(wc.wr_id) else {
            return;
        };
        let index = id.index as usize;
        match id.kind {
            WrKind::Send => {
                if let Some(slot) = self.slots.get_mut(index) {
                    slot.unacked_sends = slot.unacked_sends.saturating_sub(1);
                    if slot.lingering_sends > 0 {
                        slot.lingering_sends -= 1;
                        self.lingering_sends -= 1;
                    }
                    if matches!(slot.state, SlotState::RawSend) && slot.unacked_sends == 0 {
                        self.release(index as u16);
                    }
                }
            }
            WrKind::LocalInv => {
                if let Some(Slot {
                    state: SlotState::InFlight(c),
                    ..
                }) = self.slots.get_mut(index)
                {
                    c.inv_pending = false;
                    c.key = None;
                    self.try_complete(index as u16, out);
                }
            }
            WrKind::Recv => self.handle_response(index, wc, rsp, out),
            WrKind::Bind => {}
        }
    }

    fn handle_response(
        &mut self,
        index: usize,
        wc: &WorkCompletion,
        rsp: Option<[u8; CQE_LEN]>,
        out: &mut Vec<QueueCompletion>,
    ) {
        let qid = self.qid;
        let (Some(raw), true) = (rsp, index < self.slots.len()) else {
            let msg = format!("queue {qid}: response in unknown receive buffer {index}");
            self.fail_all(HostError::Protocol(msg), out);
            return;
        };
        // The buffer goes back first: the response is in `raw` now.
        self.actions
            .push_back(Action::PostRecv(self.receive_wr(index as u16)));
        if (wc.byte_len as usize) < CQE_LEN {
            let msg = format!(
                "queue {qid}: response capsule of {} bytes (expected 16)",
                wc.byte_len
            );
            self.fail_all(HostError::Protocol(msg), out);
            return;
        }
        let cqe = Cqe::from_array(raw);
        let cid = cqe.cid();
        let Some(Slot {
            state: SlotState::InFlight(c @ InFlight { cqe: None, .. }),
            ..
        }) = self.slots.get_mut(usize::from(cid))
        else {
            self.fail_all(
                HostError::Protocol(format!(
                    "queue {qid}: CQE for command {cid}, which is not outstanding"
                )),
                out,
            );
            return;
        };
        c.cqe = Some(cqe);
        let sq_seq = c.sq_seq;
        let mut post_inv = None;
        match (c.key, wc.invalidated_rkey) {
            // SEND with Invalidate of the granted key (SGL subtype Fh honoured).
            (Some(k), Some(r)) if k == r => c.key = None,
            // A plain SEND while a key is granted: invalidate it ourselves.
            (Some(k), None) => {
                c.inv_pending = true;
                post_inv = Some(k);
            }
            (k, Some(r)) => {
                let msg = format!(
                    "queue {qid}: target invalidated rkey {r:#x}, command {cid} granted {k:x?}"
                );
                self.fail_all(HostError::Protocol(msg), out);
                return;
            }
            (None, None) => {}
        }
        self.advance_sq_head(sq_seq, cqe.sqhd());
        if let Some(rkey) = post_inv {
            self.actions.push_back(Action::PostSend(SendWr {
                wr_id: WrId {
                    kind: WrKind::LocalInv,
                    index: u32::from(cid),
                }
                .to_u64(),
                op: SendOp::LocalInv { rkey },
                sg_list: SgList::new(),
                flags: SendFlags::SIGNALED,
            }));
        }
        self.try_complete(cid, out);
    }

    /// The next post to make, in order. Take them all after each event.
    pub fn poll_action(&mut self) -> Option<Action> {
        self.actions.pop_front()
    }

    /// The post of an [`Action`] with `wr_id` failed: the queue dies (every outstanding
    /// command fails into `out`) and the actions not yet made are dropped.
    pub fn post_failed(&mut self, wr_id: u64, err: VerbsError, out: &mut Vec<QueueCompletion>) {
        let qid = self.qid;
        let msg = match WrId::from_u64(wr_id).map(|id| id.kind) {
            Some(WrKind::Recv) => format!("queue {qid}: re-posting a receive failed: {err}"),
            Some(WrKind::LocalInv) => {
                format!("queue {qid}: local invalidate could not be posted: {err}")
            }
            _ => format!("queue {qid}: posting a {} failed: {err}", WrId::what(wr_id)),
        };
        self.actions.clear();
        self.fail_all(HostError::Protocol(msg), out);
    }

    /// Moves the SQ head forward to whichever is further (within the entries in use):
    /// the CQE's SQHD, or just past the completed command (the controller fetched it,
    /// and SQ entries are fetched in order).
    ///
    /// A command whose entry the head has already passed says nothing (its position may
    /// since hold a newer, unfetched entry).
    fn advance_sq_head(&mut self, sq_seq: u64, sqhd: u16) {
        let size = self.sq_size;
        let in_use = self.sq_submitted - self.sq_fetched;
        let by_completion = (sq_seq + 1).saturating_sub(self.sq_fetched);
        let by_sqhd = if sqhd < size {
            u64::from((sqhd + size - self.sq_head) % size)
        } else {
            0
        };
        let adv = [by_completion, by_sqhd]
            .into_iter()
            .filter(|&d| d <= in_use)
            .max()
            .unwrap_or(0);
        self.sq_fetched += adv;
        self.sq_head = ((u64::from(self.sq_head) + adv) % u64::from(size)) as u16;
    }

    fn try_complete(&mut self, cid: u16, out: &mut Vec<QueueCompletion>) {
        let Some(slot) = self.slots.get_mut(usize::from(cid)) else {
            return;
        };
        let SlotState::InFlight(InFlight {
            cqe: Some(cqe),
            inv_pending: false,
            key,
            opcode,
            fctype,
            ..
        }) = slot.state
        else {
            return;
        };
        debug_assert!(key.is_none());
        // Its SEND may still wait for its RC ACK: the slot is free, the send queue
        // entry is not (see `send_queue_wrs`).
        self.lingering_sends += slot.unacked_sends - slot.lingering_sends;
        slot.lingering_sends = slot.unacked_sends;
        self.outstanding -= 1;
        self.release(cid);
        let status = cqe.status();
        let result = if status.is_success() {
            Ok(cqe)
        } else {
            Err(HostError::Nvme {
                command: command_name(self.qid, opcode, fctype),
                status,
                dw0: cqe.dw0(),
            })
        };
        out.push(QueueCompletion {
            cid,
            result,
            buf: None,
        });
    }

    /// Cancels every outstanding command with `err` into `out` and kills the queue:
    /// for a queue being torn down after its QP was disconnected, whose commands would
    /// otherwise never complete (Linux's `nvme_cancel_request` in error recovery).
    pub fn cancel_all(&mut self, err: HostError, out: &mut Vec<QueueCompletion>) {
        self.fail_all(err, out);
    }

    /// Kills the queue: every outstanding command fails with `err` into `out`.
    fn fail_all(&mut self, err: HostError, out: &mut Vec<QueueCompletion>) {
        tracing::warn!("queue {}: {err}", self.qid);
        if self.dead.is_none() {
            self.dead = Some(err.to_string());
        }
        for cid in 0..self.slots.len() as u16 {
            match self.slots[usize::from(cid)].state {
                SlotState::RawSend => self.release(cid),
                SlotState::InFlight(_) => {
                    // The QP is in the Error state: the target can no longer use the keys.
                    self.release(cid);
                    out.push(QueueCompletion {
                        cid,
                        result: Err(err.clone()),
                        buf: None,
                    });
                }
                SlotState::Free | SlotState::Reserved => {}
            }
        }
        self.outstanding = 0;
    }

    /// The host disconnects the queue (RDMA CM DREQ): it is dead from now on;
    /// outstanding commands are not completed. Returns `false` if it was disconnected
    /// already (nothing to send).
    pub fn on_local_disconnect(&mut self) -> bool {
        if self.disconnected {
            return false;
        }
        self.disconnected = true;
        self.dead.get_or_insert_with(|| "disconnected".into());
        true
    }

    /// The target disconnected the queue (a DREQ arrived, or the CM gave up on the
    /// connection): the queue is dead, and the next [`QueueCore::fail_if_peer_gone`]
    /// fails what is outstanding.
    pub fn on_peer_disconnected(&mut self) {
        self.peer_gone |= !self.disconnected;
        self.disconnected = true;
        self.dead
            .get_or_insert_with(|| "the target disconnected the queue".into());
    }

    /// Fails the outstanding commands with [`HostError::TargetDisconnected`] into `out`
    /// once after [`QueueCore::on_peer_disconnected`]: they will never complete.
    pub fn fail_if_peer_gone(&mut self, out: &mut Vec<QueueCompletion>) {
        if std::mem::take(&mut self.peer_gone) {
            let qid = self.qid;
            self.fail_all(HostError::TargetDisconnected { qid }, out);
        }
    }
}

#[cfg(test)]
mod tests;
