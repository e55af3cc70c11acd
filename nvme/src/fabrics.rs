//! Fabrics commands (NVMe Base 2.x §6; NVMe over Fabrics 1.1 §3): Connect
//! and its 1024-byte data, Property Get/Set, Disconnect, as typed 64-byte
//! views of an [`Sqe`], and the Connect response DW0.
//!
//! Every Fabrics command has opcode 7Fh (byte 0), CID in bytes 2..4, the
//! Fabrics Command Type (FCTYPE) in byte 4, SGL1 in 24..40 and
//! type-specific fields in 40..64.

use core::mem::offset_of;

use thiserror::Error;
use zerocopy::byteorder::little_endian::{U16, U32, U64};
use zerocopy::{FromBytes, FromZeros, Immutable, IntoBytes, KnownLayout, Unaligned};

pub use crate::properties::{Cap, Cc, Csts, Property, PropertySize, Vs};

use crate::cqe::Cqe;
use crate::opcodes::{FabricsCommandType, FABRICS_OPCODE};
use crate::sgl::SglDescriptor;
use crate::sqe::{Sqe, PSDT_SGL_MPTR_CONTIG};
use crate::status::{CommandSpecificStatus, Status};
use crate::strings::{read_nul_terminated, write_nul_padded, StrFieldError};
use crate::NVME_NQN_MAX;

/// Why an [`Sqe`] is not the Fabrics command asked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Error)]
pub enum FabricsError {
    /// The opcode is not 7Fh.
    #[error("opcode {opcode:#04x} is not a Fabrics command (7Fh)")]
    NotFabrics {
        /// The opcode found.
        opcode: u8,
    },
    /// The Fabrics Command Type differs from the one expected.
    #[error("Fabrics command type {found:#04x}, expected {expected}")]
    WrongCommandType {
        /// The type the caller asked for.
        expected: FabricsCommandType,
        /// FCTYPE found in byte 4.
        found: u8,
    },
    /// Property Get/Set ATTRIB names a size other than 4 or 8 bytes.
    #[error("invalid property size attribute {attrib:#04x}")]
    InvalidPropertySize {
        /// The ATTRIB byte.
        attrib: u8,
    },
}

fn check(sqe: &Sqe, expected: FabricsCommandType) -> Result<(), FabricsError> {
    match sqe.fctype() {
        None => Err(FabricsError::NotFabrics {
            opcode: sqe.opcode(),
        }),
        Some(t) if t == expected.value() => Ok(()),
        Some(found) => Err(FabricsError::WrongCommandType { expected, found }),
    }
}

macro_rules! fabrics_common {
    ($t:ident, $fctype:expr) => {
        impl $t {
            /// Command Identifier (bytes 2..4).
            pub fn cid(&self) -> u16 {
                self.cid.get()
            }

            /// Sets the Command Identifier.
            pub fn set_cid(&mut self, cid: u16) {
                self.cid.set(cid);
            }

            /// SGL1 (bytes 24..40).
            pub const fn sgl(&self) -> SglDescriptor {
                self.sgl1
            }

            /// Sets SGL1.
            pub fn set_sgl(&mut self, sgl: SglDescriptor) {
                self.sgl1 = sgl;
            }

            /// Views an [`Sqe`] as this command.
            ///
            /// Errors: [`FabricsError::NotFabrics`] unless the opcode is 7Fh,
            /// [`FabricsError::WrongCommandType`] unless FCTYPE matches.
            pub fn from_sqe(sqe: &Sqe) -> Result<&Self, FabricsError> {
                check(sqe, $fctype)?;
                Ok(zerocopy::transmute_ref!(sqe))
            }

            /// The command as a plain [`Sqe`].
            pub fn to_sqe(&self) -> Sqe {
                zerocopy::transmute!(*self)
            }

            fn blank(cid: u16) -> Self {
                let mut c = Self::new_zeroed();
                c.opcode = FABRICS_OPCODE;
                c.flags = PSDT_SGL_MPTR_CONTIG << 6;
                c.cid.set(cid);
                c.fctype = $fctype.value();
                c.sgl1 = SglDescriptor::keyed_null();
                c
            }
        }

        impl From<$t> for Sqe {
            fn from(c: $t) -> Sqe {
                c.to_sqe()
            }
        }
    };
}

