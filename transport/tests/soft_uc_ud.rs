//! UC and UD QPs of the soft provider over real UDP sockets on loopback: two devices,
//! QPs brought up by hand; UC RDMA WRITE and SEND, UC under receive loss (the fault
//! layer drops packets: a loss costs only its message, later ones arrive whole), UD
//! SEND with the GRH area and source QP, a wrong Q_Key dropped and counted, an
//! oversize UD message refused.
use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;
use std::time::{Duration, Instant};

use transport::soft::{Context, Cq, DeviceConfig, FaultConfig, Mr, Pd, Qp, SoftDevice};
use transport::ud::grh::grh_source;
use transport::verbs::*;

struct Side {
    dev: Arc<SoftDevice>,
    ctx: Context,
    pd: Pd,
    cq: Cq,
    qp: Qp,
    mr: Mr,
}

const ACCESS: AccessFlags = AccessFlags::LOCAL_WRITE.union(AccessFlags::REMOTE_WRITE);

fn side(last_octet: u8, qp_type: QpType, faults: Option<FaultConfig>) -> Side {
    let ip = IpAddr::V4(Ipv4Addr::new(127, 0, 0, last_octet));
    let dev = SoftDevice::open(DeviceConfig {
        faults,
        ..DeviceConfig::new(ip)
    })
    .expect("open device");
    let mut ctx = dev.open_context(0).unwrap();
    let pd = dev.alloc_pd();
    let cq = ctx.create_cq(1024);
    let qp = ctx
        .create_qp(&QpInitAttr {
            pd,
            send_cq: cq,
            recv_cq: cq,
            srq: None,
            cap: QpCap {
                max_send_wr: 512,
                max_recv_wr: 512,
                ..QpCap::default()
            },
            qp_type,
        })
        .unwrap();
    let mr = dev.reg_mr(pd, 8 << 20, ACCESS).unwrap();
    Side {
        dev,
        ctx,
        pd,
        cq,
        qp,
        mr,
    }
}

/// Reset -> Init -> RTR -> RTS of a UC QP toward `peer`.
fn uc_up(x: &mut Side, peer: IpAddr, peer_qpn: u32, sq_psn: u32, rq_psn: u32) {
    let steps = [
        QpAttr {
            qp_state: Some(QpState::Init),
            qp_access_flags: Some(ACCESS),
            ..Default::default()
        },
        QpAttr {
            qp_state: Some(QpState::Rtr),
            path_mtu: Some(x.dev.path_mtu()),
            dest_qp_num: Some(peer_qpn),
            rq_psn: Some(rq_psn),
            ah_attr: Some(AhAttr {
                dest: peer,
                flow_label: 0,
                hop_limit: 64,
                traffic_class: 0,
            }),
            ..Default::default()
        },
        QpAttr {
            qp_state: Some(QpState::Rts),
            sq_psn: Some(sq_psn),
            ..Default::default()
        },
    ];
    for s in steps {
        x.ctx.modify_qp(x.qp, &s).unwrap();
    }
}

fn uc_pair(a_octet: u8, b_octet: u8, b_faults: Option<FaultConfig>) -> (Side, Side) {
    let mut a = side(a_octet, QpType::Uc, None);
    let mut b = side(b_octet, QpType::Uc, b_faults);
    let (qa, qb, ia, ib) = (a.qp.qpn(), b.qp.qpn(), a.dev.ip(), b.dev.ip());
    uc_up(&mut a, ib, qb, 0xFF_FFF0, 0x12_3456);
    uc_up(&mut b, ia, qa, 0x12_3456, 0xFF_FFF0);
    (a, b)
}

fn ud_up(x: &mut Side, qkey: u32) {
    for s in [
        QpAttr {
            qp_state: Some(QpState::Init),
            qkey: Some(qkey),
            ..Default::default()
        },
        QpAttr {
            qp_state: Some(QpState::Rtr),
            ..Default::default()
        },
        QpAttr {
            qp_state: Some(QpState::Rts),
            sq_psn: Some(0x77),
            ..Default::default()
        },
    ] {
        x.ctx.modify_qp(x.qp, &s).unwrap();
    }
}

fn wc0() -> WorkCompletion {
    WorkCompletion::new(0, WcStatus::Success, WcOpcode::Send, 0)
}

