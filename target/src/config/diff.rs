//! The difference of two configurations, as a live reconfiguration applies it
//! ([`diff`]; issue 16 item 2). Pure and sans-IO: it compares two validated models and
//! opens nothing; the control thread applies the plan ([`crate::reload`]).
//!
//! What a reload changes live: subsystems added or removed; namespaces added, removed
//! or enabled/disabled (a namespace whose back end changes is removed and added again
//! under the same NSID, unless it stays on the same file, see [`diff`]); a subsystem's
//! allowed hosts and DH-HMAC-CHAP keys; listen entries added or removed (matched by
//! address and `trsvcid`), a port's subsystem links, referrals and ANA states; the
//! top-level host entries (which carry no setting yet). Everything else (provider,
//! poll groups, sizes, a listen entry's `tos` and PORTID, a subsystem's identity...)
//! is fixed while it is served: a change to it is refused, named, and nothing of the
//! reload is applied.

use super::model::{ListenAddr, NamespaceBackend, NamespaceConfig, SubsystemConfig, TargetConfig};

/// What a reload from one configuration to another does ([`diff`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReloadPlan {
    /// New subsystems, with every namespace (their enabled ones are opened).
    pub subsystems_added: Vec<SubsystemConfig>,
    /// NQNs of the subsystems removed: their controllers are disconnected.
    pub subsystems_removed: Vec<String>,
    /// `(subsystem NQN, namespace)` to open and add to a subsystem that stays.
    pub namespaces_added: Vec<(String, NamespaceConfig)>,
    /// `(subsystem NQN, NSID)` to remove from a subsystem that stays. An NSID both
    /// here and in `namespaces_added` is replaced (its back end changed).
    pub namespaces_removed: Vec<(String, u32)>,
    /// NQNs of the subsystems (staying) whose `allow_any_host`, `hosts` or
    /// `host_keys` changed: later Connects follow the new lists.
    pub hosts_changed: Vec<String>,
    /// Indices (in the new configuration) of the listen entries in both whose
    /// subsystem links or referrals changed.
    pub ports_changed: Vec<usize>,
    /// Listen entries to listen on (PORTID resolved): a new address gets its RDMA
    /// device, connection manager and poll groups; a new `trsvcid` on an address
    /// served already, a listen on its connection manager.
    pub listen_added: Vec<ListenAddr>,
    /// Listen entries (address, `trsvcid`) to stop listening on: the controllers and
    /// queues that came in through them are disconnected; an address left without
    /// entries closes its device and poll groups.
    pub listen_removed: Vec<(std::net::IpAddr, u16)>,
    /// ANA states to set, `(PORTID, ANAGRPID, state)`: a port's group whose state
    /// changed (a group no longer listed is optimized again, as at start).
    pub ana_changed: Vec<(u16, u32, nvme::ana::AnaState)>,
    /// Whether the top-level host entries changed (nothing to apply: they carry no
    /// setting beside the NQN).
    pub host_entries_changed: bool,
    /// What cannot change live, one reason each; non-empty: the reload is refused.
    pub refused: Vec<String>,
}

impl ReloadPlan {
    /// Whether the plan changes nothing.
    pub fn is_empty(&self) -> bool {
        *self == ReloadPlan::default()
    }

    /// Whether the discovery log page may read differently afterwards (subsystems,
    /// host lists, port links or referrals changed): its GENCTR moves and discovery
    /// controllers get a Discovery Log Change notice.
    pub fn discovery_changed(&self) -> bool {
        !self.subsystems_added.is_empty()
            || !self.subsystems_removed.is_empty()
            || !self.hosts_changed.is_empty()
            || !self.ports_changed.is_empty()
            || !self.listen_added.is_empty()
            || !self.listen_removed.is_empty()
    }

