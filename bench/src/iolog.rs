//! fio's per-job logs (`write_lat_log`, `write_bw_log`, `write_iops_log`, iolog.c
//! `flush_samples`), so that fio's own tools (`fio_generate_plots`, fiologparser.py)
//! read them.
//!
//! Files: `PREFIX_lat.N.log`, `PREFIX_clat.N.log`, `PREFIX_slat.N.log`,
//! `PREFIX_bw.N.log`, `PREFIX_iops.N.log` (N = the job's fio `thread_number`, from 1),
//! in the working directory. Each line is `time, value, direction, block size,
//! priority`: time in ms since the job started, direction 0 read / 1 write / 2 trim,
//! priority 0. Latencies are ns, bandwidth KiB/s, IOPS a count.
//!
//! Without `log_avg_msec` the latency logs have one line per I/O, and so do the
//! bandwidth (`bytes * 10^6 / clat_ns`, fio's per-I/O rate) and IOPS (1) logs. With it,
//! each log line is the mean of the window's values, rounded (fio: `mean + 0.5`),
//! with block size 0, and the bandwidth and IOPS samples are taken every
//! `log_avg_msec` (fio then sets `bwavgtime` and `iopsavgtime` to it).
//! Lines are written as they happen, through a buffer, so long runs need no memory.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::PathBuf;

use crate::jobspec::LogSpec;
use crate::stats::{Moments, LOG_MSEC_SLACK};

/// One log file and its averaging windows.
#[derive(Debug)]
pub struct LogFile {
    path: PathBuf,
    out: BufWriter<File>,
    avg_msec: u64,
    windows: [Moments; 3],
    last: [u64; 3],
}

impl LogFile {
    /// Creates (truncates) `path`.
    ///
    /// Errors: the file cannot be created (the message names it).
    pub fn create(path: PathBuf, avg_msec: u64) -> Result<Self, String> {
        let f = File::create(&path).map_err(|e| {
            format!(
                "cannot create the log file {}: {e}; run from a writable directory or \
                 give the log a prefix with a path",
                path.display()
            )
        })?;
        Ok(LogFile {
            path,
            out: BufWriter::with_capacity(64 << 10, f),
            avg_msec,
            windows: Default::default(),
            last: [0; 3],
        })
    }

    /// The file's path.
    pub fn path(&self) -> &std::path::Path {
        &self.path
    }

    fn line(&mut self, time_ms: u64, value: u64, ddir: usize, bs: u64) {
        // A failed write shows at `finish`, which flushes.
        let _ = writeln!(self.out, "{time_ms}, {value}, {ddir}, {bs}, 0");
    }

    /// Adds one value of direction `ddir` at `time_ms` (fio's `add_log_sample`).
    pub fn add(&mut self, time_ms: u64, ddir: usize, value: u64, bs: u64) {
        let d = ddir.min(2);
        if self.avg_msec == 0 {
            self.line(time_ms, value, d, bs);
            return;
        }
        self.windows[d].add(value as f64);
        if time_ms < self.last[d] {
            return;
        }
        let this_window = time_ms - self.last[d];
        if this_window < self.avg_msec && self.avg_msec - this_window > LOG_MSEC_SLACK {
            return;
        }
        self.close_window(time_ms, d);
        self.last[d] = time_ms - time_ms % self.avg_msec;
    }

    fn close_window(&mut self, time_ms: u64, d: usize) {
        let w = std::mem::take(&mut self.windows[d]);
        if w.count() > 0 {
            self.line(time_ms, (w.mean() + 0.5) as u64, d, 0);
        }
    }

    /// Writes the open windows (fio's `finalize_logs`) and flushes the file.
    ///
    /// Errors: a write failed (the message names the file).
    pub fn finish(&mut self, time_ms: u64) -> Result<(), String> {
        for d in 0..3 {
            self.close_window(time_ms, d);
        }
        self.out
            .flush()
            .map_err(|e| format!("writing the log file {}: {e}", self.path.display()))
    }
}

/// The logs of one job.
#[derive(Debug, Default)]
pub struct JobLogs {
    lat: Option<LogFile>,
    clat: Option<LogFile>,
    slat: Option<LogFile>,
    bw: Option<LogFile>,
    iops: Option<LogFile>,
}

/// fio's log file name: `PREFIX_TYPE.N.log`.
pub fn log_name(prefix: &str, kind: &str, thread_number: u32) -> PathBuf {
    PathBuf::from(format!("{prefix}_{kind}.{thread_number}.log"))
}

