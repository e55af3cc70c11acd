//! The process's pinned-memory budget: `RLIMIT_MEMLOCK`, and every pin this process
//! makes, counted in one place.
//!
//! Linux charges memory the kernel pins on a process's behalf against the soft
//! `RLIMIT_MEMLOCK` (getrlimit(2)) unless the process has `CAP_IPC_LOCK` in its
//! effective set:
//! - io_uring fixed buffers (`IORING_REGISTER_BUFFERS`) are charged to the *user*
//!   (every process of the uid together), checked against the registering process's
//!   limit, and also shown as the process's `VmPin` in `/proc/self/status`. Over the
//!   limit, registration fails with `ENOMEM`.
//! - RDMA memory registration (`ibv_reg_mr`, the kernel's `ib_umem_get`) is charged
//!   to the process (`VmPin`), `ENOMEM` over the limit.
//!
//! A slab registered both ways is charged twice. The soft provider's memory regions are
//! plain memory and pin nothing. Many distributions give users an 8 MiB limit
//! (`ulimit -l` 8192); root and services with `CAP_IPC_LOCK` are not limited.
//!
//! [`PinBudget::process`] is the budget of this process: whatever pins memory (the
//! target's io_uring registration, a verbs provider's `ibv_reg_mr`) goes through
//! [`PinBudget::pin_with`] or [`PinBudget::charge`], so sizing decisions
//! ([`PinBudget::available_bytes`]) see what the other parts of the process (an embedded
//! target and a host in one benchmark) already hold, and a refusal is a
//! [`MemlockError`] that names the limit, what is pinned, what was needed and how to
//! raise the limit, instead of a bare `ENOMEM`.
use std::fmt;
use std::io;

use parking_lot::Mutex;

/// `CAP_IPC_LOCK`'s bit in the capability sets (linux/capability.h).
pub const CAP_IPC_LOCK: u32 = 14;

/// The pinning limit that applies to this process.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MemlockLimit {
    /// `RLIM_INFINITY`, or the process has `CAP_IPC_LOCK`: the kernel does not limit pins.
    Unlimited,
    /// The soft `RLIMIT_MEMLOCK`, in bytes.
    Bytes(u64),
}

impl MemlockLimit {
    /// The limit from a soft `RLIMIT_MEMLOCK` value (bytes, `libc::RLIM_INFINITY` for
    /// none) and whether the process has `CAP_IPC_LOCK` in its effective set.
    pub fn from_rlimit(soft_bytes: u64, cap_ipc_lock: bool) -> MemlockLimit {
        if cap_ipc_lock || soft_bytes == libc::RLIM_INFINITY {
            MemlockLimit::Unlimited
        } else {
            MemlockLimit::Bytes(soft_bytes)
        }
    }

    /// This process's limit now: getrlimit(`RLIMIT_MEMLOCK`) and `CAP_IPC_LOCK` (from
    /// `CapEff` in `/proc/self/status`). When the limit cannot be read it is taken as
    /// unlimited (the kernel's answer at registration then decides).
    pub fn of_process() -> MemlockLimit {
        use nix::sys::resource::{getrlimit, Resource};
        match getrlimit(Resource::RLIMIT_MEMLOCK) {
            Ok((soft, _hard)) => MemlockLimit::from_rlimit(soft, has_cap_ipc_lock()),
            Err(_) => MemlockLimit::Unlimited,
        }
    }

    /// The limit in bytes, `None` when unlimited.
    pub fn bytes(self) -> Option<u64> {
        match self {
            MemlockLimit::Unlimited => None,
            MemlockLimit::Bytes(b) => Some(b),
        }
    }
}

impl fmt::Display for MemlockLimit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MemlockLimit::Unlimited => f.write_str("unlimited"),
            MemlockLimit::Bytes(b) => write!(f, "{}", Bytes(*b)),
        }
    }
}

/// A byte count shown as KiB/MiB/GiB (binary units) with the exact bytes when not whole.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Bytes(pub u64);

