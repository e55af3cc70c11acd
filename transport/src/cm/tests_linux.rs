//! Interop against the Linux CM MADs of the reference captures (`testdata/captures/`):
//! our REQ is Linux's REQ, Linux's REQ gets Linux's REP from our passive side, Linux's
//! RTU / DREQ drive our state machine, and a REQ for an unlistened service gets the
//! REJ Linux sent. Linux's values are asserted as concrete numbers.
use std::net::IpAddr;

use super::*;
use crate::verbs::Mtu;
use crate::wire::cm::tests::{capture_mads, golden};
use crate::wire::cm::*;
use crate::wire::mad::*;

const T0: Timestamp = Timestamp(5_000_000_000);

fn ip(s: &str) -> IpAddr {
    s.parse().expect("ip")
}

fn drain_tx(cm: &mut Cm) -> Vec<(IpAddr, [u8; MAD_LEN])> {
    std::iter::from_fn(|| cm.poll_transmit()).collect()
}

fn events(cm: &mut Cm) -> Vec<CmEvent> {
    std::iter::from_fn(|| cm.poll_event()).collect()
}

fn no_sr() -> CmConfig {
    CmConfig {
        selective_retransmit: false,
        ..CmConfig::default()
    }
}

/// The NVMe host's connect parameters of frame 4 (nvme-rdma: IRD 0x80, ORD 0, retry 7,
/// RNR retry 7, ACK timeout 0x13, MTU 1024, IP CM source port 0xb9c2).
fn linux_host_params() -> ConnectParams {
    ConnectParams {
        dest: ip("192.168.77.10"),
        dest_port: 4420,
        src_port: 0xb9c2,
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

/// Our REQ for Linux's parameters is Linux's REQ (frame 4) byte for byte, apart from the
/// IDs each side picks (communication ID, TransactionID) and, when advertised, the
/// selective-retransmission VendorID (Linux: 0).
#[test]
fn req_matches_linux_nvme_host() {
    for sr in [false, true] {
        let cfg = CmConfig {
            selective_retransmit: sr,
            ..CmConfig::default()
        };
        let mut h = Cm::with_config(ip("192.168.77.11"), 7, cfg);
        h.set_local_ca_guid(0x5054_00ff_fe77_000b);
        let id = h.connect(T0, linux_host_params()).unwrap();
        let [(dest, mad)] = drain_tx(&mut h)[..] else {
            panic!("one REQ")
        };
        assert_eq!(dest, ip("192.168.77.10"));
        let linux = golden("linux-nvme-rdma-rxe.pcap", 4);
        assert_eq!(&linux[28..32], &[0, 0, 0, 0], "Linux's REQ VendorID is 0");
        let mut want = linux;
        want[8..16].copy_from_slice(&mad[8..16]); // TransactionID
        want[24..28].copy_from_slice(&id.0.to_be_bytes()); // Local Communication ID
        if sr {
            want[28..32].copy_from_slice(&VENDOR_ID_SR_REQ.to_be_bytes());
        }
        assert_eq!(mad, want);
        // TransactionID = hi << 32 | local communication ID, as Linux's cm_form_tid.
        let tid = u64::from_be_bytes(mad[8..16].try_into().unwrap());
        assert_eq!(tid as u32, id.0);
        // Linux's REQ timer for these values: 2 x 2^(18-8) + 2^(20-8) ms.
        let iv = std::time::Duration::from_millis(6144);
        assert_eq!(h.poll_timeout(), Some(T0 + iv));
    }
}

/// Linux's REQ (frame 4) into our passive side: the ConnectRequest carries Linux's
/// values; the REP we answer with is Linux's REP (frame 5), field by field and byte for
/// byte apart from our communication ID, whether or not we are configured for selective
/// retransmission (Linux's REQ does not offer it, so our REP's VendorID stays 0);
/// Linux's RTU (frame 6) establishes, Linux's DREQ (frame 87) gets Linux's DREP (frame
/// 88).
#[test]
fn linux_req_gets_linux_rep() {
    for sr in [false, true] {
        let cfg = CmConfig {
            selective_retransmit: sr,
            ..CmConfig::default()
        };
        let mut t = Cm::with_config(ip("192.168.77.10"), 9, cfg);
        t.set_local_ca_guid(0x5054_00ff_fe77_000a);
        t.listen(4420).unwrap();
        let host = ip("192.168.77.11");
        t.handle_mad(T0, host, &golden("linux-nvme-rdma-rxe.pcap", 4));
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
        let tid = *tid;
        assert_eq!(
            (*remote_ip, *remote_port, *local_port),
            (host, 0xb9c2, 4420)
        );
        assert_eq!((*remote_qpn, *remote_psn), (0x11, 0x29fa4c));
        assert_eq!((*responder_resources, *initiator_depth), (0x80, 0));
        assert_eq!(*path_mtu, Mtu::Mtu1024);
        assert_eq!(
            (*local_ack_timeout, *retry_count, *rnr_retry_count),
            (0x13, 7, 7)
        );
        assert_eq!((*flow_label, *traffic_class, *hop_limit), (0x68fc2, 0, 64));
        assert!(!*srq);
        assert!(!*peer_selective_retransmit, "Linux sends VendorID 0");
        assert_eq!(&private_data[..8], &[0, 0, 0, 0, 32, 0, 31, 0]);
        // nvmet-rdma's answer: ORD = the host's IRD (0x80), IRD 0, RNR retry 7,
        // recfmt 0 / crqsize 32.
        let p = AcceptParams {
            local_qpn: 0x11,
            starting_psn: 0x29864d,
            responder_resources: 0,
            initiator_depth: 0x80,
            rnr_retry_count: 7,
            private_data: vec![0, 0, 32, 0],
        };
        t.accept(T0, tid, p).unwrap();
        let [(dest, mad)] = drain_tx(&mut t)[..] else {
            panic!("one REP")
        };
        assert_eq!(dest, host);
        let linux = golden("linux-nvme-rdma-rxe.pcap", 5);
        let (lh, CmMessage::Rep(lrep)) = CmMessage::decode(&linux).unwrap() else {
            panic!("Linux REP")
        };
        let (oh, CmMessage::Rep(orep)) = CmMessage::decode(&mad).unwrap() else {
            panic!("our REP")
        };
        assert_eq!(oh.transaction_id, lh.transaction_id, "echoes the REQ's TID");
        assert_eq!(orep.remote_comm_id, lrep.remote_comm_id);
        assert_eq!(orep.local_qkey, lrep.local_qkey);
        assert_eq!(orep.local_qpn(), lrep.local_qpn());
        assert_eq!(orep.local_eecn(), lrep.local_eecn());
        assert_eq!(orep.starting_psn(), lrep.starting_psn());
        assert_eq!(orep.responder_resources, lrep.responder_resources);
        assert_eq!(orep.initiator_depth, lrep.initiator_depth);
        assert_eq!(orep.target_ack_delay(), 15);
        assert_eq!(orep.target_ack_delay(), lrep.target_ack_delay());
        assert_eq!(orep.failover_accepted(), lrep.failover_accepted());
        assert_eq!(
            orep.end_to_end_flow_control(),
            lrep.end_to_end_flow_control()
        );
        assert_eq!(orep.rnr_retry_count(), 7);
        assert_eq!(orep.rnr_retry_count(), lrep.rnr_retry_count());
        assert_eq!(orep.srq(), lrep.srq());
        assert_eq!(orep.local_ca_guid, lrep.local_ca_guid);
        assert_eq!(orep.private_data, lrep.private_data);
        assert_eq!(lrep.vendor_id(), 0, "Linux's REP VendorID is 0");
        assert_eq!(orep.vendor_id(), 0, "not offered by Linux, not answered");
        let mut want = linux;
        want[24..28].copy_from_slice(&tid.0.to_be_bytes());
        assert_eq!(mad, want);
        // ib_cm's REP timer from Linux's REQ: 2^(20-8) ms, 15 retries.
        assert_eq!(t.poll_timeout(), Some(T0 + timer::cm_convert(20)));

        let mut rtu = golden("linux-nvme-rdma-rxe.pcap", 6);
        rtu[28..32].copy_from_slice(&tid.0.to_be_bytes());
        t.handle_mad(T0, host, &rtu);
        assert_eq!(
            events(&mut t),
            vec![CmEvent::Established {
                id: tid,
                peer_selective_retransmit: false
            }]
        );
        assert_eq!(t.poll_timeout(), None);

        // Linux's DREQ (patched to our ID) -> DREP echoing its TransactionID.
        let mut dreq = golden("linux-nvme-rdma-rxe.pcap", 87);
        dreq[28..32].copy_from_slice(&tid.0.to_be_bytes());
        t.handle_mad(T0, host, &dreq);
        assert_eq!(events(&mut t), vec![CmEvent::Disconnected { id: tid }]);
        let [(_, drep)] = drain_tx(&mut t)[..] else {
            panic!("one DREP")
        };
        let mut want = golden("linux-nvme-rdma-rxe.pcap", 88);
        want[24..28].copy_from_slice(&tid.0.to_be_bytes());
        assert_eq!(drep, want);
        // TimeWait of 2^(0x13-8) ms, as ib_cm for Linux's ACK timeout.
        assert_eq!(t.conn_info(tid).unwrap().state, CmState::TimeWait);
        assert_eq!(t.poll_timeout(), Some(T0 + timer::cm_convert(0x13)));
        t.handle_timeout(T0 + timer::cm_convert(0x13));
        assert_eq!(t.conn_count(), 0);
    }
}

/// Linux's REP (frame 5) answers our REQ (patched to our IDs): the ConnectReply carries
/// Linux's values and no selective-retransmission support.
#[test]
fn linux_rep_to_our_req() {
    let mut h = Cm::new(ip("192.168.77.11"), 11);
    let id = h.connect(T0, linux_host_params()).unwrap();
    let [(_, req)] = drain_tx(&mut h)[..] else {
        panic!("one REQ")
    };
    let mut rep = golden("linux-nvme-rdma-rxe.pcap", 5);
    rep[8..16].copy_from_slice(&req[8..16]);
    rep[28..32].copy_from_slice(&id.0.to_be_bytes());
    h.handle_mad(T0, ip("192.168.77.10"), &rep);
    let ev = events(&mut h);
    let [CmEvent::ConnectReply {
        remote_qpn,
        remote_psn,
        responder_resources,
        initiator_depth,
        rnr_retry_count,
        target_ack_delay,
        peer_selective_retransmit,
        private_data,
        ..
    }] = ev.as_slice()
    else {
        panic!("expected ConnectReply, got {ev:?}")
    };
    assert_eq!((*remote_qpn, *remote_psn), (0x11, 0x29864d));
    assert_eq!((*responder_resources, *initiator_depth), (0, 0x80));
    assert_eq!((*rnr_retry_count, *target_ack_delay), (7, 15));
    assert!(!*peer_selective_retransmit);
    assert_eq!(&private_data[..4], &[0, 0, 32, 0]);
    h.send_rtu(T0, id).unwrap();
    let [(_, rtu)] = drain_tx(&mut h)[..] else {
        panic!("one RTU")
    };
    let mut want = golden("linux-nvme-rdma-rxe.pcap", 6);
    want[8..16].copy_from_slice(&req[8..16]);
    want[24..28].copy_from_slice(&id.0.to_be_bytes());
    assert_eq!(rtu, want, "our RTU is Linux's");
    // librdmacm's rdma_accept echoes the REQ's VendorID: that is not support.
    let mut h = Cm::new(ip("192.168.77.11"), 12);
    let id = h.connect(T0, linux_host_params()).unwrap();
    let [(_, req)] = drain_tx(&mut h)[..] else {
        panic!("one REQ")
    };
    let (_, CmMessage::Rep(mut r)) =
        CmMessage::decode(&golden("linux-nvme-rdma-rxe.pcap", 5)).unwrap()
    else {
        panic!("REP")
    };
    r.remote_comm_id.set(id.0);
    r.set_vendor_id(VENDOR_ID_SR_REQ);
    h.handle_mad(
        T0,
        ip("192.168.77.10"),
        &r.to_mad(u64::from_be_bytes(req[8..16].try_into().unwrap())),
    );
    assert!(matches!(
        events(&mut h).as_slice(),
        [CmEvent::ConnectReply {
            peer_selective_retransmit: false,
            ..
        }]
    ));
}

/// The probe REQ of e-roce-probe.pcap (frame 5, service ID nobody listens on) gets from
/// us the REJ Linux sent (frame 6) byte for byte: reason 8, Local Communication ID from
/// the REQ's bytes 4..8, TransactionID echoed.
#[test]
fn probe_req_gets_linux_rej() {
    let mads = capture_mads("e-roce-probe.pcap");
    let req = &mads.iter().find(|(f, _)| *f == 5).expect("frame 5").1;
    let (_, CmMessage::Req(r)) = CmMessage::decode(req).unwrap() else {
        panic!("frame 5 is a REQ")
    };
    assert_eq!(r.vendor_id(), 0);
    let mut t = Cm::with_config(ip("192.168.77.10"), 3, no_sr());
    t.listen(4420).unwrap();
    t.handle_mad(T0, ip("192.168.77.1"), req);
    assert!(events(&mut t).is_empty());
    let [(dest, rej)] = drain_tx(&mut t)[..] else {
        panic!("one REJ")
    };
    assert_eq!(dest, ip("192.168.77.1"));
    assert_eq!(rej, golden("e-roce-probe.pcap", 6));
    assert_eq!(t.conn_count(), 0);
}

/// Every REQ and REP Linux sent in the captures has VendorID 0 (kernel ULPs and
/// rdma-core 44's rping alike).
#[test]
fn linux_sends_vendor_id_zero() {
    let mut seen = 0;
    for capture in [
        "linux-nvme-rdma-rxe.pcap",
        "linux-nvme-rdma-rxe-ipv6.pcap",
        "linux-nvme-rdma-errors.pcap",
        "linux-rping-rxe.pcap",
    ] {
        for (frame, mad) in capture_mads(capture) {
            match CmMessage::decode(&mad).expect("decodes").1 {
                CmMessage::Req(r) => assert_eq!(r.vendor_id(), 0, "{capture} {frame}"),
                CmMessage::Rep(r) => assert_eq!(r.vendor_id(), 0, "{capture} {frame}"),
                _ => continue,
            }
            seen += 1;
        }
    }
    // 3 + 3 REQ/REP pairs in each NVMe capture, 4 in the errors run, 1 in rping.
    assert_eq!(seen, 22, "Linux REQs/REPs with VendorID 0");
}

/// Every REQ Linux sent in the captures, fed to our passive side, is accepted and our
/// REP matches Linux's REP of the same exchange in every field Linux's target chose the
/// same way (everything but IDs, QPN and PSN).
#[test]
fn every_linux_req_gets_a_linux_rep() {
    for capture in ["linux-nvme-rdma-rxe.pcap", "linux-nvme-rdma-errors.pcap"] {
        let mads = capture_mads(capture);
        let decoded: Vec<_> = mads
            .iter()
            .map(|(f, m)| (*f, CmMessage::decode(m).expect("decodes")))
            .collect();
        let mut pairs = 0;
        for (i, (_, (rh, msg))) in decoded.iter().enumerate() {
            let CmMessage::Req(_) = msg else { continue };
            let Some((_, (_, CmMessage::Rep(lrep)))) =
                decoded[i + 1..].iter().find(|(_, (h, m))| {
                    h.transaction_id == rh.transaction_id && matches!(m, CmMessage::Rep(_))
                })
            else {
                continue;
            };
            let mut t = Cm::with_config(ip("192.168.77.10"), 5, no_sr());
            t.set_local_ca_guid(lrep.local_ca_guid.get());
            t.listen(4420).unwrap();
            t.handle_mad(T0, ip("192.168.77.11"), &mads[i].1);
            let Some(CmEvent::ConnectRequest {
                id,
                responder_resources,
                ..
            }) = t.poll_event()
            else {
                panic!("{capture}: REQ not delivered")
            };
            t.accept(
                T0,
                id,
                AcceptParams {
                    local_qpn: lrep.local_qpn(),
                    starting_psn: lrep.starting_psn(),
                    responder_resources: 0,
                    initiator_depth: responder_resources,
                    rnr_retry_count: 7,
                    private_data: lrep.private_data[..32].to_vec(),
                },
            )
            .unwrap();
            let [(_, mad)] = drain_tx(&mut t)[..] else {
                panic!("one REP")
            };
            let mut want = lrep.to_mad(rh.transaction_id.get());
            want[24..28].copy_from_slice(&id.0.to_be_bytes());
            assert_eq!(mad, want, "{capture}");
            pairs += 1;
        }
        assert!(pairs >= 2, "{capture}: {pairs} REQ/REP pairs");
    }
}
