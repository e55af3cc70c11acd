//! Property tests of the RC core over the seeded simulated network (`sim`): random mixes
//! of SEND, RDMA WRITE and RDMA READ (1 B to 1 MiB, across PSN wrap-around) under every
//! impairment; a dead peer; and the scenario matrix with its goodput table.
//!
//! Each case is reproduced from the seed its failure prints (`RC_SIM_SEED=0x...`);
//! `RC_SIM_CASES=N` sets the number of seeds per property test (default 32),
//! `RC_SIM_MATRIX_SEEDS=N` those of each matrix cell (default 3).
//! `cargo test -p transport --lib rc::tests::props:: -- --nocapture` prints the matrix.
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::sim::cases::*;
use super::sim::workload::{OpKind, RECV_AHEAD};
use super::sim::{for_each_seed, seeds, Impairments, LinkStats};
use super::*;
use crate::rc::ack_timeout;

/// Seeds per property test unless `RC_SIM_CASES` says otherwise.
const CASES: u64 = 32;

/// Random mixes under a random scenario of the matrix: every WR succeeds, data exactly
/// once, in order, byte-exact; corrupted packets dropped; both QPs still in RTS.
#[test]
fn random_mix_under_impairments() {
    let all: Vec<_> = scenarios().into_iter().chain(extra_scenarios()).collect();
    // Recovery events summed over both QPs of all cases: sequence NAKs received, timer
    // expiries (adaptive or IBTA; with a peer that answers, the adaptive timer repairs
    // the losses and the IBTA timer rarely fires: `dead_peer_*` covers that one), RNR
    // NAKs received, duplicate requests, ICRC drops.
    let mut seen = [0u64; 5];
    let mut cases = 0;
    for_each_seed("random_mix_under_impairments", CASES, |seed| {
        cases += 1;
        let mut rng = StdRng::seed_from_u64(seed);
        let (name, imp) = all[rng.gen_range(0..all.len())];
        let case = random_case(seed, &mut rng, imp, name);
        let ctx = case.ctx.clone();
        let o = run(case);
        check_run(&o, &ctx);
        for s in [&o.sim.net.a, &o.sim.net.b] {
            assert_eq!(s.qp.state(), QpState::Rts, "{ctx}");
            assert_eq!(s.qp.send_queue_len(), 0, "{ctx}");
        }
        check_psn_msn(&o, &ctx);
        for s in [&o.sim.net.a, &o.sim.net.b] {
            let c = s.qp.counters();
            seen[0] += c.rcvd_seq_err;
            seen[1] += c.rto_timeouts + c.local_ack_timeout_err;
            seen[2] += c.rcvd_rnr_err;
            seen[3] += c.duplicate_request;
        }
        seen[4] += o.sim.rx.iter().map(|r| r.icrc_errors).sum::<u64>();
    });
    println!(
        "random mixes: {cases} cases; seq NAKs {}, timer expiries {}, RNR NAKs {}, \
         duplicate requests {}, ICRC drops {}",
        seen[0], seen[1], seen[2], seen[3], seen[4]
    );
    // With the default number of cases, every recovery path was taken somewhere.
    if cases >= CASES {
        assert!(
            seen.iter().all(|&n| n > 0),
            "recovery paths not covered: {seen:?}"
        );
    }
}

