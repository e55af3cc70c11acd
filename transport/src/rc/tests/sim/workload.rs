//! One side running a [`Plan`] against the other (posting its WRs and receives), and the
//! checks that every completion tells the truth.
//!
//! The checks, all against the memory the QPs really wrote:
//! - send completions arrive in posting order (`wr_id` = index), Success until the
//!   first error, which must be IBV_WC_RETRY_EXC_ERR (only with a dead peer), then
//!   IBV_WC_WR_FLUSH_ERR;
//! - a successful SEND / WRITE with immediate has already produced its receive
//!   completion at the responder (delivered before reported); receive completions
//!   arrive in posting order with the right opcode, `byte_len` and immediate, and the
//!   receive buffer holds exactly the sent bytes, the slack after them untouched;
//! - a successful WRITE's bytes are in the responder's region, a successful READ's in
//!   the sink, byte-exact, where no later WR of the plan overwrites them (the final
//!   writer of each byte is known from the plan);
//! - at the end, every byte of the target and sink regions equals the plan's model
//!   (data applied exactly once, in posting order: a late duplicate executed again
//!   would show), bytes no WR touched keep their initial contents.
use std::sync::Arc;

use rand::rngs::StdRng;
use rand::{RngCore, SeedableRng};

use super::super::{bytes, send_wr, Net, Side, ALL};
pub(crate) use super::plan::{OpKind, Plan, WorkloadCfg};
use crate::rc::{CompletionQueueKind, MrKeys, MrMemory, QpCounters};
use crate::verbs::{
    QpState, RecvWr, SendFlags, SendOp, SgList, Sge, WcOpcode, WcStatus, WorkCompletion,
};

/// Most receive WRs kept posted ahead (an SRQ of the harness holds 64).
pub(crate) const RECV_AHEAD: usize = 48;
/// First receive `wr_id`; receive `i` of the plan has `RECV_ID_BASE + i`.
const RECV_ID_BASE: u64 = 1 << 32;
/// Initial contents of receive buffers.
const RECV_FILL: u8 = 0xEE;
/// No WR of the plan writes this byte.
const NONE: u32 = u32::MAX;

/// Registered memory of one flow.
struct Region {
    mem: Arc<MrMemory>,
    keys: MrKeys,
}

impl Region {
    fn new(net: &Net, pd: u32, init: &[u8]) -> Region {
        let (mem, keys) = net.mr(pd, init.len(), ALL, |i| init[i]);
        Region { mem, keys }
    }
    fn bytes(&self) -> &[u8] {
        bytes(&self.mem)
    }
    fn sges(&self, off: usize, lens: &[u32]) -> Vec<Sge> {
        let mut o = off as u64;
        lens.iter()
            .filter(|&&l| l > 0)
            .map(|&l| {
                let s = Sge {
                    addr: self.keys.addr + o,
                    length: l,
                    lkey: self.keys.lkey,
                };
                o += l as u64;
                s
            })
            .collect()
    }
}

fn random_bytes(len: usize, seed: u64) -> Vec<u8> {
    let mut v = vec![0u8; len];
    StdRng::seed_from_u64(seed).fill_bytes(&mut v);
    v
}

/// The first error a flow saw.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct FirstError {
    pub wr: usize,
    pub status: WcStatus,
    /// Virtual time it was seen, ns.
    pub at: u64,
}

