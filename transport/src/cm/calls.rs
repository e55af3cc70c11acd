//! The application's calls into the connection manager (Linux `ib_send_cm_*` /
//! `ib_destroy_cm_id`, as rdma_cm uses them).
use crate::time::Timestamp;
use crate::wire::cm::*;

use super::conn::{self, Conn};
use super::timer::{packet_life_time, req_interval};
use super::{check_u24, Cm, CmError, CmEvent, CmRole, CmState, ConnId};
use super::{AcceptParams, ConnectParams};

impl Cm {
    /// Starts a connection: queues a REQ to `p.dest` (service ID of `p.dest_port`,
    /// primary path flow label `cm_flow_label(p.src_port, p.dest_port)`, CM response
    /// timeouts and max retries from [`CmConfig`](super::CmConfig)), and returns its ID.
    /// The answer comes as [`CmEvent::ConnectReply`], [`CmEvent::Rejected`] or
    /// [`CmEvent::Unreachable`].
    ///
    /// Errors: [`CmError::PrivateDataTooLong`] over 56 bytes,
    /// [`CmError::AddressFamilyMismatch`], [`CmError::InvalidParameter`],
    /// [`CmError::QpnInTimeWait`].
    pub fn connect(&mut self, now: Timestamp, p: ConnectParams) -> Result<ConnId, CmError> {
        if p.private_data.len() > CMA_REQ_USER_PRIVATE_DATA_LEN {
            return Err(CmError::PrivateDataTooLong {
                len: p.private_data.len(),
                max: CMA_REQ_USER_PRIVATE_DATA_LEN,
            });
        }
        check_u24(p.local_qpn, "local_qpn over 24 bits")?;
        check_u24(p.starting_psn, "starting_psn over 24 bits")?;
        if p.retry_count > 7 || p.rnr_retry_count > 7 {
            return Err(CmError::InvalidParameter("retry counts are 3 bits (0..=7)"));
        }
        if p.local_ack_timeout > 31 {
            return Err(CmError::InvalidParameter(
                "local_ack_timeout is 5 bits (0..=31)",
            ));
        }
        self.check_qpn(p.local_qpn)?;
        let cma = CmaHeader::new(self.local_ip, p.src_port, p.dest).ok_or(
            CmError::AddressFamilyMismatch {
                local: self.local_ip,
                dest: p.dest,
            },
        )?;
        let cfg = self.config;
        let local_comm_id = self.alloc_comm_id();
        let flow_label = crate::wire::cm_flow_label(p.src_port, p.dest_port);
        let req = conn::build_req(&conn::ReqFields {
            local_comm_id,
            service_id: service_id_tcp(p.dest_port),
            local_ca_guid: self.local_ca_guid,
            local_qpn: p.local_qpn,
            starting_psn: p.starting_psn,
            responder_resources: p.responder_resources,
            initiator_depth: p.initiator_depth,
            retry_count: p.retry_count,
            rnr_retry_count: p.rnr_retry_count,
            path_mtu_code: p.path_mtu.code(),
            local_ack_timeout: p.local_ack_timeout,
            local_ip: self.local_ip,
            remote_ip: p.dest,
            flow_label,
            cma,
            cm_response_timeout: cfg.cm_response_timeout,
            max_cm_retries: cfg.max_cm_retries,
            vendor_id: if cfg.selective_retransmit {
                VENDOR_ID_SR_REQ
            } else {
                0
            },
            user_private_data: &p.private_data,
        });
        let tid = self.own_tid(local_comm_id);
        let mad = req.to_mad(tid);
        let plt = packet_life_time(p.local_ack_timeout);
        self.conns.insert(
            local_comm_id,
            Conn {
                local_comm_id,
                role: CmRole::Active,
                state: CmState::ReqSent,
                remote_ip: p.dest,
                remote_comm_id: 0,
                local_port: p.src_port,
                remote_port: p.dest_port,
                local_qpn: p.local_qpn,
                remote_qpn: 0,
                flow_label,
                tid,
                interval: req_interval(plt, cfg.cm_response_timeout & 0x1F),
                max_cm_retries: cfg.max_cm_retries & 0x0F,
                // Linux cm_init_av_by_path: life time + 1 until the REP's Target ACK
                // Delay refines it.
                ack_timeout: (plt + 1).min(31),
                retx: None,
                response: None,
                timewait_until: None,
                sr_offered: cfg.selective_retransmit,
                peer_sr: false,
            },
        );
        self.send_request(now, local_comm_id, mad);
        Ok(ConnId(local_comm_id))
    }

