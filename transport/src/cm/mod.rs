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
//!   disconnect(): DREQ ---------------->  DREP, Disconnected, TimeWait
//!   Disconnected, TimeWait  <-----------
//! ```
//!
//! Behaviour follows Linux ib_cm (`drivers/infiniband/core/cm.c`), state by state:
//! - Timers: REQ, REP and DREQ are resent as the MAD layer does for ib_cm. The active
//!   side waits `2 x 2^(plt-8) + 2^(t-8)` ms ([`timer::req_interval`]; `plt` = the REQ's
//!   ACK timeout - 1, `t` = [`CmConfig::cm_response_timeout`]); the passive side waits
//!   `2^(t-8)` ms with `t` = the REQ's Local CM Response Timeout. Each side makes the
//!   REQ's Max CM Retries retransmissions. A received MRA replaces the interval with
//!   its service timeout plus the ACK timeout. Out of retries: REQ/REP ->
//!   [`CmEvent::Unreachable`] (no REJ, as Linux); DREQ -> TimeWait and
//!   [`CmEvent::Disconnected`].
//! - Duplicates: a REQ repeated while the application has not answered gets an MRA
//!   (rdma_cm's delayed MRA, service timeout [`CmConfig::mra_service_timeout`]), again
//!   after that; a REQ for a connection in TimeWait gets REJ stale connection (10); other
//!   duplicate REQs are dropped (the REP has its own timer). A duplicate REP gets the RTU
//!   again (or the MRA); a DREQ in TimeWait or for an unknown connection gets a DREP.
//! - A REQ from a QP (peer address + QPN) that still has a live connection gets REJ
//!   stale connection and the old connection is disconnected (Linux `cm_match_req`);
//!   [`CmEvent::StaleConnection`] tells the old connection's application why.
//! - TimeWait: after the DREQ/DREP exchange (or a DREQ timeout, or a REJ of an
//!   established connection) the connection stays for `2^(ack-8)` ms, `ack` =
//!   `cm_ack_timeout(ca_ack_delay, plt)` (2 s for Linux's 0x13); its local communication
//!   ID is not handed out again and [`Cm::connect`] / [`Cm::accept`] refuse its QPN.
//! - REJ: reason 8 (invalid service ID) for a port nobody listens on, 28 (consumer
//!   defined) with the application's private data, 10 (stale connection); the Local
//!   Communication ID and MessageRejected fields are filled as `cm_format_rej` /
//!   `cm_issue_rej` do.
//! - Selective retransmission capability: our REQ carries VendorID
//!   [`VENDOR_ID_SR_REQ`](crate::wire::cm::VENDOR_ID_SR_REQ), our REP
//!   [`VENDOR_ID_SR_REP`](crate::wire::cm::VENDOR_ID_SR_REP) (when
//!   [`CmConfig::selective_retransmit`]); the events report whether the peer sent them.
//!
//! Transaction IDs (IBTA §13.4.6.4) follow Linux (`cm_form_tid`): a side's own requests
//! (REQ, RTU, DREQ) carry `hi << 32 | local communication ID`; responses (REP, MRA, REJ
//! of a REQ, DREP) echo the TransactionID of the message they answer.
mod calls;
mod conn;
mod rx;
pub mod timer;
mod types;

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_linux;
#[cfg(test)]
mod tests_states;

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::net::IpAddr;

use crate::time::Timestamp;
use crate::wire::mad::MAD_LEN;

pub use conn::{
    CM_HOP_LIMIT, CM_MAX_RETRIES, CM_PARTITION_KEY, CM_RESPONSE_TIMEOUT, CM_TARGET_ACK_DELAY,
    ROCE_PERMISSIVE_LID,
};
pub use types::*;

use conn::{Conn, Retransmit};

/// The connection manager of one local IP address. See the [module docs](self).
#[derive(Debug)]
pub struct Cm {
    local_ip: IpAddr,
    local_ca_guid: u64,
    config: CmConfig,
    /// Upper 32 bits of the TransactionIDs of our requests.
    tid_hi: u32,
    rng: u64,
    listeners: BTreeSet<u16>,
    conns: BTreeMap<u32, Conn>,
    /// (peer address, peer communication ID) -> local communication ID (Linux's
    /// remote ID table; kept through TimeWait so that a stale REQ is recognised).
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
pub fn ib_timeout(exp: u8) -> std::time::Duration {
    std::time::Duration::from_nanos(4096u64 << exp.min(31))
}

impl Cm {
    /// A connection manager for `local_ip` with the default [`CmConfig`]. `seed` makes
    /// communication IDs, TransactionIDs and the CA GUID deterministic (use a random
    /// seed in production so IDs differ across restarts).
    pub fn new(local_ip: IpAddr, seed: u64) -> Self {
        Self::with_config(local_ip, seed, CmConfig::default())
    }

