//! Namespaces without storage, for measuring the fabric alone (issue 16 item 8):
//!
//! - null (Linux `null_blk`, SPDK's Null bdev): reads return zeroes, writes are
//!   dropped, Flush and Deallocate do nothing;
//! - RAM: the blocks live in anonymous memory of the target process (mapped lazily: an
//!   untouched block costs nothing and reads as zeroes), lost when it exits.
//!
//! Both are served by the poll group itself, with a copy between the data buffer and
//! the memory (no io_uring: tmpfs and memfd reads go through io_uring's worker threads,
//! DESIGN facts). A RAM namespace may be reached from several poll groups at once, so
//! its memory is split in [`STRIPE_BYTES`] stripes, each behind a reader-writer lock:
//! a copy holds the lock of the stripe it is copying (one after the other), so commands
//! of different poll groups never touch the same bytes at once.
use parking_lot::RwLock;

use crate::buffers::Slab;

/// Bytes of RAM behind one lock.
pub const STRIPE_BYTES: u64 = 1 << 20;

/// What backs a namespace without storage.
#[derive(Debug)]
pub enum MemoryStore {
    /// Reads zeroes, drops writes.
    Null,
    /// Blocks in memory.
    Ram(RamStore),
}

/// A RAM namespace's memory (see the module docs).
#[derive(Debug)]
pub struct RamStore {
    slab: Slab,
    stripes: Box<[RwLock<()>]>,
}

// SAFETY: the slab's bytes are only reached through `read`, `write` and `zero`, each of
// which holds the locks of every stripe it touches (shared for reading, exclusive for
// writing), so no two threads access the same bytes unless both only read.
unsafe impl Sync for RamStore {}

impl RamStore {
    /// `size_bytes` of zeroes (mapped lazily).
    ///
    /// # Errors
    /// The kernel refused the mapping (ENOMEM: more than the address space or the
    /// overcommit policy allows).
    pub fn new(size_bytes: u64) -> std::io::Result<RamStore> {
        let len = usize::try_from(size_bytes)
            .map_err(|_| std::io::Error::from_raw_os_error(libc::ENOMEM))?;
        let slab = Slab::lazy(len)?;
        let n = size_bytes.div_ceil(STRIPE_BYTES).max(1) as usize;
        Ok(RamStore {
            slab,
            stripes: (0..n).map(|_| RwLock::new(())).collect(),
        })
    }

    /// Calls `f(at, k, n)` for each stripe piece of `offset..offset + len` (byte `at`
    /// of the memory, byte `k` of the caller's buffer, `n` bytes), holding that
    /// stripe's lock (exclusive when `write`) during the call; nothing past the end.
    /// One stripe at a time: no allocation, and no atomicity across stripes (NVMe
    /// promises none beyond a block: AWUN 0).
    fn each_piece(
        &self,
        offset: u64,
        len: usize,
        write: bool,
        mut f: impl FnMut(usize, usize, usize),
    ) {
        let Some(end) = offset.checked_add(len as u64) else {
            return;
        };
        if end > self.slab.len() as u64 {
            return;
        }
        let mut at = offset;
        while at < end {
            let stripe = (at / STRIPE_BYTES) as usize;
            let piece_end = end.min((stripe as u64 + 1) * STRIPE_BYTES);
            let n = (piece_end - at) as usize;
            let k = (at - offset) as usize;
            if write {
                let _w = self.stripes[stripe].write();
                f(at as usize, k, n);
            } else {
                let _r = self.stripes[stripe].read();
                f(at as usize, k, n);
            }
            at = piece_end;
        }
    }

    /// Copies the bytes at `offset` into `out` (nothing past the end).
    pub fn read(&self, offset: u64, out: &mut [u8]) {
        let base = self.slab.as_ptr();
        let dst = out.as_mut_ptr();
        self.each_piece(offset, out.len(), false, |at, k, n| {
            // SAFETY: `at..at + n` lies in the slab and `k..k + n` in `out`
            // (each_piece checked both); the stripe is held shared, so no writer
            // touches these bytes meanwhile.
            unsafe { std::ptr::copy_nonoverlapping(base.add(at), dst.add(k), n) }
        });
    }

