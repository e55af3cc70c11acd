//! A job's bookkeeping beside its statistics: the `--plot` timeline (completions and
//! fio histograms per window) and the bitmap of blocks written and not yet read back
//! (the verify phase's list).

use std::time::Instant;

use crate::histogram::PlatHistogram;
use crate::result::TimelineWindow;
use crate::stats::DDIR_COUNT;

/// The `--plot` timeline of a job.
pub(super) struct Timeline {
    pub(super) window_ms: u64,
    pub(super) run_start: Instant,
    pub(super) current: Option<u64>,
    pub(super) ios: [u64; DDIR_COUNT],
    pub(super) hist: PlatHistogram,
    pub(super) max_ns: u64,
    pub(super) out: Vec<TimelineWindow>,
}

impl Timeline {
    pub(super) fn add(&mut self, now: Instant, d: usize, clat_ns: u64) {
        let idx = now.saturating_duration_since(self.run_start).as_millis() as u64 / self.window_ms;
        if self.current != Some(idx) {
            self.flush();
            self.current = Some(idx);
        }
        self.ios[d] += 1;
        self.hist.record(clat_ns);
        self.max_ns = self.max_ns.max(clat_ns);
    }

    pub(super) fn flush(&mut self) {
        let Some(idx) = self.current.take() else {
            return;
        };
        self.out.push(TimelineWindow {
            start_ms: idx * self.window_ms,
            ios: std::mem::take(&mut self.ios),
            clat: self
                .hist
                .nonzero()
                .map(|(i, n)| (i as u16, n.min(u64::from(u32::MAX)) as u32))
                .collect(),
            max_ns: std::mem::take(&mut self.max_ns),
        });
        self.hist.clear();
    }
}

/// A bitmap of the region's blocks written by this job and not yet read back.
#[derive(Debug, Default)]
pub(super) struct Unchecked {
    base: u64,
    bs: u64,
    bits: Vec<u64>,
}

impl Unchecked {
    pub(super) fn new(base: u64, bs: u32, blocks: u64) -> Self {
        Self {
            base,
            bs: u64::from(bs.max(1)),
            bits: vec![0; blocks.div_ceil(64) as usize],
        }
    }
    fn index(&self, offset: u64) -> Option<usize> {
        let i = (offset.checked_sub(self.base)? / self.bs) as usize;
        (i / 64 < self.bits.len()).then_some(i)
    }
    pub(super) fn set(&mut self, offset: u64, on: bool) {
        if let Some(i) = self.index(offset) {
            if on {
                self.bits[i / 64] |= 1 << (i % 64);
            } else {
                self.bits[i / 64] &= !(1 << (i % 64));
            }
        }
    }
    pub(super) fn offsets(&self) -> Vec<u64> {
        let mut v = Vec::new();
        for (w, &bits) in self.bits.iter().enumerate() {
            let mut b = bits;
            while b != 0 {
                let t = b.trailing_zeros() as u64;
                v.push(self.base + (w as u64 * 64 + t) * self.bs);
                b &= b - 1;
            }
        }
        v
    }
}
