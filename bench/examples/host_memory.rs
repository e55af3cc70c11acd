//! What each I/O queue costs the host library (issue 15, item 2): starts the target
//! binary as its own process, then in this process connects a host of 1 I/O queue and
//! hosts of `--queues` I/O queues (each host on its own loopback address, every option
//! at its default but Keep Alive, which is off: queue depth 128, 1 MiB per command, the
//! default buffer pool), reads 4 KiB on every queue once, and reports this process's resident
//! memory (`VmRSS`), pinned memory (`VmPin`) and the bytes the host library registered
//! (`SyncHost::registered_bytes`: the pool and every queue's own slots).
//!
//! The cost of an added queue is the second host's growth minus the first's (both pay
//! the same per-host costs: device, pool, admin queue) divided by the queues it adds;
//! then hosts of `--queues` queues are added until `--total` I/O queues are connected,
//! and the process's total is printed.
//!
//!     cargo build --release -p nvmf-target -p nvmf-bench --example host_memory
//!     build/release/examples/host_memory --target build/release/nvmf-target
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::Parser;

#[path = "common/target_process.rs"]
mod target_process;
use nvme::Sqe;
use nvmf_initiator::{DataDir, HostOptions, SyncHost};
use target_process::TargetProcess;

#[derive(Parser, Debug)]
struct Args {
    /// The nvmf-target binary (a release build).
    #[arg(long)]
    target: PathBuf,
    /// I/O queues of each host after the first (at most the target's 64 per controller).
    #[arg(long, default_value_t = 64)]
    queues: u16,
    /// I/O queues to reach in all, with hosts of `--queues` queues.
    #[arg(long, default_value_t = 1024)]
    total: u32,
    /// The target's address.
    #[arg(long, default_value = "127.0.0.2")]
    addr: Ipv4Addr,
    /// Exit non-zero unless the goals of issue 15 hold: at most 256 KiB registered and
    /// 512 KiB resident per added I/O queue, and all the queues within 2 GiB resident.
    #[arg(long)]
    check: bool,
}

#[derive(Clone, Copy, Debug, Default)]
struct Sample {
    rss_kib: u64,
    pin_kib: u64,
    registered: u64,
}

fn status_kib(key: &str) -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix(key))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

fn sample(hosts: &mut [SyncHost]) -> Sample {
    Sample {
        rss_kib: status_kib("VmRSS:"),
        pin_kib: status_kib("VmPin:"),
        registered: hosts.iter_mut().map(|h| h.registered_bytes() as u64).sum(),
    }
}

/// Host `n` (on 127.0.1.n+1) with `queues` I/O queues at the defaults; one 4 KiB read
/// on every queue.
fn connect(args: &Args, n: u16, queues: u16, subnqn: &str) -> Result<SyncHost, String> {
    let mut opts = HostOptions::new(SocketAddr::new(IpAddr::V4(args.addr), 4420), subnqn);
    opts.local_ip = Some(IpAddr::V4(Ipv4Addr::new(127, 0, 1, n as u8 + 1)));
    opts.io_queues = queues;
    // Nothing drives Keep Alive here (no keeper thread): the target must not expire
    // the controllers while the next hosts connect.
    opts.kato_ms = 0;
    let mut host = SyncHost::connect(&opts).map_err(|e| format!("host {n}: {e}"))?;
    for q in host.io_queues() {
        let cid = q
            .submit_with(
                Sqe::read(0, 1, 0, 7, false),
                DataDir::ControllerToHost { len: 4096 },
                |_| {},
            )
            .map_err(|e| format!("host {n}: read: {e}"))?;
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut out = Vec::new();
        while !out
            .iter()
            .any(|c: &nvmf_initiator::QueueCompletion| c.cid == cid)
        {
            if Instant::now() > deadline {
                return Err(format!("host {n}: read on queue {} timed out", q.qid()));
            }
            q.poll(&mut out);
        }
    }
    Ok(host)
}

