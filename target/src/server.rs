//! The running target: opens the namespaces and the soft RDMA device, starts the poll
//! groups and the control thread that answers RDMA CM connection requests (with the
//! NVMe/RDMA private data, NVMe RDMA Transport 1.x §3.2) and enforces Keep Alive.
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam::channel::{self, Receiver, Sender};
use transport::cm::{AcceptParams, CmEvent};
use transport::soft::{CmAgent, DeviceConfig, SoftDevice};

use crate::config::TargetConfig;
use crate::namespace::FileNamespace;
use crate::rdma::{GroupCmd, NewQueue, PollGroup, PollGroupConfig, PollGroupCounters};
use crate::subsystem::{Limits, NamespaceEntry, PortInfo, Registry, Subsystem};

/// NVMe/RDMA CM reject status codes (NVMe RDMA Transport 1.x, Figure 5).
pub mod reject {
    pub const INVALID_LEN: u16 = 0x01;
    pub const INVALID_RECFMT: u16 = 0x02;
    pub const INVALID_QID: u16 = 0x03;
    pub const INVALID_HSQSIZE: u16 = 0x04;
    pub const INVALID_HRQSIZE: u16 = 0x05;
    pub const NO_RESOURCES: u16 = 0x06;
}
/// IB CM reject reason "consumer defined" (IBTA Vol 1 Table 112), used with the
/// NVMe/RDMA reject private data.
pub const CM_REJ_CONSUMER_DEFINED: u16 = 28;

/// Errors starting the target; each names what failed.
#[derive(Debug, thiserror::Error)]
pub enum TargetError {
    #[error("namespace {nsid} of {nqn}: {source}")]
    Namespace {
        nqn: String,
        nsid: u32,
        source: crate::namespace::NamespaceError,
    },
    #[error("{0}")]
    Socket(#[from] transport::soft::socket::SocketError),
    #[error("connection manager: {0}")]
    Cm(#[from] transport::soft::CmAgentError),
    #[error("poll group {index}: {source}")]
    PollGroup {
        index: u32,
        source: crate::rdma::PollGroupError,
    },
    #[error("configuration: {0}")]
    Config(String),
}

/// A running target. Dropping it stops every thread.
pub struct TargetHandle {
    dev: Arc<SoftDevice>,
    reg: Arc<Registry>,
    groups: Vec<(Sender<GroupCmd>, Option<JoinHandle<()>>)>,
    counters: Vec<Arc<PollGroupCounters>>,
    control: Option<JoinHandle<()>>,
    stop: Sender<()>,
    _cm: CmAgent,
    listen: SocketAddr,
}

impl std::fmt::Debug for TargetHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TargetHandle")
            .field("listen", &self.listen)
            .finish()
    }
}

/// The ACK timeout our QPs use (4.096 us x 2^12 = 16.8 ms): short enough to recover
/// from loss quickly, long enough for a full window on loopback.
pub const DEFAULT_ACK_TIMEOUT: u8 = 12;

impl TargetHandle {
    /// Address and RDMA CM port the target listens on.
    pub fn listen_addr(&self) -> SocketAddr {
        self.listen
    }
    /// The RDMA device (for its counters).
    pub fn device(&self) -> &Arc<SoftDevice> {
        &self.dev
    }
    /// Subsystems and controllers.
    pub fn registry(&self) -> &Arc<Registry> {
        &self.reg
    }
    /// Counters of each poll group.
    pub fn poll_group_counters(&self) -> &[Arc<PollGroupCounters>] {
        &self.counters
    }
    /// Stops the target and waits for its threads.
    pub fn shutdown(mut self) {
        self.stop_all();
    }
    fn stop_all(&mut self) {
        let _ = self.stop.send(());
        if let Some(c) = self.control.take() {
            let _ = c.join();
        }
        for (tx, h) in &mut self.groups {
            let _ = tx.send(GroupCmd::Shutdown);
            if let Some(h) = h.take() {
                let _ = h.join();
            }
        }
    }
}

impl Drop for TargetHandle {
    fn drop(&mut self) {
        self.stop_all();
    }
}

