//! A keyed pseudo-random permutation of block indices `0..n`, for fio's random map
//! semantics (every block once per pass, in random order) without a per-block bitmap.
//!
//! Construction: a 4-round balanced Feistel network over the smallest even number of
//! bits that covers `n` (a bijection on `0..2^(2h)`), walked with a counter; outputs
//! `>= n` are skipped. Since `2^(2h) < 4n`, a pass costs under four Feistel
//! evaluations per block on average, and the state is a few words.

/// SplitMix64 (Steele, Lea, Flood 2014): a small, fast, seedable generator whose
/// output is stable across platforms and crate versions.
#[derive(Debug, Clone)]
pub struct SplitMix64 {
    state: u64,
}

impl SplitMix64 {
    /// A generator starting from `seed`.
    pub fn new(seed: u64) -> Self {
        Self { state: seed }
    }

    /// The next 64 pseudo-random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        mix64(self.state)
    }
}

/// SplitMix64's finaliser: a bijective 64-bit mixing function.
pub fn mix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

const ROUNDS: usize = 4;

/// One pass over `0..n` in keyed pseudo-random order; see the module docs.
#[derive(Debug, Clone)]
pub struct BlockPermutation {
    n: u64,
    half_bits: u32,
    half_mask: u64,
    domain: u128,
    counter: u128,
    keys: [u64; ROUNDS],
}

impl BlockPermutation {
    /// A permutation of `0..n` chosen by `key`. `n` may be 0 (an empty pass).
    pub fn new(n: u64, key: u64) -> Self {
        let bits = 64 - n.saturating_sub(1).leading_zeros();
        let half_bits = bits.div_ceil(2).max(1);
        let half_mask = if half_bits >= 64 {
            u64::MAX
        } else {
            (1u64 << half_bits) - 1
        };
        let mut p = Self {
            n,
            half_bits,
            half_mask,
            domain: 1u128 << (2 * half_bits),
            counter: 0,
            keys: [0; ROUNDS],
        };
        p.restart(key);
        p
    }

    /// Number of elements permuted.
    pub fn len(&self) -> u64 {
        self.n
    }

    /// Whether the permutation is empty (`n == 0`).
    pub fn is_empty(&self) -> bool {
        self.n == 0
    }

    /// Starts a new pass in the order chosen by `key`.
    pub fn restart(&mut self, key: u64) {
        let mut g = SplitMix64::new(key);
        for k in &mut self.keys {
            *k = g.next_u64();
        }
        self.counter = 0;
    }

    /// The image of `x` (`x < 2^(2h)`) under the Feistel network.
    fn permute(&self, x: u64) -> u64 {
        let mut left = (x >> self.half_bits) & self.half_mask;
        let mut right = x & self.half_mask;
        for k in self.keys {
            let f = mix64(right ^ k) & self.half_mask;
            (left, right) = (right, left ^ f);
        }
        (left << self.half_bits) | right
    }

    /// The image of `i` (`i < n`) under this pass's permutation, by cycle walking (for
    /// random access: scattering ranked hot blocks over the region). `i >= n` gives
    /// `i` back.
    pub fn map(&self, i: u64) -> u64 {
        if i >= self.n {
            return i;
        }
        let mut y = self.permute(i);
        while y >= self.n {
            y = self.permute(y);
        }
        y
    }

    /// The next index of this pass, or `None` when every index has been returned once.
    pub fn next_index(&mut self) -> Option<u64> {
        while self.counter < self.domain {
            // counter < 2^(2h) <= 2^64 here, so it fits.
            let y = self.permute(self.counter as u64);
            self.counter += 1;
            if y < self.n {
                return Some(y);
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pass(n: u64, key: u64) -> Vec<u64> {
        let mut p = BlockPermutation::new(n, key);
        std::iter::from_fn(|| p.next_index()).collect()
    }

    #[test]
    fn every_block_exactly_once() {
        for n in [
            0u64, 1, 2, 3, 7, 8, 9, 100, 255, 256, 257, 1000, 4097, 65_536,
        ] {
            let v = pass(n, 0x89);
            assert_eq!(v.len() as u64, n, "n={n}");
            let mut seen = vec![false; n as usize];
            for &i in &v {
                assert!(i < n, "n={n}: {i} out of range");
                assert!(!seen[i as usize], "n={n}: {i} twice");
                seen[i as usize] = true;
            }
        }
    }

    #[test]
    fn order_is_random_and_keyed() {
        let a = pass(1000, 1);
        let b = pass(1000, 2);
        assert_eq!(a, pass(1000, 1), "same key, same order");
        assert_ne!(a, b, "different key, different order");
        let in_place = a
            .iter()
            .enumerate()
            .filter(|(i, &v)| *i as u64 == v)
            .count();
        assert!(
            in_place < 20,
            "looks like the identity: {in_place} fixed points"
        );
        let ascending = a.windows(2).filter(|w| w[1] == w[0] + 1).count();
        assert!(
            ascending < 20,
            "looks sequential: {ascending} ascending steps"
        );
    }

    #[test]
    fn map_is_a_bijection_on_the_range() {
        for n in [1u64, 7, 100, 257] {
            let p = BlockPermutation::new(n, 3);
            let mut seen = vec![false; n as usize];
            for i in 0..n {
                let y = p.map(i);
                assert!(y < n && !seen[y as usize], "n={n} i={i} -> {y}");
                seen[y as usize] = true;
            }
        }
    }

    #[test]
    fn restart_begins_a_new_pass() {
        let mut p = BlockPermutation::new(10, 5);
        let first: Vec<u64> = std::iter::from_fn(|| p.next_index()).collect();
        assert_eq!(p.next_index(), None);
        p.restart(5);
        let again: Vec<u64> = std::iter::from_fn(|| p.next_index()).collect();
        assert_eq!(first, again);
    }

    #[test]
    fn splitmix_known_values() {
        // Reference outputs of SplitMix64 seeded with 1234567.
        let mut g = SplitMix64::new(1_234_567);
        assert_eq!(g.next_u64(), 6_457_827_717_110_365_317);
        assert_eq!(g.next_u64(), 3_203_168_211_198_807_973);
    }
}
