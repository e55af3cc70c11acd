//! Received CM messages: [`Cm::handle_mad`] and one handler per message type
//! (IBTA §12.9.5 state machine, reduced to the states this CM keeps).
use std::net::IpAddr;

use crate::time::Timestamp;
use crate::verbs::Mtu;
use crate::wire::cm::*;
use crate::wire::mad::MadError;

use super::conn::{self, Conn};
use super::{ib_timeout, Cm, CmEvent, CmRole, CmState, ConnId, CM_RETRY_INTERVAL};

impl Cm {
    /// Handles one MAD received on QP1 from `src_ip` (the 256 bytes after BTH + DETH).
    ///
    /// Never panics on any input. Malformed MADs are counted ([`CmStats`](super::CmStats))
    /// and dropped. A REQ for a port nobody listens on is answered with REJ reason 8
    /// (invalid service ID); a duplicate REQ (same peer address and communication ID) is
    /// answered by resending our REP if one was sent, else ignored; a DREQ for an unknown
    /// connection is answered with a DREP.
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
            CmMessage::Req(req) => self.on_req(src_ip, tid, &req),
            CmMessage::Rep(rep) => self.on_rep(src_ip, tid, &rep),
            CmMessage::Rtu(rtu) => self.on_rtu(src_ip, &rtu),
            CmMessage::Rej(rej) => self.on_rej(src_ip, &rej),
            CmMessage::Mra(mra) => self.on_mra(now, src_ip, &mra),
            CmMessage::Dreq(dreq) => self.on_dreq(src_ip, tid, &dreq),
            CmMessage::Drep(drep) => self.on_drep(src_ip, &drep),
        }
    }

    /// The connection a message addressed to `local_comm_id` from `src_ip` belongs to.
    /// `peer_comm_id` (the sender's local ID) must match once we know it.
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

    /// REJ of a REQ we keep no state for (reason 8, 9, 26, 28 ...).
    fn reject_req(&mut self, src_ip: IpAddr, tid: u64, req: &CmReq, reason: u16) {
        let rej = conn::build_rej(0, req.local_comm_id.get(), CM_MSG_REQ, reason, &[]);
        self.push_tx(src_ip, rej.to_mad(tid));
    }

    fn on_req(&mut self, src_ip: IpAddr, tid: u64, req: &CmReq) {
        let remote_comm_id = req.local_comm_id.get();
        if let Some(&local) = self.by_remote.get(&(src_ip, remote_comm_id)) {
            self.stats.duplicates += 1;
            if let Some(c) = self.conns.get(&local) {
                if let (CmState::RepSent, Some(r)) = (c.state, c.retx.as_ref()) {
                    let (dest, mad) = (c.remote_ip, r.mad);
                    self.push_tx(dest, mad);
                }
            }
            return;
        }
        let Some(port) =
            service_id_tcp_port(req.service_id.get()).filter(|p| self.listeners.contains(p))
        else {
            self.stats.unmatched += 1;
            return self.reject_req(src_ip, tid, req, CM_REJ_INVALID_SERVICE_ID);
        };
        if req.transport_service_type() != CM_TRANSPORT_RC {
            return self.reject_req(src_ip, tid, req, CM_REJ_INVALID_TRANSPORT_TYPE);
        }
        let Some(path_mtu) = Mtu::from_code(req.path_mtu()) else {
            return self.reject_req(src_ip, tid, req, CM_REJ_INVALID_MTU);
        };
        // rdma_cm refuses a REQ whose IP CM header it cannot read (the consumer, rdma_cm,
        // rejects it).
        let Some(cma) = CmaHeader::parse(&req.private_data) else {
            return self.reject_req(src_ip, tid, req, CM_REJ_CONSUMER_DEFINED);
        };
        let local_comm_id = self.alloc_comm_id();
        let path = &req.primary_path;
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
            retx: None,
            rtu: None,
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
            private_data: req.private_data[CMA_HEADER_LEN..].to_vec(),
        });
        self.by_remote
            .insert((src_ip, remote_comm_id), local_comm_id);
        self.conns.insert(local_comm_id, c);
    }

    fn on_rep(&mut self, src_ip: IpAddr, tid: u64, rep: &CmRep) {
        let peer = rep.local_comm_id.get();
        let Some(c) = self.conn_for(src_ip, rep.remote_comm_id.get(), peer) else {
            // IBTA §12.9.5: a REP for no connection is rejected (invalid communication ID).
            self.stats.unmatched += 1;
            let rej = conn::build_rej(0, peer, CM_MSG_REP, CM_REJ_INVALID_COMM_ID, &[]);
            return self.push_tx(src_ip, rej.to_mad(tid));
        };
        match (c.role, c.state) {
            (CmRole::Active, CmState::ReqSent) => {
                c.state = CmState::RepRcvd;
                c.remote_comm_id = peer;
                c.remote_qpn = rep.local_qpn();
                c.retx = None;
                let ev = CmEvent::ConnectReply {
                    id: ConnId(c.local_comm_id),
                    remote_qpn: c.remote_qpn,
                    remote_psn: rep.starting_psn(),
                    responder_resources: rep.responder_resources,
                    initiator_depth: rep.initiator_depth,
                    rnr_retry_count: rep.rnr_retry_count(),
                    flow_label: c.flow_label,
                    private_data: rep.private_data.to_vec(),
                };
                let key = (c.remote_ip, peer);
                let local = c.local_comm_id;
                self.by_remote.insert(key, local);
                self.events.push_back(ev);
            }
            // Our RTU was lost: the peer resent its REP. Resend the RTU.
            (CmRole::Active, CmState::Established) => {
                let (dest, rtu) = (c.remote_ip, c.rtu);
                self.stats.duplicates += 1;
                if let Some(mad) = rtu {
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
        if c.state == CmState::RepSent {
            c.state = CmState::Established;
            c.retx = None;
            let id = ConnId(c.local_comm_id);
            self.events.push_back(CmEvent::Established { id });
        } else {
            self.stats.unmatched += 1;
        }
    }

    fn on_rej(&mut self, src_ip: IpAddr, rej: &CmRej) {
        let Some(c) = self.conn_for(src_ip, rej.remote_comm_id.get(), rej.local_comm_id.get())
        else {
            self.stats.unmatched += 1;
            return;
        };
        if c.state == CmState::DreqSent {
            self.stats.unmatched += 1;
            return;
        }
        let id = c.local_comm_id;
        self.remove_conn(id);
        self.events.push_back(CmEvent::Rejected {
            id: ConnId(id),
            reason: rej.reason.get(),
            private_data: rej.private_data.to_vec(),
        });
    }

    fn on_mra(&mut self, now: Timestamp, src_ip: IpAddr, mra: &CmMra) {
        let Some(c) = self.conn_for(src_ip, mra.remote_comm_id.get(), mra.local_comm_id.get())
        else {
            self.stats.unmatched += 1;
            return;
        };
        let for_us = matches!(
            (c.state, mra.message_mraed()),
            (CmState::ReqSent, CM_MSG_REQ) | (CmState::RepSent, CM_MSG_REP)
        );
        match (for_us, c.retx.as_mut()) {
            (true, Some(r)) => {
                r.deadline = now + CM_RETRY_INTERVAL + ib_timeout(mra.service_timeout());
            }
            _ => self.stats.unmatched += 1,
        }
    }

    fn on_dreq(&mut self, src_ip: IpAddr, tid: u64, dreq: &CmDreq) {
        let (to, from) = (dreq.remote_comm_id.get(), dreq.local_comm_id.get());
        let known = self
            .conn_for(src_ip, to, from)
            .map(|c| (c.local_comm_id, c.remote_comm_id));
        let drep = match known {
            Some((local, remote)) => {
                self.remove_conn(local);
                self.events
                    .push_back(CmEvent::Disconnected { id: ConnId(local) });
                conn::build_drep(local, remote)
            }
            // Forgotten (our DREP was lost) or never known: answer anyway, as Linux
            // (cm_issue_drep), so the peer stops retrying.
            None => {
                self.stats.unmatched += 1;
                conn::build_drep(to, from)
            }
        };
        self.push_tx(src_ip, drep.to_mad(tid));
    }

    fn on_drep(&mut self, src_ip: IpAddr, drep: &CmDrep) {
        let Some(c) = self.conn_for(src_ip, drep.remote_comm_id.get(), drep.local_comm_id.get())
        else {
            self.stats.unmatched += 1;
            return;
        };
        if c.state != CmState::DreqSent {
            self.stats.unmatched += 1;
            return;
        }
        let id = c.local_comm_id;
        self.remove_conn(id);
        self.events
            .push_back(CmEvent::Disconnected { id: ConnId(id) });
    }
}
