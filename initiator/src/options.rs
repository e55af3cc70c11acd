//! What a host connects with ([`HostOptions`]) and its defaults, and who the host is
//! ([`HostIdentity`]: the host NQN and host ID, from `/etc/nvme/hostnqn` and
//! `/etc/nvme/hostid` as nvme-cli reads them).
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use crate::error::HostError;
use crate::pool::RemoteAccess;

/// Where nvme-cli and Linux keep the host NQN (one line).
pub const HOSTNQN_PATH: &str = "/etc/nvme/hostnqn";
/// Where nvme-cli and Linux keep the host ID (a UUID, one line).
pub const HOSTID_PATH: &str = "/etc/nvme/hostid";
/// The NQN prefix of a host NQN made from a UUID (NVMe Base 2.x §4.5).
pub const UUID_NQN_PREFIX: &str = "nqn.2014-08.org.nvmexpress:uuid:";

/// Where a [`HostIdentity`] came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IdentitySource {
    /// `/etc/nvme/hostnqn` and/or `/etc/nvme/hostid` (the other one derived from it).
    Files,
    /// Generated at random for this process (no files): a target's allow-list cannot
    /// name a host whose identity changes with every start.
    Generated,
}

/// The host NQN and host ID a host connects with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostIdentity {
    /// The host NQN.
    pub hostnqn: String,
    /// The host ID (HOSTID of the Connect data, a UUID).
    pub hostid: [u8; 16],
    /// Where they came from.
    pub source: IdentitySource,
}

impl HostIdentity {
    /// The identity in the files `hostnqn_path` and `hostid_path` (nvme-cli's), each one
    /// line, surrounding white space ignored: `None` when neither exists. With only the
    /// NQN, a `nqn.2014-08.org.nvmexpress:uuid:<UUID>` NQN gives the host ID; with only
    /// the ID, the NQN is made from it.
    ///
    /// # Errors
    /// [`IdentityError`]: a file that cannot be read, an empty or over-long (223 bytes)
    /// NQN, a host ID that is not a UUID, or an NQN with no UUID and no host ID file;
    /// the message names the file and how to fix it.
    pub fn from_files(
        hostnqn_path: &Path,
        hostid_path: &Path,
    ) -> Result<Option<HostIdentity>, IdentityError> {
        let read = |p: &Path| match std::fs::read_to_string(p) {
            Ok(s) => Ok(Some(s.trim().to_string())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(source) => Err(IdentityError::Read {
                path: p.to_path_buf(),
                source: Arc::new(source),
            }),
        };
        let nqn = read(hostnqn_path)?;
        let id = match read(hostid_path)? {
            Some(s) => Some(parse_uuid(&s).ok_or_else(|| IdentityError::NotUuid {
                path: hostid_path.to_path_buf(),
                value: s.clone(),
            })?),
            None => None,
        };
        let (hostnqn, hostid) = match (nqn, id) {
            (None, None) => return Ok(None),
            (Some(n), _) if n.is_empty() || n.len() > nvme::NVME_NQN_MAX => {
                return Err(IdentityError::NqnLength {
                    path: hostnqn_path.to_path_buf(),
                    len: n.len(),
                })
            }
            (Some(n), Some(id)) => (n, id),
            (Some(n), None) => {
                let id = n
                    .strip_prefix(UUID_NQN_PREFIX)
                    .and_then(parse_uuid)
                    .ok_or_else(|| IdentityError::NqnWithoutUuid {
                        nqn_path: hostnqn_path.to_path_buf(),
                        nqn: n.clone(),
                        hostid_path: hostid_path.to_path_buf(),
                    })?;
                (n, id)
            }
            (None, Some(id)) => (uuid_nqn(&id), id),
        };
        Ok(Some(HostIdentity {
            hostnqn,
            hostid,
            source: IdentitySource::Files,
        }))
    }

    /// This machine's identity: [`HostIdentity::from_files`] of [`HOSTNQN_PATH`] and
    /// [`HOSTID_PATH`], else (no files, or files that do not parse, which is logged as a
    /// warning) a random one, made once per process and logged once at info with how
    /// to make it permanent.
    pub fn system() -> HostIdentity {
        match HostIdentity::from_files(Path::new(HOSTNQN_PATH), Path::new(HOSTID_PATH)) {
            Ok(Some(id)) => id,
            Ok(None) => generated(None),
            Err(e) => generated(Some(e.to_string())),
        }
    }
}

/// The process's random identity, made (and logged) once.
fn generated(problem: Option<String>) -> HostIdentity {
    static ID: OnceLock<HostIdentity> = OnceLock::new();
    ID.get_or_init(|| {
        let hostid = *uuid::Uuid::new_v4().as_bytes();
        let id = HostIdentity {
            hostnqn: uuid_nqn(&hostid),
            hostid,
            source: IdentitySource::Generated,
        };
        let why = problem.unwrap_or_else(|| format!("no {HOSTNQN_PATH} or {HOSTID_PATH}"));
        tracing::info!(
            hostnqn = %id.hostnqn,
            "{why}: this process uses a random host NQN and host ID, so a target's \
             allow-list cannot name it across restarts; make them permanent with \
             `nvme gen-hostnqn > {HOSTNQN_PATH}` (or set HostOptions::hostnqn/hostid)"
        );
        id
    })
    .clone()
}

/// The UUID of its 8-4-4-4-12 hex form (either case; the `uuid` crate's parser, which
/// also takes the braced, URN and 32-digit forms), `None` if `s` is not one.
fn parse_uuid(s: &str) -> Option<[u8; 16]> {
    uuid::Uuid::try_parse(s).ok().map(|u| *u.as_bytes())
}

/// The host NQN made from host ID `id` (NVMe Base 2.x §4.5: the UUID form).
fn uuid_nqn(id: &[u8; 16]) -> String {
    format!(
        "{UUID_NQN_PREFIX}{}",
        uuid::Uuid::from_bytes(*id).hyphenated()
    )
}

/// Why `/etc/nvme/hostnqn` or `/etc/nvme/hostid` could not give the host's identity
/// ([`HostIdentity::from_files`]).
#[derive(Clone, Debug, thiserror::Error)]
pub enum IdentityError {
    /// A file exists but cannot be read.
    #[error("reading {}: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// The operating system's error.
        source: Arc<std::io::Error>,
    },
    /// The host ID file does not hold a UUID.
    #[error(
        "{}: {value:?} is not a UUID (8-4-4-4-12 hex digits); write one with `uuidgen > {}`",
        path.display(), path.display()
    )]
    NotUuid {
        /// The host ID file.
        path: PathBuf,
        /// What it holds.
        value: String,
    },
    /// The host NQN is empty or longer than 223 bytes.
    #[error(
        "{}: a host NQN of {len} bytes (1 to 223); write one with `nvme gen-hostnqn > {}`",
        path.display(), path.display()
    )]
    NqnLength {
        /// The host NQN file.
        path: PathBuf,
        /// Its length in bytes.
        len: usize,
    },
    /// The host NQN names no UUID and there is no host ID file to take it from.
    #[error(
        "{} holds {nqn:?}, which names no UUID, and {} is missing: write the host ID \
         there (`uuidgen > {}`)",
        nqn_path.display(), hostid_path.display(), hostid_path.display()
    )]
    NqnWithoutUuid {
        /// The host NQN file.
        nqn_path: PathBuf,
        /// What it holds.
        nqn: String,
        /// The missing host ID file.
        hostid_path: PathBuf,
    },
}

