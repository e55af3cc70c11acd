//! Submission Queue Entry: the 64-byte command (NVMe Base 2.x §4.2,
//! "Submission Queue Entry"), plus constructors for the commands a host
//! sends and decoders for their command dwords.
//!
//! Layout (little endian): byte 0 opcode; byte 1 flags (FUSE bits 1:0, PSDT
//! bits 7:6); 2..4 CID; 4..8 NSID; 8..12 CDW2; 12..16 CDW3; 16..24 MPTR;
//! 24..40 DPTR (one SGL descriptor on fabrics); 40..64 CDW10..CDW15.

use zerocopy::byteorder::little_endian::{U16, U32, U64};
use zerocopy::{FromBytes, FromZeros, Immutable, IntoBytes, KnownLayout, Unaligned};

use crate::opcodes::{AdminOpcode, FeatureId, IdentifyCns, LogPageId, NvmOpcode};
use crate::sgl::SglDescriptor;

/// PSDT 00b: PRPs (PCIe only; not valid on fabrics).
pub const PSDT_PRP: u8 = 0b00;
/// PSDT 01b: SGLs, MPTR holds the address of a contiguous buffer. The value
/// Linux sends on fabrics (flags byte 40h).
pub const PSDT_SGL_MPTR_CONTIG: u8 = 0b01;
/// PSDT 10b: SGLs, MPTR holds the address of an SGL segment.
pub const PSDT_SGL_MPTR_SGL: u8 = 0b10;

/// FUSE 00b: normal operation.
pub const FUSE_NORMAL: u8 = 0b00;
/// FUSE 01b: first command of a fused operation.
pub const FUSE_FIRST: u8 = 0b01;
/// FUSE 10b: second command of a fused operation.
pub const FUSE_SECOND: u8 = 0b10;

/// Read/Write CDW12 bit 30: Force Unit Access.
pub const RW_FUA: u32 = 1 << 30;
/// Read/Write CDW12 bit 31: Limited Retry.
pub const RW_LR: u32 = 1 << 31;
/// Write Zeroes CDW12 bit 25: Deallocate.
pub const WZ_DEAC: u32 = 1 << 25;
/// Dataset Management CDW11 bit 2: Attribute - Deallocate.
pub const DSM_AD: u32 = 1 << 2;
/// Get Log Page CDW10 bit 15: Retain Asynchronous Event.
pub const GLP_RAE: u32 = 1 << 15;
/// Set Features CDW10 bit 31: Save.
pub const SF_SV: u32 = 1 << 31;

/// Submission Queue Entry, 64 bytes (NVMe Base 2.x §4.2 Figure "Common
/// Command Format"); on fabrics DPTR is a single SGL descriptor
/// (NVMe Base 2.x §4.3.2, PSDT 01b).
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, Hash, FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned,
)]
#[repr(C)]
pub struct Sqe {
    opcode: u8,
    flags: u8,
    cid: U16,
    nsid: U32,
    cdw2: U32,
    cdw3: U32,
    mptr: U64,
    dptr: SglDescriptor,
    cdw10: U32,
    cdw11: U32,
    cdw12: U32,
    cdw13: U32,
    cdw14: U32,
    cdw15: U32,
}
assert_size!(Sqe, 64);

macro_rules! dword_accessors {
    ($($get:ident $set:ident $field:ident),+) => {
        $(
            #[doc = concat!("Command Dword ", stringify!($field), " (little endian on the wire).")]
            pub fn $get(&self) -> u32 {
                self.$field.get()
            }
            #[doc = concat!("Sets ", stringify!($field), ".")]
            pub fn $set(&mut self, value: u32) {
                self.$field.set(value);
            }
        )+
    };
}

impl Default for Sqe {
    fn default() -> Self {
        Self::new(0, 0)
    }
}

