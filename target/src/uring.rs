//! One poll group's io_uring ring: fixed buffers, fixed files, bounded in-flight work.
//!
//! A [`Ring`] belongs to one poll group thread (DESIGN principle 2): no locks, no
//! SQPOLL (it costs a core; this host has two). The data slab is registered as fixed
//! buffer(s), so reads land directly in the same memory the transport sends from
//! (DESIGN principle 3), and namespace files are registered as fixed files. Memory that
//! `RLIMIT_MEMLOCK` leaves no room to register is used as plain buffers
//! ([`Ring::add_plain_buffers`]): the same buffer indices, plain `READ`/`WRITE` SQEs.
//!
//! # Back-pressure
//! The ring has one *slot* per submission queue entry. A queued operation holds its
//! slot until its final completion is delivered by [`Ring::poll_completions`], so the
//! queueing functions return `Err(`[`RingFull`]`)` when every slot is taken, whether the
//! entries wait in the SQ or are in flight in the kernel. The caller keeps the request
//! queued in its own state and tries again after draining completions: back-pressure is
//! a state, not a retry loop. Because at most one SQE and one CQE exist per slot, the SQ
//! never overflows and the CQ (twice the SQ) never overflows either.
//!
//! # Short transfers
//! A read or write may complete with fewer bytes than asked (a read that meets end of
//! file, or a transfer cut short by the kernel). The ring handles this inside:
//! [`Ring::poll_completions`] requeues the remainder (same slot, advanced pointer and
//! offset) and reports one completion per operation, whose `res` is the total number of
//! bytes moved. A read reaching end of file therefore completes with `res < len` (0 when
//! it starts at or past the end); the caller decides what that means (for a namespace,
//! the LBA range check makes it an internal error or a zero fill). Requeued remainders
//! wait in the SQ until the next [`Ring::submit`].
//!
//! # Write Zeroes and Deallocate
//! NVM Command Set 1.x Deallocate (Dataset Management, AD bit) maps to
//! `fallocate(FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE)` ([`FALLOC_DEALLOCATE`]) and
//! Write Zeroes to `fallocate(FALLOC_FL_ZERO_RANGE | FALLOC_FL_KEEP_SIZE)`
//! ([`FALLOC_WRITE_ZEROES`]); ext4 and xfs support both. Where the file system refuses
//! (`res == -EOPNOTSUPP`), the fallback for Write Zeroes is: punch a hole (the range then
//! reads as zeroes; a Write Zeroes with DEAC=1 may stop there), then, when the blocks
//! must stay allocated (DEAC=0), `fallocate` mode 0 over the range; if punching holes is
//! refused as well, write the range from a zero-filled fixed buffer with
//! [`Ring::write_fixed`]. For Deallocate, a refusal may simply be reported as success:
//! deallocation is advisory (NVM Command Set 1.x §3.2.3.2.1).

use std::io;
use std::os::fd::RawFd;

use io_uring::{opcode, squeue, types, EnterFlags, IoUring};

/// `fallocate` mode for NVMe Deallocate: `FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE`.
pub const FALLOC_DEALLOCATE: i32 = libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE;
/// `fallocate` mode for NVMe Write Zeroes: `FALLOC_FL_ZERO_RANGE | FALLOC_FL_KEEP_SIZE`.
pub const FALLOC_WRITE_ZEROES: i32 = libc::FALLOC_FL_ZERO_RANGE | libc::FALLOC_FL_KEEP_SIZE;
/// Largest fixed buffer the kernel accepts: 1 GiB per registered region.
pub const MAX_FIXED_BUFFER_LEN: usize = 1 << 30;
/// Most fixed buffers the kernel accepts in one registration (IORING_MAX_REG_BUFFERS).
pub const MAX_FIXED_BUFFERS: usize = 1 << 14;

/// Every slot of the ring is taken (queued or in flight): the operation was not queued.
/// Drain completions with [`Ring::poll_completions`] and try again.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("io_uring ring full: every submission slot is queued or in flight")]
pub struct RingFull;

/// Counters of a [`Ring`], since its creation.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RingStats {
    /// Operations accepted by the queueing functions.
    pub queued: u64,
    /// SQEs the kernel consumed (sum of `io_uring_enter` results), resubmissions included.
    pub submitted: u64,
    /// Operations whose final completion was delivered to the caller.
    pub completed: u64,
    /// CQEs of reads or writes that moved fewer bytes than asked (end of file included).
    pub short: u64,
    /// Remainders of short transfers requeued by [`Ring::poll_completions`].
    pub resubmitted: u64,
    /// Operations delivered with a negative result (`-errno`).
    pub failed: u64,
}

/// Setup flags a [`Ring`] ended up with, after falling back on older kernels.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RingFeatures {
    /// `IORING_SETUP_SINGLE_ISSUER` (Linux 6.0): only one thread submits.
    pub single_issuer: bool,
    /// `IORING_SETUP_COOP_TASKRUN | IORING_SETUP_TASKRUN_FLAG` (Linux 5.19): no
    /// interrupting task work; the ring flags pending work and polling enters the kernel.
    pub coop_taskrun: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    Idle,
    Read,
    Write,
    Fsync,
    Fallocate,
}

/// What one slot holds: the caller's operation and its progress.
#[derive(Debug, Clone, Copy)]
struct Slot {
    op: Op,
    user_data: u64,
    file_index: u32,
    buf_index: u16,
    /// Reads and writes: `buf_index` is a registered (fixed) buffer, so the SQE is
    /// `READ_FIXED`/`WRITE_FIXED`; otherwise a plain `READ`/`WRITE` (a plain buffer, see
    /// [`Ring::add_plain_buffers`]).
    fixed: bool,
    /// Buffer address (reads and writes) as an integer, so the ring stays `Send`.
    addr: usize,
    /// Bytes asked for (reads, writes, fsync range unused), or fallocate mode.
    len: u32,
    offset: u64,
    /// `RWF_*` flags for reads and writes; fsync flags; unused for fallocate.
    flags: i32,
    /// fallocate length in bytes.
    falloc_len: u64,
    /// Bytes already moved by earlier CQEs of this operation.
    done: u32,
}

