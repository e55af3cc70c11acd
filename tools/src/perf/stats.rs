//! perftest's result arithmetic and table lines (`print_report_bw`,
//! `print_report_lat` and the `RESULT_FMT*` / `REPORT_FMT*` formats of perftest 4.5),
//! over timestamps in nanoseconds. No I/O.
//!
//! - Bandwidth: BW average = bytes moved / (last completion - first post); BW peak = the
//!   message size over the shortest per-message time of any run of messages that ends
//!   on a signalled completion (every `cq_mod`-th and the last); MsgRate in Mpps. MB/sec
//!   is MiB/s (2^20 bytes), Gb/sec is 10^9 bits.
//! - Latency: the deltas between consecutive posts (`iters - 1` of them), halved for
//!   SEND and WRITE (round trip / 2; READ is one-sided), sorted, the 2 largest dropped;
//!   t_typical is the median, t_max the largest kept, 99% / 99.9% at `ceil(n * p)`.
//!   t_stdev is the population standard deviation of the kept deltas (perftest rounds
//!   each difference to whole microseconds first, which makes it 0 below 1 us; here it
//!   is not rounded).
use super::oob::BwReport;

/// perftest's `RESULT_LINE`.
pub const RESULT_LINE: &str =
    "---------------------------------------------------------------------------------------";

/// C's `%#0*x` as perftest's address lines use it (`%#04x`, `%#06x`, ...): `0x` and
/// the digits zero-padded to `width` characters in all, except for 0, which C prints
/// without the prefix (`0000`).
pub fn c_alt_hex(v: u64, width: usize) -> String {
    if v == 0 {
        format!("{:0width$}", 0)
    } else {
        format!("{v:#0width$x}")
    }
}

/// The bandwidth table's header (`RESULT_FMT` / `RESULT_FMT_G`).
pub fn bw_header(gbits: bool) -> &'static str {
    if gbits {
        " #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]"
    } else {
        " #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]"
    }
}

/// The latency table's header (`RESULT_FMT_LAT`).
pub const LAT_HEADER: &str = " #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec] ";

/// Bytes per reported unit: MiB for MB/sec, 10^9 / 8 for Gb/sec.
fn format_factor(gbits: bool) -> f64 {
    if gbits {
        125_000_000.0
    } else {
        1_048_576.0
    }
}

/// The bandwidth result of `n` messages of `size` bytes, from when each was posted
/// (`posted[i]`) and when its completion was seen (`completed[i]`; the entries of one
/// signalled batch share its time), in ns. `cq_mod` is the signalling interval;
/// `peak` false reports a peak of 0 (perftest's `-N`, and duration mode).
///
/// `n == 0` or mismatched lengths give an all-zero report.
pub fn bw_report(
    size: u64,
    posted: &[u64],
    completed: &[u64],
    cq_mod: usize,
    gbits: bool,
    peak: bool,
) -> BwReport {
    let n = posted.len().min(completed.len());
    if n == 0 {
        return BwReport {
            size,
            ..Default::default()
        };
    }
    let ff = format_factor(gbits);
    let cq_mod = cq_mod.max(1);
    let total = completed[n - 1].saturating_sub(posted[0]).max(1) as f64;
    let bw_avg = size as f64 * n as f64 * 1e9 / (total * ff);
    let msg_rate = n as f64 * 1e9 / (total * 1e6);
    let bw_peak = if peak {
        let mut opt = completed[0].saturating_sub(posted[0]);
        let mut try_run = |i: usize, j: usize| {
            let t = completed[j].saturating_sub(posted[i]) / (j - i + 1) as u64;
            opt = opt.min(t);
        };
        for i in 0..n {
            let mut j = (i + 1).div_ceil(cq_mod) * cq_mod - 1;
            while j < n {
                try_run(i, j);
                j += cq_mod;
            }
            if !n.is_multiple_of(cq_mod) {
                try_run(i, n - 1);
            }
        }
        size as f64 * 1e9 / (opt.max(1) as f64 * ff)
    } else {
        0.0
    };
    BwReport {
        size,
        iters: n as u64,
        bw_peak,
        bw_avg,
        msg_rate,
    }
}

/// The bandwidth result of a timed run (`-D`): `n` messages in `elapsed_ns`, no peak.
pub fn bw_report_duration(size: u64, n: u64, elapsed_ns: u64, gbits: bool) -> BwReport {
    let t = elapsed_ns.max(1) as f64;
    BwReport {
        size,
        iters: n,
        bw_peak: 0.0,
        bw_avg: size as f64 * n as f64 * 1e9 / (t * format_factor(gbits)),
        msg_rate: n as f64 * 1e9 / (t * 1e6),
    }
}

