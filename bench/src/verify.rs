//! `--verify crc32c`: self-checking blocks, in the spirit of fio's verify header.
//!
//! Every written block starts with a 32-byte [`VerifyHeader`] (magic, block length,
//! byte offset, write generation, CRC-32C) followed by a pattern derived from
//! (offset, generation). The CRC-32C (Castagnoli, as in NVMe's 32b Guard PI) covers
//! the whole block except the CRC field itself. A read is checked only when the
//! block's content is known: [`VerifyTracker`] remembers the generation of the last
//! completed write of each block, and skips reads that raced with a write.

use std::collections::HashMap;

use zerocopy::byteorder::little_endian::{U32, U64};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout, Unaligned};

use super::permutation::{mix64, SplitMix64};

/// `"NVBV"` read as a little-endian u32: marks a block written by `nvmf-bench --verify`.
pub const VERIFY_MAGIC: u32 = u32::from_le_bytes(*b"NVBV");

/// Bytes of [`VerifyHeader`] at the start of each verified block.
pub const VERIFY_HEADER_LEN: usize = 32;

/// Byte range of the `crc32c` field inside the header.
const CRC_FIELD: std::ops::Range<usize> = 24..28;

/// The header at the start of a verified block (all fields little endian).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned,
)]
#[repr(C)]
pub struct VerifyHeader {
    /// [`VERIFY_MAGIC`].
    pub magic: U32,
    /// Block length in bytes.
    pub len: U32,
    /// Byte offset of the block in the namespace.
    pub offset: U64,
    /// Write generation (run-wide counter, starting at 1).
    pub generation: U64,
    /// CRC-32C of the block with this field left out.
    pub crc32c: U32,
    /// Zero.
    pub reserved: U32,
}

const _: () = assert!(std::mem::size_of::<VerifyHeader>() == VERIFY_HEADER_LEN);

/// How a read block failed verification. Each names the block's byte offset.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VerifyError {
    /// The block is shorter than the header.
    #[error("verify: block at offset {offset} is {len} bytes, shorter than the {VERIFY_HEADER_LEN}-byte header")]
    TooShort {
        /// Byte offset.
        offset: u64,
        /// Block length.
        len: usize,
    },
    /// No verify header where one was written.
    #[error("verify: bad magic header {found:#010x}, wanted {VERIFY_MAGIC:#010x} at offset {offset}, length {len}")]
    BadMagic {
        /// Byte offset.
        offset: u64,
        /// Block length.
        len: usize,
        /// Magic found.
        found: u32,
    },
    /// The header names another block (misdirected read or write).
    #[error("verify: bad header offset {found}, wanted {offset} at offset {offset}, length {len}")]
    BadOffset {
        /// Byte offset read.
        offset: u64,
        /// Block length.
        len: usize,
        /// Offset in the header.
        found: u64,
    },
    /// The header's length differs from the block's.
    #[error("verify: bad header length {found}, wanted {len} at offset {offset}")]
    BadLength {
        /// Byte offset.
        offset: u64,
        /// Block length.
        len: usize,
        /// Length in the header.
        found: u32,
    },
    /// The CRC-32C does not match the data.
    #[error("verify: bad crc32c at offset {offset}, length {len}: stored {stored:#010x}, computed {computed:#010x}")]
    BadCrc {
        /// Byte offset.
        offset: u64,
        /// Block length.
        len: usize,
        /// CRC in the header.
        stored: u32,
        /// CRC of the data read.
        computed: u32,
    },
    /// An intact block from another write than the last one completed (lost write).
    #[error("verify: stale data at offset {offset}: generation {found}, wanted {expected}")]
    StaleGeneration {
        /// Byte offset.
        offset: u64,
        /// Generation expected.
        expected: u64,
        /// Generation found.
        found: u64,
    },
    /// Header and CRC agree but the payload is not the pattern for (offset, generation).
    #[error("verify: pattern mismatch at offset {offset}, first bad byte {first_bad}")]
    BadPattern {
        /// Byte offset.
        offset: u64,
        /// Index in the block of the first differing byte.
        first_bad: usize,
    },
}

impl VerifyError {
    /// The byte offset of the block that failed.
    pub fn offset(&self) -> u64 {
        match *self {
            VerifyError::TooShort { offset, .. }
            | VerifyError::BadMagic { offset, .. }
            | VerifyError::BadOffset { offset, .. }
            | VerifyError::BadLength { offset, .. }
            | VerifyError::BadCrc { offset, .. }
            | VerifyError::StaleGeneration { offset, .. }
            | VerifyError::BadPattern { offset, .. } => offset,
        }
    }
}

fn pattern_rng(offset: u64, generation: u64) -> SplitMix64 {
    SplitMix64::new(mix64(offset) ^ generation.rotate_left(32))
}

fn fill_pattern(payload: &mut [u8], offset: u64, generation: u64) {
    let mut g = pattern_rng(offset, generation);
    for chunk in payload.chunks_mut(8) {
        let w = g.next_u64().to_le_bytes();
        chunk.copy_from_slice(&w[..chunk.len()]);
    }
}

