//! UDP sockets of the soft provider (RoCEv2 Annex A17.2: UDP destination port 4791).
//!
//! - Receive: `rx_queues + 1` sockets bound to `ip:4791` in one SO_REUSEPORT group,
//!   with a classic BPF program that steers each packet by the BTH destination QP:
//!   QP1 (CM MADs) to socket 0, any other QPN `q` to socket `1 + q % rx_queues`. Each
//!   poll group owns one socket and allocates QPNs in its residue class, so packets
//!   land on the thread that owns their QP with no cross-thread hand-off (RSS by QPN,
//!   as an RNIC does). Over IPv6 they accept UDP checksum 0 (`UDP_NO_CHECK6_RX`), as
//!   Linux rxe sends it. The poll groups' sockets have `UDP_GRO` on: a UDP GSO train
//!   (ours, over loopback) arrives as one datagram with its segment size, which
//!   [`RxBatch`] splits back into packets.
//! - Send: one unconnected UDP socket per QP bound to `ip:sport`, with the per-QP
//!   source port (0xC000..=0xFFFF) that gives ECMP its entropy; IPv4 with DF
//!   (IP_PMTUDISC_DO), which makes Linux write IP ID 0 (an unconnected socket with DF
//!   does not use the per-socket ID counter), the value the sender's ICRC covers.
//!   [`send_many`] sends plain datagrams and UDP GSO trains (`UDP_SEGMENT`) mixed in
//!   one `sendmmsg`; the kernel numbers a train's segments with IDs 0, 1, 2, ...
//!   (`inet_gso_segment`). The sockets never set `SO_NO_CHECK`/`UDP_NO_CHECK6_TX`,
//!   which would make the kernel refuse GSO (`udp_send_skb`: EINVAL).
use std::io;
use std::mem::{size_of, zeroed};
use std::net::{IpAddr, SocketAddr};
use std::os::fd::{AsRawFd, RawFd};

use socket2::{Domain, Protocol, SockAddr, Socket, Type};

use super::fault::{Delivery, RxFaults};
use crate::fdlimit::NofileError;
use crate::wire::frame::ECN_CE;
use crate::wire::ROCE_V2_UDP_DPORT;

