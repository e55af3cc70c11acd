//! Target `rc_responder`: one [`RcQp`] in RTS driven by an arbitrary sequence of
//! packets and verbs calls (IBTA Vol 1 ch. 9.5-9.9, §10.6 memory protection).
//!
//! The input is a program: each step is one byte of action followed by its operands.
//! Actions: a structured packet (opcode, PSN near the responder's expected PSN or near
//! a PSN this QP sent, RETH/AETH/ImmDt/IETH fields aimed at the registered regions and
//! keys, payload length around the MTU) built with [`wire::build`] and parsed back with
//! [`wire::parse_verified`]; raw bytes through [`wire::parse`]; `poll_transmit`; time
//! advancing to the QP's timers; `post_recv`; `post_send` (SEND, WRITE, READ, local
//! invalidate, memory window bind); state changes.
//!
//! Memory: one 16 KiB arena of registered memory with canary bytes. Only the RW MR
//! (remote write target), the local MR (receive buffers, READ destination) may ever
//! change; the read-only MR, an MR of another PD, a deregistered MR and the canary
//! gaps must keep their bytes. Once the QP is in the Error state nothing changes at
//! all.
//!
//! Completions: every work completion names a posted work request, at most once; at
//! the end the QP is moved to Error and every posted WR (own receive queue; an SRQ
//! keeps its unused WRs) must have completed exactly once.
use std::collections::BTreeSet;
use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;

use transport::rc::{
    CompletionQueueKind, KeyTable, MrKeys, MrMemory, RcConfig, RcEnv, RcQp, RecvQueue,
};
use transport::time::Timestamp;
use transport::verbs::{
    inc_rkey, AccessFlags, AhAttr, Mtu, QpAttr, QpCap, QpState, RecvWr, SendFlags, SendOp, SendWr,
    SgList, Sge,
};
use transport::wire::{
    self, pad_for, parse, parse_verified, Aeth, Bth, Deth, IcrcIpInfo, Opcode, PacketHeaders, Reth,
    ROCE_V2_UDP_DPORT,
};

use super::input::Input;

/// Steps executed at most per input.
const MAX_STEPS: usize = 512;
/// This QP's number and its peer's.
const QPN: u32 = 0x12;
const PEER_QPN: u32 = 0x11;

/// Arena layout (bytes): canary gaps between the regions.
const ARENA_LEN: usize = 16384;
/// RW MR: remote write and read, memory window bind.
const W_OFF: usize = 1024;
const W_LEN: usize = 4096;
/// Read-only MR (remote read), also the source of outgoing SEND/WRITE data.
const R_OFF: usize = 6144;
const R_LEN: usize = 2048;
/// Local MR: receive buffers and RDMA READ destination (local write only).
const L_OFF: usize = 9216;
const L_LEN: usize = 2048;
/// An MR with every right, but in another PD.
const F_OFF: usize = 12288;
const F_LEN: usize = 1024;
/// An MR registered then deregistered: its key is stale.
const D_OFF: usize = 14336;
const D_LEN: usize = 1024;
/// Fill of everything outside the writable regions.
const CANARY: u8 = 0xA5;

const REMOTE_ALL: AccessFlags = AccessFlags::LOCAL_WRITE
    .union(AccessFlags::REMOTE_WRITE)
    .union(AccessFlags::REMOTE_READ)
    .union(AccessFlags::MW_BIND);

fn ip() -> IcrcIpInfo {
    IcrcIpInfo {
        src: IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2)),
        dst: IpAddr::V4(Ipv4Addr::new(127, 0, 0, 1)),
        ipv4_id: 0,
        udp_sport: 0xC011,
        udp_dport: ROCE_V2_UDP_DPORT,
    }
}

