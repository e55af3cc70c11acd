//! The test itself, over any provider: resources, perftest's out-of-band sequence
//! ([`TestKind::setup_plan`]), the QPs brought to RTS from the peer's records, and the
//! data phase of each test as perftest runs it (the server of `write_bw`, `read_bw` and
//! `read_lat` is passive; `send_*` receivers post receives; `write_lat` polls the last
//! byte of the buffer for the iteration count).
use std::io;
use std::sync::Arc;
use std::time::{Duration, Instant};

use transport::verbs::provider::{Context, Device, MemoryRegion, Provider};
use transport::verbs::{
    AccessFlags, AhAttr, Mtu, Pd, Qp, QpAttr, QpCap, QpInitAttr, QpState, QpType, RecvWr, SgList,
    Sge, UdDest, WcOpcode, WcStatus, WorkCompletion, GRH_LEN,
};

use super::kind::{Step, TestKind, Verb};
use super::oob::{self, BwReport, QpRecord};
use super::phase::{bw_client, passive, read_lat, send_bw_server, send_lat, write_lat};
use super::session::Session;
use super::stats;

/// What to run (perftest's options).
#[derive(Clone, Debug)]
pub struct Options {
    /// The test.
    pub kind: TestKind,
    /// Message size, bytes (`-s`).
    pub size: u64,
    /// Iterations (`-n`).
    pub iters: u64,
    /// Run for this many seconds instead of `iters` (`-D`, BW tests).
    pub duration: Option<u64>,
    /// QPs (`-q`, BW tests).
    pub qps: u32,
    /// Every size from 2 to 2^23 (`-a`).
    pub all_sizes: bool,
    /// Report Gb/sec (`--report_gbits`).
    pub gbits: bool,
    /// Send queue depth (`-t`).
    pub tx_depth: u32,
    /// Receive queue depth of SEND tests (`-r`).
    pub rx_depth: u32,
    /// Signal every this many sends (`-Q`, BW tests).
    pub cq_mod: u32,
    /// The connection type (`-c RC|UC|UD`; see [`connection_type`]).
    pub conn: QpType,
}

/// perftest's Q_Key of UD tests (`DEF_QKEY`).
pub const DEF_QKEY: u32 = 0x1111_1111;

/// Parses perftest's `-c` for `kind`: `RC`, `UC` (not with RDMA READ) or `UD` (SEND
/// tests only).
///
/// # Errors
/// perftest's messages (`change_conn_type` of perftest 4.5): " UC connection not
/// possible in READ/ATOMIC verbs", " UD connection only possible in SEND verb",
/// " Invalid Connection type . please choose from {RC,UC,UD}".
pub fn connection_type(arg: &str, kind: TestKind) -> Result<QpType, String> {
    match arg.get(..2) {
        Some("RC") => Ok(QpType::Rc),
        Some("UC") if kind.verb() == Verb::Read => {
            Err(" UC connection not possible in READ/ATOMIC verbs".into())
        }
        Some("UC") => Ok(QpType::Uc),
        Some("UD") if kind.verb() != Verb::Send => {
            Err(" UD connection only possible in SEND verb".into())
        }
        Some("UD") => Ok(QpType::Ud),
        _ => Err(" Invalid Connection type . please choose from {RC,UC,UD}".into()),
    }
}

