//! `nvmf-bench`: fio's workloads and output over NVMe over Fabrics (RDMA, RoCEv2).
//!
//! By default it starts an embedded target (an in-process `nvmf-target` on a 1 GiB
//! file in the temp directory, laid out with data first as fio lays out its files,
//! and unlinked so it never outlives the process) on 127.0.0.2 and connects to it
//! from 127.0.0.3; with `--traddr` it benchmarks a remote target. One busy-polling
//! thread drives every job (one I/O queue each); the embedded target's poll group
//! takes the other core.
//!
//! The host runs on the provider `--provider` names: the soft provider (the default;
//! fault injection and the embedded target need it) or, in builds with the `verbs`
//! feature, the verbs provider on the RDMA device of `--host-traddr` (a remote target
//! only). Everything after the device is opened is the same code, generic over the
//! provider ([`run_host`]).
//!
//! Order of work: every argument that can be checked is checked, and `--output` is
//! created, before anything starts; the block size is checked against the namespace
//! right after Identify, before any I/O. Ctrl-C or SIGTERM stops the jobs; the report
//! of what ran is printed, the host disconnects and the exit status is 128 (fio's); a
//! second signal exits at once (see `nvmf_bench::signals`).
use std::io::{IsTerminal, Write};
use std::net::{IpAddr, SocketAddr};
use std::process::ExitCode;
use std::sync::Arc;

use clap::Parser;
use nvmf_bench::embedded::{EmbeddedTarget, EMBEDDED_NQN};
use nvmf_bench::report::{self, render_header, verify_problem, ReportOutput};
use nvmf_bench::signals::{StopSignals, EXIT_STATUS_SIGNALED};
use nvmf_bench::QueueEngine;
use nvmf_bench::{
    run_with, BenchArgs, CompletionMode, EtaLine, EtaMode, FaultSummary, Job, OutputFormat,
    ProviderKind, RunControl,
};
use nvmf_initiator::{HostOptions, SyncHost};
use transport::soft::xdp::PacketPath;
use transport::soft::{DeviceCountersSnapshot, FaultConfig, SoftOptions, SoftProvider};
use transport::verbs::{DeviceOf, Provider};
use transport::PacketPathKind;

fn fail(msg: impl std::fmt::Display) -> ExitCode {
    eprintln!("nvmf-bench: {msg}");
    ExitCode::FAILURE
}

/// What can be decided from the arguments alone, checked before anything starts.
struct Plan {
    faults: Option<FaultConfig>,
    /// The soft provider's packet path (`--packet-path`, `--interface`).
    packet_path: PacketPath,
    /// The remote target's host options; `None` for the embedded target.
    remote: Option<HostOptions>,
    output: ReportOutput,
}

fn plan(args: &BenchArgs) -> Result<Plan, String> {
    args.check_provider().map_err(|e| e.to_string())?;
    // --inject-*: on the embedded target's device and the host's (refused with --traddr).
    let faults = args.fault_config().map_err(|e| e.to_string())?;
    args.embedded_data_slab().map_err(|e| e.to_string())?;
    if args.baseline && args.traddr.is_some() {
        return Err(
            "--baseline measures the floor between this run's two local addresses \
                    and reads the embedded target's file, so it needs the embedded target: \
                    drop --traddr (or --baseline)"
                .into(),
        );
    }
    if args.packet_path != PacketPathKind::Udp && args.traddr.is_none() {
        return Err(
            "--packet-path af-xdp needs a remote target (--traddr): the embedded \
                    target talks over loopback, which has no XDP path worth taking"
                .into(),
        );
    }
    let packet_path = args
        .packet_path
        .with_interface(args.interface.as_deref())
        .map_err(|e| format!("{e}: the interface of --host-traddr"))?;
    let remote = match &args.traddr {
        None => {
            nvmf_bench::embedded::check_size(args.embedded_size)?;
            // The namespace is exactly the embedded file: regions can be checked now.
            args.job_specs(args.embedded_size)
                .map_err(|e| format!("{e} (the embedded target's namespace is --embedded-size)"))?;
            None
        }
        Some(addr) => {
            let ip = addr
                .parse::<IpAddr>()
                .map_err(|_| format!("--traddr {addr}: not an IP address"))?;
            let nqn = args
                .subnqn
                .clone()
                .ok_or("--traddr needs --subnqn (the subsystem NQN to connect to)")?;
            let mut o = HostOptions::new(SocketAddr::new(ip, args.trsvcid), nqn);
            if let Some(h) = &args.host_traddr {
                let local = h
                    .parse::<IpAddr>()
                    .map_err(|_| format!("--host-traddr {h}: not an IP address"))?;
                o.local_ip = Some(local);
            }
            Some(o)
        }
    };
    let output = ReportOutput::open(args)?;
    Ok(Plan {
        faults,
        packet_path,
        remote,
        output,
    })
}