impl Sqe {
    /// A command with `opcode` and `cid`, PSDT 01b (SGL, flags 40h), and the
    /// keyed null SGL Linux sends when there is no data; all else zero.
    pub fn new(opcode: u8, cid: u16) -> Self {
        let mut sqe = Sqe::new_zeroed();
        sqe.opcode = opcode;
        sqe.set_psdt(PSDT_SGL_MPTR_CONTIG);
        sqe.cid.set(cid);
        sqe.dptr = SglDescriptor::keyed_null();
        sqe
    }

    /// An entry from its raw 64 bytes.
    pub fn from_array(bytes: [u8; 64]) -> Self {
        zerocopy::transmute!(bytes)
    }

    /// The raw 64 bytes.
    pub fn to_array(self) -> [u8; 64] {
        zerocopy::transmute!(self)
    }

    /// Opcode (byte 0).
    pub const fn opcode(&self) -> u8 {
        self.opcode
    }

    /// Sets the opcode.
    pub fn set_opcode(&mut self, opcode: u8) {
        self.opcode = opcode;
    }

    /// Byte 1 as a whole: FUSE (bits 1:0), PSDT (bits 7:6).
    pub const fn flags(&self) -> u8 {
        self.flags
    }

    /// Fused Operation (FUSE, byte 1 bits 1:0).
    pub const fn fuse(&self) -> u8 {
        self.flags & 0b11
    }

    /// Sets FUSE (low 2 bits of `fuse` kept).
    pub fn set_fuse(&mut self, fuse: u8) {
        self.flags = (self.flags & !0b11) | (fuse & 0b11);
    }

    /// PRP or SGL for Data Transfer (PSDT, byte 1 bits 7:6); fabrics requires
    /// [`PSDT_SGL_MPTR_CONTIG`].
    pub const fn psdt(&self) -> u8 {
        self.flags >> 6
    }

    /// Sets PSDT (low 2 bits of `psdt` kept).
    pub fn set_psdt(&mut self, psdt: u8) {
        self.flags = (self.flags & 0x3F) | ((psdt & 0b11) << 6);
    }

    /// Command Identifier (bytes 2..4).
    pub fn cid(&self) -> u16 {
        self.cid.get()
    }

    /// Sets the Command Identifier.
    pub fn set_cid(&mut self, cid: u16) {
        self.cid.set(cid);
    }

    /// Namespace Identifier (bytes 4..8). Fabrics commands put FCTYPE in
    /// byte 4 instead: see [`fctype`](Self::fctype).
    pub fn nsid(&self) -> u32 {
        self.nsid.get()
    }

    /// Sets the Namespace Identifier.
    pub fn set_nsid(&mut self, nsid: u32) {
        self.nsid.set(nsid);
    }

    /// Builder form of [`set_nsid`](Self::set_nsid).
    pub fn with_nsid(mut self, nsid: u32) -> Self {
        self.set_nsid(nsid);
        self
    }

    /// For a Fabrics command (opcode 7Fh), the Fabrics Command Type (byte
    /// 4); `None` for any other opcode.
    pub fn fctype(&self) -> Option<u8> {
        (self.opcode == crate::opcodes::FABRICS_OPCODE).then(|| self.nsid.to_bytes()[0])
    }

    /// Metadata Pointer (bytes 16..24).
    pub fn mptr(&self) -> u64 {
        self.mptr.get()
    }

    /// Sets the Metadata Pointer.
    pub fn set_mptr(&mut self, mptr: u64) {
        self.mptr.set(mptr);
    }

    /// Data Pointer as an SGL descriptor (bytes 24..40, "SGL1").
    pub const fn sgl(&self) -> SglDescriptor {
        self.dptr
    }

    /// Sets the Data Pointer SGL descriptor.
    pub fn set_sgl(&mut self, sgl: SglDescriptor) {
        self.dptr = sgl;
    }

    /// Builder form of [`set_sgl`](Self::set_sgl).
    pub fn with_sgl(mut self, sgl: SglDescriptor) -> Self {
        self.dptr = sgl;
        self
    }

    dword_accessors!(
        cdw2 set_cdw2 cdw2,
        cdw3 set_cdw3 cdw3,
        cdw10 set_cdw10 cdw10,
        cdw11 set_cdw11 cdw11,
        cdw12 set_cdw12 cdw12,
        cdw13 set_cdw13 cdw13,
        cdw14 set_cdw14 cdw14,
        cdw15 set_cdw15 cdw15
    );

