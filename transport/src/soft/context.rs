//! A poll group of the soft provider (the unit of run-to-completion polling): it owns
//! one receive socket, its QPs, CQs and SRQs, and drives their sans-IO RC cores over
//! the sockets whenever [`Context::progress`] or [`Context::poll_cq`] is called. One
//! thread runs a context; nothing in it is shared except the device's key tables.
use super::rx_check::icrc_ok;
use crate::wire::IcrcChecker;
use std::collections::{HashMap, VecDeque};
use std::hash::{BuildHasherDefault, Hasher};
use std::net::{IpAddr, SocketAddr};
use std::os::fd::AsRawFd;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use socket2::{SockAddr, Socket};

use super::device::SoftDevice;
use super::qp_core::QpCore;
use super::qp_registry::QpInfo;
use super::socket::{
    bind_tx_socket, is_gso_refusal, send_many, RxBatch, SocketError, TxMsg, GSO_MAX_BYTES,
    RX_GRO_SLOT_BYTES,
};
use super::xdp::frame::{self, FrameEnds};
use super::xdp::XdpQueue;
use crate::rc::{CompletionQueueKind, QpCounters, RcConfig, RcEnv, RecvQueue, TxPacket};
use crate::time::{Clock, Timestamp};
use crate::verbs::{
    Ah, AhAttr, AsyncEvent, Cq, Pd, Qp, QpAttr, QpCap, QpInitAttr, QpState, QpType, RecvWr, SendOp,
    SendWr, Srq, VerbsError, WorkCompletion, MAX_SGE,
};
use crate::wire::icrc_rx::UDP_GSO_MAX_SEGMENTS;
use crate::wire::{self, IcrcIpInfo, ROCE_V2_UDP_DPORT};

struct TxPath {
    via: TxVia,
    icrc: IcrcIpInfo,
    /// Pack runs of equal-size packets into UDP GSO trains ([`super::UdpGso`]); turned
    /// off for good when the kernel refuses one.
    gso: bool,
}

impl TxPath {
    /// Points a UD QP's path at `dest` (UDP port 4791) for the next packet.
    fn retarget(&mut self, dest: IpAddr) {
        if self.icrc.dst == dest {
            return;
        }
        self.icrc.dst = dest;
        if let TxVia::Udp { dest: d, .. } = &mut self.via {
            *d = SockAddr::from(SocketAddr::new(dest, ROCE_V2_UDP_DPORT));
        }
    }
}

/// How a QP's packets leave: its UDP send socket, or as frames through the poll
/// group's XSK ([`crate::soft::xdp::PacketPath::AfXdp`]).
enum TxVia {
    Udp { sock: Socket, dest: SockAddr },
    Xdp(FrameEnds),
}

struct QpSlot {
    core: QpCore,
    send_cq: u32,
    recv_cq: u32,
    srq: Option<u32>,
    tx: Option<TxPath>,
}

struct CqState {
    entries: VecDeque<WorkCompletion>,
    capacity: usize,
    overflows: u64,
    /// Armed for one completion event ([`Context::req_notify_cq`]).
    armed: bool,
}

/// An armed SRQ limit ([`Context::arm_srq_limit`]).
#[derive(Clone, Copy, Debug)]
struct SrqLimit {
    /// Fire once fewer WRs than this remain.
    limit: u32,
    /// WRs posted when last looked at: the event needs a receive taken since.
    seen: usize,
}

/// One poll group: see the module docs.
pub struct Context {
    dev: Arc<SoftDevice>,
    rxq: u32,
    rx_sock: Socket,
    rx: RxBatch,
    clock: Clock,
    qps: HashMap<u32, QpSlot, BuildHasherDefault<QpnHasher>>,
    cqs: Vec<CqState>,
    srqs: Vec<RecvQueue>,
    /// Per SRQ (same index): its armed limit, if any.
    srq_limits: Vec<Option<SrqLimit>>,
    /// How many SRQ limits are armed (0: nothing to check after a receive batch).
    srq_limits_armed: usize,
    /// Asynchronous events not yet handed out ([`Context::poll_async_event`]).
    async_events: VecDeque<AsyncEvent>,
    /// Address handles ([`Context::create_ah`]) by index; `None` once destroyed.
    ahs: Vec<Option<AhAttr>>,
    rc_config: RcConfig,
    tx: TxQueue,
    dirty: Vec<u32>,
    /// QPs whose transmission [`Context::poll_cq`] deferred (see
    /// [`Context::set_deferred_transmit`]) or that [`Context::post_send_deferred`]
    /// posted to; sent at the start of the next call or by [`Context::flush_deferred`].
    deferred: Vec<u32>,
    defer_transmit: bool,
    next_timer: Option<Timestamp>,
    /// Receive ICRC checker (caches per-length tables for senders with IPv4 IDs).
    icrc: IcrcChecker,
    /// The AF_XDP path's XSK, when the device has one: received from every round;
    /// the UDP socket (packets the XDP program passed: arrived on another poll group's
    /// queue) every `udp_poll_interval` rounds.
    xdp: Option<XdpQueue>,
    /// Rounds since the UDP socket was last polled (AF_XDP path).
    rounds_since_udp: u32,
    /// Rounds between UDP polls (AF_XDP path): 1 after a poll that found datagrams,
    /// doubled after each empty one up to [`UDP_POLL_MAX_INTERVAL`].
    udp_poll_interval: u32,
}

/// With the AF_XDP path, the most rounds of [`Context::progress`] between two polls
/// of the UDP receive socket (a system call each; the XSK costs none) while it stays
/// empty.
pub const UDP_POLL_MAX_INTERVAL: u32 = 64;

impl std::fmt::Debug for Context {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Context")
            .field("dev", &self.dev)
            .field("rxq", &self.rxq)
            .finish()
    }
}

impl Context {
    pub(crate) fn new(
        dev: Arc<SoftDevice>,
        rxq: u32,
        rx_sock: Socket,
        xdp: Option<XdpQueue>,
    ) -> Self {
        // The device's receive fault layer, if it has one (soft::fault).
        let rx = RxBatch::with_slots(RX_GRO_SLOT_BYTES, dev.rx_faults(rxq));
        let rc_config = dev.rc_config();
        Context {
            dev,
            rxq,
            rx_sock,
            rx,
            clock: Clock::new(),
            qps: HashMap::default(),
            cqs: Vec::new(),
            srqs: Vec::new(),
            srq_limits: Vec::new(),
            srq_limits_armed: 0,
            async_events: VecDeque::new(),
            ahs: Vec::new(),
            rc_config,
            tx: TxQueue::default(),
            dirty: Vec::new(),
            deferred: Vec::new(),
            defer_transmit: false,
            next_timer: None,
            icrc: IcrcChecker::new(),
            xdp,
            rounds_since_udp: 0,
            udp_poll_interval: 1,
        }
    }

    /// The device this poll group belongs to.
    pub fn device(&self) -> &Arc<SoftDevice> {
        &self.dev
    }

