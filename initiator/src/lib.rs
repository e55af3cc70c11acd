//! NVMe over Fabrics host (initiator) on RDMA, as Linux's nvme-rdma does it (NVMe RDMA
//! Transport 1.x, NVMe over Fabrics 1.1, NVMe Base 2.x), over the transport's verbs
//! model.
//!
//! Layers, bottom up:
//! - [`queue`]: [`NvmeRdmaQueue`], one NVMe queue on one RC QP and its poll group
//!   (capsules, memory windows, SQ flow control);
//! - [`controller`]: [`Controller`], bring-up and admin commands over the admin queue
//!   (Fabrics Connect, properties, Identify, Set Features, Keep Alive, shutdown);
//! - [`sync_host`]: [`SyncHost`], a whole host without tokio (admin queue plus N I/O
//!   queues; the benchmark uses it), and [`engine::QueueEngine`] for `nvmf-bench`;
//! - [`host`]: [`Host`], the public async (tokio) API with a dedicated poll thread.
pub mod bench;
pub mod capsule;
pub mod controller;
pub mod engine;
pub mod error;
pub mod fabrics;
pub mod host;
pub mod identify;
pub mod options;
pub mod queue;
pub mod sync_host;

pub use capsule::DataDir;
pub use controller::{Controller, ControllerOptions};
pub use error::{HostError, QueueError};
pub use host::{Host, Namespace};
pub use options::HostOptions;
pub use identify::{ControllerInfo, NamespaceInfo};
pub use queue::{NvmeRdmaQueue, QueueCompletion, QueueConfig};
pub use sync_host::SyncHost;
