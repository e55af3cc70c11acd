//! Seeded simulated network in virtual time for the sans-IO RC core.
//!
//! Two [`RcQp`]s (the [`Net`] of the harness: key table, sides A and B, connected by
//! [`Net::new`]) exchange every packet as bytes: [`wire::build`] writes headers, payload,
//! pad and the ICRC exactly as the soft provider sends them, the receiver checks the ICRC
//! and parses ([`wire::parse_verified`]), dropping and counting what fails. Each
//! direction is a [`Link`] with a rate, a propagation delay and seeded impairments (loss,
//! Gilbert-Elliott burst loss, reordering, duplication, bit corruption, jitter, ECN CE
//! marking); a dead peer is modelled by dropping every packet arriving from a given
//! virtual time on. Virtual time jumps to the next event: a packet arrival, the end of
//! a packet's serialization, a QP timer ([`RcQp::poll_timeout`]) or an [`App`] wakeup.
//!
//! Each side's link pulls one packet at a time when it is free (a NIC's transmit
//! engine), alternating between the QP's responder and requester streams
//! (`poll_transmit` / `poll_transmit_requests_first`) unless
//! [`SimCfg::responses_first`] asks for strict priority.
//!
//! Everything random comes from one `StdRng` seeded with [`SimCfg::seed`], so a run is
//! reproduced from its seed; [`seeds`] picks the seeds of a property test and honours
//! `RC_SIM_SEED` / `RC_SIM_CASES`. `RC_SIM_TRACE=1` prints every packet sent and
//! received and every timer expiry (replay one seed with it).
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::net::{IpAddr, Ipv4Addr};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::Net;
use crate::rc::{RcEnv, TxPacket};
use crate::time::Timestamp;
use crate::wire::{self, IcrcIpInfo, Opcode, PacketHeaders, ParseError, ROCE_V2_UDP_DPORT};

pub(super) mod bottleneck;
pub(super) mod cases;
pub(super) mod fabric;
pub(super) mod link;
pub(super) mod plan;
pub(super) mod workload;

pub(super) use link::{GilbertElliott, Impairments, LinkCfg, LinkStats};

use link::Link;

/// Byte of the BTH holding FECN (bit 7), BECN and reserved bits; masked in the ICRC.
const BTH_FECN_BYTE: usize = 4;

/// Network parameters of one run.
#[derive(Clone, Copy, Debug)]
pub(crate) struct SimCfg {
    /// Seed of the network's random choices.
    pub seed: u64,
    /// `[A to B, B to A]`.
    pub links: [LinkCfg; 2],
    /// From this virtual time (ns) on, every packet arriving is dropped (a dead peer).
    pub dead_at: Option<u64>,
    /// The network dies (as `dead_at`) when A sends request packet number this + 1,
    /// which is dropped; so A always has a request the peer never saw.
    pub dead_after_requests: Option<u64>,
    /// Give a side's responder output (ACKs, READ responses) strict priority over its
    /// requests, as `RcQp::poll_transmit` alone does; otherwise the two alternate.
    pub responses_first: bool,
    /// Safety net: the run stops after this many event rounds.
    pub max_rounds: u64,
}

impl SimCfg {
    /// Both directions alike.
    pub fn symmetric(seed: u64, link: LinkCfg) -> Self {
        SimCfg {
            seed,
            links: [link, link],
            dead_at: None,
            dead_after_requests: None,
            responses_first: false,
            max_rounds: 20_000_000,
        }
    }
}

/// What the receiving end of one direction saw.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct RxStats {
    /// Copies that reached the receiver (before the ICRC check).
    pub arrived: u64,
    /// Copies corrupted by the network that reached the receiver.
    pub corrupted: u64,
    /// Copies dropped for a bad ICRC.
    pub icrc_errors: u64,
    /// Copies that failed to parse after a good ICRC.
    pub malformed: u64,
    /// Corrupted copies that passed the ICRC (must stay 0).
    pub undetected: u64,
    /// CE-marked copies delivered to the QP.
    pub ce_delivered: u64,
    /// Copies handed to `RcQp::handle_packet`.
    pub delivered: u64,
}

/// The application on top of the QPs: checks completions and posts work.
pub(crate) trait App {
    /// Called whenever something may have changed (after every event round, with all
    /// completions collected into the sides' `wcs`), at virtual time `net.now`.
    fn step(&mut self, net: &mut Net);
    /// Nothing more to wait for (every WR completed and checked).
    fn done(&self, net: &Net) -> bool;
    /// A virtual time (ns) after now at which the app wants `step` called again.
    fn wakeup(&self) -> Option<u64> {
        None
    }
}

