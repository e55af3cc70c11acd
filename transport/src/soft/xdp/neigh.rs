//! Link-layer addresses for the frames an AF_XDP socket sends: this interface's MAC
//! (`SIOCGIFHWADDR`) and the peer's from the kernel's neighbour table
//! (`/proc/thread-self/net/arp`, the calling thread's network namespace), asking the
//! kernel to resolve it (a datagram to the peer's discard port) when it is missing.
//! The peer must be on the interface's link (no gateway).
use std::net::{IpAddr, Ipv4Addr, SocketAddr, UdpSocket};
use std::time::{Duration, Instant};

use super::frame::MacAddr;

/// How long [`peer_mac`] waits for the kernel to resolve a neighbour.
pub const RESOLVE_TIMEOUT: Duration = Duration::from_secs(2);
/// `ATF_COM`: the ARP entry is complete.
const ATF_COM: u32 = 0x02;

/// Why a link-layer address is unknown.
#[derive(Debug, thiserror::Error)]
pub enum NeighError {
    #[error("AF_XDP: no interface {0:?} in this network namespace (list them: `ip link`)")]
    NoInterface(String),
    #[error("AF_XDP: reading the MAC address of {iface}: {source}")]
    LocalMac {
        iface: String,
        source: std::io::Error,
    },
    #[error(
        "AF_XDP: no neighbour entry for {peer} on {iface} after {timeout:?}: is {peer} up and \
         on {iface}'s link (`ping -I {iface} {peer}`)? Or add one: `ip neigh replace {peer} \
         lladdr MAC dev {iface}`"
    )]
    Unresolved {
        peer: IpAddr,
        iface: String,
        timeout: Duration,
    },
    #[error(
        "AF_XDP: IPv6 neighbours ({0}) are not resolved yet; use IPv4 addresses or the UDP \
         packet path"
    )]
    Ipv6Unsupported(IpAddr),
}

/// The interface index of `iface` in this thread's network namespace.
///
/// # Errors
/// [`NeighError::NoInterface`].
pub fn ifindex(iface: &str) -> Result<u32, NeighError> {
    nix::net::if_::if_nametoindex(iface).map_err(|_| NeighError::NoInterface(iface.to_owned()))
}

/// The MAC address of `iface` (`SIOCGIFHWADDR`).
///
/// # Errors
/// [`NeighError::LocalMac`], [`NeighError::NoInterface`].
pub fn local_mac(iface: &str) -> Result<MacAddr, NeighError> {
    let err = |source| NeighError::LocalMac {
        iface: iface.to_owned(),
        source,
    };
    if iface.len() >= libc::IFNAMSIZ {
        return Err(NeighError::NoInterface(iface.to_owned()));
    }
    let s = UdpSocket::bind("0.0.0.0:0").map_err(err)?;
    // SAFETY: zeroed plain data.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    for (d, &b) in req.ifr_name.iter_mut().zip(iface.as_bytes()) {
        *d = b as libc::c_char;
    }
    // SAFETY: a valid ifreq for SIOCGIFHWADDR on an open socket.
    if unsafe {
        libc::ioctl(
            std::os::fd::AsRawFd::as_raw_fd(&s),
            libc::SIOCGIFHWADDR,
            &mut req,
        )
    } < 0
    {
        let e = std::io::Error::last_os_error();
        return Err(if e.raw_os_error() == Some(libc::ENODEV) {
            NeighError::NoInterface(iface.to_owned())
        } else {
            err(e)
        });
    }
    // SAFETY: SIOCGIFHWADDR filled the hwaddr member.
    let sa = unsafe { req.ifr_ifru.ifru_hwaddr };
    let mut mac = [0u8; 6];
    for (d, &b) in mac.iter_mut().zip(sa.sa_data.iter()) {
        *d = b as u8;
    }
    Ok(mac)
}

