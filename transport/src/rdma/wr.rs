//! Work requests: the model's [`SendWr`] / [`RecvWr`] written into `struct ibv_send_wr`
//! / `struct ibv_recv_wr` chains on the caller's stack (no allocation per WR), posted
//! with `ibv_post_send`, `ibv_post_recv`, `ibv_post_srq_recv`.
use std::mem::MaybeUninit;

use rdma_sys::{
    bind_mw_t, ibv_ah, ibv_mr, ibv_mw, ibv_mw_bind_info, ibv_post_recv, ibv_post_send,
    ibv_post_srq_recv, ibv_qp, ibv_recv_wr, ibv_send_wr, ibv_sge, ibv_srq, ibv_wr_opcode, rdma_t,
    ud_t,
};

use crate::verbs::{Ah, RecvWr, SendFlags, SendOp, SendWr, SgList, VerbsError, MAX_SGE};

/// Work requests linked into one `ibv_post_send` by `post_send_list`; longer lists are
/// posted in chunks of this many.
pub const POST_CHUNK: usize = 16;

/// Looks up the `ibv_*` objects a bind names: the memory window by the handle
/// `alloc_mw` returned (its key index, `handle >> 8`), the MR by its lkey.
pub trait KeyResolver {
    /// The memory window of `mw_handle`.
    fn mw(&self, mw_handle: u32) -> Option<*mut ibv_mw>;
    /// The MR whose lkey is `lkey`.
    fn mr(&self, lkey: u32) -> Option<*mut ibv_mr>;
    /// The address handle `ah` names (UD sends); none by default.
    fn ah(&self, _ah: Ah) -> Option<*mut ibv_ah> {
        None
    }
}

/// What a QP was granted that a send WR is checked against.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SendLimits {
    /// Granted `max_inline_data` of the QP.
    pub max_inline_data: u32,
    /// Granted `max_send_sge` of the QP.
    pub max_send_sge: u32,
}

fn sges(list: &SgList, out: &mut [ibv_sge; MAX_SGE]) -> i32 {
    for (o, s) in out.iter_mut().zip(list.as_slice()) {
        *o = ibv_sge {
            addr: s.addr,
            length: s.length,
            lkey: s.lkey,
        };
    }
    list.as_slice().len() as i32
}

/// Writes `wr` into `out` (SGEs into `sge`, which `out.sg_list` then points to).
///
/// # Errors
/// [`VerbsError::CapabilityExceeded`] for more SGEs than the QP was granted or more
/// inline bytes (IBV_SEND_INLINE) than its granted `max_inline_data`;
/// [`VerbsError::NoSuchObject`] for a bind naming an unknown MW or MR;
/// [`VerbsError::InvalidArgument`] for a UD send naming an unknown address handle.
pub fn fill_send(
    wr: &SendWr,
    out: &mut ibv_send_wr,
    sge: &mut [ibv_sge; MAX_SGE],
    limits: SendLimits,
    keys: &impl KeyResolver,
) -> Result<(), VerbsError> {
    let n = wr.sg_list.as_slice().len() as u32;
    if n > limits.max_send_sge {
        return Err(VerbsError::CapabilityExceeded {
            what: "send SGEs (max_send_sge granted to the QP)",
            asked: n,
            max: limits.max_send_sge,
        });
    }
    if wr.flags.contains(SendFlags::INLINE) {
        let len = u32::try_from(wr.sg_list.total_len()).unwrap_or(u32::MAX);
        if len > limits.max_inline_data {
            return Err(VerbsError::CapabilityExceeded {
                what: "inline data bytes (max_inline_data granted to the QP)",
                asked: len,
                max: limits.max_inline_data,
            });
        }
    }
    // SAFETY: ibv_send_wr is plain data (pointers, integers, unions of them).
    *out = unsafe { std::mem::zeroed() };
    out.wr_id = wr.wr_id;
    out.next = std::ptr::null_mut();
    out.num_sge = sges(&wr.sg_list, sge);
    out.sg_list = sge.as_mut_ptr();
    out.send_flags = wr.flags.bits();
    use ibv_wr_opcode::*;
    match wr.op {
        SendOp::Send => out.opcode = IBV_WR_SEND,
        SendOp::UdSend { dest, imm_data } => {
            let ah = keys.ah(dest.ah).ok_or(VerbsError::InvalidArgument(
                "no such address handle in this poll group (create_ah first)",
            ))?;
            out.opcode = match imm_data {
                Some(imm) => {
                    out.imm_data_invalidated_rkey_union.imm_data = imm.to_be();
                    IBV_WR_SEND_WITH_IMM
                }
                None => IBV_WR_SEND,
            };
            out.wr.ud = ud_t {
                ah,
                remote_qpn: dest.remote_qpn & 0x00FF_FFFF,
                remote_qkey: dest.remote_qkey,
            };
        }
        SendOp::SendWithImm { imm_data } => {
            out.opcode = IBV_WR_SEND_WITH_IMM;
            out.imm_data_invalidated_rkey_union.imm_data = imm_data.to_be();
        }
        SendOp::SendWithInv { invalidate_rkey } => {
            out.opcode = IBV_WR_SEND_WITH_INV;
            out.imm_data_invalidated_rkey_union.invalidated_rkey = invalidate_rkey;
        }
        SendOp::RdmaWrite { remote_addr, rkey } => {
            out.opcode = IBV_WR_RDMA_WRITE;
            out.wr.rdma = rdma_t { remote_addr, rkey };
        }
        SendOp::RdmaWriteWithImm {
            remote_addr,
            rkey,
            imm_data,
        } => {
            out.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
            out.wr.rdma = rdma_t { remote_addr, rkey };
            out.imm_data_invalidated_rkey_union.imm_data = imm_data.to_be();
        }
        SendOp::RdmaRead { remote_addr, rkey } => {
            out.opcode = IBV_WR_RDMA_READ;
            out.wr.rdma = rdma_t { remote_addr, rkey };
        }
        SendOp::LocalInv { rkey } => {
            out.opcode = IBV_WR_LOCAL_INV;
            out.imm_data_invalidated_rkey_union.invalidated_rkey = rkey;
        }
        SendOp::BindMw {
            mw_handle,
            rkey,
            mr_lkey,
            addr,
            length,
            access,
        } => {
            let mw = keys.mw(mw_handle).ok_or(VerbsError::NoSuchObject)?;
            let mr = keys.mr(mr_lkey).ok_or(VerbsError::NoSuchObject)?;
            out.opcode = IBV_WR_BIND_MW;
            out.num_sge = 0;
            out.bind_mw_tso_union.bind_mw = bind_mw_t {
                mw,
                rkey,
                bind_info: ibv_mw_bind_info {
                    mr,
                    addr,
                    length,
                    mw_access_flags: access.bits(),
                },
            };
        }
    }
    Ok(())
}

