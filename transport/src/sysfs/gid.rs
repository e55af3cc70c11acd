//! The GID table as sysfs shows it and the choice of the RoCEv2 GID of an IP address.
//!
//! Linux lists each port's GID table under
//! `/sys/class/infiniband/<dev>/ports/<port>/`: `gids/<i>` (the GID, eight groups of
//! four hex digits), `gid_attrs/types/<i>` (`IB/RoCE v1` or `RoCE v2`) and
//! `gid_attrs/ndevs/<i>` (the netdev the entry belongs to). An empty slot reads as
//! all zeroes and its `types`/`ndevs` files fail to read (EINVAL). rdma_cm and rxe put
//! two entries per address, one RoCE v1 and one RoCE v2, plus the link-local address
//! of each netdev (IBTA RoCEv2 Annex A17.8: the GID of an IPv4 address is
//! `::ffff:a.b.c.d`).
//!
//! A RoCEv2 connection must use the RoCE v2 entry of its exact address: the RoCE v1
//! entry would send RoCE v1 (Ethernet type 0x8915) frames, the link-local one a
//! different source address. [`select_roce_v2_gid`] never falls back to either; it
//! names the table it looked at instead. Everything here is pure parsing of files under
//! a root directory, so tests run on constructed trees and on the table recorded in
//! QEMU (`transport/testdata/rxe-gids/`).
use std::fmt;
use std::net::{IpAddr, Ipv6Addr};
use std::path::{Path, PathBuf};

/// Where Linux lists the RDMA devices.
pub const SYSFS_INFINIBAND: &str = "/sys/class/infiniband";

/// The type of a GID table entry (`gid_attrs/types/<i>`, `enum ibv_gid_type`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum GidType {
    /// `IB/RoCE v1`: InfiniBand, or RoCE v1 (Ethernet type 0x8915, no IP header).
    IbRoceV1,
    /// `RoCE v2`: IPv4/IPv6 and UDP port 4791.
    RoceV2,
}

impl GidType {
    /// Parses the sysfs text (`IB/RoCE v1`, `RoCE v2`); `None` for anything else.
    pub fn parse(s: &str) -> Option<GidType> {
        match s.trim() {
            "IB/RoCE v1" => Some(GidType::IbRoceV1),
            "RoCE v2" => Some(GidType::RoceV2),
            _ => None,
        }
    }
}

impl fmt::Display for GidType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            GidType::IbRoceV1 => "IB/RoCE v1",
            GidType::RoceV2 => "RoCE v2",
        })
    }
}

/// One used entry of a port's GID table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GidEntry {
    /// The RDMA device (`rxe0`, `mlx5_0`).
    pub device: String,
    /// The port (1-based).
    pub port: u8,
    /// The index in the port's GID table (`sgid_index` of an address vector).
    pub index: u32,
    /// The GID; for RoCE the IP address (IPv4 as `::ffff:a.b.c.d`).
    pub gid: Ipv6Addr,
    /// The entry's type; `None` when `gid_attrs/types/<i>` did not read as a known type.
    pub gid_type: Option<GidType>,
    /// The netdev of the entry (`eth0`, `eth0.100`); `None` when unreadable.
    pub ndev: Option<String>,
}

impl GidEntry {
    /// The IP address the GID stands for (IPv4-mapped GIDs as IPv4).
    pub fn ip(&self) -> IpAddr {
        match self.gid.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6(self.gid),
        }
    }
}

impl fmt::Display for GidEntry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "[{}] {} ", self.index, self.gid)?;
        match self.gid_type {
            Some(t) => write!(f, "{t}")?,
            None => f.write_str("(type unreadable)")?,
        }
        if let Some(n) = &self.ndev {
            write!(f, " {n}")?;
        }
        Ok(())
    }
}