    /// This poll group's index on its device (the `rx_queue` of
    /// [`SoftDevice::open_context`]; its QPNs are those `q` with `q % rx_queues ==`
    /// this).
    pub fn rx_queue(&self) -> u32 {
        self.rxq
    }

    /// The RC tuning (window sizes) applied to QPs created from now on (initially the
    /// device's, [`SoftDevice::rc_config`]).
    pub fn set_rc_config(&mut self, cfg: RcConfig) {
        self.rc_config = cfg;
    }

    /// Lets [`Context::poll_cq`] return completions before it transmits what the
    /// packets that produced them call for (ACKs, READ responses, requests the window
    /// now admits), so a latency-bound caller can react first and post its next
    /// request in the same `sendmmsg` as those ACKs (requests first). The deferred
    /// packets go out at the start of the next call on this context that touches the
    /// QPs (`poll_cq`, `progress`, `post_send`, `post_send_list`, `wait`,
    /// `flush_deferred`) and also when `poll_cq` finds nothing for its CQ.
    ///
    /// Off by default (an RNIC sends ACKs on its own). Only turn it on for a context
    /// that is polled again promptly: a peer retransmits after the QP's local ACK
    /// timeout (16.8 ms at the default `timeout` 12 in Linux) and gives up after
    /// `retry_cnt` tries. Turning it off flushes what is pending.
    pub fn set_deferred_transmit(&mut self, on: bool) {
        self.defer_transmit = on;
        if !on {
            self.flush_deferred();
        }
    }

    /// Transmits what [`Context::poll_cq`] deferred (see
    /// [`Context::set_deferred_transmit`]); a no-op when nothing is pending.
    pub fn flush_deferred(&mut self) {
        if self.deferred.is_empty() {
            return;
        }
        let mut d = std::mem::take(&mut self.deferred);
        for &qpn in &d {
            // Requests first: what post_send_deferred posted goes ahead of the deferred
            // ACKs, as post_send would have sent it (a QP with only ACKs is the same
            // either way).
            self.flush_qp(qpn, true);
        }
        d.clear();
        if self.deferred.is_empty() {
            self.deferred = d;
        }
    }

    /// The context's clock.
    pub fn now(&self) -> Timestamp {
        self.clock.now()
    }

    /// Creates a completion queue of at least `cqe` entries (`ibv_create_cq`).
    pub fn create_cq(&mut self, cqe: u32) -> Cq {
        self.cqs.push(CqState {
            entries: VecDeque::with_capacity(cqe as usize),
            capacity: cqe.max(1) as usize,
            overflows: 0,
            armed: false,
        });
        Cq(self.cqs.len() as u32 - 1)
    }

    /// Creates a shared receive queue of `max_wr` entries (`ibv_create_srq`).
    pub fn create_srq(&mut self, pd: Pd, max_wr: u32) -> Srq {
        self.srqs.push(RecvQueue::new(pd.0, max_wr));
        self.srq_limits.push(None);
        Srq(self.srqs.len() as u32 - 1)
    }

    /// Arms `srq`'s limit (`ibv_modify_srq` IBV_SRQ_LIMIT, as Linux rxe keeps it):
    /// once a receive taken from the SRQ leaves fewer than `limit` WRs posted,
    /// [`Context::poll_async_event`] hands out one [`AsyncEvent::SrqLimitReached`] and
    /// the limit is disarmed. Arming again replaces the limit.
    ///
    /// # Errors
    /// [`VerbsError::InvalidArgument`] for an unknown SRQ, or a limit of 0 or not below
    /// the SRQ's `max_wr`.
    pub fn arm_srq_limit(&mut self, srq: Srq, limit: u32) -> Result<(), VerbsError> {
        let q = self
            .srqs
            .get(srq.0 as usize)
            .ok_or(VerbsError::InvalidArgument(
                "no such SRQ in this poll group",
            ))?;
        if limit == 0 || limit >= q.max_wr() {
            return Err(VerbsError::InvalidArgument(
                "SRQ limit must be between 1 and the SRQ's max_wr - 1",
            ));
        }
        let seen = q.len();
        let slot = &mut self.srq_limits[srq.0 as usize];
        if slot.is_none() {
            self.srq_limits_armed += 1;
        }
        *slot = Some(SrqLimit { limit, seen });
        Ok(())
    }

    /// Fires the armed SRQ limits that receives crossed since the last look.
    fn check_srq_limits(&mut self) {
        for (i, (q, slot)) in self.srqs.iter().zip(&mut self.srq_limits).enumerate() {
            let Some(l) = slot else { continue };
            let len = q.len();
            if len < l.limit as usize && len < l.seen {
                *slot = None;
                self.srq_limits_armed -= 1;
                self.async_events
                    .push_back(AsyncEvent::SrqLimitReached { srq: Srq(i as u32) });
            } else {
                l.seen = len;
            }
        }
    }

    /// The next asynchronous event of this poll group (`ibv_get_async_event`, without
    /// blocking): [`AsyncEvent::SrqLimitReached`] of an armed SRQ limit.
    pub fn poll_async_event(&mut self) -> Option<AsyncEvent> {
        self.async_events.pop_front()
    }

    /// Arms `cq` for one completion event (`ibv_req_notify_cq`): [`Context::wait`]
    /// returns at once while an armed CQ holds completions, and disarms it.
    ///
    /// # Errors
    /// [`VerbsError::InvalidArgument`] for an unknown CQ.
    pub fn req_notify_cq(&mut self, cq: Cq) -> Result<(), VerbsError> {
        self.cqs
            .get_mut(cq.0 as usize)
            .ok_or(VerbsError::InvalidArgument("no such CQ in this poll group"))?
            .armed = true;
        Ok(())
    }

    /// Whether an armed CQ holds completions (its event), disarming those that do.
    fn take_cq_events(&mut self) -> bool {
        let mut any = false;
        for c in self
            .cqs
            .iter_mut()
            .filter(|c| c.armed && !c.entries.is_empty())
        {
            c.armed = false;
            any = true;
        }
        any
    }

    /// Receive WRs currently posted to `srq`.
    pub fn srq_len(&self, srq: Srq) -> usize {
        self.srqs.get(srq.0 as usize).map(|q| q.len()).unwrap_or(0)
    }

