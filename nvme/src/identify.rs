//! Identify data structures (NVMe Base 2.x §5.17.2): Identify Controller
//! (CNS 01h), Identify Namespace (CNS 00h, NVM Command Set 1.x §4.1.5.1),
//! the Active Namespace ID list (CNS 02h) and the Namespace Identification
//! Descriptor list (CNS 03h). Each is 4096 bytes on the wire.

use thiserror::Error;
use zerocopy::byteorder::little_endian::{U16, U32, U64};
use zerocopy::{FromBytes, FromZeros, Immutable, IntoBytes, KnownLayout, Unaligned};

use crate::strings::{
    read_ascii_padded, read_nul_terminated, write_ascii_padded, write_nul_padded, StrFieldError,
};
use crate::NVME_NQN_MAX;

/// Size of every Identify data structure.
pub const IDENTIFY_DATA_SIZE: usize = 4096;

/// CNTRLTYPE 1: I/O controller.
pub const CNTRLTYPE_IO: u8 = 1;
/// CNTRLTYPE 2: discovery controller.
pub const CNTRLTYPE_DISCOVERY: u8 = 2;
/// CNTRLTYPE 3: administrative controller.
pub const CNTRLTYPE_ADMIN: u8 = 3;

/// CTRATT bit 0: 128-bit Host Identifier supported.
pub const CTRATT_HOST_ID_128: u32 = 1 << 0;
/// CTRATT bit 6: Traffic Based Keep Alive (TBKAS).
pub const CTRATT_TBKAS: u32 = 1 << 6;

/// OAES bit 8: Namespace Attribute Notices.
pub const OAES_NS_ATTR: u32 = 1 << 8;
/// OAES bit 11: Asymmetric Namespace Access Change Notices.
pub const OAES_ANA_CHANGE: u32 = 1 << 11;
/// OAES bit 31: Discovery Log Page Change Notification.
pub const OAES_DISCOVERY_CHANGE: u32 = 1 << 31;

/// ONCS bit 0: Compare supported.
pub const ONCS_COMPARE: u16 = 1 << 0;
/// ONCS bit 2: Dataset Management supported.
pub const ONCS_DSM: u16 = 1 << 2;
/// ONCS bit 3: Write Zeroes supported.
pub const ONCS_WRITE_ZEROES: u16 = 1 << 3;

/// SGLS bits 1:0 = 01b: SGLs supported, no alignment requirement.
pub const SGLS_SUPPORTED: u32 = 0b01;
/// SGLS bit 2: Keyed SGL Data Block descriptor supported.
pub const SGLS_KEYED: u32 = 1 << 2;
/// SGLS bit 20: Address field of SGL Data Block may be an offset
/// (in-capsule data); Linux hosts send in-capsule data only with it.
pub const SGLS_OFFSET: u32 = 1 << 20;

/// Power State Descriptor, 32 bytes (NVMe Base 2.x §5.17.2.1 Figure "Power
/// State Descriptor Data Structure").
#[derive(
    Clone,
    Copy,
    Debug,
    Default,
    PartialEq,
    Eq,
    FromBytes,
    IntoBytes,
    KnownLayout,
    Immutable,
    Unaligned,
)]
#[repr(C)]
pub struct PowerStateDescriptor {
    /// Maximum Power (centiwatts unless MXPS).
    pub mp: U16,
    /// Reserved.
    pub rsvd2: u8,
    /// MXPS (bit 0), NOPS (bit 1).
    pub flags: u8,
    /// Entry Latency, microseconds.
    pub enlat: U32,
    /// Exit Latency, microseconds.
    pub exlat: U32,
    /// Relative Read Throughput.
    pub rrt: u8,
    /// Relative Read Latency.
    pub rrl: u8,
    /// Relative Write Throughput.
    pub rwt: u8,
    /// Relative Write Latency.
    pub rwl: u8,
    /// Idle Power.
    pub idlp: U16,
    /// Idle Power Scale (bits 7:6).
    pub ips: u8,
    /// Reserved.
    pub rsvd19: u8,
    /// Active Power.
    pub actp: U16,
    /// Active Power Workload (bits 2:0) and Scale (bits 7:6).
    pub apw_aps: u8,
    /// Reserved.
    pub rsvd23: [u8; 9],
}
assert_size!(PowerStateDescriptor, 32);

