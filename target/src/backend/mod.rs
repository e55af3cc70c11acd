//! Namespace back ends: where a namespace's logical blocks live (NVM Command Set 1.x: a
//! namespace is a range of logical blocks, LBA 0 to NSZE - 1). As Linux nvmet's
//! `io-cmd-file.c` and `io-cmd-bdev.c`, a namespace is backed by either
//!
//! - a regular file ([`file`](mod@file)): created sparse at a given size when missing; logical
//!   blocks of the configured size (512 by default);
//! - a block device ([`block`]), an SSD or a partition, a loop or a device-mapper
//!   device: opened with `O_EXCL`, as nvmet opens it (`bdev_open_by_path` with an
//!   exclusive holder), so a mounted device or one another target serves is refused;
//!   its size from `BLKGETSIZE64` and its logical block size from `BLKSSZGET`.
//!
//! Either is opened read-write, through the page cache (the default: on this host a
//! cached 4 KiB io_uring read costs about 1.25 us against about 50 us with O_DIRECT on
//! the virtio disk, DESIGN facts) or with O_DIRECT (`direct = true`, `--direct`), and
//! served through each poll group's io_uring ring from the registered data slab
//! ([`crate::uring`]); durability comes from Flush (fsync) and FUA (`RWF_DSYNC`).
//!
//! O_DIRECT wants memory and file offsets aligned (statx `STATX_DIOALIGN`: the
//! logical block size of the device under the file system, or of the block device).
//! File offsets and lengths are whole logical blocks, so the block size must be at
//! least the offset alignment (checked at open). Data buffers are aligned: the slab's
//! chunks start at multiples of 4 KiB, and in-capsule data at multiples of the
//! receive buffers' in-capsule size (4096 by default); in-capsule write data that is
//! not aligned (an SGL offset, an odd in-capsule size) is copied into a slab chunk
//! first (counted in `direct_bounce_bytes`).

use std::fs::File;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, RawFd};
use std::os::unix::fs::FileTypeExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

mod access;
pub mod block;
pub mod file;
pub mod lock;
pub mod memory;

pub use lock::LockHolder;

/// Shortest interval between two I/O error log lines of one namespace
/// ([`Backend::error_log_due`]).
pub const ERROR_LOG_INTERVAL: Duration = Duration::from_secs(1);

/// Logical block size of a file namespace when none is configured.
pub const DEFAULT_FILE_BLOCK_SIZE: u32 = 512;

