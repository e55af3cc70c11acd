//! `nvmf-bench`: fio's workloads and reports over NVMe over Fabrics, independent of
//! the transport.
//!
//! Flow: the command line and job files become job sections
//! ([`invocation::Invocation`]: fio's `--name` segments, `[job]` sections, each parsed
//! as [`BenchArgs`]); each section becomes one [`JobSpec`] per `--numjobs` for the
//! namespace size ([`BenchArgs::job_specs`]); each spec is paired with an
//! [`IoEngine`] (one NVMe-oF I/O queue, [`QueueEngine`]; [`MemEngine`] for tests) as a
//! [`Job`]; [`run`] runs every job on its own thread, as fio's `thread` mode
//! ([`run_with`] adds a stop flag for Ctrl-C ([`signals::StopSignals`]), fio's
//! progress line ([`progress::EtaLine`]) and `--status-interval` reports); the
//! [`BenchResult`] is printed with [`report::render_text`] (after fio's header,
//! [`report::render_header`]) or [`report::render_json`], byte for byte in fio
//! 3.33's forms. Without `--traddr` the benchmark runs against an
//! [`embedded::EmbeddedTarget`].
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
//! let text = nvmf_bench::report::render_text(&result);
//! assert!(text.contains("Run status group 0 (all jobs):"));
//! ```

pub mod baseline;
pub mod embedded;
pub mod engine;
pub mod fio_args;
pub mod histogram;
pub mod invocation;
pub mod iolog;
pub mod jobfile;
pub mod jobspec;
pub mod mem_engine;
pub mod options;
pub mod permutation;
pub mod plot;
pub mod progress;
pub mod queue_engine;
pub mod reconnect;
pub mod report;
pub mod result;
pub mod runner;
pub mod signals;
pub mod stats;
pub mod units;
pub mod verify;
pub mod workload;

pub use engine::{EngineError, IoCompletion, IoEngine};
pub use jobspec::{JobSpec, LogSpec, RunOptions};
pub use mem_engine::{shared_disk, MemEngine, ReadCorruption, SharedDisk};
pub use options::{
    BenchArgs, CompletionMode, EtaMode, OptionsError, OutputFormat, ProviderKind, RwMode,
    VerifyMode,
};
pub use progress::{EtaLine, Progress};
pub use queue_engine::QueueEngine;
pub use result::{
    BenchResult, FaultSummary, InjectedFaults, JobError, JobResult, RunStats, VerifySummary,
};
pub use runner::{run, run_in_place, run_with, Job, RunControl};
pub use workload::{IoOp, IoRequest, Workload};
