//! State machine tests: two `Cm`s exchanging MADs in memory, in virtual time, plus
//! interop checks against the Linux MADs of the reference captures.
use std::net::IpAddr;

use rand::{Rng, SeedableRng};
use zerocopy::IntoBytes;

use super::*;
use crate::verbs::Mtu;
use crate::wire::cm::tests::golden;
use crate::wire::cm::*;
use crate::wire::mad::*;

const T0: Timestamp = Timestamp(1_000_000_000);

/// The host's REQ interval for the REQ of `connect_params` (ACK timeout 0x13, CM
/// response timeout 20): 2 x 1024 + 4096 ms, as Linux.
fn req_iv() -> std::time::Duration {
    timer::req_interval(timer::packet_life_time(0x13), 20)
}

/// The target's REP/DREQ interval for that REQ (its Local CM Response Timeout 20).
fn rep_iv() -> std::time::Duration {
    timer::cm_convert(20)
}

/// The TimeWait period of both sides for that REQ (ACK timeout 0x13, ACK delay 15).
fn timewait() -> std::time::Duration {
    timer::cm_convert(0x13)
}

fn est(id: ConnId) -> CmEvent {
    CmEvent::Established {
        id,
        peer_selective_retransmit: true,
    }
}

fn ip(s: &str) -> IpAddr {
    s.parse().expect("ip")
}

fn host() -> Cm {
    Cm::new(ip("10.0.0.1"), 1)
}

fn target() -> Cm {
    let mut t = Cm::new(ip("10.0.0.2"), 2);
    t.listen(4420).unwrap();
    t
}

fn connect_params(dest: IpAddr) -> ConnectParams {
    ConnectParams {
        dest,
        dest_port: 4420,
        src_port: 47554,
        local_qpn: 0x11,
        starting_psn: 0x29fa4c,
        responder_resources: 0x80,
        initiator_depth: 0,
        retry_count: 7,
        rnr_retry_count: 7,
        path_mtu: Mtu::Mtu1024,
        local_ack_timeout: 0x13,
        private_data: vec![0, 0, 0, 0, 32, 0, 31, 0],
    }
}

fn accept_params() -> AcceptParams {
    AcceptParams {
        local_qpn: 0x22,
        starting_psn: 0x29864d,
        responder_resources: 0,
        initiator_depth: 0x80,
        rnr_retry_count: 7,
        private_data: vec![0, 0, 32, 0],
    }
}

fn drain_tx(cm: &mut Cm) -> Vec<(IpAddr, [u8; MAD_LEN])> {
    std::iter::from_fn(|| cm.poll_transmit()).collect()
}

fn events(cm: &mut Cm) -> Vec<CmEvent> {
    std::iter::from_fn(|| cm.poll_event()).collect()
}

/// Delivers everything `from` has queued to `to`; returns how many MADs moved.
fn pump(now: Timestamp, from: &mut Cm, to: &mut Cm) -> usize {
    let mads = drain_tx(from);
    for (dest, mad) in &mads {
        assert_eq!(*dest, to.local_ip());
        to.handle_mad(now, from.local_ip(), mad);
    }
    mads.len()
}

fn decode(mad: &[u8; MAD_LEN]) -> CmMessage {
    CmMessage::decode(mad).expect("our MADs decode").1
}

/// Runs REQ -> ConnectRequest -> accept -> REP -> ConnectReply; returns (host id,
/// target id) with the host in RepRcvd and the target in RepSent.
fn to_rep_rcvd(h: &mut Cm, t: &mut Cm) -> (ConnId, ConnId) {
    let hid = h.connect(T0, connect_params(t.local_ip())).unwrap();
    assert_eq!(pump(T0, h, t), 1);
    let tid = match events(t).as_slice() {
        [CmEvent::ConnectRequest { id, .. }] => *id,
        other => panic!("expected one ConnectRequest, got {other:?}"),
    };
    t.accept(T0, tid, accept_params()).unwrap();
    assert_eq!(pump(T0, t, h), 1);
    assert!(matches!(events(h).as_slice(), [CmEvent::ConnectReply { id, .. }] if *id == hid));
    (hid, tid)
}

