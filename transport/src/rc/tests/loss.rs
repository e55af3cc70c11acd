//! Loss, duplication, NAKs, timeouts and RNR.
use rand::{Rng, SeedableRng};

use super::*;
use crate::wire::Opcode;

/// A 5-packet WRITE (MTU 1024) with packet number `drop` (0-based) of A->B dropped;
/// with `warm`, after a 1-byte WRITE that gives A a round-trip sample.
fn write5_dropping(drop: usize, warm: bool) -> Net {
    let mut n = Net::new(Opts::default());
    let (src, ks) = n.mr(n.a.pd, 5000, ALL, pattern(5));
    let (dst, kd) = n.mr(n.b.pd, 5000, ALL, |_| 0);
    if warm {
        let (_, kw) = n.mr(n.b.pd, 1, ALL, |_| 0);
        let wr = SendOp::RdmaWrite {
            remote_addr: kw.addr,
            rkey: kw.rkey,
        };
        n.a.qp
            .post_send(&send_wr(0, wr, &[sge(&ks, 0, 1)]))
            .unwrap();
        n.pump();
        assert_eq!(n.a.qp.rtt().samples(), 1);
        n.a.wcs.clear();
    }
    let mut seen = 0;
    n.filter = Box::new(move |d, tx| {
        if d == Dir::AtoB && tx.hdr.bth.opcode != Opcode::RcAcknowledge {
            seen += 1;
            if seen == drop + 1 {
                return Deliver::Drop;
            }
        }
        Deliver::Yes
    });
    n.a.qp
        .post_send(&send_wr(
            1,
            SendOp::RdmaWrite {
                remote_addr: kd.addr,
                rkey: kd.rkey,
            },
            &[sge(&ks, 0, 5000)],
        ))
        .unwrap();
    n.run(10);
    assert_eq!(n.a.send_wcs().len(), 1);
    assert_eq!(n.a.send_wcs()[0].status, WcStatus::Success);
    assert_eq!(bytes(&dst), bytes(&src));
    n
}

#[test]
fn dropped_middle_packet_recovers_by_sequence_nak() {
    let n = write5_dropping(1, false);
    let (ca, cb) = (n.a.qp.counters(), n.b.qp.counters());
    assert_eq!(cb.out_of_seq_request, 3);
    assert_eq!(cb.sent_naks, 1);
    assert_eq!(ca.rcvd_seq_err, 1);
    assert_eq!(ca.local_ack_timeout_err, 0);
    // Packets 1..4 resent: 5 + 4 sent.
    assert_eq!(ca.sent_pkts, 9);
}

#[test]
fn dropped_last_packet_recovers_by_timeout() {
    let n = write5_dropping(4, true);
    let (ca, cb) = (n.a.qp.counters(), n.b.qp.counters());
    // The adaptive timer (from the warm-up's round trip: its 200 us floor) fires long
    // before the IBTA local ACK timeout (timeout 14: 67 ms), so no retry is used up.
    assert_eq!(ca.rto_timeouts, 1);
    assert_eq!(ca.local_ack_timeout_err, 0);
    assert_eq!(ca.rcvd_seq_err, 0);
    assert_eq!(cb.out_of_seq_request, 0);
    // The expiry's tail loss probe resends packet 4 alone, which repairs the loss:
    // nothing arrives twice (before: go-back-N from the oldest unacknowledged PSN sent
    // packets 0..3, never acknowledged for want of AckReq, again as duplicates).
    assert_eq!(cb.duplicate_request, 0);
    assert_eq!(
        ca.sent_pkts,
        1 + 5 + 1,
        "warm-up, 5 packets, packet 4 again"
    );
    assert_eq!(ca.rto_probes, 1);
    assert_eq!(
        ca.spurious_rto, 0,
        "packet 4 was lost: not a spurious expiry"
    );
}

/// Before any round trip was measured the adaptive timer does not resend (RFC 6298
/// (2.1): its initial 1 s is clamped to the IBTA timeout), so the loss of a new
/// connection's first packets is repaired by the IBTA timer, using up one retry.
#[test]
fn dropped_last_packet_before_any_round_trip_waits_for_the_ibta_timer() {
    let n = write5_dropping(4, false);
    let ca = n.a.qp.counters();
    assert_eq!(
        (ca.rto_timeouts, ca.local_ack_timeout_err),
        (0, 1),
        "{ca:?}"
    );
    assert_eq!(n.a.qp.rtt().samples(), 0, "a resent packet gives no sample");
}

