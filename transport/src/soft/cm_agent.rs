//! The CM agent: QP1 (the GSI QP) of a soft device and its connection manager on a
//! thread of their own (the control path), so the poll groups never see CM MADs.
//!
//! CM MADs travel as UD SEND Only packets to QP1 with DETH Q_Key 0x80010000 and source
//! QP 1 (IBTA Vol 1 §13.5), sent from UDP source port 55410 as Linux rxe does.
//! Applications talk to the agent through [`CmAgent`]; events come back on crossbeam
//! channels: one per listened port (and every connection it accepts) and one per
//! active connection.
use super::rx_check::icrc_ok;
use crate::wire::IcrcChecker;
use std::collections::HashMap;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use crossbeam::channel::{self, Receiver, Sender};
use socket2::{SockAddr, Socket};

use super::device::{DeviceCounters, SoftDevice};
use super::socket::{bind_plain, send_gather, RxBatch, SocketError};
use crate::cm::{AcceptParams, Cm, CmConfig, CmError, CmEvent, ConnId, ConnectParams};
use crate::time::Clock;
use crate::wire::{
    self, Bth, Deth, IcrcIpInfo, Opcode, PacketHeaders, GSI_QKEY, ROCE_V2_QP1_UDP_SPORT,
    ROCE_V2_UDP_DPORT,
};

enum Cmd {
    Listen(u16, Sender<CmEvent>, Sender<Result<(), CmError>>),
    Unlisten(u16, Sender<bool>),
    Connect(
        ConnectParams,
        Sender<CmEvent>,
        Sender<Result<ConnId, CmError>>,
    ),
    Accept(ConnId, AcceptParams, Sender<Result<(), CmError>>),
    Reject(ConnId, u16, Vec<u8>, Sender<Result<(), CmError>>),
    SendRtu(ConnId, Sender<Result<(), CmError>>),
    SendMra(ConnId, u8, Sender<Result<(), CmError>>),
    Established(ConnId),
    Disconnect(ConnId, Sender<Result<(), CmError>>),
    Destroy(ConnId, Sender<Result<(), CmError>>),
}

struct Shared {
    cmds: Sender<Cmd>,
    wake: OwnedFd,
    stop: AtomicBool,
}

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
}

