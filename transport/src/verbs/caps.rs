//! Device capabilities (`struct ibv_device_attr`, IBTA Vol 1 §11.2.1.2) and the checks
//! that turn a request beyond them into [`VerbsError::CapabilityExceeded`] before the
//! device sees it.
use crate::verbs::{QpCap, VerbsError};

/// What a device supports, from `ibv_query_device` (verbs provider) or the soft
/// provider's own limits. Counts are per object unless stated.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DeviceCaps {
    /// Most work requests of one send or receive queue (`max_qp_wr`).
    pub max_qp_wr: u32,
    /// Most SGEs of one send or receive work request (`max_sge`).
    pub max_sge: u32,
    /// Most SGEs of one RDMA READ work request (`max_sge_rd`).
    pub max_sge_rd: u32,
    /// Most receive work requests of one SRQ (`max_srq_wr`).
    pub max_srq_wr: u32,
    /// Most SGEs of one SRQ receive work request (`max_srq_sge`).
    pub max_srq_sge: u32,
    /// Most entries of one CQ (`max_cqe`).
    pub max_cqe: u32,
    /// Most QPs of the device (`max_qp`).
    pub max_qp: u32,
    /// Most RDMA READs / atomics a QP accepts in flight as responder, IRD
    /// (`max_qp_rd_atom`): bounds `QpAttr::max_dest_rd_atomic`.
    pub max_qp_rd_atom: u32,
    /// Most RDMA READs / atomics a QP issues in flight as requester, ORD
    /// (`max_qp_init_rd_atom`): bounds `QpAttr::max_rd_atomic`.
    pub max_qp_init_rd_atom: u32,
    /// Most inline data bytes of a send WR that a QP was granted at creation. The device
    /// attribute does not exist in ibverbs: this is what a probe QP got (0 = unknown;
    /// the per-QP granted value is what counts).
    pub max_inline_data: u32,
    /// Largest MR in bytes (`max_mr_size`).
    pub max_mr_size: u64,
    /// Most MRs (`max_mr`).
    pub max_mr: u32,
    /// Most memory windows (`max_mw`); 0 = no memory windows.
    pub max_mw: u32,
    /// Most PDs (`max_pd`).
    pub max_pd: u32,
    /// Local CA ACK delay (4.096 us x 2^value).
    pub local_ca_ack_delay: u8,
    /// Physical ports.
    pub phys_port_cnt: u8,
}

fn within(what: &'static str, asked: u32, max: u32) -> Result<(), VerbsError> {
    if asked > max {
        Err(VerbsError::CapabilityExceeded { what, asked, max })
    } else {
        Ok(())
    }
}

impl DeviceCaps {
    /// Checks the queue sizes of a QP to be created (`ibv_create_qp`'s EINVAL cases):
    /// `max_send_wr`/`max_recv_wr` against `max_qp_wr`, the SGE counts against
    /// `max_sge`. With `on_srq` the receive sizes are not the QP's and are not checked.
    ///
    /// # Errors
    /// [`VerbsError::CapabilityExceeded`] naming the first field over its limit.
    pub fn check_qp_cap(&self, cap: &QpCap, on_srq: bool) -> Result<(), VerbsError> {
        within("max_send_wr (max_qp_wr)", cap.max_send_wr, self.max_qp_wr)?;
        within("max_send_sge (max_sge)", cap.max_send_sge, self.max_sge)?;
        if !on_srq {
            within("max_recv_wr (max_qp_wr)", cap.max_recv_wr, self.max_qp_wr)?;
            within("max_recv_sge (max_sge)", cap.max_recv_sge, self.max_sge)?;
        }
        Ok(())
    }

    /// Checks an SRQ of `max_wr` receive WRs of `max_sge` SGEs each.
    ///
    /// # Errors
    /// [`VerbsError::CapabilityExceeded`] for `max_srq_wr` or `max_srq_sge`.
    pub fn check_srq(&self, max_wr: u32, max_sge: u32) -> Result<(), VerbsError> {
        within("SRQ max_wr (max_srq_wr)", max_wr, self.max_srq_wr)?;
        within("SRQ max_sge (max_srq_sge)", max_sge, self.max_srq_sge)
    }

    /// Checks a CQ of `cqe` entries.
    ///
    /// # Errors
    /// [`VerbsError::CapabilityExceeded`] for `max_cqe`.
    pub fn check_cq(&self, cqe: u32) -> Result<(), VerbsError> {
        within("CQ entries (max_cqe)", cqe, self.max_cqe)
    }

