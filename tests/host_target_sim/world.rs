//! The simulated world: one target (its request core over the simulated transport of
//! `nvmf_target::rdma::sim`, a namespace store that survives its crashes with what was
//! durable), the host's controllers (one per path), and an RC network between them,
//! all driven by one event queue in simulated time.
//!
//! The network gives RC's promises (IBTA Vol 1 §9.7): each QP delivers its messages
//! reliably and in order; a lost packet costs a retransmission timeout; when a
//! message (or its ACK) does not get through within the retry budget (the link is
//! partitioned or dead that long, or the peer QP is gone: a crashed target, a queue
//! torn down) the sender's work request completes with Retry Exceeded and the QP
//! delivers nothing more.
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, VecDeque};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use nvmf_target::backend::Backend;
use nvmf_target::oplog::QueueEnd;
use nvmf_target::rdma::action::{Action as TAction, Buf, IoOp, RemoteBuf};
use nvmf_target::rdma::queue::QueueParams;
use nvmf_target::rdma::sim::{Sim, SimConfig};
use nvmf_target::rdma::wr_id::WrId as TWrId;
use nvmf_target::subsystem::{Limits, NamespaceEntry, PortInfo, Registry, Subsystem};
use rand::rngs::StdRng;
use rand::Rng;
use transport::verbs::WcStatus;

use super::check::{Checker, BLOCK, T};
use super::host::{Ctrl, Op};

pub const SUBNQN: &str = "nqn.2026-12.io.example:sim";
pub const HOSTNQN: &str = "nqn.2014-08.org.nvmexpress:uuid:6b1c0f5e-8d3a-4c1e-9f0b-2a7d5e4c3b21";
/// Blocks of the namespace.
pub const NS_BLOCKS: u64 = 2048;
/// Blocks the workload writes (small: writes overlap).
pub const HOT_BLOCKS: u64 = 24;

/// The instant simulated time 0 stands for (only differences matter to the cores).
pub fn at(t: T) -> Instant {
    static BASE: OnceLock<Instant> = OnceLock::new();
    *BASE.get_or_init(Instant::now) + Duration::from_micros(t)
}

/// One backend for every target of the process: the request core only takes its
/// size and block size from it; the data lives in [`Store`].
fn backend() -> Arc<Backend> {
    static B: OnceLock<(tempfile::TempDir, Arc<Backend>)> = OnceLock::new();
    B.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap();
        let b = Backend::open(
            &dir.path().join("ns.img"),
            Some(NS_BLOCKS * BLOCK as u64),
            BLOCK as u32,
        )
        .unwrap();
        (dir, Arc::new(b))
    })
    .1
    .clone()
}

/// The namespace's file as a crash sees it: the page cache over the durable media.
#[derive(Debug)]
pub struct Store {
    pub cache: Vec<u8>,
    pub durable: Vec<u8>,
    /// Blocks whose cache is newer than the media.
    dirty: std::collections::BTreeSet<usize>,
}

impl Store {
    fn new() -> Self {
        let n = NS_BLOCKS as usize * BLOCK;
        Store {
            cache: vec![0; n],
            durable: vec![0; n],
            dirty: Default::default(),
        }
    }
    fn write(&mut self, offset: usize, data: &[u8], dsync: bool) {
        let end = (offset + data.len()).min(self.cache.len());
        let data = &data[..end - offset];
        self.cache[offset..end].copy_from_slice(data);
        for b in offset / BLOCK..end.div_ceil(BLOCK) {
            if dsync {
                let r = b * BLOCK..(b + 1) * BLOCK;
                self.durable[r.clone()].copy_from_slice(&self.cache[r]);
                self.dirty.remove(&b);
            } else {
                self.dirty.insert(b);
            }
        }
    }
    fn fsync(&mut self) {
        for b in std::mem::take(&mut self.dirty) {
            let r = b * BLOCK..(b + 1) * BLOCK;
            self.durable[r.clone()].copy_from_slice(&self.cache[r]);
        }
    }
    /// Power loss: each dirty block was written back or not.
    fn crash(&mut self, rng: &mut StdRng) {
        for b in std::mem::take(&mut self.dirty) {
            if rng.gen_bool(0.5) {
                let r = b * BLOCK..(b + 1) * BLOCK;
                self.durable[r.clone()].copy_from_slice(&self.cache[r]);
            }
        }
        self.cache.clone_from(&self.durable);
    }
}

