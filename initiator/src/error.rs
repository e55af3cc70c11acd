//! Error values of the host: queue-level ([`QueueError`]) and the public
//! [`HostError`] that every host call returns.
//!
//! NVMe command failures keep the whole decoded status ([`nvme::Status`]: SCT, SC,
//! DNR, M, CRD, NVMe Base 2.x §4.2.3) and print its specification name; transport
//! failures keep the ibverbs work completion status.
use std::net::SocketAddr;
use std::time::Duration;

use nvme::{RdmaCmRejectStatus, Status};
use transport::verbs::connection::ConnError;
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
    /// The command's data is longer than the buffer given with it (or no buffer was
    /// given).
    #[error("data length {len} bytes but the command's buffer holds {buf} bytes")]
    ShortBuffer {
        /// Requested length in bytes.
        len: usize,
        /// The buffer's length.
        buf: usize,
    },
    /// No buffer of the host's pool could be had for the command.
    #[error(transparent)]
    Pool(#[from] crate::pool::PoolError),
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
    /// The target rejected the RDMA CM connection (a CM REJ); the message names the
    /// reason in words and what to do ([`rejection_words`]). With NVMe/RDMA private
    /// data the NVMe/RDMA status is decoded (NVMe RDMA Transport 1.x §3.3).
    #[error("{}", rejection_words(*.qid, *.target, *.reason, *.nvme_status))]
    Rejected {
        /// The queue ID.
        qid: u16,
        /// The target's address and RDMA CM port.
        target: SocketAddr,
        /// The IB CM reject reason (IBTA Vol 1 §12.6.7.2, `CM_REJ_*`: 8 invalid
        /// service ID, 10 stale connection, 28 consumer defined).
        reason: u16,
        /// The NVMe/RDMA reject status, if the private data carried one.
        nvme_status: Option<RdmaCmRejectStatus>,
    },
    /// Nothing answered the RDMA CM connection request of queue `qid` within
    /// `waited` (no REP, REJ or MRA): no target there, or the address unreachable.
    #[error(
        "no answer from {target} to the connection request of queue {qid} within {} ms: \
         is a target running there (RDMA CM port {}), and is {} reachable from this host \
         (RoCEv2 uses UDP port 4791)?",
        .waited.as_millis(), .target.port(), .target.ip()
    )]
    Unreachable {
        /// The queue ID.
        qid: u16,
        /// The target's address and RDMA CM port.
        target: SocketAddr,
        /// How long the host waited.
        waited: Duration,
    },
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
    /// The host's registered memory does not fit `RLIMIT_MEMLOCK`, or the buffer pool
    /// cannot hold one command's data; the message names the limit and the fix.
    #[error("pinned memory: {0}")]
    Memlock(String),
    /// The RDMA device, socket or CM agent failed.
    #[error("RDMA device: {0}")]
    Device(String),
    /// A caller error: an argument out of range (e.g. an unaligned length).
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// The controller was declared dead (its Keep Alive failed, NVMe Base 2.x §3.9):
    /// commands outstanding on its I/O queues will not complete.
    #[error("the controller was declared dead ({0})")]
    ControllerDead(String),
    /// The controller is reconnecting after it was lost (the reason given; see
    /// [`crate::lifecycle`]): admin commands fail with this until it is live again,
    /// while I/O is held and reissued.
    #[error("the controller is reconnecting ({0}): try again once it is live")]
    Reconnecting(String),
    /// The controller is reconnecting and `fast_io_fail_tmo` has passed: held I/O
    /// failed with this, and new I/O fails at once until the controller is live again
    /// (Linux's failfast).
    #[error("I/O failed: fast_io_fail_tmo passed while the controller reconnects ({0})")]
    FailFast(String),
    /// The host was disconnected or its poll thread is gone.
    #[error("host disconnected")]
    Disconnected,
    /// The target asked queue `qid` to authenticate (AUTHREQ in the Connect response,
    /// NVMe Base 2.x §8.13.1) and the host has no secret for it.
    #[error(
        "the target requires in-band authentication (DH-HMAC-CHAP) on queue {qid}: give \
         the host secret it has for this host NQN (HostOptions::dhchap_secret, \
         --dhchap-secret DHHC-1:...)"
    )]
    AuthenticationRequired {
        /// The queue ID.
        qid: u16,
    },
    /// The DH-HMAC-CHAP transaction of queue `qid` failed: the controller refused the
    /// host (wrong secret, no common hash or DH group), or the controller did not
    /// prove the controller secret, or it broke the protocol (NVMe Base 2.x §8.13.5).
    #[error("authentication of queue {qid} failed: {source}")]
    Authentication {
        /// The queue ID.
        qid: u16,
        /// The cause.
        source: dhchap::HostAuthError,
    },
}

