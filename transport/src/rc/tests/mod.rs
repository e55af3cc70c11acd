//! Two-QP in-memory harness: packets go through `wire` (headers written and parsed
//! back), virtual time advances to the next timer when the network is idle.
use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;

use crate::rc::{
    Completion, CompletionQueueKind, KeyTable, MrKeys, MrMemory, RcConfig, RcEnv, RcQp, RecvQueue,
    TxPacket,
};
use crate::time::Timestamp;
use crate::verbs::*;
use crate::wire::{pad_for, parse};

mod access;
mod basic;
mod congestion;
mod incast;
mod loss;
mod props;
mod recovery;
mod recovery_net;
mod rxe_replay;
mod sim;
mod slow_peer;

pub(super) const ALL: AccessFlags = AccessFlags::LOCAL_WRITE
    .union(AccessFlags::REMOTE_WRITE)
    .union(AccessFlags::REMOTE_READ)
    .union(AccessFlags::MW_BIND);

/// Which way a packet travels.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Dir {
    AtoB,
    BtoA,
}

pub(super) type Filter = Box<dyn FnMut(Dir, &TxPacket) -> Deliver>;

/// What the network does with a packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Deliver {
    Yes,
    Drop,
    Twice,
}

pub(super) struct Side {
    pub qp: RcQp,
    pub pd: u32,
    pub srq: Option<RecvQueue>,
    pub wcs: Vec<Completion>,
}

impl Side {
    pub fn send_wcs(&self) -> Vec<WorkCompletion> {
        self.wcs
            .iter()
            .filter(|c| c.queue == CompletionQueueKind::Send)
            .map(|c| c.wc)
            .collect()
    }
    pub fn recv_wcs(&self) -> Vec<WorkCompletion> {
        self.wcs
            .iter()
            .filter(|c| c.queue == CompletionQueueKind::Recv)
            .map(|c| c.wc)
            .collect()
    }
    pub fn post_recv(&mut self, wr: RecvWr) {
        match &mut self.srq {
            Some(q) => q.post(wr).unwrap(),
            None => self.qp.post_recv(&wr).unwrap(),
        }
    }
}

pub(super) struct Net {
    pub keys: KeyTable,
    pub a: Side,
    pub b: Side,
    pub now: Timestamp,
    pub filter: Filter,
    pub delivered: usize,
}

pub(super) struct Opts {
    pub mtu: Mtu,
    pub psn_a: u32,
    pub psn_b: u32,
    pub srq: bool,
    pub timeout: u8,
    pub retry_cnt: u8,
    pub rnr_retry: u8,
    pub cfg: RcConfig,
}

impl Default for Opts {
    fn default() -> Self {
        Opts {
            mtu: Mtu::Mtu1024,
            psn_a: 0x1000,
            psn_b: 0x2000,
            srq: false,
            timeout: 14,
            retry_cnt: 7,
            rnr_retry: 7,
            cfg: RcConfig::default(),
        }
    }
}

fn connect(qp: &mut RcQp, dest: u32, rq_psn: u32, sq_psn: u32, o: &Opts) {
    let ah = AhAttr {
        dest: IpAddr::V4(Ipv4Addr::LOCALHOST),
        flow_label: 0,
        hop_limit: 64,
        traffic_class: 0,
    };
    qp.modify(&QpAttr {
        qp_state: Some(QpState::Init),
        qp_access_flags: Some(ALL),
        ..Default::default()
    })
    .unwrap();
    qp.modify(&QpAttr {
        qp_state: Some(QpState::Rtr),
        dest_qp_num: Some(dest),
        rq_psn: Some(rq_psn),
        path_mtu: Some(o.mtu),
        ah_attr: Some(ah),
        max_dest_rd_atomic: Some(4),
        min_rnr_timer: Some(1),
        ..Default::default()
    })
    .unwrap();
    qp.modify(&QpAttr {
        qp_state: Some(QpState::Rts),
        sq_psn: Some(sq_psn),
        timeout: Some(o.timeout),
        retry_cnt: Some(o.retry_cnt),
        rnr_retry: Some(o.rnr_retry),
        max_rd_atomic: Some(4),
        ..Default::default()
    })
    .unwrap();
}

impl Net {
    pub fn new(o: Opts) -> Net {
        let keys = KeyTable::new();
        let (pa, pb) = (keys.alloc_pd(), keys.alloc_pd());
        let cap = QpCap::default();
        let mut qa = RcQp::new(0x11, pa, cap, false, o.cfg);
        let mut qb = RcQp::new(0x12, pb, cap, o.srq, o.cfg);
        connect(&mut qa, 0x12, o.psn_b, o.psn_a, &o);
        connect(&mut qb, 0x11, o.psn_a, o.psn_b, &o);
        let srq = o.srq.then(|| RecvQueue::new(pb, 64));
        Net {
            keys,
            a: Side {
                qp: qa,
                pd: pa,
                srq: None,
                wcs: vec![],
            },
            b: Side {
                qp: qb,
                pd: pb,
                srq,
                wcs: vec![],
            },
            now: Timestamp(1_000_000),
            filter: Box::new(|_, _| Deliver::Yes),
            delivered: 0,
        }
    }