struct Harness {
    keys: KeyTable,
    arena: Arc<MrMemory>,
    /// The arena as registered, for the canary comparison.
    initial: Vec<u8>,
    /// Whole-arena copy taken when the QP entered Error.
    frozen: Option<Vec<u8>>,
    w: MrKeys,
    r: MrKeys,
    l: MrKeys,
    f: MrKeys,
    d: MrKeys,
    /// Memory window handle and the rkey it is bound with (if a bind was posted).
    mw: u32,
    mw_rkey: u32,
    qp: RcQp,
    srq: Option<RecvQueue>,
    mtu: u32,
    sq_psn: u32,
    now: Timestamp,
    /// Request PSNs this QP transmitted (most recent last, bounded).
    sent_psns: Vec<u32>,
    next_wr_id: u64,
    posted_send: BTreeSet<u64>,
    posted_recv: BTreeSet<u64>,
    done_send: BTreeSet<u64>,
    done_recv: BTreeSet<u64>,
}

/// Runs one input; panics on a broken invariant.
pub fn run(data: &[u8]) {
    let mut inp = Input::new(data);
    let Some(mut h) = Harness::new(&mut inp) else {
        return;
    };
    let mut steps = 0;
    while !inp.is_empty() && steps < MAX_STEPS {
        steps += 1;
        match inp.u8() % 12 {
            0..=4 => h.structured_packet(&mut inp),
            5 => h.raw_packet(&mut inp),
            6 | 7 => h.transmit(usize::from(inp.u8() % 16) + 1),
            8 => h.advance_time(&mut inp),
            9 => h.post_recv(&mut inp),
            10 => h.post_send(&mut inp),
            _ => h.change_state(&mut inp),
        }
        h.collect();
        h.check_memory();
    }
    h.finish();
}

impl Harness {
    fn new(inp: &mut Input<'_>) -> Option<Harness> {
        let cfg_byte = inp.u8();
        let mtu = [Mtu::Mtu256, Mtu::Mtu1024, Mtu::Mtu4096, Mtu::Mtu512][usize::from(cfg_byte & 3)];
        let use_srq = cfg_byte & 4 != 0;
        // PSNs near the 24-bit wrap when asked.
        let (rq_psn, sq_psn) = if cfg_byte & 8 != 0 {
            (0xFF_FFF0, 0xFF_FFF8)
        } else {
            (0x1000, 0x2000)
        };
        let access = if cfg_byte & 16 != 0 {
            // A QP without remote rights: WRITE and READ requests must be refused.
            AccessFlags::LOCAL_WRITE
        } else {
            REMOTE_ALL
        };
        let ird = (cfg_byte >> 5) & 3;

        let keys = KeyTable::new();
        let pd = keys.alloc_pd();
        let other_pd = keys.alloc_pd();
        let arena = MrMemory::new(ARENA_LEN).ok()?;
        // SAFETY: nothing else references the fresh arena yet.
        let bytes = unsafe { std::slice::from_raw_parts_mut(arena.as_ptr(), ARENA_LEN) };
        bytes.fill(CANARY);
        for (i, b) in bytes[R_OFF..R_OFF + R_LEN].iter_mut().enumerate() {
            *b = (i as u8).wrapping_mul(7).wrapping_add(1);
        }
        bytes[W_OFF..W_OFF + W_LEN].fill(0);
        bytes[L_OFF..L_OFF + L_LEN].fill(0);
        let initial = bytes.to_vec();
        let reg = |pd, off, len, acc| keys.reg_mr(pd, &arena, off, len, acc).ok();
        let w = reg(pd, W_OFF, W_LEN, REMOTE_ALL)?;
        let r = reg(pd, R_OFF, R_LEN, AccessFlags::REMOTE_READ)?;
        let l = reg(pd, L_OFF, L_LEN, AccessFlags::LOCAL_WRITE)?;
        let f = reg(other_pd, F_OFF, F_LEN, REMOTE_ALL)?;
        let d = reg(pd, D_OFF, D_LEN, REMOTE_ALL)?;
        keys.dereg_mr(d.lkey).ok()?;
        let mw = keys.alloc_mw(pd).ok()?;

        let cap = QpCap {
            max_send_wr: 16,
            max_recv_wr: 16,
            max_send_sge: 2,
            max_recv_sge: 2,
            max_inline_data: 0,
        };
        let cfg = RcConfig {
            max_inflight_bytes: 8192,
            ..RcConfig::default()
        };
        let mut qp = RcQp::new(QPN, pd, cap, use_srq, cfg);
        let ah = AhAttr {
            dest: ip().src,
            flow_label: 0,
            hop_limit: 64,
            traffic_class: 0,
        };
        qp.modify(&QpAttr {
            qp_state: Some(QpState::Init),
            qp_access_flags: Some(access),
            ..Default::default()
        })
        .ok()?;
        qp.modify(&QpAttr {
            qp_state: Some(QpState::Rtr),
            dest_qp_num: Some(PEER_QPN),
            rq_psn: Some(rq_psn),
            path_mtu: Some(mtu),
            ah_attr: Some(ah),
            max_dest_rd_atomic: Some(ird),
            min_rnr_timer: Some(1),
            ..Default::default()
        })
        .ok()?;
        qp.modify(&QpAttr {
            qp_state: Some(QpState::Rts),
            sq_psn: Some(sq_psn),
            timeout: Some(8),
            retry_cnt: Some(2),
            rnr_retry: Some(2),
            max_rd_atomic: Some(2),
            ..Default::default()
        })
        .ok()?;
        Some(Harness {
            keys,
            arena,
            initial,
            frozen: None,
            w,
            r,
            l,
            f,
            d,
            mw,
            mw_rkey: 0,
            qp,
            srq: use_srq.then(|| RecvQueue::new(pd, 16)),
            mtu: mtu.bytes(),
            sq_psn,
            now: Timestamp(1_000_000_000),
            sent_psns: Vec::new(),
            next_wr_id: 1,
            posted_send: BTreeSet::new(),
            posted_recv: BTreeSet::new(),
            done_send: BTreeSet::new(),
            done_recv: BTreeSet::new(),
        })
    }