/// How a run ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum End {
    /// The app is done and nothing is in flight.
    Done,
    /// No packet in flight and no timer armed, the app not done.
    Idle,
    /// [`SimCfg::max_rounds`] reached.
    RoundLimit,
    /// Virtual time stopped advancing (a timer due but never cleared).
    Stuck,
}

/// Rounds at one virtual instant after which a run counts as [`End::Stuck`].
const STUCK_ROUNDS: u32 = 10_000;

/// A packet copy on its way.
struct Ev {
    at: u64,
    seq: u64,
    /// 0: A to B, 1: B to A.
    dir: usize,
    hdr: PacketHeaders,
    bytes: Vec<u8>,
    corrupt: bool,
    ce: bool,
}

impl PartialEq for Ev {
    fn eq(&self, o: &Self) -> bool {
        (self.at, self.seq) == (o.at, o.seq)
    }
}
impl Eq for Ev {}
impl PartialOrd for Ev {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Ev {
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        (self.at, self.seq).cmp(&(o.at, o.seq))
    }
}

/// The simulated network around a [`Net`].
pub(crate) struct Sim {
    pub net: Net,
    pub cfg: SimCfg,
    pub links: [Link; 2],
    /// Indexed by direction, like `links`.
    pub rx: [RxStats; 2],
    heap: BinaryHeap<Reverse<Ev>>,
    seq: u64,
    rng: StdRng,
    ip: [IcrcIpInfo; 2],
    /// The sender of a direction stopped because its link was busy.
    blocked: [bool; 2],
    /// Request packets A has sent.
    a_requests: u64,
    /// Which stream of a side gets the next packet slot first.
    requests_first: [bool; 2],
    pub rounds: u64,
    /// Print every packet and timer event (`RC_SIM_TRACE=1`, for replaying a seed).
    trace: bool,
}

impl Sim {
    /// The network around `net` (QPs connected, in RTS), at `net.now`.
    pub fn new(net: Net, cfg: SimCfg) -> Sim {
        let ip = |s: u8, d: u8, qpn: u32| IcrcIpInfo {
            src: IpAddr::V4(Ipv4Addr::new(10, 0, 0, s)),
            dst: IpAddr::V4(Ipv4Addr::new(10, 0, 0, d)),
            ipv4_id: 0,
            udp_sport: 0xC000 | (qpn & 0x3FFF) as u16,
            udp_dport: ROCE_V2_UDP_DPORT,
        };
        let ip = [ip(1, 2, net.a.qp.qpn()), ip(2, 1, net.b.qp.qpn())];
        Sim {
            net,
            links: [Link::new(cfg.links[0]), Link::new(cfg.links[1])],
            rx: Default::default(),
            heap: BinaryHeap::new(),
            seq: 0,
            rng: StdRng::seed_from_u64(cfg.seed),
            ip,
            blocked: [false; 2],
            a_requests: 0,
            requests_first: [false; 2],
            rounds: 0,
            trace: std::env::var_os("RC_SIM_TRACE").is_some(),
            cfg,
        }
    }

    /// Virtual time, ns.
    pub fn now(&self) -> u64 {
        self.net.now.0
    }

    /// Runs until the app is done and the network empty, the QPs idle, or the round
    /// limit.
    pub fn run(&mut self, app: &mut dyn App) -> End {
        let mut stuck = 0u32;
        loop {
            self.settle(app);
            if app.done(&self.net) && self.heap.is_empty() {
                return End::Done;
            }
            self.rounds += 1;
            if self.rounds > self.cfg.max_rounds {
                return End::RoundLimit;
            }
            let Some(next) = self.next_event(app.wakeup()) else {
                return End::Idle;
            };
            // A timer that stays due after it fired would spin here forever.
            stuck = if next <= self.now() { stuck + 1 } else { 0 };
            if stuck > STUCK_ROUNDS {
                return End::Stuck;
            }
            self.net.now = Timestamp(self.now().max(next));
            self.deliver_due();
            self.fire_timers();
        }
    }

    /// Lets the app and the senders act until neither has anything more to do now.
    fn settle(&mut self, app: &mut dyn App) {
        loop {
            self.net.collect();
            app.step(&mut self.net);
            if !self.transmit() {
                self.net.collect();
                app.step(&mut self.net);
                if !self.transmit() {
                    return;
                }
            }
        }
    }

