//! What the host keeps from Identify Controller and Identify Namespace (NVMe Base 2.x
//! §5.17.2.1 Figure "Identify Controller Data Structure", NVM Command Set 1.x §4.1.5.1
//! Figure "Identify Namespace Data Structure").
//!
//! Parsed from the raw 4096-byte structures by field offset; short input is an error.

/// Length of an Identify data structure in bytes.
pub const IDENTIFY_LEN: usize = 4096;

fn le16(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}
fn le32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}
fn le64(b: &[u8], at: usize) -> u64 {
    u64::from(le32(b, at)) | (u64::from(le32(b, at + 4)) << 32)
}
fn ascii(b: &[u8]) -> String {
    String::from_utf8_lossy(b).trim_end_matches([' ', '\0']).to_string()
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
    /// Parses an Identify Controller structure. Errors if shorter than 4096 bytes.
    pub fn parse(b: &[u8]) -> Result<Self, String> {
        if b.len() < IDENTIFY_LEN {
            return Err(format!("Identify Controller data is {} bytes, expected {IDENTIFY_LEN}", b.len()));
        }
        Ok(ControllerInfo {
            vid: le16(b, 0),
            serial_number: ascii(&b[4..24]),
            model_number: ascii(&b[24..64]),
            firmware_revision: ascii(&b[64..72]),
            mdts: b[77],
            cntlid: le16(b, 78),
            ver: le32(b, 80),
            ctratt: le32(b, 96),
            kas: le16(b, 320),
            maxcmd: le16(b, 514),
            nn: le32(b, 516),
            oncs: le16(b, 520),
            vwc: b[525],
            sgls: le32(b, 536),
            subnqn: String::from_utf8_lossy(&b[768..1024]).trim_end_matches('\0').to_string(),
            ioccsz: le32(b, 1792),
            iorcsz: le32(b, 1796),
            icdoff: le16(b, 1800),
            msdbd: b[1803],
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
        Some(if shift >= 40 { 1 << 40 } else { 1usize << shift })
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
}

impl NamespaceInfo {
    /// Parses an Identify Namespace structure. Errors if shorter than 4096 bytes, if
    /// the namespace is inactive (NSZE 0) or if the LBA format's LBADS is out of
    /// range (< 9 or > 16).
    pub fn parse(b: &[u8]) -> Result<Self, String> {
        if b.len() < IDENTIFY_LEN {
            return Err(format!("Identify Namespace data is {} bytes, expected {IDENTIFY_LEN}", b.len()));
        }
        let nsze = le64(b, 0);
        if nsze == 0 {
            return Err("namespace is not active (NSZE 0)".into());
        }
        let flbas = b[26];
        // FLBAS bits 3:0 (low) and 6:5 (high, for more than 16 formats).
        let index = usize::from((flbas & 0xF) | ((flbas >> 5) & 3) << 4);
        let lbaf = le32(b, 128 + 4 * index);
        let lbads = (lbaf >> 16) & 0xFF;
        if !(9..=16).contains(&lbads) {
            return Err(format!("LBA format {index} has LBADS {lbads}, outside 9..=16"));
        }
        Ok(NamespaceInfo { nsze, ncap: le64(b, 8), flbas, block_size: 1 << lbads })
    }
}

/// Parses an Active Namespace ID list (CNS 02h): the non-zero NSIDs before the first 0.
pub fn parse_ns_list(b: &[u8]) -> Vec<u32> {
    b.chunks_exact(4).map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]])).take_while(|&n| n != 0).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

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
        assert_eq!((c.mdts, c.cntlid, c.maxcmd, c.nn, c.msdbd), (8, 1, 1024, 1, 1));
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
        let mut b = vec![0u8; 16];
        b[0] = 1;
        b[4] = 3;
        assert_eq!(parse_ns_list(&b), vec![1, 3]);
    }
}
