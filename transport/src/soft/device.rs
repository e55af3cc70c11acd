//! The soft provider's device: one local IP address, its RoCEv2 sockets, its memory
//! keys and QP numbers. Shared (`Arc`) by its poll groups ([`Context`]) and its CM agent.
use std::net::IpAddr;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;
use socket2::Socket;

use super::cm_agent::{CmAgent, CmAgentError};
use super::context::Context;
use super::fault::{group_seed, FaultConfig, FaultCounters, RxFaults};
use super::info_socket::{InfoHeader, InfoServer};
use super::qp_registry::QpRegistry;
use super::rx_buffer::{granted_rx_buffer, rc_config_for, report_capped};
use super::socket::{bind_rx_group, SocketError};
use super::xdp::neigh::NeighError;
use super::xdp::{PacketPath, XdpDevice, XdpError};
use crate::rc::{KeyTable, MrKeys, MrMemory, RcConfig};
use crate::verbs::{AccessFlags, DeviceCaps, MemoryRegion, Mtu, Pd, VerbsError, MAX_SGE};

/// How to open a soft device.
#[derive(Clone, Debug)]
pub struct DeviceConfig {
    /// The local address: RoCEv2 packets are received on `ip:4791` and sent from it.
    pub ip: IpAddr,
    /// Number of poll groups (receive queues); each gets a share of the QPNs.
    pub rx_queues: u32,
    /// Interface MTU override; by default read from the interface that holds `ip`.
    pub netdev_mtu: Option<u32>,
    /// The RoCE MTU the device uses (its active MTU, the most it offers a peer; each
    /// connection runs at the smaller of the two ends', as RoCE negotiates it):
    /// `None` (the default) derives it from the interface MTU as rxe does
    /// ([`Mtu::from_netdev_mtu`]); a larger one than the interface carries is refused
    /// when the device opens ([`SocketError::RoceMtu`]).
    pub roce_mtu: Option<Mtu>,
    /// Fault injection on the poll groups' receive path (see [`super::fault`]); `None`
    /// (the default, unless `NVMF_SOFT_CE_MARK` asks for CE marking:
    /// [`FaultConfig::from_env`]) for none at all. Counted in [`DeviceCountersSnapshot`]'s
    /// `injected_*` fields.
    pub faults: Option<FaultConfig>,
    /// Where QP numbering starts: `None` (the default) picks a random start per device
    /// instance, so a restarted process does not reuse the QPNs of its predecessor,
    /// whose connections a peer may still hold (IBTA Vol 1 §12.9.8.4: a REQ from a QP
    /// with a live connection is rejected as stale). `Some(qpn)`: poll group `i` starts
    /// at the first QPN at or after `qpn` in its residue class (tests that reproduce a
    /// restart with the same QPNs). See [`QpnAllocator`].
    pub first_qpn: Option<u32>,
    /// Toward which peers the QPs send UDP GSO trains (see [`UdpGso`]); default
    /// [`UdpGso::LocalPeers`], or what `NVMF_SOFT_UDP_GSO` says ([`UdpGso::from_env`]).
    pub udp_gso: UdpGso,
    /// How RoCEv2 packets travel: UDP sockets (the default) or AF_XDP on an interface
    /// ([`PacketPath::AfXdp`], root only). QP1 (the CM) uses a UDP socket either way.
    pub packet_path: PacketPath,
}

/// Toward which peers a device's QPs pack consecutive packets into UDP GSO trains
/// (one `UDP_SEGMENT` datagram that the kernel cuts into packets with IPv4 IDs 0, 1,
/// 2, ..., each with the ICRC of its ID). The receiver must check each packet with its
/// real ID: a peer of this project does (it predicts `i` for segment `i`, or solves
/// for it), and so does Linux rxe (it checks the ICRC against the received header).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum UdpGso {
    /// Never: one datagram per packet.
    Off,
    /// Toward loopback addresses and this device's own address (the kernel hands the
    /// train to the peer's `UDP_GRO` socket whole, or splits it for another socket).
    #[default]
    LocalPeers,
    /// Toward every peer (over a NIC the kernel or the NIC splits trains).
    All,
}

/// The environment variable [`UdpGso::from_env`] reads.
pub const UDP_GSO_ENV: &str = "NVMF_SOFT_UDP_GSO";

