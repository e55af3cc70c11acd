//! Memory regions: memory this provider allocates (page aligned, zeroed:
//! [`MrMemory`]) registered with `ibv_reg_mr`, after the pinned bytes were charged to
//! the process's `RLIMIT_MEMLOCK` budget (see `memlock`). Unregistered with
//! `ibv_dereg_mr` when dropped.
use std::sync::Arc;

use rdma_sys::{ibv_dereg_mr, ibv_mr, ibv_pd, ibv_reg_mr};

use super::device::VerbsDevice;
use super::memlock::{self, MemlockCharge};
use super::sys::os_err;
use crate::rc::MrMemory;
use crate::verbs::{AccessFlags, Pd, VerbsError};

/// A registered memory region (`struct ibv_mr`) over memory it owns. Its address range
/// `[addr(), addr() + len())` is the iova SGEs and RETHs use (the virtual address).
pub struct VerbsMr {
    mr: *mut ibv_mr,
    pd: Pd,
    mem: Arc<MrMemory>,
    dev: Arc<VerbsDevice>,
    _charge: MemlockCharge,
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
    /// without local write (IBTA o10-31); [`VerbsError::MemlockExceeded`] when the
    /// pinned total would pass `RLIMIT_MEMLOCK`; [`VerbsError::NoResources`] when the
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
        let charge = memlock::charge(len)?;
        let mem = MrMemory::new(len).map_err(|_| VerbsError::NoResources("memory for the MR"))?;
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
            _charge: charge,
        };
        dev.remember_mr(out.lkey(), mr);
        Ok(out)
    }

    /// Local key.
    pub fn lkey(&self) -> u32 {
        // SAFETY: live for self's lifetime.
        unsafe { (*self.mr).lkey }
    }
    /// Remote key (meaningful only with a remote access flag).
    pub fn rkey(&self) -> u32 {
        // SAFETY: live for self's lifetime.
        unsafe { (*self.mr).rkey }
    }
    /// First byte's iova (= its virtual address in this process).
    pub fn addr(&self) -> u64 {
        self.mem.as_ptr() as u64
    }
    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.mem.len()
    }
    /// Whether the region is empty (never: registration refuses 0 bytes).
    pub fn is_empty(&self) -> bool {
        self.mem.is_empty()
    }
    /// Pointer to the first byte.
    pub fn as_ptr(&self) -> *mut u8 {
        self.mem.as_ptr()
    }
    /// The PD the region is registered in.
    pub fn pd(&self) -> Pd {
        self.pd
    }
    /// The backing memory (to register it elsewhere, e.g. as io_uring fixed buffers,
    /// which pins, and must be charged, again).
    pub fn memory(&self) -> &Arc<MrMemory> {
        &self.mem
    }
    /// Copies `data` into the region at `offset`. Panics if out of range (a caller bug).
    pub fn write(&self, offset: usize, data: &[u8]) {
        assert!(
            offset
                .checked_add(data.len())
                .is_some_and(|e| e <= self.len()),
            "VerbsMr::write out of range"
        );
        // SAFETY: in range; concurrent DMA to the same bytes is the RDMA programming
        // model's race, ordered by completions.
        unsafe {
            std::ptr::copy_nonoverlapping(data.as_ptr(), self.mem.as_ptr().add(offset), data.len())
        }
    }
    /// Copies bytes at `offset` into `out`. Panics if out of range (a caller bug).
    pub fn read(&self, offset: usize, out: &mut [u8]) {
        assert!(
            offset
                .checked_add(out.len())
                .is_some_and(|e| e <= self.len()),
            "VerbsMr::read out of range"
        );
        // SAFETY: as in `write`.
        unsafe {
            std::ptr::copy_nonoverlapping(
                self.mem.as_ptr().add(offset),
                out.as_mut_ptr(),
                out.len(),
            )
        }
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
            // Keep the memory alive: the device may still DMA into it.
            std::mem::forget(self.mem.clone());
        }
    }
}