    /// Creates a QP of `attr.qp_type` in the Reset state (`ibv_create_qp`). A UD QP
    /// gets its UDP send socket now (source port from its QPN; it sends to the address
    /// of each WR's handle), an RC or UC QP when `modify_qp` gives it its path.
    ///
    /// # Errors
    /// `InvalidArgument` for an unknown CQ or SRQ, or a UD QP on the AF_XDP packet
    /// path (which sends RC and UC only); `OpenFiles` / `NoResources` when the UD
    /// QP's socket cannot be opened.
    pub fn create_qp(&mut self, attr: &QpInitAttr) -> Result<Qp, VerbsError> {
        if attr.send_cq.0 as usize >= self.cqs.len() || attr.recv_cq.0 as usize >= self.cqs.len() {
            return Err(VerbsError::InvalidArgument("no such CQ"));
        }
        if let Some(s) = attr.srq {
            if s.0 as usize >= self.srqs.len() {
                return Err(VerbsError::InvalidArgument("no such SRQ"));
            }
        }
        if attr.qp_type == QpType::Ud && self.dev.xdp().is_some() {
            return Err(VerbsError::InvalidArgument(
                "UD QPs need the UDP packet path: the AF_XDP path sends RC and UC only",
            ));
        }
        let qpn = self.dev.alloc_qpn(self.rxq);
        let core = QpCore::new(
            attr.qp_type,
            qpn,
            attr.pd.0,
            attr.cap,
            attr.srq.is_some(),
            self.rc_config,
            self.dev.path_mtu(),
        );
        let tx = match attr.qp_type {
            QpType::Ud => Some(self.ud_tx_path(qpn)?),
            _ => None,
        };
        self.dev.qp_registry().insert(QpInfo {
            qpn,
            qp_type: attr.qp_type,
            state: core.state(),
            local_ip: self.dev.ip(),
            remote_ip: None,
            dest_qpn: 0,
            udp_sport: tx.as_ref().map(|t| t.icrc.udp_sport),
            mtu: self.dev.path_mtu().bytes(),
            poll_group: self.rxq,
        });
        self.qps.insert(
            qpn,
            QpSlot {
                core,
                send_cq: attr.send_cq.0,
                recv_cq: attr.recv_cq.0,
                srq: attr.srq.map(|s| s.0),
                tx,
            },
        );
        Ok(Qp(qpn))
    }

    /// A UD QP's send path: a socket bound to the UDP source port derived from the QPN
    /// (as rxe gives every QP one), pointed at the device's own address until the
    /// first send names a destination.
    fn ud_tx_path(&self, qpn: u32) -> Result<TxPath, VerbsError> {
        let ip = self.dev.ip();
        let want = wire::udp_sport_from_flow_label(qpn);
        let (sock, sport) = bind_tx_socket(ip, want).map_err(|e| match e {
            SocketError::OpenFiles(n) => VerbsError::OpenFiles(n),
            _ => VerbsError::NoResources("UDP source port"),
        })?;
        let dest = SockAddr::from(SocketAddr::new(ip, ROCE_V2_UDP_DPORT));
        Ok(TxPath {
            via: TxVia::Udp { sock, dest },
            icrc: IcrcIpInfo {
                src: ip,
                dst: ip,
                ipv4_id: 0,
                udp_sport: sport,
                udp_dport: ROCE_V2_UDP_DPORT,
            },
            gso: false,
        })
    }

    /// Creates an address handle for UD sends (`ibv_create_ah`) to `attr.dest`.
    ///
    /// # Errors
    /// `InvalidArgument` for a destination of the other address family than the
    /// device's (its sockets are of one family).
    pub fn create_ah(&mut self, _pd: Pd, attr: &AhAttr) -> Result<Ah, VerbsError> {
        if attr.dest.is_ipv4() != self.dev.ip().is_ipv4() {
            return Err(VerbsError::InvalidArgument(
                "the address handle's destination is of another address family than the                  device's address",
            ));
        }
        self.ahs.push(Some(*attr));
        Ok(Ah(self.ahs.len() as u32 - 1))
    }

    /// Destroys an address handle (`ibv_destroy_ah`); WRs posted with it keep the
    /// address they were posted with.
    ///
    /// # Errors
    /// `NoSuchObject` for an unknown or destroyed handle.
    pub fn destroy_ah(&mut self, ah: Ah) -> Result<(), VerbsError> {
        self.ahs
            .get_mut(ah.0 as usize)
            .and_then(Option::take)
            .map(|_| ())
            .ok_or(VerbsError::NoSuchObject)
    }

    /// The address a UD send WR's handle names (`None` for other WRs).
    fn ud_dest(&self, wr: &SendWr) -> Result<Option<AhAttr>, VerbsError> {
        match wr.op {
            SendOp::UdSend { dest, .. } => self
                .ahs
                .get(dest.ah.0 as usize)
                .copied()
                .flatten()
                .map(Some)
                .ok_or(VerbsError::InvalidArgument(
                    "no such address handle in this poll group (create_ah first)",
                )),
            _ => Ok(None),
        }
    }

    /// The QP's transport service.
    pub fn qp_type(&self, qp: Qp) -> Option<QpType> {
        self.qps.get(&qp.0).map(|s| s.core.qp_type())
    }

    /// Modifies a QP (`ibv_modify_qp`). With `ah_attr`, the QP's send socket is bound
    /// to the UDP source port derived from the flow label (or from the QP numbers when
    /// the flow label is 0, as rxe does).
    pub fn modify_qp(&mut self, qp: Qp, attr: &QpAttr) -> Result<(), VerbsError> {
        let ip = self.dev.ip();
        let slot = self.qps.get_mut(&qp.0).ok_or(VerbsError::NoSuchObject)?;
        slot.core.modify(attr)?;
        // A UD QP has no path of its own (each send names one).
        let ah_attr = attr.ah_attr.filter(|_| slot.core.qp_type() != QpType::Ud);
        if let Some(ah) = ah_attr {
            let dest_qpn = attr.dest_qp_num.unwrap_or(slot.core.dest_qpn());
            let want = if ah.flow_label != 0 {
                wire::udp_sport_from_flow_label(ah.flow_label)
            } else {
                let fl = (qp.0 as u64 * dest_qpn as u64) as u32;
                wire::udp_sport_from_flow_label(fl ^ (fl >> 20))
            };
            let (via, sport) = match self.dev.xdp() {
                Some(x) => {
                    let dst_mac = x.peer_mac(ah.dest).map_err(|e| {
                        tracing::error!("QP {:#x}: {e}", qp.0);
                        VerbsError::NoResources("the peer's MAC address (see the log)")
                    })?;
                    let ends = FrameEnds {
                        src_mac: x.src_mac,
                        dst_mac,
                        src: SocketAddr::new(ip, want),
                        dst: SocketAddr::new(ah.dest, ROCE_V2_UDP_DPORT),
                        tos: crate::soft::tos_byte(ah.traffic_class),
                    };
                    (TxVia::Xdp(ends), want)
                }
                None => {
                    let (sock, sport) = bind_tx_socket(ip, want).map_err(|e| match e {
                        SocketError::OpenFiles(n) => VerbsError::OpenFiles(n),
                        _ => VerbsError::NoResources("UDP source port"),
                    })?;
                    if ah.traffic_class != 0 {
                        crate::soft::socket::set_traffic_class(&sock, ip, ah.traffic_class)
                            .map_err(|_| VerbsError::NoResources("IP_TOS of the send socket"))?;
                    }
                    let dest = SockAddr::from(SocketAddr::new(ah.dest, ROCE_V2_UDP_DPORT));
                    (TxVia::Udp { sock, dest }, sport)
                }
            };
            let icrc = IcrcIpInfo {
                src: ip,
                dst: ah.dest,
                ipv4_id: 0,
                udp_sport: sport,
                udp_dport: ROCE_V2_UDP_DPORT,
            };
            let gso = matches!(via, TxVia::Udp { .. }) && self.dev.udp_gso_toward(ah.dest);
            slot.tx = Some(TxPath { via, icrc, gso });
        }
        let (state, dest_qpn) = (slot.core.state(), slot.core.dest_qpn());
        let remote_ip = slot
            .tx
            .as_ref()
            .map(|t| t.icrc.dst)
            .filter(|_| ah_attr.is_some());
        let udp_sport = slot.tx.as_ref().map(|t| t.icrc.udp_sport);
        self.dev.qp_registry().update(qp.0, |q| {
            q.state = state;
            q.dest_qpn = dest_qpn;
            if remote_ip.is_some() {
                q.remote_ip = remote_ip;
            }
            q.udp_sport = udp_sport;
            if let Some(m) = attr.path_mtu {
                q.mtu = m.bytes();
            }
        });
        self.flush_qp(qp.0, false);
        Ok(())
    }

