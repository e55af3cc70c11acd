//! The cases the property tests run: the impairment scenarios, random and matrix case
//! builders, running a case on the simulator and the checks every run must pass.
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::super::{Net, Opts};
use super::workload::{Flow, Flows, Plan, WorkloadCfg, RECV_AHEAD};
use super::{End, GilbertElliott, Impairments, LinkCfg, LinkStats, Sim, SimCfg};
use crate::rc::RcConfig;
use crate::verbs::{Mtu, QpAttr};

/// The impairment scenarios of the matrix.
pub(crate) fn scenarios() -> Vec<(&'static str, Impairments)> {
    let none = Impairments::NONE;
    let burst = GilbertElliott {
        p_good_to_bad: 0.002,
        p_bad_to_good: 0.25,
        loss_good: 0.0,
        loss_bad: 0.5,
    };
    vec![
        ("clean", none),
        (
            "loss 0.1%",
            Impairments {
                loss: 0.001,
                ..none
            },
        ),
        ("loss 1%", Impairments { loss: 0.01, ..none }),
        ("loss 5%", Impairments { loss: 0.05, ..none }),
        (
            "burst loss",
            Impairments {
                burst: Some(burst),
                ..none
            },
        ),
        (
            "reorder 1%",
            Impairments {
                reorder: 0.01,
                reorder_ns: 20_000,
                ..none
            },
        ),
        (
            "dup 1%",
            Impairments {
                dup: 0.01,
                reorder_ns: 20_000,
                ..none
            },
        ),
        (
            "corrupt 1%",
            Impairments {
                corrupt: 0.01,
                ..none
            },
        ),
        (
            "jitter 5us",
            Impairments {
                jitter_ns: 5_000,
                ..none
            },
        ),
        ("ECN CE 10%", Impairments { ce: 0.1, ..none }),
        (
            "all together",
            Impairments {
                loss: 0.001,
                burst: Some(burst),
                reorder: 0.01,
                reorder_ns: 20_000,
                dup: 0.01,
                corrupt: 0.01,
                jitter_ns: 5_000,
                ce: 0.1,
            },
        ),
    ]
}

/// Scenarios beyond the matrix for the random mixes: stragglers far behind (late
/// duplicates and reordering by up to 2 ms, past the retransmission timer) and heavy
/// everything.
pub(crate) fn extra_scenarios() -> Vec<(&'static str, Impairments)> {
    let none = Impairments::NONE;
    vec![
        (
            "late stragglers",
            Impairments {
                reorder: 0.02,
                dup: 0.02,
                reorder_ns: 2_000_000,
                ..none
            },
        ),
        (
            "heavy",
            Impairments {
                loss: 0.02,
                burst: Some(GilbertElliott {
                    p_good_to_bad: 0.005,
                    p_bad_to_good: 0.2,
                    loss_good: 0.0,
                    loss_bad: 0.8,
                }),
                reorder: 0.05,
                reorder_ns: 50_000,
                dup: 0.05,
                corrupt: 0.02,
                jitter_ns: 10_000,
                ce: 0.2,
            },
        ),
    ]
}

/// The path MTU of `bytes` (256 to 4096; anything else is 4096).
pub(crate) fn mtu_of(bytes: u32) -> Mtu {
    match bytes {
        256 => Mtu::Mtu256,
        512 => Mtu::Mtu512,
        1024 => Mtu::Mtu1024,
        2048 => Mtu::Mtu2048,
        _ => Mtu::Mtu4096,
    }
}

/// A starting PSN that makes a flow of `psns` PSNs cross 0xFFFFFF -> 0.
pub(crate) fn psn_before_wrap(rng: &mut StdRng, psns: u64) -> u32 {
    // At least one PSN before the wrap and one after it (0x000000) when psns >= 2.
    let back = rng.gen_range(1..psns.clamp(2, 1 << 20)) as u32;
    (1u32 << 24).wrapping_sub(back) & 0xFF_FFFF
}

/// Everything a run needs besides the Net.
pub(crate) struct Case {
    /// Prefix of every assertion message: seed and parameters.
    pub ctx: String,
    /// QP parameters (MTU, start PSNs, SRQ, timeout, retry counts, RcConfig).
    pub opts: Opts,
    pub sim: SimCfg,
    /// Workloads by requesting side (0: A, 1: B).
    pub plans: Vec<(usize, Plan)>,
    /// Set `QpAttr::selective_retransmit` on both QPs.
    pub selective: bool,
    /// Errors are expected (a dead peer): the flows accept and check them.
    pub dead_peer: bool,
}

