//! `nvmf-target`: exports files and block devices as NVMe namespaces over NVMe/RDMA
//! (RoCEv2: the userspace soft provider, or with `--provider verbs` a kernel RDMA
//! device). With `--config` it reads a TOML file (see target/examples/target.toml)
//! or the JSON `nvmetcli save` writes for Linux nvmet (a name ending in `.json`; see
//! target/examples/nvmetcli.json); without, it serves one subsystem on one file or
//! block device.
//!
//! Flags and `--config`: the flags that describe the one default subsystem
//! (`--addr`, `--port`, `--nqn`, `--file`, `--size`, `--block-size`) are refused with
//! `--config`, naming them (the file describes the subsystems and listen addresses);
//! the flags that tune the whole target (`--provider`, `--poll-groups`, `--mdts`,
//! `--data-slab`, `--direct`, `--cpus`, `--shutdown-timeout-ms`, `--metrics`) override
//! the file, each with a log line.
//!
//! Signals: SIGTERM or SIGINT shuts down cleanly; SIGHUP reads the `--config` file
//! again and applies it live ([`nvmf_target::reload`]). `--control-socket PATH` takes
//! the same reload as a command, `nvmf-target reload --control-socket PATH`, which
//! prints what changed or exits 1 with why nothing did.
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use nix::sys::signal::{SigSet, Signal};
use nvmf_target::config::{NamespaceBackend, TargetConfig};
use nvmf_target::logging::{self, LogFormat};
use nvmf_target::provider::SoftProvider;
#[cfg(feature = "verbs")]
use nvmf_target::provider::VerbsProvider;
use nvmf_target::ProviderKind;
use transport::soft::xdp::PacketPath;
use transport::verbs::{Device as _, Provider};
use transport::PacketPathKind;

/// The flags that describe the default subsystem, which `--config` replaces.
const SUBSYSTEM_FLAGS: [&str; 8] = [
    "addr",
    "port",
    "nqn",
    "file",
    "null",
    "ram",
    "size",
    "block_size",
];

