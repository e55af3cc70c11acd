//! fio's latency histogram (stat.c `plat_val_to_idx`, `plat_idx_to_val`,
//! `calc_clat_percentiles`), so that percentiles are fio's to the bucket.
//!
//! Values (nanoseconds) below 128 have a bucket each; above, each power of two is cut
//! into 64 buckets (`FIO_IO_U_PLAT_BITS = 6`), so a bucket is at most 1/64 of its value
//! wide (a relative error under 1.6 %); 29 groups (`FIO_IO_U_PLAT_GROUP_NR`) of 64
//! buckets reach about 17 s, and larger values share the last bucket. A percentile is
//! the value that stands for the bucket holding that rank: the bucket's index below 128,
//! its middle above (fio's `plat_idx_to_val`).

/// Bits of a value kept exact inside its power of two (`FIO_IO_U_PLAT_BITS`).
pub const PLAT_BITS: u32 = 6;
/// Buckets per power of two (`FIO_IO_U_PLAT_VAL`).
pub const PLAT_VAL: usize = 1 << PLAT_BITS;
/// Groups of [`PLAT_VAL`] buckets (`FIO_IO_U_PLAT_GROUP_NR`).
pub const PLAT_GROUP_NR: usize = 29;
/// Buckets in all (`FIO_IO_U_PLAT_NR`).
pub const PLAT_NR: usize = PLAT_GROUP_NR * PLAT_VAL;

/// The bucket of `ns` (fio's `plat_val_to_idx`).
pub fn bucket_index(ns: u64) -> usize {
    let msb = if ns == 0 { 0 } else { 63 - ns.leading_zeros() };
    if msb <= PLAT_BITS {
        return ns as usize;
    }
    let error_bits = msb - PLAT_BITS;
    let base = ((error_bits + 1) as usize) << PLAT_BITS;
    let offset = (PLAT_VAL - 1) & (ns >> error_bits) as usize;
    (base + offset).min(PLAT_NR - 1)
}

/// The value that stands for bucket `idx` (fio's `plat_idx_to_val`): the index itself
/// below 128, else the middle of the bucket's range.
pub fn bucket_value(idx: usize) -> u64 {
    let idx = idx.min(PLAT_NR - 1);
    if idx < (PLAT_VAL << 1) {
        return idx as u64;
    }
    let error_bits = (idx >> PLAT_BITS) as u32 - 1;
    let base = 1u64 << (error_bits + PLAT_BITS);
    let k = (idx % PLAT_VAL) as u64;
    // (k + 0.5) * 2^error_bits, exact since error_bits >= 1.
    base + (2 * k + 1) * (1u64 << (error_bits - 1))
}

/// Whether `sum` samples reach `percent` % of `total` (`sum >= percent / 100 * total`),
/// decided exactly (fio computes it in `long double`).
fn reaches(sum: u64, percent: f64, total: u64) -> bool {
    if !percent.is_finite() || percent <= 0.0 {
        return true;
    }
    // percent = mantissa * 2^exp exactly.
    let bits = percent.to_bits();
    let raw_exp = ((bits >> 52) & 0x7ff) as i32;
    let (mantissa, exp) = if raw_exp == 0 {
        (bits & ((1 << 52) - 1), -1074)
    } else {
        ((bits & ((1 << 52) - 1)) | (1 << 52), raw_exp - 1075)
    };
    let lhs = u128::from(sum) * 100;
    let rhs = u128::from(mantissa) * u128::from(total);
    if exp >= 0 {
        match rhs.checked_shl(exp as u32) {
            Some(r) if r >> exp == rhs => lhs >= r,
            _ => false,
        }
    } else if -exp < 60 {
        (lhs << (-exp) as u32) >= rhs
    } else {
        sum as f64 >= percent / 100.0 * total as f64
    }
}

/// A latency histogram in fio's buckets; see the module docs.
#[derive(Clone, PartialEq, Eq)]
pub struct PlatHistogram {
    buckets: Box<[u64]>,
    total: u64,
}

impl std::fmt::Debug for PlatHistogram {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PlatHistogram")
            .field("total", &self.total)
            .field("nonzero_buckets", &self.nonzero().count())
            .finish()
    }
}

impl Default for PlatHistogram {
    fn default() -> Self {
        Self::new()
    }
}

impl PlatHistogram {
    /// An empty histogram (15 KiB of counters).
    pub fn new() -> Self {
        Self {
            buckets: vec![0; PLAT_NR].into_boxed_slice(),
            total: 0,
        }
    }

    /// Counts one value, nanoseconds.
    pub fn record(&mut self, ns: u64) {
        self.buckets[bucket_index(ns)] += 1;
        self.total += 1;
    }