/// Which end of a QP.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Side {
    Host,
    Target,
}

/// Whose work request a message carries out (its failure completes that WR in error).
#[derive(Clone, Copy, Debug)]
pub enum Owner {
    Host(u64),
    Target(TWrId),
    /// An ACK of a message whose WR already completed on the other side.
    None,
}

#[derive(Clone, Debug)]
pub enum Msg {
    /// A command capsule SEND (host -> target).
    Capsule { bytes: Vec<u8>, wr: u64 },
    /// The RC ACK of the host's SEND (target -> host).
    HostSendAck { wr: u64 },
    /// The target's RDMA READ request (target -> host).
    ReadReq {
        remote: RemoteBuf,
        local: Buf,
        wr: TWrId,
    },
    /// The READ's response data (host -> target).
    ReadResp {
        data: Vec<u8>,
        local: Buf,
        wr: TWrId,
    },
    /// An RDMA WRITE (if any) and the response capsule SEND (target -> host).
    Response {
        write: Option<(RemoteBuf, Vec<u8>)>,
        cqe: [u8; 16],
        inval: Option<u32>,
        wr: TWrId,
    },
    /// The RC ACK of the target's response SEND (host -> target).
    TargetAck { wr: TWrId },
}

/// A QP pair between the host and the target over one path.
#[derive(Debug)]
pub struct Qp {
    pub path: usize,
    pub host_qpn: u32,
    pub target_qpn: u32,
    /// The target incarnation the QP was made with.
    pub target_inc: u32,
    /// The host's QP exists and is not in error.
    pub host_up: bool,
    /// The target's QP exists and is not in error.
    pub target_up: bool,
    /// The host's controller and connection the QP serves.
    pub ctrl: usize,
    pub conn: u64,
    /// Latest arrival scheduled per direction (to the target, to the host).
    last: [T; 2],
    /// Latest ACK arrival scheduled per sender (completions come in order).
    last_ack: [T; 2],
    /// A message of this direction failed: nothing after it is delivered.
    blocked: [bool; 2],
}

#[derive(Debug)]
pub enum Ev {
    Arrive {
        qp: usize,
        to: Side,
        msg: Msg,
        sent: T,
    },
    SenderFail {
        qp: usize,
        side: Side,
        owner: Owner,
    },
    IoDone {
        inc: u32,
        req: u32,
        op: IoOp,
    },
    TargetDisconnect {
        qp: usize,
    },
    HostDisconnect {
        qp: usize,
    },
    IoTimeoutCheck {
        ctrl: usize,
    },
    Crash,
    Restart,
    HostTimer {
        ctrl: usize,
    },
    CmDone {
        ctrl: usize,
        attempt: u32,
        ok: bool,
    },
    KeepAliveTimeout {
        ctrl: usize,
        conn: u64,
        seq: u64,
    },
    ConnectTimeout {
        ctrl: usize,
        conn: u64,
    },
    Workload,
    OpRetry {
        op: usize,
    },
}

/// The knobs of one seed.
#[derive(Clone, Debug)]
pub struct Plan {
    pub paths: usize,
    pub loss: f64,
    pub latency: (T, T),
    pub rto: T,
    pub retry_cnt: u32,
    /// Per path: down intervals [from, to) (to = T::MAX: the path died).
    pub down: Vec<Vec<(T, T)>>,
    /// Target crashes: (when, restart after; None: never back).
    pub crashes: Vec<(T, Option<T>)>,
    pub ops: usize,
    pub max_inflight: usize,
    pub in_capsule: bool,
    pub reconnect_delay: Duration,
    pub ctrl_loss_tmo: Duration,
    pub fast_io_fail_tmo: Option<Duration>,
    pub kato_ms: u32,
    pub io_latency: (T, T),
}

