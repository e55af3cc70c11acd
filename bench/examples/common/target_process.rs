//! The target binary as a child process of an example: started on an address with a
//! 64 MiB file namespace in a temporary directory, its log kept there, stopped with
//! SIGTERM on drop. Shared by the examples that measure a host against a real target
//! process (`#[path]`-included, as examples have no library of their own).
// Each example uses part of it.
#![allow(dead_code)]
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

/// The subsystem NQN the target binary serves by default.
pub const SUBNQN: &str = "nqn.2026-11.io.nvmf-rdma:target";

/// A running target process; SIGTERM and wait on drop.
pub struct TargetProcess {
    child: Child,
    log: PathBuf,
    _dir: tempfile::TempDir,
}

impl TargetProcess {
    /// Starts `bin --addr addr --size 64M --file DIR/ns.img`, its stderr in
    /// `DIR/target.log`.
    ///
    /// Errors: a message naming what failed (`example` prefixes it).
    pub fn start(example: &str, bin: &Path, addr: Ipv4Addr) -> Result<TargetProcess, String> {
        let dir =
            tempfile::tempdir().map_err(|e| format!("{example}: temporary directory: {e}"))?;
        let log = dir.path().join("target.log");
        let stderr = std::fs::File::create(&log)
            .map_err(|e| format!("{example}: {}: {e}", log.display()))?;
        let child = Command::new(bin)
            .args(["--addr", &addr.to_string(), "--size", "64M", "--file"])
            .arg(dir.path().join("ns.img"))
            .stdout(Stdio::null())
            .stderr(stderr)
            .spawn()
            .map_err(|e| format!("{example}: starting {}: {e}", bin.display()))?;
        Ok(TargetProcess {
            child,
            log,
            _dir: dir,
        })
    }

    /// The log's path.
    pub fn log_path(&self) -> &Path {
        &self.log
    }

    /// Stops the target (SIGTERM, wait) and returns its whole log.
    pub fn stop(mut self) -> String {
        self.terminate();
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    fn terminate(&mut self) {
        // SAFETY: kill(2) on our own child's pid.
        unsafe { libc::kill(self.child.id() as libc::pid_t, libc::SIGTERM) };
        let _ = self.child.wait();
    }
}

impl Drop for TargetProcess {
    fn drop(&mut self) {
        self.terminate();
    }
}
