//! The configuration model: what the daemon serves, whichever reader produced it
//! (TOML, [`super::toml`]; nvmetcli JSON, [`super::json`]), checked by one validator
//! ([`super::validate`]).

use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::ids::{Eui64, Nguid};
use super::size::{de_opt_size, de_opt_size_u64, de_size_u32, parse_size};
use crate::provider::ProviderKind;

/// The default `trsvcid`: NVMe-oF's IANA-assigned port.
pub use nvme::NVMF_RDMA_PORT as DEFAULT_TRSVCID;
/// Identify Controller Serial Number field length in bytes (NVMe Base 2.x, SN).
pub const SERIAL_MAX_LEN: usize = 20;
/// Largest in-capsule data size accepted, in bytes (Linux nvmet-rdma's limit, 16 KiB).
pub const MAX_INLINE_DATA_SIZE: u32 = 16 * 1024;
/// Largest MDTS accepted, in bytes: a keyed SGL data block's length is 24 bits
/// (NVMe Base 2.x §4.3.2), so 8 MiB is the largest power of two one can carry.
pub const MAX_MDTS_BYTES: u32 = 8 << 20;
/// Smallest MDTS accepted, in bytes: Identify Controller MDTS is a power of two in
/// units of the 4 KiB page with 0 meaning "no limit", so 8 KiB (MDTS 1) is the
/// smallest limit a host can be told.
pub const MIN_MDTS_BYTES: u32 = 8 << 10;
/// Largest `data_slab` accepted, in bytes: one io_uring fixed buffer holds at most 1 GiB.
pub const MAX_DATA_SLAB_BYTES: u64 = 1 << 30;
/// Default `srq_depth`: receive buffers (commands in flight) per poll group.
pub const DEFAULT_SRQ_DEPTH: u32 = 512;
/// Smallest `srq_depth` accepted (its SRQ limit, 1/8 of it, is then 2 buffers).
pub const MIN_SRQ_DEPTH: u32 = 16;
/// Largest `srq_depth` accepted (SPDK's default `max_srq_depth` is 4096).
pub const MAX_SRQ_DEPTH: u32 = 16384;

/// Lowest CNTLID a subsystem hands out unless `cntlid_min` says otherwise (nvmet's
/// default `attr_cntlid_min`).
pub const DEFAULT_CNTLID_MIN: u16 = crate::subsystem::CNTLID_MIN;
/// Highest CNTLID a subsystem hands out unless `cntlid_max` says otherwise: FFEFh, the
/// last before the reserved FFF0h..FFFFh (nvmet's default `attr_cntlid_max`).
pub const DEFAULT_CNTLID_MAX: u16 = crate::subsystem::CNTLID_MAX;
/// Longest Model Number in bytes (Identify Controller MN).
pub const MODEL_MAX_LEN: usize = 40;
/// Longest Firmware Revision in bytes (Identify Controller FR).
pub const FIRMWARE_MAX_LEN: usize = 8;
/// Most I/O queues a subsystem's `qid_max` may allow (nvmet's `NVMET_NR_QUEUES`).
pub const MAX_QID_MAX: u16 = 128;

pub(super) fn default_trsvcid() -> u16 {
    DEFAULT_TRSVCID
}
pub(super) fn default_poll_groups() -> usize {
    1
}
pub(super) fn default_true() -> bool {
    true
}
pub(super) fn default_cntlid_min() -> u16 {
    DEFAULT_CNTLID_MIN
}
pub(super) fn default_cntlid_max() -> u16 {
    DEFAULT_CNTLID_MAX
}
pub(super) fn default_inline_data_size() -> u32 {
    4096
}
pub(super) fn default_mdts_bytes() -> u32 {
    1 << 20
}
pub(super) fn default_srq_depth() -> u32 {
    DEFAULT_SRQ_DEPTH
}
pub(super) fn default_max_queue_size() -> u16 {
    128
}
pub(super) fn default_kato_ms() -> u32 {
    120_000
}
pub(super) fn default_ana_grpid() -> u32 {
    crate::ana::DEFAULT_ANA_GRPID
}
pub(super) fn default_shutdown_timeout_ms() -> u32 {
    crate::shutdown::DEFAULT_SHUTDOWN_TIMEOUT_MS
}

