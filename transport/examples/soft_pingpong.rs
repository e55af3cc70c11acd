//! The ping-pong of `verbs_pingpong` (protocol `pingpong/proto.rs`) on the soft
//! provider: a userspace RoCEv2 QP over UDP and our CM agent, so a soft-provider process
//! and a verbs-provider process (e.g. in a QEMU guest on Linux rxe) check each other:
//! CM REQ/REP with private data, SEND, RDMA WRITE, RDMA READ, a memory window.
//!
//! ```text
//! soft_pingpong server --addr 192.168.77.1 [--port 7473] [--clients 1] [--mw]
//! soft_pingpong client --addr 192.168.77.1 --server 192.168.77.10 [--port 7474]
//! ```
//!
//! Exit status 0 when every check passed; 1 with the reason otherwise.
use std::net::{IpAddr, SocketAddr};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::{Parser, Subcommand};
use transport::cm::{AcceptParams, CmEvent, ConnectParams};
use transport::soft::{CmAgent, Context, Cq, DeviceConfig, Mr, Qp, QpInitAttr, SoftDevice};
use transport::verbs::{AccessFlags, AhAttr, QpAttr, QpState, RecvWr, SendWr, WorkCompletion};

#[path = "pingpong/proto.rs"]
mod proto;
use proto::{Link, Res, Session, CM_MAGIC, MR_ACCESS, MR_LEN, QP_CAP, RD_ATOMIC};

#[derive(Parser)]
#[command(about = "RC ping-pong on the soft provider (interoperates with verbs_pingpong)")]
struct Args {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Wait for clients on ADDR:PORT (RDMA CM).
    Server {
        #[arg(long)]
        addr: IpAddr,
        #[arg(long, default_value_t = 7473)]
        port: u16,
        #[arg(long, default_value_t = 1)]
        clients: u32,
        /// Expose the region through a type 2 memory window.
        #[arg(long)]
        mw: bool,
        #[arg(long, default_value_t = 60)]
        timeout: u64,
    },
    /// Connect to a server and run the checks.
    Client {
        #[arg(long)]
        addr: IpAddr,
        #[arg(long)]
        server: IpAddr,
        #[arg(long, default_value_t = 7474)]
        port: u16,
        #[arg(long, default_value = "1,64,4096,65536,1048576", value_delimiter = ',')]
        sizes: Vec<u32>,
        #[arg(long, default_value_t = 3)]
        iters: u32,
        #[arg(long, default_value_t = 60)]
        timeout: u64,
    },
}

/// Local ACK timeout of our QPs (537 ms, as the project's target and host use).
const ACK_TIMEOUT: u8 = 17;

/// A connected QP of the soft provider.
struct SoftLink {
    ctx: Context,
    mr: Mr,
    cq: Cq,
    qp: Qp,
}

impl Link for SoftLink {
    fn addr(&self) -> u64 {
        self.mr.addr()
    }
    fn lkey(&self) -> u32 {
        self.mr.lkey()
    }
    fn rkey(&self) -> u32 {
        self.mr.rkey()
    }
    fn write(&self, off: usize, data: &[u8]) {
        self.mr.write(off, data)
    }
    fn read(&self, off: usize, out: &mut [u8]) {
        self.mr.read(off, out)
    }
    fn inline(&self) -> u32 {
        QP_CAP.max_inline_data
    }
    fn post_send_list(&mut self, wrs: &[SendWr]) -> Res<()> {
        self.ctx
            .post_send_list(self.qp, wrs)
            .map_err(|e| format!("post_send: {e}"))
    }
    fn post_recv(&mut self, wr: &RecvWr) -> Res<()> {
        self.ctx
            .post_recv(self.qp, wr)
            .map_err(|e| format!("post_recv: {e}"))
    }
    fn poll(&mut self, out: &mut [WorkCompletion], timeout: Duration) -> Res<usize> {
        let end = Instant::now() + timeout;
        loop {
            let n = self.ctx.poll_cq(self.cq, out);
            if n > 0 || Instant::now() >= end {
                return Ok(n);
            }
            // Sleep on the receive socket (timers: at most 1 ms late).
            self.ctx.wait(Duration::from_millis(1));
        }
    }
}

fn open(addr: IpAddr) -> Res<(Arc<SoftDevice>, Context, Mr, Cq, QpInitAttr, CmAgent)> {
    let dev = SoftDevice::open(DeviceConfig::new(addr)).map_err(|e| e.to_string())?;
    let pd = dev.alloc_pd();
    let mr = dev
        .reg_mr(pd, MR_LEN, MR_ACCESS)
        .map_err(|e| format!("reg_mr: {e}"))?;
    let mut ctx = dev.open_context(0).map_err(|e| format!("context: {e}"))?;
    let cq = ctx.create_cq(64);
    let init = QpInitAttr {
        pd,
        send_cq: cq,
        recv_cq: cq,
        srq: None,
        cap: QP_CAP,
    };
    let cm = CmAgent::start(&dev).map_err(|e| format!("CM agent: {e}"))?;
    Ok((dev, ctx, mr, cq, init, cm))
}

