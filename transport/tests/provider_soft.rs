//! The provider traits on the soft provider, over real UDP sockets on loopback
//! (127.0.0.160 - 127.0.0.173, one address per device):
//! - the generic checks of `provider/checks.rs` (also run on the verbs provider):
//!   connect / accept with private data, READ depths, SEND / RDMA WRITE / RDMA READ,
//!   disconnect, reject with private data, a port nobody listens on;
//! - a restarted client that reuses its QPN: REJ stale connection (`ConnError::Stale`),
//!   then a retry with a new QP connects;
//! - a silent peer: `ConnError::Timeout`, the QP destroyed;
//! - SRQ limit events (one-shot, re-armed) and CQ events on a connection whose server
//!   receives through an SRQ;
//! - typed errors and the soft provider's capabilities;
//! - the device's CM: one agent per device, kept while the device lives;
//! - the ping-pong example's driver, generic over the provider, on this one.
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::Duration;

use transport::cm::{CmError, CmEvent};
use transport::soft::{CmAgent, CmAgentError, DeviceConfig, SoftDevice, SoftProvider};
use transport::soft::{SOFT_CAPS, SOFT_MAX_QUEUE_WR};
use transport::verbs::connection::ConnError;
use transport::verbs::{
    AccessFlags, AsyncEvent, ConnectionManager as _, Context as _, Cq, Device as _, DeviceOf,
    MemoryRegion as _, Provider, QpAttr, QpCap, QpInitAttr, QpState, RecvWr, SendFlags, SendOp,
    SendWr, SgList, Sge, Srq, VerbsError, WcOpcode, WcStatus, WorkCompletion,
};

#[path = "provider/checks.rs"]
mod checks;
#[path = "../examples/pingpong/proto.rs"]
mod proto;
#[path = "../examples/pingpong/run.rs"]
mod run;

use checks::{next_request, params, side, T};

fn ip(last: u8) -> IpAddr {
    IpAddr::from([127, 0, 0, last])
}

fn open(last: u8) -> Arc<SoftDevice> {
    SoftProvider::open(&SoftProvider::device_config(ip(last), 1)).expect("open a soft device")
}

fn wc0() -> WorkCompletion {
    WorkCompletion::new(0, WcStatus::Success, WcOpcode::Send, 0)
}

#[test]
fn connect_accept_traffic_disconnect() {
    let (s, c) = (open(160), open(161));
    checks::connect_accept_traffic_disconnect::<SoftProvider>(&s, 0, &c, 0, 4420);
}

#[test]
fn reject_with_private_data_and_unlistened_port() {
    let (s, c) = (open(162), open(163));
    checks::reject_and_unlistened::<SoftProvider>(&s, &c, 0, 4420);
}

/// Accepts every request on `events` with `dev`'s poll group 0 until `stop` is closed;
/// reports each StaleConnection event's remote QPN.
fn accept_all<P: Provider>(
    dev: Arc<DeviceOf<P>>,
    port: u16,
    ready: mpsc::Sender<()>,
    stale: mpsc::Sender<u32>,
    stop: mpsc::Receiver<()>,
) {
    let mut s = side::<P>(&dev, 0);
    let events = s.cm.listen(port).unwrap();
    ready.send(()).unwrap();
    while let Err(mpsc::TryRecvError::Empty) = stop.try_recv() {
        s.ctx.progress();
        let Ok(ev) = events.recv_timeout(Duration::from_millis(2)) else {
            continue;
        };
        if let CmEvent::StaleConnection { remote_qpn, .. } = ev {
            stale.send(remote_qpn).unwrap();
        } else if let Some(req) = transport::verbs::connection::ConnRequest::from_event(&ev) {
            let (_qp, token) = s.cm.create_accept_qp(&mut s.ctx, &req, &s.init, 1).unwrap();
            s.cm.accept(req.id, token, b"ok").unwrap();
        }
    }
}

/// A client process that died without disconnecting comes back with the same QPN: the
/// server still holds the old connection, so the REQ is rejected as stale
/// (`ConnError::Stale`, the QP destroyed); a retry with the next QP connects.
#[test]
fn restarted_client_reusing_its_qpn_is_stale_then_retries() {
    let client_cfg = DeviceConfig {
        first_qpn: Some(0x700),
        ..DeviceConfig::new(ip(165))
    };
    stale_then_retry::<SoftProvider>(open(164), &|| {
        SoftDevice::open(client_cfg.clone()).expect("open the client device")
    });
}

