//! The async host ([`nvmf_initiator::Host`]) against an in-process target on a real
//! file, in both completion modes: zero-copy reads and writes of pool buffers (one
//! command and split over several), the copying conveniences, flush, Write Zeroes,
//! deallocate, admin and I/O passthrough, Get Log Page, Get/Set Features, a per-call
//! timeout, concurrent tasks on chosen queues, and a pool smaller than the I/O in
//! flight (commands wait for buffer space, none fails for it).
mod common;

use std::time::Duration;

use common::*;
use nvme::{IdentifyCns, Sqe};
use nvmf_initiator::{Completions, DataDir, Host, HostError};

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("runtime")
}

fn exercise(mode: Completions, target: u8, host_ip: u8) {
    let t = start_target(target, 32 << 20);
    let mut opts = host_options(&t, host_ip, 2, 32);
    opts.completions = mode;
    runtime().block_on(async move {
        let host = Host::connect(opts).await.expect("host connects");
        assert_eq!(host.io_queues(), 2);
        let ns = host.namespace(1).await.expect("namespace 1");
        assert_eq!(ns.block_size, 512);

        // Zero copy: the buffer the caller filled is what goes out, and the buffer
        // that comes back is the same registered memory, holding what was read.
        let mut w = host.alloc(4096).await.unwrap();
        w.copy_from_slice(&pattern(0, 4096, 1));
        let w = ns.write_buf(8, w, false).await.expect("write_buf");
        let r = host.alloc(4096).await.unwrap();
        let addr = r.addr();
        let r = ns.read_buf(8, r).await.expect("read_buf");
        assert_eq!(r.addr(), addr, "the same buffer came back");
        assert_eq!(&r[..], &pattern(0, 4096, 1)[..]);
        drop((w, r));
        // Larger than MDTS (1 MiB): several commands on views of one buffer.
        let len = 3 << 20;
        let mut big = host.alloc(len).await.unwrap();
        big.copy_from_slice(&pattern(1 << 20, len, 2));
        let big = ns.write_buf(2048, big, true).await.expect("split write");
        let addr = big.addr();
        let mut back = big;
        back.fill(0);
        let back = ns.read_buf(2048, back).await.expect("split read");
        assert_eq!((back.addr(), back.len()), (addr, len), "joined again");
        assert!(back[..] == pattern(1 << 20, len, 2)[..]);
        drop(back);
        assert_eq!(host.bytes_copied(), 0, "the zero-copy calls copy nothing");

        // The copying conveniences, counted.
        let data = pattern(7, 8192, 3);
        ns.write(100, &data, false).await.unwrap();
        let mut got = vec![0u8; 8192];
        ns.read(100, &mut got).await.unwrap();
        assert_eq!(got, data);
        assert_eq!(host.bytes_copied(), 16384);
        ns.flush().await.unwrap();
        ns.write_zeroes(100, 16).await.unwrap();
        ns.read(100, &mut got).await.unwrap();
        assert!(got.iter().all(|&b| b == 0));
        ns.deallocate(&[(0, 8), (4096, 8)]).await.unwrap();
        let e = ns.read(ns.nlb, &mut got).await.unwrap_err();
        assert!(matches!(e, HostError::InvalidArgument(_)), "{e}");

        // Admin: passthrough, Get Log Page, Get/Set Features.
        let id = host.alloc(4096).await.unwrap();
        let (cqe, id) = host
            .admin_passthrough(
                Sqe::identify(0, IdentifyCns::Controller, 0, 0),
                DataDir::ControllerToHost { len: 4096 },
                Some(id),
                None,
            )
            .await
            .unwrap();
        assert!(cqe.status().is_success());
        let info = nvmf_initiator::ControllerInfo::parse(&id.unwrap()).unwrap();
        assert_eq!(info.subnqn, NQN);
        let smart = host.get_log_page(0x02, 0xFFFF_FFFF, 0, 512).await.unwrap();
        assert_eq!(smart.len(), 512);
        assert!(
            host.get_log_page(0x02, 0, 2, 512).await.is_err(),
            "offset not dwords"
        );
        let nq = host.get_features(0x07, 0).await.unwrap();
        assert!(nq.dw0() & 0xFFFF >= 1, "Number of Queues: {:#x}", nq.dw0());
        let e = host.set_features(0x7F, 0, false).await.unwrap_err();
        assert!(e.nvme_status().is_some(), "an unknown feature: {e}");

        // I/O passthrough: a Read built by hand, on a chosen queue.
        let b = host.alloc(512).await.unwrap();
        let (cqe, b) = ns
            .on_queue(1)
            .passthrough(
                Sqe::read(0, 1, 8, 0, false),
                DataDir::ControllerToHost { len: 512 },
                Some(b),
            )
            .await
            .unwrap();
        assert!(cqe.status().is_success());
        assert_eq!(&b.unwrap()[..], &pattern(0, 512, 1)[..]);

        // Concurrent tasks, each on its own queue, QD 8 each.
        let mut tasks = Vec::new();
        for k in 0..16u64 {
            let ns = ns.on_queue(k as usize);
            let pool = host.pool().clone();
            tasks.push(tokio::spawn(async move {
                let slba = 10_000 + k * 64;
                let mut b = pool.alloc(32768).await.unwrap();
                b.copy_from_slice(&pattern(slba, 32768, k as u8));
                let b = ns.write_buf(slba, b, false).await.unwrap();
                let mut b = b;
                b.fill(0);
                let b = ns.read_buf(slba, b).await.unwrap();
                assert!(b[..] == pattern(slba, 32768, k as u8)[..], "task {k}");
            }));
        }
        for t in tasks {
            t.await.expect("task");
        }

        // A per-call timeout that cannot be met: Timeout, and the host goes on.
        let b = host.alloc(1 << 20).await.unwrap();
        // (It may complete in time; when it does not, the error is Timeout.)
        if let Err(e) = ns
            .with_timeout(Duration::from_nanos(1))
            .read_buf(0, b)
            .await
        {
            assert!(matches!(e.error, HostError::Timeout(_)), "{e}");
        }
        ns.read(8, &mut got[..512]).await.unwrap();
        assert_eq!(&got[..512], &pattern(0, 512, 1)[..]);
        host.disconnect().await.expect("disconnect");
    });
}

