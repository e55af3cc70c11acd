//! The Discovery log page (LID 70h) a discovery controller returns (NVMe Base 2.x
//! §5.16.1.23, NVMe over Fabrics 1.1 §5.3), built as Linux nvmet's
//! `nvmet_execute_disc_get_log_page` does: the current discovery subsystem first
//! (SUBTYPE 3), then every NVM subsystem the host may connect to (SUBTYPE 2), then the
//! port's referrals (SUBTYPE 1), each an RDMA entry.
//!
//! Which ports: a port that links its subsystems (nvmet's `ports/N/subsystems`) lists
//! only itself, its linked subsystems and its referrals, as nvmet lists only the port
//! the host asked through. When ports link none (every subsystem on every port, the
//! TOML without `subsystems`), the page read on any lists every such port, each
//! subsystem once per port (PORTID in configuration order), as SPDK lists every
//! listener.

use std::net::IpAddr;

use nvme::log::{
    discovery_log_page as build_page, AddressFamily, DiscoveryLogEntry, SubsystemType,
};
use nvme::{NVME_AQ_DEPTH, NVMF_DISCOVERY_NQN};

use crate::subsystem::{PortInfo, Registry};

/// Address family of `addr` for ADRFAM: IPv4 (1) or IPv6 (2).
pub fn address_family(addr: IpAddr) -> AddressFamily {
    match addr {
        IpAddr::V4(_) => AddressFamily::Ipv4,
        IpAddr::V6(_) => AddressFamily::Ipv6,
    }
}

/// One entry for subsystem `nqn` of type `subtype` at `traddr`:`trsvcid` (PORTID
/// `portid`): TRTYPE RDMA, TREQ 04h, CNTLID FFFFh, ASQSZ 32, TRSVCID the decimal port
/// and TRADDR the address in text form (both NUL padded), TSAS connected / not
/// specified / RDMA CM, P_Key 0. `None` for an NQN too long for the field (not
/// listable).
fn entry(
    (traddr, trsvcid, portid): (IpAddr, u16, u16),
    subtype: SubsystemType,
    nqn: &str,
) -> Option<DiscoveryLogEntry> {
    DiscoveryLogEntry::rdma(
        address_family(traddr),
        subtype,
        portid,
        NVME_AQ_DEPTH,
        &trsvcid.to_string(),
        nqn,
        &traddr.to_string(),
    )
    .ok()
}

fn at(p: &PortInfo) -> (IpAddr, u16, u16) {
    (p.traddr, p.trsvcid, p.portid)
}

