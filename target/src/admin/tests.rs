//! Tests of the admin commands (every command of the table, every log page).
use super::*;
use crate::controller::ControllerKind;
use crate::fabrics::tests::{connect_data, enabled_controller, HOSTID};
use crate::fabrics::{connect, property_set, ConnectOutcome};
use crate::subsystem::tests::{file_ns, registry_with, HOST, REF_NQN};
use crate::subsystem::NamespaceEntry;
use nvme::features::AEC_NS_ATTR;
use nvme::identify::{IdentifyController, IdentifyNamespace};
use nvme::log::parse_discovery_log;
use nvme::log::{ErrorLogEntry, SmartLog};
use nvme::{FeatureId, IdentifyCns, LogPageId};
use nvme::{Property, NVMF_DISCOVERY_NQN};
use zerocopy::FromBytes;

fn run(reg: &Registry, ctrl: &Arc<Controller>, sqe: &Sqe, out: &mut [u8]) -> AdminOutcome {
    handle(reg, ctrl, sqe, out, Instant::now())
}

fn done(o: AdminOutcome) -> (u16, u32, usize) {
    match o {
        AdminOutcome::Done {
            status,
            dw0,
            data_len,
        } => (status.to_field(), dw0, data_len),
        AdminOutcome::Hold => panic!("held"),
    }
}

/// `ref` with namespace 1 = 1 GiB / 512 B and namespace 3 = 1 MiB / 4 KiB.
fn setup() -> (tempfile::TempDir, Arc<Registry>, Arc<Controller>) {
    let dir = tempfile::tempdir().unwrap();
    let ns1 = NamespaceEntry::new(1, file_ns(&dir, "ns1", 1 << 30, 512), 0, REF_NQN);
    let ns3 = NamespaceEntry::new(3, file_ns(&dir, "ns3", 1 << 20, 4096), 1, REF_NQN);
    let reg = registry_with(vec![ns1, ns3]);
    let ctrl = enabled_controller(&reg, REF_NQN);
    (dir, reg, ctrl)
}

fn discovery_controller(reg: &Registry) -> Arc<Controller> {
    let sqe = Sqe::connect(0, 0, 31, 0);
    let data = connect_data(0xFFFF, NVMF_DISCOVERY_NQN, HOST);
    let ConnectOutcome::Accepted { ctrl, .. } = connect(reg, 0, &sqe, &data, Instant::now()) else {
        panic!("refused");
    };
    property_set(
        Some(&ctrl),
        &Sqe::property_set(1, Property::Cc, 0x0046_0061),
    )
    .unwrap();
    ctrl
}

#[test]
fn directions() {
    assert_eq!(
        data_direction(&Sqe::identify(1, IdentifyCns::Controller, 0, 0)),
        DataDirection::ControllerToHost(4096)
    );
    assert_eq!(
        data_direction(&Sqe::get_log_page(1, LogPageId::Discovery, 255, 0)),
        DataDirection::ControllerToHost(1024)
    );
    assert_eq!(
        data_direction(&Sqe::get_log_page(1, LogPageId::SmartHealth, 0x1_0000, 0)),
        DataDirection::ControllerToHost(0x1_0001 * 4)
    );
    assert_eq!(
        data_direction(&Sqe::get_features(1, FeatureId::HostIdentifier)),
        DataDirection::ControllerToHost(16)
    );
    assert_eq!(
        data_direction(&Sqe::get_features(1, FeatureId::KeepAliveTimer)),
        DataDirection::None
    );
    assert_eq!(data_direction(&Sqe::keep_alive(1)), DataDirection::None);
    assert_eq!(
        data_direction(&Sqe::async_event_request(1)),
        DataDirection::None
    );
    assert_eq!(
        data_direction(&Sqe::set_features(1, FeatureId::NumberOfQueues, 0)),
        DataDirection::None
    );
    assert_eq!(
        data_direction(&Sqe::connect(1, 0, 31, 0)),
        DataDirection::HostToController(1024)
    );
}

#[test]
fn identify_controller_fields() {
    let (_d, reg, ctrl) = setup();
    let mut out = vec![0xAAu8; 4096];
    let sqe = Sqe::identify(1, IdentifyCns::Controller, 0, 0);
    assert_eq!(done(run(&reg, &ctrl, &sqe, &mut out)), (0, 0, 4096));
    let id = IdentifyController::read_from_bytes(&out).unwrap();
    assert_eq!(id.sgls.get(), 0x0010_0005);
    assert_eq!(id.ioccsz.get(), 260);
    assert_eq!(id.iorcsz.get(), 1);
    assert_eq!(id.mdts, 8);
    assert_eq!(id.oncs.get(), 0x000D, "Compare, DSM, Write Zeroes");
    assert_eq!(id.vwc, 1);
    assert_eq!(id.cntlid.get(), ctrl.cntlid);
    assert_eq!(id.subnqn(), Ok(REF_NQN));
    assert_eq!(id.sn(), Ok("a1b2c3d4e5f6"));
    assert_eq!(id.mn(), Ok("nvmf-rdma"));
    assert_eq!(id.fr(), Ok(FIRMWARE_REVISION));
    assert_eq!(id.ver.get(), 0x0001_0300);
    assert_eq!((id.sqes, id.cqes, id.kas.get()), (0x66, 0x44, 10));
    assert_eq!(
        (id.cntrltype, id.msdbd, id.icdoff.get(), id.fcatt),
        (1, 1, 0, 0)
    );
    assert_eq!((id.acl, id.aerl, id.rab), (3, 3, 6));
    assert_eq!(id.nn.get(), 3);
    assert_eq!(id.maxcmd.get(), 128);
    assert_eq!(id.ctratt.get(), 0x41, "128-bit host ID, TBKAS (as nvmet)");
    assert_eq!(
        id.oaes.get(),
        (1 << 8) | (1 << 11),
        "NS attribute, ANA change"
    );
    assert_eq!((id.lpa, id.elpe), (0x07, 127));
    // ANA as nvmet: CMIC multi-port, multi-controller, ANA reporting; every state
    // reported; 10 s transition; 128 groups; MNAN = NN.
    assert_eq!((id.cmic, id.anacap, id.anatt), (0x0B, 0x1F, 10));
    assert_eq!((id.anagrpmax.get(), id.nanagrpid.get()), (128, 128));
    assert_eq!(id.mnan.get(), 3);
    assert_eq!(
        (out[76], out[343], &out[344..352]),
        (0x0B, 0x1F, &[128, 0, 0, 0, 128, 0, 0, 0][..])
    );
    // Byte offsets of the fields Linux checks first (Base 2.x Figure 275).
    assert_eq!(&out[536..540], &[0x05, 0x00, 0x10, 0x00]);
    assert_eq!(&out[1792..1796], &[0x04, 0x01, 0x00, 0x00]);
    assert_eq!(out[77], 8);

    // A 1024-byte host buffer gets the first 1024 bytes.
    let mut short = vec![0u8; 1024];
    assert_eq!(done(run(&reg, &ctrl, &sqe, &mut short)), (0, 0, 1024));
    assert_eq!(&short[..], &out[..1024]);
}