fn post_err(call: &'static str, rc: i32) -> VerbsError {
    match rc {
        libc::ENOMEM => VerbsError::QueueFull,
        _ => super::sys::rc_err(call, rc),
    }
}

/// Posts `wrs` on `qp` (`ibv_post_send`), linked in chunks of [`POST_CHUNK`] built on
/// the stack: one call per chunk.
///
/// # Errors
/// Those of [`fill_send`] (nothing of the chunk is posted); [`VerbsError::QueueFull`]
/// for ENOMEM (send queue full); [`VerbsError::Os`] for EINVAL (a WR the device
/// refuses) or EFAULT. The WRs before the failing one were posted.
///
/// # Safety
/// `qp` is a live QP; the SGEs name registered memory that stays valid until the WRs
/// complete.
pub unsafe fn post_send_list(
    qp: *mut ibv_qp,
    wrs: &[SendWr],
    limits: SendLimits,
    keys: &impl KeyResolver,
) -> Result<(), VerbsError> {
    let mut wr_buf: [MaybeUninit<ibv_send_wr>; POST_CHUNK] =
        [const { MaybeUninit::uninit() }; POST_CHUNK];
    let mut sge_buf: [[ibv_sge; MAX_SGE]; POST_CHUNK] = [[ibv_sge {
        addr: 0,
        length: 0,
        lkey: 0,
    }; MAX_SGE]; POST_CHUNK];
    for chunk in wrs.chunks(POST_CHUNK) {
        for (i, wr) in chunk.iter().enumerate() {
            let out = wr_buf[i].write(std::mem::zeroed());
            fill_send(wr, out, &mut sge_buf[i], limits, keys)?;
        }
        let base = wr_buf.as_mut_ptr() as *mut ibv_send_wr;
        for i in 1..chunk.len() {
            (*base.add(i - 1)).next = base.add(i);
        }
        let mut bad: *mut ibv_send_wr = std::ptr::null_mut();
        let rc = ibv_post_send(qp, base, &mut bad);
        if rc != 0 {
            return Err(post_err("ibv_post_send", rc));
        }
        note_bound_rkeys(chunk, keys);
    }
    Ok(())
}

