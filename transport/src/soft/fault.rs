//! Fault injection on the soft provider's receive path, for testing RC recovery end
//! to end over real sockets (issue 4 §5).
//!
//! A [`FaultConfig`] on [`super::DeviceConfig::faults`] gives every poll group of the
//! device an [`RxFaults`] layer between `recvmmsg` and RoCEv2 processing. Each
//! datagram the kernel hands over meets, independently and from a seeded stream, at
//! most one of:
//!
//! - **drop** (probability `loss`): never delivered;
//! - **corrupt** (`corrupt`): one bit flipped at a random position of the UDP payload
//!   (BTH to ICRC), never in the BTH byte the ICRC masks (byte 4, RoCEv2 Annex A17.4),
//!   so the ICRC check drops the packet and counts it in `icrc_errors`;
//! - **duplicate** (`duplicate`): delivered twice, back to back;
//! - **reorder** (`reorder`): held back and delivered after the next
//!   `reorder_depth` datagrams of the same socket, or once it has been held
//!   `reorder_max_hold`, whichever comes first.
//!
//! With [`FaultConfig::queue`] set, every datagram delivered once (no fault, or only
//! a CE mark) goes through a rate-limited RED queue first ([`super::rx_queue`]): the
//! switch port in front of the receiver, for incast experiments.
//!
//! Only RC traffic (the poll groups' sockets) is touched, not QP1 (the CM agent's
//! MADs), so connection setup is not part of the experiment. Faults act on receive:
//! a device with faults configured perturbs what it receives, so to perturb both
//! directions of a connection configure both ends.
//!
//! What was injected is counted in [`FaultCounters`], shared by the device's poll
//! groups and read through [`super::DeviceCounters::snapshot`]. With no
//! configuration there is no layer at all: the receive path tests one `Option`.
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::rx_queue::{RxQueue, RxQueueConfig};

/// Byte of the UDP payload (BTH byte 4: FECN, BECN, resv6, just before DestQP) that
/// the ICRC computation masks to ones (RoCEv2 Annex A17.4): a flip there would go
/// unnoticed, so corruption never picks it.
const ICRC_MASKED_BYTE: usize = 4;
/// The FECN bit in that byte.
const BTH_FECN_BIT: u8 = 0x80;

/// The environment variable [`FaultConfig::from_env`] reads: the probability (0-1)
/// that a received RoCEv2 packet is taken as CE-marked.
pub const CE_MARK_ENV: &str = "NVMF_SOFT_CE_MARK";

/// What to inject and how often (per received datagram), and the seed.
///
/// Probabilities are in `[0, 1]` and their sum must not exceed 1: one uniform draw per
/// datagram picks at most one fault. See the module docs for what each fault does.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FaultConfig {
    /// Probability that a datagram is dropped.
    pub loss: f64,
    /// Probability that a datagram is held back and delivered later.
    pub reorder: f64,
    /// Probability that a datagram is delivered twice.
    pub duplicate: f64,
    /// Probability that one bit of a datagram is flipped.
    pub corrupt: f64,
    /// Probability that a delivered datagram arrives CE-marked (congestion
    /// experienced), besides whatever else befalls it: the layer sets the BTH FECN
    /// bit, which is what the provider makes of an IP CE mark (the ICRC masks it).
    pub ce_mark: f64,
    /// Datagrams a reordered one is held behind (at least 1). Default 3.
    pub reorder_depth: u32,
    /// Longest a reordered datagram is held when no others arrive. Default 1 ms: below
    /// the IBTA local ACK timeout (537 ms as the target and host set it), but above the
    /// adaptive retransmission timer's 200 us floor, so a hold at the end of a burst can
    /// look like a loss and cost a paced resend (still exactly-once delivery).
    pub reorder_max_hold: Duration,
    /// Seed of the decision stream; each poll group derives its own from it, its
    /// device's address and its index.
    pub seed: u64,
    /// A rate-limited, RED-marking, tail-dropping queue in front of each poll group's
    /// RoCEv2 processing ([`super::rx_queue`]); `None` (the default): none.
    pub queue: Option<RxQueueConfig>,
}