/// The whole daemon configuration.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TargetConfig {
    /// The RDMA provider: `"soft"` (the default: userspace RoCEv2 over UDP, no RDMA
    /// hardware needed) or `"verbs"` (a kernel RDMA device through libibverbs and
    /// librdmacm; `nvmf-target` built with the `verbs` feature). See
    /// [`crate::provider`].
    #[serde(default)]
    pub provider: ProviderKind,
    /// Addresses to listen on (nvmet's ports): RoCEv2 on UDP 4791 of `addr`, RDMA CM
    /// service `trsvcid`. At least one; no `addr`/`trsvcid` pair twice. Each serves the
    /// subsystems it links, or every subsystem when no entry links any (see the
    /// module docs).
    #[serde(default)]
    pub listen: Vec<ListenAddr>,
    /// Host entries (nvmet's `hosts`): per-host settings, by host NQN. A subsystem's
    /// allow-list (`hosts` of a subsystem) names hosts by NQN whether or not they have
    /// an entry here.
    #[serde(default)]
    pub hosts: Vec<HostConfig>,
    /// Poll groups per listen address: busy-polling threads, one per core given to
    /// the target. At least 1. Default 1.
    #[serde(default = "default_poll_groups")]
    pub poll_groups: usize,
    /// Exported NVM subsystems. At least one.
    #[serde(default)]
    pub subsystems: Vec<SubsystemConfig>,
    /// In-capsule data bytes accepted per command (IOCCSZ = 4 + this / 16, NVMe over
    /// Fabrics 1.x Identify Controller): a multiple of 16 up to 16 KiB. Default 4096.
    #[serde(default = "default_inline_data_size")]
    pub inline_data_size: u32,
    /// Largest data transfer of one command in bytes (MDTS = log2(this / 4096)): a power
    /// of two from 8 KiB to 8 MiB, as bytes or a size string ("1M"). Each poll group's
    /// registered data slab must hold at least one such transfer. Default 1 MiB.
    #[serde(default = "default_mdts_bytes", deserialize_with = "de_size_u32")]
    pub mdts_bytes: u32,
    /// Entries per queue offered (CAP.MQES + 1, NVMe Base 2.x §3.1.4.1), at least 2.
    /// Default 128.
    #[serde(default = "default_max_queue_size")]
    pub max_queue_size: u16,
    /// Keep Alive Timeout in milliseconds a discovery controller gets when the host's
    /// Connect asks for none (KATO 0), so abandoned discovery sessions are reaped
    /// (Linux nvmet's NVMET_DISC_KATO_MS); rounded up to whole seconds (KAS is 1 s).
    /// 0: such a discovery controller has no Keep Alive timer. I/O controllers always
    /// use the KATO of their Connect (NVMe Base 2.x §3.9). Default 120000.
    #[serde(default = "default_kato_ms")]
    pub kato_ms: u32,
    /// Serve the discovery subsystem ([`nvme::NVMF_DISCOVERY_NQN`]). When false, a Connect to it
    /// is refused as one to an unknown subsystem (Connect Invalid Parameters, SUBNQN),
    /// as nvmet does for a port without discovery. Default true.
    #[serde(default = "default_true")]
    pub discovery: bool,
    /// Bytes of each poll group's data slab, the memory registered (pinned) as io_uring
    /// fixed buffer for command data: from `mdts_bytes` to 1 GiB, as bytes or a size
    /// string ("4M"). Absent (the default): sized from `RLIMIT_MEMLOCK`, 64 MiB when
    /// the limit allows (see [`crate::memory`]). A slab smaller than `mdts_bytes` x the
    /// commands in flight still works: commands wait for a buffer.
    #[serde(default, deserialize_with = "de_opt_size_u64")]
    pub data_slab: Option<u64>,
    /// Receive buffers of each poll group's shared receive queue (SRQ), which all its
    /// queues draw command capsules from: the commands the group has in flight. From
    /// 16 to 16384; default 512. Each pins `inline_data_size` bytes of in-capsule
    /// data. When commands in flight hold nearly all (below 1/8), the poll group logs
    /// it (its SRQ limit event) and hosts' next commands wait (RNR NAK).
    #[serde(default = "default_srq_depth")]
    pub srq_depth: u32,
    /// The bound of a clean shutdown (SIGTERM/SIGINT) in milliseconds, from 100 to
    /// 3600000: commands in flight are answered, namespaces flushed and queues
    /// disconnected within it ([`crate::shutdown`]); what is left then is reported.
    /// Default 10000.
    #[serde(default = "default_shutdown_timeout_ms")]
    pub shutdown_timeout_ms: u32,
    /// CPUs the poll groups are pinned to, as SPDK's core mask: a list (`[0, 1]`), a
    /// string of numbers and ranges (`"0-3,6"`) or a hexadecimal mask (`"0x3"`); poll
    /// group `k` (over every listen address) runs on the `k % n`-th ([`crate::cpus`]).
    /// Each must be one the process may run on. Absent (the default): not pinned.
    #[serde(default)]
    pub cpus: Option<crate::cpus::CpuList>,
    /// The metrics endpoint: `"ADDR:PORT"` to serve Prometheus' text format over
    /// plain HTTP there (`GET /metrics`, [`crate::metrics`]); `127.0.0.1:9100` keeps
    /// it to this machine. Absent (the default): no endpoint.
    #[serde(default)]
    pub metrics: Option<std::net::SocketAddr>,
    /// The RoCE MTU in bytes (256, 512, 1024, 2048 or 4096) the soft provider's devices
    /// offer; each queue runs at the smaller of this and the host's. Absent (the
    /// default): derived from the interface MTU as rxe does (1024 on a 1500-byte
    /// Ethernet, 4096 on loopback). Larger than the interface carries: refused at
    /// start, naming the fix. The verbs provider uses its port's active MTU.
    #[serde(default)]
    pub roce_mtu: Option<u32>,
}

