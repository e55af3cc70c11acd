//! fio's progress line (eta.c: `calc_thread_status`, `thread_eta`,
//! `display_thread_status`), e.g.
//! `Jobs: 1 (f=1): [r(1)][50.0%][r=120MiB/s][r=30.7k IOPS][eta 00m:05s]`.
//!
//! The runner hands a [`Progress`] snapshot about once a second to an [`EtaLine`],
//! which renders the line as fio does: the job states condensed (`r(1)`, `_(1),w(1)`),
//! the percentage done and the ETA (both shown from the third second on, fio's
//! estimates being too noisy before), the read/write bandwidth and IOPS since the last
//! line, then spaces over what is left of a longer previous line and a carriage
//! return, so each line overwrites the last on a terminal. [`EtaLine::clear`] blanks
//! it at the end.
//!
//! Rates count every completed I/O, verify-phase reads included (the line shows what
//! the job is doing; the report's statistics leave them out).

use std::time::Duration;

use super::options::RwMode;
use super::report::fmt::{num2str, num2str_base, N2sUnit};

/// Where a job is, for its letter in the line (fio's `check_str_update`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JobPhase {
    /// Running before `--ramp_time` is over: `/`.
    Ramp,
    /// Running its workload: `r`, `w`, `m` (random read, write, mixed) or `R`, `W`,
    /// `M` (sequential).
    Running,
    /// Reading back what it wrote (`--verify`): `V`.
    Verifying,
    /// Ended cleanly: `_`.
    Finished,
    /// Ended with an error: `X`.
    Failed,
    /// Stopped by a signal: `K`.
    Killed,
    /// Waiting for a stonewall (the jobs before it): `P`.
    NotStarted,
}

/// One job's progress.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobProgress {
    /// The job's I/O pattern.
    pub rw: RwMode,
    /// Its `--rwmixread`.
    pub rwmixread: u8,
    /// Where it is.
    pub phase: JobPhase,
    /// Bytes completed so far, `[read, write]`, verify reads and the ramp included.
    pub bytes: [u64; 2],
    /// I/Os completed so far, `[read, write]`, likewise.
    pub ios: [u64; 2],
    /// Bytes the job will move in all, for the ETA: its `--io_size` (or region size),
    /// plus what its verify phase will read back (fio's `thread_eta`).
    pub total_bytes: u64,
}

impl JobProgress {
    /// `io_bytes` plus what a verify phase reads back: fio counts the whole size again
    /// for a job that only writes and the write share of it for a mixed job.
    pub fn total_with_verify(io_bytes: u64, rw: RwMode, rwmixread: u8, verify: bool) -> u64 {
        let writes = 100 - u64::from(rw.read_percent(rwmixread));
        if !verify || writes == 0 {
            io_bytes
        } else if rw.is_mixed() {
            io_bytes + io_bytes * writes / 100
        } else {
            io_bytes * 2
        }
    }

    /// The job's letter (see [`JobPhase`]).
    pub fn letter(&self) -> char {
        let random = self.rw.is_random();
        match self.phase {
            JobPhase::Ramp => '/',
            JobPhase::Verifying => 'V',
            JobPhase::Finished => '_',
            JobPhase::Failed => 'X',
            JobPhase::Killed => 'K',
            JobPhase::NotStarted => 'P',
            JobPhase::Running => {
                let c = match self.rw.read_percent(self.rwmixread) {
                    _ if self.rw.is_trim() => 'd',
                    100 => 'r',
                    0 => 'w',
                    _ => 'm',
                };
                if random {
                    c
                } else {
                    c.to_ascii_uppercase()
                }
            }
        }
    }

    fn is_running(&self) -> bool {
        matches!(
            self.phase,
            JobPhase::Ramp | JobPhase::Running | JobPhase::Verifying
        )
    }
}

/// What the runner reports about once a second.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Progress {
    /// Time since the run started (the jobs all start together).
    pub elapsed: Duration,
    /// `--runtime` (zero: no limit).
    pub runtime: Duration,
    /// `--ramp_time`.
    pub ramp_time: Duration,
    /// Whether the jobs run for the whole runtime.
    pub time_based: bool,
    /// Every job, in order.
    pub jobs: Vec<JobProgress>,
}

