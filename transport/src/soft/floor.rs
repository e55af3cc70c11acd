//! The floor under every round trip of the soft provider: a busy-polled UDP ping-pong
//! between two local addresses, on sockets set up as the provider's per-QP send
//! sockets ([`super::socket::bind_tx_socket`]: unconnected, DF, ECT(0), the same send
//! buffer). A 4 KiB read over the soft provider needs at least one such round trip
//! (the command capsule out, the data and the response back), so its latency divided
//! by the 4 KiB round trip says what the fabric adds on top of the kernel's UDP path.
//!
//! Used by `transport/examples/udp_pingpong.rs` and `nvmf-bench --baseline`.
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::socket::{bind_tx_socket, SocketError};

/// Round trips run first and left out of the figures (caches, the echo thread's start).
pub const WARMUP_ROUND_TRIPS: usize = 1000;
/// How long a ping waits for its echo before the measurement gives up.
pub const ECHO_TIMEOUT: Duration = Duration::from_secs(1);
/// Largest datagram a ping may carry (bytes): one IPv4 UDP payload.
pub const MAX_DATAGRAM_BYTES: usize = 65_507;

/// Percentiles of a set of latency samples, nanoseconds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LatencySummary {
    /// Samples measured (warm-up excluded).
    pub samples: usize,
    pub p50_ns: u64,
    pub p90_ns: u64,
    pub p99_ns: u64,
}

impl LatencySummary {
    /// The percentiles of `samples_ns` (sorted in place); `None` when it is empty.
    pub fn from_samples(samples_ns: &mut [u64]) -> Option<LatencySummary> {
        if samples_ns.is_empty() {
            return None;
        }
        samples_ns.sort_unstable();
        let at =
            |q: f64| samples_ns[((samples_ns.len() as f64 * q) as usize).min(samples_ns.len() - 1)];
        Some(LatencySummary {
            samples: samples_ns.len(),
            p50_ns: at(0.5),
            p90_ns: at(0.9),
            p99_ns: at(0.99),
        })
    }
}

/// Why a ping-pong could not be measured.
#[derive(Debug, thiserror::Error)]
pub enum FloorError {
    /// A socket could not be set up (the address is not local, no port free).
    #[error("UDP floor: {0}")]
    Socket(#[from] SocketError),
    #[error("UDP floor: {what} on {local}: {source}")]
    Io {
        what: &'static str,
        local: SocketAddr,
        source: std::io::Error,
    },
    /// No echo came back within [`ECHO_TIMEOUT`] (a firewall, or an address that is
    /// not reachable from the other).
    #[error(
        "UDP floor: no echo from {peer} within {timeout:?} after {round_trips} round trips \
         (is {peer} reachable from {local}?)"
    )]
    NoEcho {
        local: SocketAddr,
        peer: SocketAddr,
        timeout: Duration,
        round_trips: usize,
    },
    #[error("UDP floor: datagram size {0} is not within 1..={MAX_DATAGRAM_BYTES} bytes")]
    BadSize(usize),
    #[error("UDP floor: at least one round trip is needed")]
    NoRoundTrips,
}

/// Measures `round_trips` busy-polled round trips of a `size_bytes` datagram from
/// `local_ip` to an echo thread on `peer_ip` and back (after
/// [`WARMUP_ROUND_TRIPS`]), on sockets set up as the soft provider's send sockets
/// (bound to free ports from 0xC000 up). Both this thread and the echo thread spin: it
/// takes two cores for its duration.
///
/// # Errors
/// [`FloorError`]: a size outside 1..=[`MAX_DATAGRAM_BYTES`] or no round trips; a
/// socket that cannot be bound (the address is not this machine's); a send or receive
/// error; no echo within [`ECHO_TIMEOUT`].
pub fn udp_ping_pong(
    local_ip: IpAddr,
    peer_ip: IpAddr,
    size_bytes: usize,
    round_trips: usize,
) -> Result<LatencySummary, FloorError> {
    if size_bytes == 0 || size_bytes > MAX_DATAGRAM_BYTES {
        return Err(FloorError::BadSize(size_bytes));
    }
    if round_trips == 0 {
        return Err(FloorError::NoRoundTrips);
    }
    let (ping, ping_port) = bind_tx_socket(local_ip, 0xC000)?;
    let (echo, echo_port) = bind_tx_socket(peer_ip, 0xC000)?;
    let local = SocketAddr::new(local_ip, ping_port);
    let peer = SocketAddr::new(peer_ip, echo_port);
    let stop = Arc::new(AtomicBool::new(false));
    let echo_thread = {
        let stop = stop.clone();
        std::thread::Builder::new()
            .name("udp-floor-echo".into())
            .spawn(move || -> std::io::Result<()> {
                let mut buf = vec![std::mem::MaybeUninit::<u8>::uninit(); MAX_DATAGRAM_BYTES];
                let to = socket2::SockAddr::from(local);
                while !stop.load(Ordering::Relaxed) {
                    match echo.recv(&mut buf) {
                        Ok(n) => {
                            // SAFETY: recv initialized the first n bytes.
                            let data =
                                unsafe { std::slice::from_raw_parts(buf.as_ptr().cast::<u8>(), n) };
                            echo.send_to(data, &to)?;
                        }
                        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                        Err(e) => return Err(e),
                    }
                }
                Ok(())
            })
            .map_err(|source| FloorError::Io {
                what: "starting the echo thread",
                local: peer,
                source,
            })?
    };
    let result = ping_loop(&ping, local, peer, size_bytes, round_trips);
    stop.store(true, Ordering::Relaxed);
    let echoed = echo_thread.join();
    let mut rtts = result?;
    match echoed {
        Ok(Ok(())) => {}
        Ok(Err(source)) => {
            return Err(FloorError::Io {
                what: "echo",
                local: peer,
                source,
            })
        }
        Err(_) => {
            return Err(FloorError::Io {
                what: "echo",
                local: peer,
                source: std::io::Error::other("the echo thread panicked"),
            })
        }
    }
    LatencySummary::from_samples(&mut rtts).ok_or(FloorError::NoRoundTrips)
}

