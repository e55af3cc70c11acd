//! State machine tests beyond the happy path: TimeWait and stale connections, DREQ
//! retries and QP checks, destroy in each state, explicit MRAs, the selective
//! retransmission capability bits.
use std::net::IpAddr;

use super::*;
use crate::verbs::Mtu;
use crate::wire::cm::*;
use crate::wire::mad::*;

const T0: Timestamp = Timestamp(2_000_000_000);

fn ip(s: &str) -> IpAddr {
    s.parse().expect("ip")
}

fn params(dest: IpAddr, qpn: u32) -> ConnectParams {
    ConnectParams {
        dest,
        dest_port: 4420,
        src_port: 50000,
        local_qpn: qpn,
        starting_psn: 1,
        responder_resources: 16,
        initiator_depth: 0,
        retry_count: 7,
        rnr_retry_count: 7,
        path_mtu: Mtu::Mtu1024,
        local_ack_timeout: 0x13,
        private_data: vec![],
    }
}

fn accept(qpn: u32) -> AcceptParams {
    AcceptParams {
        local_qpn: qpn,
        starting_psn: 2,
        responder_resources: 0,
        initiator_depth: 16,
        rnr_retry_count: 7,
        private_data: vec![],
    }
}

fn drain_tx(cm: &mut Cm) -> Vec<[u8; MAD_LEN]> {
    std::iter::from_fn(|| cm.poll_transmit())
        .map(|(_, m)| m)
        .collect()
}

fn events(cm: &mut Cm) -> Vec<CmEvent> {
    std::iter::from_fn(|| cm.poll_event()).collect()
}

fn deliver(now: Timestamp, from: &mut Cm, to: &mut Cm) -> Vec<[u8; MAD_LEN]> {
    let mads = drain_tx(from);
    for m in &mads {
        to.handle_mad(now, from.local_ip(), m);
    }
    mads
}

fn decode(mad: &[u8; MAD_LEN]) -> CmMessage {
    CmMessage::decode(mad).expect("decodes").1
}

fn pair(h_cfg: CmConfig, t_cfg: CmConfig) -> (Cm, Cm) {
    let h = Cm::with_config(ip("10.1.0.1"), 21, h_cfg);
    let mut t = Cm::with_config(ip("10.1.0.2"), 22, t_cfg);
    t.listen(4420).unwrap();
    (h, t)
}

/// Connects host QP `qpn` to target QP `qpn + 0x100`; returns (host id, target id,
/// the REQ MAD).
fn establish(h: &mut Cm, t: &mut Cm, qpn: u32) -> (ConnId, ConnId, [u8; MAD_LEN]) {
    let hid = h.connect(T0, params(t.local_ip(), qpn)).unwrap();
    let req = deliver(T0, h, t)[0];
    let Some(CmEvent::ConnectRequest { id: tid, .. }) = t.poll_event() else {
        panic!("REQ")
    };
    t.accept(T0, tid, accept(qpn + 0x100)).unwrap();
    deliver(T0, t, h);
    h.send_rtu(T0, hid).unwrap();
    deliver(T0, h, t);
    events(h);
    events(t);
    (hid, tid, req)
}