impl UdpGso {
    /// The setting named by `NVMF_SOFT_UDP_GSO` (`off`, `local` or `all`), for every
    /// program built on the soft provider; unset: [`UdpGso::LocalPeers`]. Another value
    /// is reported once (naming the three accepted) and the default used.
    pub fn from_env() -> Self {
        let Ok(v) = std::env::var(UDP_GSO_ENV) else {
            return UdpGso::default();
        };
        match v.to_ascii_lowercase().as_str() {
            "off" => UdpGso::Off,
            "local" => UdpGso::LocalPeers,
            "all" => UdpGso::All,
            _ => {
                static ONCE: std::sync::Once = std::sync::Once::new();
                ONCE.call_once(|| {
                    tracing::warn!(
                        "{UDP_GSO_ENV}={v:?} is not one of off, local, all: using local \
                         (UDP GSO trains toward loopback peers only)"
                    )
                });
                UdpGso::default()
            }
        }
    }

    /// Whether a QP of a device on `local` sends trains toward `peer`.
    pub fn allows(self, local: IpAddr, peer: IpAddr) -> bool {
        match self {
            UdpGso::Off => false,
            UdpGso::LocalPeers => peer.is_loopback() || peer == local,
            UdpGso::All => true,
        }
    }
}

impl DeviceConfig {
    /// One poll group on `ip`, MTU from the interface.
    pub fn new(ip: IpAddr) -> Self {
        DeviceConfig {
            ip,
            rx_queues: 1,
            netdev_mtu: None,
            roce_mtu: None,
            faults: FaultConfig::from_env(),
            first_qpn: None,
            udp_gso: UdpGso::from_env(),
            packet_path: PacketPath::Udp,
        }
    }
}

/// Device-wide counters (rxe's hw_counters names where one exists).
#[derive(Debug, Default)]
pub struct DeviceCounters {
    /// RoCEv2 packets sent.
    pub sent_pkts: AtomicU64,
    /// RoCEv2 packets received with a good ICRC.
    pub rcvd_pkts: AtomicU64,
    /// Packets dropped for a bad ICRC.
    pub icrc_errors: AtomicU64,
    /// IPv4 packets accepted with an IPv4 ID other than 0, which the ICRC check had to
    /// solve for (the sender is Linux rxe or another stack that numbers its packets;
    /// see [`crate::wire::icrc_rx`]).
    pub icrc_ipv4_id_solved: AtomicU64,
    /// Packets dropped as malformed (bad length, unknown opcode, bad version).
    pub malformed_pkts: AtomicU64,
    /// Packets for a QP that does not exist here.
    pub unknown_qp_pkts: AtomicU64,
    /// Packets dropped at send because the socket buffer was full (recovered by RC).
    pub tx_dropped_pkts: AtomicU64,
    /// Datagrams handed to the kernel: a UDP GSO train counts once, however many
    /// packets it carries (`sent_pkts` counts those).
    pub sent_datagrams: AtomicU64,
    /// Datagrams received from the kernel: a train that UDP GRO coalesced counts once.
    pub rcvd_datagrams: AtomicU64,
    /// Received datagrams dropped because they were longer than a receive slot
    /// (MSG_TRUNC); their packets are recovered by RC retransmission.
    pub rx_truncated_datagrams: AtomicU64,
    /// Payload bytes sent straight from registered memory (gathered, zero copy).
    pub tx_payload_bytes_zero_copy: AtomicU64,
    /// Payload bytes copied into a staging buffer before sending.
    pub tx_payload_bytes_copied: AtomicU64,
    /// Faults the receive fault layer injected (all zero without
    /// [`DeviceConfig::faults`]); shared with the poll groups' layers.
    pub injected: Arc<FaultCounters>,
}

/// A snapshot of [`DeviceCounters`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DeviceCountersSnapshot {
    pub sent_pkts: u64,
    pub rcvd_pkts: u64,
    pub icrc_errors: u64,
    pub icrc_ipv4_id_solved: u64,
    pub malformed_pkts: u64,
    pub unknown_qp_pkts: u64,
    pub tx_dropped_pkts: u64,
    pub sent_datagrams: u64,
    pub rcvd_datagrams: u64,
    pub rx_truncated_datagrams: u64,
    pub tx_payload_bytes_zero_copy: u64,
    pub tx_payload_bytes_copied: u64,
    /// Received datagrams the fault layer dropped.
    pub injected_drops: u64,
    /// Received datagrams the fault layer delivered twice.
    pub injected_dups: u64,
    /// Received datagrams the fault layer held back and delivered late.
    pub injected_reorders: u64,
    /// Received datagrams the fault layer flipped a bit of (then dropped and counted
    /// in `icrc_errors` by the ICRC check).
    pub injected_corruptions: u64,
}

