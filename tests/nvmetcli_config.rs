//! `nvmf-target` on the JSON `nvmetcli save` writes (issue 16 item 1), against a
//! running target over loopback (real UDP sockets on 127.0.0.24x, real files through
//! io_uring), seen by this workspace's host:
//!
//! - tests/fixtures/nvmetcli-save.json (nvmetcli's shape: sorted keys, configfs values
//!   as strings; two ports, one linking subsystem A only with a referral, the other A
//!   and B) and tests/fixtures/nvmetcli-save.toml (the same setup in TOML) give
//!   byte-identical Identify Controller, Identify Namespace, Namespace Identification
//!   Descriptor lists, active namespace lists and discovery log pages on both ports;
//! - port links hold: B, not linked to port 4420, refuses Connect there and is not in
//!   that port's discovery log page; it connects on 4421;
//! - a read-only namespace answers writes Namespace is Write Protected, no DNR (as
//!   nvmet_io_cmd_check_access) and
//!   shows NSATTR bit 0; the configured NGUID, UUID and EUI-64 are what the host's
//!   Identify reads.
//!
//! Unknown and unsupported keys are refused with their path: target/src/config (unit
//! tests) and target/tests/cli.rs (the binary).
mod common;

use std::net::SocketAddr;
use std::path::Path;

use common::{ip, pattern, run};
use nvme::identify::NsIdDescriptor;
use nvme::log::parse_discovery_log;
use nvme::status::{CommandSpecificStatus, GenericStatus};
use nvme::{IdentifyCns, LogPageId, Sqe, Status, NVMF_DISCOVERY_NQN};
use nvmf_initiator::{Controller, ControllerOptions, DataDir, HostOptions, SyncHost};
use nvmf_target::config::TargetConfig;
use transport::soft::{CmAgent, DeviceConfig, SoftDevice};

const A: &str = "nqn.2026-11.io.nvmf-rdma:nvmetcli-a";
const B: &str = "nqn.2026-11.io.nvmf-rdma:nvmetcli-b";
const HOST: &str = "nqn.2014-08.org.nvmexpress:uuid:0c8f4a5e-2d7b-4e19-9a63-5b1d7e0f3c24";
const JSON: &str = include_str!("fixtures/nvmetcli-save.json");
const TOML: &str = include_str!("fixtures/nvmetcli-save.toml");

/// One target at a time (each brings busy-polling threads; the machine has 2 cores).
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

fn port(trsvcid: u16) -> SocketAddr {
    SocketAddr::new(ip(240), trsvcid)
}

fn options(traddr: SocketAddr, subnqn: &str, local: u8) -> HostOptions {
    let mut o = HostOptions::new(traddr, subnqn);
    o.local_ip = Some(ip(local));
    o.hostnqn = HOST.to_string();
    o.queue_depth = 16;
    o.kato_ms = 0;
    o.io_queues = 1;
    o
}

/// `fixture` written to `dir/name` with `@DIR@` replaced by `dir`, and the namespace
/// files it names created (nvmetcli namespaces exist already: 4 MiB each).
fn write_fixture(dir: &Path, name: &str, fixture: &str) -> std::path::PathBuf {
    for f in ["a1.img", "a2.img", "a3.img", "b1.img"] {
        let p = dir.join(f);
        if !p.exists() {
            std::fs::write(&p, vec![0u8; 4 << 20]).unwrap();
        }
    }
    let path = dir.join(name);
    std::fs::write(&path, fixture.replace("@DIR@", &dir.display().to_string())).unwrap();
    path
}

/// A raw admin command's 4096 bytes of data.
fn admin_data(c: &mut Controller, sqe: Sqe) -> Vec<u8> {
    let (cqe, data) = c
        .admin_command(sqe, DataDir::ControllerToHost { len: 4096 }, |_| {})
        .expect("admin command");
    assert!(cqe.status().is_success(), "{:?}", cqe.status());
    data
}

