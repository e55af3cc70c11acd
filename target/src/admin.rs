//! Admin commands of the target (NVMe Base 2.x §5), modelled on Linux
//! `drivers/nvme/target/admin-cmd.c` and `discovery.c`: Identify, Get Log Page,
//! Set/Get Features, Keep Alive, Asynchronous Event Request and Abort, for I/O and
//! discovery controllers. Pure logic: the caller moves the data (RDMA WRITE of `out`)
//! and sends the completion.

use std::sync::Arc;
use std::time::Instant;

use nvme::features::{
    FeatureSelect, NumberOfQueues, VolatileWriteCache, AEC_DISCOVERY_CHANGE, AEC_NS_ATTR,
    AEC_SMART_MASK,
};
use nvme::identify::{
    IdentifyController, IdentifyNamespace, NamespaceList, NsIdDescriptor, NsIdDescriptorList,
    PowerStateDescriptor, CNTRLTYPE_DISCOVERY, CNTRLTYPE_IO, CTRATT_HOST_ID_128,
    IDENTIFY_DATA_SIZE, OAES_DISCOVERY_CHANGE, OAES_NS_ATTR, ONCS_DSM, ONCS_WRITE_ZEROES,
    SGLS_KEYED, SGLS_OFFSET, SGLS_SUPPORTED,
};
use nvme::log::SmartLog;
use nvme::status::{CommandSpecificStatus, GenericStatus, Status};
use nvme::{
    AdminOpcode, FabricsCommandType, FeatureId, IdentifyCns, LogPageId, NvmOpcode, Sqe,
    FABRICS_OPCODE,
};
use zerocopy::byteorder::little_endian::{U16, U32};
use zerocopy::{FromZeros, Immutable, IntoBytes, KnownLayout};

use crate::controller::{Controller, ControllerKind, MAX_AER};
use crate::discovery::discovery_log_page;
use crate::fabrics::{CONNECT_DATA_LEN, VERSION};
use crate::subsystem::{Limits, NamespaceEntry, Registry};

/// Which data a command moves and how many bytes the command itself asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DataDirection {
    /// No data.
    None,
    /// The controller returns this many bytes (RDMA WRITE to the host).
    ControllerToHost(usize),
    /// The host sends this many bytes (in-capsule or RDMA READ).
    HostToController(usize),
}

/// What became of an admin command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AdminOutcome {
    /// Complete now with `status` and DW0 `dw0`, after sending the first `data_len`
    /// bytes of the output buffer to the host.
    Done {
        /// Completion status.
        status: Status,
        /// Completion DW0 (command specific).
        dw0: u32,
        /// Controller-to-host bytes written to the output buffer.
        data_len: usize,
    },
    /// An Asynchronous Event Request the controller holds until an event occurs:
    /// complete it later from [`Controller::take_aer`] (with its CID and DW0).
    Hold,
}

impl AdminOutcome {
    fn status(status: Status) -> Self {
        AdminOutcome::Done {
            status,
            dw0: 0,
            data_len: 0,
        }
    }

    fn ok(dw0: u32) -> Self {
        AdminOutcome::Done {
            status: Status::SUCCESS,
            dw0,
            data_len: 0,
        }
    }

    fn data(data_len: usize) -> Self {
        AdminOutcome::Done {
            status: Status::SUCCESS,
            dw0: 0,
            data_len,
        }
    }
}

/// Firmware Revision (Identify Controller FR): this crate's version.
pub const FIRMWARE_REVISION: &str = env!("CARGO_PKG_VERSION");

/// Keep Alive Support granularity (Identify Controller KAS) in 100 ms units: 10 = 1 s,
/// as nvmet (KATO is kept in whole seconds).
pub const KAS: u16 = 10;

/// Composite temperature the SMART / Health log reports, kelvin (about 27 °C).
pub const SMART_TEMPERATURE_K: u16 = 300;

/// Identify Controller CMIC: bit 1, the subsystem may hold two or more controllers
/// (the dynamic model gives every association its own).
pub const CMIC_MULTI_CONTROLLER: u8 = 1 << 1;

