//! The async host's 4 KiB random reads (zero-copy, `Namespace::read_buf`) against an
//! in-process target on a file, in one completion mode (issue 15, item 3: poll threads
//! that wake the tasks, or the tasks polling their queue from the runtime): `--tasks`
//! tasks, each with one read outstanding, for `--seconds`; prints one line with the
//! mode, the completion latency p50/p99 in microseconds and IOPS. Alternate the modes
//! to compare them (BENCHMARKS.md):
//!
//!     cargo build --release -p nvmf-bench --example async_qd
//!     for r in 1 2 3; do for m in thread runtime; do
//!         build/release/examples/async_qd --mode $m --tasks 1; done; done
use std::net::{IpAddr, Ipv4Addr};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::{Parser, ValueEnum};
use nvmf_initiator::{Completions, Host, HostOptions};
use nvmf_target::config::TargetConfig;

#[derive(Clone, Copy, Debug, ValueEnum)]
enum Mode {
    /// Completions::PollThread.
    Thread,
    /// Completions::Runtime.
    Runtime,
}

#[derive(Parser, Debug)]
struct Args {
    #[arg(long, value_enum, default_value_t = Mode::Thread)]
    mode: Mode,
    /// Tasks, each with one read outstanding (the queue depth).
    #[arg(long, default_value_t = 1)]
    tasks: u32,
    #[arg(long, default_value_t = 5)]
    seconds: u64,
    /// Tokio worker threads.
    #[arg(long, default_value_t = 1)]
    workers: usize,
    /// Directory of the namespace file (a regular file system, not tmpfs).
    #[arg(long, default_value = "/var/tmp")]
    dir: std::path::PathBuf,
}

fn main() -> ExitCode {
    let args = Args::parse();
    let dir = match tempfile::tempdir_in(&args.dir) {
        Ok(d) => d,
        Err(e) => {
            eprintln!("async_qd: a directory in {}: {e}", args.dir.display());
            return ExitCode::FAILURE;
        }
    };
    let path = dir.path().join("ns.img");
    let size = 256u64 << 20;
    // Written once, so reads come from the page cache, not from holes.
    if let Err(e) = std::fs::write(&path, vec![0x5Au8; size as usize]) {
        eprintln!("async_qd: writing {}: {e}", path.display());
        return ExitCode::FAILURE;
    }
    let nqn = "nqn.2026-12.io.nvmf-rdma:async-qd";
    let taddr = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2));
    let cfg = TargetConfig::default_for(taddr, nqn, &path, size);
    let target = match nvmf_target::start(&cfg) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("async_qd: target: {e}");
            return ExitCode::FAILURE;
        }
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(args.workers)
        .enable_all()
        .build()
        .expect("runtime");
    let r = rt.block_on(async {
        let mut o = HostOptions::new(target.listen_addr(), nqn);
        o.local_ip = Some(IpAddr::V4(Ipv4Addr::new(127, 0, 0, 3)));
        o.queue_depth = (args.tasks + 1).min(1024) as u16;
        o.completions = match args.mode {
            Mode::Thread => Completions::PollThread,
            Mode::Runtime => Completions::Runtime,
        };
        let host = Host::connect(o).await.map_err(|e| e.to_string())?;
        let ns = host.namespace(1).await.map_err(|e| e.to_string())?;
        let blocks = ns.nlb / 8;
        let stop = Arc::new(AtomicBool::new(false));
        let warm = Instant::now() + Duration::from_secs(1);
        let mut tasks = Vec::new();
        for k in 0..args.tasks {
            let ns = ns.clone();
            let stop = stop.clone();
            let pool = host.pool().clone();
            tasks.push(tokio::spawn(async move {
                let mut h = hdrhistogram::Histogram::<u64>::new(3).expect("histogram");
                let mut buf = pool.alloc(4096).await.map_err(|e| e.to_string())?;
                let mut x = u64::from(k).wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
                while !stop.load(Ordering::Relaxed) {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    let t0 = Instant::now();
                    buf = ns
                        .read_buf((x % blocks) * 8, buf)
                        .await
                        .map_err(|e| e.to_string())?;
                    if t0 >= warm {
                        let _ = h.record(t0.elapsed().as_nanos() as u64);
                    }
                }
                Ok::<_, String>(h)
            }));
        }
        tokio::time::sleep(Duration::from_secs(1 + args.seconds)).await;
        stop.store(true, Ordering::Relaxed);
        let mut all = hdrhistogram::Histogram::<u64>::new(3).expect("histogram");
        for t in tasks {
            let h = t.await.map_err(|e| e.to_string())??;
            let _ = all.add(&h);
        }
        host.disconnect().await.map_err(|e| e.to_string())?;
        Ok::<_, String>(all)
    });
    target.shutdown();
    match r {
        Ok(h) => {
            println!(
                "mode={:?} tasks={} p50_us={:.2} p99_us={:.2} iops={:.0}",
                args.mode,
                args.tasks,
                h.value_at_quantile(0.5) as f64 / 1000.0,
                h.value_at_quantile(0.99) as f64 / 1000.0,
                h.len() as f64 / args.seconds as f64
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("async_qd: {e}");
            ExitCode::FAILURE
        }
    }
}
