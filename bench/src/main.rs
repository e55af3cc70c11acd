//! `nvmf-bench`: fio's workloads and output over NVMe over Fabrics (RDMA, RoCEv2).
//!
//! By default it starts an embedded target (an in-process `nvmf-target` on a 1 GiB
//! file in the temp directory, laid out with data first as fio lays out its files,
//! and unlinked so it never outlives the process) on 127.0.0.2 and connects to it
//! from 127.0.0.3; with `--traddr` it benchmarks a remote target. Every job runs on
//! its own thread with its own I/O queue, as fio's `thread` mode; the embedded
//! target's poll group wants a core too.
//!
//! The jobs come from the command line and fio job files, as fio reads them
//! (`nvmf_bench::invocation`): `nvmf-bench job.fio` runs a job file; `--showcmd` prints
//! the jobs as one command line.
//!
//! The host runs on the provider `--provider` names: the soft provider (the default;
//! fault injection and the embedded target need it) or, in builds with the `verbs`
//! feature, the verbs provider on the RDMA device of `--host-traddr` (a remote target
//! only). Everything after the device is opened is the same code, generic over the
//! provider ([`run_host`]).
//!
//! Order of work: every argument that can be checked is checked, and `--output` is
//! created, before anything starts; then fio's header (`name: (g=0): rw=...`,
//! `fio-3.33`, `Starting N threads`); the block size is checked against the
//! namespace right after Identify, before any I/O. Standard output carries fio's
//! report and nothing else; nvmf-bench's own lines (verification, faults, baseline,
//! the embedded target's counters) go to standard error. Ctrl-C or SIGTERM, in any
//! phase, prints fio's `fio: terminating on signal N` and ends the run within a
//! second with fio's status 128: the jobs stop, the report of what ran is printed,
//! the host disconnects (given what is left of that second); a second signal exits
//! at once (see `nvmf_bench::signals`).
use std::cell::RefCell;
use std::io::{IsTerminal, Write};
use std::net::{IpAddr, SocketAddr};
use std::process::ExitCode;
use std::sync::Arc;

use nvmf_bench::embedded::{EmbeddedTarget, EMBEDDED_NQN};
use nvmf_bench::invocation::Invocation;
use nvmf_bench::reconnect::{start_keeper, BenchQueues, QueueSlot};
use nvmf_bench::report::{self, render_extras, render_header, ReportOutput};
use nvmf_bench::runner::thread::allowed_cpus;
use nvmf_bench::signals::{RunPhase, StopSignals, Watchdog, EXIT_STATUS_SIGNALED};
use nvmf_bench::QueueEngine;
use nvmf_bench::{
    run_with, BenchArgs, CompletionMode, EtaLine, EtaMode, FaultSummary, Job, JobResult, JobSpec,
    OutputFormat, ProviderKind, RunControl,
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
    /// The jobs for the header (the embedded namespace's, or checked against a
    /// namespace of unknown size for a remote target).
    specs: Vec<JobSpec>,
}

/// A namespace size for checking a remote target's jobs before Identify.
const UNKNOWN_NAMESPACE_BYTES: u64 = 1 << 62;

fn check_cpus(specs: &[JobSpec]) -> Result<(), String> {
    let Some(wanted) = specs.iter().find_map(|s| s.cpus.as_ref()) else {
        return Ok(());
    };
    let allowed = allowed_cpus().map_err(|e| format!("--cpus_allowed: sched_getaffinity: {e}"))?;
    for s in specs {
        for c in s.cpus.iter().flatten() {
            if !allowed.contains(c) {
                return Err(format!(
                    "--cpus_allowed {wanted:?}: CPU {c} is not one this process may run on \
                     ({allowed:?}); give CPUs from that list"
                ));
            }
        }
    }
    Ok(())
}