#[derive(Parser, Debug, Clone)]
#[command(
    name = "nvmf-target",
    version,
    about = "NVMe over Fabrics target on RDMA (RoCEv2: the userspace soft provider, or a kernel RDMA device with --provider verbs)",
    after_help = "With --config FILE (TOML, or nvmetcli JSON when FILE ends in .json) the file \
                  describes the subsystems, namespaces and listen addresses: --addr, --port, --nqn, --file, --size and --block-size are refused \
                  with it (put them in the file). --provider, --poll-groups, --mdts, --data-slab, \
                  --direct, --cpus, --shutdown-timeout-ms and --metrics override the file's values, \
                  each with a log line."
)]
struct Args {
    /// RDMA provider: soft (userspace RoCEv2 over UDP, no RDMA hardware needed) or
    /// verbs (a kernel RDMA device, RNIC or Soft-RoCE, whose RoCE v2 GID is the listen
    /// address; needs a build with `--features verbs`). Overrides a --config file's
    /// `provider` [default: soft]
    #[arg(long, value_enum)]
    provider: Option<ProviderKind>,
    /// Configuration file (subsystems, namespaces, listen addresses): TOML, or the JSON
    /// `nvmetcli save` writes (a name ending in .json, or text starting with `{`); see
    /// below for the flags it replaces.
    #[arg(long, short)]
    config: Option<PathBuf>,
    /// Address to listen on (soft: RoCEv2 on UDP 4791 of this address; verbs: the RDMA
    /// device whose RoCE v2 GID it is; RDMA CM port below).
    #[arg(long, default_value = "127.0.0.2")]
    addr: IpAddr,
    /// RDMA CM port (NVMe-oF trsvcid).
    #[arg(long, default_value_t = 4420)]
    port: u16,
    /// Subsystem NQN.
    #[arg(long, default_value = "nqn.2026-11.io.nvmf-rdma:target")]
    nqn: String,
    /// Backing file of namespace 1 (created sparse at --size when missing), or a block
    /// device (opened exclusively; its size is its own).
    #[arg(long, default_value = "nvmf-target.img")]
    file: PathBuf,
    /// Namespace 1 is a null namespace of SIZE instead of a file: reads return zeroes,
    /// writes are dropped (as Linux null_blk), to measure the fabric alone.
    #[arg(long, value_name = "SIZE", conflicts_with_all = ["file", "ram"])]
    null: Option<String>,
    /// Namespace 1 is SIZE bytes of the target's memory instead of a file (lost when it
    /// exits).
    #[arg(long, value_name = "SIZE", conflicts_with_all = ["file"])]
    ram: Option<String>,
    /// Size of the backing file when it has to be created (e.g. 1G, 512M).
    #[arg(long, default_value = "1G")]
    size: String,
    /// Logical block size in bytes (512 to 4096; default 512 for a file, the device's
    /// logical block size for a block device).
    #[arg(long)]
    block_size: Option<u32>,
    /// Open every namespace with O_DIRECT, bypassing the page cache (with --config
    /// too: it sets `direct = true` on each namespace).
    #[arg(long)]
    direct: bool,
    /// CPUs to pin the poll groups to, as SPDK's core mask: "0,1", "0-3" or "0x3"
    /// (poll group k on the k-th, round robin). Overrides a --config file's `cpus`.
    #[arg(long, value_name = "LIST")]
    cpus: Option<String>,
    /// Poll groups (busy-polling threads, one per core you give the target; at least 1)
    /// [default: 1]. Overrides a --config file's `poll_groups`.
    #[arg(long)]
    poll_groups: Option<usize>,
    /// Largest data transfer of one command (MDTS): a power of two from 8K to 8M, e.g.
    /// 128K or 1M (default 1M). With --config, overrides the file's `mdts_bytes`.
    #[arg(long, value_name = "SIZE")]
    mdts: Option<String>,
    /// Log lines on stderr as text or as one JSON object per line (connects,
    /// disconnects, refused hosts, Keep Alive expiries, failed queues; level from
    /// RUST_LOG, default info).
    #[arg(long, value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,
    /// Soft provider: how RoCEv2 packets travel: udp (UDP sockets, the default) or
    /// af-xdp (AF_XDP sockets on --interface, past the kernel's UDP stack; root only,
    /// IPv4, the interface needs a receive queue per poll group).
    #[arg(long, value_enum, default_value_t = PacketPathKind::Udp)]
    packet_path: PacketPathKind,
    /// The interface that holds --addr, for --packet-path af-xdp.
    #[arg(long, value_name = "IFACE")]
    interface: Option<String>,
    /// The bound of a clean shutdown on SIGTERM/SIGINT in milliseconds (commands in
    /// flight answered, namespaces flushed, queues disconnected). Overrides a --config
    /// file's `shutdown_timeout_ms` [default: 10000]
    #[arg(long, value_name = "MS")]
    shutdown_timeout_ms: Option<u32>,
    /// Data slab per poll group: memory registered (pinned) for command data, at least
    /// MDTS (1M), e.g. 4M or 64M. Default: sized from RLIMIT_MEMLOCK (`ulimit -l`), 64M
    /// when it allows. Overrides a --config file's `data_slab`.
    #[arg(long, value_name = "SIZE")]
    data_slab: Option<String>,
    /// Serve metrics in Prometheus' text format over plain HTTP on ADDR:PORT
    /// (`GET /metrics`; e.g. 127.0.0.1:9100, reachable from this machine only).
    /// Overrides a --config file's `metrics` [default: no endpoint]
    #[arg(long, value_name = "ADDR:PORT")]
    metrics: Option<SocketAddr>,
    /// The RoCE MTU in bytes: 256, 512, 1024, 2048 or 4096 (soft provider); each queue
    /// runs at the smaller of this and the host's. Overrides a --config file's
    /// `roce_mtu` [default: from the interface MTU, as rxe derives it]
    #[arg(long, value_name = "BYTES")]
    roce_mtu: Option<u32>,
    /// Take control commands on a Unix socket at PATH (mode 0600), for
    /// `nvmf-target reload --control-socket PATH`, which reports the outcome and exits
    /// non-zero when the reload was not applied. SIGHUP reloads too (systemd:
    /// `ExecReload=kill -HUP $MAINPID`) [default: no socket]
    #[arg(long, value_name = "PATH")]
    control_socket: Option<PathBuf>,
    #[command(subcommand)]
    command: Option<Command>,
}