    /// Passive side: accepts the connection of a [`CmEvent::ConnectRequest`] by queuing
    /// a REP (Target ACK Delay = our CA ACK delay, E2E flow control 1, failover accepted
    /// 0, SRQ 0, as Linux nvmet-rdma; VendorID [`VENDOR_ID_SR_REP`] when the REQ offered
    /// selective retransmission and we are configured for it, else 0).
    /// The REP is resent every `2^(t-8)` ms (`t` = the REQ's Local CM Response Timeout)
    /// up to the REQ's Max CM Retries. The connection becomes established at the RTU (or
    /// [`Cm::established`]).
    ///
    /// Errors: [`CmError::UnknownConnection`], [`CmError::InvalidState`] unless the REQ
    /// is pending (ReqRcvd or MraReqSent), [`CmError::PrivateDataTooLong`] over 196
    /// bytes, [`CmError::InvalidParameter`], [`CmError::QpnInTimeWait`].
    pub fn accept(&mut self, now: Timestamp, id: ConnId, p: AcceptParams) -> Result<(), CmError> {
        self.expect_state(
            id,
            &[CmState::ReqRcvd, CmState::MraReqSent],
            "a pending REQ (ReqRcvd)",
        )?;
        if p.private_data.len() > REP_PRIVATE_DATA_LEN {
            return Err(CmError::PrivateDataTooLong {
                len: p.private_data.len(),
                max: REP_PRIVATE_DATA_LEN,
            });
        }
        check_u24(p.local_qpn, "local_qpn over 24 bits")?;
        check_u24(p.starting_psn, "starting_psn over 24 bits")?;
        if p.rnr_retry_count > 7 {
            return Err(CmError::InvalidParameter(
                "rnr_retry_count is 3 bits (0..=7)",
            ));
        }
        self.check_qpn(p.local_qpn)?;
        let (guid, cfg) = (self.local_ca_guid, self.config);
        let Some(c) = self.conns.get_mut(&id.0) else {
            return Err(CmError::UnknownConnection(id));
        };
        let mut rep = CmRep::zeroed();
        rep.local_comm_id.set(c.local_comm_id);
        rep.remote_comm_id.set(c.remote_comm_id);
        rep.set_local_qpn(p.local_qpn);
        rep.set_starting_psn(p.starting_psn);
        rep.responder_resources = p.responder_resources;
        rep.initiator_depth = p.initiator_depth;
        rep.set_target_ack_delay(cfg.ca_ack_delay);
        rep.set_end_to_end_flow_control(1);
        rep.set_rnr_retry_count(p.rnr_retry_count);
        rep.local_ca_guid.set(guid);
        if c.sr_offered {
            rep.set_vendor_id(VENDOR_ID_SR_REP);
        }
        conn::put_private(&mut rep.private_data, &p.private_data);
        c.local_qpn = p.local_qpn;
        c.state = CmState::RepSent;
        c.response = None;
        let mad = rep.to_mad(c.tid);
        self.send_request(now, id.0, mad);
        Ok(())
    }

