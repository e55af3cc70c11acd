//! What operators watch (issue 16 item 6): an opt-in Prometheus endpoint
//! (`--metrics 127.0.0.1:9100`, `metrics = "..."` in the configuration), served over
//! plain HTTP (`GET /metrics`) by one thread of its own ([`http`]).
//!
//! The metrics read the counters the target keeps anyway, with no lock and no shared
//! atomic added per I/O:
//! - per namespace, the read and write commands and bytes of [`crate::stats`] (the
//!   SMART log's counters);
//! - per namespace and direction, a completion latency histogram ([`latency`]) that
//!   each poll group keeps in its own request core as plain integers, with the arrival
//!   time its poll round read anyway; a scrape asks every poll group for a copy through
//!   its command channel ([`crate::rdma::GroupCmd::Metrics`]), which the poll loop
//!   looks at every round;
//! - per poll group, the queues it holds and the transport's counters of its QPs
//!   (rxe's names, [`transport::rc::QpCounters`]: those of QPs already gone are kept
//!   in the poll group's state, so the counters never go down), from the same copy, and
//!   the poll group's own counters ([`crate::rdma::PollGroupCounters`]);
//! - per listen address, the RDMA device's counters (soft provider: packets and
//!   datagrams sent and received, ICRC errors ...);
//! - the controllers connected, per subsystem, from the registry; refused connections
//!   by reason ([`refusals`]), counted once per connection attempt.
//!
//! [`encode`] writes a [`Snapshot`] in the Prometheus text format (version 0.0.4) with
//! `prometheus-client`; the names follow Prometheus' conventions (`nvmf_target_`
//! prefix, base units in the name, `_total` on counters).
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use crossbeam::channel::{self, Sender};
use transport::rc::QpCounters;

use crate::rdma::{GroupCmd, PollGroupCounters};
use crate::stats::IoTotals;
use crate::subsystem::Registry;

pub mod encode;
pub mod http;
pub mod latency;
pub mod refusals;

pub use http::{BoundEndpoint, MetricsEndpoint, MetricsError};
pub use latency::LatencyHistogram;
pub use refusals::{ConnectRefusals, Refusal};

/// How long a scrape waits for a poll group's copy (an idle poll group sleeps at most
/// 10 ms before it looks at its commands).
pub const GROUP_REPLY_WAIT: Duration = Duration::from_secs(1);

/// What one poll group tells a scrape: a copy of the counters in its own state.
#[derive(Clone, Debug, Default)]
pub struct GroupSnapshot {
    /// Completion latency per namespace (by io_uring fixed-file index), reads then
    /// writes.
    pub latency: Vec<latency::ReadWrite>,
    /// Admin queues it holds now.
    pub admin_queues: u64,
    /// I/O queues it holds now.
    pub io_queues: u64,
    /// Its QPs' transport counters, summed over the live QPs and those destroyed;
    /// `None` where the provider keeps none per QP (verbs: the kernel device's
    /// `hw_counters`).
    pub qp: Option<QpCounters>,
}

/// One namespace in a [`Snapshot`].
#[derive(Clone, Debug)]
pub struct NamespaceSample {
    /// Its subsystem's NQN.
    pub subnqn: String,
    /// Its NSID.
    pub nsid: u32,
    /// Commands and bytes ([`crate::stats`]).
    pub io: IoTotals,
    /// Completion latency, reads then writes, over every poll group.
    pub latency: latency::ReadWrite,
}

/// One poll group in a [`Snapshot`].
#[derive(Clone, Debug)]
pub struct GroupSample {
    /// Its index over every listen address (as its thread's name, `nvmf-pgN`).
    pub index: usize,
    /// The listen address whose device it polls.
    pub traddr: IpAddr,
    /// Its copy, or `None` when it did not answer in time (stopping, stuck).
    pub state: Option<GroupSnapshot>,
    /// Its own counters, read as they are.
    pub counters: PollGroupValues,
}

/// The values of [`PollGroupCounters`] that the endpoint exports.
#[derive(Clone, Copy, Debug, Default)]
pub struct PollGroupValues {
    /// Command capsules received.
    pub capsules: u64,
    /// Commands answered with an error status.
    pub error_completions: u64,
    /// Capsules dropped for SQ overflow.
    pub sq_overflows: u64,
    /// Commands that waited for a data buffer.
    pub buffer_waits: u64,
    /// Responses that waited for a send credit.
    pub send_credit_waits: u64,
    /// RDMA READs that waited for a READ credit.
    pub read_credit_waits: u64,
    /// SRQ limit events.
    pub srq_limit_events: u64,
    /// Times the poll group slept.
    pub sleeps: u64,
}

