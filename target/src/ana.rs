//! Asymmetric Namespace Access on the target side (NVMe Base 2.x §8.1): every
//! namespace belongs to an ANA group (`ana_grpid`, default 1), and every port has a
//! state for every group (optimized unless configured). The state decides what an I/O
//! command to the namespace through that port gets: executed (optimized,
//! non-optimized) or one of the ANA path statuses ([`nvme::ana::AnaState::path_status`]);
//! admin commands are never refused. The ANA log page (LID 0Ch) of a controller is its
//! port's view.
//!
//! The states live in one [`AnaTable`] of atomics in the [`crate::subsystem::Registry`]:
//! written only when an operator changes a state ([`crate::TargetHandle::set_ana_state`]),
//! read by the poll groups per I/O command without a lock (a load of a byte in a cache
//! line no one writes between changes), as the Traffic Based Keep Alive flag of
//! [`crate::controller::Controller::note_traffic`].
//!
//! Linux nvmet keeps the same model: `ports/N/ana_groups/G/ana/state` and the
//! namespace's `ana_grpid`; its group 1 always exists.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;

use nvme::ana::{AnaGroupDesc, AnaLog, AnaState, ANA_MAX_GROUPS};
use thiserror::Error;

use crate::subsystem::Subsystem;

/// The largest ANA Group ID (Identify Controller ANAGRPMAX) and the number of groups
/// (NANAGRPID): 128, as Linux nvmet's `NVMET_MAX_ANAGRPS`.
pub const ANAGRPMAX: u32 = ANA_MAX_GROUPS;

/// The group a namespace belongs to unless configured (Linux nvmet's
/// `NVMET_DEFAULT_ANA_GRPID`).
pub const DEFAULT_ANA_GRPID: u32 = 1;

/// ANA Transition Time (Identify Controller ANATT) in seconds: how long a group may stay
/// in the change state (Linux nvmet: 10).
pub const ANATT_SECONDS: u8 = 10;

/// Why an ANA state change was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum AnaError {
    /// No listen address has this port ID.
    #[error("no port has PORTID {portid}")]
    UnknownPort {
        /// The port ID asked for.
        portid: u16,
    },
    /// The group ID is 0 or above [`ANAGRPMAX`].
    #[error("ANA group {grpid} is outside 1..={ANAGRPMAX}")]
    GroupOutOfRange {
        /// The group ID asked for.
        grpid: u32,
    },
}

/// One port's ANA states, by group ID.
#[derive(Debug)]
struct PortAna {
    portid: u16,
    /// A reload removed the port: its PORTID no longer names it (the slot stays, so
    /// the later ports keep their indices).
    removed: AtomicBool,
    /// State of group `g` at index `g` (index 0 unused), as [`AnaState::value`].
    states: Box<[AtomicU8]>,
    /// Changes of group `g` on this port (its descriptor's Change Count).
    chgcnt: Box<[AtomicU64]>,
}

/// Every port's ANA state of every group (see the module docs). Ports are in the
/// order of [`crate::subsystem::Registry::ports`]; a queue knows its port by that
/// index. A reload appends the ports it adds ([`AnaTable::add_port`]) and marks those
/// it removes ([`AnaTable::remove_port`]).
#[derive(Debug)]
pub struct AnaTable {
    ports: arc_swap::ArcSwap<Vec<Arc<PortAna>>>,
    /// Whether group `g` exists (is reported in the log page): group 1, every group a
    /// port configures, every group a namespace names, every group set since.
    exists: Box<[AtomicBool]>,
    /// The log's Change Count: starts at 1 and counts every change on any port.
    chgcnt: AtomicU64,
}

fn in_range(grpid: u32) -> bool {
    (1..=ANAGRPMAX).contains(&grpid)
}

impl AnaTable {
    /// A table for ports `ports` (each its PORTID and the groups it configures, with
    /// their states; unlisted groups are optimized) with groups `groups` in use by
    /// namespaces. Group IDs outside 1..=[`ANAGRPMAX`] are ignored (the configuration's
    /// validation refuses them first).
    pub fn new(
        ports: &[(u16, Vec<(u32, AnaState)>)],
        groups: impl IntoIterator<Item = u32>,
    ) -> Self {
        let n = ANAGRPMAX as usize + 1;
        let exists: Box<[AtomicBool]> = (0..n).map(|_| AtomicBool::new(false)).collect();
        exists[DEFAULT_ANA_GRPID as usize].store(true, Ordering::Relaxed);
        for g in groups.into_iter().filter(|&g| in_range(g)) {
            exists[g as usize].store(true, Ordering::Relaxed);
        }
        let ports = ports
            .iter()
            .map(|(portid, configured)| Arc::new(port_ana(*portid, configured, &exists)))
            .collect();
        AnaTable {
            ports: arc_swap::ArcSwap::from_pointee(ports),
            exists,
            chgcnt: AtomicU64::new(1),
        }
    }