impl JobLogs {
    /// Creates the files `spec` asks for, for the job numbered `thread_number`.
    ///
    /// Errors: a file cannot be created.
    pub fn create(spec: &LogSpec, thread_number: u32) -> Result<Self, String> {
        let mk = |prefix: &Option<String>, kind: &str| -> Result<Option<LogFile>, String> {
            prefix
                .as_ref()
                .map(|p| LogFile::create(log_name(p, kind, thread_number), spec.avg_msec))
                .transpose()
        };
        Ok(JobLogs {
            lat: mk(&spec.lat, "lat")?,
            clat: mk(&spec.lat, "clat")?,
            slat: mk(&spec.lat, "slat")?,
            bw: mk(&spec.bw, "bw")?,
            iops: mk(&spec.iops, "iops")?,
        })
    }

    /// Whether the bandwidth and IOPS logs take a line per I/O (no `log_avg_msec`).
    fn per_io(f: &Option<LogFile>) -> bool {
        f.as_ref().is_some_and(|f| f.avg_msec == 0)
    }

    /// One completed I/O of direction `ddir` (0-2) and `bytes`, at `time_ms` since the
    /// job started, with its latencies in ns.
    pub fn completed(&mut self, time_ms: u64, ddir: usize, bytes: u64, slat: u64, clat: u64) {
        if let Some(f) = self.lat.as_mut() {
            f.add(time_ms, ddir, slat + clat, bytes);
        }
        if let Some(f) = self.clat.as_mut() {
            f.add(time_ms, ddir, clat, bytes);
        }
        if let Some(f) = self.slat.as_mut() {
            f.add(time_ms, ddir, slat, bytes);
        }
        if Self::per_io(&self.bw) {
            let rate = (bytes * 1_000_000).checked_div(clat).unwrap_or(0);
            if let Some(f) = self.bw.as_mut() {
                f.add(time_ms, ddir, rate, bytes);
            }
        }
        if Self::per_io(&self.iops) {
            if let Some(f) = self.iops.as_mut() {
                f.add(time_ms, ddir, 1, bytes);
            }
        }
    }

    /// One bandwidth (KiB/s) and IOPS sample of direction `ddir` at `time_ms`, for logs
    /// with `log_avg_msec`.
    pub fn sampled(&mut self, time_ms: u64, ddir: usize, bw_kib: u64, iops: u64) {
        if let Some(f) = self.bw.as_mut().filter(|f| f.avg_msec > 0) {
            f.add(time_ms, ddir, bw_kib, 0);
        }
        if let Some(f) = self.iops.as_mut().filter(|f| f.avg_msec > 0) {
            f.add(time_ms, ddir, iops, 0);
        }
    }

    /// Closes every log at `time_ms`; returns what could not be written.
    pub fn finish(&mut self, time_ms: u64) -> Vec<String> {
        [
            &mut self.lat,
            &mut self.clat,
            &mut self.slat,
            &mut self.bw,
            &mut self.iops,
        ]
        .into_iter()
        .flatten()
        .filter_map(|f| f.finish(time_ms).err())
        .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(p: &std::path::Path) -> Vec<Vec<u64>> {
        std::fs::read_to_string(p)
            .unwrap()
            .lines()
            .map(|l| l.split(", ").map(|f| f.parse().unwrap()).collect())
            .collect()
    }

    #[test]
    fn per_io_and_averaged_lines_in_fios_format() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("a_clat.1.log");
        let mut f = LogFile::create(p.clone(), 0).unwrap();
        f.add(3, 0, 15_000, 4096);
        f.add(4, 1, 20_000, 8192);
        f.finish(5).unwrap();
        assert_eq!(
            std::fs::read_to_string(&p).unwrap(),
            "3, 15000, 0, 4096, 0\n4, 20000, 1, 8192, 0\n"
        );
        let q = dir.path().join("a_lat.1.log");
        let mut g = LogFile::create(q.clone(), 100).unwrap();
        // Window 0..100: 10, 20 and the sample at 100, which closes it (mean 20.3).
        g.add(10, 0, 10, 4096);
        g.add(50, 0, 20, 4096);
        g.add(100, 0, 31, 4096);
        g.add(150, 0, 40, 4096);
        g.finish(170).unwrap();
        assert_eq!(
            read(&q),
            vec![vec![100, 20, 0, 0, 0], vec![170, 40, 0, 0, 0]]
        );
    }

    #[test]
    fn job_logs_are_named_as_fio_names_them() {
        assert_eq!(
            log_name("x", "bw", 3),
            std::path::PathBuf::from("x_bw.3.log")
        );
        let e = JobLogs::create(
            &LogSpec {
                lat: Some("/nonexistent/dir/x".into()),
                ..LogSpec::default()
            },
            1,
        )
        .unwrap_err();
        assert!(e.contains("/nonexistent/dir/x_lat.1.log"), "{e}");
    }
}
