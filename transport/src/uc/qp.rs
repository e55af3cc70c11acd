//! The UC queue pair: state machine (IBTA Vol 1 §10.3, the UC column of §11.2.4.2),
//! verbs entry points and the sans-IO driver interface. Segmentation lives in
//! `requester.rs`, placement in `responder.rs`.
use std::collections::VecDeque;

use crate::rc::psn::PSN_MASK;
use crate::rc::{Completion, CompletionQueueKind, QpCounters, RcEnv, RecvQueue, TxPacket};
use crate::verbs::{
    AccessFlags, AhAttr, Mtu, QpAttr, QpCap, QpState, RecvWr, SendOp, SendWr, VerbsError, WcOpcode,
    WcStatus, WorkCompletion, MAX_SGE,
};
use crate::wire::Packet;

use super::requester::TxMsg;
use super::responder::InMsg;

/// An Unreliable Connection QP (see the module docs of [`crate::uc`]).
///
/// The driver feeds it received packets ([`UcQp::handle_packet`]) and drains packets
/// ([`UcQp::poll_transmit`]) and completions ([`UcQp::poll_completion`]); it has no
/// timers.
pub struct UcQp {
    pub(crate) qpn: u32,
    pub(crate) pd: u32,
    pub(crate) cap: QpCap,
    pub(crate) has_srq: bool,
    pub(crate) state: QpState,
    pub(crate) access: AccessFlags,
    pub(crate) mtu: Mtu,
    pub(crate) dest_qpn: u32,
    pub(crate) rq_psn: u32,
    pub(crate) sq_psn: u32,
    pub(crate) ah: Option<AhAttr>,
    pub(crate) rq: RecvQueue,
    /// Send WRs not yet started, in posting order.
    pub(crate) sq: VecDeque<SendWr>,
    /// The message being segmented.
    pub(crate) tx: Option<TxMsg>,
    /// PSN of the next packet sent.
    pub(crate) psn: u32,
    /// The responder's expected PSN.
    pub(crate) epsn: u32,
    /// Packets are dropped until the next First or Only (rxe's `drop_msg`).
    pub(crate) drop_msg: bool,
    /// The message being placed.
    pub(crate) msg: InMsg,
    /// The receive WR of a dropped SEND, filled by the next SEND first.
    pub(crate) held_wqe: Option<(RecvWr, u32)>,
    pub(crate) cq: VecDeque<Completion>,
    pub(crate) counters: QpCounters,
}

impl UcQp {
    /// A QP in the Reset state. `cap` bounds the queues (SGE counts beyond
    /// [`MAX_SGE`] are clamped); with `has_srq` receives come from [`RcEnv::srq`] and
    /// [`UcQp::post_recv`] is refused.
    pub fn new(qpn: u32, pd: u32, cap: QpCap, has_srq: bool) -> Self {
        UcQp {
            qpn: qpn & PSN_MASK,
            pd,
            cap,
            has_srq,
            state: QpState::Reset,
            access: AccessFlags::empty(),
            mtu: Mtu::Mtu1024,
            dest_qpn: 0,
            rq_psn: 0,
            sq_psn: 0,
            ah: None,
            rq: RecvQueue::new(pd, if has_srq { 0 } else { cap.max_recv_wr }),
            sq: VecDeque::new(),
            tx: None,
            psn: 0,
            epsn: 0,
            drop_msg: false,
            msg: InMsg::None,
            held_wqe: None,
            cq: VecDeque::new(),
            counters: QpCounters::default(),
        }
    }

    /// The QP number (24 bits).
    pub fn qpn(&self) -> u32 {
        self.qpn
    }
    /// The current state.
    pub fn state(&self) -> QpState {
        self.state
    }
    /// The remote QP number (valid from RTR on).
    pub fn dest_qpn(&self) -> u32 {
        self.dest_qpn
    }
    /// The path MTU in use.
    pub fn path_mtu(&self) -> Mtu {
        self.mtu
    }
    /// The capacities the QP was created with.
    pub fn cap(&self) -> QpCap {
        self.cap
    }
    /// The counters.
    pub fn counters(&self) -> &QpCounters {
        &self.counters
    }
    /// The responder's expected PSN.
    pub fn expected_psn(&self) -> u32 {
        self.epsn
    }
    /// Whether the responder is dropping packets until the next First or Only.
    pub fn dropping(&self) -> bool {
        self.drop_msg
    }

