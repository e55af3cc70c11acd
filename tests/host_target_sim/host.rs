//! The host side of the simulated world: per path a controller, driven as the library
//! drives one ([`nvmf_initiator::keeper`]'s `AdminKeeper` and [`nvmf_initiator::host`]'s
//! queues) but on simulated time: the lifecycle state machine
//! ([`nvmf_initiator::lifecycle::Lifecycle`]) decides, an admin and an I/O
//! [`QueueCore`] carry the commands, held commands are reissued by the library's rule
//! ([`nvmf_initiator::lifecycle::may_reissue`]), and I/O that cannot wait fails with the
//! library's error ([`nvmf_initiator::lifecycle::unavailable_error`]). With two paths a
//! multipath layer above chooses and fails over as [`nvmf_initiator::multipath`] does
//! ([`policy::choose`], [`policy::classify`], `NO_PATH_POLL`, `no_path_timeout`), each
//! path's controller with `fast_io_fail_tmo` 0.
use std::collections::{HashMap, VecDeque};
use std::time::Duration;

use nvme::ana::AnaState;
use nvme::fabrics::ConnectData;
use nvme::properties::Property;
use nvme::{Cqe, Sqe};
use nvmf_initiator::lifecycle::{
    may_reissue, unavailable_error, Action as LcAction, CtrlState, IoDisposition, Lifecycle,
    ReconnectOptions, DEFAULT_IO_TIMEOUT,
};
use nvmf_initiator::multipath::policy::{self, Failure, PathPolicy, PathView};
use nvmf_initiator::multipath::{MultipathOptions, NO_PATH_POLL};
use nvmf_initiator::queue::core::{
    Action as QAction, BufSpan, MrSpan, QueueMemory, RemoteKeys, Submission,
};
use nvmf_initiator::queue::QueueCore;
use nvmf_initiator::{DataDir, HostError, QueueCompletion, QueueConfig, QueueError};
use rand::Rng;
use transport::verbs::{RecvWr, SgList, WcOpcode, WcStatus, WorkCompletion};
use zerocopy::IntoBytes;

use super::check::{BLOCK, T};
use super::world::{at, Ev, Msg, Owner, Side, World, HOSTNQN, SUBNQN};

pub const ADMIN_DEPTH: u16 = 16;
pub const IO_DEPTH: u16 = 16;
const ADMIN_BUF: usize = 4096;
pub const IO_BUF: usize = 8192;
const CM_TIMEOUT: T = 500_000;
const CONNECT_TIMEOUT: T = 1_000_000;
const HOSTID: [u8; 16] = [
    0x6b, 0x1c, 0x0f, 0x5e, 0x8d, 0x3a, 0x4c, 0x1e, 0x9f, 0x0b, 0x2a, 0x7d, 0x5e, 0x4c, 0x3b, 0x21,
];

/// What a user operation does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OpKind {
    Write {
        slba: u64,
        nblk: u64,
        fua: bool,
        id: u64,
    },
    Read {
        slba: u64,
        nblk: u64,
    },
    Flush,
}

/// One call of the user's.
#[derive(Debug)]
pub struct Op {
    pub kind: OpKind,
    pub issued: T,
    pub done: Option<T>,
    pub result: Option<Result<(), HostError>>,
    /// A read's data.
    pub data: Option<Vec<u8>>,
    /// Multipath: when a command with no usable path gives up.
    pub deadline: T,
    pub last_err: Option<HostError>,
    /// The path it is on now (multipath), if any.
    pub on_path: Option<usize>,
    #[allow(dead_code)]
    pub final_read: bool,
}

/// A command of a controller: a user operation, held or outstanding.
#[derive(Clone, Copy, Debug)]
pub struct Cmd {
    pub op: usize,
    pub retries: u8,
    /// When it was last posted.
    pub posted_at: T,
}

#[derive(Debug)]
enum AdminCmd {
    Connect,
    Enable,
    KeepAlive(u64),
}

#[derive(Debug)]
enum IoSlot {
    Connect,
    Cmd(Cmd),
}

#[derive(Debug, PartialEq, Eq)]
enum Stage {
    Connecting,
    Live,
}

/// One association with the target: admin and I/O queue, their memory.
#[derive(Debug)]
pub struct Conn {
    pub id: u64,
    base: u64,
    arena: Vec<u8>,
    rkey: u32,
    admin: QueueCore,
    io: QueueCore,
    pub admin_qp: usize,
    pub io_qp: usize,
    stage: Stage,
    cntlid: u16,
    admin_cids: HashMap<u16, AdminCmd>,
    io_cids: Vec<Option<IoSlot>>,
    recvs: [VecDeque<RecvWr>; 2],
    ka_pending: Option<u64>,
    ka_seq: u64,
    attempt: u32,
    step_failed: Option<String>,
}

/// The next step of the connect sequence.
#[derive(Clone, Copy, Debug)]
enum Next {
    Enable,
    IoConnect,
}

