//! One job's workload as the runner executes it ([`JobSpec`], fio's per-job options),
//! the run-wide settings ([`RunOptions`]), and their derivation from one job
//! section's [`BenchArgs`] ([`BenchArgs::job_specs`], one spec per `--numjobs`).

use std::time::Duration;

use crate::fio_args::{BsSplit, CpusPolicy, Distribution};
use crate::options::{BenchArgs, OptionsError, RwMode, VerifyMode};
use crate::stats::{FIO_PERCENTILES, SAMPLE_INTERVAL_MS};

/// fio's logs a job writes (`write_lat_log`, `write_bw_log`, `write_iops_log`): the
/// file name prefix of each (`None`: not written) and `log_avg_msec`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LogSpec {
    /// Prefix of the latency logs (`PREFIX_lat.N.log`, `_clat`, `_slat`).
    pub lat: Option<String>,
    /// Prefix of the bandwidth log (`PREFIX_bw.N.log`).
    pub bw: Option<String>,
    /// Prefix of the IOPS log (`PREFIX_iops.N.log`).
    pub iops: Option<String>,
    /// Averaging window, ms; 0 = one latency entry per I/O and bandwidth/IOPS entries
    /// per sample window.
    pub avg_msec: u64,
}

impl LogSpec {
    /// Whether any log is written.
    pub fn any(&self) -> bool {
        self.lat.is_some() || self.bw.is_some() || self.iops.is_some()
    }
}

/// One job's workload (fio's per-job options); see [`BenchArgs::job_specs`].
#[derive(Debug, Clone, PartialEq)]
pub struct JobSpec {
    /// Job name (fio `name`).
    pub name: String,
    /// Index among the clones of its section (`--numjobs`), 0-based: the seed and
    /// `offset_increment` use it.
    pub index: u32,
    /// fio's `thread_number`: the job's number in the whole run, from 1 (log file names,
    /// `cpus_allowed_policy=split`).
    pub thread_number: u32,
    /// Reporting group (fio `groupid`): a new one at each `stonewall` or `new_group`.
    pub groupid: u32,
    /// The job waits for every job before it to finish (fio `stonewall`).
    pub stonewall: bool,
    /// fio `description`.
    pub description: Option<String>,
    /// I/O pattern.
    pub rw: RwMode,
    /// Percentage of reads for mixed patterns.
    pub rwmixread: u8,
    /// Block size in bytes: every I/O's length, or the largest of `bssplit`.
    pub bs: u32,
    /// Block sizes and shares per direction (fio `bssplit`), overriding `bs`.
    pub bssplit: Option<BsSplit>,
    /// I/Os kept in flight.
    pub iodepth: u32,
    /// Region start, in bytes from the start of the namespace.
    pub offset: u64,
    /// Region length in bytes, a whole number of `bs` blocks (at least one).
    pub size: u64,
    /// Bytes to issue before the job ends; `None` = time based (run for the runtime).
    pub io_limit: Option<u64>,
    /// Generator seed (randseed + index).
    pub seed: u64,
    /// Run time limit after the ramp; zero = none.
    pub runtime: Duration,
    /// Whether the job runs for the whole runtime (fio `time_based`).
    pub time_based: bool,
    /// Warm-up during which statistics are not collected.
    pub ramp_time: Duration,
    /// Data verification.
    pub verify: VerifyMode,
    /// The pattern of `VerifyMode::Pattern`.
    pub verify_pattern: Vec<u8>,
    /// Read back and check after every this many blocks written; 0 = at the end only.
    pub verify_backlog: u64,
    /// Bandwidth cap per direction in bytes/s; 0 = none.
    pub rate: [u64; 3],
    /// IOPS cap per direction; 0 = none.
    pub rate_iops: [u64; 3],
    /// Pause after every `thinktime_blocks` completions; zero = none.
    pub thinktime: Duration,
    /// I/Os between pauses.
    pub thinktime_blocks: u32,
    /// Access distribution of random patterns.
    pub distribution: Distribution,
    /// Flush after every this many writes; 0 = never.
    pub fsync: u32,
    /// Flush when the job's writes are done.
    pub end_fsync: bool,
    /// Completion latency percentiles reported, ascending.
    pub percentile_list: Vec<f64>,
    /// The CPUs the job's thread is pinned to (after `cpus_allowed_policy`).
    pub cpus: Option<Vec<usize>>,
    /// Logs to write.
    pub logs: LogSpec,
    /// The job's options as given (fio's JSON `job options`; flags have no value).
    pub given: Vec<(String, Option<String>)>,
}

