//! The shapes of an rdma_cm-style connection API that brings a QP to RTS and carries
//! private data, shared by the providers' connection managers: what a passive side
//! knows of a request ([`ConnRequest`]), what its accept needs ([`AcceptToken`]), what
//! an active side asks for ([`ConnectRequestParams`]) and gets ([`ActiveConn`]), and why
//! a connection was not made ([`ConnError`]).
//!
//! The timeouts and errors mirror the soft provider's CM (`crate::cm`, Linux ib_cm's
//! timers) and librdmacm's events (`RDMA_CM_EVENT_REJECTED`, `_UNREACHABLE`,
//! `_CONNECT_ERROR`, `_ADDR_ERROR`, `_ROUTE_ERROR`).
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use crossbeam::channel::Receiver;

use crate::cm::{CmError, CmEvent, ConnId};
use crate::verbs::{Mtu, Qp, VerbsError};

/// IBTA Table 112 REJ reason 10, "stale connection": the passive side still holds a
/// connection with the REQ's QPN or communication ID (in TimeWait). The caller may
/// retry with another QP, a bounded number of times.
pub const CM_REJ_STALE_CONN: u16 = 10;
/// IBTA Table 112 REJ reason 28, "consumer defined": the rejecting application said no
/// (`rdma_reject`); its private data says why (NVMe/RDMA: the RDMA_CM_REJECT record).
pub const CM_REJ_CONSUMER_DEFINED: u16 = 28;

/// The IBTA local ACK timeout (4.096 us x 2^17 = 537 ms, IBTA Vol 1 §9.7.6.1.3) of QPs
/// the soft provider's connection manager brings up: the passive side's always, the
/// active side's when [`ConnectRequestParams::local_ack_timeout`] is `None`. With retry
/// count 7 a silent peer fails the QP after about 4.3 s; loss is repaired sooner by the
/// adaptive retransmission timer, which this only caps. Shorter values (16.8 ms) killed
/// connections to Linux peers in emulated VMs, which stall for more than 8 x 16.8 ms.
pub const DEFAULT_ACK_TIMEOUT: u8 = 17;

/// A connection request as the passive side sees it: the fields of
/// [`CmEvent::ConnectRequest`], kept to create and accept the QP.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConnRequest {
    /// The new connection.
    pub id: ConnId,
    /// The active side's address.
    pub remote_ip: IpAddr,
    /// The active side's RDMA CM source port.
    pub remote_port: u16,
    /// The listened RDMA CM port.
    pub local_port: u16,
    /// The active side's QPN.
    pub remote_qpn: u32,
    /// The REQ's Starting PSN (the local QP's `sq_psn`; 0 where librdmacm hides it).
    pub remote_psn: u32,
    /// The active side's responder resources (bounds our initiator depth, ORD).
    pub responder_resources: u8,
    /// The active side's initiator depth (bounds our responder resources, IRD).
    pub initiator_depth: u8,
    /// Path MTU.
    pub path_mtu: Mtu,
    /// Local ACK timeout of the path (4.096 us x 2^value; 0 where librdmacm hides it).
    pub local_ack_timeout: u8,
    /// Transport retry count the active side asks for.
    pub retry_count: u8,
    /// RNR retry count the active side asks for.
    pub rnr_retry_count: u8,
    /// Flow label of the path (0 where librdmacm hides it).
    pub flow_label: u32,
    /// Traffic class of the path.
    pub traffic_class: u8,
    /// Hop limit of the path.
    pub hop_limit: u8,
    /// The active side receives through an SRQ.
    pub srq: bool,
    /// Selective retransmission negotiated (soft provider between peers of this project).
    pub peer_selective_retransmit: bool,
    /// User private data after the CMA header (56 bytes for a REQ from librdmacm).
    pub private_data: Vec<u8>,
}

impl ConnRequest {
    /// The request of a [`CmEvent::ConnectRequest`]; `None` for any other event.
    pub fn from_event(ev: &CmEvent) -> Option<ConnRequest> {
        match ev {
            CmEvent::ConnectRequest {
                id,
                remote_ip,
                remote_port,
                local_port,
                remote_qpn,
                remote_psn,
                responder_resources,
                initiator_depth,
                path_mtu,
                local_ack_timeout,
                retry_count,
                rnr_retry_count,
                flow_label,
                traffic_class,
                hop_limit,
                srq,
                peer_selective_retransmit,
                private_data,
            } => Some(ConnRequest {
                id: *id,
                remote_ip: *remote_ip,
                remote_port: *remote_port,
                local_port: *local_port,
                remote_qpn: *remote_qpn,
                remote_psn: *remote_psn,
                responder_resources: *responder_resources,
                initiator_depth: *initiator_depth,
                path_mtu: *path_mtu,
                local_ack_timeout: *local_ack_timeout,
                retry_count: *retry_count,
                rnr_retry_count: *rnr_retry_count,
                flow_label: *flow_label,
                traffic_class: *traffic_class,
                hop_limit: *hop_limit,
                srq: *srq,
                peer_selective_retransmit: *peer_selective_retransmit,
                private_data: private_data.clone(),
            }),
            _ => None,
        }
    }
}