    fn arena(&self) -> &[u8] {
        // SAFETY: the RC core writes the arena only inside calls made from this thread;
        // between calls nothing else touches it.
        unsafe { std::slice::from_raw_parts(self.arena.as_ptr(), ARENA_LEN) }
    }

    fn rkey(&self, inp: &mut Input<'_>) -> u32 {
        match inp.u8() % 10 {
            0..=2 => self.w.rkey,
            3 => self.r.rkey,
            4 => self.l.rkey,
            5 => self.f.rkey,
            6 => self.d.rkey,
            7 => self.mw_rkey,
            8 => inc_rkey(self.w.rkey),
            _ => inp.u32(),
        }
    }

    fn va(&self, inp: &mut Input<'_>) -> u64 {
        let base = match inp.u8() % 8 {
            0..=2 => self.w.addr,
            3 => self.r.addr,
            4 => self.l.addr,
            5 => self.f.addr,
            6 => self.arena.addr(),
            _ => return inp.u64(),
        };
        base.wrapping_add(inp.u16() as i16 as i64 as u64)
    }

    fn dma_len(&self, inp: &mut Input<'_>) -> u32 {
        match inp.u8() % 6 {
            0 => 0,
            1 => self.mtu,
            2 => 2 * self.mtu,
            3 => u32::from(inp.u16()) % (W_LEN as u32 + 64),
            4 => u32::from(inp.u8()),
            _ => inp.u32(),
        }
    }

    /// A PSN near `base`: most deltas are small, a few far.
    fn psn_near(inp: &mut Input<'_>, base: u32) -> u32 {
        let b = inp.u8();
        let delta = if b == 0x80 {
            inp.u32() as i32
        } else {
            i32::from(b as i8 >> 4)
        };
        base.wrapping_add(delta as u32) & 0xFF_FFFF
    }