/// Why no GID could be chosen.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum GidError {
    /// The sysfs directory of RDMA devices is missing or empty.
    #[error("no RDMA devices: {root} lists none (is rdma_rxe / the RNIC driver loaded? see `rdma link`; Soft-RoCE: `rdma link add rxe0 type rxe netdev eth0`)")]
    NoDevices { root: PathBuf },
    /// No port has a RoCE v2 entry for the address; `tables` lists what was found.
    #[error("no RoCE v2 GID for {ip} in {tables}: assign {ip} to the netdev of an RDMA port (RoCE v1 and link-local entries are never used in its place)")]
    NoRoceV2Gid { ip: IpAddr, tables: String },
    /// A file of the table could not be read or parsed (other than an empty slot).
    #[error("{path}: {reason}")]
    Unreadable { path: PathBuf, reason: String },
}

fn port_dir(root: &Path, device: &str, port: u8) -> PathBuf {
    root.join(device).join("ports").join(port.to_string())
}

/// Parses a sysfs GID (`fe80:0000:0000:0000:5054:00ff:fe77:000a`).
pub fn parse_gid(s: &str) -> Option<Ipv6Addr> {
    let groups: Vec<&str> = s.trim().split(':').collect();
    if groups.len() != 8 {
        return None;
    }
    let mut seg = [0u16; 8];
    for (i, g) in groups.iter().enumerate() {
        if g.is_empty() || g.len() > 4 {
            return None;
        }
        seg[i] = u16::from_str_radix(g, 16).ok()?;
    }
    Some(Ipv6Addr::from(seg))
}

/// The used entries of `device`'s `port` under `root` (normally [`SYSFS_INFINIBAND`]),
/// in index order. All-zero GIDs (empty slots) are skipped; an entry whose type or
/// netdev file does not read (as the kernel shows some slots) keeps `None` there.
///
/// # Errors
/// [`GidError::Unreadable`] if the `gids` directory cannot be listed.
pub fn read_gid_table(root: &Path, device: &str, port: u8) -> Result<Vec<GidEntry>, GidError> {
    let dir = port_dir(root, device, port);
    let gids = dir.join("gids");
    let rd = std::fs::read_dir(&gids).map_err(|e| GidError::Unreadable {
        path: gids.clone(),
        reason: e.to_string(),
    })?;
    let mut indices: Vec<u32> = rd
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .collect();
    indices.sort_unstable();
    let mut out = Vec::new();
    for index in indices {
        let Ok(text) = std::fs::read_to_string(gids.join(index.to_string())) else {
            continue;
        };
        let Some(gid) = parse_gid(&text) else {
            continue;
        };
        if gid.is_unspecified() {
            continue;
        }
        let attr = |kind: &str| {
            std::fs::read_to_string(dir.join("gid_attrs").join(kind).join(index.to_string())).ok()
        };
        out.push(GidEntry {
            device: device.to_string(),
            port,
            index,
            gid,
            gid_type: attr("types").and_then(|t| GidType::parse(&t)),
            ndev: attr("ndevs")
                .map(|n| n.trim().to_string())
                .filter(|n| !n.is_empty()),
        });
    }
    Ok(out)
}

