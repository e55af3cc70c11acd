//! Connection bring-up of the soft provider, written once: what librdmacm does for the
//! verbs provider (`rdma_create_qp`, `rdma_connect`, `rdma_accept`), done here over the
//! CM agent, for [`ConnectionManager`](crate::verbs::ConnectionManager)'s `connect` and
//! `create_accept_qp`.
//!
//! ```text
//!  active (connect)                                    passive (create_accept_qp, accept)
//!   create QP, Init, post receives
//!   REQ (Starting PSN = our rq_psn, flow label) ---->  ConnectRequest
//!                                                      create QP, Init, RTR (rq_psn = new),
//!                                                      RTS (sq_psn = REQ's), post receives
//!   ConnectReply  <---------------------------------  REP (Starting PSN = its rq_psn)
//!   RTR (rq_psn = ours), RTS (sq_psn = REP's)
//!   RTU  ------------------------------------------>  Established
//! ```
//!
//! Every QP attribute follows Linux ib_cm / rdma_cm (`cm_init_qp_*_attr`,
//! `cma_modify_qp_*`), with this project's choices where the CM leaves one:
//! - Starting PSN as Linux ib_cm uses it: each side's is the PSN it *expects to
//!   receive* (its `rq_psn`), so each side sends from the other's (both reference
//!   captures show it);
//! - QP access: remote write always, remote read when the connection has responder
//!   resources (`cm_init_qp_init_attr`), local write for receives;
//! - RDMA READ depths from the CM exchange, capped by the device
//!   ([`DeviceCaps::ird_for`], [`DeviceCaps::ord_for`]): the passive side's
//!   responder resources = min(device, REQ initiator depth), initiator depth =
//!   min(wanted, device, REQ responder resources); the active side's ORD = min(its
//!   initiator depth, REP responder resources) and IRD = the larger of what it offered
//!   and the REP's initiator depth (a peer's READs never exceed the responder's room);
//! - retry counts from the CM exchange (`cm_init_qp_rts_attr`): the passive side takes
//!   the REQ's retry and RNR retry counts, the active side its own retry count and the
//!   REP's RNR retry count (7 and 7 from every peer this project meets);
//! - local ACK timeout [`DEFAULT_ACK_TIMEOUT`] (17, 537 ms) on the passive side, the
//!   caller's (default 17) on the active side;
//! - `min_rnr_timer` (the RNR NAK delay this side's responder asks for): 1 (0.01 ms)
//!   for a QP on an SRQ, refilled every poll round; 12 (0.64 ms) for an own receive
//!   queue;
//! - path: the flow label of the CM exchange (its UDP source port), hop limit
//!   [`CM_HOP_LIMIT`], traffic class 0; path MTU the device's (the passive side: the
//!   smaller of the REQ's and the device's);
//! - selective retransmission only when the CM exchange negotiated it (never with Linux).
//!
//! The CM agent's own timers (REQ/REP resends, MRA, TimeWait, REJ stale connection) are
//! the CM's ([`crate::cm`]); `connect` bounds the whole exchange by its timeout and
//! withdraws the REQ when it runs out (Linux `cm_destroy_id`: REJ timeout).
use std::net::IpAddr;
use std::time::{Duration, Instant};

use crossbeam::channel::RecvTimeoutError;

use super::cm_agent::{CmAgent, CmAgentError};
use super::context::Context;
use crate::cm::{CmError, CmEvent, ConnectParams, CM_HOP_LIMIT};
use crate::verbs::connection::{
    AcceptToken, ActiveConn, ConnError, ConnRequest, ConnectRequestParams, DEFAULT_ACK_TIMEOUT,
};
use crate::verbs::{
    AccessFlags, AhAttr, DeviceCaps, Mtu, PostReceives, Qp, QpAttr, QpInitAttr, QpState, VerbsError,
};
use crate::wire::cm::CMA_REQ_USER_PRIVATE_DATA_LEN;