/// Records the new rkey of every window a posted chunk binds in its `ibv_mw.rkey`: the
/// provider names the window by that field in the next bind (rdma-core's rxe passes it
/// as `mw_rkey`, and the kernel refuses a bind whose `mw_rkey` is not the window's
/// current rkey with IBV_WC_MW_BIND_ERR), and `ibv_post_send` does not update it
/// (`ibv_bind_mw` does, for the type 1 windows it serves).
///
/// # Safety
/// The windows `keys` resolves are live.
unsafe fn note_bound_rkeys(posted: &[SendWr], keys: &impl KeyResolver) {
    for wr in posted {
        if let SendOp::BindMw {
            mw_handle, rkey, ..
        } = wr.op
        {
            if let Some(mw) = keys.mw(mw_handle) {
                (*mw).rkey = rkey;
            }
        }
    }
}

fn fill_recv(wr: &RecvWr, sge: &mut [ibv_sge; MAX_SGE]) -> ibv_recv_wr {
    let num_sge = sges(&wr.sg_list, sge);
    ibv_recv_wr {
        wr_id: wr.wr_id,
        next: std::ptr::null_mut(),
        sg_list: sge.as_mut_ptr(),
        num_sge,
    }
}

/// Posts one receive WR on `qp` (`ibv_post_recv`).
///
/// # Errors
/// [`VerbsError::QueueFull`] (ENOMEM), [`VerbsError::Os`] (EINVAL: too many SGEs, or the
/// QP receives through an SRQ).
///
/// # Safety
/// `qp` is a live QP; the SGEs name registered memory valid until the WR completes.
pub unsafe fn post_recv(qp: *mut ibv_qp, wr: &RecvWr) -> Result<(), VerbsError> {
    let mut sge = [ibv_sge {
        addr: 0,
        length: 0,
        lkey: 0,
    }; MAX_SGE];
    let mut w = fill_recv(wr, &mut sge);
    let mut bad: *mut ibv_recv_wr = std::ptr::null_mut();
    let rc = ibv_post_recv(qp, &mut w, &mut bad);
    if rc != 0 {
        return Err(post_err("ibv_post_recv", rc));
    }
    Ok(())
}

