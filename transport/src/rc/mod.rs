//! Sans-IO Reliable Connection core (IBTA Vol 1 ch. 9.5-9.9; memory §10.6).
//!
//! [`RcQp`] is one RC queue pair: requester, completer and responder as a state machine
//! the driver (the soft provider) feeds with received packets, timer expiries and the
//! current time, and drains for packets to send and work completions, in the style of
//! quinn-proto. No sockets, clocks or threads here. [`KeyTable`] holds the device's
//! memory keys (MRs, type 2 memory windows) and performs the local and remote access
//! checks; [`RecvQueue`] is a receive queue or SRQ.
//!
//! Reliability is go-back-N (IBTA §9.7.5.1.3): a PSN sequence error NAK, a missing READ
//! response or a timer restart transmission at the oldest unacknowledged PSN,
//! regenerating the packets from the work requests and registered memory. Fast
//! recovery on top, invisible on the wire: an adaptive retransmission timer (RFC 6298,
//! [`RttEstimator`]) resends before the IBTA local ACK timeout, which alone uses up
//! `retry_cnt`; the resend is paced (ACK-clocked slow start from
//! [`RcConfig::recovery_window_pkts`]). Between two peers of this project that
//! negotiated it ([`crate::verbs::QpAttr::selective_retransmit`]), selective
//! retransmission: the responder keeps out-of-order requests for in-order execution
//! and NAKs the expected PSN as go-back-N would; the requester resends only that
//! packet. `docs/reliability.md` describes all of it.
pub mod cc;
mod completer;
pub mod counters;
pub mod mem;
pub(crate) mod ops;
pub mod payload;
pub mod psn;
pub mod qp;
pub mod recv_queue;
pub mod region;
mod requester;
mod responder;
pub mod rtt;
#[cfg(test)]
mod tests;
pub mod timers;

pub use counters::QpCounters;
pub use mem::{KeyTable, MemRef, MrKeys, MrMemory};
pub use ops::{ack_timeout, rnr_timer, RNR_TIMER_US};
pub use payload::{Payload, TxPacket};
pub use qp::{Completion, CompletionQueueKind, RcConfig, RcEnv, RcQp};
pub use recv_queue::RecvQueue;
pub use rtt::RttEstimator;
pub use timers::{Timer, Timers};