/// Identify Controller LPA: bit 1 Commands Supported and Effects log, bit 2 extended
/// data for Get Log Page (NUMDU, LPO).
pub const LPA: u8 = (1 << 1) | (1 << 2);

/// Identify Namespace DLFEAT: deallocated blocks read as zeroes (bits 2:0 = 001b) and
/// Write Zeroes may deallocate (bit 3).
pub const DLFEAT: u8 = 0x09;

/// Identify Namespace NMIC bit 0: the namespace may be reached through several
/// controllers.
pub const NMIC_SHARED: u8 = 1;

/// Error Information log entries kept (Identify Controller ELPE + 1); reported as zeros.
pub const ERROR_LOG_ENTRIES: usize = 1;

fn generic(code: GenericStatus) -> Status {
    Status::generic(code).with_dnr()
}

fn invalid_field() -> Status {
    generic(GenericStatus::InvalidField)
}

fn invalid_opcode() -> Status {
    generic(GenericStatus::InvalidOpcode)
}

fn invalid_log_page() -> Status {
    Status::command_specific(CommandSpecificStatus::InvalidLogPage).with_dnr()
}

/// The data a command on the admin queue moves, from its opcode and dwords: Identify
/// 4096 bytes, Get Log Page (NUMD + 1) x 4, Get Features Host Identifier 16, Connect
/// 1024 host-to-controller; everything else none.
pub fn data_direction(sqe: &Sqe) -> DataDirection {
    match AdminOpcode::from_value(sqe.opcode()) {
        Some(AdminOpcode::Identify) => DataDirection::ControllerToHost(IDENTIFY_DATA_SIZE),
        Some(AdminOpcode::GetLogPage) => DataDirection::ControllerToHost(
            usize::try_from(sqe.log_page_len()).unwrap_or(usize::MAX),
        ),
        Some(AdminOpcode::GetFeatures)
            if FeatureId::from_value(sqe.fid()) == Some(FeatureId::HostIdentifier) =>
        {
            DataDirection::ControllerToHost(16)
        }
        Some(AdminOpcode::FabricsCommand)
            if sqe.fctype() == Some(FabricsCommandType::Connect.value()) =>
        {
            DataDirection::HostToController(CONNECT_DATA_LEN)
        }
        _ => DataDirection::None,
    }
}

/// Copies `src` into `out`, as much as fits in `min(out.len(), want)` bytes, and fills
/// the rest of that length with zeros; returns the length.
fn copy_out(out: &mut [u8], src: &[u8], want: usize) -> usize {
    let n = out.len().min(want);
    let k = src.len().min(n);
    out[..k].copy_from_slice(&src[..k]);
    out[k..n].fill(0);
    n
}

/// Executes admin command `sqe` of controller `ctrl` at `now`. Controller-to-host data
/// goes to `out`, which is the host's buffer length (a shorter buffer gets the first
/// bytes of the structure).
///
/// Fabrics commands (Connect, Property Get/Set) are handled by [`crate::fabrics`];
/// here they answer Invalid Command Opcode. Every other command needs the controller
/// enabled (CC.EN and CSTS.RDY), else Command Sequence Error. A discovery controller
/// accepts only Identify (CNS 01h), Get Log Page (70h), Set/Get Features (Keep Alive
/// Timer, Asynchronous Event Configuration), Keep Alive and Asynchronous Event
/// Request. All error statuses carry DNR except Keep Alive Timeout Invalid.
pub fn handle(
    reg: &Registry,
    ctrl: &Arc<Controller>,
    sqe: &Sqe,
    out: &mut [u8],
    now: Instant,
) -> AdminOutcome {
    if sqe.opcode() == FABRICS_OPCODE {
        return AdminOutcome::status(invalid_opcode());
    }
    if let Err(status) = ctrl.check_ready() {
        return AdminOutcome::status(status);
    }
    let discovery = ctrl.kind == ControllerKind::Discovery;
    match AdminOpcode::from_value(sqe.opcode()) {
        Some(AdminOpcode::Identify) => identify(reg, ctrl, sqe, out),
        Some(AdminOpcode::GetLogPage) => get_log_page(reg, ctrl, sqe, out),
        Some(AdminOpcode::SetFeatures) => set_features(ctrl, sqe, now),
        Some(AdminOpcode::GetFeatures) => get_features(ctrl, sqe, out),
        Some(AdminOpcode::KeepAlive) => {
            if ctrl.kato_ms() == 0 {
                // nvmet: no DNR.
                return AdminOutcome::status(Status::generic(
                    GenericStatus::KeepAliveTimeoutInvalid,
                ));
            }
            ctrl.keep_alive(now);
            AdminOutcome::ok(0)
        }
        Some(AdminOpcode::AsyncEventRequest) => match ctrl.push_aer(sqe.cid()) {
            Ok(Some(dw0)) => AdminOutcome::ok(dw0),
            Ok(None) => AdminOutcome::Hold,
            Err(status) => AdminOutcome::status(status),
        },
        // Nothing is ever aborted: DW0 bit 0 = 1 "command not aborted".
        Some(AdminOpcode::Abort) if !discovery => AdminOutcome::ok(1),
        _ => AdminOutcome::status(invalid_opcode()),
    }
}

