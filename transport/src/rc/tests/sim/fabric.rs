//! N-to-1 incast in virtual time, with whole QPs: N sender QPs, each on its own host
//! with a NIC of the line rate, reach one receiver host through a switch whose egress
//! port to the receiver is a [`RedQueue`] of the same rate; the receiver's N QPs answer
//! (ACKs, NAKs, CNPs) through its own NIC, on an uncongested way back.
//!
//! Every packet travels as bytes: [`wire::build`] writes it with its ICRC as the soft
//! provider does, the receiving QP gets it back through [`wire::parse_verified`], with
//! the BTH FECN bit set when the queue marked it CE. Each sender runs a [`FlowWork`]:
//! `msgs` RDMA WRITEs of `msg_len` bytes into its own region of the receiver, at most
//! `depth` outstanding; after the run every byte is compared. Virtual time jumps to
//! the next event (an arrival, a NIC becoming free, a QP timer). The run goes on after
//! the last completion until every QP's timers are idle, so a reaction point's rate
//! recovery (no marks any more) runs to its end.
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::super::{connect, pattern, send_wr, sge, Opts, ALL};
use super::bottleneck::{RedCfg, RedQueue, RedStats, Verdict};
use super::link::WIRE_OVERHEAD;
use crate::rc::{CompletionQueueKind, KeyTable, MrKeys, MrMemory, RcConfig, RcEnv, RcQp};
use crate::time::Timestamp;
use crate::verbs::{Mtu, QpCap, SendOp, WcStatus};
use crate::wire::{self, IcrcIpInfo, ROCE_V2_UDP_DPORT};

/// Byte of the BTH holding FECN (bit 7).
const BTH_FECN_BYTE: usize = 4;

/// One incast run's parameters.
#[derive(Clone, Copy, Debug)]
pub(crate) struct FabricCfg {
    pub seed: u64,
    /// Senders (and receiver QPs).
    pub flows: usize,
    /// Every NIC's and the bottleneck's serialization time, ps per byte.
    pub ps_per_byte: u64,
    /// One-way propagation delay of each hop (host to switch, switch to host), ns.
    pub hop_delay_ns: u64,
    /// The bottleneck queue (its `ps_per_byte` is taken from above).
    pub red: RedCfg,
    /// Every QP's configuration (congestion control included).
    pub qp: RcConfig,
    pub mtu: Mtu,
    /// RDMA WRITEs per flow.
    pub msgs: u64,
    /// Bytes per WRITE.
    pub msg_len: u32,
    /// Most WRITEs outstanding per flow.
    pub depth: u64,
    /// Each flow posts its first WRITE at a seeded random time in `[0, this]` ns after
    /// the start.
    pub start_spread_ns: u64,
    /// Safety net on event rounds.
    pub max_rounds: u64,
}

/// One flow's work and what came of it.
pub(crate) struct FlowWork {
    pub src: Arc<MrMemory>,
    pub src_keys: MrKeys,
    pub dst: Arc<MrMemory>,
    pub dst_keys: MrKeys,
    pub posted: u64,
    pub completed: u64,
    /// Post time of each WRITE (ns).
    pub posted_at: Vec<u64>,
    /// Completion latencies (ns), in completion order.
    pub latencies: Vec<u64>,
    /// Completion time of the last WRITE (ns).
    pub finished_at: Option<u64>,
    /// Completions that were not successful RDMA WRITEs.
    pub bad_wcs: Vec<String>,
    /// Request packets the sender put on its NIC (first sends and resends).
    pub request_pkts: u64,
    /// Lowest rate the sender's reaction point held it to (Mbit/s).
    pub min_rate_mbps: Option<f64>,
}

/// What one run did.
pub(crate) struct Fabric {
    pub cfg: FabricCfg,
    pub keys: KeyTable,
    pub senders: Vec<RcQp>,
    pub receivers: Vec<RcQp>,
    pub work: Vec<FlowWork>,
    pub queue: RedQueue,
    /// Virtual time, ns.
    pub now: u64,
    pub rounds: u64,
    /// Packets the receiver host could not verify or parse (must stay 0).
    pub bad_packets: u64,
    /// When the last WRITE of all completed, ns.
    pub all_done_at: Option<u64>,
    heap: BinaryHeap<Reverse<Ev>>,
    seq: u64,
    rng: StdRng,
    sender_nic_free: Vec<u64>,
    /// When each flow starts posting, ns.
    start_at: Vec<u64>,
    receiver_nic_free: u64,
    /// Next receiver QP the receiver's NIC polls first.
    rr: usize,
    ip_up: Vec<IcrcIpInfo>,
    ip_down: Vec<IcrcIpInfo>,
}

