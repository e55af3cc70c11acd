//! The provider boundary: the traits one RDMA implementation supplies, so that code
//! written against them (the NVMe target and host, the ping-pong example, the
//! connection tests) runs unchanged on the soft provider (`crate::soft`, userspace
//! RoCEv2 over UDP) and on the verbs provider (`crate::rdma`, libibverbs and librdmacm).
//!
//! Static dispatch only: code is generic over `P: Provider` and reaches the objects
//! through the associated types; no `dyn` and no allocation per work request (the only
//! `dyn` is the connect-time `post_receives` callback of [`ConnectionManager::connect`]).
//! Objects are named by the small `Copy` handles of [`crate::verbs`] ([`Pd`], [`Cq`],
//! [`Srq`], [`Qp`]); a provider keeps the table from handle to its own object inside its
//! [`Context`], so a work request costs one table lookup.
//!
//! ```text
//!  Provider ── open(config) ──> Arc<Device> ── alloc_pd / reg_mr / alloc_mw
//!                                   ├── open_context(i) ──> Context (one poll group, one thread)
//!                                   │        create_cq / create_srq / create_qp / post_* / poll_cq / wait
//!                                   └── cm() ──> ConnectionManager (control path, any thread)
//!                                            listen / connect / create_accept_qp / accept / reject / disconnect
//! ```
//!
//! Errors are typed: [`VerbsError`] for verbs calls (`InvalidTransition { from, to }`,
//! `CapabilityExceeded { what, asked, max }`, `Memlock`, `NoDevice`, `Os`, ...) and
//! [`ConnError`] for the connection manager (its `Rejected`, `Stale`, `Unreachable` and
//! `Timeout` cases mean the same on both providers).
use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam::channel::Receiver;

use crate::cm::{CmEvent, ConnId};
use crate::rc::{MrMemory, QpCounters};
use crate::verbs::connection::{
    AcceptToken, ActiveConn, ConnError, ConnRequest, ConnectRequestParams,
};
use crate::verbs::{
    AccessFlags, Ah, AhAttr, AsyncEvent, Cq, DeviceCaps, Mtu, Pd, Qp, QpAttr, QpCap, QpInitAttr,
    QpState, RecvWr, SendWr, Srq, VerbsError, WorkCompletion,
};

/// The poll group type of provider `P`.
pub type ContextOf<P> = <P as Provider>::Context;
/// The device type of provider `P`.
pub type DeviceOf<P> = <P as Provider>::Device;
/// The memory region type of provider `P`.
pub type MrOf<P> = <P as Provider>::Mr;
/// The connection manager type of provider `P`.
pub type CmOf<P> = <P as Provider>::Cm;

/// The connect-time callback of [`ConnectionManager::connect`]: posts the receive
/// buffers of the new QP (in Init, before the REQ goes out) in the poll group `C`.
pub type PostReceives<'a, C> = dyn FnMut(&mut C, Qp) -> Result<(), VerbsError> + 'a;

