//! RDMA CM through librdmacm: one event channel (`rdma_create_event_channel`) per
//! device, a thread that takes its events (`rdma_get_cm_event`, acknowledged at once
//! with `rdma_ack_cm_event`) and turns them into [`CmEvent`]s on crossbeam channels, as
//! the soft provider's CM agent does (`crate::soft::CmAgent`), and the calls:
//! `rdma_create_id`, `rdma_bind_addr` + `rdma_listen`, `rdma_resolve_addr`,
//! `rdma_resolve_route`, `rdma_create_qp`, `rdma_connect`, `rdma_accept`, `rdma_reject`,
//! `rdma_disconnect`, `rdma_destroy_id`.
//!
//! librdmacm brings the QP created on a cm_id to RTR and RTS itself (`rdma_accept` on
//! the passive side, the REP on the active side), so [`ConnectionManager::connect`] and
//! [`ConnectionManager::accept`] return with the QP in RTS. What the kernel's CM hides (the
//! Starting PSN, the flow label, the ACK timeout of a request) is reported as 0.
//!
//! Connections are named by [`ConnId`]s this module hands out; the cm_id's `context`
//! holds it. A cm_id is destroyed when its connection ends (rejected, unreachable,
//! disconnected) or is abandoned; a QP created on it stays with its poll group, which
//! destroys it (see `CmLink`).
use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam::channel::{self, Receiver, RecvTimeoutError, Sender};
use parking_lot::Mutex;
use rdma_sys::{
    ibv_qp, rdma_accept, rdma_ack_cm_event, rdma_bind_addr, rdma_cm_event, rdma_cm_event_type,
    rdma_cm_id, rdma_conn_param, rdma_connect, rdma_create_event_channel, rdma_create_id,
    rdma_destroy_event_channel, rdma_destroy_id, rdma_disconnect, rdma_event_channel,
    rdma_get_cm_event, rdma_listen, rdma_port_space, rdma_reject, rdma_resolve_addr,
    rdma_resolve_route, rdma_set_option,
};

use super::context::VerbsContext;
use super::device::VerbsDevice;
use super::qp;
use super::sys::{errno, os_err, set_nonblocking, sockaddr_from, sockaddr_to};
use super::VerbsProvider;
use crate::cm::{CmError, CmEvent, ConnId};
use crate::verbs::connection::{
    AcceptToken, ActiveConn, ConnError, ConnRequest, ConnectRequestParams,
};
use crate::verbs::{
    ConnectionManager, Context as _, Device as _, DeviceCaps, Mtu, PostReceives, Qp, QpInitAttr,
    VerbsError,
};

/// User private data of a REQ in RDMA CM's TCP port space (92 - the 36-byte CMA header).
pub const REQ_PRIVATE_DATA_MAX: usize = 56;
/// Private data of a REP (IBTA §12.6.8).
pub const REP_PRIVATE_DATA_MAX: usize = 196;
/// Private data of a REJ (IBTA §12.6.7).
pub const REJ_PRIVATE_DATA_MAX: usize = 148;
/// Longest wait of one address or route resolution (Linux nvme-rdma's
/// `NVME_RDMA_CM_TIMEOUT_MS`); the connect's own timeout bounds the whole.
pub const RESOLVE_TIMEOUT: Duration = Duration::from_millis(3000);
/// Pending connection requests a listener queues in the kernel.
pub const LISTEN_BACKLOG: i32 = 128;
/// `RDMA_OPTION_ID` / `RDMA_OPTION_ID_ACK_TIMEOUT` of `rdma_cma.h` (not in rdma-sys).
const RDMA_OPTION_ID: i32 = 0;
const RDMA_OPTION_ID_ACK_TIMEOUT: i32 = 3;

/// Which side a cm_id is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// A listener on a port.
    Listener { port: u16 },
    /// A connection from a request to a listener.
    Passive { local_port: u16 },
    /// A connection this side asked for.
    Active,
}

/// Address and route resolution results for a connecting caller.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Setup {
    AddrResolved,
    AddrError(i32),
    RouteResolved,
    RouteError(i32),
}

struct Entry {
    id: *mut rdma_cm_id,
    role: Role,
    events: Option<Sender<CmEvent>>,
    setup: Option<Sender<Setup>>,
}

/// What the event thread copies out of an `rdma_cm_event` before acknowledging it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CopiedEvent {
    /// `enum rdma_cm_event_type` value.
    pub event: u32,
    /// `status` (the REJ reason for RDMA_CM_EVENT_REJECTED; a negative errno for errors).
    pub status: i32,
    /// The connection the event is for (for a request: the listener's).
    pub conn: u32,
    /// `param.conn.private_data`, `private_data_len` bytes.
    pub private_data: Vec<u8>,
    /// `param.conn.responder_resources`: from the local QP's view, as ib_cm reports a
    /// REQ or REP (`cm_format_req_event`, `cm_format_rep_event`): the message's
    /// initiator depth.
    pub responder_resources: u8,
    /// `param.conn.initiator_depth`: the message's responder resources (see above).
    pub initiator_depth: u8,
    /// `param.conn.retry_count`.
    pub retry_count: u8,
    /// `param.conn.rnr_retry_count`.
    pub rnr_retry_count: u8,
    /// `param.conn.srq`.
    pub srq: bool,
    /// `param.conn.qp_num`: the peer's QPN.
    pub qp_num: u32,
    /// The peer's address (the cm_id's route destination).
    pub peer: Option<SocketAddr>,
}

