//! Plain UDP ping-pong over loopback with busy polling: the floor under any RoCEv2
//! round trip of the soft provider on this machine ([`transport::soft::floor`], which
//! `nvmf-bench --baseline` also runs).
//!
//! `cargo run --release -p transport --example udp_pingpong [-- ITERATIONS]`
//! prints the round-trip time percentiles for 64-byte and 4 KiB datagrams.
use std::net::{IpAddr, Ipv4Addr};
use std::process::ExitCode;

use transport::soft::floor::udp_ping_pong;

fn main() -> ExitCode {
    let arg = std::env::args().nth(1);
    let iters: usize = match arg.as_deref().map(str::parse) {
        None => 100_000,
        Some(Ok(n)) if n > 0 => n,
        Some(_) => {
            eprintln!(
                "udp_pingpong: ITERATIONS must be a positive integer, not {:?}",
                arg.unwrap_or_default()
            );
            return ExitCode::FAILURE;
        }
    };
    let a = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 40));
    let b = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 41));
    for size in [64usize, 4096] {
        match udp_ping_pong(a, b, size, iters) {
            Ok(s) => println!(
                "UDP ping-pong {size:>5} B: rtt p50 {:.1} us, p90 {:.1} us, p99 {:.1} us ({} round trips)",
                s.p50_ns as f64 / 1000.0,
                s.p90_ns as f64 / 1000.0,
                s.p99_ns as f64 / 1000.0,
                s.samples
            ),
            Err(e) => {
                eprintln!("udp_pingpong: {e}");
                return ExitCode::FAILURE;
            }
        }
    }
    ExitCode::SUCCESS
}