#[test]
fn duplicate_is_acked_not_reexecuted() {
    let mut n = Net::new(Opts::default());
    let (_src, ks) = n.mr(n.a.pd, 100, ALL, pattern(5));
    let (dst, kd) = n.mr(n.b.pd, 100, ALL, |_| 0);
    n.filter = Box::new(|d, tx| {
        if d == Dir::AtoB && tx.hdr.bth.opcode == Opcode::RcSendOnly {
            Deliver::Twice
        } else {
            Deliver::Yes
        }
    });
    n.b.post_recv(RecvWr {
        wr_id: 1,
        sg_list: SgList::one(sge(&kd, 0, 100)),
    });
    n.b.post_recv(RecvWr {
        wr_id: 2,
        sg_list: SgList::one(sge(&kd, 0, 100)),
    });
    n.a.qp
        .post_send(&send_wr(1, SendOp::Send, &[sge(&ks, 0, 100)]))
        .unwrap();
    n.run(0);
    assert_eq!(n.b.qp.counters().duplicate_request, 1);
    assert_eq!(n.b.recv_wcs().len(), 1);
    assert_eq!(n.b.qp.recv_queue_len(), 1);
    assert_eq!(n.a.send_wcs()[0].status, WcStatus::Success);
    assert_eq!(bytes(&dst)[99], pattern(5)(99));
}

#[test]
fn rnr_then_success_after_posting() {
    let mut n = Net::new(Opts {
        srq: true,
        ..Default::default()
    });
    let (src, ks) = n.mr(n.a.pd, 3000, ALL, pattern(8));
    let (dst, kd) = n.mr(n.b.pd, 3000, ALL, |_| 0);
    n.a.qp
        .post_send(&send_wr(1, SendOp::Send, &[sge(&ks, 0, 3000)]))
        .unwrap();
    n.pump();
    assert_eq!(n.b.qp.counters().send_rnr_err, 1);
    assert_eq!(n.a.qp.counters().rcvd_rnr_err, 1);
    assert!(n.a.send_wcs().is_empty());
    // RNR timer code 1 = 10 us.
    assert_eq!(
        n.a.qp.poll_timeout(),
        Some(n.now + std::time::Duration::from_micros(10))
    );
    n.b.post_recv(RecvWr {
        wr_id: 7,
        sg_list: SgList::one(sge(&kd, 0, 3000)),
    });
    n.run(3);
    assert_eq!(n.a.send_wcs()[0].status, WcStatus::Success);
    assert_eq!(n.b.recv_wcs()[0].byte_len, 3000);
    assert_eq!(bytes(&dst), bytes(&src));
}

#[test]
fn rnr_retry_exhausted() {
    let mut n = Net::new(Opts {
        rnr_retry: 2,
        ..Default::default()
    });
    n.a.qp.post_send(&send_wr(1, SendOp::Send, &[])).unwrap();
    n.a.qp.post_send(&send_wr(2, SendOp::Send, &[])).unwrap();
    n.run(10);
    let s = n.a.send_wcs();
    assert_eq!(
        s.iter().map(|w| w.status).collect::<Vec<_>>(),
        vec![WcStatus::RnrRetryExcErr, WcStatus::WrFlushErr]
    );
    assert_eq!(n.a.qp.counters().rcvd_rnr_err, 3);
    assert_eq!(n.a.qp.counters().retry_rnr_exceeded_err, 1);
    assert_eq!(n.a.qp.state(), QpState::Error);
}

