//! Statistics of one job and direction: completion latency, I/O counts and
//! bandwidth/IOPS samples, with fio's definitions.
//!
//! Latencies are nanoseconds. Percentiles come from an HDR histogram (3 significant
//! digits, auto-resizing); min, max, mean and standard deviation are exact.

use std::time::Duration;

use hdrhistogram::Histogram;

/// fio's default percentile list (`percentile_list`), in percent.
pub const FIO_PERCENTILES: [f64; 17] = [
    1.0, 5.0, 10.0, 20.0, 30.0, 40.0, 50.0, 60.0, 70.0, 80.0, 90.0, 95.0, 99.0, 99.5, 99.9, 99.95,
    99.99,
];

/// fio's bandwidth and IOPS sampling interval (`bwavgtime`, `iopsavgtime`): 500 ms.
pub const SAMPLE_INTERVAL: Duration = Duration::from_millis(500);

/// Running min/max/mean/standard deviation of `f64` samples (Welford), mergeable
/// (Chan et al.). The deviation is the sample standard deviation (n - 1), as fio's.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Moments {
    n: u64,
    min: f64,
    max: f64,
    mean: f64,
    m2: f64,
}

impl Moments {
    /// Adds one sample.
    pub fn add(&mut self, x: f64) {
        if self.n == 0 {
            self.min = x;
            self.max = x;
        } else {
            self.min = self.min.min(x);
            self.max = self.max.max(x);
        }
        self.n += 1;
        let d = x - self.mean;
        self.mean += d / self.n as f64;
        self.m2 += d * (x - self.mean);
    }

    /// Adds all samples of `other`.
    pub fn merge(&mut self, other: &Moments) {
        if other.n == 0 {
            return;
        }
        if self.n == 0 {
            *self = *other;
            return;
        }
        let n = self.n + other.n;
        let d = other.mean - self.mean;
        self.m2 += other.m2 + d * d * (self.n as f64) * (other.n as f64) / n as f64;
        self.mean += d * other.n as f64 / n as f64;
        self.n = n;
        self.min = self.min.min(other.min);
        self.max = self.max.max(other.max);
    }

    /// Number of samples.
    pub fn count(&self) -> u64 {
        self.n
    }
    /// Smallest sample (0 when empty).
    pub fn min(&self) -> f64 {
        self.min
    }
    /// Largest sample (0 when empty).
    pub fn max(&self) -> f64 {
        self.max
    }
    /// Mean (0 when empty).
    pub fn mean(&self) -> f64 {
        self.mean
    }
    /// Sample standard deviation; 0 with fewer than two samples.
    pub fn stddev(&self) -> f64 {
        if self.n > 1 {
            (self.m2 / (self.n - 1) as f64).sqrt()
        } else {
            0.0
        }
    }
}

/// Upper bounds (exclusive) of fio's latency buckets, in ns, us and ms
/// (`latency_ns`, `latency_us`, `latency_ms`); the last ms bucket is ">=2000".
pub const FIO_LAT_BOUNDS: [u64; 10] = [2, 4, 10, 20, 50, 100, 250, 500, 750, 1000];

/// Number of fio latency buckets: 10 ns, 10 us and 12 ms buckets.
pub const FIO_LAT_BUCKETS: usize = 32;

/// The fio latency bucket of `ns` (stat.c `add_lat_{ns,us,ms}`): buckets 0-9 in ns,
/// 10-19 in us, 20-31 in ms (30 = under 2000 ms, 31 = 2000 ms and over).
pub fn fio_lat_bucket(ns: u64) -> usize {
    let find = |v: u64| FIO_LAT_BOUNDS.iter().position(|&b| v < b);
    if ns < 1000 {
        find(ns).unwrap_or(9)
    } else if ns < 1_000_000 {
        10 + find(ns / 1000).unwrap_or(9)
    } else {
        let ms = ns / 1_000_000;
        match find(ms) {
            Some(i) => 20 + i,
            None if ms < 2000 => 30,
            None => 31,
        }
    }
}

/// Completion latency distribution in nanoseconds.
#[derive(Debug, Clone)]
pub struct LatencyStats {
    hist: Histogram<u64>,
    moments: Moments,
    min_ns: u64,
    max_ns: u64,
    fio_buckets: [u64; FIO_LAT_BUCKETS],
}

impl Default for LatencyStats {
    fn default() -> Self {
        Self::new()
    }
}

impl LatencyStats {
    /// An empty distribution.
    pub fn new() -> Self {
        let mut hist = Histogram::new(3).expect("3 significant digits is a valid precision");
        hist.auto(true);
        Self {
            hist,
            moments: Moments::default(),
            min_ns: 0,
            max_ns: 0,
            fio_buckets: [0; FIO_LAT_BUCKETS],
        }
    }