/// Posts one receive WR on `srq` (`ibv_post_srq_recv`).
///
/// # Errors
/// As [`post_recv`].
///
/// # Safety
/// `srq` is a live SRQ; the SGEs name registered memory valid until the WR completes.
pub unsafe fn post_srq_recv(srq: *mut ibv_srq, wr: &RecvWr) -> Result<(), VerbsError> {
    let mut sge = [ibv_sge {
        addr: 0,
        length: 0,
        lkey: 0,
    }; MAX_SGE];
    let mut w = fill_recv(wr, &mut sge);
    let mut bad: *mut ibv_recv_wr = std::ptr::null_mut();
    let rc = ibv_post_srq_recv(srq, &mut w, &mut bad);
    if rc != 0 {
        return Err(post_err("ibv_post_srq_recv", rc));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::verbs::{AccessFlags, Sge};

    struct Keys;
    impl KeyResolver for Keys {
        fn mw(&self, h: u32) -> Option<*mut ibv_mw> {
            (h == 0x100).then_some(0x1000 as *mut ibv_mw)
        }
        fn mr(&self, lkey: u32) -> Option<*mut ibv_mr> {
            (lkey == 0x200).then_some(0x2000 as *mut ibv_mr)
        }
    }

    const LIMITS: SendLimits = SendLimits {
        max_inline_data: 64,
        max_send_sge: 2,
    };

    fn wr(op: SendOp, flags: SendFlags, sges: &[Sge]) -> SendWr {
        SendWr {
            wr_id: 42,
            op,
            sg_list: SgList::from_slice(sges).unwrap(),
            flags,
        }
    }

    fn fill(w: &SendWr) -> Result<(ibv_send_wr, [ibv_sge; MAX_SGE]), VerbsError> {
        // SAFETY: plain data.
        let mut out: ibv_send_wr = unsafe { std::mem::zeroed() };
        let mut sge = [ibv_sge {
            addr: 0,
            length: 0,
            lkey: 0,
        }; MAX_SGE];
        fill_send(w, &mut out, &mut sge, LIMITS, &Keys)?;
        Ok((out, sge))
    }

    const SGE: Sge = Sge {
        addr: 0x7000,
        length: 4096,
        lkey: 0x200,
    };

    #[test]
    fn rdma_write_with_imm() {
        let (o, sge) = fill(&wr(
            SendOp::RdmaWriteWithImm {
                remote_addr: 0xdead_0000,
                rkey: 0x77,
                imm_data: 0x0102_0304,
            },
            SendFlags::SIGNALED,
            &[SGE],
        ))
        .unwrap();
        assert_eq!(o.opcode, ibv_wr_opcode::IBV_WR_RDMA_WRITE_WITH_IMM);
        assert_eq!((o.wr_id, o.num_sge, o.send_flags), (42, 1, 2));
        // SAFETY: the fields fill_send wrote.
        unsafe {
            assert_eq!((o.wr.rdma.remote_addr, o.wr.rdma.rkey), (0xdead_0000, 0x77));
            assert_eq!(
                o.imm_data_invalidated_rkey_union.imm_data,
                0x0102_0304u32.to_be()
            );
        }
        assert_eq!(
            (sge[0].addr, sge[0].length, sge[0].lkey),
            (0x7000, 4096, 0x200)
        );
    }

    #[test]
    fn bind_mw_resolves_window_and_region() {
        let (o, _) = fill(&wr(
            SendOp::BindMw {
                mw_handle: 0x100,
                rkey: 0x101,
                mr_lkey: 0x200,
                addr: 0x7000,
                length: 8192,
                access: AccessFlags::REMOTE_READ | AccessFlags::REMOTE_WRITE,
            },
            SendFlags::empty(),
            &[],
        ))
        .unwrap();
        assert_eq!(o.opcode, ibv_wr_opcode::IBV_WR_BIND_MW);
        // SAFETY: the fields fill_send wrote.
        let b = unsafe { o.bind_mw_tso_union.bind_mw };
        assert_eq!((b.mw as usize, b.rkey), (0x1000, 0x101));
        assert_eq!(
            (
                b.bind_info.mr as usize,
                b.bind_info.addr,
                b.bind_info.length
            ),
            (0x2000, 0x7000, 8192)
        );
        assert_eq!(b.bind_info.mw_access_flags, 6);
        let unknown = wr(
            SendOp::BindMw {
                mw_handle: 0x300,
                rkey: 0x301,
                mr_lkey: 0x200,
                addr: 0,
                length: 0,
                access: AccessFlags::empty(),
            },
            SendFlags::empty(),
            &[],
        );
        assert_eq!(fill(&unknown).err(), Some(VerbsError::NoSuchObject));
    }

    #[test]
    fn a_posted_bind_records_the_new_rkey_in_the_window() {
        // SAFETY: plain data.
        let mut mw: ibv_mw = unsafe { std::mem::zeroed() };
        mw.rkey = 0x100;
        struct One(*mut ibv_mw);
        impl KeyResolver for One {
            fn mw(&self, h: u32) -> Option<*mut ibv_mw> {
                (h >> 8 == 1).then_some(self.0)
            }
            fn mr(&self, _: u32) -> Option<*mut ibv_mr> {
                None
            }
        }
        let bind = |rkey| {
            wr(
                SendOp::BindMw {
                    mw_handle: 0x100,
                    rkey,
                    mr_lkey: 0x200,
                    addr: 0x7000,
                    length: 4096,
                    access: AccessFlags::REMOTE_READ,
                },
                SendFlags::empty(),
                &[],
            )
        };
        let send = wr(SendOp::Send, SendFlags::empty(), &[SGE]);
        // SAFETY: the window is a live local.
        unsafe { note_bound_rkeys(&[send, bind(0x105)], &One(&mut mw)) };
        assert_eq!(mw.rkey, 0x105);
        // SAFETY: as above.
        unsafe { note_bound_rkeys(&[bind(0x1ff), send], &One(&mut mw)) };
        assert_eq!(mw.rkey, 0x1ff);
    }

    #[test]
    fn inline_and_sge_limits_are_the_granted_ones() {
        let small = Sge { length: 64, ..SGE };
        assert!(fill(&wr(SendOp::Send, SendFlags::INLINE, &[small])).is_ok());
        let big = Sge { length: 65, ..SGE };
        assert_eq!(
            fill(&wr(SendOp::Send, SendFlags::INLINE, &[big]))
                .err()
                .unwrap(),
            VerbsError::CapabilityExceeded {
                what: "inline data bytes (max_inline_data granted to the QP)",
                asked: 65,
                max: 64
            }
        );
        assert!(matches!(
            fill(&wr(SendOp::Send, SendFlags::empty(), &[SGE, SGE, SGE])),
            Err(VerbsError::CapabilityExceeded {
                asked: 3,
                max: 2,
                ..
            })
        ));
        let (o, _) = fill(&wr(
            SendOp::SendWithInv {
                invalidate_rkey: 0x5511,
            },
            SendFlags::empty(),
            &[SGE],
        ))
        .unwrap();
        assert_eq!(o.opcode, ibv_wr_opcode::IBV_WR_SEND_WITH_INV);
        // SAFETY: the field fill_send wrote.
        assert_eq!(
            unsafe { o.imm_data_invalidated_rkey_union.invalidated_rkey },
            0x5511
        );
    }
}