fn first_pattern_mismatch(payload: &[u8], offset: u64, generation: u64) -> Option<usize> {
    let mut g = pattern_rng(offset, generation);
    for (i, chunk) in payload.chunks(8).enumerate() {
        let w = g.next_u64().to_le_bytes();
        if let Some(j) = chunk.iter().zip(&w).position(|(a, b)| a != b) {
            return Some(i * 8 + j);
        }
    }
    None
}

fn block_crc(block: &[u8]) -> u32 {
    let c = crc32c::crc32c(&block[..CRC_FIELD.start]);
    crc32c::crc32c_append(c, &block[CRC_FIELD.end..])
}

/// Fills `block` (a whole block, `len >= VERIFY_HEADER_LEN`) with the header and
/// pattern for (`offset`, `generation`). Shorter blocks are left unchanged.
pub fn fill_block(block: &mut [u8], offset: u64, generation: u64) {
    let Ok(len) = u32::try_from(block.len()) else {
        return;
    };
    let Some((head, payload)) = block.split_first_chunk_mut::<VERIFY_HEADER_LEN>() else {
        return;
    };
    fill_pattern(payload, offset, generation);
    let header = VerifyHeader {
        magic: VERIFY_MAGIC.into(),
        len: len.into(),
        offset: offset.into(),
        generation: generation.into(),
        crc32c: 0.into(),
        reserved: 0.into(),
    };
    head.copy_from_slice(header.as_bytes());
    let crc = block_crc(block);
    block[CRC_FIELD].copy_from_slice(&crc.to_le_bytes());
}

/// Checks a block read at `offset` against the header rules and, when given, the
/// generation of the last write that completed there.
///
/// Errors: see [`VerifyError`].
pub fn check_block(
    block: &[u8],
    offset: u64,
    expected_generation: Option<u64>,
) -> Result<(), VerifyError> {
    let len = block.len();
    let Ok((header, payload)) = VerifyHeader::ref_from_prefix(block) else {
        return Err(VerifyError::TooShort { offset, len });
    };
    if header.magic.get() != VERIFY_MAGIC {
        return Err(VerifyError::BadMagic {
            offset,
            len,
            found: header.magic.get(),
        });
    }
    if header.offset.get() != offset {
        return Err(VerifyError::BadOffset {
            offset,
            len,
            found: header.offset.get(),
        });
    }
    if header.len.get() as usize != len {
        return Err(VerifyError::BadLength {
            offset,
            len,
            found: header.len.get(),
        });
    }
    let computed = block_crc(block);
    if header.crc32c.get() != computed {
        return Err(VerifyError::BadCrc {
            offset,
            len,
            stored: header.crc32c.get(),
            computed,
        });
    }
    let generation = header.generation.get();
    if let Some(expected) = expected_generation {
        if generation != expected {
            return Err(VerifyError::StaleGeneration {
                offset,
                expected,
                found: generation,
            });
        }
    }
    if let Some(i) = first_pattern_mismatch(payload, offset, generation) {
        return Err(VerifyError::BadPattern {
            offset,
            first_bad: VERIFY_HEADER_LEN + i,
        });
    }
    Ok(())
}

#[derive(Debug, Clone, Copy, Default)]
struct BlockState {
    /// Generation of the data known to be on the medium; 0 = unknown.
    completed: u64,
    /// Generation of the last write submitted.
    last_submitted: u64,
    /// Writes submitted and not completed.
    in_flight: u32,
    /// Two writes overlapped: the content is whichever executed last.
    ambiguous: bool,
}

/// What a read must find, captured when it is submitted ([`VerifyTracker::read_started`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReadCheck {
    expected: u64,
    generation_at_submit: u64,
}

/// Run-wide record of which blocks hold which write generation, keyed by byte
/// offset (shared by all jobs, which run on one thread).
#[derive(Debug, Default)]
pub struct VerifyTracker {
    blocks: HashMap<u64, BlockState>,
    generation: u64,
    /// Blocks that passed verification.
    pub verified: u64,
    /// Blocks that failed verification.
    pub mismatches: u64,
    /// Writes that completed successfully.
    pub written: u64,
}

impl VerifyTracker {
    /// An empty tracker.
    pub fn new() -> Self {
        Self::default()
    }

    /// Allocates the generation for a write to `offset` about to be submitted and
    /// records it as in flight. Fill the buffer with [`fill_block`] and this value.
    pub fn write_started(&mut self, offset: u64) -> u64 {
        self.generation += 1;
        let g = self.generation;
        let s = self.blocks.entry(offset).or_default();
        if s.in_flight > 0 {
            s.ambiguous = true;
        }
        s.in_flight += 1;
        s.last_submitted = g;
        g
    }

    /// Records the outcome of a write begun with [`Self::write_started`], or that it
    /// was never submitted (`ok = false`).
    pub fn write_finished(&mut self, offset: u64, generation: u64, ok: bool) {
        let Some(s) = self.blocks.get_mut(&offset) else {
            return;
        };
        s.in_flight = s.in_flight.saturating_sub(1);
        if ok {
            self.written += 1;
        } else {
            s.ambiguous = true;
        }
        if s.in_flight == 0 {
            s.completed = if s.ambiguous { 0 } else { generation };
            s.ambiguous = false;
        }
    }

