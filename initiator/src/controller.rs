//! Controller bring-up and admin commands over the admin queue, in the order a Linux
//! host uses (NVMe over Fabrics 1.1 §3.3, NVMe Base 2.x §3.5.1 "Controller
//! Initialization", §3.6 "Shutdown"):
//!
//! 1. RDMA CM connection of the admin queue (QID 0, depth 32 = `NVME_AQ_DEPTH`),
//!    tried again with a new QP when the target refuses it as stale
//!    ([`connect_queue`]);
//! 2. Fabrics Connect (SQSIZE 31, KATO, CNTLID FFFFh, HOSTID, SUBNQN, HOSTNQN), the
//!    1024 bytes of Connect data read by the target through a keyed SGL; the
//!    controller ID comes back in CQE DW0;
//! 3. Property Get CAP, Property Set CC (EN, IOSQES 6, IOCQES 4), Property Get CSTS
//!    until RDY (at most CAP.TO x 500 ms), Property Get VS;
//! 4. Identify Controller (IOCCSZ, MDTS, SGLS, MAXCMD, NN kept);
//! 5. Set Features Number of Queues, then one Connect per I/O queue
//!    ([`Controller::connect_io_queue`], Connect data in-capsule as Linux sends it).
//!
//! Shutdown ([`Controller::shutdown`]): CM disconnect of the I/O queues, CC.SHN = 01b,
//! CSTS.SHST = 10b awaited, CM disconnect of the admin queue. Keep Alive
//! ([`Controller::keep_alive`]) every KATO/2 is the owner's job (the poll thread of
//! [`crate::Host`] or [`crate::sync_host::AdminKeeper`]).
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use nvme::properties::{ShutdownNotification, ShutdownStatus, CAP_CSS_IOCS};
use nvme::{
    AsyncEvent, Cap, Cc, CommandSpecificStatus, Cqe, Csts, FeatureId, IdentifyCns, Property, Sqe,
    NVME_AQ_DEPTH,
};
use transport::soft::SoftProvider;
use transport::verbs::{Context, Device as _, Pd, Provider};
use transport::wire::cm::CM_REJ_STALE_CONN;

use crate::capsule::DataDir;
use crate::error::{HostError, QueueError};
use crate::fabrics::{self, CONNECT_DATA_LEN};
use crate::identify::{parse_ns_list, ControllerInfo, NamespaceInfo, IDENTIFY_LEN};
use crate::pool::{BufferPool, IoBuf};
use crate::queue::{NvmeRdmaQueue, QueueCompletion, QueueConfig};

/// Data buffer bytes per admin command slot (Identify and Connect data fit).
pub const ADMIN_MAX_IO_BYTES: usize = 4096;
/// CNTLID of an admin Connect in the dynamic controller model (FFFFh).
pub use nvme::fabrics::CNTLID_DYNAMIC;
/// How long a normal shutdown may take before the host gives up waiting.
pub const SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(5);
/// How often a queue's connection refused as stale (CM REJ reason 10) is tried again,
/// each time with a new QP ([`connect_queue`]).
pub const STALE_RETRIES: u32 = 4;
/// The wait before the first retry of a stale connection; it doubles for each next one
/// (0.2 + 0.4 + 0.8 + 1.6 = 3 s at most in all).
pub const STALE_RETRY_DELAY: Duration = Duration::from_millis(200);

/// What the controller layer needs to connect (see [`crate::HostOptions`] for the
/// user-facing form).
#[derive(Clone, Debug)]
pub struct ControllerOptions {
    /// Target address and RDMA CM port.
    pub traddr: SocketAddr,
    /// Subsystem NQN.
    pub subnqn: String,
    /// Host NQN.
    pub hostnqn: String,
    /// Host identifier.
    pub hostid: [u8; 16],
    /// Keep Alive Timeout in ms (0: none).
    pub kato_ms: u32,
    /// Connect timeout per queue.
    pub connect_timeout: Duration,
    /// Timeout of one admin command.
    pub admin_timeout: Duration,
    /// DH-HMAC-CHAP secrets, for a target that asks for authentication
    /// ([`crate::auth`]).
    pub dhchap: Option<dhchap::HostSecrets>,
}

