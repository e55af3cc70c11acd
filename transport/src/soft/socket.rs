//! UDP sockets of the soft provider (RoCEv2 Annex A17.2: UDP destination port 4791).
//!
//! - Receive: `rx_queues + 1` sockets bound to `ip:4791` in one SO_REUSEPORT group,
//!   with a classic BPF program that steers each packet by the BTH destination QP:
//!   QP1 (CM MADs) to socket 0, any other QPN `q` to socket `1 + q % rx_queues`. Each
//!   poll group owns one socket and allocates QPNs in its residue class, so packets
//!   land on the thread that owns their QP with no cross-thread hand-off (RSS by QPN,
//!   as an RNIC does). Over IPv6 they accept UDP checksum 0 (`UDP_NO_CHECK6_RX`), as
//!   Linux rxe sends it.
//! - Send: one unconnected UDP socket per QP bound to `ip:sport`, with the per-QP
//!   source port (0xC000..=0xFFFF) that gives ECMP its entropy; IPv4 with DF
//!   (IP_PMTUDISC_DO), which makes Linux write IP ID 0 (an unconnected socket with DF
//!   does not use the per-socket ID counter), the value the sender's ICRC covers.
use std::io;
use std::mem::{size_of, zeroed};
use std::net::{IpAddr, SocketAddr};
use std::os::fd::{AsRawFd, RawFd};

use socket2::{Domain, Protocol, SockAddr, Socket, Type};

use super::fault::{Delivery, RxFaults};
use crate::fdlimit::NofileError;
use crate::wire::ROCE_V2_UDP_DPORT;

const SO_ATTACH_REUSEPORT_CBPF: libc::c_int = 51;
/// `SOL_UDP` option (linux/udp.h; the libc crate defines it for Android only): accept
/// UDP/IPv6 datagrams with checksum 0, which Linux rxe sends on every RoCEv2 packet
/// over IPv6 (the ICRC protects the payload). Without it the kernel drops them as
/// checksum errors (`Udp6InCsumErrors`).
const UDP_NO_CHECK6_RX: libc::c_int = 102;
const SO_RCVBUFFORCE: libc::c_int = 33;
const SO_SNDBUFFORCE: libc::c_int = 32;

/// Receive buffer asked for each receive socket (bytes). Sized so QD32 x 1 MiB of
/// windowed traffic does not overrun it; SO_RCVBUFFORCE is tried first (needs
/// CAP_NET_ADMIN), SO_RCVBUF (capped by net.core.rmem_max) otherwise. The device reads
/// back what it got and sizes its RC windows from that ([`super::rx_buffer`]).
pub const RX_SOCKET_BUFFER_BYTES: usize = 32 << 20;
/// Send buffer asked for each per-QP socket (bytes).
pub const TX_SOCKET_BUFFER_BYTES: usize = 8 << 20;

