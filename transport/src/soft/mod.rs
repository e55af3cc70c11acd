//! The software RoCEv2 provider: real RoCEv2 packets (IPv4/IPv6, UDP port 4791, BTH,
//! ICRC) over UDP sockets, so it runs anywhere and talks to Linux Soft-RoCE.
//!
//! - [`SoftDevice`]: one local IP address, its sockets, memory keys and QP numbers;
//! - [`Context`]: a poll group (one thread) driving its QPs' sans-IO RC cores;
//! - [`CmAgent`]: QP1 and the connection manager, on a thread of its own;
//! - [`fault`]: seeded drop, duplication, reordering and corruption on receive, for tests;
//! - [`rx_buffer`]: the receive buffer the kernel granted and the RC windows sized from it.
mod cm_agent;
mod context;
mod device;
pub mod fault;
pub mod rx_buffer;
mod rx_check;
pub mod socket;

pub use cm_agent::*;
pub use context::*;
pub use device::*;
pub use fault::{FaultConfig, FaultConfigError, FaultCounters, FaultCountersSnapshot};
