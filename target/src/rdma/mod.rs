//! The NVMe/RDMA transport of the target (NVMe RDMA Transport 1.x): one poll group
//! per core, run to completion, reached only through the verbs model.
//!
//! Split as SPDK's `lib/nvmf/rdma.c` and quinn-proto suggest, into a sans-IO core and
//! the driver that carries out what it decides:
//!
//! - [`core`]: the request state machine. Every command is a request (one per receive
//!   buffer) with an explicit [`core::ReqState`]; one `process` advances it, events
//!   (capsule received, work completion, io_uring completion) only set a state and kick
//!   it, and back-pressure (no data buffer, no send credit, no RDMA READ credit, no
//!   io_uring slot) is a state with a queue. It returns [`Action`](action::Action)s.
//! - [`queue`]: per-queue state: SQ head, SQ flow control, send and READ credits.
//! - `sgl`: the SGL checks (keyed data block, in-capsule data) of a command.
//! - [`wr_id`]: the typed id every work request carries.
//! - [`poll_group`]: the driver: the provider's context, CQ and SRQ, the registered
//!   regions, the io_uring ring and the poll loop, executing the core's actions.
//! - [`sim`]: a simulated transport and io_uring for the core (its unit tests and the
//!   capsule fuzz target).
use std::sync::atomic::AtomicU64;

use std::time::Duration;

use crossbeam::channel::Sender;
use transport::memlock::MemlockError;
use transport::verbs::connection::{AcceptToken, ConnRequest};

use crate::oplog::QueueEnd;

pub mod action;
pub mod admin_recv;
pub mod core;
pub mod poll_group;
pub mod queue;
pub(crate) mod sgl;
#[doc(hidden)]
pub mod sim;
pub mod wr_id;

pub use poll_group::PollGroup;

pub use nvme::SQE_LEN;
/// Bytes of one response slot of the response region (a CQE is 16; 64 keeps slots
/// cache-line aligned).
pub const RESP_SLOT: usize = 64;
pub use nvme::CQE_LEN;

/// The default [`PollGroupConfig::idle_spin`]: 200 us, ten times the round trip of a
/// QD1 4 KiB read over the soft provider on loopback.
pub const DEFAULT_IDLE_SPIN: Duration = Duration::from_micros(200);

/// Poll group sizing.
#[derive(Clone, Copy, Debug)]
pub struct PollGroupConfig {
    /// Receive buffers in the SRQ (= requests in flight for all queues of the group).
    pub srq_depth: u32,
    /// Bytes of in-capsule data a receive buffer holds after the 64-byte SQE.
    pub in_capsule_bytes: u32,
    /// Bytes of the registered data slab ([`crate::memory::plan`] sizes it).
    pub data_slab_bytes: usize,
    /// Register the data slab and the receive region with io_uring as fixed buffers
    /// ([`crate::memory::MemoryPlan::io_uring_fixed`]); otherwise, or when the kernel
    /// refuses, the ring uses them as plain buffers.
    pub io_uring_fixed: bool,
    /// Largest data transfer of one command (MDTS).
    pub max_io_bytes: u32,
    /// Admin queues with receive buffers of their own in the first poll group of an
    /// address ([`admin_recv`]; more share the SRQ).
    pub admin_queues: u32,
    /// io_uring submission queue entries.
    pub ring_entries: u32,
    /// How long a poll group busy-polls with nothing to do before it arms its CQ and
    /// sleeps in `Context::wait` (only with no io_uring I/O in flight): longer than the
    /// gap between a QD1 host's commands, so a busy queue never waits for a wake-up.
    pub idle_spin: Duration,
}

impl Default for PollGroupConfig {
    fn default() -> Self {
        PollGroupConfig {
            srq_depth: 512,
            in_capsule_bytes: 4096,
            data_slab_bytes: crate::memory::DEFAULT_DATA_SLAB_BYTES as usize,
            io_uring_fixed: true,
            max_io_bytes: 1 << 20,
            admin_queues: admin_recv::DEFAULT_ADMIN_QUEUES,
            ring_entries: 512,
            idle_spin: DEFAULT_IDLE_SPIN,
        }
    }
}

impl PollGroupConfig {
    /// Bytes of the receive region that io_uring pins (fixed buffer 1): the in-capsule
    /// data of every SRQ buffer, `srq_depth x in_capsule_bytes`. A receive scatters over
    /// two SGEs, as Linux nvmet-rdma's: the 64-byte SQE into the SQE region (registered
    /// with the RDMA device only) and the in-capsule data into this one, so in-capsule
    /// data starts at a multiple of `in_capsule_bytes` (page aligned with the default
    /// 4096, which O_DIRECT writes can use in place).
    pub fn recv_region_bytes(&self) -> usize {
        self.srq_depth as usize * self.in_capsule_bytes as usize
    }