fn stale_then_retry<P: Provider>(
    server: Arc<DeviceOf<P>>,
    open_client: &dyn Fn() -> Arc<DeviceOf<P>>,
) {
    let (ready_tx, ready) = mpsc::channel();
    let (stale_tx, stale) = mpsc::channel();
    let (stop, stop_rx) = mpsc::channel();
    let dest = SocketAddr::new(server.ip(), 4420);
    let t = std::thread::spawn(move || accept_all::<P>(server, 4420, ready_tx, stale_tx, stop_rx));
    ready.recv_timeout(T).unwrap();
    let first_qpn = {
        let dev = open_client();
        let mut c = side::<P>(&dev, 0);
        let conn =
            c.cm.connect(&mut c.ctx, &c.init, &params(dest, b"one"), &mut |_, _| {
                Ok(())
            })
            .expect("first connection");
        conn.qp.qpn()
        // The "process" ends here: no disconnect; its device and CM agent go.
    };
    let dev = open_client();
    let mut c = side::<P>(&dev, 0);
    let mut made = None;
    let e =
        c.cm.connect(&mut c.ctx, &c.init, &params(dest, b"two"), &mut |_, qp| {
            made = Some(qp);
            Ok(())
        })
        .expect_err("a REQ from a QP with a live connection");
    assert_eq!(e, ConnError::Stale);
    let qp = made.unwrap();
    assert_eq!(qp.qpn(), first_qpn, "the restarted client reused the QPN");
    assert_eq!(c.ctx.query_qp_state(qp), None, "the QP is destroyed");
    assert_eq!(stale.recv_timeout(T), Ok(first_qpn), "the server was told");
    let conn =
        c.cm.connect(&mut c.ctx, &c.init, &params(dest, b"three"), &mut |_, _| {
            Ok(())
        })
        .expect("the retry with a new QP connects");
    assert_ne!(conn.qp.qpn(), first_qpn);
    assert_eq!(conn.rep_private_data[..2], *b"ok");
    drop(stop);
    t.join().unwrap();
}

/// Nothing answers the REQ (a plain UDP socket holds the peer's port 4791): the connect
/// gives up after its timeout and destroys the QP it made.
#[test]
fn silent_peer_times_out_and_the_qp_is_destroyed() {
    let _silent = UdpSocket::bind((ip(167), 4791)).unwrap();
    silent_peer::<SoftProvider>(open(166));
}

fn silent_peer<P: Provider>(dev: Arc<DeviceOf<P>>) {
    let mut c = side::<P>(&dev, 0);
    let mut p = params(SocketAddr::new(ip(167), 4420), b"anyone?");
    p.timeout = Duration::from_millis(300);
    let mut made = None;
    let e =
        c.cm.connect(&mut c.ctx, &c.init, &p, &mut |_, qp| {
            made = Some(qp);
            Ok(())
        })
        .expect_err("nobody answers");
    assert!(
        matches!(e, ConnError::Timeout { dest, .. } if dest == p.dest),
        "{e:?}"
    );
    assert_eq!(c.ctx.query_qp_state(made.unwrap()), None);
}

fn send_wr(addr: u64, lkey: u32) -> SendWr {
    SendWr {
        wr_id: 1,
        op: SendOp::Send,
        sg_list: SgList::one(Sge {
            addr,
            length: 32,
            lkey,
        }),
        flags: SendFlags::SIGNALED,
    }
}

/// The server's QP receives through an SRQ of 8 with 6 receives posted and the limit
/// armed at 4; the client sends one SEND at a time. The 3rd receive leaves 3 (< 4): one
/// SrqLimitReached, and no other; armed again at 3 while 2 remain, the next receive
/// fires it again. Each receive is taken through the CQ's event (req_notify_cq + wait).
#[test]
fn srq_limit_events_are_one_shot_and_rearmed() {
    srq_limit_events::<SoftProvider>(open(168), open(169));
}

