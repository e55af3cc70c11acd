//! Requester and completer (IBTA Vol 1 §9.7.1-§9.7.6, §9.9.2): segmentation of send
//! WRs into packets, the window, ACK / NAK / READ response processing, go-back-N
//! retransmission, the local ACK timer and RNR waits.
use super::timers::Timer;
use std::collections::VecDeque;

use crate::time::Timestamp;
use crate::verbs::{
    AccessFlags, SendFlags, SendOp, SendWr, WcOpcode, WcStatus, WorkCompletion, MAX_SGE,
};
use crate::wire::{Opcode, Reth};

use super::mem::MemRef;
use super::ops::{ack_timeout, pos_of, send_opcode, write_opcode, Pos};
use super::payload::{gather, TxPacket};
use super::psn::{psn_add, psn_diff, psn_in, psn_lt, PSN_MASK};
use super::qp::{packets_for, RcEnv, RcQp};
use super::rtt::RttEstimator;
use crate::verbs::QpState;

/// The completion opcode of a send WR.
pub(crate) fn wc_opcode(op: &SendOp) -> WcOpcode {
    match op {
        SendOp::Send
        | SendOp::SendWithImm { .. }
        | SendOp::SendWithInv { .. }
        | SendOp::UdSend { .. } => WcOpcode::Send,
        SendOp::RdmaWrite { .. } | SendOp::RdmaWriteWithImm { .. } => WcOpcode::RdmaWrite,
        SendOp::RdmaRead { .. } => WcOpcode::RdmaRead,
        SendOp::LocalInv { .. } => WcOpcode::LocalInv,
        SendOp::BindMw { .. } => WcOpcode::BindMw,
    }
}

/// Which outstanding RDMA READ requests a go-back-N restart asks again
/// ([`ReqState::seek`]). A responder answers READs in order and answers a repeated READ
/// request by sending the data again (IBTA Vol 1 §9.7.5.1.4; Linux rxe replays it once
/// the response in progress is done), so asking again for a READ that is merely queued
/// behind others at a slow responder costs a whole duplicate response.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum LostReads {
    /// Every READ from the restart point on (a PSN sequence NAK: the responder dropped
    /// them; a lost READ response: the ones behind it are being answered, but their
    /// data cannot be placed before the gap is filled).
    All,
    /// Only the READ containing the restart point, from there (a timer expiry: the
    /// oldest outstanding request is the one to repair; later READs are asked again
    /// only if they, in turn, are not answered).
    Containing,
    /// None (the cursor skips ahead over what the peer has acknowledged).
    None,
}

/// One posted send WR and its progress.
pub(crate) struct SqEntry {
    pub(super) wr: SendWr,
    /// Processed by the requester (SGEs validated, PSNs assigned, or local op run).
    pub(super) started: bool,
    /// Finished: acknowledged, all READ data placed, local op executed, or failed.
    pub(super) done: bool,
    pub(super) status: WcStatus,
    pub(super) first_psn: u32,
    pub(super) last_psn: u32,
    pub(super) npkts: u32,
    pub(super) len: u32,
    pub(super) segs: [MemRef; MAX_SGE],
    pub(super) nsegs: u8,
    /// READ: a request for `req_psn..=req_last_psn` is outstanding.
    pub(super) issued: bool,
    pub(super) req_psn: u32,
    /// READ: last response PSN of the outstanding request: `last_psn`, or earlier when
    /// a READ larger than the READ budget is asked for in segments, one at a time.
    pub(super) req_last_psn: u32,
    /// READ: next expected response PSN.
    pub(super) rd_next: u32,
    pub(super) rd_issued_bytes: u64,
}

