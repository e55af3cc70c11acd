//! One connection's record, and the CM messages built from it (with the field values
//! Linux ib_cm / rdma_cm put on the wire, see `shared/captures/README.md`).
use std::net::IpAddr;

use std::time::Duration;

use crate::time::Timestamp;
use crate::wire::cm::*;
use crate::wire::mad::MAD_LEN;

use super::timer::{cm_convert, MAX_TIMEWAIT};
use super::types::{CmRole, CmState, ConnInfo};

/// CM Response Timeout value put in REQs (local and remote) by default: 0x14 = 20, i.e.
/// 4.096 us x 2^20 = 4.3 s, as Linux rdma_cm (`CMA_CM_RESPONSE_TIMEOUT`); see
/// [`CmConfig`](super::CmConfig).
pub const CM_RESPONSE_TIMEOUT: u8 = 0x14;
/// Max CM Retries put in REQs by default (Linux `CMA_MAX_CM_RETRIES`).
pub const CM_MAX_RETRIES: u8 = 15;
/// Target ACK Delay put in REPs by default: 15 (4.096 us x 2^15 = 134 ms), as Linux rxe.
pub const CM_TARGET_ACK_DELAY: u8 = 15;
/// Hop limit of the REQ's primary path, as Linux.
pub const CM_HOP_LIMIT: u8 = 64;
/// LID of RoCE paths: the permissive LID.
pub const ROCE_PERMISSIVE_LID: u16 = 0xFFFF;
/// Default P_Key.
pub const CM_PARTITION_KEY: u16 = 0xFFFF;

/// A MAD awaiting its answer, resent every `interval` (Linux: the MAD layer's
/// `timeout_ms` and `retries`).
#[derive(Clone, Debug)]
pub(super) struct Retransmit {
    pub mad: [u8; MAD_LEN],
    pub deadline: Timestamp,
    pub interval: Duration,
    pub retries_left: u8,
}

/// The state of one connection (Linux `struct cm_id_private`, the parts the wire needs).
#[derive(Clone, Debug)]
pub(super) struct Conn {
    pub local_comm_id: u32,
    pub role: CmRole,
    pub state: CmState,
    pub remote_ip: IpAddr,
    /// 0 until known (active side: until the REP).
    pub remote_comm_id: u32,
    pub local_port: u16,
    pub remote_port: u16,
    pub local_qpn: u32,
    pub remote_qpn: u32,
    pub flow_label: u32,
    /// TransactionID of the establishment exchange (the REQ's; REP, RTU, MRA and REJs
    /// use it).
    pub tid: u64,
    /// Retransmission interval of this side's REQ/REP/DREQ (Linux `timeout_ms`).
    pub interval: Duration,
    /// Retransmissions allowed (Linux `max_cm_retries`).
    pub max_cm_retries: u8,
    /// The connection's ACK timeout (IBTA time value, Linux `av.timeout`): TimeWait
    /// lasts `cm_convert(ack_timeout)`, and MRAs add it to their service timeout.
    pub ack_timeout: u8,
    /// The request in flight (REQ, REP or DREQ) with its timer.
    pub retx: Option<Retransmit>,
    /// The last RTU or MRA sent, resent when a duplicate REP or REQ shows it was lost.
    pub response: Option<[u8; MAD_LEN]>,
    /// End of TimeWait.
    pub timewait_until: Option<Timestamp>,
    /// Active side: our REQ carried [`VENDOR_ID_SR_REQ`]. Passive side: the REQ carried
    /// it and we are configured for it (so our REP carries [`VENDOR_ID_SR_REP`]).
    pub sr_offered: bool,
    /// Selective retransmission negotiated: both markers exchanged.
    pub peer_sr: bool,
}

impl Conn {
    pub fn info(&self) -> ConnInfo {
        ConnInfo {
            role: self.role,
            state: self.state,
            remote_ip: self.remote_ip,
            remote_comm_id: self.remote_comm_id,
            remote_qpn: self.remote_qpn,
            local_qpn: self.local_qpn,
            flow_label: self.flow_label,
            local_port: self.local_port,
            remote_port: self.remote_port,
            peer_selective_retransmit: self.peer_sr,
        }
    }

