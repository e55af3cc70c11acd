//! Stand-in for the process-wide pinned-memory budget (`transport::memlock`, issue 8,
//! branch i8-nonroot): until it lands, the verbs provider charges its registrations
//! here, through the one call [`charge`], so the swap is a one-line change.
//!
//! Without CAP_IPC_LOCK the kernel charges every pinned page to `RLIMIT_MEMLOCK`
//! (`ibv_reg_mr` through `ib_umem_get`, io_uring buffer registration likewise, each
//! for the same slab), and a registration over the limit fails with a bare ENOMEM.
//! Counting first turns that into a [`VerbsError::MemlockExceeded`] that states the
//! current and needed bytes and the fix.
use std::sync::atomic::{AtomicU64, Ordering};

use crate::verbs::VerbsError;

/// Bytes this process has pinned through [`charge`] and not released.
static PINNED_BYTES: AtomicU64 = AtomicU64::new(0);

/// A charge against the budget; released when dropped (when the memory is unpinned).
#[derive(Debug)]
pub(crate) struct MemlockCharge {
    bytes: u64,
}

impl Drop for MemlockCharge {
    fn drop(&mut self) {
        PINNED_BYTES.fetch_sub(self.bytes, Ordering::AcqRel);
    }
}

/// The process's `RLIMIT_MEMLOCK` soft limit in bytes, `None` when the kernel does not
/// enforce it (unlimited, or CAP_IPC_LOCK in the effective set).
fn limit_bytes() -> Option<u64> {
    if has_cap_ipc_lock() {
        return None;
    }
    let mut rl = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes one rlimit.
    if unsafe { libc::getrlimit(libc::RLIMIT_MEMLOCK, &mut rl) } != 0
        || rl.rlim_cur == libc::RLIM_INFINITY
    {
        return None;
    }
    Some(rl.rlim_cur)
}

/// CAP_IPC_LOCK (capability 14) in the effective set, from `/proc/self/status`.
fn has_cap_ipc_lock() -> bool {
    const CAP_IPC_LOCK: u32 = 14;
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("CapEff:"))
                .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        })
        .is_some_and(|caps| caps & (1 << CAP_IPC_LOCK) != 0)
}

/// The pinned total after adding `bytes` to `pinned`, if `limit` allows it.
fn admit(pinned: u64, bytes: u64, limit: Option<u64>) -> Result<u64, VerbsError> {
    let total = pinned.saturating_add(bytes);
    match limit {
        Some(limit) if total > limit => Err(VerbsError::MemlockExceeded {
            needed_bytes: bytes,
            pinned_bytes: pinned,
            limit_bytes: limit,
        }),
        _ => Ok(total),
    }
}

/// Charges `len` bytes (rounded up to whole pages, as the kernel pins them) before
/// they are pinned.
///
/// # Errors
/// [`VerbsError::MemlockExceeded`] when the pinned total would exceed `RLIMIT_MEMLOCK`.
pub(crate) fn charge(len: usize) -> Result<MemlockCharge, VerbsError> {
    // SAFETY: sysconf has no preconditions.
    let page = u64::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) })
        .ok()
        .filter(|&p| p > 0)
        .unwrap_or(4096);
    let bytes = (len as u64).div_ceil(page) * page;
    let limit = limit_bytes();
    let mut cur = PINNED_BYTES.load(Ordering::Acquire);
    loop {
        let total = admit(cur, bytes, limit)?;
        match PINNED_BYTES.compare_exchange(cur, total, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => return Ok(MemlockCharge { bytes }),
            Err(now) => cur = now,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn charges_whole_pages() {
        let c = charge(1).unwrap();
        assert!(c.bytes >= 4096 && c.bytes.is_power_of_two(), "{c:?}");
        let d = charge(c.bytes as usize + 1).unwrap();
        assert_eq!(d.bytes, 2 * c.bytes);
    }

    #[test]
    fn over_the_limit_states_current_and_needed_bytes() {
        assert_eq!(admit(4096, 4096, Some(8192)), Ok(8192));
        assert_eq!(admit(4096, 1 << 40, None), Ok(4096 + (1 << 40)));
        let e = admit(4096, 64 << 20, Some(8 << 20)).unwrap_err();
        assert_eq!(
            e,
            VerbsError::MemlockExceeded {
                needed_bytes: 64 << 20,
                pinned_bytes: 4096,
                limit_bytes: 8 << 20,
            }
        );
        let m = e.to_string();
        assert!(
            m.contains("67108864 bytes") && m.contains("8388608 bytes"),
            "{m}"
        );
        assert!(
            m.contains("4096 already pinned") && m.contains("ulimit -l"),
            "{m}"
        );
    }
}