    // ----- NVM I/O commands (NVM Command Set 1.x §3.3) -----

    fn rw(opcode: NvmOpcode, cid: u16, nsid: u32, slba: u64, nlb_0based: u16, fua: bool) -> Self {
        let mut sqe = Sqe::new(opcode.value(), cid).with_nsid(nsid);
        sqe.set_slba(slba);
        sqe.set_cdw12(u32::from(nlb_0based) | if fua { RW_FUA } else { 0 });
        sqe
    }

    /// Read (02h): `nlb_0based + 1` logical blocks from `slba` of `nsid`
    /// (NVM Command Set §3.3.4). The data pointer is the keyed null SGL:
    /// set the real one with [`set_sgl`](Self::set_sgl).
    pub fn read(cid: u16, nsid: u32, slba: u64, nlb_0based: u16, fua: bool) -> Self {
        Self::rw(NvmOpcode::Read, cid, nsid, slba, nlb_0based, fua)
    }

    /// Write (01h): `nlb_0based + 1` logical blocks at `slba` (NVM Command
    /// Set §3.3.6); set the data SGL with [`set_sgl`](Self::set_sgl).
    pub fn write(cid: u16, nsid: u32, slba: u64, nlb_0based: u16, fua: bool) -> Self {
        Self::rw(NvmOpcode::Write, cid, nsid, slba, nlb_0based, fua)
    }

    /// Fabrics Disconnect (opcode 7Fh, FCTYPE 08h, RECFMT 0; NVMe Base 2.x §6.4):
    /// deletes the I/O queue it is submitted on.
    pub fn disconnect(cid: u16) -> Self {
        // FCTYPE is byte 4, where other commands hold the NSID (little endian).
        Sqe::new(crate::opcodes::FABRICS_OPCODE, cid).with_nsid(u32::from(
            crate::opcodes::FabricsCommandType::Disconnect.value(),
        ))
    }

    /// Compare (05h): `nlb_0based + 1` logical blocks at `slba` against the
    /// command's data (NVM Command Set §3.3.1); set the data SGL with
    /// [`set_sgl`](Self::set_sgl).
    pub fn compare(cid: u16, nsid: u32, slba: u64, nlb_0based: u16) -> Self {
        Self::rw(NvmOpcode::Compare, cid, nsid, slba, nlb_0based, false)
    }

    /// Flush (00h) of `nsid` (NVMe Base 2.x §7.1; FFFFFFFFh = all).
    pub fn flush(cid: u16, nsid: u32) -> Self {
        Sqe::new(NvmOpcode::Flush.value(), cid).with_nsid(nsid)
    }

    /// Write Zeroes (08h) of `nlb_0based + 1` blocks at `slba`; `deac` asks
    /// the controller to deallocate them (NVM Command Set §3.3.8).
    pub fn write_zeroes(cid: u16, nsid: u32, slba: u64, nlb_0based: u16, deac: bool) -> Self {
        let mut sqe = Sqe::new(NvmOpcode::WriteZeroes.value(), cid).with_nsid(nsid);
        sqe.set_slba(slba);
        sqe.set_cdw12(u32::from(nlb_0based) | if deac { WZ_DEAC } else { 0 });
        sqe
    }

    /// Dataset Management (09h) with Attribute - Deallocate, carrying
    /// `nr_ranges_0based + 1` [`crate::dsm::DsmRange`] entries of 16 bytes
    /// as data (NVM Command Set §3.3.3); set the data SGL afterwards.
    pub fn dsm_deallocate(cid: u16, nsid: u32, nr_ranges_0based: u8) -> Self {
        let mut sqe = Sqe::new(NvmOpcode::DatasetManagement.value(), cid).with_nsid(nsid);
        sqe.set_cdw10(u32::from(nr_ranges_0based));
        sqe.set_cdw11(DSM_AD);
        sqe
    }

