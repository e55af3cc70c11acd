//! The receive socket buffer a device got, and the RC windows that fit in it.
//!
//! The soft provider asks for [`RX_SOCKET_BUFFER_BYTES`] per receive socket with
//! `SO_RCVBUFFORCE`, which needs `CAP_NET_ADMIN`; without it, `SO_RCVBUF` is capped at
//! `net.core.rmem_max` (212992 bytes on a stock kernel). Whatever the kernel granted is
//! read back (getsockopt reports twice the value set, the kernel's bookkeeping of
//! buffer overhead), and the RC windows of the device's QPs are sized from it so that
//! the traffic a QP invites stays within the buffer instead of overrunning it (every
//! overrun is a loss, repaired by retransmission):
//! - a datagram of a full 4 KiB-MTU packet is charged about twice its size on loopback
//!   (measured: 50 datagrams of 4154 bytes fill a buffer reported as 425984 bytes), so
//!   the buffer holds about half the reported value in payload;
//! - a poll group's socket receives the peer's requests (bounded by the peer's window,
//!   sized the same way on a peer of this project), the READ responses our READ budget
//!   asks for, and what no window bounds: a go-back-N resend (up to
//!   `RcConfig::recovery_window_pkts` packets) arriving while the window it repeats is
//!   still queued, ACKs and small responses. Each window therefore gets a quarter of
//!   the payload capacity ([`WINDOW_SHARE_DIVISOR`]); with half (measured), a 128 KiB
//!   QD16 read still overran the stock buffer by thousands of datagrams in 5 s.
//!
//! With the 32 MiB buffers root gets, the defaults (1 MiB window, 4 MiB of READ data)
//! are below these bounds and stay as they are. Several busy QPs of one poll group share
//! its socket and can still overrun a small one: raise `net.core.rmem_max` for those.
use std::sync::Once;

use socket2::Socket;

use super::socket::RX_SOCKET_BUFFER_BYTES;
use crate::memlock::Bytes;
use crate::rc::RcConfig;

/// Bytes of receive buffer the kernel granted `sock` (getsockopt `SO_RCVBUF`: the
/// kernel's doubled figure). 0 when it cannot be read.
pub fn granted_rx_buffer(sock: &Socket) -> usize {
    sock.recv_buffer_size().unwrap_or(0)
}

/// Payload bytes a receive buffer reported as `granted` holds (about half: see the
/// module docs).
pub fn payload_capacity(granted: usize) -> u64 {
    granted as u64 / 2
}

/// Each RC window gets 1/this of a receive buffer's payload capacity (see the module docs).
pub const WINDOW_SHARE_DIVISOR: u64 = 4;

/// `base` with its send window (`max_inflight_bytes`) and READ budget
/// (`max_read_inflight_bytes`) lowered, where needed, to 1/[`WINDOW_SHARE_DIVISOR`] of
/// the payload capacity of a receive buffer reported as `granted` each. `granted` 0
/// (unknown) leaves `base`.
pub fn rc_config_for(granted: usize, base: RcConfig) -> RcConfig {
    if granted == 0 {
        return base;
    }
    let share = payload_capacity(granted) / WINDOW_SHARE_DIVISOR;
    RcConfig {
        max_inflight_bytes: base.max_inflight_bytes.min(share),
        max_read_inflight_bytes: base.max_read_inflight_bytes.min(share),
        ..base
    }
}

/// `net.core.rmem_max` in bytes, if readable.
fn rmem_max() -> Option<u64> {
    std::fs::read_to_string("/proc/sys/net/core/rmem_max")
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// Logs, once per process, that a receive buffer was capped and what that does, with
/// how to raise it; silent when the buffer is the one asked for.
pub fn report_capped(granted: usize, cfg: &RcConfig) {
    // getsockopt reports twice what was set; anything less than the doubled request
    // was capped.
    if granted == 0 || granted >= 2 * RX_SOCKET_BUFFER_BYTES {
        return;
    }
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let cap = rmem_max().map_or_else(|| "?".to_string(), |b| b.to_string());
        tracing::warn!(
            "soft RoCE: receive socket buffers got {} of the {} asked for (SO_RCVBUFFORCE needs \
             CAP_NET_ADMIN; SO_RCVBUF is capped by net.core.rmem_max = {cap}), so each QP keeps at \
             most {} unacknowledged and {} of RDMA READ data in flight. For full speed: \
             `sysctl -w net.core.rmem_max={}` (as root), or run with CAP_NET_ADMIN",
            Bytes(granted as u64 / 2),
            Bytes(RX_SOCKET_BUFFER_BYTES as u64),
            Bytes(cfg.max_inflight_bytes),
            Bytes(cfg.max_read_inflight_bytes),
            RX_SOCKET_BUFFER_BYTES,
        );
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_fit_the_buffer_and_keep_defaults_when_large() {
        let d = RcConfig::default();
        // Stock rmem_max: SO_RCVBUF 212992 is reported as 425984.
        let c = rc_config_for(425_984, d);
        assert_eq!(c.max_inflight_bytes, 53_248);
        assert_eq!(c.max_read_inflight_bytes, 53_248);
        assert_eq!(c.min_rto, d.min_rto, "other fields untouched");
        // What both windows invite fills at most half the payload the buffer holds.
        let both = c.max_inflight_bytes + c.max_read_inflight_bytes;
        assert!(2 * both <= payload_capacity(425_984));
        // Root's 32 MiB (SO_RCVBUFFORCE, reported as 64 MiB): the defaults.
        assert_eq!(rc_config_for(64 << 20, d), d);
        // An rmem_max of 4 MiB: the window stays 1 MiB, READs get 1 MiB.
        let c = rc_config_for(8 << 20, d);
        assert_eq!(
            (c.max_inflight_bytes, c.max_read_inflight_bytes),
            (1 << 20, 1 << 20)
        );
        assert_eq!(rc_config_for(0, d), d, "unknown: unchanged");
    }

    /// A real socket reports what the kernel granted: twice the SO_RCVBUF set (64 KiB is
    /// below any rmem_max, the stock one included).
    #[test]
    fn granted_is_read_back_from_the_socket() {
        let s = Socket::new(socket2::Domain::IPV4, socket2::Type::DGRAM, None).unwrap();
        s.set_recv_buffer_size(65_536).unwrap();
        assert_eq!(granted_rx_buffer(&s), 131_072);
    }
}
