//! The host's data buffers: one registered pool per host ([`BufferPool`]), shared by
//! all its queues, handing out owned buffers ([`IoBuf`]) that commands carry with no
//! copy (SPDK's model; Linux's host registers the caller's pages per I/O instead).
//!
//! The pool is one memory region of the host's protection domain, so any of its queues
//! can name any buffer. Memory does not grow with queue depth x MDTS: a queue owns only
//! its SQE and response slots, and commands take what their data needs from the pool
//! (in [`POOL_CHUNK_BYTES`] units, rounded up to a power of two by a buddy allocator,
//! `buddy`). When the pool is full a command waits for space ([`BufferPool::alloc`]
//! awaits, [`BufferPool::alloc_blocking`] blocks, [`BufferPool::try_alloc`] says
//! `None`): buffer space is back-pressure, never a failure. A request larger than the
//! largest block the pool can ever give is an error at once ([`PoolError::TooLarge`]).
//!
//! How the target reaches a buffer ([`RemoteAccess`]): where the device has type 2
//! memory windows, each command binds its slot's window over exactly its buffer with
//! a fresh key, which dies when the command completes (the pool region itself grants
//! no remote access). Where it has none (a real RNIC without type 2B windows), the
//! pool's own rkey is used, as SPDK does: the region grants remote read and write,
//! and a target that misbehaves could then reach every buffer of the pool, not only
//! the one of its command. The host says so in its log when it falls back.
//!
//! An [`IoBuf`] is a view of a block: [`IoBuf::split_to`] / [`IoBuf::split_off`] cut
//! it into disjoint views that share the block (one command per piece of a large I/O)
//! and [`IoBuf::unsplit`] joins neighbours again; the block goes back to the pool when
//! its last view is dropped. [`IoBuf::into_bytes`] hands it out as `bytes::Bytes`
//! without copying.
mod buddy;

use std::any::Any;
use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};
use transport::memlock::Bytes as ByteCount;
use transport::verbs::{AccessFlags, Device, MemoryRegion, Pd, Provider};

use self::buddy::Buddy;
use crate::queue::core::BufSpan;

/// The pool's allocation unit in bytes; a buffer takes a power of two of them.
pub const POOL_CHUNK_BYTES: usize = 4096;

/// The pool size when the caller names none and the memlock limit allows it (see
/// [`pool_bytes`]): 32 MiB, 32 I/Os of 1 MiB (Linux nvmet's MDTS) in flight at once,
/// or 256 of 128 KiB. The soft provider's pool is an anonymous mapping, resident only
/// where buffers were used.
pub const DEFAULT_POOL_BYTES: usize = 32 << 20;

/// How the target is given access to a command's buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RemoteAccess {
    /// A type 2 memory window per command slot, bound over exactly the command's buffer
    /// with a fresh key and invalidated when it completes (the pool region grants no
    /// remote access).
    Windows,
    /// The pool region's own rkey (SPDK's choice where the device has no memory
    /// windows): every command's key reaches the whole pool; weaker isolation.
    RegionKey,
}

/// Why a buffer could not be had.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PoolError {
    /// More bytes than the largest block the pool ever holds.
    #[error(
        "a buffer of {} does not fit the host's buffer pool, whose largest block is {} \
         (pool {}): use a larger pool (HostOptions::buffer_pool_bytes; on a provider that \
         pins memory, raise RLIMIT_MEMLOCK) or smaller I/Os",
        ByteCount(*len as u64), ByteCount(*max as u64), ByteCount(*pool as u64)
    )]
    TooLarge {
        /// Bytes asked for.
        len: usize,
        /// The largest block.
        max: usize,
        /// The pool's size.
        pool: usize,
    },
    /// A zero-length buffer was asked for.
    #[error("a buffer of 0 bytes")]
    Empty,
    /// The wait for space ran out ([`BufferPool::alloc_blocking`]).
    #[error("no buffer of {} free in the host's buffer pool within {} ms", ByteCount(*len as u64), .waited.as_millis())]
    Timeout {
        /// Bytes asked for.
        len: usize,
        /// How long it waited.
        waited: Duration,
    },
}

/// The state behind every handle of one pool.
struct PoolShared {
    base: *mut u8,
    addr: u64,
    lkey: u32,
    rkey: u32,
    bytes: usize,
    access: RemoteAccess,
    buddy: Mutex<Buddy>,
    /// Blocking waiters for space (with `buddy`'s mutex).
    freed: Condvar,
    /// Async waiters for space.
    notify: tokio::sync::Notify,
    /// Per chunk: views alive of the allocated block that starts there.
    refs: Box<[AtomicU32]>,
    /// Allocations that had to wait for space.
    waits: AtomicU64,
    /// Keeps the memory region registered for as long as a buffer exists.
    _mr: Box<dyn Any + Send + Sync>,
}

