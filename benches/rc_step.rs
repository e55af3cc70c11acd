//! RC core micro benchmarks: the per-message steps of the sans-IO Reliable Connection
//! core (`transport::rc`, IBTA Vol 1 ch. 9.5-9.9) for one 4 KiB message at a 4096-byte
//! path MTU (one packet, as the soft provider on loopback), without sockets:
//!
//! - `requester/{send,write}_4k`: `post_send` of a signaled 4 KiB SEND or RDMA WRITE
//!   and `poll_transmit` until it yields nothing (the packet, headers and payload
//!   reference; no bytes are copied here).
//! - `responder/{send,write}_4k`: `handle_packet` of that packet (PSN check, key
//!   check for the WRITE, SRQ receive for the SEND, the 4 KiB copy into registered
//!   memory) and `poll_transmit` of its ACK.
//!
//! Each timed batch runs [`BATCH`] steps back to back (so the clock is read twice per
//! batch, not per step); between batches, untimed, the packets reach the peer, its
//! ACKs come back, completions are drained and receives reposted, so every timed step
//! sees a QP in the steady state of a run. Reported times are per step.
//!
//! Run: `cargo bench --bench rc_step` (`-- --quick` for a short run).
use std::hint::black_box;
use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use transport::rc::{KeyTable, MrKeys, MrMemory, RcConfig, RcEnv, RcQp, RecvQueue, TxPacket};
use transport::time::Timestamp;
use transport::verbs::{
    AccessFlags, AhAttr, Mtu, QpAttr, QpCap, QpState, RecvWr, SendFlags, SendOp, SendWr, SgList,
    Sge, WcStatus,
};
use transport::wire::{parse, ICRC_LEN};

/// Message size, bytes.
const MSG_BYTES: usize = 4096;
/// Steps per timed batch (16 x 4 KiB stays well inside the 1 MiB send window).
const BATCH: usize = 16;

const ACCESS: AccessFlags = AccessFlags::LOCAL_WRITE
    .union(AccessFlags::REMOTE_WRITE)
    .union(AccessFlags::REMOTE_READ);

/// A packet serialized as it travels (headers, payload, pad, a zero ICRC: the driver
/// checks the ICRC before the core sees a packet).
fn to_wire(tx: &TxPacket) -> Vec<u8> {
    let (h, n) = tx.hdr.to_bytes();
    let mut b = h[..n].to_vec();
    for s in tx.payload.segments() {
        b.extend_from_slice(s);
    }
    b.extend_from_slice(&[0u8; 3][..tx.hdr.bth.pad_count as usize]);
    b.extend_from_slice(&[0u8; ICRC_LEN]);
    b
}

fn connect(qp: &mut RcQp, dest: u32, rq_psn: u32, sq_psn: u32) {
    let ah = AhAttr {
        dest: IpAddr::V4(Ipv4Addr::LOCALHOST),
        flow_label: 0,
        hop_limit: 64,
        traffic_class: 0,
    };
    let steps = [
        QpAttr {
            qp_state: Some(QpState::Init),
            qp_access_flags: Some(ACCESS),
            ..Default::default()
        },
        QpAttr {
            qp_state: Some(QpState::Rtr),
            dest_qp_num: Some(dest),
            rq_psn: Some(rq_psn),
            path_mtu: Some(Mtu::Mtu4096),
            ah_attr: Some(ah),
            max_dest_rd_atomic: Some(16),
            min_rnr_timer: Some(1),
            ..Default::default()
        },
        QpAttr {
            qp_state: Some(QpState::Rts),
            sq_psn: Some(sq_psn),
            timeout: Some(17),
            retry_cnt: Some(7),
            rnr_retry: Some(7),
            max_rd_atomic: Some(16),
            ..Default::default()
        },
    ];
    for s in &steps {
        qp.modify(s).expect("QP transition");
    }
}

/// Requester QP `a` (its own receive queue), responder QP `b` on an SRQ, as the host's
/// I/O queue and the target's poll group use them.
struct Pair {
    keys: KeyTable,
    a: RcQp,
    b: RcQp,
    srq: RecvQueue,
    src: MrKeys,
    dst: MrKeys,
    _mem: [Arc<MrMemory>; 2],
    now: Timestamp,
    next_wr: u64,
}

impl Pair {
    fn new() -> Pair {
        let keys = KeyTable::new();
        let (pa, pb) = (keys.alloc_pd(), keys.alloc_pd());
        let cfg = RcConfig::default();
        let mut a = RcQp::new(0x11, pa, QpCap::default(), false, cfg);
        let mut b = RcQp::new(0x12, pb, QpCap::default(), true, cfg);
        connect(&mut a, 0x12, 0x2000, 0x1000);
        connect(&mut b, 0x11, 0x1000, 0x2000);
        let len = MSG_BYTES * BATCH;
        let ma = MrMemory::new(len).expect("MR memory");
        let mb = MrMemory::new(len).expect("MR memory");
        let src = keys.reg_mr(pa, &ma, 0, len, ACCESS).expect("reg_mr");
        let dst = keys.reg_mr(pb, &mb, 0, len, ACCESS).expect("reg_mr");
        let mut p = Pair {
            keys,
            a,
            b,
            srq: RecvQueue::new(pb, 2 * BATCH as u32),
            src,
            dst,
            _mem: [ma, mb],
            now: Timestamp(1_000_000),
            next_wr: 0,
        };
        p.repost_recvs();
        p
    }