fn to_init(ctx: &mut Context, qp: Qp) -> Res<()> {
    ctx.modify_qp(
        qp,
        &QpAttr {
            qp_state: Some(QpState::Init),
            qp_access_flags: Some(
                AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ | AccessFlags::REMOTE_WRITE,
            ),
            ..Default::default()
        },
    )
    .map_err(|e| format!("QP to Init: {e}"))
}

/// RTR then RTS: `rq_psn` is what we expect, `sq_psn` what we send from.
#[allow(clippy::too_many_arguments)]
fn to_rts(
    ctx: &mut Context,
    qp: Qp,
    dest: IpAddr,
    dest_qpn: u32,
    rq_psn: u32,
    sq_psn: u32,
    flow_label: u32,
    ord: u8,
    selective: bool,
) -> Res<()> {
    let mtu = ctx.device().path_mtu();
    ctx.modify_qp(
        qp,
        &QpAttr {
            qp_state: Some(QpState::Rtr),
            path_mtu: Some(mtu),
            dest_qp_num: Some(dest_qpn),
            rq_psn: Some(rq_psn),
            max_dest_rd_atomic: Some(RD_ATOMIC),
            min_rnr_timer: Some(12),
            ah_attr: Some(AhAttr {
                dest,
                flow_label,
                hop_limit: 64,
                traffic_class: 0,
            }),
            selective_retransmit: Some(selective),
            ..Default::default()
        },
    )
    .map_err(|e| format!("QP to RTR: {e}"))?;
    ctx.modify_qp(
        qp,
        &QpAttr {
            qp_state: Some(QpState::Rts),
            sq_psn: Some(sq_psn),
            timeout: Some(ACK_TIMEOUT),
            retry_cnt: Some(7),
            rnr_retry: Some(7),
            max_rd_atomic: Some(ord.max(1)),
            ..Default::default()
        },
    )
    .map_err(|e| format!("QP to RTS: {e}"))
}

fn server(addr: IpAddr, port: u16, clients: u32, use_mw: bool, timeout: Duration) -> Res<()> {
    let (dev, mut ctx, mut mr, cq, init, cm) = open(addr)?;
    let events = cm
        .listen(port)
        .map_err(|e| format!("listen on {addr}:{port}: {e}"))?;
    let mw = if use_mw {
        Some(
            dev.alloc_mw(init.pd)
                .map_err(|e| format!("alloc_mw: {e}"))?,
        )
    } else {
        None
    };
    println!("server: soft provider listening on {addr}:{port}");
    let mut served = 0;
    while served < clients {
        let ev = events
            .recv_timeout(timeout)
            .map_err(|_| format!("no connection request within {timeout:?}"))?;
        let CmEvent::ConnectRequest {
            id,
            remote_ip,
            remote_qpn,
            remote_psn,
            responder_resources,
            initiator_depth,
            flow_label,
            peer_selective_retransmit,
            private_data,
            ..
        } = ev
        else {
            continue;
        };
        if !private_data.starts_with(CM_MAGIC) {
            cm.reject(id, 28, b"VPP1 bad magic")
                .map_err(|e| format!("reject: {e}"))?;
            continue;
        }
        let qp = ctx
            .create_qp(&init)
            .map_err(|e| format!("create_qp: {e}"))?;
        let psn = rand::random::<u32>() & 0x00FF_FFFF;
        let ord = RD_ATOMIC.min(responder_resources);
        to_init(&mut ctx, qp)?;
        ctx.post_recv(qp, &proto::recv_wr(mr.addr(), mr.lkey()))
            .map_err(|e| format!("post_recv: {e}"))?;
        to_rts(
            &mut ctx,
            qp,
            remote_ip,
            remote_qpn,
            psn,
            remote_psn,
            flow_label,
            ord,
            peer_selective_retransmit,
        )?;
        cm.accept(
            id,
            AcceptParams {
                local_qpn: qp.qpn(),
                starting_psn: psn,
                responder_resources: RD_ATOMIC.min(initiator_depth),
                initiator_depth: ord,
                rnr_retry_count: 7,
                private_data: CM_MAGIC.to_vec(),
            },
        )
        .map_err(|e| format!("accept: {e}"))?;
        println!(
            "server: accepted {remote_ip} qpn {remote_qpn:#x} -> our qpn {:#x}",
            qp.qpn()
        );
        let mut s = Session::new(SoftLink { ctx, mr, cq, qp }, timeout);
        let answered = s.serve(mw)?;
        println!("server: client done after {answered} requests");
        let end = Instant::now() + timeout;
        while Instant::now() < end {
            s.link.ctx.progress();
            if let Ok(CmEvent::Disconnected { .. }) = events.recv_timeout(Duration::from_millis(10))
            {
                break;
            }
        }
        SoftLink { ctx, mr, .. } = s.link;
        let _ = ctx.destroy_qp(qp);
        served += 1;
    }
    Ok(())
}

