//! The `nvmf-target` daemon configuration, in TOML (see `target/examples/target.toml`).
//!
//! ```toml
//! provider = "soft"           # or "verbs": a kernel RDMA device (build feature `verbs`)
//! poll_groups = 1
//! [[listen]]
//! addr = "127.0.0.2"          # trsvcid defaults to 4420
//! [[subsystems]]
//! nqn = "nqn.2026-11.io.nvmf-rdma:target"
//! [[subsystems.namespaces]]
//! nsid = 1
//! path = "/var/tmp/ns1.img"   # created sparse at `size` when missing
//! size = "1G"
//! [[subsystems.namespaces]]
//! nsid = 2
//! path = "/dev/nvme1n1"       # a block device: opened with O_EXCL, sized by the kernel
//! direct = true               # O_DIRECT (default false: through the page cache)
//! ```
//!
//! Parsing ([`TargetConfig::from_toml_str`], [`TargetConfig::from_file`]) validates too;
//! errors name the file (or "configuration") and the offending item; a key this
//! module does not know is refused by name. Relative namespace paths are relative to
//! the daemon's working directory.
//!
//! Several `[[listen]]` entries: each distinct address gets its own RDMA device (soft:
//! UDP 4791 of that address; verbs: the device whose RoCE v2 GID the address is),
//! connection manager and `poll_groups` poll groups; each entry's `trsvcid` is an RDMA
//! CM port listened on at its address. Every subsystem is reachable through every
//! entry, and the discovery log page lists each.

use std::collections::HashSet;
use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Deserializer, Serialize};

use crate::provider::ProviderKind;

/// NVMe-oF's IANA-assigned port, the default `trsvcid` (NVMe over Fabrics 1.x §7.4.9).
pub const DEFAULT_TRSVCID: u16 = 4420;
/// Longest NQN in bytes, without the terminating NUL (NVMe Base 2.x §4.7).
pub const NQN_MAX_LEN: usize = 223;
/// The well-known discovery subsystem NQN (NVMe Base 2.x §4.7).
pub const DISCOVERY_NQN: &str = "nqn.2014-08.org.nvmexpress.discovery";
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

fn default_trsvcid() -> u16 {
    DEFAULT_TRSVCID
}
fn default_poll_groups() -> usize {
    1
}
fn default_true() -> bool {
    true
}
fn default_inline_data_size() -> u32 {
    4096
}
fn default_mdts_bytes() -> u32 {
    1 << 20
}
fn default_srq_depth() -> u32 {
    DEFAULT_SRQ_DEPTH
}
fn default_max_queue_size() -> u16 {
    128
}
fn default_kato_ms() -> u32 {
    120_000
}
fn default_shutdown_timeout_ms() -> u32 {
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
    /// Addresses to listen on: RoCEv2 on UDP 4791 of `addr`, RDMA CM service
    /// `trsvcid`. At least one; no `addr`/`trsvcid` pair twice. Every subsystem is
    /// served on each (see the module docs).
    #[serde(default)]
    pub listen: Vec<ListenAddr>,
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
    /// Serve the discovery subsystem ([`DISCOVERY_NQN`]). When false, a Connect to it
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
}

impl ListenAddr {
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
    /// Any host may connect. Default true. When false, only `hosts` may.
    #[serde(default = "default_true")]
    pub allow_any_host: bool,
    /// Host NQNs allowed to connect when `allow_any_host` is false.
    #[serde(default)]
    pub hosts: Vec<String>,
    /// In-band authentication (DH-HMAC-CHAP) per host: `[[subsystems.host_keys]]`
    /// entries; a host with an entry must authenticate on every queue.
    #[serde(default)]
    pub host_keys: Vec<HostKeyConfig>,
    /// Identify Controller Serial Number: at most 20 printable ASCII characters. When
    /// absent the target derives one.
    #[serde(default)]
    pub serial: Option<String>,
    /// Namespaces, with unique NSIDs.
    #[serde(default)]
    pub namespaces: Vec<NamespaceConfig>,
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
}

impl NamespaceConfig {
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

/// Why a configuration was refused. Each message starts with the file's path (or
/// "configuration" for a string).
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("{}: cannot read: {source}", path.display())]
    Read {
        /// The configuration file.
        path: PathBuf,
        /// The operating system's error.
        source: std::io::Error,
    },
    /// The TOML is malformed, or a field is unknown or of the wrong type.
    #[error("{origin}: {source}")]
    Parse {
        /// The file path, or "configuration".
        origin: String,
        /// The TOML error, with line and column.
        source: toml::de::Error,
    },
    /// The TOML is well-formed but a value is not acceptable.
    #[error("{origin}: {reason}")]
    Invalid {
        /// The file path, or "configuration".
        origin: String,
        /// What is wrong and where, e.g. `subsystems[0] (nqn.x:a): namespaces[1]: nsid 1 is used twice`.
        reason: String,
    },
}

/// Why [`parse_size`] refused a string.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid size {input:?}: {reason}")]
pub struct ParseSizeError {
    /// The string given.
    pub input: String,
    /// What is wrong.
    pub reason: &'static str,
}