/// Connect command (FCTYPE 01h), 64 bytes: NVMe Base 2.x §6.3 Figure
/// "Connect Command - Submission Queue Entry". Its data is a
/// [`ConnectData`] of 1024 bytes described by SGL1.
///
/// Fields beyond the common header: RECFMT u16 (40..42), QID u16 (42..44),
/// SQSIZE u16 0's based (44..46), CATTR (46), KATO u32 in ms (48..52).
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned,
)]
#[repr(C)]
pub struct ConnectCommand {
    opcode: u8,
    flags: u8,
    cid: U16,
    fctype: u8,
    rsvd5: [u8; 19],
    sgl1: SglDescriptor,
    recfmt: U16,
    qid: U16,
    sqsize: U16,
    cattr: u8,
    rsvd47: u8,
    kato: U32,
    rsvd52: [u8; 12],
}
assert_size!(ConnectCommand, 64);
fabrics_common!(ConnectCommand, FabricsCommandType::Connect);

/// CATTR bit 2: the host wants SQ flow control disabled (SQHD reporting off).
pub const CATTR_SQ_FLOW_CONTROL_DISABLE: u8 = 1 << 2;
/// CATTR bit 1: I/O queue connection is urgent (priority class).
pub const CATTR_PRIORITY_URGENT: u8 = 1 << 1;

impl ConnectCommand {
    /// A Connect for queue `qid` (0 = admin) asking for `sqsize_0based + 1`
    /// entries, keep alive timeout `kato_ms` (0 = off; only meaningful on the
    /// admin queue), RECFMT 0, CATTR 0. SGL1 is the keyed null descriptor:
    /// point it at the Connect data with [`set_sgl`](Self::set_sgl).
    pub fn new(cid: u16, qid: u16, sqsize_0based: u16, kato_ms: u32) -> Self {
        let mut c = Self::blank(cid);
        c.qid.set(qid);
        c.sqsize.set(sqsize_0based);
        c.kato.set(kato_ms);
        c
    }

    /// Record Format (RECFMT); 0 is the only one defined.
    pub fn recfmt(&self) -> u16 {
        self.recfmt.get()
    }

    /// Sets RECFMT.
    pub fn set_recfmt(&mut self, recfmt: u16) {
        self.recfmt.set(recfmt);
    }

    /// Queue ID: 0 for the admin queue.
    pub fn qid(&self) -> u16 {
        self.qid.get()
    }

    /// Submission Queue Size, 0's based.
    pub fn sqsize(&self) -> u16 {
        self.sqsize.get()
    }

    /// Number of SQ entries asked for (SQSIZE + 1).
    pub fn queue_entries(&self) -> u32 {
        u32::from(self.sqsize()) + 1
    }

    /// Connect Attributes (CATTR).
    pub const fn cattr(&self) -> u8 {
        self.cattr
    }

    /// Sets CATTR.
    pub fn set_cattr(&mut self, cattr: u8) {
        self.cattr = cattr;
    }

    /// Keep Alive Timeout in milliseconds (0 = disabled).
    pub fn kato(&self) -> u32 {
        self.kato.get()
    }
}

