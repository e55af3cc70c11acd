//! The request core of a poll group: a sans-IO state machine that takes every command
//! capsule from its arrival to the release of its receive buffer (NVMe RDMA Transport
//! 1.x; the model is SPDK's `nvmf_rdma_request_process` over `enum
//! spdk_nvmf_rdma_request_state`).
//!
//! A [`RequestCore`] owns the requests (one per SRQ receive buffer), the queues
//! ([`super::queue`]), the data buffer pool and the io_uring slot count. It never
//! touches a socket, a QP or a ring: events come in as method calls
//! ([`RequestCore::capsule_received`], [`RequestCore::send_completed`],
//! [`RequestCore::io_completed`], ...), which set a request's state and run
//! `process`, and what the transport and io_uring must do comes out as [`Action`]s
//! ([`RequestCore::poll_action`], [`super::action`]) for the driver
//! ([`super::poll_group`]) to carry out in order. How a command executes once its
//! data is in place is `execute` (a child module). It works on the driver's registered memory (receive, response and data
//! regions, [`CoreMemory`]): it reads the SQEs and in-capsule data, and writes CQEs and
//! admin data there; the transport and the kernel move everything else.
//!
//! # States ([`ReqState`])
//! ```text
//! Free -> New -> (NeedBuffer) -> (DataTransferToControllerPending -> TransferringHostToController)
//!      -> ReadyToExecute -> (Executing | AwaitingEvent) -> Executed -> ReadyToComplete
//!      -> (TransferringControllerToHost | Completing) -> Completed -> Free
//! ```
//! Back-pressure is a state with a queue, never a retry loop:
//! - `NeedBuffer`: no data buffer in the slab; waits in order, proceeds when one is freed;
//! - `DataTransferToControllerPending`: no READ credit (the queue's ORD) or no send
//!   credit for the RDMA READ; waits in its queue's order;
//! - `ReadyToExecute`: not enough io_uring slots (a Dataset Management takes one per
//!   range, all or none); waits for io_uring completions;
//! - `ReadyToComplete`: no send credit for the response (the QP's send queue depth);
//!   waits in its queue's order. A response is never dropped for want of room; only a
//!   QP that failed, or a queue that is gone, ends a request without one.
//!
//! For a read, the RDMA WRITE of the data and the response SEND are one action
//! ([`Action::PostWriteAndSend`]), posted together: RC delivers the data before the
//! response, and they share the transmission.
//!
//! # Behaviour kept from the poll group before the split
//! SQ flow control (SQHD in every CQE; a queue's capsules beyond twice its SQ size are
//! dropped and counted), a Connect on a connected queue or for another QID refused,
//! Asynchronous Event Requests held until an event, Write with `RWF_DSYNC` and Write
//! Zeroes followed by `fdatasync` when the write is a write-through (FUA, or the
//! volatile write cache off), errno mapped as nvmet ([`crate::io::errno_status`]), a
//! failed QP reported once ([`Action::ReportQpError`]), requests of a destroyed queue
//! released (those io_uring still holds once it hands them back).
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use nvme::status::{GenericStatus, Status};
use nvme::{Cqe, Sqe};
use transport::verbs::WcStatus;

use super::action::{Action, Buf, IoOp, RegionId, RemoteBuf, Response};
use super::queue::{Queue, QueueParams};
use super::sgl::{self, Keyed, Transfer};
use super::wr_id::WrId;
use super::{PollGroupCounters, CQE_LEN, RESP_SLOT, SQE_LEN};
use crate::buffers::{BufferPool, Chunk, PoolError};
use crate::capsule::{classify, Kind};
use crate::io::{self, IoCommand};
use crate::metrics::latency::{self, ReadWrite};
use crate::oplog::{self, QueueEnd};
use crate::stats::NamespaceStats;
use crate::subsystem::Registry;

mod drain;
mod execute;
pub use drain::{DrainCounts, DRAIN_STATUS};
use execute::Exec;

/// Smallest data buffer the pool hands out (and the alignment of every buffer).
pub const MIN_DATA_BUFFER: usize = 4096;

/// Where a request is (SPDK's `enum spdk_nvmf_rdma_request_state`, Rust names).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ReqState {
    /// The receive buffer is posted; no command.
    Free,
    /// A command capsule arrived; not yet checked.
    New,
    /// Waits for a data buffer (the slab is in use), in arrival order.
    NeedBuffer,
    /// Waits for a READ credit and a send credit to pull the host's data, in its
    /// queue's order.
    DataTransferToControllerPending,
    /// The RDMA READ of the host's data is posted.
    TransferringHostToController,
    /// Data in place; runs now, or waits for io_uring slots.
    ReadyToExecute,
    /// io_uring holds its operations.
    Executing,
    /// An Asynchronous Event Request, held until the controller has an event.
    AwaitingEvent,
    /// Its status is known.
    Executed,
    /// Its response waits for send credits, in its queue's order.
    ReadyToComplete,
    /// The RDMA WRITE of its data and its response SEND are posted.
    TransferringControllerToHost,
    /// Its response SEND is posted.
    Completing,
    /// The response SEND completed: the buffer goes back to the SRQ.
    Completed,
}

/// Raw memory the driver registered: `len` bytes at `ptr`.
#[derive(Clone, Copy, Debug)]
pub struct Region {
    ptr: *mut u8,
    len: usize,
}

impl Region {
    /// No memory (a region of 0 bytes).
    pub const EMPTY: Region = Region {
        ptr: std::ptr::NonNull::<u8>::dangling().as_ptr(),
        len: 0,
    };

    /// The region `ptr..ptr + len`.
    ///
    /// # Safety
    /// The bytes are valid for reads and writes, and stay so, for as long as any
    /// [`RequestCore`] built over them lives. Outside the core, only what its actions
    /// hand out touches them (the transport, the kernel).
    pub unsafe fn new(ptr: *mut u8, len: usize) -> Region {
        Region { ptr, len }
    }