const OFF_SQE_A: usize = 0;
const OFF_RSP_A: usize = OFF_SQE_A + ADMIN_DEPTH as usize * 64;
const OFF_SQE_I: usize = OFF_RSP_A + ADMIN_DEPTH as usize * 64;
const OFF_RSP_I: usize = OFF_SQE_I + IO_DEPTH as usize * 64;
const OFF_DATA_A: usize = OFF_RSP_I + IO_DEPTH as usize * 64;
const OFF_DATA_I: usize = OFF_DATA_A + ADMIN_DEPTH as usize * ADMIN_BUF;
const ARENA: usize = OFF_DATA_I + IO_DEPTH as usize * IO_BUF;

/// One path's controller.
#[derive(Debug)]
pub struct Ctrl {
    pub path: usize,
    pub lc: Lifecycle,
    pub conn: Option<Conn>,
    pub pending: VecDeque<Cmd>,
    /// Held commands are reissued (`ctrl_loss_tmo` is not 0).
    recovers: bool,
    /// The reason the controller was given up (Delete), as the health records it.
    dead_reason: Option<String>,
    timer: Option<T>,
    pub reissued: u64,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Q {
    Admin,
    Io,
}

fn qidx(q: Q) -> usize {
    match q {
        Q::Admin => 0,
        Q::Io => 1,
    }
}

impl World {
    pub fn add_ctrls(&mut self) {
        for path in 0..self.plan.paths {
            let opts = ReconnectOptions {
                reconnect_delay: self.plan.reconnect_delay,
                ctrl_loss_tmo: Some(self.plan.ctrl_loss_tmo),
                fast_io_fail_tmo: if self.plan.paths > 1 {
                    Some(Duration::ZERO)
                } else {
                    self.plan.fast_io_fail_tmo
                },
                kato_ms: self.plan.kato_ms,
            };
            self.ctrls.push(Ctrl {
                path,
                lc: Lifecycle::new(opts),
                conn: None,
                pending: VecDeque::new(),
                recovers: true,
                dead_reason: None,
                timer: None,
                reissued: 0,
            });
            self.cm_connect(path, 0);
            self.schedule(1_000_000, Ev::IoTimeoutCheck { ctrl: path });
        }
    }

    fn cm_connect(&mut self, c: usize, attempt: u32) {
        let path = self.ctrls[c].path;
        let ok = self.link_up(path, self.now) && self.target_alive();
        let t = if ok {
            self.now + 4 * self.plan.latency.1
        } else {
            self.now + CM_TIMEOUT
        };
        self.note(|| format!("ctrl {c}: CM connect attempt {attempt} (ok {ok})"));
        self.schedule(
            t,
            Ev::CmDone {
                ctrl: c,
                attempt,
                ok,
            },
        );
    }

    pub fn cm_done(&mut self, c: usize, attempt: u32, ok: bool) {
        let path = self.ctrls[c].path;
        let st = self.ctrls[c].lc.state();
        if !matches!(st, CtrlState::New | CtrlState::Connecting) {
            return;
        }
        if !ok || !self.link_up(path, self.now) || !self.target_alive() {
            self.attempt_failed(c, "RDMA CM: no answer from the target".into());
            return;
        }
        let id = self.ev_id();
        let admin_qp = self.new_qp(path, c, id);
        let io_qp = self.new_qp(path, c, id);
        self.target_add_queue(admin_qp, 0, ADMIN_DEPTH);
        self.target_add_queue(io_qp, 1, IO_DEPTH);
        let base = id << 32;
        let rkey = 0x1000 + id as u32;
        let span = |off: usize| MrSpan {
            addr: base + off as u64,
            lkey: 1,
        };
        let target: std::net::SocketAddr = "192.168.50.1:4420".parse().unwrap();
        let mut acfg = QueueConfig::new(0, ADMIN_DEPTH, ADMIN_BUF, target);
        acfg.in_capsule_bytes = 0;
        let mut icfg = QueueConfig::new(1, IO_DEPTH, IO_BUF, target);
        icfg.in_capsule_bytes = if self.plan.in_capsule { 4096 } else { 0 };
        let admin = QueueCore::new(
            &acfg,
            QueueMemory {
                sqe: span(OFF_SQE_A),
                rsp: span(OFF_RSP_A),
            },
            RemoteKeys::Region { rkey },
        )
        .unwrap();
        let io = QueueCore::new(
            &icfg,
            QueueMemory {
                sqe: span(OFF_SQE_I),
                rsp: span(OFF_RSP_I),
            },
            RemoteKeys::Region { rkey },
        )
        .unwrap();
        let recvs = [
            (0..ADMIN_DEPTH).map(|i| admin.receive_wr(i)).collect(),
            (0..IO_DEPTH).map(|i| io.receive_wr(i)).collect(),
        ];
        self.ctrls[c].conn = Some(Conn {
            id,
            base,
            arena: vec![0; ARENA],
            rkey,
            admin,
            io,
            admin_qp,
            io_qp,
            stage: Stage::Connecting,
            cntlid: 0xFFFF,
            admin_cids: HashMap::new(),
            io_cids: (0..IO_DEPTH).map(|_| None).collect(),
            recvs,
            ka_pending: None,
            ka_seq: 0,
            attempt,
            step_failed: None,
        });
        self.schedule(
            self.now + CONNECT_TIMEOUT,
            Ev::ConnectTimeout { ctrl: c, conn: id },
        );
        let sqe = Sqe::connect(0, 0, ADMIN_DEPTH - 1, self.plan.kato_ms);
        if let Err(e) = self.submit_connect(c, Q::Admin, sqe, 0xFFFF) {
            self.attempt_failed(c, e);
        }
    }

