//! The software RoCEv2 provider: real RoCEv2 packets (IPv4/IPv6, UDP port 4791, BTH,
//! ICRC) over UDP sockets, so it runs anywhere and talks to Linux Soft-RoCE.
//!
//! - [`SoftProvider`]: the provider traits of [`crate::verbs::provider`] on the types
//!   below;
//! - [`SoftDevice`]: one local IP address, its sockets, memory keys and QP numbers;
//! - [`Context`]: a poll group (one thread) driving its QPs' sans-IO cores (RC, UC, UD);
//! - [`CmAgent`]: QP1 and the connection manager, on a thread of its own;
//! - [`conn`]: connection bring-up (QP Init -> RTR -> RTS around the CM exchange), as
//!   librdmacm does it for the verbs provider;
//! - [`fault`]: seeded drop, duplication, reordering and corruption on receive, for tests;
//! - [`rx_queue`]: the fault layer's rate-limited, RED-marking receive queue (incast);
//! - [`rx_buffer`]: the receive buffer the kernel granted and the RC windows sized from it;
//! - [`floor`]: the busy-polled UDP round trip under every round trip of this provider;
//! - [`qp_registry`], [`info_socket`]: each device's QPs and counters, answered to
//!   `rdma-info` on a Unix socket;
//! - [`xdp`]: AF_XDP, the packet path past the kernel's UDP stack (root only).
mod cm_agent;
pub mod conn;
mod context;
mod device;
pub mod fault;
pub mod floor;
pub mod info_socket;
mod provider;
mod qp_core;
pub mod qp_registry;
pub mod rx_buffer;
mod rx_check;
pub mod rx_queue;
pub mod socket;
pub mod xdp;

/// The provider-agnostic handles (`crate::verbs`), re-exported where the soft provider's
/// own used to be so that `transport::soft::{Cq, Pd, Qp, QpInitAttr, Srq}` keeps naming
/// them.
pub use crate::verbs::{Cq, Pd, Qp, QpInitAttr, Srq};
pub use cm_agent::*;
pub use context::*;
pub use device::*;
pub use fault::{FaultConfig, FaultConfigError, FaultCounters, FaultCountersSnapshot, CE_MARK_ENV};
pub use provider::{SoftOptions, SoftProvider};
pub use rx_queue::RxQueueConfig;

/// ECN bits of the ToS / traffic class byte (RFC 3168).
pub const ECN_MASK: u8 = 0x03;
/// ECN codepoint ECT(0): what the soft provider sends (DESIGN: ToS is masked from the
/// ICRC; a receiver that sees CE answers with a CNP).
pub const ECN_ECT0: u8 = 0x02;

/// The ToS / traffic class byte the soft provider sends for a path's `traffic_class`:
/// its DSCP (bits 7:2, e.g. 0x60 for DSCP 24, which RoCE deployments map to a lossless
/// PFC priority) with ECT(0) in the ECN bits, whatever the path's ECN bits were.
pub const fn tos_byte(traffic_class: u8) -> u8 {
    (traffic_class & !ECN_MASK) | ECN_ECT0
}
