//! Ctrl-C and SIGTERM for `nvmf-bench`, as fio handles them (backend.c `sig_int`):
//! the first one stops the jobs, which then finish what is in flight; the caller
//! prints the report of what ran, disconnects and exits with status 128 (fio's
//! `exit_value`). A second one exits at once with the shell's status for that signal
//! (128 + its number: 130 for SIGINT, 143 for SIGTERM), with no report; fio has no such
//! escape.
//!
//! The handlers only store to atomics (signal-hook's `flag` module), which is all a
//! signal handler may safely do; the busy-polling runner reads the flag every turn.
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use signal_hook::consts::{SIGINT, SIGTERM};
use signal_hook::flag;

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
        for sig in STOP_SIGNALS {
            // Registered first, so it sees the flag as the previous signal left it.
            flag::register_conditional_shutdown(sig, 128 + sig, Arc::clone(&stop))?;
            flag::register_usize(sig, Arc::clone(&signal), sig as usize)?;
            flag::register(sig, Arc::clone(&stop))?;
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
