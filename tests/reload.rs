//! Live reconfiguration (issue 16 item 2), end to end on loopback with the host
//! library against a real target: a namespace added by a reload is announced (the
//! held Asynchronous Event Request completes with Namespace Attribute Changed, log
//! page 04h lists it) and serves I/O; removed, it is announced again and answers
//! Invalid Namespace or Format; namespace 1's I/O, in flight across both reloads,
//! completes and verifies; a configuration that cannot be applied changes nothing.
//! A discovery controller that enabled it gets a Discovery Log Change notice when a
//! subsystem is added.
//!
//! Listen entries change live: a second address added by a reload serves a new host
//! while the first address's host keeps writing; removed, its host's queue is
//! disconnected, its UDP port is free again, the discovery log loses it, and the
//! first host goes on without an error. A host dropped from the allowed hosts, and
//! then a subsystem unlinked from the port, have their controllers disconnected while
//! the others keep going. A removed file namespace is flushed before it is closed and
//! its acknowledged writes are in the file.
//!
//! Addresses: 127.0.0.172..=127.0.0.176.
mod common;

use common::*;
use nvme::features::AEC_NS_ATTR;
use nvme::status::GenericStatus;
use nvme::{FeatureId, LogPageId, Sqe, Status};
use nvmf_initiator::capsule::DataDir;
use nvmf_initiator::queue::NvmeRdmaQueue;
use nvmf_initiator::{Controller, ControllerOptions, HostError, HostOptions, SyncHost};
use nvmf_target::config::{
    ListenAddr, NamespaceBackend, NamespaceConfig, SubsystemConfig, TargetConfig,
};
use nvmf_target::oplog::QueueEnd;
use nvmf_target::reload::ReloadError;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
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

/// A host writing and reading back 4 KiB blocks of namespace 1 (LBAs `base..`) in its
/// own thread until `stop` or its first error; `ops` counts the verified blocks. Ends
/// with the count and the first error (`None`: stopped cleanly).
fn writer(
    o: HostOptions,
    base: u64,
    stop: Arc<AtomicBool>,
    ops: Arc<AtomicU64>,
) -> std::thread::JoinHandle<(u64, Option<String>)> {
    std::thread::spawn(move || {
        let mut host = match SyncHost::connect(&o) {
            Ok(h) => h,
            Err(e) => return (0, Some(format!("connect: {e}"))),
        };
        let mut n = 0u64;
        while !stop.load(Ordering::Relaxed) {
            let slba = base + (n % 64) * 8;
            let data = pattern(slba * BLOCK as u64, 4096, n as u8);
            let q = &mut host.io_queues()[0];
            if let Err(e) = write(q, 1, slba, &data) {
                return (n, Some(format!("write {n}: {e}")));
            }
            let nlb = 7;
            let sqe = Sqe::read(0, 1, slba, nlb, false);
            let (buf, r) = run(q, sqe, DataDir::ControllerToHost { len: 4096 }, &[]);
            if let Err(e) = r {
                return (n, Some(format!("read {n}: {e}")));
            }
            if buf.expect("the read's buffer")[..4096] != data[..] {
                return (n, Some(format!("block {n} read back differs")));
            }
            n += 1;
            ops.store(n, Ordering::Relaxed);
        }
        let _ = host.disconnect();
        (n, None)
    })
}

