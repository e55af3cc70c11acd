//! Per-job I/O generator: which block to read, write or trim next, as fio would
//! choose it.
//!
//! - Offsets lie in the job's region `[offset, offset + size)`; an I/O of `len` bytes
//!   starts at a multiple of `len` from the region start (fio's default
//!   `blockalign = bs`).
//! - Sequential patterns (`read`, `write`, `rw`, `trim`) walk the region and wrap at its
//!   end; as in fio, a mixed sequential job keeps one position per direction.
//! - Random patterns with one block size and the uniform distribution follow fio's
//!   default random map: every block once per pass, in a pseudo-random order
//!   ([`BlockPermutation`]), with a new order each pass. With `bssplit` (sizes vary) an
//!   offset is drawn at random for each I/O (fio's `norandommap`).
//! - `random_distribution` (zipf, pareto, normal) draws a block's *rank* (0 = hottest)
//!   and scatters ranks over the region with a fixed permutation, as fio hashes them,
//!   so hot blocks are not all at the start.
//! - Mixed patterns pick a read with probability `rwmixread`%; `bssplit` picks each
//!   I/O's size by its shares.
//! - Without `time_based` the job ends once it has issued `io_limit` bytes (fio's
//!   `io_size`, default `size`); with it the generator never ends.
//!
//! The sequence depends only on the [`JobSpec`] (its seed is randseed + job index).

use rand::RngCore;
use rand_distr::{Distribution as _, Normal, Zipf};

use super::fio_args::Distribution;
use super::jobspec::JobSpec;
use super::permutation::{mix64, BlockPermutation, SplitMix64};

/// What one I/O does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum IoOp {
    /// NVMe Read (NVM Command Set, opcode 02h).
    Read,
    /// NVMe Write (NVM Command Set, opcode 01h).
    Write,
    /// NVMe Dataset Management (09h) with Attribute - Deallocate over the range.
    Trim,
    /// NVMe Flush (00h) of the namespace (`offset` and `len` are 0); fio's `fsync`.
    Flush,
}

impl IoOp {
    /// Index for per-direction tables: 0 = read, 1 = write, 2 = trim, 3 = sync (fio's
    /// DDIR_READ, DDIR_WRITE, DDIR_TRIM, DDIR_SYNC).
    pub fn index(self) -> usize {
        match self {
            IoOp::Read => 0,
            IoOp::Write => 1,
            IoOp::Trim => 2,
            IoOp::Flush => 3,
        }
    }

    /// fio's name of the direction (`io_ddir_name`): read, write, trim, sync.
    pub fn fio_name(self) -> &'static str {
        match self {
            IoOp::Read => "read",
            IoOp::Write => "write",
            IoOp::Trim => "trim",
            IoOp::Flush => "sync",
        }
    }
}

/// One I/O to issue: what it does, byte offset in the namespace and length in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct IoRequest {
    /// Read, write, trim or flush.
    pub op: IoOp,
    /// Byte offset from the start of the namespace.
    pub offset: u64,
    /// Length in bytes (a block size of the job; 0 for a flush).
    pub len: u32,
}

/// Key-derivation constant that separates permutation keys from the rwmix stream.
const PASS_KEY_SALT: u64 = 0x6E76_6D66_2D62_656E; // "nvmf-ben"
/// Key of the permutation that scatters ranked blocks.
const RANK_KEY_SALT: u64 = 0x7261_6E6B_2D6D_6170; // "rank-map"

impl RngCore for SplitMix64 {
    fn next_u32(&mut self) -> u32 {
        (self.next_u64() >> 32) as u32
    }
    fn next_u64(&mut self) -> u64 {
        SplitMix64::next_u64(self)
    }
    fn fill_bytes(&mut self, dest: &mut [u8]) {
        for chunk in dest.chunks_mut(8) {
            let w = SplitMix64::next_u64(self).to_le_bytes();
            chunk.copy_from_slice(&w[..chunk.len()]);
        }
    }
    fn try_fill_bytes(&mut self, dest: &mut [u8]) -> Result<(), rand::Error> {
        self.fill_bytes(dest);
        Ok(())
    }
}

/// How ranks are drawn for a non-uniform distribution.
#[derive(Debug, Clone)]
enum RankDraw {
    Zipf(Zipf<f64>),
    Pareto { pow: f64 },
    Normal(Normal<f64>),
}