    /// The QP's current state.
    pub fn qp_state(&self, qp: Qp) -> Option<QpState> {
        self.qps.get(&qp.0).map(|s| s.core.state())
    }

    /// The QP's UDP source port, once it has a path.
    pub fn qp_udp_sport(&self, qp: Qp) -> Option<u16> {
        self.qps
            .get(&qp.0)
            .and_then(|s| s.tx.as_ref())
            .map(|t| t.icrc.udp_sport)
    }

    /// The capacities `qp` was granted: as asked, SGE counts capped at [`MAX_SGE`], no
    /// inline bytes (see [`super::SOFT_CAPS`]).
    pub fn qp_cap(&self, qp: Qp) -> Option<QpCap> {
        self.qps.get(&qp.0).map(|s| {
            let c = s.core.cap();
            QpCap {
                max_send_sge: c.max_send_sge.min(MAX_SGE as u32),
                max_recv_sge: c.max_recv_sge.min(MAX_SGE as u32),
                max_inline_data: 0,
                ..c
            }
        })
    }

    /// The QP's counters.
    pub fn qp_counters(&self, qp: Qp) -> Option<&QpCounters> {
        self.qps.get(&qp.0).map(|s| s.core.counters())
    }

    /// Destroys a QP (`ibv_destroy_qp`); its pending work is dropped without completions.
    pub fn destroy_qp(&mut self, qp: Qp) -> Result<(), VerbsError> {
        self.dev.qp_registry().remove(qp.0);
        self.qps
            .remove(&qp.0)
            .map(|_| ())
            .ok_or(VerbsError::NoSuchObject)
    }

    /// Posts a send WR (`ibv_post_send`) and transmits what it allows right away
    /// (requests ahead of deferred ACKs). A local WR (Bind MW, Local Invalidate) on a
    /// QP with deferred output waits for the next transmission instead, so it does
    /// not push those ACKs out on their own.
    pub fn post_send(&mut self, qp: Qp, wr: &SendWr) -> Result<(), VerbsError> {
        let ah = self.ud_dest(wr)?;
        let slot = self.qps.get_mut(&qp.0).ok_or(VerbsError::NoSuchObject)?;
        slot.core.post_send(wr, ah)?;
        let local = matches!(wr.op, SendOp::BindMw { .. } | SendOp::LocalInv { .. });
        if !(local && self.deferred.contains(&qp.0)) {
            self.flush_qp(qp.0, true);
        }
        Ok(())
    }

    /// Posts a send WR (`ibv_post_send`) without transmitting it: the QP's packets
    /// leave at the next [`Context::flush_deferred`], [`Context::poll_cq`] or
    /// [`Context::wait`], all in one batch, so that a round's equal-sized packets (the
    /// data WRITEs of several reads, then their response SENDs) form GSO trains.
    ///
    /// # Errors
    /// As [`Context::post_send`].
    pub fn post_send_deferred(&mut self, qp: Qp, wr: &SendWr) -> Result<(), VerbsError> {
        let ah = self.ud_dest(wr)?;
        let slot = self.qps.get_mut(&qp.0).ok_or(VerbsError::NoSuchObject)?;
        slot.core.post_send(wr, ah)?;
        if !self.deferred.contains(&qp.0) {
            self.deferred.push(qp.0);
        }
        Ok(())
    }

    /// Posts a receive WR to the QP's own receive queue (`ibv_post_recv`).
    pub fn post_recv(&mut self, qp: Qp, wr: &RecvWr) -> Result<(), VerbsError> {
        let slot = self.qps.get_mut(&qp.0).ok_or(VerbsError::NoSuchObject)?;
        slot.core.post_recv(wr)
    }

    /// Posts a receive WR to a shared receive queue (`ibv_post_srq_recv`).
    pub fn post_srq_recv(&mut self, srq: Srq, wr: &RecvWr) -> Result<(), VerbsError> {
        self.srqs
            .get_mut(srq.0 as usize)
            .ok_or(VerbsError::NoSuchObject)?
            .post(*wr)
    }

    /// Drives progress, then moves up to `out.len()` completions of `cq` into `out`
    /// (`ibv_poll_cq`); returns how many.
    ///
    /// With [`Context::set_deferred_transmit`] on, the packets that the received ones
    /// call for go out at the start of the next call rather than before this one
    /// returns (unless it returns nothing).
    pub fn poll_cq(&mut self, cq: Cq, out: &mut [WorkCompletion]) -> usize {
        if self
            .cqs
            .get(cq.0 as usize)
            .is_some_and(|c| c.entries.is_empty())
        {
            self.flush_deferred();
            self.progress_inner(self.defer_transmit);
            if self
                .cqs
                .get(cq.0 as usize)
                .is_none_or(|c| c.entries.is_empty())
            {
                self.flush_deferred();
            }
        }
        let Some(c) = self.cqs.get_mut(cq.0 as usize) else {
            return 0;
        };
        let n = out.len().min(c.entries.len());
        for (o, e) in out.iter_mut().zip(c.entries.drain(..n)) {
            *o = e;
        }
        n
    }

    /// Completions lost because a CQ was full (IBV_EVENT_CQ_ERR in ibverbs).
    pub fn cq_overflows(&self, cq: Cq) -> u64 {
        self.cqs
            .get(cq.0 as usize)
            .map(|c| c.overflows)
            .unwrap_or(0)
    }

    /// One round of the poll loop: receive and process what arrived, fire due timers,
    /// transmit what the QPs have, collect completions. Returns the number of packets
    /// received.
    pub fn progress(&mut self) -> usize {
        self.flush_deferred();
        self.progress_inner(false)
    }

    /// `progress`; with `defer`, what the received packets call for is not transmitted
    /// but their QPs are queued on `deferred` (their completions are collected).
    fn progress_inner(&mut self, defer: bool) -> usize {
        let mut received = self.receive_xdp(defer);
        if self.xdp.is_some() {
            self.rounds_since_udp += 1;
        }
        if self.xdp.is_none() {
            received += self.receive_udp(defer);
        } else if self.rounds_since_udp >= self.udp_poll_interval {
            self.rounds_since_udp = 0;
            let n = self.receive_udp(defer);
            self.udp_poll_interval = if n > 0 {
                1
            } else {
                (self.udp_poll_interval * 2).min(UDP_POLL_MAX_INTERVAL)
            };
            received += n;
        }
        self.after_receive(received)
    }

