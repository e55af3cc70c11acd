//! The soft provider's open devices in other processes: each answers on its info
//! socket ([`transport::soft::info_socket`]) with one JSON snapshot of its counters and
//! QPs; this module finds those sockets, reads each and skips stale ones.
//!
//! A socket nobody answers (connection refused: its process died without removing
//! it) is skipped silently; its file is removed when its PID no longer exists and the
//! file belongs to this user.
use std::io::Read as _;
use std::os::unix::fs::MetadataExt;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use transport::soft::info_socket::parse_socket_name;

use super::Counter;

/// How long a device may take to answer.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(2);

/// One QP of a live soft device, as `rdma res show qp` shows a kernel QP (plus its
/// UDP source port).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SoftQp {
    /// The local QP number (`lqpn`).
    pub qpn: u32,
    /// `RC`, `UC` or `UD`.
    #[serde(rename = "type")]
    pub qp_type: String,
    /// `RESET`, `INIT`, `RTR`, `RTS`, `SQD`, `SQE`, `ERR`: what the last `modify_qp` set.
    pub state: String,
    /// The device's address.
    pub local_ip: String,
    /// The peer's address (RC, UC once connected); `None` for UD.
    pub remote_ip: Option<String>,
    /// The peer QP number (`rqpn`), 0 before RTR and for UD.
    pub dest_qpn: u32,
    /// The RoCEv2 UDP source port (0xC000..=0xFFFF) once the QP has a send path.
    pub udp_sport: Option<u16>,
    /// The path MTU in bytes.
    pub mtu: u32,
    /// The poll group (receive queue) of the QP.
    pub poll_group: u32,
}

/// One open soft device of some process, as its info socket answered.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SoftLive {
    /// The snapshot format's version (1).
    pub version: u32,
    /// `soft`.
    pub device: String,
    /// The device's address.
    pub ip: String,
    /// The process that opened it, and its name (`/proc/PID/comm`).
    pub pid: u32,
    /// See [`SoftLive::pid`].
    pub process: String,
    /// Its poll groups.
    pub poll_groups: u32,
    /// Its active path MTU in bytes.
    pub path_mtu: u32,
    /// The device counters (rxe's `hw_counters` names, `injected_*` for faults).
    pub counters: Vec<Counter>,
    /// Its QPs, by QPN.
    pub qps: Vec<SoftQp>,
    /// The socket it answered on.
    #[serde(default)]
    pub socket: PathBuf,
}

/// Reads one info socket: `Ok(None)` for a stale one (refused or vanished; removed
/// when its PID is gone and it is ours).
///
/// # Errors
/// A live socket whose answer does not read or parse (named, with the cause).
pub fn read_socket(path: &Path) -> Result<Option<SoftLive>, String> {
    let mut s = match UnixStream::connect(path) {
        Ok(s) => s,
        Err(e)
            if matches!(
                e.kind(),
                std::io::ErrorKind::ConnectionRefused | std::io::ErrorKind::NotFound
            ) =>
        {
            remove_if_stale(path);
            return Ok(None);
        }
        Err(e) => return Err(format!("{}: {e}", path.display())),
    };
    let _ = s.set_read_timeout(Some(ANSWER_TIMEOUT));
    let mut buf = String::new();
    s.read_to_string(&mut buf)
        .map_err(|e| format!("{}: reading the answer: {e}", path.display()))?;
    let mut live: SoftLive = serde_json::from_str(&buf).map_err(|e| {
        format!(
            "{}: the answer is not a soft device snapshot: {e}",
            path.display()
        )
    })?;
    live.socket = path.to_path_buf();
    Ok(Some(live))
}

/// Removes a refused socket file whose PID no longer runs, if this user owns it.
fn remove_if_stale(path: &Path) {
    let Some((_, pid)) = path
        .file_name()
        .and_then(|n| n.to_str())
        .and_then(parse_socket_name)
    else {
        return;
    };
    let ours = std::fs::symlink_metadata(path)
        .map(|m| m.uid() == nix::unistd::getuid().as_raw())
        .unwrap_or(false);
    if ours && !Path::new(&format!("/proc/{pid}")).exists() {
        let _ = std::fs::remove_file(path);
    }
}

/// Every live soft device whose socket is in `dir` (normally
/// [`transport::soft::info_socket::info_dir`]), by socket name; a missing directory
/// is no device. A live socket that answers nonsense is reported on stderr and
/// skipped.
pub fn read_dir(dir: &Path) -> Vec<SoftLive> {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut paths: Vec<PathBuf> = rd
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .and_then(parse_socket_name)
                .is_some()
        })
        .collect();
    paths.sort();
    paths
        .iter()
        .filter_map(|p| match read_socket(p) {
            Ok(l) => l,
            Err(e) => {
                eprintln!("rdma-info: skipping a soft device's info socket: {e}");
                None
            }
        })
        .collect()
}