/// Why a namespace's back end could not be opened. Every message names the path.
#[derive(Debug, thiserror::Error)]
pub enum NamespaceError {
    /// The file does not exist and no size was given to create it.
    #[error("namespace file {}: does not exist (give a size to create it)", path.display())]
    NotFound {
        /// The namespace path.
        path: PathBuf,
    },
    /// The file should be created but its parent directory does not exist; directories
    /// are never created implicitly.
    #[error("namespace file {}: cannot create it, parent directory {} does not exist", path.display(), parent.display())]
    ParentMissing {
        /// The namespace path.
        path: PathBuf,
        /// Its parent directory.
        parent: PathBuf,
    },
    /// The path names a directory.
    #[error("namespace file {}: is a directory", path.display())]
    IsDirectory {
        /// The namespace path.
        path: PathBuf,
    },
    /// The path names something other than a regular file or a block device (character
    /// device, FIFO, socket).
    #[error("namespace file {}: is a {kind}, not a regular file or a block device", path.display())]
    NotRegularFile {
        /// The namespace path.
        path: PathBuf,
        /// What it is instead.
        kind: &'static str,
    },
    /// The file cannot be opened (or created) with the access the namespace needs:
    /// `reason` names the path that refused it (the file, or a directory on the way)
    /// and the permission that is missing.
    #[error("namespace file {}: permission denied: {reason} ({source})", path.display())]
    PermissionDenied {
        /// The namespace path.
        path: PathBuf,
        /// Which path refused which access, and the fix.
        reason: String,
        /// The operating system's error.
        source: io::Error,
    },
    /// Another process serves the file: it holds the file's lock (see [`lock`]).
    #[error(
        "namespace file {}: in use: {}, so another target (or another program) serves this \
         file already: stop it, or give this target another file{}",
        path.display(),
        holder.as_ref().map_or_else(|| "another process holds its lock".to_string(), |h| h.to_string()),
        if *read_only { "" } else { " (read-only namespaces may share one file)" }
    )]
    Locked {
        /// The namespace path.
        path: PathBuf,
        /// The process holding the lock, when `/proc/locks` names it.
        holder: Option<LockHolder>,
        /// This namespace asked for the shared (read-only) lock.
        read_only: bool,
    },
    /// The block device is open exclusively elsewhere: mounted, in use by another
    /// target (nvmet or another nvmf-target), a RAID or device-mapper member.
    #[error("namespace block device {}: in use (mounted, or opened exclusively by another program such as another nvmf-target; O_EXCL refused it): unmount it or stop that program", path.display())]
    Busy {
        /// The namespace path.
        path: PathBuf,
    },
    /// The logical block size is not a power of two from 512 to 4096 bytes.
    #[error("namespace file {}: block size {block_size} is not 512, 1024, 2048 or 4096 bytes", path.display())]
    BadBlockSize {
        /// The namespace path.
        path: PathBuf,
        /// The block size asked for, in bytes.
        block_size: u32,
    },
    /// The configured block size is smaller than the block device's logical block size.
    #[error("namespace block device {}: block_size {block_size} is smaller than the device's logical block size {device_block_size} (BLKSSZGET): set block_size to {device_block_size} (or leave it out)", path.display())]
    BlockSizeBelowDevice {
        /// The namespace path.
        path: PathBuf,
        /// The block size asked for, in bytes.
        block_size: u32,
        /// The device's logical block size, in bytes.
        device_block_size: u32,
    },
    /// With O_DIRECT, whole logical blocks would not be aligned for the storage.
    #[error("namespace {}: direct = true needs I/O aligned to {align} bytes here (statx STATX_DIOALIGN) but block_size is {block_size}: set block_size to {align} or more, or direct = false", path.display())]
    DirectAlignment {
        /// The namespace path.
        path: PathBuf,
        /// The block size, in bytes.
        block_size: u32,
        /// The file offset alignment O_DIRECT needs, in bytes.
        align: u32,
    },
    /// The file system refuses O_DIRECT (tmpfs, for one).
    #[error("namespace file {}: the file system does not support O_DIRECT (direct = true): set direct = false, or put the file on a file system that does (ext4, xfs)", path.display())]
    DirectUnsupported {
        /// The namespace path.
        path: PathBuf,
    },
    /// The (existing or requested) size is not a whole number of logical blocks.
    #[error("namespace file {}: size {size} bytes is not a multiple of the block size {block_size}", path.display())]
    SizeNotMultiple {
        /// The namespace path.
        path: PathBuf,
        /// File size in bytes.
        size: u64,
        /// Logical block size in bytes.
        block_size: u32,
    },
    /// The file or device (or the size asked for) holds no logical block.
    #[error("namespace file {}: size is 0 bytes, a namespace needs at least one logical block", path.display())]
    Empty {
        /// The namespace path.
        path: PathBuf,
    },
    /// Another I/O error while opening, creating or sizing the file or device.
    #[error("namespace file {}: {op} failed: {source}", path.display())]
    Io {
        /// The namespace path.
        path: PathBuf,
        /// What was being done ("open", "create", "set size", "stat", "BLKGETSIZE64", ...).
        op: &'static str,
        /// The operating system's error.
        source: io::Error,
    },
}

/// How to open a [`Backend`] (see [`Backend::open_with`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct NamespaceOptions {
    /// When a file does not exist, create it, sparse, with this many bytes. Ignored
    /// (with a warning if it differs) when the file or device exists.
    pub create_size_bytes: Option<u64>,
    /// Logical block size in bytes: 512, 1024, 2048 or 4096 (NVMe LBA data size,
    /// LBADS = log2). `None`: 512 for a file, the device's logical block size
    /// (`BLKSSZGET`) for a block device.
    pub block_size: Option<u32>,
    /// Open with O_DIRECT (bypass the page cache). Default false.
    pub direct: bool,
    /// Serve the namespace read-only: the file or device is opened for reading only,
    /// a file under a shared lock (other read-only targets may share it, a read-write
    /// one may not), and commands that would change it are answered Namespace is Write
    /// Protected. Default false.
    pub read_only: bool,
}

/// What a namespace is backed by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BackendKind {
    /// A regular file.
    File,
    /// A block device (opened with `O_EXCL`).
    BlockDevice,
    /// No storage: reads zeroes, drops writes ([`memory`]).
    Null,
    /// Blocks in the target's memory ([`memory`]).
    Ram,
}

