//! Received CM messages: [`Cm::handle_mad`] and one handler per message type, state by
//! state as Linux ib_cm's `cm_*_handler` functions (IBTA §12.9.5 state machine).
use std::net::IpAddr;

use crate::time::Timestamp;
use crate::verbs::Mtu;
use crate::wire::cm::*;
use crate::wire::mad::MadError;

use super::conn::{self, Conn};
use super::timer::{cm_ack_timeout, cm_convert, mra_interval, packet_life_time};
use super::{Cm, CmEvent, CmRole, CmState, ConnId};

impl Cm {
    /// Handles one MAD received on QP1 from `src_ip` (the 256 bytes after BTH + DETH).
    ///
    /// Never panics on any input. Malformed MADs are counted ([`CmStats`](super::CmStats))
    /// and dropped; so are messages that name no connection or do not fit its state
    /// (except as the [module docs](super) list: REJ for a REQ nobody listens for or a
    /// stale REQ; DREP for a DREQ of an unknown connection;
    /// MRA / RTU / DREP again for duplicates).
    pub fn handle_mad(&mut self, now: Timestamp, src_ip: IpAddr, mad: &[u8]) {
        self.stats.mads_received += 1;
        let (hdr, msg) = match CmMessage::decode(mad) {
            Ok(m) => m,
            Err(MadError::Attribute(_)) => {
                self.stats.unsupported += 1;
                return;
            }
            Err(_) => {
                self.stats.malformed += 1;
                return;
            }
        };
        let tid = hdr.transaction_id.get();
        match msg {
            CmMessage::Req(req) => self.on_req(now, src_ip, tid, &req),
            CmMessage::Rep(rep) => self.on_rep(src_ip, &rep),
            CmMessage::Rtu(rtu) => self.on_rtu(src_ip, &rtu),
            CmMessage::Rej(rej) => self.on_rej(now, src_ip, &rej),
            CmMessage::Mra(mra) => self.on_mra(now, src_ip, &mra),
            CmMessage::Dreq(dreq) => self.on_dreq(now, src_ip, tid, &dreq),
            CmMessage::Drep(drep) => self.on_drep(now, src_ip, &drep),
        }
    }

    /// The connection a message addressed to `local_comm_id` from `src_ip` belongs to.
    /// `peer_comm_id` (the sender's local ID) must match once we know it, unless 0.
    fn conn_for(
        &mut self,
        src_ip: IpAddr,
        local_comm_id: u32,
        peer_comm_id: u32,
    ) -> Option<&mut Conn> {
        let c = self.conns.get_mut(&local_comm_id)?;
        let peer_ok =
            c.remote_comm_id == 0 || peer_comm_id == 0 || c.remote_comm_id == peer_comm_id;
        (c.remote_ip == src_ip && peer_ok).then_some(c)
    }

    /// REJ of a message this CM keeps no state for (Linux `cm_issue_rej`).
    fn issue_rej(&mut self, src_ip: IpAddr, tid: u64, words: (u32, u32), msg: u8, reason: u16) {
        let rej = conn::issue_rej(words.0, words.1, msg, reason);
        self.push_tx(src_ip, rej.to_mad(tid));
    }