impl fmt::Display for Bytes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const UNITS: [(u64, &str); 3] = [(1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB")];
        let b = self.0;
        for (unit, name) in UNITS {
            if b >= unit {
                return if b.is_multiple_of(unit) {
                    write!(f, "{} {name}", b / unit)
                } else {
                    write!(f, "{:.2} {name} ({b} bytes)", b as f64 / unit as f64)
                };
            }
        }
        write!(f, "{b} bytes")
    }
}

/// The value of `key` (e.g. `"VmPin"`) in `/proc/<pid>/status` text, trimmed.
fn status_field<'a>(status: &'a str, key: &str) -> Option<&'a str> {
    status.lines().find_map(|l| {
        let (k, v) = l.split_once(':')?;
        (k == key).then_some(v.trim())
    })
}

/// Whether the hexadecimal capability mask `mask_hex` (as `CapEff` in
/// `/proc/self/status` shows it) has capability `cap` (its bit number). A mask that
/// does not parse has none.
pub fn cap_mask_has(mask_hex: &str, cap: u32) -> bool {
    u64::from_str_radix(mask_hex.trim(), 16).is_ok_and(|m| cap < 64 && m & (1 << cap) != 0)
}

/// Whether this process has `CAP_IPC_LOCK` in its effective set (the set the kernel's
/// `capable()` checks). False when `/proc/self/status` cannot be read.
pub fn has_cap_ipc_lock() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| status_field(&s, "CapEff").map(|m| cap_mask_has(m, CAP_IPC_LOCK)))
        .unwrap_or(false)
}

/// `VmPin` of `/proc/<pid>/status` text in bytes (the kernel shows kB).
pub fn parse_vm_pin(status: &str) -> Option<u64> {
    let v = status_field(status, "VmPin")?;
    let kb: u64 = v.strip_suffix("kB")?.trim().parse().ok()?;
    kb.checked_mul(1024)
}

/// Bytes of memory the kernel pins for this process now (`VmPin`: io_uring fixed
/// buffers and RDMA registrations), `None` when `/proc/self/status` cannot be read.
pub fn vm_pin_bytes() -> Option<u64> {
    parse_vm_pin(&std::fs::read_to_string("/proc/self/status").ok()?)
}

/// A process of this user that holds pinned memory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PinHolder {
    /// Its process ID.
    pub pid: u32,
    /// Its command name (`Name` in `/proc/<pid>/status`, at most 15 bytes).
    pub name: String,
    /// Bytes it has pinned (`VmPin`).
    pub bytes: u64,
}

/// What the other processes of this user (same real uid, the user io_uring charges)
/// have pinned, as far as `/proc` shows it: their `VmPin`, which counts their io_uring
/// fixed buffers (the kernel charges those to the user, summed over all of its
/// processes, and checks the sum against the registering process's `RLIMIT_MEMLOCK`)
/// and their RDMA registrations. Processes in another PID namespace or hidden by
/// `hidepid` are not seen, and a ring closed a moment ago may still be charged, so the
/// user's real total can be higher.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct OtherPins {
    /// The processes with a non-zero `VmPin`, largest first.
    pub holders: Vec<PinHolder>,
}

impl OtherPins {
    /// Scans `/proc` for this user's other processes (see the type's docs). Processes
    /// that cannot be read (gone, or not ours) are skipped.
    pub fn of_this_user() -> OtherPins {
        let me = std::process::id();
        let uid = nix::unistd::getuid().as_raw();
        let Ok(dir) = std::fs::read_dir("/proc") else {
            return OtherPins::default();
        };
        let mut holders: Vec<PinHolder> = dir
            .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
            .filter(|&pid| pid != me)
            .filter_map(|pid| {
                let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
                parse_pin_holder(pid, &status, uid)
            })
            .collect();
        holders.sort_by(|a, b| b.bytes.cmp(&a.bytes).then(a.pid.cmp(&b.pid)));
        OtherPins { holders }
    }

    /// Bytes they hold together.
    pub fn total_bytes(&self) -> u64 {
        self.holders.iter().map(|h| h.bytes).sum()
    }

