//! Native multipath against our target over real sockets (issue 15 item 4): one
//! subsystem listening on 127.0.0.51 and 127.0.0.52, one path (controller) through
//! each; writes round robin over both paths while the first address is killed (its
//! poll groups stopped with no disconnect: `TargetHandle::kill_address`, as a dead
//! link); every write must succeed, through the other path, and read back intact.
//!
//! A second test flips the target's ANA states under writes
//! (`TargetHandle::set_ana_state`): the host hears the ANA change notice (or meets the
//! inaccessible status), rereads log 0Ch and moves its I/O to the optimized path, and
//! back again.
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

fn path_opts(target: std::net::SocketAddr, local: u8) -> nvmf_initiator::HostOptions {
    let mut o = nvmf_initiator::HostOptions::new(target, NQN);
    o.local_ip = Some(ip(local));
    o.io_queues = 1;
    o.queue_depth = 32;
    o.kato_ms = 2000;
    o.reconnect_delay = Duration::from_millis(500);
    o.connect_timeout = Duration::from_secs(1);
    o
}

/// Two paths from local addresses `locals` to the target's two listen addresses
/// `targets`, one multipath host with `policy` over them, given to `body` on a
/// two-worker tokio runtime.
fn with_two_paths<F: std::future::Future<Output = ()>>(
    targets: &[std::net::SocketAddr],
    locals: [u8; 2],
    policy: PathPolicy,
    body: impl FnOnce(MultipathHost) -> F,
) {
    let paths = vec![
        path_opts(targets[0], locals[0]),
        path_opts(targets[1], locals[1]),
    ];
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let opts = MultipathOptions {
            policy,
            no_path_timeout: Duration::from_secs(20),
        };
        let mp = MultipathHost::connect(paths, opts)
            .await
            .expect("both paths");
        body(mp).await
    });
}

#[test]
fn writes_fail_over_when_a_listener_dies() {
    let mut t = common::start_target_with(51, SIZE, |cfg| {
        cfg.listen.push(ListenAddr::new(ip(52), 4420));
    });
    let targets = t.target.listen_addrs().to_vec();
    with_two_paths(
        &targets,
        [53, 54],
        PathPolicy::RoundRobin,
        |mp| async move {
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
        },
    );
}

/// Writes `n` blocks from block `first` and returns how many each path completed.
async fn write_blocks(
    ns: &nvmf_initiator::MultipathNamespace,
    mp: &MultipathHost,
    first: usize,
    n: usize,
) -> Vec<u64> {
    let before = mp.completed_per_path();
    for i in first..first + n {
        let off = (i * BLOCK) as u64;
        ns.write(off / 512, &common::pattern(off, BLOCK, 0xA5), false)
            .await
            .unwrap_or_else(|e| panic!("write {i}: {e}"));
    }
    let after = mp.completed_per_path();
    after.iter().zip(before).map(|(a, b)| a - b).collect()
}

/// Waits (up to 10 s) until the host's ANA states for `ns` are `want`.
async fn wait_states(
    mp: &MultipathHost,
    ns: &nvmf_initiator::MultipathNamespace,
    want: [AnaState; 2],
) {
    let end = std::time::Instant::now() + Duration::from_secs(10);
    while mp.ana_states(ns) != want {
        assert!(
            std::time::Instant::now() < end,
            "ANA states {:?}, want {want:?}",
            mp.ana_states(ns)
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[test]
fn io_follows_the_targets_ana_states() {
    let t = common::start_target_with(61, SIZE, |cfg| {
        cfg.listen.push(ListenAddr::new(ip(62), 4420));
    });
    // PORTIDs 1 and 2, in listen order; every namespace is in ANA group 1.
    let (port0, port1) = (
        nvmf_target::subsystem::PORT_ID,
        nvmf_target::subsystem::PORT_ID + 1,
    );
    let targets = t.target.listen_addrs().to_vec();
    with_two_paths(
        &targets,
        [63, 64],
        PathPolicy::FirstOptimized,
        |mp| async move {
            let ns = mp.namespace(1).await.expect("namespace 1");
            assert_eq!(mp.ana_states(&ns), vec![AnaState::Optimized; 2]);
            let moved = write_blocks(&ns, &mp, 0, 64).await;
            assert_eq!(moved, vec![64, 0], "first optimized: path 0");

            // Path 0 inaccessible: the ANA change notice (or the status) moves I/O to 1.
            t.target
                .set_ana_state(port0, 1, AnaState::Inaccessible)
                .expect("set");
            let moved = write_blocks(&ns, &mp, 64, 64).await;
            assert_eq!(moved[1], 64, "path 1 took every write: {moved:?}");
            wait_states(&mp, &ns, [AnaState::Inaccessible, AnaState::Optimized]).await;

            // Back: path 0 optimized, path 1 non-optimized; heard from the notice alone.
            t.target
                .set_ana_state(port1, 1, AnaState::NonOptimized)
                .expect("set");
            t.target
                .set_ana_state(port0, 1, AnaState::Optimized)
                .expect("set");
            wait_states(&mp, &ns, [AnaState::Optimized, AnaState::NonOptimized]).await;
            let moved = write_blocks(&ns, &mp, 128, 64).await;
            assert_eq!(
                moved,
                vec![64, 0],
                "optimized before non-optimized: {moved:?}"
            );

            // A reload that names the states (`[[listen]] ana_groups`) sets them too: path
            // 0's group non-optimized, path 1's unlisted (optimized), so I/O moves to 1.
            let mut cfg =
                nvmf_target::config::TargetConfig::default_for(ip(61), NQN, &t.path, SIZE);
            cfg.listen.push(ListenAddr::new(ip(62), 4420));
            cfg.listen[0].ana_groups = vec![nvmf_target::config::AnaGroupConfig {
                grpid: 1,
                state: nvmf_target::config::AnaStateConfig::NonOptimized,
            }];
            let report = tokio::task::block_in_place(|| t.target.reload(&cfg)).expect("reload");
            eprintln!("reload: {report:?}");
            wait_states(&mp, &ns, [AnaState::NonOptimized, AnaState::Optimized]).await;
            let moved = write_blocks(&ns, &mp, 192, 64).await;
            assert_eq!(moved, vec![0, 64], "after the reload: {moved:?}");

            let mut back = vec![0u8; BLOCK];
            for i in 0..256 {
                let off = (i * BLOCK) as u64;
                ns.read(off / 512, &mut back).await.expect("read");
                assert!(back == common::pattern(off, BLOCK, 0xA5), "block {i}");
            }
            drop(ns);
            mp.disconnect().await.expect("disconnect");
        },
    );
}
