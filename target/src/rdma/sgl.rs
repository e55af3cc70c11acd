//! The data of a command as its SGL describes it (NVMe RDMA Transport 1.x §3: SGL1 of
//! the SQE is a keyed data block, the host's memory the target reads or writes by RDMA,
//! or a data block with an offset into the capsule's in-capsule data), checked against
//! what the command moves, before any data moves.
use nvme::status::{GenericStatus, Status};
use nvme::{Sgl, Sqe};

use crate::admin::DataDirection;

/// The host memory of a keyed SGL data block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Keyed {
    /// The host's virtual address.
    pub addr: u64,
    /// The rkey of the host's memory region or window.
    pub key: u32,
    /// Subtype Fh: answer with SEND with Invalidate of `key`.
    pub invalidate: bool,
}

/// How a command's data moves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Transfer {
    /// No data (or a zero-length transfer).
    None,
    /// `len` bytes the target pulls from the keyed SGL by RDMA READ.
    FromHost { len: u32 },
    /// `len` bytes the target pushes to the keyed SGL by RDMA WRITE.
    ToHost { len: u32 },
    /// `len` bytes of in-capsule data, `offset` bytes after the SQE.
    InCapsule { offset: u32, len: u32 },
}

/// A command's data: the transfer and the keyed SGL (also with no transfer, when its key
/// is to be invalidated by the response).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct DataPlan {
    pub keyed: Option<Keyed>,
    pub transfer: Transfer,
}

fn dnr(code: GenericStatus) -> Status {
    Status::generic(code).with_dnr()
}

