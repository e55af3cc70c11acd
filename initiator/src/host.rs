//! The public async API: [`Host`] and [`Namespace`].
//!
//! A dedicated poll thread owns the controller and the I/O queues (run to completion:
//! it busy-polls while commands are outstanding, otherwise it sleeps on its request
//! channel for at most [`IDLE_WAIT`], so an idle host does not burn a core). Requests
//! arrive over a crossbeam channel; answers go back over tokio oneshot channels. The
//! thread also sends Keep Alive every KATO/2 on the admin queue.
//!
//! Data is copied between the caller's buffers and the queues' registered slot
//! buffers; requests larger than the per-command limit (`max_io_bytes`, MDTS, 65536
//! blocks, the keyed SGL length) are split ([`crate::split`]) and run concurrently.
use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam::channel::{self, Receiver, RecvTimeoutError, Sender, TryRecvError};
use nvme::{DsmRange, Sqe};
use tokio::sync::oneshot;
use transport::soft::SoftProvider;
use transport::verbs::{Device, Provider};
use zerocopy::IntoBytes;

use crate::capsule::DataDir;
use crate::controller::Controller;
use crate::error::{HostError, QueueError};
use crate::identify::ControllerInfo;
use crate::options::HostOptions;
use crate::queue::{NvmeRdmaQueue, QueueCompletion};
use crate::split;
use crate::sync_host::SyncHost;

/// Longest sleep of an idle poll thread between checks of its timers.
pub const IDLE_WAIT: Duration = Duration::from_millis(10);

type Reply = oneshot::Sender<Result<Vec<u8>, HostError>>;

/// One command for the poll thread: an SQE, its data and where to answer. For
/// controller-to-host data the answer carries the bytes read.
struct Command {
    sqe: Sqe,
    /// Host-to-controller data (copied into the slot buffer at submission).
    write: Option<Vec<u8>>,
    /// Bytes of controller-to-host data.
    read_len: usize,
    reply: Reply,
}

impl Command {
    fn data(&self) -> DataDir {
        match &self.write {
            Some(w) => DataDir::HostToController { len: w.len() },
            None if self.read_len > 0 => DataDir::ControllerToHost { len: self.read_len },
            None => DataDir::None,
        }
    }
}

enum Msg {
    Admin(Command),
    Io(Command),
    Disconnect(oneshot::Sender<Result<(), HostError>>),
}

struct Client {
    tx: Sender<Msg>,
    /// Bytes per command at most.
    max_transfer: usize,
}

impl Client {
    /// Hands the command to the poll thread now; the returned future answers it.
    fn send(&self, admin: bool, sqe: Sqe, write: Option<Vec<u8>>, read_len: usize) -> Pending {
        let (reply, rx) = oneshot::channel();
        let cmd = Command {
            sqe,
            write,
            read_len,
            reply,
        };
        let sent = self
            .tx
            .send(if admin { Msg::Admin(cmd) } else { Msg::Io(cmd) })
            .is_ok();
        Pending {
            rx: sent.then_some(rx),
        }
    }

    async fn call(
        &self,
        admin: bool,
        sqe: Sqe,
        write: Option<Vec<u8>>,
        read_len: usize,
    ) -> Result<Vec<u8>, HostError> {
        self.send(admin, sqe, write, read_len).wait().await
    }
}

/// A command handed to the poll thread.
struct Pending {
    rx: Option<oneshot::Receiver<Result<Vec<u8>, HostError>>>,
}

impl Pending {
    async fn wait(self) -> Result<Vec<u8>, HostError> {
        match self.rx {
            Some(rx) => rx.await.map_err(|_| HostError::Disconnected)?,
            None => Err(HostError::Disconnected),
        }
    }
}

/// A connected NVMe-oF host (one controller) on provider `P`: see the module docs.
///
/// The provider is a type parameter that defaults to the soft provider, so `Host` and
/// [`Host::connect`] are the soft provider's; [`Host::connect_with`] takes another
/// (`Host::connect_with(VerbsProvider, opts)` with the transport's `verbs` feature) and
/// [`Host::connect_on`] a device the caller opened. The API is the same on every
/// provider.
pub struct Host<P: Provider = SoftProvider> {
    client: Arc<Client>,
    info: ControllerInfo,
    thread: Option<std::thread::JoinHandle<()>>,
    _provider: std::marker::PhantomData<fn() -> P>,
}

impl<P: Provider> std::fmt::Debug for Host<P> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Host")
            .field("subnqn", &self.info.subnqn)
            .field("cntlid", &self.info.cntlid)
            .finish()
    }
}

