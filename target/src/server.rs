//! The running target, on any provider (`P:` [`Provider`]): opens the namespaces
//! ([`crate::backend`]), and for each listen address an RDMA device, its connection
//! manager and its poll groups; then the control thread that answers RDMA CM connection
//! requests on every address (with the NVMe/RDMA private data, NVMe RDMA Transport 1.x
//! §3.2) and enforces Keep Alive. Which provider runs is chosen in
//! [`crate::provider`].
//!
//! Several listen addresses: a device serves one address (soft: UDP 4791 of it; verbs:
//! the RDMA device whose RoCE v2 GID it is), so each distinct address gets its own
//! device, connection manager and `poll_groups` poll groups (an idle poll group sleeps
//! on its CQ's completion events); several `trsvcid`s on one address are several CM
//! listens. The subsystems, controllers and Keep Alive are shared by all, in one
//! [`Registry`] and one control thread; a queue knows the port (address and
//! `trsvcid`) it connected through, and its Connect reaches only the subsystems that
//! port serves. A reload ([`crate::reload`]) adds and removes listen entries while
//! the target runs: an address is brought up by the start's own code (`bring_up`)
//! and, once its last entry is removed, its poll groups stop and its device closes.
use std::collections::{HashMap, HashSet};
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam::channel::{self, Receiver, Sender};
use nvme::rdma::{negotiate_ord, RdmaCmLimits};
use nvme::{RdmaCmAccept, RdmaCmReject, RdmaCmRejectStatus, RdmaCmRequest};
use transport::cm::{CmEvent, ConnId};
use transport::verbs::connection::{ConnError, ConnRequest};
use transport::verbs::{CmOf, ConnectionManager, Device, DeviceOf, Provider};

use crate::backend::{Backend, BackendKind};
use crate::config::{NamespaceBackend, TargetConfig};
use crate::oplog::{self, QueueEnd, QueuePeer};
use crate::provider::DefaultProvider;
use crate::rdma::{
    GroupCmd, NewQueue, PollGroup, PollGroupConfig, PollGroupCounters, QpErrorReport,
};
use crate::subsystem::{Limits, NamespaceEntry, PortInfo, Referral, Registry, Subsystem, PORT_ID};

/// The most RDMA READs the target asks to keep in flight per queue (its ORD): the
/// REP's Initiator Depth is `min(host IRD, this, device max_qp_init_rd_atom)`.
pub const MAX_ORD: u8 = 16;

/// Errors starting the target; each names what failed.
#[derive(Debug, thiserror::Error)]
pub enum TargetError {
    #[error("namespace {nsid} of {nqn}: {source}")]
    Namespace {
        nqn: String,
        nsid: u32,
        source: crate::backend::NamespaceError,
    },
    /// The RDMA device of a listen address could not be opened (soft: its UDP port
    /// 4791 cannot be bound; verbs: no RDMA device, no RoCE v2 GID for the address, the
    /// port is down); the message names the cause and the fix.
    #[error("listen address {addr} ({provider} provider): {source}")]
    Device {
        addr: IpAddr,
        provider: &'static str,
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// The connection manager of a listen address could not be started or could not
    /// listen on a port.
    #[error("listen address {addr}: RDMA CM: {source}")]
    Cm {
        addr: IpAddr,
        source: Box<ConnError>,
    },
    #[error("poll group {index}: {source}")]
    PollGroup {
        index: u32,
        source: crate::rdma::PollGroupError,
    },
    #[error("configuration: {0}")]
    Config(String),
    /// The poll groups' registered memory does not fit `RLIMIT_MEMLOCK`.
    #[error("{0}")]
    Memlock(#[from] transport::memlock::MemlockError),
    /// The metrics endpoint (`metrics`, `--metrics`) could not start: its address
    /// cannot be bound; the message names it, the cause and the fix.
    #[error("{0}")]
    Metrics(#[from] crate::metrics::MetricsError),
}

/// A running target on provider `P` (the soft provider unless named). Dropping it
/// stops every thread.
pub struct TargetHandle<P: Provider = DefaultProvider> {
    /// The listen addresses' devices and poll groups (a reload adds and removes them).
    served: Arc<parking_lot::Mutex<Served<P>>>,
    reg: Arc<Registry>,
    control: Option<JoinHandle<()>>,
    stop: Sender<ControlCmd>,
    /// The metrics endpoint, when the configuration asks for one.
    metrics: Option<crate::metrics::MetricsEndpoint>,
}

/// What the handle and the control thread share of the listen addresses: the control
/// thread changes it on a reload, the handle reads it.
struct Served<P: Provider> {
    /// One device (and its connection manager) per distinct listen address served now.
    devices: Vec<(Arc<DeviceOf<P>>, CmOf<P>)>,
    /// Every poll group since the start, by global index (a removed address's are
    /// marked [`GroupSlot::removed`] and keep their index).
    groups: Vec<GroupSlot>,
    /// Address and RDMA CM port of every listen entry now, in configuration order.
    listen: Vec<SocketAddr>,
}

/// One poll group: how to reach it, its thread, its counters, its listen address.
struct GroupSlot {
    tx: Sender<GroupCmd>,
    thread: Option<JoinHandle<()>>,
    counters: Arc<PollGroupCounters>,
    addr: IpAddr,
    /// A reload removed its address: the group stopped.
    removed: bool,
}

impl<P: Provider> Served<P> {
    /// The command channels of the poll groups of addresses served now.
    fn senders(&self) -> Vec<Sender<GroupCmd>> {
        (self.groups.iter())
            .filter(|g| !g.removed)
            .map(|g| g.tx.clone())
            .collect()
    }
}

/// Stops poll groups: `Shutdown` to each, then waits for each thread.
fn stop_groups(groups: Vec<(Sender<GroupCmd>, Option<JoinHandle<()>>)>) -> usize {
    let mut stopped = 0;
    for (tx, _) in &groups {
        let _ = tx.send(GroupCmd::Shutdown);
    }
    for (_, h) in groups {
        if let Some(h) = h {
            let _ = h.join();
            stopped += 1;
        }
    }
    stopped
}

/// Asks a running target for reloads ([`TargetHandle::reloader`]); cheap to clone.
#[derive(Clone)]
pub struct Reloader {
    control: Sender<ControlCmd>,
}

impl Reloader {
    /// As [`TargetHandle::reload`].
    ///
    /// # Errors
    /// As [`TargetHandle::reload`]; [`crate::reload::ReloadError::Stopped`] once the
    /// target stopped.
    pub fn reload(
        &self,
        cfg: &TargetConfig,
    ) -> Result<crate::reload::ReloadReport, crate::reload::ReloadError> {
        reload_through(&self.control, cfg)
    }
}

impl std::fmt::Debug for Reloader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reloader").finish_non_exhaustive()
    }
}

/// Sends `cfg` to the control thread on `control` and waits for the outcome.
fn reload_through(
    control: &Sender<ControlCmd>,
    cfg: &TargetConfig,
) -> Result<crate::reload::ReloadReport, crate::reload::ReloadError> {
    let (reply, rx) = channel::bounded(1);
    let cmd = ControlCmd::Reload {
        cfg: Box::new(cfg.clone()),
        reply,
    };
    control
        .send(cmd)
        .map_err(|_| crate::reload::ReloadError::Stopped)?;
    rx.recv().map_err(|_| crate::reload::ReloadError::Stopped)?
}

/// What the handle asks of the control thread.
enum ControlCmd {
    /// Stop the control thread.
    Stop,
    /// Refuse every new connection request (a shutdown began).
    StopAccepting,
    /// Disconnect (CM DREQ) every connection and destroy its queue: `queues` gets the
    /// number, `confirmed` a message once every host answered (DREP) or left.
    DisconnectAll {
        queues: Sender<usize>,
        confirmed: Sender<()>,
    },
    /// Apply configuration `cfg` in place of the running one ([`crate::reload`]).
    Reload {
        cfg: Box<TargetConfig>,
        reply: Sender<Result<crate::reload::ReloadReport, crate::reload::ReloadError>>,
    },
}

impl<P: Provider> std::fmt::Debug for TargetHandle<P> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TargetHandle")
            .field("provider", &P::NAME)
            .field("listen", &self.served.lock().listen)
            .finish()
    }
}