    /// Start of the region.
    pub fn ptr(&self) -> *mut u8 {
        self.ptr
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the region has no bytes.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

/// The regions a core works on, all with one slot per receive buffer except the slab.
#[derive(Clone, Copy, Debug)]
pub struct CoreMemory {
    /// The SQEs: [`SQE_LEN`] bytes per receive buffer (the first SGE of a receive).
    pub sqes: Region,
    /// The in-capsule data: `in_capsule_bytes` per receive buffer (the second SGE).
    pub in_capsule: Region,
    /// The response slots: [`RESP_SLOT`] bytes per receive buffer.
    pub responses: Region,
    /// The data slab the buffer pool carves (at least `max_io_bytes`).
    pub data: Region,
}

/// Sizes of a core.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CoreConfig {
    /// Receive buffers (= requests).
    pub srq_depth: u32,
    /// In-capsule data bytes per receive buffer.
    pub in_capsule_bytes: u32,
    /// Largest data transfer of one command (MDTS), bytes: the largest data buffer.
    pub max_io_bytes: u32,
    /// io_uring operations that may be queued or in flight at once (the ring's slots).
    pub io_slots: u32,
    /// The poll group's index (which slot of the namespaces' counters it counts in,
    /// [`crate::stats`]).
    pub group: u32,
    /// Receive buffers beyond the SRQ's, `srq_depth..srq_depth + admin_slots`: the
    /// admin queues' own (an SQE each, no in-capsule data, as nvmet-rdma's admin
    /// commands), so I/O filling the SRQ never starves a Keep Alive.
    pub admin_slots: u32,
}

/// Why a core could not be built.
#[derive(Debug, thiserror::Error)]
pub enum CoreError {
    /// A region is smaller than the configuration needs.
    #[error("request core: the {what} region has {len} bytes, {need} needed")]
    RegionTooSmall {
        what: &'static str,
        len: usize,
        need: usize,
    },
    /// The data slab cannot hold the buffer pool.
    #[error("request core: data slab: {0}")]
    Pool(#[from] PoolError),
}

/// Where a request's data is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Data {
    None,
    Chunk(Chunk),
    /// In-capsule data at this offset of the in-capsule region.
    InCapsule(usize),
}

#[derive(Clone, Copy, Debug)]
struct Request {
    state: ReqState,
    qpn: u32,
    /// [`Queue::id`] of the queue it arrived on.
    queue: u64,
    sqe: Sqe,
    /// Bytes received after the SQE.
    in_capsule_len: u32,
    kind: Kind,
    data: Data,
    /// Bytes of data the command moves (either direction).
    data_len: u32,
    /// Controller-to-host bytes to RDMA WRITE on completion.
    c2h_len: u32,
    keyed: Option<Keyed>,
    /// The data comes from the host by RDMA READ.
    from_host: bool,
    /// In-capsule data (offset in its region) to copy into the data buffer first: it
    /// does not meet the O_DIRECT namespace's alignment.
    bounce_from: Option<usize>,
    /// A Compare: `media` holds the logical blocks read, to compare with `data`.
    compare: bool,
    /// The second buffer of a Compare (the blocks read from the namespace).
    media: Option<Chunk>,
    /// io_uring fixed-file index of the I/O command's namespace (its counters).
    file: u32,
    status: Status,
    dw0: u32,
    dw1: u32,
    io_pending: u32,
    /// A write-through Write Zeroes: `fdatasync` once the zeroing completes.
    sync_after: bool,
    /// The queue went away while io_uring held the request.
    orphan: bool,
    /// The response was posted (the command left its queue's unanswered count).
    answered: bool,
    /// An Authentication Send/Receive whose transaction failed: once its response is
    /// sent the queue ends ([`QueueEnd::AuthenticationFailed`]).
    ends_queue: bool,
    /// Send credits its posted work requests hold.
    send_held: u32,
    /// A READ credit its RDMA READ holds.
    read_held: bool,
    /// It was counted in a wait counter (buffer, READ credit, send credit) already.
    waited: u8,
    /// When its capsule arrived (the poll round's time): the start of its latency.
    arrived: Option<Instant>,
}

const WAITED_BUFFER: u8 = 1;
const WAITED_READ: u8 = 2;
const WAITED_SEND: u8 = 4;

impl Request {
    fn free() -> Request {
        Request {
            state: ReqState::Free,
            qpn: 0,
            queue: 0,
            sqe: Sqe::from_array([0; 64]),
            in_capsule_len: 0,
            kind: Kind::Admin,
            data: Data::None,
            data_len: 0,
            c2h_len: 0,
            keyed: None,
            from_host: false,
            bounce_from: None,
            compare: false,
            media: None,
            file: u32::MAX,
            status: Status::SUCCESS,
            dw0: 0,
            dw1: 0,
            io_pending: 0,
            sync_after: false,
            orphan: false,
            answered: false,
            ends_queue: false,
            send_held: 0,
            read_held: false,
            waited: 0,
            arrived: None,
        }
    }
}

/// The request core of one poll group (see the module docs).
pub struct RequestCore {
    cfg: CoreConfig,
    mem: CoreMemory,
    reg: Arc<Registry>,
    pool: BufferPool,
    reqs: Vec<Request>,
    queues: HashMap<u32, Queue>,
    next_queue_id: u64,
    /// NeedBuffer requests, in arrival order.
    need_buffer: VecDeque<u32>,
    /// ReadyToExecute requests waiting for io_uring slots.
    ready: VecDeque<u32>,
    io_slots_free: u32,
    actions: VecDeque<Action>,
    counters: Arc<PollGroupCounters>,
    /// A buffer or an io_uring slot was freed: the shared queues may move.
    kick_shared: bool,
    /// Queues whose credits came back.
    kick_queues: Vec<u32>,
    /// An admin command ran on this queue: complete held AERs it released.
    events_due: Option<u32>,
    /// A command of this queue was answered while a Disconnect waits there.
    disconnect_due: Option<u32>,
    /// Every namespace's counters, by io_uring fixed-file index.
    ns_stats: Vec<Option<Arc<NamespaceStats>>>,
    /// Every namespace's completion latency, reads and writes, by io_uring fixed-file
    /// index: this poll group's own, plain integers ([`crate::metrics::latency`]).
    latency: Vec<ReadWrite>,
    /// The null and RAM namespaces, by io_uring fixed-file index: served here, without
    /// io_uring ([`crate::backend::memory`]). Never changed after construction.
    in_memory: Vec<Option<Arc<crate::backend::Backend>>>,
    /// Shutting down: commands parsed from now on are answered, not run ([`RequestCore::drain`]).
    draining: bool,
    drain_counts: DrainCounts,
    trace: Option<Vec<(u32, ReqState)>>,
}

impl std::fmt::Debug for RequestCore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RequestCore")
            .field("cfg", &self.cfg)
            .field("queues", &self.queues.len())
            .field("need_buffer", &self.need_buffer.len())
            .field("ready", &self.ready.len())
            .field("io_slots_free", &self.io_slots_free)
            .finish()
    }
}