/// The whole Discovery log page for host `hostnqn` connected through port `port` (an
/// index in [`Registry::ports`]): a 1024-byte header (GENCTR from the registry, NUMREC,
/// RECFMT 0) followed by 1024-byte entries: the discovery subsystem on each listed
/// port; for each NVM subsystem whose host list admits `hostnqn` (in configuration
/// order), one entry per listed port that serves it; then the referrals of `port`.
/// The listed ports are `port` alone when it links its subsystems, else every port
/// that links none (see the module docs). `(NUMREC + 1) x 1024` bytes; the caller
/// applies the Get Log Page offset and length.
pub fn discovery_log_page(reg: &Registry, port: usize, hostnqn: &str) -> Vec<u8> {
    let ports = reg.ports();
    let subsystems = reg.subsystems();
    let here = ports.get(port);
    let listed: Vec<&PortInfo> = match here {
        Some(p) if p.subsystems.is_some() => vec![p],
        _ => (ports.iter())
            .filter(|p| p.subsystems.is_none() && !p.removed)
            .collect(),
    };
    let mut entries = Vec::with_capacity((subsystems.len() + 1) * listed.len());
    for p in &listed {
        entries.extend(entry(
            at(p),
            SubsystemType::CurrentDiscovery,
            &reg.discovery.nqn,
        ));
    }
    for s in subsystems.iter().filter(|s| s.host_allowed(hostnqn)) {
        for p in listed.iter().filter(|p| p.serves(&s.nqn)) {
            entries.extend(entry(at(p), SubsystemType::Nvm, &s.nqn));
        }
    }
    for r in here.map_or(&[][..], |p| &p.referrals) {
        entries.extend(entry(
            (r.traddr, r.trsvcid, r.portid),
            SubsystemType::Referral,
            NVMF_DISCOVERY_NQN,
        ));
    }
    build_page(reg.genctr(), &entries)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::subsystem::tests::{registry_with, ALLOWED_HOST, HOST, REF_NQN, RESTRICTED_NQN};
    use crate::subsystem::{Limits, PortInfo, Registry, Subsystem};
    use nvme::log::parse_discovery_log;
    use nvme::NVMF_DISCOVERY_NQN;
    use std::sync::Arc;

    #[test]
    fn log_matches_the_capture_layout() {
        let reg = registry_with(vec![]);
        let page = discovery_log_page(&reg, 0, HOST);
        // The host may see the discovery subsystem and `ref`, not `restricted`.
        assert_eq!(page.len(), 3 * 1024);
        assert_eq!(&page[8..16], &2u64.to_le_bytes(), "NUMREC");
        assert_eq!(&page[16..18], &[0, 0], "RECFMT");
        let e1 = &page[1024..2048];
        // linux-nvme-rdma-rxe.pcap frames 73-75: 01 01 03 04 0100 ffff 2000.
        assert_eq!(
            &e1[..10],
            &[0x01, 0x01, 0x03, 0x04, 0x01, 0x00, 0xff, 0xff, 0x20, 0x00]
        );
        assert_eq!(&e1[32..64], &{
            let mut f = [0u8; 32];
            f[..4].copy_from_slice(b"4420");
            f
        });
        assert_eq!(&e1[512..525], b"192.168.77.10");
        assert!(e1[525..768].iter().all(|&b| b == 0), "TRADDR NUL padded");
        assert_eq!(&e1[768..771], &[1, 1, 1], "TSAS qptype, prtype, cms");
        assert_eq!(&e1[776..778], &[0, 0], "P_Key 0");
        let e2 = &page[2048..];
        assert_eq!(&e2[..4], &[0x01, 0x01, 0x02, 0x04]);

        let (hdr, entries) = parse_discovery_log(&page).unwrap();
        assert_eq!(hdr.genctr.get(), reg.genctr());
        assert_eq!(entries[0].subnqn(), Ok(NVMF_DISCOVERY_NQN));
        assert_eq!(entries[1].subnqn(), Ok(REF_NQN));
        assert_eq!(entries[1].traddr(), Ok("192.168.77.10"));
        assert_eq!(entries[1].trsvcid(), Ok("4420"));

        // The allowed host sees the restricted subsystem as well.
        let page = discovery_log_page(&reg, 0, ALLOWED_HOST);
        let (hdr, entries) = parse_discovery_log(&page).unwrap();
        assert_eq!(hdr.numrec.get(), 3);
        assert_eq!(entries[2].subnqn(), Ok(RESTRICTED_NQN));
    }

    #[test]
    fn ipv6_entries() {
        let s = Subsystem::new(REF_NQN.into(), "sn".to_string(), true, vec![], vec![]);
        let reg = Registry::new(
            vec![Arc::new(s)],
            PortInfo::new("fd77::10".parse().unwrap(), 4420),
            Limits::default(),
        );
        let page = discovery_log_page(&reg, 0, HOST);
        let (_, entries) = parse_discovery_log(&page).unwrap();
        // linux-nvme-rdma-rxe-ipv6.pcap: ADRFAM 2, TRADDR "fd77::10" NUL padded.
        assert_eq!(entries[1].adrfam, 2);
        assert_eq!(&entries[1].traddr[..9], b"fd77::10\0");
        assert!(entries[1].traddr[8..].iter().all(|&b| b == 0));
    }

    #[test]
    fn every_listen_address_is_listed() {
        let s = Subsystem::new(REF_NQN.into(), "sn".to_string(), true, vec![], vec![]);
        let ports = vec![
            PortInfo::new("192.168.77.10".parse().unwrap(), 4420),
            PortInfo {
                portid: 2,
                ..PortInfo::new("fd77::10".parse().unwrap(), 4421)
            },
        ];
        let reg = Registry::with_ports(vec![Arc::new(s)], ports, Limits::default(), true);
        let page = discovery_log_page(&reg, 0, HOST);
        let (hdr, entries) = parse_discovery_log(&page).unwrap();
        assert_eq!(hdr.numrec.get(), 4);
        let got: Vec<_> = entries
            .iter()
            .map(|e| {
                (
                    e.subtype,
                    e.portid.get(),
                    e.adrfam,
                    e.traddr().unwrap().to_string(),
                    e.trsvcid().unwrap().to_string(),
                    e.subnqn().unwrap().to_string(),
                )
            })
            .collect();
        let d = NVMF_DISCOVERY_NQN.to_string();
        let r = REF_NQN.to_string();
        let v4 = || "192.168.77.10".to_string();
        let v6 = || "fd77::10".to_string();
        assert_eq!(
            got,
            vec![
                (3, 1, 1, v4(), "4420".into(), d.clone()),
                (3, 2, 2, v6(), "4421".into(), d),
                (2, 1, 1, v4(), "4420".into(), r.clone()),
                (2, 2, 2, v6(), "4421".into(), r),
            ]
        );
    }

    #[test]
    fn a_linked_port_lists_itself_its_subsystems_and_its_referrals() {
        let sub = |nqn: &str| Arc::new(Subsystem::new(nqn.into(), None, true, vec![], vec![]));
        let only = |nqns: &[&str]| Some(nqns.iter().map(|n| n.to_string()).collect());
        let referral = crate::subsystem::Referral {
            traddr: "192.168.77.20".parse().unwrap(),
            trsvcid: 4420,
            portid: 9,
        };
        let ports = vec![
            PortInfo {
                portid: 5,
                subsystems: only(&[REF_NQN]),
                referrals: vec![referral],
                ..PortInfo::new("192.168.77.10".parse().unwrap(), 4420)
            },
            PortInfo {
                portid: 6,
                subsystems: only(&[RESTRICTED_NQN, REF_NQN]),
                ..PortInfo::new("192.168.77.10".parse().unwrap(), 4421)
            },
        ];
        let reg = Registry::with_ports(
            vec![sub(REF_NQN), sub(RESTRICTED_NQN)],
            ports,
            Limits::default(),
            true,
        );
        let listed = |port| {
            let page = discovery_log_page(&reg, port, HOST);
            let (_, entries) = parse_discovery_log(&page).unwrap();
            entries
                .iter()
                .map(|e| {
                    (
                        e.subtype,
                        e.portid.get(),
                        format!("{}:{}", e.traddr().unwrap(), e.trsvcid().unwrap()),
                        e.subnqn().unwrap().to_string(),
                    )
                })
                .collect::<Vec<_>>()
        };
        let d = NVMF_DISCOVERY_NQN.to_string();
        let a = |p: &str| format!("192.168.77.{p}");
        assert_eq!(
            listed(0),
            vec![
                (3, 5, a("10:4420"), d.clone()),
                (2, 5, a("10:4420"), REF_NQN.to_string()),
                (1, 9, a("20:4420"), d.clone()),
            ]
        );
        // In configuration order of the subsystems, not of the links.
        assert_eq!(
            listed(1),
            vec![
                (3, 6, a("10:4421"), d),
                (2, 6, a("10:4421"), REF_NQN.to_string()),
                (2, 6, a("10:4421"), RESTRICTED_NQN.to_string()),
            ]
        );
    }
}
