//! The UD queue pair: state machine (the UD column of IBTA Vol 1 §11.2.4.2), send
//! (one packet per WR, to the WR's address handle) and receive (Q_Key check, GRH area,
//! source QP).
use std::collections::VecDeque;
use std::net::IpAddr;

use crate::rc::mem::MemRef;
use crate::rc::psn::{psn_add, PSN_MASK};
use crate::rc::{Completion, CompletionQueueKind, QpCounters, RcEnv, RecvQueue, TxPacket};
use crate::verbs::{
    AccessFlags, AhAttr, Mtu, QpAttr, QpCap, QpState, RecvWr, SendFlags, SendOp, SendWr,
    VerbsError, WcOpcode, WcStatus, WorkCompletion, GRH_LEN, MAX_SGE,
};
use crate::wire::{pad_for, Bth, Deth, Opcode, Packet, PacketHeaders};

use super::grh::grh_for;

/// A send WR and the address its handle named when it was posted.
struct UdSendEntry {
    wr: SendWr,
    ah: AhAttr,
}

/// A general Unreliable Datagram QP (see the module docs of [`crate::ud`]).
pub struct UdQp {
    qpn: u32,
    pd: u32,
    cap: QpCap,
    has_srq: bool,
    state: QpState,
    qkey: u32,
    /// The largest message (the port's active MTU).
    mtu: Mtu,
    psn: u32,
    rq: RecvQueue,
    sq: VecDeque<UdSendEntry>,
    cq: VecDeque<Completion>,
    counters: QpCounters,
}

/// The hop limit (TTL) a GRH area reports: the UDP socket does not hand the received
/// one over, so the default of the Linux stack is written.
const GRH_HOP_LIMIT: u8 = 64;