/// fio's `eta_to_str`: `05m:03s`, `01h:00m:00s`, `02d:03h:00m:00s`.
pub fn eta_to_str(eta_sec: u64) -> String {
    let s = eta_sec % 60;
    let m = eta_sec / 60 % 60;
    let h = eta_sec / 3600 % 24;
    let d = eta_sec / 86_400;
    let mut out = String::new();
    if d > 0 {
        out.push_str(&format!("{d:02}d:"));
    }
    if h > 0 || d > 0 {
        out.push_str(&format!("{h:02}h:"));
    }
    out.push_str(&format!("{m:02}m:{s:02}s"));
    out
}

/// fio's `update_condensed_str`: runs of one letter as `letter(count)`, joined by
/// commas (`_(1),r(2)`).
pub fn condensed_run_str(letters: &[char]) -> String {
    let mut out = String::new();
    let mut i = 0;
    while i < letters.len() {
        let c = letters[i];
        let n = letters[i..].iter().take_while(|&&x| x == c).count();
        if !out.is_empty() {
            out.push(',');
        }
        out.push_str(&format!("{c}({n})"));
        i += n;
    }
    out
}

/// Whole seconds, rounded up (fio's `(msec + 999) / 1000`).
fn ceil_secs(d: Duration) -> u64 {
    d.as_millis().div_ceil(1000) as u64
}

/// fio's `thread_eta` for one job, in seconds.
fn job_eta(j: &JobProgress, p: &Progress) -> u64 {
    let elapsed = ceil_secs(p.elapsed);
    let timeout = p.runtime.as_secs();
    match j.phase {
        JobPhase::Running | JobPhase::Verifying => {
            let done = j.bytes[0] + j.bytes[1];
            let mut perc = if j.total_bytes == 0 {
                0.0
            } else {
                (done as f64 / j.total_bytes as f64).min(1.0)
            };
            if p.time_based {
                perc = if timeout > 0 {
                    perc.min(elapsed as f64 / timeout as f64)
                } else {
                    0.0
                };
            }
            let mut eta = if perc == 0.0 {
                timeout
            } else {
                ((elapsed as f64 / perc) as u64).saturating_sub(elapsed)
            };
            if timeout > 0 {
                eta = eta.min((timeout + p.ramp_time.as_secs()).saturating_sub(elapsed));
            }
            eta
        }
        JobPhase::Ramp => (timeout + p.ramp_time.as_secs()).saturating_sub(elapsed),
        _ => 0,
    }
}

/// The state fio keeps between two progress lines.
#[derive(Debug, Clone, Default)]
pub struct EtaLine {
    linelen_last: usize,
    eta_good: bool,
    prev_elapsed: Duration,
    prev_bytes: [u64; 2],
    prev_ios: [u64; 2],
}

impl EtaLine {
    /// A line for a run that just started.
    pub fn new() -> Self {
        Self::default()
    }

