//! Sans-IO Unreliable Connection core (IBTA Vol 1 §9.7.7 and §9.8; Table 37 opcodes
//! 0x20-0x2B).
//!
//! [`UcQp`] is one UC queue pair: a requester that segments SEND and RDMA WRITE work
//! requests (with or without immediate data) into packets and completes each once its
//! last packet has been handed to the driver, and a responder that places them. No
//! ACKs, no retransmission, no timers; no RDMA READ, atomics, SEND with Invalidate or
//! memory windows. Like [`crate::rc::RcQp`] it is fed packets and drained for packets
//! and completions; it reuses the RC core's key table, receive queues, payloads and
//! counters.
//!
//! Loss (IBTA Vol 1 §9.7.7.2.5 and Linux rxe's `check_psn` / `check_op_seq` for UC): a
//! packet whose PSN is not the expected one, or whose opcode does not continue the
//! message in progress, drops the rest of that message; the responder then waits for
//! the next First or Only packet, at whatever PSN, and resumes there. A dropped SEND's
//! receive WR is not completed: the next SEND fills it from the start. What is dropped
//! is counted in [`crate::rc::QpCounters::dropped_msgs`] (and PSN gaps in
//! `out_of_seq_request`).
mod qp;
mod requester;
mod responder;
#[cfg(test)]
mod tests;

pub use qp::UcQp;