/// A CM REJ of queue `qid`'s connection to `target` in words, with what to do: reason 8
/// (invalid service ID: nothing listens on that RDMA CM port), 10 (stale connection),
/// 28 (consumer defined: the NVMe/RDMA reject status, NVMe RDMA Transport 1.x §3.3);
/// others by their IBTA name (Vol 1 §12.6.7.2, Table 112). The reason number is kept
/// in parentheses for searching.
pub fn rejection_words(
    qid: u16,
    target: SocketAddr,
    reason: u16,
    nvme_status: Option<RdmaCmRejectStatus>,
) -> String {
    use transport::wire::cm::{
        CM_REJ_CONSUMER_DEFINED, CM_REJ_INVALID_SERVICE_ID, CM_REJ_STALE_CONN,
    };
    let (ip, port) = (target.ip(), target.port());
    match (reason, nvme_status) {
        (CM_REJ_INVALID_SERVICE_ID, _) => format!(
            "nothing listens on RDMA CM port {port} at {ip} (the connection of queue {qid} \
             was rejected: CM reason 8, invalid service ID): check the port (--trsvcid; \
             NVMe/RDMA uses 4420) and that the target serves this address"
        ),
        (CM_REJ_STALE_CONN, _) => format!(
            "the target at {target} refused queue {qid} as a stale connection (CM reason \
             10): it still holds an earlier connection from this address and QP, e.g. of a \
             process that was killed; it disconnects that one, so retry in a few seconds"
        ),
        (CM_REJ_CONSUMER_DEFINED, Some(st)) => format!(
            "the target at {target} refused queue {qid}: {} (NVMe/RDMA status {:#x}, CM \
             reason 28): {}",
            st.name(),
            st.value(),
            reject_status_hint(st)
        ),
        (CM_REJ_CONSUMER_DEFINED, None) => format!(
            "the target at {target} refused queue {qid} without an NVMe/RDMA status (CM \
             reason 28, consumer defined): is it an NVMe/RDMA target on that port?"
        ),
        (r, _) => format!(
            "the target at {target} rejected the connection of queue {qid}: {} (CM reason {r})",
            transport::cm::rej_reason_name(r)
        ),
    }
}

/// What an NVMe/RDMA reject status means for the host, and what to change.
fn reject_status_hint(st: RdmaCmRejectStatus) -> &'static str {
    use RdmaCmRejectStatus as S;
    match st {
        S::InvalidHsqsize => {
            "the queue is larger than the target allows: use a smaller queue depth (nvmf-bench --iodepth)"
        }
        S::InvalidQid => {
            "more I/O queues than the target allows: use fewer (nvmf-bench --numjobs)"
        }
        S::NoResources => "the target is out of resources: retry later, or use fewer queues",
        S::InvalidCntlid => {
            "the controller is gone on the target (its Keep Alive expired?): connect again"
        }
        S::InvalidIrd | S::InvalidOrd => "the RDMA READ depths offered do not suit the target",
        S::InvalidLen | S::InvalidRecfmt | S::InvalidHrqsize => {
            "the target cannot read this host's connection request (incompatible versions?)"
        }
    }
}

