//! Shared receive queues: `ibv_create_srq`, `ibv_modify_srq` with IBV_SRQ_LIMIT (the
//! limit event IBV_EVENT_SRQ_LIMIT_REACHED, one-shot, re-armed by the consumer),
//! `ibv_destroy_srq`. Receives are posted with [`super::wr::post_srq_recv`].
use rdma_sys::{
    ibv_create_srq, ibv_destroy_srq, ibv_modify_srq, ibv_pd, ibv_srq, ibv_srq_attr,
    ibv_srq_attr_mask, ibv_srq_init_attr,
};

use super::sys::{os_err, rc_err};
use crate::verbs::{DeviceCaps, VerbsError, MAX_SGE};

/// Creates an SRQ of `max_wr` receive WRs of up to [`MAX_SGE`] SGEs (`ibv_create_srq`);
/// the limit starts disarmed (0).
///
/// # Errors
/// [`VerbsError::CapabilityExceeded`] beyond `max_srq_wr` / `max_srq_sge`;
/// [`VerbsError::Os`]: EINVAL, ENOMEM, ENOSYS (no SRQ support).
///
/// # Safety
/// `pd` is live.
pub unsafe fn create(
    pd: *mut ibv_pd,
    max_wr: u32,
    caps: &DeviceCaps,
) -> Result<*mut ibv_srq, VerbsError> {
    let sge = (MAX_SGE as u32).min(caps.max_srq_sge.max(1));
    caps.check_srq(max_wr, sge)?;
    let mut init = ibv_srq_init_attr {
        srq_context: std::ptr::null_mut(),
        attr: ibv_srq_attr {
            max_wr,
            max_sge: sge,
            srq_limit: 0,
        },
    };
    let srq = ibv_create_srq(pd, &mut init);
    if srq.is_null() {
        return Err(os_err("ibv_create_srq"));
    }
    Ok(srq)
}

/// Arms the SRQ limit (`ibv_modify_srq`, IBV_SRQ_LIMIT): when fewer than `limit`
/// receive WRs remain, the device raises IBV_EVENT_SRQ_LIMIT_REACHED once and disarms.
///
/// # Errors
/// [`VerbsError::InvalidArgument`] for a limit of 0 or beyond the SRQ's size
/// (`max_wr`); [`VerbsError::Os`] from `ibv_modify_srq`: EINVAL (the device refuses the
/// limit), ENOSYS.
///
/// # Safety
/// `srq` is live.
pub unsafe fn arm_limit(srq: *mut ibv_srq, limit: u32, max_wr: u32) -> Result<(), VerbsError> {
    if limit == 0 || limit >= max_wr {
        return Err(VerbsError::InvalidArgument(
            "SRQ limit must be between 1 and the SRQ's max_wr - 1",
        ));
    }
    let mut attr = ibv_srq_attr {
        max_wr: 0,
        max_sge: 0,
        srq_limit: limit,
    };
    let rc = ibv_modify_srq(srq, &mut attr, ibv_srq_attr_mask::IBV_SRQ_LIMIT.0 as i32);
    if rc != 0 {
        return Err(rc_err("ibv_modify_srq(IBV_SRQ_LIMIT)", rc));
    }
    Ok(())
}

/// Destroys an SRQ (`ibv_destroy_srq`).
///
/// # Errors
/// [`VerbsError::Os`]: EBUSY (QPs still use it).
///
/// # Safety
/// `srq` is live and nothing uses it afterwards.
pub unsafe fn destroy(srq: *mut ibv_srq) -> Result<(), VerbsError> {
    let rc = ibv_destroy_srq(srq);
    if rc != 0 {
        return Err(rc_err("ibv_destroy_srq", rc));
    }
    Ok(())
}