/// Checks SGL1 of `sqe` against `dir`, the data the command moves, for a capsule with
/// `in_capsule_len` bytes after the SQE, as nvmet-rdma's `nvmet_rdma_map_sgl` does:
///
/// - no data: a keyed SGL is allowed (Linux sends a zero-length one); its key is kept
///   for invalidation when it asks for it;
/// - keyed data block: shorter than the data is Data SGL Length Invalid, except for
///   admin controller-to-host data (`admin`), which may be cut to the SGL (nvmet copies
///   what fits); longer than `max_io_bytes` likewise;
/// - in-capsule data block (subtype offset): host-to-controller only (else SGL
///   Descriptor Type Invalid), the offset within the in-capsule data (else SGL Offset
///   Invalid), the block within it and at least the data's length (else Data SGL
///   Length Invalid);
/// - a data block with an address, or an SGL that does not decode: SGL Descriptor Type
///   Invalid.
///
/// All errors carry DNR.
pub(crate) fn plan(
    sqe: &Sqe,
    admin: bool,
    dir: DataDirection,
    in_capsule_len: usize,
    max_io_bytes: u32,
) -> Result<DataPlan, Status> {
    let (need, h2c) = match dir {
        DataDirection::None => {
            let keyed = match sqe.sgl().decode() {
                Ok(Sgl::KeyedDataBlock {
                    addr,
                    key,
                    invalidate: true,
                    ..
                }) if key != 0 => Some(Keyed {
                    addr,
                    key,
                    invalidate: true,
                }),
                _ => None,
            };
            return Ok(DataPlan {
                keyed,
                transfer: Transfer::None,
            });
        }
        DataDirection::HostToController(n) => (n, true),
        DataDirection::ControllerToHost(n) => (n, false),
    };
    let sgl = sqe
        .sgl()
        .decode()
        .map_err(|_| dnr(GenericStatus::SglDescriptorTypeInvalid))?;
    match sgl {
        Sgl::KeyedDataBlock {
            addr,
            len,
            key,
            invalidate,
        } => {
            let keyed = Some(Keyed {
                addr,
                key,
                invalidate,
            });
            if (len as usize) < need && (h2c || !admin) {
                return Err(dnr(GenericStatus::DataSglLengthInvalid));
            }
            // Admin data may be shorter than the structure (copy what fits, as nvmet).
            let len = if h2c { need } else { need.min(len as usize) };
            if len > max_io_bytes as usize {
                return Err(dnr(GenericStatus::DataSglLengthInvalid));
            }
            let len = len as u32;
            let transfer = match (len, h2c) {
                (0, _) => Transfer::None,
                (_, true) => Transfer::FromHost { len },
                (_, false) => Transfer::ToHost { len },
            };
            Ok(DataPlan { keyed, transfer })
        }
        Sgl::DataBlockOffset { offset, len } => {
            if !h2c {
                return Err(dnr(GenericStatus::SglDescriptorTypeInvalid));
            }
            if offset > in_capsule_len as u64 {
                return Err(dnr(GenericStatus::SglOffsetInvalid));
            }
            let end = offset.checked_add(u64::from(len));
            if end.is_none_or(|e| e > in_capsule_len as u64) || (len as usize) < need {
                return Err(dnr(GenericStatus::DataSglLengthInvalid));
            }
            Ok(DataPlan {
                keyed: None,
                transfer: Transfer::InCapsule {
                    offset: offset as u32,
                    len: need as u32,
                },
            })
        }
        Sgl::DataBlockAddress { .. } => Err(dnr(GenericStatus::SglDescriptorTypeInvalid)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nvme::SglDescriptor;

    fn sqe_with(sgl: SglDescriptor) -> Sqe {
        let mut s = Sqe::new(0x01, 7);
        s.set_sgl(sgl);
        s
    }

    const MDTS: u32 = 1 << 20;

    #[test]
    fn keyed_blocks() {
        let s = sqe_with(SglDescriptor::keyed(0x1000, 4096, 0x55, true).unwrap());
        let p = plan(&s, false, DataDirection::HostToController(4096), 0, MDTS).unwrap();
        assert_eq!(p.transfer, Transfer::FromHost { len: 4096 });
        assert_eq!(
            p.keyed,
            Some(Keyed {
                addr: 0x1000,
                key: 0x55,
                invalidate: true
            })
        );
        let p = plan(&s, false, DataDirection::ControllerToHost(4096), 0, MDTS).unwrap();
        assert_eq!(p.transfer, Transfer::ToHost { len: 4096 });
        // Short: refused for I/O and host data, cut for admin controller data.
        let short = Status::generic(GenericStatus::DataSglLengthInvalid).with_dnr();
        for dir in [
            DataDirection::HostToController(8192),
            DataDirection::ControllerToHost(8192),
        ] {
            assert_eq!(plan(&s, false, dir, 0, MDTS), Err(short));
        }
        let p = plan(&s, true, DataDirection::ControllerToHost(8192), 0, MDTS).unwrap();
        assert_eq!(p.transfer, Transfer::ToHost { len: 4096 });
        assert_eq!(
            plan(&s, false, DataDirection::HostToController(4096), 0, 2048),
            Err(short),
            "beyond MDTS"
        );
        // Zero length with no data: only an invalidating key is kept.
        let null = sqe_with(SglDescriptor::keyed_null());
        let p = plan(&null, false, DataDirection::None, 0, MDTS).unwrap();
        assert_eq!((p.keyed, p.transfer), (None, Transfer::None));
        let p = plan(&s, false, DataDirection::None, 0, MDTS).unwrap();
        assert_eq!(p.keyed.map(|k| k.key), Some(0x55));
    }

    #[test]
    fn in_capsule_blocks() {
        let s = sqe_with(SglDescriptor::inline_offset(16, 1024));
        let p = plan(&s, false, DataDirection::HostToController(1024), 1040, MDTS).unwrap();
        assert_eq!(
            p.transfer,
            Transfer::InCapsule {
                offset: 16,
                len: 1024
            }
        );
        let st = |c| Err(Status::generic(c).with_dnr());
        assert_eq!(
            plan(&s, false, DataDirection::HostToController(1024), 1039, MDTS),
            st(GenericStatus::DataSglLengthInvalid)
        );
        assert_eq!(
            plan(&s, false, DataDirection::HostToController(1024), 8, MDTS),
            st(GenericStatus::SglOffsetInvalid)
        );
        assert_eq!(
            plan(&s, false, DataDirection::HostToController(2048), 4096, MDTS),
            st(GenericStatus::DataSglLengthInvalid)
        );
        assert_eq!(
            plan(&s, false, DataDirection::ControllerToHost(1024), 4096, MDTS),
            st(GenericStatus::SglDescriptorTypeInvalid)
        );
    }
}