fn establish(h: &mut Cm, t: &mut Cm) -> (ConnId, ConnId) {
    let (hid, tid) = to_rep_rcvd(h, t);
    h.send_rtu(T0, hid).unwrap();
    assert_eq!(events(h), vec![est(hid)]);
    assert_eq!(pump(T0, h, t), 1);
    assert_eq!(events(t), vec![est(tid)]);
    (hid, tid)
}

#[test]
fn connect_accept_rtu_established_on_both() {
    let (mut h, mut t) = (host(), target());
    let hid = h.connect(T0, connect_params(t.local_ip())).unwrap();
    assert_eq!(h.conn_info(hid).unwrap().state, CmState::ReqSent);
    assert_eq!(h.poll_timeout(), Some(T0 + req_iv()));
    assert_eq!(pump(T0, &mut h, &mut t), 1);
    let ev = events(&mut t);
    let [CmEvent::ConnectRequest {
        id: tid,
        remote_ip,
        remote_port,
        local_port,
        remote_qpn,
        remote_psn,
        responder_resources,
        initiator_depth,
        path_mtu,
        local_ack_timeout,
        retry_count,
        rnr_retry_count,
        flow_label,
        traffic_class,
        hop_limit,
        srq,
        peer_selective_retransmit,
        private_data,
    }] = ev.as_slice()
    else {
        panic!("expected one ConnectRequest, got {ev:?}")
    };
    assert_eq!((*traffic_class, *hop_limit, *srq), (0, 64, false));
    assert!(*peer_selective_retransmit);
    let tid = *tid;
    assert_eq!(*remote_ip, ip("10.0.0.1"));
    assert_eq!((*remote_port, *local_port), (47554, 4420));
    assert_eq!((*remote_qpn, *remote_psn), (0x11, 0x29fa4c));
    assert_eq!((*responder_resources, *initiator_depth), (0x80, 0));
    assert_eq!(*path_mtu, Mtu::Mtu1024);
    assert_eq!(
        (*local_ack_timeout, *retry_count, *rnr_retry_count),
        (0x13, 7, 7)
    );
    assert_eq!(*flow_label, 0x68fc2);
    assert_eq!(private_data.len(), 56);
    assert_eq!(&private_data[..8], &[0, 0, 0, 0, 32, 0, 31, 0]);
    assert_eq!(t.conn_info(tid).unwrap().state, CmState::ReqRcvd);

    t.accept(T0, tid, accept_params()).unwrap();
    assert_eq!(t.conn_info(tid).unwrap().state, CmState::RepSent);
    assert_eq!(pump(T0, &mut t, &mut h), 1);
    let ev = events(&mut h);
    let [CmEvent::ConnectReply {
        id,
        remote_qpn,
        remote_psn,
        responder_resources,
        initiator_depth,
        rnr_retry_count,
        flow_label,
        target_ack_delay,
        peer_selective_retransmit,
        private_data,
    }] = ev.as_slice()
    else {
        panic!("expected one ConnectReply, got {ev:?}")
    };
    assert_eq!(*target_ack_delay, 15);
    assert!(*peer_selective_retransmit);
    assert_eq!(*id, hid);
    assert_eq!((*remote_qpn, *remote_psn), (0x22, 0x29864d));
    assert_eq!(
        (*responder_resources, *initiator_depth, *rnr_retry_count),
        (0, 0x80, 7)
    );
    assert_eq!(*flow_label, 0x68fc2);
    assert_eq!(crate::wire::udp_sport_from_flow_label(*flow_label), 53208);
    assert_eq!(private_data.len(), 196);
    assert_eq!(&private_data[..4], &[0, 0, 32, 0]);
    assert_eq!(h.poll_timeout(), None, "REP stops the REQ timer");

    h.send_rtu(T0, hid).unwrap();
    assert_eq!(events(&mut h), vec![est(hid)]);
    assert_eq!(pump(T0, &mut h, &mut t), 1);
    assert_eq!(events(&mut t), vec![est(tid)]);
    assert_eq!(t.poll_timeout(), None, "RTU stops the REP timer");

    let hi = h.conn_info(hid).unwrap();
    assert_eq!((hi.role, hi.state), (CmRole::Active, CmState::Established));
    assert_eq!(
        (hi.remote_ip, hi.remote_qpn, hi.remote_comm_id),
        (ip("10.0.0.2"), 0x22, tid.0)
    );
    let ti = t.conn_info(tid).unwrap();
    assert_eq!((ti.role, ti.state), (CmRole::Passive, CmState::Established));
    assert_eq!(
        (ti.remote_ip, ti.remote_qpn, ti.remote_comm_id),
        (ip("10.0.0.1"), 0x11, hid.0)
    );
    assert_eq!((ti.local_qpn, ti.flow_label), (0x22, 0x68fc2));
    // Both sides' RC packets leave from the UDP port Linux uses for this flow label.
    assert_eq!((hi.udp_sport(), ti.udp_sport()), (53208, 53208));
}

