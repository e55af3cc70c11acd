//! Data buffer pool of a poll group: a buddy allocator over one pre-registered region.
//!
//! The region is the poll group's data slab: it is registered once as an RDMA memory
//! region (so the transport can RDMA WRITE from it and RDMA READ into it) and once as an
//! io_uring fixed buffer (so the file namespace reads into it and writes from it). A
//! 4 KiB host read therefore moves file -> slab -> wire with no intermediate copy
//! (DESIGN principle 3). The pool only hands out offsets into that region; it never
//! touches the bytes, and it keeps all its bookkeeping in side tables allocated at
//! construction, so `alloc` and `free` allocate nothing and run in O(log n) (one step
//! per block order).
//!
//! The pool is single-threaded: one poll group owns it (DESIGN principle 2).

use std::fmt;
use std::io;
use std::ptr::NonNull;

/// Marker in the per-block state table: this index is not the head of any block.
const NOT_HEAD: u8 = 0x7F;
/// Flag in the per-block state table: the block starting here is free.
const FREE: u8 = 0x80;
/// Flag in the per-block state table: the block starting here is handed out.
const ALLOCATED: u8 = 0x40;
/// End of a free list.
const NIL: u32 = u32::MAX;
/// Most block orders a pool supports (`max_block / min_block <= 2^MAX_ORDERS-1`).
const MAX_ORDERS: usize = 32;

/// A block handed out by [`BufferPool::alloc`]: `len` bytes at byte `offset` from the
/// start of the pool's region.
///
/// `len` is the block's size, a power of two between the pool's `min_block` and
/// `max_block`, at least the length asked for; `offset` is a multiple of `len`. A chunk
/// is a plain `Copy` value; [`BufferPool::free`] detects a second free of the same block
/// (or a chunk the pool never handed out) and refuses it without changing its state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Chunk {
    /// Byte offset of the block from the start of the region.
    pub offset: usize,
    /// Size of the block in bytes (a power of two).
    pub len: usize,
}

/// Why [`BufferPool::new`] refused its arguments.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PoolError {
    /// `min_block` or `max_block` is not a power of two, or `min_block > max_block`.
    #[error("buffer pool: block sizes must be powers of two with min_block <= max_block (min_block {min_block}, max_block {max_block})")]
    BadBlockSizes {
        /// The smallest block size asked for, in bytes.
        min_block: usize,
        /// The largest block size asked for, in bytes.
        max_block: usize,
    },
    /// The region is smaller than one `min_block`.
    #[error("buffer pool: region of {len} bytes holds no block of {min_block} bytes")]
    RegionTooSmall {
        /// Region length in bytes.
        len: usize,
        /// The smallest block size, in bytes.
        min_block: usize,
    },
    /// The region holds more than `u32::MAX - 1` minimum blocks.
    #[error("buffer pool: region of {len} bytes has too many blocks of {min_block} bytes")]
    RegionTooLarge {
        /// Region length in bytes.
        len: usize,
        /// The smallest block size, in bytes.
        min_block: usize,
    },
    /// The base pointer is null.
    #[error("buffer pool: null region base")]
    NullBase,
}

/// Why [`BufferPool::free`] refused a chunk: it was not handed out by this pool, or it
/// was already freed. Either is a bug in the caller; the pool's state is unchanged.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "buffer pool: chunk at offset {offset} of {len} bytes is not an allocated block of this pool"
)]
pub struct InvalidFree {
    /// The chunk's offset.
    pub offset: usize,
    /// The chunk's length.
    pub len: usize,
}

/// Usage counters of a [`BufferPool`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PoolStats {
    /// Bytes of blocks handed out now (block sizes, not the lengths asked for).
    pub in_use_bytes: usize,
    /// Highest `in_use_bytes` seen.
    pub peak_in_use_bytes: usize,
    /// Number of blocks handed out now.
    pub in_use_chunks: usize,
    /// Successful allocations since construction.
    pub allocs: u64,
    /// Frees since construction.
    pub frees: u64,
    /// Allocations refused (no free block large enough, or a bad length).
    pub failed_allocs: u64,
}

