//! The verbs provider on a real RDMA device (Linux Soft-RoCE in the QEMU guest of
//! `tests/interop/verbs/run.sh`): device and GID, memory registration and windows, the
//! QP state machine and capability checks against the device, a QP looped back to
//! itself, SRQ limit events (one-shot, re-armed), the completion channel, and RDMA CM
//! connect / accept / reject / disconnect with private data between two poll groups of
//! one device; and the provider-generic checks of `provider/checks.rs` (the same code
//! the soft provider passes in `provider_soft.rs`).
//!
//! Every test needs a device and is ignored by default; run them where there is one:
//!
//! ```text
//! VERBS_TEST_IP=192.168.77.10 ./verbs_rxe --ignored --test-threads=1
//! ```
//!
//! `VERBS_TEST_IP` is a local address whose RoCE v2 GID names the device; without it the
//! tests fail saying so.
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use transport::cm::CmEvent;
use transport::rdma::{DeviceConfig, VerbsContext, VerbsDevice, VerbsMr};
use transport::verbs::connection::{ConnError, ConnRequest, ConnectRequestParams};
use transport::verbs::{
    AccessFlags, AhAttr, AsyncEvent, ConnectionManager as _, Context as _, Cq, Device as _,
    MemoryRegion as _, Pd, Qp, QpAttr, QpCap, QpInitAttr, QpState, RecvWr, SendFlags, SendOp,
    SendWr, SgList, Sge, Srq, VerbsError, WcOpcode, WcStatus, WorkCompletion,
};

#[path = "provider/checks.rs"]
mod checks;
#[path = "../examples/pingpong/proto.rs"]
mod proto;
#[path = "../examples/pingpong/run.rs"]
mod run;

const NEEDS: &str = "needs an RDMA device (run in the QEMU guest: tests/interop/verbs/run.sh)";
const T: Duration = Duration::from_secs(20);

fn test_ip() -> IpAddr {
    let v = std::env::var("VERBS_TEST_IP").unwrap_or_else(|_| {
        panic!("set VERBS_TEST_IP to a local address with a RoCE v2 GID (e.g. 192.168.77.10 in the QEMU guest); {NEEDS}")
    });
    v.parse()
        .unwrap_or_else(|e| panic!("VERBS_TEST_IP={v:?}: {e}"))
}

fn open(groups: u32) -> Arc<VerbsDevice> {
    let mut cfg = DeviceConfig::new(test_ip());
    cfg.poll_groups = groups;
    VerbsDevice::open(&cfg).unwrap_or_else(|e| panic!("{e}"))
}

struct Setup {
    dev: Arc<VerbsDevice>,
    ctx: VerbsContext,
    pd: Pd,
    cq: Cq,
    mr: VerbsMr,
}

fn setup() -> Setup {
    let dev = open(1);
    let pd = dev.alloc_pd().unwrap();
    let mr = dev
        .reg_mr(
            pd,
            1 << 20,
            AccessFlags::LOCAL_WRITE
                | AccessFlags::REMOTE_READ
                | AccessFlags::REMOTE_WRITE
                | AccessFlags::MW_BIND,
        )
        .unwrap();
    let mut ctx = dev.open_context(0).unwrap();
    let cq = ctx.create_cq(256).unwrap();
    Setup {
        dev,
        ctx,
        pd,
        cq,
        mr,
    }
}

fn wc0() -> WorkCompletion {
    WorkCompletion::new(0, WcStatus::Success, WcOpcode::Send, 0)
}

/// Waits for `n` completions of `cq` (sleeping on the completion channel).
fn completions(ctx: &mut VerbsContext, cq: Cq, n: usize) -> Vec<WorkCompletion> {
    let mut out = Vec::new();
    let mut buf = [wc0(); 16];
    while out.len() < n {
        let k = ctx.poll_cq_blocking(cq, &mut buf, T).unwrap();
        assert!(
            k > 0,
            "only {} of {n} completions within {T:?}: {out:?}",
            out.len()
        );
        out.extend_from_slice(&buf[..k]);
    }
    out
}

