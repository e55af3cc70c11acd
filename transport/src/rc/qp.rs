//! The RC queue pair: state machine (IBTA Vol 1 §10.3), verbs entry points and the
//! sans-IO driver interface. The requester/completer lives in `requester.rs`, the
//! responder in `responder.rs`.
use super::cc::{
    cnp_headers, cnp_payload, CnpPacer, CongestionConfig, CongestionControl, Rp,
    PACKET_OVERHEAD_BYTES,
};
use super::timers::{Timer, Timers};
use std::collections::VecDeque;
use std::time::Duration;

use crate::time::Timestamp;
use crate::verbs::{
    AccessFlags, AhAttr, Mtu, QpAttr, QpCap, QpState, RecvWr, SendWr, VerbsError, WcOpcode,
    WcStatus, WorkCompletion, MAX_SGE,
};
use crate::wire::{Bth, Opcode, Packet, PacketHeaders};

use super::counters::QpCounters;
use super::mem::KeyTable;
use super::ops::{classify, Kind};
use super::payload::TxPacket;
use super::psn::PSN_MASK;
use super::recv_queue::RecvQueue;
use super::requester::ReqState;
use super::responder::RespState;
use crate::wire::pad_for;

/// Tuning of the RC core (not part of IBTA).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RcConfig {
    /// Requester window: no new SEND/WRITE packet is sent while this many payload bytes
    /// are unacknowledged (at least one packet is always allowed). Default 1 MiB.
    pub max_inflight_bytes: u64,
    /// Most bytes of outstanding RDMA READ response data (at least one READ is always
    /// allowed). Default 4 MiB.
    pub max_read_inflight_bytes: u64,
    /// Set AckReq on every N-th packet inside long messages (always on the last packet
    /// of a message). Default 16; 0 means only on the last.
    pub ack_req_every_packets: u32,
    /// Lower bound of the adaptive retransmission timeout (the upper bound is the
    /// QP's IBTA local ACK timeout). Default 200 us.
    pub min_rto: Duration,
    /// Adaptive retransmission timeout before the first round-trip sample (still
    /// clamped to the IBTA local ACK timeout). Default 1 s, as RFC 6298 (2.1) sets it:
    /// until a round trip has been measured, a peer that is merely slow (an emulated
    /// host answers its first request after milliseconds) must not get resends, so
    /// the IBTA timer rules (537 ms at the `timeout` 17 our target and host ask for).
    pub initial_rto: Duration,
    /// Resend pacing: after a go-back-N restart at most this many request packets are
    /// outstanding; each acknowledged packet allows one more (slow start) until the
    /// loss is repaired. 0 disables pacing. Default 16.
    pub recovery_window_pkts: u32,
    /// Selective retransmission (only when negotiated, `QpAttr::selective_retransmit`):
    /// most bytes of out-of-order request packets the responder keeps for in-order
    /// execution (payload plus 64 bytes per packet). In practice the peer's window
    /// (`max_inflight_bytes`) bounds what is kept. Default 2 MiB.
    pub sr_buffer_bytes: u64,
    /// Congestion control (ECN notification point, DCQCN reaction point). Default:
    /// on, as RoCE NICs ship ([`CongestionConfig::default`]).
    pub cc: CongestionConfig,
}

impl Default for RcConfig {
    fn default() -> Self {
        RcConfig {
            max_inflight_bytes: 1 << 20,
            max_read_inflight_bytes: 4 << 20,
            ack_req_every_packets: 16,
            min_rto: Duration::from_micros(200),
            initial_rto: Duration::from_secs(1),
            recovery_window_pkts: 16,
            sr_buffer_bytes: 2 << 20,
            cc: CongestionConfig::default(),
        }
    }
}

/// What the driver lends the QP for one call: the device's key table and, for a QP
/// created with an SRQ, that SRQ.
pub struct RcEnv<'a> {
    pub keys: &'a KeyTable,
    pub srq: Option<&'a mut RecvQueue>,
}

/// Which CQ a completion belongs to (the QP's send CQ or receive CQ).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CompletionQueueKind {
    Send,
    Recv,
}

/// A work completion and the queue it goes to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Completion {
    pub queue: CompletionQueueKind,
    pub wc: WorkCompletion,
}

