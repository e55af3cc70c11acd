//! Namespace back ends through the real target (`nvmf_target::backend`): a file with
//! O_DIRECT, and a block device (a loop device: root only) with O_DIRECT on and off,
//! opened exclusively. A host on another loopback address writes and reads patterns
//! in-capsule (4 KiB, from the receive buffer to the file) and by RDMA READ (128 KiB,
//! through the data slab), and the bytes are checked in the file or on the device.
//!
//! The loop device test: `cargo test -p nvmf-rdma --test backend -- --ignored` as root
//! (`.ci/run`); without root it fails, saying so.
mod common;

use std::os::unix::fs::FileExt;
use std::path::Path;
use std::process::Command;
use std::sync::atomic::Ordering;

use common::{connect, ip, pattern, require_root, run, sh, start_target_with, TestTarget, NQN};
use nvme::{SglDescriptor, Sqe};
use nvmf_initiator::{DataDir, NvmeRdmaQueue};
use nvmf_target::backend::{BackendKind, NamespaceError};
use nvmf_target::config::TargetConfig;
use nvmf_target::TargetError;

/// Namespace 1 of the target's subsystem.
fn namespace_1(t: &TestTarget) -> nvmf_target::subsystem::NamespaceEntry {
    let sub = t.target.registry().subsystem(NQN).expect("subsystem");
    sub.namespace(1).expect("namespace 1").clone()
}

/// Counter `f` of the target's (only) poll group.
fn counter(
    t: &TestTarget,
    f: impl Fn(&nvmf_target::rdma::PollGroupCounters) -> &std::sync::atomic::AtomicU64,
) -> u64 {
    f(&t.target.poll_group_counters()[0]).load(Ordering::Relaxed)
}

/// Writes `data` at byte `offset` (whole blocks of `block`) and checks success.
fn write(q: &mut NvmeRdmaQueue, block: usize, offset: u64, data: &[u8]) {
    let nlb = (data.len() / block) as u16;
    let (_, r) = run(
        q,
        Sqe::write(0, 1, offset / block as u64, nlb - 1, false),
        DataDir::HostToController { len: data.len() },
        data,
    );
    assert!(r.expect("write").status().is_success());
}

/// Reads `len` bytes at byte `offset`.
fn read(q: &mut NvmeRdmaQueue, block: usize, offset: u64, len: usize) -> Vec<u8> {
    let nlb = (len / block) as u16;
    let (buf, r) = run(
        q,
        Sqe::read(0, 1, offset / block as u64, nlb - 1, false),
        DataDir::ControllerToHost { len },
        &[],
    );
    assert!(r.expect("read").status().is_success());
    buf.as_deref().expect("data buffer")[..len].to_vec()
}

/// `len` bytes at `offset` of the file or device at `path`, read through a descriptor
/// of its own.
fn on_disk(path: &Path, offset: u64, len: usize) -> Vec<u8> {
    let f = std::fs::File::open(path).unwrap();
    let mut b = vec![0u8; len];
    f.read_exact_at(&mut b, offset).unwrap();
    b
}

/// Writes and reads back in-capsule (4 KiB, zero-copy) and RDMA READ (128 KiB) writes
/// and an in-capsule write at an SGL offset of 16 bytes (copied to an aligned buffer
/// under O_DIRECT); checks each on disk at `path`. Returns the bytes bounced.
fn exercise(t: &TestTarget, local: u8, path: &Path, block: usize, tag: u8) -> u64 {
    let mut host = connect(t, local, 1, 16);
    let q = &mut host.io_queues()[0];
    let bounced = counter(t, |c| &c.direct_bounce_bytes);
    let (in_capsule, rdma_read) = (
        counter(t, |c| &c.in_capsule_writes),
        counter(t, |c| &c.rdma_read_writes),
    );
    for (offset, len) in [(0u64, 4096usize), (1 << 20, 128 << 10), (3 << 20, 4096)] {
        let data = pattern(offset, len, tag);
        write(q, block, offset, &data);
        assert!(read(q, block, offset, len) == data, "read back at {offset}");
        assert!(on_disk(path, offset, len) == data, "on disk at {offset}");
    }
    assert!(counter(t, |c| &c.in_capsule_writes) >= in_capsule + 2);
    assert!(counter(t, |c| &c.rdma_read_writes) > rdma_read);
    // In-capsule data 16 bytes into the capsule: 3 KiB (whole 512-byte blocks) that
    // start off any block boundary in the receive buffer.
    if block == 512 {
        let offset = 5 << 20;
        let data = pattern(offset, 3072, tag ^ 0xFF);
        let mut icd = vec![0u8; 16];
        icd.extend_from_slice(&data);
        let sqe = Sqe::write(0, 1, offset / 512, 5, false)
            .with_sgl(SglDescriptor::inline_offset(16, 3072));
        let cid = q.submit_raw(sqe, &icd).expect("submit");
        let cqe = common::wait(q, cid).expect("write at an SGL offset");
        assert!(cqe.status().is_success(), "{:?}", cqe.status());
        assert!(read(q, block, offset, 3072) == data);
        assert!(on_disk(path, offset, 3072) == data);
    }
    host.disconnect().expect("disconnect");
    counter(t, |c| &c.direct_bounce_bytes) - bounced
}