/// A namespace's back end: `nlb()` logical blocks of `block_size()` bytes, LBA `n` at
/// byte offset `n * block_size()` of the file or block device.
#[derive(Debug)]
pub struct Backend {
    file: File,
    path: PathBuf,
    kind: BackendKind,
    size_bytes: u64,
    block_size: u32,
    direct: bool,
    read_only: bool,
    /// Memory alignment O_DIRECT needs (1 without O_DIRECT).
    dio_mem_align: u32,
    created: bool,
    /// When the file was opened: the origin of `last_error_log_ms`.
    opened: Instant,
    /// Milliseconds after `opened` of the last I/O error log line; `u64::MAX`: none yet.
    last_error_log_ms: AtomicU64,
    /// I/O errors not logged since that line.
    errors_not_logged: AtomicU64,
    /// A null or RAM namespace's store (then `file` is `/dev/null`, never read).
    memory: Option<memory::MemoryStore>,
}

/// What [`file::open`] and [`block::open`] found.
#[derive(Debug)]
pub(crate) struct Opened {
    pub file: File,
    pub size_bytes: u64,
    pub block_size: u32,
    pub created: bool,
}

fn file_kind(ft: std::fs::FileType) -> &'static str {
    if ft.is_block_device() {
        "block device"
    } else if ft.is_char_device() {
        "character device"
    } else if ft.is_fifo() {
        "FIFO"
    } else if ft.is_socket() {
        "socket"
    } else {
        "special file"
    }
}

impl Backend {
    /// Opens the regular file or block device at `path` read-write through the page
    /// cache, creating a missing file sparse with `create_size_bytes` bytes when a size
    /// is given. `block_size` is the logical block size (512 or 4096; 1024 and 2048 also
    /// work).
    ///
    /// # Errors
    /// See [`Backend::open_with`].
    pub fn open(
        path: &Path,
        create_size_bytes: Option<u64>,
        block_size: u32,
    ) -> Result<Backend, NamespaceError> {
        Self::open_with(
            path,
            &NamespaceOptions {
                create_size_bytes,
                block_size: Some(block_size),
                direct: false,
                read_only: false,
            },
        )
    }

    /// Opens (or creates) a namespace back end with explicit options: a block device
    /// as `block::open` does, anything else as a file (`file::open`).
    ///
    /// # Errors
    /// A [`NamespaceError`] naming the path: missing file without a size, missing
    /// parent directory, a directory or other special file, no read-write permission, a
    /// block device in use (`EBUSY` from `O_EXCL`), a block size other than 512..=4096
    /// (power of two) or below the device's, a size of 0 or (for a file) not a multiple
    /// of the block size, O_DIRECT refused by the file system or with a block size
    /// below its alignment, or another I/O error.
    pub fn open_with(path: &Path, opts: &NamespaceOptions) -> Result<Backend, NamespaceError> {
        if let Some(block_size) = opts.block_size {
            if !(block_size.is_power_of_two() && (512..=4096).contains(&block_size)) {
                return Err(NamespaceError::BadBlockSize {
                    path: path.to_path_buf(),
                    block_size,
                });
            }
        }
        let meta = match std::fs::metadata(path) {
            Ok(m) => Some(m),
            Err(e) if e.kind() == io::ErrorKind::NotFound => None,
            Err(e) => return Err(open_error(path, "stat", e, opts)),
        };
        let (kind, opened) = match &meta {
            Some(m) if m.file_type().is_block_device() => {
                (BackendKind::BlockDevice, block::open(path, opts)?)
            }
            Some(m) if m.is_dir() => {
                return Err(NamespaceError::IsDirectory {
                    path: path.to_path_buf(),
                })
            }
            Some(m) if !m.is_file() => {
                return Err(NamespaceError::NotRegularFile {
                    path: path.to_path_buf(),
                    kind: file_kind(m.file_type()),
                })
            }
            _ => (BackendKind::File, file::open(path, opts, meta.is_some())?),
        };
        let dio_mem_align = if opts.direct {
            let (mem, offset) = dio_alignment(&opened.file).unwrap_or((0, 0));
            // Unknown (an old kernel): the logical block size is what O_DIRECT needs of
            // a block device, and the most a file system on one can need.
            let offset = if offset == 0 {
                opened.block_size
            } else {
                offset
            };
            if opened.block_size < offset {
                return Err(NamespaceError::DirectAlignment {
                    path: path.to_path_buf(),
                    block_size: opened.block_size,
                    align: offset,
                });
            }
            if mem == 0 {
                opened.block_size
            } else {
                mem
            }
        } else {
            1
        };
        Ok(Backend {
            file: opened.file,
            path: path.to_path_buf(),
            kind,
            size_bytes: opened.size_bytes,
            block_size: opened.block_size,
            direct: opts.direct,
            read_only: opts.read_only,
            dio_mem_align,
            created: opened.created,
            opened: Instant::now(),
            last_error_log_ms: AtomicU64::new(u64::MAX),
            errors_not_logged: AtomicU64::new(0),
            memory: None,
        })
    }