/// Polls both sides until `n` completions arrived on `me`'s CQ or, with `settle`,
/// until nothing arrived for that long (a lossy run's end).
fn poll(
    me: &mut Side,
    other: &mut Side,
    n: usize,
    settle: Option<Duration>,
) -> Vec<WorkCompletion> {
    let mut out = Vec::new();
    let mut buf = [wc0(); 32];
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut last = Instant::now();
    while out.len() < n {
        assert!(
            Instant::now() < deadline,
            "timed out waiting for {n} completions, got {}",
            out.len()
        );
        other.ctx.progress();
        let k = me.ctx.poll_cq(me.cq, &mut buf);
        out.extend_from_slice(&buf[..k]);
        if k > 0 {
            last = Instant::now();
        } else if settle.is_some_and(|s| last.elapsed() > s) {
            break;
        }
    }
    out
}

fn pattern(len: usize, seed: u32) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u32).wrapping_mul(31).wrapping_add(seed * 7) as u8)
        .collect()
}

fn sge(mr: &Mr, off: usize, len: usize) -> SgList {
    SgList::one(Sge {
        addr: mr.addr() + off as u64,
        length: len as u32,
        lkey: mr.lkey(),
    })
}

fn post_recv(x: &mut Side, wr_id: u64, off: usize, len: usize) {
    let wr = RecvWr {
        wr_id,
        sg_list: sge(&x.mr, off, len),
    };
    x.ctx.post_recv(x.qp, &wr).unwrap();
}

/// UC RDMA WRITE (10 000 bytes: three packets at MTU 4096), then a SEND, between two
/// QPs over UDP: both land whole, the sender's WRs complete, nothing is answered.
#[test]
fn uc_write_and_send_over_udp() {
    let (mut a, mut b) = uc_pair(41, 42, None);
    let data = pattern(10_000, 1);
    a.mr.write(0, &data);
    let msg = pattern(6000, 2);
    a.mr.write(1 << 20, &msg);
    post_recv(&mut b, 9, 2 << 20, 8192);
    let write = SendWr {
        wr_id: 1,
        op: SendOp::RdmaWrite {
            remote_addr: b.mr.addr() + 4096,
            rkey: b.mr.rkey(),
        },
        sg_list: sge(&a.mr, 0, data.len()),
        flags: SendFlags::SIGNALED,
    };
    let send = SendWr {
        wr_id: 2,
        op: SendOp::Send,
        sg_list: sge(&a.mr, 1 << 20, msg.len()),
        flags: SendFlags::SIGNALED,
    };
    a.ctx.post_send_list(a.qp, &[write, send]).unwrap();
    let sent = poll(&mut a, &mut b, 2, None);
    assert_eq!(
        sent.iter().map(|w| (w.wr_id, w.status)).collect::<Vec<_>>(),
        [(1, WcStatus::Success), (2, WcStatus::Success)]
    );
    let got = poll(&mut b, &mut a, 1, None);
    assert_eq!(
        (got[0].wr_id, got[0].status, got[0].opcode, got[0].byte_len),
        (9, WcStatus::Success, WcOpcode::Recv, 6000)
    );
    assert_eq!(got[0].src_qp, a.qp.qpn());
    let mut buf = vec![0u8; data.len()];
    b.mr.read(4096, &mut buf);
    assert_eq!(buf, data);
    let mut buf = vec![0u8; msg.len()];
    b.mr.read(2 << 20, &mut buf);
    assert_eq!(buf, msg);
    let cb = *b.ctx.qp_counters(b.qp).unwrap();
    assert_eq!((cb.rcvd_pkts, cb.dropped_msgs, cb.sent_pkts), (5, 0, 0));
    assert_eq!(a.ctx.qp_counters(a.qp).unwrap().rcvd_pkts, 0, "no ACKs");
}

