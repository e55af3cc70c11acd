//! The NVMe/RDMA transport of the target (NVMe RDMA Transport 1.x): one poll group
//! per core, run to completion, reached only through the verbs model.
//!
//! A poll group owns a verbs [`Context`], one CQ, one SRQ whose receive buffers hold
//! a 64-byte SQE plus the in-capsule data, a response slab (one 16-byte CQE slot per
//! receive buffer), a registered data slab that is also the io_uring fixed buffer 0
//! (the receive region is fixed buffer 1), and its io_uring ring. A 4 KiB read goes
//! file -> data slab (io_uring) -> wire (RDMA WRITE gathers from the slab) with no
//! intermediate copy.
//!
//! Every command is a [`Request`] (one per receive buffer) with an explicit
//! [`ReqState`] (as SPDK's nvmf/rdma.c): a received capsule is decoded and checked,
//! waits for a data buffer when the slab is exhausted (a queue, not a retry loop),
//! pulls host data by RDMA READ or takes it in-capsule, executes (io_uring or the
//! admin/fabrics logic), pushes controller data by RDMA WRITE and completes with a
//! SEND (with Invalidate when the keyed SGL asks for it) of the CQE.
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use crossbeam::channel::{Receiver, Sender};
use nvme::status::{GenericStatus, Status};
use nvme::{Cqe, Sgl, Sqe};
use transport::soft::{Context, Cq, Mr, Pd, Qp, QpInitAttr, SoftDevice, Srq};
use transport::verbs::{
    AccessFlags, AhAttr, Mtu, QpAttr, QpCap, QpState, RecvWr, SendFlags, SendOp, SendWr, SgList,
    Sge, WcOpcode, WcStatus, WorkCompletion,
};

use crate::admin::{self, AdminOutcome, DataDirection};
use crate::buffers::{BufferPool, Chunk};
use crate::capsule::{classify, Kind};
use crate::controller::Controller;
use crate::fabrics::{self, ConnectOutcome};
use crate::io::{self, IoCommand};
use crate::oplog::{self, QueueEnd, QueuePeer};
use crate::subsystem::Registry;
use crate::uring::Ring;
use transport::memlock::{pinned_span_bytes, Bytes, MemlockError, PinBudget, PinCharge};

/// Idle poll rounds (about 0.3-1 us each) before an idle poll group starts yielding
/// its core every 64 rounds.
const IDLE_ROUNDS_BEFORE_YIELD: u32 = 4096;

/// Poll group sizing.
#[derive(Clone, Copy, Debug)]
pub struct PollGroupConfig {
    /// Receive buffers in the SRQ (= requests in flight for all queues of the group).
    pub srq_depth: u32,
    /// Bytes of in-capsule data a receive buffer holds after the 64-byte SQE.
    pub in_capsule_bytes: u32,
    /// Bytes of the registered data slab ([`crate::memory::plan`] sizes it).
    pub data_slab_bytes: usize,
    /// Largest data transfer of one command (MDTS).
    pub max_io_bytes: u32,
    /// io_uring submission queue entries.
    pub ring_entries: u32,
}

impl Default for PollGroupConfig {
    fn default() -> Self {
        PollGroupConfig {
            srq_depth: 512,
            in_capsule_bytes: 4096,
            data_slab_bytes: crate::memory::DEFAULT_DATA_SLAB_BYTES as usize,
            max_io_bytes: 1 << 20,
            ring_entries: 512,
        }
    }
}

/// Counters of one poll group (also the evidence the tests read).
#[derive(Debug, Default)]
pub struct PollGroupCounters {
    /// Command capsules received (from every QP of the group, through the one SRQ).
    pub capsules: AtomicU64,
    /// Capsules dropped because their queue already had twice its SQ size outstanding.
    pub sq_overflows: AtomicU64,
    /// Distinct QPs that drew receive buffers from the group's SRQ.
    pub srq_qps: AtomicU64,
    /// Host writes whose data came in the capsule.
    pub in_capsule_writes: AtomicU64,
    /// Host writes whose data the target pulled by RDMA READ.
    pub rdma_read_writes: AtomicU64,
    /// Host reads served by RDMA WRITE from the data slab.
    pub rdma_write_reads: AtomicU64,
    /// Bytes the target copied out of its registered buffers. Only the control path
    /// does (the 1024-byte Connect data); read and write data never: file <-> slab <->
    /// wire, so this does not grow with I/O.
    pub data_bytes_copied: AtomicU64,
    /// Commands answered with an error status.
    pub error_completions: AtomicU64,
    /// Commands that waited for a data buffer.
    pub buffer_waits: AtomicU64,
}

/// What the control thread asks of a poll group.
pub enum GroupCmd {
    /// Create an RC QP for a connection request and bring it to RTS.
    NewQueue(NewQueue, Sender<Result<(u32, u32), String>>),
    /// The connection is gone: destroy its QP and release its requests; `why` is
    /// logged ([`crate::oplog::queue_closed`]).
    DestroyQueue { qpn: u32, why: QueueEnd },
    /// The QPNs of every queue of controller `cntlid` in this group (for a Keep Alive
    /// expiry, which tears the controller's queues down).
    QueuesOf {
        cntlid: u16,
        reply: Sender<Vec<u32>>,
    },
    /// Stop the poll loop.
    Shutdown,
}

