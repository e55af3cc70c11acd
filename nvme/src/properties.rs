//! Controller properties reached with Fabrics Property Get/Set (NVMe Base
//! 2.x §3.1.4 "Controller Properties"; NVMe over Fabrics 1.1 §3.4): their
//! offsets and sizes, and typed views of CAP, VS, CC and CSTS.

wire_enum! {
    /// Property offsets (OFST of Property Get/Set), NVMe Base 2.x §3.1.4
    /// Figure "Offset of Controller Properties".
    pub enum Property: u32 {
        /// Controller Capabilities (00h, 8 bytes).
        Cap = 0x00 => "CAP",
        /// Version (08h, 4 bytes).
        Vs = 0x08 => "VS",
        /// Interrupt Mask Set (0Ch, 4 bytes), PCIe only.
        Intms = 0x0C => "INTMS",
        /// Interrupt Mask Clear (10h, 4 bytes), PCIe only.
        Intmc = 0x10 => "INTMC",
        /// Controller Configuration (14h, 4 bytes).
        Cc = 0x14 => "CC",
        /// Controller Status (1Ch, 4 bytes).
        Csts = 0x1C => "CSTS",
        /// NVM Subsystem Reset (20h, 4 bytes).
        Nssr = 0x20 => "NSSR",
    }
}

impl Property {
    /// Size of the property in bytes (8 for CAP, 4 for the others).
    pub const fn size(self) -> PropertySize {
        match self {
            Property::Cap => PropertySize::EightBytes,
            _ => PropertySize::FourBytes,
        }
    }
}

wire_enum! {
    /// ATTRIB bits 2:0 of Property Get/Set: the property size (NVMe Base 2.x
    /// §6.5 / §6.6).
    pub enum PropertySize: u8 {
        /// 4-byte property (000b).
        FourBytes = 0 => "4 bytes",
        /// 8-byte property (001b).
        EightBytes = 1 => "8 bytes",
    }
}

impl PropertySize {
    /// Size in bytes: 4 or 8.
    pub const fn bytes(self) -> usize {
        match self {
            PropertySize::FourBytes => 4,
            PropertySize::EightBytes => 8,
        }
    }
}

const fn field(v: u64, lo: u32, width: u32) -> u64 {
    (v >> lo) & ((1u64 << width) - 1)
}

const fn put(v: u64, lo: u32, width: u32, x: u64) -> u64 {
    let mask = ((1u64 << width) - 1) << lo;
    (v & !mask) | ((x << lo) & mask)
}

/// CAP bit 37: NVM Command Set supported (CSS bit 0).
pub const CAP_CSS_NVM: u64 = 1 << 37;
/// CAP bit 43: one or more I/O Command Sets supported (CSS bit 6).
pub const CAP_CSS_IOCS: u64 = 1 << 43;
/// CAP bit 44: no I/O Command Set supported (CSS bit 7).
pub const CAP_CSS_NO_IO: u64 = 1 << 44;

/// Controller Capabilities (CAP, offset 00h, 8 bytes), NVMe Base 2.x
/// §3.1.4.1.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Cap(pub u64);

impl Cap {
    /// Maximum Queue Entries Supported, 0's based (bits 15:0).
    pub const fn mqes(self) -> u16 {
        field(self.0, 0, 16) as u16
    }
    /// Sets MQES (0's based).
    pub const fn with_mqes(self, mqes_0based: u16) -> Self {
        Cap(put(self.0, 0, 16, mqes_0based as u64))
    }
    /// Contiguous Queues Required (bit 16).
    pub const fn cqr(self) -> bool {
        field(self.0, 16, 1) != 0
    }
    /// Sets CQR.
    pub const fn with_cqr(self, cqr: bool) -> Self {
        Cap(put(self.0, 16, 1, cqr as u64))
    }
    /// Arbitration Mechanism Supported (bits 18:17).
    pub const fn ams(self) -> u8 {
        field(self.0, 17, 2) as u8
    }
    /// Timeout (bits 31:24): worst-case time for CSTS.RDY to follow CC.EN,
    /// in 500 ms units.
    pub const fn to(self) -> u8 {
        field(self.0, 24, 8) as u8
    }
    /// Sets TO (500 ms units).
    pub const fn with_to(self, to_500ms: u8) -> Self {
        Cap(put(self.0, 24, 8, to_500ms as u64))
    }
    /// Timeout in milliseconds (TO x 500).
    pub const fn timeout_ms(self) -> u32 {
        self.to() as u32 * 500
    }
    /// Doorbell Stride (bits 35:32), PCIe only.
    pub const fn dstrd(self) -> u8 {
        field(self.0, 32, 4) as u8
    }
    /// NVM Subsystem Reset Supported (bit 36).
    pub const fn nssrs(self) -> bool {
        field(self.0, 36, 1) != 0
    }
    /// Command Sets Supported (bits 44:37).
    pub const fn css(self) -> u8 {
        field(self.0, 37, 8) as u8
    }
    /// Sets CSS (bits 44:37), e.g. 41h = NVM + I/O Command Sets.
    pub const fn with_css(self, css: u8) -> Self {
        Cap(put(self.0, 37, 8, css as u64))
    }
    /// NVM Command Set supported (bit 37).
    pub const fn css_nvm(self) -> bool {
        self.0 & CAP_CSS_NVM != 0
    }
    /// Memory Page Size Minimum (bits 51:48): 2^(12 + MPSMIN) bytes.
    pub const fn mpsmin(self) -> u8 {
        field(self.0, 48, 4) as u8
    }
    /// Sets MPSMIN.
    pub const fn with_mpsmin(self, mpsmin: u8) -> Self {
        Cap(put(self.0, 48, 4, mpsmin as u64))
    }
    /// Memory Page Size Maximum (bits 55:52): 2^(12 + MPSMAX) bytes.
    pub const fn mpsmax(self) -> u8 {
        field(self.0, 52, 4) as u8
    }
    /// Sets MPSMAX.
    pub const fn with_mpsmax(self, mpsmax: u8) -> Self {
        Cap(put(self.0, 52, 4, mpsmax as u64))
    }
}

