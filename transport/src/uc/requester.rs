//! UC requester (IBTA Vol 1 §9.7.7.1): segmentation of SEND and RDMA WRITE work
//! requests into UC packets, no window (nothing is acknowledged), a WR complete once its
//! last packet went to the driver.
use crate::rc::mem::MemRef;
use crate::rc::psn::psn_add;
use crate::rc::{RcEnv, TxPacket};
use crate::verbs::{AccessFlags, QpState, SendFlags, SendOp, SendWr, WcStatus, WorkCompletion};
use crate::wire::{pad_for, Bth, Opcode, PacketHeaders, Reth};

use super::qp::{send_wc_opcode, UcQp};

/// A send WR being segmented.
pub(crate) struct TxMsg {
    pub(crate) wr: SendWr,
    segs: [MemRef; crate::verbs::MAX_SGE],
    nsegs: u8,
    len: u32,
    npkts: u32,
    /// Index of the next packet.
    next: u32,
}

/// Where a packet sits in its message.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Pos {
    First,
    Middle,
    Last,
    Only,
}

fn pos_of(i: u32, n: u32) -> Pos {
    match (i, n) {
        (_, 0 | 1) => Pos::Only,
        (0, _) => Pos::First,
        (i, n) if i + 1 >= n => Pos::Last,
        _ => Pos::Middle,
    }
}

/// The UC opcode of a packet at `pos` of a SEND (`write` false) or RDMA WRITE, with
/// immediate data on its last packet when `imm`.
fn uc_opcode(write: bool, pos: Pos, imm: bool) -> Opcode {
    use Opcode::*;
    match (write, pos, imm) {
        (false, Pos::First, _) => UcSendFirst,
        (false, Pos::Middle, _) => UcSendMiddle,
        (false, Pos::Last, false) => UcSendLast,
        (false, Pos::Last, true) => UcSendLastImm,
        (false, Pos::Only, false) => UcSendOnly,
        (false, Pos::Only, true) => UcSendOnlyImm,
        (true, Pos::First, _) => UcRdmaWriteFirst,
        (true, Pos::Middle, _) => UcRdmaWriteMiddle,
        (true, Pos::Last, false) => UcRdmaWriteLast,
        (true, Pos::Last, true) => UcRdmaWriteLastImm,
        (true, Pos::Only, false) => UcRdmaWriteOnly,
        (true, Pos::Only, true) => UcRdmaWriteOnlyImm,
    }
}

impl UcQp {
    /// Starts the next WR: checks its SGEs. `false` when there is none or it failed
    /// (its error completion queued and the QP in Error).
    fn start_next(&mut self, env: &mut RcEnv<'_>) -> bool {
        let Some(wr) = self.sq.pop_front() else {
            return false;
        };
        let mut segs: [MemRef; crate::verbs::MAX_SGE] = Default::default();
        for (i, sge) in wr.sg_list.as_slice().iter().enumerate() {
            match env.keys.check_local(
                self.pd,
                sge.lkey,
                sge.addr,
                sge.length as u64,
                AccessFlags::empty(),
            ) {
                Ok(m) => segs[i] = m,
                Err(st) => {
                    self.counters.send_err += 1;
                    let mut wc =
                        WorkCompletion::new(wr.wr_id, st, send_wc_opcode(&wr.op), self.qpn);
                    wc.byte_len = wr.sg_list.total_len() as u32;
                    self.push_send_wc(wc);
                    self.enter_error();
                    return false;
                }
            }
        }
        let len = wr.sg_list.total_len() as u32;
        let mtu = self.mtu.bytes();
        self.tx = Some(TxMsg {
            wr,
            segs,
            nsegs: wr.sg_list.as_slice().len() as u8,
            len,
            npkts: len.div_ceil(mtu).max(1),
            next: 0,
        });
        true
    }

    pub(crate) fn requester_transmit(&mut self, env: &mut RcEnv<'_>) -> Option<TxPacket> {
        match self.state {
            QpState::Rts => {}
            // SQD finishes the message in progress and starts no other.
            QpState::Sqd if self.tx.is_some() => {}
            _ => return None,
        }
        if self.tx.is_none() && !self.start_next(env) {
            return None;
        }
        let mtu = self.mtu.bytes();
        let (psn, dest_qpn, qpn) = (self.psn, self.dest_qpn, self.qpn);
        let m = self.tx.as_mut()?;
        let i = m.next;
        let pos = pos_of(i, m.npkts);
        let last = matches!(pos, Pos::Last | Pos::Only);
        let off = i as usize * mtu as usize;
        let plen = (m.len as usize - off.min(m.len as usize)).min(mtu as usize);
        let (write, imm, reth) = match m.wr.op {
            SendOp::SendWithImm { imm_data } => (false, Some(imm_data), None),
            SendOp::RdmaWrite { remote_addr, rkey } => (
                true,
                None,
                Some(Reth {
                    va: remote_addr,
                    rkey,
                    dma_len: m.len,
                }),
            ),
            SendOp::RdmaWriteWithImm {
                remote_addr,
                rkey,
                imm_data,
            } => (
                true,
                Some(imm_data),
                Some(Reth {
                    va: remote_addr,
                    rkey,
                    dma_len: m.len,
                }),
            ),
            _ => (false, None, None),
        };
        let payload = crate::rc::payload::gather(&m.segs[..m.nsegs as usize], off, plen)?;
        let mut bth = Bth::new(uc_opcode(write, pos, imm.is_some()), dest_qpn, psn, false);
        bth.pad_count = pad_for(plen);
        bth.se = last && m.wr.flags.contains(SendFlags::SOLICITED);
        let mut hdr = PacketHeaders::new(bth);
        if matches!(pos, Pos::First | Pos::Only) {
            hdr.reth = reth;
        }
        if last {
            hdr.imm = imm;
        }
        m.next += 1;
        self.psn = psn_add(psn, 1);
        if write {
            self.counters.rdma_sends += 1;
        }
        if last {
            let m = self.tx.take()?;
            if m.wr.flags.contains(SendFlags::SIGNALED) {
                let mut wc = WorkCompletion::new(
                    m.wr.wr_id,
                    WcStatus::Success,
                    send_wc_opcode(&m.wr.op),
                    qpn,
                );
                wc.byte_len = m.len;
                self.push_send_wc(wc);
            }
        }
        Some(TxPacket { hdr, payload })
    }
}
