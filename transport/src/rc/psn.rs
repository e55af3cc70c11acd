//! 24-bit packet sequence number arithmetic with wrap-around (IBTA Vol 1 §9.7.1).
//!
//! PSNs compare within a window of 2^23: `a` is "before" `b` when `b - a` (mod 2^24)
//! lies in `1..2^23`.

/// Mask of the 24 PSN bits.
pub const PSN_MASK: u32 = 0x00FF_FFFF;

/// `a + n` modulo 2^24.
#[inline]
pub fn psn_add(a: u32, n: u32) -> u32 {
    a.wrapping_add(n) & PSN_MASK
}

/// The signed distance `a - b` in PSNs, in `-2^23..2^23`.
#[inline]
pub fn psn_diff(a: u32, b: u32) -> i32 {
    ((a.wrapping_sub(b) << 8) as i32) >> 8
}

/// `a` comes strictly before `b`.
#[inline]
pub fn psn_lt(a: u32, b: u32) -> bool {
    psn_diff(a, b) < 0
}

/// `a` lies in the inclusive range `first..=last` (with wrap-around).
#[inline]
pub fn psn_in(a: u32, first: u32, last: u32) -> bool {
    psn_diff(a, first) >= 0 && psn_diff(a, last) <= 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wraps() {
        assert_eq!(psn_add(0xFF_FFFF, 1), 0);
        assert_eq!(psn_add(0xFF_FFFE, 5), 3);
        assert_eq!(psn_diff(2, 0xFF_FFFF), 3);
        assert_eq!(psn_diff(0xFF_FFFF, 2), -3);
        assert!(psn_lt(0xFF_FFF0, 0x10));
        assert!(!psn_lt(0x10, 0xFF_FFF0));
        assert!(psn_in(0, 0xFF_FFFE, 1));
        assert!(!psn_in(2, 0xFF_FFFE, 1));
    }
}