#[test]
fn identify_namespace_of_1gib_file() {
    let (_d, reg, ctrl) = setup();
    let mut out = vec![0xAAu8; 4096];
    let sqe = Sqe::identify(1, IdentifyCns::Namespace, 1, 0);
    assert_eq!(done(run(&reg, &ctrl, &sqe, &mut out)), (0, 0, 4096));
    let id = IdentifyNamespace::read_from_bytes(&out).unwrap();
    assert_eq!(id.nsze.get(), 2_097_152);
    assert_eq!(id.ncap.get(), 2_097_152);
    assert_eq!(id.nuse.get(), 2_097_152);
    assert_eq!((id.nlbaf, id.flbas), (0, 0));
    assert_eq!(id.lbaf[0].lbads, 9);
    assert_eq!(id.dlfeat, 0x09);
    assert_eq!(
        id.nguid,
        reg.subsystem(REF_NQN).unwrap().namespace(1).unwrap().nguid
    );
    assert_eq!(&out[0..8], &2_097_152u64.to_le_bytes());
    assert_eq!(out[130], 9, "LBAF0 LBADS at byte 130");

    let sqe = Sqe::identify(1, IdentifyCns::Namespace, 3, 0);
    run(&reg, &ctrl, &sqe, &mut out);
    let id = IdentifyNamespace::read_from_bytes(&out).unwrap();
    assert_eq!((id.nsze.get(), id.lbaf[0].lbads), (256, 12));

    // Inactive NSID: zeros, success (nvmet); FFFFFFFFh: Invalid Namespace, DNR.
    let sqe = Sqe::identify(1, IdentifyCns::Namespace, 2, 0);
    assert_eq!(done(run(&reg, &ctrl, &sqe, &mut out)), (0, 0, 4096));
    assert!(out.iter().all(|&b| b == 0));
    let sqe = Sqe::identify(1, IdentifyCns::Namespace, u32::MAX, 0);
    assert_eq!(done(run(&reg, &ctrl, &sqe, &mut out)).0, 0x8016);
}

#[test]
fn active_namespace_list_and_descriptors() {
    let (_d, reg, ctrl) = setup();
    let mut out = vec![0xAAu8; 4096];
    let sqe = Sqe::identify(1, IdentifyCns::ActiveNamespaceList, 0, 0);
    assert_eq!(done(run(&reg, &ctrl, &sqe, &mut out)), (0, 0, 4096));
    assert_eq!(&out[..12], &[1, 0, 0, 0, 3, 0, 0, 0, 0, 0, 0, 0]);
    assert!(out[8..].iter().all(|&b| b == 0));
    let sqe = Sqe::identify(1, IdentifyCns::ActiveNamespaceList, 1, 0);
    run(&reg, &ctrl, &sqe, &mut out);
    assert_eq!(&out[..8], &[3, 0, 0, 0, 0, 0, 0, 0]);
    let sqe = Sqe::identify(1, IdentifyCns::ActiveNamespaceList, 0xFFFF_FFFE, 0);
    assert_eq!(done(run(&reg, &ctrl, &sqe, &mut out)).0, 0x8016);

    let ns = reg
        .subsystem(REF_NQN)
        .unwrap()
        .namespace(1)
        .unwrap()
        .clone();
    let sqe = Sqe::identify(1, IdentifyCns::NamespaceIdDescriptorList, 1, 0);
    assert_eq!(done(run(&reg, &ctrl, &sqe, &mut out)), (0, 0, 4096));
    assert_eq!(&out[0..4], &[3, 16, 0, 0], "UUID header");
    assert_eq!(&out[4..20], &ns.uuid);
    assert_eq!(&out[20..24], &[2, 16, 0, 0], "NGUID header");
    assert_eq!(&out[24..40], &ns.nguid);
    assert_eq!(&out[40..45], &[4, 1, 0, 0, 0], "CSI NVM");
    assert!(out[45..].iter().all(|&b| b == 0));
    let sqe = Sqe::identify(1, IdentifyCns::NamespaceIdDescriptorList, 2, 0);
    assert_eq!(done(run(&reg, &ctrl, &sqe, &mut out)).0, 0x8016);
    // Unknown CNS: Invalid Field, DNR.
    let mut sqe = Sqe::identify(1, IdentifyCns::Controller, 0, 0);
    sqe.set_cdw10(0x10);
    assert_eq!(done(run(&reg, &ctrl, &sqe, &mut out)).0, 0x8004);
    // CNS 06h for the NVM command set: zeros.
    let sqe = Sqe::identify(1, IdentifyCns::IoCommandSetController, 0, 0);
    assert_eq!(done(run(&reg, &ctrl, &sqe, &mut out)), (0, 0, 4096));
}