/// Waits (at most 20 s) until `ops` reaches `n`.
fn wait_ops(ops: &AtomicU64, n: u64, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while ops.load(Ordering::Relaxed) < n {
        assert!(
            Instant::now() < deadline,
            "{what}: {} of {n} ops",
            ops.load(Ordering::Relaxed)
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Writes on `q` until one fails (its submission or its completion: the target
/// disconnected the queue), at most 20 s; returns the failure.
fn wait_io_fails(q: &mut NvmeRdmaQueue, slba: u64, what: &str) -> HostError {
    let deadline = Instant::now() + Duration::from_secs(20);
    let data = pattern(0, 4096, 7);
    loop {
        let sqe = Sqe::write(0, 1, slba, 7, false);
        let submitted = q.submit_with(sqe, DataDir::HostToController { len: 4096 }, |b| {
            b[..4096].copy_from_slice(&data)
        });
        match submitted
            .map_err(HostError::Queue)
            .and_then(|cid| wait(q, cid))
        {
            Err(e) => return e,
            Ok(_) => assert!(Instant::now() < deadline, "{what}: I/O still succeeds"),
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The discovery log page (70h) read on `admin`: NUMREC and the page as text.
fn discovery_log(admin: &mut NvmeRdmaQueue) -> (u64, String) {
    // The header and the first three entries (the discovery entries come first).
    let sqe = Sqe::get_log_page(0, LogPageId::Discovery, 1023, 0);
    let (buf, r) = run(admin, sqe, DataDir::ControllerToHost { len: 4096 }, &[]);
    r.expect("discovery log");
    let buf = buf.expect("its buffer");
    let numrec = u64::from_le_bytes(buf[8..16].try_into().unwrap());
    (numrec, String::from_utf8_lossy(&buf[..4096]).into_owned())
}

#[test]
fn a_listen_address_comes_and_goes_under_io_on_another() {
    let t = start_target(172, SIZE);
    let mut cfg = config(&t);
    // A discovery controller through the first address, Discovery Log Change on.
    let dev = SoftDevice::open(DeviceConfig::new(ip(174))).expect("host device");
    let cm = CmAgent::start(&dev).expect("host CM agent");
    let ctx = dev.open_context(0).expect("context");
    let mut o = HostOptions::new(t.target.listen_addr(), nvme::NVMF_DISCOVERY_NQN);
    o.local_ip = Some(ip(174));
    o.kato_ms = 0;
    let (pd, pool) = test_pool(&dev);
    let mut disc = Controller::connect(ctx, &cm, ControllerOptions::from(&o), pd, &pool)
        .expect("discovery controller");
    let admin = disc.admin_queue_mut();
    let aec = nvme::features::AEC_DISCOVERY_CHANGE;
    let sqe = Sqe::set_features(0, FeatureId::AsyncEventConfiguration, aec);
    run(admin, sqe, DataDir::None, &[]).1.expect("set AEC");
    assert_eq!(
        discovery_log(admin).0,
        2,
        "one port: its discovery and NVM entries"
    );
    let aer = submit_aer(admin);

    // Host A writes through the first address the whole time.
    let (stop, ops) = (
        Arc::new(AtomicBool::new(false)),
        Arc::new(AtomicU64::new(0)),
    );
    let mut oa = host_options(&t, 173, 1, 8);
    oa.kato_ms = 0;
    let a = writer(oa, 0, stop.clone(), ops.clone());
    wait_ops(&ops, 5, "host A before the reloads");

    // Add 127.0.0.175:4420 (PORTID 2).
    let second = SocketAddr::new(ip(175), 4420);
    cfg.listen.push(ListenAddr {
        portid: Some(2),
        ..ListenAddr::new(second.ip(), second.port())
    });
    let report = t.target.reload(&cfg).expect("reload adds a listen address");
    assert_eq!(report.plan.listen_added.len(), 1, "{}", report.words());
    assert_eq!(report.discovery_notified, 1);
    assert_eq!(
        t.target.listen_addrs(),
        vec![t.target.listen_addr(), second]
    );
    assert_eq!(t.target.devices().len(), 2, "a device for the new address");
    let admin = disc.admin_queue_mut();
    let cqe = wait(admin, aer).expect("the held AER completes at the reload");
    assert_eq!(cqe.dw0(), AEN_DISCOVERY_CHANGED);
    let (numrec, text) = discovery_log(admin);
    assert_eq!(numrec, 4, "two ports, each its discovery and NVM entries");
    assert!(text.contains("127.0.0.175"), "the new port is listed");
    let aer = submit_aer(admin);

    // Host B connects through the new address and does verified I/O.
    let mut ob = host_options(&t, 176, 1, 8);
    ob.traddr = second;
    ob.kato_ms = 0;
    let mut b = SyncHost::connect(&ob).expect("host B connects through the new address");
    let qb = &mut b.io_queues()[0];
    let data = pattern(0, 8192, 0xB);
    write(qb, 1, 4096, &data).expect("host B writes");
    assert!(
        read(qb, 1, 4096, 8192) == data,
        "host B reads its data back"
    );
    let before = ops.load(Ordering::Relaxed);

    // Remove it again: host B's queues are disconnected, host A goes on.
    cfg.listen.truncate(1);
    let report = t
        .target
        .reload(&cfg)
        .expect("reload removes the listen address");
    assert_eq!(
        report.plan.listen_removed,
        vec![(second.ip(), second.port())]
    );
    assert!(
        (report.disconnected().iter()).any(|&(_, why)| why == QueueEnd::PortRemoved),
        "{}",
        report.words()
    );
    let e = wait_io_fails(
        &mut b.io_queues()[0],
        4096,
        "host B after its port was removed",
    );
    eprintln!("host B after the removal: {e}");
    wait_ops(&ops, before + 10, "host A after the removal");
    assert_eq!(t.target.listen_addrs(), vec![t.target.listen_addr()]);
    assert_eq!(t.target.devices().len(), 1);
    // The removed address's device is closed: its UDP port 4791 binds again.
    std::net::UdpSocket::bind((second.ip(), 4791))
        .expect("UDP 4791 of the removed address is free");
    let admin = disc.admin_queue_mut();
    let cqe = wait(admin, aer).expect("the next AER completes at the removal");
    assert_eq!(cqe.dw0(), AEN_DISCOVERY_CHANGED);
    let (numrec, text) = discovery_log(admin);
    assert_eq!(numrec, 2);
    assert!(!text.contains("127.0.0.175"));
    stop.store(true, Ordering::Relaxed);
    let (n, err) = a.join().expect("host A's thread");
    assert_eq!(err, None, "host A across both reloads ({n} blocks)");
    drop(b);
    disc.shutdown(Vec::new()).expect("discovery shutdown");
}

const HOST_A: &str = "nqn.2014-08.org.nvmexpress:uuid:aaaaaaaa-0000-4000-8000-000000000001";
const HOST_B: &str = "nqn.2014-08.org.nvmexpress:uuid:bbbbbbbb-0000-4000-8000-000000000002";
const OTHER: &str = "nqn.2026-12.io.nvmf-rdma:reload-other";

#[test]
fn hosts_dropped_and_subsystems_unlinked_are_disconnected() {
    let t = start_target(172, SIZE);
    let mut cfg = config(&t);
    cfg.subsystems[0].allow_any_host = false;
    cfg.subsystems[0].hosts = vec![HOST_A.into(), HOST_B.into()];
    let mut other = SubsystemConfig::new(OTHER);
    other.namespaces.push(ram_ns(1));
    cfg.subsystems.push(other);
    t.target
        .reload(&cfg)
        .expect("reload: host lists and a second subsystem");

    let (stop, ops) = (
        Arc::new(AtomicBool::new(false)),
        Arc::new(AtomicU64::new(0)),
    );
    let mut oa = host_options(&t, 173, 1, 8);
    oa.kato_ms = 0;
    oa.hostnqn = HOST_A.into();
    let a = writer(oa, 0, stop.clone(), ops.clone());
    let mut ob = host_options(&t, 174, 1, 8);
    ob.kato_ms = 0;
    ob.hostnqn = HOST_B.into();
    let mut b = SyncHost::connect(&ob).expect("host B connects");
    write(&mut b.io_queues()[0], 1, 4096, &pattern(0, 4096, 1)).expect("host B writes");
    let mut oc = host_options(&t, 176, 1, 8);
    oc.kato_ms = 0;
    oc.subnqn = OTHER.into();
    let mut c = SyncHost::connect(&oc).expect("host C connects to the other subsystem");
    wait_ops(&ops, 5, "host A before the reloads");

    // Host B is dropped from the allow-list: its controller goes, host A's stays.
    cfg.subsystems[0].hosts = vec![HOST_A.into()];
    let report = t.target.reload(&cfg).expect("reload drops host B");
    assert_eq!(
        (report.disconnected().iter())
            .map(|&(_, why)| why)
            .collect::<Vec<_>>(),
        vec![QueueEnd::HostNotAllowed],
        "{}",
        report.words()
    );
    let e = wait_io_fails(&mut b.io_queues()[0], 4096, "host B once dropped");
    eprintln!("host B after it was dropped: {e}");
    let before = ops.load(Ordering::Relaxed);
    wait_ops(&ops, before + 10, "host A after host B was dropped");
    drop(b);
    match SyncHost::connect(&ob) {
        Err(HostError::ConnectRefused { .. }) => {}
        other => panic!("host B connecting again: {:?}", other.map(|_| ())),
    }

    // The subsystem is unlinked from the port: host A's controller goes, host C's
    // (the other subsystem, still linked) stays.
    cfg.listen[0].subsystems = Some(vec![OTHER.into()]);
    let report = t.target.reload(&cfg).expect("reload unlinks the subsystem");
    assert_eq!(
        (report.disconnected().iter())
            .map(|&(_, why)| why)
            .collect::<Vec<_>>(),
        vec![QueueEnd::SubsystemUnlinked],
        "{}",
        report.words()
    );
    let (n, err) = a.join().expect("host A's thread");
    assert!(
        err.is_some(),
        "host A's I/O ends once unlinked ({n} blocks)"
    );
    let qc = &mut c.io_queues()[0];
    let data = pattern(0, 8192, 0xC);
    write(qc, 1, 8, &data).expect("host C writes after both reloads");
    assert!(read(qc, 1, 8, 8192) == data);
    stop.store(true, Ordering::Relaxed);
    c.disconnect().expect("host C disconnects");
}

#[test]
fn a_removed_namespace_is_flushed_before_it_is_closed() {
    let t = start_target(172, SIZE);
    let mut cfg = config(&t);
    let path = t._dir.path().join("ns2.img");
    let mut ns2 = NamespaceConfig::new(2);
    ns2.path = path.clone();
    ns2.size = Some("4M".into());
    cfg.subsystems[0].namespaces.push(ns2);
    t.target.reload(&cfg).expect("reload adds file namespace 2");
    let mut o = host_options(&t, 173, 1, 16);
    o.kato_ms = 0;
    let mut host = SyncHost::connect(&o).expect("host connects");
    let q = &mut host.io_queues()[0];
    let blocks: Vec<Vec<u8>> = (0..16u64).map(|i| pattern(i * 4096, 4096, 0x42)).collect();
    for (i, data) in blocks.iter().enumerate() {
        write(q, 2, i as u64 * 8, data).expect("acknowledged write to namespace 2");
    }
    cfg.subsystems[0].namespaces.truncate(1);
    let report = t.target.reload(&cfg).expect("reload removes namespace 2");
    assert_eq!(report.namespaces_flushed, 1, "{}", report.words());
    assert!(
        report.flush_failures.is_empty(),
        "{:?}",
        report.flush_failures
    );
    // Every acknowledged write is in the file.
    let file = std::fs::read(&path).expect("namespace 2's file");
    for (i, data) in blocks.iter().enumerate() {
        assert!(
            file[i * 4096..(i + 1) * 4096] == data[..],
            "block {i} in the file"
        );
    }
    // A command to it now: Invalid Namespace or Format.
    match write(&mut host.io_queues()[0], 2, 0, &blocks[0]) {
        Err(HostError::Nvme { status, .. }) => assert_eq!(
            status,
            Status::generic(GenericStatus::InvalidNamespaceOrFormat).with_dnr()
        ),
        other => panic!("I/O to a removed namespace: {other:?}"),
    }
    host.disconnect().expect("disconnect");
}

#[test]
fn a_second_port_on_one_address_comes_and_goes() {
    let t = start_target(172, SIZE);
    let mut cfg = config(&t);
    let (stop, ops) = (
        Arc::new(AtomicBool::new(false)),
        Arc::new(AtomicU64::new(0)),
    );
    let mut oa = host_options(&t, 173, 1, 8);
    oa.kato_ms = 0;
    let a = writer(oa, 0, stop.clone(), ops.clone());
    wait_ops(&ops, 5, "host A before the reloads");

    // 4421 on the same address (PORTID 2): one more listen, no new device.
    cfg.listen.push(ListenAddr {
        portid: Some(2),
        ..ListenAddr::new(ip(172), 4421)
    });
    t.target.reload(&cfg).expect("reload adds trsvcid 4421");
    assert_eq!(
        t.target.devices().len(),
        1,
        "the address's device serves both ports"
    );
    let mut ob = host_options(&t, 176, 1, 8);
    ob.traddr = SocketAddr::new(ip(172), 4421);
    ob.kato_ms = 0;
    let mut b = SyncHost::connect(&ob).expect("host B connects through 4421");
    let data = pattern(0, 4096, 0xB);
    write(&mut b.io_queues()[0], 1, 4096, &data).expect("host B writes");

    // Removed again: host B's queues go, host A's stay.
    cfg.listen.truncate(1);
    let report = t.target.reload(&cfg).expect("reload removes trsvcid 4421");
    assert_eq!(report.plan.listen_removed, vec![(ip(172), 4421)]);
    let e = wait_io_fails(&mut b.io_queues()[0], 4096, "host B after 4421 was removed");
    eprintln!("host B after the removal: {e}");
    drop(b);
    // Past the CM's TimeWait of host B's connections: the target still answers
    // reloads and connections, and host A still writes.
    std::thread::sleep(Duration::from_secs(4));
    let before = ops.load(Ordering::Relaxed);
    wait_ops(&ops, before + 10, "host A after the removal");
    assert!(t
        .target
        .reload(&cfg)
        .expect("the control thread answers")
        .plan
        .is_empty());
    match SyncHost::connect(&ob) {
        Err(HostError::Rejected { reason, .. }) => assert_eq!(reason, 8, "invalid service ID"),
        other => panic!("connecting to the removed port: {:?}", other.map(|_| ())),
    }
    stop.store(true, Ordering::Relaxed);
    let (n, err) = a.join().expect("host A's thread");
    assert_eq!(err, None, "host A across both reloads ({n} blocks)");
}
