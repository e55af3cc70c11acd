//! RC ping-pong over a real RDMA device through the verbs provider (librdmacm connect
//! and accept with private data, SEND, RDMA WRITE, RDMA READ, a type 2 memory window),
//! every byte checked. Usable across machines; the poll loops sleep on the completion
//! channel, so it shares a CPU with Soft-RoCE politely.
//!
//! ```text
//! verbs_pingpong server --addr 192.168.77.10 [--port 7471] [--clients 1] [--mw]
//! verbs_pingpong client --addr 192.168.77.11 --server 192.168.77.10 [--port 7471] \
//!     [--sizes 1,64,4096,65536,1048576] [--iters 3]
//! ```
//!
//! Per size and iteration the client (1) SENDs a patterned payload that the server
//! checks and answers with another pattern, (2) RDMA WRITEs a pattern into the server's
//! region and SENDs "check" in the same `ibv_post_send` chain; the server checks the
//! region and refills it, (3) RDMA READs the refilled region back and checks it. The
//! server announces its region (address, rkey; with `--mw` the rkey of a memory window
//! bound over it with IBV_WR_BIND_MW) in a first message. Exit status 0 when every
//! check passed; 1 with the reason otherwise.
use std::collections::VecDeque;
use std::net::{IpAddr, SocketAddr};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::{Parser, Subcommand};
use transport::cm::CmEvent;
use transport::rdma::{DeviceConfig, VerbsContext, VerbsDevice, VerbsMr};
use transport::verbs::connection::{ConnRequest, ConnectRequestParams};
use transport::verbs::{
    inc_rkey, AccessFlags, Cq, QpCap, QpInitAttr, RecvWr, SendFlags, SendOp, SendWr, SgList, Sge,
    WcOpcode, WcStatus, WorkCompletion,
};

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

/// Largest message and region.
const MAX: usize = 1 << 20;
/// Message header: magic, op, size, arg (little endian u32 each).
const HDR: usize = 16;
const MAGIC: u32 = 0x4d50_5056; // "VPPM"
/// CM private data of both REQ and REP.
const CM_MAGIC: &[u8; 4] = b"VPP1";
const OP_HELLO: u32 = 1;
const OP_SEND_DATA: u32 = 2;
const OP_CHECK_WRITE: u32 = 3;
const OP_RESULT: u32 = 4;
const OP_DONE: u32 = 5;
const WR_RECV: u64 = 1;
const WR_SEND: u64 = 2;
const WR_WRITE: u64 = 3;
const WR_READ: u64 = 4;
const WR_BIND: u64 = 5;
/// Offsets in the one MR of each side.
const RECV_OFF: usize = 0;
const SEND_OFF: usize = HDR + MAX;
const REGION_OFF: usize = 2 * (HDR + MAX);
const MR_LEN: usize = REGION_OFF + MAX;

fn pattern(seed: u32, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (seed.wrapping_mul(31) as usize + i * 7 + (i >> 8)) as u8)
        .collect()
}

fn first_diff(a: &[u8], b: &[u8]) -> Option<usize> {
    a.iter().zip(b).position(|(x, y)| x != y)
}

type Res<T> = Result<T, String>;

/// One side's verbs objects.
struct Side {
    ctx: VerbsContext,
    mr: VerbsMr,
    cq: Cq,
    init: QpInitAttr,
    pending: VecDeque<WorkCompletion>,
    timeout: Duration,
    /// Inline bytes the device granted the QP (`ibv_qp_init_attr.cap` written back).
    inline: u32,
}

impl Side {
    fn open(addr: IpAddr, timeout: Duration) -> Res<(Arc<VerbsDevice>, Side)> {
        let dev = VerbsDevice::open(&DeviceConfig::new(addr)).map_err(|e| e.to_string())?;
        let pd = dev.alloc_pd().map_err(|e| format!("alloc_pd: {e}"))?;
        let access = AccessFlags::LOCAL_WRITE
            | AccessFlags::REMOTE_READ
            | AccessFlags::REMOTE_WRITE
            | AccessFlags::MW_BIND;
        let mr = dev
            .reg_mr(pd, MR_LEN, access)
            .map_err(|e| format!("reg_mr: {e}"))?;
        let mut ctx = dev.open_context(0).map_err(|e| format!("context: {e}"))?;
        let cq = ctx.create_cq(64).map_err(|e| format!("create_cq: {e}"))?;
        let init = QpInitAttr {
            pd,
            send_cq: cq,
            recv_cq: cq,
            srq: None,
            cap: QpCap {
                max_send_wr: 16,
                max_recv_wr: 4,
                max_send_sge: 1,
                max_recv_sge: 1,
                max_inline_data: 64,
            },
        };
        Ok((
            dev,
            Side {
                ctx,
                mr,
                cq,
                init,
                pending: VecDeque::new(),
                timeout,
                inline: 0,
            },
        ))
    }