    /// The plan in words for the log line: what is added, removed and changed.
    pub fn words(&self) -> String {
        let mut parts = Vec::new();
        let list = |v: Vec<String>| v.join(", ");
        if !self.subsystems_added.is_empty() {
            let nqns = self
                .subsystems_added
                .iter()
                .map(|s| s.nqn.clone())
                .collect();
            parts.push(format!("subsystems added: {}", list(nqns)));
        }
        if !self.subsystems_removed.is_empty() {
            parts.push(format!(
                "subsystems removed: {}",
                list(self.subsystems_removed.clone())
            ));
        }
        if !self.namespaces_added.is_empty() {
            let v = (self.namespaces_added.iter())
                .map(|(s, n)| format!("{s} nsid {}", n.nsid))
                .collect();
            parts.push(format!("namespaces added: {}", list(v)));
        }
        if !self.namespaces_removed.is_empty() {
            let v = (self.namespaces_removed.iter())
                .map(|(s, n)| format!("{s} nsid {n}"))
                .collect();
            parts.push(format!("namespaces removed: {}", list(v)));
        }
        if !self.hosts_changed.is_empty() {
            parts.push(format!(
                "allowed hosts changed: {}",
                list(self.hosts_changed.clone())
            ));
        }
        if !self.ana_changed.is_empty() {
            let v = (self.ana_changed.iter())
                .map(|(p, g, s)| format!("port {p} group {g} {s}"))
                .collect();
            parts.push(format!("ANA states: {}", list(v)));
        }
        if !self.ports_changed.is_empty() {
            let v = self
                .ports_changed
                .iter()
                .map(|i| format!("listen[{i}]"))
                .collect();
            parts.push(format!("port links or referrals changed: {}", list(v)));
        }
        if !self.listen_added.is_empty() {
            let v = (self.listen_added.iter()).map(|l| l.to_string()).collect();
            parts.push(format!("listen added: {}", list(v)));
        }
        if !self.listen_removed.is_empty() {
            let v = (self.listen_removed.iter())
                .map(|(a, p)| std::net::SocketAddr::new(*a, *p).to_string())
                .collect();
            parts.push(format!("listen removed: {}", list(v)));
        }
        if self.host_entries_changed {
            parts.push("host entries changed".into());
        }
        if parts.is_empty() {
            "nothing changed".into()
        } else {
            parts.join("; ")
        }
    }
}

/// The plan that takes a target running `old` to `new` (both validated). A namespace
/// that changes in place (path, size, block size, identifiers, ...) is removed and
/// added again, except a file namespace that stays on the same path: its file is still
/// open (and locked) by the running namespace, so that change is refused with the way
/// to make it (disable it in one reload and change it in the next).
pub fn diff(old: &TargetConfig, new: &TargetConfig) -> ReloadPlan {
    let mut plan = ReloadPlan {
        refused: fixed_fields(old, new),
        ..ReloadPlan::default()
    };
    ports(old, new, &mut plan);
    plan.host_entries_changed = old.hosts != new.hosts;
    for s in &old.subsystems {
        if !new.subsystems.iter().any(|n| n.nqn == s.nqn) {
            plan.subsystems_removed.push(s.nqn.clone());
        }
    }
    for s in &new.subsystems {
        match old.subsystems.iter().find(|o| o.nqn == s.nqn) {
            None => plan.subsystems_added.push(s.clone()),
            Some(o) => subsystem(o, s, &mut plan),
        }
    }
    plan
}

/// Refusals for the settings fixed at start that differ.
fn fixed_fields(old: &TargetConfig, new: &TargetConfig) -> Vec<String> {
    let mut refused = Vec::new();
    let mut fixed = |name: &str, changed: bool| {
        if changed {
            refused.push(format!(
                "{name} changed: it is fixed at start (restart the target to change it)"
            ));
        }
    };
    fixed("provider", old.provider != new.provider);
    fixed("poll_groups", old.poll_groups != new.poll_groups);
    fixed(
        "inline_data_size",
        old.inline_data_size != new.inline_data_size,
    );
    fixed("mdts_bytes", old.mdts_bytes != new.mdts_bytes);
    fixed("max_queue_size", old.max_queue_size != new.max_queue_size);
    fixed("kato_ms", old.kato_ms != new.kato_ms);
    fixed("discovery", old.discovery != new.discovery);
    fixed("data_slab", old.data_slab != new.data_slab);
    fixed("srq_depth", old.srq_depth != new.srq_depth);
    fixed(
        "shutdown_timeout_ms",
        old.shutdown_timeout_ms != new.shutdown_timeout_ms,
    );
    fixed("cpus", old.cpus != new.cpus);
    fixed("metrics", old.metrics != new.metrics);
    fixed("roce_mtu", old.roce_mtu != new.roce_mtu);
    refused
}