/// One listen address (NVMe over Fabrics 1.x Discovery Log Page Entry: TRADDR, TRSVCID).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListenAddr {
    /// IPv4 or IPv6 address of the RoCE interface (TRADDR).
    pub addr: IpAddr,
    /// RDMA CM port (TRSVCID). Default 4420.
    #[serde(default = "default_trsvcid")]
    pub trsvcid: u16,
    /// IPv4 ToS / IPv6 traffic class of the queues connected through this port, for
    /// PFC priority mapping (RoCE deployments map a DSCP to a lossless class): the DSCP
    /// shifted left by 2, e.g. 0x60 for DSCP 24 or 0x68 for 26; the ECN bits (1:0)
    /// stay the transport's (ECT(0)) and must be 0 here. Absent: the host's request's
    /// traffic class (0 from Linux). Soft provider only.
    #[serde(default)]
    pub tos: Option<u8>,
    /// Port ID (PORTID) in the discovery log page, unique: nvmet's port number.
    /// Absent: the entry's position, 1-based.
    #[serde(default)]
    pub portid: Option<u16>,
    /// NQNs of the subsystems served on this port (nvmet's `ports/N/subsystems`
    /// links): a Connect to another is refused as to an unknown subsystem, and the
    /// discovery log page read through this port lists only these. Absent on every
    /// entry: every subsystem on every port (the discovery log then lists each on
    /// each). Once one entry links subsystems, every entry must.
    #[serde(default)]
    pub subsystems: Option<Vec<String>>,
    /// Other discovery services this port's discovery log page refers hosts to
    /// (nvmet's `ports/N/referrals`), as Discovery Referral entries.
    #[serde(default)]
    pub referrals: Vec<ReferralConfig>,
    /// ANA group states on this port (nvmet's `ports/N/ana_groups/G/ana/state`):
    /// `[{ grpid = 2, state = "inaccessible" }, ...]`, group IDs 1 to 128, each once.
    /// A group not listed is optimized here. Changed at run time by
    /// [`crate::TargetHandle::set_ana_state`].
    #[serde(default)]
    pub ana_groups: Vec<AnaGroupConfig>,
}

