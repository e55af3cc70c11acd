//! Namespace identifiers in the configuration's text form: NGUID and EUI-64 as
//! hexadecimal bytes (nvmet's `device_nguid` syntax: each byte two hexadecimal digits,
//! optionally followed by `-` or `:`). UUIDs are the `uuid` crate's.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Why an identifier did not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid {what} {input:?}: expected {len} bytes as hexadecimal digit pairs, optionally separated by '-' or ':'")]
pub struct IdParseError {
    /// "NGUID" or "EUI-64".
    pub what: &'static str,
    /// The text given.
    pub input: String,
    /// The bytes expected.
    pub len: usize,
}

/// Parses `N` bytes written as hexadecimal digit pairs, each optionally followed by
/// one `-` or `:`; surrounding whitespace is allowed, nothing else.
fn parse_hex<const N: usize>(s: &str, what: &'static str) -> Result<[u8; N], IdParseError> {
    let err = || IdParseError {
        what,
        input: s.to_string(),
        len: N,
    };
    let mut out = [0u8; N];
    let mut rest = s.trim().as_bytes();
    for (i, b) in out.iter_mut().enumerate() {
        let [hi, lo, tail @ ..] = rest else {
            return Err(err());
        };
        let digit = |c: &u8| (*c as char).to_digit(16).ok_or_else(err);
        *b = (digit(hi)? << 4 | digit(lo)?) as u8;
        rest = tail;
        if i + 1 < N {
            if let [b'-' | b':', tail @ ..] = rest {
                rest = tail;
            }
        }
    }
    if rest.is_empty() {
        Ok(out)
    } else {
        Err(err())
    }
}

/// A Namespace Globally Unique Identifier (NVMe Base 2.x §4.5.1.3): 16 bytes, in the
/// order Identify Namespace NGUID carries them. Written as nvmet shows it (the UUID
/// layout, `%pUb`): "ef90689c-6c46-d44c-89c1-4067801309a8".
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Nguid(pub [u8; 16]);

/// An IEEE Extended Unique Identifier (NVMe Base 2.x §4.5.1.4): 8 bytes, in the order
/// Identify Namespace EUI64 carries them. Written as 16 hexadecimal digits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Eui64(pub [u8; 8]);

impl FromStr for Nguid {
    type Err = IdParseError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        parse_hex(s, "NGUID").map(Nguid)
    }
}

impl FromStr for Eui64 {
    type Err = IdParseError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        parse_hex(s, "EUI-64").map(Eui64)
    }
}

impl fmt::Display for Nguid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&uuid::Uuid::from_bytes(self.0).hyphenated(), f)
    }
}

impl fmt::Display for Eui64 {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.iter().try_for_each(|b| write!(f, "{b:02x}"))
    }
}

macro_rules! text_serde {
    ($t:ty) => {
        impl Serialize for $t {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.collect_str(self)
            }
        }
        impl<'de> Deserialize<'de> for $t {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                String::deserialize(d)?
                    .parse()
                    .map_err(serde::de::Error::custom)
            }
        }
    };
}
text_serde!(Nguid);
text_serde!(Eui64);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nvmet_forms_parse() {
        let want = [
            0xef, 0x90, 0x68, 0x9c, 0x6c, 0x46, 0xd4, 0x4c, 0x89, 0xc1, 0x40, 0x67, 0x80, 0x13,
            0x09, 0xa8,
        ];
        for s in [
            "ef90689c-6c46-d44c-89c1-4067801309a8",
            "EF90689C6C46D44C89C14067801309A8",
            "ef:90:68:9c:6c:46:d4:4c:89:c1:40:67:80:13:09:a8",
            " ef90689c-6c46-d44c-89c1-4067801309a8\n",
        ] {
            assert_eq!(s.parse::<Nguid>(), Ok(Nguid(want)), "{s}");
        }
        let n = Nguid(want);
        assert_eq!(n.to_string(), "ef90689c-6c46-d44c-89c1-4067801309a8");
        let e: Eui64 = "00-25-38-b1-c1-00-4a-1e".parse().unwrap();
        assert_eq!(e.0, [0x00, 0x25, 0x38, 0xb1, 0xc1, 0x00, 0x4a, 0x1e]);
        assert_eq!(e.to_string(), "002538b1c1004a1e");
        assert_eq!("002538b1c1004a1e".parse::<Eui64>(), Ok(e));
    }

    #[test]
    fn malformed_ids_are_refused() {
        for s in [
            "",
            "ef90689c",
            "ef90689c-6c46-d44c-89c1-4067801309a8aa",
            "ef90689c-6c46-d44c-89c1-4067801309ag",
            "ef90689c--6c46-d44c-89c1-4067801309a8",
            "ef90689c-6c46-d44c-89c1-4067801309a8-",
        ] {
            let e = s.parse::<Nguid>().unwrap_err();
            assert!(e.to_string().contains("16 bytes"), "{s}: {e}");
        }
        assert!("0025-38b1c1004a1e00".parse::<Eui64>().is_err());
    }
}
