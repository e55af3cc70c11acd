//! Socket-free command capsule dispatch, for the fuzz targets in `fuzz/` and their
//! corpus replay test (`tests/fuzz_corpus.rs`). Hidden from the documentation: not a
//! stable API.
//!
//! [`dispatch_capsule`] takes one received command capsule (NVMe over Fabrics 1.x
//! §3.3: a 64-byte SQE, then in-capsule data) through the decisions the poll group
//! makes on its receive path (`rdma.rs`: `start_request`, `classify`, `setup_data`,
//! `execute`, `complete`), in the same order and with the same statuses: PSDT and
//! FUSE checks, Fabrics command types, the admin data direction, I/O decoding against
//! the namespace, SGL checks (keyed data block or in-capsule data block/offset, NVMe
//! RDMA Transport 1.x §3), then Connect, Property Get/Set and admin commands run for
//! real against the [`Registry`] and the queue's [`Controller`]. I/O commands stop
//! where the poll group would hand them to io_uring (Dataset Management ranges are
//! parsed first); they are reported, not executed. What an RDMA READ would fetch
//! from the host is `host_data`. No verbs, sockets or io_uring are involved.
//!
//! `classify` is shared with `rdma.rs` (`crate::capsule`); keep the rest of this in
//! step with `rdma.rs` when its checks change.
use std::sync::Arc;
use std::time::Instant;

use nvme::status::{CommandSpecificStatus, GenericStatus, Status};
use nvme::{Cqe, Sgl, Sqe};

use crate::admin::{self, AdminOutcome, DataDirection};
use crate::controller::Controller;
use crate::fabrics::{self, ConnectOutcome};
use crate::io::{self, IoCommand};
use crate::subsystem::Registry;

/// The poll group's capsule decision, re-exported for the capsule benchmark
/// (`benches/capsule.rs`), which times it on its own.
pub use crate::capsule::{classify, Kind};

/// Bytes of the SQE at the start of a command capsule.
pub const SQE_LEN: usize = 64;

/// One NVMe/RDMA queue as the dispatcher sees it: what the poll group's `Queue` holds.
#[derive(Debug, Clone)]
pub struct FuzzQueue {
    /// Queue ID from the CM private data (0 = admin queue).
    pub qid: u16,
    /// Submission queue size in entries (HSQSIZE + 1; at least 1).
    pub sq_size: u16,
    /// SQ head pointer reported in every CQE.
    pub sqhd: u16,
    /// The controller after a successful Connect.
    pub ctrl: Option<Arc<Controller>>,
    /// CIDs of Asynchronous Event Requests held by the controller.
    pub held_aers: Vec<u16>,
}

impl FuzzQueue {
    /// A queue `qid` of `sq_size` entries with no controller yet.
    pub fn new(qid: u16, sq_size: u16) -> Self {
        FuzzQueue {
            qid,
            sq_size: sq_size.max(1),
            sqhd: 0,
            ctrl: None,
            held_aers: Vec::new(),
        }
    }
}

/// What the target would send back for one capsule.
#[derive(Debug, Clone, Default)]
pub struct CapsuleAnswer {
    /// The response capsule; `None` when the capsule is shorter than an SQE (dropped)
    /// or is an Asynchronous Event Request the controller holds.
    pub cqe: Option<Cqe>,
    /// Controller-to-host data the target would RDMA WRITE before the CQE (only on
    /// success; I/O reads report zeros of the right length).
    pub c2h: Vec<u8>,
    /// Host-to-controller bytes the target would fetch by RDMA READ (keyed SGL).
    pub rdma_read_len: usize,
    /// Bytes taken from the in-capsule data.
    pub in_capsule_len: usize,
    /// The rkey the response's SEND with Invalidate would invalidate.
    pub invalidate_rkey: Option<u32>,
    /// The checked I/O command the poll group would hand to io_uring.
    pub io: Option<IoCommand>,
    /// Completions of earlier held Asynchronous Event Requests this command released.
    pub events: Vec<Cqe>,
    /// Length of the keyed SGL, if the command had one (bounds `c2h`).
    pub keyed_len: Option<u32>,
}

/// The command's data, set up (as `rdma.rs`'s `setup_data`).
#[derive(Default)]
struct Plan {
    keyed: Option<(u32, bool)>,
    /// Host data (in-capsule or fetched) or the controller-to-host buffer.
    data: Option<Vec<u8>>,
    c2h_len: usize,
}

fn generic_dnr(code: GenericStatus) -> Status {
    Status::generic(code).with_dnr()
}

