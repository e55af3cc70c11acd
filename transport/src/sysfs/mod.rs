//! What Linux shows of its RDMA devices under `/sys/class/infiniband/<dev>/`, read as
//! files: no libibverbs, so the tools (`rdma-info`, `rdma-doctor`) and the verbs
//! provider's GID selection read the same tables, on hosts with or without the `verbs`
//! feature, and tests run on constructed trees.
//!
//! - [`gid`]: each port's GID table with entry types and netdevs, and the choice of
//!   the RoCE v2 GID of an IP address.
//! - [`port`]: the device's identity (`node_guid`, `fw_ver`, ...), each port's state,
//!   physical state, rate and link layer, and the hardware counters
//!   (`hw_counters/*`).
pub mod gid;
pub mod port;
