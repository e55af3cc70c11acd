//! The GID check: a RoCE v2 GID for the address on this host and, with a peer, the
//! same GID type and index on both ends.
//!
//! The soft provider has no GID table of its own: its GID is the address
//! (`::ffff:a.b.c.d` for IPv4), present when an interface that is up holds the
//! address; the index shown is that of `rdma-info --gids`. The verbs provider needs
//! the RoCE v2 entry of the address in the device's sysfs table
//! ([`transport::sysfs::gid::find_roce_v2_gid`], which never takes a RoCE v1 or
//! link-local entry in its place). GID indexes only matter to programs that take one
//! index for both hosts (perftest's `-x`): RoCE v2 packets carry IP addresses.
use std::net::IpAddr;

use serde::{Deserialize, Serialize};
use transport::sysfs::gid::{find_roce_v2_gid, GidError};
use transport::ProviderKind;

use super::peer::PeerAnswer;
use super::{Finding, Options, Status};
use crate::info::{gid_of, soft_device};
use crate::netif::{holder, NetIf};

/// The GID an end uses, as exchanged with a peer.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct GidSummary {
    /// `soft` or `verbs`.
    pub provider: String,
    /// The device (`soft`, `rxe0`) and port.
    pub device: String,
    /// See [`GidSummary::device`].
    pub port: u8,
    /// The index in the port's table; `None` for a soft-provider address that the
    /// table does not list (127.0.0.2: all of 127/8 is on `lo`).
    pub index: Option<u32>,
    /// `RoCE v2` (the only type the soft provider has).
    pub gid_type: String,
    /// The GID.
    pub gid: std::net::Ipv6Addr,
    /// The netdev and its MTU.
    pub netdev: Option<String>,
    /// See [`GidSummary::netdev`].
    pub netdev_mtu: Option<u32>,
}

/// A name of an interface to suggest in a fix: the first one that is up and not `lo`.
fn some_interface(ifs: &[NetIf]) -> String {
    ifs.iter()
        .find(|i| i.name != "lo" && i.up)
        .map_or("<interface>".to_string(), |i| i.name.clone())
}

fn default_prefix(ip: IpAddr) -> u8 {
    if ip.is_ipv4() {
        24
    } else {
        64
    }
}

/// This host's GID for `opts.addr`, or the reason there is none (a fix-ready
/// [`Finding`] of status fail).
pub fn local_summary(opts: &Options, ifs: &[NetIf]) -> Result<GidSummary, Finding> {
    let addr = opts.addr.to_canonical();
    let held = holder(ifs, addr);
    match opts.provider {
        ProviderKind::Soft => {
            let Some((i, _)) = held else {
                return Err(Finding::new(
                    "gid",
                    Status::Fail,
                    format!("no interface of this host holds {addr}, so the soft provider has no RoCE v2 GID for it"),
                    "the soft provider binds UDP 4791 on the address itself: the target cannot \
                     start on it and peers cannot reach it",
                    Some(format!(
                        "ip addr add {addr}/{} dev {}",
                        default_prefix(addr),
                        some_interface(ifs)
                    )),
                ));
            };
            if !i.up {
                return Err(Finding::new(
                    "gid",
                    Status::Fail,
                    format!("{addr} is on {}, which is down", i.name),
                    "no packet leaves or arrives on an interface that is down",
                    Some(format!("ip link set dev {} up", i.name)),
                ));
            }
            let gid = gid_of(addr);
            let dev = soft_device(ifs);
            let (port, index) = dev
                .ports
                .iter()
                .find(|p| p.netdev.as_deref() == Some(i.name.as_str()))
                .map_or((0, None), |p| {
                    (
                        p.port,
                        p.gids.iter().find(|g| g.gid == gid).map(|g| g.index),
                    )
                });
            Ok(GidSummary {
                provider: "soft".into(),
                device: dev.name,
                port,
                index,
                gid_type: "RoCE v2".into(),
                gid,
                netdev: Some(i.name.clone()),
                netdev_mtu: i.mtu,
            })
        }
        ProviderKind::Verbs => match find_roce_v2_gid(&opts.sysfs_root, addr) {
            Ok(e) => {
                let netdev_mtu = e.ndev.as_ref().and_then(|n| {
                    std::fs::read_to_string(opts.net_root.join(n).join("mtu"))
                        .ok()?
                        .trim()
                        .parse()
                        .ok()
                });
                Ok(GidSummary {
                    provider: "verbs".into(),
                    device: e.device.clone(),
                    port: e.port,
                    index: Some(e.index),
                    gid_type: "RoCE v2".into(),
                    gid: e.gid,
                    netdev: e.ndev.clone(),
                    netdev_mtu,
                })
            }
            Err(e) => {
                let netdev = held
                    .as_ref()
                    .map_or_else(|| some_interface(ifs), |(i, _)| i.name.clone());
                let fix = match &e {
                    GidError::NoDevices { .. } => {
                        format!("rdma link add rxe0 type rxe netdev {netdev}")
                    }
                    _ if held.is_none() => {
                        format!("ip addr add {addr}/{} dev {netdev}", default_prefix(addr))
                    }
                    _ => format!(
                        "rdma link show (and bind an RDMA device to {netdev}: `rdma link add rxe0 \
                         type rxe netdev {netdev}` for Soft-RoCE)"
                    ),
                };
                Err(Finding::new(
                    "gid",
                    Status::Fail,
                    e.to_string(),
                    "the verbs provider opens the device whose RoCE v2 GID is the address; \
                     without one the target does not start",
                    Some(fix),
                ))
            }
        },
    }
}