#[test]
fn get_log_page_offsets_and_lengths() {
    let (_d, reg, ctrl) = setup();
    // SMART: 512 bytes; read 8 bytes at offset 0 and 4 at offset 0.
    let mut out = vec![0xAAu8; 8];
    let sqe = Sqe::get_log_page(1, LogPageId::SmartHealth, 1, 0).with_nsid(u32::MAX);
    assert_eq!(done(run(&reg, &ctrl, &sqe, &mut out)), (0, 0, 8));
    assert_eq!(&out[..], &[0, 0x2C, 0x01, 100, 10, 0, 0, 0]);
    // Offset 4, 4 bytes.
    let mut out = vec![0xAAu8; 4];
    let sqe = Sqe::get_log_page(1, LogPageId::SmartHealth, 0, 4);
    assert_eq!(done(run(&reg, &ctrl, &sqe, &mut out)), (0, 0, 4));
    assert_eq!(&out[..], &[10, 0, 0, 0]);
    // Past the end of the log but asked: zeros; beyond it: Invalid Field.
    let mut out = vec![0xAAu8; 16];
    let sqe = Sqe::get_log_page(1, LogPageId::SmartHealth, 3, 508);
    assert_eq!(done(run(&reg, &ctrl, &sqe, &mut out)), (0, 0, 16));
    assert!(out.iter().all(|&b| b == 0));
    let sqe = Sqe::get_log_page(1, LogPageId::SmartHealth, 3, 1024);
    assert_eq!(done(run(&reg, &ctrl, &sqe, &mut out)).0, 0x8004);
    // Unaligned offset: Invalid Field.
    let sqe = Sqe::get_log_page(1, LogPageId::SmartHealth, 3, 2);
    assert_eq!(done(run(&reg, &ctrl, &sqe, &mut out)).0, 0x8004);
    // Host buffer shorter than asked: what fits.
    let mut out = vec![0u8; 100];
    let sqe = Sqe::get_log_page(1, LogPageId::CommandsSupportedEffects, 1023, 0);
    assert_eq!(done(run(&reg, &ctrl, &sqe, &mut out)), (0, 0, 100));
    assert_eq!(&out[4 * 6..4 * 6 + 4], &[1, 0, 0, 0], "Identify supported");
    let mut out = vec![0u8; 4096];
    run(&reg, &ctrl, &sqe, &mut out);
    assert_eq!(
        &out[1024 + 4..1024 + 8],
        &[3, 0, 0, 0],
        "Write: CSUPP | LBCC"
    );
    assert_eq!(&out[1024 + 8..1024 + 12], &[1, 0, 0, 0], "Read: CSUPP");
    // Firmware slot: AFI 1, FRS1.
    let mut out = vec![0u8; 512];
    let sqe = Sqe::get_log_page(1, LogPageId::FirmwareSlot, 127, 0);
    assert_eq!(done(run(&reg, &ctrl, &sqe, &mut out)), (0, 0, 512));
    assert_eq!(out[0], 1);
    assert_eq!(
        &out[8..8 + FIRMWARE_REVISION.len()],
        FIRMWARE_REVISION.as_bytes()
    );
    // Error log: zeros; Changed Namespace List after a change.
    let sqe = Sqe::get_log_page(1, LogPageId::ErrorInformation, 15, 0);
    assert_eq!(done(run(&reg, &ctrl, &sqe, &mut out)), (0, 0, 64));
    ctrl.notify_namespace_changed(3);
    let mut out = vec![0xAAu8; 4096];
    let sqe = Sqe::get_log_page(1, LogPageId::ChangedNamespaceList, 1023, 0);
    assert_eq!(done(run(&reg, &ctrl, &sqe, &mut out)), (0, 0, 4096));
    assert_eq!(&out[..8], &[3, 0, 0, 0, 0, 0, 0, 0]);
    // Discovery on an I/O controller: Invalid Log Page (SCT 1, 09h), DNR.
    let sqe = Sqe::get_log_page(1, LogPageId::Discovery, 15, 0);
    assert_eq!(done(run(&reg, &ctrl, &sqe, &mut out)).0, 0x8212);
}

#[test]
fn discovery_controller_commands() {
    let (_d, reg, _) = setup();
    let ctrl = discovery_controller(&reg);
    // Linux reads the header (1024 B) then the whole page.
    let mut out = vec![0u8; 1024];
    let sqe = Sqe::get_log_page(1, LogPageId::Discovery, 255, 0);
    assert_eq!(done(run(&reg, &ctrl, &sqe, &mut out)), (0, 0, 1024));
    let (hdr, _) = parse_discovery_log(&out).unwrap();
    assert_eq!(hdr.numrec.get(), 2);
    let mut out = vec![0u8; 3072];
    let sqe = Sqe::get_log_page(1, LogPageId::Discovery, 767, 0);
    assert_eq!(done(run(&reg, &ctrl, &sqe, &mut out)), (0, 0, 3072));
    let (_, entries) = parse_discovery_log(&out).unwrap();
    assert_eq!(entries[1].subnqn(), Ok(REF_NQN));
    // Offset 2048: the second entry.
    let mut tail = vec![0u8; 1024];
    let sqe = Sqe::get_log_page(1, LogPageId::Discovery, 255, 2048);
    assert_eq!(done(run(&reg, &ctrl, &sqe, &mut tail)), (0, 0, 1024));
    assert_eq!(&tail[..], &out[2048..]);
    // Identify: CNTRLTYPE 2, MDTS 0; other CNS refused.
    let mut out = vec![0u8; 4096];
    let sqe = Sqe::identify(1, IdentifyCns::Controller, 0, 0);
    assert_eq!(done(run(&reg, &ctrl, &sqe, &mut out)), (0, 0, 4096));
    let id = IdentifyController::read_from_bytes(&out).unwrap();
    assert_eq!((id.cntrltype, id.mdts), (2, 0));
    assert_eq!(id.subnqn(), Ok(NVMF_DISCOVERY_NQN));
    assert_eq!(id.sgls.get(), 0x0010_0005);
    let sqe = Sqe::identify(1, IdentifyCns::ActiveNamespaceList, 0, 0);
    assert_eq!(done(run(&reg, &ctrl, &sqe, &mut out)).0, 0x8004);
    // Other logs, Number of Queues, Abort: refused.
    let sqe = Sqe::get_log_page(1, LogPageId::SmartHealth, 127, 0);
    assert_eq!(done(run(&reg, &ctrl, &sqe, &mut out)).0, 0x8212);
    let sqe = Sqe::set_features(1, FeatureId::NumberOfQueues, 0);
    assert_eq!(done(run(&reg, &ctrl, &sqe, &mut out)).0, 0x8004);
    let sqe = Sqe::new(AdminOpcode::Abort.value(), 1);
    assert_eq!(done(run(&reg, &ctrl, &sqe, &mut out)).0, 0x8002);
    // Discovery change notices may be enabled; namespace notices may not.
    let sqe = Sqe::set_features(1, FeatureId::AsyncEventConfiguration, 1 << 31);
    assert_eq!(done(run(&reg, &ctrl, &sqe, &mut out)), (0, 1 << 31, 0));
    let sqe = Sqe::set_features(1, FeatureId::AsyncEventConfiguration, 1 << 8);
    assert_eq!(done(run(&reg, &ctrl, &sqe, &mut out)).0, 0x8004);
    // Keep Alive works (KATO defaulted to 120 s).
    assert_eq!(
        done(run(&reg, &ctrl, &Sqe::keep_alive(1), &mut out)),
        (0, 0, 0)
    );
}

