//! Checks of the provider traits written once over `P: Provider`, run on the soft
//! provider (`provider_soft.rs`, loopback) and on the verbs provider (`verbs_rxe.rs`,
//! Linux rxe in the QEMU guest): connect / accept with private data both ways, the READ
//! depths the CM exchange settles, SEND / RDMA WRITE / RDMA READ on the connected QPs
//! (the ping-pong protocol of `examples/pingpong/proto.rs`), disconnect seen by both
//! sides, reject with private data, and a port nobody listens on.
//!
//! A test file that includes this module also includes the ping-pong's
//! `#[path = "../examples/pingpong/proto.rs"] mod proto;` and
//! `#[path = "../examples/pingpong/run.rs"] mod run;`.
#![allow(dead_code)]

use std::net::SocketAddr;
use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam::channel::Receiver;
use transport::cm::{CmEvent, ConnId};
use transport::verbs::connection::{ConnError, ConnRequest, ConnectRequestParams};
use transport::verbs::{
    ConnectionManager as _, Context as _, ContextOf, Device as _, DeviceOf, MemoryRegion as _,
    Provider, Qp, QpState,
};

use crate::proto::{self, Link, Session, RD_ATOMIC};

/// How long any step may take.
pub const T: Duration = Duration::from_secs(20);
/// The REQ's private data (the CM pads it to 56 bytes).
pub const REQ_PD: &[u8] = b"provider-check REQ";
/// The REP's private data.
pub const REP_PD: &[u8] = b"provider-check REP";
/// The REJ's private data.
pub const REJ_PD: &[u8] = b"provider-check REJ: go away";
/// IBTA Table 112 REJ reason 8, invalid service ID (nobody listens on the port).
pub const CM_REJ_INVALID_SERVICE_ID: u16 = 8;

pub use crate::run::Side;

/// Opens poll group `group` of `dev` with the ping-pong's MR, a CQ and the CM
/// (`examples/pingpong/run.rs`).
pub fn side<P: Provider>(dev: &Arc<DeviceOf<P>>, group: u32) -> Side<P> {
    crate::run::side::<P>(dev, group).unwrap_or_else(|e| panic!("{e}"))
}

/// What a client asks for: IRD and ORD [`RD_ATOMIC`], the provider's ACK timeout.
pub fn params(dest: SocketAddr, private_data: &[u8]) -> ConnectRequestParams {
    ConnectRequestParams {
        dest,
        responder_resources: RD_ATOMIC,
        initiator_depth: RD_ATOMIC,
        retry_count: 7,
        rnr_retry_count: 7,
        local_ack_timeout: None,
        private_data: private_data.to_vec(),
        timeout: T,
    }
}

/// Drives `ctx` until `events` reports `id` disconnected (skipping other events).
pub fn await_disconnected<P: Provider>(
    ctx: &mut ContextOf<P>,
    events: &Receiver<CmEvent>,
    id: ConnId,
) {
    let end = Instant::now() + T;
    while Instant::now() < end {
        ctx.progress();
        if let Ok(CmEvent::Disconnected { id: d }) = events.recv_timeout(Duration::from_millis(5)) {
            if d == id {
                return;
            }
        }
    }
    panic!("connection {id:?} not disconnected within {T:?}");
}

/// The next connection request on `events` (skipping other events).
pub fn next_request(events: &Receiver<CmEvent>) -> ConnRequest {
    let end = Instant::now() + T;
    loop {
        let left = end.saturating_duration_since(Instant::now());
        let ev = events
            .recv_timeout(left)
            .expect("a connection request in time");
        if let Some(r) = ConnRequest::from_event(&ev) {
            return r;
        }
    }
}

/// What the server side saw.
#[derive(Debug)]
pub struct Served {
    /// The client's QPN from the request.
    pub remote_qpn: u32,
    /// Requests the ping-pong answered.
    pub answered: u32,
}

/// Accepts one connection on `port` of `dev`'s poll group `group` (sending `()` on
/// `ready` once it listens), checks the request and the accepted QP, serves the
/// ping-pong and waits for the client's disconnect.
pub fn accept_and_serve<P: Provider>(
    dev: Arc<DeviceOf<P>>,
    group: u32,
    port: u16,
    ready: mpsc::Sender<()>,
) -> Served {
    let mut s = side::<P>(&dev, group);
    let events = s.cm.listen(port).expect("listen");
    ready.send(()).unwrap();
    let req = next_request(&events);
    assert_eq!(req.local_port, port);
    assert_eq!(req.private_data.len(), 56, "the REQ's user private data");
    assert!(
        req.private_data.starts_with(REQ_PD),
        "{:?}",
        req.private_data
    );
    let ord = 4;
    let (qp, token) =
        s.cm.create_accept_qp(&mut s.ctx, &req, &s.init, ord)
            .expect("create_accept_qp");
    assert_eq!(token.qpn, qp.qpn());
    let caps = dev.caps();
    assert_eq!(
        (token.responder_resources, token.initiator_depth),
        (
            caps.ird_for(u8::MAX, req.initiator_depth),
            caps.ord_for(ord, req.responder_resources)
        ),
        "READ depths from the device and the request"
    );
    s.ctx
        .post_recv(qp, &proto::recv_wr(s.mr.addr(), s.mr.lkey()))
        .expect("post_recv");
    s.cm.accept(req.id, token, REP_PD).expect("accept");
    assert_eq!(s.ctx.query_qp_state(qp), Some(QpState::Rts));
    match events.recv_timeout(T).expect("Established in time") {
        CmEvent::Established { id, .. } if id == req.id => {}
        other => panic!("before Established: {other:?}"),
    }
    let Side { ctx, mr, cq, .. } = s;
    let mut session = Session::new(Link::<P>::new(ctx, mr, cq, qp), T);
    let answered = session.serve(None).expect("serve");
    await_disconnected::<P>(&mut session.link.ctx, &events, req.id);
    session.link.ctx.destroy_qp(qp).expect("destroy_qp");
    Served {
        remote_qpn: req.remote_qpn,
        answered,
    }
}

