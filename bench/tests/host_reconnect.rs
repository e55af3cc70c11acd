//! The async host rides through a target restart and gives up cleanly on a target that
//! never returns (issue 15, item 1), with real processes and real sockets:
//!
//! - a host writes 4 KiB blocks in a loop from four tasks; the target process is
//!   killed with SIGKILL mid-run and started again on the same address and file two
//!   seconds later: every write call succeeds (the ones in flight are held and
//!   reissued on the new queues), writes go on after the restart, the host counts a
//!   reconnect, and every acknowledged block reads back as written;
//! - the target is killed and never comes back: a write held across the loss fails
//!   with a clear error once `ctrl_loss_tmo` has passed, every later call (I/O and
//!   admin) fails at once, the host says DEAD, and disconnect returns; nothing hangs.
//!
//! The target is this test binary run again as `reconnect_target_helper` (the target
//! library in its own process, so SIGKILL is a real process death). Real UDP sockets on
//! 127.0.0.240 - 127.0.0.243, a real file namespace.

// The tests serialise on a std Mutex held for their whole body, across awaits: each
// test has its own runtime, so the guard never blocks a task the test awaits.
#![allow(clippy::await_holding_lock)]

use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use nvmf_initiator::lifecycle::CtrlState;
use nvmf_initiator::{Host, HostError, HostOptions};

const NQN: &str = "nqn.2026-12.io.nvmf-rdma:host-reconnect";
const HELPER_ENV: &str = "NVMF_HOST_RECONNECT_TARGET";
/// A bound for hangs on a loaded 2-core machine, not a timing assertion.
const PATIENCE: Duration = Duration::from_secs(60);

/// Tests with a target run one at a time (busy-polling threads on a 2-core machine).
static SERIAL: Mutex<()> = Mutex::new(());

/// Not a test: the target process of the tests below, which start this test binary
/// again to run only this function, then SIGKILL it.
#[test]
#[ignore = "helper process of the reconnect tests (fails when run alone)"]
fn reconnect_target_helper() {
    let spec = std::env::var(HELPER_ENV).expect("run by the reconnect tests, which set it");
    let (ip, path) = spec.split_once(',').expect("ADDRESS,FILE");
    let cfg = nvmf_target::config::TargetConfig::default_for(
        ip.parse().unwrap(),
        NQN,
        Path::new(path),
        32 << 20,
    );
    let _target = nvmf_target::start(&cfg).expect("target");
    println!("READY");
    loop {
        std::thread::sleep(Duration::from_secs(1));
    }
}

/// The target process on `ip`, serving `dir/ns.img`; killed (SIGKILL) when dropped.
struct TargetProcess(Child);

impl TargetProcess {
    fn start(ip: &str, dir: &Path) -> Self {
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "reconnect_target_helper",
                "--ignored",
                "--nocapture",
            ])
            .env(HELPER_ENV, format!("{ip},{}", dir.join("ns.img").display()))
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("target helper process");
        let mut out = BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        while !line.contains("READY") {
            line.clear();
            if out.read_line(&mut line).unwrap_or(0) == 0 {
                let _ = child.kill();
                panic!("the target helper ended before it was ready");
            }
        }
        TargetProcess(child)
    }

    /// SIGKILL: no DREQ, no shutdown; the host only sees silence.
    fn kill(mut self) {
        self.0.kill().expect("SIGKILL");
        self.0.wait().expect("reaped");
    }
}