/// Write Zeroes (fallocate ZERO_RANGE) and Deallocate (PUNCH_HOLE) each leave 64 KiB
/// of written data reading back as zeroes, from the host and on disk.
fn zeroes_and_deallocate(t: &TestTarget, local: u8, path: &Path, block: usize) {
    let mut host = connect(t, local, 1, 16);
    let q = &mut host.io_queues()[0];
    let len = 64 << 10;
    let nlb = (len / block) as u16;
    for (k, offset) in [(0, 6u64 << 20), (1, 7 << 20)] {
        write(q, block, offset, &pattern(offset, len, 0x77));
        let slba = offset / block as u64;
        let (_, r) = if k == 0 {
            run(
                q,
                Sqe::write_zeroes(0, 1, slba, nlb - 1, false),
                DataDir::None,
                &[],
            )
        } else {
            let mut range = [0u8; 16];
            range[4..8].copy_from_slice(&u32::from(nlb).to_le_bytes());
            range[8..16].copy_from_slice(&slba.to_le_bytes());
            run(
                q,
                Sqe::dsm_deallocate(0, 1, 0),
                DataDir::HostToController { len: 16 },
                &range,
            )
        };
        assert!(r.expect("zeroing").status().is_success());
        let what = ["write zeroes", "deallocate"][k];
        assert!(
            read(q, block, offset, len) == vec![0; len],
            "{what} reads zeroes"
        );
        assert!(on_disk(path, offset, len) == vec![0; len], "{what} on disk");
    }
    host.disconnect().expect("disconnect");
}

#[test]
fn file_namespace_with_o_direct() {
    let t = start_target_with(140, 8 << 20, |cfg| {
        cfg.subsystems[0].namespaces[0].direct = true;
    });
    let entry = namespace_1(&t);
    assert!(entry.ns.is_direct());
    assert_eq!(entry.ns.kind(), BackendKind::File);
    // SAFETY: fcntl F_GETFL on a descriptor the target keeps open.
    let flags = unsafe { libc::fcntl(entry.ns.fd(), libc::F_GETFL) };
    assert_ne!(flags & libc::O_DIRECT, 0, "opened with O_DIRECT");
    let bounced = exercise(&t, 141, &t.path, 512, 0x31);
    zeroes_and_deallocate(&t, 141, &t.path, 512);
    let align = entry.ns.dio_mem_align();
    if align > 16 {
        assert_eq!(bounced, 3072, "only the write at an SGL offset is copied");
    } else {
        assert_eq!(bounced, 0, "memory alignment {align}: nothing to copy");
    }
}

/// A loop device of `size_mib` MiB with `sector` byte logical blocks over a file in
/// the temp directory; detached when dropped.
struct LoopDev {
    dev: String,
    _dir: tempfile::TempDir,
}

impl LoopDev {
    fn new(size_mib: u64, sector: u32) -> LoopDev {
        let dir = tempfile::tempdir_in(std::env::temp_dir()).expect("temp dir");
        let img = dir.path().join("disk.img");
        std::fs::File::create(&img)
            .and_then(|f| f.set_len(size_mib << 20))
            .expect("image file");
        let dev = sh(
            "losetup",
            &[
                "--find",
                "--show",
                "--sector-size",
                &sector.to_string(),
                img.to_str().unwrap(),
            ],
        );
        LoopDev { dev, _dir: dir }
    }
}

impl Drop for LoopDev {
    fn drop(&mut self) {
        let _ = Command::new("losetup").args(["-d", &self.dev]).status();
    }
}

#[test]
#[ignore = "needs root: loop device (losetup)"]
fn block_device_namespace_on_a_loop_device() {
    require_root("attaches a loop device (losetup)");
    let lo = LoopDev::new(32, 4096);
    let dev = Path::new(&lo.dev).to_path_buf();
    for (k, direct) in [false, true].into_iter().enumerate() {
        let last = 142 + 2 * k as u8;
        let t = start_target_with(last, 0, |cfg| {
            let n = &mut cfg.subsystems[0].namespaces[0];
            n.path = dev.clone();
            n.size = None;
            n.direct = direct;
        });
        let entry = namespace_1(&t);
        assert_eq!(entry.ns.kind(), BackendKind::BlockDevice);
        assert_eq!(entry.ns.block_size(), 4096, "BLKSSZGET");
        assert_eq!(entry.ns.size_bytes(), 32 << 20, "BLKGETSIZE64");
        assert_eq!(entry.ns.is_direct(), direct);
        // The host sees the device's geometry.
        let mut host = connect(&t, last + 1, 1, 16);
        let id = host.controller().identify_namespace(1).unwrap();
        assert_eq!((id.block_size, id.nsze), (4096, (32 << 20) / 4096));
        host.disconnect().unwrap();
        exercise(&t, last + 1, &dev, 4096, 0x40 + k as u8);
        zeroes_and_deallocate(&t, last + 1, &dev, 4096);
        // A second target cannot open the device while this one serves it (O_EXCL).
        let mut second = TargetConfig::default_for(ip(last + 20), NQN, &dev, 0);
        second.subsystems[0].namespaces[0].size = None;
        match nvmf_target::start(&second) {
            Err(TargetError::Namespace {
                source: NamespaceError::Busy { path },
                ..
            }) => assert_eq!(path, dev),
            Err(e) => panic!("second target: {e}"),
            Ok(_) => panic!("a second target opened {} too", dev.display()),
        }
        drop(t);
    }
    // Once the target is gone, the device is free again.
    let cfg = {
        let mut c = TargetConfig::default_for(ip(149), NQN, &dev, 0);
        c.subsystems[0].namespaces[0].size = None;
        c.subsystems[0].namespaces[0].block_size = Some(512);
        c
    };
    match nvmf_target::start(&cfg) {
        Err(TargetError::Namespace {
            source: NamespaceError::BlockSizeBelowDevice { .. },
            ..
        }) => {}
        other => panic!("block_size 512 on a 4096-byte device: {other:?}"),
    }
}