/// Buddy allocator over one raw memory region (the poll group's registered data slab).
///
/// Blocks are powers of two from `min_block` to `max_block` bytes. The region is cut
/// into `max_block` blocks, and a tail shorter than `max_block` into smaller
/// power-of-two blocks (a tail shorter than `min_block` is unused). Each block is
/// aligned, relative to the region's base, to its own size, so with a base aligned to
/// `min_block` (4 KiB) every chunk is suitable for O_DIRECT.
pub struct BufferPool {
    base: NonNull<u8>,
    len: usize,
    /// Bytes the blocks cover (`len` rounded down to a multiple of `min_block`).
    capacity: usize,
    min_shift: u32,
    max_order: u32,
    /// Per minimum block: NOT_HEAD, or FREE|order, or ALLOCATED|order at a block head.
    state: Box<[u8]>,
    /// Free-list links per minimum block (valid at the head of a free block).
    next: Box<[u32]>,
    prev: Box<[u32]>,
    /// Free-list head per order.
    heads: [u32; MAX_ORDERS],
    /// Bit `k` set when the free list of order `k` is not empty.
    nonempty: u32,
    stats: PoolStats,
}

impl fmt::Debug for BufferPool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BufferPool")
            .field("base", &self.base)
            .field("len", &self.len)
            .field("min_block", &self.min_block())
            .field("max_block", &self.max_block())
            .field("stats", &self.stats)
            .finish()
    }
}

impl BufferPool {
    /// Builds a pool over `len` bytes at `base`, handing out blocks of `min_block`
    /// (typically 4096) to `max_block` (typically 1 MiB, the MDTS) bytes.
    ///
    /// All bookkeeping is allocated here (about 9 bytes per `min_block` of region);
    /// `alloc` and `free` allocate nothing afterwards.
    ///
    /// # Errors
    /// [`PoolError`] when the block sizes are not powers of two with
    /// `min_block <= max_block`, when `base` is null, or when the region holds no block
    /// or more than `u32::MAX - 1` minimum blocks.
    ///
    /// # Safety
    /// `base..base+len` must be one allocation that stays valid (mapped, not freed) for
    /// the pool's lifetime and for as long as any pointer from [`BufferPool::ptr`] is
    /// used. The pool never reads or writes it.
    pub unsafe fn new(
        base: *mut u8,
        len: usize,
        min_block: usize,
        max_block: usize,
    ) -> Result<BufferPool, PoolError> {
        if !min_block.is_power_of_two() || !max_block.is_power_of_two() || min_block > max_block {
            return Err(PoolError::BadBlockSizes {
                min_block,
                max_block,
            });
        }
        let base = NonNull::new(base).ok_or(PoolError::NullBase)?;
        let min_shift = min_block.trailing_zeros();
        let max_order = max_block.trailing_zeros() - min_shift;
        if max_order as usize >= MAX_ORDERS {
            return Err(PoolError::BadBlockSizes {
                min_block,
                max_block,
            });
        }
        let nblocks = len >> min_shift;
        if nblocks == 0 {
            return Err(PoolError::RegionTooSmall { len, min_block });
        }
        if nblocks >= NIL as usize {
            return Err(PoolError::RegionTooLarge { len, min_block });
        }
        let mut pool = BufferPool {
            base,
            len,
            capacity: nblocks << min_shift,
            min_shift,
            max_order,
            state: vec![NOT_HEAD; nblocks].into_boxed_slice(),
            next: vec![NIL; nblocks].into_boxed_slice(),
            prev: vec![NIL; nblocks].into_boxed_slice(),
            heads: [NIL; MAX_ORDERS],
            nonempty: 0,
            stats: PoolStats::default(),
        };
        // Carve the region into the largest aligned blocks: max_block blocks, then the
        // tail in decreasing powers of two. Each piece is aligned to its own size.
        let mut idx = 0usize;
        while idx < nblocks {
            let remaining = nblocks - idx;
            let order = (usize::BITS - 1 - remaining.leading_zeros()).min(max_order);
            pool.push_free(idx as u32, order);
            idx += 1usize << order;
        }
        Ok(pool)
    }

