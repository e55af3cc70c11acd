//! Completion Queue Entry: the 16-byte answer to a command (NVMe Base 2.x
//! §4.2.2 "Completion Queue Entry"; on fabrics it travels as the response
//! capsule, NVMe over Fabrics 1.1 §2.3).
//!
//! Layout (little endian): 0..4 DW0 (command specific), 4..8 DW1, 8..10 SQ
//! Head Pointer, 10..12 SQ Identifier, 12..14 Command Identifier, 14..16
//! Status field ([`Status`] plus phase tag in bit 0).

use zerocopy::byteorder::little_endian::{U16, U32};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout, Unaligned};

use crate::status::Status;

/// Completion Queue Entry, 16 bytes (NVMe Base 2.x §4.2.2 Figure "Common
/// Completion Queue Entry Layout").
#[derive(
    Clone,
    Copy,
    Debug,
    Default,
    PartialEq,
    Eq,
    Hash,
    FromBytes,
    IntoBytes,
    KnownLayout,
    Immutable,
    Unaligned,
)]
#[repr(C)]
pub struct Cqe {
    dw0: U32,
    dw1: U32,
    sqhd: U16,
    sqid: U16,
    cid: U16,
    status: U16,
}
assert_size!(Cqe, 16);

impl Cqe {
    /// A completion for command `cid` of queue `sqid` with SQ head `sqhd`,
    /// `status` and command specific `dw0`; DW1 0, phase tag 0.
    pub fn new(cid: u16, sqid: u16, sqhd: u16, status: Status, dw0: u32) -> Self {
        Cqe {
            dw0: U32::new(dw0),
            dw1: U32::ZERO,
            sqhd: U16::new(sqhd),
            sqid: U16::new(sqid),
            cid: U16::new(cid),
            status: U16::new(status.to_field()),
        }
    }

    /// A successful completion with DW0 = DW1 = 0.
    pub fn success(cid: u16, sqid: u16, sqhd: u16) -> Self {
        Self::new(cid, sqid, sqhd, Status::SUCCESS, 0)
    }

    /// An entry from its raw 16 bytes.
    pub fn from_array(bytes: [u8; 16]) -> Self {
        zerocopy::transmute!(bytes)
    }

    /// The raw 16 bytes.
    pub fn to_array(self) -> [u8; 16] {
        zerocopy::transmute!(self)
    }

    /// Dword 0, command specific (e.g. Connect: CNTLID; Set Features: value).
    pub fn dw0(&self) -> u32 {
        self.dw0.get()
    }

    /// Sets DW0.
    pub fn set_dw0(&mut self, dw0: u32) {
        self.dw0.set(dw0);
    }

    /// Dword 1, command specific.
    pub fn dw1(&self) -> u32 {
        self.dw1.get()
    }

    /// Sets DW1.
    pub fn set_dw1(&mut self, dw1: u32) {
        self.dw1.set(dw1);
    }

    /// DW1:DW0 as one 64-bit value (Property Get of an 8-byte property).
    pub fn result_u64(&self) -> u64 {
        u64::from(self.dw0()) | (u64::from(self.dw1()) << 32)
    }

    /// Sets DW1:DW0 from one 64-bit value.
    pub fn set_result_u64(&mut self, value: u64) {
        self.set_dw0(value as u32);
        self.set_dw1((value >> 32) as u32);
    }

    /// Builder form of [`set_result_u64`](Self::set_result_u64).
    pub fn with_result_u64(mut self, value: u64) -> Self {
        self.set_result_u64(value);
        self
    }

    /// SQ Head Pointer: the controller's SQ head after consuming this command.
    pub fn sqhd(&self) -> u16 {
        self.sqhd.get()
    }

    /// Sets the SQ Head Pointer.
    pub fn set_sqhd(&mut self, sqhd: u16) {
        self.sqhd.set(sqhd);
    }

    /// SQ Identifier the command came from.
    pub fn sqid(&self) -> u16 {
        self.sqid.get()
    }

    /// Command Identifier of the completed command.
    pub fn cid(&self) -> u16 {
        self.cid.get()
    }

    /// Sets the Command Identifier.
    pub fn set_cid(&mut self, cid: u16) {
        self.cid.set(cid);
    }

    /// The raw Status field (bytes 14..16), phase tag included.
    pub fn status_field(&self) -> u16 {
        self.status.get()
    }

