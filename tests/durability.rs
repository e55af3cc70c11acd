//! What the target promises about durability and a full file system, checked on a
//! real block device: each test makes an ext4 file system on a loop device (losetup,
//! mkfs.ext4, mount: root only), puts the namespace file on it and drives the target
//! from a host over loopback.
//!
//! - Volatile write cache off (Set Features 06h, WCE = 0): every acknowledged write is
//!   durable, so the loop device sees at least one flush per write (ext4 makes each
//!   `RWF_DSYNC` write durable with a cache flush); with the cache on, writes are
//!   acknowledged from the page cache and the device sees (almost) no flush. A kill -9
//!   of the target could not show this: the page cache outlives the process.
//! - A full file system under a sparse namespace: the write fails with Capacity
//!   Exceeded (81h), as Linux nvmet answers ENOSPC, and the target's log names the
//!   subsystem, the namespace and its file.
//!
//! Run as root: `cargo test -p nvmf-rdma --test durability -- --ignored` (`.ci/run`).
//! Without root the tests fail, saying so.
mod common;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex, OnceLock};

use common::{ip, pattern, require_root, run, sh};
use nvme::status::GenericStatus;
use nvme::{FeatureId, Sqe, Status};
use nvmf_initiator::{DataDir, HostOptions, NvmeRdmaQueue, SyncHost};
use nvmf_target::config::TargetConfig;

const NQN: &str = "nqn.2026-11.io.nvmf-rdma:durability";

/// One test at a time: each has a target and a loop device.
static SERIAL: Mutex<()> = Mutex::new(());

/// An ext4 file system of `size_mib` MiB on a loop device over a file in the temp
/// directory, mounted on a fresh directory; unmounted and detached when dropped.
struct LoopFs {
    _dir: tempfile::TempDir,
    dev: String,
    mnt: PathBuf,
}

impl LoopFs {
    fn new(size_mib: u64) -> LoopFs {
        let dir = tempfile::tempdir_in(std::env::temp_dir()).expect("temp dir");
        let img = dir.path().join("fs.img");
        std::fs::File::create(&img)
            .and_then(|f| f.set_len(size_mib << 20))
            .expect("image file");
        let dev = sh("losetup", &["--find", "--show", img.to_str().unwrap()]);
        let mnt = dir.path().join("mnt");
        std::fs::create_dir(&mnt).unwrap();
        let fs = LoopFs {
            _dir: dir,
            dev,
            mnt,
        };
        sh("mkfs.ext4", &["-q", "-F", &fs.dev]);
        sh("mount", &["-t", "ext4", &fs.dev, fs.mnt.to_str().unwrap()]);
        fs
    }

    /// Flush requests the device completed: field 16 ("flush I/Os") of
    /// `/sys/block/<dev>/stat` (Documentation/block/stat.rst).
    fn flushes(&self) -> u64 {
        let name = Path::new(&self.dev).file_name().unwrap().to_str().unwrap();
        let stat = std::fs::read_to_string(format!("/sys/block/{name}/stat")).unwrap();
        let fields: Vec<u64> = stat
            .split_whitespace()
            .map(|f| f.parse().unwrap())
            .collect();
        assert!(
            fields.len() >= 17,
            "kernel without flush statistics: {stat}"
        );
        fields[15]
    }
}

