//! Responder (IBTA Vol 1 §9.7.4, §9.7.5, §9.9.3): PSN checks, execution of SEND, RDMA
//! WRITE and RDMA READ requests, ACK coalescing, NAKs and READ response generation.
//!
//! Error choices (documented, following IBTA Table 59/60 and Linux rxe):
//! - Out-of-sequence request: one PSN sequence error NAK per gap (cleared when the
//!   expected PSN arrives); counted in `out_of_seq_request`. With selective
//!   retransmission negotiated the packet is kept for in-order execution instead of
//!   dropped (see `sr_keep`); the NAK still names the expected PSN.
//! - No receive WQE for a SEND First/Only or a WRITE with immediate Last/Only: RNR NAK
//!   with `min_rnr_timer`, PSN not advanced; counted in `send_rnr_err` (as rxe's
//!   `RXE_CNT_SND_RNR`; the requester counts received ones in `rcvd_rnr_err`).
//! - Bad opcode sequence, wrong packet length, missing header, message longer than the
//!   receive WQE (receive completion IBV_WC_LOC_LEN_ERR), WRITE longer or shorter than
//!   its DMA length, IRD exceeded, QP lacking the remote access right: NAK Invalid
//!   Request, QP to Error.
//! - R_Key violation (WRITE, READ): NAK Remote Access Error, QP to Error, nothing
//!   written.
//! - Receive WQE with a bad lkey: NAK Remote Operational Error, receive completion
//!   IBV_WC_LOC_PROT_ERR, QP to Error.
//! - SEND with Invalidate whose rkey cannot be invalidated: NAK Invalid Request and a
//!   receive completion IBV_WC_REM_INV_REQ_ERR (rxe's status), QP to Error.
use std::collections::{HashMap, VecDeque};

use crate::verbs::{AccessFlags, WcOpcode, WcStatus, WorkCompletion, MAX_SGE};
use crate::wire::{Aeth, NakCode, Opcode, Packet, PacketHeaders};

use super::mem::MemRef;
use super::ops::{
    classify, pos_of, read_response_opcode, syndrome_nak, syndrome_rnr, Kind, Pos, SYNDROME_ACK,
};
use super::payload::{scatter, Payload, TxPacket};
use super::psn::{psn_add, psn_diff, psn_in, PSN_MASK};
use super::qp::{packets_for, RcEnv, RcQp};

/// The receive WQE a multi-packet SEND is being placed into.
pub(crate) struct RecvCtx {
    wr_id: u64,
    segs: [MemRef; MAX_SGE],
    nsegs: u8,
    total: u64,
    off: u64,
}

/// The message in progress at the responder.
#[derive(Default)]
pub(crate) enum InMsg {
    #[default]
    None,
    Send(RecvCtx),
    Write {
        mem: MemRef,
        off: u64,
        dma_len: u64,
    },
}

/// Responder output waiting for `poll_transmit`.
pub(crate) enum RespItem {
    /// Acknowledge packet (ACK, RNR NAK or NAK by syndrome).
    Ack { psn: u32, syndrome: u8, msn: u32 },
    /// READ response packets `next..npkts` for the data in `mem`; `dup` when answering
    /// a duplicate request (does not count against IRD).
    Read {
        mem: MemRef,
        first_psn: u32,
        npkts: u32,
        next: u32,
        msn: u32,
        dup: bool,
    },
}

/// A READ request kept to answer its duplicates (IBTA §9.7.5.1.4).
struct ReadRecord {
    first_psn: u32,
    last_psn: u32,
    va: u64,
    mem: MemRef,
}

/// An out-of-order request packet kept for in-order execution (selective
/// retransmission).
struct OooPacket {
    hdr: PacketHeaders,
    payload: Vec<u8>,
}

