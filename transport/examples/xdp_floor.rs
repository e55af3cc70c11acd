//! The packet-path floor over a veth pair between two network namespaces (issue 10,
//! scope 3): busy-polled ping-pong through UDP sockets (set up as the soft provider's,
//! [`transport::soft::socket::bind_tx_socket`]) or through AF_XDP sockets
//! ([`transport::soft::xdp`]), 64 B and 4 KiB round-trip percentiles and a pipelined
//! packets/s figure. One process per namespace; `scripts/xdp-floor.sh` sets up the
//! pair and runs both (root).
//!
//! ```text
//! ip netns exec B xdp_floor echo --path xdp --iface xdpb --local 10.47.0.2 --peer 10.47.0.1 &
//! ip netns exec A xdp_floor ping --path xdp --iface xdpa --local 10.47.0.1 --peer 10.47.0.2
//! ```
use std::net::{IpAddr, SocketAddr};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::{Parser, Subcommand, ValueEnum};
use hdrhistogram::Histogram;
use transport::soft::socket::bind_tx_socket;
use transport::soft::xdp::bpf::XdpProgram;
use transport::soft::xdp::frame::{headers_len, parse, write_headers, FrameEnds};
use transport::soft::xdp::neigh::{ifindex, local_mac, peer_mac};
use transport::soft::xdp::xsk::{Xsk, XskConfig, MAX_FRAME_BYTES};
use transport::wire::ROCE_V2_UDP_DPORT;

#[derive(Parser)]
struct Cli {
    #[command(subcommand)]
    role: Role,
}

#[derive(Subcommand)]
enum Role {
    /// Send every datagram back until killed.
    Echo(Ends),
    /// Measure round trips and pipelined packets/s against an echo.
    Ping {
        #[command(flatten)]
        ends: Ends,
        /// Round trips measured per payload size (after 1000 warm-up ones).
        #[arg(long, default_value_t = 100_000)]
        round_trips: u64,
        /// Datagrams in flight in the pipelined run.
        #[arg(long, default_value_t = 32)]
        window: usize,
        /// Length of the pipelined run, seconds.
        #[arg(long, default_value_t = 3)]
        seconds: u64,
    },
}

#[derive(clap::Args)]
struct Ends {
    #[arg(long, value_enum)]
    path: Path,
    /// The veth end in this namespace.
    #[arg(long)]
    iface: String,
    #[arg(long)]
    local: IpAddr,
    #[arg(long)]
    peer: IpAddr,
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Path {
    Udp,
    Xdp,
}

/// Datagrams moved per call.
const BATCH: usize = 32;
const WARMUP: u64 = 1000;
const NO_ECHO: Duration = Duration::from_secs(2);

/// One side's packet path: datagrams out, datagrams in, busy-polled.
trait PacketPath {
    /// Queues one datagram with `payload` to the peer.
    fn send(&mut self, payload: &[u8]) -> Result<(), String>;
    /// Sends what was queued.
    fn flush(&mut self) -> Result<(), String>;
    /// Receives what is there (no waiting), calling `f` with each payload.
    fn recv(&mut self, f: &mut dyn FnMut(&[u8])) -> Result<usize, String>;
}

struct Udp {
    sock: socket2::Socket,
    peer: socket2::SockAddr,
    out: Vec<Vec<u8>>,
    bufs: Vec<Vec<u8>>,
}

impl Udp {
    fn open(e: &Ends) -> Result<Udp, String> {
        let (sock, port) = bind_tx_socket(e.local, 0xC000).map_err(|e| e.to_string())?;
        Ok(Udp {
            sock,
            peer: SocketAddr::new(e.peer, port).into(),
            out: Vec::with_capacity(BATCH),
            bufs: vec![vec![0u8; 9000]; BATCH],
        })
    }
}

impl PacketPath for Udp {
    fn send(&mut self, payload: &[u8]) -> Result<(), String> {
        self.out.push(payload.to_vec());
        if self.out.len() == BATCH {
            self.flush()?;
        }
        Ok(())
    }

