//! Bring-up of one queue: its registered memory, memory windows, CQ and QP in a poll
//! group of any provider, connected through the provider's connection manager
//! ([`ConnectionManager::connect`](transport::verbs::ConnectionManager::connect): REQ, REP, QP to RTS, RTU, written once in the
//! transport) with the NVMe/RDMA private data (NVMe RDMA Transport 1.x §3.3). What is
//! NVMe here: the request's private data (RECFMT, QID, HRQSIZE, HSQSIZE) and the check
//! of the accept's CRQSIZE, made after the connection is established, as a Linux host
//! on librdmacm does it (`nvme_rdma_conn_established`): an unusable accept disconnects.
use std::time::Instant;

use transport::verbs::connection::ConnectRequestParams;
use transport::verbs::{
    AccessFlags, ConnectionManager as _, Context, Device as _, MemoryRegion as _, Pd, Provider,
    QpCap, QpInitAttr,
};

use super::core::{MrSpan, QueueCore, QueueMemory, RemoteKeys, RSP_LEN, SQE_LEN};
use super::driver::{wc_buffer, NvmeRdmaQueue};
use super::QueueConfig;
use crate::error::HostError;
use crate::fabrics;
use crate::pool::{BufferPool, RemoteAccess};

/// The queue's RDMA READ depth as initiator (ORD): the host never reads from the
/// target (NVMe/RDMA: only the target issues RDMA READs), as Linux's nvme-rdma asks.
const HOST_INITIATOR_DEPTH: u8 = 0;
/// Transport and RNR retry counts the queue asks for (3 bits; RNR 7 = infinite), as
/// Linux's nvme-rdma (`nvme_rdma_route_resolved`).
const RETRY_COUNT: u8 = 7;
const RNR_RETRY_COUNT: u8 = 7;

pub(crate) fn device_err(qid: u16, what: &str, e: impl std::fmt::Display) -> HostError {
    HostError::Device(format!("queue {qid}: {what}: {e}"))
}

