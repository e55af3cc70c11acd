//! [`QueueEngine`]: the benchmark's [`IoEngine`] over one I/O [`NvmeRdmaQueue`]
//! (NVM Command Set 1.x Read 02h / Write 01h), tag = command identifier.
use nvme::Sqe;

use crate::bench::engine::{EngineError, IoCompletion, IoEngine};
use crate::bench::workload::{IoOp, IoRequest};
use crate::capsule::DataDir;
use crate::error::QueueError;
use crate::queue::{NvmeRdmaQueue, QueueCompletion};

/// One I/O queue driven for namespace `nsid` with logical blocks of `block_size`
/// bytes: a request's byte offset and length become SLBA and NLB.
#[derive(Debug)]
pub struct QueueEngine {
    queue: NvmeRdmaQueue,
    nsid: u32,
    block_shift: u32,
    done: Vec<QueueCompletion>,
}

impl QueueEngine {
    /// An engine over `queue` for namespace `nsid`. `block_size` must be a power of
    /// two (the namespace's LBA data size).
    pub fn new(queue: NvmeRdmaQueue, nsid: u32, block_size: u32) -> Result<Self, EngineError> {
        if !block_size.is_power_of_two() {
            return Err(EngineError::InvalidRequest(format!(
                "block size {block_size} is not a power of two"
            )));
        }
        Ok(QueueEngine {
            queue,
            nsid,
            block_shift: block_size.trailing_zeros(),
            done: Vec::new(),
        })
    }

    /// The queue (e.g. to disconnect it).
    pub fn into_queue(self) -> NvmeRdmaQueue {
        self.queue
    }

    /// The queue, borrowed.
    pub fn queue(&self) -> &NvmeRdmaQueue {
        &self.queue
    }

    /// The SQE for `req`: Read or Write of `len / block_size` blocks at `offset /
    /// block_size`. Errors: unaligned offset or length, zero length, more than 65536
    /// blocks.
    pub fn sqe_for(&self, req: &IoRequest) -> Result<(Sqe, DataDir), EngineError> {
        let mask = (1u64 << self.block_shift) - 1;
        if req.offset & mask != 0 || u64::from(req.len) & mask != 0 || req.len == 0 {
            return Err(EngineError::InvalidRequest(format!(
                "offset {} / length {} not multiples of the {}-byte block",
                req.offset,
                req.len,
                1u64 << self.block_shift
            )));
        }
        let slba = req.offset >> self.block_shift;
        let nlb = u64::from(req.len) >> self.block_shift;
        let nlb_0based = u16::try_from(nlb - 1)
            .map_err(|_| EngineError::InvalidRequest(format!("{nlb} blocks exceed 65536")))?;
        let len = req.len as usize;
        Ok(match req.op {
            IoOp::Read => (
                Sqe::read(0, self.nsid, slba, nlb_0based, false),
                DataDir::ControllerToHost { len },
            ),
            IoOp::Write => (
                Sqe::write(0, self.nsid, slba, nlb_0based, false),
                DataDir::HostToController { len },
            ),
        })
    }
}

impl IoEngine for QueueEngine {
    fn max_outstanding(&self) -> usize {
        self.queue.max_outstanding()
    }

    fn submit(&mut self, tag: u32, req: &IoRequest) -> Result<(), EngineError> {
        let cid = u16::try_from(tag)
            .map_err(|_| EngineError::InvalidRequest(format!("tag {tag} out of range")))?;
        let (sqe, data) = self.sqe_for(req)?;
        match self.queue.submit_cid(cid, sqe, data) {
            Ok(()) => Ok(()),
            Err(QueueError::Full) => Err(EngineError::Busy),
            Err(e @ (QueueError::Dead { .. } | QueueError::Verbs(_))) => {
                Err(EngineError::Transport(e.to_string()))
            }
            Err(e) => Err(EngineError::InvalidRequest(e.to_string())),
        }
    }

    fn poll(&mut self, out: &mut Vec<IoCompletion>) -> Result<(), EngineError> {
        self.queue.poll(&mut self.done);
        for c in self.done.drain(..) {
            out.push(IoCompletion {
                tag: u32::from(c.cid),
                result: c.result.map(|_| ()).map_err(|e| e.to_string()),
            });
        }
        if self.queue.is_dead() && self.queue.outstanding() == 0 {
            return Err(EngineError::Transport(format!(
                "queue {} is dead",
                self.queue.qid()
            )));
        }
        Ok(())
    }

    fn buffer(&mut self, tag: u32) -> &mut [u8] {
        self.queue.buffer_mut(tag as u16)
    }
}
