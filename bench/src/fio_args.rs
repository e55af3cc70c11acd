//! fio's job options beyond the basic workload ([`crate::BenchArgs`] flattens
//! [`FioArgs`] in): threads and CPU pinning, pacing (`rate`, `rate_iops`,
//! `thinktime`), block size mixes (`bssplit`), access distributions
//! (`random_distribution`), `fsync`/`end_fsync`, verification extras, reporting
//! (`percentile_list`, `status-interval`), fio's logs (`write_*_log`, `log_avg_msec`),
//! job files, `--showcmd` and `--plot`. Names, syntax and defaults follow fio 3.33's
//! HOWTO; each parser names what it refuses and the accepted form.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, ValueEnum};

use crate::stats::MAX_PERCENTILES;
use crate::units::{parse_duration, parse_size};

/// fio's `cpus_allowed_policy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, ValueEnum)]
pub enum CpusPolicy {
    /// Every job may run on every CPU of `cpus_allowed`.
    #[default]
    Shared,
    /// Job N runs on the N-th CPU of `cpus_allowed` (wrapping around).
    Split,
}

/// A fio access distribution (`random_distribution`) over a job's blocks.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub enum Distribution {
    /// Uniform, every block once per pass (fio's random map).
    #[default]
    Random,
    /// Zipf with exponent `theta` (`zipf:1.2`): block rank k drawn with weight 1/k^θ.
    Zipf(f64),
    /// fio's Pareto (`pareto:0.9`): rank `(n-1) * u^(ln h / ln(1-h))`, u uniform.
    Pareto(f64),
    /// Normal around the middle of the region with a deviation of the given percent of
    /// it (`normal:10`, fio also spells it `gauss`).
    Normal(f64),
}

impl Distribution {
    /// fio's spelling (`random`, `zipf:1.2`, ...).
    pub fn fio_name(&self) -> String {
        match self {
            Distribution::Random => "random".into(),
            Distribution::Zipf(t) => format!("zipf:{t}"),
            Distribution::Pareto(h) => format!("pareto:{h}"),
            Distribution::Normal(d) => format!("normal:{d}"),
        }
    }
}

/// A CPU list (`cpus_allowed`), ascending. (An alias, so that clap takes it as one
/// value.)
pub type CpuList = Vec<usize>;

/// A percentile list in percent (`percentile_list`).
pub type PercentileList = Vec<f64>;

/// The bytes of a verify pattern (`verify_pattern`).
pub type PatternBytes = Vec<u8>;

/// A per-direction value (fio's `int[,int][,int]` options: read, write, trim); `None`
/// where not given.
pub type PerDir<T> = [Option<T>; 3];

/// fio's `bssplit`: per direction, block sizes with their share in percent.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct BsSplit {
    /// `[read, write, trim]`: `(block size in bytes, percent)`, percents adding to 100.
    pub dirs: [Vec<(u32, u32)>; 3],
}

impl BsSplit {
    /// The largest block size of any direction.
    pub fn max_bs(&self) -> u32 {
        self.dirs
            .iter()
            .flatten()
            .map(|&(bs, _)| bs)
            .max()
            .unwrap_or(0)
    }

    /// The smallest block size of direction `d`.
    pub fn min_bs(&self, d: usize) -> Option<u32> {
        self.dirs[d].iter().map(|&(bs, _)| bs).min()
    }

    /// The block size of direction `d` for a draw `r` in `0..100`.
    pub fn pick(&self, d: usize, r: u32) -> Option<u32> {
        let mut acc = 0;
        for &(bs, pct) in &self.dirs[d] {
            acc += pct;
            if r < acc {
                return Some(bs);
            }
        }
        self.dirs[d].last().map(|&(bs, _)| bs)
    }
}

/// fio job options beyond the basic workload; see the module docs.
#[derive(Debug, Clone, Default, Args)]
pub struct FioArgs {
    /// fio job files (INI: `[global]`, `[job]` sections, `key=value` lines, `;`/`#`
    /// comments). Each section is a job; a job file's options override the command
    /// line's global ones; several files run one after the other (a stonewall
    /// between them), as fio does.
    #[arg(value_name = "JOBFILE")]
    pub jobfile: Vec<PathBuf>,

