//! A binary buddy allocator over `n` chunks (sans-IO, no memory of its own beyond its
//! tables): blocks of 2^order chunks, split on allocation and merged with their buddy
//! on release, in O(log n) and without allocating. The tables are out of band, so
//! nothing a peer could write into the pool's memory can corrupt them.
//!
//! The arena need not be a power of two: it starts as its binary decomposition (the
//! largest aligned block that fits at each offset), and a block whose buddy lies past
//! the end never merges.

/// "No block" in the free lists.
const NIL: u32 = u32::MAX;
/// "Not the head of a free block" in `free_order`.
const NOT_FREE: u8 = u8::MAX;

/// The allocator: see the module docs.
#[derive(Debug)]
pub struct Buddy {
    chunks: u32,
    max_order: u8,
    /// Per order, the first free block (a chunk index) or [`NIL`].
    heads: Vec<u32>,
    /// Doubly linked free lists, by chunk index of the block head.
    next: Vec<u32>,
    prev: Vec<u32>,
    /// Per chunk: the order of the free block it heads, or [`NOT_FREE`].
    free_order: Vec<u8>,
    /// Per chunk: the order of the allocated block it heads, or [`NOT_FREE`].
    alloc_order: Vec<u8>,
    free_chunks: u32,
}

/// The order of the smallest block of at least `chunks` chunks.
pub fn order_for(chunks: u32) -> u8 {
    chunks.max(1).next_power_of_two().trailing_zeros() as u8
}

impl Buddy {
    /// An allocator of `chunks` chunks, all free. `chunks` must be at least 1.
    pub fn new(chunks: u32) -> Buddy {
        let chunks = chunks.max(1);
        let max_order = (31 - chunks.leading_zeros()) as u8;
        let n = chunks as usize;
        let mut b = Buddy {
            chunks,
            max_order,
            heads: vec![NIL; usize::from(max_order) + 1],
            next: vec![NIL; n],
            prev: vec![NIL; n],
            free_order: vec![NOT_FREE; n],
            alloc_order: vec![NOT_FREE; n],
            free_chunks: 0,
        };
        let mut off = 0u32;
        while off < chunks {
            let mut order = max_order;
            while (off & ((1u32 << order) - 1)) != 0 || off + (1u32 << order) > chunks {
                order -= 1;
            }
            b.push(off, order);
            off += 1 << order;
        }
        b
    }

    /// Chunks free now.
    pub fn free_chunks(&self) -> u32 {
        self.free_chunks
    }

    /// The largest block one allocation can ever get, in chunks (when all is free).
    pub fn max_block_chunks(&self) -> u32 {
        1 << self.max_order
    }

    fn push(&mut self, idx: u32, order: u8) {
        let i = idx as usize;
        let head = self.heads[usize::from(order)];
        self.next[i] = head;
        self.prev[i] = NIL;
        if head != NIL {
            self.prev[head as usize] = idx;
        }
        self.heads[usize::from(order)] = idx;
        self.free_order[i] = order;
        self.free_chunks += 1 << order;
    }

    fn unlink(&mut self, idx: u32) {
        let i = idx as usize;
        let order = self.free_order[i];
        let (n, p) = (self.next[i], self.prev[i]);
        if p != NIL {
            self.next[p as usize] = n;
        } else {
            self.heads[usize::from(order)] = n;
        }
        if n != NIL {
            self.prev[n as usize] = p;
        }
        self.free_order[i] = NOT_FREE;
        self.free_chunks -= 1 << order;
    }

    /// Allocates a block of at least `chunks` chunks; returns its first chunk, or
    /// `None` when no free block is large enough now.
    pub fn alloc(&mut self, chunks: u32) -> Option<u32> {
        let want = order_for(chunks);
        if want > self.max_order {
            return None;
        }
        let mut order = want;
        while self.heads[usize::from(order)] == NIL {
            order += 1;
            if order > self.max_order {
                return None;
            }
        }
        let idx = self.heads[usize::from(order)];
        self.unlink(idx);
        while order > want {
            order -= 1;
            self.push(idx + (1 << order), order);
        }
        self.alloc_order[idx as usize] = want;
        Some(idx)
    }