    fn on_req(&mut self, now: Timestamp, src_ip: IpAddr, tid: u64, req: &CmReq) {
        let remote_comm_id = req.local_comm_id.get();
        let words = (remote_comm_id, req.vendor_id());
        if let Some(&local) = self.by_remote.get(&(src_ip, remote_comm_id)) {
            return self.dup_req(now, local);
        }
        // Stale connection (Linux cm_match_req): the peer's QP still has a live
        // connection here. Reject the REQ and disconnect the old connection.
        let stale = self
            .conns
            .values()
            .find(|c| {
                c.remote_ip == src_ip
                    && c.remote_qpn == req.local_qpn()
                    && c.remote_comm_id != 0
                    && c.state != CmState::TimeWait
            })
            .map(|c| (c.local_comm_id, c.state));
        if let Some((old, state)) = stale {
            self.stats.stale_rejects += 1;
            self.issue_rej(src_ip, tid, words, CM_MSG_REQ, CM_REJ_STALE_CONN);
            self.events.push_back(CmEvent::StaleConnection {
                id: ConnId(old),
                remote_ip: src_ip,
                remote_qpn: req.local_qpn(),
                remote_port: CmaHeader::parse(&req.private_data).map(|h| h.src_port.get()),
            });
            if state == CmState::Established {
                let _ = self.disconnect(now, ConnId(old));
            }
            return;
        }
        let Some(port) =
            service_id_tcp_port(req.service_id.get()).filter(|p| self.listeners.contains(p))
        else {
            self.stats.unmatched += 1;
            return self.issue_rej(src_ip, tid, words, CM_MSG_REQ, CM_REJ_INVALID_SERVICE_ID);
        };
        if req.transport_service_type() != CM_TRANSPORT_RC {
            let r = CM_REJ_INVALID_TRANSPORT_TYPE;
            return self.issue_rej(src_ip, tid, words, CM_MSG_REQ, r);
        }
        let Some(path_mtu) = Mtu::from_code(req.path_mtu()) else {
            return self.issue_rej(src_ip, tid, words, CM_MSG_REQ, CM_REJ_INVALID_MTU);
        };
        // rdma_cm refuses a REQ whose IP CM header it cannot read: its handler fails and
        // ib_cm rejects with "consumer defined", Local Communication ID 0.
        let Some(cma) = CmaHeader::parse(&req.private_data) else {
            let rej = conn::build_rej(
                0,
                remote_comm_id,
                CM_MSG_REQ,
                CM_REJ_CONSUMER_DEFINED,
                &[],
                &[],
            );
            return self.push_tx(src_ip, rej.to_mad(tid));
        };
        let local_comm_id = self.alloc_comm_id();
        let path = &req.primary_path;
        let plt = packet_life_time(path.local_ack_timeout());
        // Negotiated if the REQ offers it and we do it; our REP then says so.
        let peer_sr = req.vendor_id() == VENDOR_ID_SR_REQ && self.config.selective_retransmit;
        let c = Conn {
            local_comm_id,
            role: CmRole::Passive,
            state: CmState::ReqRcvd,
            remote_ip: src_ip,
            remote_comm_id,
            local_port: port,
            remote_port: cma.src_port.get(),
            local_qpn: 0,
            remote_qpn: req.local_qpn(),
            flow_label: path.flow_label(),
            tid,
            // Linux cm_req_handler: the REQ's Local CM Response Timeout and Max CM
            // Retries time our REP and DREQ.
            interval: cm_convert(req.local_cm_response_timeout()),
            max_cm_retries: req.max_cm_retries(),
            ack_timeout: cm_ack_timeout(self.config.ca_ack_delay, plt),
            retx: None,
            response: None,
            timewait_until: None,
            sr_offered: peer_sr,
            peer_sr,
        };
        self.events.push_back(CmEvent::ConnectRequest {
            id: ConnId(local_comm_id),
            remote_ip: src_ip,
            remote_port: c.remote_port,
            local_port: port,
            remote_qpn: c.remote_qpn,
            remote_psn: req.starting_psn(),
            responder_resources: req.responder_resources(),
            initiator_depth: req.initiator_depth(),
            path_mtu,
            local_ack_timeout: path.local_ack_timeout(),
            retry_count: req.retry_count(),
            rnr_retry_count: req.rnr_retry_count(),
            flow_label: c.flow_label,
            traffic_class: path.traffic_class,
            hop_limit: path.hop_limit,
            srq: req.srq() == 1,
            peer_selective_retransmit: peer_sr,
            private_data: req.private_data[CMA_HEADER_LEN..].to_vec(),
        });
        self.by_remote
            .insert((src_ip, remote_comm_id), local_comm_id);
        self.conns.insert(local_comm_id, c);
    }

    /// A REQ again (Linux `cm_dup_req_handler`, with rdma_cm's delayed MRA: an
    /// application that has not answered yet is covered by an MRA).
    fn dup_req(&mut self, _now: Timestamp, local: u32) {
        self.stats.duplicates += 1;
        let timeout = self.config.mra_service_timeout;
        let Some(c) = self.conns.get(&local) else {
            return;
        };
        match c.state {
            CmState::ReqRcvd => self.mra(local, timeout),
            CmState::MraReqSent => {
                if let Some(mra) = c.response {
                    let dest = c.remote_ip;
                    self.stats.mras_sent += 1;
                    self.push_tx(dest, mra);
                }
            }
            CmState::TimeWait => {
                let rej = c.rej(CM_REJ_STALE_CONN, &[], &[]);
                let (dest, tid) = (c.remote_ip, c.tid);
                self.stats.stale_rejects += 1;
                self.push_tx(dest, rej.to_mad(tid));
            }
            _ => {}
        }
    }