impl RequestCore {
    /// A core over `mem` for the subsystems of `reg`, every receive buffer posted and
    /// every request free; `counters` is where it counts.
    ///
    /// # Errors
    /// [`CoreError`] when a region is smaller than `cfg` needs (the slab: one
    /// `max_io_bytes` buffer).
    pub fn new(
        cfg: CoreConfig,
        mem: CoreMemory,
        reg: Arc<Registry>,
        counters: Arc<PollGroupCounters>,
    ) -> Result<RequestCore, CoreError> {
        let n = cfg.srq_depth as usize;
        let slots = n + cfg.admin_slots as usize;
        for (what, r, need) in [
            ("SQE", mem.sqes, slots * SQE_LEN),
            (
                "in-capsule",
                mem.in_capsule,
                n * cfg.in_capsule_bytes as usize,
            ),
            ("response", mem.responses, slots * RESP_SLOT),
            ("data", mem.data, cfg.max_io_bytes as usize),
        ] {
            if r.len < need {
                return Err(CoreError::RegionTooSmall {
                    what,
                    len: r.len,
                    need,
                });
            }
        }
        let max_block = (cfg.max_io_bytes as usize)
            .max(MIN_DATA_BUFFER)
            .next_power_of_two();
        // SAFETY: the slab is valid for the core's lifetime (Region::new's contract);
        // the pool only hands out offsets into it.
        let pool =
            unsafe { BufferPool::new(mem.data.ptr, mem.data.len, MIN_DATA_BUFFER, max_block) }?;
        let mut ns_stats: Vec<Option<Arc<NamespaceStats>>> = Vec::new();
        let mut in_memory = Vec::new();
        for ns in reg
            .subsystems()
            .iter()
            .flat_map(|s| s.namespaces().to_vec())
        {
            let at = ns.file_index as usize;
            if ns_stats.len() <= at {
                ns_stats.resize(at + 1, None);
                in_memory.resize(at + 1, None);
            }
            ns_stats[at] = Some(ns.stats.clone());
            if ns.ns.memory().is_some() {
                in_memory[at] = Some(ns.ns.clone());
            }
        }
        Ok(RequestCore {
            cfg,
            mem,
            reg,
            pool,
            reqs: vec![Request::free(); slots],
            queues: HashMap::new(),
            next_queue_id: 1,
            need_buffer: VecDeque::new(),
            ready: VecDeque::new(),
            io_slots_free: cfg.io_slots,
            actions: VecDeque::with_capacity(64),
            counters,
            kick_shared: false,
            kick_queues: Vec::new(),
            events_due: None,
            disconnect_due: None,
            latency: vec![ReadWrite::default(); ns_stats.len()],
            ns_stats,
            in_memory,
            draining: false,
            drain_counts: DrainCounts::default(),
            trace: None,
        })
    }

    /// The next action to carry out, in order.
    pub fn poll_action(&mut self) -> Option<Action> {
        self.actions.pop_front()
    }

    /// Records every state change as `(request, new state)` from now on
    /// ([`RequestCore::take_trace`]); for tests and the fuzz target.
    pub fn set_trace(&mut self, on: bool) {
        self.trace = on.then(Vec::new);
    }

    /// The state changes recorded since the last call.
    pub fn take_trace(&mut self) -> Vec<(u32, ReqState)> {
        self.trace.as_mut().map(std::mem::take).unwrap_or_default()
    }

    /// This poll group's completion latency per namespace (by io_uring fixed-file
    /// index), reads then writes, since it started.
    pub fn latency(&self) -> &[ReadWrite] {
        &self.latency
    }

    /// The admin queues and the I/O queues the core holds now.
    pub fn queue_counts(&self) -> (u64, u64) {
        let admin = self.queues.values().filter(|q| q.qid == 0).count() as u64;
        (admin, self.queues.len() as u64 - admin)
    }

    /// The state of request `req` (`None` past the last).
    pub fn state(&self, req: u32) -> Option<ReqState> {
        self.reqs.get(req as usize).map(|r| r.state)
    }

    /// Queue `qpn`, if the core has it.
    pub fn queue(&self, qpn: u32) -> Option<&Queue> {
        self.queues.get(&qpn)
    }

    /// A namespace a reload opened: its statistics, and its memory store when it has
    /// one, at its fixed-file index (the poll group put the file in that slot).
    pub fn add_namespace(&mut self, ns: &crate::subsystem::NamespaceEntry) {
        let at = ns.file_index as usize;
        if self.ns_stats.len() <= at {
            self.ns_stats.resize(at + 1, None);
            self.in_memory.resize(at + 1, None);
            self.latency.resize(at + 1, ReadWrite::default());
        }
        self.ns_stats[at] = Some(ns.stats.clone());
        self.in_memory[at] = ns.ns.memory().is_some().then(|| ns.ns.clone());
    }

    /// A namespace a reload removed (fixed-file index `file_index`): its memory store
    /// is let go (commands already on it keep theirs); its statistics stay until the
    /// core goes.
    pub fn remove_namespace(&mut self, file_index: u32) {
        if let Some(m) = self.in_memory.get_mut(file_index as usize) {
            *m = None;
        }
    }