/// Parameters of a new queue (from the CM REQ and its NVMe/RDMA private data).
#[derive(Clone, Copy, Debug)]
pub struct NewQueue {
    pub cm_id: u32,
    pub qid: u16,
    /// Submission queue size (HSQSIZE + 1).
    pub sq_size: u16,
    pub remote: std::net::IpAddr,
    pub remote_qpn: u32,
    /// The REQ's Starting PSN: Linux (ib_cm) makes it the PSN the passive side
    /// *sends* from (and the active side expects), so it becomes our SQ PSN; the PSN
    /// our REP carries is the one we expect on receive (see both reference captures).
    pub remote_psn: u32,
    pub flow_label: u32,
    pub path_mtu: Mtu,
    /// Selective retransmission negotiated in the CM exchange (the REQ and our REP carry
    /// the markers; never with a Linux host).
    pub selective_retransmit: bool,
    /// RDMA READs the target may have outstanding toward the host (its ORD).
    pub ord: u8,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ReqState {
    Free,
    NeedBuffer,
    TransferringHostToController,
    ReadyToExecute,
    Executing,
    Completing,
    /// An Asynchronous Event Request kept until an event.
    Held,
}

#[derive(Clone, Copy, Debug)]
enum Data {
    None,
    Chunk(Chunk),
    /// In-capsule data at this offset of the receive region.
    InCapsule {
        offset: usize,
    },
}

#[derive(Clone, Copy, Debug)]
struct Keyed {
    addr: u64,
    key: u32,
    invalidate: bool,
}

#[derive(Clone, Copy, Debug)]
struct Request {
    state: ReqState,
    qpn: u32,
    sqe: Sqe,
    kind: Kind,
    data: Data,
    /// Bytes of data the command moves (either direction).
    data_len: u32,
    /// Controller-to-host bytes to RDMA WRITE on completion.
    c2h_len: u32,
    keyed: Option<Keyed>,
    status: Status,
    dw0: u32,
    dw1: u32,
    io_pending: u32,
    /// A write-through Write Zeroes: `fdatasync` once the zeroing completes.
    sync_after: bool,
    /// The QP went away while io_uring still held the request.
    orphan: bool,
}

impl Request {
    fn free() -> Self {
        Request {
            state: ReqState::Free,
            qpn: 0,
            sqe: Sqe::new(0, 0),
            kind: Kind::Admin,
            data: Data::None,
            data_len: 0,
            c2h_len: 0,
            keyed: None,
            status: Status::SUCCESS,
            dw0: 0,
            dw1: 0,
            io_pending: 0,
            sync_after: false,
            orphan: false,
        }
    }
}

struct Queue {
    qp: Qp,
    /// The host's address and QPN, for the operator's log.
    remote: std::net::IpAddr,
    remote_qpn: u32,
    qid: u16,
    sq_size: u16,
    sqhd: u16,
    ctrl: Option<Arc<Controller>>,
    /// Commands of this queue received and not yet answered (no response posted).
    outstanding: u16,
    /// The QP's first error completion was reported to the control thread.
    error_reported: bool,
}

impl Queue {
    /// The queue's identity in the operator's log.
    fn peer(&self, qpn: u32) -> QueuePeer {
        QueuePeer {
            host_addr: self.remote,
            host_qpn: self.remote_qpn,
            qpn,
            qid: self.qid,
        }
    }
}

const WR_KIND_READ: u64 = 1;
const WR_KIND_RESP: u64 = 2;
const WR_KIND_WRITE: u64 = 3;
const SQE_LEN: usize = 64;
/// Bytes of one response slot (a CQE is 16; 64 keeps slots cache-line aligned).
const RESP_SLOT: usize = 64;

/// One poll group of the target.
pub struct PollGroup {
    ctx: Context,
    cq: Cq,
    srq: Srq,
    pd: Pd,
    recv_mr: Mr,
    resp_mr: Mr,
    data_mr: Mr,
    pool: BufferPool,
    ring: Ring,
    recv_stride: usize,
    cfg: PollGroupConfig,
    reg: Arc<Registry>,
    queues: HashMap<u32, Queue>,
    reqs: Vec<Request>,
    need_buffer: VecDeque<usize>,
    ready: VecDeque<usize>,
    cmds: Receiver<GroupCmd>,
    /// QPNs whose QP went to the error state, for the control thread to disconnect
    /// (DREQ) and destroy.
    qp_errors: Sender<QpErrorReport>,
    /// This poll group's index (its receive queue on the device).
    index: u32,
    counters: Arc<PollGroupCounters>,
    wcs: Vec<WorkCompletion>,
    io_done: Vec<(u64, i32)>,
    /// The process budget's charge for the ring's fixed buffers; declared after `ring`,
    /// so it is released after the ring's drop unregistered them.
    _pinned: PinCharge<'static>,
}

impl PollGroupConfig {
    /// Bytes of the receive region (one SQE plus in-capsule data per SRQ buffer).
    pub fn recv_region_bytes(&self) -> usize {
        self.srq_depth as usize * (SQE_LEN + self.in_capsule_bytes as usize)
    }
}

/// A poll group's report that one of its QPs went to the error state (a work request
/// failed: retries exhausted, a remote access or protocol error). The control thread
/// answers with a CM DREQ and destroys the queue (NVMe RDMA Transport: the queue's
/// connection is over; the host reconnects).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QpErrorReport {
    /// The poll group's index.
    pub group: u32,
    /// The failed QP.
    pub qpn: u32,
}

