//! A simulated transport and io_uring for the request core: it owns plain memory for
//! the core's regions, delivers command capsules into receive buffers as the two-SGE
//! receive of the poll group scatters them, and carries out the core's [`Action`]s on
//! that memory, either one by one (the core's unit tests inspect them and answer with
//! the events they choose) or all at once, every work request and io_uring operation
//! succeeding at once ([`Sim::run`], for the capsule fuzz target). Hidden from the
//! documentation: a test double, not an API.
//!
//! Host memory is a byte slice: an RDMA READ takes its first bytes (zeros past its end).
//! io_uring operations move no data: a read leaves the buffer as it was, and every
//! operation completes with its full length.
use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Instant;

use nvme::Cqe;
use transport::verbs::WcStatus;

use super::action::{Action, Buf, IoOp, RegionId, Response};
use super::core::{CoreConfig, CoreError, CoreMemory, Region, RequestCore};
use super::queue::QueueParams;
use super::{PollGroupCounters, RESP_SLOT, SQE_LEN};
use crate::buffers::Slab;
use crate::subsystem::Registry;

/// Sizes of a simulated poll group.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SimConfig {
    /// Receive buffers.
    pub srq_depth: u32,
    /// In-capsule data bytes per receive buffer.
    pub in_capsule_bytes: u32,
    /// Bytes of the data slab (at least `max_io_bytes`).
    pub data_slab_bytes: usize,
    /// MDTS in bytes.
    pub max_io_bytes: u32,
    /// io_uring slots.
    pub io_slots: u32,
}

impl Default for SimConfig {
    /// The poll group's defaults, with 128 receive buffers and a 4 MiB slab.
    fn default() -> Self {
        SimConfig {
            srq_depth: 128,
            in_capsule_bytes: 4096,
            data_slab_bytes: 4 << 20,
            max_io_bytes: 1 << 20,
            io_slots: 512,
        }
    }
}

/// What [`Sim::run`] carried out.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Seen {
    /// An RDMA READ of `len` bytes of host memory for request `req` on QP `qpn`.
    RdmaRead { qpn: u32, req: u32, len: u32 },
    /// A response capsule of request `req` on QP `qpn`, after the RDMA WRITE of `data`
    /// (empty without one).
    Response {
        qpn: u32,
        req: u32,
        cqe: Cqe,
        data: Vec<u8>,
        invalidate_rkey: Option<u32>,
    },
    /// An io_uring operation of request `req`.
    Io { req: u32, op: IoOp },
    /// A QP reported failed.
    QpError { qpn: u32 },
    /// A queue reported over (a Fabrics Disconnect was answered).
    QueueEnded { qpn: u32 },
}

/// Queue parameters as the poll group gives them, for a host on 127.0.0.1 whose QPN is
/// `0x20 + qid`: send credits of 4 WRs per SQ entry plus 16, ORD 16 (what the
/// benches and the fuzzer run the core with).
pub fn loopback_queue_params(qid: u16, sq_size: u16) -> QueueParams {
    QueueParams {
        qid,
        sq_size,
        remote: std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST),
        remote_qpn: 0x20 + u32::from(qid),
        send_depth: 4 * u32::from(sq_size) + 16,
        ord: 16,
        port: 0,
    }
}

/// A request core over simulated memory (see the module docs).
pub struct Sim {
    /// The core (declared first: dropped before the memory it points into).
    pub core: RequestCore,
    counters: Arc<PollGroupCounters>,
    /// Memory of the SQE, in-capsule, response and data regions.
    _memory: Vec<Slab>,
    /// Receive buffers posted, in the order the SRQ hands them out.
    posted: VecDeque<u32>,
    in_capsule_bytes: u32,
}

impl std::fmt::Debug for Sim {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sim")
            .field("core", &self.core)
            .field("posted", &self.posted.len())
            .finish()
    }
}