impl DeviceCounters {
    /// Reads every counter.
    pub fn snapshot(&self) -> DeviceCountersSnapshot {
        let r = |c: &AtomicU64| c.load(Ordering::Relaxed);
        DeviceCountersSnapshot {
            sent_pkts: r(&self.sent_pkts),
            rcvd_pkts: r(&self.rcvd_pkts),
            icrc_errors: r(&self.icrc_errors),
            icrc_ipv4_id_solved: r(&self.icrc_ipv4_id_solved),
            malformed_pkts: r(&self.malformed_pkts),
            unknown_qp_pkts: r(&self.unknown_qp_pkts),
            tx_dropped_pkts: r(&self.tx_dropped_pkts),
            sent_datagrams: r(&self.sent_datagrams),
            rcvd_datagrams: r(&self.rcvd_datagrams),
            rx_truncated_datagrams: r(&self.rx_truncated_datagrams),
            tx_payload_bytes_zero_copy: r(&self.tx_payload_bytes_zero_copy),
            tx_payload_bytes_copied: r(&self.tx_payload_bytes_copied),
            injected_drops: r(&self.injected.dropped),
            injected_dups: r(&self.injected.duplicated),
            injected_reorders: r(&self.injected.reordered),
            injected_corruptions: r(&self.injected.corrupted),
        }
    }
}

/// A registered memory region (`ibv_mr`) with memory the device allocated (page
/// aligned, zeroed). Its address range `[addr(), addr() + len())` is the iova that
/// SGEs and RETHs use; `lkey`/`rkey` name it.
pub struct Mr {
    pub keys: MrKeys,
    pub pd: Pd,
    mem: Arc<MrMemory>,
    dev: Arc<SoftDevice>,
}

impl std::fmt::Debug for Mr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mr")
            .field("keys", &self.keys)
            .field("pd", &self.pd)
            .finish()
    }
}

impl Mr {
    /// Local key.
    pub fn lkey(&self) -> u32 {
        self.keys.lkey
    }
    /// Remote key (meaningful only with a remote access flag).
    pub fn rkey(&self) -> u32 {
        self.keys.rkey
    }
    /// First byte's iova (= its virtual address in this process).
    pub fn addr(&self) -> u64 {
        self.keys.addr
    }
    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.keys.length as usize
    }
    /// Whether the region is empty.
    pub fn is_empty(&self) -> bool {
        self.keys.length == 0
    }
    /// Pointer to the first byte.
    pub fn as_ptr(&self) -> *mut u8 {
        self.mem.as_ptr()
    }
    /// The backing memory (to register it elsewhere, e.g. as io_uring fixed buffers).
    pub fn memory(&self) -> &Arc<MrMemory> {
        &self.mem
    }
    /// Copies `data` into the region at `offset` ([`MemoryRegion::write`]). Panics if
    /// out of range (a caller bug).
    pub fn write(&self, offset: usize, data: &[u8]) {
        MemoryRegion::write(self, offset, data)
    }
    /// Copies bytes at `offset` into `out` ([`MemoryRegion::read`]). Panics if out of
    /// range (a caller bug).
    pub fn read(&self, offset: usize, out: &mut [u8]) {
        MemoryRegion::read(self, offset, out)
    }
}

impl Drop for Mr {
    fn drop(&mut self) {
        let _ = self.dev.keys.dereg_mr(self.keys.lkey);
    }
}

/// A software RoCEv2 device bound to one IP address.
pub struct SoftDevice {
    ip: IpAddr,
    rx_queues: u32,
    path_mtu: Mtu,
    netdev_mtu: u32,
    keys: KeyTable,
    rx_sockets: Mutex<Vec<Option<Socket>>>,
    qpns: QpnAllocator,
    counters: Arc<DeviceCounters>,
    faults: Option<FaultConfig>,
    /// Receive buffer the kernel granted each poll group's socket (getsockopt SO_RCVBUF).
    rx_buffer_bytes: usize,
    /// The RC tuning of new QPs, windows sized from `rx_buffer_bytes`.
    rc_config: RcConfig,
    /// The device's CM agent once started ([`SoftDevice::cm_agent`]); it holds no
    /// reference to the device, so this one keeps no cycle.
    cm_agent: Mutex<Option<CmAgent>>,
    /// Toward which peers new paths send UDP GSO trains.
    udp_gso: UdpGso,
    /// The kernel refused a train on some socket: new paths send plain datagrams.
    gso_refused: std::sync::atomic::AtomicBool,
    /// The AF_XDP path's program and interface ([`DeviceConfig::packet_path`]).
    xdp: Option<XdpDevice>,
    /// The QPs of every poll group, for `rdma-info` ([`super::qp_registry`]).
    qp_registry: Arc<QpRegistry>,
    /// The info socket answering `rdma-info` ([`super::info_socket`]); `None` when it
    /// could not be created.
    _info: Option<InfoServer>,
}