/// One direction's workload in progress: the plan, its memory and the checks.
pub(crate) struct Flow {
    /// 0: A requests, B responds; 1: the reverse.
    pub from: usize,
    pub plan: Plan,
    /// A peer that stops answering is expected: errors are allowed (and checked).
    pub dead_peer: bool,
    ctx: String,
    src: Region,
    sink: Region,
    target: Region,
    rsrc: Region,
    rbuf: Region,
    target_init: Vec<u8>,
    /// Expected data of each READ (empty for other WRs).
    expect_read: Vec<Vec<u8>>,
    /// Index of the plan's last WR writing each byte of the target / sink.
    target_owner: Vec<u32>,
    sink_owner: Vec<u32>,
    pub posted: usize,
    pub completed: usize,
    send_cursor: usize,
    recv_cursor: usize,
    recv_posted: usize,
    recv_done: usize,
    recv_flushed: bool,
    /// No receive is posted before this virtual time (ns).
    recv_hold_until: u64,
    pub first_error: Option<FirstError>,
    /// Virtual post and successful completion times of each WR, ns.
    pub post_at: Vec<u64>,
    pub done_at: Vec<Option<u64>>,
    pub bytes_ok: u64,
    pub first_post: Option<u64>,
    pub last_done: u64,
}

fn side(net: &Net, i: usize) -> &Side {
    if i == 0 {
        &net.a
    } else {
        &net.b
    }
}

fn side_mut(net: &mut Net, i: usize) -> &mut Side {
    if i == 0 {
        &mut net.a
    } else {
        &mut net.b
    }
}

impl Flow {
    /// Registers the flow's memory on `net` (requester `from`) and precomputes the
    /// model. `ctx` prefixes every assertion message (it names the seed).
    pub fn new(net: &Net, from: usize, plan: Plan, dead_peer: bool, ctx: String) -> Flow {
        let (xpd, ypd) = (side(net, from).pd, side(net, 1 - from).pd);
        let n = plan.region;
        let s = plan.seed;
        let src_init = random_bytes(n, s ^ 1);
        let target_init = random_bytes(n, s ^ 2);
        let rsrc_init = random_bytes(n, s ^ 3);
        let src = Region::new(net, xpd, &src_init);
        let sink = Region::new(net, xpd, &vec![0u8; n]);
        let target = Region::new(net, ypd, &target_init);
        let rsrc = Region::new(net, ypd, &rsrc_init);
        let rbuf = Region::new(net, ypd, &vec![RECV_FILL; plan.recv_bytes]);
        let mut model = target_init.clone();
        let mut target_owner = vec![NONE; n];
        let mut sink_owner = vec![NONE; n];
        let mut expect_read = vec![Vec::new(); plan.wrs.len()];
        for (i, w) in plan.wrs.iter().enumerate() {
            let (l, r, len) = (w.local_off, w.remote_off, w.len as usize);
            if w.kind.writes_target() {
                model[r..r + len].copy_from_slice(&src_init[l..l + len]);
                target_owner[r..r + len].fill(i as u32);
            }
            if w.kind == OpKind::Read {
                let from_mem = if plan.cfg.shared { &model } else { &rsrc_init };
                expect_read[i] = from_mem[r..r + len].to_vec();
                sink_owner[l..l + len].fill(i as u32);
            }
        }
        let wrs = plan.wrs.len();
        Flow {
            from,
            plan,
            dead_peer,
            ctx,
            src,
            sink,
            target,
            rsrc,
            rbuf,
            target_init,
            expect_read,
            target_owner,
            sink_owner,
            posted: 0,
            completed: 0,
            send_cursor: 0,
            recv_cursor: 0,
            recv_posted: 0,
            recv_done: 0,
            recv_flushed: false,
            recv_hold_until: 0,
            first_error: None,
            post_at: vec![0; wrs],
            done_at: vec![None; wrs],
            bytes_ok: 0,
            first_post: None,
            last_done: 0,
        }
    }

    /// Every posted WR has completed, and, unless an error stopped the flow, every
    /// planned WR has been posted and every receive completed.
    pub fn done(&self) -> bool {
        if self.first_error.is_some() {
            return self.completed == self.posted;
        }
        self.completed == self.plan.wrs.len() && self.recv_done == self.plan.slots.len()
    }

    /// Checks new completions, then posts receives and WRs.
    pub fn step(&mut self, net: &mut Net) {
        self.check_recvs(net);
        self.check_sends(net);
        self.post(net);
    }

