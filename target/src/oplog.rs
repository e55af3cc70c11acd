//! The operator's log: what the target tells whoever runs it, as structured `tracing`
//! events (see [`crate::logging`] for the output formats). Every connection and queue
//! event names the host and the queue with the same fields:
//!
//! | field | what |
//! |---|---|
//! | `host_addr` | the host's IP address (where its CM REQ came from) |
//! | `host_qpn` | the host's QP number (hex) |
//! | `qpn` | the target's QP number for the queue (hex) |
//! | `qid` | NVMe queue ID (0: admin queue) |
//! | `cntlid` | controller ID, once the Fabrics Connect has named one |
//! | `hostnqn`, `subnqn` | host and subsystem NQN, once the Fabrics Connect is read |
//! | `reason` | a refusal or an end, in words |
//!
//! Lines about a queue or a controller are also written inside its tracing span,
//! `controller{cntlid, hostnqn, subnqn}` (the controller's, [`Controller::span`]) and
//! within it `queue{qid, qpn, host_addr}`: lines that name neither in their own fields
//! (an I/O error, a QP's counters at its end) still say whose they are.
//!
//! Levels: `info` for what goes as expected (a connection accepted, a controller
//! created, a queue the host disconnected), `warn` for what an operator may have to act
//! on (a refused host, a stale connection, a Keep Alive expiry, a queue torn down after
//! a transport error).
use std::fmt;
use std::net::IpAddr;

use nvme::fabrics::{
    ConnectCommand, ConnectData, ConnectInvalidParameter, ParameterLocation,
    CONNECT_DATA_CNTLID_OFFSET, CONNECT_DATA_HOSTNQN_OFFSET, CONNECT_DATA_SUBNQN_OFFSET,
    CONNECT_SQE_QID_OFFSET, CONNECT_SQE_SQSIZE_OFFSET,
};
use nvme::status::{CommandSpecificStatus, GenericStatus, Status};
use nvme::{RdmaCmRejectStatus, RdmaCmRequest, Sqe};
use zerocopy::FromBytes;

use crate::controller::Controller;
use crate::fabrics::ConnectOutcome;
use nvme::NVMF_DISCOVERY_NQN;

/// A 24-bit number (QPN) as it is usually written: `0x1a2b3c`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Hex(pub u32);

impl fmt::Display for Hex {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:#x}", self.0)
    }
}

/// Who is at the other end of a queue, and which queue it is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QueuePeer {
    /// The host's IP address.
    pub host_addr: IpAddr,
    /// The host's QPN.
    pub host_qpn: u32,
    /// The target's QPN.
    pub qpn: u32,
    /// The NVMe queue ID (from the CM request's private data).
    pub qid: u16,
}

/// Why a queue ended, and who started it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum QueueEnd {
    /// The host disconnected (a CM DREQ, or a REJ of the established connection).
    HostDisconnected,
    /// The host never confirmed our accept (the REP went unanswered: no RTU).
    HostUnreachable,
    /// The host rejected our accept (REJ of the REP).
    HostRejected,
    /// The controller's Keep Alive timer expired (the host stopped sending Keep Alive).
    KeepAliveExpired,
    /// The queue's QP went to the error state (a transport failure: retries
    /// exhausted, a remote access or protocol error); the target disconnected it.
    QpError,
    /// A new connection request came from the same host QP: the host restarted
    /// without disconnecting; the target disconnected the old queue.
    StaleConnection,
    /// The CM accept could not be sent.
    AcceptFailed,
    /// The control thread gave up waiting for the poll group to create the queue.
    SetupAbandoned,
    /// The host deleted the I/O queue with a Fabrics Disconnect command (NVMe Base
    /// 2.x §6.4); the target then disconnected its connection.
    HostFabricsDisconnect,
    /// The target is shutting down (SIGTERM/SIGINT): its commands were answered first.
    TargetShutdown,
    /// In-band authentication (DH-HMAC-CHAP) failed on the queue: the AUTH_Failure1
    /// (or the CQE of the host's AUTH_Failure2) was sent, then the target disconnected.
    AuthenticationFailed,
    /// A reload removed the queue's subsystem ([`crate::reload`]).
    SubsystemRemoved,
    /// A reload dropped the controller's host from its subsystem's allowed hosts (or
    /// turned `allow_any_host` off).
    HostNotAllowed,
    /// A reload unlinked the controller's subsystem from the port it connected
    /// through.
    SubsystemUnlinked,
    /// A reload removed the listen entry (port) the queue connected through.
    PortRemoved,
}