#[test]
fn reject_with_private_data() {
    let (mut h, mut t) = (host(), target());
    let hid = h.connect(T0, connect_params(t.local_ip())).unwrap();
    pump(T0, &mut h, &mut t);
    let Some(CmEvent::ConnectRequest { id: tid, .. }) = t.poll_event() else {
        panic!("REQ")
    };
    // NVMe/RDMA reject private data: recfmt 0, status 0x0006 (invalid HRQSIZE).
    t.reject(T0, tid, CM_REJ_CONSUMER_DEFINED, &[0, 0, 6, 0])
        .unwrap();
    assert!(t.conn_info(tid).is_none());
    let [(_, mad)] = drain_tx(&mut t)[..] else {
        panic!("one REJ")
    };
    let CmMessage::Rej(rej) = decode(&mad) else {
        panic!("REJ")
    };
    assert_eq!(rej.message_rejected(), CM_MSG_REQ);
    assert_eq!(rej.remote_comm_id.get(), hid.0);
    // Linux cm_format_rej from REQ_RCVD: Local Communication ID 0.
    assert_eq!(rej.local_comm_id.get(), 0);
    h.handle_mad(T0, t.local_ip(), &mad);
    let ev = events(&mut h);
    let [CmEvent::Rejected {
        id,
        reason,
        private_data,
    }] = ev.as_slice()
    else {
        panic!("expected Rejected, got {ev:?}")
    };
    assert_eq!((*id, *reason), (hid, CM_REJ_CONSUMER_DEFINED));
    assert_eq!(private_data.len(), 148);
    assert_eq!(&private_data[..4], &[0, 0, 6, 0]);
    assert!(h.conn_info(hid).is_none());
    assert_eq!(h.poll_timeout(), None);
    // Too much private data is refused before anything is sent.
    assert_eq!(
        h.connect(
            T0,
            ConnectParams {
                private_data: vec![0; 57],
                ..connect_params(t.local_ip())
            }
        ),
        Err(CmError::PrivateDataTooLong { len: 57, max: 56 })
    );
}

#[test]
fn req_to_unlistened_port_gets_rej_invalid_service_id() {
    let (mut h, mut t) = (host(), target());
    let hid = h
        .connect(
            T0,
            ConnectParams {
                dest_port: 4421,
                ..connect_params(t.local_ip())
            },
        )
        .unwrap();
    pump(T0, &mut h, &mut t);
    assert!(events(&mut t).is_empty());
    assert_eq!(t.conn_count(), 0);
    let [(_, mad)] = drain_tx(&mut t)[..] else {
        panic!("one REJ")
    };
    let (hdr, CmMessage::Rej(rej)) = CmMessage::decode(&mad).unwrap() else {
        panic!("REJ")
    };
    // As Linux cm_issue_rej (e-roce-probe.pcap frame 6): the REQ's bytes 4..8 (its
    // vendor ID word, 0 from Linux) as Local Communication ID, TransactionID echoed.
    assert_eq!(rej.local_comm_id.get(), VENDOR_ID_SR_REQ);
    assert_eq!(hdr.transaction_id.get() as u32, hid.0);
    assert_eq!(rej.reason.get(), CM_REJ_INVALID_SERVICE_ID);
    h.handle_mad(T0, t.local_ip(), &mad);
    assert!(matches!(
        events(&mut h).as_slice(),
        [CmEvent::Rejected { id, reason: CM_REJ_INVALID_SERVICE_ID, .. }] if *id == hid
    ));
    assert_eq!(h.conn_count(), 0);
}