impl std::fmt::Debug for SoftDevice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SoftDevice")
            .field("ip", &self.ip)
            .field("path_mtu", &self.path_mtu)
            .finish()
    }
}

/// Smallest QP number handed out (rxe starts at 0x11; 0 and 1 are the SMI and GSI QPs).
pub const FIRST_QPN: u32 = 0x11;
/// Largest QP number (QPNs are 24 bits on the wire, BTH DestQP).
pub const MAX_QPN: u32 = 0x00FF_FFFF;

/// Most work requests of one queue (send queue, receive queue, SRQ) and entries of one
/// CQ. The soft provider's queues are bounded by memory only; this keeps a request
/// meaningful (each send WR takes at least one PSN, and an RC requester keeps its
/// outstanding PSNs within half the 24-bit PSN space, IBTA Vol 1 §9.7.1) and a CQ's
/// preallocation sane.
pub const SOFT_MAX_QUEUE_WR: u32 = 1 << 22;

/// The soft provider's limits, as [`crate::verbs::Device::caps`] reports them:
/// - `max_sge` / `max_sge_rd` / `max_srq_sge`: [`MAX_SGE`] (the model's inline SGE list);
/// - `max_qp_wr`, `max_srq_wr`, `max_cqe`: [`SOFT_MAX_QUEUE_WR`];
/// - `max_qp_rd_atom`, `max_qp_init_rd_atom`: 255, what the 8-bit CM fields and
///   `QpAttr` carry (the RC core keeps a READ's state per outstanding READ, any depth);
/// - `max_inline_data`: 0. `SendFlags::INLINE` is accepted but the payload is gathered
///   from registered memory like any other (lkeys checked, buffer in use until the
///   completion), so no inline bytes are granted;
/// - `max_mr`, `max_mw`: the key table's 2^24 - 1 slots, shared by MRs and windows;
/// - `max_qp`: the QPNs of `FIRST_QPN..=MAX_QPN`; `max_mr_size` and `max_pd`: memory
///   and a 32-bit counter;
/// - `local_ca_ack_delay`: the CM's Target ACK Delay ([`crate::cm::CM_TARGET_ACK_DELAY`]).
pub const SOFT_CAPS: DeviceCaps = DeviceCaps {
    max_qp_wr: SOFT_MAX_QUEUE_WR,
    max_sge: MAX_SGE as u32,
    max_sge_rd: MAX_SGE as u32,
    max_srq_wr: SOFT_MAX_QUEUE_WR,
    max_srq_sge: MAX_SGE as u32,
    max_cqe: SOFT_MAX_QUEUE_WR,
    max_qp: MAX_QPN - FIRST_QPN + 1,
    max_qp_rd_atom: u8::MAX as u32,
    max_qp_init_rd_atom: u8::MAX as u32,
    max_inline_data: 0,
    max_mr_size: u64::MAX,
    max_mr: 0x00FF_FFFF,
    max_mw: 0x00FF_FFFF,
    max_pd: u32::MAX,
    local_ca_ack_delay: crate::cm::CM_TARGET_ACK_DELAY,
    phys_port_cnt: 1,
};

/// QP numbers of one device, in the residue classes the receive steering expects:
/// poll group `i` of `n` gets only QPNs `q` with `q % n == i` (see
/// [`super::socket::bind_rx_group`]), all in `FIRST_QPN..=MAX_QPN`, counting up from
/// its start and wrapping within its class (never to 0, 1 or past 24 bits).
#[derive(Debug)]
pub struct QpnAllocator {
    groups: u32,
    /// Per poll group: the index of the next QPN within the group's class.
    next: Vec<AtomicU32>,
}