impl Host<SoftProvider> {
    /// Connects on the soft provider: [`Host::connect_with`]`(SoftProvider, opts)`
    /// (`opts.faults` injected on the host's device).
    ///
    /// Errors: any [`HostError`] of the bring-up (refused Connect, CM reject, timeout).
    pub async fn connect(opts: HostOptions) -> Result<Self, HostError> {
        Self::connect_with(SoftProvider, opts).await
    }
}

impl<P: Provider> Host<P> {
    /// Connects to the subsystem `opts.subnqn` at `opts.traddr` over provider `P`:
    /// device ([`crate::device::open_device`]), connection manager, admin queue
    /// bring-up and the I/O queues (see [`SyncHost::connect_on`]), on a new poll
    /// thread; the async caller is not blocked meanwhile.
    ///
    /// Errors: any [`HostError`] of the device or the bring-up (refused Connect, CM
    /// reject, timeout).
    pub async fn connect_with(_provider: P, opts: HostOptions) -> Result<Self, HostError> {
        Self::start(None, opts).await
    }

    /// Like [`Host::connect_with`] on `dev`, a device the caller opened with at least
    /// `1 + opts.io_queues` poll groups.
    pub async fn connect_on<D>(dev: Arc<D>, opts: HostOptions) -> Result<Self, HostError>
    where
        D: Device<Provider = P>,
        P: Provider<Device = D>,
    {
        Self::start(Some(dev), opts).await
    }

    async fn start(dev: Option<Arc<P::Device>>, opts: HostOptions) -> Result<Self, HostError> {
        let (tx, rx) = channel::unbounded();
        let (ready_tx, ready_rx) = oneshot::channel();
        let thread = std::thread::Builder::new()
            .name("nvmf-host".into())
            .spawn(move || {
                let host = match dev {
                    Some(d) => SyncHost::<P>::connect_on(&d, &opts),
                    None => SyncHost::<P>::connect_with_options(&opts, &P::Options::default()),
                };
                match host {
                    Ok(h) => {
                        let (_dev, controller, queues) = h.into_parts();
                        let max_transfer = queues
                            .iter()
                            .map(|q| q.max_io_bytes())
                            .min()
                            .unwrap_or(4096);
                        let info = controller.info().clone();
                        if ready_tx.send(Ok((info, max_transfer))).is_err() {
                            let _ = controller.shutdown(queues);
                            return;
                        }
                        PollThread::new(controller, queues, rx).run();
                    }
                    Err(e) => {
                        let _ = ready_tx.send(Err(e));
                    }
                }
            })
            .map_err(|e| HostError::Device(format!("spawning the poll thread: {e}")))?;
        let (info, max_transfer) = ready_rx.await.map_err(|_| HostError::Disconnected)??;
        Ok(Host {
            client: Arc::new(Client { tx, max_transfer }),
            info,
            thread: Some(thread),
            _provider: std::marker::PhantomData,
        })
    }

    /// Identify Controller as read at connect time.
    pub fn controller_info(&self) -> &ControllerInfo {
        &self.info
    }

    /// Identify Controller (CNS 01h), read now.
    pub async fn identify_controller(&self) -> Result<ControllerInfo, HostError> {
        let sqe = Sqe::identify(0, nvme::IdentifyCns::Controller, 0, 0);
        let data = self
            .client
            .call(true, sqe, None, crate::identify::IDENTIFY_LEN)
            .await?;
        ControllerInfo::parse(&data).map_err(HostError::Protocol)
    }

    /// The active namespace IDs (Identify CNS 02h).
    pub async fn namespaces(&self) -> Result<Vec<u32>, HostError> {
        let sqe = Sqe::identify(0, nvme::IdentifyCns::ActiveNamespaceList, 0, 0);
        let data = self
            .client
            .call(true, sqe, None, crate::identify::IDENTIFY_LEN)
            .await?;
        Ok(crate::identify::parse_ns_list(&data))
    }

    /// Namespace `nsid` (Identify Namespace: size and block size).
    pub async fn namespace(&self, nsid: u32) -> Result<Namespace, HostError> {
        let sqe = Sqe::identify(0, nvme::IdentifyCns::Namespace, nsid, 0);
        let data = self
            .client
            .call(true, sqe, None, crate::identify::IDENTIFY_LEN)
            .await?;
        let info = crate::identify::NamespaceInfo::parse(&data)
            .map_err(|e| HostError::Protocol(format!("namespace {nsid}: {e}")))?;
        Ok(Namespace {
            nsid,
            block_size: info.block_size,
            nlb: info.nsze,
            client: self.client.clone(),
        })
    }

