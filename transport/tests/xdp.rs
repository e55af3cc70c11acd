//! The AF_XDP packet path against the kernel's own stack, on a veth pair between two
//! network namespaces this test creates and deletes (`ip netns`, `ip link`): the XDP
//! program hands UDP 4791 to the XSK and passes other ports; frames built by
//! `soft::xdp::frame` (64 B, and 4000 B spanning two UMEM frames) are accepted by the
//! kernel's IPv4/UDP receive path; the program is gone once dropped.
//!
//! Needs root: `cargo test -p transport --test xdp -- --ignored` (`.ci/run` runs it).
use std::net::{IpAddr, Ipv4Addr, SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use transport::soft::xdp::bpf::XdpProgram;
use transport::soft::xdp::frame::{headers_len, parse, write_headers, FrameEnds};
use transport::soft::xdp::neigh::{ifindex, local_mac, peer_mac};
use transport::soft::xdp::xsk::{Xsk, XskConfig};
use transport::wire::ROCE_V2_UDP_DPORT;

const NS_A: &str = "nvmfxdpA";
const NS_B: &str = "nvmfxdpB";
const IF_A: &str = "nvmfxa";
const IF_B: &str = "nvmfxb";
const IP_A: Ipv4Addr = Ipv4Addr::new(10, 48, 0, 1);
const IP_B: Ipv4Addr = Ipv4Addr::new(10, 48, 0, 2);
/// A port the XDP program passes to the stack.
const OTHER_PORT: u16 = 4792;

fn ip(args: &[&str]) {
    let out = Command::new("ip")
        .args(args)
        .output()
        .expect("running ip (iproute2)");
    assert!(
        out.status.success(),
        "ip {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The two namespaces and the veth pair; deleted on drop.
struct Veth;

impl Veth {
    fn create() -> Veth {
        Veth::delete();
        ip(&["netns", "add", NS_A]);
        ip(&["netns", "add", NS_B]);
        let v = Veth;
        ip(&[
            "link", "add", IF_A, "netns", NS_A, "type", "veth", "peer", "name", IF_B, "netns", NS_B,
        ]);
        for (ns, iface, addr) in [(NS_A, IF_A, IP_A), (NS_B, IF_B, IP_B)] {
            ip(&["-n", ns, "link", "set", iface, "mtu", "9000"]);
            ip(&["-n", ns, "addr", "add", &format!("{addr}/24"), "dev", iface]);
            ip(&["-n", ns, "link", "set", iface, "up"]);
        }
        v
    }
    fn delete() {
        for ns in [NS_A, NS_B] {
            let _ = Command::new("ip").args(["netns", "del", ns]).output();
        }
    }
}

impl Drop for Veth {
    fn drop(&mut self) {
        Veth::delete();
    }
}

/// Moves the calling thread into network namespace `ns`.
fn enter(ns: &str) {
    let f = std::fs::File::open(format!("/run/netns/{ns}")).expect("the namespace file");
    // SAFETY: setns on a namespace file we hold open; it changes this thread only.
    let r = unsafe { libc::setns(f.as_raw_fd(), libc::CLONE_NEWNET) };
    assert_eq!(r, 0, "setns {ns}: {}", std::io::Error::last_os_error());
}

#[test]
#[ignore = "needs root: AF_XDP (network namespaces, XDP, AF_XDP sockets)"]
fn xsk_echo_through_the_kernel_stack_on_a_veth_pair() {
    let _veth = Veth::create();
    let stop = Arc::new(AtomicBool::new(false));
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    // Namespace B: the XDP program and an XSK that echoes every RoCE datagram, plus a
    // plain socket on OTHER_PORT that must still get its datagrams.
    let echo = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            enter(NS_B);
            let ix = ifindex(IF_B).unwrap();
            let prog = XdpProgram::attach(ix, 1).unwrap();
            let mut xsk = Xsk::open(ix, 0, XskConfig::default()).unwrap();
            prog.insert(0, xsk.fd()).unwrap();
            let plain = UdpSocket::bind(SocketAddr::new(IP_B.into(), OTHER_PORT)).unwrap();
            plain
                .set_read_timeout(Some(Duration::from_secs(5)))
                .unwrap();
            let src_mac = local_mac(IF_B).unwrap();
            let dst_mac = peer_mac(IP_A.into(), IF_B).unwrap();
            ready_tx.send(()).unwrap();
            let mut out = vec![0u8; 9100];
            let mut echoed = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let mut replies = Vec::new();
                xsk.recv(32, |f| {
                    if let Some(d) = parse(f) {
                        assert_eq!(d.dst_port, ROCE_V2_UDP_DPORT, "only 4791 reaches the XSK");
                        replies.push((SocketAddr::new(d.src, d.src_port), d.payload.to_vec()));
                    }
                });
                for (to, payload) in replies {
                    let ends = FrameEnds {
                        src_mac,
                        dst_mac,
                        src: SocketAddr::new(IP_B.into(), ROCE_V2_UDP_DPORT),
                        dst: to,
                        tos: transport::soft::ECN_ECT0,
                    };
                    let hl = headers_len(false);
                    out[hl..hl + payload.len()].copy_from_slice(&payload);
                    let n = write_headers(&mut out, &ends, payload.len()).unwrap();
                    assert!(xsk.send(&out[..n]));
                    echoed += 1;
                }
                xsk.kick();
            }
            let mut buf = [0u8; 64];
            let (n, _) = plain
                .recv_from(&mut buf)
                .expect("the datagram to another port passed to the stack");
            assert_eq!(&buf[..n], b"not roce");
            let c = xsk.counters();
            assert_eq!((c.tx_frames, c.rx_dropped), (echoed, 0), "{c:?}");
            drop(xsk);
            drop(prog);
            let out = Command::new("ip")
                .args(["-d", "link", "show", IF_B])
                .output()
                .unwrap();
            let text = String::from_utf8_lossy(&out.stdout);
            assert!(
                !text.contains("prog/xdp"),
                "the XDP program is detached on drop: {text}"
            );
            echoed
        })
    };
    ready_rx
        .recv_timeout(Duration::from_secs(10))
        .expect("the echo side came up");
    // Namespace A: plain kernel sockets, no XDP.
    let pinger = std::thread::spawn(move || {
        enter(NS_A);
        let s = UdpSocket::bind(SocketAddr::new(IP_A.into(), 0xC000)).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        let to = SocketAddr::new(IpAddr::V4(IP_B), ROCE_V2_UDP_DPORT);
        let mut buf = vec![0u8; 9000];
        for size in [64usize, 4000, 64] {
            let msg: Vec<u8> = (0..size).map(|i| (i * 13 + size) as u8).collect();
            let start = Instant::now();
            s.send_to(&msg, to).unwrap();
            let (n, from) = s
                .recv_from(&mut buf)
                .unwrap_or_else(|e| panic!("no echo of {size} B: {e}"));
            assert_eq!(from, to, "the echo comes from 4791");
            assert_eq!(
                &buf[..n],
                &msg[..],
                "{size} B echoed intact (after {:?})",
                start.elapsed()
            );
        }
        s.send_to(b"not roce", SocketAddr::new(IP_B.into(), OTHER_PORT))
            .unwrap();
    });
    pinger.join().expect("pinger");
    stop.store(true, Ordering::Relaxed);
    assert_eq!(echo.join().expect("echo side"), 3);
}
