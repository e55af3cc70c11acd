//! A device's attributes, its ports and their hardware counters as sysfs shows them.
//!
//! Under `/sys/class/infiniband/<dev>/` (Linux `drivers/infiniband/core/sysfs.c`):
//! - device files `node_type` (`1: CA`), `node_guid` and `sys_image_guid` (four groups
//!   of four hex digits), `fw_ver`, `hw_rev`, `board_id`, and for Soft-RoCE `parent`
//!   (the netdev rxe is bound to);
//! - per port `ports/<n>/`: `state` (`4: ACTIVE`), `phys_state` (`5: LinkUp`), `rate`
//!   (`100 Gb/sec (4X EDR)`), `link_layer` (`Ethernet`, `InfiniBand`), `lid`, `sm_lid`,
//!   `lid_mask_count`, `cap_mask`, the GID table ([`super::gid`]) and `hw_counters/`
//!   (one file per counter, a decimal count; `lifespan` is the counters' refresh period
//!   in ms, not a counter).
//!
//! sysfs has no active MTU: for RoCE the kernel derives it from the netdev's MTU
//! (`ib_get_eth_mtu`-style, [`crate::verbs::Mtu::from_netdev_mtu`]), so
//! [`SysfsPort::active_mtu`] is derived the same way from the port's netdev under
//! `/sys/class/net`. Files that do not read are `None`, never an error: drivers differ
//! in what they show.
use std::net::IpAddr;
use std::path::Path;

use super::gid::{read_gid_table, GidEntry};
use crate::verbs::Mtu;

/// Where Linux lists network interfaces (`<if>/mtu`, `<if>/operstate`, `<if>/speed`).
pub const SYSFS_NET: &str = "/sys/class/net";

/// The counters rxe keeps per port (`drivers/infiniband/sw/rxe/rxe_hw_counters.c`),
/// in its order: the names `rdma-info` shows for every provider.
pub const RXE_HW_COUNTERS: [&str; 15] = [
    "sent_pkts",
    "rcvd_pkts",
    "duplicate_request",
    "out_of_seq_request",
    "rcvd_rnr_err",
    "send_rnr_err",
    "rcvd_seg_drop",
    "ack_deferred",
    "retry_exceeded_err",
    "retry_rnr_exceeded_err",
    "completer_retry_err",
    "send_err",
    "link_downed",
    "rdma_sends",
    "rdma_recvs",
];

/// The ECN and congestion-notification counters RoCE NICs keep (mlx5's names, its
/// `hw_counters`): CE-marked RoCE packets received (notification point), CNPs sent,
/// CNPs acted on and ignored (reaction point).
pub const ECN_CNP_COUNTERS: [&str; 4] = [
    "np_ecn_marked_roce_packets",
    "np_cnp_sent",
    "rp_cnp_handled",
    "rp_cnp_ignored",
];

/// A sysfs `N: NAME` state value (`state`, `phys_state`, `node_type`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CodedValue {
    /// The number before the colon.
    pub code: u32,
    /// The kernel's name after it (`ACTIVE`, `LinkUp`, `CA`).
    pub name: String,
}

impl CodedValue {
    /// Parses `4: ACTIVE`; `None` when there is no `N:` prefix.
    pub fn parse(s: &str) -> Option<CodedValue> {
        let (code, name) = s.trim().split_once(':')?;
        Some(CodedValue {
            code: code.trim().parse().ok()?,
            name: name.trim().to_string(),
        })
    }
}

/// The ibverbs name of a port state code (`enum ibv_port_state`), as `ibv_devinfo`
/// prints it.
pub fn port_state_name(code: u32) -> &'static str {
    match code {
        0 => "PORT_NOP",
        1 => "PORT_DOWN",
        2 => "PORT_INIT",
        3 => "PORT_ARMED",
        4 => "PORT_ACTIVE",
        5 => "PORT_ACTIVE_DEFER",
        _ => "PORT_UNKNOWN",
    }
}

/// The name `ibv_devinfo` prints for a physical port state code (IBTA Vol 1
/// 14.2.5.6, PortPhysicalState).
pub fn phys_state_name(code: u32) -> &'static str {
    match code {
        1 => "SLEEP",
        2 => "POLLING",
        3 => "DISABLED",
        4 => "PORT_CONFIGURATION_TRAINING",
        5 => "LINK_UP",
        6 => "LINK_ERROR_RECOVERY",
        7 => "PHY_TEST",
        _ => "invalid physical state",
    }
}

/// A port's `rate` file: `100 Gb/sec (4X EDR)`, `10 Gb/sec (1X QDR)`.
#[derive(Clone, Debug, PartialEq)]
pub struct Rate {
    /// Gbit/s.
    pub gbps: f64,
    /// The width and speed in parentheses (`4X EDR`), if any.
    pub detail: Option<String>,
}

impl Rate {
    /// Parses the `rate` text; `None` when it does not start with `<number> Gb/sec`.
    pub fn parse(s: &str) -> Option<Rate> {
        let s = s.trim();
        let (num, rest) = s.split_once(' ')?;
        let rest = rest.trim_start().strip_prefix("Gb/sec")?.trim();
        let detail = rest
            .strip_prefix('(')
            .and_then(|r| r.strip_suffix(')'))
            .map(str::to_string);
        Some(Rate {
            gbps: num.parse().ok()?,
            detail,
        })
    }

