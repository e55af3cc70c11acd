//! `rdma-perf`: perftest's bandwidth and latency tests over the transport library, on
//! the soft provider or a kernel RDMA device, against perftest itself or another
//! `rdma-perf` (see `rdma_tools::perf`).
//!
//! ```text
//! rdma-perf write_bw --bind 192.168.77.1                          # server
//! rdma-perf write_bw --bind 192.168.77.2 -s 1048576 192.168.77.1  # client
//! rdma-perf send_lat -d rxe0 -x 1 -s 64 -n 1000 [SERVER]          # verbs device, GID index 1
//! rdma-perf send_bw -c UD --bind 192.168.77.2 192.168.77.1         # UD (UC: -c UC)
//! ```
//!
//! Exit status 0 when the test ran, 1 when it failed (the reason on standard error), 2
//! for bad arguments.
use std::net::IpAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::Parser;
use rdma_tools::perf::kind::TestKind;
use rdma_tools::perf::run::{self, Options, MAX_SIZE};
use rdma_tools::perf::session::{Session, DEFAULT_PORT};
use transport::soft::SoftProvider;
use transport::verbs::provider::Provider;

/// perftest's tests, wire-compatible with perftest 4.5: the server runs without a peer
/// address, the client names the server.
#[derive(Parser, Debug)]
#[command(name = "rdma-perf", version)]
struct Args {
    /// The test.
    #[arg(value_enum)]
    test: TestKind,
    /// The server to connect to (the client side); without it this side is the server.
    server: Option<String>,
    /// The soft provider's address (its RoCE v2 GID; UDP 4791 is bound on it).
    #[arg(long = "bind", value_name = "ADDR")]
    bind: Option<IpAddr>,
    /// A kernel RDMA device (`rxe0`, `mlx5_0`): the verbs provider (`soft` names the
    /// soft provider, with `--bind`).
    #[arg(short = 'd', long = "ib-dev", value_name = "DEV")]
    device: Option<String>,
    /// The device's port.
    #[arg(short = 'i', long = "ib-port", default_value_t = 1)]
    ib_port: u8,
    /// GID index of the device's port (a RoCE v2 GID: `rdma-info --gids` lists them).
    #[arg(short = 'x', long = "gid-index", value_name = "GID_INDEX")]
    gid_index: Option<u32>,
    /// Message size, bytes (default 65536 for BW tests, 2 for latency tests).
    #[arg(short = 's', long = "size")]
    size: Option<u64>,
    /// Iterations (default 5000 for write/read BW, 1000 otherwise).
    #[arg(short = 'n', long = "iters")]
    iters: Option<u64>,
    /// Run for this many seconds instead of -n (BW tests).
    #[arg(short = 'D', long = "duration")]
    duration: Option<u64>,
    /// Connection type: RC, UC (SEND and WRITE tests) or UD (SEND tests; messages of
    /// at most one MTU), as perftest's `-c`.
    #[arg(short = 'c', long = "connection", default_value = "RC")]
    connection: String,
    /// Number of QPs (BW tests).
    #[arg(short = 'q', long = "qp", default_value_t = 1)]
    qps: u32,
    /// Every size from 2 to 2^23 bytes.
    #[arg(short = 'a', long = "all")]
    all: bool,
    /// Report bandwidth in Gb/sec instead of MB/sec.
    #[arg(long = "report_gbits", alias = "report-gbits")]
    report_gbits: bool,
    /// TCP port of the out-of-band exchange.
    #[arg(short = 'p', long = "port", default_value_t = DEFAULT_PORT)]
    port: u16,
    /// Send queue depth (default 128 for BW tests, 1 for latency tests).
    #[arg(short = 't', long = "tx-depth")]
    tx_depth: Option<u32>,
    /// Receive queue depth of SEND tests.
    #[arg(short = 'r', long = "rx-depth", default_value_t = 512)]
    rx_depth: u32,
    /// Signal every this many sends (BW tests).
    #[arg(short = 'Q', long = "cq-mod", default_value_t = 100)]
    cq_mod: u32,
    /// Accepted for perftest's command lines; timestamps come from the monotonic
    /// clock, so the CPU frequency does not matter.
    #[arg(short = 'F', long = "CPU-freq")]
    cpu_freq: bool,
    /// After the run, print the provider's counters (per QP: packets, retransmissions,
    /// NAKs; per device) on standard error (soft provider; not a perftest option).
    #[arg(long)]
    counters: bool,
    /// Where the kernel's RDMA devices are listed (for -d / -x).
    #[arg(long, default_value = transport::sysfs::gid::SYSFS_INFINIBAND, hide = true)]
    sysfs_root: PathBuf,
}

/// The provider and address to open.
enum Dev {
    Soft(IpAddr),
    Verbs(IpAddr),
}

