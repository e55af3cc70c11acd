//! Feature values carried in CDW11 of Set Features and in DW0 of the Get /
//! Set Features completion (NVMe Base 2.x §5.27.1), and the Asynchronous
//! Event Request completion DW0 (§5.2.1).

wire_enum! {
    /// Get Features Select (SEL, CDW10 bits 10:8), NVMe Base 2.x §5.15.
    pub enum FeatureSelect: u8 {
        /// Current value (000b).
        Current = 0 => "Current",
        /// Default value (001b).
        Default = 1 => "Default",
        /// Saved value (010b).
        Saved = 2 => "Saved",
        /// Supported capabilities (011b).
        SupportedCapabilities = 3 => "Supported Capabilities",
    }
}

/// Number of Queues (FID 07h), NVMe Base 2.x §5.27.1.5: in CDW11 the host
/// asks for NSQR (bits 15:0) submission and NCQR (bits 31:16) completion
/// queues, both 0's based and excluding the admin queue; the completion's
/// DW0 gives NSQA/NCQA in the same layout.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct NumberOfQueues {
    /// Number of I/O submission queues, 0's based.
    pub nsq_0based: u16,
    /// Number of I/O completion queues, 0's based.
    pub ncq_0based: u16,
}

impl NumberOfQueues {
    /// `count` submission and completion queues (1..=65535; 0 is taken as
    /// 1, the least a host may ask for).
    pub const fn with_count(count: u16) -> Self {
        let n = if count == 0 { 0 } else { count - 1 };
        NumberOfQueues {
            nsq_0based: n,
            ncq_0based: n,
        }
    }

    /// Decodes CDW11 (request) or DW0 (answer).
    pub const fn from_dword(dw: u32) -> Self {
        NumberOfQueues {
            nsq_0based: dw as u16,
            ncq_0based: (dw >> 16) as u16,
        }
    }

    /// Encodes CDW11 / DW0.
    pub const fn to_dword(self) -> u32 {
        (self.nsq_0based as u32) | ((self.ncq_0based as u32) << 16)
    }

    /// Number of I/O submission queues (1..=65536).
    pub const fn nsq(self) -> u32 {
        self.nsq_0based as u32 + 1
    }

    /// Number of I/O completion queues (1..=65536).
    pub const fn ncq(self) -> u32 {
        self.ncq_0based as u32 + 1
    }

    /// The answer to a request: each count capped at `max_0based`.
    /// (0's based FFFFh is invalid in a request; the caller rejects it with
    /// Invalid Field before calling this.)
    pub const fn granted(self, max_0based: u16) -> Self {
        NumberOfQueues {
            nsq_0based: if self.nsq_0based < max_0based {
                self.nsq_0based
            } else {
                max_0based
            },
            ncq_0based: if self.ncq_0based < max_0based {
                self.ncq_0based
            } else {
                max_0based
            },
        }
    }
}

/// Keep Alive Timer (FID 0Fh), NVMe Base 2.x §5.27.1.12: CDW11 holds KATO
/// in milliseconds (0 disables).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct KeepAliveTimer {
    /// Keep Alive Timeout, milliseconds.
    pub kato_ms: u32,
}

impl KeepAliveTimer {
    /// Decodes CDW11 / DW0.
    pub const fn from_dword(dw: u32) -> Self {
        KeepAliveTimer { kato_ms: dw }
    }

    /// Encodes CDW11 / DW0.
    pub const fn to_dword(self) -> u32 {
        self.kato_ms
    }
}

/// Volatile Write Cache (FID 06h), NVMe Base 2.x §5.27.1.4: CDW11 bit 0 =
/// Volatile Write Cache Enable (WCE).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct VolatileWriteCache {
    /// Write cache enabled.
    pub wce: bool,
}

impl VolatileWriteCache {
    /// Decodes CDW11 / DW0.
    pub const fn from_dword(dw: u32) -> Self {
        VolatileWriteCache { wce: dw & 1 != 0 }
    }

    /// Encodes CDW11 / DW0.
    pub const fn to_dword(self) -> u32 {
        self.wce as u32
    }
}

/// Asynchronous Event Configuration (FID 0Bh) CDW11 bits 7:0: SMART /
/// Health critical warnings.
pub const AEC_SMART_MASK: u32 = 0xFF;
/// AEC bit 8: Namespace Attribute Notices.
pub const AEC_NS_ATTR: u32 = 1 << 8;
/// AEC bit 9: Firmware Activation Notices.
pub const AEC_FW_ACTIVATION: u32 = 1 << 9;
/// AEC bit 10: Telemetry Log Notices.
pub const AEC_TELEMETRY: u32 = 1 << 10;
/// AEC bit 11: Asymmetric Namespace Access Change Notices.
pub const AEC_ANA_CHANGE: u32 = 1 << 11;
/// AEC bit 31: Discovery Log Page Change Notices (discovery controllers).
pub const AEC_DISCOVERY_CHANGE: u32 = 1 << 31;

