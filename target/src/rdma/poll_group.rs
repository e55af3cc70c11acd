//! The poll group: the driver of a [`RequestCore`]. It owns the provider's context (one
//! CQ, one SRQ), the registered regions, the io_uring ring and the poll loop; it turns
//! completions into the core's events and carries out the core's [`Action`]s. Every
//! call into the provider is in this file: bring-up of a queue's QP, receive
//! (re)posting, the work requests of [`PollGroup::execute`], completion polling.
//!
//! Memory: a receive scatters over two SGEs, the 64-byte SQE into the SQE region and the
//! in-capsule data into the in-capsule region (io_uring fixed buffer 1, so an
//! in-capsule write goes from there to the file); a response slab holds one 16-byte CQE
//! slot per receive buffer; the data slab is the RDMA memory region that the RDMA READs
//! and WRITEs use and io_uring fixed buffer 0. A 4 KiB read goes file -> data slab
//! (io_uring) -> wire (RDMA WRITE gathers from the slab) with no intermediate copy.
use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use crossbeam::channel::{Receiver, Sender};
use transport::memlock::{pinned_span_bytes, Bytes, PinBudget, PinCharge};
use transport::soft::{Context, Cq, Mr, Pd, Qp, QpInitAttr, SoftDevice, Srq};
use transport::verbs::{
    AccessFlags, AhAttr, QpAttr, QpCap, QpState, RecvWr, SendFlags, SendOp, SendWr, SgList, Sge,
    VerbsError, WcOpcode, WcStatus, WorkCompletion,
};

use super::action::{Action, Buf, IoOp, RegionId, Response};
use super::core::{CoreConfig, CoreMemory, Region, RequestCore};
use super::queue::QueueParams;
use super::wr_id::WrId;
use super::{
    GroupCmd, NewQueue, PollGroupConfig, PollGroupCounters, PollGroupError, QpErrorReport,
    RESP_SLOT, SQE_LEN,
};
use crate::oplog::QueueEnd;
use crate::subsystem::Registry;
use crate::uring::Ring;

/// Idle poll rounds (about 0.3-1 us each) before an idle poll group starts yielding
/// its core every 64 rounds.
const IDLE_ROUNDS_BEFORE_YIELD: u32 = 4096;

/// io_uring fixed buffer index of the data slab.
const DATA_SLAB_BUFFER: u16 = 0;
/// io_uring fixed buffer index of the in-capsule region.
const IN_CAPSULE_BUFFER: u16 = 1;