#[test]
fn features() {
    let (_d, reg, ctrl) = setup();
    let mut out = vec![0u8; 16];
    // Linux asks for its CPU count - 1 (0's based) in both halves.
    let sqe = Sqe::set_features(1, FeatureId::NumberOfQueues, 0x0003_0003);
    assert_eq!(done(run(&reg, &ctrl, &sqe, &mut out)), (0, 0x0003_0003, 0));
    assert_eq!(ctrl.io_queues(), 4);
    let sqe = Sqe::set_features(1, FeatureId::NumberOfQueues, 0x00FF_00FF);
    assert_eq!(done(run(&reg, &ctrl, &sqe, &mut out)), (0, 0x0007_0007, 0));
    let sqe = Sqe::get_features(1, FeatureId::NumberOfQueues);
    assert_eq!(done(run(&reg, &ctrl, &sqe, &mut out)), (0, 0x0007_0007, 0));
    let sqe = Sqe::set_features(1, FeatureId::NumberOfQueues, 0xFFFF_0000);
    assert_eq!(done(run(&reg, &ctrl, &sqe, &mut out)).0, 0x8004);

    let sqe = Sqe::set_features(1, FeatureId::KeepAliveTimer, 2500);
    assert_eq!(done(run(&reg, &ctrl, &sqe, &mut out)), (0, 0, 0));
    let sqe = Sqe::get_features(1, FeatureId::KeepAliveTimer);
    assert_eq!(done(run(&reg, &ctrl, &sqe, &mut out)), (0, 3000, 0));

    let sqe = Sqe::set_features(1, FeatureId::AsyncEventConfiguration, 0x100);
    assert_eq!(done(run(&reg, &ctrl, &sqe, &mut out)), (0, 0x100, 0));
    let sqe = Sqe::get_features(1, FeatureId::AsyncEventConfiguration);
    assert_eq!(done(run(&reg, &ctrl, &sqe, &mut out)), (0, 0x100, 0));
    // Linux's 900h (frame 176): Namespace Attribute and ANA Change Notices; bit 10
    // (telemetry) is not served.
    let sqe = Sqe::set_features(1, FeatureId::AsyncEventConfiguration, 0x900);
    assert_eq!(done(run(&reg, &ctrl, &sqe, &mut out)), (0, 0x900, 0));
    let sqe = Sqe::set_features(1, FeatureId::AsyncEventConfiguration, 1 << 10);
    assert_eq!(done(run(&reg, &ctrl, &sqe, &mut out)).0, 0x8004);

    let sqe = Sqe::set_features(1, FeatureId::VolatileWriteCache, 0);
    assert_eq!(done(run(&reg, &ctrl, &sqe, &mut out)), (0, 0, 0));
    let sqe = Sqe::get_features(1, FeatureId::VolatileWriteCache);
    assert_eq!(done(run(&reg, &ctrl, &sqe, &mut out)), (0, 0, 0));
    let sqe = Sqe::set_features(1, FeatureId::VolatileWriteCache, 1);
    run(&reg, &ctrl, &sqe, &mut out);
    let sqe = Sqe::get_features(1, FeatureId::VolatileWriteCache);
    assert_eq!(done(run(&reg, &ctrl, &sqe, &mut out)), (0, 1, 0));

    // Host Identifier: 16 bytes with EXHID, else Invalid Field.
    let mut sqe = Sqe::get_features(1, FeatureId::HostIdentifier);
    assert_eq!(done(run(&reg, &ctrl, &sqe, &mut out)).0, 0x8004);
    sqe.set_cdw11(1);
    assert_eq!(done(run(&reg, &ctrl, &sqe, &mut out)), (0, 0, 16));
    assert_eq!(out, HOSTID);
    // Supported capabilities: changeable.
    let mut sqe = Sqe::get_features(1, FeatureId::KeepAliveTimer);
    sqe.set_cdw10(sqe.cdw10() | 3 << 8);
    assert_eq!(done(run(&reg, &ctrl, &sqe, &mut out)), (0, 4, 0));
    // Unsupported feature, saving: refused.
    let sqe = Sqe::set_features(1, FeatureId::Arbitration, 0);
    assert_eq!(done(run(&reg, &ctrl, &sqe, &mut out)).0, 0x8004);
    let mut sqe = Sqe::set_features(1, FeatureId::KeepAliveTimer, 1000);
    sqe.set_cdw10(sqe.cdw10() | 1 << 31);
    assert_eq!(done(run(&reg, &ctrl, &sqe, &mut out)).0, 0x821A);
}

