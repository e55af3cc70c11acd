//! What the host keeps from Identify Controller and Identify Namespace (NVMe Base 2.x
//! §5.17.2.1 Figure "Identify Controller Data Structure", NVM Command Set 1.x §4.1.5.1
//! Figure "Identify Namespace Data Structure").
//!
//! Owned summaries read through the `nvme` crate's wire types; short input is an error.

use nvme::{IdentifyController, IdentifyNamespace, NamespaceList};
use zerocopy::FromBytes;

/// Length of an Identify data structure in bytes.
pub const IDENTIFY_LEN: usize = 4096;

/// Why Identify data could not be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IdentifyError {
    /// Fewer than [`IDENTIFY_LEN`] bytes.
    #[error("{structure} data is {len} bytes, expected {IDENTIFY_LEN}")]
    Short {
        /// "Identify Controller" or "Identify Namespace".
        structure: &'static str,
        /// Bytes received.
        len: usize,
    },
    /// The namespace is not active (NSZE 0).
    #[error("namespace is not active (NSZE 0)")]
    Inactive,
    /// The LBA format in use has an LBADS outside 9..=16 (512 B to 64 KiB blocks).
    #[error("the LBA format in use (FLBAS {flbas:#x}) has LBADS {lbads}, outside 9..=16")]
    BlockSize {
        /// Formatted LBA Size (byte 26).
        flbas: u8,
        /// LBA Data Size of that format (log2 of the block size).
        lbads: u8,
    },
}

fn text(r: Result<&str, nvme::StrFieldError>, raw: &[u8]) -> String {
    match r {
        Ok(s) => s.to_string(),
        // Not ASCII / not terminated: keep what is readable rather than fail bring-up.
        Err(_) => String::from_utf8_lossy(raw)
            .trim_end_matches([' ', '\0'])
            .to_string(),
    }
}

/// SGLS bit 20: the controller accepts SGL Data Block descriptors with sub type Offset
/// in command capsules (in-capsule data); a Linux host sends in-capsule data only then.
pub const SGLS_OFFSET_SUPPORTED: u32 = 1 << 20;

/// The Identify Controller fields the host uses.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ControllerInfo {
    /// PCI Vendor ID (bytes 0..2).
    pub vid: u16,
    /// Serial Number (bytes 4..24), trailing spaces removed.
    pub serial_number: String,
    /// Model Number (bytes 24..64).
    pub model_number: String,
    /// Firmware Revision (bytes 64..72).
    pub firmware_revision: String,
    /// Controller Multi-Path I/O and Namespace Sharing Capabilities (byte 76): bit 3
    /// ANA reporting supported.
    pub cmic: u8,
    /// Optional Asynchronous Events Supported (bytes 92..96): bit 8 Namespace
    /// Attribute notices, bit 11 ANA Change notices, bit 31 Discovery Log Page Change.
    pub oaes: u32,
    /// Asynchronous Event Request Limit (byte 259, 0's based): AERs the controller
    /// holds at once, minus one.
    pub aerl: u8,
    /// Asymmetric Namespace Access Capabilities (byte 343).
    pub anacap: u8,
    /// Number of ANA Group Identifiers (bytes 348..352).
    pub nanagrpid: u32,
    /// Maximum Data Transfer Size (byte 77): 2^MDTS units of the minimum memory page
    /// size (CAP.MPSMIN); 0 = no limit.
    pub mdts: u8,
    /// Controller ID (bytes 78..80).
    pub cntlid: u16,
    /// Version (bytes 80..84).
    pub ver: u32,
    /// Controller Attributes (bytes 96..100).
    pub ctratt: u32,
    /// Keep Alive Support granularity in 100 ms units (bytes 320..322); 0 = none.
    pub kas: u16,
    /// Maximum Outstanding Commands (bytes 514..516); 0 = not reported.
    pub maxcmd: u16,
    /// Number of Namespaces, the largest NSID (bytes 516..520).
    pub nn: u32,
    /// Optional NVM Command Support (bytes 520..522).
    pub oncs: u16,
    /// Volatile Write Cache (byte 525).
    pub vwc: u8,
    /// SGL Support (bytes 536..540).
    pub sgls: u32,
    /// NVM Subsystem NVMe Qualified Name (bytes 768..1024).
    pub subnqn: String,
    /// I/O Queue Command Capsule Supported Size in 16-byte units, including the 64-byte
    /// SQE (bytes 1792..1796, fabrics only).
    pub ioccsz: u32,
    /// I/O Queue Response Capsule Supported Size in 16-byte units (bytes 1796..1800).
    pub iorcsz: u32,
    /// In Capsule Data Offset in 16-byte units (bytes 1800..1802).
    pub icdoff: u16,
    /// Maximum SGL Data Block Descriptors (byte 1803).
    pub msdbd: u8,
}

