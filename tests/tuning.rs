//! Threads and traffic class for tuning (issue 16 item 8): poll groups pinned to the
//! configured CPUs (SPDK's core mask), and a listen port's IP ToS on the queues that
//! connect through it, its DSCP with the transport's ECN bits (ECT(0)), read back from
//! the target's own per-QP send sockets in this process.
//!
//! Addresses: 127.0.0.173..=127.0.0.177.
mod common;

use std::net::{IpAddr, SocketAddr};
use std::os::fd::RawFd;

use common::*;
use nvmf_target::config::ListenAddr;
use nvmf_target::cpus::{allowed_cpus, CpuList};

/// The CPUs thread `name` of this process may run on (`Cpus_allowed_list`).
fn thread_cpus(name: &str) -> String {
    for t in std::fs::read_dir("/proc/self/task").unwrap() {
        let dir = t.unwrap().path();
        let comm = std::fs::read_to_string(dir.join("comm")).unwrap_or_default();
        if comm.trim() == name {
            let status = std::fs::read_to_string(dir.join("status")).unwrap();
            let line = status
                .lines()
                .find(|l| l.starts_with("Cpus_allowed_list:"))
                .unwrap();
            return line.split(':').nth(1).unwrap().trim().to_string();
        }
    }
    panic!("no thread {name}");
}

#[test]
fn poll_groups_run_on_the_configured_cpus() {
    let allowed = allowed_cpus().unwrap();
    // Reversed, so the pinning shows even on a machine of one CPU.
    let cpus: Vec<usize> = allowed.iter().rev().take(2).copied().collect();
    let t = start_target_with(173, 1 << 20, |c| {
        c.poll_groups = 2;
        c.cpus = Some(CpuList(cpus.clone()));
    });
    assert_eq!(thread_cpus("nvmf-pg0"), cpus[0].to_string());
    assert_eq!(thread_cpus("nvmf-pg1"), cpus[cpus.len() - 1].to_string());
    // The poll groups serve as before.
    let mut host = connect(&t, 174, 2, 8);
    pass(&mut host, 0, 4096, 64, 8, true, 1);
    pass(&mut host, 0, 4096, 64, 8, false, 1);
    host.disconnect().unwrap();
    drop(t);
    // A CPU the process may not use: the target does not start, and says why.
    let mut cfg = nvmf_target::config::TargetConfig::default_for(
        ip(173),
        NQN,
        std::path::Path::new("/nonexistent/never-created.img"),
        1 << 20,
    );
    cfg.cpus = Some(CpuList(vec![nvmf_target::cpus::MAX_CPU]));
    let e = nvmf_target::start(&cfg).unwrap_err().to_string();
    assert!(e.contains("is not one this process may run on"), "{e}");
}

/// IP_TOS of every per-QP send socket of this process bound to `addr` (the soft
/// provider's have UDP source ports from 0xC000), by port.
fn send_socket_tos(addr: IpAddr) -> Vec<(u16, i32)> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc/self/fd").unwrap() {
        let Ok(fd) = e.unwrap().file_name().to_string_lossy().parse::<RawFd>() else {
            continue;
        };
        // SAFETY: getsockname/getsockopt on a descriptor of this process; a
        // descriptor that is not a socket fails and is skipped.
        unsafe {
            let mut sa: libc::sockaddr_in = std::mem::zeroed();
            let mut len = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
            if libc::getsockname(fd, &mut sa as *mut _ as *mut libc::sockaddr, &mut len) != 0
                || i32::from(sa.sin_family) != libc::AF_INET
            {
                continue;
            }
            let bound = SocketAddr::from((
                std::net::Ipv4Addr::from(u32::from_be(sa.sin_addr.s_addr)),
                u16::from_be(sa.sin_port),
            ));
            // QP1 (the CM agent) sends from 55410, as rxe does.
            if bound.ip() != addr || bound.port() < 0xC000 || bound.port() == 55410 {
                continue;
            }
            let mut tos: libc::c_int = 0;
            let mut l = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
            if libc::getsockopt(
                fd,
                libc::IPPROTO_IP,
                libc::IP_TOS,
                &mut tos as *mut _ as *mut libc::c_void,
                &mut l,
            ) == 0
            {
                out.push((bound.port(), tos));
            }
        }
    }
    out
}

#[test]
fn a_listen_ports_tos_is_on_its_queues_with_ect0() {
    // Port 4420 with DSCP 24 (ToS 0x60), port 4421 without.
    let t = start_target_with(175, 1 << 20, |c| {
        c.listen[0].tos = Some(0x60);
        c.listen.push(ListenAddr::new(ip(175), 4421));
    });
    let before = send_socket_tos(ip(175));
    assert!(before.is_empty(), "{before:?}");
    let mut host = connect(&t, 176, 1, 8);
    pass(&mut host, 0, 4096, 16, 8, true, 2);
    let marked = send_socket_tos(ip(175));
    assert_eq!(marked.len(), 2, "admin and I/O queue: {marked:?}");
    assert!(marked.iter().all(|&(_, tos)| tos == 0x62), "{marked:?}");
    // Through port 4421: the request's traffic class (0) with ECT(0).
    let mut o = host_options(&t, 177, 1, 8);
    o.traddr = SocketAddr::new(ip(175), 4421);
    let mut other = nvmf_initiator::SyncHost::connect(&o).unwrap();
    pass(&mut other, 4096 * 64, 4096, 16, 8, true, 3);
    let all = send_socket_tos(ip(175));
    let plain: Vec<_> = all.iter().filter(|p| !marked.contains(p)).collect();
    assert_eq!(plain.len(), 2, "{all:?}");
    assert!(plain.iter().all(|&&(_, tos)| tos == 0x02), "{all:?}");
    other.disconnect().unwrap();
    host.disconnect().unwrap();
}