#[test]
fn keep_alive_aer_abort_and_bad_opcodes() {
    let (_d, reg, ctrl) = setup();
    let mut out = [0u8; 0];
    let t0 = Instant::now();
    let later = t0 + std::time::Duration::from_secs(4);
    assert_eq!(
        done(handle(&reg, &ctrl, &Sqe::keep_alive(1), &mut out, later)),
        (0, 0, 0)
    );
    assert!(!ctrl.kato_expired(later + std::time::Duration::from_millis(4999)));
    assert!(ctrl.kato_expired(later + std::time::Duration::from_secs(5)));

    // AERL + 1 = 4 held, the fifth refused with SCT 1, SC 05h, DNR.
    for cid in 10..14 {
        assert_eq!(
            run(&reg, &ctrl, &Sqe::async_event_request(cid), &mut out),
            AdminOutcome::Hold
        );
    }
    assert_eq!(
        done(run(&reg, &ctrl, &Sqe::async_event_request(14), &mut out)).0,
        0x820A
    );
    ctrl.set_aen_config(AEC_NS_ATTR);
    ctrl.notify_namespace_changed(1);
    let aer = ctrl.take_aer().unwrap();
    assert_eq!((aer.cid, aer.dw0), (10, 0x0004_0002));

    assert_eq!(
        done(run(
            &reg,
            &ctrl,
            &Sqe::new(AdminOpcode::Abort.value(), 1),
            &mut out
        )),
        (0, 1, 0)
    );
    // Invalid opcodes: unknown, PCIe queue management, Fabrics on this path.
    for op in [0x03u8, 0x01, 0x80, 0xC0] {
        assert_eq!(done(run(&reg, &ctrl, &Sqe::new(op, 1), &mut out)).0, 0x8002);
    }
    assert_eq!(
        done(run(
            &reg,
            &ctrl,
            &Sqe::property_get(1, Property::Cap),
            &mut out
        ))
        .0,
        0x8002
    );
    // Keep Alive with KATO 0: Keep Alive Timeout Invalid, no DNR.
    ctrl.set_kato_ms(0, t0);
    assert_eq!(
        done(run(&reg, &ctrl, &Sqe::keep_alive(1), &mut out)).0,
        0x0034
    );
    // Disabled controller: Command Sequence Error, DNR.
    property_set(
        Some(&ctrl),
        &Sqe::property_set(1, Property::Cc, 0x0046_0060),
    )
    .unwrap();
    assert_eq!(
        done(run(&reg, &ctrl, &Sqe::keep_alive(1), &mut out)).0,
        0x8018
    );
}

/// The admin commands a Linux 6.1 host sent to nvmet after connecting
/// (linux-nvme-rdma-rxe.pcap frames 126-313: opcode, NSID, CDW10, CDW11), each of
/// which must succeed here with the data length the host asked for, the ANA log read of
/// frame 144 (8208 bytes: 128 groups and 1024 NSIDs there; Linux sizes it from
/// NANAGRPID and MNAN) included.
#[test]
fn linux_host_admin_sequence() {
    let (_d, reg, ctrl) = setup();
    let cmds: [(u8, u32, u32, u32, usize); 14] = [
        (0x06, 0, 0x1, 0, 4096),                // Identify Controller
        (0x02, 0, 0x03ff_0005, 0, 4096),        // Commands Supported and Effects
        (0x02, u32::MAX, 0x0803_000c, 0, 8208), // ANA log (frame 144)
        (0x02, u32::MAX, 0x007f_0002, 0, 512),  // SMART / Health
        (0x09, 0, 0x7, 0, 0),                   // Number of Queues: 1
        (0x09, 0, 0xb, 0x100, 0),               // AEC: namespace attribute notices
        (0x06, 0, 0x6, 0, 4096),                // CNS 06h, CSI NVM
        (0x06, 0, 0x2, 0, 4096),                // Active namespace list
        (0x06, 1, 0x3, 0, 4096),                // NS descriptors
        (0x06, 1, 0x0, 0, 4096),                // Identify Namespace
        (0x06, 1, 0x0, 0, 4096),
        (0x06, 1, 0x3, 0, 4096),
        (0x06, 0, 0x1, 0, 4096),
        (0x06, 1, 0x0, 0, 4096),
    ];
    for (i, &(opc, nsid, cdw10, cdw11, len)) in cmds.iter().enumerate() {
        let mut sqe = Sqe::new(opc, i as u16).with_nsid(nsid);
        sqe.set_cdw10(cdw10);
        sqe.set_cdw11(cdw11);
        let dir = data_direction(&sqe);
        let n = match dir {
            DataDirection::ControllerToHost(n) => n,
            _ => 0,
        };
        assert_eq!(n, len, "command {i}");
        let mut out = vec![0u8; n];
        let (status, _, data_len) = done(run(&reg, &ctrl, &sqe, &mut out));
        assert_eq!((status, data_len), (0, len), "command {i}");
    }
    assert_eq!(ctrl.io_queues(), 1);
    assert_eq!(
        run(&reg, &ctrl, &Sqe::async_event_request(0x1f), &mut []),
        AdminOutcome::Hold
    );
}

/// `nvme discover` as in linux-nvme-rdma-rxe.pcap frames 7-83, from Connect to the
/// shutdown, with the values nvmet answered.
#[test]
fn linux_discover_sequence() {
    use crate::fabrics::property_get;
    use nvme::{PropertyGetCommand, PropertySize};
    let reg = registry_with(vec![]);
    let data = connect_data(0xFFFF, NVMF_DISCOVERY_NQN, HOST);
    let out = connect(&reg, 0, &Sqe::connect(0, 0, 0x1f, 0), &data, Instant::now());
    let ConnectOutcome::Accepted { ctrl, dw0 } = out else {
        panic!("refused")
    };
    assert_eq!(dw0, u32::from(ctrl.cntlid));
    let get = |ofst: u32, size| {
        let sqe = PropertyGetCommand::new(1, ofst, size).to_sqe();
        property_get(Some(&ctrl), &sqe)
    };
    let set = |v: u64| property_set(Some(&ctrl), &Sqe::property_set(1, Property::Cc, v));
    assert_eq!(get(0, PropertySize::EightBytes), Ok(0x0000_0820_0f00_007f));
    set(0x0046_0060).unwrap();
    assert_eq!(get(0x14, PropertySize::FourBytes), Ok(0x0046_0060));
    set(0x0046_0061).unwrap();
    assert_eq!(get(0x1c, PropertySize::FourBytes), Ok(1));
    assert_eq!(get(0x08, PropertySize::FourBytes), Ok(0x0001_0300));
    let mut buf = vec![0u8; 4096];
    let id = Sqe::identify(0x16, IdentifyCns::Controller, 0, 0);
    assert_eq!(done(run(&reg, &ctrl, &id, &mut buf)), (0, 0, 4096));
    let aec = Sqe::set_features(0x17, FeatureId::AsyncEventConfiguration, 0x8000_0000);
    assert_eq!(done(run(&reg, &ctrl, &aec, &mut [])).0, 0);
    let aer = Sqe::async_event_request(0x1f);
    assert_eq!(run(&reg, &ctrl, &aer, &mut []), AdminOutcome::Hold);
    for (cdw10, len) in [(0x00ff_8070u32, 1024usize), (0x02ff_0070, 3072)] {
        let mut sqe = Sqe::new(AdminOpcode::GetLogPage.value(), 0x19);
        sqe.set_cdw10(cdw10);
        assert_eq!(data_direction(&sqe), DataDirection::ControllerToHost(len));
        let mut buf = vec![0u8; len];
        assert_eq!(done(run(&reg, &ctrl, &sqe, &mut buf)), (0, 0, len));
    }
    set(0x0046_4061).unwrap();
    assert_eq!(get(0x1c, PropertySize::FourBytes), Ok(8));
}