impl From<&crate::HostOptions> for ControllerOptions {
    fn from(o: &crate::HostOptions) -> Self {
        ControllerOptions {
            traddr: o.traddr,
            subnqn: o.subnqn.clone(),
            hostnqn: o.hostnqn.clone(),
            hostid: o.hostid,
            kato_ms: o.kato_ms,
            connect_timeout: o.connect_timeout,
            admin_timeout: o.admin_timeout,
            dhchap: o
                .dhchap_secret
                .clone()
                .map(|k| dhchap::HostSecrets::new(k, o.dhchap_ctrl_secret.clone())),
        }
    }
}

/// Creates queue `qcfg.qid` in poll group `ctx` and connects it
/// ([`NvmeRdmaQueue::connect`]). A connection the target refuses as stale (CM REJ
/// reason 10, `ConnError::Stale`: it still holds a connection from this address and
/// QPN, typically of a killed process that had the same QPN) is tried again, up to
/// [`STALE_RETRIES`] times after [`STALE_RETRY_DELAY`], doubling, each time in a fresh
/// poll group context with a new QP (a new QPN, PSN and CM communication ID), as the
/// target disconnects the old connection meanwhile (Linux `cm_match_req`). Each retry
/// is logged at info.
///
/// Errors: those of [`NvmeRdmaQueue::connect`]; [`HostError::Rejected`] reason 10 when
/// the retries ran out; [`HostError::Device`] if the poll group cannot be opened again.
pub fn connect_queue<P, C>(
    ctx: C,
    cm: &P::Cm,
    qcfg: QueueConfig,
    pd: Pd,
    pool: &BufferPool,
) -> Result<NvmeRdmaQueue<P>, HostError>
where
    C: Context<Provider = P>,
    P: Provider<Context = C>,
{
    let dev = ctx.device().clone();
    let group = ctx.poll_group();
    let mut ctx = Some(ctx);
    let mut delay = STALE_RETRY_DELAY;
    let mut attempt = 0;
    loop {
        attempt += 1;
        // The failed attempt dropped its context, which handed the poll group's socket
        // back to the device.
        let c = match ctx.take() {
            Some(c) => c,
            None => dev
                .open_context(group)
                .map_err(|e| HostError::Device(format!("reopening poll group {group}: {e}")))?,
        };
        match NvmeRdmaQueue::connect(c, cm, qcfg.clone(), pd, pool) {
            Err(HostError::Rejected {
                reason: CM_REJ_STALE_CONN,
                ..
            }) if attempt <= STALE_RETRIES => {
                tracing::info!(
                    qid = qcfg.qid,
                    target = %qcfg.target,
                    attempt,
                    "the target refused the connection as stale (it still holds an earlier \
                     connection from this address and QP, e.g. of a killed process); \
                     retrying with a new QP in {} ms",
                    delay.as_millis()
                );
                std::thread::sleep(delay);
                delay *= 2;
            }
            r => return r,
        }
    }
}

