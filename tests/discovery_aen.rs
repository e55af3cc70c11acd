//! The host's discovery client and asynchronous events against our target over real
//! sockets (issue 15 item 4): the Discovery log read in pieces with every entry
//! typed, referrals followed (and a referral loop stopped), `connect_all` connecting
//! every NVM subsystem; a persistent discovery controller reporting a Discovery Log
//! Page Change; an I/O controller's Namespace Attribute Changed notice followed by the
//! Changed Namespace List and a rescan, twice (the log read with RAE clear re-arms it).
//!
//! The target has no way yet to add a namespace or change its discovery log while it
//! runs (live reload is another branch's work): the tests raise the events through
//! the target's own controller API (`notify_namespace_changed`, `post_event` with a
//! GENCTR bump), which is what a reload will call.
mod common;

use std::collections::HashSet;
use std::time::Duration;

use common::{ip, NQN};
use nvmf_initiator::discovery::{self, DiscoveryController};
use nvmf_initiator::{ControllerEvent, HostOptions};
use nvmf_target::config::{ListenAddr, NamespaceConfig, ReferralConfig, SubsystemConfig};
use nvmf_target::controller::{ControllerKind, AEN_DISCOVERY_CHANGED};

const NQN2: &str = "nqn.2026-11.io.nvmf-rdma:second";
const NQN3: &str = "nqn.2026-11.io.nvmf-rdma:behind-referral";

fn subsystem(nqn: &str, path: std::path::PathBuf) -> SubsystemConfig {
    let mut ns = NamespaceConfig::new(1);
    ns.path = path;
    ns.size = Some((8u64 << 20).to_string());
    let mut s = SubsystemConfig::new(nqn);
    s.namespaces.push(ns);
    s
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime")
}

#[test]
fn discovery_follows_referrals_and_connect_all_connects_every_subsystem() {
    // A on .31 (two subsystems, a referral to B); B on .32 (one subsystem, a
    // referral back to A: the loop guard must stop there).
    let a = common::start_target_with(31, 8 << 20, |cfg| {
        cfg.subsystems.push(subsystem(
            NQN2,
            cfg.subsystems[0].namespaces[0]
                .path
                .with_file_name("ns2.img"),
        ));
        cfg.listen[0].referrals.push(ReferralConfig {
            addr: ip(32),
            trsvcid: 4420,
            portid: 7,
            enable: true,
        });
    });
    let dir = tempfile::tempdir().unwrap();
    let mut bcfg = nvmf_target::config::TargetConfig::new(vec![ListenAddr::new(ip(32), 4420)]);
    bcfg.subsystems
        .push(subsystem(NQN3, dir.path().join("ns3.img")));
    bcfg.listen[0].referrals.push(ReferralConfig {
        addr: ip(31),
        trsvcid: 4420,
        portid: 1,
        enable: true,
    });
    let b = nvmf_target::start(&bcfg).expect("target B");

    let mut opts = HostOptions::new(common::addr(&a), "unused");
    opts.local_ip = Some(ip(33));
    opts.kato_ms = 5000;
    let entries = discovery::discover(&opts).expect("discover");
    let nvm: HashSet<(String, String)> = entries
        .iter()
        .filter(|e| e.is_rdma_nvm())
        .map(|e| (e.subnqn.clone(), e.traddr.clone()))
        .collect();
    let want: HashSet<(String, String)> = [
        (NQN.to_string(), "127.0.0.31".to_string()),
        (NQN2.to_string(), "127.0.0.31".to_string()),
        (NQN3.to_string(), "127.0.0.32".to_string()),
    ]
    .into();
    assert_eq!(nvm, want, "every NVM subsystem of both logs: {entries:#?}");
    // Each log lists its own discovery subsystem and its referral, typed.
    let referrals: Vec<_> = entries.iter().filter(|e| e.is_referral()).collect();
    assert_eq!(referrals.len(), 2, "{entries:#?}");
    assert!(referrals
        .iter()
        .any(|r| r.portid == 7 && r.traddr == "127.0.0.32"));
    assert_eq!(
        entries.iter().filter(|e| e.subtype == 3).count(),
        2,
        "the current discovery subsystem of each log"
    );
    for e in entries.iter().filter(|e| e.is_rdma_nvm()) {
        assert_eq!(e.socket_addr().unwrap().port(), 4420);
        assert_eq!(e.cntlid, 0xFFFF);
    }

    // connect_all: one host per NVM subsystem, each on its own local address.
    let rt = runtime();
    rt.block_on(async {
        let mut next = 40u8;
        let hosts = discovery::connect_all(&opts, &entries, |_| {
            next += 1;
            Some(ip(next))
        })
        .await;
        assert_eq!(hosts.len(), 3);
        for (i, (e, h)) in hosts.into_iter().enumerate() {
            let h = h.unwrap_or_else(|err| panic!("connect to {}: {err}", e.subnqn));
            assert_eq!(h.controller_info().subnqn, e.subnqn);
            let ns = h.namespace(1).await.expect("namespace 1");
            let data = common::pattern(i as u64, 4096, i as u8);
            ns.write(8, &data, false).await.expect("write");
            let mut back = vec![0u8; 4096];
            ns.read(8, &mut back).await.expect("read");
            assert_eq!(back, data, "{}", e.subnqn);
            h.disconnect().await.expect("disconnect");
        }
    });
    b.shutdown();
}

