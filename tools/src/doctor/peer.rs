//! The peer exchange: `rdma-doctor --listen` on the peer answers a query with its GID
//! for its address, and echoes probe datagrams with their length, so the doctor on
//! this host compares GIDs and probes the path MTU end to end.
//!
//! On UDP port [`DOCTOR_PORT`] of the peer's address. A query is the 4 bytes
//! [`QUERY`]; the answer is [`PeerInfo`] as JSON. A probe is [`PROBE`] followed by
//! padding, sent with DF set (`IP_PMTUDISC_PROBE`: the kernel neither fragments nor
//! caps it at a cached path MTU); the answer is [`PROBE_ACK`] and the probe's length
//! (u32, big-endian). A probe that does not come back within the timeout, three tries,
//! did not cross the path.
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use transport::verbs::Mtu;

use super::gid::{local_summary, GidSummary};
use super::{roce_overhead_bytes, Options};

/// The doctor's UDP port (perftest's out-of-band TCP port is 18515).
pub const DOCTOR_PORT: u16 = 18516;
/// A query.
pub const QUERY: &[u8; 4] = b"RDQ1";
/// A probe's first bytes.
pub const PROBE: &[u8; 4] = b"RDP1";
/// A probe's answer's first bytes.
pub const PROBE_ACK: &[u8; 4] = b"RDA1";

/// What the peer says of itself.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PeerInfo {
    /// The peer's address (where it listens).
    pub addr: IpAddr,
    /// Its GID for that address, if it has one.
    pub gid: Option<GidSummary>,
    /// Why it has none.
    pub gid_error: Option<String>,
    /// The command that gives it one.
    pub gid_fix: Option<String>,
}

/// One probe size and whether it crossed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Probe {
    /// The RoCE MTU this size stands for.
    pub roce_mtu: u32,
    /// The IP packet's size in bytes (headers included).
    pub ip_bytes: u32,
    /// Whether the peer echoed it.
    pub crossed: bool,
    /// The local error, if sending failed (EMSGSIZE: above the interface MTU).
    pub error: Option<String>,
}

/// What the peer answered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PeerAnswer {
    /// The peer's doctor answered.
    Answered {
        /// Its GID (boxed: the variant would otherwise be 232 bytes beside a string).
        info: Box<PeerInfo>,
        /// The probes, largest first, until one crossed.
        probes: Vec<Probe>,
    },
    /// Nothing answered (the reason).
    NoAnswer(String),
}

impl PeerAnswer {
    /// The largest RoCE MTU whose packets crossed the path.
    pub fn path_roce_mtu(&self) -> Option<Mtu> {
        match self {
            PeerAnswer::Answered { probes, .. } => {
                probes.iter().find(|p| p.crossed).and_then(|p| {
                    (1..=5)
                        .filter_map(Mtu::from_code)
                        .find(|m| m.bytes() == p.roce_mtu)
                })
            }
            PeerAnswer::NoAnswer(_) => None,
        }
    }
}

fn set_df(sock: &UdpSocket, ip: IpAddr) {
    let (level, opt) = if ip.is_ipv4() {
        (libc::IPPROTO_IP, libc::IP_MTU_DISCOVER)
    } else {
        (libc::IPPROTO_IPV6, libc::IPV6_MTU_DISCOVER)
    };
    let v: libc::c_int = libc::IP_PMTUDISC_PROBE;
    // SAFETY: a valid socket and a c_int option value.
    unsafe {
        libc::setsockopt(
            sock.as_raw_fd(),
            level,
            opt,
            (&v as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        );
    }
}

/// The route's MTU toward the socket's connected peer (getsockopt `IP_MTU` /
/// `IPV6_MTU`: the interface MTU, or a smaller path MTU the kernel learned).
pub fn route_mtu(local: IpAddr, peer: IpAddr) -> Option<u32> {
    let sock = UdpSocket::bind(SocketAddr::new(local, 0)).ok()?;
    sock.connect(SocketAddr::new(peer, DOCTOR_PORT)).ok()?;
    let (level, opt) = if peer.is_ipv4() {
        (libc::IPPROTO_IP, libc::IP_MTU)
    } else {
        (libc::IPPROTO_IPV6, libc::IPV6_MTU)
    };
    let mut v: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: a valid socket, a c_int out value and its length.
    let rc = unsafe {
        libc::getsockopt(
            sock.as_raw_fd(),
            level,
            opt,
            (&mut v as *mut libc::c_int).cast(),
            &mut len,
        )
    };
    (rc == 0 && v > 0).then_some(v as u32)
}

fn ask(sock: &UdpSocket, msg: &[u8], want: &[u8], tries: u32) -> Result<Vec<u8>, String> {
    let mut buf = vec![0u8; 65536];
    let mut last = String::from("no answer");
    for _ in 0..tries {
        if let Err(e) = sock.send(msg) {
            return Err(e.to_string());
        }
        loop {
            match sock.recv(&mut buf) {
                Ok(n) if buf[..n].starts_with(want) => return Ok(buf[..n].to_vec()),
                Ok(_) => continue,
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) =>
                {
                    last = "no answer".into();
                    break;
                }
                Err(e) => {
                    last = e.to_string();
                    break;
                }
            }
        }
    }
    Err(last)
}

