//! What each connected I/O QP costs an `nvmf-target` (issue 10, scale): starts the
//! target binary as its own process, connects `--hosts` controllers of `--queues` I/O
//! queues each (every host on its own loopback address, Keep Alive off, no I/O), and
//! reports the target's resident memory (`VmRSS`), pinned memory (`VmPin`), open file
//! descriptors and the machine's UDP socket memory (`/proc/net/sockstat`, both sides'
//! sockets) after the first host and after the last. The cost per QP is the growth
//! between the two divided by the QPs added (admin + I/O), so one-time costs (the
//! first controller, lazily built tables) stay out of it.
//!
//!     cargo build --release -p nvmf-target -p nvmf-bench --example qp_memory
//!     build/release/examples/qp_memory --target build/release/nvmf-target
//!
//! The target runs under `--nofile` (default 1024, the common soft limit) to show
//! that it raises its own limit for one socket per QP.
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::process::{Child, Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use clap::Parser;
use nvmf_initiator::{HostOptions, SyncHost};

#[derive(Parser, Debug)]
struct Args {
    /// The nvmf-target binary (a release build).
    #[arg(long)]
    target: PathBuf,
    /// Controllers to connect, each from its own address 127.0.1.N.
    #[arg(long, default_value_t = 16)]
    hosts: u16,
    /// I/O queues per controller (at most the target's 64).
    #[arg(long, default_value_t = 64)]
    queues: u16,
    /// Entries per I/O queue.
    #[arg(long, default_value_t = 128)]
    queue_depth: u16,
    /// Soft RLIMIT_NOFILE the target starts under (its hard limit stays).
    #[arg(long, default_value_t = 1024)]
    nofile: u64,
    /// The target's address.
    #[arg(long, default_value = "127.0.0.2")]
    addr: Ipv4Addr,
}

/// One reading of the target process and the machine's UDP sockets.
#[derive(Clone, Copy, Debug, Default)]
struct Sample {
    rss_kib: u64,
    pin_kib: u64,
    fds: u64,
    udp_mem_kib: u64,
}

fn status_kib(status: &str, key: &str) -> u64 {
    status
        .lines()
        .find_map(|l| l.strip_prefix(key))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

fn sample(pid: u32) -> std::io::Result<Sample> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd"))?.count() as u64;
    // "UDP: inuse N mem PAGES"
    let sockstat = std::fs::read_to_string("/proc/net/sockstat")?;
    let pages: u64 = sockstat
        .lines()
        .find(|l| l.starts_with("UDP:"))
        .and_then(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            f.iter()
                .position(|w| *w == "mem")
                .and_then(|i| f.get(i + 1))
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(0);
    Ok(Sample {
        rss_kib: status_kib(&status, "VmRSS:"),
        pin_kib: status_kib(&status, "VmPin:"),
        fds,
        udp_mem_kib: pages * transport::memlock::page_size() / 1024,
    })
}

struct Target(Child);

impl Drop for Target {
    fn drop(&mut self) {
        // SAFETY: kill(2) on our own child's pid.
        unsafe { libc::kill(self.0.id() as libc::pid_t, libc::SIGTERM) };
        let _ = self.0.wait();
    }
}

fn connect(args: &Args, n: u16, subnqn: &str) -> Result<SyncHost, String> {
    let mut opts = HostOptions::new(SocketAddr::new(IpAddr::V4(args.addr), 4420), subnqn);
    opts.local_ip = Some(IpAddr::V4(Ipv4Addr::new(127, 0, 1, n as u8 + 1)));
    opts.io_queues = args.queues;
    opts.queue_depth = args.queue_depth;
    opts.kato_ms = 0;
    // The host's data buffers come from one pool per host, not per queue entry
    // (examples/host_memory.rs measures the host's side); the target's side is what is
    // measured here.
    SyncHost::connect(&opts).map_err(|e| format!("host {n}: {e}"))
}

fn main() -> ExitCode {
    let args = Args::parse();
    if args.hosts < 2 || args.hosts > 250 || args.queues == 0 {
        eprintln!("qp_memory: --hosts must be 2 to 250 and --queues at least 1");
        return ExitCode::FAILURE;
    }
    if let Err(e) = transport::fdlimit::raise_soft_to_hard() {
        eprintln!("qp_memory: raising RLIMIT_NOFILE: {e}");
    }
    let dir = match tempfile::tempdir() {
        Ok(d) => d,
        Err(e) => {
            eprintln!("qp_memory: temporary directory: {e}");
            return ExitCode::FAILURE;
        }
    };
    let log = dir.path().join("target.log");
    let subnqn = "nqn.2026-11.io.nvmf-rdma:target";
    let child = Command::new("prlimit")
        .arg(format!("--nofile={}:", args.nofile))
        .arg(&args.target)
        .args(["--addr", &args.addr.to_string(), "--size", "64M", "--file"])
        .arg(dir.path().join("ns.img"))
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).expect("log file"))
        .spawn();
    let target = match child {
        Ok(c) => Target(c),
        Err(e) => {
            eprintln!(
                "qp_memory: starting {} under prlimit: {e}",
                args.target.display()
            );
            return ExitCode::FAILURE;
        }
    };
    // prlimit execs the target: same pid.
    let pid = target.0.id();

    let run = || -> Result<(), String> {
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut hosts = vec![loop {
            match connect(&args, 0, subnqn) {
                Ok(h) => break h,
                Err(e) if Instant::now() > deadline => return Err(e),
                Err(_) => std::thread::sleep(Duration::from_millis(100)),
            }
        }];
        std::thread::sleep(Duration::from_millis(500));
        let first = sample(pid).map_err(|e| format!("reading /proc/{pid}: {e}"))?;
        for n in 1..args.hosts {
            hosts.push(connect(&args, n, subnqn)?);
        }
        std::thread::sleep(Duration::from_millis(500));
        let last = sample(pid).map_err(|e| format!("reading /proc/{pid}: {e}"))?;
        let qps_per_host = u64::from(args.queues) + 1;
        let added = u64::from(args.hosts - 1) * qps_per_host;
        let total = u64::from(args.hosts) * qps_per_host;
        println!(
            "{} controllers x ({} I/O + 1 admin) QPs = {total} QPs on the target (queue depth {}), target started under RLIMIT_NOFILE soft {}",
            args.hosts, args.queues, args.queue_depth, args.nofile
        );
        println!(
            "| | after 1 host | after {} hosts | per added QP |",
            args.hosts
        );
        println!("|---|---|---|---|");
        let row = |name: &str, a: u64, b: u64| {
            println!(
                "| {name} | {a} KiB | {b} KiB | {:.1} KiB |",
                b.saturating_sub(a) as f64 / added as f64
            )
        };
        row("target VmRSS", first.rss_kib, last.rss_kib);
        row("target VmPin (registered)", first.pin_kib, last.pin_kib);
        row(
            "UDP socket memory, machine",
            first.udp_mem_kib,
            last.udp_mem_kib,
        );
        let sum = |s: Sample| s.rss_kib + s.pin_kib + s.udp_mem_kib;
        row("sum", sum(first), sum(last));
        println!(
            "| target open fds | {} | {} | {:.2} |",
            first.fds,
            last.fds,
            last.fds.saturating_sub(first.fds) as f64 / added as f64
        );
        for h in hosts {
            let _ = h.disconnect();
        }
        Ok(())
    };
    let result = run();
    drop(target);
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            let tail = std::fs::read_to_string(&log).unwrap_or_default();
            let tail: Vec<&str> = tail.lines().rev().take(10).collect();
            eprintln!("qp_memory: {e}");
            for l in tail.iter().rev() {
                eprintln!("  target: {l}");
            }
            ExitCode::FAILURE
        }
    }
}