    /// The link width (`4X`) of the detail, if given.
    pub fn width(&self) -> Option<&str> {
        self.detail.as_deref()?.split_whitespace().next()
    }
}

/// One hardware counter.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Counter {
    /// The file name (`sent_pkts`).
    pub name: String,
    /// Its value.
    pub value: u64,
}

/// One port of a device.
#[derive(Clone, Debug, PartialEq)]
pub struct SysfsPort {
    /// The port number (1-based).
    pub port: u8,
    /// `state`.
    pub state: Option<CodedValue>,
    /// `phys_state`.
    pub phys_state: Option<CodedValue>,
    /// `rate`.
    pub rate: Option<Rate>,
    /// `link_layer` (`Ethernet`, `InfiniBand`).
    pub link_layer: Option<String>,
    /// `lid`, `sm_lid` (hexadecimal in sysfs) and `lid_mask_count`.
    pub lid: Option<u32>,
    /// See [`SysfsPort::lid`].
    pub sm_lid: Option<u32>,
    /// See [`SysfsPort::lid`].
    pub lmc: Option<u32>,
    /// `cap_mask` (`port_cap_flags`).
    pub cap_mask: Option<u32>,
    /// The netdev of the port: the device's `parent` (rxe), else the netdev of its
    /// first GID entry.
    pub netdev: Option<String>,
    /// That netdev's MTU (`/sys/class/net/<if>/mtu`).
    pub netdev_mtu: Option<u32>,
    /// The used GID entries.
    pub gids: Vec<GidEntry>,
    /// `hw_counters/*` but `lifespan`, sorted by name; empty when absent.
    pub counters: Vec<Counter>,
}

impl SysfsPort {
    /// The active MTU derived from the netdev's MTU as the kernel does for RoCE; `None`
    /// without a readable netdev MTU.
    pub fn active_mtu(&self) -> Option<Mtu> {
        self.netdev_mtu.map(Mtu::from_netdev_mtu)
    }

    /// Whether the port is `ACTIVE` (state 4).
    pub fn is_active(&self) -> bool {
        self.state.as_ref().is_some_and(|s| s.code == 4)
    }

    /// The counter `name`, if the device keeps it.
    pub fn counter(&self, name: &str) -> Option<u64> {
        self.counters
            .iter()
            .find(|c| c.name == name)
            .map(|c| c.value)
    }
}

/// One RDMA device.
#[derive(Clone, Debug, PartialEq)]
pub struct SysfsDevice {
    /// The name (`rxe0`, `mlx5_0`): `hca_id` in `ibv_devinfo`.
    pub name: String,
    /// `node_type` (`1: CA`).
    pub node_type: Option<CodedValue>,
    /// `fw_ver`.
    pub fw_ver: Option<String>,
    /// `node_guid` as sysfs prints it (`5054:00ff:fe77:000a`).
    pub node_guid: Option<String>,
    /// `sys_image_guid`.
    pub sys_image_guid: Option<String>,
    /// `hw_rev`.
    pub hw_rev: Option<String>,
    /// `board_id`.
    pub board_id: Option<String>,
    /// The ports, ascending.
    pub ports: Vec<SysfsPort>,
}

fn read_trim(p: &Path) -> Option<String> {
    let s = std::fs::read_to_string(p).ok()?;
    let s = s.trim();
    (!s.is_empty()).then(|| s.to_string())
}

fn parse_num(s: &str) -> Option<u32> {
    match s.strip_prefix("0x") {
        Some(h) => u32::from_str_radix(h, 16).ok(),
        None => s.parse().ok(),
    }
}

/// The counters in `dir` (a `hw_counters` directory), sorted by name: every file but
/// `lifespan` whose content is a decimal number. Empty when `dir` is absent.
pub fn read_counters(dir: &Path) -> Vec<Counter> {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut v: Vec<Counter> = rd
        .filter_map(|e| {
            let e = e.ok()?;
            let name = e.file_name().into_string().ok()?;
            if name == "lifespan" {
                return None;
            }
            let value = read_trim(&e.path())?.parse().ok()?;
            Some(Counter { name, value })
        })
        .collect();
    v.sort_by(|a, b| a.name.cmp(&b.name));
    v
}

