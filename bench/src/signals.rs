//! Ctrl-C and SIGTERM for `nvmf-bench`, as fio handles them (backend.c `sig_int`):
//! the first one stops the jobs, which then finish what is in flight; the caller
//! prints the report of what ran, disconnects and exits with status 128 (fio's
//! `exit_value`). A second one exits at once with the shell's status for that signal
//! (128 + its number: 130 for SIGINT, 143 for SIGTERM), with no report; fio has no such
//! escape.
//!
//! The handlers only touch atomics and `_exit`, which is all a signal handler may
//! safely do; the busy-polling runner reads the flag every turn. One counter decides
//! which signal is the first: two signals sent back to back may be handled at the
//! same time on two threads, and exactly one of them must stop the run.
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

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
