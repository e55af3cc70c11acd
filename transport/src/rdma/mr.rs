//! Memory regions: memory this provider allocates (page aligned, zeroed:
//! [`MrMemory`]) registered with `ibv_reg_mr`, after the pinned bytes were charged to
//! the process's `RLIMIT_MEMLOCK` budget ([`PinBudget::process`], shared with every
//! other pin of the process, io_uring's included). Unregistered with `ibv_dereg_mr`
//! when dropped, then the charge is released.
use std::sync::Arc;

use rdma_sys::{ibv_dereg_mr, ibv_mr, ibv_pd, ibv_reg_mr};

use super::device::VerbsDevice;
use super::sys::os_err;
use crate::memlock::{pinned_span_bytes, PinBudget, PinCharge};
use crate::rc::MrMemory;
use crate::verbs::{AccessFlags, MemoryRegion, Pd, VerbsError};

/// A registered memory region (`struct ibv_mr`) over memory it owns. Its address range
/// `[addr(), addr() + len())` is the iova SGEs and RETHs use (the virtual address).
pub struct VerbsMr {
    mr: *mut ibv_mr,
    pd: Pd,
    mem: Arc<MrMemory>,
    dev: Arc<VerbsDevice>,
    /// The pinned bytes' charge; kept (leaked) if the memory stays pinned.
    charge: Option<PinCharge<'static>>,
}

// SAFETY: an ibv_mr is immutable after registration and ibverbs calls on it are
// thread safe; the memory is MrMemory (Send + Sync).
unsafe impl Send for VerbsMr {}
// SAFETY: see above.
unsafe impl Sync for VerbsMr {}

impl std::fmt::Debug for VerbsMr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VerbsMr")
            .field("lkey", &self.lkey())
            .field("rkey", &self.rkey())
            .field("addr", &self.addr())
            .field("len", &self.len())
            .field("pd", &self.pd)
            .finish()
    }
}

impl VerbsMr {
    /// Allocates `len` bytes and registers them in `pd` with `access`
    /// (`ibv_reg_mr`), charging the pinned-memory budget first.
    ///
    /// # Errors
    /// [`VerbsError::InvalidArgument`] for `len` 0 or remote write/atomic access
    /// without local write (IBTA o10-31); [`VerbsError::Memlock`] when the pinned
    /// total would pass `RLIMIT_MEMLOCK`; [`VerbsError::NoResources`] when the
    /// memory cannot be allocated; [`VerbsError::Os`] from `ibv_reg_mr`: ENOMEM (the
    /// kernel's pin limit or no resources), EINVAL, EFAULT, EPERM.
    pub(crate) fn register(
        dev: &Arc<VerbsDevice>,
        pd: Pd,
        pd_ptr: *mut ibv_pd,
        len: usize,
        access: AccessFlags,
    ) -> Result<VerbsMr, VerbsError> {
        if len == 0 {
            return Err(VerbsError::InvalidArgument("a memory region of 0 bytes"));
        }
        if access.intersects(AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_ATOMIC)
            && !access.contains(AccessFlags::LOCAL_WRITE)
        {
            return Err(VerbsError::InvalidArgument(
                "remote write or atomic access needs local write (IBTA o10-31)",
            ));
        }
        let mem = MrMemory::new(len).map_err(|_| VerbsError::NoResources("memory for the MR"))?;
        let charge = PinBudget::process().charge(
            &format!("{}: memory registration (ibv_reg_mr)", dev.name()),
            pinned_span_bytes(mem.as_ptr() as usize, len),
            None,
        )?;
        // SAFETY: pd is live (the device's table); the memory outlives the registration
        // (dropped after ibv_dereg_mr in Drop).
        let mr = unsafe { ibv_reg_mr(pd_ptr, mem.as_ptr().cast(), len, access.bits() as i32) };
        if mr.is_null() {
            return Err(os_err("ibv_reg_mr"));
        }
        let out = VerbsMr {
            mr,
            pd,
            mem,
            dev: dev.clone(),
            charge: Some(charge),
        };
        dev.remember_mr(out.lkey(), mr);
        Ok(out)
    }
}

impl MemoryRegion for VerbsMr {
    fn lkey(&self) -> u32 {
        // SAFETY: live for self's lifetime.
        unsafe { (*self.mr).lkey }
    }
    fn rkey(&self) -> u32 {
        // SAFETY: live for self's lifetime.
        unsafe { (*self.mr).rkey }
    }
    fn addr(&self) -> u64 {
        self.mem.as_ptr() as u64
    }
    fn len(&self) -> usize {
        self.mem.len()
    }
    fn as_ptr(&self) -> *mut u8 {
        self.mem.as_ptr()
    }
    fn pd(&self) -> Pd {
        self.pd
    }
    /// The backing memory; registering it elsewhere too (io_uring fixed buffers) pins
    /// it, and must be charged, again.
    fn memory(&self) -> &Arc<MrMemory> {
        &self.mem
    }
}

impl Drop for VerbsMr {
    fn drop(&mut self) {
        self.dev.forget_mr(self.lkey());
        // SAFETY: registered by us, used by nobody after this; the memory and the
        // memlock charge are released after this (field drops).
        let rc = unsafe { ibv_dereg_mr(self.mr) };
        if rc != 0 {
            tracing::warn!(
                rc,
                lkey = self.lkey(),
                "ibv_dereg_mr failed; the memory stays pinned"
            );
            // Keep the memory alive, and counted: the device may still DMA into it.
            std::mem::forget(self.mem.clone());
            std::mem::forget(self.charge.take());
        }
    }
}
