//! `rdma-doctor`: checks this host's RoCE configuration (and, with `--peer`, the path
//! to a peer) and says for each finding what it means and the command that fixes it;
//! exits 1 when a check fails (see `rdma_tools::doctor`).
//!
//! ```text
//! rdma-doctor --addr 192.168.1.2                       # this host
//! rdma-doctor --addr 192.168.1.2 --peer 192.168.1.3    # and the path to a peer
//! rdma-doctor --listen --addr 192.168.1.3              # on the peer: answer it
//! rdma-doctor --config target.toml -o json             # the target's own settings
//! ```
use std::net::IpAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, ValueEnum};
use nvmf_target::config::{parse_size, TargetConfig};
use rdma_tools::doctor::{self, peer::DOCTOR_PORT, Options};
use transport::verbs::Mtu;
use transport::ProviderKind;

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Output {
    Text,
    Json,
}

/// Checks this host's RoCE configuration: the GID of the address, the MTU against the
/// RoCE MTU (end to end with --peer), memlock and open-file limits against the
/// target's needs, socket buffer limits, ECN, rp_filter, firewall rules on UDP 4791
/// and PFC/ETS. Exit status 0: nothing failed (warnings may be listed); 1: something
/// failed; 2: bad arguments.
#[derive(Parser, Debug)]
#[command(name = "rdma-doctor", version)]
struct Args {
    /// The address RoCE uses on this host (the target's --addr). Default: the
    /// target's, or a --config file's first listen address.
    #[arg(long)]
    addr: Option<IpAddr>,
    /// The provider the target runs.
    #[arg(long, value_enum)]
    provider: Option<ProviderKind>,
    /// The RoCE MTU expected end to end: 256, 512, 1024, 2048 or 4096 (1024 is what
    /// an interface MTU of 1500 carries).
    #[arg(long, default_value_t = 1024)]
    mtu: u32,
    /// A peer's RoCE address: compare GIDs and probe the path MTU (it runs
    /// `rdma-doctor --listen`).
    #[arg(long)]
    peer: Option<IpAddr>,
    /// Answer a peer's doctor on --addr (GID queries and MTU probes) until killed.
    #[arg(long)]
    listen: bool,
    /// The UDP port of --listen and --peer.
    #[arg(long, default_value_t = DOCTOR_PORT)]
    doctor_port: u16,
    /// How long to wait for each answer of the peer, in milliseconds.
    #[arg(long, default_value_t = 300)]
    peer_timeout_ms: u64,
    /// The target's data slab per poll group ("64M"); default: automatic, as the
    /// target sizes it.
    #[arg(long)]
    data_slab: Option<String>,
    /// The target's poll groups.
    #[arg(long)]
    poll_groups: Option<u32>,
    /// QPs the host is expected to carry (one socket each on the soft provider).
    #[arg(long, default_value_t = 1024)]
    qps: u64,
    /// The target's configuration file: its provider, first listen address, data
    /// slab, poll groups and MDTS (flags override it).
    #[arg(long)]
    config: Option<PathBuf>,
    /// Output format.
    #[arg(short, long, value_enum, default_value_t = Output::Text)]
    output: Output,
    /// Where the RDMA devices are listed.
    #[arg(long, default_value = transport::sysfs::gid::SYSFS_INFINIBAND)]
    sysfs_root: PathBuf,
    /// Where the network interfaces are listed.
    #[arg(long, default_value = transport::sysfs::port::SYSFS_NET)]
    net_root: PathBuf,
}

fn options(args: &Args) -> Result<Options, String> {
    let cfg = match &args.config {
        Some(p) => TargetConfig::from_file(p).map_err(|e| e.to_string())?,
        None => rdma_tools::doctor::target_defaults(),
    };
    let roce_mtu = (1..=5)
        .filter_map(Mtu::from_code)
        .find(|m| m.bytes() == args.mtu)
        .ok_or_else(|| {
            format!(
                "--mtu {}: a RoCE MTU is 256, 512, 1024, 2048 or 4096",
                args.mtu
            )
        })?;
    let data_slab_bytes = match &args.data_slab {
        Some(s) => Some(parse_size(s).map_err(|e| format!("--data-slab {s:?}: {e}"))?),
        None => cfg.data_slab,
    };
    let addr = args
        .addr
        .or_else(|| cfg.listen.first().map(|l| l.addr))
        .unwrap_or_else(|| IpAddr::from([127, 0, 0, 2]));
    Ok(Options {
        addr,
        provider: args.provider.unwrap_or(cfg.provider),
        roce_mtu,
        peer: args.peer,
        peer_port: args.doctor_port,
        peer_timeout: Duration::from_millis(args.peer_timeout_ms),
        data_slab_bytes,
        poll_groups: args.poll_groups.unwrap_or(cfg.poll_groups.max(1) as u32),
        mdts_bytes: cfg.mdts_bytes,
        qps: args.qps,
        sysfs_root: args.sysfs_root.clone(),
        net_root: args.net_root.clone(),
    })
}

fn main() -> ExitCode {
    let args = Args::parse();
    let opts = match options(&args) {
        Ok(o) => o,
        Err(e) => {
            eprintln!("rdma-doctor: {e}");
            return ExitCode::from(2);
        }
    };
    if args.listen {
        eprintln!(
            "rdma-doctor: answering peers on {} UDP {}",
            opts.addr, args.doctor_port
        );
        if let Err(e) = doctor::peer::serve(&opts, args.doctor_port) {
            eprintln!(
                "rdma-doctor: cannot listen on {} UDP {}: {e} (is the address this host's? \
                 `ip addr`; another doctor on the port?)",
                opts.addr, args.doctor_port
            );
            return ExitCode::FAILURE;
        }
        return ExitCode::SUCCESS;
    }
    let report = doctor::run(&opts);
    match args.output {
        Output::Text => print!("{}", report.text()),
        Output::Json => match serde_json::to_string_pretty(&report) {
            Ok(j) => println!("{j}"),
            Err(e) => {
                eprintln!("rdma-doctor: {e}");
                return ExitCode::FAILURE;
            }
        },
    }
    ExitCode::from(report.exit_code())
}
