//! Completion status: the 15-bit Status field of a completion queue entry
//! (NVMe Base 2.x §4.2.3, "Status Field Definition", and §4.2.3.1-§4.2.3.4
//! for the codes).
//!
//! CQE bytes 14..16, little endian: bit 0 Phase Tag (P), bits 8:1 Status Code
//! (SC), bits 11:9 Status Code Type (SCT), bits 13:12 Command Retry Delay
//! (CRD), bit 14 More (M), bit 15 Do Not Retry (DNR). NVMe over Fabrics does
//! not use the phase tag; it is sent as 0.

use core::fmt;

wire_enum! {
    /// Status Code Type (SCT, 3 bits), NVMe Base 2.x §4.2.3 Figure "Status
    /// Code - Status Code Type Values". All eight values are named so that
    /// any wire value decodes. Defaults to `Generic`.
    #[derive(Default)]
    pub enum StatusCodeType: u8 {
        /// Generic command status (0h), §4.2.3.1.
        #[default]
        Generic = 0 => "Generic Command Status",
        /// Command specific status (1h), §4.2.3.2.
        CommandSpecific = 1 => "Command Specific Status",
        /// Media and data integrity errors (2h), §4.2.3.3.
        MediaDataIntegrity = 2 => "Media and Data Integrity Errors",
        /// Path related status (3h), §4.2.3.4.
        PathRelated = 3 => "Path Related Status",
        /// Reserved (4h).
        Reserved4 = 4 => "Reserved (4h)",
        /// Reserved (5h).
        Reserved5 = 5 => "Reserved (5h)",
        /// Reserved (6h).
        Reserved6 = 6 => "Reserved (6h)",
        /// Vendor specific (7h).
        VendorSpecific = 7 => "Vendor Specific",
    }
}

impl StatusCodeType {
    /// Decodes the low 3 bits of `bits` (total: every value is named).
    pub const fn from_bits(bits: u8) -> Self {
        match bits & 7 {
            0 => Self::Generic,
            1 => Self::CommandSpecific,
            2 => Self::MediaDataIntegrity,
            3 => Self::PathRelated,
            4 => Self::Reserved4,
            5 => Self::Reserved5,
            6 => Self::Reserved6,
            _ => Self::VendorSpecific,
        }
    }
}