    fn flush(&mut self) -> Result<(), String> {
        use std::os::fd::AsRawFd;
        if self.out.is_empty() {
            return Ok(());
        }
        let mut iov: Vec<libc::iovec> = self
            .out
            .iter()
            .map(|b| libc::iovec {
                iov_base: b.as_ptr() as *mut _,
                iov_len: b.len(),
            })
            .collect();
        let mut msgs: Vec<libc::mmsghdr> = iov
            .iter_mut()
            .map(|v| {
                // SAFETY: zeroed plain data, filled below.
                let mut m: libc::mmsghdr = unsafe { std::mem::zeroed() };
                m.msg_hdr.msg_name = self.peer.as_ptr() as *mut _;
                m.msg_hdr.msg_namelen = self.peer.len();
                m.msg_hdr.msg_iov = v;
                m.msg_hdr.msg_iovlen = 1;
                m
            })
            .collect();
        let mut sent = 0;
        while sent < msgs.len() {
            // SAFETY: valid mmsghdrs over live buffers.
            let r = unsafe {
                libc::sendmmsg(
                    self.sock.as_raw_fd(),
                    msgs[sent..].as_mut_ptr(),
                    (msgs.len() - sent) as u32,
                    0,
                )
            };
            if r < 0 {
                let e = std::io::Error::last_os_error();
                if e.kind() != std::io::ErrorKind::WouldBlock {
                    return Err(format!("sendmmsg: {e}"));
                }
            } else {
                sent += r as usize;
            }
        }
        self.out.clear();
        Ok(())
    }

    fn recv(&mut self, f: &mut dyn FnMut(&[u8])) -> Result<usize, String> {
        use std::os::fd::AsRawFd;
        let mut iov: Vec<libc::iovec> = self
            .bufs
            .iter_mut()
            .map(|b| libc::iovec {
                iov_base: b.as_mut_ptr().cast(),
                iov_len: b.len(),
            })
            .collect();
        let mut msgs: Vec<libc::mmsghdr> = iov
            .iter_mut()
            .map(|v| {
                // SAFETY: zeroed plain data, filled below.
                let mut m: libc::mmsghdr = unsafe { std::mem::zeroed() };
                m.msg_hdr.msg_iov = v;
                m.msg_hdr.msg_iovlen = 1;
                m
            })
            .collect();
        // SAFETY: valid mmsghdrs over live buffers.
        let r = unsafe {
            libc::recvmmsg(
                self.sock.as_raw_fd(),
                msgs.as_mut_ptr(),
                BATCH as u32,
                libc::MSG_DONTWAIT,
                std::ptr::null_mut(),
            )
        };
        if r < 0 {
            let e = std::io::Error::last_os_error();
            return if e.kind() == std::io::ErrorKind::WouldBlock {
                Ok(0)
            } else {
                Err(format!("recvmmsg: {e}"))
            };
        }
        for (m, b) in msgs.iter().zip(&self.bufs).take(r as usize) {
            f(&b[..m.msg_len as usize]);
        }
        Ok(r as usize)
    }
}

struct Xdp {
    xsk: Xsk,
    ends: FrameEnds,
    scratch: Vec<u8>,
    hl: usize,
    _prog: XdpProgram,
}

impl Xdp {
    fn open(e: &Ends) -> Result<Xdp, String> {
        let ix = ifindex(&e.iface).map_err(|e| e.to_string())?;
        let prog = XdpProgram::attach(ix, 1).map_err(|e| e.to_string())?;
        let xsk = Xsk::open(ix, 0, XskConfig::default()).map_err(|e| e.to_string())?;
        prog.insert(0, xsk.fd()).map_err(|e| e.to_string())?;
        let ends = FrameEnds {
            src_mac: local_mac(&e.iface).map_err(|e| e.to_string())?,
            dst_mac: peer_mac(e.peer, &e.iface).map_err(|e| e.to_string())?,
            src: SocketAddr::new(e.local, 0xC000),
            dst: SocketAddr::new(e.peer, ROCE_V2_UDP_DPORT),
            tos: transport::soft::ECN_ECT0,
        };
        eprintln!(
            "xdp: {} XDP on {} ({ix}), peer MAC {:02x?}",
            if prog.native { "native" } else { "generic" },
            e.iface,
            ends.dst_mac
        );
        Ok(Xdp {
            xsk,
            ends,
            scratch: vec![0; MAX_FRAME_BYTES],
            hl: headers_len(e.local.is_ipv6()),
            _prog: prog,
        })
    }
}

impl PacketPath for Xdp {
    fn send(&mut self, payload: &[u8]) -> Result<(), String> {
        let hl = self.hl;
        self.scratch[hl..hl + payload.len()].copy_from_slice(payload);
        let n = write_headers(&mut self.scratch, &self.ends, payload.len())
            .map_err(|e| e.to_string())?;
        let start = Instant::now();
        while !self.xsk.send(&self.scratch[..n]) {
            self.xsk.kick();
            if start.elapsed() > NO_ECHO {
                return Err("AF_XDP: the TX ring stays full".into());
            }
        }
        Ok(())
    }