/// `min_rnr_timer` of a QP that receives through an SRQ: 0.01 ms (IBTA Table 45 code 1).
pub const MIN_RNR_TIMER_SRQ: u8 = 1;
/// `min_rnr_timer` of a QP with its own receive queue: 0.64 ms (IBTA Table 45 code 12).
pub const MIN_RNR_TIMER_RQ: u8 = 12;
/// How often `connect` drives its poll group while it waits for the CM.
const PROGRESS_TICK: Duration = Duration::from_millis(1);
/// The RNR retry count the passive side asks of the active side (3 bits; 7 = infinite).
const ACCEPT_RNR_RETRY: u8 = 7;

/// A random 24-bit PSN (a new connection's expected receive PSN).
fn random_psn() -> u32 {
    rand::random::<u32>() & 0x00FF_FFFF
}

/// The `min_rnr_timer` of a QP: see [`MIN_RNR_TIMER_SRQ`] and [`MIN_RNR_TIMER_RQ`].
pub fn min_rnr_timer(on_srq: bool) -> u8 {
    if on_srq {
        MIN_RNR_TIMER_SRQ
    } else {
        MIN_RNR_TIMER_RQ
    }
}

/// Reset -> Init: local write (receives), remote write, and remote read when the
/// connection gives this side responder resources (`ird` > 0).
pub fn init_attr(ird: u8) -> QpAttr {
    let mut access = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE;
    if ird > 0 {
        access |= AccessFlags::REMOTE_READ;
    }
    QpAttr {
        qp_state: Some(QpState::Init),
        qp_access_flags: Some(access),
        ..Default::default()
    }
}

/// The path of an RC QP to `dest` with the CM exchange's `flow_label` and
/// `traffic_class` (the IP ToS / traffic class its packets carry, ECN bits aside).
fn path(dest: IpAddr, flow_label: u32, traffic_class: u8) -> AhAttr {
    AhAttr {
        dest,
        flow_label,
        hop_limit: CM_HOP_LIMIT,
        traffic_class,
    }
}

/// What the passive side decides from a request: the QP's RTR and RTS attributes and
/// the READ depths its REP announces.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PassiveAttrs {
    /// Responder resources (IRD) offered.
    pub ird: u8,
    /// Initiator depth (ORD) used.
    pub ord: u8,
    /// Init -> RTR.
    pub rtr: QpAttr,
    /// RTR -> RTS.
    pub rts: QpAttr,
}

/// The passive side's attributes for `req` on a device with `caps` and path MTU
/// `dev_mtu`, wanting initiator depth `ord`, expecting PSN `rq_psn` first.
pub fn passive_attrs(
    req: &ConnRequest,
    caps: &DeviceCaps,
    dev_mtu: Mtu,
    ord: u8,
    on_srq: bool,
    rq_psn: u32,
) -> PassiveAttrs {
    let ird = caps.ird_for(u8::MAX, req.initiator_depth);
    let ord = caps.ord_for(ord, req.responder_resources);
    PassiveAttrs {
        ird,
        ord,
        rtr: QpAttr {
            qp_state: Some(QpState::Rtr),
            path_mtu: Some(req.path_mtu.min(dev_mtu)),
            dest_qp_num: Some(req.remote_qpn),
            rq_psn: Some(rq_psn),
            max_dest_rd_atomic: Some(ird),
            min_rnr_timer: Some(min_rnr_timer(on_srq)),
            // The request's traffic class, as ib_cm's passive side takes the REQ's path
            // (a target sets a listen port's own here, issue 16 item 8).
            ah_attr: Some(path(req.remote_ip, req.flow_label, req.traffic_class)),
            selective_retransmit: Some(req.peer_selective_retransmit),
            ..Default::default()
        },
        rts: QpAttr {
            qp_state: Some(QpState::Rts),
            // Linux ib_cm: the REQ's Starting PSN is the one the passive side sends from.
            sq_psn: Some(req.remote_psn),
            timeout: Some(DEFAULT_ACK_TIMEOUT),
            retry_cnt: Some(req.retry_count.min(7)),
            rnr_retry: Some(req.rnr_retry_count.min(7)),
            max_rd_atomic: Some(ord),
            ..Default::default()
        },
    }
}