/// The REP is lost: the target resends it after its interval (the REQ's Local CM
/// Response Timeout). A REQ resent meanwhile is dropped (Linux answers nothing in
/// REP_SENT). Then the RTU is lost: the next REP resend makes the host resend its RTU.
#[test]
fn lost_rep_and_lost_rtu_are_repaired() {
    let (mut h, mut t) = (host(), target());
    let hid = h.connect(T0, connect_params(t.local_ip())).unwrap();
    pump(T0, &mut h, &mut t);
    let Some(CmEvent::ConnectRequest { id: tid, .. }) = t.poll_event() else {
        panic!("REQ")
    };
    t.accept(T0, tid, accept_params()).unwrap();
    let lost = drain_tx(&mut t);
    assert_eq!(lost.len(), 1);
    // Nothing before the deadline.
    let t1 = T0 + rep_iv();
    assert_eq!(t.poll_timeout(), Some(t1));
    t.handle_timeout(Timestamp(t1.0 - 1));
    assert!(drain_tx(&mut t).is_empty());
    t.handle_timeout(t1);
    let resent = drain_tx(&mut t);
    assert_eq!(resent, lost, "the same REP again");
    assert_eq!(t.stats().retransmits, 1);
    // The host's REQ timer fires: the duplicate REQ gets no answer in RepSent.
    let t2 = T0 + req_iv();
    h.handle_timeout(t2);
    assert_eq!(pump(t2, &mut h, &mut t), 1);
    assert!(events(&mut t).is_empty());
    assert!(drain_tx(&mut t).is_empty());
    assert_eq!(t.stats().duplicates, 1);
    for (_, mad) in &resent {
        h.handle_mad(t2, t.local_ip(), mad);
    }
    assert_eq!(events(&mut h).len(), 1, "one ConnectReply");
    h.send_rtu(t2, hid).unwrap();
    events(&mut h);
    let rtu = drain_tx(&mut h);
    assert_eq!(rtu.len(), 1); // ... and lost.
    let t3 = t1 + rep_iv();
    t.handle_timeout(t3);
    assert_eq!(pump(t3, &mut t, &mut h), 1, "REP resent");
    assert_eq!(drain_tx(&mut h), rtu, "RTU resent for the duplicate REP");
    for (_, mad) in &rtu {
        t.handle_mad(t3, h.local_ip(), mad);
    }
    assert_eq!(events(&mut t), vec![est(tid)]);
    assert_eq!(t.poll_timeout(), None);
}

/// A REQ repeated while the application has not answered gets an MRA (rdma_cm's
/// delayed MRA, service timeout 24), and the same MRA for every further repeat; the
/// host then waits 2^16 + 2^11 ms before resending. Accepting still works.
#[test]
fn duplicate_req_before_accept_gets_mra() {
    let (mut h, mut t) = (host(), target());
    let hid = h.connect(T0, connect_params(t.local_ip())).unwrap();
    let req = drain_tx(&mut h);
    for (_, mad) in req.iter() {
        t.handle_mad(T0, h.local_ip(), mad);
    }
    let Some(CmEvent::ConnectRequest { id: tid, .. }) = t.poll_event() else {
        panic!("REQ")
    };
    assert!(drain_tx(&mut t).is_empty(), "no MRA before a duplicate");
    for (_, mad) in req.iter().chain(req.iter()) {
        t.handle_mad(T0, h.local_ip(), mad);
    }
    assert!(events(&mut t).is_empty());
    let mras = drain_tx(&mut t);
    assert_eq!(mras.len(), 2);
    assert_eq!(mras[0], mras[1]);
    let (hdr, CmMessage::Mra(mra)) = CmMessage::decode(&mras[0].1).unwrap() else {
        panic!("MRA")
    };
    assert_eq!(
        hdr.transaction_id.get() as u32,
        hid.0,
        "echoes the REQ's TID"
    );
    assert_eq!(
        (mra.local_comm_id.get(), mra.remote_comm_id.get()),
        (tid.0, hid.0)
    );
    assert_eq!(
        (mra.message_mraed(), mra.service_timeout()),
        (CM_MSG_REQ, 24)
    );
    assert_eq!(t.conn_info(tid).unwrap().state, CmState::MraReqSent);
    assert_eq!((t.stats().duplicates, t.stats().mras_sent), (2, 2));
    h.handle_mad(T0, t.local_ip(), &mras[0].1);
    assert_eq!(h.conn_info(hid).unwrap().state, CmState::MraReqRcvd);
    assert_eq!(h.poll_timeout(), Some(T0 + timer::mra_interval(24, 0x13)));
    t.accept(T0, tid, accept_params()).unwrap();
    assert_eq!(pump(T0, &mut t, &mut h), 1);
    assert!(matches!(
        events(&mut h).as_slice(),
        [CmEvent::ConnectReply { .. }]
    ));
}