    /// Print the jobs as one command line (`nvmf-bench --opt=value ... --name=job
    /// ...`) and exit, as fio's `--showcmd`.
    #[arg(long)]
    pub showcmd: bool,

    /// The I/O engine: nvmf-bench has one, `nvmf-rdma` (NVMe over RDMA to --traddr,
    /// or to the embedded target); any other is refused (fio `ioengine`).
    #[arg(long, value_parser = parse_ioengine)]
    pub ioengine: Option<String>,

    /// Accepted as fio's `thread`: jobs always run as threads of this process.
    #[arg(long, num_args = 0..=1, default_missing_value = "1", value_parser = parse_fio_bool, default_value = "0")]
    pub thread: bool,

    /// 1 (the only meaning here: every I/O goes to the target, no host page cache);
    /// 0 is refused (fio `direct`).
    #[arg(long, value_parser = parse_direct)]
    pub direct: Option<bool>,

    /// CPUs the job threads may run on: a list such as `0-3,6` (fio `cpus_allowed`).
    #[arg(long = "cpus_allowed", alias = "cpus-allowed", value_parser = parse_cpu_list)]
    pub cpus_allowed: Option<CpuList>,

    /// `shared`: every job on all of --cpus_allowed; `split`: job N on the N-th CPU of
    /// it, wrapping around (fio `cpus_allowed_policy`).
    #[arg(long = "cpus_allowed_policy", alias = "cpus-allowed-policy", value_enum, default_value_t = CpusPolicy::Shared)]
    pub cpus_allowed_policy: CpusPolicy,

    /// Wait for every job before this one to finish before starting it; starts a new
    /// reporting group (fio `stonewall`).
    #[arg(long, num_args = 0..=1, default_missing_value = "1", value_parser = parse_fio_bool, default_value = "0", alias = "wait_for_previous")]
    pub stonewall: bool,

    /// Start a new reporting group with this job (fio `new_group`).
    #[arg(long = "new_group", alias = "new-group", num_args = 0..=1, default_missing_value = "1", value_parser = parse_fio_bool, default_value = "0")]
    pub new_group: bool,

    /// Free text printed with the job's report (fio `description`).
    #[arg(long)]
    pub description: Option<String>,

    /// Bandwidth cap in bytes/s per direction: `1m`, or `read,write,trim` such as
    /// `1m,500k` (one value caps every direction; an empty field none) (fio `rate`).
    #[arg(long, value_parser = parse_rate)]
    pub rate: Option<PerDir<u64>>,

    /// IOPS cap per direction, same syntax as --rate (fio `rate_iops`).
    #[arg(long = "rate_iops", alias = "rate-iops", value_parser = parse_rate)]
    pub rate_iops: Option<PerDir<u64>>,

    /// Pause after every --thinktime_blocks I/Os have completed, once the job's I/Os in
    /// flight are done: `100` (microseconds), `2ms`, `1s` (fio `thinktime`).
    #[arg(long, value_parser = parse_duration_us, default_value = "0")]
    pub thinktime: Duration,

    /// I/Os between two pauses of --thinktime (fio `thinktime_blocks`).
    #[arg(long = "thinktime_blocks", alias = "thinktime-blocks", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    pub thinktime_blocks: u32,

    /// Block sizes and their shares: `4k/50:64k/50`, per direction `read,write`
    /// (`4k/50:8k/50,16k/100`); entries without a share split what is left (fio
    /// `bssplit`). Overrides --bs for the I/O sizes.
    #[arg(long, value_parser = parse_bssplit)]
    pub bssplit: Option<BsSplit>,

    /// Access distribution of random patterns: random (every block once per pass),
    /// zipf:THETA, pareto:H (0 < H < 1), normal:DEV% (or gauss:DEV%) (fio
    /// `random_distribution`).
    #[arg(long = "random_distribution", alias = "random-distribution", value_parser = parse_distribution, default_value = "random")]
    pub random_distribution: Distribution,

    /// Issue a Flush after every N writes, once the writes in flight are done (fio
    /// `fsync`); 0 = never.
    #[arg(long, default_value_t = 0)]
    pub fsync: u32,

    /// Issue a Flush when the job's writes are done (fio `end_fsync`).
    #[arg(long = "end_fsync", alias = "end-fsync", num_args = 0..=1, default_missing_value = "1", value_parser = parse_fio_bool, default_value = "0")]
    pub end_fsync: bool,

