//! Type 2 memory windows (IBTA Vol 1 §10.6.7): `ibv_alloc_mw(pd, IBV_MW_TYPE_2)` and
//! `ibv_dealloc_mw`; a window is bound to a range of an MR by a `SendOp::BindMw` work
//! request (IBV_WR_BIND_MW, see [`super::wr`]) and invalidated by a local invalidate or
//! a SEND with Invalidate. The model names a window by the rkey `alloc_mw` returned;
//! its key index (`rkey >> 8`) stays the same when a bind changes the 8-bit tag.
use rdma_sys::{ibv_alloc_mw, ibv_dealloc_mw, ibv_mw, ibv_mw_type, ibv_pd};

use super::sys::{os_err, rc_err};
use crate::verbs::{DeviceCaps, VerbsError};

/// The table key of a window: its key index (`rkey >> 8`).
pub fn mw_index(rkey_or_handle: u32) -> u32 {
    rkey_or_handle >> 8
}

/// Allocates a type 2 window in `pd` (`ibv_alloc_mw`); returns it and its initial rkey.
///
/// # Errors
/// [`VerbsError::CapabilityExceeded`] when the device has no memory windows (`max_mw`
/// 0); [`VerbsError::Os`]: EOPNOTSUPP (the provider lacks `alloc_mw`), ENOMEM, EINVAL.
///
/// # Safety
/// `pd` is a live PD.
pub unsafe fn alloc(pd: *mut ibv_pd, caps: &DeviceCaps) -> Result<(*mut ibv_mw, u32), VerbsError> {
    if caps.max_mw == 0 {
        return Err(VerbsError::CapabilityExceeded {
            what: "memory windows (max_mw)",
            asked: 1,
            max: 0,
        });
    }
    match ibv_alloc_mw(pd, ibv_mw_type::IBV_MW_TYPE_2) {
        Some(mw) if !mw.is_null() => Ok((mw, (*mw).rkey)),
        _ => Err(os_err("ibv_alloc_mw")),
    }
}

/// Frees a window (`ibv_dealloc_mw`).
///
/// # Errors
/// [`VerbsError::Os`]: EBUSY.
///
/// # Safety
/// `mw` is a live window nothing uses afterwards.
pub unsafe fn dealloc(mw: *mut ibv_mw) -> Result<(), VerbsError> {
    let rc = ibv_dealloc_mw(mw);
    if rc != 0 {
        return Err(rc_err("ibv_dealloc_mw", rc));
    }
    Ok(())
}