impl Drop for TargetProcess {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn options(target: &str, host: &str) -> HostOptions {
    let mut o = HostOptions::new(format!("{target}:4420").parse().unwrap(), NQN);
    o.local_ip = Some(host.parse().unwrap());
    o.queue_depth = 16;
    o.buffer_pool_bytes = Some(4 << 20);
    // Keep Alive every second, lost after two: the loss is found quickly.
    o.kato_ms = 2000;
    o.connect_timeout = Duration::from_secs(2);
    o.reconnect_delay = Duration::from_millis(500);
    o
}

/// Block `index`'s contents for generation `gen`.
fn pattern(index: u64, gen: u64) -> Vec<u8> {
    (0..4096u64)
        .map(|i| (i.wrapping_mul(31) ^ index.wrapping_mul(7) ^ gen.wrapping_mul(131)) as u8)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_and_restarted_target_is_ridden_through_and_every_acked_block_reads_back() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let target = TargetProcess::start("127.0.0.240", dir.path());
    let mut opts = options("127.0.0.240", "127.0.0.241");
    opts.ctrl_loss_tmo = Some(PATIENCE);
    let host = Host::connect(opts).await.expect("connect");
    let ns = host.namespace(1).await.expect("namespace 1");
    let per_block = u64::from(4096 / ns.block_size);
    let blocks = (ns.nlb / per_block).min(4096);
    const TASKS: u64 = 4;

    // Writers: task k writes blocks k, k + 4, ... round and round, a new generation
    // each round; the last acknowledged generation of each block is kept.
    let acked: Arc<Mutex<HashMap<u64, u64>>> = Arc::default();
    let writes = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let mut tasks = Vec::new();
    for k in 0..TASKS {
        let (ns, acked, writes, stop) = (ns.clone(), acked.clone(), writes.clone(), stop.clone());
        tasks.push(tokio::spawn(async move {
            let mut gen = 0u64;
            while !stop.load(Ordering::Acquire) {
                gen += 1;
                let mut index = k;
                while index < blocks && !stop.load(Ordering::Acquire) {
                    let data = pattern(index, gen);
                    ns.write(index * per_block, &data, false)
                        .await
                        .map_err(|e| format!("write of block {index} (generation {gen}): {e}"))?;
                    acked.lock().unwrap().insert(index, gen);
                    writes.fetch_add(1, Ordering::Relaxed);
                    index += TASKS;
                }
            }
            Ok::<(), String>(())
        }));
    }
    let wait_writes = |n: u64, what: &'static str| {
        let writes = writes.clone();
        async move {
            let deadline = Instant::now() + PATIENCE;
            while writes.load(Ordering::Relaxed) < n {
                assert!(Instant::now() < deadline, "{what}: not within {PATIENCE:?}");
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    };
    wait_writes(200, "writes before the kill").await;
    target.kill();
    let at_kill = writes.load(Ordering::Relaxed);
    tokio::time::sleep(Duration::from_secs(2)).await;
    let _target = TargetProcess::start("127.0.0.240", dir.path());
    // Writes resume on the new controller.
    wait_writes(at_kill + 400, "writes after the restart").await;
    assert!(host.reconnects() >= 1, "no reconnect counted");
    assert_eq!(host.state(), CtrlState::Live);
    stop.store(true, Ordering::Release);
    for t in tasks {
        t.await
            .expect("writer task")
            .expect("every write call succeeds across the restart");
    }
    // Every acknowledged block holds what was last written there.
    let acked = acked.lock().unwrap().clone();
    let mut back = vec![0u8; 4096];
    for (&index, &gen) in &acked {
        ns.read(index * per_block, &mut back)
            .await
            .expect("read back");
        assert!(
            back == pattern(index, gen),
            "block {index}: not generation {gen} as acknowledged"
        );
    }
    eprintln!(
        "{} writes ({} before the kill), {} blocks verified, {} reconnect(s), {} command(s) reissued",
        writes.load(Ordering::Relaxed),
        at_kill,
        acked.len(),
        host.reconnects(),
        host.reissued()
    );
    host.disconnect().await.expect("disconnect");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_target_that_never_returns_fails_every_call_after_ctrl_loss_tmo() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let target = TargetProcess::start("127.0.0.242", dir.path());
    let mut opts = options("127.0.0.242", "127.0.0.243");
    let ctrl_loss_tmo = Duration::from_secs(2);
    opts.ctrl_loss_tmo = Some(ctrl_loss_tmo);
    let host = Host::connect(opts).await.expect("connect");
    let ns = host.namespace(1).await.expect("namespace 1");
    let data = pattern(1, 1);
    ns.write(0, &data, false).await.expect("a write while live");
    target.kill();
    let killed = Instant::now();
    // A write in the gap: held while the host reconnects, failed when it gives up.
    let r = tokio::time::timeout(PATIENCE, ns.write(8, &data, false))
        .await
        .expect("the held write returns");
    let gave_up = killed.elapsed();
    match r {
        Err(HostError::ControllerDead(m)) => {
            assert!(m.contains("ctrl_loss_tmo (2 s)"), "{m}");
        }
        other => panic!("expected the controller given up, got {other:?}"),
    }
    assert!(
        gave_up >= ctrl_loss_tmo,
        "failed after {gave_up:?}, before ctrl_loss_tmo"
    );
    assert_eq!(host.state(), CtrlState::Dead);
    // Everything after fails at once with the same clear error.
    let t0 = Instant::now();
    let w = ns.write(16, &data, false).await.unwrap_err();
    assert!(matches!(w, HostError::ControllerDead(_)), "{w}");
    let mut back = vec![0u8; 4096];
    let r = ns.read(0, &mut back).await.unwrap_err();
    assert!(matches!(r, HostError::ControllerDead(_)), "{r}");
    let a = host.identify_controller().await.unwrap_err();
    assert!(matches!(a, HostError::ControllerDead(_)), "{a}");
    assert!(
        t0.elapsed() < Duration::from_secs(5),
        "calls on a dead host wait"
    );
    eprintln!("gave up {gave_up:?} after the kill: {w}");
    tokio::time::timeout(PATIENCE, host.disconnect())
        .await
        .expect("disconnect returns")
        .unwrap_err();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "flaky in the root network namespace (1 of 8 runs at 89ad1f6, 2-4 of 10 now): the \
            host sometimes goes to CONNECTING with 0 resets and the write already finished, \
            a reconnect instead of the timeout -> Abort -> reset path; under investigation \
            (run with --ignored)"]
async fn a_stalled_command_is_aborted_then_the_controller_reset_and_the_write_completes() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let target = TargetProcess::start("127.0.0.244", dir.path());
    let mut opts = options("127.0.0.244", "127.0.0.245");
    // The command's own timeout finds the stall (Keep Alive would take 30 s).
    opts.kato_ms = 60_000;
    opts.io_timeout = Some(Duration::from_secs(1));
    opts.admin_timeout = Duration::from_secs(1);
    opts.ctrl_loss_tmo = Some(PATIENCE);
    let host = Host::connect(opts).await.expect("connect");
    let ns = host.namespace(1).await.expect("namespace 1");
    ns.write(0, &pattern(0, 1), false).await.expect("a write");
    // The target process stops answering anything, then comes back as it was.
    let pid = target.0.id() as libc::pid_t;
    // SAFETY: signals to our own child process.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGSTOP) }, 0);
    let write = {
        let ns = ns.clone();
        tokio::spawn(async move { ns.write(8, &pattern(1, 1), false).await })
    };
    let deadline = Instant::now() + PATIENCE;
    // Reset, and the old queues torn down (CONNECTING).
    while host.resets() == 0 || host.state() != CtrlState::Connecting {
        assert!(
            Instant::now() < deadline,
            "no controller reset: {} resets, state {:?}, write finished {}",
            host.resets(),
            host.state(),
            write.is_finished()
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert!(!write.is_finished(), "the write is held across the reset");
    // SAFETY: as above.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGCONT) }, 0);
    tokio::time::timeout(PATIENCE, write)
        .await
        .expect("the held write returns")
        .expect("writer task")
        .expect("the write completes after the reset");
    assert!(host.reconnects() >= 1);
    let mut back = vec![0u8; 4096];
    ns.read(8, &mut back).await.expect("read back");
    assert!(back == pattern(1, 1), "the reissued write's data");
    eprintln!(
        "{} reset(s), {} reconnect(s), {} reissued",
        host.resets(),
        host.reconnects(),
        host.reissued()
    );
    host.disconnect().await.expect("disconnect");
    drop(target);
}

#[test]
fn nvmf_bench_with_ctrl_loss_tmo_rides_through_a_target_restart_and_verifies_every_block() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let target = TargetProcess::start("127.0.0.246", dir.path());
    let bench = Command::new(env!("CARGO_BIN_EXE_nvmf-bench"))
        .args([
            "--traddr=127.0.0.246",
            "--host-traddr=127.0.0.247",
            "--subnqn",
            NQN,
            "--rw=randrw",
            "--bs=4k",
            "--size=4M",
            "--iodepth=8",
            "--verify=crc32c",
            "--rate_iops=2000",
            "--time_based",
            "--runtime=12",
            "--ctrl-loss-tmo=60",
            "--reconnect-delay=1",
            "--output-format=json",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("nvmf-bench starts");
    std::thread::sleep(Duration::from_secs(3));
    target.kill();
    std::thread::sleep(Duration::from_secs(2));
    let _target = TargetProcess::start("127.0.0.246", dir.path());
    let out = bench.wait_with_output().expect("nvmf-bench ends");
    let stderr = String::from_utf8_lossy(&out.stderr);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(
        stderr.contains("nvmf-bench: reconnected to 127.0.0.246:4420"),
        "{stderr}"
    );
    let j: serde_json::Value = serde_json::from_str(&stdout).expect("JSON");
    let own = &j["nvmf-bench"];
    assert!(own["reconnects"].as_u64().is_some_and(|n| n >= 1), "{own}");
    let v = &own["verify"];
    assert_eq!(
        (&v["mismatches"], &v["passed"]),
        (&0.into(), &1.into()),
        "{v}"
    );
    assert!(v["verified_blocks"].as_u64().is_some_and(|n| n > 0), "{v}");
    assert_eq!(j["jobs"][0]["error"], 0, "{stdout}");
    eprintln!("{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn held_io_fails_after_fast_io_fail_tmo_and_io_runs_again_after_the_reconnect() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let target = TargetProcess::start("127.0.0.248", dir.path());
    let mut opts = options("127.0.0.248", "127.0.0.249");
    opts.ctrl_loss_tmo = Some(PATIENCE);
    opts.fast_io_fail_tmo = Some(Duration::from_secs(1));
    let host = Host::connect(opts).await.expect("connect");
    let ns = host.namespace(1).await.expect("namespace 1");
    ns.write(0, &pattern(0, 1), false).await.expect("a write");
    target.kill();
    let r = tokio::time::timeout(PATIENCE, ns.write(8, &pattern(1, 1), false))
        .await
        .expect("the held write returns");
    match r {
        Err(HostError::FailFast(m)) => assert!(!m.is_empty()),
        other => panic!("expected failfast, got {other:?}"),
    }
    // Failfast: later I/O fails at once while the host keeps reconnecting.
    let e = ns.write(8, &pattern(1, 1), false).await.unwrap_err();
    assert!(matches!(e, HostError::FailFast(_)), "{e}");
    assert_eq!(host.state(), CtrlState::Connecting);
    let _target = TargetProcess::start("127.0.0.248", dir.path());
    let deadline = Instant::now() + PATIENCE;
    while host.state() != CtrlState::Live {
        assert!(Instant::now() < deadline, "no reconnect");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    ns.write(8, &pattern(1, 2), false)
        .await
        .expect("I/O runs again once live");
    let mut back = vec![0u8; 4096];
    ns.read(8, &mut back).await.expect("read back");
    assert!(back == pattern(1, 2));
    host.disconnect().await.expect("disconnect");
}