// SAFETY: `base` points into the region kept alive by `_mr`; the bytes are handed out
// in disjoint views (`IoBuf`), each used by one owner at a time, and the allocator
// state is behind a mutex.
unsafe impl Send for PoolShared {}
// SAFETY: see above.
unsafe impl Sync for PoolShared {}

impl PoolShared {
    fn release(&self, block: u32) {
        if self.refs[block as usize].fetch_sub(1, Ordering::AcqRel) != 1 {
            return;
        }
        self.buddy.lock().free(block);
        self.freed.notify_all();
        self.notify.notify_waiters();
    }

    fn max_alloc(&self) -> usize {
        self.buddy.lock().max_block_chunks() as usize * POOL_CHUNK_BYTES
    }
}

/// The host's registered buffer pool: see the module docs. Clones are handles to the
/// same pool.
#[derive(Clone)]
pub struct BufferPool {
    shared: Arc<PoolShared>,
}

impl std::fmt::Debug for BufferPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BufferPool")
            .field("bytes", &self.shared.bytes)
            .field("free", &self.free_bytes())
            .field("access", &self.shared.access)
            .finish()
    }
}

/// Why no buffer pool size could be chosen ([`pool_bytes`]); each message names the
/// memlock limit, what is pinned, what one I/O needs and the fix.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PoolSizeError {
    /// The caller's pool cannot hold one I/O.
    #[error(
        "a buffer pool of {} cannot hold one I/O of {} (the controller's MDTS or \
         max_io_bytes): ask for at least {}",
        ByteCount(*.pool as u64), ByteCount(*.io as u64), ByteCount(*.min as u64)
    )]
    TooSmall {
        /// The pool asked for, in whole chunks (bytes).
        pool: usize,
        /// One command's data in bytes.
        io: usize,
        /// The smallest pool that holds it (bytes).
        min: usize,
    },
    /// The caller's pool and the queues' slots do not fit `RLIMIT_MEMLOCK`.
    #[error(
        "a buffer pool of {} and the queues' {} of registered slots do not fit the {} of \
         RLIMIT_MEMLOCK left ({} limit): ask for a smaller pool or {}",
        ByteCount(*.pool as u64), ByteCount(*.reserve), ByteCount(*.left),
        limit_words(*.limit), raise_words(*.need)
    )]
    RequestedOverMemlock {
        /// The pool asked for (bytes).
        pool: usize,
        /// The queues' own registered slots (bytes).
        reserve: u64,
        /// Memlock bytes left.
        left: u64,
        /// The memlock limit in bytes, `None` if unlimited.
        limit: Option<u64>,
        /// The limit that would fit (bytes).
        need: u64,
    },
    /// Not even one I/O fits what `RLIMIT_MEMLOCK` leaves.
    #[error(
        "RLIMIT_MEMLOCK ({} limit, {} left) cannot fit the host's buffer pool for one I/O \
         of {} (the controller's MDTS or max_io_bytes) and the queues' {} of registered \
         slots: {}, or use smaller I/Os (max_io_bytes)",
        limit_words(*.limit), ByteCount(*.left), ByteCount(*.io as u64),
        ByteCount(*.reserve), raise_words(*.need)
    )]
    MemlockTooSmall {
        /// The memlock limit in bytes, `None` if unlimited.
        limit: Option<u64>,
        /// Memlock bytes left.
        left: u64,
        /// One command's data in bytes.
        io: usize,
        /// The queues' own registered slots (bytes).
        reserve: u64,
        /// The limit that would fit (bytes).
        need: u64,
    },
}

fn limit_words(limit: Option<u64>) -> String {
    limit.map_or("no".to_string(), |l| ByteCount(l).to_string())
}

fn raise_words(need: u64) -> String {
    let kib = need.div_ceil(1024);
    format!(
        "raise RLIMIT_MEMLOCK to at least {kib} KiB (`ulimit -l {kib}`, `prlimit \
         --memlock={} <command>`, LimitMEMLOCK= in a systemd unit, or CAP_IPC_LOCK)",
        kib * 1024
    )
}

