//! DH-HMAC-CHAP secrets in the `DHHC-1:xx:<base64>:` form that `nvme gen-dhchap-key`
//! prints and Linux reads (NVMe Base 2.x §8.13.5.8 "Secret representation"): `xx` the
//! transformation hash (00 none, 01 SHA-256, 02 SHA-384, 03 SHA-512), the base64 of
//! the 32, 48 or 64 key bytes followed by their CRC-32 (IEEE, little endian).
use std::fmt;
use std::str::FromStr;

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use nvme::auth::HashId;
use rand::RngCore;
use thiserror::Error;

use crate::crypto;

/// A DH-HMAC-CHAP secret: the key bytes and the hash that transforms them. Its
/// `Debug` never shows the key.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret {
    key: Vec<u8>,
    transform: Option<HashId>,
}

/// Why a string is not a usable `DHHC-1` secret; each names the fix.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum SecretError {
    /// Not of the form `DHHC-1:xx:<base64>:`.
    #[error("a DH-HMAC-CHAP secret has the form DHHC-1:xx:<base64>: (as `nvme gen-dhchap-key` prints it)")]
    Format,
    /// `xx` is not 00, 01, 02 or 03.
    #[error("transformation hash {0:?} of a DHHC-1 secret is not 00, 01, 02 or 03")]
    Transform(String),
    /// The base64 part does not decode.
    #[error("the key of the DHHC-1 secret is not valid base64: {0}")]
    Base64(String),
    /// The key is not 32, 48 or 64 bytes (plus the 4-byte CRC).
    #[error("the DHHC-1 key is {0} bytes; it must be 32, 48 or 64 bytes (plus its 4-byte CRC-32)")]
    Length(usize),
    /// The CRC-32 after the key does not match it (a mistyped or truncated secret).
    #[error("the CRC-32 of the DHHC-1 key does not match (mistyped or truncated secret?)")]
    Crc,
}

impl Secret {
    /// A secret of `key` (32, 48 or 64 bytes) with transformation `transform`.
    ///
    /// Errors: [`SecretError::Length`].
    pub fn new(key: Vec<u8>, transform: Option<HashId>) -> Result<Secret, SecretError> {
        if ![32, 48, 64].contains(&key.len()) {
            return Err(SecretError::Length(key.len()));
        }
        Ok(Secret { key, transform })
    }

    /// A random secret of `len` bytes (32, 48 or 64), as `nvme gen-dhchap-key` makes.
    ///
    /// Errors: [`SecretError::Length`].
    pub fn generate(
        len: usize,
        transform: Option<HashId>,
        rng: &mut dyn RngCore,
    ) -> Result<Secret, SecretError> {
        let mut key = vec![0u8; len];
        rng.fill_bytes(&mut key);
        Secret::new(key, transform)
    }

    /// The key bytes as given (before transformation).
    pub fn key(&self) -> &[u8] {
        &self.key
    }

    /// The transformation hash (`None` for `DHHC-1:00:`).
    pub fn transform(&self) -> Option<HashId> {
        self.transform
    }

    /// The key transformed for `nqn` (§8.13.5.8): for xx 00 the key itself, else
    /// HMAC-xx(key, NQN || "NVMe-over-Fabrics"). The host key is transformed with the
    /// host NQN, the controller key with the subsystem NQN, as Linux does.
    pub fn transformed(&self, nqn: &str) -> Vec<u8> {
        match self.transform {
            None => self.key.clone(),
            Some(h) => crypto::hmac(h, &self.key, &[nqn.as_bytes(), b"NVMe-over-Fabrics"]),
        }
    }
}

impl FromStr for Secret {
    type Err = SecretError;