    /// Receives and handles what the UDP receive socket holds, in batches until it is
    /// empty; returns the datagrams.
    fn receive_udp(&mut self, defer: bool) -> usize {
        let mut received = 0;
        loop {
            let n = match self.rx.recv(self.rx_sock.as_raw_fd()) {
                Ok(n) => n,
                Err(e) => {
                    tracing::warn!("recvmmsg on {}: {e}", self.dev.ip());
                    0
                }
            };
            if n > 0 || self.rx.datagrams() > 0 {
                let counters = self.dev.counters();
                counters
                    .rcvd_datagrams
                    .fetch_add(self.rx.datagrams() as u64, Ordering::Relaxed);
                let truncated = self.rx.take_truncated();
                if truncated > 0 {
                    counters
                        .rx_truncated_datagrams
                        .fetch_add(truncated, Ordering::Relaxed);
                }
                let now = self.clock.now();
                for i in 0..n {
                    self.handle_datagram(now, i);
                }
                if defer {
                    self.defer_dirty();
                } else {
                    self.flush_dirty();
                }
            }
            received += n;
            if !self.rx.was_full() {
                return received;
            }
        }
    }

    /// After a round's receives: the SRQ limits, then the timers that are due.
    fn after_receive(&mut self, received: usize) -> usize {
        if received > 0 && self.srq_limits_armed > 0 {
            self.check_srq_limits();
        }
        // `next_timer` is never later than the earliest armed timer (every path that
        // arms one lowers it), so without it there is nothing to check and no clock to
        // read; it is recomputed only after timers fired.
        let Some(due) = self.next_timer else {
            return received;
        };
        let now = self.clock.now();
        if due <= now {
            let Self {
                qps,
                srqs,
                dev,
                dirty,
                ..
            } = self;
            for (qpn, slot) in qps.iter_mut() {
                if slot.core.poll_timeout().is_some_and(|t| t <= now) {
                    let srq = slot.srq.and_then(|i| srqs.get_mut(i as usize));
                    let mut env = RcEnv {
                        keys: dev.keys(),
                        srq,
                    };
                    slot.core.handle_timeout(now, &mut env);
                    if !dirty.contains(qpn) {
                        dirty.push(*qpn);
                    }
                }
            }
            self.flush_dirty();
            self.next_timer = self
                .qps
                .values()
                .filter_map(|s| s.core.poll_timeout())
                .min();
        }
        received
    }

    /// Receives and handles what the XSK holds (AF_XDP path); returns the datagrams.
    fn receive_xdp(&mut self, defer: bool) -> usize {
        let Some(xq) = self.xdp.as_mut() else {
            return 0;
        };
        // Frames the kernel left in the TX ring (the interface was busy) go out now,
        // not with the next send.
        xq.xsk.kick();
        if !xq.xsk.rx_ready() {
            return 0;
        }
        let now = self.clock.now();
        let Self {
            dev,
            qps,
            srqs,
            icrc,
            dirty,
            ..
        } = self;
        let n = xq
            .xsk
            .recv(super::socket::RX_BATCH as u32, |f| match frame::parse(f) {
                Some(d) if d.dst_port == ROCE_V2_UDP_DPORT => {
                    let from = SocketAddr::new(d.src, d.src_port);
                    let ce = d.ecn() == crate::wire::frame::ECN_CE;
                    deliver(
                        dev, qps, srqs, icrc, dirty, now, from, d.ipv4_id, ce, d.payload,
                    );
                }
                // The program redirects only UDP 4791: a frame that does not parse as one
                // was cut short or garbled.
                _ => {
                    dev.counters()
                        .malformed_pkts
                        .fetch_add(1, Ordering::Relaxed);
                }
            }) as usize;
        if n > 0 {
            if defer {
                self.defer_dirty();
            } else {
                self.flush_dirty();
            }
        }
        n
    }

    fn flush_dirty(&mut self) {
        if self.dirty.is_empty() {
            return;
        }
        let mut dirty = std::mem::take(&mut self.dirty);
        for &qpn in &dirty {
            self.flush_qp(qpn, false);
        }
        dirty.clear();
        self.dirty = dirty;
    }

    /// Collects the completions of the dirty QPs and queues them for a deferred
    /// transmission.
    fn defer_dirty(&mut self) {
        let Self {
            qps,
            cqs,
            dirty,
            deferred,
            next_timer,
            ..
        } = self;
        for qpn in dirty.drain(..) {
            if let Some(slot) = qps.get_mut(&qpn) {
                Self::collect_completions(slot, cqs);
                if let Some(t) = slot.core.poll_timeout() {
                    if next_timer.is_none_or(|n| t < n) {
                        *next_timer = Some(t);
                    }
                }
            }
            if !deferred.contains(&qpn) {
                deferred.push(qpn);
            }
        }
    }

    /// Posts several send WRs (`ibv_post_send` with a chain) and transmits once, so
    /// their packets share `sendmmsg` calls. Stops at the first WR refused.
    pub fn post_send_list(&mut self, qp: Qp, wrs: &[SendWr]) -> Result<(), VerbsError> {
        let mut res = Ok(());
        for wr in wrs {
            let r = self.ud_dest(wr).and_then(|ah| {
                self.qps
                    .get_mut(&qp.0)
                    .ok_or(VerbsError::NoSuchObject)?
                    .core
                    .post_send(wr, ah)
            });
            if let Err(e) = r {
                res = Err(e);
                break;
            }
        }
        self.flush_qp(qp.0, true);
        res
    }

