//! The completion latency histogram a poll group keeps per namespace and direction:
//! plain counters in the poll group's own state (no atomic, no lock), copied out when
//! the metrics endpoint asks ([`crate::rdma::GroupCmd::Metrics`]).
use std::time::Duration;

/// Upper bounds of the histogram's buckets, in nanoseconds (Prometheus `le`, in
/// seconds on the wire): 1 us to 1 s, about three per decade, with room below 10 us
/// for a 4 KiB read from the page cache and above 10 ms for a slow disk.
pub const BUCKET_BOUNDS_NS: [u64; 18] = [
    1_000,
    2_500,
    5_000,
    10_000,
    25_000,
    50_000,
    100_000,
    250_000,
    500_000,
    1_000_000,
    2_500_000,
    5_000_000,
    10_000_000,
    25_000_000,
    50_000_000,
    100_000_000,
    250_000_000,
    1_000_000_000,
];

/// Commands counted by how long they took (see [`BUCKET_BOUNDS_NS`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LatencyHistogram {
    /// Commands per bucket (not cumulative); the last counts those above every bound
    /// (`le="+Inf"` only).
    pub buckets: [u64; BUCKET_BOUNDS_NS.len() + 1],
    /// Commands counted.
    pub count: u64,
    /// Their latencies added up, in nanoseconds.
    pub sum_ns: u64,
}

impl LatencyHistogram {
    /// Counts one command that took `took`.
    #[inline]
    pub fn record(&mut self, took: Duration) {
        let ns = u64::try_from(took.as_nanos()).unwrap_or(u64::MAX);
        let at = BUCKET_BOUNDS_NS.partition_point(|&b| b < ns);
        self.buckets[at] += 1;
        self.count += 1;
        self.sum_ns = self.sum_ns.saturating_add(ns);
    }

    /// Adds `other`'s counts to these (another poll group's, for one namespace).
    pub fn merge(&mut self, other: &LatencyHistogram) {
        for (a, b) in self.buckets.iter_mut().zip(other.buckets.iter()) {
            *a += b;
        }
        self.count += other.count;
        self.sum_ns = self.sum_ns.saturating_add(other.sum_ns);
    }

    /// The buckets as `prometheus-client` takes them: `(upper bound in seconds,
    /// commands in this bucket alone)`, ending with `+Inf`; the encoder adds them up
    /// into Prometheus' cumulative `le` buckets.
    pub fn buckets_seconds(&self) -> Vec<(f64, u64)> {
        BUCKET_BOUNDS_NS
            .iter()
            .map(|&bound| bound as f64 / 1e9)
            .chain(std::iter::once(f64::INFINITY))
            .zip(self.buckets.iter().copied())
            .collect()
    }
}

/// A namespace's two histograms: reads (and Compares, counted as reads as the SMART
/// log counts them), then writes.
pub type ReadWrite = [LatencyHistogram; 2];

/// Index of reads in [`ReadWrite`].
pub const READ: usize = 0;
/// Index of writes in [`ReadWrite`].
pub const WRITE: usize = 1;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_inclusive_upper_bounds() {
        let mut h = LatencyHistogram::default();
        h.record(Duration::from_nanos(999));
        h.record(Duration::from_micros(1)); // exactly on the first bound: le="1e-6"
        h.record(Duration::from_micros(7));
        h.record(Duration::from_secs(5)); // above every bound
        assert_eq!(
            (h.count, h.sum_ns),
            (4, 999 + 1_000 + 7_000 + 5_000_000_000)
        );
        let c = h.buckets_seconds();
        assert_eq!(c.len(), BUCKET_BOUNDS_NS.len() + 1);
        assert_eq!(c[0], (1e-6, 2));
        assert_eq!(c[2], (5e-6, 0));
        assert_eq!(c[3], (1e-5, 1));
        assert_eq!(*c.last().unwrap(), (f64::INFINITY, 1));
        assert_eq!(c.iter().map(|b| b.1).sum::<u64>(), h.count);
        let mut m = h;
        m.merge(&h);
        assert_eq!((m.count, m.buckets_seconds()[3].1), (8, 2));
    }
}