/// The provider's counters after the run, where it keeps them (the soft provider: per
/// QP and per device; the verbs provider: none, the kernel's sysfs `hw_counters` have
/// them).
#[derive(Clone, Debug, Default)]
pub struct Counters {
    /// Per QP: its number and `QpCounters` (packets, retransmissions, NAKs).
    pub qps: Vec<(u32, transport::rc::QpCounters)>,
    /// The device's counters by name.
    pub device: Vec<(&'static str, u64)>,
}

/// Why a test failed.
#[derive(Debug, thiserror::Error)]
pub enum PerfError {
    /// The out-of-band connection failed.
    #[error("out-of-band connection (TCP): {0}")]
    Oob(#[from] io::Error),
    /// The peer's messages did not decode.
    #[error(transparent)]
    Message(#[from] oob::OobError),
    /// A verbs call failed.
    #[error("{what}: {err}")]
    Verbs {
        /// The call.
        what: &'static str,
        /// Its error (boxed: it may carry a message).
        err: Box<transport::verbs::VerbsError>,
    },
    /// A work completion with an error status.
    #[error("work completion error {status:?} ({opcode:?}, wr_id {wr_id}): check that the peer runs the same test with the same -s and -q, and that RoCE traffic (UDP 4791) reaches it")]
    Completion {
        /// Its status.
        status: WcStatus,
        /// Its opcode.
        opcode: WcOpcode,
        /// Its wr_id.
        wr_id: u64,
    },
    /// Nothing happened for too long.
    #[error("no progress for {0:?}: the peer stopped answering (is UDP 4791 open between the two GIDs?)")]
    Stalled(Duration),
}

pub(super) fn verbs(what: &'static str) -> impl FnOnce(transport::verbs::VerbsError) -> PerfError {
    move |err| PerfError::Verbs {
        what,
        err: Box::new(err),
    }
}

/// How long a data phase may go without a completion.
pub(super) const STALL: Duration = Duration::from_secs(30);
/// The largest size of `-a` (perftest: 2^23).
pub const MAX_SIZE: u64 = 1 << 23;

/// The sizes to run: `-a` gives 2, 4, .. 2^23; otherwise `-s`.
pub fn sizes(o: &Options) -> Vec<u64> {
    if o.all_sizes {
        (1..24).map(|i| 1u64 << i).collect()
    } else {
        vec![o.size]
    }
}

/// [`sizes`] of a run at path MTU `mtu`: UD messages are at most one MTU (perftest
/// clamps `-s` to it and ends `-a` there).
pub fn sizes_at(o: &Options, mtu: Mtu) -> Vec<u64> {
    let v = sizes(o);
    if o.conn != QpType::Ud {
        return v;
    }
    let m = u64::from(mtu.bytes());
    if o.all_sizes {
        v.into_iter().filter(|&s| s <= m).collect()
    } else {
        v.into_iter().map(|s| s.min(m)).collect()
    }
}

/// What a run printed, for tests and the caller's exit status.
#[derive(Clone, Debug, Default)]
pub struct Outcome {
    /// The bandwidth rows printed (this side's, or the client's on a passive server).
    pub bw: Vec<BwReport>,
    /// The latency rows printed.
    pub lat: Vec<stats::LatReport>,
    /// The provider's counters at the end.
    pub counters: Counters,
}

/// The test's resources on this side.
pub(super) struct Res<P: Provider> {
    pub(super) ctx: P::Context,
    pub(super) mr: P::Mr,
    pub(super) qps: Vec<Qp>,
    pub(super) cq: transport::verbs::Cq,
    /// Bytes of one half-slot (`max(size, 4096)`); QP `i` sends from slot `i` and is
    /// written/read by the peer at slot `qps + i` (perftest's layout).
    pub(super) slot: u64,
    pub(super) my: Vec<QpRecord>,
    pub(super) rem: Vec<QpRecord>,
    pub(super) mtu: Mtu,
    /// The connection type.
    pub(super) conn: QpType,
    /// UD: per QP, where its sends go (the peer QP's address handle, QPN, Q_Key).
    pub(super) ud: Vec<UdDest>,
}

impl<P: Provider> Res<P> {
    pub(super) fn local(&self, qp: usize) -> u64 {
        self.mr.addr() + self.slot * qp as u64
    }
    pub(super) fn remote_slot_off(&self, qp: usize) -> usize {
        (self.slot * (self.qps.len() + qp) as u64) as usize
    }
    pub(super) fn poll(&mut self, wcs: &mut [WorkCompletion]) -> Result<usize, PerfError> {
        let n = self.ctx.poll_cq(self.cq, wcs);
        for wc in &wcs[..n] {
            if wc.status != WcStatus::Success {
                return Err(PerfError::Completion {
                    status: wc.status,
                    opcode: wc.opcode,
                    wr_id: wc.wr_id,
                });
            }
        }
        Ok(n)
    }
}

fn random_psn() -> u32 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0),
    );
    (h.finish() as u32) & 0xFF_FFFF
}