/// The fields of a [`CmEvent::ConnectReply`] the active side's QP needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Reply {
    /// The passive side's QPN.
    pub remote_qpn: u32,
    /// The REP's Starting PSN (the PSN this side sends from).
    pub remote_psn: u32,
    /// The passive side's responder resources (bounds our ORD).
    pub responder_resources: u8,
    /// The passive side's initiator depth (its READs toward us).
    pub initiator_depth: u8,
    /// RNR retry count for our QP.
    pub rnr_retry_count: u8,
    /// The flow label of our REQ.
    pub flow_label: u32,
    /// Selective retransmission negotiated.
    pub peer_selective_retransmit: bool,
}

/// What the active side asked for in its REQ (after the device capped it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Request {
    /// The peer's address.
    pub dest: IpAddr,
    /// The PSN this side expects first (the REQ's Starting PSN).
    pub rq_psn: u32,
    /// Responder resources offered (IRD).
    pub ird: u8,
    /// Initiator depth asked for (ORD).
    pub ord: u8,
    /// Transport retry count.
    pub retry_count: u8,
    /// Local ACK timeout code.
    pub local_ack_timeout: u8,
    /// The QP receives through an SRQ.
    pub on_srq: bool,
}

/// The active side's Init -> RTR and RTR -> RTS attributes once `rep` answered `req`,
/// on a device of path MTU `dev_mtu`.
pub fn active_attrs(req: &Request, rep: &Reply, dev_mtu: Mtu) -> (QpAttr, QpAttr) {
    let rtr = QpAttr {
        qp_state: Some(QpState::Rtr),
        path_mtu: Some(dev_mtu),
        dest_qp_num: Some(rep.remote_qpn),
        rq_psn: Some(req.rq_psn),
        max_dest_rd_atomic: Some(req.ird.max(rep.initiator_depth)),
        min_rnr_timer: Some(min_rnr_timer(req.on_srq)),
        ah_attr: Some(path(req.dest, rep.flow_label, 0)),
        // Only a peer whose REP carried our marker gets selective retransmission.
        selective_retransmit: Some(rep.peer_selective_retransmit),
        ..Default::default()
    };
    let rts = QpAttr {
        qp_state: Some(QpState::Rts),
        sq_psn: Some(rep.remote_psn),
        timeout: Some(req.local_ack_timeout),
        retry_cnt: Some(req.retry_count.min(7)),
        rnr_retry: Some(rep.rnr_retry_count.min(7)),
        max_rd_atomic: Some(req.ord.min(rep.responder_resources)),
        ..Default::default()
    };
    (rtr, rts)
}

/// The connection manager's error of a CM agent call: the CM's own, or the agent gone.
/// (The agent's setup errors come only from starting it, never from a call.)
pub(crate) fn agent_error(e: CmAgentError) -> ConnError {
    match e {
        CmAgentError::Cm(e) => ConnError::Cm(e),
        CmAgentError::Gone
        | CmAgentError::AlreadyStarted
        | CmAgentError::Socket(_)
        | CmAgentError::Io(_) => ConnError::Gone,
    }
}

/// Modifies `qp` through Init, RTR and RTS, destroying it if a step fails.
fn bring_up(ctx: &mut Context, qp: Qp, steps: &[QpAttr]) -> Result<(), VerbsError> {
    for a in steps {
        if let Err(e) = ctx.modify_qp(qp, a) {
            let _ = ctx.destroy_qp(qp);
            return Err(e);
        }
    }
    Ok(())
}

