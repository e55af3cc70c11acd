//! The sans-IO core of one soft-provider QP, whichever its transport service: the RC
//! core ([`RcQp`]), the UC core ([`UcQp`]) or the UD core ([`UdQp`]), behind the one
//! set of calls the poll group drives them with.
use std::net::{IpAddr, SocketAddr};

use crate::rc::{Completion, QpCounters, RcConfig, RcEnv, RcQp, TxPacket};
use crate::time::Timestamp;
use crate::uc::UcQp;
use crate::ud::UdQp;
use crate::verbs::{AhAttr, Mtu, QpAttr, QpCap, QpState, QpType, RecvWr, SendWr, VerbsError};
use crate::wire::Packet;

/// One QP's core (RC inline, as the poll group held it before UC and UD: its packets
/// are the hot path).
#[allow(clippy::large_enum_variant)]
pub(crate) enum QpCore {
    Rc(RcQp),
    Uc(UcQp),
    Ud(UdQp),
}

impl QpCore {
    /// A core of `qp_type` in Reset; `mtu` is a UD QP's message limit (the device's
    /// active MTU).
    pub(crate) fn new(
        qp_type: QpType,
        qpn: u32,
        pd: u32,
        cap: QpCap,
        has_srq: bool,
        rc: RcConfig,
        mtu: Mtu,
    ) -> QpCore {
        match qp_type {
            QpType::Rc => QpCore::Rc(RcQp::new(qpn, pd, cap, has_srq, rc)),
            QpType::Uc => QpCore::Uc(UcQp::new(qpn, pd, cap, has_srq)),
            QpType::Ud => QpCore::Ud(UdQp::new(qpn, pd, cap, has_srq, mtu)),
        }
    }

    pub(crate) fn qp_type(&self) -> QpType {
        match self {
            QpCore::Rc(_) => QpType::Rc,
            QpCore::Uc(_) => QpType::Uc,
            QpCore::Ud(_) => QpType::Ud,
        }
    }

    pub(crate) fn state(&self) -> QpState {
        match self {
            QpCore::Rc(q) => q.state(),
            QpCore::Uc(q) => q.state(),
            QpCore::Ud(q) => q.state(),
        }
    }

    /// The connected peer's QPN (0 for UD).
    pub(crate) fn dest_qpn(&self) -> u32 {
        match self {
            QpCore::Rc(q) => q.dest_qpn(),
            QpCore::Uc(q) => q.dest_qpn(),
            QpCore::Ud(_) => 0,
        }
    }

    pub(crate) fn cap(&self) -> QpCap {
        match self {
            QpCore::Rc(q) => q.cap,
            QpCore::Uc(q) => q.cap(),
            QpCore::Ud(q) => q.cap(),
        }
    }

    pub(crate) fn counters(&self) -> &QpCounters {
        match self {
            QpCore::Rc(q) => q.counters(),
            QpCore::Uc(q) => q.counters(),
            QpCore::Ud(q) => q.counters(),
        }
    }

    pub(crate) fn modify(&mut self, attr: &QpAttr) -> Result<(), VerbsError> {
        match self {
            QpCore::Rc(q) => q.modify(attr),
            QpCore::Uc(q) => q.modify(attr),
            QpCore::Ud(q) => q.modify(attr),
        }
    }

    /// Posts a send WR; `ah` is the address a UD send's handle names (resolved by the
    /// poll group), `None` for the connected services.
    pub(crate) fn post_send(&mut self, wr: &SendWr, ah: Option<AhAttr>) -> Result<(), VerbsError> {
        match (self, ah) {
            (QpCore::Rc(q), _) => q.post_send(wr),
            (QpCore::Uc(q), _) => q.post_send(wr),
            (QpCore::Ud(q), Some(ah)) => q.post_send(wr, ah),
            (QpCore::Ud(_), None) => Err(VerbsError::InvalidArgument(
                "a UD QP sends SendOp::UdSend only (SEND with an address handle, QPN and Q_Key)",
            )),
        }
    }

    pub(crate) fn post_recv(&mut self, wr: &RecvWr) -> Result<(), VerbsError> {
        match self {
            QpCore::Rc(q) => q.post_recv(wr),
            QpCore::Uc(q) => q.post_recv(wr),
            QpCore::Ud(q) => q.post_recv(wr),
        }
    }

    /// Hands a packet that came from `from` to `local` in a datagram of `len` bytes
    /// (with ToS `tos`) to the core.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn handle_packet(
        &mut self,
        now: Timestamp,
        pkt: &Packet<'_>,
        from: SocketAddr,
        local: IpAddr,
        len: usize,
        tos: u8,
        env: &mut RcEnv<'_>,
    ) {
        match self {
            QpCore::Rc(q) => q.handle_packet(now, pkt, env),
            QpCore::Uc(q) => q.handle_packet(pkt, env),
            QpCore::Ud(q) => q.handle_packet(pkt, from.ip(), local, len, tos, env),
        }
    }

    pub(crate) fn handle_timeout(&mut self, now: Timestamp, env: &mut RcEnv<'_>) {
        if let QpCore::Rc(q) = self {
            q.handle_timeout(now, env);
        }
    }

    /// The earliest timer (RC only: UC and UD have none).
    pub(crate) fn poll_timeout(&self) -> Option<Timestamp> {
        match self {
            QpCore::Rc(q) => q.poll_timeout(),
            _ => None,
        }
    }

    /// The next packet to send, and for UD the address it goes to.
    pub(crate) fn poll_transmit(
        &mut self,
        now: Timestamp,
        env: &mut RcEnv<'_>,
        requests_first: bool,
    ) -> Option<(TxPacket, Option<AhAttr>)> {
        match self {
            QpCore::Rc(q) if requests_first => {
                q.poll_transmit_requests_first(now, env).map(|p| (p, None))
            }
            QpCore::Rc(q) => q.poll_transmit(now, env).map(|p| (p, None)),
            QpCore::Uc(q) => q.poll_transmit(env).map(|p| (p, None)),
            QpCore::Ud(q) => q.poll_transmit(env).map(|(p, ah)| (p, Some(ah))),
        }
    }

    pub(crate) fn poll_completion(&mut self) -> Option<Completion> {
        match self {
            QpCore::Rc(q) => q.poll_completion(),
            QpCore::Uc(q) => q.poll_completion(),
            QpCore::Ud(q) => q.poll_completion(),
        }
    }
}