/// The daemon's client commands.
#[derive(clap::Subcommand, Debug, Clone)]
enum Command {
    /// Ask the running daemon to read its --config file again and apply it live
    /// (namespaces, subsystems, allowed hosts, port links and referrals; connections
    /// they do not concern keep going). Prints what changed; exits 1 with the reason
    /// when nothing was applied (the file does not parse or validate, a setting fixed
    /// at start changed, a new namespace does not open).
    Reload {
        /// The daemon's --control-socket.
        #[arg(long, value_name = "PATH")]
        control_socket: PathBuf,
    },
}

/// Whether `id` was given on the command line (not just defaulted).
fn given(matches: &clap::ArgMatches, id: &str) -> bool {
    matches.value_source(id) == Some(clap::parser::ValueSource::CommandLine)
}

/// The refusal of subsystem flags beside `--config`, naming them; `None` when there are
/// none.
fn refuse_subsystem_flags(matches: &clap::ArgMatches, config: &std::path::Path) -> Option<String> {
    let flags: Vec<String> = SUBSYSTEM_FLAGS
        .iter()
        .filter(|id| given(matches, id))
        .map(|id| format!("--{}", id.replace('_', "-")))
        .collect();
    (!flags.is_empty()).then(|| {
        format!(
            "{} cannot be given with --config {}: the configuration file describes the \
             subsystems, namespaces and listen addresses. Put them in the file (its `listen` \
             and `subsystems` entries, see target/examples/target.toml; in nvmetcli JSON its \
             `ports` and `subsystems`), or drop --config",
            flags.join(", "),
            config.display()
        )
    })
}