impl Default for JobSpec {
    /// fio's defaults for a job named `job`: 4 KiB random reads at QD1 over 1 MiB,
    /// until done.
    fn default() -> Self {
        JobSpec {
            name: "job".into(),
            index: 0,
            thread_number: 1,
            groupid: 0,
            stonewall: false,
            description: None,
            rw: RwMode::RandRead,
            rwmixread: 50,
            bs: 4096,
            bssplit: None,
            iodepth: 1,
            offset: 0,
            size: 1 << 20,
            io_limit: Some(1 << 20),
            seed: 0x89,
            runtime: Duration::ZERO,
            time_based: false,
            ramp_time: Duration::ZERO,
            verify: VerifyMode::None,
            verify_pattern: Vec::new(),
            verify_backlog: 0,
            rate: [0; 3],
            rate_iops: [0; 3],
            thinktime: Duration::ZERO,
            thinktime_blocks: 1,
            distribution: Distribution::Random,
            fsync: 0,
            end_fsync: false,
            percentile_list: FIO_PERCENTILES.to_vec(),
            cpus: None,
            logs: LogSpec::default(),
            given: Vec::new(),
        }
    }
}

impl JobSpec {
    /// Number of `bs` blocks in the region.
    pub fn blocks(&self) -> u64 {
        self.size / u64::from(self.bs.max(1))
    }

    /// Whether the job writes (so a verify phase reads back).
    pub fn writes(&self) -> bool {
        !self.rw.is_trim() && self.rw.read_percent(self.rwmixread) < 100
    }

    /// The smallest and largest I/O of direction `d` (0 read, 1 write, 2 trim), bytes.
    pub fn bs_range(&self, d: usize) -> (u32, u32) {
        match &self.bssplit {
            Some(s) if !s.dirs[d].is_empty() => {
                let min = s.min_bs(d).unwrap_or(self.bs);
                let max = s.dirs[d].iter().map(|e| e.0).max().unwrap_or(self.bs);
                (min, max)
            }
            _ => (self.bs, self.bs),
        }
    }
}

/// Bytes of the verify header of `mode`: the smallest block it can verify.
pub fn verify_min_bs(mode: VerifyMode) -> u32 {
    let header = crate::verify::VERIFY_HEADER_LEN as u32;
    match mode {
        VerifyMode::None | VerifyMode::Pattern => 1,
        VerifyMode::Crc32c => header,
        VerifyMode::Md5 => header + 16,
        VerifyMode::Sha256 => header + 32,
    }
}

/// Run-wide settings shared by all jobs (see [`crate::runner::run`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunOptions {
    /// How long to wait for outstanding I/Os once a job stops submitting; I/Os still
    /// outstanding afterwards fail the job with a timeout.
    pub drain_timeout: Duration,
    /// After a stop request (Ctrl-C), how long I/Os in flight may take before they are
    /// abandoned (a dead target never answers them).
    pub stop_grace: Duration,
    /// Report each group as one job (fio `group_reporting`).
    pub group_reporting: bool,
    /// Print the report this often while the jobs run (fio `--status-interval`).
    pub status_interval: Option<Duration>,
    /// Keep a timeline of windows this long (ms) for `--plot`; `None`: no timeline.
    pub timeline_ms: Option<u64>,
    /// The options given for every job, as given (fio's JSON `global options`).
    pub global_options: Vec<(String, Option<String>)>,
}

impl Default for RunOptions {
    fn default() -> Self {
        Self {
            drain_timeout: Duration::from_secs(30),
            stop_grace: Duration::from_millis(250),
            group_reporting: false,
            status_interval: None,
            timeline_ms: None,
            global_options: Vec::new(),
        }
    }
}

