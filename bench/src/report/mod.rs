//! Reports of a [`crate::BenchResult`]: fio's normal text
//! output ([`render_text`]) and fio 3.x JSON ([`render_json`], [`fio_json`]).

pub mod fmt;
pub mod json;
pub mod text;

pub use json::{fio_job_options, fio_json, render_json, FioJson};
pub use text::{render_header, render_text, verify_problem};

use std::fs::File;
use std::io::Write;
use std::path::PathBuf;

use crate::options::{BenchArgs, OutputFormat};
use crate::result::BenchResult;

/// The report `args` asks for (`--output-format`): fio text with this process's
/// ID, or fio JSON with [`BenchArgs::fio_global_options`].
pub fn render(result: &BenchResult, args: &BenchArgs) -> String {
    match args.output_format {
        OutputFormat::Normal => render_text(result, std::process::id()),
        OutputFormat::Json => {
            let mut s = render_json(result, &args.fio_global_options());
            s.push('\n');
            s
        }
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

    use crate::options::{JobSpec, RunOptions, RwMode, VerifyMode};
    use crate::result::{BenchResult, GroupResult, JobResult, VerifySummary};
    use crate::stats::DirStats;

    /// Job 0: 1000 reads of 4 KiB in 1000 ms: 990 at 10 us, 9 at 50 us, 1 at 400 us.
    /// Job 1: the same plus 500 writes at 20 us, in 500 ms.
    pub fn result() -> BenchResult {
        let spec = |index| JobSpec {
            name: "randread".into(),
            index,
            rw: RwMode::RandRw,
            rwmixread: 50,
            bs: 4096,
            iodepth: 1,
            offset: 0,
            size: 1 << 30,
            io_limit: None,
            seed: 0x89 + u64::from(index),
        };
        let reads = || {
            let mut d = DirStats::default();
            for (n, us) in [(990, 10u64), (9, 50), (1, 400)] {
                for _ in 0..n {
                    d.clat.record(us * 1000);
                }
            }
            d.ios = 1000;
            d.bytes = 1000 * 4096;
            d.bw_kib_samples.add(3900.0);
            d.bw_kib_samples.add(4100.0);
            d.iops_samples.add(975.0);
            d.iops_samples.add(1025.0);
            d
        };
        let mut writes = DirStats::default();
        for _ in 0..500 {
            writes.clat.record(20_000);
        }
        writes.ios = 500;
        writes.bytes = 500 * 4096;
        let jobs = vec![
            JobResult {
                spec: spec(0),
                dirs: [reads(), DirStats::default()],
                runtime_ms: 1000,
                elapsed: Duration::from_millis(1000),
                error: None,
                depth_dist: [1000, 0, 0, 0, 0, 0, 0],
            },
            JobResult {
                spec: spec(1),
                dirs: [reads(), writes],
                runtime_ms: 500,
                elapsed: Duration::from_millis(500),
                error: None,
                depth_dist: [1500, 0, 0, 0, 0, 0, 0],
            },
        ];
        BenchResult {
            group: GroupResult::from_jobs(&jobs),
            jobs,
            verify: Some(VerifySummary {
                verified: 7,
                mismatches: 0,
                written: 7,
            }),
            faults: None,
            baseline: None,
            options: RunOptions {
                runtime: Duration::from_secs(1),
                time_based: true,
                verify: VerifyMode::Crc32c,
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
        assert!(render(&r, &text).contains("Run status group 0 (all jobs):"));
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
        assert_eq!(doc["global options"]["target"], "embedded");
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