/// One ANA group's state on a port ([`ListenAddr::ana_groups`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AnaGroupConfig {
    /// ANA Group ID, 1 to 128 ([`crate::ana::ANAGRPMAX`]).
    pub grpid: u32,
    /// Its state on the port.
    pub state: AnaStateConfig,
}

/// An ANA state as the configuration names it (nvmet's names, NVMe Base 2.x §8.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum AnaStateConfig {
    /// `"optimized"` (01h).
    Optimized,
    /// `"non-optimized"` (02h).
    NonOptimized,
    /// `"inaccessible"` (03h): I/O answered Asymmetric Access Inaccessible.
    Inaccessible,
    /// `"persistent-loss"` (04h): I/O answered Asymmetric Access Persistent Loss.
    PersistentLoss,
    /// `"change"` (0Fh): I/O answered Asymmetric Access Transition.
    Change,
}

impl From<AnaStateConfig> for nvme::ana::AnaState {
    fn from(s: AnaStateConfig) -> Self {
        use nvme::ana::AnaState;
        match s {
            AnaStateConfig::Optimized => AnaState::Optimized,
            AnaStateConfig::NonOptimized => AnaState::NonOptimized,
            AnaStateConfig::Inaccessible => AnaState::Inaccessible,
            AnaStateConfig::PersistentLoss => AnaState::PersistentLoss,
            AnaStateConfig::Change => AnaState::Change,
        }
    }
}

/// A referral to another discovery service (a Discovery Log Page Entry of SUBTYPE 1,
/// NVMe over Fabrics 1.1 §5.3; nvmet's `referrals/NAME`): an RDMA discovery
/// controller at `addr`:`trsvcid`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReferralConfig {
    /// The other discovery service's address (TRADDR).
    pub addr: IpAddr,
    /// Its RDMA CM port (TRSVCID). Default 4420.
    #[serde(default = "default_trsvcid")]
    pub trsvcid: u16,
    /// Its port ID (PORTID). Default 0.
    #[serde(default)]
    pub portid: u16,
    /// Listed only when true (nvmet's referral `enable`). Default true.
    #[serde(default = "default_true")]
    pub enable: bool,
}

/// A host entry (nvmet's `hosts/NQN`), the place for per-host settings.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HostConfig {
    /// Host NQN (HOSTNQN): starts with "nqn.", at most 223 bytes, unique.
    pub nqn: String,
}

impl ListenAddr {
    /// A port on `addr`:`trsvcid` with every other field at its default (serving
    /// every subsystem, no referrals).
    pub fn new(addr: IpAddr, trsvcid: u16) -> ListenAddr {
        ListenAddr {
            addr,
            trsvcid,
            tos: None,
            portid: None,
            subsystems: None,
            referrals: Vec::new(),
            ana_groups: Vec::new(),
        }
    }

    /// `addr:trsvcid`.
    pub fn socket_addr(&self) -> SocketAddr {
        SocketAddr::new(self.addr, self.trsvcid)
    }
}