fn sge(mr: &VerbsMr, off: usize, len: usize) -> SgList {
    SgList::one(Sge {
        addr: mr.addr() + off as u64,
        length: len as u32,
        lkey: mr.lkey(),
    })
}

/// Reset -> Init -> RTR -> RTS towards `dest_qpn` on the device's own address.
fn connect_by_hand(s: &mut Setup, qp: Qp, dest_qpn: u32) {
    let ctx = &mut s.ctx;
    ctx.modify_qp(
        qp,
        &QpAttr {
            qp_state: Some(QpState::Init),
            qp_access_flags: Some(
                AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ | AccessFlags::REMOTE_WRITE,
            ),
            ..Default::default()
        },
    )
    .unwrap();
    ctx.modify_qp(
        qp,
        &QpAttr {
            qp_state: Some(QpState::Rtr),
            path_mtu: Some(s.dev.path_mtu()),
            dest_qp_num: Some(dest_qpn),
            rq_psn: Some(0x100),
            max_dest_rd_atomic: Some(4),
            min_rnr_timer: Some(12),
            ah_attr: Some(AhAttr {
                dest: s.dev.ip(),
                flow_label: 0,
                hop_limit: 64,
                traffic_class: 0,
            }),
            ..Default::default()
        },
    )
    .unwrap();
    ctx.modify_qp(
        qp,
        &QpAttr {
            qp_state: Some(QpState::Rts),
            sq_psn: Some(0x100),
            timeout: Some(17),
            retry_cnt: Some(7),
            rnr_retry: Some(7),
            max_rd_atomic: Some(4),
            ..Default::default()
        },
    )
    .unwrap();
    assert_eq!(ctx.query_qp_state(qp), Some(QpState::Rts));
}

fn init_attr(s: &Setup, srq: Option<Srq>, cap: QpCap) -> QpInitAttr {
    QpInitAttr {
        pd: s.pd,
        send_cq: s.cq,
        recv_cq: s.cq,
        srq,
        cap,
        qp_type: transport::verbs::QpType::Rc,
    }
}

#[test]
#[ignore = "needs an RDMA device (run in the QEMU guest: tests/interop/verbs/run.sh)"]
fn device_gid_and_caps() {
    let dev = open(1);
    let ip = test_ip();
    assert_eq!(dev.ip(), ip);
    assert_eq!(dev.gid().gid_type, Some(transport::rdma::GidType::RoceV2));
    let c = dev.caps();
    assert!(c.max_qp_wr > 0 && c.max_sge > 0 && c.max_cqe > 0, "{c:?}");
    assert!(c.max_qp_rd_atom > 0 && c.max_qp_init_rd_atom > 0, "{c:?}");
    println!(
        "{} {} path_mtu {} caps {c:?}",
        dev.name(),
        dev.gid(),
        dev.path_mtu().bytes()
    );
    let list = transport::rdma::devices().unwrap();
    assert!(list.iter().any(|d| d.name == dev.name()));
    // A second open of one poll group fails, a new one after drop works.
    let c0 = dev.open_context(0).unwrap();
    assert!(matches!(
        dev.open_context(0),
        Err(VerbsError::InvalidArgument(_))
    ));
    assert!(dev.open_context(1).is_err());
    drop(c0);
    dev.open_context(0).unwrap();
}

