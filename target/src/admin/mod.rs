//! Admin commands of the target (NVMe Base 2.x §5), modelled on Linux
//! `drivers/nvme/target/admin-cmd.c` and `discovery.c`: Identify ([`identify`]), Get
//! Log Page ([`log_page`]), Set/Get Features ([`features`]), Keep Alive, Asynchronous
//! Event Request and Abort, for I/O and discovery controllers. Pure logic: the caller
//! moves the data (RDMA WRITE of `out`) and sends the completion.
//!
//! Every admin command is one entry of [`COMMANDS`]: its opcode, whether a discovery
//! controller serves it, its Commands Supported and Effects bits, the data it moves
//! and the function that runs it. [`handle`], [`data_direction`] and the effects log
//! all read that table, so a command is added in one place.

use std::sync::Arc;
use std::time::Instant;

use nvme::identify::IDENTIFY_DATA_SIZE;
use nvme::status::{CommandSpecificStatus, GenericStatus, Status};
use nvme::{AdminOpcode, FabricsCommandType, Sqe, FABRICS_OPCODE};

use crate::controller::Controller;
use crate::fabrics::CONNECT_DATA_LEN;
use crate::subsystem::Registry;

pub mod features;
pub mod identify;
pub mod log_page;
#[cfg(test)]
mod tests;

pub use identify::{
    identify_controller, identify_namespace, mdts, namespace_descriptors, NSATTR_WRITE_PROTECTED,
};

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
    pub(crate) fn status(status: Status) -> Self {
        AdminOutcome::Done {
            status,
            dw0: 0,
            data_len: 0,
        }
    }

    pub(crate) fn ok(dw0: u32) -> Self {
        AdminOutcome::Done {
            status: Status::SUCCESS,
            dw0,
            data_len: 0,
        }
    }

    pub(crate) fn data(data_len: usize) -> Self {
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
pub const CMIC_MULTI_CONTROLLER: u8 = nvme::ana::CMIC_MULTI_CONTROLLER;

/// Identify Controller LPA, as nvmet: bit 0 SMART / Health log per namespace, bit 1
/// Commands Supported and Effects log, bit 2 extended data for Get Log Page (NUMDU,
/// LPO).
pub const LPA: u8 = (1 << 0) | (1 << 1) | (1 << 2);

/// Identify Namespace DLFEAT: deallocated blocks read as zeroes (bits 2:0 = 001b) and
/// Write Zeroes may deallocate (bit 3).
pub const DLFEAT: u8 = 0x09;

/// Identify Namespace NMIC bit 0: the namespace may be reached through several
/// controllers.
pub const NMIC_SHARED: u8 = 1;

/// Error Information log entries kept (Identify Controller ELPE + 1).
pub const ERROR_LOG_ENTRIES: usize = crate::error_log::ERROR_LOG_SLOTS;

/// Command effects bit 0: Command Supported (CSUPP).
pub const CSUPP: u32 = 1 << 0;
/// Command effects bit 1: Logical Block Content Change (LBCC).
pub const LBCC: u32 = 1 << 1;

pub(crate) fn generic(code: GenericStatus) -> Status {
    Status::generic(code).with_dnr()
}

pub(crate) fn invalid_field() -> Status {
    generic(GenericStatus::InvalidField)
}

fn invalid_opcode() -> Status {
    generic(GenericStatus::InvalidOpcode)
}

/// What an admin command runs against.
pub struct Ctx<'a> {
    /// Subsystems, limits, ports.
    pub reg: &'a Registry,
    /// The controller of the admin queue.
    pub ctrl: &'a Arc<Controller>,
    /// The time the command runs at.
    pub now: Instant,
}

/// One admin command the target serves (one row of [`COMMANDS`]).
pub struct AdminCommand {
    /// Its opcode.
    pub opcode: AdminOpcode,
    /// Whether a discovery controller serves it too (NVMe Base 2.x §3.1.3.3: Identify,
    /// Get Log Page, Set/Get Features, Keep Alive, Asynchronous Event Request).
    pub discovery: bool,
    /// Its Commands Supported and Effects log entry (CSUPP, LBCC, ...).
    pub effects: u32,
    /// The data it moves, from its dwords.
    pub data: fn(&Sqe) -> DataDirection,
    /// Runs it; controller-to-host data goes to the output buffer.
    pub run: fn(&Ctx, &Sqe, &mut [u8]) -> AdminOutcome,
}

fn no_data(_: &Sqe) -> DataDirection {
    DataDirection::None
}