    /// Completes the held Asynchronous Event Requests of controllers `cntlids` on
    /// this group's admin queues for which an event is pending (one a reload posted),
    /// at once rather than at the queue's next admin command (NVMe Base 2.x §5.2).
    pub fn complete_held_events(&mut self, cntlids: &[u16], now: Instant) {
        // Admin queues only: an AER is an admin command, and `complete_events` takes the
        // controller's held request, which only its admin queue can answer.
        let qpns: Vec<u32> = (self.queues.iter())
            .filter(|(_, q)| q.qid == 0)
            .filter(|(_, q)| q.ctrl.as_ref().is_some_and(|c| cntlids.contains(&c.cntlid)))
            .map(|(&qpn, _)| qpn)
            .collect();
        for qpn in qpns {
            self.complete_events(qpn, now);
        }
    }

    /// The QPNs of every queue of controller `cntlid`.
    pub fn queues_of(&self, cntlid: u16) -> Vec<u32> {
        self.queues
            .iter()
            .filter(|(_, q)| q.ctrl.as_ref().is_some_and(|c| c.cntlid == cntlid))
            .map(|(&qpn, _)| qpn)
            .collect()
    }

    /// Whether the core has no queue.
    pub fn is_idle(&self) -> bool {
        self.queues.is_empty()
    }

    /// io_uring slots not taken now.
    pub fn io_slots_free(&self) -> u32 {
        self.io_slots_free
    }

    /// Whether io_uring holds any of the core's operations (their completions come
    /// from the ring, not from a CQ event, so the driver keeps polling for them).
    pub fn io_in_flight(&self) -> bool {
        self.io_slots_free < self.cfg.io_slots
    }

    /// The configuration.
    pub fn config(&self) -> &CoreConfig {
        &self.cfg
    }

    /// The memory the core works on.
    pub fn memory(&self) -> &CoreMemory {
        &self.mem
    }

    /// Bytes of `b` (empty when it lies outside its region, which the core never hands
    /// out).
    pub fn bytes(&self, b: Buf) -> &[u8] {
        let r = self.region(b.region);
        match b.offset.checked_add(b.len as usize) {
            // SAFETY: inside the region, valid for the core's lifetime.
            Some(end) if end <= r.len => unsafe {
                std::slice::from_raw_parts(r.ptr.add(b.offset), b.len as usize)
            },
            _ => &[],
        }
    }

    fn bytes_mut(&mut self, b: Buf) -> &mut [u8] {
        let r = self.region(b.region);
        match b.offset.checked_add(b.len as usize) {
            // SAFETY: inside the region, valid for the core's lifetime; no other slice
            // of the core's is alive (`&mut self`).
            Some(end) if end <= r.len => unsafe {
                std::slice::from_raw_parts_mut(r.ptr.add(b.offset), b.len as usize)
            },
            _ => &mut [],
        }
    }

    fn region(&self, id: RegionId) -> Region {
        match id {
            RegionId::InCapsule => self.mem.in_capsule,
            RegionId::Responses => self.mem.responses,
            RegionId::Data => self.mem.data,
        }
    }

    // ----- events ---------------------------------------------------------------

    /// A queue was connected on QP `qpn`: its requests may arrive.
    pub fn add_queue(&mut self, qpn: u32, params: &QueueParams) {
        let id = self.next_queue_id;
        self.next_queue_id += 1;
        let mut q = Queue::new(id, params);
        q.open_span(qpn);
        if self.queues.insert(qpn, q).is_some() {
            tracing::warn!("QP {qpn:#x} was already a queue; its old requests are forgotten");
        }
    }

    /// Queue `qpn` is gone (its QP destroyed, no more completions): logs `why`,
    /// detaches it from its controller (an admin queue ends the controller) and releases
    /// its requests; one that io_uring holds is released when it comes back.
    pub fn remove_queue(&mut self, qpn: u32, why: QueueEnd, now: Instant) {
        let Some(q) = self.queues.remove(&qpn) else {
            return;
        };
        let _span = q.span.clone().entered();
        oplog::queue_closed(&q.peer(qpn), q.ctrl.as_deref(), why);
        if let Some(ctrl) = &q.ctrl {
            if q.qid == 0 {
                ctrl.drain_aers();
                self.reg.remove_controller(ctrl.cntlid);
            } else {
                ctrl.release_queue(q.qid);
            }
        }
        for i in 0..self.reqs.len() {
            let r = &mut self.reqs[i];
            if r.state == ReqState::Free || r.qpn != qpn || r.queue != q.id {
                continue;
            }
            if r.state == ReqState::Executing {
                r.orphan = true;
            } else {
                self.release(i);
            }
        }
        self.kick(now);
    }

    /// Receive buffer `slot` completed with a command capsule of `byte_len` bytes (SQE
    /// and in-capsule data) from QP `qpn`.
    pub fn capsule_received(&mut self, slot: u32, qpn: u32, byte_len: u32, now: Instant) {
        self.counters.capsules.fetch_add(1, Ordering::Relaxed);
        let i = slot as usize;
        match self.reqs.get(i).map(|r| r.state) {
            Some(ReqState::Free) => {}
            Some(s) => {
                tracing::error!("receive buffer {slot} completed while its request is {s:?}");
                return;
            }
            None => return,
        }
        let Some(q) = self.queues.get_mut(&qpn) else {
            self.actions.push_back(Action::RepostRecv { slot });
            return;
        };
        if (byte_len as usize) < SQE_LEN || q.closing {
            // Not even a command, or one after a Disconnect: nothing to answer to.
            self.actions.push_back(Action::RepostRecv { slot });
            return;
        }
        if !q.admit() {
            let earlier = self.counters.sq_overflows.fetch_add(1, Ordering::Relaxed);
            if earlier == 0 {
                tracing::warn!(
                    "queue {} (QP {qpn:#x}): capsule beyond twice the SQ size dropped \
                     (the host ignores SQ flow control; counted in sq_overflows)",
                    q.qid
                );
            }
            self.actions.push_back(Action::RepostRecv { slot });
            return;
        }
        // Traffic Based Keep Alive: every command restarts its controller's timer.
        if let Some(c) = &q.ctrl {
            c.note_traffic();
        }
        let queue = q.id;
        let sqe_at = i * SQE_LEN;
        let mut sqe = [0u8; SQE_LEN];
        // SAFETY: receive buffer `slot`'s SQE, inside the SQE region (checked at
        // construction); the SRQ handed it back, nothing writes it until it is re-posted.
        sqe.copy_from_slice(unsafe {
            std::slice::from_raw_parts(self.mem.sqes.ptr.add(sqe_at), SQE_LEN)
        });
        // An admin queue's own buffer holds the SQE alone.
        let room = if slot < self.cfg.srq_depth {
            self.cfg.in_capsule_bytes as usize
        } else {
            0
        };
        let in_capsule_len = (byte_len as usize - SQE_LEN).min(room) as u32;
        self.reqs[i] = Request {
            qpn,
            queue,
            sqe: Sqe::from_array(sqe),
            in_capsule_len,
            arrived: Some(now),
            ..Request::free()
        };
        self.set_state(i, ReqState::New);
        self.process(i, now);
        self.kick(now);
    }