/// Byte offset of RECFMT in the Connect SQE (for IPO with IATTR 0).
pub const CONNECT_SQE_RECFMT_OFFSET: u16 = offset_of!(ConnectCommand, recfmt) as u16;
/// Byte offset of QID in the Connect SQE.
pub const CONNECT_SQE_QID_OFFSET: u16 = offset_of!(ConnectCommand, qid) as u16;
/// Byte offset of SQSIZE in the Connect SQE.
pub const CONNECT_SQE_SQSIZE_OFFSET: u16 = offset_of!(ConnectCommand, sqsize) as u16;
/// Byte offset of CATTR in the Connect SQE.
pub const CONNECT_SQE_CATTR_OFFSET: u16 = offset_of!(ConnectCommand, cattr) as u16;
/// Byte offset of KATO in the Connect SQE.
pub const CONNECT_SQE_KATO_OFFSET: u16 = offset_of!(ConnectCommand, kato) as u16;

/// Property Get command (FCTYPE 04h), 64 bytes: NVMe Base 2.x §6.6.
/// ATTRIB (40) bits 2:0 = size (0: 4 bytes, 1: 8 bytes), OFST u32 (44..48).
/// The value comes back in CQE DW0 (and DW1 for 8 bytes).
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned,
)]
#[repr(C)]
pub struct PropertyGetCommand {
    opcode: u8,
    flags: u8,
    cid: U16,
    fctype: u8,
    rsvd5: [u8; 19],
    sgl1: SglDescriptor,
    attrib: u8,
    rsvd41: [u8; 3],
    ofst: U32,
    rsvd48: [u8; 16],
}
assert_size!(PropertyGetCommand, 64);
fabrics_common!(PropertyGetCommand, FabricsCommandType::PropertyGet);

impl PropertyGetCommand {
    /// Property Get of `size` bytes at offset `ofst`.
    pub fn new(cid: u16, ofst: u32, size: PropertySize) -> Self {
        let mut c = Self::blank(cid);
        c.attrib = size.value();
        c.ofst.set(ofst);
        c
    }

    /// Property Get of a named property, with its own size.
    pub fn of(cid: u16, property: Property) -> Self {
        Self::new(cid, property.value(), property.size())
    }

    /// The ATTRIB byte as sent.
    pub const fn attrib(&self) -> u8 {
        self.attrib
    }

    /// The property size.
    ///
    /// Errors: [`FabricsError::InvalidPropertySize`] for ATTRIB bits 2:0
    /// other than 0 or 1.
    pub fn size(&self) -> Result<PropertySize, FabricsError> {
        PropertySize::from_value(self.attrib & 7).ok_or(FabricsError::InvalidPropertySize {
            attrib: self.attrib,
        })
    }

    /// Property offset (OFST).
    pub fn ofst(&self) -> u32 {
        self.ofst.get()
    }

    /// The named property at OFST, if any.
    pub fn property(&self) -> Option<Property> {
        Property::from_value(self.ofst())
    }
}

/// Property Set command (FCTYPE 00h), 64 bytes: NVMe Base 2.x §6.7.
/// ATTRIB (40), OFST u32 (44..48), VALUE u64 (48..56; only the low 4 bytes
/// count for a 4-byte property).
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned,
)]
#[repr(C)]
pub struct PropertySetCommand {
    opcode: u8,
    flags: u8,
    cid: U16,
    fctype: u8,
    rsvd5: [u8; 19],
    sgl1: SglDescriptor,
    attrib: u8,
    rsvd41: [u8; 3],
    ofst: U32,
    value: U64,
    rsvd56: [u8; 8],
}
assert_size!(PropertySetCommand, 64);
fabrics_common!(PropertySetCommand, FabricsCommandType::PropertySet);

impl PropertySetCommand {
    /// Property Set of `size` bytes at `ofst` to `value`.
    pub fn new(cid: u16, ofst: u32, size: PropertySize, value: u64) -> Self {
        let mut c = Self::blank(cid);
        c.attrib = size.value();
        c.ofst.set(ofst);
        c.value.set(value);
        c
    }

    /// Property Set of a named property, with its own size.
    pub fn of(cid: u16, property: Property, value: u64) -> Self {
        Self::new(cid, property.value(), property.size(), value)
    }