/// A peer that answered once (A has a round-trip sample) and then died.
#[test]
fn dead_peer_retry_exceeded_after_eight_timeouts() {
    let mut n = Net::new(Opts::default());
    let (_, k) = n.mr(n.b.pd, 1, ALL, |_| 0);
    let wr = SendOp::RdmaWrite {
        remote_addr: k.addr,
        rkey: k.rkey,
    };
    n.a.qp.post_send(&send_wr(9, wr, &[])).unwrap();
    n.pump();
    assert_eq!(n.a.qp.rtt().samples(), 1);
    n.a.wcs.clear();
    let warm = *n.a.qp.counters();
    n.filter = Box::new(|d, _| {
        if d == Dir::AtoB {
            Deliver::Drop
        } else {
            Deliver::Yes
        }
    });
    for i in 0..3 {
        n.a.qp.post_send(&send_wr(i, SendOp::Send, &[])).unwrap();
    }
    n.run(100);
    let s = n.a.send_wcs();
    assert_eq!(
        s.iter().map(|w| (w.wr_id, w.status)).collect::<Vec<_>>(),
        vec![
            (0, WcStatus::RetryExcErr),
            (1, WcStatus::WrFlushErr),
            (2, WcStatus::WrFlushErr)
        ]
    );
    let c = n.a.qp.counters();
    // retry_cnt 7 is a count: the 8th IBTA local ACK timeout fails the QP.
    assert_eq!(c.local_ack_timeout_err, 8);
    assert_eq!(c.retry_exceeded_err, 1);
    // The adaptive timer resends in between (backing off to the IBTA timeout), without
    // using up retries: 3 packets at first, then one go-back-N round of 3 per expiry
    // except the last IBTA one; the first adaptive expiry resends only the last packet
    // (a tail loss probe), the later ones, without progress since, all three.
    assert!(c.rto_timeouts > 0);
    assert_eq!(
        c.sent_pkts - warm.sent_pkts,
        3 * (1 + c.rto_timeouts + 7) - 2
    );
    assert_eq!(c.rto_probes, 1);
    // The probe is no go-back-N restart; every other expiry is.
    assert_eq!(c.completer_retry_err, c.rto_timeouts - 1 + 7);
    assert_eq!(n.a.qp.state(), QpState::Error);
    assert_eq!(n.a.qp.poll_timeout(), None);
}

/// A peer dead from the first packet: no round trip was ever measured, so only the
/// IBTA timer resends, and the eighth expiry fails the QP as before.
#[test]
fn peer_dead_from_the_start_gets_only_ibta_resends() {
    let mut n = Net::new(Opts::default());
    n.filter = Box::new(|d, _| {
        if d == Dir::AtoB {
            Deliver::Drop
        } else {
            Deliver::Yes
        }
    });
    for i in 0..3 {
        n.a.qp.post_send(&send_wr(i, SendOp::Send, &[])).unwrap();
    }
    n.run(100);
    let statuses: Vec<_> = n.a.send_wcs().iter().map(|w| w.status).collect();
    assert_eq!(
        statuses,
        [
            WcStatus::RetryExcErr,
            WcStatus::WrFlushErr,
            WcStatus::WrFlushErr
        ]
    );
    let c = n.a.qp.counters();
    assert_eq!((c.local_ack_timeout_err, c.rto_timeouts), (8, 0), "{c:?}");
    assert_eq!(c.sent_pkts, 3 * (1 + 7));
}

#[test]
fn lost_read_response_is_requested_again() {
    let mut n = Net::new(Opts::default());
    let (src, ks) = n.mr(n.b.pd, 10_000, ALL, pattern(4));
    let (dst, kd) = n.mr(n.a.pd, 10_000, ALL, |_| 0);
    let mut k = 0;
    n.filter = Box::new(move |d, tx| {
        if d == Dir::BtoA && tx.hdr.bth.opcode == Opcode::RcRdmaReadResponseMiddle {
            k += 1;
            if k == 3 {
                return Deliver::Drop;
            }
        }
        Deliver::Yes
    });
    n.a.qp
        .post_send(&send_wr(
            1,
            SendOp::RdmaRead {
                remote_addr: ks.addr,
                rkey: ks.rkey,
            },
            &[sge(&kd, 0, 10_000)],
        ))
        .unwrap();
    n.run(5);
    assert_eq!(n.a.send_wcs()[0].status, WcStatus::Success);
    assert_eq!(bytes(&dst), bytes(&src));
    assert_eq!(n.b.qp.counters().duplicate_request, 1);
    assert_eq!(n.a.qp.counters().local_ack_timeout_err, 0);
}

