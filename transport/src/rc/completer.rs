//! Completer (IBTA Vol 1 §9.7.5.1, §9.7.6, §9.9.2): ACK, NAK and READ response
//! processing, go-back-N restarts, RNR waits and the local ACK timer.
use super::timers::Timer;
use crate::time::Timestamp;
use crate::verbs::{QpState, WcStatus};
use crate::wire::{NakCode, Packet};

use super::ops::{ack_timeout, classify, decode_syndrome, pos_of, rnr_timer, Kind, Pos, Syndrome};
use super::payload::scatter;
use super::psn::{psn_add, psn_diff, psn_lt};
use super::qp::RcQp;
use super::requester::{LostReads, TailProbe};

impl RcQp {
    /// ACK, NAK and READ response processing.
    pub(crate) fn completer_handle(&mut self, now: Timestamp, pkt: &Packet<'_>) {
        let p = pkt.hdr.bth.psn & super::psn::PSN_MASK;
        let (kind, pos, ..) = classify(pkt.hdr.bth.opcode);
        if !psn_lt(p, self.req.psn_max) {
            return; // a PSN never sent
        }
        if psn_lt(p, self.req.una) {
            // A stale duplicate. A READ response of data already placed is the peer
            // answering a READ we asked for again: it is busy with our requests, and
            // what it answers next comes after this replay, so neither timer may
            // expire while such responses arrive.
            if kind == Kind::ReadResponse {
                self.restart_timers(now, true);
            }
            return;
        }
        if kind == Kind::ReadResponse {
            // Evidence of a live peer even when it does not advance (a response after a
            // lost one): no adaptive resend into a peer that is answering. The IBTA
            // timer is left to progress, so a peer that never delivers the missing
            // response is still given up on.
            self.restart_timers(now, false);
        }
        match kind {
            Kind::ReadResponse => self.on_read_response(now, p, pos, pkt.payload),
            Kind::Ack => match pkt.hdr.aeth.map(|a| decode_syndrome(a.syndrome)) {
                Some(Syndrome::Ack) => {
                    let (adv, target) = self.req.ack_up_to(psn_add(p, 1));
                    self.after_ack(now, adv, target);
                }
                Some(Syndrome::Rnr(timer)) => self.on_rnr(now, p, timer),
                Some(Syndrome::Nak(code)) => self.on_nak(now, p, code),
                _ => {}
            },
            _ => {}
        }
        self.complete_front();
    }

    fn after_ack(&mut self, now: Timestamp, advanced: bool, target: Option<u32>) {
        if advanced {
            self.progress(now);
        }
        if let Some(t) = target {
            self.implicit_retry(now, t);
        }
    }

