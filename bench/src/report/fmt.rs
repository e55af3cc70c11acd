//! fio's number and time formatting: `num2str` (lib/num2str.c) and `ctime`.

use std::time::{SystemTime, UNIX_EPOCH};

/// Unit appended by [`num2str`] (fio's `enum n2s_unit`, the subset used).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum N2sUnit {
    /// No unit (IOPS, latencies).
    None,
    /// Bytes: `B`.
    Byte,
    /// Bytes per second: `B/s`.
    BytePerSec,
}

impl N2sUnit {
    fn suffix(self) -> &'static str {
        match self {
            N2sUnit::None => "",
            N2sUnit::Byte => "B",
            N2sUnit::BytePerSec => "B/s",
        }
    }
}

const SI_PREFIX: [&str; 7] = ["", "k", "M", "G", "T", "P", "E"];
const IEC_PREFIX: [&str; 7] = ["", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"];

fn digits(n: u64) -> usize {
    n.checked_ilog10().map_or(1, |d| d as usize + 1)
}

/// fio's `num2str(num, maxlen, 1, pow2, unit)`: at most `maxlen` digits (the decimal
/// point counts), dividing by 1000 (`pow2 = false`, SI prefixes k, M, G) or 1024
/// (IEC prefixes Ki, Mi, Gi) as needed, with fio's rounding.
///
/// Examples (maxlen 4): 95234 -> `95.2k`, 127345 -> `127k`, 1234 -> `1234`,
/// 390_000_000 B/s -> `372MiB/s` (pow2) or `390MB/s` (SI).
pub fn num2str(num: u64, maxlen: usize, pow2: bool, unit: N2sUnit) -> String {
    num2str_base(num, maxlen, 1, pow2, unit)
}

/// fio's `num2str(num, maxlen, base, pow2, unit)`: as [`num2str`] for a `num` counted
/// in units of `base` (1, or 1024 for a value in KiB, as fio's progress line passes
/// its KiB/s rates): each factor of 1000 (1024 with `pow2`) in `base` starts one
/// prefix up. Example: `num2str_base(122_880, 4, 1024, true, BytePerSec)` is
/// `120MiB/s`.
pub fn num2str_base(num: u64, maxlen: usize, base: u64, pow2: bool, unit: N2sUnit) -> String {
    let thousand: u64 = if pow2 { 1024 } else { 1000 };
    let prefixes = if pow2 { &IEC_PREFIX } else { &SI_PREFIX };
    let mut num = num;
    let mut modulo = None;
    let mut carry = false;
    let mut post = 0;
    let mut base = base;
    while base > 1 {
        base /= thousand;
        post += 1;
    }
    while post < prefixes.len() {
        if digits(num) <= maxlen {
            break;
        }
        let m = num % thousand;
        num /= thousand;
        carry = m >= thousand / 2;
        modulo = Some(m);
        post += 1;
    }
    if post >= prefixes.len() {
        post = 0;
    }
    let done = |n: u64, post: usize| format!("{n}{}{}", prefixes[post], unit.suffix());
    let Some(m) = modulo else {
        return done(num, post);
    };
    let len = digits(num);
    if maxlen <= len + 1 {
        return done(num + u64::from(carry), post);
    }
    let decimals = maxlen - len - 1;
    let frac = format!("{:.*}", decimals, m as f64 / thousand as f64);
    if frac.starts_with('1') {
        num += 1;
    }
    format!(
        "{num}.{}{}{}",
        frac.get(2..).unwrap_or(""),
        prefixes[post],
        unit.suffix()
    )
}

/// `ctime(3)` of `t` in the local time zone, without the newline, as fio prints it
/// (`os_ctime_r`): `Wed Dec  2 11:16:58 2026`. Falls back to UTC if the C library
/// cannot format it.
pub fn ctime_local(t: SystemTime) -> String {
    let secs = t.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let Ok(tt) = libc::time_t::try_from(secs) else {
        return ctime_utc(t);
    };
    let mut buf = [0 as libc::c_char; 64];
    // SAFETY: ctime_r writes at most 26 bytes into `buf` (64) and returns it or NULL.
    let p = unsafe { libc::ctime_r(&tt, buf.as_mut_ptr()) };
    if p.is_null() {
        return ctime_utc(t);
    }
    // SAFETY: ctime_r wrote a NUL-terminated string into `buf`.
    let s = unsafe { std::ffi::CStr::from_ptr(buf.as_ptr()) };
    s.to_string_lossy().trim_end_matches('\n').to_string()
}

/// `ctime(3)`-style time in UTC without the newline: `Thu Jan  1 00:00:00 1970`.
pub fn ctime_utc(t: SystemTime) -> String {
    let secs = t.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    let (h, mi, s) = (rem / 3600, rem % 3600 / 60, rem % 60);
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    const WDAY: [&str; 7] = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"];
    const MON: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    format!(
        "{} {} {:2} {:02}:{:02}:{:02} {}",
        WDAY[days.rem_euclid(7) as usize],
        MON[(m - 1) as usize],
        d,
        h,
        mi,
        s,
        y
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn num2str_follows_fio() {
        assert_eq!(num2str(95_234, 4, false, N2sUnit::None), "95.2k");
        assert_eq!(num2str(127_345, 4, false, N2sUnit::None), "127k");
        assert_eq!(num2str(1234, 4, false, N2sUnit::None), "1234");
        assert_eq!(num2str(12_345, 4, false, N2sUnit::None), "12.3k");
        assert_eq!(num2str(1_166_000, 4, false, N2sUnit::None), "1166k");
        assert_eq!(num2str(12_345_678, 4, false, N2sUnit::None), "12.3M");
        assert_eq!(num2str(0, 4, false, N2sUnit::None), "0");
        assert_eq!(
            num2str(390_000_000, 4, true, N2sUnit::BytePerSec),
            "372MiB/s"
        );
        assert_eq!(
            num2str(390_000_000, 4, false, N2sUnit::BytePerSec),
            "390MB/s"
        );
        assert_eq!(num2str(3719 << 20, 4, true, N2sUnit::Byte), "3719MiB");
        assert_eq!(num2str(3_899_654_144, 4, false, N2sUnit::Byte), "3900MB");
        assert_eq!(num2str(4096, 4, true, N2sUnit::Byte), "4096B");
        assert_eq!(num2str(40960, 4, true, N2sUnit::Byte), "40.0KiB");
        // 999.6k rounds up through the fraction.
        assert_eq!(num2str(99_996, 4, false, N2sUnit::None), "100.0k");
        assert_eq!(num2str(412, 6, false, N2sUnit::None), "412");
        // Values in KiB (fio's progress line).
        assert_eq!(
            num2str_base(122_880, 4, 1024, true, N2sUnit::BytePerSec),
            "120MiB/s"
        );
        assert_eq!(
            num2str_base(900, 4, 1024, true, N2sUnit::BytePerSec),
            "900KiB/s"
        );
        assert_eq!(num2str(1_049_088, 4, true, N2sUnit::Byte), "1025KiB");
        assert_eq!(num2str(16 << 20, 4, true, N2sUnit::Byte), "16.0MiB");
        assert_eq!(num2str(30_700, 4, false, N2sUnit::None), "30.7k");
    }

    #[test]
    fn ctime_in_utc() {
        assert_eq!(ctime_utc(UNIX_EPOCH), "Thu Jan  1 00:00:00 1970");
        let t = UNIX_EPOCH + Duration::from_secs(1_136_214_245);
        assert_eq!(ctime_utc(t), "Mon Jan  2 15:04:05 2006");
        let t = UNIX_EPOCH + Duration::from_secs(951_782_400); // 2000-02-29
        assert_eq!(ctime_utc(t), "Tue Feb 29 00:00:00 2000");
    }
}
