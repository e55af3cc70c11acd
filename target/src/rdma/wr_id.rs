//! The id every work request of a poll group carries (`wr_id`, IBTA Vol 1 §11.4.1.1):
//! what the work request is and which receive buffer or request it belongs to, as SPDK
//! types its work requests (`enum spdk_nvmf_rdma_wr_type`) instead of packing bits ad
//! hoc at each post.

/// What a work request is, encoded into its 64-bit `wr_id` by [`WrId::encode`].
///
/// Requests are numbered by their receive buffer: request `req` is the command that
/// arrived in SRQ buffer `req`, and keeps that buffer until it is released.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum WrId {
    /// The receive of SRQ buffer `slot`.
    Recv { slot: u32 },
    /// The RDMA READ that pulls request `req`'s host data (signaled).
    RdmaRead { req: u32 },
    /// The RDMA WRITE that pushes request `req`'s controller data (unsignaled: only an
    /// error completes it on its own).
    RdmaWrite { req: u32 },
    /// The SEND (or SEND with Invalidate) of request `req`'s response capsule (signaled).
    Response { req: u32 },
}

const TAG_SHIFT: u32 = 56;
const TAG_RECV: u64 = 1;
const TAG_RDMA_READ: u64 = 2;
const TAG_RDMA_WRITE: u64 = 3;
const TAG_RESPONSE: u64 = 4;

impl WrId {
    /// The 64-bit `wr_id`: the kind in the top byte, the index in the low 32 bits.
    pub fn encode(self) -> u64 {
        let (tag, index) = match self {
            WrId::Recv { slot } => (TAG_RECV, slot),
            WrId::RdmaRead { req } => (TAG_RDMA_READ, req),
            WrId::RdmaWrite { req } => (TAG_RDMA_WRITE, req),
            WrId::Response { req } => (TAG_RESPONSE, req),
        };
        (tag << TAG_SHIFT) | u64::from(index)
    }

    /// The work request a completion's `wr_id` names; `None` for a value no poll group
    /// posts (another tag, or bits set between the tag and the index).
    pub fn decode(wr_id: u64) -> Option<WrId> {
        if wr_id & 0x00FF_FFFF_0000_0000 != 0 {
            return None;
        }
        let index = wr_id as u32;
        Some(match wr_id >> TAG_SHIFT {
            TAG_RECV => WrId::Recv { slot: index },
            TAG_RDMA_READ => WrId::RdmaRead { req: index },
            TAG_RDMA_WRITE => WrId::RdmaWrite { req: index },
            TAG_RESPONSE => WrId::Response { req: index },
            _ => return None,
        })
    }

    /// The receive buffer (= request) the work request belongs to.
    pub fn index(self) -> u32 {
        match self {
            WrId::Recv { slot } => slot,
            WrId::RdmaRead { req } | WrId::RdmaWrite { req } | WrId::Response { req } => req,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_round_trips_and_strangers_are_refused() {
        for index in [0, 1, 511, u32::MAX] {
            for w in [
                WrId::Recv { slot: index },
                WrId::RdmaRead { req: index },
                WrId::RdmaWrite { req: index },
                WrId::Response { req: index },
            ] {
                assert_eq!(WrId::decode(w.encode()), Some(w));
                assert_eq!(w.index(), index);
            }
        }
        assert_eq!(WrId::decode(0), None, "tag 0");
        assert_eq!(WrId::decode(5 << TAG_SHIFT), None, "unknown tag");
        assert_eq!(
            WrId::decode((1 << TAG_SHIFT) | (1 << 40)),
            None,
            "middle bits"
        );
        assert_ne!(
            WrId::Recv { slot: 3 }.encode(),
            WrId::Response { req: 3 }.encode()
        );
    }
}
