//! [`QueueEngine`]: the benchmark's [`IoEngine`] over one I/O [`NvmeRdmaQueue`]
//! (NVM Command Set 1.x Read 02h, Write 01h, Flush 00h, and Dataset Management 09h
//! with Attribute - Deallocate for trims: one 16-byte range as its data), with no copy
//! of the data.
//!
//! Each tag owns a buffer of the host's registered pool ([`nvmf_initiator::pool`]),
//! taken when the engine is built; [`IoEngine::buffer`] is that buffer, and a command
//! carries it (or, split, a piece of it) to the target and back:
//! - **direct** (every request fits one command): tag = command identifier, and the
//!   tag's buffer goes out with its command;
//! - **split** (requests may exceed one command: MDTS, the 24-bit keyed SGL length,
//!   65536 blocks; see [`nvmf_initiator::split`]): a request's buffer is cut into
//!   disjoint views ([`IoBuf::split_to`]), one per piece, which go out on whichever
//!   command slots are free and are joined again when the last piece completed; the
//!   request completes then, with the first piece's error if any. Trims and flushes
//!   are one command each in either mode.
//!
//! Errors stay the host's typed errors ([`HostError`]): a completion's NVMe status or
//! transport error, and [`EngineError::Transport`] for a dead queue or controller.
//!
//! Dead queues and controllers end the job instead of leaving it waiting: once the
//! queue failed, or the [`ControllerHealth`] given with [`QueueEngine::with_health`]
//! says the controller was declared dead (Keep Alive failed), [`IoEngine::poll`]
//! returns [`EngineError::Transport`] after handing out what did complete, at most
//! [`DEAD_QUEUE_GRACE`] later for commands the queue still holds.
use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use nvme::{DsmRange, Sqe};
use zerocopy::IntoBytes;

use nvmf_initiator::queue::{NvmeRdmaQueue, QueueCompletion, SubmitError};
use nvmf_initiator::split::{self, Piece};
use nvmf_initiator::{ControllerHealth, DataDir, HostError, IoBuf, QueueError};
use transport::soft::SoftProvider;
use transport::verbs::Provider;

use crate::engine::{EngineError, IoCompletion, IoEngine};
use crate::reconnect::{QueueSlot, SlotNews};
use crate::workload::{IoOp, IoRequest};

/// How long a dead queue may still hold commands before [`IoEngine::poll`] gives up on
/// them (a queue that failed completes them at once; this bounds the other cases).
pub const DEAD_QUEUE_GRACE: Duration = Duration::from_secs(1);

/// One I/O queue on provider `P` (the soft provider unless named) driven for namespace
/// `nsid` with logical blocks of `block_size` bytes: a request's byte offset and length
/// become SLBA and NLB.
#[derive(Debug)]
pub struct QueueEngine<P: Provider = SoftProvider> {
    /// `None` while the controller reconnects (the queue was torn down).
    queue: Option<NvmeRdmaQueue<P>>,
    qid: u16,
    max_outstanding: usize,
    /// With reconnects: where the keeper asks for the queue and hands a new one.
    slot: Option<Arc<QueueSlot<P>>>,
    /// Direct mode with reconnects: the command each CID carries, to reissue it.
    sent: Vec<Option<(Sqe, DataDir)>>,
    /// Direct mode: commands held for the new queue (CID, command, buffer).
    held: Vec<(u16, Sqe, DataDir, Option<IoBuf>)>,
    nsid: u32,
    block_shift: u32,
    /// Longest command in bytes (see [`split::max_command_bytes`]).
    max_command: usize,
    /// Bytes of each tag's buffer (the largest request).
    request_bytes: usize,
    tags: Vec<TagIo>,
    split: Option<SplitState>,
    done: Vec<QueueCompletion>,
    health: Option<ControllerHealth>,
    /// When the queue or controller was first seen dead with commands outstanding.
    dead_since: Option<Instant>,
    /// [`IoEngine::idle`] sleeps on the queue's completion events (else it returns).
    sleep_when_idle: bool,
}