/// A REQ repeated after the connection ended (the target is in TimeWait) gets REJ stale
/// connection (reason 10) from the TimeWait state (Local Communication ID = ours,
/// MessageRejected "other", as cm_format_rej); the QPN cannot be reused until TimeWait
/// ends, the communication ID is not handed out again meanwhile.
#[test]
fn req_for_connection_in_timewait_gets_rej_stale() {
    let (mut h, mut t) = pair(CmConfig::default(), CmConfig::default());
    let (hid, tid, req) = establish(&mut h, &mut t, 0x40);
    h.disconnect(T0, hid).unwrap();
    deliver(T0, &mut h, &mut t);
    deliver(T0, &mut t, &mut h);
    assert_eq!(t.conn_info(tid).unwrap().state, CmState::TimeWait);
    events(&mut t);
    t.handle_mad(T0, h.local_ip(), &req);
    assert!(events(&mut t).is_empty());
    let [rej] = drain_tx(&mut t)[..] else {
        panic!("one REJ")
    };
    let (hdr, CmMessage::Rej(r)) = CmMessage::decode(&rej).unwrap() else {
        panic!("REJ")
    };
    assert_eq!(r.reason.get(), CM_REJ_STALE_CONN);
    assert_eq!(r.reason.get(), 10);
    assert_eq!(
        (r.local_comm_id.get(), r.remote_comm_id.get()),
        (tid.0, hid.0)
    );
    assert_eq!(r.message_rejected(), CM_MSG_OTHER);
    assert_eq!(hdr.transaction_id.get() as u32, hid.0);
    assert_eq!(t.stats().stale_rejects, 1);
    // The QPNs of both sides are blocked during TimeWait.
    assert!(h.qpn_in_timewait(0x40) && t.qpn_in_timewait(0x140));
    assert_eq!(
        h.connect(T0, params(t.local_ip(), 0x40)),
        Err(CmError::QpnInTimeWait(0x40))
    );
    let hid2 = h.connect(T0, params(t.local_ip(), 0x41)).unwrap();
    assert_ne!(hid2, hid);
    deliver(T0, &mut h, &mut t);
    let Some(CmEvent::ConnectRequest { id: tid2, .. }) = t.poll_event() else {
        panic!("REQ")
    };
    assert_ne!(tid2, tid);
    assert_eq!(
        t.accept(T0, tid2, accept(0x140)),
        Err(CmError::QpnInTimeWait(0x140))
    );
    t.accept(T0, tid2, accept(0x141)).unwrap();
    // The host that receives the stale REJ for its REQ enters TimeWait itself.
    let mut h3 = Cm::new(ip("10.1.0.1"), 99);
    let id3 = h3.connect(T0, params(t.local_ip(), 0x50)).unwrap();
    let mut r3 = r;
    r3.remote_comm_id.set(id3.0);
    h3.handle_mad(T0, t.local_ip(), &r3.to_mad(1));
    assert!(matches!(
        events(&mut h3).as_slice(),
        [CmEvent::Rejected {
            reason: CM_REJ_STALE_CONN,
            ..
        }]
    ));
    assert_eq!(h3.conn_info(id3).unwrap().state, CmState::TimeWait);
    // After TimeWait everything is forgotten and the QPN is free again.
    let end = T0 + timer::cm_convert(0x13);
    t.handle_timeout(end);
    h.handle_timeout(end);
    assert!(t.conn_info(tid).is_none() && !t.qpn_in_timewait(0x140));
    assert!(h.conn_info(hid).is_none());
}

/// A new REQ from a QP that still has a live connection here (the peer restarted and
/// reused the QPN) gets REJ stale connection, and the old connection is disconnected
/// (Linux cm_match_req).
#[test]
fn req_from_qp_with_live_connection_is_stale() {
    let (mut h, mut t) = pair(CmConfig::default(), CmConfig::default());
    let (_, tid, _) = establish(&mut h, &mut t, 0x60);
    let mut h2 = Cm::new(h.local_ip(), 1234); // the restarted host, same QPN
    let hid2 = h2.connect(T0, params(t.local_ip(), 0x60)).unwrap();
    deliver(T0, &mut h2, &mut t);
    assert_eq!(
        events(&mut t),
        vec![CmEvent::StaleConnection {
            id: tid,
            remote_ip: h.local_ip(),
            remote_qpn: 0x60,
            remote_port: Some(50000),
        }]
    );
    let out = drain_tx(&mut t);
    assert_eq!(out.len(), 2);
    let CmMessage::Rej(r) = decode(&out[0]) else {
        panic!("REJ first")
    };
    assert_eq!(
        (r.reason.get(), r.remote_comm_id.get(), r.message_rejected()),
        (CM_REJ_STALE_CONN, hid2.0, CM_MSG_REQ)
    );
    let CmMessage::Dreq(d) = decode(&out[1]) else {
        panic!("then DREQ")
    };
    assert_eq!(d.local_comm_id.get(), tid.0);
    assert_eq!(t.conn_info(tid).unwrap().state, CmState::DreqSent);
}