/// A discovery controller on `traddr` from 127.0.0.`local` (with the device and CM
/// agent it needs) and its whole discovery log page.
fn discovery_log(traddr: SocketAddr, local: u8) -> Vec<u8> {
    let dev = SoftDevice::open(DeviceConfig::new(ip(local))).expect("host device");
    let cm = CmAgent::start(&dev).expect("host CM agent");
    let ctx = dev.open_context(0).expect("context");
    let opts = options(traddr, NVMF_DISCOVERY_NQN, local);
    let (pd, pool) = common::test_pool(&dev);
    let mut c = Controller::connect(ctx, &cm, ControllerOptions::from(&opts), pd, &pool)
        .expect("discovery controller");
    let mut page = Vec::new();
    loop {
        let sqe = Sqe::get_log_page(0, LogPageId::Discovery, 1023, page.len() as u64);
        page.extend_from_slice(&admin_data(&mut c, sqe));
        let numrec = u64::from_le_bytes(page[8..16].try_into().unwrap()) as usize;
        if page.len() >= (numrec + 1) * 1024 {
            page.truncate((numrec + 1) * 1024);
            c.shutdown(Vec::new()).expect("discovery shutdown");
            return page;
        }
    }
}

/// (SUBTYPE, PORTID, TRADDR:TRSVCID, SUBNQN) of each entry of a discovery log page.
fn entries(page: &[u8]) -> Vec<(u8, u16, String, String)> {
    let (_, entries) = parse_discovery_log(page).expect("discovery log");
    entries
        .iter()
        .map(|e| {
            (
                e.subtype,
                e.portid.get(),
                format!("{}:{}", e.traddr().unwrap(), e.trsvcid().unwrap()),
                e.subnqn().unwrap().to_string(),
            )
        })
        .collect()
}

/// What a host sees of the target `config` starts: Identify Controller of A and B,
/// the active namespace list of A, Identify Namespace and the descriptor list of each
/// of A's namespaces and B's, and the discovery log page of each port. Checks the port
/// links on the way.
fn observe(config: &Path) -> Vec<(String, Vec<u8>)> {
    let cfg = TargetConfig::from_file(config).expect("valid configuration");
    let t = nvmf_target::start(&cfg).expect("target starts");
    let mut seen = Vec::new();
    let mut host = SyncHost::connect(&options(port(4420), A, 242)).expect("A on port 4420");
    let c = host.controller();
    seen.push((
        "A identify controller".into(),
        admin_data(c, Sqe::identify(0, IdentifyCns::Controller, 0, 0)),
    ));
    seen.push((
        "A active namespaces".into(),
        admin_data(c, Sqe::identify(0, IdentifyCns::ActiveNamespaceList, 0, 0)),
    ));
    for nsid in [1, 2] {
        seen.push((
            format!("A ns {nsid}"),
            admin_data(c, Sqe::identify(0, IdentifyCns::Namespace, nsid, 0)),
        ));
        seen.push((
            format!("A ns {nsid} descriptors"),
            admin_data(
                c,
                Sqe::identify(0, IdentifyCns::NamespaceIdDescriptorList, nsid, 0),
            ),
        ));
    }
    // I/O reaches the namespace file.
    let data = pattern(0, 4096, 7);
    let (_, r) = run(
        &mut host.io_queues()[0],
        Sqe::write(0, 1, 16, 7, false),
        DataDir::HostToController { len: 4096 },
        &data,
    );
    assert!(r.expect("write").status().is_success());
    host.disconnect().expect("disconnect");
    // B is not linked to port 4420: refused as an unknown subsystem there ...
    let err = SyncHost::connect(&options(port(4420), B, 243)).expect_err("B is not on 4420");
    assert_eq!(
        err.nvme_status(),
        Some(Status::command_specific(CommandSpecificStatus::ConnectInvalidParameters).with_dnr()),
        "{err}"
    );
    // ... and served on 4421, to its allowed host.
    let mut host = SyncHost::connect(&options(port(4421), B, 244)).expect("B on port 4421");
    let c = host.controller();
    seen.push((
        "B identify controller".into(),
        admin_data(c, Sqe::identify(0, IdentifyCns::Controller, 0, 0)),
    ));
    seen.push((
        "B ns 1".into(),
        admin_data(c, Sqe::identify(0, IdentifyCns::Namespace, 1, 0)),
    ));
    seen.push((
        "B ns 1 descriptors".into(),
        admin_data(
            c,
            Sqe::identify(0, IdentifyCns::NamespaceIdDescriptorList, 1, 0),
        ),
    ));
    host.disconnect().expect("disconnect");
    seen.push(("discovery on 4420".into(), discovery_log(port(4420), 245)));
    seen.push(("discovery on 4421".into(), discovery_log(port(4421), 246)));
    drop(t);
    seen
}