const SO_ATTACH_REUSEPORT_CBPF: libc::c_int = 51;
/// `SOL_UDP` option (linux/udp.h; the libc crate defines it for Android only): accept
/// UDP/IPv6 datagrams with checksum 0, which Linux rxe sends on every RoCEv2 packet
/// over IPv6 (the ICRC protects the payload). Without it the kernel drops them as
/// checksum errors (`Udp6InCsumErrors`).
const UDP_NO_CHECK6_RX: libc::c_int = 102;
/// `SOL_UDP` option (linux/udp.h): the segment size of a UDP GSO send, per message as
/// a control message (a `u16`).
const UDP_SEGMENT: libc::c_int = 103;
/// `SOL_UDP` option (linux/udp.h): receive coalesced trains as one datagram, with
/// their segment size in a control message of this type (an `int`).
const UDP_GRO: libc::c_int = 104;
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
    /// The configured RoCE MTU does not fit in the interface MTU (with the IP, UDP, BTH,
    /// RETH and ICRC headers).
    #[error(
        "RoCE MTU {roce_mtu} on {ip}: its interface MTU {netdev_mtu} carries at most RoCE MTU \
         {max} (the packet adds IP, UDP, BTH, RETH and ICRC headers); choose a RoCE MTU of \
         {max} or less, or raise the interface MTU (ip link set dev IFACE mtu {need})",
        need = roce_mtu + 108
    )]
    RoceMtu {
        ip: IpAddr,
        roce_mtu: u32,
        netdev_mtu: u32,
        max: u32,
    },
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
/// the poll groups (with `UDP_GRO`); on IPv6 each accepts UDP checksum 0 (Linux rxe's
/// RoCEv2 over IPv6). Fails with [`SocketError::PortInUse`] when another socket holds the port.
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
        // The poll groups' sockets (not QP1's, which gets no trains) take UDP GSO trains
        // whole. Without it (a kernel before 5.0) the kernel splits trains itself.
        if !socks.is_empty() && setsockopt_int(s.as_raw_fd(), libc::SOL_UDP, UDP_GRO, 1).is_err() {
            tracing::debug!("UDP_GRO refused on {ip}: trains arrive segmented");
        }
        // The ECN field of each datagram, for the notification point (a CE mark becomes
        // the packet's BTH FECN). Without it no CE is ever seen, and CNPs never sent.
        let recv_ecn = if ip.is_ipv4() {
            setsockopt_int(s.as_raw_fd(), libc::IPPROTO_IP, libc::IP_RECVTOS, 1)
        } else {
            setsockopt_int(s.as_raw_fd(), libc::IPPROTO_IPV6, libc::IPV6_RECVTCLASS, 1)
        };
        if recv_ecn.is_err() {
            tracing::debug!("IP_RECVTOS/IPV6_RECVTCLASS refused on {ip}: CE marks go unseen");
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

/// Sets the IPv4 ToS (IPv6 traffic class) of send socket `s` on `ip` to
/// [`crate::soft::tos_byte`]`(traffic_class)`: the path's DSCP with our ECN bits.
///
/// # Errors
/// The operating system's error from `setsockopt`.
pub fn set_traffic_class(s: &Socket, ip: IpAddr, traffic_class: u8) -> io::Result<()> {
    let v = libc::c_int::from(crate::soft::tos_byte(traffic_class));
    if ip.is_ipv4() {
        setsockopt_int(s.as_raw_fd(), libc::IPPROTO_IP, libc::IP_TOS, v)
    } else {
        setsockopt_int(s.as_raw_fd(), libc::IPPROTO_IPV6, libc::IPV6_TCLASS, v)
    }
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
/// Bytes of a receive slot of a socket without `UDP_GRO` (QP1's): the largest RoCEv2
/// packet at MTU 4096 plus headers.
pub const RX_SLOT_BYTES: usize = 4096 + 128;
/// Bytes of a receive slot of a poll group's socket (`UDP_GRO`): a coalesced train is
/// up to 64 KiB (GRO stops there; our trains stop at [`GSO_MAX_BYTES`]). Only the
/// pages a datagram is written to are ever touched.
pub const RX_GRO_SLOT_BYTES: usize = 64 << 10;

/// One packet of a received batch ([`RxBatch::get`]).
#[derive(Clone, Copy, Debug)]
pub struct RxPacket<'a> {
    /// Source address and UDP port.
    pub from: SocketAddr,
    /// The UDP payload: BTH .. ICRC.
    pub data: &'a [u8],
    /// The IPv4 ID the sender's kernel wrote if the sender is one of ours: `i` for
    /// segment `i` of a coalesced train, 0 for a lone datagram (the receive ICRC
    /// check's prediction, [`crate::wire::icrc_rx`]).
    pub ipv4_id: u16,
    /// The IP header's ECN field was CE (congestion experienced), as the socket's
    /// `IP_TOS` / `IPV6_TCLASS` control message reported it.
    pub ce: bool,
}

/// Where one packet of the batch lies: `len` bytes at `start` of the buffer, segment
/// `index` of its datagram.
#[derive(Clone, Copy, Debug)]
struct RxSeg {
    start: u32,
    len: u32,
    slot: u16,
    index: u16,
    ce: bool,
}

/// Control-message space of a receive slot: a `UDP_GRO` int and an `IP_TOS` byte or
/// `IPV6_TCLASS` int (CMSG_SPACE of each 24 bytes), with room to spare.
type RxControl = [u64; 8];

/// A batch of receive slots for `recvmmsg`, optionally behind a fault layer
/// ([`RxFaults`]), which then decides what [`RxBatch::recv`] delivers. Datagrams that
/// UDP GRO coalesced are split back into their packets (the `UDP_GRO` control message
/// gives the segment size; all segments are that long except the last), so the fault
/// layer and the caller see packets, never trains. A datagram longer than its slot
/// (MSG_TRUNC) is dropped whole and counted ([`RxBatch::take_truncated`]).
pub struct RxBatch {
    slot_bytes: usize,
    bufs: Vec<u8>,
    addrs: Vec<libc::sockaddr_storage>,
    iovs: Vec<libc::iovec>,
    hdrs: Vec<libc::mmsghdr>,
    ctrl: Vec<RxControl>,
    /// Datagrams the last `recvmmsg` returned.
    count: usize,
    /// The packets of those datagrams, in order.
    segs: Vec<RxSeg>,
    /// Datagrams dropped as truncated since the last [`RxBatch::take_truncated`].
    truncated: u64,
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
    /// A batch of [`RX_BATCH`] slots of [`RX_SLOT_BYTES`] (a socket without `UDP_GRO`).
    pub fn new() -> Self {
        Self::with_slots(RX_SLOT_BYTES, None)
    }

    /// A batch of [`RX_BATCH`] slots of `slot_bytes` each whose datagrams pass through
    /// `faults` (none: delivered as they are). A poll group's socket, which has
    /// `UDP_GRO`, needs [`RX_GRO_SLOT_BYTES`].
    pub fn with_slots(slot_bytes: usize, faults: Option<RxFaults>) -> Self {
        RxBatch {
            slot_bytes,
            bufs: vec![0u8; RX_BATCH * slot_bytes],
            // SAFETY: sockaddr_storage, iovec and mmsghdr are plain C structs; zero is valid.
            addrs: vec![unsafe { zeroed() }; RX_BATCH],
            iovs: vec![unsafe { zeroed() }; RX_BATCH],
            hdrs: vec![unsafe { zeroed() }; RX_BATCH],
            ctrl: vec![[0; 8]; RX_BATCH],
            count: 0,
            // Room for every slot holding a train of the most segments GRO coalesces
            // (64, `UDP_GRO_CNT_MAX`): the list never grows on the data path.
            segs: Vec::with_capacity(RX_BATCH * 64),
            truncated: 0,
            stale: RX_BATCH,
            faults: faults.map(Box::new),
        }
    }

    /// Non-blocking `recvmmsg` into the batch; returns how many packets arrived
    /// (0 when none are waiting; a coalesced datagram counts its packets). With a
    /// fault layer: how many are delivered, which may differ either way (drops,
    /// duplicates, held packets released).
    pub fn recv(&mut self, fd: RawFd) -> io::Result<usize> {
        let n = self.recv_kernel(fd)?;
        self.split(n);
        let Self {
            bufs,
            addrs,
            segs,
            faults,
            ..
        } = self;
        let Some(f) = faults.as_deref_mut() else {
            return Ok(segs.len());
        };
        let mut rest: &mut [u8] = bufs;
        let mut consumed = 0usize;
        let packets = segs.iter().map(move |s| {
            let start = s.start as usize;
            let tail = std::mem::take(&mut rest);
            let (_, tail) = tail.split_at_mut(start - consumed);
            let (pkt, tail) = tail.split_at_mut(s.len as usize);
            rest = tail;
            consumed = start + s.len as usize;
            (sockaddr_to_std(&addrs[s.slot as usize]), s.index, pkt)
        });
        Ok(f.apply(packets))
    }

    /// Datagrams the last `recv` took from the kernel (a coalesced train counts once).
    pub fn datagrams(&self) -> usize {
        self.count
    }

    /// Whether the last `recv` filled every slot (more may be waiting).
    pub fn was_full(&self) -> bool {
        self.count == RX_BATCH
    }

    /// Datagrams dropped as longer than a slot (MSG_TRUNC) since the last call.
    pub fn take_truncated(&mut self) -> u64 {
        std::mem::take(&mut self.truncated)
    }

    /// Lists the packets of the `n` datagrams just received.
    fn split(&mut self, n: usize) {
        self.segs.clear();
        for j in 0..n {
            let h = &self.hdrs[j];
            if h.msg_hdr.msg_flags & libc::MSG_TRUNC != 0 {
                self.truncated += 1;
                continue;
            }
            let len = h.msg_len as usize;
            let (gso, ce) = if h.msg_hdr.msg_controllen == 0 {
                (0, false)
            } else {
                rx_control(&h.msg_hdr)
            };
            let start = j * self.slot_bytes;
            if gso == 0 || gso >= len {
                self.segs.push(RxSeg {
                    start: start as u32,
                    len: len as u32,
                    slot: j as u16,
                    index: 0,
                    ce,
                });
                continue;
            }
            for (index, off) in (0..len).step_by(gso).enumerate() {
                self.segs.push(RxSeg {
                    start: (start + off) as u32,
                    len: gso.min(len - off) as u32,
                    slot: j as u16,
                    index: index.min(u16::MAX as usize) as u16,
                    ce,
                });
            }
        }
    }

    fn recv_kernel(&mut self, fd: RawFd) -> io::Result<usize> {
        // Only the headers the last call filled need setting up again (an empty poll,
        // the common case when busy polling, touches none).
        for i in 0..self.stale {
            self.iovs[i] = libc::iovec {
                iov_base: self.bufs[i * self.slot_bytes..].as_mut_ptr() as *mut libc::c_void,
                iov_len: self.slot_bytes,
            };
            let h = &mut self.hdrs[i].msg_hdr;
            h.msg_name = &mut self.addrs[i] as *mut _ as *mut libc::c_void;
            h.msg_namelen = size_of::<libc::sockaddr_storage>() as u32;
            h.msg_iov = &mut self.iovs[i];
            h.msg_iovlen = 1;
            h.msg_control = self.ctrl[i].as_mut_ptr() as *mut libc::c_void;
            h.msg_controllen = size_of::<RxControl>();
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

    /// Packet `i` of the last `recv` (with a fault layer: its `i`-th delivery).
    pub fn get(&self, i: usize) -> Option<RxPacket<'_>> {
        let i = match self.faults.as_deref() {
            None => i,
            Some(f) => match f.delivery(i)? {
                Delivery::Slot(j) => j,
                Delivery::Released(k) => {
                    let (from, ipv4_id, data) = f.released(k)?;
                    // A held datagram's ECN field is not kept: delivered unmarked.
                    return Some(RxPacket {
                        from,
                        data,
                        ipv4_id,
                        ce: false,
                    });
                }
            },
        };
        let s = self.segs.get(i)?;
        let from = sockaddr_to_std(&self.addrs[s.slot as usize])?;
        let start = s.start as usize;
        Some(RxPacket {
            from,
            data: &self.bufs[start..start + s.len as usize],
            ipv4_id: s.index,
            ce: s.ce,
        })
    }
}

/// What the control messages of `h` say: the `UDP_GRO` segment size (0: none) and
/// whether the `IP_TOS` / `IPV6_TCLASS` ECN field is CE. GRO coalesces only datagrams
/// of one ToS, so the mark holds for every segment.
fn rx_control(h: &libc::msghdr) -> (usize, bool) {
    let (mut gso, mut ce) = (0, false);
    // SAFETY: the kernel wrote `msg_controllen` bytes of control messages at
    // `msg_control`, which points into the batch's own buffer.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(h);
        while !c.is_null() {
            let data = libc::CMSG_DATA(c);
            match ((*c).cmsg_level, (*c).cmsg_type) {
                (libc::SOL_UDP, UDP_GRO) => {
                    let v = std::ptr::read_unaligned(data as *const libc::c_int);
                    gso = v.max(0) as usize;
                }
                (libc::IPPROTO_IP, libc::IP_TOS) => ce = *data & ECN_CE == ECN_CE,
                (libc::IPPROTO_IPV6, libc::IPV6_TCLASS) => {
                    let v = std::ptr::read_unaligned(data as *const libc::c_int);
                    ce = v as u8 & ECN_CE == ECN_CE;
                }
                _ => {}
            }
            c = libc::CMSG_NXTHDR(h, c);
        }
    }
    (gso, ce)
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

/// Most iovecs of one [`send_many`] call, all messages together.
const MAX_IOVS: usize = 256;
/// Most datagrams of one [`send_many`] call.
const MAX_MSGS: usize = 32;
/// Most UDP payload bytes of one UDP GSO train: the IPv4 total length (65535) less the
/// IPv4 and UDP headers (`__ip_append_data` with GSO: `IP_MAX_MTU`); IPv6 allows a little
/// more.
pub const GSO_MAX_BYTES: usize = 65535 - 20 - 8;

/// One datagram of [`send_many`]: gathered from `parts`; with `gso_size` > 0 a UDP GSO
/// train (`UDP_SEGMENT`) that the kernel cuts into segments of `gso_size` bytes (the
/// last may be shorter), numbered with IPv4 IDs 0, 1, 2, ...
#[derive(Clone, Copy, Debug)]
pub struct TxMsg<'a> {
    /// The datagram's bytes, in order.
    pub parts: &'a [&'a [u8]],
    /// Segment size of a train; 0 for a plain datagram.
    pub gso_size: u16,
}