/// A READ asked for in segments (larger than the READ budget) loses a response inside a
/// segment: the request asked again from there ends where that segment did (the
/// responder answers it as a duplicate, with the tail of the segment), and the READ
/// completes with every byte, without a timeout.
#[test]
fn lost_response_inside_a_read_segment_is_requested_again_up_to_its_end() {
    let mut n = Net::new(Opts {
        cfg: RcConfig {
            max_read_inflight_bytes: 8192,
            ..Default::default()
        },
        ..Default::default()
    });
    let (src, ks) = n.mr(n.b.pd, 40_000, ALL, pattern(4));
    let (dst, kd) = n.mr(n.a.pd, 40_000, ALL, |_| 0);
    let mut k = 0;
    let requests = std::rc::Rc::new(std::cell::RefCell::new(Vec::new()));
    let seen = requests.clone();
    n.filter = Box::new(move |d, tx| {
        if d == Dir::AtoB && tx.hdr.bth.opcode == Opcode::RcRdmaReadRequest {
            seen.borrow_mut().push(tx.hdr.reth.unwrap().dma_len);
        }
        if d == Dir::BtoA && tx.hdr.bth.opcode == Opcode::RcRdmaReadResponseMiddle {
            k += 1;
            // Segments of 8 packets of 1 KiB: First, 6 Middle, Last. The 9th Middle is
            // packet 3 of the second segment (PSNs 8..15 of the READ).
            if k == 9 {
                return Deliver::Drop;
            }
        }
        Deliver::Yes
    });
    n.a.qp
        .post_send(&send_wr(
            1,
            SendOp::RdmaRead {
                remote_addr: ks.addr,
                rkey: ks.rkey,
            },
            &[sge(&kd, 0, 40_000)],
        ))
        .unwrap();
    n.run(5);
    assert_eq!(n.a.send_wcs()[0].status, WcStatus::Success);
    assert_eq!(bytes(&dst), bytes(&src));
    assert_eq!(n.b.qp.counters().duplicate_request, 1);
    assert_eq!(n.a.qp.counters().local_ack_timeout_err, 0);
    // Segment 2 lost its packet 3: asked again for its last 5 packets, then on as before.
    assert_eq!(*requests.borrow(), vec![8192, 8192, 5120, 8192, 8192, 7232]);
}

#[test]
fn lost_last_read_response_recovers_by_timeout() {
    let mut n = Net::new(Opts::default());
    let (src, ks) = n.mr(n.b.pd, 3000, ALL, pattern(4));
    let (dst, kd) = n.mr(n.a.pd, 3000, ALL, |_| 0);
    let mut dropped = false;
    n.filter = Box::new(move |d, tx| {
        if d == Dir::BtoA && tx.hdr.bth.opcode == Opcode::RcRdmaReadResponseLast && !dropped {
            dropped = true;
            return Deliver::Drop;
        }
        Deliver::Yes
    });
    n.a.qp
        .post_send(&send_wr(
            1,
            SendOp::RdmaRead {
                remote_addr: ks.addr,
                rkey: ks.rkey,
            },
            &[sge(&kd, 0, 3000)],
        ))
        .unwrap();
    n.run(5);
    assert_eq!(n.a.send_wcs()[0].status, WcStatus::Success);
    assert_eq!(bytes(&dst), bytes(&src));
    assert_eq!(n.a.qp.counters().rto_timeouts, 1);
    assert_eq!(n.a.qp.counters().local_ack_timeout_err, 0);
}

/// Random loss and duplication in both directions over a mixed workload.
#[test]
fn random_loss_soak() {
    for seed in 0..8u64 {
        soak(seed, true, [false, false]);
        soak(seed, false, [false, false]);
    }
}

/// The same soak with selective retransmission negotiated on both QPs.
#[test]
fn random_loss_soak_selective() {
    for seed in 0..8u64 {
        soak(seed, true, [true, true]);
        soak(seed, false, [true, true]);
    }
}

/// Selective retransmission on one side only (a connection layer bug, never the result
/// of the negotiation): still exactly-once and byte-exact, since every NAK names the
/// responder's expected PSN as in IBTA go-back-N.
#[test]
fn random_loss_soak_mismatched_modes() {
    for seed in 0..4u64 {
        soak(seed, false, [true, false]);
        soak(seed, false, [false, true]);
    }
}

