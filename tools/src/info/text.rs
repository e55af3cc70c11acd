//! `rdma-info`'s text: the device list in `ibv_devinfo`'s layout (`-v` adds the
//! verbose port fields and the GID lines, `GID[  1]:<tab><tab>::ffff:192.168.77.10, RoCE v2`
//! as rdma-core prints them), the GID table in Mellanox `show_gids`' tab-separated
//! columns, the counters, and the QPs of the open soft devices in `rdma res show qp`'s
//! layout (with their UDP source port).
use std::fmt::Write as _;

use transport::sysfs::port::{ECN_CNP_COUNTERS, RXE_HW_COUNTERS};
use transport::verbs::Mtu;

use super::live::SoftLive;
use super::{Device, Port, Snapshot};

fn mtu_text(bytes: Option<u32>) -> String {
    let m = bytes.and_then(|b| (1..=5).filter_map(Mtu::from_code).find(|m| m.bytes() == b));
    match m {
        Some(m) => format!("{} ({})", m.bytes(), m.code()),
        None => "unknown (0)".to_string(),
    }
}

/// The devices as `ibv_devinfo` (`verbose`: `ibv_devinfo -v`) prints them. Fields
/// sysfs does not show (vendor_id, the capability limits) are left out rather than
/// invented.
pub fn devinfo(snap: &Snapshot, verbose: bool) -> String {
    let mut o = String::new();
    for d in &snap.devices {
        device(&mut o, d, verbose);
        o.push('\n');
    }
    if snap.devices.is_empty() {
        o.push_str("No IB devices found\n");
    }
    o
}

fn device(o: &mut String, d: &Device, verbose: bool) {
    let _ = writeln!(o, "hca_id:\t{}", d.name);
    let _ = writeln!(o, "\ttransport:\t\t\tInfiniBand (0)");
    if let Some(v) = &d.fw_ver {
        let _ = writeln!(o, "\tfw_ver:\t\t\t\t{v}");
    }
    if let Some(v) = &d.node_guid {
        let _ = writeln!(o, "\tnode_guid:\t\t\t{v}");
    }
    if let Some(v) = &d.sys_image_guid {
        let _ = writeln!(o, "\tsys_image_guid:\t\t\t{v}");
    }
    if let Some(v) = &d.hw_ver {
        let _ = writeln!(o, "\thw_ver:\t\t\t\t{v}");
    }
    if let Some(v) = &d.board_id {
        let _ = writeln!(o, "\tboard_id:\t\t\t{v}");
    }
    if let Some(v) = &d.node_type {
        if verbose {
            let _ = writeln!(o, "\tnode_type:\t\t\t{v}");
        }
    }
    let _ = writeln!(o, "\tphys_port_cnt:\t\t\t{}", d.ports.len());
    for p in &d.ports {
        port(o, p, verbose);
    }
}

fn port(o: &mut String, p: &Port, verbose: bool) {
    let _ = writeln!(o, "\t\tport:\t{}", p.port);
    let _ = writeln!(o, "\t\t\tstate:\t\t\t{} ({})", p.state, p.state_code);
    let _ = writeln!(o, "\t\t\tmax_mtu:\t\t{}", mtu_text(Some(p.max_mtu)));
    let _ = writeln!(o, "\t\t\tactive_mtu:\t\t{}", mtu_text(p.active_mtu));
    let _ = writeln!(o, "\t\t\tsm_lid:\t\t\t{}", p.sm_lid);
    let _ = writeln!(o, "\t\t\tport_lid:\t\t{}", p.lid);
    let _ = writeln!(o, "\t\t\tport_lmc:\t\t{:#04x}", p.lmc);
    let _ = writeln!(o, "\t\t\tlink_layer:\t\t{}", p.link_layer);
    if !verbose {
        return;
    }
    if let Some(n) = &p.netdev {
        let mtu = p.netdev_mtu.map_or("?".to_string(), |m| m.to_string());
        let _ = writeln!(o, "\t\t\tnetdev:\t\t\t{n} (mtu {mtu})");
    }
    if let Some(r) = &p.rate {
        let _ = writeln!(o, "\t\t\trate:\t\t\t{r}");
    }
    if let (Some(s), Some(c)) = (&p.phys_state, p.phys_state_code) {
        let _ = writeln!(o, "\t\t\tphys_state:\t\t{s} ({c})");
    }
    for g in &p.gids {
        let t = g.gid_type.as_deref().unwrap_or("(type unreadable)");
        let _ = writeln!(o, "\t\t\tGID[{:>3}]:\t\t{}, {t}", g.index, g.gid);
    }
}

/// The GID tables in `show_gids`' layout: `DEV PORT INDEX GID IPv4 VER DEV`, tab
/// separated, then `n_gids_found=N`.
pub fn show_gids(snap: &Snapshot) -> String {
    let mut o = String::new();
    o.push_str("DEV\tPORT\tINDEX\tGID\t\t\t\t\tIPv4  \t\tVER\tDEV\n");
    o.push_str("---\t----\t-----\t---\t\t\t\t\t------------  \t---\t---\n");
    let mut n = 0;
    for d in &snap.devices {
        for p in &d.ports {
            for g in &p.gids {
                n += 1;
                let ver = g.version.as_deref().unwrap_or("");
                let ndev = g.netdev.as_deref().unwrap_or("");
                let ipv4 = match g.ipv4 {
                    Some(v4) => format!("{v4:<15}"),
                    None => "\t".to_string(),
                };
                let _ = writeln!(
                    o,
                    "{}\t{}\t{}\t{}\t{ipv4}\t{ver}\t{ndev}",
                    d.name, p.port, g.index, g.gid_raw
                );
            }
        }
    }
    let _ = writeln!(o, "n_gids_found={n}");
    o
}

