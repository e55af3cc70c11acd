//! A two-QP network in virtual time with a real link model, for the fast-recovery tests
//! and the goodput measurement: per direction a FIFO link of a given rate (serialization
//! time per byte), a one-way propagation delay and seeded random loss (both directions,
//! every packet kind). Packets travel as bytes through `wire` (built and parsed back).
//!
//! Unlike the zero-delay harness in `mod.rs`, round trips take time here, so the adaptive
//! retransmission timer has something to measure and go-back-N pays for the data in
//! flight behind a loss.
use std::collections::VecDeque;

use rand::{Rng, SeedableRng};

use super::*;

/// Link and workload parameters.
#[derive(Clone, Copy, Debug)]
pub(super) struct LinkCfg {
    /// One-way propagation delay, ns.
    pub delay_ns: u64,
    /// Serialization time, picoseconds per byte (320 = 25 Gbit/s).
    pub ps_per_byte: u64,
    /// Per-packet loss probability, both directions.
    pub loss: f64,
    pub seed: u64,
    /// Bytes per RDMA WRITE.
    pub wr_bytes: u32,
    /// WRITEs kept outstanding.
    pub qd: usize,
    /// WRITEs in all.
    pub total_wrs: usize,
    /// Enable selective retransmission on both QPs.
    pub selective: bool,
    /// Drop A's request packet with this 0-based number (retransmissions counted).
    pub drop_nth: Option<u64>,
    /// Random loss only once A has a round-trip sample (a connection whose first
    /// exchange went through; before it, only the IBTA timer resends).
    pub loss_after_sample: bool,
}

impl Default for LinkCfg {
    fn default() -> Self {
        LinkCfg {
            delay_ns: 2_000,
            ps_per_byte: 320,
            loss: 0.0,
            seed: 1,
            wr_bytes: 128 * 1024,
            qd: 16,
            total_wrs: 128,
            selective: false,
            drop_nth: None,
            loss_after_sample: false,
        }
    }
}

/// Bytes a packet occupies on an Ethernet link besides its RoCE headers and payload:
/// Ethernet (14 + 4 FCS + 20 preamble/IFG), IPv4 20, UDP 8.
const WIRE_OVERHEAD: u64 = 66;

struct InFlight {
    arrive: u64,
    bytes: Vec<u8>,
}

/// What a run measured.
#[derive(Clone, Debug, Default)]
pub(super) struct RunStats {
    /// Virtual ns from the first post to the last completion.
    pub elapsed_ns: u64,
    /// Bytes of WRITEs completed successfully.
    pub bytes_ok: u64,
    /// Packets A handed to the link.
    pub a_sent: u64,
    /// Packets dropped by the link (both directions).
    pub dropped: u64,
    /// Largest number of request packets A sent in one transmit round (between two
    /// events: a packet arrival or a timer).
    pub max_burst: u64,
    /// Largest burst of A right after it received a PSN sequence error NAK.
    pub max_burst_after_nak: u64,
    /// Completion statuses of A's send WRs, in order.
    pub statuses: Vec<WcStatus>,
    /// A's counters at the end.
    pub a_counters: crate::rc::QpCounters,
}

impl RunStats {
    /// Goodput in bytes per virtual second.
    pub fn goodput(&self) -> f64 {
        self.bytes_ok as f64 / (self.elapsed_ns.max(1) as f64 / 1e9)
    }
}

pub(super) struct LinkNet {
    pub cfg: LinkCfg,
    pub net: Net,
    links: [VecDeque<InFlight>; 2],
    free_at: [u64; 2],
    rng: rand::rngs::StdRng,
    pub stats: RunStats,
    /// A received a sequence NAK in the last event.
    nak_seen: bool,
    /// Drop every packet from A to B (a dead peer).
    pub blackhole: bool,
    /// Drop A's request packet with this 0-based number (counting every request packet
    /// A sends, retransmissions included).
    drop_nth: Option<u64>,
    a_requests: u64,
}

impl LinkNet {
    pub fn new(cfg: LinkCfg, opts: Opts) -> LinkNet {
        let mut net = Net::new(opts);
        if cfg.selective {
            for qp in [&mut net.a.qp, &mut net.b.qp] {
                qp.modify(&QpAttr {
                    selective_retransmit: Some(true),
                    ..Default::default()
                })
                .unwrap();
            }
        }
        LinkNet {
            cfg,
            net,
            links: [VecDeque::new(), VecDeque::new()],
            free_at: [0; 2],
            rng: rand::rngs::StdRng::seed_from_u64(cfg.seed),
            stats: RunStats::default(),
            nak_seen: false,
            blackhole: false,
            drop_nth: cfg.drop_nth,
            a_requests: 0,
        }
    }

    /// Drops A's `n`-th (0-based) request packet.
    pub fn drop_a_to_b_nth(&mut self, n: u64) {
        self.drop_nth = Some(n);
    }

    fn now(&self) -> u64 {
        self.net.now.0
    }

