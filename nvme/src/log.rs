//! Log pages (NVMe Base 2.x §5.16.1): the Discovery log page (LID 70h,
//! §5.16.1.23 / NVMe over Fabrics 1.1 §5.3), Error Information entries (LID
//! 01h, §5.16.1.2) and SMART / Health Information (LID 02h, §5.16.1.3).

use zerocopy::byteorder::little_endian::{U128, U16, U32, U64};
use zerocopy::{FromBytes, FromZeros, Immutable, IntoBytes, KnownLayout, Unaligned};

use crate::strings::{read_nul_padded, read_nul_terminated, write_nul_padded, StrFieldError};
use crate::NVME_NQN_MAX;

wire_enum! {
    /// Transport Type (TRTYPE), NVMe Base 2.x §5.16.1.23 / NVMe over Fabrics
    /// 1.1 Figure "Transport Type Codes".
    pub enum TransportType: u8 {
        /// RDMA Transport (1).
        Rdma = 1 => "RDMA",
        /// Fibre Channel Transport (2).
        Fc = 2 => "Fibre Channel",
        /// TCP Transport (3).
        Tcp = 3 => "TCP",
        /// Intra-host Transport, loopback (254).
        Loop = 254 => "Intra-host",
    }
}

wire_enum! {
    /// Address Family (ADRFAM) of TRADDR.
    pub enum AddressFamily: u8 {
        /// AF_INET, dotted decimal TRADDR (1).
        Ipv4 = 1 => "IPv4",
        /// AF_INET6, RFC 5952 TRADDR (2).
        Ipv6 = 2 => "IPv6",
        /// InfiniBand (3).
        Ib = 3 => "InfiniBand",
        /// Fibre Channel (4).
        Fc = 4 => "Fibre Channel",
        /// Intra-host (254).
        Loop = 254 => "Intra-host",
    }
}

wire_enum! {
    /// Subsystem Type (SUBTYPE) of a discovery log entry.
    pub enum SubsystemType: u8 {
        /// Referral to another discovery service (1).
        Referral = 1 => "Discovery Referral",
        /// NVM subsystem (2).
        Nvm = 2 => "NVM Subsystem",
        /// The current discovery subsystem (3).
        CurrentDiscovery = 3 => "Current Discovery Subsystem",
    }
}

/// TREQ bits 1:0 = 10b: secure channel not required.
pub const TREQ_SECURE_CHANNEL_NOT_REQUIRED: u8 = 0b10;
/// TREQ bit 2: the controller supports disabling SQ flow control (Linux
/// nvmet sets it: TREQ 04h in the capture).
pub const TREQ_DISABLE_SQFLOW: u8 = 1 << 2;

/// RDMA_QPTYPE 1: reliable connected.
pub const RDMA_QPTYPE_CONNECTED: u8 = 1;
/// RDMA_PRTYPE 1: no provider specified.
pub const RDMA_PRTYPE_NOT_SPECIFIED: u8 = 1;
/// RDMA_PRTYPE 4: RoCEv2.
pub const RDMA_PRTYPE_ROCEV2: u8 = 4;
/// RDMA_CMS 1: RDMA_IP_CM (RDMA CM).
pub const RDMA_CMS_RDMA_CM: u8 = 1;

/// Transport Specific Address Subtype for RDMA, 256 bytes (NVMe RDMA
/// Transport 1.x §3.1.2 / NVMe over Fabrics 1.1 Figure "TSAS - RDMA").
#[derive(Clone, Debug, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned)]
#[repr(C)]
pub struct RdmaTsas {
    /// RDMA QP Service Type (1 = reliable connected).
    pub qptype: u8,
    /// RDMA Provider Type (1 = not specified).
    pub prtype: u8,
    /// RDMA Connection Management Service (1 = RDMA CM).
    pub cms: u8,
    /// Reserved.
    pub rsvd3: [u8; 5],
    /// RDMA partition key.
    pub pkey: U16,
    /// Reserved.
    pub rsvd10: [u8; 246],
}
assert_size!(RdmaTsas, 256);