    /// Forward progress: reset the retry counters, take a round-trip sample if the
    /// timed packet is now acknowledged (Karn: only packets sent once are timed), open
    /// the resend pacing window by the PSNs acknowledged (slow start) and restart both
    /// retransmission timers.
    fn progress(&mut self, now: Timestamp) {
        let r = &mut self.req;
        r.retries_left = self.a.retry_cnt;
        r.rnr_retries_left = self.a.rnr_retry;
        r.rewound_at = None;
        if psn_lt(r.psn_next, r.una) {
            // The cursor lags (a restart was overtaken by acknowledgements of what was
            // sent before it): skip ahead; the READs still outstanding are answered.
            let una = r.una;
            r.seek(una, LostReads::None);
        }
        // Karn / RFC 6298 §5.7: a new valid sample ends the back-off. Without one,
        // forward progress still undoes one doubling when resends are paced: under
        // sustained loss every ACK follows some resend, so no sample comes for long
        // stretches, and a back-off that only a sample could end pins the timeout at
        // the IBTA ceiling (one resend per local ACK timeout, each expiry using up a
        // retry). Pacing keeps the resent burst ACK-clocked; unpaced (a whole window
        // resent at once) easing early causes spurious expiries while that window is
        // still queued (see `docs/reliability.md` §2.2), so there only a sample ends it.
        let paced = self.cfg.recovery_window_pkts > 0;
        if let Some(tp) = r.probe.as_mut() {
            // Evidence of a peer that stalled rather than lost something: an ACK after
            // the expiry that leaves part of what was sent before it unacknowledged
            // (it can only answer original packets: the probe, the last one, is
            // acknowledged with everything before it); one that acknowledges a packet
            // timed before the expiry, never resent, later than the timeout; or an
            // answer to the probe itself that took longer than the timeout. Then the
            // stall, as long as the expired timer had run, becomes the timeout's
            // floor. The episode ends once everything sent before the expiry is
            // acknowledged.
            let late_timed = r
                .timed
                .filter(|&(p, _)| psn_lt(p, r.una))
                .is_some_and(|(_, t)| now.since(t) >= tp.expired);
            let late_probe =
                !psn_lt(r.una, tp.high) && tp.sent_at.is_some_and(|t| now.since(t) >= tp.expired);
            if !tp.spurious && (psn_lt(r.una, tp.high) || late_timed || late_probe) {
                tp.spurious = true;
                self.counters.spurious_rto += 1;
                r.stall_floor = r.stall_floor.max(now.since(tp.armed_at));
            }
            if !psn_lt(r.una, tp.high) {
                r.probe = None;
            }
        }
        match r.timed {
            Some((p, t)) if psn_lt(p, r.una) => {
                r.rtt.sample(now.since(t));
                r.rtt.reset_backoff();
                r.timed = None;
            }
            _ if paced => r.rtt.ease_backoff(),
            _ => {}
        }
        let acked = psn_diff(r.una, r.una_seen).max(0) as u32;
        r.una_seen = r.una;
        if let Some(w) = r.cwnd {
            r.cwnd = if psn_lt(r.una, r.recover) {
                Some(w.saturating_add(acked))
            } else {
                None
            };
        }
        // Sent and unacknowledged (after a go-back-N restart the cursor may lag).
        let outstanding = psn_lt(r.una, r.psn_high);
        let t = ack_timeout(self.a.timeout).filter(|_| outstanding);
        self.timers.set_opt(Timer::Ack, t.map(|d| now + d));
        self.timers.set_opt(
            Timer::Rto,
            self.rto_now().filter(|_| outstanding).map(|d| now + d),
        );
        let mtu = self.mtu();
        self.req.recount_inflight(mtu);
    }

    /// Restarts the adaptive retransmission timer and, with `ibta`, the IBTA local ACK
    /// timer, if requests are outstanding; retry counts and the back-off are kept
    /// (nothing was acknowledged).
    fn restart_timers(&mut self, now: Timestamp, ibta: bool) {
        if !psn_lt(self.req.una, self.req.psn_high) {
            return;
        }
        if let Some(rto) = self.rto_now() {
            self.timers.set(Timer::Rto, now + rto);
        }
        if ibta {
            self.timers
                .set_opt(Timer::Ack, ack_timeout(self.a.timeout).map(|d| now + d));
        }
    }

    /// Go-back-N to `psn` (every READ from there asked again); the IBTA local ACK
    /// timer restarts.
    fn rewind(&mut self, now: Timestamp, psn: u32) {
        self.timers
            .set_opt(Timer::Ack, ack_timeout(self.a.timeout).map(|d| now + d));
        self.rewind_keep_timer(now, psn, LostReads::All);
    }

    /// Go-back-N to `psn`, leaving the IBTA local ACK timer running (adaptive timer
    /// expiries must not postpone the retry accounting); the adaptive timer restarts
    /// with the current (backed-off) timeout. Starts resend pacing: at most
    /// `recovery_window_pkts` PSNs beyond the restart point, and ends the round-trip
    /// measurement (Karn).
    fn rewind_keep_timer(&mut self, now: Timestamp, psn: u32, lost: LostReads) {
        self.req.seek(psn, lost);
        self.timers
            .set_opt(Timer::Rto, self.rto_now().map(|d| now + d));
        self.req.timed = None;
        self.req.probe = None;
        self.req.probe_send = None;
        self.req.rewound_at = Some(psn);
        if self.cfg.recovery_window_pkts > 0 {
            let before = psn_diff(psn, self.req.una).max(0) as u32;
            self.req.cwnd = Some(self.cfg.recovery_window_pkts.saturating_add(before));
            self.req.recover = self.req.psn_high;
        }
        self.counters.completer_retry_err += 1;
    }