    /// "other processes of this user hold 7 MiB (nvmf-target pid 4242: 7 MiB)", or, when
    /// none is visible, that they are not visible here.
    pub fn describe(&self) -> String {
        if self.holders.is_empty() {
            return "no other process of this user that /proc shows holds pinned memory, so \
                    processes out of sight (another PID namespace) or rings closed a moment ago \
                    hold the rest"
                .to_string();
        }
        const SHOWN: usize = 4;
        let mut list: Vec<String> = self
            .holders
            .iter()
            .take(SHOWN)
            .map(|h| format!("{} pid {}: {}", h.name, h.pid, Bytes(h.bytes)))
            .collect();
        if self.holders.len() > SHOWN {
            list.push(format!("{} more", self.holders.len() - SHOWN));
        }
        format!(
            "other processes of this user hold {} ({})",
            Bytes(self.total_bytes()),
            list.join(", ")
        )
    }
}

/// The [`PinHolder`] that `/proc/<pid>/status` text describes, when its real uid is
/// `uid` and its `VmPin` is not zero.
fn parse_pin_holder(pid: u32, status: &str, uid: u32) -> Option<PinHolder> {
    let real_uid: u32 = status_field(status, "Uid")?
        .split_whitespace()
        .next()?
        .parse()
        .ok()?;
    let bytes = parse_vm_pin(status)?;
    (real_uid == uid && bytes > 0).then(|| PinHolder {
        pid,
        name: status_field(status, "Name").unwrap_or("?").to_string(),
        bytes,
    })
}

/// The system page size in bytes (4096 when sysconf cannot tell).
pub fn page_size() -> u64 {
    match nix::unistd::sysconf(nix::unistd::SysconfVar::PAGE_SIZE) {
        Ok(Some(p)) if p > 0 => p as u64,
        _ => 4096,
    }
}

/// Bytes the kernel charges to pin `len` bytes at address `addr`: every page the range
/// touches, whole (small pages; a range backed by transparent huge pages is charged
/// whole huge pages, which [`PinBudget::pin_with`] measures instead).
pub fn pinned_span_bytes(addr: usize, len: usize) -> u64 {
    if len == 0 {
        return 0;
    }
    let page = page_size();
    let start = addr as u64 / page;
    let end = (addr as u64 + len as u64).div_ceil(page);
    (end - start) * page
}

/// Why a pin was refused.
#[derive(Debug, thiserror::Error)]
pub enum MemlockError {
    /// The pin would take this process over its `RLIMIT_MEMLOCK` (checked before asking
    /// the kernel).
    #[error(
        "{what}: pinning {} would exceed RLIMIT_MEMLOCK ({limit}): {} already pinned by this process. {}",
        Bytes(*needed), Bytes(*pinned), how_to_fix(*pinned + *needed, smaller.as_deref())
    )]
    OverLimit {
        /// What was to be pinned, e.g. "poll group 0: io_uring fixed buffers".
        what: String,
        /// The limit in force.
        limit: MemlockLimit,
        /// Bytes this process had pinned before.
        pinned: u64,
        /// Bytes the pin needed.
        needed: u64,
        /// How to need less (e.g. "a smaller data_slab"), for the message.
        smaller: Option<String>,
    },
    /// The kernel answered `ENOMEM` although this process's own pins leave room:
    /// io_uring charges every process of the user together, so others hold the rest
    /// (or a ring closed a moment ago is still being torn down).
    #[error(
        "{what}: the kernel refused to pin {} (ENOMEM): io_uring charges all processes of uid \
         {uid} together against RLIMIT_MEMLOCK ({limit}); this process has {} pinned and {}. \
         Stop them, or {}",
        Bytes(*needed), Bytes(*pinned), others.describe(),
        lowercase_first(&how_to_fix(*pinned + others.total_bytes() + *needed, smaller.as_deref()))
    )]
    KernelRefused {
        /// What was to be pinned.
        what: String,
        /// The limit in force.
        limit: MemlockLimit,
        /// Bytes this process had pinned before.
        pinned: u64,
        /// Bytes the pin needed.
        needed: u64,
        /// The user the kernel charges.
        uid: u32,
        /// What this user's other processes hold, as far as `/proc` shows it.
        others: OtherPins,
        /// How to need less, for the message.
        smaller: Option<String>,
    },
    /// The registration failed for another reason than the limit.
    #[error("{what}: {source}")]
    Register {
        /// What was to be pinned.
        what: String,
        /// The registration's error.
        source: io::Error,
    },
}