/// The model's events for a copied librdmacm event of connection `id` in `role`:
/// none for resolution events and TIMEWAIT_EXIT; for the active side's ESTABLISHED a
/// [`CmEvent::ConnectReply`] (the REP's values; librdmacm already moved the QP to RTS
/// and sent the RTU) followed by [`CmEvent::Established`].
///
/// The READ depths are swapped back: ib_cm reports a REQ's or REP's responder
/// resources and initiator depth from the local QP's view (the peer's initiator depth
/// as the local responder resources), the model carries them as the message does (the
/// soft provider's CM, [`ConnRequest`], [`ActiveConn`]).
pub fn to_cm_events(ev: &CopiedEvent, id: ConnId, role: Role, path_mtu: Mtu) -> Vec<CmEvent> {
    use rdma_cm_event_type::*;
    match ev.event {
        RDMA_CM_EVENT_CONNECT_REQUEST => {
            let (remote_ip, remote_port) = ev
                .peer
                .map(|a| (a.ip(), a.port()))
                .unwrap_or((IpAddr::from([0, 0, 0, 0]), 0));
            let local_port = match role {
                Role::Passive { local_port } | Role::Listener { port: local_port } => local_port,
                Role::Active => 0,
            };
            vec![CmEvent::ConnectRequest {
                id,
                remote_ip,
                remote_port,
                local_port,
                remote_qpn: ev.qp_num,
                remote_psn: 0,
                responder_resources: ev.initiator_depth,
                initiator_depth: ev.responder_resources,
                path_mtu,
                local_ack_timeout: 0,
                retry_count: ev.retry_count,
                rnr_retry_count: ev.rnr_retry_count,
                flow_label: 0,
                traffic_class: 0,
                hop_limit: 64,
                srq: ev.srq,
                peer_selective_retransmit: false,
                private_data: ev.private_data.clone(),
            }]
        }
        RDMA_CM_EVENT_ESTABLISHED | RDMA_CM_EVENT_CONNECT_RESPONSE => {
            let est = CmEvent::Established {
                id,
                peer_selective_retransmit: false,
            };
            if role == Role::Active {
                vec![
                    CmEvent::ConnectReply {
                        id,
                        remote_qpn: ev.qp_num,
                        remote_psn: 0,
                        responder_resources: ev.initiator_depth,
                        initiator_depth: ev.responder_resources,
                        rnr_retry_count: ev.rnr_retry_count,
                        flow_label: 0,
                        target_ack_delay: 0,
                        peer_selective_retransmit: false,
                        private_data: ev.private_data.clone(),
                    },
                    est,
                ]
            } else {
                vec![est]
            }
        }
        RDMA_CM_EVENT_REJECTED => vec![CmEvent::Rejected {
            id,
            reason: u16::try_from(ev.status).unwrap_or(0),
            private_data: ev.private_data.clone(),
        }],
        RDMA_CM_EVENT_UNREACHABLE | RDMA_CM_EVENT_CONNECT_ERROR => {
            vec![CmEvent::Unreachable { id }]
        }
        RDMA_CM_EVENT_DISCONNECTED | RDMA_CM_EVENT_DEVICE_REMOVAL => {
            vec![CmEvent::Disconnected { id }]
        }
        _ => Vec::new(),
    }
}

/// Whether an event ends the connection (its cm_id is then destroyed).
fn is_terminal(event: u32) -> bool {
    use rdma_cm_event_type::*;
    matches!(
        event,
        RDMA_CM_EVENT_REJECTED
            | RDMA_CM_EVENT_UNREACHABLE
            | RDMA_CM_EVENT_CONNECT_ERROR
            | RDMA_CM_EVENT_DISCONNECTED
            | RDMA_CM_EVENT_DEVICE_REMOVAL
    )
}

/// The CM's state shared by its handles, the event thread and the QPs created on its
/// cm_ids.
pub(crate) struct Shared {
    channel: *mut rdma_event_channel,
    ip: IpAddr,
    caps: DeviceCaps,
    path_mtu: Mtu,
    ids: Mutex<HashMap<u32, Entry>>,
    next_id: AtomicU32,
    wake: OwnedFd,
    stop: AtomicBool,
}

// SAFETY: librdmacm calls are thread safe; the cm_id table is behind a mutex and a
// cm_id is only used under it (or by the one caller that owns it during connect).
unsafe impl Send for Shared {}
// SAFETY: see above.
unsafe impl Sync for Shared {}

impl Shared {
    fn wake(&self) {
        let one: u64 = 1;
        // SAFETY: 8-byte write to an eventfd.
        unsafe {
            libc::write(
                self.wake.as_raw_fd(),
                &one as *const u64 as *const libc::c_void,
                8,
            )
        };
    }

    /// Removes `conn` and destroys its cm_id (`rdma_destroy_id`; a QP created on it is
    /// left to its poll group). Events of the id must have been acknowledged.
    fn destroy(&self, conn: u32) {
        let e = self.ids.lock().remove(&conn);
        if let Some(e) = e {
            // SAFETY: the id is ours and out of the table; its events were acked.
            let rc = unsafe {
                (*e.id).qp = std::ptr::null_mut();
                rdma_destroy_id(e.id)
            };
            if rc != 0 {
                tracing::warn!(errno = errno(), conn, "rdma_destroy_id");
            }
        }
    }
}