    /// Rejects a pending REQ (passive side: ReqRcvd, MraReqSent), a REP (active side:
    /// RepRcvd, MraRepSent) or our own unanswered REP (RepSent, MraRepRcvd) with a REJ of
    /// `reason` (`CM_REJ_*`; NVMe/RDMA uses [`CM_REJ_CONSUMER_DEFINED`] with its reject
    /// private data), filled as Linux `cm_format_rej` (Local Communication ID 0 from
    /// ReqRcvd). The connection is dropped (from RepSent: TimeWait); no event follows.
    ///
    /// Errors: [`CmError::UnknownConnection`], [`CmError::InvalidState`],
    /// [`CmError::PrivateDataTooLong`] over 148 bytes.
    pub fn reject(
        &mut self,
        now: Timestamp,
        id: ConnId,
        reason: u16,
        private_data: &[u8],
    ) -> Result<(), CmError> {
        let state = self.expect_state(
            id,
            &[
                CmState::ReqRcvd,
                CmState::MraReqSent,
                CmState::RepRcvd,
                CmState::MraRepSent,
                CmState::RepSent,
                CmState::MraRepRcvd,
            ],
            "a pending REQ or REP",
        )?;
        if private_data.len() > REJ_PRIVATE_DATA_LEN {
            return Err(CmError::PrivateDataTooLong {
                len: private_data.len(),
                max: REJ_PRIVATE_DATA_LEN,
            });
        }
        self.send_rej(now, id.0, reason, &[], private_data);
        if !matches!(state, CmState::RepSent | CmState::MraRepRcvd) {
            self.remove_conn(id.0);
        }
        Ok(())
    }

    /// Sends a REJ of connection `id` in its current state; from RepSent/MraRepRcvd
    /// it then enters TimeWait (Linux `cm_send_rej_locked`).
    pub(super) fn send_rej(
        &mut self,
        now: Timestamp,
        id: u32,
        reason: u16,
        ari: &[u8],
        private_data: &[u8],
    ) {
        let Some(c) = self.conns.get(&id) else { return };
        let rej = c.rej(reason, ari, private_data);
        let (dest, tid, state) = (c.remote_ip, c.tid, c.state);
        self.push_tx(dest, rej.to_mad(tid));
        if matches!(state, CmState::RepSent | CmState::MraRepRcvd) {
            self.enter_timewait(now, id);
        }
    }

    /// Sends an MRA ("message received, more time needed", IBTA §12.6.6) for the
    /// pending REQ (passive side, ReqRcvd -> MraReqSent) or REP (active side, RepRcvd ->
    /// MraRepSent) with `service_timeout` (4.096 us x 2^value, 5 bits); the peer then
    /// waits that long plus its ACK timeout before resending. Duplicates of the message
    /// are answered with the same MRA.
    ///
    /// Errors: [`CmError::UnknownConnection`], [`CmError::InvalidState`],
    /// [`CmError::InvalidParameter`] for a service timeout over 31.
    pub fn send_mra(
        &mut self,
        _now: Timestamp,
        id: ConnId,
        service_timeout: u8,
    ) -> Result<(), CmError> {
        if service_timeout > 31 {
            return Err(CmError::InvalidParameter(
                "service_timeout is 5 bits (0..=31)",
            ));
        }
        self.expect_state(
            id,
            &[CmState::ReqRcvd, CmState::RepRcvd],
            "a pending REQ (ReqRcvd) or REP (RepRcvd)",
        )?;
        self.mra(id.0, service_timeout);
        Ok(())
    }

    /// Builds, records and sends the MRA of a connection in ReqRcvd or RepRcvd.
    pub(super) fn mra(&mut self, id: u32, service_timeout: u8) {
        let Some(c) = self.conns.get_mut(&id) else {
            return;
        };
        let (msg, next) = match c.state {
            CmState::ReqRcvd => (CM_MSG_REQ, CmState::MraReqSent),
            CmState::RepRcvd => (CM_MSG_REP, CmState::MraRepSent),
            _ => return,
        };
        let mra =
            conn::build_mra(c.local_comm_id, c.remote_comm_id, msg, service_timeout).to_mad(c.tid);
        c.state = next;
        c.response = Some(mra);
        let dest = c.remote_ip;
        self.stats.mras_sent += 1;
        self.push_tx(dest, mra);
    }

    /// Active side: after [`CmEvent::ConnectReply`] (and the QP is in RTS), queues the
    /// RTU; the connection is established and [`CmEvent::Established`] follows.
    ///
    /// Errors: [`CmError::UnknownConnection`], [`CmError::InvalidState`] unless RepRcvd
    /// or MraRepSent.
    pub fn send_rtu(&mut self, _now: Timestamp, id: ConnId) -> Result<(), CmError> {
        self.expect_state(
            id,
            &[CmState::RepRcvd, CmState::MraRepSent],
            "a received REP (RepRcvd)",
        )?;
        let Some(c) = self.conns.get_mut(&id.0) else {
            return Err(CmError::UnknownConnection(id));
        };
        let mad = conn::build_rtu(c.local_comm_id, c.remote_comm_id).to_mad(c.tid);
        c.response = Some(mad);
        c.state = CmState::Established;
        let (dest, sr) = (c.remote_ip, c.peer_sr);
        self.push_tx(dest, mad);
        self.events.push_back(CmEvent::Established {
            id,
            peer_selective_retransmit: sr,
        });
        Ok(())
    }