// ----- Identify (NVMe Base 2.x §5.17) -----

fn identify(reg: &Registry, ctrl: &Controller, sqe: &Sqe, out: &mut [u8]) -> AdminOutcome {
    let want = IDENTIFY_DATA_SIZE;
    let cns = IdentifyCns::from_value(sqe.cns());
    if ctrl.kind == ControllerKind::Discovery && cns != Some(IdentifyCns::Controller) {
        return AdminOutcome::status(invalid_field());
    }
    let subsys = &ctrl.subsys;
    match cns {
        Some(IdentifyCns::Controller) => {
            let id = identify_controller(reg, ctrl);
            AdminOutcome::data(copy_out(out, id.as_bytes(), want))
        }
        Some(IdentifyCns::Namespace) => {
            let nsid = sqe.nsid();
            if nsid == u32::MAX {
                return AdminOutcome::status(generic(GenericStatus::InvalidNamespaceOrFormat));
            }
            // As nvmet: an inactive NSID gets an all-zero structure.
            match subsys.namespace(nsid) {
                Some(ns) => {
                    let id = identify_namespace(ns);
                    AdminOutcome::data(copy_out(out, id.as_bytes(), want))
                }
                None => AdminOutcome::data(copy_out(out, &[], want)),
            }
        }
        Some(IdentifyCns::ActiveNamespaceList) => {
            let min = sqe.nsid();
            if min >= 0xFFFF_FFFE {
                return AdminOutcome::status(generic(GenericStatus::InvalidNamespaceOrFormat));
            }
            let ids = subsys
                .namespaces
                .iter()
                .map(|n| n.nsid)
                .filter(|&id| id > min);
            let list = NamespaceList::from_ids(ids);
            AdminOutcome::data(copy_out(out, list.as_bytes(), want))
        }
        Some(IdentifyCns::NamespaceIdDescriptorList) => match subsys.namespace(sqe.nsid()) {
            Some(ns) => {
                let list = namespace_descriptors(ns);
                AdminOutcome::data(copy_out(out, list.as_bytes(), want))
            }
            None => AdminOutcome::status(generic(GenericStatus::InvalidNamespaceOrFormat)),
        },
        // I/O Command Set specific Identify Controller for the NVM command set: all
        // limits 0 = none (what newer nvmet answers; Linux hosts ask for it).
        Some(IdentifyCns::IoCommandSetController) if sqe.csi() == 0 => {
            AdminOutcome::data(copy_out(out, &[], want))
        }
        _ => AdminOutcome::status(invalid_field()),
    }
}

/// MDTS for a maximum transfer of `bytes` with 4 KiB pages: floor(log2(bytes / 4096));
/// 1 MiB gives 8. 0 means "no limit" on the wire, which is also what `bytes` of 0 or
/// of less than 8 KiB yield (MDTS cannot express a one-page limit).
pub fn mdts(bytes: u32) -> u8 {
    (bytes / 4096).checked_ilog2().unwrap_or(0) as u8
}

/// Keeps `s` within `max` printable ASCII characters for an ASCII field.
fn ascii_field(s: &str, max: usize) -> String {
    s.chars()
        .map(|c| if (' '..='~').contains(&c) { c } else { '?' })
        .take(max)
        .collect()
}

