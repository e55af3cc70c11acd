//! A host that died without disconnecting comes back at once (issue 8, item 3).
//!
//! - A real `nvmf-bench` process is killed with SIGKILL in the middle of a run against a
//!   running target; a second run from the same address connects and does I/O at
//!   once (QPNs start at a random value per device instance, so the new process does
//!   not knock on the target's old connections).
//! - The worst case, forced: a restarted host reuses the QPN of its dead predecessor.
//!   The target refuses the REQ as stale (CM REJ 10), disconnects the old connection
//!   and logs why; the host tries again with a new QP and connects, and I/O runs.
//!
//! Real UDP sockets on 127.0.0.200 - 127.0.0.203, a real file namespace.
use std::io::Write;
use std::net::{IpAddr, SocketAddr};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::Ordering;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use nvme::RdmaCmRequest;
use nvmf_bench::engine::{IoCompletion, IoEngine};
use nvmf_bench::workload::{IoOp, IoRequest};
use nvmf_bench::QueueEngine;
use nvmf_initiator::{Controller, ControllerOptions, HostOptions};
use nvmf_target::config::TargetConfig;
use nvmf_target::TargetHandle;
use transport::cm::{CmEvent, ConnectParams};
use transport::soft::{CmAgent, DeviceConfig, SoftDevice};
use transport::verbs::Mtu;

const NQN: &str = "nqn.2026-11.io.nvmf-rdma:reconnect";
/// How long a step may take on a loaded 2-core machine before the test calls it stuck
/// (a bound for hangs, not a timing assertion).
const PATIENCE: Duration = Duration::from_secs(60);

/// Tests with a target run one at a time (busy-polling threads on a 2-core machine).
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// Every log line of this test process (target and host run in it), as JSON.
static LOG: Mutex<Vec<u8>> = Mutex::new(Vec::new());

struct LogWriter;