impl<P: Provider> TargetHandle<P> {
    /// Address and RDMA CM port of the first listen entry (now: a reload may change
    /// the entries).
    pub fn listen_addr(&self) -> SocketAddr {
        self.served.lock().listen[0]
    }
    /// Address and RDMA CM port of every listen entry now, in configuration order.
    pub fn listen_addrs(&self) -> Vec<SocketAddr> {
        self.served.lock().listen.clone()
    }
    /// The RDMA device of the first listen address served now (for its counters).
    pub fn device(&self) -> Arc<DeviceOf<P>> {
        self.served.lock().devices[0].0.clone()
    }
    /// The RDMA device of every distinct listen address served now, in the order
    /// they were brought up (configuration order at start, a reload's after).
    pub fn devices(&self) -> Vec<Arc<DeviceOf<P>>> {
        (self.served.lock().devices.iter())
            .map(|(d, _)| d.clone())
            .collect()
    }
    /// Subsystems and controllers.
    pub fn registry(&self) -> &Arc<Registry> {
        &self.reg
    }
    /// Counters of each poll group of the addresses served now (the first address's
    /// groups first, those a reload added last).
    pub fn poll_group_counters(&self) -> Vec<Arc<PollGroupCounters>> {
        (self.served.lock().groups.iter())
            .filter(|g| !g.removed)
            .map(|g| g.counters.clone())
            .collect()
    }

    /// The command channels of the poll groups of the addresses served now.
    fn group_senders(&self) -> Vec<Sender<GroupCmd>> {
        self.served.lock().senders()
    }
    /// The address the metrics endpoint serves (`GET /metrics`), when the
    /// configuration asked for one (`metrics`; port 0 there: the port the kernel chose).
    pub fn metrics_addr(&self) -> Option<SocketAddr> {
        self.metrics.as_ref().map(|m| m.local_addr())
    }
    /// Sets the ANA state of group `grpid` on the port with PORTID `portid` (NVMe Base
    /// 2.x §8.1; nvmet's `ports/N/ana_groups/G/ana/state`). From the return on, I/O
    /// through that port to the group's namespaces gets what `state` gives, and the
    /// port's ANA log page reports it. When the state changed, every poll group posts
    /// an ANA change notice (AER DW0 000C0302h) to the I/O controllers on that port
    /// whose host enabled ANA Change Notices (AEC bit 11) and completes their held
    /// Asynchronous Event Requests at once, so the hosts reread the log. Returns
    /// whether the state changed.
    ///
    /// # Errors
    /// [`crate::ana::AnaError`]: no port with that PORTID, a group outside
    /// 1..=[`crate::ana::ANAGRPMAX`].
    pub fn set_ana_state(
        &self,
        portid: u16,
        grpid: u32,
        state: nvme::ana::AnaState,
    ) -> Result<bool, crate::ana::AnaError> {
        let groups = self.group_senders();
        crate::ana::set_and_notify(&self.reg, &groups, portid, grpid, state)
    }

    /// Applies configuration `cfg` (validated) in place of the running one, live
    /// (issue 16 item 2; the steps are [`crate::reload`]'s): namespaces, subsystems,
    /// allowed hosts, listen entries, port links, referrals and ANA states added,
    /// removed or changed, without dropping connections they do not concern (the
    /// controllers of a removed port, of a dropped host or of an unlinked subsystem are
    /// disconnected); hosts are told through Asynchronous Events and the Changed
    /// Namespace List. Logs what it did, or why not.
    ///
    /// # Errors
    /// [`crate::reload::ReloadError`] saying why; then nothing changed.
    pub fn reload(
        &self,
        cfg: &TargetConfig,
    ) -> Result<crate::reload::ReloadReport, crate::reload::ReloadError> {
        reload_through(&self.stop, cfg)
    }

    /// Posts Asynchronous Events to the live controllers and answers their held
    /// Asynchronous Event Requests at once ([`crate::rdma::GroupCmd::CompleteHeldEvents`]):
    /// `post` is called with each controller, posts what it wants (e.g.
    /// [`crate::controller::Controller::post_event`] with an ANA Change notice when the
    /// host enabled it) and says whether it did. Returns how many it posted to.
    pub fn post_events(&self, post: impl Fn(&crate::controller::Controller) -> bool) -> usize {
        let groups = self.group_senders();
        crate::reload::post_events(&self.reg, &groups, post)
    }

    /// A handle that asks this target's control thread for reloads from another
    /// thread (a control socket's), without the target handle itself.
    pub fn reloader(&self) -> Reloader {
        Reloader {
            control: self.stop.clone(),
        }
    }

    /// [`TargetHandle::reload`] from the configuration file at `path` (TOML or
    /// nvmetcli JSON, [`TargetConfig::from_file`]).
    ///
    /// # Errors
    /// [`crate::reload::ReloadError::Config`] when the file does not read, parse or
    /// validate; else as [`TargetHandle::reload`].
    pub fn reload_file(
        &self,
        path: &std::path::Path,
    ) -> Result<crate::reload::ReloadReport, crate::reload::ReloadError> {
        self.reload(&TargetConfig::from_file(path)?)
    }

    /// Stops the target at once and waits for its threads: connections are not
    /// drained or disconnected (see [`TargetHandle::shutdown_within`] for that).
    pub fn shutdown(mut self) {
        self.stop_all();
    }
    /// Shuts the target down cleanly within `bound` (issue 16 item 3): stops accepting
    /// connections, drains every poll group (commands in flight get their CQEs, later
    /// ones Command Aborted due to SQ Deletion), flushes every namespace with a
    /// volatile write cache (`fdatasync`), disconnects every queue (CM DREQ) and waits
    /// for the hosts' DREPs, then stops every thread. What was not done by `bound`
    /// is left, and the report says so ([`crate::shutdown::ShutdownReport::clean`]).
    pub fn shutdown_within(mut self, bound: Duration) -> crate::shutdown::ShutdownReport {
        let t0 = Instant::now();
        let deadline = t0 + bound;
        let mut report = crate::shutdown::ShutdownReport::new(bound);
        let _ = self.stop.send(ControlCmd::StopAccepting);
        // Drain: every poll group answers when nothing of it is in flight.
        let (drained_tx, drained) = channel::unbounded();
        let mut waiting = 0;
        for tx in &self.group_senders() {
            if tx.send(GroupCmd::Drain(drained_tx.clone())).is_ok() {
                waiting += 1;
            }
        }
        while waiting > 0 {
            match drained.recv_deadline(deadline) {
                Ok(r) => {
                    report.add_drained(&r);
                    waiting -= 1;
                }
                Err(_) => break,
            }
        }
        report.groups_not_drained = waiting;
        crate::shutdown::flush_namespaces(&self.reg, deadline, &mut report);
        // Disconnect every queue; wait for the DREPs (at most a second of the bound).
        let (queues_tx, queues) = channel::bounded(1);
        let (confirmed_tx, confirmed) = channel::bounded(1);
        let asked = self.stop.send(ControlCmd::DisconnectAll {
            queues: queues_tx,
            confirmed: confirmed_tx,
        });
        if asked.is_ok() {
            report.queues_disconnected = queues.recv_deadline(deadline).unwrap_or(0);
            let drep_deadline = deadline.min(Instant::now() + crate::shutdown::DREP_WAIT);
            report.disconnects_confirmed = confirmed.recv_deadline(drep_deadline).is_ok();
        }
        self.stop_all();
        report.elapsed = t0.elapsed();
        report
    }

    /// Stops at once, with no disconnect, the poll groups of listen address `ip`
    /// (every port on it), as when that address's link dies: its connections stop
    /// answering (their hosts see RC retries run out or Keep Alive lost), and a new
    /// connection there finds no poll group and is refused. The other addresses keep
    /// serving. For failover tests of hosts (issue 15 item 4). Returns how many poll
    /// groups stopped (0 for an address the target does not listen on).
    pub fn kill_address(&mut self, ip: IpAddr) -> usize {
        let groups = (self.served.lock().groups.iter_mut())
            .filter(|g| g.addr == ip && !g.removed)
            .map(|g| (g.tx.clone(), g.thread.take()))
            .collect();
        stop_groups(groups)
    }