    /// Drains both QPs' transmit queues onto their links.
    fn transmit(&mut self) {
        for dir in 0..2 {
            let mut burst = 0u64;
            loop {
                let now = self.net.now;
                let side = if dir == 0 {
                    &mut self.net.a
                } else {
                    &mut self.net.b
                };
                let mut env = RcEnv {
                    keys: &self.net.keys,
                    srq: side.srq.as_mut(),
                };
                let Some(tx) = side.qp.poll_transmit(now, &mut env) else {
                    break;
                };
                let (h, n) = tx.hdr.to_bytes();
                let mut bytes = h[..n].to_vec();
                bytes.extend(tx.payload.to_vec());
                bytes.extend_from_slice(&[0u8; 3][..tx.hdr.bth.pad_count as usize]);
                bytes.extend([0u8; 4]);
                let mut nth_drop = false;
                if dir == 0 {
                    self.stats.a_sent += 1;
                    if tx.hdr.bth.opcode != crate::wire::Opcode::RcAcknowledge {
                        burst += 1;
                        nth_drop = self.drop_nth == Some(self.a_requests);
                        self.a_requests += 1;
                    }
                }
                let ser = (bytes.len() as u64 + WIRE_OVERHEAD) * self.cfg.ps_per_byte / 1000;
                let start = self.free_at[dir].max(now.0);
                self.free_at[dir] = start + ser;
                let random = self.cfg.loss > 0.0
                    && (!self.cfg.loss_after_sample || self.net.a.qp.rtt().samples() > 0);
                let lost = (dir == 0 && (self.blackhole || nth_drop))
                    || (random && self.rng.gen_bool(self.cfg.loss));
                if lost {
                    self.stats.dropped += 1;
                    continue;
                }
                self.links[dir].push_back(InFlight {
                    arrive: self.free_at[dir] + self.cfg.delay_ns,
                    bytes,
                });
            }
            if dir == 0 {
                self.stats.max_burst = self.stats.max_burst.max(burst);
                if self.nak_seen {
                    self.stats.max_burst_after_nak = self.stats.max_burst_after_nak.max(burst);
                }
            }
        }
        self.nak_seen = false;
    }

    /// Runs to idle (nothing in flight, no timer armed) or `max_events`, calling
    /// `on_idle_a` after every event so the workload can post more WRs.
    pub fn run(&mut self, max_events: usize, mut feed: impl FnMut(&mut Net)) {
        feed(&mut self.net);
        for _ in 0..max_events {
            self.transmit();
            self.net.collect();
            feed(&mut self.net);
            self.transmit();
            let mut next: Option<u64> = None;
            for l in &self.links {
                if let Some(p) = l.front() {
                    next = Some(next.map_or(p.arrive, |n| n.min(p.arrive)));
                }
            }
            for t in [self.net.a.qp.poll_timeout(), self.net.b.qp.poll_timeout()]
                .into_iter()
                .flatten()
            {
                next = Some(next.map_or(t.0, |n| n.min(t.0)));
            }
            let Some(next) = next else {
                break;
            };
            self.net.now = Timestamp(self.now().max(next));
            let now = self.net.now;
            for dir in 0..2 {
                while self.links[dir].front().is_some_and(|p| p.arrive <= now.0) {
                    let Some(p) = self.links[dir].pop_front() else {
                        break;
                    };
                    let Ok(pkt) = parse(&p.bytes) else { continue };
                    let to = if dir == 0 {
                        &mut self.net.b
                    } else {
                        &mut self.net.a
                    };
                    if dir == 1
                        && pkt.hdr.aeth.is_some_and(|a| a.syndrome == 0x60)
                        && pkt.hdr.bth.opcode == crate::wire::Opcode::RcAcknowledge
                    {
                        self.nak_seen = true;
                    }
                    let mut env = RcEnv {
                        keys: &self.net.keys,
                        srq: to.srq.as_mut(),
                    };
                    to.qp.handle_packet(now, &pkt, &mut env);
                }
            }
            for s in [&mut self.net.a, &mut self.net.b] {
                if s.qp.poll_timeout().is_some_and(|t| t <= now) {
                    let mut env = RcEnv {
                        keys: &self.net.keys,
                        srq: s.srq.as_mut(),
                    };
                    s.qp.handle_timeout(now, &mut env);
                }
            }
        }
        self.net.collect();
    }

    /// The WRITE stream of `cfg`: `qd` WRITEs of `wr_bytes` outstanding, `total_wrs` in
    /// all, each to its own slot of B's region; checks the data at the end (when every
    /// WR succeeded) and returns the measurements.
    pub fn write_stream(cfg: LinkCfg, opts: Opts) -> RunStats {
        let mut ln = LinkNet::new(cfg, opts);
        let slots = cfg.qd;
        let size = cfg.wr_bytes as usize * slots;
        let (src, ks) = ln.net.mr(ln.net.a.pd, size, ALL, pattern(cfg.seed as u8));
        let (dst, kd) = ln.net.mr(ln.net.b.pd, size, ALL, |_| 0);
        let start = ln.now();
        let mut posted = 0usize;
        let mut done = 0usize;
        let mut last_done_at = start;
        let total = cfg.total_wrs;
        let wr_bytes = cfg.wr_bytes;
        ln.run(50_000_000, |net| {
            let wcs = net.a.send_wcs();
            if wcs.len() > done {
                done = wcs.len();
                last_done_at = net.now.0;
            }
            if net.a.qp.state() != QpState::Rts {
                return;
            }
            while posted < total && posted - done < slots {
                let off = (posted % slots) as u64 * wr_bytes as u64;
                let wr = send_wr(
                    posted as u64,
                    SendOp::RdmaWrite {
                        remote_addr: kd.addr + off,
                        rkey: kd.rkey,
                    },
                    &[sge(&ks, off, wr_bytes)],
                );
                if net.a.qp.post_send(&wr).is_err() {
                    break;
                }
                posted += 1;
            }
        });
        let wcs = ln.net.a.send_wcs();
        ln.stats.statuses = wcs.iter().map(|w| w.status).collect();
        ln.stats.bytes_ok =
            wcs.iter().filter(|w| w.status == WcStatus::Success).count() as u64 * wr_bytes as u64;
        ln.stats.elapsed_ns = last_done_at - start;
        ln.stats.a_counters = *ln.net.a.qp.counters();
        if wcs.len() == total && wcs.iter().all(|w| w.status == WcStatus::Success) {
            assert!(bytes(&dst) == bytes(&src), "seed {}: WRITE data", cfg.seed);
        }
        ln.stats
    }
}
