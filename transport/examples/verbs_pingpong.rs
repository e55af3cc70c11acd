//! RC ping-pong over a real RDMA device through the verbs provider (librdmacm connect
//! and accept with private data, SEND, RDMA WRITE, RDMA READ, a type 2 memory window),
//! every byte checked; the protocol is `pingpong/proto.rs`, shared with `soft_pingpong`
//! (the soft provider), so either side can be either provider. Usable across machines;
//! the poll loops sleep on the completion channel, so it shares a CPU with Soft-RoCE
//! politely.
//!
//! ```text
//! verbs_pingpong server --addr 192.168.77.10 [--port 7471] [--clients 1] [--mw]
//! verbs_pingpong client --addr 192.168.77.11 --server 192.168.77.10 [--port 7471] \
//!     [--sizes 1,64,4096,65536,1048576] [--iters 3]
//! ```
//!
//! Exit status 0 when every check passed; 1 with the reason otherwise.
use std::net::{IpAddr, SocketAddr};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::{Parser, Subcommand};
use transport::cm::CmEvent;
use transport::rdma::{DeviceConfig, VerbsContext, VerbsDevice, VerbsMr};
use transport::verbs::connection::{ConnRequest, ConnectRequestParams};
use transport::verbs::{Cq, Qp, QpInitAttr, RecvWr, SendWr, WorkCompletion};

#[path = "pingpong/proto.rs"]
mod proto;
use proto::{Link, Res, Session, CM_MAGIC, MR_ACCESS, MR_LEN, QP_CAP, RD_ATOMIC};

#[derive(Parser)]
#[command(about = "RC ping-pong over an RDMA device (verbs provider)")]
struct Args {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Wait for clients on ADDR:PORT (RDMA CM).
    Server {
        /// Local address (its RoCE v2 GID picks the device).
        #[arg(long)]
        addr: IpAddr,
        /// RDMA CM port.
        #[arg(long, default_value_t = 7471)]
        port: u16,
        /// Clients to serve, one after the other, before exiting.
        #[arg(long, default_value_t = 1)]
        clients: u32,
        /// Expose the region through a type 2 memory window instead of the MR's rkey.
        #[arg(long)]
        mw: bool,
        /// Seconds to wait for each step.
        #[arg(long, default_value_t = 60)]
        timeout: u64,
    },
    /// Connect to a server and run the checks.
    Client {
        /// Local address.
        #[arg(long)]
        addr: IpAddr,
        /// The server's address.
        #[arg(long)]
        server: IpAddr,
        /// RDMA CM port.
        #[arg(long, default_value_t = 7471)]
        port: u16,
        /// Message sizes in bytes (at most 1 MiB), comma separated.
        #[arg(long, default_value = "1,64,4096,65536,1048576", value_delimiter = ',')]
        sizes: Vec<u32>,
        /// Iterations per size.
        #[arg(long, default_value_t = 3)]
        iters: u32,
        /// Seconds to wait for each step.
        #[arg(long, default_value_t = 60)]
        timeout: u64,
    },
}

/// A connected QP of the verbs provider.
struct VerbsLink {
    ctx: VerbsContext,
    mr: VerbsMr,
    cq: Cq,
    qp: Qp,
    inline: u32,
}

impl Link for VerbsLink {
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
        self.inline
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
        self.ctx
            .poll_cq_blocking(self.cq, out, timeout)
            .map_err(|e| format!("req_notify_cq: {e}"))
    }
}

/// The device of `addr`, a poll group, the MR, a CQ and the QP creation attributes.
fn open(addr: IpAddr) -> Res<(Arc<VerbsDevice>, VerbsContext, VerbsMr, Cq, QpInitAttr)> {
    let dev = VerbsDevice::open(&DeviceConfig::new(addr)).map_err(|e| e.to_string())?;
    let pd = dev.alloc_pd().map_err(|e| format!("alloc_pd: {e}"))?;
    let mr = dev
        .reg_mr(pd, MR_LEN, MR_ACCESS)
        .map_err(|e| format!("reg_mr: {e}"))?;
    let mut ctx = dev.open_context(0).map_err(|e| format!("context: {e}"))?;
    let cq = ctx.create_cq(64).map_err(|e| format!("create_cq: {e}"))?;
    let init = QpInitAttr {
        pd,
        send_cq: cq,
        recv_cq: cq,
        srq: None,
        cap: QP_CAP,
    };
    Ok((dev, ctx, mr, cq, init))
}

