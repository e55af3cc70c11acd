//! Congestion control of one RC QP, as RoCE NICs run it (DCQCN: Zhu et al., "Congestion
//! Control for Large-Scale RDMA Deployments", SIGCOMM 2015; RoCEv2, IBTA Vol 1 Annex
//! A17.9): the **notification point** ([`CnpPacer`], the receiving side) answers
//! CE-marked packets with a CNP to the sending QP, at most one per QP per
//! [`CongestionConfig::np_min_time_between_cnps`]; the **reaction point** (the sending
//! side, a [`CongestionControl`]: [`Dcqcn`], or [`NoCongestionControl`] for peers
//! without ECN) cuts its rate on each CNP, recovers without them and paces the
//! QP's data packets: the requester's and the responder's READ responses alike, as a
//! RoCE NIC's rate limiter holds all of a QP's outgoing traffic (ACKs and CNPs leave
//! unpaced).
//!
//! The interface is small and sans-IO: a CNP arrived, bytes were sent, a timer of the
//! QP's table ([`super::Timers`]) expired, and when the next paced packet may leave.
//! The driver marks a received packet's CE by setting its BTH FECN bit (in RoCEv2 the
//! IP header's ECN field carries it; FECN has no other use there).
mod cnp;
mod dcqcn;

pub use cnp::{cnp_headers, cnp_payload, CnpPacer, CNP_PAYLOAD_LEN};
pub use dcqcn::{Dcqcn, DcqcnParams};

use std::time::Duration;

use super::timers::{Timer, Timers};
use crate::time::Timestamp;

/// Bytes a packet takes on an Ethernet link beyond its RoCE payload, for pacing and
/// byte counting: Ethernet header 14, IPv4 20, UDP 8, BTH 12, ICRC 4 (extension
/// headers and IPv6's 20 more bytes are not counted).
pub const PACKET_OVERHEAD_BYTES: usize = 14 + 20 + 8 + 12 + 4;

/// What the reaction point runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReactionPoint {
    /// No rate control: CNPs are counted (`rp_cnp_ignored`) and change nothing.
    None,
    /// DCQCN with these parameters.
    Dcqcn(DcqcnParams),
}

/// Congestion control of a QP: the reaction point's algorithm and the notification
/// point's CNP spacing. The default is what RoCE NICs ship enabled: DCQCN with
/// ConnectX defaults, and CNPs at most every 50 us per QP (the paper's N).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CongestionConfig {
    /// The reaction point (this QP as a sender).
    pub rp: ReactionPoint,
    /// The notification point (this QP as a receiver): the least time between two CNPs
    /// it sends; `None` sends none (CE marks are still counted).
    pub np_min_time_between_cnps: Option<Duration>,
}

impl Default for CongestionConfig {
    fn default() -> Self {
        CongestionConfig {
            rp: ReactionPoint::Dcqcn(DcqcnParams::default()),
            np_min_time_between_cnps: Some(Duration::from_micros(50)),
        }
    }
}

impl CongestionConfig {
    /// No congestion control at either point.
    pub const OFF: CongestionConfig = CongestionConfig {
        rp: ReactionPoint::None,
        np_min_time_between_cnps: None,
    };
}

/// A reaction point's algorithm. Its timers live in the QP's table ([`Timer::CcRate`],
/// [`Timer::Pacing`]); the QP calls [`CongestionControl::on_timer`] when one expires.
pub trait CongestionControl {
    /// A CNP for this QP arrived at `now`. Returns whether the algorithm acted on it
    /// (`rp_cnp_handled`) rather than ignoring it (`rp_cnp_ignored`).
    fn on_cnp(&mut self, now: Timestamp, timers: &mut Timers) -> bool;
    /// A paced packet of `wire_bytes` (payload plus [`PACKET_OVERHEAD_BYTES`]) left at
    /// `now`.
    fn on_sent(&mut self, now: Timestamp, wire_bytes: usize, timers: &mut Timers);
    /// `timer` of the table expired at `now` (the QP has already disarmed it).
    fn on_timer(&mut self, now: Timestamp, timer: Timer, timers: &mut Timers);
    /// The earliest time the next paced packet may leave; `None`: any time.
    fn next_send_time(&self) -> Option<Timestamp>;
    /// The rate the QP is held to, in Mbit/s; `None` while unlimited.
    fn rate_mbps(&self) -> Option<f64>;
}

/// The reaction point of a QP without congestion control.
#[derive(Clone, Copy, Debug, Default)]
pub struct NoCongestionControl;

impl CongestionControl for NoCongestionControl {
    fn on_cnp(&mut self, _now: Timestamp, _timers: &mut Timers) -> bool {
        false
    }
    fn on_sent(&mut self, _now: Timestamp, _wire_bytes: usize, _timers: &mut Timers) {}
    fn on_timer(&mut self, _now: Timestamp, _timer: Timer, _timers: &mut Timers) {}
    fn next_send_time(&self) -> Option<Timestamp> {
        None
    }
    fn rate_mbps(&self) -> Option<f64> {
        None
    }
}

/// The reaction point a QP runs, chosen by [`ReactionPoint`] (static dispatch: no
/// allocation, no virtual call on the data path).
#[derive(Clone, Debug)]
pub enum Rp {
    /// [`NoCongestionControl`].
    None(NoCongestionControl),
    /// [`Dcqcn`].
    Dcqcn(Dcqcn),
}

impl Rp {
    /// The reaction point `cfg` names.
    pub fn new(cfg: ReactionPoint) -> Self {
        match cfg {
            ReactionPoint::None => Rp::None(NoCongestionControl),
            ReactionPoint::Dcqcn(p) => Rp::Dcqcn(Dcqcn::new(p)),
        }
    }
}

/// Calls `$call` with `$c` bound to whichever algorithm `$rp` holds.
macro_rules! each {
    ($rp:expr, $c:ident => $call:expr) => {
        match $rp {
            Rp::None($c) => $call,
            Rp::Dcqcn($c) => $call,
        }
    };
}

impl CongestionControl for Rp {
    fn on_cnp(&mut self, now: Timestamp, timers: &mut Timers) -> bool {
        each!(self, c => c.on_cnp(now, timers))
    }
    fn on_sent(&mut self, now: Timestamp, wire_bytes: usize, timers: &mut Timers) {
        each!(self, c => c.on_sent(now, wire_bytes, timers))
    }
    fn on_timer(&mut self, now: Timestamp, timer: Timer, timers: &mut Timers) {
        each!(self, c => c.on_timer(now, timer, timers))
    }
    fn next_send_time(&self) -> Option<Timestamp> {
        each!(self, c => c.next_send_time())
    }
    fn rate_mbps(&self) -> Option<f64> {
        each!(self, c => c.rate_mbps())
    }
}
