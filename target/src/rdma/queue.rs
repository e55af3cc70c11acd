//! Per-queue state of the request core: one NVMe/RDMA queue (an RC QP): its SQ head and
//! flow control, its controller after Connect, and the credits that bound what the
//! core posts on its QP (NVMe RDMA Transport 1.x §3; SPDK's `spdk_nvmf_rdma_qpair`):
//!
//! - send credits: the QP's send queue depth (`max_send_wr`). An RDMA READ takes one, a
//!   response SEND one, a read's RDMA WRITE + SEND two; each comes back with the
//!   completion of the signaled work request (an unsignaled WRITE's slot is freed by
//!   the SEND after it, as ibverbs frees send queue entries in order).
//! - READ credits: the queue's ORD, the RDMA READs the host accepts in flight (the
//!   initiator depth of the REP: `min(host responder resources, MAX_ORD)`; a verbs
//!   device's `max_qp_init_rd_atom` caps it as well).
//!
//! Requests waiting for a credit wait here, in order: `pending_read` (SPDK's
//! DATA_TRANSFER_TO_CONTROLLER_PENDING) and `pending_send` (READY_TO_COMPLETE waiting
//! for the send queue, as nvmet's `rsp_wr_wait_list`).
use std::collections::VecDeque;
use std::net::IpAddr;
use std::sync::Arc;

use crate::controller::Controller;
use crate::oplog::QueuePeer;

/// What the core needs to know of a new queue (from the CM exchange and the QP).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QueueParams {
    /// Queue ID from the CM private data (0 = admin queue).
    pub qid: u16,
    /// Submission queue entries (HSQSIZE + 1; at least 1).
    pub sq_size: u16,
    /// The host's address, for the operator's log.
    pub remote: IpAddr,
    /// The host's QPN, for the operator's log.
    pub remote_qpn: u32,
    /// Send queue depth of the QP (`max_send_wr` granted): the send credits.
    pub send_depth: u32,
    /// RDMA READs the queue may have in flight (its ORD, at least 1): the READ credits.
    pub ord: u8,
    /// The port the host connected through: an index in
    /// [`crate::subsystem::Registry::ports`] (its Connect may reach only what that
    /// port serves).
    pub port: usize,
}

/// One queue as the core keeps it.
#[derive(Debug)]
pub struct Queue {
    /// A number no other queue of the core had, so a request left over from a queue
    /// that was removed never touches a later queue with the same QPN.
    pub(crate) id: u64,
    /// Queue ID (0 = admin queue).
    pub qid: u16,
    /// Submission queue entries (at least 1).
    pub sq_size: u16,
    /// SQ head pointer: advanced per command received, reported in every CQE (SQ flow
    /// control, NVMe over Fabrics: every CQE carries SQHD).
    pub sqhd: u16,
    /// The controller, after a successful Connect on this queue.
    pub ctrl: Option<Arc<Controller>>,
    /// The port it connected through ([`QueueParams::port`]).
    pub port: usize,
    /// The queue's DH-HMAC-CHAP transaction when its host must authenticate
    /// ([`crate::subsystem::Subsystem::auth_policy`]); until it succeeds only Fabrics
    /// commands run on the queue.
    pub auth: Option<Box<dhchap::ControllerAuth>>,
    remote: IpAddr,
    remote_qpn: u32,
    /// Commands received and not yet answered (no response posted).
    outstanding: u32,
    /// The QP's first error completion was reported to the control thread.
    pub(crate) error_reported: bool,
    send_credits: u32,
    read_credits: u32,
    /// Requests waiting for a READ credit (and the send credit the READ takes), in order.
    pub(crate) pending_read: VecDeque<u32>,
    /// Responses waiting for send credits, in order.
    pub(crate) pending_send: VecDeque<u32>,
    /// A Fabrics Disconnect (its request) waiting for the queue's other commands to be
    /// answered, its CQE last (NVMe Base 2.x §6.4).
    pub(crate) disconnect: Option<u32>,
    /// A Disconnect was accepted: capsules that arrive after it are dropped (the
    /// specification leaves them undefined; no CQE may follow the Disconnect's).
    pub(crate) closing: bool,
    /// A reload is ending the queue ([`super::RequestCore::quiesce`]): commands that
    /// arrive from now on are answered with Command Aborted due to SQ Deletion.
    pub(crate) ending: bool,
    /// The queue's tracing span (`queue{qid qpn host_addr}`), a child of its
    /// controller's once the Fabrics Connect named one; entered by
    /// the log lines about the queue (never per command).
    pub span: tracing::Span,
}

impl Queue {
    /// A queue with every credit free and no controller.
    pub(crate) fn new(id: u64, p: &QueueParams) -> Queue {
        Queue {
            id,
            qid: p.qid,
            sq_size: p.sq_size.max(1),
            sqhd: 0,
            ctrl: None,
            port: p.port,
            auth: None,
            remote: p.remote,
            remote_qpn: p.remote_qpn,
            outstanding: 0,
            error_reported: false,
            send_credits: p.send_depth.max(1),
            read_credits: u32::from(p.ord.max(1)),
            pending_read: VecDeque::new(),
            pending_send: VecDeque::new(),
            disconnect: None,
            closing: false,
            ending: false,
            span: tracing::Span::none(),
        }
    }

