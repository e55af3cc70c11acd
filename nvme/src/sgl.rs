//! Scatter Gather List descriptors (NVMe Base 2.x §4.3.2), including the
//! Keyed SGL Data Block descriptor of the RDMA transport (NVMe RDMA Transport
//! 1.x §2.3 / NVMe over Fabrics 1.1 §7.3.2).
//!
//! Byte 15 is the SGL Identifier: descriptor type in bits 7:4, sub type in
//! bits 3:0.

use thiserror::Error;
use zerocopy::byteorder::little_endian::U64;
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout, Unaligned};

use crate::status::{GenericStatus, Status};

wire_enum! {
    /// SGL Descriptor Type (identifier bits 7:4), NVMe Base 2.x §4.3.2
    /// Figure "SGL Descriptor Type".
    pub enum SglType: u8 {
        /// SGL Data Block (0h).
        DataBlock = 0x0 => "SGL Data Block",
        /// SGL Bit Bucket (1h).
        BitBucket = 0x1 => "SGL Bit Bucket",
        /// SGL Segment (2h).
        Segment = 0x2 => "SGL Segment",
        /// SGL Last Segment (3h).
        LastSegment = 0x3 => "SGL Last Segment",
        /// Keyed SGL Data Block (4h), RDMA transport.
        KeyedDataBlock = 0x4 => "Keyed SGL Data Block",
        /// Transport SGL Data Block (5h).
        TransportDataBlock = 0x5 => "Transport SGL Data Block",
        /// Vendor specific (Fh).
        VendorSpecific = 0xF => "Vendor Specific",
    }
}

wire_enum! {
    /// SGL Descriptor Sub Type (identifier bits 3:0), NVMe Base 2.x §4.3.2
    /// Figure "SGL Descriptor Sub Type".
    pub enum SglSubtype: u8 {
        /// Address (0h): the address field is a memory address.
        Address = 0x0 => "Address",
        /// Offset (1h): the address field is an offset into in-capsule data.
        Offset = 0x1 => "Offset",
        /// Transport specific (Ah).
        TransportSpecific = 0xA => "Transport Specific",
        /// Invalidate Key (Fh, keyed data block only): the target answers with
        /// SEND with Invalidate of the key (NVMe RDMA Transport §2.3).
        InvalidateKey = 0xF => "Invalidate Key",
    }
}

/// Identifier of a Data Block / Address descriptor (00h).
pub const SGL_ID_DATA_BLOCK_ADDRESS: u8 = 0x00;
/// Identifier of a Data Block / Offset descriptor (01h): in-capsule data.
pub const SGL_ID_DATA_BLOCK_OFFSET: u8 = 0x01;
/// Identifier of a Keyed Data Block / Address descriptor (40h).
pub const SGL_ID_KEYED_ADDRESS: u8 = 0x40;
/// Identifier of a Keyed Data Block / Invalidate Key descriptor (4Fh).
pub const SGL_ID_KEYED_INVALIDATE: u8 = 0x4F;
/// Largest length a Keyed SGL Data Block can describe (24 bits).
pub const KEYED_SGL_MAX_LEN: u32 = 0x00FF_FFFF;

/// One 16-byte SGL descriptor (NVMe Base 2.x §4.3.2), as carried in SQE
/// bytes 24..40 (DPTR, "SGL1").
///
/// Layout: bytes 0..8 address (or offset), bytes 8..15 type specific
/// (Data Block: 32-bit length then 3 reserved; Keyed Data Block: 24-bit
/// length then 32-bit key), byte 15 identifier. All little endian.
#[derive(
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    Default,
    FromBytes,
    IntoBytes,
    KnownLayout,
    Immutable,
    Unaligned,
)]
#[repr(C)]
pub struct SglDescriptor {
    address: U64,
    specific: [u8; 7],
    identifier: u8,
}
assert_size!(SglDescriptor, 16);