/// Bytes a kept packet is charged besides its payload (headers and bookkeeping), so
/// that packets without payload are bounded too.
const SR_PACKET_OVERHEAD: u64 = 64;
/// Selective retransmission: the hole at the expected PSN is NAKed again after this
/// many further out-of-order arrivals (its NAK or its resend may have been lost; at
/// worst one duplicate packet).
const SR_RENAK_EVERY: u32 = 64;
/// Most PSNs ahead of the expected PSN a kept packet may be.
const SR_MAX_AHEAD: i32 = 1 << 16;

/// Items [`RespState::start`] makes room for in the responder's output queue (ACKs and
/// READ responses waiting for the next transmit) and in its READ records.
const RESP_OUT_PRESIZE: usize = 64;

/// Responder state.
#[derive(Default)]
pub(crate) struct RespState {
    epsn: u32,
    msn: u32,
    nak_seq_sent: bool,
    msg: InMsg,
    pub(crate) out: VecDeque<RespItem>,
    reads: VecDeque<ReadRecord>,
    /// Selective retransmission: packets after a gap, by PSN.
    ooo: HashMap<u32, OooPacket>,
    ooo_bytes: u64,
    /// Selective retransmission: the expected PSN last NAKed.
    sr_naked: Option<u32>,
    /// Selective retransmission: packets kept since that NAK.
    sr_kept_since_nak: u32,
}

impl RespState {
    /// Entering RTR with the expected PSN. The queue of ACKs and READ responses to
    /// send, and the READ records, are sized here for a burst, so a deeper burst than
    /// the warm-up's never grows them on the data path.
    pub(crate) fn start(&mut self, rq_psn: u32) {
        let mut out = std::mem::take(&mut self.out);
        out.clear();
        out.reserve(RESP_OUT_PRESIZE);
        let mut reads = std::mem::take(&mut self.reads);
        reads.clear();
        reads.reserve(RESP_OUT_PRESIZE);
        *self = RespState {
            epsn: rq_psn,
            out,
            reads,
            ..Default::default()
        };
    }

    /// The receive WQE of a SEND in progress, removed (for flushing).
    pub(crate) fn take_recv_in_progress(&mut self) -> Option<u64> {
        match std::mem::take(&mut self.msg) {
            InMsg::Send(c) => Some(c.wr_id),
            _ => None,
        }
    }

    /// Forgets the out-of-order packets kept for selective retransmission.
    pub(crate) fn drop_kept(&mut self) {
        self.ooo = HashMap::new();
        self.ooo_bytes = 0;
    }

    /// Bytes charged for the kept out-of-order packets.
    #[cfg(test)]
    pub(crate) fn kept_bytes(&self) -> u64 {
        self.ooo_bytes
    }

    /// The expected PSN.
    pub(crate) fn epsn(&self) -> u32 {
        self.epsn
    }

    /// The MSN of the last completed request (24 bits).
    pub(crate) fn msn(&self) -> u32 {
        self.msn
    }
}

impl RcQp {
    /// A request packet (any non-ACK, non-READ-response RC opcode).
    pub(crate) fn responder_handle(&mut self, pkt: &Packet<'_>, env: &mut RcEnv<'_>) {
        let p = pkt.hdr.bth.psn & PSN_MASK;
        let (kind, ..) = classify(pkt.hdr.bth.opcode);
        let d = psn_diff(p, self.resp.epsn);
        if d < 0 {
            self.duplicate(kind, p, pkt);
        } else if d > 0 {
            self.counters.out_of_seq_request += 1;
            if self.a.selective {
                return self.sr_keep(p, d, pkt);
            }
            if !self.resp.nak_seq_sent {
                self.resp.nak_seq_sent = true;
                let e = self.resp.epsn;
                self.queue_nak(e, syndrome_nak(NakCode::PsnSequenceError));
            }
        } else {
            self.resp.nak_seq_sent = false;
            self.execute(p, pkt, env);
            // Drain only after progress (not after an RNR NAK or an error).
            if self.a.selective && self.resp.epsn != p {
                self.sr_drain(env);
            }
        }
    }

