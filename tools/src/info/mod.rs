//! `rdma-info`'s model: devices, ports and GID tables of both providers in one shape,
//! serialized as its JSON (`-o json`) and printed as `ibv_devinfo` and `show_gids` do
//! ([`text`]).
//!
//! - The verbs provider's devices are what sysfs lists ([`transport::sysfs`]): one per
//!   RDMA device, its ports, their GID tables and `hw_counters`.
//! - The soft provider has no kernel device: its "device" (named [`SOFT_DEVICE`]) is
//!   this host's set of interfaces it can bind to, one port per interface (in index
//!   order), whose GID table holds the interface's addresses as RoCEv2 derives GIDs
//!   from them (IBTA RoCEv2 Annex A17.8: `::ffff:a.b.c.d` for IPv4, the address itself
//!   for IPv6), each of type RoCE v2, numbered from 0 per port. The active MTU is what
//!   the soft provider derives from the interface MTU
//!   ([`transport::verbs::Mtu::from_netdev_mtu`]). Its counters and QPs live in the
//!   processes that opened a soft device (nvmf-target, nvmf-bench, rdma-perf): each
//!   answers on its info socket, and [`live`] reads them into [`Snapshot::soft_live`].
use std::net::{IpAddr, Ipv6Addr};
use std::path::Path;

use serde::{Deserialize, Serialize};
use transport::sysfs::gid::{GidEntry, GidType};
use transport::sysfs::port::{self, SysfsDevice, SysfsPort};
use transport::verbs::Mtu;

use crate::netif::NetIf;

pub mod live;
pub mod text;

/// The name `rdma-info` gives the soft provider's device.
pub const SOFT_DEVICE: &str = "soft";

/// Which provider a device belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Provider {
    /// The userspace RoCEv2 provider over UDP sockets.
    Soft,
    /// A kernel RDMA device (RNIC or Soft-RoCE) as sysfs shows it.
    Verbs,
}

/// One GID table entry.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Gid {
    /// The index in the port's table (`sgid_index`, perftest's `-x`).
    pub index: u32,
    /// The GID as an IPv6 address (`::ffff:192.168.1.2`).
    pub gid: Ipv6Addr,
    /// The GID as sysfs and `show_gids` print it (eight groups of four hex digits).
    pub gid_raw: String,
    /// `RoCE v2`, `IB/RoCE v1`, or `None` when the type does not read.
    pub gid_type: Option<String>,
    /// `show_gids`' VER column: `v1`, `v2`.
    pub version: Option<String>,
    /// The IPv4 address of an IPv4-mapped GID.
    pub ipv4: Option<std::net::Ipv4Addr>,
    /// The netdev of the entry.
    pub netdev: Option<String>,
}

/// A hardware counter.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Counter {
    /// The counter's name (rxe's and mlx5's names).
    pub name: String,
    /// Its value.
    pub value: u64,
}

/// One port.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Port {
    /// The port number (1-based).
    pub port: u8,
    /// `enum ibv_port_state` value (4: active) and its ibverbs name.
    pub state_code: u32,
    /// See [`Port::state_code`].
    pub state: String,
    /// Physical state code (5: link up) and name, when known.
    pub phys_state_code: Option<u32>,
    /// See [`Port::phys_state_code`].
    pub phys_state: Option<String>,
    /// The largest MTU (4096 for RoCE).
    pub max_mtu: u32,
    /// The active MTU in bytes, derived from the netdev's MTU.
    pub active_mtu: Option<u32>,
    /// `link_layer`.
    pub link_layer: String,
    /// The netdev and its MTU.
    pub netdev: Option<String>,
    /// See [`Port::netdev`].
    pub netdev_mtu: Option<u32>,
    /// The rate in Gbit/s and the text it came from (`100 Gb/sec (4X EDR)`).
    pub rate_gbps: Option<f64>,
    /// See [`Port::rate_gbps`].
    pub rate: Option<String>,
    /// LIDs (0 on RoCE).
    pub lid: u32,
    /// See [`Port::lid`].
    pub sm_lid: u32,
    /// See [`Port::lid`].
    pub lmc: u32,
    /// The used GID entries.
    pub gids: Vec<Gid>,
    /// The counters (`hw_counters`), `None` when not visible from this process.
    pub counters: Option<Vec<Counter>>,
}