impl SqEntry {
    fn new(wr: SendWr) -> Self {
        SqEntry {
            wr,
            started: false,
            done: false,
            status: WcStatus::Success,
            first_psn: 0,
            last_psn: 0,
            npkts: 0,
            len: 0,
            segs: Default::default(),
            nsegs: 0,
            issued: false,
            req_psn: 0,
            req_last_psn: 0,
            rd_next: 0,
            rd_issued_bytes: 0,
        }
    }
    pub(super) fn is_read(&self) -> bool {
        matches!(self.wr.op, SendOp::RdmaRead { .. })
    }
    pub(super) fn has_psn(&self) -> bool {
        !matches!(self.wr.op, SendOp::LocalInv { .. } | SendOp::BindMw { .. })
    }
    /// Outstanding on the wire: PSNs assigned and not finished.
    pub(super) fn pending(&self) -> bool {
        self.started && !self.done && self.has_psn()
    }
    /// Bytes carried by packets `i..j` of this message.
    pub(super) fn bytes(&self, i: u32, j: u32, mtu: u32) -> u64 {
        let end = |k: u32| (k as u64 * mtu as u64).min(self.len as u64);
        end(j).saturating_sub(end(i))
    }
}

/// Requester state.
pub(crate) struct ReqState {
    pub(crate) sq: VecDeque<SqEntry>,
    /// Index in `sq` of the WR the transmit cursor is in.
    pub(super) tx_idx: usize,
    /// Next PSN to transmit.
    pub(super) psn_next: u32,
    /// First PSN not yet assigned to a WR.
    pub(super) psn_max: u32,
    /// Oldest unacknowledged PSN.
    pub(super) una: u32,
    pub(super) inflight_bytes: u64,
    pub(super) rd_count: u32,
    pub(super) rd_bytes: u64,
    pub(crate) retries_left: u8,
    pub(crate) rnr_retries_left: u8,
    /// PSN of the last go-back-N restart without progress since (suppresses repeats).
    pub(super) rewound_at: Option<u32>,
    /// First PSN never transmitted (high-water mark of `psn_next`).
    pub(super) psn_high: u32,
    /// Round-trip estimator for the adaptive retransmission timer.
    pub(crate) rtt: RttEstimator,
    /// The request packet being timed for a round-trip sample: PSN and time sent.
    pub(super) timed: Option<(u32, Timestamp)>,
    /// Resend pacing: most request PSNs outstanding while a loss is being repaired;
    /// `None` outside recovery.
    pub(super) cwnd: Option<u32>,
    /// Recovery ends when `una` passes this PSN (`psn_high` at the restart).
    pub(super) recover: u32,
    /// `una` at the last forward progress (to count newly acknowledged PSNs).
    pub(super) una_seen: u32,
    /// PSNs to resend alone (selective retransmission, when negotiated).
    pub(super) sr_resend: VecDeque<u32>,
    /// The last selective resend: PSN and time.
    pub(super) sr_last: Option<(u32, Timestamp)>,
    /// A tail loss probe in progress (see `RcQp::tail_probe`).
    pub(super) probe: Option<TailProbe>,
    /// The probe's PSN, until it is transmitted.
    pub(super) probe_send: Option<u32>,
    /// The longest round trip that made the adaptive timer expire spuriously: a floor
    /// under the timeout from then on, so a peer seen to stall that long (an emulated
    /// or descheduled host) is not resent to when it stalls again. Zero until then.
    pub(super) stall_floor: std::time::Duration,
}

/// A tail loss probe episode: from an adaptive timer expiry until everything sent
/// before it is acknowledged, a NAK, or the next expiry.
#[derive(Clone, Copy, Debug)]
pub(super) struct TailProbe {
    /// `psn_high` at the expiry.
    pub high: u32,
    /// The timeout that expired.
    pub expired: std::time::Duration,
    /// When the expired timer was started (the expiry less the timeout).
    pub armed_at: Timestamp,
    /// When the probe left (`None` until it does).
    pub sent_at: Option<Timestamp>,
    /// The expiry was found spurious (counted once).
    pub spurious: bool,
}

impl ReqState {
    pub(crate) fn new(max_send_wr: u32) -> Self {
        ReqState {
            sq: VecDeque::with_capacity(max_send_wr.min(4096) as usize),
            tx_idx: 0,
            psn_next: 0,
            psn_max: 0,
            una: 0,
            inflight_bytes: 0,
            rd_count: 0,
            rd_bytes: 0,
            retries_left: 7,
            rnr_retries_left: 7,
            rewound_at: None,
            psn_high: 0,
            rtt: RttEstimator::default(),
            timed: None,
            cwnd: None,
            recover: 0,
            una_seen: 0,
            sr_resend: VecDeque::new(),
            sr_last: None,
            probe: None,
            probe_send: None,
            stall_floor: std::time::Duration::ZERO,
        }
    }

