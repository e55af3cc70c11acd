//! The CM agent over real UDP sockets on loopback (127.0.0.140 - 127.0.0.149): connect /
//! accept / RTU / disconnect between two soft devices, REJ for an unlistened port, the
//! delayed MRA while the passive application takes its time, destroy of a pending
//! connection, a restarted host's stale REQ, and Linux's probe REQ (e-roce-probe.pcap) answered with Linux's REJ.
use std::net::{IpAddr, UdpSocket};
use std::sync::Arc;
use std::time::Duration;

use crossbeam::channel::Receiver;
use transport::cm::{AcceptParams, CmConfig, CmEvent, ConnId, ConnectParams};
use transport::soft::{CmAgent, DeviceConfig, SoftDevice};
use transport::verbs::Mtu;
use transport::wire::cm::*;
use transport::wire::mad::MAD_LEN;
use transport::wire::{self, Bth, Deth, IcrcIpInfo, Opcode, PacketHeaders, GSI_QKEY};

const WAIT: Duration = Duration::from_secs(5);

fn ip(s: &str) -> IpAddr {
    s.parse().expect("ip")
}

fn agent(addr: &str, cfg: CmConfig) -> (Arc<SoftDevice>, CmAgent) {
    let dev = SoftDevice::open(DeviceConfig::new(ip(addr))).expect("open device");
    let cm = CmAgent::start_with_config(&dev, cfg).expect("CM agent");
    (dev, cm)
}

/// Short CM timers (REQ interval ~6 ms, REP interval 2 ms) so that retries happen
/// within a test.
fn fast() -> CmConfig {
    CmConfig {
        cm_response_timeout: 9,
        ..CmConfig::default()
    }
}

fn params(dest: IpAddr, port: u16, qpn: u32) -> ConnectParams {
    ConnectParams {
        dest,
        dest_port: port,
        src_port: 0xC123,
        local_qpn: qpn,
        starting_psn: 0x1234,
        responder_resources: 16,
        initiator_depth: 0,
        retry_count: 7,
        rnr_retry_count: 7,
        path_mtu: Mtu::Mtu1024,
        local_ack_timeout: 10,
        private_data: vec![0, 0, 0, 0, 32, 0, 31, 0],
    }
}

fn next(rx: &Receiver<CmEvent>) -> CmEvent {
    rx.recv_timeout(WAIT).expect("a CM event in time")
}

#[test]
fn connect_accept_disconnect_over_udp() {
    let (_dt, t) = agent("127.0.0.140", CmConfig::default());
    let (_dh, h) = agent("127.0.0.141", CmConfig::default());
    let listen = t.listen(4420).unwrap();
    let (hid, hev) = h.connect(params(ip("127.0.0.140"), 4420, 0x11)).unwrap();
    let CmEvent::ConnectRequest {
        id: tid,
        remote_ip,
        remote_qpn,
        remote_psn,
        peer_selective_retransmit,
        private_data,
        ..
    } = next(&listen)
    else {
        panic!("ConnectRequest first")
    };
    assert_eq!(
        (remote_ip, remote_qpn, remote_psn),
        (ip("127.0.0.141"), 0x11, 0x1234)
    );
    assert!(peer_selective_retransmit);
    assert_eq!(&private_data[..8], &[0, 0, 0, 0, 32, 0, 31, 0]);
    t.accept(
        tid,
        AcceptParams {
            local_qpn: 0x22,
            starting_psn: 0x5678,
            responder_resources: 0,
            initiator_depth: 16,
            rnr_retry_count: 7,
            private_data: vec![0, 0, 32, 0],
        },
    )
    .unwrap();
    let CmEvent::ConnectReply {
        id,
        remote_qpn,
        remote_psn,
        peer_selective_retransmit,
        private_data,
        ..
    } = next(&hev)
    else {
        panic!("ConnectReply")
    };
    assert_eq!((id, remote_qpn, remote_psn), (hid, 0x22, 0x5678));
    assert!(peer_selective_retransmit);
    assert_eq!(&private_data[..4], &[0, 0, 32, 0]);
    h.send_rtu(hid).unwrap();
    assert_eq!(
        next(&hev),
        CmEvent::Established {
            id: hid,
            peer_selective_retransmit: true
        }
    );
    assert_eq!(
        next(&listen),
        CmEvent::Established {
            id: tid,
            peer_selective_retransmit: true
        }
    );
    // The passive side disconnects: both see Disconnected.
    t.disconnect(tid).unwrap();
    assert_eq!(next(&listen), CmEvent::Disconnected { id: tid });
    assert_eq!(next(&hev), CmEvent::Disconnected { id: hid });
    // Disconnecting again is harmless (TimeWait).
    t.disconnect(tid).unwrap();
}

#[test]
fn unlistened_port_gets_rej_invalid_service_id() {
    let (_dt, t) = agent("127.0.0.142", CmConfig::default());
    let (_dh, h) = agent("127.0.0.143", CmConfig::default());
    let _listen = t.listen(4420).unwrap();
    let (hid, hev) = h.connect(params(ip("127.0.0.142"), 4421, 0x11)).unwrap();
    let CmEvent::Rejected { id, reason, .. } = next(&hev) else {
        panic!("Rejected")
    };
    assert_eq!((id, reason), (hid, CM_REJ_INVALID_SERVICE_ID));
}

