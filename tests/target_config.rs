//! Each key of the `nvmf-target` configuration (target/examples/target.toml) against a
//! running target: the target starts from TOML, a host connects over loopback
//! (real UDP sockets on 127.0.0.2xx, real files through io_uring) and observes what
//! the key promises: several `[[listen]]` entries each accept, `discovery = false`
//! refuses the discovery NQN, `kato_ms` is the KATO of a discovery controller whose
//! Connect asks for none, `mdts_bytes`, `inline_data_size`, `max_queue_size` and
//! `poll_groups` are what the host sees, and the subsystem and namespace keys.
//! Unknown keys are refused by name (target/src/config.rs and target/tests/cli.rs).
mod common;

use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use common::{ip, pattern, run};
use nvme::log::parse_discovery_log;
use nvme::status::{CommandSpecificStatus, GenericStatus};
use nvme::{FeatureId, LogPageId, Sqe, Status, NVMF_DISCOVERY_NQN};
use nvmf_initiator::{
    Controller, ControllerOptions, DataDir, HostError, HostOptions, NvmeRdmaQueue, QueueError,
    SyncHost,
};
use nvmf_target::config::TargetConfig;
use nvmf_target::TargetHandle;
use transport::soft::{CmAgent, DeviceConfig, SoftDevice};

const NQN: &str = "nqn.2026-11.io.nvmf-rdma:config";

/// One target at a time (each brings busy-polling threads; the machine has 2 cores).
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// A target from `head` (top-level keys and `[[listen]]` tables) plus one subsystem
/// [`NQN`] open to any host with namespace 1 (16 MiB, sparse) in `dir`.
fn target(head: &str, dir: &Path) -> TargetHandle {
    let toml = format!(
        "{head}\n[[subsystems]]\nnqn = \"{NQN}\"\n[[subsystems.namespaces]]\nnsid = 1\npath = \"{}\"\nsize = \"16M\"\n",
        dir.join("ns1.img").display()
    );
    let cfg = TargetConfig::from_toml_str(&toml).expect("valid configuration");
    nvmf_target::start(&cfg).expect("target starts")
}

fn options(traddr: SocketAddr, subnqn: &str, local: u8) -> HostOptions {
    let mut o = HostOptions::new(traddr, subnqn);
    o.local_ip = Some(ip(local));
    o.queue_depth = 16;
    o.kato_ms = 0;
    o
}

/// A write of `data` at `slba` and a read back, compared.
fn round_trip(q: &mut NvmeRdmaQueue, slba: u64, data: &[u8]) {
    let blocks = (data.len() / 512) as u16;
    let (_, r) = run(
        q,
        Sqe::write(0, 1, slba, blocks - 1, false),
        DataDir::HostToController { len: data.len() },
        data,
    );
    assert!(r.expect("write").status().is_success());
    let (buf, r) = run(
        q,
        Sqe::read(0, 1, slba, blocks - 1, false),
        DataDir::ControllerToHost { len: data.len() },
        &[],
    );
    assert!(r.expect("read").status().is_success());
    assert!(
        buf.as_deref().expect("data buffer")[..data.len()] == *data,
        "read back differs"
    );
}

/// A discovery controller (admin queue only) from 127.0.0.`local`, asking for KATO
/// `kato_ms`. Returns the device and CM agent too: they must outlive the controller.
fn discovery_controller(
    traddr: SocketAddr,
    local: u8,
    kato_ms: u32,
) -> Result<(Controller, CmAgent, std::sync::Arc<SoftDevice>), HostError> {
    let dev = SoftDevice::open(DeviceConfig::new(ip(local))).expect("host device");
    let cm = CmAgent::start(&dev).expect("host CM agent");
    let ctx = dev.open_context(0).expect("context");
    let mut opts = options(traddr, NVMF_DISCOVERY_NQN, local);
    opts.kato_ms = kato_ms;
    let (pd, pool) = common::test_pool(&dev);
    let c = Controller::connect(ctx, &cm, ControllerOptions::from(&opts), pd, &pool)?;
    Ok((c, cm, dev))
}

