//! The async host's side of a reconnect ([`IoQueueSet`], driven by the
//! [`crate::keeper::AdminKeeper`]): its I/O queues torn down with their outstanding
//! commands held, connected again on the new controller, and the held commands failed
//! when the controller cannot wait any longer.
use std::sync::Arc;

use transport::verbs::{DeviceOf, Provider};

use super::{BufError, IoQueue};
use crate::controller::Controller;
use crate::error::HostError;
use crate::keeper::{reconnect_io_queues, IoQueueSet, TEARDOWN_DISCONNECT_WAIT};

/// The I/O queues of a [`crate::Host`] with the shape they were first connected in.
pub(super) struct HostQueues<P: Provider> {
    pub(super) io: Vec<Arc<IoQueue<P>>>,
    /// Entries per queue asked for at the first connect.
    pub(super) depth: u16,
    /// Bytes per command at the first connect (MDTS, `max_io_bytes`).
    pub(super) max_io_bytes: usize,
}

impl<P: Provider> IoQueueSet<P> for HostQueues<P> {
    fn tear_down(&self, reason: &str) {
        for q in &self.io {
            let mut g = q.state.lock();
            let Some(mut queue) = g.queue.take() else {
                continue;
            };
            let cancelled = HostError::Reconnecting(reason.to_string());
            queue.tear_down(cancelled, TEARDOWN_DISCONNECT_WAIT, &mut g.done);
            // The QP and the poll group go now: the target can no longer touch the
            // buffers, and the poll group is free for the new queue.
            drop(queue);
            q.dispatch(&mut g, true);
            // Nothing may stay outstanding on a queue that is gone.
            let mut wake = std::mem::take(&mut g.wake);
            for slot in g.by_cid.iter_mut() {
                if let Some(p) = slot.take() {
                    let e = BufError::plain(HostError::Reconnecting(reason.to_string()));
                    q.finish(p.rec, Err(e), &mut wake);
                }
            }
            drop(g);
            for w in wake {
                w.wake();
            }
        }
    }

    fn reconnect(
        &self,
        controller: &mut Controller<P>,
        dev: &Arc<DeviceOf<P>>,
    ) -> Result<(), HostError> {
        let qids: Vec<u16> = self.io.iter().map(|q| q.qid).collect();
        let queues = reconnect_io_queues(controller, dev, &qids, self.depth, self.max_io_bytes)?;
        for (q, queue) in self.io.iter().zip(queues) {
            let mut g = q.state.lock();
            g.by_cid = (0..queue.depth()).map(|_| None).collect();
            g.queue = Some(queue);
        }
        Ok(())
    }

    fn fail_held(&self, error: &HostError) {
        for q in &self.io {
            let mut g = q.state.lock();
            q.fail_pending(&mut g, error);
            let wake = std::mem::take(&mut g.wake);
            drop(g);
            for w in wake {
                w.wake();
            }
        }
    }
}