    /// The completion latency percentiles reported, `:`-separated, each in (0, 100],
    /// at most 20 (fio `percentile_list`; default fio's 17).
    #[arg(long = "percentile_list", alias = "percentile-list", value_parser = parse_percentile_list)]
    pub percentile_list: Option<PercentileList>,

    /// Print the whole report every so often while the jobs run: `10` (seconds),
    /// `500ms` (fio `--status-interval`).
    #[arg(long = "status-interval", alias = "status_interval", value_parser = parse_duration)]
    pub status_interval: Option<Duration>,

    /// The pattern --verify=pattern writes and checks: hex (`0xdeadbeef`) or a quoted
    /// string (`"abc"`) (fio `verify_pattern`).
    #[arg(long = "verify_pattern", alias = "verify-pattern", value_parser = parse_verify_pattern)]
    pub verify_pattern: Option<PatternBytes>,

    /// Read back and check what was written after every N blocks written, instead of
    /// only at the end (fio `verify_backlog`); 0 = at the end only.
    #[arg(long = "verify_backlog", alias = "verify-backlog", default_value_t = 0)]
    pub verify_backlog: u64,

    /// Write fio's latency logs PREFIX_lat.N.log, PREFIX_clat.N.log and
    /// PREFIX_slat.N.log (N = the job's number from 1; PREFIX defaults to the job name)
    /// (fio `write_lat_log`).
    #[arg(long = "write_lat_log", alias = "write-lat-log", num_args = 0..=1, default_missing_value = "")]
    pub write_lat_log: Option<String>,

    /// Write fio's bandwidth log PREFIX_bw.N.log (KiB/s) (fio `write_bw_log`).
    #[arg(long = "write_bw_log", alias = "write-bw-log", num_args = 0..=1, default_missing_value = "")]
    pub write_bw_log: Option<String>,

    /// Write fio's IOPS log PREFIX_iops.N.log (fio `write_iops_log`).
    #[arg(long = "write_iops_log", alias = "write-iops-log", num_args = 0..=1, default_missing_value = "")]
    pub write_iops_log: Option<String>,

    /// Average log entries over windows of this many ms (0: one entry per I/O for the
    /// latency logs, per 500 ms sample for bandwidth and IOPS) (fio `log_avg_msec`).
    #[arg(long = "log_avg_msec", alias = "log-avg-msec", default_value_t = 0)]
    pub log_avg_msec: u64,

    /// Draw completion latency percentiles (p50, p90, p99, p99.9, max) and IOPS over
    /// time into this SVG file when the run ends (windows of --log_avg_msec, 500 ms if
    /// unset), so stalls, reconnects and loss bursts show.
    #[arg(long, value_name = "FILE.svg")]
    pub plot: Option<PathBuf>,
}

/// fio's boolean option values: `1`/`0`, `true`/`false`, `yes`/`no`, `on`/`off`.
pub fn parse_fio_bool(text: &str) -> Result<bool, String> {
    match text.trim().to_ascii_lowercase().as_str() {
        "1" | "true" | "yes" | "on" => Ok(true),
        "0" | "false" | "no" | "off" => Ok(false),
        other => Err(format!("{other:?} is not a boolean; use 1 or 0")),
    }
}

fn parse_ioengine(text: &str) -> Result<String, String> {
    match text.trim() {
        "nvmf-rdma" => Ok("nvmf-rdma".into()),
        other => Err(format!(
            "ioengine={other}: nvmf-bench has one I/O engine, nvmf-rdma (NVMe over RDMA to \
             --traddr, or to its embedded target); set ioengine=nvmf-rdma or remove the line"
        )),
    }
}

fn parse_direct(text: &str) -> Result<bool, String> {
    if parse_fio_bool(text)? {
        Ok(true)
    } else {
        Err(
            "direct=0 (buffered I/O through a page cache) has no meaning here: every I/O \
             goes to the target; set direct=1 or remove it"
                .into(),
        )
    }
}