fn srq_limit_events<P: Provider>(sdev: Arc<DeviceOf<P>>, cdev: Arc<DeviceOf<P>>) {
    let mut s = side::<P>(&sdev, 0);
    let srq = s.ctx.create_srq(s.init.pd, 8).unwrap();
    for i in 0..6u64 {
        let wr = RecvWr {
            wr_id: 100 + i,
            sg_list: SgList::one(Sge {
                addr: s.mr.addr() + i * 64,
                length: 64,
                lkey: s.mr.lkey(),
            }),
        };
        s.ctx.post_srq_recv(srq, &wr).unwrap();
    }
    s.ctx.arm_srq_limit(srq, 4).unwrap();
    let events = s.cm.listen(4420).unwrap();
    let (go_tx, go) = mpsc::channel::<bool>();
    let dest = SocketAddr::new(sdev.ip(), 4420);
    let client = std::thread::spawn(move || {
        let mut c = side::<P>(&cdev, 0);
        let conn =
            c.cm.connect(&mut c.ctx, &c.init, &params(dest, b"srq"), &mut |_, _| {
                Ok(())
            })
            .unwrap();
        // One SEND per `true`; `false`: disconnect.
        while go.recv_timeout(T).unwrap() {
            c.ctx
                .post_send(conn.qp, &send_wr(c.mr.addr(), c.mr.lkey()))
                .unwrap();
            let mut w = [wc0(); 1];
            assert_eq!(c.ctx.poll_cq_blocking(c.cq, &mut w, T), Ok(1));
            assert_eq!(w[0].status, WcStatus::Success);
        }
        c.cm.disconnect(conn.id).unwrap();
        checks::await_disconnected::<P>(&mut c.ctx, &conn.events, conn.id);
    });
    let req = next_request(&events);
    let init = QpInitAttr {
        srq: Some(srq),
        ..s.init
    };
    let (qp, token) = s.cm.create_accept_qp(&mut s.ctx, &req, &init, 1).unwrap();
    s.cm.accept(req.id, token, b"").unwrap();
    // Nothing arrives: the CQ's event never comes and the wait ends empty-handed.
    let mut w = [wc0(); 4];
    assert_eq!(
        s.ctx
            .poll_cq_blocking(s.cq, &mut w, Duration::from_millis(20)),
        Ok(0)
    );
    let receive = |s: &mut checks::Side<P>, n: u64| {
        go_tx.send(true).unwrap();
        let mut w = [wc0(); 4];
        assert_eq!(s.ctx.poll_cq_blocking(s.cq, &mut w, T), Ok(1));
        assert_eq!(
            (w[0].wr_id, w[0].status, w[0].qp_num),
            (100 + n, WcStatus::Success, qp.qpn())
        );
        s.ctx.poll_async_event()
    };
    assert_eq!(receive(&mut s, 0), None, "5 left");
    assert_eq!(receive(&mut s, 1), None, "4 left: not below the limit");
    assert_eq!(
        receive(&mut s, 2),
        Some(AsyncEvent::SrqLimitReached { srq }),
        "3 left"
    );
    assert_eq!(s.ctx.poll_async_event(), None, "one event");
    assert_eq!(receive(&mut s, 3), None, "disarmed");
    s.ctx.arm_srq_limit(srq, 3).unwrap();
    assert_eq!(
        s.ctx.poll_async_event(),
        None,
        "arming below the limit is no receive"
    );
    assert_eq!(
        receive(&mut s, 4),
        Some(AsyncEvent::SrqLimitReached { srq }),
        "re-armed"
    );
    go_tx.send(false).unwrap();
    checks::await_disconnected::<P>(&mut s.ctx, &events, req.id);
    client.join().unwrap();
}

/// What the traits type: capabilities beyond SOFT_CAPS, transitions the QP state
/// machine does not have, bad SRQ limits and handles, too much private data.
#[test]
fn typed_errors_and_capabilities() {
    typed_errors::<SoftProvider>(open(170));
}