/// A bandwidth row as perftest prints it (`REPORT_FMT`, or `REPORT_FMT_EXT` with six
/// decimals when the average is below 0.1 Gb/sec).
pub fn bw_row(r: &BwReport, gbits: bool) -> String {
    if gbits && r.bw_avg < 0.1 {
        format!(
            " {:<7}    {}           {:<7.6}            {:<7.6}            {:<7.6}",
            r.size, r.iters, r.bw_peak, r.bw_avg, r.msg_rate
        )
    } else {
        format!(
            " {:<7}    {:<10}       {:<7.2}            {:<7.2}\t\t   {:<7.6}",
            r.size, r.iters, r.bw_peak, r.bw_avg, r.msg_rate
        )
    }
}

/// A latency result, microseconds.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct LatReport {
    /// Message size, bytes.
    pub size: u64,
    /// Iterations run.
    pub iters: u64,
    /// Smallest.
    pub t_min: f64,
    /// Largest kept (the two largest are dropped).
    pub t_max: f64,
    /// Median.
    pub t_typical: f64,
    /// Mean.
    pub t_avg: f64,
    /// Standard deviation.
    pub t_stdev: f64,
    /// 99th percentile.
    pub p99: f64,
    /// 99.9th percentile.
    pub p999: f64,
}

/// Deltas dropped from the top of the sorted list (`LAT_MEASURE_TAIL`).
const LAT_MEASURE_TAIL: usize = 2;

/// The latency result of `posted` (ns, one stamp per iteration), halved when
/// `round_trip` (SEND, WRITE). `None` with fewer than 4 stamps (nothing left once the
/// tail is dropped).
pub fn lat_report(size: u64, posted: &[u64], round_trip: bool) -> Option<LatReport> {
    let factor = if round_trip { 2000.0 } else { 1000.0 };
    let mut d: Vec<u64> = posted
        .windows(2)
        .map(|w| w[1].saturating_sub(w[0]))
        .collect();
    d.sort_unstable();
    if d.len() <= LAT_MEASURE_TAIL + 1 {
        return None;
    }
    let n = d.len() - LAT_MEASURE_TAIL;
    let us = |x: u64| x as f64 / factor;
    let median = if (n - 1) % 2 == 1 {
        (d[n / 2] + d[n / 2 - 1]) / 2
    } else {
        d[n / 2]
    };
    let avg = d[..n].iter().map(|&x| us(x)).sum::<f64>() / n as f64;
    let var = d[..n].iter().map(|&x| (avg - us(x)).powi(2)).sum::<f64>() / n as f64;
    let i99 = ((n as f64) * 0.99).ceil() as usize;
    let i999 = ((n as f64) * 0.999).ceil() as usize;
    Some(LatReport {
        size,
        iters: posted.len() as u64,
        t_min: us(d[0]),
        t_max: us(d[n]),
        t_typical: us(median),
        t_avg: avg,
        t_stdev: var.sqrt(),
        p99: us(d[i99.min(d.len() - 1)]),
        p999: us(d[i999.min(d.len() - 1)]),
    })
}

