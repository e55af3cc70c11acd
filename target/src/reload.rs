//! Live reconfiguration (issue 16 item 2): a reload is the difference of two
//! configurations ([`crate::config::diff()`]), applied by the control thread
//! ([`crate::TargetHandle::reload`]) in these steps:
//!
//! 1. **Listen** (the control thread, before anything else changes): each listen
//!    entry the plan adds is listened on: a new `trsvcid` on an address served already
//!    is one more listen on its connection manager; a new address is brought up as at
//!    start (its RDMA device, with the soft provider its own UDP 4791 socket, its
//!    connection manager and its poll groups, one code path with the start). A
//!    request arriving there waits for the control thread, which finishes the reload
//!    first. If a later step fails, these are undone.
//! 2. **Prepare**, changing nothing: open every new back end, build the new
//!    subsystems and host lists, and put the new files in every poll group's io_uring
//!    fixed-file table. Any failure undoes what was prepared (files closed, files it
//!    created removed, slots emptied) and the target runs on as before.
//! 3. **Commit**: swap the namespace lists, host lists, subsystems and ports in the
//!    registry (a removed port stays as a slot marked removed, so queues keep their
//!    port index; an added one is appended); empty the removed namespaces' slots. A
//!    command on a removed NSID that arrives after the swap is answered Invalid
//!    Namespace or Format; one whose file I/O was submitted before finishes; one
//!    parsed before but still waiting for a data buffer then meets an empty slot and
//!    fails with an error status (never a panic). Then the removed namespaces are
//!    **flushed**: once io_uring holds nothing of theirs ([`GroupCmd::Quiesce`], at
//!    most [`QUIESCE_WAIT`]) each with a volatile cache gets an `fdatasync`, and is
//!    closed when the last command holding it is done, so a write the host was
//!    answered for is on stable storage ([`ReloadReport::namespaces_flushed`]).
//! 4. **Notify**: each controller of a subsystem whose namespaces changed gets them
//!    in its Changed Namespace List (log page 04h) and, when the host enabled it (AEC
//!    bit 8), a Namespace Attribute Changed notice; when the discovery log may read
//!    differently (subsystems, hosts, links, referrals, listen entries), GENCTR moves
//!    and each discovery controller that enabled it (AEC bit 31) gets a Discovery Log
//!    Change notice. Held Asynchronous Event Requests complete at once
//!    ([`crate::rdma::GroupCmd::CompleteHeldEvents`]).
//! 5. **End** (the control thread): the controllers the reload no longer admits are
//!    disconnected, as Linux nvmet does: those of a removed subsystem or a removed
//!    port, and the I/O controllers whose host left their subsystem's allowed hosts
//!    (or `allow_any_host` was turned off) or whose subsystem was unlinked from their
//!    port. Their queues first take no new command (answered Command Aborted due to SQ
//!    Deletion) while those in flight get their CQEs (at most [`QUIESCE_WAIT`]); then
//!    each queue gets a CM DREQ and is destroyed. The queues left on a removed port
//!    are dropped likewise, its listen is closed, and an address left without listen
//!    entries stops its poll groups and closes its device.
//!
//! Every other connection is left alone.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam::channel::{self, Sender};

use crate::config::{diff, ReloadPlan, TargetConfig};
use crate::controller::{ControllerKind, AEN_DISCOVERY_CHANGED};
use crate::oplog::QueueEnd;
use crate::rdma::GroupCmd;
use crate::server::{
    access_of, open_namespace, port_of, remove_created, subsystem_of, TargetError,
};
use crate::subsystem::{HostAccess, NamespaceEntry, Registry, Subsystem, MAX_NAMESPACE_FILES};

/// How long the control thread waits for each poll group to take a namespace change.
const GROUP_REPLY_WAIT: Duration = Duration::from_secs(2);

/// How long a reload waits for the I/O in flight on the namespaces it removes before
/// it flushes them, and for the commands in flight of the controllers it ends before
/// it disconnects them.
pub const QUIESCE_WAIT: Duration = Duration::from_secs(2);

