//! Statistics of one job and direction with fio's definitions (stat.c, io_u.c):
//! submission, completion and total latency, I/O counts, bandwidth and IOPS samples.
//!
//! Latencies are nanoseconds. Running min/max/mean/deviation are fio's `io_stat`
//! (`add_stat_sample`: Welford's update, the sample deviation); completion latency and
//! sync latency also keep fio's histogram ([`PlatHistogram`]), from which percentiles
//! come exactly as fio computes them.

use std::time::Instant;

use crate::histogram::PlatHistogram;

/// fio's default percentile list (`percentile_list`), in percent.
pub const FIO_PERCENTILES: [f64; 17] = [
    1.0, 5.0, 10.0, 20.0, 30.0, 40.0, 50.0, 60.0, 70.0, 80.0, 90.0, 95.0, 99.0, 99.5, 99.9, 99.95,
    99.99,
];

/// Most entries a `percentile_list` may have (`FIO_IO_U_LIST_MAX_LEN`).
pub const MAX_PERCENTILES: usize = 20;

/// fio's default bandwidth and IOPS sampling interval (`bwavgtime`, `iopsavgtime`), ms.
pub const SAMPLE_INTERVAL_MS: u64 = 500;

/// fio's `LOG_MSEC_SLACK`: a sample window this close to its end counts as ended, ms.
pub const LOG_MSEC_SLACK: u64 = 1;

/// Number of directions fio reports: read, write, trim (`DDIR_RWDIR_CNT`).
pub const DDIR_COUNT: usize = 3;

/// Running min/max/mean/standard deviation of samples (fio's `io_stat`), mergeable two
/// ways: as a pool (Chan et al., fio's `__sum_stat`) or, for bandwidth and IOPS under
/// group reporting, by adding min, max and mean (fio's `sum_stat` with `pure_sum`).
/// The deviation is the sample standard deviation (n - 1), as fio's.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Moments {
    n: u64,
    min: f64,
    max: f64,
    mean: f64,
    m2: f64,
}

