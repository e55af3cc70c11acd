//! Live reconfiguration (issue 16 item 2), end to end on loopback with the host
//! library against a real target: a namespace added by a reload is announced (the
//! held Asynchronous Event Request completes with Namespace Attribute Changed, log
//! page 04h lists it) and serves I/O; removed, it is announced again and answers
//! Invalid Namespace or Format; namespace 1's I/O, in flight across both reloads,
//! completes and verifies; a configuration that cannot be applied changes nothing.
//! A discovery controller that enabled it gets a Discovery Log Change notice when a
//! subsystem is added.
//!
//! Addresses: 127.0.0.172..=127.0.0.174.
mod common;

use common::*;
use nvme::features::AEC_NS_ATTR;
use nvme::status::GenericStatus;
use nvme::{FeatureId, LogPageId, Sqe, Status};
use nvmf_initiator::capsule::DataDir;
use nvmf_initiator::queue::NvmeRdmaQueue;
use nvmf_initiator::{Controller, ControllerOptions, HostError, HostOptions, SyncHost};
use nvmf_target::config::{NamespaceBackend, NamespaceConfig, SubsystemConfig, TargetConfig};
use nvmf_target::reload::ReloadError;
use transport::soft::{CmAgent, DeviceConfig, SoftDevice};

const BLOCK: usize = 512;
const SIZE: u64 = 8 << 20;
/// Namespace Attribute Changed (AER completion DW0: type Notice, info 00h, log 04h).
const AEN_NS_ATTR_CHANGED: u32 = 0x0004_0002;
/// Discovery Log Page Change (type Notice, info F0h, log 70h).
const AEN_DISCOVERY_CHANGED: u32 = 0x0070_F002;

fn config(t: &TestTarget) -> TargetConfig {
    TargetConfig::default_for(ip(172), NQN, &t.path, SIZE)
}

fn ram_ns(nsid: u32) -> NamespaceConfig {
    NamespaceConfig {
        backend: NamespaceBackend::Ram,
        size: Some("4M".into()),
        ..NamespaceConfig::new(nsid)
    }
}

/// Submits an Asynchronous Event Request on the admin queue (not waited for).
fn submit_aer(admin: &mut NvmeRdmaQueue) -> u16 {
    admin
        .submit(Sqe::async_event_request(0), DataDir::None, None)
        .expect("AER submitted")
}

/// The Changed Namespace List (log page 04h, 4 KiB), RAE cleared: its NSIDs.
fn changed_ns(admin: &mut NvmeRdmaQueue) -> Vec<u32> {
    let sqe = Sqe::get_log_page(0, LogPageId::ChangedNamespaceList, 1023, 0);
    let (buf, r) = run(admin, sqe, DataDir::ControllerToHost { len: 4096 }, &[]);
    r.expect("log page 04h");
    let buf = buf.expect("its buffer");
    (buf[..4096].chunks(4))
        .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .take_while(|&n| n != 0)
        .collect()
}

/// The active namespace list (Identify CNS 02h).
fn active(admin: &mut NvmeRdmaQueue) -> Vec<u32> {
    let sqe = Sqe::identify(0, nvme::IdentifyCns::ActiveNamespaceList, 0, 0);
    let (buf, r) = run(admin, sqe, DataDir::ControllerToHost { len: 4096 }, &[]);
    r.expect("identify 02h");
    let buf = buf.expect("its buffer");
    (buf[..4096].chunks(4))
        .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .take_while(|&n| n != 0)
        .collect()
}

fn write(q: &mut NvmeRdmaQueue, nsid: u32, slba: u64, data: &[u8]) -> Result<nvme::Cqe, HostError> {
    let nlb = (data.len() / BLOCK - 1) as u16;
    let sqe = Sqe::write(0, nsid, slba, nlb, false);
    run(q, sqe, DataDir::HostToController { len: data.len() }, data).1
}

fn read(q: &mut NvmeRdmaQueue, nsid: u32, slba: u64, len: usize) -> Vec<u8> {
    let nlb = (len / BLOCK - 1) as u16;
    let sqe = Sqe::read(0, nsid, slba, nlb, false);
    let (buf, r) = run(q, sqe, DataDir::ControllerToHost { len }, &[]);
    r.expect("read");
    buf.expect("the read's buffer")[..len].to_vec()
}