impl QueueEnd {
    /// Who started the end: `"host"` or `"target"`.
    pub fn initiator(self) -> &'static str {
        match self {
            QueueEnd::HostDisconnected
            | QueueEnd::HostRejected
            | QueueEnd::HostFabricsDisconnect => "host",
            _ => "target",
        }
    }

    /// The cause in words.
    pub fn words(self) -> &'static str {
        match self {
            QueueEnd::HostDisconnected => "the host disconnected",
            QueueEnd::HostUnreachable => {
                "the host did not confirm the connection (no RTU for our accept)"
            }
            QueueEnd::HostRejected => "the host rejected our accept",
            QueueEnd::KeepAliveExpired => "the controller's Keep Alive timer expired",
            QueueEnd::QpError => {
                "its QP failed (transport error: retries exhausted or a protocol error); the target disconnected it"
            }
            QueueEnd::StaleConnection => {
                "the host connected again from the same QP (it restarted without disconnecting); the target disconnected the old queue"
            }
            QueueEnd::AcceptFailed => "the CM accept could not be sent",
            QueueEnd::SetupAbandoned => "the queue was not ready in time",
            QueueEnd::HostFabricsDisconnect => {
                "the host deleted the queue (Fabrics Disconnect); the target disconnected it"
            }
            QueueEnd::TargetShutdown => {
                "the target is shutting down; the queue's commands were answered first"
            }
            QueueEnd::AuthenticationFailed => {
                "in-band authentication (DH-HMAC-CHAP) failed; the target answered, then \
                 disconnected the queue"
            }
            QueueEnd::SubsystemRemoved => {
                "a reload of the configuration removed its subsystem; the target disconnected it"
            }
            QueueEnd::HostNotAllowed => {
                "a reload of the configuration no longer allows its host on the subsystem; the \
                 target answered its commands in flight, then disconnected it"
            }
            QueueEnd::SubsystemUnlinked => {
                "a reload of the configuration unlinked its subsystem from the port; the target \
                 answered its commands in flight, then disconnected it"
            }
            QueueEnd::PortRemoved => {
                "a reload of the configuration removed the port it connected through; the \
                 target disconnected it"
            }
        }
    }

    /// Whether an operator may have to act (logged at `warn`, else `info`).
    pub fn is_trouble(self) -> bool {
        !matches!(
            self,
            QueueEnd::HostDisconnected
                | QueueEnd::HostFabricsDisconnect
                | QueueEnd::TargetShutdown
                | QueueEnd::SubsystemRemoved
                | QueueEnd::HostNotAllowed
                | QueueEnd::SubsystemUnlinked
                | QueueEnd::PortRemoved
        )
    }
}

/// A queue's in-band authentication (DH-HMAC-CHAP, NVMe Base 2.x §8.13) ended:
/// success at info, failure at warn with the cause and the fix (the Failure1
/// explanation sent, or the host's Failure2). Nothing while it is under way.
pub fn authentication(peer: &QueuePeer, progress: &dhchap::Progress) {
    match progress {
        dhchap::Progress::Pending => {}
        dhchap::Progress::Authenticated => tracing::info!(
            host_addr = %peer.host_addr,
            qpn = %Hex(peer.qpn),
            qid = peer.qid,
            "host authenticated (DH-HMAC-CHAP)"
        ),
        dhchap::Progress::Failed(f) => tracing::warn!(
            host_addr = %peer.host_addr,
            qpn = %Hex(peer.qpn),
            qid = peer.qid,
            explanation = %f.explanation,
            "authentication (DH-HMAC-CHAP) failed: {}; the queue is refused and disconnected \
             (check the host's secret against this subsystem's host_keys entry)",
            f.detail
        ),
    }
}

