//! Native multipath (NVMe Base 2.x §2.4 "NVM Subsystem Entities", §8.1.1
//! "Asymmetric Namespace Access Reporting"), a layer above controllers as Linux's
//! `drivers/nvme/host/multipath.c` is: one subsystem reached through several
//! controllers (paths), one set of namespaces.
//!
//! [`MultipathHost::connect`] connects a [`Host`] per path (each its own controller,
//! queues and keeper; each reconnects on its own), checks that every controller
//! belongs to one subsystem (Identify Controller SUBNQN), and reads each path's ANA
//! log page (0Ch) where the controller reports ANA (CMIC bit 3); an ANA Change notice
//! on a path ([`crate::aen`]) replaces that path's log, as do its reconnects (the
//! host reads the log again then, as Linux does), an ANA status and
//! [`MultipathHost::refresh_ana`].
//!
//! [`MultipathHost::namespace`] finds namespace `nsid` on every path and keeps the
//! paths where it is the same namespace, as Linux decides it (`nvme_ns_ids_equal`):
//! the same UUID, NGUID, EUI-64 and CSI, from the Namespace Identification Descriptor
//! list (CNS 03h) and Identify Namespace, at least one of them present (a path whose
//! namespace has none, or different ones, is left out and logged). Linux nvmet, for
//! one, reports only a UUID.
//!
//! Each command of a [`MultipathNamespace`] goes to the path [`PathPolicy`] picks
//! among the live paths of the best ANA state (optimized before non-optimized;
//! inaccessible, persistent loss and change are never picked; [`policy::choose`]). A
//! command that fails with an ANA status (SCT 3h 01h-03h) marks its path's group in
//! that state, the log is read again in the background, and the command goes to
//! another path; a path error (transport, disconnect, the controller reconnecting or
//! lost, other path statuses) sends it to another path too ([`policy::classify`]).
//! While no path is usable a command waits, trying again every [`NO_PATH_POLL`], for
//! at most [`MultipathOptions::no_path_timeout`] (Linux's `queue_if_no_path` with a
//! limit), then fails with [`HostError::FailFast`] naming the subsystem.
//!
//! Paths fail over fast: each path's host is connected with `fast_io_fail_tmo` 0
//! (held I/O fails at once when its controller is lost, so this layer can send it
//! elsewhere), and keeps reconnecting in the background (`ctrl_loss_tmo` as given):
//! a path that comes back is picked again.
//!
//! The data calls copy through the chosen path's buffer pool (each path is its own
//! RDMA device with its own registered memory, so a buffer cannot follow a command
//! from one path to another).
pub mod policy;

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use nvme::ana::{AnaLog, AnaState, CMIC_ANA_REPORTING};
use nvme::LogPageId;
use parking_lot::Mutex;
use transport::soft::SoftProvider;
use transport::verbs::Provider;

use crate::aen::{ana_log_len, ControllerEvent};
use crate::controller::ADMIN_MAX_IO_BYTES;
use crate::error::HostError;
use crate::host::{Host, Namespace};
use crate::identify::{NamespaceIds, NamespaceInfo};
use crate::lifecycle::CtrlState;
use crate::options::HostOptions;
pub use policy::{Failure, PathPolicy, PathView};

/// How often a command with no usable path looks again.
pub const NO_PATH_POLL: Duration = Duration::from_millis(20);

/// The multipath layer's options.
#[derive(Clone, Copy, Debug)]
pub struct MultipathOptions {
    /// Path choice (default [`PathPolicy::FirstOptimized`]).
    pub policy: PathPolicy,
    /// How long a command waits while no path is usable (default 30 s).
    pub no_path_timeout: Duration,
}

impl Default for MultipathOptions {
    fn default() -> Self {
        MultipathOptions {
            policy: PathPolicy::default(),
            no_path_timeout: Duration::from_secs(30),
        }
    }
}

/// One path: a host (controller) and its ANA log.
struct Path<P: Provider> {
    host: Host<P>,
    /// The ANA log as last read; `None` where the controller reports no ANA.
    ana: Mutex<Option<AnaLog>>,
    outstanding: AtomicUsize,
    /// Commands completed through this path.
    completed: AtomicU64,
}

