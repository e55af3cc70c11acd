//! What the queue core and its driver exchange: where the queue's buffers are
//! ([`QueueMemory`]), typed work request ids ([`WrId`]), a submission's posts
//! ([`Submission`], and [`PostFailure`] when one could not be made) and the posts that
//! follow an event ([`Action`]).
use transport::verbs::{RecvWr, SendWr, VerbsError};

pub use nvme::{CQE_LEN, SQE_LEN};
/// Size of one response buffer (the CQE is 16 bytes; NVMe RDMA allows IORCSZ > 1).
pub const RSP_LEN: usize = 64;

/// One registered memory region as the work requests name it: its first iova and lkey.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MrSpan {
    /// iova of byte 0.
    pub addr: u64,
    /// Local key.
    pub lkey: u32,
}

/// Where a queue's own registered buffers are (its data buffers come with each command,
/// from the host's pool: [`BufSpan`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QueueMemory {
    /// SQE buffers: slot `i`'s at `sqe.addr + i * SQE_LEN`.
    pub sqe: MrSpan,
    /// Response buffers: receive `i`'s at `rsp.addr + i * RSP_LEN` (LOCAL_WRITE).
    pub rsp: MrSpan,
}

/// A command's data buffer in registered memory (a pool buffer, `crate::IoBuf`): its
/// iova, length and the local key of its region.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BufSpan {
    /// iova of the first byte.
    pub addr: u64,
    /// Bytes.
    pub len: usize,
    /// Local key of the region that holds it.
    pub lkey: u32,
}

/// How a queue gives the target access to a command's data buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RemoteKeys<'a> {
    /// Type 2 memory windows, one per slot, with these keys (as `ibv_alloc_mw`
    /// returned them): each keyed command binds its slot's window over its buffer
    /// with a fresh key and asks for SEND with Invalidate.
    Windows(&'a [u32]),
    /// The data region's own rkey, the same for every command (no bind, no
    /// invalidation: SGL identifier 40h).
    Region {
        /// The region's rkey.
        rkey: u32,
    },
}

/// What a work request of the queue is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WrKind {
    /// The capsule SEND of a slot (signaled).
    Send = 1,
    /// The memory window bind of a slot (unsignaled: only a failure completes).
    Bind = 2,
    /// The Local Invalidate of a slot's key (signaled).
    LocalInv = 3,
    /// A response receive buffer.
    Recv = 4,
}

impl WrKind {
    /// What the work request was doing, for error messages.
    pub fn what(self) -> &'static str {
        match self {
            WrKind::Send => "command capsule SEND",
            WrKind::Bind => "memory window bind",
            WrKind::LocalInv => "local invalidate",
            WrKind::Recv => "response receive",
        }
    }
}

/// A work request id, typed: its kind and the slot (or receive buffer) index. On the
/// wire of the verbs API (`wr_id`) the kind is the high 32 bits and the index the low.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WrId {
    /// What the work request is for.
    pub kind: WrKind,
    /// The slot (= command identifier) or receive buffer index.
    pub index: u32,
}

impl WrId {
    /// The `wr_id` value.
    pub const fn to_u64(self) -> u64 {
        ((self.kind as u64) << 32) | self.index as u64
    }

    /// The id a `wr_id` value carries; `None` for one the queue never posts.
    pub fn from_u64(v: u64) -> Option<WrId> {
        let kind = match v >> 32 {
            1 => WrKind::Send,
            2 => WrKind::Bind,
            3 => WrKind::LocalInv,
            4 => WrKind::Recv,
            _ => return None,
        };
        Some(WrId {
            kind,
            index: v as u32,
        })
    }

    /// What the work request `v` was doing, for error messages.
    pub fn what(v: u64) -> &'static str {
        WrId::from_u64(v).map_or("work request", |id| id.kind.what())
    }
}

/// A post the driver makes after an event, in order.
#[must_use]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// `ibv_post_send` on the queue's QP (a Local Invalidate).
    PostSend(SendWr),
    /// `ibv_post_recv` on the queue's QP (a response buffer back to the receive queue).
    PostRecv(RecvWr),
}

impl Action {
    /// The work request's `wr_id` (for [`super::QueueCore::post_failed`]).
    pub fn wr_id(&self) -> u64 {
        match self {
            Action::PostSend(wr) => wr.wr_id,
            Action::PostRecv(wr) => wr.wr_id,
        }
    }
}

/// What [`super::QueueCore::submitted`] commits once the posts succeeded.
#[derive(Clone, Copy, Debug)]
pub(super) enum Commit {
    /// A command expecting a response; `key` is the rkey the bind grants, if any.
    Command {
        key: Option<u32>,
        opcode: u8,
        fctype: Option<u8>,
    },
    /// A runt SEND: busy until the SEND completes, no response.
    RawSend,
}

/// One submission's posts: write [`Submission::sqe_bytes`] at
/// [`Submission::sqe_offset`] of the SQE MR, post [`Submission::bind`] (if any) and then
/// [`Submission::send`], and hand the outcome to [`super::QueueCore::submitted`]. Until then
/// the slot is taken but the command does not exist.
#[must_use = "post its work requests, then pass it to QueueCore::submitted"]
#[derive(Debug)]
pub struct Submission {
    pub(super) cid: u16,
    pub(super) sqe: [u8; SQE_LEN],
    pub(super) sqe_len: usize,
    pub(super) bind: Option<SendWr>,
    pub(super) send: SendWr,
    pub(super) defer_acks: bool,
    pub(super) commit: Commit,
}

impl Submission {
    /// The command identifier (= slot).
    pub fn cid(&self) -> u16 {
        self.cid
    }
    /// The bytes for the slot's SQE buffer (64, or fewer for a runt).
    pub fn sqe_bytes(&self) -> &[u8] {
        &self.sqe[..self.sqe_len]
    }
    /// Offset of the slot's SQE buffer in the SQE MR.
    pub fn sqe_offset(&self) -> usize {
        usize::from(self.cid) * SQE_LEN
    }
    /// The memory window bind to post first (keyed SGL).
    pub fn bind(&self) -> Option<&SendWr> {
        self.bind.as_ref()
    }
    /// The capsule SEND.
    pub fn send(&self) -> &SendWr {
        &self.send
    }
    /// Whether the driver should turn on deferred ACKs for the poll group before
    /// posting (the queue's first I/O command: from then on, ACKs for what the poll
    /// receives leave with the next capsule). Never on the admin queue, whose owner may
    /// go idle right after a command.
    pub fn turns_on_deferred_acks(&self) -> bool {
        self.defer_acks
    }
}

/// Which post of a [`Submission`] failed.
#[derive(Debug)]
pub enum PostFailure {
    /// The memory window bind: nothing was posted.
    Bind(VerbsError),
    /// The capsule SEND (after the bind, if there was one).
    Send(VerbsError),
}