/// The pinging side: one datagram out, spin until it is back, `WARMUP_ROUND_TRIPS +
/// round_trips` times; returns the measured round trips, ns.
fn ping_loop(
    ping: &socket2::Socket,
    local: SocketAddr,
    peer: SocketAddr,
    size_bytes: usize,
    round_trips: usize,
) -> Result<Vec<u64>, FloorError> {
    let io = |what, source| FloorError::Io {
        what,
        local,
        source,
    };
    let msg = vec![0x5Au8; size_bytes];
    let mut buf = vec![std::mem::MaybeUninit::<u8>::uninit(); MAX_DATAGRAM_BYTES];
    let to = socket2::SockAddr::from(peer);
    let mut rtts = Vec::with_capacity(round_trips);
    for i in 0..WARMUP_ROUND_TRIPS + round_trips {
        let t = Instant::now();
        ping.send_to(&msg, &to).map_err(|e| io("send", e))?;
        loop {
            match ping.recv(&mut buf) {
                Ok(_) => break,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    if t.elapsed() > ECHO_TIMEOUT {
                        return Err(FloorError::NoEcho {
                            local,
                            peer,
                            timeout: ECHO_TIMEOUT,
                            round_trips: i,
                        });
                    }
                }
                Err(e) => return Err(io("receive", e)),
            }
        }
        if i >= WARMUP_ROUND_TRIPS {
            rtts.push(t.elapsed().as_nanos() as u64);
        }
    }
    Ok(rtts)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    const A: IpAddr = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 60));
    const B: IpAddr = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 61));

    #[test]
    fn a_ping_pong_over_loopback_measures_every_round_trip() {
        let s = udp_ping_pong(A, B, 4096, 200).unwrap();
        assert_eq!(s.samples, 200);
        assert!(
            s.p50_ns > 0 && s.p50_ns <= s.p90_ns && s.p90_ns <= s.p99_ns,
            "{s:?}"
        );
    }

    #[test]
    fn bad_sizes_and_addresses_are_refused() {
        assert!(matches!(
            udp_ping_pong(A, B, 0, 10),
            Err(FloorError::BadSize(0))
        ));
        assert!(matches!(
            udp_ping_pong(A, B, MAX_DATAGRAM_BYTES + 1, 10),
            Err(FloorError::BadSize(_))
        ));
        assert!(matches!(
            udp_ping_pong(A, B, 64, 0),
            Err(FloorError::NoRoundTrips)
        ));
        // TEST-NET-1 is no address of this machine.
        let e = udp_ping_pong(A, IpAddr::V4(Ipv4Addr::new(192, 0, 2, 1)), 64, 1).unwrap_err();
        assert!(e.to_string().contains("192.0.2.1"), "{e}");
    }

    #[test]
    fn percentiles_of_samples() {
        let mut v: Vec<u64> = (1..=100).rev().collect();
        let s = LatencySummary::from_samples(&mut v).unwrap();
        assert_eq!(
            (s.samples, s.p50_ns, s.p90_ns, s.p99_ns),
            (100, 51, 91, 100)
        );
        assert_eq!(LatencySummary::from_samples(&mut []), None);
    }
}