    fn stop_all(&mut self) {
        // First the endpoint: a scrape asks the poll groups, which are going.
        if let Some(mut m) = self.metrics.take() {
            m.stop();
        }
        let _ = self.stop.send(ControlCmd::Stop);
        if let Some(c) = self.control.take() {
            let _ = c.join();
        }
        let groups = (self.served.lock().groups.iter_mut())
            .map(|g| (g.tx.clone(), g.thread.take()))
            .collect();
        stop_groups(groups);
    }
}

impl<P: Provider> Drop for TargetHandle<P> {
    fn drop(&mut self) {
        self.stop_all();
    }
}

/// A listened port of an address: its `trsvcid` and the traffic class it sets (`tos`).
type PortListen = (u16, Option<u8>);

/// The distinct addresses of `listen` entries, in order, each with its ports.
fn listen_addresses<'a>(
    listen: impl IntoIterator<Item = &'a crate::config::ListenAddr>,
) -> Vec<(IpAddr, Vec<PortListen>)> {
    let mut out: Vec<(IpAddr, Vec<PortListen>)> = Vec::new();
    for l in listen {
        match out.iter_mut().find(|(ip, _)| *ip == l.addr) {
            Some((_, ports)) => ports.push((l.trsvcid, l.tos)),
            None => out.push((l.addr, vec![(l.trsvcid, l.tos)])),
        }
    }
    out
}

/// Starts a target on provider `P` as `cfg` describes (every listen address, every
/// subsystem), each device opened with `P`'s defaults ([`Provider::device_config`]).
/// `cfg.provider` is not looked at: the caller chose `P` ([`crate::provider`] matches
/// the two).
///
/// # Errors
/// As [`start_with`].
pub fn start_on<P: Provider>(cfg: &TargetConfig) -> Result<TargetHandle<P>, TargetError> {
    start_with::<P>(cfg, P::device_config)
}

/// [`start_on`], with each listen address's device opened with
/// `device_config(address, poll groups)` (the soft provider's fault injection, for
/// one, is set there). A start that fails removes the namespace files it created
/// (sparse files that did not exist before), so a failed start leaves nothing behind.
///
/// # Errors
/// [`TargetError`] naming what failed: a namespace file, the device of an address
/// ([`TargetError::Device`]), its connection manager, a poll group (memory, io_uring,
/// the device's limits), or a configuration the poll groups cannot carry
/// (`mdts_bytes` above the data slab, a data slab over `RLIMIT_MEMLOCK`).
pub fn start_with<P: Provider>(
    cfg: &TargetConfig,
    device_config: impl Fn(IpAddr, u32) -> P::DeviceConfig + Send + 'static,
) -> Result<TargetHandle<P>, TargetError> {
    let mut created = Vec::new();
    let started = start_recording_created::<P>(cfg, device_config, &mut created);
    if started.is_err() {
        remove_created(&created);
    }
    started
}

/// Removes the namespace files a failed start created, and says so.
pub(crate) fn remove_created(created: &[std::path::PathBuf]) {
    for path in created {
        match std::fs::remove_file(path) {
            Ok(()) => tracing::info!(
                path = %path.display(),
                "removed the namespace file this failed start had created"
            ),
            Err(e) => tracing::warn!(
                path = %path.display(),
                "this failed start created the namespace file but cannot remove it: {e}"
            ),
        }
    }
}

/// [`start_with`], pushing the path of every namespace file it creates to `created`.
fn start_recording_created<P: Provider>(
    cfg: &TargetConfig,
    device_config: impl Fn(IpAddr, u32) -> P::DeviceConfig + Send + 'static,
    created: &mut Vec<std::path::PathBuf>,
) -> Result<TargetHandle<P>, TargetError> {
    if cfg.listen.is_empty() {
        return Err(TargetError::Config("no listen address".into()));
    }
    // Bound first: a metrics address that cannot be had fails the start before any
    // namespace file is created.
    let metrics = cfg
        .metrics
        .map(crate::metrics::BoundEndpoint::bind)
        .transpose()?;
    if let Some(cpus) = &cfg.cpus {
        cpus.check_allowed()
            .map_err(|e| TargetError::Config(e.to_string()))?;
    }
    let mut files = Vec::new();
    let mut subsystems = Vec::new();
    for s in &cfg.subsystems {
        let mut namespaces = Vec::new();
        // A disabled namespace (`enable = false`) is configured, not served.
        for n in s.namespaces.iter().filter(|n| n.enable) {
            let file_index = files.len() as u32;
            let entry = open_namespace(n, &s.nqn, file_index, created)?;
            files.push(entry.ns.fd());
            namespaces.push(entry);
        }
        subsystems.push(Arc::new(subsystem_of(s, namespaces)?));
    }
    let poll_groups = cfg.poll_groups.max(1) as u32;
    let mut gcfg = PollGroupConfig {
        srq_depth: cfg.srq_depth,
        in_capsule_bytes: cfg.inline_data_size,
        max_io_bytes: cfg.mdts_bytes,
        ..PollGroupConfig::default()
    };
    let plan = crate::memory::plan_for(cfg, &gcfg, P::PINS_REGISTERED_MEMORY)?;
    gcfg.data_slab_bytes = plan.data_slab_bytes as usize;
    gcfg.io_uring_fixed = plan.io_uring_fixed;
    let limits = Limits {
        max_queue_size: cfg.max_queue_size,
        max_io_queues: 64,
        mdts_bytes: cfg.mdts_bytes,
        in_capsule_bytes: cfg.inline_data_size,
        max_cmd: cfg.max_queue_size,
        discovery_kato_ms: cfg.kato_ms,
    };
    let ports = cfg.listen.iter().enumerate().map(port_of).collect();
    let reg = Registry::with_ports(subsystems, ports, limits, cfg.discovery);
    if gcfg.data_slab_bytes < cfg.mdts_bytes as usize {
        return Err(TargetError::Config(format!(
            "mdts_bytes {} is larger than a poll group's registered data slab ({} bytes), \
             so no command of that size could get a buffer: lower mdts_bytes (--mdts)",
            cfg.mdts_bytes, gcfg.data_slab_bytes
        )));
    }
    let setup = AddressSetup::<P> {
        gcfg,
        poll_groups,
        cpus: cfg.cpus.clone(),
        roce_mtu: cfg.roce_mtu,
        device_config: Box::new(device_config),
    };
    let mut served = Served::<P> {
        devices: Vec::new(),
        groups: Vec::new(),
        listen: cfg.listen.iter().map(|l| l.socket_addr()).collect(),
    };
    let mut endpoints = Vec::new();
    for (ip, listen_ports) in listen_addresses(&cfg.listen) {
        // On an error the groups brought up so far stop when their channels drop.
        let up = bring_up(&setup, &reg, ip, &listen_ports, served.groups.len())?;
        endpoints.push(Some(up.endpoint));
        served.devices.push((up.device, up.cm));
        served.groups.extend(up.groups);
    }
    let served = Arc::new(parking_lot::Mutex::new(served));
    let (stop_tx, stop_rx) = channel::unbounded();
    let ctl = Control::<P> {
        endpoints,
        cmds: stop_rx,
        groups: served.lock().groups.iter().map(|g| g.tx.clone()).collect(),
        served: served.clone(),
        setup,
        reg: reg.clone(),
        conns: HashMap::new(),
        max_queue_size: cfg.max_queue_size,
        cfg: cfg.clone(),
        accepting: true,
        awaiting_drep: HashSet::new(),
        drep_confirmed: None,
    };
    let control = std::thread::Builder::new()
        .name("nvmf-control".into())
        .spawn(move || ctl.run())
        .map_err(|e| TargetError::Config(format!("spawning control thread: {e}")))?;
    let mut handle = TargetHandle {
        served,
        reg,
        control: Some(control),
        stop: stop_tx,
        metrics: None,
    };
    if let Some(bound) = metrics {
        let sources = metric_sources(&handle);
        // On an error the handle's drop stops what started.
        handle.metrics = Some(bound.serve(sources)?);
    }
    Ok(handle)
}

/// What bringing up a listen address needs beyond the registry, kept by the control
/// thread for the addresses a reload adds.
struct AddressSetup<P: Provider> {
    gcfg: PollGroupConfig,
    /// Poll groups per address.
    poll_groups: u32,
    cpus: Option<crate::cpus::CpuList>,
    roce_mtu: Option<u32>,
    /// The device configuration of an address with so many poll groups.
    device_config: Box<dyn Fn(IpAddr, u32) -> P::DeviceConfig + Send>,
}