#[test]
fn persistent_discovery_controller_reports_a_log_change() {
    let t = common::start_target(34, 8 << 20);
    let mut opts = HostOptions::new(common::addr(&t), "unused");
    opts.local_ip = Some(ip(35));
    // Keep Alive every 2 s: slack for a loaded machine, and the event's delivery.
    opts.kato_ms = 4000;
    let dc = DiscoveryController::connect(&opts).expect("discovery controller");
    let first = dc.log().expect("log");
    assert!(first
        .entries
        .iter()
        .any(|e| e.subnqn == NQN && e.is_rdma_nvm()));
    let mut events = dc.events();

    // What a configuration change does: GENCTR moves, the discovery controllers hear.
    let reg = t.target.registry().clone();
    reg.bump_genctr();
    let discovery: Vec<_> = reg
        .controllers()
        .into_iter()
        .filter(|c| c.kind == ControllerKind::Discovery)
        .collect();
    assert_eq!(discovery.len(), 1, "the persistent discovery controller");
    discovery[0].post_event(AEN_DISCOVERY_CHANGED);

    let rt = runtime();
    // The target completes the held request with the next admin command (the host's
    // Keep Alive, every KATO/2).
    let ev = rt
        .block_on(async { tokio::time::timeout(Duration::from_secs(30), events.recv()).await })
        .expect("a Discovery Log Page Change within 30 s")
        .expect("event");
    match ev {
        ControllerEvent::DiscoveryLogChanged(log) => {
            assert_eq!(log.genctr, first.genctr + 1);
            assert_eq!(log.entries, first.entries);
        }
        other => panic!("unexpected event {other:?}"),
    }
    assert_eq!(dc.state(), nvmf_initiator::lifecycle::CtrlState::Live);
    dc.disconnect().expect("disconnect");
}

#[test]
fn namespace_attribute_changed_rescans_twice() {
    let t = common::start_target(36, 8 << 20);
    let mut opts = common::host_options(&t, 37, 1, 16);
    opts.kato_ms = 4000;
    let rt = runtime();
    rt.block_on(async {
        let host = nvmf_initiator::Host::connect(opts).await.expect("connect");
        assert_eq!(host.active_namespace_ids(), vec![1]);
        let mut events = host.events();
        let reg = t.target.registry().clone();
        let ctrl = reg
            .controllers()
            .into_iter()
            .find(|c| c.kind == ControllerKind::Io && c.subsys.nqn == NQN)
            .expect("the host's controller");
        // Twice: the host's read of log 04h with RAE clear lets the second through.
        for round in 0..2 {
            ctrl.notify_namespace_changed(1);
            let ev = tokio::time::timeout(Duration::from_secs(30), events.recv())
                .await
                .unwrap_or_else(|_| {
                    panic!(
                        "round {round}: no event within 30 s (the target holds {} \
                         Asynchronous Event Requests)",
                        ctrl.held_aers()
                    )
                })
                .expect("event");
            assert_eq!(
                ev,
                ControllerEvent::NamespacesChanged {
                    changed: vec![1],
                    added: vec![],
                    removed: vec![],
                    active: vec![1],
                },
                "round {round}"
            );
            assert!(ctrl.changed_ns(false).is_empty(), "the host read the list");
        }
        host.disconnect().await.expect("disconnect");
    });
}