#[test]
fn nvmetcli_json_and_its_toml_give_identical_identify_and_discovery() {
    let _s = serial();
    let dir = tempfile::tempdir().unwrap();
    let json = observe(&write_fixture(dir.path(), "config.json", JSON));
    let toml = observe(&write_fixture(dir.path(), "config.toml", TOML));
    for ((what, j), (_, t)) in json.iter().zip(&toml) {
        assert!(
            j == t,
            "{what} differs between the JSON and the TOML target"
        );
    }
    assert_eq!(json.len(), toml.len());
    let get = |what: &str| &json.iter().find(|(w, _)| w == what).unwrap().1;

    // What the file said, as the host reads it (Identify Controller: NVMe Base 2.x
    // Figure 312 offsets).
    let id = get("A identify controller");
    assert_eq!(&id[4..24], b"4e9c2a7d1b3f5068    ", "SN");
    assert_eq!(&id[24..29], b"Linux", "MN");
    assert_eq!(&id[64..72], b"6.12.0  ", "FR");
    assert_eq!(
        &id[73..76],
        &[0xab, 0x19, 0x00],
        "IEEE OUI 0019ABh, little endian"
    );
    assert_eq!(
        u16::from_le_bytes([id[78], id[79]]),
        5,
        "CNTLID from cntlid_min"
    );
    assert_eq!(&id[80..84], &0x0001_0300u32.to_le_bytes(), "VER 1.3");
    assert_eq!(
        u32::from_le_bytes(id[516..520].try_into().unwrap()),
        2,
        "NN: namespace 3 is disabled"
    );
    let active: Vec<u32> = get("A active namespaces")
        .chunks(4)
        .map(|c| u32::from_le_bytes(c.try_into().unwrap()))
        .take_while(|&n| n != 0)
        .collect();
    assert_eq!(active, [1, 2]);
    // NGUID (Identify Namespace bytes 104..120) and the descriptors: namespace 1 has
    // both ids; namespace 2's NGUID is nvmet's unset zeros: none reported.
    let nguid1 = [
        0xef, 0x90, 0x68, 0x9c, 0x6c, 0x46, 0xd4, 0x4c, 0x89, 0xc1, 0x40, 0x67, 0x80, 0x13, 0x09,
        0xa8,
    ];
    assert_eq!(&get("A ns 1")[104..120], &nguid1);
    let uuid1 = *uuid::Uuid::parse_str("6f2c8ab1-1f0e-4c47-9d43-0c1a5e0b7a11")
        .unwrap()
        .as_bytes();
    assert_eq!(
        NsIdDescriptorList_parse(get("A ns 1 descriptors")),
        [
            NsIdDescriptor::Uuid(uuid1),
            NsIdDescriptor::Nguid(nguid1),
            NsIdDescriptor::Csi(0)
        ]
    );
    assert_eq!(&get("A ns 2")[104..120], &[0; 16]);
    let uuid2 = *uuid::Uuid::parse_str("3b5e2f10-8c7d-4a96-b1e4-5f6a7b8c9d0e")
        .unwrap()
        .as_bytes();
    assert_eq!(
        NsIdDescriptorList_parse(get("A ns 2 descriptors")),
        [NsIdDescriptor::Uuid(uuid2), NsIdDescriptor::Csi(0)]
    );
    // Each port's discovery log page: itself, its subsystems (B only where linked)
    // and its referrals.
    let d = NVMF_DISCOVERY_NQN.to_string();
    let p0 = "127.0.0.240:4420".to_string();
    let p1 = "127.0.0.240:4421".to_string();
    assert_eq!(
        entries(get("discovery on 4420")),
        vec![
            (3, 1, p0.clone(), d.clone()),
            (2, 1, p0, A.to_string()),
            (1, 3, "127.0.0.241:4420".to_string(), d.clone()),
        ]
    );
    assert_eq!(
        entries(get("discovery on 4421")),
        vec![
            (3, 2, p1.clone(), d),
            (2, 2, p1.clone(), A.to_string()),
            (2, 2, p1, B.to_string())
        ]
    );
}