/// A finished run: the simulator (QPs, counters, link statistics), the flows and how
/// the run ended.
pub(crate) struct Outcome {
    pub sim: Sim,
    pub flows: Vec<Flow>,
    pub end: End,
}

/// Builds the QPs and flows of `case` and runs them to the end.
pub(crate) fn run(case: Case) -> Outcome {
    let mut net = Net::new(case.opts);
    if case.selective {
        for qp in [&mut net.a.qp, &mut net.b.qp] {
            qp.modify(&QpAttr {
                selective_retransmit: Some(true),
                ..Default::default()
            })
            .unwrap();
        }
    }
    let flows = case
        .plans
        .into_iter()
        .map(|(from, p)| Flow::new(&net, from, p, case.dead_peer, case.ctx.clone()))
        .collect();
    let mut sim = Sim::new(net, case.sim);
    let mut app = Flows(flows);
    let end = sim.run(&mut app);
    Outcome {
        sim,
        flows: app.0,
        end,
    }
}

/// Checks every run must pass: finished, every flow's data and completions, every
/// corrupted packet dropped by the ICRC check and nothing else malformed.
pub(crate) fn check_run(o: &Outcome, ctx: &str) {
    let progress: Vec<String> = o.flows.iter().map(|f| f.progress()).collect();
    assert_eq!(
        o.end,
        End::Done,
        "{ctx}: run ended at {} ns after {} rounds: {progress:?}; A {:?} B {:?}",
        o.sim.now(),
        o.sim.rounds,
        o.sim.net.a.qp.counters(),
        o.sim.net.b.qp.counters()
    );
    for f in &o.flows {
        f.finish(&o.sim.net);
    }
    for (d, rx) in o.sim.rx.iter().enumerate() {
        assert_eq!(
            rx.undetected, 0,
            "{ctx}: dir {d}: corruption passed the ICRC"
        );
        assert_eq!(rx.icrc_errors, rx.corrupted, "{ctx}: dir {d}: ICRC drops");
        assert_eq!(rx.malformed, 0, "{ctx}: dir {d}: malformed packets");
    }
}

/// After a successful run the responder expects exactly the PSN after the last one
/// used (the plan's PSNs counted from the requester's start, across the wrap) and has
/// completed one message per WR.
pub(crate) fn check_psn_msn(o: &Outcome, ctx: &str) {
    for f in &o.flows {
        let (req, resp) = if f.from == 0 {
            (&o.sim.net.a, &o.sim.net.b)
        } else {
            (&o.sim.net.b, &o.sim.net.a)
        };
        let start = req.qp.attr().sq_psn.unwrap_or(0);
        let want = (start as u64 + f.plan.psns()) as u32 & 0xFF_FFFF;
        assert_eq!(resp.qp.expected_psn(), want, "{ctx}: flow {} ePSN", f.from);
        assert!(
            start as u64 + f.plan.psns() > 1 << 24,
            "{ctx}: PSN wrap crossed"
        );
        let msgs = f.plan.wrs.len() as u32 & 0xFF_FFFF;
        assert_eq!(resp.qp.msn(), msgs, "{ctx}: flow {} MSN", f.from);
    }
}

/// A workload of `wrs` WRs with random weights of the five kinds, queue depth 1 to 16,
/// sizes 1 B to 1 MiB, READs sharing the WRITE region or not.
pub(crate) fn random_workload(rng: &mut StdRng, mtu: u32, wrs: usize) -> WorkloadCfg {
    let mut mix = [0u32; 5];
    for w in &mut mix {
        *w = rng.gen_range(0..=4);
    }
    if mix.iter().all(|&w| w == 0) {
        mix[rng.gen_range(0..5)] = 1;
    }
    WorkloadCfg {
        wrs,
        qd: rng.gen_range(1..=16),
        min_len: 1,
        max_len: 1 << 20,
        mtu,
        mix,
        shared: rng.gen_bool(0.5),
        recv_ahead: RECV_AHEAD,
        recv_delay_ns: 0,
    }
}

