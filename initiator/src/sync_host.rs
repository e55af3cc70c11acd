//! A whole host without tokio: the RDMA device, its connection manager, the
//! controller on the admin queue and N I/O queues, each queue in its own poll group
//! (1 + N poll groups: poll group 0 is the admin queue, poll group `i` I/O queue `i`),
//! on any provider.
//!
//! Choosing the provider: [`SyncHost::connect`] uses the soft provider (the default
//! type parameter, so `SyncHost` alone names the soft provider's host);
//! [`SyncHost::connect_with`] takes the provider (`SyncHost::connect_with(VerbsProvider,
//! &opts)` with the transport's `verbs` feature), [`SyncHost::connect_with_options`]
//! also the provider's own options (`SoftOptions`: fault injection, packet path);
//! [`SyncHost::connect_on`] takes a device the caller opened.
//!
//! Every queue of the host shares one protection domain and one registered buffer pool
//! ([`crate::pool`]), sized from [`HostOptions::buffer_pool_bytes`] or the memlock
//! limit.
//!
//! The benchmark drives the I/O queues itself ([`SyncHost::into_io_queues`]) while an
//! [`AdminKeeper`] thread ([`crate::keeper`]) sends Keep Alives with blocking waits.
use std::sync::Arc;

use transport::soft::SoftProvider;
use transport::verbs::{Device, DeviceOf, Provider};

use crate::controller::{Controller, ControllerOptions};
use crate::error::HostError;
use crate::options::HostOptions;
use crate::pool::{pool_bytes, BufferPool, RemoteAccess, POOL_CHUNK_BYTES};
use crate::queue::NvmeRdmaQueue;

pub use crate::keeper::AdminKeeper;

/// A connected host on provider `P` (the soft provider unless named): see the module
/// docs.
pub struct SyncHost<P: Provider = SoftProvider> {
    dev: Arc<DeviceOf<P>>,
    pool: BufferPool,
    controller: Controller<P>,
    io_queues: Vec<NvmeRdmaQueue<P>>,
}

impl<P: Provider> std::fmt::Debug for SyncHost<P> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SyncHost")
            .field("controller", &self.controller)
            .field("io_queues", &self.io_queues.len())
            .finish()
    }
}

impl SyncHost<SoftProvider> {
    /// Connects on the soft provider with its defaults: [`SyncHost::connect_with`]`(
    /// SoftProvider, opts)`.
    pub fn connect(opts: &HostOptions) -> Result<Self, HostError> {
        Self::connect_with(SoftProvider, opts)
    }
}

impl<P: Provider> SyncHost<P> {
    /// Opens provider `P`'s device on `opts.local_ip` (or the kernel's source address
    /// toward the target) with a poll group per queue and the provider's default
    /// options ([`crate::device::open_device`]), then [`SyncHost::connect_on`] it.
    ///
    /// Errors: [`HostError::Device`] naming why the device did not open and what to do;
    /// those of [`SyncHost::connect_on`].
    pub fn connect_with(_provider: P, opts: &HostOptions) -> Result<Self, HostError> {
        Self::connect_with_options(opts, &P::Options::default())
    }

    /// [`SyncHost::connect_with`] with the provider's own `options` (the soft
    /// provider's [`transport::soft::SoftOptions`]: fault injection, packet path):
    /// `SyncHost::<SoftProvider>::connect_with_options(&opts, &soft)`.
    pub fn connect_with_options(
        opts: &HostOptions,
        options: &P::Options,
    ) -> Result<Self, HostError> {
        if opts.io_queues == 0 {
            return Err(HostError::InvalidArgument("at least one I/O queue".into()));
        }
        let dev = crate::device::open_device::<P>(opts, options)?;
        Self::connect_on(&dev, opts)
    }