/// Every admin command the target serves, in opcode order (see the module docs).
pub static COMMANDS: &[AdminCommand] = &[
    AdminCommand {
        opcode: AdminOpcode::GetLogPage,
        discovery: true,
        effects: CSUPP,
        data: log_page::data_direction,
        run: log_page::get_log_page,
    },
    AdminCommand {
        opcode: AdminOpcode::Identify,
        discovery: true,
        effects: CSUPP,
        data: |_| DataDirection::ControllerToHost(IDENTIFY_DATA_SIZE),
        run: identify::identify,
    },
    AdminCommand {
        opcode: AdminOpcode::Abort,
        discovery: false,
        effects: CSUPP,
        data: no_data,
        // Nothing is ever aborted: DW0 bit 0 = 1 "command not aborted" (nvmet).
        run: |_, _, _| AdminOutcome::ok(1),
    },
    AdminCommand {
        opcode: AdminOpcode::SetFeatures,
        discovery: true,
        effects: CSUPP,
        data: no_data,
        run: features::set_features,
    },
    AdminCommand {
        opcode: AdminOpcode::GetFeatures,
        discovery: true,
        effects: CSUPP,
        data: features::data_direction,
        run: features::get_features,
    },
    AdminCommand {
        opcode: AdminOpcode::AsyncEventRequest,
        discovery: true,
        effects: CSUPP,
        data: no_data,
        run: async_event_request,
    },
    AdminCommand {
        opcode: AdminOpcode::KeepAlive,
        discovery: true,
        effects: CSUPP,
        data: no_data,
        run: keep_alive,
    },
];

/// The row of [`COMMANDS`] for `opcode`, if the target serves it.
pub fn command(opcode: u8) -> Option<&'static AdminCommand> {
    COMMANDS.iter().find(|c| c.opcode.value() == opcode)
}

/// Keep Alive (18h): restarts the timer; with KATO 0, Keep Alive Timeout Invalid
/// without DNR (nvmet).
fn keep_alive(c: &Ctx, _: &Sqe, _: &mut [u8]) -> AdminOutcome {
    if c.ctrl.kato_ms() == 0 {
        return AdminOutcome::status(Status::generic(GenericStatus::KeepAliveTimeoutInvalid));
    }
    c.ctrl.keep_alive(c.now);
    AdminOutcome::ok(0)
}

/// Asynchronous Event Request (0Ch): held until an event, or completed at once with
/// a pending one.
fn async_event_request(c: &Ctx, sqe: &Sqe, _: &mut [u8]) -> AdminOutcome {
    match c.ctrl.push_aer(sqe.cid()) {
        Ok(Some(dw0)) => AdminOutcome::ok(dw0),
        Ok(None) => AdminOutcome::Hold,
        Err(status) => AdminOutcome::status(status),
    }
}

/// The data a command on the admin queue moves, from its opcode and dwords (the
/// table's `data`; Connect: its 1024 bytes of Connect data); an opcode the target
/// does not serve moves none.
pub fn data_direction(sqe: &Sqe) -> DataDirection {
    if sqe.opcode() == FABRICS_OPCODE {
        return if sqe.fctype() == Some(FabricsCommandType::Connect.value()) {
            DataDirection::HostToController(CONNECT_DATA_LEN)
        } else {
            DataDirection::None
        };
    }
    command(sqe.opcode()).map_or(DataDirection::None, |c| (c.data)(sqe))
}

/// Copies `src` into `out`, as much as fits in `min(out.len(), want)` bytes, and fills
/// the rest of that length with zeros; returns the length.
pub(crate) fn copy_out(out: &mut [u8], src: &[u8], want: usize) -> usize {
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
/// here they answer Invalid Command Opcode, as does an opcode [`COMMANDS`] lacks (or
/// one a discovery controller does not serve). Every other command needs the
/// controller enabled (CC.EN and CSTS.RDY), else Command Sequence Error. All error
/// statuses carry DNR except Keep Alive Timeout Invalid.
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
    let discovery = ctrl.kind == crate::controller::ControllerKind::Discovery;
    match command(sqe.opcode()) {
        Some(c) if c.discovery || !discovery => (c.run)(&Ctx { reg, ctrl, now }, sqe, out),
        _ => AdminOutcome::status(invalid_opcode()),
    }
}

/// Invalid Log Page (SCT 1h, SC 09h) with DNR.
pub(crate) fn invalid_log_page() -> Status {
    Status::command_specific(CommandSpecificStatus::InvalidLogPage).with_dnr()
}