    fn repost_recvs(&mut self) {
        while self.srq.len() < BATCH {
            let i = self.next_wr as usize % BATCH;
            let sge = Sge {
                addr: self.dst.addr + (i * MSG_BYTES) as u64,
                length: MSG_BYTES as u32,
                lkey: self.dst.lkey,
            };
            let wr = RecvWr {
                wr_id: self.next_wr,
                sg_list: SgList::from_slice(&[sge]).expect("one SGE"),
            };
            self.next_wr += 1;
            self.srq.post(wr).expect("SRQ has room");
        }
    }

    /// Message `i` of a batch: a SEND or an RDMA WRITE of slot `i`.
    fn wr(&mut self, write: bool, i: usize) -> SendWr {
        let off = (i * MSG_BYTES) as u64;
        let sge = Sge {
            addr: self.src.addr + off,
            length: MSG_BYTES as u32,
            lkey: self.src.lkey,
        };
        let op = if write {
            SendOp::RdmaWrite {
                remote_addr: self.dst.addr + off,
                rkey: self.dst.rkey,
            }
        } else {
            SendOp::Send
        };
        self.next_wr += 1;
        SendWr {
            wr_id: self.next_wr,
            op,
            sg_list: SgList::from_slice(&[sge]).expect("one SGE"),
            flags: SendFlags::SIGNALED,
        }
    }

    /// The requester step: posts message `i` and drains its packets into `out`.
    fn requester_step(&mut self, write: bool, i: usize, out: &mut Vec<TxPacket>) {
        let wr = self.wr(write, i);
        self.a.post_send(&wr).expect("post_send");
        let mut env = RcEnv {
            keys: &self.keys,
            srq: None,
        };
        while let Some(p) = self.a.poll_transmit(self.now, &mut env) {
            out.push(p);
        }
    }

    /// The responder step: one received request packet and the ACK it produces.
    fn responder_step(&mut self, pkt: &[u8], acks: &mut Vec<TxPacket>) {
        let pkt = parse(pkt).expect("a packet the core built");
        let mut env = RcEnv {
            keys: &self.keys,
            srq: Some(&mut self.srq),
        };
        self.b.handle_packet(self.now, &pkt, &mut env);
        while let Some(p) = self.b.poll_transmit(self.now, &mut env) {
            acks.push(p);
        }
    }

    /// Untimed: delivers `acks` to the requester and drains both completion queues.
    fn finish(&mut self, acks: &[TxPacket]) {
        let mut env = RcEnv {
            keys: &self.keys,
            srq: None,
        };
        for ack in acks {
            let bytes = to_wire(ack);
            let pkt = parse(&bytes).expect("an ACK the core built");
            self.a.handle_packet(self.now, &pkt, &mut env);
        }
        while self.a.poll_transmit(self.now, &mut env).is_some() {}
        while let Some(c) = self.a.poll_completion() {
            assert_eq!(c.wc.status, WcStatus::Success, "send completion");
        }
        while let Some(c) = self.b.poll_completion() {
            assert_eq!(c.wc.status, WcStatus::Success, "receive completion");
        }
        assert_eq!(self.a.send_queue_len(), 0, "every message was acknowledged");
        self.repost_recvs();
        self.now = Timestamp(self.now.0 + 1_000);
    }

    /// Runs `iters` steps; times the requester steps (`time_requester`) or the
    /// responder steps.
    fn run(&mut self, write: bool, iters: u64, time_requester: bool) -> Duration {
        let mut total = Duration::ZERO;
        let mut left = iters as usize;
        let mut pkts = Vec::with_capacity(BATCH);
        let mut wire = Vec::with_capacity(BATCH);
        let mut acks = Vec::with_capacity(BATCH);
        while left > 0 {
            let n = left.min(BATCH);
            left -= n;
            pkts.clear();
            acks.clear();
            let t = Instant::now();
            for i in 0..n {
                self.requester_step(write, i, &mut pkts);
            }
            if time_requester {
                total += t.elapsed();
            }
            assert_eq!(pkts.len(), n, "one packet per 4 KiB message");
            wire.clear();
            wire.extend(pkts.iter().map(to_wire));
            let t = Instant::now();
            for w in &wire {
                self.responder_step(w, &mut acks);
            }
            if !time_requester {
                total += t.elapsed();
            }
            black_box(&acks);
            self.finish(&acks);
        }
        total
    }
}

fn bench_rc_step(c: &mut Criterion) {
    for (group, time_requester) in [("requester", true), ("responder", false)] {
        let mut g = c.benchmark_group(group);
        g.throughput(Throughput::Elements(1));
        for (name, write) in [("send_4k", false), ("write_4k", true)] {
            let mut pair = Pair::new();
            g.bench_function(name, |b| {
                b.iter_custom(|iters| pair.run(write, iters, time_requester))
            });
        }
        g.finish();
    }
}

criterion_group!(benches, bench_rc_step);
criterion_main!(benches);