impl Write for LogWriter {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        LOG.lock()
            .unwrap_or_else(|e| e.into_inner())
            .extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Installs the JSON log capture once and returns the lines logged so far.
fn log_lines() -> Vec<serde_json::Value> {
    static INIT: OnceLock<()> = OnceLock::new();
    INIT.get_or_init(|| {
        tracing_subscriber::fmt()
            .json()
            .flatten_event(true)
            .with_env_filter("info")
            .with_writer(|| LogWriter)
            .init();
    });
    let log = LOG.lock().unwrap_or_else(|e| e.into_inner());
    String::from_utf8_lossy(&log)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

fn start_target(ip: &str, dir: &Path) -> TargetHandle {
    let ip: IpAddr = ip.parse().unwrap();
    let cfg = TargetConfig::default_for(ip, NQN, &dir.join("ns.img"), 16 << 20);
    nvmf_target::start(&cfg).expect("target starts")
}

fn capsules(t: &TargetHandle) -> u64 {
    t.poll_group_counters()
        .iter()
        .map(|c| c.capsules.load(Ordering::Relaxed))
        .sum()
}

/// Waits (bounded by [`PATIENCE`]) until `cond` holds.
fn wait_for(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + PATIENCE;
    while !cond() {
        assert!(Instant::now() < deadline, "{what}: not within {PATIENCE:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A child process that a failing test does not leave behind.
struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn killed_bench_runs_again_at_once() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let target = start_target("127.0.0.202", dir.path());
    let bench = |more: &[&str]| {
        let mut c = Command::new(env!("CARGO_BIN_EXE_nvmf-bench"));
        c.args([
            "--traddr",
            "127.0.0.202",
            "--subnqn",
            NQN,
            "--host-traddr",
            "127.0.0.203",
            "--rw",
            "randrw",
            "--size",
            "4M",
        ]);
        c.args(more);
        c
    };
    let mut first = KillOnDrop(
        bench(&["--time_based", "--runtime", "60"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("nvmf-bench starts"),
    );
    // Killed while I/O runs: no disconnect, no shutdown, the target keeps its queues.
    wait_for("the first run's I/O", || capsules(&target) > 200);
    first.0.kill().expect("SIGKILL");
    let _ = first.0.wait();
    let before = capsules(&target);
    let out = bench(&["--io_size", "256k", "--runtime", "60"])
        .output()
        .expect("nvmf-bench runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "the second run failed right after the kill: {stderr}"
    );
    // 256 KiB in 4 KiB blocks: 64 command capsules besides the admin ones.
    assert!(
        capsules(&target) >= before + 64,
        "the second run did not do its I/O: {stderr}"
    );
    drop(target);
}

/// A connection request's parameters as a host sends them for the admin queue.
fn admin_req(target: IpAddr, qpn: u32) -> ConnectParams {
    let pd = RdmaCmRequest::new(0, 32, 31);
    ConnectParams {
        dest: target,
        dest_port: 4420,
        src_port: 0xC321,
        local_qpn: qpn,
        starting_psn: 0x100,
        responder_resources: 16,
        initiator_depth: 0,
        retry_count: 7,
        rnr_retry_count: 7,
        path_mtu: Mtu::Mtu1024,
        local_ack_timeout: 17,
        private_data: zerocopy::IntoBytes::as_bytes(&pd).to_vec(),
    }
}

fn find<'a>(
    lines: &'a [serde_json::Value],
    message: &str,
    pred: impl Fn(&serde_json::Value) -> bool,
) -> Option<&'a serde_json::Value> {
    lines.iter().find(|l| {
        l["message"]
            .as_str()
            .is_some_and(|m| m.starts_with(message))
            && pred(l)
    })
}

#[test]
fn restarted_host_with_the_same_qpn_is_refused_as_stale_then_retries() {
    let _serial = serial();
    let _ = log_lines();
    let dir = tempfile::tempdir().unwrap();
    let target = start_target("127.0.0.200", dir.path());
    let (tip, hip): (IpAddr, IpAddr) = (
        "127.0.0.200".parse().unwrap(),
        "127.0.0.201".parse().unwrap(),
    );
    const DEAD_QPN: u32 = 0x1000;
    // The first host connects its admin queue from QP 0x1000, then dies: its CM agent
    // and device go away without a DREQ.
    {
        let dev = SoftDevice::open(DeviceConfig::new(hip)).expect("device");
        let cm = CmAgent::start(&dev).expect("CM agent");
        let (id, events) = cm.connect(admin_req(tip, DEAD_QPN)).expect("REQ");
        match events.recv_timeout(PATIENCE) {
            Ok(CmEvent::ConnectReply { .. }) => cm.send_rtu(id).expect("RTU"),
            other => panic!("the target did not accept the first host: {other:?}"),
        }
    }
    // The restarted host on the same address numbers its QPs from the same QPN.
    let dev = SoftDevice::open(DeviceConfig {
        rx_queues: 2,
        first_qpn: Some(DEAD_QPN),
        ..DeviceConfig::new(hip)
    })
    .expect("device");
    let cm = CmAgent::start(&dev).expect("CM agent");
    let mut hopts = HostOptions::new(SocketAddr::new(tip, 4420), NQN);
    hopts.local_ip = Some(hip);
    let pd = transport::verbs::Device::alloc_pd(&*dev).expect("PD");
    let pool = nvmf_initiator::BufferPool::register::<transport::soft::SoftProvider>(
        &dev,
        pd,
        4 << 20,
        nvmf_initiator::RemoteAccess::Windows,
    )
    .expect("pool");
    let mut ctrl = Controller::connect(
        dev.open_context(0).unwrap(),
        &cm,
        ControllerOptions::from(&hopts),
        pd,
        &pool,
    )
    .expect("the host connects after the stale refusal");
    // The first REQ (QP 0x1000) was refused; the retry came from the next QP of the
    // admin poll group's class.
    assert_eq!(ctrl.admin_queue_mut().qp_num(), DEAD_QPN + 2);
    assert_eq!(ctrl.set_number_of_queues(1).unwrap(), 1);
    let ns = ctrl.identify_namespace(1).unwrap();
    let q = ctrl
        .connect_io_queue(dev.open_context(1).unwrap(), 1, 8, 4096)
        .expect("I/O queue");
    let mut e = QueueEngine::new(q, 1, ns.block_size).unwrap();
    let data: Vec<u8> = (0..4096u32).map(|i| (i * 7 + 3) as u8).collect();
    e.buffer(0)[..4096].copy_from_slice(&data);
    for op in [IoOp::Write, IoOp::Read] {
        if op == IoOp::Read {
            e.buffer(0)[..4096].fill(0);
        }
        let req = IoRequest {
            op,
            offset: 8192,
            len: 4096,
        };
        e.submit(0, &req).unwrap();
        let mut done: Vec<IoCompletion> = Vec::new();
        wait_for("the I/O", || {
            e.poll(&mut done).unwrap();
            !done.is_empty()
        });
        assert!(done[0].result.is_ok(), "{op:?}");
    }
    assert!(
        e.buffer(0)[..4096] == data[..],
        "read back what was written"
    );

    ctrl.shutdown(e.into_queue().into_iter().collect())
        .expect("clean shutdown");

    // What the target and the host said about it.
    wait_for("the old queue's teardown in the log", || {
        find(&log_lines(), "queue disconnected", |l| {
            l["host_qpn"] == "0x1000" && l["by"] == "target"
        })
        .is_some()
    });
    let lines = log_lines();
    let refused = find(&lines, "refused an RDMA CM connection request", |l| {
        l["host_qpn"] == "0x1000"
    })
    .expect("the target logs the stale refusal");
    assert_eq!(refused["level"], "WARN");
    assert_eq!(refused["host_addr"], "127.0.0.201");
    assert!(
        refused["reason"]
            .as_str()
            .is_some_and(|r| r.starts_with("stale connection")),
        "{refused}"
    );
    let old = find(&lines, "queue disconnected", |l| l["host_qpn"] == "0x1000").unwrap();
    assert_eq!((&old["qid"], &old["by"]), (&0.into(), &"target".into()));
    assert!(old["reason"]
        .as_str()
        .unwrap()
        .contains("connected again from the same QP"));
    let retry = find(&lines, "the target refused the connection as stale", |_| {
        true
    })
    .expect("the host logs its retry");
    assert_eq!(
        (&retry["level"], &retry["attempt"]),
        (&"INFO".into(), &1.into())
    );
    let created = find(&lines, "controller created", |l| l["host_qpn"] == "0x1002")
        .expect("the target logs the new controller");
    assert_eq!(created["hostnqn"], hopts.hostnqn.as_str());
    assert_eq!(created["subnqn"], NQN);
    assert!(
        created["cntlid"].as_u64().is_some_and(|c| c > 0),
        "{created}"
    );
    assert!(find(&lines, "I/O queue connected", |l| l["qid"] == 1).is_some());
    drop(target);
}