/// A client of [`accept_and_serve`] on `server_dev:port` from `client_dev`'s poll group
/// `client_group`: connects (the receive posted by the callback, the QP in Init then),
/// checks the REP and the READ depths, runs the ping-pong, disconnects.
pub fn connect_accept_traffic_disconnect<P: Provider>(
    server_dev: &Arc<DeviceOf<P>>,
    server_group: u32,
    client_dev: &Arc<DeviceOf<P>>,
    client_group: u32,
    port: u16,
) {
    let (tx, rx) = mpsc::channel();
    let d = server_dev.clone();
    let server = std::thread::spawn(move || accept_and_serve::<P>(d, server_group, port, tx));
    rx.recv_timeout(T).expect("the server listens");
    let mut c = side::<P>(client_dev, client_group);
    let p = params(SocketAddr::new(server_dev.ip(), port), REQ_PD);
    let recv = proto::recv_wr(c.mr.addr(), c.mr.lkey());
    let mut posted: Option<(Qp, Option<QpState>)> = None;
    let conn =
        c.cm.connect(&mut c.ctx, &c.init, &p, &mut |ctx, qp| {
            posted = Some((qp, ctx.query_qp_state(qp)));
            ctx.post_recv(qp, &recv)
        })
        .expect("connect");
    assert_eq!(
        posted,
        Some((conn.qp, Some(QpState::Init))),
        "receives posted in Init"
    );
    assert_eq!(c.ctx.query_qp_state(conn.qp), Some(QpState::Rts));
    assert!(
        conn.rep_private_data.starts_with(REP_PD),
        "{:?}",
        conn.rep_private_data
    );
    // What the REQ asked (capped by the client's device) and the server granted.
    let (sc, cc) = (server_dev.caps(), client_dev.caps());
    let (req_ird, req_ord) = (
        cc.ird_for(RD_ATOMIC, u8::MAX),
        cc.ord_for(RD_ATOMIC, u8::MAX),
    );
    assert_eq!(
        (conn.responder_resources, conn.initiator_depth),
        (sc.ird_for(u8::MAX, req_ord), sc.ord_for(4, req_ird)),
        "the REP's READ depths"
    );
    let Side {
        ctx, mr, cq, cm, ..
    } = c;
    let mut session = Session::new(Link::<P>::new(ctx, mr, cq, conn.qp), T);
    session
        .run_client(&[1, 4096, 65536], 2)
        .expect("SEND, RDMA WRITE and RDMA READ checked");
    cm.disconnect(conn.id).expect("disconnect");
    await_disconnected::<P>(&mut session.link.ctx, &conn.events, conn.id);
    session.link.ctx.destroy_qp(conn.qp).expect("destroy_qp");
    let served = server.join().expect("the server side's checks");
    assert_eq!(served.remote_qpn, conn.qp.qpn());
    // HELLO is not counted; per size and iteration a SEND and a WRITE check.
    assert_eq!(served.answered, 3 * 2 * 2);
}

/// A server that rejects with [`REJ_PD`], and a port nobody listens on: the client's
/// connect fails with the REJ's reason and private data, and its QP is gone.
pub fn reject_and_unlistened<P: Provider>(
    server_dev: &Arc<DeviceOf<P>>,
    client_dev: &Arc<DeviceOf<P>>,
    client_group: u32,
    port: u16,
) {
    let cm = server_dev.cm().expect("the device's CM");
    let events = cm.listen(port).expect("listen");
    let rejecter = std::thread::spawn(move || {
        let req = next_request(&events);
        cm.reject(req.id, REJ_PD).expect("reject");
        req.private_data
    });
    let mut c = side::<P>(client_dev, client_group);
    let dest = SocketAddr::new(server_dev.ip(), port);
    let mut made = None;
    let e =
        c.cm.connect(&mut c.ctx, &c.init, &params(dest, REQ_PD), &mut |_, qp| {
            made = Some(qp);
            Ok(())
        })
        .expect_err("rejected");
    match e {
        ConnError::Rejected {
            reason,
            private_data,
        } => {
            assert_eq!(
                reason,
                transport::verbs::connection::CM_REJ_CONSUMER_DEFINED
            );
            assert!(private_data.starts_with(REJ_PD), "{private_data:?}");
        }
        other => panic!("expected Rejected, got {other:?}"),
    }
    let qp = made.expect("the QP was made before the REQ");
    assert_eq!(c.ctx.query_qp_state(qp), None, "the QP is destroyed");
    assert!(rejecter.join().unwrap().starts_with(REQ_PD));

    let dest = SocketAddr::new(server_dev.ip(), port + 1);
    match c
        .cm
        .connect(&mut c.ctx, &c.init, &params(dest, REQ_PD), &mut |_, _| {
            Ok(())
        }) {
        Err(ConnError::Rejected { reason, .. }) => assert_eq!(reason, CM_REJ_INVALID_SERVICE_ID),
        other => panic!("expected REJ invalid service ID, got {other:?}"),
    }
}