/// Passive side: creates the QP of `req` in `ctx` and brings it to RTS (see the module
/// docs); returns it and what the REP announces.
///
/// # Errors
/// `Verbs`: `CapabilityExceeded` for queue sizes beyond [`super::SOFT_CAPS`],
/// `InvalidArgument` for CQs or an SRQ of another context, and the QP's modify errors
/// (the QP is destroyed then).
pub(crate) fn create_accept_qp(
    ctx: &mut Context,
    req: &ConnRequest,
    init: &QpInitAttr,
    ord: u8,
) -> Result<(Qp, AcceptToken), ConnError> {
    let dev = ctx.device().clone();
    let caps = dev.caps();
    caps.check_qp_cap(&init.cap, init.srq.is_some())?;
    let qp = ctx.create_qp(init)?;
    let rq_psn = random_psn();
    let a = passive_attrs(req, &caps, dev.path_mtu(), ord, init.srq.is_some(), rq_psn);
    bring_up(ctx, qp, &[init_attr(a.ird), a.rtr, a.rts])?;
    Ok((
        qp,
        AcceptToken {
            qpn: qp.qpn(),
            starting_psn: rq_psn,
            responder_resources: a.ird,
            initiator_depth: a.ord,
            rnr_retry_count: ACCEPT_RNR_RETRY,
        },
    ))
}

/// Active side: see [`crate::verbs::ConnectionManager::connect`] and the module docs.
///
/// # Errors
/// As the trait's; the QP is destroyed on any error.
pub(crate) fn connect(
    cm: &CmAgent,
    ctx: &mut Context,
    init: &QpInitAttr,
    params: &ConnectRequestParams,
    post_receives: &mut PostReceives<'_, Context>,
) -> Result<ActiveConn, ConnError> {
    if params.private_data.len() > CMA_REQ_USER_PRIVATE_DATA_LEN {
        return Err(CmError::PrivateDataTooLong {
            len: params.private_data.len(),
            max: CMA_REQ_USER_PRIVATE_DATA_LEN,
        }
        .into());
    }
    let local = ctx.device().ip();
    if params.dest.is_ipv4() != local.is_ipv4() {
        return Err(CmError::AddressFamilyMismatch {
            local,
            dest: params.dest.ip(),
        }
        .into());
    }
    let caps = ctx.device().caps();
    caps.check_qp_cap(&init.cap, init.srq.is_some())?;
    let qp = ctx.create_qp(init)?;
    let r = connect_qp(cm, ctx, qp, init, params, post_receives);
    if r.is_err() {
        let _ = ctx.destroy_qp(qp);
    }
    r
}