pub struct World {
    pub now: T,
    pub rng: StdRng,
    pub plan: Plan,
    events: BinaryHeap<Reverse<(T, u64, usize)>>,
    ev_store: HashMap<usize, Ev>,
    ev_seq: u64,
    pub qps: Vec<Qp>,
    next_qpn: u32,
    // Target.
    pub target: Option<Sim>,
    pub target_inc: u32,
    pub store: Store,
    /// Target QPN -> QP index.
    pub by_tqpn: HashMap<u32, usize>,
    /// Capsules waiting for a receive buffer (RNR retry).
    backlog: VecDeque<(usize, Vec<u8>, u64, T)>,
    /// io_uring operations in flight (an incarnation's).
    pub io_inflight: usize,
    // Host.
    pub ctrls: Vec<Ctrl>,
    pub ops: Vec<Op>,
    pub checker: Checker,
    pub trace: bool,
    // Workload.
    pub issued: usize,
    pub inflight: usize,
    pub next_id: u64,
    pub final_issued: bool,
}

impl World {
    pub fn new(plan: Plan, rng: StdRng, trace: bool) -> Self {
        let mut w = World {
            now: 0,
            rng,
            plan,
            events: BinaryHeap::new(),
            ev_store: HashMap::new(),
            ev_seq: 0,
            qps: Vec::new(),
            next_qpn: 0x100,
            target: None,
            target_inc: 0,
            store: Store::new(),
            by_tqpn: HashMap::new(),
            backlog: VecDeque::new(),
            io_inflight: 0,
            ctrls: Vec::new(),
            ops: Vec::new(),
            checker: Checker::default(),
            trace,
            issued: 0,
            inflight: 0,
            next_id: 1,
            final_issued: false,
        };
        w.start_target();
        for &(t, back) in &w.plan.crashes.clone() {
            w.schedule(t, Ev::Crash);
            if let Some(b) = back {
                w.schedule(t + b, Ev::Restart);
            }
        }
        w
    }

    pub fn note(&mut self, s: impl FnOnce() -> String) {
        if self.trace {
            let line = format!("{:>12} µs {}", self.now, s());
            eprintln!("{line}");
        }
    }

    pub fn schedule(&mut self, t: T, ev: Ev) {
        let id = self.ev_seq as usize;
        self.ev_seq += 1;
        self.ev_store.insert(id, ev);
        self.events
            .push(Reverse((t.max(self.now), self.ev_seq, id)));
    }

    /// The next event, time advanced to it.
    pub fn next_event(&mut self) -> Option<Ev> {
        let Reverse((t, _, id)) = self.events.pop()?;
        self.now = t;
        self.ev_store.remove(&id)
    }

    // ----- the network -------------------------------------------------------------

    pub fn link_up(&self, path: usize, t: T) -> bool {
        !self.plan.down[path].iter().any(|&(a, b)| t >= a && t < b)
    }

    fn latency(&mut self) -> T {
        let (a, b) = self.plan.latency;
        self.rng.gen_range(a..=b)
    }

    /// When a packet sent at `t` over `path` first gets through, within the retry
    /// budget (`None`: retry exceeded).
    fn attempts(&mut self, path: usize, t: T) -> Option<T> {
        let mut t = t;
        for _ in 0..=self.plan.retry_cnt {
            if self.link_up(path, t) && !self.rng.gen_bool(self.plan.loss) {
                return Some(t + self.latency());
            }
            t += self.plan.rto;
        }
        None
    }

    fn budget(&self) -> T {
        self.plan.rto * T::from(self.plan.retry_cnt + 1)
    }

