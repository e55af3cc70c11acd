//! The single-producer/single-consumer rings an AF_XDP socket shares with the kernel
//! (Linux `Documentation/networking/af_xdp.rst`, "Rings"): a producer and a consumer
//! index that run free as `u32` (they wrap), and `size` entries (a power of two) read
//! at `index & (size - 1)`. The fill and TX rings are produced here and consumed by the
//! kernel; the RX and completion rings the other way round.
//!
//! The index arithmetic is plain functions ([`entries_ready`], [`entries_free`]) so that
//! it is tested on its own, wrap-around included; [`Ring`] applies it to the mmapped
//! ring with the acquire/release ordering the kernel's `xsk_queue.h` pairs with.
use std::sync::atomic::{AtomicU32, Ordering};

/// Entries a consumer may read: `producer - consumer`, modulo 2^32.
pub fn entries_ready(producer: u32, consumer: u32) -> u32 {
    producer.wrapping_sub(consumer)
}

/// Entries a producer may write into a ring of `size` entries.
pub fn entries_free(size: u32, producer: u32, consumer: u32) -> u32 {
    size.wrapping_sub(entries_ready(producer, consumer))
}

/// One ring: pointers into its mmapped area, plus this side's cached copies of both
/// indices (re-read from shared memory only when the cache says the ring is
/// full/empty, as libxdp does).
pub struct Ring<T: Copy> {
    producer: *const AtomicU32,
    consumer: *const AtomicU32,
    flags: *const AtomicU32,
    desc: *mut T,
    mask: u32,
    cached_producer: u32,
    cached_consumer: u32,
}

// SAFETY: a Ring is only a view of memory that its owner (the XSK) keeps mapped; it is
// moved between threads with its owner, never shared.
unsafe impl<T: Copy> Send for Ring<T> {}

impl<T: Copy> Ring<T> {
    /// A ring over `size` (a power of two) entries at `desc`, with its indices and flags
    /// at the given addresses.
    ///
    /// # Safety
    /// The pointers must stay valid, aligned and mapped for the life of the ring, and
    /// `desc` must hold `size` entries of `T`.
    pub unsafe fn new(
        producer: *const AtomicU32,
        consumer: *const AtomicU32,
        flags: *const AtomicU32,
        desc: *mut T,
        size: u32,
    ) -> Ring<T> {
        debug_assert!(size.is_power_of_two());
        // SAFETY: the caller guarantees the pointers are valid.
        let (p, c) = unsafe {
            (
                (*producer).load(Ordering::Relaxed),
                (*consumer).load(Ordering::Relaxed),
            )
        };
        Ring {
            producer,
            consumer,
            flags,
            desc,
            mask: size - 1,
            cached_producer: p,
            cached_consumer: c,
        }
    }

    /// Entries in the ring.
    pub fn size(&self) -> u32 {
        self.mask + 1
    }

    /// The ring's flags word (`XDP_RING_NEED_WAKEUP`).
    pub fn flags(&self) -> u32 {
        // SAFETY: valid for the life of the ring (Ring::new's contract).
        unsafe { (*self.flags).load(Ordering::Relaxed) }
    }

    // Producer side (fill, TX).

    /// Free entries, re-reading the kernel's consumer index when the cache says fewer
    /// than `wanted` are free.
    pub fn free(&mut self, wanted: u32) -> u32 {
        let free = entries_free(self.size(), self.cached_producer, self.cached_consumer);
        if free >= wanted {
            return free;
        }
        // SAFETY: valid for the life of the ring. Acquire: the kernel is done with the
        // entries it consumed before we overwrite them.
        self.cached_consumer = unsafe { (*self.consumer).load(Ordering::Acquire) };
        entries_free(self.size(), self.cached_producer, self.cached_consumer)
    }

    /// Writes `entry` at the `i`-th free slot (not yet visible to the kernel); the
    /// caller checked `i < self.free(..)`.
    pub fn write(&mut self, i: u32, entry: T) {
        let at = self.cached_producer.wrapping_add(i) & self.mask;
        // SAFETY: `at` is within the ring's `size` entries.
        unsafe { self.desc.add(at as usize).write_volatile(entry) }
    }

