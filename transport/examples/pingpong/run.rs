//! The ping-pong driver, written once for any provider (`P: Provider`): the command
//! line, opening the device, the RDMA CM server (listen, `create_accept_qp`, accept)
//! and client (`connect` with the receive posted on the way), then the protocol of
//! `proto.rs`. `soft_pingpong` runs it on the soft provider, `verbs_pingpong` on the
//! verbs provider; either side can be either.
#![allow(dead_code)]

use std::net::{IpAddr, SocketAddr};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::{Parser, Subcommand};
use transport::cm::CmEvent;
use transport::verbs::connection::{ConnRequest, ConnectRequestParams};
use transport::verbs::{
    CmOf, ConnectionManager as _, Context as _, ContextOf, Cq, Device as _, DeviceOf,
    MemoryRegion as _, MrOf, Provider, QpInitAttr,
};

use crate::proto::{self, Link, Res, Session, CM_MAGIC, MR_ACCESS, MR_LEN, QP_CAP, RD_ATOMIC};

/// Local ACK timeout of the client's QP (537 ms, as the project's target and host use).
pub const ACK_TIMEOUT: u8 = 17;

#[derive(Parser)]
#[command(about = "RC ping-pong over RDMA CM: SEND, RDMA WRITE, RDMA READ, every byte checked")]
pub struct Args {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Wait for clients on ADDR:PORT (RDMA CM).
    Server {
        /// Local address (verbs: its RoCE v2 GID picks the device).
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

/// One side's poll group, MR (the protocol's layout), CQ, QP creation attributes and CM.
pub struct Side<P: Provider> {
    pub ctx: ContextOf<P>,
    pub mr: MrOf<P>,
    pub cq: Cq,
    pub init: QpInitAttr,
    pub cm: CmOf<P>,
}

/// Opens poll group `group` of `dev` with the protocol's MR (in a new PD), a CQ and the
/// device's CM.
pub fn side<P: Provider>(dev: &Arc<DeviceOf<P>>, group: u32) -> Res<Side<P>> {
    let pd = dev.alloc_pd().map_err(|e| format!("alloc_pd: {e}"))?;
    let mr = dev
        .reg_mr(pd, MR_LEN, MR_ACCESS)
        .map_err(|e| format!("reg_mr: {e}"))?;
    let mut ctx = dev
        .open_context(group)
        .map_err(|e| format!("context: {e}"))?;
    let cq = ctx.create_cq(64).map_err(|e| format!("create_cq: {e}"))?;
    let init = QpInitAttr {
        pd,
        send_cq: cq,
        recv_cq: cq,
        srq: None,
        cap: QP_CAP,
        qp_type: transport::verbs::QpType::Rc,
    };
    let cm = dev.cm().map_err(|e| format!("RDMA CM: {e}"))?;
    Ok(Side {
        ctx,
        mr,
        cq,
        init,
        cm,
    })
}

/// Opens the device of `addr` and its first poll group's [`Side`].
pub fn open<P: Provider>(addr: IpAddr) -> Res<(Arc<DeviceOf<P>>, Side<P>)> {
    let dev = P::open(&P::device_config(addr, 1)).map_err(|e| e.to_string())?;
    let s = side::<P>(&dev, 0)?;
    Ok((dev, s))
}

/// Drives `ctx` until `events` says the connection is gone, at most `timeout`; whether
/// it did.
fn await_disconnect<P: Provider>(
    ctx: &mut ContextOf<P>,
    events: &crossbeam::channel::Receiver<CmEvent>,
    timeout: Duration,
) -> bool {
    let end = Instant::now() + timeout;
    while Instant::now() < end {
        // The soft provider ACKs what the peer sent last from here.
        ctx.progress();
        if let Ok(CmEvent::Disconnected { .. }) = events.recv_timeout(Duration::from_millis(10)) {
            return true;
        }
    }
    false
}

/// Serves `clients` clients on `addr:port`, one after the other; `listening` is called
/// once the port is listened on.
pub fn server<P: Provider>(
    addr: IpAddr,
    port: u16,
    clients: u32,
    use_mw: bool,
    timeout: Duration,
    listening: &dyn Fn(),
) -> Res<()> {
    let (
        dev,
        Side {
            mut ctx,
            mut mr,
            cq,
            init,
            cm,
        },
    ) = open::<P>(addr)?;
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
    println!("server: {} provider listening on {addr}:{port}", P::NAME);
    listening();
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
        let mut s = Session::new(Link::<P>::new(ctx, mr, cq, qp), timeout);
        println!(
            "server: connected {}:{} qpn {:#x} (peer qpn {:#x}), IRD {} ORD {}, inline {}",
            req.remote_ip,
            req.remote_port,
            qp.qpn(),
            req.remote_qpn,
            token.responder_resources,
            token.initiator_depth,
            s.link.inline,
        );
        let answered = s.serve(mw)?;
        println!("server: client done after {answered} requests");
        await_disconnect::<P>(&mut s.link.ctx, &events, timeout);
        Link { ctx, mr, .. } = s.link;
        ctx.destroy_qp(qp).map_err(|e| format!("destroy_qp: {e}"))?;
        served += 1;
    }
    Ok(())
}

/// Connects to `server`, runs the checks, disconnects.
pub fn client<P: Provider>(
    addr: IpAddr,
    server: SocketAddr,
    sizes: &[u32],
    iters: u32,
    timeout: Duration,
) -> Res<()> {
    let (
        dev,
        Side {
            mut ctx,
            mr,
            cq,
            init,
            cm,
        },
    ) = open::<P>(addr)?;
    let params = ConnectRequestParams {
        dest: server,
        responder_resources: RD_ATOMIC,
        initiator_depth: RD_ATOMIC,
        retry_count: 7,
        rnr_retry_count: 7,
        local_ack_timeout: Some(ACK_TIMEOUT),
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
    let state = ctx.query_qp_state(qp);
    let mut s = Session::new(Link::<P>::new(ctx, mr, cq, qp), timeout);
    println!(
        "client: {} provider {} connected to {server}, qpn {:#x}, state {state:?}, peer IRD {}, inline {}",
        P::NAME,
        dev.ip(),
        qp.qpn(),
        conn.responder_resources,
        s.link.inline,
    );
    let checks = s.run_client(sizes, iters);
    cm.disconnect(conn.id)
        .map_err(|e| format!("disconnect: {e}"))?;
    let disconnected = await_disconnect::<P>(&mut s.link.ctx, &conn.events, timeout);
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

/// The whole program: parses the command line, runs the server or the client on
/// provider `P`; exit status 0 when every check passed, 1 with the reason otherwise.
pub fn main<P: Provider>(program: &str) -> ExitCode {
    let args = Args::parse();
    let r = match args.cmd {
        Cmd::Server {
            addr,
            port,
            clients,
            mw,
            timeout,
        } => server::<P>(
            addr,
            port,
            clients,
            mw,
            Duration::from_secs(timeout),
            &|| {},
        ),
        Cmd::Client {
            addr,
            server,
            port,
            sizes,
            iters,
            timeout,
        } => client::<P>(
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
            eprintln!("{program}: {e}");
            ExitCode::FAILURE
        }
    }
}
