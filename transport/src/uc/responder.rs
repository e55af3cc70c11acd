//! UC responder (IBTA Vol 1 §9.7.7.2): PSN and opcode sequence checks that drop a
//! damaged message and resume at the next First or Only packet, SEND placement into
//! receive WRs, RDMA WRITE placement under the R_Key check. Nothing is ever answered.
//!
//! What is dropped (counted in `dropped_msgs`; the QP stays in its state), following
//! Linux rxe's UC paths:
//! - a PSN other than the expected one, or any packet while dropping, unless it is a
//!   First or Only (which resumes there); the gap is counted in `out_of_seq_request`;
//! - a Middle or Last that does not continue the message in progress, a First or Only
//!   while one is in progress;
//! - a SEND First/Only without a receive WR, or a WRITE with immediate without one;
//! - an RDMA WRITE whose R_Key check fails, or that the QP's access flags do not allow;
//! - a packet of the wrong length (First and Middle carry exactly the path MTU, Last
//!   and Only at most that), a WRITE longer or shorter than its DMA length.
//!
//! A SEND longer than its receive WR completes that WR with IBV_WC_LOC_LEN_ERR and
//! drops the rest of the message; a receive WR with a bad lkey completes with
//! IBV_WC_LOC_PROT_ERR and moves the QP to Error (a local error).
use crate::rc::mem::MemRef;
use crate::rc::psn::{psn_add, PSN_MASK};
use crate::rc::RcEnv;
use crate::verbs::{AccessFlags, RecvWr, WcOpcode, WcStatus, WorkCompletion, MAX_SGE};
use crate::wire::{Opcode, Packet};

use super::qp::UcQp;

/// The receive WR a SEND is placed into.
pub(crate) struct RecvCtx {
    pub(crate) wr: RecvWr,
    pd: u32,
    segs: [MemRef; MAX_SGE],
    nsegs: u8,
    total: u64,
    off: u64,
}

/// The message being placed.
#[derive(Default)]
pub(crate) enum InMsg {
    #[default]
    None,
    Send(RecvCtx),
    Write {
        mem: MemRef,
        off: u64,
        dma_len: u64,
    },
}

/// A UC opcode's operation, position and immediate data.
#[derive(Clone, Copy, PartialEq, Eq)]
struct Class {
    write: bool,
    starts: bool,
    ends: bool,
    imm: bool,
}

fn class(op: Opcode) -> Class {
    Class {
        write: op.is_rdma_write(),
        starts: op.starts_message(),
        ends: op.ends_message(),
        imm: op.has_immdt(),
    }
}

impl UcQp {
    pub(crate) fn responder_handle(&mut self, pkt: &Packet<'_>, env: &mut RcEnv<'_>) {
        let psn = pkt.hdr.bth.psn & PSN_MASK;
        let c = class(pkt.hdr.bth.opcode);
        if self.drop_msg || psn != self.epsn {
            if psn != self.epsn {
                self.counters.out_of_seq_request += 1;
            }
            if !c.starts {
                // A gap inside a message: the rest of it is lost.
                if !self.drop_msg {
                    self.abort_msg();
                }
                self.epsn = psn_add(psn, 1);
                return;
            }
            // A First or Only: a message in progress lost its end; resume here.
            if !matches!(self.msg, InMsg::None) {
                self.abort_msg();
            }
            self.drop_msg = false;
        }
        // Nothing is ever resent: whatever becomes of this packet, the next one is
        // expected after it.
        self.epsn = psn_add(psn, 1);
        // The opcode must continue the message in progress, or start one.
        let in_progress = match self.msg {
            InMsg::None => None,
            InMsg::Send(_) => Some(false),
            InMsg::Write { .. } => Some(true),
        };
        match in_progress {
            Some(w) if c.starts || w != c.write => return self.abort_msg(),
            None if !c.starts => {
                self.counters.dropped_msgs += 1;
                self.drop_msg = true;
                return;
            }
            _ => {}
        }
        // First and Middle carry exactly the MTU, Last and Only at most.
        let mtu = self.mtu.bytes() as usize;
        let len = pkt.payload.len();
        if (!c.ends && len != mtu) || len > mtu {
            return self.abort_msg();
        }
        if c.write {
            self.place_write(c, pkt, env);
        } else {
            self.place_send(c, pkt, env);
        }
    }

    /// Drops the message in progress (counted); its receive WR, if any, is kept for
    /// the next SEND. Packets are dropped until the next First or Only.
    fn abort_msg(&mut self) {
        self.counters.dropped_msgs += 1;
        self.drop_msg = true;
        if let InMsg::Send(ctx) = std::mem::take(&mut self.msg) {
            self.held_wqe = Some((ctx.wr, ctx.pd));
        }
    }

