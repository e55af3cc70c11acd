//! Remote access checks, memory windows, SEND with Invalidate, local errors and
//! malformed input.
use rand::{Rng, SeedableRng};

use super::*;
use crate::wire::{Aeth, Bth, Opcode, Packet, PacketHeaders, Reth};

#[derive(Clone, Copy, Debug)]
enum Case {
    WrongKey,
    WrongTag,
    OutOfRange,
    Overflow,
    MissingRight,
    OtherPd,
    Deregistered,
    InvalidatedMw,
    MwOtherQp,
}

const CASES: [Case; 9] = [
    Case::WrongKey,
    Case::WrongTag,
    Case::OutOfRange,
    Case::Overflow,
    Case::MissingRight,
    Case::OtherPd,
    Case::Deregistered,
    Case::InvalidatedMw,
    Case::MwOtherQp,
];

/// Runs one READ or WRITE of 100 bytes from A against B's target under `case`.
fn access_case(case: Case, read: bool) {
    let mut n = Net::new(Opts::default());
    let (pa, pb) = (n.a.pd, n.b.pd);
    let right = if read {
        AccessFlags::REMOTE_READ
    } else {
        AccessFlags::REMOTE_WRITE
    };
    let flags = match case {
        Case::MissingRight => ALL - right,
        _ => ALL,
    };
    let pd = if matches!(case, Case::OtherPd) {
        n.keys.alloc_pd()
    } else {
        pb
    };
    let (target, kt) = n.mr(pd, 4096, flags, pattern(0x5A));
    let (local, kl) = n.mr(pa, 4096, ALL, |_| 0xC3);
    let (mut rkey, mut va) = (kt.rkey, kt.addr + 100);
    match case {
        Case::WrongKey => rkey = 0x00AB_CD00 | (kt.rkey & 0xFF),
        Case::WrongTag => rkey = kt.rkey ^ 0x40,
        Case::OutOfRange => va = kt.addr + 4096 - 99,
        Case::Overflow => va = u64::MAX - 50,
        Case::Deregistered => n.keys.dereg_mr(kt.lkey).unwrap(),
        Case::InvalidatedMw | Case::MwOtherQp => {
            let mw = n.keys.alloc_mw(pb).unwrap();
            rkey = inc_rkey(mw);
            let qpn = if matches!(case, Case::MwOtherQp) {
                0x99
            } else {
                n.b.qp.qpn()
            };
            n.keys
                .bind_mw(
                    pb,
                    qpn,
                    mw,
                    rkey,
                    kt.lkey,
                    kt.addr,
                    4096,
                    AccessFlags::REMOTE_READ | AccessFlags::REMOTE_WRITE,
                )
                .unwrap();
            if matches!(case, Case::InvalidatedMw) {
                n.keys.invalidate(pb, None, rkey).unwrap();
            }
        }
        _ => {}
    }
    let op = if read {
        SendOp::RdmaRead {
            remote_addr: va,
            rkey,
        }
    } else {
        SendOp::RdmaWrite {
            remote_addr: va,
            rkey,
        }
    };
    n.a.qp
        .post_send(&send_wr(1, op, &[sge(&kl, 0, 100)]))
        .unwrap();
    n.a.qp.post_send(&send_wr(2, SendOp::Send, &[])).unwrap();
    n.run(3);
    let s = n.a.send_wcs();
    let got: Vec<_> = s.iter().map(|w| (w.wr_id, w.status)).collect();
    assert_eq!(
        got,
        vec![(1, WcStatus::RemAccessErr), (2, WcStatus::WrFlushErr)],
        "{case:?} read={read}"
    );
    assert_eq!(n.b.qp.state(), QpState::Error, "{case:?}");
    assert_eq!(n.a.qp.state(), QpState::Error, "{case:?}");
    let p = pattern(0x5A);
    assert!(
        bytes(&target).iter().enumerate().all(|(i, &b)| b == p(i)),
        "{case:?}: target changed"
    );
    assert!(
        bytes(&local).iter().all(|&b| b == 0xC3),
        "{case:?}: local sink changed"
    );
}

#[test]
fn remote_access_matrix_write() {
    for c in CASES {
        access_case(c, false);
    }
}

#[test]
fn remote_access_matrix_read() {
    for c in CASES {
        access_case(c, true);
    }
}

