//! Completer (IBTA Vol 1 §9.7.5.1, §9.7.6, §9.9.2): ACK, NAK and READ response
//! processing, go-back-N restarts, RNR waits and the local ACK timer.
use crate::time::Timestamp;
use crate::verbs::{QpState, WcStatus};
use crate::wire::{NakCode, Packet};

use super::ops::{ack_timeout, classify, decode_syndrome, pos_of, rnr_timer, Kind, Pos, Syndrome};
use super::payload::scatter;
use super::psn::{psn_add, psn_diff, psn_lt};
use super::qp::RcQp;

impl RcQp {
    /// ACK, NAK and READ response processing.
    pub(crate) fn completer_handle(&mut self, now: Timestamp, pkt: &Packet<'_>) {
        let p = pkt.hdr.bth.psn & super::psn::PSN_MASK;
        if psn_lt(p, self.req.una) || !psn_lt(p, self.req.psn_max) {
            return; // stale duplicate, or a PSN never sent
        }
        let (kind, pos, ..) = classify(pkt.hdr.bth.opcode);
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
            self.implicit_retry(t);
        }
    }

    /// Forward progress: reset the retry counters and restart the ACK timer.
    fn progress(&mut self, now: Timestamp) {
        let r = &mut self.req;
        r.retries_left = self.a.retry_cnt;
        r.rnr_retries_left = self.a.rnr_retry;
        r.rewound_at = None;
        if psn_lt(r.psn_next, r.una) {
            let una = r.una;
            r.seek(una);
        }
        r.ack_deadline = if psn_lt(r.una, r.psn_next) {
            ack_timeout(self.a.timeout).map(|d| now + d)
        } else {
            None
        };
        let mtu = self.mtu();
        self.req.recount_inflight(mtu);
    }

    /// Go-back-N to `psn`.
    fn rewind(&mut self, psn: u32) {
        self.req.seek(psn);
        self.req.ack_deadline = None;
        self.req.rewound_at = Some(psn);
        self.counters.completer_retry_err += 1;
    }

    /// Go-back-N after evidence of a lost READ response, once per restart point.
    fn implicit_retry(&mut self, psn: u32) {
        if self.req.rewound_at != Some(psn) {
            self.rewind(psn);
        }
    }

    fn on_read_response(&mut self, now: Timestamp, p: u32, pos: Pos, payload: &[u8]) {
        let (adv, target) = self.req.ack_up_to(p);
        if adv {
            self.progress(now);
        }
        if let Some(t) = target {
            self.implicit_retry(t);
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
                self.implicit_retry(t);
            }
            return;
        }
        let i = psn_diff(p, e.req_psn);
        let n = psn_diff(e.last_psn, e.req_psn) + 1;
        if i < 0 || pos != pos_of(i as u32, n as u32) {
            return;
        }
        let k = psn_diff(p, e.first_psn) as u32;
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
        if p == e.last_psn {
            e.done = true;
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
            self.implicit_retry(t);
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
        self.req.seek(p);
        self.req.ack_deadline = None;
        self.req.rewound_at = None;
        self.req.rnr_until = Some(now + rnr_timer(timer));
    }

    fn on_nak(&mut self, now: Timestamp, p: u32, code: NakCode) {
        let (adv, target) = self.req.ack_up_to(p);
        if adv {
            self.progress(now);
        }
        let status = match code {
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
                    self.rewind(t);
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

    /// Timer expiries: end of an RNR wait; local ACK timeout (go-back-N from the oldest
    /// unacknowledged PSN, or IBV_WC_RETRY_EXC_ERR once `retry_cnt` retries are spent).
    pub(crate) fn requester_timeout(&mut self, now: Timestamp) {
        if self.req.rnr_until.is_some_and(|t| now >= t) {
            self.req.rnr_until = None;
        }
        let Some(t) = self.req.ack_deadline else {
            return;
        };
        if now < t {
            return;
        }
        self.req.ack_deadline = None;
        if !matches!(self.state, QpState::Rts | QpState::Sqd | QpState::SqError)
            || !psn_lt(self.req.una, self.req.psn_next)
        {
            return;
        }
        self.counters.local_ack_timeout_err += 1;
        if self.req.retries_left == 0 {
            self.counters.retry_exceeded_err += 1;
            let idx = self.req.front_pending().unwrap_or(0);
            self.fail_wr(idx, WcStatus::RetryExcErr);
            return;
        }
        self.req.retries_left -= 1;
        let una = self.req.una;
        self.rewind(una);
    }
}