    fn check_recvs(&mut self, net: &Net) {
        let y = side(net, 1 - self.from);
        while let Some(c) = y.wcs.get(self.recv_cursor) {
            self.recv_cursor += 1;
            if c.queue == CompletionQueueKind::Recv {
                self.check_recv(&c.wc);
                self.recv_hold_until = net.now.0 + self.plan.cfg.recv_delay_ns;
            }
        }
    }

    /// Whether a receive is due for posting, ignoring the hold.
    fn recv_wanted(&self) -> bool {
        let ahead = self.plan.cfg.recv_ahead.clamp(1, RECV_AHEAD);
        self.recv_posted < self.plan.slots.len() && self.recv_posted - self.recv_done < ahead
    }

    /// When receives held back become due (the simulator ignores times not after now).
    pub fn wakeup(&self) -> Option<u64> {
        self.recv_wanted().then_some(self.recv_hold_until)
    }

    fn check_recv(&mut self, wc: &WorkCompletion) {
        let ctx = &self.ctx;
        let i = self.recv_done;
        assert!(
            i < self.recv_posted,
            "{ctx}: receive completion {wc:?} unposted"
        );
        assert_eq!(wc.wr_id, RECV_ID_BASE + i as u64, "{ctx}: receive order");
        self.recv_done += 1;
        if wc.status == WcStatus::WrFlushErr && self.dead_peer {
            self.recv_flushed = true;
            return;
        }
        assert!(!self.recv_flushed, "{ctx}: receive success after a flush");
        assert_eq!(wc.status, WcStatus::Success, "{ctx}: receive {i}: {wc:?}");
        let slot = &self.plan.slots[i];
        let w = &self.plan.wrs[slot.wr];
        let wr = slot.wr;
        assert_eq!(wc.byte_len, w.len, "{ctx}: receive {i} (WR {wr}) byte_len");
        match w.kind {
            OpKind::WriteImm => {
                assert_eq!(wc.opcode, WcOpcode::RecvRdmaWithImm, "{ctx}: WR {wr}");
                assert_eq!(wc.imm_data, Some(w.imm), "{ctx}: WR {wr} immediate");
                self.check_write(wr);
            }
            kind => {
                assert_eq!(wc.opcode, WcOpcode::Recv, "{ctx}: WR {wr}");
                let imm = (kind == OpKind::SendImm).then_some(w.imm);
                assert_eq!(wc.imm_data, imm, "{ctx}: WR {wr} immediate");
                let len = w.len as usize;
                let got = &self.rbuf.bytes()[slot.off..slot.off + slot.cap];
                let want = &self.src.bytes()[w.local_off..w.local_off + len];
                assert!(got[..len] == *want, "{ctx}: WR {wr} SEND data");
                assert!(
                    got[len..].iter().all(|&b| b == RECV_FILL),
                    "{ctx}: WR {wr} wrote past its length"
                );
            }
        }
    }

    fn check_sends(&mut self, net: &Net) {
        let x = side(net, self.from);
        let now = net.now.0;
        while let Some(c) = x.wcs.get(self.send_cursor) {
            self.send_cursor += 1;
            if c.queue == CompletionQueueKind::Send {
                self.check_send(&c.wc, now, x.qp.counters());
            }
        }
    }

