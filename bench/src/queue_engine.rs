//! [`QueueEngine`]: the benchmark's [`IoEngine`] over one I/O [`NvmeRdmaQueue`]
//! (NVM Command Set 1.x Read 02h / Write 01h).
//!
//! Two ways to map the runner's tags onto the queue:
//! - **direct** (every request fits one command): tag = command identifier, and the
//!   tag's buffer is the slot's registered buffer, so data moves with no copy;
//! - **split** (requests may exceed one command: MDTS, the 24-bit keyed SGL length,
//!   65536 blocks; see [`nvmf_initiator::split`]): each tag has its own buffer of the largest
//!   request; a request becomes pieces that go out on whichever command slots are
//!   free (writes copy their piece into the slot, reads copy it back), and the request
//!   completes when its last piece does, with the first piece's error if any.
//!
//! Dead queues and controllers end the job instead of leaving it waiting: once the
//! queue failed, or the [`ControllerHealth`] given with [`QueueEngine::with_health`]
//! says the controller was declared dead (Keep Alive failed), [`IoEngine::poll`]
//! returns [`EngineError::Transport`] after handing out what did complete, at most
//! [`DEAD_QUEUE_GRACE`] later for commands the queue still holds.
use std::collections::VecDeque;
use std::time::{Duration, Instant};

use nvme::Sqe;

use nvmf_initiator::queue::{NvmeRdmaQueue, QueueCompletion};
use nvmf_initiator::split::{self, Piece};
use nvmf_initiator::{ControllerHealth, DataDir, QueueError};

use crate::engine::{EngineError, IoCompletion, IoEngine};
use crate::workload::{IoOp, IoRequest};

/// How long a dead queue may still hold commands before [`IoEngine::poll`] gives up on
/// them (a queue that failed completes them at once; this bounds the other cases).
pub const DEAD_QUEUE_GRACE: Duration = Duration::from_secs(1);

/// One I/O queue driven for namespace `nsid` with logical blocks of `block_size`
/// bytes: a request's byte offset and length become SLBA and NLB.
#[derive(Debug)]
pub struct QueueEngine {
    queue: NvmeRdmaQueue,
    nsid: u32,
    block_shift: u32,
    /// Longest command in bytes (see [`split::max_command_bytes`]).
    max_command: usize,
    split: Option<SplitState>,
    done: Vec<QueueCompletion>,
    health: Option<ControllerHealth>,
    /// When the queue or controller was first seen dead with commands outstanding.
    dead_since: Option<Instant>,
}

/// Split mode: per-tag buffers and the pieces in flight.
#[derive(Debug)]
struct SplitState {
    /// Largest request in bytes (each tag's buffer).
    request_bytes: usize,
    tags: Vec<TagIo>,
    /// Pieces not yet submitted, in order.
    waiting: VecDeque<(u32, Piece)>,
    /// The piece each command identifier carries.
    by_cid: Vec<Option<(u32, Piece)>>,
    /// Requests finished outside `poll` (a piece refused at submission).
    ready: Vec<IoCompletion>,
}

#[derive(Debug, Default)]
struct TagIo {
    buf: Vec<u8>,
    op: Option<IoOp>,
    /// Pieces not yet completed.
    left: usize,
    error: Option<String>,
}

impl SplitState {
    fn tag(&mut self, tag: u32) -> &mut TagIo {
        let t = tag as usize;
        if self.tags.len() <= t {
            self.tags.resize_with(t + 1, TagIo::default);
        }
        let io = &mut self.tags[t];
        if io.buf.len() < self.request_bytes {
            io.buf.resize(self.request_bytes, 0);
        }
        io
    }

    /// Accounts one finished piece of `tag`; the request completes with its last.
    fn piece_done(&mut self, tag: u32, result: Result<(), String>, out: &mut Vec<IoCompletion>) {
        let Some(io) = self.tags.get_mut(tag as usize) else {
            return;
        };
        io.left = io.left.saturating_sub(1);
        if let Err(e) = result {
            io.error.get_or_insert(e);
        }
        if io.left == 0 && io.op.take().is_some() {
            out.push(IoCompletion {
                tag,
                result: io.error.take().map_or(Ok(()), Err),
            });
        }
    }

    fn outstanding(&self) -> usize {
        self.tags.iter().filter(|t| t.op.is_some()).count()
    }
}

/// The Read or Write of `p` for namespace `nsid`, with its data direction.
fn command(nsid: u32, op: IoOp, p: &Piece) -> (Sqe, DataDir) {
    let len = p.len;
    match op {
        IoOp::Read => (
            Sqe::read(0, nsid, p.slba, p.nlb_0based(), false),
            DataDir::ControllerToHost { len },
        ),
        IoOp::Write => (
            Sqe::write(0, nsid, p.slba, p.nlb_0based(), false),
            DataDir::HostToController { len },
        ),
    }
}

