//! Per-job I/O generator: which block to read or write next, as fio would choose it.
//!
//! - Offsets lie in the job's region `[offset, offset + size)` and are block aligned
//!   to `bs` relative to the region start.
//! - Sequential patterns (`read`, `write`, `rw`) walk the region and wrap at its end;
//!   as in fio, a mixed sequential job keeps one position per direction.
//! - Random patterns follow fio's default random map: every block once per pass, in
//!   a pseudo-random order ([`BlockPermutation`]), with a new order each pass.
//! - Mixed patterns pick a read with probability `rwmixread`%.
//! - Without `time_based` the job ends once it has issued `io_limit` bytes (fio's
//!   `io_size`, default `size`); with it the generator never ends.
//!
//! The sequence depends only on the [`JobSpec`] (its seed is randseed + job index).

use super::options::JobSpec;
use super::permutation::{mix64, BlockPermutation, SplitMix64};

/// Direction of one I/O.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum IoOp {
    /// NVMe Read (NVM Command Set, opcode 02h).
    Read,
    /// NVMe Write (NVM Command Set, opcode 01h).
    Write,
}

impl IoOp {
    /// Index for per-direction tables: 0 = read, 1 = write (fio's DDIR_READ, DDIR_WRITE).
    pub fn index(self) -> usize {
        match self {
            IoOp::Read => 0,
            IoOp::Write => 1,
        }
    }
}

/// One I/O to issue: direction, byte offset in the namespace and length in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct IoRequest {
    /// Read or write.
    pub op: IoOp,
    /// Byte offset from the start of the namespace.
    pub offset: u64,
    /// Length in bytes (the job's `bs`).
    pub len: u32,
}

/// Key-derivation constant that separates permutation keys from the rwmix stream.
const PASS_KEY_SALT: u64 = 0x6E76_6D66_2D62_656E; // "nvmf-ben"

/// The deterministic request generator of one job; see the module docs.
#[derive(Debug, Clone)]
pub struct Workload {
    base: u64,
    bs: u32,
    blocks: u64,
    read_percent: u8,
    seed: u64,
    mix: SplitMix64,
    random: Option<BlockPermutation>,
    pass: u64,
    seq_next: [u64; 2],
    issued_bytes: u64,
    io_limit: Option<u64>,
}

impl Workload {
    /// The generator for `spec`.
    pub fn new(spec: &JobSpec) -> Self {
        let blocks = spec.blocks();
        let random = spec
            .rw
            .is_random()
            .then(|| BlockPermutation::new(blocks, mix64(spec.seed ^ PASS_KEY_SALT)));
        Self {
            base: spec.offset,
            bs: spec.bs,
            blocks,
            read_percent: spec.rw.read_percent(spec.rwmixread),
            seed: spec.seed,
            mix: SplitMix64::new(spec.seed),
            random,
            pass: 0,
            seq_next: [0; 2],
            issued_bytes: 0,
            io_limit: spec.io_limit,
        }
    }

    /// Bytes handed out so far.
    pub fn issued_bytes(&self) -> u64 {
        self.issued_bytes
    }

    /// Completed passes over the region (random patterns).
    pub fn passes(&self) -> u64 {
        self.pass
    }

    /// Whether the byte limit has been reached (never, when time based).
    pub fn is_exhausted(&self) -> bool {
        self.blocks == 0 || self.io_limit.is_some_and(|l| self.issued_bytes >= l)
    }

    fn next_op(&mut self) -> IoOp {
        match self.read_percent {
            100 => IoOp::Read,
            0 => IoOp::Write,
            p => {
                if self.mix.next_u64() % 100 < u64::from(p) {
                    IoOp::Read
                } else {
                    IoOp::Write
                }
            }
        }
    }

    fn next_block(&mut self, op: IoOp) -> u64 {
        let blocks = self.blocks;
        if let Some(perm) = self.random.as_mut() {
            if let Some(b) = perm.next_index() {
                return b;
            }
            // Pass complete: fio resets its random map and draws a new order.
            self.pass += 1;
            perm.restart(mix64(self.seed ^ PASS_KEY_SALT ^ mix64(self.pass)));
            return perm.next_index().unwrap_or(0);
        }
        let pos = &mut self.seq_next[op.index()];
        let b = *pos;
        *pos += 1;
        if *pos >= blocks {
            *pos = 0;
            self.pass += 1;
        }
        b
    }