    /// The ATTRIB byte as sent.
    pub const fn attrib(&self) -> u8 {
        self.attrib
    }

    /// The property size.
    ///
    /// Errors: [`FabricsError::InvalidPropertySize`] for ATTRIB bits 2:0
    /// other than 0 or 1.
    pub fn size(&self) -> Result<PropertySize, FabricsError> {
        PropertySize::from_value(self.attrib & 7).ok_or(FabricsError::InvalidPropertySize {
            attrib: self.attrib,
        })
    }

    /// Property offset (OFST).
    pub fn ofst(&self) -> u32 {
        self.ofst.get()
    }

    /// The named property at OFST, if any.
    pub fn property(&self) -> Option<Property> {
        Property::from_value(self.ofst())
    }

    /// VALUE as sent (all 8 bytes).
    pub fn value(&self) -> u64 {
        self.value.get()
    }
}

/// Disconnect command (FCTYPE 08h), 64 bytes: NVMe Base 2.x §6.4; RECFMT
/// u16 at 40. Deletes the I/O queue it is sent on.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned,
)]
#[repr(C)]
pub struct DisconnectCommand {
    opcode: u8,
    flags: u8,
    cid: U16,
    fctype: u8,
    rsvd5: [u8; 19],
    sgl1: SglDescriptor,
    recfmt: U16,
    rsvd42: [u8; 22],
}
assert_size!(DisconnectCommand, 64);
fabrics_common!(DisconnectCommand, FabricsCommandType::Disconnect);

impl DisconnectCommand {
    /// A Disconnect with RECFMT 0.
    pub fn new(cid: u16) -> Self {
        Self::blank(cid)
    }

    /// Record Format.
    pub fn recfmt(&self) -> u16 {
        self.recfmt.get()
    }
}

impl Sqe {
    /// A Connect command: see [`ConnectCommand::new`].
    pub fn connect(cid: u16, qid: u16, sqsize_0based: u16, kato_ms: u32) -> Sqe {
        ConnectCommand::new(cid, qid, sqsize_0based, kato_ms).to_sqe()
    }

    /// A Property Get of a named property.
    pub fn property_get(cid: u16, property: Property) -> Sqe {
        PropertyGetCommand::of(cid, property).to_sqe()
    }

    /// A Property Set of a named property.
    pub fn property_set(cid: u16, property: Property, value: u64) -> Sqe {
        PropertySetCommand::of(cid, property, value).to_sqe()
    }
}

/// Connect command data, 1024 bytes: NVMe Base 2.x §6.3 Figure "Connect
/// Command - Data". HOSTID (0..16), CNTLID u16 (16..18; FFFFh on the admin
/// queue asks for any controller of the dynamic model), SUBNQN (256..512),
/// HOSTNQN (512..768), both NUL terminated UTF-8 of at most 223 bytes.
#[derive(Clone, Debug, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned)]
#[repr(C)]
pub struct ConnectData {
    /// Host Identifier (a UUID for Linux hosts).
    pub hostid: [u8; 16],
    cntlid: U16,
    rsvd18: [u8; 238],
    subnqn: [u8; 256],
    hostnqn: [u8; 256],
    rsvd768: [u8; 256],
}
assert_size!(ConnectData, 1024);

/// CNTLID value asking the subsystem to allocate any controller (dynamic
/// controller model).
pub const CNTLID_DYNAMIC: u16 = 0xFFFF;

/// Byte offset of HOSTID in the Connect data (for IPO with IATTR 1).
pub const CONNECT_DATA_HOSTID_OFFSET: u16 = offset_of!(ConnectData, hostid) as u16;
/// Byte offset of CNTLID in the Connect data.
pub const CONNECT_DATA_CNTLID_OFFSET: u16 = offset_of!(ConnectData, cntlid) as u16;
/// Byte offset of SUBNQN in the Connect data (256).
pub const CONNECT_DATA_SUBNQN_OFFSET: u16 = offset_of!(ConnectData, subnqn) as u16;
/// Byte offset of HOSTNQN in the Connect data (512).
pub const CONNECT_DATA_HOSTNQN_OFFSET: u16 = offset_of!(ConnectData, hostnqn) as u16;

