//! Provider-agnostic handles of the verbs objects a poll group owns (PD, CQ, SRQ, QP),
//! the QP creation attributes that name them, and the asynchronous events that report
//! on them (`struct ibv_async_event`).
//!
//! A handle is a small `Copy` id; the provider keeps the table from id to its own object
//! (the soft provider's RC cores, the verbs provider's `ibv_*` pointers), so a work
//! request costs one table lookup and no reference counting.
use crate::verbs::{QpCap, QpType};

/// A protection domain (`struct ibv_pd`), named by the provider's index.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Pd(pub u32);

/// A completion queue of a poll group (`struct ibv_cq`), named by its index in the group.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Cq(pub u32);

/// A shared receive queue of a poll group (`struct ibv_srq`), named by its index in the group.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Srq(pub u32);

/// A queue pair (`struct ibv_qp`), named by its QP number (24 bits).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Qp(pub u32);

impl Qp {
    /// The QP number (24 bits).
    pub fn qpn(self) -> u32 {
        self.0
    }
}

/// An address handle (`struct ibv_ah`, IBTA Vol 1 §11.2.2): the destination of UD
/// sends, made from an [`crate::verbs::AhAttr`] by `Context::create_ah`, named by the
/// poll group's index.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Ah(pub u32);

/// Creation attributes of a QP (`struct ibv_qp_init_attr`, IBTA Vol 1 §11.2.4.1).
///
/// `cap.max_inline_data` is a request: the provider may grant less or more (ibverbs
/// writes the granted value back), and it keeps the granted value per QP.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QpInitAttr {
    /// The protection domain of the QP (and of every MR its work requests name).
    pub pd: Pd,
    /// The CQ of send work completions.
    pub send_cq: Cq,
    /// The CQ of receive work completions.
    pub recv_cq: Cq,
    /// Receive from this SRQ instead of an own receive queue (then `cap.max_recv_wr`
    /// and `cap.max_recv_sge` are ignored).
    pub srq: Option<Srq>,
    /// Queue sizes and inline data asked for.
    pub cap: QpCap,
    /// The transport service (RC, UC or UD).
    pub qp_type: QpType,
}

/// An asynchronous event of a device (`struct ibv_async_event`, `enum ibv_event_type`;
/// IBTA Vol 1 §11.6.3), as a poll group's `poll_async_event` hands it out.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AsyncEvent {
    /// IBV_EVENT_SRQ_LIMIT_REACHED: fewer receive WRs than the armed limit remain in
    /// `srq`. One-shot: the limit is disarmed and must be armed again.
    SrqLimitReached { srq: Srq },
    /// IBV_EVENT_SRQ_ERR: the SRQ failed; its QPs go to Error.
    SrqError { srq: Srq },
    /// IBV_EVENT_QP_FATAL: the QP is in Error (a fatal error outside a completion).
    QpFatal { qp: Qp },
    /// IBV_EVENT_QP_REQ_ERR: invalid request local work queue error (QP in Error).
    QpRequestError { qp: Qp },
    /// IBV_EVENT_QP_ACCESS_ERR: local access violation error (QP in Error).
    QpAccessError { qp: Qp },
    /// IBV_EVENT_COMM_EST: the first packet arrived on a QP in RTR.
    CommEstablished { qp: Qp },
    /// IBV_EVENT_SQ_DRAINED: the send queue of a QP in SQD drained.
    SqDrained { qp: Qp },
    /// IBV_EVENT_QP_LAST_WQE_REACHED: a QP on an SRQ in Error consumed its last WQE.
    QpLastWqeReached { qp: Qp },
    /// IBV_EVENT_CQ_ERR: CQ overrun; the CQ's QPs go to Error.
    CqError { cq: Cq },
    /// IBV_EVENT_PORT_ACTIVE: the port became active.
    PortActive { port: u8 },
    /// IBV_EVENT_PORT_ERR: the port left the active state.
    PortError { port: u8 },
    /// IBV_EVENT_GID_CHANGE: the port's GID table changed (an address came or went).
    GidChange { port: u8 },
    /// IBV_EVENT_DEVICE_FATAL: the device is unusable; close everything.
    DeviceFatal,
    /// Another event (`enum ibv_event_type` value), kept rather than dropped.
    Other { event_type: u32 },
}
