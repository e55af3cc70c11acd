//! `nvmf-target`: exports files and block devices as NVMe namespaces over NVMe/RDMA
//! (RoCEv2: the userspace soft provider, or with `--provider verbs` a kernel RDMA
//! device). With `--config` it reads a TOML file (see target/examples/target.toml);
//! without, it serves one subsystem on one file or block device.
use std::net::IpAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use nix::sys::signal::{SigSet, Signal};
use nvmf_target::config::TargetConfig;
use nvmf_target::logging::{self, LogFormat};
use nvmf_target::provider::SoftProvider;
#[cfg(feature = "verbs")]
use nvmf_target::provider::VerbsProvider;
use nvmf_target::ProviderKind;
use transport::soft::xdp::PacketPath;
use transport::verbs::{Device as _, Provider};
use transport::PacketPathKind;

#[derive(Parser, Debug)]
#[command(
    name = "nvmf-target",
    version,
    about = "NVMe over Fabrics target on RDMA (RoCEv2: the userspace soft provider, or a kernel RDMA device with --provider verbs)"
)]
struct Args {
    /// RDMA provider: soft (userspace RoCEv2 over UDP, no RDMA hardware needed) or
    /// verbs (a kernel RDMA device, RNIC or Soft-RoCE, whose RoCE v2 GID is the listen
    /// address; needs a build with `--features verbs`). Overrides a --config file's
    /// `provider` [default: soft]
    #[arg(long, value_enum)]
    provider: Option<ProviderKind>,
    /// TOML configuration file (subsystems, namespaces, listen addresses).
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
    /// Poll groups (busy-polling threads, one per core you give the target; at least 1).
    #[arg(long, default_value_t = 1)]
    poll_groups: usize,
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
    /// Data slab per poll group: memory registered (pinned) for command data, at least
    /// MDTS (1M), e.g. 4M or 64M. Default: sized from RLIMIT_MEMLOCK (`ulimit -l`), 64M
    /// when it allows. Overrides a --config file's `data_slab`.
    #[arg(long, value_name = "SIZE")]
    data_slab: Option<String>,
}

fn main() -> ExitCode {
    let args = Args::parse();
    logging::init(args.log_format, "info");
    // The soft provider opens a UDP socket per QP: allow as many as the hard limit does.
    if let Err(e) = transport::fdlimit::raise_soft_to_hard() {
        tracing::warn!("cannot raise the open-file limit RLIMIT_NOFILE to its hard limit: {e}");
    }
    let mdts = match args.mdts.as_deref().map(nvmf_target::config::parse_size) {
        None => None,
        Some(Ok(n)) => Some(u32::try_from(n).unwrap_or(u32::MAX)),
        Some(Err(e)) => {
            eprintln!("nvmf-target: --mdts: {e}");
            return ExitCode::FAILURE;
        }
    };
    let mut cfg = match &args.config {
        Some(p) => match TargetConfig::from_file(p) {
            Ok(c) => c,
            Err(e) => {
                eprintln!("nvmf-target: {e}");
                return ExitCode::FAILURE;
            }
        },
        None => {
            let size = match nvmf_target::config::parse_size(&args.size) {
                Ok(s) => s,
                Err(e) => {
                    eprintln!("nvmf-target: --size {}: {e}", args.size);
                    return ExitCode::FAILURE;
                }
            };
            let mut c = TargetConfig::default_for(args.addr, &args.nqn, &args.file, size);
            c.poll_groups = args.poll_groups;
            if let Some(l) = c.listen.first_mut() {
                l.trsvcid = args.port;
            }
            for s in &mut c.subsystems {
                for n in &mut s.namespaces {
                    n.block_size = args.block_size;
                }
            }
            c
        }
    };
    if let Some(m) = mdts {
        cfg.mdts_bytes = m;
    }
    if args.direct {
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
            Ok(b) => cfg.data_slab = Some(b),
            Err(e) => {
                eprintln!("nvmf-target: --data-slab {slab}: {e}");
                return ExitCode::FAILURE;
            }
        }
    }
    if let Some(p) = args.provider {
        cfg.provider = p;
    }
    // The command line's values pass the configuration file's checks, with the same
    // messages.
    if let Err(e) = cfg.validate_as("command line") {
        eprintln!("nvmf-target: {e}");
        return ExitCode::FAILURE;
    }
    if let Err(e) = cfg.provider.check_built("nvmf-target") {
        eprintln!("nvmf-target: {e}");
        return ExitCode::FAILURE;
    }
    // Block SIGINT/SIGTERM before any thread starts, then wait for them here.
    let mut sigs = SigSet::empty();
    sigs.add(Signal::SIGINT);
    sigs.add(Signal::SIGTERM);
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
            nvmf_target::provider::start_with_packet_path(&cfg, packet_path),
            &cfg,
            &sigs,
        ),
        ProviderKind::Soft => serve::<SoftProvider>(&cfg, &sigs),
        #[cfg(feature = "verbs")]
        ProviderKind::Verbs => serve::<VerbsProvider>(&cfg, &sigs),
        // Refused above (check_built).
        #[cfg(not(feature = "verbs"))]
        ProviderKind::Verbs => ExitCode::FAILURE,
    }
}

/// Runs the target of `cfg` on provider `P` until SIGINT or SIGTERM (blocked in
/// `sigs`), then stops it.
fn serve<P: Provider>(cfg: &TargetConfig, sigs: &SigSet) -> ExitCode {
    serve_started(nvmf_target::start_on::<P>(cfg), cfg, sigs)
}

/// [`serve`] a target already started (or not).
fn serve_started<P: Provider>(
    started: Result<nvmf_target::TargetHandle<P>, nvmf_target::TargetError>,
    cfg: &TargetConfig,
    sigs: &SigSet,
) -> ExitCode {
    let target = match started {
        Ok(t) => t,
        Err(e) => {
            eprintln!("nvmf-target: {e}");
            return ExitCode::FAILURE;
        }
    };
    for s in &cfg.subsystems {
        for l in target.listen_addrs() {
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
                namespaces = s.namespaces.len(),
                provider = P::NAME,
                "serving {} ({} namespace(s)) on rdma traddr={} trsvcid={} ({} provider, RoCEv2 UDP {}:4791, path MTU {})",
                s.nqn,
                s.namespaces.len(),
                l.ip(),
                l.port(),
                P::NAME,
                l.ip(),
                mtu
            );
        }
    }
    let sig = sigs.wait();
    tracing::info!("{:?}, shutting down", sig.ok());
    target.shutdown();
    ExitCode::SUCCESS
}