/// A listen address brought up: the control thread's endpoint, the device and its
/// connection manager, the poll groups.
struct AddressUp<P: Provider> {
    endpoint: Endpoint<P>,
    device: Arc<DeviceOf<P>>,
    cm: CmOf<P>,
    groups: Vec<GroupSlot>,
}

/// The namespace files of `reg` by io_uring fixed-file index (-1: an empty slot), for
/// a poll group's file table.
fn file_table(reg: &Registry) -> Vec<std::os::fd::RawFd> {
    let mut files = Vec::new();
    for s in reg.subsystems().iter() {
        for n in s.namespaces().iter() {
            let at = n.file_index as usize;
            if files.len() <= at {
                files.resize(at + 1, -1);
            }
            files[at] = n.ns.fd();
        }
    }
    files
}

/// Brings up listen address `ip` with its `ports` (`trsvcid`, `tos`): opens its RDMA
/// device (soft: binds UDP 4791 of `ip`), its connection manager and its listens, and
/// starts `setup.poll_groups` poll groups (global indices `first_group..`) with the
/// registry's namespace files. The one path of the start and of a reload.
///
/// # Errors
/// [`TargetError::Device`], [`TargetError::Cm`], [`TargetError::PollGroup`],
/// [`TargetError::Config`]; what was brought up stops when the error is dropped.
fn bring_up<P: Provider>(
    setup: &AddressSetup<P>,
    reg: &Arc<Registry>,
    ip: IpAddr,
    ports: &[PortListen],
    first_group: usize,
) -> Result<AddressUp<P>, TargetError> {
    let poll_groups = setup.poll_groups;
    let gcfg = setup.gcfg;
    let mut dev_cfg = (setup.device_config)(ip, poll_groups);
    if let Some(mtu) = setup.roce_mtu.and_then(transport::verbs::Mtu::from_bytes) {
        P::set_roce_mtu(&mut dev_cfg, mtu)
            .map_err(|e| TargetError::Config(format!("roce_mtu: {e}")))?;
    }
    let dev = P::open(&dev_cfg).map_err(|e| TargetError::Device {
        addr: ip,
        provider: P::NAME,
        source: Box::new(e),
    })?;
    let cm_error = |source| TargetError::Cm {
        addr: ip,
        source: Box::new(source),
    };
    let cm = dev.cm().map_err(|e| cm_error(ConnError::Verbs(e)))?;
    let mut events = Vec::new();
    for &(port, _) in ports {
        events.push((port, cm.listen(port).map_err(cm_error)?));
    }
    let files = file_table(reg);
    let (qp_err_tx, qp_errors) = channel::unbounded();
    let mut groups: Vec<GroupSlot> = Vec::new();
    let fail = |groups: Vec<GroupSlot>, e: TargetError| {
        stop_groups(groups.into_iter().map(|g| (g.tx, g.thread)).collect());
        Err(e)
    };
    for index in 0..poll_groups {
        let (tx, rx) = channel::unbounded();
        let c = Arc::new(PollGroupCounters::default());
        let (ready_tx, ready_rx) = channel::bounded(1);
        let (dev2, cm2, reg2, files2, c2) = (
            dev.clone(),
            cm.clone(),
            reg.clone(),
            files.clone(),
            c.clone(),
        );
        let errs = qp_err_tx.clone();
        let global = first_group + index as usize;
        let cpu = setup.cpus.as_ref().map(|c| c.for_group(global));
        let spawned = std::thread::Builder::new()
            .name(format!("nvmf-pg{global}"))
            .spawn(move || {
                // Pinned before the poll group allocates: its memory is then
                // first touched on that CPU's node.
                if let Some(cpu) = cpu {
                    match crate::cpus::pin_current_thread(cpu) {
                        Ok(()) => tracing::info!(
                            poll_group = global,
                            cpu,
                            "poll group pinned to CPU {cpu}"
                        ),
                        Err(e) => tracing::warn!(
                            poll_group = global,
                            cpu,
                            "pinning the poll group to CPU {cpu}: {e}"
                        ),
                    }
                }
                match PollGroup::<P>::new(&dev2, cm2, index, gcfg, reg2, &files2, rx, errs, c2) {
                    Ok(g) => {
                        let _ = ready_tx.send(Ok(()));
                        g.run();
                    }
                    Err(e) => {
                        let _ = ready_tx.send(Err(e));
                    }
                }
            });
        let h = match spawned {
            Ok(h) => h,
            Err(e) => {
                return fail(
                    groups,
                    TargetError::Config(format!("spawning poll group: {e}")),
                )
            }
        };
        let ready = match ready_rx.recv() {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => Err(TargetError::PollGroup { index, source: e }),
            Err(_) => Err(TargetError::Config("poll group thread died".into())),
        };
        groups.push(GroupSlot {
            tx,
            thread: Some(h),
            counters: c,
            addr: ip,
            removed: false,
        });
        if let Err(e) = ready {
            return fail(groups, e);
        }
    }
    let tos = (ports.iter())
        .filter_map(|&(port, tos)| tos.map(|t| (port, t)))
        .collect();
    Ok(AddressUp {
        endpoint: Endpoint::<P> {
            addr: ip,
            cm: cm.clone(),
            tos,
            events,
            qp_errors,
            _qp_errors_open: qp_err_tx,
            first_group,
            group_count: poll_groups as usize,
            next_group: 0,
        },
        device: dev,
        cm,
        groups,
    })
}

/// Opens namespace `n` of subsystem `nqn` (a file or block device, or memory) as
/// io_uring fixed file `file_index`, pushing its path to `created` when the open
/// created the file.
///
/// # Errors
/// [`TargetError::Namespace`] naming the subsystem and NSID, or
/// [`TargetError::Config`] for a size that does not parse.
pub(crate) fn open_namespace(
    n: &crate::config::NamespaceConfig,
    nqn: &str,
    file_index: u32,
    created: &mut Vec<std::path::PathBuf>,
) -> Result<NamespaceEntry, TargetError> {
    let opts = n.options().map_err(TargetError::Config)?;
    let opened = match n.backend {
        NamespaceBackend::File => Backend::open_with(&n.path, &opts),
        NamespaceBackend::Null | NamespaceBackend::Ram => Backend::open_memory(
            if n.backend == NamespaceBackend::Ram {
                BackendKind::Ram
            } else {
                BackendKind::Null
            },
            opts.create_size_bytes.unwrap_or(0),
            opts.block_size,
            opts.read_only,
        ),
    };
    let ns = opened.map_err(|e| TargetError::Namespace {
        nqn: nqn.to_string(),
        nsid: n.nsid,
        source: e,
    })?;
    if ns.created() {
        created.push(ns.path().to_path_buf());
    }
    let mut entry = NamespaceEntry::new(n.nsid, Arc::new(ns), file_index, nqn).with_ids(
        n.nguid.map(|g| g.0),
        n.uuid.map(|u| u.into_bytes()),
        n.eui64.map(|e| e.0),
    );
    entry.ana_grpid = n.ana_grpid;
    Ok(entry)
}

/// The subsystem configuration `s` with its opened `namespaces`: identity (serial,
/// model, firmware, IEEE OUI, version), hosts, CNTLID range and `qid_max`.
pub(crate) fn subsystem_of(
    s: &crate::config::SubsystemConfig,
    namespaces: Vec<NamespaceEntry>,
) -> Result<Subsystem, TargetError> {
    let mut sub = Subsystem::new(
        s.nqn.clone(),
        s.serial.clone().unwrap_or_else(|| "nvmf-rdma".to_string()),
        s.allow_any_host,
        s.hosts.clone(),
        namespaces,
    );
    if let Some(m) = &s.model {
        sub.model = m.clone();
    }
    if let Some(f) = &s.firmware {
        sub.firmware = f.clone();
    }
    sub.ieee_oui = s.ieee_oui;
    sub.version = s.version_vs().map_err(TargetError::Config)?;
    sub.cntlids = s.cntlid_min..=s.cntlid_max;
    sub.qid_max = s.qid_max;
    sub.set_access(access_of(s)?);
    Ok(sub)
}