    /// Records one latency in nanoseconds.
    pub fn record(&mut self, ns: u64) {
        // Auto-resize makes recording infallible for any u64.
        let _ = self.hist.record(ns);
        self.fio_buckets[fio_lat_bucket(ns)] += 1;
        if self.moments.count() == 0 {
            self.min_ns = ns;
            self.max_ns = ns;
        } else {
            self.min_ns = self.min_ns.min(ns);
            self.max_ns = self.max_ns.max(ns);
        }
        self.moments.add(ns as f64);
    }

    /// Adds all samples of `other` (group reporting).
    pub fn merge(&mut self, other: &LatencyStats) {
        if other.count() == 0 {
            return;
        }
        let _ = self.hist.add(&other.hist);
        for (a, b) in self.fio_buckets.iter_mut().zip(&other.fio_buckets) {
            *a += b;
        }
        if self.moments.count() == 0 {
            self.min_ns = other.min_ns;
            self.max_ns = other.max_ns;
        } else {
            self.min_ns = self.min_ns.min(other.min_ns);
            self.max_ns = self.max_ns.max(other.max_ns);
        }
        self.moments.merge(&other.moments);
    }

    /// Number of samples (fio `N`).
    pub fn count(&self) -> u64 {
        self.moments.count()
    }
    /// Smallest latency, ns (0 when empty).
    pub fn min_ns(&self) -> u64 {
        self.min_ns
    }
    /// Largest latency, ns (0 when empty).
    pub fn max_ns(&self) -> u64 {
        self.max_ns
    }
    /// Mean latency, ns.
    pub fn mean_ns(&self) -> f64 {
        self.moments.mean()
    }
    /// Sample standard deviation, ns.
    pub fn stddev_ns(&self) -> f64 {
        self.moments.stddev()
    }
    /// Samples per fio latency bucket (see [`fio_lat_bucket`]), exact.
    pub fn fio_buckets(&self) -> &[u64; FIO_LAT_BUCKETS] {
        &self.fio_buckets
    }

    /// The latency at `percent` (0-100], ns: the sample at that rank, to 3
    /// significant digits (the lowest value of its histogram bucket: exact below
    /// 2048 ns and for whole microseconds below 16 us); the exact min or max when
    /// the sample shares their bucket; 0 when empty.
    pub fn percentile_ns(&self, percent: f64) -> u64 {
        if self.count() == 0 {
            return 0;
        }
        let v = self.hist.value_at_quantile(percent / 100.0);
        if self.hist.equivalent(v, self.max_ns) {
            return self.max_ns;
        }
        if self.hist.equivalent(v, self.min_ns) {
            return self.min_ns;
        }
        self.hist
            .lowest_equivalent(v)
            .clamp(self.min_ns, self.max_ns)
    }
}

/// Per-direction counters of one job (or of the group).
#[derive(Debug, Clone, Default)]
pub struct DirStats {
    /// Completed I/Os (fio `total_ios`).
    pub ios: u64,
    /// Bytes transferred (fio `io_bytes`).
    pub bytes: u64,
    /// Completion latency.
    pub clat: LatencyStats,
    /// Bandwidth samples in KiB/s, one per [`SAMPLE_INTERVAL`] (fio `bw_*`).
    pub bw_kib_samples: Moments,
    /// IOPS samples, one per [`SAMPLE_INTERVAL`] (fio `iops_*`).
    pub iops_samples: Moments,
}

impl DirStats {
    /// Adds `other`'s counts and latencies (group reporting). Samples are merged as
    /// fio's group does: as a pool of per-job samples.
    pub fn merge(&mut self, other: &DirStats) {
        self.ios += other.ios;
        self.bytes += other.bytes;
        self.clat.merge(&other.clat);
        self.bw_kib_samples.merge(&other.bw_kib_samples);
        self.iops_samples.merge(&other.iops_samples);
    }
}

/// Accumulates completions into [`SAMPLE_INTERVAL`] windows and turns each closed
/// window into one bandwidth and one IOPS sample.
#[derive(Debug, Clone, Default)]
pub struct Sampler {
    window_ns: u64,
    bytes: [u64; 2],
    ios: [u64; 2],
}

impl Sampler {
    /// Counts one completion of `bytes` in direction `dir` (0 = read, 1 = write).
    pub fn add(&mut self, dir: usize, bytes: u64) {
        self.bytes[dir] += bytes;
        self.ios[dir] += 1;
    }