/// The whole discovery log page, read 4 KiB at a time (the admin buffer's size).
fn discovery_log(c: &mut Controller) -> Vec<u8> {
    let mut page = Vec::new();
    loop {
        let sqe = Sqe::get_log_page(0, LogPageId::Discovery, 1023, page.len() as u64);
        let (cqe, data) = c
            .admin_command(sqe, DataDir::ControllerToHost { len: 4096 }, |_| {})
            .expect("Get Log Page");
        assert!(cqe.status().is_success());
        page.extend_from_slice(&data);
        let numrec = u64::from_le_bytes(page[8..16].try_into().unwrap()) as usize;
        if page.len() >= (numrec + 1) * 1024 {
            page.truncate((numrec + 1) * 1024);
            return page;
        }
    }
}

fn get_kato(c: &mut Controller) -> Result<u32, HostError> {
    let (cqe, _) = c.admin_command(
        Sqe::get_features(0, FeatureId::KeepAliveTimer),
        DataDir::None,
        |_| {},
    )?;
    assert!(cqe.status().is_success());
    Ok(cqe.dw0())
}

#[test]
fn listen_several_entries_each_accept_and_are_discovered() {
    let _s = serial();
    let dir = tempfile::tempdir().unwrap();
    let t = target(
        "[[listen]]\naddr = \"127.0.0.210\"\n\
         [[listen]]\naddr = \"127.0.0.210\"\ntrsvcid = 4421\n\
         [[listen]]\naddr = \"127.0.0.211\"\ntrsvcid = 4430\n",
        dir.path(),
    );
    let want: Vec<SocketAddr> = ["127.0.0.210:4420", "127.0.0.210:4421", "127.0.0.211:4430"]
        .iter()
        .map(|a| a.parse().unwrap())
        .collect();
    assert_eq!(t.listen_addrs(), &want[..]);
    assert_eq!(t.devices().len(), 2, "one soft device per distinct address");
    // A host through each entry: connect, write, read back.
    for (k, &addr) in want.iter().enumerate() {
        let mut host = SyncHost::connect(&options(addr, NQN, 212 + k as u8))
            .unwrap_or_else(|e| panic!("connect through {addr}: {e}"));
        let data = pattern(k as u64 * 4096, 4096, k as u8);
        round_trip(&mut host.io_queues()[0], k as u64 * 8, &data);
        host.disconnect().expect("disconnect");
    }
    // Nothing is served on a port that was not configured.
    let stray = SocketAddr::new(ip(211), 4420);
    let mut o = options(stray, NQN, 215);
    o.connect_timeout = Duration::from_secs(2);
    assert!(SyncHost::connect(&o).is_err(), "no listener on {stray}");
    // The discovery log page lists every entry, for the discovery subsystem and ours.
    let (mut c, _cm, _dev) = discovery_controller(want[2], 216, 0).expect("discovery");
    let page = discovery_log(&mut c);
    let (_, entries) = parse_discovery_log(&page).expect("discovery log");
    let got: Vec<(u8, u16, String, String)> = entries
        .iter()
        .map(|e| {
            (
                e.subtype,
                e.portid.get(),
                format!("{}:{}", e.traddr().unwrap(), e.trsvcid().unwrap()),
                e.subnqn().unwrap().to_string(),
            )
        })
        .collect();
    let mut expect = Vec::new();
    for (subtype, nqn) in [(3u8, NVMF_DISCOVERY_NQN), (2, NQN)] {
        for (i, a) in want.iter().enumerate() {
            expect.push((subtype, i as u16 + 1, a.to_string(), nqn.to_string()));
        }
    }
    assert_eq!(got, expect);
    c.shutdown(Vec::new()).expect("discovery shutdown");
}