/// Version (VS, offset 08h, 4 bytes), NVMe Base 2.x §3.1.4.2: major in bits
/// 31:16, minor 15:8, tertiary 7:0.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Vs(pub u32);

impl Vs {
    /// NVMe 1.3.0 (what Linux nvmet reports).
    pub const V1_3: Vs = Vs::new(1, 3, 0);
    /// NVMe 1.4.0.
    pub const V1_4: Vs = Vs::new(1, 4, 0);
    /// NVMe 2.0.0.
    pub const V2_0: Vs = Vs::new(2, 0, 0);

    /// Version `major.minor.tertiary`.
    pub const fn new(major: u16, minor: u8, tertiary: u8) -> Self {
        Vs(((major as u32) << 16) | ((minor as u32) << 8) | tertiary as u32)
    }
    /// Major version (bits 31:16).
    pub const fn major(self) -> u16 {
        (self.0 >> 16) as u16
    }
    /// Minor version (bits 15:8).
    pub const fn minor(self) -> u8 {
        (self.0 >> 8) as u8
    }
    /// Tertiary version (bits 7:0).
    pub const fn tertiary(self) -> u8 {
        self.0 as u8
    }
}

wire_enum! {
    /// CC.SHN, Shutdown Notification (bits 15:14).
    pub enum ShutdownNotification: u8 {
        /// No notification (00b).
        None = 0 => "No notification",
        /// Normal shutdown (01b).
        Normal = 1 => "Normal shutdown",
        /// Abrupt shutdown (10b).
        Abrupt = 2 => "Abrupt shutdown",
    }
}

wire_enum! {
    /// CSTS.SHST, Shutdown Status (bits 3:2).
    pub enum ShutdownStatus: u8 {
        /// Normal operation (00b).
        Normal = 0 => "Normal operation",
        /// Shutdown processing occurring (01b).
        Occurring = 1 => "Shutdown processing occurring",
        /// Shutdown processing complete (10b).
        Complete = 2 => "Shutdown processing complete",
    }
}

/// Controller Configuration (CC, offset 14h, 4 bytes), NVMe Base 2.x
/// §3.1.4.5.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Cc(pub u32);

impl Cc {
    /// Enable (bit 0).
    pub const fn en(self) -> bool {
        self.0 & 1 != 0
    }
    /// Sets EN.
    pub const fn with_en(self, en: bool) -> Self {
        Cc(put(self.0 as u64, 0, 1, en as u64) as u32)
    }
    /// I/O Command Set Selected (bits 6:4): 000b NVM, 110b all supported
    /// I/O command sets, 111b admin only.
    pub const fn css(self) -> u8 {
        field(self.0 as u64, 4, 3) as u8
    }
    /// Sets CSS.
    pub const fn with_css(self, css: u8) -> Self {
        Cc(put(self.0 as u64, 4, 3, css as u64) as u32)
    }
    /// Memory Page Size (bits 10:7): 2^(12 + MPS) bytes.
    pub const fn mps(self) -> u8 {
        field(self.0 as u64, 7, 4) as u8
    }
    /// Arbitration Mechanism Selected (bits 13:11).
    pub const fn ams(self) -> u8 {
        field(self.0 as u64, 11, 3) as u8
    }
    /// Shutdown Notification raw bits (15:14).
    pub const fn shn_bits(self) -> u8 {
        field(self.0 as u64, 14, 2) as u8
    }
    /// Shutdown Notification; `None` for the reserved value 11b.
    pub const fn shn(self) -> Option<ShutdownNotification> {
        ShutdownNotification::from_value(self.shn_bits())
    }
    /// Sets SHN.
    pub const fn with_shn(self, shn: ShutdownNotification) -> Self {
        Cc(put(self.0 as u64, 14, 2, shn as u64) as u32)
    }
    /// I/O Submission Queue Entry Size (bits 19:16): 2^n bytes (6 = 64 B).
    pub const fn iosqes(self) -> u8 {
        field(self.0 as u64, 16, 4) as u8
    }
    /// Sets IOSQES.
    pub const fn with_iosqes(self, iosqes: u8) -> Self {
        Cc(put(self.0 as u64, 16, 4, iosqes as u64) as u32)
    }
    /// I/O Completion Queue Entry Size (bits 23:20): 2^n bytes (4 = 16 B).
    pub const fn iocqes(self) -> u8 {
        field(self.0 as u64, 20, 4) as u8
    }
    /// Sets IOCQES.
    pub const fn with_iocqes(self, iocqes: u8) -> Self {
        Cc(put(self.0 as u64, 20, 4, iocqes as u64) as u32)
    }
}

