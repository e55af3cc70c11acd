//! The MTU check: the RoCE MTU must fit in the interface MTU here, in the route's MTU
//! toward the peer, and on the path end to end (probed, when the peer runs
//! `rdma-doctor --listen`).
//!
//! RoCEv2 packets are never fragmented (DF is set; rxe and RNICs size every packet to
//! the path MTU): a full packet is the RoCE MTU of payload plus IP, UDP, BTH, RETH and
//! ICRC headers ([`super::roce_overhead_bytes`]). The soft provider and rxe derive the
//! RoCE MTU from the interface MTU ([`transport::verbs::Mtu::from_netdev_mtu`]: 1500
//! gives 1024), so an interface MTU below [`super::netdev_mtu_for`] the wanted RoCE MTU
//! lowers it, and a smaller MTU somewhere on the path drops every full-size packet
//! while the small connection messages still pass.
use transport::verbs::Mtu;

use super::peer::{route_mtu, PeerAnswer};
use super::{netdev_mtu_for, Finding, Options, Status};
use crate::netif::{holder, NetIf};

/// Adds the MTU findings.
pub fn check(opts: &Options, ifs: &[NetIf], peer: Option<&PeerAnswer>, out: &mut Vec<Finding>) {
    let want = opts.roce_mtu;
    let need = netdev_mtu_for(want);
    let Some((i, _)) = holder(ifs, opts.addr) else {
        out.push(Finding::new(
            "mtu",
            Status::Skip,
            format!("no interface holds {}: its MTU is unknown", opts.addr),
            "see the gid finding",
            None,
        ));
        return;
    };
    let ifname = i.name.clone();
    match i.mtu {
        Some(m) if Mtu::from_netdev_mtu(m) < want => out.push(Finding::new(
            "mtu",
            Status::Fail,
            format!(
                "{ifname} has MTU {m}, which carries RoCE MTU {} at most; RoCE MTU {} needs an \
                 interface MTU of {need} or more",
                Mtu::from_netdev_mtu(m).bytes(),
                want.bytes()
            ),
            "the providers derive the RoCE MTU from the interface MTU: connections run at the \
             smaller MTU, and a peer that sends the full RoCE MTU has its packets dropped here",
            Some(format!("ip link set dev {ifname} mtu {need}")),
        )),
        Some(m) => out.push(Finding::new(
            "mtu",
            Status::Ok,
            format!(
                "{ifname} has MTU {m}: RoCE MTU up to {} (wanted {})",
                Mtu::from_netdev_mtu(m).bytes(),
                want.bytes()
            ),
            "",
            None,
        )),
        None => out.push(Finding::new(
            "mtu",
            Status::Skip,
            format!("the MTU of {ifname} does not read (/sys/class/net/{ifname}/mtu)"),
            "not visible here",
            None,
        )),
    }
    let Some(peer_ip) = opts.peer else {
        return;
    };
    match peer {
        Some(p @ PeerAnswer::Answered { probes, .. }) => {
            let tried: Vec<String> = probes
                .iter()
                .map(|p| {
                    format!(
                        "{} B {}",
                        p.ip_bytes,
                        match (&p.error, p.crossed) {
                            (Some(e), _) => format!("refused here ({e})"),
                            (None, true) => "crossed".to_string(),
                            (None, false) => "lost".to_string(),
                        }
                    )
                })
                .collect();
            let tried = tried.join(", ");
            match p.path_roce_mtu() {
                Some(m) if m >= want => out.push(Finding::new(
                    "path_mtu",
                    Status::Ok,
                    format!(
                        "DF-set probes to {peer_ip}: RoCE MTU {} crosses the path ({tried})",
                        m.bytes()
                    ),
                    "",
                    None,
                )),
                found => out.push(Finding::new(
                    "path_mtu",
                    Status::Fail,
                    format!(
                        "DF-set probes to {peer_ip}: the path carries RoCE MTU {} at most, {} \
                         wanted ({tried})",
                        found.map_or("none (not even 256)".to_string(), |m| m.bytes().to_string()),
                        want.bytes()
                    ),
                    "RoCE packets are never fragmented: full-size packets are lost on the path \
                     while connection setup (small MADs) succeeds, so transfers stall and retry \
                     until the QP fails",
                    Some(format!(
                        "raise the MTU on every hop to {need} or more: `ip link set dev <if> mtu \
                         {need}` on both hosts (here {ifname}) and every switch port between them"
                    )),
                )),
            }
        }
        _ => match route_mtu(opts.addr, peer_ip) {
            Some(m) if Mtu::from_netdev_mtu(m) < want => out.push(Finding::new(
                "path_mtu",
                Status::Fail,
                format!(
                    "the route to {peer_ip} has MTU {m} (getsockopt IP_MTU), RoCE MTU {} at most",
                    Mtu::from_netdev_mtu(m).bytes()
                ),
                "full-size RoCE packets toward the peer do not fit the route",
                Some(format!(
                    "ip route get {peer_ip} (a route mtu or a learned path MTU below {need}: \
                     raise it, `ip link set dev {ifname} mtu {need}`)"
                )),
            )),
            Some(m) => out.push(Finding::new(
                "path_mtu",
                Status::Warn,
                format!(
                    "the route to {peer_ip} has MTU {m} (getsockopt IP_MTU); the path beyond \
                     this host was not probed (the peer's doctor did not answer)"
                ),
                "hops between the hosts may still have a smaller MTU",
                Some(format!(
                    "on the peer: rdma-doctor --listen --addr {peer_ip}"
                )),
            )),
            None => out.push(Finding::new(
                "path_mtu",
                Status::Skip,
                format!("no route MTU toward {peer_ip} reads"),
                "not visible here",
                None,
            )),
        },
    }
}
