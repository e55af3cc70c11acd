//! The end-to-end fault matrix (issue 4 §5), bounded for CI: verified random mixed
//! I/O through the real NVMe/RDMA path (an in-process target and host over loopback
//! UDP sockets) while both soft devices inject faults on receive
//! (`transport::soft::fault`): loss 0, 0.0001, 0.001, 0.01 and 0.05, and reordering,
//! duplication and corruption alone. Every cell must verify every block it reads
//! back with zero mismatches, and every fault asked for must have been injected.
//!
//! Each cell issues a fixed amount of I/O (randrw, then fio's verify phase reading
//! back every block written), so the number of packets, and with a fixed seed the
//! number of decisions drawn, does not depend on the machine's speed. Cells run one
//! at a time (two busy-polling threads each, on a 2-core machine) on their own pair
//! of addresses in 127.0.0.110-127.0.0.125.
use std::net::{IpAddr, Ipv4Addr};
use std::time::Duration;

use nvmf_bench::QueueEngine;
use nvmf_bench::{run, FaultSummary, Job, JobSpec, RunOptions, RwMode, VerifyMode, VerifySummary};
use nvmf_initiator::{HostOptions, SyncHost};
use nvmf_target::config::TargetConfig;
use transport::soft::{DeviceCountersSnapshot, FaultConfig};

const NQN: &str = "nqn.2026-11.io.nvmf-rdma:fault-matrix";
/// Namespace size: 16 MiB (4096 blocks of 4 KiB; the region the jobs use).
const NS_BYTES: u64 = 16 << 20;
/// Block size of the I/O: 16 KiB, four full-MTU packets of data per I/O, so the
/// low-probability cells draw enough packets to see faults.
const BS: u32 = 16 << 10;
/// I/O issued per cell before the verify phase (randrw, half writes): 3000 x 16 KiB.
const IO_BYTES: u64 = 3000 * BS as u64;
/// Seed of every cell's fault decisions.
const SEED: u64 = 0x5EED;

static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn ip(last: u8) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(127, 0, 0, last))
}

/// What one cell measured.
struct Outcome {
    verify: VerifySummary,
    faults: FaultSummary,
    target: DeviceCountersSnapshot,
    host: DeviceCountersSnapshot,
    ios: u64,
}

/// Runs one cell: a target on 127.0.0.`t`, a host on 127.0.0.`t + 1`, both with
/// `faults`, randrw QD16 with crc32c verification. Panics (the test fails) on any
/// setup failure or job error, naming the cell.
fn run_cell(name: &str, t: u8, faults: Option<FaultConfig>) -> Outcome {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()),
        )
        .with_test_writer()
        .try_init();
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("ns1.img");
    let cfg = TargetConfig::default_for(ip(t), NQN, &path, NS_BYTES);
    let target = nvmf_target::start_with_faults(&cfg, faults).expect("start target");

    let mut opts = HostOptions::new(target.listen_addr(), NQN);
    opts.local_ip = Some(ip(t + 1));
    opts.io_queues = 1;
    opts.queue_depth = 17;
    opts.max_io_bytes = BS as usize;
    let soft = transport::soft::SoftOptions {
        faults,
        ..Default::default()
    };
    let mut host = SyncHost::<transport::soft::SoftProvider>::connect_with_options(&opts, &soft)
        .unwrap_or_else(|e| panic!("{name}: connect: {e}"));
    let ns = host
        .controller()
        .identify_namespace(1)
        .unwrap_or_else(|e| panic!("{name}: identify: {e}"));
    let host_dev = host.device().clone();
    let (mut queues, keeper) = host.into_io_queues();
    let queue = queues.pop().expect("one I/O queue");
    let engine = QueueEngine::new(queue, 1, ns.block_size).expect("engine");
    let spec = JobSpec {
        name: name.to_string(),
        rw: RwMode::RandRw,
        rwmixread: 50,
        bs: BS,
        iodepth: 16,
        offset: 0,
        size: NS_BYTES,
        io_limit: Some(IO_BYTES),
        seed: 0x89,
        // A bound, not a measurement: the cell ends when its I/O is done.
        runtime: Duration::from_secs(120),
        verify: VerifyMode::Crc32c,
        ..JobSpec::default()
    };
    let run_opts = RunOptions::default();
    let result = run(vec![Job::new(spec, Box::new(engine))], &run_opts);
    let target_c = target.device().counters().snapshot();
    let host_c = host_dev.counters().snapshot();
    let _ = keeper.shutdown(Vec::new());
    target.shutdown();

    let job = &result.jobs[0];
    assert!(
        job.error.is_none(),
        "{name} (fault seed {SEED:#x}): job failed: {:?}; target {target_c:?}; host {host_c:?}",
        job.error
    );
    assert!(
        result.passed(),
        "{name} (fault seed {SEED:#x}): run did not pass"
    );
    let verify = result.verify.expect("verification ran");
    let cfg = faults.unwrap_or_else(|| FaultConfig::with_seed(SEED));
    let faults = FaultSummary::from_devices(&cfg, &[("target", target_c), ("host", host_c)]);
    let ios = job.dirs.iter().map(|d| d.ios).sum();
    eprintln!(
        "{name}: {ios} I/Os, {} blocks verified, {} mismatches; injected {:?}",
        verify.verified, verify.mismatches, faults.sides
    );
    Outcome {
        verify,
        faults,
        target: target_c,
        host: host_c,
        ios,
    }
}