impl Default for FaultConfig {
    fn default() -> Self {
        FaultConfig {
            loss: 0.0,
            reorder: 0.0,
            duplicate: 0.0,
            corrupt: 0.0,
            ce_mark: 0.0,
            reorder_depth: 3,
            reorder_max_hold: Duration::from_millis(1),
            seed: 0,
            queue: None,
        }
    }
}

/// Why a [`FaultConfig`] was refused.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum FaultConfigError {
    /// A probability outside `[0, 1]` or not a number.
    #[error("fault probability {name} = {value} is not in [0, 1]")]
    OutOfRange {
        /// Field name (`loss`, `reorder`, `duplicate`, `corrupt`, `ce_mark`).
        name: &'static str,
        /// The value given.
        value: f64,
    },
    /// The probabilities add up to more than 1.
    #[error("fault probabilities add up to {sum}, more than 1")]
    SumAboveOne {
        /// Their sum.
        sum: f64,
    },
    /// `reorder_depth` is 0.
    #[error("reorder depth must be at least 1")]
    ZeroReorderDepth,
    /// A receive queue with rate 0 or `kmax_bytes` below `kmin_bytes`.
    #[error("receive queue {0:?}: the rate must be at least 1 Mbit/s and kmax_bytes at least kmin_bytes")]
    BadQueue(RxQueueConfig),
}

impl FaultConfig {
    /// No faults, the given seed (set the probabilities wanted).
    pub fn with_seed(seed: u64) -> Self {
        FaultConfig {
            seed,
            ..FaultConfig::default()
        }
    }

    /// Checks the ranges (see [`FaultConfigError`]).
    pub fn validate(&self) -> Result<(), FaultConfigError> {
        let probs = [
            ("loss", self.loss),
            ("reorder", self.reorder),
            ("duplicate", self.duplicate),
            ("corrupt", self.corrupt),
        ];
        for (name, value) in probs {
            if !(0.0..=1.0).contains(&value) {
                return Err(FaultConfigError::OutOfRange { name, value });
            }
        }
        let sum: f64 = probs.iter().map(|p| p.1).sum();
        if sum > 1.0 + 1e-12 {
            return Err(FaultConfigError::SumAboveOne { sum });
        }
        if !(0.0..=1.0).contains(&self.ce_mark) {
            return Err(FaultConfigError::OutOfRange {
                name: "ce_mark",
                value: self.ce_mark,
            });
        }
        if self.reorder_depth == 0 {
            return Err(FaultConfigError::ZeroReorderDepth);
        }
        if let Some(q) = self.queue {
            if !(0.0..=1.0).contains(&q.pmax) {
                return Err(FaultConfigError::OutOfRange {
                    name: "queue.pmax",
                    value: q.pmax,
                });
            }
            if q.rate_mbps == 0 || q.kmax_bytes < q.kmin_bytes {
                return Err(FaultConfigError::BadQueue(q));
            }
        }
        Ok(())
    }

    /// CE marking on receive as [`CE_MARK_ENV`] asks, for every program built on the
    /// soft provider (an interop peer made to receive CNPs from us): a probability in
    /// `(0, 1]` gives `ce_mark` that, seed 1, no other fault; unset or 0: `None`.
    /// Another value is reported once and ignored.
    pub fn from_env() -> Option<FaultConfig> {
        let v = std::env::var(CE_MARK_ENV).ok()?;
        match Self::ce_mark_from(&v) {
            Ok(cfg) => cfg,
            Err(()) => {
                static ONCE: std::sync::Once = std::sync::Once::new();
                ONCE.call_once(|| {
                    tracing::warn!(
                        "{CE_MARK_ENV}={v:?} is not a probability in [0, 1]: no CE marking"
                    )
                });
                None
            }
        }
    }