    /// Appends a port a reload added (PORTID `portid`, its configured groups'
    /// states; the others optimized) and returns its index.
    pub fn add_port(&self, portid: u16, configured: &[(u32, AnaState)]) -> usize {
        let mut ports = self.ports.load().to_vec();
        ports.push(Arc::new(port_ana(portid, configured, &self.exists)));
        let index = ports.len() - 1;
        self.ports.store(Arc::new(ports));
        index
    }

    /// Marks port `index` removed by a reload: [`AnaTable::port_index`] no longer
    /// finds its PORTID (a port added later may reuse it).
    pub fn remove_port(&self, index: usize) {
        if let Some(p) = self.ports.load().get(index) {
            p.removed.store(true, Ordering::Relaxed);
        }
    }

    /// How many port slots the table has (removed ones included).
    pub fn port_slots(&self) -> usize {
        self.ports.load().len()
    }

    /// The state of group `grpid` through port `port` (an index in the registry's
    /// ports). A port or group the table does not know is optimized (a registry built
    /// without ANA configuration).
    pub fn state(&self, port: usize, grpid: u32) -> AnaState {
        self.ports
            .load()
            .get(port)
            .and_then(|p| p.states.get(grpid as usize))
            .and_then(|s| AnaState::from_value(s.load(Ordering::Relaxed)))
            .unwrap_or(AnaState::Optimized)
    }

    /// The index of the port with PORTID `portid`.
    pub fn port_index(&self, portid: u16) -> Option<usize> {
        (self.ports.load().iter())
            .position(|p| p.portid == portid && !p.removed.load(Ordering::Relaxed))
    }

    /// Sets group `grpid` on the port with PORTID `portid` to `state` and returns the
    /// port's index and whether the state changed (only a change counts in the Change
    /// Counts and deserves an ANA change notice). A group set here exists from now on.
    ///
    /// # Errors
    /// [`AnaError::UnknownPort`], [`AnaError::GroupOutOfRange`].
    pub fn set(&self, portid: u16, grpid: u32, state: AnaState) -> Result<(usize, bool), AnaError> {
        if !in_range(grpid) {
            return Err(AnaError::GroupOutOfRange { grpid });
        }
        let index = self
            .port_index(portid)
            .ok_or(AnaError::UnknownPort { portid })?;
        let ports = self.ports.load();
        let p = &ports[index];
        let g = grpid as usize;
        let was_new = !self.exists[g].swap(true, Ordering::Relaxed);
        let old = p.states[g].swap(state.value(), Ordering::Release);
        let changed = old != state.value() || was_new;
        if changed {
            p.chgcnt[g].fetch_add(1, Ordering::Relaxed);
            self.chgcnt.fetch_add(1, Ordering::Relaxed);
        }
        Ok((index, changed))
    }

    /// The groups in use (by namespaces or configured on a port), in increasing order.
    pub fn groups(&self) -> Vec<u32> {
        (1..=ANAGRPMAX)
            .filter(|&g| self.exists[g as usize].load(Ordering::Relaxed))
            .collect()
    }

