//! Refused connections by reason: Fabrics Connects the target answered with an error
//! (NVMe Base 2.x §6.3; the reason read back from the status and its IATTR/IPO, which
//! name the offending field) and RDMA CM requests it rejected (NVMe RDMA Transport 1.x
//! §3.3, the RDMA_CM_REJECT status). Counted as they happen, once per connection
//! attempt (never per I/O), in one relaxed atomic per reason.
use std::sync::atomic::{AtomicU64, Ordering};

use nvme::fabrics::ConnectInvalidParameter;
use nvme::status::{CommandSpecificStatus, Status};
use nvme::RdmaCmRejectStatus;

/// Why a connection was refused: the `layer` and `reason` labels of
/// `nvmf_target_refused_connects_total`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Refusal {
    /// Fabrics Connect: the host NQN is not on the subsystem's allow list (Connect
    /// Invalid Host).
    InvalidHost,
    /// Fabrics Connect: no such subsystem (Connect Invalid Parameters, SUBNQN).
    UnknownSubsystem,
    /// Fabrics Connect: a malformed host NQN (Connect Invalid Parameters, HOSTNQN).
    InvalidHostNqn,
    /// Fabrics Connect: an I/O queue for a controller that does not exist, or is
    /// another host's (Connect Invalid Parameters, CNTLID).
    UnknownController,
    /// Fabrics Connect: a queue ID above the I/O queues granted, or not the queue's
    /// (Connect Invalid Parameters, QID).
    QueueIdLimit,
    /// Fabrics Connect: SQSIZE 0 or above the target's queue size (Connect Invalid
    /// Parameters, SQSIZE).
    QueueSizeLimit,
    /// Fabrics Connect: no free controller ID, or the queue is connected already
    /// (Connect Controller Busy).
    ControllerBusy,
    /// Fabrics Connect: an I/O queue before the controller was enabled, or a queue ID
    /// connected twice (Command Sequence Error).
    CommandSequence,
    /// Fabrics Connect: RECFMT not 0 (Connect Incompatible Format).
    IncompatibleFormat,
    /// Fabrics Connect: another status (a malformed command or Connect data).
    OtherFabrics,
    /// RDMA CM: the request's private data was refused (its status, e.g. Invalid
    /// HSQSIZE for a queue larger than the target's limit).
    Cm(RdmaCmRejectStatus),
    /// RDMA CM: the target is shutting down.
    ShuttingDown,
}

/// Every [`Refusal`], in the order they are written.
pub const ALL: [Refusal; 20] = [
    Refusal::InvalidHost,
    Refusal::UnknownSubsystem,
    Refusal::InvalidHostNqn,
    Refusal::UnknownController,
    Refusal::QueueIdLimit,
    Refusal::QueueSizeLimit,
    Refusal::ControllerBusy,
    Refusal::CommandSequence,
    Refusal::IncompatibleFormat,
    Refusal::OtherFabrics,
    Refusal::Cm(RdmaCmRejectStatus::InvalidLen),
    Refusal::Cm(RdmaCmRejectStatus::InvalidRecfmt),
    Refusal::Cm(RdmaCmRejectStatus::InvalidQid),
    Refusal::Cm(RdmaCmRejectStatus::InvalidHsqsize),
    Refusal::Cm(RdmaCmRejectStatus::InvalidHrqsize),
    Refusal::Cm(RdmaCmRejectStatus::NoResources),
    Refusal::Cm(RdmaCmRejectStatus::InvalidIrd),
    Refusal::Cm(RdmaCmRejectStatus::InvalidOrd),
    Refusal::Cm(RdmaCmRejectStatus::InvalidCntlid),
    Refusal::ShuttingDown,
];

impl Refusal {
    /// The refusal of a Fabrics Connect answered with `status` and DW0 `dw0`.
    pub fn of_connect(status: Status, dw0: u32) -> Refusal {
        use CommandSpecificStatus as C;
        match status.as_command_specific() {
            Some(C::ConnectInvalidHost) => Refusal::InvalidHost,
            Some(C::ConnectControllerBusy) => Refusal::ControllerBusy,
            Some(C::ConnectIncompatibleFormat) => Refusal::IncompatibleFormat,
            Some(C::ConnectInvalidParameters) => match ConnectInvalidParameter::from_dw0(dw0) {
                p if p == ConnectInvalidParameter::SUBNQN => Refusal::UnknownSubsystem,
                p if p == ConnectInvalidParameter::HOSTNQN => Refusal::InvalidHostNqn,
                p if p == ConnectInvalidParameter::CNTLID => Refusal::UnknownController,
                p if p == ConnectInvalidParameter::QID => Refusal::QueueIdLimit,
                p if p == ConnectInvalidParameter::SQSIZE => Refusal::QueueSizeLimit,
                _ => Refusal::OtherFabrics,
            },
            _ if status.as_generic() == Some(nvme::status::GenericStatus::CommandSequenceError) => {
                Refusal::CommandSequence
            }
            _ => Refusal::OtherFabrics,
        }
    }

