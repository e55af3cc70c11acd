//! A reconnect storm (issue 16, item 10): how fast one target accepts many queues at
//! once, as after a failover when every host reconnects together. Starts the target
//! binary as its own process, then:
//!
//! 1. **one at a time**: `--serial` hosts of one I/O queue connect and disconnect in
//!    turn; each connect (CM exchange and Fabrics Connect of the admin queue, Property
//!    Get/Set of CC and CSTS, Identify, then the same for the I/O queue) is timed, and
//!    the p50/p99 printed: the cost of one connection on a quiet target;
//! 2. **the storm**: `--hosts` threads, each with its own host on its own loopback
//!    address, connect `--queues` I/O queues each at the same moment (a barrier); the
//!    wall clock from the barrier until the last host is connected is the figure, with
//!    each host's own connect time (p50, p99, max) beside it.
//!
//! Keep Alive is off (nothing drives it here), every other option at its default.
//!
//!     cargo build --release -p nvmf-target -p nvmf-bench --example connect_storm
//!     build/release/examples/connect_storm --target build/release/nvmf-target
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use clap::Parser;

#[path = "common/target_process.rs"]
mod target_process;
use nvmf_initiator::{HostOptions, SyncHost};
use target_process::TargetProcess;

#[derive(Parser, Debug)]
struct Args {
    /// The nvmf-target binary (a release build).
    #[arg(long)]
    target: PathBuf,
    /// Host threads connecting at once.
    #[arg(long, default_value_t = 16)]
    hosts: u16,
    /// I/O queues of each host (at most the target's 64 per controller).
    #[arg(long, default_value_t = 64)]
    queues: u16,
    /// Connections of one I/O queue timed one at a time before the storm.
    #[arg(long, default_value_t = 50)]
    serial: u32,
    /// The target's address.
    #[arg(long, default_value = "127.0.0.2")]
    addr: Ipv4Addr,
}

fn options(args: &Args, n: u16, queues: u16, subnqn: &str) -> HostOptions {
    let mut opts = HostOptions::new(SocketAddr::new(IpAddr::V4(args.addr), 4420), subnqn);
    opts.local_ip = Some(IpAddr::V4(Ipv4Addr::new(
        127,
        0,
        2 + (n >> 8) as u8,
        n as u8 + 1,
    )));
    opts.io_queues = queues;
    opts.kato_ms = 0;
    opts.connect_timeout = Duration::from_secs(60);
    opts
}

/// The `p`-th percentile (0..=100) of sorted `v`, in ms.
fn pct(v: &[Duration], p: f64) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    let i = ((p / 100.0) * (v.len() - 1) as f64).round() as usize;
    v[i].as_secs_f64() * 1e3
}

fn main() -> ExitCode {
    let args = Args::parse();
    if args.queues == 0 || args.queues > 64 || args.hosts == 0 || args.hosts > 250 {
        eprintln!("connect_storm: --queues must be 1 to 64 and --hosts 1 to 250");
        return ExitCode::FAILURE;
    }
    if let Err(e) = transport::fdlimit::raise_soft_to_hard() {
        eprintln!("connect_storm: raising RLIMIT_NOFILE: {e}");
    }
    let subnqn = target_process::SUBNQN;
    let target = match TargetProcess::start("connect_storm", &args.target, args.addr) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::FAILURE;
        }
    };
    let run = || -> Result<(), String> {
        // Until the target serves.
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            match SyncHost::connect(&options(&args, 0, 1, subnqn)) {
                Ok(h) => {
                    drop(h);
                    break;
                }
                Err(e) if Instant::now() > deadline => return Err(format!("first connect: {e}")),
                Err(_) => std::thread::sleep(Duration::from_millis(100)),
            }
        }
        let mut serial = Vec::new();
        for i in 0..args.serial {
            let t = Instant::now();
            let h = SyncHost::connect(&options(&args, 1 + (i % 8) as u16, 1, subnqn))
                .map_err(|e| format!("serial connect {i}: {e}"))?;
            serial.push(t.elapsed());
            drop(h);
        }
        serial.sort();
        println!(
            "one at a time: {} connects of an admin queue and 1 I/O queue: p50 {:.2} ms, p99 {:.2} ms",
            serial.len(),
            pct(&serial, 50.0),
            pct(&serial, 99.0)
        );
        let barrier = Arc::new(Barrier::new(usize::from(args.hosts) + 1));
        let threads: Vec<_> = (0..args.hosts)
            .map(|n| {
                let barrier = barrier.clone();
                let opts = options(&args, 16 + n, args.queues, subnqn);
                std::thread::spawn(move || {
                    barrier.wait();
                    let t = Instant::now();
                    let h = SyncHost::connect(&opts).map_err(|e| format!("host {n}: {e}"))?;
                    Ok::<_, String>((t.elapsed(), h))
                })
            })
            .collect();
        barrier.wait();
        let start = Instant::now();
        let mut times = Vec::new();
        let mut hosts = Vec::new();
        for t in threads {
            let (d, h) = t
                .join()
                .map_err(|_| "a host thread panicked".to_string())??;
            times.push(d);
            hosts.push(h);
        }
        let wall = start.elapsed();
        times.sort();
        let queues = u32::from(args.hosts) * u32::from(args.queues);
        println!(
            "storm: {} hosts x {} I/O queues = {queues} I/O queues (+{} admin) connected in {:.2} s \
             ({:.2} ms per queue); per host p50 {:.0} ms, p99 {:.0} ms, max {:.0} ms",
            args.hosts,
            args.queues,
            args.hosts,
            wall.as_secs_f64(),
            wall.as_secs_f64() * 1e3 / f64::from(queues + u32::from(args.hosts)),
            pct(&times, 50.0),
            pct(&times, 99.0),
            times.last().map_or(0.0, |d| d.as_secs_f64() * 1e3)
        );
        drop(hosts);
        Ok(())
    };
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("connect_storm: {e}");
            let path = target.log_path().display().to_string();
            eprintln!("target log ({path}):\n{}", target.stop());
            ExitCode::FAILURE
        }
    }
}