const IDLE: Slot = Slot {
    op: Op::Idle,
    user_data: 0,
    file_index: 0,
    buf_index: 0,
    fixed: false,
    addr: 0,
    len: 0,
    offset: 0,
    flags: 0,
    falloc_len: 0,
    done: 0,
};

impl Slot {
    /// The SQE for this slot's operation, from its current progress; the kernel's
    /// user_data is the slot index.
    fn sqe(&self, index: usize) -> squeue::Entry {
        let fd = types::Fixed(self.file_index);
        let done = self.done;
        let (addr, len, offset) = (
            self.addr + done as usize,
            self.len - done,
            self.offset + u64::from(done),
        );
        let entry = match self.op {
            Op::Read if self.fixed => {
                opcode::ReadFixed::new(fd, addr as *mut u8, len, self.buf_index)
                    .offset(offset)
                    .rw_flags(self.flags)
                    .build()
            }
            Op::Read => opcode::Read::new(fd, addr as *mut u8, len)
                .offset(offset)
                .rw_flags(self.flags)
                .build(),
            Op::Write if self.fixed => {
                opcode::WriteFixed::new(fd, addr as *const u8, len, self.buf_index)
                    .offset(offset)
                    .rw_flags(self.flags)
                    .build()
            }
            Op::Write => opcode::Write::new(fd, addr as *const u8, len)
                .offset(offset)
                .rw_flags(self.flags)
                .build(),
            Op::Fsync => opcode::Fsync::new(fd)
                .flags(types::FsyncFlags::from_bits_truncate(self.flags as u32))
                .build(),
            Op::Fallocate => opcode::Fallocate::new(fd, self.falloc_len)
                .offset(self.offset)
                .mode(self.len as i32)
                .build(),
            Op::Idle => opcode::Nop::new().build(),
        };
        entry.user_data(index as u64)
    }
}

/// An io_uring instance for one poll group, with fixed buffers and files and a bounded
/// number of operations in flight (see the module docs for back-pressure and short
/// transfers).
///
/// With `IORING_SETUP_SINGLE_ISSUER` (used when the kernel offers it) the ring is created
/// disabled and enabled by the first [`Ring::submit`]: the thread that submits first is
/// its only issuer from then on. Build and register on any thread, then move the ring to
/// its poll group thread before submitting.
pub struct Ring {
    ring: IoUring,
    slots: Box<[Slot]>,
    free_slots: Vec<u32>,
    stats: RingStats,
    features: RingFeatures,
    /// Created with IORING_SETUP_R_DISABLED and not enabled yet.
    disabled: bool,
    /// Buffers `0..buffers_registered` are registered with the kernel (fixed).
    buffers_registered: usize,
    /// Buffers `buffers_registered..` are plain memory (address, length), read and
    /// written with plain `READ`/`WRITE` SQEs ([`Ring::add_plain_buffers`]).
    plain_buffers: Vec<(usize, usize)>,
    files_registered: usize,
}

impl std::fmt::Debug for Ring {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ring")
            .field("capacity", &self.capacity())
            .field("in_flight", &self.in_flight())
            .field("features", &self.features)
            .field("stats", &self.stats)
            .finish()
    }
}

fn is_einval(e: &io::Error) -> bool {
    e.raw_os_error() == Some(libc::EINVAL)
}

impl Ring {
    /// Creates a ring of `entries` submission queue entries (rounded up to a power of
    /// two by the kernel; 1 to 32768) and a completion queue twice that size. That is
    /// also the most operations queued or in flight at once.
    ///
    /// Tries `SINGLE_ISSUER | R_DISABLED | COOP_TASKRUN | TASKRUN_FLAG`, then
    /// `COOP_TASKRUN | TASKRUN_FLAG`, then no flags, falling back when the kernel answers
    /// `EINVAL`. Never SQPOLL.
    ///
    /// # Errors
    /// The `io_uring_setup(2)` error: `EINVAL` for a bad `entries`, `ENOMEM`, `EPERM`
    /// (io_uring disabled by `kernel.io_uring_disabled`), `ENOSYS`.
    pub fn new(entries: u32) -> io::Result<Ring> {
        let attempt = |single: bool, coop: bool| {
            let mut b = IoUring::builder();
            if single {
                b.setup_single_issuer().setup_r_disabled();
            }
            if coop {
                b.setup_coop_taskrun().setup_taskrun_flag();
            }
            b.build(entries)
        };
        let (ring, single_issuer, coop_taskrun) = match attempt(true, true) {
            Ok(r) => (r, true, true),
            Err(e) if is_einval(&e) && entries > 0 => match attempt(false, true) {
                Ok(r) => (r, false, true),
                Err(e) if is_einval(&e) => (attempt(false, false)?, false, false),
                Err(e) => return Err(e),
            },
            Err(e) => return Err(e),
        };
        let capacity = ring.params().sq_entries() as usize;
        tracing::debug!(
            capacity,
            single_issuer,
            coop_taskrun,
            "io_uring ring created"
        );
        Ok(Ring {
            ring,
            slots: vec![IDLE; capacity].into_boxed_slice(),
            free_slots: (0..capacity as u32).rev().collect(),
            stats: RingStats::default(),
            features: RingFeatures {
                single_issuer,
                coop_taskrun,
            },
            disabled: single_issuer,
            buffers_registered: 0,
            plain_buffers: Vec::new(),
            files_registered: 0,
        })
    }

