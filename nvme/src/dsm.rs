//! Dataset Management range (NVM Command Set 1.x §3.3.3, Figure "Dataset
//! Management - Range Definition"): the data of a Dataset Management
//! command is NR + 1 of these 16-byte entries.

use zerocopy::byteorder::little_endian::{U32, U64};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout, Unaligned};

/// One Dataset Management range, 16 bytes: Context Attributes (u32),
/// Length in logical blocks (u32, not 0's based), Starting LBA (u64).
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
pub struct DsmRange {
    /// Context Attributes (bytes 0..4).
    pub cattr: U32,
    /// Length in logical blocks (bytes 4..8).
    pub nlb: U32,
    /// Starting LBA (bytes 8..16).
    pub slba: U64,
}
assert_size!(DsmRange, 16);

/// Most ranges one Dataset Management command can carry (NR is 8 bits,
/// 0's based).
pub const DSM_MAX_RANGES: usize = 256;

impl DsmRange {
    /// A range of `nlb` logical blocks from `slba`, no context attributes.
    pub fn new(slba: u64, nlb: u32) -> Self {
        DsmRange {
            cattr: U32::ZERO,
            nlb: U32::new(nlb),
            slba: U64::new(slba),
        }
    }

    /// Views `data` (the command's data buffer) as ranges; trailing bytes
    /// that do not fill a whole range are ignored.
    pub fn slice_from(data: &[u8]) -> &[DsmRange] {
        let whole =
            data.len() / core::mem::size_of::<DsmRange>() * core::mem::size_of::<DsmRange>();
        <[DsmRange]>::ref_from_bytes(&data[..whole]).unwrap_or(&[])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout() {
        let r = DsmRange::new(0x0102_0304_0506_0708, 8);
        assert_eq!(
            r.as_bytes(),
            &[0, 0, 0, 0, 8, 0, 0, 0, 8, 7, 6, 5, 4, 3, 2, 1]
        );
        let mut buf = r.as_bytes().to_vec();
        buf.extend_from_slice(DsmRange::new(16, 1).as_bytes());
        buf.push(0xAA);
        let ranges = DsmRange::slice_from(&buf);
        assert_eq!(ranges.len(), 2);
        assert_eq!(ranges[1].slba.get(), 16);
        assert_eq!(ranges[0].nlb.get(), 8);
    }
}
