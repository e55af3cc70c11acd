//! One direction of the simulated network: a link of a given rate and propagation delay
//! and the seeded impairments applied to each packet handed to it.
//!
//! The link is pulled, as a NIC's transmit engine is: the sender offers its next packet
//! when the previous one has been serialized, so packets queue in the QP, not on the
//! wire. A packet occupies the link for `(len + WIRE_OVERHEAD) * ps_per_byte` and arrives
//! `delay_ns` (plus jitter, plus any reordering delay) after its last bit left.
use rand::rngs::StdRng;
use rand::Rng;

/// Bytes a packet occupies on an Ethernet link besides its UDP payload: Ethernet header
/// 14, FCS 4, preamble and inter-frame gap 20, IPv4 20, UDP 8.
pub(crate) const WIRE_OVERHEAD: u64 = 66;

/// Idle packet slots after which the Gilbert-Elliott state is drawn from its stationary
/// distribution instead of stepped slot by slot.
const GE_MIXED_SLOTS: u64 = 256;

/// Gilbert-Elliott burst loss: a two-state Markov chain stepped once per packet slot
/// (the serialization time of a 1 KiB packet), so a burst lasts a time, not a number
/// of packets: a sender that goes quiet for a while finds the chain moved on. A packet
/// is lost with the loss probability of the state it finds.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct GilbertElliott {
    /// Probability of moving from the good to the bad state, per packet.
    pub p_good_to_bad: f64,
    /// Probability of moving from the bad to the good state, per packet (the mean burst
    /// is `1 / p_bad_to_good` packets).
    pub p_bad_to_good: f64,
    /// Loss probability in the good state.
    pub loss_good: f64,
    /// Loss probability in the bad state.
    pub loss_bad: f64,
}

/// Per-packet impairments; every probability is per packet and direction, 0 disables.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(crate) struct Impairments {
    /// Independent (Bernoulli) loss.
    pub loss: f64,
    /// Burst loss, on top of `loss`.
    pub burst: Option<GilbertElliott>,
    /// Probability that a packet is held back by an extra delay uniform in
    /// `1..=reorder_ns`, overtaken by the packets behind it.
    pub reorder: f64,
    /// Largest extra delay of a reordered packet, ns.
    pub reorder_ns: u64,
    /// Probability that a packet arrives twice (the copy up to `reorder_ns` later,
    /// at least 1 ns).
    pub dup: f64,
    /// Probability that a delivered copy has 1 to 3 bits flipped in the ICRC-covered
    /// bytes; the receiver must drop it on the ICRC check.
    pub corrupt: f64,
    /// Extra delay uniform in `0..=jitter_ns` on every packet; arrivals stay in order
    /// (jitter alone never reorders).
    pub jitter_ns: u64,
    /// Probability of ECN Congestion Experienced marking. The IP ECN field is outside
    /// the ICRC (masked, RoCEv2 Annex A17.3.3); the mark is also set in the BTH FECN
    /// bit, which the ICRC masks as well, so a marked packet must still verify.
    pub ce: f64,
}

impl Impairments {
    /// No impairment at all.
    pub const NONE: Impairments = Impairments {
        loss: 0.0,
        burst: None,
        reorder: 0.0,
        reorder_ns: 0,
        dup: 0.0,
        corrupt: 0.0,
        jitter_ns: 0,
        ce: 0.0,
    };
}

/// Rate, delay and impairments of one direction.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct LinkCfg {
    /// One-way propagation delay, ns.
    pub delay_ns: u64,
    /// Serialization time, picoseconds per byte (320 = 25 Gbit/s).
    pub ps_per_byte: u64,
    pub impair: Impairments,
    /// The sender stalls: no packet starts serializing in `[from, from + for)` (virtual
    /// ns), as an emulated host that is descheduled for a while.
    pub pause: Option<(u64, u64)>,
}

impl Default for LinkCfg {
    fn default() -> Self {
        LinkCfg {
            delay_ns: 2_000,
            ps_per_byte: 320,
            impair: Impairments::NONE,
            pause: None,
        }
    }
}

/// What happens to one copy of a packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Arrival {
    /// Arrival time, ns.
    pub at: u64,
    /// Flip bits in the ICRC-covered bytes.
    pub corrupt: bool,
    /// ECN CE mark.
    pub ce: bool,
}