/// What the passive side's accept sends, decided when its QP was created
/// (`create_accept_qp`): the local QPN, the PSN it expects, and the RDMA READ depths
/// already capped by the device and the request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AcceptToken {
    /// The local QP's number.
    pub qpn: u32,
    /// The PSN the local QP expects to receive first (its `rq_psn`; librdmacm chooses
    /// it itself, then 0 here).
    pub starting_psn: u32,
    /// Responder resources (IRD) offered: min(device `max_qp_rd_atom`, the request's
    /// initiator depth).
    pub responder_resources: u8,
    /// Initiator depth (ORD) used: min(wanted, device `max_qp_init_rd_atom`, the
    /// request's responder resources).
    pub initiator_depth: u8,
    /// RNR retry count the active side should use towards us (3 bits; 7 = infinite).
    pub rnr_retry_count: u8,
}

/// What the active side asks for when it connects.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConnectRequestParams {
    /// The passive side's IP address and RDMA CM port (4420 for NVMe/RDMA).
    pub dest: SocketAddr,
    /// RDMA READs this side accepts in flight as responder (IRD); capped by the device.
    pub responder_resources: u8,
    /// RDMA READs this side issues in flight (ORD); capped by the device.
    pub initiator_depth: u8,
    /// Transport retries (3 bits).
    pub retry_count: u8,
    /// RNR retries (3 bits; 7 = infinite).
    pub rnr_retry_count: u8,
    /// Local ACK timeout (4.096 us x 2^value, 5 bits); `None` leaves the provider's
    /// default (librdmacm: the path record's, rdma_cm's `CMA_IBOE_PACKET_LIFETIME`).
    pub local_ack_timeout: Option<u8>,
    /// User private data of the REQ, at most 56 bytes (RDMA CM's TCP port space).
    pub private_data: Vec<u8>,
    /// The whole connect (address and route resolution, REQ, REP) must finish within
    /// this; then it is abandoned with [`ConnError::Timeout`]. The soft provider's
    /// host uses 5 s.
    pub timeout: Duration,
}

/// An established active connection.
#[derive(Debug)]
pub struct ActiveConn {
    /// The connection (pass it to `disconnect`).
    pub id: ConnId,
    /// The connection's QP, in RTS.
    pub qp: Qp,
    /// The REP's private data (196 bytes from a Linux peer; NVMe/RDMA: RDMA_CM_ACCEPT).
    pub rep_private_data: Vec<u8>,
    /// The passive side's responder resources (bounds our ORD).
    pub responder_resources: u8,
    /// The passive side's initiator depth.
    pub initiator_depth: u8,
    /// Later events of the connection ([`CmEvent::Disconnected`]).
    pub events: Receiver<CmEvent>,
}

/// Why a connection could not be made or handled.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ConnError {
    /// The passive side rejected the request (`RDMA_CM_EVENT_REJECTED`): `reason` is the
    /// REJ's (IBTA Table 112; 28 = consumer defined), `private_data` its 148 bytes.
    #[error("connection rejected (CM REJ reason {reason})")]
    Rejected { reason: u16, private_data: Vec<u8> },
    /// REJ reason 10, stale connection: retry with another QP, a bounded number of times.
    #[error("connection rejected as stale (CM REJ reason 10): the peer still holds an old connection of this QP; retry with a new QP")]
    Stale,
    /// Nobody answered: the address, the route or the REQ went unanswered through all
    /// retries (`RDMA_CM_EVENT_ADDR_ERROR`, `_ROUTE_ERROR`, `_UNREACHABLE`,
    /// `_CONNECT_ERROR`). `stage` says which.
    #[error("{dest} is unreachable over RDMA CM ({stage}): check the address, that the peer listens on this port and that both ends have an RDMA device on the path")]
    Unreachable {
        dest: SocketAddr,
        stage: &'static str,
    },
    /// The connect did not finish within its timeout; it was abandoned.
    #[error("RDMA CM connection to {dest} timed out after {after:?}")]
    Timeout { dest: SocketAddr, after: Duration },
    /// The connection manager's own error (unknown connection, private data too long,
    /// state, port in use).
    #[error(transparent)]
    Cm(#[from] CmError),
    /// A verbs call on the way failed (QP creation, posting receives).
    #[error(transparent)]
    Verbs(#[from] VerbsError),
    /// The connection manager's event thread is gone (its device was closed).
    #[error("the connection manager is gone (its device was closed)")]
    Gone,
}

impl ConnError {
    /// The error of a REJ the passive side sent: [`ConnError::Stale`] for reason 10
    /// ([`CM_REJ_STALE_CONN`]), [`ConnError::Rejected`] with the reason and private
    /// data otherwise.
    pub fn from_rej(reason: u16, private_data: Vec<u8>) -> ConnError {
        if reason == CM_REJ_STALE_CONN {
            ConnError::Stale
        } else {
            ConnError::Rejected {
                reason,
                private_data,
            }
        }
    }
}