    /// Receive buffer `slot` completed in error (flushed): it goes back to the SRQ.
    pub fn recv_failed(&mut self, slot: u32) {
        if self
            .reqs
            .get(slot as usize)
            .is_some_and(|r| r.state == ReqState::Free)
        {
            self.actions.push_back(Action::RepostRecv { slot });
        }
    }

    /// A send work request of QP `qpn` completed with `status`. Completions of requests
    /// that moved on (a flushed work request of a destroyed queue) are ignored.
    pub fn send_completed(&mut self, wr: WrId, qpn: u32, status: WcStatus, now: Instant) {
        let Some(i) = self.expecting(wr, qpn) else {
            return;
        };
        if status != WcStatus::Success {
            // The QP is in the error state: the control thread disconnects (DREQ) and
            // destroys it; the request ends without a response.
            self.qp_failed(qpn);
            self.release(i);
            self.kick(now);
            return;
        }
        match wr {
            WrId::RdmaRead { .. } => {
                self.return_read_credit(i);
                self.set_state(i, ReqState::ReadyToExecute);
                self.process(i, now);
            }
            WrId::Response { .. } => {
                self.set_state(i, ReqState::Completed);
                self.process(i, now);
            }
            WrId::RdmaWrite { .. } | WrId::Recv { .. } => {}
        }
        self.kick(now);
    }

    /// The driver could not post the work request `wr` of [`Action::PostRdmaRead`],
    /// [`Action::PostWriteAndSend`] or [`Action::PostSend`] (the QP is gone or broken):
    /// a READ's command fails with Data Transfer Error, a response is given up.
    pub fn post_failed(&mut self, wr: WrId, qpn: u32, now: Instant) {
        let Some(i) = self.expecting(wr, qpn) else {
            return;
        };
        match wr {
            WrId::RdmaRead { .. } => {
                self.return_read_credit(i);
                self.finish(i, Status::generic(GenericStatus::DataTransferError));
                self.process(i, now);
            }
            _ => self.release(i),
        }
        self.kick(now);
    }

    /// io_uring completed operation `req` (its user data) with `res` (bytes moved, or
    /// `-errno`).
    pub fn io_completed(&mut self, req: u32, res: i32, now: Instant) {
        self.io_slots_free += 1;
        self.kick_shared = true;
        let i = req as usize;
        if self.reqs.get(i).map(|r| r.state) != Some(ReqState::Executing) {
            self.kick(now);
            return;
        }
        let Kind::Io(cmd) = self.reqs[i].kind else {
            self.kick(now);
            return;
        };
        if res < 0 && self.reqs[i].status.is_success() {
            let errno = -res;
            let advisory =
                matches!(cmd, IoCommand::DatasetManagement { .. }) && errno == libc::EOPNOTSUPP;
            // Deallocate is advisory (NVM Command Set 1.x §3.2.3.2.1): a file system or
            // device that cannot punch holes leaves the data, as nvmet's bdev back end.
            if !advisory {
                let status = io::errno_status(errno);
                self.reqs[i].status = status;
                if let Some((ns, nqn)) = self.namespace_of(i) {
                    let span = self.queues.get(&self.reqs[i].qpn).map(|q| q.span.clone());
                    let _span = span.map(tracing::Span::entered);
                    io::log_io_error(&ns, nqn, &cmd, errno, status, now);
                }
            }
        }
        let r = &mut self.reqs[i];
        if let IoCommand::Read { len, .. }
        | IoCommand::Write { len, .. }
        | IoCommand::Compare { len, .. } = cmd
        {
            if res >= 0 && (res as u32) < len && r.status.is_success() {
                // Short transfer inside a checked range: the file shrank under us.
                r.status = Status::generic(GenericStatus::DataTransferError);
            }
        }
        r.io_pending = r.io_pending.saturating_sub(1);
        if r.io_pending > 0 {
            self.kick(now);
            return;
        }
        if r.orphan {
            self.release(i);
            self.kick(now);
            return;
        }
        if r.sync_after && r.status.is_success() {
            r.sync_after = false;
            match self.namespace_of(i).map(|(ns, _)| ns.file_index) {
                // The slot just freed is this request's.
                Some(file) => {
                    self.io_slots_free -= 1;
                    self.reqs[i].io_pending = 1;
                    self.actions.push_back(Action::SubmitIo {
                        req,
                        op: IoOp::Fsync { file },
                    });
                }
                None => {
                    self.finish(i, Status::generic(GenericStatus::InternalError));
                    self.process(i, now);
                }
            }
            self.kick(now);
            return;
        }
        if r.compare && r.status.is_success() {
            let st = self.compare_media(i);
            self.reqs[i].status = st;
        }
        self.set_state(i, ReqState::Executed);
        self.process(i, now);
        self.kick(now);
    }

    // ----- the state machine ----------------------------------------------------------

    /// The request a send work request names, if it is in the state that posted it.
    fn expecting(&self, wr: WrId, qpn: u32) -> Option<usize> {
        let i = wr.index() as usize;
        let r = self.reqs.get(i)?;
        if r.state == ReqState::Free || r.qpn != qpn {
            return None;
        }
        let ok = match wr {
            WrId::RdmaRead { .. } => r.state == ReqState::TransferringHostToController,
            WrId::RdmaWrite { .. } => r.state == ReqState::TransferringControllerToHost,
            WrId::Response { .. } => matches!(
                r.state,
                ReqState::TransferringControllerToHost | ReqState::Completing
            ),
            WrId::Recv { .. } => false,
        };
        ok.then_some(i)
    }