wire_enum! {
    /// Asynchronous Event Type (completion DW0 bits 2:0), NVMe Base 2.x
    /// §5.2.1 Figure "Asynchronous Event Request - Completion Queue Entry
    /// Dword 0".
    pub enum AsyncEventType: u8 {
        /// Error status (0h).
        Error = 0 => "Error",
        /// SMART / Health status (1h).
        SmartHealth = 1 => "SMART / Health",
        /// Notice (2h).
        Notice = 2 => "Notice",
        /// Immediate (3h).
        Immediate = 3 => "Immediate",
        /// One-Shot (4h).
        OneShot = 4 => "One-Shot",
        /// I/O Command Set specific status (6h).
        IoCommandSetSpecific = 6 => "I/O Command Set Specific",
        /// Vendor specific (7h).
        VendorSpecific = 7 => "Vendor Specific",
    }
}

/// Notice type information: Namespace Attribute Changed (00h).
pub const AEN_NOTICE_NS_ATTR_CHANGED: u8 = 0x00;
/// Notice type information: Firmware Activation Starting (01h).
pub const AEN_NOTICE_FW_ACTIVATION: u8 = 0x01;
/// Notice type information: ANA Change (03h).
pub const AEN_NOTICE_ANA_CHANGE: u8 = 0x03;
/// Notice type information: Discovery Log Page Change (F0h).
pub const AEN_NOTICE_DISCOVERY_CHANGE: u8 = 0xF0;

/// Asynchronous Event Request completion DW0 (NVMe Base 2.x §5.2.1):
/// type (bits 2:0), information (15:8), associated log page (23:16).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct AsyncEvent {
    /// Asynchronous Event Type, raw (see [`AsyncEventType`]).
    pub event_type: u8,
    /// Asynchronous Event Information.
    pub info: u8,
    /// Log Page Identifier to read (with RAE clear) to clear the event.
    pub lid: u8,
}

impl AsyncEvent {
    /// An event of `event_type` with `info`, pointing at log page `lid`.
    pub const fn new(event_type: AsyncEventType, info: u8, lid: u8) -> Self {
        AsyncEvent {
            event_type: event_type as u8,
            info,
            lid,
        }
    }

    /// Decodes DW0.
    pub const fn from_dw0(dw0: u32) -> Self {
        AsyncEvent {
            event_type: (dw0 & 7) as u8,
            info: (dw0 >> 8) as u8,
            lid: (dw0 >> 16) as u8,
        }
    }

    /// Encodes DW0.
    pub const fn to_dw0(self) -> u32 {
        (self.event_type as u32 & 7) | ((self.info as u32) << 8) | ((self.lid as u32) << 16)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::opcodes::LogPageId;

    #[test]
    fn capture_number_of_queues() {
        // linux-nvme-rdma-rxe.pcap frame 164: Set Features Number of Queues
        // with CDW11 0 (one queue pair); frame 166: DW0 007f007f (128 each).
        let req = NumberOfQueues::from_dword(0);
        assert_eq!((req.nsq(), req.ncq()), (1, 1));
        assert_eq!(NumberOfQueues::with_count(1), req);
        let ans = NumberOfQueues::from_dword(0x007f_007f);
        assert_eq!((ans.nsq(), ans.ncq()), (128, 128));
        assert_eq!(NumberOfQueues::with_count(128).to_dword(), 0x007f_007f);
        assert_eq!(
            NumberOfQueues::from_dword(0x00ff_0003).granted(0x7f),
            NumberOfQueues {
                nsq_0based: 3,
                ncq_0based: 0x7f
            }
        );
    }

    #[test]
    fn capture_async_event_config() {
        // Frame 50 (discovery controller): AEC CDW11 80000000h; frame 176
        // (I/O controller): 00000900h = NS attribute + ANA change notices.
        assert_eq!(AEC_DISCOVERY_CHANGE, 0x8000_0000);
        assert_eq!(AEC_NS_ATTR | AEC_ANA_CHANGE, 0x900);
    }

    #[test]
    fn async_event_dw0() {
        let ev = AsyncEvent::new(
            AsyncEventType::Notice,
            AEN_NOTICE_DISCOVERY_CHANGE,
            LogPageId::Discovery.value(),
        );
        assert_eq!(ev.to_dw0(), 0x0070_f002);
        assert_eq!(AsyncEvent::from_dw0(0x0070_f002), ev);
        assert_eq!(KeepAliveTimer::from_dword(5000).to_dword(), 5000);
        assert!(VolatileWriteCache::from_dword(1).wce);
        assert_eq!(VolatileWriteCache { wce: false }.to_dword(), 0);
        assert_eq!(
            FeatureSelect::from_value(3),
            Some(FeatureSelect::SupportedCapabilities)
        );
    }
}