    /// A fresh id (connections, QP owners).
    fn ev_id(&mut self) -> u64 {
        self.qps.len() as u64 + 1
    }

    fn submit_connect(&mut self, c: usize, q: Q, sqe: Sqe, cntlid: u16) -> Result<(), String> {
        let conn = self.ctrls[c].conn.as_mut().unwrap();
        let core = match q {
            Q::Admin => &mut conn.admin,
            Q::Io => &mut conn.io,
        };
        let cid = core.next_free_slot().map_err(|e| e.to_string())?;
        let off = match q {
            Q::Admin => OFF_DATA_A + usize::from(cid) * ADMIN_BUF,
            Q::Io => OFF_DATA_I + usize::from(cid) * IO_BUF,
        };
        let data = ConnectData::new(HOSTID, cntlid, SUBNQN, HOSTNQN).unwrap();
        let bytes = data.as_bytes();
        conn.arena[off..off + bytes.len()].copy_from_slice(bytes);
        let buf = BufSpan {
            addr: conn.base + off as u64,
            len: bytes.len(),
            lkey: 1,
        };
        let s = core
            .submit(
                sqe,
                DataDir::HostToController { len: bytes.len() },
                Some(buf),
            )
            .map_err(|e| e.to_string())?;
        let cid = self.post(c, q, s);
        let conn = self.ctrls[c].conn.as_mut().unwrap();
        match q {
            Q::Admin => {
                conn.admin_cids.insert(cid, AdminCmd::Connect);
            }
            Q::Io => conn.io_cids[usize::from(cid)] = Some(IoSlot::Connect),
        }
        Ok(())
    }

    /// Posts submission `s` of queue `q`: its SQE into the slot's buffer, the capsule
    /// SEND gathered from host memory onto the wire.
    fn post(&mut self, c: usize, q: Q, s: Submission) -> u16 {
        let conn = self.ctrls[c].conn.as_mut().unwrap();
        let base = conn.base;
        let core = match q {
            Q::Admin => &mut conn.admin,
            Q::Io => &mut conn.io,
        };
        assert!(s.bind().is_none(), "region keys: no binds");
        let sqe_off = (core.memory().sqe.addr - base) as usize + s.sqe_offset();
        conn.arena[sqe_off..sqe_off + s.sqe_bytes().len()].copy_from_slice(s.sqe_bytes());
        let bytes = gather(&conn.arena, base, &s.send().sg_list);
        let wr = s.send().wr_id;
        let cid = core.submitted(s, Ok(())).expect("posted");
        let qp = match q {
            Q::Admin => conn.admin_qp,
            Q::Io => conn.io_qp,
        };
        self.send(qp, Side::Host, Msg::Capsule { bytes, wr }, Owner::Host(wr));
        cid
    }

    fn attempt_failed(&mut self, c: usize, reason: String) {
        self.note(|| format!("ctrl {c}: attempt failed: {reason}"));
        self.drop_conn(c);
        let now = at(self.now);
        match self.ctrls[c].lc.state() {
            CtrlState::New => panic!("the first connect failed: {reason}"),
            CtrlState::Connecting => {
                let _ = self.ctrls[c].lc.connect_failed(now, reason);
            }
            _ => {}
        }
        self.run_lc(c);
    }

    /// Destroys the connection's QPs (a DREQ goes to the target where it can get
    /// there) and returns the commands that were on it.
    fn drop_conn(&mut self, c: usize) -> Option<Conn> {
        let conn = self.ctrls[c].conn.take()?;
        for qp in [conn.admin_qp, conn.io_qp] {
            self.qps[qp].host_up = false;
            let path = self.qps[qp].path;
            if self.link_up(path, self.now) && self.target_end_up(qp) {
                let t = self.now + self.plan.latency.1;
                self.schedule(t, Ev::TargetDisconnect { qp });
            }
        }
        Some(conn)
    }

    // ----- the lifecycle's actions --------------------------------------------------

