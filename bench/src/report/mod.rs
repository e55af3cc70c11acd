//! Reports of a [`crate::BenchResult`]: fio's normal text output
//! ([`render_text`], with the header of [`render_header`]), fio 3.33's JSON
//! ([`render_json`]), and nvmf-bench's own lines ([`render_extras`]).

pub mod extras;
pub mod fmt;
pub mod json;
pub mod jsonw;
pub mod text;

pub use extras::render_extras;
pub use json::{fio_json, own_json, render_json};
pub use jsonw::JsonValue;
pub use text::{render_header, render_text, verify_problem, FIO_VERSION};

use std::fs::File;
use std::io::Write;
use std::path::PathBuf;

use crate::options::{BenchArgs, OutputFormat};
use crate::result::BenchResult;

/// The report `args` asks for (`--output-format`): fio text, or fio JSON with
/// [`BenchArgs::fio_global_options`] as the target under the `nvmf-bench` key.
pub fn render(result: &BenchResult, args: &BenchArgs) -> String {
    match args.output_format {
        OutputFormat::Normal => render_text(result),
        OutputFormat::Json => render_json(result, &args.fio_global_options()),
    }
}

/// Where the header and the report go: standard output, or the `--output` file,
/// which [`ReportOutput::open`] creates (or truncates) before the run, so a path that
/// cannot be written is refused before any work is done (fio opens it at start too).
#[derive(Debug)]
pub struct ReportOutput {
    file: Option<(PathBuf, File)>,
}

impl ReportOutput {
    /// Standard output, or the file `args.output` names, created or truncated now.
    ///
    /// Errors: a message naming the path, the system's reason and the fix.
    pub fn open(args: &BenchArgs) -> Result<Self, String> {
        let Some(path) = &args.output else {
            return Ok(Self { file: None });
        };
        match File::create(path) {
            Ok(f) => Ok(Self {
                file: Some((path.clone(), f)),
            }),
            Err(e) => Err(format!(
                "--output {}: cannot create the file: {e}; give a file path in an existing, \
                 writable directory",
                path.display()
            )),
        }
    }

    /// Whether this is standard output.
    pub fn is_stdout(&self) -> bool {
        self.file.is_none()
    }

    /// Appends `text` and flushes it.
    ///
    /// Errors: the file cannot be written (the message names it), or standard output
    /// is closed.
    pub fn write(&mut self, text: &str) -> std::io::Result<()> {
        match &mut self.file {
            Some((path, f)) => f
                .write_all(text.as_bytes())
                .and_then(|()| f.flush())
                .map_err(|e| std::io::Error::new(e.kind(), format!("{}: {e}", path.display()))),
            None => {
                let mut out = std::io::stdout().lock();
                out.write_all(text.as_bytes())?;
                out.flush()
            }
        }
    }
}

/// Writes [`render`]'s report to `out`.
///
/// Errors: as [`ReportOutput::write`].
pub fn write_report(
    result: &BenchResult,
    args: &BenchArgs,
    out: &mut ReportOutput,
) -> std::io::Result<()> {
    out.write(&render(result, args))
}

/// A fixed result for report tests: 2 jobs, known latencies, no timing involved.
#[cfg(test)]
pub(crate) mod testdata {
    use std::time::{Duration, UNIX_EPOCH};

    use crate::jobspec::{JobSpec, RunOptions};
    use crate::options::{RwMode, VerifyMode};
    use crate::result::{BenchResult, CpuUsage, JobResult, VerifySummary};
    use crate::stats::{fio_lat_bucket, DepthStats, DirStats};