    /// Brings the host up on `dev` (opened with at least `1 + opts.io_queues` poll
    /// groups): a protection domain and the buffer pool ([`crate::pool`]; memory
    /// windows, or the pool's rkey where the device has none), the device's connection
    /// manager, the controller (admin queue in poll group 0), Set Features Number of
    /// Queues for `opts.io_queues`, and as many I/O queues as were granted (queue `i`
    /// in poll group `i`), each of `min(queue_depth, CAP.MQES + 1)` entries and
    /// `min(max_io_bytes, MDTS)` bytes per command.
    ///
    /// Errors: [`HostError::InvalidArgument`] for no I/O queue or a device with too few
    /// poll groups; [`HostError::Memlock`] when the pool does not fit `RLIMIT_MEMLOCK`
    /// or cannot hold one command of `min(max_io_bytes, MDTS)`; [`HostError::Device`]
    /// when the PD, the pool, the CM or a poll group cannot be set up; any error of the
    /// controller's bring-up and the queues' connections.
    pub fn connect_on<D>(dev: &Arc<D>, opts: &HostOptions) -> Result<Self, HostError>
    where
        D: Device<Provider = P>,
        P: Provider<Device = D>,
    {
        if opts.io_queues == 0 {
            return Err(HostError::InvalidArgument("at least one I/O queue".into()));
        }
        let needed = crate::device::poll_groups(opts);
        if dev.poll_groups() < needed {
            return Err(HostError::InvalidArgument(format!(
                "the device has {} poll groups; {} I/O queues need {needed} (one more for \
                 the admin queue): open it with more",
                dev.poll_groups(),
                opts.io_queues
            )));
        }
        let pd = dev
            .alloc_pd()
            .map_err(|e| HostError::Device(format!("protection domain: {e}")))?;
        let pool = register_pool::<P>(dev, pd, opts)?;
        let cm = dev
            .cm()
            .map_err(|e| HostError::Device(format!("RDMA connection manager: {e}")))?;
        let open = |group: u32| {
            dev.open_context(group)
                .map_err(|e| HostError::Device(format!("poll group {group}: {e}")))
        };
        let mut controller =
            Controller::connect(open(0)?, &cm, ControllerOptions::from(opts), pd, &pool)?;
        let granted = controller
            .set_number_of_queues(opts.io_queues)?
            .min(opts.io_queues);
        let mqes = controller.max_queue_entries().min(u32::from(u16::MAX)) as u16;
        let depth = opts.queue_depth.min(mqes).max(2);
        let max_io = controller
            .max_transfer_bytes()
            .map_or(opts.max_io_bytes, |m| m.min(opts.max_io_bytes));
        if max_io > pool.max_alloc() {
            let _ = controller.shutdown(Vec::new());
            return Err(HostError::Memlock(format!(
                "the host's buffer pool ({} bytes, largest buffer {}) cannot hold one \
                 command of {max_io} bytes (min of max_io_bytes and the controller's MDTS): \
                 give HostOptions::buffer_pool_bytes at least {} or lower max_io_bytes",
                pool.capacity(),
                pool.max_alloc(),
                max_io.next_power_of_two()
            )));
        }
        let mut io_queues = Vec::with_capacity(usize::from(granted));
        for qid in 1..=granted {
            let q = open(u32::from(qid))
                .and_then(|ctx| controller.connect_io_queue(ctx, qid, depth, max_io));
            match q {
                Ok(q) => io_queues.push(q),
                Err(e) => {
                    let _ = controller.shutdown(io_queues);
                    return Err(e);
                }
            }
        }
        Ok(SyncHost {
            dev: dev.clone(),
            pool,
            controller,
            io_queues,
        })
    }

