//! Fabrics commands on the target side (NVMe Base 2.x §6; NVMe over Fabrics 1.1 §3):
//! Connect, which creates a controller (admin queue) or attaches an I/O queue to one,
//! and Property Get/Set of CAP, VS, CC and CSTS. Modelled on Linux
//! `drivers/nvme/target/fabrics-cmd.c`; refusals carry the same status and DW0
//! (IATTR/IPO) bytes nvmet sends (`shared/captures/linux-nvme-rdma-errors.pcap`).

use std::sync::Arc;
use std::time::Instant;

use nvme::auth::CONNECT_AUTHREQ_ATR;
use nvme::fabrics::{
    connect_success_dw0, ConnectCommand, ConnectData, ConnectInvalidParameter, PropertyGetCommand,
    PropertySetCommand, CNTLID_DYNAMIC,
};
use nvme::properties::{Cap, Property, Vs};
use nvme::status::{CommandSpecificStatus, GenericStatus, Status};
use nvme::{Sqe, NVME_AQ_DEPTH};
use zerocopy::FromBytes;

use crate::controller::Controller;
use crate::subsystem::{Limits, Registry};

/// Version (VS) the target reports: NVMe 1.3.0, as Linux nvmet.
pub const VERSION: Vs = Vs::V1_3;

/// CAP.TO: worst-case CSTS.RDY transition time, 15 x 500 ms = 7.5 s (nvmet's value).
pub const CAP_TIMEOUT_500MS: u8 = 15;

/// CAP.CSS: NVM command set (bit 0) and "one or more I/O command sets" (bit 6), so a
/// host may program CC.CSS = 110b, as nvmet reports.
pub const CAP_CSS: u8 = 0x41;

/// Size of the Connect data the Connect command carries.
pub const CONNECT_DATA_LEN: usize = 1024;

/// What a Connect achieved.
#[derive(Debug, Clone)]
pub enum ConnectOutcome {
    /// The queue is connected to `ctrl`; complete with success and DW0 `dw0`
    /// (CNTLID in bits 15:0, AUTHREQ 0).
    Accepted {
        /// The new (admin queue) or existing (I/O queue) controller; DW0 bit 17
        /// (AUTHREQ.ATR) set when the host must authenticate the queue.
        ctrl: Arc<Controller>,
        /// Completion DW0.
        dw0: u32,
    },
    /// The Connect failed: complete with `status` and DW0 `dw0` (for Connect Invalid
    /// Parameters: IATTR in bits 23:16, IPO in bits 15:0).
    Refused {
        /// Completion status (always with DNR).
        status: Status,
        /// Completion DW0.
        dw0: u32,
    },
}

impl ConnectOutcome {
    fn invalid(p: ConnectInvalidParameter) -> Self {
        ConnectOutcome::Refused {
            status: ConnectInvalidParameter::status(),
            dw0: p.to_dw0(),
        }
    }

    fn status(status: Status) -> Self {
        ConnectOutcome::Refused { status, dw0: 0 }
    }
}

/// Controller Capabilities for `limits`: MQES = max_queue_size - 1, CQR 0, TO 15,
/// CSS 41h, MPSMIN = MPSMAX = 0 (4 KiB). For 128-entry queues this is nvmet's
/// 0000_0820_0f00_007fh (capture frame 15).
pub fn capabilities(limits: &Limits) -> Cap {
    Cap::default()
        .with_mqes(limits.max_queue_size.saturating_sub(1))
        .with_to(CAP_TIMEOUT_500MS)
        .with_css(CAP_CSS)
}

/// IPO of the Connect command's QID field (SQE byte 42) in a Connect Invalid Parameters
/// DW0 (IATTR 0: the command).
pub const CONNECT_IPO_QID: u32 = 42;