    /// Starting LBA of Read/Write/Write Zeroes (CDW11:CDW10).
    pub fn slba(&self) -> u64 {
        u64::from(self.cdw10()) | (u64::from(self.cdw11()) << 32)
    }

    /// Sets the starting LBA (CDW11:CDW10).
    pub fn set_slba(&mut self, slba: u64) {
        self.set_cdw10(slba as u32);
        self.set_cdw11((slba >> 32) as u32);
    }

    /// Number of Logical Blocks of Read/Write/Write Zeroes, 0's based
    /// (CDW12 bits 15:0).
    pub fn nlb_0based(&self) -> u16 {
        self.cdw12() as u16
    }

    /// Number of logical blocks of Read/Write/Write Zeroes (1..=65536).
    pub fn nlb(&self) -> u32 {
        u32::from(self.nlb_0based()) + 1
    }

    /// Force Unit Access of Read/Write (CDW12 bit 30).
    pub fn fua(&self) -> bool {
        self.cdw12() & RW_FUA != 0
    }

    /// Deallocate of Write Zeroes (CDW12 bit 25).
    pub fn deac(&self) -> bool {
        self.cdw12() & WZ_DEAC != 0
    }

    /// Number of Ranges of Dataset Management, 0's based (CDW10 bits 7:0).
    pub fn dsm_nr_0based(&self) -> u8 {
        self.cdw10() as u8
    }

    /// Attribute - Deallocate of Dataset Management (CDW11 bit 2).
    pub fn dsm_deallocate_attr(&self) -> bool {
        self.cdw11() & DSM_AD != 0
    }

    // ----- Admin commands (NVMe Base 2.x §5) -----

    /// Identify (06h) (§5.17): CNS in CDW10 bits 7:0, CNTID in CDW10 bits
    /// 31:16, `nsid` as the NSID. Answers 4096 bytes; set the data SGL.
    pub fn identify(cid: u16, cns: IdentifyCns, nsid: u32, cntid: u16) -> Self {
        let mut sqe = Sqe::new(AdminOpcode::Identify.value(), cid).with_nsid(nsid);
        sqe.set_cdw10(u32::from(cns.value()) | (u32::from(cntid) << 16));
        sqe
    }

    /// Identify's CNS (CDW10 bits 7:0).
    pub fn cns(&self) -> u8 {
        self.cdw10() as u8
    }

    /// Identify's Controller Identifier (CDW10 bits 31:16).
    pub fn cntid(&self) -> u16 {
        (self.cdw10() >> 16) as u16
    }

    /// Identify's Command Set Identifier (CDW11 bits 31:24).
    pub fn csi(&self) -> u8 {
        (self.cdw11() >> 24) as u8
    }

    /// Set Features (09h) (§5.27): FID in CDW10 bits 7:0, the feature value
    /// in CDW11 (see [`crate::features`]).
    pub fn set_features(cid: u16, fid: FeatureId, cdw11: u32) -> Self {
        let mut sqe = Sqe::new(AdminOpcode::SetFeatures.value(), cid);
        sqe.set_cdw10(u32::from(fid.value()));
        sqe.set_cdw11(cdw11);
        sqe
    }

    /// Get Features (0Ah) (§5.15) of the current value (SEL 000b).
    pub fn get_features(cid: u16, fid: FeatureId) -> Self {
        let mut sqe = Sqe::new(AdminOpcode::GetFeatures.value(), cid);
        sqe.set_cdw10(u32::from(fid.value()));
        sqe
    }

    /// Feature Identifier of Get/Set Features (CDW10 bits 7:0).
    pub fn fid(&self) -> u8 {
        self.cdw10() as u8
    }

    /// Get Features' Select (CDW10 bits 10:8): 0 current, 1 default, 2
    /// saved, 3 supported capabilities.
    pub fn features_select(&self) -> u8 {
        ((self.cdw10() >> 8) & 7) as u8
    }

    /// Set Features' Save bit (CDW10 bit 31).
    pub fn features_save(&self) -> bool {
        self.cdw10() & SF_SV != 0
    }