fn server(addr: IpAddr, port: u16, clients: u32, use_mw: bool, timeout: Duration) -> Res<()> {
    let (dev, mut ctx, mut mr, cq, init) = open(addr)?;
    let cm = dev.cm().map_err(|e| format!("RDMA CM: {e}"))?;
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
    println!(
        "server: {} {} listening on {addr}:{port}",
        dev.name(),
        dev.gid()
    );
    let mut served = 0;
    while served < clients {
        let ev = events
            .recv_timeout(timeout)
            .map_err(|_| format!("no connection request within {timeout:?}"))?;
        let Some(req) = ConnRequest::from_event(&ev) else {
            continue;
        };
        if !req.private_data.starts_with(CM_MAGIC) {
            println!(
                "server: rejecting {} (private data is not ours)",
                req.remote_ip
            );
            cm.reject(req.id, b"VPP1 bad magic")
                .map_err(|e| format!("reject: {e}"))?;
            continue;
        }
        let (qp, token) = cm
            .create_accept_qp(&mut ctx, &req, &init, RD_ATOMIC)
            .map_err(|e| format!("QP for {}: {e}", req.remote_ip))?;
        ctx.post_recv(qp, &proto::recv_wr(mr.addr(), mr.lkey()))
            .map_err(|e| format!("post_recv: {e}"))?;
        cm.accept(req.id, token, CM_MAGIC)
            .map_err(|e| format!("accept: {e}"))?;
        loop {
            match events.recv_timeout(timeout) {
                Ok(CmEvent::Established { id, .. }) if id == req.id => break,
                Ok(other) => println!("server: event {other:?}"),
                Err(_) => return Err("no RTU (Established) within the timeout".into()),
            }
        }
        let inline = ctx.qp_cap(qp).map_or(0, |c| c.max_inline_data);
        println!(
            "server: connected {}:{} qpn {:#x} (peer qpn {:#x}), IRD {} ORD {}, inline {inline}",
            req.remote_ip,
            req.remote_port,
            qp.qpn(),
            req.remote_qpn,
            token.responder_resources,
            token.initiator_depth,
        );
        let mut s = Session::new(
            VerbsLink {
                ctx,
                mr,
                cq,
                qp,
                inline,
            },
            timeout,
        );
        let answered = s.serve(mw)?;
        println!("server: client done after {answered} requests");
        let end = Instant::now() + timeout;
        while Instant::now() < end {
            if let Ok(CmEvent::Disconnected { .. }) =
                events.recv_timeout(Duration::from_millis(100))
            {
                break;
            }
        }
        VerbsLink { ctx, mr, .. } = s.link;
        ctx.destroy_qp(qp).map_err(|e| format!("destroy_qp: {e}"))?;
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
    let (dev, mut ctx, mr, cq, init) = open(addr)?;
    let cm = dev.cm().map_err(|e| format!("RDMA CM: {e}"))?;
    let params = ConnectRequestParams {
        dest: server,
        responder_resources: RD_ATOMIC,
        initiator_depth: RD_ATOMIC,
        retry_count: 7,
        rnr_retry_count: 7,
        local_ack_timeout: Some(17),
        private_data: CM_MAGIC.to_vec(),
        timeout,
    };
    let recv = proto::recv_wr(mr.addr(), mr.lkey());
    let conn = cm
        .connect(&mut ctx, &init, &params, &mut |ctx, qp| {
            ctx.post_recv(qp, &recv)
        })
        .map_err(|e| format!("connect to {server}: {e}"))?;
    let qp = conn.qp;
    if !conn.rep_private_data.starts_with(CM_MAGIC) {
        return Err("the server's REP private data is not ours".into());
    }
    let inline = ctx.qp_cap(qp).map_or(0, |c| c.max_inline_data);
    println!(
        "client: {} {} connected to {server}, qpn {:#x}, state {:?}, peer IRD {}, inline {inline}",
        dev.name(),
        dev.gid(),
        qp.qpn(),
        ctx.query_qp_state(qp),
        conn.responder_resources,
    );
    let mut s = Session::new(
        VerbsLink {
            ctx,
            mr,
            cq,
            qp,
            inline,
        },
        timeout,
    );
    let checks = s.run_client(sizes, iters);
    cm.disconnect(conn.id)
        .map_err(|e| format!("disconnect: {e}"))?;
    let end = Instant::now() + timeout;
    let mut disconnected = false;
    while Instant::now() < end {
        if let Ok(CmEvent::Disconnected { .. }) =
            conn.events.recv_timeout(Duration::from_millis(100))
        {
            disconnected = true;
            break;
        }
    }
    s.link
        .ctx
        .destroy_qp(qp)
        .map_err(|e| format!("destroy_qp: {e}"))?;
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
            eprintln!("verbs_pingpong: {e}");
            ExitCode::FAILURE
        }
    }
}