/// Attribute values of a QP (what `ibv_query_qp` reports).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Attrs {
    pub access: AccessFlags,
    pub mtu: Mtu,
    pub dest_qpn: u32,
    pub rq_psn: u32,
    pub sq_psn: u32,
    pub max_rd_atomic: u8,
    pub max_dest_rd_atomic: u8,
    pub min_rnr_timer: u8,
    pub timeout: u8,
    pub retry_cnt: u8,
    pub rnr_retry: u8,
    pub ah: Option<AhAttr>,
    /// Selective retransmission negotiated with the peer (see `docs/reliability.md`).
    pub selective: bool,
}

/// A Reliable Connection QP (IBTA Vol 1 ch. 9.5-9.9): requester, completer and
/// responder as one sans-IO state machine.
///
/// The driver feeds it received packets ([`RcQp::handle_packet`]) and timer expiries
/// ([`RcQp::handle_timeout`] once `now >= poll_timeout()`), and drains packets
/// ([`RcQp::poll_transmit`]) and completions ([`RcQp::poll_completion`]). Go-back-N
/// Completions a QP's backlog holds before it grows (see `RcQp::new`).
const CQ_BACKLOG_PRESIZE: u32 = 64;

/// retransmission regenerates packets from the work requests and registered memory.
pub struct RcQp {
    pub(crate) qpn: u32,
    pub(crate) pd: u32,
    pub(crate) cap: QpCap,
    pub(crate) has_srq: bool,
    pub(crate) cfg: RcConfig,
    pub(crate) state: QpState,
    pub(crate) a: Attrs,
    pub(crate) rq: RecvQueue,
    pub(crate) req: ReqState,
    pub(crate) resp: RespState,
    pub(crate) cq: VecDeque<Completion>,
    pub(crate) counters: QpCounters,
    /// Every timer of the QP, by name.
    pub(crate) timers: Timers,
    /// Congestion control: the reaction point (this QP sending) and the notification
    /// point (CNPs due for CE-marked packets received).
    pub(crate) rp: Rp,
    pub(crate) np: CnpPacer,
}

impl RcQp {
    /// A QP in the Reset state. `cap` bounds the queues (SGE counts beyond
    /// [`MAX_SGE`] are clamped); with `has_srq` receives come from [`RcEnv::srq`] and
    /// [`RcQp::post_recv`] is refused.
    pub fn new(qpn: u32, pd: u32, cap: QpCap, has_srq: bool, cfg: RcConfig) -> Self {
        let a = Attrs {
            access: AccessFlags::empty(),
            mtu: Mtu::Mtu1024,
            dest_qpn: 0,
            rq_psn: 0,
            sq_psn: 0,
            max_rd_atomic: 1,
            max_dest_rd_atomic: 1,
            min_rnr_timer: 12,
            timeout: 14,
            retry_cnt: 7,
            rnr_retry: 7,
            ah: None,
            selective: false,
        };
        RcQp {
            qpn: qpn & PSN_MASK,
            pd,
            cap,
            has_srq,
            cfg,
            state: QpState::Reset,
            a,
            rq: RecvQueue::new(pd, if has_srq { 0 } else { cap.max_recv_wr }),
            req: ReqState::new(cap.max_send_wr),
            resp: RespState::default(),
            // Sized for a burst up front (a QP's completions wait here between two polls),
            // so a first deeper burst after warm-up does not allocate on the data path;
            // bounded, since a QP of depth 128 could queue hundreds.
            cq: VecDeque::with_capacity(
                (cap.max_send_wr + cap.max_recv_wr).clamp(16, CQ_BACKLOG_PRESIZE) as usize,
            ),
            counters: QpCounters::default(),
            timers: Timers::default(),
            rp: Rp::new(cfg.cc.rp),
            np: CnpPacer::default(),
        }
    }

    /// The QP number (24 bits).
    pub fn qpn(&self) -> u32 {
        self.qpn
    }
    /// The protection domain.
    pub fn pd(&self) -> u32 {
        self.pd
    }
    /// The current state.
    pub fn state(&self) -> QpState {
        self.state
    }
    /// The remote QP number (valid from RTR on).
    pub fn dest_qpn(&self) -> u32 {
        self.a.dest_qpn
    }
    /// The path MTU in use.
    pub fn path_mtu(&self) -> Mtu {
        self.a.mtu
    }
    /// The counters.
    pub fn counters(&self) -> &QpCounters {
        &self.counters
    }
    /// Receive WRs posted to the QP's own receive queue.
    pub fn recv_queue_len(&self) -> usize {
        self.rq.len()
    }
    /// The responder's expected PSN (next request PSN it will execute).
    pub fn expected_psn(&self) -> u32 {
        self.resp.epsn()
    }
    /// The responder's message sequence number (requests completed, 24 bits).
    pub fn msn(&self) -> u32 {
        self.resp.msn()
    }
    /// Send WRs posted and not yet completed.
    pub fn send_queue_len(&self) -> usize {
        self.req.sq.len()
    }

