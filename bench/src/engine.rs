//! The I/O engine interface the runner drives: one engine per job, typically one
//! NVMe-oF I/O queue pair (NVMe over Fabrics 1.x §3, NVMe RDMA Transport 1.x).
//!
//! The runner owns tags `0..max_outstanding()`; each tag names a data buffer slot of
//! the engine (for an RDMA engine: a registered memory region slice).

use nvmf_initiator::HostError;

use super::workload::IoRequest;

/// Why an engine refused a submission or could not be polled.
#[derive(Debug, Clone, thiserror::Error)]
pub enum EngineError {
    /// No room right now (submission queue full, no send credit): try again later.
    #[error("engine busy, try again")]
    Busy,
    /// The request cannot be issued at all (bad tag, length over the buffer, ...).
    #[error("invalid request: {0}")]
    InvalidRequest(String),
    /// The queue or connection failed; no further I/O will complete. The host's own
    /// error, typed (`HostError::Transport` keeps the `IBV_WC_*` status,
    /// `HostError::ControllerDead` why the controller was declared dead).
    #[error("transport failure: {0}")]
    Transport(HostError),
}

impl EngineError {
    /// Whether this is [`EngineError::Busy`] (try again later).
    pub fn is_busy(&self) -> bool {
        matches!(self, EngineError::Busy)
    }
}

/// A finished I/O, reported by [`IoEngine::poll`].
#[derive(Debug, Clone)]
#[must_use]
pub struct IoCompletion {
    /// The tag given to [`IoEngine::submit`].
    pub tag: u32,
    /// `Ok` on success; otherwise the host's typed error (the NVMe status with SCT,
    /// SC and DNR, or the transport error).
    pub result: Result<(), HostError>,
}

/// An engine that executes block I/Os for one job.
///
/// Implementations must not block in [`IoEngine::poll`]: each job's thread polls its
/// engine in a loop, and calls [`IoEngine::idle`] after a round in which it submitted
/// and completed nothing (busy polling unless the engine sleeps there). An engine is
/// `Send`: it runs on its job's thread.
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

    /// Nothing was submitted or completed in a whole round of the runner: the engine
    /// may sleep up to `timeout` until it has a completion (e.g. on a completion
    /// event). The default returns at once (busy polling).
    fn idle(&mut self, timeout: std::time::Duration) {
        let _ = timeout;
    }
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
    fn idle(&mut self, timeout: std::time::Duration) {
        (**self).idle(timeout)
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
    fn idle(&mut self, timeout: std::time::Duration) {
        (**self).idle(timeout)
    }
}