fn transport(e: QueueError) -> EngineError {
    match e {
        QueueError::Full => EngineError::Busy,
        e @ (QueueError::Dead { .. } | QueueError::Verbs(_)) => {
            EngineError::Transport(e.to_string())
        }
        e => EngineError::InvalidRequest(e.to_string()),
    }
}

impl QueueEngine {
    /// An engine over `queue` for namespace `nsid` whose requests each fit one
    /// command (direct mode). `block_size` must be a power of two (the namespace's
    /// LBA data size).
    pub fn new(queue: NvmeRdmaQueue, nsid: u32, block_size: u32) -> Result<Self, EngineError> {
        if !block_size.is_power_of_two() {
            return Err(EngineError::InvalidRequest(format!(
                "block size {block_size} is not a power of two"
            )));
        }
        let max_command = split::max_command_bytes(block_size, queue.max_io_bytes());
        Ok(QueueEngine {
            queue,
            nsid,
            block_shift: block_size.trailing_zeros(),
            max_command,
            split: None,
            done: Vec::new(),
            health: None,
            dead_since: None,
        })
    }

    /// An engine for requests of up to `max_request_bytes` bytes: direct mode when
    /// they fit one command, split mode (see the module docs) otherwise.
    pub fn with_max_request(
        queue: NvmeRdmaQueue,
        nsid: u32,
        block_size: u32,
        max_request_bytes: usize,
    ) -> Result<Self, EngineError> {
        let mut e = Self::new(queue, nsid, block_size)?;
        if max_request_bytes > e.max_command {
            let slots = usize::from(e.queue.depth());
            e.split = Some(SplitState {
                request_bytes: max_request_bytes,
                tags: Vec::new(),
                waiting: VecDeque::new(),
                by_cid: vec![None; slots],
                ready: Vec::new(),
            });
        }
        Ok(e)
    }

    /// Ends the job once `health` says the controller was declared dead.
    pub fn with_health(mut self, health: ControllerHealth) -> Self {
        self.health = Some(health);
        self
    }

    /// Whether requests are split into several commands.
    pub fn is_splitting(&self) -> bool {
        self.split.is_some()
    }

    /// The longest command in bytes.
    pub fn max_command_bytes(&self) -> usize {
        self.max_command
    }

    /// The queue (e.g. to disconnect it).
    pub fn into_queue(self) -> NvmeRdmaQueue {
        self.queue
    }

    /// The queue, borrowed.
    pub fn queue(&self) -> &NvmeRdmaQueue {
        &self.queue
    }

    fn block_size(&self) -> u64 {
        1u64 << self.block_shift
    }

    /// Checks `req` against the block size and returns its first block.
    fn check(&self, req: &IoRequest, max_len: usize) -> Result<u64, EngineError> {
        let mask = self.block_size() - 1;
        if req.offset & mask != 0 || u64::from(req.len) & mask != 0 || req.len == 0 {
            return Err(EngineError::InvalidRequest(format!(
                "offset {} / length {} not multiples of the {}-byte block",
                req.offset,
                req.len,
                self.block_size()
            )));
        }
        if req.len as usize > max_len {
            return Err(EngineError::InvalidRequest(format!(
                "length {} over {max_len} bytes, the most one command of queue {} moves \
                 (MDTS, keyed SGL length, 65536 blocks); build the engine with \
                 QueueEngine::with_max_request to split it",
                req.len,
                self.queue.qid()
            )));
        }
        Ok(req.offset >> self.block_shift)
    }

    /// The SQE for `req` in direct mode: Read or Write of `len / block_size` blocks at
    /// `offset / block_size`. Errors: unaligned offset or length, zero length, more
    /// than one command moves.
    pub fn sqe_for(&self, req: &IoRequest) -> Result<(Sqe, DataDir), EngineError> {
        let slba = self.check(req, self.max_command)?;
        let piece = Piece {
            slba,
            nlb: req.len >> self.block_shift,
            byte_offset: 0,
            len: req.len as usize,
        };
        Ok(command(self.nsid, req.op, &piece))
    }

    /// Why no more I/O can run here: the controller was declared dead or the queue
    /// failed.
    fn dead_reason(&self) -> Option<String> {
        if let Some(r) = self.health.as_ref().and_then(|h| h.dead_reason()) {
            return Some(format!("the controller was declared dead ({r})"));
        }
        self.queue
            .is_dead()
            .then(|| format!("queue {} is dead", self.queue.qid()))
    }