pub(super) fn now_ns(t0: Instant) -> u64 {
    t0.elapsed().as_nanos() as u64
}

/// Runs `o` on `dev` over the out-of-band `session` (the server side when it is not
/// the client), printing perftest's lines to `out`.
///
/// # Errors
/// [`PerfError`]: the out-of-band exchange, a verbs call, a completion error, a stall.
pub fn run<P: Provider>(
    dev: &Arc<P::Device>,
    mut session: Session,
    o: &Options,
    out: &mut dyn FnMut(&str),
) -> Result<Outcome, PerfError> {
    let client = session.is_client();
    let kind = o.kind;
    // Version, system data, MTU (`exchange_versions`, `check_sys_data`, `check_mtu`).
    let mut rv = [0u8; oob::VERSION_LEN];
    session.xchg(&oob::encode_version(), &mut rv)?;
    oob::decode_version(&rv)?;
    let mut r4 = [0u8; 4];
    session.xchg(&oob::CYCLE_BUFFER.to_be_bytes(), &mut r4)?;
    session.xchg(&oob::CACHE_LINE.to_be_bytes(), &mut r4)?;
    let my_mtu = dev.path_mtu();
    let mut rm = [0u8; oob::MTU_LEN];
    session.xchg(&oob::encode_mtu(my_mtu.code()), &mut rm)?;
    let rem_mtu = oob::decode_mtu(&rm)?;
    let mtu = Mtu::from_code(rem_mtu.min(my_mtu.code())).unwrap_or(my_mtu);
    let conn = o.conn;
    if conn == QpType::Ud && !o.all_sizes && o.size > u64::from(mtu.bytes()) {
        out(&format!(" Max msg size in UD is MTU {}", mtu.bytes()));
        out(" Changing to this MTU");
    }
    let run_sizes = sizes_at(o, mtu);

    let max_size = run_sizes.iter().copied().max().unwrap_or(o.size);
    // UD receive buffers hold the 40-byte GRH area in front of the message.
    let grh = if conn == QpType::Ud {
        GRH_LEN as u64
    } else {
        0
    };
    let qps = if kind.is_bw() { o.qps.max(1) } else { 1 } as usize;
    let slot = (max_size + grh)
        .max(oob::CYCLE_BUFFER as u64)
        .next_multiple_of(4096);
    let caps = dev.caps();
    let pd: Pd = dev.alloc_pd().map_err(verbs("ibv_alloc_pd"))?;
    let access = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ;
    let mr = dev
        .reg_mr(pd, (slot * 2 * qps as u64) as usize, access)
        .map_err(verbs("ibv_reg_mr"))?;
    let mut ctx = dev.open_context(0).map_err(verbs("open poll group"))?;
    let tx = o.tx_depth.clamp(1, caps.max_qp_wr);
    let rx = o.rx_depth.clamp(1, caps.max_qp_wr);
    let cq = ctx
        .create_cq(((tx + rx) * qps as u32).min(caps.max_cqe))
        .map_err(verbs("ibv_create_cq"))?;
    let out_reads = if kind.verb() == Verb::Read {
        caps.max_qp_rd_atom.clamp(1, 128) as u16
    } else {
        1
    };
    let mut qp_list = Vec::new();
    let mut my = Vec::new();
    for i in 0..qps {
        let qp = ctx
            .create_qp(&QpInitAttr {
                pd,
                send_cq: cq,
                recv_cq: cq,
                srq: None,
                cap: QpCap {
                    max_send_wr: tx,
                    max_recv_wr: rx,
                    max_send_sge: 1,
                    max_recv_sge: 1,
                    max_inline_data: 0,
                },
                qp_type: conn,
            })
            .map_err(verbs("ibv_create_qp"))?;
        // perftest's `ctx_modify_qp_to_init`: UD takes its Q_Key, UC no remote read.
        let init = match conn {
            QpType::Ud => QpAttr {
                qp_state: Some(QpState::Init),
                qkey: Some(DEF_QKEY),
                ..Default::default()
            },
            QpType::Uc => QpAttr {
                qp_state: Some(QpState::Init),
                qp_access_flags: Some(AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE),
                ..Default::default()
            },
            QpType::Rc => QpAttr {
                qp_state: Some(QpState::Init),
                qp_access_flags: Some(access),
                ..Default::default()
            },
        };
        ctx.modify_qp(qp, &init)
            .map_err(verbs("ibv_modify_qp(INIT)"))?;
        qp_list.push(qp);
        my.push(QpRecord {
            lid: 0,
            out_reads,
            qpn: qp.qpn(),
            psn: random_psn(),
            rkey: if kind.verb() == Verb::Send {
                0
            } else {
                mr.rkey()
            },
            vaddr: mr.addr() + slot * (qps + i) as u64,
            gid: QpRecord::gid_of(dev.ip()),
            srqn: 0,
        });
    }
    let mut res: Res<P> = Res {
        ctx,
        mr,
        qps: qp_list,
        cq,
        slot,
        my,
        rem: Vec::new(),
        mtu,
        conn,
        ud: Vec::new(),
    };

    out(stats::RESULT_LINE);
    out(&format!("                    {}", kind.title()));
    out(&format!(
        " Number of qps   : {qps}\t\tTransport type : IB\n Connection type : {}\t\tUsing SRQ      : OFF",
        conn.name()
    ));
    if client {
        out(&format!(" TX depth        : {tx}"));
    }
    if kind.verb() == Verb::Send && (!client || !kind.is_bw()) {
        out(&format!(" RX depth        : {rx}"));
    }
    if kind.is_bw() {
        out(&format!(" CQ Moderation   : {}", o.cq_mod.max(1)));
    }
    out(&format!(" Mtu             : {}[B]", mtu.bytes()));
    out(" Link type       : Ethernet");
    out(&format!(" Provider        : {}", P::NAME));
    out(" Data ex. method : Ethernet");
    out(stats::RESULT_LINE);

    // The setup handshakes of the test's `main`.
    let recv_len = (max_size + grh) as u32;
    for step in kind.setup_plan() {
        match step {
            Step::AllQps => {
                let first = res.rem.is_empty();
                for i in 0..qps {
                    let r = handshake(&mut session, &res.my[i])?;
                    if first {
                        res.rem.push(r);
                    }
                }
            }
            Step::FirstQp => {
                handshake(&mut session, &res.my[0])?;
            }
            Step::Connect => connect::<P>(&mut res, &caps)?,
        }
    }
    let print_addr = |out: &mut dyn FnMut(&str), side: &str, r: &QpRecord| {
        let mut l = format!(
            " {side} address: LID {} QPN {} PSN {}",
            stats::c_alt_hex(r.lid.into(), 4),
            stats::c_alt_hex(r.qpn.into(), 6),
            stats::c_alt_hex(r.psn.into(), 6)
        );
        if kind.verb() == Verb::Read {
            l.push_str(&format!(" OUT {}", stats::c_alt_hex(r.out_reads.into(), 4)));
        }
        if kind.verb() != Verb::Send {
            l.push_str(&format!(
                " RKey {} VAddr {}",
                stats::c_alt_hex(r.rkey.into(), 8),
                stats::c_alt_hex(r.vaddr, 16)
            ));
        }
        out(&l);
        let g: Vec<String> = r.gid.iter().map(|b| format!("{b:02}")).collect();
        out(&format!(" GID: {}", g.join(":")));
    };
    for r in res.my.clone() {
        print_addr(out, "local", &r);
    }
    for r in res.rem.clone() {
        print_addr(out, "remote", &r);
    }
    out(stats::RESULT_LINE);
    out(if kind.is_bw() {
        stats::bw_header(o.gbits)
    } else {
        stats::LAT_HEADER
    });

    let mut outcome = Outcome::default();
    match kind {
        TestKind::write_bw | TestKind::read_bw => {
            if client {
                let mut last = BwReport::default();
                for size in run_sizes.iter().copied() {
                    last = bw_client(&mut res, o, size)?;
                    out(&stats::bw_row(&last, o.gbits));
                    outcome.bw.push(last);
                }
                out(stats::RESULT_LINE);
                handshake(&mut session, &res.my[0])?;
                xchg_reports(&mut session, &last)?;
            } else {
                passive(&mut session, &mut res)?;
                handshake(&mut session, &res.my[0])?;
                let theirs = xchg_reports(&mut session, &BwReport::default())?;
                out(&stats::bw_row(&theirs, o.gbits));
                outcome.bw.push(theirs);
                out(stats::RESULT_LINE);
            }
        }
        TestKind::send_bw => {
            let depth = rx.min(o.iters as u32).max(1);
            for size in run_sizes.iter().copied() {
                if !client {
                    for q in 0..qps {
                        for _ in 0..depth {
                            post_recv(&mut res, q, recv_len)?;
                        }
                    }
                }
                handshake(&mut session, &res.my[0])?;
                let r = if client {
                    bw_client(&mut res, o, size)?
                } else {
                    send_bw_server(&mut res, &mut session, o, size, rx)?
                };
                out(&stats::bw_row(&r, o.gbits));
                outcome.bw.push(r);
                if o.all_sizes {
                    handshake(&mut session, &res.my[0])?;
                }
            }
            out(stats::RESULT_LINE);
        }
        TestKind::write_lat | TestKind::send_lat => {
            for size in run_sizes.iter().copied() {
                let posted = if kind == TestKind::write_lat {
                    write_lat(&mut res, o, size, client)?
                } else {
                    for _ in 0..rx.min(o.iters as u32).max(1) {
                        post_recv(&mut res, 0, recv_len)?;
                    }
                    handshake(&mut session, &res.my[0])?;
                    send_lat(&mut res, o, size, client, recv_len)?
                };
                if let Some(r) = stats::lat_report(size, &posted, true) {
                    out(&stats::lat_row(&r));
                    outcome.lat.push(r);
                }
            }
            out(stats::RESULT_LINE);
        }
        TestKind::read_lat => {
            if client {
                for size in run_sizes.iter().copied() {
                    let posted = read_lat(&mut res, o, size)?;
                    if let Some(r) = stats::lat_report(size, &posted, false) {
                        out(&stats::lat_row(&r));
                        outcome.lat.push(r);
                    }
                }
            } else {
                passive(&mut session, &mut res)?;
            }
            out(stats::RESULT_LINE);
        }
    }
    // `ctx_close_connection`: one more handshake, then "done".
    handshake(&mut session, &res.my[0])?;
    session.close();
    outcome.counters = Counters {
        qps: res
            .qps
            .iter()
            .filter_map(|q| res.ctx.qp_counters(*q).map(|c| (q.qpn(), c)))
            .collect(),
        device: dev.hw_counters(),
    };
    Ok(outcome)
}