/// A peer that goes silent: after a random number of A's request packets every packet
/// in both directions is lost. Every WR completes: Success for those delivered and
/// acknowledged before, then IBV_WC_RETRY_EXC_ERR for the first outstanding one and
/// IBV_WC_WR_FLUSH_ERR for the rest, within (retry_cnt + 1) local ACK timeouts (plus the
/// time to serialize a window per round and what the link still holds) of the death in
/// virtual time.
#[test]
fn dead_peer_fails_every_wr_within_retry_budget() {
    // Largest (first error - death) / ((retry_cnt + 1) x local ACK timeout) seen.
    let mut worst = 0.0f64;
    for_each_seed(
        "dead_peer_fails_every_wr_within_retry_budget",
        CASES,
        |seed| {
            let mut rng = StdRng::seed_from_u64(seed);
            let imp = if rng.gen_bool(0.5) {
                Impairments::NONE
            } else {
                Impairments {
                    jitter_ns: 3_000,
                    ..Impairments::NONE
                }
            };
            let mut case = random_case(seed, &mut rng, imp, "dead peer");
            case.dead_peer = true;
            case.opts.retry_cnt = rng.gen_range(0..=7);
            case.opts.timeout = rng.gen_range(8..=14);
            // Request packets A must send at least: one per READ, all of the rest.
            let plan = &case.plans[0].1;
            let mtu = plan.cfg.mtu as u64;
            let min_requests: u64 = plan
                .wrs
                .iter()
                .map(|w| match w.kind {
                    OpKind::Read => 1,
                    _ => (w.len as u64).div_ceil(mtu).max(1),
                })
                .sum();
            case.sim.dead_after_requests = Some(rng.gen_range(0..min_requests));
            let (retry_cnt, timeout) = (case.opts.retry_cnt, case.opts.timeout);
            let window = case.opts.cfg.max_inflight_bytes;
            let ps = case.sim.links[0].ps_per_byte;
            let ctx = format!("{} retry_cnt {retry_cnt} timeout {timeout}", case.ctx);
            let o = run(case);
            check_run(&o, &ctx);
            let a = &o.flows[0];
            let Some(dead_at) = o.sim.cfg.dead_at else {
                // A failed before sending its last request, before the death (a
                // retry_cnt too small for the timer and the load): it must have said so.
                let e = a.first_error;
                assert!(e.is_some(), "{ctx}: the peer never died and A never failed");
                println!("{ctx}: A failed before the death: {e:?}");
                return;
            };
            let t = ack_timeout(timeout).expect("timeout > 0").as_nanos() as u64;
            // Per round: the timeout plus serializing the window (the timer may restart
            // with the last packet of a round; x1.3 for headers at MTU 256) and 10 us;
            // once: up to 4 READ responses of 1 MiB still leaving the link.
            let ser = |bytes: u64| bytes * ps * 13 / 10 / 1000;
            let budget = (retry_cnt as u64 + 1) * (t + ser(window) + 10_000) + ser(4 << 20);
            let e = a
                .first_error
                .unwrap_or_else(|| panic!("{ctx}: A never failed"));
            let rounds = (retry_cnt as u64 + 1) * t;
            worst = worst.max(e.at.saturating_sub(dead_at) as f64 / rounds as f64);
            assert!(
                e.at <= dead_at + budget,
                "{ctx}: first error {} ns after the death, budget {budget} ns",
                e.at.saturating_sub(dead_at)
            );
            for f in &o.flows {
                if let Some(e) = f.first_error {
                    let s = if f.from == 0 {
                        &o.sim.net.a
                    } else {
                        &o.sim.net.b
                    };
                    assert_eq!(s.qp.state(), QpState::Error, "{ctx}");
                    assert_eq!(s.qp.poll_timeout(), None, "{ctx}: WR {} failed", e.wr);
                }
            }
            assert_eq!(
                o.sim.net.a.qp.counters().retry_exceeded_err,
                1,
                "{ctx}: one retry exhaustion"
            );
        },
    );
    println!(
        "dead peer: first error at most {worst:.3} x (retry_cnt + 1) x local ACK timeout \
         after the death"
    );
}

/// Goodput of every scenario relative to the clean link (same workloads), go-back-N and
/// selective; checks every run like the property tests. Printed with `--nocapture`.
#[test]
fn scenario_matrix() {
    let seeds: Vec<u64> = seeds("scenario_matrix", "RC_SIM_MATRIX_SEEDS", 3);
    for selective in [false, true] {
        let mut clean = 0.0;
        println!(
            "RC sim matrix, selective_retransmit {selective}: {} seeds x 48 WRs of 4 KiB..1 MiB \
             (SEND/WRITE/READ 1:1:1), QD 16, MTU 4096, 25 Gbit/s each way, 2 us one way, \
             timeout 14; goodput = payload of all WRs (READ data flows B to A) / virtual time \
             from the first post to the last completion; latency = post to completion",
            seeds.len()
        );
        println!(
            "  scenario      goodput Gbit/s  rel.   p50 us   p99 us  ACK t/o  RTO t/o  seq NAKs  retries  ICRC drops"
        );
        for (name, imp) in scenarios() {
            let (mut bytes, mut ns) = (0u64, 0u64);
            let mut lat = Vec::new();
            let (mut to, mut rto, mut naks, mut retries, mut icrc) = (0, 0, 0, 0, 0);
            let (mut seen, mut ce) = (LinkStats::default(), 0);
            for &seed in &seeds {
                let case = matrix_case(seed, imp, name, selective);
                let ctx = case.ctx.clone();
                let o = run(case);
                check_run(&o, &ctx);
                let f = &o.flows[0];
                bytes += f.bytes_ok;
                ns += f.last_done - f.first_post.unwrap_or(0);
                lat.extend(f.latencies());
                let c = o.sim.net.a.qp.counters();
                to += c.local_ack_timeout_err;
                rto += c.rto_timeouts;
                naks += c.rcvd_seq_err;
                retries += c.completer_retry_err;
                icrc += o.sim.rx.iter().map(|r| r.icrc_errors).sum::<u64>();
                for d in 0..2 {
                    let (l, r) = (o.sim.links[d].stats, o.sim.rx[d]);
                    seen.sent += l.sent;
                    seen.lost += l.lost;
                    seen.duplicated += l.duplicated;
                    seen.reordered += l.reordered;
                    ce += r.ce_delivered;
                }
            }
            check_exercised(&imp, &seen, ce, icrc, name);
            lat.sort_unstable();
            let pct = |p: f64| lat[((lat.len() - 1) as f64 * p) as usize] as f64 / 1e3;
            let gbps = bytes as f64 * 8.0 / ns.max(1) as f64;
            if name == "clean" {
                clean = gbps;
            }
            println!(
                "  {name:<13} {gbps:>14.2} {:>5.3} {:>8.1} {:>8.1} {to:>8} {rto:>8} {naks:>9} {retries:>8} {icrc:>11}",
                gbps / clean,
                pct(0.5),
                pct(0.99),
            );
        }
    }
}