    /// A null (`kind` [`BackendKind::Null`]) or RAM ([`BackendKind::Ram`]) namespace of
    /// `size_bytes` in blocks of `block_size` (512 unless given; `read_only`: writes
    /// are answered Namespace is Write Protected), served by the poll
    /// groups without io_uring ([`memory`]). Its file is `/dev/null` (an io_uring fixed
    /// file that is never used), its path the words "null namespace" or "RAM
    /// namespace".
    ///
    /// # Errors
    /// [`NamespaceError::BadBlockSize`], [`NamespaceError::SizeNotMultiple`] or
    /// [`NamespaceError::Empty`] for the size; [`NamespaceError::Io`] when the memory
    /// cannot be mapped or `/dev/null` opened.
    pub fn open_memory(
        kind: BackendKind,
        size_bytes: u64,
        block_size: Option<u32>,
        read_only: bool,
    ) -> Result<Backend, NamespaceError> {
        let path = PathBuf::from(match kind {
            BackendKind::Ram => "RAM namespace",
            _ => "null namespace",
        });
        let block_size = block_size.unwrap_or(DEFAULT_FILE_BLOCK_SIZE);
        if !(block_size.is_power_of_two() && (512..=4096).contains(&block_size)) {
            return Err(NamespaceError::BadBlockSize { path, block_size });
        }
        check_size(&path, size_bytes, block_size)?;
        let io = |op, source| NamespaceError::Io {
            path: path.clone(),
            op,
            source,
        };
        let store = match kind {
            BackendKind::Ram => memory::MemoryStore::Ram(
                memory::RamStore::new(size_bytes).map_err(|e| io("map memory", e))?,
            ),
            _ => memory::MemoryStore::Null,
        };
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open("/dev/null")
            .map_err(|e| io("open /dev/null", e))?;
        Ok(Backend {
            file,
            path,
            kind: if matches!(kind, BackendKind::Ram) {
                BackendKind::Ram
            } else {
                BackendKind::Null
            },
            size_bytes,
            block_size,
            direct: false,
            read_only,
            dio_mem_align: 1,
            created: false,
            opened: Instant::now(),
            last_error_log_ms: AtomicU64::new(u64::MAX),
            errors_not_logged: AtomicU64::new(0),
            memory: Some(store),
        })
    }

    /// The store of a null or RAM namespace, which the poll groups serve themselves.
    pub fn memory(&self) -> Option<&memory::MemoryStore> {
        self.memory.as_ref()
    }

