//! Test helpers.

/// Bytes from a hex string; whitespace is ignored. Test input is written by
/// hand, so a bad digit is a test bug and panics.
pub fn hex(s: &str) -> Vec<u8> {
    let digits: Vec<u8> = s.bytes().filter(|b| !b.is_ascii_whitespace()).collect();
    assert!(digits.len() & 1 == 0, "odd number of hex digits");
    digits
        .chunks(2)
        .map(|p| {
            let s = core::str::from_utf8(p).expect("ascii");
            u8::from_str_radix(s, 16).expect("hex digit")
        })
        .collect()
}

/// A `len`-byte buffer, zero except for `(offset, hex bytes)` runs: the
/// sparse image of a large captured structure.
pub fn sparse(len: usize, runs: &[(usize, &str)]) -> Vec<u8> {
    let mut v = vec![0u8; len];
    for (off, h) in runs {
        let b = hex(h);
        v[*off..*off + b.len()].copy_from_slice(&b);
    }
    v
}

/// Asserts two byte strings are equal, reporting the first differing offset
/// and a few bytes around it rather than both buffers in full.
#[track_caller]
pub fn assert_bytes_eq(got: &[u8], want: &[u8]) {
    assert_eq!(got.len(), want.len(), "lengths differ");
    if let Some(i) = got.iter().zip(want).position(|(a, b)| a != b) {
        let lo = i.saturating_sub(4);
        let hi = (i + 8).min(got.len());
        panic!(
            "bytes differ at offset {i}: got {:02x?}, want {:02x?} (from offset {lo})",
            &got[lo..hi],
            &want[lo..hi]
        );
    }
}
