//! Draining the core for a clean shutdown (issue 16 item 3): from
//! [`RequestCore::drain`] on, every command already received runs to its CQE, every
//! command that arrives later is answered at once with Command Aborted due to SQ
//! Deletion (generic 08h, without DNR: the host retries it once it has reconnected),
//! and the held Asynchronous Event Requests are answered with that status too. The
//! driver polls [`RequestCore::in_flight`] until it is 0: then every request's response
//! was sent (its SEND completed) and nothing is left in io_uring.
use std::time::Instant;

use nvme::status::{GenericStatus, Status};

use super::{Kind, ReqState, RequestCore};

/// The status of a command the draining target does not run.
pub const DRAIN_STATUS: Status = Status::generic(GenericStatus::AbortedSqDeletion);

/// What a drain did, for the shutdown's report.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DrainCounts {
    /// Requests in flight when the drain began.
    pub in_flight_at_start: u32,
    /// Commands answered with [`DRAIN_STATUS`] (late arrivals and held AERs).
    pub aborted: u64,
}

impl RequestCore {
    /// Starts draining at `now` (see the module docs). Returns the requests in flight
    /// now; held AERs are answered at once (their actions follow).
    pub fn drain(&mut self, now: Instant) -> u32 {
        if !self.draining {
            self.draining = true;
            self.drain_counts.in_flight_at_start = self.in_flight();
        }
        // The controllers forget their held requests; they are answered here.
        for q in self.queues.values() {
            if let (0, Some(ctrl)) = (q.qid, &q.ctrl) {
                ctrl.drain_aers();
            }
        }
        for i in 0..self.reqs.len() {
            let r = &self.reqs[i];
            let aer = r.state == ReqState::AwaitingEvent
                && r.kind == Kind::Admin
                && r.sqe.opcode() == nvme::AdminOpcode::AsyncEventRequest.value();
            if aer {
                self.drain_counts.aborted += 1;
                self.finish(i, DRAIN_STATUS);
                self.process(i, now);
            }
        }
        self.kick(now);
        self.drain_counts.in_flight_at_start
    }

    /// Whether [`RequestCore::drain`] was called.
    pub fn is_draining(&self) -> bool {
        self.draining
    }

    /// Requests not free: received and not yet done with (their response SEND not yet
    /// completed, io_uring still holding them, or held AERs).
    pub fn in_flight(&self) -> u32 {
        self.reqs
            .iter()
            .filter(|r| r.state != ReqState::Free)
            .count() as u32
    }

    /// Quiesces for a reload (see [`crate::reload`]): the queues of controllers
    /// `cntlids` take no new command from now on (each is answered with
    /// [`DRAIN_STATUS`]) while those received run to their CQEs. Returns how many of
    /// theirs have no response posted yet (held Asynchronous Event Requests not
    /// counted: the queue's end releases them; a response posted counts as answered,
    /// its SEND's completion needs the host's ACK), plus the requests io_uring still holds on the fixed files
    /// `files` (removed namespaces, flushed once this is 0). Called again until 0.
    pub fn quiesce(&mut self, cntlids: &[u16], files: &[u32]) -> u32 {
        let mut ending = Vec::new();
        for (&qpn, q) in self.queues.iter_mut() {
            if q.ctrl.as_ref().is_some_and(|c| cntlids.contains(&c.cntlid)) {
                q.ending = true;
                ending.push(qpn);
            }
        }
        self.reqs
            .iter()
            .filter(|r| {
                let on_queue = ending.contains(&r.qpn) && !answered(r.state);
                let on_file = r.state == ReqState::Executing && files.contains(&r.file);
                on_queue || on_file
            })
            .count() as u32
    }

    /// What the drain did so far.
    pub fn drain_counts(&self) -> DrainCounts {
        self.drain_counts
    }

    /// A command parsed while draining: answered with [`DRAIN_STATUS`] instead of run.
    pub(super) fn refuse_while_draining(&mut self, i: usize) {
        self.drain_counts.aborted += 1;
        self.finish(i, DRAIN_STATUS);
    }
}

/// Whether a request in `state` needs nothing more of the target before its queue may
/// end: free, held (an AER), or its response posted.
fn answered(state: ReqState) -> bool {
    matches!(
        state,
        ReqState::Free
            | ReqState::AwaitingEvent
            | ReqState::TransferringControllerToHost
            | ReqState::Completing
            | ReqState::Completed
    )
}