    fn on_rep(&mut self, src_ip: IpAddr, rep: &CmRep) {
        let peer = rep.local_comm_id.get();
        let to = rep.remote_comm_id.get();
        let Some(c) = self.conn_for(src_ip, to, peer) else {
            // Linux cm_rep_handler / cm_dup_rep_handler: a REP for no connection is
            // dropped (no REJ).
            self.stats.unmatched += 1;
            return;
        };
        match (c.role, c.state) {
            (CmRole::Active, CmState::ReqSent | CmState::MraReqRcvd) => {
                c.state = CmState::RepRcvd;
                c.remote_comm_id = peer;
                c.remote_qpn = rep.local_qpn();
                c.retx = None;
                // Linux cm_rep_handler: av.timeout = cm_ack_timeout(target ACK delay,
                // av.timeout - 1).
                c.ack_timeout =
                    cm_ack_timeout(rep.target_ack_delay(), c.ack_timeout.saturating_sub(1));
                c.peer_sr = c.sr_offered && rep.vendor_id() == VENDOR_ID_SR_REP;
                let ev = CmEvent::ConnectReply {
                    id: ConnId(c.local_comm_id),
                    remote_qpn: c.remote_qpn,
                    remote_psn: rep.starting_psn(),
                    responder_resources: rep.responder_resources,
                    initiator_depth: rep.initiator_depth,
                    rnr_retry_count: rep.rnr_retry_count(),
                    flow_label: c.flow_label,
                    target_ack_delay: rep.target_ack_delay(),
                    peer_selective_retransmit: c.peer_sr,
                    private_data: rep.private_data.to_vec(),
                };
                let key = (c.remote_ip, peer);
                let local = c.local_comm_id;
                self.by_remote.insert(key, local);
                self.events.push_back(ev);
            }
            // Linux cm_dup_rep_handler: our RTU (or MRA) was lost; send it again.
            (CmRole::Active, CmState::Established | CmState::MraRepSent) => {
                let (dest, resp) = (c.remote_ip, c.response);
                self.stats.duplicates += 1;
                if let Some(mad) = resp {
                    self.push_tx(dest, mad);
                }
            }
            _ => self.stats.duplicates += 1,
        }
    }

    fn on_rtu(&mut self, src_ip: IpAddr, rtu: &CmRtu) {
        let Some(c) = self.conn_for(src_ip, rtu.remote_comm_id.get(), rtu.local_comm_id.get())
        else {
            self.stats.unmatched += 1;
            return;
        };
        if matches!(c.state, CmState::RepSent | CmState::MraRepRcvd) {
            c.state = CmState::Established;
            c.retx = None;
            let id = ConnId(c.local_comm_id);
            let sr = c.peer_sr;
            self.events.push_back(CmEvent::Established {
                id,
                peer_selective_retransmit: sr,
            });
        } else {
            self.stats.duplicates += 1;
        }
    }