/// A CPU list, fio's `cpus_allowed` syntax: `0-3,6,8-9`.
///
/// Errors: an empty list, a bad number or a reversed range.
pub fn parse_cpu_list(text: &str) -> Result<Vec<usize>, String> {
    let mut cpus = Vec::new();
    for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let num = |s: &str| {
            s.trim()
                .parse::<usize>()
                .map_err(|_| format!("{s:?} in {text:?} is not a CPU number; use e.g. 0-3,6"))
        };
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b) = (num(a)?, num(b)?);
                if a > b {
                    return Err(format!("CPU range {part} is reversed; write {b}-{a}"));
                }
                cpus.extend(a..=b);
            }
            None => cpus.push(num(part)?),
        }
    }
    if cpus.is_empty() {
        return Err(format!("{text:?} names no CPU; use e.g. 0-3,6"));
    }
    cpus.sort_unstable();
    cpus.dedup();
    Ok(cpus)
}

/// fio's per-direction `int[,int][,int]` (read, write, trim) with size suffixes: one
/// value applies to every direction; an empty field to none.
///
/// Errors: more than three fields, a field that is not a size, or all zero/empty.
pub fn parse_rate(text: &str) -> Result<PerDir<u64>, String> {
    let fields: Vec<&str> = text.split(',').map(str::trim).collect();
    if fields.len() > 3 {
        return Err(format!(
            "{text:?}: at most three values (read,write,trim), e.g. 1m,500k"
        ));
    }
    let mut out: PerDir<u64> = [None; 3];
    for (d, f) in fields.iter().enumerate() {
        if f.is_empty() {
            continue;
        }
        let v = parse_size(f).map_err(|e| e.to_string())?;
        out[d] = (v > 0).then_some(v);
    }
    if fields.len() == 1 {
        out = [out[0]; 3];
    }
    if out.iter().all(Option::is_none) {
        return Err(format!("{text:?} sets no limit; give e.g. 1m or ,500k"));
    }
    Ok(out)
}

/// A time whose bare number is microseconds (fio's `thinktime`): `100`, `2ms`, `1s`.
///
/// Errors: as [`parse_duration`].
pub fn parse_duration_us(text: &str) -> Result<Duration, String> {
    let t = text.trim();
    if !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit()) {
        let us: u64 = t
            .parse()
            .map_err(|_| format!("{text:?}: number too large"))?;
        return Ok(Duration::from_micros(us));
    }
    parse_duration(t).map_err(|e| e.to_string())
}

/// fio's `bssplit`; see [`FioArgs::bssplit`].
///
/// Errors: a malformed entry, a size that is not a positive multiple of 512, shares
/// over 100, or more than three directions.
pub fn parse_bssplit(text: &str) -> Result<BsSplit, String> {
    let parts: Vec<&str> = text.split(',').map(str::trim).collect();
    if parts.len() > 3 {
        return Err(format!(
            "{text:?}: at most three directions (read,write,trim)"
        ));
    }
    let mut dirs: Vec<Vec<(u32, u32)>> = Vec::new();
    for part in &parts {
        let mut entries: Vec<(u32, Option<u32>)> = Vec::new();
        for e in part.split(':').map(str::trim).filter(|e| !e.is_empty()) {
            let (bs, pct) = match e.split_once('/') {
                Some((b, p)) => (b, Some(p)),
                None => (e, None),
            };
            let bytes = parse_size(bs).map_err(|er| format!("bssplit {e:?}: {er}"))?;
            if bytes == 0 || !bytes.is_multiple_of(512) || bytes > u64::from(u32::MAX) {
                return Err(format!(
                    "bssplit {e:?}: block size {bytes} is not a positive multiple of 512"
                ));
            }
            let pct = match pct.map(str::trim) {
                None | Some("") => None,
                Some(p) => Some(
                    p.parse::<u32>()
                        .map_err(|_| format!("bssplit {e:?}: share {p:?} is not a percent"))?,
                ),
            };
            entries.push((bytes as u32, pct));
        }
        if entries.is_empty() {
            dirs.push(dirs.last().cloned().unwrap_or_default());
            continue;
        }
        let given: u32 = entries.iter().filter_map(|e| e.1).sum();
        if given > 100 {
            return Err(format!(
                "bssplit {part:?}: shares add up to {given}, over 100"
            ));
        }
        let open = entries.iter().filter(|e| e.1.is_none()).count() as u32;
        let left = 100 - given;
        if open == 0 && left != 0 {
            return Err(format!(
                "bssplit {part:?}: shares add up to {given}, not 100"
            ));
        }
        let mut out: Vec<(u32, u32)> = Vec::with_capacity(entries.len());
        let mut handed = 0;
        let mut k = 0;
        for (bs, pct) in entries {
            let p = match pct {
                Some(p) => p,
                None => {
                    k += 1;
                    // The last open entry takes the rounding remainder.
                    let share = if k == open {
                        left - handed
                    } else {
                        left / open
                    };
                    handed += share;
                    share
                }
            };
            if p > 0 {
                out.push((bs, p));
            }
        }
        dirs.push(out);
    }
    let first = dirs.first().cloned().unwrap_or_default();
    let get = |d: usize| dirs.get(d).cloned().unwrap_or_else(|| first.clone());
    Ok(BsSplit {
        dirs: [get(0), get(1), get(2)],
    })
}