/// One tag: its buffer (while not in flight) and, split, its pieces.
#[derive(Debug, Default)]
struct TagIo {
    buf: Option<IoBuf>,
    op: Option<IoOp>,
    /// Split mode: pieces not yet completed, the pieces' buffers as they come back (by
    /// piece index), the empty view after the last piece, and the first error.
    left: usize,
    pieces: Vec<Option<IoBuf>>,
    rest: Option<IoBuf>,
    error: Option<HostError>,
}

/// Split mode: the pieces in flight.
#[derive(Debug)]
struct SplitState {
    /// Pieces not yet submitted, in order, with their views (none for a flush).
    waiting: VecDeque<(u32, Piece, Option<IoBuf>)>,
    /// The piece each command identifier carries.
    by_cid: Vec<Option<(u32, Piece)>>,
    /// Requests finished outside `poll` (a piece refused at submission).
    ready: Vec<IoCompletion>,
}

/// Bytes of a trim's data: one Dataset Management range.
const DSM_RANGE_BYTES: usize = std::mem::size_of::<DsmRange>();

/// The command of `op` for piece `p` of namespace `nsid`, with its data direction: a
/// trim carries one range of `p`'s blocks (see [`trim_data`]), a flush no data.
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
        IoOp::Trim => (
            Sqe::dsm_deallocate(0, nsid, 0),
            DataDir::HostToController {
                len: DSM_RANGE_BYTES,
            },
        ),
        IoOp::Flush => (Sqe::flush(0, nsid), DataDir::None),
    }
}

/// Makes `buf` the data of a trim of `p`: its one Dataset Management range.
fn trim_data(p: &Piece, buf: &mut IoBuf) {
    buf.set_len(DSM_RANGE_BYTES);
    buf[..DSM_RANGE_BYTES].copy_from_slice(DsmRange::new(p.slba, p.nlb).as_bytes());
}

fn engine_error(e: QueueError) -> EngineError {
    match e {
        QueueError::Full => EngineError::Busy,
        e @ (QueueError::Dead { .. } | QueueError::Verbs(_)) => {
            EngineError::Transport(HostError::Queue(e))
        }
        e => EngineError::InvalidRequest(e.to_string()),
    }
}

impl TagIo {
    /// Accounts one finished piece `index` (its view back in `buf`); the request
    /// completes with its last, its buffer whole again.
    fn piece_done(
        &mut self,
        tag: u32,
        index: usize,
        result: Result<(), HostError>,
        buf: Option<IoBuf>,
        request_bytes: usize,
        out: &mut Vec<IoCompletion>,
    ) {
        self.left = self.left.saturating_sub(1);
        if let Some(slot) = self.pieces.get_mut(index) {
            *slot = buf;
        }
        if let Err(e) = result {
            self.error.get_or_insert(e);
        }
        if self.left > 0 || self.op.take().is_none() {
            return;
        }
        // Join the views in order: the block is one buffer again.
        let mut whole: Option<IoBuf> = None;
        for b in self
            .pieces
            .iter_mut()
            .filter_map(Option::take)
            .chain(self.rest.take())
        {
            match whole.as_mut() {
                None => whole = Some(b),
                Some(w) => {
                    let _ = w.unsplit(b);
                }
            }
        }
        if let Some(w) = whole.as_mut() {
            w.set_len(request_bytes);
        }
        self.buf = whole;
        out.push(IoCompletion {
            tag,
            result: self.error.take().map_or(Ok(()), Err),
        });
    }
}

impl<P: Provider> QueueEngine<P> {
    /// An engine over `queue` for namespace `nsid` whose requests each fit one
    /// command (direct mode). `block_size` must be a power of two (the namespace's
    /// LBA data size).
    ///
    /// Errors: [`EngineError::InvalidRequest`] for such a block size or a pool that
    /// cannot give every tag its buffer now.
    pub fn new(queue: NvmeRdmaQueue<P>, nsid: u32, block_size: u32) -> Result<Self, EngineError> {
        let max = split::max_command_bytes(block_size.max(1), queue.max_io_bytes());
        Self::with_max_request(queue, nsid, block_size, max)
    }