    pub fn run_lc(&mut self, c: usize) {
        while let Some(a) = self.ctrls[c].lc.poll_action() {
            let st = self.ctrls[c].lc.state();
            self.note(|| format!("ctrl {c}: {a:?} (state {st})"));
            match a {
                LcAction::TearDown { .. } => {
                    let reason = self.ctrls[c].lc.reason().unwrap_or("lost").to_string();
                    self.tear_down(c, &reason);
                    let _ = self.ctrls[c].lc.torn_down(at(self.now));
                }
                LcAction::Reconnect { attempt } => self.cm_connect(c, attempt),
                LcAction::SendKeepAlive => self.send_keep_alive(c),
                LcAction::FailHeldIo => {
                    let reason = self.ctrls[c].lc.reason().unwrap_or("lost").to_string();
                    self.fail_held(c, HostError::FailFast(reason));
                }
                LcAction::Delete => {
                    let reason = format!(
                        "not reconnected within ctrl_loss_tmo ({} s) after {} attempts; {}",
                        self.plan.ctrl_loss_tmo.as_secs_f64(),
                        self.ctrls[c].lc.attempts(),
                        self.ctrls[c].lc.reason().unwrap_or("lost")
                    );
                    self.ctrls[c].dead_reason = Some(reason.clone());
                    self.tear_down(c, &reason);
                    self.fail_held(c, HostError::ControllerDead(reason));
                    let _ = self.ctrls[c].lc.deleted();
                }
            }
        }
        self.arm(c);
        self.drive(c);
    }

    fn arm(&mut self, c: usize) {
        let Some(t) = self.ctrls[c].lc.poll_timeout() else {
            return;
        };
        let t = t.saturating_duration_since(at(0)).as_micros() as T;
        if self.ctrls[c].timer.is_some_and(|x| x <= t && x >= self.now) {
            return;
        }
        self.ctrls[c].timer = Some(t);
        self.schedule(t, Ev::HostTimer { ctrl: c });
    }

    pub fn host_timer(&mut self, c: usize) {
        if self.ctrls[c].timer.is_some_and(|t| t <= self.now) {
            self.ctrls[c].timer = None;
        }
        self.ctrls[c].lc.handle_timeout(at(self.now));
        self.run_lc(c);
    }

    /// The queues go: outstanding commands come back for reissue (held) where the
    /// rule allows, the others fail.
    fn tear_down(&mut self, c: usize, reason: &str) {
        let Some(mut conn) = self.drop_conn(c) else {
            return;
        };
        let mut out = Vec::new();
        conn.io
            .cancel_all(HostError::Reconnecting(reason.to_string()), &mut out);
        self.dispatch(c, &mut conn, out, true);
        for s in conn.io_cids.iter_mut() {
            if let Some(IoSlot::Cmd(cmd)) = s.take() {
                self.ctrl_finish(c, cmd.op, Err(HostError::Reconnecting(reason.to_string())));
            }
        }
    }

    fn fail_held(&mut self, c: usize, e: HostError) {
        for cmd in std::mem::take(&mut self.ctrls[c].pending) {
            self.ctrl_finish(c, cmd.op, Err(e.clone()));
        }
    }

    /// The library's `io_timeout` check: a command outstanding `io_timeout` is
    /// aborted (our target never aborts: the Abort itself is not simulated), and once
    /// it is outstanding another `io_timeout` the controller is reset.
    pub fn io_timeout_check(&mut self, c: usize) {
        let limit = 2 * DEFAULT_IO_TIMEOUT.as_micros() as T;
        let now = self.now;
        let late = self.ctrls[c].conn.as_ref().and_then(|k| {
            k.io_cids.iter().enumerate().find_map(|(cid, s)| match s {
                Some(IoSlot::Cmd(cmd)) if now >= cmd.posted_at + limit => Some(cid),
                _ => None,
            })
        });
        if let Some(cid) = late {
            let reason = format!(
                "I/O command (CID {cid}) on queue 1 was aborted after io_timeout but did not complete"
            );
            self.note(|| format!("ctrl {c}: {reason}"));
            self.ctrls[c].lc.reset(at(now), reason);
            self.run_lc(c);
        }
        self.schedule(now + 1_000_000, Ev::IoTimeoutCheck { ctrl: c });
    }

    fn send_keep_alive(&mut self, c: usize) {
        let kato = T::from(self.plan.kato_ms) * 1000;
        let Some(conn) = self.ctrls[c]
            .conn
            .as_mut()
            .filter(|k| k.stage == Stage::Live)
        else {
            self.ctrls[c]
                .lc
                .keep_alive_done(at(self.now), Err::<(), _>("no admin queue"));
            return;
        };
        let r = conn.admin.submit(Sqe::keep_alive(0), DataDir::None, None);
        match r {
            Ok(s) => {
                conn.ka_seq += 1;
                let seq = conn.ka_seq;
                conn.ka_pending = Some(seq);
                let id = conn.id;
                let cid = self.post(c, Q::Admin, s);
                let conn = self.ctrls[c].conn.as_mut().unwrap();
                conn.admin_cids.insert(cid, AdminCmd::KeepAlive(seq));
                self.schedule(
                    self.now + kato,
                    Ev::KeepAliveTimeout {
                        ctrl: c,
                        conn: id,
                        seq,
                    },
                );
            }
            Err(e) => self.ctrls[c].lc.keep_alive_done(at(self.now), Err(e)),
        }
    }