    /// The decoded status (phase tag dropped).
    pub fn status(&self) -> Status {
        Status::from_field(self.status_field())
    }

    /// Sets the status, keeping the phase tag.
    pub fn set_status(&mut self, status: Status) {
        let phase = self.status_field() & 1;
        self.status.set(status.to_field() | phase);
    }

    /// Phase Tag (bit 0 of the Status field); 0 on fabrics.
    pub fn phase(&self) -> bool {
        self.status_field() & 1 != 0
    }

    /// Sets the Phase Tag.
    pub fn set_phase(&mut self, phase: bool) {
        let f = (self.status_field() & !1) | u16::from(phase);
        self.status.set(f);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::status::{CommandSpecificStatus, GenericStatus};
    use crate::testutil::hex;

    #[test]
    fn capture_connect_invalid_parameters() {
        // linux-nvme-rdma-errors.pcap frame 10: unknown subsystem NQN.
        let wire = hex("00010100 00000000 0000 0000 0000 0483");
        let cqe = Cqe::read_from_bytes(&wire).unwrap();
        assert_eq!(cqe.dw0(), 0x0001_0100);
        assert_eq!((cqe.sqhd(), cqe.sqid(), cqe.cid()), (0, 0, 0));
        assert_eq!(cqe.status_field(), 0x8304);
        let status =
            Status::command_specific(CommandSpecificStatus::ConnectInvalidParameters).with_dnr();
        assert_eq!(cqe.status(), status);
        assert!(!cqe.phase());
        assert_eq!(Cqe::new(0, 0, 0, status, 0x0001_0100).as_bytes(), &wire[..]);
        // Frame 21: host not allowed, DW0 IATTR 1 / IPO 200h, 8308h.
        let wire = hex("00020100 00000000 0000 0000 0000 0883");
        let status = Status::command_specific(CommandSpecificStatus::ConnectInvalidHost).with_dnr();
        assert_eq!(Cqe::new(0, 0, 0, status, 0x0001_0200).as_bytes(), &wire[..]);
    }

    #[test]
    fn capture_success() {
        // linux-nvme-rdma-errors.pcap frame 32: Connect success, CNTLID 1,
        // SQHD 1.
        let wire = hex("01000000 00000000 0100 0000 0000 0000");
        assert_eq!(Cqe::new(0, 0, 1, Status::SUCCESS, 1).as_bytes(), &wire[..]);
        // linux-nvme-rdma-rxe.pcap frame 174: I/O queue Connect, SQID 1.
        let wire = hex("01000000 00000000 0100 0100 0000 0000");
        let cqe = Cqe::read_from_bytes(&wire).unwrap();
        assert_eq!((cqe.dw0(), cqe.sqhd(), cqe.sqid()), (1, 1, 1));
        assert!(cqe.status().is_success());
        // Frame 15: Property Get CAP answer, 64-bit value in DW1:DW0, CID 1.
        let wire = hex("7f00000f20080000 0200 0000 0100 0000");
        let cqe = Cqe::read_from_bytes(&wire).unwrap();
        assert_eq!(cqe.result_u64(), 0x0000_0820_0f00_007f);
        assert_eq!(
            Cqe::success(1, 0, 2)
                .with_result_u64(0x0000_0820_0f00_007f)
                .as_bytes(),
            &wire[..]
        );
        // Frame 206 (errors pcap): Keep Alive answer, SQHD 15h, CID 4000h.
        let wire = hex("00000000 00000000 1500 0000 0040 0000");
        assert_eq!(Cqe::success(0x4000, 0, 0x15).as_bytes(), &wire[..]);
    }

    #[test]
    fn phase_and_status() {
        let mut c = Cqe::success(7, 1, 2);
        c.set_phase(true);
        c.set_status(Status::generic(GenericStatus::LbaOutOfRange).with_dnr());
        assert!(c.phase());
        assert_eq!(c.status_field(), 0x8101);
        assert_eq!(c.status().as_generic(), Some(GenericStatus::LbaOutOfRange));
        c.set_phase(false);
        assert_eq!(c.status_field(), 0x8100);
        c.set_dw1(5);
        c.set_cid(9);
        c.set_sqhd(3);
        let back = Cqe::from_array(c.to_array());
        assert_eq!(back, c);
        assert_eq!((back.dw1(), back.cid(), back.sqhd()), (5, 9, 3));
    }
}