/// Identify Controller data structure, 4096 bytes (NVMe Base 2.x §5.17.2.1
/// Figure "Identify - Identify Controller Data Structure, I/O Command Set
/// Independent"), with the NVMe over Fabrics attributes at 1792.
///
/// Fields keep the specification's abbreviations; multi-byte fields are
/// little endian. Text fields have setters/getters (`set_sn`, `sn`, ...).
#[derive(Clone, Debug, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned)]
#[repr(C)]
pub struct IdentifyController {
    /// PCI Vendor ID (0).
    pub vid: U16,
    /// PCI Subsystem Vendor ID (2).
    pub ssvid: U16,
    /// Serial Number, ASCII space padded (4..24).
    pub sn: [u8; 20],
    /// Model Number, ASCII space padded (24..64).
    pub mn: [u8; 40],
    /// Firmware Revision, ASCII space padded (64..72).
    pub fr: [u8; 8],
    /// Recommended Arbitration Burst (72).
    pub rab: u8,
    /// IEEE OUI Identifier (73..76).
    pub ieee: [u8; 3],
    /// Controller Multi-Path I/O and Namespace Sharing Capabilities (76).
    pub cmic: u8,
    /// Maximum Data Transfer Size, 2^n units of CAP.MPSMIN pages (77); 0 = no limit.
    pub mdts: u8,
    /// Controller ID (78).
    pub cntlid: U16,
    /// Version, same encoding as the VS property (80).
    pub ver: U32,
    /// RTD3 Resume Latency, microseconds (84).
    pub rtd3r: U32,
    /// RTD3 Entry Latency, microseconds (88).
    pub rtd3e: U32,
    /// Optional Asynchronous Events Supported (92).
    pub oaes: U32,
    /// Controller Attributes (96).
    pub ctratt: U32,
    /// Read Recovery Levels Supported (100).
    pub rrls: U16,
    /// Reserved (102..111).
    pub rsvd102: [u8; 9],
    /// Controller Type (111): 1 I/O, 2 discovery, 3 administrative.
    pub cntrltype: u8,
    /// FRU Globally Unique Identifier (112..128).
    pub fguid: [u8; 16],
    /// Command Retry Delay Times 1..3, 100 ms units (128..134).
    pub crdt: [U16; 3],
    /// Reserved (134..256; NVMe-MI fields at 253..256).
    pub rsvd134: [u8; 122],
    /// Optional Admin Command Support (256).
    pub oacs: U16,
    /// Abort Command Limit, 0's based (258).
    pub acl: u8,
    /// Asynchronous Event Request Limit, 0's based (259).
    pub aerl: u8,
    /// Firmware Updates (260).
    pub frmw: u8,
    /// Log Page Attributes (261).
    pub lpa: u8,
    /// Error Log Page Entries, 0's based (262).
    pub elpe: u8,
    /// Number of Power States Support, 0's based (263).
    pub npss: u8,
    /// Admin Vendor Specific Command Configuration (264).
    pub avscc: u8,
    /// Autonomous Power State Transition Attributes (265).
    pub apsta: u8,
    /// Warning Composite Temperature Threshold, kelvin (266).
    pub wctemp: U16,
    /// Critical Composite Temperature Threshold, kelvin (268).
    pub cctemp: U16,
    /// Maximum Time for Firmware Activation (270).
    pub mtfa: U16,
    /// Host Memory Buffer Preferred Size (272).
    pub hmpre: U32,
    /// Host Memory Buffer Minimum Size (276).
    pub hmmin: U32,
    /// Total NVM Capacity, bytes, 128 bit (280..296).
    pub tnvmcap: [u8; 16],
    /// Unallocated NVM Capacity, bytes, 128 bit (296..312).
    pub unvmcap: [u8; 16],
    /// Replay Protected Memory Block Support (312).
    pub rpmbs: U32,
    /// Extended Device Self-test Time (316).
    pub edstt: U16,
    /// Device Self-test Options (318).
    pub dsto: u8,
    /// Firmware Update Granularity (319).
    pub fwug: u8,
    /// Keep Alive Support: granularity in 100 ms units, 0 = unsupported (320).
    pub kas: U16,
    /// Host Controlled Thermal Management Attributes (322).
    pub hctma: U16,
    /// Minimum Thermal Management Temperature (324).
    pub mntmt: U16,
    /// Maximum Thermal Management Temperature (326).
    pub mxtmt: U16,
    /// Sanitize Capabilities (328).
    pub sanicap: U32,
    /// Host Memory Buffer Minimum Descriptor Entry Size (332).
    pub hmminds: U32,
    /// Host Memory Maximum Descriptors Entries (336).
    pub hmmaxd: U16,
    /// NVM Set Identifier Maximum (338).
    pub nsetidmax: U16,
    /// Endurance Group Identifier Maximum (340).
    pub endgidmax: U16,
    /// ANA Transition Time, seconds (342).
    pub anatt: u8,
    /// Asymmetric Namespace Access Capabilities (343).
    pub anacap: u8,
    /// ANA Group Identifier Maximum (344).
    pub anagrpmax: U32,
    /// Number of ANA Group Identifiers (348).
    pub nanagrpid: U32,
    /// Persistent Event Log Size (352).
    pub pels: U32,
    /// Domain Identifier (356).
    pub domainid: U16,
    /// Reserved (358..368).
    pub rsvd358: [u8; 10],
    /// Max Endurance Group Capacity (368..384).
    pub megcap: [u8; 16],
    /// Reserved (384..512).
    pub rsvd384: [u8; 128],
    /// Submission Queue Entry Size: max (7:4) and required (3:0), 2^n (512).
    pub sqes: u8,
    /// Completion Queue Entry Size: max (7:4) and required (3:0), 2^n (513).
    pub cqes: u8,
    /// Maximum Outstanding Commands (514).
    pub maxcmd: U16,
    /// Number of Namespaces: largest NSID (516).
    pub nn: U32,
    /// Optional NVM Command Support (520).
    pub oncs: U16,
    /// Fused Operation Support (522).
    pub fuses: U16,
    /// Format NVM Attributes (524).
    pub fna: u8,
    /// Volatile Write Cache (525): bit 0 present.
    pub vwc: u8,
    /// Atomic Write Unit Normal, 0's based blocks (526).
    pub awun: U16,
    /// Atomic Write Unit Power Fail, 0's based blocks (528).
    pub awupf: U16,
    /// I/O Command Set Vendor Specific Command Configuration (530).
    pub icsvscc: u8,
    /// Namespace Write Protection Capabilities (531).
    pub nwpc: u8,
    /// Atomic Compare & Write Unit (532).
    pub acwu: U16,
    /// Copy Descriptor Formats Supported (534).
    pub cdfs: U16,
    /// SGL Support (536).
    pub sgls: U32,
    /// Maximum Number of Allowed Namespaces (540).
    pub mnan: U32,
    /// Maximum Domain Namespace Attachments (544..560).
    pub maxdna: [u8; 16],
    /// Maximum I/O Controller Namespace Attachments (560).
    pub maxcna: U32,
    /// Reserved (564..768).
    pub rsvd564: [u8; 204],
    /// NVM Subsystem NVMe Qualified Name, NUL terminated (768..1024).
    pub subnqn: [u8; 256],
    /// Reserved (1024..1792).
    pub rsvd1024: [u8; 768],
    /// I/O Queue Command Capsule Supported Size, 16-byte units including
    /// the 64-byte SQE (1792).
    pub ioccsz: U32,
    /// I/O Queue Response Capsule Supported Size, 16-byte units (1796).
    pub iorcsz: U32,
    /// In Capsule Data Offset, 16-byte units after the SQE (1800).
    pub icdoff: U16,
    /// Fabrics Controller Attributes (1802): bit 0 static controller model.
    pub fcatt: u8,
    /// Maximum SGL Data Block Descriptors (1803).
    pub msdbd: u8,
    /// Optional Fabric Commands Support (1804): bit 0 Disconnect.
    pub ofcs: U16,
    /// Reserved (1806..2048).
    pub rsvd1806: [u8; 242],
    /// Power State Descriptors 0..31 (2048..3072).
    pub psd: [PowerStateDescriptor; 32],
    /// Vendor Specific (3072..4096).
    pub vs: [u8; 1024],
}
assert_size!(IdentifyController, 4096);