    pub fn keep_alive_timeout(&mut self, c: usize, conn: u64, seq: u64) {
        let Some(k) = self.ctrls[c].conn.as_mut() else {
            return;
        };
        if k.id != conn || k.ka_pending != Some(seq) {
            return;
        }
        k.ka_pending = None;
        self.ctrls[c].lc.keep_alive_done(
            at(self.now),
            Err::<(), _>("Keep Alive took longer than KATO"),
        );
        self.run_lc(c);
    }

    pub fn connect_timeout(&mut self, c: usize, conn: u64) {
        if self.ctrls[c]
            .conn
            .as_ref()
            .is_some_and(|k| k.id == conn && k.stage == Stage::Connecting)
        {
            self.attempt_failed(c, "connect timed out".into());
        }
    }

    // ----- I/O -------------------------------------------------------------------------

    /// Starts command `cmd` on controller `c` (the library's `IoQueue::start`).
    pub fn ctrl_start(&mut self, c: usize, op: usize) {
        let ctrl = &self.ctrls[c];
        let disp = ctrl.lc.io_disposition();
        let unavailable = || {
            unavailable_error(
                ctrl.lc.state(),
                ctrl.dead_reason
                    .clone()
                    .or_else(|| ctrl.lc.reason().map(String::from)),
            )
        };
        if disp == IoDisposition::Fail
            || (ctrl.conn.as_ref().is_none_or(|k| k.stage != Stage::Live)
                && disp != IoDisposition::Hold)
        {
            let e = unavailable();
            self.ctrl_finish(c, op, Err(e));
            return;
        }
        self.ctrls[c].pending.push_back(Cmd {
            op,
            retries: 0,
            posted_at: 0,
        });
        self.drive(c);
    }

    /// Posts what is pending while the controller is live (the library's `drive`).
    fn drive(&mut self, c: usize) {
        loop {
            if self.ctrls[c].lc.io_disposition() != IoDisposition::Submit {
                return;
            }
            let Some(conn) = self.ctrls[c].conn.as_mut() else {
                return;
            };
            if conn.stage != Stage::Live {
                return;
            }
            let Some(cmd) = self.ctrls[c].pending.pop_front() else {
                return;
            };
            let conn = self.ctrls[c].conn.as_mut().unwrap();
            let cid = match conn.io.next_free_slot() {
                Ok(cid) => cid,
                Err(QueueError::Full) => {
                    self.ctrls[c].pending.push_front(cmd);
                    return;
                }
                Err(e @ QueueError::Dead { .. }) => {
                    // Held for the new queue.
                    self.ctrls[c].pending.push_front(cmd);
                    self.ctrls[c]
                        .lc
                        .error(at(self.now), format!("queue 1: {e}"));
                    self.run_lc(c);
                    return;
                }
                Err(e) => panic!("unexpected {e}"),
            };
            let off = OFF_DATA_I + usize::from(cid) * IO_BUF;
            let buf_addr = conn.base + off as u64;
            let kind = self.ops[cmd.op].kind;
            let (sqe, data) = match kind {
                OpKind::Write {
                    slba,
                    nblk,
                    fua,
                    id,
                } => {
                    for i in 0..nblk {
                        let b = super::check::stamp(id, slba + i);
                        let o = off + i as usize * BLOCK;
                        conn.arena[o..o + BLOCK].copy_from_slice(&b);
                    }
                    (
                        Sqe::write(0, 1, slba, (nblk - 1) as u16, fua),
                        DataDir::HostToController {
                            len: nblk as usize * BLOCK,
                        },
                    )
                }
                OpKind::Read { slba, nblk } => (
                    Sqe::read(0, 1, slba, (nblk - 1) as u16, false),
                    DataDir::ControllerToHost {
                        len: nblk as usize * BLOCK,
                    },
                ),
                OpKind::Flush => (Sqe::flush(0, 1), DataDir::None),
            };
            let buf = (!data.is_empty()).then_some(BufSpan {
                addr: buf_addr,
                len: IO_BUF,
                lkey: 1,
            });
            let s = match conn.io.submit(sqe, data, buf) {
                Ok(s) => s,
                Err(e) => panic!("submit after next_free_slot: {e}"),
            };
            assert_eq!(s.cid(), cid, "the slot next_free_slot named");
            let cid = self.post(c, Q::Io, s);
            let conn = self.ctrls[c].conn.as_mut().unwrap();
            let slot = &mut conn.io_cids[usize::from(cid)];
            assert!(slot.is_none(), "CID {cid} taken while outstanding");
            *slot = Some(IoSlot::Cmd(Cmd {
                posted_at: self.now,
                ..cmd
            }));
        }
    }