/// Why a reload changed nothing.
#[derive(Debug, thiserror::Error)]
pub enum ReloadError {
    /// The new configuration could not be read, parsed or validated.
    #[error("{0}")]
    Config(#[from] crate::config::ConfigError),
    /// The new configuration changes what is fixed while the target runs; each reason
    /// names the setting and what to do instead.
    #[error("not applied: {}", .0.join("; "))]
    Refused(Vec<String>),
    /// A new namespace could not be opened, or a poll group could not take it.
    #[error("not applied: {0}")]
    Prepare(String),
    /// The control thread is gone (the target is stopping).
    #[error("not applied: the target is stopping")]
    Stopped,
}

/// What a reload did: the plan applied, and the controllers it notified.
#[derive(Debug, Clone, Default)]
pub struct ReloadReport {
    /// The changes applied.
    pub plan: ReloadPlan,
    /// Controllers that got a Changed Namespace List entry.
    pub ns_notified: usize,
    /// Discovery controllers that got a Discovery Log Change notice.
    pub discovery_notified: usize,
    /// ANA states that changed, `(PORTID, ANAGRPID, state)`: after a reload every port's
    /// groups are in the states the configuration names (unlisted: optimized), also
    /// where [`crate::TargetHandle::set_ana_state`] had moved them since.
    pub ana_set: Vec<(u16, u32, nvme::ana::AnaState)>,
    /// Removed namespaces with a volatile cache (files, block devices) flushed
    /// (`fdatasync`) before they were closed.
    pub namespaces_flushed: usize,
    /// What went wrong flushing the removed namespaces (each names the namespace and
    /// the error), or that their I/O in flight did not finish within [`QUIESCE_WAIT`].
    pub flush_failures: Vec<String>,
    /// Controllers for the control thread to disconnect, and why: their subsystem was
    /// removed, their host is no longer allowed, their subsystem was unlinked from
    /// their port, or their port was removed.
    pub(crate) disconnect: Vec<(u16, QueueEnd)>,
    /// Slots of [`Registry::ports`] removed: the control thread drops the
    /// connections that came in through them.
    pub(crate) ports_removed: Vec<usize>,
}

impl ReloadReport {
    /// The report in words, as the log line says it.
    pub fn words(&self) -> String {
        format!(
            "{}; {} controller(s) told of changed namespaces, {} discovery controller(s) of \
             a changed discovery log, {} controller(s) disconnected, {} removed namespace(s) \
             flushed{}",
            self.plan.words(),
            self.ns_notified,
            self.discovery_notified,
            self.disconnect.len(),
            self.namespaces_flushed,
            if self.flush_failures.is_empty() {
                String::new()
            } else {
                format!(" ({})", self.flush_failures.join("; "))
            }
        )
    }

