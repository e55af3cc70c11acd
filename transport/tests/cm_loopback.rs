//! The CM agent over real UDP sockets on loopback (127.0.0.140 - 127.0.0.149): connect /
//! accept / RTU / disconnect between two soft devices, REJ for an unlistened port, the
//! delayed MRA while the passive application takes its time, destroy of a pending
//! connection, a restarted host's stale REQ, and Linux's probe REQ (e-roce-probe.pcap) answered with Linux's REJ.
//! Over IPv6 (::1): Linux's REQ sent with UDP checksum 0, as Linux rxe sends every
//! RoCEv2 packet over IPv6, reaches the agent (the kernel drops such datagrams on a
//! socket without `UDP_NO_CHECK6_RX`, which the first IPv6 test shows).
use std::net::{IpAddr, UdpSocket};
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::time::Duration;

use crossbeam::channel::Receiver;
use transport::cm::{AcceptParams, CmConfig, CmEvent, ConnId, ConnectParams};
use transport::soft::{CmAgent, DeviceConfig, SoftDevice};
use transport::verbs::Mtu;
use transport::wire::cm::*;
use transport::wire::mad::MAD_LEN;
use transport::wire::{self, Bth, Deth, IcrcIpInfo, Opcode, PacketHeaders, GSI_QKEY};

#[path = "../src/test_captures.rs"]
mod test_captures;

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

/// The CM MADs of a reference capture (`testdata/captures/`), by frame number; a
/// missing capture fails the test.
fn capture_mads(name: &str) -> Vec<(usize, Vec<u8>)> {
    let bytes = test_captures::read(name);
    let pcap = test_captures::Capture::parse(&bytes).expect("capture parses");
    pcap.roce()
        .filter(|(_, udp)| udp.payload.first() == Some(&0x64))
        .filter_map(|(f, udp)| Some((f.number, udp.payload.get(20..20 + MAD_LEN)?.to_vec())))
        .collect()
}

/// Linux's probe (e-roce-probe.pcap frame 5: a CM REQ for a service nobody listens on)
/// sent to our agent over UDP gets the REJ Linux sent (frame 6), byte for byte.
#[test]
fn linux_probe_req_gets_linux_rej_over_udp() {
    let mads = capture_mads("e-roce-probe.pcap");
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

/// `SOL_UDP` options of linux/udp.h (the libc crate defines them for Android only):
/// send UDP/IPv6 with checksum 0, accept UDP/IPv6 with checksum 0.
const UDP_NO_CHECK6_TX: libc::c_int = 101;
const UDP_NO_CHECK6_RX: libc::c_int = 102;

fn set_udp_option(sock: &UdpSocket, name: libc::c_int) {
    let one: libc::c_int = 1;
    // SAFETY: setsockopt with a c_int value on an open socket.
    let r = unsafe {
        libc::setsockopt(
            sock.as_raw_fd(),
            libc::SOL_UDP,
            name,
            &one as *const libc::c_int as *const libc::c_void,
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    assert_eq!(
        r,
        0,
        "setsockopt(SOL_UDP, {name}): {}",
        std::io::Error::last_os_error()
    );
}

/// A UDP socket on [::1] whose datagrams leave with UDP checksum 0, as Linux rxe's do
/// (`UDP_NO_CHECK6_TX` needs no privilege).
fn zero_checksum_sender() -> UdpSocket {
    let s = UdpSocket::bind("[::1]:0").expect("a UDP socket on ::1 (IPv6 loopback)");
    set_udp_option(&s, UDP_NO_CHECK6_TX);
    s
}

/// The kernel's `Udp6InCsumErrors` counter (/proc/net/snmp6).
fn udp6_csum_errors() -> u64 {
    let snmp6 = std::fs::read_to_string("/proc/net/snmp6").expect("/proc/net/snmp6 (IPv6)");
    snmp6
        .lines()
        .find_map(|l| l.strip_prefix("Udp6InCsumErrors"))
        .and_then(|v| v.trim().parse().ok())
        .expect("Udp6InCsumErrors in /proc/net/snmp6")
}

/// Why the soft device sets `UDP_NO_CHECK6_RX`: a socket without it loses a UDP/IPv6
/// datagram with checksum 0 (counted in Udp6InCsumErrors), the same socket with it
/// receives the datagram.
#[test]
fn kernel_drops_udp6_checksum_0_unless_the_socket_sets_no_check6_rx() {
    let rx = UdpSocket::bind("[::1]:0").expect("a UDP socket on ::1 (IPv6 loopback)");
    rx.set_read_timeout(Some(WAIT)).unwrap();
    let to = rx.local_addr().unwrap();
    let zero = zero_checksum_sender();
    let plain = UdpSocket::bind("[::1]:0").unwrap();
    let mut buf = [0u8; 64];

    let errors_before = udp6_csum_errors();
    zero.send_to(b"checksum 0", to).unwrap();
    plain.send_to(b"marker", to).unwrap();
    let n = rx.recv(&mut buf).expect("the marker datagram");
    assert_eq!(
        &buf[..n],
        b"marker",
        "a checksum-0 datagram was delivered to a socket without UDP_NO_CHECK6_RX"
    );
    assert!(
        udp6_csum_errors() > errors_before,
        "Udp6InCsumErrors did not count the dropped datagram"
    );

    set_udp_option(&rx, UDP_NO_CHECK6_RX);
    zero.send_to(b"checksum 0", to).unwrap();
    let n = rx
        .recv(&mut buf)
        .expect("the checksum-0 datagram, accepted with UDP_NO_CHECK6_RX");
    assert_eq!(&buf[..n], b"checksum 0");
}

/// Linux's CM REQ of the IPv6 reference capture (frame 23: `nvme discover` to
/// fd77::10, QPN 0x11, admin queue 32/31), rewrapped for ::1 and sent with UDP
/// checksum 0 as Linux rxe sends it, reaches the CM agent of a soft device on ::1.
#[test]
fn linux_ipv6_req_with_udp_checksum_0_reaches_the_cm_agent() {
    let mads = capture_mads("linux-nvme-rdma-rxe-ipv6.pcap");
    let req = &mads.iter().find(|(f, _)| *f == 23).expect("frame 23").1;
    let cfg = CmConfig {
        selective_retransmit: false,
        ..CmConfig::default()
    };
    let (dev, t) = agent("::1", cfg);
    let listen = t.listen(4420).unwrap();
    let zero = zero_checksum_sender();
    let sport = zero.local_addr().unwrap().port();
    let pkt = ud_packet(ip("::1"), sport, ip("::1"), req);
    zero.send_to(&pkt, "[::1]:4791").unwrap();
    let CmEvent::ConnectRequest {
        remote_ip,
        local_port,
        remote_qpn,
        private_data,
        ..
    } = next(&listen)
    else {
        panic!("ConnectRequest")
    };
    assert_eq!((remote_ip, local_port, remote_qpn), (ip("::1"), 4420, 0x11));
    assert_eq!(&private_data[..8], &[0, 0, 0, 0, 32, 0, 31, 0]);
    let c = dev.counters().snapshot();
    assert_eq!((c.rcvd_pkts, c.icrc_errors), (1, 0));
}