    /// Entering RTS with the initial send PSN.
    pub(crate) fn start(&mut self, sq_psn: u32, retry_cnt: u8, rnr_retry: u8) {
        self.psn_next = sq_psn;
        self.psn_max = sq_psn;
        self.una = sq_psn;
        self.psn_high = sq_psn;
        self.una_seen = sq_psn;
        self.recover = sq_psn;
        self.retries_left = retry_cnt;
        self.rnr_retries_left = rnr_retry;
    }

    pub(crate) fn push(&mut self, wr: SendWr) {
        self.sq.push_back(SqEntry::new(wr));
    }

    pub(super) fn idx_containing(&self, p: u32) -> Option<usize> {
        self.sq
            .iter()
            .position(|e| e.pending() && psn_in(p, e.first_psn, e.last_psn))
    }

    pub(super) fn front_pending(&self) -> Option<usize> {
        self.sq.iter().position(|e| !e.done)
    }

    /// Points the transmit cursor at `psn`: SEND and WRITE packets from there on count
    /// as unsent (go-back-N); `lost` says which outstanding RDMA READ requests are to
    /// be asked again (see [`LostReads`]). A READ whose request stays outstanding
    /// holds the cursor until its responses are in.
    pub(super) fn seek(&mut self, psn: u32, lost: LostReads) {
        self.psn_next = psn;
        let idx = self
            .sq
            .iter()
            .position(|e| e.pending() && psn_diff(e.last_psn, psn) >= 0)
            .or_else(|| self.sq.iter().position(|e| !e.started))
            .unwrap_or(self.sq.len());
        self.tx_idx = idx;
        for e in self.sq.iter_mut().skip(idx) {
            let ask_again = match lost {
                LostReads::All => true,
                LostReads::Containing => psn_in(psn, e.first_psn, e.last_psn),
                LostReads::None => false,
            };
            if e.issued && ask_again {
                e.issued = false;
                self.rd_count = self.rd_count.saturating_sub(1);
                self.rd_bytes = self.rd_bytes.saturating_sub(e.rd_issued_bytes);
            }
        }
        self.inflight_bytes = 0;
    }

    /// Acknowledges every PSN before `limit`. Returns the PSN to go back to when a READ
    /// before `limit` still misses response data (an implicit NAK, IBTA §9.7.5.1.5).
    /// `true` in the first field when `una` advanced.
    pub(super) fn ack_up_to(&mut self, limit: u32) -> (bool, Option<u32>) {
        if !psn_lt(self.una, limit) {
            return (false, None);
        }
        let mut new_una = limit;
        let mut target = None;
        for e in self.sq.iter_mut() {
            if e.done || !e.has_psn() {
                continue;
            }
            if !e.started || psn_diff(e.first_psn, limit) >= 0 {
                break;
            }
            if e.is_read() {
                if psn_lt(e.rd_next, limit) {
                    new_una = e.rd_next;
                    target = Some(e.rd_next);
                }
                break;
            }
            if psn_lt(e.last_psn, limit) {
                e.done = true;
            } else {
                break;
            }
        }
        let advanced = psn_lt(self.una, new_una);
        if advanced {
            self.una = new_una;
        }
        (advanced, target)
    }

    pub(super) fn recount_inflight(&mut self, mtu: u32) {
        let mut b = 0;
        for e in self.sq.iter() {
            if !e.pending() || e.is_read() {
                continue;
            }
            if psn_diff(e.first_psn, self.psn_next) >= 0 {
                break;
            }
            let lo = if psn_lt(e.first_psn, self.una) {
                psn_diff(self.una, e.first_psn) as u32
            } else {
                0
            };
            let hi = (psn_diff(self.psn_next, e.first_psn).max(0) as u32).min(e.npkts);
            b += e.bytes(lo, hi.max(lo), mtu);
        }
        self.inflight_bytes = b;
    }
}