/// Starts a target as `cfg` describes: the first listen address, all subsystems.
pub fn start(cfg: &TargetConfig) -> Result<TargetHandle, TargetError> {
    let listen = cfg
        .listen
        .first()
        .ok_or_else(|| TargetError::Config("no listen address".into()))?;
    let ip: IpAddr = listen.addr;
    let port = listen.trsvcid;
    let mut files = Vec::new();
    let mut subsystems = Vec::new();
    for s in &cfg.subsystems {
        let mut namespaces = Vec::new();
        for n in &s.namespaces {
            let size = n.size_bytes().map_err(TargetError::Config)?;
            let ns = FileNamespace::open(&n.path, size, n.block_size).map_err(|e| {
                TargetError::Namespace {
                    nqn: s.nqn.clone(),
                    nsid: n.nsid,
                    source: e,
                }
            })?;
            let file_index = files.len() as u32;
            files.push(ns.fd());
            namespaces.push(NamespaceEntry::new(
                n.nsid,
                Arc::new(ns),
                file_index,
                &s.nqn,
            ));
        }
        subsystems.push(Arc::new(Subsystem::new(
            s.nqn.clone(),
            s.serial.clone().unwrap_or_else(|| "nvmf-rdma".to_string()),
            s.allow_any_host,
            s.hosts.clone(),
            namespaces,
        )));
    }
    let poll_groups = cfg.poll_groups.max(1) as u32;
    let limits = Limits {
        max_queue_size: cfg.max_queue_size,
        max_io_queues: 64,
        mdts_bytes: cfg.mdts_bytes,
        in_capsule_bytes: cfg.inline_data_size,
        max_cmd: cfg.max_queue_size,
    };
    let reg = Registry::new(
        subsystems,
        PortInfo {
            traddr: ip,
            trsvcid: port,
        },
        limits,
    );
    let dev = SoftDevice::open(DeviceConfig {
        ip,
        rx_queues: poll_groups,
        netdev_mtu: None,
    })?;
    let cm = CmAgent::start(&dev)?;
    let events = cm.listen(port)?;
    let gcfg = PollGroupConfig {
        in_capsule_bytes: cfg.inline_data_size,
        max_io_bytes: cfg.mdts_bytes,
        ..PollGroupConfig::default()
    };
    let mut groups = Vec::new();
    let mut counters = Vec::new();
    for index in 0..poll_groups {
        let (tx, rx) = channel::unbounded();
        let c = Arc::new(PollGroupCounters::default());
        let (ready_tx, ready_rx) = channel::bounded(1);
        let (dev2, reg2, files2, c2) = (dev.clone(), reg.clone(), files.clone(), c.clone());
        let h = std::thread::Builder::new()
            .name(format!("nvmf-pg{index}"))
            .spawn(
                move || match PollGroup::new(&dev2, index, gcfg, reg2, &files2, rx, c2) {
                    Ok(g) => {
                        let _ = ready_tx.send(Ok(()));
                        g.run();
                    }
                    Err(e) => {
                        let _ = ready_tx.send(Err(e));
                    }
                },
            )
            .map_err(|e| TargetError::Config(format!("spawning poll group: {e}")))?;
        match ready_rx.recv() {
            Ok(Ok(())) => {}
            Ok(Err(e)) => return Err(TargetError::PollGroup { index, source: e }),
            Err(_) => return Err(TargetError::Config("poll group thread died".into())),
        }
        groups.push((tx, Some(h)));
        counters.push(c);
    }
    let (stop_tx, stop_rx) = channel::bounded(1);
    let ctl = Control {
        cm: cm.clone(),
        events,
        stop: stop_rx,
        groups: groups.iter().map(|(tx, _)| tx.clone()).collect(),
        reg: reg.clone(),
        conns: std::collections::HashMap::new(),
        next_group: 0,
        max_queue_size: cfg.max_queue_size,
    };
    let control = std::thread::Builder::new()
        .name("nvmf-control".into())
        .spawn(move || ctl.run())
        .map_err(|e| TargetError::Config(format!("spawning control thread: {e}")))?;
    Ok(TargetHandle {
        dev,
        reg,
        groups,
        counters,
        control: Some(control),
        stop: stop_tx,
        _cm: cm,
        listen: SocketAddr::new(ip, port),
    })
}

struct Control {
    cm: CmAgent,
    events: Receiver<CmEvent>,
    stop: Receiver<()>,
    groups: Vec<Sender<GroupCmd>>,
    reg: Arc<Registry>,
    /// CM connection id -> (poll group, QPN).
    conns: std::collections::HashMap<u32, (usize, u32)>,
    next_group: usize,
    max_queue_size: u16,
}

impl Control {
    fn run(mut self) {
        let tick = channel::tick(Duration::from_millis(100));
        loop {
            channel::select! {
                recv(self.stop) -> _ => return,
                recv(self.events) -> ev => match ev {
                    Ok(ev) => self.handle_event(ev),
                    Err(_) => return,
                },
                recv(tick) -> _ => self.check_keep_alive(),
            }
        }
    }