fn faults(loss: f64, reorder: f64, duplicate: f64, corrupt: f64) -> Option<FaultConfig> {
    Some(FaultConfig {
        loss,
        reorder,
        duplicate,
        corrupt,
        ..FaultConfig::with_seed(SEED)
    })
}

/// Sums a counter over both devices.
fn both(o: &Outcome, f: impl Fn(&DeviceCountersSnapshot) -> u64) -> u64 {
    f(&o.target) + f(&o.host)
}

/// What every cell must show: all I/O done, blocks verified, none damaged.
fn assert_clean(name: &str, o: &Outcome) {
    assert_eq!(o.verify.mismatches, 0, "{name}: mismatches");
    assert!(
        o.ios >= IO_BYTES / u64::from(BS),
        "{name}: only {} I/Os",
        o.ios
    );
    // randrw writes about half its blocks; the verify phase reads each written one.
    assert!(
        o.verify.verified >= 500,
        "{name}: only {} blocks verified",
        o.verify.verified
    );
}

/// A loss-only cell: drops injected, nothing else; with `each_side`, by both devices.
///
/// The decisions are a fixed stream per poll group, so whether a drop falls within a
/// cell's ~14k (target) and ~19k (host) received packets is fixed too: with [`SEED`],
/// at 0.0001 the host's I/O poll group drops its packet 569 (the target's first
/// drop, its packet 10819, is too close to the end to rely on); at 0.001 both drop
/// within their first 2000.
fn loss_cell(name: &str, t: u8, p: f64, each_side: bool) {
    let o = run_cell(name, t, faults(p, 0.0, 0.0, 0.0));
    assert_clean(name, &o);
    let dropped = both(&o, |c| c.injected_drops);
    assert!(dropped > 0, "{name}: no drops injected");
    if each_side {
        assert!(
            o.faults.sides.iter().all(|s| s.dropped > 0),
            "{name}: a side injected no drops: {:?}",
            o.faults.sides
        );
    }
    assert_eq!(
        both(&o, |c| c.injected_dups
            + c.injected_reorders
            + c.injected_corruptions),
        0,
        "{name}: faults not asked for"
    );
    assert_eq!(both(&o, |c| c.icrc_errors), 0, "{name}");
}

#[test]
fn loss_0() {
    let o = run_cell("loss-0", 110, None);
    assert_clean("loss-0", &o);
    assert_eq!(o.faults.total_injected(), 0);
    assert_eq!(both(&o, |c| c.icrc_errors), 0);
}

#[test]
fn loss_0_0001() {
    loss_cell("loss-0.0001", 112, 0.0001, false);
}

#[test]
fn loss_0_001() {
    loss_cell("loss-0.001", 114, 0.001, true);
}

#[test]
fn loss_0_01() {
    loss_cell("loss-0.01", 116, 0.01, true);
}

#[test]
fn loss_0_05() {
    loss_cell("loss-0.05", 118, 0.05, true);
}

#[test]
fn reorder_alone() {
    let o = run_cell("reorder-0.01", 120, faults(0.0, 0.01, 0.0, 0.0));
    assert_clean("reorder", &o);
    assert!(
        both(&o, |c| c.injected_reorders) > 0,
        "no reordering injected"
    );
    assert_eq!(both(&o, |c| c.injected_drops + c.injected_dups), 0);
}

#[test]
fn duplication_alone() {
    let o = run_cell("dup-0.01", 122, faults(0.0, 0.0, 0.01, 0.0));
    assert_clean("dup", &o);
    assert!(both(&o, |c| c.injected_dups) > 0, "no duplicates injected");
    assert_eq!(both(&o, |c| c.injected_drops + c.injected_reorders), 0);
}

#[test]
fn corruption_alone_is_caught_by_the_icrc() {
    let o = run_cell("corrupt-0.01", 124, faults(0.0, 0.0, 0.0, 0.01));
    assert_clean("corrupt", &o);
    let corrupted = both(&o, |c| c.injected_corruptions);
    assert!(corrupted > 0, "no corruption injected");
    // Every flipped bit is caught by the ICRC check, on the device that flipped it.
    assert_eq!(o.target.icrc_errors, o.target.injected_corruptions);
    assert_eq!(o.host.icrc_errors, o.host.injected_corruptions);
}