/// The checks the transport makes before [`connect`], on the queue the Connect arrived
/// on (NVMe RDMA Transport 1.x §3.3: the queue ID is fixed by the CM exchange):
/// `Some(refusal)` when the queue already has a controller (nvmet: "queue already
/// connected!": Connect Controller Busy, DNR; nothing changes, no second controller),
/// or when the command's QID is not the queue's `queue_qid` (Connect Invalid
/// Parameters, DNR, IPO 42: the QID field); `None` when [`connect`] may run.
pub fn connect_precondition(queue_qid: u16, connected: bool, sqe: &Sqe) -> Option<ConnectOutcome> {
    if connected {
        return Some(ConnectOutcome::status(
            Status::command_specific(CommandSpecificStatus::ConnectControllerBusy).with_dnr(),
        ));
    }
    let connect_qid = ConnectCommand::from_sqe(sqe)
        .map(|c| c.qid())
        .unwrap_or(u16::MAX);
    if connect_qid != queue_qid {
        return Some(ConnectOutcome::Refused {
            status: Status::command_specific(CommandSpecificStatus::ConnectInvalidParameters)
                .with_dnr(),
            dw0: CONNECT_IPO_QID,
        });
    }
    None
}

/// Handles a Connect command (NVMe Base 2.x §6.3) whose 1024-byte Connect data is
/// `data`, received on a queue of port `port` (an index in [`Registry::ports`]), at
/// time `now`.
///
/// Admin queue (QID 0): CNTLID must be FFFFh (dynamic model); the subsystem must
/// exist and admit the host; SQSIZE (0's based) in 1..=31 (NVME_AQ_DEPTH - 1). A new
/// controller is registered with the Connect's KATO; DW0 is its CNTLID.
/// I/O queue (QID > 0): CNTLID must name a live controller of that subsystem created
/// by the same host NQN; the controller must be enabled; QID at most the number of
/// I/O queues granted and not yet connected; SQSIZE in 1..=MQES.
///
/// Refusals (all with DNR), checked in nvmet's order:
/// - command not a Connect: Invalid Field in Command;
/// - data shorter than 1024 bytes: Data SGL Length Invalid;
/// - RECFMT not 0: Connect Incompatible Format;
/// - admin CNTLID not FFFFh, or no such controller for this subsystem and host NQN:
///   Connect Invalid Parameters, IATTR 1, IPO 16 (as nvmet, also for a host NQN that
///   differs from the controller's);
/// - unknown or malformed SUBNQN: Connect Invalid Parameters, DW0 00010100h (also the
///   discovery NQN when the registry does not serve discovery, `discovery = false`, and
///   a subsystem the port does not serve, as nvmet for one not linked to the port);
/// - malformed HOSTNQN: Connect Invalid Parameters, DW0 00010200h;
/// - host not allowed: Connect Invalid Host (SC 84h), DW0 00010200h;
/// - QID above the granted I/O queues (or any on the discovery subsystem): Connect
///   Invalid Parameters, IATTR 0, IPO 42;
/// - I/O queue to a controller that is not enabled, or a QID already connected:
///   Command Sequence Error;
/// - SQSIZE 0 or too large: Connect Invalid Parameters, IATTR 0, IPO 44;
/// - no free CNTLID in the subsystem's range: Connect Controller Busy.
pub fn connect(
    reg: &Registry,
    port: usize,
    sqe: &Sqe,
    data: &[u8],
    now: Instant,
) -> ConnectOutcome {
    let Ok(cmd) = ConnectCommand::from_sqe(sqe) else {
        return ConnectOutcome::status(Status::generic(GenericStatus::InvalidField).with_dnr());
    };
    let Some(Ok(d)) = data
        .get(..CONNECT_DATA_LEN)
        .map(ConnectData::read_from_bytes)
    else {
        return ConnectOutcome::status(
            Status::generic(GenericStatus::DataSglLengthInvalid).with_dnr(),
        );
    };
    if cmd.recfmt() != 0 {
        return ConnectOutcome::status(
            Status::command_specific(CommandSpecificStatus::ConnectIncompatibleFormat).with_dnr(),
        );
    }
    if cmd.qid() == 0 {
        connect_admin(reg, port, cmd, &d, now)
    } else {
        connect_io(reg, port, cmd, &d)
    }
}