    /// The span of queue `qpn` under `parent` (none: a root span).
    fn make_span(&self, qpn: u32, parent: Option<&tracing::Span>) -> tracing::Span {
        let qpn = crate::oplog::Hex(qpn);
        match parent {
            Some(p) => {
                tracing::info_span!(parent: p, "queue", qid = self.qid, qpn = %qpn, host_addr = %self.remote)
            }
            None => {
                tracing::info_span!("queue", qid = self.qid, qpn = %qpn, host_addr = %self.remote)
            }
        }
    }

    /// Gives the new queue `qpn` its span (before its Connect: no controller).
    pub(crate) fn open_span(&mut self, qpn: u32) {
        self.span = self.make_span(qpn, None);
    }

    /// The Fabrics Connect on queue `qpn` connected it to `ctrl`: the queue's span
    /// becomes a child of the controller's.
    pub(crate) fn attach(&mut self, qpn: u32, ctrl: Arc<Controller>) {
        self.span = self.make_span(qpn, Some(&ctrl.span));
        self.auth = ctrl.subsys.auth_policy(&ctrl.hostnqn).map(|p| {
            Box::new(dhchap::ControllerAuth::new(
                p,
                &ctrl.hostnqn,
                &ctrl.subsys.nqn,
            ))
        });
        self.ctrl = Some(ctrl);
    }

    /// Whether commands other than Fabrics ones may run: no authentication is owed, or
    /// it succeeded (NVMe Base 2.x §8.13.1).
    pub fn authenticated(&self) -> bool {
        self.auth.as_ref().is_none_or(|a| a.is_authenticated())
    }

    /// The queue's identity in the operator's log.
    pub fn peer(&self, qpn: u32) -> QueuePeer {
        QueuePeer {
            host_addr: self.remote,
            host_qpn: self.remote_qpn,
            qpn,
            qid: self.qid,
        }
    }

    /// SQ flow control on a received command: admits it (and advances SQHD) unless the
    /// queue already has twice its SQ size unanswered. A host that respects flow control
    /// has fewer than SQ size; twice as many means it ignores it, and its capsule is
    /// dropped so it cannot take the SRQ or the send queue from the others.
    pub(crate) fn admit(&mut self) -> bool {
        if self.outstanding >= 2 * u32::from(self.sq_size) {
            return false;
        }
        self.outstanding += 1;
        self.sqhd = ((u32::from(self.sqhd) + 1) % u32::from(self.sq_size)) as u16;
        true
    }

    /// A command leaves the unanswered count: its response was posted (the host frees
    /// its SQ slot on that CQE), or it was dropped.
    pub(crate) fn answered(&mut self) {
        self.outstanding = self.outstanding.saturating_sub(1);
    }

    /// Commands received and not yet answered.
    pub fn outstanding(&self) -> u32 {
        self.outstanding
    }

    /// Send credits free now.
    pub fn send_credits(&self) -> u32 {
        self.send_credits
    }

    /// READ credits free now.
    pub fn read_credits(&self) -> u32 {
        self.read_credits
    }

    /// Takes `n` send credits, or none when fewer are free.
    pub(crate) fn take_send(&mut self, n: u32) -> bool {
        if self.send_credits < n {
            return false;
        }
        self.send_credits -= n;
        true
    }

    /// Takes a READ credit and the send credit its work request occupies, or neither.
    pub(crate) fn take_read(&mut self) -> bool {
        if self.read_credits == 0 || self.send_credits == 0 {
            return false;
        }
        self.read_credits -= 1;
        self.send_credits -= 1;
        true
    }

    /// Gives back `n` send credits.
    pub(crate) fn put_send(&mut self, n: u32) {
        self.send_credits += n;
    }

    /// Gives back a READ credit (its send credit comes back with [`Queue::put_send`]).
    pub(crate) fn put_read(&mut self) {
        self.read_credits += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    fn params(sq_size: u16, send_depth: u32, ord: u8) -> QueueParams {
        QueueParams {
            qid: 1,
            sq_size,
            remote: IpAddr::V4(Ipv4Addr::LOCALHOST),
            remote_qpn: 0x11,
            send_depth,
            ord,
            port: 0,
        }
    }

    #[test]
    fn sq_flow_control_admits_twice_the_sq_size_and_wraps_sqhd() {
        let mut q = Queue::new(1, &params(4, 16, 1));
        for i in 1..=8u16 {
            assert!(q.admit(), "command {i}");
            assert_eq!(q.sqhd, i % 4);
        }
        assert!(!q.admit(), "a ninth unanswered command is beyond 2 x SQ");
        assert_eq!(q.sqhd, 0, "a dropped capsule does not move SQHD");
        q.answered();
        assert!(q.admit());
        assert_eq!(q.outstanding(), 8);
        // The largest SQ does not overflow the count.
        let mut big = Queue::new(2, &params(u16::MAX, 16, 1));
        for _ in 0..70_000 {
            assert!(big.admit());
        }
    }

    #[test]
    fn credits_are_taken_whole_and_given_back() {
        let mut q = Queue::new(1, &params(32, 3, 1));
        assert!(q.take_read());
        assert!(!q.take_read(), "ORD 1");
        assert!(q.take_send(2));
        assert!(!q.take_send(1), "3 send slots: READ + WRITE + SEND");
        q.put_read();
        assert!(!q.take_read(), "a READ credit alone is not enough");
        q.put_send(3);
        assert!(q.take_read());
        assert_eq!((q.read_credits(), q.send_credits()), (0, 2));
    }
}