/// Discovery Log Page header, 1024 bytes (NVMe Base 2.x §5.16.1.23 Figure
/// "Discovery Log Page"): GENCTR (0), NUMREC (8), RECFMT (16). Entries
/// follow at 1024 x (n + 1).
#[derive(Clone, Debug, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned)]
#[repr(C)]
pub struct DiscoveryLogPageHeader {
    /// Generation Counter: changes whenever the log changes.
    pub genctr: U64,
    /// Number of Records.
    pub numrec: U64,
    /// Record Format (0).
    pub recfmt: U16,
    /// Reserved.
    pub rsvd18: [u8; 1006],
}
assert_size!(DiscoveryLogPageHeader, 1024);

impl DiscoveryLogPageHeader {
    /// A header with generation `genctr` and `numrec` records.
    pub fn new(genctr: u64, numrec: u64) -> Self {
        let mut h = Self::new_zeroed();
        h.genctr.set(genctr);
        h.numrec.set(numrec);
        h
    }
}

/// Discovery Log Page Entry, 1024 bytes (NVMe Base 2.x §5.16.1.23 Figure
/// "Discovery Log Page Entry"). TRSVCID and TRADDR are NUL padded (as Linux
/// sends them), SUBNQN NUL terminated.
#[derive(Clone, Debug, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned)]
#[repr(C)]
pub struct DiscoveryLogEntry {
    /// Transport Type ([`TransportType`]).
    pub trtype: u8,
    /// Address Family ([`AddressFamily`]).
    pub adrfam: u8,
    /// Subsystem Type ([`SubsystemType`]).
    pub subtype: u8,
    /// Transport Requirements.
    pub treq: u8,
    /// Port ID.
    pub portid: U16,
    /// Controller ID (FFFFh: dynamic model).
    pub cntlid: U16,
    /// Admin Max SQ Size (entries).
    pub asqsz: U16,
    /// Entry Flags.
    pub eflags: U16,
    /// Reserved (12..32).
    pub rsvd12: [u8; 20],
    /// Transport Service Identifier, e.g. "4420" (32..64).
    pub trsvcid: [u8; 32],
    /// Reserved (64..256).
    pub rsvd64: [u8; 192],
    /// NVM Subsystem Qualified Name (256..512).
    pub subnqn: [u8; 256],
    /// Transport Address, e.g. "192.168.77.10" (512..768).
    pub traddr: [u8; 256],
    /// Transport Specific Address Subtype (768..1024).
    pub tsas: RdmaTsas,
}
assert_size!(DiscoveryLogEntry, 1024);

impl DiscoveryLogEntry {
    /// An RDMA entry as Linux nvmet builds it: TRTYPE RDMA, TREQ 04h,
    /// CNTLID FFFFh, TSAS connected / not specified / RDMA CM, pkey 0.
    ///
    /// Errors: SUBNQN over 223 bytes, TRADDR over 255, TRSVCID over 31, or
    /// any holding NUL.
    pub fn rdma(
        adrfam: AddressFamily,
        subtype: SubsystemType,
        portid: u16,
        asqsz: u16,
        trsvcid: &str,
        subnqn: &str,
        traddr: &str,
    ) -> Result<Self, StrFieldError> {
        let mut e = Self::new_zeroed();
        e.trtype = TransportType::Rdma.value();
        e.adrfam = adrfam.value();
        e.subtype = subtype.value();
        e.treq = TREQ_DISABLE_SQFLOW;
        e.portid.set(portid);
        e.cntlid.set(crate::fabrics::CNTLID_DYNAMIC);
        e.asqsz.set(asqsz);
        e.set_trsvcid(trsvcid)?;
        e.set_subnqn(subnqn)?;
        e.set_traddr(traddr)?;
        e.tsas.qptype = RDMA_QPTYPE_CONNECTED;
        e.tsas.prtype = RDMA_PRTYPE_NOT_SPECIFIED;
        e.tsas.cms = RDMA_CMS_RDMA_CM;
        Ok(e)
    }