#[test]
#[ignore = "needs an RDMA device (run in the QEMU guest: tests/interop/verbs/run.sh)"]
fn memory_registration_and_windows() {
    let dev = open(1);
    let pd = dev.alloc_pd().unwrap();
    let mr = dev
        .reg_mr(
            pd,
            64 << 10,
            AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ,
        )
        .unwrap();
    assert_eq!(mr.len(), 64 << 10);
    assert_eq!(mr.addr() % 4096, 0, "page aligned");
    assert_ne!(mr.lkey(), 0);
    mr.write(100, b"hello");
    let mut b = [0u8; 5];
    mr.read(100, &mut b);
    assert_eq!(&b, b"hello");
    assert!(matches!(
        dev.reg_mr(pd, 4096, AccessFlags::REMOTE_WRITE),
        Err(VerbsError::InvalidArgument(_))
    ));
    assert!(matches!(
        dev.reg_mr(pd, 0, AccessFlags::LOCAL_WRITE),
        Err(VerbsError::InvalidArgument(_))
    ));
    assert!(matches!(
        dev.reg_mr(Pd(999), 4096, AccessFlags::LOCAL_WRITE),
        Err(VerbsError::NoSuchObject)
    ));
    if dev.caps().max_mw > 0 {
        let k1 = dev.alloc_mw(pd).unwrap();
        let k2 = dev.alloc_mw(pd).unwrap();
        assert_ne!(k1 >> 8, k2 >> 8);
    } else {
        assert!(matches!(
            dev.alloc_mw(pd),
            Err(VerbsError::CapabilityExceeded { .. })
        ));
    }
}

#[test]
#[ignore = "needs an RDMA device (run in the QEMU guest: tests/interop/verbs/run.sh)"]
fn qp_state_machine_capabilities_and_loopback_traffic() {
    let mut s = setup();
    let caps = s.dev.caps();
    let too_big = QpCap {
        max_send_wr: caps.max_qp_wr + 1,
        ..QpCap::default()
    };
    let e = s.ctx.create_qp(&init_attr(&s, None, too_big)).unwrap_err();
    assert!(
        matches!(e, VerbsError::CapabilityExceeded { asked, max, .. } if asked == caps.max_qp_wr + 1 && max == caps.max_qp_wr),
        "{e}"
    );
    let cap = QpCap {
        max_send_wr: 32,
        max_recv_wr: 32,
        max_send_sge: 2,
        max_recv_sge: 2,
        max_inline_data: 64,
    };
    let qp = s.ctx.create_qp(&init_attr(&s, None, cap)).unwrap();
    let granted = s.ctx.qp_cap(qp).unwrap();
    println!("granted {granted:?}");
    assert!(granted.max_inline_data >= 64, "{granted:?}");
    assert_eq!(s.ctx.query_qp_state(qp), Some(QpState::Reset));
    let e = s
        .ctx
        .modify_qp(
            qp,
            &QpAttr {
                qp_state: Some(QpState::Rts),
                ..Default::default()
            },
        )
        .unwrap_err();
    assert_eq!(
        e,
        VerbsError::InvalidTransition {
            from: QpState::Reset,
            to: QpState::Rts
        }
    );
    let e = s
        .ctx
        .modify_qp(
            qp,
            &QpAttr {
                qp_state: Some(QpState::Init),
                max_rd_atomic: Some(u8::try_from(caps.max_qp_init_rd_atom + 1).unwrap_or(255)),
                ..Default::default()
            },
        )
        .unwrap_err();
    assert!(matches!(e, VerbsError::CapabilityExceeded { .. }), "{e}");
    // The QP talks to itself through the device (rxe loops back its own address).
    let me = qp.qpn();
    connect_by_hand(&mut s, qp, me);
    let e = s
        .ctx
        .modify_qp(
            qp,
            &QpAttr {
                qp_state: Some(QpState::Rtr),
                ..Default::default()
            },
        )
        .unwrap_err();
    assert_eq!(
        e,
        VerbsError::InvalidTransition {
            from: QpState::Rts,
            to: QpState::Rtr
        }
    );
    let mr = &s.mr;
    let msg: Vec<u8> = (0..3000u32).map(|i| (i * 13) as u8).collect();
    mr.write(0, &msg);
    s.ctx
        .post_recv(
            qp,
            &RecvWr {
                wr_id: 10,
                sg_list: sge(mr, 8192, 4096),
            },
        )
        .unwrap();
    s.ctx
        .post_send(
            qp,
            &SendWr {
                wr_id: 11,
                op: SendOp::SendWithImm {
                    imm_data: 0xdead_beef,
                },
                sg_list: sge(mr, 0, msg.len()),
                flags: SendFlags::SIGNALED,
            },
        )
        .unwrap();
    let wcs = completions(&mut s.ctx, s.cq, 2);
    let recv = wcs
        .iter()
        .find(|w| w.wr_id == 10)
        .expect("receive completion");
    assert_eq!(recv.status, WcStatus::Success);
    assert_eq!(
        (recv.opcode, recv.byte_len, recv.imm_data),
        (WcOpcode::Recv, 3000, Some(0xdead_beef))
    );
    let mut got = vec![0u8; 3000];
    mr.read(8192, &mut got);
    assert_eq!(got, msg);
    // RDMA WRITE then READ within the MR, chained in one post.
    let remote = mr.addr() + 65536;
    s.ctx
        .post_send_list(
            qp,
            &[
                SendWr {
                    wr_id: 20,
                    op: SendOp::RdmaWrite {
                        remote_addr: remote,
                        rkey: mr.rkey(),
                    },
                    sg_list: sge(mr, 0, 3000),
                    flags: SendFlags::empty(),
                },
                SendWr {
                    wr_id: 21,
                    op: SendOp::RdmaRead {
                        remote_addr: remote,
                        rkey: mr.rkey(),
                    },
                    sg_list: sge(mr, 131072, 3000),
                    flags: SendFlags::SIGNALED | SendFlags::FENCE,
                },
            ],
        )
        .unwrap();
    let wcs = completions(&mut s.ctx, s.cq, 1);
    assert_eq!(
        (wcs[0].wr_id, wcs[0].status, wcs[0].opcode),
        (21, WcStatus::Success, WcOpcode::RdmaRead)
    );
    mr.read(131072, &mut got);
    assert_eq!(got, msg);
    // Inline beyond the grant is refused before the device sees it.
    let over = granted.max_inline_data as usize + 1;
    let e = s
        .ctx
        .post_send(
            qp,
            &SendWr {
                wr_id: 30,
                op: SendOp::Send,
                sg_list: sge(mr, 0, over),
                flags: SendFlags::INLINE,
            },
        )
        .unwrap_err();
    assert!(matches!(e, VerbsError::CapabilityExceeded { .. }), "{e}");
    // A remote access error completes with IBV_WC_REM_ACCESS_ERR.
    s.ctx
        .post_send(
            qp,
            &SendWr {
                wr_id: 40,
                op: SendOp::RdmaWrite {
                    remote_addr: remote,
                    rkey: mr.rkey() ^ 0x0100_0000,
                },
                sg_list: sge(mr, 0, 64),
                flags: SendFlags::SIGNALED,
            },
        )
        .unwrap();
    let wcs = completions(&mut s.ctx, s.cq, 1);
    assert_eq!(
        (wcs[0].wr_id, wcs[0].status),
        (40, WcStatus::RemAccessErr),
        "{wcs:?}"
    );
    assert_eq!(s.ctx.query_qp_state(qp), Some(QpState::Error));
    s.ctx.destroy_qp(qp).unwrap();
    assert_eq!(s.ctx.destroy_qp(qp), Err(VerbsError::NoSuchObject));
}