/// An RDMA CM connection request was accepted: the queue's QP is ready and the REP
/// is on its way. `sq_size` is the negotiated SQ size (the accept's CRQSIZE), `ord`
/// the RDMA READs the target keeps in flight, `cntlid` the CM request's controller ID
/// (0 for the admin queue, and then not logged).
pub fn cm_accepted(peer: &QueuePeer, sq_size: u32, ord: u8, selective: bool, cntlid: u16) {
    tracing::info!(
        host_addr = %peer.host_addr,
        host_qpn = %Hex(peer.host_qpn),
        qpn = %Hex(peer.qpn),
        qid = peer.qid,
        cntlid = (cntlid != 0).then_some(cntlid),
        sq_size,
        ord,
        selective_retransmit = selective,
        "RDMA CM connection accepted"
    );
}

/// An RDMA CM connection request was refused with REJ "consumer defined" carrying
/// `status` (NVMe RDMA Transport 1.x §3.3); `private_data` is the request's user
/// private data, `max_io_queues` / `max_queue_size` the limits it was checked against.
pub fn cm_refused(
    host_addr: IpAddr,
    host_qpn: u32,
    private_data: &[u8],
    status: RdmaCmRejectStatus,
    max_io_queues: u16,
    max_queue_size: u16,
) {
    let req = RdmaCmRequest::parse(private_data).ok();
    let reason = cm_refusal_words(req.as_ref(), status, max_io_queues, max_queue_size);
    tracing::warn!(
        host_addr = %host_addr,
        host_qpn = %Hex(host_qpn),
        qid = req.as_ref().map(|r| r.qid()),
        cntlid = req.as_ref().map(|r| r.cntlid()),
        status = status.name(),
        reason = %reason,
        "refused an RDMA CM connection request"
    );
}

/// The refusal of a CM request in words, naming the limit that was exceeded.
pub fn cm_refusal_words(
    req: Option<&RdmaCmRequest>,
    status: RdmaCmRejectStatus,
    max_io_queues: u16,
    max_queue_size: u16,
) -> String {
    use RdmaCmRejectStatus as S;
    let qid = req.map_or(0, |r| r.qid());
    match status {
        S::InvalidLen => {
            "the NVMe/RDMA private data is too short (not an NVMe/RDMA host?)".to_string()
        }
        S::InvalidRecfmt => format!(
            "unsupported record format RECFMT {} (only 0 is defined)",
            req.map_or(0, |r| r.recfmt())
        ),
        S::InvalidQid => {
            format!("queue ID {qid} is above the {max_io_queues} I/O queues this target allows")
        }
        S::InvalidHsqsize => format!(
            "queue size {} is outside 2..={} (the target's {} queue limit)",
            req.map_or(0, |r| r.sq_entries()),
            if qid == 0 {
                u32::from(nvme::NVME_AQ_DEPTH)
            } else {
                u32::from(max_queue_size)
            },
            if qid == 0 { "admin" } else { "I/O" }
        ),
        S::InvalidHrqsize => format!(
            "HRQSIZE {} is smaller than the queue size {}",
            req.map_or(0, |r| r.hrqsize()),
            req.map_or(0, |r| r.sq_entries())
        ),
        S::NoResources => "no resources: the queue's QP could not be created".to_string(),
        S::InvalidIrd => {
            "the host accepts no RDMA READ (IRD 0), which the target needs for writes".to_string()
        }
        S::InvalidOrd => "invalid ORD".to_string(),
        S::InvalidCntlid => format!(
            "controller {} does not exist (its admin queue is gone?)",
            req.map_or(0, |r| r.cntlid())
        ),
    }
}

