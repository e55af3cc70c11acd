//! `nvmf connect --ublk`: each namespace of the connected controller a local block
//! device `/dev/ublkbN` through the kernel's ublk driver (Linux >= 6.0,
//! `CONFIG_BLK_DEV_UBLK`, module `ublk_drv`), served by this process over the host
//! library: a userspace NVMe-oF host that `mkfs` and `mount` can use without
//! nvme-rdma in the kernel.
//!
//! The ublk protocol is the `libublk` crate's: one ublk device per namespace
//! ([`start`]), its logical block size and capacity from Identify Namespace, discard
//! and write zeroes advertised where the controller's ONCS has Dataset Management
//! and Write Zeroes, a volatile write cache (so the kernel sends FLUSH and FUA) where
//! VWC says there is one. Each ublk queue is a thread of libublk's with one smol
//! task per tag; a request is mapped to its NVMe command by [`super::ublk_map`], run
//! on the tokio runtime of the host (ublk queue `q` on the controller's I/O queue
//! `q` modulo their number), and its completion wakes the ublk queue's io_uring
//! through an eventfd read. Data is copied once each way between the ublk buffer
//! and the command (write: ublk buffer -> a Vec -> the host's registered pool
//! buffer; read: the reverse). A failed command completes its request with `-EIO`
//! (the first few failures are printed), never a panic.
//!
//! Built with the `ublk` feature (libublk's bindings need libclang at build time, as
//! the `verbs` feature's do); the sans-IO half is [`super::ublk_map`].
//!
//! Teardown ([`Devices::stop`], on SIGINT/SIGTERM): every device is stopped and
//! deleted (its queues drain, `/dev/ublkbN` goes away), then the caller disconnects
//! the controller.
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::rc::Rc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use io_uring::{opcode, types};
use libublk::ctrl::{UblkCtrl, UblkCtrlBuilder};
use libublk::io::{UblkDev, UblkQueue};
use libublk::{BufDesc, UblkError, UblkFlags};
use nvmf_initiator::{HostError, Namespace};

use super::ublk_map::{self, BlockOp, Features, Geometry, Options};

/// Largest request in bytes (the ublk I/O buffer of each tag): 512 KiB.
pub const IO_BUF_BYTES: u32 = 512 << 10;
/// How long [`start`] waits for one device to come up.
const START_TIMEOUT: Duration = Duration::from_secs(60);
/// Failed commands printed before the rest are only counted.
const PRINTED_FAILURES: u32 = 10;

/// One device that came up: namespace `nsid` is `path` (`/dev/ublkb<dev_id>`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ready {
    /// Namespace ID.
    pub nsid: u32,
    /// The ublk device ID (N of /dev/ublkbN).
    pub dev_id: u32,
    /// The block device node.
    pub path: String,
    /// The namespace's shape.
    pub geometry: Geometry,
}

/// The live ublk devices of one controller; [`Devices::stop`] tears them down.
pub struct Devices {
    ctrls: Vec<Arc<UblkCtrl>>,
    threads: Vec<JoinHandle<()>>,
    /// The devices, in namespace order.
    pub ready: Vec<Ready>,
}

impl std::fmt::Debug for Devices {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Devices")
            .field("ready", &self.ready)
            .finish()
    }
}

impl Devices {
    /// Stops and deletes every device (its queues drain first: requests in flight
    /// complete), and waits for their threads. Errors: the devices whose deletion
    /// the driver refused (each named).
    pub fn stop(self) -> Result<(), String> {
        ctrl_ring().map_err(|e| format!("deleting ublk devices: {}", ublk_error(&e)))?;
        for c in &self.ctrls {
            // The queues see the device stopping and end once their tags are idle.
            let _ = c.kill_dev();
        }
        for t in self.threads {
            let _ = t.join();
        }
        let mut failed = Vec::new();
        for (c, r) in self.ctrls.iter().zip(&self.ready) {
            if let Err(e) = c.del_dev() {
                // Already gone (deleted from elsewhere) is not an error.
                if !matches!(e, UblkError::OtherError(n) if n == -libc::ENOENT) {
                    failed.push(format!("{}: {e:?}", r.path));
                }
            }
        }
        if failed.is_empty() {
            Ok(())
        } else {
            Err(format!("deleting ublk devices: {}", failed.join("; ")))
        }
    }
}

