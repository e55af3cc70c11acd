//! Kernel settings: socket buffer limits for the soft provider, ECN, rp_filter.
//!
//! - `net.core.rmem_max` / `wmem_max` cap `SO_RCVBUF` / `SO_SNDBUF` for processes
//!   without `CAP_NET_ADMIN` (which force theirs with `SO_RCVBUFFORCE`); the soft
//!   provider asks for [`RX_SOCKET_BUFFER_BYTES`] per receive socket and
//!   [`TX_SOCKET_BUFFER_BYTES`] per QP socket, and sizes its RC windows from what it
//!   got ([`transport::soft::rx_buffer::rc_config_for`]). Both sysctls are global (the
//!   init network namespace's; other namespaces read them).
//! - `net.ipv4.tcp_ecn` is TCP's alone. RoCE's ECN is per packet: the soft provider
//!   marks every RoCEv2 packet ECT(0) itself (`IP_TOS`), RNICs per traffic class
//!   (`/sys/class/net/<if>/ecn/roce_np|roce_rp/enable/<prio>` on mlx5); what decides
//!   is that switches mark CE instead of dropping and that the receiver answers CE
//!   with CNPs (DCQCN).
//! - `rp_filter` 1 (strict) drops packets that arrive on an interface other than the
//!   one the reply would leave by: with two interfaces in one subnet (two RoCE ports),
//!   half the traffic. 2 (loose) or 0 do not.
use std::net::IpAddr;

use transport::memlock::Bytes;
use transport::rc::RcConfig;
use transport::soft::rx_buffer::rc_config_for;
use transport::soft::socket::{RX_SOCKET_BUFFER_BYTES, TX_SOCKET_BUFFER_BYTES};
use transport::ProviderKind;

use super::{Finding, Options, Status};
use crate::netif::{holder, same_subnet, NetIf};

/// Reads sysctl `name` (`net.core.rmem_max`) from `/proc/sys`.
pub fn read(name: &str) -> Option<String> {
    let path = format!("/proc/sys/{}", name.replace('.', "/"));
    Some(std::fs::read_to_string(path).ok()?.trim().to_string())
}

fn read_u64(name: &str) -> Option<u64> {
    read(name)?.parse().ok()
}

/// Adds the socket buffer, ECN and rp_filter findings.
pub fn check(opts: &Options, ifs: &[NetIf], out: &mut Vec<Finding>) {
    buffers(opts, out);
    ecn(opts, ifs, out);
    rp_filter(opts, ifs, out);
}

fn buffers(opts: &Options, out: &mut Vec<Finding>) {
    for (name, want, what) in [
        (
            "net.core.rmem_max",
            RX_SOCKET_BUFFER_BYTES as u64,
            "receive socket (one per poll group)",
        ),
        (
            "net.core.wmem_max",
            TX_SOCKET_BUFFER_BYTES as u64,
            "send socket (one per QP)",
        ),
    ] {
        let check: &'static str = if name.ends_with("rmem_max") {
            "rmem_max"
        } else {
            "wmem_max"
        };
        if opts.provider == ProviderKind::Verbs {
            out.push(Finding::new(
                check,
                Status::Skip,
                format!("{name}: the verbs provider's traffic does not pass through sockets"),
                "not applicable",
                None,
            ));
            continue;
        }
        let Some(v) = read_u64(name) else {
            out.push(Finding::new(
                check,
                Status::Skip,
                format!("{name} does not read"),
                "not visible here",
                None,
            ));
            continue;
        };
        if v >= want {
            out.push(Finding::new(
                check,
                Status::Ok,
                format!(
                    "{name} = {v}: the soft provider's {} of {} fits",
                    what,
                    Bytes(want)
                ),
                "",
                None,
            ));
            continue;
        }
        let meaning = if check == "rmem_max" {
            let c = rc_config_for(2 * v as usize, RcConfig::default());
            format!(
                "a target or host without CAP_NET_ADMIN gets a {} receive buffer instead of {} \
                 (root forces the full size with SO_RCVBUFFORCE), so each QP keeps at most {} \
                 unacknowledged and {} of RDMA READ data in flight: bandwidth drops, bursts \
                 overrun the buffer and are retransmitted",
                Bytes(v),
                Bytes(want),
                Bytes(c.max_inflight_bytes),
                Bytes(c.max_read_inflight_bytes)
            )
        } else {
            format!(
                "a process without CAP_NET_ADMIN gets a {} send buffer per QP instead of {}: \
                 sends that find it full are dropped (tx_dropped_pkts) and recovered by \
                 retransmission",
                Bytes(v),
                Bytes(want)
            )
        };
        out.push(Finding::new(
            check,
            Status::Warn,
            format!(
                "{name} = {v}, below the soft provider's {} of {want} bytes",
                what
            ),
            meaning,
            Some(format!(
                "sysctl -w {name}={want} (and `echo {name}={want} > /etc/sysctl.d/90-roce.conf` \
                 to keep it)"
            )),
        ));
    }
}