/// Listen entries, matched by address and `trsvcid`: an entry only in `new` is added
/// (listened on), one only in `old` removed (its connections dropped); one in both may
/// change its subsystem links, referrals and ANA states, not its `tos` or PORTID
/// (refused: remove it in one reload and add it back in the next).
fn ports(old: &TargetConfig, new: &TargetConfig, plan: &mut ReloadPlan) {
    let portid = |i: usize, l: &ListenAddr| l.portid.unwrap_or(i as u16 + 1);
    for o in &old.listen {
        if !(new.listen.iter()).any(|n| (n.addr, n.trsvcid) == (o.addr, o.trsvcid)) {
            plan.listen_removed.push((o.addr, o.trsvcid));
        }
    }
    for (i, n) in new.listen.iter().enumerate() {
        let found = (old.listen.iter().enumerate())
            .find(|(_, o)| (o.addr, o.trsvcid) == (n.addr, n.trsvcid));
        let Some((j, o)) = found else {
            plan.listen_added.push(ListenAddr {
                portid: Some(portid(i, n)),
                ..n.clone()
            });
            continue;
        };
        if (o.tos, portid(j, o)) != (n.tos, portid(i, n)) {
            plan.refused.push(format!(
                "listen {n}: tos or portid changed (a PORTID not given is the entry's \
                 position plus 1): a listen entry keeps them while it is served; remove the \
                 entry in one reload and add it back in the next, or give portid explicitly"
            ));
            continue;
        }
        if o.subsystems != n.subsystems || o.referrals != n.referrals {
            plan.ports_changed.push(i);
        }
        plan.ana_changed.extend(ana_changes(portid(i, n), o, n));
    }
}

/// The ANA states of port `portid` that differ between its listen entries `old` and
/// `new` (an unlisted group is optimized), in group order.
fn ana_changes(
    portid: u16,
    old: &ListenAddr,
    new: &ListenAddr,
) -> Vec<(u16, u32, nvme::ana::AnaState)> {
    use nvme::ana::AnaState;
    let state = |l: &ListenAddr, g: u32| {
        (l.ana_groups.iter())
            .find(|a| a.grpid == g)
            .map_or(AnaState::Optimized, |a| a.state.into())
    };
    let mut groups: Vec<u32> = (old.ana_groups.iter().chain(&new.ana_groups))
        .map(|a| a.grpid)
        .collect();
    groups.sort_unstable();
    groups.dedup();
    groups
        .into_iter()
        .filter(|&g| state(old, g) != state(new, g))
        .map(|g| (portid, g, state(new, g)))
        .collect()
}

/// A subsystem in both: its identity must stay; hosts and namespaces may change.
fn subsystem(old: &SubsystemConfig, new: &SubsystemConfig, plan: &mut ReloadPlan) {
    let identity = |s: &SubsystemConfig| {
        (
            s.serial.clone(),
            s.model.clone(),
            s.firmware.clone(),
            s.ieee_oui,
            s.version.clone(),
            s.cntlid_min,
            s.cntlid_max,
            s.qid_max,
        )
    };
    if identity(old) != identity(new) {
        plan.refused.push(format!(
            "subsystem {}: serial, model, firmware, ieee_oui, version, cntlid_min, cntlid_max \
             or qid_max changed: a subsystem's identity is fixed while it is served (remove \
             it in one reload and add it in the next, or restart the target)",
            old.nqn
        ));
    }
    if (old.allow_any_host, &old.hosts, &old.host_keys)
        != (new.allow_any_host, &new.hosts, &new.host_keys)
    {
        plan.hosts_changed.push(new.nqn.clone());
    }
    let served = |s: &SubsystemConfig, nsid: u32| {
        s.namespaces
            .iter()
            .find(|n| n.nsid == nsid && n.enable)
            .cloned()
    };
    let mut nsids: Vec<u32> = (old.namespaces.iter().chain(&new.namespaces))
        .map(|n| n.nsid)
        .collect();
    nsids.sort_unstable();
    nsids.dedup();
    for nsid in nsids {
        match (served(old, nsid), served(new, nsid)) {
            (None, None) => {}
            (None, Some(n)) => plan.namespaces_added.push((new.nqn.clone(), n)),
            (Some(_), None) => plan.namespaces_removed.push((old.nqn.clone(), nsid)),
            (Some(o), Some(n)) if o == n => {}
            (Some(o), Some(n)) if same_file(&o, &n) => plan.refused.push(format!(
                "subsystem {} namespace {nsid} ({}): changed in place on the same file, which \
                 the running namespace holds open: disable it (enable = false) in one \
                 reload and change it in the next",
                old.nqn,
                o.path.display()
            )),
            (Some(_), Some(n)) => {
                plan.namespaces_removed.push((old.nqn.clone(), nsid));
                plan.namespaces_added.push((new.nqn.clone(), n));
            }
        }
    }
}

