//! Path choice and error classification of the multipath layer, sans-IO: what Linux's
//! `nvme_find_path` / `nvme_round_robin_path` / `nvme_queue_depth_path` and
//! `nvme_failover_req` decide, on plain values.
use nvme::ana::AnaState;
use nvme::status::{PathStatus, StatusCodeType};

use crate::error::{HostError, QueueError};

/// How the multipath layer picks a path for each command (Linux's `iopolicy`, less
/// NUMA: this library knows no node of the caller).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum PathPolicy {
    /// The first usable path in connection order among the best ANA state
    /// (optimized before non-optimized): every command on one path until it fails
    /// or turns worse (Linux's `numa` policy on a one-node machine).
    #[default]
    FirstOptimized,
    /// Round robin over the usable paths of the best ANA state (`round-robin`).
    RoundRobin,
    /// The usable path of the best ANA state with the fewest commands outstanding
    /// (`queue-depth`).
    QueueDepth,
}

/// What the chooser knows of one path for one namespace.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PathView {
    /// The path's controller is live (not reconnecting, not given up).
    pub live: bool,
    /// The namespace's ANA state through this path (`Optimized` where the controller
    /// reports no ANA).
    pub ana: AnaState,
    /// Commands of this layer outstanding on the path.
    pub outstanding: usize,
}

impl PathView {
    /// The path's rank: 0 optimized, 1 non-optimized, `None` not usable (down, or
    /// inaccessible, persistent loss, in transition).
    pub fn rank(&self) -> Option<u8> {
        if !self.live {
            return None;
        }
        match self.ana {
            AnaState::Optimized => Some(0),
            AnaState::NonOptimized => Some(1),
            _ => None,
        }
    }
}

/// The index of the path `policy` picks among `paths`, `None` when no path is
/// usable. `turn` is a counter the caller increments per command (round robin).
pub fn choose(paths: &[PathView], policy: PathPolicy, turn: usize) -> Option<usize> {
    let best = paths.iter().filter_map(PathView::rank).min()?;
    let usable: Vec<usize> = (0..paths.len())
        .filter(|&i| paths[i].rank() == Some(best))
        .collect();
    match policy {
        PathPolicy::FirstOptimized => usable.first().copied(),
        PathPolicy::RoundRobin => usable.get(turn % usable.len()).copied(),
        PathPolicy::QueueDepth => usable.iter().copied().min_by_key(|&i| paths[i].outstanding),
    }
}

/// What a failed command tells the multipath layer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Failure {
    /// The namespace is not accessible through this path in ANA state `.0` (an ANA
    /// path status): retry on another path, read the ANA log again.
    Ana(AnaState),
    /// The path failed (transport, disconnect, reconnect, controller lost, other path
    /// statuses): retry on another path.
    Path,
    /// The command itself failed (an NVMe status of the namespace or the command,
    /// a bad argument): no retry.
    Command,
}

/// Classifies `e`, as Linux's `nvme_decide_disposition` does: a status with DNR is
/// the command's (no failover, even a path status); a path related status (SCT 3h)
/// fails over; other statuses and errors of the command's own making (a bad argument,
/// a buffer too small or too large) are the command's; everything else (the
/// transport, a disconnect, the controller reconnecting or lost) is the path's.
pub fn classify(e: &HostError) -> Failure {
    match e {
        HostError::Nvme { status, .. } if status.dnr => Failure::Command,
        HostError::Nvme { status, .. } if status.sct == StatusCodeType::PathRelated => {
            match PathStatus::from_value(status.sc) {
                Some(PathStatus::AnaInaccessible) => Failure::Ana(AnaState::Inaccessible),
                Some(PathStatus::AnaPersistentLoss) => Failure::Ana(AnaState::PersistentLoss),
                Some(PathStatus::AnaTransition) => Failure::Ana(AnaState::Change),
                _ => Failure::Path,
            }
        }
        HostError::Nvme { .. }
        | HostError::InvalidArgument(_)
        | HostError::Queue(
            QueueError::TooLarge { .. } | QueueError::ShortBuffer { .. } | QueueError::Pool(_),
        ) => Failure::Command,
        _ => Failure::Path,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nvme::status::{GenericStatus, Status};

    fn p(live: bool, ana: AnaState, outstanding: usize) -> PathView {
        PathView {
            live,
            ana,
            outstanding,
        }
    }

    #[test]
    fn optimized_before_non_optimized() {
        let paths = [
            p(true, AnaState::NonOptimized, 0),
            p(true, AnaState::Optimized, 9),
            p(true, AnaState::Optimized, 3),
        ];
        assert_eq!(choose(&paths, PathPolicy::FirstOptimized, 0), Some(1));
        assert_eq!(choose(&paths, PathPolicy::RoundRobin, 0), Some(1));
        assert_eq!(choose(&paths, PathPolicy::RoundRobin, 1), Some(2));
        assert_eq!(choose(&paths, PathPolicy::RoundRobin, 2), Some(1));
        assert_eq!(choose(&paths, PathPolicy::QueueDepth, 0), Some(2));
        // The optimized paths go: the non-optimized one takes over.
        let paths = [
            p(true, AnaState::NonOptimized, 0),
            p(false, AnaState::Optimized, 0),
            p(true, AnaState::Inaccessible, 0),
        ];
        for policy in [
            PathPolicy::FirstOptimized,
            PathPolicy::RoundRobin,
            PathPolicy::QueueDepth,
        ] {
            assert_eq!(choose(&paths, policy, 5), Some(0), "{policy:?}");
        }
    }

    #[test]
    fn no_usable_path() {
        let paths = [
            p(true, AnaState::Inaccessible, 0),
            p(true, AnaState::PersistentLoss, 0),
            p(true, AnaState::Change, 0),
            p(false, AnaState::Optimized, 0),
        ];
        assert_eq!(choose(&paths, PathPolicy::RoundRobin, 0), None);
        assert_eq!(choose(&[], PathPolicy::QueueDepth, 0), None);
    }

    #[test]
    fn failures() {
        let nvme = |status| HostError::Nvme {
            command: "Write",
            status,
            dw0: 0,
        };
        assert_eq!(
            classify(&nvme(Status::path(PathStatus::AnaInaccessible))),
            Failure::Ana(AnaState::Inaccessible)
        );
        assert_eq!(
            classify(&nvme(Status::path(PathStatus::AnaTransition))),
            Failure::Ana(AnaState::Change)
        );
        assert_eq!(
            classify(&nvme(Status::path(PathStatus::HostPathingError))),
            Failure::Path
        );
        assert_eq!(
            classify(&nvme(Status::generic(GenericStatus::LbaOutOfRange))),
            Failure::Command
        );
        assert_eq!(
            classify(&HostError::TargetDisconnected { qid: 1 }),
            Failure::Path
        );
        assert_eq!(classify(&HostError::FailFast("lost".into())), Failure::Path);
        assert_eq!(
            classify(&HostError::InvalidArgument("x".into())),
            Failure::Command
        );
    }
}