impl RcQp {
    /// Next request packet, if the state, the window, ORD and fences allow one.
    pub(crate) fn requester_transmit(
        &mut self,
        now: Timestamp,
        env: &mut RcEnv<'_>,
    ) -> Option<TxPacket> {
        if !matches!(self.state, QpState::Rts | QpState::Sqd) {
            return None;
        }
        if let Some(t) = self.timers.get(Timer::Rnr) {
            if now < t {
                return None;
            }
            self.timers.stop(Timer::Rnr);
        }
        if let Some(pkt) = self.probe_transmit(now) {
            self.arm_timers(now);
            return Some(pkt);
        }
        if let Some(pkt) = self.selective_resend(now) {
            self.arm_timers(now);
            return Some(pkt);
        }
        loop {
            let idx = self.req.tx_idx;
            let e = self.req.sq.get(idx)?;
            if e.done {
                self.req.tx_idx += 1;
                continue;
            }
            if !e.started {
                if self.state == QpState::Sqd {
                    return None;
                }
                let fenced = e.wr.flags.contains(SendFlags::FENCE)
                    && self.req.sq.iter().take(idx).any(|p| p.is_read() && !p.done);
                if fenced {
                    return None;
                }
                match self.start_wr(idx, env) {
                    Ok(true) => {}
                    Ok(false) => {
                        self.req.tx_idx += 1;
                        self.complete_front();
                        continue;
                    }
                    Err(status) => {
                        self.fail_wr(idx, status);
                        return None;
                    }
                }
            }
            let pkt = self.emit(idx, now)?;
            self.arm_timers(now);
            return Some(pkt);
        }
    }

    /// Arms the IBTA local ACK timer and the adaptive retransmission timer if they are
    /// not running (a request is outstanding once a packet left). With `timeout` 0
    /// neither runs (IBTA §9.7.6.1.3: no timer).
    fn arm_timers(&mut self, now: Timestamp) {
        let Some(t) = ack_timeout(self.a.timeout) else {
            return;
        };
        if !self.timers.is_armed(Timer::Ack) {
            self.timers.set(Timer::Ack, now + t);
        }
        if !self.timers.is_armed(Timer::Rto) {
            self.timers
                .set(Timer::Rto, now + self.rto_now().unwrap_or(t));
        }
    }

    /// The adaptive retransmission timeout now (RFC 6298 estimate clamped to
    /// `[max(RcConfig::min_rto, the longest spurious round trip seen), IBTA local ACK
    /// timeout]`); `None` with `timeout` 0.
    pub(crate) fn rto_now(&self) -> Option<std::time::Duration> {
        let t = ack_timeout(self.a.timeout)?;
        let floor = self.cfg.min_rto.max(self.req.stall_floor);
        Some(self.req.rtt.rto(self.cfg.initial_rto, floor, t))
    }

    /// The tail loss probe, if one is due and still unacknowledged: the packet rebuilt
    /// from its WR, with AckReq. Only the timed packet, if it is the one resent, stops
    /// being timed (Karn); a sample of an earlier one stays valid.
    fn probe_transmit(&mut self, now: Timestamp) -> Option<TxPacket> {
        let p = self.req.probe_send.take()?;
        if psn_lt(p, self.req.una) {
            return None;
        }
        let idx = self.req.idx_containing(p)?;
        let (pkt, _) = self.build(idx, p, true)?;
        if self.req.timed.is_some_and(|(t, _)| t == p) {
            self.req.timed = None;
        }
        self.counters.rto_probes += 1;
        if let Some(tp) = self.req.probe.as_mut() {
            tp.sent_at = Some(now);
        }
        Some(pkt)
    }

    /// The next queued selective resend that is still unacknowledged (SEND/WRITE
    /// packets only; READs recover by go-back-N). Sets AckReq so the responder reports
    /// the repaired sequence at once.
    fn selective_resend(&mut self, now: Timestamp) -> Option<TxPacket> {
        while let Some(p) = self.req.sr_resend.pop_front() {
            // Acknowledged meanwhile, or the go-back-N cursor will send it anyway.
            if psn_lt(p, self.req.una) || !psn_lt(p, self.req.psn_next) {
                continue;
            }
            let Some(idx) = self.req.idx_containing(p) else {
                continue;
            };
            if self.req.sq[idx].is_read() {
                continue;
            }
            if let Some((pkt, _)) = self.build(idx, p, true) {
                self.req.timed = None; // Karn: a resend makes later ACKs ambiguous
                self.req.sr_last = Some((p, now));
                self.counters.sr_retransmits += 1;
                return Some(pkt);
            }
        }
        None
    }

