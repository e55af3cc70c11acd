//! Sans-IO Unreliable Datagram core (IBTA Vol 1 §9.8.4, §10.2.5; RoCEv2 Annex A17).
//!
//! [`UdQp`] is one general UD queue pair (not QP1, which the soft provider's CM agent
//! runs): SEND and SEND with immediate only, each work request naming its destination
//! (an address handle, a QP number and a Q_Key, [`crate::verbs::SendOp::UdSend`]), one
//! packet per message (at most the path MTU; a longer one is refused at post time). On
//! receive the DETH's Q_Key must be the QP's own (else the packet is dropped and counted
//! in [`crate::rc::QpCounters::qkey_violations`]); the message lands after the
//! [`GRH_LEN`](crate::verbs::GRH_LEN)-byte GRH area of the receive buffer, which
//! [`grh`] fills from the IP header the packet came with, and the completion carries
//! the DETH's source QP and IBV_WC_GRH.
pub mod grh;
mod qp;
#[cfg(test)]
mod tests;

pub use qp::UdQp;