/// fio's `random_distribution`; see [`FioArgs::random_distribution`].
///
/// Errors: an unknown kind or a parameter out of its range.
pub fn parse_distribution(text: &str) -> Result<Distribution, String> {
    let t = text.trim();
    let (kind, param) = match t.split_once(':') {
        Some((k, p)) => (k, Some(p)),
        None => (t, None),
    };
    let value = |name: &str| -> Result<f64, String> {
        let p = param.ok_or_else(|| format!("{name} needs a parameter, e.g. {name}:1.2"))?;
        p.trim()
            .parse::<f64>()
            .ok()
            .filter(|v| v.is_finite())
            .ok_or_else(|| format!("{name}:{p}: {p:?} is not a number"))
    };
    match kind {
        "random" if param.is_none() => Ok(Distribution::Random),
        "zipf" => {
            let theta = value("zipf")?;
            if theta <= 0.0 {
                return Err(format!("zipf:{theta}: theta must be above 0"));
            }
            Ok(Distribution::Zipf(theta))
        }
        "pareto" => {
            let h = value("pareto")?;
            if !(h > 0.0 && h < 1.0) {
                return Err(format!("pareto:{h}: h must lie between 0 and 1"));
            }
            Ok(Distribution::Pareto(h))
        }
        "normal" | "gauss" => {
            let dev = value(kind)?;
            if !(dev > 0.0 && dev <= 100.0) {
                return Err(format!(
                    "{kind}:{dev}: the deviation is a percent of the region, in (0, 100]"
                ));
            }
            Ok(Distribution::Normal(dev))
        }
        _ => Err(format!(
            "{t:?}: use random, zipf:THETA, pareto:H or normal:DEV (fio's \
             random_distribution; zoned distributions are not supported)"
        )),
    }
}

/// fio's `percentile_list`: `:`-separated percents.
///
/// Errors: an entry that is not a number in (0, 100], or more than 20 entries.
pub fn parse_percentile_list(text: &str) -> Result<Vec<f64>, String> {
    let mut v = Vec::new();
    for e in text.split(':').map(str::trim).filter(|e| !e.is_empty()) {
        let p: f64 = e
            .parse()
            .map_err(|_| format!("percentile {e:?} is not a number"))?;
        if !(p > 0.0 && p <= 100.0) {
            return Err(format!("percentile {p} is not in (0, 100]"));
        }
        v.push(p);
    }
    if v.is_empty() || v.len() > MAX_PERCENTILES {
        return Err(format!(
            "{text:?}: give 1 to {MAX_PERCENTILES} percentiles separated by ':', e.g. 50:99:99.9"
        ));
    }
    Ok(v)
}

