//! Sizes in the configuration: bytes, or a number with a unit ("512M", "1G").

use serde::{Deserialize, Deserializer};

/// Why [`parse_size()`] refused a string.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid size {input:?}: {reason}")]
pub struct ParseSizeError {
    /// The string given.
    pub input: String,
    /// What is wrong.
    pub reason: &'static str,
}

/// Parses a size, the one size syntax of the daemon, the bench and the tools: a number
/// of bytes with an optional unit K, M, G, T, P or E, each a power of 1024 whether
/// written `K`, `KB` or `KiB` (fio's default `kb_base=1024`), any case, spaces allowed
/// between number and unit, fractions rounded to the nearest byte: "4096", "4k",
/// "512M", "1 GiB", "2tb", "1.5G". Parsed by the `parse-size` crate.
///
/// # Errors
/// [`ParseSizeError`] for an empty string, a missing number, an unknown unit, or a
/// value above `u64::MAX`.
pub fn parse_size(s: &str) -> Result<u64, ParseSizeError> {
    let err = |reason| ParseSizeError {
        input: s.to_string(),
        reason,
    };
    let t = s.trim();
    if !t.starts_with(|c: char| c.is_ascii_digit()) {
        return Err(err(
            "expected a number of bytes with an optional unit, e.g. 4096, 4k, 512M or 1G",
        ));
    }
    let cfg = parse_size::Config::new().with_binary();
    cfg.parse_size(t).map_err(|e| {
        err(match e {
            parse_size::Error::PosOverflow => "size too large",
            _ => "unknown unit (use K, M, G, T or P, optionally with B or iB)",
        })
    })
}

/// A size written as an integer or a string.
#[derive(Deserialize)]
#[serde(untagged)]
enum SizeRepr {
    Int(u64),
    Str(String),
}

pub(super) fn de_opt_size<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    Ok(Option::<SizeRepr>::deserialize(d)?.map(|r| match r {
        SizeRepr::Int(n) => n.to_string(),
        SizeRepr::Str(s) => s,
    }))
}

pub(super) fn de_opt_size_u64<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    use serde::de::Error;
    Option::<SizeRepr>::deserialize(d)?
        .map(|r| match r {
            SizeRepr::Int(n) => Ok(n),
            SizeRepr::Str(s) => parse_size(&s).map_err(D::Error::custom),
        })
        .transpose()
}

pub(super) fn de_size_u32<'de, D: Deserializer<'de>>(d: D) -> Result<u32, D::Error> {
    use serde::de::Error;
    let n = match SizeRepr::deserialize(d)? {
        SizeRepr::Int(n) => n,
        SizeRepr::Str(s) => parse_size(&s).map_err(D::Error::custom)?,
    };
    u32::try_from(n).map_err(|_| D::Error::custom(format!("{n} bytes does not fit in 32 bits")))
}
