//! Ctrl-C and SIGTERM for `nvmf-bench`, as fio handles them (backend.c `sig_int`):
//! the first one stops the jobs, which then finish what is in flight; the caller
//! prints the report of what ran, disconnects and exits with status 128 (fio's
//! `exit_value`). A second one exits at once with the shell's status for that signal
//! (128 + its number: 130 for SIGINT, 143 for SIGTERM), with no report; fio has no such
//! escape.
//!
//! The handlers only touch atomics and `_exit`, which is all a signal handler may
//! safely do; the job threads read the flag every turn. One counter decides which
//! signal is the first: two signals sent back to back may be handled at the same time
//! on two threads, and exactly one of them must stop the run.
//!
//! A [`Watchdog`] thread prints fio's `fio: terminating on signal N` as soon as the
//! first signal arrives, and makes every phase answer it within a second: the phases
//! that cannot watch the flag themselves (connecting, which waits on the network, and
//! disconnecting, which waits on a target that may be gone) end the process with
//! fio's status 128; the jobs stop on their own and the report is written first.
use std::io::Write;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use signal_hook::consts::{SIGINT, SIGTERM};

/// fio's exit status after a run stopped by a signal.
pub const EXIT_STATUS_SIGNALED: u8 = 128;

/// The signals that stop a run.
pub const STOP_SIGNALS: [i32; 2] = [SIGINT, SIGTERM];

/// Installed SIGINT and SIGTERM handlers: see the module docs.
#[derive(Debug, Clone)]
pub struct StopSignals {
    stop: Arc<AtomicBool>,
    signal: Arc<AtomicUsize>,
}

impl StopSignals {
    /// Installs the handlers (for the rest of the process's life).
    ///
    /// Errors: the system refused a handler (`sigaction`).
    pub fn install() -> std::io::Result<Self> {
        let stop = Arc::new(AtomicBool::new(false));
        let signal = Arc::new(AtomicUsize::new(0));
        let seen = Arc::new(AtomicUsize::new(0));
        for sig in STOP_SIGNALS {
            let (stop, signal, seen) = (Arc::clone(&stop), Arc::clone(&signal), Arc::clone(&seen));
            let action = move || {
                if seen.fetch_add(1, Ordering::SeqCst) > 0 {
                    signal_hook::low_level::exit(128 + sig);
                }
                signal.store(sig as usize, Ordering::SeqCst);
                stop.store(true, Ordering::SeqCst);
            };
            // SAFETY: the action does only atomic operations and `_exit`, both
            // async-signal-safe, and allocates nothing.
            unsafe { signal_hook::low_level::register(sig, action) }?;
        }
        Ok(Self { stop, signal })
    }

    /// The flag the first signal sets (for [`crate::RunControl::stop`]).
    pub fn flag(&self) -> &AtomicBool {
        &self.stop
    }

    /// The signal received, if any.
    pub fn received(&self) -> Option<i32> {
        match self.signal.load(Ordering::Relaxed) {
            0 => None,
            s => i32::try_from(s).ok(),
        }
    }
}

/// Where a run is, for the [`Watchdog`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum RunPhase {
    /// Checking, laying out the embedded target's file, measuring the baseline.
    Setup = 0,
    /// Connecting to the target (a blocking wait on the network).
    Connecting = 1,
    /// The jobs run (they stop on the flag themselves).
    Running = 2,
    /// Writing the report (never cut off).
    Reporting = 3,
    /// Disconnecting (may wait on a dead target).
    Disconnecting = 4,
}

/// How long after a signal the connecting phase is given before the process exits.
pub const CONNECT_GRACE: Duration = Duration::from_millis(50);

/// How long after a signal any phase but the report may take before the process exits
/// (the jobs drain for [`crate::RunOptions::stop_grace`] within it).
pub const SIGNAL_DEADLINE: Duration = Duration::from_millis(700);

/// The thread that answers a stop signal in every phase; see the module docs.
#[derive(Debug, Clone)]
pub struct Watchdog {
    phase: Arc<AtomicU8>,
    announced: Arc<AtomicBool>,
    to_stdout: bool,
}

impl Watchdog {
    /// Starts watching `signals`; fio's line goes to standard output when
    /// `to_stdout` (fio's `log_info`), else to standard error.
    pub fn start(signals: &StopSignals, to_stdout: bool) -> Self {
        let w = Watchdog {
            phase: Arc::new(AtomicU8::new(RunPhase::Setup as u8)),
            announced: Arc::new(AtomicBool::new(false)),
            to_stdout,
        };
        let (me, signals) = (w.clone(), signals.clone());
        let _ = std::thread::Builder::new()
            .name("nvmf-bench-signals".into())
            .spawn(move || {
                let mut since: Option<Instant> = None;
                loop {
                    std::thread::sleep(Duration::from_millis(10));
                    let Some(sig) = signals.received() else {
                        continue;
                    };
                    let t0 = *since.get_or_insert_with(Instant::now);
                    me.announce(sig);
                    let waited = t0.elapsed();
                    let phase = me.phase.load(Ordering::Relaxed);
                    let limit = if phase == RunPhase::Connecting as u8 {
                        CONNECT_GRACE
                    } else if phase == RunPhase::Reporting as u8 {
                        continue;
                    } else {
                        SIGNAL_DEADLINE
                    };
                    if waited >= limit {
                        me.exit();
                    }
                }
            });
        w
    }

    /// Enters `phase`.
    pub fn enter(&self, phase: RunPhase) {
        self.phase.store(phase as u8, Ordering::Relaxed);
    }

    /// Prints fio's `fio: terminating on signal N` (once).
    pub fn announce(&self, sig: i32) {
        if self.announced.swap(true, Ordering::SeqCst) {
            return;
        }
        let line = format!("\nfio: terminating on signal {sig}\n");
        if self.to_stdout {
            let mut o = std::io::stdout().lock();
            let _ = o.write_all(line.as_bytes());
            let _ = o.flush();
        } else {
            eprint!("{line}");
        }
    }

    /// Ends the process with fio's status after a signal.
    pub fn exit(&self) -> ! {
        let _ = std::io::stdout().lock().flush();
        std::process::exit(i32::from(EXIT_STATUS_SIGNALED));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_signal_sets_the_flag_and_names_itself() {
        let s = StopSignals::install().unwrap();
        assert_eq!(s.received(), None);
        assert!(!s.flag().load(Ordering::Relaxed));
        // SIGTERM to ourselves: the handler stores to the atomics (a second one would
        // exit the test process, so only one is sent).
        signal_hook::low_level::raise(SIGTERM).unwrap();
        assert!(s.flag().load(Ordering::Relaxed));
        assert_eq!(s.received(), Some(SIGTERM));
    }
}