/// Found by the simulator (seed 0x9830a97673cd6df0, before round-robin arbitration): a
/// requester whose timer expires while a long READ response is still streaming asks for
/// the READ again, and every duplicate READ request queued one more complete response,
/// so the responder's output grew without bound and starved everything behind it. A
/// duplicate READ request must restart the queued response of that READ, not add one
/// (IBTA §9.7.5.1.4; rxe replays the one read resource).
#[test]
fn duplicate_read_requests_replace_the_queued_response() {
    let mut n = Net::new(Opts::default());
    let len = 64 * 1024;
    let (src, ks) = n.mr(n.b.pd, len, ALL, pattern(9));
    let (dst, kd) = n.mr(n.a.pd, len, ALL, |_| 0);
    let op = SendOp::RdmaRead {
        remote_addr: ks.addr,
        rkey: ks.rkey,
    };
    n.a.qp
        .post_send(&send_wr(1, op, &[sge(&kd, 0, len as u32)]))
        .unwrap();
    let mut env = RcEnv {
        keys: &n.keys,
        srq: None,
    };
    let req = wire_bytes(&n.a.qp.poll_transmit(n.now, &mut env).unwrap());
    let req = crate::wire::parse(&req).unwrap();
    for _ in 0..10 {
        n.b.qp.handle_packet(n.now, &req, &mut env);
    }
    let mut responses = 0;
    while let Some(tx) = n.b.qp.poll_transmit(n.now, &mut env) {
        responses += 1;
        let b = wire_bytes(&tx);
        n.a.qp
            .handle_packet(n.now, &crate::wire::parse(&b).unwrap(), &mut env);
    }
    assert_eq!(n.b.qp.counters().duplicate_request, 9);
    assert_eq!(
        responses,
        len / 1024,
        "one response for ten identical requests"
    );
    n.collect();
    assert_eq!(n.a.send_wcs()[0].status, WcStatus::Success);
    assert_eq!(bytes(&dst), bytes(&src));
}

/// The case of seed 0x9830a97673cd6df0 with strict responder priority, the setting in
/// which it found the unbounded duplicate READ responses (B's requester starved behind
/// them until its retries ran out).
#[test]
fn seed_9830a97673cd6df0_strict_priority() {
    let seed = 0x9830_a976_73cd_6df0;
    let mut rng = StdRng::seed_from_u64(seed);
    let all = scenarios();
    let (name, imp) = all[rng.gen_range(0..all.len())];
    let mut case = random_case(seed, &mut rng, imp, name);
    case.sim.responses_first = true;
    for (_, p) in &mut case.plans {
        p.cfg.recv_ahead = RECV_AHEAD;
        p.cfg.recv_delay_ns = 0;
    }
    let ctx = case.ctx.clone();
    let o = run(case);
    check_run(&o, &ctx);
}

/// Found by the simulator (dead-peer test, seed 0x6834889dc9d7cb15, which failed long
/// before its peer died): a receiver posting one receive at a time answers RNR NAKs, the
/// packets already behind the RNR-NAKed one arrive out of sequence and draw a PSN
/// sequence error NAK for the same PSN, and that NAK cost a transport retry each time,
/// so with retry_cnt 1 a lossless link ended in IBV_WC_RETRY_EXC_ERR. The RNR wait
/// already goes back to that PSN; a sequence NAK for it is a repeat, not a new loss.
#[test]
fn seed_6834889dc9d7cb15_rnr_then_sequence_nak_costs_no_retry() {
    let seed = 0x6834_889d_c9d7_cb15;
    let mut rng = StdRng::seed_from_u64(seed);
    let jitter = Impairments {
        jitter_ns: 3_000,
        ..Impairments::NONE
    };
    let imp = if rng.gen_bool(0.5) {
        Impairments::NONE
    } else {
        jitter
    };
    let mut case = random_case(seed, &mut rng, imp, "RNR");
    case.opts.retry_cnt = rng.gen_range(0..=7);
    case.opts.timeout = rng.gen_range(8..=14);
    let ctx = format!("{} retry_cnt {}", case.ctx, case.opts.retry_cnt);
    let o = run(case);
    check_run(&o, &ctx);
    let a = o.sim.net.a.qp.counters();
    assert!(a.rcvd_rnr_err > 0 && a.rcvd_seq_err > 0, "{ctx}: {a:?}");
}

/// `tx` as a packet on the wire.
fn wire_bytes(tx: &crate::rc::TxPacket) -> Vec<u8> {
    let mut out = Vec::new();
    let ip = crate::wire::IcrcIpInfo {
        src: std::net::Ipv4Addr::LOCALHOST.into(),
        dst: std::net::Ipv4Addr::LOCALHOST.into(),
        ipv4_id: 0,
        udp_sport: 0xC000,
        udp_dport: crate::wire::ROCE_V2_UDP_DPORT,
    };
    crate::wire::build(&tx.hdr, &tx.payload.to_vec(), &ip, &mut out);
    out
}