    /// The earliest pending event time (`app`: the app's wakeup).
    fn next_event(&self, app: Option<u64>) -> Option<u64> {
        let mut next = self.heap.peek().map(|Reverse(e)| e.at);
        if let Some(t) = app.filter(|&t| t > self.now()) {
            next = Some(next.map_or(t, |n| n.min(t)));
        }
        let mut consider = |t: u64| next = Some(next.map_or(t, |n| n.min(t)));
        for qp in [&self.net.a.qp, &self.net.b.qp] {
            if let Some(t) = qp.poll_timeout() {
                consider(t.0);
            }
        }
        for d in 0..2 {
            if self.blocked[d] {
                consider(self.links[d].free_at);
            }
        }
        next
    }

    /// Offers each idle link its sender's next packet. `true` if any packet left.
    fn transmit(&mut self) -> bool {
        let mut any = false;
        for dir in 0..2 {
            self.blocked[dir] = false;
            if self.links[dir].free_at > self.now() {
                self.blocked[dir] = true;
                continue;
            }
            let now = self.net.now;
            let Net { keys, a, b, .. } = &mut self.net;
            let side = if dir == 0 { a } else { b };
            let mut env = RcEnv {
                keys,
                srq: side.srq.as_mut(),
            };
            // Round-robin between the responder's and the requester's streams, as a
            // NIC's arbiter does (strict priority would starve the requester).
            self.requests_first[dir] = !self.requests_first[dir] && !self.cfg.responses_first;
            let tx = if self.requests_first[dir] {
                side.qp.poll_transmit_requests_first(now, &mut env)
            } else {
                side.qp.poll_transmit(now, &mut env)
            };
            let Some(tx) = tx else {
                continue;
            };
            any = true;
            self.send(dir, &tx);
            self.blocked[dir] = true;
        }
        any
    }

    /// Serializes `tx` and schedules the copies the link lets through.
    fn send(&mut self, dir: usize, tx: &TxPacket) {
        assert!(tx.hdr.matches_opcode(), "{:?}", tx.hdr);
        assert_eq!(tx.hdr.bth.pad_count, wire::pad_for(tx.payload.len()));
        let mut bytes = Vec::new();
        wire::build(&tx.hdr, &tx.payload.to_vec(), &self.ip[dir], &mut bytes);
        let now = self.now();
        if dir == 0 && is_request(tx.hdr.bth.opcode) {
            self.a_requests += 1;
            if self.cfg.dead_at.is_none()
                && self
                    .cfg
                    .dead_after_requests
                    .is_some_and(|n| self.a_requests > n)
            {
                self.cfg.dead_at = Some(now);
            }
        }
        let copies = self.links[dir].transmit(now, bytes.len(), &mut self.rng);
        if self.trace {
            let h = &tx.hdr;
            println!(
                "{now} {} send {:?} psn {:#08x} ackreq {} aeth {:?} len {} -> {:?}",
                ["A>B", "B>A"][dir],
                h.bth.opcode,
                h.bth.psn,
                h.bth.ack_req,
                h.aeth,
                tx.payload.len(),
                copies.iter().map(|c| c.at).collect::<Vec<_>>()
            );
        }
        for c in copies {
            if self.cfg.dead_at.is_some_and(|d| c.at >= d) {
                self.links[dir].stats.blackholed += 1;
                continue;
            }
            self.seq += 1;
            self.heap.push(Reverse(Ev {
                at: c.at,
                seq: self.seq,
                dir,
                hdr: tx.hdr,
                bytes: bytes.clone(),
                corrupt: c.corrupt,
                ce: c.ce,
            }));
        }
    }

    /// Hands every copy due by now to its receiver.
    fn deliver_due(&mut self) {
        let now = self.now();
        while self.heap.peek().is_some_and(|Reverse(e)| e.at <= now) {
            let Some(Reverse(ev)) = self.heap.pop() else {
                break;
            };
            self.deliver(ev);
        }
    }

