//! Failover proved in a seeded simulation (issue 15 item 6): the host's sans-IO cores
//! (the lifecycle state machine, the queue core, the multipath policy) and the
//! target's request core, joined by a simulated RC network, in one deterministic
//! simulation per seed: no sockets, threads or clocks, every choice drawn from the
//! seed's `StdRng`.
//!
//! Each seed draws one or two paths, packet loss, partitions of a path (shorter or
//! longer than the RC retry budget), a path's death, target crashes with restarts (or
//! none: the target never comes back), reconnect options, and a workload of
//! overlapping writes (some FUA), reads and flushes over a few hot blocks, then reads
//! every hot block back. Checked:
//! - every read finds data a write put there (or the fresh zeros) and never a value an
//!   acknowledged, surviving write superseded ([`check`]'s rule);
//! - no command identifier completes twice on a queue and no call completes twice;
//! - every call completes (success or an error): nothing hangs;
//! - once the target is gone for good, calls fail with the documented error: a single
//!   path's controller answers `ControllerDead` at once after `ctrl_loss_tmo`; the
//!   multipath layer answers `FailFast` after `no_path_timeout`.
//!
//! `SIM_SEEDS=N` runs seeds `0..N` (default 10 000), `SIM_FIRST=K` starts at seed `K`;
//! `SEED=N` runs seed `N` alone with a trace on stderr (the replay a failure names).
//! The checker was proven against planted bugs (a target acknowledging writes it drops,
//! FUA ignored, a host reporting success for a write whose path died, a response
//! delivered twice): each fails within the first hundred seeds.
#[path = "host_target_sim/check.rs"]
mod check;
#[path = "host_target_sim/host.rs"]
mod host;
#[path = "host_target_sim/world.rs"]
mod world;

use std::time::Duration;

use nvmf_initiator::lifecycle::DEFAULT_IO_TIMEOUT;
use nvmf_initiator::multipath::MultipathOptions;
use nvmf_initiator::HostError;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use check::{unstamp, BLOCK, T};
use host::{Op, OpKind};
use world::{Ev, Msg, Owner, Plan, Side, World, HOT_BLOCKS};

const MS: T = 1000;
const S: T = 1_000_000;

/// The seed's plan of faults, options and workload.
fn plan(rng: &mut StdRng) -> Plan {
    let paths = if rng.gen_bool(0.5) { 2 } else { 1 };
    let horizon = 6 * S;
    let loss = [0.0, 0.0, 0.001, 0.01, 0.05][rng.gen_range(0..5)];
    let rto = rng.gen_range(2 * MS..=10 * MS);
    let retry_cnt = 7;
    let budget = rto * T::from(retry_cnt + 1);
    let mut down = vec![Vec::new(); paths];
    for d in down.iter_mut() {
        for _ in 0..rng.gen_range(0..=2) {
            let from = rng.gen_range(100 * MS..horizon);
            let len = if rng.gen_bool(0.5) {
                rng.gen_range(MS..budget / 2)
            } else {
                rng.gen_range(budget..3 * S)
            };
            d.push((from, from + len));
        }
    }
    // Path death: one path for good; rarely every path.
    if paths == 2 && rng.gen_bool(0.3) {
        let p = rng.gen_range(0..2);
        down[p].push((rng.gen_range(100 * MS..horizon), T::MAX));
        if rng.gen_bool(0.1) {
            down[1 - p].push((rng.gen_range(100 * MS..horizon), T::MAX));
        }
    }
    let mut crashes = Vec::new();
    if rng.gen_bool(0.35) {
        let t = rng.gen_range(100 * MS..horizon);
        let back = if rng.gen_bool(0.1) {
            None
        } else {
            Some(rng.gen_range(10 * MS..3 * S))
        };
        crashes.push((t, back));
        if let Some(b) = back.filter(|_| rng.gen_bool(0.2)) {
            let t2 = t + b + rng.gen_range(100 * MS..2 * S);
            crashes.push((t2, Some(rng.gen_range(10 * MS..2 * S))));
        }
    }
    Plan {
        paths,
        loss,
        latency: (2, rng.gen_range(3..=40)),
        rto,
        retry_cnt,
        down,
        crashes,
        ops: rng.gen_range(30..=120),
        max_inflight: rng.gen_range(1..=8),
        in_capsule: rng.gen_bool(0.5),
        reconnect_delay: Duration::from_millis(rng.gen_range(50..=1000)),
        ctrl_loss_tmo: Duration::from_millis(rng.gen_range(2000..=8000)),
        fast_io_fail_tmo: match rng.gen_range(0..3) {
            0 => Some(Duration::from_millis(rng.gen_range(0..=2000))),
            _ => None,
        },
        kato_ms: rng.gen_range(300..=2000),
        io_latency: (5, rng.gen_range(10..=300)),
    }
}