/// With `fence`, READs and WRITEs share B's target region and every WR is fenced;
/// without, READs pipeline freely from a separate, unchanging region. With
/// `selective`, A (the requester) and B (the responder) use selective retransmission.
fn soak(seed: u64, fence: bool, selective: [bool; 2]) {
    {
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let mut n = Net::new(Opts {
            srq: seed & 1 == 0,
            psn_a: 0xFF_FF00,
            timeout: 10,
            ..Default::default()
        });
        for (qp, on) in [(&mut n.a.qp, selective[0]), (&mut n.b.qp, selective[1])] {
            qp.modify(&QpAttr {
                selective_retransmit: Some(on),
                ..Default::default()
            })
            .unwrap();
        }
        let mut r2 = rand::rngs::StdRng::seed_from_u64(seed + 100);
        n.filter = Box::new(move |_, _| match r2.gen_range(0..100) {
            0..=4 => Deliver::Drop,
            5..=7 => Deliver::Twice,
            _ => Deliver::Yes,
        });
        let (src, ks) = n.mr(n.a.pd, 256 * 1024, ALL, pattern(seed as u8));
        let (rdst, krd) = n.mr(n.b.pd, 256 * 1024, ALL, |_| 0);
        let (back, kb) = n.mr(n.a.pd, 256 * 1024, ALL, |_| 0);
        let (rbuf, krb) = n.mr(n.b.pd, 64 * 1024, ALL, |_| 0);
        let (rsrc, krs) = n.mr(n.b.pd, 256 * 1024, ALL, pattern(seed as u8 ^ 0x55));
        for i in 0..20u64 {
            n.b.post_recv(RecvWr {
                wr_id: 1000 + i,
                sg_list: SgList::one(sge(&krb, 0, 64 * 1024)),
            });
        }
        let mut sends = 0;
        // Model of B's target and A's READ sink, applied in posting order (the
        // responder executes in PSN order, so a READ sees every earlier WRITE).
        let mut model = vec![0u8; 256 * 1024];
        let mut back_model = vec![0u8; 256 * 1024];
        let src_bytes = bytes(&src).to_vec();
        for i in 0..30u64 {
            let off = rng.gen_range(0..8) * 32 * 1024;
            let len = rng.gen_range(1..32 * 1024) as u32;
            let (o, l) = (off as usize, len as usize);
            let op = match i % 3 {
                0 => {
                    model[o..o + l].copy_from_slice(&src_bytes[o..o + l]);
                    SendOp::RdmaWrite {
                        remote_addr: krd.addr + off,
                        rkey: krd.rkey,
                    }
                }
                1 if fence => {
                    back_model[o..o + l].copy_from_slice(&model[o..o + l]);
                    SendOp::RdmaRead {
                        remote_addr: krd.addr + off,
                        rkey: krd.rkey,
                    }
                }
                1 => {
                    back_model[o..o + l].copy_from_slice(&bytes(&rsrc)[o..o + l]);
                    SendOp::RdmaRead {
                        remote_addr: krs.addr + off,
                        rkey: krs.rkey,
                    }
                }
                _ => {
                    sends += 1;
                    SendOp::Send
                }
            };
            let s = if matches!(op, SendOp::RdmaRead { .. }) {
                sge(&kb, off, len)
            } else {
                sge(&ks, off, len)
            };
            let mut wr = send_wr(i, op, &[s]);
            // A WRITE after a READ of the same bytes needs FENCE: a retransmitted READ
            // re-reads memory (IBTA §9.7.5.1.4, §10.8.3.3).
            if fence {
                wr.flags |= SendFlags::FENCE;
            }
            n.a.qp.post_send(&wr).unwrap();
        }
        n.run(2000);
        let s = n.a.send_wcs();
        assert_eq!(s.len(), 30, "seed {seed}");
        assert!(
            s.iter().all(|w| w.status == WcStatus::Success),
            "seed {seed} {selective:?}: {s:?}"
        );
        assert_eq!(
            s.iter().map(|w| w.wr_id).collect::<Vec<_>>(),
            (0..30).collect::<Vec<_>>()
        );
        assert_eq!(n.b.recv_wcs().len(), sends, "seed {seed}");
        assert!(n.b.recv_wcs().iter().all(|w| w.status == WcStatus::Success));
        assert!(bytes(&rdst) == &model[..], "seed {seed}: WRITE data");
        assert!(bytes(&back) == &back_model[..], "seed {seed}: READ data");
        let _ = &rbuf;
        assert!(
            n.a.qp.counters().completer_retry_err > 0,
            "seed {seed}: loss exercised"
        );
        assert_eq!(n.a.qp.state(), QpState::Rts);
        assert_eq!(n.b.qp.state(), QpState::Rts);
    }
}

