//! `nvmf-bench`: fio's workloads and output over NVMe over Fabrics (RDMA, RoCEv2).
//!
//! By default it starts an embedded target (an in-process `nvmf-target` on a 1 GiB
//! file in the temp directory, laid out with data first as fio lays out its files)
//! on 127.0.0.2 and connects to it from 127.0.0.3; with `--traddr` it benchmarks a
//! remote target. One busy-polling thread drives every job (one I/O queue each); the
//! embedded target's poll group takes the other core.
use std::io::Write;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::Path;
use std::process::ExitCode;

use clap::Parser;
use nvmf_initiator::bench::{report, run_in_place, BenchArgs, FaultSummary, Job, OutputFormat};
use nvmf_initiator::{HostOptions, QueueEngine, SyncHost};
use nvmf_target::config::TargetConfig;
use transport::soft::FaultConfig;

/// Subsystem NQN of the embedded target.
const EMBEDDED_NQN: &str = "nqn.2026-11.io.nvmf-rdma:bench";

fn fail(msg: impl std::fmt::Display) -> ExitCode {
    eprintln!("nvmf-bench: {msg}");
    ExitCode::FAILURE
}

/// Writes `size` bytes of pseudo-random data (fio's layout: no holes, so reads hit
/// real blocks), 1 MiB at a time.
fn lay_out(path: &Path, size: u64) -> std::io::Result<()> {
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .truncate(true)
        .write(true)
        .open(path)?;
    let mut buf = vec![0u8; 1 << 20];
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    for w in buf.chunks_exact_mut(8) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        w.copy_from_slice(&x.to_le_bytes());
    }
    let mut left = size;
    let mut n = 0u64;
    while left > 0 {
        buf[..8].copy_from_slice(&n.to_le_bytes());
        let k = left.min(buf.len() as u64) as usize;
        f.write_all(&buf[..k])?;
        left -= k as u64;
        n += 1;
    }
    f.sync_data()
}

struct Embedded {
    target: nvmf_target::TargetHandle,
    host_ip: IpAddr,
    _dir: tempfile::TempDir,
}

fn start_embedded(args: &BenchArgs, faults: Option<FaultConfig>) -> Result<Embedded, String> {
    let parent = args.embedded_dir_or_default();
    let dir = tempfile::Builder::new()
        .prefix("nvmf-bench.")
        .tempdir_in(&parent)
        .map_err(|e| format!("creating a directory in {}: {e}", parent.display()))?;
    let path = dir.path().join(format!("{}.0.0", args.name));
    let size = args.embedded_size;
    if size == 0 || !size.is_multiple_of(4096) {
        return Err(format!(
            "--embedded-size {size} must be a positive multiple of 4096"
        ));
    }
    eprintln!(
        "{}: Laying out IO file ({} MiB) in {}",
        args.name,
        size >> 20,
        dir.path().display()
    );
    lay_out(&path, size).map_err(|e| format!("laying out {}: {e}", path.display()))?;
    // 127.0.0.2/.3 by default; the next pairs when another run holds them.
    let mut last_err = String::new();
    for pair in 0..16u8 {
        let tip = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2 + 2 * pair));
        let cfg = TargetConfig::default_for(tip, EMBEDDED_NQN, &path, size);
        match nvmf_target::server::start_with_faults(&cfg, faults) {
            Ok(target) => {
                let host_ip = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 3 + 2 * pair));
                return Ok(Embedded {
                    target,
                    host_ip,
                    _dir: dir,
                });
            }
            Err(nvmf_target::TargetError::Socket(e)) => last_err = e.to_string(),
            Err(e) => return Err(format!("embedded target: {e}")),
        }
    }
    Err(format!("embedded target: {last_err}"))
}

