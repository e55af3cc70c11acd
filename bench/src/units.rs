//! fio's number syntax for sizes and times, as accepted on the command line.
//!
//! Sizes (`--bs`, `--size`, `--offset`, ...): a number with an optional suffix `k`,
//! `m`, `g`, `t`, `p` (optionally followed by `b` or `ib`, any case).
//! As with fio's default `kb_base=1024`, every prefix is a power of two:
//! `4k` = `4KiB` = `4kb` = 4096 bytes. A bare number is bytes.
//!
//! Times (`--runtime`, `--ramp_time`): a decimal integer with an optional suffix
//! `us`/`usec`, `ms`/`msec`, `s`/`sec`, `m`/`min`, `h`/`hour`, `d`/`day`.
//! A bare number is seconds, as in fio.

use std::time::Duration;

/// Error from [`parse_size`] or [`parse_duration`]: the text and what is wrong with it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid {what} {text:?}: {reason}")]
pub struct ParseUnitError {
    /// "size" or "time".
    pub what: &'static str,
    /// The text as given.
    pub text: String,
    /// Why it was refused, with the accepted forms.
    pub reason: String,
}

fn split_number(s: &str) -> (&str, &str) {
    let end = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    s.split_at(end)
}

/// Parses a fio size (`512`, `4k`, `128k`, `1m`, `1g`, `4KiB`) into bytes: the
/// project's one size syntax, [`nvmf_target::config::parse_size`] (every prefix a power
/// of 1024, as fio's default `kb_base=1024`).
///
/// Errors: empty text, no leading digits, an unknown suffix, or a value that
/// overflows `u64`.
pub fn parse_size(text: &str) -> Result<u64, ParseUnitError> {
    nvmf_target::config::parse_size(text).map_err(|e| ParseUnitError {
        what: "size",
        text: text.to_string(),
        reason: e.reason.to_string(),
    })
}

/// Parses a fio time (`10`, `10s`, `500ms`, `1m`, `250us`) into a [`Duration`].
/// A bare number means seconds.
///
/// Errors: empty text, no leading digits, an unknown suffix, or overflow.
pub fn parse_duration(text: &str) -> Result<Duration, ParseUnitError> {
    let err = |reason: &str| ParseUnitError {
        what: "time",
        text: text.to_string(),
        reason: reason.to_string(),
    };
    let s = text.trim();
    let (digits, suffix) = split_number(s);
    if digits.is_empty() {
        return Err(err(
            "expected a number with an optional us/ms/s/m/h/d suffix, e.g. 10s",
        ));
    }
    let value: u64 = digits.parse().map_err(|_| err("number too large"))?;
    let micros_per_unit: u64 = match suffix.to_ascii_lowercase().as_str() {
        "us" | "usec" => 1,
        "ms" | "msec" => 1_000,
        "" | "s" | "sec" => 1_000_000,
        "m" | "min" => 60_000_000,
        "h" | "hour" => 3_600_000_000,
        "d" | "day" => 86_400_000_000,
        _ => return Err(err("unknown suffix; use us, ms, s, m, h or d")),
    };
    let micros = value
        .checked_mul(micros_per_unit)
        .ok_or_else(|| err("value overflows"))?;
    Ok(Duration::from_micros(micros))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_use_powers_of_1024() {
        assert_eq!(parse_size("512"), Ok(512));
        assert_eq!(parse_size("4k"), Ok(4096));
        assert_eq!(parse_size("4K"), Ok(4096));
        assert_eq!(parse_size("4KiB"), Ok(4096));
        assert_eq!(parse_size("4kb"), Ok(4096));
        assert_eq!(parse_size("128k"), Ok(128 * 1024));
        assert_eq!(parse_size("1m"), Ok(1 << 20));
        assert_eq!(parse_size("1g"), Ok(1 << 30));
        assert_eq!(parse_size("2T"), Ok(2 << 40));
        assert_eq!(parse_size("0"), Ok(0));
    }

    #[test]
    fn bad_sizes_are_refused() {
        assert!(parse_size("").is_err());
        assert!(parse_size("k").is_err());
        assert!(parse_size("4x").is_err());
        assert!(parse_size("-4k").is_err());
        assert!(parse_size("99999999999999999999").is_err());
        assert!(parse_size("20000000p").is_err());
        let e = parse_size("4q").unwrap_err();
        assert!(e.to_string().contains("\"4q\""), "{e}");
    }

    #[test]
    fn times_default_to_seconds() {
        assert_eq!(parse_duration("10"), Ok(Duration::from_secs(10)));
        assert_eq!(parse_duration("10s"), Ok(Duration::from_secs(10)));
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("250us"), Ok(Duration::from_micros(250)));
        assert_eq!(parse_duration("1m"), Ok(Duration::from_secs(60)));
        assert_eq!(parse_duration("2h"), Ok(Duration::from_secs(7200)));
        assert_eq!(parse_duration("0"), Ok(Duration::ZERO));
    }

    #[test]
    fn bad_times_are_refused() {
        assert!(parse_duration("").is_err());
        assert!(parse_duration("ms").is_err());
        assert!(parse_duration("10x").is_err());
        assert!(parse_duration("1.5s").is_err());
    }
}