impl RankDraw {
    fn new(d: Distribution, n: u64) -> Option<Self> {
        let nf = n.max(1) as f64;
        match d {
            Distribution::Random => None,
            Distribution::Zipf(theta) => Zipf::new(n.max(1), theta).ok().map(RankDraw::Zipf),
            Distribution::Pareto(h) => Some(RankDraw::Pareto {
                pow: h.ln() / (1.0 - h).ln(),
            }),
            Distribution::Normal(dev) => Normal::new(nf / 2.0, nf * dev / 100.0)
                .ok()
                .map(RankDraw::Normal),
        }
    }

    fn draw(&self, rng: &mut SplitMix64, n: u64) -> u64 {
        let max = n.saturating_sub(1);
        let v = match self {
            RankDraw::Zipf(z) => z.sample(rng) - 1.0,
            RankDraw::Pareto { pow } => {
                let u = (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
                max as f64 * u.powf(*pow)
            }
            RankDraw::Normal(d) => d.sample(rng),
        };
        if v.is_finite() && v > 0.0 {
            (v as u64).min(max)
        } else {
            0
        }
    }
}

/// The deterministic request generator of one job; see the module docs.
#[derive(Debug, Clone)]
pub struct Workload {
    base: u64,
    size: u64,
    bs: u32,
    blocks: u64,
    trim: bool,
    read_percent: u8,
    seed: u64,
    mix: SplitMix64,
    sizes: SplitMix64,
    offsets: SplitMix64,
    random: bool,
    permutation: Option<BlockPermutation>,
    ranks: Option<(RankDraw, BlockPermutation)>,
    bssplit: Option<crate::fio_args::BsSplit>,
    pass: u64,
    seq_next: [u64; 3],
    issued_bytes: u64,
    io_limit: Option<u64>,
}

impl Workload {
    /// The generator for `spec`.
    pub fn new(spec: &JobSpec) -> Self {
        let blocks = spec.blocks();
        let random = spec.rw.is_random();
        let uniform = spec.distribution == Distribution::Random;
        let permutation = (random && uniform && spec.bssplit.is_none())
            .then(|| BlockPermutation::new(blocks, mix64(spec.seed ^ PASS_KEY_SALT)));
        let ranks = if random {
            RankDraw::new(spec.distribution, blocks).map(|d| {
                (
                    d,
                    BlockPermutation::new(blocks, mix64(spec.seed ^ RANK_KEY_SALT)),
                )
            })
        } else {
            None
        };
        Self {
            base: spec.offset,
            size: spec.size,
            bs: spec.bs,
            blocks,
            trim: spec.rw.is_trim(),
            read_percent: spec.rw.read_percent(spec.rwmixread),
            seed: spec.seed,
            mix: SplitMix64::new(spec.seed),
            sizes: SplitMix64::new(mix64(spec.seed ^ 0x5133)),
            offsets: SplitMix64::new(mix64(spec.seed ^ 0x0FF5)),
            random,
            permutation,
            ranks,
            bssplit: spec.bssplit.clone(),
            pass: 0,
            seq_next: [0; 3],
            issued_bytes: 0,
            io_limit: spec.io_limit,
        }
    }

    /// Bytes handed out so far.
    pub fn issued_bytes(&self) -> u64 {
        self.issued_bytes
    }

    /// Completed passes over the region (random map and sequential patterns).
    pub fn passes(&self) -> u64 {
        self.pass
    }

    /// Whether the byte limit has been reached (never, when time based).
    pub fn is_exhausted(&self) -> bool {
        self.blocks == 0 || self.io_limit.is_some_and(|l| self.issued_bytes >= l)
    }

