//! fio's `rate` and `rate_iops`: an I/O of direction d may start once the bytes and
//! I/Os the job already issued in d, at the capped rates, have had their time (fio's
//! `usec_for_io`). Pure arithmetic on the job's start and its issue counts, so it
//! tests without a clock.

use std::time::{Duration, Instant};

use crate::workload::IoOp;

/// The rate caps of one job and what it issued so far.
#[derive(Debug, Clone)]
pub struct Pace {
    start: Instant,
    rate: [u64; 3],
    rate_iops: [u64; 3],
    bytes: [u64; 3],
    ios: [u64; 3],
}

impl Pace {
    /// Caps of `rate` bytes/s and `rate_iops` I/Os/s per direction (0 = none), counted
    /// from `start`.
    pub fn new(start: Instant, rate: [u64; 3], rate_iops: [u64; 3]) -> Self {
        Self {
            start,
            rate,
            rate_iops,
            bytes: [0; 3],
            ios: [0; 3],
        }
    }

    /// Whether any cap is set.
    pub fn is_active(&self) -> bool {
        self.rate.iter().chain(&self.rate_iops).any(|&r| r > 0)
    }

    /// When an I/O `op` may be issued: `None` now, else the instant.
    pub fn not_before(&self, op: IoOp, now: Instant) -> Option<Instant> {
        let d = op.index();
        if d > 2 {
            return None;
        }
        let mut due = Duration::ZERO;
        if self.rate[d] > 0 {
            let ns = u128::from(self.bytes[d]) * 1_000_000_000 / u128::from(self.rate[d]);
            due = due.max(Duration::from_nanos(ns.min(u128::from(u64::MAX)) as u64));
        }
        if self.rate_iops[d] > 0 {
            let ns = u128::from(self.ios[d]) * 1_000_000_000 / u128::from(self.rate_iops[d]);
            due = due.max(Duration::from_nanos(ns.min(u128::from(u64::MAX)) as u64));
        }
        let at = self.start + due;
        (at > now).then_some(at)
    }

    /// Counts an issued I/O of `op` of `len` bytes.
    pub fn issued(&mut self, op: IoOp, len: u32) {
        let d = op.index();
        if d <= 2 {
            self.bytes[d] += u64::from(len);
            self.ios[d] += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn io_waits_for_the_capped_rate() {
        let t0 = Instant::now();
        let mut p = Pace::new(t0, [1 << 20, 0, 0], [0, 100, 0]);
        assert!(p.is_active());
        assert_eq!(p.not_before(IoOp::Read, t0), None);
        // 256 KiB read at 1 MiB/s: the next read is due 250 ms after the start.
        p.issued(IoOp::Read, 256 << 10);
        assert_eq!(
            p.not_before(IoOp::Read, t0),
            Some(t0 + Duration::from_millis(250))
        );
        assert_eq!(
            p.not_before(IoOp::Read, t0 + Duration::from_millis(300)),
            None
        );
        // Writes capped at 100 IOPS: 10 ms apart.
        p.issued(IoOp::Write, 4096);
        assert_eq!(
            p.not_before(IoOp::Write, t0),
            Some(t0 + Duration::from_millis(10))
        );
        assert_eq!(p.not_before(IoOp::Trim, t0), None, "trims are not capped");
        assert!(!Pace::new(t0, [0; 3], [0; 3]).is_active());
    }
}