impl QpnAllocator {
    /// An allocator for `groups` poll groups (at least 1). `first`: `None` for a random
    /// start in each class; `Some(qpn)` to start each group at the first QPN of its
    /// class at or after `qpn` (clamped into `FIRST_QPN..=MAX_QPN`).
    pub fn new(groups: u32, first: Option<u32>) -> Self {
        let groups = groups.max(1);
        let next = (0..groups)
            .map(|g| {
                let count = Self::class_len(groups, g);
                let index = match first {
                    None => rand::random::<u32>() % count,
                    Some(q) => {
                        let q = q.clamp(FIRST_QPN, MAX_QPN);
                        let base = Self::class_base(groups, g);
                        q.saturating_sub(base).div_ceil(groups) % count
                    }
                };
                AtomicU32::new(index)
            })
            .collect();
        QpnAllocator { groups, next }
    }

    /// The smallest QPN >= [`FIRST_QPN`] that steers to group `g`.
    fn class_base(groups: u32, g: u32) -> u32 {
        let r = FIRST_QPN % groups;
        let base = FIRST_QPN - r + g;
        if base < FIRST_QPN {
            base + groups
        } else {
            base
        }
    }

    /// How many QPNs of `FIRST_QPN..=MAX_QPN` steer to group `g`.
    fn class_len(groups: u32, g: u32) -> u32 {
        (MAX_QPN - Self::class_base(groups, g)) / groups + 1
    }

    /// The next QPN of poll group `g` (`g < groups`; a larger `g` is taken modulo).
    pub fn alloc(&self, g: u32) -> u32 {
        let g = g % self.groups;
        let count = Self::class_len(self.groups, g);
        let i = self.next[g as usize]
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |i| {
                Some((i + 1) % count)
            })
            .unwrap_or(0);
        Self::class_base(self.groups, g) + i * self.groups
    }
}

impl SoftDevice {
    /// Opens the device: binds `ip:4791` (see [`super::socket::bind_rx_group`]).
    /// Errors name the address and port (e.g. already in use), or the fault
    /// configuration's range error ([`SocketError::Faults`]).
    pub fn open(cfg: DeviceConfig) -> Result<Arc<SoftDevice>, SocketError> {
        if let Some(f) = &cfg.faults {
            f.validate()
                .map_err(|source| SocketError::Faults { ip: cfg.ip, source })?;
        }
        // The AF_XDP path's neighbour lookup is IPv4 only (/proc/net/arp): refuse IPv6
        // here, not at the first connection.
        if cfg.ip.is_ipv6() && matches!(cfg.packet_path, PacketPath::AfXdp { .. }) {
            return Err(XdpError::from(NeighError::Ipv6Unsupported(cfg.ip)).into());
        }
        let rx_queues = cfg.rx_queues.max(1);
        let socks = bind_rx_group(cfg.ip, rx_queues)?;
        let rx_buffer_bytes = socks.last().map_or(0, granted_rx_buffer);
        let rc_config = rc_config_for(rx_buffer_bytes, RcConfig::default());
        report_capped(rx_buffer_bytes, &rc_config);
        let netdev_mtu = cfg
            .netdev_mtu
            .unwrap_or_else(|| interface_mtu(cfg.ip).unwrap_or(1500));
        let carried = Mtu::from_netdev_mtu(netdev_mtu);
        if let Some(m) = cfg.roce_mtu.filter(|&m| m > carried) {
            return Err(SocketError::RoceMtu {
                ip: cfg.ip,
                roce_mtu: m.bytes(),
                netdev_mtu,
                max: carried.bytes(),
            });
        }
        let xdp = match &cfg.packet_path {
            PacketPath::Udp => None,
            PacketPath::AfXdp { interface } => Some(XdpDevice::open(interface, rx_queues)?),
        };
        let path_mtu = cfg.roce_mtu.unwrap_or(carried);
        let counters: Arc<DeviceCounters> = Arc::default();
        let qp_registry: Arc<QpRegistry> = Arc::default();
        let header = InfoHeader {
            ip: cfg.ip,
            poll_groups: rx_queues,
            path_mtu: path_mtu.bytes(),
        };
        let info = InfoServer::start(header, counters.clone(), qp_registry.clone());
        Ok(Arc::new(SoftDevice {
            ip: cfg.ip,
            rx_queues,
            path_mtu,
            netdev_mtu,
            keys: KeyTable::new(),
            rx_sockets: Mutex::new(socks.into_iter().map(Some).collect()),
            qpns: QpnAllocator::new(rx_queues, cfg.first_qpn),
            counters,
            faults: cfg.faults.filter(|f| !f.is_noop()),
            rx_buffer_bytes,
            rc_config,
            cm_agent: Mutex::new(None),
            udp_gso: cfg.udp_gso,
            gso_refused: Default::default(),
            xdp,
            qp_registry,
            _info: info,
        }))
    }