wire_enum! {
    /// Generic command status codes (SCT 0h), NVMe Base 2.x §4.2.3.1
    /// (00h-7Fh apply to all commands; 80h-BFh are NVM Command Set specific,
    /// NVM Command Set 1.x §3.3.3.2).
    pub enum GenericStatus: u8 {
        /// Successful Completion (00h).
        Success = 0x00 => "Successful Completion",
        /// Invalid Command Opcode (01h).
        InvalidOpcode = 0x01 => "Invalid Command Opcode",
        /// Invalid Field in Command (02h).
        InvalidField = 0x02 => "Invalid Field in Command",
        /// Command ID Conflict (03h).
        CommandIdConflict = 0x03 => "Command ID Conflict",
        /// Data Transfer Error (04h).
        DataTransferError = 0x04 => "Data Transfer Error",
        /// Commands Aborted due to Power Loss Notification (05h).
        AbortedPowerLoss = 0x05 => "Commands Aborted due to Power Loss Notification",
        /// Internal Error (06h).
        InternalError = 0x06 => "Internal Error",
        /// Command Abort Requested (07h).
        AbortRequested = 0x07 => "Command Abort Requested",
        /// Command Aborted due to SQ Deletion (08h).
        AbortedSqDeletion = 0x08 => "Command Aborted due to SQ Deletion",
        /// Command Aborted due to Failed Fused Command (09h).
        AbortedFailedFused = 0x09 => "Command Aborted due to Failed Fused Command",
        /// Command Aborted due to Missing Fused Command (0Ah).
        AbortedMissingFused = 0x0A => "Command Aborted due to Missing Fused Command",
        /// Invalid Namespace or Format (0Bh).
        InvalidNamespaceOrFormat = 0x0B => "Invalid Namespace or Format",
        /// Command Sequence Error (0Ch).
        CommandSequenceError = 0x0C => "Command Sequence Error",
        /// Invalid SGL Segment Descriptor (0Dh).
        InvalidSglSegmentDescriptor = 0x0D => "Invalid SGL Segment Descriptor",
        /// Invalid Number of SGL Descriptors (0Eh).
        InvalidNumberOfSglDescriptors = 0x0E => "Invalid Number of SGL Descriptors",
        /// Data SGL Length Invalid (0Fh).
        DataSglLengthInvalid = 0x0F => "Data SGL Length Invalid",
        /// Metadata SGL Length Invalid (10h).
        MetadataSglLengthInvalid = 0x10 => "Metadata SGL Length Invalid",
        /// SGL Descriptor Type Invalid (11h).
        SglDescriptorTypeInvalid = 0x11 => "SGL Descriptor Type Invalid",
        /// Invalid Use of Controller Memory Buffer (12h).
        InvalidUseOfCmb = 0x12 => "Invalid Use of Controller Memory Buffer",
        /// PRP Offset Invalid (13h).
        PrpOffsetInvalid = 0x13 => "PRP Offset Invalid",
        /// Atomic Write Unit Exceeded (14h).
        AtomicWriteUnitExceeded = 0x14 => "Atomic Write Unit Exceeded",
        /// Operation Denied (15h).
        OperationDenied = 0x15 => "Operation Denied",
        /// SGL Offset Invalid (16h).
        SglOffsetInvalid = 0x16 => "SGL Offset Invalid",
        /// Host Identifier Inconsistent Format (18h).
        HostIdInconsistentFormat = 0x18 => "Host Identifier Inconsistent Format",
        /// Keep Alive Timer Expired (19h).
        KeepAliveTimerExpired = 0x19 => "Keep Alive Timer Expired",
        /// Keep Alive Timeout Invalid (1Ah).
        KeepAliveTimeoutInvalid = 0x1A => "Keep Alive Timeout Invalid",
        /// Command Aborted due to Preempt and Abort (1Bh).
        AbortedPreemptAbort = 0x1B => "Command Aborted due to Preempt and Abort",
        /// Sanitize Failed (1Ch).
        SanitizeFailed = 0x1C => "Sanitize Failed",
        /// Sanitize In Progress (1Dh).
        SanitizeInProgress = 0x1D => "Sanitize In Progress",
        /// SGL Data Block Granularity Invalid (1Eh).
        SglDataBlockGranularityInvalid = 0x1E => "SGL Data Block Granularity Invalid",
        /// Namespace is Write Protected (20h).
        NamespaceWriteProtected = 0x20 => "Namespace is Write Protected",
        /// Command Interrupted (21h).
        CommandInterrupted = 0x21 => "Command Interrupted",
        /// Transient Transport Error (22h).
        TransientTransportError = 0x22 => "Transient Transport Error",
        /// LBA Out of Range (80h, NVM Command Set).
        LbaOutOfRange = 0x80 => "LBA Out of Range",
        /// Capacity Exceeded (81h, NVM Command Set).
        CapacityExceeded = 0x81 => "Capacity Exceeded",
        /// Namespace Not Ready (82h, NVM Command Set).
        NamespaceNotReady = 0x82 => "Namespace Not Ready",
        /// Reservation Conflict (83h, NVM Command Set).
        ReservationConflict = 0x83 => "Reservation Conflict",
        /// Format In Progress (84h, NVM Command Set).
        FormatInProgress = 0x84 => "Format In Progress",
    }
}