#[test]
#[ignore = "needs an RDMA device (run in the QEMU guest: tests/interop/verbs/run.sh)"]
fn memory_window_bind_and_remote_access() {
    let mut s = setup();
    if s.dev.caps().max_mw == 0 {
        panic!("{} has no memory windows (max_mw 0)", s.dev.name());
    }
    let cap = QpCap {
        max_inline_data: 0,
        ..QpCap::default()
    };
    let qp = s.ctx.create_qp(&init_attr(&s, None, cap)).unwrap();
    let me = qp.qpn();
    connect_by_hand(&mut s, qp, me);
    let mw = s.dev.alloc_mw(s.pd).unwrap();
    let rkey = transport::verbs::inc_rkey(mw);
    let window = s.mr.addr() + 4096;
    s.ctx
        .post_send(
            qp,
            &SendWr {
                wr_id: 1,
                op: SendOp::BindMw {
                    mw_handle: mw,
                    rkey,
                    mr_lkey: s.mr.lkey(),
                    addr: window,
                    length: 4096,
                    access: AccessFlags::REMOTE_READ | AccessFlags::REMOTE_WRITE,
                },
                sg_list: SgList::new(),
                flags: SendFlags::SIGNALED,
            },
        )
        .unwrap();
    let w = completions(&mut s.ctx, s.cq, 1);
    assert_eq!(
        (w[0].status, w[0].opcode),
        (WcStatus::Success, WcOpcode::BindMw),
        "{w:?}"
    );
    s.mr.write(0, &[0xA5; 512]);
    s.ctx
        .post_send(
            qp,
            &SendWr {
                wr_id: 2,
                op: SendOp::RdmaWrite {
                    remote_addr: window + 100,
                    rkey,
                },
                sg_list: sge(&s.mr, 0, 512),
                flags: SendFlags::SIGNALED,
            },
        )
        .unwrap();
    let w = completions(&mut s.ctx, s.cq, 1);
    assert_eq!(w[0].status, WcStatus::Success, "{w:?}");
    let mut got = [0u8; 512];
    s.mr.read(4096 + 100, &mut got);
    assert_eq!(got, [0xA5; 512]);
    // Invalidated (IBV_WR_LOCAL_INV of the window's rkey): the key no longer grants
    // access, the write completes with a remote access error. (Linux 6.1 rxe checks a
    // window access against the range of the MR under it, not the window's, so a write
    // just past the window inside the MR is not refused there: not asserted.)
    s.ctx
        .post_send(
            qp,
            &SendWr {
                wr_id: 3,
                op: SendOp::LocalInv { rkey },
                sg_list: SgList::new(),
                flags: SendFlags::SIGNALED,
            },
        )
        .unwrap();
    let w = completions(&mut s.ctx, s.cq, 1);
    assert_eq!(
        (w[0].status, w[0].opcode),
        (WcStatus::Success, WcOpcode::LocalInv),
        "{w:?}"
    );
    s.ctx
        .post_send(
            qp,
            &SendWr {
                wr_id: 4,
                op: SendOp::RdmaWrite {
                    remote_addr: window + 100,
                    rkey,
                },
                sg_list: sge(&s.mr, 0, 512),
                flags: SendFlags::SIGNALED,
            },
        )
        .unwrap();
    let w = completions(&mut s.ctx, s.cq, 1);
    assert_eq!(
        (w[0].wr_id, w[0].status),
        (4, WcStatus::RemAccessErr),
        "{w:?}"
    );
}