    /// The local IP address (the GID, in RoCEv2 terms).
    pub fn ip(&self) -> IpAddr {
        self.ip
    }
    /// The active path MTU: [`DeviceConfig::roce_mtu`], or derived from the interface
    /// MTU as rxe does.
    pub fn path_mtu(&self) -> Mtu {
        self.path_mtu
    }
    /// The interface MTU the path MTU was derived from.
    pub fn netdev_mtu(&self) -> u32 {
        self.netdev_mtu
    }
    /// Number of poll groups (receive queues).
    pub fn rx_queues(&self) -> u32 {
        self.rx_queues
    }
    /// Receive buffer bytes the kernel granted each poll group's socket, as getsockopt
    /// `SO_RCVBUF` reports it (0 if unknown); see [`super::rx_buffer`].
    pub fn rx_buffer_bytes(&self) -> usize {
        self.rx_buffer_bytes
    }
    /// The RC tuning a new context starts with: the defaults, with the windows sized
    /// from [`SoftDevice::rx_buffer_bytes`] ([`super::rx_buffer::rc_config_for`]).
    pub fn rc_config(&self) -> RcConfig {
        self.rc_config
    }
    /// Whether a new QP path toward `peer` sends UDP GSO trains: as
    /// [`DeviceConfig::udp_gso`] allows, unless the kernel refused one already.
    pub fn udp_gso_toward(&self, peer: IpAddr) -> bool {
        !self.gso_refused.load(Ordering::Relaxed) && self.udp_gso.allows(self.ip, peer)
    }

    /// Records that the kernel refused a UDP GSO train (`error`): logs it once per
    /// device; new paths then send plain datagrams.
    pub(crate) fn refuse_gso(&self, error: &std::io::Error) {
        if !self.gso_refused.swap(true, Ordering::Relaxed) {
            tracing::warn!(
                "soft RoCE on {}: the kernel refused a UDP GSO send ({error}); sending one \
                 datagram per packet from now on (set udp_gso Off to skip the attempt)",
                self.ip
            );
        }
    }

    /// The soft provider's limits ([`SOFT_CAPS`]).
    pub fn caps(&self) -> DeviceCaps {
        SOFT_CAPS
    }
    /// The memory key tables (MRs and MWs) of the device.
    pub fn keys(&self) -> &KeyTable {
        &self.keys
    }
    /// Device counters.
    pub fn counters(&self) -> &DeviceCounters {
        &self.counters
    }
    /// The QPs of every poll group as `rdma-info` shows them ([`super::qp_registry`]).
    pub fn qp_registry(&self) -> &QpRegistry {
        &self.qp_registry
    }
    /// The device counters, shared (with the CM agent, which holds no device).
    pub(crate) fn counters_arc(&self) -> Arc<DeviceCounters> {
        self.counters.clone()
    }

    /// The fault injection configured at open (`None` also when every probability
    /// was 0).
    pub fn faults(&self) -> Option<&FaultConfig> {
        self.faults.as_ref()
    }

    /// The receive fault layer for poll group `rx_queue`, if faults are configured.
    pub(crate) fn rx_faults(&self, rx_queue: u32) -> Option<RxFaults> {
        let cfg = self.faults?;
        let seed = group_seed(cfg.seed, self.ip, rx_queue);
        Some(RxFaults::new(cfg, seed, self.counters.injected.clone()))
    }

    /// Allocates a protection domain (`ibv_alloc_pd`).
    pub fn alloc_pd(&self) -> Pd {
        Pd(self.keys.alloc_pd())
    }

    /// Allocates `len` bytes of page-aligned, zeroed memory and registers it
    /// (`ibv_reg_mr`) with `access` in `pd`.
    pub fn reg_mr(
        self: &Arc<Self>,
        pd: Pd,
        len: usize,
        access: AccessFlags,
    ) -> Result<Mr, VerbsError> {
        let mem = MrMemory::new(len).map_err(|_| VerbsError::NoResources("memory for the MR"))?;
        let keys = self.keys.reg_mr(pd.0, &mem, 0, len, access)?;
        Ok(Mr {
            keys,
            pd,
            mem,
            dev: self.clone(),
        })
    }