/// One device.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Device {
    /// `hca_id`.
    pub name: String,
    /// Its provider.
    pub provider: Provider,
    /// `node_type` (`CA`), `fw_ver`, GUIDs, `hw_ver`, `board_id` where known.
    pub node_type: Option<String>,
    /// See [`Device::node_type`].
    pub fw_ver: Option<String>,
    /// See [`Device::node_type`].
    pub node_guid: Option<String>,
    /// See [`Device::node_type`].
    pub sys_image_guid: Option<String>,
    /// See [`Device::node_type`].
    pub hw_ver: Option<String>,
    /// See [`Device::node_type`].
    pub board_id: Option<String>,
    /// The ports.
    pub ports: Vec<Port>,
}

/// Everything `rdma-info` shows: the devices, and when it was read.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Snapshot {
    /// Milliseconds since the Unix epoch.
    pub time_ms: u64,
    /// The devices, soft first.
    pub devices: Vec<Device>,
    /// The soft devices other processes hold open, with their counters and QPs
    /// (empty when the soft provider is not selected, or none answers).
    pub soft_live: Vec<live::SoftLive>,
}

/// `show_gids`' VER column for a type.
fn version_of(t: GidType) -> &'static str {
    match t {
        GidType::IbRoceV1 => "v1",
        GidType::RoceV2 => "v2",
    }
}

/// A GID in sysfs's text form: eight groups of four hex digits.
pub fn gid_raw(gid: Ipv6Addr) -> String {
    let s = gid.segments();
    s.iter()
        .map(|g| format!("{g:04x}"))
        .collect::<Vec<_>>()
        .join(":")
}

/// The RoCEv2 GID of an IP address: IPv4 as `::ffff:a.b.c.d`, IPv6 as itself.
pub fn gid_of(ip: IpAddr) -> Ipv6Addr {
    match ip {
        IpAddr::V4(v4) => v4.to_ipv6_mapped(),
        IpAddr::V6(v6) => v6,
    }
}

impl Gid {
    fn from_entry(e: &GidEntry) -> Gid {
        Gid {
            index: e.index,
            gid: e.gid,
            gid_raw: gid_raw(e.gid),
            gid_type: e.gid_type.map(|t| t.to_string()),
            version: e.gid_type.map(|t| version_of(t).to_string()),
            ipv4: port::ipv4_of(e),
            netdev: e.ndev.clone(),
        }
    }
}

fn port_from_sysfs(p: &SysfsPort) -> Port {
    let state_code = p.state.as_ref().map_or(0, |s| s.code);
    Port {
        port: p.port,
        state_code,
        state: port::port_state_name(state_code).to_string(),
        phys_state_code: p.phys_state.as_ref().map(|s| s.code),
        phys_state: p
            .phys_state
            .as_ref()
            .map(|s| port::phys_state_name(s.code).to_string()),
        max_mtu: Mtu::Mtu4096.bytes(),
        active_mtu: p.active_mtu().map(Mtu::bytes),
        link_layer: p.link_layer.clone().unwrap_or_else(|| "Unknown".into()),
        netdev: p.netdev.clone(),
        netdev_mtu: p.netdev_mtu,
        rate_gbps: p.rate.as_ref().map(|r| r.gbps),
        rate: p.rate.as_ref().map(|r| match &r.detail {
            Some(d) => format!("{} Gb/sec ({d})", r.gbps),
            None => format!("{} Gb/sec", r.gbps),
        }),
        lid: p.lid.unwrap_or(0),
        sm_lid: p.sm_lid.unwrap_or(0),
        lmc: p.lmc.unwrap_or(0),
        gids: p.gids.iter().map(Gid::from_entry).collect(),
        counters: Some(
            p.counters
                .iter()
                .map(|c| Counter {
                    name: c.name.clone(),
                    value: c.value,
                })
                .collect(),
        ),
    }
}

/// The `rdma-info` device of a sysfs device.
pub fn from_sysfs(d: &SysfsDevice) -> Device {
    Device {
        name: d.name.clone(),
        provider: Provider::Verbs,
        node_type: d.node_type.as_ref().map(|n| n.name.clone()),
        fw_ver: d.fw_ver.clone(),
        node_guid: d.node_guid.clone(),
        sys_image_guid: d.sys_image_guid.clone(),
        hw_ver: d.hw_rev.clone(),
        board_id: d.board_id.clone(),
        ports: d.ports.iter().map(port_from_sysfs).collect(),
    }
}