    fn check_keep_alive(&mut self) {
        let now = Instant::now();
        for ctrl in self.reg.controllers() {
            if ctrl.kato_expired(now) {
                tracing::warn!(
                    "controller {} (host {}): Keep Alive timer expired",
                    ctrl.cntlid,
                    ctrl.hostnqn
                );
                ctrl.set_fatal();
                // Tear down every queue of that controller (and only those), as nvmet does.
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
                let ids: Vec<u32> = self
                    .conns
                    .iter()
                    .filter(|(_, gq)| qpns.contains(gq))
                    .map(|(&id, _)| id)
                    .collect();
                for id in ids {
                    let _ = self.cm.disconnect(transport::cm::ConnId(id));
                    self.drop_conn(id);
                }
                self.reg.remove_controller(ctrl.cntlid);
            }
        }
    }

    fn drop_conn(&mut self, id: u32) {
        if let Some((g, qpn)) = self.conns.remove(&id) {
            let _ = self.groups[g].send(GroupCmd::DestroyQueue { qpn });
        }
    }

    fn reject(&self, id: transport::cm::ConnId, status: u16) {
        let mut pd = [0u8; 4];
        pd[2..4].copy_from_slice(&status.to_le_bytes());
        let _ = self.cm.reject(id, CM_REJ_CONSUMER_DEFINED, &pd);
    }

    fn handle_event(&mut self, ev: CmEvent) {
        match ev {
            CmEvent::ConnectRequest {
                id,
                remote_ip,
                remote_qpn,
                remote_psn,
                responder_resources,
                path_mtu,
                flow_label,
                private_data,
                ..
            } => {
                // NVMe/RDMA CM request: RECFMT, QID, HRQSIZE, HSQSIZE (little endian).
                if private_data.len() < 8 {
                    return self.reject(id, reject::INVALID_LEN);
                }
                let f = |o: usize| u16::from_le_bytes([private_data[o], private_data[o + 1]]);
                let (recfmt, qid, hrqsize, hsqsize) = (f(0), f(2), f(4), f(6));
                if recfmt != 0 {
                    return self.reject(id, reject::INVALID_RECFMT);
                }
                let sq_size = hsqsize as u32 + 1;
                let max = if qid == 0 {
                    nvme::NVME_AQ_DEPTH as u32
                } else {
                    self.max_queue_size as u32
                };
                if sq_size > max || sq_size < 2 {
                    return self.reject(id, reject::INVALID_HSQSIZE);
                }
                if (hrqsize as u32) < sq_size {
                    return self.reject(id, reject::INVALID_HRQSIZE);
                }
                let g = if qid == 0 {
                    0
                } else {
                    self.next_group % self.groups.len()
                };
                self.next_group += 1;
                let (rtx, rrx) = channel::bounded(1);
                let nq = NewQueue {
                    cm_id: id.0,
                    qid,
                    sq_size: sq_size as u16,
                    remote: remote_ip,
                    remote_qpn,
                    remote_psn,
                    flow_label,
                    path_mtu,
                    ord: responder_resources,
                };
                if self.groups[g].send(GroupCmd::NewQueue(nq, rtx)).is_err() {
                    return self.reject(id, reject::NO_RESOURCES);
                }
                match rrx.recv_timeout(Duration::from_secs(2)) {
                    Ok(Ok((qpn, psn))) => {
                        let mut accept = vec![0u8; 32];
                        accept[2..4].copy_from_slice(&(sq_size as u16).to_le_bytes());
                        let params = AcceptParams {
                            local_qpn: qpn,
                            starting_psn: psn,
                            responder_resources: 0,
                            initiator_depth: responder_resources.clamp(1, 16),
                            rnr_retry_count: 7,
                            private_data: accept,
                        };
                        self.conns.insert(id.0, (g, qpn));
                        if let Err(e) = self.cm.accept(id, params) {
                            tracing::warn!("CM accept: {e}");
                            self.drop_conn(id.0);
                        }
                    }
                    _ => self.reject(id, reject::NO_RESOURCES),
                }
            }
            CmEvent::Established { .. } | CmEvent::ConnectReply { .. } => {}
            CmEvent::Disconnected { id }
            | CmEvent::Unreachable { id }
            | CmEvent::Rejected { id, .. } => self.drop_conn(id.0),
        }
    }
}
