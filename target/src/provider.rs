//! Provider selection: which RDMA provider the target runs on. The one place in the
//! target that names a provider's concrete type; everything else is generic over
//! `P:` [`transport::verbs::Provider`] ([`crate::server::start_on`]).
//!
//! - `soft` (the default, [`SoftProvider`]): the userspace RoCEv2 provider over UDP
//!   sockets; runs anywhere, needs no RDMA hardware or kernel support. Its receive
//!   fault injection ([`start_with_faults`], for `nvmf-bench --inject-*`) and its
//!   device counters (`TargetHandle<SoftProvider>::device().counters()`) are soft only.
//! - `verbs` (`VerbsProvider`, cargo feature `verbs`): a kernel RDMA device (an RNIC
//!   or Soft-RoCE `rdma_rxe`) through libibverbs and librdmacm; each listen address
//!   opens the device whose RoCE v2 GID it is. A build without the feature refuses it
//!   ([`ProviderKind::check_built`]) with the command that builds it.
use serde::{Deserialize, Serialize};
#[cfg(feature = "verbs")]
pub use transport::rdma::VerbsProvider;
pub use transport::soft::SoftProvider;
use transport::soft::{DeviceConfig as SoftDeviceConfig, FaultConfig};
use transport::verbs::Provider;

use crate::config::TargetConfig;
use crate::server::{self, TargetError, TargetHandle};

/// The provider a [`TargetHandle`] runs on when none is named: the soft provider.
pub type DefaultProvider = SoftProvider;

/// Whether this build has the verbs provider (cargo feature `verbs`).
pub const VERBS_BUILT: bool = cfg!(feature = "verbs");

/// How to build `nvmf-target` with the verbs provider (for the refusal message).
pub const BUILD_VERBS_HINT: &str =
    "rebuild with the verbs provider: `cargo build --release -p nvmf-target --features verbs` \
     (needs rdma-core's libibverbs-dev and librdmacm-dev, libclang-dev and pkg-config; \
     Debian: apt-get install libibverbs-dev librdmacm-dev libclang-dev pkg-config)";

/// An RDMA provider, by name (`provider = "soft" | "verbs"` in the configuration,
/// `--provider` on the command line).
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, clap::ValueEnum,
)]
#[serde(rename_all = "lowercase")]
pub enum ProviderKind {
    /// The userspace RoCEv2 provider over UDP sockets (no RDMA hardware needed).
    #[default]
    Soft,
    /// A kernel RDMA device (RNIC or Soft-RoCE) through libibverbs and librdmacm.
    Verbs,
}

impl ProviderKind {
    /// `"soft"` or `"verbs"` (the provider's `Provider::NAME`).
    pub fn name(self) -> &'static str {
        match self {
            ProviderKind::Soft => SoftProvider::NAME,
            ProviderKind::Verbs => "verbs",
        }
    }

    /// Whether this build can run the provider.
    ///
    /// # Errors
    /// For `verbs` in a build without the `verbs` feature: a message saying so and how
    /// to build it ([`BUILD_VERBS_HINT`]).
    pub fn check_built(self) -> Result<(), String> {
        match self {
            ProviderKind::Verbs if !VERBS_BUILT => Err(format!(
                "provider \"verbs\": this nvmf-target was built without the verbs provider; \
                 {BUILD_VERBS_HINT}; or use provider \"soft\""
            )),
            _ => Ok(()),
        }
    }
}

impl std::fmt::Display for ProviderKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Starts a target on the soft provider ([`server::start_on`]), the provider of
/// every embedded use (tests, `nvmf-bench`'s embedded target). A daemon that follows
/// `cfg.provider` matches it to `start_on::<P>` itself (as `nvmf-target` does).
///
/// # Errors
/// [`TargetError::Config`] when `cfg.provider` names another provider (this function
/// would not honour it); otherwise as [`server::start_with`].
pub fn start(cfg: &TargetConfig) -> Result<TargetHandle<SoftProvider>, TargetError> {
    check_soft(cfg)?;
    server::start_on::<SoftProvider>(cfg)
}

/// Refuses a configuration that names another provider than the soft one.
fn check_soft(cfg: &TargetConfig) -> Result<(), TargetError> {
    if cfg.provider != ProviderKind::Soft {
        return Err(TargetError::Config(format!(
            "the configuration asks for provider \"{}\", but nvmf_target::start runs the soft \
             provider: start it with nvmf_target::server::start_on::<{}>(...)",
            cfg.provider,
            match cfg.provider {
                ProviderKind::Soft => "SoftProvider",
                ProviderKind::Verbs => "VerbsProvider",
            }
        )));
    }
    Ok(())
}

/// [`start`], with the soft devices' packets on `packet_path` (AF_XDP on an interface,
/// root only; see `transport::soft::xdp`).
///
/// # Errors
/// As [`start`]; [`TargetError::Device`] when the AF_XDP path cannot be set up (the
/// message names the fix).
pub fn start_with_packet_path(
    cfg: &TargetConfig,
    packet_path: transport::soft::xdp::PacketPath,
) -> Result<TargetHandle<SoftProvider>, TargetError> {
    check_soft(cfg)?;
    server::start_with::<SoftProvider>(cfg, |ip, poll_groups| SoftDeviceConfig {
        packet_path: packet_path.clone(),
        ..SoftProvider::device_config(ip, poll_groups)
    })
}

/// [`start`], with the soft devices' receive fault injection (for tests and
/// `nvmf-bench --inject-*`; see `transport::soft::fault`).
///
/// # Errors
/// As [`start`]; [`TargetError::Device`] for a fault configuration out of range.
pub fn start_with_faults(
    cfg: &TargetConfig,
    faults: Option<FaultConfig>,
) -> Result<TargetHandle<SoftProvider>, TargetError> {
    check_soft(cfg)?;
    server::start_with::<SoftProvider>(cfg, |ip, poll_groups| SoftDeviceConfig {
        faults,
        ..SoftProvider::device_config(ip, poll_groups)
    })
}
