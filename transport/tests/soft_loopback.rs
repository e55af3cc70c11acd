//! The soft provider over real UDP sockets on loopback: two devices (127.0.0.2 and
//! 127.0.0.3), RC QPs brought up by hand, SEND / RDMA WRITE / RDMA READ, corrupted
//! packets dropped and counted, and remote access errors.
use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;
use std::time::{Duration, Instant};

use transport::soft::{Context, Cq, DeviceConfig, Mr, Pd, Qp, QpInitAttr, SoftDevice, Srq, UdpGso};
use transport::verbs::*;

struct Side {
    dev: Arc<SoftDevice>,
    ctx: Context,
    pd: Pd,
    cq: Cq,
    srq: Srq,
    qp: Qp,
    mr: Mr,
}

fn side(last_octet: u8) -> Side {
    let ip = IpAddr::V4(Ipv4Addr::new(127, 0, 0, last_octet));
    let dev = SoftDevice::open(DeviceConfig::new(ip)).expect("open device");
    let ctx = dev.open_context(0).unwrap();
    side_on(dev, ctx)
}

/// A QP on an SRQ, a CQ and a 4 MiB MR with remote access, in poll group `ctx` of `dev`.
fn side_on(dev: Arc<SoftDevice>, mut ctx: Context) -> Side {
    let pd = dev.alloc_pd();
    let cq = ctx.create_cq(256);
    let srq = ctx.create_srq(pd, 64);
    let attr = QpInitAttr {
        pd,
        send_cq: cq,
        recv_cq: cq,
        srq: Some(srq),
        cap: QpCap::default(),
        qp_type: transport::verbs::QpType::Rc,
    };
    let qp = ctx.create_qp(&attr).unwrap();
    let mr = dev.reg_mr(pd, 4 << 20, ACCESS).unwrap();
    Side {
        dev,
        ctx,
        pd,
        cq,
        srq,
        qp,
        mr,
    }
}

const ACCESS: AccessFlags = AccessFlags::LOCAL_WRITE
    .union(AccessFlags::REMOTE_READ)
    .union(AccessFlags::REMOTE_WRITE);

/// Reset -> Init -> RTR -> RTS toward `peer` (QP `peer_qpn`), sending from PSN
/// `sq_psn` and expecting `rq_psn` (what a CM exchange would have set).
fn bring_up(x: &mut Side, peer: IpAddr, peer_qpn: u32, sq_psn: u32, rq_psn: u32) {
    let init = QpAttr {
        qp_state: Some(QpState::Init),
        qp_access_flags: Some(ACCESS),
        ..Default::default()
    };
    x.ctx.modify_qp(x.qp, &init).unwrap();
    let rtr = QpAttr {
        qp_state: Some(QpState::Rtr),
        path_mtu: Some(x.dev.path_mtu()),
        dest_qp_num: Some(peer_qpn),
        rq_psn: Some(rq_psn),
        max_dest_rd_atomic: Some(8),
        min_rnr_timer: Some(1),
        ah_attr: Some(AhAttr {
            dest: peer,
            flow_label: 0,
            hop_limit: 64,
            traffic_class: 0,
        }),
        ..Default::default()
    };
    x.ctx.modify_qp(x.qp, &rtr).unwrap();
    let rts = QpAttr {
        qp_state: Some(QpState::Rts),
        sq_psn: Some(sq_psn),
        timeout: Some(12),
        retry_cnt: Some(7),
        rnr_retry: Some(7),
        max_rd_atomic: Some(8),
        ..Default::default()
    };
    x.ctx.modify_qp(x.qp, &rts).unwrap();
}

/// Connects `a` and `b` (a's PSNs start just below 2^24, so they wrap quickly).
fn connect(a: &mut Side, b: &mut Side) {
    let (pa, pb) = (0xFF_FFF0, 0x12_3456);
    let (qa, qb, ia, ib) = (a.qp.qpn(), b.qp.qpn(), a.dev.ip(), b.dev.ip());
    bring_up(a, ib, qb, pa, pb);
    bring_up(b, ia, qa, pb, pa);
}