/// Who may connect to subsystem `s`: its host list and each host's DH-HMAC-CHAP policy.
///
/// # Errors
/// [`TargetError::Config`] naming the host whose key or lists do not parse.
pub(crate) fn access_of(
    s: &crate::config::SubsystemConfig,
) -> Result<crate::subsystem::HostAccess, TargetError> {
    let mut host_keys = std::collections::HashMap::new();
    for k in &s.host_keys {
        let policy = k.policy().map_err(|e| {
            TargetError::Config(format!(
                "subsystem {}: host_keys ({}): {e}",
                s.nqn, k.hostnqn
            ))
        })?;
        host_keys.insert(k.hostnqn.clone(), Arc::new(policy));
    }
    Ok(crate::subsystem::HostAccess {
        allow_any_host: s.allow_any_host,
        hosts: s.hosts.clone(),
        host_keys,
    })
}

/// Listen entry `i` as the registry's port: its PORTID (`i + 1` unless configured),
/// the subsystems it links and its enabled referrals.
pub(crate) fn port_of((i, l): (usize, &crate::config::ListenAddr)) -> PortInfo {
    PortInfo {
        portid: l.portid.unwrap_or(PORT_ID + i as u16),
        subsystems: l.subsystems.clone(),
        referrals: (l.referrals.iter())
            .filter(|r| r.enable)
            .map(|r| Referral {
                traddr: r.addr,
                trsvcid: r.trsvcid,
                portid: r.portid,
            })
            .collect(),
        ana_groups: (l.ana_groups.iter())
            .map(|g| (g.grpid, g.state.into()))
            .collect(),
        ..PortInfo::new(l.addr, l.trsvcid)
    }
}

/// What the metrics endpoint reads from `t`: the poll groups and devices it serves at
/// start (the devices held weakly: an address a reload removes closes its device, and
/// its counters then read empty).
fn metric_sources<P: Provider>(t: &TargetHandle<P>) -> crate::metrics::Sources {
    use crate::metrics::{DeviceCounterFn, GroupSource, Sources};
    let served = t.served.lock();
    Sources {
        reg: t.reg.clone(),
        groups: (served.groups.iter().enumerate())
            .map(|(index, g)| GroupSource {
                index,
                traddr: g.addr,
                cmds: g.tx.clone(),
                counters: g.counters.clone(),
            })
            .collect(),
        devices: (served.devices.iter())
            .map(|(d, _)| {
                let (ip, d) = (d.ip(), Arc::downgrade(d));
                let read: DeviceCounterFn =
                    Box::new(move || d.upgrade().map(|d| d.hw_counters()).unwrap_or_default());
                (ip, read)
            })
            .collect(),
    }
}

/// The control thread's view of one listen address: its CM agent, the event channel
/// of each listened port, and its poll groups (global indices `first_group..`).
struct Endpoint<P: Provider> {
    /// The listen address.
    addr: IpAddr,
    cm: CmOf<P>,
    /// The traffic class of each listened port that sets one (`tos`).
    tos: Vec<(u16, u8)>,
    /// The event channel of each listened port (`trsvcid`).
    events: Vec<(u16, Receiver<CmEvent>)>,
    /// Its poll groups' reports of QPs gone to the error state (group indices local).
    qp_errors: Receiver<QpErrorReport>,
    /// Keeps `qp_errors` open even if every poll group thread is gone.
    _qp_errors_open: Sender<QpErrorReport>,
    first_group: usize,
    group_count: usize,
    /// Round robin over the I/O queues' poll groups.
    next_group: usize,
}

/// A connection the control thread accepted: where its queue lives and who is at the
/// other end.
#[derive(Clone, Copy, Debug)]
struct ConnRecord {
    /// The poll group that owns the queue (global index).
    group: usize,
    /// The port it came in through (a slot of [`Registry::ports`]).
    port: usize,
    peer: QueuePeer,
}

/// What [`Control::listen_on`] did, to undo.
enum Listened {
    /// A listen on `trsvcid` of endpoint (index).
    Port(usize, u16),
    /// The endpoint (index) brought up.
    Address(usize),
}

/// What woke the control thread.
enum Input {
    Cmd(ControlCmd),
    Tick,
    Event(usize, CmEvent),
    QpError(usize, QpErrorReport),
}

struct Control<P: Provider> {
    /// One per listen address brought up, by index (`None`: a reload removed it).
    endpoints: Vec<Option<Endpoint<P>>>,
    cmds: Receiver<ControlCmd>,
    /// Every poll group, all endpoints' (global index; a removed address's stopped).
    groups: Vec<Sender<GroupCmd>>,
    /// What the handle sees of the addresses (a reload changes it).
    served: Arc<parking_lot::Mutex<Served<P>>>,
    /// How to bring up an address a reload adds.
    setup: AddressSetup<P>,
    reg: Arc<Registry>,
    /// (endpoint, CM connection id) -> its queue.
    conns: HashMap<(usize, u32), ConnRecord>,
    max_queue_size: u16,
    /// The configuration running now (what a reload is the difference from).
    cfg: TargetConfig,
    /// False once a shutdown began: connection requests are refused.
    accepting: bool,
    /// Connections the shutdown disconnected whose DREP (or end) has not come yet.
    awaiting_drep: HashSet<(usize, u32)>,
    /// Told once `awaiting_drep` is empty.
    drep_confirmed: Option<Sender<()>>,
}

impl<P: Provider> Control<P> {
    fn run(mut self) {
        let tick = channel::tick(Duration::from_millis(100));
        loop {
            match self.next_input(&tick) {
                None | Some(Input::Cmd(ControlCmd::Stop)) => return,
                Some(Input::Cmd(ControlCmd::StopAccepting)) => self.accepting = false,
                Some(Input::Cmd(ControlCmd::DisconnectAll { queues, confirmed })) => {
                    self.disconnect_all(queues, confirmed)
                }
                Some(Input::Cmd(ControlCmd::Reload { cfg, reply })) => {
                    let _ = reply.send(self.reload(*cfg));
                }
                Some(Input::Event(ep, ev)) => self.handle_event(ep, ev),
                Some(Input::QpError(ep, r)) => self.handle_qp_error(ep, r),
                Some(Input::Tick) => self.check_keep_alive(),
            }
        }
    }

    /// Waits for the next input from any endpoint; `None` when a connection manager is
    /// gone.
    fn next_input(&self, tick: &Receiver<Instant>) -> Option<Input> {
        let mut sel = channel::Select::new();
        let stop = sel.recv(&self.cmds);
        let ticked = sel.recv(tick);
        let mut sources = Vec::new();
        for (e, ep) in self.endpoints.iter().enumerate() {
            let Some(ep) = ep else { continue };
            sources.push((sel.recv(&ep.qp_errors), e, None));
            for (k, (_, rx)) in ep.events.iter().enumerate() {
                sources.push((sel.recv(rx), e, Some(k)));
            }
        }
        let op = sel.select();
        let i = op.index();
        if i == stop {
            return Some(Input::Cmd(op.recv(&self.cmds).unwrap_or(ControlCmd::Stop)));
        }
        if i == ticked {
            let _ = op.recv(tick);
            return Some(Input::Tick);
        }
        let &(_, e, k) = sources.iter().find(|(idx, _, _)| *idx == i)?;
        let ep = self.endpoints[e].as_ref()?;
        match k {
            None => op.recv(&ep.qp_errors).ok().map(|r| Input::QpError(e, r)),
            Some(k) => op.recv(&ep.events[k].1).ok().map(|ev| Input::Event(e, ev)),
        }
    }

    /// Applies `cfg` in place of the running configuration ([`crate::reload`]), logs
    /// the outcome, and carries out its ends: the controllers it ends are quiesced
    /// (their commands in flight answered, at most [`crate::reload::QUIESCE_WAIT`])
    /// and disconnected, the connections of removed ports dropped, removed listens
    /// closed and addresses left without any stopped.
    fn reload(
        &mut self,
        cfg: TargetConfig,
    ) -> Result<crate::reload::ReloadReport, crate::reload::ReloadError> {
        match self.apply_reload(&cfg) {
            Ok(report) => {
                tracing::info!("configuration reloaded: {}", report.words());
                self.served.lock().listen = cfg.listen.iter().map(|l| l.socket_addr()).collect();
                self.cfg = cfg;
                Ok(report)
            }
            Err(e) => {
                tracing::warn!("configuration reload: {e}; the target runs on unchanged");
                Err(e)
            }
        }
    }