    /// The `layer` label: `"fabrics"` (the Fabrics Connect command) or `"rdma_cm"`.
    pub fn layer(self) -> &'static str {
        match self {
            Refusal::Cm(_) | Refusal::ShuttingDown => "rdma_cm",
            _ => "fabrics",
        }
    }

    /// The `reason` label, in snake case.
    pub fn reason(self) -> &'static str {
        use RdmaCmRejectStatus as S;
        match self {
            Refusal::InvalidHost => "invalid_host",
            Refusal::UnknownSubsystem => "unknown_subsystem",
            Refusal::InvalidHostNqn => "invalid_host_nqn",
            Refusal::UnknownController => "unknown_controller",
            Refusal::QueueIdLimit => "queue_id_limit",
            Refusal::QueueSizeLimit => "queue_size_limit",
            Refusal::ControllerBusy => "controller_busy",
            Refusal::CommandSequence => "command_sequence",
            Refusal::IncompatibleFormat => "incompatible_format",
            Refusal::OtherFabrics => "invalid_command",
            Refusal::Cm(S::InvalidLen) => "invalid_private_data_length",
            Refusal::Cm(S::InvalidRecfmt) => "invalid_recfmt",
            Refusal::Cm(S::InvalidQid) => "queue_id_limit",
            Refusal::Cm(S::InvalidHsqsize) => "queue_size_limit",
            Refusal::Cm(S::InvalidHrqsize) => "invalid_hrqsize",
            Refusal::Cm(S::NoResources) => "no_resources",
            Refusal::Cm(S::InvalidIrd) => "invalid_ird",
            Refusal::Cm(S::InvalidOrd) => "invalid_ord",
            Refusal::Cm(S::InvalidCntlid) => "unknown_controller",
            Refusal::ShuttingDown => "shutting_down",
        }
    }

    fn index(self) -> usize {
        ALL.iter().position(|&r| r == self).unwrap_or(ALL.len() - 1)
    }
}

/// The refusal counters of one target, shared by its poll groups (Fabrics Connects)
/// and its control thread (RDMA CM requests).
#[derive(Debug, Default)]
pub struct ConnectRefusals {
    counts: [AtomicU64; ALL.len()],
}

impl ConnectRefusals {
    /// Counts one refusal.
    pub fn count(&self, r: Refusal) {
        self.counts[r.index()].fetch_add(1, Ordering::Relaxed);
    }

    /// Every reason with its count (zeros included), in [`ALL`]'s order.
    pub fn read(&self) -> Vec<(Refusal, u64)> {
        ALL.iter()
            .zip(self.counts.iter())
            .map(|(&r, c)| (r, c.load(Ordering::Relaxed)))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connect_statuses_map_to_their_reason() {
        let invalid = ConnectInvalidParameter::status();
        assert_eq!(
            Refusal::of_connect(
                Status::command_specific(CommandSpecificStatus::ConnectInvalidHost).with_dnr(),
                ConnectInvalidParameter::HOSTNQN.to_dw0()
            ),
            Refusal::InvalidHost
        );
        for (p, want) in [
            (ConnectInvalidParameter::SUBNQN, Refusal::UnknownSubsystem),
            (ConnectInvalidParameter::HOSTNQN, Refusal::InvalidHostNqn),
            (ConnectInvalidParameter::CNTLID, Refusal::UnknownController),
            (ConnectInvalidParameter::QID, Refusal::QueueIdLimit),
            (ConnectInvalidParameter::SQSIZE, Refusal::QueueSizeLimit),
        ] {
            assert_eq!(Refusal::of_connect(invalid, p.to_dw0()), want);
        }
        let seq = Status::generic(nvme::status::GenericStatus::CommandSequenceError);
        assert_eq!(Refusal::of_connect(seq, 0), Refusal::CommandSequence);
        let c = ConnectRefusals::default();
        c.count(Refusal::InvalidHost);
        c.count(Refusal::Cm(RdmaCmRejectStatus::InvalidHsqsize));
        let r = c.read();
        assert_eq!(r.len(), ALL.len());
        assert!(r.contains(&(Refusal::InvalidHost, 1)));
        assert!(r.contains(&(Refusal::Cm(RdmaCmRejectStatus::InvalidHsqsize), 1)));
        assert_eq!(r.iter().map(|(_, n)| n).sum::<u64>(), 2);
        // Every reason has its own place.
        for (i, r) in ALL.iter().enumerate() {
            assert_eq!(r.index(), i, "{r:?}");
        }
    }
}