impl<P: Provider> Path<P> {
    /// The ANA state of namespace `nsid` (in group `grpid`) through this path:
    /// `Optimized` without ANA reporting, `Inaccessible` for a namespace the log does
    /// not list.
    fn ana_state(&self, nsid: u32, grpid: u32) -> AnaState {
        match &*self.ana.lock() {
            None => AnaState::Optimized,
            Some(log) => log
                .state_of_nsid(nsid)
                .or_else(|| log.group(grpid).map(|g| g.state))
                .unwrap_or(AnaState::Inaccessible),
        }
    }

    /// Marks group `grpid` (or namespace `nsid`'s group) in `state` until the next
    /// read of the log.
    fn mark(&self, nsid: u32, grpid: u32, state: AnaState) {
        if let Some(log) = self.ana.lock().as_mut() {
            for g in &mut log.groups {
                if g.grpid == grpid || g.nsids.contains(&nsid) {
                    g.state = state;
                }
            }
        }
    }
}

/// Reads the ANA log (0Ch) of `host` in pieces of one admin buffer and decodes it.
/// The log is at most 16 + 32 x NANAGRPID + 4 x MNAN bytes (what Linux reads at once);
/// the reading stops as soon as the pieces hold the whole log its header describes, so
/// no piece starts past the log's end (an offset a controller answers with Invalid
/// Field, NVMe Base 2.x §5.16).
async fn read_ana_log<P: Provider>(host: &Host<P>) -> Result<AnaLog, HostError> {
    let len = ana_log_len(host.controller_info()).next_multiple_of(4);
    let mut raw = Vec::with_capacity(len);
    loop {
        let piece = (len - raw.len()).min(ADMIN_MAX_IO_BYTES);
        let data = host
            .get_log_page(
                LogPageId::AnaLog.value(),
                0xFFFF_FFFF,
                raw.len() as u64,
                piece,
            )
            .await?;
        raw.extend_from_slice(&data);
        if raw.len() >= len || crate::aen::ana_log_is_whole(&raw) {
            return AnaLog::decode(&raw).map_err(|e| HostError::Protocol(format!("ANA log: {e}")));
        }
    }
}

struct Shared<P: Provider> {
    subnqn: String,
    paths: Vec<Arc<Path<P>>>,
    opts: MultipathOptions,
    turn: AtomicUsize,
    failovers: AtomicU64,
}

/// Several controllers of one NVM subsystem as one host: see the module docs.
pub struct MultipathHost<P: Provider = SoftProvider> {
    shared: Arc<Shared<P>>,
}

impl<P: Provider> std::fmt::Debug for MultipathHost<P> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MultipathHost")
            .field("subnqn", &self.shared.subnqn)
            .field("paths", &self.shared.paths.len())
            .finish()
    }
}

impl MultipathHost<SoftProvider> {
    /// Connects a path per entry of `paths` (one controller each; `fast_io_fail_tmo`
    /// is set to 0, see the module docs) on the soft provider. A path that does not
    /// connect is logged and left out.
    ///
    /// Errors: no path connected (the first path's error); a path whose controller
    /// reports another subsystem NQN than the first ([`HostError::InvalidArgument`]).
    pub async fn connect(
        paths: Vec<HostOptions>,
        opts: MultipathOptions,
    ) -> Result<Self, HostError> {
        let mut hosts = Vec::new();
        let mut first_err = None;
        for mut o in paths {
            o.fast_io_fail_tmo = Some(Duration::ZERO);
            let addr = o.traddr;
            match Host::connect(o).await {
                Ok(h) => hosts.push(h),
                Err(e) => {
                    tracing::warn!(%addr, "path not connected: {e}");
                    first_err.get_or_insert(e);
                }
            }
        }
        if hosts.is_empty() {
            return Err(first_err.unwrap_or_else(|| {
                HostError::InvalidArgument("a multipath host needs at least one path".into())
            }));
        }
        Self::from_hosts(hosts, opts).await
    }
}

