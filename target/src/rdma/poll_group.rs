//! The poll group: the driver of a [`RequestCore`]. It owns the provider's context (one
//! CQ, one SRQ), the registered regions, the io_uring ring and the poll loop; it turns
//! completions into the core's events and carries out the core's [`Action`]s. Every
//! call into the provider is in this file: bring-up of a queue's QP, receive
//! (re)posting, the work requests of `PollGroup::execute_actions`, completion polling.
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
use std::time::{Duration, Instant};

use crossbeam::channel::{Receiver, Sender};
use transport::memlock::{pinned_span_bytes, Bytes, MemlockError, PinBudget, PinCharge};
use transport::rc::QpCounters;
use transport::verbs::connection::AcceptToken;
use transport::verbs::{
    AccessFlags, AsyncEvent, CmOf, ConnectionManager, Context, ContextOf, Cq, Device, DeviceOf,
    MemoryRegion, MrOf, Pd, Provider, Qp, QpAttr, QpCap, QpInitAttr, QpState, RecvWr, SendFlags,
    SendOp, SendWr, SgList, Sge, Srq, VerbsError, WcOpcode, WcStatus, WorkCompletion,
};

use super::action::{Action, Buf, IoOp, RegionId, Response};
use super::admin_recv::{AdminBuffers, ADMIN_QUEUE_BUFFERS};
use super::core::{CoreConfig, CoreMemory, Region, ReqState, RequestCore};
use super::queue::QueueParams;
use super::wr_id::WrId;
use super::{
    DrainReport, GroupCmd, NewQueue, PollGroupConfig, PollGroupCounters, PollGroupError,
    QpErrorReport, RESP_SLOT, SQE_LEN,
};
use crate::oplog::QueueEnd;
use crate::subsystem::Registry;
use crate::uring::Ring;

/// The longest sleep of an idle poll group: the control thread's commands (a new
/// queue, a teardown, shutdown) wait at most this long.
const IDLE_SLEEP_MAX: Duration = Duration::from_millis(10);
/// Poll rounds between two looks at the asynchronous events while the group is busy
/// (the verbs provider reads the device's async descriptor for each look).
const ASYNC_EVENT_ROUNDS: u32 = 256;
/// The SRQ limit is `srq_depth / SRQ_LIMIT_DIVISOR` receive buffers: below it, commands
/// in flight hold nearly every buffer and the next capsules may meet RNR NAKs.
const SRQ_LIMIT_DIVISOR: u32 = 8;
/// I/O queues of hosts with a finite RNR retry count may together have up to this many
/// times the SRQ's buffers in flight (waiting for a buffer, RNR, beyond it); such a
/// queue past that is refused (checked as each I/O queue connects). A host that retries
/// RNR NAKs without limit (`rnr_retry_count` 7, as Linux's nvme-rdma and our initiator
/// do) only waits for a buffer, so its queues are never refused for it (neither Linux
/// nvmet nor SPDK refuses a queue for SRQ demand).
pub const SRQ_OVERCOMMIT: u32 = 8;
/// The RNR retry count that means "retry without limit" (IBTA 9.7.5.2.8).
const RNR_RETRY_INFINITE: u8 = 7;
/// Starvation (an SRQ limit event that a refill did not cure) is logged at most this
/// often; every event is counted ([`PollGroupCounters::srq_limit_events`]).
const STARVATION_LOG_INTERVAL: Duration = Duration::from_secs(10);

/// io_uring fixed buffer index of the data slab.
const DATA_SLAB_BUFFER: u16 = 0;
/// io_uring fixed buffer index of the in-capsule region.
const IN_CAPSULE_BUFFER: u16 = 1;

/// The SRQ's fill level and its limit event (`ibv_modify_srq` IBV_SRQ_LIMIT,
/// `IBV_EVENT_SRQ_LIMIT_REACHED`): the limit is armed while the SRQ is healthy, fires
/// once when it runs low, and is armed again once the buffers came back (at twice the
/// limit, so a level that hovers at the limit does not fire an event per capsule).
#[derive(Debug)]
struct SrqLevel {
    /// Receive buffers posted now.
    posted: u32,
    /// The limit (0: none, for an SRQ too small to have one).
    limit: u32,
    /// Whether the limit is armed.
    armed: bool,
    /// Receive buffers whose re-post failed, to post again.
    unposted: Vec<u32>,
    /// When starvation was last logged.
    last_report: Option<Instant>,
}

