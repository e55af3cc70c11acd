//! The RoCE engineer's tools, thin binaries over the transport library:
//! - `rdma-info` ([`info`]): devices, ports, state, active MTU, speed and the GID table
//!   with types, as `ibv_devinfo -v` and `show_gids` print them, and the hardware
//!   counters, for the verbs provider (sysfs) and the soft provider (this host's
//!   interfaces and addresses).
//! - `rdma-doctor` ([`doctor`]): a checklist of this host's RoCE configuration (GID,
//!   MTU, memlock and open-file limits, socket buffers, ECN, rp_filter, firewall on UDP
//!   4791, DCB), optionally against a peer, each finding with what it means and the
//!   command that fixes it.
//!
//! - `rdma-perf` ([`perf`]): perftest's bandwidth and latency tests, wire-compatible
//!   with perftest (TCP 18515 exchange and data phase), over either provider.
//!
//! - `nvmf` ([`nvmf`]): nvme-cli's fabrics and I/O commands (discover, connect, id-ctrl,
//!   logs, features, read/write/compare, ...) over the NVMe/RDMA host library, with
//!   nvme-cli's flags, JSON field names, status lines and exit codes.
//!
//! [`netif`] reads the host's interfaces (addresses, MTU, state) for both.
#![warn(missing_docs)]

pub mod doctor;
pub mod info;
pub mod netif;
pub mod nvmf;
pub mod perf;
