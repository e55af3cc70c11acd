//! N-to-1 incast through a RED-marking, tail-dropping bottleneck with whole QPs
//! ([`super::sim::fabric`]), DCQCN on and off, over several seeds. The checks are what
//! the algorithm guarantees, not timings: with DCQCN on every sender hears CNPs and
//! cuts its rate, and once the marks stop every rate climbs back to the line rate;
//! tail drops with DCQCN are a small fraction of those without; the flows share the
//! bottleneck fairly (Jain's index); and in both cases RC delivers every byte intact.
use super::sim::bottleneck::RedCfg;
use super::sim::fabric::{Fabric, FabricCfg};
use crate::rc::cc::{CongestionConfig, DcqcnParams, ReactionPoint};
use crate::rc::RcConfig;
use crate::verbs::Mtu;

/// 25 Gbit/s.
const PS_PER_BYTE: u64 = 320;
const LINE_MBPS: u32 = 25_000;

fn cfg(seed: u64, flows: usize, dcqcn: bool) -> FabricCfg {
    let cc = if dcqcn {
        CongestionConfig {
            rp: ReactionPoint::Dcqcn(DcqcnParams {
                line_rate_mbps: LINE_MBPS,
                ..DcqcnParams::default()
            }),
            ..CongestionConfig::default()
        }
    } else {
        CongestionConfig::OFF
    };
    let msg_len = 64 << 10;
    FabricCfg {
        seed,
        flows,
        ps_per_byte: PS_PER_BYTE,
        hop_delay_ns: 1_000,
        // The DCQCN paper's switch settings (§5: Kmin 5 KB, Kmax 200 KB, Pmax 1%).
        red: RedCfg {
            ps_per_byte: PS_PER_BYTE,
            kmin_bytes: 5_000,
            kmax_bytes: 200_000,
            pmax: 0.01,
            limit_bytes: flows as u64 * (128 << 10),
            mark_on_dequeue: true,
        },
        // A window of 256 KiB per QP (an NVMe-oF queue of 64 4 KiB commands): the flows
        // hold twice what the queue (128 KiB per flow) takes.
        qp: RcConfig {
            cc,
            max_inflight_bytes: 256 << 10,
            ..RcConfig::default()
        },
        mtu: Mtu::Mtu1024,
        msgs: (16 << 20) / flows as u64 / msg_len as u64,
        msg_len,
        depth: 16,
        start_spread_ns: 20_000,
        max_rounds: 50_000_000,
    }
}

/// What one run showed.
#[derive(Debug)]
struct Summary {
    drops: u64,
    drops_us: Option<(u64, u64)>,
    marks: u64,
    max_depth: u64,
    resent_pkts: u64,
    cnps_handled: Vec<u64>,
    min_rates: Vec<Option<f64>>,
    jain: f64,
    done_us: u64,
    idle_us: u64,
}

/// Jain's fairness index of `x`: 1 when all equal, 1/n when one has everything.
fn jain(x: &[f64]) -> f64 {
    let s: f64 = x.iter().sum();
    let q: f64 = x.iter().map(|v| v * v).sum();
    s * s / (x.len() as f64 * q)
}

