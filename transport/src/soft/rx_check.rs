//! The receive-side ICRC check shared by the poll groups and the CM agent.
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::Ordering;

use super::device::DeviceCounters;
use crate::wire::{IcrcCheck, IcrcChecker, IcrcIpInfo, ROCE_V2_UDP_DPORT};

/// Whether the RoCEv2 packet `data` from `from` to `local` has a valid ICRC, the
/// sender's kernel having most likely written IPv4 ID `ipv4_id` (0 for a lone datagram,
/// `i` for segment `i` of a coalesced train: [`super::socket::RxPacket`]); counts
/// `icrc_errors` (drop) or `icrc_ipv4_id_solved` (a sender with IPv4 IDs other than
/// predicted, e.g. Linux rxe; see [`crate::wire::icrc_rx`]).
pub(crate) fn icrc_ok(
    checker: &mut IcrcChecker,
    counters: &DeviceCounters,
    from: SocketAddr,
    local: IpAddr,
    ipv4_id: u16,
    data: &[u8],
) -> bool {
    let info = IcrcIpInfo {
        src: from.ip(),
        dst: local,
        ipv4_id,
        udp_sport: from.port(),
        udp_dport: ROCE_V2_UDP_DPORT,
    };
    match checker.check(&info, data) {
        IcrcCheck::Exact => true,
        IcrcCheck::SolvedIpv4Id(_) => {
            counters.icrc_ipv4_id_solved.fetch_add(1, Ordering::Relaxed);
            true
        }
        IcrcCheck::Bad => {
            counters.icrc_errors.fetch_add(1, Ordering::Relaxed);
            false
        }
    }
}