    /// Processes a WR reached for the first time: runs local operations (`Ok(false)`)
    /// or validates the SGEs and assigns PSNs (`Ok(true)`).
    fn start_wr(&mut self, idx: usize, env: &mut RcEnv<'_>) -> Result<bool, WcStatus> {
        let (pd, qpn, mtu) = (self.pd, self.qpn, self.mtu());
        let psn = self.req.psn_max;
        let Some(e) = self.req.sq.get_mut(idx) else {
            return Ok(false);
        };
        e.started = true;
        match e.wr.op {
            SendOp::LocalInv { rkey } => {
                env.keys.invalidate(pd, None, rkey)?;
                e.done = true;
                return Ok(false);
            }
            SendOp::BindMw {
                mw_handle,
                rkey,
                mr_lkey,
                addr,
                length,
                access,
            } => {
                env.keys
                    .bind_mw(pd, qpn, mw_handle, rkey, mr_lkey, addr, length, access)?;
                e.done = true;
                return Ok(false);
            }
            _ => {}
        }
        let access = if e.is_read() {
            AccessFlags::LOCAL_WRITE
        } else {
            AccessFlags::empty()
        };
        for (i, sge) in e.wr.sg_list.as_slice().iter().enumerate() {
            e.segs[i] = env
                .keys
                .check_local(pd, sge.lkey, sge.addr, sge.length as u64, access)?;
        }
        e.nsegs = e.wr.sg_list.as_slice().len() as u8;
        e.len = e.wr.sg_list.total_len() as u32;
        e.npkts = packets_for(e.len as u64, mtu);
        e.first_psn = psn;
        e.last_psn = psn_add(psn, e.npkts - 1);
        e.rd_next = psn;
        // No READ request issued yet: its end is before the first PSN.
        e.req_last_psn = psn_add(psn, PSN_MASK);
        self.req.psn_max = psn_add(psn, e.npkts);
        Ok(true)
    }