/// Each NAK code ends the WR it names with the ibverbs status IBTA Table 43 implies;
/// the QP goes to Error and the next WR is flushed.
#[test]
fn nak_codes_map_to_completion_statuses() {
    use crate::wire::{Aeth, Packet};
    for (code, status) in [
        (1u8, WcStatus::RemInvReqErr),
        (2, WcStatus::RemAccessErr),
        (3, WcStatus::RemOpErr),
        (4, WcStatus::RemInvRdReqErr),
        (9, WcStatus::BadRespErr),
    ] {
        let mut n = Net::new(Opts::default());
        n.filter = Box::new(|_, _| Deliver::Drop);
        for i in 0..2 {
            n.a.qp.post_send(&send_wr(i, SendOp::Send, &[])).unwrap();
        }
        n.pump();
        assert!(n.a.send_wcs().is_empty());
        let mut hdr = n.b.qp.headers(Opcode::RcAcknowledge, 0x1000, false, 0);
        hdr.aeth = Some(Aeth {
            syndrome: 0x60 | code,
            msn: 0,
        });
        let pkt = Packet { hdr, payload: &[] };
        let mut env = RcEnv {
            keys: &n.keys,
            srq: None,
        };
        n.a.qp.handle_packet(n.now, &pkt, &mut env);
        n.collect();
        let s: Vec<_> = n.a.send_wcs().iter().map(|w| (w.wr_id, w.status)).collect();
        assert_eq!(
            s,
            vec![(0, status), (1, WcStatus::WrFlushErr)],
            "code {code}"
        );
        assert_eq!(n.a.qp.state(), QpState::Error);
        assert_eq!(n.a.qp.counters().send_err, 1);
        assert_eq!(n.a.qp.poll_timeout(), None);
    }
}

/// `timeout` 0 means no local ACK timer (IBTA §9.7.6.1.3): with every request lost,
/// nothing is ever resent or failed, and no timer is armed.
#[test]
fn timeout_zero_arms_no_timer() {
    let mut n = Net::new(Opts {
        timeout: 0,
        ..Default::default()
    });
    n.filter = Box::new(|d, _| {
        if d == Dir::AtoB {
            Deliver::Drop
        } else {
            Deliver::Yes
        }
    });
    n.a.qp.post_send(&send_wr(1, SendOp::Send, &[])).unwrap();
    n.run(10);
    assert_eq!(n.a.qp.poll_timeout(), None);
    assert_eq!(n.a.qp.rto(), None);
    assert!(n.a.send_wcs().is_empty());
    assert_eq!(n.a.qp.counters().sent_pkts, 1);
    assert_eq!(n.a.qp.state(), QpState::Rts);
}

/// `retry_cnt` 0: the first local ACK timeout already fails the WR.
#[test]
fn retry_cnt_zero_fails_at_the_first_ibta_timeout() {
    let mut n = Net::new(Opts {
        retry_cnt: 0,
        ..Default::default()
    });
    n.filter = Box::new(|d, _| {
        if d == Dir::AtoB {
            Deliver::Drop
        } else {
            Deliver::Yes
        }
    });
    let start = n.now;
    n.a.qp.post_send(&send_wr(1, SendOp::Send, &[])).unwrap();
    n.run(100);
    assert_eq!(n.a.send_wcs()[0].status, WcStatus::RetryExcErr);
    let c = n.a.qp.counters();
    assert_eq!((c.local_ack_timeout_err, c.retry_exceeded_err), (1, 1));
    // One IBTA timeout (timeout 14) after the only transmission.
    assert_eq!(n.now.since(start), crate::rc::ack_timeout(14).unwrap());
}

/// `rnr_retry` 7 retries forever: 41 RNR NAKs later the SEND still waits, and goes
/// through once a receive is posted.
#[test]
fn rnr_retry_seven_is_forever() {
    let mut n = Net::new(Opts::default());
    n.a.qp.post_send(&send_wr(1, SendOp::Send, &[])).unwrap();
    // The first attempt, then one per RNR wait (40 timer rounds).
    n.run(39);
    assert_eq!(n.a.qp.counters().rcvd_rnr_err, 41);
    assert!(n.a.send_wcs().is_empty());
    assert_eq!(n.a.qp.state(), QpState::Rts);
    n.b.post_recv(RecvWr {
        wr_id: 9,
        sg_list: SgList::new(),
    });
    n.run(3);
    assert_eq!(n.a.send_wcs()[0].status, WcStatus::Success);
    assert_eq!(n.b.recv_wcs()[0].wr_id, 9);
}