    /// Allocates a type 2 memory window (`ibv_alloc_mw`); returns its (not yet valid)
    /// rkey. Bind it with [`crate::verbs::SendOp::BindMw`].
    pub fn alloc_mw(&self, pd: Pd) -> Result<u32, VerbsError> {
        self.keys.alloc_mw(pd.0)
    }

    /// Opens poll group `rx_queue` (0-based): it owns that receive socket and creates
    /// QPs whose numbers steer to it. Each poll group can be opened once.
    pub fn open_context(self: &Arc<Self>, rx_queue: u32) -> Result<Context, VerbsError> {
        let sock = self
            .take_socket(rx_queue as usize + 1)
            .ok_or(VerbsError::InvalidArgument(
                "poll group already open or out of range",
            ))?;
        let xdp = match &self.xdp {
            None => None,
            Some(x) => match x.open_queue(rx_queue) {
                Ok(q) => Some(q),
                Err(e) => {
                    tracing::error!("poll group {rx_queue}: {e}");
                    self.return_socket(rx_queue, sock);
                    return Err(VerbsError::NoResources(
                        "an AF_XDP socket for the poll group (see the log for why and the fix)",
                    ));
                }
            },
        };
        Ok(Context::new(self.clone(), rx_queue, sock, xdp))
    }

    /// The AF_XDP path, when the device was opened with [`PacketPath::AfXdp`].
    pub fn xdp(&self) -> Option<&XdpDevice> {
        self.xdp.as_ref()
    }

    /// Gives poll group `rx_queue`'s receive socket back (its context was dropped); the
    /// group can be opened again.
    pub(crate) fn return_socket(&self, rx_queue: u32, sock: Socket) {
        if let Some(slot) = self.rx_sockets.lock().get_mut(rx_queue as usize + 1) {
            *slot = Some(sock);
        }
    }

    /// Takes the QP1 receive socket (for the CM agent).
    pub(crate) fn take_cm_socket(&self) -> Option<Socket> {
        self.take_socket(0)
    }

    /// The device's CM agent: the one started with [`CmAgent::start`] or by an earlier
    /// call, else a new one with the default configuration. The device keeps it
    /// running for as long as it lives (every handle is the same agent).
    ///
    /// # Errors
    /// [`CmAgentError::Socket`] / [`CmAgentError::Io`] when its sockets or thread cannot
    /// be set up.
    pub fn cm_agent(self: &Arc<Self>) -> Result<CmAgent, CmAgentError> {
        loop {
            {
                let mut slot = self.cm_agent.lock();
                if let Some(a) = &*slot {
                    return Ok(a.clone());
                }
                match CmAgent::start_unregistered(self, crate::cm::CmConfig::default()) {
                    Ok(a) => {
                        *slot = Some(a.clone());
                        return Ok(a);
                    }
                    // `CmAgent::start` on another thread took QP1's socket and records
                    // its agent next.
                    Err(CmAgentError::AlreadyStarted) => {}
                    Err(e) => return Err(e),
                }
            }
            std::thread::yield_now();
        }
    }

    /// Records `agent` as the device's CM agent (it holds QP1's socket, so it is the
    /// only one).
    pub(crate) fn register_cm_agent(&self, agent: &CmAgent) {
        *self.cm_agent.lock() = Some(agent.clone());
    }

    fn take_socket(&self, idx: usize) -> Option<Socket> {
        self.rx_sockets.lock().get_mut(idx).and_then(|s| s.take())
    }

    /// Next QP number for poll group `rx_queue` (see [`QpnAllocator`]).
    pub(crate) fn alloc_qpn(&self, rx_queue: u32) -> u32 {
        self.qpns.alloc(rx_queue)
    }
}