/// One NVM subsystem.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SubsystemConfig {
    /// Subsystem NQN (SUBNQN): starts with "nqn.", at most 223 bytes, unique.
    pub nqn: String,
    /// Any host may connect. Default true. When false, only `hosts` may (`hosts`
    /// with `allow_any_host = true` is refused, as by nvmet: the list would do nothing).
    #[serde(default = "default_true")]
    pub allow_any_host: bool,
    /// Host NQNs allowed to connect when `allow_any_host` is false (nvmet's
    /// `allowed_hosts`).
    #[serde(default)]
    pub hosts: Vec<String>,
    /// In-band authentication (DH-HMAC-CHAP) per host: `[[subsystems.host_keys]]`
    /// entries; a host with an entry must authenticate on every queue.
    #[serde(default)]
    pub host_keys: Vec<HostKeyConfig>,
    /// Identify Controller Serial Number: at most 20 printable ASCII characters.
    /// Absent: "nvmf-rdma".
    #[serde(default)]
    pub serial: Option<String>,
    /// Identify Controller Model Number: 1 to 40 printable ASCII characters. Absent:
    /// [`crate::subsystem::DEFAULT_MODEL`].
    #[serde(default)]
    pub model: Option<String>,
    /// Identify Controller Firmware Revision: 1 to 8 printable ASCII characters.
    /// Absent: [`crate::admin::FIRMWARE_REVISION`].
    #[serde(default)]
    pub firmware: Option<String>,
    /// Identify Controller IEEE OUI, below 0x1000000. Default 0.
    #[serde(default)]
    pub ieee_oui: u32,
    /// The NVMe version reported (VS property, Identify VER) as "MAJOR.MINOR" or
    /// "MAJOR.MINOR.TERTIARY", major 1 or 2. Absent: "1.3".
    #[serde(default)]
    pub version: Option<String>,
    /// Lowest controller ID handed out to this subsystem's controllers, 1 to
    /// `cntlid_max`. Default 1.
    #[serde(default = "default_cntlid_min")]
    pub cntlid_min: u16,
    /// Highest controller ID handed out, up to 0xFFEF. Default 0xFFEF.
    #[serde(default = "default_cntlid_max")]
    pub cntlid_max: u16,
    /// Most I/O queues a controller of this subsystem is granted (Number of Queues),
    /// 1 to 128; the target's own limit (64) applies too. Absent: the target's limit.
    #[serde(default)]
    pub qid_max: Option<u16>,
    /// Namespaces, with unique NSIDs.
    #[serde(default)]
    pub namespaces: Vec<NamespaceConfig>,
}

/// What backs a namespace (`backend` of a namespace in the configuration).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum NamespaceBackend {
    /// A file or block device at `path` (the default).
    #[default]
    File,
    /// No storage: reads return zeroes, writes are dropped (Linux null_blk, SPDK's
    /// Null bdev), for measuring the fabric alone; `size` is required, no `path`.
    Null,
    /// `size` bytes of the target's memory, lost when it exits; no `path`.
    Ram,
}

/// One namespace, backed by a file or a block device ([`crate::backend`]), or by no
/// storage or memory (`backend = "null"` / `"ram"`, [`crate::backend::memory`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NamespaceConfig {
    /// Namespace ID: 1 to 0xFFFFFFFE, unique within the subsystem.
    pub nsid: u32,
    /// `"file"` (the default), `"null"` or `"ram"`.
    #[serde(default)]
    pub backend: NamespaceBackend,
    /// Backing file (created sparse at `size` when missing; its directory must exist)
    /// or block device (opened with O_EXCL: not mounted, not in use elsewhere).
    /// Required for `backend = "file"`, refused for the others.
    #[serde(default)]
    pub path: PathBuf,
    /// Size for creating a missing file: bytes, or "1G", "512M", "4KiB" (powers of
    /// 1024); written as a string or an integer. Without it the file must exist. A
    /// block device's size is its own.
    #[serde(default, deserialize_with = "de_opt_size")]
    pub size: Option<String>,
    /// Logical block size in bytes: 512, 1024, 2048 or 4096. Default: 512 for a file,
    /// the device's logical block size for a block device (which is also the least it
    /// accepts).
    #[serde(default)]
    pub block_size: Option<u32>,
    /// Open with O_DIRECT, bypassing the page cache (default false). The block size
    /// must then be at least the storage's O_DIRECT alignment.
    #[serde(default)]
    pub direct: bool,
    /// Serve the namespace read-only (default false): the file is opened for reading
    /// under a shared lock (other read-only targets may serve it too, a read-write one
    /// may not), must exist, and Write, Write Zeroes and Dataset Management are
    /// answered Namespace is Write Protected; Identify Namespace shows it write
    /// protected (NSATTR bit 0).
    #[serde(default)]
    pub read_only: bool,
    /// Namespace Globally Unique Identifier (Identify Namespace NGUID, the NIDT 2
    /// descriptor): 32 hexadecimal digits, optionally separated by `-` or `:` (as
    /// nvmet's `device_nguid`, e.g. "ef90689c-6c46-d44c-89c1-4067801309a8"). All zeros:
    /// none reported. Absent: derived from the subsystem NQN and NSID (stable).
    #[serde(default)]
    pub nguid: Option<Nguid>,
    /// Namespace UUID (the NIDT 3 descriptor), e.g.
    /// "6f2c8ab1-1f0e-4c47-9d43-0c1a5e0b7a11". All zeros: none reported. Absent:
    /// derived from the subsystem NQN and NSID (an RFC 9562 version 8 UUID, stable).
    #[serde(default)]
    pub uuid: Option<uuid::Uuid>,
    /// IEEE Extended Unique Identifier (Identify Namespace EUI64, the NIDT 1
    /// descriptor): 16 hexadecimal digits, optionally separated by `-` or `:`.
    /// Absent (or all zeros): none reported.
    #[serde(default)]
    pub eui64: Option<Eui64>,
    /// Serve the namespace (nvmet's `enable`). False: configured and checked but not
    /// opened, and not visible to hosts. Default true.
    #[serde(default = "default_true")]
    pub enable: bool,
    /// The namespace's ANA group (nvmet's `ana_grpid`), 1 to 128. Default 1. Each
    /// port's state of the group applies ([`ListenAddr::ana_groups`]).
    #[serde(default = "default_ana_grpid")]
    pub ana_grpid: u32,
}