#[test]
fn mdts_values() {
    assert_eq!(mdts(1 << 20), 8);
    assert_eq!(mdts(128 << 10), 5);
    assert_eq!(mdts(0), 0);
    assert_eq!(mdts(4096), 0);
    assert_eq!(mdts(3 << 20), 9);
}

/// Get Log Page with RAE (CDW10 bit 15) set.
fn retaining(mut sqe: Sqe) -> Sqe {
    sqe.set_cdw10(sqe.cdw10() | 1 << 15);
    sqe
}

#[test]
fn smart_log_counts_what_the_namespaces_served() {
    let (_d, reg, ctrl) = setup();
    let sub = reg.subsystem(REF_NQN).unwrap();
    let ns1 = &sub.namespace(1).unwrap().stats;
    let ns3 = &sub.namespace(3).unwrap().stats;
    // 1000 reads of 4 KiB (8000 units of 512 bytes = 8 data units), 3 writes of 1 MiB
    // (6144 units: 7 rounded up) on namespace 1; one 512-byte read on namespace 3.
    for _ in 0..1000 {
        ns1.count_read(0, 4096);
    }
    for g in 0..3 {
        ns1.count_write(g, 1 << 20);
    }
    ns3.count_read(1, 512);
    ctrl.record_error(1, &Sqe::read(4, 1, 0, 0, false), invalid_field());
    let mut out = vec![0u8; 512];
    let all = Sqe::get_log_page(1, LogPageId::SmartHealth, 127, 0).with_nsid(u32::MAX);
    assert_eq!(done(run(&reg, &ctrl, &all, &mut out)), (0, 0, 512));
    let log = SmartLog::read_from_bytes(&out).unwrap();
    assert_eq!(
        log.data_units_read.get(),
        9,
        "8 + 1 (namespace 3's unit rounds up)"
    );
    assert_eq!(log.data_units_written.get(), 7);
    assert_eq!(log.host_read_commands.get(), 1001);
    assert_eq!(log.host_write_commands.get(), 3);
    assert_eq!(log.num_error_log_entries.get(), 1);
    assert_eq!(log.power_on_hours.get(), 0, "the target started just now");
    assert_eq!(log.composite_temperature.get(), SMART_TEMPERATURE_K);
    // Byte offsets of Data Units Read and Host Read Commands (Base 2.x Figure 207).
    assert_eq!(&out[32..34], &[9, 0]);
    assert_eq!(&out[64..66], &1001u16.to_le_bytes());
    // Per namespace (LPA bit 0).
    let one = Sqe::get_log_page(1, LogPageId::SmartHealth, 127, 0).with_nsid(3);
    run(&reg, &ctrl, &one, &mut out);
    let log = SmartLog::read_from_bytes(&out).unwrap();
    assert_eq!(
        (log.host_read_commands.get(), log.data_units_read.get()),
        (1, 1)
    );
    // Power On Hours from the target's start: an hour and a half later, 1.
    let later = reg.started + std::time::Duration::from_secs(5400);
    handle(&reg, &ctrl, &all, &mut out, later);
    assert_eq!(
        SmartLog::read_from_bytes(&out)
            .unwrap()
            .power_on_hours
            .get(),
        1
    );
    let none = Sqe::get_log_page(1, LogPageId::SmartHealth, 127, 0).with_nsid(2);
    assert_eq!(done(run(&reg, &ctrl, &none, &mut out)).0, 0x8016);
}

#[test]
fn error_log_has_an_entry_per_failed_command_newest_first() {
    let (_d, reg, ctrl) = setup();
    let lba = Status::generic(GenericStatus::LbaOutOfRange).with_dnr();
    ctrl.record_error(1, &Sqe::write(0x21, 1, 1 << 40, 0, false), lba);
    ctrl.record_error(0, &Sqe::new(0xC5, 0x22), invalid_opcode());
    // Every entry (ELPE + 1 = 128 of 64 bytes), as nvme-cli asks.
    let mut out = vec![0xAAu8; 128 * 64];
    let sqe = Sqe::get_log_page(1, LogPageId::ErrorInformation, 128 * 16 - 1, 0);
    assert_eq!(done(run(&reg, &ctrl, &sqe, &mut out)), (0, 0, 8192));
    let e0 = ErrorLogEntry::read_from_bytes(&out[..64]).unwrap();
    let e1 = ErrorLogEntry::read_from_bytes(&out[64..128]).unwrap();
    assert_eq!(
        (e0.error_count.get(), e0.cid.get(), e0.sqid.get()),
        (2, 0x22, 0)
    );
    assert_eq!(e0.status_field.get(), invalid_opcode().to_field());
    assert_eq!(
        (e1.error_count.get(), e1.cid.get(), e1.sqid.get()),
        (1, 0x21, 1)
    );
    assert_eq!((e1.lba.get(), e1.nsid.get()), (1 << 40, 1));
    assert_eq!(e1.parameter_error_location.get(), 40, "SLBA");
    assert!(out[128..].iter().all(|&b| b == 0));
    // LPO 64: the second entry first.
    let mut tail = vec![0u8; 64];
    let sqe = Sqe::get_log_page(1, LogPageId::ErrorInformation, 15, 64);
    assert_eq!(done(run(&reg, &ctrl, &sqe, &mut tail)), (0, 0, 64));
    assert_eq!(&tail[..], &out[64..128]);
}

