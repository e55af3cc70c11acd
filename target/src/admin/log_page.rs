//! Get Log Page (NVMe Base 2.x §5.16): every log page the target serves is one row of
//! [`LOG_PAGES`], built whole and then cut by the command's Log Page Offset (LPO, a
//! multiple of 4 bytes; an offset past the end is Invalid Field) and length (NUMD; a
//! shorter host buffer gets what fits). Retain Asynchronous Event (RAE) is honoured on
//! every log: read with RAE cleared, the log's asynchronous event may be reported
//! again ([`crate::controller::Controller::log_read`]), and the Changed Namespace List
//! is cleared; with RAE set both are kept.
use nvme::ana::ANA_LOG_LSP_RGO;
use nvme::identify::NamespaceList;
use nvme::log::SmartLog;
use nvme::status::{GenericStatus, Status};
use nvme::{LogPageId, Sqe};
use zerocopy::byteorder::little_endian::{U128, U16, U32};
use zerocopy::{FromZeros, Immutable, IntoBytes, KnownLayout};

use super::identify::ascii_field;
use super::{
    copy_out, generic, invalid_field, invalid_log_page, AdminOutcome, Ctx, DataDirection, COMMANDS,
    CSUPP, FIRMWARE_REVISION, SMART_TEMPERATURE_K,
};
use crate::controller::ControllerKind;
use crate::discovery::discovery_log_page;
use crate::stats::IoTotals;

/// One log page the target serves.
pub struct LogPage {
    /// Its identifier.
    pub lid: LogPageId,
    /// Served by I/O controllers.
    pub io: bool,
    /// Served by discovery controllers.
    pub discovery: bool,
    /// Builds the whole page for command `sqe` (its NSID, RAE), or the error status.
    pub build: fn(&Ctx, &Sqe) -> Result<Vec<u8>, Status>,
}

/// Every log page the target serves.
pub static LOG_PAGES: &[LogPage] = &[
    LogPage {
        lid: LogPageId::SupportedLogPages,
        io: true,
        discovery: true,
        build: supported_log_pages,
    },
    LogPage {
        lid: LogPageId::ErrorInformation,
        io: true,
        discovery: false,
        build: |c, _| Ok(c.ctrl.error_log_page()),
    },
    LogPage {
        lid: LogPageId::SmartHealth,
        io: true,
        discovery: false,
        build: |c, sqe| smart_log(c, sqe.nsid()).map(|l| l.as_bytes().to_vec()),
    },
    LogPage {
        lid: LogPageId::FirmwareSlot,
        io: true,
        discovery: false,
        build: |_, _| Ok(firmware_slot_log()),
    },
    LogPage {
        lid: LogPageId::ChangedNamespaceList,
        io: true,
        discovery: false,
        build: |c, sqe| {
            let ids = c.ctrl.changed_ns(!sqe.rae());
            Ok(NamespaceList::from_ids(ids).as_bytes().to_vec())
        },
    },
    LogPage {
        lid: LogPageId::CommandsSupportedEffects,
        io: true,
        discovery: false,
        build: |_, _| Ok(command_effects().as_bytes().to_vec()),
    },
    LogPage {
        lid: LogPageId::AnaLog,
        io: true,
        discovery: false,
        build: ana_log,
    },
    LogPage {
        lid: LogPageId::Discovery,
        io: false,
        discovery: true,
        build: |c, _| Ok(discovery_log_page(c.reg, c.ctrl.port, &c.ctrl.hostnqn)),
    },
];

/// The rows of [`LOG_PAGES`] a controller of `kind` serves.
fn served(kind: ControllerKind) -> impl Iterator<Item = &'static LogPage> {
    LOG_PAGES.iter().filter(move |p| match kind {
        ControllerKind::Io => p.io,
        ControllerKind::Discovery => p.discovery,
    })
}

/// Get Log Page moves (NUMD + 1) x 4 bytes to the host.
pub(super) fn data_direction(sqe: &Sqe) -> DataDirection {
    DataDirection::ControllerToHost(usize::try_from(sqe.log_page_len()).unwrap_or(usize::MAX))
}