/// The local GID finding; returns the GID for the peer comparison.
pub fn check_local(opts: &Options, ifs: &[NetIf], out: &mut Vec<Finding>) -> Option<GidSummary> {
    match local_summary(opts, ifs) {
        Ok(g) => {
            let index = g.index.map_or(
                "- (all of 127/8 is on lo; its table lists 127.0.0.1)".to_string(),
                |i| i.to_string(),
            );
            out.push(Finding::new(
                "gid",
                Status::Ok,
                format!(
                    "{}: RoCE v2 GID {} on {} ({} port {}, index {index})",
                    opts.addr,
                    g.gid,
                    g.netdev.as_deref().unwrap_or("?"),
                    if g.device == g.provider {
                        format!("{} provider", g.provider)
                    } else {
                        format!("{} {}", g.provider, g.device)
                    },
                    g.port
                ),
                "",
                None,
            ));
            Some(g)
        }
        Err(f) => {
            out.push(f);
            None
        }
    }
}

/// The peer GID finding: the peer's RoCE v2 GID, and the same type and index.
pub fn check_peer(
    peer: IpAddr,
    port: u16,
    local: Option<&GidSummary>,
    answer: &PeerAnswer,
    out: &mut Vec<Finding>,
) {
    let info = match answer {
        PeerAnswer::Answered { info, .. } => info,
        PeerAnswer::NoAnswer(why) => {
            out.push(Finding::new(
                "peer_gid",
                Status::Warn,
                format!("no rdma-doctor --listen answered on {peer} UDP {port}: {why}"),
                "the peer's GID table and the path MTU end to end were not checked",
                Some(format!(
                    "on the peer: rdma-doctor --listen --addr {peer} (then run this again)"
                )),
            ));
            return;
        }
    };
    let Some(theirs) = &info.gid else {
        out.push(Finding::new(
            "peer_gid",
            Status::Fail,
            format!(
                "the peer has no RoCE v2 GID for {peer}: {}",
                info.gid_error.as_deref().unwrap_or("?")
            ),
            "connections to the peer cannot be made",
            info.gid_fix.clone().map(|f| format!("on the peer: {f}")),
        ));
        return;
    };
    let Some(ours) = local else {
        out.push(Finding::new(
            "peer_gid",
            Status::Skip,
            format!(
                "the peer's GID is {} ({} index {:?}); this host has none to compare",
                theirs.gid, theirs.gid_type, theirs.index
            ),
            "fix this host's GID first",
            None,
        ));
        return;
    };
    let idx = |g: &GidSummary| g.index.map_or("-".to_string(), |i| i.to_string());
    let at = |g: &GidSummary| {
        if g.device == g.provider {
            format!("{} provider, port {}", g.provider, g.port)
        } else {
            format!("{} {} port {}", g.provider, g.device, g.port)
        }
    };
    let both = format!(
        "here {} index {} ({}), peer {} index {} ({})",
        ours.gid_type,
        idx(ours),
        at(ours),
        theirs.gid_type,
        idx(theirs),
        at(theirs)
    );
    if ours.gid_type != theirs.gid_type {
        out.push(Finding::new(
            "peer_gid",
            Status::Fail,
            format!("GID types differ: {both}"),
            "RoCE v1 and RoCE v2 do not interoperate (v1 is Ethernet type 0x8915, v2 UDP 4791)",
            Some("use the RoCE v2 GID index on both hosts (`rdma-info --gids` lists them)".into()),
        ));
    } else if ours.index != theirs.index && ours.provider == "verbs" && theirs.provider == "verbs" {
        out.push(Finding::new(
            "peer_gid",
            Status::Warn,
            format!("GID indexes differ: {both}"),
            "a tool given one GID index for both hosts (perftest's -x) picks a different \
             address or a RoCE v1 entry on one of them; give each host its own index",
            Some(format!(
                "ib_write_bw -x {} here and -x {} on the peer",
                idx(ours),
                idx(theirs)
            )),
        ));
    } else {
        out.push(Finding::new(
            "peer_gid",
            Status::Ok,
            format!("same GID type: {both}"),
            "",
            None,
        ));
    }
}