    /// Enters TimeWait at `now` (Linux `cm_enter_timewait`): no request in flight, the
    /// IDs stay reserved for `cm_convert(ack_timeout)`, at most [`MAX_TIMEWAIT`].
    pub fn enter_timewait(&mut self, now: Timestamp) {
        self.state = CmState::TimeWait;
        self.retx = None;
        self.response = None;
        self.timewait_until = Some(now + cm_convert(self.ack_timeout).min(MAX_TIMEWAIT));
    }

    /// The earliest timer of this connection.
    pub fn deadline(&self) -> Option<Timestamp> {
        match (&self.retx, self.timewait_until) {
            (Some(r), Some(t)) => Some(r.deadline.min(t)),
            (Some(r), None) => Some(r.deadline),
            (None, t) => t,
        }
    }

    /// A REJ from this connection (Linux `cm_format_rej`): from ReqRcvd the Local
    /// Communication ID is 0; the rejected message follows from the state.
    pub fn rej(&self, reason: u16, ari: &[u8], private_data: &[u8]) -> CmRej {
        let (local, msg) = match self.state {
            CmState::ReqRcvd => (0, CM_MSG_REQ),
            CmState::MraReqSent => (self.local_comm_id, CM_MSG_REQ),
            CmState::RepRcvd | CmState::MraRepSent => (self.local_comm_id, CM_MSG_REP),
            _ => (self.local_comm_id, CM_MSG_OTHER),
        };
        build_rej(local, self.remote_comm_id, msg, reason, ari, private_data)
    }
}

/// Copies `src` to the front of `dst` (callers check the length first).
pub(super) fn put_private(dst: &mut [u8], src: &[u8]) {
    let n = src.len().min(dst.len());
    dst[..n].copy_from_slice(&src[..n]);
}

/// Fields of a REQ that are not fixed.
pub(super) struct ReqFields<'a> {
    pub local_comm_id: u32,
    pub service_id: u64,
    pub local_ca_guid: u64,
    pub local_qpn: u32,
    pub starting_psn: u32,
    pub responder_resources: u8,
    pub initiator_depth: u8,
    pub retry_count: u8,
    pub rnr_retry_count: u8,
    pub path_mtu_code: u8,
    pub local_ack_timeout: u8,
    pub local_ip: IpAddr,
    pub remote_ip: IpAddr,
    pub flow_label: u32,
    pub cma: CmaHeader,
    pub cm_response_timeout: u8,
    pub max_cm_retries: u8,
    pub vendor_id: u32,
    pub user_private_data: &'a [u8],
}

/// A REQ as Linux rdma_cm fills it on RoCE (capture frame 4): RC, E2E flow control 1,
/// Q_Key 0, CM response timeouts 0x14, max CM retries 15, P_Key 0xFFFF, permissive
/// LIDs (hop limit > 1), IPv4-mapped GIDs, hop limit 64, traffic class 0, SL 0, subnet
/// local 0, packet rate 0, no alternate path, SRQ 0; private data = CMA header + user
/// data. The vendor ID is ours (Linux sends 0).
pub(super) fn build_req(f: &ReqFields<'_>) -> CmReq {
    let mut req = CmReq::zeroed();
    req.local_comm_id.set(f.local_comm_id);
    req.set_vendor_id(f.vendor_id);
    req.service_id.set(f.service_id);
    req.local_ca_guid.set(f.local_ca_guid);
    req.set_local_qpn(f.local_qpn);
    req.set_responder_resources(f.responder_resources);
    req.set_initiator_depth(f.initiator_depth);
    req.set_remote_cm_response_timeout(f.cm_response_timeout);
    req.set_transport_service_type(CM_TRANSPORT_RC);
    req.set_end_to_end_flow_control(1);
    req.set_starting_psn(f.starting_psn);
    req.set_local_cm_response_timeout(f.cm_response_timeout);
    req.set_retry_count(f.retry_count);
    req.partition_key.set(CM_PARTITION_KEY);
    req.set_path_mtu(f.path_mtu_code);
    req.set_rnr_retry_count(f.rnr_retry_count);
    req.set_max_cm_retries(f.max_cm_retries);
    let p = &mut req.primary_path;
    p.local_lid.set(ROCE_PERMISSIVE_LID);
    p.remote_lid.set(ROCE_PERMISSIVE_LID);
    p.local_gid = gid_from_ip(f.local_ip);
    p.remote_gid = gid_from_ip(f.remote_ip);
    p.set_flow_label(f.flow_label);
    p.hop_limit = CM_HOP_LIMIT;
    p.set_local_ack_timeout(f.local_ack_timeout);
    req.private_data[..CMA_HEADER_LEN].copy_from_slice(zerocopy::IntoBytes::as_bytes(&f.cma));
    put_private(&mut req.private_data[CMA_HEADER_LEN..], f.user_private_data);
    req
}