impl PollGroupValues {
    fn read(c: &PollGroupCounters) -> Self {
        use std::sync::atomic::Ordering::Relaxed;
        PollGroupValues {
            capsules: c.capsules.load(Relaxed),
            error_completions: c.error_completions.load(Relaxed),
            sq_overflows: c.sq_overflows.load(Relaxed),
            buffer_waits: c.buffer_waits.load(Relaxed),
            send_credit_waits: c.send_credit_waits.load(Relaxed),
            read_credit_waits: c.read_credit_waits.load(Relaxed),
            srq_limit_events: c.srq_limit_events.load(Relaxed),
            sleeps: c.sleeps.load(Relaxed),
        }
    }
}

/// One RDMA device (listen address) in a [`Snapshot`]: its counters by name.
#[derive(Clone, Debug)]
pub struct DeviceSample {
    /// The listen address.
    pub traddr: IpAddr,
    /// Counter name (rxe's where one exists) and value.
    pub counters: Vec<(&'static str, u64)>,
}

/// Everything one scrape reports.
#[derive(Clone, Debug)]
pub struct Snapshot {
    /// Every namespace of every subsystem.
    pub namespaces: Vec<NamespaceSample>,
    /// Live controllers per subsystem NQN (the discovery subsystem included), every
    /// subsystem listed.
    pub controllers: Vec<(String, u64)>,
    /// Every poll group.
    pub groups: Vec<GroupSample>,
    /// Every RDMA device.
    pub devices: Vec<DeviceSample>,
    /// Refused connections by reason, every reason listed.
    pub refusals: Vec<(Refusal, u64)>,
    /// Time since the target started (the SMART log's Power On Hours count from it).
    pub uptime: Duration,
}

/// Reads a device's counters (a closure over the provider's device).
pub type DeviceCounterFn = Box<dyn Fn() -> Vec<(&'static str, u64)> + Send + Sync>;

/// One poll group as the endpoint reaches it.
pub struct GroupSource {
    /// Its index over every listen address.
    pub index: usize,
    /// The listen address whose device it polls.
    pub traddr: IpAddr,
    /// Its command channel.
    pub cmds: Sender<GroupCmd>,
    /// Its own counters.
    pub counters: Arc<PollGroupCounters>,
}

/// Where a scrape reads from: the target's registry (with its refusal counters),
/// poll groups and devices.
pub struct Sources {
    /// Subsystems, namespaces and controllers.
    pub reg: Arc<Registry>,
    /// Every poll group.
    pub groups: Vec<GroupSource>,
    /// Every RDMA device with its counters.
    pub devices: Vec<(IpAddr, DeviceCounterFn)>,
}

impl Sources {
    /// Reads every source now: asks every poll group for its copy (all at once, then
    /// waits up to [`GROUP_REPLY_WAIT`] for each).
    pub fn snapshot(&self) -> Snapshot {
        let asked: Vec<_> = self
            .groups
            .iter()
            .map(|g| {
                let (tx, rx) = channel::bounded(1);
                g.cmds.send(GroupCmd::Metrics(tx)).ok().map(|()| rx)
            })
            .collect();
        let groups: Vec<GroupSample> = self
            .groups
            .iter()
            .zip(asked)
            .map(|(g, rx)| GroupSample {
                index: g.index,
                traddr: g.traddr,
                state: rx.and_then(|rx| rx.recv_timeout(GROUP_REPLY_WAIT).ok()),
                counters: PollGroupValues::read(&g.counters),
            })
            .collect();
        let mut namespaces = Vec::new();
        for s in self.reg.subsystems().iter() {
            for ns in s.namespaces().iter() {
                let mut lat = latency::ReadWrite::default();
                for g in groups.iter().filter_map(|g| g.state.as_ref()) {
                    if let Some(h) = g.latency.get(ns.file_index as usize) {
                        lat[latency::READ].merge(&h[latency::READ]);
                        lat[latency::WRITE].merge(&h[latency::WRITE]);
                    }
                }
                namespaces.push(NamespaceSample {
                    subnqn: s.nqn.clone(),
                    nsid: ns.nsid,
                    io: ns.stats.totals(),
                    latency: lat,
                });
            }
        }
        let live = self.reg.controllers();
        let controllers = self
            .reg
            .subsystems()
            .iter()
            .chain(std::iter::once(&self.reg.discovery))
            .map(|s| {
                let n = live.iter().filter(|c| Arc::ptr_eq(&c.subsys, s)).count();
                (s.nqn.clone(), n as u64)
            })
            .collect();
        Snapshot {
            namespaces,
            controllers,
            groups,
            devices: self
                .devices
                .iter()
                .map(|(ip, read)| DeviceSample {
                    traddr: *ip,
                    counters: read(),
                })
                .collect(),
            refusals: self.reg.refusals.read(),
            uptime: self.reg.started.elapsed(),
        }
    }
}