/// An unanswered DREQ is resent Max CM Retries times; then the connection enters
/// TimeWait with Disconnected (Linux IB_CM_DREQ_ERROR).
#[test]
fn unanswered_dreq_gives_disconnected_and_timewait() {
    let (mut h, mut t) = pair(CmConfig::default(), CmConfig::default());
    let (hid, _, _) = establish(&mut h, &mut t, 0x70);
    h.disconnect(T0, hid).unwrap();
    let mut sent = drain_tx(&mut h).len();
    let mut now = T0;
    while h.conn_info(hid).unwrap().state == CmState::DreqSent {
        now = h.poll_timeout().expect("DREQ timer");
        h.handle_timeout(now);
        sent += drain_tx(&mut h).len();
    }
    assert_eq!(sent, 16);
    assert_eq!(events(&mut h), vec![CmEvent::Disconnected { id: hid }]);
    assert_eq!(h.conn_info(hid).unwrap().state, CmState::TimeWait);
    assert_eq!(h.poll_timeout(), Some(now + timer::cm_convert(0x13)));
}

/// A DREQ naming another QP is dropped (Linux cm_dreq_handler); a DREQ for no
/// connection gets a DREP anyway.
#[test]
fn dreq_with_wrong_qpn_is_dropped() {
    let (mut h, mut t) = pair(CmConfig::default(), CmConfig::default());
    let (hid, tid, _) = establish(&mut h, &mut t, 0x80);
    h.disconnect(T0, hid).unwrap();
    let dreq = drain_tx(&mut h)[0];
    let CmMessage::Dreq(mut d) = decode(&dreq) else {
        panic!("DREQ")
    };
    assert_eq!(d.remote_qpn(), 0x180);
    d.set_remote_qpn(0x181);
    t.handle_mad(T0, h.local_ip(), &d.to_mad(5));
    assert!(events(&mut t).is_empty() && drain_tx(&mut t).is_empty());
    assert_eq!(t.conn_info(tid).unwrap().state, CmState::Established);
    d.set_remote_qpn(0x180);
    d.remote_comm_id.set(0xdead_beef);
    t.handle_mad(T0, h.local_ip(), &d.to_mad(5));
    let [drep] = drain_tx(&mut t)[..] else {
        panic!("DREP for the unknown connection")
    };
    let (hdr, CmMessage::Drep(p)) = CmMessage::decode(&drep).unwrap() else {
        panic!("DREP")
    };
    assert_eq!(hdr.transaction_id.get(), 5);
    assert_eq!(
        (p.local_comm_id.get(), p.remote_comm_id.get()),
        (0xdead_beef, hid.0)
    );
}