    /// Registers `len` bytes filled with `fill(i)` in `pd`.
    pub fn mr(
        &self,
        pd: u32,
        len: usize,
        access: AccessFlags,
        fill: impl Fn(usize) -> u8,
    ) -> (Arc<MrMemory>, MrKeys) {
        let m = MrMemory::new(len).unwrap();
        let bytes = unsafe { std::slice::from_raw_parts_mut(m.as_ptr(), len) };
        for (i, b) in bytes.iter_mut().enumerate() {
            *b = fill(i);
        }
        let k = self.keys.reg_mr(pd, &m, 0, len, access).unwrap();
        (m, k)
    }

    /// Moves packets until neither side has anything to send. Returns packets moved.
    pub fn pump(&mut self) -> usize {
        let mut moved = 0;
        for _ in 0..1_000_000 {
            let mut any = false;
            for dir in [Dir::AtoB, Dir::BtoA] {
                loop {
                    let (from, to) = match dir {
                        Dir::AtoB => (&mut self.a, &mut self.b),
                        Dir::BtoA => (&mut self.b, &mut self.a),
                    };
                    let mut env = RcEnv {
                        keys: &self.keys,
                        srq: from.srq.as_mut(),
                    };
                    let Some(tx) = from.qp.poll_transmit(self.now, &mut env) else {
                        break;
                    };
                    any = true;
                    moved += 1;
                    assert!(tx.hdr.matches_opcode(), "{:?}", tx.hdr);
                    assert_eq!(tx.hdr.bth.pad_count, pad_for(tx.payload.len()));
                    let times = match (self.filter)(dir, &tx) {
                        Deliver::Yes => 1,
                        Deliver::Drop => 0,
                        Deliver::Twice => 2,
                    };
                    let (h, n) = tx.hdr.to_bytes();
                    let mut bytes = h[..n].to_vec();
                    bytes.extend(tx.payload.to_vec());
                    bytes.extend_from_slice(&[0u8; 3][..tx.hdr.bth.pad_count as usize]);
                    bytes.extend([0u8; 4]);
                    let pkt = parse(&bytes).unwrap();
                    assert_eq!(pkt.hdr, tx.hdr);
                    for _ in 0..times {
                        self.delivered += 1;
                        let mut env = RcEnv {
                            keys: &self.keys,
                            srq: to.srq.as_mut(),
                        };
                        to.qp.handle_packet(self.now, &pkt, &mut env);
                    }
                }
            }
            self.collect();
            if !any {
                break;
            }
        }
        moved
    }

    pub fn collect(&mut self) {
        for s in [&mut self.a, &mut self.b] {
            while let Some(c) = s.qp.poll_completion() {
                s.wcs.push(c);
            }
        }
    }

    /// Pumps, then advances virtual time to the next timer, until idle and no timer is
    /// armed, or `max_timeouts` timer rounds have run.
    pub fn run(&mut self, max_timeouts: usize) {
        for _ in 0..=max_timeouts {
            self.pump();
            let next = match (self.a.qp.poll_timeout(), self.b.qp.poll_timeout()) {
                (Some(x), Some(y)) => x.min(y),
                (x, y) => match x.or(y) {
                    Some(t) => t,
                    None => return,
                },
            };
            self.now = self.now.max(next);
            for s in [&mut self.a, &mut self.b] {
                let mut env = RcEnv {
                    keys: &self.keys,
                    srq: s.srq.as_mut(),
                };
                if s.qp.poll_timeout().is_some_and(|t| t <= self.now) {
                    s.qp.handle_timeout(self.now, &mut env);
                }
            }
        }
        self.pump();
    }
}

pub(super) fn sge(k: &MrKeys, off: u64, len: u32) -> Sge {
    Sge {
        addr: k.addr + off,
        length: len,
        lkey: k.lkey,
    }
}

pub(super) fn send_wr(id: u64, op: SendOp, sges: &[Sge]) -> SendWr {
    SendWr {
        wr_id: id,
        op,
        sg_list: SgList::from_slice(sges).unwrap(),
        flags: SendFlags::SIGNALED,
    }
}

pub(super) fn bytes(m: &MrMemory) -> &[u8] {
    unsafe { std::slice::from_raw_parts(m.as_ptr(), m.len()) }
}

pub(super) fn pattern(seed: u8) -> impl Fn(usize) -> u8 {
    move |i| {
        (i as u8)
            .wrapping_mul(31)
            .wrapping_add(seed)
            .wrapping_add((i >> 8) as u8)
    }
}