    /// Transmits what was deferred, then sleeps until a packet arrives, the next RC
    /// timer is due, or `timeout` (`ppoll(2)` on the receive socket), for callers that
    /// stop busy polling when idle. Returns at once while an async event is pending or
    /// an armed CQ ([`Context::req_notify_cq`]) holds completions. The packets and
    /// timers themselves are handled by the next `poll_cq` / `progress`.
    pub fn wait(&mut self, timeout: Duration) {
        self.flush_deferred();
        if !self.async_events.is_empty() || self.take_cq_events() {
            return;
        }
        let mut sleep = timeout;
        if let Some(due) = self.next_timer {
            let now = self.clock.now();
            if due <= now {
                return;
            }
            sleep = sleep.min(due.since(now));
        }
        let pfd = |fd| libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        };
        let mut pfds = [
            pfd(self.rx_sock.as_raw_fd()),
            pfd(self.xdp.as_ref().map_or(-1, |x| x.xsk.fd())),
        ];
        let ts = libc::timespec {
            tv_sec: sleep.as_secs().min(i32::MAX as u64) as libc::time_t,
            tv_nsec: sleep.subsec_nanos() as libc::c_long,
        };
        // SAFETY: one valid pollfd, a valid timespec, no signal mask.
        unsafe { libc::ppoll(pfds.as_mut_ptr(), 2, &ts, std::ptr::null()) };
    }

    /// The earliest timer of any QP.
    pub fn next_timeout(&self) -> Option<Timestamp> {
        self.next_timer
    }

    fn handle_datagram(&mut self, now: Timestamp, i: usize) {
        let Self {
            rx,
            dev,
            qps,
            srqs,
            icrc,
            dirty,
            ..
        } = self;
        let Some(super::socket::RxPacket {
            from,
            data,
            ipv4_id,
            ce,
        }) = rx.get(i)
        else {
            return;
        };
        deliver(dev, qps, srqs, icrc, dirty, now, from, ipv4_id, ce, data);
    }

    /// Transmits what the QP has to send (in batches of up to [`TX_BATCH`] packets
    /// per `sendmmsg`) and collects its completions.
    /// With `requests_first`, the requester's packets go ahead of the responder's
    /// (deferred ACKs): a peer waiting for a request gets it one packet sooner. The
    /// two are independent PSN streams, so their relative order is free.
    fn flush_qp(&mut self, qpn: u32, requests_first: bool) {
        let Self {
            qps,
            srqs,
            dev,
            cqs,
            clock,
            tx,
            next_timer,
            deferred,
            icrc,
            xdp,
            ..
        } = self;
        if let Some(i) = deferred.iter().position(|&q| q == qpn) {
            deferred.swap_remove(i);
        }
        let Some(slot) = qps.get_mut(&qpn) else {
            return;
        };
        let now = clock.now();
        let counters = dev.counters();
        loop {
            tx.clear();
            let mut ud_dest = None;
            while tx.len() < TX_BATCH {
                let srq = slot.srq.and_then(|i| srqs.get_mut(i as usize));
                let mut env = RcEnv {
                    keys: dev.keys(),
                    srq,
                };
                let Some((mut pkt, ah)) = slot.core.poll_transmit(now, &mut env, requests_first)
                else {
                    break;
                };
                let pad = wire::pad_for(pkt.payload.len());
                pkt.hdr.bth.pad_count = pad;
                tx.push(pkt);
                // A UD packet goes alone, to its own destination.
                if ah.is_some() {
                    ud_dest = ah;
                    break;
                }
            }
            if tx.is_empty() {
                break;
            }
            if let (Some(ah), Some(path)) = (ud_dest, &mut slot.tx) {
                path.retarget(ah.dest);
            }
            let Some(path) = &mut slot.tx else {
                counters
                    .tx_dropped_pkts
                    .fetch_add(tx.len() as u64, Ordering::Relaxed);
                continue;
            };
            let TxSent {
                pkts: sent,
                bytes,
                datagrams,
            } = send_batch(path, tx.packets(), icrc, dev, xdp.as_mut());
            counters.sent_pkts.fetch_add(sent as u64, Ordering::Relaxed);
            counters
                .sent_datagrams
                .fetch_add(datagrams as u64, Ordering::Relaxed);
            counters
                .tx_payload_bytes_zero_copy
                .fetch_add(bytes, Ordering::Relaxed);
            if sent < tx.len() {
                counters
                    .tx_dropped_pkts
                    .fetch_add((tx.len() - sent) as u64, Ordering::Relaxed);
            }
        }
        Self::collect_completions(slot, cqs);
        if let Some(t) = slot.core.poll_timeout() {
            if next_timer.is_none_or(|n| t < n) {
                *next_timer = Some(t);
            }
        }
    }

    fn collect_completions(slot: &mut QpSlot, cqs: &mut [CqState]) {
        while let Some(c) = slot.core.poll_completion() {
            let cq = match c.queue {
                CompletionQueueKind::Send => slot.send_cq,
                CompletionQueueKind::Recv => slot.recv_cq,
            };
            if let Some(cq) = cqs.get_mut(cq as usize) {
                if cq.entries.len() >= cq.capacity {
                    cq.overflows += 1;
                } else {
                    cq.entries.push_back(c.wc);
                }
            }
        }
    }
}

/// Packets sent per `sendmmsg` call.
pub const TX_BATCH: usize = 16;

/// Packets gathered for one `sendmmsg`.
#[derive(Default)]
struct TxQueue {
    pkts: Vec<TxPacket>,
}

impl TxQueue {
    fn clear(&mut self) {
        self.pkts.clear();
    }
    fn push(&mut self, p: TxPacket) {
        self.pkts.push(p);
    }
    fn len(&self) -> usize {
        self.pkts.len()
    }
    fn is_empty(&self) -> bool {
        self.pkts.is_empty()
    }
    fn packets(&self) -> &[TxPacket] {
        &self.pkts
    }
}

/// What [`send_batch`] got the kernel to take.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct TxSent {
    /// Packets.
    pkts: usize,
    /// Their payload bytes.
    bytes: u64,
    /// Datagrams (a train counts once).
    datagrams: usize,
}

/// The runs of `lens` (packet lengths, in order) that leave as one datagram each:
/// `(first packet, packets, gso_size)` with `gso_size` 0 for a lone packet. With
/// `gso`, consecutive packets join a train while they are as long as its first (the
/// segment size), at most one shorter packet ends it, and it stays within
/// [`UDP_GSO_MAX_SEGMENTS`] packets and [`GSO_MAX_BYTES`].
fn plan_trains(lens: &[usize], gso: bool, mut each: impl FnMut(usize, usize, u16)) {
    let mut k = 0;
    while k < lens.len() {
        let size = lens[k];
        let mut m = 1;
        let mut total = size;
        if gso {
            while k + m < lens.len()
                && m < usize::from(UDP_GSO_MAX_SEGMENTS)
                && lens[k + m] <= size
                && total + lens[k + m] <= GSO_MAX_BYTES
            {
                total += lens[k + m];
                m += 1;
                if lens[k + m - 1] < size {
                    break;
                }
            }
        }
        each(k, m, if m > 1 { size as u16 } else { 0 });
        k += m;
    }
}