    /// Adds every count of `other` (group reporting).
    pub fn merge(&mut self, other: &PlatHistogram) {
        for (a, b) in self.buckets.iter_mut().zip(other.buckets.iter()) {
            *a += b;
        }
        self.total += other.total;
    }

    /// Adds `count` values in bucket `idx` (a histogram kept as its nonzero buckets).
    pub fn add_bucket(&mut self, idx: usize, count: u64) {
        self.buckets[idx.min(PLAT_NR - 1)] += count;
        self.total += count;
    }

    /// Empties the histogram.
    pub fn clear(&mut self) {
        if self.total != 0 {
            self.buckets.fill(0);
            self.total = 0;
        }
    }

    /// Values counted.
    pub fn count(&self) -> u64 {
        self.total
    }

    /// The nonzero buckets, `(index, count)`, in order.
    pub fn nonzero(&self) -> impl Iterator<Item = (usize, u64)> + '_ {
        self.buckets
            .iter()
            .enumerate()
            .filter(|(_, &n)| n != 0)
            .map(|(i, &n)| (i, n))
    }

    /// fio's `calc_clat_percentiles`: the value of each percentile of `sorted` (in
    /// percent, ascending, each in (0, 100]) over `samples` values, as fio reports
    /// them. Empty when nothing was counted.
    pub fn percentiles(&self, sorted: &[f64], samples: u64) -> Vec<u64> {
        let mut out = Vec::with_capacity(sorted.len());
        if samples == 0 || sorted.is_empty() {
            return out;
        }
        let mut sum = 0u64;
        let mut j = 0;
        for (i, &n) in self.buckets.iter().enumerate() {
            sum += n;
            while j < sorted.len() && reaches(sum, sorted[j], samples) {
                out.push(bucket_value(i));
                j += 1;
            }
            if j == sorted.len() {
                break;
            }
        }
        // Percentiles past every sample (a sample count above the buckets' total)
        // take the last bucket's value, as fio's loop would not reach them.
        while out.len() < sorted.len() {
            out.push(bucket_value(PLAT_NR - 1));
        }
        out
    }

    /// One percentile (in percent) over all counted values; 0 when empty.
    pub fn percentile(&self, percent: f64) -> u64 {
        self.percentiles(&[percent], self.total)
            .first()
            .copied()
            .unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_follow_fio() {
        for v in 0..128u64 {
            assert_eq!(bucket_index(v), v as usize);
            assert_eq!(bucket_value(v as usize), v);
        }
        // 128..255 are 2 wide: 128 and 129 share bucket 128, whose value is 128 + 1.
        assert_eq!(bucket_index(128), 128);
        assert_eq!(bucket_index(129), 128);
        assert_eq!(bucket_value(128), 129);
        assert_eq!(bucket_index(255), 191);
        assert_eq!(bucket_index(256), 192);
        // fio printed 5536 for values in [5504, 5568) (64 wide from 4096: 4096+22*64).
        assert_eq!(bucket_value(bucket_index(5536)), 5536);
        assert_eq!(bucket_value(bucket_index(5504)), 5536);
        // The percentile values fio printed in this machine's runs are bucket values.
        for v in [60672u64, 123392, 3391488, 8585216, 80, 141, 211] {
            assert_eq!(bucket_value(bucket_index(v)), v, "{v}");
        }
        assert_eq!(bucket_index(u64::MAX), PLAT_NR - 1);
        for i in 0..PLAT_NR {
            assert_eq!(bucket_index(bucket_value(i)), i, "bucket {i}");
        }
    }

    #[test]
    fn percentiles_are_the_bucket_holding_the_rank() {
        let mut h = PlatHistogram::new();
        for v in 1..=100u64 {
            h.record(v);
        }
        assert_eq!(h.count(), 100);
        // 50 % of 100 samples: the 50th value.
        assert_eq!(
            h.percentiles(&[1.0, 50.0, 99.0, 100.0], 100),
            vec![1, 50, 99, 100]
        );
        // 99.9 % of 100 is 99.9: reached only by the 100th sample.
        assert_eq!(h.percentile(99.9), 100);
        assert_eq!(PlatHistogram::new().percentile(50.0), 0);
        let mut g = PlatHistogram::new();
        g.record(1_000_000);
        h.merge(&g);
        assert_eq!(h.count(), 101);
        assert_eq!(h.percentile(100.0), bucket_value(bucket_index(1_000_000)));
        h.clear();
        assert_eq!(h.count(), 0);
    }

    #[test]
    fn exact_comparison_at_ties() {
        assert!(reaches(500, 50.0, 1000));
        assert!(!reaches(499, 50.0, 1000));
        // 99.9 % of 1000 is 999 in decimal, a hair above it in binary.
        assert!(!reaches(999, 99.9, 1000));
        assert!(reaches(1000, 99.9, 1000));
        assert!(reaches(3, 0.000_000_1, 10));
    }
}