    /// `ibv_modify_qp` for UC (IBTA Vol 1 §11.2.4.2): Reset->Init, Init->Init,
    /// Init->RTR (needs `dest_qp_num`, `rq_psn`, `path_mtu`, `ah_attr`), RTR->RTS
    /// (needs `sq_psn`), RTS->RTS, RTS<->SQD, SQ error->RTS, any->Error (flushes the
    /// send and receive queues with IBV_WC_WR_FLUSH_ERR), any->Reset. The RC-only
    /// attributes (retry counts, timers, RDMA READ depths) are accepted and ignored,
    /// as ibverbs ignores attributes a QP type does not have.
    ///
    /// # Errors
    /// `InvalidTransition`; `InvalidArgument` naming a missing RTR or RTS attribute,
    /// or access flags with remote read or atomic (UC has neither, IBTA Table 37).
    pub fn modify(&mut self, attr: &QpAttr) -> Result<(), VerbsError> {
        use QpState::*;
        let to = attr.qp_state.unwrap_or(self.state);
        let ok = matches!(
            (self.state, to),
            (_, Reset | Error)
                | (Reset, Init)
                | (Init, Init | Rtr)
                | (Rtr, Rtr | Rts)
                | (Rts, Rts | Sqd)
                | (Sqd, Sqd | Rts)
                | (SqError, SqError | Rts)
        );
        if !ok {
            return Err(VerbsError::InvalidTransition {
                from: self.state,
                to,
            });
        }
        if attr
            .qp_access_flags
            .is_some_and(|a| a.intersects(AccessFlags::REMOTE_READ | AccessFlags::REMOTE_ATOMIC))
        {
            return Err(VerbsError::InvalidArgument(
                "a UC QP has no RDMA READ or atomics: access flags may hold LOCAL_WRITE, \
                 REMOTE_WRITE and MW_BIND only",
            ));
        }
        let rtr_missing = attr.dest_qp_num.is_none()
            || attr.rq_psn.is_none()
            || attr.path_mtu.is_none()
            || (attr.ah_attr.is_none() && self.ah.is_none());
        if to == Rtr && self.state == Init && rtr_missing {
            return Err(VerbsError::InvalidArgument(
                "RTR needs dest_qp_num, rq_psn, path_mtu and ah_attr",
            ));
        }
        if to == Rts && self.state == Rtr && attr.sq_psn.is_none() {
            return Err(VerbsError::InvalidArgument("RTS needs sq_psn"));
        }
        match to {
            Reset => {
                *self = UcQp::new(self.qpn, self.pd, self.cap, self.has_srq);
                return Ok(());
            }
            Error => {
                self.apply(attr);
                self.enter_error();
                return Ok(());
            }
            _ => {}
        }
        self.apply(attr);
        if to == Rtr && self.state == Init {
            self.epsn = self.rq_psn;
        }
        if to == Rts && self.state == Rtr {
            self.psn = self.sq_psn;
        }
        self.state = to;
        Ok(())
    }

    fn apply(&mut self, attr: &QpAttr) {
        if let Some(v) = attr.qp_access_flags {
            self.access = v;
        }
        if let Some(v) = attr.path_mtu {
            self.mtu = v;
        }
        if let Some(v) = attr.dest_qp_num {
            self.dest_qpn = v & PSN_MASK;
        }
        if let Some(v) = attr.rq_psn {
            self.rq_psn = v & PSN_MASK;
        }
        if let Some(v) = attr.sq_psn {
            self.sq_psn = v & PSN_MASK;
        }
        if attr.ah_attr.is_some() {
            self.ah = attr.ah_attr;
        }
    }

    /// Moves to Error: every outstanding send WR and every receive WR (posted, held
    /// or being filled) completes with IBV_WC_WR_FLUSH_ERR.
    pub(crate) fn enter_error(&mut self) {
        self.state = QpState::Error;
        if let Some(m) = self.tx.take() {
            self.push_send_wc(WorkCompletion::new(
                m.wr.wr_id,
                WcStatus::WrFlushErr,
                send_wc_opcode(&m.wr.op),
                self.qpn,
            ));
        }
        while let Some(wr) = self.sq.pop_front() {
            self.push_send_wc(WorkCompletion::new(
                wr.wr_id,
                WcStatus::WrFlushErr,
                send_wc_opcode(&wr.op),
                self.qpn,
            ));
        }
        let mut ids = Vec::new();
        if let InMsg::Send(ctx) = std::mem::take(&mut self.msg) {
            ids.push(ctx.wr.wr_id);
        }
        if let Some((wr, _)) = self.held_wqe.take() {
            ids.push(wr.wr_id);
        }
        ids.extend(self.rq.drain().map(|w| w.wr_id));
        for id in ids {
            self.push_recv_wc(WorkCompletion::new(
                id,
                WcStatus::WrFlushErr,
                WcOpcode::Recv,
                self.qpn,
            ));
        }
    }

    pub(crate) fn push_send_wc(&mut self, wc: WorkCompletion) {
        self.cq.push_back(Completion {
            queue: CompletionQueueKind::Send,
            wc,
        });
    }

    pub(crate) fn push_recv_wc(&mut self, wc: WorkCompletion) {
        self.cq.push_back(Completion {
            queue: CompletionQueueKind::Recv,
            wc,
        });
    }

