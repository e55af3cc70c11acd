//! Completion queues and their completion channel: `ibv_create_comp_channel`,
//! `ibv_create_cq`, `ibv_req_notify_cq`, `ibv_get_cq_event` + `ibv_ack_cq_events`,
//! `ibv_poll_cq`. A poll group owns one channel for all its CQs, so it can sleep on one
//! descriptor (see [`crate::verbs::Context::wait`]).
use std::mem::MaybeUninit;
use std::os::fd::RawFd;

use rdma_sys::{
    ibv_ack_cq_events, ibv_comp_channel, ibv_context, ibv_cq, ibv_create_comp_channel,
    ibv_create_cq, ibv_destroy_comp_channel, ibv_destroy_cq, ibv_get_cq_event, ibv_poll_cq,
    ibv_req_notify_cq, ibv_wc,
};

use super::sys::{errno, os_err, rc_err, set_nonblocking};
use super::wc::work_completion;
use crate::verbs::{DeviceCaps, VerbsError, WorkCompletion};

/// Creates a completion channel (`ibv_create_comp_channel`) with a non-blocking
/// descriptor.
///
/// # Errors
/// [`VerbsError::Os`]: ENOMEM, EMFILE; or from `fcntl`.
///
/// # Safety
/// `ctx` is a live device context.
pub unsafe fn create_channel(ctx: *mut ibv_context) -> Result<*mut ibv_comp_channel, VerbsError> {
    let ch = ibv_create_comp_channel(ctx);
    if ch.is_null() {
        return Err(os_err("ibv_create_comp_channel"));
    }
    if let Err(e) = set_nonblocking((*ch).fd, "fcntl(completion channel, O_NONBLOCK)") {
        ibv_destroy_comp_channel(ch);
        return Err(e);
    }
    Ok(ch)
}

/// The channel's descriptor (readable when a CQ event is pending).
///
/// # Safety
/// `ch` is a live channel.
pub unsafe fn channel_fd(ch: *mut ibv_comp_channel) -> RawFd {
    (*ch).fd
}

/// Destroys a channel (`ibv_destroy_comp_channel`).
///
/// # Errors
/// [`VerbsError::Os`]: EBUSY (CQs still use it).
///
/// # Safety
/// `ch` is live and no CQ uses it any more.
pub unsafe fn destroy_channel(ch: *mut ibv_comp_channel) -> Result<(), VerbsError> {
    let rc = ibv_destroy_comp_channel(ch);
    if rc != 0 {
        return Err(rc_err("ibv_destroy_comp_channel", rc));
    }
    Ok(())
}

/// Creates a CQ of at least `cqe` entries reporting events on `ch` (`ibv_create_cq`).
///
/// # Errors
/// [`VerbsError::CapabilityExceeded`] beyond `max_cqe`; [`VerbsError::Os`]: EINVAL,
/// ENOMEM.
///
/// # Safety
/// `ctx` and `ch` are live and of the same device.
pub unsafe fn create(
    ctx: *mut ibv_context,
    cqe: u32,
    ch: *mut ibv_comp_channel,
    caps: &DeviceCaps,
) -> Result<*mut ibv_cq, VerbsError> {
    caps.check_cq(cqe)?;
    let cq = ibv_create_cq(ctx, cqe.max(1) as i32, std::ptr::null_mut(), ch, 0);
    if cq.is_null() {
        return Err(os_err("ibv_create_cq"));
    }
    Ok(cq)
}

/// Arms the CQ for one completion event on its channel (`ibv_req_notify_cq`, any
/// completion, not only solicited ones).
///
/// # Errors
/// [`VerbsError::Os`] with the provider's error number.
///
/// # Safety
/// `cq` is live.
pub unsafe fn req_notify(cq: *mut ibv_cq) -> Result<(), VerbsError> {
    let rc = ibv_req_notify_cq(cq, 0);
    if rc != 0 {
        return Err(rc_err("ibv_req_notify_cq", rc));
    }
    Ok(())
}

/// Takes every pending event off the channel (`ibv_get_cq_event`, non-blocking) and
/// acknowledges each (`ibv_ack_cq_events`); returns how many there were. The CQs are
/// disarmed by their event: arm them again before sleeping.
///
/// # Safety
/// `ch` is live (its descriptor non-blocking).
pub unsafe fn drain_events(ch: *mut ibv_comp_channel) -> usize {
    let mut n = 0;
    loop {
        let mut cq: *mut ibv_cq = std::ptr::null_mut();
        let mut ctx: *mut libc::c_void = std::ptr::null_mut();
        if ibv_get_cq_event(ch, &mut cq, &mut ctx) != 0 {
            let e = errno();
            if e != libc::EAGAIN && e != libc::EWOULDBLOCK && e != 0 {
                tracing::debug!(errno = e, "ibv_get_cq_event");
            }
            return n;
        }
        ibv_ack_cq_events(cq, 1);
        n += 1;
    }
}

/// Polls up to `out.len()` completions (`ibv_poll_cq`) through `buf`.
///
/// # Safety
/// `cq` is live.
pub unsafe fn poll(
    cq: *mut ibv_cq,
    buf: &mut [MaybeUninit<ibv_wc>],
    out: &mut [WorkCompletion],
) -> usize {
    let n = out.len().min(buf.len());
    if n == 0 {
        return 0;
    }
    let got = ibv_poll_cq(cq, n as i32, buf.as_mut_ptr() as *mut ibv_wc);
    if got <= 0 {
        if got < 0 {
            tracing::warn!(rc = got, "ibv_poll_cq failed");
        }
        return 0;
    }
    let got = got as usize;
    for (o, w) in out.iter_mut().zip(&buf[..got]) {
        *o = work_completion(w.assume_init_ref());
    }
    got
}

/// Destroys a CQ (`ibv_destroy_cq`); its events must have been acknowledged.
///
/// # Errors
/// [`VerbsError::Os`]: EBUSY (a QP or SRQ still uses it).
///
/// # Safety
/// `cq` is live and nothing uses it afterwards.
pub unsafe fn destroy(cq: *mut ibv_cq) -> Result<(), VerbsError> {
    let rc = ibv_destroy_cq(cq);
    if rc != 0 {
        return Err(rc_err("ibv_destroy_cq", rc));
    }
    Ok(())
}
