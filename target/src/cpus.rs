//! Which CPUs the poll groups run on (issue 16 item 8; SPDK's core mask): the
//! configuration's `cpus`, a list (`cpus = [0, 1]`) or a string (`cpus = "0-3,6"`, or
//! a hexadecimal mask `cpus = "0x3"` as SPDK's `-m`); `nvmf-target --cpus` takes the
//! string forms. Poll group `k` (counted over every listen address, in order) is
//! pinned to the `k % n`-th CPU of the list (`sched_setaffinity`), in its own thread
//! before it allocates its memory, so first-touch puts that memory on the CPU's node.
use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Highest CPU number accepted (the kernel's `cpu_set_t` holds 1024).
pub const MAX_CPU: usize = 1023;

/// An ordered list of CPU numbers without duplicates.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CpuList(pub Vec<usize>);

/// Why a CPU list was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("cpus {input:?}: {reason}")]
pub struct CpuListError {
    /// What was given.
    pub input: String,
    /// What is wrong.
    pub reason: String,
}

/// Why the configured CPUs cannot be used by this process.
#[derive(Debug, thiserror::Error)]
pub enum CpuAffinityError {
    /// `sched_getaffinity` failed.
    #[error("cpus: sched_getaffinity: {0}")]
    Query(#[source] std::io::Error),
    /// A configured CPU is outside this process's affinity.
    #[error(
        "cpus: CPU {cpu} is not one this process may run on (allowed: {allowed}); give CPUs \
         of that set, or widen it (taskset, the cgroup's cpuset, systemd's CPUAffinity=)"
    )]
    NotAllowed {
        /// The first CPU not allowed.
        cpu: usize,
        /// The CPUs this process may run on.
        allowed: CpuList,
    },
}

impl CpuList {
    /// Parses `"0,2,4-7"` or a hexadecimal mask `"0x3"` (bit `n` = CPU `n`).
    ///
    /// # Errors
    /// [`CpuListError`] naming the part that is not a CPU number or range, a CPU above
    /// [`MAX_CPU`], a CPU given twice, or an empty list.
    pub fn parse(s: &str) -> Result<CpuList, CpuListError> {
        let err = |reason: String| CpuListError {
            input: s.to_string(),
            reason,
        };
        let t = s.trim();
        let mut cpus = Vec::new();
        if let Some(hex) = t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
            let hex = hex.replace('_', "");
            for (i, c) in hex.chars().rev().enumerate() {
                let d = c
                    .to_digit(16)
                    .ok_or_else(|| err(format!("{c:?} is not a hexadecimal digit")))?;
                for b in 0..4 {
                    if d & (1 << b) != 0 {
                        cpus.push(i * 4 + b);
                    }
                }
            }
            cpus.sort_unstable();
        } else {
            for part in t.split(',').map(str::trim).filter(|p| !p.is_empty()) {
                let num = |x: &str| {
                    x.trim()
                        .parse::<usize>()
                        .map_err(|_| err(format!("{part:?} is not a CPU number or a range a-b")))
                };
                match part.split_once('-') {
                    Some((a, b)) => {
                        let (a, b) = (num(a)?, num(b)?);
                        if a > b {
                            return Err(err(format!("range {part:?} runs backwards")));
                        }
                        cpus.extend(a..=b);
                    }
                    None => cpus.push(num(part)?),
                }
            }
        }
        CpuList::new(cpus).map_err(|e| err(e.reason))
    }

    /// A list of `cpus` as given.
    ///
    /// # Errors
    /// [`CpuListError`] for an empty list, a CPU above [`MAX_CPU`] or given twice.
    pub fn new(cpus: Vec<usize>) -> Result<CpuList, CpuListError> {
        let err = |reason: String| CpuListError {
            input: format!("{cpus:?}"),
            reason,
        };
        if cpus.is_empty() {
            return Err(err("no CPU".into()));
        }
        if let Some(c) = cpus.iter().find(|&&c| c > MAX_CPU) {
            return Err(err(format!("CPU {c} is above {MAX_CPU}")));
        }
        for (i, c) in cpus.iter().enumerate() {
            if cpus[..i].contains(c) {
                return Err(err(format!("CPU {c} is given twice")));
            }
        }
        Ok(CpuList(cpus))
    }

    /// The CPU poll group `k` runs on.
    pub fn for_group(&self, k: usize) -> usize {
        self.0[k % self.0.len()]
    }

    /// Checks every CPU against the ones this process may run on (its affinity:
    /// `taskset`, a cgroup cpuset, systemd's `CPUAffinity=`).
    ///
    /// # Errors
    /// [`CpuAffinityError::NotAllowed`] naming the first CPU not allowed, the allowed
    /// ones and the fix; [`CpuAffinityError::Query`] if the affinity cannot be read.
    pub fn check_allowed(&self) -> Result<(), CpuAffinityError> {
        let allowed = allowed_cpus().map_err(CpuAffinityError::Query)?;
        match self.0.iter().find(|c| !allowed.contains(c)) {
            Some(&cpu) => Err(CpuAffinityError::NotAllowed {
                cpu,
                allowed: CpuList(allowed),
            }),
            None => Ok(()),
        }
    }
}