    fn structured_packet(&mut self, inp: &mut Input<'_>) {
        let op = inp.pick(&Opcode::ALL);
        let is_response = op.is_response();
        let base = if is_response {
            let n = self.sent_psns.len();
            if n == 0 {
                self.sq_psn
            } else {
                self.sent_psns[n - 1 - usize::from(inp.u8()) % n]
            }
        } else {
            self.qp.expected_psn()
        };
        let psn = Self::psn_near(inp, base);
        let flags = inp.u8();
        let dest_qp = if flags == 0xFF { inp.u32() } else { QPN };
        let mut bth = Bth::new(op, dest_qp, psn, flags & 1 != 0);
        bth.se = flags & 2 != 0;
        bth.fecn = flags & 4 != 0;
        bth.becn = flags & 8 != 0;
        bth.migreq = flags & 16 != 0;
        let mut hdr = PacketHeaders::new(bth);
        if op.has_deth() {
            hdr.deth = Some(Deth {
                qkey: inp.u32(),
                src_qp: inp.u32() & 0xFF_FFFF,
            });
        }
        if op.has_reth() {
            hdr.reth = Some(Reth {
                va: self.va(inp),
                rkey: self.rkey(inp),
                dma_len: self.dma_len(inp),
            });
        }
        if op.has_aeth() {
            let syndrome = match inp.u8() % 5 {
                0 | 1 => Aeth::ACK_SYNDROME,
                2 => 0x20 | (inp.u8() & 0x1F),
                3 => 0x60 | (inp.u8() % 6),
                _ => inp.u8(),
            };
            let msn = if inp.bool() {
                inp.u32()
            } else {
                u32::from(inp.u8())
            };
            hdr.aeth = Some(Aeth {
                syndrome,
                msn: msn & 0xFF_FFFF,
            });
        }
        if op.has_immdt() {
            hdr.imm = Some(inp.u32());
        }
        if op.has_ieth() {
            hdr.ieth = Some(self.rkey(inp));
        }
        let len = match inp.u8() % 6 {
            0 => 0,
            1 | 2 => self.mtu as usize,
            3 => usize::from(inp.u16()) % (self.mtu as usize + 1),
            4 => self.mtu as usize + 1 + usize::from(inp.u8()),
            _ => usize::from(inp.u8()),
        };
        let fill = inp.u8();
        let payload: Vec<u8> = (0..len).map(|i| fill.wrapping_add(i as u8)).collect();
        let mut bytes = Vec::new();
        wire::build(&hdr, &payload, &ip(), &mut bytes);
        let pkt = parse_verified(&bytes, &ip()).expect("a built packet parses and verifies");
        hdr.bth.pad_count = pad_for(len);
        assert_eq!(pkt.hdr, hdr);
        let mut env = RcEnv {
            keys: &self.keys,
            srq: self.srq.as_mut(),
        };
        self.qp.handle_packet(self.now, &pkt, &mut env);
    }

    fn raw_packet(&mut self, inp: &mut Input<'_>) {
        let len = usize::from(inp.u16()) % 2048;
        let mut bytes = inp.bytes(len).to_vec();
        if bytes.len() >= 8 && inp.bool() {
            // Aim it at this QP.
            bytes[5..8].copy_from_slice(&QPN.to_be_bytes()[1..]);
        }
        if let Ok(pkt) = parse(&bytes) {
            let mut env = RcEnv {
                keys: &self.keys,
                srq: self.srq.as_mut(),
            };
            self.qp.handle_packet(self.now, &pkt, &mut env);
        }
    }