    /// Selective retransmission: keeps a request packet `d` PSNs ahead of the expected
    /// PSN (within the buffer limits; otherwise it is dropped and the requester's timer
    /// recovers it) and NAKs the expected PSN: once per expected PSN, and again every
    /// [`SR_RENAK_EVERY`] arrivals while that hole stays open.
    fn sr_keep(&mut self, p: u32, d: i32, pkt: &Packet<'_>) {
        let r = &mut self.resp;
        if let Some(kept) = r.ooo.get_mut(&p) {
            // A resend of a kept packet: keep its AckReq, so the ACK the requester asks
            // for (the end of a paced window) is sent when the gap fills.
            kept.hdr.bth.ack_req |= pkt.hdr.bth.ack_req;
            self.counters.duplicate_request += 1;
            return;
        }
        let len = pkt.payload.len() as u64 + SR_PACKET_OVERHEAD;
        if d < SR_MAX_AHEAD && r.ooo_bytes + len <= self.cfg.sr_buffer_bytes {
            r.ooo.insert(
                p,
                OooPacket {
                    hdr: pkt.hdr,
                    payload: pkt.payload.to_vec(),
                },
            );
            r.ooo_bytes += len;
            self.counters.sr_buffered += 1;
        }
        self.resp.sr_kept_since_nak += 1;
        if self.resp.sr_kept_since_nak >= SR_RENAK_EVERY {
            self.resp.sr_naked = None;
        }
        self.sr_nak_hole();
    }

    /// Selective retransmission: a PSN sequence error NAK for the expected PSN, the
    /// first missing one, unless this expected PSN was NAKed already. Like every NAK
    /// of this core it names the expected PSN, so it is valid IBTA go-back-N too.
    fn sr_nak_hole(&mut self) {
        let e = self.resp.epsn;
        if self.resp.sr_naked != Some(e) {
            self.resp.sr_naked = Some(e);
            self.resp.sr_kept_since_nak = 0;
            self.queue_nak(e, syndrome_nak(NakCode::PsnSequenceError));
        }
    }

    /// Selective retransmission: executes kept packets that are now in sequence. Stops
    /// (and forgets what is kept) when one does not advance the expected PSN (RNR NAK,
    /// or an error that moved the QP to Error).
    fn sr_drain(&mut self, env: &mut RcEnv<'_>) {
        if self.resp.ooo.is_empty() {
            return;
        }
        loop {
            let e = self.resp.epsn;
            let Some(k) = self.resp.ooo.remove(&e) else {
                break;
            };
            let cost = k.payload.len() as u64 + SR_PACKET_OVERHEAD;
            self.resp.ooo_bytes = self.resp.ooo_bytes.saturating_sub(cost);
            let pkt = Packet {
                hdr: k.hdr,
                payload: &k.payload,
            };
            self.execute(e, &pkt, env);
            if self.resp.epsn == e || self.state == crate::verbs::QpState::Error {
                self.resp.drop_kept();
                return;
            }
        }
        // Kept packets the expected PSN has moved past without executing them (they lay
        // inside an executed RDMA READ's PSN range: only a faulty requester sends such
        // packets) are forgotten, so they neither hold buffer space nor, after a PSN
        // wrap, run as the packet of a later PSN.
        let e = self.resp.epsn;
        let before = self.resp.ooo.len();
        self.resp.ooo.retain(|&k, _| psn_diff(k, e) > 0);
        if self.resp.ooo.len() != before {
            self.resp.ooo_bytes = self
                .resp
                .ooo
                .values()
                .map(|k| k.payload.len() as u64 + SR_PACKET_OVERHEAD)
                .sum();
        }
        // Packets are still kept beyond the expected PSN: the filled gap uncovered the
        // next one, NAK it at once.
        if !self.resp.ooo.is_empty() {
            self.sr_nak_hole();
        }
    }