wire_enum! {
    /// Command specific status codes (SCT 1h), NVMe Base 2.x §4.2.3.2, and
    /// the Fabrics command codes (NVMe Base 2.x §4.2.3.2 / NVMe over Fabrics
    /// 1.1 §3.3 "Connect response").
    ///
    /// Codes 80h and above depend on the command; this enum names the
    /// Fabrics Connect / Discovery meanings, which are the ones this project
    /// sends (the NVM Command Set reuses 80h-82h for Conflicting Attributes,
    /// Invalid Protection Information and Write to Read Only Range).
    pub enum CommandSpecificStatus: u8 {
        /// Completion Queue Invalid (00h).
        CompletionQueueInvalid = 0x00 => "Completion Queue Invalid",
        /// Invalid Queue Identifier (01h).
        InvalidQueueIdentifier = 0x01 => "Invalid Queue Identifier",
        /// Invalid Queue Size (02h).
        InvalidQueueSize = 0x02 => "Invalid Queue Size",
        /// Abort Command Limit Exceeded (03h).
        AbortCommandLimitExceeded = 0x03 => "Abort Command Limit Exceeded",
        /// Asynchronous Event Request Limit Exceeded (05h).
        AsyncEventRequestLimitExceeded = 0x05 => "Asynchronous Event Request Limit Exceeded",
        /// Invalid Firmware Slot (06h).
        InvalidFirmwareSlot = 0x06 => "Invalid Firmware Slot",
        /// Invalid Firmware Image (07h).
        InvalidFirmwareImage = 0x07 => "Invalid Firmware Image",
        /// Invalid Interrupt Vector (08h).
        InvalidInterruptVector = 0x08 => "Invalid Interrupt Vector",
        /// Invalid Log Page (09h).
        InvalidLogPage = 0x09 => "Invalid Log Page",
        /// Invalid Format (0Ah).
        InvalidFormat = 0x0A => "Invalid Format",
        /// Invalid Queue Deletion (0Ch).
        InvalidQueueDeletion = 0x0C => "Invalid Queue Deletion",
        /// Feature Identifier Not Saveable (0Dh).
        FeatureIdNotSaveable = 0x0D => "Feature Identifier Not Saveable",
        /// Feature Not Changeable (0Eh).
        FeatureNotChangeable = 0x0E => "Feature Not Changeable",
        /// Feature Not Namespace Specific (0Fh).
        FeatureNotNamespaceSpecific = 0x0F => "Feature Not Namespace Specific",
        /// Connect Incompatible Format (80h, Fabrics).
        ConnectIncompatibleFormat = 0x80 => "Connect Incompatible Format",
        /// Connect Controller Busy (81h, Fabrics).
        ConnectControllerBusy = 0x81 => "Connect Controller Busy",
        /// Connect Invalid Parameters (82h, Fabrics); CQE DW0 carries IATTR/IPO.
        ConnectInvalidParameters = 0x82 => "Connect Invalid Parameters",
        /// Connect Restart Discovery (83h, Fabrics).
        ConnectRestartDiscovery = 0x83 => "Connect Restart Discovery",
        /// Connect Invalid Host (84h, Fabrics).
        ConnectInvalidHost = 0x84 => "Connect Invalid Host",
        /// Invalid Queue Type (85h, Fabrics): e.g. a Disconnect on the admin queue
        /// (NVMe Base 2.x §6.4).
        InvalidQueueType = 0x85 => "Invalid Queue Type",
        /// Discover Restart (90h, Fabrics discovery).
        DiscoverRestart = 0x90 => "Discover Restart",
        /// Authentication Required (91h, Fabrics).
        AuthenticationRequired = 0x91 => "Authentication Required",
    }
}

wire_enum! {
    /// Media and data integrity errors (SCT 2h), NVMe Base 2.x §4.2.3.3.
    pub enum MediaStatus: u8 {
        /// Write Fault (80h).
        WriteFault = 0x80 => "Write Fault",
        /// Unrecovered Read Error (81h).
        UnrecoveredReadError = 0x81 => "Unrecovered Read Error",
        /// Compare Failure (85h).
        CompareFailure = 0x85 => "Compare Failure",
        /// Access Denied (86h).
        AccessDenied = 0x86 => "Access Denied",
        /// Deallocated or Unwritten Logical Block (87h).
        DeallocatedOrUnwritten = 0x87 => "Deallocated or Unwritten Logical Block",
    }
}

wire_enum! {
    /// Path related status (SCT 3h), NVMe Base 2.x §4.2.3.4.
    pub enum PathStatus: u8 {
        /// Internal Path Error (00h).
        InternalPathError = 0x00 => "Internal Path Error",
        /// Asymmetric Access Persistent Loss (01h).
        AnaPersistentLoss = 0x01 => "Asymmetric Access Persistent Loss",
        /// Asymmetric Access Inaccessible (02h).
        AnaInaccessible = 0x02 => "Asymmetric Access Inaccessible",
        /// Asymmetric Access Transition (03h).
        AnaTransition = 0x03 => "Asymmetric Access Transition",
        /// Controller Pathing Error (60h).
        ControllerPathingError = 0x60 => "Controller Pathing Error",
        /// Host Pathing Error (70h).
        HostPathingError = 0x70 => "Host Pathing Error",
        /// Command Aborted By Host (71h).
        AbortedByHost = 0x71 => "Command Aborted By Host",
    }
}