/// One poll group of the target.
pub struct PollGroup {
    /// Declared first so it is dropped first: it points into the regions below.
    core: RequestCore,
    ctx: Context,
    cq: Cq,
    srq: Srq,
    pd: Pd,
    sqe_mr: Mr,
    in_capsule_mr: Option<Mr>,
    resp_mr: Mr,
    data_mr: Mr,
    ring: Ring,
    cfg: PollGroupConfig,
    /// The provider's QP of each queue, by QPN.
    qps: HashMap<u32, Qp>,
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

fn region(mr: &Mr) -> Region {
    // SAFETY: the MR's memory lives as long as the poll group, which drops the core
    // first; only the core's actions hand it to the provider and the kernel.
    unsafe { Region::new(mr.as_ptr(), mr.len()) }
}

impl PollGroup {
    /// Builds poll group `index` of `dev`: its context, SRQ, regions, ring and request
    /// core, with the namespace files `files` registered as io_uring fixed files in that
    /// order, and every receive buffer posted. Commands come in on `cmds`; QPs that fail
    /// are reported on `qp_errors`.
    ///
    /// # Errors
    /// [`PollGroupError`]: the provider (context, memory registration, posting
    /// receives), io_uring (ring, file registration), or `RLIMIT_MEMLOCK` for the fixed
    /// buffers.
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
        let n = cfg.srq_depth as usize;
        let sqe_mr = dev.reg_mr(pd, n * SQE_LEN, AccessFlags::LOCAL_WRITE)?;
        let in_capsule_mr = match cfg.recv_region_bytes() {
            0 => None,
            len => Some(dev.reg_mr(pd, len, AccessFlags::LOCAL_WRITE)?),
        };
        let resp_mr = dev.reg_mr(pd, n * RESP_SLOT, AccessFlags::LOCAL_WRITE)?;
        let data_mr = dev.reg_mr(pd, cfg.data_slab_bytes, AccessFlags::LOCAL_WRITE)?;
        let mut ring = Ring::new(cfg.ring_entries)?;
        let mut regions = vec![(data_mr.as_ptr(), data_mr.len())];
        if let Some(mr) = &in_capsule_mr {
            regions.push((mr.as_ptr(), mr.len()));
        }
        let estimate = regions
            .iter()
            .map(|&(p, len)| pinned_span_bytes(p as usize, len))
            .sum();
        let what = format!(
            "io_uring fixed buffers (data slab {} + receive region {})",
            Bytes(data_mr.len() as u64),
            Bytes(cfg.recv_region_bytes() as u64)
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
        let mem = CoreMemory {
            sqes: region(&sqe_mr),
            in_capsule: in_capsule_mr.as_ref().map_or(Region::EMPTY, region),
            responses: region(&resp_mr),
            data: region(&data_mr),
        };
        let core_cfg = CoreConfig {
            srq_depth: cfg.srq_depth,
            in_capsule_bytes: cfg.in_capsule_bytes,
            max_io_bytes: cfg.max_io_bytes,
            io_slots: ring.capacity() as u32,
        };
        let core = RequestCore::new(core_cfg, mem, reg, counters.clone())
            .map_err(|e| std::io::Error::other(e.to_string()))?;
        let mut g = PollGroup {
            core,
            ctx,
            cq,
            srq,
            pd,
            sqe_mr,
            in_capsule_mr,
            resp_mr,
            data_mr,
            ring,
            cfg,
            qps: HashMap::new(),
            cmds,
            qp_errors,
            index,
            counters,
            wcs: vec![WorkCompletion::new(0, WcStatus::Success, WcOpcode::Recv, 0); 64],
            io_done: Vec::with_capacity(64),
            _pinned: pinned,
        };
        for slot in 0..cfg.srq_depth {
            g.post_recv(slot)?;
        }
        Ok(g)
    }

    /// Posts receive buffer `slot` to the SRQ: its SQE slot, then its in-capsule slot.
    fn post_recv(&mut self, slot: u32) -> Result<(), VerbsError> {
        let i = slot as usize;
        let mut sges = [Sge {
            addr: self.sqe_mr.addr() + (i * SQE_LEN) as u64,
            length: SQE_LEN as u32,
            lkey: self.sqe_mr.lkey(),
        }; 2];
        let mut n = 1;
        if let Some(mr) = &self.in_capsule_mr {
            let stride = self.cfg.in_capsule_bytes as usize;
            sges[1] = Sge {
                addr: mr.addr() + (i * stride) as u64,
                length: stride as u32,
                lkey: mr.lkey(),
            };
            n = 2;
        }
        let sg_list = SgList::from_slice(&sges[..n]).unwrap_or_default();
        self.ctx.post_srq_recv(
            self.srq,
            &RecvWr {
                wr_id: WrId::Recv { slot }.encode(),
                sg_list,
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
                if self.core.is_idle() && idle > 1000 {
                    self.ctx.wait(std::time::Duration::from_millis(10));
                } else if idle >= IDLE_ROUNDS_BEFORE_YIELD && idle.is_multiple_of(64) {
                    std::thread::yield_now();
                }
            } else {
                idle = 0;
            }
        }
    }

