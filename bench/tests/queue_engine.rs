//! The benchmark's [`QueueEngine`] against the embedded `nvmf-target` over loopback
//! (real UDP sockets, a real file namespace): requests larger than the controller's
//! MDTS split into several commands and reassembled, checked against the file on disk;
//! and a controller declared dead (Keep Alive failed) ending the engine at once.
use std::net::{IpAddr, SocketAddr};
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::time::{Duration, Instant};

use nvmf_bench::engine::{EngineError, IoCompletion, IoEngine};
use nvmf_bench::workload::{IoOp, IoRequest};
use nvmf_bench::QueueEngine;
use nvmf_initiator::{ControllerHealth, HostError, HostOptions, SyncHost};
use nvmf_target::config::TargetConfig;
use nvmf_target::TargetHandle;

const NQN: &str = "nqn.2026-11.io.nvmf-rdma:engine";
/// The target's MDTS in this file: small, so that splitting needs little data.
const MDTS_BYTES: usize = 64 << 10;

/// Tests with a target run one at a time (two busy-polling threads each, as many as
/// this 2-core machine has).
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

fn start_target(ip: &str, dir: &Path) -> TargetHandle {
    let toml = format!(
        r#"
poll_groups = 1
mdts_bytes = {MDTS_BYTES}
[[listen]]
addr = "{ip}"
[[subsystems]]
nqn = "{NQN}"
[[subsystems.namespaces]]
nsid = 1
path = "{}"
size = "16M"
"#,
        dir.join("ns1.img").display()
    );
    let cfg = TargetConfig::from_toml_str(&toml).expect("target configuration");
    nvmf_target::start(&cfg).expect("target starts")
}

/// A host with one I/O queue of `depth` entries toward `target_ip`.
fn connect(target_ip: &str, host_ip: &str, depth: u16) -> (SyncHost, u32) {
    let mut o = HostOptions::new(SocketAddr::new(target_ip.parse().unwrap(), 4420), NQN);
    o.local_ip = Some(host_ip.parse::<IpAddr>().unwrap());
    o.queue_depth = depth;
    o.max_io_bytes = 1 << 20;
    let mut host = SyncHost::connect(&o).expect("sync host connects");
    let bs = host.controller().identify_namespace(1).unwrap().block_size;
    (host, bs)
}