/// A decoded SGL descriptor of one of the kinds an NVMe/RDMA target accepts
/// in SGL1.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Sgl {
    /// Keyed SGL Data Block (type 4h): host memory reachable by RDMA READ /
    /// WRITE with `key` (the rkey) at `addr`, `len` bytes (< 2^24).
    /// `invalidate` (sub type Fh) asks for SEND with Invalidate of `key`.
    KeyedDataBlock {
        /// Remote virtual address.
        addr: u64,
        /// Length in bytes (24 bits).
        len: u32,
        /// Remote key (rkey).
        key: u32,
        /// Sub type Fh (Invalidate Key) rather than 0h (Address).
        invalidate: bool,
    },
    /// SGL Data Block, sub type Offset (identifier 01h): `len` bytes of
    /// in-capsule data at `offset` from the start of the capsule's data
    /// (after the 64-byte SQE plus ICDOFF x 16 bytes).
    DataBlockOffset {
        /// Offset into the in-capsule data, bytes.
        offset: u64,
        /// Length in bytes.
        len: u32,
    },
    /// SGL Data Block, sub type Address (identifier 00h): `len` bytes at
    /// memory address `addr`.
    DataBlockAddress {
        /// Memory address.
        addr: u64,
        /// Length in bytes.
        len: u32,
    },
}

/// Why an SGL descriptor is not one this crate decodes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Error)]
pub enum SglError {
    /// The descriptor type (identifier bits 7:4) is not Data Block or Keyed
    /// Data Block.
    #[error("SGL descriptor type {:#x} not supported (identifier {identifier:#04x})", identifier >> 4)]
    DescriptorTypeInvalid {
        /// The whole identifier byte.
        identifier: u8,
    },
    /// The type is supported but its sub type (bits 3:0) is not.
    #[error("SGL descriptor sub type {:#x} not supported (identifier {identifier:#04x})", identifier & 0xf)]
    SubtypeInvalid {
        /// The whole identifier byte.
        identifier: u8,
    },
    /// A length exceeds what the descriptor can carry (keyed: 24 bits).
    #[error("SGL length {len} exceeds the descriptor's limit {max}")]
    LengthTooLarge {
        /// The requested length.
        len: u64,
        /// The largest length the descriptor can hold.
        max: u64,
    },
}

impl SglError {
    /// The completion status a target answers with (as Linux nvmet does):
    /// an unknown type gives SGL Descriptor Type Invalid (11h), an unknown
    /// sub type Invalid Field in Command (02h), a length error Data SGL
    /// Length Invalid (0Fh); all with DNR.
    pub const fn status(&self) -> Status {
        let code = match self {
            SglError::DescriptorTypeInvalid { .. } => GenericStatus::SglDescriptorTypeInvalid,
            SglError::SubtypeInvalid { .. } => GenericStatus::InvalidField,
            SglError::LengthTooLarge { .. } => GenericStatus::DataSglLengthInvalid,
        };
        Status::generic(code).with_dnr()
    }
}

impl SglDescriptor {
    /// A descriptor from its raw 16 bytes.
    pub fn from_array(bytes: [u8; 16]) -> Self {
        zerocopy::transmute!(bytes)
    }

    /// The raw 16 bytes.
    pub fn to_array(self) -> [u8; 16] {
        zerocopy::transmute!(self)
    }

    /// Keyed SGL Data Block (identifier 40h, or 4Fh with `invalidate`):
    /// `len` bytes at remote address `addr` under rkey `key`.
    ///
    /// Errors: [`SglError::LengthTooLarge`] if `len` exceeds 24 bits.
    pub fn keyed(addr: u64, len: u32, key: u32, invalidate: bool) -> Result<Self, SglError> {
        if len > KEYED_SGL_MAX_LEN {
            return Err(SglError::LengthTooLarge {
                len: len.into(),
                max: KEYED_SGL_MAX_LEN.into(),
            });
        }
        let l = len.to_le_bytes();
        let k = key.to_le_bytes();
        Ok(SglDescriptor {
            address: U64::new(addr),
            specific: [l[0], l[1], l[2], k[0], k[1], k[2], k[3]],
            identifier: if invalidate {
                SGL_ID_KEYED_INVALIDATE
            } else {
                SGL_ID_KEYED_ADDRESS
            },
        })
    }

    /// The keyed descriptor Linux sends for commands without data:
    /// identifier 40h, address 0, length 0, key 0.
    pub const fn keyed_null() -> Self {
        SglDescriptor {
            address: U64::ZERO,
            specific: [0; 7],
            identifier: SGL_ID_KEYED_ADDRESS,
        }
    }

    /// SGL Data Block with sub type Offset (identifier 01h), the form Linux
    /// uses for in-capsule data: `len` bytes at `offset` into the capsule's
    /// data.
    pub fn inline_offset(offset: u64, len: u32) -> Self {
        Self::data_block(offset, len, SGL_ID_DATA_BLOCK_OFFSET)
    }

    /// SGL Data Block with sub type Address (identifier 00h).
    pub fn data_block_address(addr: u64, len: u32) -> Self {
        Self::data_block(addr, len, SGL_ID_DATA_BLOCK_ADDRESS)
    }

