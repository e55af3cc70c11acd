//! Bring-up of one queue: its registered memory, memory windows, CQ and QP in a poll
//! group of the soft provider, then the RDMA CM exchange with the NVMe/RDMA private
//! data (NVMe RDMA Transport 1.x §3.3). This is the part that the transport's
//! connection manager (`connect`, bringing the QP to RTS) replaces.
use std::time::{Duration, Instant};

use crossbeam::channel::RecvTimeoutError;
use transport::cm::{CmEvent, ConnectParams};
use transport::soft::{CmAgent, Context, QpInitAttr};
use transport::verbs::{AccessFlags, AhAttr, QpAttr, QpCap, QpState};

use super::core::{MrSpan, QueueCore, QueueMemory, RSP_LEN, SQE_LEN};
use super::driver::{wc_buffer, NvmeRdmaQueue};
use super::QueueConfig;
use crate::error::HostError;
use crate::fabrics;

fn verbs_err(what: &str, e: impl std::fmt::Display) -> HostError {
    HostError::Device(format!("{what}: {e}"))
}

impl NvmeRdmaQueue {
    /// Creates the queue's resources in poll group `ctx` and connects it through `cm`:
    /// RDMA CM REQ with the NVMe/RDMA request private data (RECFMT 0, QID, HRQSIZE,
    /// HSQSIZE), then on the REP the QP goes Init -> RTR -> RTS and the RTU is sent.
    ///
    /// Errors: [`HostError::Rejected`] (with the NVMe/RDMA reject status decoded),
    /// [`HostError::Unreachable`] when nothing answered within `connect_timeout`,
    /// [`HostError::Device`] for resource failures, [`HostError::InvalidArgument`] for
    /// a depth under 2 or a zero `max_io_bytes`, [`HostError::Protocol`] for an
    /// unusable accept.
    pub fn connect(
        mut ctx: Context,
        cm: &CmAgent,
        cfg: QueueConfig,
    ) -> Result<NvmeRdmaQueue, HostError> {
        cfg.validate()?;
        let dev = ctx.device().clone();
        let depth = usize::from(cfg.depth);
        let stride = QueueMemory::stride_for(cfg.max_io_bytes);
        let pd = dev.alloc_pd();
        let data_mr = dev
            .reg_mr(
                pd,
                depth * stride,
                AccessFlags::LOCAL_WRITE | AccessFlags::MW_BIND,
            )
            .map_err(|e| verbs_err("data MR", e))?;
        let sqe_mr = dev
            .reg_mr(pd, depth * SQE_LEN, AccessFlags::empty())
            .map_err(|e| verbs_err("SQE MR", e))?;
        let rsp_mr = dev
            .reg_mr(pd, depth * RSP_LEN, AccessFlags::LOCAL_WRITE)
            .map_err(|e| verbs_err("response MR", e))?;
        let mw_keys = (0..depth)
            .map(|_| dev.alloc_mw(pd))
            .collect::<Result<Vec<u32>, _>>()
            .map_err(|e| verbs_err("memory window", e))?;
        let span = |addr, lkey| MrSpan { addr, lkey };
        let mem = QueueMemory {
            data: span(data_mr.addr(), data_mr.lkey()),
            stride,
            sqe: span(sqe_mr.addr(), sqe_mr.lkey()),
            rsp: span(rsp_mr.addr(), rsp_mr.lkey()),
        };
        let mut core = QueueCore::new(&cfg, mem, &mw_keys)?;
        let depth32 = u32::from(cfg.depth);
        // Per command at most: bind, SEND, local invalidate; plus a receive.
        let cq = ctx.create_cq(depth32 * 4 + 16);
        let cap = QpCap {
            max_send_wr: depth32 * 3,
            max_recv_wr: depth32,
            max_send_sge: 2,
            max_recv_sge: 1,
            max_inline_data: 0,
        };
        let qp = ctx
            .create_qp(&QpInitAttr {
                pd,
                send_cq: cq,
                recv_cq: cq,
                srq: None,
                cap,
            })
            .map_err(|e| verbs_err("create QP", e))?;
        // rdma_cm moves the QP to Init when it is created; receives may be posted then.
        ctx.modify_qp(
            qp,
            &QpAttr {
                qp_state: Some(QpState::Init),
                qp_access_flags: Some(
                    AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ | AccessFlags::REMOTE_WRITE,
                ),
                ..Default::default()
            },
        )
        .map_err(|e| verbs_err("QP to Init", e))?;
        for i in 0..cfg.depth {
            ctx.post_recv(qp, &core.receive_wr(i))
                .map_err(|e| verbs_err("post receive", e))?;
        }

        let starting_psn = rand::random::<u32>() & 0x00FF_FFFF;
        let src_port = 0xC000 | (rand::random::<u16>() & 0x3FFF);
        let params = ConnectParams {
            dest: cfg.target.ip(),
            dest_port: cfg.target.port(),
            src_port,
            local_qpn: qp.qpn(),
            starting_psn,
            responder_resources: cfg.responder_resources,
            initiator_depth: 0,
            retry_count: 7,
            rnr_retry_count: 7,
            path_mtu: dev.path_mtu(),
            local_ack_timeout: cfg.local_ack_timeout,
            private_data: fabrics::rdma_cm_request(cfg.qid, cfg.depth, cfg.depth - 1, cfg.cntlid),
        };
        let (conn, cm_events) = cm
            .connect(params)
            .map_err(|e| verbs_err("RDMA CM connect", e))?;
        let deadline = Instant::now() + cfg.connect_timeout;
        loop {
            let ev = match cm_events.recv_timeout(Duration::from_millis(1)) {
                Ok(ev) => ev,
                Err(RecvTimeoutError::Timeout) => {
                    ctx.progress();
                    if Instant::now() >= deadline {
                        // Linux cm_destroy_id: an unanswered REQ is withdrawn with REJ
                        // timeout, a received REP with REJ consumer defined.
                        let _ = cm.destroy(conn);
                        return Err(HostError::Unreachable {
                            qid: cfg.qid,
                            target: cfg.target,
                            waited: cfg.connect_timeout,
                        });
                    }
                    continue;
                }
                Err(RecvTimeoutError::Disconnected) => {
                    return Err(HostError::Device("the CM agent is gone".into()))
                }
            };
            match ev {
                CmEvent::ConnectReply {
                    remote_qpn,
                    remote_psn,
                    initiator_depth,
                    flow_label,
                    peer_selective_retransmit,
                    private_data,
                    ..
                } => {
                    let accepted = fabrics::rdma_cm_accept_crqsize(&private_data)
                        .map_err(|e| {
                            HostError::Protocol(format!(
                                "queue {}: unusable NVMe/RDMA accept ({e})",
                                cfg.qid
                            ))
                        })
                        .and_then(|crqsize| core.limit_sq_size(crqsize));
                    if let Err(e) = accepted {
                        let _ = cm.destroy(conn);
                        return Err(e);
                    }
                    let rtr = QpAttr {
                        qp_state: Some(QpState::Rtr),
                        path_mtu: Some(dev.path_mtu()),
                        dest_qp_num: Some(remote_qpn),
                        // Linux's CM semantics (ib_cm, both reference captures):
                        // each side's Starting PSN is the PSN it expects to receive,
                        // so we send from the REP's and expect our REQ's.
                        rq_psn: Some(starting_psn),
                        max_dest_rd_atomic: Some(cfg.responder_resources.max(initiator_depth)),
                        min_rnr_timer: Some(12),
                        ah_attr: Some(AhAttr {
                            dest: cfg.target.ip(),
                            flow_label,
                            hop_limit: 64,
                            traffic_class: 0,
                        }),
                        // Only a peer whose REP carried our marker (CM VendorID) gets
                        // selective retransmission; Linux targets get go-back-N.
                        selective_retransmit: Some(peer_selective_retransmit),
                        ..Default::default()
                    };
                    let rts = QpAttr {
                        qp_state: Some(QpState::Rts),
                        sq_psn: Some(remote_psn),
                        timeout: Some(cfg.local_ack_timeout),
                        retry_cnt: Some(7),
                        rnr_retry: Some(7),
                        max_rd_atomic: Some(0),
                        ..Default::default()
                    };
                    let r = ctx
                        .modify_qp(qp, &rtr)
                        .and_then(|_| ctx.modify_qp(qp, &rts));
                    if let Err(e) = r {
                        let _ = cm.destroy(conn);
                        return Err(verbs_err("QP to RTR/RTS", e));
                    }
                    cm.send_rtu(conn).map_err(|e| verbs_err("RDMA CM RTU", e))?;
                    break;
                }
                CmEvent::Rejected {
                    reason,
                    private_data,
                    ..
                } => {
                    let nvme_status = fabrics::rdma_cm_reject_status(&private_data);
                    return Err(HostError::Rejected {
                        qid: cfg.qid,
                        target: cfg.target,
                        reason,
                        nvme_status,
                    });
                }
                CmEvent::Unreachable { .. } => {
                    return Err(HostError::Unreachable {
                        qid: cfg.qid,
                        target: cfg.target,
                        waited: cfg
                            .connect_timeout
                            .saturating_sub(deadline.saturating_duration_since(Instant::now())),
                    })
                }
                CmEvent::Disconnected { .. } => {
                    return Err(HostError::Protocol(format!(
                        "queue {}: disconnected during connect",
                        cfg.qid
                    )))
                }
                _ => {}
            }
        }
        Ok(NvmeRdmaQueue {
            core,
            ctx,
            cm: cm.clone(),
            conn,
            cm_events,
            pd,
            qp,
            cq,
            data_mr,
            sqe_mr,
            rsp_mr,
            wc_buf: wc_buffer(),
        })
    }
}