    /// Current attributes (`ibv_query_qp`): every field `Some`, except `ah_attr` before
    /// RTR and `qkey` (UD only). `sq_psn` / `rq_psn` are the values set at RTS / RTR.
    pub fn attr(&self) -> QpAttr {
        let a = &self.a;
        QpAttr {
            qp_state: Some(self.state),
            qp_access_flags: Some(a.access),
            path_mtu: Some(a.mtu),
            dest_qp_num: Some(a.dest_qpn),
            rq_psn: Some(a.rq_psn),
            sq_psn: Some(a.sq_psn),
            max_rd_atomic: Some(a.max_rd_atomic),
            max_dest_rd_atomic: Some(a.max_dest_rd_atomic),
            min_rnr_timer: Some(a.min_rnr_timer),
            timeout: Some(a.timeout),
            retry_cnt: Some(a.retry_cnt),
            rnr_retry: Some(a.rnr_retry),
            ah_attr: a.ah,
            qkey: None,
            selective_retransmit: Some(a.selective),
        }
    }

    /// `ibv_modify_qp` (IBTA §10.3, §11.2.4.2). Transitions: Reset->Init, Init->Init,
    /// Init->Rtr (needs dest_qp_num, rq_psn, path_mtu, ah_attr, given now or before),
    /// Rtr->Rts (needs sq_psn), Rts->Rts, Rts<->Sqd, SqError->Rts, any->Error (flushes
    /// every outstanding send WR and posted own-RQ receive WR with IBV_WC_WR_FLUSH_ERR),
    /// any->Reset (discards everything without completions). Without `qp_state` the
    /// attributes change in place. `selective_retransmit` may be set in any state (the
    /// connection layer sets it with RTR/RTS once both CM messages carried the
    /// capability; see `docs/reliability.md`); it must be the same on both ends.
    /// Errors: `InvalidTransition` (transition not allowed), `InvalidArgument` (missing
    /// required attribute, retry counts above 7, timer code above 31).
    pub fn modify(&mut self, attr: &QpAttr) -> Result<(), VerbsError> {
        use QpState::*;
        let to = attr.qp_state.unwrap_or(self.state);
        let ok = matches!(
            (self.state, to),
            (_, Reset | Error)
                | (Reset, Init)
                | (Init, Init | Rtr)
                | (Rtr, Rts)
                | (Rts, Rts | Sqd)
                | (Sqd, Sqd | Rts)
                | (SqError, SqError | Rts)
                | (Rtr, Rtr)
        );
        if !ok {
            return Err(VerbsError::InvalidTransition {
                from: self.state,
                to,
            });
        }
        if attr.retry_cnt.is_some_and(|v| v > 7) || attr.rnr_retry.is_some_and(|v| v > 7) {
            return Err(VerbsError::InvalidArgument("retry count above 7"));
        }
        if attr.min_rnr_timer.is_some_and(|v| v > 31) || attr.timeout.is_some_and(|v| v > 31) {
            return Err(VerbsError::InvalidArgument("timer code above 31"));
        }
        let rtr_missing = attr.dest_qp_num.is_none()
            || attr.rq_psn.is_none()
            || attr.path_mtu.is_none()
            || (attr.ah_attr.is_none() && self.a.ah.is_none());
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
                self.reset();
                return Ok(());
            }
            Error => {
                self.apply(attr);
                self.resp.out.clear();
                self.enter_error();
                return Ok(());
            }
            _ => {}
        }
        if attr
            .selective_retransmit
            .is_some_and(|v| v != self.a.selective)
        {
            // Switching modes forgets selective state (kept packets, queued resends).
            self.resp.drop_kept();
            self.req.sr_resend.clear();
        }
        self.apply(attr);
        if to == Rtr && self.state == Init {
            self.resp.start(self.a.rq_psn);
        }
        if to == Rts && self.state == Rtr {
            let (psn, retry, rnr) = (self.a.sq_psn, self.a.retry_cnt, self.a.rnr_retry);
            self.req.start(psn, retry, rnr);
        }
        if self.state == Rts || self.state == Sqd || self.state == SqError {
            // Changed retry counts apply from now on.
            if let Some(r) = attr.retry_cnt {
                self.req.retries_left = r;
            }
            if let Some(r) = attr.rnr_retry {
                self.req.rnr_retries_left = r;
            }
        }
        self.state = to;
        Ok(())
    }

    fn apply(&mut self, attr: &QpAttr) {
        let a = &mut self.a;
        if let Some(v) = attr.qp_access_flags {
            a.access = v;
        }
        if let Some(v) = attr.path_mtu {
            a.mtu = v;
        }
        if let Some(v) = attr.dest_qp_num {
            a.dest_qpn = v & PSN_MASK;
        }
        if let Some(v) = attr.rq_psn {
            a.rq_psn = v & PSN_MASK;
        }
        if let Some(v) = attr.sq_psn {
            a.sq_psn = v & PSN_MASK;
        }
        if let Some(v) = attr.max_rd_atomic {
            a.max_rd_atomic = v;
        }
        if let Some(v) = attr.max_dest_rd_atomic {
            a.max_dest_rd_atomic = v;
        }
        if let Some(v) = attr.min_rnr_timer {
            a.min_rnr_timer = v;
        }
        if let Some(v) = attr.timeout {
            a.timeout = v;
        }
        if let Some(v) = attr.retry_cnt {
            a.retry_cnt = v;
        }
        if let Some(v) = attr.rnr_retry {
            a.rnr_retry = v;
        }
        if attr.ah_attr.is_some() {
            a.ah = attr.ah_attr;
        }
        if let Some(v) = attr.selective_retransmit {
            a.selective = v;
        }
    }

    fn reset(&mut self) {
        self.state = QpState::Reset;
        self.req = ReqState::new(self.cap.max_send_wr);
        self.timers.clear();
        self.resp = RespState::default();
        self.rq = RecvQueue::new(
            self.pd,
            if self.has_srq {
                0
            } else {
                self.cap.max_recv_wr
            },
        );
        self.cq.clear();
    }

    /// Moves to Error: flushes the send queue (in posting order; WRs already finished
    /// keep their status), the receive in progress and the own receive queue.
    pub(crate) fn enter_error(&mut self) {
        self.state = QpState::Error;
        self.resp.drop_kept();
        self.flush_send_queue();
        if let Some(wr_id) = self.resp.take_recv_in_progress() {
            self.push_recv_wc(WorkCompletion::new(
                wr_id,
                WcStatus::WrFlushErr,
                WcOpcode::Recv,
                self.qpn,
            ));
        }
        while let Some(wr) = self.rq.pop() {
            self.push_recv_wc(WorkCompletion::new(
                wr.wr_id,
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

    /// `ibv_post_send`. Allowed in RTS and SQD (queued) and in Error (completed at once
    /// with IBV_WC_WR_FLUSH_ERR). Memory is not touched until the WR is processed.
    /// `SendFlags::INLINE` is treated like a normal gather list (the lkeys are checked).
    /// Errors: `InvalidState`, `QueueFull` (max_send_wr outstanding), `InvalidArgument`
    /// (a UD send, more SGEs than max_send_sge, message above 2^31 bytes).
    pub fn post_send(&mut self, wr: &SendWr) -> Result<(), VerbsError> {
        if matches!(wr.op, crate::verbs::SendOp::UdSend { .. }) {
            return Err(VerbsError::InvalidArgument(
                "SendOp::UdSend is for UD QPs; an RC QP sends to its connected peer \
                 (SendOp::Send)",
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
        if self.req.sq.len() >= self.cap.max_send_wr as usize {
            return Err(VerbsError::QueueFull);
        }
        if self.state == QpState::Error {
            let wc = WorkCompletion::new(
                wr.wr_id,
                WcStatus::WrFlushErr,
                super::requester::wc_opcode(&wr.op),
                self.qpn,
            );
            self.push_send_wc(wc);
            return Ok(());
        }
        self.req.push(*wr);
        Ok(())
    }

    /// `ibv_post_recv` on the QP's own receive queue. Allowed from Init on; in Error the
    /// WR completes at once with IBV_WC_WR_FLUSH_ERR. Errors: `InvalidArgument` for a QP
    /// with an SRQ or too many SGEs, `InvalidState` in Reset, `QueueFull`.
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
    /// ICRC). Requests go to the responder (RTR and later), ACKs and READ responses to
    /// the completer (RTS, SQD, SQ error). Packets for another QP, in Reset, Init or
    /// Error, or of non-RC opcodes are dropped. Never panics.
    pub fn handle_packet(&mut self, now: Timestamp, pkt: &Packet<'_>, env: &mut RcEnv<'_>) {
        if pkt.hdr.bth.dest_qp & PSN_MASK != self.qpn {
            return;
        }
        if pkt.hdr.bth.opcode == Opcode::Cnp {
            self.handle_cnp(now);
            return;
        }
        let (kind, ..) = classify(pkt.hdr.bth.opcode);
        if pkt.hdr.bth.fecn && kind != Kind::Other && self.is_receiving() {
            self.note_ce(now);
        }
        match (kind, self.state) {
            (_, QpState::Reset | QpState::Init | QpState::Error) | (Kind::Other, _) => {}
            // No atomics are ever sent, so an Atomic Acknowledge answers nothing.
            _ if pkt.hdr.bth.opcode == Opcode::RcAtomicAcknowledge => {}
            (Kind::ReadResponse | Kind::Ack, QpState::Rts | QpState::Sqd | QpState::SqError) => {
                self.counters.rcvd_pkts += 1;
                self.completer_handle(now, pkt);
            }
            (Kind::ReadResponse | Kind::Ack, _) => {}
            _ => {
                self.counters.rcvd_pkts += 1;
                self.responder_handle(pkt, env);
            }
        }
    }

    /// Handles expired timers (call when `now >= poll_timeout()`): the adaptive
    /// retransmission timer (go-back-N, no retry used up), the IBTA local ACK timeout
    /// (go-back-N using up one of `retry_cnt`, or IBV_WC_RETRY_EXC_ERR) and the end of
    /// an RNR wait. See `docs/reliability.md`.
    pub fn handle_timeout(&mut self, now: Timestamp, _env: &mut RcEnv<'_>) {
        for t in [Timer::CcRate, Timer::Pacing] {
            if self.timers.is_due(t, now) {
                self.timers.stop(t);
                self.rp.on_timer(now, t, &mut self.timers);
            }
        }
        self.requester_timeout(now);
    }

    /// The rate congestion control holds this QP's data packets (requests and READ
    /// responses) to (Mbit/s), `None`
    /// while unlimited.
    pub fn cc_rate_mbps(&self) -> Option<f64> {
        self.rp.rate_mbps()
    }

    /// Whether the QP takes packets (RTR and later, not Error).
    fn is_receiving(&self) -> bool {
        matches!(
            self.state,
            QpState::Rtr | QpState::Rts | QpState::Sqd | QpState::SqError
        )
    }

    /// A CNP for this QP: the reaction point acts on it (or counts it ignored).
    fn handle_cnp(&mut self, now: Timestamp) {
        if !matches!(self.state, QpState::Rts | QpState::Sqd | QpState::SqError) {
            return;
        }
        self.counters.rcvd_pkts += 1;
        if self.rp.on_cnp(now, &mut self.timers) {
            self.counters.rp_cnp_handled += 1;
        } else {
            self.counters.rp_cnp_ignored += 1;
        }
    }

    /// A CE-marked packet arrived: counted, and a CNP to the peer becomes due unless
    /// one left within the notification point's interval.
    fn note_ce(&mut self, now: Timestamp) {
        self.counters.np_ecn_marked_roce_packets += 1;
        if let Some(gap) = self.cfg.cc.np_min_time_between_cnps {
            self.np.on_marked(now, gap);
        }
    }

    /// The due CNP, if any (sent ahead of everything else, as NICs do).
    fn cnp_transmit(&mut self, now: Timestamp) -> Option<TxPacket> {
        if !self.np.is_due() {
            return None;
        }
        self.np.sent(now);
        self.counters.np_cnp_sent += 1;
        Some(TxPacket {
            hdr: cnp_headers(self.a.dest_qpn),
            payload: cnp_payload(),
        })
    }

    /// Whether the reaction point lets a paced packet leave at `now`; if not, the
    /// pacing timer wakes the driver when it may.
    fn paced_out(&mut self, now: Timestamp) -> bool {
        match self.rp.next_send_time() {
            Some(t) if t > now => {
                self.timers.set(Timer::Pacing, t);
                true
            }
            _ => false,
        }
    }

    /// The responder's next packet, READ responses held to the reaction point's rate
    /// as a RoCE NIC limits all of a QP's outgoing data (the paced send time is shared
    /// with the requester's packets). ACKs and NAKs leave unpaced, except behind a
    /// READ response still waiting for its time (responses go in PSN order).
    fn responder_paced(&mut self, now: Timestamp) -> Option<TxPacket> {
        if self.responder_next_is_data() && self.paced_out(now) {
            return None;
        }
        self.responder_transmit()
    }

    /// A packet carrying data left: the reaction point counts it.
    fn cc_note_sent(&mut self, now: Timestamp, p: &TxPacket) {
        if p.payload.is_empty() && p.hdr.bth.opcode.is_response() {
            return;
        }
        self.rp.on_sent(
            now,
            p.payload.len() + PACKET_OVERHEAD_BYTES,
            &mut self.timers,
        );
    }

    /// The earliest time at which [`RcQp::handle_timeout`] has work; `None` if no timer
    /// is armed.
    pub fn poll_timeout(&self) -> Option<Timestamp> {
        self.timers.next()
    }

    /// The requester's round-trip estimate (RFC 6298 SRTT / RTTVAR over packets sent
    /// once).
    pub fn rtt(&self) -> &super::rtt::RttEstimator {
        &self.req.rtt
    }

    /// The adaptive retransmission timeout in force now: the RFC 6298 estimate with
    /// back-off, clamped to `[RcConfig::min_rto, local ACK timeout]`; `None` when the
    /// QP's `timeout` is 0 (no timer, IBTA Vol 1 §9.7.6.1.3).
    pub fn rto(&self) -> Option<Duration> {
        self.rto_now()
    }

    /// The next packet to send: responder output (ACKs, NAKs, READ responses) first,
    /// then requests within the window. `None` when nothing can be sent now.
    pub fn poll_transmit(&mut self, now: Timestamp, env: &mut RcEnv<'_>) -> Option<TxPacket> {
        if matches!(self.state, QpState::Reset | QpState::Init) {
            return None;
        }
        if let Some(p) = self.cnp_transmit(now) {
            self.counters.sent_pkts += 1;
            return Some(p);
        }
        let p = match self.responder_paced(now) {
            Some(p) => Some(p),
            None if self.paced_out(now) => None,
            None => self.requester_transmit(now, env),
        };
        if let Some(p) = &p {
            self.counters.sent_pkts += 1;
            self.cc_note_sent(now, p);
        }
        p
    }

    /// [`RcQp::poll_transmit`] with the requester's packets ahead of the responder's
    /// (for a driver that deferred its ACKs and now has a new request to send). The
    /// requester and responder streams have independent PSN spaces, so this changes
    /// no RC semantics, only which of two ready packets leaves first.
    pub fn poll_transmit_requests_first(
        &mut self,
        now: Timestamp,
        env: &mut RcEnv<'_>,
    ) -> Option<TxPacket> {
        if matches!(self.state, QpState::Reset | QpState::Init) {
            return None;
        }
        if let Some(p) = self.cnp_transmit(now) {
            self.counters.sent_pkts += 1;
            return Some(p);
        }
        let p = match (!self.paced_out(now))
            .then(|| self.requester_transmit(now, env))
            .flatten()
        {
            Some(p) => Some(p),
            None => self.responder_paced(now),
        };
        if let Some(p) = &p {
            self.counters.sent_pkts += 1;
            self.cc_note_sent(now, p);
        }
        p
    }

    /// The next work completion, in the order produced (send completions in posting
    /// order).
    pub fn poll_completion(&mut self) -> Option<Completion> {
        self.cq.pop_front()
    }

    /// Headers for a packet to the peer with `opcode`, `psn` and the payload length.
    pub(crate) fn headers(
        &self,
        opcode: Opcode,
        psn: u32,
        ack_req: bool,
        payload_len: usize,
    ) -> PacketHeaders {
        PacketHeaders {
            bth: Bth {
                opcode,
                se: false,
                migreq: false,
                pad_count: pad_for(payload_len),
                tver: 0,
                pkey: crate::wire::DEFAULT_PKEY,
                fecn: false,
                becn: false,
                dest_qp: self.a.dest_qpn,
                ack_req,
                psn: psn & PSN_MASK,
            },
            deth: None,
            reth: None,
            aeth: None,
            imm: None,
            ieth: None,
        }
    }

    /// The path MTU in bytes.
    pub(crate) fn mtu(&self) -> u32 {
        self.a.mtu.bytes()
    }
}

/// Packets of a message of `len` bytes at `mtu` (at least one).
pub(crate) fn packets_for(len: u64, mtu: u32) -> u32 {
    (len.div_ceil(mtu as u64).max(1)).min(u32::MAX as u64) as u32
}