/// One host's DH-HMAC-CHAP secrets (NVMe Base 2.x §8.13.5; Linux nvmet's host
/// attributes `dhchap_key`, `dhchap_ctrl_key`, `dhchap_hash`, `dhchap_dhgroup`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HostKeyConfig {
    /// The host's NQN; listed in `hosts` too when `allow_any_host` is false.
    pub hostnqn: String,
    /// The host's secret, `DHHC-1:xx:<base64>:` as `nvme gen-dhchap-key` prints it.
    pub dhchap_key: String,
    /// The controller's secret for bidirectional authentication (the host's
    /// `--dhchap-ctrl-secret`); absent: the controller cannot be authenticated.
    #[serde(default)]
    pub dhchap_ctrl_key: Option<String>,
    /// Hashes accepted, preferred first: `sha256`, `sha384`, `sha512` (default all three).
    #[serde(default)]
    pub dhchap_hash: Option<Vec<String>>,
    /// DH groups accepted, preferred first: `null`, `ffdhe2048` .. `ffdhe8192`
    /// (default all, null first, as Linux nvmet defaults to null).
    #[serde(default)]
    pub dhchap_dhgroup: Option<Vec<String>>,
}

impl HostKeyConfig {
    /// The controller's policy for this host (secrets parsed, lists resolved).
    ///
    /// Errors: the key or list entry that does not parse, and why.
    pub fn policy(&self) -> Result<dhchap::ControllerPolicy, String> {
        let key = |what: &str, s: &str| {
            s.parse::<dhchap::Secret>()
                .map_err(|e| format!("{what}: {e}"))
        };
        let mut p = dhchap::ControllerPolicy::new(key("dhchap_key", &self.dhchap_key)?);
        if let Some(c) = &self.dhchap_ctrl_key {
            p.ctrl_key = Some(key("dhchap_ctrl_key", c)?);
        }
        if let Some(list) = &self.dhchap_hash {
            p.hashes = list
                .iter()
                .map(|h| {
                    dhchap::HashId::parse(h).ok_or_else(|| {
                        format!("dhchap_hash: {h:?} is not sha256, sha384 or sha512")
                    })
                })
                .collect::<Result<_, _>>()?;
        }
        if let Some(list) = &self.dhchap_dhgroup {
            p.dhgroups = list
                .iter()
                .map(|g| {
                    dhchap::DhGroupId::parse(g).ok_or_else(|| {
                        format!("dhchap_dhgroup: {g:?} is not null or ffdhe2048..ffdhe8192")
                    })
                })
                .collect::<Result<_, _>>()?;
        }
        if p.hashes.is_empty() || p.dhgroups.is_empty() {
            return Err("dhchap_hash and dhchap_dhgroup may not be empty lists".into());
        }
        Ok(p)
    }
}

