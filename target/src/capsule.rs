//! What a command capsule asks for: the request core's first decision on a received
//! command. Public but hidden from the documentation for the capsule benchmark
//! (`benches/capsule.rs`), which times it on its own.
use nvme::status::{GenericStatus, Status};
use nvme::Sqe;

use crate::admin::{self, DataDirection};
use crate::ana::AnaTable;
use crate::controller::Controller;
use crate::io::{self, IoCommand};

/// The kind of a received command.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Fabrics Connect (its 1024-byte data comes from the host).
    Connect,
    /// Fabrics Property Get (admin queue only).
    PropertyGet,
    /// Fabrics Property Set (admin queue only).
    PropertySet,
    /// Fabrics Disconnect (I/O queues only): delete the queue it came on.
    Disconnect,
    /// Fabrics Authentication Send (any queue): a DH-HMAC-CHAP message from the host.
    AuthSend,
    /// Fabrics Authentication Receive (any queue): the controller's next message.
    AuthReceive,
    /// Any other command on the admin queue.
    Admin,
    /// An NVM command on an I/O queue, decoded and checked against its namespace.
    Io(IoCommand),
}

/// Classifies `sqe` received on queue `qid` whose controller is `ctrl` (none before
/// Connect), `authenticated` unless the queue still owes an in-band authentication
/// (NVMe Base 2.x §8.13: until then only Fabrics commands run, anything else is
/// answered Authentication Required, DNR, as nvmet's `nvmet_check_auth_status`), and
/// says which data it moves, or the status to answer it with:
/// PSDT other than SGL, or a fused command: Invalid Field (DNR); an unknown Fabrics
/// command type: Invalid Opcode (DNR); a Disconnect on the admin queue: Invalid Queue
/// Type (DNR); anything but Connect (and Disconnect) before Connect: Command
/// Sequence Error (DNR); I/O while the controller is not ready, on an unknown
/// namespace, to a namespace whose ANA group is inaccessible, in persistent loss or
/// changing through the controller's port (`ana`: the ANA path status, no DNR, so a
/// multipath host retries on another path), or failing `io::decode` (LBA range, MDTS
/// = `max_io_bytes`): that status (NVMe Base 2.x §3.3, §8.1, NVMe over Fabrics 1.x
/// §3; nvmet's checks, in its order).
pub fn classify(
    sqe: &Sqe,
    qid: u16,
    ctrl: Option<&Controller>,
    authenticated: bool,
    max_io_bytes: u32,
    ana: &AnaTable,
) -> Result<(Kind, DataDirection), Status> {
    if sqe.psdt() != nvme::sqe::PSDT_SGL_MPTR_CONTIG {
        return Err(Status::generic(GenericStatus::InvalidField).with_dnr());
    }
    // No fused operations (Identify Controller FUSES 0): either half of a fused pair
    // is refused rather than run alone, as nvmet does.
    if sqe.fuse() != nvme::sqe::FUSE_NORMAL {
        return Err(Status::generic(GenericStatus::InvalidField).with_dnr());
    }
    if sqe.opcode() == nvme::FABRICS_OPCODE {
        return match sqe.fctype() {
            Some(0x01) => Ok((Kind::Connect, DataDirection::HostToController(1024))),
            Some(0x04) if qid == 0 => Ok((Kind::PropertyGet, DataDirection::None)),
            Some(0x00) if qid == 0 => Ok((Kind::PropertySet, DataDirection::None)),
            Some(0x08) if qid != 0 => Ok((Kind::Disconnect, DataDirection::None)),
            Some(0x05 | 0x06) => auth_command(sqe, ctrl.is_some()),
            // NVMe Base 2.x §6.4: a Disconnect on the admin queue.
            Some(0x08) => Err(Status::command_specific(
                nvme::status::CommandSpecificStatus::InvalidQueueType,
            )
            .with_dnr()),
            _ => Err(Status::generic(GenericStatus::InvalidOpcode).with_dnr()),
        };
    }
    let Some(ctrl) = ctrl else {
        return Err(Status::generic(GenericStatus::CommandSequenceError).with_dnr());
    };
    if !authenticated {
        return Err(Status::command_specific(
            nvme::status::CommandSpecificStatus::AuthenticationRequired,
        )
        .with_dnr());
    }
    if qid == 0 {
        return Ok((Kind::Admin, admin::data_direction(sqe)));
    }
    // I/O only while the controller is enabled and ready (not after CC.EN=0, a
    // shutdown notification or a fatal status), as nvmet checks.
    ctrl.check_ready()?;
    let ns = ctrl
        .subsys
        .namespace(sqe.nsid())
        .ok_or(Status::generic(GenericStatus::InvalidNamespaceOrFormat).with_dnr())?;
    if let Some(refused) = ana.state(ctrl.port, ns.ana_grpid).path_status() {
        return Err(refused);
    }
    let cmd = io::decode(sqe, ns.ns.nlb(), ns.ns.block_size(), max_io_bytes)?;
    // A read-only namespace serves reads and flushes; anything else would change it
    // (nvmet_io_cmd_check_access: the same status, no DNR).
    if ns.ns.is_read_only()
        && !matches!(
            cmd,
            IoCommand::Read { .. } | IoCommand::Compare { .. } | IoCommand::Flush
        )
    {
        return Err(Status::generic(GenericStatus::NamespaceWriteProtected));
    }
    let dir = match (cmd.host_to_controller_len(), cmd.controller_to_host_len()) {
        (0, 0) => DataDirection::None,
        (h, 0) => DataDirection::HostToController(h as usize),
        (_, c) => DataDirection::ControllerToHost(c as usize),
    };
    Ok((Kind::Io(cmd), dir))
}

/// Largest Authentication Receive buffer the target fills: an ffdhe8192 Challenge is
/// 1,104 bytes; Linux asks for 4 KiB.
pub const AUTH_RECEIVE_MAX: usize = 4096;

/// An Authentication Send (its TL bytes come from the host) or Receive (at most AL,
/// capped at [`AUTH_RECEIVE_MAX`], go to it): SECP, SPSP0/1 and a zero length are
/// Invalid Field (DNR); before Connect, Command Sequence Error (DNR).
fn auth_command(sqe: &Sqe, connected: bool) -> Result<(Kind, DataDirection), Status> {
    use nvme::auth::AuthCommand;
    if !connected {
        return Err(Status::generic(GenericStatus::CommandSequenceError).with_dnr());
    }
    match AuthCommand::from_sqe(sqe) {
        Ok(AuthCommand::Send { tl }) => {
            Ok((Kind::AuthSend, DataDirection::HostToController(tl as usize)))
        }
        Ok(AuthCommand::Receive { al }) => Ok((
            Kind::AuthReceive,
            DataDirection::ControllerToHost((al as usize).min(AUTH_RECEIVE_MAX)),
        )),
        Err(_) => Err(Status::generic(GenericStatus::InvalidField).with_dnr()),
    }
}
