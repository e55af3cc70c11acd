//! [`MemEngine`]: an [`IoEngine`] over a `Vec<u8>` "disk", for tests and dry runs.
//!
//! Submitted I/Os complete on the next [`IoEngine::poll`] (or, with
//! [`MemEngine::set_latency`], on the first poll that long after their submit).
//! Several engines can share one [`SharedDisk`], as several I/O queues share one
//! namespace. A trim zeroes its range (a deallocated block reads as zeroes); a flush
//! does nothing. Faults can be injected: corrupted read data (to exercise
//! verification), failed I/Os at an offset, and busy refusals.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use nvme::{GenericStatus, Status};
use nvmf_initiator::HostError;

use super::engine::{EngineError, IoCompletion, IoEngine};
use super::workload::{IoOp, IoRequest};

/// What to do to reads (see [`MemEngine::corrupt_reads`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReadCorruption {
    /// Reads return the stored data.
    None,
    /// Every read returns the data with the last byte inverted.
    FlipLastByte,
}

/// A namespace in memory, shareable between engines (one per job).
pub type SharedDisk = Arc<Mutex<Vec<u8>>>;

/// A zeroed [`SharedDisk`] of `bytes` bytes.
pub fn shared_disk(bytes: usize) -> SharedDisk {
    Arc::new(Mutex::new(vec![0; bytes]))
}

/// In-memory engine: a byte vector as the namespace, `depth` buffer slots of
/// `slot_len` bytes each.
#[derive(Debug, Clone)]
pub struct MemEngine {
    disk: SharedDisk,
    slots: Vec<Vec<u8>>,
    pending: Vec<(u32, IoRequest, Instant)>,
    in_flight: Vec<bool>,
    /// Least time from submit to completion: `[read, write]`.
    latency: [Duration; 2],
    corruption: ReadCorruption,
    fail_offset: Option<u64>,
    busy_every: Option<u64>,
    submissions: u64,
}

impl MemEngine {
    /// An engine over a zeroed disk of `disk_bytes` bytes, taking `depth` outstanding
    /// I/Os of up to `slot_len` bytes.
    pub fn new(disk_bytes: usize, depth: usize, slot_len: usize) -> Self {
        Self::with_disk(shared_disk(disk_bytes), depth, slot_len)
    }

    /// An engine over `disk` (shared with other engines), taking `depth` outstanding
    /// I/Os of up to `slot_len` bytes.
    pub fn with_disk(disk: SharedDisk, depth: usize, slot_len: usize) -> Self {
        Self {
            disk,
            slots: vec![vec![0; slot_len]; depth],
            pending: Vec::with_capacity(depth),
            in_flight: vec![false; depth],
            latency: [Duration::ZERO; 2],
            corruption: ReadCorruption::None,
            fail_offset: None,
            busy_every: None,
            submissions: 0,
        }
    }

    /// Makes reads return corrupted data from now on.
    pub fn corrupt_reads(&mut self, how: ReadCorruption) {
        self.corruption = how;
    }

    /// Makes any I/O that starts at byte `offset` complete with an error.
    pub fn fail_at(&mut self, offset: u64) {
        self.fail_offset = Some(offset);
    }

    /// Completes each read no sooner than `read` after its submission, and each write
    /// no sooner than `write` (a slow disk).
    pub fn set_latency(&mut self, read: Duration, write: Duration) {
        self.latency = [read, write];
    }

    /// Refuses every `n`th submission with [`EngineError::Busy`] (n >= 1).
    pub fn busy_every(&mut self, n: u64) {
        self.busy_every = Some(n.max(1));
    }

    /// The disk contents, locked (writable, to prepare or damage data). A lock
    /// poisoned by a panicking holder is taken over: the bytes stay usable.
    pub fn disk(&self) -> MutexGuard<'_, Vec<u8>> {
        self.disk.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The shared disk, to build more engines over it.
    pub fn shared(&self) -> SharedDisk {
        Arc::clone(&self.disk)
    }

    fn execute(&mut self, tag: u32, req: &IoRequest) -> Result<(), HostError> {
        let command = match req.op {
            IoOp::Read => "Read",
            IoOp::Write => "Write",
            IoOp::Trim => "Dataset Management",
            IoOp::Flush => "Flush",
        };
        if req.op == IoOp::Flush {
            return Ok(());
        }
        let status = |s: GenericStatus| HostError::Nvme {
            command,
            status: Status::generic(s),
            dw0: 0,
        };
        if Some(req.offset) == self.fail_offset {
            return Err(status(GenericStatus::DataTransferError));
        }
        let len = req.len as usize;
        let mut disk = self.disk.lock().unwrap_or_else(|e| e.into_inner());
        let start =
            usize::try_from(req.offset).map_err(|_| status(GenericStatus::LbaOutOfRange))?;
        let range = start
            .checked_add(len)
            .filter(|&end| end <= disk.len())
            .map(|end| start..end)
            .ok_or_else(|| status(GenericStatus::LbaOutOfRange))?;
        let slot = &mut self.slots[tag as usize];
        match req.op {
            IoOp::Write => disk[range].copy_from_slice(&slot[..len]),
            IoOp::Trim => disk[range].fill(0),
            IoOp::Flush => {}
            IoOp::Read => {
                slot[..len].copy_from_slice(&disk[range]);
                if self.corruption == ReadCorruption::FlipLastByte && len > 0 {
                    slot[len - 1] ^= 0xFF;
                }
            }
        }
        Ok(())
    }
}