#[test]
#[ignore = "needs an RDMA device (run in the QEMU guest: tests/interop/verbs/run.sh)"]
fn srq_limit_event_is_one_shot_and_rearmed() {
    let mut s = setup();
    let srq = s.ctx.create_srq(s.pd, 64).unwrap();
    let sender = s
        .ctx
        .create_qp(&init_attr(&s, None, QpCap::default()))
        .unwrap();
    let receiver = s
        .ctx
        .create_qp(&init_attr(&s, Some(srq), QpCap::default()))
        .unwrap();
    let (a, b) = (sender.qpn(), receiver.qpn());
    connect_by_hand(&mut s, sender, b);
    connect_by_hand(&mut s, receiver, a);
    let post = |ctx: &mut VerbsContext, mr: &VerbsMr, n: u64, base: u64| {
        for i in 0..n {
            ctx.post_srq_recv(
                srq,
                &RecvWr {
                    wr_id: base + i,
                    sg_list: sge(mr, 8192 + (i as usize % 16) * 256, 256),
                },
            )
            .unwrap();
        }
    };
    post(&mut s.ctx, &s.mr, 10, 100);
    assert!(matches!(
        s.ctx.arm_srq_limit(srq, 0),
        Err(VerbsError::InvalidArgument(_))
    ));
    assert!(matches!(
        s.ctx.arm_srq_limit(srq, 64),
        Err(VerbsError::InvalidArgument(_))
    ));
    s.ctx.arm_srq_limit(srq, 4).unwrap();
    let send = |ctx: &mut VerbsContext, mr: &VerbsMr, n: u64| {
        for i in 0..n {
            ctx.post_send(
                sender,
                &SendWr {
                    wr_id: 1000 + i,
                    op: SendOp::Send,
                    sg_list: sge(mr, 0, 64),
                    flags: SendFlags::SIGNALED,
                },
            )
            .unwrap();
        }
    };
    // The next SRQ limit event within 3 s (other async events are printed and skipped).
    let wait_event = |ctx: &mut VerbsContext| -> Option<AsyncEvent> {
        let end = std::time::Instant::now() + Duration::from_secs(3);
        while std::time::Instant::now() < end {
            match ctx.poll_async_event() {
                Some(e @ AsyncEvent::SrqLimitReached { .. }) => return Some(e),
                Some(other) => println!("async event {other:?}"),
                None => ctx.wait(Duration::from_millis(50)),
            }
        }
        None
    };
    // 10 posted, 7 consumed: 3 remain, under the limit 4.
    send(&mut s.ctx, &s.mr, 7);
    let _ = completions(&mut s.ctx, s.cq, 14);
    assert_eq!(
        wait_event(&mut s.ctx),
        Some(AsyncEvent::SrqLimitReached { srq })
    );
    // One-shot: further consumption raises nothing until re-armed.
    send(&mut s.ctx, &s.mr, 1);
    let _ = completions(&mut s.ctx, s.cq, 2);
    assert_eq!(wait_event(&mut s.ctx), None);
    // Refill to 2 + 10 = 12, re-arm at 4, consume 9: 3 remain -> a second event.
    post(&mut s.ctx, &s.mr, 10, 200);
    s.ctx.arm_srq_limit(srq, 4).unwrap();
    send(&mut s.ctx, &s.mr, 9);
    let _ = completions(&mut s.ctx, s.cq, 18);
    assert_eq!(
        wait_event(&mut s.ctx),
        Some(AsyncEvent::SrqLimitReached { srq })
    );
}