/// A REJ of message `message_rejected` (`CM_MSG_*`) with Additional Rejection
/// Information `ari` (at most 72 bytes) and private data.
pub(super) fn build_rej(
    local_comm_id: u32,
    remote_comm_id: u32,
    message_rejected: u8,
    reason: u16,
    ari: &[u8],
    private_data: &[u8],
) -> CmRej {
    let mut rej = CmRej::zeroed();
    rej.local_comm_id.set(local_comm_id);
    rej.remote_comm_id.set(remote_comm_id);
    rej.set_message_rejected(message_rejected);
    rej.reason.set(reason);
    let n = ari.len().min(REJ_ARI_LEN);
    rej.set_reject_info_length(n as u8);
    rej.ari[..n].copy_from_slice(&ari[..n]);
    put_private(&mut rej.private_data, private_data);
    rej
}

/// A REJ of a message this side keeps no state for, as Linux `cm_issue_rej` builds it:
/// the two communication ID words of the received message swapped (for a REQ, the REJ's
/// Local Communication ID is the REQ's bytes 4..8, i.e. its vendor ID word), the
/// TransactionID echoed by the caller.
pub(super) fn issue_rej(
    rcv_word0: u32,
    rcv_word1: u32,
    message_rejected: u8,
    reason: u16,
) -> CmRej {
    build_rej(rcv_word1, rcv_word0, message_rejected, reason, &[], &[])
}

/// An MRA of `message_mraed` (`CM_MSG_REQ` or `CM_MSG_REP`) with `service_timeout`.
pub(super) fn build_mra(
    local_comm_id: u32,
    remote_comm_id: u32,
    message_mraed: u8,
    service_timeout: u8,
) -> CmMra {
    let mut mra = CmMra::zeroed();
    mra.local_comm_id.set(local_comm_id);
    mra.remote_comm_id.set(remote_comm_id);
    mra.set_message_mraed(message_mraed);
    mra.set_service_timeout(service_timeout);
    mra
}

/// An RTU.
pub(super) fn build_rtu(local_comm_id: u32, remote_comm_id: u32) -> CmRtu {
    let mut rtu = CmRtu::zeroed();
    rtu.local_comm_id.set(local_comm_id);
    rtu.remote_comm_id.set(remote_comm_id);
    rtu
}

/// A DREQ to the peer's QP `remote_qpn`.
pub(super) fn build_dreq(local_comm_id: u32, remote_comm_id: u32, remote_qpn: u32) -> CmDreq {
    let mut dreq = CmDreq::zeroed();
    dreq.local_comm_id.set(local_comm_id);
    dreq.remote_comm_id.set(remote_comm_id);
    dreq.set_remote_qpn(remote_qpn);
    dreq
}

/// A DREP.
pub(super) fn build_drep(local_comm_id: u32, remote_comm_id: u32) -> CmDrep {
    let mut drep = CmDrep::zeroed();
    drep.local_comm_id.set(local_comm_id);
    drep.remote_comm_id.set(remote_comm_id);
    drep
}