    fn transmit(&mut self, max: usize) {
        for _ in 0..max {
            let mut env = RcEnv {
                keys: &self.keys,
                srq: self.srq.as_mut(),
            };
            let Some(tx) = self.qp.poll_transmit(self.now, &mut env) else {
                break;
            };
            assert!(tx.hdr.matches_opcode(), "sent headers {:?}", tx.hdr);
            assert_eq!(tx.hdr.bth.dest_qp, PEER_QPN);
            assert_eq!(tx.hdr.bth.pad_count, pad_for(tx.payload.len()));
            assert!(
                tx.payload.len() <= self.mtu as usize,
                "payload above the MTU"
            );
            let payload: Vec<u8> = tx.payload.segments().flatten().copied().collect();
            assert_eq!(payload.len(), tx.payload.len());
            let mut bytes = Vec::new();
            wire::build(&tx.hdr, &payload, &ip(), &mut bytes);
            let back = parse_verified(&bytes, &ip()).expect("sent packet parses");
            assert_eq!(back.hdr, tx.hdr);
            if tx.hdr.bth.opcode.is_request() {
                if self.sent_psns.len() == 64 {
                    self.sent_psns.remove(0);
                }
                self.sent_psns.push(tx.hdr.bth.psn);
            }
        }
    }

    fn advance_time(&mut self, inp: &mut Input<'_>) {
        let shift = inp.u8() % 40;
        self.now = Timestamp(self.now.0.saturating_add(1 << shift));
        if inp.bool() {
            if let Some(t) = self.qp.poll_timeout() {
                self.now = self.now.max(t);
            }
        }
        if self.qp.poll_timeout().is_some_and(|t| t <= self.now) {
            let mut env = RcEnv {
                keys: &self.keys,
                srq: self.srq.as_mut(),
            };
            self.qp.handle_timeout(self.now, &mut env);
        }
    }

    /// An SGE inside (or, sometimes, across the edge of) one of the regions.
    fn sge(&self, inp: &mut Input<'_>, local_write: bool) -> Sge {
        let k = match inp.u8() % 8 {
            0..=3 if local_write => self.l,
            0..=3 => self.r,
            4 => self.w,
            5 => self.r,
            6 => self.f,
            _ => self.d,
        };
        let off = u64::from(inp.u16()) % (k.length + 64);
        let length = u32::from(inp.u16()) % (2 * self.mtu + 64);
        Sge {
            addr: k.addr + off,
            length,
            lkey: if inp.u8() == 0xFF { inp.u32() } else { k.lkey },
        }
    }

    fn sg_list(&self, inp: &mut Input<'_>, local_write: bool) -> SgList {
        let n = usize::from(inp.u8() % 3);
        let sges: Vec<Sge> = (0..n).map(|_| self.sge(inp, local_write)).collect();
        SgList::from_slice(&sges).unwrap_or_default()
    }

    fn post_recv(&mut self, inp: &mut Input<'_>) {
        let wr = RecvWr {
            wr_id: self.next_wr_id,
            sg_list: self.sg_list(inp, true),
        };
        self.next_wr_id += 1;
        let ok = match &mut self.srq {
            Some(q) => q.post(wr).is_ok(),
            None => self.qp.post_recv(&wr).is_ok(),
        };
        if ok {
            self.posted_recv.insert(wr.wr_id);
        }
    }