/// Runs one incast and checks what holds with DCQCN on or off: the run ends idle,
/// every WRITE completes successfully and every byte arrives intact.
fn run(seed: u64, flows: usize, dcqcn: bool) -> (Fabric, Summary) {
    let c = cfg(seed, flows, dcqcn);
    let mut f = Fabric::new(c);
    let start = f.now;
    let idle = f.run();
    let what = format!("seed {seed:#x}, {flows} flows, DCQCN {dcqcn}");
    assert!(idle, "{what}: did not finish ({} rounds)", f.rounds);
    assert_eq!(f.bad_packets, 0, "{what}");
    let pkts_per_msg = u64::from(c.msg_len).div_ceil(1024);
    let mut resent = 0;
    for (i, w) in f.work.iter().enumerate() {
        assert!(w.bad_wcs.is_empty(), "{what}: flow {i}: {:?}", w.bad_wcs);
        assert_eq!(w.completed, c.msgs, "{what}: flow {i}");
        assert!(f.intact(i), "{what}: flow {i}'s data differs");
        resent += w.request_pkts - c.msgs * pkts_per_msg;
    }
    // Each flow's goodput: its bytes over the time from its first post to its last
    // completion.
    let shares: Vec<f64> = f
        .work
        .iter()
        .map(|w| {
            let t = w.finished_at.unwrap() - w.posted_at[0];
            (c.msgs * u64::from(c.msg_len)) as f64 / t as f64
        })
        .collect();
    let q = f.queue_stats();
    let s = Summary {
        drops: q.dropped,
        drops_us: q
            .drops_between
            .map(|(a, b)| ((a - start) / 1000, (b - start) / 1000)),
        marks: q.marked,
        max_depth: q.max_depth,
        resent_pkts: resent,
        cnps_handled: f
            .senders
            .iter()
            .map(|s| s.counters().rp_cnp_handled)
            .collect(),
        min_rates: f.work.iter().map(|w| w.min_rate_mbps).collect(),
        jain: jain(&shares),
        done_us: (f.all_done_at.unwrap() - start) / 1000,
        idle_us: (f.now - start) / 1000,
    };
    eprintln!("{what}: {s:?}");
    (f, s)
}

fn seeds() -> Vec<u64> {
    super::sim::seeds("incast", "RC_INCAST_CASES", 3)
}

fn dcqcn_tames_the_incast(flows: usize) {
    for seed in seeds() {
        let (on_f, on) = run(seed, flows, true);
        let (_, off) = run(seed, flows, false);
        let what = format!("seed {seed:#x}, {flows} flows");
        // The queue marked, the receivers sent CNPs, every sender heard some and cut.
        assert!(on.marks > 0, "{what}: {on:?}");
        for (i, s) in on_f.senders.iter().enumerate() {
            assert!(on.cnps_handled[i] > 0, "{what}: flow {i} heard no CNP");
            let r = on.min_rates[i].expect("a rate-limited sender");
            assert!(
                r < f64::from(LINE_MBPS) * 0.75,
                "{what}: flow {i} cut only to {r}"
            );
            // Marks stopped with the last WRITE; the rate recovered to the line rate.
            assert_eq!(s.cc_rate_mbps(), None, "{what}: flow {i} still limited");
        }
        // Without congestion control nobody hears a CNP or slows down.
        assert!(off.cnps_handled.iter().all(|&n| n == 0));
        assert!(off.min_rates.iter().all(Option::is_none));
        // Tail drops: DCQCN keeps the queue short of its limit.
        assert!(off.drops > 0, "{what}: no drops without DCQCN: {off:?}");
        assert!(
            on.drops * 3 <= off.drops,
            "{what}: {} drops with DCQCN, {} without",
            on.drops,
            off.drops
        );
        // With DCQCN the drops are the startup transient's (every flow starts at the
        // line rate, before its first CNP): they end within the first tenth of the run,
        // and so do the resends; without it they go on.
        let (_, last_on) = on.drops_us.unwrap_or((0, 0));
        assert!(last_on * 10 <= on.done_us, "{what}: {on:?}");
        assert!(off.drops_us.is_some_and(|(_, l)| l * 10 > off.done_us));
        assert!(
            on.resent_pkts * 3 <= off.resent_pkts,
            "{what}: {on:?} {off:?}"
        );
        assert!(on.idle_us >= on.done_us && on.max_depth > 0);
        // Fair shares of the bottleneck.
        assert!(on.jain >= 0.9, "{what}: Jain's index {}", on.jain);
    }
}

#[test]
fn two_to_one_incast_with_and_without_dcqcn() {
    dcqcn_tames_the_incast(2);
}

#[test]
fn eight_to_one_incast_with_and_without_dcqcn() {
    dcqcn_tames_the_incast(8);
}