/// The configuration the command line describes: the `--config` file (or the flags'
/// default subsystem) with the tuning flags applied over it, validated. A reload reads
/// it again the same way, so the flags keep overriding the file; `log_overrides` says
/// each override (at start).
///
/// # Errors
/// Why, in words (the file's path and the offending item, or the flag).
fn build_config(args: &Args, log_overrides: bool) -> Result<TargetConfig, String> {
    let mdts = match args.mdts.as_deref().map(nvmf_target::config::parse_size) {
        None => None,
        Some(Ok(n)) => Some(u32::try_from(n).unwrap_or(u32::MAX)),
        Some(Err(e)) => {
            return Err(format!("--mdts: {e}"));
        }
    };
    let from_file = args.config.is_some() && log_overrides;
    // A flag that overrides the configuration file says so.
    let overrides = |flag: &str, value: &dyn std::fmt::Display, key: &str| {
        if from_file {
            tracing::info!("{flag} {value} overrides the configuration file's {key}");
        }
    };
    let mut cfg = match &args.config {
        Some(p) => TargetConfig::from_file(p).map_err(|e| e.to_string())?,
        None => {
            let size = match nvmf_target::config::parse_size(&args.size) {
                Ok(s) => s,
                Err(e) => return Err(format!("--size {}: {e}", args.size)),
            };
            let mut c = TargetConfig::default_for(args.addr, &args.nqn, &args.file, size);
            if let Some(l) = c.listen.first_mut() {
                l.trsvcid = args.port;
            }
            let memory = match (&args.null, &args.ram) {
                (Some(size), _) => Some((NamespaceBackend::Null, size)),
                (_, Some(size)) => Some((NamespaceBackend::Ram, size)),
                _ => None,
            };
            for s in &mut c.subsystems {
                for n in &mut s.namespaces {
                    n.block_size = args.block_size;
                    if let Some((backend, size)) = memory {
                        n.backend = backend;
                        n.path = PathBuf::new();
                        n.size = Some(size.clone());
                    }
                }
            }
            c
        }
    };
    if let Some(n) = args.poll_groups {
        overrides("--poll-groups", &n, "poll_groups");
        cfg.poll_groups = n;
    }
    if let Some(m) = mdts {
        overrides("--mdts", &m, "mdts_bytes");
        cfg.mdts_bytes = m;
    }
    if args.direct {
        overrides("--direct", &"", "direct (every namespace)");
        for n in cfg
            .subsystems
            .iter_mut()
            .flat_map(|s| s.namespaces.iter_mut())
        {
            n.direct = true;
        }
    }
    // --data-slab applies with or without --config (it overrides the file's data_slab).
    if let Some(slab) = &args.data_slab {
        match nvmf_target::config::parse_size(slab) {
            Ok(b) => {
                overrides("--data-slab", slab, "data_slab");
                cfg.data_slab = Some(b)
            }
            Err(e) => return Err(format!("--data-slab {slab}: {e}")),
        }
    }
    if let Some(p) = args.provider {
        overrides("--provider", &format!("{p:?}").to_lowercase(), "provider");
        cfg.provider = p;
    }
    if let Some(ms) = args.shutdown_timeout_ms {
        overrides("--shutdown-timeout-ms", &ms, "shutdown_timeout_ms");
        cfg.shutdown_timeout_ms = ms;
    }
    if let Some(addr) = args.metrics {
        overrides("--metrics", &addr, "metrics");
        cfg.metrics = Some(addr);
    }
    if let Some(m) = args.roce_mtu {
        overrides("--roce-mtu", &m, "roce_mtu");
        cfg.roce_mtu = Some(m);
    }
    if let Some(list) = &args.cpus {
        match nvmf_target::cpus::CpuList::parse(list) {
            Ok(c) => {
                overrides("--cpus", &c, "cpus");
                cfg.cpus = Some(c)
            }
            Err(e) => return Err(format!("--{e}")),
        }
    }
    // The command line's values pass the configuration file's checks, with the same
    // messages.
    cfg.validate_as("command line").map_err(|e| e.to_string())?;
    Ok(cfg)
}