impl ConnectData {
    /// Connect data for `hostid`, `cntlid` ([`CNTLID_DYNAMIC`] on the admin
    /// queue, the controller's ID on I/O queues) and the two NQNs.
    ///
    /// Errors: an NQN longer than [`NVME_NQN_MAX`] bytes or containing NUL.
    pub fn new(
        hostid: [u8; 16],
        cntlid: u16,
        subnqn: &str,
        hostnqn: &str,
    ) -> Result<Self, StrFieldError> {
        let mut d = Self::new_zeroed();
        d.hostid = hostid;
        d.cntlid.set(cntlid);
        d.set_subnqn(subnqn)?;
        d.set_hostnqn(hostnqn)?;
        Ok(d)
    }

    /// Controller ID asked for.
    pub fn cntlid(&self) -> u16 {
        self.cntlid.get()
    }

    /// Sets CNTLID.
    pub fn set_cntlid(&mut self, cntlid: u16) {
        self.cntlid.set(cntlid);
    }

    /// NVM Subsystem NQN.
    ///
    /// Errors: no NUL in the 256-byte field, more than 223 bytes, invalid UTF-8.
    pub fn subnqn(&self) -> Result<&str, StrFieldError> {
        read_nul_terminated(&self.subnqn, NVME_NQN_MAX)
    }

    /// Host NQN; errors as for [`subnqn`](Self::subnqn).
    pub fn hostnqn(&self) -> Result<&str, StrFieldError> {
        read_nul_terminated(&self.hostnqn, NVME_NQN_MAX)
    }

    /// Sets SUBNQN (NUL padded). Errors: longer than 223 bytes, or holds NUL.
    pub fn set_subnqn(&mut self, nqn: &str) -> Result<(), StrFieldError> {
        write_nul_padded(&mut self.subnqn, nqn, NVME_NQN_MAX)
    }

    /// Sets HOSTNQN (NUL padded). Errors as for [`set_subnqn`](Self::set_subnqn).
    pub fn set_hostnqn(&mut self, nqn: &str) -> Result<(), StrFieldError> {
        write_nul_padded(&mut self.hostnqn, nqn, NVME_NQN_MAX)
    }
}

/// Connect response DW0 on success: bits 15:0 the Controller ID (NVMe Base
/// 2.x §6.3 Figure "Connect Response"); AUTHREQ (bits 17:16) 0.
pub const fn connect_success_dw0(cntlid: u16) -> u32 {
    cntlid as u32
}

/// Where the parameter a failed Connect names lives (IATTR bit 0).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ParameterLocation {
    /// IATTR bit 0 = 0: the offset is into the Connect SQE.
    Command,
    /// IATTR bit 0 = 1: the offset is into the Connect data.
    Data,
}

/// Connect response DW0 with status Connect Invalid Parameters (SCT 1h, SC
/// 82h): Invalid Parameter Offset (IPO, bits 15:0) and Invalid Attributes
/// (IATTR, byte 2; bit 0 set = offset into the Connect data), NVMe Base
/// 2.x §6.3 Figure "Connect Response".
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ConnectInvalidParameter {
    /// Which structure `offset` points into.
    pub location: ParameterLocation,
    /// Byte offset of the offending field (IPO).
    pub offset: u16,
}

