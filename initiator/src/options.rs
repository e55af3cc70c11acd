//! What a host connects with ([`HostOptions`]) and its defaults.
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::time::Duration;

use crate::error::HostError;

/// Options of a host connection (one controller, one admin queue, `io_queues` I/O
/// queues), for [`crate::Host::connect`] and [`crate::SyncHost::connect`].
#[derive(Clone, Debug)]
pub struct HostOptions {
    /// The target's address and RDMA CM port (4420 for NVMe/RDMA).
    pub traddr: SocketAddr,
    /// The local address to open the RDMA device on; `None`: the source address the
    /// kernel would use toward `traddr`.
    pub local_ip: Option<IpAddr>,
    /// The NVM subsystem NQN to connect to.
    pub subnqn: String,
    /// This host's NQN (default: `nqn.2014-08.org.nvmexpress:uuid:<hostid>`).
    pub hostnqn: String,
    /// This host's identifier (HOSTID of the Connect data, a UUID).
    pub hostid: [u8; 16],
    /// I/O queues to create (default 1).
    pub io_queues: u16,
    /// Entries per I/O queue (HSQSIZE + 1; default 128, so 127 commands in flight).
    pub queue_depth: u16,
    /// Keep Alive Timeout in ms (default 10000; 0 disables Keep Alive).
    pub kato_ms: u32,
    /// Data buffer bytes per command (default 1 MiB); larger requests are split.
    pub max_io_bytes: usize,
    /// How long connecting a queue (CM exchange, Fabrics Connect) may take (5 s).
    pub connect_timeout: Duration,
    /// How long an admin command may take (default 10 s).
    pub admin_timeout: Duration,
    /// Receive fault injection on the host's RDMA device (tests, `nvmf-bench
    /// --inject-*`; see `transport::soft::fault`). Default none.
    pub faults: Option<transport::soft::FaultConfig>,
    /// How the soft provider's device moves its packets (UDP sockets, the default, or
    /// AF_XDP: `nvmf-bench --packet-path af-xdp`; see `transport::soft::xdp`).
    pub packet_path: transport::soft::xdp::PacketPath,
}

impl HostOptions {
    /// Defaults for `traddr` and `subnqn`: a fresh random host ID and its NQN, one I/O
    /// queue of depth 128, KATO 10 s, 1 MiB per command.
    pub fn new(traddr: SocketAddr, subnqn: impl Into<String>) -> Self {
        let hostid: [u8; 16] = uuid_v4();
        HostOptions {
            traddr,
            local_ip: None,
            subnqn: subnqn.into(),
            hostnqn: format!("nqn.2014-08.org.nvmexpress:uuid:{}", format_uuid(&hostid)),
            hostid,
            io_queues: 1,
            queue_depth: 128,
            kato_ms: 10_000,
            max_io_bytes: 1 << 20,
            connect_timeout: Duration::from_secs(5),
            admin_timeout: Duration::from_secs(10),
            faults: None,
            packet_path: transport::soft::xdp::PacketPath::Udp,
        }
    }

    /// `local_ip`, or the source address the kernel picks toward `traddr` (a UDP
    /// socket connected there reports it; nothing is sent).
    pub fn resolve_local_ip(&self) -> Result<IpAddr, HostError> {
        if let Some(ip) = self.local_ip {
            return Ok(ip);
        }
        let bind: SocketAddr = if self.traddr.is_ipv4() {
            "0.0.0.0:0"
        } else {
            "[::]:0"
        }
        .parse()
        .map_err(|e| HostError::Device(format!("{e}")))?;
        let s = UdpSocket::bind(bind).map_err(|e| HostError::Device(format!("UDP socket: {e}")))?;
        s.connect(self.traddr)
            .map_err(|e| HostError::Device(format!("no route to {}: {e}", self.traddr)))?;
        Ok(s.local_addr()
            .map_err(|e| HostError::Device(e.to_string()))?
            .ip())
    }
}

/// A random (version 4, RFC 9562 §5.4) UUID.
pub fn uuid_v4() -> [u8; 16] {
    let mut u: [u8; 16] = rand::random();
    u[6] = (u[6] & 0x0F) | 0x40;
    u[8] = (u[8] & 0x3F) | 0x80;
    u
}

/// The 8-4-4-4-12 lower-case hex form of a UUID.
pub fn format_uuid(u: &[u8; 16]) -> String {
    let h: String = u.iter().map(|b| format!("{b:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &h[..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..]
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults() {
        let o = HostOptions::new("127.0.0.2:4420".parse().unwrap(), "nqn.x");
        assert!(o.hostnqn.starts_with("nqn.2014-08.org.nvmexpress:uuid:"));
        assert_eq!(
            o.hostnqn.len(),
            "nqn.2014-08.org.nvmexpress:uuid:".len() + 36
        );
        assert_eq!(o.hostid[6] >> 4, 4);
        assert_eq!(
            (o.io_queues, o.queue_depth, o.kato_ms, o.max_io_bytes),
            (1, 128, 10_000, 1 << 20)
        );
        assert_eq!(format_uuid(&[0xcf; 16]).len(), 36);
        // Toward a loopback address the kernel answers with a loopback source.
        assert!(o.resolve_local_ip().unwrap().is_loopback());
    }
}