fn main() -> ExitCode {
    let args = BenchArgs::parse();
    // Warnings, and the host library's connection notes (e.g. a retried Connect).
    nvmf_target::logging::init(args.log_format, "warn,nvmf_initiator=info");
    // --inject-*: on the embedded target's device and the host's (refused with --traddr).
    let faults = match args.fault_config() {
        Ok(f) => f,
        Err(e) => return fail(e),
    };
    let (embedded, mut opts) = match &args.traddr {
        None => {
            let e = match start_embedded(&args, faults) {
                Ok(e) => e,
                Err(m) => return fail(m),
            };
            let mut o = HostOptions::new(e.target.listen_addr(), EMBEDDED_NQN);
            o.local_ip = Some(e.host_ip);
            o.faults = faults;
            (Some(e), o)
        }
        Some(addr) => {
            let Ok(ip) = addr.parse::<IpAddr>() else {
                return fail(format!("--traddr {addr}: not an IP address"));
            };
            let Some(nqn) = args.subnqn.clone() else {
                return fail("--traddr needs --subnqn (the subsystem NQN to connect to)");
            };
            let mut o = HostOptions::new(SocketAddr::new(ip, args.trsvcid), nqn);
            if let Some(h) = &args.host_traddr {
                match h.parse::<IpAddr>() {
                    Ok(local) => o.local_ip = Some(local),
                    Err(_) => return fail(format!("--host-traddr {h}: not an IP address")),
                }
            }
            (None, o)
        }
    };
    if let Some(h) = &args.hostnqn {
        opts.hostnqn = h.clone();
    }
    opts.io_queues = args.numjobs as u16;
    opts.queue_depth = (args.iodepth + 1).min(1024) as u16;
    opts.max_io_bytes = args.bs as usize;
    let mut host = match SyncHost::connect(&opts) {
        Ok(h) => h,
        Err(e) => {
            return fail(format!(
                "connecting to {} ({}): {e}",
                opts.traddr, opts.subnqn
            ))
        }
    };
    let ns = match host.controller().identify_namespace(args.nsid) {
        Ok(ns) => ns,
        Err(e) => return fail(format!("namespace {}: {e}", args.nsid)),
    };
    let ns_bytes = ns.nsze * ns.block_size as u64;
    let specs = match args.job_specs(ns_bytes) {
        Ok(s) => s,
        Err(e) => return fail(e),
    };
    let host_dev = host.device().clone();
    let (queues, keeper) = host.into_io_queues();
    if queues.len() < specs.len() {
        return fail(format!(
            "the target granted {} I/O queues, {} jobs need one each",
            queues.len(),
            specs.len()
        ));
    }
    let mut jobs = Vec::with_capacity(specs.len());
    for (spec, q) in specs.into_iter().zip(queues) {
        match QueueEngine::new(q, args.nsid, ns.block_size) {
            Ok(engine) => jobs.push(Job::new(spec, Box::new(engine))),
            Err(e) => return fail(e),
        }
    }
    let mut result = run_in_place(&mut jobs, &args.run_options(), None);
    drop(jobs);
    if let (Some(f), Some(e)) = (&faults, &embedded) {
        let target = e.target.device().counters().snapshot();
        let host = host_dev.counters().snapshot();
        result.faults = Some(FaultSummary::from_devices(
            f,
            &[("target", target), ("host", host)],
        ));
    }
    if let Err(e) = report::write_report(&result, &args) {
        return fail(format!("writing the report: {e}"));
    }
    if let Err(e) = keeper.shutdown(Vec::new()) {
        eprintln!("nvmf-bench: disconnect: {e}");
    }
    if let Some(e) = embedded {
        if args.output_format == OutputFormat::Normal {
            let c = e.target.device().counters().snapshot();
            eprintln!(
                "embedded target: {} packets sent, {} received, {} ICRC errors, {} payload bytes sent zero-copy",
                c.sent_pkts, c.rcvd_pkts, c.icrc_errors, c.tx_payload_bytes_zero_copy
            );
        }
        e.target.shutdown();
    }
    if let Some(v) = result.verify {
        // The text report on stdout already ends with this line.
        if args.output_format != OutputFormat::Normal || args.output.is_some() {
            eprintln!(
                "verify: {} blocks verified, {} mismatches",
                v.verified, v.mismatches
            );
        }
    }
    if !result.passed() {
        return ExitCode::FAILURE;
    }
    ExitCode::SUCCESS
}