/// B binds a window over 100 bytes of its MR (through its send queue) and hands the
/// rkey to A.
fn bound_window(n: &mut Net) -> (Arc<MrMemory>, u64, u32) {
    let (target, kt) = n.mr(n.b.pd, 4096, ALL, |_| 0);
    let mw = n.keys.alloc_mw(n.b.pd).unwrap();
    let rkey = inc_rkey(mw);
    let op = SendOp::BindMw {
        mw_handle: mw,
        rkey,
        mr_lkey: kt.lkey,
        addr: kt.addr + 100,
        length: 100,
        access: AccessFlags::REMOTE_WRITE,
    };
    n.b.qp.post_send(&send_wr(50, op, &[])).unwrap();
    n.run(0);
    let w = n.b.send_wcs();
    assert_eq!(
        (w[0].wr_id, w[0].status, w[0].opcode),
        (50, WcStatus::Success, WcOpcode::BindMw)
    );
    (target, kt.addr + 100, rkey)
}

#[test]
fn mw_grants_exactly_its_range() {
    let mut n = Net::new(Opts::default());
    let (target, va, rkey) = bound_window(&mut n);
    let (_src, ks) = n.mr(n.a.pd, 200, ALL, pattern(1));
    n.a.qp
        .post_send(&send_wr(
            1,
            SendOp::RdmaWrite {
                remote_addr: va,
                rkey,
            },
            &[sge(&ks, 0, 100)],
        ))
        .unwrap();
    n.run(0);
    assert_eq!(n.a.send_wcs()[0].status, WcStatus::Success);
    assert_eq!(bytes(&target)[100..200], bytes(&_src)[..100]);
    // One byte past the window.
    n.a.qp
        .post_send(&send_wr(
            2,
            SendOp::RdmaWrite {
                remote_addr: va + 1,
                rkey,
            },
            &[sge(&ks, 0, 100)],
        ))
        .unwrap();
    n.run(3);
    assert_eq!(n.a.send_wcs()[1].status, WcStatus::RemAccessErr);
    assert_eq!(bytes(&target)[200], 0);
    assert_eq!(n.b.qp.state(), QpState::Error);
}

#[test]
fn send_with_invalidate_kills_the_key() {
    let mut n = Net::new(Opts::default());
    let (target, va, rkey) = bound_window(&mut n);
    let (_src, ks) = n.mr(n.a.pd, 200, ALL, pattern(1));
    n.b.post_recv(RecvWr {
        wr_id: 8,
        sg_list: SgList::new(),
    });
    n.a.qp
        .post_send(&send_wr(
            1,
            SendOp::SendWithInv {
                invalidate_rkey: rkey,
            },
            &[],
        ))
        .unwrap();
    n.a.qp
        .post_send(&send_wr(
            2,
            SendOp::RdmaWrite {
                remote_addr: va,
                rkey,
            },
            &[sge(&ks, 0, 100)],
        ))
        .unwrap();
    n.run(3);
    let r = n.b.recv_wcs();
    assert_eq!(
        (r[0].wr_id, r[0].status, r[0].invalidated_rkey),
        (8, WcStatus::Success, Some(rkey))
    );
    let s = n.a.send_wcs();
    assert_eq!(
        s.iter().map(|w| w.status).collect::<Vec<_>>(),
        vec![WcStatus::Success, WcStatus::RemAccessErr]
    );
    assert!(bytes(&target).iter().all(|&b| b == 0));
}

#[test]
fn send_with_invalidate_of_bad_key_is_rejected() {
    let mut n = Net::new(Opts::default());
    n.b.post_recv(RecvWr {
        wr_id: 8,
        sg_list: SgList::new(),
    });
    n.a.qp
        .post_send(&send_wr(
            1,
            SendOp::SendWithInv {
                invalidate_rkey: 0x1234_5678,
            },
            &[],
        ))
        .unwrap();
    n.run(3);
    assert_eq!(n.a.send_wcs()[0].status, WcStatus::RemInvReqErr);
    assert_eq!(n.b.recv_wcs()[0].status, WcStatus::RemInvReqErr);
    assert_eq!(n.b.qp.state(), QpState::Error);
}