fn resolve(a: &Args) -> Result<Dev, String> {
    match (&a.device, a.bind) {
        (Some(d), Some(ip)) if d == "soft" => Ok(Dev::Soft(ip)),
        (Some(d), None) if d == "soft" => {
            Err("-d soft needs --bind ADDR (the soft provider's address)".into())
        }
        (Some(d), _) => {
            let idx = a.gid_index.ok_or_else(|| {
                format!("-d {d} needs -x GID_INDEX: a RoCE v2 GID of the port (`rdma-info --gids -d {d}` lists them)")
            })?;
            let table = transport::sysfs::gid::read_gid_table(&a.sysfs_root, d, a.ib_port)
                .map_err(|e| format!("device {d} port {}: {e}", a.ib_port))?;
            let e = table.iter().find(|e| e.index == idx).ok_or_else(|| {
                format!(
                    "device {d} port {} has no GID index {idx} (it has {}): see `rdma-info --gids -d {d}`",
                    a.ib_port,
                    table.iter().map(|e| e.index.to_string()).collect::<Vec<_>>().join(", ")
                )
            })?;
            Ok(Dev::Verbs(e.ip()))
        }
        (None, Some(ip)) => Ok(Dev::Soft(ip)),
        (None, None) => Err(
            "no device: --bind ADDR for the soft provider, or -d DEV -x GID_INDEX for a kernel RDMA device"
                .into(),
        ),
    }
}

fn options(a: &Args) -> Result<Options, String> {
    let kind = a.test;
    if !kind.is_bw() && a.qps != 1 {
        return Err(format!("-q {}: latency tests run on one QP", a.qps));
    }
    if !kind.is_bw() && a.duration.is_some() {
        return Err("-D: duration runs are for the BW tests here; use -n".into());
    }
    let size = a.size.unwrap_or(kind.default_size());
    if size == 0 || size > MAX_SIZE {
        return Err(format!(
            "-s {size}: message sizes are 1 to {MAX_SIZE} bytes"
        ));
    }
    let iters = a.iters.unwrap_or(kind.default_iters());
    if iters < if kind.is_bw() { 1 } else { 5 } {
        return Err(format!(
            "-n {iters}: too few iterations (latency tests need 5)"
        ));
    }
    if a.qps == 0 || a.cq_mod == 0 {
        return Err("-q and -Q must be at least 1".into());
    }
    let conn = run::connection_type(&a.connection, kind)?;
    Ok(Options {
        kind,
        size,
        iters,
        duration: a.duration,
        qps: a.qps,
        all_sizes: a.all,
        gbits: a.report_gbits,
        tx_depth: a.tx_depth.unwrap_or(if kind.is_bw() { 128 } else { 1 }),
        rx_depth: a.rx_depth,
        cq_mod: a.cq_mod,
        conn,
    })
}

fn go<P: Provider>(cfg: P::DeviceConfig, a: &Args, o: &Options) -> Result<(), String> {
    let dev: Arc<P::Device> =
        P::open(&cfg).map_err(|e| format!("cannot open the {} device: {e}", P::NAME))?;
    let session = match &a.server {
        Some(s) => Session::connect(s, a.port, Duration::from_secs(5)).map_err(|e| {
            format!(
                "cannot connect to {s}:{}: {e} (is the server running?)",
                a.port
            )
        })?,
        None => Session::accept(a.port, || {
            println!("\n************************************");
            println!("* Waiting for client to connect... *");
            println!("************************************");
        })
        .map_err(|e| format!("cannot listen on TCP port {}: {e}", a.port))?,
    };
    let outcome =
        run::run::<P>(&dev, session, o, &mut |l| println!("{l}")).map_err(|e| e.to_string())?;
    if a.counters {
        for (qpn, c) in &outcome.counters.qps {
            eprintln!("qp {qpn:#08x}: {c:?}");
        }
        let d: Vec<String> = outcome
            .counters
            .device
            .iter()
            .filter(|(_, v)| *v != 0)
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        eprintln!("device: {}", d.join(" "));
    }
    Ok(())
}

fn main() -> ExitCode {
    let a = Args::parse();
    let _ = a.cpu_freq;
    let (dev, o) = match resolve(&a).and_then(|d| Ok((d, options(&a)?))) {
        Ok(x) => x,
        Err(e) => {
            eprintln!("rdma-perf: {e}");
            return ExitCode::from(2);
        }
    };
    let r = match dev {
        Dev::Soft(ip) => go::<SoftProvider>(SoftProvider::device_config(ip, 1), &a, &o),
        #[cfg(feature = "verbs")]
        Dev::Verbs(ip) => go::<transport::rdma::VerbsProvider>(
            transport::rdma::VerbsProvider::device_config(ip, 1),
            &a,
            &o,
        ),
        #[cfg(not(feature = "verbs"))]
        Dev::Verbs(ip) => Err(format!(
            "-d {} (GID {ip}) needs the verbs provider: build with `cargo build -p rdma-tools --features verbs`",
            a.device.as_deref().unwrap_or("")
        )),
    };
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("rdma-perf: {e}");
            ExitCode::FAILURE
        }
    }
}