    /// An engine for requests of up to `max_request_bytes` bytes: direct mode when
    /// they fit one command, split mode (see the module docs) otherwise. Takes a buffer
    /// of `max_request_bytes` per tag from the queue's pool.
    ///
    /// Errors: as [`QueueEngine::new`].
    pub fn with_max_request(
        queue: NvmeRdmaQueue<P>,
        nsid: u32,
        block_size: u32,
        max_request_bytes: usize,
    ) -> Result<Self, EngineError> {
        if !block_size.is_power_of_two() {
            return Err(EngineError::InvalidRequest(format!(
                "block size {block_size} is not a power of two"
            )));
        }
        let max_command = split::max_command_bytes(block_size, queue.max_io_bytes());
        let request_bytes = max_request_bytes.max(block_size as usize);
        let n = queue.max_outstanding();
        let pool = queue.pool().clone();
        let pieces = request_bytes.div_ceil(max_command);
        let split = (request_bytes > max_command).then(|| SplitState {
            waiting: VecDeque::with_capacity(n * pieces),
            by_cid: (0..queue.depth()).map(|_| None).collect(),
            ready: Vec::with_capacity(n),
        });
        let mut tags = Vec::with_capacity(n);
        for _ in 0..n {
            let buf = pool
                .try_alloc(request_bytes)
                .map_err(|e| EngineError::InvalidRequest(e.to_string()))?
                .ok_or_else(|| {
                    EngineError::InvalidRequest(format!(
                        "the host's buffer pool ({} bytes, {} free) cannot give each of {n} \
                         tags a buffer of {request_bytes} bytes: give the host a larger pool \
                         (HostOptions::buffer_pool_bytes) or use a smaller --iodepth/--bs",
                        pool.capacity(),
                        pool.free_bytes()
                    ))
                })?;
            tags.push(TagIo {
                buf: Some(buf),
                pieces: (0..if split.is_some() { pieces } else { 0 })
                    .map(|_| None)
                    .collect(),
                ..TagIo::default()
            });
        }
        Ok(QueueEngine {
            qid: queue.qid(),
            max_outstanding: queue.max_outstanding(),
            sent: Vec::new(),
            held: Vec::new(),
            slot: None,
            queue: Some(queue),
            nsid,
            block_shift: block_size.trailing_zeros(),
            max_command,
            request_bytes,
            tags,
            split,
            done: Vec::with_capacity(n),
            health: None,
            dead_since: None,
            sleep_when_idle: false,
        })
    }

    /// Ends the job once `health` says the controller was declared dead.
    pub fn with_health(mut self, health: ControllerHealth) -> Self {
        self.health = Some(health);
        self
    }

    /// Rides through reconnects: the keeper tears the queue down and hands a new one
    /// through `slot` (see [`crate::reconnect`]); commands in flight are held and
    /// reissued (same LBAs, same data) instead of failing the job.
    pub fn with_reconnect(mut self, slot: Arc<QueueSlot<P>>) -> Self {
        if let Some(q) = self.queue.as_ref() {
            self.sent = (0..q.depth()).map(|_| None).collect();
        }
        self.slot = Some(slot);
        self
    }