    /// Bytes of the other registered regions, in whole pages: the SQE slots
    /// (`x 64`) and the response slots (`x RESP_SLOT`) of the SRQ's buffers and the
    /// admin queues' own. Only a provider whose registration pins (verbs) pins them.
    pub fn other_mr_bytes(&self) -> usize {
        let page = transport::memlock::page_size() as usize;
        let n = (self.srq_depth + self.admin_queues * admin_recv::ADMIN_QUEUE_BUFFERS) as usize;
        (n * SQE_LEN).div_ceil(page) * page + (n * RESP_SLOT).div_ceil(page) * page
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
    /// Admin queues that got receive buffers of their own (not the SRQ's).
    pub admin_own_buffers: AtomicU64,
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
    /// Bytes of in-capsule write data copied into a data slab chunk because they did
    /// not meet an O_DIRECT namespace's memory alignment (an SGL offset that is not a
    /// multiple of it, or an `in_capsule_bytes` that is not); 0 otherwise.
    pub direct_bounce_bytes: AtomicU64,
    /// Commands answered with an error status.
    pub error_completions: AtomicU64,
    /// Commands that waited for a data buffer.
    pub buffer_waits: AtomicU64,
    /// Responses that waited for a send credit (the QP's send queue was full).
    pub send_credit_waits: AtomicU64,
    /// RDMA READs that waited for a READ credit (the queue's ORD was in use).
    pub read_credit_waits: AtomicU64,
    /// SRQ limit events (`IBV_EVENT_SRQ_LIMIT_REACHED`): fewer than 1/8 of the SRQ's
    /// receive buffers were posted, the rest held by commands in flight; hosts may get
    /// RNR NAKs until they come back.
    pub srq_limit_events: AtomicU64,
    /// Receive buffers posted again after their first re-post failed (a refill on an
    /// SRQ limit event or a later poll round).
    pub recv_refills: AtomicU64,
    /// Times the poll group armed its CQ and slept in `Context::wait` (idle longer
    /// than [`PollGroupConfig::idle_spin`] with nothing in flight).
    pub sleeps: AtomicU64,
    /// Of the data slab and the receive region, how many io_uring registered as fixed
    /// buffers (2, or 1 when there is no receive region); the others serve as plain
    /// buffers because `RLIMIT_MEMLOCK` left no room ([`crate::memory`]). Set at start.
    pub io_uring_fixed_buffers: AtomicU64,
}

/// What the control thread asks of a poll group.
pub enum GroupCmd {
    /// Create the QP of a connection request through the connection manager
    /// (`ConnectionManager::create_accept_qp`) and add its queue; the reply is what the
    /// accept needs (QPN, PSN, the RDMA READ depths), or why there is no queue.
    NewQueue(NewQueue, Sender<Result<AcceptToken, String>>),
    /// The connection is gone: destroy its QP and release its requests; `why` is
    /// logged ([`crate::oplog::queue_closed`]).
    DestroyQueue { qpn: u32, why: QueueEnd },
    /// The QPNs of every queue of controller `cntlid` in this group (for a Keep Alive
    /// expiry, which tears the controller's queues down).
    QueuesOf {
        cntlid: u16,
        reply: Sender<Vec<u32>>,
    },
    /// Drain for a clean shutdown ([`core::RequestCore::drain`]): answer what is in
    /// flight, refuse what comes; the report goes out once nothing is in flight.
    Drain(Sender<DrainReport>),
    /// A copy of the counters the poll group keeps in its own state (completion
    /// latency, queues, its QPs' transport counters), for a scrape of the metrics
    /// endpoint ([`crate::metrics`]).
    Metrics(Sender<crate::metrics::GroupSnapshot>),
    /// A reload changed namespaces ([`crate::reload`]): put each of `add` in its
    /// io_uring fixed-file slot (and the core's per-namespace tables), empty the slots
    /// of `remove` (fixed-file indices); the reply says whether every slot took.
    Namespaces {
        add: Vec<crate::subsystem::NamespaceEntry>,
        remove: Vec<u32>,
        reply: Sender<Result<(), String>>,
    },
    /// Events were posted to controllers `cntlids` (a reload): complete their
    /// Asynchronous Event Requests held in this group now
    /// ([`core::RequestCore::complete_held_events`]), not at their next admin command.
    CompleteHeldEvents { cntlids: Vec<u16> },
    /// A reload ends controllers `cntlids` or closes namespaces on fixed files `files`
    /// ([`core::RequestCore::quiesce`]): their queues take no new command; the reply
    /// is how many requests of theirs (and io_uring operations on `files`) are still
    /// in flight. Sent again until every group answers 0.
    Quiesce {
        cntlids: Vec<u16>,
        files: Vec<u32>,
        reply: Sender<u32>,
    },
    /// Stop the poll loop.
    Shutdown,
}

/// A poll group's answer to [`GroupCmd::Drain`]: nothing of it is in flight any more.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DrainReport {
    /// The poll group's index.
    pub group: u32,
    /// What the drain did.
    pub counts: core::DrainCounts,
}

/// A new queue: the connection request and what the target decided from its
/// NVMe/RDMA private data.
#[derive(Clone, Debug)]
pub struct NewQueue {
    /// The RDMA CM connection request (path, QPN, PSN, RDMA READ depths).
    pub req: ConnRequest,
    /// Queue ID (0: admin queue).
    pub qid: u16,
    /// Submission queue size (HSQSIZE + 1).
    pub sq_size: u16,
    /// RDMA READs the target asks to have outstanding toward the host (its ORD:
    /// `min(host responder resources, MAX_ORD)`); the connection manager caps it by the
    /// device's `max_qp_init_rd_atom` ([`AcceptToken::initiator_depth`] is the result,
    /// the queue's READ credits).
    pub ord: u8,
    /// The port the request came to: an index in [`crate::subsystem::Registry::ports`].
    pub port: usize,
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
    /// Why the queue ends: [`QueueEnd::QpError`], or the end the core decided
    /// ([`action::Action::EndQueue`]).
    pub why: QueueEnd,
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