#[test]
fn async_host_with_poll_threads() {
    exercise(Completions::PollThread, 90, 91);
}

#[test]
fn async_host_polled_from_the_runtime() {
    exercise(Completions::Runtime, 92, 93);
}

/// A pool much smaller than the data in flight: every write waits for buffer space
/// and completes; none fails for want of it.
#[test]
fn a_small_pool_is_back_pressure_not_failure() {
    let t = start_target(94, 16 << 20);
    let mut opts = host_options(&t, 95, 1, 64);
    opts.buffer_pool_bytes = Some(1 << 20);
    runtime().block_on(async move {
        let host = Host::connect(opts).await.expect("host connects");
        let ns = host.namespace(1).await.unwrap();
        // The whole pool held while the writers start, so that they must wait however
        // the runtime schedules them (each alone would find room).
        let mut held = Vec::new();
        while let Some(b) = host.pool().try_alloc(128 << 10).unwrap() {
            held.push(b);
        }
        assert!(!held.is_empty());
        let mut tasks = Vec::new();
        for k in 0..32u64 {
            let ns = ns.clone();
            let pool = host.pool().clone();
            tasks.push(tokio::spawn(async move {
                let mut b = pool.alloc(128 << 10).await.expect("waits, never fails");
                b.fill(k as u8);
                ns.write_buf(k * 256, b, false).await.map(|_| ())
            }));
        }
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while host.pool().waits() == 0 {
            assert!(
                std::time::Instant::now() < deadline,
                "no writer waited for the full pool"
            );
            tokio::time::sleep(std::time::Duration::from_millis(1)).await;
        }
        drop(held);
        for t in tasks {
            t.await.unwrap().expect("every write completes");
        }
        let mut got = vec![0u8; 128 << 10];
        ns.read(31 * 256, &mut got).await.unwrap();
        assert!(got.iter().all(|&b| b == 31));
        // A buffer larger than the pool can ever give is refused at once.
        assert!(host.alloc(2 << 20).await.is_err());
        host.disconnect().await.unwrap();
    });
}

/// Without memory windows (as on an RNIC that has none) every command carries the
/// pool's own rkey: I/O works the same, zero-copy, and the target never invalidates it.
#[test]
fn the_pools_rkey_where_there_are_no_windows() {
    let t = start_target(100, 16 << 20);
    let mut opts = host_options(&t, 101, 1, 16);
    opts.remote_access = Some(nvmf_initiator::RemoteAccess::RegionKey);
    runtime().block_on(async move {
        let host = Host::connect(opts).await.expect("host connects");
        assert_eq!(
            host.pool().remote_access(),
            nvmf_initiator::RemoteAccess::RegionKey
        );
        let ns = host.namespace(1).await.unwrap();
        for (i, len) in [4096usize, 65536, 2 << 20].into_iter().enumerate() {
            let mut b = host.alloc(len).await.unwrap();
            b.copy_from_slice(&pattern(i as u64, len, 9));
            let mut b = ns.write_buf(4096 * i as u64, b, false).await.unwrap();
            b.fill(0);
            let b = ns.read_buf(4096 * i as u64, b).await.unwrap();
            assert!(b[..] == pattern(i as u64, len, 9)[..], "{len} bytes");
        }
        host.disconnect().await.unwrap();
    });
}

/// A pool that cannot hold one command's data is refused at connect, saying so.
#[test]
fn a_pool_too_small_for_one_command_is_refused() {
    let t = start_target(102, 16 << 20);
    let mut opts = host_options(&t, 103, 1, 16);
    opts.buffer_pool_bytes = Some(64 << 10);
    runtime().block_on(async move {
        let e = Host::connect(opts).await.unwrap_err();
        assert!(
            matches!(&e, HostError::Memlock(m) if m.contains("cannot hold one I/O")),
            "{e}"
        );
    });
    drop(t);
}
