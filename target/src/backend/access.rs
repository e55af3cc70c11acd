//! Which part of a namespace path denied access, in words: the operator should not
//! have to guess whether the file or one of its directories is at fault, nor which
//! permission is missing.
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use nix::unistd::{access, AccessFlags};

/// What the namespace needed of its path when the kernel said `EACCES`/`EPERM`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Need {
    /// Create the file (write and search permission on its directory).
    Create,
    /// Open the file for reading and writing.
    ReadWrite,
    /// Open the file for reading (a read-only namespace).
    Read,
}

/// `path`'s mode and owner, as "mode 0755, owner uid 0".
fn mode_owner(path: &Path) -> String {
    match std::fs::metadata(path) {
        Ok(m) => format!(
            "mode {:04o}, owner uid {}",
            m.permissions().mode() & 0o7777,
            m.uid()
        ),
        Err(_) => "mode unknown".to_string(),
    }
}

/// The reason `path` refused `need` to this process: the first directory on the way
/// without search (x) permission; for [`Need::Create`] the parent directory without
/// write permission; otherwise the file without the read (and write) permission; and
/// when the modes allow it all, the likely causes beyond modes.
pub(crate) fn explain(path: &Path, need: Need) -> String {
    let uid = nix::unistd::getuid();
    let full: PathBuf = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
    let parent = full.parent().map(Path::to_path_buf);
    // Directories from the root down to the parent.
    let mut dirs: Vec<&Path> = full.ancestors().skip(1).collect();
    dirs.reverse();
    for dir in dirs {
        if access(dir, AccessFlags::X_OK).is_err() {
            return format!(
                "directory {} ({}) gives uid {uid} no search (x) permission, which reaching \
                 the file needs: `chmod o+x {}` or a directory this user can reach",
                dir.display(),
                mode_owner(dir),
                dir.display()
            );
        }
    }
    match (need, parent) {
        (Need::Create, Some(dir)) => {
            if access(&dir, AccessFlags::W_OK).is_err() {
                return format!(
                    "directory {} ({}) gives uid {uid} no write permission, which creating the \
                     file in it needs: create the file beforehand as a user who may \
                     (`truncate -s SIZE {}` and give it to uid {uid}), or choose a directory \
                     this user can write",
                    dir.display(),
                    mode_owner(&dir),
                    full.display()
                );
            }
        }
        (Need::Create, None) => {}
        (Need::ReadWrite | Need::Read, _) => {
            let (flags, words) = match need {
                Need::Read => (AccessFlags::R_OK, "read"),
                _ => (AccessFlags::R_OK | AccessFlags::W_OK, "read and write"),
            };
            if access(&full, flags).is_err() {
                let ro = match need {
                    Need::ReadWrite => "; a read-only namespace (read_only = true) needs read only",
                    _ => "",
                };
                return format!(
                    "the file ({}) gives uid {uid} no {words} permission, which serving it \
                     needs: `chmod`/`chown` it{ro}",
                    mode_owner(&full)
                );
            }
        }
    }
    "the permission bits allow it, so something beyond them refused: an immutable or \
     append-only attribute (`lsattr`), a read-only bind mount, or a security module \
     (SELinux, AppArmor)"
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn root() -> bool {
        nix::unistd::geteuid().is_root()
    }

    #[test]
    fn names_the_directory_or_the_file_at_fault() {
        let dir = tempfile::tempdir_in(std::env::temp_dir()).unwrap();
        let locked = dir.path().join("locked");
        std::fs::create_dir(&locked).unwrap();
        let file = dir.path().join("ro.img");
        std::fs::write(&file, b"x").unwrap();
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o444)).unwrap();
        std::fs::set_permissions(&locked, std::fs::Permissions::from_mode(0o555)).unwrap();
        if root() {
            // Root passes every mode check (CAP_DAC_OVERRIDE): only the last resort
            // can be said, and it is.
            let why = explain(&locked.join("ns.img"), Need::Create);
            assert!(why.contains("beyond them"), "{why}");
            return;
        }
        let why = explain(&locked.join("ns.img"), Need::Create);
        assert!(
            why.contains(&locked.display().to_string()) && why.contains("no write permission"),
            "{why}"
        );
        assert!(why.contains("mode 0555"), "{why}");
        let why = explain(&file, Need::ReadWrite);
        assert!(why.contains("no read and write permission"), "{why}");
        assert!(
            why.contains("mode 0444") && why.contains("read_only"),
            "{why}"
        );
        assert!(explain(&file, Need::Read).contains("beyond them"));
        std::fs::set_permissions(&locked, std::fs::Permissions::from_mode(0o000)).unwrap();
        let why = explain(&locked.join("ns.img"), Need::ReadWrite);
        assert!(why.contains("no search (x) permission"), "{why}");
        assert!(why.contains(&locked.display().to_string()), "{why}");
        std::fs::set_permissions(&locked, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
}