    /// Job 0 (tid 101): 1000 reads of 4 KiB in 1000 ms, slat 1 us each, clat 990 at
    /// 10 us, 9 at 50 us, 1 at 400 us. Job 1 (tid 102): the same reads in 500 ms plus
    /// 500 writes at 20 us.
    pub fn result() -> BenchResult {
        let spec = |index: u32| JobSpec {
            name: "randread".into(),
            index,
            thread_number: index + 1,
            rw: RwMode::RandRw,
            bs: 4096,
            size: 1 << 30,
            io_limit: None,
            seed: 0x89 + u64::from(index),
            runtime: Duration::from_secs(1),
            time_based: true,
            verify: VerifyMode::Crc32c,
            given: vec![("name".into(), Some("randread".into()))],
            ..JobSpec::default()
        };
        let mut buckets = [0u64; crate::stats::FIO_LAT_BUCKETS];
        let reads = |buckets: &mut [u64; 32]| {
            let mut d = DirStats::default();
            for (n, us) in [(990, 10u64), (9, 50), (1, 400)] {
                for _ in 0..n {
                    d.record(4096, 1000, us * 1000);
                    buckets[fio_lat_bucket(us * 1000)] += 1;
                }
            }
            d.issued = 1000;
            d.bw_kib_samples.add(3900.0);
            d.bw_kib_samples.add(4100.0);
            d.iops_samples.add(975.0);
            d.iops_samples.add(1025.0);
            d
        };
        let job = |index: u32, dirs: [DirStats; 3], buckets: [u64; 32], runtime_ms| JobResult {
            tid: 101 + index as i32,
            dirs,
            runtime_ms,
            total_run_time_ms: 1000,
            elapsed: Duration::from_millis(1000),
            depth: DepthStats {
                map: [1000, 0, 0, 0, 0, 0, 0],
                submit: [0, 1000, 0, 0, 0, 0, 0],
                total_submit: 1000,
                complete: [0, 1000, 0, 0, 0, 0, 0],
                total_complete: 1000,
            },
            lat_buckets: buckets,
            cpu: CpuUsage {
                usr_ms: 10,
                sys_ms: 20,
                ctx: 30,
                majf: 0,
                minf: 4,
            },
            ..JobResult::empty(spec(index))
        };
        let r0 = reads(&mut buckets);
        let j0 = job(
            0,
            [r0, DirStats::default(), DirStats::default()],
            buckets,
            [1000, 0, 0],
        );
        let mut buckets1 = [0u64; 32];
        let r1 = reads(&mut buckets1);
        let mut writes = DirStats::default();
        for _ in 0..500 {
            writes.record(4096, 1000, 20_000);
            buckets1[fio_lat_bucket(20_000)] += 1;
        }
        writes.issued = 500;
        let mut j1 = job(
            1,
            [r1, writes, DirStats::default()],
            buckets1,
            [500, 500, 0],
        );
        j1.depth.map[0] = 1500;
        BenchResult {
            jobs: vec![j0, j1],
            verify: Some(VerifySummary {
                verified: 7,
                written: 7,
                ..VerifySummary::default()
            }),
            faults: None,
            baseline: None,
            target_counters: None,
            reconnects: None,
            options: RunOptions {
                global_options: vec![
                    ("rw".into(), Some("randrw".into())),
                    ("time_based".into(), None),
                ],
                ..RunOptions::default()
            },
            started: UNIX_EPOCH,
            elapsed: Duration::from_millis(1000),
            interrupted: false,
        }
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[test]
    fn render_follows_output_format_and_output_writes_the_file() {
        let r = testdata::result();
        let text = BenchArgs::parse_from(["nvmf-bench"]);
        assert!(render(&r, &text).contains("\nRun status group 0 (all jobs):\n"));
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("report.json");
        let json = BenchArgs::parse_from([
            "nvmf-bench",
            "--output-format=json",
            "--output",
            path.to_str().unwrap(),
        ]);
        let mut out = ReportOutput::open(&json).unwrap();
        assert!(!out.is_stdout());
        write_report(&r, &json, &mut out).unwrap();
        let doc: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        assert_eq!(doc["jobs"][0]["read"]["total_ios"], 1000);
        assert_eq!(doc["nvmf-bench"]["target"]["target"], "embedded");
    }

    #[test]
    fn an_output_path_that_cannot_be_created_is_refused_with_the_fix() {
        let a = BenchArgs::parse_from(["nvmf-bench", "--output", "/nonexistent/x"]);
        let e = ReportOutput::open(&a).unwrap_err();
        assert!(
            e.contains("--output /nonexistent/x") && e.contains("existing, writable directory"),
            "{e}"
        );
    }
}