impl<P: Provider> NvmeRdmaQueue<P> {
    /// Creates the queue's resources in poll group `ctx` (which the queue keeps) in the
    /// host's protection domain `pd`, whose buffer pool `pool` the commands take their
    /// data buffers from (with a memory window per slot where the pool grants no remote
    /// access of its own, [`RemoteAccess::Windows`]), and
    /// connects it through `cm` ([`ConnectionManager::connect`](transport::verbs::ConnectionManager::connect)): the REQ carries the
    /// NVMe/RDMA request private data (RECFMT 0, QID, HRQSIZE, HSQSIZE), the receive
    /// buffers are posted while the QP is in Init, and the QP is in RTS when the
    /// connection is established. Then the accept's CRQSIZE is checked (at least 2;
    /// the SQ shrinks to it when smaller), and the queue disconnects if it is unusable.
    ///
    /// The provider is the context's (`C::Provider`), so
    /// `NvmeRdmaQueue::connect(ctx, &cm, cfg)` needs no type annotation.
    ///
    /// Errors: [`HostError::Rejected`] (with the NVMe/RDMA reject status decoded; REJ
    /// reason 10, stale connection, is retried by [`crate::controller::connect_queue`],
    /// not here), [`HostError::Unreachable`] when nothing answered within
    /// `connect_timeout`, [`HostError::Device`] for resource failures (the verbs error
    /// named), [`HostError::InvalidArgument`] for a depth under 2 or a zero
    /// `max_io_bytes`, [`HostError::Protocol`] for an unusable accept.
    pub fn connect<C>(
        mut ctx: C,
        cm: &P::Cm,
        cfg: QueueConfig,
        pd: Pd,
        pool: &BufferPool,
    ) -> Result<Self, HostError>
    where
        C: Context<Provider = P>,
        P: Provider<Context = C>,
    {
        cfg.validate()?;
        let qid = cfg.qid;
        let dev = ctx.device().clone();
        let depth = usize::from(cfg.depth);
        let sqe_mr = dev
            .reg_mr(pd, depth * SQE_LEN, AccessFlags::empty())
            .map_err(|e| device_err(qid, "SQE MR", e))?;
        let rsp_mr = dev
            .reg_mr(pd, depth * RSP_LEN, AccessFlags::LOCAL_WRITE)
            .map_err(|e| device_err(qid, "response MR", e))?;
        let mw_keys = match pool.remote_access() {
            RemoteAccess::Windows => (0..depth)
                .map(|_| dev.alloc_mw(pd))
                .collect::<Result<Vec<u32>, _>>()
                .map_err(|e| device_err(qid, "memory window", e))?,
            RemoteAccess::RegionKey => Vec::new(),
        };
        let keys = match pool.remote_access() {
            RemoteAccess::Windows => RemoteKeys::Windows(&mw_keys),
            RemoteAccess::RegionKey => RemoteKeys::Region { rkey: pool.rkey() },
        };
        let span = |addr, lkey| MrSpan { addr, lkey };
        let mem = QueueMemory {
            sqe: span(sqe_mr.addr(), sqe_mr.lkey()),
            rsp: span(rsp_mr.addr(), rsp_mr.lkey()),
        };
        let core = QueueCore::new(&cfg, mem, keys)?;
        let depth32 = u32::from(cfg.depth);
        let sq_wrs = super::core::send_queue_wrs(cfg.depth);
        // Every send queue entry and every receive may complete at once.
        let cq = ctx
            .create_cq(sq_wrs + depth32 + 16)
            .map_err(|e| device_err(qid, "create CQ", e))?;
        let init = QpInitAttr {
            pd,
            send_cq: cq,
            recv_cq: cq,
            srq: None,
            cap: QpCap {
                max_send_wr: sq_wrs,
                max_recv_wr: depth32,
                max_send_sge: 2,
                max_recv_sge: 1,
                max_inline_data: 0,
            },
            qp_type: transport::verbs::QpType::Rc,
        };
        let params = ConnectRequestParams {
            dest: cfg.target,
            responder_resources: cfg.responder_resources,
            initiator_depth: HOST_INITIATOR_DEPTH,
            retry_count: RETRY_COUNT,
            rnr_retry_count: RNR_RETRY_COUNT,
            local_ack_timeout: Some(cfg.local_ack_timeout),
            private_data: fabrics::rdma_cm_request(qid, cfg.depth, cfg.depth - 1, cfg.cntlid),
            timeout: cfg.connect_timeout,
        };
        let started = Instant::now();
        let conn = cm
            .connect(&mut ctx, &init, &params, &mut |ctx: &mut C, qp| {
                (0..cfg.depth).try_for_each(|i| ctx.post_recv(qp, &core.receive_wr(i)))
            })
            .map_err(|e| HostError::from_conn(qid, cfg.target, started.elapsed(), e))?;
        let mut queue = NvmeRdmaQueue {
            core,
            ctx,
            cm: cm.clone(),
            conn: conn.id,
            cm_events: conn.events,
            pd,
            qp: conn.qp,
            cq,
            pool: pool.clone(),
            bufs: (0..depth).map(|_| None).collect(),
            sqe_mr,
            rsp_mr,
            wc_buf: wc_buffer(),
            stashed: 0,
        };
        let accepted = fabrics::rdma_cm_accept_crqsize(&conn.rep_private_data)
            .map_err(|e| {
                HostError::Protocol(format!("queue {qid}: unusable NVMe/RDMA accept ({e})"))
            })
            .and_then(|crqsize| queue.core.limit_sq_size(crqsize));
        if let Err(e) = accepted {
            // Established already (the RTU went out): disconnect, as a Linux host does.
            queue.disconnect(cfg.connect_timeout.min(std::time::Duration::from_secs(1)));
            return Err(e);
        }
        Ok(queue)
    }
}