    /// `ibv_post_send`: allowed in RTS and SQD (queued) and in Error (completed at once
    /// with IBV_WC_WR_FLUSH_ERR). Memory is not touched until the WR is segmented.
    ///
    /// # Errors
    /// `InvalidArgument` for an operation UC does not have (RDMA READ, SEND with
    /// Invalidate, memory window operations, a UD send), too many SGEs or a message
    /// above 2^31 bytes; `InvalidState` before RTS; `QueueFull` with `max_send_wr`
    /// outstanding.
    pub fn post_send(&mut self, wr: &SendWr) -> Result<(), VerbsError> {
        if !matches!(
            wr.op,
            SendOp::Send
                | SendOp::SendWithImm { .. }
                | SendOp::RdmaWrite { .. }
                | SendOp::RdmaWriteWithImm { .. }
        ) {
            return Err(VerbsError::InvalidArgument(
                "a UC QP carries SEND and RDMA WRITE (with or without immediate) only: no \
                 RDMA READ, atomics, SEND with Invalidate, memory windows or UD sends \
                 (IBTA Vol 1 Table 37); use an RC QP",
            ));
        }
        match self.state {
            QpState::Rts | QpState::Sqd | QpState::Error => {}
            s => return Err(VerbsError::InvalidState(s)),
        }
        if wr.sg_list.as_slice().len() > (self.cap.max_send_sge as usize).min(MAX_SGE) {
            return Err(VerbsError::InvalidArgument("too many SGEs"));
        }
        if wr.sg_list.total_len() > 1 << 31 {
            return Err(VerbsError::InvalidArgument(
                "message longer than 2^31 bytes",
            ));
        }
        if self.sq.len() + usize::from(self.tx.is_some()) >= self.cap.max_send_wr as usize {
            return Err(VerbsError::QueueFull);
        }
        if self.state == QpState::Error {
            let wc = WorkCompletion::new(
                wr.wr_id,
                WcStatus::WrFlushErr,
                send_wc_opcode(&wr.op),
                self.qpn,
            );
            self.push_send_wc(wc);
            return Ok(());
        }
        self.sq.push_back(*wr);
        Ok(())
    }

    /// `ibv_post_recv` on the QP's own receive queue: allowed from Init on; in Error
    /// the WR completes at once with IBV_WC_WR_FLUSH_ERR.
    ///
    /// # Errors
    /// `InvalidArgument` for a QP with an SRQ or too many SGEs, `InvalidState` in
    /// Reset, `QueueFull`.
    pub fn post_recv(&mut self, wr: &RecvWr) -> Result<(), VerbsError> {
        let max_sge = (self.cap.max_recv_sge as usize).min(MAX_SGE);
        let flushed = self
            .rq
            .post_for_qp(wr, self.has_srq, max_sge, self.state, self.qpn)?;
        if let Some(wc) = flushed {
            self.push_recv_wc(wc);
        }
        Ok(())
    }

    /// Handles one received packet addressed to this QP (the driver has checked the
    /// ICRC): UC SEND and RDMA WRITE packets in RTR and later are placed (see the
    /// module docs for what is dropped); anything else (another QP's, another
    /// transport's opcodes, CNPs, Reset/Init/Error) is ignored. Never panics.
    pub fn handle_packet(&mut self, pkt: &Packet<'_>, env: &mut RcEnv<'_>) {
        if pkt.hdr.bth.dest_qp & PSN_MASK != self.qpn || !pkt.hdr.bth.opcode.is_uc() {
            return;
        }
        if !matches!(
            self.state,
            QpState::Rtr | QpState::Rts | QpState::Sqd | QpState::SqError
        ) {
            return;
        }
        self.counters.rcvd_pkts += 1;
        self.responder_handle(pkt, env);
    }

    /// The next packet to send: the next of the message being segmented, or the
    /// first of the next send WR (whose SGEs are checked then; a bad lkey completes
    /// the WR with IBV_WC_LOC_PROT_ERR and moves the QP to Error). `None` when there
    /// is nothing to send or the QP is not in RTS or SQD.
    pub fn poll_transmit(&mut self, env: &mut RcEnv<'_>) -> Option<TxPacket> {
        let p = self.requester_transmit(env);
        if p.is_some() {
            self.counters.sent_pkts += 1;
        }
        p
    }

    /// The next work completion, in the order produced.
    pub fn poll_completion(&mut self) -> Option<Completion> {
        self.cq.pop_front()
    }
}

/// The completion opcode of a UC send WR.
pub(crate) fn send_wc_opcode(op: &SendOp) -> WcOpcode {
    match op {
        SendOp::RdmaWrite { .. } | SendOp::RdmaWriteWithImm { .. } => WcOpcode::RdmaWrite,
        _ => WcOpcode::Send,
    }
}
