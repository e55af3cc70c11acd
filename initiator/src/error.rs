//! Error values of the host: queue-level ([`QueueError`]) and the public
//! [`HostError`] that every host call returns.
//!
//! NVMe command failures keep the whole decoded status ([`nvme::Status`]: SCT, SC,
//! DNR, M, CRD, NVMe Base 2.x §4.2.3) and print its specification name; transport
//! failures keep the ibverbs work completion status.
use std::net::SocketAddr;

use nvme::{RdmaCmRejectStatus, Status};
use transport::verbs::{VerbsError, WcStatus};

/// Errors of one [`crate::queue::NvmeRdmaQueue`].
#[derive(Debug, Clone, thiserror::Error)]
pub enum QueueError {
    /// No free command slot or the submission queue is full (SQ flow control from
    /// CQE.SQHD): poll for completions and retry.
    #[error("queue full: no free command slot or submission queue entry")]
    Full,
    /// The command's data does not fit the slot's data buffer.
    #[error("data length {len} bytes exceeds the queue's {max} bytes per command")]
    TooLarge {
        /// Requested length in bytes.
        len: usize,
        /// The queue's `max_io_bytes`.
        max: usize,
    },
    /// `submit_cid` named a slot that is in use or out of range.
    #[error("command identifier {0} is busy or out of range")]
    BadCid(u16),
    /// A transport failure already killed the queue.
    #[error("queue {qid} is dead: {reason}")]
    Dead {
        /// The queue ID.
        qid: u16,
        /// What killed it.
        reason: String,
    },
    /// A verbs call failed.
    #[error("verbs: {0}")]
    Verbs(#[from] VerbsError),
}

/// Everything a host call can fail with.
#[derive(Debug, Clone, thiserror::Error)]
pub enum HostError {
    /// The controller completed the command with an error status (NVMe Base 2.x
    /// §4.2.3); `dw0` is the CQE's command specific Dword 0 (Connect puts IATTR/IPO
    /// there, NVMe over Fabrics 1.1 §3.3 Figure "Connect Response").
    #[error("{command} failed: {status}{}", if *.dw0 != 0 { format!(" (DW0 {:#010x})", .dw0) } else { String::new() })]
    Nvme {
        /// Name of the command (e.g. "Connect", "Read").
        command: &'static str,
        /// The decoded status.
        status: Status,
        /// CQE Dword 0.
        dw0: u32,
    },
    /// The Fabrics Connect was refused (NVMe over Fabrics 1.1 §3.3): the status and,
    /// for Connect Invalid Parameters, which field was wrong.
    #[error("Connect of queue {qid} refused: {status}{}", .detail.as_ref().map(|d| format!(": {d}")).unwrap_or_default())]
    ConnectRefused {
        /// The queue ID of the Connect.
        qid: u16,
        /// The decoded status.
        status: Status,
        /// The offending field (from IATTR/IPO), when named.
        detail: Option<String>,
    },
    /// The target rejected the RDMA CM connection; with NVMe/RDMA private data the
    /// reason is decoded (NVMe RDMA Transport 1.x §3.3).
    #[error("RDMA CM connection of queue {qid} rejected (CM reason {reason}){}", .nvme_status.map(|s| format!(": {s}")).unwrap_or_default())]
    Rejected {
        /// The queue ID.
        qid: u16,
        /// The IB CM reject reason (IBTA Vol 1 §12.6.7.2; 28 = consumer defined).
        reason: u16,
        /// The NVMe/RDMA reject status, if the private data carried one.
        nvme_status: Option<RdmaCmRejectStatus>,
    },
    /// No answer from the target's CM (REQ timed out) or it is unreachable.
    #[error("RDMA CM: {0} unreachable")]
    Unreachable(SocketAddr),
    /// An operation did not finish in time.
    #[error("timed out waiting for {0}")]
    Timeout(String),
    /// A work request failed (`IBV_WC_*` status other than success): the queue is
    /// dead afterwards (IBTA Vol 1 §10.8: the QP moved to the Error state).
    #[error("transport error on queue {qid}: {status} ({what})")]
    Transport {
        /// The queue ID.
        qid: u16,
        /// The work completion status.
        status: WcStatus,
        /// What the failed work request was doing.
        what: &'static str,
    },
    /// The target disconnected the queue (RDMA CM DREQ, e.g. after its Keep Alive
    /// timer expired): outstanding commands fail and the queue is dead.
    #[error("the target disconnected queue {qid}")]
    TargetDisconnected {
        /// The queue ID.
        qid: u16,
    },
    /// The target violated the protocol (e.g. a CQE for an unknown command).
    #[error("protocol error: {0}")]
    Protocol(String),
    /// A queue-level error.
    #[error(transparent)]
    Queue(#[from] QueueError),
    /// The RDMA device, socket or CM agent failed.
    #[error("RDMA device: {0}")]
    Device(String),
    /// A caller error: an argument out of range (e.g. an unaligned length).
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// The host was disconnected or its poll thread is gone.
    #[error("host disconnected")]
    Disconnected,
}

impl From<VerbsError> for HostError {
    fn from(e: VerbsError) -> Self {
        HostError::Queue(QueueError::Verbs(e))
    }
}

impl HostError {
    /// The NVMe status if the controller answered with an error.
    pub fn nvme_status(&self) -> Option<Status> {
        match self {
            HostError::Nvme { status, .. } | HostError::ConnectRefused { status, .. } => {
                Some(*status)
            }
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nvme::CommandSpecificStatus;

    #[test]
    fn display_is_readable() {
        let e = HostError::Nvme {
            command: "Connect",
            status: Status::command_specific(CommandSpecificStatus::ConnectInvalidParameters)
                .with_dnr(),
            dw0: 0x0001_0100,
        };
        assert_eq!(
            e.to_string(),
            "Connect failed: Connect Invalid Parameters (SCT 1h, SC 82h, DNR) (DW0 0x00010100)"
        );
        let r = HostError::Rejected {
            qid: 1,
            reason: 28,
            nvme_status: Some(RdmaCmRejectStatus::NoResources),
        };
        assert_eq!(
            r.to_string(),
            "RDMA CM connection of queue 1 rejected (CM reason 28): No Resources"
        );
        let t = HostError::Transport {
            qid: 0,
            status: WcStatus::RetryExcErr,
            what: "command capsule SEND",
        };
        assert_eq!(
            t.to_string(),
            "transport error on queue 0: IBV_WC_RETRY_EXC_ERR (command capsule SEND)"
        );
    }
}
