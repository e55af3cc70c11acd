//! This host's network interfaces as the soft provider sees them: names, addresses
//! with prefix lengths, MTU, operational state and speed (getifaddrs(3) and
//! `/sys/class/net/<if>/{mtu,operstate,speed}`).
use std::net::IpAddr;
use std::path::Path;

use serde::Serialize;

/// One address of an interface.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct IfAddr {
    /// The address.
    pub ip: IpAddr,
    /// Prefix length of its netmask.
    pub prefix_len: u8,
}

/// One interface.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct NetIf {
    /// The name (`eth0`).
    pub name: String,
    /// The interface index (if_nametoindex(3)); 0 when unknown.
    pub index: u32,
    /// `IFF_UP` and `IFF_RUNNING` (administratively up, carrier present).
    pub up: bool,
    /// Its MTU in bytes (`/sys/class/net/<if>/mtu`).
    pub mtu: Option<u32>,
    /// `/sys/class/net/<if>/operstate` (`up`, `down`, `unknown` for loopback).
    pub operstate: Option<String>,
    /// Link speed in Mbit/s (`/sys/class/net/<if>/speed`; absent for virtual links).
    pub speed_mbps: Option<u32>,
    /// Its IPv4 and IPv6 addresses, in the order the kernel lists them.
    pub addrs: Vec<IfAddr>,
}

fn read_trim(p: &Path) -> Option<String> {
    Some(std::fs::read_to_string(p).ok()?.trim().to_string())
}

fn prefix_len(mask: Option<IpAddr>) -> u8 {
    match mask {
        Some(IpAddr::V4(m)) => u32::from(m).count_ones() as u8,
        Some(IpAddr::V6(m)) => u128::from(m).count_ones() as u8,
        None => 0,
    }
}

fn ip_of(a: &nix::sys::socket::SockaddrStorage) -> Option<IpAddr> {
    if let Some(s) = a.as_sockaddr_in() {
        return Some(IpAddr::V4(s.ip()));
    }
    a.as_sockaddr_in6().map(|s| IpAddr::V6(s.ip()))
}

/// The interfaces of this host (of this network namespace), in interface-index order,
/// each with its addresses; `net_root` is normally `/sys/class/net`.
///
/// # Errors
/// getifaddrs(3)'s.
pub fn interfaces(net_root: &Path) -> std::io::Result<Vec<NetIf>> {
    use nix::net::if_::InterfaceFlags;
    let mut out: Vec<NetIf> = Vec::new();
    for ifa in nix::ifaddrs::getifaddrs().map_err(std::io::Error::from)? {
        let name = ifa.interface_name.clone();
        let pos = match out.iter().position(|i| i.name == name) {
            Some(p) => p,
            None => {
                let dir = net_root.join(&name);
                out.push(NetIf {
                    index: nix::net::if_::if_nametoindex(name.as_str()).unwrap_or(0),
                    up: ifa.flags.contains(InterfaceFlags::IFF_UP)
                        && ifa.flags.contains(InterfaceFlags::IFF_RUNNING),
                    mtu: read_trim(&dir.join("mtu")).and_then(|s| s.parse().ok()),
                    operstate: read_trim(&dir.join("operstate")),
                    // Virtual links answer EINVAL, or -1 when down.
                    speed_mbps: read_trim(&dir.join("speed")).and_then(|s| s.parse().ok()),
                    addrs: Vec::new(),
                    name,
                });
                out.len() - 1
            }
        };
        let Some(ip) = ifa.address.as_ref().and_then(ip_of) else {
            continue;
        };
        let mask = ifa.netmask.as_ref().and_then(ip_of);
        out[pos].addrs.push(IfAddr {
            ip,
            prefix_len: prefix_len(mask),
        });
    }
    out.sort_by_key(|i| i.index);
    Ok(out)
}

/// The interface that holds `ip`, and the address entry: 127.0.0.0/8 is all on `lo`
/// (Linux answers for the whole prefix though only 127.0.0.1 is listed). IPv4-mapped
/// IPv6 addresses are taken as their IPv4 address.
pub fn holder(ifs: &[NetIf], ip: IpAddr) -> Option<(&NetIf, IfAddr)> {
    let ip = ip.to_canonical();
    for i in ifs {
        if let Some(a) = i.addrs.iter().find(|a| a.ip == ip) {
            return Some((i, a.clone()));
        }
    }
    if ip.is_loopback() {
        let lo = ifs.iter().find(|i| i.name == "lo")?;
        let prefix_len = if ip.is_ipv4() { 8 } else { 128 };
        return Some((lo, IfAddr { ip, prefix_len }));
    }
    None
}

/// Whether `a` and `b` are in the same subnet of `prefix_len` bits.
pub fn same_subnet(a: IpAddr, b: IpAddr, prefix_len: u8) -> bool {
    match (a, b) {
        (IpAddr::V4(a), IpAddr::V4(b)) => {
            let m = u32::MAX
                .checked_shl(32 - u32::from(prefix_len.min(32)))
                .unwrap_or(0);
            u32::from(a) & m == u32::from(b) & m
        }
        (IpAddr::V6(a), IpAddr::V6(b)) => {
            let m = u128::MAX
                .checked_shl(128 - u32::from(prefix_len.min(128)))
                .unwrap_or(0);
            u128::from(a) & m == u128::from(b) & m
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_is_listed_and_holds_the_whole_prefix() {
        let ifs = interfaces(Path::new("/sys/class/net")).unwrap();
        let lo = ifs.iter().find(|i| i.name == "lo").expect("lo");
        assert_eq!(lo.mtu, Some(65536));
        let (i, a) = holder(&ifs, "127.0.0.2".parse().unwrap()).unwrap();
        assert_eq!((i.name.as_str(), a.prefix_len), ("lo", 8));
        assert!(holder(&ifs, "192.0.2.77".parse().unwrap()).is_none());
        assert!(same_subnet(
            "10.1.2.3".parse().unwrap(),
            "10.1.2.200".parse().unwrap(),
            24
        ));
        assert!(!same_subnet(
            "10.1.2.3".parse().unwrap(),
            "10.1.3.3".parse().unwrap(),
            24
        ));
    }
}