    /// Keep Alive (18h) (§5.20): no data, no parameters.
    pub fn keep_alive(cid: u16) -> Self {
        Sqe::new(AdminOpcode::KeepAlive.value(), cid)
    }

    /// Asynchronous Event Request (0Ch) (§5.2): completes when an event
    /// occurs; DW0 of the answer describes it.
    pub fn async_event_request(cid: u16) -> Self {
        Sqe::new(AdminOpcode::AsyncEventRequest.value(), cid)
    }

    /// Get Log Page (02h) (§5.16): `numd_0based + 1` dwords of log `lid`
    /// from byte offset `lpo` (must be a multiple of 4). NUMDL goes in CDW10
    /// bits 31:16, NUMDU in CDW11 bits 15:0, LPOL/LPOU in CDW12/CDW13. NSID
    /// is 0; use [`with_nsid`](Self::with_nsid) for FFFFFFFFh (SMART, ANA)
    /// and [`with_rae`](Self::with_rae) to retain the event.
    pub fn get_log_page(cid: u16, lid: LogPageId, numd_0based: u32, lpo: u64) -> Self {
        let mut sqe = Sqe::new(AdminOpcode::GetLogPage.value(), cid);
        sqe.set_cdw10(u32::from(lid.value()) | ((numd_0based & 0xFFFF) << 16));
        sqe.set_cdw11(numd_0based >> 16);
        sqe.set_cdw12(lpo as u32);
        sqe.set_cdw13((lpo >> 32) as u32);
        sqe
    }

    /// Sets Get Log Page's Retain Asynchronous Event bit (CDW10 bit 15).
    pub fn with_rae(mut self, rae: bool) -> Self {
        let v = (self.cdw10() & !GLP_RAE) | if rae { GLP_RAE } else { 0 };
        self.set_cdw10(v);
        self
    }

    /// Get Log Page's Log Page Identifier (CDW10 bits 7:0).
    pub fn lid(&self) -> u8 {
        self.cdw10() as u8
    }

    /// Get Log Page's Log Specific Field (CDW10 bits 14:8).
    pub fn lsp(&self) -> u8 {
        ((self.cdw10() >> 8) & 0x7F) as u8
    }

    /// Get Log Page's Retain Asynchronous Event (CDW10 bit 15).
    pub fn rae(&self) -> bool {
        self.cdw10() & GLP_RAE != 0
    }

    /// Get Log Page's Number of Dwords, 0's based (NUMDU:NUMDL).
    pub fn numd_0based(&self) -> u32 {
        (self.cdw10() >> 16) | ((self.cdw11() & 0xFFFF) << 16)
    }

    /// Get Log Page's transfer length in bytes ((NUMD + 1) x 4).
    pub fn log_page_len(&self) -> u64 {
        (u64::from(self.numd_0based()) + 1) * 4
    }