/// Runs one command capsule received on queue `q` of `reg` at `now`.
///
/// `capsule` is the received SEND payload (SQE plus in-capsule data; the poll group's
/// receive buffers hold at most 64 + the in-capsule size). `host_data` stands for the
/// host memory a keyed SGL points at (taken from its start, zero-filled past its end).
/// `max_io_bytes` is the poll group's largest transfer (MDTS). Never panics on any
/// bytes.
pub fn dispatch_capsule(
    reg: &Registry,
    q: &mut FuzzQueue,
    capsule: &[u8],
    host_data: &[u8],
    max_io_bytes: u32,
    now: Instant,
) -> CapsuleAnswer {
    let mut ans = CapsuleAnswer::default();
    let Some(Ok(sqe_bytes)) = capsule.get(..SQE_LEN).map(<[u8; SQE_LEN]>::try_from) else {
        return ans;
    };
    let sqe = Sqe::from_array(sqe_bytes);
    q.sqhd = (q.sqhd + 1) % q.sq_size.max(1);
    if let Ok(Sgl::KeyedDataBlock { len, .. }) = sqe.sgl().decode() {
        ans.keyed_len = Some(len);
    }
    let (kind, dir) = match classify(&sqe, q.qid, q.ctrl.as_deref(), max_io_bytes) {
        Ok(v) => v,
        Err(st) => return complete(ans, q, &sqe, st, (0, 0), &Plan::default()),
    };
    let mut plan = match setup_data(&sqe, kind, dir, capsule, host_data, max_io_bytes, &mut ans) {
        Ok(p) => p,
        Err(st) => return complete(ans, q, &sqe, st, (0, 0), &Plan::default()),
    };
    let (status, dw) = match kind {
        Kind::Connect => connect(reg, q, &sqe, &plan, now),
        Kind::PropertyGet => match fabrics::property_get(q.ctrl.as_deref(), &sqe) {
            Ok(v) => (Status::SUCCESS, (v as u32, (v >> 32) as u32)),
            Err(st) => (st, (0, 0)),
        },
        Kind::PropertySet => (
            fabrics::property_set_at(q.ctrl.as_deref(), &sqe, now)
                .err()
                .unwrap_or(Status::SUCCESS),
            (0, 0),
        ),
        Kind::Admin => {
            let Some(ctrl) = q.ctrl.clone() else {
                let st = Status::generic(GenericStatus::CommandSequenceError);
                return complete(ans, q, &sqe, st, (0, 0), &plan);
            };
            let mut empty = Vec::new();
            let out = plan.data.as_mut().unwrap_or(&mut empty);
            let r = match admin::handle(reg, &ctrl, &sqe, out, now) {
                AdminOutcome::Done {
                    status,
                    dw0,
                    data_len,
                } => {
                    if plan.c2h_len > 0 {
                        plan.c2h_len = data_len.min(plan.c2h_len);
                    }
                    Some((status, (dw0, 0)))
                }
                AdminOutcome::Hold => {
                    q.held_aers.push(sqe.cid());
                    None
                }
            };
            // Held AERs the command's event released (`complete_events`).
            while let Some(aer) = ctrl.take_aer() {
                if let Some(k) = q.held_aers.iter().position(|&c| c == aer.cid) {
                    q.held_aers.remove(k);
                    ans.events
                        .push(Cqe::new(aer.cid, q.qid, q.sqhd, Status::SUCCESS, aer.dw0));
                }
            }
            match r {
                Some(r) => r,
                None => return ans,
            }
        }
        Kind::Io(cmd) => io_command(q, &sqe, cmd, &plan, &mut ans),
    };
    complete(ans, q, &sqe, status, dw, &plan)
}