    /// [`Control::reload`]'s steps: plan, listen on the added entries (undone if the
    /// rest fails), apply, end what the report names.
    fn apply_reload(
        &mut self,
        cfg: &TargetConfig,
    ) -> Result<crate::reload::ReloadReport, crate::reload::ReloadError> {
        use crate::reload::ReloadError;
        let plan = crate::reload::plan(&self.cfg, cfg)?;
        if !plan.listen_added.is_empty() {
            // The new addresses' poll groups register memory too.
            crate::memory::plan_for(cfg, &self.setup.gcfg, P::PINS_REGISTERED_MEMORY)
                .map_err(|e| ReloadError::Prepare(e.to_string()))?;
        }
        let added = self
            .listen_on(&plan.listen_added)
            .map_err(|e| ReloadError::Prepare(e.to_string()))?;
        let report = match crate::reload::apply(&self.reg, &self.groups, cfg, plan) {
            Ok(r) => r,
            Err(e) => {
                self.undo_listen(added);
                return Err(e);
            }
        };
        self.end_controllers(report.disconnected());
        self.drop_port_conns(&report.ports_removed);
        for &(addr, port) in &report.plan.listen_removed {
            self.stop_listening(addr, port);
        }
        Ok(report)
    }

    /// Listens on the listen entries `added`: a new `trsvcid` on an address served
    /// already is a listen on its connection manager; a new address is brought up
    /// ([`bring_up`]: its device and poll groups, served as the start's). Returns what
    /// it did, for [`Control::undo_listen`].
    ///
    /// # Errors
    /// The [`TargetError`] of the first entry that failed; what was done is undone.
    fn listen_on(
        &mut self,
        added: &[crate::config::ListenAddr],
    ) -> Result<Vec<Listened>, TargetError> {
        let mut done = Vec::new();
        for (ip, ports) in listen_addresses(added) {
            let at = (self.endpoints.iter()).position(|e| e.as_ref().is_some_and(|e| e.addr == ip));
            let result = match at {
                Some(e) => self.listen_more(e, &ports, &mut done),
                None => self.bring_up_address(ip, &ports, &mut done),
            };
            if let Err(err) = result {
                self.undo_listen(done);
                return Err(err);
            }
        }
        Ok(done)
    }

    /// Listens on `ports` of endpoint `e` (an address served already).
    fn listen_more(
        &mut self,
        e: usize,
        ports: &[PortListen],
        done: &mut Vec<Listened>,
    ) -> Result<(), TargetError> {
        let Some(ep) = self.endpoints[e].as_mut() else {
            return Ok(());
        };
        for &(port, tos) in ports {
            let events = ep.cm.listen(port).map_err(|source| TargetError::Cm {
                addr: ep.addr,
                source: Box::new(source),
            })?;
            ep.events.push((port, events));
            if let Some(t) = tos {
                ep.tos.push((port, t));
            }
            tracing::info!(traddr = %ep.addr, trsvcid = port, "a reload added a listen");
            done.push(Listened::Port(e, port));
        }
        Ok(())
    }

    /// Brings up address `ip` with `ports` for a reload: its endpoint, device and poll
    /// groups join the running ones.
    fn bring_up_address(
        &mut self,
        ip: IpAddr,
        ports: &[PortListen],
        done: &mut Vec<Listened>,
    ) -> Result<(), TargetError> {
        let up = bring_up(&self.setup, &self.reg, ip, ports, self.groups.len())?;
        self.groups.extend(up.groups.iter().map(|g| g.tx.clone()));
        let mut served = self.served.lock();
        served.devices.push((up.device, up.cm));
        served.groups.extend(up.groups);
        drop(served);
        self.endpoints.push(Some(up.endpoint));
        tracing::info!(traddr = %ip, poll_groups = self.setup.poll_groups, "a reload brought up a listen address");
        done.push(Listened::Address(self.endpoints.len() - 1));
        Ok(())
    }

    /// Undoes [`Control::listen_on`] (the reload failed after it).
    fn undo_listen(&mut self, done: Vec<Listened>) {
        for l in done.into_iter().rev() {
            match l {
                Listened::Port(e, port) => {
                    if let Some(addr) = self.endpoints[e].as_ref().map(|ep| ep.addr) {
                        self.stop_listening(addr, port);
                    }
                }
                Listened::Address(e) => self.stop_endpoint(e),
            }
        }
    }

    /// Ends controllers `list` as a reload decided: their queues take no new command,
    /// those in flight are answered (at most [`crate::reload::QUIESCE_WAIT`]), then
    /// every queue is disconnected (CM DREQ) and destroyed.
    fn end_controllers(&mut self, list: &[(u16, QueueEnd)]) {
        if list.is_empty() {
            return;
        }
        let cntlids: Vec<u16> = list.iter().map(|&(c, _)| c).collect();
        if !crate::reload::quiesce(&self.groups, &cntlids, &[], crate::reload::QUIESCE_WAIT) {
            tracing::warn!(
                "commands of the controllers a reload ends were still in flight after {} ms; \
                 disconnecting them anyway",
                crate::reload::QUIESCE_WAIT.as_millis()
            );
        }
        for &(cntlid, why) in list {
            if let Some(ctrl) = self.reg.controller(cntlid) {
                self.tear_down_controller(&ctrl, why);
            }
        }
    }

    /// Disconnects (CM DREQ) and destroys every queue that came in through port slots
    /// `slots` (removed by a reload) and is still here.
    fn drop_port_conns(&mut self, slots: &[usize]) {
        let keys: Vec<(usize, u32)> = (self.conns.iter())
            .filter(|(_, c)| slots.contains(&c.port))
            .map(|(&k, _)| k)
            .collect();
        for (ep, id) in keys {
            if let Some(e) = &self.endpoints[ep] {
                let _ = e.cm.disconnect(ConnId(id));
            }
            self.drop_conn((ep, id), QueueEnd::PortRemoved);
        }
    }

    /// Stops listening on `addr`:`port`; an address left without listens is stopped
    /// ([`Control::stop_endpoint`]).
    fn stop_listening(&mut self, addr: IpAddr, port: u16) {
        let Some(e) =
            (self.endpoints.iter()).position(|e| e.as_ref().is_some_and(|e| e.addr == addr))
        else {
            return;
        };
        let Some(ep) = self.endpoints[e].as_mut() else {
            return;
        };
        if let Err(err) = ep.cm.unlisten(port) {
            tracing::warn!(traddr = %addr, trsvcid = port, "stopping the listen: {err}");
        }
        // Its channel goes too: the connections that came in through it are dropped
        // (drop_port_conns), and once the CM forgets them the channel would read as
        // disconnected, which ends the control thread (a CM gone).
        ep.events.retain(|(p, _)| *p != port);
        ep.tos.retain(|&(p, _)| p != port);
        let listening = (self.cfg_ports_on(addr)).any(|p| p != port);
        tracing::info!(traddr = %addr, trsvcid = port, "a reload removed a listen");
        if !listening {
            self.stop_endpoint(e);
        }
    }

