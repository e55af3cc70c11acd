//! One unprivileged user, several of our processes at once (issue 20): two targets and
//! an embedded `nvmf-bench`, all under the common 8 MiB `RLIMIT_MEMLOCK` without
//! `CAP_IPC_LOCK`, start and serve verified I/O, although io_uring charges the pinned
//! memory of all of them to the one user and the first target alone takes 7 MiB.
//!
//! Every child runs limited: `RLIMIT_MEMLOCK` lowered to 8 MiB (anyone may lower it)
//! and, when the test runs as root, `CAP_IPC_LOCK` dropped from the bounding set
//! before `exec`, so a root child gets no such capability and io_uring charges it to
//! root's user, as a normal user's processes are charged to theirs. As a normal user
//! (`.ci/run` runs the suite so too) the children are that user's processes. Each
//! child reports how many of its poll group's buffers io_uring registered; the test
//! asserts that the later ones fell back to plain buffers (so the limit was in force
//! and shared), never that nothing happened.
//!
//! The targets are this test binary again ([`target_helper`], the library's
//! `nvmf_target::start`, as `nvmf-target` runs it); the hosts are `nvmf-bench
//! --traddr ... --verify crc32c`, each verifying every block it wrote.
use std::io::{BufRead, BufReader};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

/// The limit many distributions give users (`ulimit -l` 8192).
const LIMIT: u64 = 8 << 20;
const HELPER_ENV: &str = "NVMF_ONE_USER_TARGET";
const NQN: &str = "nqn.2026-11.io.nvmf-rdma:one-user";
/// `CAP_IPC_LOCK` (linux/capability.h).
const CAP_IPC_LOCK: libc::c_ulong = 14;

/// Makes `cmd`'s process a limited one (see the module docs).
fn limited(cmd: &mut Command) -> &mut Command {
    // SAFETY: the closure runs between fork and exec and makes only async-signal-safe
    // system calls (getrlimit, setrlimit, geteuid, prctl) on its own stack.
    unsafe {
        cmd.pre_exec(|| {
            let mut rl = libc::rlimit {
                rlim_cur: 0,
                rlim_max: 0,
            };
            if libc::getrlimit(libc::RLIMIT_MEMLOCK, &mut rl) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            rl.rlim_cur = LIMIT;
            if rl.rlim_max < LIMIT {
                return Err(std::io::Error::other(
                    "RLIMIT_MEMLOCK hard limit below 8 MiB",
                ));
            }
            if libc::setrlimit(libc::RLIMIT_MEMLOCK, &rl) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            if libc::geteuid() == 0
                && libc::prctl(libc::PR_CAPBSET_DROP, CAP_IPC_LOCK, 0, 0, 0) != 0
            {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        })
    }
}

/// Not a test: a target process of `two_targets_and_an_embedded_bench_of_one_user`,
/// which starts this binary again to run only this function (`ADDRESS,FILE` in
/// [`HELPER_ENV`]). It checks that it is limited, prints `READY fixed=N` (N: the
/// poll group's buffers io_uring registered) and serves until killed.
#[test]
#[ignore = "helper process of two_targets_and_an_embedded_bench_of_one_user (fails when run alone)"]
fn target_helper() {
    let spec = std::env::var(HELPER_ENV)
        .expect("run by two_targets_and_an_embedded_bench_of_one_user, which sets the address");
    let (ip, path) = spec.split_once(',').expect("ADDRESS,FILE");
    assert!(
        !transport::memlock::has_cap_ipc_lock(),
        "the helper still has CAP_IPC_LOCK: cannot test the limit"
    );
    assert_eq!(
        transport::memlock::PinBudget::process().limit(),
        transport::memlock::MemlockLimit::Bytes(LIMIT)
    );
    let cfg = nvmf_target::config::TargetConfig::default_for(
        ip.parse().unwrap(),
        NQN,
        Path::new(path),
        32 << 20,
    );
    let target = nvmf_target::start(&cfg).expect("the target starts beside the others");
    let fixed = target.poll_group_counters()[0]
        .io_uring_fixed_buffers
        .load(std::sync::atomic::Ordering::Relaxed);
    println!("READY fixed={fixed}");
    loop {
        std::thread::sleep(Duration::from_secs(1));
    }
}

/// A running target helper, killed on drop.
struct Helper {
    child: Child,
    fixed: u64,
}

impl Drop for Helper {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start_target(ip: &str, file: &Path) -> Helper {
    let child = limited(
        Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "target_helper", "--ignored", "--nocapture"])
            .env(HELPER_ENV, format!("{ip},{}", file.display()))
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit()),
    )
    .spawn()
    .expect("target helper process");
    // Killed and reaped on drop, on every path out of here.
    let mut helper = Helper { child, fixed: 0 };
    let mut out = BufReader::new(helper.child.stdout.take().unwrap());
    let mut line = String::new();
    loop {
        line.clear();
        if out.read_line(&mut line).unwrap_or(0) == 0 {
            panic!("the target helper on {ip} ended before it was ready (its stderr is above)");
        }
        if let Some(n) = line.trim().strip_prefix("READY fixed=") {
            helper.fixed = n.parse().unwrap();
            return helper;
        }
    }
}