/// An `io::Error` rebuilt with the same OS error code, or kind and message (it has no
/// `Clone` of its own).
fn clone_io_error(e: &io::Error) -> io::Error {
    match e.raw_os_error() {
        Some(code) => io::Error::from_raw_os_error(code),
        None => io::Error::new(e.kind(), e.to_string()),
    }
}

/// Cloned field by field (the `io::Error` of [`MemlockError::Register`] by its OS code or
/// kind and message), so that errors that carry a `MemlockError` (`VerbsError::Memlock`)
/// stay `Clone`.
impl Clone for MemlockError {
    fn clone(&self) -> Self {
        match self {
            MemlockError::OverLimit {
                what,
                limit,
                pinned,
                needed,
                smaller,
            } => MemlockError::OverLimit {
                what: what.clone(),
                limit: *limit,
                pinned: *pinned,
                needed: *needed,
                smaller: smaller.clone(),
            },
            MemlockError::KernelRefused {
                what,
                limit,
                pinned,
                needed,
                uid,
                others,
                smaller,
            } => MemlockError::KernelRefused {
                what: what.clone(),
                limit: *limit,
                pinned: *pinned,
                needed: *needed,
                uid: *uid,
                others: others.clone(),
                smaller: smaller.clone(),
            },
            MemlockError::Register { what, source } => MemlockError::Register {
                what: what.clone(),
                source: clone_io_error(source),
            },
        }
    }
}

/// Equal when every field is (an `io::Error` by OS code, kind and message).
impl PartialEq for MemlockError {
    fn eq(&self, other: &Self) -> bool {
        use MemlockError::*;
        match (self, other) {
            (
                OverLimit {
                    what: a,
                    limit: b,
                    pinned: c,
                    needed: d,
                    smaller: e,
                },
                OverLimit {
                    what: a2,
                    limit: b2,
                    pinned: c2,
                    needed: d2,
                    smaller: e2,
                },
            ) => (a, b, c, d, e) == (a2, b2, c2, d2, e2),
            (
                KernelRefused {
                    what: a,
                    limit: b,
                    pinned: c,
                    needed: d,
                    uid: u,
                    others: o,
                    smaller: e,
                },
                KernelRefused {
                    what: a2,
                    limit: b2,
                    pinned: c2,
                    needed: d2,
                    uid: u2,
                    others: o2,
                    smaller: e2,
                },
            ) => (a, b, c, d, u, o, e) == (a2, b2, c2, d2, u2, o2, e2),
            (
                Register { what: a, source: s },
                Register {
                    what: a2,
                    source: s2,
                },
            ) => {
                a == a2
                    && s.kind() == s2.kind()
                    && s.raw_os_error() == s2.raw_os_error()
                    && s.to_string() == s2.to_string()
            }
            _ => false,
        }
    }
}

impl Eq for MemlockError {}

impl MemlockError {
    /// The same error with `smaller` as its "how to pin less" advice: a program gives the
    /// options it has itself (`nvmf-target --data-slab`), in place of the library's
    /// configuration keys. `None` drops the advice.
    #[must_use]
    pub fn with_smaller(mut self, hint: Option<&str>) -> MemlockError {
        match &mut self {
            MemlockError::OverLimit { smaller, .. }
            | MemlockError::KernelRefused { smaller, .. } => *smaller = hint.map(str::to_string),
            MemlockError::Register { .. } => {}
        }
        self
    }
}

fn lowercase_first(s: &str) -> String {
    let mut c = s.chars();
    match c.next() {
        Some(f) => f.to_lowercase().chain(c).collect(),
        None => String::new(),
    }
}

/// The fix part of a [`MemlockError`]: how to raise the limit to `total` bytes, or how to
/// need less.
fn how_to_fix(total: u64, smaller: Option<&str>) -> String {
    let kib = total.div_ceil(1024);
    let bytes = kib * 1024;
    let mut s = format!(
        "Raise the limit to at least {kib} KiB: `ulimit -l {kib}` in the shell that starts it \
         (or `prlimit --memlock={bytes} <command>`), `LimitMEMLOCK={bytes}` in its systemd unit, \
         or `<user> - memlock {kib}` in /etc/security/limits.conf; or give it CAP_IPC_LOCK"
    );
    if let Some(smaller) = smaller {
        s.push_str("; or pin less: ");
        s.push_str(smaller);
    }
    s
}

