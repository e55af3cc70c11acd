//! NVMe over Fabrics host (initiator) on RDMA, as Linux's nvme-rdma does it (NVMe RDMA
//! Transport 1.x, NVMe over Fabrics 1.1, NVMe Base 2.x), over the transport's verbs
//! model.
//!
//! Layers, bottom up:
//! - [`pool`]: [`BufferPool`], the host's one registered buffer pool, shared by all its
//!   queues, and [`IoBuf`], an owned buffer of it that commands carry with no copy;
//! - [`queue`]: [`NvmeRdmaQueue`], one NVMe queue on one RC QP and its poll group,
//!   driving the sans-IO [`queue::QueueCore`] (slots, capsules, memory windows, SQ flow
//!   control); a command names its buffer, the queue hands it back with the completion;
//! - [`controller`]: [`Controller`], bring-up and admin commands over the admin queue
//!   (Fabrics Connect, properties, Identify, Set Features, Keep Alive, shutdown);
//! - [`lifecycle`]: the controller's lifecycle, sans-IO (Linux's states,
//!   `reconnect_delay`, `ctrl_loss_tmo`, `fast_io_fail_tmo`, Keep Alive loss), and
//!   [`keeper`]: the thread that drives it (Keep Alive, teardown, reconnect);
//! - [`sync_host`]: [`SyncHost`], a whole host without tokio (admin queue plus N I/O
//!   queues; `nvmf-bench`, in its own crate, drives those queues);
//! - [`host`]: [`Host`], the public async (tokio) API: zero-copy reads and writes of
//!   [`IoBuf`]s, bounded submission, completions that wake the waiting task directly.
//! - [`aen`]: asynchronous events (AERs kept posted, each event's log page read, the
//!   namespaces rescanned): [`Host::events`];
//! - [`discovery`]: the discovery client (the log read in pieces, referrals,
//!   `connect_all`, a persistent [`DiscoveryController`]);
//! - [`multipath`]: [`MultipathHost`], a layer above controllers: one subsystem
//!   through several paths, ANA-aware path choice and failover.
//!
//! ```no_run
//! use nvmf_initiator::{Host, HostOptions};
//!
//! # async fn example() -> Result<(), nvmf_initiator::HostError> {
//! let mut opts = HostOptions::new("192.168.77.10:4420".parse().unwrap(), "nqn.2026-11.io.example:ref");
//! opts.io_queues = 2;
//! let host = Host::connect(opts).await?;
//! let ns = host.namespace(1).await?;
//! // Zero copy: a registered buffer from the host's pool, written and read in place.
//! let mut buf = host.alloc(4096).await?;
//! buf.fill(0xA5);
//! let buf = ns.write_buf(0, buf, false).await?;
//! let buf = ns.read_buf(0, buf).await?;
//! assert!(buf.iter().all(|&b| b == 0xA5));
//! // Plain slices work too, through a copy.
//! let mut back = vec![0u8; 4096];
//! ns.read(0, &mut back).await?;
//! host.disconnect().await?;
//! # Ok(())
//! # }
//! ```
//!
//! Who the host is: [`HostOptions::new`] takes the host NQN and host ID from
//! `/etc/nvme/hostnqn` and `/etc/nvme/hostid` as nvme-cli does ([`HostIdentity`]), or
//! else makes a random pair once per process and logs it (set them in the options to
//! choose).
//!
//! Every layer is generic over the transport's provider (`P: transport::verbs::Provider`,
//! static dispatch) with the soft provider as the default type parameter, so `Host`,
//! `SyncHost` and `NvmeRdmaQueue` alone are the soft provider's. On a real RDMA device
//! (the transport's `verbs` feature): `Host::connect_with(VerbsProvider, opts)`, or
//! [`Host::connect_on`] a device the caller opened; [`device`] opens the host's device
//! from [`HostOptions`] and the provider's own options (`Provider::Options`: the soft
//! provider's fault injection and packet path) on any provider.
//!
//! Errors are [`HostError`] values: NVMe statuses keep SCT/SC/DNR and print their
//! specification names; transport failures keep the `IBV_WC_*` status.
pub mod aen;
pub mod auth;
pub mod capsule;
pub mod controller;
pub mod device;
pub mod discovery;
pub mod error;
mod fabrics;
pub mod health;
pub mod host;
pub mod identify;
pub mod keeper;
pub mod lifecycle;
pub mod multipath;
pub mod options;
pub mod pool;
pub mod queue;
pub mod split;
pub mod sync_host;

pub use aen::{AsyncEvents, ControllerEvent};
pub use capsule::DataDir;
pub use controller::{Controller, ControllerOptions};
pub use discovery::{DiscoveryController, DiscoveryEntry, DiscoveryLog};
pub use error::{HostError, QueueError};
pub use health::ControllerHealth;
pub use host::{BufError, Host, Namespace};
pub use identify::{ControllerInfo, IdentifyError, NamespaceIds, NamespaceInfo};
pub use multipath::{MultipathHost, MultipathNamespace, MultipathOptions, PathPolicy};
pub use options::{Completions, HostIdentity, HostOptions, IdentityError};
pub use pool::{BufferPool, IoBuf, PoolError, PoolSizeError, RemoteAccess};
pub use queue::{NvmeRdmaQueue, QueueCompletion, QueueConfig};
pub use sync_host::SyncHost;