/// Starts `count` 4 KiB writes of a pattern on namespace 1 without waiting for them.
fn start_writes(q: &mut NvmeRdmaQueue, count: u64, tag: u8) -> Vec<u16> {
    (0..count)
        .map(|i| {
            let data = pattern(i * 4096, 4096, tag);
            let sqe = Sqe::write(0, 1, i * 8, 7, false);
            q.submit_with(sqe, DataDir::HostToController { len: 4096 }, |b| {
                b[..4096].copy_from_slice(&data)
            })
            .expect("write submitted")
        })
        .collect()
}

fn check_writes(q: &mut NvmeRdmaQueue, mut cids: Vec<u16>, tag: u8) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let mut out = Vec::new();
    while !cids.is_empty() {
        assert!(
            std::time::Instant::now() < deadline,
            "writes {cids:?} did not complete"
        );
        out.clear();
        q.poll(&mut out);
        for c in out.drain(..) {
            if let Some(at) = cids.iter().position(|&cid| cid == c.cid) {
                c.result.expect("namespace 1 write across the reload");
                cids.swap_remove(at);
            }
        }
    }
    for i in 0..8u64 {
        assert!(
            read(q, 1, i * 8, 4096) == pattern(i * 4096, 4096, tag),
            "block {i}"
        );
    }
}

#[test]
fn a_namespace_appears_and_disappears_under_io_on_another() {
    let t = start_target(172, SIZE);
    let mut cfg = config(&t);
    // No Keep Alive timer: the test drives the admin queue itself.
    // Four I/O queues: the held AER must be answered on the admin queue whichever
    // queue of the controller the poll group looks at first.
    let mut o = host_options(&t, 173, 4, 32);
    o.kato_ms = 0;
    let mut host = SyncHost::connect(&o).expect("host connects");
    // Namespace Attribute Notices on (AEC bit 8), and an AER held.
    let admin = host.controller().admin_queue_mut();
    let sqe = Sqe::set_features(0, FeatureId::AsyncEventConfiguration, AEC_NS_ATTR);
    run(admin, sqe, DataDir::None, &[]).1.expect("set AEC");
    let aer = submit_aer(admin);
    assert_eq!(active(admin), vec![1]);

    // Add namespace 2 while namespace 1's writes are in flight.
    let cids = start_writes(&mut host.io_queues()[0], 8, 1);
    cfg.subsystems[0].namespaces.push(ram_ns(2));
    let report = t.target.reload(&cfg).expect("reload adds namespace 2");
    assert_eq!(report.plan.namespaces_added.len(), 1);
    assert_eq!(report.ns_notified, 1);
    check_writes(&mut host.io_queues()[0], cids, 1);
    let admin = host.controller().admin_queue_mut();
    let cqe = wait(admin, aer).expect("the held AER completes at the reload");
    assert_eq!(cqe.dw0(), AEN_NS_ATTR_CHANGED);
    assert_eq!(changed_ns(admin), vec![2]);
    assert_eq!(active(admin), vec![1, 2]);
    let aer = submit_aer(admin);
    // Namespace 2 serves I/O.
    let q = &mut host.io_queues()[0];
    let data = pattern(0, 8192, 2);
    write(q, 2, 16, &data).expect("write namespace 2");
    assert!(read(q, 2, 16, 8192) == data);

    // A configuration that cannot be applied changes nothing, and says why.
    let mut fixed = cfg.clone();
    fixed.mdts_bytes = 128 << 10;
    fixed.subsystems[0].namespaces.push(ram_ns(3));
    match t.target.reload(&fixed) {
        Err(ReloadError::Refused(why)) => {
            assert!(
                why.iter().any(|w| w.starts_with("mdts_bytes changed")),
                "{why:?}"
            )
        }
        other => panic!("{other:?}"),
    }
    let missing = t._dir.path().join("no-such-dir").join("ns3.img");
    let mut unopenable = cfg.clone();
    let mut ns3 = NamespaceConfig::new(3);
    ns3.path = missing.clone();
    ns3.size = Some("1M".into());
    unopenable.subsystems[0].namespaces.push(ns3);
    unopenable.subsystems[0].namespaces.push(ram_ns(4));
    match t.target.reload(&unopenable) {
        Err(ReloadError::Prepare(why)) => assert!(why.contains("namespace 3"), "{why}"),
        other => panic!("{other:?}"),
    }
    assert!(!missing.exists());
    let admin = host.controller().admin_queue_mut();
    assert_eq!(active(admin), vec![1, 2], "a failed reload changes nothing");

    // Remove namespace 2 under namespace 1's I/O.
    let cids = start_writes(&mut host.io_queues()[0], 8, 3);
    cfg.subsystems[0].namespaces.truncate(1);
    let report = t.target.reload(&cfg).expect("reload removes namespace 2");
    assert_eq!(report.plan.namespaces_removed.len(), 1);
    check_writes(&mut host.io_queues()[0], cids, 3);
    let admin = host.controller().admin_queue_mut();
    let cqe = wait(admin, aer).expect("the next AER completes at the removal");
    assert_eq!(cqe.dw0(), AEN_NS_ATTR_CHANGED);
    assert_eq!(changed_ns(admin), vec![2]);
    assert_eq!(active(admin), vec![1]);
    match write(&mut host.io_queues()[0], 2, 16, &data) {
        Err(HostError::Nvme { status, .. }) => assert_eq!(
            status,
            Status::generic(GenericStatus::InvalidNamespaceOrFormat).with_dnr()
        ),
        other => panic!("I/O to a removed namespace: {other:?}"),
    }
    // The same configuration again: nothing to do.
    assert!(t.target.reload(&cfg).expect("no-op reload").plan.is_empty());
    host.disconnect().expect("disconnect");
}

