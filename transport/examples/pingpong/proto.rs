//! The ping-pong protocol of `verbs_pingpong` and `soft_pingpong`, written once over
//! [`Link`]: one connected RC QP, its CQ and one MR of any provider (`P: Provider`).
//!
//! Layout of each side's MR: a receive buffer (header + 1 MiB), a send buffer (header +
//! 1 MiB), and a 1 MiB region (the server's is the target of the client's RDMA WRITEs
//! and READs; the client's is their source and sink). Messages are SENDs of a 16-byte
//! header (magic, op, size, arg; little endian) and a payload.
//!
//! Per size and iteration the client (1) SENDs a patterned payload that the server
//! checks and answers with another pattern, (2) RDMA WRITEs a pattern into the server's
//! region and SENDs "check" in the same post (a chain of two WRs); the server checks the
//! region and refills it, (3) RDMA READs the refilled region back and checks it. The
//! server announces its region (address, rkey: the MR's, or that of a memory window it
//! bound over the region) in a first message.
#![allow(dead_code)]

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use transport::verbs::{
    inc_rkey, AccessFlags, Context as _, ContextOf, Cq, MemoryRegion as _, MrOf, Provider, Qp,
    QpCap, RecvWr, SendFlags, SendOp, SendWr, SgList, Sge, WcOpcode, WcStatus, WorkCompletion,
};

/// Largest message and region.
pub const MAX: usize = 1 << 20;
/// Message header: magic, op, size, arg (little endian u32 each).
pub const HDR: usize = 16;
const MAGIC: u32 = 0x4d50_5056; // "VPPM"
/// CM private data of both REQ and REP.
pub const CM_MAGIC: &[u8; 4] = b"VPP1";
const OP_HELLO: u32 = 1;
const OP_SEND_DATA: u32 = 2;
const OP_CHECK_WRITE: u32 = 3;
const OP_RESULT: u32 = 4;
const OP_DONE: u32 = 5;
pub const WR_RECV: u64 = 1;
const WR_SEND: u64 = 2;
const WR_WRITE: u64 = 3;
const WR_READ: u64 = 4;
const WR_BIND: u64 = 5;
/// Offsets in the one MR of each side.
const RECV_OFF: usize = 0;
const SEND_OFF: usize = HDR + MAX;
const REGION_OFF: usize = 2 * (HDR + MAX);
/// Bytes of each side's MR.
pub const MR_LEN: usize = REGION_OFF + MAX;
/// Access of each side's MR (remote access to the region, windows over it).
pub const MR_ACCESS: AccessFlags = AccessFlags::LOCAL_WRITE
    .union(AccessFlags::REMOTE_READ)
    .union(AccessFlags::REMOTE_WRITE)
    .union(AccessFlags::MW_BIND);
/// Queue sizes of the QP (inline data asked for; the device grants what it grants).
pub const QP_CAP: QpCap = QpCap {
    max_send_wr: 16,
    max_recv_wr: 4,
    max_send_sge: 1,
    max_recv_sge: 1,
    max_inline_data: 64,
};
/// RDMA READs in flight each way (responder resources and initiator depth asked for).
pub const RD_ATOMIC: u8 = 16;

pub type Res<T> = Result<T, String>;

/// A connected QP of provider `P`, its CQ and its MR: what the protocol runs on.
pub struct Link<P: Provider> {
    pub ctx: ContextOf<P>,
    pub mr: MrOf<P>,
    pub cq: Cq,
    pub qp: Qp,
    /// Inline bytes granted to the QP.
    pub inline: u32,
}