/// SGLS: SGLs supported, keyed SGL data blocks, and with in-capsule data the offset
/// form of the SGL data block (bit 20): 00100005h for nvmet-rdma's 4 KiB.
fn sgls(limits: &Limits) -> u32 {
    let mut v = SGLS_SUPPORTED | SGLS_KEYED;
    if limits.in_capsule_bytes > 0 {
        v |= SGLS_OFFSET;
    }
    v
}

/// The Identify Controller structure of `ctrl` (NVMe Base 2.x §5.17.2.1), with the
/// values nvmet reports unless noted: VID/SSVID 0, SN, MN, FR, RAB 6, CMIC 02h,
/// MDTS from the limits, CNTLID, VER 1.3, OAES Namespace Attribute Notices (discovery:
/// Discovery Log Change), CTRATT 128-bit host ID, CNTRLTYPE, ACL 3, AERL 3, FRMW 03h,
/// LPA 06h, KAS 10, SQES 66h, CQES 44h, MAXCMD, NN = largest NSID, ONCS DSM + Write
/// Zeroes, VWC 1, SGLS, SUBNQN, IOCCSZ = (64 + in-capsule bytes) / 16, IORCSZ 1,
/// ICDOFF 0, FCATT 0 (dynamic), MSDBD 1. A discovery controller reports MDTS 0 and
/// no I/O fields, as nvmet's discovery Identify.
pub fn identify_controller(reg: &Registry, ctrl: &Controller) -> IdentifyController {
    let limits = &reg.limits;
    let subsys = &ctrl.subsys;
    let mut id = IdentifyController::zeroed();
    // The helpers refuse only over-long or non-ASCII text, which ascii_field prevents.
    let _ = id.set_sn(&ascii_field(&subsys.serial, 20));
    let _ = id.set_mn(&ascii_field(&subsys.model, 40));
    let _ = id.set_fr(&ascii_field(FIRMWARE_REVISION, 8));
    let _ = id.set_subnqn(&subsys.nqn);
    id.cntlid = U16::new(ctrl.cntlid);
    id.ver = U32::new(VERSION.0);
    id.maxcmd = U16::new(limits.max_cmd);
    id.sgls = U32::new(sgls(limits));
    id.kas = U16::new(KAS);
    id.aerl = (MAX_AER - 1) as u8;
    if ctrl.kind == ControllerKind::Discovery {
        id.cntrltype = CNTRLTYPE_DISCOVERY;
        id.lpa = 1 << 2;
        id.oaes = U32::new(OAES_DISCOVERY_CHANGE);
        return id;
    }
    id.cntrltype = CNTRLTYPE_IO;
    id.rab = 6;
    id.cmic = CMIC_MULTI_CONTROLLER;
    id.mdts = mdts(limits.mdts_bytes);
    id.oaes = U32::new(OAES_NS_ATTR);
    id.ctratt = U32::new(CTRATT_HOST_ID_128);
    id.acl = 3;
    id.frmw = 0x03;
    id.lpa = LPA;
    id.elpe = (ERROR_LOG_ENTRIES - 1) as u8;
    id.sqes = 0x66;
    id.cqes = 0x44;
    id.nn = U32::new(subsys.max_nsid());
    id.oncs = U16::new(ONCS_DSM | ONCS_WRITE_ZEROES);
    id.vwc = 1;
    id.ioccsz = U32::new((64 + limits.in_capsule_bytes) / 16);
    id.iorcsz = U32::new(1);
    id.icdoff = U16::new(0);
    id.fcatt = 0;
    id.msdbd = 1;
    // One power state, the values nvmet (and QEMU) report.
    let mut ps = PowerStateDescriptor::new_zeroed();
    ps.mp = U16::new(0x9c4);
    ps.enlat = U32::new(0x10);
    ps.exlat = U32::new(0x4);
    id.psd[0] = ps;
    id
}