/// How long one call may take at most: waiting out `no_path_timeout` (multipath) or
/// the controller's recovery (noticing the loss within two KATOs or an RC retry
/// budget, reconnect attempts until `ctrl_loss_tmo`, the last attempt's timeout).
fn call_bound(p: &Plan) -> T {
    let budget = p.rto * T::from(p.retry_cnt + 1);
    let recovery = p.ctrl_loss_tmo.as_micros() as T
        + p.reconnect_delay.as_micros() as T
        + 2 * T::from(p.kato_ms) * MS
        + 4 * budget
        + 2 * S
        // A queue whose DREQ was lost: io_timeout, Abort, io_timeout, reset.
        + 2 * DEFAULT_IO_TIMEOUT.as_micros() as T;
    if p.paths == 1 {
        recovery
    } else {
        MultipathOptions::default().no_path_timeout.as_micros() as T + recovery
    }
}

/// When the target became unreachable for good, if it did: the crash it never came
/// back from, or the death of its last path.
fn gone_for_good(p: &Plan) -> Option<T> {
    let crash = p
        .crashes
        .iter()
        .find(|(_, back)| back.is_none())
        .map(|&(t, _)| t);
    let paths = (0..p.paths)
        .map(|i| {
            p.down[i]
                .iter()
                .find(|&&(_, to)| to == T::MAX)
                .map(|&(from, _)| from)
        })
        .collect::<Option<Vec<T>>>()
        .map(|v| v.into_iter().max().unwrap());
    match (crash, paths) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

impl World {
    fn issue(&mut self, kind: OpKind, final_read: bool) {
        let deadline = self.now + MultipathOptions::default().no_path_timeout.as_micros() as T;
        self.ops.push(Op {
            kind,
            issued: self.now,
            done: None,
            result: None,
            data: None,
            deadline,
            last_err: None,
            on_path: None,
            final_read,
        });
        let op = self.ops.len() - 1;
        if let OpKind::Write {
            slba,
            nblk,
            fua,
            id,
        } = kind
        {
            self.checker.write_issued(id, slba, nblk, fua, self.now);
        }
        self.inflight += 1;
        self.note(|| format!("op {op} issued: {kind:?}"));
        self.start_op(op);
    }

    fn workload(&mut self) {
        let n = self.plan.ops;
        let mut k = self.rng.gen_range(1..=3);
        while k > 0 && self.issued < n && self.inflight < self.plan.max_inflight {
            k -= 1;
            self.issued += 1;
            let kind = match self.rng.gen_range(0..10) {
                0..=5 => {
                    let nblk = self.rng.gen_range(1..=4);
                    let slba = self.rng.gen_range(0..=HOT_BLOCKS - nblk);
                    let id = self.next_id;
                    self.next_id += 1;
                    OpKind::Write {
                        slba,
                        nblk,
                        fua: self.rng.gen_bool(0.3),
                        id,
                    }
                }
                6..=8 => {
                    let nblk = self.rng.gen_range(1..=8);
                    OpKind::Read {
                        slba: self.rng.gen_range(0..=HOT_BLOCKS - nblk),
                        nblk,
                    }
                }
                _ => OpKind::Flush,
            };
            self.issue(kind, false);
        }
        if self.issued < n {
            let gap = 6 * S / n as T;
            let t = self.now + self.rng.gen_range(1..=2 * gap);
            self.schedule(t, Ev::Workload);
        } else if self.inflight == 0 && !self.final_issued {
            self.final_issued = true;
            for slba in (0..HOT_BLOCKS).step_by(8) {
                self.issue(OpKind::Read { slba, nblk: 8 }, true);
            }
        }
    }

    /// A call completed: its read data checked, the workload goes on.
    pub fn op_finished(&mut self, op: usize) {
        self.inflight -= 1;
        let o = &self.ops[op];
        if let (OpKind::Read { slba, nblk }, Some(Ok(()))) = (o.kind, &o.result) {
            let data = o.data.clone().expect("a read's data");
            let (r0, r1) = (o.issued, o.done.unwrap());
            for i in 0..nblk {
                let lba = slba + i;
                let b = &data[i as usize * BLOCK..(i as usize + 1) * BLOCK];
                let r = unstamp(b, lba).and_then(|id| self.checker.check_block(lba, id, r0, r1));
                if let Err(e) = r {
                    panic!("op {op}: {e}");
                }
            }
            self.checker.reads_checked += 1;
        }
        if self.inflight == 0 && self.issued >= self.plan.ops {
            self.schedule(self.now, Ev::Workload);
        }
    }

    fn all_done(&self) -> bool {
        self.final_issued && self.inflight == 0
    }

    fn step(&mut self, ev: Ev) {
        match ev {
            Ev::Arrive {
                qp,
                to: Side::Target,
                msg,
                sent,
            } => match msg {
                Msg::Capsule { bytes, wr } => {
                    if self.target_end_up(qp) {
                        self.target_capsule(qp, bytes, wr, sent);
                    } else {
                        self.lost_at_dest(qp, Side::Target, Owner::Host(wr), sent);
                    }
                }
                Msg::ReadResp { data, local, wr } => self.target_read_resp(qp, data, local, wr),
                Msg::TargetAck { wr } => {
                    self.target_send_done(qp, wr, transport::verbs::WcStatus::Success)
                }
                other => panic!("target got {other:?}"),
            },
            Ev::Arrive {
                qp,
                to: Side::Host,
                msg,
                sent,
            } => self.host_arrive(qp, msg, sent),
            Ev::SenderFail { qp, side, owner } => match (side, owner) {
                (Side::Host, Owner::Host(wr)) => self.host_send_failed(qp, wr),
                (Side::Target, Owner::Target(wr)) => {
                    self.target_send_done(qp, wr, transport::verbs::WcStatus::RetryExcErr)
                }
                _ => {}
            },
            Ev::IoDone { inc, req, op } => self.io_done(inc, req, op),
            Ev::TargetDisconnect { qp } => self.target_disconnect(qp),
            Ev::HostDisconnect { qp } => self.host_disconnected(qp),
            Ev::IoTimeoutCheck { ctrl } => self.io_timeout_check(ctrl),
            Ev::Crash => self.crash(),
            Ev::Restart => self.restart(),
            Ev::HostTimer { ctrl } => self.host_timer(ctrl),
            Ev::CmDone { ctrl, attempt, ok } => self.cm_done(ctrl, attempt, ok),
            Ev::KeepAliveTimeout { ctrl, conn, seq } => self.keep_alive_timeout(ctrl, conn, seq),
            Ev::ConnectTimeout { ctrl, conn } => self.connect_timeout(ctrl, conn),
            Ev::Workload => self.workload(),
            Ev::OpRetry { op } => self.mp_try(op),
        }
    }

    /// After the run: the documented errors once the target is gone for good.
    fn check_end(&self) {
        let Some(gone) = gone_for_good(&self.plan) else {
            return;
        };
        let p = &self.plan;
        let budget = p.rto * T::from(p.retry_cnt + 1);
        // By then every controller has noticed (Keep Alive, retries), waited its
        // attempts out and been given up.
        let settled = gone
            + p.ctrl_loss_tmo.as_micros() as T
            + p.reconnect_delay.as_micros() as T
            + 2 * T::from(p.kato_ms) * MS
            + 2 * budget
            + 2 * S;
        for (i, o) in self.ops.iter().enumerate() {
            let r = o.result.as_ref().unwrap();
            if o.issued > gone + budget && r.is_ok() && !matches!(o.kind, OpKind::Flush) {
                // A flush cannot succeed either without the target, but the check
                // is the same: nothing succeeds without a target.
            }
            if o.issued > gone + 2 * budget && r.is_ok() {
                panic!(
                    "op {i} ({:?}) issued at {} µs succeeded, the target gone at {gone} µs",
                    o.kind, o.issued
                );
            }
            if o.issued < settled {
                continue;
            }
            match (p.paths, r) {
                (1, Err(HostError::ControllerDead(_))) if o.done == Some(o.issued) => {}
                (2, Err(HostError::FailFast(m))) if m.contains("no usable path") => {
                    let waited = o.done.unwrap() - o.issued;
                    let limit = MultipathOptions::default().no_path_timeout.as_micros() as T;
                    assert!(
                        waited >= limit && waited <= limit + 100 * MS,
                        "op {i}: failed after {waited} µs, no_path_timeout is {limit} µs"
                    );
                }
                _ => panic!(
                    "op {i} ({:?}) issued at {} µs, after the controller was given up, ended \
                     with {r:?} at {:?} µs: not the documented error",
                    o.kind, o.issued, o.done
                ),
            }
        }
    }
}

/// What a seed did.
#[derive(Debug, Default)]
struct Stats {
    ops: usize,
    reads_checked: u64,
    blocks_checked: u64,
    reissued: u64,
    failed: usize,
    sim_time: T,
}

fn run_seed(seed: u64, trace: bool) -> Stats {
    let mut rng = StdRng::seed_from_u64(seed);
    let plan = plan(&mut rng);
    if trace {
        eprintln!("seed {seed}: {plan:#?}");
    }
    let bound = call_bound(&plan);
    let mut w = World::new(plan, rng, trace);
    w.add_ctrls();
    w.schedule(50 * MS, Ev::Workload);
    while !w.all_done() {
        let Some(ev) = w.next_event() else {
            panic!("the simulation ran out of events with calls outstanding")
        };
        let oldest = w
            .ops
            .iter()
            .filter(|o| o.done.is_none())
            .map(|o| o.issued)
            .min();
        if oldest.is_some_and(|t| w.now > t + bound) {
            let open: Vec<_> = w
                .ops
                .iter()
                .enumerate()
                .filter(|(_, o)| o.done.is_none())
                .map(|(i, o)| format!("op {i} {:?} issued {} µs", o.kind, o.issued))
                .collect();
            panic!("calls hang (outstanding longer than {bound} µs): {open:?}");
        }
        w.step(ev);
    }
    w.check_end();
    Stats {
        ops: w.ops.len(),
        reads_checked: w.checker.reads_checked,
        blocks_checked: w.checker.blocks_checked,
        reissued: w.ctrls.iter().map(|c| c.reissued).sum(),
        failed: w
            .ops
            .iter()
            .filter(|o| o.result.as_ref().is_some_and(|r| r.is_err()))
            .count(),
        sim_time: w.now,
    }
}

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|v| v.parse().ok())
}