    fn duplicate(&mut self, kind: Kind, p: u32, pkt: &Packet<'_>) {
        self.counters.duplicate_request += 1;
        match kind {
            Kind::Send | Kind::Write => {
                let last = psn_add(self.resp.epsn, PSN_MASK);
                self.queue_ack(last);
            }
            Kind::ReadRequest => {
                let Some(reth) = pkt.hdr.reth else { return };
                let Some(rec) = self
                    .resp
                    .reads
                    .iter()
                    .find(|r| psn_in(p, r.first_psn, r.last_psn))
                else {
                    return;
                };
                let Some(off) = reth.va.checked_sub(rec.va) else {
                    return;
                };
                let Some(mem) = usize::try_from(off)
                    .ok()
                    .and_then(|o| rec.mem.sub(o, reth.dma_len as usize))
                else {
                    return;
                };
                let npkts = packets_for(reth.dma_len as u64, self.mtu());
                if psn_diff(rec.last_psn, p) + 1 != npkts as i32 {
                    return; // not the tail of the original response: malformed
                }
                let (first, last) = (rec.first_psn, rec.last_psn);
                let msn = self.resp.msn;
                let item = RespItem::Read {
                    mem,
                    first_psn: p,
                    npkts,
                    next: 0,
                    msn,
                    dup: true,
                };
                self.queue_read_replay(first, last, item);
            }
            _ => {}
        }
    }

    /// Queues `item`, the answer to a duplicate request for the READ whose response
    /// spans `first..=last`. A response of that READ still queued is replaced in place
    /// (keeping its IRD accounting) and any further ones dropped, so repeated duplicate
    /// requests restart the one response instead of growing the output without bound.
    fn queue_read_replay(&mut self, first: u32, last: u32, mut item: RespItem) {
        let same = |i: &RespItem| match i {
            RespItem::Read { first_psn, .. } => psn_in(*first_psn, first, last),
            RespItem::Ack { .. } => false,
        };
        let Some(at) = self.resp.out.iter().position(same) else {
            self.resp.out.push_back(item);
            return;
        };
        if let (RespItem::Read { dup: old, .. }, RespItem::Read { dup, .. }) =
            (&self.resp.out[at], &mut item)
        {
            *dup = *old;
        }
        self.resp.out[at] = item;
        let mut k = at + 1;
        while k < self.resp.out.len() {
            if same(&self.resp.out[k]) {
                self.resp.out.remove(k);
            } else {
                k += 1;
            }
        }
    }

    /// An in-sequence request.
    fn execute(&mut self, p: u32, pkt: &Packet<'_>, env: &mut RcEnv<'_>) {
        let (kind, pos, imm, inv) = classify(pkt.hdr.bth.opcode);
        let mtu = self.mtu() as usize;
        let first = matches!(pos, Pos::First | Pos::Only);
        let seq_ok = match (&self.resp.msg, kind) {
            (InMsg::None, Kind::Send | Kind::Write) => first,
            (InMsg::None, Kind::ReadRequest) => true,
            (InMsg::Send(_), Kind::Send) | (InMsg::Write { .. }, Kind::Write) => !first,
            _ => false,
        };
        let len = pkt.payload.len();
        let len_ok = match pos {
            Pos::First | Pos::Middle => len == mtu,
            Pos::Last | Pos::Only => len <= mtu,
        } && (kind != Kind::ReadRequest || len == 0);
        let hdr_ok = (!imm || pkt.hdr.imm.is_some())
            && (!inv || pkt.hdr.ieth.is_some())
            && (!(first && matches!(kind, Kind::Write | Kind::ReadRequest))
                || pkt.hdr.reth.is_some());
        if !seq_ok || !len_ok || !hdr_ok {
            return self.fatal(p, NakCode::InvalidRequest, None);
        }
        match kind {
            Kind::Send => self.exec_send(p, pos, pkt, env),
            Kind::Write => self.exec_write(p, pos, pkt, env),
            _ => self.exec_read(p, pkt, env),
        }
    }

    /// Takes a receive WQE from the SRQ or the own RQ, with the PD to check it against.
    fn take_wqe(&mut self, env: &mut RcEnv<'_>) -> Option<(crate::verbs::RecvWr, u32)> {
        if self.has_srq {
            let q = env.srq.as_deref_mut()?;
            let pd = q.pd();
            q.pop().map(|w| (w, pd))
        } else {
            self.rq.pop().map(|w| (w, self.pd))
        }
    }