/// The descriptors of a Namespace Identification Descriptor list.
#[allow(non_snake_case)]
fn NsIdDescriptorList_parse(data: &[u8]) -> Vec<NsIdDescriptor> {
    nvme::identify::NsIdDescriptorList::parse(data).expect("descriptor list")
}

#[test]
fn read_only_namespace_and_configured_ids_as_the_host_sees_them() {
    let _s = serial();
    let dir = tempfile::tempdir().unwrap();
    let ro = dir.path().join("ro.img");
    let content = pattern(0, 1 << 20, 3);
    std::fs::write(&ro, &content).unwrap();
    let toml = format!(
        r#"
[[listen]]
addr = "127.0.0.247"
[[subsystems]]
nqn = "{A}"
[[subsystems.namespaces]]
nsid = 1
path = "{}"
read_only = true
nguid = "00112233-4455-6677-8899-aabbccddeeff"
uuid = "d2c4e6f8-0a1b-4c3d-8e5f-6a7b8c9d0e1f"
eui64 = "00:25:38:b1:c1:00:4a:1e"
[[subsystems.namespaces]]
nsid = 2
path = "{}"
size = "1M"
"#,
        ro.display(),
        dir.path().join("rw.img").display()
    );
    let cfg = TargetConfig::from_toml_str(&toml).unwrap();
    let t = nvmf_target::start(&cfg).expect("target starts");
    let mut host =
        SyncHost::connect(&options(SocketAddr::new(ip(247), 4420), A, 248)).expect("connect");
    let c = host.controller();
    let id = admin_data(c, Sqe::identify(0, IdentifyCns::Namespace, 1, 0));
    assert_eq!(id[99] & 1, 1, "NSATTR bit 0: write protected");
    let nguid: [u8; 16] = core::array::from_fn(|i| (i as u8) * 0x11);
    let eui64 = [0x00, 0x25, 0x38, 0xb1, 0xc1, 0x00, 0x4a, 0x1e];
    assert_eq!(&id[104..120], &nguid, "NGUID");
    assert_eq!(&id[120..128], &eui64, "EUI64");
    let uuid = *uuid::Uuid::parse_str("d2c4e6f8-0a1b-4c3d-8e5f-6a7b8c9d0e1f")
        .unwrap()
        .as_bytes();
    assert_eq!(
        NsIdDescriptorList_parse(&admin_data(
            c,
            Sqe::identify(0, IdentifyCns::NamespaceIdDescriptorList, 1, 0)
        )),
        [
            NsIdDescriptor::Eui64(eui64),
            NsIdDescriptor::Uuid(uuid),
            NsIdDescriptor::Nguid(nguid),
            NsIdDescriptor::Csi(0)
        ]
    );
    let rw = admin_data(c, Sqe::identify(0, IdentifyCns::Namespace, 2, 0));
    assert_eq!(rw[99] & 1, 0, "namespace 2 is writable");
    assert_eq!(&rw[120..128], &[0; 8], "no EUI-64 unless configured");
    // Writes and Write Zeroes are refused, reads served; the file is unchanged.
    let q = &mut host.io_queues()[0];
    let (_, r) = run(
        q,
        Sqe::write(0, 1, 0, 7, false),
        DataDir::HostToController { len: 4096 },
        &pattern(9, 4096, 9),
    );
    let e = r.expect_err("a write to a read-only namespace");
    assert_eq!(
        e.nvme_status(),
        Some(Status::generic(GenericStatus::NamespaceWriteProtected)),
        "{e}"
    );
    let (buf, r) = run(
        q,
        Sqe::read(0, 1, 0, 7, false),
        DataDir::ControllerToHost { len: 4096 },
        &[],
    );
    assert!(r.expect("read").status().is_success());
    assert!(buf.as_deref().unwrap()[..4096] == content[..4096]);
    let (_, r) = run(
        q,
        Sqe::write(0, 2, 0, 7, false),
        DataDir::HostToController { len: 4096 },
        &pattern(9, 4096, 9),
    );
    assert!(r
        .expect("a write to the writable namespace")
        .status()
        .is_success());
    host.disconnect().unwrap();
    drop(t);
    assert!(
        std::fs::read(&ro).unwrap() == content,
        "the read-only file was written"
    );
}