/// A connection request came from a host QP that still has a connection here: the CM
/// refused it (REJ stale connection) and is disconnecting the old one (`old`: the old
/// connection's queue, if the target still had one).
pub fn stale_connection(
    host_addr: IpAddr,
    host_qpn: u32,
    host_port: Option<u16>,
    old: Option<&QueuePeer>,
) {
    tracing::warn!(
        host_addr = %host_addr,
        host_qpn = %Hex(host_qpn),
        host_port,
        qid = old.map(|o| o.qid),
        qpn = old.map(|o| display(Hex(o.qpn))),
        reason = "stale connection: that host QP still has a connection here (the host restarted without disconnecting?); the old connection is being disconnected, the host may retry",
        "refused an RDMA CM connection request"
    );
}

/// A queue ended (its QP is destroyed now): `why` says who started it and why;
/// `ctrl` is the queue's controller, if its Fabrics Connect had succeeded.
pub fn queue_closed(peer: &QueuePeer, ctrl: Option<&Controller>, why: QueueEnd) {
    macro_rules! closed {
        ($lvl:ident) => {
            tracing::$lvl!(
                host_addr = %peer.host_addr,
                host_qpn = %Hex(peer.host_qpn),
                qpn = %Hex(peer.qpn),
                qid = peer.qid,
                cntlid = ctrl.map(|c| c.cntlid),
                hostnqn = ctrl.map(|c| display(&c.hostnqn)),
                subnqn = ctrl.map(|c| display(&c.subsys.nqn)),
                by = why.initiator(),
                reason = why.words(),
                "queue disconnected"
            )
        };
    }
    if why.is_trouble() {
        closed!(warn)
    } else {
        closed!(info)
    }
}

/// A controller's Keep Alive timer expired: the target tears its queues down
/// (`queues` of them), as nvmet does.
pub fn keep_alive_expired(ctrl: &Controller, queues: usize) {
    tracing::warn!(
        cntlid = ctrl.cntlid,
        hostnqn = %ctrl.hostnqn,
        subnqn = %ctrl.subsys.nqn,
        kato_ms = ctrl.kato_ms(),
        queues,
        "Keep Alive timer expired: no Keep Alive from the host within KATO; tearing the controller down"
    );
}

/// Poll group `poll_group`'s SRQ ran low (its limit event) and stayed low: only
/// `posted` of its `srq_depth` receive buffers are posted, commands in flight on its
/// `queues` queues hold the rest, so hosts' next capsules meet RNR NAKs and wait
/// (`events`: the group's SRQ limit events so far). Logged at most every 10 s.
pub fn receive_buffers_low(
    poll_group: u32,
    posted: u32,
    srq_depth: u32,
    queues: usize,
    events: u64,
) {
    tracing::warn!(
        poll_group,
        posted,
        srq_depth,
        queues,
        srq_limit_events = events,
        reason = "commands in flight hold nearly every receive buffer of the poll group's shared receive queue; hosts' next commands are delayed (RNR NAK) until some complete: raise srq_depth, add poll_groups, or lower max_queue_size",
        "receive buffers low (SRQ limit reached)"
    );
}

/// Poll group `poll_group` stopped (target shutdown), on provider `provider`: how often
/// it slept idle on its CQ's completion events, and its SRQ limit events and refills
/// (see [`crate::rdma::PollGroupCounters`]).
pub fn poll_group_stopped(
    poll_group: u32,
    provider: &'static str,
    counters: &crate::rdma::PollGroupCounters,
) {
    use std::sync::atomic::Ordering::Relaxed;
    tracing::info!(
        poll_group,
        provider,
        idle_sleeps = counters.sleeps.load(Relaxed),
        srq_limit_events = counters.srq_limit_events.load(Relaxed),
        recv_refills = counters.recv_refills.load(Relaxed),
        srq_qps = counters.srq_qps.load(Relaxed),
        admin_own_buffers = counters.admin_own_buffers.load(Relaxed),
        "poll group stopped"
    );
}

