//! An ibverbs-shaped RDMA model with a userspace RoCEv2 provider.
//!
//! Layout (see `shared/DESIGN.md`):
//! - [`wire`]: RoCEv2 headers (BTH, RETH, AETH, IETH, DETH, ImmDt), the ICRC, packet
//!   parsing and building, and the MAD / CM message layouts (IBTA Vol 1 ch. 9, 12, 13;
//!   RoCEv2 Annex A17).
//! - [`verbs`]: the verbs nouns and values (access flags, QP states and attributes, work
//!   requests, work completions) shared by every provider.
//! - [`rc`]: the sans-IO Reliable Connection core (requester, responder, completer).
//! - [`uc`] and [`ud`]: the sans-IO Unreliable Connection and Unreliable Datagram cores.
//! - [`cm`]: the sans-IO connection manager (RDMA CM semantics on IB CM MADs over QP1).
//! - [`soft`]: the software provider: drives the cores over UDP sockets on port 4791.
//! - `rdma` (cargo feature `verbs`): the verbs provider on a real RDMA device through
//!   libibverbs and librdmacm (`rdma-sys`).
//! - [`sysfs`]: what Linux shows of RDMA devices under `/sys/class/infiniband` (GID
//!   tables, port attributes, hardware counters): file parsing only, no libibverbs.
//! - [`time`]: the timestamp type the sans-IO cores take as `now`.
//! - [`memlock`]: the process's pinned-memory budget (`RLIMIT_MEMLOCK`, every pin counted).
pub mod cm;
pub mod fdlimit;
pub mod kind;
pub mod memlock;
pub mod rc;
#[cfg(feature = "verbs")]
pub mod rdma;
pub mod soft;
pub mod sysfs;
#[cfg(test)]
pub(crate) mod test_captures;
// `transport::` paths inside this crate too, so test support compiled into the unit
// tests and, through `#[path]`, into other crates' tests is written once.
#[cfg(test)]
extern crate self as transport;
pub mod time;
pub mod uc;
pub mod ud;
pub mod verbs;
pub mod wire;

pub use kind::{KindError, PacketPathKind, ProviderKind};