fn main() -> ExitCode {
    use clap::{CommandFactory, FromArgMatches};
    let matches = Args::command().get_matches();
    let args = match Args::from_arg_matches(&matches) {
        Ok(a) => a,
        Err(e) => e.exit(),
    };
    if let Some(Command::Reload { control_socket }) = &args.command {
        return match nvmf_target::control_socket::request(
            control_socket,
            nvmf_target::control_socket::RELOAD,
        ) {
            Ok(what) => {
                println!("nvmf-target: reloaded: {what}");
                ExitCode::SUCCESS
            }
            Err(why) => {
                eprintln!("nvmf-target: reload: {why}");
                ExitCode::FAILURE
            }
        };
    }
    logging::init(args.log_format, "info");
    if let Some(config) = &args.config {
        if let Some(msg) = refuse_subsystem_flags(&matches, config) {
            eprintln!("nvmf-target: {msg}");
            return ExitCode::from(2);
        }
    }
    // The soft provider opens a UDP socket per QP: allow as many as the hard limit does.
    if let Err(e) = transport::fdlimit::raise_soft_to_hard() {
        tracing::warn!("cannot raise the open-file limit RLIMIT_NOFILE to its hard limit: {e}");
    }
    let cfg = match build_config(&args, true) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("nvmf-target: {e}");
            return ExitCode::FAILURE;
        }
    };
    if let Err(e) = cfg.provider.check_built("nvmf-target") {
        eprintln!("nvmf-target: {e}");
        return ExitCode::FAILURE;
    }
    // Block SIGINT/SIGTERM/SIGHUP before any thread starts, then wait for them here.
    let mut sigs = SigSet::empty();
    sigs.add(Signal::SIGINT);
    sigs.add(Signal::SIGTERM);
    sigs.add(Signal::SIGHUP);
    if let Err(e) = sigs.thread_block() {
        eprintln!("nvmf-target: blocking signals: {e}");
        return ExitCode::FAILURE;
    }
    if args.packet_path != PacketPathKind::Udp && cfg.provider != ProviderKind::Soft {
        eprintln!("nvmf-target: --packet-path af-xdp is an option of the soft provider: drop it or use --provider soft");
        return ExitCode::FAILURE;
    }
    let packet_path = match args.packet_path.with_interface(args.interface.as_deref()) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("nvmf-target: {e} ({})", args.addr);
            return ExitCode::FAILURE;
        }
    };
    // Provider selection: the one place the binary names a provider.
    match cfg.provider {
        ProviderKind::Soft if packet_path != PacketPath::Udp => serve_started(
            nvmf_target::provider::start_with_packet_path(&cfg, packet_path.clone()),
            &cfg,
            &packet_path,
            &sigs,
            &args,
        ),
        ProviderKind::Soft => serve::<SoftProvider>(&cfg, &packet_path, &sigs, &args),
        #[cfg(feature = "verbs")]
        ProviderKind::Verbs => serve::<VerbsProvider>(&cfg, &packet_path, &sigs, &args),
        // Refused above (check_built).
        #[cfg(not(feature = "verbs"))]
        ProviderKind::Verbs => ExitCode::FAILURE,
    }
}

/// How this program pins less: its flags and the configuration's keys.
const PIN_LESS: &str = "a smaller --data-slab (data_slab in a --config file; at least MDTS, \
                        --mdts), fewer --poll-groups, or a smaller inline_data_size (--config file)";

/// Runs the target of `cfg` on provider `P` until SIGINT or SIGTERM (blocked in
/// `sigs`), then stops it; SIGHUP reloads `args`' configuration file.
fn serve<P: Provider>(
    cfg: &TargetConfig,
    packet_path: &PacketPath,
    sigs: &SigSet,
    args: &Args,
) -> ExitCode {
    serve_started(
        nvmf_target::start_on::<P>(cfg),
        cfg,
        packet_path,
        sigs,
        args,
    )
}

/// Reads the configuration again as at start ([`build_config`]) and applies it to the
/// target through `reloader`; logs the outcome (the control thread logs what changed).
/// Returns what changed, or why nothing did.
fn reload(args: &Args, reloader: &nvmf_target::Reloader) -> Result<String, String> {
    if args.config.is_none() {
        let why = "started without --config: there is no file to reload".to_string();
        tracing::warn!("configuration reload: {why}");
        return Err(why);
    }
    let cfg = build_config(args, false).map_err(|e| {
        tracing::warn!("configuration reload: {e}; the target runs on unchanged");
        e
    })?;
    reloader
        .reload(&cfg)
        .map(|r| r.words())
        .map_err(|e| e.to_string())
}

/// How RoCEv2 reaches listen address `ip` on provider `kind`, for the "serving" line:
/// the soft provider's UDP port or AF_XDP interface, or the kernel RDMA device.
fn transport_words(kind: ProviderKind, packet_path: &PacketPath, ip: IpAddr) -> String {
    match (kind, packet_path) {
        (ProviderKind::Verbs, _) => {
            format!("RoCEv2 on the kernel RDMA device whose RoCE v2 GID is {ip}")
        }
        (ProviderKind::Soft, PacketPath::AfXdp { interface }) => {
            format!("RoCEv2 over AF_XDP on {interface}, {ip} UDP 4791")
        }
        (ProviderKind::Soft, _) => format!("RoCEv2 over UDP {ip}:4791"),
    }
}