/// Controller Status (CSTS, offset 1Ch, 4 bytes), NVMe Base 2.x §3.1.4.6.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Csts(pub u32);

impl Csts {
    /// Ready (bit 0).
    pub const fn rdy(self) -> bool {
        self.0 & 1 != 0
    }
    /// Sets RDY.
    pub const fn with_rdy(self, rdy: bool) -> Self {
        Csts(put(self.0 as u64, 0, 1, rdy as u64) as u32)
    }
    /// Controller Fatal Status (bit 1).
    pub const fn cfs(self) -> bool {
        self.0 & 2 != 0
    }
    /// Sets CFS.
    pub const fn with_cfs(self, cfs: bool) -> Self {
        Csts(put(self.0 as u64, 1, 1, cfs as u64) as u32)
    }
    /// Shutdown Status raw bits (3:2).
    pub const fn shst_bits(self) -> u8 {
        field(self.0 as u64, 2, 2) as u8
    }
    /// Shutdown Status; `None` for the reserved value 11b.
    pub const fn shst(self) -> Option<ShutdownStatus> {
        ShutdownStatus::from_value(self.shst_bits())
    }
    /// Sets SHST.
    pub const fn with_shst(self, shst: ShutdownStatus) -> Self {
        Csts(put(self.0 as u64, 2, 2, shst as u64) as u32)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capture_cap() {
        // linux-nvme-rdma-rxe.pcap frame 15: nvmet's CAP = 0000_0820_0f00_007f.
        let cap = Cap(0x0000_0820_0f00_007f);
        assert_eq!(cap.mqes(), 127);
        assert!(!cap.cqr());
        assert_eq!(cap.to(), 15);
        assert_eq!(cap.timeout_ms(), 7500);
        assert!(cap.css_nvm());
        assert_eq!(cap.css(), 0x41);
        assert_eq!(
            (cap.mpsmin(), cap.mpsmax(), cap.dstrd(), cap.nssrs()),
            (0, 0, 0, false)
        );
        let built = Cap::default().with_mqes(127).with_to(15).with_css(0x41);
        assert_eq!(built, cap);
        let c2 = cap.with_cqr(true).with_mpsmin(1).with_mpsmax(4);
        assert_eq!(
            (c2.cqr(), c2.mpsmin(), c2.mpsmax(), c2.mqes()),
            (true, 1, 4, 127)
        );
        assert_eq!(Property::Cap.size().bytes(), 8);
        assert_eq!(Property::Csts.size(), PropertySize::FourBytes);
    }

    #[test]
    fn capture_cc_csts_vs() {
        // Frame 17: Set CC 00460060 (IOCQES 4, IOSQES 6, CSS 110b, EN 0);
        // frame 29 enables (00460061); frame 79 shuts down (00464061).
        let cc = Cc(0x0046_0060);
        assert_eq!(
            (cc.en(), cc.css(), cc.iosqes(), cc.iocqes()),
            (false, 6, 6, 4)
        );
        assert_eq!(cc.shn(), Some(ShutdownNotification::None));
        assert_eq!(cc.with_en(true), Cc(0x0046_0061));
        let shut = Cc(0x0046_4061);
        assert_eq!(shut.shn(), Some(ShutdownNotification::Normal));
        assert_eq!(Cc(0x0046_0061).with_shn(ShutdownNotification::Normal), shut);
        assert_eq!(
            Cc::default().with_css(6).with_iosqes(6).with_iocqes(4),
            Cc(0x0046_0060)
        );
        // Frame 35: CSTS 1 (RDY); frame 85: CSTS 8 (SHST complete, RDY 0).
        assert!(Csts(1).rdy());
        let c = Csts(8);
        assert_eq!(
            (c.rdy(), c.cfs(), c.shst()),
            (false, false, Some(ShutdownStatus::Complete))
        );
        assert_eq!(Csts::default().with_shst(ShutdownStatus::Complete), c);
        assert_eq!(Csts::default().with_rdy(true).with_cfs(true), Csts(3));
        // Frame 39: VS 00010300 = 1.3.0.
        assert_eq!(Vs(0x0001_0300), Vs::V1_3);
        assert_eq!(
            (Vs::V1_3.major(), Vs::V1_3.minor(), Vs::V1_3.tertiary()),
            (1, 3, 0)
        );
        assert!(Vs::V2_0 > Vs::V1_4);
    }
}