impl BenchArgs {
    /// One [`JobSpec`] per `--numjobs`, for a namespace of `namespace_bytes` bytes
    /// (`thread_number` from 1, group 0; [`crate::invocation`] numbers the jobs of a
    /// whole run and fills in `given`).
    ///
    /// Job i's region starts at `offset + i * offset_increment` and is `--size` bytes
    /// long (default: the rest of the namespace), rounded down to whole blocks. As in
    /// fio, jobs share the region unless `--offset_increment` separates them.
    ///
    /// Errors: a region past the end of the namespace, a region smaller than one
    /// block, a verify mode with blocks too small for its header, or options that do
    /// not combine (named in [`OptionsError::Conflict`]).
    pub fn job_specs(&self, namespace_bytes: u64) -> Result<Vec<JobSpec>, OptionsError> {
        let f = &self.fio;
        let bs_max = f.bssplit.as_ref().map_or(self.bs, |s| s.max_bs().max(1));
        let min_verify = verify_min_bs(self.verify);
        let bs_min = f
            .bssplit
            .as_ref()
            .and_then(|s| (0..3).filter_map(|d| s.min_bs(d)).min())
            .unwrap_or(self.bs);
        if bs_min < min_verify {
            return Err(OptionsError::BlockTooSmallForVerify {
                mode: self.verify.fio_name(),
                min: min_verify,
                bs: bs_min,
            });
        }
        self.check_combinations()?;
        let bs = u64::from(bs_max);
        (0..self.numjobs)
            .map(|index| {
                let offset = self
                    .offset
                    .saturating_add(u64::from(index).saturating_mul(self.offset_increment));
                let wanted = self
                    .size
                    .unwrap_or_else(|| namespace_bytes.saturating_sub(offset));
                let out_of_range = OptionsError::RegionOutOfRange {
                    job: index,
                    offset,
                    size: wanted,
                    namespace_bytes,
                };
                match offset.checked_add(wanted) {
                    Some(end) if end <= namespace_bytes && offset < namespace_bytes => {}
                    _ => return Err(out_of_range),
                }
                let size = wanted - wanted % bs;
                if size == 0 {
                    return Err(OptionsError::RegionTooSmall {
                        job: index,
                        size: wanted,
                        bs: bs_max,
                    });
                }
                let io_limit = if self.is_time_based() {
                    None
                } else {
                    let limit = self.io_size.unwrap_or(size);
                    Some(limit - limit % u64::from(bs_min.max(1)))
                };
                let per_dir =
                    |v: Option<[Option<u64>; 3]>| v.map_or([0; 3], |r| r.map(|x| x.unwrap_or(0)));
                let log = |o: &Option<String>| {
                    o.as_ref().map(|p| {
                        if p.is_empty() {
                            self.name.clone()
                        } else {
                            p.clone()
                        }
                    })
                };
                Ok(JobSpec {
                    name: self.name.clone(),
                    index,
                    thread_number: index + 1,
                    groupid: 0,
                    stonewall: f.stonewall && index == 0,
                    description: f.description.clone(),
                    rw: self.rw,
                    rwmixread: self.rwmixread,
                    bs: bs_max,
                    bssplit: f.bssplit.clone(),
                    iodepth: self.iodepth,
                    offset,
                    size,
                    io_limit,
                    seed: self.randseed.wrapping_add(u64::from(index)),
                    runtime: self.runtime,
                    time_based: self.is_time_based(),
                    ramp_time: self.ramp_time,
                    verify: self.verify,
                    verify_pattern: f.verify_pattern.clone().unwrap_or_default(),
                    verify_backlog: f.verify_backlog,
                    rate: per_dir(f.rate),
                    rate_iops: per_dir(f.rate_iops),
                    thinktime: f.thinktime,
                    thinktime_blocks: f.thinktime_blocks,
                    distribution: f.random_distribution,
                    fsync: f.fsync,
                    end_fsync: f.end_fsync,
                    percentile_list: {
                        let mut p = f
                            .percentile_list
                            .clone()
                            .unwrap_or_else(|| FIO_PERCENTILES.to_vec());
                        p.sort_by(f64::total_cmp);
                        p
                    },
                    cpus: f
                        .cpus_allowed
                        .as_ref()
                        .map(|set| match f.cpus_allowed_policy {
                            CpusPolicy::Shared => set.clone(),
                            CpusPolicy::Split => vec![set[index as usize % set.len()]],
                        }),
                    logs: LogSpec {
                        lat: log(&f.write_lat_log),
                        bw: log(&f.write_bw_log),
                        iops: log(&f.write_iops_log),
                        avg_msec: f.log_avg_msec,
                    },
                    given: Vec::new(),
                })
            })
            .collect()
    }

    /// Options that do not combine with each other, refused with the reason.
    fn check_combinations(&self) -> Result<(), OptionsError> {
        let f = &self.fio;
        let conflict = |m: &str| Err(OptionsError::Conflict(m.to_string()));
        if self.verify != VerifyMode::None && f.bssplit.is_some() {
            return conflict(
                "--verify with --bssplit: blocks of several sizes overlap, so a read-back \
                 cannot tell which write a block holds; verify with one --bs",
            );
        }
        if self.verify == VerifyMode::Pattern && f.verify_pattern.is_none() {
            return conflict("--verify pattern needs --verify_pattern (e.g. 0xdeadbeef)");
        }
        if f.verify_pattern.is_some() && self.verify != VerifyMode::Pattern {
            return conflict(
                "--verify_pattern is the pattern of --verify pattern; add --verify pattern \
                 (the header modes crc32c, md5 and sha256 write their own data)",
            );
        }
        if f.verify_backlog > 0 && self.verify == VerifyMode::None {
            return conflict("--verify_backlog needs a --verify mode");
        }
        if f.random_distribution != Distribution::Random && !self.rw.is_random() {
            return conflict(
                "--random_distribution applies to random patterns (randread, randwrite, \
                 randrw, randtrim); use one of those or drop it",
            );
        }
        if (f.fsync > 0 || f.end_fsync)
            && !self.rw.is_trim()
            && self.rw.read_percent(self.rwmixread) == 100
        {
            return conflict("--fsync/--end_fsync flush writes, and this job only reads");
        }
        if f.cpus_allowed.is_none() && f.cpus_allowed_policy == CpusPolicy::Split {
            return conflict("--cpus_allowed_policy split needs --cpus_allowed");
        }
        Ok(())
    }