impl Drop for LoopFs {
    fn drop(&mut self) {
        // The kernel releases an io_uring's registered files after the ring is gone
        // (deferred work), so the mount may stay busy for a moment.
        let umount = |lazy: bool| {
            let mut c = Command::new("umount");
            if lazy {
                c.arg("-l");
            }
            c.arg(&self.mnt)
                .stderr(std::process::Stdio::null())
                .status()
                .is_ok_and(|s| s.success())
        };
        let mut done = false;
        for _ in 0..50 {
            if umount(false) {
                done = true;
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        if !done {
            eprintln!("{} still busy after 5 s: lazy unmount", self.mnt.display());
            umount(true);
        }
        let _ = Command::new("losetup").args(["-d", &self.dev]).status();
    }
}

/// Everything the target logs in this process, as plain text.
fn log_buffer() -> Arc<Mutex<Vec<u8>>> {
    static LOG: OnceLock<Arc<Mutex<Vec<u8>>>> = OnceLock::new();
    LOG.get_or_init(|| {
        let buf = Arc::new(Mutex::new(Vec::new()));
        let w = buf.clone();
        let _ = tracing_subscriber::fmt()
            .with_env_filter("warn")
            .with_ansi(false)
            .with_writer(move || Tee(w.clone()))
            .try_init();
        buf
    })
    .clone()
}

struct Tee(Arc<Mutex<Vec<u8>>>);

impl Write for Tee {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(b);
        std::io::stderr().write(b)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// A target on 127.0.0.`last` whose namespace 1 is a sparse file of `ns_bytes` at
/// `path`, and a host on 127.0.0.`last + 1` with one I/O queue, KATO 0.
fn target_and_host(last: u8, path: &Path, ns_bytes: u64) -> (nvmf_target::TargetHandle, SyncHost) {
    let cfg = TargetConfig::default_for(ip(last), NQN, path, ns_bytes);
    let target = nvmf_target::start(&cfg).expect("target starts");
    let mut o = HostOptions::new(target.listen_addr(), NQN);
    o.local_ip = Some(ip(last + 1));
    o.kato_ms = 0;
    o.queue_depth = 8;
    let host = SyncHost::connect(&o).expect("host connects");
    (target, host)
}

fn set_vwc(host: &mut SyncHost, enabled: bool) {
    let c = host.controller();
    let (cqe, _) = c
        .admin_command(
            Sqe::set_features(0, FeatureId::VolatileWriteCache, u32::from(enabled)),
            DataDir::None,
            |_| {},
        )
        .expect("Set Features Volatile Write Cache");
    assert!(cqe.status().is_success());
    let (cqe, _) = c
        .admin_command(
            Sqe::get_features(0, FeatureId::VolatileWriteCache),
            DataDir::None,
            |_| {},
        )
        .expect("Get Features Volatile Write Cache");
    assert_eq!(cqe.dw0() & 1, u32::from(enabled));
}

/// `count` 4 KiB writes at queue depth 1 from 4 KiB block `first`; each is
/// acknowledged (success) before the next is sent.
fn writes(q: &mut NvmeRdmaQueue, first: u64, count: u64, tag: u8) {
    for k in first..first + count {
        let data = pattern(k * 4096, 4096, tag);
        let (_, r) = run(
            q,
            Sqe::write(0, 1, k * 8, 7, false),
            DataDir::HostToController { len: 4096 },
            &data,
        );
        assert!(r.expect("write").status().is_success());
    }
}

#[test]
#[ignore = "needs root: loop device with ext4 (losetup, mkfs.ext4, mount); .ci/run runs it"]
fn volatile_write_cache_off_makes_each_acknowledged_write_durable() {
    require_root("makes an ext4 file system on a loop device (losetup, mkfs.ext4, mount)");
    let _s = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    log_buffer();
    let fs = LoopFs::new(256);
    let (target, mut host) = target_and_host(236, &fs.mnt.join("ns1.img"), 64 << 20);
    const N: u64 = 64;
    // Identify Controller keeps reporting a volatile write cache (VWC 1).
    assert_eq!(host.controller().info().vwc & 1, 1);
    let q = 0;
    // Cache on (the default): acknowledged from the page cache.
    let before = fs.flushes();
    writes(&mut host.io_queues()[q], 0, N, 1);
    let cached_on = fs.flushes() - before;
    // Cache off: each write is durable before its completion.
    set_vwc(&mut host, false);
    let before = fs.flushes();
    writes(&mut host.io_queues()[q], N, N, 2);
    let cache_off = fs.flushes() - before;
    // Rewrites of written blocks too (no allocation, so no journal commit to hide in).
    let before = fs.flushes();
    writes(&mut host.io_queues()[q], 0, N, 3);
    let cache_off_rewrite = fs.flushes() - before;
    // Write Zeroes with the cache off: durable too.
    let before = fs.flushes();
    for k in 0..16u64 {
        let (_, r) = run(
            &mut host.io_queues()[q],
            Sqe::write_zeroes(0, 1, (4 * N + k) * 8, 7, false),
            DataDir::None,
            &[],
        );
        assert!(r.expect("write zeroes").status().is_success());
    }
    let zeroes_off = fs.flushes() - before;
    // Cache on again: back to the page cache; Flush still makes it durable.
    set_vwc(&mut host, true);
    let before = fs.flushes();
    writes(&mut host.io_queues()[q], 2 * N, N, 4);
    let cached_again = fs.flushes() - before;
    let before = fs.flushes();
    let (_, r) = run(
        &mut host.io_queues()[q],
        Sqe::flush(0, 1),
        DataDir::None,
        &[],
    );
    assert!(r.expect("flush").status().is_success());
    let flush = fs.flushes() - before;
    eprintln!(
        "loop device flushes: {N} writes with VWC=1: {cached_on}; VWC=0: {cache_off} \
         (rewrites {cache_off_rewrite}); 16 Write Zeroes with VWC=0: {zeroes_off}; \
         VWC=1 again: {cached_again}; one Flush: {flush}"
    );
    assert!(cache_off >= N, "VWC=0: {cache_off} flushes for {N} writes");
    assert!(
        cache_off_rewrite >= N,
        "VWC=0: {cache_off_rewrite} flushes for {N} rewrites"
    );
    assert!(
        zeroes_off >= 16,
        "VWC=0: {zeroes_off} flushes for 16 Write Zeroes"
    );
    assert!(
        cached_on < N / 4,
        "VWC=1: {cached_on} flushes for {N} writes"
    );
    assert!(
        cached_again < N / 4,
        "VWC=1: {cached_again} flushes for {N} writes"
    );
    assert!(flush >= 1, "Flush reached the device");
    // Every acknowledged write is there.
    drop(host);
    drop(target);
    let file = std::fs::read(fs.mnt.join("ns1.img")).unwrap();
    for (first, tag) in [(0u64, 3u8), (N, 2), (2 * N, 4)] {
        for k in first..first + N {
            let off = (k * 4096) as usize;
            assert!(
                file[off..off + 4096] == pattern(k * 4096, 4096, tag)[..],
                "block {k}"
            );
        }
    }
}

#[test]
#[ignore = "needs root: loop device with ext4 (losetup, mkfs.ext4, mount); .ci/run runs it"]
fn full_file_system_answers_capacity_exceeded_and_the_log_names_the_namespace() {
    require_root("makes an ext4 file system on a loop device (losetup, mkfs.ext4, mount)");
    let _s = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let log = log_buffer();
    // A 64 MiB sparse namespace on a 24 MiB file system.
    let fs = LoopFs::new(24);
    let path = fs.mnt.join("sparse.img");
    let (target, mut host) = target_and_host(238, &path, 64 << 20);
    let q = &mut host.io_queues()[0];
    let chunk = 1usize << 20;
    let blocks = (chunk / 512) as u16;
    let mut failed = None;
    for k in 0..64u64 {
        let data = pattern(k << 20, chunk, 5);
        let (_, r) = run(
            q,
            Sqe::write(0, 1, k * 2048, blocks - 1, false),
            DataDir::HostToController { len: chunk },
            &data,
        );
        if let Err(e) = r {
            failed = Some((k, e));
            break;
        }
    }
    let (k, e) = failed.expect("64 MiB of writes fitted on a 24 MiB file system");
    assert!(k > 0, "the first write failed already: {e}");
    assert_eq!(
        e.nvme_status(),
        Some(Status::generic(GenericStatus::CapacityExceeded).with_dnr()),
        "write {k}: {e}"
    );
    // What was acknowledged reads back.
    let (buf, r) = run(
        q,
        Sqe::read(0, 1, 0, blocks - 1, false),
        DataDir::ControllerToHost { len: chunk },
        &[],
    );
    assert!(r.expect("read").status().is_success());
    assert!(buf.as_deref().expect("data buffer")[..chunk] == pattern(0, chunk, 5)[..]);
    drop(host);
    drop(target);
    let text = String::from_utf8_lossy(&log.lock().unwrap()).into_owned();
    let line = text
        .lines()
        .find(|l| l.contains(&path.display().to_string()))
        .unwrap_or_else(|| panic!("no log line names {}:\n{text}", path.display()));
    for want in [
        NQN,
        "namespace 1",
        "No space left",
        "Capacity Exceeded",
        "free space",
    ] {
        assert!(line.contains(want), "log line lacks {want:?}: {line}");
    }
}