/// The Identify Namespace structure of `ns` (NVM Command Set 1.x §4.1.5.1):
/// NSZE = NCAP = NUSE = blocks, one LBA format (LBADS = log2 of the block size),
/// NMIC shared, DLFEAT 09h, NGUID; NSATTR bit 0 (write protected) for a read-only
/// namespace, as nvmet sets it.
pub fn identify_namespace(ns: &NamespaceEntry) -> IdentifyNamespace {
    let mut id = IdentifyNamespace::new(ns.ns.nlb(), ns.ns.lbads());
    id.nmic = NMIC_SHARED;
    id.dlfeat = DLFEAT;
    id.nguid = ns.nguid;
    if ns.ns.is_read_only() {
        id.nsattr |= NSATTR_WRITE_PROTECTED;
    }
    id
}

/// Identify Namespace NSATTR bit 0: the namespace is write protected (NVM Command Set
/// 1.x §4.1.5.1).
pub const NSATTR_WRITE_PROTECTED: u8 = 1;

/// The Namespace Identification Descriptor list of `ns` (NVMe Base 2.x §5.17.2.3), in
/// nvmet's order: UUID (NIDT 3), NGUID (NIDT 2), CSI 0 (NIDT 4); then zeros.
pub fn namespace_descriptors(ns: &NamespaceEntry) -> NsIdDescriptorList {
    let mut list = NsIdDescriptorList::new();
    // Three short descriptors always fit in 4096 bytes.
    let _ = list.push(NsIdDescriptor::Uuid(ns.uuid));
    let _ = list.push(NsIdDescriptor::Nguid(ns.nguid));
    let _ = list.push(NsIdDescriptor::Csi(0));
    list
}

// ----- Features (NVMe Base 2.x §5.15, §5.27) -----

/// Asynchronous Event Configuration bits a controller accepts.
fn aec_mask(kind: ControllerKind) -> u32 {
    match kind {
        ControllerKind::Io => AEC_SMART_MASK | AEC_NS_ATTR,
        ControllerKind::Discovery => AEC_DISCOVERY_CHANGE,
    }
}

fn set_features(ctrl: &Controller, sqe: &Sqe, now: Instant) -> AdminOutcome {
    if sqe.features_save() {
        return AdminOutcome::status(
            Status::command_specific(CommandSpecificStatus::FeatureIdNotSaveable).with_dnr(),
        );
    }
    let io = ctrl.kind == ControllerKind::Io;
    let cdw11 = sqe.cdw11();
    match FeatureId::from_value(sqe.fid()) {
        Some(FeatureId::KeepAliveTimer) => {
            ctrl.set_kato_ms(cdw11, now);
            AdminOutcome::ok(0)
        }
        Some(FeatureId::AsyncEventConfiguration) => {
            if cdw11 & !aec_mask(ctrl.kind) != 0 {
                return AdminOutcome::status(invalid_field());
            }
            ctrl.set_aen_config(cdw11);
            AdminOutcome::ok(cdw11)
        }
        Some(FeatureId::NumberOfQueues) if io => {
            let req = NumberOfQueues::from_dword(cdw11);
            if req.nsq_0based == 0xFFFF || req.ncq_0based == 0xFFFF {
                return AdminOutcome::status(invalid_field());
            }
            let max_0based = ctrl.limits().max_io_queues.max(1) - 1;
            let granted = req.granted(max_0based);
            ctrl.set_io_queues(granted.nsq_0based.min(granted.ncq_0based) + 1);
            AdminOutcome::ok(granted.to_dword())
        }
        Some(FeatureId::VolatileWriteCache) if io => {
            ctrl.set_vwc_enabled(VolatileWriteCache::from_dword(cdw11).wce);
            AdminOutcome::ok(0)
        }
        // nvmet: the host identifier comes with Connect only.
        Some(FeatureId::HostIdentifier) if io => {
            AdminOutcome::status(generic(GenericStatus::CommandSequenceError))
        }
        _ => AdminOutcome::status(invalid_field()),
    }
}