    pub fn new_qp(&mut self, path: usize, ctrl: usize, conn: u64) -> usize {
        let host_qpn = self.next_qpn;
        let target_qpn = self.next_qpn + 1;
        self.next_qpn += 2;
        self.qps.push(Qp {
            path,
            host_qpn,
            target_qpn,
            target_inc: self.target_inc,
            host_up: true,
            target_up: true,
            ctrl,
            conn,
            last: [0; 2],
            last_ack: [0; 2],
            blocked: [false; 2],
        });
        let i = self.qps.len() - 1;
        self.by_tqpn.insert(target_qpn, i);
        i
    }

    /// Posts `msg` on QP `qp` from side `from` (owned by WR `owner`).
    pub fn send(&mut self, qp: usize, from: Side, msg: Msg, owner: Owner) {
        let dir = match from {
            Side::Host => 0,
            Side::Target => 1,
        };
        let to = match from {
            Side::Host => Side::Target,
            Side::Target => Side::Host,
        };
        if self.qps[qp].blocked[dir] {
            return;
        }
        let path = self.qps[qp].path;
        let now = self.now;
        match self.attempts(path, now) {
            Some(arrive) => {
                let arrive = arrive.max(self.qps[qp].last[dir]);
                self.qps[qp].last[dir] = arrive;
                self.schedule(
                    arrive,
                    Ev::Arrive {
                        qp,
                        to,
                        msg,
                        sent: now,
                    },
                );
            }
            None => {
                self.qps[qp].blocked[dir] = true;
                let t = now + self.budget();
                self.schedule(
                    t,
                    Ev::SenderFail {
                        qp,
                        side: from,
                        owner,
                    },
                );
            }
        }
    }

    /// The receiver's NIC ACKs what `sender` sent at `sent`: the ACK `msg` reaches
    /// the sender, or, when it cannot within the budget, the sender's WR fails.
    pub fn ack(&mut self, qp: usize, sender: Side, msg: Msg, owner: Owner, sent: T) {
        let path = self.qps[qp].path;
        let now = self.now;
        match self.attempts(path, now) {
            Some(t) if t <= sent + self.budget() + self.plan.rto => {
                let dir = if sender == Side::Host { 0 } else { 1 };
                let t = t.max(self.qps[qp].last_ack[dir]);
                self.qps[qp].last_ack[dir] = t;
                self.schedule(
                    t,
                    Ev::Arrive {
                        qp,
                        to: sender,
                        msg,
                        sent: now,
                    },
                );
            }
            _ => {
                // The sender retransmits, the duplicates are ACKed too, late or never:
                // the sender gives up.
                let dir = if sender == Side::Host { 0 } else { 1 };
                self.qps[qp].blocked[dir] = true;
                self.schedule(
                    (sent + self.budget()).max(now),
                    Ev::SenderFail {
                        qp,
                        side: sender,
                        owner,
                    },
                );
            }
        }
    }

    /// A message arrived at a QP that is gone: the sender retries into the void.
    pub fn lost_at_dest(&mut self, qp: usize, to: Side, owner: Owner, sent: T) {
        let side = match to {
            Side::Host => Side::Target,
            Side::Target => Side::Host,
        };
        let dir = if side == Side::Host { 0 } else { 1 };
        if self.qps[qp].blocked[dir] {
            return;
        }
        self.qps[qp].blocked[dir] = true;
        let t = (sent + self.budget()).max(self.now);
        self.schedule(t, Ev::SenderFail { qp, side, owner });
    }

    // ----- the target ----------------------------------------------------------------

    fn start_target(&mut self) {
        let ns = NamespaceEntry::new(1, backend(), 0, SUBNQN);
        let sub = Subsystem::new(SUBNQN.into(), "5157".to_string(), true, vec![], vec![ns]);
        let ip = |i: u8| std::net::IpAddr::V4(std::net::Ipv4Addr::new(192, 168, 50 + i, 1));
        let ports = (0..self.plan.paths)
            .map(|i| PortInfo::new(ip(i as u8), 4420))
            .collect();
        let reg = Registry::with_ports(vec![Arc::new(sub)], ports, Limits::default(), false);
        let cfg = SimConfig {
            srq_depth: 64,
            in_capsule_bytes: 4096,
            data_slab_bytes: 1 << 20,
            max_io_bytes: 64 << 10,
            io_slots: 128,
        };
        self.target_inc += 1;
        self.target = Some(Sim::new(cfg, reg).expect("simulated target"));
        self.backlog.clear();
        self.io_inflight = 0;
    }