/// 300 UC SENDs of three packets each into a receiver whose fault layer drops 2% of
/// the packets: every message that completes holds exactly its own bytes, in order;
/// the lost ones cost only themselves (their receive WRs take later messages), and
/// messages after each loss arrive.
#[test]
fn uc_send_loss_costs_only_the_message() {
    const N: u32 = 300;
    const LEN: usize = 10_000;
    let faults = FaultConfig {
        loss: 0.02,
        ..FaultConfig::with_seed(17)
    };
    let (mut a, mut b) = uc_pair(43, 44, Some(faults));
    for i in 0..N {
        post_recv(&mut b, u64::from(i), i as usize * 16384, 16384);
    }
    let mut got = Vec::new();
    for chunk in 0..N / 10 {
        let wrs: Vec<SendWr> = (chunk * 10..chunk * 10 + 10)
            .map(|i| {
                let mut msg = pattern(LEN, i);
                msg[..4].copy_from_slice(&i.to_le_bytes());
                let off = (4 << 20) + (i as usize % 64) * 16384;
                a.mr.write(off, &msg);
                SendWr {
                    wr_id: u64::from(i),
                    op: SendOp::Send,
                    sg_list: sge(&a.mr, off, LEN),
                    flags: SendFlags::empty(),
                }
            })
            .collect();
        a.ctx.post_send_list(a.qp, &wrs).unwrap();
        got.extend(poll(
            &mut b,
            &mut a,
            usize::MAX,
            Some(Duration::from_millis(30)),
        ));
    }
    let dropped = b.dev.counters().snapshot().injected_drops;
    assert!(dropped > 0, "the fault layer dropped packets");
    let mut tags = Vec::new();
    for w in &got {
        assert_eq!(
            (w.status, w.byte_len),
            (WcStatus::Success, LEN as u32),
            "{w:?}"
        );
        let mut buf = vec![0u8; LEN];
        b.mr.read(w.wr_id as usize * 16384, &mut buf);
        let tag = u32::from_le_bytes(buf[..4].try_into().unwrap());
        let mut want = pattern(LEN, tag);
        want[..4].copy_from_slice(&tag.to_le_bytes());
        assert!(buf == want, "message {tag} in WR {} is whole", w.wr_id);
        tags.push(tag);
    }
    assert!(tags.windows(2).all(|t| t[0] < t[1]), "in order: {tags:?}");
    let lost = N as usize - tags.len();
    let c = *b.ctx.qp_counters(b.qp).unwrap();
    assert!(
        lost >= 1 && lost as u64 <= dropped,
        "lost {lost}, dropped {dropped}"
    );
    assert!(
        c.dropped_msgs >= 1 && c.dropped_msgs <= lost as u64,
        "{c:?}"
    );
    // The WRs in completion order are the posted ones in order: a lost message's WR
    // took the next message.
    let ids: Vec<u64> = got.iter().map(|w| w.wr_id).collect();
    assert_eq!(ids, (0..tags.len() as u64).collect::<Vec<_>>());
    let after_first_loss = tags
        .iter()
        .enumerate()
        .skip_while(|&(k, &t)| t == k as u32)
        .count();
    assert!(
        after_first_loss > 0,
        "messages after a loss arrive: {tags:?}"
    );
}

/// UC RDMA WRITE with immediate under loss: each completion's immediate names a
/// region that holds exactly that message.
#[test]
fn uc_write_with_imm_loss_costs_only_the_message() {
    const N: u32 = 200;
    const LEN: usize = 9000;
    let faults = FaultConfig {
        loss: 0.03,
        ..FaultConfig::with_seed(5)
    };
    let (mut a, mut b) = uc_pair(45, 46, Some(faults));
    for i in 0..N {
        post_recv(&mut b, u64::from(i), 0, 0);
    }
    let mut got = Vec::new();
    for chunk in 0..N / 10 {
        let wrs: Vec<SendWr> = (chunk * 10..chunk * 10 + 10)
            .map(|i| {
                let off = i as usize * 16384;
                a.mr.write(off, &pattern(LEN, i));
                SendWr {
                    wr_id: u64::from(i),
                    op: SendOp::RdmaWriteWithImm {
                        remote_addr: b.mr.addr() + off as u64,
                        rkey: b.mr.rkey(),
                        imm_data: i,
                    },
                    sg_list: sge(&a.mr, off, LEN),
                    flags: SendFlags::empty(),
                }
            })
            .collect();
        a.ctx.post_send_list(a.qp, &wrs).unwrap();
        got.extend(poll(
            &mut b,
            &mut a,
            usize::MAX,
            Some(Duration::from_millis(30)),
        ));
    }
    assert!(
        got.len() < N as usize && got.len() > N as usize / 2,
        "{}",
        got.len()
    );
    for w in &got {
        assert_eq!(w.opcode, WcOpcode::RecvRdmaWithImm);
        let i = w.imm_data.unwrap();
        let mut buf = vec![0u8; LEN];
        b.mr.read(i as usize * 16384, &mut buf);
        assert!(buf == pattern(LEN, i), "WRITE {i} is whole");
    }
    assert!(b.ctx.qp_counters(b.qp).unwrap().dropped_msgs >= 1);
}

