//! Receive queues: a QP's own RQ or a shared receive queue (IBTA Vol 1 §10.2.9 SRQ).
use std::collections::VecDeque;

use crate::verbs::{QpState, RecvWr, VerbsError, WcOpcode, WcStatus, WorkCompletion};

/// A FIFO of posted receive work requests with a fixed capacity, owned by a PD.
///
/// Used as a QP's own receive queue or as an SRQ shared by many QPs (the driver passes
/// it to the QP in [`super::RcEnv::srq`]).
#[derive(Debug)]
pub struct RecvQueue {
    pd: u32,
    max_wr: u32,
    q: VecDeque<RecvWr>,
}

impl RecvQueue {
    /// An empty queue in `pd` holding at most `max_wr` work requests.
    pub fn new(pd: u32, max_wr: u32) -> Self {
        RecvQueue {
            pd,
            max_wr,
            q: VecDeque::with_capacity(max_wr.min(4096) as usize),
        }
    }

    /// Posts a receive WR (`ibv_post_recv` / `ibv_post_srq_recv`). Errors: `QueueFull`.
    pub fn post(&mut self, wr: RecvWr) -> Result<(), VerbsError> {
        if self.q.len() >= self.max_wr as usize {
            return Err(VerbsError::QueueFull);
        }
        self.q.push_back(wr);
        Ok(())
    }

    /// `ibv_post_recv` on a QP's own receive queue, the checks every QP type makes: a
    /// QP with an SRQ has no receive queue of its own, at most `max_sge` SGEs, none in
    /// Reset; in Error the WR is not queued but completes at once with
    /// IBV_WC_WR_FLUSH_ERR (the completion is returned for the QP `qpn` to push).
    ///
    /// # Errors
    /// `InvalidArgument` for a QP with an SRQ or too many SGEs, `InvalidState` in
    /// Reset, `QueueFull`.
    pub fn post_for_qp(
        &mut self,
        wr: &RecvWr,
        has_srq: bool,
        max_sge: usize,
        state: QpState,
        qpn: u32,
    ) -> Result<Option<WorkCompletion>, VerbsError> {
        if has_srq {
            return Err(VerbsError::InvalidArgument("QP uses an SRQ"));
        }
        if wr.sg_list.as_slice().len() > max_sge {
            return Err(VerbsError::InvalidArgument("too many SGEs"));
        }
        match state {
            QpState::Reset => Err(VerbsError::InvalidState(QpState::Reset)),
            QpState::Error => Ok(Some(WorkCompletion::new(
                wr.wr_id,
                WcStatus::WrFlushErr,
                WcOpcode::Recv,
                qpn,
            ))),
            _ => self.post(*wr).map(|()| None),
        }
    }

    /// Takes the oldest posted WR.
    pub fn pop(&mut self) -> Option<RecvWr> {
        self.q.pop_front()
    }

    /// Posted WRs.
    pub fn len(&self) -> usize {
        self.q.len()
    }

    /// Whether no WR is posted.
    pub fn is_empty(&self) -> bool {
        self.q.is_empty()
    }

    /// The owning protection domain (the PD receive buffers are checked against).
    pub fn pd(&self) -> u32 {
        self.pd
    }

    /// Capacity in WRs.
    pub fn max_wr(&self) -> u32 {
        self.max_wr
    }

    /// Removes every posted WR (for flushing), oldest first.
    pub fn drain(&mut self) -> impl Iterator<Item = RecvWr> + '_ {
        self.q.drain(..)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::verbs::SgList;

    #[test]
    fn fifo_with_capacity() {
        let mut q = RecvQueue::new(3, 2);
        let wr = |id| RecvWr {
            wr_id: id,
            sg_list: SgList::new(),
        };
        q.post(wr(1)).unwrap();
        q.post(wr(2)).unwrap();
        assert_eq!(q.post(wr(3)), Err(VerbsError::QueueFull));
        assert_eq!(q.pop().unwrap().wr_id, 1);
        assert_eq!(q.len(), 1);
        assert_eq!(q.pd(), 3);
    }
}
