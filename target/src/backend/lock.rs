//! One namespace file, one target: a file namespace holds an advisory `flock(2)` on its
//! open file for as long as it is served, exclusive for a read-write namespace, shared
//! for a read-only one. A second target (ours, or anything else that locks) exporting
//! the same file is refused with a message naming the file and the holder, instead of
//! two daemons writing one namespace at once. Block devices have `O_EXCL` for this
//! (see [`super::block`]).
//!
//! `flock` rather than POSIX record locks: a POSIX lock is dropped when the process
//! closes *any* descriptor of the file, and an OFD lock shows no owner. A `flock` is
//! tied to the open file description (released when the last descriptor of it closes,
//! also when the process dies) and `/proc/locks` lists the PID that took it, which the
//! refusal quotes.
use std::fs::File;
use std::os::fd::AsRawFd;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::time::{Duration, Instant};

/// Who holds the lock that refused ours, as `/proc/locks` shows it. A holder without a
/// name has exited (its lock outlived it, see [`EXITED_HOLDER_WAIT`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LockHolder {
    /// The process that took the lock.
    pub pid: u32,
    /// Its command name (`/proc/<pid>/comm`), when readable.
    pub name: Option<String>,
    /// Its lock is exclusive (a read-write namespace), not shared (read-only).
    pub exclusive: bool,
}

/// "nvmf-target (pid 4242) holds an exclusive lock on it".
impl std::fmt::Display for LockHolder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.name {
            Some(n) => write!(f, "{n} (pid {})", self.pid)?,
            None => write!(f, "pid {}", self.pid)?,
        }
        let kind = if self.exclusive {
            "an exclusive (read-write)"
        } else {
            "a shared (read-only)"
        };
        write!(f, " holds {kind} lock on it")
    }
}

/// Why the lock was not taken.
#[derive(Debug)]
pub(crate) enum LockError {
    /// Another open file description holds a conflicting lock (`EWOULDBLOCK`).
    Held(Option<LockHolder>),
    /// `flock` failed otherwise.
    Os(std::io::Error),
}

/// How long a namespace open waits for a file lock whose holder has exited: a target killed with
/// SIGKILL leaves its io_uring ring (which holds the namespace file as a fixed file) to
/// the kernel's deferred teardown, and the lock goes with the file shortly after.
pub const EXITED_HOLDER_WAIT: Duration = Duration::from_secs(3);

/// Takes a non-blocking `flock` on `file`: exclusive, or shared when `shared`. A lock
/// held by a process that has exited (or that `/proc/locks` does not name) is waited
/// for, up to [`EXITED_HOLDER_WAIT`]; a live holder is reported at once.
pub(crate) fn lock(file: &File, shared: bool) -> Result<(), LockError> {
    let op = if shared { libc::LOCK_SH } else { libc::LOCK_EX } | libc::LOCK_NB;
    let start = Instant::now();
    loop {
        // SAFETY: flock on a valid open descriptor; no memory is passed.
        if unsafe { libc::flock(file.as_raw_fd(), op) } == 0 {
            return Ok(());
        }
        let e = std::io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::EWOULDBLOCK) {
            return Err(LockError::Os(e));
        }
        let holder = file.metadata().ok().and_then(|m| {
            let locks = std::fs::read_to_string("/proc/locks").ok()?;
            holder_in(&locks, m.dev(), m.ino())
        });
        let alive = holder.is_some_and(|(pid, _)| Path::new(&format!("/proc/{pid}")).exists());
        if alive || start.elapsed() >= EXITED_HOLDER_WAIT {
            return Err(LockError::Held(holder.map(|(pid, exclusive)| {
                LockHolder {
                    pid,
                    name: std::fs::read_to_string(format!("/proc/{pid}/comm"))
                        .ok()
                        .map(|s| s.trim_end().to_string()),
                    exclusive,
                }
            })));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The PID of a granted `FLOCK` on the file `dev`:`ino` in `/proc/locks` text, and
/// whether it is exclusive (`WRITE`); the lines read
/// `1: FLOCK  ADVISORY  WRITE 4242 fd:01:1234567 0 EOF` (the device as major:minor in
/// hex, the inode in decimal; lines starting `->` are waiters).
fn holder_in(locks: &str, dev: u64, ino: u64) -> Option<(u32, bool)> {
    let want = format!("{:02x}:{:02x}:{ino}", libc::major(dev), libc::minor(dev));
    locks.lines().find_map(|l| {
        let mut f = l.split_whitespace();
        let first = f.next()?;
        if first == "->" {
            return None;
        }
        let (kind, _, mode, pid, file) = (f.next()?, f.next()?, f.next()?, f.next()?, f.next()?);
        (kind == "FLOCK" && file == want)
            .then(|| Some((pid.parse().ok()?, mode == "WRITE")))
            .flatten()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_locks_lines_name_the_holder() {
        let dev = libc::makedev(0xfd, 0x01);
        let text = "1: POSIX  ADVISORY  WRITE 111 fd:01:42 0 EOF\n\
                    2: FLOCK  ADVISORY  WRITE 4242 fd:01:42 0 EOF\n\
                    2: -> FLOCK  ADVISORY  WRITE 5151 fd:01:42 0 EOF\n\
                    3: FLOCK  ADVISORY  READ 77 fd:01:43 0 EOF\n";
        assert_eq!(holder_in(text, dev, 42), Some((4242, true)));
        assert_eq!(holder_in(text, dev, 43), Some((77, false)));
        assert_eq!(holder_in(text, dev, 44), None);
        assert_eq!(holder_in("garbage\n\n3:\n", dev, 42), None);
    }

    #[test]
    fn a_second_exclusive_lock_is_refused_and_names_this_process() {
        let f = tempfile::NamedTempFile::new_in(std::env::temp_dir()).unwrap();
        let a = f.reopen().unwrap();
        let b = f.reopen().unwrap();
        lock(&a, false).unwrap();
        match lock(&b, false) {
            Err(LockError::Held(Some(h))) => {
                assert_eq!((h.pid, h.exclusive), (std::process::id(), true));
                assert!(h.to_string().contains(&format!("pid {}", h.pid)), "{h}");
                assert!(h.to_string().contains("exclusive"), "{h}");
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(lock(&b, true), Err(LockError::Held(_))));
        drop(a);
        lock(&b, false).expect("free once the holder's file is closed");
        // Shared locks share.
        let c = f.reopen().unwrap();
        let d = f.reopen().unwrap();
        drop(b);
        lock(&c, true).unwrap();
        lock(&d, true).unwrap();
    }
}