enum Started {
    Up(Ready),
    Failed(String),
}

/// Adds and starts one ublk device per namespace of `namespaces`, each served on
/// `rt` (the host's runtime). Blocks until every device is up (the driver's
/// START_DEV done: `/dev/ublkbN` exists), at most 60 s each. Errors: the driver's
/// refusal to add or start a device, a namespace whose block size a block device
/// cannot have (the devices already up are torn down first).
pub fn start(
    rt: tokio::runtime::Handle,
    namespaces: Vec<Namespace>,
    features: Features,
    opts: Options,
) -> Result<Devices, String> {
    opts.check()?;
    let mut devices = Devices {
        ctrls: Vec::new(),
        threads: Vec::new(),
        ready: Vec::new(),
    };
    for ns in namespaces {
        match start_one(&rt, ns, features, opts) {
            Ok((ctrl, thread, ready)) => {
                devices.ctrls.push(ctrl);
                devices.threads.push(thread);
                devices.ready.push(ready);
            }
            Err(e) => {
                let _ = devices.stop();
                return Err(e);
            }
        }
    }
    Ok(devices)
}

fn start_one(
    rt: &tokio::runtime::Handle,
    ns: Namespace,
    features: Features,
    opts: Options,
) -> Result<(Arc<UblkCtrl>, JoinHandle<()>, Ready), String> {
    let nsid = ns.nsid;
    let geometry = Geometry {
        lba_size: ns.block_size,
        nlb: ns.nlb,
    };
    if !geometry.lba_size.is_power_of_two() || geometry.lba_size < 512 {
        return Err(format!(
            "--ublk: namespace {nsid} has {}-byte logical blocks: a block device needs a \
             power of two >= 512",
            geometry.lba_size
        ));
    }
    let ctrl = UblkCtrlBuilder::default()
        .name("nvmf")
        .nr_queues(opts.queues)
        .depth(opts.depth)
        .io_buf_bytes(IO_BUF_BYTES)
        .dev_flags(UblkFlags::UBLK_DEV_F_ADD_DEV)
        .build()
        .map_err(|e| {
            format!(
                "--ublk: adding a ublk device for namespace {nsid}: {}",
                ublk_error(&e)
            )
        })?;
    let ctrl = Arc::new(ctrl);
    let (tx, rx) = mpsc::channel::<Started>();
    let thread = {
        let ctrl = ctrl.clone();
        let rt = rt.clone();
        let tx_fail = tx.clone();
        std::thread::Builder::new()
            .name(format!("ublk-ns{nsid}"))
            .spawn(move || {
                // SIGINT/SIGTERM go to the main thread's handler: an io_uring_enter of
                // a queue (this thread's children inherit the mask) interrupted by one
                // would end the queue before the teardown drains it.
                let mut set = nix::sys::signal::SigSet::empty();
                set.add(nix::sys::signal::Signal::SIGINT);
                set.add(nix::sys::signal::Signal::SIGTERM);
                let _ = set.thread_block();
                if let Err(e) = ctrl_ring() {
                    let _ = tx_fail.send(Started::Failed(ublk_error(&e)));
                    return;
                }
                let tgt = move |dev: &mut UblkDev| {
                    set_params(dev, geometry, features);
                    Ok(())
                };
                let q = move |qid: u16, dev: &UblkDev| {
                    queue(qid, dev, ns.on_queue(qid as usize), rt.clone(), geometry)
                };
                let up = move |c: &UblkCtrl| {
                    let dev_id = c.dev_info().dev_id;
                    let _ = tx.send(Started::Up(Ready {
                        nsid,
                        dev_id,
                        path: c.get_bdev_path(),
                        geometry,
                    }));
                };
                if let Err(e) = ctrl.run_target(tgt, q, up) {
                    let _ = tx_fail.send(Started::Failed(ublk_error(&e)));
                }
            })
            .map_err(|e| format!("--ublk: starting the ublk thread: {e}"))?
    };
    match rx.recv_timeout(START_TIMEOUT) {
        Ok(Started::Up(r)) => Ok((ctrl, thread, r)),
        Ok(Started::Failed(e)) => {
            let _ = thread.join();
            let _ = ctrl.del_dev();
            Err(format!(
                "--ublk: starting the ublk device of namespace {nsid}: {e}"
            ))
        }
        Err(mpsc::RecvTimeoutError::Disconnected) => {
            let _ = thread.join();
            let _ = ctrl.del_dev();
            Err(format!(
                "--ublk: the ublk thread of namespace {nsid} ended before its device came up"
            ))
        }
        Err(mpsc::RecvTimeoutError::Timeout) => {
            let _ = ctrl.kill_dev();
            let _ = thread.join();
            let _ = ctrl.del_dev();
            Err(format!(
                "--ublk: the ublk device of namespace {nsid} did not come up within {} s",
                START_TIMEOUT.as_secs()
            ))
        }
    }
}

