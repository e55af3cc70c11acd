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
//!   io_uring slot) is a state with a queue. It returns [`core::Action`]s.
//! - [`queue`]: per-queue state: SQ head, SQ flow control, send and READ credits.
//! - [`sgl`]: the SGL checks (keyed data block, in-capsule data) of a command.
//! - [`wr_id`]: the typed id every work request carries.
//! - [`poll_group`]: the driver: the provider's context, CQ and SRQ, the registered
//!   regions, the io_uring ring and the poll loop, executing the core's actions.
//! - [`sim`]: a simulated transport and io_uring for the core (its unit tests and the
//!   capsule fuzz target).
use std::sync::atomic::AtomicU64;

use crossbeam::channel::Sender;
use transport::memlock::MemlockError;
use transport::verbs::Mtu;

use crate::oplog::QueueEnd;

pub mod action;
pub mod core;
pub mod poll_group;
pub mod queue;
pub(crate) mod sgl;
#[doc(hidden)]
pub mod sim;
pub mod wr_id;

pub use poll_group::PollGroup;

/// Bytes of the SQE at the start of a command capsule (NVMe over Fabrics 1.x §3.3).
pub const SQE_LEN: usize = 64;
/// Bytes of one response slot of the response region (a CQE is 16; 64 keeps slots
/// cache-line aligned).
pub const RESP_SLOT: usize = 64;
/// Bytes of a response capsule: one CQE.
pub const CQE_LEN: u32 = 16;

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
    /// RDMA READs the target may have outstanding toward the host (its ORD: the
    /// initiator depth of the REP, `min(host responder resources, MAX_ORD)`).
    pub ord: u8,
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