    /// The run-wide settings (drain, group reporting, status interval, timeline).
    pub fn run_options(&self) -> RunOptions {
        RunOptions {
            group_reporting: self.group_reporting,
            status_interval: self.fio.status_interval,
            timeline_ms: self.fio.plot.as_ref().map(|_| {
                if self.fio.log_avg_msec > 0 {
                    self.fio.log_avg_msec
                } else {
                    SAMPLE_INTERVAL_MS
                }
            }),
            ..RunOptions::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    fn parse(args: &[&str]) -> BenchArgs {
        BenchArgs::try_parse_from(std::iter::once("nvmf-bench").chain(args.iter().copied()))
            .unwrap()
    }

    #[test]
    fn job_options_reach_the_spec() {
        let a = parse(&[
            "--numjobs=2",
            "--rate=1m,500k",
            "--rate_iops=,100",
            "--thinktime=50",
            "--thinktime_blocks=4",
            "--bssplit=4k/50:16k/50",
            "--rw=randrw",
            "--random_distribution=zipf:1.1",
            "--fsync=8",
            "--end_fsync=1",
            "--percentile_list=99.9:50",
            "--cpus_allowed=0-1",
            "--cpus_allowed_policy=split",
            "--write_lat_log",
            "--write_bw_log=bw",
            "--log_avg_msec=100",
        ]);
        let s = a.job_specs(1 << 20).unwrap();
        assert_eq!(s.len(), 2);
        assert_eq!(s[0].rate, [1 << 20, 500 << 10, 0]);
        assert_eq!(s[0].rate_iops, [0, 100, 0]);
        assert_eq!(s[0].thinktime, Duration::from_micros(50));
        assert_eq!(s[0].thinktime_blocks, 4);
        assert_eq!(s[0].bs, 16384);
        assert_eq!(s[0].bs_range(0), (4096, 16384));
        assert_eq!(s[0].distribution, Distribution::Zipf(1.1));
        assert_eq!((s[0].fsync, s[0].end_fsync), (8, true));
        assert_eq!(s[0].percentile_list, vec![50.0, 99.9]);
        assert_eq!(s[0].cpus, Some(vec![0]));
        assert_eq!(s[1].cpus, Some(vec![1]));
        assert_eq!(s[0].logs.lat.as_deref(), Some("nvmf-bench"));
        assert_eq!(s[0].logs.bw.as_deref(), Some("bw"));
        assert_eq!(s[0].logs.avg_msec, 100);
        assert_eq!(s[1].thread_number, 2);
        assert_eq!(s[0].size % 16384, 0);
    }

    #[test]
    fn options_that_do_not_combine_are_refused() {
        for (args, says) in [
            (
                &["--verify=crc32c", "--bssplit=4k/50:8k/50"][..],
                "--bssplit",
            ),
            (&["--verify=pattern"][..], "--verify_pattern"),
            (&["--verify_pattern=0x01"][..], "--verify pattern"),
            (&["--verify_backlog=4"][..], "needs a --verify"),
            (
                &["--rw=read", "--random_distribution=zipf:1.2"][..],
                "random patterns",
            ),
            (&["--rw=read", "--fsync=1"][..], "only reads"),
            (&["--cpus_allowed_policy=split"][..], "needs --cpus_allowed"),
        ] {
            let e = parse(args).job_specs(1 << 20).unwrap_err().to_string();
            assert!(e.contains(says), "{args:?}: {e}");
        }
        let e = parse(&["--verify=sha256", "--bs=512"]).job_specs(1 << 20);
        assert!(e.is_ok());
        let mut t = parse(&["--verify=sha256"]);
        t.bs = 32;
        assert!(t
            .job_specs(1 << 20)
            .unwrap_err()
            .to_string()
            .contains("at least 64"));
    }
}