    pub fn crash(&mut self) {
        self.note(|| "TARGET CRASH".into());
        self.target = None;
        for (qp, _, wr, sent) in std::mem::take(&mut self.backlog) {
            self.lost_at_dest(qp, Side::Target, Owner::Host(wr), sent);
        }
        self.checker.crashed(self.now);
        self.store.crash(&mut self.rng);
        for q in &mut self.qps {
            q.target_up = false;
        }
    }

    pub fn restart(&mut self) {
        self.note(|| "target restart".into());
        self.start_target();
    }

    pub fn target_alive(&self) -> bool {
        self.target.is_some()
    }

    /// The target accepts a new queue on QP `qp`.
    pub fn target_add_queue(&mut self, qp: usize, qid: u16, sq_size: u16) {
        let q = &self.qps[qp];
        let params = QueueParams {
            qid,
            sq_size,
            remote: std::net::IpAddr::V4(std::net::Ipv4Addr::new(10, 0, 0, 2)),
            remote_qpn: q.host_qpn,
            send_depth: 4 * u32::from(sq_size) + 16,
            ord: 16,
            port: q.path,
        };
        let tqpn = q.target_qpn;
        if let Some(t) = self.target.as_mut() {
            t.add_queue(tqpn, &params);
        }
    }

    pub fn target_capsule(&mut self, qp: usize, bytes: Vec<u8>, wr: u64, sent: T) {
        self.backlog.push_back((qp, bytes, wr, sent));
        self.drain_backlog();
        self.run_target();
    }

    fn drain_backlog(&mut self) {
        let now = at(self.now);
        loop {
            let Some(t) = self.target.as_mut() else {
                return;
            };
            if t.posted() == 0 {
                return;
            }
            let Some((qp, bytes, wr, sent)) = self.backlog.pop_front() else {
                return;
            };
            let tqpn = self.qps[qp].target_qpn;
            t.deliver(tqpn, &bytes, now);
            self.ack(
                qp,
                Side::Host,
                Msg::HostSendAck { wr },
                Owner::Host(wr),
                sent,
            );
        }
    }

    /// Carries out the target core's actions.
    pub fn run_target(&mut self) {
        loop {
            let Some(t) = self.target.as_mut() else {
                return;
            };
            let Some(a) = t.poll_action() else {
                break;
            };
            match a {
                TAction::RepostRecv { .. } => {}
                TAction::PostRdmaRead {
                    qpn,
                    wr_id,
                    local,
                    remote,
                } => {
                    let qp = self.by_tqpn[&qpn];
                    let msg = Msg::ReadReq {
                        remote,
                        local,
                        wr: wr_id,
                    };
                    self.send(qp, Side::Target, msg, Owner::Target(wr_id));
                }
                TAction::PostWriteAndSend {
                    qpn,
                    data,
                    remote,
                    response,
                    ..
                } => {
                    let bytes = t.core.bytes(data).to_vec();
                    let cqe = t.cqe(&response).to_array();
                    let qp = self.by_tqpn[&qpn];
                    let msg = Msg::Response {
                        write: Some((remote, bytes)),
                        cqe,
                        inval: response.invalidate_rkey,
                        wr: response.wr_id,
                    };
                    self.send(qp, Side::Target, msg, Owner::Target(response.wr_id));
                }
                TAction::PostSend { qpn, response } => {
                    let cqe = t.cqe(&response).to_array();
                    let qp = self.by_tqpn[&qpn];
                    let msg = Msg::Response {
                        write: None,
                        cqe,
                        inval: response.invalidate_rkey,
                        wr: response.wr_id,
                    };
                    self.send(qp, Side::Target, msg, Owner::Target(response.wr_id));
                }
                TAction::SubmitIo { req, op } => {
                    let (a, b) = self.plan.io_latency;
                    let d = self.rng.gen_range(a..=b);
                    let inc = self.target_inc;
                    self.io_inflight += 1;
                    self.schedule(self.now + d, Ev::IoDone { inc, req, op });
                }
                TAction::ReportQpError { qpn } | TAction::EndQueue { qpn, .. } => {
                    let why = if matches!(a, TAction::ReportQpError { .. }) {
                        QueueEnd::QpError
                    } else {
                        QueueEnd::HostDisconnected
                    };
                    t.core.remove_queue(qpn, why, at(self.now));
                    if let Some(&qp) = self.by_tqpn.get(&qpn) {
                        self.qps[qp].target_up = false;
                        self.note(|| format!("target: queue of QP {qp} over ({why:?}): DREQ"));
                        self.target_dreq(qp);
                    }
                }
            }
        }
        self.drain_backlog();
    }