impl ConnectInvalidParameter {
    /// Unknown subsystem: SUBNQN in the Connect data (DW0 00010100h, as
    /// nvmet sends).
    pub const SUBNQN: Self = Self::data(CONNECT_DATA_SUBNQN_OFFSET);
    /// Host not allowed: HOSTNQN in the Connect data (DW0 00010200h).
    pub const HOSTNQN: Self = Self::data(CONNECT_DATA_HOSTNQN_OFFSET);
    /// Bad or unknown CNTLID in the Connect data.
    pub const CNTLID: Self = Self::data(CONNECT_DATA_CNTLID_OFFSET);
    /// Bad QID in the Connect SQE.
    pub const QID: Self = Self::command(CONNECT_SQE_QID_OFFSET);
    /// Bad SQSIZE in the Connect SQE.
    pub const SQSIZE: Self = Self::command(CONNECT_SQE_SQSIZE_OFFSET);

    /// A field at `offset` of the Connect data.
    pub const fn data(offset: u16) -> Self {
        ConnectInvalidParameter {
            location: ParameterLocation::Data,
            offset,
        }
    }

    /// A field at `offset` of the Connect SQE.
    pub const fn command(offset: u16) -> Self {
        ConnectInvalidParameter {
            location: ParameterLocation::Command,
            offset,
        }
    }

    /// Encodes CQE DW0.
    pub const fn to_dw0(self) -> u32 {
        let iattr = match self.location {
            ParameterLocation::Command => 0u32,
            ParameterLocation::Data => 1,
        };
        (self.offset as u32) | (iattr << 16)
    }

    /// Decodes CQE DW0 (other IATTR bits ignored).
    pub const fn from_dw0(dw0: u32) -> Self {
        ConnectInvalidParameter {
            location: if (dw0 >> 16) & 1 != 0 {
                ParameterLocation::Data
            } else {
                ParameterLocation::Command
            },
            offset: dw0 as u16,
        }
    }

    /// The status to answer with: Connect Invalid Parameters with DNR.
    pub const fn status() -> Status {
        Status::command_specific(CommandSpecificStatus::ConnectInvalidParameters).with_dnr()
    }

