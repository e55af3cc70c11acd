//! A [`Snapshot`] in the Prometheus text format (version 0.0.4), written by
//! `prometheus-client` (a [`Collector`] of constant metrics: the values were read
//! already). Every name starts with `nvmf_target_`; counters end in `_total`, units are
//! in the names (`_bytes`, `_seconds`).
use std::fmt;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;
use transport::rc::QpCounters;

use super::latency::{READ, WRITE};
use super::{PollGroupValues, Snapshot};

/// The `Content-Type` of what [`encode`] writes.
pub const CONTENT_TYPE: &str = prometheus_client::encoding::prometheus_text::CONTENT_TYPE;

/// A metric's labels: name and value.
type Labels = Vec<(&'static str, String)>;

/// An exported counter: its name, its help and how to read it from `T`.
type Exported<T> = (&'static str, &'static str, fn(&T) -> u64);

/// The transport counters of a poll group's QPs that are exported, each as
/// `nvmf_target_rdma_NAME_total` with rxe's name (Linux `rxe_hw_counters.c`), the
/// ECN/CNP counters with mlx5's names, or, for the five that neither has, the RC
/// core's.
const QP_COUNTERS: [Exported<QpCounters>; 23] = [
    ("sent_pkts", "RoCEv2 packets the QPs sent (requests, responses, ACKs)", |c| c.sent_pkts),
    ("rcvd_pkts", "RoCEv2 packets the QPs accepted", |c| c.rcvd_pkts),
    ("duplicate_request", "Responder: duplicate requests (re-ACKed or answered again, never executed twice)", |c| c.duplicate_request),
    ("out_of_seq_request", "Responder: requests ahead of the expected PSN (a sequence NAK per gap)", |c| c.out_of_seq_request),
    ("rcvd_seq_err", "Requester: PSN sequence error NAKs received", |c| c.rcvd_seq_err),
    ("rcvd_rnr_err", "Requester: RNR NAKs received", |c| c.rcvd_rnr_err),
    ("send_rnr_err", "Responder: RNR NAKs sent (no receive buffer: the SRQ was empty)", |c| c.send_rnr_err),
    ("completer_retry_err", "Requester: retransmissions started (go-back-N: a timer, a sequence NAK, a missing READ response)", |c| c.completer_retry_err),
    ("retry_exceeded_err", "Requester: work requests failed with retries exhausted (IBV_WC_RETRY_EXC_ERR)", |c| c.retry_exceeded_err),
    ("retry_rnr_exceeded_err", "Requester: work requests failed with RNR retries exhausted", |c| c.retry_rnr_exceeded_err),
    ("send_err", "Requester: work requests completed with an error other than flush", |c| c.send_err),
    ("local_ack_timeout_err", "Requester: IBTA local ACK timer expiries", |c| c.local_ack_timeout_err),
    ("rdma_sends", "Requester: RDMA WRITE and READ request packets sent", |c| c.rdma_sends),
    ("rdma_recvs", "Responder: RDMA WRITE and READ request packets executed", |c| c.rdma_recvs),
    ("ack_deferred", "Responder: ACKs merged into a later one", |c| c.ack_deferred),
    ("rto_timeouts", "Requester: adaptive retransmission timer expiries (not an rxe counter)", |c| c.rto_timeouts),
    ("rto_probes", "Requester: tail loss probes, the last packet resent alone at a timer expiry (not an rxe counter)", |c| c.rto_probes),
    ("spurious_rto", "Requester: timer expiries found spurious, the peer had stalled (not an rxe counter)", |c| c.spurious_rto),
    ("sr_retransmits", "Requester: packets resent alone after a selective NAK (not an rxe counter)", |c| c.sr_retransmits),
    ("np_ecn_marked_roce_packets", "Notification point: CE-marked RoCEv2 packets received", |c| c.np_ecn_marked_roce_packets),
    ("np_cnp_sent", "Notification point: CNPs sent (at most one per QP per interval)", |c| c.np_cnp_sent),
    ("rp_cnp_handled", "Reaction point: CNPs the DCQCN rate control acted on", |c| c.rp_cnp_handled),
    ("rp_cnp_ignored", "Reaction point: CNPs received without rate control to act on them", |c| c.rp_cnp_ignored),
];

/// The poll group counters that are exported, as `nvmf_target_poll_group_NAME_total`.
const GROUP_COUNTERS: [Exported<PollGroupValues>; 8] = [
    ("capsules_received", "Command capsules received", |c| {
        c.capsules
    }),
    (
        "error_completions",
        "Commands answered with an error status",
        |c| c.error_completions,
    ),
    (
        "sq_overflows",
        "Capsules dropped: their queue had twice its SQ size outstanding",
        |c| c.sq_overflows,
    ),
    (
        "buffer_waits",
        "Commands that waited for a data buffer",
        |c| c.buffer_waits,
    ),
    (
        "send_credit_waits",
        "Responses that waited for room in their QP's send queue",
        |c| c.send_credit_waits,
    ),
    (
        "read_credit_waits",
        "RDMA READs that waited for a READ credit (the queue's ORD)",
        |c| c.read_credit_waits,
    ),
    (
        "srq_limit_events",
        "SRQ limit events: nearly every receive buffer held by commands in flight",
        |c| c.srq_limit_events,
    ),
    (
        "sleeps",
        "Times the poll group was idle and slept on its completion queue",
        |c| c.sleeps,
    ),
];

/// Writes `s` in the Prometheus text format.
pub fn encode(s: Snapshot) -> String {
    let mut registry = Registry::default();
    registry.register_collector(Box::new(Constant(s)));
    let mut out = String::new();
    // Writing into a String does not fail.
    let _ = prometheus_client::encoding::prometheus_text::encode(&mut out, &registry);
    out
}

#[derive(Debug)]
struct Constant(Snapshot);

impl Collector for Constant {
    fn encode(&self, mut e: DescriptorEncoder) -> Result<(), fmt::Error> {
        write_all(&self.0, &mut e)
    }
}

fn counters(
    e: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    rows: impl IntoIterator<Item = (Labels, u64)>,
) -> fmt::Result {
    let mut m = e.encode_descriptor(name, help, None, MetricType::Counter)?;
    for (labels, v) in rows {
        ConstCounter::new(v).encode(m.encode_family(&labels)?)?;
    }
    Ok(())
}

fn gauges(
    e: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    rows: impl IntoIterator<Item = (Labels, i64)>,
) -> fmt::Result {
    let mut m = e.encode_descriptor(name, help, None, MetricType::Gauge)?;
    for (labels, v) in rows {
        ConstGauge::new(v).encode(m.encode_family(&labels)?)?;
    }
    Ok(())
}

fn gauge_i64(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

fn write_all(s: &Snapshot, e: &mut DescriptorEncoder) -> fmt::Result {
    let ns_labels = |subnqn: &str, nsid: u32, op: &str| -> Labels {
        vec![
            ("subnqn", subnqn.to_string()),
            ("nsid", nsid.to_string()),
            ("op", op.to_string()),
        ]
    };
    counters(
        e,
        "nvmf_target_io_commands",
        "Read (and Compare) and write commands completed successfully, per namespace (the SMART log's Host Read/Write Commands)",
        s.namespaces.iter().flat_map(|n| {
            [
                (ns_labels(&n.subnqn, n.nsid, "read"), n.io.read_commands),
                (ns_labels(&n.subnqn, n.nsid, "write"), n.io.write_commands),
            ]
        }),
    )?;
    counters(
        e,
        "nvmf_target_io_bytes",
        "Bytes of the read (and Compare) and write commands completed successfully, per namespace (the SMART log's Data Units Read/Written count them in units of 512000)",
        s.namespaces.iter().flat_map(|n| {
            [
                (ns_labels(&n.subnqn, n.nsid, "read"), n.io.read_bytes),
                (ns_labels(&n.subnqn, n.nsid, "write"), n.io.write_bytes),
            ]
        }),
    )?;
    {
        let mut m = e.encode_descriptor(
            "nvmf_target_io_latency_seconds",
            "Time from a command capsule's arrival to its status (data read from, or written to, the namespace), per namespace; the response is sent at once unless the QP's send queue is full (nvmf_target_poll_group_send_credit_waits_total)",
            None,
            MetricType::Histogram,
        )?;
        for n in &s.namespaces {
            for (op, i) in [("read", READ), ("write", WRITE)] {
                let h = &n.latency[i];
                let labels = ns_labels(&n.subnqn, n.nsid, op);
                m.encode_family(&labels)?.encode_histogram::<Labels>(
                    h.sum_ns as f64 / 1e9,
                    h.count,
                    &h.buckets_seconds(),
                    None,
                )?;
            }
        }
    }
    gauges(
        e,
        "nvmf_target_controllers",
        "Controllers connected (their admin queue is up), per subsystem",
        s.controllers
            .iter()
            .map(|(nqn, n)| (vec![("subnqn", nqn.clone())], gauge_i64(*n))),
    )?;
    let group_labels = |index: usize, traddr: std::net::IpAddr| -> Labels {
        vec![
            ("poll_group", index.to_string()),
            ("traddr", traddr.to_string()),
        ]
    };
    gauges(
        e,
        "nvmf_target_queues",
        "Queues connected (RDMA CM connections), per poll group and type (admin, io)",
        s.groups
            .iter()
            .filter_map(|g| g.state.as_ref().map(|st| (g, st)))
            .flat_map(|(g, st)| {
                let mut a = group_labels(g.index, g.traddr);
                let mut io = a.clone();
                a.push(("type", "admin".to_string()));
                io.push(("type", "io".to_string()));
                [
                    (a, gauge_i64(st.admin_queues)),
                    (io, gauge_i64(st.io_queues)),
                ]
            }),
    )?;
    counters(
        e,
        "nvmf_target_refused_connects",
        "Connections refused, by layer (fabrics: the Fabrics Connect command; rdma_cm: the RDMA CM request) and reason",
        s.refusals.iter().map(|(r, n)| {
            (
                vec![
                    ("layer", r.layer().to_string()),
                    ("reason", r.reason().to_string()),
                ],
                *n,
            )
        }),
    )?;
    for (name, help, get) in GROUP_COUNTERS {
        counters(
            e,
            &format!("nvmf_target_poll_group_{name}"),
            help,
            s.groups
                .iter()
                .map(|g| (group_labels(g.index, g.traddr), get(&g.counters))),
        )?;
    }
    for (name, help, get) in QP_COUNTERS {
        counters(
            e,
            &format!("nvmf_target_rdma_{name}"),
            &format!("{help}, over the poll group's QPs (those gone included)"),
            s.groups.iter().filter_map(|g| {
                let qp = g.state.as_ref()?.qp.as_ref()?;
                Some((group_labels(g.index, g.traddr), get(qp)))
            }),
        )?;
    }
    let mut names: Vec<&'static str> = Vec::new();
    for d in &s.devices {
        for (n, _) in &d.counters {
            if !names.contains(n) {
                names.push(n);
            }
        }
    }
    for name in names {
        counters(
            e,
            &format!("nvmf_target_rdma_device_{name}"),
            &format!("The RDMA device's {name} counter (per listen address)"),
            s.devices.iter().filter_map(|d| {
                let v = d.counters.iter().find(|(n, _)| *n == name)?.1;
                Some((vec![("traddr", d.traddr.to_string())], v))
            }),
        )?;
    }
    let up = e.encode_descriptor(
        "nvmf_target_uptime_seconds",
        "Time since the target started (the SMART log's Power On Hours count from it)",
        None,
        MetricType::Gauge,
    )?;
    ConstGauge::new(s.uptime.as_secs_f64()).encode(up)?;
    Ok(())
}
