//! The TOML reader: the daemon's own form (`target/examples/target.toml`), read by
//! serde straight into the [`model`](super::model) (every table refuses keys it does
//! not know), then validated.

use super::{ConfigError, TargetConfig};

/// Parses and validates TOML `s` from `origin` (a path, or "configuration").
///
/// # Errors
/// [`ConfigError::Parse`] (malformed, unknown key, wrong type; with line and column)
/// or [`ConfigError::Invalid`].
pub fn parse(s: &str, origin: &str) -> Result<TargetConfig, ConfigError> {
    let cfg: TargetConfig = ::toml::from_str(s).map_err(|source| ConfigError::Parse {
        origin: origin.to_string(),
        source,
    })?;
    cfg.validate_as(origin)?;
    Ok(cfg)
}