/// The pool size to register: `requested` when the caller named one (whole chunks),
/// else [`DEFAULT_POOL_BYTES`], shrunk on a provider that pins its memory (`pins`) to
/// what `available` memlock bytes allow after `reserve` (the queues' own registered
/// slots) and an eighth of `limit` for the rest of the process, as the target sizes its
/// slab. `min_bytes` is one command's data (MDTS or the caller's `max_io_bytes`).
///
/// # Errors
/// [`PoolSizeError`] when even one I/O does not fit, or when `requested` cannot hold
/// one I/O or does not fit the limit.
pub fn pool_bytes(
    requested: Option<usize>,
    pins: bool,
    available: Option<u64>,
    limit: Option<u64>,
    reserve: u64,
    min_bytes: usize,
) -> Result<usize, PoolSizeError> {
    let chunk = |b: usize| b / POOL_CHUNK_BYTES * POOL_CHUNK_BYTES;
    let min = min_bytes.next_power_of_two().max(POOL_CHUNK_BYTES);
    let avail = if pins { available } else { None };
    if let Some(r) = requested {
        let r = chunk(r);
        if r < min {
            return Err(PoolSizeError::TooSmall {
                pool: r,
                io: min_bytes,
                min,
            });
        }
        if let Some(a) = avail {
            if (r as u64).saturating_add(reserve) > a {
                return Err(PoolSizeError::RequestedOverMemlock {
                    pool: r,
                    reserve,
                    left: a,
                    limit,
                    need: limit.unwrap_or(0) + (r as u64 + reserve).saturating_sub(a),
                });
            }
        }
        return Ok(r);
    }
    let Some(a) = avail else {
        return Ok(DEFAULT_POOL_BYTES);
    };
    let keep = limit.unwrap_or(0) / 8;
    let fits = a.saturating_sub(reserve).saturating_sub(keep) as usize;
    let bytes = chunk(fits.min(DEFAULT_POOL_BYTES));
    if bytes < min {
        let need = min as u64 + reserve + keep;
        return Err(PoolSizeError::MemlockTooSmall {
            limit,
            left: a,
            io: min_bytes,
            reserve,
            need: limit.unwrap_or(0) + need.saturating_sub(a),
        });
    }
    Ok(bytes)
}

impl BufferPool {
    /// Registers a pool of `bytes` (rounded down to whole [`POOL_CHUNK_BYTES`], at
    /// least one) in `pd` of `dev`: with `LOCAL_WRITE | MW_BIND` for
    /// [`RemoteAccess::Windows`], with `LOCAL_WRITE | REMOTE_READ | REMOTE_WRITE` for
    /// [`RemoteAccess::RegionKey`]. The verbs provider pins it and charges the
    /// process's memlock budget (`transport::memlock::PinBudget`).
    ///
    /// # Errors
    /// The verbs error of the registration (`Memlock` over the limit, naming how to
    /// raise it).
    pub fn register<P: Provider>(
        dev: &Arc<P::Device>,
        pd: Pd,
        bytes: usize,
        access: RemoteAccess,
    ) -> Result<BufferPool, transport::verbs::VerbsError> {
        let chunks = (bytes / POOL_CHUNK_BYTES).max(1);
        let len = chunks * POOL_CHUNK_BYTES;
        let flags = match access {
            RemoteAccess::Windows => AccessFlags::LOCAL_WRITE | AccessFlags::MW_BIND,
            RemoteAccess::RegionKey => {
                AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ | AccessFlags::REMOTE_WRITE
            }
        };
        let mr = dev.reg_mr(pd, len, flags)?;
        let shared = PoolShared {
            base: mr.as_ptr(),
            addr: mr.addr(),
            lkey: mr.lkey(),
            rkey: mr.rkey(),
            bytes: len,
            access,
            buddy: Mutex::new(Buddy::new(chunks as u32)),
            freed: Condvar::new(),
            notify: tokio::sync::Notify::new(),
            refs: (0..chunks).map(|_| AtomicU32::new(0)).collect(),
            waits: AtomicU64::new(0),
            _mr: Box::new(mr),
        };
        Ok(BufferPool {
            shared: Arc::new(shared),
        })
    }