/// Who polls the async [`crate::Host`]'s queues and wakes the tasks whose commands
/// completed (see [`crate::host`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Completions {
    /// Dedicated poll threads ([`HostOptions::poll_threads`]) poll the queues and wake
    /// each waiting task directly.
    #[default]
    PollThread,
    /// The awaiting tasks poll their queue themselves from the tokio runtime (no
    /// thread of the library on the data path; the runtime's worker busy-polls while a
    /// command is outstanding).
    Runtime,
}

/// Options of a host connection (one controller, one admin queue, `io_queues` I/O
/// queues), for [`crate::Host::connect`] and [`crate::SyncHost::connect`].
#[derive(Clone, Debug)]
pub struct HostOptions {
    /// The target's address and RDMA CM port (4420 for NVMe/RDMA).
    pub traddr: SocketAddr,
    /// The local address to open the RDMA device on; `None`: the source address the
    /// kernel would use toward `traddr`.
    pub local_ip: Option<IpAddr>,
    /// The NVM subsystem NQN to connect to.
    pub subnqn: String,
    /// This host's NQN (default: [`HostIdentity::system`]'s: `/etc/nvme/hostnqn`, or a
    /// random `nqn.2014-08.org.nvmexpress:uuid:<hostid>` for the process, logged).
    pub hostnqn: String,
    /// This host's identifier (HOSTID of the Connect data, a UUID; default
    /// [`HostIdentity::system`]'s).
    pub hostid: [u8; 16],
    /// I/O queues to create (default 1).
    pub io_queues: u16,
    /// Entries per I/O queue (HSQSIZE + 1; default 128, so 127 commands in flight).
    pub queue_depth: u16,
    /// Keep Alive Timeout in ms (default 10000; 0 disables Keep Alive).
    pub kato_ms: u32,
    /// Data bytes per command at most (default 1 MiB; also capped by the controller's
    /// MDTS); larger requests are split.
    pub max_io_bytes: usize,
    /// Bytes of the host's registered buffer pool, shared by all queues (see
    /// [`crate::pool`]); `None` (the default): [`crate::pool::DEFAULT_POOL_BYTES`], or
    /// less on a provider that pins memory when `RLIMIT_MEMLOCK` allows less
    /// ([`crate::pool::pool_bytes`]).
    pub buffer_pool_bytes: Option<usize>,
    /// How the target reaches the buffers; `None` (the default): memory windows where
    /// the device has them, else the pool's own rkey (logged as a warning: weaker
    /// isolation). See [`RemoteAccess`].
    pub remote_access: Option<RemoteAccess>,
    /// Who polls the async host's queues (default [`Completions::PollThread`]).
    pub completions: Completions,
    /// Poll threads of [`Completions::PollThread`] (default 1): I/O queue `i` is polled
    /// by thread `i % poll_threads` (named `nvmf-poll<t>`).
    pub poll_threads: u16,
    /// How long connecting a queue (CM exchange, Fabrics Connect) may take (5 s).
    pub connect_timeout: Duration,
    /// How long an admin command may take (default 10 s).
    pub admin_timeout: Duration,
    /// Wait before each reconnect attempt after the controller was lost (Linux's
    /// `reconnect_delay`, default 10 s); see [`crate::lifecycle`].
    pub reconnect_delay: Duration,
    /// How long the async [`crate::Host`] keeps reconnecting after a loss before it
    /// gives the controller up (Linux's `ctrl_loss_tmo`, default 600 s; `Some(0)`: no
    /// reconnect, `None`: forever).
    pub ctrl_loss_tmo: Option<Duration>,
    /// How long held I/O waits for a reconnect before it fails (Linux's
    /// `fast_io_fail_tmo`; default `None`, off: held until `ctrl_loss_tmo`).
    pub fast_io_fail_tmo: Option<Duration>,
    /// How long an I/O command of the async [`crate::Host`] may be outstanding before
    /// the host asks the controller to Abort it, and, if that does not help, resets
    /// the controller (Linux's `io_timeout`, default 30 s; `None`: never).
    pub io_timeout: Option<Duration>,
    /// The host's DH-HMAC-CHAP secret (`DHHC-1:xx:...:`, Linux's `--dhchap-secret`):
    /// used when the target asks a queue to authenticate (NVMe Base 2.x §8.13); `None`
    /// (the default): such a target is refused with
    /// [`HostError::AuthenticationRequired`].
    pub dhchap_secret: Option<dhchap::Secret>,
    /// The controller's secret (`--dhchap-ctrl-secret`): when set, the host also
    /// authenticates the controller (bidirectional); needs `dhchap_secret`.
    pub dhchap_ctrl_secret: Option<dhchap::Secret>,
}

