//! Command opcodes and the identifiers carried in command dwords: admin and
//! NVM I/O opcodes, Fabrics command types, Feature Identifiers, Identify CNS
//! values and Log Page Identifiers.

wire_enum! {
    /// Admin command set opcodes, NVMe Base 2.x §5 Figure "Opcodes for Admin
    /// Commands" (SQE byte 0 on queue 0).
    pub enum AdminOpcode: u8 {
        /// Delete I/O Submission Queue (00h), PCIe only.
        DeleteIoSq = 0x00 => "Delete I/O Submission Queue",
        /// Create I/O Submission Queue (01h), PCIe only.
        CreateIoSq = 0x01 => "Create I/O Submission Queue",
        /// Get Log Page (02h), §5.16.
        GetLogPage = 0x02 => "Get Log Page",
        /// Delete I/O Completion Queue (04h), PCIe only.
        DeleteIoCq = 0x04 => "Delete I/O Completion Queue",
        /// Create I/O Completion Queue (05h), PCIe only.
        CreateIoCq = 0x05 => "Create I/O Completion Queue",
        /// Identify (06h), §5.17.
        Identify = 0x06 => "Identify",
        /// Abort (08h), §5.1.
        Abort = 0x08 => "Abort",
        /// Set Features (09h), §5.27.
        SetFeatures = 0x09 => "Set Features",
        /// Get Features (0Ah), §5.15.
        GetFeatures = 0x0A => "Get Features",
        /// Asynchronous Event Request (0Ch), §5.2.
        AsyncEventRequest = 0x0C => "Asynchronous Event Request",
        /// Keep Alive (18h), §5.20.
        KeepAlive = 0x18 => "Keep Alive",
        /// Fabrics command (7Fh); the type is in byte 4 (FCTYPE), §6.
        FabricsCommand = 0x7F => "Fabrics Command",
    }
}

wire_enum! {
    /// NVM Command Set I/O opcodes, NVM Command Set 1.x §3 Figure "Opcodes
    /// for NVM Commands".
    pub enum NvmOpcode: u8 {
        /// Flush (00h), Base 2.x §7.1.
        Flush = 0x00 => "Flush",
        /// Write (01h), NVM Command Set §3.3.6.
        Write = 0x01 => "Write",
        /// Read (02h), NVM Command Set §3.3.4.
        Read = 0x02 => "Read",
        /// Compare (05h), NVM Command Set §3.3.1: reads the logical blocks and compares
        /// them with the command's data (Compare Failure when they differ).
        Compare = 0x05 => "Compare",
        /// Write Zeroes (08h), NVM Command Set §3.3.8.
        WriteZeroes = 0x08 => "Write Zeroes",
        /// Dataset Management (09h), NVM Command Set §3.3.3.
        DatasetManagement = 0x09 => "Dataset Management",
    }
}

/// The opcode every Fabrics command carries in SQE byte 0 (NVMe Base 2.x §6.1).
pub const FABRICS_OPCODE: u8 = 0x7F;

wire_enum! {
    /// Fabrics Command Type (FCTYPE, SQE byte 4 of opcode 7Fh), NVMe Base 2.x
    /// §6 Figure "Fabrics Command Types" / NVMe over Fabrics 1.1 §3.
    pub enum FabricsCommandType: u8 {
        /// Property Set (00h).
        PropertySet = 0x00 => "Property Set",
        /// Connect (01h).
        Connect = 0x01 => "Connect",
        /// Property Get (04h).
        PropertyGet = 0x04 => "Property Get",
        /// Authentication Send (05h).
        AuthenticationSend = 0x05 => "Authentication Send",
        /// Authentication Receive (06h).
        AuthenticationReceive = 0x06 => "Authentication Receive",
        /// Disconnect (08h).
        Disconnect = 0x08 => "Disconnect",
    }
}

wire_enum! {
    /// Feature Identifiers (FID, CDW10 bits 7:0 of Get/Set Features), NVMe
    /// Base 2.x §5.27.1 Figure "Feature Identifiers".
    pub enum FeatureId: u8 {
        /// Arbitration (01h).
        Arbitration = 0x01 => "Arbitration",
        /// Power Management (02h).
        PowerManagement = 0x02 => "Power Management",
        /// Temperature Threshold (04h).
        TemperatureThreshold = 0x04 => "Temperature Threshold",
        /// Volatile Write Cache (06h).
        VolatileWriteCache = 0x06 => "Volatile Write Cache",
        /// Number of Queues (07h).
        NumberOfQueues = 0x07 => "Number of Queues",
        /// Interrupt Coalescing (08h).
        InterruptCoalescing = 0x08 => "Interrupt Coalescing",
        /// Interrupt Vector Configuration (09h).
        InterruptVectorConfig = 0x09 => "Interrupt Vector Configuration",
        /// Write Atomicity Normal (0Ah).
        WriteAtomicityNormal = 0x0A => "Write Atomicity Normal",
        /// Asynchronous Event Configuration (0Bh).
        AsyncEventConfiguration = 0x0B => "Asynchronous Event Configuration",
        /// Autonomous Power State Transition (0Ch).
        AutonomousPowerStateTransition = 0x0C => "Autonomous Power State Transition",
        /// Timestamp (0Eh).
        Timestamp = 0x0E => "Timestamp",
        /// Keep Alive Timer (0Fh).
        KeepAliveTimer = 0x0F => "Keep Alive Timer",
        /// Host Identifier (81h).
        HostIdentifier = 0x81 => "Host Identifier",
    }
}

