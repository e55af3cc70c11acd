//! NVMe and NVMe over Fabrics wire structures: plain data, no I/O.
//!
//! Every type here is a `#[repr(C)]` [zerocopy] structure with explicit
//! little-endian fields (NVMe is little endian throughout, including the
//! NVMe/RDMA CM private data) and a compile-time size assertion, plus typed
//! accessors and constructors so callers never handle byte offsets.
//!
//! Specifications cited:
//! - NVM Express Base Specification 2.x ("Base"): SQE/CQE (§4.2), SGLs
//!   (§4.3.2), status codes (§4.2.3), admin commands (§5), Fabrics commands
//!   and Connect (§6), Identify data structures (§5.17), log pages (§5.16),
//!   features (§5.27), controller properties (§3.1.4).
//! - NVM Command Set Specification 1.x: Read/Write/Write Zeroes/Dataset
//!   Management, Identify Namespace.
//! - NVM Express over Fabrics 1.1: Connect, properties, discovery log page.
//! - NVM Express RDMA Transport Specification 1.x: keyed SGL data block,
//!   RDMA CM private data (request/accept/reject).
//!
//! Known bytes in the tests come from the Linux reference captures in
//! `testdata/captures/` (frame numbers cited at each test).
//!
//! Modules: [`ana`] (Asymmetric Namespace Access: states, log page, AEN), [`auth`] (DH-HMAC-CHAP messages), [`sqe`], [`sgl`], [`cqe`], [`status`], [`opcodes`], [`fabrics`],
//! [`properties`], [`identify`], [`features`], [`rdma`], [`log`], [`dsm`],
//! [`strings`]. The main types are re-exported at the crate root.

#![warn(missing_docs)]

#[macro_use]
mod macros;

pub mod ana;
pub mod auth;
pub mod cqe;
pub mod dsm;
pub mod fabrics;
pub mod features;
pub mod identify;
pub mod log;
pub mod opcodes;
pub mod properties;
pub mod rdma;
pub mod sgl;
pub mod sqe;
pub mod status;
pub mod strings;

#[cfg(test)]
mod testutil;

pub use ana::{AnaGroupDesc, AnaLog, AnaLogError, AnaState};
pub use cqe::Cqe;
pub use dsm::DsmRange;
pub use fabrics::{
    ConnectCommand, ConnectData, ConnectInvalidParameter, DisconnectCommand, FabricsError,
    ParameterLocation, PropertyGetCommand, PropertySetCommand,
};
pub use features::{AsyncEvent, KeepAliveTimer, NumberOfQueues, VolatileWriteCache};
pub use identify::{
    IdentifyController, IdentifyNamespace, LbaFormat, NamespaceList, NsIdDescriptor,
    NsIdDescriptorError, NsIdDescriptorList,
};
pub use log::{DiscoveryLogEntry, DiscoveryLogPageHeader, ErrorLogEntry, RdmaTsas, SmartLog};
pub use opcodes::{
    AdminOpcode, FabricsCommandType, FeatureId, IdentifyCns, LogPageId, NvmOpcode, FABRICS_OPCODE,
};
pub use properties::{Cap, Cc, Csts, Property, PropertySize, Vs};
pub use rdma::{RdmaCmAccept, RdmaCmError, RdmaCmReject, RdmaCmRejectStatus, RdmaCmRequest};
pub use sgl::{Sgl, SglDescriptor, SglError, SglSubtype, SglType};
pub use sqe::{Sqe, PSDT_SGL_MPTR_CONTIG};
pub use status::{
    CommandSpecificStatus, GenericStatus, MediaStatus, PathStatus, Status, StatusCodeType,
};
pub use strings::StrFieldError;

/// Admin queue depth Linux hosts use (`NVME_AQ_DEPTH`): the admin Connect
/// asks for SQSIZE 31 (0's based) and the CM request for HRQSIZE 32.
pub const NVME_AQ_DEPTH: u16 = 32;

/// NQN of the well-known discovery subsystem (NVMe Base 2.x §4.5,
/// NVMe over Fabrics 1.1 §5).
pub const NVMF_DISCOVERY_NQN: &str = "nqn.2014-08.org.nvmexpress.discovery";

/// Longest NQN in bytes, excluding the NUL (NVMe Base 2.x §4.5); the NQN
/// fields themselves are 256 bytes.
pub const NVME_NQN_MAX: usize = 223;

/// NVMe over Fabrics' IANA-assigned port (TRSVCID 4420), the RDMA CM port of NVMe/RDMA
/// I/O and discovery controllers (NVMe over Fabrics 1.1 §7.4.9).
pub const NVMF_RDMA_PORT: u16 = 4420;

/// Bytes of a submission queue entry, the first 64 bytes of a command capsule (NVMe
/// Base 2.x §4.2; NVMe over Fabrics 1.1 §3.3.1).
pub const SQE_LEN: usize = core::mem::size_of::<Sqe>();

/// Bytes of a completion queue entry, the whole of an NVMe/RDMA response capsule (NVMe
/// Base 2.x §4.6; NVMe over Fabrics 1.1 §3.3.2).
pub const CQE_LEN: usize = core::mem::size_of::<Cqe>();

const _: () = assert!(SQE_LEN == 64 && CQE_LEN == 16);

/// A wire value that none of this crate's enums name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unknown {kind} value {value:#x}")]
pub struct UnknownValue {
    /// The enum that was asked (e.g. `"AdminOpcode"`).
    pub kind: &'static str,
    /// The value found on the wire.
    pub value: u64,
}