/// Whether two namespace configurations are file namespaces on the same path.
fn same_file(a: &NamespaceConfig, b: &NamespaceConfig) -> bool {
    a.backend == NamespaceBackend::File && b.backend == NamespaceBackend::File && a.path == b.path
}

#[cfg(test)]
mod tests {
    use std::net::{IpAddr, Ipv4Addr};

    use super::*;
    use crate::config::{ListenAddr, ReferralConfig};

    const A: &str = "nqn.2026-12.io.example:a";
    const B: &str = "nqn.2026-12.io.example:b";

    fn ns(nsid: u32, path: &str) -> NamespaceConfig {
        NamespaceConfig {
            path: path.into(),
            size: Some("1M".into()),
            ..NamespaceConfig::new(nsid)
        }
    }

    fn base() -> TargetConfig {
        let ip = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1));
        let mut c = TargetConfig::new(vec![ListenAddr::new(ip, 4420)]);
        let mut a = SubsystemConfig::new(A);
        a.namespaces.push(ns(1, "/var/tmp/a1.img"));
        c.subsystems.push(a);
        c
    }

    #[test]
    fn the_same_configuration_changes_nothing() {
        let p = diff(&base(), &base());
        assert!(p.is_empty(), "{p:?}");
        assert!(!p.discovery_changed());
        assert_eq!(p.words(), "nothing changed");
    }

    #[test]
    fn namespaces_added_removed_and_toggled() {
        let old = base();
        let mut new = base();
        new.subsystems[0].namespaces.push(ns(2, "/var/tmp/a2.img"));
        let p = diff(&old, &new);
        assert_eq!(
            p.namespaces_added,
            vec![(A.to_string(), ns(2, "/var/tmp/a2.img"))]
        );
        assert!(p.namespaces_removed.is_empty() && p.refused.is_empty());
        assert!(
            !p.discovery_changed(),
            "namespaces are not in the discovery log"
        );
        // And back: removed.
        let p = diff(&new, &old);
        assert_eq!(p.namespaces_removed, vec![(A.to_string(), 2)]);
        assert!(p.namespaces_added.is_empty());
        // Disabled is removed; enabled again is added.
        let mut off = base();
        off.subsystems[0].namespaces[0].enable = false;
        assert_eq!(
            diff(&old, &off).namespaces_removed,
            vec![(A.to_string(), 1)]
        );
        assert_eq!(diff(&off, &old).namespaces_added.len(), 1);
        // Disabled in both, though changed: nothing to do.
        let mut off2 = off.clone();
        off2.subsystems[0].namespaces[0].direct = true;
        assert!(diff(&off, &off2).is_empty());
    }

    #[test]
    fn a_namespace_on_another_file_is_replaced_on_the_same_file_refused() {
        let old = base();
        let mut moved = base();
        moved.subsystems[0].namespaces[0].path = "/var/tmp/other.img".into();
        let p = diff(&old, &moved);
        assert_eq!(p.namespaces_removed, vec![(A.to_string(), 1)]);
        assert_eq!(
            p.namespaces_added[0].1.path,
            std::path::Path::new("/var/tmp/other.img")
        );
        assert!(p.refused.is_empty());
        let mut direct = base();
        direct.subsystems[0].namespaces[0].direct = true;
        let p = diff(&old, &direct);
        assert!(p.namespaces_added.is_empty() && p.namespaces_removed.is_empty());
        assert_eq!(p.refused.len(), 1);
        assert!(
            p.refused[0].contains("namespace 1") && p.refused[0].contains("enable = false"),
            "{}",
            p.refused[0]
        );
        // A memory namespace holds no file: replaced.
        let mut ram = base();
        ram.subsystems[0].namespaces[0] = NamespaceConfig {
            backend: NamespaceBackend::Ram,
            size: Some("1M".into()),
            ..NamespaceConfig::new(1)
        };
        let mut ram2 = ram.clone();
        ram2.subsystems[0].namespaces[0].size = Some("2M".into());
        let p = diff(&ram, &ram2);
        assert_eq!(
            (p.namespaces_removed.len(), p.namespaces_added.len()),
            (1, 1)
        );
    }

    #[test]
    fn subsystems_and_hosts() {
        let old = base();
        let mut new = base();
        let mut b = SubsystemConfig::new(B);
        b.namespaces.push(ns(1, "/var/tmp/b1.img"));
        new.subsystems.push(b);
        new.subsystems[0].allow_any_host = false;
        new.subsystems[0].hosts = vec!["nqn.2014-08.org.nvmexpress:uuid:h".into()];
        let p = diff(&old, &new);
        assert_eq!(p.subsystems_added.len(), 1);
        assert_eq!(p.subsystems_added[0].nqn, B);
        assert!(
            p.namespaces_added.is_empty(),
            "a new subsystem brings its own"
        );
        assert_eq!(p.hosts_changed, vec![A.to_string()]);
        assert!(p.discovery_changed());
        let p = diff(&new, &old);
        assert_eq!(p.subsystems_removed, vec![B.to_string()]);
        assert!(p
            .words()
            .contains("subsystems removed: nqn.2026-12.io.example:b"));
    }

    #[test]
    fn ports_links_and_referrals_change_addresses_do_not() {
        let old = base();
        let mut new = base();
        new.listen[0].referrals.push(ReferralConfig {
            addr: IpAddr::V4(Ipv4Addr::new(10, 0, 0, 9)),
            trsvcid: 4420,
            portid: 7,
            enable: true,
        });
        new.listen[0].subsystems = Some(vec![A.into()]);
        let p = diff(&old, &new);
        assert_eq!(p.ports_changed, vec![0]);
        assert!(p.refused.is_empty() && p.discovery_changed());
        // Another trsvcid: the old one removed, the new one added (PORTID resolved).
        let mut moved = base();
        moved.listen[0].trsvcid = 4421;
        let p = diff(&old, &moved);
        assert!(p.refused.is_empty(), "{:?}", p.refused);
        assert_eq!(p.listen_removed, vec![(old.listen[0].addr, 4420)]);
        assert_eq!(p.listen_added.len(), 1);
        assert_eq!(
            (p.listen_added[0].trsvcid, p.listen_added[0].portid),
            (4421, Some(1))
        );
        assert!(p.discovery_changed());
        let mut more = base();
        more.listen.push(ListenAddr::new(
            IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2)),
            4420,
        ));
        let p = diff(&old, &more);
        assert!(p.refused.is_empty() && p.listen_removed.is_empty());
        assert_eq!(p.listen_added[0].portid, Some(2));
        // Taking the first of two away shifts the second's position-derived PORTID:
        // refused, naming the fix.
        let p = diff(&more, &moved_second(&more));
        assert_eq!(p.refused.len(), 1, "{:?}", p.refused);
        assert!(p.refused[0].contains("portid"), "{}", p.refused[0]);
        let mut tos = base();
        tos.listen[0].tos = Some(0x20);
        assert_eq!(diff(&old, &tos).refused.len(), 1);
        // The position-derived PORTID spelled out is no change.
        let mut spelled = base();
        spelled.listen[0].portid = Some(1);
        assert!(diff(&old, &spelled).is_empty());
    }

    /// `cfg` without its first listen entry.
    fn moved_second(cfg: &TargetConfig) -> TargetConfig {
        let mut c = cfg.clone();
        c.listen.remove(0);
        c
    }

    #[test]
    fn ana_states_change_live() {
        use crate::config::{AnaGroupConfig, AnaStateConfig};
        use nvme::ana::AnaState;
        let group = |grpid, state| AnaGroupConfig { grpid, state };
        let mut old = base();
        old.listen[0].ana_groups = vec![group(2, AnaStateConfig::NonOptimized)];
        let mut new = base();
        new.listen[0].ana_groups = vec![
            group(1, AnaStateConfig::Inaccessible),
            group(3, AnaStateConfig::Optimized),
        ];
        let p = diff(&old, &new);
        assert!(p.refused.is_empty(), "{:?}", p.refused);
        // Group 1 listed now, group 2 unlisted again (optimized), group 3 as before.
        assert_eq!(
            p.ana_changed,
            vec![(1, 1, AnaState::Inaccessible), (1, 2, AnaState::Optimized)]
        );
        assert!(p.words().contains("port 1 group 1"), "{}", p.words());
        assert!(diff(&new, &new).is_empty());
    }

    #[test]
    fn fixed_settings_and_identity_are_refused_by_name() {
        let old = base();
        let mut new = base();
        new.poll_groups = 2;
        new.mdts_bytes = 128 << 10;
        new.subsystems[0].serial = Some("other".into());
        let p = diff(&old, &new);
        assert_eq!(p.refused.len(), 3, "{:?}", p.refused);
        assert!(p.refused[0].starts_with("poll_groups changed"));
        assert!(p.refused[1].starts_with("mdts_bytes changed"));
        assert!(p.refused[2].contains(A) && p.refused[2].contains("serial"));
    }
}