/// Counts of what one direction did to its packets.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct LinkStats {
    /// Packets offered by the sender.
    pub sent: u64,
    /// Packets lost (random or burst loss), no copy delivered.
    pub lost: u64,
    /// Packets dropped because the peer was dead.
    pub blackholed: u64,
    /// Extra copies created.
    pub duplicated: u64,
    /// Packets held back for reordering.
    pub reordered: u64,
}

/// One direction's state.
#[derive(Clone, Debug)]
pub(crate) struct Link {
    pub cfg: LinkCfg,
    /// When the last packet's last bit leaves, ns.
    pub free_at: u64,
    /// Latest in-order arrival so far (jitter keeps order behind it), ns.
    last_arrival: u64,
    /// Gilbert-Elliott state: bad.
    bad: bool,
    /// When the Gilbert-Elliott chain was last stepped, ns.
    ge_at: u64,
    pub stats: LinkStats,
}

impl Link {
    /// An idle link.
    pub fn new(cfg: LinkCfg) -> Self {
        Link {
            cfg,
            free_at: 0,
            last_arrival: 0,
            bad: false,
            ge_at: 0,
            stats: LinkStats::default(),
        }
    }

    /// Serializes a packet of `len` UDP payload bytes offered at `now` (the link must be
    /// free) and decides its fate: zero copies (lost), one, or two. Returns the copies.
    pub fn transmit(&mut self, now: u64, len: usize, rng: &mut StdRng) -> Vec<Arrival> {
        let im = self.cfg.impair;
        self.stats.sent += 1;
        let mut start = self.free_at.max(now);
        if let Some((from, dur)) = self.cfg.pause {
            if (from..from + dur).contains(&start) {
                start = from + dur;
            }
        }
        self.free_at = start + (len as u64 + WIRE_OVERHEAD) * self.cfg.ps_per_byte / 1000;
        let mut lost = im.loss > 0.0 && rng.gen_bool(im.loss);
        if let Some(ge) = im.burst {
            let slot = ((1024 + WIRE_OVERHEAD) * self.cfg.ps_per_byte / 1000).max(1);
            let idle_slots = now.saturating_sub(self.ge_at) / slot;
            self.ge_at = now;
            if idle_slots >= GE_MIXED_SLOTS {
                // Long enough for the chain to forget its state: draw it afresh.
                let p_bad = ge.p_good_to_bad / (ge.p_good_to_bad + ge.p_bad_to_good);
                self.bad = rng.gen_bool(p_bad.clamp(0.0, 1.0));
            } else {
                for _ in 0..=idle_slots {
                    let flip = if self.bad {
                        ge.p_bad_to_good
                    } else {
                        ge.p_good_to_bad
                    };
                    if rng.gen_bool(flip) {
                        self.bad = !self.bad;
                    }
                }
            }
            let p = if self.bad { ge.loss_bad } else { ge.loss_good };
            lost |= p > 0.0 && rng.gen_bool(p);
        }
        if lost {
            self.stats.lost += 1;
            return vec![];
        }
        let jitter = if im.jitter_ns > 0 {
            rng.gen_range(0..=im.jitter_ns)
        } else {
            0
        };
        let mut at = (self.free_at + self.cfg.delay_ns + jitter).max(self.last_arrival);
        if im.reorder > 0.0 && im.reorder_ns > 0 && rng.gen_bool(im.reorder) {
            self.stats.reordered += 1;
            at += rng.gen_range(1..=im.reorder_ns);
        } else {
            self.last_arrival = at;
        }
        let mut copies = vec![self.copy(at, rng)];
        if im.dup > 0.0 && rng.gen_bool(im.dup) {
            self.stats.duplicated += 1;
            let extra = rng.gen_range(1..=im.reorder_ns.max(1_000));
            copies.push(self.copy(at + extra, rng));
        }
        copies
    }

    fn copy(&mut self, at: u64, rng: &mut StdRng) -> Arrival {
        let im = self.cfg.impair;
        let corrupt = im.corrupt > 0.0 && rng.gen_bool(im.corrupt);
        let ce = im.ce > 0.0 && rng.gen_bool(im.ce);
        Arrival { at, corrupt, ce }
    }
}
