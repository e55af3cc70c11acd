//! The nouns of the connection manager's API: connection IDs, parameters, events,
//! errors, per-connection information and counters.
use std::net::IpAddr;

use crate::verbs::Mtu;

/// A connection, named by its local communication ID (IBTA §12.6.5 "Local
/// Communication ID"): the ID this side puts in the messages it sends.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ConnId(pub u32);

/// What the active side asks for in [`Cm::connect`](super::Cm::connect) (the REQ,
/// IBTA §12.6.5, and RDMA CM's IP header).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConnectParams {
    /// The passive side's IP address (same family as the local address).
    pub dest: IpAddr,
    /// The RDMA CM port to connect to (service ID `0x0106_0000 | port`; 4420 for NVMe).
    pub dest_port: u16,
    /// The IP CM source port (any port the caller picks; it only feeds the flow label
    /// `cm_flow_label(src_port, dest_port)` and the CMA header).
    pub src_port: u16,
    /// The local RC QP number (24 bits).
    pub local_qpn: u32,
    /// The REQ's Starting PSN (24 bits). As Linux ib_cm uses it, it is the PSN this
    /// side *expects to receive* first (the local QP's `rq_psn`) and the passive side
    /// sends from (capture: REQ 0x29fa4c, the target's first packet has PSN 0x29fa4c).
    pub starting_psn: u32,
    /// RDMA READs/atomics this side accepts in flight as responder (`responder_resources`).
    pub responder_resources: u8,
    /// RDMA READs/atomics this side issues in flight (`initiator_depth`).
    pub initiator_depth: u8,
    /// Transport retry count for the QPs (3 bits, 0..=7).
    pub retry_count: u8,
    /// RNR retry count for the QPs (3 bits; 7 = infinite).
    pub rnr_retry_count: u8,
    /// Path MTU.
    pub path_mtu: Mtu,
    /// Local ACK timeout (4.096 us x 2^value, 5 bits; Linux hosts ask for 0x13).
    pub local_ack_timeout: u8,
    /// User private data, at most [`CMA_REQ_USER_PRIVATE_DATA_LEN`](crate::wire::cm::CMA_REQ_USER_PRIVATE_DATA_LEN)
    /// (56) bytes: it follows the 36-byte CMA header in the REQ's 92 bytes.
    pub private_data: Vec<u8>,
}

/// What the passive side answers in [`Cm::accept`](super::Cm::accept) (the REP,
/// IBTA §12.6.8).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AcceptParams {
    /// The local RC QP number (24 bits).
    pub local_qpn: u32,
    /// The REP's Starting PSN (24 bits): as Linux ib_cm uses it, the PSN the passive
    /// side expects to receive first (its `rq_psn`) and the active side sends from.
    pub starting_psn: u32,
    /// RDMA READs/atomics this side accepts in flight as responder.
    pub responder_resources: u8,
    /// RDMA READs/atomics this side issues in flight.
    pub initiator_depth: u8,
    /// RNR retry count the active side should use towards us (3 bits).
    pub rnr_retry_count: u8,
    /// Private data, at most [`REP_PRIVATE_DATA_LEN`](crate::wire::cm::REP_PRIVATE_DATA_LEN) (196) bytes.
    pub private_data: Vec<u8>,
}

