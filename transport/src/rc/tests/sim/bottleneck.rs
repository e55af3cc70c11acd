//! A switch's egress port in front of a receiver: a FIFO queue drained at a fixed rate,
//! ECN-marking packets as RED does (Floyd and Jacobson 1993, in the instantaneous-queue
//! form DCQCN's switches run: Zhu et al., SIGCOMM 2015, §3.1 and Fig. 5) and dropping
//! at its tail.
//!
//! A packet of `len` bytes offered at `now` finds `q` bytes queued (not yet fully sent):
//! if `q + len` exceeds [`RedCfg::limit_bytes`] it is dropped (tail drop); otherwise it
//! leaves when the packets before it have been serialized. It is CE-marked with
//! probability 0 below `kmin_bytes`, rising linearly to `pmax` at `kmax_bytes`, and 1
//! above it (RED's "gentle" off, as switches mark), judged on the queue it finds on
//! arrival (Linux `red`, [`RedCfg::mark_on_dequeue`] false) or the queue it leaves
//! behind when it starts to leave (dequeue marking, Wu et al., "Tuning ECN for Data
//! Center Networks", CoNEXT 2012: the mark does not wait out the queue it reports, so
//! the feedback is a queueing delay sooner; the driver calls [`RedQueue::mark`] then).
use std::collections::VecDeque;

use rand::rngs::StdRng;
use rand::Rng;

use super::link::WIRE_OVERHEAD;

/// The queue's rate, RED thresholds and size.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct RedCfg {
    /// Serialization time, picoseconds per byte (320 = 25 Gbit/s).
    pub ps_per_byte: u64,
    /// Queue depth (bytes) below which nothing is marked.
    pub kmin_bytes: u64,
    /// Queue depth (bytes) at which the marking probability reaches `pmax`; every
    /// packet above it is marked.
    pub kmax_bytes: u64,
    /// Marking probability at `kmax_bytes`, in (0, 1].
    pub pmax: f64,
    /// Most bytes queued; a packet that would exceed it is dropped.
    pub limit_bytes: u64,
    /// Mark when a packet starts to leave ([`RedQueue::mark`]) rather than on arrival.
    pub mark_on_dequeue: bool,
}

/// What the queue did with one packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Dropped at the tail.
    Dropped,
    /// Queued: its first bit leaves at `start_ns`, its last at `done_ns`; CE-marked or
    /// not (always false with [`RedCfg::mark_on_dequeue`]: ask [`RedQueue::mark`] at
    /// `start_ns`).
    Queued {
        start_ns: u64,
        done_ns: u64,
        ce: bool,
    },
}

/// Counts of what the queue did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct RedStats {
    /// Packets offered.
    pub offered: u64,
    /// Packets dropped at the tail.
    pub dropped: u64,
    /// Packets CE-marked.
    pub marked: u64,
    /// Deepest queue seen, bytes (after an enqueue).
    pub max_depth: u64,
    /// Sum over enqueues of the depth found (bytes), for the mean.
    pub depth_sum: u64,
    /// Times of the first and the last tail drop, ns.
    pub drops_between: Option<(u64, u64)>,
}

/// The queue's state.
#[derive(Clone, Debug)]
pub(crate) struct RedQueue {
    pub cfg: RedCfg,
    /// Queued packets: (time its last bit leaves, bytes), in order.
    q: VecDeque<(u64, u64)>,
    bytes: u64,
    /// When the last queued packet's last bit leaves.
    free_at: u64,
    pub stats: RedStats,
}

impl RedQueue {
    /// An empty queue.
    pub fn new(cfg: RedCfg) -> Self {
        RedQueue {
            cfg,
            q: VecDeque::new(),
            bytes: 0,
            free_at: 0,
            stats: RedStats::default(),
        }
    }

    /// Bytes queued at `now` (packets not yet fully sent).
    pub fn depth(&mut self, now: u64) -> u64 {
        while self.q.front().is_some_and(|&(done, _)| done <= now) {
            if let Some((_, n)) = self.q.pop_front() {
                self.bytes -= n;
            }
        }
        self.bytes
    }