fn get_features(ctrl: &Controller, sqe: &Sqe, out: &mut [u8]) -> AdminOutcome {
    let io = ctrl.kind == ControllerKind::Io;
    let fid = FeatureId::from_value(sqe.fid());
    let known = match fid {
        Some(FeatureId::KeepAliveTimer | FeatureId::AsyncEventConfiguration) => true,
        Some(
            FeatureId::NumberOfQueues | FeatureId::VolatileWriteCache | FeatureId::HostIdentifier,
        ) => io,
        _ => false,
    };
    if !known {
        return AdminOutcome::status(invalid_field());
    }
    if FeatureSelect::from_value(sqe.features_select())
        == Some(FeatureSelect::SupportedCapabilities)
    {
        // Changeable (bit 2), neither saveable nor namespace specific.
        return AdminOutcome::ok(1 << 2);
    }
    match fid {
        Some(FeatureId::KeepAliveTimer) => AdminOutcome::ok(ctrl.kato_ms()),
        Some(FeatureId::AsyncEventConfiguration) => AdminOutcome::ok(ctrl.aen_config()),
        Some(FeatureId::NumberOfQueues) => {
            AdminOutcome::ok(NumberOfQueues::with_count(ctrl.io_queues()).to_dword())
        }
        Some(FeatureId::VolatileWriteCache) => AdminOutcome::ok(
            VolatileWriteCache {
                wce: ctrl.vwc_enabled(),
            }
            .to_dword(),
        ),
        Some(FeatureId::HostIdentifier) => {
            // EXHID (CDW11 bit 0) must ask for the 128-bit identifier.
            if sqe.cdw11() & 1 == 0 {
                return AdminOutcome::status(invalid_field());
            }
            AdminOutcome::data(copy_out(out, &ctrl.hostid, ctrl.hostid.len()))
        }
        _ => AdminOutcome::status(invalid_field()),
    }
}

// ----- Get Log Page (NVMe Base 2.x §5.16) -----

/// Commands Supported and Effects log (LID 05h), 4096 bytes: ACS (admin, 256 x 4 B)
/// then IOCS (I/O, 256 x 4 B), NVMe Base 2.x §5.16.1.6.
#[derive(FromZeros, IntoBytes, Immutable, KnownLayout)]
#[repr(C)]
struct CommandEffectsLog {
    acs: [U32; 256],
    iocs: [U32; 256],
    rsvd: [u8; 2048],
}
const _: () = assert!(core::mem::size_of::<CommandEffectsLog>() == 4096);

/// Command effects bit 0: Command Supported (CSUPP).
const CSUPP: u32 = 1 << 0;
/// Command effects bit 1: Logical Block Content Change (LBCC).
const LBCC: u32 = 1 << 1;

fn command_effects() -> CommandEffectsLog {
    let mut log = CommandEffectsLog::new_zeroed();
    for op in [
        AdminOpcode::GetLogPage,
        AdminOpcode::Identify,
        AdminOpcode::Abort,
        AdminOpcode::SetFeatures,
        AdminOpcode::GetFeatures,
        AdminOpcode::AsyncEventRequest,
        AdminOpcode::KeepAlive,
    ] {
        log.acs[usize::from(op.value())] = U32::new(CSUPP);
    }
    for (op, effects) in [
        (NvmOpcode::Flush, CSUPP),
        (NvmOpcode::Write, CSUPP | LBCC),
        (NvmOpcode::Read, CSUPP),
        (NvmOpcode::WriteZeroes, CSUPP | LBCC),
        (NvmOpcode::DatasetManagement, CSUPP | LBCC),
    ] {
        log.iocs[usize::from(op.value())] = U32::new(effects);
    }
    log
}

/// Firmware Slot Information log (LID 03h), 512 bytes: AFI (byte 0) = slot 1 active,
/// FRS1 (bytes 8..16) = [`FIRMWARE_REVISION`], NVMe Base 2.x §5.16.1.4.
fn firmware_slot_log() -> Vec<u8> {
    const AFI: usize = 0;
    const FRS1: usize = 8;
    let mut log = vec![0u8; 512];
    log[AFI] = 1;
    let fr = ascii_field(FIRMWARE_REVISION, 8);
    let mut frs = [b' '; 8];
    frs[..fr.len()].copy_from_slice(fr.as_bytes());
    log[FRS1..FRS1 + 8].copy_from_slice(&frs);
    log
}

/// SMART / Health log (LID 02h): nothing to warn about, 300 K, 100 % spare.
fn smart_log() -> SmartLog {
    let mut log = SmartLog::zeroed();
    log.composite_temperature = U16::new(SMART_TEMPERATURE_K);
    log.available_spare = 100;
    log.available_spare_threshold = 10;
    log
}