fn plan(args: &BenchArgs, inv: &Invocation) -> Result<Plan, String> {
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
    if args.roce_mtu.is_some() && args.provider != ProviderKind::Soft {
        return Err(
            "--roce-mtu is an option of the soft provider: the verbs provider uses its RDMA \
             port's active MTU (it follows the interface MTU)"
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
    let (remote, specs) = match &args.traddr {
        None => {
            nvmf_bench::embedded::check_size(args.embedded_size)?;
            // The namespace is exactly the embedded file: regions can be checked now.
            let specs = inv
                .job_specs(args.embedded_size)
                .map_err(|e| format!("{e} (the embedded target's namespace is --embedded-size)"))?;
            (None, specs)
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
            let specs = inv
                .job_specs(UNKNOWN_NAMESPACE_BYTES)
                .map_err(|e| e.to_string())?;
            (Some(o), specs)
        }
    };
    check_cpus(&specs)?;
    let output = ReportOutput::open(args)?;
    Ok(Plan {
        faults,
        packet_path,
        remote,
        output,
        specs,
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
    let inv = match Invocation::from_env() {
        Ok(i) => i,
        Err(e) => {
            let m = e.message.trim_end();
            eprintln!("{m}");
            return ExitCode::from(u8::try_from(e.code).unwrap_or(1));
        }
    };
    let args = &inv.run;
    if args.fio.showcmd {
        print_stdout(&inv.showcmd());
        return ExitCode::SUCCESS;
    }
    // Warnings, and the host library's connection notes (e.g. a retried Connect).
    nvmf_target::logging::init(args.log_format, "warn,nvmf_initiator=info");
    // The soft provider opens a UDP socket per QP: allow as many as the hard limit does.
    if let Err(e) = transport::fdlimit::raise_soft_to_hard() {
        eprintln!(
            "nvmf-bench: cannot raise the open-file limit RLIMIT_NOFILE to its hard limit: {e}"
        );
    }
    bench(&inv)
}

fn bench(inv: &Invocation) -> ExitCode {
    let args = &inv.run;
    let mut plan = match plan(args, inv) {
        Ok(p) => p,
        Err(m) => return fail(m),
    };
    for s in &inv.sections {
        for w in s.args.warnings() {
            eprintln!("nvmf-bench: {w}");
        }
    }
    let signals = match StopSignals::install() {
        Ok(s) => s,
        Err(e) => return fail(format!("installing the SIGINT/SIGTERM handlers: {e}")),
    };
    let watchdog = Watchdog::start(&signals, plan.output.is_stdout());
    if args.output_format == OutputFormat::Normal {
        if let Err(e) = plan.output.write(&render_header(&plan.specs)) {
            return fail(format!("writing the header: {e}"));
        }
    }
    let ctx = Ctx {
        inv,
        signals: &signals,
        watchdog: &watchdog,
    };
    match args.provider {
        ProviderKind::Soft => bench_soft(ctx, plan),
        ProviderKind::Verbs => bench_verbs(ctx, plan),
    }
}

/// What every phase needs.
#[derive(Clone, Copy)]
struct Ctx<'a> {
    inv: &'a Invocation,
    signals: &'a StopSignals,
    watchdog: &'a Watchdog,
}

impl Ctx<'_> {
    /// The exit of a run a signal stopped before its jobs started.
    fn interrupted(&self) -> ExitCode {
        self.watchdog.announce(self.signals.received().unwrap_or(0));
        ExitCode::from(EXIT_STATUS_SIGNALED)
    }
}

/// The soft provider: the embedded target (or a remote one) and fault injection.
fn bench_soft(ctx: Ctx<'_>, plan: Plan) -> ExitCode {
    let args = &ctx.inv.run;
    let Plan {
        faults,
        packet_path,
        remote,
        output,
        ..
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
                args.roce_mtu,
                Some(ctx.signals.flag()),
            ) {
                Ok(e) => e,
                Err(_) if ctx.signals.received().is_some() => return ctx.interrupted(),
                Err(m) => return fail(m),
            };
            let mut o = HostOptions::new(e.target.listen_addr(), EMBEDDED_NQN);
            o.local_ip = Some(e.host_ip);
            (Some(e), o)
        }
        Some(o) => (None, o),
    };
    let run = HostRun {
        ctx,
        output,
        embedded,
        faults,
    };
    let soft = SoftOptions {
        faults,
        packet_path,
        roce_mtu: args.roce_mtu,
    };
    run_host::<SoftProvider>(soft, opts, run, |dev| Some(dev.counters().snapshot()))
}