#[derive(Clone, Copy, Debug)]
enum LimitSource {
    /// Read getrlimit and the capabilities at each use (they can change), and measure
    /// the kernel's charge (`VmPin`).
    Process,
    /// A fixed limit, no measuring (planning and tests).
    Fixed(MemlockLimit),
}

/// Accounts pinned memory against a [`MemlockLimit`]; see the module docs.
/// [`PinBudget::process`] is the process-wide one; [`PinBudget::with_limit`] makes a
/// detached budget (for planning or tests).
#[derive(Debug)]
pub struct PinBudget {
    source: LimitSource,
    pinned: Mutex<u64>,
}

static PROCESS: PinBudget = PinBudget {
    source: LimitSource::Process,
    pinned: Mutex::new(0),
};

impl PinBudget {
    /// The budget of this process, shared by everything in it that pins memory.
    pub fn process() -> &'static PinBudget {
        &PROCESS
    }

    /// A budget of its own with a fixed `limit`, nothing pinned.
    pub fn with_limit(limit: MemlockLimit) -> PinBudget {
        PinBudget {
            source: LimitSource::Fixed(limit),
            pinned: Mutex::new(0),
        }
    }

    /// The limit in force now.
    pub fn limit(&self) -> MemlockLimit {
        match self.source {
            LimitSource::Process => MemlockLimit::of_process(),
            LimitSource::Fixed(l) => l,
        }
    }

    /// Bytes pinned through this budget and not yet released.
    pub fn pinned_bytes(&self) -> u64 {
        *self.pinned.lock()
    }

    /// Bytes that can still be pinned, `None` when unlimited.
    pub fn available_bytes(&self) -> Option<u64> {
        let pinned = self.pinned_bytes();
        self.limit().bytes().map(|l| l.saturating_sub(pinned))
    }

    /// Accounts `bytes` pinned for `what` (the caller pins them right after, or has just
    /// pinned them); released when the returned charge is dropped, which must happen
    /// after the kernel unpinned them. `smaller` says how to need less in the error.
    ///
    /// # Errors
    /// [`MemlockError::OverLimit`] when the pin would exceed the limit; nothing is
    /// charged then.
    pub fn charge(
        &self,
        what: &str,
        bytes: u64,
        smaller: Option<&str>,
    ) -> Result<PinCharge<'_>, MemlockError> {
        let mut pinned = self.pinned.lock();
        self.check(&pinned, what, bytes, smaller)?;
        *pinned += bytes;
        Ok(PinCharge {
            budget: self,
            bytes,
        })
    }

    /// Pins through `register` (e.g. an io_uring buffer registration), which the kernel
    /// charges about `estimate` bytes for (see [`pinned_span_bytes`]): checks the
    /// estimate against the limit, runs `register` with the budget locked, and accounts
    /// what the kernel actually charged (the `VmPin` growth, for the process budget;
    /// the estimate when that cannot be read). The charge is released when the returned
    /// [`PinCharge`] is dropped, which must happen after the kernel unpinned the memory.
    ///
    /// # Errors
    /// [`MemlockError::OverLimit`] when the estimate does not fit (`register` is not
    /// run); [`MemlockError::KernelRefused`] when `register` fails with `ENOMEM`;
    /// [`MemlockError::Register`] for its other errors.
    pub fn pin_with<T>(
        &self,
        what: &str,
        estimate: u64,
        smaller: Option<&str>,
        register: impl FnOnce() -> io::Result<T>,
    ) -> Result<(T, PinCharge<'_>), MemlockError> {
        let mut pinned = self.pinned.lock();
        self.check(&pinned, what, estimate, smaller)?;
        let measure = matches!(self.source, LimitSource::Process);
        let before = if measure { vm_pin_bytes() } else { None };
        let value = match register() {
            Ok(v) => v,
            Err(e) if e.raw_os_error() == Some(libc::ENOMEM) => {
                return Err(MemlockError::KernelRefused {
                    what: what.to_string(),
                    limit: self.limit(),
                    pinned: *pinned,
                    needed: estimate,
                    uid: nix::unistd::getuid().as_raw(),
                    others: if measure {
                        OtherPins::of_this_user()
                    } else {
                        OtherPins::default()
                    },
                    smaller: smaller.map(str::to_string),
                })
            }
            Err(source) => {
                return Err(MemlockError::Register {
                    what: what.to_string(),
                    source,
                })
            }
        };
        let after = if measure { vm_pin_bytes() } else { None };
        let bytes = match (before, after) {
            (Some(b), Some(a)) if a > b => a - b,
            _ => estimate,
        };
        *pinned += bytes;
        Ok((
            value,
            PinCharge {
                budget: self,
                bytes,
            },
        ))
    }

    fn check(
        &self,
        pinned: &u64,
        what: &str,
        bytes: u64,
        smaller: Option<&str>,
    ) -> Result<(), MemlockError> {
        let limit = self.limit();
        match limit.bytes() {
            Some(l) if pinned.saturating_add(bytes) > l => Err(MemlockError::OverLimit {
                what: what.to_string(),
                limit,
                pinned: *pinned,
                needed: bytes,
                smaller: smaller.map(str::to_string),
            }),
            _ => Ok(()),
        }
    }
}

