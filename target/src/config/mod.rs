//! The `nvmf-target` daemon configuration: one model ([`model`]), two readers — the
//! daemon's own TOML ([`toml`], see `target/examples/target.toml`) and the JSON file
//! `nvmetcli save` writes for Linux nvmet ([`json`], see
//! `target/examples/nvmetcli.json`) — and one validator ([`validate`]).
//!
//! ```toml
//! provider = "soft"           # or "verbs": a kernel RDMA device (build feature `verbs`)
//! poll_groups = 1
//! [[listen]]
//! addr = "127.0.0.2"          # trsvcid defaults to 4420
//! [[subsystems]]
//! nqn = "nqn.2026-11.io.nvmf-rdma:target"
//! [[subsystems.namespaces]]
//! nsid = 1
//! path = "/var/tmp/ns1.img"   # created sparse at `size` when missing
//! size = "1G"
//! [[subsystems.namespaces]]
//! nsid = 2
//! path = "/dev/nvme1n1"       # a block device: opened with O_EXCL, sized by the kernel
//! direct = true               # O_DIRECT (default false: through the page cache)
//! ```
//!
//! Parsing ([`TargetConfig::from_toml_str`], [`TargetConfig::from_nvmetcli_json_str`],
//! [`TargetConfig::from_file`], which reads a file ending in `.json` or starting with
//! `{` as nvmetcli JSON and any other as TOML) validates too; errors name the file (or
//! "configuration") and the offending item by its path in the file
//! (`ports[0].addr.trtype = "tcp": only rdma is served`); a key or value the target
//! does not serve is refused by name, never ignored. Relative namespace paths are
//! relative to the daemon's working directory.
//!
//! Several `[[listen]]` entries (nvmet's ports): each distinct address gets its own
//! RDMA device (soft: UDP 4791 of that address; verbs: the device whose RoCE v2 GID the
//! address is), connection manager and `poll_groups` poll groups; each entry's
//! `trsvcid` is an RDMA CM port listened on at its address. When no entry names
//! `subsystems`, every subsystem is reachable through every entry and the discovery
//! log page lists each on each (as before links existed, and as SPDK lists every
//! listener); once entries link subsystems (`subsystems = ["nqn..."]`, always so in
//! nvmetcli JSON), each serves only those, and its discovery log page lists only
//! itself, its subsystems and its referrals, as nvmet's.

pub mod diff;
pub mod ids;
pub mod json;
pub mod model;
pub mod size;
pub mod toml;
pub mod validate;

#[cfg(test)]
mod tests;

use std::path::{Path, PathBuf};

pub use diff::{diff, ReloadPlan};
pub use ids::{Eui64, IdParseError, Nguid};
pub use model::*;
pub use size::{parse_size, ParseSizeError};
pub use validate::{check_data_slab, is_valid_nqn};

/// Why a configuration was refused. Each message starts with the file's path (or
/// "configuration" for a string).
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("{}: cannot read: {source}", path.display())]
    Read {
        /// The configuration file.
        path: PathBuf,
        /// The operating system's error.
        source: std::io::Error,
    },
    /// The TOML is malformed, or a field is unknown or of the wrong type.
    #[error("{origin}: {source}")]
    Parse {
        /// The file path, or "configuration".
        origin: String,
        /// The TOML error, with line and column.
        source: ::toml::de::Error,
    },
    /// The nvmetcli JSON is not well-formed JSON.
    #[error("{origin}: not JSON as `nvmetcli save` writes it: {source}")]
    Json {
        /// The file path, or "configuration".
        origin: String,
        /// The JSON error, with line and column.
        source: serde_json::Error,
    },
    /// The file is well-formed but a key or value is not acceptable.
    #[error("{origin}: {reason}")]
    Invalid {
        /// The file path, or "configuration".
        origin: String,
        /// What is wrong and where, e.g. `subsystems[0] (nqn.x:a): namespaces[1]: nsid
        /// 1 is used twice` or `ports[0].addr.trtype = "tcp": only rdma is served`.
        reason: String,
    },
}

/// The two file forms the daemon reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConfigFormat {
    /// The daemon's own TOML.
    Toml,
    /// The JSON `nvmetcli save` writes.
    NvmetcliJson,
}

impl ConfigFormat {
    /// The form of the file at `path` holding `text`: nvmetcli JSON when the name ends
    /// in `.json` or the text starts with `{` (which TOML never does), else TOML.
    pub fn of(path: &Path, text: &str) -> ConfigFormat {
        let json_name = path
            .extension()
            .is_some_and(|e| e.eq_ignore_ascii_case("json"));
        if json_name || text.trim_start().starts_with('{') {
            ConfigFormat::NvmetcliJson
        } else {
            ConfigFormat::Toml
        }
    }
}

impl TargetConfig {
    /// Reads, parses and validates a configuration file, TOML or nvmetcli JSON
    /// ([`ConfigFormat::of`]).
    ///
    /// # Errors
    /// [`ConfigError`] whose message starts with `path`.
    pub fn from_file(path: &Path) -> Result<TargetConfig, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        let origin = path.display().to_string();
        match ConfigFormat::of(path, &text) {
            ConfigFormat::Toml => toml::parse(&text, &origin),
            ConfigFormat::NvmetcliJson => json::parse(&text, &origin),
        }
    }

    /// Parses and validates a TOML configuration.
    ///
    /// # Errors
    /// [`ConfigError::Parse`] or [`ConfigError::Invalid`], with origin "configuration".
    pub fn from_toml_str(s: &str) -> Result<TargetConfig, ConfigError> {
        toml::parse(s, "configuration")
    }

    /// Parses and validates the JSON `nvmetcli save` writes ([`json`]).
    ///
    /// # Errors
    /// [`ConfigError::Json`] or [`ConfigError::Invalid`], with origin "configuration".
    pub fn from_nvmetcli_json_str(s: &str) -> Result<TargetConfig, ConfigError> {
        json::parse(s, "configuration")
    }
}