/// The verbs provider: a remote target (checked by [`plan`]).
#[cfg(feature = "verbs")]
fn bench_verbs(ctx: Ctx<'_>, plan: Plan) -> ExitCode {
    let Some(opts) = plan.remote else {
        return fail(nvmf_bench::OptionsError::VerbsNeedsTraddr);
    };
    let run = HostRun {
        ctx,
        output: plan.output,
        embedded: None,
        faults: None,
    };
    run_host::<transport::rdma::VerbsProvider>((), opts, run, |_| None)
}

/// The verbs provider is not in this build ([`plan`] refuses it first).
#[cfg(not(feature = "verbs"))]
fn bench_verbs(_ctx: Ctx<'_>, _plan: Plan) -> ExitCode {
    fail(nvmf_bench::OptionsError::VerbsNotBuilt)
}

/// What a run needs besides the host: the invocation and signals, the report's
/// destination, and (soft provider) the embedded target and the faults injected.
struct HostRun<'a> {
    ctx: Ctx<'a>,
    output: ReportOutput,
    embedded: Option<EmbeddedTarget>,
    faults: Option<FaultConfig>,
}

fn counters_json(c: &DeviceCountersSnapshot) -> serde_json::Value {
    serde_json::json!({
        "sent_pkts": c.sent_pkts,
        "sent_datagrams": c.sent_datagrams,
        "rcvd_pkts": c.rcvd_pkts,
        "rcvd_datagrams": c.rcvd_datagrams,
        "icrc_errors": c.icrc_errors,
        "tx_payload_bytes_zero_copy": c.tx_payload_bytes_zero_copy,
        "rx_truncated_datagrams": c.rx_truncated_datagrams,
    })
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
        ctx,
        output,
        embedded,
        faults,
    } = run;
    let args = &ctx.inv.run;
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
    if ctx.signals.received().is_some() {
        return ctx.interrupted();
    }
    let early = match ctx.inv.job_specs(UNKNOWN_NAMESPACE_BYTES) {
        Ok(s) => s,
        Err(e) => return fail(e),
    };
    if let Some(h) = &args.hostnqn {
        opts.hostnqn = h.clone();
    }
    opts.dhchap_secret = args.dhchap_secret.clone();
    opts.dhchap_ctrl_secret = args.dhchap_ctrl_secret.clone();
    opts.io_queues = early.len().min(usize::from(u16::MAX)) as u16;
    let depth = early.iter().map(|s| s.iodepth).max().unwrap_or(1);
    opts.queue_depth = (depth + 1).min(1024) as u16;
    // Larger blocks are split by the queue engine at the controller's MDTS.
    opts.max_io_bytes = early.iter().map(|s| s.bs).max().unwrap_or(4096) as usize;
    // One pool buffer per I/O in flight (each tag owns one of its job's largest block,
    // rounded up to a power of two by the pool), and room for the admin queue's.
    let pool: usize = early
        .iter()
        .map(|s| s.iodepth as usize * (s.bs as usize).next_power_of_two())
        .sum::<usize>()
        + (1 << 20);
    opts.buffer_pool_bytes = Some(pool.div_ceil(1 << 20) << 20);
    ctx.watchdog.enter(RunPhase::Connecting);
    let mut host = match SyncHost::<P>::connect_with_options(&opts, &options) {
        Ok(h) => h,
        Err(_) if ctx.signals.received().is_some() => return ctx.interrupted(),
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
    ctx.watchdog.enter(RunPhase::Setup);
    // Known only now; checked before any I/O.
    for s in &ctx.inv.sections {
        if let Err(e) = s.args.check_block_size(ns.block_size) {
            let _ = host.disconnect();
            return fail(e);
        }
    }
    let ns_bytes = ns.nsze * ns.block_size as u64;
    let specs = match ctx.inv.job_specs(ns_bytes) {
        Ok(s) => s,
        Err(e) => {
            let _ = host.disconnect();
            return fail(e);
        }
    };
    let host_dev = host.device().clone();
    // --ctrl-loss-tmo: the keeper reconnects and the jobs ride through.
    let (queues, keeper, slots, reconnecting) = match reconnect_options(args, opts.kato_ms) {
        Some(ro) => {
            let (_dev, controller, queues) = host.into_parts();
            let slots: Vec<Arc<QueueSlot<P>>> = queues
                .iter()
                .map(|q| Arc::new(QueueSlot::new(q.qid())))
                .collect();
            let depth = queues.iter().map(|q| q.depth()).max().unwrap_or(2);
            let max_io = queues
                .iter()
                .map(|q| q.max_io_bytes())
                .min()
                .unwrap_or(4096);
            let set = Arc::new(BenchQueues::new(slots.clone(), depth, max_io));
            let keeper = start_keeper(controller, ro, set.clone());
            (queues, keeper, slots, Some(set))
        }
        None => {
            let (q, k) = host.into_io_queues();
            (q, k, Vec::new(), None)
        }
    };
    if queues.len() < specs.len() {
        let granted = queues.len();
        let _ = keeper.shutdown(queues);
        return fail(format!(
            "the target granted {granted} I/O queues, {} jobs need one each; run fewer jobs",
            specs.len()
        ));
    }
    let mut engines = Vec::with_capacity(queues.len());
    for (i, (q, spec)) in queues
        .into_iter()
        .zip(specs.iter().map(Some).chain(std::iter::repeat(None)))
        .enumerate()
    {
        let max = spec.map_or(args.bs, |s| s.bs) as usize;
        match QueueEngine::with_max_request(q, args.nsid, ns.block_size, max) {
            Ok(e) => {
                let mut e = e
                    .with_health(keeper.health().clone())
                    .sleeping_when_idle(args.completion == CompletionMode::Event);
                if let Some(slot) = slots.get(i) {
                    e = e.with_reconnect(slot.clone());
                }
                engines.push(e);
            }
            Err(e) => return fail(e),
        }
    }
    if ctx.signals.received().is_some() {
        let _ = keeper.shutdown(
            engines
                .into_iter()
                .filter_map(QueueEngine::into_queue)
                .collect(),
        );
        return ctx.interrupted();
    }
    ctx.watchdog.enter(RunPhase::Running);
    let output = RefCell::new(output);
    let mut eta = EtaLine::new();
    let mut print_progress = |p: &nvmf_bench::Progress| {
        if let Some(line) = eta.render(p) {
            print_stdout(&line);
        }
    };
    let mut on_done = |r: &JobResult| {
        if let Some(e) = &r.error {
            // fio's line when a job thread ends with an error (backend.c).
            let line = format!("fio: pid={}, err={}/{}\n", r.tid, e.errno, e.verror());
            let _ = output.borrow_mut().write(&line);
        }
    };
    let mut on_status = |r: &nvmf_bench::BenchResult| {
        let mut r = r.clone();
        r.options.global_options = ctx.inv.global_options();
        let _ = report::write_report(&r, args, &mut output.borrow_mut());
    };
    // How fio's error lines name the namespace: a path-like name without ':' (fio's
    // file name separator), e.g. nvmf-rdma/127.0.0.2/4420/ns1.
    let file_name = format!(
        "nvmf-rdma/{}/{}/ns{}",
        opts.traddr.ip().to_string().replace(':', "-"),
        opts.traddr.port(),
        args.nsid
    );
    let mut jobs: Vec<Job<'_>> = specs
        .into_iter()
        .zip(engines.iter_mut())
        .map(|(spec, e)| Job::new(spec, Box::new(e)))
        .collect();
    let ctl = RunControl {
        stop: Some(ctx.signals.flag()),
        progress: show_progress(args)
            .then_some(&mut print_progress as &mut dyn FnMut(&nvmf_bench::Progress)),
        status: args
            .fio
            .status_interval
            .map(|_| &mut on_status as &mut dyn FnMut(&nvmf_bench::BenchResult)),
        job_done: Some(&mut on_done),
        file_name: &file_name,
        ..RunControl::default()
    };
    let mut run_opts = args.run_options();
    run_opts.global_options = ctx.inv.global_options();
    let mut result = run_with(&mut jobs, &run_opts, ctl);
    drop(jobs);
    ctx.watchdog.enter(RunPhase::Reporting);
    result.baseline = baseline;
    print_stdout(&eta.clear());
    if let Some(sig) = ctx.signals.received() {
        ctx.watchdog.announce(sig);
    }
    if let (Some(f), Some(e), Some(host)) = (&faults, &embedded, host_counters(&host_dev)) {
        let target = e.target.device().counters().snapshot();
        result.faults = Some(FaultSummary::from_devices(
            f,
            &[("target", target), ("host", host)],
        ));
    }
    let target_counters = embedded
        .as_ref()
        .map(|e| e.target.device().counters().snapshot());
    result.target_counters = target_counters.as_ref().map(counters_json);
    result.reconnects = reconnecting.as_ref().map(|r| r.reconnects());
    let mut output = output.into_inner();
    let report_written = report::write_report(&result, args, &mut output);
    eprint!("{}", render_extras(&result));
    let mut plot_failed = false;
    if let Some(path) = &args.fio.plot {
        let window = run_opts.timeline_ms.unwrap_or(500);
        match nvmf_bench::plot::write_plot(&result, window, path) {
            Ok(s) => eprintln!(
                "nvmf-bench: plot of {} windows ({}) in {}",
                s.windows,
                s.series.join(", "),
                path.display()
            ),
            Err(m) => {
                eprintln!("nvmf-bench: {m}");
                plot_failed = true;
            }
        }
    }
    ctx.watchdog.enter(RunPhase::Disconnecting);
    let queues = engines
        .into_iter()
        .filter_map(QueueEngine::into_queue)
        .collect();
    if let Err(e) = keeper.shutdown(queues) {
        eprintln!("nvmf-bench: disconnect: {e}");
    }
    if let Some(e) = embedded {
        // On standard error in every format: the packet and datagram counts per I/O
        // are what an A/B of the data path compares (scripts/ab-nvmf-bench.sh).
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
        e.target.shutdown();
    }
    if let Err(e) = report_written {
        return fail(format!("writing the report: {e}"));
    }
    if result.interrupted {
        return ExitCode::from(EXIT_STATUS_SIGNALED);
    }
    if !result.passed() || plot_failed {
        return ExitCode::FAILURE;
    }
    ExitCode::SUCCESS
}

/// The host's reconnect options from `--ctrl-loss-tmo`, `--reconnect-delay` and
/// `--fast-io-fail-tmo` (seconds; -1 for none/forever) with `kato_ms`; `None` for
/// `--ctrl-loss-tmo 0` (no reconnect, the default).
fn reconnect_options(
    args: &nvmf_bench::BenchArgs,
    kato_ms: u32,
) -> Option<nvmf_initiator::lifecycle::ReconnectOptions> {
    let secs = |s: i64| (s >= 0).then(|| std::time::Duration::from_secs(s as u64));
    if args.ctrl_loss_tmo == 0 {
        return None;
    }
    Some(nvmf_initiator::lifecycle::ReconnectOptions {
        reconnect_delay: std::time::Duration::from_secs(args.reconnect_delay),
        ctrl_loss_tmo: secs(args.ctrl_loss_tmo),
        fast_io_fail_tmo: secs(args.fast_io_fail_tmo),
        kato_ms,
    })
}
