//! Fixed-size text fields: ASCII space-padded (Identify SN/MN/FR) and
//! NUL-padded (NQNs, discovery log TRADDR/TRSVCID).
//!
//! NVMe Base 2.x §1.5 (conventions): ASCII string fields are left justified
//! and padded with spaces (20h); NQN fields (§4.5) are UTF-8, NUL terminated,
//! at most [`crate::NVME_NQN_MAX`] bytes before the NUL.

use thiserror::Error;

/// Why a fixed-size text field could not be read or written.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Error)]
pub enum StrFieldError {
    /// The text (in bytes) does not fit in the field (`max` bytes allowed).
    #[error("text of {len} bytes exceeds the field's {max} bytes")]
    TooLong {
        /// Length of the offered text in bytes.
        len: usize,
        /// Largest length the field accepts.
        max: usize,
    },
    /// A space-padded field holds or was given a byte outside printable ASCII
    /// (20h..=7Eh).
    #[error("byte {byte:#04x} at {at} is not printable ASCII")]
    NotAscii {
        /// The offending byte.
        byte: u8,
        /// Its index in the field.
        at: usize,
    },
    /// A NUL-terminated field holds no NUL.
    #[error("field is not NUL terminated")]
    NotTerminated,
    /// The text before the NUL is not valid UTF-8.
    #[error("field is not valid UTF-8")]
    InvalidUtf8,
    /// Text to store contains a NUL byte, which would end it early.
    #[error("text contains a NUL byte")]
    ContainsNul,
}

/// Writes `s` left justified into `dst`, padding with spaces (20h).
///
/// Errors: [`StrFieldError::TooLong`] if `s` is longer than `dst`,
/// [`StrFieldError::NotAscii`] for any byte outside 20h..=7Eh. `dst` is
/// left untouched on error.
pub fn write_ascii_padded(dst: &mut [u8], s: &str) -> Result<(), StrFieldError> {
    let b = s.as_bytes();
    if b.len() > dst.len() {
        return Err(StrFieldError::TooLong {
            len: b.len(),
            max: dst.len(),
        });
    }
    if let Some((at, &byte)) = b
        .iter()
        .enumerate()
        .find(|(_, c)| !(0x20..=0x7e).contains(*c))
    {
        return Err(StrFieldError::NotAscii { byte, at });
    }
    dst.fill(b' ');
    dst[..b.len()].copy_from_slice(b);
    Ok(())
}

/// Reads a space-padded ASCII field, trailing spaces (and NULs, which some
/// devices use) removed.
///
/// Errors: [`StrFieldError::NotAscii`] for a byte outside 20h..=7Eh before the
/// padding.
pub fn read_ascii_padded(src: &[u8]) -> Result<&str, StrFieldError> {
    let end = src
        .iter()
        .rposition(|&c| c != b' ' && c != 0)
        .map_or(0, |i| i + 1);
    let text = &src[..end];
    if let Some((at, &byte)) = text
        .iter()
        .enumerate()
        .find(|(_, c)| !(0x20..=0x7e).contains(*c))
    {
        return Err(StrFieldError::NotAscii { byte, at });
    }
    core::str::from_utf8(text).map_err(|_| StrFieldError::InvalidUtf8)
}

/// Writes `s` into `dst` followed by NUL padding. At most `max` bytes of text
/// are accepted, and at least one NUL always follows (so `max` is capped at
/// `dst.len() - 1`).
///
/// Errors: [`StrFieldError::TooLong`], [`StrFieldError::ContainsNul`]; `dst`
/// is left untouched on error.
pub fn write_nul_padded(dst: &mut [u8], s: &str, max: usize) -> Result<(), StrFieldError> {
    let b = s.as_bytes();
    let max = max.min(dst.len().saturating_sub(1));
    if b.len() > max {
        return Err(StrFieldError::TooLong { len: b.len(), max });
    }
    if b.contains(&0) {
        return Err(StrFieldError::ContainsNul);
    }
    dst.fill(0);
    dst[..b.len()].copy_from_slice(b);
    Ok(())
}

/// Reads a NUL-terminated UTF-8 field holding at most `max` bytes of text.
///
/// Errors: [`StrFieldError::NotTerminated`] if `src` holds no NUL,
/// [`StrFieldError::TooLong`] if the text before it exceeds `max`,
/// [`StrFieldError::InvalidUtf8`].
pub fn read_nul_terminated(src: &[u8], max: usize) -> Result<&str, StrFieldError> {
    let end = src
        .iter()
        .position(|&c| c == 0)
        .ok_or(StrFieldError::NotTerminated)?;
    if end > max {
        return Err(StrFieldError::TooLong { len: end, max });
    }
    core::str::from_utf8(&src[..end]).map_err(|_| StrFieldError::InvalidUtf8)
}

/// Reads a NUL-padded field that may fill the whole field without a NUL
/// (discovery log TRSVCID/TRADDR, NVMe over Fabrics §5.3 / Base 2.x §5.16.1.23).
///
/// Errors: [`StrFieldError::InvalidUtf8`].
pub fn read_nul_padded(src: &[u8]) -> Result<&str, StrFieldError> {
    let end = src.iter().position(|&c| c == 0).unwrap_or(src.len());
    core::str::from_utf8(&src[..end]).map_err(|_| StrFieldError::InvalidUtf8)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ascii_padded_round_trip() {
        let mut f = [0u8; 8];
        write_ascii_padded(&mut f, "6.1.0-57").unwrap();
        assert_eq!(&f, b"6.1.0-57");
        write_ascii_padded(&mut f, "Linux").unwrap();
        assert_eq!(&f, b"Linux   ");
        assert_eq!(read_ascii_padded(&f), Ok("Linux"));
        assert_eq!(
            write_ascii_padded(&mut f, "123456789"),
            Err(StrFieldError::TooLong { len: 9, max: 8 })
        );
        assert_eq!(
            write_ascii_padded(&mut f, "a\u{e9}"),
            Err(StrFieldError::NotAscii { byte: 0xc3, at: 1 })
        );
        assert_eq!(&f, b"Linux   ");
        assert_eq!(read_ascii_padded(&[b' '; 4]), Ok(""));
        assert_eq!(
            read_ascii_padded(&[b'a', 0x01, b' ']),
            Err(StrFieldError::NotAscii { byte: 1, at: 1 })
        );
    }

    #[test]
    fn nul_terminated_round_trip() {
        let mut f = [0xAAu8; 8];
        write_nul_padded(&mut f, "nqn.x", 7).unwrap();
        assert_eq!(&f, b"nqn.x\0\0\0");
        assert_eq!(read_nul_terminated(&f, 7), Ok("nqn.x"));
        assert_eq!(
            write_nul_padded(&mut f, "12345678", 100),
            Err(StrFieldError::TooLong { len: 8, max: 7 })
        );
        assert_eq!(
            write_nul_padded(&mut f, "a\0b", 7),
            Err(StrFieldError::ContainsNul)
        );
        assert_eq!(
            read_nul_terminated(b"abcd", 7),
            Err(StrFieldError::NotTerminated)
        );
        assert_eq!(
            read_nul_terminated(b"abcd\0", 3),
            Err(StrFieldError::TooLong { len: 4, max: 3 })
        );
        assert_eq!(
            read_nul_terminated(b"\xff\0", 3),
            Err(StrFieldError::InvalidUtf8)
        );
        assert_eq!(read_nul_padded(b"4420"), Ok("4420"));
        assert_eq!(read_nul_padded(b"4420\0\0"), Ok("4420"));
    }
}
