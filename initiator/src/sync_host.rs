//! A whole host without tokio: the RDMA device, the CM agent, the controller on the
//! admin queue and N I/O queues, each queue in its own poll group (`rx_queues` = 1 +
//! N: poll group 0 is the admin queue, poll group `i` I/O queue `i`).
//!
//! The benchmark drives the I/O queues itself ([`SyncHost::into_io_queues`]) while an
//! [`AdminKeeper`] thread sends Keep Alives with blocking waits.
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam::channel::{self, RecvTimeoutError, Sender};
use transport::soft::{CmAgent, DeviceConfig, SoftDevice};

use crate::controller::{Controller, ControllerOptions};
use crate::error::HostError;
use crate::health::ControllerHealth;
use crate::options::HostOptions;
use crate::queue::NvmeRdmaQueue;

/// A connected host: see the module docs.
pub struct SyncHost {
    dev: Arc<SoftDevice>,
    controller: Controller,
    io_queues: Vec<NvmeRdmaQueue>,
}

impl std::fmt::Debug for SyncHost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SyncHost")
            .field("controller", &self.controller)
            .field("io_queues", &self.io_queues.len())
            .finish()
    }
}

impl SyncHost {
    /// Opens the soft RDMA device on `opts.local_ip` (or the kernel's source address
    /// toward the target), starts its CM agent, brings the controller up, asks for
    /// `opts.io_queues` queues (Set Features Number of Queues) and connects as many as
    /// were granted, each of `min(queue_depth, CAP.MQES + 1)` entries and
    /// `min(max_io_bytes, MDTS)` bytes per command.
    pub fn connect(opts: &HostOptions) -> Result<SyncHost, HostError> {
        if opts.io_queues == 0 {
            return Err(HostError::InvalidArgument("at least one I/O queue".into()));
        }
        let ip = opts.resolve_local_ip()?;
        let mut dcfg = DeviceConfig::new(ip);
        dcfg.rx_queues = 1 + u32::from(opts.io_queues);
        dcfg.faults = opts.faults;
        let dev = SoftDevice::open(dcfg)
            .map_err(|e| HostError::Device(format!("opening the RDMA device on {ip}: {e}")))?;
        let cm = CmAgent::start(&dev).map_err(|e| HostError::Device(format!("CM agent: {e}")))?;
        let ctx0 = dev
            .open_context(0)
            .map_err(|e| HostError::Device(e.to_string()))?;
        let mut controller = Controller::connect(ctx0, &cm, ControllerOptions::from(opts))?;
        let granted = controller
            .set_number_of_queues(opts.io_queues)?
            .min(opts.io_queues);
        let mqes = controller.max_queue_entries().min(u32::from(u16::MAX)) as u16;
        let depth = opts.queue_depth.min(mqes).max(2);
        let max_io = controller
            .max_transfer_bytes()
            .map_or(opts.max_io_bytes, |m| m.min(opts.max_io_bytes));
        let mut io_queues = Vec::with_capacity(usize::from(granted));
        for qid in 1..=granted {
            let ctx = dev
                .open_context(u32::from(qid))
                .map_err(|e| HostError::Device(e.to_string()))?;
            match controller.connect_io_queue(ctx, qid, depth, max_io) {
                Ok(q) => io_queues.push(q),
                Err(e) => {
                    let _ = controller.shutdown(io_queues);
                    return Err(e);
                }
            }
        }
        Ok(SyncHost {
            dev,
            controller,
            io_queues,
        })
    }

    /// The soft RDMA device (its key table, counters).
    pub fn device(&self) -> &Arc<SoftDevice> {
        &self.dev
    }
    /// The controller (admin commands).
    pub fn controller(&mut self) -> &mut Controller {
        &mut self.controller
    }
    /// The I/O queues (index `i` is QID `i + 1`).
    pub fn io_queues(&mut self) -> &mut [NvmeRdmaQueue] {
        &mut self.io_queues
    }
    /// Splits the host into the controller and its I/O queues.
    pub fn into_parts(self) -> (Arc<SoftDevice>, Controller, Vec<NvmeRdmaQueue>) {
        (self.dev, self.controller, self.io_queues)
    }
    /// Hands the I/O queues out and moves the controller to an [`AdminKeeper`] thread
    /// that sends Keep Alive every KATO/2.
    pub fn into_io_queues(self) -> (Vec<NvmeRdmaQueue>, AdminKeeper) {
        (self.io_queues, AdminKeeper::start(self.controller))
    }
    /// Disconnects the I/O queues and shuts the controller down.
    pub fn disconnect(self) -> Result<(), HostError> {
        self.controller.shutdown(self.io_queues)
    }
}