impl IdentifyController {
    /// An all-zero structure.
    pub fn zeroed() -> Self {
        Self::new_zeroed()
    }

    /// Sets SN (20 bytes, ASCII space padded). Errors: too long, not ASCII.
    pub fn set_sn(&mut self, sn: &str) -> Result<(), StrFieldError> {
        write_ascii_padded(&mut self.sn, sn)
    }

    /// Sets MN (40 bytes, ASCII space padded). Errors: too long, not ASCII.
    pub fn set_mn(&mut self, mn: &str) -> Result<(), StrFieldError> {
        write_ascii_padded(&mut self.mn, mn)
    }

    /// Sets FR (8 bytes, ASCII space padded). Errors: too long, not ASCII.
    pub fn set_fr(&mut self, fr: &str) -> Result<(), StrFieldError> {
        write_ascii_padded(&mut self.fr, fr)
    }

    /// Sets SUBNQN (NUL padded). Errors: over 223 bytes, holds NUL.
    pub fn set_subnqn(&mut self, nqn: &str) -> Result<(), StrFieldError> {
        write_nul_padded(&mut self.subnqn, nqn, NVME_NQN_MAX)
    }

    /// Serial Number without padding. Errors: non-ASCII content.
    pub fn sn(&self) -> Result<&str, StrFieldError> {
        read_ascii_padded(&self.sn)
    }

    /// Model Number without padding. Errors: non-ASCII content.
    pub fn mn(&self) -> Result<&str, StrFieldError> {
        read_ascii_padded(&self.mn)
    }

    /// Firmware Revision without padding. Errors: non-ASCII content.
    pub fn fr(&self) -> Result<&str, StrFieldError> {
        read_ascii_padded(&self.fr)
    }

    /// Subsystem NQN. Errors: unterminated, too long, invalid UTF-8.
    pub fn subnqn(&self) -> Result<&str, StrFieldError> {
        read_nul_terminated(&self.subnqn, NVME_NQN_MAX)
    }