/// fio's `verify_pattern`: `0x` and an even number of hex digits, or a string in
/// double quotes.
///
/// Errors: anything else, or an empty pattern.
pub fn parse_verify_pattern(text: &str) -> Result<Vec<u8>, String> {
    let t = text.trim();
    if let Some(hex) = t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
        if hex.is_empty() || !hex.len().is_multiple_of(2) {
            return Err(format!(
                "{t:?}: give an even number of hex digits after 0x, e.g. 0xdeadbeef"
            ));
        }
        return (0..hex.len())
            .step_by(2)
            .map(|i| {
                u8::from_str_radix(&hex[i..i + 2], 16)
                    .map_err(|_| format!("{t:?}: {:?} is not hex", &hex[i..i + 2]))
            })
            .collect();
    }
    if let Some(s) = t.strip_prefix('"').and_then(|s| s.strip_suffix('"')) {
        if !s.is_empty() {
            return Ok(s.as_bytes().to_vec());
        }
    }
    Err(format!(
        "{t:?}: give hex (0xdeadbeef) or a string in double quotes (\"abc\")"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_lists_and_booleans() {
        assert_eq!(parse_cpu_list("0-3,6"), Ok(vec![0, 1, 2, 3, 6]));
        assert_eq!(parse_cpu_list("1,1,0"), Ok(vec![0, 1]));
        assert!(parse_cpu_list("3-1").unwrap_err().contains("reversed"));
        assert!(parse_cpu_list("x").is_err());
        assert!(parse_cpu_list("").is_err());
        assert_eq!(parse_fio_bool("1"), Ok(true));
        assert_eq!(parse_fio_bool("off"), Ok(false));
        assert!(parse_fio_bool("2").is_err());
        assert!(parse_ioengine("libaio").unwrap_err().contains("nvmf-rdma"));
        assert!(parse_direct("0").unwrap_err().contains("direct=0"));
        assert_eq!(parse_direct("1"), Ok(true));
    }

    #[test]
    fn rates_per_direction() {
        assert_eq!(parse_rate("1m"), Ok([Some(1 << 20); 3]));
        assert_eq!(
            parse_rate("1m,500k"),
            Ok([Some(1 << 20), Some(500 << 10), None])
        );
        assert_eq!(parse_rate(",4k"), Ok([None, Some(4096), None]));
        assert!(parse_rate("0").is_err());
        assert!(parse_rate("1,2,3,4").is_err());
        assert_eq!(parse_duration_us("100"), Ok(Duration::from_micros(100)));
        assert_eq!(parse_duration_us("2ms"), Ok(Duration::from_millis(2)));
    }

    #[test]
    fn bssplit_shares() {
        let s = parse_bssplit("4k/50:8k/30:16k/20").unwrap();
        assert_eq!(s.dirs[0], vec![(4096, 50), (8192, 30), (16384, 20)]);
        assert_eq!(s.dirs[1], s.dirs[0]);
        assert_eq!(s.max_bs(), 16384);
        assert_eq!(s.pick(0, 0), Some(4096));
        assert_eq!(s.pick(0, 79), Some(8192));
        assert_eq!(s.pick(0, 99), Some(16384));
        let t = parse_bssplit("4k/50:8k,64k").unwrap();
        assert_eq!(t.dirs[0], vec![(4096, 50), (8192, 50)]);
        assert_eq!(t.dirs[1], vec![(65536, 100)]);
        let u = parse_bssplit("4k:8k:16k").unwrap();
        assert_eq!(u.dirs[0].iter().map(|e| e.1).sum::<u32>(), 100);
        assert!(parse_bssplit("4k/60:8k/50").is_err());
        assert!(parse_bssplit("4k/50:8k/40").is_err());
        assert!(parse_bssplit("1000/100").is_err());
    }

    #[test]
    fn distributions_and_percentiles() {
        assert_eq!(parse_distribution("random"), Ok(Distribution::Random));
        assert_eq!(parse_distribution("zipf:1.2"), Ok(Distribution::Zipf(1.2)));
        assert_eq!(
            parse_distribution("pareto:0.9"),
            Ok(Distribution::Pareto(0.9))
        );
        assert_eq!(parse_distribution("gauss:5"), Ok(Distribution::Normal(5.0)));
        assert!(parse_distribution("pareto:1.5").is_err());
        assert!(parse_distribution("zoned:50/5").is_err());
        assert!(parse_distribution("zipf").is_err());
        assert_eq!(
            parse_percentile_list("50:99:99.9"),
            Ok(vec![50.0, 99.0, 99.9])
        );
        assert!(parse_percentile_list("0:50").is_err());
        assert!(parse_percentile_list("101").is_err());
        assert_eq!(
            parse_verify_pattern("0xdeadbeef"),
            Ok(vec![0xde, 0xad, 0xbe, 0xef])
        );
        assert_eq!(parse_verify_pattern("\"ab\""), Ok(b"ab".to_vec()));
        assert!(parse_verify_pattern("0xabc").is_err());
        assert!(parse_verify_pattern("abc").is_err());
    }
}