/// Handle to a device's CM agent thread. Cloneable; the thread stops when the last
/// handle is dropped.
#[derive(Clone)]
pub struct CmAgent {
    shared: Arc<Shared>,
    _thread: Arc<ThreadGuard>,
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

/// Errors of CM agent calls.
#[derive(Debug, thiserror::Error)]
pub enum CmAgentError {
    #[error("the CM agent of this device is already running")]
    AlreadyStarted,
    #[error(transparent)]
    Socket(#[from] SocketError),
    #[error("CM agent setup: {0}")]
    Io(#[from] io::Error),
    #[error(transparent)]
    Cm(#[from] CmError),
    #[error("the CM agent thread is gone")]
    Gone,
}

impl CmAgent {
    /// Starts the agent of `dev` with the default [`CmConfig`] (Linux's timers): it
    /// takes the device's QP1 receive socket and binds `ip:55410` for sending. One agent
    /// runs per device ([`CmAgentError::AlreadyStarted`] for a second;
    /// [`SoftDevice::cm_agent`] hands out the running one). The device keeps it, so it
    /// answers CM MADs as long as the device lives; it stops when the device and every
    /// handle are gone.
    pub fn start(dev: &Arc<SoftDevice>) -> Result<CmAgent, CmAgentError> {
        Self::start_with_config(dev, CmConfig::default())
    }

    /// [`CmAgent::start`] with the connection manager's tunables `config` (e.g. a
    /// shorter CM response timeout so that a lost MAD is resent sooner).
    pub fn start_with_config(
        dev: &Arc<SoftDevice>,
        config: CmConfig,
    ) -> Result<CmAgent, CmAgentError> {
        let agent = Self::start_unregistered(dev, config)?;
        dev.register_cm_agent(&agent);
        Ok(agent)
    }

    /// Starts the agent without recording it in the device (the caller does).
    pub(crate) fn start_unregistered(
        dev: &Arc<SoftDevice>,
        config: CmConfig,
    ) -> Result<CmAgent, CmAgentError> {
        let rx = dev.take_cm_socket().ok_or(CmAgentError::AlreadyStarted)?;
        let ip = dev.ip();
        let tx = match bind_plain(ip, ROCE_V2_QP1_UDP_SPORT) {
            Ok(s) => s,
            Err(SocketError::PortInUse { .. }) => bind_plain(ip, 0)?,
            Err(e) => return Err(e.into()),
        };
        let tx_sport = tx
            .local_addr()
            .ok()
            .and_then(|a| a.as_socket())
            .map_or(ROCE_V2_QP1_UDP_SPORT, |a| a.port());
        // SAFETY: eventfd returns a new fd or -1.
        let efd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if efd < 0 {
            return Err(io::Error::last_os_error().into());
        }
        // SAFETY: efd is a fresh descriptor we own.
        let wake = unsafe { OwnedFd::from_raw_fd(efd) };
        let (cmd_tx, cmd_rx) = channel::unbounded();
        let shared = Arc::new(Shared {
            cmds: cmd_tx,
            wake,
            stop: AtomicBool::new(false),
        });
        let seed = rand::random::<u64>();
        let worker = Worker {
            ip,
            counters: dev.counters_arc(),
            cm: Cm::with_config(ip, seed, config),
            rx,
            tx,
            cmds: cmd_rx,
            shared: shared.clone(),
            listeners: HashMap::new(),
            conns: HashMap::new(),
            clock: Clock::new(),
            psn: 0,
            sport: tx_sport,
            icrc: IcrcChecker::new(),
        };
        let handle = std::thread::Builder::new()
            .name(format!("cm-agent {ip}"))
            .spawn(move || worker.run())?;
        Ok(CmAgent {
            shared: shared.clone(),
            _thread: Arc::new(ThreadGuard {
                shared,
                handle: Some(handle),
            }),
        })
    }

    fn call<T>(&self, make: impl FnOnce(Sender<T>) -> Cmd) -> Result<T, CmAgentError> {
        let (tx, rx) = channel::bounded(1);
        self.shared
            .cmds
            .send(make(tx))
            .map_err(|_| CmAgentError::Gone)?;
        self.shared.wake();
        rx.recv().map_err(|_| CmAgentError::Gone)
    }

    /// Listens on an RDMA CM port (port space TCP, service ID 0x0106_0000 | port).
    /// Connection requests and the later events of the connections arrive on the
    /// returned channel.
    pub fn listen(&self, port: u16) -> Result<Receiver<CmEvent>, CmAgentError> {
        let (etx, erx) = channel::unbounded();
        self.call(|r| Cmd::Listen(port, etx, r))??;
        Ok(erx)
    }

    /// Stops listening on RDMA CM port `port` ([`Cm::unlisten`]): later REQs for it get
    /// REJ reason 8 (invalid service ID); the connections accepted from it go on.
    /// Returns whether the port was listened on.
    ///
    /// # Errors
    /// [`CmAgentError::Gone`].
    pub fn unlisten(&self, port: u16) -> Result<bool, CmAgentError> {
        self.call(|r| Cmd::Unlisten(port, r))
    }

    /// Sends a REQ; the connection's events arrive on the returned channel.
    pub fn connect(&self, p: ConnectParams) -> Result<(ConnId, Receiver<CmEvent>), CmAgentError> {
        let (etx, erx) = channel::unbounded();
        let id = self.call(|r| Cmd::Connect(p, etx, r))??;
        Ok((id, erx))
    }

    /// Accepts a connection request (sends the REP).
    pub fn accept(&self, id: ConnId, p: AcceptParams) -> Result<(), CmAgentError> {
        Ok(self.call(|r| Cmd::Accept(id, p, r))??)
    }

    /// Rejects a connection request with `reason` and private data.
    pub fn reject(&self, id: ConnId, reason: u16, private_data: &[u8]) -> Result<(), CmAgentError> {
        let pd = private_data.to_vec();
        Ok(self.call(|r| Cmd::Reject(id, reason, pd, r))??)
    }

    /// Active side: sends the RTU once the QP is ready to send.
    pub fn send_rtu(&self, id: ConnId) -> Result<(), CmAgentError> {
        Ok(self.call(|r| Cmd::SendRtu(id, r))??)
    }

    /// Sends an MRA for a pending REQ or REP with `service_timeout` (4.096 us x
    /// 2^value): the peer waits that much longer for our REP or RTU.
    pub fn send_mra(&self, id: ConnId, service_timeout: u8) -> Result<(), CmAgentError> {
        Ok(self.call(|r| Cmd::SendMra(id, service_timeout, r))??)
    }

    /// Passive side: the QP received traffic before the RTU; stands for the RTU
    /// ([`Cm::established`]). Does not wait for the agent.
    pub fn established(&self, id: ConnId) {
        if self.shared.cmds.send(Cmd::Established(id)).is_ok() {
            self.shared.wake();
        }
    }

    /// Sends a DREQ for an established connection; also the call to make when the
    /// connection's QP goes to Error. `Ok` if the connection is already disconnecting.
    pub fn disconnect(&self, id: ConnId) -> Result<(), CmAgentError> {
        Ok(self.call(|r| Cmd::Disconnect(id, r))??)
    }

    /// Abandons a connection in any state ([`Cm::destroy`]): REJ for a connection
    /// being set up, DREQ for an established one. No further events arrive for it.
    pub fn destroy(&self, id: ConnId) -> Result<(), CmAgentError> {
        Ok(self.call(|r| Cmd::Destroy(id, r))??)
    }
}

struct Worker {
    /// The device's address (the worker holds no reference to the device, which holds
    /// the agent).
    ip: IpAddr,
    counters: Arc<DeviceCounters>,
    cm: Cm,
    rx: Socket,
    tx: Socket,
    cmds: Receiver<Cmd>,
    shared: Arc<Shared>,
    listeners: HashMap<u16, Sender<CmEvent>>,
    conns: HashMap<u32, Sender<CmEvent>>,
    clock: Clock,
    psn: u32,
    /// UDP source port of QP1's send socket (55410 unless taken).
    sport: u16,
    /// Receive ICRC checker.
    icrc: IcrcChecker,
}

impl Worker {
    fn run(mut self) {
        let mut batch = RxBatch::new();
        while !self.shared.stop.load(Ordering::Acquire) {
            let now = self.clock.now();
            let wait_ms = match self.cm.poll_timeout() {
                Some(t) if t <= now => 0,
                Some(t) => (t.since(now).as_millis() as i32 + 1).min(100),
                None => 100,
            };
            let mut pfds = [
                libc::pollfd {
                    fd: self.rx.as_raw_fd(),
                    events: libc::POLLIN,
                    revents: 0,
                },
                libc::pollfd {
                    fd: self.shared.wake.as_raw_fd(),
                    events: libc::POLLIN,
                    revents: 0,
                },
            ];
            // SAFETY: two valid pollfds.
            unsafe { libc::poll(pfds.as_mut_ptr(), 2, wait_ms) };
            if pfds[1].revents != 0 {
                let mut v = 0u64;
                // SAFETY: 8-byte read from the eventfd.
                unsafe {
                    libc::read(
                        self.shared.wake.as_raw_fd(),
                        &mut v as *mut u64 as *mut libc::c_void,
                        8,
                    )
                };
            }
            while let Ok(n) = batch.recv(self.rx.as_raw_fd()) {
                if n == 0 {
                    break;
                }
                for i in 0..n {
                    if let Some(p) = batch.get(i) {
                        self.handle_datagram(p.from, p.ipv4_id, p.data);
                    }
                }
            }
            while let Ok(cmd) = self.cmds.try_recv() {
                self.handle_cmd(cmd);
            }
            let now = self.clock.now();
            if self.cm.poll_timeout().is_some_and(|t| t <= now) {
                self.cm.handle_timeout(now);
            }
            self.flush();
        }
    }

    fn handle_datagram(&mut self, from: SocketAddr, ipv4_id: u16, data: &[u8]) {
        let counters = &*self.counters;
        if !icrc_ok(&mut self.icrc, counters, from, self.ip, ipv4_id, data) {
            return;
        }
        let Ok(pkt) = wire::parse(data) else {
            counters.malformed_pkts.fetch_add(1, Ordering::Relaxed);
            return;
        };
        counters.rcvd_pkts.fetch_add(1, Ordering::Relaxed);
        let ok = pkt.hdr.bth.opcode == Opcode::UdSendOnly
            && pkt.hdr.bth.dest_qp == 1
            && pkt.hdr.deth.is_some_and(|d| d.qkey == GSI_QKEY);
        if !ok {
            counters.malformed_pkts.fetch_add(1, Ordering::Relaxed);
            return;
        }
        let now = self.clock.now();
        self.cm.handle_mad(now, from.ip(), pkt.payload);
    }

    fn handle_cmd(&mut self, cmd: Cmd) {
        let now = self.clock.now();
        match cmd {
            Cmd::Listen(port, events, r) => {
                let res = self.cm.listen(port);
                if res.is_ok() {
                    self.listeners.insert(port, events);
                }
                let _ = r.send(res);
            }
            Cmd::Unlisten(port, r) => {
                self.listeners.remove(&port);
                let _ = r.send(self.cm.unlisten(port));
            }
            Cmd::Connect(p, events, r) => {
                let res = self.cm.connect(now, p);
                if let Ok(id) = &res {
                    self.conns.insert(id.0, events);
                }
                let _ = r.send(res);
            }
            Cmd::Accept(id, p, r) => {
                let _ = r.send(self.cm.accept(now, id, p));
            }
            Cmd::Reject(id, reason, pd, r) => {
                let res = self.cm.reject(now, id, reason, &pd);
                if res.is_ok() {
                    // A rejected connection sends no further events.
                    self.conns.remove(&id.0);
                }
                let _ = r.send(res);
            }
            Cmd::SendRtu(id, r) => {
                let _ = r.send(self.cm.send_rtu(now, id));
            }
            Cmd::SendMra(id, timeout, r) => {
                let _ = r.send(self.cm.send_mra(now, id, timeout));
            }
            Cmd::Established(id) => self.cm.established(id),
            Cmd::Disconnect(id, r) => {
                let _ = r.send(self.cm.disconnect(now, id));
            }
            Cmd::Destroy(id, r) => {
                let res = self.cm.destroy(now, id);
                if res.is_ok() {
                    self.conns.remove(&id.0);
                }
                let _ = r.send(res);
            }
        }
    }

    fn flush(&mut self) {
        while let Some((dest, mad)) = self.cm.poll_transmit() {
            self.send_mad(dest, &mad);
        }
        while let Some(ev) = self.cm.poll_event() {
            let id = event_id(&ev);
            let sender = match &ev {
                CmEvent::ConnectRequest { local_port, .. } => {
                    let s = self.listeners.get(local_port).cloned();
                    if let Some(s) = &s {
                        self.conns.insert(id, s.clone());
                    }
                    s
                }
                _ => self.conns.get(&id).cloned(),
            };
            let done = matches!(
                ev,
                CmEvent::Disconnected { .. }
                    | CmEvent::Rejected { .. }
                    | CmEvent::Unreachable { .. }
            );
            if let Some(s) = sender {
                let _ = s.send(ev);
            }
            if done {
                self.conns.remove(&id);
            }
        }
    }

    fn send_mad(&mut self, dest: IpAddr, mad: &[u8]) {
        let psn = self.psn;
        self.psn = (self.psn + 1) & 0x00FF_FFFF;
        let hdr = PacketHeaders {
            bth: Bth::new(Opcode::UdSendOnly, 1, psn, false),
            deth: Some(Deth {
                qkey: GSI_QKEY,
                src_qp: 1,
            }),
            reth: None,
            aeth: None,
            imm: None,
            ieth: None,
        };
        let sport = self.sport;
        let info = IcrcIpInfo {
            src: self.ip,
            dst: dest,
            ipv4_id: 0,
            udp_sport: sport,
            udp_dport: ROCE_V2_UDP_DPORT,
        };
        let mut buf = Vec::with_capacity(300);
        wire::build(&hdr, mad, &info, &mut buf);
        let to = SockAddr::from(SocketAddr::new(dest, ROCE_V2_UDP_DPORT));
        match send_gather(&self.tx, &to, &[&buf]) {
            Ok(true) => {
                self.counters.sent_pkts.fetch_add(1, Ordering::Relaxed);
            }
            _ => {
                self.counters
                    .tx_dropped_pkts
                    .fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

fn event_id(ev: &CmEvent) -> u32 {
    match ev {
        CmEvent::ConnectRequest { id, .. }
        | CmEvent::ConnectReply { id, .. }
        | CmEvent::Established { id, .. }
        | CmEvent::Rejected { id, .. }
        | CmEvent::Unreachable { id }
        | CmEvent::StaleConnection { id, .. }
        | CmEvent::Disconnected { id } => id.0,
    }
}

/// How long [`CmAgent`] users typically wait for a connection to be set up.
pub const CM_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