    fn next_op(&mut self) -> IoOp {
        if self.trim {
            return IoOp::Trim;
        }
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

    fn next_len(&mut self, op: IoOp) -> u32 {
        match &self.bssplit {
            Some(s) => {
                let r = (self.sizes.next_u64() % 100) as u32;
                s.pick(op.index(), r).unwrap_or(self.bs)
            }
            None => self.bs,
        }
    }

    /// The byte offset in the region of an I/O of `len` bytes.
    fn next_offset(&mut self, op: IoOp, len: u32) -> u64 {
        let len = u64::from(len.max(1));
        let units = (self.size / len).max(1);
        if self.random {
            if let Some((draw, scatter)) = &self.ranks {
                let rank = draw.draw(&mut self.offsets, self.blocks);
                let block = scatter.map(rank);
                // With bssplit the rank indexes blocks of `bs`: align down to `len`.
                let byte = block * u64::from(self.bs);
                return (byte / len).min(units - 1) * len;
            }
            if let Some(perm) = self.permutation.as_mut() {
                if let Some(b) = perm.next_index() {
                    return b * len;
                }
                // Pass complete: fio resets its random map and draws a new order.
                self.pass += 1;
                perm.restart(mix64(self.seed ^ PASS_KEY_SALT ^ mix64(self.pass)));
                return perm.next_index().unwrap_or(0) * len;
            }
            return (self.offsets.next_u64() % units) * len;
        }
        let pos = &mut self.seq_next[op.index().min(2)];
        if *pos + len > self.size {
            *pos = 0;
            self.pass += 1;
        }
        let at = *pos;
        *pos += len;
        if *pos >= self.size {
            *pos = 0;
            self.pass += 1;
        }
        at
    }

    /// The next request, or `None` once the job has issued its byte limit.
    pub fn next_request(&mut self) -> Option<IoRequest> {
        if self.is_exhausted() {
            return None;
        }
        let op = self.next_op();
        let len = self.next_len(op);
        let at = self.next_offset(op, len);
        self.issued_bytes += u64::from(len);
        Some(IoRequest {
            op,
            offset: self.base + at,
            len,
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
    use crate::fio_args::parse_bssplit;
    use crate::options::RwMode;

    fn spec(rw: RwMode, blocks: u64, io_blocks: Option<u64>) -> JobSpec {
        JobSpec {
            name: "t".into(),
            rw,
            rwmixread: 50,
            bs: 4096,
            iodepth: 1,
            offset: 1 << 20,
            size: blocks * 4096,
            io_limit: io_blocks.map(|b| b * 4096),
            seed: 0x89,
            ..JobSpec::default()
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
        for rw in [
            RwMode::RandRw,
            RwMode::ReadWrite,
            RwMode::Write,
            RwMode::RandTrim,
        ] {
            let s = spec(rw, 100, Some(1000));
            for r in Workload::new(&s) {
                assert_eq!(r.len, 4096);
                assert!(r.offset >= s.offset && r.offset + 4096 <= s.offset + s.size);
                assert_eq!((r.offset - s.offset) % 4096, 0);
                assert_eq!(r.op == IoOp::Trim, rw == RwMode::RandTrim);
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

    #[test]
    fn bssplit_sizes_follow_their_shares_and_stay_aligned() {
        let mut s = spec(RwMode::RandRead, 256, None);
        s.bssplit = Some(parse_bssplit("4k/25:16k/75").unwrap());
        s.bs = 16384;
        s.size = 256 * 16384;
        s.io_limit = None;
        let reqs: Vec<IoRequest> = Workload::new(&s).take(4000).collect();
        let big = reqs.iter().filter(|r| r.len == 16384).count();
        assert!((2800..3200).contains(&big), "{big} of 4000 at 16k");
        for r in &reqs {
            assert!(r.len == 4096 || r.len == 16384);
            assert_eq!((r.offset - s.offset) % u64::from(r.len), 0);
            assert!(r.offset + u64::from(r.len) <= s.offset + s.size);
        }
        // Sequential with sizes that vary: back to back, wrapping before the end.
        let mut q = s.clone();
        q.rw = RwMode::Read;
        let mut at = q.offset;
        for r in Workload::new(&q).take(100) {
            if r.offset != at {
                assert_eq!(r.offset, q.offset, "wrapped to the start");
            }
            at = r.offset + u64::from(r.len);
        }
    }

    #[test]
    fn skewed_distributions_have_hot_blocks() {
        for d in [
            Distribution::Zipf(1.2),
            Distribution::Pareto(0.9),
            Distribution::Normal(5.0),
        ] {
            let mut s = spec(RwMode::RandRead, 10_000, Some(20_000));
            s.distribution = d;
            let mut counts = std::collections::HashMap::new();
            for r in Workload::new(&s) {
                assert!(r.offset >= s.offset && r.offset < s.offset + s.size);
                *counts.entry(r.offset).or_insert(0u32) += 1;
            }
            // Uniform over 10,000 blocks would touch ~8,600 of them in 20,000 draws.
            assert!(
                counts.len() < 6_000,
                "{d:?}: {} distinct blocks",
                counts.len()
            );
            let hottest = counts.values().max().copied().unwrap_or(0);
            assert!(hottest > 10, "{d:?}: hottest block seen {hottest} times");
        }
    }
}