impl<P: Provider> Link<P> {
    /// The link of connected `qp` of `ctx`, with the inline bytes the QP was granted.
    pub fn new(ctx: ContextOf<P>, mr: MrOf<P>, cq: Cq, qp: Qp) -> Self {
        let inline = ctx.qp_cap(qp).map_or(0, |c| c.max_inline_data);
        Link {
            ctx,
            mr,
            cq,
            qp,
            inline,
        }
    }
    /// Virtual address (iova) of the MR's first byte.
    fn addr(&self) -> u64 {
        self.mr.addr()
    }
    /// The MR's lkey.
    fn lkey(&self) -> u32 {
        self.mr.lkey()
    }
    /// The MR's rkey.
    fn rkey(&self) -> u32 {
        self.mr.rkey()
    }
    /// Copies into the MR.
    fn write(&self, off: usize, data: &[u8]) {
        self.mr.write(off, data)
    }
    /// Copies out of the MR.
    fn read(&self, off: usize, out: &mut [u8]) {
        self.mr.read(off, out)
    }
    /// Inline bytes granted to the QP.
    fn inline(&self) -> u32 {
        self.inline
    }
    /// Posts a chain of send WRs.
    fn post_send_list(&mut self, wrs: &[SendWr]) -> Res<()> {
        self.ctx
            .post_send_list(self.qp, wrs)
            .map_err(|e| format!("post_send: {e}"))
    }
    /// Posts one receive WR.
    fn post_recv(&mut self, wr: &RecvWr) -> Res<()> {
        self.ctx
            .post_recv(self.qp, wr)
            .map_err(|e| format!("post_recv: {e}"))
    }
    /// Completions of the QP's CQ, sleeping on the CQ's event up to `timeout` for at
    /// least one.
    fn poll(&mut self, out: &mut [WorkCompletion], timeout: Duration) -> Res<usize> {
        self.ctx
            .poll_cq_blocking(self.cq, out, timeout)
            .map_err(|e| format!("req_notify_cq: {e}"))
    }
}

fn pattern(seed: u32, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (seed.wrapping_mul(31) as usize + i * 7 + (i >> 8)) as u8)
        .collect()
}

fn first_diff(a: &[u8], b: &[u8]) -> Option<usize> {
    a.iter().zip(b).position(|(x, y)| x != y)
}

/// The receive WR of the receive buffer of `link`'s MR.
pub fn recv_wr(addr: u64, lkey: u32) -> RecvWr {
    RecvWr {
        wr_id: WR_RECV,
        sg_list: SgList::one(Sge {
            addr: addr + RECV_OFF as u64,
            length: (HDR + MAX) as u32,
            lkey,
        }),
    }
}

/// One side of a connection.
pub struct Session<P: Provider> {
    pub link: Link<P>,
    pending: VecDeque<WorkCompletion>,
    timeout: Duration,
}

impl<P: Provider> Session<P> {
    pub fn new(link: Link<P>, timeout: Duration) -> Self {
        Session {
            link,
            pending: VecDeque::new(),
            timeout,
        }
    }

    fn sge(&self, off: usize, len: usize) -> SgList {
        SgList::one(Sge {
            addr: self.link.addr() + off as u64,
            length: len as u32,
            lkey: self.link.lkey(),
        })
    }

    fn repost(&mut self) -> Res<()> {
        let wr = recv_wr(self.link.addr(), self.link.lkey());
        self.link.post_recv(&wr)
    }

    fn post(&mut self, wrs: &[SendWr]) -> Res<()> {
        self.link.post_send_list(wrs)
    }

    /// Waits for the completion of `wr_id`, keeping others for later; an error
    /// completion fails.
    fn wait(&mut self, wr_id: u64) -> Res<WorkCompletion> {
        let deadline = Instant::now() + self.timeout;
        loop {
            if let Some(i) = self.pending.iter().position(|w| w.wr_id == wr_id) {
                let wc = self.pending.remove(i).expect("present");
                return Ok(wc);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(format!(
                    "no completion of work request {wr_id} within {:?}",
                    self.timeout
                ));
            }
            let mut buf = [WorkCompletion::new(0, WcStatus::Success, WcOpcode::Send, 0); 8];
            let n = self.link.poll(&mut buf, left)?;
            for wc in &buf[..n] {
                if wc.status != WcStatus::Success {
                    return Err(format!(
                        "work request {} completed with {}",
                        wc.wr_id, wc.status
                    ));
                }
                self.pending.push_back(*wc);
            }
        }
    }

    fn sent(&mut self) -> Res<()> {
        self.wait(WR_SEND).map(|_| ())
    }

    fn header(&self, op: u32, size: u32, arg: u32) {
        let mut h = [0u8; HDR];
        for (i, v) in [MAGIC, op, size, arg].into_iter().enumerate() {
            h[i * 4..i * 4 + 4].copy_from_slice(&v.to_le_bytes());
        }
        self.link.write(SEND_OFF, &h);
    }