    /// Hands out a block of at least `len` bytes, or `None` when `len` is 0, larger
    /// than `max_block`, or no free block is large enough (the caller keeps its request
    /// queued until a `free`).
    pub fn alloc(&mut self, len: usize) -> Option<Chunk> {
        let Some(want) = self.order_for(len) else {
            self.stats.failed_allocs += 1;
            return None;
        };
        // Smallest non-empty free list of order >= want.
        let candidates = self.nonempty & !((1u32 << want) - 1);
        if candidates == 0 {
            self.stats.failed_allocs += 1;
            return None;
        }
        let mut order = candidates.trailing_zeros();
        let idx = self.heads[order as usize];
        self.remove_free(idx, order);
        // Split down to the wanted order, freeing the upper halves.
        while order > want {
            order -= 1;
            self.push_free(idx + (1u32 << order), order);
        }
        self.state[idx as usize] = ALLOCATED | order as u8;
        let chunk = Chunk {
            offset: (idx as usize) << self.min_shift,
            len: 1usize << (order + self.min_shift),
        };
        self.stats.in_use_bytes += chunk.len;
        self.stats.in_use_chunks += 1;
        self.stats.peak_in_use_bytes = self.stats.peak_in_use_bytes.max(self.stats.in_use_bytes);
        self.stats.allocs += 1;
        Some(chunk)
    }

    /// Gives a block back, merging it with its free buddies.
    ///
    /// # Errors
    /// [`InvalidFree`] when `chunk` is not a block this pool handed out and has not
    /// freed since (a double free, or a made-up chunk); the pool is then unchanged.
    pub fn free(&mut self, chunk: Chunk) -> Result<(), InvalidFree> {
        let invalid = InvalidFree {
            offset: chunk.offset,
            len: chunk.len,
        };
        let min_block = 1usize << self.min_shift;
        if !chunk.len.is_power_of_two()
            || chunk.len < min_block
            || chunk.len > self.max_block()
            || !chunk.offset.is_multiple_of(chunk.len)
            || chunk.offset >= self.capacity
        {
            return Err(invalid);
        }
        let mut idx = (chunk.offset >> self.min_shift) as u32;
        let mut order = chunk.len.trailing_zeros() - self.min_shift;
        if self.state[idx as usize] != ALLOCATED | order as u8 {
            return Err(invalid);
        }
        self.state[idx as usize] = NOT_HEAD;
        self.stats.in_use_bytes -= chunk.len;
        self.stats.in_use_chunks -= 1;
        self.stats.frees += 1;
        while order < self.max_order {
            let buddy = idx ^ (1u32 << order);
            if (buddy as usize) >= self.state.len()
                || self.state[buddy as usize] != FREE | order as u8
            {
                break;
            }
            self.remove_free(buddy, order);
            self.state[buddy as usize] = NOT_HEAD;
            idx &= !(1u32 << order);
            order += 1;
        }
        self.push_free(idx, order);
        Ok(())
    }

    /// Address of `chunk`'s first byte: the region's base plus `chunk.offset`.
    ///
    /// The pointer is valid for `chunk.len` bytes under the contract of
    /// [`BufferPool::new`]. A chunk from another pool gives a pointer outside this
    /// region's blocks (wrapping arithmetic; nothing is dereferenced here).
    pub fn ptr(&self, chunk: &Chunk) -> *mut u8 {
        self.base.as_ptr().wrapping_add(chunk.offset)
    }

