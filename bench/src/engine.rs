//! The I/O engine interface the runner drives: one engine per job, typically one
//! NVMe-oF I/O queue pair (NVMe over Fabrics 1.x §3, NVMe RDMA Transport 1.x).
//!
//! The runner owns tags `0..max_outstanding()`; each tag names a data buffer slot of
//! the engine (for an RDMA engine: a registered memory region slice).

use super::workload::IoRequest;

/// Why an engine refused a submission or could not be polled.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EngineError {
    /// No room right now (submission queue full, no send credit): try again later.
    #[error("engine busy, try again")]
    Busy,
    /// The request cannot be issued at all (bad tag, length over the buffer, ...).
    #[error("invalid request: {0}")]
    InvalidRequest(String),
    /// The queue or connection failed; no further I/O will complete.
    #[error("transport failure: {0}")]
    Transport(String),
}

/// A finished I/O, reported by [`IoEngine::poll`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[must_use]
pub struct IoCompletion {
    /// The tag given to [`IoEngine::submit`].
    pub tag: u32,
    /// `Ok` on success; otherwise the NVMe status or transport error, printable.
    pub result: Result<(), String>,
}

/// An engine that executes block I/Os for one job.
///
/// Implementations must not block in [`IoEngine::poll`]: the runner busy-polls all
/// jobs from one thread.
pub trait IoEngine {
    /// How many I/Os may be outstanding at once (queue depth the engine can take).
    fn max_outstanding(&self) -> usize;

    /// Start an I/O. `tag` (< max_outstanding) names its buffer slot;
    /// `Err(EngineError::Busy)` = try later.
    fn submit(&mut self, tag: u32, req: &IoRequest) -> Result<(), EngineError>;

    /// Non-blocking: append finished I/Os to `out`.
    fn poll(&mut self, out: &mut Vec<IoCompletion>) -> Result<(), EngineError>;

    /// The data buffer of slot `tag` (len >= bs): filled before a write is submitted,
    /// read after a read completes (for verification).
    fn buffer(&mut self, tag: u32) -> &mut [u8];
}

impl<E: IoEngine + ?Sized> IoEngine for Box<E> {
    fn max_outstanding(&self) -> usize {
        (**self).max_outstanding()
    }
    fn submit(&mut self, tag: u32, req: &IoRequest) -> Result<(), EngineError> {
        (**self).submit(tag, req)
    }
    fn poll(&mut self, out: &mut Vec<IoCompletion>) -> Result<(), EngineError> {
        (**self).poll(out)
    }
    fn buffer(&mut self, tag: u32) -> &mut [u8] {
        (**self).buffer(tag)
    }
}

impl<E: IoEngine + ?Sized> IoEngine for &mut E {
    fn max_outstanding(&self) -> usize {
        (**self).max_outstanding()
    }
    fn submit(&mut self, tag: u32, req: &IoRequest) -> Result<(), EngineError> {
        (**self).submit(tag, req)
    }
    fn poll(&mut self, out: &mut Vec<IoCompletion>) -> Result<(), EngineError> {
        (**self).poll(out)
    }
    fn buffer(&mut self, tag: u32) -> &mut [u8] {
        (**self).buffer(tag)
    }
}