    fn sge(&self, off: usize, len: usize) -> SgList {
        SgList::one(Sge {
            addr: self.mr.addr() + off as u64,
            length: len as u32,
            lkey: self.mr.lkey(),
        })
    }

    fn recv_wr(&self) -> RecvWr {
        RecvWr {
            wr_id: WR_RECV,
            sg_list: self.sge(RECV_OFF, HDR + MAX),
        }
    }

    /// Waits for the completion of `wr_id`, keeping others for later; an error
    /// completion fails.
    fn wait(&mut self, wr_id: u64) -> Res<WorkCompletion> {
        let deadline = Instant::now() + self.timeout;
        loop {
            if let Some(i) = self.pending.iter().position(|w| w.wr_id == wr_id) {
                let wc = self.pending.remove(i).expect("present");
                if wc.status != WcStatus::Success {
                    return Err(format!("work request {wr_id} completed with {}", wc.status));
                }
                return Ok(wc);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(format!(
                    "no completion of work request {wr_id} within {:?}",
                    self.timeout
                ));
            }
            let mut buf = [WorkCompletion::new(0, WcStatus::Success, WcOpcode::Send, 0); 8];
            let n = self
                .ctx
                .poll_cq_blocking(self.cq, &mut buf, left)
                .map_err(|e| format!("req_notify_cq: {e}"))?;
            for wc in &buf[..n] {
                if wc.status != WcStatus::Success {
                    return Err(format!(
                        "work request {} completed with {}",
                        wc.wr_id, wc.status
                    ));
                }
                self.pending.push_back(*wc);
            }
        }
    }

    /// Waits for the signaled SEND.
    fn sent(&mut self) -> Res<()> {
        self.wait(WR_SEND).map(|_| ())
    }

    fn header(&self, op: u32, size: u32, arg: u32) {
        let mut h = [0u8; HDR];
        for (i, v) in [MAGIC, op, size, arg].into_iter().enumerate() {
            h[i * 4..i * 4 + 4].copy_from_slice(&v.to_le_bytes());
        }
        self.mr.write(SEND_OFF, &h);
    }

    fn send_wr(&self, len: usize) -> SendWr {
        let inline = len as u32 <= self.inline;
        SendWr {
            wr_id: WR_SEND,
            op: SendOp::Send,
            sg_list: self.sge(SEND_OFF, len),
            flags: if inline {
                SendFlags::SIGNALED | SendFlags::INLINE
            } else {
                SendFlags::SIGNALED
            },
        }
    }

    /// The received message: (op, size, arg) and its byte count.
    fn received(&self, wc: &WorkCompletion) -> Res<(u32, u32, u32)> {
        if (wc.byte_len as usize) < HDR {
            return Err(format!("short message of {} bytes", wc.byte_len));
        }
        let mut h = [0u8; HDR];
        self.mr.read(RECV_OFF, &mut h);
        let w = |i: usize| u32::from_le_bytes(h[i * 4..i * 4 + 4].try_into().unwrap());
        if w(0) != MAGIC {
            return Err(format!("bad message magic {:#x}", w(0)));
        }
        Ok((w(1), w(2), w(3)))
    }
}

