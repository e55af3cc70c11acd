//! Log output of the binaries (`nvmf-target`, `nvmf-bench`): one `tracing` subscriber
//! on stderr, as plain text or one JSON object per line, filtered by `RUST_LOG`.
//!
//! Text carries ANSI colours only when stderr is a terminal (and `NO_COLOR` is unset),
//! so a log file or a pipe gets plain text. JSON lines carry `timestamp`, `level`,
//! `target`, `message` and the event's fields at the top level (e.g. `host_addr`,
//! `hostnqn`, `qid`, `cntlid`, `qpn`; see [`crate::oplog`]) and, under `spans`, the
//! spans the line is in (the target's `controller{cntlid, hostnqn, subnqn}` and
//! `queue{qid, qpn, host_addr}`), outermost first; text lines show the same spans
//! before the message.
use std::io::IsTerminal;

/// How log lines are written.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines (`2026-12-01T10:00:00Z  INFO target: message field=value`).
    #[default]
    Text,
    /// One JSON object per line, fields flattened to the top level.
    Json,
}

/// Installs the process's subscriber: `format` on stderr, the filter from `RUST_LOG`
/// or else `default_filter` (an `EnvFilter` directive such as `"info"` or
/// `"warn,nvmf_initiator=info"`). A second call (or another subscriber already
/// installed) leaves the first in place.
pub fn init(format: LogFormat, default_filter: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default_filter));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let _ = match format {
        LogFormat::Text => builder.with_ansi(ansi_wanted()).try_init(),
        LogFormat::Json => builder
            .json()
            .flatten_event(true)
            .with_current_span(false)
            .with_span_list(true)
            .try_init(),
    };
}

/// Colours only for a terminal, and not when `NO_COLOR` is set (no-color.org).
fn ansi_wanted() -> bool {
    std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
}