/// The outcome of a Fabrics Connect on queue `peer` (`sqe` the command, `data` its
/// 1024 bytes of Connect data): `info` when a controller was created or an I/O queue
/// attached, `warn` with the reason in words when refused.
pub fn fabrics_connect(peer: &QueuePeer, sqe: &Sqe, data: &[u8], outcome: &ConnectOutcome) {
    let cmd = ConnectCommand::from_sqe(sqe).ok();
    let d = data
        .get(..core::mem::size_of::<ConnectData>())
        .and_then(|b| ConnectData::read_from_bytes(b).ok());
    let subnqn = d.as_ref().and_then(|d| d.subnqn().ok()).unwrap_or("");
    let hostnqn = d.as_ref().and_then(|d| d.hostnqn().ok()).unwrap_or("");
    let qid = cmd.map_or(peer.qid, |c| c.qid());
    let sq_size = cmd.map(|c| c.queue_entries());
    match outcome {
        ConnectOutcome::Accepted { ctrl, .. } => tracing::info!(
            host_addr = %peer.host_addr,
            host_qpn = %Hex(peer.host_qpn),
            qpn = %Hex(peer.qpn),
            qid,
            cntlid = ctrl.cntlid,
            hostnqn = %ctrl.hostnqn,
            subnqn = %ctrl.subsys.nqn,
            sq_size,
            kato_ms = (qid == 0).then(|| ctrl.kato_ms()),
            "{}",
            if qid == 0 {
                "controller created (Fabrics Connect of the admin queue)"
            } else {
                "I/O queue connected"
            }
        ),
        ConnectOutcome::Refused { status, dw0 } => {
            let cntlid = d.as_ref().map(|d| d.cntlid());
            let reason = connect_refusal_words(*status, *dw0, qid, (subnqn, hostnqn), cntlid);
            tracing::warn!(
                host_addr = %peer.host_addr,
                host_qpn = %Hex(peer.host_qpn),
                qpn = %Hex(peer.qpn),
                qid,
                cntlid,
                hostnqn = %hostnqn,
                subnqn = %subnqn,
                status = %status,
                reason = %reason,
                "refused a Fabrics Connect"
            )
        }
    }
}