    fn exec_send(&mut self, p: u32, pos: Pos, pkt: &Packet<'_>, env: &mut RcEnv<'_>) {
        if matches!(pos, Pos::First | Pos::Only) {
            let Some((wr, pd)) = self.take_wqe(env) else {
                self.counters.send_rnr_err += 1;
                return self.queue_nak(p, syndrome_rnr(self.a.min_rnr_timer));
            };
            let mut ctx = RecvCtx {
                wr_id: wr.wr_id,
                segs: Default::default(),
                nsegs: 0,
                total: 0,
                off: 0,
            };
            for (i, sge) in wr.sg_list.as_slice().iter().enumerate() {
                match env.keys.check_local(
                    pd,
                    sge.lkey,
                    sge.addr,
                    sge.length as u64,
                    AccessFlags::LOCAL_WRITE,
                ) {
                    Ok(m) => ctx.segs[i] = m,
                    Err(st) => {
                        return self.fatal(p, NakCode::RemoteOperationalError, Some((wr.wr_id, st)))
                    }
                }
            }
            ctx.nsegs = wr.sg_list.as_slice().len() as u8;
            ctx.total = wr.sg_list.total_len();
            self.resp.msg = InMsg::Send(ctx);
        }
        let InMsg::Send(ctx) = &mut self.resp.msg else {
            return;
        };
        let data = pkt.payload;
        if ctx.off + data.len() as u64 > ctx.total {
            let id = ctx.wr_id;
            return self.fatal(p, NakCode::InvalidRequest, Some((id, WcStatus::LocLenErr)));
        }
        // SAFETY: the receive buffers were validated with LOCAL_WRITE and belong to the
        // posted WQE, which the application does not touch until it completes.
        unsafe { scatter(&ctx.segs[..ctx.nsegs as usize], ctx.off as usize, data) };
        ctx.off += data.len() as u64;
        self.resp.epsn = psn_add(p, 1);
        if matches!(pos, Pos::Last | Pos::Only) {
            let InMsg::Send(ctx) = std::mem::take(&mut self.resp.msg) else {
                return;
            };
            let mut wc =
                WorkCompletion::new(ctx.wr_id, WcStatus::Success, WcOpcode::Recv, self.qpn);
            wc.byte_len = ctx.off as u32;
            wc.imm_data = pkt.hdr.imm;
            wc.src_qp = self.a.dest_qpn;
            if let Some(rkey) = pkt.hdr.ieth {
                if env.keys.invalidate(self.pd, Some(self.qpn), rkey).is_err() {
                    return self.fatal(
                        p,
                        NakCode::InvalidRequest,
                        Some((ctx.wr_id, WcStatus::RemInvReqErr)),
                    );
                }
                wc.invalidated_rkey = Some(rkey);
            }
            self.resp.msn = psn_add(self.resp.msn, 1);
            self.push_recv_wc(wc);
        }
        if pkt.hdr.bth.ack_req {
            self.queue_ack(p);
        }
    }