    /// Makes the next `n` written entries visible to the kernel.
    pub fn submit(&mut self, n: u32) {
        self.cached_producer = self.cached_producer.wrapping_add(n);
        // SAFETY: valid for the life of the ring. Release: the entries are written first.
        unsafe { (*self.producer).store(self.cached_producer, Ordering::Release) }
    }

    /// Entries submitted that the kernel has not consumed yet.
    pub fn unconsumed(&mut self) -> u32 {
        // SAFETY: valid for the life of the ring.
        self.cached_consumer = unsafe { (*self.consumer).load(Ordering::Acquire) };
        entries_ready(self.cached_producer, self.cached_consumer)
    }

    // Consumer side (RX, completion).

    /// Entries ready to read, re-reading the kernel's producer index when the cache is
    /// empty.
    pub fn ready(&mut self) -> u32 {
        let ready = entries_ready(self.cached_producer, self.cached_consumer);
        if ready > 0 {
            return ready;
        }
        // SAFETY: valid for the life of the ring. Acquire: the entries are read after.
        self.cached_producer = unsafe { (*self.producer).load(Ordering::Acquire) };
        entries_ready(self.cached_producer, self.cached_consumer)
    }

    /// The `i`-th ready entry; the caller checked `i < self.ready()`.
    pub fn read(&self, i: u32) -> T {
        let at = self.cached_consumer.wrapping_add(i) & self.mask;
        // SAFETY: `at` is within the ring's `size` entries.
        unsafe { self.desc.add(at as usize).read_volatile() }
    }

    /// Hands the next `n` read entries back to the kernel.
    pub fn release(&mut self, n: u32) {
        self.cached_consumer = self.cached_consumer.wrapping_add(n);
        // SAFETY: valid for the life of the ring. Release: the reads come first.
        unsafe { (*self.consumer).store(self.cached_consumer, Ordering::Release) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn index_arithmetic_wraps() {
        assert_eq!(entries_ready(5, 3), 2);
        assert_eq!(entries_ready(2, u32::MAX - 1), 4);
        assert_eq!(entries_free(8, 2, u32::MAX - 1), 4);
        assert_eq!(entries_free(8, 7, 7), 8);
        assert_eq!(entries_free(8, 15, 7), 0);
    }

    /// A ring in ordinary memory, one side played by the test.
    struct Fake {
        producer: AtomicU32,
        consumer: AtomicU32,
        flags: AtomicU32,
        desc: [u64; 4],
    }

    #[test]
    fn produce_and_consume_across_the_wrap() {
        let start = u32::MAX - 2;
        let mut f = Box::new(Fake {
            producer: AtomicU32::new(start),
            consumer: AtomicU32::new(start),
            flags: AtomicU32::new(0),
            desc: [0; 4],
        });
        let (p, c, fl, d) = (
            &f.producer as *const _,
            &f.consumer as *const _,
            &f.flags as *const _,
            f.desc.as_mut_ptr(),
        );
        // SAFETY: `f` outlives both rings.
        let (mut tx, mut rx) = unsafe { (Ring::new(p, c, fl, d, 4), Ring::new(p, c, fl, d, 4)) };
        for round in 0..3u64 {
            assert_eq!(tx.free(4), 4);
            for i in 0..3 {
                tx.write(i, round * 10 + u64::from(i));
            }
            assert_eq!(rx.ready(), 0, "nothing is visible before submit");
            tx.submit(3);
            assert_eq!(tx.free(4), 1, "the consumer has not released yet");
            assert_eq!(tx.unconsumed(), 3);
            assert_eq!(rx.ready(), 3);
            let got: Vec<u64> = (0..3).map(|i| rx.read(i)).collect();
            assert_eq!(got, vec![round * 10, round * 10 + 1, round * 10 + 2]);
            rx.release(3);
            assert_eq!(rx.ready(), 0);
            assert_eq!(tx.unconsumed(), 0);
        }
        assert_eq!(f.producer.load(Ordering::Relaxed), start.wrapping_add(9));
        assert_eq!(f.consumer.get_mut(), &start.wrapping_add(9));
    }
}