/// destroy() as Linux cm_destroy_id: REJ timeout with our CA GUID for an unanswered
/// REQ, REJ consumer defined for a pending REQ, one DREQ and TimeWait for an established
/// connection; no events.
#[test]
fn destroy_in_each_state() {
    let (mut h, mut t) = pair(CmConfig::default(), CmConfig::default());
    let hid = h.connect(T0, params(t.local_ip(), 0x90)).unwrap();
    let req = drain_tx(&mut h)[0];
    h.destroy(T0, hid).unwrap();
    let [rej] = drain_tx(&mut h)[..] else {
        panic!("REJ")
    };
    let CmMessage::Rej(r) = decode(&rej) else {
        panic!("REJ")
    };
    assert_eq!(
        (r.reason.get(), r.message_rejected(), r.local_comm_id.get()),
        (CM_REJ_TIMEOUT, CM_MSG_OTHER, hid.0)
    );
    assert_eq!(r.remote_comm_id.get(), 0, "the REP never came");
    assert_eq!(r.reject_info_length(), 8);
    assert_eq!(&r.ari[..8], &h.local_ca_guid().to_be_bytes());
    assert_eq!(h.conn_count(), 0);
    // The target got the REQ; the REJ withdraws it.
    t.handle_mad(T0, h.local_ip(), &req);
    let Some(CmEvent::ConnectRequest { id: tid, .. }) = t.poll_event() else {
        panic!("REQ")
    };
    t.handle_mad(T0, h.local_ip(), &rej);
    assert!(matches!(
        events(&mut t).as_slice(),
        [CmEvent::Rejected {
            reason: CM_REJ_TIMEOUT,
            ..
        }]
    ));
    assert!(t.conn_info(tid).is_none());

    // A pending REQ destroyed by the target: REJ consumer defined, Local ID 0.
    let hid = h.connect(T0, params(t.local_ip(), 0x91)).unwrap();
    deliver(T0, &mut h, &mut t);
    let Some(CmEvent::ConnectRequest { id: tid, .. }) = t.poll_event() else {
        panic!("REQ")
    };
    t.destroy(T0, tid).unwrap();
    let rej = deliver(T0, &mut t, &mut h)[0];
    let CmMessage::Rej(r) = decode(&rej) else {
        panic!("REJ")
    };
    assert_eq!(
        (r.reason.get(), r.local_comm_id.get()),
        (CM_REJ_CONSUMER_DEFINED, 0)
    );
    assert!(matches!(events(&mut h).as_slice(), [CmEvent::Rejected { id, .. }] if *id == hid));

    // Established: one DREQ, no retransmission, TimeWait, no event.
    let (hid, tid, _) = establish(&mut h, &mut t, 0x92);
    h.destroy(T0, hid).unwrap();
    assert_eq!(h.conn_info(hid).unwrap().state, CmState::TimeWait);
    deliver(T0, &mut h, &mut t);
    assert_eq!(events(&mut t), vec![CmEvent::Disconnected { id: tid }]);
    deliver(T0, &mut t, &mut h); // the DREP finds the host in TimeWait
    assert!(events(&mut h).is_empty());
    assert_eq!(h.poll_timeout(), Some(T0 + timer::cm_convert(0x13)));
    assert_eq!(
        h.destroy(T0, ConnId(7)),
        Err(CmError::UnknownConnection(ConnId(7)))
    );
}

/// An explicit MRA for a REQ (passive) and for a REP (active): the peer's timers follow
/// the MRA's service timeout; duplicates are answered with the same MRA.
#[test]
fn explicit_mras() {
    let (mut h, mut t) = pair(CmConfig::default(), CmConfig::default());
    let hid = h.connect(T0, params(t.local_ip(), 0xA0)).unwrap();
    let req = deliver(T0, &mut h, &mut t)[0];
    let Some(CmEvent::ConnectRequest { id: tid, .. }) = t.poll_event() else {
        panic!("REQ")
    };
    t.send_mra(T0, tid, 18).unwrap();
    let mra = deliver(T0, &mut t, &mut h)[0];
    assert_eq!(h.conn_info(hid).unwrap().state, CmState::MraReqRcvd);
    assert_eq!(h.poll_timeout(), Some(T0 + timer::mra_interval(18, 0x13)));
    t.handle_mad(T0, h.local_ip(), &req);
    assert_eq!(drain_tx(&mut t), vec![mra]);
    t.accept(T0, tid, accept(0x1A0)).unwrap();
    deliver(T0, &mut t, &mut h);
    assert!(matches!(
        events(&mut h).as_slice(),
        [CmEvent::ConnectReply { .. }]
    ));
    // The host needs time before its RTU.
    h.send_mra(T0, hid, 17).unwrap();
    let mra = deliver(T0, &mut h, &mut t)[0];
    let CmMessage::Mra(m) = decode(&mra) else {
        panic!("MRA")
    };
    assert_eq!((m.message_mraed(), m.service_timeout()), (CM_MSG_REP, 17));
    assert_eq!(t.conn_info(tid).unwrap().state, CmState::MraRepRcvd);
    let t_ack = t.poll_timeout().unwrap();
    assert_eq!(t_ack, T0 + timer::mra_interval(17, 0x13));
    // The REP comes again: the host repeats its MRA.
    t.handle_timeout(t_ack);
    deliver(t_ack, &mut t, &mut h);
    assert_eq!(drain_tx(&mut h), vec![mra]);
    h.send_rtu(t_ack, hid).unwrap();
    deliver(t_ack, &mut h, &mut t);
    assert!(matches!(events(&mut t).as_slice(), [CmEvent::Established { id, .. }] if *id == tid));
}