/// A latency row as perftest prints it (`REPORT_FMT_LAT`).
pub fn lat_row(r: &LatReport) -> String {
    format!(
        " {:<7} {}          {:<7.2}        {:<7.2}      {:<7.2}  \t       {:<7.2}     \t{:<7.2}\t\t{:<7.2} \t\t{:<7.2}",
        r.size, r.iters, r.t_min, r.t_max, r.t_typical, r.t_avg, r.t_stdev, r.p99, r.p999
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bw_average_and_peak() {
        // 4 messages of 1 MiB, posted at 0, completed at 1, 2, 3, 4 ms (cq_mod 1):
        // 4 MiB in 4 ms = 1000 MiB/s; the fastest run is 1 ms per message.
        let mib = 1 << 20;
        let posted = [0, 0, 0, 0];
        let done = [1_000_000, 2_000_000, 3_000_000, 4_000_000];
        let r = bw_report(mib, &posted, &done, 1, false, true);
        assert_eq!(r.iters, 4);
        assert!((r.bw_avg - 1000.0).abs() < 1e-9, "{r:?}");
        assert!((r.bw_peak - 1000.0).abs() < 1e-9, "{r:?}");
        assert!((r.msg_rate - 0.001).abs() < 1e-12);
        // In Gb/sec: 4 * 2^20 * 8 bits / 4 ms = 8.388608 Gb/s.
        let g = bw_report(mib, &posted, &done, 1, true, true);
        assert!((g.bw_avg - 8.388608).abs() < 1e-9);
        // A burst: messages 2 and 3, posted at 1.9 ms, finish at 2.1 and 2.2 ms: the
        // best run is both of them, 0.3 ms / 2 = 0.15 ms per MiB.
        let posted = [0, 0, 1_900_000, 1_900_000];
        let done = [1_000_000, 2_000_000, 2_100_000, 2_200_000];
        let r = bw_report(mib, &posted, &done, 1, false, true);
        assert!((r.bw_peak - 1e9 / 150_000.0).abs() < 1e-6, "{r:?}");
        let none = bw_report(mib, &posted, &done, 1, false, false);
        assert_eq!(none.bw_peak, 0.0);
    }

    #[test]
    fn bw_peak_only_at_signalled_completions() {
        // cq_mod 2: runs end at index 1, 3 and (n odd) the last, 4.
        let posted = [0; 5];
        let done = [10, 10, 30, 30, 60];
        let r = bw_report(1000, &posted, &done, 2, false, true);
        // Best: i = 0, j = 1 -> 10 / 2 = 5 ns per message.
        assert!((r.bw_peak - 1000.0 * 1e9 / (5.0 * 1_048_576.0)).abs() < 1e-6);
    }

    #[test]
    fn bw_rows_as_perftest_prints() {
        let r = BwReport {
            size: 65536,
            iters: 5,
            bw_peak: 11.29,
            bw_avg: 10.54,
            msg_rate: 0.000169,
        };
        assert_eq!(
            bw_row(&r, false),
            " 65536      5                11.29              10.54  \t\t   0.000169"
        );
        let small = BwReport { bw_avg: 0.05, ..r };
        assert_eq!(
            bw_row(&small, true),
            " 65536      5           11.290000            0.050000            0.000169"
        );
        assert_eq!(bw_report(1, &[], &[], 1, false, true).iters, 0);
    }

    #[test]
    fn latency_percentiles_median_and_tail() {
        // 11 stamps 2 us apart except one 100 us gap and one 50 us gap: 10 deltas,
        // sorted [2 x 8, 50, 100]; the two largest are dropped: n = 8.
        let mut t = 0;
        let mut posted = vec![0u64];
        for gap in [2, 2, 100, 2, 2, 2, 50, 2, 2, 2] {
            t += gap * 1000;
            posted.push(t);
        }
        let r = lat_report(64, &posted, false).unwrap();
        assert_eq!(r.iters, 11);
        assert_eq!(
            (r.t_min, r.t_typical, r.t_avg, r.t_stdev),
            (2.0, 2.0, 2.0, 0.0)
        );
        assert_eq!(r.t_max, 50.0); // d[n]: the first one dropped
        assert_eq!(r.p99, 50.0); // ceil(8 * 0.99) = 8
                                 // Round trips are halved.
        let h = lat_report(64, &posted, true).unwrap();
        assert_eq!(h.t_typical, 1.0);
        assert!(lat_report(64, &posted[..3], false).is_none());
        // Median of an even count averages the middle two; stdev of 1, 3 is 1.
        let r = lat_report(8, &[0, 1000, 4000, 4000, 4000, 104_000, 1_104_000], false).unwrap();
        // deltas sorted [0, 1000, 3000, 0 ..]: [0, 0, 1000, 3000, 100k, 1M] -> n = 4
        assert_eq!(r.t_typical, 0.5);
        assert!((r.t_avg - 1.0).abs() < 1e-12);
        assert!((r.t_stdev - (1.5f64).sqrt()).abs() < 1e-12);
    }

    #[test]
    fn address_fields_as_c_prints_them() {
        // perftest's `LID %#04x QPN %#06x PSN %#06x ... RKey %#08x VAddr %#016llx`.
        assert_eq!(c_alt_hex(0, 4), "0000");
        assert_eq!(c_alt_hex(0x14, 6), "0x0014");
        assert_eq!(c_alt_hex(0xc5ffcd, 6), "0xc5ffcd");
        assert_eq!(c_alt_hex(0x5fd, 8), "0x0005fd");
        assert_eq!(c_alt_hex(0x7f22289c6000, 16), "0x007f22289c6000");
    }

    #[test]
    fn lat_row_as_perftest_prints() {
        let r = LatReport {
            size: 64,
            iters: 10,
            t_min: 101.5,
            t_max: 230.0,
            t_typical: 120.25,
            t_avg: 130.0,
            t_stdev: 3.0,
            p99: 230.0,
            p999: 230.0,
        };
        assert_eq!(
            lat_row(&r),
            " 64      10          101.50         230.00       120.25   \t       130.00      \t3.00   \t\t230.00  \t\t230.00 "
        );
    }
}
