//! The live `nvmf connect` processes of this user: one JSON file per holder in the
//! state directory, so that `list`, `list-subsys` and `disconnect` can find them.
//!
//! A userspace host has no kernel controller that outlives it: the controller lives
//! as long as the `nvmf connect` process that holds it. That process writes
//! `<pid>.json` ([`Holder`]) when it is connected and removes it when it disconnects;
//! readers drop files whose process is gone (a holder killed with SIGKILL).
//! The directory is `$NVMF_STATE_DIR`, else `$XDG_RUNTIME_DIR/nvmf`, else
//! `/tmp/nvmf-<uid>`, created with mode 0700.
use std::fs;
use std::io;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// One namespace of a held controller.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct HeldNamespace {
    /// Namespace ID.
    pub nsid: u32,
    /// Size in logical blocks (NSZE).
    pub nsze: u64,
    /// Logical block size in bytes.
    pub lba_size: u32,
    /// ANA Group ID (0: the controller reports no ANA).
    pub anagrpid: u32,
    /// The ANA state of its group as last read (`optimized`, `non-optimized`,
    /// `inaccessible`, `persistent-loss`, `change`), or `""` without ANA.
    pub ana_state: String,
    /// The local block device serving it (`nvmf connect --ublk`: `/dev/ublkbN`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ublk: Option<String>,
}

/// What a live `nvmf connect` process holds.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct Holder {
    /// The holder's process ID (`disconnect` sends it SIGTERM).
    pub pid: u32,
    /// Subsystem NQN.
    pub subnqn: String,
    /// Target address.
    pub traddr: String,
    /// RDMA CM port.
    pub trsvcid: u16,
    /// The local address its RDMA device is open on.
    pub host_traddr: String,
    /// Host NQN.
    pub hostnqn: String,
    /// Host ID (UUID text).
    pub hostid: String,
    /// Controller ID.
    pub cntlid: u16,
    /// Model Number, trimmed.
    pub model: String,
    /// Serial Number, trimmed.
    pub serial: String,
    /// Firmware Revision, trimmed.
    pub firmware: String,
    /// The lifecycle state as last written (`live`).
    pub state: String,
    /// The active namespaces.
    pub namespaces: Vec<HeldNamespace>,
}

impl Holder {
    /// The name `list` shows for namespace `nsid` of this holder: its ublk block
    /// device where `connect --ublk` made one, else a name that points at the
    /// process (no device node exists).
    pub fn device_name(&self, nsid: u32) -> String {
        if let Some(d) = self
            .namespaces
            .iter()
            .find(|n| n.nsid == nsid)
            .and_then(|n| n.ublk.clone())
        {
            return d;
        }
        format!("nvmf-{}n{nsid}", self.pid)
    }
}

/// The state directory (see the module docs).
pub fn dir() -> PathBuf {
    if let Some(d) = std::env::var_os("NVMF_STATE_DIR") {
        return PathBuf::from(d);
    }
    if let Some(d) = std::env::var_os("XDG_RUNTIME_DIR") {
        return Path::new(&d).join("nvmf");
    }
    PathBuf::from(format!("/tmp/nvmf-{}", nix::unistd::getuid()))
}

fn file_of(pid: u32) -> PathBuf {
    dir().join(format!("{pid}.json"))
}

/// Writes (or rewrites) `h` as this holder's file, atomically (a temporary file
/// renamed). Errors: the directory or file cannot be written.
pub fn publish(h: &Holder) -> io::Result<PathBuf> {
    let d = dir();
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&d)?;
    let tmp = d.join(format!(".{}.tmp", h.pid));
    let mut f = fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)?;
    serde_json::to_writer_pretty(&mut f, h).map_err(io::Error::other)?;
    drop(f);
    let path = file_of(h.pid);
    fs::rename(&tmp, &path)?;
    Ok(path)
}

/// Removes this process's holder file (nothing if there is none).
pub fn withdraw(pid: u32) {
    let _ = fs::remove_file(file_of(pid));
}

fn alive(pid: u32) -> bool {
    let Ok(p) = i32::try_from(pid) else {
        return false;
    };
    // Signal 0: existence and permission only.
    match nix::sys::signal::kill(nix::unistd::Pid::from_raw(p), None) {
        Ok(()) => true,
        Err(nix::errno::Errno::EPERM) => true,
        Err(_) => false,
    }
}

/// The live holders, by PID; files of processes that are gone, and files that do not
/// parse, are removed.
pub fn holders() -> Vec<Holder> {
    let Ok(rd) = fs::read_dir(dir()) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for e in rd.flatten() {
        let p = e.path();
        if p.extension().and_then(|x| x.to_str()) != Some("json") {
            continue;
        }
        let parsed = fs::read(&p)
            .ok()
            .and_then(|b| serde_json::from_slice::<Holder>(&b).ok());
        match parsed {
            Some(h) if alive(h.pid) => out.push(h),
            _ => {
                let _ = fs::remove_file(&p);
            }
        }
    }
    out.sort_by_key(|h| h.pid);
    out
}