    /// The next line for `p`, with its trailing padding and carriage return; `None`
    /// once no job is running (fio then prints nothing).
    pub fn render(&mut self, p: &Progress) -> Option<String> {
        let nr_running = p.jobs.iter().filter(|j| j.is_running()).count();
        let nr_ramp = p.jobs.iter().filter(|j| j.phase == JobPhase::Ramp).count();
        let files_open = nr_running - nr_ramp;
        // Rates over the time since the previous line (fio's calc_rate, calc_iops).
        let mtime = p.elapsed.saturating_sub(self.prev_elapsed).as_millis() as u64;
        let mut rate_kib = [0u64; 2];
        let mut iops = [0u64; 2];
        for d in 0..2 {
            let bytes: u64 = p.jobs.iter().map(|j| j.bytes[d]).sum();
            let ios: u64 = p.jobs.iter().map(|j| j.ios[d]).sum();
            let (db, di) = (
                bytes.saturating_sub(self.prev_bytes[d]),
                ios.saturating_sub(self.prev_ios[d]),
            );
            rate_kib[d] = (1000 * db).checked_div(mtime).unwrap_or(0) / 1024;
            iops[d] = (di * 1000).checked_div(mtime).unwrap_or(0);
            self.prev_bytes[d] = bytes;
            self.prev_ios[d] = ios;
        }
        self.prev_elapsed = p.elapsed;
        if nr_running == 0 {
            return None;
        }
        let elapsed_sec = ceil_secs(p.elapsed);
        // fio shows no estimate in the first 3 seconds.
        let eta_sec = (elapsed_sec >= 3).then(|| p.jobs.iter().map(|j| job_eta(j, p)).max());
        let mut out = format!("Jobs: {nr_running} (f={files_open})");
        if let Some(eta_sec) = eta_sec.flatten() {
            let perc = if elapsed_sec > 0 {
                elapsed_sec as f64 / (elapsed_sec + eta_sec) as f64
            } else {
                0.0
            };
            let perc_str = if (eta_sec == 0 && !self.eta_good) || nr_ramp == nr_running {
                "-.-%".to_string()
            } else {
                self.eta_good = true;
                format!("{:3.1}%", perc * 100.0)
            };
            let letters: Vec<char> = p.jobs.iter().map(JobProgress::letter).collect();
            out.push_str(&format!(": [{}][{perc_str}]", condensed_run_str(&letters)));
            let has = [
                rate_kib[0] > 0 || iops[0] > 0,
                rate_kib[1] > 0 || iops[1] > 0,
            ];
            if has[0] || has[1] {
                let part = |f: &dyn Fn(usize) -> String| {
                    ["r", "w"]
                        .iter()
                        .enumerate()
                        .filter(|(d, _)| has[*d])
                        .map(|(d, c)| format!("{c}={}", f(d)))
                        .collect::<Vec<_>>()
                        .join(",")
                };
                let rates =
                    part(&|d| num2str_base(rate_kib[d], 4, 1024, true, N2sUnit::BytePerSec));
                let iops = part(&|d| num2str(iops[d], 4, false, N2sUnit::None));
                out.push_str(&format!("[{rates}][{iops} IOPS]"));
            }
            out.push_str(&format!("[eta {}]", eta_to_str(eta_sec)));
        }
        let len = out.len();
        if len < self.linelen_last {
            out.push_str(&" ".repeat(self.linelen_last - len));
        }
        self.linelen_last = len;
        out.push('\r');
        Some(out)
    }