    /// Disconnects: fails queued requests, disconnects the I/O queues, shuts the
    /// controller down (CC.SHN) and disconnects the admin queue.
    pub async fn disconnect(mut self) -> Result<(), HostError> {
        let (reply, rx) = oneshot::channel();
        self.client
            .tx
            .send(Msg::Disconnect(reply))
            .map_err(|_| HostError::Disconnected)?;
        let r = rx.await.map_err(|_| HostError::Disconnected)?;
        if let Some(t) = self.thread.take() {
            let _ = tokio::task::spawn_blocking(move || t.join()).await;
        }
        r
    }
}

impl<P: Provider> Drop for Host<P> {
    fn drop(&mut self) {
        if self.thread.is_some() {
            // Without an explicit disconnect the poll thread shuts down on its own.
            let (reply, _rx) = oneshot::channel();
            let _ = self.client.tx.send(Msg::Disconnect(reply));
        }
    }
}

/// One namespace of a [`Host`]: `nlb` logical blocks of `block_size` bytes.
#[derive(Clone)]
pub struct Namespace {
    /// Namespace ID.
    pub nsid: u32,
    /// Logical block size in bytes.
    pub block_size: u32,
    /// Size in logical blocks (NSZE).
    pub nlb: u64,
    client: Arc<Client>,
}

impl std::fmt::Debug for Namespace {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Namespace")
            .field("nsid", &self.nsid)
            .field("block_size", &self.block_size)
            .field("nlb", &self.nlb)
            .finish()
    }
}

impl Namespace {
    fn check(&self, slba: u64, len: usize) -> Result<u64, HostError> {
        let bs = u64::from(self.block_size);
        if len == 0 || !(len as u64).is_multiple_of(bs) {
            return Err(HostError::InvalidArgument(format!(
                "length {len} is not a non-zero multiple of the {bs}-byte block"
            )));
        }
        let nlb = len as u64 / bs;
        if slba.checked_add(nlb).is_none_or(|end| end > self.nlb) {
            return Err(HostError::InvalidArgument(format!(
                "blocks {slba}..+{nlb} beyond the namespace's {}",
                self.nlb
            )));
        }
        Ok(nlb)
    }

    fn chunk_bytes(&self) -> usize {
        split::max_command_bytes(self.block_size, self.client.max_transfer)
    }

    /// Reads `buf.len()` bytes (a multiple of the block size) from block `slba`
    /// (NVM Command Set 1.x §3.3.4).
    pub async fn read(&self, slba: u64, buf: &mut [u8]) -> Result<(), HostError> {
        self.check(slba, buf.len())?;
        let pieces: Vec<split::Piece> =
            split::split(slba, buf.len(), self.block_size, self.chunk_bytes()).collect();
        let mut waits = Vec::new();
        for p in &pieces {
            let sqe = Sqe::read(0, self.nsid, p.slba, p.nlb_0based(), false);
            waits.push(self.client.send(false, sqe, None, p.len));
        }
        let results = futures_join_all(waits).await;
        for (p, r) in pieces.iter().zip(results) {
            let data = r?;
            buf[p.byte_offset..p.byte_offset + p.len].copy_from_slice(&data[..p.len]);
        }
        Ok(())
    }

    /// Writes `data` (a multiple of the block size) at block `slba`; `fua` sets Force
    /// Unit Access (NVM Command Set 1.x §3.3.6).
    pub async fn write(&self, slba: u64, data: &[u8], fua: bool) -> Result<(), HostError> {
        self.check(slba, data.len())?;
        let mut waits = Vec::new();
        for p in split::split(slba, data.len(), self.block_size, self.chunk_bytes()) {
            let sqe = Sqe::write(0, self.nsid, p.slba, p.nlb_0based(), fua);
            let part = data[p.byte_offset..p.byte_offset + p.len].to_vec();
            waits.push(self.client.send(false, sqe, Some(part), 0));
        }
        for r in futures_join_all(waits).await {
            r?;
        }
        Ok(())
    }

    /// Flush (NVMe Base 2.x §7.1): volatile write cache contents of the namespace
    /// become non-volatile.
    pub async fn flush(&self) -> Result<(), HostError> {
        self.client
            .call(false, Sqe::flush(0, self.nsid), None, 0)
            .await
            .map(|_| ())
    }