/// Parses a size: a decimal integer of bytes with an optional unit K, M, G or T (powers
/// of 1024), optionally followed by "iB" or "B", case-insensitive, with optional spaces
/// between number and unit: "4096", "512M", "1G", "1 GiB", "2tb".
///
/// # Errors
/// [`ParseSizeError`] for an empty string, a missing or non-decimal number (fractions
/// included), an unknown unit, or a value above `u64::MAX`.
pub fn parse_size(s: &str) -> Result<u64, ParseSizeError> {
    let err = |reason| ParseSizeError {
        input: s.to_string(),
        reason,
    };
    let t = s.trim();
    let digits_end = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = t.split_at(digits_end);
    if num.is_empty() {
        return Err(err(
            "expected a decimal number of bytes, e.g. 4096, 512M or 1G",
        ));
    }
    let n: u64 = num.parse().map_err(|_| err("number too large"))?;
    let unit = unit.trim_start().to_ascii_lowercase();
    let shift = match unit.as_str() {
        "" | "b" => 0,
        "k" | "kb" | "kib" => 10,
        "m" | "mb" | "mib" => 20,
        "g" | "gb" | "gib" => 30,
        "t" | "tb" | "tib" => 40,
        _ => {
            return Err(err(
                "unknown unit (use K, M, G or T, optionally with B or iB)",
            ))
        }
    };
    n.checked_mul(1u64 << shift)
        .ok_or_else(|| err("size too large"))
}

/// A size written as an integer or a string.
#[derive(Deserialize)]
#[serde(untagged)]
enum SizeRepr {
    Int(u64),
    Str(String),
}

fn de_opt_size<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    Ok(Option::<SizeRepr>::deserialize(d)?.map(|r| match r {
        SizeRepr::Int(n) => n.to_string(),
        SizeRepr::Str(s) => s,
    }))
}

fn de_opt_size_u64<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    use serde::de::Error;
    Option::<SizeRepr>::deserialize(d)?
        .map(|r| match r {
            SizeRepr::Int(n) => Ok(n),
            SizeRepr::Str(s) => parse_size(&s).map_err(D::Error::custom),
        })
        .transpose()
}

fn de_size_u32<'de, D: Deserializer<'de>>(d: D) -> Result<u32, D::Error> {
    use serde::de::Error;
    let n = match SizeRepr::deserialize(d)? {
        SizeRepr::Int(n) => n,
        SizeRepr::Str(s) => parse_size(&s).map_err(D::Error::custom)?,
    };
    u32::try_from(n).map_err(|_| D::Error::custom(format!("{n} bytes does not fit in 32 bits")))
}

/// Whether `nqn` is a syntactically acceptable NQN: "nqn." prefix, at most 223 bytes,
/// no control characters (NVMe Base 2.x §4.7).
pub fn is_valid_nqn(nqn: &str) -> bool {
    nqn.starts_with("nqn.")
        && nqn.len() > 4
        && nqn.len() <= NQN_MAX_LEN
        && !nqn.chars().any(|c| c.is_control())
}

fn nqn_problem(nqn: &str) -> Option<String> {
    if !nqn.starts_with("nqn.") {
        Some(format!("NQN {nqn:?} does not start with \"nqn.\""))
    } else if nqn.len() > NQN_MAX_LEN {
        Some(format!(
            "NQN {nqn:?} is {} bytes, more than {NQN_MAX_LEN}",
            nqn.len()
        ))
    } else if !is_valid_nqn(nqn) {
        Some(format!(
            "NQN {nqn:?} is empty after \"nqn.\" or has control characters"
        ))
    } else {
        None
    }
}

impl TargetConfig {
    /// Parses and validates a TOML configuration.
    ///
    /// # Errors
    /// [`ConfigError::Parse`] or [`ConfigError::Invalid`], with origin "configuration".
    pub fn from_toml_str(s: &str) -> Result<TargetConfig, ConfigError> {
        Self::parse(s, "configuration")
    }