    fn post_send(&mut self, inp: &mut Input<'_>) {
        let kind = inp.u8() % 8;
        let op = match kind {
            0 => SendOp::Send,
            1 => SendOp::SendWithImm {
                imm_data: inp.u32(),
            },
            2 => SendOp::SendWithInv {
                invalidate_rkey: self.rkey(inp),
            },
            3 => SendOp::RdmaWrite {
                remote_addr: inp.u64(),
                rkey: inp.u32(),
            },
            4 => SendOp::RdmaWriteWithImm {
                remote_addr: inp.u64(),
                rkey: inp.u32(),
                imm_data: inp.u32(),
            },
            5 => SendOp::RdmaRead {
                remote_addr: inp.u64(),
                rkey: inp.u32(),
            },
            6 => SendOp::LocalInv {
                rkey: self.rkey(inp),
            },
            _ => {
                let rkey = inc_rkey(if self.mw_rkey == 0 {
                    self.mw
                } else {
                    self.mw_rkey
                });
                let off = u64::from(inp.u16()) % (W_LEN as u64 + 16);
                let length = u64::from(inp.u16()) % (W_LEN as u64 + 16);
                let access = match inp.u8() % 3 {
                    0 => AccessFlags::REMOTE_WRITE,
                    1 => AccessFlags::REMOTE_READ,
                    _ => AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ,
                };
                self.mw_rkey = rkey;
                SendOp::BindMw {
                    mw_handle: self.mw,
                    rkey,
                    mr_lkey: self.w.lkey,
                    addr: self.w.addr + off,
                    length,
                    access,
                }
            }
        };
        let sg_list = match kind {
            5 => self.sg_list(inp, true),
            6 | 7 => SgList::new(),
            _ => self.sg_list(inp, false),
        };
        let wr = SendWr {
            wr_id: self.next_wr_id,
            op,
            sg_list,
            flags: SendFlags::SIGNALED,
        };
        self.next_wr_id += 1;
        if self.qp.post_send(&wr).is_ok() {
            self.posted_send.insert(wr.wr_id);
        }
    }

    fn change_state(&mut self, inp: &mut Input<'_>) {
        let to = match inp.u8() % 8 {
            0 => QpState::Error,
            1 => QpState::Sqd,
            _ => QpState::Rts,
        };
        let _ = self.qp.modify(&QpAttr {
            qp_state: Some(to),
            ..Default::default()
        });
    }

    /// Drains completions, checking each names a posted WR not completed before.
    fn collect(&mut self) {
        while let Some(c) = self.qp.poll_completion() {
            let id = c.wc.wr_id;
            let (posted, done) = match c.queue {
                CompletionQueueKind::Send => (&self.posted_send, &mut self.done_send),
                CompletionQueueKind::Recv => (&self.posted_recv, &mut self.done_recv),
            };
            assert!(
                posted.contains(&id),
                "completion for WR {id} never posted: {c:?}"
            );
            assert!(done.insert(id), "WR {id} completed twice: {c:?}");
        }
        if self.frozen.is_none() && self.qp.state() == QpState::Error {
            self.frozen = Some(self.arena().to_vec());
        }
    }

    /// Canary and protection check over the whole arena.
    fn check_memory(&self) {
        let now = self.arena();
        if let Some(frozen) = &self.frozen {
            assert!(
                now == &frozen[..],
                "memory written while the QP is in Error"
            );
        }
        // Everything but the RW and local MRs keeps its initial bytes.
        for (from, to) in [
            (0, W_OFF),
            (W_OFF + W_LEN, L_OFF),
            (L_OFF + L_LEN, ARENA_LEN),
        ] {
            if now[from..to] != self.initial[from..to] {
                let i = (from..to)
                    .find(|&i| now[i] != self.initial[i])
                    .unwrap_or(from);
                panic!(
                    "byte {i} of the arena outside the writable MRs changed: {:#04x} -> {:#04x}",
                    self.initial[i], now[i]
                );
            }
        }
    }

    /// Error flush: every posted WR has completed exactly once afterwards.
    fn finish(mut self) {
        let _ = self.qp.modify(&QpAttr {
            qp_state: Some(QpState::Error),
            ..Default::default()
        });
        self.collect();
        self.check_memory();
        assert_eq!(self.qp.state(), QpState::Error);
        assert_eq!(
            self.done_send, self.posted_send,
            "send WRs without a completion after the error flush"
        );
        let in_srq = self.srq.as_ref().map_or(0, |q| q.len());
        assert_eq!(
            self.done_recv.len() + in_srq,
            self.posted_recv.len(),
            "receive WRs without a completion after the error flush"
        );
    }
}