/// `rdma.rs` `setup_data`: checks the SGL against the data and fetches host data.
fn setup_data(
    sqe: &Sqe,
    kind: Kind,
    dir: DataDirection,
    capsule: &[u8],
    host_data: &[u8],
    max_io_bytes: u32,
    ans: &mut CapsuleAnswer,
) -> Result<Plan, Status> {
    let mut plan = Plan::default();
    let (need, h2c) = match dir {
        DataDirection::None => {
            if let Ok(Sgl::KeyedDataBlock {
                key, invalidate, ..
            }) = sqe.sgl().decode()
            {
                if invalidate && key != 0 {
                    plan.keyed = Some((key, invalidate));
                }
            }
            return Ok(plan);
        }
        DataDirection::HostToController(n) => (n, true),
        DataDirection::ControllerToHost(n) => (n, false),
    };
    let sgl = sqe
        .sgl()
        .decode()
        .map_err(|_| generic_dnr(GenericStatus::SglDescriptorTypeInvalid))?;
    match sgl {
        Sgl::KeyedDataBlock {
            len,
            key,
            invalidate,
            ..
        } => {
            plan.keyed = Some((key, invalidate));
            let short = (len as usize) < need;
            if short && (h2c || !matches!(kind, Kind::Admin)) {
                return Err(generic_dnr(GenericStatus::DataSglLengthInvalid));
            }
            // Admin data may be shorter than the structure (copy what fits, as nvmet).
            let len = if h2c { need } else { need.min(len as usize) };
            if len > max_io_bytes as usize {
                return Err(generic_dnr(GenericStatus::DataSglLengthInvalid));
            }
            if len == 0 {
                return Ok(plan);
            }
            if h2c {
                // The RDMA READ of the host's buffer.
                let mut d = host_data[..len.min(host_data.len())].to_vec();
                d.resize(len, 0);
                ans.rdma_read_len = len;
                plan.data = Some(d);
            } else {
                plan.c2h_len = len;
                plan.data = Some(vec![0; len]);
            }
            Ok(plan)
        }
        Sgl::DataBlockOffset { offset, len } => {
            if !h2c {
                return Err(generic_dnr(GenericStatus::SglDescriptorTypeInvalid));
            }
            let avail = capsule.len() - SQE_LEN;
            if offset > avail as u64 {
                return Err(generic_dnr(GenericStatus::SglOffsetInvalid));
            }
            let end = offset.checked_add(u64::from(len));
            if end.is_none_or(|e| e > avail as u64) || (len as usize) < need {
                return Err(generic_dnr(GenericStatus::DataSglLengthInvalid));
            }
            let start = SQE_LEN + offset as usize;
            plan.data = Some(capsule[start..start + need].to_vec());
            ans.in_capsule_len = need;
            Ok(plan)
        }
        Sgl::DataBlockAddress { .. } => Err(generic_dnr(GenericStatus::SglDescriptorTypeInvalid)),
    }
}

/// `rdma.rs` `execute` for a Connect.
fn connect(
    reg: &Registry,
    q: &mut FuzzQueue,
    sqe: &Sqe,
    plan: &Plan,
    now: Instant,
) -> (Status, (u32, u32)) {
    if q.ctrl.is_some() {
        let st = Status::command_specific(CommandSpecificStatus::ConnectControllerBusy);
        return (st.with_dnr(), (0, 0));
    }
    let connect_qid = nvme::fabrics::ConnectCommand::from_sqe(sqe)
        .map(|c| c.qid())
        .unwrap_or(u16::MAX);
    if connect_qid != q.qid {
        let st = Status::command_specific(CommandSpecificStatus::ConnectInvalidParameters);
        return (st.with_dnr(), (42, 0));
    }
    let data = plan.data.as_deref().unwrap_or(&[]);
    match fabrics::connect(reg, sqe, data, now) {
        ConnectOutcome::Accepted { ctrl, dw0 } => {
            q.ctrl = Some(ctrl);
            (Status::SUCCESS, (dw0, 0))
        }
        ConnectOutcome::Refused { status, dw0 } => (status, (dw0, 0)),
    }
}

/// `rdma.rs` `execute_io`, up to the io_uring submission.
fn io_command(
    q: &FuzzQueue,
    sqe: &Sqe,
    cmd: IoCommand,
    plan: &Plan,
    ans: &mut CapsuleAnswer,
) -> (Status, (u32, u32)) {
    let ns = q.ctrl.as_ref().and_then(|c| c.subsys.namespace(sqe.nsid()));
    let Some(ns) = ns else {
        return (generic_dnr(GenericStatus::InvalidNamespaceOrFormat), (0, 0));
    };
    if let IoCommand::DatasetManagement { ranges, deallocate } = cmd {
        if !deallocate {
            return (Status::SUCCESS, (0, 0));
        }
        let Some(data) = plan.data.as_deref() else {
            return (generic_dnr(GenericStatus::DataSglLengthInvalid), (0, 0));
        };
        if let Err(st) = io::parse_dsm_ranges(data, ranges, ns.ns.nlb()) {
            return (st, (0, 0));
        }
    }
    ans.io = Some(cmd);
    (Status::SUCCESS, (0, 0))
}

/// `rdma.rs` `complete`: the CQE, the RDMA WRITE data on success, the invalidation.
fn complete(
    mut ans: CapsuleAnswer,
    q: &FuzzQueue,
    sqe: &Sqe,
    status: Status,
    (dw0, dw1): (u32, u32),
    plan: &Plan,
) -> CapsuleAnswer {
    let mut cqe = Cqe::new(sqe.cid(), q.qid, q.sqhd, status, dw0);
    cqe.set_dw1(dw1);
    ans.cqe = Some(cqe);
    if status.is_success() && plan.c2h_len > 0 && plan.keyed.is_some() {
        if let Some(d) = &plan.data {
            ans.c2h = d[..plan.c2h_len.min(d.len())].to_vec();
        }
    }
    ans.invalidate_rkey = plan.keyed.and_then(|(key, inv)| inv.then_some(key));
    ans
}