#[test]
fn local_invalidate_and_bind_errors() {
    let mut n = Net::new(Opts::default());
    let (_t, va, rkey) = bound_window(&mut n);
    n.b.qp
        .post_send(&send_wr(51, SendOp::LocalInv { rkey }, &[]))
        .unwrap();
    n.run(0);
    assert_eq!(n.b.send_wcs()[1].opcode, WcOpcode::LocalInv);
    assert_eq!(n.b.send_wcs()[1].status, WcStatus::Success);
    assert!(n
        .keys
        .check_remote(n.b.pd, n.b.qp.qpn(), rkey, va, 1, AccessFlags::REMOTE_WRITE)
        .is_err());
    // Invalidating again fails: MW bind error, QP to Error.
    n.b.qp
        .post_send(&send_wr(52, SendOp::LocalInv { rkey }, &[]))
        .unwrap();
    n.run(0);
    assert_eq!(n.b.send_wcs()[2].status, WcStatus::MwBindErr);
    assert_eq!(n.b.qp.state(), QpState::Error);
}

#[test]
fn local_protection_error() {
    let mut n = Net::new(Opts::default());
    let (_m, k) = n.mr(n.a.pd, 100, ALL, |_| 0);
    n.a.qp
        .post_send(&send_wr(1, SendOp::Send, &[sge(&k, 0, 101)]))
        .unwrap();
    n.a.qp.post_send(&send_wr(2, SendOp::Send, &[])).unwrap();
    n.run(0);
    let s = n.a.send_wcs();
    assert_eq!(
        s.iter().map(|w| w.status).collect::<Vec<_>>(),
        vec![WcStatus::LocProtErr, WcStatus::WrFlushErr]
    );
    assert_eq!(n.a.qp.counters().sent_pkts, 0);
    // READ into a sink without LOCAL_WRITE.
    let mut n = Net::new(Opts::default());
    let (_m, k) = n.mr(n.a.pd, 100, AccessFlags::REMOTE_READ, |_| 0);
    n.a.qp
        .post_send(&send_wr(
            1,
            SendOp::RdmaRead {
                remote_addr: 0,
                rkey: 0,
            },
            &[sge(&k, 0, 10)],
        ))
        .unwrap();
    n.run(0);
    assert_eq!(n.a.send_wcs()[0].status, WcStatus::LocProtErr);
}

#[test]
fn receive_too_small_is_length_error() {
    let mut n = Net::new(Opts::default());
    let (_m, k) = n.mr(n.b.pd, 100, ALL, |_| 0);
    let (_s, ks) = n.mr(n.a.pd, 2000, ALL, |_| 1);
    n.b.post_recv(RecvWr {
        wr_id: 3,
        sg_list: SgList::one(sge(&k, 0, 100)),
    });
    n.b.post_recv(RecvWr {
        wr_id: 4,
        sg_list: SgList::one(sge(&k, 0, 100)),
    });
    n.a.qp
        .post_send(&send_wr(1, SendOp::Send, &[sge(&ks, 0, 2000)]))
        .unwrap();
    n.run(3);
    assert_eq!(n.a.send_wcs()[0].status, WcStatus::RemInvReqErr);
    let r: Vec<_> = n.b.recv_wcs().iter().map(|w| (w.wr_id, w.status)).collect();
    assert_eq!(r, vec![(3, WcStatus::LocLenErr), (4, WcStatus::WrFlushErr)]);
}

#[test]
fn middle_without_first_is_invalid_request() {
    let mut n = Net::new(Opts::default());
    let mut env = RcEnv {
        keys: &n.keys,
        srq: None,
    };
    let psn = 0x1000;
    let hdr = PacketHeaders::new(Bth::new(Opcode::RcSendMiddle, 0x12, psn, false));
    let data = [0u8; 1024];
    n.b.qp.handle_packet(
        n.now,
        &Packet {
            hdr,
            payload: &data,
        },
        &mut env,
    );
    assert_eq!(n.b.qp.state(), QpState::Error);
    let tx = n.b.qp.poll_transmit(n.now, &mut env).unwrap();
    assert_eq!(
        tx.hdr.aeth,
        Some(Aeth {
            syndrome: 0x61,
            msn: 0
        })
    );
    assert_eq!(tx.hdr.bth.psn, psn);
}