impl Drop for Shared {
    fn drop(&mut self) {
        for (_, e) in self.ids.get_mut().drain() {
            // SAFETY: ours; the event thread is gone (it held an Arc of self).
            unsafe {
                (*e.id).qp = std::ptr::null_mut();
                rdma_destroy_id(e.id);
            }
        }
        // SAFETY: no id uses the channel any more.
        unsafe { rdma_destroy_event_channel(self.channel) };
    }
}

/// The tie between a QP created on a cm_id (`rdma_create_qp`) and the CM: the QP is
/// destroyed through it, so the cm_id (if it still exists) forgets it first.
pub(crate) struct CmLink {
    shared: Arc<Shared>,
    conn: u32,
}

impl CmLink {
    /// Detaches `qp` from its cm_id (under the CM's lock) and destroys it.
    ///
    /// # Safety
    /// `qp` is the live QP created on this link's cm_id; nothing uses it afterwards.
    pub(crate) unsafe fn destroy_qp(&self, q: *mut ibv_qp) -> Result<(), VerbsError> {
        let ids = self.shared.ids.lock();
        if let Some(e) = ids.get(&self.conn) {
            if (*e.id).qp == q {
                (*e.id).qp = std::ptr::null_mut();
            }
        }
        qp::destroy(q)
    }
}

struct ThreadGuard {
    shared: Arc<Shared>,
    handle: Option<JoinHandle<()>>,
}

impl Drop for ThreadGuard {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Release);
        self.shared.wake();
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

/// The connection manager of a verbs device (librdmacm). Cloneable; its event thread
/// stops when the last handle is dropped.
#[derive(Clone)]
pub struct VerbsCm {
    shared: Arc<Shared>,
    _thread: Arc<ThreadGuard>,
}

impl std::fmt::Debug for VerbsCm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VerbsCm")
            .field("ip", &self.shared.ip)
            .finish()
    }
}

fn remaining(deadline: Instant) -> Duration {
    deadline.saturating_duration_since(Instant::now())
}

fn ms(d: Duration) -> i32 {
    i32::try_from(d.as_millis()).unwrap_or(i32::MAX).max(1)
}

impl VerbsCm {
    /// Starts the CM of `dev`: an RDMA CM event channel and its thread.
    ///
    /// # Errors
    /// [`VerbsError::NoDevice`] when `rdma_create_event_channel` fails with ENODEV
    /// (no `/dev/infiniband/rdma_cm`); [`VerbsError::Os`] otherwise (or from `eventfd`,
    /// `fcntl`, spawning the thread).
    pub(crate) fn start(dev: &Arc<VerbsDevice>) -> Result<VerbsCm, VerbsError> {
        // SAFETY: no preconditions.
        let channel = unsafe { rdma_create_event_channel() };
        if channel.is_null() {
            let e = errno();
            if e == libc::ENODEV || e == libc::ENOSYS || e == libc::ENOENT {
                return Err(VerbsError::NoDevice(format!(
                    "no RDMA devices: rdma_create_event_channel failed ({}); is the rdma_cm \
                     module loaded (/dev/infiniband/rdma_cm)?",
                    std::io::Error::from_raw_os_error(e)
                )));
            }
            return Err(os_err("rdma_create_event_channel"));
        }
        // SAFETY: live channel.
        if let Err(e) = set_nonblocking(unsafe { (*channel).fd }, "fcntl(rdma_cm fd, O_NONBLOCK)") {
            // SAFETY: unused channel.
            unsafe { rdma_destroy_event_channel(channel) };
            return Err(e);
        }
        // SAFETY: eventfd returns a new descriptor or -1.
        let efd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if efd < 0 {
            // SAFETY: unused channel.
            unsafe { rdma_destroy_event_channel(channel) };
            return Err(os_err("eventfd"));
        }
        let shared = Arc::new(Shared {
            channel,
            ip: dev.ip(),
            caps: dev.caps(),
            path_mtu: dev.path_mtu(),
            ids: Mutex::new(HashMap::new()),
            next_id: AtomicU32::new(1),
            // SAFETY: efd is a fresh descriptor we own.
            wake: unsafe { OwnedFd::from_raw_fd(efd) },
            stop: AtomicBool::new(false),
        });
        let s2 = shared.clone();
        let handle = std::thread::Builder::new()
            .name(format!("rdma-cm {}", dev.ip()))
            .spawn(move || run(s2))
            .map_err(|e| VerbsError::Os {
                call: "spawning the RDMA CM thread",
                errno: e.raw_os_error().unwrap_or(libc::EAGAIN),
            })?;
        Ok(VerbsCm {
            shared: shared.clone(),
            _thread: Arc::new(ThreadGuard {
                shared,
                handle: Some(handle),
            }),
        })
    }