    /// Builds the packet at the cursor (inside `sq[idx]`); `None` when the window, the
    /// resend pacing or the READ limits block it.
    fn emit(&mut self, idx: usize, now: Timestamp) -> Option<TxPacket> {
        let (mtu, cfg, ord) = (self.mtu(), self.cfg, self.a.max_rd_atomic.max(1) as u32);
        let psn = self.req.psn_next;
        let e = self.req.sq.get(idx)?;
        let i = psn_diff(psn, e.first_psn);
        if i < 0 || i as u32 >= e.npkts {
            // Cursor inconsistent with the WR: skip it (cannot happen by construction).
            self.req.tx_idx += 1;
            return None;
        }
        if let Some(w) = self.req.cwnd {
            if psn_diff(psn, self.req.una) >= w.max(1) as i32 {
                return None;
            }
        }
        let fresh = !psn_lt(psn, self.req.psn_high);
        let i = i as u32;
        let off = i as u64 * mtu as u64;
        if let SendOp::RdmaRead { remote_addr, rkey } = e.wr.op {
            // A READ larger than the READ budget is asked for in segments of the budget
            // (whole packets), the next when the previous one's responses are in, so its
            // response burst stays within what the receive buffer holds (IBTA lets a
            // requester ask for any part of a READ again, as after a loss).
            // A request asked again from inside an earlier one (after a loss) ends where
            // that one did: the responder answers a PSN it has seen as a duplicate, with
            // the tail of the original response.
            let seg_last = if psn_lt(e.req_last_psn, psn) {
                let remaining = (e.len as u64).saturating_sub(off);
                let budget = (cfg.max_read_inflight_bytes / mtu as u64).max(1) * mtu as u64;
                psn_add(psn, packets_for(remaining.min(budget), mtu) - 1)
            } else {
                e.req_last_psn
            };
            let seg = e.bytes(i, psn_diff(seg_last, e.first_psn) as u32 + 1, mtu);
            if e.issued
                || self.req.rd_count >= ord
                || (self.req.rd_count > 0 && self.req.rd_bytes + seg > cfg.max_read_inflight_bytes)
            {
                return None;
            }
            let mut hdr = self.headers(Opcode::RcRdmaReadRequest, psn, true, 0);
            hdr.reth = Some(Reth {
                va: remote_addr.wrapping_add(off),
                rkey,
                dma_len: seg as u32,
            });
            let whole = seg_last == e.last_psn;
            let e = &mut self.req.sq[idx];
            e.issued = true;
            e.req_psn = psn;
            e.req_last_psn = seg_last;
            e.rd_next = psn;
            e.rd_issued_bytes = seg;
            self.req.rd_count += 1;
            self.req.rd_bytes += seg;
            self.req.psn_next = psn_add(seg_last, 1);
            if whole {
                self.req.tx_idx += 1;
            }
            self.counters.rdma_sends += 1;
            self.note_sent(psn, self.req.psn_next, fresh, now);
            return Some(TxPacket {
                hdr,
                payload: Default::default(),
            });
        }
        let plen = e.bytes(i, i + 1, mtu);
        if self.req.inflight_bytes > 0 && self.req.inflight_bytes + plen > cfg.max_inflight_bytes {
            return None;
        }
        // AckReq also where the window or the resend pacing closes after this packet,
        // so the ACK that reopens it is not left to the timer.
        let window_full = self.req.inflight_bytes + plen + mtu as u64 > cfg.max_inflight_bytes
            || self
                .req
                .cwnd
                .is_some_and(|w| psn_diff(psn_add(psn, 1), self.req.una) >= w.max(1) as i32);
        let (mut pkt, last) = self.build(idx, psn, window_full)?;
        if last && !window_full && self.next_wr_follows_at_once(idx) {
            // The next message's packet follows in the same transmission and asks for
            // the ACK that covers this one too (a read's RDMA WRITE ahead of its
            // response SEND: one ACK instead of two, IBTA 9.7.5.1.2 coalesced ACKs).
            pkt.hdr.bth.ack_req = false;
        }
        if last {
            self.req.tx_idx += 1;
        }
        self.req.psn_next = psn_add(psn, 1);
        self.req.inflight_bytes += plen;
        if matches!(
            self.req.sq[idx].wr.op,
            SendOp::RdmaWrite { .. } | SendOp::RdmaWriteWithImm { .. }
        ) {
            self.counters.rdma_sends += 1;
        }
        let timed = pkt.hdr.bth.ack_req;
        self.note_sent(psn, self.req.psn_next, fresh && timed, now);
        Some(pkt)
    }

    /// Whether the WR after `sq[idx]` is a SEND or RDMA WRITE that the requester will
    /// emit right after `sq[idx]`'s last packet (the QP is in RTS, and the WR is not
    /// fenced), so that packet may leave its AckReq to the following one. READs are
    /// excluded (their request is acknowledged by a response, after a wait for the
    /// data), as are local operations (they send nothing).
    fn next_wr_follows_at_once(&self, idx: usize) -> bool {
        self.state == QpState::Rts
            && self.req.sq.get(idx + 1).is_some_and(|n| {
                !n.done
                    && !n.wr.flags.contains(SendFlags::FENCE)
                    && matches!(
                        n.wr.op,
                        SendOp::Send
                            | SendOp::SendWithImm { .. }
                            | SendOp::SendWithInv { .. }
                            | SendOp::RdmaWrite { .. }
                            | SendOp::RdmaWriteWithImm { .. }
                    )
            })
    }

    /// Bookkeeping of a request packet for `psn` sent (`next`: the PSN after it):
    /// raises the high-water mark and, for a first transmission that asks for an ACK,
    /// starts a round-trip measurement if none is running (Karn).
    fn note_sent(&mut self, psn: u32, next: u32, time_it: bool, now: Timestamp) {
        if psn_lt(self.req.psn_high, next) {
            self.req.psn_high = next;
        }
        if time_it && self.req.timed.is_none() {
            self.req.timed = Some((psn, now));
        }
    }