/// Arbitrary packets never panic either side, whatever state they reach.
#[test]
fn random_packets_never_panic() {
    let mut rng = rand::rngs::StdRng::seed_from_u64(42);
    for round in 0..200 {
        let mut n = Net::new(Opts {
            srq: round % 2 == 0,
            ..Default::default()
        });
        let (_m, k) = n.mr(n.b.pd, 8192, ALL, |_| 0);
        n.b.post_recv(RecvWr {
            wr_id: 1,
            sg_list: SgList::one(sge(&k, 0, 8192)),
        });
        n.a.qp.post_send(&send_wr(1, SendOp::Send, &[])).unwrap();
        let mut env = RcEnv {
            keys: &n.keys,
            srq: None,
        };
        let _ = n.a.qp.poll_transmit(n.now, &mut env);
        let data = vec![7u8; 5000];
        for _ in 0..50 {
            let Some(op) = Opcode::from_u8(rng.gen_range(0..0x20)) else {
                continue;
            };
            let which = rng.gen_bool(0.5);
            let (own, epsn) = if which {
                (0x12, 0x1000)
            } else {
                (0x11, 0x2000)
            };
            let dest = if rng.gen_bool(0.95) { own } else { own ^ 3 };
            let psn = (epsn + rng.gen_range(0..8) - 2) & 0xFF_FFFF;
            let mut hdr = PacketHeaders::new(Bth::new(op, dest, psn, rng.gen()));
            if rng.gen_bool(0.7) {
                let va = if rng.gen_bool(0.5) {
                    k.addr + rng.gen_range(0..9000)
                } else {
                    rng.gen()
                };
                let rkey = if rng.gen_bool(0.5) { k.rkey } else { rng.gen() };
                hdr.reth = Some(Reth {
                    va,
                    rkey,
                    dma_len: rng.gen_range(0..10_000),
                });
            }
            if rng.gen_bool(0.5) {
                hdr.aeth = Some(Aeth {
                    syndrome: rng.gen(),
                    msn: rng.gen(),
                });
            }
            if rng.gen_bool(0.3) {
                hdr.imm = Some(rng.gen());
            }
            if rng.gen_bool(0.3) {
                hdr.ieth = Some(rng.gen());
            }
            let len = [0, 1, 1023, 1024, 1025, 4096][rng.gen_range(0..6)];
            let pkt = Packet {
                hdr,
                payload: &data[..len],
            };
            let to = if which { &mut n.b } else { &mut n.a };
            let mut env = RcEnv {
                keys: &n.keys,
                srq: to.srq.as_mut(),
            };
            to.qp.handle_packet(n.now, &pkt, &mut env);
            while to.qp.poll_transmit(n.now, &mut env).is_some() {}
            n.now = n.now + std::time::Duration::from_millis(rng.gen_range(0..200));
            to.qp.handle_timeout(n.now, &mut env);
        }
        n.run(20);
    }
}

#[test]
fn ird_exceeded_is_invalid_request() {
    let mut n = Net::new(Opts::default());
    n.b.qp
        .modify(&QpAttr {
            max_dest_rd_atomic: Some(1),
            ..Default::default()
        })
        .unwrap();
    let (src, ks) = n.mr(n.b.pd, 8192, ALL, pattern(6));
    let (dst, kd) = n.mr(n.a.pd, 8192, ALL, |_| 0);
    for i in 0..2u64 {
        let op = SendOp::RdmaRead {
            remote_addr: ks.addr + i * 4096,
            rkey: ks.rkey,
        };
        n.a.qp
            .post_send(&send_wr(i, op, &[sge(&kd, i * 4096, 4096)]))
            .unwrap();
    }
    n.run(3);
    let s: Vec<_> = n.a.send_wcs().iter().map(|w| (w.wr_id, w.status)).collect();
    // The first READ's responses were queued before the second request arrived.
    assert_eq!(s, vec![(0, WcStatus::Success), (1, WcStatus::RemInvReqErr)]);
    assert_eq!(bytes(&dst)[..4096], bytes(&src)[..4096]);
    assert_eq!(n.b.qp.state(), QpState::Error);
}

#[test]
fn qp_without_remote_write_rejects_writes() {
    let mut n = Net::new(Opts::default());
    n.b.qp
        .modify(&QpAttr {
            qp_access_flags: Some(AccessFlags::REMOTE_READ),
            ..Default::default()
        })
        .unwrap();
    let (target, kt) = n.mr(n.b.pd, 64, ALL, |_| 0);
    let (_s, ks) = n.mr(n.a.pd, 64, ALL, |_| 1);
    n.a.qp
        .post_send(&send_wr(
            1,
            SendOp::RdmaWrite {
                remote_addr: kt.addr,
                rkey: kt.rkey,
            },
            &[sge(&ks, 0, 64)],
        ))
        .unwrap();
    n.run(3);
    assert_eq!(n.a.send_wcs()[0].status, WcStatus::RemInvReqErr);
    assert!(bytes(&target).iter().all(|&b| b == 0));
}
