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
//!   (`ProviderKind::check_built("nvmf-target")`) with the command that builds it.
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

/// An RDMA provider, by name (`provider = "soft" | "verbs"` in the configuration,
/// `--provider` on the command line): the transport's, defined once there.
pub use transport::ProviderKind;

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
    server::start_with::<SoftProvider>(cfg, move |ip, poll_groups| SoftDeviceConfig {
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
    server::start_with::<SoftProvider>(cfg, move |ip, poll_groups| SoftDeviceConfig {
        faults,
        ..SoftProvider::device_config(ip, poll_groups)
    })
}