    /// Sets TRSVCID (NUL padded, at most 31 bytes).
    pub fn set_trsvcid(&mut self, s: &str) -> Result<(), StrFieldError> {
        write_nul_padded(&mut self.trsvcid, s, 31)
    }

    /// Sets TRADDR (NUL padded, at most 255 bytes).
    pub fn set_traddr(&mut self, s: &str) -> Result<(), StrFieldError> {
        write_nul_padded(&mut self.traddr, s, 255)
    }

    /// Sets SUBNQN (NUL terminated, at most 223 bytes).
    pub fn set_subnqn(&mut self, s: &str) -> Result<(), StrFieldError> {
        write_nul_padded(&mut self.subnqn, s, NVME_NQN_MAX)
    }

    /// TRSVCID without padding. Errors: invalid UTF-8.
    pub fn trsvcid(&self) -> Result<&str, StrFieldError> {
        read_nul_padded(&self.trsvcid)
    }

    /// TRADDR without padding. Errors: invalid UTF-8.
    pub fn traddr(&self) -> Result<&str, StrFieldError> {
        read_nul_padded(&self.traddr)
    }

    /// SUBNQN. Errors: unterminated, too long, invalid UTF-8.
    pub fn subnqn(&self) -> Result<&str, StrFieldError> {
        read_nul_terminated(&self.subnqn, NVME_NQN_MAX)
    }
}

/// Builds a whole Discovery log page: the header (GENCTR `genctr`, NUMREC =
/// number of entries) followed by the entries; `(entries + 1) x 1024` bytes.
pub fn discovery_log_page(genctr: u64, entries: &[DiscoveryLogEntry]) -> Vec<u8> {
    let mut out = Vec::with_capacity((entries.len() + 1) * 1024);
    out.extend_from_slice(DiscoveryLogPageHeader::new(genctr, entries.len() as u64).as_bytes());
    for e in entries {
        out.extend_from_slice(e.as_bytes());
    }
    out
}

/// Reads a Discovery log page as far as `data` goes: the header and the
/// entries present (at most NUMREC of them; a host reads the header first
/// and the entries in a second Get Log Page).
///
/// Errors: `None` when `data` is shorter than the header.
pub fn parse_discovery_log(data: &[u8]) -> Option<(&DiscoveryLogPageHeader, &[DiscoveryLogEntry])> {
    let (hdr, rest) = DiscoveryLogPageHeader::ref_from_prefix(data).ok()?;
    let present = rest.len() / core::mem::size_of::<DiscoveryLogEntry>();
    let n = usize::try_from(hdr.numrec.get()).map_or(present, |n| n.min(present));
    let (entries, _) = <[DiscoveryLogEntry]>::ref_from_prefix_with_elems(rest, n).ok()?;
    Some((hdr, entries))
}

/// Error Information Log Entry, 64 bytes (NVMe Base 2.x §5.16.1.2 Figure
/// "Error Information Log Entry Data Structure").
#[derive(
    Clone, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned,
)]
#[repr(C)]
pub struct ErrorLogEntry {
    /// Error Count: unique, increasing; 0 = invalid entry.
    pub error_count: U64,
    /// Submission Queue ID.
    pub sqid: U16,
    /// Command ID.
    pub cid: U16,
    /// Status Field of the failed command's CQE (bit 0: phase tag).
    pub status_field: U16,
    /// Parameter Error Location: byte (7:0) and bit (10:8) in the command.
    pub parameter_error_location: U16,
    /// First LBA that saw the error.
    pub lba: U64,
    /// Namespace.
    pub nsid: U32,
    /// Vendor Specific Information Available.
    pub vs: u8,
    /// Transport Type.
    pub trtype: u8,
    /// Reserved.
    pub rsvd30: [u8; 2],
    /// Command Specific Information.
    pub csi: U64,
    /// Transport Type Specific Information.
    pub trtype_specific: U16,
    /// Reserved.
    pub rsvd42: [u8; 22],
}
assert_size!(ErrorLogEntry, 64);