/// A decoded completion status (NVMe Base 2.x §4.2.3): everything in the
/// CQE Status field except the phase tag.
///
/// Implements `Display` (spec names) and `std::error::Error`, so a failed
/// command can be returned as an error value as is.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Status {
    /// Status Code Type (SCT).
    pub sct: StatusCodeType,
    /// Status Code (SC), meaning given by `sct`.
    pub sc: u8,
    /// Do Not Retry: the same command would fail again.
    pub dnr: bool,
    /// More: the Error Information log page holds more detail.
    pub more: bool,
    /// Command Retry Delay index (0..=3) into CRDT1..3 of Identify Controller.
    pub crd: u8,
}

impl Status {
    /// Successful Completion (SCT 0, SC 0).
    pub const SUCCESS: Status = Status::new(StatusCodeType::Generic, 0);

    /// A status of type `sct` with code `sc`, DNR/M clear, CRD 0.
    pub const fn new(sct: StatusCodeType, sc: u8) -> Self {
        Status {
            sct,
            sc,
            dnr: false,
            more: false,
            crd: 0,
        }
    }

    /// A generic (SCT 0h) status.
    pub const fn generic(code: GenericStatus) -> Self {
        Self::new(StatusCodeType::Generic, code as u8)
    }

    /// A command specific (SCT 1h) status.
    pub const fn command_specific(code: CommandSpecificStatus) -> Self {
        Self::new(StatusCodeType::CommandSpecific, code as u8)
    }

    /// A media and data integrity (SCT 2h) status.
    pub const fn media(code: MediaStatus) -> Self {
        Self::new(StatusCodeType::MediaDataIntegrity, code as u8)
    }

    /// A path related (SCT 3h) status.
    pub const fn path(code: PathStatus) -> Self {
        Self::new(StatusCodeType::PathRelated, code as u8)
    }

    /// The same status with Do Not Retry set.
    pub const fn with_dnr(mut self) -> Self {
        self.dnr = true;
        self
    }

    /// The same status with More set.
    pub const fn with_more(mut self) -> Self {
        self.more = true;
        self
    }

    /// The same status with Command Retry Delay `crd` (low 2 bits kept).
    pub const fn with_crd(mut self, crd: u8) -> Self {
        self.crd = crd & 3;
        self
    }

    /// True for Successful Completion (SCT 0, SC 0), whatever DNR/M/CRD say.
    pub const fn is_success(&self) -> bool {
        matches!(self.sct, StatusCodeType::Generic) && self.sc == 0
    }

    /// `Ok(())` on success, otherwise `Err(self)`.
    pub const fn into_result(self) -> Result<(), Status> {
        if self.is_success() {
            Ok(())
        } else {
            Err(self)
        }
    }

    /// The generic code, if this is a named SCT 0h status.
    pub const fn as_generic(&self) -> Option<GenericStatus> {
        match self.sct {
            StatusCodeType::Generic => GenericStatus::from_value(self.sc),
            _ => None,
        }
    }

    /// The command specific code, if this is a named SCT 1h status.
    pub const fn as_command_specific(&self) -> Option<CommandSpecificStatus> {
        match self.sct {
            StatusCodeType::CommandSpecific => CommandSpecificStatus::from_value(self.sc),
            _ => None,
        }
    }

    /// The specification's name of this status, where this crate knows it.
    pub fn name(&self) -> Option<&'static str> {
        match self.sct {
            StatusCodeType::Generic => GenericStatus::from_value(self.sc).map(|c| c.name()),
            StatusCodeType::CommandSpecific => {
                CommandSpecificStatus::from_value(self.sc).map(|c| c.name())
            }
            StatusCodeType::MediaDataIntegrity => {
                MediaStatus::from_value(self.sc).map(|c| c.name())
            }
            StatusCodeType::PathRelated => PathStatus::from_value(self.sc).map(|c| c.name()),
            _ => None,
        }
    }

    /// Encodes the CQE Status field (CQE bytes 14..16 as a little-endian
    /// u16) with phase tag 0.
    pub const fn to_field(self) -> u16 {
        ((self.sc as u16) << 1)
            | ((self.sct as u16 & 7) << 9)
            | ((self.crd as u16 & 3) << 12)
            | ((self.more as u16) << 14)
            | ((self.dnr as u16) << 15)
    }

    /// Decodes a CQE Status field; the phase tag (bit 0) is ignored. Total:
    /// every 16-bit value decodes.
    pub const fn from_field(field: u16) -> Self {
        Status {
            sc: (field >> 1) as u8,
            sct: StatusCodeType::from_bits((field >> 9) as u8),
            crd: ((field >> 12) & 3) as u8,
            more: field & (1 << 14) != 0,
            dnr: field & (1 << 15) != 0,
        }
    }
}