/// What the connection manager tells the application ([`Cm::poll_event`](super::Cm::poll_event)).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CmEvent {
    /// Passive side: a REQ for a listened port arrived. The application creates a QP and
    /// calls `accept()` or `reject()`. `responder_resources` / `initiator_depth` are the
    /// active side's values (swap them for the local QP, as rdma_cm does);
    /// `private_data` is the user part after the CMA header (56 bytes, zero padded).
    ConnectRequest {
        /// The new connection (this side's communication ID).
        id: ConnId,
        /// Where the REQ came from; REP and RC traffic go there.
        remote_ip: IpAddr,
        /// The active side's IP CM source port.
        remote_port: u16,
        /// The listened port the REQ's service ID names.
        local_port: u16,
        /// The active side's QPN (the local QP's destination QPN).
        remote_qpn: u32,
        /// The REQ's Starting PSN: as Linux ib_cm uses it, the PSN the local QP *sends*
        /// from (its `sq_psn`; the active side expects it).
        remote_psn: u32,
        /// The active side's responder resources (bounds our initiator depth).
        responder_resources: u8,
        /// The active side's initiator depth (bounds our responder resources).
        initiator_depth: u8,
        /// Path MTU.
        path_mtu: Mtu,
        /// Local ACK timeout of the primary path (4.096 us x 2^value).
        local_ack_timeout: u8,
        /// Transport retry count for the local QP.
        retry_count: u8,
        /// RNR retry count the active side asks for.
        rnr_retry_count: u8,
        /// The REQ's primary path flow label (feeds the QP's UDP source port).
        flow_label: u32,
        /// Traffic class of the REQ's primary path (Linux: 0).
        traffic_class: u8,
        /// Hop limit of the REQ's primary path (Linux: 64).
        hop_limit: u8,
        /// The REQ's SRQ bit: the active side receives through a shared receive queue.
        srq: bool,
        /// Selective retransmission is negotiated: the REQ carried
        /// [`VENDOR_ID_SR_REQ`](crate::wire::cm::VENDOR_ID_SR_REQ) and this CM is
        /// configured for it ([`CmConfig::selective_retransmit`]), so the REP will carry
        /// [`VENDOR_ID_SR_REP`](crate::wire::cm::VENDOR_ID_SR_REP). Set
        /// `QpAttr::selective_retransmit` from it. Always false for a Linux peer.
        peer_selective_retransmit: bool,
        /// User private data after the CMA header, 56 bytes.
        private_data: Vec<u8>,
    },
    /// Active side: the REP arrived. The application moves its QP to RTR/RTS with these
    /// values, then calls `send_rtu(id)`. `private_data` is the REP's 196 bytes.
    ConnectReply {
        /// The connection `connect` returned.
        id: ConnId,
        /// The passive side's QPN.
        remote_qpn: u32,
        /// The REP's Starting PSN: the PSN the local QP sends from (its `sq_psn`), as
        /// Linux ib_cm uses it.
        remote_psn: u32,
        /// The passive side's responder resources.
        responder_resources: u8,
        /// The passive side's initiator depth.
        initiator_depth: u8,
        /// RNR retry count for the local QP.
        rnr_retry_count: u8,
        /// The flow label this side put in its REQ.
        flow_label: u32,
        /// The passive side's Target ACK Delay (4.096 us x 2^value; Linux rxe: 15).
        target_ack_delay: u8,
        /// Selective retransmission is negotiated: our REQ offered it and the REP
        /// carried [`VENDOR_ID_SR_REP`](crate::wire::cm::VENDOR_ID_SR_REP) (an echo of
        /// our REQ's marker, as librdmacm's `rdma_accept` sends, does not count). Set
        /// `QpAttr::selective_retransmit` from it. Always false for a Linux peer.
        peer_selective_retransmit: bool,
        /// The REP's private data, 196 bytes.
        private_data: Vec<u8>,
    },
    /// The connection is established: passive side when the RTU arrived (or the
    /// application reported traffic with `established()`), active side when it sent
    /// the RTU.
    Established {
        /// The connection.
        id: ConnId,
        /// Whether selective retransmission is negotiated (both markers exchanged).
        peer_selective_retransmit: bool,
    },
    /// The peer rejected our REQ or REP (IBTA §12.6.7); `reason` is a `CM_REJ_*` code,
    /// `private_data` the REJ's 148 bytes. The connection is gone.
    Rejected {
        /// The connection.
        id: ConnId,
        /// The REJ's Reason (`CM_REJ_*`, IBTA Table 112).
        reason: u16,
        /// The REJ's private data, 148 bytes (NVMe/RDMA: the RDMA_CM_REJECT record).
        private_data: Vec<u8>,
    },
    /// A REQ or REP went unanswered through all retries (Linux `IB_CM_REQ_ERROR` /
    /// `IB_CM_REP_ERROR`, rdma_cm `RDMA_CM_EVENT_UNREACHABLE`). The connection is gone.
    Unreachable {
        /// The connection.
        id: ConnId,
    },
    /// A REQ came from a QP (peer address and QPN) that still has connection `id` here
    /// (IBTA Vol 1 §12.9.8.4; Linux `cm_match_req`): the peer restarted, or reused the
    /// QPN, without disconnecting. The REQ was rejected with REJ stale connection (10);
    /// `id` is being disconnected (a DREQ when it was established) and
    /// [`CmEvent::Disconnected`] follows when that ends. The application may tear the
    /// old connection's resources down now: its peer is gone.
    StaleConnection {
        /// The old connection (the one the peer's QP still had).
        id: ConnId,
        /// The peer's address.
        remote_ip: IpAddr,
        /// The peer's QPN, named by both the old connection and the new REQ.
        remote_qpn: u32,
        /// The new REQ's IP CM source port, when its CMA header could be read.
        remote_port: Option<u16>,
    },
    /// The connection ended: a DREQ arrived (and was answered with a DREP), our DREQ
    /// was answered or went unanswered through all retries, or the peer rejected an
    /// established connection. The connection is in TimeWait (its local communication
    /// ID and QPN are not reused until TimeWait ends); the QP may be moved to Error.
    Disconnected {
        /// The connection.
        id: ConnId,
    },
}