    fn check_send(&mut self, wc: &WorkCompletion, now: u64, counters: &QpCounters) {
        let ctx = &self.ctx;
        let k = self.completed;
        assert!(k < self.posted, "{ctx}: send completion {wc:?} unposted");
        assert_eq!(wc.wr_id, k as u64, "{ctx}: send completions out of order");
        self.completed += 1;
        let w = &self.plan.wrs[k];
        assert_eq!(wc.opcode, w.kind.wc_opcode(), "{ctx}: WR {k} opcode");
        if let Some(e) = self.first_error {
            assert_eq!(
                wc.status,
                WcStatus::WrFlushErr,
                "{ctx}: WR {k} after the error of WR {}",
                e.wr
            );
            return;
        }
        if wc.status != WcStatus::Success {
            assert!(
                self.dead_peer,
                "{ctx}: at {now} ns WR {k} ({:?}): {wc:?}; requester {counters:?}",
                w.kind
            );
            assert_eq!(
                wc.status,
                WcStatus::RetryExcErr,
                "{ctx}: WR {k}: first error"
            );
            self.first_error = Some(FirstError {
                wr: k,
                status: wc.status,
                at: now,
            });
            return;
        }
        if w.kind == OpKind::Read {
            assert_eq!(wc.byte_len, w.len, "{ctx}: WR {k} READ byte_len");
        }
        // Reported complete: must be delivered.
        if let Some(s) = w.slot {
            assert!(
                s < self.recv_done,
                "{ctx}: WR {k} ({:?}) completed before its receive completion",
                w.kind
            );
        }
        if w.kind.writes_target() {
            self.check_write(k);
        }
        if w.kind == OpKind::Read {
            self.check_read(k);
        }
        self.bytes_ok += w.len as u64;
        self.done_at[k] = Some(now);
        self.last_done = now;
    }

    /// The bytes of WRITE `k` that no later WRITE overwrites are in the target.
    fn check_write(&self, k: usize) {
        let w = &self.plan.wrs[k];
        let (r, l, len) = (w.remote_off, w.local_off, w.len as usize);
        let t = &self.target.bytes()[r..r + len];
        let s = &self.src.bytes()[l..l + len];
        let own = &self.target_owner[r..r + len];
        let bad = (0..len).find(|&i| own[i] == k as u32 && t[i] != s[i]);
        assert!(
            bad.is_none(),
            "{}: WR {k} ({:?}, {len} B) data wrong at byte {bad:?}",
            self.ctx,
            w.kind
        );
    }

    /// The bytes of READ `k` that no later READ overwrites are in the sink.
    fn check_read(&self, k: usize) {
        let w = &self.plan.wrs[k];
        let (l, len) = (w.local_off, w.len as usize);
        let t = &self.sink.bytes()[l..l + len];
        let own = &self.sink_owner[l..l + len];
        let e = &self.expect_read[k];
        let bad = (0..len).find(|&i| own[i] == k as u32 && t[i] != e[i]);
        assert!(
            bad.is_none(),
            "{}: READ WR {k} ({len} B) data wrong at byte {bad:?}",
            self.ctx
        );
    }

    fn post(&mut self, net: &mut Net) {
        let now = net.now.0;
        let y = side_mut(net, 1 - self.from);
        while self.recv_wanted() && now >= self.recv_hold_until && y.qp.state() != QpState::Error {
            let s = &self.plan.slots[self.recv_posted];
            let sges = self
                .rbuf
                .sges(s.off, &[s.cut as u32, (s.cap - s.cut) as u32]);
            y.post_recv(RecvWr {
                wr_id: RECV_ID_BASE + self.recv_posted as u64,
                sg_list: SgList::from_slice(&sges).expect("at most 2 SGEs"),
            });
            self.recv_posted += 1;
        }
        let x = side_mut(net, self.from);
        while self.first_error.is_none()
            && x.qp.state() == QpState::Rts
            && self.posted < self.plan.wrs.len()
            && self.posted - self.completed < self.plan.cfg.qd
        {
            let k = self.posted;
            let w = &self.plan.wrs[k];
            let (target, rsrc) = (&self.target.keys, &self.rsrc.keys);
            let rw = |m: &MrKeys| (m.addr + w.remote_off as u64, m.rkey);
            let op = match w.kind {
                OpKind::Send => SendOp::Send,
                OpKind::SendImm => SendOp::SendWithImm { imm_data: w.imm },
                OpKind::Write => {
                    let (remote_addr, rkey) = rw(target);
                    SendOp::RdmaWrite { remote_addr, rkey }
                }
                OpKind::WriteImm => {
                    let (remote_addr, rkey) = rw(target);
                    SendOp::RdmaWriteWithImm {
                        remote_addr,
                        rkey,
                        imm_data: w.imm,
                    }
                }
                OpKind::Read => {
                    let (remote_addr, rkey) = rw(if self.plan.cfg.shared { target } else { rsrc });
                    SendOp::RdmaRead { remote_addr, rkey }
                }
            };
            let local = if w.kind == OpKind::Read {
                &self.sink
            } else {
                &self.src
            };
            let mut wr = send_wr(k as u64, op, &local.sges(w.local_off, &w.local_sges));
            if self.plan.cfg.shared && w.kind.writes_target() {
                wr.flags |= SendFlags::FENCE;
            }
            x.qp.post_send(&wr)
                .unwrap_or_else(|e| panic!("{}: post WR {k}: {e:?}", self.ctx));
            self.post_at[k] = now;
            self.first_post.get_or_insert(now);
            self.posted += 1;
        }
    }