/// Whether `e` is the kernel refusing a UDP GSO send (`udp_send_skb`: EINVAL for a
/// segment too big for the path or a socket without checksums, EIO for a device
/// without checksum offload), as opposed to a full buffer or a dead route.
pub fn is_gso_refusal(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::EIO) | Some(libc::EINVAL))
}

/// Sends up to 32 datagrams to `dest` with one `sendmmsg`, plain ones and UDP GSO
/// trains mixed (a `UDP_SEGMENT` control message per train), non-blocking. Returns how
/// many datagrams the kernel took: fewer than given when the socket buffer filled
/// (EAGAIN/ENOBUFS on the first: 0) or a later one failed, which the next call
/// reports. Errors other than a full buffer (e.g. [`is_gso_refusal`]) are returned when
/// the first datagram fails.
pub fn send_many(sock: &Socket, dest: &SockAddr, msgs: &[TxMsg<'_>]) -> io::Result<usize> {
    let mut iovs = [libc::iovec {
        iov_base: std::ptr::null_mut(),
        iov_len: 0,
    }; MAX_IOVS];
    // SAFETY: mmsghdr zeroed is valid.
    let mut hdrs: [libc::mmsghdr; MAX_MSGS] = unsafe { zeroed() };
    // CMSG_SPACE(sizeof(u16)) = 24 bytes per message, 8-byte aligned.
    let mut ctrl = [[0u64; 3]; MAX_MSGS];
    let mut used = 0;
    let mut n = 0;
    for (i, m) in msgs.iter().take(MAX_MSGS).enumerate() {
        if used + m.parts.len() > MAX_IOVS {
            break;
        }
        for (iov, p) in iovs[used..].iter_mut().zip(m.parts) {
            *iov = libc::iovec {
                iov_base: p.as_ptr() as *mut libc::c_void,
                iov_len: p.len(),
            };
        }
        let h = &mut hdrs[i].msg_hdr;
        h.msg_name = dest.as_ptr() as *mut libc::c_void;
        h.msg_namelen = dest.len();
        h.msg_iov = iovs[used..].as_mut_ptr();
        h.msg_iovlen = m.parts.len();
        used += m.parts.len();
        if m.gso_size > 0 {
            h.msg_control = ctrl[i].as_mut_ptr() as *mut libc::c_void;
            // SAFETY: CMSG_SPACE/CMSG_LEN are pure arithmetic.
            h.msg_controllen = unsafe { libc::CMSG_SPACE(size_of::<u16>() as u32) } as usize;
            // SAFETY: msg_control points at 24 zeroed, aligned bytes of `ctrl[i]`,
            // room for one cmsghdr (16) and its u16.
            unsafe {
                let c = libc::CMSG_FIRSTHDR(h);
                (*c).cmsg_level = libc::SOL_UDP;
                (*c).cmsg_type = UDP_SEGMENT;
                (*c).cmsg_len = libc::CMSG_LEN(size_of::<u16>() as u32) as usize;
                std::ptr::write_unaligned(libc::CMSG_DATA(c) as *mut u16, m.gso_size);
            }
        }
        n = i + 1;
    }
    if n == 0 {
        return Ok(0);
    }
    // SAFETY: every header points at iovecs, control buffers and data alive for the call.
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
    #[test]
    fn a_paths_traffic_class_sets_the_dscp_and_keeps_ect0() {
        let ip: IpAddr = "127.0.0.136".parse().unwrap();
        let (sock, _) = bind_tx_socket(ip, 0xC000).unwrap();
        let tos = |s: &Socket| {
            let mut v: libc::c_int = 0;
            let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
            // SAFETY: getsockopt into a c_int of the given length.
            let r = unsafe {
                libc::getsockopt(
                    s.as_raw_fd(),
                    libc::IPPROTO_IP,
                    libc::IP_TOS,
                    &mut v as *mut _ as *mut libc::c_void,
                    &mut len,
                )
            };
            assert_eq!(r, 0);
            v
        };
        assert_eq!(tos(&sock), 0x02, "ECT(0) by default");
        // DSCP 24 (0x60) with the ECN bits of the path ignored (CE asked for: 0x63).
        set_traffic_class(&sock, ip, 0x63).unwrap();
        assert_eq!(tos(&sock), 0x62);
        assert_eq!(crate::soft::tos_byte(0xB8), 0xBA, "DSCP 46 (EF)");
    }

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
    /// The receive sockets report each datagram's ECN field: a datagram sent with CE
    /// in its ToS / traffic class arrives as `ce`, one with ECT(0) does not (IPv4 and
    /// IPv6, through the sockets `bind_rx_group` makes).
    #[test]
    fn the_receive_group_reports_ce_marks() {
        for (ip, tos) in [
            ("127.0.0.138", (libc::IPPROTO_IP, libc::IP_TOS)),
            ("::1", (libc::IPPROTO_IPV6, libc::IPV6_TCLASS)),
        ] {
            let ip: IpAddr = ip.parse().unwrap();
            let socks = bind_rx_group(ip, 1).unwrap();
            let dest = SockAddr::from(SocketAddr::new(ip, ROCE_V2_UDP_DPORT));
            let tx = udp_socket(ip).unwrap();
            tx.bind(&SockAddr::from(SocketAddr::new(ip, 0))).unwrap();
            for (mark, ecn) in [(1u8, 0x03), (2u8, 0x02)] {
                setsockopt_int(tx.as_raw_fd(), tos.0, tos.1, ecn).unwrap();
                assert!(send_gather(&tx, &dest, &[&[mark; 40]]).unwrap());
            }
            let mut seen = Vec::new();
            let mut batch = RxBatch::new();
            for _ in 0..1000 {
                for s in &socks {
                    let n = batch.recv(s.as_raw_fd()).unwrap();
                    for i in 0..n {
                        let p = batch.get(i).unwrap();
                        seen.push((p.data[0], p.ce));
                    }
                }
                if seen.len() >= 2 {
                    break;
                }
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
            seen.sort_unstable();
            assert_eq!(seen, [(1, true), (2, false)], "{ip}");
        }
    }

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
        let mut batch =
            RxBatch::with_slots(RX_SLOT_BYTES, Some(RxFaults::new(cfg, 1, counters.clone())));
        let mut got = Vec::new();
        for _ in 0..1000 {
            let n = batch.recv(rx.as_raw_fd()).unwrap();
            for i in 0..n {
                let p = batch.get(i).unwrap();
                let (a, d) = (p.from, p.data);
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

/// UDP GSO trains over real loopback sockets: how the kernel delivers them to a
/// `UDP_GRO` socket and to a plain one, and what [`RxBatch`] makes of them.
#[cfg(test)]
mod gso_tests {
    use super::*;
    use crate::soft::fault::{FaultConfig, FaultCounters};
    use crate::wire::{IcrcCheck, IcrcChecker, IcrcIpInfo};
    use std::sync::Arc;

    fn bound(ip: IpAddr) -> Socket {
        let s = udp_socket(ip).unwrap();
        s.bind(&SockAddr::from(SocketAddr::new(ip, 0))).unwrap();
        s
    }

    fn gro(s: &Socket) {
        setsockopt_int(s.as_raw_fd(), libc::SOL_UDP, UDP_GRO, 1).unwrap();
    }

    struct Link {
        tx: Socket,
        rx: Socket,
        dest: SockAddr,
        info: IcrcIpInfo,
    }

    fn link(last_octet: u8, rx_gro: bool) -> Link {
        let ip: IpAddr = format!("127.0.0.{last_octet}").parse().unwrap();
        let rx = bound(ip);
        if rx_gro {
            gro(&rx);
        }
        let tx = bound(ip);
        setsockopt_int(
            tx.as_raw_fd(),
            libc::IPPROTO_IP,
            libc::IP_MTU_DISCOVER,
            libc::IP_PMTUDISC_DO,
        )
        .unwrap();
        let dest = rx.local_addr().unwrap();
        let info = IcrcIpInfo {
            src: ip,
            dst: ip,
            ipv4_id: 0,
            udp_sport: tx.local_addr().unwrap().as_socket().unwrap().port(),
            udp_dport: dest.as_socket().unwrap().port(),
        };
        Link { tx, rx, dest, info }
    }

    /// Packets of the given lengths (ICRC included), packet `i` filled with `i`, each
    /// with the ICRC of IPv4 ID `i` (its place in the train), computed as the sender
    /// does: the ICRC of ID 0 plus the ID's delta.
    fn train(info: &IcrcIpInfo, lens: &[usize], ids: &mut IcrcChecker) -> Vec<Vec<u8>> {
        lens.iter()
            .enumerate()
            .map(|(i, &len)| {
                let mut p = vec![i as u8; len - 4];
                let c = crate::wire::icrc(info, &p) ^ ids.ipv4_id_delta(len, i as u16);
                p.extend_from_slice(&c.to_le_bytes());
                p
            })
            .collect()
    }

    fn send_train(l: &Link, pkts: &[Vec<u8>]) {
        let parts: Vec<&[u8]> = pkts.iter().map(|p| p.as_slice()).collect();
        let msg = TxMsg {
            parts: &parts,
            gso_size: pkts[0].len() as u16,
        };
        assert_eq!(send_many(&l.tx, &l.dest, &[msg]).unwrap(), 1);
    }

    /// Receives until `want` packets (or 2 s) and returns them with their predicted IDs.
    fn receive(batch: &mut RxBatch, rx: &Socket, want: usize) -> (Vec<(u16, Vec<u8>)>, usize) {
        let mut got = Vec::new();
        let mut datagrams = 0;
        for _ in 0..2000 {
            let n = batch.recv(rx.as_raw_fd()).unwrap();
            datagrams += batch.datagrams();
            for i in 0..n {
                let p = batch.get(i).unwrap();
                got.push((p.ipv4_id, p.data.to_vec()));
            }
            if got.len() >= want {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        (got, datagrams)
    }

    /// A 4 KiB read's WRITE and its shorter response SEND as one train: a GRO socket
    /// gets one datagram, which the batch splits back into the exact packets, and each
    /// passes the full ICRC check with its predicted ID (its index).
    #[test]
    fn a_train_to_a_gro_socket_arrives_whole_and_splits_into_its_packets() {
        let l = link(131, true);
        let mut ids = IcrcChecker::new();
        let pkts = train(&l.info, &[4128, 4128, 4128, 36], &mut ids);
        send_train(&l, &pkts);
        let mut batch = RxBatch::with_slots(RX_GRO_SLOT_BYTES, None);
        let (got, datagrams) = receive(&mut batch, &l.rx, pkts.len());
        assert_eq!(datagrams, 1, "one coalesced datagram");
        assert_eq!(got.len(), pkts.len());
        let mut check = IcrcChecker::new();
        for (i, ((id, data), want)) in got.iter().zip(&pkts).enumerate() {
            assert_eq!(*id as usize, i);
            assert_eq!(data, want, "packet {i}");
            let info = IcrcIpInfo {
                ipv4_id: *id,
                ..l.info
            };
            assert_eq!(check.check(&info, data), IcrcCheck::Exact, "packet {i}");
        }
    }

    /// To a socket without UDP_GRO the kernel splits the train into datagrams and
    /// numbers their IPv4 IDs 0, 1, 2, ... (`inet_gso_segment`): solving each
    /// packet's ID from its ICRC gives exactly its index, so the per-segment ICRCs are
    /// what a peer that checks the real ID (Linux rxe) needs.
    #[test]
    fn a_train_to_a_plain_socket_arrives_as_packets_numbered_from_zero() {
        let l = link(132, false);
        let mut ids = IcrcChecker::new();
        let lens: Vec<usize> = (0..15).map(|_| 4112).chain([1000]).collect();
        let pkts = train(&l.info, &lens, &mut ids);
        send_train(&l, &pkts);
        let mut batch = RxBatch::new();
        let (got, datagrams) = receive(&mut batch, &l.rx, pkts.len());
        assert_eq!(datagrams, pkts.len(), "one datagram per packet");
        let mut check = IcrcChecker::new();
        for (i, ((id, data), want)) in got.iter().zip(&pkts).enumerate() {
            assert_eq!(*id, 0, "lone datagrams are predicted ID 0");
            assert_eq!(data, want);
            let r = check.check(&l.info, data);
            let want = if i == 0 {
                IcrcCheck::Exact
            } else {
                IcrcCheck::SolvedIpv4Id(i as u16)
            };
            assert_eq!(r, want, "packet {i}");
        }
    }

    /// A coalesced datagram longer than the slot is counted and dropped whole, never
    /// delivered cut short.
    #[test]
    fn a_train_longer_than_the_slot_is_counted_as_truncated() {
        let l = link(133, true);
        let mut ids = IcrcChecker::new();
        let pkts = train(&l.info, &[4128, 4128], &mut ids);
        send_train(&l, &pkts);
        // A lone packet after it still arrives.
        send_train(&l, &pkts[..1]);
        let mut batch = RxBatch::with_slots(RX_SLOT_BYTES, None);
        let (got, datagrams) = receive(&mut batch, &l.rx, 1);
        assert_eq!(datagrams, 2);
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].1, pkts[0]);
        assert_eq!(batch.take_truncated(), 1);
        assert_eq!(batch.take_truncated(), 0);
    }

    /// The fault layer decides per packet, not per coalesced datagram: with half the
    /// packets dropped, some of one train arrive and some do not, each delivered one
    /// keeping its predicted ID.
    #[test]
    fn the_fault_layer_drops_single_packets_of_a_train() {
        let l = link(134, true);
        let mut ids = IcrcChecker::new();
        let pkts = train(&l.info, &[1024; 40], &mut ids);
        send_train(&l, &pkts);
        let counters = Arc::new(FaultCounters::default());
        let cfg = FaultConfig {
            loss: 0.5,
            ..FaultConfig::with_seed(7)
        };
        let mut batch = RxBatch::with_slots(
            RX_GRO_SLOT_BYTES,
            Some(RxFaults::new(cfg, 1, counters.clone())),
        );
        let mut got = Vec::new();
        for _ in 0..2000 {
            let n = batch.recv(l.rx.as_raw_fd()).unwrap();
            for i in 0..n {
                let p = batch.get(i).unwrap();
                got.push((p.ipv4_id, p.data.to_vec()));
            }
            if batch.datagrams() > 0 {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        let dropped = counters.snapshot().dropped as usize;
        assert_eq!(got.len() + dropped, pkts.len());
        assert!(dropped > 5 && got.len() > 5, "{dropped} dropped");
        for (id, data) in &got {
            assert_eq!(data, &pkts[*id as usize]);
        }
    }
}