/// The selective-retransmission markers: negotiated (on every event of both sides, and
/// the REP carries its marker) only when both sides are configured for it.
#[test]
fn selective_retransmit_capability() {
    for (h_sr, t_sr) in [(true, true), (true, false), (false, true), (false, false)] {
        let cfg = |sr| CmConfig {
            selective_retransmit: sr,
            ..CmConfig::default()
        };
        let (mut h, mut t) = pair(cfg(h_sr), cfg(t_sr));
        let hid = h.connect(T0, params(t.local_ip(), 0xB0)).unwrap();
        let req = deliver(T0, &mut h, &mut t)[0];
        let CmMessage::Req(r) = decode(&req) else {
            panic!("REQ")
        };
        assert_eq!(r.vendor_id(), if h_sr { VENDOR_ID_SR_REQ } else { 0 });
        let Some(CmEvent::ConnectRequest {
            id: tid,
            peer_selective_retransmit,
            ..
        }) = t.poll_event()
        else {
            panic!("REQ")
        };
        let both = h_sr && t_sr;
        assert_eq!(peer_selective_retransmit, both);
        t.accept(T0, tid, accept(0x1B0)).unwrap();
        let rep = deliver(T0, &mut t, &mut h)[0];
        let CmMessage::Rep(r) = decode(&rep) else {
            panic!("REP")
        };
        assert_eq!(r.vendor_id(), if both { VENDOR_ID_SR_REP } else { 0 });
        let Some(CmEvent::ConnectReply {
            peer_selective_retransmit,
            ..
        }) = h.poll_event()
        else {
            panic!("REP")
        };
        assert_eq!(peer_selective_retransmit, both);
        h.send_rtu(T0, hid).unwrap();
        deliver(T0, &mut h, &mut t);
        assert_eq!(
            events(&mut h),
            vec![CmEvent::Established {
                id: hid,
                peer_selective_retransmit: both
            }]
        );
        assert_eq!(
            events(&mut t),
            vec![CmEvent::Established {
                id: tid,
                peer_selective_retransmit: both
            }]
        );
        assert_eq!(h.conn_info(hid).unwrap().peer_selective_retransmit, both);
        assert_eq!(t.conn_info(tid).unwrap().peer_selective_retransmit, both);
        // A REP marker our REQ did not ask for is not support either.
        if !h_sr {
            let mut forged = r;
            forged.set_vendor_id(VENDOR_ID_SR_REP);
            let mut h2 = Cm::with_config(ip("10.1.0.1"), 77, cfg(false));
            let id2 = h2.connect(T0, params(t.local_ip(), 0xB1)).unwrap();
            let req2 = drain_tx(&mut h2)[0];
            forged.remote_comm_id.set(id2.0);
            let tid2 = u64::from_be_bytes(req2[8..16].try_into().unwrap());
            h2.handle_mad(T0, t.local_ip(), &forged.to_mad(tid2));
            assert!(matches!(
                events(&mut h2).as_slice(),
                [CmEvent::ConnectReply {
                    peer_selective_retransmit: false,
                    ..
                }]
            ));
        }
    }
}

