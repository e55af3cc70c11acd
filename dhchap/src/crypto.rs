//! The hash functions of DH-HMAC-CHAP (NVMe Base 2.x §8.13.5.2): SHA-256/384/512 and
//! their HMACs, through the `sha2` and `hmac` crates, and the three computations the
//! protocol makes with them (§8.13.5.3 - §8.13.5.5): the host response, the controller
//! response and the augmented challenge. Byte orders as Linux 6.12 computes them
//! (`drivers/nvme/host/auth.c`, `drivers/nvme/target/auth.c`).
use hmac::{Hmac, Mac};
use nvme::auth::HashId;
use sha2::{Digest, Sha256, Sha384, Sha512};

/// HMAC with `hash` over the concatenation of `parts`, keyed by `key` (any length).
pub fn hmac(hash: HashId, key: &[u8], parts: &[&[u8]]) -> Vec<u8> {
    fn run<M: Mac + hmac::digest::KeyInit>(key: &[u8], parts: &[&[u8]]) -> Vec<u8> {
        let mut m = <M as Mac>::new_from_slice(key).expect("HMAC takes keys of any length");
        for p in parts {
            m.update(p);
        }
        m.finalize().into_bytes().to_vec()
    }
    match hash {
        HashId::Sha256 => run::<Hmac<Sha256>>(key, parts),
        HashId::Sha384 => run::<Hmac<Sha384>>(key, parts),
        HashId::Sha512 => run::<Hmac<Sha512>>(key, parts),
    }
}

/// The plain digest H(`data`).
pub fn digest(hash: HashId, data: &[u8]) -> Vec<u8> {
    match hash {
        HashId::Sha256 => Sha256::digest(data).to_vec(),
        HashId::Sha384 => Sha384::digest(data).to_vec(),
        HashId::Sha512 => Sha512::digest(data).to_vec(),
    }
}

/// The augmented challenge of a DH exchange (§8.13.5.4): Ca = HMAC(H(g^xy mod p), C),
/// `session_key` the shared value g^xy mod p, big endian, padded to the group size.
pub fn augmented_challenge(hash: HashId, session_key: &[u8], challenge: &[u8]) -> Vec<u8> {
    let hashed = digest(hash, session_key);
    hmac(hash, &hashed, &[challenge])
}

/// The host's response R1 (§8.13.5.3): HMAC(Kh', C1 || S1 || T_ID || SC_C ||
/// "HostHost" || NQNh || 00h || NQNc), `key` the transformed host key Kh', S1 as
/// 4 bytes and T_ID as 2 bytes little endian, SC_C 0 (no secure channel).
pub fn host_response(
    hash: HashId,
    key: &[u8],
    challenge: &[u8],
    seqnum: u32,
    t_id: u16,
    hostnqn: &str,
    subnqn: &str,
) -> Vec<u8> {
    response(
        hash,
        key,
        challenge,
        seqnum,
        t_id,
        b"HostHost",
        hostnqn,
        subnqn,
    )
}

/// The controller's response R2 (§8.13.5.5): HMAC(Kc', C2 || S2 || T_ID || 00h ||
/// "Controller" || NQNc || 00h || NQNh), `key` the controller key transformed with the
/// subsystem NQN.
pub fn controller_response(
    hash: HashId,
    key: &[u8],
    challenge: &[u8],
    seqnum: u32,
    t_id: u16,
    subnqn: &str,
    hostnqn: &str,
) -> Vec<u8> {
    response(
        hash,
        key,
        challenge,
        seqnum,
        t_id,
        b"Controller",
        subnqn,
        hostnqn,
    )
}

/// HMAC(key, C || S || T_ID || 00h || `role` || `own` || 00h || `peer`): the shape
/// both responses share (§8.13.5.4, §8.13.5.5).
#[allow(clippy::too_many_arguments)]
fn response(
    hash: HashId,
    key: &[u8],
    challenge: &[u8],
    seqnum: u32,
    t_id: u16,
    role: &[u8],
    own: &str,
    peer: &str,
) -> Vec<u8> {
    hmac(
        hash,
        key,
        &[
            challenge,
            &seqnum.to_le_bytes(),
            &t_id.to_le_bytes(),
            &[0],
            role,
            own.as_bytes(),
            &[0],
            peer.as_bytes(),
        ],
    )
}

/// Compares two responses in time independent of where they differ.
pub fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc4231_hmac_sha256_case_2() {
        let mac = hmac(
            HashId::Sha256,
            b"Jefe",
            &[b"what do ya want ", b"for nothing?"],
        );
        let hex: String = mac.iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(
            hex,
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
        assert_eq!(hmac(HashId::Sha384, b"k", &[b"x"]).len(), 48);
        assert_eq!(hmac(HashId::Sha512, b"k", &[b"x"]).len(), 64);
    }

    #[test]
    fn same_compares_all_bytes() {
        assert!(same(&[1, 2, 3], &[1, 2, 3]));
        assert!(!same(&[1, 2, 3], &[1, 2, 4]));
        assert!(!same(&[1, 2], &[1, 2, 3]));
    }
}