/// The MTU of the interface that holds `ip` (from `/sys/class/net/<if>/mtu`).
pub fn interface_mtu(ip: IpAddr) -> Option<u32> {
    let addrs = nix::ifaddrs::getifaddrs().ok()?;
    for ifa in addrs {
        let Some(a) = ifa.address else { continue };
        let matches = match ip {
            IpAddr::V4(v4) => a.as_sockaddr_in().map(|s| s.ip() == v4).unwrap_or(false),
            IpAddr::V6(v6) => a.as_sockaddr_in6().map(|s| s.ip() == v6).unwrap_or(false),
        };
        // 127.0.0.0/8 is all on lo although only 127.0.0.1 is listed.
        let loopback = ip.is_loopback() && ifa.interface_name == "lo";
        if matches || loopback {
            let s = std::fs::read_to_string(format!("/sys/class/net/{}/mtu", ifa.interface_name))
                .ok()?;
            return s.trim().parse().ok();
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every QPN steers to its poll group (the BPF program's `qpn % n`), stays in
    /// `FIRST_QPN..=MAX_QPN`, and a group wraps within its class at the top.
    #[test]
    fn af_xdp_on_ipv6_or_an_unknown_interface_is_refused_naming_the_fix() {
        let af_xdp = |ip: IpAddr, interface: &str| DeviceConfig {
            packet_path: PacketPath::AfXdp {
                interface: interface.into(),
            },
            ..DeviceConfig::new(ip)
        };
        let e = SoftDevice::open(af_xdp("::1".parse().unwrap(), "lo")).unwrap_err();
        assert!(e.to_string().contains("IPv4 addresses or the UDP"), "{e}");
        let e = SoftDevice::open(af_xdp("127.0.0.233".parse().unwrap(), "nosuch0")).unwrap_err();
        assert!(
            e.to_string().contains("no interface \"nosuch0\"") && e.to_string().contains("ip link"),
            "{e}"
        );
    }

    /// A RoCE MTU the interface cannot carry is refused, naming both MTUs and the fix;
    /// one it can carry becomes the device's active MTU (what it offers a peer).
    #[test]
    fn a_roce_mtu_is_checked_against_the_interface_mtu() {
        let cfg = |roce_mtu| DeviceConfig {
            netdev_mtu: Some(1500),
            roce_mtu,
            ..DeviceConfig::new("127.0.0.234".parse().unwrap())
        };
        let e = SoftDevice::open(cfg(Some(Mtu::Mtu2048)))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("RoCE MTU 2048")
                && e.contains("interface MTU 1500 carries at most RoCE MTU 1024")
                && e.contains("mtu 2156"),
            "{e}"
        );
        assert_eq!(
            SoftDevice::open(cfg(Some(Mtu::Mtu512))).unwrap().path_mtu(),
            Mtu::Mtu512
        );
        assert_eq!(
            SoftDevice::open(cfg(None)).unwrap().path_mtu(),
            Mtu::Mtu1024
        );
        assert_eq!(Mtu::from_bytes(2048), Some(Mtu::Mtu2048));
        assert_eq!(Mtu::from_bytes(1500), None);
    }

    #[test]
    fn qpns_stay_in_their_class_and_range() {
        for n in [1u32, 2, 3, 5, 7] {
            let a = QpnAllocator::new(n, Some(MAX_QPN - 3 * n));
            for g in 0..n {
                let mut seen = Vec::new();
                for _ in 0..8 {
                    let q = a.alloc(g);
                    assert_eq!(q % n, g, "n {n} group {g}: {q:#x}");
                    assert!((FIRST_QPN..=MAX_QPN).contains(&q), "{q:#x}");
                    seen.push(q);
                }
                // Wrapped: the class's smallest QPN came after its largest.
                assert!(seen.contains(&QpnAllocator::class_base(n, g)), "{seen:x?}");
            }
        }
    }

    #[test]
    fn a_given_first_qpn_is_where_each_class_starts() {
        let a = QpnAllocator::new(2, Some(0x11));
        assert_eq!((a.alloc(0), a.alloc(1)), (0x12, 0x11));
        assert_eq!((a.alloc(0), a.alloc(1)), (0x14, 0x13));
        let b = QpnAllocator::new(3, Some(0x1000));
        assert_eq!(
            [b.alloc(0), b.alloc(1), b.alloc(2)],
            [0x1002, 0x1000, 0x1001]
        );
        // Below FIRST_QPN: clamped, never 0 or 1.
        let c = QpnAllocator::new(1, Some(0));
        assert_eq!(c.alloc(0), FIRST_QPN);
    }

    /// Two device instances (two runs of a process) start at different QPNs: the
    /// chance that two random starts in a class of 2^23 collide is 2^-23.
    #[test]
    fn random_starts_differ_between_instances() {
        let firsts: Vec<u32> = (0..4)
            .map(|_| QpnAllocator::new(2, None).alloc(0))
            .collect();
        for (i, a) in firsts.iter().enumerate() {
            assert_eq!(a % 2, 0);
            assert!(firsts[i + 1..].iter().all(|b| b != a), "{firsts:x?}");
        }
    }
}