    /// The whole failed-Connect CQE for command `cid` on queue `sqid`.
    pub fn cqe(self, cid: u16, sqid: u16, sqhd: u16) -> Cqe {
        Cqe::new(cid, sqid, sqhd, Self::status(), self.to_dw0())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::{assert_bytes_eq, hex, sparse};

    fn sqe(h: &str) -> Sqe {
        Sqe::read_from_bytes(&hex(h)).unwrap()
    }

    #[test]
    fn capture_admin_connect() {
        // linux-nvme-rdma-rxe.pcap frame 92: admin Connect, CID 0, QID 0,
        // SQSIZE 31, KATO 5000, Connect data by keyed SGL 4Fh (1024 B, key 241dh).
        let wire = sqe(concat!(
            "7f400000 01000000 00000000 00000000 0000000000000000",
            "00c07682cc4546ff 000400 1d240000 4f",
            "0000 0000 1f00 00 00 88130000 000000000000000000000000"
        ));
        let c = ConnectCommand::from_sqe(&wire).unwrap();
        assert_eq!(
            (
                c.cid(),
                c.recfmt(),
                c.qid(),
                c.sqsize(),
                c.cattr(),
                c.kato()
            ),
            (0, 0, 0, 31, 0, 5000)
        );
        assert_eq!(c.queue_entries(), u32::from(crate::NVME_AQ_DEPTH));
        let mut built = ConnectCommand::new(0, 0, 31, 5000);
        built.set_sgl(SglDescriptor::keyed(0xff46_45cc_8276_c000, 1024, 0x241d, true).unwrap());
        assert_eq!(built.to_sqe(), wire);
        assert_eq!(Sqe::from(built), wire);
        // Frame 7: the discovery controller's Connect has KATO 0.
        let d = Sqe::connect(0, 0, 31, 0);
        assert_eq!(ConnectCommand::from_sqe(&d).unwrap().kato(), 0);
    }

    #[test]
    fn capture_io_connect_in_capsule() {
        // Frame 171 (SEND First): I/O queue Connect, QID 1, SQSIZE 127, KATO
        // 0, in-capsule data (SGL 01h, 1024 B) and the Connect data after it.
        let wire = sqe(concat!(
            "7f400000 01000000 00000000 00000000 0000000000000000",
            "0000000000000000 00040000 000000 01",
            "0000 0100 7f00 00 00 00000000 000000000000000000000000"
        ));
        let mut built = ConnectCommand::new(0, 1, 127, 0);
        built.set_sgl(SglDescriptor::inline_offset(0, 1024));
        assert_eq!(built.to_sqe(), wire);
        let data = sparse(
            1024,
            &[
                (0, "a9342a59983a4e2cb38349a6c6d39b37 0100"),
                (256, "6e716e2e323032362d31312e696f2e6578616d706c653a726566"),
                (
                    512,
                    concat!(
                        "6e716e2e323031342d30382e6f72672e6e766d65787072657373",
                        "3a757569643a61393334326135392d393833612d346532632d",
                        "623338332d343961366336643339623337"
                    ),
                ),
            ],
        );
        let cd = ConnectData::read_from_bytes(&data).unwrap();
        assert_eq!(cd.cntlid(), 1);
        assert_eq!(cd.subnqn(), Ok("nqn.2026-11.io.example:ref"));
        assert_eq!(
            cd.hostnqn(),
            Ok("nqn.2014-08.org.nvmexpress:uuid:a9342a59-983a-4e2c-b383-49a6c6d39b37")
        );
        let built = ConnectData::new(
            cd.hostid,
            1,
            "nqn.2026-11.io.example:ref",
            "nqn.2014-08.org.nvmexpress:uuid:a9342a59-983a-4e2c-b383-49a6c6d39b37",
        )
        .unwrap();
        assert_bytes_eq(built.as_bytes(), &data);
    }

    #[test]
    fn capture_discovery_connect_data() {
        // Frame 10 (RDMA READ Response): admin Connect data to the discovery
        // subsystem, CNTLID FFFFh.
        let data = sparse(
            1024,
            &[
                (0, "a9342a59983a4e2cb38349a6c6d39b37 ffff"),
                (
                    256,
                    "6e716e2e323031342d30382e6f72672e6e766d65787072657373 2e646973636f76657279",
                ),
            ],
        );
        let cd = ConnectData::read_from_bytes(&data).unwrap();
        assert_eq!(cd.cntlid(), CNTLID_DYNAMIC);
        assert_eq!(cd.subnqn(), Ok(crate::NVMF_DISCOVERY_NQN));
        assert_eq!(cd.hostnqn(), Ok(""));
    }

    #[test]
    fn nqn_errors() {
        let mut cd = ConnectData::new([0; 16], CNTLID_DYNAMIC, "a", "b").unwrap();
        let long = "n".repeat(224);
        assert_eq!(
            cd.set_subnqn(&long),
            Err(StrFieldError::TooLong { len: 224, max: 223 })
        );
        assert_eq!(cd.subnqn(), Ok("a"));
        cd.set_hostnqn(&"h".repeat(223)).unwrap();
        assert_eq!(cd.hostnqn().map(str::len), Ok(223));
        let mut raw = cd.as_bytes().to_vec();
        raw[256..512].fill(b'x');
        let bad = ConnectData::read_from_bytes(&raw).unwrap();
        assert_eq!(bad.subnqn(), Err(StrFieldError::NotTerminated));
        raw[256..512].fill(0);
        raw[256] = 0xff;
        let bad = ConnectData::read_from_bytes(&raw).unwrap();
        assert_eq!(bad.subnqn(), Err(StrFieldError::InvalidUtf8));
    }

    #[test]
    fn capture_connect_failure_dw0() {
        // linux-nvme-rdma-errors.pcap frames 10 and 21.
        assert_eq!(CONNECT_DATA_SUBNQN_OFFSET, 256);
        assert_eq!(CONNECT_DATA_HOSTNQN_OFFSET, 512);
        assert_eq!(ConnectInvalidParameter::SUBNQN.to_dw0(), 0x0001_0100);
        assert_eq!(ConnectInvalidParameter::HOSTNQN.to_dw0(), 0x0001_0200);
        assert_eq!(
            ConnectInvalidParameter::SUBNQN.cqe(0, 0, 0).as_bytes(),
            &hex("00010100 00000000 0000 0000 0000 0483")[..]
        );
        assert_eq!(
            ConnectInvalidParameter::from_dw0(0x0001_0200),
            ConnectInvalidParameter::HOSTNQN
        );
        assert_eq!(
            ConnectInvalidParameter::from_dw0(0x2a),
            ConnectInvalidParameter::command(42)
        );
        assert_eq!(ConnectInvalidParameter::QID.offset, 42);
        assert_eq!(ConnectInvalidParameter::SQSIZE.offset, 44);
        assert_eq!(CONNECT_SQE_KATO_OFFSET, 48);
        assert_eq!(CONNECT_SQE_CATTR_OFFSET, 46);
        assert_eq!(CONNECT_SQE_RECFMT_OFFSET, 40);
        // Success (errors pcap frame 32): DW0 = CNTLID 1.
        assert_eq!(connect_success_dw0(1), 1);
    }

    #[test]
    fn capture_property_get_set() {
        // linux-nvme-rdma-rxe.pcap frame 13: Property Get CAP (8 B), CID 1.
        let wire = sqe(concat!(
            "7f400100 04000000 00000000 00000000 0000000000000000",
            "0000000000000000 00000000000000 40",
            "01000000 00000000 0000000000000000 0000000000000000"
        ));
        assert_eq!(Sqe::property_get(1, Property::Cap), wire);
        let g = PropertyGetCommand::from_sqe(&wire).unwrap();
        assert_eq!(
            (g.size(), g.ofst(), g.property()),
            (Ok(PropertySize::EightBytes), 0, Some(Property::Cap))
        );
        // Frame 33: Property Get CSTS (4 B), CID 3000h.
        let g = PropertyGetCommand::of(0x3000, Property::Csts);
        assert_eq!((g.attrib(), g.ofst()), (0, 0x1c));
        // Frame 17: Property Set CC = 00460060, CID 1000h.
        let wire = sqe(concat!(
            "7f400010 00000000 00000000 00000000 0000000000000000",
            "0000000000000000 00000000000000 40",
            "00000000 14000000 6000460000000000 0000000000000000"
        ));
        assert_eq!(Sqe::property_set(0x1000, Property::Cc, 0x0046_0060), wire);
        let s = PropertySetCommand::from_sqe(&wire).unwrap();
        assert_eq!(
            (s.size(), s.property(), s.value(), s.cid()),
            (
                Ok(PropertySize::FourBytes),
                Some(Property::Cc),
                0x0046_0060,
                0x1000
            )
        );
    }

    #[test]
    fn parse_errors() {
        let ka = Sqe::keep_alive(1);
        assert_eq!(
            ConnectCommand::from_sqe(&ka),
            Err(FabricsError::NotFabrics { opcode: 0x18 })
        );
        let pg = Sqe::property_get(1, Property::Vs);
        assert_eq!(
            ConnectCommand::from_sqe(&pg),
            Err(FabricsError::WrongCommandType {
                expected: FabricsCommandType::Connect,
                found: 4
            })
        );
        let mut raw = pg.to_array();
        raw[40] = 2;
        let bad = Sqe::from_array(raw);
        assert_eq!(
            PropertyGetCommand::from_sqe(&bad).unwrap().size(),
            Err(FabricsError::InvalidPropertySize { attrib: 2 })
        );
        let dc = DisconnectCommand::new(9).to_sqe();
        assert_eq!(dc.fctype(), Some(8));
        assert_eq!(DisconnectCommand::from_sqe(&dc).unwrap().recfmt(), 0);
    }
}