    /// The RDMA device (the soft provider's: its key table, counters).
    pub fn device(&self) -> &Arc<DeviceOf<P>> {
        &self.dev
    }
    /// The host's buffer pool, shared by all its queues: take the buffers of
    /// [`NvmeRdmaQueue::submit`] from it.
    pub fn pool(&self) -> &BufferPool {
        &self.pool
    }
    /// Bytes the host registered: the pool and every queue's own slots.
    pub fn registered_bytes(&mut self) -> usize {
        let queues: usize = self.io_queues.iter().map(|q| q.registered_bytes()).sum();
        self.pool.capacity() + queues + self.controller.admin_queue_mut().registered_bytes()
    }
    /// The controller (admin commands).
    pub fn controller(&mut self) -> &mut Controller<P> {
        &mut self.controller
    }
    /// The I/O queues (index `i` is QID `i + 1`).
    pub fn io_queues(&mut self) -> &mut [NvmeRdmaQueue<P>] {
        &mut self.io_queues
    }
    /// Splits the host into the controller and its I/O queues.
    #[allow(clippy::type_complexity)]
    pub fn into_parts(self) -> (Arc<DeviceOf<P>>, Controller<P>, Vec<NvmeRdmaQueue<P>>) {
        (self.dev, self.controller, self.io_queues)
    }
    /// Hands the I/O queues out and moves the controller to an [`AdminKeeper`] thread
    /// that sends Keep Alive every KATO/2.
    pub fn into_io_queues(self) -> (Vec<NvmeRdmaQueue<P>>, AdminKeeper<P>) {
        (self.io_queues, AdminKeeper::start(self.controller))
    }
    /// Disconnects the I/O queues and shuts the controller down.
    pub fn disconnect(self) -> Result<(), HostError> {
        self.controller.shutdown(self.io_queues)
    }
}

/// Registers the host's buffer pool for `opts` in `pd` of `dev`: its size from
/// [`pool_bytes`] (the caller's, or the default within what `RLIMIT_MEMLOCK` leaves on
/// a provider that pins), memory windows where the device has them (else the pool's
/// rkey, logged as a warning), unless `opts.remote_access` says which.
///
/// Errors: [`HostError::Memlock`] naming the limit and the fix; [`HostError::Device`]
/// for the registration's other failures.
pub fn register_pool<P: Provider>(
    dev: &Arc<DeviceOf<P>>,
    pd: transport::verbs::Pd,
    opts: &HostOptions,
) -> Result<BufferPool, HostError> {
    use transport::memlock::PinBudget;
    let budget = PinBudget::process();
    let page = transport::memlock::page_size() as usize;
    let slots = |depth: usize| 2 * (depth * crate::queue::core::SQE_LEN).div_ceil(page) * page;
    let reserve = slots(usize::from(nvme::NVME_AQ_DEPTH))
        + usize::from(opts.io_queues) * slots(usize::from(opts.queue_depth));
    let bytes = pool_bytes(
        opts.buffer_pool_bytes,
        P::PINS_REGISTERED_MEMORY,
        budget.available_bytes(),
        budget.limit().bytes(),
        reserve as u64,
        opts.max_io_bytes.clamp(POOL_CHUNK_BYTES, 1 << 20),
    )
    .map_err(|e| HostError::Memlock(e.to_string()))?;
    let access = match opts.remote_access {
        Some(a) => a,
        None if dev.caps().max_mw == 0 => RemoteAccess::RegionKey,
        None => RemoteAccess::Windows,
    };
    if access == RemoteAccess::RegionKey {
        tracing::warn!(
            device = %dev.ip(),
            "{}: the target reaches this host's buffers through the buffer pool's own \
             rkey, which covers the whole pool (weaker isolation than a memory window per \
             command: a faulty target could read or write any buffer of the pool, not only \
             its command's)",
            if opts.remote_access.is_some() {
                "HostOptions::remote_access asks for the pool's rkey"
            } else {
                "the RDMA device has no memory windows"
            }
        );
    }
    BufferPool::register::<P>(dev, pd, bytes, access).map_err(|e| match e {
        transport::verbs::VerbsError::Memlock(m) => HostError::Memlock(m.to_string()),
        e => HostError::Device(format!("registering the {bytes}-byte buffer pool: {e}")),
    })
}