    /// Reads, parses and validates a TOML configuration file.
    ///
    /// # Errors
    /// [`ConfigError`] whose message starts with `path`.
    pub fn from_file(path: &Path) -> Result<TargetConfig, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        Self::parse(&text, &path.display().to_string())
    }

    fn parse(s: &str, origin: &str) -> Result<TargetConfig, ConfigError> {
        let cfg: TargetConfig = toml::from_str(s).map_err(|source| ConfigError::Parse {
            origin: origin.to_string(),
            source,
        })?;
        cfg.check().map_err(|reason| ConfigError::Invalid {
            origin: origin.to_string(),
            reason,
        })?;
        Ok(cfg)
    }

    /// The configuration used without a file: listen on `addr`:4420, one subsystem
    /// `nqn` open to any host, namespace 1 on `path` (created sparse at `size_bytes`
    /// when missing), 512-byte blocks, every other field at its default.
    pub fn default_for(addr: IpAddr, nqn: &str, path: &Path, size_bytes: u64) -> TargetConfig {
        TargetConfig {
            provider: ProviderKind::default(),
            listen: vec![ListenAddr {
                addr,
                trsvcid: DEFAULT_TRSVCID,
                tos: None,
            }],
            poll_groups: default_poll_groups(),
            subsystems: vec![SubsystemConfig {
                nqn: nqn.to_string(),
                allow_any_host: true,
                hosts: Vec::new(),
                host_keys: Vec::new(),
                serial: None,
                namespaces: vec![NamespaceConfig {
                    nsid: 1,
                    backend: NamespaceBackend::File,
                    path: path.to_path_buf(),
                    size: Some(size_bytes.to_string()),
                    block_size: None,
                    direct: false,
                    read_only: false,
                }],
            }],
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
        }
    }

    /// Checks every rule the parser checks (use after editing a parsed or default
    /// configuration).
    ///
    /// # Errors
    /// [`ConfigError::Invalid`] with origin "configuration", naming the first problem.
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.validate_as("configuration")
    }

    /// [`TargetConfig::validate`] for a configuration that came from `origin` (e.g.
    /// "command line"): the same reasons, with that origin.
    ///
    /// # Errors
    /// [`ConfigError::Invalid`] with origin `origin`, naming the first problem.
    pub fn validate_as(&self, origin: &str) -> Result<(), ConfigError> {
        self.check().map_err(|reason| ConfigError::Invalid {
            origin: origin.to_string(),
            reason,
        })
    }

    fn check(&self) -> Result<(), String> {
        if self.listen.is_empty() {
            return Err("at least one [[listen]] address is needed".into());
        }
        for (i, l) in self.listen.iter().enumerate() {
            if l.trsvcid == 0 {
                return Err(format!("listen[{i}] ({}): trsvcid 0 is not a port", l.addr));
            }
            if let Some(tos) = l.tos {
                if tos & transport::soft::ECN_MASK != 0 {
                    return Err(format!(
                        "listen[{i}] ({l}): tos {tos:#04x} sets the ECN bits (1:0), which \
                         stay the transport's: give the DSCP shifted left by 2, e.g. {:#04x}",
                        tos & !transport::soft::ECN_MASK
                    ));
                }
                if self.provider == ProviderKind::Verbs {
                    return Err(format!(
                        "listen[{i}] ({l}): tos is an option of the soft provider; on a \
                         kernel RDMA device set the RoCE traffic class with rdma_cm's \
                         default_roce_tos (`cma_roce_tos -d <device> -t {tos}`)"
                    ));
                }
            }
            if let Some(j) = self.listen[..i]
                .iter()
                .position(|e| e.socket_addr() == l.socket_addr())
            {
                return Err(format!(
                    "listen[{i}] ({l}): the same address and trsvcid as listen[{j}]; remove one"
                ));
            }
        }
        if self.poll_groups == 0 {
            return Err(
                "poll_groups 0: at least 1 poll group (a busy-polling thread) is needed; \
                 give one per core the target may use"
                    .into(),
            );
        }
        if !self.inline_data_size.is_multiple_of(16) || self.inline_data_size > MAX_INLINE_DATA_SIZE
        {
            return Err(format!(
                "inline_data_size {} must be a multiple of 16 and at most {MAX_INLINE_DATA_SIZE}",
                self.inline_data_size
            ));
        }
        if !self.mdts_bytes.is_power_of_two()
            || !(MIN_MDTS_BYTES..=MAX_MDTS_BYTES).contains(&self.mdts_bytes)
        {
            return Err(format!(
                "mdts_bytes {} must be a power of two from {MIN_MDTS_BYTES} (8K, the smallest \
                 MDTS a host can be told) to {MAX_MDTS_BYTES} (8M, the largest a 24-bit keyed \
                 SGL length carries), e.g. \"1M\"",
                self.mdts_bytes
            ));
        }
        if let Some(slab) = self.data_slab {
            check_data_slab(slab, self.mdts_bytes)?;
        }
        if !(MIN_SRQ_DEPTH..=MAX_SRQ_DEPTH).contains(&self.srq_depth) {
            return Err(format!(
                "srq_depth {} must be from {MIN_SRQ_DEPTH} to {MAX_SRQ_DEPTH} (receive buffers \
                 per poll group; default {DEFAULT_SRQ_DEPTH})",
                self.srq_depth
            ));
        }
        if !(100..=3_600_000).contains(&self.shutdown_timeout_ms) {
            return Err(format!(
                "shutdown_timeout_ms {} must be from 100 to 3600000 (the bound of a clean \
                 shutdown; default {})",
                self.shutdown_timeout_ms,
                default_shutdown_timeout_ms()
            ));
        }
        if self.max_queue_size < 2 {
            return Err(format!(
                "max_queue_size {} must be at least 2",
                self.max_queue_size
            ));
        }
        if self.subsystems.is_empty() {
            return Err("at least one [[subsystems]] entry is needed".into());
        }
        let mut nqns = HashSet::new();
        let mut paths: HashSet<&Path> = HashSet::new();
        for (i, s) in self.subsystems.iter().enumerate() {
            let at = format!("subsystems[{i}]");
            if let Some(p) = nqn_problem(&s.nqn) {
                return Err(format!("{at}: {p}"));
            }
            if s.nqn == DISCOVERY_NQN {
                return Err(format!(
                    "{at}: {DISCOVERY_NQN} is the discovery subsystem; use `discovery = true`"
                ));
            }
            if !nqns.insert(s.nqn.as_str()) {
                return Err(format!("{at}: NQN {} is used twice", s.nqn));
            }
            let at = format!("{at} ({})", s.nqn);
            for (h, host) in s.hosts.iter().enumerate() {
                if let Some(p) = nqn_problem(host) {
                    return Err(format!("{at}: hosts[{h}]: {p}"));
                }
            }
            let mut keyed = HashSet::new();
            for (h, k) in s.host_keys.iter().enumerate() {
                let at = format!("{at}: host_keys[{h}] ({})", k.hostnqn);
                if let Some(p) = nqn_problem(&k.hostnqn) {
                    return Err(format!("{at}: {p}"));
                }
                if !keyed.insert(k.hostnqn.as_str()) {
                    return Err(format!("{at}: a second entry for the same host"));
                }
                if !s.allow_any_host && !s.hosts.contains(&k.hostnqn) {
                    return Err(format!(
                        "{at}: the host is not in `hosts` and allow_any_host is false, so \
                         it could never connect; add it to `hosts`"
                    ));
                }
                k.policy().map_err(|e| format!("{at}: {e}"))?;
            }
            if !s.allow_any_host && s.hosts.is_empty() {
                return Err(format!(
                    "{at}: allow_any_host = false with no hosts: nobody could connect"
                ));
            }
            if let Some(sn) = &s.serial {
                if sn.is_empty()
                    || sn.len() > SERIAL_MAX_LEN
                    || !sn.bytes().all(|b| (0x20..=0x7E).contains(&b))
                {
                    return Err(format!(
                        "{at}: serial {sn:?} must be 1 to {SERIAL_MAX_LEN} printable ASCII characters"
                    ));
                }
            }
            let mut nsids = HashSet::new();
            for (j, n) in s.namespaces.iter().enumerate() {
                let at = format!("{at}: namespaces[{j}]");
                if n.nsid == 0 || n.nsid == u32::MAX {
                    return Err(format!(
                        "{at}: nsid {:#x} is reserved (valid: 1 to 0xFFFFFFFE)",
                        n.nsid
                    ));
                }
                if !nsids.insert(n.nsid) {
                    return Err(format!("{at}: nsid {} is used twice", n.nsid));
                }
                match n.backend {
                    NamespaceBackend::File => {
                        if n.path.as_os_str().is_empty() {
                            return Err(format!(
                                "{at}: path is empty (a file or block device, or backend = \"null\" / \"ram\")"
                            ));
                        }
                        if !paths.insert(n.path.as_path()) {
                            return Err(format!(
                                "{at}: path {} backs two namespaces",
                                n.path.display()
                            ));
                        }
                    }
                    NamespaceBackend::Null | NamespaceBackend::Ram => {
                        let kind = if n.backend == NamespaceBackend::Null {
                            "null"
                        } else {
                            "ram"
                        };
                        if !n.path.as_os_str().is_empty() {
                            return Err(format!(
                                "{at}: backend = \"{kind}\" has no file: remove path {}",
                                n.path.display()
                            ));
                        }
                        if n.size.is_none() {
                            return Err(format!(
                                "{at}: backend = \"{kind}\" needs a size, e.g. size = \"1G\""
                            ));
                        }
                        if n.direct {
                            return Err(format!(
                                "{at}: direct = true is for files and block devices, not backend = \"{kind}\""
                            ));
                        }
                    }
                }
                if let Some(b) = n.block_size {
                    if !b.is_power_of_two() || !(512..=4096).contains(&b) {
                        return Err(format!(
                            "{at}: block_size {b} must be 512, 1024, 2048 or 4096"
                        ));
                    }
                }
                if let Some(s) = &n.size {
                    let bytes = parse_size(s).map_err(|e| format!("{at}: size: {e}"))?;
                    let block = n
                        .block_size
                        .unwrap_or(crate::backend::DEFAULT_FILE_BLOCK_SIZE);
                    if bytes == 0 || bytes % u64::from(block) != 0 {
                        return Err(format!(
                            "{at}: size {s} ({bytes} bytes) must be a positive multiple of block_size {block}"
                        ));
                    }
                }
            }
        }
        Ok(())
    }
}

