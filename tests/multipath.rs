//! Native multipath against our target over real sockets (issue 15 item 4): one
//! subsystem listening on 127.0.0.51 and 127.0.0.52, one path (controller) through
//! each; writes round robin over both paths while the first address is killed (its
//! poll groups stopped with no disconnect: `TargetHandle::kill_address`, as a dead
//! link); every write must succeed, through the other path, and read back intact.
//!
//! Our target has no ANA yet (ANA states come from Linux nvmet in the QEMU peer, not
//! run here): both paths are optimized as a controller without ANA reporting is.
mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::{ip, NQN};
use nvme::ana::AnaState;
use nvmf_initiator::lifecycle::CtrlState;
use nvmf_initiator::{MultipathHost, MultipathOptions, PathPolicy};
use nvmf_target::config::ListenAddr;

const SIZE: u64 = 16 << 20;
const WRITERS: usize = 8;
const PER_WRITER: usize = 64;
const BLOCK: usize = 4096;

#[test]
fn writes_fail_over_when_a_listener_dies() {
    let mut t = common::start_target_with(51, SIZE, |cfg| {
        cfg.listen.push(ListenAddr::new(ip(52), 4420));
    });
    let path_opts = |target: std::net::SocketAddr, local: u8| {
        let mut o = nvmf_initiator::HostOptions::new(target, NQN);
        o.local_ip = Some(ip(local));
        o.io_queues = 1;
        o.queue_depth = 32;
        o.kato_ms = 2000;
        o.reconnect_delay = Duration::from_millis(500);
        o.connect_timeout = Duration::from_secs(1);
        o
    };
    let paths = vec![
        path_opts(t.target.listen_addrs()[0], 53),
        path_opts(t.target.listen_addrs()[1], 54),
    ];
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let opts = MultipathOptions {
            policy: PathPolicy::RoundRobin,
            no_path_timeout: Duration::from_secs(20),
        };
        let mp = MultipathHost::connect(paths, opts)
            .await
            .expect("both paths");
        assert_eq!(mp.paths().len(), 2);
        assert_eq!(mp.subnqn(), NQN);
        let ns = mp.namespace(1).await.expect("namespace 1");
        assert_eq!(
            ns.path_indices(),
            vec![0, 1],
            "one namespace through both paths"
        );
        assert_ne!(ns.nguid, [0; 16]);
        assert_eq!(mp.ana_states(&ns), vec![AnaState::Optimized; 2]);

        let done = Arc::new(AtomicUsize::new(0));
        let mut writers = Vec::new();
        for w in 0..WRITERS {
            let ns = ns.clone();
            let done = done.clone();
            writers.push(tokio::spawn(async move {
                for k in 0..PER_WRITER {
                    let i = w * PER_WRITER + k;
                    let off = (i * BLOCK) as u64;
                    let data = common::pattern(off, BLOCK, 0x5A);
                    ns.write(off / 512, &data, false)
                        .await
                        .unwrap_or_else(|e| panic!("write {i}: {e}"));
                    done.fetch_add(1, Ordering::Relaxed);
                }
            }));
        }
        // Kill the first path's address once writes are going through both paths.
        while done.load(Ordering::Relaxed) < WRITERS * PER_WRITER / 4 {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        let before = mp.completed_per_path();
        assert!(
            before[0] > 0 && before[1] > 0,
            "round robin used both: {before:?}"
        );
        let stopped = tokio::task::block_in_place(|| t.target.kill_address(ip(51)));
        assert!(stopped > 0, "poll groups of 127.0.0.51 stopped");
        for w in writers {
            w.await.expect("writer");
        }
        assert_eq!(done.load(Ordering::Relaxed), WRITERS * PER_WRITER);
        assert_ne!(
            mp.paths()[0].state(),
            CtrlState::Live,
            "the first path is down"
        );
        let after = mp.completed_per_path();
        assert!(after[1] > before[1], "the second path took over: {after:?}");

        // Everything reads back, through the path that is left.
        let mut back = vec![0u8; BLOCK];
        for i in 0..WRITERS * PER_WRITER {
            let off = (i * BLOCK) as u64;
            ns.read(off / 512, &mut back).await.expect("read");
            assert!(
                back == common::pattern(off, BLOCK, 0x5A),
                "block {i} after failover"
            );
        }
        eprintln!(
            "per path {:?}, failovers {}",
            mp.completed_per_path(),
            mp.failovers()
        );
        drop(ns);
        // The first path keeps reconnecting to a target that is gone: its error is
        // expected; the second shuts down cleanly.
        let _ = mp.disconnect().await;
    });
}