/// SMART / Health Information log, 512 bytes (NVMe Base 2.x §5.16.1.3
/// Figure "SMART / Health Information Log Page"). Counters are 128-bit;
/// data units are thousands of 512-byte units; temperatures in kelvin.
#[derive(Clone, Debug, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned)]
#[repr(C)]
pub struct SmartLog {
    /// Critical Warning bits.
    pub critical_warning: u8,
    /// Composite Temperature, kelvin (bytes 1..3).
    pub composite_temperature: U16,
    /// Available Spare, percent.
    pub available_spare: u8,
    /// Available Spare Threshold, percent.
    pub available_spare_threshold: u8,
    /// Percentage Used.
    pub percentage_used: u8,
    /// Endurance Group Critical Warning Summary.
    pub endurance_group_critical_warning: u8,
    /// Reserved (7..32).
    pub rsvd7: [u8; 25],
    /// Data Units Read (x 1000 x 512 bytes).
    pub data_units_read: U128,
    /// Data Units Written (x 1000 x 512 bytes).
    pub data_units_written: U128,
    /// Host Read Commands.
    pub host_read_commands: U128,
    /// Host Write Commands.
    pub host_write_commands: U128,
    /// Controller Busy Time, minutes.
    pub controller_busy_time: U128,
    /// Power Cycles.
    pub power_cycles: U128,
    /// Power On Hours.
    pub power_on_hours: U128,
    /// Unsafe Shutdowns.
    pub unsafe_shutdowns: U128,
    /// Media and Data Integrity Errors.
    pub media_errors: U128,
    /// Number of Error Information Log Entries.
    pub num_error_log_entries: U128,
    /// Warning Composite Temperature Time, minutes.
    pub warning_temp_time: U32,
    /// Critical Composite Temperature Time, minutes.
    pub critical_temp_time: U32,
    /// Temperature Sensors 1..8, kelvin.
    pub temp_sensors: [U16; 8],
    /// Thermal Management Temperature 1/2 Transition Counts.
    pub thm_temp_transition_count: [U32; 2],
    /// Total Time For Thermal Management Temperature 1/2, seconds.
    pub thm_temp_total_time: [U32; 2],
    /// Reserved (232..512).
    pub rsvd232: [u8; 280],
}
assert_size!(SmartLog, 512);