/// A refused Fabrics Connect in words, from its status and DW0 (IATTR/IPO, NVMe over
/// Fabrics 1.1 §3.3) as [`crate::fabrics::connect`] sets them, for the Connect of
/// `hostnqn` to `subnqn`; a refusal the operator can lift names the configuration key.
pub fn connect_refusal_words(
    status: Status,
    dw0: u32,
    qid: u16,
    (subnqn, hostnqn): (&str, &str),
    cntlid: Option<u16>,
) -> String {
    use CommandSpecificStatus as C;
    let p = ConnectInvalidParameter::from_dw0(dw0);
    match status.as_command_specific() {
        Some(C::ConnectInvalidParameters) => match (p.location, p.offset) {
            (ParameterLocation::Data, CONNECT_DATA_SUBNQN_OFFSET)
                if subnqn == NVMF_DISCOVERY_NQN =>
            {
                "the discovery subsystem is not served here (discovery = false)".to_string()
            }
            (ParameterLocation::Data, CONNECT_DATA_SUBNQN_OFFSET) => {
                format!("unknown subsystem NQN {subnqn:?}")
            }
            (ParameterLocation::Data, CONNECT_DATA_HOSTNQN_OFFSET) => {
                "malformed host NQN".to_string()
            }
            (ParameterLocation::Data, CONNECT_DATA_CNTLID_OFFSET) if qid == 0 => format!(
                "the admin queue must ask for controller ID 0xffff (dynamic model), not {:#x}",
                cntlid.unwrap_or(0)
            ),
            (ParameterLocation::Data, CONNECT_DATA_CNTLID_OFFSET) => format!(
                "no controller {} of this subsystem for this host NQN",
                cntlid.unwrap_or(0)
            ),
            (ParameterLocation::Command, CONNECT_SQE_QID_OFFSET) => {
                format!("queue ID {qid} is above the I/O queues granted to this controller")
            }
            (ParameterLocation::Command, CONNECT_SQE_SQSIZE_OFFSET) => {
                "queue size (SQSIZE) is 0 or above the controller's maximum".to_string()
            }
            _ => format!("invalid parameter (DW0 {dw0:#010x})"),
        },
        Some(C::ConnectInvalidHost) => format!(
            "host NQN {hostnqn:?} is not allowed by subsystem {subnqn}: add it to that \
             subsystem's `hosts` list in the configuration ([[subsystems]] nqn = \
             {subnqn:?}, hosts = [{hostnqn:?}]), or set `allow_any_host = true` there"
        ),
        Some(C::ConnectControllerBusy) => {
            "the queue is already connected, or no controller ID is free".to_string()
        }
        Some(C::ConnectIncompatibleFormat) => "unsupported Connect record format".to_string(),
        _ if status == Status::generic(GenericStatus::CommandSequenceError).with_dnr() => {
            "the controller is not enabled yet, or this queue ID is already connected".to_string()
        }
        _ if status == Status::generic(GenericStatus::DataSglLengthInvalid).with_dnr() => {
            "the Connect data is shorter than 1024 bytes".to_string()
        }
        _ => status.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connect_refusals_in_words() {
        let invalid = ConnectInvalidParameter::status();
        let sub = ConnectInvalidParameter::SUBNQN.to_dw0();
        assert_eq!(
            connect_refusal_words(invalid, sub, 0, ("nqn.x", "nqn.h"), Some(0xFFFF)),
            "unknown subsystem NQN \"nqn.x\""
        );
        assert!(
            connect_refusal_words(invalid, sub, 0, (NVMF_DISCOVERY_NQN, "nqn.h"), None)
                .contains("discovery")
        );
        let host = Status::command_specific(CommandSpecificStatus::ConnectInvalidHost).with_dnr();
        let hostnqn = ConnectInvalidParameter::HOSTNQN.to_dw0();
        let w = connect_refusal_words(host, hostnqn, 0, ("nqn.x", "nqn.h:1"), None);
        assert!(
            w.contains("\"nqn.h:1\" is not allowed by subsystem nqn.x"),
            "{w}"
        );
        assert!(
            w.contains("hosts = [\"nqn.h:1\"]") && w.contains("allow_any_host"),
            "{w}"
        );
        let qid = ConnectInvalidParameter::QID.to_dw0();
        assert!(
            connect_refusal_words(invalid, qid, 9, ("nqn.x", "nqn.h"), Some(1))
                .contains("queue ID 9")
        );
    }

    #[test]
    fn cm_refusals_name_the_limit() {
        let mut pd = vec![0u8; 32];
        pd[2] = 1; // qid 1
        pd[4] = 0; // hrqsize 512 (0x200)
        pd[5] = 2;
        pd[6] = 0xFF; // hsqsize 511 (0's based)
        pd[7] = 1;
        let req = RdmaCmRequest::parse(&pd).unwrap();
        let w = cm_refusal_words(Some(&req), RdmaCmRejectStatus::InvalidHsqsize, 64, 128);
        assert_eq!(
            w,
            "queue size 512 is outside 2..=128 (the target's I/O queue limit)"
        );
        let w = cm_refusal_words(Some(&req), RdmaCmRejectStatus::InvalidQid, 0, 128);
        assert!(
            w.contains("queue ID 1") && w.contains("0 I/O queues"),
            "{w}"
        );
    }

    #[test]
    fn queue_ends_say_who() {
        assert_eq!(QueueEnd::HostDisconnected.initiator(), "host");
        assert!(!QueueEnd::HostDisconnected.is_trouble());
        assert_eq!(QueueEnd::KeepAliveExpired.initiator(), "target");
        assert!(QueueEnd::QpError.is_trouble());
        assert_eq!(Hex(0x1a2b).to_string(), "0x1a2b");
    }
}
