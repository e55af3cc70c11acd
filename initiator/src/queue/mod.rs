//! One NVMe queue over one RC QP, as Linux's nvme-rdma runs it (NVMe RDMA Transport 1.x,
//! NVMe over Fabrics 1.1 §2).
//!
//! Three parts, in the manner of quinn-proto's connection and its driver:
//! - [`core`]: [`QueueCore`], the sans-IO queue: command slots and identifiers, SQ
//!   flow control from CQE.SQHD, the memory-window bind / invalidate decisions,
//!   completion matching and the failure of every outstanding command when the queue
//!   dies. It takes events (a submission, a work completion with the response
//!   capsule's bytes, a disconnect) and returns what to post and which commands
//!   completed; it never calls the provider;
//! - [`driver`]: [`NvmeRdmaQueue`], which owns the poll group, the QP, the CQ and the
//!   registered memory of any provider (`P: Provider`, the soft provider by default),
//!   and executes what the core asks for (every data-path provider call of the host is
//!   there);
//! - `connect`: the queue's resources and its connection through the provider's
//!   connection manager (`ConnectionManager::connect`, which brings the QP to RTS),
//!   with the NVMe/RDMA private data and the accept's CRQSIZE check.
//!
//! Life of a command: [`NvmeRdmaQueue::submit`] builds the capsule
//! ([`crate::capsule::build_capsule`]); a keyed SGL first binds the slot's window over
//! exactly the transfer with a fresh key (IBV_WR_BIND_MW), then the capsule goes out as
//! one SEND (SQE plus in-capsule data, gathered with no copy). The command completes
//! when its response capsule has arrived, without waiting for the SEND's completion
//! (the response proves the target has the capsule; see [`core`]); if the response
//! was a plain SEND while a key was granted, a Local Invalidate runs first, so a
//! completed command's key is always dead. The SQ head from CQE.SQHD (and from the
//! completions themselves) limits submissions to the SQ size minus one.
//!
//! Any failed work completion kills the queue: every outstanding command fails with
//! [`HostError::Transport`] and later calls return [`crate::QueueError::Dead`].
mod connect;
pub mod core;
pub mod driver;

use std::net::SocketAddr;
use std::time::Duration;

use nvme::Cqe;

use crate::error::HostError;

pub use self::core::QueueCore;
pub use self::driver::{NvmeRdmaQueue, SubmitError};

pub use nvme::NVMF_RDMA_PORT;
/// The default local ACK timeout code of a queue: the transport's
/// (4.096 us x 2^17 = 537 ms, IBTA §9.7.6.1.3; see its docs for why). Linux hosts ask
/// for 0x13 (2.1 s).
pub use transport::verbs::connection::DEFAULT_ACK_TIMEOUT;
/// RDMA READs the host accepts in flight from the target (its IRD).
pub const DEFAULT_RESPONDER_RESOURCES: u8 = 16;

/// Parameters of one queue.
#[derive(Clone, Debug)]
pub struct QueueConfig {
    /// Queue ID: 0 for the admin queue.
    pub qid: u16,
    /// Queue depth: command slots and receive buffers; the CM request announces
    /// HRQSIZE = depth and HSQSIZE = depth - 1 (0's based).
    pub depth: u16,
    /// Data bytes one command may move (the buffers come from the host's pool).
    pub max_io_bytes: usize,
    /// In-capsule data bytes a host-to-controller command may carry (0: never; the
    /// admin queue always uses 0).
    pub in_capsule_bytes: usize,
    /// The target's address and RDMA CM port (4420).
    pub target: SocketAddr,
    /// Controller ID to put in the CM request (0 for the admin queue).
    pub cntlid: u16,
    /// How long to wait for the CM exchange.
    pub connect_timeout: Duration,
    /// Local ACK timeout code (IBTA §9.7.6.1.3), asked of the connection manager.
    pub local_ack_timeout: u8,
    /// RDMA READs accepted in flight (IRD), announced as CM responder resources.
    pub responder_resources: u8,
}

impl QueueConfig {
    /// A queue `qid` of `depth` slots of `max_io_bytes` toward `target`, no in-capsule
    /// data, 5 s connect timeout, ACK timeout [`DEFAULT_ACK_TIMEOUT`], IRD
    /// [`DEFAULT_RESPONDER_RESOURCES`].
    pub fn new(qid: u16, depth: u16, max_io_bytes: usize, target: SocketAddr) -> Self {
        QueueConfig {
            qid,
            depth,
            max_io_bytes,
            in_capsule_bytes: 0,
            target,
            cntlid: 0,
            connect_timeout: Duration::from_secs(5),
            local_ack_timeout: DEFAULT_ACK_TIMEOUT,
            responder_resources: DEFAULT_RESPONDER_RESOURCES,
        }
    }

    /// Checks the shape of the queue. Errors: [`HostError::InvalidArgument`] for a
    /// depth under 2 (a full SQ keeps one entry empty) or a zero `max_io_bytes`.
    pub fn validate(&self) -> Result<(), HostError> {
        if self.depth < 2 || self.max_io_bytes == 0 {
            return Err(HostError::InvalidArgument(format!(
                "queue depth {} (at least 2) / max_io_bytes {} (at least 1)",
                self.depth, self.max_io_bytes
            )));
        }
        Ok(())
    }
}

/// The outcome of one command: its CQE on success, or why it failed
/// ([`HostError::Nvme`] for an error status, [`HostError::Transport`] when the queue
/// died).
#[must_use]
#[derive(Debug)]
pub struct QueueCompletion {
    /// The command identifier (= slot index).
    pub cid: u16,
    /// The CQE, or the error.
    pub result: Result<Cqe, HostError>,
    /// The data buffer the command carried, handed back (`None` for a command without
    /// one; the queue core itself never holds buffers).
    pub buf: Option<crate::pool::IoBuf>,
}

/// A name for error messages: Fabrics command types, admin opcodes on queue 0, NVM
/// opcodes on I/O queues.
pub fn command_name(qid: u16, opcode: u8, fctype: Option<u8>) -> &'static str {
    if let Some(t) = fctype {
        return nvme::FabricsCommandType::from_value(t)
            .map(|t| t.name())
            .unwrap_or("Fabrics command");
    }
    if qid == 0 {
        nvme::AdminOpcode::from_value(opcode)
            .map(|o| o.name())
            .unwrap_or("admin command")
    } else {
        nvme::NvmOpcode::from_value(opcode)
            .map(|o| o.name())
            .unwrap_or("I/O command")
    }
}
