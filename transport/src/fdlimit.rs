//! The process's open-file limit (`RLIMIT_NOFILE`, getrlimit(2)).
//!
//! The soft provider opens one UDP send socket per QP (its source port is the QP's
//! flow, [`crate::soft::socket::bind_tx_socket`]), so a target serving 1024 I/O queues
//! needs more than the common soft limit of 1024 descriptors. The binaries raise the
//! soft limit to the hard one when they start ([`raise_soft_to_hard`], what Go's
//! runtime and systemd's services do), and running out anyway is a [`NofileError`] that
//! names the limit and how to raise it, not a bare `EMFILE`.
use std::io;

use nix::sys::resource::{getrlimit, setrlimit, Resource};

/// `RLIMIT_NOFILE` of this process: the soft limit (what `open`/`socket` are checked
/// against) and the hard limit (the most an unprivileged process may raise it to).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NofileLimit {
    /// Soft limit, descriptors (`libc::RLIM_INFINITY` for none).
    pub soft: u64,
    /// Hard limit, descriptors (`libc::RLIM_INFINITY` for none).
    pub hard: u64,
}

impl NofileLimit {
    /// The limit now. Errors: getrlimit(2)'s (none expected on Linux).
    pub fn of_process() -> io::Result<NofileLimit> {
        let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE).map_err(io::Error::from)?;
        Ok(NofileLimit { soft, hard })
    }
}

/// Raises the soft `RLIMIT_NOFILE` to the hard limit (capped at the kernel's
/// `fs.nr_open` where the hard limit is infinite). Returns the limit before and after.
/// Errors: setrlimit(2)'s (EPERM cannot happen when only the soft limit moves up to
/// the hard one).
pub fn raise_soft_to_hard() -> io::Result<(NofileLimit, NofileLimit)> {
    let before = NofileLimit::of_process()?;
    let mut target = before.hard;
    if target == libc::RLIM_INFINITY {
        // setrlimit refuses more than fs.nr_open (EPERM).
        target = std::fs::read_to_string("/proc/sys/fs/nr_open")
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(1 << 20);
    }
    if before.soft != libc::RLIM_INFINITY && before.soft < target {
        setrlimit(Resource::RLIMIT_NOFILE, target, before.hard).map_err(io::Error::from)?;
    }
    Ok((before, NofileLimit::of_process()?))
}

/// The process ran out of file descriptors (EMFILE, or ENFILE: the whole system's
/// `fs.file-max`) while opening a QP's socket. The message states the limit and the
/// fixes.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{}", nofile_words(*.limit, *.system))]
pub struct NofileError {
    /// The limit when it happened (`None`: it could not be read).
    pub limit: Option<NofileLimit>,
    /// ENFILE: the system-wide table is full, not this process's limit.
    pub system: bool,
}

impl NofileError {
    /// The error for an `io::Error` of EMFILE or ENFILE; `None` for anything else.
    pub fn from_io(e: &io::Error) -> Option<NofileError> {
        let system = match e.raw_os_error() {
            Some(libc::EMFILE) => false,
            Some(libc::ENFILE) => true,
            _ => return None,
        };
        Some(NofileError {
            limit: NofileLimit::of_process().ok(),
            system,
        })
    }
}

fn show(v: u64) -> String {
    if v == libc::RLIM_INFINITY {
        "unlimited".to_string()
    } else {
        v.to_string()
    }
}

fn nofile_words(limit: Option<NofileLimit>, system: bool) -> String {
    if system {
        return "no file descriptor left in the whole system (ENFILE) for a QP's UDP socket \
                (the soft provider opens one per QP): raise `fs.file-max` (sysctl) or close \
                other programs' files"
            .to_string();
    }
    let (soft, hard) = match limit {
        Some(l) => (show(l.soft), show(l.hard)),
        None => ("?".to_string(), "?".to_string()),
    };
    format!(
        "no file descriptor left for a QP's UDP socket: the soft provider opens one per QP, \
         and this process's open-file limit RLIMIT_NOFILE is {soft} (hard limit {hard}); \
         raise it: `ulimit -n <N>` in the shell that starts it (up to the hard limit; root \
         or /etc/security/limits.conf `nofile` above it), `LimitNOFILE=<N>` in a systemd \
         unit, or `prlimit --nofile=<N>:<N> --pid <PID>`; nvmf-target and nvmf-bench raise \
         the soft limit to the hard one when they start"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn emfile_names_the_limit_and_the_fixes() {
        let e = NofileError {
            limit: Some(NofileLimit {
                soft: 1024,
                hard: 4096,
            }),
            system: false,
        };
        let m = e.to_string();
        assert!(m.contains("RLIMIT_NOFILE is 1024 (hard limit 4096)"), "{m}");
        assert!(m.contains("ulimit -n") && m.contains("LimitNOFILE="), "{m}");
        assert!(NofileError::from_io(&io::Error::from_raw_os_error(libc::EMFILE)).is_some());
        let enfile = NofileError::from_io(&io::Error::from_raw_os_error(libc::ENFILE)).unwrap();
        assert!(enfile.system && enfile.to_string().contains("fs.file-max"));
        assert!(NofileError::from_io(&io::Error::from_raw_os_error(libc::EINVAL)).is_none());
    }
}