    /// The first response to an adaptive timer expiry, a tail loss probe (RFC 8985
    /// §7, with PSNs for sequence numbers): resend only the last packet sent (with
    /// AckReq), move no cursor, and wait one more (backed-off) timeout. If the peer
    /// had everything (it was merely slow, or an ACK was lost), the probe is a
    /// duplicate it re-ACKs, and nothing else is resent; if the last packet was lost,
    /// the probe repairs it; if an earlier one was lost, a go-back-N responder NAKs the
    /// gap (or, if it already did and that NAK was lost, stays silent), and the next
    /// expiry restarts go-back-N from `una` as before. Not used when the last packet
    /// belongs to an RDMA READ (a READ asked again costs a whole replay of its data) or
    /// while a go-back-N restart is still resending. `false` when no probe was sent.
    fn tail_probe(&mut self, now: Timestamp, expired: std::time::Duration) -> bool {
        let r = &self.req;
        if psn_lt(r.psn_next, r.psn_high) || !psn_lt(r.una, r.psn_high) {
            return false;
        }
        let last = psn_add(r.psn_high, 0xFF_FFFF); // psn_high - 1
        match r.idx_containing(last) {
            Some(idx) if !r.sq[idx].is_read() => {}
            _ => return false,
        }
        self.req.probe = Some(TailProbe {
            high: self.req.psn_high,
            expired,
            armed_at: Timestamp(now.0.saturating_sub(expired.as_nanos() as u64)),
            sent_at: None,
            spurious: false,
        });
        self.req.probe_send = Some(last);
        self.timers
            .set_opt(Timer::Rto, self.rto_now().map(|d| now + d));
        true
    }

    /// Selective retransmission (negotiated peers only): the PSN sequence error NAK
    /// names the responder's expected PSN (a cumulative acknowledgement of what is
    /// before it, as in IBTA), and the responder kept the packets after it: resend that
    /// one packet. No retry is used up (the IBTA timer still bounds the time without
    /// progress). A missing PSN inside an RDMA READ falls back to go-back-N from that
    /// READ.
    fn selective_nak(&mut self, now: Timestamp, p: u32) {
        if psn_lt(p, self.req.una) || !psn_lt(p, self.req.psn_high) {
            return;
        }
        // During an RNR wait the sequence NAK for the RNR-NAKed PSN (packets sent behind
        // it) is the same event: go-back-N resends from there when the wait ends, so a
        // selective resend would send it twice and the timer would back off needlessly.
        if self.timers.is_armed(Timer::Rnr) && self.req.rewound_at == Some(p) {
            return;
        }
        let Some(idx) = self.req.idx_containing(p) else {
            return;
        };
        let e = &self.req.sq[idx];
        if e.is_read() {
            let t = if e.issued { e.req_psn } else { e.rd_next };
            if self.req.rewound_at != Some(t) && !psn_lt(self.req.psn_next, t) {
                self.rewind(now, t);
            }
            return;
        }
        // A repeated NAK for a PSN resent less than a smoothed round trip ago cannot
        // have seen that resend yet: ignore it.
        let recent = match (self.req.sr_last, self.req.rtt.srtt()) {
            (Some((q, t)), Some(srtt)) => q == p && now < t + srtt,
            _ => false,
        };
        if !recent && !self.req.sr_resend.contains(&p) {
            self.req.sr_resend.push_back(p);
        }
        // The NAK shows the responder alive and receiving; the resend needs a round
        // trip, so the adaptive timer restarts (the IBTA timer does not).
        self.timers
            .set_opt(Timer::Rto, self.rto_now().map(|d| now + d));
    }