    /// Marks group `grpid` as in use (a namespace a reload added is in it), so the
    /// ANA log lists it; IDs outside 1..=[`ANAGRPMAX`] are ignored.
    pub fn note_group(&self, grpid: u32) {
        if in_range(grpid) && !self.exists[grpid as usize].swap(true, Ordering::Relaxed) {
            self.chgcnt.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// The ANA log page of a controller of `subsys` on port `port`: one descriptor per
    /// existing group in increasing group order, each with the port's state and the
    /// subsystem's namespaces in the group (none under `rgo`, Return Groups Only).
    pub fn log(&self, port: usize, subsys: &Subsystem, rgo: bool) -> AnaLog {
        let ports = self.ports.load();
        let groups = (1..=ANAGRPMAX)
            .filter(|&g| self.exists[g as usize].load(Ordering::Relaxed))
            .map(|grpid| AnaGroupDesc {
                grpid,
                chgcnt: ports
                    .get(port)
                    .map_or(0, |p| p.chgcnt[grpid as usize].load(Ordering::Relaxed)),
                state: self.state(port, grpid),
                nsids: if rgo {
                    Vec::new()
                } else {
                    (subsys.namespaces().iter())
                        .filter(|n| n.ana_grpid == grpid)
                        .map(|n| n.nsid)
                        .collect()
                },
            })
            .collect();
        AnaLog {
            chgcnt: self.chgcnt.load(Ordering::Relaxed),
            groups,
        }
    }
}

/// Port `portid`'s states: every group optimized but `configured`, which (in range)
/// also exist from now on in `exists`.
fn port_ana(portid: u16, configured: &[(u32, AnaState)], exists: &[AtomicBool]) -> PortAna {
    let n = ANAGRPMAX as usize + 1;
    let states: Box<[AtomicU8]> = (0..n)
        .map(|_| AtomicU8::new(AnaState::Optimized.value()))
        .collect();
    for &(g, s) in configured.iter().filter(|(g, _)| in_range(*g)) {
        states[g as usize].store(s.value(), Ordering::Relaxed);
        exists[g as usize].store(true, Ordering::Relaxed);
    }
    PortAna {
        portid,
        removed: AtomicBool::new(false),
        states,
        chgcnt: (0..n).map(|_| AtomicU64::new(0)).collect(),
    }
}

impl Default for AnaTable {
    /// No ports: every state reads optimized, only group 1 exists.
    fn default() -> Self {
        AnaTable::new(&[], [])
    }
}

/// Sets the state of group `grpid` on the port with PORTID `portid`
/// ([`AnaTable::set`]) and, when it changed, posts the ANA Change notice (AER DW0
/// 000C0302h) to the I/O controllers on that port whose host enabled it (AEC bit 11),
/// whose held Asynchronous Event Requests the poll groups `groups` then answer at
/// once. The one path of [`crate::TargetHandle::set_ana_state`] and of a reload.
/// Returns whether the state changed.
///
/// # Errors
/// As [`AnaTable::set`].
pub(crate) fn set_and_notify(
    reg: &crate::subsystem::Registry,
    groups: &[crossbeam::channel::Sender<crate::rdma::GroupCmd>],
    portid: u16,
    grpid: u32,
    state: AnaState,
) -> Result<bool, AnaError> {
    let (port, changed) = reg.ana.set(portid, grpid, state)?;
    tracing::info!(portid, grpid, state = %state, changed, "ANA state set");
    if changed {
        crate::reload::post_events(reg, groups, |c| {
            c.port == port
                && c.kind == crate::controller::ControllerKind::Io
                && c.post_event_if_enabled(
                    nvme::ana::ANA_CHANGE_AEN_DW0,
                    nvme::features::AEC_ANA_CHANGE,
                )
        });
    }
    Ok(changed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::subsystem::tests::{file_ns, registry_with};
    use crate::subsystem::NamespaceEntry;

    #[test]
    fn states_per_port_and_group() {
        let t = AnaTable::new(
            &[
                (1, vec![(2, AnaState::NonOptimized)]),
                (7, vec![(1, AnaState::Inaccessible)]),
            ],
            [3],
        );
        assert_eq!(t.state(0, 1), AnaState::Optimized);
        assert_eq!(t.state(0, 2), AnaState::NonOptimized);
        assert_eq!(t.state(1, 1), AnaState::Inaccessible);
        assert_eq!(t.state(1, 2), AnaState::Optimized, "unlisted: optimized");
        assert_eq!(t.state(9, 1), AnaState::Optimized, "unknown port");
        assert_eq!(t.set(7, 1, AnaState::Optimized), Ok((1, true)));
        assert_eq!(t.set(7, 1, AnaState::Optimized), Ok((1, false)));
        assert_eq!(t.state(1, 1), AnaState::Optimized);
        assert_eq!(
            t.set(2, 1, AnaState::Change),
            Err(AnaError::UnknownPort { portid: 2 })
        );
        for g in [0, ANAGRPMAX + 1] {
            assert_eq!(
                t.set(1, g, AnaState::Change),
                Err(AnaError::GroupOutOfRange { grpid: g })
            );
        }
    }

    #[test]
    fn log_page_per_port() {
        let dir = tempfile::tempdir().unwrap();
        let mut a = NamespaceEntry::new(1, file_ns(&dir, "a", 1 << 20, 512), 0, "nqn.x");
        let mut b = NamespaceEntry::new(2, file_ns(&dir, "b", 1 << 20, 512), 1, "nqn.x");
        a.ana_grpid = 1;
        b.ana_grpid = 2;
        let reg = registry_with(vec![a, b]);
        let subs = reg.subsystems();
        let sub = &subs[0];
        let t = AnaTable::new(&[(1, vec![]), (2, vec![(1, AnaState::NonOptimized)])], [2]);
        let log = t.log(1, sub, false);
        assert_eq!(log.chgcnt, 1);
        assert_eq!(
            log.groups
                .iter()
                .map(|g| (g.grpid, g.state, g.nsids.clone()))
                .collect::<Vec<_>>(),
            vec![
                (1, AnaState::NonOptimized, vec![1]),
                (2, AnaState::Optimized, vec![2])
            ]
        );
        t.set(2, 2, AnaState::Inaccessible).unwrap();
        let log = t.log(1, sub, true);
        assert_eq!(log.chgcnt, 2);
        assert!(log.groups.iter().all(|g| g.nsids.is_empty()));
        assert_eq!(
            log.group(2).map(|g| (g.state, g.chgcnt)),
            Some((AnaState::Inaccessible, 1))
        );
        // Port 1 (index 0) did not change.
        assert_eq!(t.log(0, sub, false).group(2).map(|g| g.chgcnt), Some(0));
        // A group set at run time exists from then on.
        t.set(1, 9, AnaState::Change).unwrap();
        assert_eq!(
            t.log(0, sub, false).group(9).map(|g| g.state),
            Some(AnaState::Change)
        );
    }
}