fn typed_errors<P: Provider>(dev: Arc<DeviceOf<P>>) {
    assert_eq!(dev.caps(), SOFT_CAPS);
    assert_eq!((SOFT_CAPS.max_sge, SOFT_CAPS.max_inline_data), (4, 0));
    let mut s = side::<P>(&dev, 0);
    let too_many_sges = QpInitAttr {
        cap: QpCap {
            max_send_sge: 5,
            ..QpCap::default()
        },
        ..s.init
    };
    assert_eq!(
        s.ctx.create_qp(&too_many_sges),
        Err(VerbsError::CapabilityExceeded {
            what: "max_send_sge (max_sge)",
            asked: 5,
            max: 4
        })
    );
    assert!(matches!(
        s.ctx.create_cq(SOFT_MAX_QUEUE_WR + 1),
        Err(VerbsError::CapabilityExceeded { .. })
    ));
    let qp = s.ctx.create_qp(&s.init).unwrap();
    let cap = s.ctx.qp_cap(qp).unwrap();
    assert_eq!(
        (cap.max_send_wr, cap.max_inline_data),
        (s.init.cap.max_send_wr, 0)
    );
    let rts = QpAttr {
        qp_state: Some(QpState::Rts),
        ..Default::default()
    };
    assert_eq!(
        s.ctx.modify_qp(qp, &rts),
        Err(VerbsError::InvalidTransition {
            from: QpState::Reset,
            to: QpState::Rts
        })
    );
    let srq: Srq = s.ctx.create_srq(s.init.pd, 16).unwrap();
    for bad in [0, 16] {
        assert!(matches!(
            s.ctx.arm_srq_limit(srq, bad),
            Err(VerbsError::InvalidArgument(_))
        ));
    }
    assert!(matches!(
        s.ctx.arm_srq_limit(Srq(9), 1),
        Err(VerbsError::InvalidArgument(_))
    ));
    assert!(matches!(
        s.ctx.req_notify_cq(Cq(9)),
        Err(VerbsError::InvalidArgument(_))
    ));
    assert!(matches!(
        dev.reg_mr(s.init.pd, 0, AccessFlags::LOCAL_WRITE),
        Err(VerbsError::InvalidArgument(_))
    ));
    let mut called = false;
    let e =
        s.cm.connect(
            &mut s.ctx,
            &s.init,
            &params(SocketAddr::new(ip(171), 4420), &[0; 57]),
            &mut |_, _| {
                called = true;
                Ok(())
            },
        )
        .unwrap_err();
    assert_eq!(
        e,
        ConnError::Cm(CmError::PrivateDataTooLong { len: 57, max: 56 })
    );
    assert!(!called, "refused before a QP was made");
}

/// `Device::cm` hands out the device's one CM agent (started explicitly, or on first
/// use), which the device keeps: a listen through any handle, even after the others
/// were dropped, is refused on a port another one listens on, and `CmAgent::start` is
/// refused. With the device gone, the agent is gone too: a new device on the address
/// starts a new one, with no listeners.
#[test]
fn the_device_cm_is_one_agent_kept_by_the_device() {
    let dev = open(171);
    let started = CmAgent::start(&dev).expect("start the agent");
    let events = started.listen(7000).expect("listen");
    drop(started);
    one_agent::<SoftProvider>(&dev, 7000);
    assert!(matches!(
        CmAgent::start(&dev),
        Err(CmAgentError::AlreadyStarted)
    ));
    drop((dev, events));
    let dev = open(171);
    dev.cm()
        .expect("a new device's agent")
        .listen(7000)
        .expect("the new agent listens on nothing yet");
}

fn one_agent<P: Provider>(dev: &Arc<DeviceOf<P>>, port: u16) {
    for _ in 0..2 {
        assert_eq!(
            dev.cm().unwrap().listen(port).unwrap_err(),
            ConnError::Cm(CmError::AlreadyListening(port))
        );
    }
}

/// The ping-pong example's driver (`examples/pingpong/run.rs`, generic over the
/// provider) on the soft provider: server and client over loopback, every size up to
/// 1 MiB, the server's region behind a memory window.
#[test]
fn pingpong_example_on_the_soft_provider() {
    let (tx, rx) = mpsc::channel();
    let server = std::thread::spawn(move || {
        run::server::<SoftProvider>(ip(172), 7475, 1, true, T, &|| {
            let _ = tx.send(());
        })
    });
    rx.recv_timeout(T).expect("the server listens");
    run::client::<SoftProvider>(
        ip(173),
        SocketAddr::new(ip(172), 7475),
        &[1, 4096, 65536, 1 << 20],
        1,
        T,
    )
    .expect("every check passed");
    server.join().unwrap().expect("the server served");
}
