//! Registrable memory: page-aligned allocations ([`MrMemory`]) and validated ranges of
//! them ([`MemRef`]) that the RC core reads and writes in place of an RNIC's DMA.
use std::alloc::{alloc_zeroed, dealloc, Layout};
use std::ptr::NonNull;
use std::sync::Arc;

/// Alignment of [`MrMemory`] allocations (one page).
pub const MR_ALIGN: usize = 4096;

/// A page-aligned, zero-initialised memory allocation that can be registered.
///
/// The bytes are shared with the hardware model: the RC core reads and writes them
/// through [`MemRef`]s while the application may also access them, exactly as an RNIC
/// DMAs into user memory. Freed when the last `Arc` (held by MRs and in-flight
/// [`MemRef`]s) is dropped.
pub struct MrMemory {
    ptr: NonNull<u8>,
    len: usize,
    /// Mapped with mmap(2) (large regions) rather than taken from the heap.
    mapped: bool,
}

/// Regions of at least this many bytes are anonymous mappings: their pages are zero
/// and become resident only when touched (a heap allocation aligned to a page is
/// zeroed by writing every byte, which makes all of it resident at once).
pub const MR_MMAP_THRESHOLD: usize = 64 << 10;

// SAFETY: the allocation is owned by this value; concurrent access to the bytes is the
// same contract as RDMA memory (the application orders its accesses with completions).
unsafe impl Send for MrMemory {}
// SAFETY: see above.
unsafe impl Sync for MrMemory {}

impl MrMemory {
    /// Allocates `len` zeroed bytes aligned to [`MR_ALIGN`]. `len` 0 allocates one byte
    /// (and reports length 0); from [`MR_MMAP_THRESHOLD`] bytes on the memory is an
    /// anonymous private mapping, resident only where touched. Errors: `OutOfMemory`,
    /// `InvalidInput` for absurd sizes, the OS error of mmap(2).
    pub fn new(len: usize) -> std::io::Result<Arc<MrMemory>> {
        if len >= MR_MMAP_THRESHOLD {
            // SAFETY: a fresh anonymous mapping; no existing memory is touched.
            let p = unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    len,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                    -1,
                    0,
                )
            };
            if p == libc::MAP_FAILED {
                return Err(std::io::Error::last_os_error());
            }
            let ptr = NonNull::new(p.cast::<u8>())
                .ok_or_else(|| std::io::Error::from(std::io::ErrorKind::OutOfMemory))?;
            return Ok(Arc::new(MrMemory {
                ptr,
                len,
                mapped: true,
            }));
        }
        let layout = Self::layout(len)?;
        // SAFETY: the layout has a non-zero size.
        let p = unsafe { alloc_zeroed(layout) };
        let ptr =
            NonNull::new(p).ok_or_else(|| std::io::Error::from(std::io::ErrorKind::OutOfMemory))?;
        Ok(Arc::new(MrMemory {
            ptr,
            len,
            mapped: false,
        }))
    }

    fn layout(len: usize) -> std::io::Result<Layout> {
        Layout::from_size_align(len.max(1), MR_ALIGN)
            .map_err(|_| std::io::Error::from(std::io::ErrorKind::InvalidInput))
    }

    /// Start of the allocation.
    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the allocation is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The I/O virtual address of the first byte: its virtual address, as ibverbs uses.
    pub fn addr(&self) -> u64 {
        self.ptr.as_ptr() as usize as u64
    }
}

impl Drop for MrMemory {
    fn drop(&mut self) {
        if self.mapped {
            // SAFETY: the mapping made in `new`, of this length, unmapped once.
            unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.len) };
            return;
        }
        if let Ok(layout) = Self::layout(self.len) {
            // SAFETY: allocated in `new` with this same layout.
            unsafe { dealloc(self.ptr.as_ptr(), layout) }
        }
    }
}

impl std::fmt::Debug for MrMemory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "MrMemory({:#x}, {} B)", self.addr(), self.len)
    }
}

/// A validated range of registered memory: `len` bytes at `offset` of an [`MrMemory`],
/// which it keeps alive. `MemRef::empty()` is the zero-length range with no memory.
#[derive(Clone, Default)]
pub struct MemRef {
    mem: Option<Arc<MrMemory>>,
    offset: usize,
    len: usize,
}

impl std::fmt::Debug for MemRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "MemRef({:#x}, {} B)", self.as_ptr() as usize, self.len)
    }
}

impl MemRef {
    /// `len` bytes at `offset` of `mem`; `None` if the range does not fit.
    pub fn new(mem: Arc<MrMemory>, offset: usize, len: usize) -> Option<MemRef> {
        let end = offset.checked_add(len)?;
        (end <= mem.len()).then_some(MemRef {
            mem: Some(mem),
            offset,
            len,
        })
    }

    /// The empty range.
    pub fn empty() -> MemRef {
        MemRef::default()
    }

    /// First byte (dangling but non-null for the empty range).
    pub fn as_ptr(&self) -> *mut u8 {
        match &self.mem {
            // SAFETY: offset <= mem.len() by construction.
            Some(m) => unsafe { m.as_ptr().add(self.offset) },
            None => NonNull::<u8>::dangling().as_ptr(),
        }
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the range is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The sub-range `[offset, offset + len)` of this range; `None` if out of bounds.
    pub fn sub(&self, offset: usize, len: usize) -> Option<MemRef> {
        let end = offset.checked_add(len)?;
        if end > self.len {
            return None;
        }
        if len == 0 {
            return Some(MemRef::empty());
        }
        Some(MemRef {
            mem: self.mem.clone(),
            offset: self.offset + offset,
            len,
        })
    }

    /// The bytes.
    ///
    /// # Safety
    /// The caller must ensure nothing writes the range while the slice lives (the RDMA
    /// contract: the application does not touch memory of an outstanding work request).
    pub unsafe fn as_slice(&self) -> &[u8] {
        // SAFETY: the range lies inside a live allocation (the Arc keeps it alive).
        unsafe { std::slice::from_raw_parts(self.as_ptr(), self.len) }
    }

    /// Copies `data` to `offset` of the range. Returns `false` (and writes nothing) if
    /// `offset + data.len()` exceeds the range.
    ///
    /// # Safety
    /// The caller must ensure no one else accesses these bytes concurrently (the RDMA
    /// contract, as for [`MemRef::as_slice`]).
    pub unsafe fn write_at(&self, offset: usize, data: &[u8]) -> bool {
        match offset.checked_add(data.len()) {
            Some(end) if end <= self.len => {
                if !data.is_empty() {
                    // SAFETY: bounds checked above; `data` cannot overlap registered
                    // memory mutably borrowed elsewhere by contract.
                    unsafe { std::ptr::copy(data.as_ptr(), self.as_ptr().add(offset), data.len()) }
                }
                true
            }
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_is_aligned_and_zeroed() {
        let m = MrMemory::new(10000).unwrap();
        assert_eq!(m.addr() % 4096, 0);
        let r = MemRef::new(m.clone(), 0, 10000).unwrap();
        assert!(unsafe { r.as_slice() }.iter().all(|&b| b == 0));
        assert!(unsafe { r.write_at(9998, &[1, 2]) });
        assert!(!unsafe { r.write_at(9999, &[1, 2]) });
        assert_eq!(unsafe { r.sub(9998, 2).unwrap().as_slice() }, &[1, 2]);
        assert!(r.sub(9999, 2).is_none());
    }
}