    /// Submits waiting pieces while the queue has room.
    fn pump(&mut self) {
        let Some(s) = self.split.as_mut() else {
            return;
        };
        while let Some(&(tag, piece)) = s.waiting.front() {
            if !self.queue.can_submit() {
                break;
            }
            let Some(op) = s.tags.get(tag as usize).and_then(|t| t.op) else {
                s.waiting.pop_front();
                continue;
            };
            let (sqe, data) = command(self.nsid, op, &piece);
            let src = &s.tags[tag as usize].buf[piece.byte_offset..piece.byte_offset + piece.len];
            let r = self.queue.submit_with(sqe, data, |slot| {
                if op == IoOp::Write {
                    slot[..src.len()].copy_from_slice(src);
                }
            });
            match r {
                Ok(cid) => {
                    s.waiting.pop_front();
                    if let Some(e) = s.by_cid.get_mut(usize::from(cid)) {
                        *e = Some((tag, piece));
                    }
                }
                Err(QueueError::Full) => break,
                Err(e) => {
                    s.waiting.pop_front();
                    let mut ready = std::mem::take(&mut s.ready);
                    s.piece_done(tag, Err(e.to_string()), &mut ready);
                    s.ready = ready;
                }
            }
        }
    }

    /// Requests submitted and not yet handed out as completions.
    fn outstanding(&self) -> usize {
        match &self.split {
            Some(s) => s.outstanding(),
            None => self.queue.outstanding(),
        }
    }
}

impl IoEngine for QueueEngine {
    fn max_outstanding(&self) -> usize {
        self.queue.max_outstanding()
    }

    fn submit(&mut self, tag: u32, req: &IoRequest) -> Result<(), EngineError> {
        if let Some(reason) = self.dead_reason() {
            return Err(EngineError::Transport(reason));
        }
        let Some(request_bytes) = self.split.as_ref().map(|s| s.request_bytes) else {
            let cid = u16::try_from(tag)
                .map_err(|_| EngineError::InvalidRequest(format!("tag {tag} out of range")))?;
            let (sqe, data) = self.sqe_for(req)?;
            return self.queue.submit_cid(cid, sqe, data).map_err(transport);
        };
        if tag as usize >= self.max_outstanding() {
            return Err(EngineError::InvalidRequest(format!(
                "tag {tag} >= depth {}",
                self.max_outstanding()
            )));
        }
        let slba = self.check(req, request_bytes)?;
        let bs = 1u32 << self.block_shift;
        let max_command = self.max_command;
        let s = self.split.as_mut().expect("split mode");
        if s.tag(tag).op.is_some() {
            return Err(EngineError::InvalidRequest(format!(
                "tag {tag} already in use"
            )));
        }
        let mut n = 0;
        for p in split::split(slba, req.len as usize, bs, max_command) {
            s.waiting.push_back((tag, p));
            n += 1;
        }
        let io = s.tag(tag);
        io.op = Some(req.op);
        io.left = n;
        io.error = None;
        self.pump();
        Ok(())
    }

    fn poll(&mut self, out: &mut Vec<IoCompletion>) -> Result<(), EngineError> {
        self.queue.poll(&mut self.done);
        match self.split.as_mut() {
            None => {
                for c in self.done.drain(..) {
                    out.push(IoCompletion {
                        tag: u32::from(c.cid),
                        result: c.result.map(|_| ()).map_err(|e| e.to_string()),
                    });
                }
            }
            Some(s) => {
                out.append(&mut s.ready);
                for c in self.done.drain(..) {
                    let Some((tag, piece)) =
                        s.by_cid.get_mut(usize::from(c.cid)).and_then(Option::take)
                    else {
                        continue;
                    };
                    let ok = c.result.is_ok();
                    if ok && s.tags.get(tag as usize).and_then(|t| t.op) == Some(IoOp::Read) {
                        let data = &self.queue.buffer(c.cid)[..piece.len];
                        s.tags[tag as usize].buf[piece.byte_offset..][..piece.len]
                            .copy_from_slice(data);
                    }
                    s.piece_done(tag, c.result.map(|_| ()).map_err(|e| e.to_string()), out);
                }
            }
        }
        let Some(reason) = self.dead_reason() else {
            self.pump();
            return Ok(());
        };
        // Nothing more will be submitted: pieces still waiting fail now.
        if let Some(s) = self.split.as_mut() {
            while let Some((tag, _)) = s.waiting.pop_front() {
                s.piece_done(tag, Err(reason.clone()), out);
            }
        }
        let left = self.outstanding();
        let now = Instant::now();
        let since = *self.dead_since.get_or_insert(now);
        if left == 0
            || self
                .health
                .as_ref()
                .is_some_and(|h| h.dead_reason().is_some())
        {
            return Err(EngineError::Transport(if left == 0 {
                reason
            } else {
                format!("{reason}; {left} I/Os outstanding abandoned")
            }));
        }
        if now.saturating_duration_since(since) >= DEAD_QUEUE_GRACE {
            return Err(EngineError::Transport(format!(
                "{reason}; {left} I/Os still outstanding {DEAD_QUEUE_GRACE:?} later, abandoned"
            )));
        }
        Ok(())
    }

    fn buffer(&mut self, tag: u32) -> &mut [u8] {
        match self.split.as_mut() {
            Some(s) => {
                let n = s.request_bytes;
                &mut s.tag(tag).buf[..n]
            }
            None => self.queue.buffer_mut(tag as u16),
        }
    }
}