/// Reads `device` under `root` (normally [`super::gid::SYSFS_INFINIBAND`]), its
/// netdevs' MTUs under `net_root` (normally [`SYSFS_NET`]). Unreadable files are
/// `None`; a port whose GID table does not list reads with an empty table.
pub fn read_device(root: &Path, net_root: &Path, device: &str) -> SysfsDevice {
    let d = root.join(device);
    let f = |name: &str| read_trim(&d.join(name));
    let parent = f("parent");
    let ports = super::gid::list_ports(root, device)
        .into_iter()
        .map(|port| {
            let p = d.join("ports").join(port.to_string());
            let pf = |name: &str| read_trim(&p.join(name));
            let gids = read_gid_table(root, device, port).unwrap_or_default();
            let netdev = parent
                .clone()
                .or_else(|| gids.iter().find_map(|g| g.ndev.clone()));
            let netdev_mtu = netdev
                .as_ref()
                .and_then(|n| read_trim(&net_root.join(n).join("mtu")))
                .and_then(|m| m.parse().ok());
            SysfsPort {
                port,
                state: pf("state").and_then(|s| CodedValue::parse(&s)),
                phys_state: pf("phys_state").and_then(|s| CodedValue::parse(&s)),
                rate: pf("rate").and_then(|s| Rate::parse(&s)),
                link_layer: pf("link_layer"),
                lid: pf("lid").and_then(|s| parse_num(&s)),
                sm_lid: pf("sm_lid").and_then(|s| parse_num(&s)),
                lmc: pf("lid_mask_count").and_then(|s| parse_num(&s)),
                cap_mask: pf("cap_mask").and_then(|s| parse_num(&s)),
                netdev,
                netdev_mtu,
                gids,
                counters: read_counters(&p.join("hw_counters")),
            }
        })
        .collect();
    SysfsDevice {
        name: device.to_string(),
        node_type: f("node_type").and_then(|s| CodedValue::parse(&s)),
        fw_ver: f("fw_ver"),
        node_guid: f("node_guid"),
        sys_image_guid: f("sys_image_guid"),
        hw_rev: f("hw_rev"),
        board_id: f("board_id"),
        ports,
    }
}

/// Every device under `root`, sorted by name (see [`read_device`]).
pub fn read_devices(root: &Path, net_root: &Path) -> Vec<SysfsDevice> {
    super::gid::list_devices(root)
        .iter()
        .map(|d| read_device(root, net_root, d))
        .collect()
}

/// The IP address of a GID entry, for tables that show IPv4 beside the GID
/// (`show_gids`' IPv4 column): `Some` for IPv4-mapped GIDs only.
pub fn ipv4_of(entry: &GidEntry) -> Option<std::net::Ipv4Addr> {
    match entry.ip() {
        IpAddr::V4(v4) => Some(v4),
        IpAddr::V6(_) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    fn write(p: &Path, s: &str) {
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        fs::write(p, format!("{s}\n")).unwrap();
    }

    #[test]
    fn parses_coded_values_and_rates() {
        let s = CodedValue::parse("4: ACTIVE\n").unwrap();
        assert_eq!((s.code, s.name.as_str()), (4, "ACTIVE"));
        assert_eq!(CodedValue::parse("ACTIVE"), None);
        assert_eq!(port_state_name(4), "PORT_ACTIVE");
        assert_eq!(phys_state_name(5), "LINK_UP");
        let r = Rate::parse("100 Gb/sec (4X EDR)").unwrap();
        assert_eq!((r.gbps, r.width()), (100.0, Some("4X")));
        let r = Rate::parse("2.5 Gb/sec (1X SDR)").unwrap();
        assert_eq!(r.gbps, 2.5);
        assert_eq!(Rate::parse("fast"), None);
    }

    #[test]
    fn reads_a_constructed_rxe_tree() {
        let t = tempfile::tempdir().unwrap();
        let ib = t.path().join("infiniband");
        let net = t.path().join("net");
        let d = ib.join("rxe0");
        write(&d.join("node_type"), "1: CA");
        write(&d.join("node_guid"), "5054:00ff:fe77:000a");
        write(&d.join("fw_ver"), "0.0.0");
        write(&d.join("parent"), "eth0");
        let p = d.join("ports/1");
        write(&p.join("state"), "4: ACTIVE");
        write(&p.join("phys_state"), "5: LinkUp");
        write(&p.join("rate"), "10 Gb/sec (1X QDR)");
        write(&p.join("link_layer"), "Ethernet");
        write(&p.join("lid"), "0x0");
        write(&p.join("gids/0"), "0000:0000:0000:0000:0000:ffff:c0a8:4d0a");
        write(&p.join("gid_attrs/types/0"), "RoCE v2");
        write(&p.join("gid_attrs/ndevs/0"), "eth0");
        write(&p.join("hw_counters/sent_pkts"), "12");
        write(&p.join("hw_counters/rcvd_pkts"), "7");
        write(&p.join("hw_counters/lifespan"), "10");
        write(&net.join("eth0/mtu"), "1500");
        let devs = read_devices(&ib, &net);
        assert_eq!(devs.len(), 1);
        let dev = &devs[0];
        assert_eq!(dev.node_type.as_ref().unwrap().name, "CA");
        assert_eq!(dev.board_id, None);
        let port = &dev.ports[0];
        assert!(port.is_active());
        assert_eq!(port.active_mtu(), Some(Mtu::Mtu1024));
        assert_eq!(port.lid, Some(0));
        assert_eq!(port.counter("sent_pkts"), Some(12));
        assert_eq!(port.counter("lifespan"), None);
        let names: Vec<&str> = port.counters.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["rcvd_pkts", "sent_pkts"]);
        assert_eq!(
            ipv4_of(&port.gids[0]),
            Some("192.168.77.10".parse().unwrap())
        );
    }
}
