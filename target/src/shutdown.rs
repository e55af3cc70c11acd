//! A clean shutdown and its report (issue 16 item 3; the steps are
//! [`crate::server::TargetHandle::shutdown_within`]'s): connection requests refused,
//! the poll groups drained (commands in flight answered, later ones Command Aborted
//! due to SQ Deletion, [`crate::rdma::core::DRAIN_STATUS`]), every namespace with a
//! volatile write cache flushed, every queue disconnected (CM DREQ), all within a bound
//! ([`DEFAULT_SHUTDOWN_TIMEOUT_MS`] unless configured, `shutdown_timeout_ms`).
//!
//! The namespaces are flushed because the target advertises a volatile write cache
//! (Identify Controller VWC 1): writes a host completed without FUA may sit in the page
//! cache (or a device's cache) until a Flush; a host that is cut off by the shutdown
//! cannot send one, so the target does.
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam::channel;

use crate::rdma::DrainReport;
use crate::subsystem::Registry;

/// The default bound of a clean shutdown, in milliseconds: 10 s.
pub const DEFAULT_SHUTDOWN_TIMEOUT_MS: u32 = 10_000;

/// How long the shutdown waits for the hosts' DREPs after its DREQs, at most (within
/// the bound): the CM sends the DREQs at once; this only lets the answers come back.
pub const DREP_WAIT: Duration = Duration::from_secs(1);

/// What a clean shutdown did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ShutdownReport {
    /// The bound it had.
    pub bound: Duration,
    /// How long it took.
    pub elapsed: Duration,
    /// Commands in flight when it began (each answered with its CQE unless
    /// `groups_not_drained`).
    pub in_flight: u64,
    /// Commands answered with Command Aborted due to SQ Deletion instead of run (those
    /// that arrived during the shutdown, and the held Asynchronous Event Requests).
    pub aborted: u64,
    /// Poll groups that still had commands in flight at the bound.
    pub groups_not_drained: u32,
    /// Namespaces flushed (`fdatasync`).
    pub namespaces_flushed: u32,
    /// Namespaces whose flush failed or did not end by the bound, with why.
    pub flush_failures: Vec<String>,
    /// Queues disconnected (CM DREQ).
    pub queues_disconnected: usize,
    /// Every disconnected host answered (DREP) or left within the wait.
    pub disconnects_confirmed: bool,
}

impl ShutdownReport {
    pub(crate) fn new(bound: Duration) -> Self {
        ShutdownReport {
            bound,
            ..Default::default()
        }
    }

    pub(crate) fn add_drained(&mut self, r: &DrainReport) {
        self.in_flight += u64::from(r.counts.in_flight_at_start);
        self.aborted += r.counts.aborted;
    }

    /// Whether everything was done: every command answered, every namespace flushed.
    /// (A host that did not answer its DREQ does not make a shutdown unclean.)
    pub fn clean(&self) -> bool {
        self.groups_not_drained == 0 && self.flush_failures.is_empty()
    }

    /// The report in words, as the log line says it.
    pub fn words(&self) -> String {
        let mut w = format!(
            "shut down in {:.3} s (bound {:.3} s): {} command(s) in flight answered, {} \
             answered Command Aborted due to SQ Deletion, {} namespace(s) flushed, {} \
             queue(s) disconnected (CM DREQ{})",
            self.elapsed.as_secs_f64(),
            self.bound.as_secs_f64(),
            self.in_flight,
            self.aborted,
            self.namespaces_flushed,
            self.queues_disconnected,
            if self.disconnects_confirmed {
                ", every host answered"
            } else {
                ", not every host answered"
            }
        );
        if self.groups_not_drained > 0 {
            w.push_str(&format!(
                "; {} poll group(s) still had commands in flight at the bound (their \
                 hosts get no CQE for them): raise shutdown_timeout_ms",
                self.groups_not_drained
            ));
        }
        for f in &self.flush_failures {
            w.push_str("; ");
            w.push_str(f);
        }
        w
    }

    /// Logs the report: `info` when clean, `warn` otherwise.
    pub fn log(&self) {
        let elapsed_ms = self.elapsed.as_millis() as u64;
        let bound_ms = self.bound.as_millis() as u64;
        if self.clean() {
            tracing::info!(
                elapsed_ms,
                bound_ms,
                in_flight = self.in_flight,
                aborted = self.aborted,
                namespaces_flushed = self.namespaces_flushed,
                queues_disconnected = self.queues_disconnected,
                "{}",
                self.words()
            );
        } else {
            tracing::warn!(
                elapsed_ms,
                bound_ms,
                in_flight = self.in_flight,
                aborted = self.aborted,
                namespaces_flushed = self.namespaces_flushed,
                queues_disconnected = self.queues_disconnected,
                "{}",
                self.words()
            );
        }
    }
}

/// Flushes (`fdatasync`) every namespace of `reg` that has a volatile write cache, each
/// in a thread of its own, waiting for them until `deadline`; counts the flushes and
/// the failures in `report`.
pub(crate) fn flush_namespaces(reg: &Registry, deadline: Instant, report: &mut ShutdownReport) {
    let (tx, rx) = channel::unbounded();
    let mut started = 0;
    for s in reg.subsystems().iter() {
        for n in s.namespaces().iter() {
            if !n.ns.has_volatile_cache() {
                continue;
            }
            let (ns, tx) = (Arc::clone(&n.ns), tx.clone());
            let what = format!(
                "namespace {} of {} ({})",
                n.nsid,
                s.nqn,
                n.ns.path().display()
            );
            let spawned = std::thread::Builder::new()
                .name("nvmf-flush".into())
                .spawn(move || {
                    let _ = tx.send((what, ns.flush()));
                });
            match spawned {
                Ok(_) => started += 1,
                Err(e) => report
                    .flush_failures
                    .push(format!("flushing {}: no thread: {e}", n.nsid)),
            }
        }
    }
    for received in 0..started {
        match rx.recv_deadline(deadline) {
            Ok((_, Ok(()))) => report.namespaces_flushed += 1,
            Ok((what, Err(e))) => report
                .flush_failures
                .push(format!("flushing {what} failed: {e}")),
            Err(_) => {
                report.flush_failures.push(format!(
                    "{} namespace flush(es) did not end by the bound (the kernel carries \
                     them on)",
                    started - received
                ));
                break;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_name_every_step_and_what_was_left() {
        let mut r = ShutdownReport::new(Duration::from_secs(10));
        r.elapsed = Duration::from_millis(1500);
        r.in_flight = 14;
        r.aborted = 3;
        r.namespaces_flushed = 2;
        r.queues_disconnected = 5;
        r.disconnects_confirmed = true;
        assert!(r.clean());
        assert_eq!(
            r.words(),
            "shut down in 1.500 s (bound 10.000 s): 14 command(s) in flight answered, 3 \
             answered Command Aborted due to SQ Deletion, 2 namespace(s) flushed, 5 \
             queue(s) disconnected (CM DREQ, every host answered)"
        );
        r.groups_not_drained = 1;
        r.flush_failures
            .push("flushing namespace 1 failed: EIO".into());
        assert!(!r.clean());
        let w = r.words();
        assert!(
            w.contains("raise shutdown_timeout_ms") && w.contains("EIO"),
            "{w}"
        );
    }
}