    /// Checks a QP's RDMA READ depths: `max_rd_atomic` (ORD, as requester) against
    /// `max_qp_init_rd_atom`, `max_dest_rd_atomic` (IRD, as responder) against
    /// `max_qp_rd_atom`.
    ///
    /// # Errors
    /// [`VerbsError::CapabilityExceeded`] for the depth over its limit.
    pub fn check_rd_atomic(
        &self,
        max_rd_atomic: Option<u8>,
        max_dest_rd_atomic: Option<u8>,
    ) -> Result<(), VerbsError> {
        if let Some(ord) = max_rd_atomic {
            within(
                "max_rd_atomic (max_qp_init_rd_atom)",
                ord.into(),
                self.max_qp_init_rd_atom,
            )?;
        }
        if let Some(ird) = max_dest_rd_atomic {
            within(
                "max_dest_rd_atomic (max_qp_rd_atom)",
                ird.into(),
                self.max_qp_rd_atom,
            )?;
        }
        Ok(())
    }

    /// The initiator depth (ORD) a connection may use: what the caller wants, capped by
    /// the device's `max_qp_init_rd_atom` and the peer's responder resources (as
    /// rdma_cm and SPDK cap it).
    pub fn ord_for(&self, wanted: u8, peer_responder_resources: u8) -> u8 {
        let dev = u8::try_from(self.max_qp_init_rd_atom).unwrap_or(u8::MAX);
        wanted.min(dev).min(peer_responder_resources)
    }

    /// The responder resources (IRD) a connection may offer: what the caller wants,
    /// capped by the device's `max_qp_rd_atom` and the peer's initiator depth.
    pub fn ird_for(&self, wanted: u8, peer_initiator_depth: u8) -> u8 {
        let dev = u8::try_from(self.max_qp_rd_atom).unwrap_or(u8::MAX);
        wanted.min(dev).min(peer_initiator_depth)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn caps() -> DeviceCaps {
        // Linux rxe's limits (drivers/infiniband/sw/rxe/rxe_param.h).
        DeviceCaps {
            max_qp_wr: 0x4000,
            max_sge: 32,
            max_sge_rd: 32,
            max_srq_wr: 0x4000,
            max_srq_sge: 27,
            max_cqe: 0x7FFF,
            max_qp: 0x10000,
            max_qp_rd_atom: 128,
            max_qp_init_rd_atom: 128,
            ..Default::default()
        }
    }

    #[test]
    fn qp_cap_within_and_beyond() {
        let c = caps();
        let mut cap = QpCap::default();
        assert_eq!(c.check_qp_cap(&cap, false), Ok(()));
        cap.max_send_sge = 33;
        assert_eq!(
            c.check_qp_cap(&cap, false),
            Err(VerbsError::CapabilityExceeded {
                what: "max_send_sge (max_sge)",
                asked: 33,
                max: 32
            })
        );
        cap.max_send_sge = 4;
        cap.max_recv_wr = 0x4001;
        assert!(matches!(
            c.check_qp_cap(&cap, false),
            Err(VerbsError::CapabilityExceeded { asked: 0x4001, .. })
        ));
        // On an SRQ the QP's own receive sizes do not matter.
        assert_eq!(c.check_qp_cap(&cap, true), Ok(()));
    }

    #[test]
    fn srq_cq_and_rd_atomic_limits() {
        let c = caps();
        assert_eq!(c.check_srq(0x4000, 1), Ok(()));
        assert!(c.check_srq(0x4001, 1).is_err());
        assert!(c.check_srq(16, 28).is_err());
        assert!(c.check_cq(0x8000).is_err());
        let small = DeviceCaps {
            max_qp_rd_atom: 16,
            max_qp_init_rd_atom: 8,
            ..c
        };
        assert_eq!(small.check_rd_atomic(Some(8), Some(16)), Ok(()));
        assert_eq!(
            small.check_rd_atomic(Some(9), None),
            Err(VerbsError::CapabilityExceeded {
                what: "max_rd_atomic (max_qp_init_rd_atom)",
                asked: 9,
                max: 8
            })
        );
        assert!(small.check_rd_atomic(None, Some(17)).is_err());
        assert_eq!(small.ord_for(32, 4), 4);
        assert_eq!(small.ord_for(32, 255), 8);
        assert_eq!(small.ird_for(255, 255), 16);
    }
}