    fn flush(&mut self) -> Result<(), String> {
        self.xsk.kick();
        Ok(())
    }

    fn recv(&mut self, f: &mut dyn FnMut(&[u8])) -> Result<usize, String> {
        let mut n = 0;
        self.xsk.recv(BATCH as u32, |frame| {
            if let Some(d) = parse(frame).filter(|d| d.dst_port == ROCE_V2_UDP_DPORT) {
                n += 1;
                f(d.payload);
            }
        });
        Ok(n)
    }
}

fn open(e: &Ends) -> Result<Box<dyn PacketPath>, String> {
    Ok(match e.path {
        Path::Udp => Box::new(Udp::open(e)?),
        Path::Xdp => Box::new(Xdp::open(e)?),
    })
}

fn echo(p: &mut dyn PacketPath) -> Result<(), String> {
    let mut got: Vec<Vec<u8>> = Vec::with_capacity(BATCH);
    loop {
        p.recv(&mut |d| got.push(d.to_vec()))?;
        for d in got.drain(..) {
            p.send(&d)?;
        }
        p.flush()?;
    }
}

fn rtt(p: &mut dyn PacketPath, size: usize, n: u64) -> Result<Histogram<u64>, String> {
    let mut h =
        Histogram::<u64>::new_with_bounds(1, 60_000_000_000, 3).map_err(|e| e.to_string())?;
    let msg = vec![0x5Au8; size];
    for i in 0..WARMUP + n {
        let t = Instant::now();
        p.send(&msg)?;
        p.flush()?;
        while p.recv(&mut |_| {})? == 0 {
            if t.elapsed() > NO_ECHO {
                return Err(format!(
                    "no echo within {NO_ECHO:?} after {i} round trips (is the echo running?)"
                ));
            }
        }
        if i >= WARMUP {
            h.record(t.elapsed().as_nanos() as u64)
                .map_err(|e| e.to_string())?;
        }
    }
    Ok(h)
}

fn pipelined(
    p: &mut dyn PacketPath,
    size: usize,
    window: usize,
    seconds: u64,
) -> Result<f64, String> {
    let msg = vec![0x5Au8; size];
    let (mut in_flight, mut echoed) = (0usize, 0u64);
    let start = Instant::now();
    let mut last = Instant::now();
    while start.elapsed() < Duration::from_secs(seconds) {
        while in_flight < window {
            p.send(&msg)?;
            in_flight += 1;
        }
        p.flush()?;
        let got = p.recv(&mut |_| {})?;
        if got > 0 {
            last = Instant::now();
        } else if last.elapsed() > NO_ECHO {
            return Err(format!(
                "pipelined: {in_flight} datagrams lost (no echo within {NO_ECHO:?})"
            ));
        }
        in_flight -= got.min(in_flight);
        echoed += got as u64;
    }
    Ok(echoed as f64 / start.elapsed().as_secs_f64())
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.role {
        Role::Echo(e) => open(&e).and_then(|mut p| echo(p.as_mut())),
        Role::Ping { ends, round_trips, window, seconds } => open(&ends).and_then(|mut p| {
            let name = match ends.path { Path::Udp => "udp", Path::Xdp => "af_xdp" };
            for size in [64usize, 4096] {
                let h = rtt(p.as_mut(), size, round_trips)?;
                println!(
                    "{name} {size:>5} B rtt: p50 {:.2} us, p99 {:.2} us, mean {:.2} us ({} round trips)",
                    h.value_at_quantile(0.5) as f64 / 1e3,
                    h.value_at_quantile(0.99) as f64 / 1e3,
                    h.mean() / 1e3,
                    h.len()
                );
            }
            for size in [64usize, 4096] {
                let pps = pipelined(p.as_mut(), size, window, seconds)?;
                println!("{name} {size:>5} B pipelined (window {window}): {:.0} datagrams/s echoed", pps);
            }
            Ok(())
        }),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("xdp_floor: {e}");
            ExitCode::FAILURE
        }
    }
}
