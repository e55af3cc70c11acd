//! The embedded target `nvmf-bench` runs without `--traddr`: an in-process
//! `nvmf-target` serving one namespace on a file laid out as fio lays out its files
//! (data everywhere, no holes), on 127.0.0.2 with the host on 127.0.0.3 (the next
//! pairs when another run holds them).
//!
//! The file never outlives the process, however it ends (Ctrl-C, SIGKILL, a panic):
//! it is created unlinked (`O_TMPFILE`, or created and unlinked at once where the file
//! system lacks it: [`tempfile::tempfile_in`]), and the target opens it through
//! `/proc/self/fd/N`, which reaches the open file without a name.
use std::fs::File;
use std::io::Write;
use std::net::{IpAddr, Ipv4Addr};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

use nvmf_target::config::TargetConfig;
use transport::soft::FaultConfig;

/// Subsystem NQN of the embedded target.
pub const EMBEDDED_NQN: &str = "nqn.2026-11.io.nvmf-rdma:bench";

/// Bytes the layout writes at a time.
const LAYOUT_CHUNK: usize = 1 << 20;

/// A running embedded target and the address the host should use.
pub struct EmbeddedTarget {
    /// The target (its device, counters, shutdown).
    pub target: nvmf_target::TargetHandle,
    /// The host's local address, paired with the target's.
    pub host_ip: IpAddr,
    /// The namespace file, unlinked; kept open for the process's life.
    file: File,
}

impl std::fmt::Debug for EmbeddedTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EmbeddedTarget")
            .field("listen", &self.target.listen_addr())
            .field("host_ip", &self.host_ip)
            .finish()
    }
}

/// Checks `--embedded-size` (before anything is started).
///
/// Errors: zero or not a multiple of 4096, with the fix.
pub fn check_size(size: u64) -> Result<(), String> {
    if size == 0 || !size.is_multiple_of(4096) {
        return Err(format!(
            "--embedded-size {size} must be a positive multiple of 4096 (e.g. 64M, 1G)"
        ));
    }
    Ok(())
}

/// Creates an unlinked file in `dir` (see the module docs).
///
/// Errors: a message naming the directory, the reason and the fix.
pub fn create_unlinked(dir: &Path) -> Result<File, String> {
    tempfile::tempfile_in(dir).map_err(|e| {
        format!(
            "creating the embedded target's file in {}: {e}; give an existing, writable \
             directory with --embedded-dir (or set TMPDIR)",
            dir.display()
        )
    })
}

/// The path through which this process reaches the open `file`.
pub fn proc_fd_path(file: &File) -> PathBuf {
    PathBuf::from(format!("/proc/self/fd/{}", file.as_raw_fd()))
}

/// Writes `size` bytes of pseudo-random data to `file` (fio's layout: no holes, so
/// reads hit real blocks), 1 MiB at a time, and syncs it. Stops early, with an error,
/// once `stop` is set.
///
/// Errors: the write or sync failed (e.g. ENOSPC), or `stop` was set.
pub fn lay_out(file: &mut File, size: u64, stop: Option<&AtomicBool>) -> std::io::Result<()> {
    let mut buf = vec![0u8; LAYOUT_CHUNK];
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    for w in buf.chunks_exact_mut(8) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        w.copy_from_slice(&x.to_le_bytes());
    }
    let mut left = size;
    let mut n = 0u64;
    while left > 0 {
        if stop.is_some_and(|s| s.load(Ordering::Relaxed)) {
            return Err(std::io::Error::new(
                std::io::ErrorKind::Interrupted,
                "interrupted",
            ));
        }
        buf[..8].copy_from_slice(&n.to_le_bytes());
        let k = left.min(buf.len() as u64) as usize;
        file.write_all(&buf[..k])?;
        left -= k as u64;
        n += 1;
    }
    file.sync_data()
}

impl EmbeddedTarget {
    /// The namespace file (unlinked), open for the process's life.
    pub fn file(&self) -> &File {
        &self.file
    }

