//! Fast recovery: adaptive retransmission timer, paced resend, selective retransmission
//! between peers of this project, and the dead-peer retry budget, on a link with delay
//! and rate (`recovery_net`).
use super::recovery_net::{LinkCfg, LinkNet, RunStats};
use super::*;

fn opts4k() -> Opts {
    Opts {
        mtu: Mtu::Mtu4096,
        ..Default::default()
    }
}

/// Go-back-N with the adaptive timer but without resend pacing.
fn unpaced() -> Opts {
    Opts {
        cfg: RcConfig {
            recovery_window_pkts: 0,
            ..Default::default()
        },
        ..opts4k()
    }
}

/// Plain go-back-N as the core was before fast recovery: no resend pacing, and an
/// "adaptive" timer pinned to the IBTA local ACK timeout.
fn plain_gbn() -> Opts {
    let ibta = crate::rc::ack_timeout(14).unwrap();
    Opts {
        cfg: RcConfig {
            recovery_window_pkts: 0,
            min_rto: ibta,
            initial_rto: ibta,
            ..Default::default()
        },
        ..opts4k()
    }
}

/// Mean goodput over `seeds` runs.
fn mean_goodput(cfg: LinkCfg, seeds: u64, opts: fn() -> Opts) -> (f64, Vec<RunStats>) {
    let mut sum = 0.0;
    let mut all = vec![];
    for s in 0..seeds {
        let st = LinkNet::write_stream(LinkCfg { seed: s + 1, ..cfg }, opts());
        sum += st.goodput();
        all.push(st);
    }
    (sum / seeds as f64, all)
}

/// Prints goodput at 0, 0.1% and 1% loss as a fraction of loss-free, go-back-N and
/// selective. `cargo test -p transport --lib rc::tests::recovery::measure -- --ignored --nocapture`
#[test]
#[ignore = "a measurement, not a check (it asserts nothing): run it by hand with --ignored --nocapture"]
fn measure_goodput() {
    let seeds = 5;
    for (name, selective, opts) in [
        ("plain go-back-N", false, plain_gbn as fn() -> Opts),
        ("go-back-N + adaptive RTO, unpaced", false, unpaced),
        ("go-back-N + fast recovery", false, opts4k),
        ("selective", true, opts4k),
    ] {
        let base = LinkCfg {
            total_wrs: 256,
            selective,
            ..Default::default()
        };
        let (g0, _) = mean_goodput(base, seeds, opts);
        for loss in [0.0, 0.001, 0.01] {
            let (g, st) = mean_goodput(LinkCfg { loss, ..base }, seeds, opts);
            let sent: u64 = st.iter().map(|s| s.a_sent).sum::<u64>() / seeds;
            let burst = st.iter().map(|s| s.max_burst).max().unwrap_or(0);
            let rto: u64 = st.iter().map(|s| s.a_counters.rto_timeouts).sum();
            let ibta: u64 = st.iter().map(|s| s.a_counters.local_ack_timeout_err).sum();
            let gbn: u64 = st.iter().map(|s| s.a_counters.completer_retry_err).sum();
            println!(
                "{name}: loss={loss}: goodput {:.2} Gbit/s = {:.3} of loss-free; A sent {sent} pkts; max burst {burst}; over {seeds} runs: {rto} RTO and {ibta} IBTA timeouts, {gbn} go-back-N restarts",
                g * 8.0 / 1e9,
                g / g0
            );
        }
    }
}

/// IBTA local ACK timeout for the harness default `timeout` 14, ns.
const T_IBTA_NS: u64 = 4096 << 14;

