//! The out-of-band TCP connection (port 18515) with perftest's symmetric exchange: the
//! client writes first, the server reads then writes ([`super::oob`] has the messages).
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

/// perftest's default out-of-band port.
pub const DEFAULT_PORT: u16 = 18515;

/// One side of the out-of-band connection.
pub struct Session {
    stream: TcpStream,
    client: bool,
}

impl Session {
    /// Server: listens on `port` (all addresses; IPv6 and IPv4 where the host has
    /// both) and accepts one client.
    ///
    /// # Errors
    /// The port cannot be bound (in use: another perftest server runs) or accept fails.
    pub fn accept(port: u16, on_listen: impl FnOnce()) -> io::Result<Session> {
        let l =
            TcpListener::bind(("::", port)).or_else(|_| TcpListener::bind(("0.0.0.0", port)))?;
        on_listen();
        let (stream, _) = l.accept()?;
        stream.set_nodelay(true)?;
        Ok(Session {
            stream,
            client: false,
        })
    }

    /// Client: connects to `server:port`, retrying for up to `patience` while the server
    /// is not listening yet (connection refused).
    ///
    /// # Errors
    /// The name does not resolve, or the server did not accept within `patience`.
    pub fn connect(server: &str, port: u16, patience: Duration) -> io::Result<Session> {
        let addrs: Vec<SocketAddr> = (server, port).to_socket_addrs()?.collect();
        let deadline = Instant::now() + patience;
        loop {
            let mut last = io::Error::new(io::ErrorKind::NotFound, "no address");
            for a in &addrs {
                match TcpStream::connect_timeout(a, Duration::from_secs(2)) {
                    Ok(stream) => {
                        stream.set_nodelay(true)?;
                        return Ok(Session {
                            stream,
                            client: true,
                        });
                    }
                    Err(e) => last = e,
                }
            }
            if Instant::now() >= deadline {
                return Err(last);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Whether this side is the client.
    pub fn is_client(&self) -> bool {
        self.client
    }

    /// The peer's address.
    pub fn peer_addr(&self) -> io::Result<SocketAddr> {
        self.stream.peer_addr()
    }

    /// One exchange: writes `mine` and reads as many bytes into `theirs` (client first).
    ///
    /// # Errors
    /// The peer closed the connection or the socket failed.
    pub fn xchg(&mut self, mine: &[u8], theirs: &mut [u8]) -> io::Result<()> {
        if self.client {
            self.stream.write_all(mine)?;
            self.stream.read_exact(theirs)?;
        } else {
            self.stream.read_exact(theirs)?;
            self.stream.write_all(mine)?;
        }
        Ok(())
    }

    /// Runs `work` until the peer has sent something (without reading it), so a passive
    /// side keeps its RDMA provider going while the other side runs its test. `work`
    /// returns `Ok(true)` when it did something, `Ok(false)` when idle (then this waits
    /// a little). The socket is looked at once per 100 us of work at most.
    ///
    /// # Errors
    /// The peer closed the connection, the socket failed, or `work` failed.
    pub fn wait_for_peer(&mut self, mut work: impl FnMut() -> io::Result<bool>) -> io::Result<()> {
        self.stream.set_nonblocking(true)?;
        let mut looked = Instant::now();
        let r = loop {
            if looked.elapsed() < Duration::from_micros(100) {
                match work() {
                    Ok(true) => {}
                    Ok(false) => std::thread::sleep(Duration::from_micros(50)),
                    Err(e) => break Err(e),
                }
                continue;
            }
            looked = Instant::now();
            let mut b = [0u8; 1];
            match self.stream.peek(&mut b) {
                Ok(0) => {
                    break Err(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        "the peer closed the out-of-band connection",
                    ))
                }
                Ok(_) => break Ok(()),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => break Err(e),
            }
            match work() {
                Ok(true) => {}
                Ok(false) => std::thread::sleep(Duration::from_micros(50)),
                Err(e) => break Err(e),
            }
        };
        self.stream.set_nonblocking(false)?;
        r
    }

    /// perftest's close: writes `"done"` and reads the peer's (a peer that already
    /// closed is fine).
    pub fn close(mut self) {
        let _ = self.stream.write_all(super::oob::DONE);
        let _ = self.stream.set_read_timeout(Some(Duration::from_secs(1)));
        let mut d = [0u8; 5];
        let _ = self.stream.read_exact(&mut d);
    }
}