    /// In-capsule data bytes the controller accepts on I/O queues:
    /// IOCCSZ x 16 - 64 (0 if IOCCSZ is below 4).
    pub fn in_capsule_data_size(&self) -> u32 {
        (self.ioccsz.get().saturating_mul(16)).saturating_sub(64)
    }

    /// Maximum data transfer in bytes for a controller page size of
    /// `page_size` bytes (CAP.MPSMIN); `None` means no limit (MDTS 0).
    pub fn max_transfer_bytes(&self, page_size: u32) -> Option<u64> {
        match self.mdts {
            0 => None,
            n => Some(u64::from(page_size) << n.min(52)),
        }
    }
}

/// LBA Format Data Structure, 4 bytes (NVM Command Set 1.x §4.1.5.1 Figure
/// "LBA Format Data Structure").
#[derive(
    Clone,
    Copy,
    Debug,
    Default,
    PartialEq,
    Eq,
    FromBytes,
    IntoBytes,
    KnownLayout,
    Immutable,
    Unaligned,
)]
#[repr(C)]
pub struct LbaFormat {
    /// Metadata Size in bytes per LBA.
    pub ms: U16,
    /// LBA Data Size as a power of two (9 = 512 B, 12 = 4 KiB).
    pub lbads: u8,
    /// Relative Performance (bits 1:0).
    pub rp: u8,
}
assert_size!(LbaFormat, 4);

impl LbaFormat {
    /// A format of 2^`lbads`-byte blocks without metadata.
    pub fn new(lbads: u8) -> Self {
        LbaFormat {
            ms: U16::ZERO,
            lbads,
            rp: 0,
        }
    }

    /// Logical block size in bytes (0 if LBADS is out of range).
    pub fn block_size(&self) -> u64 {
        1u64.checked_shl(u32::from(self.lbads)).unwrap_or(0)
    }
}

/// Identify Namespace data structure for the NVM Command Set, 4096 bytes
/// (NVM Command Set 1.x §4.1.5.1 / NVMe Base 1.4 Figure 247), with 64 LBA
/// formats as in NVMe 2.0 (entries beyond NLBAF are zero).
#[derive(Clone, Debug, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned)]
#[repr(C)]
pub struct IdentifyNamespace {
    /// Namespace Size in logical blocks (0).
    pub nsze: U64,
    /// Namespace Capacity in logical blocks (8).
    pub ncap: U64,
    /// Namespace Utilization in logical blocks (16).
    pub nuse: U64,
    /// Namespace Features (24).
    pub nsfeat: u8,
    /// Number of LBA Formats, 0's based (25).
    pub nlbaf: u8,
    /// Formatted LBA Size: bits 3:0 index into `lbaf` (26).
    pub flbas: u8,
    /// Metadata Capabilities (27).
    pub mc: u8,
    /// End-to-end Data Protection Capabilities (28).
    pub dpc: u8,
    /// End-to-end Data Protection Type Settings (29).
    pub dps: u8,
    /// Namespace Multi-path I/O and Namespace Sharing Capabilities (30).
    pub nmic: u8,
    /// Reservation Capabilities (31).
    pub rescap: u8,
    /// Format Progress Indicator (32).
    pub fpi: u8,
    /// Deallocate Logical Block Features (33).
    pub dlfeat: u8,
    /// Namespace Atomic Write Unit Normal (34).
    pub nawun: U16,
    /// Namespace Atomic Write Unit Power Fail (36).
    pub nawupf: U16,
    /// Namespace Atomic Compare & Write Unit (38).
    pub nacwu: U16,
    /// Namespace Atomic Boundary Size Normal (40).
    pub nabsn: U16,
    /// Namespace Atomic Boundary Offset (42).
    pub nabo: U16,
    /// Namespace Atomic Boundary Size Power Fail (44).
    pub nabspf: U16,
    /// Namespace Optimal I/O Boundary (46).
    pub noiob: U16,
    /// NVM Capacity in bytes, 128 bit (48..64).
    pub nvmcap: [u8; 16],
    /// Namespace Preferred Write Granularity (64).
    pub npwg: U16,
    /// Namespace Preferred Write Alignment (66).
    pub npwa: U16,
    /// Namespace Preferred Deallocate Granularity (68).
    pub npdg: U16,
    /// Namespace Preferred Deallocate Alignment (70).
    pub npda: U16,
    /// Namespace Optimal Write Size (72).
    pub nows: U16,
    /// Maximum Single Source Range Length (74).
    pub mssrl: U16,
    /// Maximum Copy Length (76).
    pub mcl: U32,
    /// Maximum Source Range Count (80).
    pub msrc: u8,
    /// Reserved (81..92).
    pub rsvd81: [u8; 11],
    /// ANA Group Identifier (92).
    pub anagrpid: U32,
    /// Reserved (96..99).
    pub rsvd96: [u8; 3],
    /// Namespace Attributes (99).
    pub nsattr: u8,
    /// NVM Set Identifier (100).
    pub nvmsetid: U16,
    /// Endurance Group Identifier (102).
    pub endgid: U16,
    /// Namespace Globally Unique Identifier (104..120).
    pub nguid: [u8; 16],
    /// IEEE Extended Unique Identifier (120..128).
    pub eui64: [u8; 8],
    /// LBA Format 0..63 Support (128..384).
    pub lbaf: [LbaFormat; 64],
    /// Reserved (384..3840).
    pub rsvd384: [u8; 3456],
    /// Vendor Specific (3840..4096).
    pub vs: [u8; 256],
}
assert_size!(IdentifyNamespace, 4096);