#[test]
fn established_before_rtu() {
    let (mut h, mut t) = (host(), target());
    let (_, tid) = to_rep_rcvd(&mut h, &mut t);
    t.established(tid);
    assert_eq!(events(&mut t), vec![est(tid)]);
    assert_eq!(t.poll_timeout(), None);
    t.established(tid); // no second event
    assert!(events(&mut t).is_empty());
}

#[test]
fn disconnect_from_host_then_timewait() {
    let (mut h, mut t) = (host(), target());
    let (hid, tid) = establish(&mut h, &mut t);
    h.disconnect(T0, hid).unwrap();
    assert_eq!(h.conn_info(hid).unwrap().state, CmState::DreqSent);
    let dreq = drain_tx(&mut h);
    let (hdr, CmMessage::Dreq(d)) = CmMessage::decode(&dreq[0].1).unwrap() else {
        panic!("DREQ")
    };
    assert_eq!(d.remote_qpn(), 0x22);
    // cm_form_tid: the host's own TID, the one of its REQ.
    assert_eq!(hdr.transaction_id.get() as u32, hid.0);
    t.handle_mad(T0, h.local_ip(), &dreq[0].1);
    assert_eq!(events(&mut t), vec![CmEvent::Disconnected { id: tid }]);
    assert_eq!(t.conn_info(tid).unwrap().state, CmState::TimeWait);
    assert_eq!(pump(T0, &mut t, &mut h), 1);
    assert_eq!(events(&mut h), vec![CmEvent::Disconnected { id: hid }]);
    assert_eq!(h.conn_info(hid).unwrap().state, CmState::TimeWait);
    assert_eq!((h.live_conn_count(), t.live_conn_count()), (0, 0));
    // Disconnecting again is a no-op.
    assert_eq!(h.disconnect(T0, hid), Ok(()));
    assert!(drain_tx(&mut h).is_empty());
    // TimeWait: 2^(0x13-8) ms on both sides (ACK timeout 0x13, ACK delay 15).
    assert_eq!(h.poll_timeout(), Some(T0 + timewait()));
    assert_eq!(t.poll_timeout(), Some(T0 + timewait()));
    h.handle_timeout(T0 + timewait());
    t.handle_timeout(T0 + timewait());
    assert_eq!((h.conn_count(), t.conn_count()), (0, 0));
    assert_eq!(h.poll_timeout(), None);
    assert!(events(&mut h).is_empty() && events(&mut t).is_empty());
    assert_eq!(h.disconnect(T0, hid), Err(CmError::UnknownConnection(hid)));
}

/// The target disconnects; its first DREP answer is lost, the DREQ is resent and the
/// host, in TimeWait, answers again with the same DREP.
#[test]
fn disconnect_from_target_with_lost_drep() {
    let (mut h, mut t) = (host(), target());
    let (hid, tid) = establish(&mut h, &mut t);
    t.disconnect(T0, tid).unwrap();
    let dreq = drain_tx(&mut t);
    let CmMessage::Dreq(d) = decode(&dreq[0].1) else {
        panic!("DREQ")
    };
    assert_eq!(d.remote_qpn(), 0x11);
    h.handle_mad(T0, t.local_ip(), &dreq[0].1);
    assert_eq!(events(&mut h), vec![CmEvent::Disconnected { id: hid }]);
    let lost_drep = drain_tx(&mut h);
    assert_eq!(lost_drep.len(), 1);
    let t1 = T0 + rep_iv();
    t.handle_timeout(t1);
    assert_eq!(drain_tx(&mut t), dreq);
    h.handle_mad(t1, t.local_ip(), &dreq[0].1);
    assert!(events(&mut h).is_empty());
    let drep = drain_tx(&mut h);
    assert_eq!(drep, lost_drep, "the same DREP from TimeWait");
    t.handle_mad(t1, h.local_ip(), &drep[0].1);
    assert_eq!(events(&mut t), vec![CmEvent::Disconnected { id: tid }]);
    assert_eq!((h.live_conn_count(), t.live_conn_count()), (0, 0));
    // After TimeWait the host has forgotten the connection and still answers.
    let late = t1 + timewait() + timewait();
    h.handle_timeout(late);
    assert_eq!(h.conn_count(), 0);
    h.handle_mad(late, t.local_ip(), &dreq[0].1);
    assert_eq!(drain_tx(&mut h), lost_drep);
}