#[test]
fn rae_keeps_the_changed_namespace_list_and_its_event() {
    let (_d, reg, ctrl) = setup();
    ctrl.set_aen_config(AEC_NS_ATTR);
    assert_eq!(
        run(&reg, &ctrl, &Sqe::async_event_request(7), &mut []),
        AdminOutcome::Hold
    );
    ctrl.notify_namespace_changed(3);
    assert_eq!(ctrl.take_aer().map(|a| a.cid), Some(7));
    let mut out = vec![0u8; 4096];
    let list = Sqe::get_log_page(1, LogPageId::ChangedNamespaceList, 1023, 0);
    // RAE set: the list stays and the event stays masked.
    run(&reg, &ctrl, &retaining(list), &mut out);
    assert_eq!(&out[..8], &[3, 0, 0, 0, 0, 0, 0, 0]);
    ctrl.notify_namespace_changed(1);
    run(&reg, &ctrl, &Sqe::async_event_request(8), &mut []);
    assert_eq!(ctrl.take_aer(), None, "masked until read with RAE cleared");
    // RAE cleared: the list is read and cleared, and the next change is reported.
    run(&reg, &ctrl, &list, &mut out);
    assert_eq!(&out[..12], &[1, 0, 0, 0, 3, 0, 0, 0, 0, 0, 0, 0]);
    run(&reg, &ctrl, &list, &mut out);
    assert!(out.iter().all(|&b| b == 0));
    ctrl.notify_namespace_changed(1);
    assert_eq!(ctrl.take_aer().map(|a| a.cid), Some(8));
}

#[test]
fn supported_logs_and_effects_come_from_the_tables() {
    let (_d, reg, ctrl) = setup();
    let mut out = vec![0u8; 1024];
    let sqe = Sqe::get_log_page(1, LogPageId::SupportedLogPages, 255, 0);
    assert_eq!(done(run(&reg, &ctrl, &sqe, &mut out)), (0, 0, 1024));
    let lsupp = |out: &[u8], lid: usize| out[lid * 4] & 1 == 1;
    for lid in [0, 1, 2, 3, 4, 5] {
        assert!(lsupp(&out, lid), "LID {lid:#x}");
    }
    assert!(!lsupp(&out, 0x70) && lsupp(&out, 0x0C));
    let d = discovery_controller(&reg);
    run(&reg, &d, &sqe, &mut out);
    assert!(lsupp(&out, 0x70) && lsupp(&out, 0) && !lsupp(&out, 2));
    // Every admin command of the table, and Compare, in the effects log.
    let mut out = vec![0u8; 4096];
    let sqe = Sqe::get_log_page(1, LogPageId::CommandsSupportedEffects, 1023, 0);
    run(&reg, &ctrl, &sqe, &mut out);
    for c in COMMANDS {
        let at = usize::from(c.opcode.value()) * 4;
        assert_eq!(out[at] & 1, 1, "{:?}", c.opcode);
    }
    assert_eq!(
        &out[1024 + 5 * 4..1024 + 6 * 4],
        &[1, 0, 0, 0],
        "Compare: CSUPP"
    );
    assert_eq!(ctrl.kind, ControllerKind::Io);
}

/// `setup` with namespace 3 in ANA group 2, on two ports: port 1 (index 0) with group
/// 2 non-optimized, port 2 (index 1) with group 1 inaccessible.
fn ana_setup() -> (tempfile::TempDir, Arc<Registry>, Arc<Controller>) {
    use crate::subsystem::{Limits, PortInfo};
    use nvme::ana::AnaState;
    let dir = tempfile::tempdir().unwrap();
    let ns1 = NamespaceEntry::new(1, file_ns(&dir, "ns1", 1 << 20, 512), 0, REF_NQN);
    let mut ns3 = NamespaceEntry::new(3, file_ns(&dir, "ns3", 1 << 20, 4096), 1, REF_NQN);
    ns3.ana_grpid = 2;
    let sub = crate::subsystem::Subsystem::new(REF_NQN.into(), None, true, vec![], vec![ns1, ns3]);
    let ip = "192.168.77.10".parse().unwrap();
    let ports = vec![
        PortInfo {
            ana_groups: vec![(2, AnaState::NonOptimized)],
            ..PortInfo::new(ip, 4420)
        },
        PortInfo {
            portid: 2,
            ana_groups: vec![(1, AnaState::Inaccessible)],
            ..PortInfo::new(ip, 4421)
        },
    ];
    let reg = Registry::with_ports(vec![Arc::new(sub)], ports, Limits::default(), true);
    let ctrl = enabled_controller(&reg, REF_NQN);
    (dir, reg, ctrl)
}