    /// Get Log Page's Log Page Offset in bytes (LPOU:LPOL).
    pub fn lpo(&self) -> u64 {
        u64::from(self.cdw12()) | (u64::from(self.cdw13()) << 32)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::hex;

    fn sqe(h: &str) -> Sqe {
        Sqe::read_from_bytes(&hex(h)).unwrap()
    }

    #[test]
    fn capture_keep_alive() {
        // linux-nvme-rdma-errors.pcap frame 204: Keep Alive, CID 4000h.
        let wire = hex(concat!(
            "18400040 00000000 00000000 00000000 0000000000000000",
            "0000000000000000 00000000000000 40",
            "00000000 00000000 00000000 00000000 00000000 00000000"
        ));
        let ka = Sqe::keep_alive(0x4000);
        assert_eq!(ka.as_bytes(), &wire[..]);
        assert_eq!(ka.psdt(), PSDT_SGL_MPTR_CONTIG);
        assert_eq!(ka.flags(), 0x40);
        assert_eq!(ka.fuse(), FUSE_NORMAL);
    }

    #[test]
    fn capture_read_4k() {
        // linux-nvme-rdma-rxe.pcap frame 354: Read CID 18h, NSID 1, SLBA 0,
        // NLB 7 (8 x 512 B), keyed 4Fh 4096 B at ff4645cc885f7000 key 44f3h.
        let wire = sqe(concat!(
            "02401800 01000000 00000000 00000000 0000000000000000",
            "00705f88cc4546ff 001000 f3440000 4f",
            "00000000 00000000 07000000 00000000 00000000 00000000"
        ));
        let mut built = Sqe::read(0x18, 1, 0, 7, false);
        built.set_sgl(SglDescriptor::keyed(0xff46_45cc_885f_7000, 4096, 0x44f3, true).unwrap());
        assert_eq!(built, wire);
        assert_eq!(wire.opcode(), NvmOpcode::Read.value());
        assert_eq!((wire.slba(), wire.nlb(), wire.fua()), (0, 8, false));
    }

    #[test]
    fn capture_write_32k() {
        // Frame 390: Write CID 1Ch, SLBA 200h, NLB 3Fh (64 blocks = 32 KiB).
        let wire = sqe(concat!(
            "01401c00 01000000 00000000 00000000 0000000000000000",
            "00705b88cc4546ff 008000 f7440000 4f",
            "00020000 00000000 3f000000 00000000 00000000 00000000"
        ));
        let built = Sqe::write(0x1c, 1, 0x200, 0x3f, false)
            .with_sgl(SglDescriptor::keyed(0xff46_45cc_885b_7000, 32768, 0x44f7, true).unwrap());
        assert_eq!(built, wire);
        assert_eq!(wire.slba(), 0x200);
        assert_eq!(wire.nlb(), 64);
    }

    #[test]
    fn capture_write_inline() {
        // Frame 322: Write CID 14h, NSID 1, SLBA 0, NLB 7, in-capsule SGL 01h.
        let wire = sqe(concat!(
            "01401400 01000000 00000000 00000000 0000000000000000",
            "0000000000000000 00100000 000000 01",
            "00000000 00000000 07000000 00000000 00000000 00000000"
        ));
        let built =
            Sqe::write(0x14, 1, 0, 7, false).with_sgl(SglDescriptor::inline_offset(0, 4096));
        assert_eq!(built, wire);
    }

    #[test]
    fn capture_identify_controller() {
        // Frame 56: Identify CNS 1, CID 18h, keyed 4Fh 4096 B key 33fh.
        let wire = sqe(concat!(
            "06401800 00000000 00000000 00000000 0000000000000000",
            "30d15988cc4546ff 001000 3f030000 4f",
            "01000000 00000000 00000000 00000000 00000000 00000000"
        ));
        let built = Sqe::identify(0x18, IdentifyCns::Controller, 0, 0)
            .with_sgl(SglDescriptor::keyed(0xff46_45cc_8859_d130, 4096, 0x33f, true).unwrap());
        assert_eq!(built, wire);
        assert_eq!((wire.cns(), wire.cntid(), wire.nsid()), (1, 0, 0));
        // Frame 209: Identify CNS 0 (namespace) of NSID 1.
        let ns = Sqe::identify(0x2003, IdentifyCns::Namespace, 1, 0);
        assert_eq!((ns.cns(), ns.nsid(), ns.cdw10()), (0, 1, 0));
    }

    #[test]
    fn capture_set_features_and_aer() {
        // Frame 50: Set Features AEC (0Bh), CDW11 80000000h, CID 17h.
        let wire = sqe(concat!(
            "09401700 00000000 00000000 00000000 0000000000000000",
            "0000000000000000 00000000000000 40",
            "0b000000 00000080 00000000 00000000 00000000 00000000"
        ));
        assert_eq!(
            Sqe::set_features(0x17, FeatureId::AsyncEventConfiguration, 0x8000_0000),
            wire
        );
        assert_eq!(wire.fid(), 0x0b);
        // Frame 164: Set Features Number of Queues, CDW11 0 (one pair).
        let nq = Sqe::set_features(0x1002, FeatureId::NumberOfQueues, 0);
        assert_eq!(&nq.as_bytes()[..4], &[0x09, 0x40, 0x02, 0x10]);
        // Frame 54: AER CID 1Fh, no data.
        let wire = sqe(concat!(
            "0c401f00 00000000 00000000 00000000 0000000000000000",
            "0000000000000000 00000000000000 40",
            "00000000 00000000 00000000 00000000 00000000 00000000"
        ));
        assert_eq!(Sqe::async_event_request(0x1f), wire);
    }

    #[test]
    fn capture_get_log_page() {
        // Frame 65: Get Log Page Discovery, 1024 B (NUMDL FFh), RAE, CID 19h.
        let wire = sqe(concat!(
            "02401900 00000000 00000000 00000000 0000000000000000",
            "f0216288cc4546ff 000400 40030000 4f",
            "7080ff00 00000000 00000000 00000000 00000000 00000000"
        ));
        let built = Sqe::get_log_page(0x19, LogPageId::Discovery, 0xff, 0)
            .with_rae(true)
            .with_sgl(SglDescriptor::keyed(0xff46_45cc_8862_21f0, 1024, 0x340, true).unwrap());
        assert_eq!(built, wire);
        assert_eq!(
            (wire.lid(), wire.rae(), wire.log_page_len(), wire.lpo()),
            (0x70, true, 1024, 0)
        );
        // Frame 144: ANA log, NSID FFFFFFFFh, 8208 B (NUMDL 803h), no RAE.
        let ana = Sqe::get_log_page(4, LogPageId::AnaLog, 0x803, 0).with_nsid(0xffff_ffff);
        assert_eq!(ana.cdw10(), 0x0803_000c);
        assert_eq!(ana.log_page_len(), 8208);
        // Upper NUMD bits and offset.
        let big = Sqe::get_log_page(1, LogPageId::SmartHealth, 0x1_0002, 0x1_0000_0004);
        assert_eq!(
            (big.cdw10() >> 16, big.cdw11(), big.cdw12(), big.cdw13()),
            (2, 1, 4, 1)
        );
        assert_eq!((big.numd_0based(), big.lpo()), (0x1_0002, 0x1_0000_0004));
    }

    #[test]
    fn other_constructors() {
        let f = Sqe::flush(3, 1);
        assert_eq!((f.opcode(), f.cid(), f.nsid()), (0, 3, 1));
        let wz = Sqe::write_zeroes(4, 1, 0x1_2345_6789, 15, true);
        assert_eq!(
            (wz.opcode(), wz.slba(), wz.nlb(), wz.deac()),
            (8, 0x1_2345_6789, 16, true)
        );
        assert_eq!((wz.cdw10(), wz.cdw11()), (0x2345_6789, 1));
        let d = Sqe::dsm_deallocate(5, 1, 2);
        assert_eq!(
            (d.opcode(), d.dsm_nr_0based(), d.dsm_deallocate_attr()),
            (9, 2, true)
        );
        let r = Sqe::read(1, 1, 0, 0xffff, true);
        assert_eq!((r.nlb(), r.fua(), r.cdw12()), (65536, true, 0x4000_ffff));
        let g = Sqe::get_features(6, FeatureId::KeepAliveTimer);
        assert_eq!((g.opcode(), g.fid(), g.features_select()), (0x0a, 0x0f, 0));
        let mut s = Sqe::default();
        s.set_fuse(FUSE_SECOND);
        s.set_psdt(PSDT_SGL_MPTR_SGL);
        assert_eq!(s.flags(), 0x82);
        s.set_mptr(9);
        s.set_cdw2(2);
        s.set_cdw3(3);
        s.set_cdw14(14);
        s.set_cdw15(15);
        let back = Sqe::from_array(s.to_array());
        assert_eq!(back, s);
        assert_eq!(
            (
                back.mptr(),
                back.cdw2(),
                back.cdw3(),
                back.cdw14(),
                back.cdw15()
            ),
            (9, 2, 3, 14, 15)
        );
        assert_eq!(back.fctype(), None);
    }
}