    fn deliver(&mut self, mut ev: Ev) {
        let rx = &mut self.rx[ev.dir];
        rx.arrived += 1;
        if ev.corrupt {
            rx.corrupted += 1;
            flip_bits(&mut ev.bytes, &mut self.rng);
        }
        if ev.ce {
            if let Some(b) = ev.bytes.get_mut(BTH_FECN_BYTE) {
                *b |= 0x80;
            }
        }
        if self.trace {
            let h = &ev.hdr;
            println!(
                "{} {} recv {:?} psn {:#08x} corrupt {}",
                ev.at,
                ["A>B", "B>A"][ev.dir],
                h.bth.opcode,
                h.bth.psn,
                ev.corrupt
            );
        }
        let rx = &mut self.rx[ev.dir];
        let pkt = match wire::parse_verified(&ev.bytes, &self.ip[ev.dir]) {
            Ok(p) => p,
            Err(ParseError::BadIcrc) => {
                rx.icrc_errors += 1;
                return;
            }
            Err(_) => {
                rx.malformed += 1;
                return;
            }
        };
        if ev.corrupt {
            rx.undetected += 1;
        } else {
            let mut want = ev.hdr;
            want.bth.fecn |= ev.ce;
            assert_eq!(pkt.hdr, want, "headers changed on the way");
        }
        rx.ce_delivered += ev.ce as u64;
        rx.delivered += 1;
        let now = self.net.now;
        let Net { keys, a, b, .. } = &mut self.net;
        let to = if ev.dir == 0 { b } else { a };
        let mut env = RcEnv {
            keys,
            srq: to.srq.as_mut(),
        };
        to.qp.handle_packet(now, &pkt, &mut env);
    }

    /// Runs the QPs' expired timers.
    fn fire_timers(&mut self) {
        let now = self.net.now;
        let Net { keys, a, b, .. } = &mut self.net;
        for s in [a, b] {
            if s.qp.poll_timeout().is_some_and(|t| t <= now) {
                if self.trace {
                    println!("{} timer QP {:#x}", now.0, s.qp.qpn());
                }
                let mut env = RcEnv {
                    keys,
                    srq: s.srq.as_mut(),
                };
                s.qp.handle_timeout(now, &mut env);
            }
        }
    }
}

/// Whether `op` is a request (not an acknowledgement or READ response).
fn is_request(op: Opcode) -> bool {
    !matches!(
        op,
        Opcode::RcAcknowledge
            | Opcode::RcAtomicAcknowledge
            | Opcode::RcRdmaReadResponseFirst
            | Opcode::RcRdmaReadResponseMiddle
            | Opcode::RcRdmaReadResponseLast
            | Opcode::RcRdmaReadResponseOnly
    )
}

/// Flips 1 to 3 distinct bits of `bytes` outside the BTH byte the ICRC masks (a change
/// there is not corruption the ICRC can see).
fn flip_bits(bytes: &mut [u8], rng: &mut StdRng) {
    let nbits = bytes.len() * 8;
    if nbits <= 8 {
        return;
    }
    let mut picked: Vec<usize> = Vec::with_capacity(3);
    let want = rng.gen_range(1..=3);
    while picked.len() < want {
        let bit = rng.gen_range(0..nbits);
        if bit / 8 != BTH_FECN_BYTE && !picked.contains(&bit) {
            picked.push(bit);
        }
    }
    for bit in picked {
        bytes[bit / 8] ^= 1 << (bit % 8);
    }
}

/// `splitmix64`: spreads case numbers into unrelated seeds.
pub(crate) fn splitmix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = x;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The seeds of a property test named `test` (which salts them): `RC_SIM_SEED` (decimal
/// or 0x-hex) alone if set, else as many as the environment variable `cases_var` says
/// (default `default_cases`).
pub(crate) fn seeds(test: &str, cases_var: &str, default_cases: u64) -> Vec<u64> {
    if let Ok(s) = std::env::var("RC_SIM_SEED") {
        let s = s.trim();
        let v = match s.strip_prefix("0x") {
            Some(h) => u64::from_str_radix(h, 16),
            None => s.parse(),
        };
        return vec![v.expect("RC_SIM_SEED: a u64, decimal or 0x-hex")];
    }
    let n = std::env::var(cases_var)
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(default_cases);
    let salt = test.bytes().fold(0u64, |h, b| splitmix(h ^ b as u64));
    (0..n).map(|i| splitmix(salt ^ i)).collect()
}

/// Runs `case(seed)` for every seed of [`seeds`]`(test, "RC_SIM_CASES", default_cases)`,
/// printing how to replay a failing one.
pub(crate) fn for_each_seed(test: &str, default_cases: u64, mut case: impl FnMut(u64)) {
    for seed in seeds(test, "RC_SIM_CASES", default_cases) {
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| case(seed)));
        if let Err(e) = r {
            eprintln!(
                "{test}: failed with seed {seed:#x}; replay: RC_SIM_SEED={seed:#x} cargo test -p transport --lib rc::tests::props::{test}"
            );
            std::panic::resume_unwind(e);
        }
    }
}