    /// Lets [`IoEngine::idle`] sleep on the queue's completion events
    /// ([`NvmeRdmaQueue::wait`]: the CQ armed, `ibv_req_notify_cq`) instead of
    /// returning at once for the runner to busy-poll: for hosts where a busy poller
    /// would take the CPU from the device's own work (Soft-RoCE in a one-vCPU VM).
    pub fn sleeping_when_idle(mut self, sleep: bool) -> Self {
        self.sleep_when_idle = sleep;
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

    /// The queue (e.g. to disconnect it); the tags' buffers go back to the pool.
    /// `None` while a reconnect has it torn down.
    pub fn into_queue(self) -> Option<NvmeRdmaQueue<P>> {
        self.queue
    }

    /// The queue, borrowed (`None` while a reconnect has it torn down).
    pub fn queue(&self) -> Option<&NvmeRdmaQueue<P>> {
        self.queue.as_ref()
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
                req.len, self.qid
            )));
        }
        Ok(req.offset >> self.block_shift)
    }

    /// The SQE for `req` in direct mode: Read or Write of `len / block_size` blocks at
    /// `offset / block_size`. Errors: unaligned offset or length, zero length, more
    /// than one command moves.
    pub fn sqe_for(&self, req: &IoRequest) -> Result<(Sqe, DataDir), EngineError> {
        let piece = self.whole_piece(req)?;
        Ok(command(self.nsid, req.op, &piece))
    }

    /// `req` as one command's piece: checked against the block size, and for reads
    /// and writes against the longest command.
    fn whole_piece(&self, req: &IoRequest) -> Result<Piece, EngineError> {
        let slba = match req.op {
            IoOp::Flush => 0,
            IoOp::Trim => self.check(req, u32::MAX as usize)?,
            _ => self.check(req, self.max_command)?,
        };
        Ok(Piece {
            slba,
            nlb: req.len >> self.block_shift,
            byte_offset: 0,
            len: req.len as usize,
        })
    }

    /// Why no more I/O can run here: the controller was declared dead or the queue
    /// failed.
    fn dead_reason(&self) -> Option<HostError> {
        if let Some(r) = self.health.as_ref().and_then(|h| h.dead_reason()) {
            return Some(HostError::ControllerDead(r.to_string()));
        }
        if self.slot.is_some() {
            // A dead queue is torn down and replaced; only the keeper gives up.
            return None;
        }
        let q = self.queue.as_ref()?;
        q.is_dead().then(|| {
            HostError::Queue(QueueError::Dead {
                qid: q.qid(),
                reason: q.dead_reason().unwrap_or("failed").to_string(),
            })
        })
    }

    /// With reconnects: tears the queue down when the keeper asks (holding what was
    /// in flight), takes a new queue when there is one (reissuing what is held), or
    /// fails what is held when the keeper gave up. Completions go to `out`.
    fn follow_reconnect(&mut self, out: &mut Vec<IoCompletion>) {
        let Some(slot) = self.slot.clone() else {
            return;
        };
        if slot.tear_down_asked() {
            if let Some(mut q) = self.queue.take() {
                let cancelled = HostError::Reconnecting(slot.reason());
                q.tear_down(cancelled, Duration::from_millis(100), &mut self.done);
                drop(q);
                self.hand_out(out, true);
            }
            slot.torn_down();
        }
        if self.queue.is_some() {
            return;
        }
        match slot.take_news() {
            SlotNews::Wait => {}
            SlotNews::Queue(mut q) => {
                for (cid, sqe, data, buf) in std::mem::take(&mut self.held) {
                    if let Err(SubmitError { error, buf }) = q.submit_cid(cid, sqe, data, buf) {
                        if let Some(t) = self.tags.get_mut(usize::from(cid)) {
                            if buf.is_some() {
                                t.buf = buf;
                            }
                        }
                        out.push(IoCompletion {
                            tag: u32::from(cid),
                            result: Err(error.into()),
                        });
                    } else if let Some(e) = self.sent.get_mut(usize::from(cid)) {
                        *e = Some((sqe, data));
                    }
                }
                self.queue = Some(q);
                self.pump();
            }
            SlotNews::Failed(e) => {
                for (cid, _, _, buf) in std::mem::take(&mut self.held) {
                    if let (Some(t), Some(b)) = (self.tags.get_mut(usize::from(cid)), buf) {
                        t.buf = Some(b);
                    }
                    out.push(IoCompletion {
                        tag: u32::from(cid),
                        result: Err(e.clone()),
                    });
                }
                self.fail_waiting_pieces(&e, out);
            }
        }
    }

    /// Fails every piece of a split request still waiting for a submission slot with
    /// `error` (nothing more will be submitted on this queue).
    fn fail_waiting_pieces(&mut self, error: &HostError, out: &mut Vec<IoCompletion>) {
        if let Some(s) = self.split.as_mut() {
            while let Some((tag, piece, buf)) = s.waiting.pop_front() {
                let index = piece.byte_offset / self.max_command;
                self.tags[tag as usize].piece_done(
                    tag,
                    index,
                    Err(error.clone()),
                    buf,
                    self.request_bytes,
                    out,
                );
            }
        }
    }

    /// Hands the queue's completions (in `done`) out; with reconnects, a command that
    /// failed with a path error (`path_error`: the queue died or was torn down) is
    /// held for the new queue instead.
    fn hand_out(&mut self, out: &mut Vec<IoCompletion>, path_error: bool) {
        let hold = |r: &Result<nvme::Cqe, HostError>| {
            path_error && matches!(r, Err(e) if !matches!(e, HostError::Nvme { .. }))
        };
        let reconnects = self.slot.is_some();
        match self.split.as_mut() {
            None => {
                for c in self.done.drain(..) {
                    let cid = usize::from(c.cid);
                    let sent = self.sent.get_mut(cid).and_then(Option::take);
                    if let (true, true, Some((sqe, data))) = (reconnects, hold(&c.result), sent) {
                        self.held.push((c.cid, sqe, data, c.buf));
                        continue;
                    }
                    // A flush carried no buffer: the tag kept its own.
                    if let (Some(t), Some(b)) = (self.tags.get_mut(cid), c.buf) {
                        t.buf = Some(b);
                    }
                    out.push(IoCompletion {
                        tag: u32::from(c.cid),
                        result: c.result.map(|_| ()),
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
                    if reconnects && hold(&c.result) {
                        // Back to the front of the line, with its view.
                        s.waiting.push_front((tag, piece, c.buf));
                        continue;
                    }
                    let index = piece.byte_offset / self.max_command;
                    self.tags[tag as usize].piece_done(
                        tag,
                        index,
                        c.result.map(|_| ()),
                        c.buf,
                        self.request_bytes,
                        out,
                    );
                }
            }
        }
    }

    /// Submits waiting pieces while the queue has room.
    fn pump(&mut self) {
        let Some(s) = self.split.as_mut() else {
            return;
        };
        let Some(queue) = self.queue.as_mut() else {
            return;
        };
        while queue.can_submit() {
            let Some((tag, piece, buf)) = s.waiting.pop_front() else {
                break;
            };
            let Some(op) = self.tags.get(tag as usize).and_then(|t| t.op) else {
                continue;
            };
            let (sqe, data) = command(self.nsid, op, &piece);
            match queue.submit(sqe, data, buf) {
                Ok(cid) => {
                    if let Some(e) = s.by_cid.get_mut(usize::from(cid)) {
                        *e = Some((tag, piece));
                    }
                }
                Err(SubmitError {
                    error: QueueError::Full,
                    buf,
                }) => {
                    s.waiting.push_front((tag, piece, buf));
                    break;
                }
                Err(SubmitError { error, buf }) => {
                    let index = piece.byte_offset / self.max_command;
                    self.tags[tag as usize].piece_done(
                        tag,
                        index,
                        Err(error.into()),
                        buf,
                        self.request_bytes,
                        &mut s.ready,
                    );
                }
            }
        }
    }

    /// Requests submitted and not yet handed out as completions.
    fn outstanding(&self) -> usize {
        match &self.split {
            Some(_) => self.tags.iter().filter(|t| t.op.is_some()).count(),
            None => self.held.len() + self.queue.as_ref().map_or(0, NvmeRdmaQueue::outstanding),
        }
    }
}

impl<P: Provider> IoEngine for QueueEngine<P> {
    fn max_outstanding(&self) -> usize {
        self.max_outstanding
    }

    /// Sleeps on the queue's completions when [`QueueEngine::sleeping_when_idle`] asked
    /// for it and commands are in flight (nothing else could complete).
    fn idle(&mut self, timeout: std::time::Duration) {
        let ready = self.split.as_ref().is_some_and(|s| !s.ready.is_empty());
        if let Some(q) = self.queue.as_mut() {
            if self.sleep_when_idle && !ready && q.outstanding() > 0 {
                q.wait(timeout);
            }
        } else {
            // Reconnecting: nothing completes until the new queue is here.
            std::thread::sleep(timeout.min(Duration::from_millis(1)));
        }
    }

    fn submit(&mut self, tag: u32, req: &IoRequest) -> Result<(), EngineError> {
        if let Some(reason) = self.dead_reason() {
            return Err(EngineError::Transport(reason));
        }
        let t = tag as usize;
        if t >= self.tags.len() {
            return Err(EngineError::InvalidRequest(format!(
                "tag {tag} >= depth {}",
                self.tags.len()
            )));
        }
        if self.split.is_none() {
            let piece = self.whole_piece(req)?;
            let (sqe, data) = command(self.nsid, req.op, &piece);
            let buf = match req.op {
                // No data: the tag keeps its buffer.
                IoOp::Flush => None,
                _ => {
                    let Some(mut buf) = self.tags[t].buf.take() else {
                        return Err(EngineError::InvalidRequest(format!(
                            "tag {tag} already in use"
                        )));
                    };
                    match req.op {
                        IoOp::Trim => trim_data(&piece, &mut buf),
                        _ => {
                            buf.set_len(req.len as usize);
                        }
                    }
                    Some(buf)
                }
            };
            let Some(queue) = self.queue.as_mut() else {
                // Reconnecting: the runner tries again after polling.
                if buf.is_some() {
                    self.tags[t].buf = buf;
                }
                return Err(EngineError::Busy);
            };
            return match queue.submit_cid(tag as u16, sqe, data, buf) {
                Ok(()) => {
                    if let Some(e) = self.sent.get_mut(t) {
                        *e = Some((sqe, data));
                    }
                    Ok(())
                }
                Err(SubmitError { error, buf }) => {
                    if buf.is_some() {
                        self.tags[t].buf = buf;
                    }
                    Err(engine_error(error))
                }
            };
        }
        // Trims and flushes are one command of their own.
        let whole = match req.op {
            IoOp::Trim | IoOp::Flush => Some(self.whole_piece(req)?),
            _ => None,
        };
        let slba = match whole {
            Some(p) => p.slba,
            None => self.check(req, self.request_bytes)?,
        };
        let bs = 1u32 << self.block_shift;
        let max_command = self.max_command;
        let io = &mut self.tags[t];
        if io.op.is_some() {
            return Err(EngineError::InvalidRequest(format!(
                "tag {tag} already in use"
            )));
        }
        let Some(mut buf) = io.buf.take() else {
            return Err(EngineError::InvalidRequest(format!(
                "tag {tag} has no buffer"
            )));
        };
        let s = self.split.as_mut().expect("split mode");
        let mut n = 0;
        match (whole, req.op) {
            (Some(p), IoOp::Trim) => {
                buf.set_len(DSM_RANGE_BYTES);
                let mut view = buf.split_to(DSM_RANGE_BYTES);
                trim_data(&p, &mut view);
                s.waiting.push_back((tag, p, Some(view)));
                n = 1;
            }
            (Some(p), _) => {
                s.waiting.push_back((tag, p, None));
                n = 1;
            }
            (None, _) => {
                buf.set_len(req.len as usize);
                for p in split::split(slba, req.len as usize, bs, max_command) {
                    let view = buf.split_to(p.len);
                    s.waiting.push_back((tag, p, Some(view)));
                    n += 1;
                }
            }
        }
        io.rest = Some(buf);
        io.op = Some(req.op);
        io.left = n;
        io.error = None;
        self.pump();
        Ok(())
    }

    fn poll(&mut self, out: &mut Vec<IoCompletion>) -> Result<(), EngineError> {
        self.follow_reconnect(out);
        let mut dead = false;
        if let Some(q) = self.queue.as_mut() {
            q.poll(&mut self.done);
            dead = q.is_dead();
            if dead {
                if let (Some(h), Some(_)) = (self.health.as_ref(), self.slot.as_ref()) {
                    h.report_error(format!(
                        "queue {}: {}",
                        q.qid(),
                        q.dead_reason().unwrap_or("failed")
                    ));
                }
            }
        }
        self.hand_out(out, dead);
        let Some(reason) = self.dead_reason() else {
            self.pump();
            return Ok(());
        };
        // Nothing more will be submitted: pieces still waiting fail now.
        self.fail_waiting_pieces(&reason, out);
        let left = self.outstanding();
        let now = Instant::now();
        let since = *self.dead_since.get_or_insert(now);
        if left == 0
            || self
                .health
                .as_ref()
                .is_some_and(|h| h.dead_reason().is_some())
        {
            return Err(EngineError::Transport(reason));
        }
        if now.saturating_duration_since(since) >= DEAD_QUEUE_GRACE {
            return Err(EngineError::Transport(reason));
        }
        Ok(())
    }

    /// The tag's pool buffer; empty while the tag is in flight (the command holds it).
    fn buffer(&mut self, tag: u32) -> &mut [u8] {
        let n = self.request_bytes;
        match self.tags[tag as usize].buf.as_mut() {
            Some(b) => {
                b.set_len(n);
                &mut b[..]
            }
            None => &mut [],
        }
    }
}