    /// The probability of marking a packet that finds `depth` bytes queued.
    pub fn mark_probability(&self, depth: u64) -> f64 {
        let c = &self.cfg;
        if depth < c.kmin_bytes {
            0.0
        } else if depth >= c.kmax_bytes {
            if depth == c.kmax_bytes {
                c.pmax
            } else {
                1.0
            }
        } else {
            c.pmax * (depth - c.kmin_bytes) as f64 / (c.kmax_bytes - c.kmin_bytes).max(1) as f64
        }
    }

    /// Offers a packet of `len` UDP payload bytes at `now`.
    pub fn offer(&mut self, now: u64, len: usize, rng: &mut StdRng) -> Verdict {
        self.stats.offered += 1;
        let wire = len as u64 + WIRE_OVERHEAD;
        let depth = self.depth(now);
        if depth + wire > self.cfg.limit_bytes {
            self.stats.dropped += 1;
            let first = self.stats.drops_between.map_or(now, |(f, _)| f);
            self.stats.drops_between = Some((first, now));
            return Verdict::Dropped;
        }
        let ce = !self.cfg.mark_on_dequeue && self.draw_mark(depth, rng);
        let start_ns = self.free_at.max(now);
        let done_ns = start_ns + wire * self.cfg.ps_per_byte / 1000;
        self.free_at = done_ns;
        self.q.push_back((done_ns, wire));
        self.bytes += wire;
        self.stats.depth_sum += depth;
        self.stats.max_depth = self.stats.max_depth.max(self.bytes);
        Verdict::Queued {
            start_ns,
            done_ns,
            ce,
        }
    }

    /// Dequeue marking: whether the packet that starts to leave at `now` is CE-marked,
    /// judged on the bytes queued behind it (and itself).
    pub fn mark(&mut self, now: u64, rng: &mut StdRng) -> bool {
        let depth = self.depth(now);
        self.draw_mark(depth, rng)
    }

    fn draw_mark(&mut self, depth: u64, rng: &mut StdRng) -> bool {
        let p = self.mark_probability(depth);
        let ce = p > 0.0 && (p >= 1.0 || rng.gen_bool(p));
        self.stats.marked += ce as u64;
        ce
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    fn cfg() -> RedCfg {
        RedCfg {
            ps_per_byte: 1000, // 8 Gbit/s: one ns per byte
            kmin_bytes: 10_000,
            kmax_bytes: 20_000,
            pmax: 0.5,
            limit_bytes: 30_000,
            mark_on_dequeue: false,
        }
    }

    #[test]
    fn red_probability_is_linear_between_the_thresholds() {
        let q = RedQueue::new(cfg());
        assert_eq!(q.mark_probability(9_999), 0.0);
        assert_eq!(q.mark_probability(10_000), 0.0);
        assert!((q.mark_probability(15_000) - 0.25).abs() < 1e-12);
        assert_eq!(q.mark_probability(20_000), 0.5);
        assert_eq!(q.mark_probability(20_001), 1.0);
    }

    #[test]
    fn the_queue_drains_at_its_rate_and_drops_at_its_tail() {
        let mut q = RedQueue::new(cfg());
        let mut rng = StdRng::seed_from_u64(1);
        let len = 1_000 - WIRE_OVERHEAD as usize; // 1000 bytes on the wire
        let mut done = vec![];
        for _ in 0..40 {
            if let Verdict::Queued { done_ns, .. } = q.offer(0, len, &mut rng) {
                done.push(done_ns);
            }
        }
        // 30 fit in 30 000 bytes; the rest are tail-dropped.
        assert_eq!(done.len(), 30);
        assert_eq!(q.stats.dropped, 10);
        assert_eq!(done[0], 1_000);
        assert_eq!(done[29], 30_000);
        // Above kmax (after 20 packets) every packet is marked.
        assert!(q.stats.marked >= 9);
        assert_eq!(q.depth(15_000), 15_000);
        assert_eq!(q.depth(30_000), 0);
    }
}