#[test]
fn unanswered_req_gives_unreachable_after_15_retries() {
    let mut h = host();
    let hid = h.connect(T0, connect_params(ip("10.0.0.9"))).unwrap();
    let mut sent = drain_tx(&mut h).len();
    let mut now = T0;
    while let Some(t) = h.poll_timeout() {
        assert!(t > now);
        now = t;
        h.handle_timeout(now);
        sent += drain_tx(&mut h).len();
    }
    assert_eq!(sent, 1 + usize::from(CM_MAX_RETRIES));
    assert_eq!(events(&mut h), vec![CmEvent::Unreachable { id: hid }]);
    assert!(h.conn_info(hid).is_none());
}

/// The REP goes unanswered through the REQ's Max CM Retries (15): Unreachable, and no
/// REJ (Linux cm_process_send_error resets to idle without a message).
#[test]
fn unanswered_rep_gives_unreachable_without_rej() {
    let (mut h, mut t) = (host(), target());
    h.connect(T0, connect_params(t.local_ip())).unwrap();
    pump(T0, &mut h, &mut t);
    let Some(CmEvent::ConnectRequest { id: tid, .. }) = t.poll_event() else {
        panic!("REQ")
    };
    t.accept(T0, tid, accept_params()).unwrap();
    let first = drain_tx(&mut t);
    let mut sent = first.len();
    let mut last = T0;
    while let Some(now) = t.poll_timeout() {
        assert_eq!(now, last + rep_iv());
        last = now;
        t.handle_timeout(now);
        for (_, mad) in drain_tx(&mut t) {
            assert!(matches!(decode(&mad), CmMessage::Rep(_)));
            sent += 1;
        }
    }
    assert_eq!(sent, 16);
    assert_eq!(events(&mut t), vec![CmEvent::Unreachable { id: tid }]);
    assert_eq!(t.conn_count(), 0);
}

#[test]
fn mra_postpones_the_req_resend() {
    let (mut h, t) = (host(), target());
    let hid = h.connect(T0, connect_params(t.local_ip())).unwrap();
    drain_tx(&mut h);
    let mut mra = CmMra::zeroed();
    mra.local_comm_id.set(0x1234);
    mra.remote_comm_id.set(hid.0);
    mra.set_message_mraed(CM_MSG_REQ);
    mra.set_service_timeout(21); // 8.6 s
    h.handle_mad(T0, t.local_ip(), &mra.to_mad(7));
    // Linux cm_mra_handler: service timeout + the ACK timeout (0x13), as ms.
    let iv = std::time::Duration::from_millis(8192 + 2048);
    assert_eq!(h.poll_timeout(), Some(T0 + iv));
    h.handle_timeout(T0 + req_iv());
    assert!(drain_tx(&mut h).is_empty());
    h.handle_timeout(T0 + iv);
    assert_eq!(drain_tx(&mut h).len(), 1);
    // ... and the next retries keep the longer interval.
    assert_eq!(h.poll_timeout(), Some(T0 + iv + iv));
    // A second MRA is a duplicate.
    h.handle_mad(T0, t.local_ip(), &mra.to_mad(7));
    assert_eq!(h.stats().duplicates, 1);
}

