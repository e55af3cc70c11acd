//! The device's info socket: each open soft device answers `rdma-info` (another
//! process) on a Unix stream socket with one JSON snapshot of its counters and QPs
//! ([`super::qp_registry`]), then closes the connection. One small thread per device
//! blocks in accept; nothing runs on the data path.
//!
//! - Directory: `$XDG_RUNTIME_DIR/soft-roce`, else `/tmp/soft-roce-$UID`
//!   ([`info_dir`]), created mode 0700 (only its user can connect).
//! - Name: `<ip>-<pid>-<n>.sock` (`n` counts the devices this process opened), so a
//!   reader can tell a stale file's PID ([`parse_socket_name`]).
//! - Snapshot (one JSON object, [`INFO_VERSION`]): `version`, `device` (`soft`), `ip`,
//!   `pid`, `process` (`/proc/self/comm`), `poll_groups`, `path_mtu`, `counters`
//!   (`[{"name","value"}]`, rxe's names), `qps` (`[{"qpn","type","state","local_ip",
//!   "remote_ip","dest_qpn","udp_sport","mtu","poll_group"}]`, `remote_ip` and
//!   `udp_sport` null until set).
//!
//! Failing to create the socket is logged at debug level and the device works
//! without one. The file is removed when the device is dropped.
use std::fmt::Write as _;
use std::io::Write as _;
use std::net::IpAddr;
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use super::device::{DeviceCounters, DeviceCountersSnapshot};
use super::qp_registry::{qp_state_name, qp_type_name, QpRegistry};

/// The snapshot format's version (the `version` field).
pub const INFO_VERSION: u32 = 1;

/// The environment variable that turns the info socket off (`off` or `0`).
pub const INFO_SOCKET_ENV: &str = "NVMF_SOFT_INFO_SOCKET";

/// The directory of this user's info sockets: `$XDG_RUNTIME_DIR/soft-roce` when
/// `XDG_RUNTIME_DIR` is set (and not empty), else `/tmp/soft-roce-<uid>`.
pub fn info_dir() -> PathBuf {
    match std::env::var_os("XDG_RUNTIME_DIR").filter(|v| !v.is_empty()) {
        Some(d) => Path::new(&d).join("soft-roce"),
        None => PathBuf::from(format!("/tmp/soft-roce-{}", nix::unistd::getuid())),
    }
}

/// The device IP and PID of an info socket's file name (`<ip>-<pid>-<n>.sock`);
/// `None` for another name.
pub fn parse_socket_name(name: &str) -> Option<(IpAddr, u32)> {
    let stem = name.strip_suffix(".sock")?;
    let mut it = stem.rsplitn(3, '-');
    let _n: u32 = it.next()?.parse().ok()?;
    let pid: u32 = it.next()?.parse().ok()?;
    let ip: IpAddr = it.next()?.parse().ok()?;
    Some((ip, pid))
}