    /// The ports of the running configuration's and the reload's listen entries on
    /// `addr` that the registry still serves.
    fn cfg_ports_on(&self, addr: IpAddr) -> impl Iterator<Item = u16> + '_ {
        let ports = self.reg.ports().to_vec();
        ports
            .into_iter()
            .filter(move |p| !p.removed && p.traddr == addr)
            .map(|p| p.trsvcid)
    }

    /// Stops endpoint `e` (its address no longer listened on): disconnects its
    /// remaining connections, stops its poll groups and closes its device (soft: its
    /// UDP socket).
    fn stop_endpoint(&mut self, e: usize) {
        let keys: Vec<(usize, u32)> = self.conns.keys().filter(|k| k.0 == e).copied().collect();
        for (ep, id) in keys {
            if let Some(x) = &self.endpoints[ep] {
                let _ = x.cm.disconnect(ConnId(id));
            }
            self.drop_conn((ep, id), QueueEnd::PortRemoved);
        }
        let Some(ep) = self.endpoints[e].take() else {
            return;
        };
        let range = ep.first_group..ep.first_group + ep.group_count;
        let (groups, device) = {
            let mut served = self.served.lock();
            let groups: Vec<_> = (served.groups[range].iter_mut())
                .map(|g| {
                    g.removed = true;
                    (g.tx.clone(), g.thread.take())
                })
                .collect();
            let at = (served.devices.iter()).position(|(d, _)| d.ip() == ep.addr);
            (groups, at.map(|i| served.devices.remove(i)))
        };
        let stopped = stop_groups(groups);
        let addr = ep.addr;
        drop(ep);
        drop(device);
        tracing::info!(traddr = %addr, poll_groups = stopped, "a reload stopped serving a listen address");
    }

    /// Disconnects every queue of controller `ctrl` (and only those), as nvmet does on
    /// a Keep Alive expiry, logging `why`, and forgets the controller.
    fn tear_down_controller(&mut self, ctrl: &Arc<crate::controller::Controller>, why: QueueEnd) {
        ctrl.set_fatal();
        let mut qpns = Vec::new();
        for (g, tx) in self.groups.iter().enumerate() {
            let (rtx, rrx) = channel::bounded(1);
            if tx
                .send(GroupCmd::QueuesOf {
                    cntlid: ctrl.cntlid,
                    reply: rtx,
                })
                .is_ok()
            {
                if let Ok(list) = rrx.recv_timeout(Duration::from_secs(1)) {
                    qpns.extend(list.into_iter().map(|q| (g, q)));
                }
            }
        }
        let ids: Vec<(usize, u32)> = self
            .conns
            .iter()
            .filter(|(_, c)| qpns.contains(&(c.group, c.peer.qpn)))
            .map(|(&id, _)| id)
            .collect();
        let span = ctrl.span.clone();
        let _span = span.enter();
        if why == QueueEnd::KeepAliveExpired {
            oplog::keep_alive_expired(ctrl, ids.len());
        }
        for (ep, id) in ids {
            if let Some(e) = &self.endpoints[ep] {
                let _ = e.cm.disconnect(ConnId(id));
            }
            self.drop_conn((ep, id), why);
        }
        self.reg.remove_controller(ctrl.cntlid);
    }

    fn check_keep_alive(&mut self) {
        let now = Instant::now();
        for ctrl in self.reg.controllers() {
            if ctrl.keep_alive_sweep(now) {
                self.tear_down_controller(&ctrl, QueueEnd::KeepAliveExpired);
            }
        }
    }

    /// A queue's QP went to the error state: disconnect its connection (CM DREQ, as
    /// IBTA §12.9 has the side that sees a QP fail do) and destroy the queue. The host
    /// learns from the DREQ at once rather than at its next timeout.
    fn handle_qp_error(&mut self, ep: usize, r: QpErrorReport) {
        let Some(first_group) = self.endpoints[ep].as_ref().map(|e| e.first_group) else {
            return;
        };
        let gq = (first_group + r.group as usize, r.qpn);
        let ids: Vec<u32> = self
            .conns
            .iter()
            .filter(|(&(e, _), c)| e == ep && (c.group, c.peer.qpn) == gq)
            .map(|(&(_, id), _)| id)
            .collect();
        for id in ids {
            if let Some(e) = &self.endpoints[ep] {
                let _ = e.cm.disconnect(ConnId(id));
            }
            self.drop_conn((ep, id), r.why);
        }
    }

    /// The shutdown's last step: a CM DREQ on every connection and its queue destroyed
    /// (logged as [`QueueEnd::TargetShutdown`]); `queues` gets how many, `confirmed` a
    /// message once every host answered or left.
    fn disconnect_all(&mut self, queues: Sender<usize>, confirmed: Sender<()>) {
        let keys: Vec<(usize, u32)> = self.conns.keys().copied().collect();
        for &(ep, id) in &keys {
            if let Some(e) = &self.endpoints[ep] {
                let _ = e.cm.disconnect(ConnId(id));
            }
            self.drop_conn((ep, id), QueueEnd::TargetShutdown);
            self.awaiting_drep.insert((ep, id));
        }
        let _ = queues.send(keys.len());
        self.drep_confirmed = Some(confirmed);
        self.confirm_dreps();
    }

    /// Tells the shutdown once no disconnected connection waits for its DREP.
    fn confirm_dreps(&mut self) {
        if self.awaiting_drep.is_empty() {
            if let Some(tx) = self.drep_confirmed.take() {
                let _ = tx.send(());
            }
        }
    }

    /// Forgets connection `key` and has its poll group destroy the queue (which logs
    /// `why`).
    fn drop_conn(&mut self, key: (usize, u32), why: QueueEnd) {
        if let Some(c) = self.conns.remove(&key) {
            let qpn = c.peer.qpn;
            let _ = self.groups[c.group].send(GroupCmd::DestroyQueue { qpn, why });
        }
    }

    /// Rejects a connection request with REJ "consumer defined" carrying the
    /// NVMe/RDMA RDMA_CM_REJECT record (RECFMT 0, `status`), as nvmet-rdma does, and
    /// logs why (`remote_ip`, `remote_qpn` and the request's `private_data`).
    fn reject(
        &self,
        ep: usize,
        id: ConnId,
        status: RdmaCmRejectStatus,
        (remote_ip, remote_qpn, private_data): (IpAddr, u32, &[u8]),
    ) {
        self.reg.refusals.count(crate::metrics::Refusal::Cm(status));
        oplog::cm_refused(
            remote_ip,
            remote_qpn,
            private_data,
            status,
            self.reg.limits.max_io_queues,
            self.max_queue_size,
        );
        let pd = RdmaCmReject::new(status);
        // REJ reason 28, consumer defined (IBTA Table 112), as nvmet-rdma's rdma_reject.
        if let Some(e) = &self.endpoints[ep] {
            let _ = e.cm.reject(id, zerocopy::IntoBytes::as_bytes(&pd));
        }
    }

    /// Checks an NVMe/RDMA connection request against this target's limits (see
    /// [`check_connect_request`]).
    fn check_request(
        &self,
        private_data: &[u8],
        host_ird: u8,
    ) -> Result<(RdmaCmRequest, u32, u8), RdmaCmRejectStatus> {
        let limits = RdmaCmLimits {
            max_admin_sq_entries: u32::from(nvme::NVME_AQ_DEPTH),
            max_io_sq_entries: u32::from(self.max_queue_size),
            max_qid: self.reg.limits.max_io_queues,
        };
        check_connect_request(private_data, host_ird, &limits, |c| {
            self.reg.controller(c).is_some()
        })
    }

    fn handle_event(&mut self, ep: usize, ev: CmEvent) {
        if let Some(req) = ConnRequest::from_event(&ev) {
            return self.handle_request(ep, req);
        }
        match ev {
            CmEvent::ConnectRequest { .. }
            | CmEvent::Established { .. }
            | CmEvent::ConnectReply { .. } => {}
            CmEvent::StaleConnection {
                id,
                remote_ip,
                remote_qpn,
                remote_port,
            } => {
                let old = self.conns.get(&(ep, id.0)).map(|c| c.peer);
                oplog::stale_connection(remote_ip, remote_qpn, remote_port, old.as_ref());
                // The CM sends the DREQ; the old queue's host is gone, so its queue goes now.
                self.drop_conn((ep, id.0), QueueEnd::StaleConnection);
            }
            // Connections the target ended itself are forgotten already (drop_conn):
            // what is left here was ended by the host.
            CmEvent::Disconnected { id } | CmEvent::Unreachable { id }
                if self.awaiting_drep.remove(&(ep, id.0)) =>
            {
                self.confirm_dreps()
            }
            CmEvent::Disconnected { id } => self.drop_conn((ep, id.0), QueueEnd::HostDisconnected),
            CmEvent::Unreachable { id } => self.drop_conn((ep, id.0), QueueEnd::HostUnreachable),
            CmEvent::Rejected { id, .. } => self.drop_conn((ep, id.0), QueueEnd::HostRejected),
        }
    }

    /// A connection request: checked (NVMe/RDMA private data, the host's IRD), its
    /// queue created in a poll group through the connection manager, then accepted
    /// with the RDMA_CM_ACCEPT record, or rejected with the RDMA_CM_REJECT status.
    fn handle_request(&mut self, ep: usize, req: ConnRequest) {
        let id = req.id;
        let (remote_ip, remote_qpn) = (req.remote_ip, req.remote_qpn);
        let from = (remote_ip, remote_qpn, req.private_data.as_slice());
        if !self.accepting {
            tracing::info!(
                host_addr = %remote_ip,
                host_qpn = %oplog::Hex(remote_qpn),
                "refused an RDMA CM connection request: the target is shutting down"
            );
            self.reg
                .refusals
                .count(crate::metrics::Refusal::ShuttingDown);
            let pd = RdmaCmReject::new(RdmaCmRejectStatus::NoResources);
            if let Some(e) = &self.endpoints[ep] {
                let _ = e.cm.reject(id, zerocopy::IntoBytes::as_bytes(&pd));
            }
            return;
        }
        let (nvme_req, sq_size, ord) =
            match self.check_request(&req.private_data, req.responder_resources) {
                Ok(v) => v,
                Err(status) => return self.reject(ep, id, status, from),
            };
        let qid = nvme_req.qid();
        let Some(addr) = self.endpoints[ep].as_ref().map(|e| e.addr) else {
            return;
        };
        let Some(port) = (self.reg.ports().iter())
            .position(|p| !p.removed && p.traddr == addr && p.trsvcid == req.local_port)
        else {
            tracing::warn!(host_addr = %remote_ip, qid, "a connection request to {addr}:{} which is no configured port", req.local_port);
            return self.reject(ep, id, RdmaCmRejectStatus::NoResources, from);
        };
        let Some(e) = self.endpoints[ep].as_mut() else {
            return;
        };
        let port_tos = e.tos.iter().find(|(port, _)| *port == req.local_port);
        let tos = port_tos.map_or(req.traffic_class, |&(_, t)| t);
        let g = e.first_group
            + if qid == 0 {
                0
            } else {
                e.next_group % e.group_count
            };
        e.next_group += 1;
        let (rtx, rrx) = channel::bounded(1);
        let nq = NewQueue {
            // A port's traffic class replaces the request's on the queue's path.
            req: ConnRequest {
                traffic_class: tos,
                ..req.clone()
            },
            qid,
            sq_size: sq_size as u16,
            ord,
            port,
        };
        if self.groups[g].send(GroupCmd::NewQueue(nq, rtx)).is_err() {
            return self.reject(ep, id, RdmaCmRejectStatus::NoResources, from);
        }
        match rrx.recv_timeout(Duration::from_secs(2)) {
            Ok(Ok(token)) => {
                // RDMA_CM_ACCEPT: RECFMT 0, CRQSIZE = the SQ entries (our receive
                // queue holds one command capsule per SQ entry).
                let accept = RdmaCmAccept::new(sq_size as u16);
                let peer = QueuePeer {
                    host_addr: remote_ip,
                    host_qpn: remote_qpn,
                    qpn: token.qpn,
                    qid,
                };
                self.conns.insert(
                    (ep, id.0),
                    ConnRecord {
                        group: g,
                        port,
                        peer,
                    },
                );
                let Some(e) = &self.endpoints[ep] else {
                    return;
                };
                match e
                    .cm
                    .accept(id, token, zerocopy::IntoBytes::as_bytes(&accept))
                {
                    Ok(()) => oplog::cm_accepted(
                        &peer,
                        sq_size,
                        token.initiator_depth,
                        req.peer_selective_retransmit,
                        nvme_req.cntlid(),
                    ),
                    Err(e) => {
                        tracing::warn!(host_addr = %remote_ip, qid, "RDMA CM accept failed: {e}");
                        self.drop_conn((ep, id.0), QueueEnd::AcceptFailed);
                    }
                }
            }
            Ok(Err(e)) => {
                tracing::warn!(host_addr = %remote_ip, qid, "{e}");
                self.reject(ep, id, RdmaCmRejectStatus::NoResources, from)
            }
            Err(_) => self.reject(ep, id, RdmaCmRejectStatus::NoResources, from),
        }
    }
}