#[test]
fn early_nak_exactly_once_per_gap() {
    // Go-back-N: a 20-packet WRITE loses packets 3 and 12 (first transmissions only).
    // The responder NAKs the first gap once, ignores the rest of the window, and NAKs
    // the second gap (after recovery) once more.
    let mut n = Net::new(Opts::default());
    let (src, ks) = n.mr(n.a.pd, 20 * 1024, ALL, pattern(3));
    let (dst, kd) = n.mr(n.b.pd, 20 * 1024, ALL, |_| 0);
    let mut seen = 0;
    n.filter = Box::new(move |d, tx| {
        if d == Dir::AtoB && tx.hdr.bth.opcode != crate::wire::Opcode::RcAcknowledge {
            seen += 1;
            if seen == 4 || seen == 4 + 17 + 9 {
                return Deliver::Drop;
            }
        }
        Deliver::Yes
    });
    let wr = send_wr(
        1,
        SendOp::RdmaWrite {
            remote_addr: kd.addr,
            rkey: kd.rkey,
        },
        &[sge(&ks, 0, 20 * 1024)],
    );
    n.a.qp.post_send(&wr).unwrap();
    n.run(10);
    assert_eq!(n.a.send_wcs()[0].status, WcStatus::Success);
    assert_eq!(bytes(&dst), bytes(&src));
    let (ca, cb) = (n.a.qp.counters(), n.b.qp.counters());
    assert_eq!(cb.sent_naks, 2, "{cb:?}");
    assert_eq!(ca.rcvd_seq_err, 2);
    assert_eq!(ca.local_ack_timeout_err + ca.rto_timeouts, 0);
}

#[test]
fn rto_adapts_to_the_measured_round_trip() {
    // 50 us one-way delay, QD 1 WRITEs of one 4 KiB packet: every round trip is
    // 2 x 50 us plus serialization of the request and the ACK.
    let cfg = LinkCfg {
        delay_ns: 50_000,
        wr_bytes: 4096,
        qd: 1,
        total_wrs: 64,
        ..Default::default()
    };
    let opts = Opts {
        cfg: RcConfig {
            min_rto: std::time::Duration::from_micros(1),
            ..Default::default()
        },
        ..opts4k()
    };
    let (rtt_ns, rto_ns) = {
        let mut ln = LinkNet::new(cfg, opts);
        let (_s, ks) = ln.net.mr(ln.net.a.pd, 4096, ALL, pattern(1));
        let (_d, kd) = ln.net.mr(ln.net.b.pd, 4096, ALL, |_| 0);
        let mut posted = 0;
        ln.run(100_000, |net| {
            if posted < 64 && net.a.send_wcs().len() == posted {
                let wr = send_wr(
                    posted as u64,
                    SendOp::RdmaWrite {
                        remote_addr: kd.addr,
                        rkey: kd.rkey,
                    },
                    &[sge(&ks, 0, 4096)],
                );
                net.a.qp.post_send(&wr).unwrap();
                posted += 1;
            }
        });
        assert_eq!(ln.net.a.send_wcs().len(), 64);
        let r = ln.net.a.qp.rtt();
        assert!(r.samples() >= 60, "{r:?}");
        (
            r.srtt().unwrap().as_nanos() as u64,
            ln.net.a.qp.rto().unwrap().as_nanos() as u64,
        )
    };
    // Request: 4096 + 28 header/ICRC bytes + 66 link bytes; ACK: 16 + 4 + 66.
    let expect = 2 * 50_000 + (4096 + 28 + 66) * 320 / 1000 + (16 + 4 + 66) * 320 / 1000;
    assert!(
        rtt_ns.abs_diff(expect) * 100 < expect,
        "SRTT {rtt_ns} ns, round trip {expect} ns"
    );
    // A steady RTT leaves RTTVAR near 0: the timeout sits just above SRTT, far below
    // the initial 1 ms and the IBTA 67 ms.
    assert!(
        rto_ns >= rtt_ns && rto_ns < rtt_ns + rtt_ns / 4,
        "RTO {rto_ns} ns"
    );
}