fn connect_qp(
    cm: &CmAgent,
    ctx: &mut Context,
    qp: Qp,
    init: &QpInitAttr,
    params: &ConnectRequestParams,
    post_receives: &mut PostReceives<'_, Context>,
) -> Result<ActiveConn, ConnError> {
    let start = Instant::now();
    let deadline = start + params.timeout;
    let dev = ctx.device().clone();
    let caps = dev.caps();
    let req = Request {
        dest: params.dest.ip(),
        rq_psn: random_psn(),
        ird: caps.ird_for(params.responder_resources, u8::MAX),
        ord: caps.ord_for(params.initiator_depth, u8::MAX),
        retry_count: params.retry_count.min(7),
        local_ack_timeout: params.local_ack_timeout.unwrap_or(DEFAULT_ACK_TIMEOUT),
        on_srq: init.srq.is_some(),
    };
    // rdma_cm moves the QP to Init when it creates it; receives may be posted then.
    ctx.modify_qp(qp, &init_attr(req.ird))?;
    post_receives(ctx, qp)?;
    let (id, events) = cm
        .connect(ConnectParams {
            dest: req.dest,
            dest_port: params.dest.port(),
            // The IP CM source port feeds the flow label (the QPs' UDP source port).
            src_port: 0xC000 | (rand::random::<u16>() & 0x3FFF),
            local_qpn: qp.qpn(),
            starting_psn: req.rq_psn,
            responder_resources: req.ird,
            initiator_depth: req.ord,
            retry_count: req.retry_count,
            rnr_retry_count: params.rnr_retry_count.min(7),
            path_mtu: dev.path_mtu(),
            local_ack_timeout: req.local_ack_timeout,
            private_data: params.private_data.clone(),
        })
        .map_err(agent_error)?;
    let unreachable = |stage| ConnError::Unreachable {
        dest: params.dest,
        stage,
    };
    let mut rep: Option<(Reply, Vec<u8>)> = None;
    loop {
        let ev = match events.recv_timeout(PROGRESS_TICK) {
            Ok(ev) => ev,
            Err(RecvTimeoutError::Timeout) => {
                // The poll group's other QPs keep running while this one connects.
                ctx.progress();
                if Instant::now() >= deadline {
                    // Linux cm_destroy_id: an unanswered REQ is withdrawn with REJ
                    // timeout, a received REP with REJ consumer defined.
                    let _ = cm.destroy(id);
                    return Err(ConnError::Timeout {
                        dest: params.dest,
                        after: start.elapsed(),
                    });
                }
                continue;
            }
            Err(RecvTimeoutError::Disconnected) => return Err(ConnError::Gone),
        };
        match ev {
            CmEvent::ConnectReply {
                remote_qpn,
                remote_psn,
                responder_resources,
                initiator_depth,
                rnr_retry_count,
                flow_label,
                peer_selective_retransmit,
                private_data,
                ..
            } => {
                let r = Reply {
                    remote_qpn,
                    remote_psn,
                    responder_resources,
                    initiator_depth,
                    rnr_retry_count,
                    flow_label,
                    peer_selective_retransmit,
                };
                let (rtr, rts) = active_attrs(&req, &r, dev.path_mtu());
                if let Err(e) = ctx
                    .modify_qp(qp, &rtr)
                    .and_then(|_| ctx.modify_qp(qp, &rts))
                {
                    let _ = cm.destroy(id);
                    return Err(e.into());
                }
                if let Err(e) = cm.send_rtu(id) {
                    let _ = cm.destroy(id);
                    return Err(agent_error(e));
                }
                rep = Some((r, private_data));
            }
            CmEvent::Established { .. } => {
                let Some((r, rep_private_data)) = rep else {
                    continue;
                };
                return Ok(ActiveConn {
                    id,
                    qp,
                    rep_private_data,
                    responder_resources: r.responder_resources,
                    initiator_depth: r.initiator_depth,
                    events,
                });
            }
            CmEvent::Rejected {
                reason,
                private_data,
                ..
            } => return Err(ConnError::from_rej(reason, private_data)),
            CmEvent::Unreachable { .. } => {
                return Err(unreachable(
                    "connection request (REQ unanswered through all retries)",
                ))
            }
            CmEvent::Disconnected { .. } => {
                return Err(unreachable(
                    "connection request (disconnected during setup)",
                ))
            }
            // Passive-side events; an active connection never gets them.
            CmEvent::ConnectRequest { .. } | CmEvent::StaleConnection { .. } => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cm::ConnId;
    use crate::soft::SOFT_CAPS;

    fn req() -> ConnRequest {
        // A Linux nvme-rdma host's I/O queue REQ (nvme_rdma_route_resolved): responder
        // resources = rxe's max_qp_rd_atom, initiator depth 0, retries 7/7.
        ConnRequest {
            id: ConnId(9),
            remote_ip: "192.168.77.11".parse().unwrap(),
            remote_port: 0xC123,
            local_port: 4420,
            remote_qpn: 0x11,
            remote_psn: 0x29fa4c,
            responder_resources: 128,
            initiator_depth: 0,
            path_mtu: Mtu::Mtu1024,
            local_ack_timeout: 0x13,
            retry_count: 7,
            rnr_retry_count: 7,
            flow_label: 0x12345,
            traffic_class: 0,
            hop_limit: 64,
            srq: false,
            peer_selective_retransmit: false,
            private_data: vec![0; 56],
        }
    }

    /// The target's bring-up (target/src/rdma.rs `bring_up`, an SRQ, ORD 16): the same
    /// attributes as before the move, plus remote write access as rdma_cm grants it.
    #[test]
    fn passive_side_as_the_target_brought_it_up() {
        let a = passive_attrs(&req(), &SOFT_CAPS, Mtu::Mtu4096, 16, true, 0xabc);
        assert_eq!((a.ird, a.ord), (0, 16));
        assert_eq!(
            init_attr(a.ird).qp_access_flags,
            Some(AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE)
        );
        let r = a.rtr;
        assert_eq!(r.path_mtu, Some(Mtu::Mtu1024));
        assert_eq!((r.dest_qp_num, r.rq_psn), (Some(0x11), Some(0xabc)));
        assert_eq!((r.max_dest_rd_atomic, r.min_rnr_timer), (Some(0), Some(1)));
        let ah = r.ah_attr.unwrap();
        assert_eq!(
            (ah.flow_label, ah.hop_limit, ah.traffic_class),
            (0x12345, 64, 0)
        );
        // The request's traffic class (a target's listen port sets its own there).
        let tc = ConnRequest {
            traffic_class: 0x60,
            ..req()
        };
        let a = passive_attrs(&tc, &SOFT_CAPS, Mtu::Mtu4096, 16, true, 0xabc);
        assert_eq!(a.rtr.ah_attr.unwrap().traffic_class, 0x60);
        assert_eq!(r.selective_retransmit, Some(false));
        let t = a.rts;
        assert_eq!(t.sq_psn, Some(0x29fa4c));
        assert_eq!(
            (t.timeout, t.retry_cnt, t.rnr_retry),
            (Some(17), Some(7), Some(7))
        );
        assert_eq!(t.max_rd_atomic, Some(16));
    }

    /// READ depths as rdma_cm caps them: the device, then the peer.
    #[test]
    fn passive_read_depths_are_capped_by_device_and_request() {
        let small = DeviceCaps {
            max_qp_rd_atom: 8,
            max_qp_init_rd_atom: 4,
            ..SOFT_CAPS
        };
        let mut r = req();
        r.initiator_depth = 16;
        r.responder_resources = 2;
        let a = passive_attrs(&r, &small, Mtu::Mtu1024, 16, false, 1);
        assert_eq!((a.ird, a.ord), (8, 2));
        assert_eq!(a.rtr.min_rnr_timer, Some(MIN_RNR_TIMER_RQ));
        assert!(init_attr(a.ird)
            .qp_access_flags
            .unwrap()
            .contains(AccessFlags::REMOTE_READ));
    }

    /// The host's bring-up (initiator/src/queue.rs `connect`: IRD 16, ORD 0, own
    /// receive queue) against a target that answers ORD 16.
    #[test]
    fn active_side_as_the_host_brought_it_up() {
        let q = Request {
            dest: "192.168.77.10".parse().unwrap(),
            rq_psn: 0x1234,
            ird: 16,
            ord: 0,
            retry_count: 7,
            local_ack_timeout: 17,
            on_srq: false,
        };
        let rep = Reply {
            remote_qpn: 0x22,
            remote_psn: 0x5678,
            responder_resources: 0,
            initiator_depth: 16,
            rnr_retry_count: 7,
            flow_label: 0x4242,
            peer_selective_retransmit: true,
        };
        let (rtr, rts) = active_attrs(&q, &rep, Mtu::Mtu4096);
        assert_eq!(rtr.path_mtu, Some(Mtu::Mtu4096));
        assert_eq!((rtr.dest_qp_num, rtr.rq_psn), (Some(0x22), Some(0x1234)));
        assert_eq!(
            (rtr.max_dest_rd_atomic, rtr.min_rnr_timer),
            (Some(16), Some(12))
        );
        assert_eq!(rtr.ah_attr.unwrap().flow_label, 0x4242);
        assert_eq!(rtr.selective_retransmit, Some(true));
        assert_eq!(rts.sq_psn, Some(0x5678));
        assert_eq!(
            (rts.timeout, rts.retry_cnt, rts.rnr_retry),
            (Some(17), Some(7), Some(7))
        );
        assert_eq!(rts.max_rd_atomic, Some(0));
        // A peer that reads more than we offered still finds room.
        let (rtr, _) = active_attrs(
            &q,
            &Reply {
                initiator_depth: 32,
                ..rep
            },
            Mtu::Mtu1024,
        );
        assert_eq!(rtr.max_dest_rd_atomic, Some(32));
        // ORD: what we asked, capped by the peer's responder resources.
        let (_, rts) = active_attrs(
            &Request { ord: 16, ..q },
            &Reply {
                responder_resources: 4,
                ..rep
            },
            Mtu::Mtu1024,
        );
        assert_eq!(rts.max_rd_atomic, Some(4));
    }
}