/// Every counter of a snapshot with its name (rxe's `hw_counters` names where one
/// exists, `injected_*` for the fault layer's).
pub fn named_counters(c: &DeviceCountersSnapshot) -> [(&'static str, u64); 16] {
    [
        ("sent_pkts", c.sent_pkts),
        ("rcvd_pkts", c.rcvd_pkts),
        ("sent_datagrams", c.sent_datagrams),
        ("rcvd_datagrams", c.rcvd_datagrams),
        ("icrc_errors", c.icrc_errors),
        ("icrc_ipv4_id_solved", c.icrc_ipv4_id_solved),
        ("malformed_pkts", c.malformed_pkts),
        ("unknown_qp_pkts", c.unknown_qp_pkts),
        ("tx_dropped_pkts", c.tx_dropped_pkts),
        ("rx_truncated_datagrams", c.rx_truncated_datagrams),
        ("tx_payload_bytes_zero_copy", c.tx_payload_bytes_zero_copy),
        ("tx_payload_bytes_copied", c.tx_payload_bytes_copied),
        ("injected_drops", c.injected_drops),
        ("injected_dups", c.injected_dups),
        ("injected_reorders", c.injected_reorders),
        ("injected_corruptions", c.injected_corruptions),
    ]
}

/// What the snapshot says of the device besides its counters and QPs.
#[derive(Clone, Debug)]
pub(crate) struct InfoHeader {
    pub ip: IpAddr,
    pub poll_groups: u32,
    pub path_mtu: u32,
}

/// A JSON string literal of `s` (RFC 8259 §7 escapes).
fn json_str(o: &mut String, s: &str) {
    o.push('"');
    for ch in s.chars() {
        match ch {
            '"' => o.push_str("\\\""),
            '\\' => o.push_str("\\\\"),
            c if (c as u32) < 0x20 => {
                let _ = write!(o, "\\u{:04x}", c as u32);
            }
            c => o.push(c),
        }
    }
    o.push('"');
}

/// The snapshot's JSON (see the module docs).
pub(crate) fn snapshot_json(
    h: &InfoHeader,
    process: &str,
    counters: &DeviceCounters,
    qps: &QpRegistry,
) -> String {
    let mut o = String::with_capacity(1024);
    let _ = write!(
        o,
        "{{\"version\":{INFO_VERSION},\"device\":\"soft\",\"ip\":\"{}\",\"pid\":{},\"process\":",
        h.ip,
        std::process::id()
    );
    json_str(&mut o, process);
    let _ = write!(
        o,
        ",\"poll_groups\":{},\"path_mtu\":{},\"counters\":[",
        h.poll_groups, h.path_mtu
    );
    for (i, (n, v)) in named_counters(&counters.snapshot()).iter().enumerate() {
        let sep = if i == 0 { "" } else { "," };
        let _ = write!(o, "{sep}{{\"name\":\"{n}\",\"value\":{v}}}");
    }
    o.push_str("],\"qps\":[");
    for (i, q) in qps.snapshot().iter().enumerate() {
        let sep = if i == 0 { "" } else { "," };
        let remote = q
            .remote_ip
            .map_or_else(|| "null".to_string(), |ip| format!("\"{ip}\""));
        let sport = q
            .udp_sport
            .map_or_else(|| "null".to_string(), |p| p.to_string());
        let _ = write!(
            o,
            "{sep}{{\"qpn\":{},\"type\":\"{}\",\"state\":\"{}\",\"local_ip\":\"{}\",\
             \"remote_ip\":{remote},\"dest_qpn\":{},\"udp_sport\":{sport},\"mtu\":{},\
             \"poll_group\":{}}}",
            q.qpn,
            qp_type_name(q.qp_type),
            qp_state_name(q.state),
            q.local_ip,
            q.dest_qpn,
            q.mtu,
            q.poll_group
        );
    }
    o.push_str("]}\n");
    o
}

/// This process's name as `/proc/self/comm` gives it (empty when unreadable).
fn process_name() -> String {
    std::fs::read_to_string("/proc/self/comm")
        .map(|s| s.trim_end().to_string())
        .unwrap_or_default()
}

/// A device's listening info socket and its thread; dropping it stops the thread and
/// removes the file.
#[derive(Debug)]
pub(crate) struct InfoServer {
    path: PathBuf,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

/// Creates the directory (0700) and binds the socket; errors say which step failed.
fn bind(ip: IpAddr) -> std::io::Result<(PathBuf, UnixListener)> {
    static SEQ: AtomicU32 = AtomicU32::new(0);
    let dir = info_dir();
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&dir)?;
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700))?;
    let n = SEQ.fetch_add(1, Ordering::Relaxed);
    let path = dir.join(format!("{ip}-{}-{n}.sock", std::process::id()));
    let _ = std::fs::remove_file(&path);
    let l = UnixListener::bind(&path)?;
    Ok((path, l))
}

impl InfoServer {
    /// Starts the info socket of a device; `None` (logged at debug level) when it is
    /// turned off ([`INFO_SOCKET_ENV`]) or cannot be created.
    pub(crate) fn start(
        header: InfoHeader,
        counters: Arc<DeviceCounters>,
        qps: Arc<QpRegistry>,
    ) -> Option<InfoServer> {
        if matches!(
            std::env::var(INFO_SOCKET_ENV).as_deref(),
            Ok("off") | Ok("0")
        ) {
            return None;
        }
        let (path, listener) = match bind(header.ip) {
            Ok(x) => x,
            Err(e) => {
                tracing::debug!(
                    "soft RoCE on {}: no info socket in {} ({e}); rdma-info will not \
                     list this device's QPs",
                    header.ip,
                    info_dir().display()
                );
                return None;
            }
        };
        let stop = Arc::new(AtomicBool::new(false));
        let stop2 = stop.clone();
        let process = process_name();
        let thread = std::thread::Builder::new()
            .name(format!("soft-info {}", header.ip))
            .spawn(move || {
                for conn in listener.incoming() {
                    if stop2.load(Ordering::Relaxed) {
                        break;
                    }
                    let Ok(mut s) = conn else { continue };
                    let _ = s.set_write_timeout(Some(Duration::from_secs(1)));
                    let j = snapshot_json(&header, &process, &counters, &qps);
                    let _ = s.write_all(j.as_bytes());
                }
            });
        match thread {
            Ok(t) => Some(InfoServer {
                path,
                stop,
                thread: Some(t),
            }),
            Err(e) => {
                tracing::debug!("soft RoCE info socket thread: {e}");
                let _ = std::fs::remove_file(&path);
                None
            }
        }
    }
}

impl Drop for InfoServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        // Wakes the thread out of accept; it sees `stop` and returns.
        let woke = UnixStream::connect(&self.path).is_ok();
        let _ = std::fs::remove_file(&self.path);
        if let Some(t) = self.thread.take() {
            if woke {
                let _ = t.join();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn socket_names_parse_back() {
        assert_eq!(
            parse_socket_name("127.0.3.1-4242-0.sock"),
            Some(("127.0.3.1".parse().unwrap(), 4242))
        );
        assert_eq!(
            parse_socket_name("fd00::1-7-12.sock"),
            Some(("fd00::1".parse().unwrap(), 7))
        );
        assert_eq!(parse_socket_name("junk.sock"), None);
        assert_eq!(parse_socket_name("127.0.0.1-1-0.txt"), None);
    }

    #[test]
    fn json_strings_are_escaped() {
        let mut o = String::new();
        json_str(&mut o, "a\"b\\c\n");
        assert_eq!(o, "\"a\\\"b\\\\c\\u000a\"");
    }
}