/// Polls both sides until `n` completions arrived on `who`'s CQ (bounded by a count
/// of rounds so a broken stack fails instead of hanging).
fn wait_wcs(a: &mut Side, b: &mut Side, on_a: bool, n: usize) -> Vec<WorkCompletion> {
    let mut out = Vec::new();
    let mut buf = [WorkCompletion::new(0, WcStatus::Success, WcOpcode::Send, 0); 16];
    let deadline = Instant::now() + Duration::from_secs(20);
    while out.len() < n {
        assert!(
            Instant::now() < deadline,
            "timed out waiting for {n} completions, got {out:?}"
        );
        let (me, other) = if on_a {
            (&mut *a, &mut *b)
        } else {
            (&mut *b, &mut *a)
        };
        other.ctx.progress();
        let k = me.ctx.poll_cq(me.cq, &mut buf);
        out.extend_from_slice(&buf[..k]);
    }
    out
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

#[test]
fn send_write_read_over_udp() {
    let mut a = side(12);
    let mut b = side(13);
    assert_eq!(
        a.dev.path_mtu(),
        Mtu::Mtu4096,
        "loopback MTU 65536 gives path MTU 4096"
    );
    connect(&mut a, &mut b);
    assert!(a.ctx.qp_udp_sport(a.qp).unwrap() >= 0xC000);

    // SEND of 10000 bytes (3 packets) into b's SRQ buffer.
    let data = pattern(10000, 7);
    a.mr.write(0, &data);
    b.ctx
        .post_srq_recv(
            b.srq,
            &RecvWr {
                wr_id: 77,
                sg_list: SgList::one(Sge {
                    addr: b.mr.addr(),
                    length: 65536,
                    lkey: b.mr.lkey(),
                }),
            },
        )
        .unwrap();
    let send = SendWr {
        wr_id: 1,
        op: SendOp::Send,
        sg_list: SgList::one(Sge {
            addr: a.mr.addr(),
            length: 10000,
            lkey: a.mr.lkey(),
        }),
        flags: SendFlags::SIGNALED,
    };
    a.ctx.post_send(a.qp, &send).unwrap();
    let wc = wait_wcs(&mut a, &mut b, false, 1);
    assert_eq!(
        (wc[0].wr_id, wc[0].status, wc[0].opcode, wc[0].byte_len),
        (77, WcStatus::Success, WcOpcode::Recv, 10000)
    );
    let wc = wait_wcs(&mut a, &mut b, true, 1);
    assert_eq!((wc[0].wr_id, wc[0].status), (1, WcStatus::Success));
    let mut got = vec![0u8; 10000];
    b.mr.read(0, &mut got);
    assert_eq!(got, data);

    // RDMA WRITE of 1 MiB into b at offset 1 MiB.
    let data = pattern(1 << 20, 3);
    a.mr.write(0, &data);
    let write = SendWr {
        wr_id: 2,
        op: SendOp::RdmaWrite {
            remote_addr: b.mr.addr() + (1 << 20),
            rkey: b.mr.rkey(),
        },
        sg_list: SgList::one(Sge {
            addr: a.mr.addr(),
            length: 1 << 20,
            lkey: a.mr.lkey(),
        }),
        flags: SendFlags::SIGNALED,
    };
    a.ctx.post_send(a.qp, &write).unwrap();
    let wc = wait_wcs(&mut a, &mut b, true, 1);
    assert_eq!(
        (wc[0].wr_id, wc[0].status, wc[0].opcode),
        (2, WcStatus::Success, WcOpcode::RdmaWrite)
    );
    let mut got = vec![0u8; 1 << 20];
    b.mr.read(1 << 20, &mut got);
    assert!(got == data, "RDMA WRITE data differs");

    // RDMA READ of 300000 bytes back from b into a at offset 2 MiB.
    let read = SendWr {
        wr_id: 3,
        op: SendOp::RdmaRead {
            remote_addr: b.mr.addr() + (1 << 20),
            rkey: b.mr.rkey(),
        },
        sg_list: SgList::one(Sge {
            addr: a.mr.addr() + (2 << 20),
            length: 300000,
            lkey: a.mr.lkey(),
        }),
        flags: SendFlags::SIGNALED,
    };
    a.ctx.post_send(a.qp, &read).unwrap();
    let wc = wait_wcs(&mut a, &mut b, true, 1);
    assert_eq!(
        (wc[0].wr_id, wc[0].status, wc[0].opcode),
        (3, WcStatus::Success, WcOpcode::RdmaRead)
    );
    let mut got = vec![0u8; 300000];
    a.mr.read(2 << 20, &mut got);
    assert!(got == data[..300000], "RDMA READ data differs");
    let ca = a.dev.counters().snapshot();
    assert_eq!(ca.icrc_errors, 0);
    assert!(ca.tx_payload_bytes_zero_copy >= 10000 + (1 << 20));
    assert_eq!(ca.tx_payload_bytes_copied, 0);
}

#[test]
fn corrupted_packet_is_dropped_and_counted() {
    let b = side(4);
    let qpn = b.qp.qpn();
    // A raw datagram to b's 4791 whose ICRC does not match.
    let s = std::net::UdpSocket::bind("127.0.0.5:0").unwrap();
    let mut pkt = vec![0u8; 12 + 64 + 4];
    pkt[0] = 0x04; // RC SEND Only
    pkt[2] = 0xFF;
    pkt[3] = 0xFF;
    pkt[5..8].copy_from_slice(&qpn.to_be_bytes()[1..]);
    s.send_to(&pkt, "127.0.0.4:4791").unwrap();
    let mut b = b;
    let deadline = Instant::now() + Duration::from_secs(5);
    while b.dev.counters().snapshot().icrc_errors == 0 {
        assert!(Instant::now() < deadline, "bad-ICRC packet was not counted");
        b.ctx.progress();
    }
    let c = b.dev.counters().snapshot();
    assert_eq!((c.icrc_errors, c.rcvd_pkts), (1, 0));
    let _ = b.pd;
}

#[test]
fn udp_port_in_use_is_reported() {
    let _holder = std::net::UdpSocket::bind("127.0.0.6:4791").unwrap();
    let err = SoftDevice::open(DeviceConfig::new("127.0.0.6".parse().unwrap())).unwrap_err();
    let msg = err.to_string();
    assert!(
        msg.contains("4791") && msg.contains("127.0.0.6") && msg.contains("in use"),
        "{msg}"
    );
    // The fix: another address for one of the two (127.0.0.8 is the suggestion).
    assert!(
        msg.contains("--host-traddr (e.g. 127.0.0.8)") && msg.contains("--addr"),
        "{msg}"
    );
}

#[test]
fn large_reads_in_a_row() {
    let mut a = side(7);
    let mut b = side(8);
    connect(&mut a, &mut b);
    for round in 0..4u64 {
        for i in 0..16u64 {
            let read = SendWr {
                wr_id: round * 100 + i,
                op: SendOp::RdmaRead {
                    remote_addr: b.mr.addr(),
                    rkey: b.mr.rkey(),
                },
                sg_list: SgList::one(Sge {
                    addr: a.mr.addr() + (1 << 20),
                    length: 1 << 20,
                    lkey: a.mr.lkey(),
                }),
                flags: SendFlags::SIGNALED,
            };
            a.ctx.post_send(a.qp, &read).unwrap();
        }
        let wc = wait_wcs(&mut a, &mut b, true, 16);
        for (i, w) in wc.iter().enumerate() {
            assert_eq!(
                (w.wr_id, w.status),
                (round * 100 + i as u64, WcStatus::Success)
            );
        }
        let c = a.ctx.qp_counters(a.qp).unwrap();
        assert_eq!(
            c.local_ack_timeout_err, 0,
            "no retransmission timeouts on a lossless loopback: {c:?}"
        );
    }
}

/// A 1 MiB RDMA READ pulls 256 READ responses; between two loopback devices they leave
/// as UDP GSO trains (`udp_gso` LocalPeers) and arrive whole through UDP GRO, every
/// segment passing the ICRC check with its predicted IPv4 ID (none solved), no datagram
/// truncated; with `udp_gso` Off, one datagram per packet. The data is intact either way.
#[test]
fn large_reads_travel_as_gso_trains_between_local_peers() {
    for (gso, octets) in [(UdpGso::LocalPeers, (14, 15)), (UdpGso::Off, (16, 17))] {
        let open = |o: u8| {
            let dev = SoftDevice::open(DeviceConfig {
                udp_gso: gso,
                ..DeviceConfig::new(IpAddr::V4(Ipv4Addr::new(127, 0, 0, o)))
            })
            .expect("open device");
            let ctx = dev.open_context(0).unwrap();
            side_on(dev, ctx)
        };
        let (mut a, mut b) = (open(octets.0), open(octets.1));
        connect(&mut a, &mut b);
        let data = pattern(1 << 20, 5);
        b.mr.write(0, &data);
        let read = SendWr {
            wr_id: 1,
            op: SendOp::RdmaRead {
                remote_addr: b.mr.addr(),
                rkey: b.mr.rkey(),
            },
            sg_list: SgList::one(Sge {
                addr: a.mr.addr(),
                length: 1 << 20,
                lkey: a.mr.lkey(),
            }),
            flags: SendFlags::SIGNALED,
        };
        a.ctx.post_send(a.qp, &read).unwrap();
        let wc = wait_wcs(&mut a, &mut b, true, 1);
        assert_eq!(wc[0].status, WcStatus::Success, "{gso:?}");
        let mut got = vec![0u8; 1 << 20];
        a.mr.read(0, &mut got);
        assert!(got == data, "{gso:?}: data differs");
        let (tx, rx) = (b.dev.counters().snapshot(), a.dev.counters().snapshot());
        assert!(tx.sent_pkts >= 256, "{gso:?}: {tx:?}");
        assert_eq!(rx.icrc_errors, 0, "{gso:?}: {rx:?}");
        assert_eq!(rx.icrc_ipv4_id_solved, 0, "{gso:?}: {rx:?}");
        assert_eq!(rx.rx_truncated_datagrams, 0, "{gso:?}: {rx:?}");
        if gso == UdpGso::Off {
            assert_eq!(tx.sent_datagrams, tx.sent_pkts, "{tx:?}");
            assert_eq!(rx.rcvd_datagrams, rx.rcvd_pkts, "{rx:?}");
        } else {
            // Trains of up to 15 packets of 4 KiB (64 KiB).
            assert!(tx.sent_datagrams * 4 < tx.sent_pkts, "{tx:?}");
            assert!(rx.rcvd_datagrams * 4 < rx.rcvd_pkts, "{rx:?}");
        }
    }
}

#[test]
fn dropping_one_poll_group_leaves_the_others_steered() {
    // Three poll groups on one device; drop the middle one, then traffic to QPs of the
    // last group must still arrive there (the SO_REUSEPORT group keeps its numbering).
    let ip_a = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 9));
    let mut cfg = DeviceConfig::new(ip_a);
    cfg.rx_queues = 3;
    let dev_a = SoftDevice::open(cfg).unwrap();
    let ctx0 = dev_a.open_context(0).unwrap();
    let ctx1 = dev_a.open_context(1).unwrap();
    let ctx2 = dev_a.open_context(2).unwrap();
    drop(ctx1);
    let mut a = side_on(dev_a.clone(), ctx2);
    let mut b = side(10);
    connect(&mut a, &mut b);
    let read = SendWr {
        wr_id: 5,
        op: SendOp::RdmaRead {
            remote_addr: b.mr.addr(),
            rkey: b.mr.rkey(),
        },
        sg_list: SgList::one(Sge {
            addr: a.mr.addr(),
            length: 8192,
            lkey: a.mr.lkey(),
        }),
        flags: SendFlags::SIGNALED,
    };
    a.ctx.post_send(a.qp, &read).unwrap();
    let wc = wait_wcs(&mut a, &mut b, true, 1);
    assert_eq!((wc[0].wr_id, wc[0].status), (5, WcStatus::Success));
    // The dropped group can be opened again.
    assert!(dev_a.open_context(1).is_ok());
    drop(ctx0);
}