impl HostOptions {
    /// Defaults for `traddr` and `subnqn`: this machine's host NQN and ID
    /// ([`HostIdentity::system`]), one I/O queue of depth 128, KATO 10 s, 1 MiB per
    /// command, the default buffer pool, Linux's reconnect defaults (10 s, 600 s, no
    /// fast I/O fail).
    pub fn new(traddr: SocketAddr, subnqn: impl Into<String>) -> Self {
        let id = HostIdentity::system();
        HostOptions {
            traddr,
            local_ip: None,
            subnqn: subnqn.into(),
            hostnqn: id.hostnqn,
            hostid: id.hostid,
            io_queues: 1,
            queue_depth: 128,
            kato_ms: 10_000,
            max_io_bytes: 1 << 20,
            buffer_pool_bytes: None,
            remote_access: None,
            completions: Completions::default(),
            poll_threads: 1,
            connect_timeout: Duration::from_secs(5),
            admin_timeout: Duration::from_secs(10),
            reconnect_delay: crate::lifecycle::DEFAULT_RECONNECT_DELAY,
            ctrl_loss_tmo: Some(crate::lifecycle::DEFAULT_CTRL_LOSS_TMO),
            fast_io_fail_tmo: None,
            io_timeout: Some(crate::lifecycle::DEFAULT_IO_TIMEOUT),
            dhchap_secret: None,
            dhchap_ctrl_secret: None,
        }
    }

    /// The lifecycle's options of these: `reconnect_delay`, `ctrl_loss_tmo`,
    /// `fast_io_fail_tmo` and `kato_ms`.
    pub fn reconnect_options(&self) -> crate::lifecycle::ReconnectOptions {
        crate::lifecycle::ReconnectOptions {
            reconnect_delay: self.reconnect_delay,
            ctrl_loss_tmo: self.ctrl_loss_tmo,
            fast_io_fail_tmo: self.fast_io_fail_tmo,
            kato_ms: self.kato_ms,
        }
    }