/// A provider: the family of types one RDMA implementation supplies.
///
/// The device configuration and the error of opening a device are associated types
/// (refining the draft's shared `DeviceConfig`/`DeviceError`): the soft provider's
/// configuration has fault injection, QPN starts and an MTU override, the verbs
/// provider's the sysfs root of the GID tables, and their open errors differ as much
/// (a UDP port in use against a missing RoCE v2 GID). [`Provider::device_config`] makes
/// the common case, an address and a number of poll groups, for either.
pub trait Provider: Sized + Send + Sync + 'static {
    /// The device (`struct ibv_context` of one RDMA device and port).
    type Device: Device<Provider = Self>;
    /// A poll group: its CQs, SRQs and QPs, driven by one thread (`Send`, not `Sync`).
    type Context: Context<Provider = Self>;
    /// A registered memory region (`Send + Sync`).
    type Mr: MemoryRegion;
    /// The connection manager (cloneable, usable from any thread).
    type Cm: ConnectionManager<Provider = Self>;
    /// How to open a device.
    type DeviceConfig: Clone + std::fmt::Debug + Send + Sync;
    /// Why a device could not be opened (the message names the cause and the fix).
    type OpenError: std::error::Error + Send + Sync + 'static;
    /// The options of this provider's devices that other providers do not have, as a
    /// user of the provider (the host library, `nvmf-bench`) sets them: the soft
    /// provider's fault injection and packet path ([`crate::soft::SoftOptions`]); none
    /// for the verbs provider (`()`). `Default` is the provider's defaults.
    type Options: Clone + std::fmt::Debug + Default + Send + Sync + 'static;
    /// `"soft"` or `"verbs"` (the value of a `--provider` option).
    const NAME: &'static str;
    /// Whether [`Device::reg_mr`] pins the region's pages and charges them to the
    /// process's `RLIMIT_MEMLOCK` budget ([`crate::memlock::PinBudget::process`]): true
    /// for the verbs provider (`ibv_reg_mr` pins), false for the soft provider (its
    /// regions are plain memory). Memory that is also registered elsewhere (io_uring
    /// fixed buffers) is then pinned, and charged, twice; callers that size memory
    /// from the limit count it.
    const PINS_REGISTERED_MEMORY: bool;

    /// The configuration of the device that owns `ip`, with `poll_groups` poll groups
    /// (contexts) and the provider's defaults for everything else.
    fn device_config(ip: IpAddr, poll_groups: u32) -> Self::DeviceConfig;

    /// [`Provider::device_config`] with the provider's own `options` applied.
    fn device_config_with(
        ip: IpAddr,
        poll_groups: u32,
        options: &Self::Options,
    ) -> Self::DeviceConfig;

    /// Sets the RoCE MTU the device of `cfg` is to use (its active MTU; connections run
    /// at the smaller of the two ends'), where the provider lets the user choose it.
    ///
    /// The soft provider checks it against the interface MTU when the device opens,
    /// the verbs provider against the RDMA port's active MTU (a larger one is refused
    /// there, naming both and the fix).
    ///
    /// # Errors
    /// [`RoceMtuFixed`]: the default, for a provider whose MTU is only its port's.
    fn set_roce_mtu(cfg: &mut Self::DeviceConfig, mtu: Mtu) -> Result<(), RoceMtuFixed> {
        let _ = (cfg, mtu);
        Err(RoceMtuFixed {
            provider: Self::NAME,
        })
    }

    /// Opens the device of `cfg` (soft: binds `ip:4791`; verbs: the RDMA device whose
    /// RoCE v2 GID is `ip`).
    ///
    /// # Errors
    /// [`Provider::OpenError`]: soft, the address or port cannot be bound; verbs, no RDMA
    /// device, no RoCE v2 GID for the address, the port is down.
    fn open(cfg: &Self::DeviceConfig) -> Result<Arc<Self::Device>, Self::OpenError>;
}

