//! A rate-limited, ECN-marking queue on the soft provider's receive path: the switch
//! port in front of a receiver, for incast experiments over real sockets where the
//! kernel offers no marking qdisc (this project's CI kernel has `htb` and `tbf` but no
//! `red`, `choke`, `codel` or `fq_codel`).
//!
//! Part of the fault layer ([`super::fault`], [`super::FaultConfig::queue`]). Every
//! datagram the layer would deliver once is queued instead and handed on when its
//! last bit would have left a link of [`RxQueueConfig::rate_mbps`] (FIFO, wall-clock
//! time, bytes as received). A datagram that finds `q` bytes queued is dropped if
//! `q + len` exceeds `limit_bytes` (tail drop); otherwise it is CE-marked as RED does
//! on arrival (Floyd and Jacobson 1993; DCQCN's switch, Zhu et al. SIGCOMM 2015 §3.1):
//! never below `kmin_bytes`, with a probability rising linearly to `pmax` at
//! `kmax_bytes`, always above it. The mark is the BTH FECN bit, what the provider makes
//! of an IP CE mark. Counted in [`super::FaultCounters`]: `queue_dropped`,
//! `ce_marked`, `queue_max_depth_bytes`.
use std::collections::VecDeque;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

/// The queue's rate, RED thresholds and size.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RxQueueConfig {
    /// Drain rate, Mbit/s (at least 1).
    pub rate_mbps: u32,
    /// Depth (bytes) below which nothing is marked.
    pub kmin_bytes: u32,
    /// Depth (bytes) at which the marking probability reaches `pmax`; above it every
    /// datagram is marked. At least `kmin_bytes`.
    pub kmax_bytes: u32,
    /// Marking probability at `kmax_bytes`, in `[0, 1]`.
    pub pmax: f64,
    /// Most bytes queued; a datagram that would exceed it is dropped.
    pub limit_bytes: u32,
}

/// One queued datagram.
#[derive(Debug)]
pub(crate) struct Queued {
    pub due: Instant,
    pub from: SocketAddr,
    pub ipv4_id: u16,
    pub data: Vec<u8>,
}

/// The queue's state.
#[derive(Debug)]
pub(crate) struct RxQueue {
    cfg: RxQueueConfig,
    q: VecDeque<Queued>,
    bytes: u64,
    free_at: Option<Instant>,
}

impl RxQueue {
    pub fn new(cfg: RxQueueConfig) -> Self {
        RxQueue {
            cfg,
            q: VecDeque::new(),
            bytes: 0,
            free_at: None,
        }
    }

    /// The marking probability of a datagram finding `depth` bytes queued.
    pub fn mark_probability(&self, depth: u64) -> f64 {
        let (kmin, kmax) = (
            u64::from(self.cfg.kmin_bytes),
            u64::from(self.cfg.kmax_bytes),
        );
        if depth < kmin {
            0.0
        } else if depth > kmax {
            1.0
        } else if kmax == kmin {
            self.cfg.pmax
        } else {
            self.cfg.pmax * (depth - kmin) as f64 / (kmax - kmin) as f64
        }
    }

    /// Datagrams queued.
    pub fn len(&self) -> usize {
        self.q.len()
    }

    /// Bytes queued.
    pub fn depth(&self) -> u64 {
        self.bytes
    }

    /// Whether a datagram of `len` bytes arriving now is dropped at the tail.
    pub fn overflows(&self, len: usize) -> bool {
        self.bytes + len as u64 > u64::from(self.cfg.limit_bytes)
    }

    /// Queues `data` (a datagram of `data.len()` bytes from `from`) arriving at `now`.
    pub fn push(&mut self, now: Instant, from: SocketAddr, ipv4_id: u16, data: Vec<u8>) {
        let ns = data.len() as u64 * 8_000 / u64::from(self.cfg.rate_mbps.max(1));
        let start = self.free_at.map_or(now, |f| f.max(now));
        let due = start + Duration::from_nanos(ns);
        self.free_at = Some(due);
        self.bytes += data.len() as u64;
        self.q.push_back(Queued {
            due,
            from,
            ipv4_id,
            data,
        });
    }

    /// The oldest datagram whose time to leave has come by `now`.
    pub fn pop_due(&mut self, now: Instant) -> Option<Queued> {
        if self.q.front().is_some_and(|d| d.due <= now) {
            let d = self.q.pop_front()?;
            self.bytes -= d.data.len() as u64;
            return Some(d);
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg() -> RxQueueConfig {
        RxQueueConfig {
            rate_mbps: 8, // one byte per microsecond
            kmin_bytes: 1_000,
            kmax_bytes: 3_000,
            pmax: 0.2,
            limit_bytes: 4_000,
        }
    }

    #[test]
    fn red_marks_linearly_between_the_thresholds() {
        let q = RxQueue::new(cfg());
        assert_eq!(q.mark_probability(999), 0.0);
        assert!((q.mark_probability(2_000) - 0.1).abs() < 1e-12);
        assert!((q.mark_probability(3_000) - 0.2).abs() < 1e-12);
        assert_eq!(q.mark_probability(3_001), 1.0);
    }

    #[test]
    fn datagrams_leave_in_order_at_the_rate_and_overflow_at_the_limit() {
        let mut q = RxQueue::new(cfg());
        let from: SocketAddr = "127.0.0.1:4791".parse().unwrap();
        let t0 = Instant::now();
        for i in 0..4u8 {
            assert!(!q.overflows(1_000));
            q.push(t0, from, 0, vec![i; 1_000]);
        }
        assert!(q.overflows(1), "4000 bytes queued of 4000");
        assert!(q.pop_due(t0 + Duration::from_micros(999)).is_none());
        let first = q.pop_due(t0 + Duration::from_micros(1_000)).unwrap();
        assert_eq!(first.data[0], 0);
        assert_eq!(q.depth(), 3_000);
        let rest: Vec<u8> = std::iter::from_fn(|| q.pop_due(t0 + Duration::from_millis(4)))
            .map(|d| d.data[0])
            .collect();
        assert_eq!(rest, [1, 2, 3]);
    }
}