    /// Go-back-N after evidence of a lost READ response, once per restart point.
    fn implicit_retry(&mut self, now: Timestamp, psn: u32) {
        if self.req.rewound_at != Some(psn) {
            self.rewind(now, psn);
        }
    }

    fn on_read_response(&mut self, now: Timestamp, p: u32, pos: Pos, payload: &[u8]) {
        let (adv, target) = self.req.ack_up_to(p);
        if adv {
            self.progress(now);
        }
        if let Some(t) = target {
            self.implicit_retry(now, t);
            return;
        }
        let mtu = self.mtu();
        let Some(idx) = self.req.idx_containing(p) else {
            return;
        };
        let e = &mut self.req.sq[idx];
        if !e.is_read() || !e.issued {
            return;
        }
        if p != e.rd_next {
            let t = e.rd_next;
            if psn_lt(t, p) {
                self.implicit_retry(now, t);
            }
            return;
        }
        let i = psn_diff(p, e.req_psn);
        let n = psn_diff(e.req_last_psn, e.req_psn) + 1;
        let k = psn_diff(p, e.first_psn) as u32;
        let total = psn_diff(e.last_psn, e.first_psn) as u32 + 1;
        // The answer to a READ re-issued from the middle (req_psn > first_psn) starts
        // with First/Only by the request's own count; Linux rxe replays it with the
        // original message's positions instead (Middle .. Last, rxe_resp.c read_reply),
        // so accept either.
        if i < 0 || (pos != pos_of(i as u32, n as u32) && pos != pos_of(k, total)) {
            return;
        }
        if payload.len() as u64 != e.bytes(k, k + 1, mtu) {
            return;
        }
        let off = k as usize * mtu as usize;
        // SAFETY: the sink SGEs were validated with LOCAL_WRITE; the application does not
        // touch them while the READ is outstanding.
        if !unsafe { scatter(&e.segs[..e.nsegs as usize], off, payload) } {
            return;
        }
        e.rd_next = psn_add(p, 1);
        if p == e.req_last_psn || p == e.last_psn {
            // The outstanding request (the whole READ, or its segment) is answered.
            e.done = p == e.last_psn;
            e.issued = false;
            let b = e.rd_issued_bytes;
            self.req.rd_count = self.req.rd_count.saturating_sub(1);
            self.req.rd_bytes = self.req.rd_bytes.saturating_sub(b);
        }
        self.req.una = psn_add(p, 1);
        self.progress(now);
    }

    fn on_rnr(&mut self, now: Timestamp, p: u32, timer: u8) {
        self.counters.rcvd_rnr_err += 1;
        let (adv, target) = self.req.ack_up_to(p);
        if adv {
            self.progress(now);
        }
        if let Some(t) = target {
            self.implicit_retry(now, t);
            return;
        }
        if self.req.rnr_retries_left == 0 {
            self.counters.retry_rnr_exceeded_err += 1;
            let idx = self
                .req
                .idx_containing(p)
                .or(self.req.front_pending())
                .unwrap_or(0);
            self.fail_wr(idx, WcStatus::RnrRetryExcErr);
            return;
        }
        if self.a.rnr_retry != 7 {
            self.req.rnr_retries_left -= 1;
        }
        self.req.seek(p, LostReads::All);
        self.timers.stop(Timer::Ack);
        self.timers.stop(Timer::Rto);
        self.req.timed = None;
        // The wait goes back to `p`: a PSN sequence NAK for `p` drawn by the packets
        // already sent behind it is a repeat, not a loss (costs no retry).
        self.req.rewound_at = Some(p);
        self.timers.set(Timer::Rnr, now + rnr_timer(timer));
    }