    /// The library's `dispatch`: completions to their commands, path errors held for
    /// reissue where the rule allows.
    fn dispatch(&mut self, c: usize, conn: &mut Conn, out: Vec<QueueCompletion>, path_error: bool) {
        let disposition = self.ctrls[c].lc.io_disposition();
        let recovers = self.ctrls[c].recovers;
        for qc in out {
            let slot = conn
                .io_cids
                .get_mut(usize::from(qc.cid))
                .and_then(Option::take);
            let cmd = match slot {
                Some(IoSlot::Cmd(cmd)) => cmd,
                Some(IoSlot::Connect) => {
                    self.io_connect_done(c, conn, qc.result);
                    continue;
                }
                None => panic!(
                    "controller {c}: CID {} completed with no command outstanding on it \
                     (completed twice?)",
                    qc.cid
                ),
            };
            if may_reissue(
                &qc.result,
                path_error,
                recovers,
                disposition,
                true,
                cmd.retries,
            ) {
                self.ctrls[c].reissued += 1;
                let op = cmd.op;
                self.note(|| format!("ctrl {c}: op {op} held for reissue"));
                self.ctrls[c].pending.push_front(Cmd {
                    op: cmd.op,
                    retries: cmd.retries + 1,
                    posted_at: 0,
                });
                continue;
            }
            let r = qc.result.map(|_| ());
            if r.is_ok() {
                if let OpKind::Read { nblk, .. } = self.ops[cmd.op].kind {
                    let off = OFF_DATA_I + usize::from(qc.cid) * IO_BUF;
                    self.ops[cmd.op].data =
                        Some(conn.arena[off..off + nblk as usize * BLOCK].to_vec());
                }
            }
            self.ctrl_finish(c, cmd.op, r);
        }
    }

    fn io_connect_done(&mut self, c: usize, conn: &mut Conn, r: Result<Cqe, HostError>) {
        match r {
            Ok(_) => {
                conn.stage = Stage::Live;
                let attempt = conn.attempt;
                self.note(|| format!("ctrl {c}: live (attempt {attempt})"));
                self.ctrls[c]
                    .lc
                    .connected(at(self.now))
                    .expect("connected from NEW or CONNECTING");
            }
            Err(e) => conn.step_failed = Some(format!("I/O queue connect: {e}")),
        }
    }

    // ----- work completions ----------------------------------------------------------

    /// Which queue of controller `c`'s connection QP `qp` is, if it is current.
    fn queue_of(&self, qp: usize) -> Option<(usize, Q)> {
        let c = self.qps[qp].ctrl;
        let conn = self.ctrls[c].conn.as_ref()?;
        if conn.id != self.qps[qp].conn || !self.qps[qp].host_up {
            return None;
        }
        Some((c, if conn.admin_qp == qp { Q::Admin } else { Q::Io }))
    }

    /// A work completion for queue `q` of controller `c`.
    fn host_wc(&mut self, c: usize, q: Q, wc: WorkCompletion, rsp: Option<[u8; 16]>) {
        let mut conn = self.ctrls[c].conn.take().unwrap();
        let mut out = Vec::new();
        {
            let core = match q {
                Q::Admin => &mut conn.admin,
                Q::Io => &mut conn.io,
            };
            core.handle_wc(&wc, rsp, &mut out);
            let mut failed = None;
            while let Some(a) = core.poll_action() {
                match a {
                    QAction::PostRecv(r) => conn.recvs[qidx(q)].push_back(r),
                    QAction::PostSend(wr) => failed = Some(wr.wr_id),
                }
            }
            if let Some(wr) = failed {
                // A Local Invalidate: not with region keys.
                panic!("unexpected Local Invalidate {wr:#x}");
            }
        }
        let dead = match q {
            Q::Admin => conn.admin.dead_reason().map(String::from),
            Q::Io => conn.io.dead_reason().map(String::from),
        };
        let next = match q {
            Q::Io => {
                self.dispatch(c, &mut conn, out, dead.is_some());
                None
            }
            Q::Admin => self.admin_done(c, &mut conn, out),
        };
        let connecting = conn.stage == Stage::Connecting;
        let step_failed = conn.step_failed.take();
        self.ctrls[c].conn = Some(conn);
        if connecting {
            if let Some(why) = dead.clone().or(step_failed) {
                self.attempt_failed(c, why);
                return;
            }
            if let Some(n) = next {
                if let Err(e) = self.connect_step(c, n) {
                    self.attempt_failed(c, e);
                    return;
                }
            }
        }
        if let Some(reason) = dead {
            if self.ctrls[c].lc.error(at(self.now), reason) {
                self.note(|| format!("ctrl {c}: lost"));
            }
        }
        self.run_lc(c);
    }

    /// Admin completions; returns the connect step to take next, if any.
    fn admin_done(&mut self, c: usize, conn: &mut Conn, out: Vec<QueueCompletion>) -> Option<Next> {
        let mut next = None;
        for qc in out {
            let Some(what) = conn.admin_cids.remove(&qc.cid) else {
                panic!("controller {c}: admin CID {} completed twice", qc.cid);
            };
            match (what, qc.result) {
                (AdminCmd::Connect, Ok(cqe)) => {
                    conn.cntlid = cqe.dw0() as u16;
                    next = Some(Next::Enable);
                }
                (AdminCmd::Enable, Ok(_)) => next = Some(Next::IoConnect),
                (AdminCmd::KeepAlive(seq), r) => {
                    if conn.ka_pending == Some(seq) {
                        conn.ka_pending = None;
                        self.ctrls[c]
                            .lc
                            .keep_alive_done(at(self.now), r.map(|_| ()));
                    }
                }
                (AdminCmd::Connect | AdminCmd::Enable, Err(e)) => {
                    conn.step_failed = Some(format!("admin connect step: {e}"));
                }
            }
        }
        next
    }