/// The counters of every port: rxe's names, then the ECN/CNP names, then any other
/// counter the device keeps; a name the device does not keep shows `-`. With `prev`
/// (the snapshot a second before, `-w`) each line also shows the change per second.
pub fn counters(snap: &Snapshot, prev: Option<&Snapshot>) -> String {
    let mut o = String::new();
    for d in &snap.devices {
        for p in &d.ports {
            let ndev = p.netdev.as_deref().unwrap_or("?");
            let _ = writeln!(o, "{}/{} ({ndev}):", d.name, p.port);
            let Some(cs) = &p.counters else {
                let _ = writeln!(
                    o,
                    "\tcounters are kept by the processes that opened a soft device \
                     (nvmf-target, nvmf-bench, rdma-perf); those that answer follow as soft/IP"
                );
                continue;
            };
            let before = prev.and_then(|s| {
                s.devices
                    .iter()
                    .find(|x| x.name == d.name)?
                    .ports
                    .iter()
                    .find(|x| x.port == p.port)?
                    .counters
                    .clone()
            });
            let mut names: Vec<&str> = RXE_HW_COUNTERS
                .iter()
                .chain(ECN_CNP_COUNTERS.iter())
                .copied()
                .collect();
            for c in cs {
                if !names.contains(&c.name.as_str()) {
                    names.push(&c.name);
                }
            }
            let dt = match prev {
                Some(s) if snap.time_ms > s.time_ms => (snap.time_ms - s.time_ms) as f64 / 1000.0,
                _ => 1.0,
            };
            for name in names {
                let v = cs.iter().find(|c| c.name == name).map(|c| c.value);
                let old = before
                    .as_ref()
                    .and_then(|b| b.iter().find(|c| c.name == name).map(|c| c.value));
                let value = v.map_or("-".to_string(), |v| v.to_string());
                match (v, old) {
                    (Some(v), Some(old)) => {
                        let rate = v.saturating_sub(old) as f64 / dt;
                        let _ = writeln!(o, "\t{name:<28}{value:>20}  {rate:>12.0}/s");
                    }
                    _ => {
                        let _ = writeln!(o, "\t{name:<28}{value:>20}");
                    }
                }
            }
        }
    }
    o
}

/// The QPs of every open soft device ([`Snapshot::soft_live`]), one line each as
/// `rdma res show qp` prints a kernel QP, plus the RoCEv2 UDP source port (`sport`,
/// `-` before the QP has a send path), the addresses and the path MTU:
/// `link soft/127.0.0.1 lqpn 18 type RC state RTS rqpn 19 sport 49409 laddr 127.0.0.1
/// raddr 127.0.0.2 mtu 1024 pid 4242 comm rdma-perf`.
pub fn qps(snap: &Snapshot) -> String {
    let mut o = String::new();
    if snap.soft_live.is_empty() {
        o.push_str(
            "no soft device is open in any process of this user (no info socket answered)\n",
        );
    }
    for l in &snap.soft_live {
        for q in &l.qps {
            let sport = q.udp_sport.map_or("-".to_string(), |p| p.to_string());
            let raddr = q.remote_ip.as_deref().unwrap_or("-");
            let _ = writeln!(
                o,
                "link soft/{} lqpn {} type {} state {} rqpn {} sport {sport} laddr {} raddr \
                 {raddr} mtu {} pid {} comm {}",
                l.ip, q.qpn, q.qp_type, q.state, q.dest_qpn, q.local_ip, q.mtu, l.pid, l.process
            );
        }
    }
    o
}

/// The counters of every open soft device, one block per device (`soft/IP (pid P
/// comm)`); with `prev` (`-w`) each line also shows the change per second.
pub fn soft_counters(snap: &Snapshot, prev: Option<&Snapshot>) -> String {
    let mut o = String::new();
    let dt = match prev {
        Some(s) if snap.time_ms > s.time_ms => (snap.time_ms - s.time_ms) as f64 / 1000.0,
        _ => 1.0,
    };
    for l in &snap.soft_live {
        let _ = writeln!(o, "soft/{} (pid {} {}):", l.ip, l.pid, l.process);
        let before: Option<&SoftLive> =
            prev.and_then(|p| p.soft_live.iter().find(|x| x.socket == l.socket));
        for c in &l.counters {
            let old = before.and_then(|b| b.counters.iter().find(|x| x.name == c.name));
            match old {
                Some(old) => {
                    let rate = c.value.saturating_sub(old.value) as f64 / dt;
                    let _ = writeln!(o, "\t{:<28}{:>20}  {rate:>12.0}/s", c.name, c.value);
                }
                None => {
                    let _ = writeln!(o, "\t{:<28}{:>20}", c.name, c.value);
                }
            }
        }
    }
    o
}