/// Queries the peer's doctor at `peer:port` from `local` and probes the path MTU
/// (largest RoCE MTU first, down to 256, until one crosses).
pub fn query(local: IpAddr, peer: IpAddr, port: u16, timeout: Duration) -> PeerAnswer {
    let sock = match UdpSocket::bind(SocketAddr::new(local.to_canonical(), 0))
        .and_then(|s| s.connect(SocketAddr::new(peer, port)).map(|_| s))
    {
        Ok(s) => s,
        Err(e) => {
            return PeerAnswer::NoAnswer(format!("cannot open a UDP socket from {local}: {e}"))
        }
    };
    let _ = sock.set_read_timeout(Some(timeout));
    let info: PeerInfo = match ask(&sock, QUERY, b"{", 3) {
        Ok(b) => match serde_json::from_slice(&b) {
            Ok(i) => i,
            Err(e) => return PeerAnswer::NoAnswer(format!("the answer did not parse ({e})")),
        },
        Err(e) => return PeerAnswer::NoAnswer(e),
    };
    set_df(&sock, peer);
    let mut probes = Vec::new();
    let ip_hdr = if peer.is_ipv4() { 20 } else { 40 };
    for m in [
        Mtu::Mtu4096,
        Mtu::Mtu2048,
        Mtu::Mtu1024,
        Mtu::Mtu512,
        Mtu::Mtu256,
    ] {
        let ip_bytes = m.bytes() + roce_overhead_bytes(peer);
        let mut msg = vec![0u8; (ip_bytes - ip_hdr - 8) as usize];
        msg[..4].copy_from_slice(PROBE);
        let (crossed, error) = match ask(&sock, &msg, PROBE_ACK, 3) {
            Ok(a) => (
                a.len() >= 8 && u32::from_be_bytes([a[4], a[5], a[6], a[7]]) as usize == msg.len(),
                None,
            ),
            Err(e) if e == "no answer" => (false, None),
            Err(e) => (false, Some(e)),
        };
        probes.push(Probe {
            roce_mtu: m.bytes(),
            ip_bytes,
            crossed,
            error,
        });
        if crossed {
            break;
        }
    }
    PeerAnswer::Answered {
        info: Box::new(info),
        probes,
    }
}

/// Serves queries and probes on `opts.addr:port` until the process ends.
///
/// # Errors
/// When the socket cannot be bound (the address is not this host's, the port in use).
pub fn serve(opts: &Options, port: u16) -> std::io::Result<()> {
    let sock = UdpSocket::bind(SocketAddr::new(opts.addr.to_canonical(), port))?;
    let mut buf = vec![0u8; 65536];
    loop {
        let (n, from) = sock.recv_from(&mut buf)?;
        let msg = &buf[..n];
        if msg == QUERY {
            let ifs = crate::netif::interfaces(&opts.net_root).unwrap_or_default();
            let info = match local_summary(opts, &ifs) {
                Ok(g) => PeerInfo {
                    addr: opts.addr,
                    gid: Some(g),
                    gid_error: None,
                    gid_fix: None,
                },
                Err(f) => PeerInfo {
                    addr: opts.addr,
                    gid: None,
                    gid_error: Some(f.summary),
                    gid_fix: f.fix,
                },
            };
            if let Ok(j) = serde_json::to_vec(&info) {
                let _ = sock.send_to(&j, from);
            }
        } else if msg.starts_with(PROBE) {
            let mut a = PROBE_ACK.to_vec();
            a.extend_from_slice(&(n as u32).to_be_bytes());
            let _ = sock.send_to(&a, from);
        }
    }
}