/// A device: protection domains, memory registration, poll groups and the connection
/// manager of one local address.
pub trait Device: Send + Sync + 'static {
    /// The provider this device belongs to.
    type Provider: Provider;

    /// The local IP address (its RoCE v2 GID).
    fn ip(&self) -> IpAddr;
    /// The active path MTU of the port.
    fn path_mtu(&self) -> Mtu;
    /// What the device supports (`ibv_query_device`; the soft provider's own limits).
    fn caps(&self) -> DeviceCaps;
    /// Number of poll groups [`Device::open_context`] can open.
    fn poll_groups(&self) -> u32;
    /// The device's own counters by name (Linux rxe's `hw_counters` names where one
    /// exists), each counting since the device was opened. The soft provider: packets
    /// and datagrams sent and received, ICRC errors, malformed and unknown-QP packets,
    /// send drops ...; the default (verbs): none (the kernel device's sysfs
    /// `hw_counters` have them).
    fn hw_counters(&self) -> Vec<(&'static str, u64)> {
        Vec::new()
    }

    /// Allocates a protection domain (`ibv_alloc_pd`).
    ///
    /// # Errors
    /// [`VerbsError::Os`] (ENOMEM) on the verbs provider; never on the soft provider.
    fn alloc_pd(&self) -> Result<Pd, VerbsError>;

    /// Allocates `len` bytes (page aligned, zeroed) and registers them in `pd` with
    /// `access` (`ibv_reg_mr`). The verbs provider charges the pinned bytes to the
    /// process's memlock budget first ([`crate::memlock::PinBudget::process`]); the soft
    /// provider pins nothing.
    ///
    /// # Errors
    /// `InvalidArgument` (0 bytes, remote write without local write, IBTA o10-31);
    /// `CapabilityExceeded` beyond `max_mr_size`; `Memlock` over `RLIMIT_MEMLOCK`;
    /// `NoResources`; `Os` from `ibv_reg_mr`.
    fn reg_mr(
        self: &Arc<Self>,
        pd: Pd,
        len: usize,
        access: AccessFlags,
    ) -> Result<<Self::Provider as Provider>::Mr, VerbsError>;

    /// Allocates a type 2 memory window in `pd` (`ibv_alloc_mw`) and returns its (not
    /// yet valid) rkey, which also names it in `SendOp::BindMw::mw_handle`.
    ///
    /// # Errors
    /// `CapabilityExceeded` without memory windows; `NoResources`; `Os`.
    fn alloc_mw(&self, pd: Pd) -> Result<u32, VerbsError>;

    /// Opens poll group `index` (below [`Device::poll_groups`]); each is open once at a
    /// time and may be opened again after its context was dropped.
    ///
    /// # Errors
    /// `InvalidArgument` for an index out of range or a group already open; `Os`.
    fn open_context(
        self: &Arc<Self>,
        index: u32,
    ) -> Result<<Self::Provider as Provider>::Context, VerbsError>;

    /// The device's connection manager (soft: the CM agent on QP1; verbs: librdmacm),
    /// started on first use and kept by the device: every call returns a handle to the
    /// same one, which answers the CM messages of the device's address (REJ for a port
    /// nobody listens on, DREP, stale connections) for as long as the device lives.
    ///
    /// # Errors
    /// `NoDevice` without `/dev/infiniband/rdma_cm` (verbs); `Os` when its thread or
    /// sockets cannot be set up.
    fn cm(self: &Arc<Self>) -> Result<<Self::Provider as Provider>::Cm, VerbsError>;
}

/// A registered memory region (`struct ibv_mr`) over memory the provider allocated. Its
/// range `[addr(), addr() + len())` is the iova SGEs and RETHs use (the virtual address
/// in this process).
pub trait MemoryRegion: Send + Sync {
    /// Local key.
    fn lkey(&self) -> u32;
    /// Remote key (meaningful only with a remote access flag).
    fn rkey(&self) -> u32;
    /// The iova of the first byte.
    fn addr(&self) -> u64;
    /// Length in bytes.
    fn len(&self) -> usize;
    /// Whether the region is empty.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Pointer to the first byte.
    fn as_ptr(&self) -> *mut u8;
    /// The PD the region is registered in.
    fn pd(&self) -> Pd;
    /// The backing memory (to register it elsewhere too, e.g. as io_uring fixed
    /// buffers, which pins it, and is charged, again).
    fn memory(&self) -> &Arc<MrMemory>;

    /// Copies `data` into the region at `offset`.
    ///
    /// # Panics
    /// When `offset + data.len()` is beyond the region (a caller bug).
    fn write(&self, offset: usize, data: &[u8]) {
        assert!(
            offset
                .checked_add(data.len())
                .is_some_and(|e| e <= self.len()),
            "MemoryRegion::write out of range"
        );
        // SAFETY: in range of memory the region owns; concurrent access by the device or
        // a peer to the same bytes is the RDMA programming model's race, ordered by
        // completions, not a Rust aliasing one.
        unsafe {
            std::ptr::copy_nonoverlapping(data.as_ptr(), self.as_ptr().add(offset), data.len())
        }
    }

