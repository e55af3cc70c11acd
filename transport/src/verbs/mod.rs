//! The verbs model: the nouns and values of ibverbs (IBTA Vol 1 ch. 10 and 11), shared by
//! every provider, so the NVMe layers above run unchanged on the soft provider and on a
//! real RNIC.
//!
//! The provider objects (device, context/poll group, PD, MR, MW, CQ, SRQ, QP) live in
//! the provider module (`crate::soft`); this module holds what they exchange.
mod types;
pub use types::*;