/// Serializes `pkts` (headers into a stack buffer, payload gathered from registered
/// memory, pad, ICRC) and sends them with one `sendmmsg`, runs of equal-size packets as
/// UDP GSO trains when `path.gso` ([`plan_trains`]); segment `i` of a train carries the
/// ICRC of IPv4 ID `i`, the ID the kernel gives it (IPv6 has no ID). When the kernel
/// refuses a train ([`is_gso_refusal`]), GSO is turned off on the path (and for the
/// device's new paths) and the rest goes out as plain datagrams.
///
/// Through AF_XDP (`path.via` is [`TxVia::Xdp`]; `xdp` is the poll group's queue) each
/// packet becomes one frame built into the UMEM (IPv4 ID 0, no trains), and one kick
/// sends them.
fn send_batch(
    path: &mut TxPath,
    pkts: &[TxPacket],
    ids: &mut IcrcChecker,
    dev: &SoftDevice,
    xdp: Option<&mut XdpQueue>,
) -> TxSent {
    const PARTS: usize = 4 + crate::rc::payload::MAX_PAYLOAD_SEGMENTS;
    let n = pkts.len().min(TX_BATCH);
    let mut hdrs = [[0u8; 64]; TX_BATCH];
    let mut icrcs = [[0u8; 4]; TX_BATCH];
    let zeros = [0u8; 3];
    let mut hlens = [0usize; TX_BATCH];
    let mut lens = [0usize; TX_BATCH];
    for (i, pkt) in pkts[..n].iter().enumerate() {
        hlens[i] = pkt.hdr.write(&mut hdrs[i]);
    }
    // Every packet's parts, back to back, so a train is one run of them.
    let mut flat: [&[u8]; TX_BATCH * PARTS] = [&[]; TX_BATCH * PARTS];
    let mut first_part = [0usize; TX_BATCH + 1];
    let mut k = 0;
    for (i, pkt) in pkts[..n].iter().enumerate() {
        let begin = k;
        flat[k] = &hdrs[i][..hlens[i]];
        k += 1;
        for seg in pkt.payload.segments() {
            if k - begin < PARTS - 2 {
                flat[k] = seg;
                k += 1;
            }
        }
        flat[k] = &zeros[..pkt.hdr.bth.pad_count as usize];
        k += 1;
        icrcs[i] = wire::icrc_segments(&path.icrc, &flat[begin..k]).to_le_bytes();
        lens[i] = flat[begin..k].iter().map(|p| p.len()).sum::<usize>() + 4;
        k += 1; // the ICRC's place, filled below
        first_part[i + 1] = k;
    }
    let v4 = path.icrc.is_ipv4();
    let mut trains = [(0usize, 0usize, 0u16); TX_BATCH];
    let mut ntrains = 0;
    plan_trains(&lens[..n], path.gso, |first, count, gso_size| {
        trains[ntrains] = (first, count, gso_size);
        ntrains += 1;
    });
    for &(first, count, _) in &trains[..ntrains] {
        for i in (first + 1..first + count).filter(|_| v4) {
            let c = u32::from_le_bytes(icrcs[i]) ^ ids.ipv4_id_delta(lens[i], (i - first) as u16);
            icrcs[i] = c.to_le_bytes();
        }
    }
    for i in 0..n {
        flat[first_part[i + 1] - 1] = &icrcs[i];
    }
    let mut msgs = [TxMsg {
        parts: &[],
        gso_size: 0,
    }; TX_BATCH];
    for (m, &(first, count, gso_size)) in msgs.iter_mut().zip(&trains[..ntrains]) {
        *m = TxMsg {
            parts: &flat[first_part[first]..first_part[first + count]],
            gso_size,
        };
    }
    let (sock, dest) = match &path.via {
        TxVia::Udp { sock, dest } => (sock, dest),
        TxVia::Xdp(ends) => {
            // No trains on this path (`gso` is false): one frame per packet.
            let Some(xq) = xdp else {
                return TxSent::default();
            };
            let sent = msgs[..ntrains]
                .iter()
                .take_while(|m| xq.send_parts(ends, m.parts))
                .count();
            xq.xsk.kick();
            return TxSent {
                pkts: sent,
                bytes: pkts[..sent].iter().map(|p| p.payload.len() as u64).sum(),
                datagrams: sent,
            };
        }
    };
    let mut done = 0; // datagrams taken
    let mut retried = false;
    while done < ntrains {
        match send_many(sock, dest, &msgs[done..ntrains]) {
            Ok(0) => break,
            Ok(k) => {
                done += k;
                // A shortfall is a full buffer, or an error the next call reports:
                // ask once more to learn which.
                if done < ntrains && std::mem::replace(&mut retried, true) {
                    break;
                }
            }
            Err(e) if is_gso_refusal(&e) && msgs[done].gso_size > 0 => {
                dev.refuse_gso(&e);
                path.gso = false;
                // Resend the rest as one datagram per packet (their ICRCs were
                // computed for IDs 1, 2, ...: recompute for ID 0).
                let rest = trains[done].0;
                return add(
                    TxSent {
                        pkts: rest,
                        bytes: pkts[..rest].iter().map(|p| p.payload.len() as u64).sum(),
                        datagrams: done,
                    },
                    send_batch(path, &pkts[rest..n], ids, dev, None),
                );
            }
            Err(e) => {
                tracing::debug!("sendmmsg: {e}");
                break;
            }
        }
    }
    let sent: usize = trains[..done].iter().map(|t| t.1).sum();
    TxSent {
        pkts: sent,
        bytes: pkts[..sent].iter().map(|p| p.payload.len() as u64).sum(),
        datagrams: done,
    }
}

fn add(a: TxSent, b: TxSent) -> TxSent {
    TxSent {
        pkts: a.pkts + b.pkts,
        bytes: a.bytes + b.bytes,
        datagrams: a.datagrams + b.datagrams,
    }
}

/// The address family of an IP (helper for callers building `AhAttr`s).
pub fn is_ipv4(ip: IpAddr) -> bool {
    ip.is_ipv4()
}

impl Drop for Context {
    /// Hands the receive socket back to the device instead of closing it: closing a
    /// socket of the SO_REUSEPORT group would renumber the group (Linux moves the last
    /// socket into the gap) and misdirect every other poll group's packets.
    fn drop(&mut self) {
        // ACKs `poll_cq` deferred still go out (their peer would retransmit otherwise).
        self.flush_deferred();
        for qpn in self.qps.keys() {
            self.dev.qp_registry().remove(*qpn);
        }
        if let (Some(x), Some(q)) = (self.dev.xdp(), &self.xdp) {
            x.close_queue(self.rxq);
            let k = q.xsk.kernel_stats();
            tracing::info!(
                "AF_XDP poll group {} on {}: {:?}; kernel: rx_dropped {:?}, rx_ring_full {:?}, \
                 fill_ring_empty {:?}, rx_invalid {:?}, tx_invalid {:?}",
                self.rxq,
                x.iface,
                q.xsk.counters(),
                k.map(|k| k.rx_dropped),
                k.map(|k| k.rx_ring_full),
                k.map(|k| k.rx_fill_ring_empty_descs),
                k.map(|k| k.rx_invalid_descs),
                k.map(|k| k.tx_invalid_descs),
            );
        }
        if let Ok(s) = self.rx_sock.try_clone() {
            self.dev.return_socket(self.rxq, s);
        }
    }
}

/// A hasher for the QP table: one Fibonacci multiply instead of SipHash on every
/// packet's lookup. The table's keys are QP numbers this context allocated; a QPN off
/// the wire is only looked up, never inserted, so a peer cannot force collisions.
#[derive(Default)]
struct QpnHasher(u64);

impl Hasher for QpnHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(b)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
    }
    fn write_u32(&mut self, n: u32) {
        self.0 = u64::from(n).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
}

