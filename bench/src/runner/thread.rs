//! What a job thread asks of the OS (Linux): its thread ID (`gettid`, fio's `pid=` in
//! thread mode), CPU pinning (`sched_setaffinity`, fio's `cpus_allowed`) and its own
//! CPU usage (`getrusage(RUSAGE_THREAD)`, fio's `cpu` line).

use crate::result::CpuUsage;

/// The calling thread's ID.
pub fn gettid() -> i32 {
    // SAFETY: gettid has no arguments and cannot fail.
    unsafe { libc::gettid() }
}

/// The CPUs this process may run on (its affinity mask), ascending.
///
/// Errors: `sched_getaffinity` failed.
pub fn allowed_cpus() -> std::io::Result<Vec<usize>> {
    // SAFETY: cpu_set_t is plain data; zeroed is an empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: the pointer and size describe `set`.
    let r = unsafe { libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) };
    if r != 0 {
        return Err(std::io::Error::last_os_error());
    }
    let max = 8 * std::mem::size_of::<libc::cpu_set_t>();
    // SAFETY: CPU_ISSET reads the set for cpu < its size in bits.
    Ok((0..max)
        .filter(|&c| unsafe { libc::CPU_ISSET(c, &set) })
        .collect())
}

/// Pins the calling thread to `cpus`.
///
/// Errors: an empty list, a CPU beyond the set's size, or `sched_setaffinity`'s errno
/// (EINVAL: none of them is usable by this process).
pub fn pin_to(cpus: &[usize]) -> std::io::Result<()> {
    let max = 8 * std::mem::size_of::<libc::cpu_set_t>();
    if cpus.is_empty() || cpus.iter().any(|&c| c >= max) {
        return Err(std::io::Error::from_raw_os_error(libc::EINVAL));
    }
    // SAFETY: cpu_set_t is plain data; zeroed is an empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    for &c in cpus {
        // SAFETY: c < the set's size in bits (checked above).
        unsafe { libc::CPU_SET(c, &mut set) };
    }
    // SAFETY: pid 0 is the calling thread; the pointer and size describe `set`.
    let r = unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) };
    if r != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// The calling thread's resource usage at one moment.
#[derive(Debug, Clone, Copy, Default)]
pub struct ThreadUsage {
    utime_us: u64,
    stime_us: u64,
    nvcsw: u64,
    nivcsw: u64,
    minflt: u64,
    majflt: u64,
}

impl ThreadUsage {
    /// `getrusage(RUSAGE_THREAD)` now (zeros if the call fails, which it does not for
    /// this thread).
    pub fn now() -> Self {
        // SAFETY: rusage is plain data.
        let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: RUSAGE_THREAD reports the calling thread into `ru`.
        if unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut ru) } != 0 {
            return Self::default();
        }
        let us = |t: libc::timeval| t.tv_sec as u64 * 1_000_000 + t.tv_usec as u64;
        ThreadUsage {
            utime_us: us(ru.ru_utime),
            stime_us: us(ru.ru_stime),
            nvcsw: ru.ru_nvcsw as u64,
            nivcsw: ru.ru_nivcsw as u64,
            minflt: ru.ru_minflt as u64,
            majflt: ru.ru_majflt as u64,
        }
    }

    /// What the thread used from `self` to `later` (fio's `update_rusage_stat`: times
    /// in whole ms, context switches of both kinds).
    pub fn until(&self, later: &ThreadUsage) -> CpuUsage {
        CpuUsage {
            usr_ms: later.utime_us.saturating_sub(self.utime_us) / 1000,
            sys_ms: later.stime_us.saturating_sub(self.stime_us) / 1000,
            ctx: (later.nvcsw + later.nivcsw).saturating_sub(self.nvcsw + self.nivcsw),
            majf: later.majflt.saturating_sub(self.majflt),
            minf: later.minflt.saturating_sub(self.minflt),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn threads_have_their_own_ids_and_usage() {
        let main = gettid();
        let other = std::thread::spawn(gettid).join().unwrap();
        assert_ne!(main, other);
        assert!(main > 0 && other > 0);
        // Spin until this thread's own CPU time says 10 ms (on a loaded machine 30 ms
        // of wall clock gave only 9 ms of CPU), for at most 10 s of wall clock.
        let before = ThreadUsage::now();
        let mut x = 0u64;
        let t = std::time::Instant::now();
        let mut u = before.until(&ThreadUsage::now());
        while u.usr_ms + u.sys_ms < 10 && t.elapsed() < std::time::Duration::from_secs(10) {
            for _ in 0..100_000 {
                x = x.wrapping_add(std::hint::black_box(1));
            }
            u = before.until(&ThreadUsage::now());
        }
        std::hint::black_box(x);
        assert!(u.usr_ms + u.sys_ms >= 10, "{u:?} after {:?}", t.elapsed());
    }

    #[test]
    fn pinning_to_an_allowed_cpu_works_and_a_bad_one_is_refused() {
        let cpus = allowed_cpus().unwrap();
        assert!(!cpus.is_empty());
        let first = cpus[0];
        let r = std::thread::spawn(move || {
            pin_to(&[first]).unwrap();
            allowed_cpus().unwrap()
        })
        .join()
        .unwrap();
        assert_eq!(r, vec![first]);
        assert!(pin_to(&[]).is_err());
        assert!(pin_to(&[1 << 20]).is_err());
    }
}