#[test]
fn discovery_false_refuses_the_discovery_nqn_as_unknown() {
    let _s = serial();
    let dir = tempfile::tempdir().unwrap();
    let t = target(
        "discovery = false\n[[listen]]\naddr = \"127.0.0.217\"\n",
        dir.path(),
    );
    let err = discovery_controller(t.listen_addr(), 218, 0)
        .err()
        .expect("the discovery NQN must be refused");
    match &err {
        HostError::ConnectRefused {
            qid: 0,
            status,
            detail,
        } => {
            // nvmet's answer for an unknown subsystem: Connect Invalid Parameters,
            // DNR, IATTR 1 / IPO 256 (SUBNQN).
            assert_eq!(
                *status,
                Status::command_specific(CommandSpecificStatus::ConnectInvalidParameters)
                    .with_dnr()
            );
            let d = detail.as_deref().unwrap_or_default();
            assert!(d.contains("SUBNQN") || d.contains("subnqn"), "{err}");
        }
        other => panic!("expected a refused Connect, got {other}"),
    }
    // The NVM subsystem is still served.
    let mut host = SyncHost::connect(&options(t.listen_addr(), NQN, 219)).expect("NVM connect");
    round_trip(&mut host.io_queues()[0], 0, &pattern(0, 512, 1));
    host.disconnect().unwrap();
    drop(t);
    // With the default (true) the same Connect succeeds.
    let dir = tempfile::tempdir().unwrap();
    let t = target("[[listen]]\naddr = \"127.0.0.220\"\n", dir.path());
    let (c, _cm, _dev) = discovery_controller(t.listen_addr(), 221, 0).expect("discovery");
    assert_eq!(c.info().subnqn, NVMF_DISCOVERY_NQN);
    c.shutdown(Vec::new()).unwrap();
}

#[test]
fn kato_ms_is_the_discovery_controllers_keep_alive_timeout() {
    let _s = serial();
    let dir = tempfile::tempdir().unwrap();
    // 1500 ms, rounded up to whole seconds as KAS (1 s) requires.
    let t = target(
        "kato_ms = 1500\n[[listen]]\naddr = \"127.0.0.222\"\n",
        dir.path(),
    );
    let (mut c, _cm, _dev) = discovery_controller(t.listen_addr(), 223, 0).expect("discovery");
    assert_eq!(get_kato(&mut c).unwrap(), 2000);
    // A host that asks for its own KATO keeps it.
    let (mut own, _cm2, _dev2) =
        discovery_controller(t.listen_addr(), 224, 7000).expect("discovery with KATO");
    assert_eq!(get_kato(&mut own).unwrap(), 7000);
    own.shutdown(Vec::new()).unwrap();
    // An I/O controller whose Connect asks for none gets none.
    let mut io = SyncHost::connect(&options(t.listen_addr(), NQN, 225)).expect("I/O connect");
    assert_eq!(get_kato(io.controller()).unwrap(), 0);
    io.disconnect().unwrap();
    // The silent discovery controller is reaped: the target disconnects its admin
    // queue once 2 s pass without a command (Traffic Based Keep Alive: any command,
    // not only Keep Alive, restarts the timer, so the wait sends none; the sweep runs
    // every 100 ms).
    let deadline = Instant::now() + Duration::from_secs(20);
    while !c.admin_queue_mut().peer_disconnected() {
        assert!(
            Instant::now() < deadline,
            "the discovery controller outlived kato_ms by 18 s"
        );
        c.admin_queue_mut().progress();
        std::thread::sleep(Duration::from_millis(10));
    }
    let e = get_kato(&mut c).unwrap_err();
    assert!(
        matches!(
            &e,
            HostError::TargetDisconnected { qid: 0 }
                | HostError::Queue(QueueError::Dead { qid: 0, .. })
        ),
        "the target should have disconnected the admin queue: {e}"
    );
    drop(c);
    drop(t);
    // kato_ms = 0: no timer for such a controller (Keep Alive is then refused as
    // Keep Alive Timeout Invalid, as nvmet does).
    let dir = tempfile::tempdir().unwrap();
    let t = target(
        "kato_ms = 0\n[[listen]]\naddr = \"127.0.0.226\"\n",
        dir.path(),
    );
    let (mut c, _cm, _dev) = discovery_controller(t.listen_addr(), 227, 0).expect("discovery");
    assert_eq!(get_kato(&mut c).unwrap(), 0);
    let e = c.keep_alive().unwrap_err();
    assert_eq!(
        e.nvme_status(),
        Some(Status::generic(GenericStatus::KeepAliveTimeoutInvalid)),
        "{e}"
    );
    c.shutdown(Vec::new()).unwrap();
}