    /// The whole region as `(base, len)`, the shape
    /// [`Ring::register_buffers`](crate::uring::Ring::register_buffers) and an MR
    /// registration take.
    pub fn region(&self) -> (*mut u8, usize) {
        (self.base.as_ptr(), self.len)
    }

    /// Bytes the blocks cover: the region length rounded down to `min_block`.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Smallest block size in bytes.
    pub fn min_block(&self) -> usize {
        1usize << self.min_shift
    }

    /// Largest block size in bytes.
    pub fn max_block(&self) -> usize {
        1usize << (self.max_order + self.min_shift)
    }

    /// Bytes of blocks handed out now.
    pub fn in_use_bytes(&self) -> usize {
        self.stats.in_use_bytes
    }

    /// Bytes free now (possibly fragmented).
    pub fn free_bytes(&self) -> usize {
        self.capacity - self.stats.in_use_bytes
    }

    /// Size in bytes of the largest block `alloc` could hand out now (0 if none).
    pub fn largest_free_block(&self) -> usize {
        if self.nonempty == 0 {
            0
        } else {
            let order = u32::BITS - 1 - self.nonempty.leading_zeros();
            1usize << (order + self.min_shift)
        }
    }

    /// Usage counters.
    pub fn stats(&self) -> PoolStats {
        self.stats
    }

    /// Block order (0 = `min_block`) for a request of `len` bytes.
    fn order_for(&self, len: usize) -> Option<u32> {
        if len == 0 || len > self.max_block() {
            return None;
        }
        let blocks = (len + (1usize << self.min_shift) - 1) >> self.min_shift;
        Some(blocks.next_power_of_two().trailing_zeros())
    }

    fn push_free(&mut self, idx: u32, order: u32) {
        let head = self.heads[order as usize];
        self.next[idx as usize] = head;
        self.prev[idx as usize] = NIL;
        if head != NIL {
            self.prev[head as usize] = idx;
        }
        self.heads[order as usize] = idx;
        self.state[idx as usize] = FREE | order as u8;
        self.nonempty |= 1 << order;
    }

    fn remove_free(&mut self, idx: u32, order: u32) {
        let (n, p) = (self.next[idx as usize], self.prev[idx as usize]);
        if p == NIL {
            self.heads[order as usize] = n;
        } else {
            self.next[p as usize] = n;
        }
        if n != NIL {
            self.prev[n as usize] = p;
        }
        if self.heads[order as usize] == NIL {
            self.nonempty &= !(1 << order);
        }
        self.state[idx as usize] = NOT_HEAD;
    }

    #[cfg(test)]
    fn free_blocks_of_order(&self, order: u32) -> usize {
        let mut n = 0;
        let mut idx = self.heads[order as usize];
        while idx != NIL {
            assert_eq!(self.state[idx as usize], FREE | order as u8);
            n += 1;
            idx = self.next[idx as usize];
        }
        n
    }
}

/// An anonymous, page-aligned memory mapping to back a [`BufferPool`] and its RDMA and
/// io_uring registrations: the poll group's data slab.
///
/// The mapping is private and zero-filled; it is unmapped on drop, so it must outlive
/// the pool, the memory region and the ring registration made over it.
#[derive(Debug)]
pub struct Slab {
    ptr: NonNull<u8>,
    len: usize,
}

impl Slab {
    /// Maps `len` bytes (rounded up to the page size by the kernel), pre-faulted
    /// (MAP_POPULATE) so the first I/O does not fault.
    ///
    /// # Errors
    /// The `mmap(2)` error, or `InvalidInput` for `len == 0`.
    pub fn new(len: usize) -> io::Result<Slab> {
        Self::map(len, libc::MAP_POPULATE)
    }

    /// Maps `len` bytes like [`Slab::new`], but faults pages in on first touch (for
    /// simulations that touch little of a large slab).
    ///
    /// # Errors
    /// As [`Slab::new`].
    pub fn lazy(len: usize) -> io::Result<Slab> {
        Self::map(len, 0)
    }