#[test]
fn a_discovery_controller_hears_of_a_new_subsystem() {
    let t = start_target(172, SIZE);
    let mut cfg = config(&t);
    // A discovery controller (admin queue only), with the device and CM agent it needs.
    let dev = SoftDevice::open(DeviceConfig::new(ip(173))).expect("host device");
    let cm = CmAgent::start(&dev).expect("host CM agent");
    let ctx = dev.open_context(0).expect("context");
    let mut o = HostOptions::new(t.target.listen_addr(), nvme::NVMF_DISCOVERY_NQN);
    o.local_ip = Some(ip(173));
    o.kato_ms = 0;
    let (pd, pool) = test_pool(&dev);
    let mut disc = Controller::connect(ctx, &cm, ControllerOptions::from(&o), pd, &pool)
        .expect("discovery controller");
    let admin = disc.admin_queue_mut();
    let aec = nvme::features::AEC_DISCOVERY_CHANGE;
    let sqe = Sqe::set_features(0, FeatureId::AsyncEventConfiguration, aec);
    run(admin, sqe, DataDir::None, &[]).1.expect("set AEC");
    let aer = submit_aer(admin);
    let mut b = SubsystemConfig::new("nqn.2026-12.io.nvmf-rdma:reload-b");
    b.namespaces.push(ram_ns(1));
    cfg.subsystems.push(b);
    let report = t.target.reload(&cfg).expect("reload adds a subsystem");
    assert_eq!(report.discovery_notified, 1);
    let cqe = wait(admin, aer).expect("the held AER completes");
    assert_eq!(cqe.dw0(), AEN_DISCOVERY_CHANGED);
    // The discovery log page (70h) now lists both subsystems.
    let sqe = Sqe::get_log_page(0, LogPageId::Discovery, 1023, 0);
    let (buf, r) = run(admin, sqe, DataDir::ControllerToHost { len: 4096 }, &[]);
    r.expect("discovery log");
    let buf = buf.expect("its buffer");
    let numrec = u64::from_le_bytes(buf[8..16].try_into().unwrap());
    // The discovery subsystem's own entry and one per NVM subsystem.
    assert_eq!(numrec, 3);
    let text = String::from_utf8_lossy(&buf[..4096]);
    assert!(text.contains("reload-b"));
    // And an NVM host reaches the new subsystem.
    let mut o = host_options(&t, 174, 1, 8);
    o.kato_ms = 0;
    o.subnqn = "nqn.2026-12.io.nvmf-rdma:reload-b".into();
    let mut h = SyncHost::connect(&o).expect("the new subsystem accepts");
    let q = &mut h.io_queues()[0];
    let data = pattern(0, 4096, 9);
    write(q, 1, 0, &data).expect("write");
    assert!(read(q, 1, 0, 4096) == data);
    h.disconnect().expect("disconnect");
    disc.shutdown(Vec::new()).expect("discovery shutdown");
}