    fn set_state(&mut self, i: usize, s: ReqState) {
        self.reqs[i].state = s;
        if let Some(t) = &mut self.trace {
            t.push((i as u32, s));
        }
    }

    /// The status is known.
    fn finish(&mut self, i: usize, status: Status) {
        self.reqs[i].status = status;
        self.set_state(i, ReqState::Executed);
    }

    /// Advances request `i` as far as it goes now, then completes the AERs an admin
    /// command released.
    fn process(&mut self, i: usize, now: Instant) {
        self.advance(i, now);
        if let Some(qpn) = self.events_due.take() {
            self.complete_events(qpn, now);
        }
        if let Some(qpn) = self.disconnect_due.take() {
            self.complete_disconnect(qpn, now);
        }
    }

    /// SPDK's `nvmf_rdma_request_process`: one state after the other until the request
    /// waits for an event or a resource.
    fn advance(&mut self, i: usize, now: Instant) {
        loop {
            let moved = match self.reqs[i].state {
                ReqState::New => {
                    self.parse(i);
                    true
                }
                ReqState::NeedBuffer => self.take_buffer(i),
                ReqState::DataTransferToControllerPending => self.post_rdma_read(i),
                ReqState::ReadyToExecute => match self.execute(i, now) {
                    Exec::Moved => true,
                    Exec::Wait => {
                        self.ready.push_back(i as u32);
                        false
                    }
                },
                ReqState::Executed => {
                    self.ready_to_complete(i, now);
                    true
                }
                ReqState::ReadyToComplete => self.post_response(i),
                ReqState::Completed => {
                    self.release(i);
                    false
                }
                ReqState::Free
                | ReqState::TransferringHostToController
                | ReqState::Executing
                | ReqState::AwaitingEvent
                | ReqState::TransferringControllerToHost
                | ReqState::Completing => false,
            };
            if !moved {
                return;
            }
        }
    }

    /// New: classify the command and check its SGL; set up where its data goes.
    fn parse(&mut self, i: usize) {
        let r = self.reqs[i];
        let Some(q) = self.queues.get(&r.qpn) else {
            self.set_state(i, ReqState::Completed);
            return;
        };
        if self.draining || q.ending {
            return self.refuse_while_draining(i);
        }
        let authenticated = q.authenticated();
        let (kind, dir) = match classify(
            &r.sqe,
            q.qid,
            q.ctrl.as_deref(),
            authenticated,
            self.cfg.max_io_bytes,
            &self.reg.ana,
        ) {
            Ok(v) => v,
            Err(st) => return self.finish(i, st),
        };
        self.reqs[i].kind = kind;
        let plan = match sgl::plan(
            &r.sqe,
            matches!(kind, Kind::Admin | Kind::AuthReceive),
            dir,
            r.in_capsule_len as usize,
            self.cfg.max_io_bytes,
        ) {
            Ok(p) => p,
            Err(st) => return self.finish(i, st),
        };
        let is_write = matches!(kind, Kind::Io(IoCommand::Write { .. }));
        let compare = match kind {
            Kind::Io(IoCommand::Compare { len, .. }) => {
                if !self.media_fits(len) {
                    return self.finish(i, Status::generic(GenericStatus::InvalidField).with_dnr());
                }
                true
            }
            _ => false,
        };
        self.reqs[i].compare = compare;
        self.reqs[i].keyed = plan.keyed;
        match plan.transfer {
            Transfer::None => self.set_state(i, ReqState::ReadyToExecute),
            Transfer::FromHost { len } => {
                self.reqs[i].data_len = len;
                self.reqs[i].from_host = true;
                self.wait_for_buffer(i);
            }
            Transfer::ToHost { len } => {
                self.reqs[i].data_len = len;
                self.reqs[i].c2h_len = len;
                self.wait_for_buffer(i);
            }
            Transfer::InCapsule { offset, len } => {
                let at = i * self.cfg.in_capsule_bytes as usize + offset as usize;
                self.reqs[i].data = Data::InCapsule(at);
                self.reqs[i].data_len = len;
                if is_write {
                    self.counters
                        .in_capsule_writes
                        .fetch_add(1, Ordering::Relaxed);
                }
                // O_DIRECT needs the memory aligned (statx DIOALIGN); in-capsule data at
                // an offset that is not goes through a data buffer.
                let align = self
                    .namespace_of(i)
                    .filter(|(ns, _)| ns.ns.is_direct())
                    .map_or(1, |(ns, _)| ns.ns.dio_mem_align().max(1) as usize);
                let misaligned = !(self.mem.in_capsule.ptr as usize + at).is_multiple_of(align);
                if is_write && misaligned {
                    self.reqs[i].bounce_from = Some(at);
                    self.wait_for_buffer(i);
                } else if compare {
                    // The blocks read go to a data buffer.
                    self.wait_for_buffer(i);
                } else {
                    self.set_state(i, ReqState::ReadyToExecute);
                }
            }
        }
    }

    fn wait_for_buffer(&mut self, i: usize) {
        self.set_state(i, ReqState::NeedBuffer);
        self.need_buffer.push_back(i as u32);
    }

