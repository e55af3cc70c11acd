//! N-to-1 incast over real UDP sockets with the soft provider, DCQCN on or off: N
//! sender QPs RDMA WRITE to one receiver through a rate-limited, RED-marking,
//! tail-dropping queue on the receiver's receive path (see `run.rs`). Prints one line
//! of `key=value` results; `scripts/incast.sh` runs it alternately and makes the
//! table of BENCHMARKS.md.
//!
//! ```text
//! cargo run --release -p transport --example incast -- --dcqcn on [--flows 8]
//!     [--mib-per-flow 4] [--msg-kib 16] [--depth 8] [--rate-mbps 1000]
//!     [--limit-kib 512] [--kmin-kib 16] [--kmax-kib 128] [--pmax 0.05] [--seed 1]
//!     [--rx-ip 127.0.0.2] [--tx-ip 127.0.0.3]
//! ```
mod run;

use std::time::Duration;

use transport::soft::RxQueueConfig;

fn main() {
    let mut c = run::IncastCfg {
        flows: 8,
        bytes_per_flow: 4 << 20,
        msg_len: 16 << 10,
        depth: 8,
        dcqcn: true,
        queue: RxQueueConfig {
            rate_mbps: 1000,
            kmin_bytes: 16 << 10,
            kmax_bytes: 128 << 10,
            pmax: 0.05,
            limit_bytes: 512 << 10,
        },
        ip_rx: "127.0.0.2".parse().unwrap(),
        ip_tx: "127.0.0.3".parse().unwrap(),
        seed: 1,
        timeout: Duration::from_secs(120),
    };
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut it = args.iter();
    while let Some(k) = it.next() {
        let Some(v) = it.next() else {
            eprintln!("incast: {k} needs a value");
            std::process::exit(2);
        };
        let num = |v: &str| -> u64 {
            v.parse().unwrap_or_else(|_| {
                eprintln!("incast: {k} {v}: not a number");
                std::process::exit(2)
            })
        };
        match k.as_str() {
            "--flows" => c.flows = num(v) as usize,
            "--mib-per-flow" => c.bytes_per_flow = (num(v) as usize) << 20,
            "--msg-kib" => c.msg_len = (num(v) as u32) << 10,
            "--depth" => c.depth = num(v) as u32,
            "--rate-mbps" => c.queue.rate_mbps = num(v) as u32,
            "--limit-kib" => c.queue.limit_bytes = (num(v) as u32) << 10,
            "--kmin-kib" => c.queue.kmin_bytes = (num(v) as u32) << 10,
            "--kmax-kib" => c.queue.kmax_bytes = (num(v) as u32) << 10,
            "--pmax" => {
                c.queue.pmax = v.parse().unwrap_or_else(|_| {
                    eprintln!("incast: --pmax {v}: not a probability");
                    std::process::exit(2)
                })
            }
            "--seed" => c.seed = num(v),
            "--dcqcn" => c.dcqcn = v == "on",
            "--rx-ip" | "--tx-ip" => {
                let ip = v.parse().unwrap_or_else(|_| {
                    eprintln!("incast: {k} {v}: not an IP address");
                    std::process::exit(2)
                });
                if k == "--rx-ip" {
                    c.ip_rx = ip
                } else {
                    c.ip_tx = ip
                }
            }
            _ => {
                eprintln!("incast: unknown option {k} (see the example's docs)");
                std::process::exit(2);
            }
        }
    }
    match run::run(&c) {
        Ok(r) => println!(
            "dcqcn={} flows={} goodput_mbps={:.1} p50_us={:.0} p99_us={:.0} queue_drops={} \
             resent_pkts={} mean_depth_kib={:.1} max_depth_kib={:.1} marks={} cnps_sent={} cnps_handled={} \
             elapsed_s={:.3} intact={}",
            if c.dcqcn { "on" } else { "off" },
            c.flows,
            r.goodput_mbps,
            r.p50_us,
            r.p99_us,
            r.queue_drops,
            r.resent_pkts,
            r.mean_depth_bytes / 1024.0,
            r.max_depth_bytes as f64 / 1024.0,
            r.marks,
            r.cnps_sent,
            r.cnps_handled,
            r.elapsed.as_secs_f64(),
            r.intact
        ),
        Err(e) => {
            eprintln!("incast: {e}");
            std::process::exit(1);
        }
    }
}
