//! One N-to-1 incast over real UDP sockets (soft provider, loopback): N sender QPs on
//! one device RDMA WRITE to N QPs of a receiver device whose receive path runs a
//! rate-limited, RED-marking, tail-dropping queue (`FaultConfig::queue`, the switch
//! port in front of the receiver), with DCQCN on or off at both ends. Shared by the
//! `incast` example (the measurement) and `tests/incast_socket.rs` (that it delivers
//! every byte).
use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use transport::rc::cc::{CongestionConfig, DcqcnParams, ReactionPoint};
use transport::soft::{
    Context, Cq, DeviceConfig, FaultConfig, Mr, Qp, QpInitAttr, RxQueueConfig, SoftDevice,
};
use transport::verbs::*;

/// One run's parameters.
#[derive(Clone, Copy, Debug)]
pub struct IncastCfg {
    pub flows: usize,
    /// Bytes each flow writes (a multiple of `msg_len`).
    pub bytes_per_flow: usize,
    /// Bytes per RDMA WRITE.
    pub msg_len: u32,
    /// WRITEs outstanding per flow.
    pub depth: u32,
    /// DCQCN at the senders and CNPs from the receiver; off: neither.
    pub dcqcn: bool,
    /// The receive queue (its rate is the senders' DCQCN line rate too).
    pub queue: RxQueueConfig,
    pub ip_rx: IpAddr,
    pub ip_tx: IpAddr,
    pub seed: u64,
    /// Give up after this long.
    pub timeout: Duration,
}

/// What one run measured.
#[derive(Clone, Debug, Default)]
pub struct IncastResult {
    pub elapsed: Duration,
    /// Payload bytes over the elapsed time, Mbit/s.
    pub goodput_mbps: f64,
    /// WRITE latency (post to completion), us.
    pub p50_us: f64,
    pub p99_us: f64,
    /// Datagrams the queue dropped at its tail.
    pub queue_drops: u64,
    /// Datagrams the queue CE-marked.
    pub marks: u64,
    /// The queue's deepest backlog, bytes.
    pub max_depth_bytes: u64,
    /// The mean backlog an arriving datagram found, bytes.
    pub mean_depth_bytes: f64,
    /// Request packets the senders sent beyond one per packet of data (RC resends).
    pub resent_pkts: u64,
    pub cnps_sent: u64,
    pub cnps_handled: u64,
    /// Every byte arrived as written.
    pub intact: bool,
}

const ACCESS: AccessFlags = AccessFlags::LOCAL_WRITE
    .union(AccessFlags::REMOTE_READ)
    .union(AccessFlags::REMOTE_WRITE);

fn pattern(f: usize, i: usize) -> u8 {
    (i as u8)
        .wrapping_mul(31)
        .wrapping_add(f as u8 * 17)
        .wrapping_add((i >> 10) as u8)
}

fn bring_up(ctx: &mut Context, qp: Qp, mtu: Mtu, peer: IpAddr, peer_qpn: u32, sq: u32, rq: u32) {
    let steps = [
        QpAttr {
            qp_state: Some(QpState::Init),
            qp_access_flags: Some(ACCESS),
            ..Default::default()
        },
        QpAttr {
            qp_state: Some(QpState::Rtr),
            path_mtu: Some(mtu),
            dest_qp_num: Some(peer_qpn),
            rq_psn: Some(rq),
            max_dest_rd_atomic: Some(8),
            min_rnr_timer: Some(1),
            ah_attr: Some(AhAttr {
                dest: peer,
                flow_label: 0,
                hop_limit: 64,
                traffic_class: 0,
            }),
            ..Default::default()
        },
        QpAttr {
            qp_state: Some(QpState::Rts),
            sq_psn: Some(sq),
            timeout: Some(14),
            retry_cnt: Some(7),
            rnr_retry: Some(7),
            max_rd_atomic: Some(8),
            ..Default::default()
        },
    ];
    for a in &steps {
        ctx.modify_qp(qp, a).expect("modify QP");
    }
}