    /// A new cm_id in RDMA CM's TCP port space (`rdma_create_id`) whose context is its
    /// new [`ConnId`].
    fn new_id(
        &self,
        role: Role,
        events: Option<Sender<CmEvent>>,
        setup: Option<Sender<Setup>>,
    ) -> Result<(u32, *mut rdma_cm_id), ConnError> {
        let conn = self.shared.next_id.fetch_add(1, Ordering::Relaxed);
        let mut id: *mut rdma_cm_id = std::ptr::null_mut();
        // SAFETY: live channel; the context is an integer, never dereferenced.
        let rc = unsafe {
            rdma_create_id(
                self.shared.channel,
                &mut id,
                conn as usize as *mut libc::c_void,
                rdma_port_space::RDMA_PS_TCP,
            )
        };
        if rc != 0 || id.is_null() {
            return Err(os_err("rdma_create_id").into());
        }
        self.shared.ids.lock().insert(
            conn,
            Entry {
                id,
                role,
                events,
                setup,
            },
        );
        Ok((conn, id))
    }

    #[allow(clippy::too_many_arguments)]
    fn connect_steps(
        &self,
        ctx: &mut VerbsContext,
        init: &QpInitAttr,
        params: &ConnectRequestParams,
        post_receives: &mut PostReceives<'_, VerbsContext>,
        (conn, id): (u32, *mut rdma_cm_id),
        (srx, erx): (&Receiver<Setup>, &Receiver<CmEvent>),
        deadline: Instant,
        qp_made: &mut Option<Qp>,
    ) -> Result<(Vec<u8>, u8, u8), ConnError> {
        let dest = params.dest;
        let timeout = ConnError::Timeout {
            dest,
            after: params.timeout,
        };
        let wait_setup = |want: Setup| -> Result<(), ConnError> {
            match srx.recv_timeout(remaining(deadline)) {
                Ok(s) if s == want => Ok(()),
                Ok(Setup::AddrError(_)) => Err(ConnError::Unreachable {
                    dest,
                    stage: "address resolution (RDMA_CM_EVENT_ADDR_ERROR)",
                }),
                Ok(Setup::RouteError(_)) => Err(ConnError::Unreachable {
                    dest,
                    stage: "route resolution (RDMA_CM_EVENT_ROUTE_ERROR)",
                }),
                Ok(_) => Err(ConnError::Unreachable {
                    dest,
                    stage: "resolution out of order",
                }),
                Err(RecvTimeoutError::Timeout) => Err(timeout.clone()),
                Err(RecvTimeoutError::Disconnected) => Err(ConnError::Gone),
            }
        };
        let mut src = sockaddr_from(SocketAddr::new(self.shared.ip, 0));
        let mut dst = sockaddr_from(dest);
        let t = ms(remaining(deadline).min(RESOLVE_TIMEOUT));
        // SAFETY: the id is ours (no terminal event can destroy it before rdma_connect).
        let rc = unsafe {
            rdma_resolve_addr(
                id,
                &mut src as *mut _ as *mut libc::sockaddr,
                &mut dst as *mut _ as *mut libc::sockaddr,
                t,
            )
        };
        if rc != 0 {
            return Err(os_err("rdma_resolve_addr").into());
        }
        wait_setup(Setup::AddrResolved)?;
        if let Some(mut to) = params.local_ack_timeout {
            // SAFETY: live id; a one-byte option value.
            let rc = unsafe {
                rdma_set_option(
                    id,
                    RDMA_OPTION_ID,
                    RDMA_OPTION_ID_ACK_TIMEOUT,
                    &mut to as *mut u8 as *mut libc::c_void,
                    1,
                )
            };
            if rc != 0 {
                tracing::debug!(
                    errno = errno(),
                    "rdma_set_option(ACK_TIMEOUT) not supported"
                );
            }
        }
        let t = ms(remaining(deadline).min(RESOLVE_TIMEOUT));
        // SAFETY: live id.
        if unsafe { rdma_resolve_route(id, t) } != 0 {
            return Err(os_err("rdma_resolve_route").into());
        }
        wait_setup(Setup::RouteResolved)?;
        {
            let _ids = self.shared.ids.lock();
            let link = CmLink {
                shared: self.shared.clone(),
                conn,
            };
            // SAFETY: live id, held under the lock.
            *qp_made = Some(unsafe { ctx.create_qp_on_cm_id(id, init, link)? });
        }
        let qp = qp_made.expect("just made");
        post_receives(ctx, qp)?;
        let caps = self.shared.caps;
        let mut p = rdma_conn_param {
            private_data: params.private_data.as_ptr().cast(),
            private_data_len: params.private_data.len() as u8,
            responder_resources: caps.ird_for(params.responder_resources, u8::MAX),
            initiator_depth: caps.ord_for(params.initiator_depth, u8::MAX),
            flow_control: 1,
            retry_count: params.retry_count.min(7),
            rnr_retry_count: params.rnr_retry_count.min(7),
            srq: u8::from(init.srq.is_some()),
            qp_num: qp.qpn(),
        };
        // SAFETY: live id with its QP; p points to the private data for the call.
        if unsafe { rdma_connect(id, &mut p) } != 0 {
            return Err(os_err("rdma_connect").into());
        }
        let mut rep = None;
        loop {
            match erx.recv_timeout(remaining(deadline)) {
                Ok(CmEvent::ConnectReply {
                    private_data,
                    responder_resources,
                    initiator_depth,
                    ..
                }) => rep = Some((private_data, responder_resources, initiator_depth)),
                Ok(CmEvent::Established { .. }) => {
                    return Ok(rep.unwrap_or_default());
                }
                Ok(CmEvent::Rejected {
                    reason,
                    private_data,
                    ..
                }) => return Err(ConnError::from_rej(reason, private_data)),
                Ok(CmEvent::Unreachable { .. }) | Ok(CmEvent::Disconnected { .. }) => {
                    return Err(ConnError::Unreachable {
                        dest,
                        stage: "connection request (RDMA_CM_EVENT_UNREACHABLE / CONNECT_ERROR)",
                    })
                }
                // Passive-side events; an active connection never gets them.
                Ok(CmEvent::ConnectRequest { .. } | CmEvent::StaleConnection { .. }) => {}
                Err(RecvTimeoutError::Timeout) => return Err(timeout),
                Err(RecvTimeoutError::Disconnected) => return Err(ConnError::Gone),
            }
        }
    }
}