    /// The pool's size in bytes.
    pub fn capacity(&self) -> usize {
        self.shared.bytes
    }
    /// Bytes free now.
    pub fn free_bytes(&self) -> usize {
        self.shared.buddy.lock().free_chunks() as usize * POOL_CHUNK_BYTES
    }
    /// The largest buffer one allocation can get (when the pool is empty).
    pub fn max_alloc(&self) -> usize {
        self.shared.max_alloc()
    }
    /// How the target reaches the buffers.
    pub fn remote_access(&self) -> RemoteAccess {
        self.shared.access
    }
    /// The region's local key.
    pub fn lkey(&self) -> u32 {
        self.shared.lkey
    }
    /// The region's remote key (meaningful for [`RemoteAccess::RegionKey`] only).
    pub fn rkey(&self) -> u32 {
        self.shared.rkey
    }
    /// Allocations that found the pool full and waited.
    pub fn waits(&self) -> u64 {
        self.shared.waits.load(Ordering::Relaxed)
    }

    fn check(&self, len: usize) -> Result<u32, PoolError> {
        if len == 0 {
            return Err(PoolError::Empty);
        }
        let max = self.max_alloc();
        if len > max {
            return Err(PoolError::TooLarge {
                len,
                max,
                pool: self.shared.bytes,
            });
        }
        Ok(len.div_ceil(POOL_CHUNK_BYTES) as u32)
    }

    fn take(&self, buddy: &mut Buddy, len: usize, chunks: u32) -> Option<IoBuf> {
        let block = buddy.alloc(chunks)?;
        self.shared.refs[block as usize].store(1, Ordering::Release);
        Some(IoBuf {
            pool: self.shared.clone(),
            block,
            block_len: chunks.next_power_of_two() as usize * POOL_CHUNK_BYTES,
            off: block as usize * POOL_CHUNK_BYTES,
            len,
        })
    }

    /// A buffer of `len` bytes if the pool has one free now, `Ok(None)` if not.
    /// Never allocates heap memory.
    ///
    /// # Errors
    /// [`PoolError::TooLarge`], [`PoolError::Empty`].
    pub fn try_alloc(&self, len: usize) -> Result<Option<IoBuf>, PoolError> {
        let chunks = self.check(len)?;
        let mut b = self.shared.buddy.lock();
        Ok(self.take(&mut b, len, chunks))
    }

    /// A buffer of `len` bytes, waiting (asynchronously) while the pool is full.
    ///
    /// # Errors
    /// [`PoolError::TooLarge`], [`PoolError::Empty`].
    pub async fn alloc(&self, len: usize) -> Result<IoBuf, PoolError> {
        let chunks = self.check(len)?;
        let mut waited = false;
        loop {
            let notified = self.shared.notify.notified();
            tokio::pin!(notified);
            // Registered before looking, so a release in between is not missed.
            notified.as_mut().enable();
            if let Some(b) = self.take(&mut self.shared.buddy.lock(), len, chunks) {
                return Ok(b);
            }
            if !waited {
                waited = true;
                self.shared.waits.fetch_add(1, Ordering::Relaxed);
            }
            notified.await;
        }
    }

    /// A buffer of `len` bytes, blocking while the pool is full, for at most `timeout`.
    ///
    /// # Errors
    /// [`PoolError::TooLarge`], [`PoolError::Empty`], [`PoolError::Timeout`].
    pub fn alloc_blocking(&self, len: usize, timeout: Duration) -> Result<IoBuf, PoolError> {
        let chunks = self.check(len)?;
        let start = Instant::now();
        let mut b = self.shared.buddy.lock();
        let mut waited = false;
        loop {
            if let Some(buf) = self.take(&mut b, len, chunks) {
                return Ok(buf);
            }
            if !waited {
                waited = true;
                self.shared.waits.fetch_add(1, Ordering::Relaxed);
            }
            let left = timeout.saturating_sub(start.elapsed());
            if left.is_zero() {
                return Err(PoolError::Timeout {
                    len,
                    waited: start.elapsed(),
                });
            }
            self.shared.freed.wait_for(&mut b, left);
        }
    }
}

/// An owned buffer of the host's [`BufferPool`]: `len` bytes of registered memory that
/// a command reads into or writes from with no copy. Dereferences to `[u8]`. Dropping
/// the last view of its block gives the block back to the pool.
pub struct IoBuf {
    pool: Arc<PoolShared>,
    /// The first chunk of the block (the allocator's name for it).
    block: u32,
    /// Bytes of the block.
    block_len: usize,
    /// Byte offset of this view in the pool region.
    off: usize,
    len: usize,
}

impl std::fmt::Debug for IoBuf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IoBuf")
            .field("addr", &format_args!("{:#x}", self.addr()))
            .field("len", &self.len)
            .finish()
    }
}

