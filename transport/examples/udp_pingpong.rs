//! Plain UDP ping-pong over loopback with busy polling: the floor under any RoCEv2
//! round trip of the soft provider on this machine.
//!
//! `cargo run --release -p transport --example udp_pingpong [-- ITERATIONS]`
//! prints the round-trip time percentiles for 64-byte and 4 KiB datagrams.
use std::net::UdpSocket;
use std::time::Instant;

fn main() {
    let iters: usize = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(100_000);
    for size in [64usize, 4096] {
        let a = UdpSocket::bind("127.0.0.40:0").expect("bind 127.0.0.40");
        let b = UdpSocket::bind("127.0.0.41:0").expect("bind 127.0.0.41");
        a.set_nonblocking(true).unwrap();
        b.set_nonblocking(true).unwrap();
        let (aa, ba) = (a.local_addr().unwrap(), b.local_addr().unwrap());
        let echo = std::thread::spawn(move || {
            let mut buf = vec![0u8; 65536];
            let mut n = 0;
            while n < iters + 1000 {
                if let Ok(k) = b.recv(&mut buf) {
                    b.send_to(&buf[..k], aa).unwrap();
                    n += 1;
                }
            }
        });
        let msg = vec![0x5Au8; size];
        let mut buf = vec![0u8; 65536];
        let mut rtts = Vec::with_capacity(iters);
        for i in 0..iters + 1000 {
            let t = Instant::now();
            a.send_to(&msg, ba).unwrap();
            while a.recv(&mut buf).is_err() {}
            if i >= 1000 {
                rtts.push(t.elapsed().as_nanos() as u64);
            }
        }
        echo.join().unwrap();
        rtts.sort_unstable();
        let p =
            |q: f64| rtts[((rtts.len() as f64 * q) as usize).min(rtts.len() - 1)] as f64 / 1000.0;
        println!(
            "UDP ping-pong {size:>5} B: rtt p50 {:.1} us, p90 {:.1} us, p99 {:.1} us ({} round trips)",
            p(0.5),
            p(0.9),
            p(0.99),
            rtts.len()
        );
    }
}