    fn on_nak(&mut self, now: Timestamp, p: u32, code: NakCode) {
        // The peer reports a gap (or worse): a tail loss probe episode ends, unjudged.
        self.req.probe = None;
        let (adv, target) = self.req.ack_up_to(p);
        if adv {
            self.progress(now);
        }
        let status = match code {
            NakCode::PsnSequenceError if self.a.selective => {
                self.counters.rcvd_seq_err += 1;
                match target {
                    Some(t) => self.implicit_retry(now, t),
                    None => self.selective_nak(now, p),
                }
                return;
            }
            NakCode::PsnSequenceError => {
                self.counters.rcvd_seq_err += 1;
                let t = target.unwrap_or(p);
                if self.req.rewound_at == Some(t) {
                    return;
                }
                if self.req.retries_left == 0 {
                    WcStatus::RetryExcErr
                } else {
                    self.req.retries_left -= 1;
                    self.rewind(now, t);
                    return;
                }
            }
            NakCode::InvalidRequest => WcStatus::RemInvReqErr,
            NakCode::RemoteAccessError => WcStatus::RemAccessErr,
            NakCode::RemoteOperationalError => WcStatus::RemOpErr,
            NakCode::InvalidRdRequest => WcStatus::RemInvRdReqErr,
            NakCode::Reserved(_) => WcStatus::BadRespErr,
        };
        if status == WcStatus::RetryExcErr {
            self.counters.retry_exceeded_err += 1;
        }
        let idx = self
            .req
            .idx_containing(p)
            .or(self.req.front_pending())
            .unwrap_or(0);
        self.fail_wr(idx, status);
    }

    /// Timer expiries: end of an RNR wait; the adaptive retransmission timer
    /// (go-back-N from the oldest unacknowledged PSN, timeout doubled, no retry used
    /// up); the IBTA local ACK timer (go-back-N and one retry used up, or
    /// IBV_WC_RETRY_EXC_ERR once `retry_cnt` retries are spent).
    pub(crate) fn requester_timeout(&mut self, now: Timestamp) {
        if self.timers.is_due(Timer::Rnr, now) {
            self.timers.stop(Timer::Rnr);
        }
        let ibta_due = self.timers.is_due(Timer::Ack, now);
        let rto_due = self.timers.is_due(Timer::Rto, now);
        if !ibta_due && !rto_due {
            return;
        }
        let active = matches!(self.state, QpState::Rts | QpState::Sqd | QpState::SqError)
            && psn_lt(self.req.una, self.req.psn_high);
        if !active {
            self.timers.stop(Timer::Ack);
            self.timers.stop(Timer::Rto);
            return;
        }
        let expired = self.rto_now().unwrap_or_default();
        let first = self.req.rtt.backoff() == 0;
        self.req.rtt.back_off();
        if !ibta_due {
            self.counters.rto_timeouts += 1;
            let una = self.req.una;
            // A READ asked again from `una`, with nothing received since: that request
            // is queued at the peer as surely as another one would be, and each one it
            // gets costs a whole replay of the data. Wait (backed off); a lost request
            // is asked again by the IBTA timer.
            let read_at_una = self
                .req
                .idx_containing(una)
                .is_some_and(|i| self.req.sq[i].is_read());
            if read_at_una && self.req.rewound_at == Some(una) {
                self.timers
                    .set_opt(Timer::Rto, self.rto_now().map(|d| now + d));
                return;
            }
            // Only the first expiry after a clean stretch (no back-off in force) probes:
            // under sustained loss a probe would only delay go-back-N by a timeout.
            if first && self.req.probe.is_none() && self.tail_probe(now, expired) {
                return;
            }
            self.rewind_keep_timer(now, una, LostReads::Containing);
            return;
        }
        self.timers.stop(Timer::Ack);
        self.counters.local_ack_timeout_err += 1;
        if self.req.retries_left == 0 {
            self.counters.retry_exceeded_err += 1;
            let idx = self.req.front_pending().unwrap_or(0);
            self.fail_wr(idx, WcStatus::RetryExcErr);
            return;
        }
        self.req.retries_left -= 1;
        let una = self.req.una;
        self.timers
            .set_opt(Timer::Ack, ack_timeout(self.a.timeout).map(|d| now + d));
        self.rewind_keep_timer(now, una, LostReads::Containing);
    }
}
