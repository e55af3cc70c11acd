//! What the request core asks of its driver ([`super::core`], [`super::poll_group`]):
//! the [`Action`]s, in the order they are to be carried out, and the buffers, host
//! memory and io_uring operations they name. Plain values: no provider or ring types,
//! so another driver (the simulation, a verbs provider) carries out the same actions.
use super::wr_id::WrId;
use crate::oplog::QueueEnd;

/// One of the regions the core's buffers lie in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RegionId {
    /// The in-capsule data of the receive buffers (`in_capsule_bytes` per buffer;
    /// io_uring fixed buffer 1).
    InCapsule,
    /// The response slots ([`RESP_SLOT`](super::RESP_SLOT) bytes per receive buffer).
    Responses,
    /// The data slab (io_uring fixed buffer 0).
    Data,
}

/// Bytes `offset..offset + len` of region `region`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Buf {
    pub region: RegionId,
    pub offset: usize,
    pub len: u32,
}

/// Host memory named by a keyed SGL data block.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RemoteBuf {
    pub addr: u64,
    pub rkey: u32,
}

/// A response capsule to SEND: the CQE in its response slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Response {
    /// The SEND's id ([`WrId::Response`]); signaled.
    pub wr_id: WrId,
    /// The 16-byte CQE (in [`RegionId::Responses`]).
    pub cqe: Buf,
    /// SEND with Invalidate of this rkey (the keyed SGL asked for it), or a plain SEND.
    pub invalidate_rkey: Option<u32>,
}

/// An io_uring operation on namespace file `file` (its fixed file index).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum IoOp {
    /// Read `buf.len` bytes at byte `offset` into `buf`.
    Read { file: u32, buf: Buf, offset: u64 },
    /// Write `buf` at byte `offset`; `dsync`: `RWF_DSYNC` (durable before completion).
    Write {
        file: u32,
        buf: Buf,
        offset: u64,
        dsync: bool,
    },
    /// `fdatasync`.
    Fsync { file: u32 },
    /// `fallocate(mode, offset, len)`.
    Fallocate {
        file: u32,
        mode: i32,
        offset: u64,
        len: u64,
    },
}

/// What the driver must do, in the order the core hands them out.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[must_use]
pub enum Action {
    /// Post receive buffer `slot` to the SRQ again ([`WrId::Recv`]).
    RepostRecv { slot: u32 },
    /// RDMA READ `remote` into `local` on QP `qpn` (signaled).
    PostRdmaRead {
        qpn: u32,
        wr_id: WrId,
        local: Buf,
        remote: RemoteBuf,
    },
    /// RDMA WRITE `data` to `remote` (unsignaled, `write_wr_id`), then the response
    /// SEND: one `post_send_list` on QP `qpn`.
    PostWriteAndSend {
        qpn: u32,
        write_wr_id: WrId,
        data: Buf,
        remote: RemoteBuf,
        response: Response,
    },
    /// The response SEND alone on QP `qpn`.
    PostSend { qpn: u32, response: Response },
    /// Queue `op` on the io_uring ring, user data `req`; its completion is
    /// [`RequestCore::io_completed`](super::core::RequestCore::io_completed).
    SubmitIo { req: u32, op: IoOp },
    /// QP `qpn` failed (its first error completion): tell the control thread, which
    /// disconnects it (CM DREQ) and destroys the queue.
    ReportQpError { qpn: u32 },
    /// Queue `qpn` is over for reason `why` (a Fabrics Disconnect was answered): tell
    /// the control thread, which disconnects it (CM DREQ) and destroys the queue.
    EndQueue { qpn: u32, why: QueueEnd },
}