/// A random case: MTU, link, window, ACK coalescing, timeout, SRQ, selective
/// retransmission, one or two flows, `impair` on both directions.
pub(crate) fn random_case(seed: u64, rng: &mut StdRng, impair: Impairments, name: &str) -> Case {
    let mtu = [256, 512, 1024, 2048, 4096][rng.gen_range(0..5)];
    let link = LinkCfg {
        delay_ns: rng.gen_range(500..=20_000),
        ps_per_byte: rng.gen_range(80..=800),
        impair,
        pause: None,
    };
    let wrs = rng.gen_range(4..=24);
    let w = random_workload(rng, mtu, wrs);
    let mut plans = vec![(0, Plan::generate(w, rng))];
    if rng.gen_bool(0.4) {
        let wrs = rng.gen_range(2..=12);
        let w = random_workload(rng, mtu, wrs);
        plans.push((1, Plan::generate(w, rng)));
    }
    let psns = |i: usize| plans.get(i).map_or(1000, |(_, p)| p.psns());
    let (pa, pb) = (psns(0), psns(1));
    let opts = Opts {
        mtu: mtu_of(mtu),
        psn_a: psn_before_wrap(rng, pa),
        psn_b: psn_before_wrap(rng, pb),
        srq: rng.gen_bool(0.5),
        timeout: rng.gen_range(8..=14),
        retry_cnt: 7,
        rnr_retry: 7,
        cfg: RcConfig {
            max_inflight_bytes: [64 << 10, 256 << 10, 1 << 20][rng.gen_range(0..3)],
            ack_req_every_packets: [0, 1, 4, 16][rng.gen_range(0..4)],
            ..RcConfig::default()
        },
    };
    let selective = rng.gen_bool(0.5);
    let ctx = format!(
        "seed {seed:#x} [{name}, MTU {mtu}, {} flow(s), selective {selective}, timeout {}, \
         SRQ {}, {:?}, {link:?}]",
        plans.len(),
        opts.timeout,
        opts.srq,
        opts.cfg
    );
    let sim = SimCfg::symmetric(rng.gen(), link);
    // Drawn last so that earlier draws (and the cases of recorded seeds) stay put.
    let recv_ahead = [1, 2, 4, RECV_AHEAD][rng.gen_range(0..4)];
    let recv_delay_ns = [0, 1_000, 20_000][rng.gen_range(0..3)];
    for (_, p) in &mut plans {
        p.cfg.recv_ahead = recv_ahead;
        p.cfg.recv_delay_ns = recv_delay_ns;
    }
    Case {
        ctx: format!("{ctx} receives ahead {recv_ahead}, after {recv_delay_ns} ns"),
        opts,
        sim,
        plans,
        selective,
        dead_peer: false,
    }
}

/// One seed's unidirectional workload for the matrix: 48 WRs (SEND, WRITE, READ in equal
/// parts), 4 KiB to 1 MiB, 16 outstanding, MTU 4096, over 25 Gbit/s with 2 us one way.
pub(crate) fn matrix_case(seed: u64, impair: Impairments, name: &str, selective: bool) -> Case {
    let mut rng = StdRng::seed_from_u64(seed);
    let w = WorkloadCfg {
        wrs: 48,
        qd: 16,
        min_len: 4096,
        max_len: 1 << 20,
        mtu: 4096,
        mix: [1, 0, 1, 0, 1],
        shared: false,
        recv_ahead: RECV_AHEAD,
        recv_delay_ns: 0,
    };
    let plan = Plan::generate(w, &mut rng);
    let psn_a = psn_before_wrap(&mut rng, plan.psns());
    let link = LinkCfg {
        impair,
        ..LinkCfg::default()
    };
    Case {
        ctx: format!("seed {seed:#x} [{name}, selective {selective}]"),
        opts: Opts {
            mtu: Mtu::Mtu4096,
            psn_a,
            ..Default::default()
        },
        sim: SimCfg::symmetric(rng.gen(), link),
        plans: vec![(0, plan)],
        selective,
        dead_peer: false,
    }
}

/// Asserts that each impairment of `imp` happened where at least 20 events were
/// expected over `seen.sent` packets (so the matrix cannot pass vacuously).
pub(crate) fn check_exercised(imp: &Impairments, seen: &LinkStats, ce: u64, icrc: u64, name: &str) {
    let expect = |p: f64| p * seen.sent as f64 >= 20.0;
    let burst = imp.burst.map_or(0.0, |g| {
        g.p_good_to_bad / (g.p_good_to_bad + g.p_bad_to_good) * g.loss_bad
    });
    for (what, p, n) in [
        ("loss", imp.loss + burst, seen.lost),
        ("dup", imp.dup, seen.duplicated),
        ("reorder", imp.reorder, seen.reordered),
        ("corrupt", imp.corrupt, icrc),
        ("CE", imp.ce, ce),
    ] {
        assert!(
            !expect(p) || n > 0,
            "{name}: no {what} in {} packets",
            seen.sent
        );
    }
}