    /// Registers `regions` as fixed buffers `0..regions.len()` (`buf_index` in
    /// [`Ring::read_fixed`] and [`Ring::write_fixed`]). One region may be the whole data
    /// slab, up to [`MAX_FIXED_BUFFER_LEN`] (1 GiB). The kernel pins the pages and
    /// checks every fixed read or write against its region, so an operation cannot touch
    /// memory outside them.
    ///
    /// # Errors
    /// `InvalidInput` for no regions, more than [`MAX_FIXED_BUFFERS`], an empty or
    /// over-1-GiB region, or a null address, or when plain buffers were added already
    /// (they follow the fixed ones); `EBUSY` when buffers are already registered;
    /// `ENOMEM` when the pinned memory exceeds `RLIMIT_MEMLOCK` (without
    /// `CAP_IPC_LOCK`); other `io_uring_register(2)` errors.
    ///
    /// # Safety
    /// Each region must be valid, writable memory that stays mapped until the buffers
    /// are unregistered or the ring is dropped and no operation naming it is in flight.
    /// While an operation naming part of a region is queued or in flight, the kernel may
    /// read or write those bytes at any time: the caller must hold no Rust reference to
    /// them (use raw pointers, as [`crate::buffers::BufferPool`] hands out).
    pub unsafe fn register_buffers(&mut self, regions: &[(*mut u8, usize)]) -> io::Result<()> {
        let invalid = |what: &str| {
            Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                what.to_string(),
            ))
        };
        if regions.is_empty() || regions.len() > MAX_FIXED_BUFFERS {
            return invalid("fixed buffers: between 1 and 16384 regions");
        }
        if !self.plain_buffers.is_empty() {
            return invalid("fixed buffers: register them before adding plain buffers");
        }
        let mut iovecs = Vec::with_capacity(regions.len());
        for &(base, len) in regions {
            if base.is_null() || len == 0 || len > MAX_FIXED_BUFFER_LEN {
                return invalid("fixed buffer region: non-null, 1 byte to 1 GiB");
            }
            iovecs.push(libc::iovec {
                iov_base: base.cast(),
                iov_len: len,
            });
        }
        // SAFETY: the caller guarantees the regions' validity (see above).
        unsafe { self.ring.submitter().register_buffers(&iovecs)? };
        self.buffers_registered = regions.len();
        Ok(())
    }

    /// Adds `regions` as plain buffers: buffer indices
    /// `buffers_registered()..buffers_registered() + regions.len()` in
    /// [`Ring::read_fixed`] and [`Ring::write_fixed`], in order, after the registered
    /// ones. Nothing is pinned: the kernel looks the pages up for each operation (plain
    /// `IORING_OP_READ`/`IORING_OP_WRITE`), which costs a little per I/O and nothing
    /// against `RLIMIT_MEMLOCK`. This is the fallback for memory the limit leaves no
    /// room to register (see `crate::memory`). As the kernel does for a fixed buffer,
    /// the ring checks each operation against its region and fails one that leaves it
    /// with `-EFAULT`.
    ///
    /// # Errors
    /// `InvalidInput` for an empty region or a null address, or more than
    /// [`MAX_FIXED_BUFFERS`] buffers in all.
    ///
    /// # Safety
    /// As [`Ring::register_buffers`]: each region must be valid, writable memory that
    /// stays mapped while the ring lives, with no Rust reference held to bytes that an
    /// operation in flight names.
    pub unsafe fn add_plain_buffers(&mut self, regions: &[(*mut u8, usize)]) -> io::Result<()> {
        if self.buffers_registered + self.plain_buffers.len() + regions.len() > MAX_FIXED_BUFFERS
            || regions
                .iter()
                .any(|&(base, len)| base.is_null() || len == 0)
        {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "plain buffers: non-null, non-empty regions, at most 16384 buffers in all",
            ));
        }
        self.plain_buffers
            .extend(regions.iter().map(|&(base, len)| (base as usize, len)));
        Ok(())
    }

    /// Registers `fds` as fixed files `0..fds.len()` (`file_index` in the queueing
    /// functions). The ring holds its own references: closing an fd afterwards does not
    /// affect the registered file.
    ///
    /// # Errors
    /// `EBUSY` when files are already registered, `EBADF` for a bad fd, `EMFILE` over
    /// `RLIMIT_NOFILE`, other `io_uring_register(2)` errors.
    pub fn register_files(&mut self, fds: &[RawFd]) -> io::Result<()> {
        self.ring.submitter().register_files(fds)?;
        self.files_registered = fds.len();
        Ok(())
    }

    /// Registers a table of `slots` fixed files, `fds` in slots `0..fds.len()` and the
    /// rest empty, for namespaces opened later ([`Ring::update_file`]; Linux 5.19's
    /// `IORING_RSRC_REGISTER_SPARSE`).
    ///
    /// # Errors
    /// As [`Ring::register_files`]; `EINVAL` when `fds` are more than `slots`.
    pub fn register_file_table(&mut self, slots: u32, fds: &[RawFd]) -> io::Result<()> {
        if fds.len() > slots as usize {
            return Err(io::Error::from_raw_os_error(libc::EINVAL));
        }
        match self.ring.submitter().register_files_sparse(slots) {
            Ok(()) => {
                self.files_registered = slots as usize;
                if !fds.is_empty() {
                    self.ring.submitter().register_files_update(0, fds)?;
                }
                Ok(())
            }
            // Before Linux 5.19: the start's files only; a reload cannot add one
            // ([`Ring::update_file`] fails and the reload says so).
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
                tracing::warn!(
                    "io_uring has no sparse file tables here (Linux 5.19+): namespaces \
                     cannot be added by a reload"
                );
                if !fds.is_empty() {
                    self.register_files(fds)?;
                }
                Ok(())
            }
            Err(e) => Err(e),
        }
    }

    /// Puts `fd` in fixed-file slot `index` of the table ([`Ring::register_file_table`]),
    /// or empties the slot with `fd` -1. Operations already submitted on the slot keep
    /// the file they had; later ones on an empty slot fail with `EBADF`.
    ///
    /// # Errors
    /// `EINVAL` for a slot beyond the table, `EBADF` for a bad fd, other
    /// `io_uring_register(2)` errors.
    pub fn update_file(&mut self, index: u32, fd: RawFd) -> io::Result<()> {
        self.ring.submitter().register_files_update(index, &[fd])?;
        Ok(())
    }

    /// Unregisters the fixed buffers, and forgets the plain ones (their indices followed
    /// the fixed ones). Operations still in flight keep their pages.
    ///
    /// # Errors
    /// `ENXIO` when none are registered.
    pub fn unregister_buffers(&mut self) -> io::Result<()> {
        self.plain_buffers.clear();
        self.ring.submitter().unregister_buffers()?;
        self.buffers_registered = 0;
        Ok(())
    }

    /// Unregisters the fixed files.
    ///
    /// # Errors
    /// `ENXIO` when none are registered.
    pub fn unregister_files(&mut self) -> io::Result<()> {
        self.ring.submitter().unregister_files()?;
        self.files_registered = 0;
        Ok(())
    }

    /// Queues a read of `len` bytes at byte `offset` of fixed file `file_index` into
    /// `ptr`, which must lie, with `len`, inside buffer `buf_index`, registered or plain
    /// (the kernel, or for a plain buffer the ring, checks, and fails the operation with
    /// `-EFAULT` otherwise).
    ///
    /// The completion's `res` is the number of bytes read (less than `len` at end of
    /// file, see the module docs) or `-errno`.
    ///
    /// # Errors
    /// [`RingFull`] when every slot is taken; nothing was queued.
    pub fn read_fixed(
        &mut self,
        file_index: u32,
        buf_index: u16,
        ptr: *mut u8,
        len: u32,
        offset: u64,
        user_data: u64,
    ) -> Result<(), RingFull> {
        self.queue(Slot {
            op: Op::Read,
            user_data,
            file_index,
            buf_index,
            addr: ptr as usize,
            len,
            offset,
            ..IDLE
        })
    }

    /// Queues a write of `len` bytes from `ptr` (inside fixed buffer `buf_index`) at
    /// byte `offset` of fixed file `file_index`. `dsync` sets `RWF_DSYNC`, making this
    /// one write durable before it completes (NVMe Force Unit Access, NVM Command Set
    /// 1.x §3.3.6).
    ///
    /// The completion's `res` is the number of bytes written (`len` unless the file
    /// system stopped early, e.g. `ENOSPC` after a partial write) or `-errno`.
    ///
    /// # Errors
    /// [`RingFull`] when every slot is taken; nothing was queued.
    #[allow(clippy::too_many_arguments)]
    pub fn write_fixed(
        &mut self,
        file_index: u32,
        buf_index: u16,
        ptr: *const u8,
        len: u32,
        offset: u64,
        dsync: bool,
        user_data: u64,
    ) -> Result<(), RingFull> {
        self.queue(Slot {
            op: Op::Write,
            user_data,
            file_index,
            buf_index,
            addr: ptr as usize,
            len,
            offset,
            flags: if dsync { libc::RWF_DSYNC } else { 0 },
            ..IDLE
        })
    }

    /// Queues an `fsync` (or `fdatasync` when `datasync`) of fixed file `file_index`:
    /// NVMe Flush (NVM Command Set 1.x §3.3.2). `res` is 0 or `-errno`.
    ///
    /// # Errors
    /// [`RingFull`] when every slot is taken; nothing was queued.
    pub fn fsync(
        &mut self,
        file_index: u32,
        datasync: bool,
        user_data: u64,
    ) -> Result<(), RingFull> {
        let flags = if datasync {
            types::FsyncFlags::DATASYNC.bits() as i32
        } else {
            0
        };
        self.queue(Slot {
            op: Op::Fsync,
            user_data,
            file_index,
            flags,
            ..IDLE
        })
    }

    /// Queues `fallocate(mode, offset, len)` on fixed file `file_index`, with `offset`
    /// and `len` in bytes. Use [`FALLOC_DEALLOCATE`] for Deallocate and
    /// [`FALLOC_WRITE_ZEROES`] for Write Zeroes (fallbacks in the module docs). `res` is 0
    /// or `-errno` (`-EOPNOTSUPP` when the file system lacks the mode).
    ///
    /// # Errors
    /// [`RingFull`] when every slot is taken; nothing was queued.
    pub fn fallocate(
        &mut self,
        file_index: u32,
        mode: i32,
        offset: u64,
        len: u64,
        user_data: u64,
    ) -> Result<(), RingFull> {
        self.queue(Slot {
            op: Op::Fallocate,
            user_data,
            file_index,
            len: mode as u32,
            offset,
            falloc_len: len,
            ..IDLE
        })
    }

    /// Hands the queued SQEs to the kernel without waiting (`io_uring_enter` with no
    /// minimum completion count); skips the system call when nothing is queued and no
    /// task work is pending. Returns the number of SQEs the kernel took. Buffered reads
    /// of cached pages usually complete during this call.
    ///
    /// `EINTR`, `EAGAIN` and `EBUSY` are answered `Ok(0)`: the SQEs stay queued and the
    /// next call submits them.
    ///
    /// # Errors
    /// Other `io_uring_enter(2)` errors; `EEXIST` when a single-issuer ring is used
    /// from a second thread.
    pub fn submit(&mut self) -> io::Result<usize> {
        let pending = self.ring.submission().len();
        if pending == 0 && !self.ring.submission().taskrun() {
            return Ok(0);
        }
        self.enter(0)
    }

    /// Like [`Ring::submit`], then blocks until at least `n` CQEs are ready (`n` is
    /// capped at the number of operations in flight, so it cannot wait forever on an
    /// idle ring). A short transfer's requeue needs a further CQE, so `n` counts CQEs,
    /// not operations.
    ///
    /// # Errors
    /// As [`Ring::submit`].
    pub fn submit_and_wait(&mut self, n: usize) -> io::Result<usize> {
        let want = n.min(self.in_flight());
        self.enter(want)
    }

    fn enter(&mut self, want: usize) -> io::Result<usize> {
        if self.disabled {
            self.ring.submitter().register_enable_rings()?;
            self.disabled = false;
        }
        match self.ring.submitter().submit_and_wait(want) {
            Ok(n) => {
                self.stats.submitted += n as u64;
                Ok(n)
            }
            Err(e)
                if matches!(
                    e.raw_os_error(),
                    Some(libc::EINTR) | Some(libc::EAGAIN) | Some(libc::EBUSY)
                ) =>
            {
                Ok(0)
            }
            Err(e) => Err(e),
        }
    }

    /// Drains the completion queue without blocking, calling `f(user_data, res)` once
    /// per finished operation, and returns how many were delivered. `res` is the total
    /// byte count for reads and writes, 0 for fsync and fallocate, or `-errno`.
    ///
    /// A short read or write with progress is requeued for its remainder (its slot stays
    /// taken) rather than delivered; call [`Ring::submit`] afterwards to send the
    /// requeued SQEs. With `COOP_TASKRUN`, pending task work (completions of work the
    /// kernel ran asynchronously, such as fsync and fallocate) is first run by a
    /// non-blocking `io_uring_enter`.
    pub fn poll_completions(&mut self, mut f: impl FnMut(u64, i32)) -> usize {
        if !self.disabled && self.ring.submission().taskrun() {
            // SAFETY: no SQEs, no wait, no argument: only runs pending task work. An
            // error here (EINTR) just leaves the work for the next poll.
            let _ = unsafe {
                self.ring.submitter().enter::<libc::sigset_t>(
                    0,
                    0,
                    EnterFlags::GETEVENTS.bits(),
                    None,
                )
            };
        }
        let (_, mut sq, cq) = self.ring.split();
        let mut delivered = 0;
        for cqe in cq {
            let index = cqe.user_data() as usize;
            let res = cqe.result();
            let Some(slot) = self.slots.get_mut(index) else {
                tracing::warn!(index, res, "io_uring completion for an unknown slot");
                continue;
            };
            let result = match slot.op {
                Op::Idle => {
                    tracing::warn!(index, res, "io_uring completion for an idle slot");
                    continue;
                }
                Op::Read | Op::Write if res >= 0 => {
                    let moved = res as u32;
                    let remaining = slot.len - slot.done;
                    if moved < remaining {
                        self.stats.short += 1;
                    }
                    slot.done += moved.min(remaining);
                    if moved > 0 && moved < remaining {
                        // SAFETY: same fixed buffer as the original SQE, advanced within
                        // the range the caller gave; the kernel checks it again.
                        if unsafe { sq.push(&slot.sqe(index)) }.is_ok() {
                            self.stats.resubmitted += 1;
                            continue;
                        }
                    }
                    i32::try_from(slot.done).unwrap_or(i32::MAX)
                }
                _ => res,
            };
            let user_data = slot.user_data;
            *slot = IDLE;
            self.free_slots.push(index as u32);
            self.stats.completed += 1;
            if result < 0 {
                self.stats.failed += 1;
            }
            delivered += 1;
            f(user_data, result);
        }
        delivered
    }

    fn queue(&mut self, mut slot: Slot) -> Result<(), RingFull> {
        let Some(index) = self.free_slots.pop() else {
            return Err(RingFull);
        };
        let index = index as usize;
        if matches!(slot.op, Op::Read | Op::Write) {
            let buf = usize::from(slot.buf_index);
            slot.fixed = buf < self.buffers_registered;
            if !slot.fixed {
                let inside = self
                    .plain_buffers
                    .get(buf - self.buffers_registered)
                    .is_some_and(|&(base, len)| {
                        slot.addr >= base && slot.addr + slot.len as usize <= base + len
                    });
                if !inside {
                    // Outside its buffer, or no such buffer: a null address makes the
                    // kernel fail it with -EFAULT, as it fails a fixed one.
                    slot.addr = 0;
                }
            }
        }
        self.slots[index] = slot;
        let sqe = slot.sqe(index);
        // SAFETY: buffers named by the SQE are fixed buffers, checked by the kernel
        // against the regions registered under `register_buffers`' contract, or plain
        // buffers checked above against the regions of `add_plain_buffers`' contract;
        // fsync and fallocate carry no memory.
        if unsafe { self.ring.submission().push(&sqe) }.is_err() {
            // Cannot happen (one SQ entry per slot); keep the state consistent anyway.
            self.slots[index] = IDLE;
            self.free_slots.push(index as u32);
            return Err(RingFull);
        }
        self.stats.queued += 1;
        Ok(())
    }

    /// Most operations queued or in flight at once (the SQ size).
    pub fn capacity(&self) -> usize {
        self.slots.len()
    }

    /// Operations queued or in flight now (slots taken).
    pub fn in_flight(&self) -> usize {
        self.slots.len() - self.free_slots.len()
    }

    /// SQEs queued and not yet handed to the kernel.
    pub fn pending_submissions(&mut self) -> usize {
        self.ring.submission().len()
    }

    /// Number of fixed buffers registered.
    pub fn buffers_registered(&self) -> usize {
        self.buffers_registered
    }

    /// Number of plain (unregistered) buffers, after the registered ones.
    pub fn plain_buffers(&self) -> usize {
        self.plain_buffers.len()
    }

    /// Number of fixed files registered.
    pub fn files_registered(&self) -> usize {
        self.files_registered
    }

    /// Counters since creation.
    pub fn stats(&self) -> RingStats {
        self.stats
    }

    /// Setup flags in use.
    pub fn features(&self) -> RingFeatures {
        self.features
    }
}