/// Checks an NVMe/RDMA connection request as the target does before accepting it (NVMe
/// RDMA Transport 1.x §3.3): the RDMA_CM_REQUEST record (length, RECFMT), the queue ID
/// and sizes against `limits`, the controller ID of an I/O queue when the host set one
/// (`controller_exists`), and the host's IRD (the REQ's Responder Resources). Returns the
/// request, the SQ entries (= CRQSIZE of the accept) and the target's ORD
/// (`min(host IRD, MAX_ORD)`). The host's own Initiator Depth is not looked at (an NVMe
/// host never reads from the target; Linux and SPDK targets tolerate any value).
///
/// Errors: the [`RdmaCmRejectStatus`] to put in the REJ.
pub fn check_connect_request(
    private_data: &[u8],
    host_ird: u8,
    limits: &RdmaCmLimits,
    controller_exists: impl Fn(u16) -> bool,
) -> Result<(RdmaCmRequest, u32, u8), RdmaCmRejectStatus> {
    let req = RdmaCmRequest::parse(private_data).map_err(|e| e.reject_status())?;
    let sq = req.validate(limits)?;
    if req.qid() != 0 && req.cntlid() != 0 && !controller_exists(req.cntlid()) {
        return Err(RdmaCmRejectStatus::InvalidCntlid);
    }
    let ord = negotiate_ord(host_ird, MAX_ORD)?;
    Ok((req, sq, ord))
}

#[cfg(test)]
mod cm_request_tests {
    use super::*;

    const LIMITS: RdmaCmLimits = RdmaCmLimits {
        max_admin_sq_entries: 32,
        max_io_sq_entries: 128,
        max_qid: 8,
    };

    /// The 56 bytes of user private data of a CM REQ (after the IP CM header).
    fn pd(words: [u16; 5]) -> Vec<u8> {
        let mut v: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
        v.resize(56, 0);
        v
    }

    #[test]
    fn linux_host_requests_are_accepted() {
        // linux-nvme-rdma-rxe.pcap frame 4 (admin: 32 / 31, IRD 0x80) and frame 168
        // (I/O queue 1: 128 / 127): ORD min(0x80, 16).
        let (req, sq, ord) =
            check_connect_request(&pd([0, 0, 32, 31, 0]), 0x80, &LIMITS, |_| false)
                .expect("admin queue");
        assert_eq!((req.qid(), sq, ord), (0, 32, MAX_ORD));
        let (req, sq, ord) =
            check_connect_request(&pd([0, 1, 128, 127, 0]), 1, &LIMITS, |_| false).expect("I/O");
        assert_eq!((req.qid(), sq, ord), (1, 128, 1));
    }

    #[test]
    fn bad_requests_get_the_spec_reject_codes() {
        let check = |pd: &[u8], ird: u8| {
            check_connect_request(pd, ird, &LIMITS, |c| c == 1).map(|(_, sq, ord)| (sq, ord))
        };
        use RdmaCmRejectStatus as S;
        assert_eq!(check(&[0; 31], 16), Err(S::InvalidLen));
        assert_eq!(check(&pd([1, 0, 32, 31, 0]), 16), Err(S::InvalidRecfmt));
        assert_eq!(check(&pd([0, 9, 32, 31, 0]), 16), Err(S::InvalidQid));
        assert_eq!(check(&pd([0, 0, 64, 63, 0]), 16), Err(S::InvalidHsqsize));
        assert_eq!(check(&pd([0, 1, 64, 255, 0]), 16), Err(S::InvalidHsqsize));
        assert_eq!(check(&pd([0, 1, 16, 31, 0]), 16), Err(S::InvalidHrqsize));
        assert_eq!(check(&pd([0, 1, 32, 31, 7]), 16), Err(S::InvalidCntlid));
        assert_eq!(check(&pd([0, 1, 32, 31, 1]), 16), Ok((32, 16)));
        assert_eq!(check(&pd([0, 0, 32, 31, 0]), 0), Err(S::InvalidIrd));
        // The codes on the wire (RDMA_CM_REJECT: RECFMT 0, STS).
        let rej = RdmaCmReject::new(S::InvalidHsqsize);
        assert_eq!(zerocopy::IntoBytes::as_bytes(&rej), &[0, 0, 4, 0]);
    }
}