impl From<VerbsError> for HostError {
    fn from(e: VerbsError) -> Self {
        HostError::Queue(QueueError::Verbs(e))
    }
}

impl HostError {
    /// The host's error for a connection of queue `qid` to `target` that the
    /// connection manager could not make, `waited` after it started: a REJ as
    /// [`HostError::Rejected`] (its reason in words; NVMe/RDMA private data decoded;
    /// [`ConnError::Stale`] as reason 10), no answer or a timeout as
    /// [`HostError::Unreachable`], anything else as [`HostError::Device`] naming it.
    pub fn from_conn(
        qid: u16,
        target: std::net::SocketAddr,
        waited: std::time::Duration,
        e: ConnError,
    ) -> HostError {
        match e {
            ConnError::Rejected {
                reason,
                private_data,
            } => HostError::Rejected {
                qid,
                target,
                reason,
                nvme_status: crate::fabrics::rdma_cm_reject_status(&private_data),
            },
            ConnError::Stale => HostError::Rejected {
                qid,
                target,
                reason: transport::wire::cm::CM_REJ_STALE_CONN,
                nvme_status: None,
            },
            ConnError::Unreachable { .. } => HostError::Unreachable {
                qid,
                target,
                waited,
            },
            ConnError::Timeout { after, .. } => HostError::Unreachable {
                qid,
                target,
                waited: after,
            },
            e @ (ConnError::Cm(_) | ConnError::Verbs(_) | ConnError::Gone) => {
                HostError::Device(format!("queue {qid}: RDMA CM connect: {e}"))
            }
        }
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
        let target: SocketAddr = "127.0.0.2:4420".parse().unwrap();
        let r = HostError::Rejected {
            qid: 1,
            target,
            reason: 28,
            nvme_status: Some(RdmaCmRejectStatus::NoResources),
        };
        assert_eq!(
            r.to_string(),
            "the target at 127.0.0.2:4420 refused queue 1: No Resources (NVMe/RDMA status \
             0x6, CM reason 28): the target is out of resources: retry later, or use fewer \
             queues"
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

    /// Each CM reject reason a user meets is told in words with the fix, never as a
    /// bare number.
    #[test]
    fn cm_rejections_say_what_to_do() {
        let t: SocketAddr = "127.0.0.2:4421".parse().unwrap();
        let rej = |reason, nvme_status| {
            HostError::Rejected {
                qid: 0,
                target: t,
                reason,
                nvme_status,
            }
            .to_string()
        };
        let m = rej(8, None);
        assert!(
            m.starts_with("nothing listens on RDMA CM port 4421 at 127.0.0.2")
                && m.contains("invalid service ID")
                && m.contains("--trsvcid"),
            "{m}"
        );
        let m = rej(10, None);
        assert!(
            m.contains("stale connection") && m.contains("retry in a few seconds"),
            "{m}"
        );
        let m = rej(28, Some(RdmaCmRejectStatus::InvalidHsqsize));
        assert!(
            m.contains("Invalid HSQSIZE") && m.contains("--iodepth") && m.contains("0x4"),
            "{m}"
        );
        let m = rej(28, None);
        assert!(m.contains("without an NVMe/RDMA status"), "{m}");
        let m = rej(26, None);
        assert!(m.contains("invalid path MTU (CM reason 26)"), "{m}");
        let u = HostError::Unreachable {
            qid: 0,
            target: t,
            waited: Duration::from_secs(5),
        }
        .to_string();
        assert_eq!(
            u,
            "no answer from 127.0.0.2:4421 to the connection request of queue 0 within 5000 \
             ms: is a target running there (RDMA CM port 4421), and is 127.0.0.2 reachable \
             from this host (RoCEv2 uses UDP port 4791)?"
        );
    }
}