    /// Rate limit of the I/O error log (any poll group may call it): `Some(n)` when a
    /// failure at `now` should be logged, `n` being the failures not logged since the
    /// previous line; `None` (counted) when a line was logged less than
    /// [`ERROR_LOG_INTERVAL`] ago. The first failure is always logged.
    pub fn error_log_due(&self, now: Instant) -> Option<u64> {
        let now_ms = now.saturating_duration_since(self.opened).as_millis() as u64;
        let last = self.last_error_log_ms.load(Ordering::Relaxed);
        let due = last == u64::MAX
            || now_ms.saturating_sub(last) >= ERROR_LOG_INTERVAL.as_millis() as u64;
        if due
            && self
                .last_error_log_ms
                .compare_exchange(last, now_ms, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
        {
            return Some(self.errors_not_logged.swap(0, Ordering::Relaxed));
        }
        self.errors_not_logged.fetch_add(1, Ordering::Relaxed);
        None
    }

    /// Whether completed writes may sit in a volatile cache until a flush (the page
    /// cache, a device's write cache): the target advertises a volatile write cache
    /// (Identify Controller VWC 1) and flushes such namespaces when it shuts down.
    pub fn has_volatile_cache(&self) -> bool {
        self.memory.is_none()
    }

    /// Makes every completed write durable (`fdatasync`, what a Flush command does).
    ///
    /// # Errors
    /// The operating system's error (EIO: the storage failed).
    pub fn flush(&self) -> io::Result<()> {
        match self.memory {
            Some(_) => Ok(()),
            None => self.file.sync_data(),
        }
    }

    /// The open file's descriptor (for [`crate::uring::Ring::register_files`]); valid
    /// as long as this back end lives.
    pub fn fd(&self) -> RawFd {
        self.file.as_raw_fd()
    }

    /// The open file or device.
    pub fn file(&self) -> &File {
        &self.file
    }

    /// A file or a block device.
    pub fn kind(&self) -> BackendKind {
        self.kind
    }

    /// Size in bytes (a multiple of the block size), as found at open.
    pub fn size_bytes(&self) -> u64 {
        self.size_bytes
    }

    /// Logical block size in bytes.
    pub fn block_size(&self) -> u32 {
        self.block_size
    }

    /// log2 of the block size: the LBA Data Size (LBADS) of the LBA format, NVM Command
    /// Set 1.x Identify Namespace.
    pub fn lbads(&self) -> u8 {
        self.block_size.trailing_zeros() as u8
    }

    /// Number of logical blocks: Namespace Size (NSZE) and Capacity (NCAP).
    pub fn nlb(&self) -> u64 {
        self.size_bytes / u64::from(self.block_size)
    }

    /// The path as given.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Whether the file was created by this open.
    pub fn created(&self) -> bool {
        self.created
    }

    /// Whether the file or device is open with O_DIRECT.
    pub fn is_direct(&self) -> bool {
        self.direct
    }

    /// Whether the namespace is served read-only ([`NamespaceOptions::read_only`]).
    pub fn is_read_only(&self) -> bool {
        self.read_only
    }

    /// Alignment in bytes that I/O memory must have (O_DIRECT: statx
    /// `stx_dio_mem_align`, or the logical block size where the kernel does not say; 1
    /// without O_DIRECT).
    pub fn dio_mem_align(&self) -> u32 {
        self.dio_mem_align
    }

    /// Whether blocks `slba .. slba + nlb` lie in the namespace. `nlb` is a count of
    /// blocks (the NVMe NLB field plus one, as NLB is 0's based); a count of 0 is
    /// refused. Overflow-safe: a range whose end does not fit in u64 is out of range.
    /// A `false` answer is NVMe status LBA Out of Range (NVM Command Set 1.x, 80h).
    pub fn lba_range_check(&self, slba: u64, nlb: u64) -> bool {
        nlb != 0 && slba.checked_add(nlb).is_some_and(|end| end <= self.nlb())
    }

    /// The byte range `(offset, len)` of blocks `slba .. slba + nlb`, or `None` when
    /// [`Backend::lba_range_check`] refuses them. Cannot overflow: the range lies
    /// inside the file.
    pub fn byte_range(&self, slba: u64, nlb: u64) -> Option<(u64, u64)> {
        if !self.lba_range_check(slba, nlb) {
            return None;
        }
        let shift = self.block_size.trailing_zeros();
        Some((slba << shift, nlb << shift))
    }
}

impl AsRawFd for Backend {
    fn as_raw_fd(&self) -> RawFd {
        self.file.as_raw_fd()
    }
}

impl AsFd for Backend {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.file.as_fd()
    }
}

/// O_DIRECT alignment of an open file (`statx` `STATX_DIOALIGN`, Linux 6.1): memory and
/// file offset alignment in bytes, 0 where the kernel or file system does not say;
/// `None` when `statx` fails.
fn dio_alignment(file: &File) -> Option<(u32, u32)> {
    // SAFETY: a zeroed statx is a valid value of the plain C struct.
    let mut stx: libc::statx = unsafe { std::mem::zeroed() };
    // SAFETY: a valid fd, an empty C string with AT_EMPTY_PATH, and a statx to fill.
    let rc = unsafe {
        libc::statx(
            file.as_raw_fd(),
            c"".as_ptr(),
            libc::AT_EMPTY_PATH,
            libc::STATX_DIOALIGN,
            &mut stx,
        )
    };
    if rc != 0 {
        return None;
    }
    if stx.stx_mask & libc::STATX_DIOALIGN == 0 {
        return Some((0, 0));
    }
    Some((stx.stx_dio_mem_align, stx.stx_dio_offset_align))
}

