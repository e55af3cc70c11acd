//! `--verify`: self-checking blocks, in the spirit of fio's verify header.
//!
//! With `crc32c`, `md5` or `sha256`, every written block starts with a 32-byte
//! [`VerifyHeader`] (magic, block length, byte offset, write generation, CRC-32C, the
//! mode) followed by a pattern derived from (offset, generation). The CRC-32C
//! (Castagnoli, as in NVMe's 32b Guard PI) covers the whole block except the CRC field
//! itself; `md5` and `sha256` put their digest right after the header instead, over
//! the rest of the block. With `pattern` the block is `--verify_pattern` repeated, and
//! nothing else (fio's `verify=pattern`: it finds corruption, not a misplaced block).
//! A read is checked only when the block's content is known: [`VerifyTracker`]
//! remembers the generation and mode of the last completed write of each block, and
//! skips reads that raced with a write; a trim makes the content unknown.

use std::collections::HashMap;

use md5::Md5;
use sha2::{Digest, Sha256};
use zerocopy::byteorder::little_endian::{U32, U64};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout, Unaligned};

use super::options::VerifyMode;
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
    /// CRC-32C of the block with this field left out (`crc32c` mode; 0 otherwise).
    pub crc32c: U32,
    /// The mode: 0 crc32c, 1 md5, 2 sha256 ([`header_kind`]).
    pub kind: u8,
    /// Zero.
    pub reserved: [u8; 3],
}

/// The [`VerifyHeader::kind`] of a header mode; `None` for modes without a header.
pub fn header_kind(mode: VerifyMode) -> Option<u8> {
    match mode {
        VerifyMode::Crc32c => Some(0),
        VerifyMode::Md5 => Some(1),
        VerifyMode::Sha256 => Some(2),
        VerifyMode::None | VerifyMode::Pattern => None,
    }
}