impl<P: Provider> MultipathHost<P> {
    /// Groups connected `hosts` (on any provider) as paths of one subsystem: ANA logs
    /// read, ANA Change notices followed. Call within a tokio runtime.
    ///
    /// Errors: no host; a host of another subsystem than the first.
    pub async fn from_hosts(
        hosts: Vec<Host<P>>,
        opts: MultipathOptions,
    ) -> Result<Self, HostError> {
        let Some(first) = hosts.first() else {
            return Err(HostError::InvalidArgument(
                "a multipath host needs at least one path".into(),
            ));
        };
        let subnqn = first.controller_info().subnqn.clone();
        let mut paths = Vec::new();
        for h in hosts {
            let nqn = &h.controller_info().subnqn;
            if *nqn != subnqn {
                return Err(HostError::InvalidArgument(format!(
                    "controller {} belongs to subsystem {nqn}, not {subnqn}: one multipath \
                     host groups one subsystem's controllers",
                    h.controller_info().cntlid
                )));
            }
            let ana = if h.controller_info().cmic & CMIC_ANA_REPORTING != 0 {
                Some(read_ana_log(&h).await?)
            } else {
                None
            };
            let mut events = h.events();
            let path = Arc::new(Path {
                host: h,
                ana: Mutex::new(ana),
                outstanding: AtomicUsize::new(0),
                completed: AtomicU64::new(0),
            });
            // ANA Change notices replace the path's log; the task ends with the host.
            let weak = Arc::downgrade(&path);
            tokio::spawn(async move {
                use tokio::sync::broadcast::error::RecvError;
                loop {
                    match events.recv().await {
                        Ok(ControllerEvent::AnaChanged { log }) => {
                            let Some(p) = weak.upgrade() else { return };
                            match AnaLog::decode(&log) {
                                Ok(l) => {
                                    tracing::info!(?l, "ANA change");
                                    *p.ana.lock() = Some(l);
                                }
                                Err(e) => tracing::warn!("ANA change: log not decoded: {e}"),
                            }
                        }
                        Ok(_) | Err(RecvError::Lagged(_)) => {}
                        Err(RecvError::Closed) => return,
                    }
                }
            });
            paths.push(path);
        }
        Ok(MultipathHost {
            shared: Arc::new(Shared {
                subnqn,
                paths,
                opts,
                turn: AtomicUsize::new(0),
                failovers: AtomicU64::new(0),
            }),
        })
    }

    /// The subsystem NQN.
    pub fn subnqn(&self) -> &str {
        &self.shared.subnqn
    }

    /// The paths' hosts, in connection order.
    pub fn paths(&self) -> Vec<&Host<P>> {
        self.shared.paths.iter().map(|p| &p.host).collect()
    }

    /// Commands completed through each path, in connection order.
    pub fn completed_per_path(&self) -> Vec<u64> {
        self.shared
            .paths
            .iter()
            .map(|p| p.completed.load(Ordering::Relaxed))
            .collect()
    }

    /// Commands sent to another path after a path or ANA error.
    pub fn failovers(&self) -> u64 {
        self.shared.failovers.load(Ordering::Relaxed)
    }

    /// Reads every path's ANA log again (where the controller reports ANA).
    ///
    /// Errors: the first path's read that failed (the others are still read).
    pub async fn refresh_ana(&self) -> Result<(), HostError> {
        let mut first = None;
        for p in &self.shared.paths {
            if p.host.controller_info().cmic & CMIC_ANA_REPORTING == 0 {
                continue;
            }
            match read_ana_log(&p.host).await {
                Ok(l) => *p.ana.lock() = Some(l),
                Err(e) => {
                    first.get_or_insert(e);
                }
            }
        }
        first.map_or(Ok(()), Err)
    }

    /// The ANA state of namespace `ns` through each path, in connection order, as
    /// last read (`Optimized` for a controller without ANA reporting).
    pub fn ana_states(&self, ns: &MultipathNamespace<P>) -> Vec<AnaState> {
        ns.paths
            .iter()
            .map(|(i, _)| self.shared.paths[*i].ana_state(ns.nsid, ns.anagrpid))
            .collect()
    }