/// One poll group of the target, on provider `P`.
pub struct PollGroup<P: Provider> {
    /// Declared first so it is dropped first: it points into the regions below.
    core: RequestCore,
    ctx: ContextOf<P>,
    cm: CmOf<P>,
    cq: Cq,
    srq: Srq,
    pd: Pd,
    sqe_mr: MrOf<P>,
    in_capsule_mr: Option<MrOf<P>>,
    resp_mr: MrOf<P>,
    data_mr: MrOf<P>,
    ring: Ring,
    cfg: PollGroupConfig,
    /// The provider's QP of each queue, by QPN.
    qps: HashMap<u32, Qp>,
    srq_level: SrqLevel,
    /// The admin queues' own receive buffers ([`super::admin_recv`]).
    admin: AdminBuffers,
    /// What the I/O queues on the SRQ can have in flight: the sum of their SQ sizes.
    io_demand: u32,
    /// `io_demand` beyond the SRQ was logged (again once it came back below).
    overcommit_logged: bool,
    cmds: Receiver<GroupCmd>,
    /// QPNs whose QP went to the error state, for the control thread to disconnect
    /// (DREQ) and destroy.
    qp_errors: Sender<QpErrorReport>,
    /// This poll group's index (its context on the device).
    index: u32,
    counters: Arc<PollGroupCounters>,
    wcs: Vec<WorkCompletion>,
    io_done: Vec<(u64, i32)>,
    /// This round's posts, made at its end ([`PollGroup::post_staged`]): the data
    /// RDMA WRITEs (QPN, WR, the response that follows it) ...
    staged_writes: Vec<(u32, SendWr, WrId)>,
    /// ... then the response SENDs (QPN, WR, its id).
    staged_sends: Vec<(u32, SendWr, WrId)>,
    /// Responses whose data WRITE could not be posted (the core failed them).
    failed_responses: Vec<WrId>,
    /// Draining: where to report once nothing is in flight.
    drain_reply: Option<Sender<DrainReport>>,
    /// The transport counters of the QPs destroyed so far (the metrics add the live
    /// ones', so what they report never goes down); `None` until a destroyed QP had
    /// some (the verbs provider keeps none per QP).
    retired_qp: Option<QpCounters>,
    /// The process budget's charge for the ring's fixed buffers (none when they are
    /// plain buffers); declared after `ring`, so it is released after the ring's drop
    /// unregistered them.
    _pinned: Option<PinCharge<'static>>,
}

/// Gives `ring` the poll group's buffers (`regions`: the data slab, then the receive
/// region if any) as buffer indices 0 and 1. With `fixed` (the memory plan's
/// `io_uring_fixed`) it registers them all; when the kernel refuses (`ENOMEM`: other
/// processes of the user hold the rest of `RLIMIT_MEMLOCK`, or this process's budget is
/// used up since the plan), the data slab alone; then none. What is not registered
/// serves as plain buffers, and one warning line says so, why, and the fix.
///
/// # Errors
/// A registration error other than the limit (`MemlockError::Register`), or
/// `InvalidInput` from the ring for a bad region.
fn register_buffers(
    ring: &mut Ring,
    regions: &[(*mut u8, usize)],
    fixed: bool,
    index: u32,
) -> Result<Option<PinCharge<'static>>, PollGroupError> {
    let mut refused = None;
    let mut charge = None;
    let mut registered = 0;
    let attempts = if fixed { regions.len() } else { 0 };
    for n in (1..=attempts).rev() {
        let part = &regions[..n];
        let estimate = part
            .iter()
            .map(|&(p, len)| pinned_span_bytes(p as usize, len))
            .sum();
        let what = match n {
            1 => format!(
                "io_uring fixed buffers (data slab {})",
                Bytes(regions[0].1 as u64)
            ),
            _ => format!(
                "io_uring fixed buffers (data slab {} + receive region {})",
                Bytes(regions[0].1 as u64),
                Bytes(regions[1].1 as u64)
            ),
        };
        let attempt = PinBudget::process().pin_with(
            &what,
            estimate,
            None,
            // SAFETY: the kernel keeps the registered pages pinned until the ring drops
            // (and unregisters) them, so no fixed read or write can reach freed memory.
            || unsafe { ring.register_buffers(part) },
        );
        match attempt {
            Ok(((), c)) => {
                charge = Some(c);
                registered = n;
                break;
            }
            Err(e @ (MemlockError::KernelRefused { .. } | MemlockError::OverLimit { .. })) => {
                refused.get_or_insert(e);
            }
            Err(e) => return Err(e.into()),
        }
    }
    // SAFETY: the regions are the poll group's MRs, which outlive the ring (dropped
    // before them); the request core hands out raw pointers into them only.
    unsafe { ring.add_plain_buffers(&regions[registered..]) }?;
    if let Some(e) = refused {
        let kept = match registered {
            0 => "nothing is registered",
            _ => "only the data slab is registered",
        };
        tracing::warn!(
            "poll group {index}: {}; {kept}, the rest serves as plain buffers, so {}",
            e,
            crate::memory::PLAIN_BUFFER_COST
        );
    }
    Ok(charge)
}