/// Runs one command on `queue` and waits for it, sleeping in `queue.wait` (1 ms at
/// most, woken by packets) between polls. The data buffer (`data.len()` bytes) comes
/// from the queue's pool (waiting for space within `timeout`); `fill` writes
/// host-to-controller data into it before submission. Returns the CQE and the buffer
/// (controller-to-host data). Completions of other commands seen meanwhile are
/// appended to `others`.
///
/// Errors: the command's own error, [`HostError::Timeout`] after `timeout` (the
/// command stays outstanding; treat the queue as unusable).
pub fn run_command<P: Provider>(
    queue: &mut NvmeRdmaQueue<P>,
    sqe: Sqe,
    data: DataDir,
    fill: impl FnOnce(&mut [u8]),
    timeout: Duration,
    others: &mut Vec<QueueCompletion>,
) -> Result<(Cqe, Option<IoBuf>), HostError> {
    let deadline = Instant::now() + timeout;
    let name = crate::queue::command_name(queue.qid(), sqe.opcode(), sqe.fctype());
    let mut buf = match data.len() {
        0 => None,
        n => Some(
            queue
                .pool()
                .alloc_blocking(n, timeout)
                .map_err(QueueError::from)?,
        ),
    };
    if let Some(b) = buf.as_mut() {
        fill(b);
    }
    while !queue.can_submit() {
        if queue.is_dead() || Instant::now() >= deadline {
            break;
        }
        queue.poll(others);
        queue.wait(Duration::from_millis(1));
    }
    let cid = queue.submit(sqe, data, buf)?;
    let mut got = Vec::new();
    loop {
        queue.poll(&mut got);
        // Every other completion of the batch is kept (an AER's may follow ours).
        let mut mine = None;
        for c in got.drain(..) {
            if c.cid == cid && mine.is_none() {
                mine = Some(c);
            } else {
                others.push(c);
            }
        }
        if let Some(c) = mine {
            return c.result.map(|cqe| (cqe, c.buf));
        }
        if Instant::now() >= deadline {
            return Err(HostError::Timeout(format!(
                "{name} on queue {}",
                queue.qid()
            )));
        }
        queue.wait(Duration::from_millis(1));
    }
}

/// Sends the Fabrics Connect of `queue` (NVMe over Fabrics 1.1 §3.3): SQSIZE =
/// `depth - 1`, `kato_ms`, Connect data with `cntlid`. The data goes in-capsule when
/// the queue allows 1024 bytes of it (I/O queues of a controller with SGLS bit 20),
/// otherwise by keyed SGL (the admin queue). When the response asks for in-band
/// authentication (AUTHREQ), the queue authenticates ([`crate::auth`]) before this
/// returns. Returns CQE DW0's controller ID.
///
/// Errors: [`HostError::ConnectRefused`] naming the offending field;
/// [`HostError::AuthenticationRequired`] or [`HostError::Authentication`].
pub fn fabrics_connect<P: Provider>(
    queue: &mut NvmeRdmaQueue<P>,
    opts: &ControllerOptions,
    cntlid: u16,
    kato_ms: u32,
) -> Result<u16, HostError> {
    let qid = queue.qid();
    let sqe = Sqe::connect(0, qid, queue.depth() - 1, kato_ms);
    let mut data_err = None;
    let fill = |buf: &mut [u8]| {
        data_err =
            fabrics::write_connect_data(buf, &opts.hostid, cntlid, &opts.subnqn, &opts.hostnqn)
                .err();
    };
    // Validate before anything goes on the wire.
    fabrics::write_connect_data(
        &mut [0u8; CONNECT_DATA_LEN],
        &opts.hostid,
        cntlid,
        &opts.subnqn,
        &opts.hostnqn,
    )
    .map_err(|e| HostError::InvalidArgument(e.to_string()))?;
    let data = DataDir::HostToController {
        len: CONNECT_DATA_LEN,
    };
    let r = run_command(
        queue,
        sqe,
        data,
        fill,
        opts.connect_timeout,
        &mut Vec::new(),
    );
    if let Some(e) = data_err {
        return Err(HostError::InvalidArgument(e.to_string()));
    }
    match r {
        Ok((cqe, _)) => {
            crate::auth::authenticate_if_asked(queue, opts, cqe.dw0())?;
            Ok(cqe.dw0() as u16)
        }
        Err(HostError::Nvme { status, dw0, .. }) => {
            let detail = (status.as_command_specific()
                == Some(CommandSpecificStatus::ConnectInvalidParameters))
            .then(|| fabrics::connect_invalid_field(dw0));
            Err(HostError::ConnectRefused {
                qid,
                status,
                detail,
            })
        }
        Err(e) => Err(e),
    }
}

