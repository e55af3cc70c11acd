//! Small helpers around the C calls: errno, socket addresses, C strings, descriptors.
use std::ffi::CStr;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::os::fd::RawFd;

use crate::verbs::VerbsError;

/// The calling thread's errno.
pub(crate) fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

/// [`VerbsError::Os`] for `call` with the thread's errno (EIO if it is 0, as some
/// providers return NULL without setting it).
pub(crate) fn os_err(call: &'static str) -> VerbsError {
    let e = errno();
    VerbsError::Os {
        call,
        errno: if e == 0 { libc::EIO } else { e },
    }
}

/// [`VerbsError::Os`] for a call that returns the error number itself (the ibverbs
/// fast-path calls: `ibv_post_send` returns ENOMEM, EINVAL, ...), or -1 and errno.
pub(crate) fn rc_err(call: &'static str, rc: i32) -> VerbsError {
    if rc > 0 {
        VerbsError::Os { call, errno: rc }
    } else {
        os_err(call)
    }
}

/// A `sockaddr_storage` holding `addr` (IPv4 as `sockaddr_in`, IPv6 as `sockaddr_in6`).
pub(crate) fn sockaddr_from(addr: SocketAddr) -> libc::sockaddr_storage {
    // SAFETY: sockaddr_storage is plain data; all zeroes is a valid value.
    let mut ss: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    match addr {
        SocketAddr::V4(a) => {
            let sin = libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: a.port().to_be(),
                sin_addr: libc::in_addr {
                    s_addr: u32::from_ne_bytes(a.ip().octets()),
                },
                sin_zero: [0; 8],
            };
            // SAFETY: sockaddr_in fits in sockaddr_storage.
            unsafe { std::ptr::write(&mut ss as *mut _ as *mut libc::sockaddr_in, sin) };
        }
        SocketAddr::V6(a) => {
            let sin6 = libc::sockaddr_in6 {
                sin6_family: libc::AF_INET6 as libc::sa_family_t,
                sin6_port: a.port().to_be(),
                sin6_flowinfo: 0,
                sin6_addr: libc::in6_addr {
                    s6_addr: a.ip().octets(),
                },
                sin6_scope_id: a.scope_id(),
            };
            // SAFETY: sockaddr_in6 fits in sockaddr_storage.
            unsafe { std::ptr::write(&mut ss as *mut _ as *mut libc::sockaddr_in6, sin6) };
        }
    }
    ss
}

/// The address in a `sockaddr` (`AF_INET` or `AF_INET6`), `None` for other families.
///
/// # Safety
/// `sa` points to a socket address of at least the size its family implies.
pub(crate) unsafe fn sockaddr_to(sa: *const libc::sockaddr) -> Option<SocketAddr> {
    if sa.is_null() {
        return None;
    }
    match i32::from((*sa).sa_family) {
        libc::AF_INET => {
            let sin = &*(sa as *const libc::sockaddr_in);
            let ip = Ipv4Addr::from(sin.sin_addr.s_addr.to_ne_bytes());
            Some(SocketAddr::new(IpAddr::V4(ip), u16::from_be(sin.sin_port)))
        }
        libc::AF_INET6 => {
            let sin6 = &*(sa as *const libc::sockaddr_in6);
            let ip = Ipv6Addr::from(sin6.sin6_addr.s6_addr);
            let ip = match ip.to_ipv4_mapped() {
                Some(v4) => IpAddr::V4(v4),
                None => IpAddr::V6(ip),
            };
            Some(SocketAddr::new(ip, u16::from_be(sin6.sin6_port)))
        }
        _ => None,
    }
}

/// A C string owned by the library as a Rust string ("" for NULL).
///
/// # Safety
/// `p` is NULL or points to a NUL-terminated string.
pub(crate) unsafe fn cstr(p: *const libc::c_char) -> String {
    if p.is_null() {
        return String::new();
    }
    CStr::from_ptr(p).to_string_lossy().into_owned()
}

/// A NUL-padded C char array (`fw_ver`, `name`) as a Rust string.
pub(crate) fn carray(a: &[libc::c_char]) -> String {
    let bytes: Vec<u8> = a
        .iter()
        .take_while(|&&c| c != 0)
        .map(|&c| c as u8)
        .collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

/// Sets `O_NONBLOCK` on `fd` (`fcntl`), so `ibv_get_cq_event`, `ibv_get_async_event`
/// and `rdma_get_cm_event` return EAGAIN instead of blocking.
pub(crate) fn set_nonblocking(fd: RawFd, call: &'static str) -> Result<(), VerbsError> {
    // SAFETY: fcntl on a descriptor the library owns; F_GETFL/F_SETFL touch only flags.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    if flags < 0 || unsafe { libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK) } < 0 {
        return Err(os_err(call));
    }
    Ok(())
}

/// The 16 GID bytes of an IP address as RoCEv2 uses it: IPv4 as `::ffff:a.b.c.d`.
pub(crate) fn gid_of(ip: IpAddr) -> [u8; 16] {
    match ip {
        IpAddr::V4(v4) => v4.to_ipv6_mapped().octets(),
        IpAddr::V6(v6) => v6.octets(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sockaddr_round_trip() {
        for a in [
            "192.168.77.10:4420".parse::<SocketAddr>().unwrap(),
            "[fd77::10]:4420".parse().unwrap(),
        ] {
            let ss = sockaddr_from(a);
            // SAFETY: ss holds a sockaddr of the family it says.
            let back = unsafe { sockaddr_to(&ss as *const _ as *const libc::sockaddr) };
            assert_eq!(back, Some(a));
        }
        assert_eq!(
            gid_of("192.168.77.10".parse().unwrap()),
            "::ffff:192.168.77.10".parse::<Ipv6Addr>().unwrap().octets()
        );
    }
}