    /// Whether a read of `offset` submitted now can be verified, and against what.
    /// `None`: never written in this run, content unknown, or a write is in flight.
    pub fn read_started(&self, offset: u64) -> Option<ReadCheck> {
        let s = self.blocks.get(&offset)?;
        (s.completed != 0 && s.in_flight == 0).then_some(ReadCheck {
            expected: s.completed,
            generation_at_submit: self.generation,
        })
    }

    /// Verifies a completed read of `offset` begun with `check`; counts the outcome.
    /// Returns `Ok(false)` when a write to the block was submitted meanwhile (skipped).
    ///
    /// Errors: the block's [`VerifyError`] (counted as a mismatch).
    pub fn read_finished(
        &mut self,
        block: &[u8],
        offset: u64,
        check: ReadCheck,
    ) -> Result<bool, VerifyError> {
        let raced = match self.blocks.get(&offset) {
            Some(s) => s.last_submitted > check.generation_at_submit,
            None => true,
        };
        if raced {
            return Ok(false);
        }
        match check_block(block, offset, Some(check.expected)) {
            Ok(()) => {
                self.verified += 1;
                Ok(true)
            }
            Err(e) => {
                self.mismatches += 1;
                Err(e)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filled_block_checks_and_has_known_header_bytes() {
        let mut b = vec![0u8; 512];
        fill_block(&mut b, 4096, 7);
        assert_eq!(&b[0..4], b"NVBV");
        assert_eq!(&b[4..8], &512u32.to_le_bytes());
        assert_eq!(&b[8..16], &4096u64.to_le_bytes());
        assert_eq!(&b[16..24], &7u64.to_le_bytes());
        assert_eq!(&b[28..32], &[0; 4]);
        assert_eq!(check_block(&b, 4096, Some(7)), Ok(()));
        assert_eq!(check_block(&b, 4096, None), Ok(()));
        // The stored CRC is CRC-32C over the block without its own field.
        let mut copy = b.clone();
        copy.drain(24..28);
        assert_eq!(&b[24..28], &crc32c::crc32c(&copy).to_le_bytes());
    }

    #[test]
    fn each_kind_of_damage_is_named() {
        let mut b = vec![0u8; 4096];
        fill_block(&mut b, 8192, 3);
        assert!(matches!(
            check_block(&b, 4096, None),
            Err(VerifyError::BadOffset { found: 8192, .. })
        ));
        assert!(matches!(
            check_block(&b, 8192, Some(4)),
            Err(VerifyError::StaleGeneration {
                expected: 4,
                found: 3,
                ..
            })
        ));
        assert!(matches!(
            check_block(&b[..2048], 8192, None),
            Err(VerifyError::BadLength { .. })
        ));
        assert!(matches!(
            check_block(&b[..16], 8192, None),
            Err(VerifyError::TooShort { .. })
        ));
        let mut c = b.clone();
        c[4095] ^= 1;
        let e = check_block(&c, 8192, None).unwrap_err();
        assert!(matches!(e, VerifyError::BadCrc { .. }));
        assert_eq!(e.offset(), 8192);
        assert!(e.to_string().contains("offset 8192"), "{e}");
        assert!(matches!(
            check_block(&[0u8; 512], 0, None),
            Err(VerifyError::BadMagic { found: 0, .. })
        ));
    }

    #[test]
    fn pattern_differs_per_offset_and_generation() {
        let mut a = vec![0u8; 256];
        let mut b = vec![0u8; 256];
        fill_block(&mut a, 0, 1);
        fill_block(&mut b, 0, 2);
        assert_ne!(a[32..], b[32..]);
        fill_block(&mut b, 256, 1);
        assert_ne!(a[32..], b[32..]);
    }

    #[test]
    fn tracker_verifies_only_known_content() {
        let mut t = VerifyTracker::new();
        assert_eq!(t.read_started(0), None, "never written");
        let g = t.write_started(0);
        assert_eq!(t.read_started(0), None, "write in flight");
        t.write_finished(0, g, true);
        let check = t.read_started(0).unwrap();
        let mut b = vec![0u8; 512];
        fill_block(&mut b, 0, g);
        assert_eq!(t.read_finished(&b, 0, check), Ok(true));
        assert_eq!(t.verified, 1);

        // A write submitted after the read: the read is not checked.
        let check = t.read_started(0).unwrap();
        let g2 = t.write_started(0);
        assert_eq!(t.read_finished(&[0u8; 512], 0, check), Ok(false));
        t.write_finished(0, g2, true);

        // A lost write: old data comes back.
        let check = t.read_started(0).unwrap();
        assert!(matches!(
            t.read_finished(&b, 0, check),
            Err(VerifyError::StaleGeneration { .. })
        ));
        assert_eq!(t.mismatches, 1);

        // Overlapping writes leave the content unknown.
        let g3 = t.write_started(0);
        let g4 = t.write_started(0);
        t.write_finished(0, g3, true);
        t.write_finished(0, g4, true);
        assert_eq!(t.read_started(0), None);
    }
}
