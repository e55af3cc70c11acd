//! ECN through whole QPs in the seeded simulator: CE marks on the link reach the
//! notification point, its CNPs reach the sender's reaction point, which cuts its
//! rate; with congestion control off, marks are counted and nothing else changes.
//! Every run is also checked as the property tests check it (data, completions).
use super::sim::cases::*;
use super::sim::Impairments;
use crate::rc::cc::{CongestionConfig, ReactionPoint};

fn ce_case(seed: u64, cc: CongestionConfig) -> Outcome {
    let mut case = matrix_case(
        seed,
        Impairments {
            ce: 0.1,
            ..Impairments::NONE
        },
        "ECN CE 10%",
        false,
    );
    case.opts.cfg.cc = cc;
    let ctx = case.ctx.clone();
    let o = run(case);
    check_run(&o, &ctx);
    o
}

#[test]
fn ce_marks_bring_spaced_cnps_and_the_sender_cuts_its_rate() {
    for seed in 1..=3u64 {
        let o = ce_case(seed, CongestionConfig::default());
        let (a, b) = (o.sim.net.a.qp.counters(), o.sim.net.b.qp.counters());
        // Direction 0 carries A's requests to B.
        let marked_at_b = o.sim.rx[0].ce_delivered;
        assert!(marked_at_b > 20, "seed {seed}: only {marked_at_b} marks");
        assert!(
            b.np_ecn_marked_roce_packets > 0 && b.np_ecn_marked_roce_packets <= marked_at_b,
            "seed {seed}: B counted {} of {marked_at_b} marks",
            b.np_ecn_marked_roce_packets
        );
        // At most one CNP per 50 us, and far fewer than the marks.
        let max_cnps = o.sim.now() / 50_000 + 1;
        assert!(
            b.np_cnp_sent > 0 && b.np_cnp_sent <= max_cnps,
            "seed {seed}: {} CNPs in {} ns",
            b.np_cnp_sent,
            o.sim.now()
        );
        assert!(b.np_cnp_sent < b.np_ecn_marked_roce_packets);
        // A heard (most of) them and acted on each; none ignored.
        assert!(a.rp_cnp_handled > 0 && a.rp_cnp_handled <= b.np_cnp_sent);
        assert_eq!(a.rp_cnp_ignored, 0);
    }
}

#[test]
fn with_congestion_control_off_marks_are_counted_and_no_cnp_is_sent() {
    let o = ce_case(7, CongestionConfig::OFF);
    let (a, b) = (o.sim.net.a.qp.counters(), o.sim.net.b.qp.counters());
    assert!(b.np_ecn_marked_roce_packets > 0);
    assert_eq!(b.np_cnp_sent + a.np_cnp_sent, 0);
    assert_eq!(a.rp_cnp_handled + a.rp_cnp_ignored, 0);
}

#[test]
fn a_sender_without_a_reaction_point_counts_cnps_as_ignored() {
    let o = ce_case(
        9,
        CongestionConfig {
            rp: ReactionPoint::None,
            ..CongestionConfig::default()
        },
    );
    let (a, b) = (o.sim.net.a.qp.counters(), o.sim.net.b.qp.counters());
    assert!(b.np_cnp_sent > 0);
    assert!(a.rp_cnp_ignored > 0);
    assert_eq!(a.rp_cnp_handled, 0);
    assert_eq!(o.sim.net.a.qp.cc_rate_mbps(), None);
}