    fn data_block(address: u64, len: u32, identifier: u8) -> Self {
        let l = len.to_le_bytes();
        SglDescriptor {
            address: U64::new(address),
            specific: [l[0], l[1], l[2], l[3], 0, 0, 0],
            identifier,
        }
    }

    /// The SGL Identifier byte (byte 15).
    pub const fn identifier(&self) -> u8 {
        self.identifier
    }

    /// Descriptor type nibble (identifier bits 7:4).
    pub const fn type_nibble(&self) -> u8 {
        self.identifier >> 4
    }

    /// Sub type nibble (identifier bits 3:0).
    pub const fn subtype_nibble(&self) -> u8 {
        self.identifier & 0xF
    }

    /// Bytes 0..8: address, or offset for sub type Offset.
    pub fn address(&self) -> u64 {
        self.address.get()
    }

    /// Length read as a Data Block descriptor (32 bits at bytes 8..12).
    pub fn data_block_len(&self) -> u32 {
        let s = &self.specific;
        u32::from_le_bytes([s[0], s[1], s[2], s[3]])
    }

    /// Length read as a Keyed Data Block descriptor (24 bits at 8..11).
    pub fn keyed_len(&self) -> u32 {
        let s = &self.specific;
        u32::from_le_bytes([s[0], s[1], s[2], 0])
    }

    /// Key read as a Keyed Data Block descriptor (32 bits at 11..15).
    pub fn key(&self) -> u32 {
        let s = &self.specific;
        u32::from_le_bytes([s[3], s[4], s[5], s[6]])
    }

    /// Decodes the descriptor.
    ///
    /// Errors: [`SglError::DescriptorTypeInvalid`] for types other than Data
    /// Block (0h) and Keyed Data Block (4h); [`SglError::SubtypeInvalid`] for
    /// sub types other than Address/Offset (Data Block) or Address/Invalidate
    /// Key (Keyed).
    pub fn decode(&self) -> Result<Sgl, SglError> {
        let identifier = self.identifier;
        match (
            SglType::from_value(self.type_nibble()),
            self.subtype_nibble(),
        ) {
            (Some(SglType::DataBlock), 0x0) => Ok(Sgl::DataBlockAddress {
                addr: self.address(),
                len: self.data_block_len(),
            }),
            (Some(SglType::DataBlock), 0x1) => Ok(Sgl::DataBlockOffset {
                offset: self.address(),
                len: self.data_block_len(),
            }),
            (Some(SglType::KeyedDataBlock), sub @ (0x0 | 0xF)) => Ok(Sgl::KeyedDataBlock {
                addr: self.address(),
                len: self.keyed_len(),
                key: self.key(),
                invalidate: sub == 0xF,
            }),
            (Some(SglType::DataBlock | SglType::KeyedDataBlock), _) => {
                Err(SglError::SubtypeInvalid { identifier })
            }
            _ => Err(SglError::DescriptorTypeInvalid { identifier }),
        }
    }

    /// The length in bytes of the data the descriptor describes, whatever
    /// its kind (0 for kinds [`decode`](Self::decode) rejects).
    pub fn len(&self) -> u32 {
        match self.decode() {
            Ok(Sgl::KeyedDataBlock { len, .. })
            | Ok(Sgl::DataBlockOffset { len, .. })
            | Ok(Sgl::DataBlockAddress { len, .. }) => len,
            Err(_) => 0,
        }
    }

    /// True when [`len`](Self::len) is 0.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl From<Sgl> for SglDescriptor {
    /// Encodes a decoded descriptor. A keyed length above 24 bits is
    /// truncated to its low 24 bits; use [`SglDescriptor::keyed`] to have it
    /// checked.
    fn from(sgl: Sgl) -> Self {
        match sgl {
            Sgl::KeyedDataBlock {
                addr,
                len,
                key,
                invalidate,
            } => match SglDescriptor::keyed(addr, len & KEYED_SGL_MAX_LEN, key, invalidate) {
                Ok(d) => d,
                Err(_) => SglDescriptor::keyed_null(),
            },
            Sgl::DataBlockOffset { offset, len } => SglDescriptor::inline_offset(offset, len),
            Sgl::DataBlockAddress { addr, len } => SglDescriptor::data_block_address(addr, len),
        }
    }
}

