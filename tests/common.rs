//! Shared helpers of the workspace's integration tests: an in-process target on its
//! own loopback address with a real file, and a host on another.
#![allow(dead_code)]
use std::collections::VecDeque;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use nvme::Sqe;
use nvmf_initiator::capsule::DataDir;
use nvmf_initiator::queue::{NvmeRdmaQueue, QueueCompletion};
use nvmf_initiator::{HostError, HostOptions, IoBuf, SyncHost};
use nvmf_target::config::TargetConfig;
use nvmf_target::TargetHandle;

pub const NQN: &str = "nqn.2026-11.io.nvmf-rdma:test";

pub fn ip(last: u8) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(127, 0, 0, last))
}

pub struct TestTarget {
    pub target: TargetHandle,
    pub path: PathBuf,
    pub _dir: tempfile::TempDir,
    /// Tests with a target run one at a time: each brings two busy-polling threads
    /// (the target's poll group and the test's host loop), as many as this 2-core
    /// machine has.
    pub _serial: std::sync::MutexGuard<'static, ()>,
}

static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// A target on 127.0.0.`last` serving one namespace on a fresh sparse file of `size`
/// bytes (512-byte blocks) in a temp directory on the regular file system.
pub fn start_target(last: u8, size: u64) -> TestTarget {
    start_target_with(last, size, |_| {})
}

/// [`start_target`], with the configuration edited by `edit` before the target starts.
pub fn start_target_with(last: u8, size: u64, edit: impl FnOnce(&mut TargetConfig)) -> TestTarget {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()),
        )
        .with_test_writer()
        .try_init();
    let serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("ns1.img");
    let mut cfg = TargetConfig::default_for(ip(last), NQN, &path, size);
    edit(&mut cfg);
    let target = nvmf_target::start(&cfg).expect("start target");
    TestTarget {
        target,
        path,
        _dir: dir,
        _serial: serial,
    }
}

pub fn host_options(t: &TestTarget, local: u8, io_queues: u16, depth: u16) -> HostOptions {
    let mut o = HostOptions::new(t.target.listen_addr(), NQN);
    o.local_ip = Some(ip(local));
    o.io_queues = io_queues;
    o.queue_depth = depth;
    o
}

pub fn connect(t: &TestTarget, local: u8, io_queues: u16, depth: u16) -> SyncHost {
    SyncHost::connect(&host_options(t, local, io_queues, depth)).expect("host connects")
}

pub fn addr(t: &TestTarget) -> SocketAddr {
    t.target.listen_addr()
}

/// A byte pattern that differs by offset and by `tag`.
pub fn pattern(offset: u64, len: usize, tag: u8) -> Vec<u8> {
    (0..len)
        .map(|i| {
            let x = offset.wrapping_add(i as u64);
            (x ^ (x >> 8) ^ (x >> 16)).wrapping_mul(0x9D) as u8 ^ tag
        })
        .collect()
}

/// Runs one command to completion on `q` (bounded wait) with a pool buffer of
/// `data.len()` bytes that starts with `fill`, returning the buffer (a read's data)
/// and the CQE result.
pub fn run(
    q: &mut NvmeRdmaQueue,
    sqe: Sqe,
    data: DataDir,
    fill: &[u8],
) -> (Option<IoBuf>, Result<nvme::Cqe, HostError>) {
    let cid = q
        .submit_with(sqe, data, |b| b[..fill.len()].copy_from_slice(fill))
        .expect("submit");
    let (r, buf) = wait_buf(q, cid);
    (buf, r)
}

pub fn wait(q: &mut NvmeRdmaQueue, cid: u16) -> Result<nvme::Cqe, HostError> {
    wait_buf(q, cid).0
}

/// Waits for command `cid`: its result and the buffer it carried.
pub fn wait_buf(q: &mut NvmeRdmaQueue, cid: u16) -> (Result<nvme::Cqe, HostError>, Option<IoBuf>) {
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut out = Vec::new();
    loop {
        assert!(Instant::now() < deadline, "command {cid} did not complete");
        out.clear();
        q.poll(&mut out);
        if let Some(c) = out.into_iter().find(|c: &QueueCompletion| c.cid == cid) {
            return (c.result, c.buf);
        }
        out = Vec::new();
    }
}