    /// End-of-run checks (call once the network is empty): every WR accounted for,
    /// the target and sink regions equal the model wherever the outcome is known.
    pub fn finish(&self, net: &Net) {
        let ctx = &self.ctx;
        assert!(
            self.done(),
            "{ctx}: flow {} not done: {}",
            self.from,
            self.progress()
        );
        if self.first_error.is_none() {
            assert_eq!(self.completed, self.plan.wrs.len(), "{ctx}");
            assert_eq!(self.recv_done, self.plan.slots.len(), "{ctx}");
        }
        // No receive completion beyond the plan (a SEND executed twice would add one).
        let y = side(net, 1 - self.from);
        assert_eq!(
            self.recv_cursor,
            y.wcs.len(),
            "{ctx}: unchecked completions"
        );
        let ok = |k: u32| self.done_at[k as usize].is_some();
        let all_ok = self.first_error.is_none();
        let t = self.target.bytes();
        let s = self.src.bytes();
        for (i, &k) in self.target_owner.iter().enumerate() {
            let want = if k == NONE {
                self.target_init[i]
            } else if all_ok || ok(k) {
                let w = &self.plan.wrs[k as usize];
                s[w.local_off + i - w.remote_off]
            } else {
                continue;
            };
            assert!(t[i] == want, "{ctx}: target byte {i} (last WR {k})");
        }
        let sink = self.sink.bytes();
        for (i, &k) in self.sink_owner.iter().enumerate() {
            let want = if k == NONE {
                0
            } else if all_ok || ok(k) {
                let w = &self.plan.wrs[k as usize];
                self.expect_read[k as usize][i - w.local_off]
            } else {
                continue;
            };
            assert!(sink[i] == want, "{ctx}: sink byte {i} (last READ {k})");
        }
    }

    /// A one-line summary for messages.
    pub fn progress(&self) -> String {
        format!(
            "posted {} completed {} of {}, receives posted {} done {} of {}, first error {:?}",
            self.posted,
            self.completed,
            self.plan.wrs.len(),
            self.recv_posted,
            self.recv_done,
            self.plan.slots.len(),
            self.first_error
        )
    }

    /// Virtual latencies (post to successful completion) of the WRs, ns, sorted.
    pub fn latencies(&self) -> Vec<u64> {
        let mut v: Vec<u64> = self
            .done_at
            .iter()
            .zip(&self.post_at)
            .filter_map(|(d, p)| d.map(|d| d - p))
            .collect();
        v.sort_unstable();
        v
    }
}

/// The flows of a run as the simulator's application.
pub(crate) struct Flows(pub Vec<Flow>);

impl super::App for Flows {
    fn step(&mut self, net: &mut Net) {
        for f in &mut self.0 {
            f.step(net);
        }
    }
    fn done(&self, _net: &Net) -> bool {
        self.0.iter().all(|f| f.done())
    }
    fn wakeup(&self) -> Option<u64> {
        self.0.iter().filter_map(|f| f.wakeup()).min()
    }
}