    /// Copies the bytes at `offset` into `out`.
    ///
    /// # Panics
    /// When `offset + out.len()` is beyond the region (a caller bug).
    fn read(&self, offset: usize, out: &mut [u8]) {
        assert!(
            offset
                .checked_add(out.len())
                .is_some_and(|e| e <= self.len()),
            "MemoryRegion::read out of range"
        );
        // SAFETY: as in `write`.
        unsafe {
            std::ptr::copy_nonoverlapping(self.as_ptr().add(offset), out.as_mut_ptr(), out.len())
        }
    }
}

/// A poll group: the unit of run-to-completion polling. It owns its CQs, SRQs and QPs
/// (named by handles valid only in this context) and is driven by one thread.
pub trait Context: Send {
    /// The provider this context belongs to.
    type Provider: Provider;

    /// The device of this poll group.
    fn device(&self) -> &Arc<<Self::Provider as Provider>::Device>;
    /// The poll group's index on its device.
    fn poll_group(&self) -> u32;

    /// Creates a CQ of at least `cqe` entries (`ibv_create_cq`).
    ///
    /// # Errors
    /// `CapabilityExceeded` beyond `max_cqe`; `Os`.
    fn create_cq(&mut self, cqe: u32) -> Result<Cq, VerbsError>;

    /// Creates an SRQ of `max_wr` receive WRs in `pd` (`ibv_create_srq`), its limit
    /// disarmed.
    ///
    /// # Errors
    /// `CapabilityExceeded` beyond `max_srq_wr`; `NoSuchObject` for an unknown PD; `Os`.
    fn create_srq(&mut self, pd: Pd, max_wr: u32) -> Result<Srq, VerbsError>;

    /// Arms the SRQ limit (`ibv_modify_srq` IBV_SRQ_LIMIT): once a receive taken from
    /// `srq` leaves fewer than `limit` WRs posted, [`Context::poll_async_event`] hands out
    /// one [`AsyncEvent::SrqLimitReached`] and the limit is disarmed; arm it again after.
    ///
    /// # Errors
    /// `InvalidArgument` for an unknown SRQ or a limit outside `1..max_wr`; `Os`.
    fn arm_srq_limit(&mut self, srq: Srq, limit: u32) -> Result<(), VerbsError>;

    /// Creates a QP of `attr.qp_type` (RC, UC or UD) in Reset (`ibv_create_qp`). The
    /// sizes are checked against [`Device::caps`]; the granted ones are
    /// [`Context::qp_cap`].
    ///
    /// # Errors
    /// `CapabilityExceeded` (sizes beyond the device's); `InvalidArgument` (a CQ or SRQ
    /// of another context; soft: a UD QP on the AF_XDP path); `NoSuchObject` (unknown
    /// PD); `Os`.
    fn create_qp(&mut self, attr: &QpInitAttr) -> Result<Qp, VerbsError>;

    /// Creates an address handle in `pd` for UD sends to `attr` (`ibv_create_ah`,
    /// IBTA Vol 1 §11.2.2.1): [`crate::verbs::SendOp::UdSend`] names it.
    ///
    /// # Errors
    /// `InvalidArgument` (a destination of the other address family, soft; no GID
    /// index for the local address, verbs); `Os` (`ibv_create_ah`).
    fn create_ah(&mut self, pd: Pd, attr: &AhAttr) -> Result<Ah, VerbsError>;

    /// Destroys an address handle (`ibv_destroy_ah`).
    ///
    /// # Errors
    /// `NoSuchObject`; `Os`.
    fn destroy_ah(&mut self, ah: Ah) -> Result<(), VerbsError>;

    /// The RoCEv2 UDP source port `qp`'s packets leave from, where the provider knows
    /// it (soft: the port its send socket is bound to, derived from the path's flow
    /// label, see [`crate::wire::udp_sport_from_flow_label`]); `None` otherwise (verbs:
    /// the kernel device chooses it, or the QP has no path yet).
    fn qp_udp_sport(&self, _qp: Qp) -> Option<u16> {
        None
    }