impl Drop for Ring {
    /// Unregisters the fixed buffers and files before the ring closes: a closed ring
    /// gives its pinned pages and its files back only when the kernel's teardown work
    /// runs, later. The process's pinned-memory budget is released right after this,
    /// and a block device opened with `O_EXCL` must be free for the next opener (a
    /// restarted target). The unregistration waits for operations still using them.
    fn drop(&mut self) {
        if self.buffers_registered > 0 {
            let _ = self.unregister_buffers();
        }
        if self.files_registered > 0 {
            let _ = self.unregister_files();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::buffers::Slab;
    use std::io::{Read, Seek, SeekFrom, Write};
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::MetadataExt;

    const SLAB: usize = 4 << 20;

    /// A temporary file on the ext4 temp dir (never /dev/shm), with `len` bytes of a
    /// known pattern.
    fn temp_file(len: usize) -> tempfile::NamedTempFile {
        let mut f = tempfile::NamedTempFile::new_in(std::env::temp_dir()).unwrap();
        let data: Vec<u8> = (0..len).map(|i| (i % 251) as u8 ^ 0x5A).collect();
        f.write_all(&data).unwrap();
        f.flush().unwrap();
        f
    }

    fn pattern(len: usize, seed: u8) -> Vec<u8> {
        (0..len)
            .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
            .collect()
    }

    /// Tests that register fixed buffers run one at a time and charge the process's
    /// pinned-memory budget: under a user's 8 MiB RLIMIT_MEMLOCK the slabs of parallel
    /// tests would not fit.
    static PINNING: std::sync::Mutex<()> = std::sync::Mutex::new(());

    /// Held while a test's ring has its buffers registered (bind it first, so it is
    /// dropped after the ring, which unpins on drop).
    struct Pinned {
        _charge: transport::memlock::PinCharge<'static>,
        _serial: std::sync::MutexGuard<'static, ()>,
    }

    /// A ring with one slab as fixed buffer 0 and `file` as fixed file 0.
    fn setup(file: &std::fs::File, entries: u32) -> (Pinned, Ring, Slab) {
        let serial = PINNING.lock().unwrap_or_else(|e| e.into_inner());
        let slab = Slab::new(SLAB).unwrap();
        let mut ring = Ring::new(entries).unwrap();
        let ((), charge) = transport::memlock::PinBudget::process()
            .pin_with("test slab", SLAB as u64, None, || {
                // SAFETY: the pages stay pinned by the kernel while registered; the
                // slab is unmapped only after the test's operations completed.
                unsafe { ring.register_buffers(&[(slab.as_ptr(), slab.len())]) }
            })
            .unwrap();
        ring.register_files(&[file.as_raw_fd()]).unwrap();
        let pinned = Pinned {
            _charge: charge,
            _serial: serial,
        };
        (pinned, ring, slab)
    }

    #[test]
    fn drop_unpins_at_once() {
        let file = temp_file(4096);
        // Measured while holding the serial lock: no other test pins meanwhile.
        let (pinned, ring, slab) = setup(file.as_file(), 4);
        let during = transport::memlock::vm_pin_bytes().unwrap();
        drop(ring);
        let after = transport::memlock::vm_pin_bytes().unwrap();
        assert_eq!(during - after, SLAB as u64, "VmPin {during} -> {after}");
        drop((pinned, slab));
    }

    /// Submits and polls until `n` operations completed; returns them in order.
    fn complete(ring: &mut Ring, n: usize) -> Vec<(u64, i32)> {
        let mut out = Vec::new();
        for _ in 0..10_000 {
            ring.submit_and_wait(1).unwrap();
            ring.poll_completions(|ud, res| out.push((ud, res)));
            if out.len() >= n {
                return out;
            }
        }
        panic!("only {} of {n} completions arrived", out.len());
    }

    fn slab_bytes(slab: &Slab, off: usize, len: usize) -> Vec<u8> {
        // SAFETY: within the slab; no operation is in flight when tests read it.
        unsafe { std::slice::from_raw_parts(slab.as_ptr().add(off), len).to_vec() }
    }

    fn slab_fill(slab: &Slab, off: usize, data: &[u8]) {
        // SAFETY: within the slab; no operation is in flight when tests write it.
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), slab.as_ptr().add(off), data.len()) }
    }

    #[test]
    fn creates_with_features_and_capacity() {
        let ring = Ring::new(8).unwrap();
        assert_eq!(ring.capacity(), 8);
        assert_eq!(ring.in_flight(), 0);
        // Linux 6.x here: both flags are expected; older kernels fall back.
        let f = ring.features();
        eprintln!("ring features: {f:?}");
        assert!(Ring::new(0).is_err());
    }

    /// The fallback when RLIMIT_MEMLOCK leaves no room: the slab as a plain buffer after
    /// a registered one, same calls, nothing pinned for it; an operation outside its
    /// region fails with -EFAULT as a fixed one would.
    #[test]
    fn plain_buffers_read_and_write_without_pinning() {
        let file = temp_file(0);
        let (_pinned, mut ring, fixed) = setup(file.as_file(), 16);
        let plain = Slab::new(SLAB).unwrap();
        let before = transport::memlock::vm_pin_bytes().unwrap();
        // SAFETY: the slab outlives the ring's operations (all complete below).
        unsafe { ring.add_plain_buffers(&[(plain.as_ptr(), plain.len())]) }.unwrap();
        assert_eq!((ring.buffers_registered(), ring.plain_buffers()), (1, 1));
        assert_eq!(
            transport::memlock::vm_pin_bytes().unwrap(),
            before,
            "plain buffers pin nothing"
        );
        let data = pattern(8192, 3);
        slab_fill(&plain, 4096, &data);
        ring.write_fixed(0, 1, plain.as_ptr().wrapping_add(4096), 8192, 0, false, 1)
            .unwrap();
        assert_eq!(complete(&mut ring, 1), vec![(1, 8192)]);
        ring.read_fixed(0, 1, plain.as_ptr().wrapping_add(SLAB / 2), 8192, 0, 2)
            .unwrap();
        assert_eq!(complete(&mut ring, 1), vec![(2, 8192)]);
        assert_eq!(slab_bytes(&plain, SLAB / 2, 8192), data);
        // The registered buffer still works beside it.
        ring.read_fixed(0, 0, fixed.as_ptr(), 8192, 0, 3).unwrap();
        assert_eq!(complete(&mut ring, 1), vec![(3, 8192)]);
        assert_eq!(slab_bytes(&fixed, 0, 8192), data);
        // Past the plain region's end, or a buffer index that does not exist.
        ring.read_fixed(0, 1, plain.as_ptr().wrapping_add(SLAB - 4096), 8192, 0, 4)
            .unwrap();
        assert_eq!(complete(&mut ring, 1), vec![(4, -libc::EFAULT)]);
        ring.read_fixed(0, 2, plain.as_ptr(), 4096, 0, 5).unwrap();
        assert_eq!(complete(&mut ring, 1), vec![(5, -libc::EFAULT)]);
        // Fixed buffers cannot follow plain ones.
        // SAFETY: refused before anything is registered.
        let e = unsafe { ring.register_buffers(&[(plain.as_ptr(), 4096)]) }.unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
    }

    #[test]
    fn write_then_read_back_through_fixed_buffers() {
        let file = temp_file(0);
        let (_pinned, mut ring, slab) = setup(file.as_file(), 16);
        let data = pattern(12288, 7);
        slab_fill(&slab, 8192, &data);
        ring.write_fixed(
            0,
            0,
            slab.as_ptr().wrapping_add(8192),
            12288,
            4096,
            false,
            11,
        )
        .unwrap();
        assert_eq!(complete(&mut ring, 1), vec![(11, 12288)]);
        ring.read_fixed(0, 0, slab.as_ptr().wrapping_add(1 << 20), 12288, 4096, 12)
            .unwrap();
        assert_eq!(complete(&mut ring, 1), vec![(12, 12288)]);
        assert_eq!(slab_bytes(&slab, 1 << 20, 12288), data);
        // The file itself holds the bytes, after a 4 KiB hole at its start.
        let mut on_disk = Vec::new();
        file.reopen().unwrap().read_to_end(&mut on_disk).unwrap();
        assert_eq!(on_disk.len(), 4096 + 12288);
        assert!(on_disk[..4096].iter().all(|&b| b == 0));
        assert_eq!(&on_disk[4096..], &data[..]);
        let s = ring.stats();
        assert_eq!((s.queued, s.completed, s.failed, s.short), (2, 2, 0, 0));
        assert!(s.submitted >= 2);
    }

    #[test]
    fn dsync_write_and_fsync_complete() {
        let file = temp_file(8192);
        let (_pinned, mut ring, slab) = setup(file.as_file(), 8);
        slab_fill(&slab, 0, &pattern(4096, 1));
        ring.write_fixed(0, 0, slab.as_ptr(), 4096, 0, true, 1)
            .unwrap();
        ring.fsync(0, true, 2).unwrap();
        ring.fsync(0, false, 3).unwrap();
        let mut got = complete(&mut ring, 3);
        got.sort_unstable();
        assert_eq!(got, vec![(1, 4096), (2, 0), (3, 0)]);
    }

    #[test]
    fn reads_past_end_of_file_are_short() {
        // 10000-byte file: a read straddling the end is short (and its remainder is
        // requeued once, meeting EOF); a read at or past the end reads 0 bytes.
        let file = temp_file(10_000);
        let (_pinned, mut ring, slab) = setup(file.as_file(), 8);
        ring.read_fixed(0, 0, slab.as_ptr(), 8192, 8192, 1).unwrap();
        assert_eq!(complete(&mut ring, 1), vec![(1, 10_000 - 8192)]);
        let expect: Vec<u8> = (8192..10_000).map(|i| (i % 251) as u8 ^ 0x5A).collect();
        assert_eq!(slab_bytes(&slab, 0, expect.len()), expect);
        let s = ring.stats();
        assert_eq!(
            s.resubmitted, 1,
            "the remainder after the short read was requeued"
        );
        assert_eq!(
            s.short, 2,
            "the short read and the EOF read of the remainder"
        );

        ring.read_fixed(0, 0, slab.as_ptr(), 4096, 10_000, 2)
            .unwrap();
        ring.read_fixed(0, 0, slab.as_ptr(), 4096, 1 << 30, 3)
            .unwrap();
        let mut got = complete(&mut ring, 2);
        got.sort_unstable();
        assert_eq!(got, vec![(2, 0), (3, 0)]);
        // A read covering the whole file from 0 returns all of it.
        ring.read_fixed(0, 0, slab.as_ptr(), 3 * 4096, 0, 4)
            .unwrap();
        assert_eq!(complete(&mut ring, 1), vec![(4, 10_000)]);
        assert_eq!(ring.stats().failed, 0);
        assert_eq!(ring.in_flight(), 0);
    }

    #[test]
    fn punch_hole_reads_zeroes_and_frees_blocks() {
        let file = temp_file(1 << 20);
        file.as_file().sync_all().unwrap();
        let before = file.as_file().metadata().unwrap();
        let (_pinned, mut ring, slab) = setup(file.as_file(), 8);
        ring.fallocate(0, FALLOC_DEALLOCATE, 256 << 10, 256 << 10, 5)
            .unwrap();
        assert_eq!(complete(&mut ring, 1), vec![(5, 0)]);
        let after = file.as_file().metadata().unwrap();
        assert_eq!(after.len(), before.len(), "KEEP_SIZE");
        // 256 KiB = 512 sectors of 512 bytes fewer.
        assert!(
            after.blocks() + 512 <= before.blocks(),
            "blocks before {} after {}",
            before.blocks(),
            after.blocks()
        );
        slab_fill(&slab, 0, &[0xFF; 8192]);
        ring.read_fixed(0, 0, slab.as_ptr(), 8192, (256 << 10) - 4096, 6)
            .unwrap();
        assert_eq!(complete(&mut ring, 1), vec![(6, 8192)]);
        let got = slab_bytes(&slab, 0, 8192);
        let first: Vec<u8> = ((256 << 10) - 4096..256 << 10)
            .map(|i| (i % 251) as u8 ^ 0x5A)
            .collect();
        assert_eq!(&got[..4096], &first[..], "before the hole: data");
        assert!(got[4096..].iter().all(|&b| b == 0), "in the hole: zeroes");
    }

    #[test]
    fn zero_range_reads_zeroes_and_keeps_size() {
        let file = temp_file(64 << 10);
        let (_pinned, mut ring, slab) = setup(file.as_file(), 8);
        ring.fallocate(0, FALLOC_WRITE_ZEROES, 4096, 8192, 7)
            .unwrap();
        assert_eq!(complete(&mut ring, 1), vec![(7, 0)]);
        assert_eq!(file.as_file().metadata().unwrap().len(), 64 << 10);
        ring.read_fixed(0, 0, slab.as_ptr(), 16384, 0, 8).unwrap();
        assert_eq!(complete(&mut ring, 1), vec![(8, 16384)]);
        let got = slab_bytes(&slab, 0, 16384);
        let orig: Vec<u8> = (0..16384).map(|i| (i % 251) as u8 ^ 0x5A).collect();
        assert_eq!(&got[..4096], &orig[..4096]);
        assert!(got[4096..12288].iter().all(|&b| b == 0));
        assert_eq!(&got[12288..], &orig[12288..]);
        // Beyond the end with KEEP_SIZE: succeeds, size unchanged.
        ring.fallocate(0, FALLOC_WRITE_ZEROES, 1 << 20, 4096, 9)
            .unwrap();
        assert_eq!(complete(&mut ring, 1), vec![(9, 0)]);
        let mut f = file.reopen().unwrap();
        assert_eq!(f.seek(SeekFrom::End(0)).unwrap(), 64 << 10);
    }

    #[test]
    fn ring_full_is_back_pressure() {
        let file = temp_file(65536);
        let (_pinned, mut ring, slab) = setup(file.as_file(), 4);
        let cap = ring.capacity();
        for i in 0..cap {
            ring.read_fixed(
                0,
                0,
                slab.as_ptr().wrapping_add(i * 4096),
                4096,
                0,
                i as u64,
            )
            .unwrap();
        }
        assert_eq!(ring.fsync(0, true, 99), Err(RingFull));
        assert_eq!(ring.pending_submissions(), cap);
        assert_eq!(ring.submit().unwrap(), cap);
        // Submitted but not yet reaped: the slots are still taken.
        assert_eq!(ring.fsync(0, true, 99), Err(RingFull));
        let got = complete(&mut ring, cap);
        assert_eq!(got.len(), cap);
        assert!(got.iter().all(|&(_, res)| res == 4096));
        assert_eq!(ring.in_flight(), 0);
        ring.fsync(0, true, 99).unwrap();
        assert_eq!(complete(&mut ring, 1), vec![(99, 0)]);
        assert_eq!(ring.stats().queued, cap as u64 + 1);
    }

    #[test]
    fn bad_buffer_fails_with_efault() {
        let file = temp_file(8192);
        let (_pinned, mut ring, slab) = setup(file.as_file(), 4);
        // Range runs past the end of fixed buffer 0.
        ring.read_fixed(0, 0, slab.as_ptr().wrapping_add(SLAB - 4096), 8192, 0, 1)
            .unwrap();
        // Unregistered buffer index, and unregistered file index.
        ring.read_fixed(0, 3, slab.as_ptr(), 4096, 0, 2).unwrap();
        ring.fsync(5, false, 3).unwrap();
        let mut got = complete(&mut ring, 3);
        got.sort_unstable();
        assert_eq!(got[0], (1, -libc::EFAULT));
        assert_eq!(got[1], (2, -libc::EFAULT));
        assert_eq!(got[2], (3, -libc::EBADF));
        assert_eq!(ring.stats().failed, 3);
    }

    /// The poll group's busy loop never blocks: `poll_completions` + `submit` alone must
    /// deliver completions of work the kernel runs asynchronously (fsync, fallocate go
    /// through io-wq and come back as task work, flagged by IORING_SQ_TASKRUN).
    #[test]
    fn busy_polling_delivers_async_completions() {
        let file = temp_file(1 << 20);
        let (_pinned, mut ring, slab) = setup(file.as_file(), 8);
        slab_fill(&slab, 0, &pattern(65536, 3));
        ring.write_fixed(0, 0, slab.as_ptr(), 65536, 0, false, 1)
            .unwrap();
        ring.fsync(0, false, 2).unwrap();
        ring.fallocate(0, FALLOC_DEALLOCATE, 512 << 10, 4096, 3)
            .unwrap();
        let mut got = Vec::new();
        for _ in 0..50_000_000u64 {
            ring.submit().unwrap();
            ring.poll_completions(|ud, res| got.push((ud, res)));
            if got.len() == 3 {
                break;
            }
            std::thread::yield_now();
        }
        got.sort_unstable();
        assert_eq!(got, vec![(1, 65536), (2, 0), (3, 0)]);
    }

    #[test]
    fn idle_ring_submit_and_wait_does_not_block() {
        let mut ring = Ring::new(4).unwrap();
        assert_eq!(ring.submit().unwrap(), 0);
        assert_eq!(ring.submit_and_wait(3).unwrap(), 0);
        assert_eq!(ring.poll_completions(|_, _| {}), 0);
    }

    #[test]
    fn ring_moves_to_another_thread_before_first_submit() {
        let file = temp_file(4096);
        let (_pinned, ring, slab) = setup(file.as_file(), 4);
        let handle = std::thread::spawn(move || {
            let mut ring = ring;
            ring.read_fixed(0, 0, slab.as_ptr(), 4096, 0, 1).unwrap();
            let got = complete(&mut ring, 1);
            drop(ring);
            drop(slab);
            got
        });
        assert_eq!(handle.join().unwrap(), vec![(1, 4096)]);
    }
}