/// libublk's control commands go through an io_uring of the calling thread (made by
/// `UblkCtrl`'s constructor in its own thread): a thread that starts, stops or deletes
/// a device made elsewhere makes its own first.
fn ctrl_ring() -> Result<(), UblkError> {
    libublk::ctrl::ublk_init_ctrl_task_ring(|ring| {
        if ring.is_none() {
            *ring = Some(
                io_uring::IoUring::<io_uring::squeue::Entry128>::builder()
                    .build(32)
                    .map_err(UblkError::IOError)?,
            );
        }
        Ok(())
    })
}

fn ublk_error(e: &UblkError) -> String {
    match e {
        UblkError::OtherError(n) if *n < 0 => {
            format!("{} (errno {})", std::io::Error::from_raw_os_error(-n), -n)
        }
        UblkError::IOError(io) => io.to_string(),
        e => format!("{e} ({e:?})"),
    }
}

/// The ublk parameters of a namespace: block size and capacity (Identify Namespace),
/// discard and write zeroes where the controller has them, the write cache.
fn set_params(dev: &mut UblkDev, g: Geometry, f: Features) {
    use libublk::sys;
    let shift = g.lba_shift();
    let max_sectors = dev.dev_info.max_io_buf_bytes >> 9;
    // One Deallocate range (NLB is 32 bits) or a few Write Zeroes commands per
    // request: 2 GiB, in sectors.
    let max_special = 1u32 << 22;
    let mut attrs = 0;
    if f.volatile_cache {
        attrs |= sys::UBLK_ATTR_VOLATILE_CACHE | sys::UBLK_ATTR_FUA;
    }
    let mut types = sys::UBLK_PARAM_TYPE_BASIC;
    let mut discard = sys::ublk_param_discard::default();
    if f.discard || f.write_zeroes {
        types |= sys::UBLK_PARAM_TYPE_DISCARD;
        if f.discard {
            discard.discard_granularity = g.lba_size;
            discard.max_discard_sectors = max_special;
            discard.max_discard_segments = 1;
        }
        if f.write_zeroes {
            discard.max_write_zeroes_sectors = max_special;
        }
    }
    dev.tgt.dev_size = g.bytes();
    dev.tgt.params = sys::ublk_params {
        types,
        basic: sys::ublk_param_basic {
            attrs,
            logical_bs_shift: shift,
            physical_bs_shift: shift,
            io_opt_shift: shift,
            io_min_shift: shift,
            max_sectors,
            dev_sectors: g.bytes() >> 9,
            ..Default::default()
        },
        discard,
        ..Default::default()
    };
}