/// Bytes accounted in a [`PinBudget`], given back when dropped.
#[must_use = "dropping the charge releases it at once"]
#[derive(Debug)]
pub struct PinCharge<'a> {
    budget: &'a PinBudget,
    bytes: u64,
}

impl PinCharge<'_> {
    /// Bytes this charge accounts.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }
}

impl Drop for PinCharge<'_> {
    fn drop(&mut self) {
        let mut p = self.budget.pinned.lock();
        *p = p.saturating_sub(self.bytes);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    #[test]
    fn limit_from_rlimit_and_capability() {
        assert_eq!(
            MemlockLimit::from_rlimit(8 * MIB, false),
            MemlockLimit::Bytes(8 * MIB)
        );
        assert_eq!(
            MemlockLimit::from_rlimit(8 * MIB, true),
            MemlockLimit::Unlimited
        );
        assert_eq!(
            MemlockLimit::from_rlimit(libc::RLIM_INFINITY, false),
            MemlockLimit::Unlimited
        );
        assert_eq!(MemlockLimit::Bytes(0).bytes(), Some(0));
        assert_eq!(MemlockLimit::Unlimited.to_string(), "unlimited");
        assert_eq!(MemlockLimit::Bytes(8 * MIB).to_string(), "8 MiB");
    }

    #[test]
    fn capability_masks_and_vm_pin_parse() {
        // CapEff of root (all 41 capabilities) and of `setpriv --inh-caps=-all` as uid 65534.
        assert!(cap_mask_has("000001ffffffffff", CAP_IPC_LOCK));
        assert!(!cap_mask_has("0000000000000000", CAP_IPC_LOCK));
        assert!(cap_mask_has("0000000000004000", CAP_IPC_LOCK));
        assert!(!cap_mask_has("000001ffffffbfff", CAP_IPC_LOCK));
        assert!(!cap_mask_has("zz", CAP_IPC_LOCK));
        let status = "Name:\tnvmf-target\nVmLck:\t       0 kB\nVmPin:\t    6212 kB\n\
                      CapEff:\t000001ffffffffff\n";
        assert_eq!(parse_vm_pin(status), Some(6212 * 1024));
        assert_eq!(status_field(status, "CapEff"), Some("000001ffffffffff"));
        assert_eq!(parse_vm_pin("VmPin: lots"), None);
        assert_eq!(parse_vm_pin("Name: x\n"), None);
        // This process: the fields exist on Linux.
        assert!(vm_pin_bytes().is_some());
    }

    #[test]
    fn other_processes_pins_are_parsed_and_described() {
        let status = "Name:\tnvmf-target\nUid:\t1003\t1003\t1003\t1003\nVmPin:\t    7168 kB\n";
        assert_eq!(
            parse_pin_holder(4242, status, 1003),
            Some(PinHolder {
                pid: 4242,
                name: "nvmf-target".into(),
                bytes: 7 * MIB
            })
        );
        assert_eq!(parse_pin_holder(4242, status, 0), None, "another user's");
        let none = "Name:\tsh\nUid:\t1003\t1003\t1003\t1003\nVmPin:\t       0 kB\n";
        assert_eq!(parse_pin_holder(1, none, 1003), None, "pins nothing");
        // A kernel thread has no VmPin line.
        assert_eq!(
            parse_pin_holder(2, "Name:\tkthreadd\nUid:\t0\t0\t0\t0\n", 0),
            None
        );
        let o = OtherPins {
            holders: vec![
                PinHolder {
                    pid: 7,
                    name: "nvmf-target".into(),
                    bytes: 7 * MIB,
                },
                PinHolder {
                    pid: 9,
                    name: "nvmf-bench".into(),
                    bytes: MIB,
                },
            ],
        };
        assert_eq!(o.total_bytes(), 8 * MIB);
        assert_eq!(
            o.describe(),
            "other processes of this user hold 8 MiB (nvmf-target pid 7: 7 MiB, nvmf-bench pid 9: 1 MiB)"
        );
        assert!(OtherPins::default().describe().contains("not"));
        // The scan runs and never lists this process.
        let me = std::process::id();
        assert!(OtherPins::of_this_user()
            .holders
            .iter()
            .all(|h| h.pid != me));
    }

    #[test]
    fn refused_pins_count_the_others_in_the_fix() {
        let e = MemlockError::KernelRefused {
            what: "poll group 0: io_uring fixed buffers".into(),
            limit: MemlockLimit::Bytes(8 * MIB),
            pinned: 0,
            needed: 7 * MIB,
            uid: 1003,
            others: OtherPins {
                holders: vec![PinHolder {
                    pid: 7,
                    name: "nvmf-target".into(),
                    bytes: 7 * MIB,
                }],
            },
            smaller: Some("a smaller --data-slab".into()),
        };
        let msg = e.to_string();
        for want in [
            "refused to pin 7 MiB",
            "uid 1003",
            "RLIMIT_MEMLOCK (8 MiB)",
            "nvmf-target pid 7: 7 MiB",
            // 7 MiB held by the other process + 7 MiB needed here.
            "ulimit -l 14336",
            "a smaller --data-slab",
        ] {
            assert!(msg.contains(want), "missing {want:?} in: {msg}");
        }
        let plain = e.clone().with_smaller(None).to_string();
        assert!(!plain.contains("pin less"), "{plain}");
        assert!(e
            .with_smaller(Some("--data-slab 1M"))
            .to_string()
            .contains("--data-slab 1M"));
    }

    #[test]
    fn spans_count_whole_pages() {
        let p = page_size() as usize;
        assert_eq!(pinned_span_bytes(0x10000, 0), 0);
        assert_eq!(pinned_span_bytes(0x10000, 1), p as u64);
        assert_eq!(pinned_span_bytes(0x10000, p), p as u64);
        assert_eq!(pinned_span_bytes(0x10000 + p - 1, 2), 2 * p as u64);
        assert_eq!(pinned_span_bytes(0x10000, 64 * p + 1), 65 * p as u64);
    }

    #[test]
    fn charges_add_up_and_release_on_drop() {
        let b = PinBudget::with_limit(MemlockLimit::Bytes(8 * MIB));
        let a = b.charge("slab a", 4 * MIB, None).unwrap();
        assert_eq!(
            (b.pinned_bytes(), b.available_bytes()),
            (4 * MIB, Some(4 * MIB))
        );
        let c = b.charge("slab c", 4 * MIB, None).unwrap();
        assert_eq!(b.available_bytes(), Some(0));
        let e = b.charge("one page more", 4096, None).unwrap_err();
        assert!(matches!(
            e,
            MemlockError::OverLimit { pinned, needed: 4096, .. } if pinned == 8 * MIB
        ));
        assert_eq!(
            b.pinned_bytes(),
            8 * MIB,
            "a refused charge charges nothing"
        );
        drop(a);
        assert_eq!(b.pinned_bytes(), 4 * MIB);
        drop(c);
        assert_eq!(b.pinned_bytes(), 0);
        let u = PinBudget::with_limit(MemlockLimit::Unlimited);
        let _big = u.charge("huge", 1 << 40, None).unwrap();
        assert_eq!(u.available_bytes(), None);
    }

    #[test]
    fn pin_with_checks_before_registering_and_maps_enomem() {
        let b = PinBudget::with_limit(MemlockLimit::Bytes(8 * MIB));
        let mut ran = false;
        let e = b
            .pin_with("too big", 9 * MIB, None, || {
                ran = true;
                Ok(())
            })
            .unwrap_err();
        assert!(!ran, "not registered when the estimate does not fit");
        assert!(matches!(e, MemlockError::OverLimit { .. }));
        let e = b
            .pin_with("refused", MIB, Some("fewer poll groups"), || {
                Err::<(), _>(io::Error::from_raw_os_error(libc::ENOMEM))
            })
            .unwrap_err();
        let msg = e.to_string();
        assert!(matches!(e, MemlockError::KernelRefused { needed, .. } if needed == MIB));
        assert!(msg.contains("all processes of uid"), "{msg}");
        assert!(msg.contains("fewer poll groups"), "{msg}");
        let e = b
            .pin_with("bad", MIB, None, || {
                Err::<(), _>(io::Error::from_raw_os_error(libc::EFAULT))
            })
            .unwrap_err();
        assert!(matches!(e, MemlockError::Register { .. }));
        assert_eq!(b.pinned_bytes(), 0);
        let (v, charge) = b.pin_with("ok", 3 * MIB, None, || Ok(7)).unwrap();
        assert_eq!((v, charge.bytes(), b.pinned_bytes()), (7, 3 * MIB, 3 * MIB));
    }

    /// The message names the limit, what is pinned, what is needed and every way to
    /// raise the limit, with the numbers to use.
    #[test]
    fn error_text_names_limit_pinned_needed_and_fixes() {
        let b = PinBudget::with_limit(MemlockLimit::Bytes(8 * MIB));
        let _held = b.charge("receive region", 2 * MIB, None).unwrap();
        let e = b
            .charge(
                "poll group 0: io_uring fixed buffers",
                64 * MIB,
                Some("a smaller data_slab in the target configuration"),
            )
            .unwrap_err();
        let msg = e.to_string();
        for want in [
            "poll group 0: io_uring fixed buffers",
            "pinning 64 MiB",
            "RLIMIT_MEMLOCK (8 MiB)",
            "2 MiB already pinned",
            "ulimit -l 67584",
            "prlimit --memlock=69206016",
            "LimitMEMLOCK=69206016",
            "/etc/security/limits.conf",
            "CAP_IPC_LOCK",
            "a smaller data_slab",
        ] {
            assert!(msg.contains(want), "missing {want:?} in: {msg}");
        }
        assert_eq!(Bytes(1536).to_string(), "1.50 KiB (1536 bytes)");
        assert_eq!(Bytes(100).to_string(), "100 bytes");
    }

    #[test]
    fn process_budget_reads_this_process() {
        let limit = PinBudget::process().limit();
        let expect = MemlockLimit::of_process();
        assert_eq!(limit, expect);
        if has_cap_ipc_lock() {
            assert_eq!(limit, MemlockLimit::Unlimited);
        }
    }

    #[test]
    fn errors_clone_and_compare_field_by_field() {
        let b = PinBudget::with_limit(MemlockLimit::Bytes(8 * MIB));
        let e = b.charge("ibv_reg_mr", 9 * MIB, None).unwrap_err();
        assert_eq!(e.clone(), e);
        assert_ne!(b.charge("ibv_reg_mr", 10 * MIB, None).unwrap_err(), e);
        let r = MemlockError::Register {
            what: "x".into(),
            source: io::Error::from_raw_os_error(libc::EFAULT),
        };
        assert_eq!(r.clone(), r);
        assert_eq!(r.clone().to_string(), r.to_string());
        assert_ne!(r, e);
    }
}
