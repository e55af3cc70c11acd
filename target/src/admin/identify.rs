//! Identify (NVMe Base 2.x §5.17): the controller, namespaces, the active namespace
//! list, namespace identification descriptors, and the NVM command set's I/O command
//! set specific controller structure, with the values nvmet reports unless noted.
use nvme::ana::{ANACAP_ALL_STATES, CMIC_ANA_REPORTING, CMIC_MULTI_PORT};
use nvme::identify::{
    IdentifyController, IdentifyNamespace, NamespaceList, NsIdDescriptor, NsIdDescriptorList,
    PowerStateDescriptor, CNTRLTYPE_DISCOVERY, CNTRLTYPE_IO, CTRATT_HOST_ID_128, CTRATT_TBKAS,
    IDENTIFY_DATA_SIZE, OAES_ANA_CHANGE, OAES_DISCOVERY_CHANGE, OAES_NS_ATTR, ONCS_COMPARE,
    ONCS_DSM, ONCS_WRITE_ZEROES, SGLS_KEYED, SGLS_OFFSET, SGLS_SUPPORTED,
};
use nvme::status::GenericStatus;
use nvme::{IdentifyCns, Sqe};
use zerocopy::byteorder::little_endian::{U16, U32};
use zerocopy::{FromZeros, IntoBytes};

use super::{
    copy_out, generic, invalid_field, AdminOutcome, Ctx, CMIC_MULTI_CONTROLLER, DLFEAT,
    ERROR_LOG_ENTRIES, KAS, LPA, NMIC_SHARED,
};
use crate::controller::{Controller, ControllerKind, MAX_AER};
use crate::subsystem::{Limits, NamespaceEntry, Registry};

