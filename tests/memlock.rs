//! A target starts and serves I/O under the common 8 MiB `RLIMIT_MEMLOCK` without
//! `CAP_IPC_LOCK`, as a normal user's would (issue 8).
//!
//! The body runs in a child process (this test binary again) that lowers its own
//! `RLIMIT_MEMLOCK` to 8 MiB (anyone may lower it) and, when started as root, becomes
//! an unprivileged user, which drops every capability, `CAP_IPC_LOCK` included. The
//! child checks that the limit is in force and the capability gone before doing
//! anything, and fails otherwise: the test never passes without having run limited.
//!
//! The uid is not 65534: io_uring charges pinned memory to the user, all of its
//! processes together, so a uid nothing else runs as keeps other `nobody` processes
//! (a benchmark run as 65534 at the same time) out of this test's limit.
mod common;

use std::process::Command;
use std::sync::atomic::Ordering;

use common::*;
use transport::memlock::{has_cap_ipc_lock, vm_pin_bytes, MemlockLimit, PinBudget};

const CHILD_ENV: &str = "NVMF_MEMLOCK_TEST_CHILD";
const TEST_NAME: &str = "target_serves_io_under_8_mib_memlock_without_cap_ipc_lock";
/// The limit many distributions give users (`ulimit -l` 8192).
const LIMIT: u64 = 8 << 20;
/// Printed by the child when the whole body ran.
const DONE: &str = "memlock child: done";

#[test]
fn target_serves_io_under_8_mib_memlock_without_cap_ipc_lock() {
    if std::env::var_os(CHILD_ENV).is_some() {
        child();
        return;
    }
    let exe = std::env::current_exe().expect("test binary path");
    let out = Command::new(exe)
        .args(["--exact", TEST_NAME, "--nocapture", "--test-threads=1"])
        .env(CHILD_ENV, "1")
        .output()
        .expect("run the child");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && stdout.contains(DONE),
        "child failed ({}):\n--- stdout\n{stdout}\n--- stderr\n{stderr}",
        out.status
    );
    eprintln!("{stdout}");
}

/// Lowers the limit, drops the capability (as root: becomes an unprivileged uid), and
/// checks both took.
fn become_limited_user() {
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    use nix::unistd::{geteuid, setgroups, setresgid, setresuid, Gid, Uid};
    let (_, hard) = getrlimit(Resource::RLIMIT_MEMLOCK).expect("getrlimit");
    assert!(
        hard >= LIMIT,
        "RLIMIT_MEMLOCK's hard limit is {hard} bytes, below the {LIMIT} this test runs with"
    );
    setrlimit(Resource::RLIMIT_MEMLOCK, LIMIT, LIMIT).expect("lower RLIMIT_MEMLOCK");
    if geteuid().is_root() {
        let id = 0x3FFF_0000 + std::process::id() % 0xFFFF;
        setgroups(&[]).expect("setgroups");
        setresgid(Gid::from_raw(id), Gid::from_raw(id), Gid::from_raw(id)).expect("setresgid");
        setresuid(Uid::from_raw(id), Uid::from_raw(id), Uid::from_raw(id)).expect("setresuid");
        println!("memlock child: root became uid {id}");
    }
    assert!(
        !has_cap_ipc_lock(),
        "the process still has CAP_IPC_LOCK (file capabilities or ambient set?): \
         cannot test the limit"
    );
    assert_eq!(
        PinBudget::process().limit(),
        MemlockLimit::Bytes(LIMIT),
        "the limit is not in force"
    );
}

fn child() {
    become_limited_user();
    let dir = std::env::temp_dir();
    // The targets make their directories in it: fail early, saying why, if it is not writable.
    let _scratch = tempfile::tempdir().unwrap_or_else(|e| {
        panic!(
            "cannot create a directory in {} as uid {}: {e} (set TMPDIR to a world-writable directory)",
            dir.display(),
            nix::unistd::getuid()
        )
    });
    let budget = PinBudget::process();
    let vm_pin_before = vm_pin_bytes().expect("VmPin");

    // A configured data slab too big to register with io_uring still serves: as plain
    // buffers, pinning nothing (issue 20: never a failed start while one MDTS I/O can
    // be served).
    {
        let t = start_target_with(172, 16 << 20, |c| c.data_slab = Some(64 << 20));
        let pg = t.target.poll_group_counters()[0].clone();
        assert_eq!(
            pg.io_uring_fixed_buffers.load(Ordering::Relaxed),
            0,
            "a 64 MiB slab cannot be registered under 8 MiB"
        );
        assert_eq!(budget.pinned_bytes(), 0, "plain buffers pin nothing");
        assert_eq!(vm_pin_bytes().expect("VmPin"), vm_pin_before);
        let mut opts = host_options(&t, 173, 1, 32);
        opts.kato_ms = 0;
        let mut host = nvmf_initiator::SyncHost::connect(&opts).expect("host connects");
        for &(size, count, depth) in &[(1 << 20, 8, 4), (4096, 64, 32)] {
            pass(&mut host, 0, size, count, depth, true, 0x3C);
            pass(&mut host, 0, size, count, depth, false, 0x3C);
        }
        host.disconnect().expect("disconnect");
        println!("memlock child: a 64 MiB data_slab served from plain buffers");
    }
    assert_eq!(budget.pinned_bytes(), 0);

    // Start, serve, stop, and start again (the pins are given back at once).
    for round in 0..2u8 {
        let t = start_target(170, 64 << 20);
        let pinned = budget.pinned_bytes();
        let vm_pin = vm_pin_bytes().expect("VmPin") - vm_pin_before;
        println!("memlock child: round {round}: target pins {pinned} bytes (VmPin +{vm_pin})");
        assert!(pinned > 0 && pinned <= LIMIT, "pinned {pinned}");
        assert_eq!(pinned, vm_pin, "the budget counts what the kernel pinned");

        let mut opts = host_options(&t, 171, 1, 32);
        opts.kato_ms = 0;
        let mut host = nvmf_initiator::SyncHost::connect(&opts).expect("host connects");
        let pg = t.target.poll_group_counters()[0].clone();
        // 1 MiB writes 8 deep: 8 MiB in flight against a slab of a few MiB, so
        // commands wait for buffers; then 128 KiB and 4 KiB, read back and compared.
        let tag = 0x40 + round;
        let passes = [(1 << 20, 16, 8), (128 << 10, 32, 16), (4096, 64, 32)];
        let mut base = 0u64;
        for &(size, count, depth) in &passes {
            pass(&mut host, base, size, count, depth, true, tag);
            pass(&mut host, base, size, count, depth, false, tag);
            base += (size * count) as u64;
        }
        let waits = pg.buffer_waits.load(Ordering::Relaxed);
        assert!(waits > 0, "1 MiB x 8 in flight never waited for a buffer");
        println!("memlock child: round {round}: served; {waits} poll rounds found no free buffer");
        host.disconnect().expect("disconnect");
        drop(t);
        assert_eq!(
            budget.pinned_bytes(),
            0,
            "stopped target released its charge"
        );
        assert_eq!(
            vm_pin_bytes().expect("VmPin"),
            vm_pin_before,
            "stopped target unpinned"
        );
    }
    println!("{DONE}");
}