    /// One round: transport completions, io_uring completions, submit.
    pub fn poll_once(&mut self) -> usize {
        let mut wcs = std::mem::take(&mut self.wcs);
        let n = self.ctx.poll_cq(self.cq, &mut wcs);
        if n > 0 {
            let now = Instant::now();
            for wc in &wcs[..n] {
                self.handle_wc(wc, now);
                self.execute_actions(now);
            }
        }
        self.wcs = wcs;
        let mut work = n + self.reap_io();
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

    /// Hands the io_uring completions ready now to the core; returns how many.
    fn reap_io(&mut self) -> usize {
        let mut done = std::mem::take(&mut self.io_done);
        self.ring.poll_completions(|ud, res| done.push((ud, res)));
        let n = done.len();
        if n > 0 {
            let now = Instant::now();
            for &(ud, res) in &done {
                self.core.io_completed(ud as u32, res, now);
                self.execute_actions(now);
            }
        }
        done.clear();
        self.io_done = done;
        n
    }

    fn handle_wc(&mut self, wc: &WorkCompletion, now: Instant) {
        match WrId::decode(wc.wr_id) {
            Some(WrId::Recv { slot }) if wc.status == WcStatus::Success => self
                .core
                .capsule_received(slot, wc.qp_num, wc.byte_len, now),
            Some(WrId::Recv { slot }) => self.core.recv_failed(slot),
            Some(wr) => {
                if wc.status != WcStatus::Success {
                    tracing::debug!(
                        "{wr:?}: work completion {} on QP {:#x}; QP counters {:?}",
                        wc.status,
                        wc.qp_num,
                        self.ctx.qp_counters(Qp(wc.qp_num))
                    );
                }
                self.core.send_completed(wr, wc.qp_num, wc.status, now);
            }
            None => tracing::warn!("work completion with a wr_id we never posted: {wc:?}"),
        }
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
                let _ = reply.send(self.core.queues_of(cntlid));
            }
            GroupCmd::Shutdown => {}
        }
    }