/// UD SEND between two devices: the message lands after the 40-byte GRH area, which
/// names the sender; the completion has src_qp and IBV_WC_GRH. A wrong Q_Key is
/// dropped and counted; a message above the MTU is refused at post.
#[test]
fn ud_send_grh_src_qp_qkey_and_size() {
    const QKEY: u32 = 0x0011_2233;
    let mut a = side(47, QpType::Ud, None);
    let mut b = side(48, QpType::Ud, None);
    ud_up(&mut a, QKEY);
    ud_up(&mut b, QKEY);
    let ah = a
        .ctx
        .create_ah(
            a.pd,
            &AhAttr {
                dest: b.dev.ip(),
                flow_label: 0,
                hop_limit: 64,
                traffic_class: 0,
            },
        )
        .unwrap();
    for i in 0..3 {
        post_recv(&mut b, 10 + i, i as usize * 8192, 4096 + GRH_LEN);
    }
    let msg = pattern(3000, 3);
    a.mr.write(0, &msg);
    let (b_qpn, a_sge) = (b.qp.qpn(), sge(&a.mr, 0, 0).as_slice()[0]);
    let ud = move |qkey, len: usize| SendWr {
        wr_id: 1,
        op: SendOp::UdSend {
            dest: UdDest {
                ah,
                remote_qpn: b_qpn,
                remote_qkey: qkey,
            },
            imm_data: None,
        },
        sg_list: SgList::one(Sge {
            length: len as u32,
            ..a_sge
        }),
        flags: SendFlags::SIGNALED,
    };
    a.ctx.post_send(a.qp, &ud(QKEY ^ 1, 3000)).unwrap();
    a.ctx.post_send(a.qp, &ud(QKEY, 3000)).unwrap();
    let sent = poll(&mut a, &mut b, 2, None);
    assert!(sent.iter().all(|w| w.status == WcStatus::Success));
    let got = poll(&mut b, &mut a, 1, None);
    let w = got[0];
    assert_eq!(
        (w.wr_id, w.status, w.byte_len, w.src_qp, w.grh),
        (
            10,
            WcStatus::Success,
            3000 + GRH_LEN as u32,
            a.qp.qpn(),
            true
        )
    );
    let mut g = [0u8; GRH_LEN];
    b.mr.read(0, &mut g);
    assert_eq!(grh_source(&g), a.dev.ip(), "the GRH names the sender");
    let mut body = vec![0u8; msg.len()];
    b.mr.read(GRH_LEN, &mut body);
    assert_eq!(body, msg);
    let c = *b.ctx.qp_counters(b.qp).unwrap();
    assert_eq!((c.qkey_violations, c.rcvd_pkts), (1, 2));
    // Nothing more arrives for the wrong Q_Key's packet.
    assert!(poll(&mut b, &mut a, 1, Some(Duration::from_millis(50))).is_empty());
    let mtu = a.dev.path_mtu().bytes();
    assert_eq!(
        a.ctx.post_send(a.qp, &ud(QKEY, mtu as usize + 1)),
        Err(VerbsError::CapabilityExceeded {
            what: "UD message length in bytes (a UD message is one packet: at most the path \
                   MTU; send less per WR or use RC/UC)",
            asked: mtu + 1,
            max: mtu,
        })
    );
    // The receiver's source port is its QPN's, and a UD QP has one from creation.
    assert!(a.ctx.qp_udp_sport(a.qp).is_some_and(|p| p >= 0xC000));
    a.ctx.destroy_ah(ah).unwrap();
    assert!(
        a.ctx.post_send(a.qp, &ud(QKEY, 10)).is_err(),
        "destroyed AH"
    );
}