    /// The capacities granted to `qp` at creation (`max_inline_data` included); `None`
    /// for an unknown QP.
    fn qp_cap(&self, qp: Qp) -> Option<QpCap>;

    /// Modifies `qp` (`ibv_modify_qp`).
    ///
    /// # Errors
    /// `InvalidTransition { from, to }` for a state change the RC state machine does not
    /// have (IBTA Vol 1 §10.3.1); `InvalidArgument` naming a missing required attribute;
    /// `CapabilityExceeded` for RDMA READ depths beyond the device's; `NoSuchObject`.
    fn modify_qp(&mut self, qp: Qp, attr: &QpAttr) -> Result<(), VerbsError>;

    /// The QP's current state; `None` for an unknown QP.
    fn query_qp_state(&self, qp: Qp) -> Option<QpState>;

    /// Destroys `qp` (`ibv_destroy_qp`); its pending work is dropped without completions.
    ///
    /// # Errors
    /// `NoSuchObject`; `Os` (EBUSY).
    fn destroy_qp(&mut self, qp: Qp) -> Result<(), VerbsError>;

    /// Posts one send WR (`ibv_post_send`).
    ///
    /// # Errors
    /// `NoSuchObject`; `InvalidState` outside RTS; `QueueFull`; `InvalidArgument` /
    /// `CapabilityExceeded` for SGEs or inline bytes beyond the QP's grant.
    fn post_send(&mut self, qp: Qp, wr: &SendWr) -> Result<(), VerbsError>;

    /// Posts a chain of send WRs (soft: their packets share `sendmmsg` calls; verbs: one
    /// `ibv_post_send` with a list linked on the stack). Stops at the first WR refused;
    /// those before it were posted.
    ///
    /// # Errors
    /// As [`Context::post_send`].
    fn post_send_list(&mut self, qp: Qp, wrs: &[SendWr]) -> Result<(), VerbsError>;

    /// Posts a send WR without transmitting it yet, where the provider batches (soft:
    /// its packets leave at the next [`Context::flush_deferred`], `poll_cq` or `wait`,
    /// together with everything else the QP has, so WRs of one size posted in a row
    /// leave as one train). Verbs: [`Context::post_send`] (the device works on its own).
    ///
    /// # Errors
    /// As [`Context::post_send`].
    fn post_send_deferred(&mut self, qp: Qp, wr: &SendWr) -> Result<(), VerbsError> {
        self.post_send(qp, wr)
    }

    /// Posts a receive WR to `qp`'s own receive queue (`ibv_post_recv`).
    ///
    /// # Errors
    /// `NoSuchObject`; `QueueFull`; `InvalidArgument` (a QP on an SRQ, too many SGEs).
    fn post_recv(&mut self, qp: Qp, wr: &RecvWr) -> Result<(), VerbsError>;

    /// Posts a receive WR to `srq` (`ibv_post_srq_recv`).
    ///
    /// # Errors
    /// `NoSuchObject` / `InvalidArgument` for an unknown SRQ; `QueueFull`.
    fn post_srq_recv(&mut self, srq: Srq, wr: &RecvWr) -> Result<(), VerbsError>;

    /// Moves up to `out.len()` completions of `cq` into `out` (`ibv_poll_cq`) and
    /// returns how many; 0 for an unknown CQ. The soft provider does its protocol work
    /// (receive, timers, transmit) here too.
    fn poll_cq(&mut self, cq: Cq, out: &mut [WorkCompletion]) -> usize;

    /// The next asynchronous event of this poll group's objects (SRQ limit reached, QP
    /// fatal, ...), without blocking (`ibv_get_async_event` shaped).
    fn poll_async_event(&mut self) -> Option<AsyncEvent>;