fn bench(dir: &Path, args: &[&str]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_nvmf-bench"));
    c.args([
        "--rw",
        "randrw",
        "--bs",
        "4k",
        "--iodepth",
        "8",
        "--size",
        "4M",
        "--time_based",
        "--runtime",
        "2",
        "--verify",
        "crc32c",
    ])
    .args(args)
    .env("TMPDIR", dir)
    .env_remove("RUST_LOG")
    .stdin(Stdio::null());
    c
}

/// Asserts a bench run passed: exit 0 and every block it wrote verified.
fn assert_verified(what: &str, out: &Output) -> String {
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    // nvmf-bench's own lines (the verification summary among them) go to standard
    // error; standard output holds fio's report only.
    let verify_line = stderr.lines().find_map(|l| l.strip_prefix("verify: "));
    let verified = verify_line.and_then(|l| l.split_whitespace().next()?.parse::<u64>().ok());
    assert!(
        out.status.success()
            && verified.is_some_and(|n| n > 0)
            && verify_line.is_some_and(|l| l.contains(" 0 mismatches")),
        "{what}: {} (verified {verified:?})\n--- stdout\n{stdout}\n--- stderr\n{stderr}",
        out.status
    );
    stderr
}

#[test]
fn two_targets_and_an_embedded_bench_of_one_user() {
    let dir = tempfile::tempdir().unwrap();
    // Two daemons' worth of targets: the first takes 7 of the 8 MiB (a 5 MiB slab and
    // its 2 MiB receive region), the second finds no room beside it.
    let a = start_target("127.0.60.2", &dir.path().join("a.img"));
    let b = start_target("127.0.60.4", &dir.path().join("b.img"));
    eprintln!(
        "io_uring fixed buffers: first target {}, second target {}",
        a.fixed, b.fixed
    );
    assert!(
        b.fixed < 2,
        "the second target registered all its buffers beside the first's 7 MiB under an \
         8 MiB limit (first: {}, second: {}): the limit is not in force",
        a.fixed,
        b.fixed
    );
    // The embedded bench (limited too) and one remote bench per target, all at once.
    let embedded = limited(&mut bench(dir.path(), &["--embedded-size", "64M"])).output_async();
    let to_a = bench(
        dir.path(),
        &[
            "--traddr",
            "127.0.60.2",
            "--host-traddr",
            "127.0.60.3",
            "--subnqn",
            NQN,
        ],
    )
    .output_async();
    let to_b = bench(
        dir.path(),
        &[
            "--traddr",
            "127.0.60.4",
            "--host-traddr",
            "127.0.60.5",
            "--subnqn",
            NQN,
        ],
    )
    .output_async();
    let embedded_err = assert_verified("the embedded bench", &embedded.join().unwrap());
    assert_verified("the host of the first target", &to_a.join().unwrap());
    assert_verified("the host of the second target", &to_b.join().unwrap());
    assert!(
        embedded_err.contains("plain buffers"),
        "the embedded target did not say that it serves from plain buffers:\n{embedded_err}"
    );
    drop((a, b));
}

/// A command's output, collected on a thread so that several run at once.
trait OutputAsync {
    fn output_async(&mut self) -> std::thread::JoinHandle<Output>;
}

impl OutputAsync for Command {
    fn output_async(&mut self) -> std::thread::JoinHandle<Output> {
        let child = self
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn nvmf-bench");
        std::thread::spawn(move || child.wait_with_output().expect("nvmf-bench output"))
    }
}