impl ControllerInfo {
    /// Parses an Identify Controller structure ([`nvme::IdentifyController`]).
    ///
    /// # Errors
    /// [`IdentifyError::Short`] if shorter than 4096 bytes.
    pub fn parse(b: &[u8]) -> Result<Self, IdentifyError> {
        let (c, _) = IdentifyController::read_from_prefix(b).map_err(|_| IdentifyError::Short {
            structure: "Identify Controller",
            len: b.len(),
        })?;
        Ok(ControllerInfo {
            vid: c.vid.get(),
            serial_number: text(c.sn(), &c.sn),
            model_number: text(c.mn(), &c.mn),
            firmware_revision: text(c.fr(), &c.fr),
            cmic: c.cmic,
            oaes: c.oaes.get(),
            aerl: c.aerl,
            anacap: c.anacap,
            nanagrpid: c.nanagrpid.get(),
            mdts: c.mdts,
            cntlid: c.cntlid.get(),
            ver: c.ver.get(),
            ctratt: c.ctratt.get(),
            kas: c.kas.get(),
            maxcmd: c.maxcmd.get(),
            nn: c.nn.get(),
            oncs: c.oncs.get(),
            vwc: c.vwc,
            sgls: c.sgls.get(),
            subnqn: text(c.subnqn(), &c.subnqn),
            ioccsz: c.ioccsz.get(),
            iorcsz: c.iorcsz.get(),
            icdoff: c.icdoff.get(),
            msdbd: c.msdbd,
        })
    }

    /// Bytes of in-capsule data an I/O command may carry: IOCCSZ x 16 - 64 if SGLS bit
    /// 20 is set and ICDOFF is 0 (the host puts the data right after the SQE), else 0.
    pub fn in_capsule_data_size(&self) -> usize {
        if self.sgls & SGLS_OFFSET_SUPPORTED == 0 || self.icdoff != 0 {
            return 0;
        }
        (self.ioccsz as usize * 16).saturating_sub(64)
    }

    /// The largest transfer in bytes per command from MDTS and the minimum memory page
    /// size `2^(12 + mpsmin)`; `None` if MDTS is 0 (no limit).
    pub fn max_transfer_bytes(&self, mpsmin: u8) -> Option<usize> {
        if self.mdts == 0 {
            return None;
        }
        let shift = 12u32 + u32::from(mpsmin) + u32::from(self.mdts);
        Some(if shift >= 40 {
            1 << 40
        } else {
            1usize << shift
        })
    }
}

/// The Identify Namespace fields the host uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NamespaceInfo {
    /// Namespace Size in logical blocks (bytes 0..8).
    pub nsze: u64,
    /// Namespace Capacity in logical blocks (bytes 8..16).
    pub ncap: u64,
    /// Formatted LBA Size (byte 26): the index of the LBA format in use.
    pub flbas: u8,
    /// The logical block size in bytes, 2^LBADS of the format in use.
    pub block_size: u32,
    /// Namespace Multi-path I/O and Namespace Sharing Capabilities (byte 30): bit 0
    /// the namespace may be reached through several controllers.
    pub nmic: u8,
    /// ANA Group Identifier (bytes 92..96): the namespace's ANA group, 0 when the
    /// controller reports no ANA.
    pub anagrpid: u32,
    /// Namespace Globally Unique Identifier (bytes 104..120); all zeros: none.
    pub nguid: [u8; 16],
    /// IEEE Extended Unique Identifier (bytes 120..128); all zeros: none.
    pub eui64: [u8; 8],
}

