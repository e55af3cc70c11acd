//! Providers and packet paths by name, defined once for every program that lets its
//! user choose them (`nvmf-target --provider`, `provider = "..."` in its configuration,
//! `nvmf-bench --provider` and `--packet-path`).
//!
//! With the crate feature `clap` the enums are `clap::ValueEnum`s, with `serde` they
//! (de)serialize in lower case; the transport itself needs neither.

/// An RDMA provider, by name: `soft` or `verbs`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[cfg_attr(
    feature = "serde",
    derive(serde::Serialize, serde::Deserialize),
    serde(rename_all = "lowercase")
)]
pub enum ProviderKind {
    /// The soft provider: userspace RoCEv2 over UDP sockets, no RDMA hardware or kernel
    /// support needed.
    #[default]
    Soft,
    /// The verbs provider: a kernel RDMA device (an RNIC, or Soft-RoCE `rdma_rxe`)
    /// through libibverbs and librdmacm; in builds with the `verbs` feature.
    Verbs,
}

/// Whether this build of the transport has the verbs provider (feature `verbs`).
pub const VERBS_BUILT: bool = cfg!(feature = "verbs");

impl ProviderKind {
    /// `"soft"` or `"verbs"` (the provider's `Provider::NAME`).
    pub fn name(self) -> &'static str {
        match self {
            ProviderKind::Soft => <crate::soft::SoftProvider as crate::verbs::Provider>::NAME,
            ProviderKind::Verbs => "verbs",
        }
    }

    /// Whether this build can run the provider.
    ///
    /// # Errors
    /// [`KindError::VerbsNotBuilt`] for `verbs` in a build without the verbs provider;
    /// its message says how to build `package` with it (`cargo build --release -p
    /// PACKAGE --features verbs`, and the Debian packages it needs).
    pub fn check_built(self, package: &str) -> Result<(), KindError> {
        match self {
            ProviderKind::Verbs if !VERBS_BUILT => Err(KindError::VerbsNotBuilt {
                package: package.to_string(),
            }),
            _ => Ok(()),
        }
    }
}

/// A provider or packet path that this build or these options cannot run.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KindError {
    /// `verbs` in a build without the verbs provider.
    #[error(
        "provider \"verbs\": this {package} was built without the verbs provider; {}; \
         or use provider \"soft\"",
        build_verbs_hint(package)
    )]
    VerbsNotBuilt {
        /// The program's package (`nvmf-target`, `nvmf-bench`, ...).
        package: String,
    },
    /// `--packet-path af-xdp` without `--interface`.
    #[error(
        "--packet-path af-xdp needs --interface IFACE, the interface that holds the local \
         address (`ip -br addr`)"
    )]
    AfXdpNeedsInterface,
}

/// How to build `package` with the verbs provider, for refusal messages.
pub fn build_verbs_hint(package: &str) -> String {
    format!(
        "rebuild with the verbs provider: `cargo build --release -p {package} --features verbs` \
         (needs rdma-core's libibverbs-dev and librdmacm-dev, libclang-dev and pkg-config; \
         Debian: apt-get install libibverbs-dev librdmacm-dev libclang-dev pkg-config)"
    )
}

impl std::fmt::Display for ProviderKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// How a soft device moves its RoCEv2 packets, by name (`--packet-path`): the choice
/// of [`crate::soft::xdp::PacketPath`] without its interface.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[cfg_attr(
    feature = "serde",
    derive(serde::Serialize, serde::Deserialize),
    serde(rename_all = "kebab-case")
)]
pub enum PacketPathKind {
    /// UDP sockets (the default).
    #[default]
    Udp,
    /// AF_XDP sockets on an interface, past the kernel's UDP stack (root only).
    AfXdp,
}

impl PacketPathKind {
    /// The packet path of this kind on `interface` (`--interface`), which AF_XDP needs
    /// and UDP ignores.
    ///
    /// # Errors
    /// [`KindError::AfXdpNeedsInterface`]: AF_XDP without an interface (the message
    /// names `--interface` and how to find it).
    pub fn with_interface(
        self,
        interface: Option<&str>,
    ) -> Result<crate::soft::xdp::PacketPath, KindError> {
        use crate::soft::xdp::PacketPath;
        match (self, interface) {
            (PacketPathKind::Udp, _) => Ok(PacketPath::Udp),
            (PacketPathKind::AfXdp, Some(i)) => Ok(PacketPath::AfXdp {
                interface: i.to_string(),
            }),
            (PacketPathKind::AfXdp, None) => Err(KindError::AfXdpNeedsInterface),
        }
    }
}

impl crate::soft::xdp::PacketPath {
    /// Which kind of path this is.
    pub fn kind(&self) -> PacketPathKind {
        match self {
            crate::soft::xdp::PacketPath::Udp => PacketPathKind::Udp,
            crate::soft::xdp::PacketPath::AfXdp { .. } => PacketPathKind::AfXdp,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_paths() {
        assert_eq!(ProviderKind::default().name(), "soft");
        assert_eq!(ProviderKind::Verbs.to_string(), "verbs");
        assert!(ProviderKind::Soft.check_built("nvmf-target").is_ok());
        if !VERBS_BUILT {
            let e = ProviderKind::Verbs
                .check_built("nvmf-bench")
                .unwrap_err()
                .to_string();
            assert!(e.contains("-p nvmf-bench --features verbs"), "{e}");
        }
        let p = PacketPathKind::AfXdp.with_interface(Some("veth0")).unwrap();
        assert_eq!(p.kind(), PacketPathKind::AfXdp);
        assert!(PacketPathKind::AfXdp.with_interface(None).is_err());
        assert_eq!(
            PacketPathKind::Udp
                .with_interface(Some("x"))
                .unwrap()
                .kind(),
            PacketPathKind::Udp
        );
    }
}
