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

/// The departure times (ns) of B's READ response packets for one 16 KiB READ of A's,
/// B's NIC sending each packet as soon as its QP lets it (an unlimited link), after B
/// heard `cnps` CNPs. Checks the data arrived intact.
fn read_response_times(cnps: u32) -> (Vec<(u64, usize)>, Option<f64>) {
    use super::{pattern, send_wr, sge, Net, Opts, ALL};
    use crate::rc::cc::{cnp_headers, cnp_payload, DcqcnParams};
    use crate::rc::RcEnv;
    use crate::time::Timestamp;
    use crate::verbs::SendOp;
    use crate::wire::{parse, Opcode};

    let line = 25_000;
    let mut o = Opts::default();
    o.cfg.cc.rp = ReactionPoint::Dcqcn(DcqcnParams {
        line_rate_mbps: line,
        ..DcqcnParams::default()
    });
    let len = 16 << 10;
    let mut n = Net::new(o);
    let (_src, ks) = n.mr(n.b.pd, len, ALL, pattern(3));
    let (dst, kd) = n.mr(n.a.pd, len, ALL, |_| 0);
    for _ in 0..cnps {
        let (h, hl) = cnp_headers(n.b.qp.qpn()).to_bytes();
        let mut bytes = h[..hl].to_vec();
        bytes.extend(cnp_payload().to_vec());
        bytes.extend([0u8; 4]);
        let pkt = parse(&bytes).unwrap();
        let mut env = RcEnv {
            keys: &n.keys,
            srq: None,
        };
        n.b.qp.handle_packet(n.now, &pkt, &mut env);
        n.now = n.now + std::time::Duration::from_micros(5);
    }
    let rate = n.b.qp.cc_rate_mbps();
    let r = SendOp::RdmaRead {
        remote_addr: ks.addr,
        rkey: ks.rkey,
    };
    n.a.qp
        .post_send(&send_wr(1, r, &[sge(&kd, 0, len as u32)]))
        .unwrap();
    // A's READ request reaches B.
    {
        let Net {
            keys, a, b, now, ..
        } = &mut n;
        let mut env = RcEnv { keys, srq: None };
        while let Some(tx) = a.qp.poll_transmit(*now, &mut env) {
            let (h, hl) = tx.hdr.to_bytes();
            let mut bytes = h[..hl].to_vec();
            bytes.extend(tx.payload.to_vec());
            bytes.extend([0u8; 4]);
            b.qp.handle_packet(*now, &parse(&bytes).unwrap(), &mut env);
        }
    }
    let mut times = vec![];
    for _ in 0..10_000 {
        let mut env = RcEnv {
            keys: &n.keys,
            srq: None,
        };
        if let Some(tx) = n.b.qp.poll_transmit(n.now, &mut env) {
            if matches!(
                tx.hdr.bth.opcode,
                Opcode::RcRdmaReadResponseFirst
                    | Opcode::RcRdmaReadResponseMiddle
                    | Opcode::RcRdmaReadResponseLast
                    | Opcode::RcRdmaReadResponseOnly
            ) {
                times.push((n.now.0, tx.payload.len()));
            }
            let (h, hl) = tx.hdr.to_bytes();
            let mut bytes = h[..hl].to_vec();
            bytes.extend(tx.payload.to_vec());
            bytes.extend([0u8; 4]);
            let pkt = parse(&bytes).unwrap();
            n.a.qp.handle_packet(n.now, &pkt, &mut env);
            continue;
        }
        // Nothing may leave now: B's next timer (its pacing timer) moves time on.
        let Some(t) = n.b.qp.poll_timeout() else {
            break;
        };
        n.now = Timestamp(n.now.0.max(t.0));
        n.b.qp.handle_timeout(n.now, &mut env);
    }
    n.collect();
    let wcs = n.a.send_wcs();
    assert_eq!(wcs.len(), 1);
    assert_eq!(wcs[0].status, crate::verbs::WcStatus::Success);
    assert!(super::bytes(&dst)[..len]
        .iter()
        .enumerate()
        .all(|(i, &b)| b == pattern(3)(i)));
    (times, rate)
}

#[test]
fn a_cut_rate_spaces_read_response_packets() {
    use crate::rc::cc::PACKET_OVERHEAD_BYTES;
    // Unlimited: all 16 response packets leave at the same instant.
    let (free, rate) = read_response_times(0);
    assert_eq!(rate, None);
    assert_eq!(free.len(), 16);
    assert!(free.iter().all(|&(t, _)| t == free[0].0), "{free:?}");
    // One CNP (alpha 1): the rate halves to 12.5 Gbit/s and each response packet of
    // `n` payload bytes holds the next back by (n + overhead) * 8 / rate.
    let (paced, rate) = read_response_times(1);
    let rate = rate.expect("B is rate-limited");
    assert!((rate - 12_500.0).abs() < 1.0, "rate {rate}");
    assert_eq!(paced.len(), 16);
    for w in paced.windows(2) {
        let ((t0, n0), (t1, _)) = (w[0], w[1]);
        let want = ((n0 + PACKET_OVERHEAD_BYTES) as f64 * 8.0 * 1000.0 / rate) as u64;
        assert!(
            t1 - t0 >= want && t1 - t0 <= want + 1,
            "gap {} ns, want {want}: {paced:?}",
            t1 - t0
        );
    }
}