fn connect_admin(
    reg: &Registry,
    port: usize,
    cmd: &ConnectCommand,
    d: &ConnectData,
    now: Instant,
) -> ConnectOutcome {
    if d.cntlid() != CNTLID_DYNAMIC {
        return ConnectOutcome::invalid(ConnectInvalidParameter::CNTLID);
    }
    let Some(subsys) = d.subnqn().ok().and_then(|nqn| reg.lookup_on(port, nqn)) else {
        return ConnectOutcome::invalid(ConnectInvalidParameter::SUBNQN);
    };
    let Ok(hostnqn) = d.hostnqn() else {
        return ConnectOutcome::invalid(ConnectInvalidParameter::HOSTNQN);
    };
    if !subsys.host_allowed(hostnqn) {
        return ConnectOutcome::Refused {
            status: Status::command_specific(CommandSpecificStatus::ConnectInvalidHost).with_dnr(),
            dw0: ConnectInvalidParameter::HOSTNQN.to_dw0(),
        };
    }
    if cmd.sqsize() == 0 || cmd.sqsize() > NVME_AQ_DEPTH - 1 {
        return ConnectOutcome::invalid(ConnectInvalidParameter::SQSIZE);
    }
    let made = reg.add_controller(subsys.cntlids.clone(), |cntlid| {
        Controller::new(
            cntlid,
            subsys.clone(),
            hostnqn.to_string(),
            d.hostid,
            cmd.kato(),
            &reg.limits,
            now,
        )
        .on_port(port)
    });
    match made {
        Ok(ctrl) => {
            let dw0 = accepted_dw0(&ctrl);
            ConnectOutcome::Accepted { ctrl, dw0 }
        }
        Err(status) => ConnectOutcome::status(status),
    }
}

fn connect_io(
    reg: &Registry,
    port: usize,
    cmd: &ConnectCommand,
    d: &ConnectData,
) -> ConnectOutcome {
    let Some(subsys) = d.subnqn().ok().and_then(|nqn| reg.lookup_on(port, nqn)) else {
        return ConnectOutcome::invalid(ConnectInvalidParameter::SUBNQN);
    };
    let Ok(hostnqn) = d.hostnqn() else {
        return ConnectOutcome::invalid(ConnectInvalidParameter::HOSTNQN);
    };
    let ctrl = reg
        .controller(d.cntlid())
        .filter(|c| Arc::ptr_eq(&c.subsys, &subsys) && c.hostnqn == hostnqn);
    let Some(ctrl) = ctrl else {
        return ConnectOutcome::invalid(ConnectInvalidParameter::CNTLID);
    };
    let qid = cmd.qid();
    if subsys.is_discovery() || qid > ctrl.io_queues() {
        return ConnectOutcome::invalid(ConnectInvalidParameter::QID);
    }
    if !ctrl.is_enabled() {
        return ConnectOutcome::status(
            Status::generic(GenericStatus::CommandSequenceError).with_dnr(),
        );
    }
    let mqes = capabilities(&reg.limits).mqes();
    if cmd.sqsize() == 0 || cmd.sqsize() > mqes {
        return ConnectOutcome::invalid(ConnectInvalidParameter::SQSIZE);
    }
    if let Err(status) = ctrl.connect_queue(qid) {
        return ConnectOutcome::status(status);
    }
    let dw0 = accepted_dw0(&ctrl);
    ConnectOutcome::Accepted { ctrl, dw0 }
}

/// DW0 of an accepted Connect: the CNTLID, and AUTHREQ.ATR (bit 17) when the host must
/// authenticate the queue with DH-HMAC-CHAP before anything but Fabrics commands
/// (NVMe Base 2.x §6.3 Figure "Connect Response", §8.13.1), as nvmet's
/// `nvmet_connect_result`.
fn accepted_dw0(ctrl: &Controller) -> u32 {
    let auth = ctrl.subsys.auth_policy(&ctrl.hostnqn).is_some();
    connect_success_dw0(ctrl.cntlid) | if auth { CONNECT_AUTHREQ_ATR } else { 0 }
}

/// Checks a Fabrics Disconnect (NVMe Base 2.x §6.4) received on an I/O queue whose
/// controller is `ctrl`: RECFMT (CDW10 bits 15:0) must be 0, else Incompatible Format
/// (SCT 1h, SC 80h, DNR); a queue with no controller yet (no Connect): Command Sequence
/// Error (DNR). The caller then deletes the queue once every other command of it is
/// answered, the Disconnect's CQE last.
pub fn disconnect_check(ctrl: Option<&Controller>, sqe: &Sqe) -> Result<(), Status> {
    if sqe.cdw10() & 0xFFFF != 0 {
        return Err(
            Status::command_specific(CommandSpecificStatus::ConnectIncompatibleFormat).with_dnr(),
        );
    }
    ctrl.map(|_| ()).ok_or_else(no_controller)
}