fn region<M: MemoryRegion>(mr: &M) -> Region {
    // SAFETY: the MR's memory lives as long as the poll group, which drops the core
    // first; only the core's actions hand it to the provider and the kernel.
    unsafe { Region::new(mr.as_ptr(), mr.len()) }
}

impl<P: Provider> PollGroup<P> {
    /// Builds poll group `index` of `dev`: its context, SRQ, regions, ring and request
    /// core, with the namespace files `files` registered as io_uring fixed files in that
    /// order, and every receive buffer posted. Queues are brought up through `cm` (the
    /// device's connection manager); commands come in on `cmds`; QPs that fail are
    /// reported on `qp_errors`.
    ///
    /// # Errors
    /// [`PollGroupError`]: the provider (context, memory registration, CQ or SRQ beyond
    /// the device's capabilities, posting receives), io_uring (ring, file
    /// registration), or `RLIMIT_MEMLOCK` for the registered memory.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        dev: &Arc<DeviceOf<P>>,
        cm: CmOf<P>,
        index: u32,
        cfg: PollGroupConfig,
        reg: Arc<Registry>,
        files: &[std::os::fd::RawFd],
        cmds: Receiver<GroupCmd>,
        qp_errors: Sender<QpErrorReport>,
        counters: Arc<PollGroupCounters>,
    ) -> Result<PollGroup<P>, PollGroupError> {
        let mut ctx = dev.open_context(index)?;
        // The poll loop polls again at once (and `Context::wait` flushes first), so
        // the ACK of a capsule can leave with its response: one `sendmmsg` per read.
        ctx.set_deferred_transmit(true);
        let pd = dev.alloc_pd()?;
        // Admin queues connect to the first poll group of their address only.
        let admin = AdminBuffers::new(cfg.srq_depth, if index == 0 { cfg.admin_queues } else { 0 });
        let n = (cfg.srq_depth + admin.slots()) as usize;
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
        let pinned = register_buffers(&mut ring, &regions, cfg.io_uring_fixed, index)?;
        counters
            .io_uring_fixed_buffers
            .store(ring.buffers_registered() as u64, Ordering::Relaxed);
        // A sparse table: namespaces a reload adds get slots of their own.
        ring.register_file_table(crate::subsystem::MAX_NAMESPACE_FILES, files)?;
        // Every receive and every signaled send of every request fits, also when a
        // QP in error flushes its unsignaled WRITEs too.
        let cq = ctx.create_cq(4 * n as u32 + 64)?;
        let srq = ctx.create_srq(pd, cfg.srq_depth)?;
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
            group: index,
            admin_slots: admin.slots(),
        };
        let core = RequestCore::new(core_cfg, mem, reg, counters.clone())
            .map_err(|e| std::io::Error::other(e.to_string()))?;
        let limit = cfg.srq_depth / SRQ_LIMIT_DIVISOR;
        let mut g = PollGroup {
            core,
            ctx,
            cm,
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
            admin,
            io_demand: 0,
            overcommit_logged: false,
            srq_level: SrqLevel {
                posted: 0,
                limit,
                armed: false,
                unposted: Vec::new(),
                last_report: None,
            },
            cmds,
            qp_errors,
            index,
            counters,
            wcs: vec![WorkCompletion::new(0, WcStatus::Success, WcOpcode::Recv, 0); 64],
            io_done: Vec::with_capacity(64),
            staged_writes: Vec::with_capacity(64),
            staged_sends: Vec::with_capacity(64),
            failed_responses: Vec::new(),
            drain_reply: None,
            retired_qp: None,
            _pinned: pinned,
        };
        for slot in 0..cfg.srq_depth {
            g.post_recv(slot)?;
        }
        g.arm_srq_limit_if_healthy();
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
        )?;
        self.srq_level.posted += 1;
        Ok(())
    }

    /// Posts admin buffer `slot` (its SQE slot alone) to the receive queue of admin
    /// queue `qpn`'s QP.
    fn post_admin_recv(&mut self, qpn: u32, slot: u32) -> Result<(), VerbsError> {
        let sge = Sge {
            addr: self.sqe_mr.addr() + (slot as usize * SQE_LEN) as u64,
            length: SQE_LEN as u32,
            lkey: self.sqe_mr.lkey(),
        };
        self.ctx.post_recv(
            Qp(qpn),
            &RecvWr {
                wr_id: WrId::Recv { slot }.encode(),
                sg_list: SgList::one(sge),
            },
        )?;
        self.admin.posted(slot, qpn);
        Ok(())
    }

    /// Re-posts receive buffer `slot` (its request is done); one that cannot be posted
    /// now is kept for a refill. An admin buffer goes back to its queue's QP, or
    /// nowhere when that queue is gone.
    fn repost_recv(&mut self, slot: u32) {
        if self.admin.is_admin(slot) {
            if let Some(qpn) = self.admin.owner(slot).filter(|q| self.qps.contains_key(q)) {
                if let Err(e) = self.post_admin_recv(qpn, slot) {
                    tracing::warn!(
                        poll_group = self.index,
                        "re-posting admin buffer {slot}: {e}"
                    );
                }
            }
            return;
        }
        if let Err(e) = self.post_recv(slot) {
            tracing::error!(
                poll_group = self.index,
                "re-posting receive buffer {slot}: {e}; it is posted again on the next SRQ limit event or idle round"
            );
            self.srq_level.unposted.push(slot);
        }
        self.arm_srq_limit_if_healthy();
    }

    /// Posts the receive buffers whose re-post failed; returns how many went back.
    fn refill(&mut self) -> usize {
        let mut back = 0;
        for slot in std::mem::take(&mut self.srq_level.unposted) {
            match self.post_recv(slot) {
                Ok(()) => back += 1,
                Err(_) => self.srq_level.unposted.push(slot),
            }
        }
        if back > 0 {
            self.counters
                .recv_refills
                .fetch_add(back as u64, Ordering::Relaxed);
        }
        back
    }

    /// Arms the SRQ limit when it is not armed and at least twice the limit is posted.
    fn arm_srq_limit_if_healthy(&mut self) {
        let l = &self.srq_level;
        if l.armed || l.limit == 0 || l.posted < 2 * l.limit {
            return;
        }
        match self.ctx.arm_srq_limit(self.srq, l.limit) {
            Ok(()) => self.srq_level.armed = true,
            Err(e) => {
                tracing::warn!(poll_group = self.index, "arming the SRQ limit: {e}");
                // Not again: the provider refuses it (e.g. a device without SRQ limits).
                self.srq_level.limit = 0;
            }
        }
    }

    /// The SRQ ran low (its limit event): posts what can be posted again, and when the
    /// SRQ is still low, reports the starvation (rate limited). The limit is armed again
    /// once buffers came back ([`Self::arm_srq_limit_if_healthy`]).
    fn srq_limit_reached(&mut self, now: Instant) {
        self.srq_level.armed = false;
        self.counters
            .srq_limit_events
            .fetch_add(1, Ordering::Relaxed);
        self.refill();
        let l = &self.srq_level;
        if l.posted < l.limit
            && l.last_report
                .is_none_or(|t| now.duration_since(t) >= STARVATION_LOG_INTERVAL)
        {
            crate::oplog::receive_buffers_low(
                self.index,
                l.posted,
                self.cfg.srq_depth,
                self.qps.len(),
                self.counters.srq_limit_events.load(Ordering::Relaxed),
            );
            self.srq_level.last_report = Some(now);
        }
        self.arm_srq_limit_if_healthy();
    }

    /// Handles the asynchronous events waiting now; returns how many there were.
    fn handle_async_events(&mut self) -> usize {
        let mut n = 0;
        while let Some(ev) = self.ctx.poll_async_event() {
            n += 1;
            match ev {
                AsyncEvent::SrqLimitReached { srq } if srq == self.srq => {
                    self.srq_limit_reached(Instant::now())
                }
                AsyncEvent::QpFatal { qp }
                | AsyncEvent::QpRequestError { qp }
                | AsyncEvent::QpAccessError { qp }
                    if self.qps.contains_key(&qp.qpn()) =>
                {
                    tracing::warn!(
                        poll_group = self.index,
                        qpn = %crate::oplog::Hex(qp.qpn()),
                        "asynchronous event {ev:?}: the queue's QP is in error"
                    );
                    let _ = self.qp_errors.send(QpErrorReport {
                        group: self.index,
                        qpn: qp.qpn(),
                        why: QueueEnd::QpError,
                    });
                }
                AsyncEvent::SrqError { .. }
                | AsyncEvent::CqError { .. }
                | AsyncEvent::DeviceFatal => {
                    tracing::error!(poll_group = self.index, "asynchronous event {ev:?}")
                }
                AsyncEvent::PortError { .. } => {
                    tracing::warn!(poll_group = self.index, "asynchronous event {ev:?}")
                }
                _ => tracing::debug!(poll_group = self.index, "asynchronous event {ev:?}"),
            }
        }
        n
    }

    /// Runs the poll loop until [`GroupCmd::Shutdown`] (or the command channel closes).
    ///
    /// Busy-polls while there is work. Idle for [`PollGroupConfig::idle_spin`] with no
    /// io_uring I/O in flight, it arms its CQ, polls once more (a completion may have
    /// come in between) and sleeps in [`Context::wait`] until a completion event, an
    /// asynchronous event or 10 ms (`IDLE_SLEEP_MAX`, for the control thread's commands).
    pub fn run(mut self) {
        let mut idle_since: Option<Instant> = None;
        let mut rounds = 0u32;
        loop {
            let Some(mut work) = self.take_cmds() else {
                crate::oplog::poll_group_stopped(self.index, P::NAME, &self.counters);
                return;
            };
            work += self.poll_once();
            if self.drain_reply.is_some() {
                self.report_if_drained();
            }
            rounds = rounds.wrapping_add(1);
            if rounds.is_multiple_of(ASYNC_EVENT_ROUNDS) {
                work += self.handle_async_events();
                if !self.srq_level.unposted.is_empty() {
                    work += self.refill();
                    self.arm_srq_limit_if_healthy();
                }
            }
            if work > 0 {
                idle_since = None;
                continue;
            }
            let now = Instant::now();
            let since = *idle_since.get_or_insert(now);
            if now.duration_since(since) >= self.cfg.idle_spin
                && !self.core.io_in_flight()
                && self.sleep() > 0
            {
                idle_since = None;
            }
        }
    }

    /// Handles the control thread's commands waiting now; returns how many, or `None`
    /// for [`GroupCmd::Shutdown`] (or a closed channel).
    fn take_cmds(&mut self) -> Option<usize> {
        let mut n = 0;
        loop {
            match self.cmds.try_recv() {
                Ok(GroupCmd::Shutdown) | Err(crossbeam::channel::TryRecvError::Disconnected) => {
                    return None
                }
                Ok(cmd) => {
                    self.handle_cmd(cmd);
                    n += 1;
                }
                Err(crossbeam::channel::TryRecvError::Empty) => return Some(n),
            }
        }
    }

    /// Arms the CQ, polls once more and, with nothing found, sleeps (see
    /// [`PollGroup::run`]); returns the work found before or after the sleep.
    fn sleep(&mut self) -> usize {
        if let Err(e) = self.ctx.req_notify_cq(self.cq) {
            tracing::warn!(poll_group = self.index, "arming the CQ: {e}");
            return 0;
        }
        let n = self.poll_once() + self.handle_async_events();
        if n > 0 {
            return n;
        }
        self.counters.sleeps.fetch_add(1, Ordering::Relaxed);
        self.ctx.wait(IDLE_SLEEP_MAX);
        self.handle_async_events()
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
        self.post_staged(Instant::now());
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
            Some(WrId::Recv { slot }) if self.admin.is_admin(slot) => {
                // A completion of a destroyed admin QP (a flushed receive) is dropped.
                if !self.admin.completed(slot, wc.qp_num) {
                    return;
                }
                if wc.status == WcStatus::Success {
                    self.core
                        .capsule_received(slot, wc.qp_num, wc.byte_len, now)
                } else {
                    self.core.recv_failed(slot)
                }
            }
            Some(WrId::Recv { slot }) => {
                self.srq_level.posted = self.srq_level.posted.saturating_sub(1);
                if wc.status == WcStatus::Success {
                    self.core
                        .capsule_received(slot, wc.qp_num, wc.byte_len, now)
                } else {
                    self.core.recv_failed(slot)
                }
            }
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
                let qpn = res.as_ref().ok().map(|t| t.qpn);
                if reply.send(res).is_err() {
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
            GroupCmd::Drain(reply) => {
                let in_flight = self.core.drain(Instant::now());
                self.execute_now(Instant::now());
                tracing::debug!(poll_group = self.index, in_flight, "draining");
                self.drain_reply = Some(reply);
                self.report_if_drained();
            }
            GroupCmd::Metrics(reply) => {
                let _ = reply.send(self.metrics_snapshot());
            }
            GroupCmd::Namespaces { add, remove, reply } => {
                let _ = reply.send(self.change_namespaces(add, &remove));
            }
            GroupCmd::CompleteHeldEvents { cntlids } => {
                let now = Instant::now();
                self.core.complete_held_events(&cntlids, now);
                self.execute_now(now);
            }
            GroupCmd::Quiesce {
                cntlids,
                files,
                reply,
            } => {
                let in_flight = self.core.quiesce(&cntlids, &files);
                self.execute_now(Instant::now());
                let _ = reply.send(in_flight);
            }
            GroupCmd::Shutdown => {}
        }
    }

    /// [`GroupCmd::Namespaces`]: the fixed-file slots and the core's tables.
    ///
    /// # Errors
    /// The slot that the ring refused, and why (the slots set before it stay: the
    /// control thread then removes them again).
    fn change_namespaces(
        &mut self,
        add: Vec<crate::subsystem::NamespaceEntry>,
        remove: &[u32],
    ) -> Result<(), String> {
        for &index in remove {
            self.core.remove_namespace(index);
            if let Err(e) = self.ring.update_file(index, -1) {
                tracing::warn!(
                    poll_group = self.index,
                    "emptying fixed-file slot {index}: {e}"
                );
            }
        }
        for ns in add {
            self.ring
                .update_file(ns.file_index, ns.ns.fd())
                .map_err(|e| {
                    format!(
                        "poll group {}: io_uring fixed-file slot {} for {}: {e}",
                        self.index,
                        ns.file_index,
                        ns.ns.path().display()
                    )
                })?;
            self.core.add_namespace(&ns);
        }
        Ok(())
    }

    /// A copy of the counters this poll group keeps in its own state.
    fn metrics_snapshot(&self) -> crate::metrics::GroupSnapshot {
        let (admin_queues, io_queues) = self.core.queue_counts();
        let mut qp = self.retired_qp;
        for &q in self.qps.values() {
            if let Some(c) = self.ctx.qp_counters(q) {
                *qp.get_or_insert_with(QpCounters::default) += &c;
            }
        }
        crate::metrics::GroupSnapshot {
            latency: self.core.latency().to_vec(),
            admin_queues,
            io_queues,
            qp,
        }
    }

    /// Draining with nothing in flight: reports it (once).
    fn report_if_drained(&mut self) {
        if self.core.in_flight() > 0 {
            return;
        }
        if let Some(reply) = self.drain_reply.take() {
            let _ = reply.send(DrainReport {
                group: self.index,
                counts: self.core.drain_counts(),
            });
        }
    }

    /// Creates the QP of a connection request through the connection manager (which
    /// brings it up, or leaves that to its accept) and adds its queue to the core, with
    /// the ORD the connection manager settled on as the queue's READ credits.
    ///
    /// # Errors
    /// Why there is no queue, in words (the control thread logs it and rejects the
    /// request with "no resources").
    fn new_queue(&mut self, q: &NewQueue) -> Result<AcceptToken, String> {
        let caps = self.ctx.device().caps();
        let sq = u32::from(q.sq_size.max(1));
        if q.qid != 0 {
            self.admit_io_queue(sq, q.req.rnr_retry_count)?;
        }
        // An admin queue gets receive buffers of its own while the pool has a block.
        let core = &self.core;
        let own = q.qid == 0
            && self
                .admin
                .clone()
                .claim(0, |s| core.state(s) == Some(ReqState::Free))
                .is_some();
        // Up to 2 x SQ-size commands of 2 WRs each (WRITE + SEND, or READ + SEND).
        let send_depth = (4 * sq + 16).min(caps.max_qp_wr);
        let init = QpInitAttr {
            pd: self.pd,
            send_cq: self.cq,
            recv_cq: self.cq,
            srq: (!own).then_some(self.srq),
            cap: QpCap {
                max_send_wr: send_depth,
                max_recv_wr: if own { ADMIN_QUEUE_BUFFERS } else { 0 },
                max_send_sge: 2,
                max_recv_sge: 2,
                max_inline_data: 0,
            },
            qp_type: transport::verbs::QpType::Rc,
        };
        let (qp, token) = self
            .cm
            .create_accept_qp(&mut self.ctx, &q.req, &init, q.ord)
            .map_err(|e| format!("creating the queue's QP: {e}"))?;
        if token.initiator_depth == 0 {
            let _ = self.ctx.destroy_qp(qp);
            return Err(format!(
                "no RDMA READ credit for the queue (ORD 0: device max_qp_init_rd_atom {}, \
                 host responder resources {}): host writes could not be served",
                caps.max_qp_init_rd_atom, q.req.responder_resources
            ));
        }
        self.qps.insert(qp.qpn(), qp);
        if own {
            let core = &self.core;
            let slots = self
                .admin
                .claim(qp.qpn(), |s| core.state(s) == Some(ReqState::Free))
                .unwrap_or(0..0);
            for slot in slots {
                if let Err(e) = self.post_admin_recv(qp.qpn(), slot) {
                    self.admin.release(qp.qpn());
                    self.qps.remove(&qp.qpn());
                    let _ = self.ctx.destroy_qp(qp);
                    return Err(format!("posting the admin queue's receive buffers: {e}"));
                }
            }
        } else if q.qid != 0 {
            self.io_demand += sq;
        }
        let counter = if own {
            &self.counters.admin_own_buffers
        } else {
            &self.counters.srq_qps
        };
        counter.fetch_add(1, Ordering::Relaxed);
        self.core.add_queue(
            qp.qpn(),
            &QueueParams {
                qid: q.qid,
                sq_size: q.sq_size.max(1),
                remote: q.req.remote_ip,
                remote_qpn: q.req.remote_qpn,
                send_depth,
                ord: token.initiator_depth,
                port: q.port,
            },
        );
        Ok(token)
    }

    /// Admits an I/O queue of `sq` entries on the SRQ: the SRQ is sized for
    /// `srq_depth` commands in flight and the connected queues may have more (they then
    /// wait for a buffer: RNR), which is logged once when it begins; beyond
    /// [`SRQ_OVERCOMMIT`] times the SRQ a queue whose host gives up after
    /// `rnr_retry_count` RNR NAKs could see its commands fail, and is refused.
    ///
    /// # Errors
    /// Why the queue is refused, with the fix.
    fn admit_io_queue(&mut self, sq: u32, rnr_retry_count: u8) -> Result<(), String> {
        let depth = self.cfg.srq_depth;
        let demand = self.io_demand + sq;
        if demand > depth.saturating_mul(SRQ_OVERCOMMIT) && rnr_retry_count != RNR_RETRY_INFINITE {
            return Err(format!(
                "poll group {}: its I/O queues could have {demand} commands in flight with \
                 this one, more than {SRQ_OVERCOMMIT} x its {depth} shared receive buffers, \
                 and this host gives up after {rnr_retry_count} RNR retries: raise srq_depth \
                 (to {demand} for every command a buffer), add poll groups, \
                 or have the hosts use smaller queues",
                self.index
            ));
        }
        if demand > depth && !self.overcommit_logged {
            self.overcommit_logged = true;
            tracing::info!(
                poll_group = self.index,
                io_queue_commands = demand,
                srq_depth = depth,
                "poll group {}: its I/O queues can have {demand} commands in flight, its \
                 shared receive queue holds {depth}: commands beyond it wait for a buffer \
                 (hosts see RNR NAKs and retry; admin queues have buffers of their own, so \
                 Keep Alive is not delayed); srq_depth = {demand} gives every command one",
                self.index
            );
        } else if demand <= depth {
            self.overcommit_logged = false;
        }
        Ok(())
    }

    /// Destroys queue `qpn`'s QP, then has the core release its requests.
    fn destroy_queue(&mut self, qpn: u32, why: QueueEnd) {
        let Some(qp) = self.qps.remove(&qpn) else {
            return;
        };
        if let Some(q) = self.core.queue(qpn).filter(|q| q.qid != 0) {
            self.io_demand = self.io_demand.saturating_sub(u32::from(q.sq_size));
        }
        let span = self.core.queue(qpn).map(|q| q.span.clone());
        let _span = span.map(tracing::Span::entered);
        if let Some(c) = self.ctx.qp_counters(qp) {
            *self.retired_qp.get_or_insert_with(QpCounters::default) += &c;
            // What the QP's requester resent over its life (a slow or lossy peer shows
            // here before it ends a queue).
            tracing::info!(
                qpn = %format_args!("{qpn:#x}"),
                qid = self.core.queue(qpn).map(|q| q.qid),
                failed = c.retry_exceeded_err + c.send_err > 0,
                rdma_sends = c.rdma_sends,
                go_back_n = c.completer_retry_err,
                rto_timeouts = c.rto_timeouts,
                spurious_rto = c.spurious_rto,
                local_ack_timeouts = c.local_ack_timeout_err,
                retry_exceeded = c.retry_exceeded_err,
                np_ecn_marked = c.np_ecn_marked_roce_packets,
                np_cnp_sent = c.np_cnp_sent,
                "QP counters at queue end"
            );
        }
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
        // Nothing is posted on it any more; its flushed receives are dropped.
        self.admin.release(qpn);
        let now = Instant::now();
        self.core.remove_queue(qpn, why, now);
        self.execute_now(now);
    }

    /// [`PollGroup::execute_actions`], then [`PollGroup::post_staged`]: for work outside
    /// the poll round (the control thread's commands, a queue's end).
    fn execute_now(&mut self, now: Instant) {
        self.execute_actions(now);
        self.post_staged(now);
    }

    /// Posts the round's staged data WRITEs, then its response SENDs, and transmits
    /// them: the posting rule that lets one QP's packets of a round leave as trains of
    /// equal segments (on the soft provider, one GSO train of the WRITEs' 4 KiB
    /// segments and one of the responses, where W S W S would be a datagram each).
    /// RC keeps a QP's WRs in order, so each response still follows its own data.
    /// A WRITE that cannot be posted fails its request in the core, and its response
    /// is not posted; what the failures make the core do is carried out and posted
    /// too.
    fn post_staged(&mut self, now: Instant) {
        while !(self.staged_writes.is_empty() && self.staged_sends.is_empty()) {
            let mut writes = std::mem::take(&mut self.staged_writes);
            let mut sends = std::mem::take(&mut self.staged_sends);
            for (qpn, wr, response) in writes.drain(..) {
                if let Err(e) = self.ctx.post_send_deferred(Qp(qpn), &wr) {
                    tracing::debug!("RDMA WRITE post: {e}");
                    self.failed_responses.push(response);
                    self.core.post_failed(response, qpn, now);
                }
            }
            for (qpn, wr, response) in sends.drain(..) {
                if let Some(k) = self.failed_responses.iter().position(|&f| f == response) {
                    self.failed_responses.swap_remove(k);
                    continue;
                }
                if self.ctx.post_send_deferred(Qp(qpn), &wr).is_err() {
                    self.core.post_failed(response, qpn, now);
                }
            }
            self.failed_responses.clear();
            self.staged_writes = writes;
            self.staged_sends = sends;
            self.ctx.flush_deferred();
            self.execute_actions(now);
        }
    }

    /// Carries out the core's actions, in order, against the provider and io_uring;
    /// the data WRITEs and response SENDs are staged for [`PollGroup::post_staged`].
    fn execute_actions(&mut self, now: Instant) {
        while let Some(a) = self.core.poll_action() {
            match a {
                Action::RepostRecv { slot } => self.repost_recv(slot),
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
                    // response (all of the round's WRITEs go first, post_staged).
                    let send = self.response_wr(&response);
                    self.staged_writes.push((qpn, write, response.wr_id));
                    self.staged_sends.push((qpn, send, response.wr_id));
                }
                Action::PostSend { qpn, response } => {
                    let wr = self.response_wr(&response);
                    self.staged_sends.push((qpn, wr, response.wr_id));
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
                        why: QueueEnd::QpError,
                    });
                }
                Action::EndQueue { qpn, why } => {
                    let _ = self.qp_errors.send(QpErrorReport {
                        group: self.index,
                        qpn,
                        why,
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

    fn mr(&self, region: RegionId) -> &MrOf<P> {
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
    pub fn context(&self) -> &ContextOf<P> {
        &self.ctx
    }
}