impl IdentifyNamespace {
    /// A namespace of `nsze` blocks of 2^`lbads` bytes (NSZE = NCAP = NUSE,
    /// one LBA format, FLBAS 0).
    pub fn new(nsze: u64, lbads: u8) -> Self {
        let mut ns = Self::new_zeroed();
        ns.nsze.set(nsze);
        ns.ncap.set(nsze);
        ns.nuse.set(nsze);
        ns.lbaf[0] = LbaFormat::new(lbads);
        ns
    }

    /// The LBA format in use (FLBAS bits 3:0, plus bits 6:5 as the upper
    /// index bits when NLBAF > 16); `None` if it points past the table.
    pub fn current_lbaf(&self) -> Option<&LbaFormat> {
        let idx = usize::from(self.flbas & 0xF) | (usize::from((self.flbas >> 5) & 3) << 4);
        self.lbaf.get(idx)
    }

    /// Logical block size in bytes of the LBA format in use (0 if invalid).
    pub fn block_size(&self) -> u64 {
        self.current_lbaf().map_or(0, LbaFormat::block_size)
    }
}

/// Active Namespace ID list (CNS 02h), 4096 bytes: up to 1024 NSIDs in
/// increasing order, zero-terminated (NVMe Base 2.x §5.17.2.2).
#[derive(Clone, Debug, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned)]
#[repr(C)]
pub struct NamespaceList {
    /// The NSIDs; unused entries are 0.
    pub ids: [U32; 1024],
}
assert_size!(NamespaceList, 4096);

impl NamespaceList {
    /// A list of the first 1024 of `ids` (callers pass them sorted, all
    /// greater than the request's NSID).
    pub fn from_ids(ids: impl IntoIterator<Item = u32>) -> Self {
        let mut list = Self::new_zeroed();
        for (slot, id) in list.ids.iter_mut().zip(ids) {
            slot.set(id);
        }
        list
    }

    /// The NSIDs up to the first zero entry.
    pub fn iter(&self) -> impl Iterator<Item = u32> + '_ {
        self.ids.iter().map(|v| v.get()).take_while(|&v| v != 0)
    }
}

wire_enum! {
    /// Namespace Identifier Type (NIDT), NVMe Base 2.x §5.17.2.3 Figure
    /// "Namespace Identifier Type".
    pub enum NidType: u8 {
        /// IEEE Extended Unique Identifier, 8 bytes (1h).
        Eui64 = 1 => "IEEE EUI-64",
        /// Namespace Globally Unique Identifier, 16 bytes (2h).
        Nguid = 2 => "NGUID",
        /// Namespace UUID, 16 bytes (3h).
        Uuid = 3 => "UUID",
        /// Command Set Identifier, 1 byte (4h).
        Csi = 4 => "CSI",
    }
}

/// One Namespace Identification Descriptor (NVMe Base 2.x §5.17.2.3): NIDT
/// (1 byte), NIDL (1 byte), 2 reserved bytes, then NIDL bytes of identifier.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum NsIdDescriptor {
    /// EUI-64 (NIDT 1, NIDL 8).
    Eui64([u8; 8]),
    /// NGUID (NIDT 2, NIDL 16).
    Nguid([u8; 16]),
    /// UUID (NIDT 3, NIDL 16).
    Uuid([u8; 16]),
    /// Command Set Identifier (NIDT 4, NIDL 1): 0 = NVM.
    Csi(u8),
}

/// The 4-byte header of a Namespace Identification Descriptor.
#[derive(
    Clone,
    Copy,
    Debug,
    Default,
    PartialEq,
    Eq,
    FromBytes,
    IntoBytes,
    KnownLayout,
    Immutable,
    Unaligned,
)]
#[repr(C)]
pub struct NsIdDescriptorHeader {
    /// Namespace Identifier Type.
    pub nidt: u8,
    /// Namespace Identifier Length in bytes.
    pub nidl: u8,
    /// Reserved.
    pub rsvd: [u8; 2],
}
assert_size!(NsIdDescriptorHeader, 4);