#[test]
fn failover_holds_over_seeds() {
    if let Some(seed) = env_u64("SEED") {
        let s = run_seed(seed, true);
        eprintln!("seed {seed}: {s:?}");
        return;
    }
    let n = env_u64("SIM_SEEDS").unwrap_or(10_000);
    let first = env_u64("SIM_FIRST").unwrap_or(0);
    let started = std::time::Instant::now();
    let mut total = Stats::default();
    for seed in first..first + n {
        let r = std::panic::catch_unwind(|| run_seed(seed, false));
        match r {
            Ok(s) => {
                total.ops += s.ops;
                total.reads_checked += s.reads_checked;
                total.blocks_checked += s.blocks_checked;
                total.reissued += s.reissued;
                total.failed += s.failed;
                total.sim_time += s.sim_time;
            }
            Err(e) => {
                let msg = e
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_default();
                panic!(
                    "seed {seed} failed: {msg}\nreplay: SEED={seed} cargo test -p nvmf-rdma \
                     --test host_target_sim -- failover_holds_over_seeds --nocapture"
                );
            }
        }
    }
    eprintln!(
        "{n} seeds from {first} in {:.1} s: {} calls ({} failed with an error), {} reads \
         checked ({} blocks), {} commands reissued, {:.0} s simulated",
        started.elapsed().as_secs_f64(),
        total.ops,
        total.failed,
        total.reads_checked,
        total.blocks_checked,
        total.reissued,
        total.sim_time as f64 / 1e6
    );
    assert!(total.reads_checked > n, "reads were checked");
}