    /// Namespace `nsid` through every path where it is the same namespace (see the
    /// module docs).
    ///
    /// Errors: the namespace is on no live path (the first path's error).
    pub async fn namespace(&self, nsid: u32) -> Result<MultipathNamespace<P>, HostError> {
        let mut found: Vec<(usize, Namespace<P>, NamespaceInfo, NamespaceIds)> = Vec::new();
        let mut first_err = None;
        for (i, p) in self.shared.paths.iter().enumerate() {
            let r = async {
                let info = p.host.identify_namespace(nsid).await?;
                let ids = p.host.namespace_ids(nsid, &info).await?;
                Ok::<_, HostError>((p.host.namespace(nsid).await?, info, ids))
            }
            .await;
            match r {
                Ok((ns, info, ids)) => found.push((i, ns, info, ids)),
                Err(e) => {
                    tracing::warn!(path = i, nsid, "namespace not found on the path: {e}");
                    first_err.get_or_insert(e);
                }
            }
        }
        let Some((_, _, want, want_ids)) = found.first().cloned() else {
            return Err(first_err.unwrap_or(HostError::Disconnected));
        };
        let mut paths = Vec::new();
        for (k, (i, ns, _, ids)) in found.into_iter().enumerate() {
            if k == 0 || want_ids.same_namespace(&ids) {
                paths.push((i, ns));
            } else {
                tracing::warn!(
                    path = i,
                    nsid,
                    "namespace {nsid} there is another namespace (UUID/NGUID/EUI-64 differ, \
                     or none to compare): path left out"
                );
            }
        }
        Ok(MultipathNamespace {
            nsid,
            block_size: want.block_size,
            nlb: want.nsze,
            nguid: want.nguid,
            ids: want_ids,
            anagrpid: want.anagrpid,
            shared: self.shared.clone(),
            paths,
        })
    }

    /// Disconnects every path.
    ///
    /// Errors: the first path's disconnect error (every path is disconnected).
    pub async fn disconnect(self) -> Result<(), HostError> {
        let shared = match Arc::try_unwrap(self.shared) {
            Ok(s) => s,
            Err(_) => {
                return Err(HostError::InvalidArgument(
                    "namespaces of the multipath host are still held: drop them first".into(),
                ))
            }
        };
        let mut first = None;
        for p in shared.paths {
            match Arc::try_unwrap(p) {
                Ok(p) => {
                    if let Err(e) = p.host.disconnect().await {
                        first.get_or_insert(e);
                    }
                }
                Err(_) => {
                    first
                        .get_or_insert(HostError::InvalidArgument("a path is still in use".into()));
                }
            }
        }
        first.map_or(Ok(()), Err)
    }
}

/// One namespace of a [`MultipathHost`] through its paths. Cheap to clone.
pub struct MultipathNamespace<P: Provider = SoftProvider> {
    /// Namespace ID.
    pub nsid: u32,
    /// Logical block size in bytes.
    pub block_size: u32,
    /// Size in logical blocks.
    pub nlb: u64,
    /// NGUID (all zeros: none).
    pub nguid: [u8; 16],
    /// The identifiers the paths were matched by (UUID, NGUID, EUI-64, CSI).
    pub ids: NamespaceIds,
    /// ANA group (0 without ANA).
    pub anagrpid: u32,
    shared: Arc<Shared<P>>,
    /// (path index, the namespace through that path).
    paths: Vec<(usize, Namespace<P>)>,
}

impl<P: Provider> Clone for MultipathNamespace<P> {
    fn clone(&self) -> Self {
        MultipathNamespace {
            nsid: self.nsid,
            block_size: self.block_size,
            nlb: self.nlb,
            nguid: self.nguid,
            ids: self.ids,
            anagrpid: self.anagrpid,
            shared: self.shared.clone(),
            paths: self.paths.clone(),
        }
    }
}

impl<P: Provider> std::fmt::Debug for MultipathNamespace<P> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MultipathNamespace")
            .field("nsid", &self.nsid)
            .field(
                "paths",
                &self.paths.iter().map(|(i, _)| *i).collect::<Vec<_>>(),
            )
            .finish()
    }
}

impl<P: Provider> MultipathNamespace<P> {
    /// Paths (indices into the host's) the namespace is reached through.
    pub fn path_indices(&self) -> Vec<usize> {
        self.paths.iter().map(|(i, _)| *i).collect()
    }