    /// The next request, or `None` once the job has issued its byte limit.
    pub fn next_request(&mut self) -> Option<IoRequest> {
        if self.is_exhausted() {
            return None;
        }
        let op = self.next_op();
        let block = self.next_block(op);
        self.issued_bytes += u64::from(self.bs);
        Some(IoRequest {
            op,
            offset: self.base + block * u64::from(self.bs),
            len: self.bs,
        })
    }
}

impl Iterator for Workload {
    type Item = IoRequest;

    fn next(&mut self) -> Option<IoRequest> {
        self.next_request()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::options::RwMode;

    fn spec(rw: RwMode, blocks: u64, io_blocks: Option<u64>) -> JobSpec {
        JobSpec {
            name: "t".into(),
            index: 0,
            rw,
            rwmixread: 50,
            bs: 4096,
            iodepth: 1,
            offset: 1 << 20,
            size: blocks * 4096,
            io_limit: io_blocks.map(|b| b * 4096),
            seed: 0x89,
        }
    }

    #[test]
    fn sequential_wraps_at_the_end_of_the_region() {
        let w = Workload::new(&spec(RwMode::Read, 4, Some(6)));
        let offs: Vec<u64> = w.map(|r| (r.offset - (1 << 20)) / 4096).collect();
        assert_eq!(offs, vec![0, 1, 2, 3, 0, 1]);
    }

    #[test]
    fn requests_are_aligned_and_inside_the_region() {
        for rw in [RwMode::RandRw, RwMode::ReadWrite, RwMode::Write] {
            let s = spec(rw, 100, Some(1000));
            for r in Workload::new(&s) {
                assert_eq!(r.len, 4096);
                assert!(r.offset >= s.offset && r.offset + 4096 <= s.offset + s.size);
                assert_eq!((r.offset - s.offset) % 4096, 0);
            }
        }
    }

    #[test]
    fn random_covers_each_block_once_per_pass() {
        let s = spec(RwMode::RandRead, 1000, Some(3000));
        let offs: Vec<u64> = Workload::new(&s).map(|r| r.offset).collect();
        assert_eq!(offs.len(), 3000);
        for chunk in offs.chunks(1000) {
            let mut c = chunk.to_vec();
            c.sort_unstable();
            c.dedup();
            assert_eq!(c.len(), 1000);
        }
        assert_ne!(offs[..1000], offs[1000..2000], "each pass has a new order");
    }

    #[test]
    fn stops_after_io_limit_and_time_based_does_not() {
        assert_eq!(
            Workload::new(&spec(RwMode::RandWrite, 8, Some(8))).count(),
            8
        );
        let mut w = Workload::new(&spec(RwMode::RandWrite, 8, None));
        assert_eq!(w.by_ref().take(100).count(), 100);
        assert!(!w.is_exhausted());
        assert!(w.passes() >= 12);
    }

    #[test]
    fn same_seed_same_sequence_other_job_other_sequence() {
        let a: Vec<IoRequest> = Workload::new(&spec(RwMode::RandRw, 64, Some(64))).collect();
        let b: Vec<IoRequest> = Workload::new(&spec(RwMode::RandRw, 64, Some(64))).collect();
        assert_eq!(a, b);
        let mut s = spec(RwMode::RandRw, 64, Some(64));
        s.seed += 1;
        let c: Vec<IoRequest> = Workload::new(&s).collect();
        assert_ne!(a, c);
    }

    #[test]
    fn rwmix_ratio_within_tolerance() {
        for mix in [50u8, 70, 10] {
            let mut s = spec(RwMode::RandRw, 1 << 16, Some(10_000));
            s.rwmixread = mix;
            let reads = Workload::new(&s).filter(|r| r.op == IoOp::Read).count();
            let expected = 10_000 * usize::from(mix) / 100;
            assert!(
                reads.abs_diff(expected) <= 250,
                "rwmixread={mix}: {reads} reads of 10000"
            );
        }
        let reads = Workload::new(&spec(RwMode::Read, 16, Some(100)))
            .filter(|r| r.op == IoOp::Read)
            .count();
        assert_eq!(reads, 100);
        let writes = Workload::new(&spec(RwMode::RandWrite, 16, Some(100)))
            .filter(|r| r.op == IoOp::Write)
            .count();
        assert_eq!(writes, 100);
    }

    #[test]
    fn mixed_sequential_keeps_a_position_per_direction() {
        let mut s = spec(RwMode::ReadWrite, 1000, Some(200));
        s.rwmixread = 50;
        let mut next = [0u64; 2];
        for r in Workload::new(&s) {
            let b = (r.offset - s.offset) / 4096;
            assert_eq!(b, next[r.op.index()]);
            next[r.op.index()] += 1;
        }
        assert_eq!(next[0] + next[1], 200);
    }
}