#[test]
fn api_state_errors() {
    let (mut h, mut t) = (host(), target());
    assert_eq!(t.listen(4420), Err(CmError::AlreadyListening(4420)));
    let (hid, tid) = to_rep_rcvd(&mut h, &mut t);
    assert!(matches!(
        t.accept(T0, tid, accept_params()),
        Err(CmError::InvalidState { .. })
    ));
    assert!(matches!(
        h.disconnect(T0, hid),
        Err(CmError::InvalidState { .. })
    ));
    assert!(matches!(
        t.send_mra(T0, tid, 24),
        Err(CmError::InvalidState { .. })
    ));
    assert!(matches!(
        h.send_mra(T0, hid, 32),
        Err(CmError::InvalidParameter(_))
    ));
    assert_eq!(
        h.send_rtu(T0, ConnId(1)),
        Err(CmError::UnknownConnection(ConnId(1)))
    );
    assert!(matches!(
        h.connect(T0, connect_params(ip("fd00::1"))),
        Err(CmError::AddressFamilyMismatch { .. })
    ));
    // The host may still reject the REP.
    h.reject(T0, hid, CM_REJ_CONSUMER_DEFINED, &[]).unwrap();
    pump(T0, &mut h, &mut t);
    assert!(matches!(events(&mut t).as_slice(), [CmEvent::Rejected { id, .. }] if *id == tid));
    assert_eq!((h.conn_count(), t.conn_count()), (0, 0));
}

#[test]
fn ipv6_connection() {
    let mut h = Cm::new(ip("fd77::11"), 3);
    let mut t = Cm::new(ip("fd77::10"), 4);
    t.listen(4420).unwrap();
    let (hid, tid) = establish(&mut h, &mut t);
    assert_eq!(t.conn_info(tid).unwrap().remote_ip, ip("fd77::11"));
    assert_eq!(h.conn_info(hid).unwrap().remote_ip, ip("fd77::10"));
}

/// Arbitrary bytes, and valid MADs with random corruption, never panic; every MAD we
/// answer with is itself a well-formed CM MAD.
#[test]
fn random_mads_never_panic() {
    let mut rng = rand::rngs::StdRng::seed_from_u64(0x5eed);
    let (mut h, mut t) = (host(), target());
    establish(&mut h, &mut t);
    h.connect(T0, connect_params(t.local_ip())).unwrap();
    let mut seeds: Vec<[u8; MAD_LEN]> = drain_tx(&mut h).into_iter().map(|(_, m)| m).collect();
    for (c, f) in [
        ("linux-nvme-rdma-rxe.pcap", 4),
        ("linux-nvme-rdma-rxe.pcap", 5),
        ("linux-nvme-rdma-rxe.pcap", 6),
        ("linux-nvme-rdma-rxe.pcap", 87),
        ("linux-nvme-rdma-rxe.pcap", 88),
        ("e-roce-probe.pcap", 6),
    ] {
        seeds.push(golden(c, f));
    }
    let before = t.stats().mads_received;
    let mut now = T0;
    for i in 0..4000 {
        let buf: Vec<u8> = if i % 2 == 0 {
            let len = rng.gen_range(0..=300);
            let mut b: Vec<u8> = (0..len).map(|_| rng.gen()).collect();
            if b.len() >= 24 && rng.gen_bool(0.5) {
                // A valid CM header with a random attribute ID near the CM range.
                let attr = rng.gen_range(0x0010..=0x001B);
                b[..24].copy_from_slice(MadHeader::cm(attr, rng.gen()).as_bytes());
            }
            b
        } else {
            let mut b = seeds[rng.gen_range(0..seeds.len())].to_vec();
            for _ in 0..rng.gen_range(1..8) {
                let at = rng.gen_range(24..MAD_LEN);
                b[at] = rng.gen();
            }
            b
        };
        let src = if rng.gen_bool(0.5) {
            h.local_ip()
        } else {
            ip("192.168.77.11")
        };
        t.handle_mad(now, src, &buf);
        h.handle_mad(now, t.local_ip(), &buf);
        now = now + std::time::Duration::from_millis(10);
        t.handle_timeout(now);
        h.handle_timeout(now);
        for cm in [&mut h, &mut t] {
            for (_, mad) in drain_tx(cm) {
                assert!(CmMessage::decode(&mad).is_ok());
            }
            events(cm);
        }
    }
    assert!(t.stats().malformed + t.stats().unsupported > 0);
    assert_eq!(t.stats().mads_received, before + 4000);
    assert!(
        t.stats().mads_sent > 0,
        "some corrupted REQs/DREQs still got answers"
    );
}
