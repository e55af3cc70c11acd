//! Sans-IO connection manager: RDMA CM semantics (listen on a port, connect with private
//! data, accept, reject, disconnect) on IB CM MADs (IBTA Vol 1 ch. 12) carried to and
//! from QP1 in RoCEv2 UD SENDs, interoperable with Linux ib_cm / rdma_cm.
//!
//! One [`Cm`] serves one local IP address (one RoCE device / GID). It owns no socket and
//! no clock: the driver passes received MADs to [`Cm::handle_mad`], sends what
//! [`Cm::poll_transmit`] returns to QP1 of the given address (BTH + DETH UD SEND Only,
//! Q_Key [`GSI_QKEY`](crate::wire::GSI_QKEY)), calls [`Cm::handle_timeout`] at
//! [`Cm::poll_timeout`], and hands [`Cm::poll_event`]'s events to the application.
//!
//! ```text
//!  active (connect)                      passive (listen)
//!   REQ  ------------------------------>  ConnectRequest -> accept()
//!   ConnectReply  <---------------------  REP
//!   send_rtu(): RTU, Established ------>  Established
//!   disconnect(): DREQ ---------------->  DREP, Disconnected
//!   Disconnected  <---------------------
//! ```
//!
//! Timers: a REQ, REP or DREQ is resent every [`CM_RETRY_INTERVAL`] (250 ms, our
//! choice so that loss is repaired quickly on a LAN and in loopback tests; the MADs
//! still carry Linux's response timeout field value 0x14 = 4.3 s) up to
//! [`CM_MAX_RETRIES`] (15) times; then the connection is dropped with
//! [`CmEvent::Unreachable`]. A received MRA postpones the next resend by its service
//! timeout. No MRA is ever sent, and there is no TimeWait state: a connection is
//! forgotten once its DREQ/DREP exchange ends (a repeated DREQ for a forgotten
//! connection is still answered with a DREP, as Linux does).
//!
//! Transaction IDs (IBTA §13.4.6.4) follow Linux (`cm_form_tid`): a side's own requests
//! (REQ, RTU, DREQ) carry `hi << 32 | local communication ID`; responses (REP, REJ of
//! a REQ, DREP) echo the TransactionID of the message they answer.
mod conn;
mod rx;
mod types;

#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::net::IpAddr;
use std::time::Duration;

use crate::time::Timestamp;
use crate::wire::cm::*;
use crate::wire::mad::MAD_LEN;

pub use conn::{
    CM_HOP_LIMIT, CM_MAX_RETRIES, CM_PARTITION_KEY, CM_RESPONSE_TIMEOUT, CM_TARGET_ACK_DELAY,
    ROCE_PERMISSIVE_LID,
};
pub use types::*;

use conn::{Conn, Retransmit};

/// Our retransmission interval for REQ, REP and DREQ: 250 ms.
pub const CM_RETRY_INTERVAL: Duration = Duration::from_millis(250);

/// The connection manager of one local IP address. See the [module docs](self).
#[derive(Debug)]
pub struct Cm {
    local_ip: IpAddr,
    local_ca_guid: u64,
    /// Upper 32 bits of the TransactionIDs of our requests.
    tid_hi: u32,
    rng: u64,
    listeners: BTreeSet<u16>,
    conns: BTreeMap<u32, Conn>,
    /// (peer address, peer communication ID) -> local communication ID.
    by_remote: HashMap<(IpAddr, u32), u32>,
    tx: VecDeque<(IpAddr, [u8; MAD_LEN])>,
    events: VecDeque<CmEvent>,
    stats: CmStats,
}