fn ecn(opts: &Options, ifs: &[NetIf], out: &mut Vec<Finding>) {
    let tcp = read("net.ipv4.tcp_ecn").unwrap_or_else(|| "?".into());
    let ifname = holder(ifs, opts.addr).map(|(i, _)| i.name.clone());
    // mlx5 and other RNICs: per-priority notification/reaction point switches.
    let np = ifname.as_ref().and_then(|i| {
        let dir = opts.net_root.join(i).join("ecn/roce_np/enable");
        let rd = std::fs::read_dir(&dir).ok()?;
        let mut on: Vec<String> = rd
            .filter_map(|e| {
                let e = e.ok()?;
                let v = std::fs::read_to_string(e.path()).ok()?;
                (v.trim() == "1").then(|| e.file_name().to_string_lossy().into_owned())
            })
            .collect();
        on.sort();
        Some(on)
    });
    let base = format!("net.ipv4.tcp_ecn = {tcp} (TCP's setting; RoCE does not read it)");
    match (opts.provider, np) {
        (ProviderKind::Soft, _) => out.push(Finding::new(
            "ecn",
            Status::Ok,
            format!("{base}; the soft provider marks every RoCEv2 packet ECT(0) itself (IP_TOS)"),
            "congestion signalling depends on the fabric: switches must mark CE (ECN/WRED on \
             the RoCE traffic class) instead of dropping",
            None,
        )),
        (ProviderKind::Verbs, Some(on)) if on.is_empty() => {
            let i = ifname.unwrap_or_default();
            out.push(Finding::new(
                "ecn",
                Status::Warn,
                format!("{base}; {i}: RoCE ECN notification point enabled on no priority"),
                "CE-marked packets get no CNP: the senders never slow down (no DCQCN), and \
                 incast fills the switch buffers until they drop or pause",
                Some(format!(
                    "echo 1 > /sys/class/net/{i}/ecn/roce_np/enable/3 (and roce_rp, for the \
                     RoCE priority in use)"
                )),
            ))
        }
        (ProviderKind::Verbs, Some(on)) => out.push(Finding::new(
            "ecn",
            Status::Ok,
            format!(
                "{base}; RoCE ECN notification point enabled on priorities {}",
                on.join(",")
            ),
            "",
            None,
        )),
        (ProviderKind::Verbs, None) => out.push(Finding::new(
            "ecn",
            Status::Skip,
            format!("{base}; the device shows no RoCE ECN switches (ecn/roce_np)"),
            "not visible here: rxe has no DCQCN; RNICs show theirs under /sys/class/net/<if>/ecn",
            None,
        )),
    }
}

fn rp_filter(opts: &Options, ifs: &[NetIf], out: &mut Vec<Finding>) {
    let addr = opts.addr.to_canonical();
    if !matches!(addr, IpAddr::V4(_)) {
        out.push(Finding::new(
            "rp_filter",
            Status::Ok,
            "rp_filter is IPv4 only; the address is IPv6",
            "",
            None,
        ));
        return;
    }
    let Some((i, a)) = holder(ifs, addr) else {
        return;
    };
    let all = read_u64("net.ipv4.conf.all.rp_filter").unwrap_or(0);
    let dev = read_u64(&format!("net.ipv4.conf.{}.rp_filter", i.name)).unwrap_or(0);
    // The kernel uses the larger of `all` and the interface's value.
    let eff = all.max(dev);
    let siblings: Vec<&str> = ifs
        .iter()
        .filter(|o| o.name != i.name && o.name != "lo")
        .filter(|o| {
            o.addrs
                .iter()
                .any(|x| x.ip.is_ipv4() && same_subnet(x.ip, addr, a.prefix_len))
        })
        .map(|o| o.name.as_str())
        .collect();
    let summary = format!(
        "rp_filter {eff} on {} (all = {all}, {} = {dev}){}",
        i.name,
        i.name,
        if siblings.is_empty() {
            String::new()
        } else {
            format!("; {} share(s) its subnet", siblings.join(", "))
        }
    );
    if eff == 1 && !siblings.is_empty() {
        out.push(Finding::new(
            "rp_filter",
            Status::Warn,
            summary,
            "strict reverse-path filtering drops RoCE packets that arrive on one interface \
             while the route back leaves by the other one of the same subnet",
            Some(format!(
                "sysctl -w net.ipv4.conf.all.rp_filter=2 net.ipv4.conf.{}.rp_filter=2",
                i.name
            )),
        ));
    } else {
        out.push(Finding::new("rp_filter", Status::Ok, summary, "", None));
    }
}
