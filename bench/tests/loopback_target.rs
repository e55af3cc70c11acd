//! Host against the embedded `nvmf-target` over loopback: real UDP sockets on 127.0.0.x
//! (each side its own address, since both receive on 4791) and a real file namespace.
//!
//! Write / read-back compares at 512 B, 4 KiB, 128 KiB and 1 MiB through the async
//! [`Host`] API (in-capsule and keyed writes, RDMA WRITE reads), checked against the
//! file on disk too; the sync [`SyncHost`] + [`QueueEngine`] path of the benchmark;
//! and a refused Connect.
#![allow(clippy::await_holding_lock)] // SERIAL is held for a whole test on purpose
use std::net::{IpAddr, SocketAddr};
use std::path::Path;

use nvmf_bench::engine::{IoCompletion, IoEngine};
use nvmf_bench::workload::{IoOp, IoRequest};
use nvmf_bench::QueueEngine;
use nvmf_initiator::{Host, HostError, HostOptions, SyncHost};
use nvmf_target::config::TargetConfig;
use nvmf_target::TargetHandle;

const NQN: &str = "nqn.2026-11.io.nvmf-rdma:loopback";
const NS_BYTES: u64 = 64 << 20;

/// Tests with a target run one at a time (two busy-polling threads each, as many as
/// this 2-core machine has); every test takes this lock first.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

fn start_target(ip: &str, dir: &Path) -> TargetHandle {
    let toml = format!(
        r#"
poll_groups = 1
[[listen]]
addr = "{ip}"
[[subsystems]]
nqn = "{NQN}"
[[subsystems.namespaces]]
nsid = 1
path = "{}"
size = "64M"
"#,
        dir.join("ns1.img").display()
    );
    let cfg = TargetConfig::from_toml_str(&toml).expect("target configuration");
    nvmf_target::start(&cfg).expect("target starts")
}

fn options(target_ip: &str, host_ip: &str) -> HostOptions {
    let mut o = HostOptions::new(SocketAddr::new(target_ip.parse().unwrap(), 4420), NQN);
    o.local_ip = Some(host_ip.parse::<IpAddr>().unwrap());
    o.queue_depth = 32;
    o
}

fn pattern(len: usize, seed: u32) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            x as u8
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn async_host_write_read_back() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let target = start_target("127.0.0.47", dir.path());
    let host = Host::connect(options("127.0.0.47", "127.0.0.48"))
        .await
        .expect("host connects");
    assert_eq!(host.controller_info().subnqn, NQN);
    assert_eq!(host.namespaces().await.unwrap(), vec![1]);
    let id = host.identify_controller().await.unwrap();
    assert_eq!(id.cntlid, host.controller_info().cntlid);
    let ns = host.namespace(1).await.unwrap();
    assert_eq!((ns.block_size, ns.nlb), (512, NS_BYTES / 512));

    let mut slba = 8u64;
    let mut written = Vec::new();
    for (i, &len) in [512usize, 4096, 128 << 10, 1 << 20, 3 << 20]
        .iter()
        .enumerate()
    {
        let data = pattern(len, i as u32 + 1);
        ns.write(slba, &data, i % 2 == 1)
            .await
            .unwrap_or_else(|e| panic!("write {len}: {e}"));
        let mut back = vec![0u8; len];
        ns.read(slba, &mut back)
            .await
            .unwrap_or_else(|e| panic!("read {len}: {e}"));
        assert!(back == data, "read back {len} bytes at LBA {slba}");
        written.push((slba, data));
        slba += (len as u64).div_ceil(512) + 8;
    }
    ns.flush().await.unwrap();

    // The data is in the file.
    let file = std::fs::read(dir.path().join("ns1.img")).unwrap();
    for (slba, data) in &written {
        let at = (*slba * 512) as usize;
        assert!(
            file[at..at + data.len()] == data[..],
            "file content at LBA {slba}"
        );
    }

    // Write Zeroes and Deallocate read back as zeros.
    let (z, len) = (written[2].0, written[2].1.len());
    ns.write_zeroes(z, (len / 512) as u64).await.unwrap();
    let mut back = vec![0xFFu8; len];
    ns.read(z, &mut back).await.unwrap();
    assert!(back.iter().all(|&b| b == 0), "zeroed range reads as zeros");
    ns.deallocate(&[(written[1].0, 8)]).await.unwrap();

    // Out-of-range and unaligned requests are refused before reaching the wire.
    let mut one = vec![0u8; 512];
    assert!(matches!(
        ns.read(ns.nlb, &mut one).await,
        Err(HostError::InvalidArgument(_))
    ));
    assert!(matches!(
        ns.write(0, &[0u8; 100], false).await,
        Err(HostError::InvalidArgument(_))
    ));

    host.disconnect().await.expect("clean shutdown");
    drop(target);
}

