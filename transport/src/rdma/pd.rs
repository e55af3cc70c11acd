//! Protection domains: `ibv_alloc_pd` / `ibv_dealloc_pd`. A device keeps its PDs in a
//! table; the model names them by index ([`Pd`](crate::verbs::Pd)).
use rdma_sys::{ibv_alloc_pd, ibv_context, ibv_dealloc_pd, ibv_pd};

use super::sys::{os_err, rc_err};
use crate::verbs::VerbsError;

/// Allocates a PD (`ibv_alloc_pd`).
///
/// # Errors
/// [`VerbsError::Os`]: ENOMEM (no resources).
///
/// # Safety
/// `ctx` is a live device context.
pub unsafe fn alloc(ctx: *mut ibv_context) -> Result<*mut ibv_pd, VerbsError> {
    let pd = ibv_alloc_pd(ctx);
    if pd.is_null() {
        return Err(os_err("ibv_alloc_pd"));
    }
    Ok(pd)
}

/// Frees a PD (`ibv_dealloc_pd`).
///
/// # Errors
/// [`VerbsError::Os`]: EBUSY (MRs, MWs, QPs or SRQs still use it).
///
/// # Safety
/// `pd` is a live PD nothing uses afterwards.
pub unsafe fn dealloc(pd: *mut ibv_pd) -> Result<(), VerbsError> {
    let rc = ibv_dealloc_pd(pd);
    if rc != 0 {
        return Err(rc_err("ibv_dealloc_pd", rc));
    }
    Ok(())
}