/// splitmix64 step: deterministic IDs from the seed.
fn splitmix64(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// 4.096 us x 2^`exp` (IBTA's timeout encoding), `exp` capped at 31.
pub fn ib_timeout(exp: u8) -> Duration {
    Duration::from_nanos(4096u64 << exp.min(31))
}

impl Cm {
    /// A connection manager for `local_ip`. `seed` makes communication IDs,
    /// TransactionIDs and the CA GUID deterministic (use a random seed in production so
    /// IDs differ across restarts).
    pub fn new(local_ip: IpAddr, seed: u64) -> Self {
        let mut rng = seed;
        let tid_hi = (splitmix64(&mut rng) as u32) | 1;
        // A locally administered EUI-64, like a MAC-derived GUID (xx:xx:xx:ff:fe:xx:xx:xx).
        let r = splitmix64(&mut rng);
        let local_ca_guid = ((r & 0x00FF_FFFF_0000_0000) | 0x0200_0000_0000_0000)
            | 0x0000_00FF_FE00_0000
            | (r & 0x00FF_FFFF);
        Cm {
            local_ip,
            local_ca_guid,
            tid_hi,
            rng,
            listeners: BTreeSet::new(),
            conns: BTreeMap::new(),
            by_remote: HashMap::new(),
            tx: VecDeque::new(),
            events: VecDeque::new(),
            stats: CmStats::default(),
        }
    }

    /// The local IP address this CM serves.
    pub fn local_ip(&self) -> IpAddr {
        self.local_ip
    }

    /// The Local CA GUID put in REQs and REPs.
    pub fn local_ca_guid(&self) -> u64 {
        self.local_ca_guid
    }

    /// Sets the Local CA GUID (e.g. the EUI-64 of the interface's MAC, as Linux rxe).
    pub fn set_local_ca_guid(&mut self, guid: u64) {
        self.local_ca_guid = guid;
    }

    /// Counters.
    pub fn stats(&self) -> CmStats {
        self.stats
    }

    /// Accepts REQs for `port` (service ID `0x0000000001060000 | port`, RDMA_PS_TCP).
    /// Errors: [`CmError::AlreadyListening`].
    pub fn listen(&mut self, port: u16) -> Result<(), CmError> {
        if !self.listeners.insert(port) {
            return Err(CmError::AlreadyListening(port));
        }
        Ok(())
    }

    /// Stops accepting REQs for `port`; later REQs get REJ reason 8. Returns whether
    /// the port was listened on. Existing connections are not affected.
    pub fn unlisten(&mut self, port: u16) -> bool {
        self.listeners.remove(&port)
    }

    /// Starts a connection: queues a REQ to `p.dest` (service ID of `p.dest_port`,
    /// primary path flow label `cm_flow_label(p.src_port, p.dest_port)`), and returns
    /// its ID. The answer comes as [`CmEvent::ConnectReply`], [`CmEvent::Rejected`] or
    /// [`CmEvent::Unreachable`].
    ///
    /// Errors: [`CmError::PrivateDataTooLong`] over 56 bytes,
    /// [`CmError::AddressFamilyMismatch`], [`CmError::InvalidParameter`].
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
        let cma = CmaHeader::new(self.local_ip, p.src_port, p.dest).ok_or(
            CmError::AddressFamilyMismatch {
                local: self.local_ip,
                dest: p.dest,
            },
        )?;
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
            user_private_data: &p.private_data,
        });
        let tid = self.own_tid(local_comm_id);
        let mad = req.to_mad(tid);
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
                retx: None,
                rtu: None,
            },
        );
        self.send_request(now, local_comm_id, mad);
        Ok(ConnId(local_comm_id))
    }

    /// Passive side: accepts the connection of a [`CmEvent::ConnectRequest`] by queuing
    /// a REP (Target ACK Delay 15, E2E flow control 1, failover accepted 0, as Linux).
    /// The connection becomes established at the RTU (or [`Cm::established`]).
    ///
    /// Errors: [`CmError::UnknownConnection`], [`CmError::InvalidState`] unless the REQ
    /// is pending, [`CmError::PrivateDataTooLong`] over 196 bytes,
    /// [`CmError::InvalidParameter`].
    pub fn accept(&mut self, now: Timestamp, id: ConnId, p: AcceptParams) -> Result<(), CmError> {
        self.expect_state(id, CmState::ReqRcvd, "a pending REQ (ReqRcvd)")?;
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
        let guid = self.local_ca_guid;
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
        rep.set_target_ack_delay(CM_TARGET_ACK_DELAY);
        rep.set_end_to_end_flow_control(1);
        rep.set_rnr_retry_count(p.rnr_retry_count);
        rep.local_ca_guid.set(guid);
        conn::put_private(&mut rep.private_data, &p.private_data);
        c.local_qpn = p.local_qpn;
        c.state = CmState::RepSent;
        let mad = rep.to_mad(c.tid);
        self.send_request(now, id.0, mad);
        Ok(())
    }

    /// Rejects a pending REQ (passive side, state ReqRcvd) or a received REP (active
    /// side, state RepRcvd) with a REJ of `reason` (`CM_REJ_*`; NVMe/RDMA uses
    /// [`CM_REJ_CONSUMER_DEFINED`] with its reject private data). The connection is
    /// dropped; no event follows.
    ///
    /// Errors: [`CmError::UnknownConnection`], [`CmError::InvalidState`],
    /// [`CmError::PrivateDataTooLong`] over 148 bytes.
    pub fn reject(
        &mut self,
        _now: Timestamp,
        id: ConnId,
        reason: u16,
        private_data: &[u8],
    ) -> Result<(), CmError> {
        let c = self
            .conns
            .get(&id.0)
            .ok_or(CmError::UnknownConnection(id))?;
        let message_rejected = match c.state {
            CmState::ReqRcvd => CM_MSG_REQ,
            CmState::RepRcvd => CM_MSG_REP,
            state => {
                return Err(CmError::InvalidState {
                    id,
                    state,
                    expected: "a pending REQ (ReqRcvd) or REP (RepRcvd)",
                })
            }
        };
        if private_data.len() > REJ_PRIVATE_DATA_LEN {
            return Err(CmError::PrivateDataTooLong {
                len: private_data.len(),
                max: REJ_PRIVATE_DATA_LEN,
            });
        }
        let rej = conn::build_rej(
            c.local_comm_id,
            c.remote_comm_id,
            message_rejected,
            reason,
            private_data,
        );
        let (dest, tid) = (c.remote_ip, c.tid);
        self.push_tx(dest, rej.to_mad(tid));
        self.remove_conn(id.0);
        Ok(())
    }

    /// Active side: after [`CmEvent::ConnectReply`] (and the QP is in RTS), queues the
    /// RTU; the connection is established and [`CmEvent::Established`] follows.
    ///
    /// Errors: [`CmError::UnknownConnection`], [`CmError::InvalidState`] unless RepRcvd.
    pub fn send_rtu(&mut self, _now: Timestamp, id: ConnId) -> Result<(), CmError> {
        self.expect_state(id, CmState::RepRcvd, "a received REP (RepRcvd)")?;
        let Some(c) = self.conns.get_mut(&id.0) else {
            return Err(CmError::UnknownConnection(id));
        };
        let mad = conn::build_rtu(c.local_comm_id, c.remote_comm_id).to_mad(c.tid);
        c.rtu = Some(mad);
        c.state = CmState::Established;
        let dest = c.remote_ip;
        self.push_tx(dest, mad);
        self.events.push_back(CmEvent::Established { id });
        Ok(())
    }

    /// Passive side: traffic arrived on the QP before the RTU; IBTA (§12.9.5) lets that
    /// stand for the RTU. Establishes a connection in RepSent (with
    /// [`CmEvent::Established`]); does nothing in any other state.
    pub fn established(&mut self, id: ConnId) {
        if let Some(c) = self.conns.get_mut(&id.0) {
            if c.state == CmState::RepSent {
                c.state = CmState::Established;
                c.retx = None;
                self.events.push_back(CmEvent::Established { id });
            }
        }
    }

    /// Queues a DREQ for an established connection; [`CmEvent::Disconnected`] follows
    /// the DREP ([`CmEvent::Unreachable`] if none comes).
    ///
    /// Errors: [`CmError::UnknownConnection`], [`CmError::InvalidState`] unless
    /// Established.
    pub fn disconnect(&mut self, now: Timestamp, id: ConnId) -> Result<(), CmError> {
        self.expect_state(id, CmState::Established, "an established connection")?;
        let tid = self.own_tid(id.0);
        let Some(c) = self.conns.get_mut(&id.0) else {
            return Err(CmError::UnknownConnection(id));
        };
        let mad = conn::build_dreq(c.local_comm_id, c.remote_comm_id, c.remote_qpn).to_mad(tid);
        c.state = CmState::DreqSent;
        c.rtu = None;
        self.send_request(now, id.0, mad);
        Ok(())
    }

    /// Resends requests whose timer expired; drops connections out of retries with
    /// [`CmEvent::Unreachable`] (a passive side out of REP retries also sends a REJ with
    /// reason Timeout, IBTA §12.9.5.3).
    pub fn handle_timeout(&mut self, now: Timestamp) {
        let due: Vec<u32> = self
            .conns
            .values()
            .filter(|c| c.retx.as_ref().is_some_and(|r| r.deadline <= now))
            .map(|c| c.local_comm_id)
            .collect();
        for id in due {
            let Some(c) = self.conns.get_mut(&id) else {
                continue;
            };
            let Some(r) = c.retx.as_mut() else { continue };
            if r.retries_left > 0 {
                r.retries_left -= 1;
                r.deadline = now + CM_RETRY_INTERVAL;
                let (dest, mad) = (c.remote_ip, r.mad);
                self.stats.retransmits += 1;
                self.push_tx(dest, mad);
                continue;
            }
            if c.state == CmState::RepSent {
                let rej = conn::build_rej(id, c.remote_comm_id, CM_MSG_REP, CM_REJ_TIMEOUT, &[]);
                let (dest, tid) = (c.remote_ip, c.tid);
                self.push_tx(dest, rej.to_mad(tid));
            }
            self.remove_conn(id);
            self.events
                .push_back(CmEvent::Unreachable { id: ConnId(id) });
        }
    }

    /// The earliest time [`Cm::handle_timeout`] has work, `None` with no timer running.
    pub fn poll_timeout(&self) -> Option<Timestamp> {
        self.conns
            .values()
            .filter_map(|c| c.retx.as_ref().map(|r| r.deadline))
            .min()
    }

    /// The next MAD to send to QP1 of the returned address.
    pub fn poll_transmit(&mut self) -> Option<(IpAddr, [u8; MAD_LEN])> {
        self.tx.pop_front()
    }

    /// The next event for the application.
    pub fn poll_event(&mut self) -> Option<CmEvent> {
        self.events.pop_front()
    }

    /// A snapshot of connection `id`; `None` once it is gone.
    pub fn conn_info(&self, id: ConnId) -> Option<ConnInfo> {
        self.conns.get(&id.0).map(Conn::info)
    }

    /// Number of connections in any state.
    pub fn conn_count(&self) -> usize {
        self.conns.len()
    }

    // ----- internals -----

    fn expect_state(
        &self,
        id: ConnId,
        want: CmState,
        expected: &'static str,
    ) -> Result<(), CmError> {
        let c = self
            .conns
            .get(&id.0)
            .ok_or(CmError::UnknownConnection(id))?;
        if c.state != want {
            return Err(CmError::InvalidState {
                id,
                state: c.state,
                expected,
            });
        }
        Ok(())
    }

    /// A fresh non-zero local communication ID.
    fn alloc_comm_id(&mut self) -> u32 {
        loop {
            let id = splitmix64(&mut self.rng) as u32;
            if id != 0 && !self.conns.contains_key(&id) {
                return id;
            }
        }
    }

    /// TransactionID of our own requests for connection `local_comm_id`.
    fn own_tid(&self, local_comm_id: u32) -> u64 {
        (u64::from(self.tid_hi) << 32) | u64::from(local_comm_id)
    }

    fn push_tx(&mut self, dest: IpAddr, mad: [u8; MAD_LEN]) {
        self.stats.mads_sent += 1;
        self.tx.push_back((dest, mad));
    }

    /// Sends a request MAD of connection `id` and arms its retransmission timer.
    fn send_request(&mut self, now: Timestamp, id: u32, mad: [u8; MAD_LEN]) {
        let Some(c) = self.conns.get_mut(&id) else {
            return;
        };
        c.retx = Some(Retransmit {
            mad,
            deadline: now + CM_RETRY_INTERVAL,
            retries_left: CM_MAX_RETRIES,
        });
        let dest = c.remote_ip;
        self.push_tx(dest, mad);
    }

    fn remove_conn(&mut self, id: u32) {
        if let Some(c) = self.conns.remove(&id) {
            if c.remote_comm_id != 0 {
                self.by_remote.remove(&(c.remote_ip, c.remote_comm_id));
            }
        }
    }
}

fn check_u24(v: u32, what: &'static str) -> Result<(), CmError> {
    if v > 0x00FF_FFFF {
        return Err(CmError::InvalidParameter(what));
    }
    Ok(())
}