/// Errors opening the device's sockets (or its receive fault layer), each naming the
/// address.
#[derive(Debug, thiserror::Error)]
pub enum SocketError {
    /// Another socket holds `ip:port` (EADDRINUSE). For the RoCEv2 port 4791 the
    /// message names the fix: each RoCEv2 endpoint on a machine needs an address of its
    /// own ([`port_in_use_words`]).
    #[error("{}", port_in_use_words(*.ip, *.port))]
    PortInUse { ip: IpAddr, port: u16 },
    #[error("cannot bind UDP {ip}:{port}: {source} (is {ip} an address of this machine?)")]
    Bind {
        ip: IpAddr,
        port: u16,
        source: io::Error,
    },
    #[error("socket setup for {ip}: {what}: {source}")]
    Setup {
        ip: IpAddr,
        what: &'static str,
        source: io::Error,
    },
    /// No file descriptor left for a socket (EMFILE, ENFILE); the message states
    /// `RLIMIT_NOFILE` and how to raise it.
    #[error(transparent)]
    OpenFiles(#[from] crate::fdlimit::NofileError),
    /// The AF_XDP packet path could not be set up (the message names the fix).
    #[error(transparent)]
    AfXdp(#[from] super::xdp::XdpError),
    /// The device's fault injection configuration is out of range.
    #[error("fault injection on {ip}: {source}")]
    Faults {
        ip: IpAddr,
        source: super::fault::FaultConfigError,
    },
}

/// The message of [`SocketError::PortInUse`]: for UDP 4791 (every RoCEv2 receiver's
/// port) who may hold it and how to pick another address; for another port (a QP's
/// UDP source port, QP1's), that the ports ran out.
pub fn port_in_use_words(ip: IpAddr, port: u16) -> String {
    if port != ROCE_V2_UDP_DPORT {
        return format!("UDP port {port} on {ip} is already in use");
    }
    let other = match ip {
        IpAddr::V4(v4) if v4.is_loopback() => {
            let o = v4.octets();
            format!(
                " (e.g. {}.{}.{}.{})",
                o[0],
                o[1],
                o[2],
                if o[3] >= 250 { 5 } else { o[3] + 2 }
            )
        }
        _ => String::new(),
    };
    format!(
        "UDP port {port} on {ip} is already in use: another process holds it (a second \
         nvmf-bench or nvmf-target, or another RoCEv2 stack such as Linux rdma_rxe on that \
         address). RoCEv2 receives on UDP {port} of each address, so every endpoint on one \
         machine needs an address of its own: give nvmf-bench another local address with \
         --host-traddr{other}, nvmf-target another with --addr (or `addr` under [[listen]] \
         in its configuration)"
    )
}

/// EADDRINUSE as [`SocketError::PortInUse`], anything else as [`SocketError::Bind`].
fn bind_error(ip: IpAddr, port: u16, e: io::Error) -> SocketError {
    match e.raw_os_error() {
        Some(libc::EADDRINUSE) => SocketError::PortInUse { ip, port },
        _ => SocketError::Bind {
            ip,
            port,
            source: e,
        },
    }
}

fn setsockopt_int(
    fd: RawFd,
    level: libc::c_int,
    name: libc::c_int,
    val: libc::c_int,
) -> io::Result<()> {
    // SAFETY: plain setsockopt with a c_int value.
    let r = unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            &val as *const _ as *const libc::c_void,
            size_of::<libc::c_int>() as u32,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

fn set_buffer(sock: &Socket, force: libc::c_int, plain: libc::c_int, bytes: usize) {
    let fd = sock.as_raw_fd();
    if setsockopt_int(fd, libc::SOL_SOCKET, force, bytes as libc::c_int).is_err() {
        let _ = setsockopt_int(fd, libc::SOL_SOCKET, plain, bytes as libc::c_int);
    }
}

/// A non-blocking UDP socket for `ip`'s family (IPv6 only for IPv6). Every socket of
/// the provider is opened here, so running out of descriptors is always
/// [`SocketError::OpenFiles`].
fn udp_socket(ip: IpAddr) -> Result<Socket, SocketError> {
    let domain = if ip.is_ipv4() {
        Domain::IPV4
    } else {
        Domain::IPV6
    };
    let s = Socket::new(
        domain,
        Type::DGRAM.nonblocking().cloexec(),
        Some(Protocol::UDP),
    )
    .map_err(|e| match NofileError::from_io(&e) {
        Some(n) => SocketError::OpenFiles(n),
        None => SocketError::Setup {
            ip,
            what: "socket",
            source: e,
        },
    })?;
    if ip.is_ipv6() {
        s.set_only_v6(true).map_err(|e| SocketError::Setup {
            ip,
            what: "IPV6_V6ONLY",
            source: e,
        })?;
    }
    Ok(s)
}

/// The classic BPF program steering by BTH destination QP (the filter runs with the
/// packet data starting at the UDP payload, i.e. at the BTH).
fn steering_program(rx_queues: u32) -> Vec<libc::sock_filter> {
    const BPF_LD_W_ABS: u16 = 0x20; // BPF_LD (0) | BPF_W (0) | BPF_ABS (0x20)
    const BPF_ALU_AND_K: u16 = 0x04 | 0x50; // BPF_ALU | BPF_AND | BPF_K
    const BPF_ALU_MOD_K: u16 = 0x04 | 0x90;
    const BPF_ALU_ADD_K: u16 = 0x04;
    const BPF_JEQ_K: u16 = 0x05 | 0x10; // BPF_JMP | BPF_JEQ | BPF_K
    const BPF_RET_A: u16 = 0x06 | 0x10;
    const BPF_RET_K: u16 = 0x06;
    let ins = |code, jt, jf, k| libc::sock_filter { code, jt, jf, k };
    vec![
        ins(BPF_LD_W_ABS, 0, 0, 4), // A = BTH bytes 4..8 (F/B/resv, DestQP)
        ins(BPF_ALU_AND_K, 0, 0, 0x00FF_FFFF), // A = DestQP
        ins(BPF_JEQ_K, 0, 1, 1),    // QP1?
        ins(BPF_RET_K, 0, 0, 0),    //   -> socket 0 (CM agent)
        ins(BPF_ALU_MOD_K, 0, 0, rx_queues), // A = qpn % rx_queues
        ins(BPF_ALU_ADD_K, 0, 0, 1), // A += 1
        ins(BPF_RET_A, 0, 0, 0),
    ]
}

/// Binds the receive socket group on `ip:4791`: index 0 for QP1, 1..=rx_queues for
/// the poll groups; on IPv6 each accepts UDP checksum 0 (Linux rxe's RoCEv2 over
/// IPv6). Fails with [`SocketError::PortInUse`] when another socket holds the port.
pub fn bind_rx_group(ip: IpAddr, rx_queues: u32) -> Result<Vec<Socket>, SocketError> {
    let port = ROCE_V2_UDP_DPORT;
    let addr = SockAddr::from(SocketAddr::new(ip, port));
    let setup = |what, source| SocketError::Setup { ip, what, source };
    // A probe without SO_REUSEPORT: another process using reuseport would otherwise
    // silently join our group and steal packets.
    {
        let probe = udp_socket(ip)?;
        probe.bind(&addr).map_err(|e| bind_error(ip, port, e))?;
    }
    let mut socks = Vec::with_capacity(rx_queues as usize + 1);
    for _ in 0..=rx_queues {
        let s = udp_socket(ip)?;
        s.set_reuse_port(true)
            .map_err(|e| setup("SO_REUSEPORT", e))?;
        if ip.is_ipv6() {
            setsockopt_int(s.as_raw_fd(), libc::SOL_UDP, UDP_NO_CHECK6_RX, 1)
                .map_err(|e| setup("UDP_NO_CHECK6_RX", e))?;
        }
        set_buffer(&s, SO_RCVBUFFORCE, libc::SO_RCVBUF, RX_SOCKET_BUFFER_BYTES);
        s.bind(&addr).map_err(|e| bind_error(ip, port, e))?;
        socks.push(s);
    }
    let prog = steering_program(rx_queues);
    let fprog = libc::sock_fprog {
        len: prog.len() as u16,
        filter: prog.as_ptr() as *mut _,
    };
    // SAFETY: fprog points at `prog`, alive for the call.
    let r = unsafe {
        libc::setsockopt(
            socks[0].as_raw_fd(),
            libc::SOL_SOCKET,
            SO_ATTACH_REUSEPORT_CBPF,
            &fprog as *const _ as *const libc::c_void,
            size_of::<libc::sock_fprog>() as u32,
        )
    };
    if r != 0 {
        return Err(setup(
            "SO_ATTACH_REUSEPORT_CBPF",
            io::Error::last_os_error(),
        ));
    }
    Ok(socks)
}

/// Per-QP send socket bound to `ip:sport`, DF set. On EADDRINUSE it tries the next
/// ports of 0xC000..=0xFFFF; returns the socket and the port it got.
pub fn bind_tx_socket(ip: IpAddr, sport: u16) -> Result<(Socket, u16), SocketError> {
    let setup = |what, source| SocketError::Setup { ip, what, source };
    let mut port = sport.max(0xC000);
    for _ in 0..0x4000 {
        let s = udp_socket(ip)?;
        if ip.is_ipv4() {
            setsockopt_int(
                s.as_raw_fd(),
                libc::IPPROTO_IP,
                libc::IP_MTU_DISCOVER,
                libc::IP_PMTUDISC_DO,
            )
            .map_err(|e| setup("IP_MTU_DISCOVER", e))?;
            // ECT(0): our choice (DESIGN: ToS is masked from the ICRC).
            let _ = setsockopt_int(s.as_raw_fd(), libc::IPPROTO_IP, libc::IP_TOS, 0x02);
        } else {
            let _ = setsockopt_int(s.as_raw_fd(), libc::IPPROTO_IPV6, libc::IPV6_DONTFRAG, 1);
            let _ = setsockopt_int(s.as_raw_fd(), libc::IPPROTO_IPV6, libc::IPV6_TCLASS, 0x02);
        }
        set_buffer(&s, SO_SNDBUFFORCE, libc::SO_SNDBUF, TX_SOCKET_BUFFER_BYTES);
        match s.bind(&SockAddr::from(SocketAddr::new(ip, port))) {
            Ok(()) => return Ok((s, port)),
            Err(e) if e.raw_os_error() == Some(libc::EADDRINUSE) => {
                port = if port == 0xFFFF { 0xC000 } else { port + 1 };
            }
            Err(e) => {
                return Err(SocketError::Bind {
                    ip,
                    port,
                    source: e,
                })
            }
        }
    }
    Err(SocketError::PortInUse { ip, port: sport })
}

/// Binds a plain (blocking) UDP socket to `ip:port` with DF, for QP1's sends.
pub fn bind_plain(ip: IpAddr, port: u16) -> Result<Socket, SocketError> {
    let s = udp_socket(ip)?;
    if ip.is_ipv4() {
        let _ = setsockopt_int(
            s.as_raw_fd(),
            libc::IPPROTO_IP,
            libc::IP_MTU_DISCOVER,
            libc::IP_PMTUDISC_DO,
        );
    }
    s.bind(&SockAddr::from(SocketAddr::new(ip, port)))
        .map_err(|e| bind_error(ip, port, e))?;
    Ok(s)
}

/// Maximum datagrams per `recvmmsg` batch.
pub const RX_BATCH: usize = 32;
/// Bytes of each receive slot: the largest RoCEv2 packet at MTU 4096 plus headers.
pub const RX_SLOT_BYTES: usize = 4096 + 128;

/// A batch of receive slots for `recvmmsg`, optionally behind a fault layer
/// ([`RxFaults`]), which then decides what [`RxBatch::recv`] delivers.
pub struct RxBatch {
    bufs: Vec<u8>,
    addrs: Vec<libc::sockaddr_storage>,
    iovs: Vec<libc::iovec>,
    hdrs: Vec<libc::mmsghdr>,
    count: usize,
    /// Headers `0..stale` were written by the kernel (or never set up) and must be
    /// re-initialized before the next `recvmmsg`; the rest are still as set up.
    stale: usize,
    /// The fault layer; `None` (the normal case) costs one test per `recv`/`get`.
    faults: Option<Box<RxFaults>>,
}

// SAFETY: the raw pointers inside point into the batch's own vectors.
unsafe impl Send for RxBatch {}

impl Default for RxBatch {
    fn default() -> Self {
        Self::new()
    }
}

impl RxBatch {
    /// A batch of [`RX_BATCH`] slots.
    pub fn new() -> Self {
        RxBatch {
            bufs: vec![0u8; RX_BATCH * RX_SLOT_BYTES],
            // SAFETY: sockaddr_storage, iovec and mmsghdr are plain C structs; zero is valid.
            addrs: vec![unsafe { zeroed() }; RX_BATCH],
            iovs: vec![unsafe { zeroed() }; RX_BATCH],
            hdrs: vec![unsafe { zeroed() }; RX_BATCH],
            count: 0,
            stale: RX_BATCH,
            faults: None,
        }
    }

    /// A batch of [`RX_BATCH`] slots whose datagrams pass through `faults` (none: as
    /// [`RxBatch::new`]).
    pub fn with_faults(faults: Option<RxFaults>) -> Self {
        RxBatch {
            faults: faults.map(Box::new),
            ..RxBatch::new()
        }
    }

    /// Non-blocking `recvmmsg` into the batch; returns how many datagrams arrived
    /// (0 when none are waiting). With a fault layer: how many are delivered, which
    /// may differ either way (drops, duplicates, held datagrams released).
    pub fn recv(&mut self, fd: RawFd) -> io::Result<usize> {
        let n = self.recv_kernel(fd)?;
        let Self {
            bufs,
            addrs,
            hdrs,
            faults,
            ..
        } = self;
        let Some(f) = faults.as_deref_mut() else {
            return Ok(n);
        };
        let datagrams = bufs
            .chunks_exact_mut(RX_SLOT_BYTES)
            .zip(hdrs.iter())
            .zip(addrs.iter())
            .take(n)
            .map(|((slot, h), a)| {
                let len = (h.msg_len as usize).min(RX_SLOT_BYTES);
                (sockaddr_to_std(a), &mut slot[..len])
            });
        Ok(f.apply(datagrams))
    }

    fn recv_kernel(&mut self, fd: RawFd) -> io::Result<usize> {
        // Only the headers the last call filled need setting up again (an empty poll,
        // the common case when busy polling, touches none).
        for i in 0..self.stale {
            self.iovs[i] = libc::iovec {
                iov_base: self.bufs[i * RX_SLOT_BYTES..].as_mut_ptr() as *mut libc::c_void,
                iov_len: RX_SLOT_BYTES,
            };
            let h = &mut self.hdrs[i].msg_hdr;
            h.msg_name = &mut self.addrs[i] as *mut _ as *mut libc::c_void;
            h.msg_namelen = size_of::<libc::sockaddr_storage>() as u32;
            h.msg_iov = &mut self.iovs[i];
            h.msg_iovlen = 1;
            h.msg_control = std::ptr::null_mut();
            h.msg_controllen = 0;
            h.msg_flags = 0;
            self.hdrs[i].msg_len = 0;
        }
        // SAFETY: every header points at live slots of this batch.
        let n = unsafe {
            libc::recvmmsg(
                fd,
                self.hdrs.as_mut_ptr(),
                RX_BATCH as u32,
                libc::MSG_DONTWAIT,
                std::ptr::null_mut(),
            )
        };
        if n < 0 {
            let e = io::Error::last_os_error();
            self.count = 0;
            // The kernel may have written the first header before failing.
            self.stale = 1;
            return match e.kind() {
                io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted => Ok(0),
                _ => Err(e),
            };
        }
        self.count = n as usize;
        self.stale = self.count;
        Ok(self.count)
    }

    /// Datagram `i` of the last `recv`: source address and bytes. Truncated datagrams
    /// (MSG_TRUNC) are reported with the bytes that fit; the ICRC check drops them.
    pub fn get(&self, i: usize) -> Option<(SocketAddr, &[u8])> {
        let i = match self.faults.as_deref() {
            None => i,
            Some(f) => match f.delivery(i)? {
                Delivery::Slot(j) => j,
                Delivery::Released(k) => return f.released(k),
            },
        };
        if i >= self.count {
            return None;
        }
        let len = (self.hdrs[i].msg_len as usize).min(RX_SLOT_BYTES);
        let addr = sockaddr_to_std(&self.addrs[i])?;
        Some((addr, &self.bufs[i * RX_SLOT_BYTES..i * RX_SLOT_BYTES + len]))
    }
}

fn sockaddr_to_std(ss: &libc::sockaddr_storage) -> Option<SocketAddr> {
    // SAFETY: the kernel filled `ss` with a sockaddr of the family it names.
    unsafe {
        match ss.ss_family as libc::c_int {
            libc::AF_INET => {
                let a = &*(ss as *const _ as *const libc::sockaddr_in);
                Some(SocketAddr::new(
                    IpAddr::from(u32::from_be(a.sin_addr.s_addr).to_be_bytes()),
                    u16::from_be(a.sin_port),
                ))
            }
            libc::AF_INET6 => {
                let a = &*(ss as *const _ as *const libc::sockaddr_in6);
                Some(SocketAddr::new(
                    IpAddr::from(a.sin6_addr.s6_addr),
                    u16::from_be(a.sin6_port),
                ))
            }
            _ => None,
        }
    }
}

/// Sends one datagram gathered from `parts` to `dest` (`sendmsg`), non-blocking.
/// Returns `Ok(false)` when the socket buffer is full (EAGAIN/ENOBUFS): the caller
/// drops the packet and the RC retransmission recovers it.
pub fn send_gather(sock: &Socket, dest: &SockAddr, parts: &[&[u8]]) -> io::Result<bool> {
    let mut iovs: [libc::iovec; 8] = [libc::iovec {
        iov_base: std::ptr::null_mut(),
        iov_len: 0,
    }; 8];
    let n = parts.len().min(8);
    for (iov, p) in iovs.iter_mut().zip(parts.iter()) {
        *iov = libc::iovec {
            iov_base: p.as_ptr() as *mut libc::c_void,
            iov_len: p.len(),
        };
    }
    // SAFETY: msghdr zeroed is valid; all pointers live for the call.
    let mut msg: libc::msghdr = unsafe { zeroed() };
    msg.msg_name = dest.as_ptr() as *mut libc::c_void;
    msg.msg_namelen = dest.len();
    msg.msg_iov = iovs.as_mut_ptr();
    msg.msg_iovlen = n;
    // SAFETY: see above.
    let r = unsafe { libc::sendmsg(sock.as_raw_fd(), &msg, libc::MSG_DONTWAIT) };
    if r >= 0 {
        return Ok(true);
    }
    let e = io::Error::last_os_error();
    match e.raw_os_error() {
        Some(libc::EAGAIN) | Some(libc::ENOBUFS) => Ok(false),
        _ => Err(e),
    }
}

/// Most iovecs of one datagram in [`send_many`].
const MAX_PARTS: usize = 8;
/// Most datagrams of one [`send_many`] call.
const MAX_MSGS: usize = 32;

/// Sends up to 32 datagrams to `dest` with one `sendmmsg`, each gathered from its
/// parts (at most 8), non-blocking. Returns how many the kernel took; the rest (a
/// full socket buffer) are dropped and left to RC retransmission.
pub fn send_many(sock: &Socket, dest: &SockAddr, msgs: &[&[&[u8]]]) -> io::Result<usize> {
    let n = msgs.len().min(MAX_MSGS);
    if n == 0 {
        return Ok(0);
    }
    let mut iovs = [[libc::iovec {
        iov_base: std::ptr::null_mut(),
        iov_len: 0,
    }; MAX_PARTS]; MAX_MSGS];
    // SAFETY: mmsghdr zeroed is valid.
    let mut hdrs: [libc::mmsghdr; MAX_MSGS] = unsafe { zeroed() };
    for (i, parts) in msgs[..n].iter().enumerate() {
        let k = parts.len().min(MAX_PARTS);
        for (iov, p) in iovs[i].iter_mut().zip(parts.iter()) {
            *iov = libc::iovec {
                iov_base: p.as_ptr() as *mut libc::c_void,
                iov_len: p.len(),
            };
        }
        let h = &mut hdrs[i].msg_hdr;
        h.msg_name = dest.as_ptr() as *mut libc::c_void;
        h.msg_namelen = dest.len();
        h.msg_iov = iovs[i].as_mut_ptr();
        h.msg_iovlen = k;
    }
    // SAFETY: every header points at iovecs and buffers alive for the call.
    let r = unsafe {
        libc::sendmmsg(
            sock.as_raw_fd(),
            hdrs.as_mut_ptr(),
            n as u32,
            libc::MSG_DONTWAIT,
        )
    };
    if r >= 0 {
        return Ok(r as usize);
    }
    let e = io::Error::last_os_error();
    match e.raw_os_error() {
        Some(libc::EAGAIN) | Some(libc::ENOBUFS) => Ok(0),
        _ => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::soft::fault::{FaultConfig, FaultCounters};
    use std::sync::Arc;

    #[test]
    fn port_in_use_names_the_fix() {
        let m = SocketError::PortInUse {
            ip: "127.0.0.3".parse().unwrap(),
            port: ROCE_V2_UDP_DPORT,
        }
        .to_string();
        assert!(
            m.starts_with("UDP port 4791 on 127.0.0.3 is already in use: another process")
                && m.contains("--host-traddr (e.g. 127.0.0.5)")
                && m.contains("nvmf-target another with --addr"),
            "{m}"
        );
        let m = SocketError::PortInUse {
            ip: "10.0.0.1".parse().unwrap(),
            port: 55410,
        }
        .to_string();
        assert_eq!(m, "UDP port 55410 on 10.0.0.1 is already in use");
    }

    /// A real UDP socket behind the fault layer: every datagram duplicated, so the
    /// batch delivers each twice with its source address, and the counter says so.
    #[test]
    fn rx_batch_applies_its_fault_layer_to_real_datagrams() {
        let ip: IpAddr = "127.0.0.129".parse().unwrap();
        let rx = udp_socket(ip).unwrap();
        rx.bind(&SockAddr::from(SocketAddr::new(ip, 0))).unwrap();
        let dest = rx.local_addr().unwrap();
        let tx = udp_socket(ip).unwrap();
        tx.bind(&SockAddr::from(SocketAddr::new(ip, 0))).unwrap();
        let from = tx.local_addr().unwrap().as_socket().unwrap();
        for i in 0..20u8 {
            assert!(send_gather(&tx, &dest, &[&[i; 40]]).unwrap());
        }
        let counters = Arc::new(FaultCounters::default());
        let cfg = FaultConfig {
            duplicate: 1.0,
            ..FaultConfig::with_seed(1)
        };
        let mut batch = RxBatch::with_faults(Some(RxFaults::new(cfg, 1, counters.clone())));
        let mut got = Vec::new();
        for _ in 0..1000 {
            let n = batch.recv(rx.as_raw_fd()).unwrap();
            for i in 0..n {
                let (a, d) = batch.get(i).unwrap();
                assert_eq!(a, from);
                assert_eq!(d.len(), 40);
                got.push(d[0]);
            }
            if got.len() >= 40 {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        let want: Vec<u8> = (0..20u8).flat_map(|i| [i, i]).collect();
        assert_eq!(got, want);
        assert_eq!(counters.snapshot().duplicated, 20);
    }
}