/// The Get Log Page command (NVMe Base 2.x §5.16): LID and RAE (bit 15) and NUMDL in
/// CDW10, NUMDU in CDW11, LPOL and LPOU in CDW12 and CDW13; see
/// [`Controller::get_log_page`] for the arguments and errors.
pub fn get_log_page_sqe(
    lid: u8,
    nsid: u32,
    offset: u64,
    len: usize,
    retain: bool,
) -> Result<Sqe, HostError> {
    if len == 0 || !len.is_multiple_of(4) || !offset.is_multiple_of(4) || len > ADMIN_MAX_IO_BYTES {
        return Err(HostError::InvalidArgument(format!(
            "Get Log Page of {len} bytes at offset {offset}: both must be whole dwords \
             (multiples of 4), the length 4 to {ADMIN_MAX_IO_BYTES}"
        )));
    }
    let numd = (len / 4 - 1) as u32;
    let mut sqe = Sqe::new(nvme::AdminOpcode::GetLogPage.value(), 0).with_nsid(nsid);
    let rae = if retain { 1 << 15 } else { 0 };
    sqe.set_cdw10(u32::from(lid) | rae | ((numd & 0xFFFF) << 16));
    sqe.set_cdw11(numd >> 16);
    sqe.set_cdw12(offset as u32);
    sqe.set_cdw13((offset >> 32) as u32);
    Ok(sqe)
}

/// A connected, enabled controller and its admin queue on provider `P` (the soft
/// provider unless named; see the module docs).
pub struct Controller<P: Provider = SoftProvider> {
    admin: NvmeRdmaQueue<P>,
    cm: P::Cm,
    /// The host's protection domain and buffer pool, which every queue shares.
    pd: Pd,
    pool: BufferPool,
    opts: ControllerOptions,
    cntlid: u16,
    cap: Cap,
    vs: u32,
    cc: Cc,
    info: ControllerInfo,
    /// Completions of commands other than the one being waited for: Asynchronous
    /// Event Request completions ([`Controller::take_async_events`]).
    stray: Vec<QueueCompletion>,
    /// CIDs of the Asynchronous Event Requests outstanding.
    aers: Vec<u16>,
}

impl<P: Provider> std::fmt::Debug for Controller<P> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Controller")
            .field("cntlid", &self.cntlid)
            .field("subnqn", &self.opts.subnqn)
            .field("admin", &self.admin)
            .finish()
    }
}

impl<P: Provider> Controller<P> {
    /// Connects the admin queue in poll group `ctx` and brings the controller up to
    /// Identify Controller (steps 1-4 of the module docs). Every queue of the
    /// controller uses protection domain `pd` and takes its data buffers from `pool`
    /// (registered in `pd`). The provider is the context's.
    pub fn connect<C>(
        ctx: C,
        cm: &P::Cm,
        opts: ControllerOptions,
        pd: Pd,
        pool: &BufferPool,
    ) -> Result<Self, HostError>
    where
        C: Context<Provider = P>,
        P: Provider<Context = C>,
    {
        let mut qcfg = QueueConfig::new(0, NVME_AQ_DEPTH, ADMIN_MAX_IO_BYTES, opts.traddr);
        qcfg.connect_timeout = opts.connect_timeout;
        let mut admin = connect_queue(ctx, cm, qcfg, pd, pool)?;
        let cntlid = match fabrics_connect(&mut admin, &opts, CNTLID_DYNAMIC, opts.kato_ms) {
            Ok(c) => c,
            Err(e) => {
                admin.disconnect(Duration::from_millis(500));
                return Err(e);
            }
        };
        let mut c = Controller {
            admin,
            cm: cm.clone(),
            pd,
            pool: pool.clone(),
            opts,
            cntlid,
            cap: Cap(0),
            vs: 0,
            cc: Cc(0),
            info: ControllerInfo::parse(&[0u8; IDENTIFY_LEN])
                .map_err(|e| HostError::Protocol(e.to_string()))?,
            stray: Vec::new(),
            aers: Vec::new(),
        };
        if let Err(e) = c.enable() {
            c.admin.disconnect(Duration::from_millis(500));
            return Err(e);
        }
        Ok(c)
    }