    fn exec_write(&mut self, p: u32, pos: Pos, pkt: &Packet<'_>, env: &mut RcEnv<'_>) {
        let (_, _, imm, _) = classify(pkt.hdr.bth.opcode);
        if matches!(pos, Pos::First | Pos::Only) {
            let Some(reth) = pkt.hdr.reth else { return };
            if !self.a.access.contains(AccessFlags::REMOTE_WRITE) {
                return self.fatal(p, NakCode::InvalidRequest, None);
            }
            let len = reth.dma_len as u64;
            match env.keys.check_remote(
                self.pd,
                self.qpn,
                reth.rkey,
                reth.va,
                len,
                AccessFlags::REMOTE_WRITE,
            ) {
                Ok(mem) => {
                    self.resp.msg = InMsg::Write {
                        mem,
                        off: 0,
                        dma_len: len,
                    }
                }
                Err(()) => return self.fatal(p, NakCode::RemoteAccessError, None),
            }
        }
        let InMsg::Write { off, dma_len, .. } = &self.resp.msg else {
            return;
        };
        let (off, dma_len) = (*off, *dma_len);
        let data = pkt.payload;
        let end = off + data.len() as u64;
        let last = matches!(pos, Pos::Last | Pos::Only);
        if end > dma_len || (last && end != dma_len) {
            return self.fatal(p, NakCode::InvalidRequest, None);
        }
        let mut wqe = None;
        if imm && last {
            match self.take_wqe(env) {
                Some((wr, _)) => wqe = Some(wr.wr_id),
                None => {
                    if pos == Pos::Only {
                        self.resp.msg = InMsg::None;
                    }
                    self.counters.send_rnr_err += 1;
                    return self.queue_nak(p, syndrome_rnr(self.a.min_rnr_timer));
                }
            }
        }
        if let InMsg::Write { mem, off, .. } = &mut self.resp.msg {
            // SAFETY: the range was validated with REMOTE_WRITE; the peer owns it for
            // the duration of the WRITE by the RDMA contract.
            unsafe { mem.write_at(*off as usize, data) };
            *off = end;
        }
        self.resp.epsn = psn_add(p, 1);
        self.counters.rdma_recvs += 1;
        if last {
            self.resp.msg = InMsg::None;
            self.resp.msn = psn_add(self.resp.msn, 1);
            if let Some(wr_id) = wqe {
                let mut wc = WorkCompletion::new(
                    wr_id,
                    WcStatus::Success,
                    WcOpcode::RecvRdmaWithImm,
                    self.qpn,
                );
                wc.byte_len = dma_len as u32;
                wc.imm_data = pkt.hdr.imm;
                wc.src_qp = self.a.dest_qpn;
                self.push_recv_wc(wc);
            }
        }
        if pkt.hdr.bth.ack_req {
            self.queue_ack(p);
        }
    }

    fn exec_read(&mut self, p: u32, pkt: &Packet<'_>, env: &mut RcEnv<'_>) {
        let Some(reth) = pkt.hdr.reth else { return };
        let ird = self.a.max_dest_rd_atomic.max(1) as usize;
        let queued = self
            .resp
            .out
            .iter()
            .filter(|i| matches!(i, RespItem::Read { dup: false, .. }))
            .count();
        if !self.a.access.contains(AccessFlags::REMOTE_READ) || queued >= ird {
            return self.fatal(p, NakCode::InvalidRequest, None);
        }
        let len = reth.dma_len as u64;
        let Ok(mem) = env.keys.check_remote(
            self.pd,
            self.qpn,
            reth.rkey,
            reth.va,
            len,
            AccessFlags::REMOTE_READ,
        ) else {
            return self.fatal(p, NakCode::RemoteAccessError, None);
        };
        let npkts = packets_for(len, self.mtu());
        self.resp.msn = psn_add(self.resp.msn, 1);
        let last_psn = psn_add(p, npkts - 1);
        if self.resp.reads.len() >= ird {
            self.resp.reads.pop_front();
        }
        self.resp.reads.push_back(ReadRecord {
            first_psn: p,
            last_psn,
            va: reth.va,
            mem: mem.clone(),
        });
        let msn = self.resp.msn;
        self.resp.out.push_back(RespItem::Read {
            mem,
            first_psn: p,
            npkts,
            next: 0,
            msn,
            dup: false,
        });
        self.resp.epsn = psn_add(p, npkts);
        self.counters.rdma_recvs += 1;
    }