    fn send_wr(&self, len: usize) -> SendWr {
        SendWr {
            wr_id: WR_SEND,
            op: SendOp::Send,
            sg_list: self.sge(SEND_OFF, len),
            flags: if len as u32 <= self.link.inline() {
                SendFlags::SIGNALED | SendFlags::INLINE
            } else {
                SendFlags::SIGNALED
            },
        }
    }

    fn send(&mut self, len: usize) -> Res<()> {
        let wr = self.send_wr(len);
        self.post(&[wr])?;
        self.sent()
    }

    /// The received message's (op, size, arg).
    fn received(&self, wc: &WorkCompletion) -> Res<(u32, u32, u32)> {
        if (wc.byte_len as usize) < HDR {
            return Err(format!("short message of {} bytes", wc.byte_len));
        }
        let mut h = [0u8; HDR];
        self.link.read(RECV_OFF, &mut h);
        let w = |i: usize| u32::from_le_bytes(h[i * 4..i * 4 + 4].try_into().unwrap());
        if w(0) != MAGIC {
            return Err(format!("bad message magic {:#x}", w(0)));
        }
        Ok((w(1), w(2), w(3)))
    }

    /// Server: binds `mw` (if any) over the region, announces the region, then answers
    /// the client until it is done; returns the number of requests answered.
    pub fn serve(&mut self, mw: Option<u32>) -> Res<u32> {
        let region = self.link.addr() + REGION_OFF as u64;
        let rkey = match mw {
            Some(h) => {
                let new = inc_rkey(h);
                let bind = SendWr {
                    wr_id: WR_BIND,
                    op: SendOp::BindMw {
                        mw_handle: h,
                        rkey: new,
                        mr_lkey: self.link.lkey(),
                        addr: region,
                        length: MAX as u64,
                        access: AccessFlags::REMOTE_READ | AccessFlags::REMOTE_WRITE,
                    },
                    sg_list: SgList::new(),
                    flags: SendFlags::SIGNALED,
                };
                self.post(&[bind])?;
                let wc = self.wait(WR_BIND)?;
                println!(
                    "server: memory window bound, rkey {new:#x} ({:?})",
                    wc.opcode
                );
                new
            }
            None => self.link.rkey(),
        };
        self.header(OP_HELLO, 0, 0);
        let mut info = [0u8; 16];
        info[..8].copy_from_slice(&region.to_le_bytes());
        info[8..12].copy_from_slice(&rkey.to_le_bytes());
        info[12..].copy_from_slice(&(MAX as u32).to_le_bytes());
        self.link.write(SEND_OFF + HDR, &info);
        self.send(HDR + 16)?;
        let mut answered = 0;
        loop {
            let wc = self.wait(WR_RECV)?;
            let (op, size, arg) = self.received(&wc)?;
            let n = (size as usize).min(MAX);
            let mut payload = vec![0u8; n];
            match op {
                OP_SEND_DATA => {
                    self.link.read(RECV_OFF + HDR, &mut payload);
                    let ok = wc.byte_len as usize == HDR + size as usize
                        && first_diff(&payload, &pattern(arg, n)).is_none();
                    self.repost()?;
                    self.header(OP_SEND_DATA, size, if ok { arg + 1 } else { u32::MAX });
                    self.link.write(SEND_OFF + HDR, &pattern(arg + 1, n));
                    self.send(HDR + n)?;
                }
                OP_CHECK_WRITE => {
                    self.link.read(REGION_OFF, &mut payload);
                    let status = match first_diff(&payload, &pattern(arg, n)) {
                        None => 0,
                        Some(off) => off as u32 + 1,
                    };
                    self.link.write(REGION_OFF, &pattern(arg + 1, n));
                    self.repost()?;
                    self.header(OP_RESULT, size, status);
                    self.send(HDR)?;
                }
                OP_DONE => return Ok(answered),
                _ => return Err(format!("unknown op {op}")),
            }
            answered += 1;
        }
    }