fn handshake(s: &mut Session, my: &QpRecord) -> Result<QpRecord, PerfError> {
    let mut m = [0u8; oob::RECORD_LEN];
    s.xchg(&my.encode(), &mut m)?;
    Ok(QpRecord::decode(&m)?)
}

fn xchg_reports(s: &mut Session, mine: &BwReport) -> Result<BwReport, PerfError> {
    let m = mine.encode();
    let mut r = [[0u8; 8]; 5];
    for (a, b) in m.iter().zip(r.iter_mut()) {
        s.xchg(a, b)?;
    }
    Ok(BwReport::decode(&r))
}

/// RTR and RTS toward the peer's records (perftest's `ctx_connect`: timeout 14, retry
/// 7, RNR retry 7, min RNR timer 12; IRD = our outstanding reads, ORD = the peer's).
/// UD: RTR and RTS alone, and an address handle per QP toward the peer's GID.
fn connect<P: Provider>(
    res: &mut Res<P>,
    caps: &transport::verbs::DeviceCaps,
) -> Result<(), PerfError> {
    if res.conn == QpType::Ud {
        return connect_ud(res);
    }
    for i in 0..res.qps.len() {
        let (qp, my, rem) = (res.qps[i], res.my[i], res.rem[i]);
        res.ctx
            .modify_qp(
                qp,
                &QpAttr {
                    qp_state: Some(QpState::Rtr),
                    path_mtu: Some(res.mtu),
                    dest_qp_num: Some(rem.qpn),
                    rq_psn: Some(rem.psn),
                    max_dest_rd_atomic: Some(my.out_reads.min(caps.max_qp_rd_atom as u16) as u8),
                    min_rnr_timer: Some(12),
                    ah_attr: Some(AhAttr {
                        dest: rem.gid_ip(),
                        flow_label: 0,
                        hop_limit: 64,
                        traffic_class: 0,
                    }),
                    ..Default::default()
                },
            )
            .map_err(verbs("ibv_modify_qp(RTR)"))?;
        let ord = u32::from(rem.out_reads).clamp(1, caps.max_qp_init_rd_atom.max(1));
        res.ctx
            .modify_qp(
                qp,
                &QpAttr {
                    qp_state: Some(QpState::Rts),
                    sq_psn: Some(my.psn),
                    timeout: Some(14),
                    retry_cnt: Some(7),
                    rnr_retry: Some(7),
                    max_rd_atomic: Some(ord.min(255) as u8),
                    ..Default::default()
                },
            )
            .map_err(verbs("ibv_modify_qp(RTS)"))?;
    }
    Ok(())
}