fn no_controller() -> Status {
    Status::generic(GenericStatus::CommandSequenceError).with_dnr()
}

fn invalid_field() -> Status {
    Status::generic(GenericStatus::InvalidField).with_dnr()
}

/// Property Get (NVMe Base 2.x §6.6): the value of CAP (8-byte size only), VS, CC or
/// CSTS (4-byte size) of `ctrl`; the caller puts it in DW0 (and DW1 for CAP).
///
/// Errors (with DNR): Command Sequence Error when the queue has no controller yet;
/// Invalid Field in Command for another command, another offset, or a size that does
/// not match the property (as nvmet).
pub fn property_get(ctrl: Option<&Controller>, sqe: &Sqe) -> Result<u64, Status> {
    let ctrl = ctrl.ok_or_else(no_controller)?;
    let cmd = PropertyGetCommand::from_sqe(sqe).map_err(|_| invalid_field())?;
    let eight = cmd.attrib() & 1 != 0;
    match (eight, cmd.property()) {
        (true, Some(Property::Cap)) => Ok(capabilities(ctrl.limits()).0),
        (false, Some(Property::Vs)) => Ok(u64::from(ctrl.subsys.version.0)),
        (false, Some(Property::Cc)) => Ok(u64::from(ctrl.cc().0)),
        (false, Some(Property::Csts)) => Ok(u64::from(ctrl.csts().0)),
        _ => Err(invalid_field()),
    }
}

/// Property Set (NVMe Base 2.x §6.7): only CC (4-byte size) is writable; see
/// [`Controller::update_cc`] for its effects (EN sets CSTS.RDY, SHN sets SHST).
///
/// Errors (with DNR): Command Sequence Error when the queue has no controller yet;
/// Invalid Field in Command for another command, an 8-byte size, or another offset.
pub fn property_set(ctrl: Option<&Controller>, sqe: &Sqe) -> Result<(), Status> {
    property_set_at(ctrl, sqe, Instant::now())
}

