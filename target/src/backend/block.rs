//! Block devices as namespaces (Linux nvmet's `io-cmd-bdev.c`): an SSD, a partition, a
//! loop or device-mapper device, opened read-write with `O_EXCL` as nvmet does, so a
//! device that is mounted or that another program holds exclusively (another target,
//! a RAID or LVM member) is refused rather than served twice. Size from
//! `BLKGETSIZE64`, logical block size from `BLKSSZGET` (`ioctl_blk(4)`).
use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use super::{open_error, NamespaceError, NamespaceOptions, Opened};

// BLKGETSIZE64: _IOR(0x12, 114, size_t), the size in bytes (linux/fs.h).
nix::ioctl_read!(blkgetsize64, 0x12, 114, u64);
// BLKSSZGET: _IO(0x12, 104), the logical block size in bytes, an int.
nix::ioctl_read_bad!(blksszget, libc::BLKSSZGET, libc::c_int);

/// Size in bytes of the block device open as `file` (`BLKGETSIZE64`).
///
/// # Errors
/// The `ioctl(2)` error (`ENOTTY` for something that is not a block device).
pub fn size_bytes(file: &File) -> io::Result<u64> {
    let mut size = 0u64;
    // SAFETY: a valid fd and a u64 for the kernel to fill.
    unsafe { blkgetsize64(file.as_raw_fd(), &mut size) }.map_err(io::Error::from)?;
    Ok(size)
}

/// Logical block size in bytes of the block device open as `file` (`BLKSSZGET`).
///
/// # Errors
/// The `ioctl(2)` error (`ENOTTY` for something that is not a block device).
pub fn logical_block_size(file: &File) -> io::Result<u32> {
    let mut lbs: libc::c_int = 0;
    // SAFETY: a valid fd and an int for the kernel to fill.
    unsafe { blksszget(file.as_raw_fd(), &mut lbs) }.map_err(io::Error::from)?;
    u32::try_from(lbs).map_err(|_| io::Error::other(format!("BLKSSZGET returned {lbs}")))
}

/// Opens the block device at `path` read-write (read-only with `opts.read_only`) with
/// `O_EXCL` (and O_DIRECT with `opts.direct`). The namespace's block size is `opts.block_size` when given (at least
/// the device's logical block size), else the device's; a size asked for is ignored
/// (logged when it differs). A trailing part smaller than a block is not used.
///
/// # Errors
/// [`NamespaceError`]: `Busy` (`EBUSY`: mounted or held exclusively),
/// `PermissionDenied`, `BlockSizeBelowDevice`, `Empty` (smaller than a block), `Io`
/// (the open or an ioctl).
pub(crate) fn open(path: &Path, opts: &NamespaceOptions) -> Result<Opened, NamespaceError> {
    let mut flags = libc::O_EXCL;
    if opts.direct {
        flags |= libc::O_DIRECT;
    }
    let file = OpenOptions::new()
        .read(true)
        .write(!opts.read_only)
        .custom_flags(flags)
        .open(path)
        .map_err(|e| match e.raw_os_error() {
            Some(libc::EBUSY) => NamespaceError::Busy {
                path: path.to_path_buf(),
            },
            _ => open_error(path, "open", e, opts),
        })?;
    let io_err = |op, source| NamespaceError::Io {
        path: path.to_path_buf(),
        op,
        source,
    };
    let device_size = size_bytes(&file).map_err(|e| io_err("BLKGETSIZE64", e))?;
    let device_block_size = logical_block_size(&file).map_err(|e| io_err("BLKSSZGET", e))?;
    let block_size = match opts.block_size {
        Some(b) if b < device_block_size => {
            return Err(NamespaceError::BlockSizeBelowDevice {
                path: path.to_path_buf(),
                block_size: b,
                device_block_size,
            })
        }
        Some(b) => b,
        None => device_block_size,
    };
    let size_bytes = device_size / u64::from(block_size) * u64::from(block_size);
    if size_bytes == 0 {
        return Err(NamespaceError::Empty {
            path: path.to_path_buf(),
        });
    }
    if let Some(asked) = opts.create_size_bytes {
        if asked != size_bytes {
            tracing::warn!(
                path = %path.display(),
                device = size_bytes,
                asked,
                "namespace on a block device: its size is the device's"
            );
        }
    }
    tracing::info!(
        path = %path.display(),
        size_bytes,
        block_size,
        device_block_size,
        direct = opts.direct,
        "opened block device namespace (O_EXCL)"
    );
    Ok(Opened {
        file,
        size_bytes,
        block_size,
        created: false,
    })
}