/// A buffer of `len` bytes from `q`'s pool (waits up to 10 s for space).
pub fn pool_buf(q: &NvmeRdmaQueue, len: usize) -> IoBuf {
    q.pool()
        .alloc_blocking(len, Duration::from_secs(10))
        .expect("pool buffer")
}

/// Writes (or reads and checks) `count` blocks of `size` bytes at consecutive
/// offsets from `base`, keeping `depth` commands in flight, spread over the queues.
pub fn pass(
    host: &mut nvmf_initiator::SyncHost,
    base: u64,
    size: usize,
    count: usize,
    depth: usize,
    write: bool,
    tag: u8,
) {
    let queues = host.io_queues();
    let nq = queues.len();
    let blocks = (size / 512) as u16;
    let mut next = 0usize;
    let mut inflight: Vec<VecDeque<(u16, u64)>> = vec![VecDeque::new(); nq];
    let mut done = 0usize;
    let mut out = Vec::new();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while done < count {
        assert!(
            std::time::Instant::now() < deadline,
            "I/O pass stalled: size {size} depth {depth}"
        );
        for (qi, q) in queues.iter_mut().enumerate() {
            while next < count
                && inflight.iter().map(|f| f.len()).sum::<usize>() < depth
                && q.can_submit()
            {
                let off = base + (next * size) as u64;
                let slba = off / 512;
                let cid = if write {
                    let data = pattern(off, size, tag);
                    q.submit_with(
                        Sqe::write(0, 1, slba, blocks - 1, false),
                        DataDir::HostToController { len: size },
                        |b| b[..size].copy_from_slice(&data),
                    )
                } else {
                    let buf = pool_buf(q, size);
                    q.submit(
                        Sqe::read(0, 1, slba, blocks - 1, false),
                        DataDir::ControllerToHost { len: size },
                        Some(buf),
                    )
                    .map_err(|e| e.error)
                }
                .expect("submit");
                inflight[qi].push_back((cid, off));
                next += 1;
                if inflight[qi].len() * nq >= depth {
                    break;
                }
            }
            out.clear();
            q.poll(&mut out);
            for c in out.drain(..) {
                let QueueCompletion { cid, result, buf } = c;
                let cqe = result.unwrap_or_else(|e| {
                    panic!("size {size} depth {depth}: command failed: {e}; host device counters {:?}, host QP {:?}", q.context().device().counters().snapshot(), q.context().qp_counters(transport::soft::Qp(q.qp_num())))
                });
                assert!(cqe.status().is_success());
                let pos = inflight[qi]
                    .iter()
                    .position(|(c, _)| *c == cid)
                    .expect("known cid");
                let (_, off) = inflight[qi].remove(pos).unwrap();
                if !write {
                    let got = &buf.as_deref().expect("data buffer")[..size];
                    let want = pattern(off, size, tag);
                    assert!(
                        got == &want[..],
                        "data mismatch at offset {off} (size {size}, depth {depth})"
                    );
                }
                done += 1;
            }
        }
    }
}

/// Fails the test unless it runs as root, saying it needs root for `what`.
pub fn require_root(what: &str) {
    // SAFETY: geteuid has no preconditions.
    let euid = unsafe { libc::geteuid() };
    assert!(
        euid == 0,
        "needs root: this test {what}; run it as root, as .ci/run does"
    );
}

/// Runs `cmd args` and returns its standard output, trimmed; fails the test, with its
/// standard error, when it cannot run or fails.
pub fn sh(cmd: &str, args: &[&str]) -> String {
    let out = std::process::Command::new(cmd)
        .args(args)
        .output()
        .unwrap_or_else(|e| {
            panic!("cannot run {cmd}: {e} (util-linux has losetup and mount, e2fsprogs mkfs.ext4)")
        });
    assert!(
        out.status.success(),
        "{cmd} {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// A protection domain and a 4 MiB buffer pool on `dev`, for tests that build queues
/// by hand.
pub fn test_pool(
    dev: &std::sync::Arc<transport::soft::SoftDevice>,
) -> (transport::verbs::Pd, nvmf_initiator::BufferPool) {
    let pd = transport::verbs::Device::alloc_pd(&**dev).expect("PD");
    let pool = nvmf_initiator::BufferPool::register::<transport::soft::SoftProvider>(
        dev,
        pd,
        4 << 20,
        nvmf_initiator::RemoteAccess::Windows,
    )
    .expect("pool");
    (pd, pool)
}
