//! Finite-field Diffie-Hellman over the RFC 7919 groups ffdhe2048..8192 (generator 2)
//! for the augmented challenge of DH-HMAC-CHAP (NVMe Base 2.x §8.13.5.4), with
//! `num-bigint`'s modular exponentiation. DH values travel big endian, padded to the
//! group size (DHVLEN = 256..1024 bytes), as Linux's `ffdheXXXX(dh)` writes them.
use num_bigint::BigUint;
use nvme::auth::DhGroupId;
use rand::RngCore;
use thiserror::Error;

use crate::primes;

/// Bytes of a private exponent: 512 bits, above twice the security strength of every
/// group (RFC 7919 §5.2 and Appendix A: ffdhe8192 is rated at about 200 bits).
pub const PRIVATE_KEY_BYTES: usize = 64;

/// Why a peer's DH value is unusable.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Error)]
pub enum DhError {
    /// DHVLEN is not the group's size.
    #[error("DH value of {got} bytes for {group}, which needs {want}")]
    Length {
        /// The group.
        group: DhGroupId,
        /// Bytes received.
        got: usize,
        /// The group's size.
        want: usize,
    },
    /// The value is not in 2..p-2 (RFC 7919 §5.1 peer value check).
    #[error("DH value out of range for {0} (must be in 2..p-2)")]
    Range(DhGroupId),
    /// The null group has no DH values.
    #[error("the null DH group has no DH values")]
    Null,
}

/// The prime of `group` (`None` for the null group).
pub fn prime(group: DhGroupId) -> Option<BigUint> {
    let hex = match group {
        DhGroupId::Null => return None,
        DhGroupId::Ffdhe2048 => primes::FFDHE2048_P,
        DhGroupId::Ffdhe3072 => primes::FFDHE3072_P,
        DhGroupId::Ffdhe4096 => primes::FFDHE4096_P,
        DhGroupId::Ffdhe6144 => primes::FFDHE6144_P,
        DhGroupId::Ffdhe8192 => primes::FFDHE8192_P,
    };
    BigUint::parse_bytes(hex.as_bytes(), 16)
}

fn padded(v: &BigUint, len: usize) -> Vec<u8> {
    let b = v.to_bytes_be();
    let mut out = vec![0u8; len.saturating_sub(b.len())];
    out.extend_from_slice(&b);
    out
}

/// One side's ephemeral DH key pair in a group.
pub struct DhKeyPair {
    group: DhGroupId,
    p: BigUint,
    private: BigUint,
    public: Vec<u8>,
}

impl std::fmt::Debug for DhKeyPair {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DhKeyPair")
            .field("group", &self.group)
            .finish_non_exhaustive()
    }
}

impl DhKeyPair {
    /// A fresh key pair in `group` from `rng`.
    ///
    /// Errors: [`DhError::Null`] for the null group.
    pub fn generate(group: DhGroupId, rng: &mut dyn RngCore) -> Result<DhKeyPair, DhError> {
        let p = prime(group).ok_or(DhError::Null)?;
        let mut x = [0u8; PRIVATE_KEY_BYTES];
        rng.fill_bytes(&mut x);
        x[0] |= 0x80;
        let private = BigUint::from_bytes_be(&x);
        let public = padded(&BigUint::from(2u32).modpow(&private, &p), group.value_len());
        Ok(DhKeyPair {
            group,
            p,
            private,
            public,
        })
    }

    /// The group.
    pub fn group(&self) -> DhGroupId {
        self.group
    }

    /// The public value g^x mod p (DHVLEN bytes, big endian).
    pub fn public(&self) -> &[u8] {
        &self.public
    }

    /// The shared value (peer)^x mod p, padded to the group size: the session key KS.
    ///
    /// Errors: [`DhError::Length`] or [`DhError::Range`] for an unusable peer value.
    pub fn shared(&self, peer: &[u8]) -> Result<Vec<u8>, DhError> {
        let want = self.group.value_len();
        if peer.len() != want {
            return Err(DhError::Length {
                group: self.group,
                got: peer.len(),
                want,
            });
        }
        let y = BigUint::from_bytes_be(peer);
        let one = BigUint::from(1u32);
        if y <= one || y >= &self.p - &one {
            return Err(DhError::Range(self.group));
        }
        Ok(padded(&y.modpow(&self.private, &self.p), want))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_sides_agree_in_every_group() {
        let mut rng = rand::thread_rng();
        for &g in &DhGroupId::ALL[1..] {
            let p = prime(g).unwrap();
            assert_eq!(p.bits() as usize, g.value_len() * 8, "{g}");
            let a = DhKeyPair::generate(g, &mut rng).unwrap();
            let b = DhKeyPair::generate(g, &mut rng).unwrap();
            assert_eq!(a.public().len(), g.value_len());
            assert_eq!(a.shared(b.public()).unwrap(), b.shared(a.public()).unwrap());
        }
    }

    #[test]
    fn unusable_peer_values_are_refused() {
        let mut rng = rand::thread_rng();
        let a = DhKeyPair::generate(DhGroupId::Ffdhe2048, &mut rng).unwrap();
        assert!(matches!(a.shared(&[1; 100]), Err(DhError::Length { .. })));
        let mut one = vec![0u8; 256];
        one[255] = 1;
        assert_eq!(a.shared(&one), Err(DhError::Range(DhGroupId::Ffdhe2048)));
        assert_eq!(
            a.shared(&[0xFF; 256]),
            Err(DhError::Range(DhGroupId::Ffdhe2048))
        );
        assert!(DhKeyPair::generate(DhGroupId::Null, &mut rng).is_err());
    }
}