    /// What blanks the last line: spaces over it and a carriage return (empty when no
    /// line was shown).
    pub fn clear(&mut self) -> String {
        let n = std::mem::take(&mut self.linelen_last);
        if n == 0 {
            return String::new();
        }
        format!("\r{}\r", " ".repeat(n))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(rw: RwMode, phase: JobPhase, bytes: [u64; 2], ios: [u64; 2]) -> JobProgress {
        JobProgress {
            rw,
            rwmixread: 50,
            phase,
            bytes,
            ios,
            total_bytes: 1 << 30,
        }
    }

    fn progress(elapsed_s: u64, jobs: Vec<JobProgress>) -> Progress {
        Progress {
            elapsed: Duration::from_secs(elapsed_s),
            runtime: Duration::from_secs(10),
            ramp_time: Duration::ZERO,
            time_based: true,
            jobs,
        }
    }

    #[test]
    fn eta_strings_as_fio() {
        assert_eq!(eta_to_str(5), "00m:05s");
        assert_eq!(eta_to_str(65), "01m:05s");
        assert_eq!(eta_to_str(3600), "01h:00m:00s");
        assert_eq!(eta_to_str(2 * 86_400 + 3 * 3600), "02d:03h:00m:00s");
        assert_eq!(condensed_run_str(&['r']), "r(1)");
        assert_eq!(condensed_run_str(&['_', 'r', 'r', 'V']), "_(1),r(2),V(1)");
        assert_eq!(condensed_run_str(&[]), "");
    }

    #[test]
    fn letters_follow_fio() {
        let l = |rw, mix, phase| {
            let mut j = job(rw, phase, [0; 2], [0; 2]);
            j.rwmixread = mix;
            j.letter()
        };
        assert_eq!(l(RwMode::RandRead, 50, JobPhase::Running), 'r');
        assert_eq!(l(RwMode::Read, 50, JobPhase::Running), 'R');
        assert_eq!(l(RwMode::RandWrite, 50, JobPhase::Running), 'w');
        assert_eq!(l(RwMode::Write, 50, JobPhase::Running), 'W');
        assert_eq!(l(RwMode::RandRw, 50, JobPhase::Running), 'm');
        assert_eq!(l(RwMode::ReadWrite, 50, JobPhase::Running), 'M');
        assert_eq!(l(RwMode::RandRw, 100, JobPhase::Running), 'r');
        assert_eq!(l(RwMode::ReadWrite, 0, JobPhase::Running), 'W');
        assert_eq!(l(RwMode::Write, 50, JobPhase::Verifying), 'V');
        assert_eq!(l(RwMode::Write, 50, JobPhase::Ramp), '/');
        assert_eq!(l(RwMode::Write, 50, JobPhase::Finished), '_');
        assert_eq!(l(RwMode::Write, 50, JobPhase::Failed), 'X');
        assert_eq!(l(RwMode::Write, 50, JobPhase::Killed), 'K');
    }

    #[test]
    fn the_issue_example_line() {
        let mut line = EtaLine::new();
        // 1 s in: no estimate yet, only the job count.
        let one = progress(
            1,
            vec![job(RwMode::RandRead, JobPhase::Running, [0; 2], [0; 2])],
        );
        assert_eq!(line.render(&one).unwrap(), "Jobs: 1 (f=1)\r");
        // 5 s into a 10 s time-based run; 4 s since the last line at 120 MiB/s,
        // 30.7k IOPS.
        let bytes = (4 * 120) << 20;
        let ios = 4 * 30_700;
        let five = progress(
            5,
            vec![job(
                RwMode::RandRead,
                JobPhase::Running,
                [bytes, 0],
                [ios, 0],
            )],
        );
        let l = line.render(&five).unwrap();
        assert_eq!(
            l,
            "Jobs: 1 (f=1): [r(1)][50.0%][r=120MiB/s][r=30.7k IOPS][eta 00m:05s]\r"
        );
        // A shorter line pads over the previous one; reads and writes both shown.
        let six = progress(
            6,
            vec![job(
                RwMode::RandRw,
                JobPhase::Running,
                [bytes + (1 << 20), 1 << 20],
                [ios + 256, 256],
            )],
        );
        let l6 = line.render(&six).unwrap();
        assert!(
            l6.starts_with("Jobs: 1 (f=1): [m(1)][60.0%][r=1024KiB/s,w=1024KiB/s][r=256,w=256 IOPS][eta 00m:04s]"),
            "{l6}"
        );
        assert_eq!(l6.len(), (l.len() - 1).max(l6.trim_end().len()) + 1);
        // Everything done: nothing more; clear blanks the last line.
        let done = progress(
            7,
            vec![job(RwMode::RandRw, JobPhase::Finished, [0; 2], [0; 2])],
        );
        assert_eq!(line.render(&done), None);
        let c = line.clear();
        assert!(c.starts_with('\r') && c.ends_with('\r') && c.trim().is_empty());
        assert_eq!(line.clear(), "");
    }

    #[test]
    fn size_based_eta_and_verify_share() {
        assert_eq!(
            JobProgress::total_with_verify(100, RwMode::RandWrite, 50, true),
            200
        );
        assert_eq!(
            JobProgress::total_with_verify(100, RwMode::RandRw, 70, true),
            130
        );
        assert_eq!(
            JobProgress::total_with_verify(100, RwMode::RandRead, 50, true),
            100
        );
        let mut j = job(RwMode::Write, JobPhase::Running, [0, 1 << 29], [0, 1]);
        j.total_bytes = 1 << 30;
        let mut p = progress(4, vec![j]);
        p.time_based = false;
        p.runtime = Duration::ZERO;
        // Half done in 4 s: 4 s to go, 50%.
        let l = EtaLine::new().render(&p).unwrap();
        assert!(
            l.contains("[W(1)][50.0%]") && l.contains("[eta 00m:04s]"),
            "{l}"
        );
        // During the ramp: no percentage.
        let r = progress(4, vec![job(RwMode::Read, JobPhase::Ramp, [0; 2], [0; 2])]);
        let l = EtaLine::new().render(&r).unwrap();
        assert!(l.starts_with("Jobs: 1 (f=0): [/(1)][-.-%]"), "{l}");
    }
}