    /// NeedBuffer: a buffer when it is this request's turn and the slab has one.
    fn take_buffer(&mut self, i: usize) -> bool {
        if self.need_buffer.front() != Some(&(i as u32)) {
            return false;
        }
        let len = self.reqs[i].data_len as usize;
        let r = self.reqs[i];
        // A Compare's data already in the capsule needs only the buffer of the blocks
        // read; a Compare takes both of its buffers at once or none.
        let need_data = r.data == Data::None || r.bounce_from.is_some();
        let data = if need_data {
            self.pool.alloc(len)
        } else {
            None
        };
        let media = match (r.compare, need_data, data) {
            (_, true, None) => None,
            (true, _, _) => match self.pool.alloc(len) {
                Some(m) => Some(m),
                None => {
                    if let Some(c) = data {
                        let _ = self.pool.free(c);
                    }
                    None
                }
            },
            _ => None,
        };
        if (need_data && data.is_none()) || (r.compare && media.is_none()) {
            if self.reqs[i].waited & WAITED_BUFFER == 0 {
                self.reqs[i].waited |= WAITED_BUFFER;
                self.counters.buffer_waits.fetch_add(1, Ordering::Relaxed);
            }
            return false;
        }
        self.need_buffer.pop_front();
        self.reqs[i].media = media;
        let chunk = match data {
            Some(chunk) => {
                self.reqs[i].data = Data::Chunk(chunk);
                chunk
            }
            // A Compare with its data in the capsule: nothing to move.
            None => {
                self.set_state(i, ReqState::ReadyToExecute);
                return true;
            }
        };
        let r = self.reqs[i];
        if let Some(from) = r.bounce_from {
            let src = Buf {
                region: RegionId::InCapsule,
                offset: from,
                len: r.data_len,
            };
            let dst = Buf {
                region: RegionId::Data,
                offset: chunk.offset,
                len: r.data_len,
            };
            let region = self.region(RegionId::InCapsule);
            // SAFETY: src lies in the in-capsule region (checked by the SGL plan against
            // the receive buffer), dst in the data slab: distinct regions.
            let src_bytes =
                unsafe { std::slice::from_raw_parts(region.ptr.add(src.offset), src.len as usize) };
            self.bytes_mut(dst).copy_from_slice(src_bytes);
            self.counters
                .direct_bounce_bytes
                .fetch_add(u64::from(r.data_len), Ordering::Relaxed);
            self.set_state(i, ReqState::ReadyToExecute);
        } else if r.from_host {
            self.set_state(i, ReqState::DataTransferToControllerPending);
            if let Some(q) = self.queues.get_mut(&r.qpn) {
                q.pending_read.push_back(i as u32);
            }
        } else {
            self.set_state(i, ReqState::ReadyToExecute);
        }
        true
    }

    /// DataTransferToControllerPending: the RDMA READ when it is this request's turn on
    /// its queue and a READ credit and a send credit are free.
    fn post_rdma_read(&mut self, i: usize) -> bool {
        let r = self.reqs[i];
        let Some(q) = self.queues.get_mut(&r.qpn) else {
            self.set_state(i, ReqState::Completed);
            return true;
        };
        if q.pending_read.front() != Some(&(i as u32)) {
            return false;
        }
        if !q.take_read() {
            if r.waited & WAITED_READ == 0 {
                self.reqs[i].waited |= WAITED_READ;
                self.counters
                    .read_credit_waits
                    .fetch_add(1, Ordering::Relaxed);
            }
            return false;
        }
        q.pending_read.pop_front();
        let (Data::Chunk(c), Some(k)) = (r.data, r.keyed) else {
            // Not reached: a host-data request has a buffer and a keyed SGL.
            q.put_read();
            q.put_send(1);
            self.finish(i, Status::generic(GenericStatus::InternalError));
            return true;
        };
        self.reqs[i].read_held = true;
        self.reqs[i].send_held += 1;
        if matches!(r.kind, Kind::Io(IoCommand::Write { .. })) {
            self.counters
                .rdma_read_writes
                .fetch_add(1, Ordering::Relaxed);
        }
        self.actions.push_back(Action::PostRdmaRead {
            qpn: r.qpn,
            wr_id: WrId::RdmaRead { req: i as u32 },
            local: Buf {
                region: RegionId::Data,
                offset: c.offset,
                len: r.data_len,
            },
            remote: RemoteBuf {
                addr: k.addr,
                rkey: k.key,
            },
        });
        self.set_state(i, ReqState::TransferringHostToController);
        true
    }

    fn return_read_credit(&mut self, i: usize) {
        let r = &mut self.reqs[i];
        if !r.read_held {
            return;
        }
        r.read_held = false;
        r.send_held = r.send_held.saturating_sub(1);
        let qpn = r.qpn;
        let id = r.queue;
        if let Some(q) = self.queues.get_mut(&qpn).filter(|q| q.id == id) {
            q.put_read();
            q.put_send(1);
            self.kick_queues.push(qpn);
        }
    }

    /// Executed: the response joins its queue's send order; a read or write that
    /// succeeded is counted for its namespace (the SMART log) and in its latency
    /// histogram (arrival to now).
    fn ready_to_complete(&mut self, i: usize, now: Instant) {
        let r = &self.reqs[i];
        if let (Kind::Io(cmd), true) = (r.kind, r.status.is_success()) {
            self.count_io(r.file, cmd);
            let dir = match cmd {
                IoCommand::Read { .. } | IoCommand::Compare { .. } => Some(latency::READ),
                IoCommand::Write { .. } => Some(latency::WRITE),
                _ => None,
            };
            if let (Some(dir), Some(at), Some(h)) =
                (dir, r.arrived, self.latency.get_mut(r.file as usize))
            {
                h[dir].record(now.saturating_duration_since(at));
            }
        }
        let qpn = self.reqs[i].qpn;
        let id = self.reqs[i].queue;
        match self.queues.get_mut(&qpn).filter(|q| q.id == id) {
            Some(q) => {
                q.pending_send.push_back(i as u32);
                self.set_state(i, ReqState::ReadyToComplete);
            }
            None => self.set_state(i, ReqState::Completed),
        }
    }