impl NamespaceInfo {
    /// Parses an Identify Namespace structure ([`nvme::IdentifyNamespace`]).
    ///
    /// # Errors
    /// [`IdentifyError::Short`] if shorter than 4096 bytes, [`IdentifyError::Inactive`]
    /// if NSZE is 0, [`IdentifyError::BlockSize`] if the LBA format in use has an
    /// LBADS outside 9..=16.
    pub fn parse(b: &[u8]) -> Result<Self, IdentifyError> {
        let (ns, _) = IdentifyNamespace::read_from_prefix(b).map_err(|_| IdentifyError::Short {
            structure: "Identify Namespace",
            len: b.len(),
        })?;
        let nsze = ns.nsze.get();
        if nsze == 0 {
            return Err(IdentifyError::Inactive);
        }
        let lbads = ns.current_lbaf().map_or(0, |f| f.lbads);
        if !(9..=16).contains(&lbads) {
            return Err(IdentifyError::BlockSize {
                flbas: ns.flbas,
                lbads,
            });
        }
        Ok(NamespaceInfo {
            nsze,
            ncap: ns.ncap.get(),
            flbas: ns.flbas,
            block_size: 1 << lbads,
            nmic: ns.nmic,
            anagrpid: ns.anagrpid.get(),
            nguid: ns.nguid,
            eui64: ns.eui64,
        })
    }
}

/// A namespace's identifiers as Linux's host compares them across paths
/// (`struct nvme_ns_ids`): from the Namespace Identification Descriptor list
/// (Identify CNS 03h, NVMe Base 2.x §5.17.2.3), else from Identify Namespace's NGUID
/// and EUI64 fields. All zeros: the controller reported that identifier as absent.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct NamespaceIds {
    /// IEEE EUI-64 (NIDT 1h, or Identify Namespace bytes 120..128).
    pub eui64: [u8; 8],
    /// NGUID (NIDT 2h, or Identify Namespace bytes 104..120).
    pub nguid: [u8; 16],
    /// Namespace UUID (NIDT 3h; only in the descriptor list).
    pub uuid: [u8; 16],
    /// Command Set Identifier (NIDT 4h): 0 the NVM command set, also when absent.
    pub csi: u8,
}

impl NamespaceIds {
    /// The identifiers of Identify Namespace (NGUID, EUI-64), before or without the
    /// descriptor list.
    pub fn from_info(info: &NamespaceInfo) -> Self {
        NamespaceIds {
            eui64: info.eui64,
            nguid: info.nguid,
            ..NamespaceIds::default()
        }
    }

    /// Adds the descriptors of a CNS 03h list (`data`, up to 4096 bytes); a
    /// descriptor's identifier replaces the one Identify Namespace gave.
    ///
    /// Errors: the list is malformed (an unknown NIDT or a wrong NIDL).
    pub fn add_descriptors(&mut self, data: &[u8]) -> Result<(), nvme::NsIdDescriptorError> {
        for d in nvme::NsIdDescriptorList::parse(data)? {
            match d {
                nvme::NsIdDescriptor::Eui64(v) => self.eui64 = v,
                nvme::NsIdDescriptor::Nguid(v) => self.nguid = v,
                nvme::NsIdDescriptor::Uuid(v) => self.uuid = v,
                nvme::NsIdDescriptor::Csi(v) => self.csi = v,
            }
        }
        Ok(())
    }

    /// Whether any identifier (UUID, NGUID, EUI-64) is present.
    pub fn any(&self) -> bool {
        self.uuid != [0; 16] || self.nguid != [0; 16] || self.eui64 != [0; 8]
    }

    /// Whether two paths' namespaces are one namespace, as Linux's
    /// `nvme_ns_ids_equal` decides: every identifier and the CSI equal, and at least
    /// one identifier present (without one nothing proves the namespaces are the same).
    pub fn same_namespace(&self, other: &NamespaceIds) -> bool {
        self.any() && self == other
    }
}