    fn on_rej(&mut self, now: Timestamp, src_ip: IpAddr, rej: &CmRej) {
        // Linux cm_acquire_rejected_id: a REJ "timeout" (from a side that never saw our
        // communication ID) is found by the sender's ID; a REJ of a REQ may carry
        // anything as its Local Communication ID (cm_issue_rej copies the REQ's vendor
        // ID word there).
        let reason = rej.reason.get();
        let (to, peer) = if reason == CM_REJ_TIMEOUT {
            let from = rej.local_comm_id.get();
            let to = self.by_remote.get(&(src_ip, from)).copied();
            (to.unwrap_or(rej.remote_comm_id.get()), from)
        } else if rej.message_rejected() == CM_MSG_REQ {
            (rej.remote_comm_id.get(), 0)
        } else {
            (rej.remote_comm_id.get(), rej.local_comm_id.get())
        };
        let Some(c) = self.conn_for(src_ip, to, peer) else {
            self.stats.unmatched += 1;
            return;
        };
        let id = c.local_comm_id;
        let event = match c.state {
            CmState::ReqSent
            | CmState::MraReqRcvd
            | CmState::RepSent
            | CmState::MraRepRcvd
            | CmState::ReqRcvd
            | CmState::MraReqSent => {
                if reason == CM_REJ_STALE_CONN {
                    self.enter_timewait(now, id);
                } else {
                    self.remove_conn(id);
                }
                CmEvent::Rejected {
                    id: ConnId(id),
                    reason,
                    private_data: rej.private_data.to_vec(),
                }
            }
            CmState::RepRcvd | CmState::MraRepSent => {
                self.enter_timewait(now, id);
                CmEvent::Rejected {
                    id: ConnId(id),
                    reason,
                    private_data: rej.private_data.to_vec(),
                }
            }
            CmState::Established | CmState::DreqSent => {
                self.enter_timewait(now, id);
                CmEvent::Disconnected { id: ConnId(id) }
            }
            CmState::TimeWait => {
                self.stats.unmatched += 1;
                return;
            }
        };
        self.events.push_back(event);
    }

    fn on_mra(&mut self, now: Timestamp, src_ip: IpAddr, mra: &CmMra) {
        let Some(c) = self.conn_for(src_ip, mra.remote_comm_id.get(), mra.local_comm_id.get())
        else {
            self.stats.unmatched += 1;
            return;
        };
        let next = match (c.state, mra.message_mraed()) {
            (CmState::ReqSent, CM_MSG_REQ) => CmState::MraReqRcvd,
            (CmState::RepSent, CM_MSG_REP) => CmState::MraRepRcvd,
            _ => {
                self.stats.duplicates += 1;
                return;
            }
        };
        let interval = mra_interval(mra.service_timeout(), c.ack_timeout);
        if let Some(r) = c.retx.as_mut() {
            // Linux ib_modify_mad: the outstanding MAD now times out after the service
            // timeout plus the ACK timeout, and so do its remaining retries.
            r.deadline = now + interval;
            r.interval = interval;
            c.interval = interval;
            c.state = next;
        }
    }

    fn on_dreq(&mut self, now: Timestamp, src_ip: IpAddr, tid: u64, dreq: &CmDreq) {
        let (to, from) = (dreq.remote_comm_id.get(), dreq.local_comm_id.get());
        let known = self
            .conn_for(src_ip, to, from)
            .filter(|c| c.remote_comm_id == from)
            .map(|c| (c.local_comm_id, c.remote_comm_id, c.local_qpn, c.state));
        let Some((local, remote, qpn, state)) = known else {
            // Unknown (or forgotten after TimeWait): answer anyway, as Linux
            // (cm_issue_drep), so the peer stops retrying.
            self.stats.unmatched += 1;
            let drep = conn::build_drep(to, from);
            return self.push_tx(src_ip, drep.to_mad(tid));
        };
        // Linux cm_dreq_handler: a DREQ naming another QP is dropped.
        if qpn != dreq.remote_qpn() {
            self.stats.unmatched += 1;
            return;
        }
        match state {
            CmState::RepSent | CmState::MraRepRcvd | CmState::DreqSent | CmState::Established => {
                self.enter_timewait(now, local);
                self.events
                    .push_back(CmEvent::Disconnected { id: ConnId(local) });
            }
            // Our DREP was lost: answer again.
            CmState::TimeWait => self.stats.duplicates += 1,
            _ => {
                self.stats.unmatched += 1;
                return;
            }
        }
        let drep = conn::build_drep(local, remote);
        self.push_tx(src_ip, drep.to_mad(tid));
    }

    fn on_drep(&mut self, now: Timestamp, src_ip: IpAddr, drep: &CmDrep) {
        let Some(c) = self.conn_for(src_ip, drep.remote_comm_id.get(), drep.local_comm_id.get())
        else {
            self.stats.unmatched += 1;
            return;
        };
        if c.state != CmState::DreqSent {
            self.stats.duplicates += 1;
            return;
        }
        let id = c.local_comm_id;
        self.enter_timewait(now, id);
        self.events
            .push_back(CmEvent::Disconnected { id: ConnId(id) });
    }
}