    /// Copies `data` to `offset` (nothing past the end).
    pub fn write(&self, offset: u64, data: &[u8]) {
        let base = self.slab.as_ptr();
        let src = data.as_ptr();
        self.each_piece(offset, data.len(), true, |at, k, n| {
            // SAFETY: as in `read`; the stripe is held exclusively.
            unsafe { std::ptr::copy_nonoverlapping(src.add(k), base.add(at), n) }
        });
    }

    /// Zeroes `len` bytes at `offset` (nothing past the end).
    pub fn zero(&self, offset: u64, len: u64) {
        let Ok(len) = usize::try_from(len) else {
            return;
        };
        let base = self.slab.as_ptr();
        self.each_piece(offset, len, true, |at, _, n| {
            // SAFETY: inside the slab; the stripe is held exclusively.
            unsafe { std::ptr::write_bytes(base.add(at), 0, n) }
        });
    }

    /// Bytes of the namespace.
    pub fn len(&self) -> u64 {
        self.slab.len() as u64
    }

    /// Whether it has no bytes (never: a namespace has at least one block).
    pub fn is_empty(&self) -> bool {
        self.slab.len() == 0
    }
}

impl MemoryStore {
    /// Reads `out.len()` bytes at `offset`: zeroes for a null namespace.
    pub fn read(&self, offset: u64, out: &mut [u8]) {
        match self {
            MemoryStore::Null => out.fill(0),
            MemoryStore::Ram(r) => r.read(offset, out),
        }
    }

    /// Writes `data` at `offset`: dropped by a null namespace.
    pub fn write(&self, offset: u64, data: &[u8]) {
        if let MemoryStore::Ram(r) = self {
            r.write(offset, data)
        }
    }

    /// Zeroes (Write Zeroes, Deallocate) `len` bytes at `offset`.
    pub fn zero(&self, offset: u64, len: u64) {
        if let MemoryStore::Ram(r) = self {
            r.zero(offset, len)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ram_keeps_what_is_written_across_stripes_and_null_drops_it() {
        let ram = MemoryStore::Ram(RamStore::new(3 * STRIPE_BYTES).unwrap());
        let mut out = vec![0xAAu8; 8192];
        ram.read(0, &mut out);
        assert!(out.iter().all(|&b| b == 0), "fresh memory reads zeroes");
        // 8 KiB across the first stripe boundary.
        let at = STRIPE_BYTES - 4096;
        let data: Vec<u8> = (0..8192u32).map(|i| (i % 253) as u8).collect();
        ram.write(at, &data);
        ram.read(at, &mut out);
        assert_eq!(out, data);
        ram.zero(at + 4096, 4096);
        ram.read(at, &mut out);
        assert_eq!(&out[..4096], &data[..4096]);
        assert!(out[4096..].iter().all(|&b| b == 0));
        // Past the end: nothing moves (the command was checked against the size).
        ram.write(3 * STRIPE_BYTES - 1, &[1, 2]);
        let null = MemoryStore::Null;
        null.write(0, &data);
        let mut out = vec![0xAAu8; 512];
        null.read(0, &mut out);
        assert!(out.iter().all(|&b| b == 0));
    }

    #[test]
    fn poll_groups_write_and_read_one_ram_namespace_at_once() {
        let ram = std::sync::Arc::new(RamStore::new(4 * STRIPE_BYTES).unwrap());
        let threads: Vec<_> = (0..4u8)
            .map(|t| {
                let ram = ram.clone();
                std::thread::spawn(move || {
                    for k in 0..256u64 {
                        let at = k * 16384 + u64::from(t) * 4096;
                        ram.write(at, &[t + 1; 4096]);
                        let mut out = [0u8; 4096];
                        ram.read(at, &mut out);
                        assert_eq!(out, [t + 1; 4096]);
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
    }
}