fn main() -> ExitCode {
    let args = Args::parse();
    if args.queues < 2 || args.queues > 64 || args.total < u32::from(args.queues) {
        eprintln!("host_memory: --queues must be 2 to 64 and --total at least --queues");
        return ExitCode::FAILURE;
    }
    if let Err(e) = transport::fdlimit::raise_soft_to_hard() {
        eprintln!("host_memory: raising RLIMIT_NOFILE: {e}");
    }
    let subnqn = target_process::SUBNQN;
    let target = match TargetProcess::start("host_memory", &args.target, args.addr) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::FAILURE;
        }
    };
    let run = || -> Result<(), String> {
        let mut hosts: Vec<SyncHost> = Vec::new();
        let s0 = sample(&mut hosts);
        let deadline = Instant::now() + Duration::from_secs(10);
        hosts.push(loop {
            match connect(&args, 0, 1, subnqn) {
                Ok(h) => break h,
                Err(e) if Instant::now() > deadline => return Err(e),
                Err(_) => std::thread::sleep(Duration::from_millis(100)),
            }
        });
        let s1 = sample(&mut hosts);
        hosts.push(connect(&args, 1, args.queues, subnqn)?);
        let s2 = sample(&mut hosts);
        let added = f64::from(args.queues - 1);
        let per = |a: u64, b: u64, c: u64| (c as f64 - b as f64 - (b as f64 - a as f64)) / added;
        println!(
            "host A: 1 I/O queue; host B: {} I/O queues (defaults: depth 128, max_io_bytes \
             1 MiB, buffer pool {} MiB); one 4 KiB read per queue",
            args.queues,
            nvmf_initiator::pool::DEFAULT_POOL_BYTES >> 20
        );
        println!("| | before | after A | after B | per added I/O queue |");
        println!("|---|---|---|---|---|");
        println!(
            "| VmRSS | {} KiB | {} KiB | {} KiB | {:.1} KiB |",
            s0.rss_kib,
            s1.rss_kib,
            s2.rss_kib,
            per(s0.rss_kib, s1.rss_kib, s2.rss_kib)
        );
        println!(
            "| VmPin | {} KiB | {} KiB | {} KiB | {:.1} KiB |",
            s0.pin_kib,
            s1.pin_kib,
            s2.pin_kib,
            per(s0.pin_kib, s1.pin_kib, s2.pin_kib)
        );
        println!(
            "| registered (pool + queue slots) | {} KiB | {} KiB | {} KiB | {:.1} KiB |",
            s0.registered / 1024,
            s1.registered / 1024,
            s2.registered / 1024,
            per(s0.registered, s1.registered, s2.registered) / 1024.0
        );
        let rss_per = per(s0.rss_kib, s1.rss_kib, s2.rss_kib);
        let reg_per = per(s0.registered, s1.registered, s2.registered) / 1024.0;
        let mut total = 1 + u32::from(args.queues);
        let mut n = 2;
        while total < args.total {
            let q = (args.total - total).min(u32::from(args.queues)) as u16;
            hosts.push(connect(&args, n, q, subnqn)?);
            total += u32::from(q);
            n += 1;
        }
        let s = sample(&mut hosts);
        println!(
            "{total} I/O queues ({} admin) in {} hosts: VmRSS {:.1} MiB, VmPin {} KiB, \
             registered {:.1} MiB",
            hosts.len(),
            hosts.len(),
            s.rss_kib as f64 / 1024.0,
            s.pin_kib,
            s.registered as f64 / (1 << 20) as f64
        );
        for h in hosts {
            let _ = h.disconnect();
        }
        if args.check {
            let mut failed = Vec::new();
            if reg_per > 256.0 {
                failed.push(format!(
                    "{reg_per:.1} KiB registered per added queue (goal 256)"
                ));
            }
            if rss_per > 512.0 {
                failed.push(format!(
                    "{rss_per:.1} KiB resident per added queue (goal 512)"
                ));
            }
            if s.rss_kib > 2 << 20 {
                failed.push(format!(
                    "{} KiB resident for {total} queues (goal 2 GiB)",
                    s.rss_kib
                ));
            }
            if !failed.is_empty() {
                return Err(format!("over the goals: {}", failed.join("; ")));
            }
            println!("within the goals (256 KiB registered, 512 KiB resident per queue; 2 GiB)");
        }
        Ok(())
    };
    let result = run();
    let tail = target.stop();
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("host_memory: {e}");
            for l in tail.lines().rev().take(10).collect::<Vec<_>>().iter().rev() {
                eprintln!("  target: {l}");
            }
            ExitCode::FAILURE
        }
    }
}