/// [`serve`] a target already started (or not).
fn serve_started<P: Provider>(
    started: Result<nvmf_target::TargetHandle<P>, nvmf_target::TargetError>,
    cfg: &TargetConfig,
    packet_path: &PacketPath,
    sigs: &SigSet,
    args: &Args,
) -> ExitCode {
    let target = match started {
        Ok(t) => t,
        // The library's advice names configuration keys; this program has flags too.
        Err(nvmf_target::TargetError::Memlock(e)) => {
            eprintln!("nvmf-target: {}", e.with_smaller(Some(PIN_LESS)));
            return ExitCode::FAILURE;
        }
        Err(e) => {
            eprintln!("nvmf-target: {e}");
            return ExitCode::FAILURE;
        }
    };
    for s in &cfg.subsystems {
        // Each port serves the subsystems it links (all of them without links).
        let served = |i: usize| {
            cfg.listen
                .get(i)
                .and_then(|l| l.subsystems.as_ref())
                .is_none_or(|links| links.contains(&s.nqn))
        };
        let namespaces = s.namespaces.iter().filter(|n| n.enable).count();
        for (_, l) in (target.listen_addrs().iter().enumerate()).filter(|(i, _)| served(*i)) {
            let mtu = target
                .devices()
                .into_iter()
                .find(|d| d.ip() == l.ip())
                .unwrap_or(target.device())
                .path_mtu()
                .bytes();
            tracing::info!(
                subnqn = %s.nqn,
                traddr = %l.ip(),
                trsvcid = l.port(),
                namespaces = namespaces,
                provider = P::NAME,
                "serving {} ({} namespace(s)) on rdma traddr={} trsvcid={} ({} provider, {}, path MTU {})",
                s.nqn,
                namespaces,
                l.ip(),
                l.port(),
                P::NAME,
                transport_words(cfg.provider, packet_path, l.ip()),
                mtu
            );
        }
    }
    let reloader = target.reloader();
    let _control_socket = match &args.control_socket {
        None => None,
        Some(path) => {
            let (args, reloader) = (args.clone(), reloader.clone());
            match nvmf_target::control_socket::ControlSocket::serve(path, move || {
                reload(&args, &reloader)
            }) {
                Ok(s) => {
                    tracing::info!(
                        "control socket {}: `nvmf-target reload --control-socket {}` reloads",
                        path.display(),
                        path.display()
                    );
                    Some(s)
                }
                Err(e) => {
                    eprintln!("nvmf-target: --control-socket {}: {e}", path.display());
                    return ExitCode::FAILURE;
                }
            }
        }
    };
    // SIGHUP: reload (systemd's ExecReload=kill -HUP $MAINPID); SIGINT/SIGTERM: stop.
    let sig = loop {
        match sigs.wait() {
            Ok(Signal::SIGHUP) => {
                tracing::info!("received SIGHUP: reloading the configuration");
                let _ = reload(args, &reloader);
            }
            other => break other,
        }
    };
    let bound = std::time::Duration::from_millis(u64::from(cfg.shutdown_timeout_ms));
    tracing::info!(
        bound_ms = cfg.shutdown_timeout_ms,
        "{}, shutting down (within {} ms; a second signal stops at once)",
        sig.map_or_else(
            |e| format!("waiting for a signal failed ({e})"),
            |s| format!("received {s}")
        ),
        cfg.shutdown_timeout_ms
    );
    // A second SIGINT/SIGTERM ends the process at once, as fio and nvmf-bench do.
    let again = *sigs;
    let _ = std::thread::Builder::new()
        .name("nvmf-signals".into())
        .spawn(move || {
            while let Ok(s) = again.wait() {
                if s == Signal::SIGHUP {
                    tracing::info!("received SIGHUP while shutting down: not reloading");
                    continue;
                }
                tracing::warn!("received {s} again: exiting now, without finishing the shutdown");
                std::process::exit(1);
            }
        });
    let report = target.shutdown_within(bound);
    report.log();
    if report.clean() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