impl ConnectionManager for VerbsCm {
    type Provider = VerbsProvider;

    /// Listens on RDMA CM port `port` of the device's address (`rdma_bind_addr`,
    /// `rdma_listen`); connection requests and the later events of their connections
    /// arrive on the returned channel.
    ///
    /// # Errors
    /// [`CmError::AlreadyListening`] (EADDRINUSE); [`VerbsError::Os`] otherwise.
    fn listen(&self, port: u16) -> Result<Receiver<CmEvent>, ConnError> {
        let (tx, rx) = channel::unbounded();
        let (conn, id) = self.new_id(Role::Listener { port }, Some(tx), None)?;
        let mut sa = sockaddr_from(SocketAddr::new(self.shared.ip, port));
        // SAFETY: live id; sa is a valid sockaddr.
        let rc = unsafe { rdma_bind_addr(id, &mut sa as *mut _ as *mut libc::sockaddr) };
        if rc != 0 {
            let e = errno();
            self.shared.destroy(conn);
            if e == libc::EADDRINUSE {
                return Err(CmError::AlreadyListening(port).into());
            }
            return Err(VerbsError::Os {
                call: "rdma_bind_addr",
                errno: e,
            }
            .into());
        }
        // SAFETY: live, bound id.
        if unsafe { rdma_listen(id, LISTEN_BACKLOG) } != 0 {
            let err = os_err("rdma_listen");
            self.shared.destroy(conn);
            return Err(err.into());
        }
        Ok(rx)
    }

    /// Destroys the listening `rdma_cm_id` of port `port`: the kernel refuses later
    /// requests for it; connections accepted from it have ids of their own and go on.
    fn unlisten(&self, port: u16) -> Result<bool, ConnError> {
        let conn = (self.shared.ids.lock().iter())
            .find(|(_, e)| matches!(e.role, Role::Listener { port: p } if p == port))
            .map(|(&conn, _)| conn);
        match conn {
            Some(conn) => {
                self.shared.destroy(conn);
                Ok(true)
            }
            None => Ok(false),
        }
    }

    /// Passive side, in the poll group's thread: creates the QP of request `req` in
    /// `ctx` (`rdma_create_qp` on the request's cm_id; the QP is in Init, `accept`
    /// brings it to RTS) and decides the RDMA READ depths: responder resources =
    /// min(device `max_qp_rd_atom`, the request's initiator depth), initiator depth =
    /// min(`ord`, device `max_qp_init_rd_atom`, the request's responder resources).
    ///
    /// # Errors
    /// [`CmError::UnknownConnection`]; the verbs errors of QP creation.
    fn create_accept_qp(
        &self,
        ctx: &mut VerbsContext,
        req: &ConnRequest,
        init: &QpInitAttr,
        ord: u8,
    ) -> Result<(Qp, AcceptToken), ConnError> {
        let ids = self.shared.ids.lock();
        let e = ids
            .get(&req.id.0)
            .ok_or(CmError::UnknownConnection(req.id))?;
        let link = CmLink {
            shared: self.shared.clone(),
            conn: req.id.0,
        };
        // SAFETY: the id is live while we hold the table lock.
        let qp = unsafe { ctx.create_qp_on_cm_id(e.id, init, link)? };
        let caps = self.shared.caps;
        Ok((
            qp,
            AcceptToken {
                qpn: qp.qpn(),
                starting_psn: 0,
                responder_resources: caps.ird_for(u8::MAX, req.initiator_depth),
                initiator_depth: caps.ord_for(ord, req.responder_resources),
                rnr_retry_count: 7,
            },
        ))
    }

    /// Accepts request `req` with `private_data` in the REP (`rdma_accept`; librdmacm
    /// moves the QP to RTR and RTS first). The connection's [`CmEvent::Established`]
    /// follows on the listener's channel.
    ///
    /// # Errors
    /// [`CmError::PrivateDataTooLong`] beyond 196 bytes; [`CmError::UnknownConnection`];
    /// [`VerbsError::Os`] from `rdma_accept` (EINVAL: no QP, wrong state).
    fn accept(
        &self,
        req: ConnId,
        token: AcceptToken,
        private_data: &[u8],
    ) -> Result<(), ConnError> {
        if private_data.len() > REP_PRIVATE_DATA_MAX {
            return Err(CmError::PrivateDataTooLong {
                len: private_data.len(),
                max: REP_PRIVATE_DATA_MAX,
            }
            .into());
        }
        let ids = self.shared.ids.lock();
        let e = ids.get(&req.0).ok_or(CmError::UnknownConnection(req))?;
        // SAFETY: the id is live under the lock; its QP (if any) too.
        let srq = unsafe { !(*e.id).qp.is_null() && !(*(*e.id).qp).srq.is_null() };
        let mut p = rdma_conn_param {
            private_data: private_data.as_ptr().cast(),
            private_data_len: private_data.len() as u8,
            responder_resources: token.responder_resources,
            initiator_depth: token.initiator_depth,
            flow_control: 1,
            retry_count: 7,
            rnr_retry_count: token.rnr_retry_count,
            srq: u8::from(srq),
            qp_num: token.qpn,
        };
        // SAFETY: live id; p points to private_data for the call.
        if unsafe { rdma_accept(e.id, &mut p) } != 0 {
            return Err(os_err("rdma_accept").into());
        }
        Ok(())
    }