/// Checks and hands one received RoCEv2 packet (`data`, from `from`, with the IPv4 ID
/// predicted or read for it) to its QP; the
/// QP is marked dirty so that what it calls for goes out at the end of the batch.
#[allow(clippy::too_many_arguments)]
fn deliver(
    dev: &SoftDevice,
    qps: &mut HashMap<u32, QpSlot, BuildHasherDefault<QpnHasher>>,
    srqs: &mut [RecvQueue],
    icrc: &mut IcrcChecker,
    dirty: &mut Vec<u32>,
    now: Timestamp,
    from: SocketAddr,
    ipv4_id: u16,
    ce: bool,
    data: &[u8],
) {
    let counters = dev.counters();
    if !icrc_ok(icrc, counters, from, dev.ip(), ipv4_id, data) {
        return;
    }
    let mut pkt = match wire::parse(data) {
        Ok(p) => p,
        Err(_) => {
            counters.malformed_pkts.fetch_add(1, Ordering::Relaxed);
            return;
        }
    };
    // RoCEv2 carries congestion in the IP header's ECN field; the RC core reads it as
    // the BTH FECN bit (which the ICRC masks), its meaning on InfiniBand.
    pkt.hdr.bth.fecn |= ce;
    counters.rcvd_pkts.fetch_add(1, Ordering::Relaxed);
    let qpn = pkt.hdr.bth.dest_qp;
    let Some(slot) = qps.get_mut(&qpn) else {
        counters.unknown_qp_pkts.fetch_add(1, Ordering::Relaxed);
        return;
    };
    // Packets must come from the connected peer (UD: from anyone).
    if let Some(tx) = slot
        .tx
        .as_ref()
        .filter(|_| slot.core.qp_type() != QpType::Ud)
    {
        if tx.icrc.dst != from.ip() {
            counters.unknown_qp_pkts.fetch_add(1, Ordering::Relaxed);
            return;
        }
    }
    let srq = slot.srq.and_then(|i| srqs.get_mut(i as usize));
    let mut env = RcEnv {
        keys: dev.keys(),
        srq,
    };
    let tos = if ce { wire::frame::ECN_CE } else { 0 };
    slot.core
        .handle_packet(now, &pkt, from, dev.ip(), data.len(), tos, &mut env);
    // ACKs and READ responses go out at the end of this receive batch (one ACK can
    // cover several packets), still within this progress call, as an RNIC sends
    // them: a peer never depends on this application polling again.
    if !dirty.contains(&qpn) {
        dirty.push(qpn);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(lens: &[usize], gso: bool) -> Vec<(usize, usize, u16)> {
        let mut v = Vec::new();
        plan_trains(lens, gso, |f, c, g| v.push((f, c, g)));
        v
    }

    /// A 4 KiB read: its RDMA WRITE and the shorter response SEND leave as one train.
    #[test]
    fn a_write_and_its_shorter_response_form_one_train() {
        assert_eq!(plan(&[4128, 36], true), [(0, 2, 4128)]);
        assert_eq!(plan(&[4128, 36], false), [(0, 1, 0), (1, 1, 0)]);
        assert_eq!(plan(&[36], true), [(0, 1, 0)]);
    }

    /// Only the last packet of a train may be shorter; a longer one starts a new train.
    #[test]
    fn unequal_runs_split_where_a_packet_is_longer_or_follows_a_shorter_one() {
        // WRITE First (RETH) is longer than the Middles: alone, then the Middles.
        assert_eq!(
            plan(&[4128, 4112, 4112, 4112, 36, 36], true),
            [(0, 2, 4128), (2, 3, 4112), (5, 1, 0)]
        );
        assert_eq!(plan(&[20, 20, 30, 30], true), [(0, 2, 20), (2, 2, 30)]);
        assert_eq!(plan(&[30, 20, 20], true), [(0, 2, 30), (2, 1, 0)]);
    }

    /// The kernel refuses GSO on a socket without UDP checksums (`SO_NO_CHECK`,
    /// `udp_send_skb`: EINVAL): the train goes out as plain datagrams, each with the
    /// ICRC of ID 0, nothing is lost, and the path and the device stop trying.
    #[test]
    fn a_refused_train_is_resent_as_plain_datagrams_and_gso_turned_off() {
        use crate::rc::payload::Payload;
        use crate::wire::{Bth, Deth, IcrcCheck, Opcode, PacketHeaders};
        let ip: IpAddr = "127.0.0.135".parse().unwrap();
        let dev = SoftDevice::open(crate::soft::DeviceConfig {
            udp_gso: crate::soft::UdpGso::All,
            ..crate::soft::DeviceConfig::new(ip)
        })
        .unwrap();
        let rx = std::net::UdpSocket::bind((ip, 0)).unwrap();
        rx.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        let peer = rx.local_addr().unwrap();
        let (sock, sport) = bind_tx_socket(ip, 0xC000).unwrap();
        const SO_NO_CHECK: libc::c_int = 11;
        let one: libc::c_int = 1;
        // SAFETY: setsockopt with a c_int value.
        let r = unsafe {
            libc::setsockopt(
                sock.as_raw_fd(),
                libc::SOL_SOCKET,
                SO_NO_CHECK,
                &one as *const _ as *const libc::c_void,
                4,
            )
        };
        assert_eq!(r, 0);
        let info = IcrcIpInfo {
            src: ip,
            dst: ip,
            ipv4_id: 0,
            udp_sport: sport,
            udp_dport: peer.port(),
        };
        let mut path = TxPath {
            via: TxVia::Udp {
                sock,
                dest: SockAddr::from(peer),
            },
            icrc: info,
            gso: dev.udp_gso_toward(ip),
        };
        assert!(path.gso);
        let pkts: Vec<TxPacket> = (0..3)
            .map(|psn| TxPacket {
                hdr: PacketHeaders {
                    bth: Bth::new(Opcode::UdSendOnly, 1, psn, false),
                    deth: Some(Deth {
                        qkey: 0x8001_0000,
                        src_qp: 1,
                    }),
                    reth: None,
                    aeth: None,
                    imm: None,
                    ieth: None,
                },
                payload: Payload::empty(),
            })
            .collect();
        let mut ids = IcrcChecker::new();
        let sent = send_batch(&mut path, &pkts, &mut ids, &dev, None);
        assert_eq!(
            sent,
            TxSent {
                pkts: 3,
                bytes: 0,
                datagrams: 3
            }
        );
        assert!(!path.gso, "the path stops trying");
        assert!(!dev.udp_gso_toward(ip), "and so do the device's new paths");
        let mut check = IcrcChecker::new();
        for psn in 0..3u8 {
            let mut buf = [0u8; 256];
            let n = rx.recv(&mut buf).unwrap();
            assert_eq!(buf[11], psn, "in order");
            assert_eq!(check.check(&info, &buf[..n]), IcrcCheck::Exact);
        }
    }

    /// A 128 KiB read's WRITE Middles: trains stay within GSO_MAX_BYTES (15 x 4112)
    /// and UDP_GSO_MAX_SEGMENTS packets.
    #[test]
    fn trains_stay_within_the_byte_and_segment_limits() {
        let t = plan(&[4112; 16], true);
        assert_eq!(t, [(0, 15, 4112), (15, 1, 0)]);
        const { assert!(15 * 4112 <= GSO_MAX_BYTES && 16 * 4112 > GSO_MAX_BYTES) };
        let small = vec![40usize; 150];
        let t = plan(&small, true);
        let max = usize::from(UDP_GSO_MAX_SEGMENTS);
        assert_eq!(
            t,
            [(0, max, 40), (max, max, 40), (2 * max, 150 - 2 * max, 40)]
        );
    }
}