/// Why a Namespace Identification Descriptor list could not be built or read.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Error)]
pub enum NsIdDescriptorError {
    /// The 4096-byte list has no room for the descriptor.
    #[error("namespace identification descriptor list is full")]
    Full,
    /// A descriptor's NIDT is not one this crate knows.
    #[error("unknown namespace identifier type {nidt:#x}")]
    UnknownType {
        /// The NIDT found.
        nidt: u8,
    },
    /// NIDL does not match the length NIDT requires, or runs past the list.
    #[error("namespace identifier type {nidt:#x} with invalid length {nidl}")]
    InvalidLength {
        /// The NIDT found.
        nidt: u8,
        /// The NIDL found.
        nidl: u8,
    },
}

impl NsIdDescriptor {
    /// The descriptor's type.
    pub const fn nidt(&self) -> NidType {
        match self {
            NsIdDescriptor::Eui64(_) => NidType::Eui64,
            NsIdDescriptor::Nguid(_) => NidType::Nguid,
            NsIdDescriptor::Uuid(_) => NidType::Uuid,
            NsIdDescriptor::Csi(_) => NidType::Csi,
        }
    }

    /// The identifier bytes (NIDL of them).
    pub fn id(&self) -> &[u8] {
        match self {
            NsIdDescriptor::Eui64(v) => v,
            NsIdDescriptor::Nguid(v) | NsIdDescriptor::Uuid(v) => v,
            NsIdDescriptor::Csi(v) => core::slice::from_ref(v),
        }
    }
}

/// Builder and parser of the Namespace Identification Descriptor list
/// (CNS 03h), 4096 bytes: descriptors back to back, then zeros.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NsIdDescriptorList {
    buf: Box<[u8; IDENTIFY_DATA_SIZE]>,
    len: usize,
}

impl Default for NsIdDescriptorList {
    fn default() -> Self {
        Self::new()
    }
}

impl NsIdDescriptorList {
    /// An empty list (all zero).
    pub fn new() -> Self {
        NsIdDescriptorList {
            buf: Box::new([0; IDENTIFY_DATA_SIZE]),
            len: 0,
        }
    }

    /// Appends a descriptor. Errors: [`NsIdDescriptorError::Full`].
    pub fn push(&mut self, d: NsIdDescriptor) -> Result<(), NsIdDescriptorError> {
        let id = d.id();
        let total = 4 + id.len();
        let end = self.len + total;
        if end > IDENTIFY_DATA_SIZE {
            return Err(NsIdDescriptorError::Full);
        }
        let hdr = NsIdDescriptorHeader {
            nidt: d.nidt().value(),
            nidl: id.len() as u8,
            rsvd: [0; 2],
        };
        self.buf[self.len..self.len + 4].copy_from_slice(hdr.as_bytes());
        self.buf[self.len + 4..end].copy_from_slice(id);
        self.len = end;
        Ok(())
    }

    /// Builder form of [`push`](Self::push).
    pub fn with(mut self, d: NsIdDescriptor) -> Result<Self, NsIdDescriptorError> {
        self.push(d)?;
        Ok(self)
    }

    /// The whole 4096-byte list as sent.
    pub fn as_bytes(&self) -> &[u8; IDENTIFY_DATA_SIZE] {
        &self.buf
    }