    fn views(&self) -> Vec<PathView> {
        self.paths
            .iter()
            .map(|(i, _)| {
                let p = &self.shared.paths[*i];
                PathView {
                    live: p.host.state() == CtrlState::Live,
                    ana: p.ana_state(self.nsid, self.anagrpid),
                    outstanding: p.outstanding.load(Ordering::Relaxed),
                }
            })
            .collect()
    }

    /// Runs `op` on the chosen path, failing over as the module docs say.
    async fn run<T, F, Fut>(&self, what: &str, mut op: F) -> Result<T, HostError>
    where
        F: FnMut(Namespace<P>) -> Fut,
        Fut: std::future::Future<Output = Result<T, HostError>>,
    {
        let deadline = Instant::now() + self.shared.opts.no_path_timeout;
        let mut last: Option<HostError> = None;
        loop {
            let turn = self.shared.turn.fetch_add(1, Ordering::Relaxed);
            let Some(k) = policy::choose(&self.views(), self.shared.opts.policy, turn) else {
                if Instant::now() >= deadline {
                    return Err(HostError::FailFast(format!(
                        "{what} of namespace {} of {}: no usable path within {} ms{}",
                        self.nsid,
                        self.shared.subnqn,
                        self.shared.opts.no_path_timeout.as_millis(),
                        last.map(|e| format!(" (last error: {e})"))
                            .unwrap_or_default()
                    )));
                }
                tokio::time::sleep(NO_PATH_POLL).await;
                continue;
            };
            let (i, ns) = &self.paths[k];
            let path = &self.shared.paths[*i];
            path.outstanding.fetch_add(1, Ordering::Relaxed);
            let r = op(ns.clone()).await;
            path.outstanding.fetch_sub(1, Ordering::Relaxed);
            let e = match r {
                Ok(v) => {
                    path.completed.fetch_add(1, Ordering::Relaxed);
                    return Ok(v);
                }
                Err(e) => e,
            };
            match policy::classify(&e) {
                Failure::Command => return Err(e),
                Failure::Ana(state) => {
                    tracing::info!(
                        path = i,
                        nsid = self.nsid,
                        "{what}: {e}; trying another path"
                    );
                    path.mark(self.nsid, self.anagrpid, state);
                    let p = path.clone();
                    tokio::spawn(async move {
                        match read_ana_log(&p.host).await {
                            Ok(l) => *p.ana.lock() = Some(l),
                            Err(err) => tracing::debug!("ANA log after an ANA status: {err}"),
                        }
                    });
                }
                Failure::Path => {
                    tracing::info!(
                        path = i,
                        nsid = self.nsid,
                        "{what}: {e}; trying another path"
                    );
                    // Let a path whose controller has not yet noticed not be picked
                    // again at once.
                    if path.host.state() == CtrlState::Live {
                        tokio::time::sleep(NO_PATH_POLL).await;
                    }
                }
            }
            self.shared.failovers.fetch_add(1, Ordering::Relaxed);
            if Instant::now() >= deadline {
                return Err(e);
            }
            last = Some(e);
        }
    }

    /// Writes `data` (a multiple of the block size) at block `slba` through one path,
    /// another after a path or ANA error; `fua` sets Force Unit Access.
    ///
    /// Errors: the command's own status (no failover), [`HostError::FailFast`] when no
    /// path was usable within `no_path_timeout`.
    pub async fn write(&self, slba: u64, data: &[u8], fua: bool) -> Result<(), HostError> {
        self.run("write", |ns| async move { ns.write(slba, data, fua).await })
            .await
    }

    /// Reads `buf.len()` bytes (a multiple of the block size) from block `slba`, as
    /// [`MultipathNamespace::write`] does for paths and errors.
    pub async fn read(&self, slba: u64, buf: &mut [u8]) -> Result<(), HostError> {
        let len = buf.len();
        let data = self
            .run("read", |ns| async move {
                let mut v = vec![0u8; len];
                ns.read(slba, &mut v).await.map(|()| v)
            })
            .await?;
        buf.copy_from_slice(&data);
        Ok(())
    }

    /// Flush through one path (another after a path or ANA error).
    pub async fn flush(&self) -> Result<(), HostError> {
        self.run("flush", |ns| async move { ns.flush().await })
            .await
    }
}
