//! NVMe over Fabrics on RDMA (RoCEv2).
//!
//! This root package only holds the workspace's integration tests (`tests/`) and
//! criterion benchmarks (`benches/`); the code lives in the member crates, re-exported
//! here for them:
//! - [`nvme`]: NVMe and NVMe-oF wire structures (no I/O);
//! - [`transport`]: the verbs model, RoCEv2 wire format, RC protocol core, connection
//!   manager and the software RoCEv2 provider;
//! - [`nvmf_target`]: the NVMe-oF target (subsystems, controllers, io_uring namespaces);
//! - [`nvmf_initiator`]: the host library;
//! - [`nvmf_bench`]: `nvmf-bench`, fio's workloads over NVMe-oF, with its embedded target.
pub use nvme;
pub use nvmf_bench;
pub use nvmf_initiator;
pub use nvmf_target;
pub use transport;