/// Checks a configured data slab size against MDTS: a slab smaller than one command's
/// largest transfer could never serve that command, so it is refused (rather than
/// lowering the advertised MDTS behind the operator's back).
///
/// # Errors
/// A message naming both values and the fix.
pub fn check_data_slab(slab_bytes: u64, mdts_bytes: u32) -> Result<(), String> {
    if slab_bytes < u64::from(mdts_bytes) {
        return Err(format!(
            "data_slab {slab_bytes} bytes is smaller than mdts_bytes {mdts_bytes}: a command \
             transferring MDTS bytes could never get a buffer; raise data_slab to at least \
             {mdts_bytes} or lower mdts_bytes"
        ));
    }
    if slab_bytes > MAX_DATA_SLAB_BYTES {
        return Err(format!(
            "data_slab {slab_bytes} bytes is more than {MAX_DATA_SLAB_BYTES} (1 GiB, the largest \
             io_uring fixed buffer)"
        ));
    }
    Ok(())
}

impl fmt::Display for ListenAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.socket_addr())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const EXAMPLE: &str = include_str!("../examples/target.toml");
    const EXAMPLE_PATH: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/target.toml");

    const MINIMAL: &str = r#"
[[listen]]
addr = "10.0.0.1"
[[subsystems]]
nqn = "nqn.2026-11.io.example:a"
"#;

    fn invalid(toml: &str) -> String {
        match TargetConfig::from_toml_str(toml) {
            Err(ConfigError::Invalid { reason, .. }) => reason,
            other => panic!("expected Invalid, got {other:?}"),
        }
    }

    /// MINIMAL plus extra text in the last subsystem (or top-level keys prepended).
    fn with_ns(ns: &str) -> String {
        format!("{MINIMAL}{ns}")
    }

    #[test]
    fn example_file_parses() {
        let a = TargetConfig::from_toml_str(EXAMPLE).unwrap();
        let b = TargetConfig::from_file(Path::new(EXAMPLE_PATH)).unwrap();
        assert_eq!(a, b);
        assert_eq!(a.listen.len(), 1);
        assert_eq!(a.listen[0].socket_addr(), "127.0.0.2:4420".parse().unwrap());
        assert_eq!(a.poll_groups, 1);
        assert_eq!(a.mdts_bytes, 1 << 20);
        assert_eq!(a.inline_data_size, 4096);
        assert_eq!(a.max_queue_size, 128);
        assert!(a.discovery);
        assert_eq!(a.subsystems.len(), 2);
        let s0 = &a.subsystems[0];
        assert_eq!(s0.nqn, "nqn.2026-11.io.nvmf-rdma:target");
        assert!(s0.allow_any_host);
        assert_eq!(s0.serial.as_deref(), Some("NVMFRDMA0001"));
        assert_eq!(s0.namespaces[0].nsid, 1);
        assert_eq!(s0.namespaces[0].size_bytes(), Ok(Some(1 << 30)));
        assert_eq!(s0.namespaces[0].block_size, Some(512));
        assert!(!s0.namespaces[0].direct);
        assert_eq!(s0.namespaces[1].block_size, None);
        assert_eq!(s0.namespaces[1].size_bytes(), Ok(Some(64 << 20)));
        let s1 = &a.subsystems[1];
        assert!(!s1.allow_any_host);
        assert_eq!(s1.hosts.len(), 1);
        assert_eq!(s1.namespaces[0].block_size, Some(4096));
        assert_eq!(s1.namespaces[0].size_bytes(), Ok(Some(256 << 20)));
    }

    #[test]
    fn null_and_ram_namespaces_need_a_size_and_no_path() {
        let ok = with_ns(
            "[[subsystems.namespaces]]\nnsid = 1\nbackend = \"null\"\nsize = \"1G\"\n\
             [[subsystems.namespaces]]\nnsid = 2\nbackend = \"ram\"\nsize = \"64M\"\n",
        );
        let c = TargetConfig::from_toml_str(&ok).unwrap();
        let ns = &c.subsystems[0].namespaces;
        assert_eq!(
            (ns[0].backend, ns[1].backend),
            (NamespaceBackend::Null, NamespaceBackend::Ram)
        );
        assert_eq!(c.shutdown_timeout_ms, 10_000);
        let e = invalid(&with_ns(
            "[[subsystems.namespaces]]\nnsid = 1\nbackend = \"ram\"\n",
        ));
        assert!(e.contains("needs a size"), "{e}");
        let e = invalid(&with_ns(
            "[[subsystems.namespaces]]\nnsid = 1\nbackend = \"null\"\nsize = 4096\npath = \"/x\"\n",
        ));
        assert!(e.contains("has no file"), "{e}");
        let e = invalid(&with_ns("[[subsystems.namespaces]]\nnsid = 1\n"));
        assert!(e.contains("path is empty"), "{e}");
        let e = invalid(&format!("shutdown_timeout_ms = 5\n{MINIMAL}"));
        assert!(e.contains("shutdown_timeout_ms 5"), "{e}");
    }

    #[test]
    fn cpus_and_tos_are_read_and_checked() {
        let c = TargetConfig::from_toml_str(&format!("cpus = [1, 0]\n{MINIMAL}")).unwrap();
        assert_eq!(c.cpus.unwrap().0, [1, 0]);
        let c = TargetConfig::from_toml_str(&format!("cpus = \"0x5\"\n{MINIMAL}")).unwrap();
        assert_eq!(c.cpus.unwrap().0, [0, 2]);
        let e = TargetConfig::from_toml_str(&format!("cpus = [1, 1]\n{MINIMAL}")).unwrap_err();
        assert!(e.to_string().contains("twice"), "{e}");
        let tos = "[[listen]]\naddr = \"10.0.0.1\"\ntrsvcid = 4421\ntos = 0x60\n";
        let c = TargetConfig::from_toml_str(&format!("{MINIMAL}{tos}")).unwrap();
        assert_eq!((c.listen[1].tos, c.listen[0].tos), (Some(0x60), None));
        let e = invalid(&format!("{MINIMAL}{}", tos.replace("0x60", "0x63")));
        assert!(e.contains("ECN bits") && e.contains("0x60"), "{e}");
        let e = invalid(&format!("provider = \"verbs\"\n{MINIMAL}{tos}"));
        assert!(e.contains("cma_roce_tos"), "{e}");
    }

    #[test]
    fn defaults_apply() {
        let c = TargetConfig::from_toml_str(MINIMAL).unwrap();
        assert_eq!(c.listen[0].trsvcid, 4420);
        assert_eq!(c.poll_groups, 1);
        assert_eq!(c.inline_data_size, 4096);
        assert_eq!(c.mdts_bytes, 1 << 20);
        assert_eq!(c.max_queue_size, 128);
        assert_eq!(c.kato_ms, 120_000);
        assert!(c.discovery);
        assert!(c.subsystems[0].allow_any_host);
        assert!(c.subsystems[0].hosts.is_empty());
        assert!(c.subsystems[0].namespaces.is_empty());
        let c = TargetConfig::from_toml_str(&with_ns(
            "[[subsystems.namespaces]]\nnsid = 3\npath = \"x.img\"\nsize = 1048576\n",
        ))
        .unwrap();
        let n = &c.subsystems[0].namespaces[0];
        assert_eq!((n.nsid, n.block_size, n.direct), (3, None, false));
        assert_eq!(n.size.as_deref(), Some("1048576"));
        assert_eq!(n.size_bytes(), Ok(Some(1 << 20)));
        let c = TargetConfig::from_toml_str(&with_ns(
            "[[subsystems.namespaces]]\nnsid = 1\npath = \"/dev/loop7\"\ndirect = true\n",
        ))
        .unwrap();
        let n = &c.subsystems[0].namespaces[0];
        assert!(n.direct);
        assert_eq!(
            n.options(),
            Ok(crate::backend::NamespaceOptions {
                create_size_bytes: None,
                block_size: None,
                direct: true,
                read_only: false,
            })
        );
    }

    #[test]
    fn default_for_is_valid() {
        let c = TargetConfig::default_for(
            "127.0.0.2".parse().unwrap(),
            "nqn.2026-11.io.nvmf-rdma:target",
            Path::new("nvmf-target.img"),
            1 << 30,
        );
        c.validate().unwrap();
        assert_eq!(
            c.subsystems[0].namespaces[0].size_bytes(),
            Ok(Some(1 << 30))
        );
        assert_eq!(c.listen[0].trsvcid, 4420);
        // It survives a TOML round trip.
        let text = toml::to_string(&c).unwrap();
        assert_eq!(TargetConfig::from_toml_str(&text).unwrap(), c);
    }

    #[test]
    fn host_keys_parse_and_bad_ones_are_named() {
        const KEY: &str = "DHHC-1:00:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh+KfiaR:";
        let good = format!(
            "{MINIMAL}allow_any_host = false\nhosts = [\"nqn.h:1\"]\n\
             [[subsystems.host_keys]]\nhostnqn = \"nqn.h:1\"\ndhchap_key = \"{KEY}\"\n\
             dhchap_ctrl_key = \"{KEY}\"\ndhchap_hash = [\"sha384\", \"hmac(sha256)\"]\n\
             dhchap_dhgroup = [\"ffdhe2048\", \"null\"]\n"
        );
        let c = TargetConfig::from_toml_str(&good).unwrap();
        let p = c.subsystems[0].host_keys[0].policy().unwrap();
        assert_eq!(p.hashes, [dhchap::HashId::Sha384, dhchap::HashId::Sha256]);
        assert_eq!(
            p.dhgroups,
            [dhchap::DhGroupId::Ffdhe2048, dhchap::DhGroupId::Null]
        );
        assert!(p.ctrl_key.is_some());
        let entry = |extra: &str| {
            format!("{MINIMAL}[[subsystems.host_keys]]\nhostnqn = \"nqn.h:1\"\n{extra}")
        };
        let r = invalid(&entry("dhchap_key = \"DHHC-1:00:AAECAwQF:\"\n"));
        assert!(
            r.contains("host_keys[0]") && r.contains("32, 48 or 64"),
            "{r}"
        );
        let r = invalid(&entry(&format!(
            "dhchap_key = \"{KEY}\"\ndhchap_hash = [\"md5\"]\n"
        )));
        assert!(r.contains("dhchap_hash") && r.contains("md5"), "{r}");
        let r = invalid(&entry(&format!(
            "dhchap_key = \"{KEY}\"\ndhchap_dhgroup = [\"modp\"]\n"
        )));
        assert!(r.contains("dhchap_dhgroup"), "{r}");
        let r = invalid(&format!(
            "{MINIMAL}allow_any_host = false\nhosts = [\"nqn.h:2\"]\n\
             [[subsystems.host_keys]]\nhostnqn = \"nqn.h:1\"\ndhchap_key = \"{KEY}\"\n"
        ));
        assert!(r.contains("not in `hosts`"), "{r}");
    }

    #[test]
    fn parse_size_units() {
        for (s, v) in [
            ("0", 0u64),
            ("4096", 4096),
            ("4096B", 4096),
            ("1K", 1024),
            ("1k", 1024),
            ("4KiB", 4096),
            ("512M", 512 << 20),
            ("512MB", 512 << 20),
            ("1G", 1 << 30),
            ("1 GiB", 1 << 30),
            (" 2gb ", 2 << 30),
            ("3T", 3 << 40),
            ("16777215T", 16_777_215u64 << 40),
        ] {
            assert_eq!(parse_size(s), Ok(v), "{s}");
        }
        for s in [
            "",
            "G",
            "1.5G",
            "-1",
            "1X",
            "1GiBs",
            "1 G B",
            "16777216T",
            "99999999999999999999",
        ] {
            let e = parse_size(s).unwrap_err();
            assert_eq!(e.input, s);
            assert!(e.to_string().contains("invalid size"), "{e}");
        }
    }

    #[test]
    fn nqn_rules() {
        let ok = format!("nqn.{}", "a".repeat(NQN_MAX_LEN - 4));
        assert_eq!(ok.len(), 223);
        assert!(is_valid_nqn(&ok));
        let long = format!("{ok}b");
        let r = invalid(&format!(
            "[[listen]]\naddr = \"::1\"\n[[subsystems]]\nnqn = \"{long}\"\n"
        ));
        assert!(r.contains("224 bytes"), "{r}");
        let r = invalid(
            "[[listen]]\naddr = \"::1\"\n[[subsystems]]\nnqn = \"iqn.2001-04.com.example\"\n",
        );
        assert!(r.contains("does not start with \"nqn.\""), "{r}");
        let r = invalid(&format!(
            "[[listen]]\naddr = \"::1\"\n[[subsystems]]\nnqn = \"{DISCOVERY_NQN}\"\n"
        ));
        assert!(r.contains("discovery"), "{r}");
        let r = invalid(&format!(
            "{MINIMAL}[[subsystems]]\nnqn = \"nqn.2026-11.io.example:a\"\n"
        ));
        assert!(r.contains("used twice"), "{r}");
        let r = invalid(&format!(
            "{MINIMAL}[[subsystems]]\nnqn = \"nqn.x:b\"\nallow_any_host = false\n"
        ));
        assert!(r.contains("nobody could connect"), "{r}");
        let r = invalid(&format!(
            "{MINIMAL}[[subsystems]]\nnqn = \"nqn.x:b\"\nallow_any_host = false\nhosts = [\"host1\"]\n"
        ));
        assert!(r.contains("hosts[0]"), "{r}");
    }

    #[test]
    fn structural_errors() {
        assert!(
            invalid("[[listen]]\naddr = \"10.0.0.1\"\n").contains("at least one [[subsystems]]")
        );
        assert!(invalid("[[subsystems]]\nnqn = \"nqn.x:a\"\n").contains("[[listen]]"));
        assert!(invalid(&format!("poll_groups = 0\n{MINIMAL}")).contains("poll_groups"));
        assert!(invalid(&format!("mdts_bytes = 3000\n{MINIMAL}")).contains("mdts_bytes"));
        assert!(invalid(&format!("mdts_bytes = \"16M\"\n{MINIMAL}")).contains("mdts_bytes"));
        assert!(invalid(&format!("inline_data_size = 100\n{MINIMAL}")).contains("inline_data_size"));
        assert!(invalid(&format!("max_queue_size = 1\n{MINIMAL}")).contains("max_queue_size"));
        assert!(invalid(&with_ns("serial = \"ABCDEFGHIJKLMNOPQRSTU\"\n")).contains("serial"));
        let c =
            TargetConfig::from_toml_str(&format!("mdts_bytes = \"256KiB\"\n{MINIMAL}")).unwrap();
        assert_eq!(c.mdts_bytes, 256 << 10);
        // MDTS 0 means "no limit": 4 KiB cannot be advertised, 8 KiB (MDTS 1) can.
        assert!(invalid(&format!("mdts_bytes = 4096\n{MINIMAL}")).contains("8K"));
        let c = TargetConfig::from_toml_str(&format!("mdts_bytes = \"8K\"\n{MINIMAL}")).unwrap();
        assert_eq!(c.mdts_bytes, 8 << 10);
        let c = TargetConfig::from_toml_str(&format!("mdts_bytes = \"8M\"\n{MINIMAL}")).unwrap();
        assert_eq!(c.mdts_bytes, MAX_MDTS_BYTES);
    }

    #[test]
    fn several_listen_addresses() {
        let c = TargetConfig::from_toml_str(&format!(
            "{MINIMAL}[[listen]]\naddr = \"10.0.0.1\"\ntrsvcid = 4421\n[[listen]]\naddr = \"::1\"\n"
        ))
        .unwrap();
        let got: Vec<String> = c.listen.iter().map(|l| l.to_string()).collect();
        assert_eq!(got, ["10.0.0.1:4420", "10.0.0.1:4421", "[::1]:4420"]);
        let r = invalid(&format!(
            "{MINIMAL}[[listen]]\naddr = \"10.0.0.2\"\n[[listen]]\naddr = \"10.0.0.1\"\ntrsvcid = 4420\n"
        ));
        assert!(
            r.contains("listen[2]") && r.contains("listen[0]") && r.contains("10.0.0.1:4420"),
            "{r}"
        );
    }

    #[test]
    fn command_line_origin_keeps_the_reason() {
        let mut c = TargetConfig::default_for(
            "127.0.0.2".parse().unwrap(),
            "nqn.2026-11.io.nvmf-rdma:target",
            Path::new("nvmf-target.img"),
            1 << 30,
        );
        c.poll_groups = 0;
        let from_file = invalid(&format!("poll_groups = 0\n{MINIMAL}"));
        let e = c.validate_as("command line").unwrap_err();
        assert_eq!(e.to_string(), format!("command line: {from_file}"));
    }

    #[test]
    fn unknown_keys_are_refused_by_name_at_every_level() {
        for (text, key) in [
            (format!("kato = 5\n{MINIMAL}"), "kato"),
            (
                "[[listen]]\naddr = \"10.0.0.1\"\nport = 4420\n[[subsystems]]\nnqn = \"nqn.x:a\"\n"
                    .to_string(),
                "port",
            ),
            (format!("{MINIMAL}allowed_hosts = []\n"), "allowed_hosts"),
            (
                format!(
                    "{MINIMAL}[[subsystems.namespaces]]\nnsid = 1\npath = \"a\"\nreadonly = true\n"
                ),
                "readonly",
            ),
        ] {
            let e = TargetConfig::from_toml_str(&text).unwrap_err();
            assert!(matches!(e, ConfigError::Parse { .. }), "{e}");
            let msg = e.to_string();
            assert!(
                msg.contains(&format!("unknown field `{key}`")),
                "{key}: {msg}"
            );
        }
    }

    #[test]
    fn data_slab_is_sized_or_automatic() {
        assert_eq!(
            TargetConfig::from_toml_str(MINIMAL).unwrap().data_slab,
            None
        );
        let c = TargetConfig::from_toml_str(&format!("data_slab = \"4M\"\n{MINIMAL}")).unwrap();
        assert_eq!(c.data_slab, Some(4 << 20));
        let c = TargetConfig::from_toml_str(&format!("data_slab = 2097152\n{MINIMAL}")).unwrap();
        assert_eq!(c.data_slab, Some(2 << 20));
        // Smaller than MDTS: refused, naming both and the fix.
        let r = invalid(&format!("data_slab = \"512K\"\n{MINIMAL}"));
        assert!(
            r.contains("data_slab 524288") && r.contains("mdts_bytes 1048576"),
            "{r}"
        );
        assert!(r.contains("lower mdts_bytes"), "{r}");
        let c = TargetConfig::from_toml_str(&format!(
            "data_slab = \"512K\"\nmdts_bytes = \"256K\"\n{MINIMAL}"
        ))
        .unwrap();
        assert_eq!(c.data_slab, Some(512 << 10));
        assert!(invalid(&format!("data_slab = \"2G\"\n{MINIMAL}")).contains("1 GiB"));
        assert!(matches!(
            TargetConfig::from_toml_str(&format!("data_slab = \"lots\"\n{MINIMAL}")),
            Err(ConfigError::Parse { .. })
        ));
    }

    #[test]
    fn namespace_errors() {
        let ns = |body: &str| with_ns(&format!("[[subsystems.namespaces]]\n{body}\n"));
        let r = invalid(&ns("nsid = 0\npath = \"a\""));
        assert!(r.contains("namespaces[0]") && r.contains("reserved"), "{r}");
        let r = invalid(&ns("nsid = 4294967295\npath = \"a\""));
        assert!(r.contains("reserved"), "{r}");
        let r = invalid(&format!(
            "{}[[subsystems.namespaces]]\nnsid = 1\npath = \"b\"\n",
            ns("nsid = 1\npath = \"a\"")
        ));
        assert!(
            r.contains("namespaces[1]") && r.contains("nsid 1 is used twice"),
            "{r}"
        );
        let r = invalid(&format!(
            "{}[[subsystems.namespaces]]\nnsid = 2\npath = \"a\"\n",
            ns("nsid = 1\npath = \"a\"")
        ));
        assert!(r.contains("backs two namespaces"), "{r}");
        let r = invalid(&ns("nsid = 1\npath = \"a\"\nblock_size = 1000"));
        assert!(r.contains("block_size 1000"), "{r}");
        let r = invalid(&ns("nsid = 1\npath = \"a\"\nsize = \"1.5G\""));
        assert!(r.contains("invalid size"), "{r}");
        let r = invalid(&ns("nsid = 1\npath = \"a\"\nsize = 1000"));
        assert!(r.contains("multiple of block_size 512"), "{r}");
        let r = invalid(&ns("nsid = 1\npath = \"a\"\nsize = \"1M\"\nblock_size = 4096\n[[subsystems.namespaces]]\nnsid = 2\npath = \"b\"\nsize = \"6K\"\nblock_size = 4096"));
        assert!(r.contains("namespaces[1]") && r.contains("6K"), "{r}");
        // Same NSID in two subsystems is fine.
        TargetConfig::from_toml_str(&format!(
            "{}[[subsystems]]\nnqn = \"nqn.x:b\"\n[[subsystems.namespaces]]\nnsid = 1\npath = \"b\"\n",
            ns("nsid = 1\npath = \"a\"")
        ))
        .unwrap();
    }

    #[test]
    fn parse_errors_name_the_line() {
        let e = TargetConfig::from_toml_str(&format!("{MINIMAL}typo_field = 1\n")).unwrap_err();
        assert!(matches!(e, ConfigError::Parse { .. }), "{e}");
        let msg = e.to_string();
        assert!(msg.starts_with("configuration:"), "{msg}");
        assert!(msg.contains("typo_field"), "{msg}");
        let e = TargetConfig::from_toml_str("[[listen]]\naddr = \"10.0.0.256\"\n").unwrap_err();
        assert!(matches!(e, ConfigError::Parse { .. }), "{e}");
        assert!(e.to_string().contains("line 2"), "{e}");
        let e = TargetConfig::from_toml_str("[[listen]\n").unwrap_err();
        assert!(matches!(e, ConfigError::Parse { .. }), "{e}");
    }

    #[test]
    fn file_errors_name_the_file() {
        let dir = tempfile::tempdir_in(std::env::temp_dir()).unwrap();
        let missing = dir.path().join("absent.toml");
        let e = TargetConfig::from_file(&missing).unwrap_err();
        assert!(matches!(e, ConfigError::Read { .. }));
        assert!(
            e.to_string().contains(&missing.display().to_string()),
            "{e}"
        );
        let bad = dir.path().join("bad.toml");
        std::fs::write(&bad, "[[listen]]\naddr = \"10.0.0.1\"\n").unwrap();
        let e = TargetConfig::from_file(&bad).unwrap_err();
        assert!(matches!(e, ConfigError::Invalid { .. }));
        assert!(e.to_string().starts_with(&bad.display().to_string()), "{e}");
        std::fs::write(&bad, "listen = 3\n").unwrap();
        let e = TargetConfig::from_file(&bad).unwrap_err();
        assert!(matches!(e, ConfigError::Parse { .. }));
        assert!(e.to_string().starts_with(&bad.display().to_string()), "{e}");
    }
}