fn connect_ud<P: Provider>(res: &mut Res<P>) -> Result<(), PerfError> {
    let pd = res.mr.pd();
    for i in 0..res.qps.len() {
        let (qp, my, rem) = (res.qps[i], res.my[i], res.rem[i]);
        for attr in [
            QpAttr {
                qp_state: Some(QpState::Rtr),
                ..Default::default()
            },
            QpAttr {
                qp_state: Some(QpState::Rts),
                sq_psn: Some(my.psn),
                ..Default::default()
            },
        ] {
            res.ctx
                .modify_qp(qp, &attr)
                .map_err(verbs("ibv_modify_qp(UD RTR/RTS)"))?;
        }
        let ah = res
            .ctx
            .create_ah(
                pd,
                &AhAttr {
                    dest: rem.gid_ip(),
                    flow_label: 0,
                    hop_limit: 0xFF,
                    traffic_class: 0,
                },
            )
            .map_err(verbs("ibv_create_ah"))?;
        res.ud.push(UdDest {
            ah,
            remote_qpn: rem.qpn,
            remote_qkey: DEF_QKEY,
        });
    }
    Ok(())
}

pub(super) fn post_recv<P: Provider>(
    res: &mut Res<P>,
    q: usize,
    len: u32,
) -> Result<(), PerfError> {
    let addr = res.mr.addr() + res.remote_slot_off(q) as u64;
    let wr = RecvWr {
        wr_id: q as u64,
        sg_list: SgList::one(Sge {
            addr,
            length: len,
            lkey: res.mr.lkey(),
        }),
    };
    res.ctx
        .post_recv(res.qps[q], &wr)
        .map_err(verbs("ibv_post_recv"))
}
