//! Sizes in the configuration: bytes, or a number with a unit ("512M", "1G").

use serde::{Deserialize, Deserializer};

/// Why [`parse_size`] refused a string.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid size {input:?}: {reason}")]
pub struct ParseSizeError {
    /// The string given.
    pub input: String,
    /// What is wrong.
    pub reason: &'static str,
}

/// Parses a size: a decimal integer of bytes with an optional unit K, M, G or T (powers
/// of 1024), optionally followed by "iB" or "B", case-insensitive, with optional spaces
/// between number and unit: "4096", "512M", "1G", "1 GiB", "2tb".
///
/// # Errors
/// [`ParseSizeError`] for an empty string, a missing or non-decimal number (fractions
/// included), an unknown unit, or a value above `u64::MAX`.
pub fn parse_size(s: &str) -> Result<u64, ParseSizeError> {
    let err = |reason| ParseSizeError {
        input: s.to_string(),
        reason,
    };
    let t = s.trim();
    let digits_end = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = t.split_at(digits_end);
    if num.is_empty() {
        return Err(err(
            "expected a decimal number of bytes, e.g. 4096, 512M or 1G",
        ));
    }
    let n: u64 = num.parse().map_err(|_| err("number too large"))?;
    let unit = unit.trim_start().to_ascii_lowercase();
    let shift = match unit.as_str() {
        "" | "b" => 0,
        "k" | "kb" | "kib" => 10,
        "m" | "mb" | "mib" => 20,
        "g" | "gb" | "gib" => 30,
        "t" | "tb" | "tib" => 40,
        _ => {
            return Err(err(
                "unknown unit (use K, M, G or T, optionally with B or iB)",
            ))
        }
    };
    n.checked_mul(1u64 << shift)
        .ok_or_else(|| err("size too large"))
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