/// A host killed without disconnecting (its device and CM agent dropped, no DREQ)
/// restarts on the same address and reuses its QPN: the target's CM refuses the new
/// REQ as stale (REJ 10), says so to the old connection's application
/// (StaleConnection) and disconnects the old connection: the restarted host's CM answers
/// the DREQ it knows nothing of with a DREP, so the old connection ends at once. A
/// second REQ from a new QP then connects.
#[test]
fn restarted_host_reusing_its_qpn_gets_rej_stale_and_then_connects() {
    let (_dt, t) = agent("127.0.0.206", CmConfig::default());
    let listen = t.listen(4420).unwrap();
    let accept = |qpn| AcceptParams {
        local_qpn: qpn,
        starting_psn: 1,
        responder_resources: 0,
        initiator_depth: 1,
        rnr_retry_count: 7,
        private_data: vec![],
    };
    let (old, old_hid) = {
        let (_dh, h) = agent("127.0.0.207", CmConfig::default());
        let (hid, hev) = h.connect(params(ip("127.0.0.206"), 4420, 0x51)).unwrap();
        let CmEvent::ConnectRequest { id: tid, .. } = next(&listen) else {
            panic!("ConnectRequest")
        };
        t.accept(tid, accept(0x52)).unwrap();
        assert!(matches!(next(&hev), CmEvent::ConnectReply { .. }));
        h.send_rtu(hid).unwrap();
        assert!(matches!(next(&listen), CmEvent::Established { .. }));
        (tid, hid)
        // The host dies here: its agent and device go without a DREQ.
    };
    let (_dh, h) = agent("127.0.0.207", CmConfig::default());
    let (hid, hev) = h.connect(params(ip("127.0.0.206"), 4420, 0x51)).unwrap();
    // A new agent draws its communication IDs afresh (a random seed per agent), so the
    // target cannot take the new REQ for a duplicate of the old one.
    assert_ne!(hid, old_hid);
    let CmEvent::Rejected { id, reason, .. } = next(&hev) else {
        panic!("Rejected")
    };
    assert_eq!((id, reason), (hid, CM_REJ_STALE_CONN));
    assert_eq!(
        next(&listen),
        CmEvent::StaleConnection {
            id: old,
            remote_ip: ip("127.0.0.207"),
            remote_qpn: 0x51,
            remote_port: Some(0xC123),
        }
    );
    assert_eq!(next(&listen), CmEvent::Disconnected { id: old });
    // A new QP of the restarted host connects.
    let (hid, hev) = h.connect(params(ip("127.0.0.206"), 4420, 0x53)).unwrap();
    let CmEvent::ConnectRequest {
        id: tid,
        remote_qpn,
        ..
    } = next(&listen)
    else {
        panic!("ConnectRequest")
    };
    assert_eq!(remote_qpn, 0x53);
    t.accept(tid, accept(0x54)).unwrap();
    let CmEvent::ConnectReply { id, .. } = next(&hev) else {
        panic!("ConnectReply")
    };
    assert_eq!(id, hid);
}

/// The passive application takes longer than several REQ intervals: the duplicate REQs
/// get MRAs instead of new ConnectRequests, and the late accept still connects.
#[test]
fn slow_accept_is_covered_by_mra() {
    let (_dt, t) = agent("127.0.0.144", fast());
    let (_dh, h) = agent("127.0.0.145", fast());
    let listen = t.listen(4420).unwrap();
    let (hid, hev) = h.connect(params(ip("127.0.0.144"), 4420, 0x31)).unwrap();
    let CmEvent::ConnectRequest { id: tid, .. } = next(&listen) else {
        panic!("ConnectRequest")
    };
    // 15 retries x ~6 ms would exhaust the REQ without the MRA.
    std::thread::sleep(Duration::from_millis(300));
    assert!(listen.try_recv().is_err(), "no second ConnectRequest");
    assert!(hev.try_recv().is_err(), "the host is still waiting");
    t.accept(
        tid,
        AcceptParams {
            local_qpn: 0x32,
            starting_psn: 1,
            responder_resources: 0,
            initiator_depth: 1,
            rnr_retry_count: 7,
            private_data: vec![],
        },
    )
    .unwrap();
    let CmEvent::ConnectReply { id, .. } = next(&hev) else {
        panic!("ConnectReply after the MRA")
    };
    assert_eq!(id, hid);
    h.destroy(hid).unwrap(); // REJ consumer defined for the REP
    let CmEvent::Rejected { id, reason, .. } = next(&listen) else {
        panic!("Rejected")
    };
    assert_eq!((id, reason), (tid, CM_REJ_CONSUMER_DEFINED));
}