#[test]
fn adaptive_timer_repairs_a_tail_loss_long_before_the_ibta_timeout() {
    // QD 1 single-packet WRITEs on a 2 us link; the 20th request is dropped once. The
    // retransmission comes after ~max(min_rto, SRTT + 4 RTTVAR) = 200 us, not 67 ms.
    let cfg = LinkCfg {
        wr_bytes: 4096,
        qd: 1,
        total_wrs: 40,
        ..Default::default()
    };
    let run = |drop_one: bool, recovery_pkts: u32| {
        let opts = Opts {
            cfg: RcConfig {
                recovery_window_pkts: recovery_pkts,
                ..Default::default()
            },
            ..opts4k()
        };
        let mut ln = LinkNet::new(cfg, opts);
        if drop_one {
            ln.drop_a_to_b_nth(19);
        }
        let (_s, ks) = ln.net.mr(ln.net.a.pd, 4096, ALL, pattern(1));
        let (_d, kd) = ln.net.mr(ln.net.b.pd, 4096, ALL, |_| 0);
        let start = ln.net.now.0;
        let mut posted = 0;
        ln.run(100_000, |net| {
            if posted < 40 && net.a.send_wcs().len() == posted {
                let wr = send_wr(
                    posted as u64,
                    SendOp::RdmaWrite {
                        remote_addr: kd.addr,
                        rkey: kd.rkey,
                    },
                    &[sge(&ks, 0, 4096)],
                );
                net.a.qp.post_send(&wr).unwrap();
                posted += 1;
            }
        });
        let w = ln.net.a.send_wcs();
        assert_eq!(w.len(), 40);
        assert!(w.iter().all(|w| w.status == WcStatus::Success));
        let c = *ln.net.a.qp.counters();
        (ln.net.now.0 - start, c)
    };
    let (clean, _) = run(false, 16);
    let (lossy, c) = run(true, 16);
    assert_eq!((c.rto_timeouts, c.local_ack_timeout_err), (1, 0));
    let extra = lossy - clean;
    assert!(
        (200_000..T_IBTA_NS / 10).contains(&extra),
        "tail loss cost {extra} ns"
    );
}

#[test]
fn pacing_bounds_the_resend_burst() {
    // 1% loss on a 1 MiB window: after each sequence NAK, go-back-N resends at most
    // `recovery_window_pkts` packets at once; without pacing it resends a window's
    // worth in one burst.
    let cfg = LinkCfg {
        loss: 0.01,
        total_wrs: 48,
        ..Default::default()
    };
    let with = |pkts: u32| {
        let opts = Opts {
            cfg: RcConfig {
                recovery_window_pkts: pkts,
                ..Default::default()
            },
            ..opts4k()
        };
        LinkNet::write_stream(cfg, opts)
    };
    let paced = with(16);
    let unpaced = with(0);
    for st in [&paced, &unpaced] {
        assert!(st.statuses.iter().all(|s| *s == WcStatus::Success));
    }
    assert!(paced.max_burst_after_nak > 0);
    assert!(paced.max_burst_after_nak <= 16, "{paced:?}");
    assert!(unpaced.max_burst_after_nak > 64, "{unpaced:?}");
}

#[test]
fn fast_recovery_beats_plain_go_back_n() {
    // Same go-back-N wire behaviour; the adaptive timer and paced resend finish the
    // same lossy WRITE stream in less virtual time.
    let cfg = LinkCfg {
        loss: 0.01,
        total_wrs: 96,
        ..Default::default()
    };
    for seed in 1..=3 {
        let cfg = LinkCfg { seed, ..cfg };
        let plain = LinkNet::write_stream(cfg, plain_gbn());
        let fast = LinkNet::write_stream(cfg, opts4k());
        for st in [&plain, &fast] {
            assert_eq!(st.statuses.len(), 96);
            assert!(st.statuses.iter().all(|s| *s == WcStatus::Success));
        }
        assert!(
            fast.elapsed_ns < plain.elapsed_ns,
            "seed {seed}: {fast:?} vs {plain:?}"
        );
        assert_eq!(plain.a_counters.rto_timeouts, 0);
    }
}

#[test]
fn selective_retransmission_resends_less_and_finishes_sooner() {
    for loss in [0.001, 0.01] {
        let cfg = LinkCfg {
            loss,
            total_wrs: 96,
            ..Default::default()
        };
        let gbn = LinkNet::write_stream(cfg, opts4k());
        let sr = LinkNet::write_stream(
            LinkCfg {
                selective: true,
                ..cfg
            },
            opts4k(),
        );
        for st in [&gbn, &sr] {
            assert_eq!(st.statuses.len(), 96);
            assert!(st.statuses.iter().all(|s| *s == WcStatus::Success));
        }
        assert!(sr.a_sent < gbn.a_sent, "loss {loss}: {sr:?} vs {gbn:?}");
        assert!(sr.elapsed_ns < gbn.elapsed_ns, "loss {loss}");
    }
}