/// One ublk queue (its own thread, from libublk): a smol task per tag, driven with
/// the queue's io_uring until the device stops.
fn queue(qid: u16, dev: &UblkDev, ns: Namespace, rt: tokio::runtime::Handle, geometry: Geometry) {
    let q = match UblkQueue::new(qid, dev) {
        Ok(q) => Rc::new(q),
        Err(e) => {
            eprintln!(
                "nvmf: ublk queue {qid} of namespace {}: {}",
                ns.nsid,
                ublk_error(&e)
            );
            return;
        }
    };
    let exe = Rc::new(smol::LocalExecutor::new());
    let mut tasks = Vec::new();
    for tag in q.tags() {
        let q = q.clone();
        let ns = ns.clone();
        let rt = rt.clone();
        tasks.push(exe.spawn(async move {
            match io_task(&q, tag, &ns, &rt, geometry).await {
                Ok(()) | Err(UblkError::QueueIsDown) => {}
                Err(e) => eprintln!(
                    "nvmf: ublk queue {qid} tag {tag} of namespace {}: {}",
                    ns.nsid,
                    ublk_error(&e)
                ),
            }
        }));
    }
    let run = exe.clone();
    smol::block_on(exe.run(async move {
        let tick = || while run.try_tick() {};
        let done = || tasks.iter().all(|t| t.is_finished());
        if let Err(e) = libublk::wait_and_handle_io_events(&q, Some(20), tick, done).await {
            eprintln!("nvmf: ublk queue {qid}: {}", ublk_error(&e));
        }
    }));
}

/// What a command run on the runtime hands back to its tag: the bytes read, or the
/// error.
type Outcome = Result<Vec<u8>, HostError>;

/// A tag's wake-up: the runtime's task stores its outcome in `slot` and writes the
/// eventfd, whose read the tag has queued on the ublk queue's io_uring.
struct Wake {
    fd: Arc<OwnedFd>,
    slot: Arc<Mutex<Option<Outcome>>>,
}

impl Wake {
    fn new() -> Result<Self, UblkError> {
        // SAFETY: eventfd(2) returns a new descriptor that nothing else owns, or -1.
        let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC) };
        if fd < 0 {
            return Err(UblkError::IOError(std::io::Error::last_os_error()));
        }
        Ok(Wake {
            // SAFETY: `fd` is a fresh descriptor owned by nobody else.
            fd: Arc::new(unsafe { OwnedFd::from_raw_fd(fd) }),
            slot: Arc::new(Mutex::new(None)),
        })
    }
}

fn signal(fd: &OwnedFd) {
    let one = 1u64.to_ne_bytes();
    // SAFETY: writes 8 bytes from a live buffer to an eventfd we hold open.
    let _ = unsafe { libc::write(fd.as_raw_fd(), one.as_ptr().cast(), one.len()) };
}

async fn io_task(
    q: &UblkQueue<'_>,
    tag: u16,
    ns: &Namespace,
    rt: &tokio::runtime::Handle,
    geometry: Geometry,
) -> Result<(), UblkError> {
    let mut buf = libublk::helpers::IoBuf::<u8>::new(q.dev.dev_info.max_io_buf_bytes as usize);
    let wake = Wake::new()?;
    q.submit_io_prep_cmd(tag, BufDesc::Slice(buf.as_slice()), 0, Some(&buf))
        .await?;
    loop {
        let iod = q.get_iod(tag);
        let (op_flags, start, sectors) = (iod.op_flags, iod.start_sector, iod.nr_sectors);
        let res = serve(
            q,
            ns,
            rt,
            geometry,
            (op_flags, start, sectors),
            buf.as_mut_slice(),
            &wake,
        )
        .await;
        q.submit_io_commit_cmd(tag, BufDesc::Slice(buf.as_slice()), res)
            .await?;
    }
}

