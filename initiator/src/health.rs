//! [`ControllerHealth`]: whether the host has declared its controller dead, shared
//! between the thread that keeps the admin queue alive and whoever drives the I/O
//! queues.
//!
//! When Keep Alive fails (NVMe Base 2.x §3.9: the Keep Alive Timer expired, or the
//! admin queue's transport failed) the controller is gone: commands outstanding on
//! its I/O queues will never complete, even when their own QPs are still in RTS (a
//! target that vanished after ACKing the capsules leaves the host's requester with
//! nothing to resend). Linux's nvme-rdma then cancels them in error recovery; the
//! owner of the I/O queues reads this flag to do the same.
use std::sync::{Arc, OnceLock};

/// A shared, set-once "controller declared dead" flag with its reason. Clones share
/// the flag.
#[derive(Clone, Debug, Default)]
pub struct ControllerHealth(Arc<OnceLock<String>>);

impl ControllerHealth {
    /// A healthy controller.
    pub fn new() -> Self {
        Self::default()
    }

    /// Declares the controller dead because of `reason` (e.g. the Keep Alive error).
    /// Only the first reason is kept.
    pub fn declare_dead(&self, reason: impl Into<String>) {
        let _ = self.0.set(reason.into());
    }

    /// Why the controller was declared dead; `None` while it is healthy.
    pub fn dead_reason(&self) -> Option<&str> {
        self.0.get().map(String::as_str)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_reason_is_shared_by_clones() {
        let h = ControllerHealth::new();
        let seen = h.clone();
        assert_eq!(seen.dead_reason(), None);
        h.declare_dead("Keep Alive timed out");
        h.declare_dead("later");
        assert_eq!(seen.dead_reason(), Some("Keep Alive timed out"));
    }
}