/// Whether fio's progress line is shown (fio `skip_eta`): normal output only, and on
/// a terminal unless `--eta always`.
fn show_progress(args: &BenchArgs) -> bool {
    args.output_format == OutputFormat::Normal
        && match args.eta {
            EtaMode::Never => false,
            EtaMode::Always => true,
            EtaMode::Auto => std::io::stdout().is_terminal(),
        }
}

fn print_stdout(text: &str) {
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(text.as_bytes());
    let _ = out.flush();
}

fn main() -> ExitCode {
    let args = BenchArgs::parse();
    // Warnings, and the host library's connection notes (e.g. a retried Connect).
    nvmf_target::logging::init(args.log_format, "warn,nvmf_initiator=info");
    // The soft provider opens a UDP socket per QP: allow as many as the hard limit does.
    if let Err(e) = transport::fdlimit::raise_soft_to_hard() {
        eprintln!(
            "nvmf-bench: cannot raise the open-file limit RLIMIT_NOFILE to its hard limit: {e}"
        );
    }
    bench(&args)
}

fn bench(args: &BenchArgs) -> ExitCode {
    let plan = match plan(args) {
        Ok(p) => p,
        Err(m) => return fail(m),
    };
    for w in args.warnings() {
        eprintln!("nvmf-bench: {w}");
    }
    let signals = match StopSignals::install() {
        Ok(s) => s,
        Err(e) => return fail(format!("installing the SIGINT/SIGTERM handlers: {e}")),
    };
    match args.provider {
        ProviderKind::Soft => bench_soft(args, plan, &signals),
        ProviderKind::Verbs => bench_verbs(args, plan, &signals),
    }
}

/// The exit of a run a signal stopped before the jobs started.
fn interrupted(signals: &StopSignals, what: &str) -> ExitCode {
    eprintln!(
        "nvmf-bench: terminating on signal {} ({what})",
        signals.received().unwrap_or(0)
    );
    ExitCode::from(EXIT_STATUS_SIGNALED)
}

/// The soft provider: the embedded target (or a remote one) and fault injection.
fn bench_soft(args: &BenchArgs, plan: Plan, signals: &StopSignals) -> ExitCode {
    let Plan {
        faults,
        packet_path,
        remote,
        output,
    } = plan;
    let (embedded, opts) = match remote {
        None => {
            let dir = args.embedded_dir_or_default();
            let e = match EmbeddedTarget::start(
                &dir,
                args.embedded_size,
                &args.name,
                args.data_slab,
                faults,
                Some(signals.flag()),
            ) {
                Ok(e) => e,
                Err(_) if signals.received().is_some() => {
                    return interrupted(signals, "laying out")
                }
                Err(m) => return fail(m),
            };
            let mut o = HostOptions::new(e.target.listen_addr(), EMBEDDED_NQN);
            o.local_ip = Some(e.host_ip);
            (Some(e), o)
        }
        Some(o) => (None, o),
    };
    let run = HostRun {
        args,
        output,
        signals,
        embedded,
        faults,
    };
    let soft = SoftOptions {
        faults,
        packet_path,
    };
    run_host::<SoftProvider>(soft, opts, run, |dev| Some(dev.counters().snapshot()))
}