wire_enum! {
    /// Identify Controller or Namespace Structure (CNS, CDW10 bits 7:0),
    /// NVMe Base 2.x §5.17.1 Figure "CNS Values".
    pub enum IdentifyCns: u8 {
        /// Identify Namespace data structure for NSID (00h).
        Namespace = 0x00 => "Identify Namespace",
        /// Identify Controller data structure (01h).
        Controller = 0x01 => "Identify Controller",
        /// Active Namespace ID list, NSIDs greater than NSID (02h).
        ActiveNamespaceList = 0x02 => "Active Namespace ID List",
        /// Namespace Identification Descriptor list for NSID (03h).
        NamespaceIdDescriptorList = 0x03 => "Namespace Identification Descriptor List",
        /// I/O Command Set specific Identify Namespace (05h).
        IoCommandSetNamespace = 0x05 => "I/O Command Set Specific Identify Namespace",
        /// I/O Command Set specific Identify Controller (06h).
        IoCommandSetController = 0x06 => "I/O Command Set Specific Identify Controller",
        /// I/O Command Set specific active namespace list (07h).
        IoCommandSetActiveNamespaceList = 0x07 => "I/O Command Set Specific Active Namespace ID List",
        /// I/O Command Set independent Identify Namespace (08h).
        IndependentNamespace = 0x08 => "I/O Command Set Independent Identify Namespace",
        /// Identify I/O Command Set data structure (1Ch).
        IoCommandSet = 0x1C => "Identify I/O Command Set",
    }
}

wire_enum! {
    /// Log Page Identifiers (LID, CDW10 bits 7:0 of Get Log Page), NVMe Base
    /// 2.x §5.16.1 Figure "Log Page Identifiers".
    pub enum LogPageId: u8 {
        /// Supported Log Pages (00h): one 4-byte LID Supported and Effects entry per
        /// log page identifier (NVMe Base 2.x §5.16.1.1).
        SupportedLogPages = 0x00 => "Supported Log Pages",
        /// Error Information (01h).
        ErrorInformation = 0x01 => "Error Information",
        /// SMART / Health Information (02h).
        SmartHealth = 0x02 => "SMART / Health Information",
        /// Firmware Slot Information (03h).
        FirmwareSlot = 0x03 => "Firmware Slot Information",
        /// Changed Namespace List (04h).
        ChangedNamespaceList = 0x04 => "Changed Namespace List",
        /// Commands Supported and Effects (05h).
        CommandsSupportedEffects = 0x05 => "Commands Supported and Effects",
        /// Asymmetric Namespace Access (0Ch).
        AnaLog = 0x0C => "Asymmetric Namespace Access",
        /// Discovery (70h), Fabrics discovery controllers only.
        Discovery = 0x70 => "Discovery",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values() {
        assert_eq!(AdminOpcode::KeepAlive.value(), 0x18);
        assert_eq!(AdminOpcode::FabricsCommand.value(), FABRICS_OPCODE);
        assert_eq!(NvmOpcode::DatasetManagement.value(), 0x09);
        assert_eq!(FabricsCommandType::Disconnect.value(), 0x08);
        assert_eq!(FeatureId::KeepAliveTimer.value(), 0x0F);
        assert_eq!(IdentifyCns::NamespaceIdDescriptorList.value(), 0x03);
        assert_eq!(LogPageId::Discovery.value(), 0x70);
        assert_eq!(LogPageId::AnaLog.value(), 0x0C);
        assert_eq!(AdminOpcode::try_from(0x06), Ok(AdminOpcode::Identify));
        let e = AdminOpcode::try_from(0x03).unwrap_err();
        assert_eq!(e.to_string(), "unknown AdminOpcode value 0x3");
        assert_eq!(FabricsCommandType::Connect.to_string(), "Connect");
    }

    #[test]
    fn lookups_round_trip() {
        for v in 0..=255u8 {
            if let Some(o) = AdminOpcode::from_value(v) {
                assert_eq!(u8::from(o), v);
            }
            if let Some(o) = LogPageId::from_value(v) {
                assert_eq!(o.value(), v);
            }
        }
    }
}