/// Bytes of the digest that follows the header in `mode`.
fn digest_len(kind: u8) -> usize {
    match kind {
        1 => 16,
        2 => 32,
        _ => 0,
    }
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
    /// Header and CRC agree but the payload is not the pattern for (offset, generation),
    /// or (`pattern` mode) a byte is not the pattern's.
    #[error("verify: pattern mismatch at offset {offset}, first bad byte {first_bad}")]
    BadPattern {
        /// Byte offset.
        offset: u64,
        /// Index in the block of the first differing byte.
        first_bad: usize,
    },
    /// The MD5 or SHA-256 digest does not match the data.
    #[error("verify: bad {mode} digest at offset {offset}, length {len}")]
    BadDigest {
        /// Byte offset.
        offset: u64,
        /// Block length.
        len: usize,
        /// `md5` or `sha256`.
        mode: &'static str,
    },
    /// The header says another mode wrote the block.
    #[error("verify: header of mode {found} at offset {offset}, wanted {wanted}")]
    WrongMode {
        /// Byte offset.
        offset: u64,
        /// The mode the last write used.
        wanted: &'static str,
        /// The header's kind byte.
        found: u8,
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
            | VerifyError::BadPattern { offset, .. }
            | VerifyError::BadDigest { offset, .. }
            | VerifyError::WrongMode { offset, .. } => offset,
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

fn digest(kind: u8, block: &[u8]) -> Vec<u8> {
    let n = digest_len(kind);
    let (head, rest) = block.split_at(VERIFY_HEADER_LEN);
    let payload = &rest[n.min(rest.len())..];
    match kind {
        1 => {
            let mut h = Md5::new();
            h.update(head);
            h.update(payload);
            h.finalize().to_vec()
        }
        _ => {
            let mut h = Sha256::new();
            h.update(head);
            h.update(payload);
            h.finalize().to_vec()
        }
    }
}

/// Fills `block` (a whole block) for a write at `offset` of `generation` in `mode`:
/// the header and the (offset, generation) pattern, or `pattern` repeated in
/// `VerifyMode::Pattern`. Blocks too short for the mode's header are left unchanged.
pub fn fill_block_mode(
    block: &mut [u8],
    offset: u64,
    generation: u64,
    mode: VerifyMode,
    pattern: &[u8],
) {
    let Some(kind) = header_kind(mode) else {
        if mode == VerifyMode::Pattern && !pattern.is_empty() {
            for (b, p) in block.iter_mut().zip(pattern.iter().cycle()) {
                *b = *p;
            }
        }
        return;
    };
    let n = digest_len(kind);
    let Ok(len) = u32::try_from(block.len()) else {
        return;
    };
    if block.len() < VERIFY_HEADER_LEN + n {
        return;
    }
    fill_pattern(&mut block[VERIFY_HEADER_LEN + n..], offset, generation);
    let header = VerifyHeader {
        magic: VERIFY_MAGIC.into(),
        len: len.into(),
        offset: offset.into(),
        generation: generation.into(),
        crc32c: 0.into(),
        kind,
        reserved: [0; 3],
    };
    block[..VERIFY_HEADER_LEN].copy_from_slice(header.as_bytes());
    if kind == 0 {
        let crc = block_crc(block);
        block[CRC_FIELD].copy_from_slice(&crc.to_le_bytes());
    } else {
        let d = digest(kind, block);
        block[VERIFY_HEADER_LEN..VERIFY_HEADER_LEN + n].copy_from_slice(&d);
    }
}

/// Fills `block` for `--verify crc32c` (see [`fill_block_mode`]).
pub fn fill_block(block: &mut [u8], offset: u64, generation: u64) {
    fill_block_mode(block, offset, generation, VerifyMode::Crc32c, &[]);
}

/// Checks a block read at `offset`, written in `mode`, against the header rules and,
/// when given, the generation of the last write that completed there
/// (`VerifyMode::Pattern`: that every byte is `pattern`'s).
///
/// Errors: see [`VerifyError`].
pub fn check_block_mode(
    block: &[u8],
    offset: u64,
    expected_generation: Option<u64>,
    mode: VerifyMode,
    pattern: &[u8],
) -> Result<(), VerifyError> {
    let len = block.len();
    let Some(kind) = header_kind(mode) else {
        if mode == VerifyMode::Pattern && !pattern.is_empty() {
            if let Some(i) = block
                .iter()
                .zip(pattern.iter().cycle())
                .position(|(b, p)| b != p)
            {
                return Err(VerifyError::BadPattern {
                    offset,
                    first_bad: i,
                });
            }
        }
        return Ok(());
    };
    let Ok((header, _)) = VerifyHeader::ref_from_prefix(block) else {
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
    if header.kind != kind {
        return Err(VerifyError::WrongMode {
            offset,
            wanted: mode.fio_name(),
            found: header.kind,
        });
    }
    let n = digest_len(kind);
    if len < VERIFY_HEADER_LEN + n {
        return Err(VerifyError::TooShort { offset, len });
    }
    if kind == 0 {
        let computed = block_crc(block);
        if header.crc32c.get() != computed {
            return Err(VerifyError::BadCrc {
                offset,
                len,
                stored: header.crc32c.get(),
                computed,
            });
        }
    } else if digest(kind, block)[..] != block[VERIFY_HEADER_LEN..VERIFY_HEADER_LEN + n] {
        return Err(VerifyError::BadDigest {
            offset,
            len,
            mode: mode.fio_name(),
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
    let payload = &block[VERIFY_HEADER_LEN + n..];
    if let Some(i) = first_pattern_mismatch(payload, offset, generation) {
        return Err(VerifyError::BadPattern {
            offset,
            first_bad: VERIFY_HEADER_LEN + n + i,
        });
    }
    Ok(())
}

/// Checks a `--verify crc32c` block (see [`check_block_mode`]).
///
/// Errors: see [`VerifyError`].
pub fn check_block(
    block: &[u8],
    offset: u64,
    expected_generation: Option<u64>,
) -> Result<(), VerifyError> {
    check_block_mode(block, offset, expected_generation, VerifyMode::Crc32c, &[])
}

#[derive(Debug, Clone, Copy, Default)]
struct BlockState {
    /// Generation of the data known to be on the medium; 0 = unknown.
    completed: u64,
    /// The mode the data of `completed` was written in.
    mode: Option<VerifyMode>,
    /// The generation last read back intact.
    checked: u64,
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
    mode: VerifyMode,
}

/// Run-wide record of which blocks hold which write generation, keyed by byte
/// offset (shared by all jobs: the job threads lock it).
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

    /// Records the outcome of a `--verify crc32c` write begun with
    /// [`Self::write_started`], or that it was never submitted (`ok = false`).
    pub fn write_finished(&mut self, offset: u64, generation: u64, ok: bool) {
        self.write_finished_mode(offset, generation, ok, VerifyMode::Crc32c);
    }

    /// As [`Self::write_finished`] for a write filled in `mode`.
    pub fn write_finished_mode(
        &mut self,
        offset: u64,
        generation: u64,
        ok: bool,
        mode: VerifyMode,
    ) {
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
            s.mode = Some(mode);
            s.ambiguous = false;
        }
    }

    /// Records a trim (deallocate) of the block at `offset` about to be submitted: its
    /// content is unknown from now on; finish it with [`Self::trim_finished`].
    pub fn trim_started(&mut self, offset: u64) {
        self.generation += 1;
        let g = self.generation;
        let s = self.blocks.entry(offset).or_default();
        s.in_flight += 1;
        s.last_submitted = g;
        s.ambiguous = true;
    }

    /// A trim begun with [`Self::trim_started`] finished (either way).
    pub fn trim_finished(&mut self, offset: u64) {
        if let Some(s) = self.blocks.get_mut(&offset) {
            s.in_flight = s.in_flight.saturating_sub(1);
            s.ambiguous = true;
            if s.in_flight == 0 {
                s.completed = 0;
                s.ambiguous = false;
            }
        }
    }

    /// Blocks whose last completed write was never read back intact (a read-back that
    /// did not reach them).
    pub fn unchecked(&self) -> u64 {
        self.blocks
            .values()
            .filter(|s| s.completed != 0 && s.checked != s.completed)
            .count() as u64
    }

    /// The offsets of the blocks whose content is known, ascending (the verify phase's
    /// read-back list of a region).
    pub fn known_in(&self, start: u64, end: u64) -> Vec<u64> {
        let mut v: Vec<u64> = self
            .blocks
            .iter()
            .filter(|(&o, s)| o >= start && o < end && s.completed != 0 && s.in_flight == 0)
            .map(|(&o, _)| o)
            .collect();
        v.sort_unstable();
        v
    }

    /// Whether a read of `offset` submitted now can be verified, and against what.
    /// `None`: never written in this run, content unknown, or a write is in flight.
    pub fn read_started(&self, offset: u64) -> Option<ReadCheck> {
        let s = self.blocks.get(&offset)?;
        (s.completed != 0 && s.in_flight == 0).then_some(ReadCheck {
            expected: s.completed,
            generation_at_submit: self.generation,
            mode: s.mode.unwrap_or(VerifyMode::Crc32c),
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
        self.read_finished_with(block, offset, check, &[])
    }

    /// As [`Self::read_finished`], with the job's `--verify_pattern` for blocks
    /// written in `pattern` mode.
    ///
    /// Errors: the block's [`VerifyError`] (counted as a mismatch).
    pub fn read_finished_with(
        &mut self,
        block: &[u8],
        offset: u64,
        check: ReadCheck,
        pattern: &[u8],
    ) -> Result<bool, VerifyError> {
        let raced = match self.blocks.get(&offset) {
            Some(s) => s.last_submitted > check.generation_at_submit,
            None => true,
        };
        if raced {
            return Ok(false);
        }
        match check_block_mode(block, offset, Some(check.expected), check.mode, pattern) {
            Ok(()) => {
                self.verified += 1;
                if let Some(s) = self.blocks.get_mut(&offset) {
                    s.checked = check.expected;
                }
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
    fn md5_sha256_and_pattern_modes_check_and_catch_damage() {
        for mode in [VerifyMode::Md5, VerifyMode::Sha256] {
            let mut b = vec![0u8; 4096];
            fill_block_mode(&mut b, 4096, 9, mode, &[]);
            assert_eq!(check_block_mode(&b, 4096, Some(9), mode, &[]), Ok(()));
            assert_eq!(b[28], header_kind(mode).unwrap());
            let mut c = b.clone();
            c[4000] ^= 0x10;
            assert!(matches!(
                check_block_mode(&c, 4096, Some(9), mode, &[]),
                Err(VerifyError::BadDigest { .. })
            ));
            assert!(matches!(
                check_block_mode(&b, 4096, Some(9), VerifyMode::Crc32c, &[]),
                Err(VerifyError::WrongMode { .. })
            ));
        }
        let pat = [0xde, 0xad, 0xbe, 0xef];
        let mut p = vec![0u8; 512];
        fill_block_mode(&mut p, 0, 1, VerifyMode::Pattern, &pat);
        assert_eq!(&p[..8], &[0xde, 0xad, 0xbe, 0xef, 0xde, 0xad, 0xbe, 0xef]);
        assert_eq!(
            check_block_mode(&p, 0, Some(1), VerifyMode::Pattern, &pat),
            Ok(())
        );
        p[100] = 0;
        assert_eq!(
            check_block_mode(&p, 0, Some(1), VerifyMode::Pattern, &pat),
            Err(VerifyError::BadPattern {
                offset: 0,
                first_bad: 100
            })
        );
    }

    #[test]
    fn a_trim_makes_the_content_unknown() {
        let mut t = VerifyTracker::new();
        let g = t.write_started(0);
        t.write_finished(0, g, true);
        assert!(t.read_started(0).is_some());
        assert_eq!(t.known_in(0, 4096), vec![0]);
        t.trim_started(0);
        assert!(t.read_started(0).is_none());
        t.trim_finished(0);
        assert!(t.read_started(0).is_none());
        assert!(t.known_in(0, 4096).is_empty());
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