impl SmartLog {
    /// An all-zero log.
    pub fn zeroed() -> Self {
        Self::new_zeroed()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::{assert_bytes_eq, sparse};

    #[test]
    fn capture_discovery_log() {
        // linux-nvme-rdma-rxe.pcap frames 73-75 (RDMA WRITE, 3072 B):
        // GENCTR 2, NUMREC 2; entry 0 = the discovery subsystem itself,
        // entry 1 = nqn.2026-11.io.example:ref, both at 192.168.77.10:4420.
        let disc_nqn = "6e716e2e323031342d30382e6f72672e6e766d65787072657373 2e646973636f76657279";
        let ref_nqn = "6e716e2e323032362d31312e696f2e6578616d706c653a726566";
        let traddr = "3139322e3136382e37372e3130";
        let wire = sparse(
            3072,
            &[
                (0, "0200000000000000 0200000000000000"),
                (1024, "01 01 03 04 0100 ffff 2000"),
                (1024 + 32, "34343230"),
                (1024 + 256, disc_nqn),
                (1024 + 512, traddr),
                (1024 + 768, "010101"),
                (2048, "01 01 02 04 0100 ffff 2000"),
                (2048 + 32, "34343230"),
                (2048 + 256, ref_nqn),
                (2048 + 512, traddr),
                (2048 + 768, "010101"),
            ],
        );
        let (hdr, entries) = parse_discovery_log(&wire).unwrap();
        assert_eq!(
            (hdr.genctr.get(), hdr.numrec.get(), hdr.recfmt.get()),
            (2, 2, 0)
        );
        assert_eq!(entries.len(), 2);
        let e = &entries[1];
        assert_eq!(
            TransportType::from_value(e.trtype),
            Some(TransportType::Rdma)
        );
        assert_eq!(
            AddressFamily::from_value(e.adrfam),
            Some(AddressFamily::Ipv4)
        );
        assert_eq!(
            SubsystemType::from_value(e.subtype),
            Some(SubsystemType::Nvm)
        );
        assert_eq!(
            (e.portid.get(), e.cntlid.get(), e.asqsz.get()),
            (1, 0xffff, 32)
        );
        assert_eq!(e.trsvcid(), Ok("4420"));
        assert_eq!(e.traddr(), Ok("192.168.77.10"));
        assert_eq!(e.subnqn(), Ok("nqn.2026-11.io.example:ref"));
        assert_eq!(entries[0].subnqn(), Ok(crate::NVMF_DISCOVERY_NQN));

        let built = [
            DiscoveryLogEntry::rdma(
                AddressFamily::Ipv4,
                SubsystemType::CurrentDiscovery,
                1,
                32,
                "4420",
                crate::NVMF_DISCOVERY_NQN,
                "192.168.77.10",
            )
            .unwrap(),
            DiscoveryLogEntry::rdma(
                AddressFamily::Ipv4,
                SubsystemType::Nvm,
                1,
                32,
                "4420",
                "nqn.2026-11.io.example:ref",
                "192.168.77.10",
            )
            .unwrap(),
        ];
        assert_bytes_eq(&discovery_log_page(2, &built), &wire);
        // Frame 67: the first read is the 1024-byte header alone.
        let (hdr, entries) = parse_discovery_log(&wire[..1024]).unwrap();
        assert_eq!((hdr.numrec.get(), entries.len()), (2, 0));
        assert!(parse_discovery_log(&wire[..1023]).is_none());
    }

    #[test]
    fn discovery_entry_ipv6() {
        // linux-nvme-rdma-rxe-ipv6.pcap: adrfam 2, traddr "fd77::10".
        let e = DiscoveryLogEntry::rdma(
            AddressFamily::Ipv6,
            SubsystemType::Nvm,
            1,
            32,
            "4420",
            "nqn.2026-11.io.example:ref",
            "fd77::10",
        )
        .unwrap();
        assert_eq!(e.adrfam, 2);
        assert_eq!(&e.traddr[..9], b"fd77::10\0");
        assert!(DiscoveryLogEntry::rdma(
            AddressFamily::Ipv4,
            SubsystemType::Nvm,
            1,
            32,
            &"9".repeat(32),
            "n",
            "a"
        )
        .is_err());
    }

    #[test]
    fn capture_smart_log() {
        // Frame 160 (RDMA WRITE Only, 512 B): nvmet's SMART log, data units
        // read 1, host read commands 3.
        let wire = sparse(512, &[(32, "01"), (64, "03")]);
        let s = SmartLog::ref_from_bytes(&wire).unwrap();
        assert_eq!(s.data_units_read.get(), 1);
        assert_eq!(s.host_read_commands.get(), 3);
        let mut b = SmartLog::zeroed();
        b.data_units_read.set(1);
        b.host_read_commands.set(3);
        assert_bytes_eq(b.as_bytes(), &wire);
        assert_eq!(core::mem::offset_of!(SmartLog, warning_temp_time), 192);
        assert_eq!(core::mem::offset_of!(SmartLog, temp_sensors), 200);
    }

    #[test]
    fn error_log_layout() {
        assert_eq!(core::mem::offset_of!(ErrorLogEntry, lba), 16);
        assert_eq!(core::mem::offset_of!(ErrorLogEntry, nsid), 24);
        assert_eq!(core::mem::offset_of!(ErrorLogEntry, csi), 32);
        assert_eq!(core::mem::offset_of!(ErrorLogEntry, trtype_specific), 40);
    }
}