    /// The SEND / RDMA WRITE packet for `psn` of `sq[idx]` (regenerated from the WR and
    /// registered memory), with AckReq when it ends the message, every
    /// `ack_req_every_packets`, or with `force_ack`. Also returns whether it is the last
    /// packet of the message. `None` for a READ or a PSN outside the WR.
    fn build(&self, idx: usize, psn: u32, force_ack: bool) -> Option<(TxPacket, bool)> {
        let (mtu, cfg) = (self.mtu(), self.cfg);
        let e = self.req.sq.get(idx)?;
        let i = psn_diff(psn, e.first_psn);
        if i < 0 || i as u32 >= e.npkts || e.is_read() {
            return None;
        }
        let i = i as u32;
        let off = i as u64 * mtu as u64;
        let plen = e.bytes(i, i + 1, mtu);
        let pos = pos_of(i, e.npkts);
        let last = matches!(pos, Pos::Last | Pos::Only);
        let every = cfg.ack_req_every_packets;
        let ack_req = force_ack || last || (every > 0 && i % every == every - 1);
        let (opcode, reth, imm, ieth) = match e.wr.op {
            SendOp::Send => (send_opcode(pos, false, false), None, None, None),
            SendOp::SendWithImm { imm_data } => {
                (send_opcode(pos, true, false), None, Some(imm_data), None)
            }
            SendOp::SendWithInv { invalidate_rkey } => (
                send_opcode(pos, false, true),
                None,
                None,
                Some(invalidate_rkey),
            ),
            SendOp::RdmaWrite { remote_addr, rkey } => (
                write_opcode(pos, false),
                Some(Reth {
                    va: remote_addr,
                    rkey,
                    dma_len: e.len,
                }),
                None,
                None,
            ),
            SendOp::RdmaWriteWithImm {
                remote_addr,
                rkey,
                imm_data,
            } => (
                write_opcode(pos, true),
                Some(Reth {
                    va: remote_addr,
                    rkey,
                    dma_len: e.len,
                }),
                Some(imm_data),
                None,
            ),
            _ => return None,
        };
        let payload = gather(&e.segs[..e.nsegs as usize], off as usize, plen as usize)?;
        let mut hdr = self.headers(opcode, psn, ack_req, plen as usize);
        hdr.bth.se = last && e.wr.flags.contains(SendFlags::SOLICITED);
        if matches!(pos, Pos::First | Pos::Only) {
            hdr.reth = reth;
        }
        if last {
            hdr.imm = imm;
            hdr.ieth = ieth;
        }
        Some((TxPacket { hdr, payload }, last))
    }

    /// Pops finished WRs from the front of the SQ, producing their completions (signaled
    /// ones and every error) in posting order.
    pub(crate) fn complete_front(&mut self) {
        while self.req.sq.front().is_some_and(|e| e.done) {
            let Some(e) = self.req.sq.pop_front() else {
                break;
            };
            self.req.tx_idx = self.req.tx_idx.saturating_sub(1);
            self.push_send_completion(&e, e.status);
        }
    }

    fn push_send_completion(&mut self, e: &SqEntry, status: WcStatus) {
        if status == WcStatus::Success && !e.wr.flags.contains(SendFlags::SIGNALED) {
            return;
        }
        let mut wc = WorkCompletion::new(e.wr.wr_id, status, wc_opcode(&e.wr.op), self.qpn);
        wc.byte_len = e.len;
        self.push_send_wc(wc);
    }

    /// Completes `sq[idx]` with an error and moves the QP to Error.
    pub(crate) fn fail_wr(&mut self, idx: usize, status: WcStatus) {
        if let Some(e) = self.req.sq.get_mut(idx) {
            e.done = true;
            e.status = status;
            self.counters.send_err += 1;
        }
        self.enter_error();
    }

    /// Completes every WR of the send queue: finished ones with their status, the rest
    /// with IBV_WC_WR_FLUSH_ERR.
    pub(crate) fn flush_send_queue(&mut self) {
        while let Some(e) = self.req.sq.pop_front() {
            let status = if e.done {
                e.status
            } else {
                WcStatus::WrFlushErr
            };
            self.push_send_completion(&e, status);
        }
        let (psn, retry, rnr) = (self.req.psn_max, self.a.retry_cnt, self.a.rnr_retry);
        self.req = ReqState::new(self.cap.max_send_wr);
        self.timers.stop(Timer::Ack);
        self.timers.stop(Timer::Rto);
        self.timers.stop(Timer::Rnr);
        self.req.start(psn, retry, rnr);
    }
}