    fn take_wqe(&mut self, env: &mut RcEnv<'_>) -> Option<(RecvWr, u32)> {
        if let Some(w) = self.held_wqe.take() {
            return Some(w);
        }
        if self.has_srq {
            let q = env.srq.as_deref_mut()?;
            let pd = q.pd();
            q.pop().map(|w| (w, pd))
        } else {
            self.rq.pop().map(|w| (w, self.pd))
        }
    }

    fn place_send(&mut self, c: Class, pkt: &Packet<'_>, env: &mut RcEnv<'_>) {
        if c.starts {
            let Some((wr, pd)) = self.take_wqe(env) else {
                self.counters.dropped_msgs += 1;
                self.drop_msg = true;
                return;
            };
            let mut ctx = RecvCtx {
                wr,
                pd,
                segs: Default::default(),
                nsegs: wr.sg_list.as_slice().len() as u8,
                total: wr.sg_list.total_len(),
                off: 0,
            };
            for (i, sge) in wr.sg_list.as_slice().iter().enumerate() {
                match env.keys.check_local(
                    pd,
                    sge.lkey,
                    sge.addr,
                    sge.length as u64,
                    AccessFlags::LOCAL_WRITE,
                ) {
                    Ok(m) => ctx.segs[i] = m,
                    Err(st) => {
                        let wc = WorkCompletion::new(wr.wr_id, st, WcOpcode::Recv, self.qpn);
                        self.push_recv_wc(wc);
                        self.enter_error();
                        return;
                    }
                }
            }
            self.msg = InMsg::Send(ctx);
        }
        let InMsg::Send(ctx) = &mut self.msg else {
            return;
        };
        let data = pkt.payload;
        if ctx.off + data.len() as u64 > ctx.total {
            let id = ctx.wr.wr_id;
            self.msg = InMsg::None;
            self.counters.dropped_msgs += 1;
            self.drop_msg = true;
            let mut wc = WorkCompletion::new(id, WcStatus::LocLenErr, WcOpcode::Recv, self.qpn);
            wc.src_qp = self.dest_qpn;
            return self.push_recv_wc(wc);
        }
        // SAFETY: the receive buffers were validated with LOCAL_WRITE and belong to the
        // posted WR, which the application does not touch until it completes.
        unsafe {
            crate::rc::payload::scatter(&ctx.segs[..ctx.nsegs as usize], ctx.off as usize, data)
        };
        ctx.off += data.len() as u64;
        if c.ends {
            let InMsg::Send(ctx) = std::mem::take(&mut self.msg) else {
                return;
            };
            let mut wc =
                WorkCompletion::new(ctx.wr.wr_id, WcStatus::Success, WcOpcode::Recv, self.qpn);
            wc.byte_len = ctx.off as u32;
            wc.imm_data = pkt.hdr.imm;
            wc.src_qp = self.dest_qpn;
            self.push_recv_wc(wc);
        }
    }

    fn place_write(&mut self, c: Class, pkt: &Packet<'_>, env: &mut RcEnv<'_>) {
        if c.starts {
            let Some(reth) = pkt.hdr.reth else {
                return self.abort_msg();
            };
            if !self.access.contains(AccessFlags::REMOTE_WRITE) {
                return self.abort_msg();
            }
            let len = reth.dma_len as u64;
            match env.keys.check_remote(
                self.pd,
                self.qpn,
                reth.rkey,
                reth.va,
                len,
                AccessFlags::REMOTE_WRITE,
            ) {
                Ok(mem) => {
                    self.msg = InMsg::Write {
                        mem,
                        off: 0,
                        dma_len: len,
                    }
                }
                Err(()) => return self.abort_msg(),
            }
        }
        let InMsg::Write { off, dma_len, .. } = &self.msg else {
            return;
        };
        let (off, dma_len) = (*off, *dma_len);
        let data = pkt.payload;
        let end = off + data.len() as u64;
        if end > dma_len || (c.ends && end != dma_len) {
            return self.abort_msg();
        }
        let mut wqe = None;
        if c.imm && c.ends {
            match self.take_wqe(env) {
                Some((wr, _)) => wqe = Some(wr.wr_id),
                None => return self.abort_msg(),
            }
        }
        if let InMsg::Write { mem, off, .. } = &mut self.msg {
            // SAFETY: the range was validated with REMOTE_WRITE; the peer owns it for
            // the duration of the WRITE by the RDMA contract.
            unsafe { mem.write_at(*off as usize, data) };
            *off = end;
        }
        self.counters.rdma_recvs += 1;
        if c.ends {
            self.msg = InMsg::None;
            if let Some(wr_id) = wqe {
                let mut wc = WorkCompletion::new(
                    wr_id,
                    WcStatus::Success,
                    WcOpcode::RecvRdmaWithImm,
                    self.qpn,
                );
                wc.byte_len = dma_len as u32;
                wc.imm_data = pkt.hdr.imm;
                wc.src_qp = self.dest_qpn;
                self.push_recv_wc(wc);
            }
        }
    }
}