#[test]
fn selective_retransmission_resends_exactly_the_lost_packet() {
    // One request packet lost in the middle of a 32 MiB WRITE stream: with selective
    // retransmission exactly one packet is resent and nothing times out; go-back-N
    // resends everything queued behind it.
    let cfg = LinkCfg {
        drop_nth: Some(3000),
        total_wrs: 256,
        ..Default::default()
    };
    let ideal = 256 * 32;
    let sr = LinkNet::write_stream(
        LinkCfg {
            selective: true,
            ..cfg
        },
        opts4k(),
    );
    let gbn = LinkNet::write_stream(cfg, opts4k());
    for st in [&sr, &gbn] {
        assert!(st.statuses.iter().all(|s| *s == WcStatus::Success));
    }
    assert_eq!(sr.a_sent, ideal + 1, "{sr:?}");
    assert_eq!(sr.a_counters.sr_retransmits, 1);
    assert_eq!(
        sr.a_counters.rto_timeouts + sr.a_counters.local_ack_timeout_err,
        0
    );
    assert!(gbn.a_sent > ideal + 100, "{gbn:?}");
    assert!(sr.elapsed_ns < gbn.elapsed_ns);
}

#[test]
fn dead_peer_fails_every_wr_within_the_retry_budget() {
    for selective in [false, true] {
        let cfg = LinkCfg {
            selective,
            ..Default::default()
        };
        let mut ln = LinkNet::new(cfg, opts4k());
        let (_s, ks) = ln.net.mr(ln.net.a.pd, 1 << 20, ALL, pattern(1));
        let (_d, kd) = ln.net.mr(ln.net.b.pd, 1 << 20, ALL, |_| 0);
        let write = |id: u64, i: u64| {
            send_wr(
                id,
                SendOp::RdmaWrite {
                    remote_addr: kd.addr + i * 65536,
                    rkey: kd.rkey,
                },
                &[sge(&ks, i * 65536, 65536)],
            )
        };
        // Warm up (round-trip samples), then the peer dies with 8 WRs outstanding.
        for i in 0..8 {
            ln.net.a.qp.post_send(&write(i, i)).unwrap();
        }
        ln.run(1_000_000, |_| {});
        assert_eq!(ln.net.a.send_wcs().len(), 8);
        assert!(ln.net.a.qp.rtt().samples() > 0);
        ln.blackhole = true;
        let died = ln.net.now.0;
        for i in 0..8 {
            ln.net.a.qp.post_send(&write(100 + i, i)).unwrap();
        }
        ln.run(1_000_000, |_| {});
        let w = ln.net.a.send_wcs();
        let tail: Vec<_> = w[8..].iter().map(|w| (w.wr_id, w.status)).collect();
        let mut expect = vec![(100, WcStatus::RetryExcErr)];
        expect.extend((101..108).map(|i| (i, WcStatus::WrFlushErr)));
        assert_eq!(tail, expect, "selective {selective}");
        assert_eq!(ln.net.a.qp.state(), QpState::Error);
        let c = ln.net.a.qp.counters();
        // retry_cnt 7: eight IBTA expiries, the last one fails the QP ...
        assert_eq!(c.local_ack_timeout_err, 8);
        assert_eq!(c.retry_exceeded_err, 1);
        assert!(c.rto_timeouts > 0);
        // ... so the failure comes within (retry_cnt + 1) x the local ACK timeout of
        // the last packet sent, and not before 8 full timeouts since the peer died.
        let took = ln.net.now.0 - died;
        assert!(
            (8 * T_IBTA_NS..=8 * T_IBTA_NS + 1_000_000).contains(&took),
            "failed after {took} ns"
        );
        assert_eq!(ln.net.a.qp.poll_timeout(), None);
    }
}