/// Where a packet copy is going.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Hop {
    /// Sender `i`'s packet reaches the switch.
    Switch(usize),
    /// Sender `i`'s packet starts to leave the switch (dequeue marking).
    Dequeue(usize),
    /// Sender `i`'s packet reaches its receiver QP.
    Receiver(usize),
    /// Receiver QP `i`'s packet reaches its sender.
    Sender(usize),
}

struct Ev {
    at: u64,
    seq: u64,
    hop: Hop,
    bytes: Vec<u8>,
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

/// The byte at `i` of flow `f`'s data.
fn fill(f: usize) -> impl Fn(usize) -> u8 {
    pattern(0x40 + f as u8)
}

impl Fabric {
    /// N connected QP pairs (RTS) and their regions; nothing posted yet.
    pub fn new(cfg: FabricCfg) -> Fabric {
        let keys = KeyTable::new();
        let opts = Opts {
            mtu: cfg.mtu,
            cfg: cfg.qp,
            ..Opts::default()
        };
        let cap = QpCap::default();
        let len = (cfg.msgs * u64::from(cfg.msg_len)) as usize;
        let mut senders = vec![];
        let mut receivers = vec![];
        let mut work = vec![];
        let mut ip_up = vec![];
        let mut ip_down = vec![];
        for f in 0..cfg.flows {
            let (ps, pr) = (keys.alloc_pd(), keys.alloc_pd());
            let (sq, rq) = (0x100 + f as u32, 0x200 + f as u32);
            let mut s = RcQp::new(sq, ps, cap, false, cfg.qp);
            let mut r = RcQp::new(rq, pr, cap, false, cfg.qp);
            connect(&mut s, rq, opts.psn_b, opts.psn_a, &opts);
            connect(&mut r, sq, opts.psn_a, opts.psn_b, &opts);
            let src = MrMemory::new(len).expect("source region");
            let bytes = unsafe { std::slice::from_raw_parts_mut(src.as_ptr(), len) };
            for (i, b) in bytes.iter_mut().enumerate() {
                *b = fill(f)(i);
            }
            let src_keys = keys.reg_mr(ps, &src, 0, len, ALL).expect("source MR");
            let dst = MrMemory::new(len).expect("destination region");
            let dst_keys = keys.reg_mr(pr, &dst, 0, len, ALL).expect("destination MR");
            let host = |h: u8, qpn: u32| IcrcIpInfo {
                src: IpAddr::V4(Ipv4Addr::new(10, 0, 1, h)),
                dst: IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)),
                ipv4_id: 0,
                udp_sport: 0xC000 | (qpn & 0x3FFF) as u16,
                udp_dport: ROCE_V2_UDP_DPORT,
            };
            let up = host(f as u8 + 2, sq);
            let mut down = host(f as u8 + 2, rq);
            std::mem::swap(&mut down.src, &mut down.dst);
            ip_up.push(up);
            ip_down.push(down);
            senders.push(s);
            receivers.push(r);
            work.push(FlowWork {
                src,
                src_keys,
                dst,
                dst_keys,
                posted: 0,
                completed: 0,
                posted_at: vec![],
                latencies: vec![],
                finished_at: None,
                bad_wcs: vec![],
                request_pkts: 0,
                min_rate_mbps: None,
            });
        }
        let red = RedCfg {
            ps_per_byte: cfg.ps_per_byte,
            ..cfg.red
        };
        let now = 1_000_000;
        let mut rng = StdRng::seed_from_u64(cfg.seed);
        let start_at = (0..cfg.flows)
            .map(|_| now + rng.gen_range(0..=cfg.start_spread_ns))
            .collect();
        Fabric {
            keys,
            senders,
            receivers,
            work,
            queue: RedQueue::new(red),
            now,
            rounds: 0,
            bad_packets: 0,
            all_done_at: None,
            heap: BinaryHeap::new(),
            seq: 0,
            rng,
            start_at,
            sender_nic_free: vec![0; cfg.flows],
            receiver_nic_free: 0,
            rr: 0,
            ip_up,
            ip_down,
            cfg,
        }
    }

    /// Runs until every WRITE completed and every QP is idle (no packet in flight, no
    /// timer armed), or the round limit. Returns whether it ended idle.
    pub fn run(&mut self) -> bool {
        loop {
            self.settle();
            self.rounds += 1;
            if self.rounds > self.cfg.max_rounds {
                return false;
            }
            let Some(next) = self.next_event() else {
                return self.all_done_at.is_some();
            };
            self.now = self.now.max(next);
            while self.heap.peek().is_some_and(|Reverse(e)| e.at <= self.now) {
                if let Some(Reverse(ev)) = self.heap.pop() {
                    self.deliver(ev);
                }
            }
            self.fire_timers();
        }
    }

    /// Posts, collects and transmits until nothing more happens at this instant.
    fn settle(&mut self) {
        loop {
            self.collect();
            self.post();
            if !self.transmit() {
                return;
            }
        }
    }

    fn post(&mut self) {
        let cfg = self.cfg;
        for (f, w) in self.work.iter_mut().enumerate() {
            while self.start_at[f] <= self.now
                && w.posted < cfg.msgs
                && w.posted - w.completed < cfg.depth
            {
                let off = w.posted * u64::from(cfg.msg_len);
                let op = SendOp::RdmaWrite {
                    remote_addr: w.dst_keys.addr + off,
                    rkey: w.dst_keys.rkey,
                };
                let wr = send_wr(w.posted, op, &[sge(&w.src_keys, off, cfg.msg_len)]);
                self.senders[f].post_send(&wr).expect("post a WRITE");
                w.posted_at.push(self.now);
                w.posted += 1;
            }
        }
    }

    fn collect(&mut self) {
        for (f, w) in self.work.iter_mut().enumerate() {
            while let Some(c) = self.senders[f].poll_completion() {
                let wc = c.wc;
                if c.queue != CompletionQueueKind::Send
                    || wc.status != WcStatus::Success
                    || wc.wr_id != w.completed
                {
                    w.bad_wcs.push(format!("{c:?}"));
                    continue;
                }
                w.latencies.push(self.now - w.posted_at[wc.wr_id as usize]);
                w.completed += 1;
                if w.completed == self.cfg.msgs {
                    w.finished_at = Some(self.now);
                }
            }
            while let Some(c) = self.receivers[f].poll_completion() {
                w.bad_wcs.push(format!("receiver: {c:?}"));
            }
        }
        if self.all_done_at.is_none() && self.work.iter().all(|w| w.finished_at.is_some()) {
            self.all_done_at = Some(self.now);
        }
    }

    fn ser_ns(&self, len: usize) -> u64 {
        (len as u64 + WIRE_OVERHEAD) * self.cfg.ps_per_byte / 1000
    }

    /// Offers every free NIC its next packet. `true` if any left.
    fn transmit(&mut self) -> bool {
        let now = Timestamp(self.now);
        let mut any = false;
        for f in 0..self.cfg.flows {
            if self.sender_nic_free[f] > self.now {
                continue;
            }
            let mut env = RcEnv {
                keys: &self.keys,
                srq: None,
            };
            let Some(tx) = self.senders[f].poll_transmit(now, &mut env) else {
                continue;
            };
            any = true;
            let w = &mut self.work[f];
            if tx.hdr.bth.opcode.is_request() {
                w.request_pkts += 1;
            }
            if let Some(r) = self.senders[f].cc_rate_mbps() {
                w.min_rate_mbps = Some(w.min_rate_mbps.map_or(r, |m: f64| m.min(r)));
            }
            let mut bytes = Vec::new();
            wire::build(&tx.hdr, &tx.payload.to_vec(), &self.ip_up[f], &mut bytes);
            let done = self.now + self.ser_ns(bytes.len());
            self.sender_nic_free[f] = done;
            self.push(done + self.cfg.hop_delay_ns, Hop::Switch(f), bytes, false);
        }
        // The receiver's NIC: one packet at a time, its QPs taken round-robin.
        if self.receiver_nic_free <= self.now {
            for k in 0..self.cfg.flows {
                let f = (self.rr + k) % self.cfg.flows;
                let mut env = RcEnv {
                    keys: &self.keys,
                    srq: None,
                };
                let Some(tx) = self.receivers[f].poll_transmit(now, &mut env) else {
                    continue;
                };
                any = true;
                self.rr = f + 1;
                let mut bytes = Vec::new();
                wire::build(&tx.hdr, &tx.payload.to_vec(), &self.ip_down[f], &mut bytes);
                let done = self.now + self.ser_ns(bytes.len());
                self.receiver_nic_free = done;
                let at = done + 2 * self.cfg.hop_delay_ns;
                self.push(at, Hop::Sender(f), bytes, false);
                break;
            }
        }
        any
    }

    fn push(&mut self, at: u64, hop: Hop, bytes: Vec<u8>, ce: bool) {
        self.seq += 1;
        self.heap.push(Reverse(Ev {
            at,
            seq: self.seq,
            hop,
            bytes,
            ce,
        }));
    }

    fn next_event(&self) -> Option<u64> {
        let mut next: Option<u64> = self.heap.peek().map(|Reverse(e)| e.at);
        let mut consider = |t: u64| next = Some(next.map_or(t, |n| n.min(t)));
        for qp in self.senders.iter().chain(&self.receivers) {
            if let Some(t) = qp.poll_timeout() {
                consider(t.0);
            }
        }
        // A busy NIC with a QP behind it that may have more to send; a flow to start.
        let nics = self.sender_nic_free.iter().chain([&self.receiver_nic_free]);
        for &t in nics.chain(&self.start_at) {
            if t > self.now {
                consider(t);
            }
        }
        next
    }

    fn deliver(&mut self, mut ev: Ev) {
        let (qp, ip) = match ev.hop {
            Hop::Switch(f) => {
                match self.queue.offer(ev.at, ev.bytes.len(), &mut self.rng) {
                    Verdict::Dropped => {}
                    Verdict::Queued { start_ns, .. } if self.queue.cfg.mark_on_dequeue => {
                        self.push(start_ns, Hop::Dequeue(f), ev.bytes, false);
                    }
                    Verdict::Queued { done_ns, ce, .. } => {
                        let at = done_ns + self.cfg.hop_delay_ns;
                        self.push(at, Hop::Receiver(f), ev.bytes, ce);
                    }
                }
                return;
            }
            Hop::Dequeue(f) => {
                let ce = self.queue.mark(ev.at, &mut self.rng);
                let done = ev.at + self.ser_ns(ev.bytes.len());
                self.push(done + self.cfg.hop_delay_ns, Hop::Receiver(f), ev.bytes, ce);
                return;
            }
            Hop::Receiver(f) => (&mut self.receivers[f], &self.ip_up[f]),
            Hop::Sender(f) => (&mut self.senders[f], &self.ip_down[f]),
        };
        if ev.ce {
            ev.bytes[BTH_FECN_BYTE] |= 0x80;
        }
        let Ok(pkt) = wire::parse_verified(&ev.bytes, ip) else {
            self.bad_packets += 1;
            return;
        };
        let mut env = RcEnv {
            keys: &self.keys,
            srq: None,
        };
        qp.handle_packet(Timestamp(self.now), &pkt, &mut env);
    }

    fn fire_timers(&mut self) {
        let now = Timestamp(self.now);
        for qp in self.senders.iter_mut().chain(self.receivers.iter_mut()) {
            if qp.poll_timeout().is_some_and(|t| t <= now) {
                let mut env = RcEnv {
                    keys: &self.keys,
                    srq: None,
                };
                qp.handle_timeout(now, &mut env);
            }
        }
    }

    /// The queue's counts.
    pub fn queue_stats(&self) -> RedStats {
        self.queue.stats
    }

    /// Flow `f`'s destination region equals its source, byte for byte.
    pub fn intact(&self, f: usize) -> bool {
        let w = &self.work[f];
        let n = w.src.len();
        let a = unsafe { std::slice::from_raw_parts(w.src.as_ptr(), n) };
        let b = unsafe { std::slice::from_raw_parts(w.dst.as_ptr(), n) };
        a == b
    }
}