/// Errors setting up a poll group.
#[derive(Debug, thiserror::Error)]
pub enum PollGroupError {
    #[error("verbs: {0}")]
    Verbs(#[from] transport::verbs::VerbsError),
    #[error("io_uring: {0}")]
    Io(#[from] std::io::Error),
    /// Registering the fixed buffers would exceed `RLIMIT_MEMLOCK` (or the kernel refused).
    #[error("{0}")]
    Memlock(#[from] MemlockError),
}

impl PollGroup {
    /// Builds poll group `index` of `dev`: its context, SRQ, slabs and ring, with the
    /// namespace files `files` registered as io_uring fixed files in that order.
    /// Commands come in on `cmds`; QPs that fail are reported on `qp_errors`.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        dev: &Arc<SoftDevice>,
        index: u32,
        cfg: PollGroupConfig,
        reg: Arc<Registry>,
        files: &[std::os::fd::RawFd],
        cmds: Receiver<GroupCmd>,
        qp_errors: Sender<QpErrorReport>,
        counters: Arc<PollGroupCounters>,
    ) -> Result<PollGroup, PollGroupError> {
        let mut ctx = dev.open_context(index)?;
        // The poll loop polls again at once (and `Context::wait` flushes first), so
        // the ACK of a capsule can leave with its response: one `sendmmsg` per read.
        ctx.set_deferred_transmit(true);
        let pd = dev.alloc_pd();
        let recv_stride = SQE_LEN + cfg.in_capsule_bytes as usize;
        let n = cfg.srq_depth as usize;
        let recv_mr = dev.reg_mr(pd, cfg.recv_region_bytes(), AccessFlags::LOCAL_WRITE)?;
        let resp_mr = dev.reg_mr(pd, n * RESP_SLOT, AccessFlags::LOCAL_WRITE)?;
        let data_mr = dev.reg_mr(pd, cfg.data_slab_bytes, AccessFlags::LOCAL_WRITE)?;
        // SAFETY: the slab lives in data_mr, owned by this poll group for its lifetime.
        let pool = unsafe {
            BufferPool::new(
                data_mr.as_ptr(),
                data_mr.len(),
                4096,
                cfg.max_io_bytes as usize,
            )
        }
        .map_err(|e| std::io::Error::other(format!("data slab: {e}")))?;
        let mut ring = Ring::new(cfg.ring_entries)?;
        let regions = [
            (data_mr.as_ptr(), data_mr.len()),
            (recv_mr.as_ptr(), recv_mr.len()),
        ];
        let estimate = regions
            .iter()
            .map(|&(p, len)| pinned_span_bytes(p as usize, len))
            .sum();
        let what = format!(
            "io_uring fixed buffers (data slab {} + receive region {})",
            Bytes(data_mr.len() as u64),
            Bytes(recv_mr.len() as u64)
        );
        let ((), pinned) = PinBudget::process().pin_with(
            &what,
            estimate,
            Some(crate::memory::PIN_LESS_HINT),
            // SAFETY: the kernel keeps the registered pages pinned until the ring drops
            // (and unregisters) them, so no fixed read or write can reach freed memory.
            || unsafe { ring.register_buffers(&regions) },
        )?;
        if !files.is_empty() {
            ring.register_files(files)?;
        }
        let cq = ctx.create_cq(4 * cfg.srq_depth + 64);
        let srq = ctx.create_srq(pd, cfg.srq_depth);
        let mut g = PollGroup {
            ctx,
            cq,
            srq,
            pd,
            recv_mr,
            resp_mr,
            data_mr,
            pool,
            ring,
            recv_stride,
            cfg,
            reg,
            queues: HashMap::new(),
            reqs: vec![Request::free(); n],
            need_buffer: VecDeque::new(),
            ready: VecDeque::new(),
            cmds,
            qp_errors,
            index,
            counters,
            wcs: vec![WorkCompletion::new(0, WcStatus::Success, WcOpcode::Recv, 0); 64],
            io_done: Vec::with_capacity(64),
            _pinned: pinned,
        };
        for i in 0..n {
            g.post_recv(i)?;
        }
        Ok(g)
    }

    fn post_recv(&mut self, i: usize) -> Result<(), transport::verbs::VerbsError> {
        let sge = Sge {
            addr: self.recv_mr.addr() + (i * self.recv_stride) as u64,
            length: self.recv_stride as u32,
            lkey: self.recv_mr.lkey(),
        };
        self.ctx.post_srq_recv(
            self.srq,
            &RecvWr {
                wr_id: i as u64,
                sg_list: SgList::one(sge),
            },
        )
    }

    /// Runs the poll loop until [`GroupCmd::Shutdown`] (or the command channel closes).
    pub fn run(mut self) {
        let mut idle = 0u32;
        loop {
            let mut work = 0usize;
            loop {
                match self.cmds.try_recv() {
                    Ok(GroupCmd::Shutdown)
                    | Err(crossbeam::channel::TryRecvError::Disconnected) => return,
                    Ok(cmd) => {
                        self.handle_cmd(cmd);
                        work += 1;
                    }
                    Err(crossbeam::channel::TryRecvError::Empty) => break,
                }
            }
            work += self.poll_once();
            // Busy-poll while there is work; when idle for a while (longer than the
            // gap between a QD1 host's commands), let other runnable threads have the
            // core (sched_yield returns at once when nobody else wants it, but gives a
            // busy core away for a whole tick), and with no connection at all, sleep
            // until a packet arrives.
            if work == 0 {
                idle += 1;
                if self.queues.is_empty() && idle > 1000 {
                    self.ctx.wait(std::time::Duration::from_millis(10));
                } else if idle >= IDLE_ROUNDS_BEFORE_YIELD && idle.is_multiple_of(64) {
                    std::thread::yield_now();
                }
            } else {
                idle = 0;
            }
        }
    }

    /// One round: transport completions, io_uring completions, queued requests, submit.
    pub fn poll_once(&mut self) -> usize {
        let mut work = 0;
        let mut wcs = std::mem::take(&mut self.wcs);
        let n = self.ctx.poll_cq(self.cq, &mut wcs);
        for wc in &wcs[..n] {
            self.handle_wc(wc);
        }
        work += n;
        self.wcs = wcs;
        work += self.reap_io();
        work += self.process_queued();
        match self.ring.submit() {
            // Buffered reads of cached pages complete inside the submit: answer them
            // now, before the next receive poll sends the capsules' deferred ACKs on
            // their own.
            Ok(k) if k > 0 => work += self.reap_io(),
            Ok(_) => {}
            Err(e) => tracing::warn!("io_uring submit: {e}"),
        }
        work
    }

    /// Handles the io_uring completions ready now; returns how many.
    fn reap_io(&mut self) -> usize {
        let mut done = std::mem::take(&mut self.io_done);
        self.ring.poll_completions(|ud, res| done.push((ud, res)));
        for &(ud, res) in &done {
            self.handle_io_completion(ud as usize, res);
        }
        let n = done.len();
        done.clear();
        self.io_done = done;
        n
    }

    fn handle_cmd(&mut self, cmd: GroupCmd) {
        match cmd {
            GroupCmd::NewQueue(q, reply) => {
                let res = self.new_queue(&q);
                let qpn = res.as_ref().ok().map(|&(qpn, _)| qpn);
                if reply.send(res.map_err(|e| e.to_string())).is_err() {
                    // The control thread gave up waiting (and rejected the connection).
                    if let Some(qpn) = qpn {
                        self.destroy_queue(qpn, QueueEnd::SetupAbandoned);
                    }
                }
            }
            GroupCmd::DestroyQueue { qpn, why } => self.destroy_queue(qpn, why),
            GroupCmd::QueuesOf { cntlid, reply } => {
                let qpns = self
                    .queues
                    .iter()
                    .filter(|(_, q)| q.ctrl.as_ref().is_some_and(|c| c.cntlid == cntlid))
                    .map(|(&qpn, _)| qpn)
                    .collect();
                let _ = reply.send(qpns);
            }
            GroupCmd::Shutdown => {}
        }
    }

    fn new_queue(&mut self, q: &NewQueue) -> Result<(u32, u32), transport::verbs::VerbsError> {
        let sq = q.sq_size as u32;
        let cap = QpCap {
            // Up to 2 x SQ-size commands of 2 WRs each (WRITE + SEND, or READ + SEND).
            max_send_wr: 4 * sq + 16,
            max_recv_wr: 0,
            max_send_sge: 2,
            max_recv_sge: 1,
            max_inline_data: 0,
        };
        let qp = self.ctx.create_qp(&QpInitAttr {
            pd: self.pd,
            send_cq: self.cq,
            recv_cq: self.cq,
            srq: Some(self.srq),
            cap,
        })?;
        match self.bring_up(qp, q) {
            Ok(psn) => {
                self.queues.insert(
                    qp.qpn(),
                    Queue {
                        qp,
                        remote: q.remote,
                        remote_qpn: q.remote_qpn,
                        qid: q.qid,
                        sq_size: q.sq_size.max(1),
                        sqhd: 0,
                        ctrl: None,
                        outstanding: 0,
                        error_reported: false,
                    },
                );
                self.counters.srq_qps.fetch_add(1, Ordering::Relaxed);
                Ok((qp.qpn(), psn))
            }
            Err(e) => {
                let _ = self.ctx.destroy_qp(qp);
                Err(e)
            }
        }
    }

    /// Reset -> Init -> RTR -> RTS for a new queue's QP; returns the PSN for the REP's
    /// Starting PSN, which is the QP's expected receive PSN (the host sends from it).
    fn bring_up(&mut self, qp: Qp, q: &NewQueue) -> Result<u32, transport::verbs::VerbsError> {
        let psn = rand::random::<u32>() & 0x00FF_FFFF;
        let mtu = q.path_mtu.min(self.ctx.device().path_mtu());
        self.ctx.modify_qp(
            qp,
            &QpAttr {
                qp_state: Some(QpState::Init),
                qp_access_flags: Some(AccessFlags::LOCAL_WRITE),
                ..Default::default()
            },
        )?;
        self.ctx.modify_qp(
            qp,
            &QpAttr {
                qp_state: Some(QpState::Rtr),
                path_mtu: Some(mtu),
                dest_qp_num: Some(q.remote_qpn),
                rq_psn: Some(psn),
                max_dest_rd_atomic: Some(0),
                min_rnr_timer: Some(1),
                ah_attr: Some(AhAttr {
                    dest: q.remote,
                    flow_label: q.flow_label,
                    hop_limit: 64,
                    traffic_class: 0,
                }),
                selective_retransmit: Some(q.selective_retransmit),
                ..Default::default()
            },
        )?;
        self.ctx.modify_qp(
            qp,
            &QpAttr {
                qp_state: Some(QpState::Rts),
                sq_psn: Some(q.remote_psn),
                timeout: Some(crate::DEFAULT_ACK_TIMEOUT),
                retry_cnt: Some(7),
                rnr_retry: Some(7),
                max_rd_atomic: Some(q.ord.clamp(1, 16)),
                ..Default::default()
            },
        )?;
        Ok(psn)
    }

    /// Reports `qpn`'s first error completion to the control thread.
    fn report_qp_error(&mut self, qpn: u32) {
        let group = self.index;
        if let Some(q) = self.queues.get_mut(&qpn) {
            if !q.error_reported {
                q.error_reported = true;
                tracing::info!("QP {qpn:#x} (queue {}) went to the error state", q.qid);
                let _ = self.qp_errors.send(QpErrorReport { group, qpn });
            }
        }
    }

    fn destroy_queue(&mut self, qpn: u32, why: QueueEnd) {
        let Some(q) = self.queues.remove(&qpn) else {
            return;
        };
        oplog::queue_closed(&q.peer(qpn), q.ctrl.as_deref(), why);
        // To Error first: the provider flushes the QP's work, including a receive
        // buffer a half-received SEND holds, whose flush completion re-posts it to the
        // SRQ (otherwise it would be lost with the QP).
        let to_error = QpAttr {
            qp_state: Some(QpState::Error),
            ..Default::default()
        };
        let _ = self.ctx.modify_qp(q.qp, &to_error);
        let _ = self.ctx.destroy_qp(q.qp);
        if let Some(ctrl) = &q.ctrl {
            if q.qid == 0 {
                ctrl.drain_aers();
                self.reg.remove_controller(ctrl.cntlid);
            } else {
                ctrl.release_queue(q.qid);
            }
        }
        for i in 0..self.reqs.len() {
            let r = self.reqs[i];
            if r.qpn != qpn || r.state == ReqState::Free {
                continue;
            }
            if r.state == ReqState::Executing {
                self.reqs[i].orphan = true;
            } else {
                self.release(i);
            }
        }
        self.need_buffer
            .retain(|&i| self.reqs[i].state != ReqState::Free);
        self.ready.retain(|&i| self.reqs[i].state != ReqState::Free);
    }

    fn release(&mut self, i: usize) {
        if let Data::Chunk(c) = self.reqs[i].data {
            let _ = self.pool.free(c);
        }
        // A request that was answered (Completing) already left its queue's count.
        if !matches!(self.reqs[i].state, ReqState::Free | ReqState::Completing) {
            if let Some(q) = self.queues.get_mut(&self.reqs[i].qpn) {
                q.outstanding = q.outstanding.saturating_sub(1);
            }
        }
        self.reqs[i] = Request::free();
        if let Err(e) = self.post_recv(i) {
            tracing::error!("re-posting receive buffer {i}: {e}");
        }
    }

    fn handle_wc(&mut self, wc: &WorkCompletion) {
        if wc.opcode == WcOpcode::Recv {
            let i = wc.wr_id as usize;
            if i >= self.reqs.len() {
                return;
            }
            if wc.status != WcStatus::Success {
                let _ = self.post_recv(i);
                return;
            }
            self.start_request(i, wc.qp_num, wc.byte_len as usize);
            return;
        }
        let i = (wc.wr_id >> 8) as usize;
        let kind = wc.wr_id & 0xFF;
        if i >= self.reqs.len()
            || self.reqs[i].state == ReqState::Free
            || self.reqs[i].qpn != wc.qp_num
        {
            return;
        }
        if wc.status != WcStatus::Success {
            // The QP is in the error state: the control thread disconnects (DREQ) and
            // destroys it.
            self.report_qp_error(wc.qp_num);
            tracing::debug!(
                "request {i}: work completion {} on QP {:#x}; QP counters {:?}",
                wc.status,
                wc.qp_num,
                self.ctx.qp_counters(Qp(wc.qp_num))
            );
            if self.reqs[i].state != ReqState::Executing {
                self.release(i);
            } else {
                self.reqs[i].orphan = true;
            }
            return;
        }
        match kind {
            WR_KIND_READ => {
                self.reqs[i].state = ReqState::ReadyToExecute;
                self.ready.push_back(i);
            }
            WR_KIND_RESP => self.release(i),
            _ => {}
        }
    }

    fn recv_slice(&self, i: usize, offset: usize, len: usize) -> &[u8] {
        let start = i * self.recv_stride + offset;
        // SAFETY: inside receive buffer i, which the SRQ handed back to us (no DMA into it
        // until it is re-posted).
        unsafe { std::slice::from_raw_parts(self.recv_mr.as_ptr().add(start), len) }
    }

    fn start_request(&mut self, i: usize, qpn: u32, len: usize) {
        self.counters.capsules.fetch_add(1, Ordering::Relaxed);
        let Some(q) = self.queues.get_mut(&qpn) else {
            let _ = self.post_recv(i);
            return;
        };
        if len < SQE_LEN {
            // Not even a command: nothing to answer to.
            let _ = self.post_recv(i);
            return;
        }
        if q.outstanding >= 2 * q.sq_size {
            // Unanswered commands: a host that respects SQ flow control has fewer than
            // SQ size. Twice as many means it ignores flow control: its capsule is
            // dropped and counted so it cannot take the SRQ or the send queue from the
            // others.
            let earlier = self.counters.sq_overflows.fetch_add(1, Ordering::Relaxed);
            if earlier == 0 {
                tracing::warn!(
                    "queue {} (QP {qpn:#x}): capsule beyond twice the SQ size dropped \
                     (the host ignores SQ flow control; counted in sq_overflows)",
                    q.qid
                );
            }
            let _ = self.post_recv(i);
            return;
        }
        q.outstanding += 1;
        q.sqhd = (q.sqhd + 1) % q.sq_size;
        let qid = q.qid;
        let mut sqe_bytes = [0u8; 64];
        sqe_bytes.copy_from_slice(self.recv_slice(i, 0, SQE_LEN));
        let sqe = Sqe::from_array(sqe_bytes);
        let mut r = Request::free();
        r.qpn = qpn;
        r.sqe = sqe;
        r.state = ReqState::ReadyToExecute;
        self.reqs[i] = r;
        let ctrl = self.queues.get(&qpn).and_then(|q| q.ctrl.as_deref());
        match classify(&sqe, qid, ctrl, self.cfg.max_io_bytes) {
            Ok((kind, dir)) => {
                self.reqs[i].kind = kind;
                if let Err(st) = self.setup_data(i, dir, len) {
                    self.complete(i, st);
                    return;
                }
                match self.reqs[i].state {
                    ReqState::NeedBuffer => self.need_buffer.push_back(i),
                    ReqState::ReadyToExecute => self.ready.push_back(i),
                    _ => {}
                }
            }
            Err(st) => self.complete(i, st),
        }
        self.process_queued();
    }

    /// Checks the SGL against the data the command moves and sets up its buffer.
    fn setup_data(
        &mut self,
        i: usize,
        dir: DataDirection,
        capsule_len: usize,
    ) -> Result<(), Status> {
        let sqe = self.reqs[i].sqe;
        let (need, h2c) = match dir {
            DataDirection::None => {
                // Linux sends a zero-length keyed SGL; the key (if any) is invalidated on reply.
                if let Ok(Sgl::KeyedDataBlock {
                    addr,
                    key,
                    invalidate,
                    len,
                }) = sqe.sgl().decode()
                {
                    if invalidate && key != 0 {
                        self.reqs[i].keyed = Some(Keyed {
                            addr,
                            key,
                            invalidate,
                        });
                    }
                    let _ = len;
                }
                return Ok(());
            }
            DataDirection::HostToController(n) => (n, true),
            DataDirection::ControllerToHost(n) => (n, false),
        };
        let sgl = sqe
            .sgl()
            .decode()
            .map_err(|_| Status::generic(GenericStatus::SglDescriptorTypeInvalid).with_dnr())?;
        match sgl {
            Sgl::KeyedDataBlock {
                addr,
                len,
                key,
                invalidate,
            } => {
                self.reqs[i].keyed = Some(Keyed {
                    addr,
                    key,
                    invalidate,
                });
                if (len as usize) < need && h2c {
                    return Err(Status::generic(GenericStatus::DataSglLengthInvalid).with_dnr());
                }
                if !h2c && (len as usize) < need && !matches!(self.reqs[i].kind, Kind::Admin) {
                    return Err(Status::generic(GenericStatus::DataSglLengthInvalid).with_dnr());
                }
                // Admin data may be shorter than the structure (copy what fits, as nvmet).
                let len = if h2c { need } else { need.min(len as usize) };
                if len > self.cfg.max_io_bytes as usize {
                    return Err(Status::generic(GenericStatus::DataSglLengthInvalid).with_dnr());
                }
                self.reqs[i].data_len = len as u32;
                if !h2c {
                    self.reqs[i].c2h_len = len as u32;
                }
                if len == 0 {
                    return Ok(());
                }
                self.reqs[i].state = ReqState::NeedBuffer;
                Ok(())
            }
            Sgl::DataBlockOffset { offset, len } => {
                if !h2c {
                    return Err(Status::generic(GenericStatus::SglDescriptorTypeInvalid).with_dnr());
                }
                let avail = capsule_len - SQE_LEN;
                let end = offset.checked_add(len as u64);
                if offset as usize > avail {
                    return Err(Status::generic(GenericStatus::SglOffsetInvalid).with_dnr());
                }
                if end.is_none_or(|e| e as usize > avail) || (len as usize) < need {
                    return Err(Status::generic(GenericStatus::DataSglLengthInvalid).with_dnr());
                }
                self.reqs[i].data = Data::InCapsule {
                    offset: i * self.recv_stride + SQE_LEN + offset as usize,
                };
                self.reqs[i].data_len = need as u32;
                if matches!(self.reqs[i].kind, Kind::Io(IoCommand::Write { .. })) {
                    self.counters
                        .in_capsule_writes
                        .fetch_add(1, Ordering::Relaxed);
                }
                Ok(())
            }
            Sgl::DataBlockAddress { .. } => {
                Err(Status::generic(GenericStatus::SglDescriptorTypeInvalid).with_dnr())
            }
        }
    }

    /// Advances queued requests: buffer allocation, then execution.
    fn process_queued(&mut self) -> usize {
        let mut work = 0;
        while let Some(&i) = self.need_buffer.front() {
            let len = self.reqs[i].data_len as usize;
            let Some(chunk) = self.pool.alloc(len) else {
                self.counters.buffer_waits.fetch_add(1, Ordering::Relaxed);
                break;
            };
            self.need_buffer.pop_front();
            work += 1;
            self.reqs[i].data = Data::Chunk(chunk);
            let is_h2c = self.reqs[i].c2h_len == 0;
            if is_h2c {
                self.start_host_to_controller(i, chunk);
            } else {
                self.reqs[i].state = ReqState::ReadyToExecute;
                self.ready.push_back(i);
            }
        }
        // One pass over what is ready now: a request that finds the io_uring ring full
        // goes back on the queue and waits for the next round (after completions are
        // reaped), instead of being retried here forever.
        for _ in 0..self.ready.len() {
            let Some(i) = self.ready.pop_front() else {
                break;
            };
            work += 1;
            if self.reqs[i].state == ReqState::ReadyToExecute {
                self.execute(i);
            }
        }
        work
    }

    fn start_host_to_controller(&mut self, i: usize, chunk: Chunk) {
        let r = self.reqs[i];
        let Some(k) = r.keyed else { return };
        if matches!(r.kind, Kind::Io(IoCommand::Write { .. })) {
            self.counters
                .rdma_read_writes
                .fetch_add(1, Ordering::Relaxed);
        }
        let qp = Qp(r.qpn);
        let wr = SendWr {
            wr_id: ((i as u64) << 8) | WR_KIND_READ,
            op: SendOp::RdmaRead {
                remote_addr: k.addr,
                rkey: k.key,
            },
            sg_list: SgList::one(Sge {
                addr: self.data_mr.addr() + chunk.offset as u64,
                length: r.data_len,
                lkey: self.data_mr.lkey(),
            }),
            flags: SendFlags::SIGNALED,
        };
        self.reqs[i].state = ReqState::TransferringHostToController;
        if let Err(e) = self.ctx.post_send(qp, &wr) {
            tracing::debug!("RDMA READ post: {e}");
            self.complete(i, Status::generic(GenericStatus::DataTransferError));
        }
    }

    /// The request's data bytes (host-to-controller data, or the buffer for
    /// controller-to-host data).
    fn data_ptr(&self, i: usize) -> Option<(*mut u8, usize, u16)> {
        let r = &self.reqs[i];
        match r.data {
            Data::None => None,
            Data::Chunk(c) => Some((self.pool.ptr(&c), r.data_len as usize, 0)),
            // SAFETY: offset is inside the receive region (checked in setup_data).
            Data::InCapsule { offset } => Some((
                unsafe { self.recv_mr.as_ptr().add(offset) },
                r.data_len as usize,
                1,
            )),
        }
    }

    fn execute(&mut self, i: usize) {
        let r = self.reqs[i];
        let now = Instant::now();
        let qpn = r.qpn;
        match r.kind {
            Kind::Connect => {
                let data = match self.data_ptr(i) {
                    // SAFETY: the buffer holds data_len bytes that arrived from the host.
                    Some((p, n, _)) => unsafe { std::slice::from_raw_parts(p, n) }.to_vec(),
                    None => Vec::new(),
                };
                // The admin path may copy; the I/O path never does (see the counter's doc).
                self.counters
                    .data_bytes_copied
                    .fetch_add(data.len() as u64, Ordering::Relaxed);
                let qid = self.queues.get(&qpn).map(|q| q.qid).unwrap_or(u16::MAX);
                let connect_qid = nvme::fabrics::ConnectCommand::from_sqe(&r.sqe)
                    .map(|c| c.qid())
                    .unwrap_or(u16::MAX);
                if self.queues.get(&qpn).is_some_and(|q| q.ctrl.is_some()) {
                    // Already connected (nvmet: "queue already connected!"): nothing
                    // changes, no second controller.
                    self.complete(
                        i,
                        Status::command_specific(
                            nvme::status::CommandSpecificStatus::ConnectControllerBusy,
                        )
                        .with_dnr(),
                    );
                    return;
                }
                if connect_qid != qid {
                    self.reqs[i].dw0 = 42;
                    self.complete(
                        i,
                        Status::command_specific(
                            nvme::status::CommandSpecificStatus::ConnectInvalidParameters,
                        )
                        .with_dnr(),
                    );
                    return;
                }
                let outcome = fabrics::connect(&self.reg, &r.sqe, &data, now);
                if let Some(q) = self.queues.get(&qpn) {
                    oplog::fabrics_connect(&q.peer(qpn), &r.sqe, &data, &outcome);
                }
                match outcome {
                    ConnectOutcome::Accepted { ctrl, dw0 } => {
                        if let Some(q) = self.queues.get_mut(&qpn) {
                            q.ctrl = Some(ctrl);
                        }
                        self.reqs[i].dw0 = dw0;
                        self.complete(i, Status::SUCCESS);
                    }
                    ConnectOutcome::Refused { status, dw0 } => {
                        self.reqs[i].dw0 = dw0;
                        self.complete(i, status);
                    }
                }
            }
            Kind::PropertyGet => {
                let ctrl = self.queues.get(&qpn).and_then(|q| q.ctrl.clone());
                match fabrics::property_get(ctrl.as_deref(), &r.sqe) {
                    Ok(v) => {
                        self.reqs[i].dw0 = v as u32;
                        self.reqs[i].dw1 = (v >> 32) as u32;
                        self.complete(i, Status::SUCCESS)
                    }
                    Err(st) => self.complete(i, st),
                }
            }
            Kind::PropertySet => {
                let ctrl = self.queues.get(&qpn).and_then(|q| q.ctrl.clone());
                let st = fabrics::property_set(ctrl.as_deref(), &r.sqe)
                    .err()
                    .unwrap_or(Status::SUCCESS);
                self.complete(i, st);
            }
            Kind::Admin => {
                let Some(ctrl) = self.queues.get(&qpn).and_then(|q| q.ctrl.clone()) else {
                    self.complete(i, Status::generic(GenericStatus::CommandSequenceError));
                    return;
                };
                let (ptr, len) = match self.data_ptr(i) {
                    Some((p, n, _)) => (p, n),
                    None => (std::ptr::NonNull::<u8>::dangling().as_ptr(), 0),
                };
                // SAFETY: the request's own buffer (or empty).
                let out = unsafe { std::slice::from_raw_parts_mut(ptr, len) };
                match admin::handle(&self.reg, &ctrl, &r.sqe, out, now) {
                    AdminOutcome::Done {
                        status,
                        dw0,
                        data_len,
                    } => {
                        self.reqs[i].dw0 = dw0;
                        if self.reqs[i].c2h_len > 0 {
                            self.reqs[i].c2h_len =
                                data_len.min(self.reqs[i].c2h_len as usize) as u32;
                        }
                        self.complete(i, status);
                    }
                    AdminOutcome::Hold => self.reqs[i].state = ReqState::Held,
                }
                self.complete_events(qpn, &ctrl);
            }
            Kind::Io(cmd) => self.execute_io(i, cmd),
        }
    }

    /// Completes held Asynchronous Event Requests of `qpn` for which the controller
    /// has an event (NVMe Base 2.x §5.2).
    fn complete_events(&mut self, qpn: u32, ctrl: &Arc<Controller>) {
        while let Some(aer) = ctrl.take_aer() {
            let held = (0..self.reqs.len()).find(|&j| {
                let r = &self.reqs[j];
                r.state == ReqState::Held && r.qpn == qpn && r.sqe.cid() == aer.cid
            });
            if let Some(j) = held {
                self.reqs[j].dw0 = aer.dw0;
                self.complete(j, Status::SUCCESS);
            }
        }
    }

    fn file_index(&self, i: usize) -> Option<u32> {
        self.namespace(i).map(|(n, _)| n.file_index)
    }

    /// The namespace request `i` names, and its controller.
    fn namespace(&self, i: usize) -> Option<(&crate::subsystem::NamespaceEntry, &Controller)> {
        let r = &self.reqs[i];
        let ctrl = self.queues.get(&r.qpn)?.ctrl.as_deref()?;
        Some((ctrl.subsys.namespace(r.sqe.nsid())?, ctrl))
    }

    /// Whether a write of request `i` must be durable before it completes (FUA, or
    /// the controller's volatile write cache is off); true when in doubt.
    fn write_through(&self, i: usize, fua: bool) -> bool {
        self.namespace(i).is_none_or(|(_, c)| c.write_through(fua))
    }

    fn execute_io(&mut self, i: usize, cmd: IoCommand) {
        let Some(fi) = self.file_index(i) else {
            self.complete(
                i,
                Status::generic(GenericStatus::InvalidNamespaceOrFormat).with_dnr(),
            );
            return;
        };
        let ud = i as u64;
        let res = match cmd {
            IoCommand::Read { offset, len } => {
                let Some((p, _, bi)) = self.data_ptr(i) else {
                    self.complete(i, Status::SUCCESS);
                    return;
                };
                self.counters
                    .rdma_write_reads
                    .fetch_add(1, Ordering::Relaxed);
                self.reqs[i].io_pending = 1;
                self.ring.read_fixed(fi, bi, p, len, offset, ud)
            }
            IoCommand::Write { offset, len, fua } => {
                let Some((p, _, bi)) = self.data_ptr(i) else {
                    self.complete(i, Status::SUCCESS);
                    return;
                };
                self.reqs[i].io_pending = 1;
                let dsync = self.write_through(i, fua);
                self.ring.write_fixed(fi, bi, p, len, offset, dsync, ud)
            }
            IoCommand::Flush => {
                self.reqs[i].io_pending = 1;
                self.ring.fsync(fi, true, ud)
            }
            IoCommand::WriteZeroes { offset, len, fua } => {
                self.reqs[i].io_pending = 1;
                self.reqs[i].sync_after = self.write_through(i, fua);
                self.ring.fallocate(
                    fi,
                    libc::FALLOC_FL_ZERO_RANGE | libc::FALLOC_FL_KEEP_SIZE,
                    offset,
                    len,
                    ud,
                )
            }
            IoCommand::DatasetManagement { ranges, deallocate } => {
                if !deallocate {
                    self.complete(i, Status::SUCCESS);
                    return;
                }
                let Some((p, n, _)) = self.data_ptr(i) else {
                    self.complete(
                        i,
                        Status::generic(GenericStatus::DataSglLengthInvalid).with_dnr(),
                    );
                    return;
                };
                // SAFETY: the request's own data buffer.
                let data = unsafe { std::slice::from_raw_parts(p, n) };
                let (nlb, bs) = {
                    let r = &self.reqs[i];
                    let q = &self.queues[&r.qpn];
                    let ns = q
                        .ctrl
                        .as_ref()
                        .and_then(|c| c.subsys.namespace(r.sqe.nsid()));
                    match ns {
                        Some(ns) => (ns.ns.nlb(), ns.ns.block_size() as u64),
                        None => (0, 512),
                    }
                };
                let list = match io::parse_dsm_ranges(data, ranges, nlb) {
                    Ok(l) => l,
                    Err(st) => {
                        self.complete(i, st);
                        return;
                    }
                };
                let list: Vec<_> = list.into_iter().filter(|r| r.nlb > 0).collect();
                if list.is_empty() {
                    self.complete(i, Status::SUCCESS);
                    return;
                }
                if list.len() > self.ring.capacity() {
                    self.complete(i, Status::generic(GenericStatus::InvalidField).with_dnr());
                    return;
                }
                if self.ring.capacity() - self.ring.in_flight() < list.len() {
                    // Not all ranges fit now: queue none, try again next round.
                    self.ready.push_back(i);
                    return;
                }
                self.reqs[i].io_pending = list.len() as u32;
                let mut res = Ok(());
                for rg in list {
                    let mode = libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE;
                    res = self
                        .ring
                        .fallocate(fi, mode, rg.slba * bs, rg.nlb as u64 * bs, ud);
                    if res.is_err() {
                        break;
                    }
                }
                res
            }
        };
        self.reqs[i].state = ReqState::Executing;
        if res.is_err() {
            // Ring full: try again on the next round (after a submit frees entries).
            // Operations already queued for this request complete normally.
            self.reqs[i].state = ReqState::ReadyToExecute;
            self.reqs[i].io_pending = 0;
            self.ready.push_back(i);
        }
    }

    fn handle_io_completion(&mut self, i: usize, res: i32) {
        if i >= self.reqs.len() || self.reqs[i].state != ReqState::Executing {
            return;
        }
        if res < 0 && self.reqs[i].status.is_success() {
            let status = io::errno_status(-res);
            self.reqs[i].status = status;
            if let (Some((ns, ctrl)), Kind::Io(cmd)) = (self.namespace(i), self.reqs[i].kind) {
                io::log_io_error(ns, &ctrl.subsys.nqn, &cmd, -res, status, Instant::now());
            }
        }
        let r = &mut self.reqs[i];
        if let Kind::Io(IoCommand::Read { len, .. } | IoCommand::Write { len, .. }) = r.kind {
            if res >= 0 && (res as u32) < len && r.status.is_success() {
                // Short transfer inside a checked range: the file shrank under us.
                r.status = Status::generic(GenericStatus::DataTransferError);
            }
        }
        r.io_pending = r.io_pending.saturating_sub(1);
        if r.io_pending > 0 {
            return;
        }
        if r.orphan {
            self.release(i);
            return;
        }
        if r.sync_after && r.status.is_success() {
            r.sync_after = false;
            let queued = self
                .file_index(i)
                .map(|fi| self.ring.fsync(fi, true, i as u64));
            match queued {
                Some(Ok(())) => self.reqs[i].io_pending = 1,
                // The completion just reaped freed a ring slot, so this cannot happen;
                // if it did, run the (idempotent) command again next round.
                Some(Err(_)) => {
                    self.reqs[i].state = ReqState::ReadyToExecute;
                    self.ready.push_back(i);
                }
                None => self.complete(i, Status::generic(GenericStatus::InternalError)),
            }
            return;
        }
        let st = r.status;
        self.complete(i, st);
    }

    /// Sends the response capsule: RDMA WRITE of controller-to-host data (on success),
    /// then the CQE by SEND (with Invalidate when the keyed SGL asked for it).
    fn complete(&mut self, i: usize, status: Status) {
        let r = self.reqs[i];
        let Some(q) = self.queues.get_mut(&r.qpn) else {
            self.release(i);
            return;
        };
        // Answered: the command leaves the queue's count now, as the host frees its SQ
        // slot on this CQE. Its receive buffer stays held until the response SEND
        // completes, which can take a while behind an RDMA READ under repair (send
        // completions come in order); counting it until then would drop the host's
        // next, legitimate capsules.
        q.outstanding = q.outstanding.saturating_sub(1);
        if !status.is_success() {
            self.counters
                .error_completions
                .fetch_add(1, Ordering::Relaxed);
        }
        let mut cqe = Cqe::new(r.sqe.cid(), q.qid, q.sqhd, status, r.dw0);
        cqe.set_dw1(r.dw1);
        self.resp_mr.write(i * RESP_SLOT, &cqe.to_array());
        let qp = q.qp;
        self.reqs[i].state = ReqState::Completing;
        let mut wrs = [SendWr {
            wr_id: 0,
            op: SendOp::Send,
            sg_list: SgList::new(),
            flags: SendFlags::empty(),
        }; 2];
        let mut n = 0;
        if status.is_success() && r.c2h_len > 0 {
            if let (Some(k), Some((p, _, _))) = (r.keyed, self.data_ptr(i)) {
                wrs[n] = SendWr {
                    wr_id: ((i as u64) << 8) | WR_KIND_WRITE,
                    op: SendOp::RdmaWrite {
                        remote_addr: k.addr,
                        rkey: k.key,
                    },
                    sg_list: SgList::one(Sge {
                        addr: p as u64,
                        length: r.c2h_len,
                        lkey: self.data_mr.lkey(),
                    }),
                    flags: SendFlags::empty(),
                };
                n += 1;
            }
        }
        let op = match r.keyed {
            Some(k) if k.invalidate => SendOp::SendWithInv {
                invalidate_rkey: k.key,
            },
            _ => SendOp::Send,
        };
        wrs[n] = SendWr {
            wr_id: ((i as u64) << 8) | WR_KIND_RESP,
            op,
            sg_list: SgList::one(Sge {
                addr: self.resp_mr.addr() + (i * RESP_SLOT) as u64,
                length: 16,
                lkey: self.resp_mr.lkey(),
            }),
            flags: SendFlags::SIGNALED,
        };
        n += 1;
        // RDMA WRITE then SEND on one QP: RC delivers the data before the response.
        if self.ctx.post_send_list(qp, &wrs[..n]).is_err() {
            self.release(i);
        }
    }

    /// The group's verbs context (tests read its device counters).
    pub fn context(&self) -> &Context {
        &self.ctx
    }
}