    /// Parses `DHHC-1:xx:<base64>:` (the last colon optional, surrounding blanks ignored).
    fn from_str(s: &str) -> Result<Secret, SecretError> {
        let s = s.trim();
        let rest = s.strip_prefix("DHHC-1:").ok_or(SecretError::Format)?;
        let (xx, b64) = rest.split_once(':').ok_or(SecretError::Format)?;
        let b64 = b64.strip_suffix(':').unwrap_or(b64);
        if b64.is_empty() || b64.contains(':') {
            return Err(SecretError::Format);
        }
        let transform = match xx {
            "00" => None,
            "01" => Some(HashId::Sha256),
            "02" => Some(HashId::Sha384),
            "03" => Some(HashId::Sha512),
            other => return Err(SecretError::Transform(other.to_string())),
        };
        let raw = STANDARD
            .decode(b64)
            .map_err(|e| SecretError::Base64(e.to_string()))?;
        if raw.len() < 4 || ![36, 52, 68].contains(&raw.len()) {
            return Err(SecretError::Length(raw.len().saturating_sub(4)));
        }
        let (key, crc) = raw.split_at(raw.len() - 4);
        if crc32fast::hash(key).to_le_bytes() != crc {
            return Err(SecretError::Crc);
        }
        Secret::new(key.to_vec(), transform)
    }
}

impl fmt::Display for Secret {
    /// The `DHHC-1:xx:<base64>:` form (key and CRC-32).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let xx = self.transform.map_or(0, |h| h.value());
        let mut raw = self.key.clone();
        raw.extend_from_slice(&crc32fast::hash(&self.key).to_le_bytes());
        write!(f, "DHHC-1:{xx:02}:{}:", STANDARD.encode(raw))
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Secret")
            .field("len", &self.key.len())
            .field("transform", &self.transform)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The keys of the Linux 6.12 capture linux-nvme-rdma-dhchap.pcap (listed in its README).
    pub(crate) const H1_KEY: &str = "DHHC-1:00:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh+KfiaR:";
    const H2_KEY: &str =
        "DHHC-1:02:QEFCQ0RFRkdISUpLTE1OT1BRUlNUVVZXWFlaW1xdXl9gYWJjZGVmZ2hpamtsbW5voBXMjQ==:";
    const CTRL_KEY: &str = "DHHC-1:03:gIGCg4SFhoeIiYqLjI2Oj5CRkpOUlZaXmJmam5ydnp+goaKjpKWmp6ipqqusra6vsLGys7S1tre4ubq7vL2+v6rfDIU=:";

    #[test]
    fn the_capture_keys_parse_and_print_back() {
        let h1: Secret = H1_KEY.parse().unwrap();
        assert_eq!(h1.key(), &(0u8..32).collect::<Vec<_>>()[..]);
        assert_eq!(h1.transform(), None);
        assert_eq!(h1.to_string(), H1_KEY);
        let h2: Secret = H2_KEY.parse().unwrap();
        assert_eq!(h2.key(), &(0x40u8..0x70).collect::<Vec<_>>()[..]);
        assert_eq!(h2.transform(), Some(HashId::Sha384));
        assert_eq!(h2.to_string(), H2_KEY);
        let c: Secret = CTRL_KEY.parse().unwrap();
        assert_eq!(c.key().len(), 64);
        assert_eq!(c.transform(), Some(HashId::Sha512));
        assert_eq!(c.transformed("nqn.x").len(), 64);
        assert_eq!(h1.transformed("nqn.x"), h1.key());
    }

    #[test]
    fn bad_secrets_are_named() {
        assert_eq!(
            "DHHC-2:00:AAAA:".parse::<Secret>(),
            Err(SecretError::Format)
        );
        assert!(matches!(
            "DHHC-1:04:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh+KfiaR:".parse::<Secret>(),
            Err(SecretError::Transform(_))
        ));
        assert_eq!(
            // H1 with one letter of the CRC changed.
            "DHHC-1:00:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh+KfiaS:".parse::<Secret>(),
            Err(SecretError::Crc)
        );
        assert_eq!(
            "DHHC-1:00:AAECAwQF:".parse::<Secret>(),
            Err(SecretError::Length(2))
        );
        assert!(matches!(
            "DHHC-1:00:!!!!:".parse::<Secret>(),
            Err(SecretError::Base64(_))
        ));
        assert!(!format!("{:?}", H1_KEY.parse::<Secret>().unwrap()).contains("AAEC"));
    }

    #[test]
    fn generated_secrets_round_trip() {
        let mut rng = rand::thread_rng();
        for (len, t) in [
            (32, None),
            (48, Some(HashId::Sha384)),
            (64, Some(HashId::Sha512)),
        ] {
            let s = Secret::generate(len, t, &mut rng).unwrap();
            assert_eq!(s.to_string().parse::<Secret>().unwrap(), s);
        }
    }
}
