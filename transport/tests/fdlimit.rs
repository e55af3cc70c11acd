//! The open-file limit and the soft provider's one UDP send socket per QP: running out
//! is an error that names `RLIMIT_NOFILE` and the fix, and raising the soft limit to
//! the hard one lets the sockets open. One test in its own binary: it changes the
//! process's limit.
use std::net::{IpAddr, Ipv4Addr};

use nix::sys::resource::{setrlimit, Resource};
use transport::fdlimit::{raise_soft_to_hard, NofileLimit};
use transport::soft::socket::{bind_tx_socket, SocketError};

#[test]
fn qp_sockets_beyond_the_soft_limit_name_it_and_raising_it_lets_them_open() {
    let ip = IpAddr::V4(Ipv4Addr::LOCALHOST);
    let start = NofileLimit::of_process().unwrap();
    let open_now = std::fs::read_dir("/proc/self/fd").unwrap().count() as u64;
    let low = open_now + 16;
    assert!(
        start.hard == libc::RLIM_INFINITY || start.hard >= low + 64,
        "the hard RLIMIT_NOFILE ({}) is too low for this test",
        start.hard
    );
    setrlimit(Resource::RLIMIT_NOFILE, low, start.hard).unwrap();

    let mut socks = Vec::new();
    let err = loop {
        match bind_tx_socket(ip, 0xC000) {
            Ok((s, _)) => socks.push(s),
            Err(e) => break e,
        }
        assert!(socks.len() < 64, "the soft limit {low} was not enforced");
    };
    let msg = err.to_string();
    assert!(
        matches!(err, SocketError::OpenFiles(_)),
        "EMFILE became {err:?}"
    );
    assert!(
        msg.contains(&format!("RLIMIT_NOFILE is {low}")) && msg.contains("ulimit -n"),
        "{msg}"
    );

    let (before, after) = raise_soft_to_hard().unwrap();
    assert_eq!(before.soft, low);
    assert!(after.soft > low, "soft limit not raised: {after:?}");
    for _ in 0..32 {
        socks.push(bind_tx_socket(ip, 0xC000).unwrap().0);
    }
}