    /// Client: reads the server's announcement, runs the checks for `sizes` x `iters`
    /// and says it is done; `Err` names every failed check.
    pub fn run_client(&mut self, sizes: &[u32], iters: u32) -> Res<()> {
        if let Some(s) = sizes.iter().find(|&&s| s as usize > MAX) {
            return Err(format!(
                "size {s} is over the {MAX}-byte region; use --sizes up to {MAX}"
            ));
        }
        let wc = self.wait(WR_RECV)?;
        let (op, _, _) = self.received(&wc)?;
        if op != OP_HELLO {
            return Err(format!("expected HELLO, got op {op}"));
        }
        let mut info = [0u8; 16];
        self.link.read(RECV_OFF + HDR, &mut info);
        let raddr = u64::from_le_bytes(info[..8].try_into().unwrap());
        let rkey = u32::from_le_bytes(info[8..12].try_into().unwrap());
        self.repost()?;
        println!("client: server region {raddr:#x} rkey {rkey:#x}");
        let mut seed = 1u32;
        let mut failed = Vec::new();
        for &size in sizes {
            let n = size as usize;
            let mut rtts = Vec::new();
            for _ in 0..iters {
                // 1. SEND both ways.
                seed += 2;
                let t = Instant::now();
                self.header(OP_SEND_DATA, size, seed);
                self.link.write(SEND_OFF + HDR, &pattern(seed, n));
                self.send(HDR + n)?;
                let wc = self.wait(WR_RECV)?;
                rtts.push(t.elapsed());
                let (op, rsize, arg) = self.received(&wc)?;
                let mut got = vec![0u8; n];
                self.link.read(RECV_OFF + HDR, &mut got);
                self.repost()?;
                if op != OP_SEND_DATA || rsize != size || arg != seed + 1 {
                    failed.push(format!("SEND {size}: the server saw a bad payload"));
                } else if let Some(off) = first_diff(&got, &pattern(seed + 1, n)) {
                    failed.push(format!("SEND {size}: reply differs at byte {off}"));
                }
                // 2. RDMA WRITE + SEND "check" in one post.
                self.link.write(REGION_OFF, &pattern(seed + 7, n));
                self.header(OP_CHECK_WRITE, size, seed + 7);
                let write = SendWr {
                    wr_id: WR_WRITE,
                    op: SendOp::RdmaWrite {
                        remote_addr: raddr,
                        rkey,
                    },
                    sg_list: self.sge(REGION_OFF, n),
                    flags: SendFlags::empty(),
                };
                let check = self.send_wr(HDR);
                self.post(&[write, check])?;
                self.sent()?;
                let wc = self.wait(WR_RECV)?;
                let (op, _, status) = self.received(&wc)?;
                self.repost()?;
                if op != OP_RESULT || status != 0 {
                    failed.push(format!(
                        "RDMA WRITE {size}: the server's region differs at byte {}",
                        status.wrapping_sub(1)
                    ));
                }
                // 3. RDMA READ of what the server refilled.
                self.link.write(REGION_OFF, &vec![0u8; n]);
                let read = SendWr {
                    wr_id: WR_READ,
                    op: SendOp::RdmaRead {
                        remote_addr: raddr,
                        rkey,
                    },
                    sg_list: self.sge(REGION_OFF, n),
                    flags: SendFlags::SIGNALED,
                };
                self.post(&[read])?;
                let wc = self.wait(WR_READ)?;
                let mut got = vec![0u8; n];
                self.link.read(REGION_OFF, &mut got);
                if wc.byte_len != size {
                    failed.push(format!("RDMA READ {size}: byte_len {}", wc.byte_len));
                } else if let Some(off) = first_diff(&got, &pattern(seed + 8, n)) {
                    failed.push(format!("RDMA READ {size}: differs at byte {off}"));
                }
            }
            rtts.sort();
            let median = rtts.get(rtts.len() / 2).copied().unwrap_or_default();
            println!(
                "client: size {size}: {iters} x SEND+reply, RDMA WRITE, RDMA READ checked; SEND round trip median {} us",
                median.as_micros()
            );
        }
        self.header(OP_DONE, 0, 0);
        self.send(HDR)?;
        if failed.is_empty() {
            Ok(())
        } else {
            Err(failed.join("; "))
        }
    }
}
