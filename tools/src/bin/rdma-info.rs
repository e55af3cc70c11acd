//! `rdma-info`: the RDMA devices of this host, as `ibv_devinfo` and `show_gids` print
//! them, and their counters, for both providers (see `rdma_tools::info`).
//!
//! ```text
//! rdma-info                 # ibv_devinfo's layout, soft provider and sysfs devices
//! rdma-info -v              # ... with phys_state, rate, netdev and the GID lines
//! rdma-info --gids          # show_gids' table
//! rdma-info --counters -w   # counters every second, with their rates
//! rdma-info --qps           # the open soft devices' QPs, with their UDP source ports
//! rdma-info -o json         # everything, as JSON
//! ```
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, ValueEnum};
use rdma_tools::info::{self, text, Select};

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Output {
    Text,
    Json,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum ProviderSel {
    /// The soft provider (this host's interfaces) and the kernel's RDMA devices.
    All,
    /// The soft provider only.
    Soft,
    /// The kernel's RDMA devices (sysfs) only.
    Verbs,
}

/// RDMA devices, ports, GID tables and counters of this host, for the soft provider
/// (its device is the set of this host's interfaces and addresses) and the kernel's
/// RDMA devices (read from sysfs: no libibverbs needed). The soft devices that this
/// user's processes hold open answer on their info sockets
/// ($XDG_RUNTIME_DIR/soft-roce, else /tmp/soft-roce-$UID) with their counters and QPs
/// (`--qps`, `--counters`, `-v`, `-o json`'s `soft_live`).
#[derive(Parser, Debug)]
#[command(name = "rdma-info", version)]
struct Args {
    /// Verbose, as `ibv_devinfo -v`: phys_state, rate, netdev and the GID table.
    #[arg(short, long)]
    verbose: bool,
    /// Print the GID tables as Mellanox `show_gids` does.
    #[arg(short, long)]
    gids: bool,
    /// Print the counters (rxe's hw_counters names and the ECN/CNP counters).
    #[arg(short, long)]
    counters: bool,
    /// Print the QPs of the soft devices open in this user's processes, as `rdma res
    /// show qp` does, with each QP's RoCEv2 UDP source port (`sport`).
    #[arg(short = 'q', long)]
    qps: bool,
    /// Repeat every second (until interrupted), with each counter's rate.
    #[arg(short, long)]
    watch: bool,
    /// Only this device (`soft`, `rxe0`, `mlx5_0`).
    #[arg(short = 'd', long = "ib-dev")]
    device: Option<String>,
    /// Which provider's devices.
    #[arg(long, value_enum, default_value_t = ProviderSel::All)]
    provider: ProviderSel,
    /// Output format.
    #[arg(short, long, value_enum, default_value_t = Output::Text)]
    output: Output,
    /// Where the RDMA devices are listed (tests, containers).
    #[arg(long, default_value = transport::sysfs::gid::SYSFS_INFINIBAND)]
    sysfs_root: PathBuf,
    /// Where the network interfaces are listed.
    #[arg(long, default_value = transport::sysfs::port::SYSFS_NET)]
    net_root: PathBuf,
    /// Where the soft devices' info sockets are (default: $XDG_RUNTIME_DIR/soft-roce,
    /// else /tmp/soft-roce-$UID).
    #[arg(long)]
    soft_dir: Option<PathBuf>,
}

fn read(args: &Args) -> Result<info::Snapshot, String> {
    let sel = Select {
        soft: args.provider != ProviderSel::Verbs,
        verbs: args.provider != ProviderSel::Soft,
    };
    let soft_dir = args
        .soft_dir
        .clone()
        .unwrap_or_else(transport::soft::info_socket::info_dir);
    let mut s = info::snapshot(sel, &args.sysfs_root, &args.net_root, &soft_dir)
        .map_err(|e| format!("cannot list this host's interfaces (getifaddrs: {e})"))?;
    if let Some(d) = &args.device {
        let names: Vec<String> = s.devices.iter().map(|d| d.name.clone()).collect();
        s.devices.retain(|x| &x.name == d);
        if d != info::SOFT_DEVICE {
            s.soft_live.clear();
        }
        if s.devices.is_empty() {
            return Err(format!(
                "no device {d:?}: this host has {} (see `rdma-info` without -d)",
                if names.is_empty() {
                    "none".to_string()
                } else {
                    names.join(", ")
                }
            ));
        }
    }
    Ok(s)
}

fn render(args: &Args, s: &info::Snapshot, prev: Option<&info::Snapshot>) -> String {
    match args.output {
        Output::Json => {
            let mut j =
                serde_json::to_string(s).unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"));
            j.push('\n');
            j
        }
        Output::Text => {
            let mut o = String::new();
            let plain = !args.gids && !args.counters && !args.qps;
            if plain {
                o.push_str(&text::devinfo(s, args.verbose));
                if args.verbose && !s.soft_live.is_empty() {
                    o.push_str(&text::qps(s));
                }
            }
            if args.qps {
                o.push_str(&text::qps(s));
            }
            if args.gids {
                o.push_str(&text::show_gids(s));
            }
            if args.counters {
                o.push_str(&text::counters(s, prev));
                o.push_str(&text::soft_counters(s, prev));
            }
            o
        }
    }
}

fn main() -> ExitCode {
    let args = Args::parse();
    let mut prev: Option<info::Snapshot> = None;
    loop {
        let s = match read(&args) {
            Ok(s) => s,
            Err(e) => {
                eprintln!("rdma-info: {e}");
                return ExitCode::FAILURE;
            }
        };
        print!("{}", render(&args, &s, prev.as_ref()));
        if !args.watch {
            return ExitCode::SUCCESS;
        }
        prev = Some(s);
        std::thread::sleep(Duration::from_secs(1));
    }
}