    /// Write Zeroes of `nlb` blocks from `slba` (NVM Command Set 1.x §3.3.8), split
    /// into commands of at most 65536 blocks.
    pub async fn write_zeroes(&self, slba: u64, nlb: u64) -> Result<(), HostError> {
        if nlb == 0 || slba.checked_add(nlb).is_none_or(|e| e > self.nlb) {
            return Err(HostError::InvalidArgument(format!(
                "blocks {slba}..+{nlb} outside the namespace's {}",
                self.nlb
            )));
        }
        let mut waits = Vec::new();
        let mut at = slba;
        while at < slba + nlb {
            let n = (slba + nlb - at).min(split::MAX_NLB);
            waits.push(self.client.send(
                false,
                Sqe::write_zeroes(0, self.nsid, at, (n - 1) as u16, false),
                None,
                0,
            ));
            at += n;
        }
        for r in futures_join_all(waits).await {
            r?;
        }
        Ok(())
    }

    /// Dataset Management with Deallocate of `(slba, nlb)` ranges (NVM Command Set 1.x
    /// §3.3.3), 256 ranges per command.
    pub async fn deallocate(&self, ranges: &[(u64, u32)]) -> Result<(), HostError> {
        if ranges.is_empty() {
            return Ok(());
        }
        for &(s, n) in ranges {
            if s.checked_add(u64::from(n)).is_none_or(|e| e > self.nlb) {
                return Err(HostError::InvalidArgument(format!(
                    "range {s}..+{n} beyond the namespace's {}",
                    self.nlb
                )));
            }
        }
        let mut waits = Vec::new();
        for group in ranges.chunks(nvme::dsm::DSM_MAX_RANGES) {
            let list: Vec<DsmRange> = group.iter().map(|&(s, n)| DsmRange::new(s, n)).collect();
            let bytes = list.as_slice().as_bytes().to_vec();
            let sqe = Sqe::dsm_deallocate(0, self.nsid, (group.len() - 1) as u8);
            waits.push(self.client.send(false, sqe, Some(bytes), 0));
        }
        for r in futures_join_all(waits).await {
            r?;
        }
        Ok(())
    }
}

/// Awaits every answer in order (the commands run concurrently on the poll thread:
/// each was sent before the first await).
async fn futures_join_all(pending: Vec<Pending>) -> Vec<Result<Vec<u8>, HostError>> {
    let mut out = Vec::with_capacity(pending.len());
    for p in pending {
        out.push(p.wait().await);
    }
    out
}

/// The poll thread's state.
struct PollThread<P: Provider> {
    controller: Controller<P>,
    queues: Vec<NvmeRdmaQueue<P>>,
    rx: Receiver<Msg>,
    /// Per queue (0 = admin, i = I/O queue i): waiting commands and in-flight ones by CID.
    pending: Vec<VecDeque<Command>>,
    inflight: Vec<Vec<Option<Command>>>,
    next_io: usize,
    keep_alive: Option<Duration>,
    last_keep_alive: Instant,
    keep_alive_cid: Option<u16>,
    done: Vec<QueueCompletion>,
}

impl<P: Provider> PollThread<P> {
    fn new(controller: Controller<P>, queues: Vec<NvmeRdmaQueue<P>>, rx: Receiver<Msg>) -> Self {
        let mut controller = controller;
        let mut inflight = vec![(0..controller.admin_queue_mut().depth())
            .map(|_| None)
            .collect::<Vec<_>>()];
        for q in &queues {
            inflight.push((0..q.depth()).map(|_| None).collect());
        }
        let n = queues.len() + 1;
        PollThread {
            keep_alive: controller.keep_alive_interval(),
            controller,
            queues,
            rx,
            pending: (0..n).map(|_| VecDeque::new()).collect(),
            inflight,
            next_io: 0,
            last_keep_alive: Instant::now(),
            keep_alive_cid: None,
            done: Vec::new(),
        }
    }

    fn queue(&mut self, i: usize) -> &mut NvmeRdmaQueue<P> {
        if i == 0 {
            self.controller.admin_queue_mut()
        } else {
            &mut self.queues[i - 1]
        }
    }

    fn outstanding(&mut self) -> usize {
        let mut n = self.controller.admin_queue_mut().outstanding();
        n += self.queues.iter().map(|q| q.outstanding()).sum::<usize>();
        n + self.pending.iter().map(|p| p.len()).sum::<usize>()
    }