/// ECN over real sockets: B's receive path marks a fifth of what arrives CE (the
/// fault layer sets what the provider makes of an IP CE mark), so B's notification
/// point sends CNPs, spaced, to A, whose DCQCN reaction point acts on them; every
/// RDMA WRITE still lands intact.
#[test]
fn ce_marks_make_cnps_and_the_sender_reacts() {
    let mut a = side(31);
    let ip_b = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 32));
    let mut cfg = DeviceConfig::new(ip_b);
    cfg.faults = Some(transport::soft::FaultConfig {
        ce_mark: 0.2,
        ..transport::soft::FaultConfig::with_seed(11)
    });
    let dev_b = SoftDevice::open(cfg).expect("open device");
    let ctx_b = dev_b.open_context(0).unwrap();
    let mut b = side_on(dev_b, ctx_b);
    connect(&mut a, &mut b);
    let len = 256 << 10;
    let data = pattern(len, 9);
    a.mr.write(0, &data);
    let start = Instant::now();
    for i in 0..32u64 {
        let w = SendWr {
            wr_id: i,
            op: SendOp::RdmaWrite {
                remote_addr: b.mr.addr() + (i % 8) * len as u64,
                rkey: b.mr.rkey(),
            },
            sg_list: SgList::one(Sge {
                addr: a.mr.addr(),
                length: len as u32,
                lkey: a.mr.lkey(),
            }),
            flags: SendFlags::SIGNALED,
        };
        a.ctx.post_send(a.qp, &w).unwrap();
        let wc = wait_wcs(&mut a, &mut b, true, 1);
        assert_eq!((wc[0].wr_id, wc[0].status), (i, WcStatus::Success));
    }
    let elapsed = start.elapsed();
    let mut got = vec![0u8; len];
    for k in 0..8 {
        b.mr.read(k * len, &mut got);
        assert!(got == data, "block {k} differs");
    }
    let marks = b.dev.counters().injected.snapshot().ce_marked;
    let cb = *b.ctx.qp_counters(b.qp).unwrap();
    let ca = *a.ctx.qp_counters(a.qp).unwrap();
    assert!(marks > 100, "{marks} marks");
    assert_eq!(
        cb.np_ecn_marked_roce_packets, marks,
        "B counts every mark: {cb:?}"
    );
    let spaced = elapsed.as_micros() as u64 / 50 + 1;
    assert!(
        cb.np_cnp_sent > 0 && cb.np_cnp_sent <= spaced,
        "{} CNPs in {elapsed:?} (at most one per 50 us)",
        cb.np_cnp_sent
    );
    assert!(
        ca.rp_cnp_handled > 0 && ca.rp_cnp_handled <= cb.np_cnp_sent,
        "A acted on {} of {} CNPs",
        ca.rp_cnp_handled,
        cb.np_cnp_sent
    );
    assert_eq!(ca.rp_cnp_ignored, 0);
}