    /// Advances the window by `elapsed_ns`; when a window closes, adds its samples to
    /// `dirs` for each direction that did I/O in this job (`active[dir]`).
    pub fn advance(&mut self, elapsed_ns: u64, active: [bool; 2], dirs: &mut [DirStats; 2]) {
        self.window_ns += elapsed_ns;
        let interval = SAMPLE_INTERVAL.as_nanos() as u64;
        if self.window_ns < interval {
            return;
        }
        let secs = self.window_ns as f64 / 1e9;
        for d in 0..2 {
            if active[d] {
                dirs[d]
                    .bw_kib_samples
                    .add((self.bytes[d] as f64 / 1024.0 / secs).floor());
                dirs[d]
                    .iops_samples
                    .add((self.ios[d] as f64 / secs).floor());
            }
        }
        *self = Sampler::default();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn moments_match_direct_computation() {
        let xs = [7.0, 9.0, 10.0, 10.0, 12.0, 412.0];
        let mut m = Moments::default();
        xs.iter().for_each(|&x| m.add(x));
        let mean = xs.iter().sum::<f64>() / 6.0;
        let var = xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / 5.0;
        assert!((m.mean() - mean).abs() < 1e-9);
        assert!((m.stddev() - var.sqrt()).abs() < 1e-9);
        assert_eq!((m.min(), m.max(), m.count()), (7.0, 412.0, 6));

        let mut a = Moments::default();
        let mut b = Moments::default();
        xs[..2].iter().for_each(|&x| a.add(x));
        xs[2..].iter().for_each(|&x| b.add(x));
        a.merge(&b);
        assert!((a.stddev() - m.stddev()).abs() < 1e-9);
        assert!((a.mean() - m.mean()).abs() < 1e-9);
        assert_eq!((a.min(), a.max(), a.count()), (7.0, 412.0, 6));
    }

    #[test]
    fn percentiles_on_known_data() {
        // 1..=1000 microseconds, one sample each.
        let mut s = LatencyStats::new();
        for us in 1..=1000u64 {
            s.record(us * 1000);
        }
        assert_eq!(s.count(), 1000);
        assert_eq!(s.min_ns(), 1000);
        assert_eq!(s.max_ns(), 1_000_000);
        assert!((s.mean_ns() - 500_500.0).abs() < 1e-6);
        // 3 significant digits: within 0.1% of the exact rank value.
        for (p, exact) in [
            (50.0, 500_000u64),
            (90.0, 900_000),
            (99.0, 990_000),
            (99.9, 999_000),
        ] {
            let v = s.percentile_ns(p);
            assert!(
                v.abs_diff(exact) <= exact / 1000 + 1,
                "p{p}: {v} vs {exact}"
            );
        }
        assert_eq!(s.percentile_ns(100.0), 1_000_000);
        assert_eq!(LatencyStats::new().percentile_ns(50.0), 0);
    }

    #[test]
    fn merged_latency_equals_combined() {
        let mut a = LatencyStats::new();
        let mut b = LatencyStats::new();
        for v in [5_000u64, 6_000, 7_000] {
            a.record(v);
        }
        for v in [1_000u64, 90_000] {
            b.record(v);
        }
        a.merge(&b);
        assert_eq!(a.count(), 5);
        assert_eq!(a.min_ns(), 1_000);
        assert_eq!(a.max_ns(), 90_000);
        assert!((a.mean_ns() - 21_800.0).abs() < 1e-6);
        assert!(
            a.percentile_ns(50.0).abs_diff(6_000) <= 6,
            "{}",
            a.percentile_ns(50.0)
        );
        assert_eq!(a.percentile_ns(100.0), 90_000);
    }

    #[test]
    fn fio_latency_buckets() {
        assert_eq!(fio_lat_bucket(0), 0);
        assert_eq!(fio_lat_bucket(3), 1);
        assert_eq!(fio_lat_bucket(999), 9);
        assert_eq!(fio_lat_bucket(1_000), 10);
        assert_eq!(fio_lat_bucket(10_000), 13);
        assert_eq!(fio_lat_bucket(49_999), 14);
        assert_eq!(fio_lat_bucket(50_000), 15);
        assert_eq!(fio_lat_bucket(999_999), 19);
        assert_eq!(fio_lat_bucket(1_000_000), 20);
        assert_eq!(fio_lat_bucket(999_000_000), 29);
        assert_eq!(fio_lat_bucket(1_500_000_000), 30);
        assert_eq!(fio_lat_bucket(2_000_000_000), 31);
    }

    #[test]
    fn sampler_closes_windows_of_500ms() {
        let mut dirs: [DirStats; 2] = Default::default();
        let mut s = Sampler::default();
        for _ in 0..1000 {
            s.add(0, 4096);
        }
        s.advance(400_000_000, [true, false], &mut dirs);
        assert_eq!(dirs[0].iops_samples.count(), 0);
        s.advance(100_000_000, [true, false], &mut dirs);
        assert_eq!(dirs[0].iops_samples.count(), 1);
        assert_eq!(dirs[0].iops_samples.mean(), 2000.0);
        assert_eq!(dirs[0].bw_kib_samples.mean(), 8000.0);
        assert_eq!(dirs[1].iops_samples.count(), 0);
    }
}