/// A REJ of our REQ is matched by its Remote Communication ID alone, whatever its Local
/// Communication ID (Linux puts the REQ's vendor ID word there).
#[test]
fn rej_of_req_matches_by_remote_id() {
    let (mut h, t) = pair(CmConfig::default(), CmConfig::default());
    let hid = h.connect(T0, params(t.local_ip(), 0xC0)).unwrap();
    drain_tx(&mut h);
    let mut rej = CmRej::zeroed();
    rej.local_comm_id.set(VENDOR_ID_SR_REQ);
    rej.remote_comm_id.set(hid.0);
    rej.set_message_rejected(CM_MSG_REQ);
    rej.reason.set(CM_REJ_INVALID_SERVICE_ID);
    h.handle_mad(T0, t.local_ip(), &rej.to_mad(1));
    assert!(matches!(
        events(&mut h).as_slice(),
        [CmEvent::Rejected {
            reason: CM_REJ_INVALID_SERVICE_ID,
            ..
        }]
    ));
    assert_eq!(h.conn_count(), 0);
}

/// A REP for no connection, or a REP the connection no longer waits for, is dropped
/// without an answer (Linux cm_rep_handler / cm_dup_rep_handler), counted.
#[test]
fn stray_rep_is_dropped() {
    let (mut h, mut t) = pair(CmConfig::default(), CmConfig::default());
    let hid = h.connect(T0, params(t.local_ip(), 0xD0)).unwrap();
    deliver(T0, &mut h, &mut t);
    let Some(CmEvent::ConnectRequest { id: tid, .. }) = t.poll_event() else {
        panic!("REQ")
    };
    t.accept(T0, tid, accept(0x1D0)).unwrap();
    let rep = drain_tx(&mut t)[0];
    let CmMessage::Rep(mut r) = decode(&rep) else {
        panic!("REP")
    };
    r.remote_comm_id.set(hid.0 ^ 1);
    let before = h.stats().unmatched;
    h.handle_mad(T0, t.local_ip(), &r.to_mad(3));
    assert!(drain_tx(&mut h).is_empty() && events(&mut h).is_empty());
    assert_eq!(h.stats().unmatched, before + 1);
    // The real REP still works; a second copy (RTU not sent yet) is a silent duplicate.
    h.handle_mad(T0, t.local_ip(), &rep);
    h.handle_mad(T0, t.local_ip(), &rep);
    assert_eq!(events(&mut h).len(), 1);
    assert!(drain_tx(&mut h).is_empty());
    assert_eq!(h.stats().duplicates, 1);
}

/// A peer's REQ sets our TimeWait through its local ACK timeout (Linux: uncapped, 2^23 ms
/// for 31); we cap it at [`timer::MAX_TIMEWAIT`] so a peer cannot pin connection state
/// for hours.
#[test]
fn timewait_from_a_huge_req_ack_timeout_is_capped() {
    let (mut h, mut t) = pair(CmConfig::default(), CmConfig::default());
    let mut p = params(t.local_ip(), 0x50);
    p.local_ack_timeout = 31;
    let hid = h.connect(T0, p).unwrap();
    deliver(T0, &mut h, &mut t);
    let Some(CmEvent::ConnectRequest { id: tid, .. }) = t.poll_event() else {
        panic!("REQ")
    };
    t.accept(T0, tid, accept(0x150)).unwrap();
    deliver(T0, &mut t, &mut h);
    h.send_rtu(T0, hid).unwrap();
    deliver(T0, &mut h, &mut t);
    h.disconnect(T0, hid).unwrap();
    deliver(T0, &mut h, &mut t);
    assert_eq!(t.conn_info(tid).unwrap().state, CmState::TimeWait);
    assert!(t.qpn_in_timewait(0x150));
    let after = T0 + timer::MAX_TIMEWAIT + std::time::Duration::from_millis(1);
    assert!(t.poll_timeout().is_some_and(|d| d <= after));
    t.handle_timeout(after);
    assert!(!t.qpn_in_timewait(0x150));
}