impl SubsystemConfig {
    /// Subsystem `nqn`, open to any host, without namespaces, every other field at
    /// its default.
    pub fn new(nqn: &str) -> SubsystemConfig {
        SubsystemConfig {
            nqn: nqn.to_string(),
            allow_any_host: true,
            hosts: Vec::new(),
            host_keys: Vec::new(),
            serial: None,
            model: None,
            firmware: None,
            ieee_oui: 0,
            version: None,
            cntlid_min: DEFAULT_CNTLID_MIN,
            cntlid_max: DEFAULT_CNTLID_MAX,
            qid_max: None,
            namespaces: Vec::new(),
        }
    }
}

impl NamespaceConfig {
    /// Namespace `nsid` on a file (no path yet), every other field at its default.
    pub fn new(nsid: u32) -> NamespaceConfig {
        NamespaceConfig {
            nsid,
            backend: NamespaceBackend::File,
            path: PathBuf::new(),
            size: None,
            block_size: None,
            direct: false,
            read_only: false,
            nguid: None,
            uuid: None,
            eui64: None,
            enable: true,
            ana_grpid: default_ana_grpid(),
        }
    }

    /// How to open the namespace's back end.
    ///
    /// # Errors
    /// As [`NamespaceConfig::size_bytes`].
    pub fn options(&self) -> Result<crate::backend::NamespaceOptions, String> {
        Ok(crate::backend::NamespaceOptions {
            create_size_bytes: self.size_bytes()?,
            block_size: self.block_size,
            direct: self.direct,
            read_only: self.read_only,
        })
    }

    /// `size` in bytes, `None` when absent.
    ///
    /// # Errors
    /// A message naming the namespace and the size when it does not parse (validated
    /// configurations always parse).
    pub fn size_bytes(&self) -> Result<Option<u64>, String> {
        self.size
            .as_deref()
            .map(parse_size)
            .transpose()
            .map_err(|e| format!("namespace {} ({}): {e}", self.nsid, self.path.display()))
    }
}

impl TargetConfig {
    /// The configuration used without a file: listen on `addr`:4420, one subsystem
    /// `nqn` open to any host, namespace 1 on `path` (created sparse at `size_bytes`
    /// when missing), 512-byte blocks, every other field at its default.
    pub fn default_for(addr: IpAddr, nqn: &str, path: &Path, size_bytes: u64) -> TargetConfig {
        let mut ns = NamespaceConfig::new(1);
        ns.path = path.to_path_buf();
        ns.size = Some(size_bytes.to_string());
        let mut subsystem = SubsystemConfig::new(nqn);
        subsystem.namespaces.push(ns);
        let mut cfg = TargetConfig::new(vec![ListenAddr::new(addr, DEFAULT_TRSVCID)]);
        cfg.subsystems.push(subsystem);
        cfg
    }

    /// A configuration listening on `listen` with no subsystems, every other field
    /// at its default (what a reader starts from).
    pub fn new(listen: Vec<ListenAddr>) -> TargetConfig {
        TargetConfig {
            provider: ProviderKind::default(),
            listen,
            hosts: Vec::new(),
            poll_groups: default_poll_groups(),
            subsystems: Vec::new(),
            inline_data_size: default_inline_data_size(),
            mdts_bytes: default_mdts_bytes(),
            max_queue_size: default_max_queue_size(),
            kato_ms: default_kato_ms(),
            discovery: true,
            data_slab: None,
            srq_depth: DEFAULT_SRQ_DEPTH,
            shutdown_timeout_ms: default_shutdown_timeout_ms(),
            cpus: None,
            metrics: None,
            roce_mtu: None,
        }
    }
}

impl fmt::Display for ListenAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.socket_addr())
    }
}