/// Identify (06h): the structure CNS names; a discovery controller answers CNS 01h
/// only.
pub(super) fn identify(c: &Ctx, sqe: &Sqe, out: &mut [u8]) -> AdminOutcome {
    let want = IDENTIFY_DATA_SIZE;
    let ctrl = c.ctrl;
    let cns = IdentifyCns::from_value(sqe.cns());
    if ctrl.kind == ControllerKind::Discovery && cns != Some(IdentifyCns::Controller) {
        return AdminOutcome::status(invalid_field());
    }
    let subsys = &ctrl.subsys;
    match cns {
        Some(IdentifyCns::Controller) => {
            let id = identify_controller(c.reg, ctrl);
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
                    let id = identify_namespace(&ns);
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
            let all = subsys.namespaces();
            let ids = all.iter().map(|n| n.nsid).filter(|&id| id > min);
            let list = NamespaceList::from_ids(ids);
            AdminOutcome::data(copy_out(out, list.as_bytes(), want))
        }
        Some(IdentifyCns::NamespaceIdDescriptorList) => match subsys.namespace(sqe.nsid()) {
            Some(ns) => {
                let list = namespace_descriptors(&ns);
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
pub(crate) fn ascii_field(s: &str, max: usize) -> String {
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
/// values nvmet reports unless noted: VID/SSVID 0, SN, MN, FR, IEEE (little endian)
/// and VER (1.3 unless configured) of the subsystem, RAB 6, CMIC 0Bh (multi-port,
/// multi-controller, ANA reporting; 02h without namespaces), ANA Change Notices in
/// OAES, ANACAP 1Fh, ANATT 10 s, ANAGRPMAX = NANAGRPID = 128, MNAN = NN,
/// MDTS from the limits, CNTLID, OAES Namespace Attribute Notices (discovery:
/// Discovery Log Change), CTRATT 41h (128-bit host ID, Traffic Based Keep Alive),
/// CNTRLTYPE, ACL 3, AERL 3, FRMW 03h, LPA 07h, ELPE 127, KAS 10, SQES 66h, CQES 44h,
/// MAXCMD, NN = largest NSID, ONCS Compare (nvmet has no Compare; SPDK does) + DSM +
/// Write Zeroes, VWC 1, SGLS, SUBNQN, IOCCSZ = (64 + in-capsule bytes) / 16, IORCSZ 1,
/// ICDOFF 0, FCATT 0 (dynamic), MSDBD 1. A discovery controller reports MDTS 0 and no
/// I/O fields, as nvmet's discovery Identify.
pub fn identify_controller(reg: &Registry, ctrl: &Controller) -> IdentifyController {
    let limits = &reg.limits;
    let subsys = &ctrl.subsys;
    let mut id = IdentifyController::zeroed();
    // The helpers refuse only over-long or non-ASCII text, which ascii_field prevents.
    let _ = id.set_sn(&ascii_field(&subsys.serial, 20));
    let _ = id.set_mn(&ascii_field(&subsys.model, 40));
    let _ = id.set_fr(&ascii_field(&subsys.firmware, 8));
    let _ = id.set_subnqn(&subsys.nqn);
    id.cntlid = U16::new(ctrl.cntlid);
    id.ver = U32::new(subsys.version.0);
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
    id.ieee.copy_from_slice(&subsys.ieee_oui.to_le_bytes()[..3]);
    id.rab = 6;
    id.cmic = CMIC_MULTI_CONTROLLER;
    id.mdts = mdts(limits.mdts_bytes);
    id.oaes = U32::new(OAES_NS_ATTR);
    id.ctratt = U32::new(CTRATT_HOST_ID_128 | CTRATT_TBKAS);
    id.acl = 3;
    id.frmw = 0x03;
    id.lpa = LPA;
    id.elpe = (ERROR_LOG_ENTRIES - 1) as u8;
    id.sqes = 0x66;
    id.cqes = 0x44;
    id.nn = U32::new(subsys.max_nsid());
    if id.nn.get() > 0 {
        // ANA (NVMe Base 2.x §8.1), as nvmet: reported by every I/O controller of a
        // subsystem with namespaces (a Linux host refuses ANA with MNAN 0 or above NN).
        id.cmic = CMIC_MULTI_PORT | CMIC_MULTI_CONTROLLER | CMIC_ANA_REPORTING;
        id.oaes = U32::new(OAES_NS_ATTR | OAES_ANA_CHANGE);
        id.anacap = ANACAP_ALL_STATES;
        id.anatt = crate::ana::ANATT_SECONDS;
        id.anagrpmax = U32::new(crate::ana::ANAGRPMAX);
        id.nanagrpid = U32::new(crate::ana::ANAGRPMAX);
        id.mnan = id.nn;
    }
    id.oncs = U16::new(ONCS_COMPARE | ONCS_DSM | ONCS_WRITE_ZEROES);
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
/// NMIC shared, ANAGRPID, DLFEAT 09h, NGUID and EUI64 (zero when the namespace has none); NSATTR
/// bit 0 (write protected) for a read-only namespace, as nvmet sets it.
pub fn identify_namespace(ns: &NamespaceEntry) -> IdentifyNamespace {
    let mut id = IdentifyNamespace::new(ns.ns.nlb(), ns.ns.lbads());
    id.nmic = NMIC_SHARED;
    id.anagrpid = U32::new(ns.ana_grpid);
    id.dlfeat = DLFEAT;
    id.nguid = ns.nguid;
    id.eui64 = ns.eui64;
    if ns.ns.is_read_only() {
        id.nsattr |= NSATTR_WRITE_PROTECTED;
    }
    id
}

/// Identify Namespace NSATTR bit 0: the namespace is write protected (NVM Command Set
/// 1.x §4.1.5.1).
pub const NSATTR_WRITE_PROTECTED: u8 = 1;

/// The Namespace Identification Descriptor list of `ns` (NVMe Base 2.x §5.17.2.3):
/// EUI-64 (NIDT 1), then in nvmet's order UUID (NIDT 3), NGUID (NIDT 2), each only
/// when not all zeros (as nvmet skips an unset one), and CSI 0 (NIDT 4); then zeros.
pub fn namespace_descriptors(ns: &NamespaceEntry) -> NsIdDescriptorList {
    let mut list = NsIdDescriptorList::new();
    // Four short descriptors always fit in 4096 bytes.
    if ns.eui64 != [0; 8] {
        let _ = list.push(NsIdDescriptor::Eui64(ns.eui64));
    }
    if ns.uuid != [0; 16] {
        let _ = list.push(NsIdDescriptor::Uuid(ns.uuid));
    }
    if ns.nguid != [0; 16] {
        let _ = list.push(NsIdDescriptor::Nguid(ns.nguid));
    }
    let _ = list.push(NsIdDescriptor::Csi(0));
    list
}