fn get_log_page(reg: &Registry, ctrl: &Controller, sqe: &Sqe, out: &mut [u8]) -> AdminOutcome {
    let lpo = sqe.lpo();
    if lpo & 3 != 0 {
        return AdminOutcome::status(invalid_field());
    }
    let want = usize::try_from(sqe.log_page_len()).unwrap_or(usize::MAX);
    let lid = LogPageId::from_value(sqe.lid());
    let log: Vec<u8> = match (ctrl.kind, lid) {
        (ControllerKind::Discovery, Some(LogPageId::Discovery)) => {
            discovery_log_page(reg, &ctrl.hostnqn)
        }
        (ControllerKind::Discovery, _) => return AdminOutcome::status(invalid_log_page()),
        (_, Some(LogPageId::ErrorInformation)) => vec![0; 64 * ERROR_LOG_ENTRIES],
        (_, Some(LogPageId::SmartHealth)) => smart_log().as_bytes().to_vec(),
        (_, Some(LogPageId::FirmwareSlot)) => firmware_slot_log(),
        (_, Some(LogPageId::ChangedNamespaceList)) => {
            NamespaceList::from_ids(ctrl.take_changed_ns())
                .as_bytes()
                .to_vec()
        }
        (_, Some(LogPageId::CommandsSupportedEffects)) => command_effects().as_bytes().to_vec(),
        _ => return AdminOutcome::status(invalid_log_page()),
    };
    let Some(from) = usize::try_from(lpo).ok().filter(|&o| o <= log.len()) else {
        return AdminOutcome::status(invalid_field());
    };
    AdminOutcome::data(copy_out(out, &log[from..], want))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fabrics::tests::{connect_data, enabled_controller, HOSTID};
    use crate::fabrics::{connect, property_set, ConnectOutcome};
    use crate::subsystem::tests::{file_ns, registry_with, HOST, REF_NQN};
    use nvme::log::parse_discovery_log;
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
        let ConnectOutcome::Accepted { ctrl, .. } = connect(reg, &sqe, &data, Instant::now())
        else {
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
        assert_eq!(id.oncs.get(), 0x000C);
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
        assert_eq!(id.ctratt.get(), 1);
        assert_eq!(id.oaes.get(), 1 << 8);
        assert_eq!(id.lpa, 0x06);
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
        // ANA, Discovery on an I/O controller, unknown LIDs: Invalid Log Page (SCT 1, 09h), DNR.
        for lid in [LogPageId::AnaLog, LogPageId::Discovery] {
            let sqe = Sqe::get_log_page(1, lid, 15, 0);
            assert_eq!(done(run(&reg, &ctrl, &sqe, &mut out)).0, 0x8212);
        }
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
        let sqe = Sqe::set_features(1, FeatureId::AsyncEventConfiguration, 1 << 11);
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
    /// which must succeed here with the data length the host asked for. (The ANA log
    /// read of frame 144 is left out: Linux asks for it only when CMIC bit 3 is set.)
    #[test]
    fn linux_host_admin_sequence() {
        let (_d, reg, ctrl) = setup();
        let cmds: [(u8, u32, u32, u32, usize); 13] = [
            (0x06, 0, 0x1, 0, 4096),               // Identify Controller
            (0x02, 0, 0x03ff_0005, 0, 4096),       // Commands Supported and Effects
            (0x02, u32::MAX, 0x007f_0002, 0, 512), // SMART / Health
            (0x09, 0, 0x7, 0, 0),                  // Number of Queues: 1
            (0x09, 0, 0xb, 0x100, 0),              // AEC: namespace attribute notices
            (0x06, 0, 0x6, 0, 4096),               // CNS 06h, CSI NVM
            (0x06, 0, 0x2, 0, 4096),               // Active namespace list
            (0x06, 1, 0x3, 0, 4096),               // NS descriptors
            (0x06, 1, 0x0, 0, 4096),               // Identify Namespace
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
        let out = connect(&reg, &Sqe::connect(0, 0, 0x1f, 0), &data, Instant::now());
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
}
