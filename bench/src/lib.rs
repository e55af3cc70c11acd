//! `nvmf-bench`: fio's workloads and reports over NVMe over Fabrics, independent of
//! the transport.
//!
//! Flow: parse [`BenchArgs`] (fio option names), derive one [`JobSpec`] per job for
//! the namespace size ([`BenchArgs::job_specs`]), pair each with an [`IoEngine`]
//! (one NVMe-oF I/O queue, [`QueueEngine`]; [`MemEngine`] for tests) as a [`Job`], [`run`] them on
//! one busy-polling thread ([`run_with`] adds a stop flag for Ctrl-C
//! ([`signals::StopSignals`]) and fio's progress line ([`progress::EtaLine`])), and
//! print the [`BenchResult`] with [`report::render_text`] (after fio's header,
//! [`report::render_header`]) or [`report::render_json`]. Without `--traddr` the
//! benchmark runs against an [`embedded::EmbeddedTarget`].
//!
//! This is the only crate that depends on both the target (`nvmf-target`, for the
//! embedded default) and the host library (`nvmf-initiator`); the binary is
//! `src/main.rs`.
//!
//! ```
//! use clap::Parser;
//! use nvmf_bench::{run, shared_disk, BenchArgs, Job, MemEngine};
//!
//! let args = BenchArgs::parse_from(["nvmf-bench", "--rw=randrw", "--bs=4k", "--size=256k",
//!                                   "--iodepth=4", "--numjobs=2", "--verify=crc32c", "--io_size=2m"]);
//! let namespace_bytes = 1 << 20;
//! let disk = shared_disk(namespace_bytes as usize); // one namespace, one engine per job
//! let jobs = args
//!     .job_specs(namespace_bytes)
//!     .unwrap()
//!     .into_iter()
//!     .map(|spec| {
//!         let engine = MemEngine::with_disk(disk.clone(), spec.iodepth as usize, spec.bs as usize);
//!         Job::new(spec, Box::new(engine))
//!     })
//!     .collect();
//! let result = run(jobs, &args.run_options());
//! assert_eq!(result.verify.unwrap().mismatches, 0);
//! let text = nvmf_bench::report::render_text(&result, std::process::id());
//! assert!(text.contains("Run status group 0 (all jobs):"));
//! ```

pub mod baseline;
pub mod embedded;
pub mod engine;
pub mod mem_engine;
pub mod options;
pub mod permutation;
pub mod progress;
pub mod queue_engine;
pub mod report;
pub mod result;
pub mod runner;
pub mod signals;
pub mod stats;
pub mod units;
pub mod verify;
pub mod workload;

pub use engine::{EngineError, IoCompletion, IoEngine};
pub use mem_engine::{shared_disk, MemEngine, ReadCorruption, SharedDisk};
pub use options::{
    BenchArgs, CompletionMode, EtaMode, JobSpec, OptionsError, OutputFormat, ProviderKind,
    RunOptions, RwMode, VerifyMode,
};
pub use progress::{EtaLine, Progress};
pub use queue_engine::QueueEngine;
pub use result::{
    BenchResult, FaultSummary, GroupResult, InjectedFaults, JobError, JobResult, VerifySummary,
};
pub use runner::{run, run_in_place, run_with, Job, RunControl};
pub use workload::{IoOp, IoRequest, Workload};