#[test]
#[ignore = "needs an RDMA device (run in the QEMU guest: tests/interop/verbs/run.sh)"]
fn completion_channel_wait_returns_on_timeout_and_on_completion() {
    let mut s = setup();
    let qp = s
        .ctx
        .create_qp(&init_attr(&s, None, QpCap::default()))
        .unwrap();
    let me = qp.qpn();
    connect_by_hand(&mut s, qp, me);
    let mut buf = [wc0(); 4];
    assert_eq!(
        s.ctx
            .poll_cq_blocking(s.cq, &mut buf, Duration::from_millis(200))
            .unwrap(),
        0
    );
    s.ctx
        .post_recv(
            qp,
            &RecvWr {
                wr_id: 1,
                sg_list: sge(&s.mr, 4096, 64),
            },
        )
        .unwrap();
    s.ctx
        .post_send(
            qp,
            &SendWr {
                wr_id: 2,
                op: SendOp::Send,
                sg_list: sge(&s.mr, 0, 64),
                flags: SendFlags::SIGNALED,
            },
        )
        .unwrap();
    let w = completions(&mut s.ctx, s.cq, 2);
    assert!(w.iter().all(|w| w.status == WcStatus::Success), "{w:?}");
}

/// The server side of the CM test: accepts one request whose private data starts with
/// `b"accept"`, rejects others with `b"no thanks"`; checks one SEND and waits for the
/// disconnect.
fn cm_server(dev: Arc<VerbsDevice>, port: u16, ready: std::sync::mpsc::Sender<()>) {
    let cm = dev.cm().unwrap();
    let events = cm.listen(port).unwrap();
    assert!(
        matches!(cm.listen(port), Err(ConnError::Cm(transport::cm::CmError::AlreadyListening(p))) if p == port)
    );
    let mut ctx = dev.open_context(0).unwrap();
    let pd = dev.alloc_pd().unwrap();
    let mr = dev.reg_mr(pd, 4096, AccessFlags::LOCAL_WRITE).unwrap();
    let cq = ctx.create_cq(16).unwrap();
    ready.send(()).unwrap();
    let init = QpInitAttr {
        pd,
        send_cq: cq,
        recv_cq: cq,
        srq: None,
        cap: QpCap::default(),
        qp_type: transport::verbs::QpType::Rc,
    };
    loop {
        let ev = events.recv_timeout(T).expect("a connection request");
        let Some(req) = ConnRequest::from_event(&ev) else {
            continue;
        };
        assert_eq!(req.private_data.len(), 56, "user part of the REQ");
        if !req.private_data.starts_with(b"accept") {
            cm.reject(req.id, b"no thanks").unwrap();
            continue;
        }
        assert_eq!(req.remote_ip, dev.ip());
        let (qp, token) = cm.create_accept_qp(&mut ctx, &req, &init, 8).unwrap();
        assert_eq!(ctx.query_qp_state(qp), Some(QpState::Init));
        assert!(token.responder_resources <= req.initiator_depth);
        assert!(token.initiator_depth <= req.responder_resources.min(8));
        ctx.post_recv(
            qp,
            &RecvWr {
                wr_id: 7,
                sg_list: sge(&mr, 0, 4096),
            },
        )
        .unwrap();
        cm.accept(req.id, token, b"welcome").unwrap();
        assert_eq!(ctx.query_qp_state(qp), Some(QpState::Rts));
        // The client disconnects (and the QP goes to Error) only after this check.
        ready.send(()).unwrap();
        let mut established = false;
        let mut buf = [wc0(); 4];
        let n = ctx.poll_cq_blocking(cq, &mut buf, T).unwrap();
        assert_eq!(n, 1);
        assert_eq!(
            (buf[0].wr_id, buf[0].status, buf[0].byte_len),
            (7, WcStatus::Success, 11)
        );
        let mut got = [0u8; 11];
        mr.read(0, &mut got);
        assert_eq!(&got, b"hello there");
        loop {
            match events
                .recv_timeout(T)
                .expect("Established, then Disconnected")
            {
                CmEvent::Established { id, .. } if id == req.id => established = true,
                CmEvent::Disconnected { id } if id == req.id => break,
                other => panic!("unexpected {other:?}"),
            }
        }
        assert!(established);
        ctx.destroy_qp(qp).unwrap();
        return;
    }
}