#[test]
fn mdts_bytes_inline_data_size_and_max_queue_size_are_what_the_host_sees() {
    let _s = serial();
    let dir = tempfile::tempdir().unwrap();
    let t = target(
        "mdts_bytes = \"64K\"\ninline_data_size = 8192\nmax_queue_size = 48\n\
         [[listen]]\naddr = \"127.0.0.228\"\n",
        dir.path(),
    );
    let mut o = options(t.listen_addr(), NQN, 229);
    o.queue_depth = 128;
    let mut host = SyncHost::connect(&o).expect("connect");
    let c = host.controller();
    // MDTS = log2(64 KiB / 4 KiB) = 4; IOCCSZ = (64 + 8192) / 16; CAP.MQES = 48 - 1.
    assert_eq!(c.info().mdts, 4);
    assert_eq!(c.max_transfer_bytes(), Some(64 << 10));
    assert_eq!(c.info().ioccsz, (64 + 8192) / 16);
    assert_eq!(c.info().in_capsule_data_size(), 8192);
    assert_eq!(c.cap().mqes(), 47);
    assert_eq!(c.info().maxcmd, 48);
    let pg = t.poll_group_counters()[0].clone();
    let q = &mut host.io_queues()[0];
    assert_eq!(
        q.depth(),
        48,
        "the host's 128 entries are capped at CAP.MQES + 1"
    );
    // A write of exactly MDTS bytes works; an 8 KiB write travels in-capsule.
    round_trip(q, 0, &pattern(0, 64 << 10, 3));
    let before = pg.in_capsule_writes.load(Ordering::Relaxed);
    round_trip(q, 256, &pattern(1 << 17, 8192, 4));
    assert_eq!(pg.in_capsule_writes.load(Ordering::Relaxed), before + 1);
    // A command over MDTS (a 128 KiB read; the SQE alone says so) is refused before
    // any data moves: Invalid Field in Command.
    let r = nvmf_initiator::controller::run_command(
        q,
        Sqe::read(0, 1, 0, 255, false),
        DataDir::None,
        |_| {},
        Duration::from_secs(10),
        &mut Vec::new(),
    );
    let e = r.expect_err("a 128 KiB read over a 64 KiB MDTS");
    assert_eq!(
        e.nvme_status(),
        Some(Status::generic(GenericStatus::InvalidField).with_dnr()),
        "{e}"
    );
    host.disconnect().unwrap();
}

#[test]
fn poll_groups_start_that_many_and_share_the_queues() {
    let _s = serial();
    let dir = tempfile::tempdir().unwrap();
    let t = target(
        "poll_groups = 2\n[[listen]]\naddr = \"127.0.0.230\"\n",
        dir.path(),
    );
    let groups = t.poll_group_counters().to_vec();
    assert_eq!(groups.len(), 2);
    let mut o = options(t.listen_addr(), NQN, 231);
    o.io_queues = 2;
    let mut host = SyncHost::connect(&o).expect("connect");
    let before: Vec<u64> = groups
        .iter()
        .map(|g| g.capsules.load(Ordering::Relaxed))
        .collect();
    for (k, q) in host.io_queues().iter_mut().enumerate() {
        round_trip(q, 64 * k as u64, &pattern(0, 4096, k as u8));
    }
    // Each I/O queue landed in its own poll group (round robin), and each served I/O.
    for (g, b) in groups.iter().zip(&before) {
        assert!(g.capsules.load(Ordering::Relaxed) >= b + 2, "{groups:?}");
    }
    host.disconnect().unwrap();
}