/// The verbs provider: a remote target (checked by [`plan`]).
#[cfg(feature = "verbs")]
fn bench_verbs(args: &BenchArgs, plan: Plan, signals: &StopSignals) -> ExitCode {
    let Some(opts) = plan.remote else {
        return fail(nvmf_bench::OptionsError::VerbsNeedsTraddr);
    };
    let run = HostRun {
        args,
        output: plan.output,
        signals,
        embedded: None,
        faults: None,
    };
    run_host::<transport::rdma::VerbsProvider>((), opts, run, |_| None)
}

/// The verbs provider is not in this build ([`plan`] refuses it first).
#[cfg(not(feature = "verbs"))]
fn bench_verbs(_args: &BenchArgs, _plan: Plan, _signals: &StopSignals) -> ExitCode {
    fail(nvmf_bench::OptionsError::VerbsNotBuilt)
}

/// What a run needs besides the host: the arguments, the report's destination, the
/// stop signals, and (soft provider) the embedded target and the faults injected.
struct HostRun<'a> {
    args: &'a BenchArgs,
    output: ReportOutput,
    signals: &'a StopSignals,
    embedded: Option<EmbeddedTarget>,
    faults: Option<FaultConfig>,
}

/// Connects the host on provider `P` with its own `options` and `opts` (completed from
/// the arguments; the buffer pool sized for every job's buffers), runs
/// the jobs (one I/O queue each), prints the report, disconnects and stops the
/// embedded target. `host_counters` reads the host device's packet counters where the
/// provider keeps them (the soft provider's, for the fault summary).
fn run_host<P: Provider>(
    options: P::Options,
    mut opts: HostOptions,
    run: HostRun<'_>,
    host_counters: fn(&Arc<DeviceOf<P>>) -> Option<DeviceCountersSnapshot>,
) -> ExitCode {
    let HostRun {
        args,
        mut output,
        signals,
        embedded,
        faults,
    } = run;
    // --baseline: on the run's addresses, before the host connects.
    let baseline = match embedded.as_ref().filter(|_| args.baseline) {
        Some(e) => match nvmf_bench::baseline::measure(
            e.host_ip,
            e.target.listen_addr().ip(),
            e.file(),
            args.embedded_size,
        ) {
            Ok(b) => Some(b),
            Err(m) => return fail(m),
        },
        None => None,
    };
    if let Some(h) = &args.hostnqn {
        opts.hostnqn = h.clone();
    }
    opts.io_queues = args.numjobs as u16;
    opts.queue_depth = (args.iodepth + 1).min(1024) as u16;
    // Larger blocks are split by the queue engine at the controller's MDTS.
    opts.max_io_bytes = args.bs as usize;
    // One pool buffer per I/O in flight (each tag owns one of --bs, rounded up to a
    // power of two by the pool), and room for the admin queue's.
    let tag_bytes = (args.bs as usize).next_power_of_two();
    let pool = args.numjobs as usize * args.iodepth as usize * tag_bytes + (1 << 20);
    opts.buffer_pool_bytes = Some(pool.div_ceil(1 << 20) << 20);
    let mut host = match SyncHost::<P>::connect_with_options(&opts, &options) {
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
    // Known only now; checked before any I/O.
    if let Err(e) = args.check_block_size(ns.block_size) {
        let _ = host.disconnect();
        return fail(e);
    }
    let ns_bytes = ns.nsze * ns.block_size as u64;
    let specs = match args.job_specs(ns_bytes) {
        Ok(s) => s,
        Err(e) => {
            let _ = host.disconnect();
            return fail(e);
        }
    };
    let host_dev = host.device().clone();
    let (queues, keeper) = host.into_io_queues();
    if queues.len() < specs.len() {
        let granted = queues.len();
        let _ = keeper.shutdown(queues);
        return fail(format!(
            "the target granted {granted} I/O queues, {} jobs need one each; lower --numjobs",
            specs.len()
        ));
    }
    let mut engines = Vec::with_capacity(queues.len());
    for q in queues {
        match QueueEngine::with_max_request(q, args.nsid, ns.block_size, args.bs as usize) {
            Ok(e) => engines.push(
                e.with_health(keeper.health().clone())
                    .sleeping_when_idle(args.completion == CompletionMode::Event),
            ),
            Err(e) => return fail(e),
        }
    }
    if signals.received().is_some() {
        let _ = keeper.shutdown(engines.into_iter().map(QueueEngine::into_queue).collect());
        return interrupted(signals, "connecting");
    }
    if args.output_format == OutputFormat::Normal {
        if let Err(e) = output.write(&render_header(args)) {
            return fail(format!("writing the header: {e}"));
        }
    }

    let mut eta = EtaLine::new();
    let mut print_progress = |p: &nvmf_bench::Progress| {
        if let Some(line) = eta.render(p) {
            print_stdout(&line);
        }
    };
    let mut jobs: Vec<Job<'_>> = specs
        .into_iter()
        .zip(engines.iter_mut())
        .map(|(spec, e)| Job::new(spec, Box::new(e)))
        .collect();
    let ctl = RunControl {
        stop: Some(signals.flag()),
        progress: show_progress(args)
            .then_some(&mut print_progress as &mut dyn FnMut(&nvmf_bench::Progress)),
        ..RunControl::default()
    };
    let mut result = run_with(&mut jobs, &args.run_options(), ctl);
    result.baseline = baseline;
    drop(jobs);
    print_stdout(&eta.clear());
    if result.interrupted {
        eprintln!(
            "\nnvmf-bench: terminating on signal {}",
            signals.received().unwrap_or(0)
        );
    }
    if let (Some(f), Some(e), Some(host)) = (&faults, &embedded, host_counters(&host_dev)) {
        let target = e.target.device().counters().snapshot();
        result.faults = Some(FaultSummary::from_devices(
            f,
            &[("target", target), ("host", host)],
        ));
    }
    let report_written = report::write_report(&result, args, &mut output);
    let queues = engines.into_iter().map(QueueEngine::into_queue).collect();
    if let Err(e) = keeper.shutdown(queues) {
        eprintln!("nvmf-bench: disconnect: {e}");
    }
    if let Some(e) = embedded {
        {
            // On standard error in every format: the packet and datagram counts per
            // I/O are what an A/B of the data path compares (scripts/ab-nvmf-bench.sh).
            let c = e.target.device().counters().snapshot();
            eprintln!(
                "embedded target: {} packets sent in {} datagrams, {} received in {} datagrams, {} ICRC errors, {} payload bytes sent zero-copy, {} truncated datagrams",
                c.sent_pkts,
                c.sent_datagrams,
                c.rcvd_pkts,
                c.rcvd_datagrams,
                c.icrc_errors,
                c.tx_payload_bytes_zero_copy,
                c.rx_truncated_datagrams
            );
        }
        e.target.shutdown();
    }
    if let Err(e) = report_written {
        return fail(format!("writing the report: {e}"));
    }
    if let Some(v) = result.verify {
        // The text report on standard output already ends with these lines.
        if args.output_format != OutputFormat::Normal || !output.is_stdout() {
            eprintln!(
                "verify: {} blocks verified, {} mismatches",
                v.verified, v.mismatches
            );
            if let Some(why) = verify_problem(&v, result.interrupted) {
                eprintln!("verify: error: {why}");
            }
        }
    }
    if result.interrupted {
        return ExitCode::from(EXIT_STATUS_SIGNALED);
    }
    if !result.passed() {
        return ExitCode::FAILURE;
    }
    ExitCode::SUCCESS
}