#[test]
#[ignore = "needs an RDMA device (run in the QEMU guest: tests/interop/verbs/run.sh)"]
fn rdma_cm_connect_accept_reject_disconnect() {
    let dev = open(2);
    let port = 7300;
    let (tx, rx) = std::sync::mpsc::channel();
    let d2 = dev.clone();
    let server = std::thread::spawn(move || cm_server(d2, port, tx));
    rx.recv_timeout(T).expect("server ready");
    let cm = dev.cm().unwrap();
    let mut ctx = dev.open_context(1).unwrap();
    let pd = dev.alloc_pd().unwrap();
    let mr = dev.reg_mr(pd, 4096, AccessFlags::LOCAL_WRITE).unwrap();
    let cq = ctx.create_cq(16).unwrap();
    let init = QpInitAttr {
        pd,
        send_cq: cq,
        recv_cq: cq,
        srq: None,
        cap: QpCap::default(),
        qp_type: transport::verbs::QpType::Rc,
    };
    let params = |pd: &[u8], port: u16| ConnectRequestParams {
        dest: SocketAddr::new(dev.ip(), port),
        responder_resources: 4,
        initiator_depth: 4,
        retry_count: 7,
        rnr_retry_count: 7,
        local_ack_timeout: Some(17),
        private_data: pd.to_vec(),
        timeout: Duration::from_secs(10),
    };
    // Too much private data: refused before anything is sent.
    let e = cm
        .connect(&mut ctx, &init, &params(&[0; 57], port), &mut |_, _| Ok(()))
        .unwrap_err();
    assert!(
        matches!(
            e,
            ConnError::Cm(transport::cm::CmError::PrivateDataTooLong { len: 57, max: 56 })
        ),
        "{e}"
    );
    // Rejected with the server's private data (consumer defined, reason 28).
    let e = cm
        .connect(
            &mut ctx,
            &init,
            &params(b"please", port),
            &mut |_, _| Ok(()),
        )
        .unwrap_err();
    match e {
        ConnError::Rejected {
            reason,
            private_data,
        } => {
            assert_eq!(reason, 28);
            assert!(private_data.starts_with(b"no thanks"), "{private_data:?}");
        }
        e => panic!("{e}"),
    }
    // Nobody listens on this port: the peer's CM rejects (invalid service ID).
    let e = cm
        .connect(&mut ctx, &init, &params(b"x", port + 1), &mut |_, _| Ok(()))
        .unwrap_err();
    assert!(
        matches!(
            e,
            ConnError::Rejected { .. } | ConnError::Unreachable { .. }
        ),
        "{e}"
    );
    println!("no listener: {e}");
    // Accepted: the QP is in RTS and carries data.
    let mut posted = 0;
    let conn = cm
        .connect(
            &mut ctx,
            &init,
            &params(b"accept me", port),
            &mut |ctx, qp| {
                posted += 1;
                ctx.post_recv(
                    qp,
                    &RecvWr {
                        wr_id: 1,
                        sg_list: sge(&mr, 2048, 64),
                    },
                )
            },
        )
        .unwrap();
    assert_eq!(posted, 1);
    assert!(
        conn.rep_private_data.starts_with(b"welcome"),
        "{:?}",
        conn.rep_private_data
    );
    assert_eq!(ctx.query_qp_state(conn.qp), Some(QpState::Rts));
    mr.write(0, b"hello there");
    ctx.post_send(
        conn.qp,
        &SendWr {
            wr_id: 2,
            op: SendOp::Send,
            sg_list: sge(&mr, 0, 11),
            flags: SendFlags::SIGNALED,
        },
    )
    .unwrap();
    let mut buf = [wc0(); 4];
    assert_eq!(ctx.poll_cq_blocking(cq, &mut buf, T).unwrap(), 1);
    assert_eq!((buf[0].wr_id, buf[0].status), (2, WcStatus::Success));
    rx.recv_timeout(T).expect("the server checked its QP");
    cm.disconnect(conn.id).unwrap();
    match conn.events.recv_timeout(T) {
        Ok(CmEvent::Disconnected { id }) => assert_eq!(id, conn.id),
        other => panic!("{other:?}"),
    }
    // Disconnecting again is fine; the receive was flushed.
    cm.disconnect(conn.id).unwrap();
    let n = ctx.poll_cq_blocking(cq, &mut buf, T).unwrap();
    assert_eq!(
        (n, buf[0].wr_id, buf[0].status),
        (1, 1, WcStatus::WrFlushErr)
    );
    ctx.destroy_qp(conn.qp).unwrap();
    server.join().unwrap();
    // An address nobody has: no ARP answer -> unreachable or timed out.
    let mut p = params(b"x", port);
    p.dest = SocketAddr::new(
        match dev.ip() {
            IpAddr::V4(v4) => IpAddr::V4(std::net::Ipv4Addr::from(u32::from(v4) ^ 0x7e)),
            v6 => v6,
        },
        port,
    );
    p.timeout = Duration::from_secs(4);
    let e = cm
        .connect(&mut ctx, &init, &p, &mut |_, _| Ok(()))
        .unwrap_err();
    assert!(
        matches!(e, ConnError::Unreachable { .. } | ConnError::Timeout { .. }),
        "{e}"
    );
    println!("nobody at {}: {e}", p.dest);
}

/// The provider-generic checks (`provider/checks.rs`), between two poll groups of the
/// device: connect / accept with private data, the READ depths of the REP, SEND / RDMA
/// WRITE / RDMA READ, disconnect seen by both; reject with private data; a port nobody
/// listens on.
#[test]
#[ignore = "needs an RDMA device (run in the QEMU guest: tests/interop/verbs/run.sh)"]
fn provider_generic_checks() {
    let dev = open(2);
    checks::connect_accept_traffic_disconnect::<transport::rdma::VerbsProvider>(
        &dev, 0, &dev, 1, 7310,
    );
    checks::reject_and_unlistened::<transport::rdma::VerbsProvider>(&dev, &dev, 1, 7320);
}
