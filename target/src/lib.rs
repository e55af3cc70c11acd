//! `nvmf-target`: the NVMe over Fabrics target — subsystems, controllers and io_uring
//! file namespaces, over the transport's verbs model (NVMe Base 2.x, NVMe over
//! Fabrics, NVMe RDMA Transport 1.x).
//!
//! One concern per module, as Linux's drivers/nvme/target: [`subsystem`], [`ana`] and
//! [`controller`] (state), [`fabrics`] (Connect, Property Get/Set), [`admin`] (admin
//! commands), [`io`] (NVM commands), [`discovery`] (the discovery log page),
//! [`rdma`] (the NVMe/RDMA transport: the request core, a sans-IO state machine, and
//! the poll groups that drive it), [`server`] (start/stop, CM and Keep Alive, generic
//! over the RDMA provider), [`provider`] (which provider: soft or verbs), and the
//! poll groups' building blocks [`buffers`] (the registered data slab), [`memory`] (how
//! much the poll groups pin, sized from `RLIMIT_MEMLOCK`), [`uring`] (io_uring),
//! [`backend`] (namespaces on files and block devices, O_DIRECT or not) and [`config`]
//! (the daemon's configuration: one model, read from TOML or nvmetcli JSON); [`oplog`]
//! is what the target tells its operator, [`logging`] how log lines are written,
//! [`metrics`] what it tells Prometheus.

pub mod admin;
pub mod ana;
pub mod backend;
pub mod buffers;
#[doc(hidden)]
pub mod capsule;
pub mod config;
pub mod control_socket;
pub mod controller;
pub mod cpus;
pub mod discovery;
pub mod error_log;
pub mod fabrics;
pub mod io;
pub mod logging;
pub mod memory;
pub mod metrics;
pub mod oplog;
pub mod provider;
pub mod rdma;
pub mod reload;
pub mod server;
pub mod shutdown;
pub mod stats;
pub mod subsystem;
pub mod uring;

pub use provider::{start, start_with_faults, ProviderKind};
pub use server::{start_on, Reloader, TargetError, TargetHandle};