/// Arbitrary request packets around the expected PSN never panic a QP in selective
/// mode, and whatever it keeps stays within `sr_buffer_bytes`.
#[test]
fn selective_responder_survives_arbitrary_packets() {
    use crate::wire::{Aeth, Bth, Opcode, Packet, PacketHeaders, Reth};
    use rand::{Rng, SeedableRng};
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    let data = vec![5u8; 5000];
    let mut kept = 0;
    for round in 0..100 {
        let mut n = Net::new(Opts {
            srq: round % 2 == 0,
            cfg: RcConfig {
                sr_buffer_bytes: 64 * 1024,
                ..Default::default()
            },
            ..Default::default()
        });
        for qp in [&mut n.a.qp, &mut n.b.qp] {
            qp.modify(&QpAttr {
                selective_retransmit: Some(true),
                ..Default::default()
            })
            .unwrap();
        }
        let (_m, k) = n.mr(n.b.pd, 8192, ALL, |_| 0);
        for i in 0..4 {
            n.b.post_recv(RecvWr {
                wr_id: i,
                sg_list: SgList::one(sge(&k, 0, 8192)),
            });
        }
        for _ in 0..300 {
            let Some(op) = Opcode::from_u8(rng.gen_range(0..0x18)) else {
                continue;
            };
            let psn = (0x1000 + rng.gen_range(0..300) - 20) & 0xFF_FFFF;
            let mut hdr = PacketHeaders::new(Bth::new(op, 0x12, psn, rng.gen()));
            if rng.gen_bool(0.6) {
                hdr.reth = Some(Reth {
                    va: k.addr + rng.gen_range(0..9000),
                    rkey: if rng.gen_bool(0.8) { k.rkey } else { rng.gen() },
                    dma_len: rng.gen_range(0..10_000),
                });
            }
            if rng.gen_bool(0.2) {
                hdr.aeth = Some(Aeth {
                    syndrome: rng.gen(),
                    msn: rng.gen(),
                });
            }
            if rng.gen_bool(0.3) {
                hdr.imm = Some(rng.gen());
            }
            let len = [0, 1, 1023, 1024, 4096][rng.gen_range(0..5)];
            let pkt = Packet {
                hdr,
                payload: &data[..len],
            };
            let mut env = RcEnv {
                keys: &n.keys,
                srq: n.b.srq.as_mut(),
            };
            n.b.qp.handle_packet(n.now, &pkt, &mut env);
            while n.b.qp.poll_transmit(n.now, &mut env).is_some() {}
            assert!(n.b.qp.resp.kept_bytes() <= 64 * 1024);
        }
        kept += n.b.qp.counters().sr_buffered;
        n.run(5);
    }
    // The packets did reach the out-of-order buffer.
    assert!(kept > 1000, "{kept}");
}

/// Sustained loss with a peer that always answers: the adaptive timer's back-off must
/// not ratchet up to the IBTA ceiling. Under 20% loss in both directions almost every
/// acknowledgement follows some resend, so Karn leaves no valid round-trip sample for
/// long stretches; a back-off that only a sample could end pinned the timeout at the
/// local ACK timeout, so every tail loss then waited a full IBTA period and used up a
/// retry (one resend per period: eight unlucky ones in a row failed a live connection
/// with IBV_WC_RETRY_EXC_ERR). Forward progress now undoes one doubling, so the IBTA
/// timer, the give-up timer, never has to fire here (before the fix these four seeds
/// took 11 IBTA expiries selective and 77 go-back-N, and 25x / 39x the time).
#[test]
fn sustained_loss_does_not_pin_the_timeout_at_the_ibta_ceiling() {
    for selective in [true, false] {
        for seed in 1..=4 {
            let cfg = LinkCfg {
                loss: 0.2,
                seed,
                selective,
                wr_bytes: 16 * 1024,
                qd: 16,
                total_wrs: 96,
                // The back-off under test needs a timer that adapts: a round trip
                // measured before the loss starts (before it, the IBTA timer resends).
                loss_after_sample: true,
                ..Default::default()
            };
            let s = LinkNet::write_stream(cfg, opts4k());
            let ctx = format!("seed {seed} selective {selective}: {:?}", s.a_counters);
            assert_eq!(s.statuses.len(), 96, "{ctx}");
            assert!(
                s.statuses.iter().all(|&st| st == WcStatus::Success),
                "{ctx}"
            );
            assert!(s.a_counters.rto_timeouts > 0, "{ctx}");
            assert_eq!(s.a_counters.local_ack_timeout_err, 0, "{ctx}");
        }
    }
}