/// Get Log Page (02h): see the module docs. An identifier the controller does not
/// serve: Invalid Log Page (SCT 1h, SC 09h), DNR.
pub(super) fn get_log_page(c: &Ctx, sqe: &Sqe, out: &mut [u8]) -> AdminOutcome {
    let lpo = sqe.lpo();
    if lpo & 3 != 0 {
        return AdminOutcome::status(invalid_field());
    }
    let want = usize::try_from(sqe.log_page_len()).unwrap_or(usize::MAX);
    let Some(page) = served(c.ctrl.kind).find(|p| p.lid.value() == sqe.lid()) else {
        return AdminOutcome::status(invalid_log_page());
    };
    let log = match (page.build)(c, sqe) {
        Ok(l) => l,
        Err(status) => return AdminOutcome::status(status),
    };
    let Some(from) = usize::try_from(lpo).ok().filter(|&o| o <= log.len()) else {
        return AdminOutcome::status(invalid_field());
    };
    if !sqe.rae() {
        c.ctrl.log_read(page.lid.value());
    }
    AdminOutcome::data(copy_out(out, &log[from..], want))
}

/// Asymmetric Namespace Access log (LID 0Ch, NVMe Base 2.x §5.16.1): the
/// controller's port's state of every ANA group with the subsystem's namespaces in it;
/// with Return Groups Only (LSP bit 0) the group descriptors alone.
fn ana_log(c: &Ctx, sqe: &Sqe) -> Result<Vec<u8>, Status> {
    let rgo = sqe.lsp() & ANA_LOG_LSP_RGO != 0;
    Ok(c.reg.ana.log(c.ctrl.port, &c.ctrl.subsys, rgo).encode(rgo))
}

/// Supported Log Pages (LID 00h), 1024 bytes: LSUPP (bit 0) in the 4-byte entry of
/// every identifier this controller serves (NVMe Base 2.x §5.16.1.1).
fn supported_log_pages(c: &Ctx, _: &Sqe) -> Result<Vec<u8>, Status> {
    let mut log = vec![0u8; 256 * 4];
    for p in served(c.ctrl.kind) {
        let at = usize::from(p.lid.value()) * 4;
        log[at..at + 4].copy_from_slice(&CSUPP.to_le_bytes());
    }
    Ok(log)
}

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

/// The effects log from the admin command table and the I/O commands' list.
fn command_effects() -> CommandEffectsLog {
    let mut log = CommandEffectsLog::new_zeroed();
    for c in COMMANDS {
        log.acs[usize::from(c.opcode.value())] = U32::new(c.effects);
    }
    for &(op, effects) in crate::io::COMMAND_EFFECTS {
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

/// SMART / Health log (LID 02h) of namespace `nsid` (FFFFFFFFh or 0: every namespace
/// of the subsystem, summed; LPA bit 0): nothing to warn about, 300 K, 100 % spare,
/// and what was counted for real: Data Units Read/Written, Host Read/Write Commands
/// ([`crate::stats`]), Power On Hours (since the target started), Number of Error
/// Information Log Entries (this controller's error count). Controller Busy Time,
/// Power Cycles and Unsafe Shutdowns are not kept (0).
///
/// Errors: Invalid Namespace or Format (DNR) for an NSID the subsystem lacks.
fn smart_log(c: &Ctx, nsid: u32) -> Result<SmartLog, Status> {
    let subsys = &c.ctrl.subsys;
    let totals = match nsid {
        0 | u32::MAX => subsys
            .namespaces()
            .iter()
            .map(|n| n.stats.totals())
            .fold(IoTotals::default(), |a, b| a + b),
        _ => subsys
            .namespace(nsid)
            .ok_or_else(|| generic(GenericStatus::InvalidNamespaceOrFormat))?
            .stats
            .totals(),
    };
    let mut log = SmartLog::zeroed();
    log.composite_temperature = U16::new(SMART_TEMPERATURE_K);
    log.available_spare = 100;
    log.available_spare_threshold = 10;
    let u = |v: u64| U128::new(u128::from(v));
    log.data_units_read = u(totals.data_units_read());
    log.data_units_written = u(totals.data_units_written());
    log.host_read_commands = u(totals.read_commands);
    log.host_write_commands = u(totals.write_commands);
    let up = c.now.saturating_duration_since(c.reg.started);
    log.power_on_hours = u(up.as_secs() / 3600);
    log.num_error_log_entries = u(c.ctrl.error_count());
    Ok(log)
}