    /// ReadyToComplete: the CQE (and a read's data) when it is this response's turn and
    /// its send credits are free.
    fn post_response(&mut self, i: usize) -> bool {
        let r = self.reqs[i];
        let data = match (r.status.is_success() && r.c2h_len > 0, r.keyed) {
            (true, Some(k)) => self.data_buf(i).map(|b| (k, b)),
            _ => None,
        };
        let Some(q) = self.queues.get_mut(&r.qpn) else {
            self.set_state(i, ReqState::Completed);
            return true;
        };
        if q.pending_send.front() != Some(&(i as u32)) {
            return false;
        }
        let need = if data.is_some() { 2 } else { 1 };
        if !q.take_send(need) {
            if r.waited & WAITED_SEND == 0 {
                self.reqs[i].waited |= WAITED_SEND;
                self.counters
                    .send_credit_waits
                    .fetch_add(1, Ordering::Relaxed);
            }
            return false;
        }
        q.pending_send.pop_front();
        // Answered: the command leaves the queue's count now, as the host frees its SQ
        // slot on this CQE. Its receive buffer stays held until the response SEND
        // completes, which can take a while behind an RDMA READ under repair (send
        // completions come in order); counting it until then would drop the host's
        // next, legitimate capsules.
        q.answered();
        if q.disconnect.is_some() && q.outstanding() == 1 {
            // Only the Disconnect is left unanswered: it completes now, last.
            self.disconnect_due = Some(r.qpn);
        }
        let mut cqe = Cqe::new(r.sqe.cid(), q.qid, q.sqhd, r.status, r.dw0);
        cqe.set_dw1(r.dw1);
        if !r.status.is_success() {
            self.counters
                .error_completions
                .fetch_add(1, Ordering::Relaxed);
            if let Some(c) = &q.ctrl {
                c.record_error(q.qid, &r.sqe, r.status);
            }
        }
        let slot = Buf {
            region: RegionId::Responses,
            offset: i * RESP_SLOT,
            len: CQE_LEN as u32,
        };
        self.bytes_mut(slot).copy_from_slice(&cqe.to_array());
        let rq = &mut self.reqs[i];
        rq.answered = true;
        rq.send_held += need;
        let response = Response {
            wr_id: WrId::Response { req: i as u32 },
            cqe: slot,
            invalidate_rkey: r.keyed.filter(|k| k.invalidate).map(|k| k.key),
        };
        match data {
            Some((k, buf)) => {
                self.actions.push_back(Action::PostWriteAndSend {
                    qpn: r.qpn,
                    write_wr_id: WrId::RdmaWrite { req: i as u32 },
                    data: Buf {
                        len: r.c2h_len,
                        ..buf
                    },
                    remote: RemoteBuf {
                        addr: k.addr,
                        rkey: k.key,
                    },
                    response,
                });
                self.set_state(i, ReqState::TransferringControllerToHost);
            }
            None => {
                self.actions.push_back(Action::PostSend {
                    qpn: r.qpn,
                    response,
                });
                self.set_state(i, ReqState::Completing);
            }
        }
        true
    }

    /// Ends request `i`: its buffer back to the pool, its credits back to its queue (if
    /// that still exists), its receive buffer back to the SRQ.
    fn release(&mut self, i: usize) {
        let r = self.reqs[i];
        if let Data::Chunk(c) = r.data {
            if let Err(e) = self.pool.free(c) {
                tracing::error!("request {i}: {e}");
            }
            self.kick_shared = true;
        }
        if let Some(c) = r.media {
            if let Err(e) = self.pool.free(c) {
                tracing::error!("request {i}: {e}");
            }
            self.kick_shared = true;
        }
        let me = i as u32;
        match r.state {
            ReqState::NeedBuffer => self.need_buffer.retain(|&j| j != me),
            ReqState::ReadyToExecute => self.ready.retain(|&j| j != me),
            _ => {}
        }
        if let Some(q) = self.queues.get_mut(&r.qpn).filter(|q| q.id == r.queue) {
            if !r.answered && r.state != ReqState::Free {
                q.answered();
            }
            match r.state {
                ReqState::DataTransferToControllerPending => q.pending_read.retain(|&j| j != me),
                ReqState::ReadyToComplete => q.pending_send.retain(|&j| j != me),
                _ => {}
            }
            if r.read_held {
                q.put_read();
            }
            if r.send_held > 0 || r.read_held {
                q.put_send(r.send_held);
                self.kick_queues.push(r.qpn);
            }
        }
        if r.kind == Kind::Disconnect && r.answered && r.status.is_success() {
            // Its response was sent: the queue is over; the control thread disconnects it.
            self.actions.push_back(Action::EndQueue {
                qpn: r.qpn,
                why: QueueEnd::HostFabricsDisconnect,
            });
        }
        if r.ends_queue && r.answered {
            // The Failure1 (or the CQE of the host's Failure2) went out first.
            self.actions.push_back(Action::EndQueue {
                qpn: r.qpn,
                why: QueueEnd::AuthenticationFailed,
            });
        }
        self.reqs[i] = Request::free();
        self.set_state(i, ReqState::Free);
        self.actions.push_back(Action::RepostRecv { slot: me });
    }

    /// QP `qpn` failed: reported once.
    fn qp_failed(&mut self, qpn: u32) {
        if let Some(q) = self.queues.get_mut(&qpn) {
            if !q.error_reported {
                q.error_reported = true;
                let _span = q.span.enter();
                tracing::info!("QP {qpn:#x} (queue {}) went to the error state", q.qid);
                self.actions.push_back(Action::ReportQpError { qpn });
            }
        }
    }

    /// Moves what waits on a resource that came back: the queues whose credits
    /// returned (responses first), then, when a buffer or an io_uring slot was freed,
    /// the buffer queue in order and one pass over the ready queue.
    fn kick(&mut self, now: Instant) {
        loop {
            if let Some(qpn) = self.kick_queues.pop() {
                self.kick_queue(qpn, now);
                continue;
            }
            if !std::mem::take(&mut self.kick_shared) {
                return;
            }
            while let Some(&i) = self.need_buffer.front() {
                self.process(i as usize, now);
                if self.need_buffer.front() == Some(&i) {
                    break;
                }
            }
            for _ in 0..self.ready.len() {
                let Some(i) = self.ready.pop_front() else {
                    break;
                };
                self.process(i as usize, now);
            }
        }
    }

    fn kick_queue(&mut self, qpn: u32, now: Instant) {
        loop {
            let Some(q) = self.queues.get(&qpn) else {
                return;
            };
            let heads = [
                q.pending_send.front().copied(),
                q.pending_read.front().copied(),
            ];
            let mut moved = false;
            for (k, head) in heads.into_iter().enumerate() {
                let Some(i) = head else { continue };
                self.process(i as usize, now);
                let now_head = self.queues.get(&qpn).and_then(|q| {
                    if k == 0 {
                        q.pending_send.front().copied()
                    } else {
                        q.pending_read.front().copied()
                    }
                });
                moved |= now_head != Some(i);
            }
            if !moved {
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests;