    fn run(mut self) {
        loop {
            // Intake.
            loop {
                match self.rx.try_recv() {
                    Ok(Msg::Disconnect(reply)) => return self.shutdown(Some(reply)),
                    Ok(msg) => self.accept(msg),
                    Err(TryRecvError::Empty) => break,
                    Err(TryRecvError::Disconnected) => return self.shutdown(None),
                }
            }
            self.submit_pending();
            self.poll_all();
            self.keep_alive_tick();
            if self.outstanding() == 0 {
                for i in 0..=self.queues.len() {
                    self.queue(i).progress();
                }
                let wait = self.keep_alive.map_or(IDLE_WAIT, |ka| {
                    ka.saturating_sub(self.last_keep_alive.elapsed())
                        .min(IDLE_WAIT)
                });
                match self.rx.recv_timeout(wait) {
                    Ok(Msg::Disconnect(reply)) => return self.shutdown(Some(reply)),
                    Ok(msg) => self.accept(msg),
                    Err(RecvTimeoutError::Timeout) => {}
                    Err(RecvTimeoutError::Disconnected) => return self.shutdown(None),
                }
            }
        }
    }

    fn accept(&mut self, msg: Msg) {
        match msg {
            Msg::Admin(c) => self.pending[0].push_back(c),
            Msg::Io(c) => {
                let n = self.queues.len();
                if n == 0 {
                    let _ = c.reply.send(Err(HostError::InvalidArgument(
                        "no I/O queue is connected".into(),
                    )));
                    return;
                }
                let q = 1 + self.next_io % n;
                self.next_io = self.next_io.wrapping_add(1);
                self.pending[q].push_back(c);
            }
            Msg::Disconnect(_) => {}
        }
    }

    fn submit_pending(&mut self) {
        for i in 0..self.pending.len() {
            while let Some(cmd) = self.pending[i].pop_front() {
                let data = cmd.data();
                let write = cmd.write.as_deref();
                let sqe = cmd.sqe;
                let q = if i == 0 {
                    self.controller.admin_queue_mut()
                } else {
                    &mut self.queues[i - 1]
                };
                match q.submit_with(sqe, data, |buf| {
                    if let Some(w) = write {
                        buf[..w.len()].copy_from_slice(w);
                    }
                }) {
                    Ok(cid) => self.inflight[i][usize::from(cid)] = Some(cmd),
                    Err(QueueError::Full) => {
                        self.pending[i].push_front(cmd);
                        break;
                    }
                    Err(e) => {
                        let _ = cmd.reply.send(Err(e.into()));
                    }
                }
            }
        }
    }

    fn poll_all(&mut self) {
        for i in 0..=self.queues.len() {
            let mut done = std::mem::take(&mut self.done);
            let q = if i == 0 {
                self.controller.admin_queue_mut()
            } else {
                &mut self.queues[i - 1]
            };
            q.poll(&mut done);
            for c in done.drain(..) {
                if i == 0 && self.keep_alive_cid == Some(c.cid) {
                    self.keep_alive_cid = None;
                    if let Err(e) = c.result {
                        tracing::warn!("Keep Alive failed: {e}");
                    }
                    continue;
                }
                let Some(cmd) = self.inflight[i]
                    .get_mut(usize::from(c.cid))
                    .and_then(|s| s.take())
                else {
                    continue;
                };
                let buf = c.buf;
                let r = c.result.map(|_| match buf {
                    Some(b) if cmd.read_len > 0 => b[..cmd.read_len].to_vec(),
                    _ => Vec::new(),
                });
                let _ = cmd.reply.send(r);
            }
            self.done = done;
        }
    }

    fn keep_alive_tick(&mut self) {
        let Some(ka) = self.keep_alive else { return };
        if self.keep_alive_cid.is_some() || self.last_keep_alive.elapsed() < ka {
            return;
        }
        match self
            .controller
            .admin_queue_mut()
            .submit(Sqe::keep_alive(0), DataDir::None, None)
            .map_err(|e| e.error)
        {
            Ok(cid) => {
                self.keep_alive_cid = Some(cid);
                self.last_keep_alive = Instant::now();
            }
            Err(QueueError::Full) => {}
            Err(e) => {
                tracing::warn!("Keep Alive not sent: {e}");
                self.last_keep_alive = Instant::now();
            }
        }
    }

    fn shutdown(mut self, reply: Option<oneshot::Sender<Result<(), HostError>>>) {
        for p in &mut self.pending {
            for c in p.drain(..) {
                let _ = c.reply.send(Err(HostError::Disconnected));
            }
        }
        // Let in-flight commands finish (bounded), then fail what is left.
        let deadline = Instant::now() + Duration::from_secs(2);
        while self.outstanding() > 0 && Instant::now() < deadline {
            self.poll_all();
        }
        for slots in &mut self.inflight {
            for c in slots.iter_mut().filter_map(|s| s.take()) {
                let _ = c.reply.send(Err(HostError::Disconnected));
            }
        }
        let r = self.controller.shutdown(self.queues);
        if let Some(reply) = reply {
            let _ = reply.send(r);
        }
    }
}