/// [`property_set`] at time `now` (enabling restarts the Keep Alive timer).
pub fn property_set_at(ctrl: Option<&Controller>, sqe: &Sqe, now: Instant) -> Result<(), Status> {
    let ctrl = ctrl.ok_or_else(no_controller)?;
    let cmd = PropertySetCommand::from_sqe(sqe).map_err(|_| invalid_field())?;
    if cmd.attrib() & 1 != 0 {
        return Err(invalid_field());
    }
    match cmd.property() {
        Some(Property::Cc) => {
            ctrl.update_cc(nvme::properties::Cc(cmd.value() as u32), now);
            Ok(())
        }
        _ => Err(invalid_field()),
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::subsystem::tests::{registry_with, ALLOWED_HOST, HOST, REF_NQN, RESTRICTED_NQN};
    use nvme::properties::{Cc, Csts, PropertySize};
    use nvme::{Cqe, NVMF_DISCOVERY_NQN};
    use zerocopy::IntoBytes;

    pub const HOSTID: [u8; 16] = [
        0xcf, 0x25, 0x66, 0x0b, 0x40, 0x36, 0x4a, 0x6d, 0x88, 0xa2, 0x80, 0xc8, 0x57, 0xdb, 0xb5,
        0x7a,
    ];

    pub fn connect_data(cntlid: u16, subnqn: &str, hostnqn: &str) -> Vec<u8> {
        ConnectData::new(HOSTID, cntlid, subnqn, hostnqn)
            .unwrap()
            .as_bytes()
            .to_vec()
    }

    /// Admin Connect as Linux sends it (SQSIZE 31, KATO 5000) -> the controller.
    pub fn admin_connect(reg: &Registry, subnqn: &str, hostnqn: &str) -> ConnectOutcome {
        let sqe = Sqe::connect(0, 0, 31, 5000);
        connect(
            reg,
            0,
            &sqe,
            &connect_data(0xFFFF, subnqn, hostnqn),
            Instant::now(),
        )
    }

    /// Connects and enables a controller (CC 00460061).
    pub fn enabled_controller(reg: &Registry, subnqn: &str) -> Arc<Controller> {
        let ConnectOutcome::Accepted { ctrl, .. } = admin_connect(reg, subnqn, HOST) else {
            panic!("connect refused");
        };
        let set = Sqe::property_set(1, Property::Cc, 0x0046_0061);
        property_set(Some(&ctrl), &set).unwrap();
        ctrl
    }

    fn refused(o: ConnectOutcome) -> (u16, u32) {
        match o {
            ConnectOutcome::Refused { status, dw0 } => (status.to_field(), dw0),
            ConnectOutcome::Accepted { .. } => panic!("accepted"),
        }
    }

    #[test]
    fn admin_and_io_connect_succeed() {
        let reg = registry_with(vec![]);
        let ConnectOutcome::Accepted { ctrl, dw0 } = admin_connect(&reg, REF_NQN, HOST) else {
            panic!("refused");
        };
        // Capture (c): DW0 0x00000001 = CNTLID 1.
        assert_eq!(dw0, 1);
        assert_eq!(ctrl.cntlid, 1);
        assert_eq!(ctrl.hostid, HOSTID);
        assert_eq!(ctrl.hostnqn, HOST);
        assert_eq!(ctrl.kato_ms(), 5000);
        assert!(reg.controller(1).is_some());

        // I/O queue before enabling: Command Sequence Error.
        let io = Sqe::connect(0, 1, 127, 0);
        let data = connect_data(1, REF_NQN, HOST);
        assert_eq!(
            refused(connect(&reg, 0, &io, &data, Instant::now())).0,
            0x8018
        );

        property_set(
            Some(&ctrl),
            &Sqe::property_set(1, Property::Cc, 0x0046_0061),
        )
        .unwrap();
        match connect(&reg, 0, &io, &data, Instant::now()) {
            ConnectOutcome::Accepted { ctrl: c, dw0 } => {
                assert_eq!(dw0, 1);
                assert!(Arc::ptr_eq(&c, &ctrl));
            }
            ConnectOutcome::Refused { status, .. } => panic!("{status}"),
        }
        // The same QID twice: Command Sequence Error, DNR.
        assert_eq!(
            refused(connect(&reg, 0, &io, &data, Instant::now())),
            (0x8018, 0)
        );
        // A second admin Connect gets the next CNTLID.
        let ConnectOutcome::Accepted { dw0, .. } = admin_connect(&reg, REF_NQN, HOST) else {
            panic!("refused");
        };
        assert_eq!(dw0, 2);
    }

    #[test]
    fn unknown_subsystem_matches_capture() {
        let reg = registry_with(vec![]);
        let (field, dw0) = refused(admin_connect(
            &reg,
            "nqn.2026-11.io.example:nosuchsubsys",
            HOST,
        ));
        // linux-nvme-rdma-errors.pcap (a): status field 0x8304, DW0 0x00010100.
        assert_eq!(field, 0x8304);
        assert_eq!(dw0, 0x0001_0100);
        let cqe = Cqe::new(0, 0, 0, Status::from_field(field), dw0);
        assert_eq!(
            cqe.to_array(),
            [0x00, 0x01, 0x01, 0x00, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x04, 0x83]
        );
        assert!(reg.controllers().is_empty());
    }

    #[test]
    fn host_not_allowed_matches_capture() {
        let reg = registry_with(vec![]);
        let (field, dw0) = refused(admin_connect(&reg, RESTRICTED_NQN, HOST));
        // Capture (b): raw 00020100 ... 0883: status 0x8308, DW0 0x00010200.
        assert_eq!(field, 0x8308);
        assert_eq!(dw0, 0x0001_0200);
        assert!(matches!(
            admin_connect(&reg, RESTRICTED_NQN, ALLOWED_HOST),
            ConnectOutcome::Accepted { .. }
        ));
    }

    #[test]
    fn discovery_nqn_connects_to_a_discovery_controller() {
        let reg = registry_with(vec![]);
        let sqe = Sqe::connect(0, 0, 31, 0);
        let out = connect(
            &reg,
            0,
            &sqe,
            &connect_data(0xFFFF, NVMF_DISCOVERY_NQN, HOST),
            Instant::now(),
        );
        let ConnectOutcome::Accepted { ctrl, .. } = out else {
            panic!("refused")
        };
        assert_eq!(ctrl.kind, crate::controller::ControllerKind::Discovery);
        assert!(ctrl.subsys.is_discovery());
    }

    #[test]
    fn discovery_off_refuses_the_discovery_nqn_as_unknown() {
        let on = registry_with(vec![]);
        let reg = Registry::with_ports(
            on.subsystems().to_vec(),
            on.ports().to_vec(),
            on.limits,
            false,
        );
        let sqe = Sqe::connect(0, 0, 31, 0);
        let data = connect_data(0xFFFF, NVMF_DISCOVERY_NQN, HOST);
        // As for an unknown subsystem (capture (a)): status 0x8304, DW0 00010100h.
        assert_eq!(
            refused(connect(&reg, 0, &sqe, &data, Instant::now())),
            (0x8304, 0x0001_0100)
        );
        assert!(reg.controllers().is_empty());
        assert!(matches!(
            admin_connect(&reg, REF_NQN, HOST),
            ConnectOutcome::Accepted { .. }
        ));
    }

    #[test]
    fn wrong_cntlid_and_host() {
        let reg = registry_with(vec![]);
        // Admin queue must ask for FFFFh.
        let sqe = Sqe::connect(0, 0, 31, 5000);
        let out = connect(
            &reg,
            0,
            &sqe,
            &connect_data(1, REF_NQN, HOST),
            Instant::now(),
        );
        assert_eq!(refused(out), (0x8304, 0x0001_0010));
        let ctrl = enabled_controller(&reg, REF_NQN);
        let io = Sqe::connect(0, 1, 127, 0);
        // Unknown controller.
        let out = connect(
            &reg,
            0,
            &io,
            &connect_data(77, REF_NQN, HOST),
            Instant::now(),
        );
        assert_eq!(refused(out), (0x8304, 0x0001_0010));
        // Right CNTLID, other subsystem.
        let out = connect(
            &reg,
            0,
            &io,
            &connect_data(ctrl.cntlid, RESTRICTED_NQN, HOST),
            Instant::now(),
        );
        assert_eq!(refused(out), (0x8304, 0x0001_0010));
        // Right CNTLID, another host NQN: nvmet answers IPO 16 too.
        let out = connect(
            &reg,
            0,
            &io,
            &connect_data(ctrl.cntlid, REF_NQN, ALLOWED_HOST),
            Instant::now(),
        );
        assert_eq!(refused(out), (0x8304, 0x0001_0010));
    }

    #[test]
    fn bad_sqsize_qid_recfmt_and_short_data() {
        let reg = registry_with(vec![]);
        let now = Instant::now();
        let data = connect_data(0xFFFF, REF_NQN, HOST);
        // Admin SQSIZE 0 or above 31: IATTR 0, IPO 44.
        for sqsize in [0u16, 32] {
            let out = connect(&reg, 0, &Sqe::connect(0, 0, sqsize, 0), &data, now);
            assert_eq!(refused(out), (0x8304, 44));
        }
        let ctrl = enabled_controller(&reg, REF_NQN);
        let io_data = connect_data(ctrl.cntlid, REF_NQN, HOST);
        for sqsize in [0u16, 128] {
            let out = connect(&reg, 0, &Sqe::connect(0, 1, sqsize, 0), &io_data, now);
            assert_eq!(refused(out), (0x8304, 44));
        }
        assert!(matches!(
            connect(&reg, 0, &Sqe::connect(0, 1, 127, 0), &io_data, now),
            ConnectOutcome::Accepted { .. }
        ));
        // QID above the granted I/O queues: IPO 42.
        let out = connect(&reg, 0, &Sqe::connect(0, 9, 127, 0), &io_data, now);
        assert_eq!(refused(out), (0x8304, 42));
        // RECFMT 1: Connect Incompatible Format (80h), DNR.
        let mut c = ConnectCommand::new(0, 0, 31, 0);
        c.set_recfmt(1);
        assert_eq!(
            refused(connect(&reg, 0, &c.to_sqe(), &data, now)),
            (0x8300, 0)
        );
        // Short data: Data SGL Length Invalid (0Fh), DNR.
        assert_eq!(
            refused(connect(
                &reg,
                0,
                &Sqe::connect(0, 0, 31, 0),
                &data[..512],
                now
            )),
            (0x801E, 0)
        );
        // Not a Connect.
        assert_eq!(
            refused(connect(&reg, 0, &Sqe::keep_alive(1), &data, now)).0,
            0x8004
        );
    }

    #[test]
    fn properties_of_a_controller() {
        let reg = registry_with(vec![]);
        let ConnectOutcome::Accepted { ctrl, .. } = admin_connect(&reg, REF_NQN, HOST) else {
            panic!("refused");
        };
        let get = |p| property_get(Some(&ctrl), &Sqe::property_get(1, p));
        // Capture frame 15: CAP 0000_0820_0f00_007f; frame 39: VS 00010300.
        assert_eq!(get(Property::Cap), Ok(0x0000_0820_0f00_007f));
        assert_eq!(get(Property::Vs), Ok(0x0001_0300));
        assert_eq!(get(Property::Csts), Ok(0));
        property_set(
            Some(&ctrl),
            &Sqe::property_set(1, Property::Cc, 0x0046_0060),
        )
        .unwrap();
        assert_eq!(get(Property::Cc), Ok(0x0046_0060));
        assert_eq!(get(Property::Csts), Ok(0));
        property_set(
            Some(&ctrl),
            &Sqe::property_set(1, Property::Cc, 0x0046_0061),
        )
        .unwrap();
        assert_eq!(get(Property::Csts), Ok(1));
        assert!(ctrl.is_enabled());
        property_set(
            Some(&ctrl),
            &Sqe::property_set(1, Property::Cc, 0x0046_4061),
        )
        .unwrap();
        assert_eq!(Csts(get(Property::Csts).unwrap() as u32), Csts(8));
        assert_eq!(get(Property::Cc), Ok(0));

        // Wrong sizes and offsets: Invalid Field, DNR (0x8004).
        let bad = PropertyGetCommand::new(1, 0, PropertySize::FourBytes).to_sqe();
        assert_eq!(
            property_get(Some(&ctrl), &bad).unwrap_err().to_field(),
            0x8004
        );
        let bad = PropertyGetCommand::new(1, 0x14, PropertySize::EightBytes).to_sqe();
        assert!(property_get(Some(&ctrl), &bad).is_err());
        let bad = PropertyGetCommand::new(1, 0x20, PropertySize::FourBytes).to_sqe();
        assert!(property_get(Some(&ctrl), &bad).is_err());
        let bad = PropertySetCommand::new(1, 0x14, PropertySize::EightBytes, 1).to_sqe();
        assert!(property_set(Some(&ctrl), &bad).is_err());
        assert!(property_set(Some(&ctrl), &Sqe::property_set(1, Property::Csts, 1)).is_err());
        // No controller on the queue yet: Command Sequence Error, DNR.
        assert_eq!(
            property_get(None, &Sqe::property_get(1, Property::Cap))
                .unwrap_err()
                .to_field(),
            0x8018
        );
        let _ = Cc(0);
    }

    #[test]
    fn a_subsystem_not_linked_to_the_port_is_unknown_there() {
        let on = registry_with(vec![]);
        let mut ports = on.ports().to_vec();
        ports[0].subsystems = Some(vec![RESTRICTED_NQN.to_string()]);
        ports.push(crate::subsystem::PortInfo::new(ports[0].traddr, 4421));
        let reg = Registry::with_ports(on.subsystems().to_vec(), ports, on.limits, true);
        let sqe = Sqe::connect(0, 0, 31, 0);
        let data = connect_data(0xFFFF, REF_NQN, HOST);
        // Port 0 links only the restricted subsystem: as an unknown NQN (nvmet's
        // answer for a subsystem not linked to the port), status 0x8304, DW0 00010100h.
        assert_eq!(
            refused(connect(&reg, 0, &sqe, &data, Instant::now())),
            (0x8304, 0x0001_0100)
        );
        // Port 1 serves every subsystem; the controller remembers its port.
        let ConnectOutcome::Accepted { ctrl, .. } = connect(&reg, 1, &sqe, &data, Instant::now())
        else {
            panic!("refused on the port that serves it");
        };
        assert_eq!(ctrl.port, 1);
        // The discovery subsystem is on every port.
        let disc = connect_data(0xFFFF, NVMF_DISCOVERY_NQN, HOST);
        assert!(matches!(
            connect(&reg, 0, &sqe, &disc, Instant::now()),
            ConnectOutcome::Accepted { .. }
        ));
    }
}