    /// `local_ip`, or the source address the kernel picks toward `traddr` (a UDP
    /// socket connected there reports it; nothing is sent).
    pub fn resolve_local_ip(&self) -> Result<IpAddr, HostError> {
        if let Some(ip) = self.local_ip {
            return Ok(ip);
        }
        let bind: SocketAddr = if self.traddr.is_ipv4() {
            "0.0.0.0:0"
        } else {
            "[::]:0"
        }
        .parse()
        .map_err(|e| HostError::Device(format!("{e}")))?;
        let s = UdpSocket::bind(bind).map_err(|e| HostError::Device(format!("UDP socket: {e}")))?;
        s.connect(self.traddr)
            .map_err(|e| HostError::Device(format!("no route to {}: {e}", self.traddr)))?;
        Ok(s.local_addr()
            .map_err(|e| HostError::Device(e.to_string()))?
            .ip())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults() {
        let o = HostOptions::new("127.0.0.2:4420".parse().unwrap(), "nqn.x");
        assert!(o.hostnqn.starts_with("nqn.2014-08.org.nvmexpress:uuid:"));
        assert_eq!(
            o.hostnqn.len(),
            "nqn.2014-08.org.nvmexpress:uuid:".len() + 36
        );
        // No /etc/nvme here: the process's generated identity, the same for every host.
        if !Path::new(HOSTNQN_PATH).exists() && !Path::new(HOSTID_PATH).exists() {
            assert_eq!(o.hostid[6] >> 4, 4);
            let again = HostOptions::new("127.0.0.2:4420".parse().unwrap(), "nqn.y");
            assert_eq!((again.hostnqn, again.hostid), (o.hostnqn.clone(), o.hostid));
        }
        assert_eq!(
            (o.io_queues, o.queue_depth, o.kato_ms, o.max_io_bytes),
            (1, 128, 10_000, 1 << 20)
        );
        assert_eq!(uuid_nqn(&[0xcf; 16]).len(), UUID_NQN_PREFIX.len() + 36);
        // Toward a loopback address the kernel answers with a loopback source.
        assert!(o.resolve_local_ip().unwrap().is_loopback());
    }

    #[test]
    fn identity_from_nvme_cli_files() {
        let d = tempfile::tempdir().unwrap();
        let (nqn, id) = (d.path().join("hostnqn"), d.path().join("hostid"));
        assert!(matches!(HostIdentity::from_files(&nqn, &id), Ok(None)));
        let uuid = "2a5a8c1e-3b2f-4d7e-9f10-0123456789ab";
        let want_id = parse_uuid(uuid).unwrap();
        // Only the NQN, of the UUID form: the host ID is its UUID.
        std::fs::write(&nqn, format!("{UUID_NQN_PREFIX}{uuid}\n")).unwrap();
        let got = HostIdentity::from_files(&nqn, &id).unwrap().unwrap();
        assert_eq!(
            (got.hostnqn.as_str(), got.hostid, got.source),
            (
                format!("{UUID_NQN_PREFIX}{uuid}").as_str(),
                want_id,
                IdentitySource::Files
            )
        );
        // Both files: taken as they are.
        std::fs::write(&nqn, "nqn.2026-12.io.example:host-7\n").unwrap();
        std::fs::write(&id, format!("  {}\n", uuid.to_uppercase())).unwrap();
        let got = HostIdentity::from_files(&nqn, &id).unwrap().unwrap();
        assert_eq!(
            (got.hostnqn.as_str(), got.hostid),
            ("nqn.2026-12.io.example:host-7", want_id)
        );
        // Only the ID: the NQN is made from it.
        std::fs::remove_file(&nqn).unwrap();
        let got = HostIdentity::from_files(&nqn, &id).unwrap().unwrap();
        assert_eq!(got.hostnqn, format!("{UUID_NQN_PREFIX}{uuid}"));
        // Bad contents are answered with the file and the fix.
        std::fs::write(&id, "not-a-uuid").unwrap();
        let e = HostIdentity::from_files(&nqn, &id).unwrap_err().to_string();
        assert!(e.contains("is not a UUID") && e.contains("uuidgen"), "{e}");
        std::fs::remove_file(&id).unwrap();
        std::fs::write(&nqn, "nqn.2026-12.io.example:no-uuid").unwrap();
        let e = HostIdentity::from_files(&nqn, &id).unwrap_err().to_string();
        assert!(e.contains("names no UUID"), "{e}");
        assert_eq!(
            uuid_nqn(&want_id),
            format!("{UUID_NQN_PREFIX}{uuid}"),
            "lower case, hyphenated"
        );
        assert_eq!(parse_uuid("1234"), None);
    }
}