    fn enable(&mut self) -> Result<(), HostError> {
        self.cap = Cap(self.property_get(Property::Cap)?);
        // CC.CSS: 110b (all I/O command sets) when CAP.CSS has bit 6, else NVM (000b),
        // as Linux chooses; 64-byte SQEs, 16-byte CQEs.
        let css = if self.cap.0 & CAP_CSS_IOCS != 0 {
            0b110
        } else {
            0
        };
        self.cc = Cc(0)
            .with_css(css)
            .with_iosqes(6)
            .with_iocqes(4)
            .with_en(true);
        self.property_set(Property::Cc, self.cc.0)?;
        let to = Duration::from_millis(u64::from(self.cap.timeout_ms().max(500)));
        let deadline = Instant::now() + to;
        loop {
            let csts = Csts(self.property_get(Property::Csts)? as u32);
            if csts.cfs() {
                return Err(HostError::Protocol(
                    "controller fatal status (CSTS.CFS) during enable".into(),
                ));
            }
            if csts.rdy() {
                break;
            }
            if Instant::now() >= deadline {
                return Err(HostError::Timeout(format!(
                    "CSTS.RDY (CAP.TO {} ms)",
                    to.as_millis()
                )));
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        self.vs = self.property_get(Property::Vs)? as u32;
        self.info = self.identify_controller()?;
        Ok(())
    }

    /// Runs one admin command (see [`run_command`]) and returns its CQE and the
    /// controller-to-host data (`data.len()` bytes when `data` is
    /// [`DataDir::ControllerToHost`], else empty).
    pub fn admin_command(
        &mut self,
        sqe: Sqe,
        data: DataDir,
        fill: impl FnOnce(&mut [u8]),
    ) -> Result<(Cqe, Vec<u8>), HostError> {
        let (cqe, buf) = run_command(
            &mut self.admin,
            sqe,
            data,
            fill,
            self.opts.admin_timeout,
            &mut self.stray,
        )?;
        let out = match (data, buf) {
            (DataDir::ControllerToHost { len }, Some(b)) => b[..len].to_vec(),
            _ => Vec::new(),
        };
        Ok((cqe, out))
    }

    /// Runs one admin command with the caller's buffer (`None` for no data; from this
    /// controller's pool) and waits up to `timeout`: the passthrough form. Returns the
    /// CQE and the buffer. Errors: the command's; [`HostError::Timeout`].
    pub fn admin_command_buf(
        &mut self,
        sqe: Sqe,
        data: DataDir,
        buf: Option<IoBuf>,
        timeout: Duration,
    ) -> Result<(Cqe, Option<IoBuf>), HostError> {
        let deadline = Instant::now() + timeout;
        let q = &mut self.admin;
        while !q.can_submit() && !q.is_dead() && Instant::now() < deadline {
            q.poll(&mut self.stray);
            q.wait(Duration::from_millis(1));
        }
        let cid = q.submit(sqe, data, buf)?;
        let mut got = Vec::new();
        loop {
            q.poll(&mut got);
            // Every other completion of the batch is kept (an AER's may follow ours).
            let mut mine = None;
            for c in got.drain(..) {
                if c.cid == cid && mine.is_none() {
                    mine = Some(c);
                } else {
                    self.stray.push(c);
                }
            }
            if let Some(c) = mine {
                return c.result.map(|cqe| (cqe, c.buf));
            }
            if Instant::now() >= deadline {
                let name = crate::queue::command_name(0, sqe.opcode(), sqe.fctype());
                return Err(HostError::Timeout(format!("{name} on queue 0")));
            }
            q.wait(Duration::from_millis(1));
        }
    }

    /// The timeout of one admin command (`ControllerOptions::admin_timeout`).
    pub fn admin_timeout(&self) -> Duration {
        self.opts.admin_timeout
    }

    /// Get Log Page (NVMe Base 2.x §5.16): `len` bytes (a multiple of 4, at most
    /// [`ADMIN_MAX_IO_BYTES`]) of log `lid` from byte `offset` (a multiple of 4), for
    /// namespace `nsid` (0 or FFFFFFFFh for the controller). `retain` sets RAE (CDW10
    /// bit 15): the asynchronous event the log clears stays outstanding; a read with
    /// RAE clear lets the controller report that event type again.
    ///
    /// Errors: [`HostError::InvalidArgument`] for a length or offset that is not a
    /// whole number of dwords or a length above one admin buffer; the command's.
    pub fn get_log_page(
        &mut self,
        lid: u8,
        nsid: u32,
        offset: u64,
        len: usize,
        retain: bool,
    ) -> Result<Vec<u8>, HostError> {
        let sqe = get_log_page_sqe(lid, nsid, offset, len, retain)?;
        let (_, data) = self.admin_command(sqe, DataDir::ControllerToHost { len }, |_| {})?;
        Ok(data)
    }

    /// Keeps up to `count` Asynchronous Event Requests (NVMe Base 2.x §5.2)
    /// outstanding, never more than the controller's AERL + 1: posts the missing
    /// ones. Returns how many are outstanding.
    ///
    /// Errors: the submission's ([`HostError::Queue`] when the admin queue is dead).
    pub fn post_async_event_requests(&mut self, count: usize) -> Result<usize, HostError> {
        let want = count.min(usize::from(self.info.aerl) + 1);
        while self.aers.len() < want && self.admin.can_submit() {
            let cid = self
                .admin
                .submit(Sqe::async_event_request(0), DataDir::None, None)
                .map_err(QueueError::from)?;
            self.aers.push(cid);
        }
        Ok(self.aers.len())
    }

    /// Polls the admin queue and takes the completed Asynchronous Event Requests:
    /// their events (completion DW0 decoded), oldest first. A request that failed
    /// (Asynchronous Event Request Limit Exceeded, or aborted) is dropped and logged
    /// at debug; [`Controller::post_async_event_requests`] posts replacements. Other
    /// completions found (of commands nobody waits for any more: between commands,
    /// none is waited for) are dropped, their buffers back to the pool.
    pub fn take_async_events(&mut self) -> Vec<AsyncEvent> {
        self.admin.poll(&mut self.stray);
        let mut events = Vec::new();
        for c in self.stray.drain(..) {
            let Some(i) = self.aers.iter().position(|&a| a == c.cid) else {
                continue;
            };
            self.aers.swap_remove(i);
            match &c.result {
                Ok(cqe) => events.push(AsyncEvent::from_dw0(cqe.dw0())),
                Err(e) => tracing::debug!(cid = c.cid, "Asynchronous Event Request ended: {e}"),
            }
        }
        events
    }

    /// Asynchronous Event Requests outstanding.
    pub fn async_event_requests(&self) -> usize {
        self.aers.len()
    }

    /// Property Get (NVMe over Fabrics 1.1 §3.4): the property's value (4 or 8 bytes,
    /// from CQE DW0/DW1).
    pub fn property_get(&mut self, property: Property) -> Result<u64, HostError> {
        let sqe = Sqe::property_get(0, property);
        let (cqe, _) = self.admin_command(sqe, DataDir::None, |_| {})?;
        Ok(cqe.result_u64())
    }

    /// Property Set (NVMe over Fabrics 1.1 §3.5) of a 4-byte property.
    pub fn property_set(&mut self, property: Property, value: u32) -> Result<(), HostError> {
        let sqe = Sqe::property_set(0, property, u64::from(value));
        self.admin_command(sqe, DataDir::None, |_| {}).map(|_| ())
    }

    /// Identify Controller (CNS 01h, NVMe Base 2.x §5.17.2.1), parsed.
    pub fn identify_controller(&mut self) -> Result<ControllerInfo, HostError> {
        let sqe = Sqe::identify(0, IdentifyCns::Controller, 0, 0);
        let (_, data) =
            self.admin_command(sqe, DataDir::ControllerToHost { len: IDENTIFY_LEN }, |_| {})?;
        ControllerInfo::parse(&data).map_err(|e| HostError::Protocol(e.to_string()))
    }

    /// Identify Namespace (CNS 00h, NVM Command Set 1.x §4.1.5.1) of `nsid`, parsed.
    pub fn identify_namespace(&mut self, nsid: u32) -> Result<NamespaceInfo, HostError> {
        let sqe = Sqe::identify(0, IdentifyCns::Namespace, nsid, 0);
        let (_, data) =
            self.admin_command(sqe, DataDir::ControllerToHost { len: IDENTIFY_LEN }, |_| {})?;
        NamespaceInfo::parse(&data)
            .map_err(|e| HostError::Protocol(format!("namespace {nsid}: {e}")))
    }

    /// Active Namespace ID list (CNS 02h, NVMe Base 2.x §5.17.2.2): the first 1024
    /// active NSIDs.
    pub fn active_namespaces(&mut self) -> Result<Vec<u32>, HostError> {
        let sqe = Sqe::identify(0, IdentifyCns::ActiveNamespaceList, 0, 0);
        let (_, data) =
            self.admin_command(sqe, DataDir::ControllerToHost { len: IDENTIFY_LEN }, |_| {})?;
        Ok(parse_ns_list(&data))
    }

    /// Set Features Number of Queues (FID 07h, NVMe Base 2.x §5.27.1.5): asks for
    /// `count` I/O submission and completion queues; returns how many were granted
    /// (the smaller of NSQA and NCQA, plus one).
    pub fn set_number_of_queues(&mut self, count: u16) -> Result<u16, HostError> {
        let n = u32::from(count.max(1) - 1);
        let sqe = Sqe::set_features(0, FeatureId::NumberOfQueues, n | (n << 16));
        let (cqe, _) = self.admin_command(sqe, DataDir::None, |_| {})?;
        let dw0 = cqe.dw0();
        Ok(((dw0 & 0xFFFF).min(dw0 >> 16) as u16).saturating_add(1))
    }

    /// Keep Alive (18h, NVMe Base 2.x §5.20), waited for.
    pub fn keep_alive(&mut self) -> Result<(), HostError> {
        self.admin_command(Sqe::keep_alive(0), DataDir::None, |_| {})
            .map(|_| ())
    }

    /// Keep Alive waited for at most `timeout` (Linux gives it KATO). Errors: the
    /// command's, [`HostError::Timeout`].
    pub fn keep_alive_within(&mut self, timeout: Duration) -> Result<(), HostError> {
        run_command(
            &mut self.admin,
            Sqe::keep_alive(0),
            DataDir::None,
            |_| {},
            timeout,
            &mut self.stray,
        )
        .map(|_| ())
    }

    /// Abort (08h, NVMe Base 2.x §5.1) of command `cid` on submission queue `sqid`,
    /// waited for at most `timeout`. Returns whether the controller aborted it (CQE DW0
    /// bit 0 cleared; the command then completes with Command Abort Requested).
    /// Errors: the command's, [`HostError::Timeout`].
    pub fn abort_within(
        &mut self,
        sqid: u16,
        cid: u16,
        timeout: Duration,
    ) -> Result<bool, HostError> {
        let mut sqe = Sqe::new(nvme::AdminOpcode::Abort.value(), 0);
        sqe.set_cdw10(u32::from(sqid) | (u32::from(cid) << 16));
        let (cqe, _) = run_command(
            &mut self.admin,
            sqe,
            DataDir::None,
            |_| {},
            timeout,
            &mut self.stray,
        )?;
        Ok(cqe.dw0() & 1 == 0)
    }

    /// Clears CC.EN (a controller reset's first step), waited for at most `timeout`.
    pub fn disable_within(&mut self, timeout: Duration) -> Result<(), HostError> {
        let sqe = Sqe::property_set(0, Property::Cc, u64::from(self.cc.with_en(false).0));
        run_command(
            &mut self.admin,
            sqe,
            DataDir::None,
            |_| {},
            timeout,
            &mut self.stray,
        )
        .map(|_| ())
    }

    /// How often to send Keep Alive: KATO/2 (`None` when KATO is 0).
    pub fn keep_alive_interval(&self) -> Option<Duration> {
        (self.opts.kato_ms > 0).then(|| Duration::from_millis(u64::from(self.opts.kato_ms) / 2))
    }

    /// Connects I/O queue `qid` of `depth` entries in poll group `ctx`: RDMA CM, then
    /// Fabrics Connect with this controller's ID, KATO 0 and the Connect data
    /// in-capsule when the controller takes in-capsule data.
    pub fn connect_io_queue(
        &self,
        ctx: P::Context,
        qid: u16,
        depth: u16,
        max_io_bytes: usize,
    ) -> Result<NvmeRdmaQueue<P>, HostError> {
        if qid == 0 {
            return Err(HostError::InvalidArgument(
                "I/O queue IDs start at 1".into(),
            ));
        }
        let mut qcfg = QueueConfig::new(
            qid,
            depth,
            max_io_bytes.max(CONNECT_DATA_LEN),
            self.opts.traddr,
        );
        qcfg.in_capsule_bytes = self.info.in_capsule_data_size().min(qcfg.max_io_bytes);
        qcfg.cntlid = self.cntlid;
        qcfg.connect_timeout = self.opts.connect_timeout;
        let mut q = connect_queue(ctx, &self.cm, qcfg, self.pd, &self.pool)?;
        if let Err(e) = fabrics_connect(&mut q, &self.opts, self.cntlid, 0) {
            q.disconnect(Duration::from_millis(500));
            return Err(e);
        }
        Ok(q)
    }

    /// Shuts the controller down: CM disconnect of `io_queues`, CC.SHN = 01b, waits
    /// (up to 5 s) for CSTS.SHST = 10b, CM disconnect of the admin queue.
    pub fn shutdown(mut self, io_queues: Vec<NvmeRdmaQueue<P>>) -> Result<(), HostError> {
        for mut q in io_queues {
            q.disconnect(Duration::from_millis(500));
        }
        let r = self.shutdown_admin();
        self.admin.disconnect(Duration::from_secs(1));
        r
    }

    fn shutdown_admin(&mut self) -> Result<(), HostError> {
        let cc = self.cc.with_shn(ShutdownNotification::Normal);
        self.property_set(Property::Cc, cc.0)?;
        let deadline = Instant::now() + SHUTDOWN_TIMEOUT;
        loop {
            let csts = Csts(self.property_get(Property::Csts)? as u32);
            if csts.shst() == Some(ShutdownStatus::Complete) {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(HostError::Timeout("CSTS.SHST shutdown complete".into()));
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// The controller ID (from the admin Connect's CQE DW0).
    pub fn cntlid(&self) -> u16 {
        self.cntlid
    }
    /// CAP as read at enable.
    pub fn cap(&self) -> Cap {
        self.cap
    }
    /// VS as read at enable.
    pub fn version(&self) -> u32 {
        self.vs
    }
    /// Identify Controller as read at bring-up.
    pub fn info(&self) -> &ControllerInfo {
        &self.info
    }
    /// The options the controller was connected with.
    pub fn options(&self) -> &ControllerOptions {
        &self.opts
    }
    /// The largest data transfer per command in bytes: MDTS with CAP.MPSMIN, or `None`
    /// if the controller sets no limit.
    pub fn max_transfer_bytes(&self) -> Option<usize> {
        self.info.max_transfer_bytes(self.cap.mpsmin())
    }
    /// Largest I/O queue size the controller supports (CAP.MQES + 1).
    pub fn max_queue_entries(&self) -> u32 {
        u32::from(self.cap.mqes()) + 1
    }
    /// The admin queue (for owners that drive it without blocking).
    pub fn admin_queue_mut(&mut self) -> &mut NvmeRdmaQueue<P> {
        &mut self.admin
    }
    /// The RDMA device the controller's queues are on.
    pub fn device(&self) -> &std::sync::Arc<transport::verbs::DeviceOf<P>> {
        self.admin.context().device()
    }
    /// The connection manager the queues use.
    pub fn cm(&self) -> &P::Cm {
        &self.cm
    }
    /// The host's buffer pool, shared by every queue of the controller.
    pub fn pool(&self) -> &BufferPool {
        &self.pool
    }
    /// The protection domain of every queue and of the pool.
    pub fn pd(&self) -> Pd {
        self.pd
    }
}