impl IoEngine for MemEngine {
    fn max_outstanding(&self) -> usize {
        self.slots.len()
    }

    fn submit(&mut self, tag: u32, req: &IoRequest) -> Result<(), EngineError> {
        let t = tag as usize;
        if t >= self.slots.len() {
            return Err(EngineError::InvalidRequest(format!(
                "tag {tag} >= depth {}",
                self.slots.len()
            )));
        }
        if matches!(req.op, IoOp::Read | IoOp::Write) && req.len as usize > self.slots[t].len() {
            return Err(EngineError::InvalidRequest(format!(
                "length {} over the {}-byte buffer",
                req.len,
                self.slots[t].len()
            )));
        }
        if self.in_flight[t] {
            return Err(EngineError::InvalidRequest(format!(
                "tag {tag} already in use"
            )));
        }
        self.submissions += 1;
        if self
            .busy_every
            .is_some_and(|n| self.submissions.checked_rem(n) == Some(0))
        {
            return Err(EngineError::Busy);
        }
        self.in_flight[t] = true;
        let due = Instant::now() + self.latency[req.op.index().min(1)];
        self.pending.push((tag, *req, due));
        Ok(())
    }

    fn poll(&mut self, out: &mut Vec<IoCompletion>) -> Result<(), EngineError> {
        let mut pending = std::mem::take(&mut self.pending);
        let now = Instant::now();
        pending.retain(|(tag, req, due)| {
            if *due > now {
                return true;
            }
            let result = self.execute(*tag, req);
            self.in_flight[*tag as usize] = false;
            out.push(IoCompletion { tag: *tag, result });
            false
        });
        self.pending = pending;
        Ok(())
    }

    fn buffer(&mut self, tag: u32) -> &mut [u8] {
        &mut self.slots[tag as usize]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn drain(e: &mut MemEngine) -> Vec<IoCompletion> {
        let mut v = Vec::new();
        e.poll(&mut v).unwrap();
        v
    }

    #[test]
    fn write_then_read_round_trips() {
        let mut e = MemEngine::new(8192, 2, 4096);
        e.buffer(0).fill(0xAB);
        let w = IoRequest {
            op: IoOp::Write,
            offset: 4096,
            len: 4096,
        };
        e.submit(0, &w).unwrap();
        let done = drain(&mut e);
        assert_eq!(done.len(), 1);
        assert!(done[0].tag == 0 && done[0].result.is_ok());
        assert!(e.disk()[4096..].iter().all(|&b| b == 0xAB));
        // A second engine over the same disk sees the write.
        let mut other = MemEngine::with_disk(e.shared(), 1, 4096);
        other
            .submit(
                0,
                &IoRequest {
                    op: IoOp::Read,
                    offset: 4096,
                    len: 4096,
                },
            )
            .unwrap();
        assert_eq!(drain(&mut other).len(), 1);
        assert!(other.buffer(0).iter().all(|&b| b == 0xAB));
        let r = IoRequest {
            op: IoOp::Read,
            offset: 4096,
            len: 4096,
        };
        e.submit(1, &r).unwrap();
        assert_eq!(drain(&mut e).len(), 1);
        assert!(e.buffer(1).iter().all(|&b| b == 0xAB));
    }

    #[test]
    fn faults_are_reported() {
        let mut e = MemEngine::new(8192, 1, 4096);
        let r = IoRequest {
            op: IoOp::Read,
            offset: 8192,
            len: 4096,
        };
        e.submit(0, &r).unwrap();
        let c = drain(&mut e);
        let status = c[0].result.as_ref().unwrap_err().nvme_status();
        assert_eq!(
            status.and_then(|s| s.as_generic()),
            Some(GenericStatus::LbaOutOfRange)
        );
        assert!(matches!(
            e.submit(1, &r),
            Err(EngineError::InvalidRequest(_))
        ));
        e.fail_at(0);
        e.submit(
            0,
            &IoRequest {
                op: IoOp::Write,
                offset: 0,
                len: 512,
            },
        )
        .unwrap();
        let status = drain(&mut e)[0].result.as_ref().unwrap_err().nvme_status();
        assert_eq!(
            status.and_then(|s| s.as_generic()),
            Some(GenericStatus::DataTransferError)
        );
        e.busy_every(1);
        assert!(matches!(
            e.submit(
                0,
                &IoRequest {
                    op: IoOp::Read,
                    offset: 0,
                    len: 512
                }
            ),
            Err(EngineError::Busy)
        ));
    }
}