#[test]
fn subsystem_and_namespace_keys_are_served() {
    let _s = serial();
    let dir = tempfile::tempdir().unwrap();
    let allowed = "nqn.2014-08.org.nvmexpress:uuid:00000000-0000-0000-0000-0000000000aa";
    let toml = format!(
        r#"
[[listen]]
addr = "127.0.0.232"
[[subsystems]]
nqn = "{NQN}"
serial = "CFGTEST0001"
allow_any_host = false
hosts = ["{allowed}"]
[[subsystems.namespaces]]
nsid = 3
path = "{}"
size = "8M"
block_size = 4096
[[subsystems.namespaces]]
nsid = 7
path = "{}"
size = 1048576
"#,
        dir.path().join("a.img").display(),
        dir.path().join("b.img").display()
    );
    let cfg = TargetConfig::from_toml_str(&toml).unwrap();
    let t = nvmf_target::start(&cfg).expect("target");
    // The files were created sparse at their sizes.
    assert_eq!(
        std::fs::metadata(dir.path().join("a.img")).unwrap().len(),
        8 << 20
    );
    assert_eq!(
        std::fs::metadata(dir.path().join("b.img")).unwrap().len(),
        1 << 20
    );
    // A host not in `hosts` is refused: Connect Invalid Host.
    let err = SyncHost::connect(&options(t.listen_addr(), NQN, 233)).unwrap_err();
    assert_eq!(
        err.nvme_status(),
        Some(Status::command_specific(CommandSpecificStatus::ConnectInvalidHost).with_dnr()),
        "{err}"
    );
    let mut o = options(t.listen_addr(), NQN, 234);
    o.hostnqn = allowed.to_string();
    let mut host = SyncHost::connect(&o).expect("the listed host connects");
    let c = host.controller();
    assert_eq!(c.info().serial_number.trim_end(), "CFGTEST0001");
    assert_eq!(c.info().subnqn, NQN);
    assert_eq!(c.info().nn, 7);
    assert_eq!(c.active_namespaces().unwrap(), vec![3, 7]);
    let ns3 = c.identify_namespace(3).unwrap();
    assert_eq!((ns3.block_size, ns3.nsze), (4096, (8 << 20) / 4096));
    let ns7 = c.identify_namespace(7).unwrap();
    assert_eq!((ns7.block_size, ns7.nsze), (512, (1 << 20) / 512));
    // I/O reaches the namespace by its NSID, in its block size.
    let q = &mut host.io_queues()[0];
    let data = pattern(0, 4096, 9);
    let (_, r) = run(
        q,
        Sqe::write(0, 3, 5, 0, false),
        DataDir::HostToController { len: 4096 },
        &data,
    );
    assert!(r.expect("write to NSID 3").status().is_success());
    let on_disk = std::fs::read(dir.path().join("a.img")).unwrap();
    assert!(
        on_disk[5 * 4096..6 * 4096] == data[..],
        "LBA 5 of 4 KiB blocks"
    );
    let (_, r) = run(
        q,
        Sqe::read(0, 5, 0, 0, false),
        DataDir::ControllerToHost { len: 512 },
        &[],
    );
    let e = r.expect_err("NSID 5 is not configured");
    assert_eq!(
        e.nvme_status(),
        Some(Status::generic(GenericStatus::InvalidNamespaceOrFormat).with_dnr()),
        "{e}"
    );
    host.disconnect().unwrap();
}