    /// Arms `cq` for one completion event (`ibv_req_notify_cq`): the next
    /// [`Context::wait`] returns once it holds a completion. Poll the CQ once more after
    /// arming (a completion may have come in between), then wait.
    ///
    /// # Errors
    /// `InvalidArgument` for an unknown CQ; `Os`.
    fn req_notify_cq(&mut self, cq: Cq) -> Result<(), VerbsError>;

    /// Sleeps until a completion event of an armed CQ, an async event, or `timeout`
    /// (verbs: `poll(2)` on the completion channel and the async descriptor; soft:
    /// `ppoll(2)` on the receive socket, bounded by the next RC timer, since its
    /// completions come from processing packets and timers). A wake-up may find nothing
    /// new (the soft provider wakes for every packet): poll, then wait again.
    fn wait(&mut self, timeout: Duration);

    /// Polls `cq` into `out`, sleeping on its completion event while it is empty (poll,
    /// arm, poll again, [`Context::wait`]), for at most `timeout`; returns how many
    /// completions it moved (0 when the time ran out).
    ///
    /// # Errors
    /// As [`Context::req_notify_cq`].
    fn poll_cq_blocking(
        &mut self,
        cq: Cq,
        out: &mut [WorkCompletion],
        timeout: Duration,
    ) -> Result<usize, VerbsError> {
        let deadline = Instant::now() + timeout;
        loop {
            let n = self.poll_cq(cq, out);
            if n > 0 {
                return Ok(n);
            }
            self.req_notify_cq(cq)?;
            let n = self.poll_cq(cq, out);
            if n > 0 {
                return Ok(n);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Ok(0);
            }
            self.wait(left.min(Duration::from_millis(100)));
        }
    }

    /// One round of provider work (soft: receive, timers, transmit); returns the packets
    /// received. Verbs: nothing, a device works on its own.
    fn progress(&mut self) -> usize {
        0
    }
    /// Latency mode hint (soft: ACKs wait for the next request of the poll round; see
    /// `soft::Context::set_deferred_transmit`). Verbs: ignored.
    fn set_deferred_transmit(&mut self, _on: bool) {}
    /// Transmits what the latency mode and [`Context::post_send_deferred`] deferred.
    /// Verbs: nothing to do.
    fn flush_deferred(&mut self) {}
    /// Per-QP packet and error counters, where the provider keeps them (soft); `None`
    /// otherwise (verbs: the device's sysfs `hw_counters`).
    fn qp_counters(&self, _qp: Qp) -> Option<QpCounters> {
        None
    }
}

