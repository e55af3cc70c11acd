//! The queue layer against a minimal NVMe/RDMA responder written here directly on the
//! transport (soft provider over loopback UDP): it accepts the CM connection with
//! NVMe/RDMA private data and serves Read/Write from a memory array, moving data the
//! way nvmet-rdma does (in-capsule, RDMA READ for keyed writes, RDMA WRITE for reads,
//! SEND with Invalidate for keyed commands). Namespace ID 2 answers reads with a plain
//! SEND, so the host must invalidate the key itself; a command for namespace ID 4 makes
//! the responder destroy its QP and vanish; namespace ID 5 makes it disconnect (DREQ).
//!
//! Each test uses its own pair of 127.0.0.x addresses, since both sides receive on 4791.
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use nvme::{Cqe, Sqe, Status};
use nvmf_initiator::queue::{NvmeRdmaQueue, QueueCompletion, QueueConfig};
use nvmf_initiator::{BufferPool, DataDir, HostError, IoBuf, QueueError, RemoteAccess};
use transport::cm::CmEvent;
use transport::soft::{DeviceConfig, QpInitAttr, SoftDevice};
use transport::verbs::connection::ConnRequest;
use transport::verbs::{
    AccessFlags, ConnectionManager, Device as _, QpCap, RecvWr, SendFlags, SendOp, SendWr, SgList,
    Sge, WcStatus, WorkCompletion,
};

const DEPTH: u16 = 8;
const MAX_IO: usize = 64 * 1024;
const STORE: usize = 1 << 20;
const RECV_LEN: usize = 64 + 4096;