    fn new_queue(&mut self, q: &NewQueue) -> Result<(u32, u32), VerbsError> {
        let sq = u32::from(q.sq_size);
        // Up to 2 x SQ-size commands of 2 WRs each (WRITE + SEND, or READ + SEND).
        let send_depth = 4 * sq + 16;
        let cap = QpCap {
            max_send_wr: send_depth,
            max_recv_wr: 0,
            max_send_sge: 2,
            max_recv_sge: 2,
            max_inline_data: 0,
        };
        let qp = self.ctx.create_qp(&QpInitAttr {
            pd: self.pd,
            send_cq: self.cq,
            recv_cq: self.cq,
            srq: Some(self.srq),
            cap,
        })?;
        // The ORD the REP announced; a verbs device's max_qp_init_rd_atom caps it too
        // once the poll group runs on the provider traits.
        let ord = q.ord.clamp(1, 16);
        match self.bring_up(qp, q, ord) {
            Ok(psn) => {
                self.qps.insert(qp.qpn(), qp);
                self.core.add_queue(
                    qp.qpn(),
                    &QueueParams {
                        qid: q.qid,
                        sq_size: q.sq_size.max(1),
                        remote: q.remote,
                        remote_qpn: q.remote_qpn,
                        send_depth,
                        ord,
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
    fn bring_up(&mut self, qp: Qp, q: &NewQueue, ord: u8) -> Result<u32, VerbsError> {
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
                max_rd_atomic: Some(ord),
                ..Default::default()
            },
        )?;
        Ok(psn)
    }

    /// Destroys queue `qpn`'s QP, then has the core release its requests.
    fn destroy_queue(&mut self, qpn: u32, why: QueueEnd) {
        let Some(qp) = self.qps.remove(&qpn) else {
            return;
        };
        // To Error first: the provider flushes the QP's work, including a receive
        // buffer a half-received SEND holds, whose flush completion re-posts it to the
        // SRQ (otherwise it would be lost with the QP). After the destroy no completion
        // names the QP's requests' buffers, so the core may hand them out again.
        let to_error = QpAttr {
            qp_state: Some(QpState::Error),
            ..Default::default()
        };
        let _ = self.ctx.modify_qp(qp, &to_error);
        let _ = self.ctx.destroy_qp(qp);
        let now = Instant::now();
        self.core.remove_queue(qpn, why, now);
        self.execute_actions(now);
    }

    /// Carries out the core's actions, in order, against the provider and io_uring.
    fn execute_actions(&mut self, now: Instant) {
        while let Some(a) = self.core.poll_action() {
            match a {
                Action::RepostRecv { slot } => {
                    if let Err(e) = self.post_recv(slot) {
                        tracing::error!("re-posting receive buffer {slot}: {e}");
                    }
                }
                Action::PostRdmaRead {
                    qpn,
                    wr_id,
                    local,
                    remote,
                } => {
                    let wr = SendWr {
                        wr_id: wr_id.encode(),
                        op: SendOp::RdmaRead {
                            remote_addr: remote.addr,
                            rkey: remote.rkey,
                        },
                        sg_list: SgList::one(self.sge(local)),
                        flags: SendFlags::SIGNALED,
                    };
                    if let Err(e) = self.ctx.post_send(Qp(qpn), &wr) {
                        tracing::debug!("RDMA READ post: {e}");
                        self.core.post_failed(wr_id, qpn, now);
                    }
                }
                Action::PostWriteAndSend {
                    qpn,
                    write_wr_id,
                    data,
                    remote,
                    response,
                } => {
                    let write = SendWr {
                        wr_id: write_wr_id.encode(),
                        op: SendOp::RdmaWrite {
                            remote_addr: remote.addr,
                            rkey: remote.rkey,
                        },
                        sg_list: SgList::one(self.sge(data)),
                        flags: SendFlags::empty(),
                    };
                    // RDMA WRITE then SEND on one QP: RC delivers the data before the
                    // response.
                    let wrs = [write, self.response_wr(&response)];
                    if self.ctx.post_send_list(Qp(qpn), &wrs).is_err() {
                        self.core.post_failed(response.wr_id, qpn, now);
                    }
                }
                Action::PostSend { qpn, response } => {
                    let wr = self.response_wr(&response);
                    if self.ctx.post_send(Qp(qpn), &wr).is_err() {
                        self.core.post_failed(response.wr_id, qpn, now);
                    }
                }
                Action::SubmitIo { req, op } => {
                    if self.submit_io(req, op).is_err() {
                        // The core counts the ring's slots, so this is not reached.
                        tracing::error!("io_uring ring full for request {req}");
                        self.core.io_completed(req, -libc::EBUSY, now);
                    }
                }
                Action::ReportQpError { qpn } => {
                    let _ = self.qp_errors.send(QpErrorReport {
                        group: self.index,
                        qpn,
                    });
                }
            }
        }
    }

    fn response_wr(&self, r: &Response) -> SendWr {
        let op = match r.invalidate_rkey {
            Some(rkey) => SendOp::SendWithInv {
                invalidate_rkey: rkey,
            },
            None => SendOp::Send,
        };
        SendWr {
            wr_id: r.wr_id.encode(),
            op,
            sg_list: SgList::one(self.sge(r.cqe)),
            flags: SendFlags::SIGNALED,
        }
    }

    fn mr(&self, region: RegionId) -> &Mr {
        match region {
            RegionId::Data => &self.data_mr,
            RegionId::Responses => &self.resp_mr,
            // The core hands out in-capsule buffers only when the region exists.
            RegionId::InCapsule => self.in_capsule_mr.as_ref().unwrap_or(&self.sqe_mr),
        }
    }

    fn sge(&self, b: Buf) -> Sge {
        let mr = self.mr(b.region);
        Sge {
            addr: mr.addr() + b.offset as u64,
            length: b.len,
            lkey: mr.lkey(),
        }
    }

    /// Pointer and io_uring fixed buffer index of `b`.
    fn fixed(&self, b: Buf) -> (*mut u8, u16) {
        let index = match b.region {
            RegionId::InCapsule => IN_CAPSULE_BUFFER,
            _ => DATA_SLAB_BUFFER,
        };
        // SAFETY: the core's buffers lie inside their regions.
        (unsafe { self.mr(b.region).as_ptr().add(b.offset) }, index)
    }

    fn submit_io(&mut self, req: u32, op: IoOp) -> Result<(), crate::uring::RingFull> {
        let ud = u64::from(req);
        match op {
            IoOp::Read { file, buf, offset } => {
                let (p, bi) = self.fixed(buf);
                self.ring.read_fixed(file, bi, p, buf.len, offset, ud)
            }
            IoOp::Write {
                file,
                buf,
                offset,
                dsync,
            } => {
                let (p, bi) = self.fixed(buf);
                self.ring
                    .write_fixed(file, bi, p, buf.len, offset, dsync, ud)
            }
            IoOp::Fsync { file } => self.ring.fsync(file, true, ud),
            IoOp::Fallocate {
                file,
                mode,
                offset,
                len,
            } => self.ring.fallocate(file, mode, offset, len, ud),
        }
    }

    /// The group's verbs context (tests read its device counters).
    pub fn context(&self) -> &Context {
        &self.ctx
    }
}