/// Parses an Active Namespace ID list (CNS 02h, [`nvme::NamespaceList`]): the NSIDs
/// before the first 0; empty if shorter than 4096 bytes.
pub fn parse_ns_list(b: &[u8]) -> Vec<u32> {
    NamespaceList::read_from_prefix(b)
        .map(|(l, _)| l.iter().collect())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn namespaces_on_two_paths_are_one_when_every_identifier_matches() {
        // Linux nvmet: Identify Namespace has no NGUID or EUI-64, the CNS 03h list
        // carries a UUID (made when the namespace was created) and the CSI.
        let info = NamespaceInfo {
            nsze: 8,
            ncap: 8,
            flbas: 0,
            block_size: 512,
            nmic: 1,
            anagrpid: 1,
            nguid: [0; 16],
            eui64: [0; 8],
        };
        let list = |uuid: [u8; 16]| {
            nvme::NsIdDescriptorList::new()
                .with(nvme::NsIdDescriptor::Uuid(uuid))
                .and_then(|l| l.with(nvme::NsIdDescriptor::Csi(0)))
                .unwrap()
        };
        let ids = |l: &nvme::NsIdDescriptorList| {
            let mut i = NamespaceIds::from_info(&info);
            i.add_descriptors(l.as_bytes()).unwrap();
            i
        };
        let a = ids(&list([7; 16]));
        assert_eq!(a.uuid, [7; 16]);
        assert!(a.same_namespace(&ids(&list([7; 16]))));
        assert!(!a.same_namespace(&ids(&list([8; 16]))));
        // No identifier at all: nothing proves two namespaces are one.
        let none = NamespaceIds::from_info(&info);
        assert!(!none.same_namespace(&none));
        // A descriptor NGUID replaces Identify Namespace's; a different one differs.
        let mut b = a;
        b.add_descriptors(
            nvme::NsIdDescriptorList::new()
                .with(nvme::NsIdDescriptor::Nguid([1; 16]))
                .unwrap()
                .as_bytes(),
        )
        .unwrap();
        assert!(!a.same_namespace(&b));
        // A malformed list is an error, not a guess.
        let mut bad = [0u8; 8];
        bad[0] = 3;
        bad[1] = 4;
        assert!(NamespaceIds::default().add_descriptors(&bad).is_err());
    }

    #[test]
    fn controller_fields() {
        let mut b = vec![0u8; IDENTIFY_LEN];
        b[4..10].copy_from_slice(b"abc123");
        b[10..24].fill(b' ');
        b[77] = 8;
        b[78] = 1;
        b[514..516].copy_from_slice(&1024u16.to_le_bytes());
        b[516] = 1;
        // Linux nvmet: SGLS 0x00100005 (capture frame 128), IOCCSZ 260 for 4 KiB.
        b[536..540].copy_from_slice(&0x0010_0005u32.to_le_bytes());
        b[1792..1796].copy_from_slice(&260u32.to_le_bytes());
        b[1796] = 1;
        b[1803] = 1;
        let c = ControllerInfo::parse(&b).unwrap();
        assert_eq!(c.serial_number, "abc123");
        assert_eq!(
            (c.mdts, c.cntlid, c.maxcmd, c.nn, c.msdbd),
            (8, 1, 1024, 1, 1)
        );
        assert_eq!(c.in_capsule_data_size(), 4096);
        assert_eq!(c.max_transfer_bytes(0), Some(1 << 20));
        b[536..540].copy_from_slice(&5u32.to_le_bytes());
        assert_eq!(ControllerInfo::parse(&b).unwrap().in_capsule_data_size(), 0);
        assert!(ControllerInfo::parse(&b[..100]).is_err());
    }

    #[test]
    fn namespace_fields() {
        let mut b = vec![0u8; IDENTIFY_LEN];
        assert!(NamespaceInfo::parse(&b).is_err());
        b[0..8].copy_from_slice(&131072u64.to_le_bytes());
        b[26] = 1;
        b[128 + 4 + 2] = 12; // LBAF1: LBADS 12 = 4096 B
        let n = NamespaceInfo::parse(&b).unwrap();
        assert_eq!((n.nsze, n.block_size), (131072, 4096));
        b[128 + 4 + 2] = 40;
        assert!(NamespaceInfo::parse(&b).is_err());
    }

    #[test]
    fn ns_list() {
        let mut b = vec![0u8; IDENTIFY_LEN];
        b[0] = 1;
        b[4] = 3;
        b[12] = 9; // after the terminating zero: ignored
        assert_eq!(parse_ns_list(&b), vec![1, 3]);
        assert_eq!(parse_ns_list(&b[..16]), Vec::<u32>::new());
    }
}