/// The devices under `root`, sorted by name.
pub fn list_devices(root: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(root)
        .map(|rd| {
            rd.filter_map(|e| e.ok()?.file_name().into_string().ok())
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

/// The ports of `device` under `root`, ascending.
pub fn list_ports(root: &Path, device: &str) -> Vec<u8> {
    let mut v: Vec<u8> = std::fs::read_dir(root.join(device).join("ports"))
        .map(|rd| {
            rd.filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
                .collect()
        })
        .unwrap_or_default();
    v.sort_unstable();
    v
}

/// The RoCE v2 entry of `ip` in `table`: the GID equal to `ip` (IPv4 as
/// `::ffff:a.b.c.d`, an IPv4-mapped IPv6 address like its IPv4 address) whose type is
/// `RoCE v2`; the lowest index if several (the same address on two netdevs). `None`
/// when there is none: a RoCE v1 entry, a link-local entry or an entry of unknown type
/// is never taken in its place.
pub fn select_roce_v2_gid(table: &[GidEntry], ip: IpAddr) -> Option<&GidEntry> {
    let want = ip.to_canonical();
    table
        .iter()
        .filter(|e| e.gid_type == Some(GidType::RoceV2) && e.ip() == want)
        .min_by_key(|e| e.index)
}

/// Searches every port of every device under `root` for the RoCE v2 GID of `ip`.
///
/// # Errors
/// [`GidError::NoDevices`] when `root` lists no device; [`GidError::NoRoceV2Gid`]
/// naming every table looked at (device, port, its used entries) when none fits.
pub fn find_roce_v2_gid(root: &Path, ip: IpAddr) -> Result<GidEntry, GidError> {
    let devices = list_devices(root);
    if devices.is_empty() {
        return Err(GidError::NoDevices {
            root: root.to_path_buf(),
        });
    }
    let mut seen = Vec::new();
    for dev in &devices {
        for port in list_ports(root, dev) {
            let path = port_dir(root, dev, port).join("gids");
            match read_gid_table(root, dev, port) {
                Ok(table) => {
                    if let Some(e) = select_roce_v2_gid(&table, ip) {
                        return Ok(e.clone());
                    }
                    let entries: Vec<String> = table.iter().map(|e| e.to_string()).collect();
                    seen.push(format!(
                        "{} ({})",
                        path.display(),
                        if entries.is_empty() {
                            "empty".to_string()
                        } else {
                            entries.join(", ")
                        }
                    ));
                }
                Err(e) => seen.push(format!("{} (unreadable: {e})", path.display())),
            }
        }
    }
    Err(GidError::NoRoceV2Gid {
        ip,
        tables: seen.join("; "),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    /// One slot of a constructed table: (device, port, index, gid text, type text, ndev
    /// text); `None` leaves the file out (as an unreadable one).
    type Slot<'a> = (&'a str, u8, u32, &'a str, Option<&'a str>, Option<&'a str>);

    /// A sysfs-shaped tree of `entries`.
    fn tree(entries: &[Slot]) -> tempfile::TempDir {
        let root = tempfile::tempdir().unwrap();
        for &(dev, port, i, gid, ty, ndev) in entries {
            let p = port_dir(root.path(), dev, port);
            fs::create_dir_all(p.join("gids")).unwrap();
            fs::create_dir_all(p.join("gid_attrs/types")).unwrap();
            fs::create_dir_all(p.join("gid_attrs/ndevs")).unwrap();
            fs::write(p.join("gids").join(i.to_string()), format!("{gid}\n")).unwrap();
            if let Some(t) = ty {
                fs::write(
                    p.join("gid_attrs/types").join(i.to_string()),
                    format!("{t}\n"),
                )
                .unwrap();
            }
            if let Some(n) = ndev {
                fs::write(
                    p.join("gid_attrs/ndevs").join(i.to_string()),
                    format!("{n}\n"),
                )
                .unwrap();
            }
        }
        root
    }

    const ZERO: &str = "0000:0000:0000:0000:0000:0000:0000:0000";
    const LL: &str = "fe80:0000:0000:0000:5054:00ff:fe77:000a";
    const V4_10: &str = "0000:0000:0000:0000:0000:ffff:c0a8:4d0a";
    const V6_10: &str = "fd77:0000:0000:0000:0000:0000:0000:0010";

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn parses_sysfs_gid_text() {
        assert_eq!(parse_gid(LL), Some("fe80::5054:ff:fe77:a".parse().unwrap()));
        assert_eq!(
            parse_gid(V4_10),
            Some("::ffff:192.168.77.10".parse().unwrap())
        );
        assert_eq!(parse_gid(ZERO), Some(Ipv6Addr::UNSPECIFIED));
        assert_eq!(parse_gid("fe80::1"), None);
        assert_eq!(parse_gid("fe80:0:0:0:0:0:0:zz"), None);
        assert_eq!(parse_gid(""), None);
        assert_eq!(GidType::parse("RoCE v2\n"), Some(GidType::RoceV2));
        assert_eq!(GidType::parse("IB/RoCE v1"), Some(GidType::IbRoceV1));
        assert_eq!(GidType::parse("RoCE v3"), None);
    }

    #[test]
    fn v2_entry_chosen_over_v1_for_the_same_address() {
        // rdma_cm's usual layout: each address twice, RoCE v1 first.
        let t = tree(&[
            ("mlx5_0", 1, 0, LL, Some("IB/RoCE v1"), Some("eth0")),
            ("mlx5_0", 1, 1, LL, Some("RoCE v2"), Some("eth0")),
            ("mlx5_0", 1, 2, V4_10, Some("IB/RoCE v1"), Some("eth0")),
            ("mlx5_0", 1, 3, V4_10, Some("RoCE v2"), Some("eth0")),
        ]);
        let e = find_roce_v2_gid(t.path(), ip("192.168.77.10")).unwrap();
        assert_eq!((e.device.as_str(), e.port, e.index), ("mlx5_0", 1, 3));
        assert_eq!(e.gid_type, Some(GidType::RoceV2));
        assert_eq!(e.ip(), ip("192.168.77.10"));
        // An IPv4-mapped IPv6 address means the same GID.
        let e = find_roce_v2_gid(t.path(), ip("::ffff:192.168.77.10")).unwrap();
        assert_eq!(e.index, 3);
    }

    #[test]
    fn only_roce_v1_for_the_address_is_an_error_naming_the_table() {
        let t = tree(&[
            ("mlx5_0", 1, 0, LL, Some("RoCE v2"), Some("eth0")),
            ("mlx5_0", 1, 1, V4_10, Some("IB/RoCE v1"), Some("eth0")),
        ]);
        let err = find_roce_v2_gid(t.path(), ip("192.168.77.10")).unwrap_err();
        let msg = err.to_string();
        assert!(matches!(err, GidError::NoRoceV2Gid { .. }), "{msg}");
        assert!(msg.contains("mlx5_0/ports/1/gids"), "{msg}");
        assert!(
            msg.contains("[1] ::ffff:192.168.77.10 IB/RoCE v1 eth0"),
            "{msg}"
        );
        assert!(msg.contains("no RoCE v2 GID for 192.168.77.10"), "{msg}");
    }

    #[test]
    fn ipv6_address_and_link_local_only() {
        let t = tree(&[
            ("rxe0", 1, 0, LL, Some("RoCE v2"), Some("eth0")),
            ("rxe0", 1, 1, V6_10, Some("RoCE v2"), Some("eth0")),
        ]);
        let e = find_roce_v2_gid(t.path(), ip("fd77::10")).unwrap();
        assert_eq!(e.index, 1);
        // Only link-local (and the IPv6 one): an IPv4 address finds nothing, index 0
        // is not taken by accident.
        let err = find_roce_v2_gid(t.path(), ip("192.168.77.10")).unwrap_err();
        assert!(matches!(err, GidError::NoRoceV2Gid { .. }));
        // Asking for the link-local address itself is explicit, and allowed.
        let e = find_roce_v2_gid(t.path(), ip("fe80::5054:ff:fe77:a")).unwrap();
        assert_eq!(e.index, 0);
    }

    #[test]
    fn vlan_netdev_entry_is_found_and_named() {
        let vlan = "0000:0000:0000:0000:0000:ffff:c0a8:640a"; // 192.168.100.10
        let t = tree(&[
            ("rxe0", 1, 0, LL, Some("RoCE v2"), Some("eth0")),
            ("rxe0", 1, 1, V4_10, Some("RoCE v2"), Some("eth0")),
            ("rxe0", 1, 2, vlan, Some("IB/RoCE v1"), Some("eth0.100")),
            ("rxe0", 1, 3, vlan, Some("RoCE v2"), Some("eth0.100")),
        ]);
        let e = find_roce_v2_gid(t.path(), ip("192.168.100.10")).unwrap();
        assert_eq!((e.index, e.ndev.as_deref()), (3, Some("eth0.100")));
        let e = find_roce_v2_gid(t.path(), ip("192.168.77.10")).unwrap();
        assert_eq!((e.index, e.ndev.as_deref()), (1, Some("eth0")));
    }

    #[test]
    fn empty_slots_and_unreadable_type_files_are_skipped() {
        let t = tree(&[
            ("rxe0", 1, 0, LL, Some("RoCE v2"), Some("eth0")),
            // empty slots as the kernel shows them: zero GID, no readable attributes
            ("rxe0", 1, 1, ZERO, None, None),
            ("rxe0", 1, 2, ZERO, None, None),
            // a used GID whose type does not read: never chosen
            ("rxe0", 1, 3, V4_10, None, Some("eth0")),
            ("rxe0", 1, 10, V6_10, Some("RoCE v2"), None),
        ]);
        // A type "file" that fails to read with EISDIR (as root can read any mode).
        let p = port_dir(t.path(), "rxe0", 1);
        fs::create_dir_all(p.join("gid_attrs/types/3")).unwrap();
        let table = read_gid_table(t.path(), "rxe0", 1).unwrap();
        let idx: Vec<u32> = table.iter().map(|e| e.index).collect();
        assert_eq!(idx, vec![0, 3, 10], "empty slots skipped, numeric order");
        assert_eq!(table[1].gid_type, None);
        assert_eq!(table[2].ndev, None);
        assert!(select_roce_v2_gid(&table, ip("192.168.77.10")).is_none());
        assert_eq!(
            select_roce_v2_gid(&table, ip("fd77::10")).map(|e| e.index),
            Some(10)
        );
        let msg = find_roce_v2_gid(t.path(), ip("192.168.77.10"))
            .unwrap_err()
            .to_string();
        assert!(msg.contains("(type unreadable)"), "{msg}");
    }

    #[test]
    fn no_devices_is_a_typed_error() {
        let empty = tempfile::tempdir().unwrap();
        let err = find_roce_v2_gid(empty.path(), ip("192.168.77.10")).unwrap_err();
        assert!(matches!(err, GidError::NoDevices { .. }));
        assert!(err.to_string().starts_with("no RDMA devices"), "{err}");
        let missing = empty.path().join("nope");
        assert!(matches!(
            find_roce_v2_gid(&missing, ip("192.168.77.10")),
            Err(GidError::NoDevices { .. })
        ));
    }

    /// The table of rxe0 recorded in the QEMU guest (tests/interop/verbs/guest-gids.sh,
    /// Linux 6.1; eth0 192.168.77.10 and fd77::10, VLAN eth0.100 192.168.100.10; see
    /// testdata/rxe-gids/README.md): link-local, IPv4-mapped, IPv6 and VLAN entries,
    /// all RoCE v2, empty slots with unreadable attributes.
    #[test]
    fn recorded_rxe_table() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata/rxe-gids");
        let table = read_gid_table(&root, "rxe0", 1).unwrap();
        let idx: Vec<u32> = table.iter().map(|e| e.index).collect();
        assert_eq!(idx, vec![0, 1, 2, 3, 4], "slots 5-15 are empty");
        let v4 = find_roce_v2_gid(&root, ip("192.168.77.10")).unwrap();
        assert_eq!(v4.gid, "::ffff:192.168.77.10".parse::<Ipv6Addr>().unwrap());
        assert_eq!((v4.index, v4.gid_type), (1, Some(GidType::RoceV2)));
        assert_eq!(v4.ndev.as_deref(), Some("eth0"));
        let vlan = find_roce_v2_gid(&root, ip("192.168.100.10")).unwrap();
        assert_eq!((vlan.index, vlan.ndev.as_deref()), (2, Some("eth0.100")));
        let v6 = find_roce_v2_gid(&root, ip("fd77::10")).unwrap();
        assert_eq!((v6.index, v6.ndev.as_deref()), (4, Some("eth0")));
        // The link-local GID is listed for eth0 and eth0.100: the lowest index wins.
        let ll = find_roce_v2_gid(&root, ip("fe80::5054:ff:fe77:a")).unwrap();
        assert_eq!((ll.index, ll.ndev.as_deref()), (0, Some("eth0")));
        let err = find_roce_v2_gid(&root, ip("192.168.77.11")).unwrap_err();
        assert!(
            err.to_string().contains("rxe-gids/rxe0/ports/1/gids"),
            "{err}"
        );
    }
}