    /// What [`FaultConfig::from_env`] makes of the value `v`; `Err` if it is not a
    /// probability.
    fn ce_mark_from(v: &str) -> Result<Option<FaultConfig>, ()> {
        match v.trim().parse::<f64>() {
            Ok(p) if p > 0.0 && p <= 1.0 => Ok(Some(FaultConfig {
                ce_mark: p,
                ..FaultConfig::with_seed(1)
            })),
            Ok(0.0) => Ok(None),
            _ => Err(()),
        }
    }

    /// Whether every probability is 0 (the layer would never act).
    pub fn is_noop(&self) -> bool {
        self.loss == 0.0
            && self.reorder == 0.0
            && self.duplicate == 0.0
            && self.corrupt == 0.0
            && self.ce_mark == 0.0
            && self.queue.is_none()
    }
}

/// Faults injected so far on one device (all its poll groups), in datagrams.
#[derive(Debug, Default)]
pub struct FaultCounters {
    /// Datagrams dropped.
    pub dropped: AtomicU64,
    /// Datagrams delivered twice (counted once each).
    pub duplicated: AtomicU64,
    /// Datagrams held back and delivered late.
    pub reordered: AtomicU64,
    /// Datagrams with one bit flipped.
    pub corrupted: AtomicU64,
    /// Datagrams delivered CE-marked (by `ce_mark` or by the queue's RED).
    pub ce_marked: AtomicU64,
    /// Datagrams the receive queue dropped at its tail.
    pub queue_dropped: AtomicU64,
    /// The receive queue's deepest backlog, bytes.
    pub queue_max_depth_bytes: AtomicU64,
    /// Datagrams the receive queue took in (not dropped).
    pub queue_enqueued: AtomicU64,
    /// Sum over those of the backlog each found (bytes): over `queue_enqueued`, the
    /// mean depth an arrival sees.
    pub queue_depth_sum_bytes: AtomicU64,
}

/// A snapshot of [`FaultCounters`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FaultCountersSnapshot {
    /// [`FaultCounters::dropped`].
    pub dropped: u64,
    /// [`FaultCounters::duplicated`].
    pub duplicated: u64,
    /// [`FaultCounters::reordered`].
    pub reordered: u64,
    /// [`FaultCounters::corrupted`].
    pub corrupted: u64,
    /// [`FaultCounters::ce_marked`].
    pub ce_marked: u64,
    /// [`FaultCounters::queue_dropped`].
    pub queue_dropped: u64,
    /// [`FaultCounters::queue_max_depth_bytes`].
    pub queue_max_depth_bytes: u64,
    /// [`FaultCounters::queue_enqueued`].
    pub queue_enqueued: u64,
    /// [`FaultCounters::queue_depth_sum_bytes`].
    pub queue_depth_sum_bytes: u64,
}

impl FaultCounters {
    /// Reads every counter.
    pub fn snapshot(&self) -> FaultCountersSnapshot {
        let r = |c: &AtomicU64| c.load(Ordering::Relaxed);
        FaultCountersSnapshot {
            dropped: r(&self.dropped),
            duplicated: r(&self.duplicated),
            reordered: r(&self.reordered),
            corrupted: r(&self.corrupted),
            ce_marked: r(&self.ce_marked),
            queue_dropped: r(&self.queue_dropped),
            queue_max_depth_bytes: r(&self.queue_max_depth_bytes),
            queue_enqueued: r(&self.queue_enqueued),
            queue_depth_sum_bytes: r(&self.queue_depth_sum_bytes),
        }
    }
}

impl FaultCountersSnapshot {
    /// All faults injected.
    pub fn total(&self) -> u64 {
        self.dropped + self.duplicated + self.reordered + self.corrupted
    }
}

/// SplitMix64 (Steele, Lea, Flood 2014): small, seedable, good enough to draw faults.
#[derive(Debug, Clone)]
struct SplitMix64(u64);