    /// Lays out a `size`-byte namespace file in `dir` (unlinked) and starts the target
    /// on it, with a `data_slab`-byte data slab (`None`: sized from RLIMIT_MEMLOCK),
    /// `faults` injected on its device and its RoCE MTU `roce_mtu` (`None`: from the
    /// interface). `name` prefixes the layout message (the job
    /// name, as fio's "Laying out IO file").
    ///
    /// Errors: a message naming what failed (file, layout, addresses, target).
    pub fn start(
        dir: &Path,
        size: u64,
        name: &str,
        data_slab: Option<u64>,
        faults: Option<FaultConfig>,
        roce_mtu: Option<transport::verbs::Mtu>,
        stop: Option<&AtomicBool>,
    ) -> Result<Self, String> {
        check_size(size)?;
        let mut file = create_unlinked(dir)?;
        eprintln!(
            "{name}: Laying out IO file ({} MiB) in {} (unlinked: removed when nvmf-bench exits)",
            size >> 20,
            dir.display()
        );
        lay_out(&mut file, size, stop).map_err(|e| {
            format!(
                "laying out the embedded target's file in {}: {e}",
                dir.display()
            )
        })?;
        let path = proc_fd_path(&file);
        // 127.0.0.2/.3 by default; the next pairs when another run holds them.
        let mut last_err = String::new();
        for pair in 0..16u8 {
            let tip = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2 + 2 * pair));
            let host_ip = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 3 + 2 * pair));
            // The host's address must be free too (another run's host, or a remote
            // benchmark's --host-traddr, may hold it while its target address is free).
            if let Err(e) = std::net::UdpSocket::bind((host_ip, transport::wire::ROCE_V2_UDP_DPORT))
            {
                last_err = format!("the host address {host_ip}: UDP 4791: {e}");
                continue;
            }
            let mut cfg = TargetConfig::default_for(tip, EMBEDDED_NQN, &path, size);
            cfg.data_slab = data_slab;
            cfg.roce_mtu = roce_mtu.map(transport::verbs::Mtu::bytes);
            if let Err(e) = cfg.validate_as("--data-slab") {
                return Err(format!("embedded target: {e}"));
            }
            match nvmf_target::start_with_faults(&cfg, faults) {
                Ok(target) => {
                    return Ok(EmbeddedTarget {
                        target,
                        host_ip,
                        file,
                    });
                }
                Err(e @ nvmf_target::TargetError::Device { .. }) => last_err = e.to_string(),
                // The target's advice names its configuration keys; here it is a flag.
                Err(nvmf_target::TargetError::Memlock(e)) => {
                    return Err(format!(
                        "embedded target: {}",
                        e.with_smaller(Some("a smaller --data-slab (at least 1M)"))
                    ))
                }
                Err(e) => return Err(format!("embedded target: {e}")),
            }
        }
        Err(format!("embedded target: {last_err}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_file_has_no_name_and_is_reachable_through_proc() {
        let dir = tempfile::tempdir().unwrap();
        let mut f = create_unlinked(dir.path()).unwrap();
        lay_out(&mut f, 3 << 20, None).unwrap();
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
        let p = proc_fd_path(&f);
        let meta = std::fs::metadata(&p).unwrap();
        assert!(meta.is_file());
        assert_eq!(meta.len(), 3 << 20);
        // Reopening through the path reaches the same data (what the target does).
        let again = std::fs::read(&p).unwrap();
        assert_eq!(again.len(), 3 << 20);
        assert_eq!(&again[(1 << 20)..(1 << 20) + 8], &1u64.to_le_bytes());
        assert!(again[8..].iter().any(|&b| b != 0), "no holes");
    }

    #[test]
    fn bad_sizes_and_directories_are_refused_with_the_fix() {
        assert!(check_size(0).unwrap_err().contains("multiple of 4096"));
        assert!(check_size(4097).is_err());
        assert!(check_size(1 << 20).is_ok());
        let e = create_unlinked(Path::new("/nonexistent/dir")).unwrap_err();
        assert!(
            e.contains("/nonexistent/dir") && e.contains("--embedded-dir"),
            "{e}"
        );
        let stop = AtomicBool::new(true);
        let dir = tempfile::tempdir().unwrap();
        let mut f = create_unlinked(dir.path()).unwrap();
        assert_eq!(
            lay_out(&mut f, 1 << 20, Some(&stop)).unwrap_err().kind(),
            std::io::ErrorKind::Interrupted
        );
    }
}