impl From<GenericStatus> for Status {
    fn from(code: GenericStatus) -> Self {
        Status::generic(code)
    }
}

impl From<CommandSpecificStatus> for Status {
    fn from(code: CommandSpecificStatus) -> Self {
        Status::command_specific(code)
    }
}

impl fmt::Display for Status {
    /// `Connect Invalid Parameters (SCT 1h, SC 82h, DNR)`; unknown codes
    /// print as `status (SCT 1h, SC 99h)`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name().unwrap_or("status"))?;
        write!(f, " (SCT {:X}h, SC {:02X}h", self.sct as u8, self.sc)?;
        if self.dnr {
            f.write_str(", DNR")?;
        }
        if self.more {
            f.write_str(", M")?;
        }
        if self.crd != 0 {
            write!(f, ", CRD {}", self.crd)?;
        }
        f.write_str(")")
    }
}

impl std::error::Error for Status {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capture_connect_failures() {
        // linux-nvme-rdma-errors.pcap frame 10: status field bytes 04 83.
        let s = Status::from_field(u16::from_le_bytes([0x04, 0x83]));
        assert_eq!(
            s,
            Status::command_specific(CommandSpecificStatus::ConnectInvalidParameters).with_dnr()
        );
        assert_eq!(s.to_field(), 0x8304);
        // Frame 21: 08 83 = Connect Invalid Host, DNR.
        let s = Status::from_field(0x8308);
        assert_eq!(
            s.as_command_specific(),
            Some(CommandSpecificStatus::ConnectInvalidHost)
        );
        assert!(s.dnr && !s.more && s.crd == 0);
        // Linux host logs these as ret=16770 / 16772 (= field >> 1).
        assert_eq!(0x8304 >> 1, 16770);
        assert_eq!(0x8308 >> 1, 16772);
    }

    #[test]
    fn field_round_trip_all() {
        for field in (0..=u16::MAX).step_by(2) {
            assert_eq!(Status::from_field(field).to_field(), field);
        }
        // The phase bit is ignored.
        assert_eq!(Status::from_field(1), Status::SUCCESS);
    }

    #[test]
    fn bit_positions() {
        let s = Status::new(StatusCodeType::VendorSpecific, 0xFF)
            .with_crd(3)
            .with_more()
            .with_dnr();
        assert_eq!(s.to_field(), 0xFFFE);
        assert_eq!(
            Status::generic(GenericStatus::LbaOutOfRange).to_field(),
            0x0100
        );
        assert_eq!(
            Status::media(MediaStatus::UnrecoveredReadError).to_field(),
            0x0502
        );
        assert_eq!(Status::SUCCESS.to_field(), 0);
        assert!(Status::SUCCESS.is_success());
        assert!(Status::SUCCESS.with_dnr().is_success());
        assert!(!Status::generic(GenericStatus::InvalidField).is_success());
    }

    #[test]
    fn display_names() {
        let s =
            Status::command_specific(CommandSpecificStatus::ConnectInvalidParameters).with_dnr();
        assert_eq!(
            s.to_string(),
            "Connect Invalid Parameters (SCT 1h, SC 82h, DNR)"
        );
        assert_eq!(
            Status::generic(GenericStatus::InvalidOpcode).to_string(),
            "Invalid Command Opcode (SCT 0h, SC 01h)"
        );
        assert_eq!(
            Status::new(StatusCodeType::VendorSpecific, 0x99).to_string(),
            "status (SCT 7h, SC 99h)"
        );
        let e: Box<dyn std::error::Error> = Box::new(Status::SUCCESS);
        assert!(e.to_string().starts_with("Successful Completion"));
    }

    #[test]
    fn code_values() {
        assert_eq!(GenericStatus::SglDescriptorTypeInvalid.value(), 0x11);
        assert_eq!(GenericStatus::SglOffsetInvalid.value(), 0x16);
        assert_eq!(GenericStatus::NamespaceNotReady.value(), 0x82);
        assert_eq!(CommandSpecificStatus::InvalidLogPage.value(), 0x09);
        assert_eq!(CommandSpecificStatus::ConnectRestartDiscovery.value(), 0x83);
        assert_eq!(
            GenericStatus::try_from(0x17).map_err(|e| e.value),
            Err(0x17)
        );
        for c in GenericStatus::ALL {
            assert_eq!(GenericStatus::from_value(c.value()), Some(*c));
        }
    }
}