    fn map(len: usize, extra_flags: libc::c_int) -> io::Result<Slab> {
        if len == 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "slab of 0 bytes",
            ));
        }
        // SAFETY: an anonymous private mapping with no address hint; the result is
        // checked against MAP_FAILED.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | extra_flags,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let ptr =
            NonNull::new(p.cast::<u8>()).ok_or_else(|| io::Error::other("mmap returned null"))?;
        Ok(Slab { ptr, len })
    }

    /// First byte of the mapping (page aligned).
    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    /// Length in bytes as asked for.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Always false: a slab has at least one byte.
    pub fn is_empty(&self) -> bool {
        false
    }
}

impl Drop for Slab {
    fn drop(&mut self) {
        // SAFETY: ptr/len are exactly what mmap returned and were asked for.
        unsafe {
            libc::munmap(self.ptr.as_ptr().cast(), self.len);
        }
    }
}

// SAFETY: the slab is plain memory owned by this value; moving it to another thread
// moves the ownership. Concurrent access through raw pointers is the users' concern.
unsafe impl Send for Slab {}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};

    const KIB: usize = 1024;
    const MIB: usize = 1024 * 1024;

    fn pool_over(slab: &Slab, min: usize, max: usize) -> BufferPool {
        // SAFETY: the slab outlives the pool in each test.
        unsafe { BufferPool::new(slab.as_ptr(), slab.len(), min, max) }.expect("pool")
    }

    #[test]
    fn rejects_bad_geometry() {
        let slab = Slab::new(64 * KIB).unwrap();
        let p = slab.as_ptr();
        unsafe {
            assert!(matches!(
                BufferPool::new(p, 64 * KIB, 3000, MIB),
                Err(PoolError::BadBlockSizes { .. })
            ));
            assert!(matches!(
                BufferPool::new(p, 64 * KIB, 8 * KIB, 4 * KIB),
                Err(PoolError::BadBlockSizes { .. })
            ));
            assert!(matches!(
                BufferPool::new(p, 2 * KIB, 4 * KIB, MIB),
                Err(PoolError::RegionTooSmall { .. })
            ));
            assert_eq!(
                BufferPool::new(std::ptr::null_mut(), 64 * KIB, 4 * KIB, MIB).unwrap_err(),
                PoolError::NullBase
            );
        }
    }

    #[test]
    fn sizes_round_up_to_powers_of_two() {
        let slab = Slab::new(4 * MIB).unwrap();
        let mut pool = pool_over(&slab, 4 * KIB, MIB);
        assert_eq!(pool.alloc(0), None);
        assert_eq!(pool.alloc(MIB + 1), None);
        let a = pool.alloc(1).unwrap();
        assert_eq!(a.len, 4 * KIB);
        let b = pool.alloc(4 * KIB + 1).unwrap();
        assert_eq!(b.len, 8 * KIB);
        let c = pool.alloc(MIB).unwrap();
        assert_eq!(c.len, MIB);
        assert_eq!(c.offset % MIB, 0);
        assert_eq!(b.offset % (8 * KIB), 0);
        assert_eq!(pool.in_use_bytes(), 4 * KIB + 8 * KIB + MIB);
        assert_eq!(pool.stats().failed_allocs, 2);
        assert_eq!(pool.ptr(&c), slab.as_ptr().wrapping_add(c.offset));
        pool.free(a).unwrap();
        pool.free(b).unwrap();
        pool.free(c).unwrap();
        assert_eq!(pool.in_use_bytes(), 0);
        assert_eq!(pool.free_blocks_of_order(8), 4);
    }

    #[test]
    fn exhaustion_and_coalescing() {
        let slab = Slab::new(2 * MIB).unwrap();
        let mut pool = pool_over(&slab, 4 * KIB, MIB);
        let mut chunks: Vec<Chunk> = (0..512).map(|_| pool.alloc(4096).unwrap()).collect();
        assert_eq!(pool.alloc(1), None, "all 512 blocks handed out");
        assert_eq!(pool.free_bytes(), 0);
        assert_eq!(pool.largest_free_block(), 0);
        let mut offsets: Vec<usize> = chunks.iter().map(|c| c.offset).collect();
        offsets.sort_unstable();
        offsets.dedup();
        assert_eq!(offsets.len(), 512);
        // Free every other block: no merges possible, nothing larger than 4 KiB free.
        let odd: Vec<Chunk> = chunks.extract_if_odd();
        for c in odd {
            pool.free(c).unwrap();
        }
        assert_eq!(pool.largest_free_block(), 4 * KIB);
        assert_eq!(pool.alloc(8 * KIB), None);
        for c in chunks.drain(..) {
            pool.free(c).unwrap();
        }
        assert_eq!(pool.largest_free_block(), MIB);
        assert_eq!(pool.free_blocks_of_order(8), 2);
        assert_eq!(pool.alloc(MIB).map(|c| c.len), Some(MIB));
    }

    trait ExtractOdd {
        fn extract_if_odd(&mut self) -> Vec<Chunk>;
    }
    impl ExtractOdd for Vec<Chunk> {
        fn extract_if_odd(&mut self) -> Vec<Chunk> {
            let all = std::mem::take(self);
            let mut odd = Vec::new();
            for c in all {
                if (c.offset / c.len) % 2 == 1 {
                    odd.push(c);
                } else {
                    self.push(c);
                }
            }
            odd
        }
    }

    #[test]
    fn tail_shorter_than_max_block_is_used() {
        // 1 MiB + 256 KiB + 12 KiB + 1000 bytes: blocks of 1 MiB, 256 KiB, 8 KiB, 4 KiB.
        let len = MIB + 256 * KIB + 12 * KIB + 1000;
        let slab = Slab::new(len).unwrap();
        let mut pool = pool_over(&slab, 4 * KIB, MIB);
        assert_eq!(pool.capacity(), MIB + 256 * KIB + 12 * KIB);
        let mut got = Vec::new();
        while let Some(c) = pool.alloc(4096) {
            assert!(c.offset + c.len <= pool.capacity());
            got.push(c);
        }
        assert_eq!(got.len(), pool.capacity() / 4096);
        for c in got {
            pool.free(c).unwrap();
        }
        assert_eq!(pool.free_bytes(), pool.capacity());
        // Back to the initial carving: one block of each piece's order.
        assert_eq!(pool.free_blocks_of_order(8), 1);
        assert_eq!(pool.free_blocks_of_order(6), 1);
        assert_eq!(pool.free_blocks_of_order(1), 1);
        assert_eq!(pool.free_blocks_of_order(0), 1);
    }

    #[test]
    fn double_free_and_foreign_chunks_are_refused() {
        let slab = Slab::new(MIB).unwrap();
        let mut pool = pool_over(&slab, 4 * KIB, MIB);
        let a = pool.alloc(8 * KIB).unwrap();
        pool.free(a).unwrap();
        assert_eq!(
            pool.free(a),
            Err(InvalidFree {
                offset: a.offset,
                len: a.len
            })
        );
        let b = pool.alloc(4 * KIB).unwrap();
        // Wrong length for an allocated head, an interior offset, out of range.
        assert!(pool
            .free(Chunk {
                offset: b.offset,
                len: 8 * KIB
            })
            .is_err());
        assert!(pool
            .free(Chunk {
                offset: b.offset + 4096,
                len: 4096
            })
            .is_err());
        assert!(pool
            .free(Chunk {
                offset: 4 * MIB,
                len: 4096
            })
            .is_err());
        assert_eq!(pool.in_use_bytes(), 4 * KIB);
        pool.free(b).unwrap();
        assert_eq!(pool.largest_free_block(), MIB);
    }

    /// Random alloc/free sequences: no two live chunks overlap, every chunk lies in the
    /// region and is aligned to its size, counters add up, and freeing everything
    /// coalesces back to whole max blocks.
    #[test]
    fn random_sequences_never_overlap_and_coalesce() {
        let len = 8 * MIB + 64 * KIB;
        let slab = Slab::new(len).unwrap();
        let mut rng = rand::rngs::StdRng::seed_from_u64(0x5eed_b0dd);
        for round in 0..4 {
            let mut pool = pool_over(&slab, 4 * KIB, MIB);
            let min = pool.min_block();
            // Owner map per minimum block: which live chunk covers it.
            let mut owner = vec![usize::MAX; pool.capacity() / min];
            let mut live: Vec<(usize, Chunk)> = Vec::new();
            let (mut next_id, mut live_bytes) = (0usize, 0usize);
            for step in 0..10_000 {
                if live.is_empty() || rng.gen_bool(0.55) {
                    let want = match rng.gen_range(0..4) {
                        0 => rng.gen_range(1..=4096),
                        1 => rng.gen_range(1..=64 * KIB),
                        2 => 4096 << rng.gen_range(0..9),
                        _ => rng.gen_range(1..=MIB),
                    };
                    if let Some(c) = pool.alloc(want) {
                        assert!(c.len >= want && c.len.is_power_of_two());
                        assert_eq!(c.offset % c.len, 0);
                        assert!(c.offset + c.len <= pool.capacity());
                        for o in owner[c.offset / min..(c.offset + c.len) / min].iter_mut() {
                            assert_eq!(*o, usize::MAX, "round {round} step {step}: overlap");
                            *o = next_id;
                        }
                        live_bytes += c.len;
                        live.push((next_id, c));
                        next_id += 1;
                    }
                } else {
                    let (id, c) = live.swap_remove(rng.gen_range(0..live.len()));
                    for o in owner[c.offset / min..(c.offset + c.len) / min].iter_mut() {
                        assert_eq!(*o, id);
                        *o = usize::MAX;
                    }
                    live_bytes -= c.len;
                    pool.free(c).unwrap();
                }
                assert_eq!(pool.in_use_bytes(), live_bytes);
                assert_eq!(pool.stats().in_use_chunks, live.len());
            }
            for (_, c) in live {
                pool.free(c).unwrap();
            }
            assert_eq!(pool.in_use_bytes(), 0);
            assert_eq!(pool.stats().in_use_chunks, 0);
            assert_eq!(pool.free_blocks_of_order(8), 8, "8 whole MiB blocks again");
            assert_eq!(pool.free_blocks_of_order(4), 1, "the 64 KiB tail");
            for order in [0, 1, 2, 3, 5, 6, 7] {
                assert_eq!(pool.free_blocks_of_order(order), 0);
            }
        }
    }

    #[test]
    fn pointers_address_distinct_memory() {
        let slab = Slab::new(MIB).unwrap();
        let mut pool = pool_over(&slab, 4 * KIB, 64 * KIB);
        let a = pool.alloc(4096).unwrap();
        let b = pool.alloc(4096).unwrap();
        // SAFETY: both chunks lie in the slab and do not overlap.
        unsafe {
            std::ptr::write_bytes(pool.ptr(&a), 0xAA, a.len);
            std::ptr::write_bytes(pool.ptr(&b), 0xBB, b.len);
            let sa = std::slice::from_raw_parts(pool.ptr(&a), a.len);
            let sb = std::slice::from_raw_parts(pool.ptr(&b), b.len);
            assert!(sa.iter().all(|&x| x == 0xAA));
            assert!(sb.iter().all(|&x| x == 0xBB));
        }
        assert_eq!(pool.region(), (slab.as_ptr(), MIB));
    }
}