impl core::fmt::Debug for SglDescriptor {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self.decode() {
            Ok(sgl) => write!(f, "SglDescriptor({sgl:?})"),
            Err(_) => write!(
                f,
                "SglDescriptor {{ identifier: {:#04x}, bytes: {:02x?} }}",
                self.identifier,
                self.to_array()
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::hex;

    #[test]
    fn capture_keyed_invalidate() {
        // linux-nvme-rdma-rxe.pcap frame 7 (admin Connect), SQE bytes 24..40:
        // Connect data 1024 B at ff4645cc8276e000, rkey 0x33d, 4Fh.
        let wire = hex("00e07682cc4546ff 000400 3d030000 4f");
        let d = SglDescriptor::read_from_bytes(&wire).unwrap();
        assert_eq!(
            d.decode(),
            Ok(Sgl::KeyedDataBlock {
                addr: 0xff46_45cc_8276_e000,
                len: 1024,
                key: 0x33d,
                invalidate: true
            })
        );
        let built = SglDescriptor::keyed(0xff46_45cc_8276_e000, 1024, 0x33d, true).unwrap();
        assert_eq!(built.as_bytes(), &wire[..]);
        // Frame 390: 32 KiB write, keyed 4Fh, length 0x008000, rkey 0x44f7.
        let wire = hex("00705b88cc4546ff 008000 f7440000 4f");
        let d = SglDescriptor::read_from_bytes(&wire).unwrap();
        assert_eq!(d.keyed_len(), 32768);
        assert_eq!(d.key(), 0x44f7);
        assert_eq!(d.len(), 32768);
    }

    #[test]
    fn capture_keyed_null() {
        // linux-nvme-rdma-errors.pcap frame 204 (Keep Alive): all zero, 40h.
        let wire = hex("0000000000000000 00000000000000 40");
        assert_eq!(SglDescriptor::keyed_null().as_bytes(), &wire[..]);
        assert_eq!(
            SglDescriptor::keyed(0, 0, 0, false).unwrap(),
            SglDescriptor::keyed_null()
        );
        assert!(SglDescriptor::keyed_null().is_empty());
    }

    #[test]
    fn capture_inline_offset() {
        // linux-nvme-rdma-rxe.pcap frame 322 (4 KiB write, in-capsule):
        // offset 0, length 0x1000, identifier 01h.
        let wire = hex("0000000000000000 00100000 000000 01");
        let d = SglDescriptor::inline_offset(0, 4096);
        assert_eq!(d.as_bytes(), &wire[..]);
        assert_eq!(
            d.decode(),
            Ok(Sgl::DataBlockOffset {
                offset: 0,
                len: 4096
            })
        );
    }

    #[test]
    fn errors() {
        assert_eq!(
            SglDescriptor::keyed(0, 1 << 24, 1, false),
            Err(SglError::LengthTooLarge {
                len: 1 << 24,
                max: 0xFF_FFFF
            })
        );
        let seg = SglDescriptor::from_array([0, 0, 0, 0, 0, 0, 0, 0, 16, 0, 0, 0, 0, 0, 0, 0x20]);
        assert_eq!(
            seg.decode(),
            Err(SglError::DescriptorTypeInvalid { identifier: 0x20 })
        );
        assert_eq!(
            seg.decode().unwrap_err().status().to_field(),
            Status::generic(GenericStatus::SglDescriptorTypeInvalid)
                .with_dnr()
                .to_field()
        );
        let mut raw = SglDescriptor::keyed_null().to_array();
        raw[15] = 0x41;
        assert_eq!(
            SglDescriptor::from_array(raw).decode(),
            Err(SglError::SubtypeInvalid { identifier: 0x41 })
        );
        raw[15] = 0x0A;
        assert_eq!(
            SglDescriptor::from_array(raw).decode(),
            Err(SglError::SubtypeInvalid { identifier: 0x0A })
        );
        raw[15] = 0xF0;
        assert!(matches!(
            SglDescriptor::from_array(raw).decode(),
            Err(SglError::DescriptorTypeInvalid { .. })
        ));
    }

    #[test]
    fn round_trip() {
        for sgl in [
            Sgl::KeyedDataBlock {
                addr: u64::MAX,
                len: KEYED_SGL_MAX_LEN,
                key: 0xdead_beef,
                invalidate: false,
            },
            Sgl::DataBlockOffset {
                offset: 64,
                len: u32::MAX,
            },
            Sgl::DataBlockAddress { addr: 7, len: 9 },
        ] {
            let d = SglDescriptor::from(sgl);
            assert_eq!(d.decode(), Ok(sgl));
            assert_eq!(SglDescriptor::from_array(d.to_array()), d);
        }
    }
}