impl fmt::Display for CpuList {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s: Vec<String> = self.0.iter().map(usize::to_string).collect();
        write!(f, "{}", s.join(","))
    }
}

impl Serialize for CpuList {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.0.serialize(s)
    }
}

impl<'de> Deserialize<'de> for CpuList {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<CpuList, D::Error> {
        use serde::de::Error;
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Repr {
            List(Vec<usize>),
            Str(String),
        }
        match Repr::deserialize(d)? {
            Repr::List(v) => CpuList::new(v).map_err(|r| D::Error::custom(format!("cpus: {r}"))),
            Repr::Str(s) => CpuList::parse(&s).map_err(D::Error::custom),
        }
    }
}

/// The CPUs this process may run on (`sched_getaffinity`).
///
/// # Errors
/// The operating system's error.
pub fn allowed_cpus() -> std::io::Result<Vec<usize>> {
    // SAFETY: a zeroed cpu_set_t is the empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: pid 0 = this thread; the set and its size are valid.
    let r = unsafe { libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) };
    if r != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: CPU_ISSET reads the set for CPUs below its capacity.
    Ok((0..=MAX_CPU)
        .filter(|&c| unsafe { libc::CPU_ISSET(c, &set) })
        .collect())
}

/// Pins the calling thread to `cpu` (`sched_setaffinity`).
///
/// # Errors
/// The operating system's error (EINVAL: a CPU outside the allowed set).
pub fn pin_current_thread(cpu: usize) -> std::io::Result<()> {
    // SAFETY: a zeroed cpu_set_t is the empty set; CPU_SET writes inside it (cpu is at
    // most MAX_CPU, checked by CpuList).
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    unsafe { libc::CPU_SET(cpu.min(MAX_CPU), &mut set) };
    // SAFETY: pid 0 = this thread; the set and its size are valid.
    let r = unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) };
    if r != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_ranges_and_masks_parse() {
        assert_eq!(CpuList::parse("0,2,4-6").unwrap().0, [0, 2, 4, 5, 6]);
        assert_eq!(CpuList::parse("0x3").unwrap().0, [0, 1]);
        assert_eq!(CpuList::parse("0xA0").unwrap().0, [5, 7]);
        assert_eq!(CpuList::parse(" 3 , 1 ").unwrap().0, [3, 1], "order kept");
        for bad in ["", "x", "3-1", "1,1", "0x", "0xg", "2000"] {
            assert!(CpuList::parse(bad).is_err(), "{bad:?}");
        }
        let e = CpuList::parse("1,1").unwrap_err().to_string();
        assert!(e.contains("twice"), "{e}");
        let c = CpuList::parse("4,5").unwrap();
        assert_eq!((c.for_group(0), c.for_group(1), c.for_group(2)), (4, 5, 4));
        assert_eq!(c.to_string(), "4,5");
    }

    #[test]
    fn pinning_follows_the_allowed_set() {
        let allowed = allowed_cpus().unwrap();
        assert!(!allowed.is_empty());
        assert!(CpuList(allowed.clone()).check_allowed().is_ok());
        let e = CpuList(vec![MAX_CPU])
            .check_allowed()
            .unwrap_err()
            .to_string();
        assert!(e.contains(&format!("CPU {MAX_CPU} is not")), "{e}");
        let t = std::thread::spawn(move || {
            pin_current_thread(allowed[0]).unwrap();
            allowed_cpus().unwrap() == vec![allowed[0]]
        });
        assert!(t.join().unwrap(), "the thread runs on that CPU alone");
    }
}