struct FakeTarget {
    stop: Arc<AtomicBool>,
    /// The host disconnected (the target saw its DREQ).
    disconnected: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Drop for FakeTarget {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn wc0() -> WorkCompletion {
    WorkCompletion::new(0, WcStatus::Success, transport::verbs::WcOpcode::Send, 0)
}

/// Starts the responder on `ip:4420`, serving one connection.
fn start_target(ip: IpAddr) -> FakeTarget {
    start_target_with(ip, DEPTH)
}

/// Starts the responder on `ip:4420`, serving one connection whose NVMe/RDMA accept
/// carries `crqsize`. The QP is brought up by the transport's connection manager
/// (`create_accept_qp`, `accept`), as the real target does it.
fn start_target_with(ip: IpAddr, crqsize: u16) -> FakeTarget {
    let dev = SoftDevice::open(DeviceConfig::new(ip)).expect("target device");
    let cm = dev.cm().expect("target CM");
    let events = cm.listen(4420).expect("listen");
    let stop = Arc::new(AtomicBool::new(false));
    let disconnected = Arc::new(AtomicBool::new(false));
    let (stop2, disconnected2) = (stop.clone(), disconnected.clone());
    let thread = std::thread::spawn(move || {
        let mut ctx = dev.open_context(0).unwrap();
        // Wait for the REQ.
        let req = loop {
            if stop2.load(Ordering::Acquire) {
                return;
            }
            if let Some(req) = events
                .recv_timeout(Duration::from_millis(5))
                .ok()
                .as_ref()
                .and_then(ConnRequest::from_event)
            {
                break req;
            }
        };
        let id = req.id;
        let pd_ = &req.private_data;
        let hrqsize = u16::from_le_bytes([pd_[4], pd_[5]]);
        let hsqsize = u16::from_le_bytes([pd_[6], pd_[7]]);
        assert_eq!((hrqsize, hsqsize), (DEPTH, DEPTH - 1));
        let pd = dev.alloc_pd();
        let rmr = dev
            .reg_mr(pd, RECV_LEN * usize::from(DEPTH), AccessFlags::LOCAL_WRITE)
            .unwrap();
        let dmr = dev.reg_mr(pd, MAX_IO, AccessFlags::LOCAL_WRITE).unwrap();
        let cmr = dev.reg_mr(pd, 16, AccessFlags::empty()).unwrap();
        let cq = ctx.create_cq(256);
        let cap = QpCap {
            max_send_wr: 64,
            max_recv_wr: 64,
            max_send_sge: 2,
            max_recv_sge: 1,
            max_inline_data: 0,
        };
        let init = QpInitAttr {
            pd,
            send_cq: cq,
            recv_cq: cq,
            srq: None,
            cap,
            qp_type: transport::verbs::QpType::Rc,
        };
        let (qp, token) = cm.create_accept_qp(&mut ctx, &req, &init, 16).unwrap();
        for i in 0..usize::from(DEPTH) {
            let sge = Sge {
                addr: rmr.addr() + (i * RECV_LEN) as u64,
                length: RECV_LEN as u32,
                lkey: rmr.lkey(),
            };
            ctx.post_recv(
                qp,
                &RecvWr {
                    wr_id: i as u64,
                    sg_list: SgList::one(sge),
                },
            )
            .unwrap();
        }
        let mut accept = vec![0u8; 32];
        accept[2..4].copy_from_slice(&crqsize.to_le_bytes());
        ConnectionManager::accept(&cm, id, token, &accept).unwrap();

        let mut store = vec![0u8; STORE];
        let mut sqhd: u16 = 0;
        let mut wcs = vec![wc0(); 16];
        let wait_send = |ctx: &mut transport::soft::Context,
                         wr_id: u64,
                         wcs: &mut Vec<WorkCompletion>,
                         pending: &mut Vec<WorkCompletion>| loop {
            let n = ctx.poll_cq(cq, wcs);
            let mut found = false;
            for wc in &wcs[..n] {
                if wc.wr_id == wr_id && wc.opcode != transport::verbs::WcOpcode::Recv {
                    assert_eq!(
                        wc.status,
                        WcStatus::Success,
                        "target work request {wr_id:#x}"
                    );
                    found = true;
                } else {
                    pending.push(*wc);
                }
            }
            if found {
                return;
            }
        };
        let mut pending: Vec<WorkCompletion> = Vec::new();
        while !stop2.load(Ordering::Acquire) {
            while let Ok(ev) = events.try_recv() {
                if matches!(ev, CmEvent::Disconnected { .. }) {
                    disconnected2.store(true, Ordering::Release);
                }
            }
            let n = ctx.poll_cq(cq, &mut wcs);
            pending.extend_from_slice(&wcs[..n]);
            let batch: Vec<WorkCompletion> = std::mem::take(&mut pending);
            for wc in batch {
                if wc.opcode != transport::verbs::WcOpcode::Recv {
                    continue;
                }
                if wc.status != WcStatus::Success {
                    return;
                }
                let slot = wc.wr_id as usize;
                let mut raw = [0u8; 64];
                rmr.read(slot * RECV_LEN, &mut raw);
                let sqe = Sqe::from_array(raw);
                sqhd = (sqhd + 1) % DEPTH;
                if sqe.nsid() == 5 {
                    // Disconnect (DREQ) without answering.
                    let _ = cm.disconnect(id);
                    while !stop2.load(Ordering::Acquire) {
                        ctx.progress();
                        std::thread::sleep(Duration::from_millis(1));
                    }
                    return;
                }
                if sqe.nsid() == 4 {
                    // Vanish: no answer, no more ACKs.
                    let _ = ctx.destroy_qp(qp);
                    return;
                }
                let sgl = sqe.sgl();
                let off = (sqe.slba() * 512) as usize;
                let len = sgl.len() as usize;
                let mut status = Status::SUCCESS;
                let mut invalidate = sgl.identifier() == 0x4F;
                match sqe.opcode() {
                    0x01 if sgl.identifier() == 0x01 => {
                        let mut buf = vec![0u8; len];
                        rmr.read(slot * RECV_LEN + 64, &mut buf);
                        store[off..off + len].copy_from_slice(&buf);
                    }
                    0x01 => {
                        let wr = SendWr {
                            wr_id: 0x100,
                            op: SendOp::RdmaRead {
                                remote_addr: sgl.address(),
                                rkey: sgl.key(),
                            },
                            sg_list: SgList::one(Sge {
                                addr: dmr.addr(),
                                length: len as u32,
                                lkey: dmr.lkey(),
                            }),
                            flags: SendFlags::SIGNALED,
                        };
                        ctx.post_send(qp, &wr).unwrap();
                        wait_send(&mut ctx, 0x100, &mut wcs, &mut pending);
                        let mut buf = vec![0u8; len];
                        dmr.read(0, &mut buf);
                        store[off..off + len].copy_from_slice(&buf);
                    }
                    0x02 => {
                        dmr.write(0, &store[off..off + len]);
                        let wr = SendWr {
                            wr_id: 0x200,
                            op: SendOp::RdmaWrite {
                                remote_addr: sgl.address(),
                                rkey: sgl.key(),
                            },
                            sg_list: SgList::one(Sge {
                                addr: dmr.addr(),
                                length: len as u32,
                                lkey: dmr.lkey(),
                            }),
                            flags: SendFlags::empty(),
                        };
                        ctx.post_send(qp, &wr).unwrap();
                        if sqe.nsid() == 2 {
                            invalidate = false;
                        }
                    }
                    _ => status = Status::generic(nvme::GenericStatus::InvalidOpcode).with_dnr(),
                }
                // Re-post the capsule buffer, then answer.
                let sge = Sge {
                    addr: rmr.addr() + (slot * RECV_LEN) as u64,
                    length: RECV_LEN as u32,
                    lkey: rmr.lkey(),
                };
                ctx.post_recv(
                    qp,
                    &RecvWr {
                        wr_id: slot as u64,
                        sg_list: SgList::one(sge),
                    },
                )
                .unwrap();
                let cqe = Cqe::new(sqe.cid(), 1, sqhd, status, 0);
                cmr.write(0, &cqe.to_array());
                let op = if invalidate {
                    SendOp::SendWithInv {
                        invalidate_rkey: sgl.key(),
                    }
                } else {
                    SendOp::Send
                };
                let wr = SendWr {
                    wr_id: 0x300,
                    op,
                    sg_list: SgList::one(Sge {
                        addr: cmr.addr(),
                        length: 16,
                        lkey: cmr.lkey(),
                    }),
                    flags: SendFlags::SIGNALED,
                };
                ctx.post_send(qp, &wr).unwrap();
                wait_send(&mut ctx, 0x300, &mut wcs, &mut pending);
            }
        }
    });
    FakeTarget {
        stop,
        disconnected,
        thread: Some(thread),
    }
}

fn connect_host(host_ip: IpAddr, target_ip: IpAddr) -> NvmeRdmaQueue {
    let dev = SoftDevice::open(DeviceConfig::new(host_ip)).expect("host device");
    let cm = dev.cm().expect("host CM");
    let ctx = dev.open_context(0).unwrap();
    let mut cfg = QueueConfig::new(1, DEPTH, MAX_IO, SocketAddr::new(target_ip, 4420));
    cfg.in_capsule_bytes = 4096;
    let (pd, pool) = pool_on(&dev);
    NvmeRdmaQueue::connect(ctx, &cm, cfg, pd, &pool).expect("queue connects")
}

/// The host's protection domain and a 1 MiB buffer pool on `dev`.
fn pool_on(dev: &std::sync::Arc<SoftDevice>) -> (transport::verbs::Pd, BufferPool) {
    let pd = transport::verbs::Device::alloc_pd(&**dev).expect("PD");
    let pool = BufferPool::register::<transport::soft::SoftProvider>(
        dev,
        pd,
        1 << 20,
        RemoteAccess::Windows,
    )
    .expect("pool");
    (pd, pool)
}

/// A pool buffer of `len` bytes for `q`.
fn buf(q: &NvmeRdmaQueue, len: usize) -> IoBuf {
    q.pool().try_alloc(len).unwrap().expect("pool space")
}

fn wait_for(q: &mut NvmeRdmaQueue, cid: u16) -> Result<Cqe, HostError> {
    wait_buf(q, cid).0
}

fn wait_buf(q: &mut NvmeRdmaQueue, cid: u16) -> (Result<Cqe, HostError>, Option<IoBuf>) {
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut out: Vec<QueueCompletion> = Vec::new();
    loop {
        q.poll(&mut out);
        if let Some(i) = out.iter().position(|c| c.cid == cid) {
            let c = out.swap_remove(i);
            return (c.result, c.buf);
        }
        assert!(Instant::now() < deadline, "command {cid} did not complete");
    }
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

#[test]
fn write_read_back_through_every_data_path() {
    let _t = start_target("127.0.0.21".parse().unwrap());
    let mut q = connect_host("127.0.0.22".parse().unwrap(), "127.0.0.21".parse().unwrap());
    assert_eq!(q.max_outstanding(), usize::from(DEPTH) - 1);
    // 512 B and 4 KiB writes go in-capsule; 32 KiB and 64 KiB are read by the target.
    for (i, &len) in [512usize, 4096, 32768, 65536].iter().enumerate() {
        let slba = (i as u64) * 256;
        let data = pattern(len, i as u8 + 1);
        let nlb = (len / 512 - 1) as u16;
        let cid = q
            .submit_with(
                Sqe::write(0, 1, slba, nlb, false),
                DataDir::HostToController { len },
                |b| b[..len].copy_from_slice(&data),
            )
            .unwrap();
        wait_for(&mut q, cid).unwrap();
        let b = buf(&q, len);
        let addr = b.addr();
        let cid = q
            .submit(
                Sqe::read(0, 1, slba, nlb, false),
                DataDir::ControllerToHost { len },
                Some(b),
            )
            .unwrap();
        let key = q.window_key(cid).unwrap();
        let (cqe, back) = wait_buf(&mut q, cid);
        let back = back.expect("the buffer comes back");
        assert_eq!(cqe.unwrap().cid(), cid);
        assert_eq!(back.addr(), addr, "the same buffer: no copy");
        assert_eq!(&back[..len], &data[..], "read back {len} bytes");
        // The key the target used is dead once the command completed.
        let dev = q.context().device().clone();
        assert!(dev
            .keys()
            .check_remote(
                q.pd().0,
                q.qp_num(),
                key,
                addr,
                len as u64,
                AccessFlags::REMOTE_WRITE
            )
            .is_err());
    }
}

#[test]
fn plain_send_response_gets_local_invalidate() {
    let _t = start_target("127.0.0.23".parse().unwrap());
    let mut q = connect_host("127.0.0.24".parse().unwrap(), "127.0.0.23".parse().unwrap());
    // NSID 2: the fake target answers with a plain SEND.
    let b = buf(&q, 4096);
    let addr = b.addr();
    let cid = q
        .submit(
            Sqe::read(0, 2, 0, 7, false),
            DataDir::ControllerToHost { len: 4096 },
            Some(b),
        )
        .unwrap();
    let key = q.window_key(cid).unwrap();
    let dev = q.context().device().clone();
    assert!(dev
        .keys()
        .check_remote(
            q.pd().0,
            q.qp_num(),
            key,
            addr,
            4096,
            AccessFlags::REMOTE_WRITE
        )
        .is_ok());
    wait_for(&mut q, cid).unwrap();
    assert!(dev
        .keys()
        .check_remote(
            q.pd().0,
            q.qp_num(),
            key,
            addr,
            4096,
            AccessFlags::REMOTE_WRITE
        )
        .is_err());
    // The window binds again with the next key.
    let cid2 = q
        .submit_cid(
            cid,
            Sqe::read(0, 1, 0, 7, false),
            DataDir::ControllerToHost { len: 4096 },
            Some(buf(&q, 4096)),
        )
        .map(|_| cid)
        .unwrap();
    assert_ne!(q.window_key(cid2), Some(key));
    wait_for(&mut q, cid2).unwrap();
}

#[test]
fn sq_flow_control_and_errors() {
    let _t = start_target("127.0.0.25".parse().unwrap());
    let mut q = connect_host("127.0.0.26".parse().unwrap(), "127.0.0.25".parse().unwrap());
    let mut cids = Vec::new();
    for i in 0..q.max_outstanding() {
        cids.push(
            q.submit_with(
                Sqe::read(0, 1, i as u64, 0, false),
                DataDir::ControllerToHost { len: 512 },
                |_| {},
            )
            .unwrap(),
        );
    }
    // SQ full (size 8 keeps one entry empty) until completions return SQHD.
    assert!(matches!(
        q.submit_with(Sqe::flush(0, 1), DataDir::None, |_| {}),
        Err(QueueError::Full)
    ));
    for cid in cids {
        wait_for(&mut q, cid).unwrap();
    }
    assert_eq!(q.outstanding(), 0);
    // An NVMe error status comes back typed.
    let cid = q
        .submit_with(Sqe::flush(0, 1), DataDir::None, |_| {})
        .unwrap();
    match wait_for(&mut q, cid) {
        Err(HostError::Nvme {
            status, command, ..
        }) => {
            assert_eq!(
                status.as_generic(),
                Some(nvme::GenericStatus::InvalidOpcode)
            );
            assert!(status.dnr);
            assert_eq!(command, "Flush");
        }
        other => panic!("expected an NVMe error, got {other:?}"),
    }
    assert!(matches!(
        q.submit_with(
            Sqe::read(0, 1, 0, 0, false),
            DataDir::ControllerToHost { len: MAX_IO + 1 },
            |_| {},
        ),
        Err(QueueError::TooLarge { .. })
    ));
}

#[test]
fn dead_peer_fails_commands_with_transport_error() {
    let _t = start_target("127.0.0.27".parse().unwrap());
    let mut q = connect_host("127.0.0.28".parse().unwrap(), "127.0.0.27".parse().unwrap());
    // The target takes this one (ACKs it) and vanishes: no response.
    let lost = q
        .submit_with(
            Sqe::read(0, 4, 0, 0, false),
            DataDir::ControllerToHost { len: 512 },
            |_| {},
        )
        .unwrap();
    let mut out = Vec::new();
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_millis(50) {
        q.poll(&mut out);
    }
    assert!(out.is_empty());
    // The next capsule is never acknowledged: retries run out (IBTA §9.7.6.1.3).
    let next = q
        .submit_with(Sqe::flush(0, 1), DataDir::None, |_| {})
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while out.len() < 2 && Instant::now() < deadline {
        q.poll(&mut out);
    }
    assert_eq!(out.len(), 2, "both commands fail");
    for c in &out {
        assert!([lost, next].contains(&c.cid));
        match &c.result {
            Err(HostError::Transport { qid: 1, status, .. }) => {
                assert_eq!(*status, WcStatus::RetryExcErr)
            }
            other => panic!("expected a transport error, got {other:?}"),
        }
    }
    assert!(q.is_dead());
    assert!(matches!(
        q.submit_with(Sqe::flush(0, 1), DataDir::None, |_| {}),
        Err(QueueError::Dead { qid: 1, .. })
    ));
}

#[test]
fn target_disconnect_fails_outstanding_commands() {
    let _t = start_target("127.0.0.29".parse().unwrap());
    let mut q = connect_host("127.0.0.30".parse().unwrap(), "127.0.0.29".parse().unwrap());
    let cid = q
        .submit_with(
            Sqe::read(0, 5, 0, 0, false),
            DataDir::ControllerToHost { len: 512 },
            |_| {},
        )
        .unwrap();
    match wait_for(&mut q, cid) {
        Err(HostError::TargetDisconnected { qid: 1 }) => {}
        other => panic!("expected the target's disconnect, got {other:?}"),
    }
    assert!(q.is_dead() && q.peer_disconnected());
    assert!(matches!(
        q.submit_with(Sqe::flush(0, 1), DataDir::None, |_| {}),
        Err(QueueError::Dead { .. })
    ));
}

/// A target whose NVMe/RDMA accept carries CRQSIZE 1 (a queue needs at least 2): the
/// connection is established, then the host refuses the accept and disconnects, as a
/// Linux host on librdmacm does.
#[test]
fn an_unusable_accept_is_refused_and_disconnected() {
    let (t_ip, h_ip): (IpAddr, IpAddr) =
        ("127.0.0.31".parse().unwrap(), "127.0.0.32".parse().unwrap());
    let target = start_target_with(t_ip, 1);
    let dev = SoftDevice::open(DeviceConfig::new(h_ip)).expect("host device");
    let cm = dev.cm().expect("host CM");
    let cfg = QueueConfig::new(1, DEPTH, MAX_IO, SocketAddr::new(t_ip, 4420));
    let (pd, pool) = pool_on(&dev);
    let e = NvmeRdmaQueue::connect(dev.open_context(0).unwrap(), &cm, cfg, pd, &pool).unwrap_err();
    assert!(
        matches!(&e, HostError::Protocol(m) if m.contains("CRQSIZE 1")),
        "{e}"
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    while !target.disconnected.load(Ordering::Acquire) {
        assert!(Instant::now() < deadline, "the target saw no disconnect");
        std::thread::sleep(Duration::from_millis(5));
    }
}