    /// Rejects request `req` with `private_data` in the REJ (`rdma_reject`: reason 28,
    /// consumer defined) and forgets it.
    ///
    /// # Errors
    /// [`CmError::PrivateDataTooLong`] beyond 148 bytes; [`CmError::UnknownConnection`];
    /// [`VerbsError::Os`] from `rdma_reject`.
    fn reject(&self, req: ConnId, private_data: &[u8]) -> Result<(), ConnError> {
        if private_data.len() > REJ_PRIVATE_DATA_MAX {
            return Err(CmError::PrivateDataTooLong {
                len: private_data.len(),
                max: REJ_PRIVATE_DATA_MAX,
            }
            .into());
        }
        let rc = {
            let ids = self.shared.ids.lock();
            let e = ids.get(&req.0).ok_or(CmError::UnknownConnection(req))?;
            // SAFETY: live id under the lock.
            unsafe { rdma_reject(e.id, private_data.as_ptr().cast(), private_data.len() as u8) }
        };
        let err = (rc != 0).then(|| os_err("rdma_reject"));
        self.shared.destroy(req.0);
        match err {
            Some(e) => Err(e.into()),
            None => Ok(()),
        }
    }

    /// Active side, blocking up to `params.timeout`: resolves the address and route
    /// (`rdma_resolve_addr`, `rdma_resolve_route`, each at most [`RESOLVE_TIMEOUT`]),
    /// creates the QP in `ctx` (`rdma_create_qp`, Init), lets `post_receives` post the
    /// receive buffers, sends the REQ with `params.private_data` (`rdma_connect`) and
    /// waits for the REP (librdmacm moves the QP to RTR and RTS and sends the RTU).
    ///
    /// # Errors
    /// [`ConnError::Rejected`] with the REJ's reason and private data,
    /// [`ConnError::Stale`] (reason 10), [`ConnError::Unreachable`] (address, route or
    /// REQ unanswered), [`ConnError::Timeout`]; [`CmError::PrivateDataTooLong`] beyond 56
    /// bytes, [`CmError::AddressFamilyMismatch`]; verbs errors of the QP or of
    /// `post_receives`. Whatever was created is destroyed on error.
    fn connect(
        &self,
        ctx: &mut VerbsContext,
        init: &QpInitAttr,
        params: &ConnectRequestParams,
        post_receives: &mut PostReceives<'_, VerbsContext>,
    ) -> Result<ActiveConn, ConnError> {
        if params.private_data.len() > REQ_PRIVATE_DATA_MAX {
            return Err(CmError::PrivateDataTooLong {
                len: params.private_data.len(),
                max: REQ_PRIVATE_DATA_MAX,
            }
            .into());
        }
        let dest = params.dest;
        if dest.is_ipv4() != self.shared.ip.to_canonical().is_ipv4() {
            return Err(CmError::AddressFamilyMismatch {
                local: self.shared.ip,
                dest: dest.ip(),
            }
            .into());
        }
        let start = Instant::now();
        let deadline = start + params.timeout;
        let (etx, erx) = channel::unbounded();
        let (stx, srx) = channel::unbounded();
        let (conn, id) = self.new_id(Role::Active, Some(etx), Some(stx))?;
        let mut qp_made: Option<Qp> = None;
        let r = self.connect_steps(
            ctx,
            init,
            params,
            post_receives,
            (conn, id),
            (&srx, &erx),
            deadline,
            &mut qp_made,
        );
        match r {
            Ok((rep, rr, idepth)) => Ok(ActiveConn {
                id: ConnId(conn),
                qp: qp_made.expect("QP made before the REP"),
                rep_private_data: rep,
                responder_resources: rr,
                initiator_depth: idepth,
                events: erx,
            }),
            Err(e) => {
                if let Some(q) = qp_made {
                    let _ = ctx.destroy_qp(q);
                }
                self.shared.destroy(conn);
                Err(match e {
                    ConnError::Timeout { dest, .. } => ConnError::Timeout {
                        dest,
                        after: start.elapsed(),
                    },
                    e => e,
                })
            }
        }
    }

    /// Disconnects (`rdma_disconnect`: DREQ, and the QP to Error). `Ok` when the
    /// connection is already gone.
    ///
    /// # Errors
    /// [`CmError::UnknownConnection`] for an id this CM never handed out;
    /// [`VerbsError::Os`] from `rdma_disconnect`.
    fn disconnect(&self, id: ConnId) -> Result<(), ConnError> {
        let ids = self.shared.ids.lock();
        match ids.get(&id.0) {
            // SAFETY: live id under the lock.
            Some(e) => {
                if unsafe { rdma_disconnect(e.id) } != 0 {
                    return Err(os_err("rdma_disconnect").into());
                }
                Ok(())
            }
            None if id.0 != 0 && id.0 < self.shared.next_id.load(Ordering::Relaxed) => Ok(()),
            None => Err(CmError::UnknownConnection(id).into()),
        }
    }
}