    /// Parses a list (any length; a NIDT of 0 or the end stops it).
    ///
    /// Errors: unknown NIDT, NIDL not the length the type requires, or a
    /// descriptor running past the end.
    pub fn parse(data: &[u8]) -> Result<Vec<NsIdDescriptor>, NsIdDescriptorError> {
        let mut out = Vec::new();
        let mut rest = data;
        while let Ok((hdr, tail)) = NsIdDescriptorHeader::ref_from_prefix(rest) {
            if hdr.nidt == 0 {
                break;
            }
            let (nidt, nidl) = (hdr.nidt, hdr.nidl);
            let bad_len = NsIdDescriptorError::InvalidLength { nidt, nidl };
            let id = tail.get(..usize::from(nidl)).ok_or(bad_len)?;
            let d = match NidType::from_value(nidt) {
                Some(NidType::Eui64) => NsIdDescriptor::Eui64(id.try_into().map_err(|_| bad_len)?),
                Some(NidType::Nguid) => NsIdDescriptor::Nguid(id.try_into().map_err(|_| bad_len)?),
                Some(NidType::Uuid) => NsIdDescriptor::Uuid(id.try_into().map_err(|_| bad_len)?),
                Some(NidType::Csi) => match id {
                    [csi] => NsIdDescriptor::Csi(*csi),
                    _ => return Err(bad_len),
                },
                None => return Err(NsIdDescriptorError::UnknownType { nidt }),
            };
            out.push(d);
            rest = &tail[usize::from(nidl)..];
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::{assert_bytes_eq, sparse};

    /// Identify Controller as nvmet sent it: linux-nvme-rdma-rxe.pcap frames
    /// 128-131 (RDMA WRITE First..Last), every non-zero byte.
    fn capture_identify_controller() -> Vec<u8> {
        let mut v = sparse(
            4096,
            &[
                (4, "6166646436343663336430316462646235333139"), // SN afdd646c3d01dbdb5319
                (24, "4c696e7578"),                              // MN "Linux", space padded below
                (64, "362e312e302d3537"),                        // FR 6.1.0-57
                (72, "06"),
                (76, "0b08 0100 00030100"), // CMIC, MDTS 8, CNTLID 1, VER 1.3
                (92, "00090000 41000000"),  // OAES 900h, CTRATT 41h
                (111, "01"),
                (258, "03030307 7f"),
                (320, "0a00"),
                (342, "0a1f 80000000 80000000"),
                (512, "6644 0004 00040000 0c00 0000 0001"),
                (531, "01"),
                (536, "05001000 00040000"),
                (768, "6e716e2e323032362d31312e696f2e6578616d706c653a726566"),
                (1792, "04010000 01000000 0000 00 01 0000"),
                (2048, "c409 00 00 10000000 04000000"),
            ],
        );
        v[29..64].fill(b' ');
        v
    }

    #[test]
    fn capture_nvmet_identify_controller() {
        let wire = capture_identify_controller();
        let id = IdentifyController::ref_from_bytes(&wire).unwrap();
        assert_eq!(id.sn(), Ok("afdd646c3d01dbdb5319"));
        assert_eq!(id.mn(), Ok("Linux"));
        assert_eq!(id.fr(), Ok("6.1.0-57"));
        assert_eq!(id.subnqn(), Ok("nqn.2026-11.io.example:ref"));
        assert_eq!(id.sgls.get(), SGLS_SUPPORTED | SGLS_KEYED | SGLS_OFFSET);
        assert_eq!(id.sgls.get(), 0x0010_0005);
        assert_eq!((id.mdts, id.maxcmd.get(), id.vwc), (8, 1024, 1));
        assert_eq!(
            (id.icdoff.get(), id.msdbd, id.fcatt, id.ofcs.get()),
            (0, 1, 0, 0)
        );
        assert_eq!((id.ioccsz.get(), id.iorcsz.get()), (260, 1));
        assert_eq!(id.in_capsule_data_size(), 4096);
        assert_eq!(id.max_transfer_bytes(4096), Some(1 << 20));
        assert_eq!(
            (id.cntrltype, id.cntlid.get(), id.kas.get()),
            (CNTRLTYPE_IO, 1, 10)
        );
        assert_eq!(id.ctratt.get(), CTRATT_HOST_ID_128 | CTRATT_TBKAS);
        assert_eq!(id.oaes.get(), OAES_NS_ATTR | OAES_ANA_CHANGE);
        assert_eq!((id.sqes, id.cqes, id.nn.get()), (0x66, 0x44, 1024));
        assert_eq!(id.oncs.get(), ONCS_DSM | ONCS_WRITE_ZEROES);
        assert_eq!(
            (
                id.psd[0].mp.get(),
                id.psd[0].enlat.get(),
                id.psd[0].exlat.get()
            ),
            (2500, 16, 4)
        );

        // Build the same structure with the typed fields.
        let mut b = IdentifyController::zeroed();
        b.set_sn("afdd646c3d01dbdb5319").unwrap();
        b.set_mn("Linux").unwrap();
        b.set_fr("6.1.0-57").unwrap();
        b.rab = 6;
        b.cmic = 0x0b;
        b.mdts = 8;
        b.cntlid.set(1);
        b.ver.set(crate::properties::Vs::V1_3.0);
        b.oaes.set(OAES_NS_ATTR | OAES_ANA_CHANGE);
        b.ctratt.set(CTRATT_HOST_ID_128 | CTRATT_TBKAS);
        b.cntrltype = CNTRLTYPE_IO;
        b.acl = 3;
        b.aerl = 3;
        b.frmw = 3;
        b.lpa = 7;
        b.elpe = 127;
        b.kas.set(10);
        b.anatt = 10;
        b.anacap = 0x1f;
        b.anagrpmax.set(128);
        b.nanagrpid.set(128);
        b.sqes = 0x66;
        b.cqes = 0x44;
        b.maxcmd.set(1024);
        b.nn.set(1024);
        b.oncs.set(ONCS_DSM | ONCS_WRITE_ZEROES);
        b.vwc = 1;
        b.nwpc = 1;
        b.sgls.set(0x0010_0005);
        b.mnan.set(1024);
        b.set_subnqn("nqn.2026-11.io.example:ref").unwrap();
        b.ioccsz.set(260);
        b.iorcsz.set(1);
        b.msdbd = 1;
        b.psd[0].mp.set(2500);
        b.psd[0].enlat.set(16);
        b.psd[0].exlat.set(4);
        assert_bytes_eq(b.as_bytes(), &wire);
    }

    #[test]
    fn text_field_errors() {
        let mut id = IdentifyController::zeroed();
        assert!(id.set_sn("123456789012345678901").is_err());
        assert!(id.set_mn("caf\u{e9}").is_err());
        assert_eq!(id.sn(), Ok(""));
        assert_eq!(id.subnqn(), Ok(""));
        id.subnqn.fill(b'a');
        assert_eq!(id.subnqn(), Err(StrFieldError::NotTerminated));
        assert_eq!(id.max_transfer_bytes(4096), None);
    }

    #[test]
    fn capture_identify_namespace() {
        // linux-nvme-rdma-rxe.pcap frames 211-214: Identify Namespace 1 of a
        // 64 MiB null_blk with 512 B blocks.
        let wire = sparse(
            4096,
            &[
                (0, "0000020000000000 0000020000000000 0000020000000000"),
                (24, "12"),
                (30, "01"),
                (92, "01000000"),
                (128, "00000900"),
            ],
        );
        let ns = IdentifyNamespace::ref_from_bytes(&wire).unwrap();
        assert_eq!(ns.nsze.get(), 0x20000);
        assert_eq!(ns.block_size(), 512);
        assert_eq!(ns.nsze.get() * ns.block_size(), 64 << 20);
        assert_eq!(
            (ns.nsfeat, ns.nmic, ns.anagrpid.get(), ns.nlbaf),
            (0x12, 1, 1, 0)
        );
        let mut b = IdentifyNamespace::new(0x20000, 9);
        b.nsfeat = 0x12;
        b.nmic = 1;
        b.anagrpid.set(1);
        assert_bytes_eq(b.as_bytes(), &wire);
        assert_eq!(core::mem::offset_of!(IdentifyNamespace, nguid), 104);
        assert_eq!(core::mem::offset_of!(IdentifyNamespace, eui64), 120);
        let mut bad = b.clone();
        bad.lbaf[0].lbads = 200;
        assert_eq!(bad.block_size(), 0);
    }

    #[test]
    fn capture_namespace_list() {
        // Frame 193: active namespace list = [1].
        let wire = sparse(4096, &[(0, "01000000")]);
        let list = NamespaceList::ref_from_bytes(&wire).unwrap();
        assert_eq!(list.iter().collect::<Vec<_>>(), vec![1]);
        assert_bytes_eq(NamespaceList::from_ids([1]).as_bytes(), &wire);
        let many = NamespaceList::from_ids(1..=2000);
        assert_eq!(many.iter().count(), 1024);
    }

    #[test]
    fn capture_ns_id_descriptors() {
        // Frame 202: UUID descriptor then CSI 0 (NVM).
        let wire = sparse(
            4096,
            &[(0, "03100000 efde0dc7b41c467184d5f71350318fda 04010000 00")],
        );
        let uuid = [
            0xef, 0xde, 0x0d, 0xc7, 0xb4, 0x1c, 0x46, 0x71, 0x84, 0xd5, 0xf7, 0x13, 0x50, 0x31,
            0x8f, 0xda,
        ];
        let list = NsIdDescriptorList::new()
            .with(NsIdDescriptor::Uuid(uuid))
            .unwrap()
            .with(NsIdDescriptor::Csi(0))
            .unwrap();
        assert_bytes_eq(list.as_bytes(), &wire);
        assert_eq!(
            NsIdDescriptorList::parse(&wire),
            Ok(vec![NsIdDescriptor::Uuid(uuid), NsIdDescriptor::Csi(0)])
        );
        let all = NsIdDescriptorList::new()
            .with(NsIdDescriptor::Eui64([1; 8]))
            .unwrap()
            .with(NsIdDescriptor::Nguid([2; 16]))
            .unwrap();
        assert_eq!(
            NsIdDescriptorList::parse(all.as_bytes()),
            Ok(vec![
                NsIdDescriptor::Eui64([1; 8]),
                NsIdDescriptor::Nguid([2; 16])
            ])
        );
    }

    #[test]
    fn ns_id_descriptor_errors() {
        assert_eq!(
            NsIdDescriptorList::parse(&[3, 8, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8]),
            Err(NsIdDescriptorError::InvalidLength { nidt: 3, nidl: 8 })
        );
        assert_eq!(
            NsIdDescriptorList::parse(&[9, 1, 0, 0, 0]),
            Err(NsIdDescriptorError::UnknownType { nidt: 9 })
        );
        assert_eq!(
            NsIdDescriptorList::parse(&[1, 8, 0, 0, 1]),
            Err(NsIdDescriptorError::InvalidLength { nidt: 1, nidl: 8 })
        );
        let mut l = NsIdDescriptorList::new();
        let mut n = 0;
        while l.push(NsIdDescriptor::Uuid([0; 16])).is_ok() {
            n += 1;
        }
        assert_eq!(n, 4096 / 20);
        // 16 bytes remain: three 5-byte CSI descriptors fit, a fourth not.
        for _ in 0..3 {
            assert_eq!(l.push(NsIdDescriptor::Csi(0)), Ok(()));
        }
        assert_eq!(
            l.push(NsIdDescriptor::Csi(0)),
            Err(NsIdDescriptorError::Full)
        );
    }
}