impl SplitMix64 {
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// Uniform in `0..n` (n > 0), by multiply-shift.
    fn below(&mut self, n: u64) -> u64 {
        ((u128::from(self.next_u64()) * u128::from(n)) >> 64) as u64
    }
}

/// The fate of one received datagram.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fate {
    /// Delivered as received.
    Deliver,
    /// Dropped.
    Drop,
    /// One bit flipped, then delivered.
    Corrupt,
    /// Delivered twice.
    Duplicate,
    /// Held back, delivered later.
    Reorder,
}

/// Per-datagram fault decisions from a seeded stream: cumulative thresholds on one
/// 64-bit draw, so each fault has exactly its probability and they exclude each other.
#[derive(Debug, Clone)]
pub struct FaultDecider {
    rng: SplitMix64,
    /// Upper ends (exclusive) of the drop, corrupt, duplicate and reorder ranges of
    /// the draw, as fractions of 2^64.
    thresholds: [u128; 4],
    /// A second draw below this marks CE (as a fraction of 2^64; 0: never drawn).
    ce_mark: u128,
}

impl FaultDecider {
    /// A decider for `cfg` with its own `seed` (not `cfg.seed`: callers derive one).
    pub fn new(cfg: &FaultConfig, seed: u64) -> Self {
        let scale = |p: f64| (p.clamp(0.0, 1.0) * 18_446_744_073_709_551_616.0) as u128;
        let mut acc = 0u128;
        let mut thresholds = [0u128; 4];
        for (t, p) in thresholds
            .iter_mut()
            .zip([cfg.loss, cfg.corrupt, cfg.duplicate, cfg.reorder])
        {
            acc += scale(p);
            *t = acc;
        }
        FaultDecider {
            rng: SplitMix64(seed),
            thresholds,
            ce_mark: scale(cfg.ce_mark),
        }
    }

    /// `true` with probability `p` (one draw unless `p` is 0 or 1).
    pub fn draw(&mut self, p: f64) -> bool {
        if p <= 0.0 {
            return false;
        }
        p >= 1.0 || (self.rng.next_u64() as f64) < p * 18_446_744_073_709_551_616.0
    }

    /// Whether the next delivered datagram is CE-marked (no draw when marking is off,
    /// so the fates of a configuration without it stay as they were).
    pub fn next_ce_mark(&mut self) -> bool {
        self.ce_mark > 0 && u128::from(self.rng.next_u64()) < self.ce_mark
    }

    /// The fate of the next datagram.
    pub fn next_fate(&mut self) -> Fate {
        let u = u128::from(self.rng.next_u64());
        let [drop, corrupt, dup, reorder] = self.thresholds;
        if u < drop {
            Fate::Drop
        } else if u < corrupt {
            Fate::Corrupt
        } else if u < dup {
            Fate::Duplicate
        } else if u < reorder {
            Fate::Reorder
        } else {
            Fate::Deliver
        }
    }

    /// Flips one bit of `data` (not in the ICRC-masked BTH byte when `data` is long
    /// enough to have one); returns the byte index. Nothing for an empty slice.
    pub fn flip_bit(&mut self, data: &mut [u8]) -> Option<usize> {
        let len = data.len() as u64;
        if len == 0 {
            return None;
        }
        let skip = len > ICRC_MASKED_BYTE as u64;
        let mut byte = self.rng.below(if skip { len - 1 } else { len }) as usize;
        if skip && byte >= ICRC_MASKED_BYTE {
            byte += 1;
        }
        let bit = self.rng.below(8) as u32;
        data[byte] ^= 1 << bit;
        Some(byte)
    }
}

/// Where the `i`-th delivered datagram of a batch is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Delivery {
    /// In the receive batch's slot `j`.
    Slot(usize),
    /// In [`RxFaults::released`]'s entry `k` (a datagram held back earlier).
    Released(usize),
}

#[derive(Debug)]
struct Held {
    from: SocketAddr,
    /// The packet's predicted IPv4 ID ([`super::socket::RxPacket::ipv4_id`]).
    ipv4_id: u16,
    data: Vec<u8>,
    /// Datagrams still to arrive before it is delivered.
    after: u32,
    since: Instant,
}