    pub fn io_done(&mut self, inc: u32, req: u32, op: IoOp) {
        if inc != self.target_inc || self.target.is_none() {
            return;
        }
        self.io_inflight -= 1;
        let now = at(self.now);
        let t = self.target.as_mut().unwrap();
        let res = match op {
            IoOp::Read { buf, offset, .. } => {
                let o = offset as usize;
                let end = (o + buf.len as usize).min(self.store.cache.len());
                let data = self.store.cache[o.min(end)..end].to_vec();
                t.fill(buf, &data);
                buf.len as i32
            }
            IoOp::Write {
                buf, offset, dsync, ..
            } => {
                let data = t.core.bytes(buf).to_vec();
                self.store.write(offset as usize, &data, dsync);
                buf.len as i32
            }
            IoOp::Fsync { .. } => {
                self.store.fsync();
                0
            }
            IoOp::Fallocate { .. } => 0,
        };
        t.core.io_completed(req, res, now);
        self.run_target();
    }

    pub fn target_send_done(&mut self, qp: usize, wr: TWrId, status: WcStatus) {
        let q = &self.qps[qp];
        if q.target_inc != self.target_inc || !q.target_up {
            return;
        }
        let tqpn = q.target_qpn;
        if let Some(t) = self.target.as_mut() {
            t.core.send_completed(wr, tqpn, status, at(self.now));
        }
        self.run_target();
    }

    pub fn target_read_resp(&mut self, qp: usize, data: Vec<u8>, local: Buf, wr: TWrId) {
        let q = &self.qps[qp];
        if q.target_inc != self.target_inc || !q.target_up || self.target.is_none() {
            return;
        }
        let t = self.target.as_mut().unwrap();
        t.fill(local, &data);
        self.target_send_done(qp, wr, WcStatus::Success);
    }

    /// The host disconnected QP `qp` (CM DREQ arrived).
    pub fn target_disconnect(&mut self, qp: usize) {
        let q = &self.qps[qp];
        if q.target_inc != self.target_inc || !q.target_up {
            return;
        }
        let tqpn = q.target_qpn;
        self.qps[qp].target_up = false;
        if let Some(t) = self.target.as_mut() {
            t.core
                .remove_queue(tqpn, QueueEnd::HostDisconnected, at(self.now));
        }
        self.run_target();
    }

    /// The target disconnects QP `qp` (CM DREQ): it reaches the host when the path is
    /// up within the CM's retries (about 4 s), else never.
    fn target_dreq(&mut self, qp: usize) {
        let path = self.qps[qp].path;
        let mut t = self.now;
        while t < self.now + 4_000_000 {
            if self.link_up(path, t) {
                let lat = self.plan.latency.1;
                self.schedule(t + lat, Ev::HostDisconnect { qp });
                return;
            }
            t += 100_000;
        }
    }

    /// Whether the target end of `qp` can take a message now.
    pub fn target_end_up(&self, qp: usize) -> bool {
        let q = &self.qps[qp];
        self.target.is_some() && q.target_inc == self.target_inc && q.target_up
    }
}