fn client(
    addr: IpAddr,
    server: SocketAddr,
    sizes: &[u32],
    iters: u32,
    timeout: Duration,
) -> Res<()> {
    let (_dev, mut ctx, mr, cq, init, cm) = open(addr)?;
    let qp = ctx
        .create_qp(&init)
        .map_err(|e| format!("create_qp: {e}"))?;
    to_init(&mut ctx, qp)?;
    ctx.post_recv(qp, &proto::recv_wr(mr.addr(), mr.lkey()))
        .map_err(|e| format!("post_recv: {e}"))?;
    let psn = rand::random::<u32>() & 0x00FF_FFFF;
    let (id, events) = cm
        .connect(ConnectParams {
            dest: server.ip(),
            dest_port: server.port(),
            src_port: 0xC000 | (rand::random::<u16>() & 0x3FFF),
            local_qpn: qp.qpn(),
            starting_psn: psn,
            responder_resources: RD_ATOMIC,
            initiator_depth: RD_ATOMIC,
            retry_count: 7,
            rnr_retry_count: 7,
            path_mtu: ctx.device().path_mtu(),
            local_ack_timeout: ACK_TIMEOUT,
            private_data: CM_MAGIC.to_vec(),
        })
        .map_err(|e| format!("connect to {server}: {e}"))?;
    let end = Instant::now() + timeout;
    loop {
        let left = end.saturating_duration_since(Instant::now());
        match events.recv_timeout(left) {
            Ok(CmEvent::ConnectReply {
                remote_qpn,
                remote_psn,
                responder_resources,
                flow_label,
                peer_selective_retransmit,
                private_data,
                ..
            }) => {
                if !private_data.starts_with(CM_MAGIC) {
                    return Err("the server's REP private data is not ours".into());
                }
                to_rts(
                    &mut ctx,
                    qp,
                    server.ip(),
                    remote_qpn,
                    psn,
                    remote_psn,
                    flow_label,
                    RD_ATOMIC.min(responder_resources),
                    peer_selective_retransmit,
                )?;
                cm.send_rtu(id).map_err(|e| format!("RTU: {e}"))?;
                println!(
                    "client: soft provider connected to {server}, qpn {:#x} (peer {remote_qpn:#x})",
                    qp.qpn()
                );
                break;
            }
            Ok(CmEvent::Rejected { reason, .. }) => {
                return Err(format!("connect to {server}: rejected, reason {reason}"))
            }
            Ok(CmEvent::Unreachable { .. }) => return Err(format!("{server} unreachable")),
            Ok(_) => continue,
            Err(_) => return Err(format!("connect to {server}: no reply within {timeout:?}")),
        }
    }
    let mut s = Session::new(SoftLink { ctx, mr, cq, qp }, timeout);
    let checks = s.run_client(sizes, iters);
    cm.disconnect(id).map_err(|e| format!("disconnect: {e}"))?;
    let end = Instant::now() + timeout;
    let mut disconnected = false;
    while Instant::now() < end {
        s.link.ctx.progress();
        if let Ok(CmEvent::Disconnected { .. }) = events.recv_timeout(Duration::from_millis(10)) {
            disconnected = true;
            break;
        }
    }
    checks?;
    println!(
        "client: all checks passed ({} sizes x {iters}), disconnect {}",
        sizes.len(),
        if disconnected { "confirmed" } else { "sent" }
    );
    Ok(())
}

fn main() -> ExitCode {
    let args = Args::parse();
    let r = match args.cmd {
        Cmd::Server {
            addr,
            port,
            clients,
            mw,
            timeout,
        } => server(addr, port, clients, mw, Duration::from_secs(timeout)),
        Cmd::Client {
            addr,
            server,
            port,
            sizes,
            iters,
            timeout,
        } => client(
            addr,
            SocketAddr::new(server, port),
            &sizes,
            iters,
            Duration::from_secs(timeout),
        ),
    };
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("soft_pingpong: {e}");
            ExitCode::FAILURE
        }
    }
}