fn check_size(path: &Path, size: u64, block_size: u32) -> Result<(), NamespaceError> {
    if size == 0 {
        return Err(NamespaceError::Empty {
            path: path.to_path_buf(),
        });
    }
    if !size.is_multiple_of(u64::from(block_size)) {
        return Err(NamespaceError::SizeNotMultiple {
            path: path.to_path_buf(),
            size,
            block_size,
        });
    }
    Ok(())
}

/// The [`NamespaceError`] for `source`, the error of `op` ("open", "create", "stat")
/// on `path` opened with `opts`.
fn open_error(
    path: &Path,
    op: &'static str,
    source: io::Error,
    opts: &NamespaceOptions,
) -> NamespaceError {
    let need = match (op, opts.read_only) {
        ("create", _) => access::Need::Create,
        (_, true) => access::Need::Read,
        (_, false) => access::Need::ReadWrite,
    };
    let path_buf = path.to_path_buf();
    let path = path_buf;
    match source.kind() {
        io::ErrorKind::PermissionDenied => NamespaceError::PermissionDenied {
            reason: access::explain(&path, need),
            path,
            source,
        },
        io::ErrorKind::NotFound if op == "open" => NamespaceError::NotFound { path },
        _ if opts.direct && source.raw_os_error() == Some(libc::EINVAL) => {
            NamespaceError::DirectUnsupported { path }
        }
        _ => NamespaceError::Io { path, op, source },
    }
}