    /// Queues an ACK for `psn`. Toward a peer that negotiated selective retransmission
    /// (ours) it is merged into a queued plain ACK (coalescing, IBTA §9.7.5.1.2);
    /// toward any other peer every packet that asks for an ACK gets its own, as Linux
    /// rxe and nvmet do: a requester that resends only on its timer (rxe's is seconds)
    /// then loses one ACK of a burst, not the burst's only one.
    fn queue_ack(&mut self, psn: u32) {
        let msn = self.resp.msn;
        if let Some(RespItem::Ack {
            psn: q,
            syndrome: SYNDROME_ACK,
            msn: m,
        }) = self.resp.out.back_mut().filter(|_| self.a.selective)
        {
            *q = psn;
            *m = msn;
            self.counters.ack_deferred += 1;
            return;
        }
        self.resp.out.push_back(RespItem::Ack {
            psn,
            syndrome: SYNDROME_ACK,
            msn,
        });
    }

    fn queue_nak(&mut self, psn: u32, syndrome: u8) {
        if syndrome & 0x60 == 0x60 {
            self.counters.sent_naks += 1;
        }
        let msn = self.resp.msn;
        self.resp
            .out
            .push_back(RespItem::Ack { psn, syndrome, msn });
    }

    /// A responder error that ends the connection: NAK `code` for `psn`, an optional
    /// receive completion with an error status, QP to Error. The receive WQE of a
    /// SEND in progress, unless `recv_wc` names it, completes with the error status of
    /// `code` (as rxe): no WQE is lost (IBTA Vol 1 §10.3.1, found by fuzzing).
    fn fatal(&mut self, psn: u32, code: NakCode, recv_wc: Option<(u64, WcStatus)>) {
        self.queue_nak(psn, syndrome_nak(code));
        let in_progress = self.resp.take_recv_in_progress();
        self.resp.msg = InMsg::None;
        if let Some((wr_id, status)) = recv_wc {
            self.push_recv_wc(WorkCompletion::new(wr_id, status, WcOpcode::Recv, self.qpn));
        }
        if let Some(wr_id) = in_progress.filter(|&id| recv_wc.is_none_or(|(w, _)| w != id)) {
            let status = match code {
                NakCode::InvalidRequest => WcStatus::RemInvReqErr,
                NakCode::RemoteAccessError => WcStatus::RemAccessErr,
                NakCode::RemoteOperationalError => WcStatus::RemOpErr,
                _ => WcStatus::WrFlushErr,
            };
            self.push_recv_wc(WorkCompletion::new(wr_id, status, WcOpcode::Recv, self.qpn));
        }
        self.enter_error();
    }

    /// Whether the responder's next packet is a READ response (data, paced by the
    /// reaction point) rather than an ACK or NAK.
    pub(crate) fn responder_next_is_data(&self) -> bool {
        matches!(self.resp.out.front(), Some(RespItem::Read { .. }))
    }

    /// The next responder packet (ACK/NAK or READ response).
    pub(crate) fn responder_transmit(&mut self) -> Option<TxPacket> {
        let mtu = self.mtu() as u64;
        match self.resp.out.front_mut()? {
            &mut RespItem::Ack { psn, syndrome, msn } => {
                self.resp.out.pop_front();
                let mut hdr = self.headers(Opcode::RcAcknowledge, psn, false, 0);
                hdr.aeth = Some(Aeth { syndrome, msn });
                Some(TxPacket {
                    hdr,
                    payload: Payload::empty(),
                })
            }
            RespItem::Read {
                mem,
                first_psn,
                npkts,
                next,
                msn,
                ..
            } => {
                let i = *next;
                let pos = pos_of(i, *npkts);
                let off = i as u64 * mtu;
                let plen = (mem.len() as u64).saturating_sub(off).min(mtu);
                let mut payload = Payload::empty();
                payload.push(mem.sub(off as usize, plen as usize).unwrap_or_default());
                let (psn, msn) = (psn_add(*first_psn, i), *msn);
                *next += 1;
                if *next >= *npkts {
                    self.resp.out.pop_front();
                }
                let mut hdr = self.headers(read_response_opcode(pos), psn, false, plen as usize);
                if pos != Pos::Middle {
                    hdr.aeth = Some(Aeth {
                        syndrome: SYNDROME_ACK,
                        msn,
                    });
                }
                Some(TxPacket { hdr, payload })
            }
        }
    }
}