static FAILURES: AtomicU32 = AtomicU32::new(0);

/// Serves one request: the errno or byte count the driver is answered with.
async fn serve(
    q: &UblkQueue<'_>,
    ns: &Namespace,
    rt: &tokio::runtime::Handle,
    geometry: Geometry,
    (op_flags, start, sectors): (u32, u64, u32),
    buf: &mut [u8],
    wake: &Wake,
) -> i32 {
    let op = match ublk_map::map(geometry, op_flags, start, sectors) {
        Ok(op) => op,
        Err(e) => {
            report(ns.nsid, &e.to_string());
            return e.errno();
        }
    };
    let len = op.data_bytes(geometry.lba_size);
    if len > buf.len() {
        report(
            ns.nsid,
            &format!("{len} bytes exceed the {}-byte ublk buffer", buf.len()),
        );
        return -libc::EINVAL;
    }
    let data = match op {
        BlockOp::Write { .. } => buf[..len].to_vec(),
        _ => Vec::new(),
    };
    {
        let ns = ns.clone();
        let fd = wake.fd.clone();
        let slot = wake.slot.clone();
        rt.spawn(async move {
            let out = run(&ns, op, data).await;
            if let Ok(mut s) = slot.lock() {
                *s = Some(out);
            }
            signal(&fd);
        });
    }
    let mut count = [0u8; 8];
    let outcome = loop {
        let sqe = opcode::Read::new(types::Fd(wake.fd.as_raw_fd()), count.as_mut_ptr(), 8).build();
        let r = q.ublk_submit_sqe(sqe).await;
        let taken = wake.slot.lock().ok().and_then(|mut s| s.take());
        match taken {
            Some(o) => break o,
            // Interrupted before the command finished: wait again.
            None if r == -libc::EINTR || r == -libc::EAGAIN || r == 8 => continue,
            None => {
                break Err(HostError::Protocol(format!(
                    "waiting on the eventfd: errno {}",
                    -r
                )))
            }
        }
    };
    match outcome {
        Ok(read) => {
            if let BlockOp::Read { .. } = op {
                if read.len() != len {
                    report(ns.nsid, "a read came back short");
                    return -libc::EIO;
                }
                buf[..len].copy_from_slice(&read);
            }
            op.success_result(geometry.lba_size)
        }
        Err(e) => {
            report(ns.nsid, &format!("{op:?}: {e}"));
            -libc::EIO
        }
    }
}

fn report(nsid: u32, msg: &str) {
    let n = FAILURES.fetch_add(1, Ordering::Relaxed);
    if n < PRINTED_FAILURES {
        eprintln!(
            "nvmf: ublk namespace {nsid}: request failed (-EIO or -EINVAL to the kernel): {msg}"
        );
    } else if n == PRINTED_FAILURES {
        eprintln!("nvmf: ublk: more failed requests; not printing them");
    }
}

/// The NVMe command of `op` on `ns`.
async fn run(ns: &Namespace, op: BlockOp, data: Vec<u8>) -> Outcome {
    let bs = ns.block_size as usize;
    match op {
        BlockOp::Read { slba, nlb } => {
            let mut v = vec![0u8; nlb as usize * bs];
            ns.read(slba, &mut v).await?;
            Ok(v)
        }
        BlockOp::Write { slba, fua, .. } => {
            ns.write(slba, &data, fua).await?;
            Ok(Vec::new())
        }
        BlockOp::Flush => {
            ns.flush().await?;
            Ok(Vec::new())
        }
        BlockOp::Deallocate { slba, nlb } => {
            ns.deallocate(&[(slba, nlb)]).await?;
            Ok(Vec::new())
        }
        BlockOp::WriteZeroes { slba, nlb } => {
            ns.write_zeroes(slba, nlb).await?;
            Ok(Vec::new())
        }
    }
}
