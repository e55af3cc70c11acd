//! `nvmf-target`: exports files as NVMe namespaces over NVMe/RDMA (RoCEv2, the soft
//! provider). With `--config` it reads a TOML file (see target/examples/target.toml);
//! without, it serves one subsystem on one file.
use std::net::IpAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use nix::sys::signal::{SigSet, Signal};
use nvmf_target::config::TargetConfig;

#[derive(Parser, Debug)]
#[command(
    name = "nvmf-target",
    version,
    about = "NVMe over Fabrics target on RDMA (RoCEv2, userspace soft provider)"
)]
struct Args {
    /// TOML configuration file (subsystems, namespaces, listen addresses).
    #[arg(long, short)]
    config: Option<PathBuf>,
    /// Address to listen on (RoCEv2 on UDP 4791 of this address; RDMA CM port below).
    #[arg(long, default_value = "127.0.0.2")]
    addr: IpAddr,
    /// RDMA CM port (NVMe-oF trsvcid).
    #[arg(long, default_value_t = 4420)]
    port: u16,
    /// Subsystem NQN.
    #[arg(long, default_value = "nqn.2026-11.io.nvmf-rdma:target")]
    nqn: String,
    /// Backing file of namespace 1 (created sparse at --size when missing).
    #[arg(long, default_value = "nvmf-target.img")]
    file: PathBuf,
    /// Size of the backing file when it has to be created (e.g. 1G, 512M).
    #[arg(long, default_value = "1G")]
    size: String,
    /// Logical block size in bytes (512 or 4096).
    #[arg(long, default_value_t = 512)]
    block_size: u32,
    /// Poll groups (busy-polling threads, one per core you give the target).
    #[arg(long, default_value_t = 1)]
    poll_groups: usize,
    /// Data slab per poll group: memory registered (pinned) for command data, at least
    /// MDTS (1M), e.g. 4M or 64M. Default: sized from RLIMIT_MEMLOCK (`ulimit -l`), 64M
    /// when it allows. Overrides a --config file's `data_slab`.
    #[arg(long, value_name = "SIZE")]
    data_slab: Option<String>,
}

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let args = Args::parse();
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
    if let Err(e) = cfg.validate() {
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
    let target = match nvmf_target::start(&cfg) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("nvmf-target: {e}");
            return ExitCode::FAILURE;
        }
    };
    let l = target.listen_addr();
    for s in &cfg.subsystems {
        eprintln!(
            "nvmf-target: serving {} ({} namespace(s)) on rdma traddr={} trsvcid={} (RoCEv2 UDP {}:4791, path MTU {})",
            s.nqn,
            s.namespaces.len(),
            l.ip(),
            l.port(),
            l.ip(),
            target.device().path_mtu().bytes()
        );
    }
    let sig = sigs.wait();
    eprintln!("nvmf-target: {:?}, shutting down", sig.ok());
    target.shutdown();
    ExitCode::SUCCESS
}
