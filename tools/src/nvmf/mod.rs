//! `nvmf`: nvme-cli's fabrics and I/O commands (`discover`, `connect`/`connect-all`,
//! `disconnect`, `list`, `list-subsys`, `id-ctrl`, `id-ns`, `get-log`, `smart-log`,
//! `error-log`, `get-feature`/`set-feature`, `read`/`write`, `flush`, `dsm --ad`,
//! `write-zeroes`, `compare`) as a thin binary over the host library
//! (`nvmf_initiator`), for scripts and operators.
//!
//! - [`args`]: the command line, nvme-cli's flags (clap);
//! - [`run`]: the commands over [`nvmf_initiator::Host`]; each connects, runs and
//!   disconnects, `connect` holds until SIGINT/SIGTERM;
//! - [`state`]: the live `connect` processes (`list`, `list-subsys`, `disconnect`);
//! - [`json`]: `-o json` with nvme-cli's field names;
//! - [`status`]: NVMe statuses and exit codes as nvme-cli prints them;
//! - `ublk` (feature `ublk`): `connect --ublk`, each namespace a /dev/ublkbN through
//!   the kernel's ublk driver (libublk); [`ublk_map`]: its options, the kernel check
//!   and its requests to NVMe commands, sans-IO (always built).
//!
//! docs/nvmf-cli.md describes the tool.
pub mod args;
pub mod json;
pub mod run;
pub mod state;
pub mod status;
#[cfg(feature = "ublk")]
pub mod ublk;
pub mod ublk_map;