/// Why a [`Sim`] could not be built.
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    #[error("simulated memory: {0}")]
    Memory(#[from] std::io::Error),
    #[error("{0}")]
    Core(#[from] CoreError),
}

impl Sim {
    /// A core for `reg` over fresh zeroed memory, every receive buffer posted.
    ///
    /// # Errors
    /// [`SimError`]: the memory could not be mapped, or the core refused the sizes.
    pub fn new(cfg: SimConfig, reg: Arc<Registry>) -> Result<Sim, SimError> {
        let n = cfg.srq_depth as usize;
        let mut memory = Vec::new();
        let mut region = |len: usize| -> Result<Region, SimError> {
            if len == 0 {
                return Ok(Region::EMPTY);
            }
            let slab = Slab::lazy(len)?;
            // SAFETY: the slab lives in `_memory` as long as the core (dropped first).
            let r = unsafe { Region::new(slab.as_ptr(), slab.len()) };
            memory.push(slab);
            Ok(r)
        };
        let mem = CoreMemory {
            sqes: region(n * SQE_LEN)?,
            in_capsule: region(n * cfg.in_capsule_bytes as usize)?,
            responses: region(n * RESP_SLOT)?,
            data: region(cfg.data_slab_bytes)?,
        };
        let counters = Arc::new(PollGroupCounters::default());
        let core = RequestCore::new(
            CoreConfig {
                srq_depth: cfg.srq_depth,
                in_capsule_bytes: cfg.in_capsule_bytes,
                max_io_bytes: cfg.max_io_bytes,
                io_slots: cfg.io_slots,
                group: 0,
                admin_slots: 0,
            },
            mem,
            reg,
            counters.clone(),
        )?;
        Ok(Sim {
            core,
            counters,
            _memory: memory,
            posted: (0..cfg.srq_depth).collect(),
            in_capsule_bytes: cfg.in_capsule_bytes,
        })
    }

    /// The core's counters.
    pub fn counters(&self) -> &Arc<PollGroupCounters> {
        &self.counters
    }

    /// Connects queue `qpn` (the CM exchange and QP bring-up done).
    pub fn add_queue(&mut self, qpn: u32, params: &QueueParams) {
        self.core.add_queue(qpn, params);
    }

    /// Receive buffers posted now.
    pub fn posted(&self) -> usize {
        self.posted.len()
    }

    /// A SEND of `capsule` arrives on QP `qpn`: it lands in the next posted receive
    /// buffer, the first 64 bytes in its SQE slot and the rest in its in-capsule slot,
    /// and the core hears of it. Returns the buffer, or `None` when none is posted (a
    /// real responder answers RNR) or the capsule does not fit (the receive completes
    /// in error and the buffer goes back).
    pub fn deliver(&mut self, qpn: u32, capsule: &[u8], now: Instant) -> Option<u32> {
        let slot = self.posted.pop_front()?;
        let stride = self.in_capsule_bytes as usize;
        if capsule.len() > SQE_LEN + stride {
            self.core.recv_failed(slot);
            return None;
        }
        let i = slot as usize;
        let head = capsule.len().min(SQE_LEN);
        write(self.core.memory().sqes, i * SQE_LEN, &capsule[..head]);
        write(self.core.memory().in_capsule, i * stride, &capsule[head..]);
        self.core
            .capsule_received(slot, qpn, capsule.len() as u32, now);
        Some(slot)
    }

    /// The actions the core has for the driver, in order; receive buffers re-posted
    /// among them go back to the simulated SRQ.
    pub fn actions(&mut self) -> Vec<Action> {
        std::iter::from_fn(|| self.poll_action()).collect()
    }

    /// The core's next action, if any; a receive buffer re-posted goes back to the
    /// simulated SRQ. One at a time, without allocating (the request core bench).
    pub fn poll_action(&mut self) -> Option<Action> {
        let a = self.core.poll_action()?;
        if let Action::RepostRecv { slot } = a {
            self.posted.push_back(slot);
        }
        Some(a)
    }

    /// Writes `data` into the core's buffer `b` (what an RDMA READ does), zero-filled
    /// past the end of `data`.
    pub fn fill(&mut self, b: Buf, data: &[u8]) {
        let region = match b.region {
            RegionId::InCapsule => self.core.memory().in_capsule,
            RegionId::Responses => self.core.memory().responses,
            RegionId::Data => self.core.memory().data,
        };
        let mut bytes = data[..data.len().min(b.len as usize)].to_vec();
        bytes.resize(b.len as usize, 0);
        write(region, b.offset, &bytes);
    }

    /// The CQE a response carries.
    pub fn cqe(&self, r: &Response) -> Cqe {
        let mut a = [0u8; 16];
        let b = self.core.bytes(r.cqe);
        if b.len() == 16 {
            a.copy_from_slice(b);
        }
        Cqe::from_array(a)
    }

    /// Carries out every action as a transport and io_uring that succeed at once would,
    /// until the core has none: RDMA READs read `host`. Returns what it carried out.
    pub fn run(&mut self, host: &[u8], now: Instant) -> Vec<Seen> {
        let mut seen = Vec::new();
        while let Some(a) = self.core.poll_action() {
            match a {
                Action::RepostRecv { slot } => self.posted.push_back(slot),
                Action::PostRdmaRead {
                    qpn, wr_id, local, ..
                } => {
                    self.fill(local, host);
                    seen.push(Seen::RdmaRead {
                        qpn,
                        req: wr_id.index(),
                        len: local.len,
                    });
                    self.core.send_completed(wr_id, qpn, WcStatus::Success, now);
                }
                Action::PostWriteAndSend {
                    qpn,
                    data,
                    response,
                    ..
                } => {
                    let data = self.core.bytes(data).to_vec();
                    seen.push(self.response(qpn, &response, data));
                    self.core
                        .send_completed(response.wr_id, qpn, WcStatus::Success, now);
                }
                Action::PostSend { qpn, response } => {
                    seen.push(self.response(qpn, &response, Vec::new()));
                    self.core
                        .send_completed(response.wr_id, qpn, WcStatus::Success, now);
                }
                Action::SubmitIo { req, op } => {
                    seen.push(Seen::Io { req, op });
                    let res = match op {
                        IoOp::Read { buf, .. } | IoOp::Write { buf, .. } => buf.len as i32,
                        IoOp::Fsync { .. } | IoOp::Fallocate { .. } => 0,
                    };
                    self.core.io_completed(req, res, now);
                }
                Action::ReportQpError { qpn } => seen.push(Seen::QpError { qpn }),
                Action::EndQueue { qpn, .. } => seen.push(Seen::QueueEnded { qpn }),
            }
        }
        seen
    }

    fn response(&self, qpn: u32, r: &Response, data: Vec<u8>) -> Seen {
        Seen::Response {
            qpn,
            req: r.wr_id.index(),
            cqe: self.cqe(r),
            data,
            invalidate_rkey: r.invalidate_rkey,
        }
    }
}

/// Copies `data` to `offset` of `region`, as far as the region reaches.
fn write(region: Region, offset: usize, data: &[u8]) {
    let end = offset.saturating_add(data.len()).min(region.len());
    if offset >= end {
        return;
    }
    // SAFETY: inside the region, which the sim's memory backs; the core holds no slice
    // of it across this call.
    unsafe {
        std::ptr::copy_nonoverlapping(data.as_ptr(), region.ptr().add(offset), end - offset);
    }
}