#[test]
fn sync_host_queue_engine() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let target = start_target("127.0.0.41", dir.path());
    let mut opts = options("127.0.0.41", "127.0.0.42");
    opts.io_queues = 2;
    opts.max_io_bytes = 128 << 10;
    let mut host = SyncHost::connect(&opts).expect("sync host connects");
    assert_eq!(host.io_queues().len(), 2);
    let info = host.controller().identify_namespace(1).unwrap();
    let dev = host.device().clone();
    let (queues, keeper) = host.into_io_queues();
    let mut engines: Vec<QueueEngine> = queues
        .into_iter()
        .map(|q| QueueEngine::new(q, 1, info.block_size).unwrap())
        .collect();
    for (qi, e) in engines.iter_mut().enumerate() {
        assert_eq!(e.max_outstanding(), 31);
        for (i, &len) in [512u32, 4096, 128 << 10].iter().enumerate() {
            let offset = ((qi * 16 + i) as u64) << 20;
            let data = pattern(len as usize, (qi * 10 + i) as u32);
            let tag = i as u32;
            e.buffer(tag)[..len as usize].copy_from_slice(&data);
            e.submit(
                tag,
                &IoRequest {
                    op: IoOp::Write,
                    offset,
                    len,
                },
            )
            .unwrap();
            wait(e, tag);
            e.buffer(tag)[..len as usize].fill(0);
            // The tag's pool buffer is what the target writes into: no copy.
            let addr = e.buffer(tag).as_ptr() as u64;
            e.submit(
                tag,
                &IoRequest {
                    op: IoOp::Read,
                    offset,
                    len,
                },
            )
            .unwrap();
            let key = e.queue().unwrap().window_key(tag as u16).unwrap();
            wait(e, tag);
            assert!(
                e.buffer(tag)[..len as usize] == data[..],
                "queue {qi}: read back {len} bytes"
            );
            assert_eq!(e.buffer(tag).as_ptr() as u64, addr, "the same buffer");
            // The key the target wrote through is dead after completion.
            let q = e.queue().unwrap();
            let access = transport::verbs::AccessFlags::REMOTE_WRITE;
            assert!(dev
                .keys()
                .check_remote(q.pd().0, q.qp_num(), key, addr, u64::from(len), access)
                .is_err());
        }
    }
    let queues = engines.into_iter().filter_map(|e| e.into_queue()).collect();
    keeper.shutdown(queues).expect("clean shutdown");
    drop(target);
}

fn wait(e: &mut QueueEngine, tag: u32) {
    let mut out: Vec<IoCompletion> = Vec::new();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        e.poll(&mut out).unwrap();
        if let Some(c) = out.iter().find(|c| c.tag == tag) {
            assert!(c.result.is_ok());
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "I/O {tag} did not complete"
        );
    }
}

#[test]
fn unknown_subsystem_is_refused() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let _target = start_target("127.0.0.43", dir.path());
    let mut opts = options("127.0.0.43", "127.0.0.44");
    opts.subnqn = "nqn.2026-11.io.example:nosuchsubsys".into();
    match SyncHost::connect(&opts) {
        Err(HostError::ConnectRefused {
            qid: 0,
            status,
            detail,
        }) => {
            assert_eq!(
                status.as_command_specific(),
                Some(nvme::CommandSpecificStatus::ConnectInvalidParameters)
            );
            assert!(status.dnr);
            let detail = detail.unwrap_or_default();
            assert!(
                detail.starts_with("SUBNQN (offset 256) of the Connect data")
                    && detail.contains("--subnqn"),
                "{detail}"
            );
        }
        other => panic!("expected a refused Connect, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn async_host_many_concurrent_requests_over_small_queues() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let _target = start_target("127.0.0.45", dir.path());
    let mut opts = options("127.0.0.45", "127.0.0.46");
    // 2 queues of 8 entries (7 commands each in flight): most requests wait in the
    // poll thread until a slot frees up.
    opts.io_queues = 2;
    opts.queue_depth = 8;
    opts.max_io_bytes = 16 << 10;
    opts.kato_ms = 1000;
    let host = Host::connect(opts).await.expect("host connects");
    let ns = host.namespace(1).await.unwrap();
    let mut tasks = Vec::new();
    for i in 0..64u32 {
        let ns = ns.clone();
        tasks.push(tokio::spawn(async move {
            // 8 KiB each; 40 KiB ones are split into 16 KiB commands.
            let len = if i % 4 == 0 { 40 << 10 } else { 8 << 10 };
            let slba = u64::from(i) * 128;
            let data = pattern(len, 1000 + i);
            ns.write(slba, &data, false).await?;
            let mut back = vec![0u8; len];
            ns.read(slba, &mut back).await?;
            Ok::<bool, HostError>(back == data)
        }));
    }
    for t in tasks {
        assert!(t.await.unwrap().expect("I/O succeeds"), "data read back");
    }
    // Keep Alive (every KATO/2 = 500 ms) keeps the controller alive while idle for
    // longer than KATO (the target enforces it, in whole seconds).
    tokio::time::sleep(std::time::Duration::from_millis(2500)).await;
    let mut one = vec![0u8; 512];
    ns.read(0, &mut one)
        .await
        .expect("still connected after idling past KATO");
    host.disconnect().await.expect("clean shutdown");
    assert!(matches!(ns.flush().await, Err(HostError::Disconnected)));
}