fn pattern(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// Polls until every tag in `tags` completed; returns their results.
fn wait_all(e: &mut QueueEngine, tags: &[u32]) -> Vec<IoCompletion> {
    let mut out: Vec<IoCompletion> = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(20);
    while !tags.iter().all(|t| out.iter().any(|c| c.tag == *t)) {
        e.poll(&mut out).expect("engine alive");
        assert!(Instant::now() < deadline, "I/Os {tags:?} did not complete");
    }
    out
}

#[test]
fn requests_over_mdts_are_split_and_reassembled() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let target = start_target("127.0.0.51", dir.path());
    // 4 entries: 3 commands in flight for two requests of up to 17 pieces each, so
    // pieces also wait in the engine for free slots.
    let (host, bs) = connect("127.0.0.51", "127.0.0.52", 4);
    let (queues, keeper) = host.into_io_queues();
    let q = queues.into_iter().next().expect("one I/O queue");
    assert_eq!(q.max_io_bytes(), MDTS_BYTES, "MDTS bounds the slot buffers");
    let mut e = QueueEngine::with_max_request(q, 1, bs, 1 << 20).unwrap();
    assert!(e.is_splitting());
    assert_eq!(e.max_command_bytes(), MDTS_BYTES);
    assert_eq!(e.max_outstanding(), 3);
    let file = std::fs::File::open(dir.path().join("ns1.img")).unwrap();
    let sizes = [512usize, MDTS_BYTES, MDTS_BYTES + 512, 300 << 10, 1 << 20];
    for (i, &len) in sizes.iter().enumerate() {
        // Two requests at once on tags 0 and 1, at different offsets.
        let reqs: Vec<(u32, u64, Vec<u8>)> = (0..2u32)
            .map(|tag| {
                let offset = ((i as u64 * 2 + u64::from(tag)) << 20) + 4096;
                (tag, offset, pattern(len, (i * 2) as u64 + u64::from(tag)))
            })
            .collect();
        for (tag, offset, data) in &reqs {
            e.buffer(*tag)[..len].copy_from_slice(data);
            let w = IoRequest {
                op: IoOp::Write,
                offset: *offset,
                len: len as u32,
            };
            e.submit(*tag, &w).unwrap();
        }
        for c in wait_all(&mut e, &[0, 1]) {
            assert!(c.result.is_ok(), "write of {len} bytes, tag {}", c.tag);
        }
        for (tag, offset, data) in &reqs {
            // Each piece landed where it belongs in the namespace.
            let mut on_disk = vec![0u8; len];
            file.read_exact_at(&mut on_disk, *offset).unwrap();
            assert!(on_disk == *data, "{len} bytes at {offset} on disk");
            e.buffer(*tag)[..len].fill(0);
            let r = IoRequest {
                op: IoOp::Read,
                offset: *offset,
                len: len as u32,
            };
            e.submit(*tag, &r).unwrap();
        }
        for c in wait_all(&mut e, &[0, 1]) {
            assert!(c.result.is_ok(), "read of {len} bytes, tag {}", c.tag);
        }
        for (tag, offset, data) in &reqs {
            assert!(
                e.buffer(*tag)[..len] == data[..],
                "read back {len} bytes at {offset}"
            );
        }
    }
    keeper
        .shutdown(e.into_queue().into_iter().collect())
        .expect("clean shutdown");
    drop(target);
}

#[test]
fn one_command_engines_refuse_larger_requests_with_the_fix() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let target = start_target("127.0.0.53", dir.path());
    let (host, bs) = connect("127.0.0.53", "127.0.0.54", 8);
    let (queues, keeper) = host.into_io_queues();
    let q = queues.into_iter().next().expect("one I/O queue");
    let mut e = QueueEngine::new(q, 1, bs).unwrap();
    assert!(!e.is_splitting());
    let r = IoRequest {
        op: IoOp::Read,
        offset: 0,
        len: (MDTS_BYTES + 512) as u32,
    };
    match e.submit(0, &r) {
        Err(EngineError::InvalidRequest(m)) => {
            assert!(m.contains("with_max_request"), "{m}")
        }
        other => panic!("{other:?}"),
    }
    keeper
        .shutdown(e.into_queue().into_iter().collect())
        .expect("clean shutdown");
    drop(target);
}

#[test]
fn a_controller_declared_dead_ends_the_engine_at_once() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let target = start_target("127.0.0.55", dir.path());
    let (host, bs) = connect("127.0.0.55", "127.0.0.56", 8);
    let (queues, keeper) = host.into_io_queues();
    let q = queues.into_iter().next().expect("one I/O queue");
    let health = ControllerHealth::new();
    let mut e = QueueEngine::with_max_request(q, 1, bs, 4096)
        .unwrap()
        .with_health(health.clone());
    let r = IoRequest {
        op: IoOp::Read,
        offset: 0,
        len: 4096,
    };
    e.submit(0, &r).unwrap();
    wait_all(&mut e, &[0]);
    // Outstanding I/O when the keeper gives up: the engine fails at the next poll,
    // whether or not the I/O completed meanwhile.
    e.submit(1, &r).unwrap();
    health.declare_dead("Keep Alive failed: test");
    let mut out = Vec::new();
    match e.poll(&mut out) {
        Err(EngineError::Transport(HostError::ControllerDead(m))) => {
            assert_eq!(m, "Keep Alive failed: test")
        }
        other => panic!("{other:?}"),
    }
    assert!(matches!(e.submit(2, &r), Err(EngineError::Transport(_))));
    keeper
        .shutdown(e.into_queue().into_iter().collect())
        .expect("clean shutdown");
    drop(target);
}