impl IoBuf {
    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }
    /// Whether the view is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    /// The I/O virtual address of the first byte (what a keyed SGL names).
    pub fn addr(&self) -> u64 {
        self.pool.addr + self.off as u64
    }
    /// The local key of the pool region.
    pub fn lkey(&self) -> u32 {
        self.pool.lkey
    }
    /// Where the buffer is, as the queue core names it.
    pub(crate) fn span(&self) -> BufSpan {
        BufSpan {
            addr: self.addr(),
            len: self.len,
            lkey: self.pool.lkey,
        }
    }
    /// Whether `self` and `pool` are the same pool.
    pub fn is_from(&self, pool: &BufferPool) -> bool {
        Arc::ptr_eq(&self.pool, &pool.shared)
    }

    /// Splits off bytes `[0, at)` as a view of its own; `self` keeps `[at, len)`. Both
    /// share the block. Panics if `at > len` (a caller bug).
    pub fn split_to(&mut self, at: usize) -> IoBuf {
        assert!(at <= self.len, "split_to({at}) of {} bytes", self.len);
        self.pool.refs[self.block as usize].fetch_add(1, Ordering::AcqRel);
        let head = IoBuf {
            pool: self.pool.clone(),
            block: self.block,
            block_len: self.block_len,
            off: self.off,
            len: at,
        };
        self.off += at;
        self.len -= at;
        head
    }

    /// Splits off bytes `[at, len)` as a view of its own; `self` keeps `[0, at)`.
    /// Panics if `at > len`.
    pub fn split_off(&mut self, at: usize) -> IoBuf {
        assert!(at <= self.len, "split_off({at}) of {} bytes", self.len);
        let mut tail = self.split_to(at);
        std::mem::swap(self, &mut tail);
        tail
    }

    /// Joins `other`, the view that directly follows `self` in the same block, back
    /// onto `self`. Errors: `other` unchanged when it is not that view.
    pub fn unsplit(&mut self, other: IoBuf) -> Result<(), IoBuf> {
        if other.block != self.block
            || !Arc::ptr_eq(&other.pool, &self.pool)
            || self.off + self.len != other.off
        {
            return Err(other);
        }
        self.len += other.len;
        // `other`'s drop gives back its share of the block.
        drop(other);
        Ok(())
    }

    /// Shortens the view to `len` bytes (no effect if it is shorter already); the block
    /// stays allocated until the view is dropped.
    pub fn truncate(&mut self, len: usize) {
        self.len = self.len.min(len);
    }

    /// Bytes of the block this view belongs to (its length once whole again).
    pub fn capacity(&self) -> usize {
        self.block_len
    }

    /// Sets the length to `len` (at most [`IoBuf::capacity`]) when this is the only
    /// view of its block and starts it, so a buffer can be reused for I/Os of other
    /// sizes; returns whether it did (`false` for a shared or offset view, or a `len`
    /// over the capacity).
    pub fn set_len(&mut self, len: usize) -> bool {
        let unique = self.pool.refs[self.block as usize].load(Ordering::Acquire) == 1;
        let at_start = self.off == self.block as usize * POOL_CHUNK_BYTES;
        if !unique || !at_start || len > self.block_len {
            return false;
        }
        self.len = len;
        true
    }

    /// The buffer as `bytes::Bytes`, without copying: the block goes back to the pool
    /// when the last clone of the `Bytes` is dropped. (One small allocation for the
    /// `Bytes` handle; the zero-copy I/O path itself works on `IoBuf`s.)
    pub fn into_bytes(self) -> bytes::Bytes {
        bytes::Bytes::from_owner(self)
    }
}

impl Deref for IoBuf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // SAFETY: `[off, off + len)` lies in the region that `pool` keeps registered,
        // and views of a block never overlap; the device writes a view only while a
        // command owns it (the queue holds the `IoBuf` until it completes).
        unsafe { std::slice::from_raw_parts(self.pool.base.add(self.off), self.len) }
    }
}

impl DerefMut for IoBuf {
    fn deref_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `deref`, and `&mut self` makes this the only access.
        unsafe { std::slice::from_raw_parts_mut(self.pool.base.add(self.off), self.len) }
    }
}

impl AsRef<[u8]> for IoBuf {
    fn as_ref(&self) -> &[u8] {
        self
    }
}

impl AsMut<[u8]> for IoBuf {
    fn as_mut(&mut self) -> &mut [u8] {
        self
    }
}

impl Drop for IoBuf {
    fn drop(&mut self) {
        self.pool.release(self.block);
    }
}

#[cfg(test)]
mod tests;