/// Nobody answers: the REQ is resent Max CM Retries times, then Unreachable.
#[test]
fn unanswered_req_is_unreachable() {
    let (_dh, h) = agent("127.0.0.146", fast());
    let silent = UdpSocket::bind("127.0.0.147:4791").unwrap();
    silent
        .set_read_timeout(Some(Duration::from_millis(500)))
        .unwrap();
    let (hid, hev) = h.connect(params(ip("127.0.0.147"), 4420, 0x41)).unwrap();
    assert_eq!(next(&hev), CmEvent::Unreachable { id: hid });
    let mut buf = [0u8; 512];
    let mut reqs = 0;
    while let Ok(n) = silent.recv(&mut buf) {
        let pkt = wire::parse(&buf[..n]).expect("RoCEv2");
        assert!(matches!(
            CmMessage::decode(pkt.payload).unwrap().1,
            CmMessage::Req(_)
        ));
        reqs += 1;
    }
    assert_eq!(reqs, 16);
}

/// Wraps a MAD in a UD SEND Only to QP1 from `src`:`sport` to `dst`.
fn ud_packet(src: IpAddr, sport: u16, dst: IpAddr, mad: &[u8]) -> Vec<u8> {
    let hdr = PacketHeaders {
        bth: Bth::new(Opcode::UdSendOnly, 1, 7, false),
        deth: Some(Deth {
            qkey: GSI_QKEY,
            src_qp: 1,
        }),
        reth: None,
        aeth: None,
        imm: None,
        ieth: None,
    };
    let info = IcrcIpInfo {
        src,
        dst,
        ipv4_id: 0,
        udp_sport: sport,
        udp_dport: wire::ROCE_V2_UDP_DPORT,
    };
    let mut out = Vec::new();
    wire::build(&hdr, mad, &info, &mut out);
    out
}

/// The CM MADs of a reference capture, by frame number (`NVMF_CAPTURES_DIR` or
/// `../../shared/captures`); `None` if it is not on this machine.
fn capture_mads(name: &str) -> Option<Vec<(usize, Vec<u8>)>> {
    let dir = std::env::var_os("NVMF_CAPTURES_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| {
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/captures")
        });
    let bytes = std::fs::read(dir.join(name)).ok()?;
    let pcap = wire::pcap::Pcap::new(&bytes).expect("capture parses");
    Some(
        pcap.roce()
            .filter(|(_, udp)| udp.payload.first() == Some(&0x64))
            .filter_map(|(f, udp)| Some((f.number, udp.payload.get(20..20 + MAD_LEN)?.to_vec())))
            .collect(),
    )
}

/// Linux's probe (e-roce-probe.pcap frame 5: a CM REQ for a service nobody listens on)
/// sent to our agent over UDP gets the REJ Linux sent (frame 6), byte for byte.
#[test]
fn linux_probe_req_gets_linux_rej_over_udp() {
    let Some(mads) = capture_mads("e-roce-probe.pcap") else {
        eprintln!("e-roce-probe.pcap not found; set NVMF_CAPTURES_DIR to check it");
        return;
    };
    let req = &mads.iter().find(|(f, _)| *f == 5).expect("frame 5").1;
    let linux_rej = &mads.iter().find(|(f, _)| *f == 6).expect("frame 6").1;
    let cfg = CmConfig {
        selective_retransmit: false,
        ..CmConfig::default()
    };
    let (_dt, t) = agent("127.0.0.148", cfg);
    let _listen = t.listen(4420).unwrap();
    let prober = UdpSocket::bind("127.0.0.149:4791").unwrap();
    prober
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let pkt = ud_packet(ip("127.0.0.149"), 4791, ip("127.0.0.148"), req);
    prober.send_to(&pkt, "127.0.0.148:4791").unwrap();
    let mut buf = [0u8; 512];
    let (n, from) = prober.recv_from(&mut buf).expect("a REJ");
    assert_eq!(from.ip(), ip("127.0.0.148"));
    let info = IcrcIpInfo {
        src: from.ip(),
        dst: ip("127.0.0.149"),
        ipv4_id: 0,
        udp_sport: from.port(),
        udp_dport: wire::ROCE_V2_UDP_DPORT,
    };
    assert!(wire::verify(&info, &buf[..n]), "ICRC of our REJ");
    let p = wire::parse(&buf[..n]).unwrap();
    assert_eq!(p.hdr.bth.opcode, Opcode::UdSendOnly);
    assert_eq!(p.hdr.deth.map(|d| (d.qkey, d.src_qp)), Some((GSI_QKEY, 1)));
    assert_eq!(&p.payload[..MAD_LEN], &linux_rej[..]);
    let (_, CmMessage::Rej(rej)) = CmMessage::decode(p.payload).unwrap() else {
        panic!("REJ")
    };
    assert_eq!(rej.reason.get(), 8);
}

#[test]
fn destroy_unknown_and_api_errors() {
    let (_dh, h) = agent("127.0.0.150", CmConfig::default());
    assert!(h.destroy(ConnId(42)).is_err());
    assert!(h.send_mra(ConnId(42), 20).is_err());
    let _l = h.listen(4420).unwrap();
    assert!(h.listen(4420).is_err());
}