    /// Chunks of the allocated block that starts at `idx`, `None` if none does.
    #[cfg(test)]
    pub fn block_chunks(&self, idx: u32) -> Option<u32> {
        match self.alloc_order.get(idx as usize) {
            Some(&o) if o != NOT_FREE => Some(1 << o),
            _ => None,
        }
    }

    /// Frees the block [`Buddy::alloc`] returned as `idx`, merging it with free
    /// buddies. Returns `false` (and changes nothing) if no allocated block starts at
    /// `idx`.
    pub fn free(&mut self, idx: u32) -> bool {
        let Some(&order) = self.alloc_order.get(idx as usize) else {
            return false;
        };
        if order == NOT_FREE {
            return false;
        }
        self.alloc_order[idx as usize] = NOT_FREE;
        let (mut idx, mut order) = (idx, order);
        while order < self.max_order {
            let buddy = idx ^ (1 << order);
            if buddy + (1 << order) > self.chunks || self.free_order[buddy as usize] != order {
                break;
            }
            self.unlink(buddy);
            idx = idx.min(buddy);
            order += 1;
        }
        self.push(idx, order);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_and_merges_back() {
        let mut b = Buddy::new(16);
        assert_eq!((b.free_chunks(), b.max_block_chunks()), (16, 16));
        let a = b.alloc(1).unwrap();
        let c = b.alloc(3).unwrap();
        let d = b.alloc(8).unwrap();
        assert_eq!(b.block_chunks(c), Some(4));
        assert_eq!(b.free_chunks(), 16 - 1 - 4 - 8);
        assert!(b.alloc(8).is_none(), "no second 8-chunk block");
        for x in [a, c, d] {
            assert!(b.free(x));
        }
        assert!(!b.free(a), "a double free changes nothing");
        assert_eq!(b.free_chunks(), 16);
        // Everything merged: one block of 16 again.
        assert_eq!(b.alloc(16), Some(0));
    }

    #[test]
    fn an_arena_that_is_not_a_power_of_two() {
        // 24 = 16 + 8: the 8-chunk block's buddy would lie past the end.
        let mut b = Buddy::new(24);
        assert_eq!(b.max_block_chunks(), 16);
        let x = b.alloc(16).unwrap();
        let y = b.alloc(8).unwrap();
        assert_eq!((x, y), (0, 16));
        assert!(b.alloc(1).is_none());
        assert!(b.free(y) && b.free(x));
        assert_eq!(b.free_chunks(), 24);
        assert!(b.alloc(17).is_none(), "larger than any block");
        // Many small ones fill it exactly.
        let all: Vec<u32> = (0..24).map(|_| b.alloc(1).unwrap()).collect();
        assert!(b.alloc(1).is_none());
        for i in all {
            b.free(i);
        }
        assert_eq!(b.alloc(16), Some(0));
    }

    /// A seeded random workload: blocks never overlap and every chunk comes back.
    #[test]
    fn random_alloc_free_keeps_blocks_disjoint() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        let n = 1000u32;
        let mut b = Buddy::new(n);
        let mut owner = vec![false; n as usize];
        let mut live: Vec<u32> = Vec::new();
        for _ in 0..20_000 {
            if rng.gen_bool(0.55) {
                let want = rng.gen_range(1..40);
                if let Some(i) = b.alloc(want) {
                    let len = b.block_chunks(i).unwrap();
                    assert!(len >= want);
                    for c in i..i + len {
                        assert!(!owner[c as usize], "chunk {c} handed out twice");
                        owner[c as usize] = true;
                    }
                    live.push(i);
                }
            } else if !live.is_empty() {
                let i = live.swap_remove(rng.gen_range(0..live.len()));
                let len = b.block_chunks(i).unwrap();
                for c in i..i + len {
                    owner[c as usize] = false;
                }
                assert!(b.free(i));
            }
        }
        for i in live {
            b.free(i);
        }
        assert_eq!(b.free_chunks(), n);
    }
}
