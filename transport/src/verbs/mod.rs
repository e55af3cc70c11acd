//! The verbs model: the nouns and values of ibverbs (IBTA Vol 1 ch. 10 and 11), shared by
//! every provider, so the NVMe layers above run unchanged on the soft provider and on a
//! real RNIC.
//!
//! The provider objects (device, context/poll group, PD, MR, MW, CQ, SRQ, QP) live in
//! the provider modules (`crate::soft`, and `crate::rdma` with the `verbs` feature),
//! behind the traits of [`provider`] ([`Provider`], [`Device`], [`Context`],
//! [`MemoryRegion`], [`ConnectionManager`]); this module holds those traits and what
//! the providers exchange: values, handles ([`Pd`], [`Cq`], [`Srq`], [`Qp`]), device
//! capabilities ([`DeviceCaps`]) and the connection API's shapes ([`connection`]).
mod caps;
pub mod connection;
mod handles;
pub mod provider;
mod types;
pub use caps::*;
pub use handles::*;
pub use provider::{
    CmOf, ConnectionManager, Context, ContextOf, Device, DeviceOf, MemoryRegion, MrOf,
    PostReceives, Provider, RoceMtuFixed,
};
pub use types::*;
