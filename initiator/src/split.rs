//! Splitting one block I/O into commands a queue can carry, written once for the async
//! [`crate::Host`] and the benchmark's `QueueEngine` (`nvmf-bench`).
//!
//! One Read or Write moves at most (NVM Command Set 1.x §3.3.4, §3.3.6; NVMe Base 2.x
//! §5.17.2.1 MDTS; NVMe over Fabrics 1.1 §2.3.1 keyed SGL data block):
//! - 65536 logical blocks (NLB is 16 bits, 0's based);
//! - the controller's Maximum Data Transfer Size, which the host already applied to
//!   its queues' per-command buffers (`max_transfer_bytes`);
//! - 2^24 - 1 bytes, the longest keyed SGL data block (a 24-bit length): one
//!   descriptor per command (MSDBD 1, as Linux nvmet advertises).
//!
//! Every piece is a whole number of blocks, and all but the last have the same size.

/// Most logical blocks one Read, Write or Write Zeroes moves (NLB is 16 bits, 0's
/// based).
pub const MAX_NLB: u64 = 65536;

/// The longest command in bytes, for `block_size`-byte blocks and a queue that moves
/// at most `max_transfer_bytes` per command: the smallest of the three limits in the
/// module docs, rounded down to whole blocks, and at least one block.
///
/// `block_size` must be non-zero (a namespace's LBA data size).
pub fn max_command_bytes(block_size: u32, max_transfer_bytes: usize) -> usize {
    let bs = block_size.max(1) as usize;
    let sgl = nvme::sgl::KEYED_SGL_MAX_LEN as usize;
    let max = max_transfer_bytes.min(sgl).min(MAX_NLB as usize * bs);
    (max / bs).max(1) * bs
}

/// One command's share of a split I/O.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Piece {
    /// First logical block of the piece.
    pub slba: u64,
    /// Logical blocks in the piece (1..=65536).
    pub nlb: u32,
    /// Where the piece's data starts in the whole I/O's buffer, in bytes.
    pub byte_offset: usize,
    /// The piece's data length in bytes (`nlb * block_size`).
    pub len: usize,
}

impl Piece {
    /// NLB as an SQE carries it: 0's based.
    pub fn nlb_0based(&self) -> u16 {
        // `split` never makes a piece over MAX_NLB blocks.
        (self.nlb - 1) as u16
    }
}

/// The pieces of an I/O of `len_bytes` bytes from block `slba`, each at most
/// `max_command_bytes` bytes (as [`max_command_bytes`] returns: a non-zero multiple
/// of `block_size`, at most 65536 blocks). `len_bytes` must be a multiple of
/// `block_size`; a trailing partial block is dropped. No pieces when `len_bytes` is 0.
pub fn split(
    slba: u64,
    len_bytes: usize,
    block_size: u32,
    max_command_bytes: usize,
) -> impl Iterator<Item = Piece> {
    let bs = block_size.max(1) as usize;
    let chunk = (max_command_bytes / bs).clamp(1, MAX_NLB as usize) * bs;
    let whole = len_bytes - len_bytes % bs;
    (0..whole).step_by(chunk).map(move |byte_offset| {
        let len = chunk.min(whole - byte_offset);
        Piece {
            slba: slba + (byte_offset / bs) as u64,
            nlb: (len / bs) as u32,
            byte_offset,
            len,
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn command_size_takes_the_smallest_limit() {
        // MDTS 1 MiB.
        assert_eq!(max_command_bytes(512, 1 << 20), 1 << 20);
        // No MDTS: the 24-bit SGL length, rounded down to blocks.
        assert_eq!(max_command_bytes(4096, usize::MAX), (1 << 24) - 4096);
        assert_eq!(max_command_bytes(512, 1 << 24), (1 << 24) - 512);
        // 65536 blocks of 512 bytes = 32 MiB, over the SGL limit; of 128 bytes it binds.
        assert_eq!(max_command_bytes(128, usize::MAX), 65536 * 128);
        // A transfer limit under one block still moves one block.
        assert_eq!(max_command_bytes(4096, 1000), 4096);
        // A limit that is not a whole number of blocks rounds down.
        assert_eq!(max_command_bytes(4096, 10_000), 8192);
    }

    #[test]
    fn pieces_cover_the_io_in_order() {
        let bs = 512u32;
        let max = 1 << 20;
        let len = (1 << 20) * 4 + 512;
        let pieces: Vec<Piece> = split(100, len, bs, max).collect();
        assert_eq!(pieces.len(), 5);
        assert_eq!(
            pieces[0],
            Piece {
                slba: 100,
                nlb: 2048,
                byte_offset: 0,
                len: 1 << 20
            }
        );
        assert_eq!(pieces[3].slba, 100 + 3 * 2048);
        assert_eq!(
            pieces[4],
            Piece {
                slba: 100 + 4 * 2048,
                nlb: 1,
                byte_offset: 4 << 20,
                len: 512
            }
        );
        assert_eq!(pieces[4].nlb_0based(), 0);
        assert_eq!(pieces.iter().map(|p| p.len).sum::<usize>(), len);
        // Fits in one command: one piece.
        assert_eq!(split(7, 4096, 4096, max).count(), 1);
        assert_eq!(split(7, 0, 4096, max).count(), 0);
        // 65536 blocks exactly is one piece, NLB field 0xFFFF.
        let p: Vec<Piece> = split(0, 65536 * 128, 128, usize::MAX).collect();
        assert_eq!((p.len(), p[0].nlb_0based()), (1, 0xFFFF));
    }
}