/// How often the [`AdminKeeper`] drives the admin queue's transport between Keep
/// Alives (at most; sooner when an RC timer of the admin QP is due).
const ADMIN_TICK: Duration = Duration::from_millis(20);

/// A thread that owns the [`Controller`] and sends Keep Alive every KATO/2 (blocking
/// waits, no busy polling; the admin queue's transport is driven every 20 ms at most)
/// until [`AdminKeeper::shutdown`]. A failed Keep Alive ends the thread and declares
/// the controller dead in [`AdminKeeper::health`].
pub struct AdminKeeper {
    stop: Option<Sender<()>>,
    thread: Option<JoinHandle<(Controller, Option<HostError>)>>,
    health: ControllerHealth,
}

impl std::fmt::Debug for AdminKeeper {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AdminKeeper").finish()
    }
}

impl AdminKeeper {
    /// Starts the thread.
    pub fn start(mut controller: Controller) -> AdminKeeper {
        let (stop, stopped) = channel::bounded::<()>(1);
        let health = ControllerHealth::new();
        let declare = health.clone();
        let thread = std::thread::Builder::new()
            .name("nvmf-admin".into())
            .spawn(move || {
                let interval = controller
                    .keep_alive_interval()
                    .unwrap_or(Duration::from_secs(3600));
                let mut next_keep_alive = Instant::now() + interval;
                loop {
                    // Between Keep Alives the admin QP still needs its transport
                    // driven: ACKs to send, retransmissions, timers. Otherwise, under
                    // loss, the target's admin QP may run out of retries waiting for an
                    // ACK this host only sends at the next Keep Alive.
                    let q = controller.admin_queue_mut();
                    q.progress();
                    let now = Instant::now();
                    let wait = next_keep_alive
                        .saturating_duration_since(now)
                        .min(q.next_timer().unwrap_or(ADMIN_TICK))
                        .min(ADMIN_TICK)
                        .max(Duration::from_millis(1));
                    match stopped.recv_timeout(wait) {
                        Err(RecvTimeoutError::Timeout) => {
                            if Instant::now() < next_keep_alive {
                                continue;
                            }
                            next_keep_alive = Instant::now() + interval;
                            if controller.keep_alive_interval().is_none() {
                                continue;
                            }
                            if let Err(e) = controller.keep_alive() {
                                tracing::warn!("Keep Alive failed: {e}");
                                declare.declare_dead(format!("Keep Alive failed: {e}"));
                                return (controller, Some(e));
                            }
                        }
                        _ => return (controller, None),
                    }
                }
            })
            .ok();
        AdminKeeper {
            stop: Some(stop),
            thread,
            health,
        }
    }

    /// The controller's health as this keeper sees it (shared: clone it to whoever
    /// drives the I/O queues, e.g. `nvmf-bench`'s `QueueEngine::with_health`).
    pub fn health(&self) -> &ControllerHealth {
        &self.health
    }

    /// Stops the thread and shuts the controller down after disconnecting
    /// `io_queues`. Returns a Keep Alive failure seen earlier, or the shutdown's error.
    pub fn shutdown(mut self, io_queues: Vec<NvmeRdmaQueue>) -> Result<(), HostError> {
        drop(self.stop.take());
        let Some(t) = self.thread.take() else {
            return Err(HostError::Disconnected);
        };
        let (controller, ka_err) = t.join().map_err(|_| HostError::Disconnected)?;
        let r = controller.shutdown(io_queues);
        match ka_err {
            Some(e) => Err(e),
            None => r,
        }
    }
}

impl Drop for AdminKeeper {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