    /// Controllers disconnected (their CNTLIDs), and why.
    pub fn disconnected(&self) -> &[(u16, QueueEnd)] {
        &self.disconnect
    }
}

/// What [`prepare`] opened and built, before anything changed.
struct Prepared {
    /// Namespaces added to subsystems that stay, by subsystem NQN.
    added: Vec<(String, NamespaceEntry)>,
    /// New subsystems, opened.
    subsystems: Vec<Arc<Subsystem>>,
    /// New host lists of subsystems that stay.
    access: Vec<(String, HostAccess)>,
    /// Files the opens created (removed again if the reload fails).
    created: Vec<std::path::PathBuf>,
}

impl Prepared {
    /// Every namespace opened, new subsystems' included.
    fn entries(&self) -> Vec<NamespaceEntry> {
        let mut v: Vec<NamespaceEntry> = self.added.iter().map(|(_, e)| e.clone()).collect();
        for s in &self.subsystems {
            v.extend(s.namespaces().iter().cloned());
        }
        v
    }
}

/// The plan from `old` to `new` ([`diff()`]), or why it cannot be applied.
///
/// # Errors
/// [`ReloadError::Refused`] naming what cannot change live.
pub(crate) fn plan(old: &TargetConfig, new: &TargetConfig) -> Result<ReloadPlan, ReloadError> {
    let plan = diff(old, new);
    if !plan.refused.is_empty() {
        return Err(ReloadError::Refused(plan.refused));
    }
    Ok(plan)
}

/// Applies `plan` (to configuration `new`) to the target of `reg`, whose poll groups
/// take commands on `groups` (the control thread's step; see the module docs). The
/// listen entries the plan adds are listened on already (by the control thread); the
/// report says which controllers and port slots the control thread ends.
///
/// # Errors
/// [`ReloadError`]; then nothing changed.
pub(crate) fn apply(
    reg: &Registry,
    groups: &[Sender<GroupCmd>],
    new: &TargetConfig,
    plan: ReloadPlan,
) -> Result<ReloadReport, ReloadError> {
    let mut created = Vec::new();
    let prepared = match prepare(reg, &plan, new, &mut created) {
        Ok(p) => p,
        Err(e) => {
            remove_created(&created);
            return Err(ReloadError::Prepare(e.to_string()));
        }
    };
    let entries = prepared.entries();
    if let Err(e) = send_to_groups(groups, entries.clone(), Vec::new()) {
        let slots = entries.iter().map(|e| e.file_index).collect();
        let _ = send_to_groups(groups, Vec::new(), slots);
        remove_created(&prepared.created);
        return Err(ReloadError::Prepare(e));
    }
    Ok(commit(reg, groups, new, plan, prepared))
}

/// Step 1: opens the new back ends and builds the new subsystems and host lists.
fn prepare(
    reg: &Registry,
    plan: &ReloadPlan,
    new: &TargetConfig,
    created: &mut Vec<std::path::PathBuf>,
) -> Result<Prepared, TargetError> {
    let file_index = || {
        let i = reg.next_file_index();
        if i >= MAX_NAMESPACE_FILES {
            return Err(TargetError::Config(format!(
                "this target has opened {MAX_NAMESPACE_FILES} namespaces since it started, \
                 the most its io_uring file tables hold: restart it to add more"
            )));
        }
        Ok(i)
    };
    let mut added = Vec::new();
    for (nqn, n) in &plan.namespaces_added {
        let entry = open_namespace(n, nqn, file_index()?, created)?;
        added.push((nqn.clone(), entry));
    }
    let mut subsystems = Vec::new();
    for s in &plan.subsystems_added {
        let mut namespaces = Vec::new();
        for n in s.namespaces.iter().filter(|n| n.enable) {
            namespaces.push(open_namespace(n, &s.nqn, file_index()?, created)?);
        }
        subsystems.push(Arc::new(subsystem_of(s, namespaces)?));
    }
    let mut access = Vec::new();
    for nqn in &plan.hosts_changed {
        let Some(s) = new.subsystems.iter().find(|s| s.nqn == *nqn) else {
            continue;
        };
        access.push((nqn.clone(), access_of(s)?));
    }
    Ok(Prepared {
        added,
        subsystems,
        access,
        created: std::mem::take(created),
    })
}

/// Steps 2 and 3: swaps the registry's tables, empties the removed slots, notifies.
fn commit(
    reg: &Registry,
    groups: &[Sender<GroupCmd>],
    new: &TargetConfig,
    plan: ReloadPlan,
    prepared: Prepared,
) -> ReloadReport {
    let mut report = ReloadReport::default();
    for e in prepared.entries() {
        reg.ana.note_group(e.ana_grpid);
    }
    let mut freed: Vec<NamespaceEntry> = Vec::new();
    // Namespaces of subsystems that stay, and who is told.
    let mut changed: Vec<(Arc<Subsystem>, Vec<u32>)> = Vec::new();
    for s in reg.subsystems().iter() {
        let removed: Vec<u32> = (plan.namespaces_removed.iter())
            .filter(|(nqn, _)| *nqn == s.nqn)
            .map(|&(_, nsid)| nsid)
            .collect();
        let added: Vec<&NamespaceEntry> = (prepared.added.iter())
            .filter(|(nqn, _)| *nqn == s.nqn)
            .map(|(_, e)| e)
            .collect();
        if removed.is_empty() && added.is_empty() {
            continue;
        }
        let mut list: Vec<NamespaceEntry> = Vec::new();
        for e in s.namespaces().iter() {
            if removed.contains(&e.nsid) {
                freed.push(e.clone());
            } else {
                list.push(e.clone());
            }
        }
        list.extend(added.iter().map(|e| (*e).clone()));
        s.set_namespaces(list);
        let mut nsids = removed;
        nsids.extend(added.iter().map(|e| e.nsid));
        nsids.sort_unstable();
        nsids.dedup();
        changed.push((s.clone(), nsids));
    }
    for (nqn, access) in prepared.access {
        if let Some(s) = reg.subsystem(&nqn) {
            s.set_access(access);
        }
    }
    // Subsystems in the new configuration's order: those that stay keep their object
    // (their controllers hold it), the new ones join.
    let old_subsystems = reg.subsystems().to_vec();
    let mut list = Vec::new();
    for c in &new.subsystems {
        let kept = old_subsystems.iter().find(|s| s.nqn == c.nqn);
        let fresh = prepared.subsystems.iter().find(|s| s.nqn == c.nqn);
        if let Some(s) = kept.or(fresh) {
            list.push(s.clone());
        }
    }
    for s in old_subsystems
        .iter()
        .filter(|s| plan.subsystems_removed.contains(&s.nqn))
    {
        freed.extend(s.namespaces().iter().cloned());
    }
    reg.set_subsystems(list);
    report.ports_removed = set_ports(reg, new);
    // ANA states after the namespaces, so a host rereading the log on the notice finds
    // the new namespaces in their groups.
    for (i, l) in new.listen.iter().enumerate() {
        let portid = l.portid.unwrap_or(i as u16 + 1);
        let mut grpids = reg.ana.groups();
        grpids.extend(l.ana_groups.iter().map(|a| a.grpid));
        grpids.sort_unstable();
        grpids.dedup();
        for grpid in grpids {
            let state = (l.ana_groups.iter())
                .find(|a| a.grpid == grpid)
                .map_or(nvme::ana::AnaState::Optimized, |a| a.state.into());
            match crate::ana::set_and_notify(reg, groups, portid, grpid, state) {
                Ok(true) => report.ana_set.push((portid, grpid, state)),
                Ok(false) => {}
                Err(e) => tracing::warn!("ANA state of group {grpid} on port {portid}: {e}"),
            }
        }
    }
    if !freed.is_empty() {
        let slots = freed.iter().map(|e| e.file_index).collect();
        if let Err(e) = send_to_groups(groups, Vec::new(), slots) {
            tracing::warn!("emptying the removed namespaces' io_uring slots: {e}");
        }
        flush_removed(groups, freed, &mut report);
    }
    report.disconnect = to_disconnect(reg, &plan);
    let discovery = plan.discovery_changed();
    if discovery {
        reg.bump_genctr();
    }
    let (ns_notified, discovery_notified) = notify(reg, groups, &changed, discovery);
    report.ns_notified = ns_notified;
    report.discovery_notified = discovery_notified;
    report.plan = plan;
    report
}

/// Replaces the registry's ports with `new`'s listen entries, matched by address and
/// `trsvcid`: a port that stays keeps its slot (its links, referrals and ANA groups
/// as `new` has them), a port no longer listed stays as a removed slot, a new one is
/// appended. Returns the slots removed now.
fn set_ports(reg: &Registry, new: &TargetConfig) -> Vec<usize> {
    let mut ports = reg.ports().to_vec();
    let mut removed = Vec::new();
    for (slot, p) in ports.iter_mut().enumerate().filter(|(_, p)| !p.removed) {
        let found = (new.listen.iter().enumerate())
            .find(|(_, l)| (l.addr, l.trsvcid) == (p.traddr, p.trsvcid));
        match found {
            Some(entry) => *p = port_of(entry),
            None => {
                p.removed = true;
                removed.push(slot);
            }
        }
    }
    for (i, l) in new.listen.iter().enumerate() {
        let listed =
            (ports.iter()).any(|p| !p.removed && (p.traddr, p.trsvcid) == (l.addr, l.trsvcid));
        if !listed {
            ports.push(port_of((i, l)));
        }
    }
    reg.set_ports(ports);
    removed
}

/// The controllers the reload ends (after the registry's tables were swapped), and
/// why: those of removed subsystems, those whose port was removed, and the I/O
/// controllers whose host is no longer allowed on their subsystem or whose subsystem
/// their port no longer serves (as Linux nvmet, which removes such a host's
/// controllers when the host is unlinked from the subsystem).
fn to_disconnect(reg: &Registry, plan: &ReloadPlan) -> Vec<(u16, QueueEnd)> {
    let ports = reg.ports();
    let mut out = Vec::new();
    for c in reg.controllers().iter() {
        let port = ports.get(c.port);
        let why = if plan.subsystems_removed.contains(&c.subsys.nqn) {
            QueueEnd::SubsystemRemoved
        } else if port.is_none_or(|p| p.removed) {
            QueueEnd::PortRemoved
        } else if c.kind == ControllerKind::Discovery {
            continue;
        } else if !c.subsys.host_allowed(&c.hostnqn) {
            QueueEnd::HostNotAllowed
        } else if !port.is_some_and(|p| p.serves(&c.subsys.nqn)) {
            QueueEnd::SubsystemUnlinked
        } else {
            continue;
        };
        out.push((c.cntlid, why));
    }
    out
}

/// The removed namespaces `freed` (their slots emptied, so nothing new reaches them):
/// waits until io_uring holds nothing of theirs, then flushes each with a volatile
/// cache (`fdatasync`, as a Flush command) and lets it go, which closes its file once
/// the last command holding it is done. A write the host was answered for is then on
/// stable storage.
fn flush_removed(
    groups: &[Sender<GroupCmd>],
    freed: Vec<NamespaceEntry>,
    report: &mut ReloadReport,
) {
    let files: Vec<u32> = freed.iter().map(|e| e.file_index).collect();
    if !quiesce(groups, &[], &files, QUIESCE_WAIT) {
        report.flush_failures.push(format!(
            "I/O in flight on the removed namespaces did not finish within {} ms; \
             flushed what had completed",
            QUIESCE_WAIT.as_millis()
        ));
    }
    for e in freed.iter().filter(|e| e.ns.has_volatile_cache()) {
        match e.ns.flush() {
            Ok(()) => report.namespaces_flushed += 1,
            Err(err) => report.flush_failures.push(format!(
                "flushing namespace {} ({}) failed: {err}",
                e.nsid,
                e.ns.path().display()
            )),
        }
    }
}

/// Has every poll group stop taking commands on the queues of controllers `cntlids`
/// ([`GroupCmd::Quiesce`]) and waits, at most `bound`, until nothing of theirs nor
/// any io_uring operation on fixed files `files` is in flight. Returns whether that
/// was reached.
pub(crate) fn quiesce(
    groups: &[Sender<GroupCmd>],
    cntlids: &[u16],
    files: &[u32],
    bound: Duration,
) -> bool {
    let deadline = Instant::now() + bound;
    loop {
        let mut replies = Vec::new();
        for g in groups {
            let (tx, rx) = channel::bounded(1);
            let cmd = GroupCmd::Quiesce {
                cntlids: cntlids.to_vec(),
                files: files.to_vec(),
                reply: tx,
            };
            if g.send(cmd).is_ok() {
                replies.push(rx);
            }
        }
        let mut left = 0u32;
        for rx in replies {
            match rx.recv_deadline(deadline) {
                Ok(n) => left += n,
                // A group that stopped meanwhile holds nothing any more.
                Err(channel::RecvTimeoutError::Disconnected) => {}
                Err(channel::RecvTimeoutError::Timeout) => return false,
            }
        }
        if left == 0 {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Step 3: the Changed Namespace List entries and notices of each controller of the
/// `changed` subsystems, the Discovery Log Change notices when `discovery`; then the
/// held requests complete. Returns how many controllers of each kind were told.
fn notify(
    reg: &Registry,
    groups: &[Sender<GroupCmd>],
    changed: &[(Arc<Subsystem>, Vec<u32>)],
    discovery: bool,
) -> (usize, usize) {
    let ns = post_events(reg, groups, |c| {
        let Some((_, nsids)) = changed.iter().find(|(s, _)| Arc::ptr_eq(s, &c.subsys)) else {
            return false;
        };
        for &nsid in nsids {
            c.notify_namespace_changed(nsid);
        }
        true
    });
    let disc = if discovery {
        post_events(reg, groups, |c| {
            if c.kind != ControllerKind::Discovery
                || c.aen_config() & nvme::features::AEC_DISCOVERY_CHANGE == 0
            {
                return false;
            }
            c.post_event(AEN_DISCOVERY_CHANGED);
            true
        })
    } else {
        0
    };
    (ns, disc)
}

/// Posts events to the live controllers: `post` posts to one and says whether it
/// did; then every poll group completes those controllers' held Asynchronous Event
/// Requests at once. Returns how many controllers `post` posted to.
pub(crate) fn post_events(
    reg: &Registry,
    groups: &[Sender<GroupCmd>],
    post: impl Fn(&crate::controller::Controller) -> bool,
) -> usize {
    let cntlids: Vec<u16> = (reg.controllers().iter())
        .filter(|c| post(c))
        .map(|c| c.cntlid)
        .collect();
    if !cntlids.is_empty() {
        for g in groups {
            let _ = g.send(GroupCmd::CompleteHeldEvents {
                cntlids: cntlids.clone(),
            });
        }
    }
    cntlids.len()
}

/// Sends one namespace change to every poll group and waits for each to take it.
///
/// # Errors
/// The first group's refusal, or that a group did not answer.
fn send_to_groups(
    groups: &[Sender<GroupCmd>],
    add: Vec<NamespaceEntry>,
    remove: Vec<u32>,
) -> Result<(), String> {
    let mut replies = Vec::new();
    for g in groups {
        let (tx, rx) = channel::bounded(1);
        let cmd = GroupCmd::Namespaces {
            add: add.clone(),
            remove: remove.clone(),
            reply: tx,
        };
        if g.send(cmd).is_ok() {
            replies.push(rx);
        }
    }
    let mut first_error = None;
    for rx in replies {
        let r = rx
            .recv_timeout(GROUP_REPLY_WAIT)
            .unwrap_or_else(|_| Err("a poll group did not answer within 2 s".into()));
        if let Err(e) = r {
            first_error.get_or_insert(e);
        }
    }
    first_error.map_or(Ok(()), Err)
}