#[test]
fn ana_log_page_per_port_with_rgo_lpo_and_rae() {
    use nvme::ana::{AnaLog, AnaState};
    let (_d, reg, ctrl) = ana_setup();
    assert_eq!(ctrl.port, 0);
    let mut out = vec![0xAAu8; 4096];
    let sqe = Sqe::get_log_page(1, LogPageId::AnaLog, 1023, 0).with_nsid(u32::MAX);
    assert_eq!(done(run(&reg, &ctrl, &sqe, &mut out)), (0, 0, 4096));
    let log = AnaLog::decode(&out).unwrap();
    let groups: Vec<_> = log
        .groups
        .iter()
        .map(|g| (g.grpid, g.state, g.nsids.clone()))
        .collect();
    assert_eq!(
        groups,
        vec![
            (1, AnaState::Optimized, vec![1]),
            (2, AnaState::NonOptimized, vec![3])
        ]
    );
    // 16 + 2 x (32 + 4) bytes of log, zeros after.
    assert!(out[88..].iter().all(|&b| b == 0));
    // RGO (LSP bit 0): descriptors only, NNSID 0.
    let mut rgo = sqe;
    rgo.set_cdw10(rgo.cdw10() | (1 << 8));
    run(&reg, &ctrl, &rgo, &mut out);
    let log = AnaLog::decode(&out).unwrap();
    assert_eq!(log.groups.len(), 2);
    assert!(log.groups.iter().all(|g| g.nsids.is_empty()));
    assert!(out[80..].iter().all(|&b| b == 0));
    // LPO 16: the first descriptor first.
    let mut lpo = sqe;
    lpo.set_cdw12(16);
    run(&reg, &ctrl, &lpo, &mut out);
    assert_eq!(&out[..4], &[1, 0, 0, 0]);
    // The same controller on port 2 sees that port's states.
    let on2 = Arc::new(
        Controller::new(
            9,
            ctrl.subsys.clone(),
            HOST.into(),
            [0; 16],
            0,
            &reg.limits,
            Instant::now(),
        )
        .on_port(1),
    );
    let log = AnaLog::decode(&on2_log(&reg, &on2)).unwrap();
    assert_eq!(log.state_of_nsid(1), Some(AnaState::Inaccessible));
    assert_eq!(log.state_of_nsid(3), Some(AnaState::Optimized));
}

fn on2_log(reg: &Registry, ctrl: &Arc<Controller>) -> Vec<u8> {
    reg.ana.log(ctrl.port, &ctrl.subsys, false).encode(false)
}

#[test]
fn ana_change_event_is_gated_by_aec_and_masked_until_the_log_is_read() {
    use nvme::ana::ANA_CHANGE_AEN_DW0;
    use nvme::features::AEC_ANA_CHANGE;
    let (_d, reg, ctrl) = ana_setup();
    assert_eq!(
        run(&reg, &ctrl, &Sqe::async_event_request(5), &mut []),
        AdminOutcome::Hold
    );
    // Not enabled: no event.
    assert!(!ctrl.post_event_if_enabled(ANA_CHANGE_AEN_DW0, AEC_ANA_CHANGE));
    assert_eq!(ctrl.take_aer(), None);
    ctrl.set_aen_config(AEC_NS_ATTR | AEC_ANA_CHANGE);
    assert!(ctrl.post_event_if_enabled(ANA_CHANGE_AEN_DW0, AEC_ANA_CHANGE));
    assert_eq!(
        ctrl.take_aer().map(|a| (a.cid, a.dw0)),
        Some((5, 0x000C_0302))
    );
    // Masked until the ANA log is read with RAE cleared; RAE set keeps it masked.
    run(&reg, &ctrl, &Sqe::async_event_request(6), &mut []);
    ctrl.post_event_if_enabled(ANA_CHANGE_AEN_DW0, AEC_ANA_CHANGE);
    assert_eq!(ctrl.take_aer(), None);
    let mut out = vec![0u8; 512];
    let sqe = Sqe::get_log_page(1, LogPageId::AnaLog, 127, 0).with_nsid(u32::MAX);
    run(&reg, &ctrl, &retaining(sqe), &mut out);
    ctrl.post_event_if_enabled(ANA_CHANGE_AEN_DW0, AEC_ANA_CHANGE);
    assert_eq!(ctrl.take_aer(), None);
    run(&reg, &ctrl, &sqe, &mut out);
    ctrl.post_event_if_enabled(ANA_CHANGE_AEN_DW0, AEC_ANA_CHANGE);
    assert_eq!(
        ctrl.take_aer().map(|a| (a.cid, a.dw0)),
        Some((6, 0x000C_0302))
    );
}

#[test]
fn identify_namespace_reports_its_ana_group() {
    let (_d, reg, ctrl) = ana_setup();
    let mut out = vec![0u8; 4096];
    for (nsid, grpid) in [(1u32, 1u32), (3, 2)] {
        let sqe = Sqe::identify(1, IdentifyCns::Namespace, nsid, 0);
        run(&reg, &ctrl, &sqe, &mut out);
        let id = IdentifyNamespace::read_from_bytes(&out).unwrap();
        assert_eq!(id.anagrpid.get(), grpid);
        assert_eq!(&out[92..96], &grpid.to_le_bytes());
    }
}

#[test]
fn io_to_a_group_that_is_not_accessible_gets_the_ana_status() {
    use crate::capsule::{classify, Kind};
    use nvme::ana::AnaState;
    let (_d, reg, ctrl) = ana_setup();
    let read = |nsid| Sqe::read(7, nsid, 0, 0, false);
    let status = |nsid| {
        classify(&read(nsid), 1, Some(&ctrl), true, 1 << 20, &reg.ana)
            .map(|(k, _)| matches!(k, Kind::Io(_)))
            .map_err(|s| s.to_field())
    };
    // Port 1: group 1 optimized, group 2 non-optimized: both served.
    assert_eq!(status(1), Ok(true));
    assert_eq!(status(3), Ok(true));
    // SCT 3h path related, SC 02h inaccessible / 01h persistent loss / 03h
    // transition; no DNR, so a multipath host fails over (Linux: 302h, 301h, 303h).
    for (state, field) in [
        (AnaState::Inaccessible, 0x0302 << 1),
        (AnaState::PersistentLoss, 0x0301 << 1),
        (AnaState::Change, 0x0303 << 1),
    ] {
        assert_eq!(reg.ana.set(1, 2, state).map(|(i, _)| i), Ok(0));
        assert_eq!(status(3), Err(field), "{state}");
        assert_eq!(status(1), Ok(true), "group 1 unchanged");
    }
    // Admin commands still run on that controller.
    let mut out = vec![0u8; 4096];
    let sqe = Sqe::identify(1, IdentifyCns::Namespace, 3, 0);
    assert_eq!(done(run(&reg, &ctrl, &sqe, &mut out)).0, 0);
    reg.ana.set(1, 2, AnaState::Optimized).unwrap();
    assert_eq!(status(3), Ok(true));
}