/// The event thread: sleeps in `poll(2)` on the event channel and the wake eventfd.
fn run(shared: Arc<Shared>) {
    // SAFETY: live channel.
    let fd = unsafe { (*shared.channel).fd };
    while !shared.stop.load(Ordering::Acquire) {
        let mut pfds = [
            libc::pollfd {
                fd,
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: shared.wake.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
        ];
        // SAFETY: two valid pollfds.
        unsafe { libc::poll(pfds.as_mut_ptr(), 2, 100) };
        if pfds[1].revents != 0 {
            let mut v = 0u64;
            // SAFETY: 8-byte read from the eventfd.
            unsafe {
                libc::read(
                    shared.wake.as_raw_fd(),
                    &mut v as *mut u64 as *mut libc::c_void,
                    8,
                )
            };
        }
        loop {
            let mut ev: *mut rdma_cm_event = std::ptr::null_mut();
            // SAFETY: non-blocking channel; ev is written on success.
            if unsafe { rdma_get_cm_event(shared.channel, &mut ev) } != 0 {
                break;
            }
            // SAFETY: a live event until acknowledged.
            let (copied, new_id) = unsafe { copy_event(ev) };
            // SAFETY: acknowledged before any lock is taken, so rdma_destroy_id (which
            // waits for acknowledgements) never waits on this thread.
            unsafe { rdma_ack_cm_event(ev) };
            handle(&shared, copied, new_id);
        }
    }
}

/// Copies what the model needs out of an event; for a connection request also the new
/// cm_id.
///
/// # Safety
/// `ev` is a live, not yet acknowledged event.
unsafe fn copy_event(ev: *mut rdma_cm_event) -> (CopiedEvent, Option<*mut rdma_cm_id>) {
    use rdma_cm_event_type::*;
    let e = &*ev;
    let id = e.id;
    let conn = (*id).context as usize as u32;
    let has_conn_param = matches!(
        e.event,
        RDMA_CM_EVENT_CONNECT_REQUEST
            | RDMA_CM_EVENT_CONNECT_RESPONSE
            | RDMA_CM_EVENT_ESTABLISHED
            | RDMA_CM_EVENT_REJECTED
    );
    let mut c = CopiedEvent {
        event: e.event,
        status: e.status,
        conn,
        private_data: Vec::new(),
        responder_resources: 0,
        initiator_depth: 0,
        retry_count: 0,
        rnr_retry_count: 0,
        srq: false,
        qp_num: 0,
        peer: None,
    };
    if has_conn_param {
        let p = &e.param.conn;
        if !p.private_data.is_null() && p.private_data_len > 0 {
            c.private_data =
                std::slice::from_raw_parts(p.private_data as *const u8, p.private_data_len.into())
                    .to_vec();
        }
        c.responder_resources = p.responder_resources;
        c.initiator_depth = p.initiator_depth;
        c.retry_count = p.retry_count;
        c.rnr_retry_count = p.rnr_retry_count;
        c.srq = p.srq != 0;
        c.qp_num = p.qp_num;
    }
    let dst = &(*id).route.addr.dst_addr_union.dst_storage as *const _ as *const libc::sockaddr;
    c.peer = sockaddr_to(dst);
    let new_id = (e.event == RDMA_CM_EVENT_CONNECT_REQUEST).then_some(id);
    (c, new_id)
}

fn handle(shared: &Arc<Shared>, ev: CopiedEvent, new_id: Option<*mut rdma_cm_id>) {
    use rdma_cm_event_type::*;
    if let Some(id) = new_id {
        // A request: a new connection on the listener `ev.conn`.
        let listener = {
            let ids = shared.ids.lock();
            ids.get(&ev.conn).and_then(|e| match e.role {
                Role::Listener { port } => Some((port, e.events.clone())),
                _ => None,
            })
        };
        let Some((port, Some(events))) = listener else {
            // SAFETY: the new id is ours alone; its event was acknowledged.
            unsafe {
                rdma_reject(id, std::ptr::null(), 0);
                rdma_destroy_id(id);
            }
            return;
        };
        let conn = shared.next_id.fetch_add(1, Ordering::Relaxed);
        // SAFETY: the new id is ours alone.
        unsafe { (*id).context = conn as usize as *mut libc::c_void };
        let role = Role::Passive { local_port: port };
        shared.ids.lock().insert(
            conn,
            Entry {
                id,
                role,
                events: Some(events.clone()),
                setup: None,
            },
        );
        for e in to_cm_events(&ev, ConnId(conn), role, shared.path_mtu) {
            let _ = events.send(e);
        }
        return;
    }
    let (role, events, setup, id) = {
        let ids = shared.ids.lock();
        match ids.get(&ev.conn) {
            Some(e) => (e.role, e.events.clone(), e.setup.clone(), e.id),
            None => return, // destroyed meanwhile
        }
    };
    let setup_ev = match ev.event {
        RDMA_CM_EVENT_ADDR_RESOLVED => Some(Setup::AddrResolved),
        RDMA_CM_EVENT_ADDR_ERROR => Some(Setup::AddrError(ev.status)),
        RDMA_CM_EVENT_ROUTE_RESOLVED => Some(Setup::RouteResolved),
        RDMA_CM_EVENT_ROUTE_ERROR => Some(Setup::RouteError(ev.status)),
        _ => None,
    };
    if let Some(s) = setup_ev {
        if let Some(tx) = setup {
            let _ = tx.send(s);
        }
        return;
    }
    if ev.event == RDMA_CM_EVENT_DISCONNECTED {
        // Answer the DREQ (DREP) and move the QP to Error, as rdma_cm users do.
        let ids = shared.ids.lock();
        if ids.contains_key(&ev.conn) {
            // SAFETY: live id under the lock.
            unsafe { rdma_disconnect(id) };
        }
    }
    for e in to_cm_events(&ev, ConnId(ev.conn), role, shared.path_mtu) {
        if let Some(tx) = &events {
            let _ = tx.send(e);
        }
    }
    if is_terminal(ev.event) {
        shared.destroy(ev.conn);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rdma_cm_event_type::*;

    fn ev(event: u32) -> CopiedEvent {
        CopiedEvent {
            event,
            status: 0,
            conn: 3,
            private_data: vec![1, 2, 3],
            responder_resources: 16,
            initiator_depth: 4,
            retry_count: 7,
            rnr_retry_count: 6,
            srq: true,
            qp_num: 0x11,
            peer: Some("192.168.77.11:40001".parse().unwrap()),
        }
    }

    #[test]
    fn connect_request_carries_the_requests_values() {
        let out = to_cm_events(
            &ev(RDMA_CM_EVENT_CONNECT_REQUEST),
            ConnId(9),
            Role::Passive { local_port: 4420 },
            Mtu::Mtu1024,
        );
        let req = ConnRequest::from_event(&out[0]).unwrap();
        assert_eq!(req.id, ConnId(9));
        assert_eq!(req.remote_ip, "192.168.77.11".parse::<IpAddr>().unwrap());
        assert_eq!((req.remote_port, req.local_port), (40001, 4420));
        // ib_cm's local view (responder resources 16, initiator depth 4) is the REQ's
        // initiator depth 16 and responder resources 4.
        assert_eq!(
            (req.remote_qpn, req.responder_resources, req.initiator_depth),
            (0x11, 4, 16)
        );
        assert_eq!(
            (req.retry_count, req.rnr_retry_count, req.srq),
            (7, 6, true)
        );
        assert_eq!(req.private_data, vec![1, 2, 3]);
        assert_eq!(req.path_mtu, Mtu::Mtu1024);
    }

    #[test]
    fn established_active_gives_the_reply_first() {
        let out = to_cm_events(
            &ev(RDMA_CM_EVENT_ESTABLISHED),
            ConnId(3),
            Role::Active,
            Mtu::Mtu1024,
        );
        assert!(matches!(
            &out[..],
            [CmEvent::ConnectReply { remote_qpn: 0x11, private_data, .. }, CmEvent::Established { .. }]
                if private_data == &vec![1, 2, 3]
        ));
        // The REP's values, not ib_cm's local view of them.
        assert!(matches!(
            out[0],
            CmEvent::ConnectReply {
                responder_resources: 4,
                initiator_depth: 16,
                ..
            }
        ));
        let out = to_cm_events(
            &ev(RDMA_CM_EVENT_ESTABLISHED),
            ConnId(3),
            Role::Passive { local_port: 4420 },
            Mtu::Mtu1024,
        );
        assert_eq!(
            out,
            vec![CmEvent::Established {
                id: ConnId(3),
                peer_selective_retransmit: false
            }]
        );
    }

    #[test]
    fn rejected_unreachable_disconnected() {
        let mut r = ev(RDMA_CM_EVENT_REJECTED);
        r.status = 28;
        let out = to_cm_events(&r, ConnId(3), Role::Active, Mtu::Mtu1024);
        assert_eq!(
            out,
            vec![CmEvent::Rejected {
                id: ConnId(3),
                reason: 28,
                private_data: vec![1, 2, 3]
            }]
        );
        assert!(is_terminal(RDMA_CM_EVENT_REJECTED));
        for t in [RDMA_CM_EVENT_UNREACHABLE, RDMA_CM_EVENT_CONNECT_ERROR] {
            assert_eq!(
                to_cm_events(&ev(t), ConnId(3), Role::Active, Mtu::Mtu1024),
                vec![CmEvent::Unreachable { id: ConnId(3) }]
            );
            assert!(is_terminal(t));
        }
        assert_eq!(
            to_cm_events(
                &ev(RDMA_CM_EVENT_DISCONNECTED),
                ConnId(3),
                Role::Active,
                Mtu::Mtu1024
            ),
            vec![CmEvent::Disconnected { id: ConnId(3) }]
        );
        for t in [
            RDMA_CM_EVENT_ADDR_RESOLVED,
            RDMA_CM_EVENT_ROUTE_RESOLVED,
            RDMA_CM_EVENT_TIMEWAIT_EXIT,
        ] {
            assert!(to_cm_events(&ev(t), ConnId(3), Role::Active, Mtu::Mtu1024).is_empty());
            assert!(!is_terminal(t));
        }
    }
}