/// The MAC of `peer` in an `/proc/net/arp` table, if its entry on `iface` is complete.
pub fn arp_lookup(table: &str, peer: Ipv4Addr, iface: &str) -> Option<MacAddr> {
    table.lines().skip(1).find_map(|line| {
        let f: Vec<&str> = line.split_whitespace().collect();
        let [ip, _hw_type, flags, mac, _mask, dev] = f[..] else {
            return None;
        };
        let flags = u32::from_str_radix(flags.trim_start_matches("0x"), 16).ok()?;
        if ip.parse::<Ipv4Addr>().ok()? != peer || dev != iface || flags & ATF_COM == 0 {
            return None;
        }
        parse_mac(mac)
    })
}

/// `aa:bb:cc:dd:ee:ff`.
pub fn parse_mac(s: &str) -> Option<MacAddr> {
    let mut mac = [0u8; 6];
    let mut parts = s.split(':');
    for b in &mut mac {
        *b = u8::from_str_radix(parts.next()?, 16).ok()?;
    }
    parts.next().is_none().then_some(mac)
}

/// The MAC of `peer` on `iface`, from the neighbour table; when it is missing, sends
/// one datagram to `peer`'s discard port (9) so that the kernel resolves it, and waits
/// up to [`RESOLVE_TIMEOUT`].
///
/// # Errors
/// [`NeighError::Unresolved`] (with the fix), [`NeighError::Ipv6Unsupported`].
pub fn peer_mac(peer: IpAddr, iface: &str) -> Result<MacAddr, NeighError> {
    let IpAddr::V4(v4) = peer else {
        return Err(NeighError::Ipv6Unsupported(peer));
    };
    let read = || std::fs::read_to_string("/proc/thread-self/net/arp").unwrap_or_default();
    if let Some(mac) = arp_lookup(&read(), v4, iface) {
        return Ok(mac);
    }
    let start = Instant::now();
    let mut poke = Instant::now() - RESOLVE_TIMEOUT;
    while start.elapsed() < RESOLVE_TIMEOUT {
        if poke.elapsed() > Duration::from_millis(200) {
            if let Ok(s) = UdpSocket::bind("0.0.0.0:0") {
                let _ = s.send_to(b"arp", SocketAddr::new(peer, 9));
            }
            poke = Instant::now();
        }
        std::thread::sleep(Duration::from_millis(5));
        if let Some(mac) = arp_lookup(&read(), v4, iface) {
            return Ok(mac);
        }
    }
    Err(NeighError::Unresolved {
        peer,
        iface: iface.to_owned(),
        timeout: RESOLVE_TIMEOUT,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const TABLE: &str =
        "IP address       HW type     Flags       HW address            Mask     Device
10.47.0.2        0x1         0x2         02:00:00:00:00:0b     *        xdpa
10.47.0.3        0x1         0x0         00:00:00:00:00:00     *        xdpa
10.47.0.4        0x1         0x2         02:00:00:00:00:0c     *        other
garbage line
";

    #[test]
    fn complete_entries_on_the_interface_only() {
        let ip = |d| Ipv4Addr::new(10, 47, 0, d);
        assert_eq!(arp_lookup(TABLE, ip(2), "xdpa"), Some([2, 0, 0, 0, 0, 0xb]));
        assert_eq!(arp_lookup(TABLE, ip(3), "xdpa"), None, "incomplete");
        assert_eq!(arp_lookup(TABLE, ip(4), "xdpa"), None, "another interface");
        assert_eq!(arp_lookup("", ip(2), "xdpa"), None);
    }

    #[test]
    fn macs_parse_strictly() {
        assert_eq!(parse_mac("02:00:00:00:00:0b"), Some([2, 0, 0, 0, 0, 0xb]));
        assert_eq!(parse_mac("02:00:00:00:00"), None);
        assert_eq!(parse_mac("02:00:00:00:00:0b:01"), None);
        assert_eq!(parse_mac("zz:00:00:00:00:0b"), None);
    }

    #[test]
    fn loopback_has_a_mac_and_unknown_interfaces_are_named() {
        assert_eq!(local_mac("lo").unwrap(), [0; 6]);
        let e = local_mac("no-such-if0").unwrap_err();
        assert!(e.to_string().contains("no-such-if0"), "{e}");
        assert!(matches!(
            ifindex("no-such-if0"),
            Err(NeighError::NoInterface(_))
        ));
    }
}