    fn connect_step(&mut self, c: usize, next: Next) -> Result<(), String> {
        match next {
            Next::Enable => {
                let conn = self.ctrls[c].conn.as_mut().unwrap();
                let s = conn
                    .admin
                    .submit(
                        Sqe::property_set(0, Property::Cc, 0x0046_0001),
                        DataDir::None,
                        None,
                    )
                    .map_err(|e| e.to_string())?;
                let cid = self.post(c, Q::Admin, s);
                let conn = self.ctrls[c].conn.as_mut().unwrap();
                conn.admin_cids.insert(cid, AdminCmd::Enable);
                Ok(())
            }
            Next::IoConnect => {
                let cntlid = self.ctrls[c].conn.as_ref().unwrap().cntlid;
                self.submit_connect(c, Q::Io, Sqe::connect(0, 1, IO_DEPTH - 1, 0), cntlid)
            }
        }
    }

    /// A message arrived at the host end of `qp`.
    pub fn host_arrive(&mut self, qp: usize, msg: Msg, sent: T) {
        let Some((c, q)) = self.queue_of(qp) else {
            let owner = match &msg {
                Msg::ReadReq { wr, .. } | Msg::Response { wr, .. } => Owner::Target(*wr),
                _ => Owner::None,
            };
            if !matches!(owner, Owner::None) {
                self.lost_at_dest(qp, Side::Host, owner, sent);
            }
            return;
        };
        let qpn = self.qps[qp].host_qpn;
        match msg {
            Msg::HostSendAck { wr } => {
                let wc = WorkCompletion::new(wr, WcStatus::Success, WcOpcode::Send, qpn);
                self.host_wc(c, q, wc, None);
            }
            Msg::ReadReq { remote, local, wr } => {
                let conn = self.ctrls[c].conn.as_ref().unwrap();
                let data = host_bytes(conn, remote.addr, remote.rkey, local.len as usize)
                    .unwrap_or_else(|e| panic!("target RDMA READ: {e}"));
                self.send(
                    qp,
                    Side::Host,
                    Msg::ReadResp { data, local, wr },
                    Owner::Target(wr),
                );
            }
            Msg::Response {
                write,
                cqe,
                inval,
                wr,
            } => {
                let conn = self.ctrls[c].conn.as_mut().unwrap();
                if let Some((remote, data)) = write {
                    let o = host_offset(conn, remote.addr, remote.rkey, data.len())
                        .unwrap_or_else(|e| panic!("target RDMA WRITE: {e}"));
                    conn.arena[o..o + data.len()].copy_from_slice(&data);
                }
                let Some(recv) = conn.recvs[qidx(q)].pop_front() else {
                    panic!("controller {c}: a response found no receive posted (RNR)");
                };
                let sge = recv.sg_list.as_slice()[0];
                let o = (sge.addr - conn.base) as usize;
                conn.arena[o..o + 16].copy_from_slice(&cqe);
                let mut wc =
                    WorkCompletion::new(recv.wr_id, WcStatus::Success, WcOpcode::Recv, qpn);
                wc.byte_len = 16;
                wc.invalidated_rkey = inval;
                let core = match q {
                    Q::Admin => &conn.admin,
                    Q::Io => &conn.io,
                };
                let rsp = core.response_index(&wc).map(|_| cqe);
                self.ack(
                    qp,
                    Side::Target,
                    Msg::TargetAck { wr },
                    Owner::Target(wr),
                    sent,
                );
                self.host_wc(c, q, wc, rsp);
            }
            other => panic!("host got {other:?}"),
        }
    }

    /// The target's DREQ for `qp` arrived (RDMA_CM_EVENT_DISCONNECTED).
    pub fn host_disconnected(&mut self, qp: usize) {
        let Some((c, q)) = self.queue_of(qp) else {
            return;
        };
        self.note(|| format!("ctrl {c}: {q:?} queue: the target disconnected"));
        let mut conn = self.ctrls[c].conn.take().unwrap();
        let mut out = Vec::new();
        let core = match q {
            Q::Admin => &mut conn.admin,
            Q::Io => &mut conn.io,
        };
        core.on_peer_disconnected();
        core.fail_if_peer_gone(&mut out);
        let reason = core.dead_reason().unwrap_or("disconnected").to_string();
        match q {
            Q::Io => self.dispatch(c, &mut conn, out, true),
            Q::Admin => {
                let _ = self.admin_done(c, &mut conn, out);
            }
        }
        let connecting = conn.stage == Stage::Connecting;
        self.ctrls[c].conn = Some(conn);
        if connecting {
            self.attempt_failed(c, reason);
            return;
        }
        self.ctrls[c].lc.error(at(self.now), reason);
        self.run_lc(c);
    }

