//! The 40-byte GRH area of a UD receive buffer over RoCEv2 (IBTA Vol 1 §11.4.1.1,
//! RoCEv2 Annex A17.4.5.1): the IPv6 header of an IPv6 packet; for IPv4, 20 zero bytes
//! then the IPv4 header, as Linux rxe writes it (`rxe_resp.c`, `copy_data` of the
//! `ipv4` header into `grh + 20`) and as rdma_cm's `ib_init_ah_from_wc` reads it back.
use std::net::IpAddr;

use crate::verbs::GRH_LEN;

/// UDP header bytes.
const UDP_HDR_LEN: usize = 8;
/// IP protocol number of UDP.
const IPPROTO_UDP: u8 = 17;

/// The GRH area for a RoCEv2 packet of `udp_payload_len` bytes (BTH to ICRC) from
/// `src` to `dst` with traffic class (ToS) `traffic_class` and hop limit (TTL)
/// `hop_limit`. An IPv4 pair gives the IPv4 header (checksum computed, DF set, ID 0)
/// in bytes 20..40; any other pair the IPv6 header (IPv4 addresses as IPv4-mapped
/// IPv6 ones, flow label 0).
pub fn grh_for(
    src: IpAddr,
    dst: IpAddr,
    udp_payload_len: usize,
    traffic_class: u8,
    hop_limit: u8,
) -> [u8; GRH_LEN] {
    let mut g = [0u8; GRH_LEN];
    match (src, dst) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            let total = (20 + UDP_HDR_LEN + udp_payload_len).min(u16::MAX as usize) as u16;
            let h = &mut g[20..];
            h[0] = 0x45;
            h[1] = traffic_class;
            h[2..4].copy_from_slice(&total.to_be_bytes());
            h[6] = 0x40; // DF
            h[8] = hop_limit;
            h[9] = IPPROTO_UDP;
            h[12..16].copy_from_slice(&s.octets());
            h[16..20].copy_from_slice(&d.octets());
            let sum = ipv4_checksum(h);
            h[10..12].copy_from_slice(&sum.to_be_bytes());
        }
        _ => {
            let v6 = |ip: IpAddr| match ip {
                IpAddr::V4(a) => a.to_ipv6_mapped(),
                IpAddr::V6(a) => a,
            };
            let word = (6u32 << 28) | (u32::from(traffic_class) << 20);
            g[0..4].copy_from_slice(&word.to_be_bytes());
            let plen = (UDP_HDR_LEN + udp_payload_len).min(u16::MAX as usize) as u16;
            g[4..6].copy_from_slice(&plen.to_be_bytes());
            g[6] = IPPROTO_UDP;
            g[7] = hop_limit;
            g[8..24].copy_from_slice(&v6(src).octets());
            g[24..40].copy_from_slice(&v6(dst).octets());
        }
    }
    g
}

/// The source address a GRH area names (what a UD receiver answers to): the IPv4
/// header's for an IPv6 GRH (version 6 in its first byte), else the IPv4 header's in
/// bytes 20..40.
pub fn grh_source(g: &[u8; GRH_LEN]) -> IpAddr {
    if g[0] >> 4 == 6 {
        let mut a = [0u8; 16];
        a.copy_from_slice(&g[8..24]);
        IpAddr::from(a)
    } else {
        IpAddr::from([g[32], g[33], g[34], g[35]])
    }
}

/// The ones' complement sum of an IPv4 header (RFC 791) with its checksum field 0.
fn ipv4_checksum(h: &[u8]) -> u16 {
    let mut sum: u32 = h
        .chunks(2)
        .map(|c| u32::from(u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)])))
        .sum();
    while sum > 0xFFFF {
        sum = (sum & 0xFFFF) + (sum >> 16);
    }
    !(sum as u16)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An IPv4 GRH has the IPv4 header in its last 20 bytes, with a checksum that sums
    /// to zero, and names its source back.
    #[test]
    fn ipv4_grh_holds_the_ipv4_header_in_its_last_20_bytes() {
        let src: IpAddr = "192.168.77.10".parse().unwrap();
        let dst: IpAddr = "192.168.77.11".parse().unwrap();
        let g = grh_for(src, dst, 60, 0x02, 64);
        assert_eq!(&g[..20], &[0u8; 20]);
        assert_eq!(g[20], 0x45);
        assert_eq!(u16::from_be_bytes([g[22], g[23]]), 20 + 8 + 60);
        assert_eq!(g[29], 17);
        assert_eq!(ipv4_checksum(&g[20..]), 0, "a valid header sums to 0xFFFF");
        assert_eq!(grh_source(&g), src);
    }

    #[test]
    fn ipv6_grh_is_the_ipv6_header() {
        let src: IpAddr = "fd00::10".parse().unwrap();
        let dst: IpAddr = "fd00::11".parse().unwrap();
        let g = grh_for(src, dst, 60, 0x60, 64);
        assert_eq!(g[0] >> 4, 6);
        assert_eq!(u16::from_be_bytes([g[4], g[5]]), 68);
        assert_eq!((g[6], g[7]), (17, 64));
        assert_eq!(grh_source(&g), src);
    }
}