/// The soft provider's device over `ifs` (see the module docs). Interfaces with no
/// address are left out.
pub fn soft_device(ifs: &[NetIf]) -> Device {
    let ports = ifs
        .iter()
        .filter(|i| !i.addrs.is_empty())
        .enumerate()
        .map(|(n, i)| {
            let state_code = if i.up { 4 } else { 1 };
            Port {
                port: (n + 1).min(255) as u8,
                state_code,
                state: port::port_state_name(state_code).to_string(),
                phys_state_code: Some(if i.up { 5 } else { 3 }),
                phys_state: Some(port::phys_state_name(if i.up { 5 } else { 3 }).to_string()),
                max_mtu: Mtu::Mtu4096.bytes(),
                active_mtu: i.mtu.map(|m| Mtu::from_netdev_mtu(m).bytes()),
                link_layer: "Ethernet".into(),
                netdev: Some(i.name.clone()),
                netdev_mtu: i.mtu,
                rate_gbps: i.speed_mbps.map(|m| f64::from(m) / 1000.0),
                rate: i
                    .speed_mbps
                    .map(|m| format!("{} Gb/sec", f64::from(m) / 1000.0)),
                lid: 0,
                sm_lid: 0,
                lmc: 0,
                gids: i
                    .addrs
                    .iter()
                    .enumerate()
                    .map(|(idx, a)| {
                        let gid = gid_of(a.ip);
                        Gid {
                            index: idx as u32,
                            gid,
                            gid_raw: gid_raw(gid),
                            gid_type: Some(GidType::RoceV2.to_string()),
                            version: Some("v2".into()),
                            ipv4: match a.ip {
                                IpAddr::V4(v4) => Some(v4),
                                IpAddr::V6(_) => None,
                            },
                            netdev: Some(i.name.clone()),
                        }
                    })
                    .collect(),
                counters: None,
            }
        })
        .collect();
    Device {
        name: SOFT_DEVICE.into(),
        provider: Provider::Soft,
        node_type: Some("soft RoCEv2 (userspace, UDP 4791)".into()),
        fw_ver: Some(env!("CARGO_PKG_VERSION").into()),
        node_guid: None,
        sys_image_guid: None,
        hw_ver: None,
        board_id: None,
        ports,
    }
}

/// Which providers to read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Select {
    /// The soft provider's device.
    pub soft: bool,
    /// The sysfs devices.
    pub verbs: bool,
}

/// Reads every selected device: the soft one from this host's interfaces (`net_root`
/// is normally `/sys/class/net`) and its open instances from their info sockets in
/// `soft_dir` (normally [`transport::soft::info_socket::info_dir`]), the verbs ones
/// under `ib_root` (normally `/sys/class/infiniband`).
///
/// # Errors
/// getifaddrs(3)'s.
pub fn snapshot(
    sel: Select,
    ib_root: &Path,
    net_root: &Path,
    soft_dir: &Path,
) -> std::io::Result<Snapshot> {
    let mut devices = Vec::new();
    let mut soft_live = Vec::new();
    if sel.soft {
        devices.push(soft_device(&crate::netif::interfaces(net_root)?));
        soft_live = live::read_dir(soft_dir);
    }
    if sel.verbs {
        devices.extend(port::read_devices(ib_root, net_root).iter().map(from_sysfs));
    }
    let time_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    Ok(Snapshot {
        time_ms,
        devices,
        soft_live,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::netif::IfAddr;

    #[test]
    fn soft_gids_are_derived_as_roce_v2_does() {
        let ifs = [NetIf {
            name: "eth0".into(),
            index: 2,
            up: true,
            mtu: Some(1500),
            operstate: Some("up".into()),
            speed_mbps: Some(25_000),
            addrs: vec![
                IfAddr {
                    ip: "192.168.77.10".parse().unwrap(),
                    prefix_len: 24,
                },
                IfAddr {
                    ip: "fd77::10".parse().unwrap(),
                    prefix_len: 64,
                },
            ],
        }];
        let d = soft_device(&ifs);
        let p = &d.ports[0];
        assert_eq!((p.active_mtu, p.rate_gbps), (Some(1024), Some(25.0)));
        assert_eq!(p.gids[0].gid_raw, "0000:0000:0000:0000:0000:ffff:c0a8:4d0a");
        assert_eq!(
            p.gids[0].gid,
            "::ffff:192.168.77.10".parse::<Ipv6Addr>().unwrap()
        );
        assert_eq!(p.gids[0].ipv4, Some("192.168.77.10".parse().unwrap()));
        assert_eq!(p.gids[1].gid_raw, "fd77:0000:0000:0000:0000:0000:0000:0010");
        assert_eq!((p.gids[1].index, p.gids[1].ipv4), (1, None));
        assert_eq!(p.gids[1].version.as_deref(), Some("v2"));
    }
}