/// The connection manager, rdma_cm shaped: connect and accept bring a QP to RTS and
/// carry private data; reject carries private data too (REJ reason 28, consumer
/// defined).
///
/// Connection bring-up lives here, once per provider: the verbs provider lets librdmacm
/// do it (`rdma_create_qp`, `rdma_accept`, `rdma_connect`); the soft provider does the
/// same transitions itself over its CM agent (`soft::conn`). Events of listened ports
/// and of connections arrive on crossbeam channels as [`CmEvent`]s.
pub trait ConnectionManager: Clone + Send + Sync + 'static {
    /// The provider this connection manager belongs to.
    type Provider: Provider;

    /// Listens on RDMA CM port `port` (4420 for NVMe/RDMA) of the device's address;
    /// [`CmEvent::ConnectRequest`]s and the later events of the connections accepted
    /// from them arrive on the returned channel.
    ///
    /// # Errors
    /// `Cm(AlreadyListening)`; `Verbs(Os)`; `Gone`.
    fn listen(&self, port: u16) -> Result<Receiver<CmEvent>, ConnError>;

    /// Stops listening on RDMA CM port `port` (soft: later REQs get REJ reason 8;
    /// verbs: the listening `rdma_cm_id` is destroyed). The connections accepted from
    /// it go on; their events keep arriving on the listen's channel. Returns whether
    /// the port was listened on.
    ///
    /// # Errors
    /// `Gone`.
    fn unlisten(&self, port: u16) -> Result<bool, ConnError>;

    /// Passive side, in the poll group's thread: creates the QP for request `req` in
    /// `ctx`, to be brought to RTS from the request (path, PSN, flow label, selective
    /// retransmission) with the RDMA READ depths decided as rdma_cm decides them:
    /// responder resources = min(device `max_qp_rd_atom`, the request's initiator
    /// depth), initiator depth = min(`ord`, device `max_qp_init_rd_atom`, the request's
    /// responder resources). The soft provider brings the QP to RTS here; the verbs
    /// provider leaves it in Init (`rdma_create_qp`) and `rdma_accept` moves it on:
    /// either way it is in RTS once [`ConnectionManager::accept`] returned. Post the
    /// receive buffers next (a QP without an SRQ), then accept with the returned token.
    ///
    /// # Errors
    /// `Cm(UnknownConnection)` (verbs); the verbs errors of creating and modifying the
    /// QP (nothing is left behind then).
    fn create_accept_qp(
        &self,
        ctx: &mut <Self::Provider as Provider>::Context,
        req: &ConnRequest,
        init: &QpInitAttr,
        ord: u8,
    ) -> Result<(Qp, AcceptToken), ConnError>;

    /// Sends the REP of request `req` with `private_data` (at most 196 bytes); any
    /// thread. [`CmEvent::Established`] follows on the listener's channel when the RTU
    /// arrives.
    ///
    /// # Errors
    /// `Cm(PrivateDataTooLong)`, `Cm(UnknownConnection)`, `Cm(InvalidState)`; `Verbs(Os)`.
    fn accept(&self, req: ConnId, token: AcceptToken, private_data: &[u8])
        -> Result<(), ConnError>;

    /// Rejects request `req` with REJ reason 28 (consumer defined) and `private_data`
    /// (at most 148 bytes; NVMe/RDMA: the RDMA_CM_REJECT record).
    ///
    /// # Errors
    /// `Cm(PrivateDataTooLong)`, `Cm(UnknownConnection)`; `Verbs(Os)`.
    fn reject(&self, req: ConnId, private_data: &[u8]) -> Result<(), ConnError>;

    /// Active side, blocking up to `params.timeout`: creates the QP in `ctx` (Init),
    /// lets `post_receives` post the receive buffers, sends the REQ with
    /// `params.private_data` (at most 56 bytes), and on the REP brings the QP to RTR and
    /// RTS and sends the RTU. The returned [`ActiveConn`] has the QP in RTS, the REP's
    /// private data and a channel of the connection's later events.
    ///
    /// # Errors
    /// `Rejected { reason, private_data }`; `Stale` (REJ reason 10: retry with a new QP,
    /// a bounded number of times); `Unreachable` (nothing answered through all
    /// retries); `Timeout`; `Cm(PrivateDataTooLong)`, `Cm(AddressFamilyMismatch)`;
    /// `Verbs` from creating the QP or from `post_receives`. Whatever was created is
    /// destroyed on error.
    fn connect(
        &self,
        ctx: &mut <Self::Provider as Provider>::Context,
        init: &QpInitAttr,
        params: &ConnectRequestParams,
        post_receives: &mut PostReceives<'_, <Self::Provider as Provider>::Context>,
    ) -> Result<ActiveConn, ConnError>;

    /// Disconnects `id` (DREQ); [`CmEvent::Disconnected`] follows on its channel. `Ok`
    /// when the connection is already disconnecting.
    ///
    /// # Errors
    /// `Cm(UnknownConnection)`; `Verbs(Os)`; `Gone`.
    fn disconnect(&self, id: ConnId) -> Result<(), ConnError>;
}

/// A provider whose RoCE MTU is its RDMA port's active MTU refused a chosen one
/// ([`Provider::set_roce_mtu`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error(
    "the {provider} provider uses its RDMA port's active MTU (it follows the interface MTU: \
     ip link set dev IFACE mtu N); it takes no RoCE MTU of its own"
)]
pub struct RoceMtuFixed {
    /// The provider's name ([`Provider::NAME`]).
    pub provider: &'static str,
}