/// The fault layer of one receive socket (see the module docs): decides each
/// datagram's fate as a batch comes in and lists what is to be delivered, in order.
#[derive(Debug)]
pub struct RxFaults {
    cfg: FaultConfig,
    decider: FaultDecider,
    counters: Arc<FaultCounters>,
    order: Vec<Delivery>,
    held: Vec<Held>,
    released: Vec<(SocketAddr, u16, Vec<u8>)>,
    spare: Vec<Vec<u8>>,
    queue: Option<RxQueue>,
}

impl RxFaults {
    /// A layer applying `cfg` with the decision stream `seed`, counting into `counters`.
    pub fn new(cfg: FaultConfig, seed: u64, counters: Arc<FaultCounters>) -> Self {
        RxFaults {
            decider: FaultDecider::new(&cfg, seed),
            cfg,
            counters,
            order: Vec::new(),
            held: Vec::new(),
            released: Vec::new(),
            spare: Vec::new(),
            queue: cfg.queue.map(RxQueue::new),
        }
    }

    /// Decides the fate of a batch just received: `datagrams` yields each packet's source
    /// (`None`: not an IP source; delivered untouched), predicted IPv4 ID (kept with a
    /// held packet) and bytes, which a corruption changes in place. A datagram that UDP
    /// GRO coalesced comes here already split, so each packet has its own fate. Afterwards [`Self::delivery`] lists what to deliver. Held
    /// datagrams whose time is up are delivered at the end, even with an empty batch.
    /// Returns the number of deliveries.
    pub fn apply<'a>(
        &mut self,
        datagrams: impl Iterator<Item = (Option<SocketAddr>, u16, &'a mut [u8])>,
    ) -> usize {
        self.order.clear();
        for (_, _, buf) in self.released.drain(..) {
            self.spare.push(buf);
        }
        for (j, (from, ipv4_id, data)) in datagrams.enumerate() {
            // A datagram without an IP source cannot be held (nor processed later).
            let fate = match from {
                Some(_) => self.decider.next_fate(),
                None => Fate::Deliver,
            };
            let held_before = self.held.len();
            if from.is_some()
                && matches!(fate, Fate::Deliver | Fate::Corrupt | Fate::Duplicate)
                && data.len() > ICRC_MASKED_BYTE
                && self.decider.next_ce_mark()
            {
                data[ICRC_MASKED_BYTE] |= BTH_FECN_BIT;
                self.counters.ce_marked.fetch_add(1, Ordering::Relaxed);
            }
            match fate {
                Fate::Deliver if self.queue.is_some() => {
                    if let Some(from) = from {
                        self.enqueue(from, ipv4_id, data);
                    }
                }
                Fate::Deliver => self.order.push(Delivery::Slot(j)),
                Fate::Drop => {
                    self.counters.dropped.fetch_add(1, Ordering::Relaxed);
                }
                Fate::Corrupt => {
                    self.decider.flip_bit(data);
                    self.counters.corrupted.fetch_add(1, Ordering::Relaxed);
                    self.order.push(Delivery::Slot(j));
                }
                Fate::Duplicate => {
                    self.counters.duplicated.fetch_add(1, Ordering::Relaxed);
                    self.order.push(Delivery::Slot(j));
                    self.order.push(Delivery::Slot(j));
                }
                Fate::Reorder => {
                    if let Some(from) = from {
                        let mut copy = self.spare.pop().unwrap_or_default();
                        copy.clear();
                        copy.extend_from_slice(data);
                        self.held.push(Held {
                            from,
                            ipv4_id,
                            data: copy,
                            after: self.cfg.reorder_depth,
                            since: Instant::now(),
                        });
                        self.counters.reordered.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
            // This datagram arrived: the ones held before it are one closer to release.
            let (mut k, mut older) = (0, held_before);
            while k < older {
                self.held[k].after = self.held[k].after.saturating_sub(1);
                if self.held[k].after == 0 {
                    self.release(k);
                    older -= 1;
                } else {
                    k += 1;
                }
            }
        }
        if let Some(q) = &mut self.queue {
            let now = Instant::now();
            while let Some(d) = q.pop_due(now) {
                self.released.push((d.from, d.ipv4_id, d.data));
                self.order.push(Delivery::Released(self.released.len() - 1));
            }
        }
        if !self.held.is_empty() {
            let now = Instant::now();
            let max = self.cfg.reorder_max_hold;
            let mut k = 0;
            while k < self.held.len() {
                if now.saturating_duration_since(self.held[k].since) >= max {
                    self.release(k);
                } else {
                    k += 1;
                }
            }
        }
        self.order.len()
    }

    /// A datagram meets the receive queue: dropped at its tail, or queued (CE-marked
    /// by RED on the depth it finds).
    fn enqueue(&mut self, from: SocketAddr, ipv4_id: u16, data: &[u8]) {
        let Some(q) = &mut self.queue else {
            return;
        };
        if q.overflows(data.len()) {
            self.counters.queue_dropped.fetch_add(1, Ordering::Relaxed);
            return;
        }
        let c = &self.counters;
        c.queue_enqueued.fetch_add(1, Ordering::Relaxed);
        c.queue_depth_sum_bytes
            .fetch_add(q.depth(), Ordering::Relaxed);
        let mut copy = self.spare.pop().unwrap_or_default();
        copy.clear();
        copy.extend_from_slice(data);
        if copy.len() > ICRC_MASKED_BYTE
            && copy[ICRC_MASKED_BYTE] & BTH_FECN_BIT == 0
            && self.decider.draw(q.mark_probability(q.depth()))
        {
            copy[ICRC_MASKED_BYTE] |= BTH_FECN_BIT;
            self.counters.ce_marked.fetch_add(1, Ordering::Relaxed);
        }
        q.push(Instant::now(), from, ipv4_id, copy);
        self.counters
            .queue_max_depth_bytes
            .fetch_max(q.depth(), Ordering::Relaxed);
    }

    fn release(&mut self, k: usize) {
        let h = self.held.remove(k);
        self.released.push((h.from, h.ipv4_id, h.data));
        self.order.push(Delivery::Released(self.released.len() - 1));
    }

    /// Where the `i`-th delivery of the last [`Self::apply`] is.
    pub fn delivery(&self, i: usize) -> Option<Delivery> {
        self.order.get(i).copied()
    }

    /// A released packet of the last [`Self::apply`]: source, predicted IPv4 ID and
    /// bytes.
    pub fn released(&self, k: usize) -> Option<(SocketAddr, u16, &[u8])> {
        self.released
            .get(k)
            .map(|(a, id, d)| (*a, *id, d.as_slice()))
    }

    /// Datagrams currently held back (reordered, or waiting in the receive queue).
    pub fn held(&self) -> usize {
        self.held.len() + self.queue.as_ref().map_or(0, RxQueue::len)
    }
}

/// The decision seed of poll group `index` of a device on `ip` under `seed`: distinct
/// per device and group, fixed for a given configuration.
pub fn group_seed(seed: u64, ip: std::net::IpAddr, index: u32) -> u64 {
    let ip_bits: u128 = match ip {
        std::net::IpAddr::V4(a) => u128::from(u32::from(a)),
        std::net::IpAddr::V6(a) => u128::from(a),
    };
    let mut m = SplitMix64(seed ^ (ip_bits as u64) ^ ((ip_bits >> 64) as u64).rotate_left(17));
    m.0 ^= u64::from(index).wrapping_mul(0xD6E8_FEB8_6659_FD93);
    m.next_u64()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{IpAddr, Ipv4Addr};

    fn from() -> Option<SocketAddr> {
        Some(SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 0xC000))
    }

    fn layer(cfg: FaultConfig) -> (RxFaults, Arc<FaultCounters>) {
        let c = Arc::new(FaultCounters::default());
        (RxFaults::new(cfg, 42, c.clone()), c)
    }

    /// Runs `n` one-byte-tagged datagrams of 64 bytes through `f` in batches of
    /// `batch`; returns the first byte of each delivered datagram, in order.
    fn run(f: &mut RxFaults, n: usize, batch: usize) -> Vec<u8> {
        let mut out = Vec::new();
        let mut next = 0usize;
        while next < n {
            let k = batch.min(n - next);
            let mut bufs: Vec<Vec<u8>> = (next..next + k)
                .map(|i| {
                    let mut v = vec![0u8; 64];
                    v[0] = i as u8;
                    v
                })
                .collect();
            let got = f.apply(bufs.iter_mut().map(|b| (from(), 0, b.as_mut_slice())));
            for i in 0..got {
                match f.delivery(i) {
                    Some(Delivery::Slot(j)) => out.push(bufs[j][0]),
                    Some(Delivery::Released(r)) => out.push(f.released(r).unwrap().2[0]),
                    None => panic!("delivery {i} of {got} missing"),
                }
            }
            next += k;
        }
        out
    }

    #[test]
    fn config_ranges_are_checked() {
        let mut c = FaultConfig::with_seed(1);
        assert_eq!(c.validate(), Ok(()));
        assert!(c.is_noop());
        c.loss = 1.5;
        assert!(matches!(
            c.validate(),
            Err(FaultConfigError::OutOfRange { name: "loss", .. })
        ));
        c.loss = f64::NAN;
        assert!(c.validate().is_err());
        c.loss = 0.6;
        c.corrupt = 0.6;
        assert!(matches!(
            c.validate(),
            Err(FaultConfigError::SumAboveOne { .. })
        ));
        c.corrupt = 0.0;
        c.reorder_depth = 0;
        assert_eq!(c.validate(), Err(FaultConfigError::ZeroReorderDepth));
    }

    #[test]
    fn no_faults_delivers_everything_in_order() {
        let (mut f, c) = layer(FaultConfig::with_seed(1));
        let out = run(&mut f, 200, 32);
        assert_eq!(out, (0..200).map(|i| i as u8).collect::<Vec<_>>());
        assert_eq!(c.snapshot().total(), 0);
    }

    #[test]
    fn loss_drops_about_its_share_and_counts_it() {
        let cfg = FaultConfig {
            loss: 0.25,
            ..FaultConfig::with_seed(7)
        };
        let (mut f, c) = layer(cfg);
        let n = 20_000usize;
        let mut delivered = 0;
        for _ in 0..n / 100 {
            delivered += run(&mut f, 100, 32).len();
        }
        let dropped = c.snapshot().dropped as usize;
        assert_eq!(delivered + dropped, n);
        // 25% of 20000 = 5000, sd ~61: well inside +-400.
        assert!((4600..5400).contains(&dropped), "{dropped}");
    }

    #[test]
    fn duplicates_arrive_twice() {
        let cfg = FaultConfig {
            duplicate: 1.0,
            ..FaultConfig::with_seed(3)
        };
        let (mut f, c) = layer(cfg);
        let out = run(&mut f, 10, 4);
        assert_eq!(
            out,
            vec![0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7, 8, 8, 9, 9]
        );
        assert_eq!(c.snapshot().duplicated, 10);
    }

    #[test]
    fn reordered_datagram_comes_after_the_next_k() {
        let cfg = FaultConfig {
            reorder: 0.1,
            reorder_depth: 2,
            reorder_max_hold: Duration::from_secs(3600),
            ..FaultConfig::with_seed(11)
        };
        let (mut f, c) = layer(cfg);
        let out = run(&mut f, 250, 32);
        let reordered = c.snapshot().reordered;
        assert!(reordered > 5, "{reordered}");
        // Everything arrives exactly once (the last few may still be held).
        let mut sorted = out.clone();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(sorted.len(), out.len());
        assert_eq!(out.len() + f.held(), 250);
        // A held datagram arrives after at most `reorder_depth` later ones (fewer when
        // those were held too), and some arrive after exactly that many.
        let overtaken: Vec<usize> = out
            .iter()
            .enumerate()
            .map(|(pos, &x)| out[..pos].iter().filter(|&&y| y > x).count())
            .collect();
        assert!(overtaken.iter().all(|&k| k <= 2), "{out:?}");
        assert!(overtaken.contains(&2), "{out:?}");
    }

    #[test]
    fn held_datagram_is_released_after_max_hold_with_empty_batches() {
        let cfg = FaultConfig {
            reorder: 1.0,
            reorder_depth: 100,
            reorder_max_hold: Duration::ZERO,
            ..FaultConfig::with_seed(5)
        };
        let (mut f, _) = layer(cfg);
        let mut one = vec![9u8; 16];
        // Zero hold: released by the same apply that took it.
        assert_eq!(f.apply(std::iter::once((from(), 0, one.as_mut_slice()))), 1);
        assert_eq!(f.delivery(0), Some(Delivery::Released(0)));
        assert_eq!(f.released(0).unwrap().2, &[9u8; 16][..]);
        assert_eq!(f.apply(std::iter::empty()), 0);
        assert_eq!(f.held(), 0);
    }

    #[test]
    fn corruption_flips_one_bit_outside_the_masked_byte() {
        let cfg = FaultConfig {
            corrupt: 1.0,
            ..FaultConfig::with_seed(9)
        };
        let mut d = FaultDecider::new(&cfg, 1);
        for _ in 0..2000 {
            let mut b = vec![0u8; 8];
            let at = d.flip_bit(&mut b).unwrap();
            assert_ne!(at, ICRC_MASKED_BYTE);
            assert_eq!(b.iter().map(|x| x.count_ones()).sum::<u32>(), 1);
            assert_eq!(b[at].count_ones(), 1);
        }
        assert_eq!(d.flip_bit(&mut []), None);
        let (mut f, c) = layer(cfg);
        let mut p = vec![0u8; 32];
        assert_eq!(f.apply(std::iter::once((from(), 0, p.as_mut_slice()))), 1);
        assert_eq!(p.iter().map(|x| x.count_ones()).sum::<u32>(), 1);
        assert_eq!(c.snapshot().corrupted, 1);
    }

    #[test]
    fn same_seed_same_decisions() {
        let cfg = FaultConfig {
            loss: 0.1,
            reorder: 0.1,
            duplicate: 0.1,
            corrupt: 0.1,
            ..FaultConfig::with_seed(1)
        };
        let mut a = FaultDecider::new(&cfg, 77);
        let mut b = FaultDecider::new(&cfg, 77);
        let mut c = FaultDecider::new(&cfg, 78);
        let fa: Vec<Fate> = (0..500).map(|_| a.next_fate()).collect();
        let fb: Vec<Fate> = (0..500).map(|_| b.next_fate()).collect();
        let fc: Vec<Fate> = (0..500).map(|_| c.next_fate()).collect();
        assert_eq!(fa, fb);
        assert_ne!(fa, fc);
        let ip = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2));
        assert_ne!(group_seed(1, ip, 0), group_seed(1, ip, 1));
        assert_eq!(group_seed(1, ip, 1), group_seed(1, ip, 1));
    }

    #[test]
    fn the_ce_mark_variable_takes_a_probability() {
        let c = FaultConfig::ce_mark_from(" 0.02 ").unwrap().unwrap();
        assert_eq!(c.ce_mark, 0.02);
        assert_eq!((c.loss, c.queue), (0.0, None));
        assert_eq!(FaultConfig::ce_mark_from("0"), Ok(None));
        for bad in ["", "2", "-0.1", "NaN", "often"] {
            assert_eq!(FaultConfig::ce_mark_from(bad), Err(()), "{bad:?}");
        }
    }
}