impl Moments {
    /// Adds one sample (fio's `add_stat_sample`).
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
        if d != 0.0 {
            self.mean += d / self.n as f64;
            self.m2 += d * (x - self.mean);
        }
    }

    /// Adds all samples of `other` as one pool.
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
        self.mean = (other.mean * other.n as f64 + self.mean * self.n as f64) / n as f64;
        self.n = n;
        self.min = self.min.min(other.min);
        self.max = self.max.max(other.max);
    }

    /// Adds `other` as fio sums bandwidth and IOPS over a group's jobs: min, max, mean
    /// and the squared-deviation sum add up (the group's figures are per-second totals).
    pub fn add_pure(&mut self, other: &Moments) {
        if other.n == 0 {
            return;
        }
        if self.n == 0 {
            *self = *other;
            return;
        }
        self.min += other.min;
        self.max += other.max;
        self.n += other.n;
        self.mean += other.mean;
        self.m2 += other.m2;
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

/// The fio latency bucket of `ns` (io_u.c `io_u_mark_latency`): buckets 0-9 in ns,
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

/// A latency distribution in nanoseconds: fio's `io_stat`, and for completion and sync
/// latencies fio's histogram.
#[derive(Debug, Clone, Default)]
pub struct LatencyStats {
    moments: Moments,
    min_ns: u64,
    max_ns: u64,
    hist: Option<PlatHistogram>,
}

impl LatencyStats {
    /// An empty distribution with a histogram (percentiles).
    pub fn new() -> Self {
        Self {
            hist: Some(PlatHistogram::new()),
            ..Self::default()
        }
    }

    /// An empty distribution without percentiles (fio's slat and lat by default).
    pub fn without_histogram() -> Self {
        Self::default()
    }

    /// Records one latency in nanoseconds.
    pub fn record(&mut self, ns: u64) {
        if let Some(h) = self.hist.as_mut() {
            h.record(ns);
        }
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
        if let (Some(a), Some(b)) = (self.hist.as_mut(), other.hist.as_ref()) {
            a.merge(b);
        }
        if other.count() == 0 {
            return;
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
    /// The histogram, when this distribution keeps one.
    pub fn histogram(&self) -> Option<&PlatHistogram> {
        self.hist.as_ref()
    }

    /// fio's values for the percentiles of `sorted` (ascending, in percent): empty
    /// without a histogram or samples.
    pub fn percentiles_ns(&self, sorted: &[f64]) -> Vec<u64> {
        match &self.hist {
            Some(h) => h.percentiles(sorted, self.count()),
            None => Vec::new(),
        }
    }

    /// One percentile (in percent), as fio reports it; 0 when empty or without a
    /// histogram.
    pub fn percentile_ns(&self, percent: f64) -> u64 {
        self.percentiles_ns(&[percent])
            .first()
            .copied()
            .unwrap_or(0)
    }
}

/// Per-direction counters of one job (or of a reporting group): fio's per-`ddir`
/// parts of `thread_stat`.
#[derive(Debug, Clone)]
pub struct DirStats {
    /// I/Os issued (fio `total_io_u`, the `issued rwts` and `total_ios` figure).
    pub issued: u64,
    /// I/Os completed successfully.
    pub ios: u64,
    /// Bytes transferred by completed I/Os (fio `io_bytes`).
    pub bytes: u64,
    /// Submission latency: before the submit call to its return (the capsule SEND
    /// posted).
    pub slat: LatencyStats,
    /// Completion latency: from the submit call's return to the completion seen.
    pub clat: LatencyStats,
    /// Total latency: slat + clat.
    pub lat: LatencyStats,
    /// Bandwidth samples in KiB/s, one per sample window with I/O (fio `bw_*`).
    pub bw_kib_samples: Moments,
    /// IOPS samples, one per sample window with I/O (fio `iops_*`).
    pub iops_samples: Moments,
}

impl Default for DirStats {
    fn default() -> Self {
        Self {
            issued: 0,
            ios: 0,
            bytes: 0,
            slat: LatencyStats::without_histogram(),
            clat: LatencyStats::new(),
            lat: LatencyStats::without_histogram(),
            bw_kib_samples: Moments::default(),
            iops_samples: Moments::default(),
        }
    }
}

impl DirStats {
    /// Records one completed I/O of `bytes` with its submission and completion
    /// latencies.
    pub fn record(&mut self, bytes: u64, slat_ns: u64, clat_ns: u64) {
        self.ios += 1;
        self.bytes += bytes;
        self.slat.record(slat_ns);
        self.clat.record(clat_ns);
        self.lat.record(slat_ns.saturating_add(clat_ns));
    }

    /// Adds `other` as fio's group reporting does (`sum_thread_stats`): counts and
    /// latencies pooled, bandwidth and IOPS samples summed.
    pub fn merge(&mut self, other: &DirStats) {
        self.issued += other.issued;
        self.ios += other.ios;
        self.bytes += other.bytes;
        self.slat.merge(&other.slat);
        self.clat.merge(&other.clat);
        self.lat.merge(&other.lat);
        self.bw_kib_samples.add_pure(&other.bw_kib_samples);
        self.iops_samples.add_pure(&other.iops_samples);
    }
}

/// fio's bandwidth and IOPS sampler of one job (stat.c `__add_samples`): every
/// `interval_ms` (fio's `bwavgtime`, 500 ms), each direction that moved data since
/// the last sample adds one bandwidth (KiB/s) and one IOPS sample over the time
/// since; a direction that moved nothing adds none (so a failed or finished direction
/// stops sampling, and a job's samples never hold idle zeros).
#[derive(Debug, Clone)]
pub struct Sampler {
    interval_ms: u64,
    last: Option<Instant>,
    bytes: [u64; DDIR_COUNT],
    ios: [u64; DDIR_COUNT],
}

impl Sampler {
    /// A sampler with windows of `interval_ms` (at least 1).
    pub fn new(interval_ms: u64) -> Self {
        Self {
            interval_ms: interval_ms.max(1),
            last: None,
            bytes: [0; DDIR_COUNT],
            ios: [0; DDIR_COUNT],
        }
    }

    /// Starts the first window at `now` with the counters as they are (fio resets them
    /// when the ramp ends).
    pub fn start(&mut self, now: Instant, dirs: &[DirStats; DDIR_COUNT]) {
        self.last = Some(now);
        for (d, s) in dirs.iter().enumerate() {
            self.bytes[d] = s.bytes;
            self.ios[d] = s.ios;
        }
    }

    /// Closes the window if it is over at `now` (within [`LOG_MSEC_SLACK`]), adding
    /// its samples to `dirs`; returns, when it closed, each direction's sample
    /// `(KiB/s, IOPS)` (`None` for a direction that moved nothing).
    pub fn tick(
        &mut self,
        now: Instant,
        dirs: &mut [DirStats; DDIR_COUNT],
    ) -> Option<[Option<(u64, u64)>; DDIR_COUNT]> {
        let last = self.last?;
        let spent = now.saturating_duration_since(last).as_millis() as u64;
        if spent < self.interval_ms && self.interval_ms - spent > LOG_MSEC_SLACK {
            return None;
        }
        let mut out = [None; DDIR_COUNT];
        for (d, s) in dirs.iter_mut().enumerate() {
            let db = s.bytes - self.bytes[d];
            let di = s.ios - self.ios[d];
            if db == 0 {
                continue;
            }
            let bw = (db * 1000).checked_div(spent).unwrap_or(0) / 1024;
            let iops = (di * 1000).checked_div(spent).unwrap_or(0);
            s.bw_kib_samples.add(bw as f64);
            s.iops_samples.add(iops as f64);
            out[d] = Some((bw, iops));
            self.bytes[d] = s.bytes;
            self.ios[d] = s.ios;
        }
        self.last = Some(now);
        Some(out)
    }
}

/// fio's I/O depth buckets (`io_u_mark_depth`): 1, 2-3, 4-7, 8-15, 16-31, 32-63, >= 64
/// outstanding.
pub fn depth_bucket(outstanding: usize) -> usize {
    match outstanding {
        0 | 1 => 0,
        2..=3 => 1,
        4..=7 => 2,
        8..=15 => 3,
        16..=31 => 4,
        32..=63 => 5,
        _ => 6,
    }
}

/// fio's submit and complete buckets (`__io_u_mark_map`): 0, 1-4, 5-8, 9-16, 17-32,
/// 33-64, > 64 I/Os in one call.
pub fn batch_bucket(n: usize) -> usize {
    match n {
        0 => 0,
        1..=4 => 1,
        5..=8 => 2,
        9..=16 => 3,
        17..=32 => 4,
        33..=64 => 5,
        _ => 6,
    }
}

/// fio's depth distributions of one job: `IO depths` (`io_u_map`), `submit` and
/// `complete` (`io_u_submit`, `io_u_complete` with their call counts).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DepthStats {
    /// I/Os issued by the queue depth they reached ([`depth_bucket`]).
    pub map: [u64; 7],
    /// Submission rounds by how many I/Os they issued ([`batch_bucket`]).
    pub submit: [u64; 7],
    /// Submission rounds.
    pub total_submit: u64,
    /// Polls that completed I/Os, by how many ([`batch_bucket`]).
    pub complete: [u64; 7],
    /// Polls that completed I/Os.
    pub total_complete: u64,
}

impl DepthStats {
    /// Adds `other` (group reporting).
    pub fn merge(&mut self, other: &DepthStats) {
        for i in 0..7 {
            self.map[i] += other.map[i];
            self.submit[i] += other.submit[i];
            self.complete[i] += other.complete[i];
        }
        self.total_submit += other.total_submit;
        self.total_complete += other.total_complete;
    }
}

/// fio's `stat_calc_dist`: each count as a percentage of `total`, 0.1 at least for a
/// nonzero count.
pub fn calc_dist(counts: &[u64], total: u64) -> Vec<f64> {
    percentages(counts, total, 0.1)
}

/// fio's `stat_calc_lat`: each count as a percentage of `total`, 0.01 at least for a
/// nonzero count.
pub fn calc_lat(counts: &[u64], total: u64) -> Vec<f64> {
    percentages(counts, total, 0.01)
}

fn percentages(counts: &[u64], total: u64, floor: f64) -> Vec<f64> {
    counts
        .iter()
        .map(|&n| {
            if total == 0 {
                return 0.0;
            }
            let p = n as f64 / total as f64 * 100.0;
            if p < floor && n > 0 {
                floor
            } else {
                p
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

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
    fn group_bandwidth_adds_up_as_fio_does() {
        let mut a = Moments::default();
        let mut b = Moments::default();
        [100.0, 200.0].iter().for_each(|&x| a.add(x));
        [1000.0, 3000.0].iter().for_each(|&x| b.add(x));
        let mut g = Moments::default();
        g.add_pure(&a);
        g.add_pure(&b);
        assert_eq!(g.count(), 4);
        assert_eq!(g.mean(), 150.0 + 2000.0);
        assert_eq!((g.min(), g.max()), (1100.0, 3200.0));
    }

    #[test]
    fn percentiles_come_from_fio_buckets() {
        let mut s = LatencyStats::new();
        for us in 1..=1000u64 {
            s.record(us * 1000);
        }
        assert_eq!(s.count(), 1000);
        assert_eq!((s.min_ns(), s.max_ns()), (1000, 1_000_000));
        assert!((s.mean_ns() - 500_500.0).abs() < 1e-6);
        // Within a bucket's width (1/64) of the exact rank value.
        for (p, exact) in [(50.0, 500_000u64), (90.0, 900_000), (99.0, 990_000)] {
            let v = s.percentile_ns(p);
            assert!(v.abs_diff(exact) <= exact / 64, "p{p}: {v} vs {exact}");
        }
        assert_eq!(LatencyStats::new().percentile_ns(50.0), 0);
        assert_eq!(LatencyStats::without_histogram().percentile_ns(50.0), 0);
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
    fn sampler_skips_windows_without_io() {
        let mut dirs: [DirStats; 3] = Default::default();
        let t0 = Instant::now();
        let mut s = Sampler::new(500);
        s.start(t0, &dirs);
        for _ in 0..1000 {
            dirs[0].record(4096, 100, 1000);
        }
        assert!(s.tick(t0 + Duration::from_millis(400), &mut dirs).is_none());
        let samples = s.tick(t0 + Duration::from_millis(500), &mut dirs).unwrap();
        assert_eq!(samples, [Some((8000, 2000)), None, None]);
        assert_eq!(dirs[0].iops_samples.count(), 1);
        assert_eq!(dirs[0].iops_samples.mean(), 2000.0);
        assert_eq!(dirs[0].bw_kib_samples.mean(), 8000.0);
        assert_eq!(dirs[1].iops_samples.count(), 0);
        // A window with no I/O adds no sample (no zeros after a failure).
        assert_eq!(
            s.tick(t0 + Duration::from_millis(1000), &mut dirs),
            Some([None; 3])
        );
        assert_eq!(dirs[0].iops_samples.count(), 1);
    }

    #[test]
    fn depth_and_batch_buckets() {
        assert_eq!(depth_bucket(1), 0);
        assert_eq!(depth_bucket(4), 2);
        assert_eq!(depth_bucket(64), 6);
        assert_eq!(batch_bucket(0), 0);
        assert_eq!(batch_bucket(4), 1);
        assert_eq!(batch_bucket(5), 2);
        assert_eq!(batch_bucket(65), 6);
        assert_eq!(calc_dist(&[1, 999], 1000), vec![0.1, 99.9]);
        assert_eq!(calc_lat(&[1, 0], 100_000), vec![0.01, 0.0]);
    }
}