fn server(addr: IpAddr, port: u16, clients: u32, use_mw: bool, timeout: Duration) -> Res<()> {
    let (dev, mut s) = Side::open(addr, timeout)?;
    let cm = dev.cm().map_err(|e| format!("RDMA CM: {e}"))?;
    let events = cm
        .listen(port)
        .map_err(|e| format!("listen on {addr}:{port}: {e}"))?;
    let mw = if use_mw {
        Some(
            dev.alloc_mw(s.init.pd)
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
            .create_accept_qp(&mut s.ctx, &req, &s.init, 16)
            .map_err(|e| format!("QP for {}: {e}", req.remote_ip))?;
        s.inline = s.ctx.qp_cap(qp).map_or(0, |c| c.max_inline_data);
        s.ctx
            .post_recv(qp, &s.recv_wr())
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
        println!(
            "server: connected {}:{} qpn {:#x} (peer qpn {:#x}), IRD {} ORD {}, inline {}",
            req.remote_ip,
            req.remote_port,
            qp.qpn(),
            req.remote_qpn,
            token.responder_resources,
            token.initiator_depth,
            s.inline
        );
        let region = s.mr.addr() + REGION_OFF as u64;
        let rkey = match mw {
            Some(h) => {
                let new = inc_rkey(h);
                let bind = SendWr {
                    wr_id: WR_BIND,
                    op: SendOp::BindMw {
                        mw_handle: h,
                        rkey: new,
                        mr_lkey: s.mr.lkey(),
                        addr: region,
                        length: MAX as u64,
                        access: AccessFlags::REMOTE_READ | AccessFlags::REMOTE_WRITE,
                    },
                    sg_list: SgList::new(),
                    flags: SendFlags::SIGNALED,
                };
                s.ctx
                    .post_send(qp, &bind)
                    .map_err(|e| format!("bind MW: {e}"))?;
                let wc = s.wait(WR_BIND)?;
                println!(
                    "server: memory window bound, rkey {new:#x} ({:?})",
                    wc.opcode
                );
                new
            }
            None => s.mr.rkey(),
        };
        s.header(OP_HELLO, 0, 0);
        let mut info = [0u8; 16];
        info[..8].copy_from_slice(&region.to_le_bytes());
        info[8..12].copy_from_slice(&rkey.to_le_bytes());
        info[12..].copy_from_slice(&(MAX as u32).to_le_bytes());
        s.mr.write(SEND_OFF + HDR, &info);
        s.ctx
            .post_send(qp, &s.send_wr(HDR + 16))
            .map_err(|e| format!("post_send: {e}"))?;
        s.sent()?;
        let mut checks = 0u32;
        loop {
            let wc = s.wait(WR_RECV)?;
            let (op, size, arg) = s.received(&wc)?;
            let size_us = size as usize;
            let mut payload = vec![0u8; size_us.min(MAX)];
            match op {
                OP_SEND_DATA => {
                    s.mr.read(RECV_OFF + HDR, &mut payload);
                    let status = if wc.byte_len as usize != HDR + size_us {
                        1
                    } else {
                        first_diff(&payload, &pattern(arg, size_us)).map_or(0, |_| 2)
                    };
                    s.ctx
                        .post_recv(qp, &s.recv_wr())
                        .map_err(|e| e.to_string())?;
                    s.header(
                        OP_SEND_DATA,
                        size,
                        if status == 0 { arg + 1 } else { u32::MAX },
                    );
                    s.mr.write(SEND_OFF + HDR, &pattern(arg + 1, size_us));
                    s.ctx
                        .post_send(qp, &s.send_wr(HDR + size_us))
                        .map_err(|e| format!("post_send: {e}"))?;
                    s.sent()?;
                }
                OP_CHECK_WRITE => {
                    s.mr.read(REGION_OFF, &mut payload);
                    let status = match first_diff(&payload, &pattern(arg, size_us)) {
                        None => 0,
                        Some(off) => off as u32 + 1,
                    };
                    s.mr.write(REGION_OFF, &pattern(arg + 1, size_us));
                    s.ctx
                        .post_recv(qp, &s.recv_wr())
                        .map_err(|e| e.to_string())?;
                    s.header(OP_RESULT, size, status);
                    s.ctx
                        .post_send(qp, &s.send_wr(HDR))
                        .map_err(|e| format!("post_send: {e}"))?;
                    s.sent()?;
                }
                OP_DONE => break,
                _ => return Err(format!("unknown op {op}")),
            }
            checks += 1;
        }
        println!("server: client done after {checks} requests");
        let end = Instant::now() + timeout;
        while Instant::now() < end {
            match events.recv_timeout(Duration::from_millis(100)) {
                Ok(CmEvent::Disconnected { .. }) => break,
                _ => continue,
            }
        }
        s.ctx
            .destroy_qp(qp)
            .map_err(|e| format!("destroy_qp: {e}"))?;
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
    if let Some(s) = sizes.iter().find(|&&s| s as usize > MAX) {
        return Err(format!(
            "size {s} is over the {MAX}-byte region; use --sizes up to {MAX}"
        ));
    }
    let (dev, mut s) = Side::open(addr, timeout)?;
    let cm = dev.cm().map_err(|e| format!("RDMA CM: {e}"))?;
    let params = ConnectRequestParams {
        dest: server,
        responder_resources: 16,
        initiator_depth: 16,
        retry_count: 7,
        rnr_retry_count: 7,
        local_ack_timeout: Some(17),
        private_data: CM_MAGIC.to_vec(),
        timeout,
    };
    let recv = s.recv_wr();
    let init = s.init;
    let conn = cm
        .connect(&mut s.ctx, &init, &params, &mut |ctx, qp| {
            ctx.post_recv(qp, &recv)
        })
        .map_err(|e| format!("connect to {server}: {e}"))?;
    let qp = conn.qp;
    s.inline = s.ctx.qp_cap(qp).map_or(0, |c| c.max_inline_data);
    if !conn.rep_private_data.starts_with(CM_MAGIC) {
        return Err("the server's REP private data is not ours".into());
    }
    println!(
        "client: {} {} connected to {server}, qpn {:#x}, state {:?}, peer IRD {} inline {}",
        dev.name(),
        dev.gid(),
        qp.qpn(),
        s.ctx.query_qp_state(qp),
        conn.responder_resources,
        s.inline
    );
    let wc = s.wait(WR_RECV)?;
    let (op, _, _) = s.received(&wc)?;
    if op != OP_HELLO {
        return Err(format!("expected HELLO, got op {op}"));
    }
    let mut info = [0u8; 16];
    s.mr.read(RECV_OFF + HDR, &mut info);
    let raddr = u64::from_le_bytes(info[..8].try_into().unwrap());
    let rkey = u32::from_le_bytes(info[8..12].try_into().unwrap());
    s.ctx
        .post_recv(qp, &s.recv_wr())
        .map_err(|e| e.to_string())?;
    println!("client: server region {raddr:#x} rkey {rkey:#x}");
    let mut seed = 1u32;
    let mut failed = Vec::new();
    for &size in sizes {
        let n = size as usize;
        let mut rtts = Vec::new();
        for _ in 0..iters {
            // 1. SEND both ways.
            seed += 2;
            let t = Instant::now();
            s.header(OP_SEND_DATA, size, seed);
            s.mr.write(SEND_OFF + HDR, &pattern(seed, n));
            s.ctx
                .post_send(qp, &s.send_wr(HDR + n))
                .map_err(|e| format!("post_send: {e}"))?;
            s.sent()?;
            let wc = s.wait(WR_RECV)?;
            rtts.push(t.elapsed());
            let (op, rsize, arg) = s.received(&wc)?;
            let mut got = vec![0u8; n];
            s.mr.read(RECV_OFF + HDR, &mut got);
            s.ctx
                .post_recv(qp, &s.recv_wr())
                .map_err(|e| e.to_string())?;
            if op != OP_SEND_DATA || rsize != size || arg != seed + 1 {
                failed.push(format!(
                    "SEND {size}: server saw a bad payload (arg {arg:#x})"
                ));
            } else if let Some(off) = first_diff(&got, &pattern(seed + 1, n)) {
                failed.push(format!("SEND {size}: reply differs at byte {off}"));
            }
            // 2. RDMA WRITE + SEND "check" in one post_send_list.
            s.mr.write(REGION_OFF, &pattern(seed + 7, n));
            s.header(OP_CHECK_WRITE, size, seed + 7);
            let write = SendWr {
                wr_id: WR_WRITE,
                op: SendOp::RdmaWrite {
                    remote_addr: raddr,
                    rkey,
                },
                sg_list: s.sge(REGION_OFF, n),
                flags: SendFlags::empty(),
            };
            s.ctx
                .post_send_list(qp, &[write, s.send_wr(HDR)])
                .map_err(|e| format!("post_send_list: {e}"))?;
            s.sent()?;
            let wc = s.wait(WR_RECV)?;
            let (op, _, status) = s.received(&wc)?;
            s.ctx
                .post_recv(qp, &s.recv_wr())
                .map_err(|e| e.to_string())?;
            if op != OP_RESULT || status != 0 {
                failed.push(format!(
                    "RDMA WRITE {size}: the server's region differs at byte {}",
                    status.wrapping_sub(1)
                ));
            }
            // 3. RDMA READ of what the server refilled.
            s.mr.write(REGION_OFF, &vec![0u8; n]);
            let read = SendWr {
                wr_id: WR_READ,
                op: SendOp::RdmaRead {
                    remote_addr: raddr,
                    rkey,
                },
                sg_list: s.sge(REGION_OFF, n),
                flags: SendFlags::SIGNALED,
            };
            s.ctx
                .post_send(qp, &read)
                .map_err(|e| format!("post RDMA READ: {e}"))?;
            let wc = s.wait(WR_READ)?;
            let mut got = vec![0u8; n];
            s.mr.read(REGION_OFF, &mut got);
            if wc.byte_len != size {
                failed.push(format!("RDMA READ {size}: byte_len {}", wc.byte_len));
            } else if let Some(off) = first_diff(&got, &pattern(seed + 8, n)) {
                failed.push(format!("RDMA READ {size}: differs at byte {off}"));
            }
        }
        rtts.sort();
        let median = rtts.get(rtts.len() / 2).copied().unwrap_or_default();
        println!(
            "client: size {size}: {iters} x SEND+reply, RDMA WRITE, RDMA READ checked; SEND round trip median {} us",
            median.as_micros()
        );
    }
    s.header(OP_DONE, 0, 0);
    s.ctx
        .post_send(qp, &s.send_wr(HDR))
        .map_err(|e| format!("post_send: {e}"))?;
    s.sent()?;
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
    s.ctx
        .destroy_qp(qp)
        .map_err(|e| format!("destroy_qp: {e}"))?;
    if !failed.is_empty() {
        return Err(failed.join("; "));
    }
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