    /// Passive side: traffic arrived on the QP before the RTU; IBTA (§12.9.5) lets that
    /// stand for the RTU (Linux `ib_cm_notify(IB_EVENT_COMM_EST)`). Establishes a
    /// connection in RepSent or MraRepRcvd (with [`CmEvent::Established`]); does
    /// nothing in any other state.
    pub fn established(&mut self, id: ConnId) {
        if let Some(c) = self.conns.get_mut(&id.0) {
            if matches!(c.state, CmState::RepSent | CmState::MraRepRcvd) {
                c.state = CmState::Established;
                c.retx = None;
                let sr = c.peer_sr;
                self.events.push_back(CmEvent::Established {
                    id,
                    peer_selective_retransmit: sr,
                });
            }
        }
    }

    /// Queues a DREQ for an established connection (Linux `ib_send_cm_dreq`, our own
    /// TransactionID, resent like the REQ/REP); [`CmEvent::Disconnected`] follows the
    /// DREP, or the last retry. Call it too when the connection's QP goes to Error, as
    /// rdma_cm consumers do. A connection already disconnecting (DreqSent, TimeWait) is
    /// left alone and `Ok` is returned.
    ///
    /// Errors: [`CmError::UnknownConnection`], [`CmError::InvalidState`] for a
    /// connection not established yet (use [`Cm::destroy`]).
    pub fn disconnect(&mut self, now: Timestamp, id: ConnId) -> Result<(), CmError> {
        let state = self.expect_state(
            id,
            &[CmState::Established, CmState::DreqSent, CmState::TimeWait],
            "an established connection",
        )?;
        if state != CmState::Established {
            return Ok(());
        }
        let tid = self.own_tid(id.0);
        let Some(c) = self.conns.get_mut(&id.0) else {
            return Err(CmError::UnknownConnection(id));
        };
        let mad = conn::build_dreq(c.local_comm_id, c.remote_comm_id, c.remote_qpn).to_mad(tid);
        c.state = CmState::DreqSent;
        c.response = None;
        self.send_request(now, id.0, mad);
        Ok(())
    }

    /// The application abandons connection `id` in whatever state (Linux
    /// `cm_destroy_id`): an unanswered REQ gets REJ timeout (with our CA GUID as ARI), a
    /// pending REQ or REP and our unanswered REP get REJ consumer defined, an established
    /// connection gets one DREQ; the connection is then forgotten or (after a DREQ or
    /// from RepSent) left in TimeWait. No event follows.
    ///
    /// Errors: [`CmError::UnknownConnection`].
    pub fn destroy(&mut self, now: Timestamp, id: ConnId) -> Result<(), CmError> {
        let c = self
            .conns
            .get(&id.0)
            .ok_or(CmError::UnknownConnection(id))?;
        match c.state {
            CmState::ReqSent | CmState::MraReqRcvd => {
                let guid = self.local_ca_guid.to_be_bytes();
                self.send_rej(now, id.0, CM_REJ_TIMEOUT, &guid, &[]);
                self.remove_conn(id.0);
            }
            CmState::ReqRcvd | CmState::MraReqSent | CmState::RepRcvd | CmState::MraRepSent => {
                self.send_rej(now, id.0, CM_REJ_CONSUMER_DEFINED, &[], &[]);
                self.remove_conn(id.0);
            }
            CmState::RepSent | CmState::MraRepRcvd => {
                self.send_rej(now, id.0, CM_REJ_CONSUMER_DEFINED, &[], &[]);
            }
            CmState::Established => {
                self.disconnect(now, id)?;
                self.enter_timewait(now, id.0);
            }
            CmState::DreqSent => self.enter_timewait(now, id.0),
            CmState::TimeWait => {}
        }
        Ok(())
    }
}
