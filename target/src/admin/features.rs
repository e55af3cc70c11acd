//! Set Features and Get Features (NVMe Base 2.x §5.15, §5.27): Keep Alive Timer,
//! Asynchronous Event Configuration, Number of Queues, Volatile Write Cache and (Get
//! only) Host Identifier; a discovery controller has the first two.
use nvme::features::{
    FeatureSelect, NumberOfQueues, VolatileWriteCache, AEC_ANA_CHANGE, AEC_DISCOVERY_CHANGE,
    AEC_NS_ATTR, AEC_SMART_MASK,
};
use nvme::status::{CommandSpecificStatus, GenericStatus, Status};
use nvme::{FeatureId, Sqe};

use super::{copy_out, generic, invalid_field, AdminOutcome, Ctx, DataDirection};
use crate::controller::ControllerKind;

/// Asynchronous Event Configuration bits a controller accepts (an I/O controller's
/// Linux host sets 900h: Namespace Attribute and ANA Change Notices).
fn aec_mask(kind: ControllerKind) -> u32 {
    match kind {
        ControllerKind::Io => AEC_SMART_MASK | AEC_NS_ATTR | AEC_ANA_CHANGE,
        ControllerKind::Discovery => AEC_DISCOVERY_CHANGE,
    }
}

/// Get Features moves data only for the Host Identifier (16 bytes).
pub(super) fn data_direction(sqe: &Sqe) -> DataDirection {
    if FeatureId::from_value(sqe.fid()) == Some(FeatureId::HostIdentifier) {
        DataDirection::ControllerToHost(16)
    } else {
        DataDirection::None
    }
}

/// Set Features (09h). Saving (SV) is refused: nothing is saveable.
pub(super) fn set_features(c: &Ctx, sqe: &Sqe, _: &mut [u8]) -> AdminOutcome {
    let ctrl = c.ctrl;
    if sqe.features_save() {
        return AdminOutcome::status(
            Status::command_specific(CommandSpecificStatus::FeatureIdNotSaveable).with_dnr(),
        );
    }
    let io = ctrl.kind == ControllerKind::Io;
    let cdw11 = sqe.cdw11();
    match FeatureId::from_value(sqe.fid()) {
        Some(FeatureId::KeepAliveTimer) => {
            ctrl.set_kato_ms(cdw11, c.now);
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

/// Get Features (0Ah); SEL = supported capabilities answers "changeable".
pub(super) fn get_features(c: &Ctx, sqe: &Sqe, out: &mut [u8]) -> AdminOutcome {
    let ctrl = c.ctrl;
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