/// Connection states (IBTA §12.9.5, Figure 151), as far as this CM keeps them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CmState {
    /// Active: REQ sent, waiting for REP/REJ.
    ReqSent,
    /// Active: the peer sent an MRA for our REQ (longer REQ timer).
    MraReqRcvd,
    /// Passive: REQ received, waiting for the application's accept/reject.
    ReqRcvd,
    /// Passive: REQ received and an MRA sent for it (the application takes long).
    MraReqSent,
    /// Passive: REP sent, the peer sent an MRA for it (longer REP timer).
    MraRepRcvd,
    /// Active: REP received and an MRA sent for it.
    MraRepSent,
    /// Passive: REP sent, waiting for RTU.
    RepSent,
    /// Active: REP received, waiting for the application's `send_rtu`.
    RepRcvd,
    /// Both sides: connection established.
    Established,
    /// DREQ sent, waiting for DREP.
    DreqSent,
    /// The connection is over; its local communication ID and QPN stay reserved for
    /// the TimeWait period (Linux ib_cm `IB_CM_TIMEWAIT`), and a REQ that names it gets
    /// REJ "stale connection".
    TimeWait,
}

/// Which side of the connection establishment this side is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CmRole {
    /// Sent the REQ (the host / initiator).
    Active,
    /// Received the REQ (the target).
    Passive,
}

/// A snapshot of one connection ([`Cm::conn_info`](super::Cm::conn_info)).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConnInfo {
    /// Active or passive.
    pub role: CmRole,
    /// Where the connection stands.
    pub state: CmState,
    /// The peer's address.
    pub remote_ip: IpAddr,
    /// The peer's communication ID, 0 until known.
    pub remote_comm_id: u32,
    /// The peer's QPN, 0 until known.
    pub remote_qpn: u32,
    /// The local QPN, 0 until known (passive side: until `accept`).
    pub local_qpn: u32,
    /// The primary path flow label (the QP's UDP source port comes from it).
    pub flow_label: u32,
    /// This side's RDMA CM port (passive: the listened port; active: the IP CM source port).
    pub local_port: u16,
    /// The peer's RDMA CM port.
    pub remote_port: u16,
    /// Whether selective retransmission is negotiated (both markers exchanged).
    pub peer_selective_retransmit: bool,
}

impl ConnInfo {
    /// The UDP source port of the connection's RC packets, from the flow label as Linux
    /// rxe derives it (`rdma_get_udp_sport`).
    pub fn udp_sport(&self) -> u16 {
        crate::wire::udp_sport_from_flow_label(self.flow_label)
    }
}

/// Tunables of one [`Cm`](super::Cm); the defaults are Linux rdma_cm's / rxe's values.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CmConfig {
    /// Local and remote CM Response Timeout put in our REQs (4.096 us x 2^value; 5
    /// bits). Default 20 (4.3 s, Linux `CMA_CM_RESPONSE_TIMEOUT`). The peer resends its
    /// REP every `2^(value-8)` ms; our REQ timer is derived from it as ib_cm does.
    pub cm_response_timeout: u8,
    /// Max CM Retries put in our REQs (4 bits): how often each side resends a REQ, REP
    /// or DREQ. Default 15 (Linux `CMA_MAX_CM_RETRIES`).
    pub max_cm_retries: u8,
    /// Our CA ACK delay (Target ACK Delay in REPs; 5 bits). Default 15, as Linux rxe.
    pub ca_ack_delay: u8,
    /// Service Timeout of the MRA sent for a duplicate REQ or REP while the application
    /// has not answered (5 bits). Default 24 (67 s), rdma_cm's `CMA_CM_MRA_SETTING`.
    pub mra_service_timeout: u8,
    /// Put the selective-retransmission markers in our REQs and REPs
    /// ([`VENDOR_ID_SR_REQ`](crate::wire::cm::VENDOR_ID_SR_REQ) /
    /// [`VENDOR_ID_SR_REP`](crate::wire::cm::VENDOR_ID_SR_REP)). Default true.
    pub selective_retransmit: bool,
}

impl Default for CmConfig {
    fn default() -> Self {
        CmConfig {
            cm_response_timeout: 20,
            max_cm_retries: 15,
            ca_ack_delay: 15,
            mra_service_timeout: 24,
            selective_retransmit: true,
        }
    }
}