    /// The host's WR `wr` on `qp` failed: retry exceeded.
    pub fn host_send_failed(&mut self, qp: usize, wr: u64) {
        let Some((c, q)) = self.queue_of(qp) else {
            return;
        };
        let qpn = self.qps[qp].host_qpn;
        let wc = WorkCompletion::new(wr, WcStatus::RetryExcErr, WcOpcode::Send, qpn);
        self.note(|| format!("ctrl {c}: {q:?} queue: retry exceeded"));
        self.host_wc(c, q, wc, None);
    }

    // ----- the user and multipath ----------------------------------------------------

    /// The user calls: single path straight to the controller, else the multipath layer.
    pub fn start_op(&mut self, op: usize) {
        if self.plan.paths == 1 {
            self.ctrl_start(0, op);
        } else {
            self.mp_try(op);
        }
    }

    fn views(&self) -> Vec<PathView> {
        self.ctrls
            .iter()
            .map(|k| PathView {
                live: k.lc.state() == CtrlState::Live,
                ana: AnaState::Optimized,
                outstanding: 0,
            })
            .collect()
    }

    /// The multipath layer's `run`, one step: pick a path or wait for one.
    pub fn mp_try(&mut self, op: usize) {
        if self.ops[op].done.is_some() {
            return;
        }
        let turn = self.rng.gen::<u16>() as usize;
        match policy::choose(&self.views(), PathPolicy::RoundRobin, turn) {
            Some(k) => {
                self.ops[op].on_path = Some(k);
                self.ctrl_start(k, op);
            }
            None => {
                if self.now >= self.ops[op].deadline {
                    let last = self.ops[op].last_err.take();
                    let e = HostError::FailFast(format!(
                        "no usable path within {} ms{}",
                        MultipathOptions::default().no_path_timeout.as_millis(),
                        last.map(|e| format!(" (last error: {e})"))
                            .unwrap_or_default()
                    ));
                    self.finish(op, Err(e));
                } else {
                    let t = self.now + NO_PATH_POLL.as_micros() as T;
                    self.schedule(t, Ev::OpRetry { op });
                }
            }
        }
    }

    /// Controller `c` finished `op` with `r`: to the user, or the multipath layer
    /// fails it over.
    fn ctrl_finish(&mut self, c: usize, op: usize, r: Result<(), HostError>) {
        if self.plan.paths == 1 {
            self.finish(op, r);
            return;
        }
        let e = match r {
            Ok(()) => return self.finish(op, Ok(())),
            Err(e) => e,
        };
        match policy::classify(&e) {
            Failure::Command => self.finish(op, Err(e)),
            Failure::Ana(_) | Failure::Path => {
                self.note(|| format!("op {op}: {e} on path {c}; trying another path"));
                self.ops[op].on_path = None;
                if self.now >= self.ops[op].deadline {
                    return self.finish(op, Err(e));
                }
                self.ops[op].last_err = Some(e);
                let wait = if self.ctrls[c].lc.state() == CtrlState::Live {
                    NO_PATH_POLL.as_micros() as T
                } else {
                    0
                };
                self.schedule(self.now + wait, Ev::OpRetry { op });
            }
        }
    }

    /// The user hears `op`'s outcome: exactly once.
    pub fn finish(&mut self, op: usize, r: Result<(), HostError>) {
        let o = &mut self.ops[op];
        assert!(
            o.done.is_none(),
            "op {op} ({:?}) completed twice: {:?} then {r:?}",
            o.kind,
            o.result
        );
        o.done = Some(self.now);
        let ok = r.is_ok();
        let kind = o.kind;
        let issued = o.issued;
        o.result = Some(r);
        let now = self.now;
        self.note(|| format!("op {op} {kind:?} done ok={ok}"));
        match kind {
            OpKind::Write { id, .. } => self.checker.write_ended(id, ok, now),
            OpKind::Flush if ok => self.checker.flush_acked(issued, now),
            _ => {}
        }
        self.op_finished(op);
    }
}

fn gather(arena: &[u8], base: u64, sg: &SgList) -> Vec<u8> {
    let mut v = Vec::new();
    for s in sg.as_slice() {
        let o = (s.addr - base) as usize;
        v.extend_from_slice(&arena[o..o + s.length as usize]);
    }
    v
}

fn host_offset(conn: &Conn, addr: u64, rkey: u32, len: usize) -> Result<usize, String> {
    if rkey != conn.rkey {
        return Err(format!("rkey {rkey:#x}, the region's is {:#x}", conn.rkey));
    }
    let o = addr
        .checked_sub(conn.base)
        .ok_or_else(|| format!("address {addr:#x} below the region"))? as usize;
    if o < OFF_DATA_A || o + len > ARENA {
        return Err(format!(
            "{len} bytes at {addr:#x}: outside the data buffers"
        ));
    }
    Ok(o)
}

fn host_bytes(conn: &Conn, addr: u64, rkey: u32, len: usize) -> Result<Vec<u8>, String> {
    let o = host_offset(conn, addr, rkey, len)?;
    Ok(conn.arena[o..o + len].to_vec())
}
