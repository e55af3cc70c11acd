//! Regular files as namespaces (Linux nvmet's `io-cmd-file.c`): opened read-write (or
//! read-only for a read-only namespace), created sparse when missing and a size is
//! given, and locked for as long as they are served ([`super::lock`]).
use std::fs::OpenOptions;
use std::io;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use super::{check_size, lock_file, open_error, NamespaceError, NamespaceOptions, Opened};

/// Opens the regular file at `path` (`exists`: it was found), or creates it when it is
/// missing and `opts.create_size_bytes` is given: only if its parent directory exists,
/// with mode 0644, sized with `ftruncate` so it takes no blocks until written. An
/// existing file keeps its size (a different size asked for is logged). The block size
/// is `opts.block_size` or 512; the size must be a whole number of blocks. The open
/// file is locked: exclusively, or shared when `opts.read_only` (which also opens it
/// read-only; a read-only namespace is never created).
///
/// # Errors
/// [`NamespaceError`]: `NotFound` (no size, or read-only and missing), `ParentMissing`,
/// `PermissionDenied` (naming the path that refused and the access needed), `Locked`
/// (another process serves the file), `DirectUnsupported` (O_DIRECT refused with
/// `EINVAL`), `SizeNotMultiple`, `Empty`, `Io`.
pub(crate) fn open(
    path: &Path,
    opts: &NamespaceOptions,
    exists: bool,
) -> Result<Opened, NamespaceError> {
    let path_buf = path.to_path_buf();
    let block_size = opts.block_size.unwrap_or(super::DEFAULT_FILE_BLOCK_SIZE);
    if let Some(size) = opts.create_size_bytes {
        check_size(path, size, block_size)?;
    }
    let mut oo = OpenOptions::new();
    oo.read(true).write(!opts.read_only);
    if opts.direct {
        oo.custom_flags(libc::O_DIRECT);
    }
    let mut created = false;
    let file = if exists {
        let file = oo
            .open(path)
            .map_err(|e| open_error(path, "open", e, opts))?;
        lock_file(path, &file, opts.read_only)?;
        file
    } else {
        let Some(size) = opts.create_size_bytes.filter(|_| !opts.read_only) else {
            return Err(NamespaceError::NotFound { path: path_buf });
        };
        let parent = match path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        };
        if !parent.is_dir() {
            return Err(NamespaceError::ParentMissing {
                path: path_buf,
                parent,
            });
        }
        let file = oo
            .create_new(true)
            .mode(0o644)
            .open(path)
            .map_err(|e| open_error(path, "create", e, opts))?;
        // Created by this open, so no other target had it: the lock is free.
        lock_file(path, &file, false)?;
        file.set_len(size).map_err(|source| NamespaceError::Io {
            path: path_buf.clone(),
            op: "set size",
            source,
        })?;
        created = true;
        tracing::info!(path = %path.display(), size, "created sparse namespace file");
        file
    };
    let size_bytes = file
        .metadata()
        .map_err(|source: io::Error| NamespaceError::Io {
            path: path_buf.clone(),
            op: "stat",
            source,
        })?
        .len();
    if let Some(asked) = opts.create_size_bytes {
        if !created && asked != size_bytes {
            tracing::warn!(
                path = %path.display(),
                existing = size_bytes,
                asked,
                "namespace file exists: keeping its size"
            );
        }
    }
    check_size(path, size_bytes, block_size)?;
    Ok(Opened {
        file,
        size_bytes,
        block_size,
        created,
    })
}