/// Counters of the connection manager ([`Cm::stats`](super::Cm::stats)).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CmStats {
    /// MADs passed to `handle_mad`.
    pub mads_received: u64,
    /// MADs dropped as malformed (short, wrong version/class/method).
    pub malformed: u64,
    /// Well-formed MADs of a CM attribute this CM does not implement (SIDR, LAP, ...).
    pub unsupported: u64,
    /// Messages naming no known connection, or out of place in its state.
    pub unmatched: u64,
    /// Duplicate REQs and REPs seen.
    pub duplicates: u64,
    /// REQ/REP/DREQ retransmissions.
    pub retransmits: u64,
    /// MADs queued for transmission.
    pub mads_sent: u64,
    /// MRAs sent (explicit, or for a duplicate REQ/REP while the application decides).
    pub mras_sent: u64,
    /// REJs "stale connection" sent.
    pub stale_rejects: u64,
    /// Connections that entered TimeWait.
    pub timewaits: u64,
}

/// Why an application call to the connection manager failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CmError {
    /// `listen` on a port already listened on.
    #[error("port {0} is already listened on")]
    AlreadyListening(u16),
    /// The connection does not exist (never did, or it has been torn down).
    #[error("no connection {0:?}")]
    UnknownConnection(ConnId),
    /// The call does not fit the connection's state.
    #[error("connection {id:?} is in state {state:?}; this call needs {expected}")]
    InvalidState {
        id: ConnId,
        state: CmState,
        expected: &'static str,
    },
    /// Private data longer than the message allows.
    #[error("private data of {len} bytes exceeds the {max}-byte limit")]
    PrivateDataTooLong { len: usize, max: usize },
    /// The destination's address family differs from the local address's.
    #[error("destination {dest} is not of the local address family ({local})")]
    AddressFamilyMismatch { local: IpAddr, dest: IpAddr },
    /// The local QPN belongs to a connection still in TimeWait (IBTA §12.9.8.4.3): wait
    /// for TimeWait to end or use another QP.
    #[error("QPN {0:#x} is still in TimeWait")]
    QpnInTimeWait(u32),
    /// A parameter out of its wire range (QPN or PSN over 24 bits, retry counts over 3
    /// bits, ACK timeout over 5 bits).
    #[error("invalid parameter: {0}")]
    InvalidParameter(&'static str),
}

/// The name of a CM REJ reason (IBTA Vol 1 §12.6.7.2, Table 112; Linux
/// `enum ib_cm_rej_reason`), in words for messages: e.g. 8 "invalid service ID",
/// 10 "stale connection", 28 "consumer defined". Unassigned values: "unknown reason".
pub fn rej_reason_name(reason: u16) -> &'static str {
    match reason {
        1 => "no QP available",
        2 => "no EEC available",
        3 => "no resources available",
        4 => "timeout",
        5 => "unsupported request",
        6 => "invalid communication ID",
        7 => "invalid communication instance",
        8 => "invalid service ID",
        9 => "invalid transport service type",
        10 => "stale connection",
        11 => "RDC does not exist",
        12 => "primary remote GID rejected",
        13 => "primary remote LID rejected",
        14 => "invalid primary SL",
        15 => "invalid primary traffic class",
        16 => "invalid primary hop limit",
        17 => "invalid primary packet rate",
        18 => "alternate remote GID rejected",
        19 => "alternate remote LID rejected",
        20 => "invalid alternate SL",
        21 => "invalid alternate traffic class",
        22 => "invalid alternate hop limit",
        23 => "invalid alternate packet rate",
        24 => "port redirection (CM)",
        25 => "port redirection",
        26 => "invalid path MTU",
        27 => "insufficient responder resources",
        28 => "consumer defined",
        29 => "invalid RNR retry count",
        30 => "duplicate local communication ID",
        31 => "invalid class version",
        32 => "invalid primary flow label",
        33 => "invalid alternate flow label",
        35 => "vendor option not supported",
        _ => "unknown reason",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::cm::*;

    #[test]
    fn rej_reasons_have_names() {
        assert_eq!(
            rej_reason_name(CM_REJ_INVALID_SERVICE_ID),
            "invalid service ID"
        );
        assert_eq!(rej_reason_name(CM_REJ_STALE_CONN), "stale connection");
        assert_eq!(rej_reason_name(CM_REJ_CONSUMER_DEFINED), "consumer defined");
        assert_eq!(
            rej_reason_name(CM_REJ_VENDOR_OPTION_NOT_SUPPORTED),
            "vendor option not supported"
        );
        assert_eq!(rej_reason_name(34), "unknown reason");
    }
}