/// Takes a file namespace's lock ([`lock`]): shared when `read_only`, else exclusive.
///
/// # Errors
/// [`NamespaceError::Locked`] when another open file holds a conflicting lock;
/// [`NamespaceError::Io`] when `flock` fails otherwise.
fn lock_file(path: &Path, file: &File, read_only: bool) -> Result<(), NamespaceError> {
    lock::lock(file, read_only).map_err(|e| match e {
        lock::LockError::Held(holder) => NamespaceError::Locked {
            path: path.to_path_buf(),
            holder,
            read_only,
        },
        lock::LockError::Os(source) => NamespaceError::Io {
            path: path.to_path_buf(),
            op: "flock",
            source,
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::{MetadataExt, PermissionsExt};

    /// A fresh directory on the ext4 temp dir (never /dev/shm).
    fn temp_dir() -> tempfile::TempDir {
        tempfile::tempdir_in(std::env::temp_dir()).unwrap()
    }

    #[test]
    fn missing_file_without_size_names_the_path() {
        let dir = temp_dir();
        let path = dir.path().join("absent.img");
        let err = Backend::open(&path, None, 512).unwrap_err();
        assert!(matches!(err, NamespaceError::NotFound { .. }), "{err}");
        let msg = err.to_string();
        assert!(msg.contains(&path.display().to_string()), "{msg}");
        assert!(msg.contains("does not exist"), "{msg}");
        assert!(!path.exists());
    }

    #[test]
    fn creates_sparse_file() {
        let dir = temp_dir();
        let path = dir.path().join("ns1.img");
        let ns = Backend::open(&path, Some(1 << 30), 512).unwrap();
        assert!(ns.created());
        assert_eq!(ns.size_bytes(), 1 << 30);
        assert_eq!(ns.nlb(), (1 << 30) / 512);
        assert_eq!(ns.block_size(), 512);
        assert_eq!(ns.lbads(), 9);
        assert_eq!(ns.path(), path.as_path());
        assert!(ns.fd() >= 0);
        let meta = std::fs::metadata(&path).unwrap();
        assert_eq!(meta.len(), 1 << 30);
        assert_eq!(meta.blocks(), 0, "sparse: no blocks allocated");
        assert_eq!(meta.permissions().mode() & 0o777, 0o644);
        drop(ns);
        // Reopening uses the existing file and its size.
        let ns = Backend::open(&path, None, 4096).unwrap();
        assert!(!ns.created());
        assert_eq!(ns.nlb(), (1 << 30) / 4096);
        drop(ns);
        let ns = Backend::open(&path, Some(4096), 4096).unwrap();
        assert_eq!(ns.size_bytes(), 1 << 30, "existing size wins");
    }

    /// A second open of a served file is refused, naming the file and the holder;
    /// read-only namespaces share a file, but not with a read-write one.
    #[test]
    fn a_served_file_is_locked() {
        let dir = temp_dir();
        let path = dir.path().join("shared.img");
        let rw = Backend::open(&path, Some(1 << 20), 512).unwrap();
        let err = Backend::open(&path, None, 512).unwrap_err();
        assert!(matches!(err, NamespaceError::Locked { .. }), "{err}");
        let msg = err.to_string();
        let me = format!("(pid {})", std::process::id());
        for want in [path.display().to_string(), me.clone(), "exclusive".into()] {
            assert!(msg.contains(&want), "missing {want:?}: {msg}");
        }
        let ro = NamespaceOptions {
            read_only: true,
            ..NamespaceOptions::default()
        };
        assert!(matches!(
            Backend::open_with(&path, &ro),
            Err(NamespaceError::Locked {
                read_only: true,
                ..
            })
        ));
        drop(rw);
        let a = Backend::open_with(&path, &ro).unwrap();
        let b = Backend::open_with(&path, &ro).unwrap();
        assert!(a.is_read_only() && b.is_read_only());
        // SAFETY: fcntl F_GETFL on an fd we own.
        let flags = unsafe { libc::fcntl(a.fd(), libc::F_GETFL) };
        assert_eq!(flags & libc::O_ACCMODE, libc::O_RDONLY);
        let err = Backend::open(&path, None, 512).unwrap_err();
        assert!(
            err.to_string().contains("a shared (read-only) lock"),
            "{err}"
        );
        // A read-only namespace is never created.
        let absent = dir.path().join("absent.img");
        let ro_create = NamespaceOptions {
            create_size_bytes: Some(1 << 20),
            ..ro
        };
        assert!(matches!(
            Backend::open_with(&absent, &ro_create),
            Err(NamespaceError::NotFound { .. })
        ));
        assert!(!absent.exists());
    }

    #[test]
    fn directory_is_refused() {
        let dir = temp_dir();
        let err = Backend::open(dir.path(), Some(1 << 20), 512).unwrap_err();
        assert!(matches!(err, NamespaceError::IsDirectory { .. }), "{err}");
        assert!(err.to_string().contains(&dir.path().display().to_string()));
        assert!(err.to_string().contains("directory"));
    }

    #[test]
    fn missing_parent_is_not_created() {
        let dir = temp_dir();
        let path = dir.path().join("no/such/dir/ns.img");
        let err = Backend::open(&path, Some(1 << 20), 512).unwrap_err();
        assert!(matches!(err, NamespaceError::ParentMissing { .. }), "{err}");
        assert!(err.to_string().contains(&path.display().to_string()));
        assert!(!dir.path().join("no").exists());
    }

    #[test]
    fn sizes_must_be_whole_blocks() {
        let dir = temp_dir();
        let path = dir.path().join("odd.img");
        let err = Backend::open(&path, Some(1000), 512).unwrap_err();
        assert!(
            matches!(
                err,
                NamespaceError::SizeNotMultiple {
                    size: 1000,
                    block_size: 512,
                    ..
                }
            ),
            "{err}"
        );
        assert!(err.to_string().contains(&path.display().to_string()));
        assert!(!path.exists(), "nothing created for a bad size");
        let err = Backend::open(&path, Some(0), 512).unwrap_err();
        assert!(matches!(err, NamespaceError::Empty { .. }), "{err}");

        // An existing file of 6144 bytes: fine at 512, not at 4096.
        std::fs::write(&path, vec![1u8; 6144]).unwrap();
        assert_eq!(Backend::open(&path, None, 512).unwrap().nlb(), 12);
        let err = Backend::open(&path, None, 4096).unwrap_err();
        assert!(
            matches!(err, NamespaceError::SizeNotMultiple { size: 6144, .. }),
            "{err}"
        );
        std::fs::write(&path, b"").unwrap();
        let err = Backend::open(&path, None, 512).unwrap_err();
        assert!(matches!(err, NamespaceError::Empty { .. }), "{err}");
    }

    #[test]
    fn bad_block_size_is_refused() {
        let dir = temp_dir();
        let path = dir.path().join("bs.img");
        for bs in [0, 256, 1000, 8192] {
            let err = Backend::open(&path, Some(1 << 20), bs).unwrap_err();
            assert!(matches!(err, NamespaceError::BadBlockSize { .. }), "{err}");
            assert!(err.to_string().contains(&path.display().to_string()));
        }
        assert!(!path.exists());
    }

    #[test]
    fn unwritable_file_is_refused() {
        let dir = temp_dir();
        let path = dir.path().join("ro.img");
        std::fs::write(&path, vec![0u8; 4096]).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o444)).unwrap();
        // SAFETY: geteuid has no preconditions.
        let root = unsafe { libc::geteuid() } == 0;
        // root bypasses file modes (CAP_DAC_OVERRIDE) but not the immutable attribute.
        let immutable = root
            && std::process::Command::new("chattr")
                .arg("+i")
                .arg(&path)
                .status()
                .is_ok_and(|s| s.success());
        if root && !immutable {
            eprintln!("running as root without chattr: permission check not testable");
            return;
        }
        let err = Backend::open(&path, None, 512).unwrap_err();
        if immutable {
            let _ = std::process::Command::new("chattr")
                .arg("-i")
                .arg(&path)
                .status();
        }
        assert!(
            matches!(err, NamespaceError::PermissionDenied { .. }),
            "{err}"
        );
        let msg = err.to_string();
        assert!(msg.contains(&path.display().to_string()), "{msg}");
        assert!(msg.contains("permission denied"), "{msg}");
    }

    #[test]
    fn special_files_are_refused() {
        let err = Backend::open(Path::new("/dev/null"), None, 512).unwrap_err();
        assert!(
            matches!(
                err,
                NamespaceError::NotRegularFile {
                    kind: "character device",
                    ..
                }
            ),
            "{err}"
        );
        assert!(err.to_string().contains("/dev/null"));
    }

    #[test]
    fn lba_range_check_is_overflow_safe() {
        let dir = temp_dir();
        let ns = Backend::open(&dir.path().join("r.img"), Some(1 << 20), 4096).unwrap();
        let n = ns.nlb();
        assert_eq!(n, 256);
        assert!(ns.lba_range_check(0, 1));
        assert!(ns.lba_range_check(0, n));
        assert!(ns.lba_range_check(n - 1, 1));
        assert!(!ns.lba_range_check(n - 1, 2));
        assert!(!ns.lba_range_check(n, 1));
        assert!(!ns.lba_range_check(0, 0));
        assert!(!ns.lba_range_check(u64::MAX, 1));
        assert!(!ns.lba_range_check(1, u64::MAX));
        assert!(!ns.lba_range_check(u64::MAX, u64::MAX));
        assert_eq!(ns.byte_range(2, 3), Some((8192, 12288)));
        assert_eq!(ns.byte_range(n - 1, 1), Some(((n - 1) * 4096, 4096)));
        assert_eq!(ns.byte_range(u64::MAX / 4096 + 1, 1), None);
    }

    #[test]
    fn error_log_is_rate_limited() {
        let dir = temp_dir();
        let ns = Backend::open(&dir.path().join("e.img"), Some(1 << 20), 512).unwrap();
        let t0 = Instant::now();
        assert_eq!(ns.error_log_due(t0), Some(0), "the first failure is logged");
        assert_eq!(ns.error_log_due(t0), None);
        assert_eq!(ns.error_log_due(t0 + Duration::from_millis(500)), None);
        assert_eq!(
            ns.error_log_due(t0 + ERROR_LOG_INTERVAL),
            Some(2),
            "one line per interval, with the count of those not logged"
        );
        assert_eq!(ns.error_log_due(t0 + ERROR_LOG_INTERVAL), None);
    }

    #[test]
    fn direct_io_open_on_ext4() {
        let dir = temp_dir();
        let path = dir.path().join("direct.img");
        let opts = NamespaceOptions {
            create_size_bytes: Some(1 << 20),
            block_size: Some(4096),
            direct: true,
            read_only: false,
        };
        let ns = Backend::open_with(&path, &opts).unwrap();
        assert!(ns.is_direct());
        // SAFETY: fcntl F_GETFL on an fd we own.
        let flags = unsafe { libc::fcntl(ns.fd(), libc::F_GETFL) };
        assert_ne!(flags & libc::O_DIRECT, 0);
        assert_eq!(ns.kind(), BackendKind::File);
        assert!(ns.dio_mem_align().is_power_of_two() && ns.dio_mem_align() <= 4096);
        drop(ns);
        let ns = Backend::open(&path, None, 4096).unwrap();
        // SAFETY: as above.
        let flags = unsafe { libc::fcntl(ns.fd(), libc::F_GETFL) };
        assert_eq!(flags & libc::O_DIRECT, 0, "page cache by default");
    }
}