    /// A connection manager for `local_ip` with `config`.
    pub fn with_config(local_ip: IpAddr, seed: u64, config: CmConfig) -> Self {
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
            config,
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

    /// The tunables in force.
    pub fn config(&self) -> CmConfig {
        self.config
    }

    /// Replaces the tunables; connections already started keep their timers.
    pub fn set_config(&mut self, config: CmConfig) {
        self.config = config;
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

    /// Resends requests whose timer expired, gives up on those out of retries (REQ,
    /// REP: [`CmEvent::Unreachable`]; DREQ: TimeWait and [`CmEvent::Disconnected`]), and
    /// forgets connections whose TimeWait ended.
    pub fn handle_timeout(&mut self, now: Timestamp) {
        let due: Vec<u32> = self
            .conns
            .values()
            .filter(|c| c.deadline().is_some_and(|d| d <= now))
            .map(|c| c.local_comm_id)
            .collect();
        for id in due {
            let Some(c) = self.conns.get_mut(&id) else {
                continue;
            };
            if c.timewait_until.is_some_and(|t| t <= now) {
                self.remove_conn(id);
                continue;
            }
            let Some(r) = c.retx.as_mut() else { continue };
            if r.deadline > now {
                continue;
            }
            if r.retries_left > 0 {
                r.retries_left -= 1;
                r.deadline = now + r.interval;
                let (dest, mad) = (c.remote_ip, r.mad);
                self.stats.retransmits += 1;
                self.push_tx(dest, mad);
                continue;
            }
            match c.state {
                CmState::DreqSent => {
                    c.enter_timewait(now);
                    self.stats.timewaits += 1;
                    self.events
                        .push_back(CmEvent::Disconnected { id: ConnId(id) });
                }
                _ => {
                    self.remove_conn(id);
                    self.events
                        .push_back(CmEvent::Unreachable { id: ConnId(id) });
                }
            }
        }
    }

    /// The earliest time [`Cm::handle_timeout`] has work, `None` with no timer running.
    pub fn poll_timeout(&self) -> Option<Timestamp> {
        self.conns.values().filter_map(Conn::deadline).min()
    }

    /// The next MAD to send to QP1 of the returned address.
    pub fn poll_transmit(&mut self) -> Option<(IpAddr, [u8; MAD_LEN])> {
        self.tx.pop_front()
    }

    /// The next event for the application.
    pub fn poll_event(&mut self) -> Option<CmEvent> {
        self.events.pop_front()
    }

    /// A snapshot of connection `id`; `None` once it is gone (after TimeWait).
    pub fn conn_info(&self, id: ConnId) -> Option<ConnInfo> {
        self.conns.get(&id.0).map(Conn::info)
    }

    /// Number of connections in any state, TimeWait included.
    pub fn conn_count(&self) -> usize {
        self.conns.len()
    }

    /// Number of connections not in TimeWait.
    pub fn live_conn_count(&self) -> usize {
        self.conns
            .values()
            .filter(|c| c.state != CmState::TimeWait)
            .count()
    }

    /// Whether local QP `qpn` belongs to a connection in TimeWait (and so may not be
    /// connected again yet).
    pub fn qpn_in_timewait(&self, qpn: u32) -> bool {
        self.conns
            .values()
            .any(|c| c.state == CmState::TimeWait && c.local_qpn == qpn)
    }

    // ----- internals -----

    fn expect_state(
        &self,
        id: ConnId,
        want: &[CmState],
        expected: &'static str,
    ) -> Result<CmState, CmError> {
        let c = self
            .conns
            .get(&id.0)
            .ok_or(CmError::UnknownConnection(id))?;
        if !want.contains(&c.state) {
            return Err(CmError::InvalidState {
                id,
                state: c.state,
                expected,
            });
        }
        Ok(c.state)
    }

    /// A fresh non-zero local communication ID, not used by any connection (TimeWait
    /// included).
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

    /// Sends a request MAD of connection `id` and arms its retransmission timer with the
    /// connection's interval and retries.
    fn send_request(&mut self, now: Timestamp, id: u32, mad: [u8; MAD_LEN]) {
        let Some(c) = self.conns.get_mut(&id) else {
            return;
        };
        c.retx = Some(Retransmit {
            mad,
            deadline: now + c.interval,
            interval: c.interval,
            retries_left: c.max_cm_retries,
        });
        let dest = c.remote_ip;
        self.push_tx(dest, mad);
    }

    /// Moves connection `id` to TimeWait.
    fn enter_timewait(&mut self, now: Timestamp, id: u32) {
        if let Some(c) = self.conns.get_mut(&id) {
            c.enter_timewait(now);
            self.stats.timewaits += 1;
        }
    }

    fn remove_conn(&mut self, id: u32) {
        if let Some(c) = self.conns.remove(&id) {
            if c.remote_comm_id != 0
                && self.by_remote.get(&(c.remote_ip, c.remote_comm_id)) == Some(&id)
            {
                self.by_remote.remove(&(c.remote_ip, c.remote_comm_id));
            }
        }
    }

    fn check_qpn(&self, qpn: u32) -> Result<(), CmError> {
        if self.qpn_in_timewait(qpn) {
            return Err(CmError::QpnInTimeWait(qpn));
        }
        Ok(())
    }
}

fn check_u24(v: u32, what: &'static str) -> Result<(), CmError> {
    if v > 0x00FF_FFFF {
        return Err(CmError::InvalidParameter(what));
    }
    Ok(())
}