struct End {
    dev: Arc<SoftDevice>,
    ctx: Context,
    cq: Cq,
}

fn open(ip: IpAddr, faults: Option<FaultConfig>, cc: CongestionConfig, window: u64) -> End {
    let mut cfg = DeviceConfig::new(ip);
    cfg.roce_mtu = Some(Mtu::Mtu1024);
    cfg.faults = faults;
    let dev = SoftDevice::open(cfg).expect("open the soft device");
    let mut ctx = dev.open_context(0).expect("open a context");
    let mut rc = dev.rc_config();
    rc.cc = cc;
    rc.max_inflight_bytes = window;
    ctx.set_rc_config(rc);
    let cq = ctx.create_cq(4096);
    End { dev, ctx, cq }
}

/// Runs one incast. Errors name what did not complete.
pub fn run(c: &IncastCfg) -> Result<IncastResult, String> {
    let cc = if c.dcqcn {
        CongestionConfig {
            rp: ReactionPoint::Dcqcn(DcqcnParams {
                line_rate_mbps: c.queue.rate_mbps,
                ..DcqcnParams::default()
            }),
            ..CongestionConfig::default()
        }
    } else {
        CongestionConfig::OFF
    };
    let faults = FaultConfig {
        queue: Some(c.queue),
        ..FaultConfig::with_seed(c.seed)
    };
    let window = u64::from(c.msg_len) * u64::from(c.depth);
    let mut rx = open(c.ip_rx, Some(faults), cc, window);
    let mut tx = open(c.ip_tx, None, cc, window);
    let msgs = c.bytes_per_flow / c.msg_len as usize;
    let per_flow = msgs * c.msg_len as usize;
    let dst: Mr = rx
        .dev
        .reg_mr(rx.dev.alloc_pd(), per_flow * c.flows, ACCESS)
        .map_err(|e| format!("receiver MR: {e}"))?;
    let (m1, m2) = (rx.dev.path_mtu(), tx.dev.path_mtu());
    let mtu = if m1.bytes() <= m2.bytes() { m1 } else { m2 };
    let mut qps = vec![];
    let mut srcs = vec![];
    let (psn_tx, psn_rx) = (0x10_0000, 0x20_0000);
    for f in 0..c.flows {
        let pd_t = tx.dev.alloc_pd();
        let qt = tx
            .ctx
            .create_qp(&QpInitAttr {
                pd: pd_t,
                send_cq: tx.cq,
                recv_cq: tx.cq,
                srq: None,
                cap: QpCap::default(),
                qp_type: QpType::Rc,
            })
            .map_err(|e| format!("sender QP: {e}"))?;
        let pd_r = dst.pd;
        let qr = rx
            .ctx
            .create_qp(&QpInitAttr {
                pd: pd_r,
                send_cq: rx.cq,
                recv_cq: rx.cq,
                srq: None,
                cap: QpCap::default(),
                qp_type: QpType::Rc,
            })
            .map_err(|e| format!("receiver QP: {e}"))?;
        bring_up(&mut tx.ctx, qt, mtu, c.ip_rx, qr.qpn(), psn_tx, psn_rx);
        bring_up(&mut rx.ctx, qr, mtu, c.ip_tx, qt.qpn(), psn_rx, psn_tx);
        let src = tx
            .dev
            .reg_mr(pd_t, per_flow, ACCESS)
            .map_err(|e| format!("sender MR: {e}"))?;
        let data: Vec<u8> = (0..per_flow).map(|i| pattern(f, i)).collect();
        src.write(0, &data);
        qps.push((qt, qr));
        srcs.push(src);
    }
    let mut posted = vec![0usize; c.flows];
    let mut done = vec![0usize; c.flows];
    let mut post_times: Vec<Vec<Instant>> = vec![Vec::with_capacity(msgs); c.flows];
    let mut lat_us = Vec::with_capacity(msgs * c.flows);
    let flow_of = |qpn: u32| qps.iter().position(|(t, _)| t.qpn() == qpn);
    let mut wcs = [WorkCompletion::new(0, WcStatus::Success, WcOpcode::Send, 0); 64];
    let start = Instant::now();
    while done.iter().any(|&d| d < msgs) {
        if start.elapsed() > c.timeout {
            return Err(format!(
                "timed out after {:?}: {done:?} of {msgs} WRITEs per flow done",
                c.timeout
            ));
        }
        for f in 0..c.flows {
            while posted[f] < msgs && posted[f] - done[f] < c.depth as usize {
                let off = posted[f] * c.msg_len as usize;
                let wr = SendWr {
                    wr_id: posted[f] as u64,
                    op: SendOp::RdmaWrite {
                        remote_addr: dst.addr() + (f * per_flow + off) as u64,
                        rkey: dst.rkey(),
                    },
                    sg_list: SgList::one(Sge {
                        addr: srcs[f].addr() + off as u64,
                        length: c.msg_len,
                        lkey: srcs[f].lkey(),
                    }),
                    flags: SendFlags::SIGNALED,
                };
                tx.ctx
                    .post_send(qps[f].0, &wr)
                    .map_err(|e| format!("post_send: {e}"))?;
                post_times[f].push(Instant::now());
                posted[f] += 1;
            }
        }
        tx.ctx.progress();
        rx.ctx.progress();
        let n = tx.ctx.poll_cq(tx.cq, &mut wcs);
        let now = Instant::now();
        for wc in &wcs[..n] {
            let f = flow_of(wc.qp_num).ok_or("a completion of an unknown QP")?;
            if wc.status != WcStatus::Success || wc.wr_id as usize != done[f] {
                return Err(format!("flow {f}: completion {wc:?}"));
            }
            lat_us.push(now.duration_since(post_times[f][done[f]]).as_secs_f64() * 1e6);
            done[f] += 1;
        }
        let k = rx.ctx.poll_cq(rx.cq, &mut wcs);
        if k > 0 {
            return Err(format!("receiver completions: {:?}", &wcs[..k]));
        }
    }
    let elapsed = start.elapsed();
    let mut intact = true;
    let mut got = vec![0u8; per_flow];
    for f in 0..c.flows {
        dst.read(f * per_flow, &mut got);
        intact &= got.iter().enumerate().all(|(i, &b)| b == pattern(f, i));
    }
    lat_us.sort_by(f64::total_cmp);
    let pct = |p: f64| lat_us[((lat_us.len() - 1) as f64 * p).round() as usize];
    let pkts_per_msg = c.msg_len.div_ceil(mtu.bytes()) as u64;
    let (mut resent, mut handled, mut cnps) = (0, 0, 0);
    for (qt, qr) in &qps {
        let t = tx.ctx.qp_counters(*qt).ok_or("sender QP counters")?;
        resent += t.sent_pkts.saturating_sub(msgs as u64 * pkts_per_msg);
        handled += t.rp_cnp_handled;
        cnps += rx
            .ctx
            .qp_counters(*qr)
            .ok_or("receiver QP counters")?
            .np_cnp_sent;
    }
    let q = rx.dev.counters().injected.snapshot();
    Ok(IncastResult {
        elapsed,
        goodput_mbps: (per_flow * c.flows) as f64 * 8.0 / elapsed.as_secs_f64() / 1e6,
        p50_us: pct(0.5),
        p99_us: pct(0.99),
        queue_drops: q.queue_dropped,
        marks: q.ce_marked,
        max_depth_bytes: q.queue_max_depth_bytes,
        mean_depth_bytes: q.queue_depth_sum_bytes as f64 / q.queue_enqueued.max(1) as f64,
        resent_pkts: resent,
        cnps_sent: cnps,
        cnps_handled: handled,
        intact,
    })
}
