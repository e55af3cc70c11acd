//! The software RoCEv2 provider: real RoCEv2 packets (IPv4/IPv6, UDP port 4791, BTH,
//! ICRC) over UDP sockets, so it runs anywhere and talks to Linux Soft-RoCE.
//!
//! - [`SoftProvider`]: the provider traits of [`crate::verbs::provider`] on the types
//!   below;
//! - [`SoftDevice`]: one local IP address, its sockets, memory keys and QP numbers;
//! - [`Context`]: a poll group (one thread) driving its QPs' sans-IO RC cores;
//! - [`CmAgent`]: QP1 and the connection manager, on a thread of its own;
//! - [`conn`]: connection bring-up (QP Init -> RTR -> RTS around the CM exchange), as
//!   librdmacm does it for the verbs provider;
//! - [`fault`]: seeded drop, duplication, reordering and corruption on receive, for tests;
//! - [`rx_buffer`]: the receive buffer the kernel granted and the RC windows sized from it;
//! - [`floor`]: the busy-polled UDP round trip under every round trip of this provider;
//! - [`xdp`]: AF_XDP, the packet path past the kernel's UDP stack (root only).
mod cm_agent;
pub mod conn;
mod context;
mod device;
pub mod fault;
pub mod floor;
mod provider;
pub mod rx_buffer;
mod rx_check;
pub mod socket;
pub mod xdp;

/// The provider-agnostic handles (`crate::verbs`), re-exported where the soft provider's
/// own used to be so that `transport::soft::{Cq, Pd, Qp, QpInitAttr, Srq}` keeps naming
/// them.
pub use crate::verbs::{Cq, Pd, Qp, QpInitAttr, Srq};
pub use cm_agent::*;
pub use context::*;
pub use device::*;
pub use fault::{FaultConfig, FaultConfigError, FaultCounters, FaultCountersSnapshot};
pub use provider::{SoftOptions, SoftProvider};