impl UdQp {
    /// A QP in the Reset state whose messages are at most `mtu` bytes (the port's
    /// active MTU). `cap` bounds the queues; with `has_srq` receives come from
    /// [`RcEnv::srq`] and [`UdQp::post_recv`] is refused.
    pub fn new(qpn: u32, pd: u32, cap: QpCap, has_srq: bool, mtu: Mtu) -> Self {
        UdQp {
            qpn: qpn & PSN_MASK,
            pd,
            cap,
            has_srq,
            state: QpState::Reset,
            qkey: 0,
            mtu,
            psn: 0,
            rq: RecvQueue::new(pd, if has_srq { 0 } else { cap.max_recv_wr }),
            sq: VecDeque::new(),
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
    /// The QP's Q_Key (set at Init).
    pub fn qkey(&self) -> u32 {
        self.qkey
    }
    /// The largest message in bytes.
    pub fn max_msg_bytes(&self) -> u32 {
        self.mtu.bytes()
    }
    /// The capacities the QP was created with.
    pub fn cap(&self) -> QpCap {
        self.cap
    }
    /// The counters.
    pub fn counters(&self) -> &QpCounters {
        &self.counters
    }

    /// `ibv_modify_qp` for UD (IBTA Vol 1 §11.2.4.2): Reset->Init (needs `qkey`),
    /// Init->Init, Init->RTR, RTR->RTS (needs `sq_psn`), RTS->RTS, RTS<->SQD, SQ
    /// error->RTS, any->Error (flushes both queues with IBV_WC_WR_FLUSH_ERR),
    /// any->Reset. `qkey` may change in any state but Reset; connection attributes
    /// (`dest_qp_num`, `ah_attr`, `path_mtu`, ...) are ignored, as a UD QP has none.
    ///
    /// # Errors
    /// `InvalidTransition`; `InvalidArgument` for Init without a Q_Key or RTS without
    /// `sq_psn`.
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
        if self.state == Reset && to == Init && attr.qkey.is_none() {
            return Err(VerbsError::InvalidArgument(
                "a UD QP's Init needs its Q_Key (QpAttr::qkey)",
            ));
        }
        if to == Rts && self.state == Rtr && attr.sq_psn.is_none() {
            return Err(VerbsError::InvalidArgument("RTS needs sq_psn"));
        }
        match to {
            Reset => {
                *self = UdQp::new(self.qpn, self.pd, self.cap, self.has_srq, self.mtu);
                return Ok(());
            }
            Error => {
                self.enter_error();
                return Ok(());
            }
            _ => {}
        }
        if let Some(q) = attr.qkey {
            self.qkey = q;
        }
        if to == Rts && self.state == Rtr {
            self.psn = attr.sq_psn.unwrap_or(0) & PSN_MASK;
        }
        self.state = to;
        Ok(())
    }

    fn enter_error(&mut self) {
        self.state = QpState::Error;
        while let Some(e) = self.sq.pop_front() {
            self.push(
                CompletionQueueKind::Send,
                WorkCompletion::new(e.wr.wr_id, WcStatus::WrFlushErr, WcOpcode::Send, self.qpn),
            );
        }
        let ids: Vec<u64> = self.rq.drain().map(|w| w.wr_id).collect();
        for id in ids {
            self.push(
                CompletionQueueKind::Recv,
                WorkCompletion::new(id, WcStatus::WrFlushErr, WcOpcode::Recv, self.qpn),
            );
        }
    }

    fn push(&mut self, queue: CompletionQueueKind, wc: WorkCompletion) {
        self.cq.push_back(Completion { queue, wc });
    }

    /// `ibv_post_send` of a [`SendOp::UdSend`] whose address handle the driver resolved
    /// to `ah`. Allowed in RTS and SQD (queued) and in Error (flushed at once).
    ///
    /// # Errors
    /// `InvalidArgument` for any other operation or too many SGEs; `CapabilityExceeded`
    /// for a message longer than the path MTU (a UD message is one packet);
    /// `InvalidState` before RTS; `QueueFull`.
    pub fn post_send(&mut self, wr: &SendWr, ah: AhAttr) -> Result<(), VerbsError> {
        if !matches!(wr.op, SendOp::UdSend { .. }) {
            return Err(VerbsError::InvalidArgument(
                "a UD QP sends SendOp::UdSend only (SEND with an address handle, QPN and \
                 Q_Key; no RDMA WRITE or READ)",
            ));
        }
        match self.state {
            QpState::Rts | QpState::Sqd | QpState::Error => {}
            s => return Err(VerbsError::InvalidState(s)),
        }
        if wr.sg_list.as_slice().len() > (self.cap.max_send_sge as usize).min(MAX_SGE) {
            return Err(VerbsError::InvalidArgument("too many SGEs"));
        }
        let len = wr.sg_list.total_len();
        if len > u64::from(self.mtu.bytes()) {
            return Err(VerbsError::CapabilityExceeded {
                what: "UD message length in bytes (a UD message is one packet: at most the \
                       path MTU; send less per WR or use RC/UC)",
                asked: len.min(u64::from(u32::MAX)) as u32,
                max: self.mtu.bytes(),
            });
        }
        if self.sq.len() >= self.cap.max_send_wr as usize {
            return Err(VerbsError::QueueFull);
        }
        if self.state == QpState::Error {
            let wc = WorkCompletion::new(wr.wr_id, WcStatus::WrFlushErr, WcOpcode::Send, self.qpn);
            self.push(CompletionQueueKind::Send, wc);
            return Ok(());
        }
        self.sq.push_back(UdSendEntry { wr: *wr, ah });
        Ok(())
    }

    /// `ibv_post_recv` on the QP's own receive queue (each buffer needs [`GRH_LEN`]
    /// bytes in front of the largest message expected).
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
            self.push(CompletionQueueKind::Recv, wc);
        }
        Ok(())
    }

    /// Handles one received packet for this QP (ICRC checked by the driver) that came
    /// from `src` to `dst` in a UDP datagram of `udp_payload_len` bytes with ToS
    /// `traffic_class`. UD SENDs in RTR and later with the QP's Q_Key are placed
    /// behind the GRH area of the next receive WR; a wrong Q_Key is counted in
    /// `qkey_violations`, no receive WR in `dropped_msgs`; a receive WR too short for
    /// GRH and message completes with IBV_WC_LOC_LEN_ERR, one with a bad lkey with
    /// IBV_WC_LOC_PROT_ERR (the QP stays usable: a datagram error is the datagram's).
    /// Anything else is ignored.
    pub fn handle_packet(
        &mut self,
        pkt: &Packet<'_>,
        src: IpAddr,
        dst: IpAddr,
        udp_payload_len: usize,
        traffic_class: u8,
        env: &mut RcEnv<'_>,
    ) {
        if pkt.hdr.bth.dest_qp & PSN_MASK != self.qpn || !pkt.hdr.bth.opcode.is_ud() {
            return;
        }
        if !matches!(
            self.state,
            QpState::Rtr | QpState::Rts | QpState::Sqd | QpState::SqError
        ) {
            return;
        }
        let Some(deth) = pkt.hdr.deth else { return };
        self.counters.rcvd_pkts += 1;
        if deth.qkey != self.qkey {
            self.counters.qkey_violations += 1;
            return;
        }
        let wqe = if self.has_srq {
            env.srq.as_deref_mut().and_then(|q| {
                let pd = q.pd();
                q.pop().map(|w| (w, pd))
            })
        } else {
            self.rq.pop().map(|w| (w, self.pd))
        };
        let Some((wr, pd)) = wqe else {
            self.counters.dropped_msgs += 1;
            return;
        };
        let mut wc = WorkCompletion::new(wr.wr_id, WcStatus::Success, WcOpcode::Recv, self.qpn);
        wc.src_qp = deth.src_qp & PSN_MASK;
        let mut segs: [MemRef; MAX_SGE] = Default::default();
        for (i, sge) in wr.sg_list.as_slice().iter().enumerate() {
            match env.keys.check_local(
                pd,
                sge.lkey,
                sge.addr,
                sge.length as u64,
                AccessFlags::LOCAL_WRITE,
            ) {
                Ok(m) => segs[i] = m,
                Err(st) => {
                    wc.status = st;
                    return self.push(CompletionQueueKind::Recv, wc);
                }
            }
        }
        let segs = &segs[..wr.sg_list.as_slice().len()];
        let need = GRH_LEN + pkt.payload.len();
        if (wr.sg_list.total_len() as usize) < need {
            wc.status = WcStatus::LocLenErr;
            return self.push(CompletionQueueKind::Recv, wc);
        }
        let grh = grh_for(src, dst, udp_payload_len, traffic_class, GRH_HOP_LIMIT);
        // SAFETY: the receive buffers were validated with LOCAL_WRITE and belong to the
        // posted WR, which the application does not touch until it completes.
        unsafe {
            crate::rc::payload::scatter(segs, 0, &grh);
            crate::rc::payload::scatter(segs, GRH_LEN, pkt.payload);
        }
        wc.byte_len = need as u32;
        wc.imm_data = pkt.hdr.imm;
        wc.grh = true;
        self.push(CompletionQueueKind::Recv, wc);
    }

    /// The next packet to send and the address it goes to: the next send WR's one
    /// packet (its SGEs checked now; a bad lkey completes it with IBV_WC_LOC_PROT_ERR,
    /// the QP stays usable). `None` when nothing is queued or the QP is not in RTS.
    pub fn poll_transmit(&mut self, env: &mut RcEnv<'_>) -> Option<(TxPacket, AhAttr)> {
        loop {
            if self.state != QpState::Rts {
                return None;
            }
            let e = self.sq.pop_front()?;
            let SendOp::UdSend { dest, imm_data } = e.wr.op else {
                continue;
            };
            let mut payload = crate::rc::Payload::empty();
            let mut bad = None;
            for sge in e.wr.sg_list.as_slice() {
                match env.keys.check_local(
                    self.pd,
                    sge.lkey,
                    sge.addr,
                    sge.length as u64,
                    AccessFlags::empty(),
                ) {
                    Ok(m) => {
                        payload.push(m);
                    }
                    Err(st) => {
                        bad = Some(st);
                        break;
                    }
                }
            }
            let len = e.wr.sg_list.total_len() as u32;
            if let Some(st) = bad {
                self.counters.send_err += 1;
                let mut wc = WorkCompletion::new(e.wr.wr_id, st, WcOpcode::Send, self.qpn);
                wc.byte_len = len;
                self.push(CompletionQueueKind::Send, wc);
                continue;
            }
            let opcode = if imm_data.is_some() {
                Opcode::UdSendOnlyImm
            } else {
                Opcode::UdSendOnly
            };
            let mut bth = Bth::new(opcode, dest.remote_qpn, self.psn, false);
            bth.pad_count = pad_for(payload.len());
            bth.se = e.wr.flags.contains(SendFlags::SOLICITED);
            let mut hdr = PacketHeaders::new(bth);
            // IBTA Vol 1 §10.2.5: a Q_Key with its high bit set means the QP's own.
            let qkey = if dest.remote_qkey & 0x8000_0000 != 0 {
                self.qkey
            } else {
                dest.remote_qkey
            };
            hdr.deth = Some(Deth {
                qkey,
                src_qp: self.qpn,
            });
            hdr.imm = imm_data;
            self.psn = psn_add(self.psn, 1);
            self.counters.sent_pkts += 1;
            if e.wr.flags.contains(SendFlags::SIGNALED) {
                let mut wc =
                    WorkCompletion::new(e.wr.wr_id, WcStatus::Success, WcOpcode::Send, self.qpn);
                wc.byte_len = len;
                self.push(CompletionQueueKind::Send, wc);
            }
            return Some((TxPacket { hdr, payload }, e.ah));
        }
    }

    /// The next work completion, in the order produced.
    pub fn poll_completion(&mut self) -> Option<Completion> {
        self.cq.pop_front()
    }
}
