//! NVMe in-band authentication with DH-HMAC-CHAP (NVMe Base 2.x §8.13 "NVMe in-band
//! authentication", §8.13.5 "DH-HMAC-CHAP protocol"; TP 8006), written once for both
//! sides: the target's [`ControllerAuth`] and the host library's [`HostAuth`], sans IO
//! (they take and give message bytes; the transports carry them in Authentication
//! Send/Receive commands, whose SQEs and messages are in [`nvme::auth`]).
//!
//! - [`secret`]: `DHHC-1:xx:<base64>:` secrets (CRC-32 check, key transformation).
//! - [`crypto`]: SHA-2 and HMAC (the `sha2`/`hmac` crates), the host and controller
//!   responses and the augmented challenge.
//! - [`dh`]: the RFC 7919 ffdhe groups with `num-bigint`.
//! - [`controller`], [`host`]: the two roles' state machines.
//!
//! The computations were checked against the Linux 6.12 exchange in
//! `linux-nvme-rdma-dhchap.pcap` (tests in `tests.rs` recompute its responses).

#[cfg(test)]
mod capture;
pub mod controller;
pub mod crypto;
pub mod dh;
pub mod host;
mod primes;
pub mod secret;

#[cfg(test)]
mod tests;

pub use controller::{AuthFailure, ControllerAuth, ControllerPolicy, Progress};
pub use host::{HostAuth, HostAuthError, HostSecrets, RECEIVE_LEN};
pub use nvme::auth::{DhGroupId, FailureExplanation, HashId};
pub use secret::{Secret, SecretError};
