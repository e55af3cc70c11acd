//! The README's main job: `nvmf-bench` against its embedded target, with fio's JSON
//! output read by a fio-JSON consumer (`tests/fio_json`), and its refusals of bad
//! arguments.
use std::process::Command;

mod fio_json;

/// Runs that bring busy-polling threads (a target, a bench) go one at a time: this
/// machine has 2 cores.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

fn bench() -> Command {
    Command::new(env!("CARGO_BIN_EXE_nvmf-bench"))
}

#[test]
fn embedded_run_writes_fio_json_that_a_fio_consumer_reads() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let out_dir = dir.path().join("out").join("A");
    std::fs::create_dir_all(&out_dir).unwrap();
    let json = out_dir.join("fio-nvmf-bench.json");
    let st = bench()
        .args([
            "--rw",
            "randrw",
            "--bs",
            "4k",
            "--iodepth",
            "4",
            "--numjobs",
            "2",
            "--runtime",
            "1",
            "--time_based",
        ])
        .args([
            "--embedded-size",
            "32M",
            "--verify",
            "crc32c",
            "--output-format",
            "json",
            "--output",
        ])
        .arg(&json)
        .arg("--embedded-dir")
        .arg(dir.path())
        .output()
        .expect("run nvmf-bench");
    assert!(
        st.status.success(),
        "nvmf-bench failed: {}",
        String::from_utf8_lossy(&st.stderr)
    );
    let v: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&json).unwrap()).expect("fio JSON");
    let jobs = v["jobs"].as_array().expect("jobs[]");
    assert_eq!(jobs.len(), 2, "one entry per job");
    for j in jobs {
        assert_eq!(j["error"], 0);
        for d in ["read", "write"] {
            assert!(j[d]["total_ios"].as_u64().unwrap() > 0, "{d} I/Os ran");
            assert!(j[d]["io_bytes"].as_u64().unwrap() > 0);
            let p = &j[d]["clat_ns"]["percentile"];
            assert!(p["99.000000"].as_u64().unwrap() >= p["50.000000"].as_u64().unwrap());
        }
    }
    assert_eq!(v["nvmf-bench"]["verify"]["mismatches"], 0);
    let report = fio_json::FioReport::read(&json).expect("fio JSON a consumer reads");
    for job in &report.jobs {
        assert_eq!(job.error, 0);
        assert_eq!(
            job.job_options.get("rw").map(String::as_str),
            Some("randrw")
        );
        assert_eq!(
            job.job_options.get("iodepth").map(String::as_str),
            Some("4")
        );
        assert_eq!(job.bs_bytes(), Some(4096));
        for rw in ["read", "write"] {
            let problems = job.check_dir(rw);
            assert!(problems.is_empty(), "{problems:#?}");
            let s = job.summary(rw).expect("I/Os in both directions");
            assert!(s.iops > 0.0 && s.bw_kib_s > 0, "{rw}: {s:?}");
            assert!(s.p50_us > 0.0 && s.p50_us <= s.p99_us, "{rw}: {s:?}");
        }
    }
}

#[test]
fn bad_arguments_are_refused_with_a_message() {
    for args in [
        &["--bs", "four"][..],
        &["--rw", "sideways"][..],
        &["--traddr", "127.0.0.99"][..], // no --subnqn
        &["--traddr", "not-an-ip", "--subnqn", "nqn.x"][..],
    ] {
        let o = bench()
            .args(args)
            .args(["--runtime", "1"])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success(), "{args:?} accepted");
        assert!(
            !err.is_empty() && !err.contains("panicked"),
            "{args:?}: {err}"
        );
    }
}

/// `--provider verbs` is refused up front, saying how to fix it: in a build without the
/// verbs provider, how to build it; with it, that the embedded target is soft only (a
/// remote target is needed).
#[test]
fn provider_verbs_is_refused_with_the_fix() {
    let o = bench()
        .args(["--provider", "verbs", "--runtime", "1"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    let says = if cfg!(feature = "verbs") {
        "--provider verbs needs --traddr"
    } else {
        "--features verbs"
    };
    assert!(!o.status.success(), "accepted: {err}");
    assert!(
        err.contains(says) && !err.contains("Laying out") && !err.contains("panicked"),
        "{err}"
    );
}

/// With the verbs provider built, a host address without an RDMA device (none on a
/// machine without rdma_rxe or an RNIC, or no RoCE v2 GID for 127.0.0.97) fails with
/// the provider's reason, never a crash.
#[cfg(feature = "verbs")]
#[test]
fn provider_verbs_without_a_device_fails_cleanly() {
    let o = bench()
        .args([
            "--provider",
            "verbs",
            "--traddr",
            "127.0.0.98",
            "--host-traddr",
            "127.0.0.97",
            "--subnqn",
            "nqn.2026-11.io.nvmf-rdma:none",
            "--runtime",
            "1",
        ])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "accepted: {err}");
    assert!(
        err.contains("verbs RDMA device on 127.0.0.97") && !err.contains("panicked"),
        "{err}"
    );
}

#[test]
fn unreachable_target_fails_cleanly() {
    let _serial = serial();
    // Nothing listens on 127.0.0.98: the CM REQ retries run out and the bench says so.
    let o = bench()
        .args([
            "--traddr",
            "127.0.0.98",
            "--host-traddr",
            "127.0.0.97",
            "--subnqn",
            "nqn.2026-11.io.nvmf-rdma:none",
            "--runtime",
            "1",
        ])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success());
    assert!(
        err.contains("127.0.0.98") && !err.contains("panicked"),
        "{err}"
    );
}

#[test]
fn remote_mode_benchmarks_a_running_target() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("remote.img");
    let nqn = "nqn.2026-11.io.nvmf-rdma:remote";
    let ip: std::net::IpAddr = "127.0.0.85".parse().unwrap();
    let cfg = nvmf_target::config::TargetConfig::default_for(ip, nqn, &path, 32 << 20);
    let target = nvmf_target::start(&cfg).expect("target");
    let o = bench()
        .args([
            "--traddr",
            "127.0.0.85",
            "--trsvcid",
            "4420",
            "--subnqn",
            nqn,
            "--host-traddr",
            "127.0.0.86",
        ])
        .args([
            "--rw",
            "randwrite",
            "--bs",
            "64k",
            "--iodepth",
            "4",
            "--runtime",
            "1",
            "--time_based",
        ])
        .args(["--verify", "crc32c"])
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert!(
        out.contains("write: IOPS=") && out.contains("err= 0"),
        "{out}"
    );
    assert!(err.contains("0 mismatches"), "{err}");
    // The data went to the target's file.
    assert!(
        target.poll_group_counters()[0]
            .rdma_read_writes
            .load(std::sync::atomic::Ordering::Relaxed)
            > 0
    );
    target.shutdown();
}

#[test]
fn inject_options_are_refused_with_a_remote_target() {
    let o = bench()
        .args([
            "--traddr",
            "127.0.0.99",
            "--subnqn",
            "nqn.2026-11.io.nvmf-rdma:none",
        ])
        .args(["--inject-loss", "0.01", "--runtime", "1"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success());
    assert!(
        err.contains("--inject-") && err.contains("embedded") && !err.contains("panicked"),
        "{err}"
    );
    // Out of range probabilities are clap errors (exit status 2).
    let o = bench().args(["--inject-dup", "2"]).output().unwrap();
    assert_eq!(o.status.code(), Some(2));
}

#[test]
fn embedded_run_with_injected_loss_verifies_and_reports_the_faults() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("faults.json");
    // A fixed amount of I/O (randrw, then fio's verify phase) under 0.2% loss on each
    // device's receive path.
    let o = bench()
        .args(["--rw", "randrw", "--bs", "4k", "--iodepth", "8"])
        .args(["--size", "4M", "--io_size", "8M", "--runtime", "60"])
        .args(["--embedded-size", "8M", "--verify", "crc32c"])
        .args(["--inject-loss", "0.002", "--inject-seed", "7"])
        .args(["--output-format", "json", "--output"])
        .arg(&json)
        .arg("--embedded-dir")
        .arg(dir.path())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "nvmf-bench failed: {err}");
    let v: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&json).unwrap()).expect("fio JSON");
    assert_eq!(v["jobs"][0]["error"], 0);
    let verified = v["nvmf-bench"]["verify"]["verified_blocks"]
        .as_u64()
        .unwrap();
    assert!(verified > 0);
    assert_eq!(v["nvmf-bench"]["verify"]["mismatches"], 0);
    // The final line on standard error repeats the counts.
    assert!(
        err.contains(&format!("verify: {verified} blocks verified, 0 mismatches")),
        "{err}"
    );
    let f = &v["nvmf-bench"]["faults"];
    assert_eq!(f["loss"], 0.002);
    assert_eq!(f["seed"], 7);
    // The options as given (fio echoes them), and the target as nvmf-bench reads it.
    assert_eq!(v["jobs"][0]["job options"]["inject-loss"], "0.002");
    assert_eq!(v["nvmf-bench"]["target"]["inject_loss"], "0.002");
    let devices = f["devices"].as_array().expect("faults.devices[]");
    assert_eq!(devices.len(), 2);
    for d in devices {
        assert!(d["dropped"].as_u64().unwrap() > 0, "{d}");
        assert_eq!(d["duplicated"], 0);
    }
    assert!(f["injected_total"].as_u64().unwrap() > 0);
}

// ---- Issue 8: signals, verification that checks something, arguments refused up
// front, block sizes over MDTS, the header and progress lines.

use std::io::{BufRead, BufReader, Read};
use std::path::Path;
use std::process::{Child, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// A running `nvmf-bench` whose standard output lines arrive on `lines`; its
/// embedded target's file goes in `dir`, which is also its TMPDIR.
struct Running {
    child: Child,
    lines: mpsc::Receiver<String>,
    stdout: Vec<String>,
}

impl Running {
    fn start(dir: &Path, args: &[&str]) -> Running {
        let mut child = bench()
            .args(args)
            .arg("--embedded-dir")
            .arg(dir)
            .env("TMPDIR", dir)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn nvmf-bench");
        let out = child.stdout.take().unwrap();
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for l in BufReader::new(out).lines().map_while(Result::ok) {
                if tx.send(l).is_err() {
                    break;
                }
            }
        });
        Running {
            child,
            lines,
            stdout: Vec::new(),
        }
    }

    /// Waits (at most `limit`) for a standard output line containing `needle`.
    fn wait_for(&mut self, needle: &str, limit: Duration) {
        let deadline = Instant::now() + limit;
        while Instant::now() < deadline {
            if let Ok(l) = self.lines.recv_timeout(Duration::from_millis(50)) {
                let hit = l.contains(needle);
                self.stdout.push(l);
                if hit {
                    return;
                }
            }
        }
        let _ = self.child.kill();
        panic!("no {needle:?} line within {limit:?}: {:?}", self.stdout);
    }

    fn signal(&self, sig: i32) {
        // SAFETY: kill(2) on our own child's pid.
        let r = unsafe { libc::kill(self.child.id() as i32, sig) };
        assert_eq!(r, 0, "kill({sig})");
    }

    /// Waits for the exit (killing it after `limit`: a hang fails the test) and
    /// returns the status, all of standard output and standard error.
    fn finish(mut self, limit: Duration) -> (ExitStatus, String, String) {
        let deadline = Instant::now() + limit;
        let status = loop {
            if let Some(s) = self.child.try_wait().unwrap() {
                break s;
            }
            if Instant::now() >= deadline {
                let _ = self.child.kill();
                panic!("nvmf-bench still running {limit:?} later");
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        while let Ok(l) = self.lines.recv_timeout(Duration::from_secs(2)) {
            self.stdout.push(l);
        }
        let mut err = String::new();
        self.child
            .stderr
            .take()
            .unwrap()
            .read_to_string(&mut err)
            .unwrap();
        (status, self.stdout.join("\n"), err)
    }
}

/// The header line of the default job, exactly as fio prints it.
const HEADER: &str = "nvmf-bench: (g=0): rw=randread, bs=(R) 4096B-4096B, (W) 4096B-4096B, \
                      (T) 4096B-4096B, ioengine=nvmf-rdma, iodepth=1";

fn entries(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect()
}

#[test]
fn ctrl_c_reports_what_ran_exits_128_and_leaves_no_file() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let mut run = Running::start(
        dir.path(),
        &[
            "--rw=randwrite",
            "--verify=crc32c",
            "--time_based",
            "--runtime=120",
            "--embedded-size=16M",
        ],
    );
    run.wait_for("(g=0): rw=randwrite", Duration::from_secs(60));
    std::thread::sleep(Duration::from_millis(1500));
    run.signal(libc::SIGINT);
    let (status, out, err) = run.finish(Duration::from_secs(60));
    // fio's exit status after a signal, and fio's line on standard output.
    assert_eq!(status.code(), Some(128), "{err}");
    assert!(out.contains("fio: terminating on signal 2"), "{out}");
    // The report of what ran, as fio prints it on Ctrl-C.
    assert!(
        out.contains("nvmf-bench: (groupid=0, jobs=1): err= 0"),
        "{out}"
    );
    assert!(out.contains("  write: IOPS="), "{out}");
    assert!(out.contains("Run status group 0 (all jobs):"), "{out}");
    // The writes were not read back: verification says so (nvmf-bench's own lines
    // are on standard error).
    assert!(
        err.contains("verify: error: the read-back was cut short by a signal"),
        "{err}"
    );
    assert!(!err.contains("disconnect:"), "clean disconnect: {err}");
    assert!(entries(dir.path()).is_empty(), "{:?}", entries(dir.path()));
}

#[test]
fn a_second_signal_exits_at_once_and_sigkill_leaves_no_file() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let args = ["--time_based", "--runtime=120", "--embedded-size=16M"];
    // SIGINT and SIGTERM (two signal numbers, so both are delivered): whichever is
    // handled second exits at once with 128 + its number, with no report.
    let mut run = Running::start(dir.path(), &args);
    run.wait_for(HEADER, Duration::from_secs(60));
    run.signal(libc::SIGINT);
    run.signal(libc::SIGTERM);
    let (status, out, err) = run.finish(Duration::from_secs(30));
    let code = status.code();
    assert!(code == Some(130) || code == Some(143), "{code:?}: {err}");
    assert!(!out.contains("Run status group"), "{out}");
    assert!(entries(dir.path()).is_empty(), "{:?}", entries(dir.path()));
    // SIGKILL: no handler runs, and still no file is left.
    let mut run = Running::start(dir.path(), &args);
    run.wait_for(HEADER, Duration::from_secs(60));
    run.signal(libc::SIGKILL);
    let (status, _, _) = run.finish(Duration::from_secs(30));
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(status.signal(), Some(libc::SIGKILL));
    assert!(entries(dir.path()).is_empty(), "{:?}", entries(dir.path()));
}

fn json_run(dir: &Path, args: &[&str]) -> (serde_json::Value, std::process::Output) {
    let json = dir.join("out.json");
    let o = bench()
        .args(args)
        .args(["--output-format", "json", "--output"])
        .arg(&json)
        .arg("--embedded-dir")
        .arg(dir)
        .output()
        .unwrap();
    let v = serde_json::from_slice(&std::fs::read(&json).unwrap_or_default())
        .unwrap_or(serde_json::Value::Null);
    (v, o)
}

#[test]
fn verify_reads_back_every_block_even_when_the_runtime_ends_the_writes() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    // Time based: the runtime always ends the write phase (fio would skip its verify
    // phase and report nothing checked).
    let (v, o) = json_run(
        dir.path(),
        &[
            "--rw=randwrite",
            "--iodepth=1",
            "--verify=crc32c",
            "--time_based",
            "--runtime=1",
            "--embedded-size=16M",
        ],
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    let vj = &v["nvmf-bench"]["verify"];
    let written = vj["written_blocks"].as_u64().unwrap();
    let verified = vj["verified_blocks"].as_u64().unwrap();
    assert!(written > 0 && verified > 0, "{vj}");
    // Depth 1 over a 4096-block region: every block written is read back once.
    assert_eq!(verified, written.min(4096), "{vj}");
    assert_eq!(vj["passed"], 1);
    // As fio, the read-back's reads are in the job's read statistics.
    assert_eq!(v["jobs"][0]["read"]["total_ios"], verified);
    assert!(err.contains(&format!("verify: {verified} blocks verified, 0 mismatches")));
}

#[test]
fn runtime_0_means_no_limit() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let (v, o) = json_run(
        dir.path(),
        &[
            "--rw=read",
            "--runtime=0",
            "--size=1M",
            "--embedded-size=16M",
        ],
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(
        v["jobs"][0]["read"]["total_ios"], 256,
        "every block of --size"
    );
    assert_eq!(v["jobs"][0]["error"], 0);
}

#[test]
fn arguments_are_refused_before_connecting() {
    // A remote target that does not exist: connecting would time out after seconds and
    // say "connecting to"; the embedded target would say "Laying out".
    let remote = [
        "--traddr",
        "127.0.0.98",
        "--host-traddr",
        "127.0.0.97",
        "--subnqn",
        "nqn.2026-11.io.nvmf-rdma:none",
    ];
    let cases: [(&[&str], &str); 7] = [
        (&["--bs=1000"], "multiple of 512"),
        (&["--bs=4097"], "multiple of 512"),
        (&["--offset=100"], "multiple of 512"),
        (&["--offset_increment=1000"], "multiple of 512"),
        (&["--output=/nonexistent/x"], "--output /nonexistent/x"),
        (
            &["--traddr=10.0.0.1", "--subnqn=x", "--host-traddr=nope"],
            "--host-traddr nope",
        ),
        (&["--embedded-size=1000"], "--embedded-size 1000"),
    ];
    for (args, says) in cases {
        let own_target = args
            .iter()
            .any(|a| a.starts_with("--embedded") || a.starts_with("--traddr"));
        let mut cmd = bench();
        if !own_target {
            cmd.args(remote);
        }
        let o = cmd.args(args).output().unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success(), "{args:?} accepted");
        assert!(err.contains(says), "{args:?}: {err}");
        assert!(
            !err.contains("connecting to")
                && !err.contains("Laying out")
                && !err.contains("panicked"),
            "{args:?} was not refused up front: {err}"
        );
    }
    // A region larger than the embedded namespace: refused before laying it out.
    let o = bench()
        .args([
            "--size=64M",
            "--embedded-size=16M",
            "--embedded-dir=/nonexistent",
        ])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success());
    assert!(
        err.contains("does not fit in the namespace") && err.contains("--embedded-size"),
        "{err}"
    );
    // Options clap refuses stop the run before --output is created.
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("report.txt");
    let o = bench()
        .args(remote)
        .args(["--bs=1000", "--output"])
        .arg(&out)
        .output()
        .unwrap();
    assert!(!o.status.success());
    assert!(
        !out.exists(),
        "clap refuses --bs before anything is created"
    );
}

#[test]
fn block_size_not_a_multiple_of_the_namespace_block_is_refused_before_any_io() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let nqn = "nqn.2026-11.io.nvmf-rdma:lbs4k";
    let ip: std::net::IpAddr = "127.0.0.87".parse().unwrap();
    let mut cfg = nvmf_target::config::TargetConfig::default_for(
        ip,
        nqn,
        &dir.path().join("4k.img"),
        16 << 20,
    );
    cfg.subsystems[0].namespaces[0].block_size = Some(4096);
    let target = nvmf_target::start(&cfg).expect("target");
    for (args, says) in [
        (
            &["--bs=512"][..],
            "--bs 512 is not a multiple of the namespace's 4096-byte",
        ),
        (
            &["--bs=4k", "--offset=1536"][..],
            "--offset 1536 is not a multiple",
        ),
    ] {
        let o = bench()
            .args([
                "--traddr=127.0.0.87",
                "--host-traddr=127.0.0.88",
                "--subnqn",
                nqn,
            ])
            .args(["--rw=write", "--runtime=1"])
            .args(args)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success(), "{args:?} accepted");
        assert!(err.contains(says), "{args:?}: {err}");
        assert!(
            !String::from_utf8_lossy(&o.stdout).contains("groupid"),
            "a job ran"
        );
    }
    // Nothing was written.
    assert_eq!(
        target.poll_group_counters()[0]
            .rdma_read_writes
            .load(std::sync::atomic::Ordering::Relaxed),
        0
    );
    target.shutdown();
}

#[test]
fn block_size_sweep_verifies_every_block_across_the_mdts() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    // The embedded target's MDTS is 1 MiB: from 1 MiB + 512 on, each I/O is split.
    for (bs, blocks) in [
        (512u64, 8u64),
        (4 << 10, 8),
        (128 << 10, 4),
        (1 << 20, 4),
        ((1 << 20) + 512, 4),
        (4 << 20, 3),
        (16 << 20, 2),
    ] {
        let size = bs * blocks;
        let embedded = size.div_ceil(1 << 20).max(1) << 20;
        let (v, o) = json_run(
            dir.path(),
            &[
                "--rw=write",
                "--iodepth=2",
                "--verify=crc32c",
                "--runtime=0",
                &format!("--bs={bs}"),
                &format!("--size={size}"),
                &format!("--embedded-size={embedded}"),
            ],
        );
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(o.status.success(), "bs {bs}: {err}");
        assert_eq!(v["jobs"][0]["error"], 0, "bs {bs}");
        assert_eq!(v["jobs"][0]["write"]["total_ios"], blocks, "bs {bs}");
        let vj = &v["nvmf-bench"]["verify"];
        assert_eq!(vj["written_blocks"], blocks, "bs {bs}");
        assert_eq!(vj["verified_blocks"], blocks, "bs {bs}: {vj}");
        assert_eq!(vj["mismatches"], 0, "bs {bs}");
    }
    assert!(
        entries(dir.path()) == ["out.json"],
        "{:?}",
        entries(dir.path())
    );
}

/// Runs `cmd` (a shell command line) under a pseudo-terminal with script(1).
fn in_pty(cmd: &str) -> std::process::Output {
    Command::new("script")
        .args(["-qec", cmd, "/dev/null"])
        .stdin(Stdio::null())
        .output()
        .expect("script(1) from util-linux runs commands in a pseudo-terminal; install util-linux")
}

#[test]
fn header_always_and_progress_line_only_on_a_terminal() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let exe = env!("CARGO_BIN_EXE_nvmf-bench");
    let common = format!(
        "{exe} --time_based --runtime=4 --embedded-size=16M --embedded-dir={}",
        dir.path().display()
    );
    // A terminal: fio's line, refreshed with carriage returns, the ETA from the 3rd
    // second, then blanked before the report.
    let o = in_pty(&common);
    let tty = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{tty}");
    assert!(tty.contains(HEADER), "{tty}");
    assert!(tty.contains("Jobs: 1 (f=1)\r"), "{tty}");
    let at = tty
        .find("Jobs: 1 (f=1): [r(1)][")
        .expect("progress line with run state");
    let line = &tty[at..at + tty[at..].find('\r').unwrap()];
    assert!(
        line.contains("%][r=") && line.contains(" IOPS][eta 00m:0"),
        "{line}"
    );
    assert!(tty.contains("Run status group 0"), "{tty}");
    // JSON on a terminal: no progress line, no header.
    let o = in_pty(&format!("{common} --output-format=json"));
    let json = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{json}");
    assert!(!json.contains("Jobs:") && !json.contains("(g=0)"), "{json}");
    // Not a terminal: the header, no progress line; --eta=always forces it.
    let o = bench()
        .args(["--time_based", "--runtime=4", "--embedded-size=16M"])
        .arg("--embedded-dir")
        .arg(dir.path())
        .output()
        .unwrap();
    let piped = String::from_utf8_lossy(&o.stdout);
    assert!(piped.starts_with(&format!("{HEADER}\n")), "{piped}");
    assert!(!piped.contains("Jobs:"), "{piped}");
    let o = bench()
        .args([
            "--time_based",
            "--runtime=4",
            "--embedded-size=16M",
            "--eta=always",
        ])
        .arg("--embedded-dir")
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&o.stdout).contains("Jobs: 1 (f=1): [r(1)]["));
}

/// Environment variable that makes [`killed_target_helper`] serve a target:
/// `ADDRESS,FILE`.
const TARGET_HELPER_ENV: &str = "NVMF_BENCH_TEST_TARGET";
const HELPER_NQN: &str = "nqn.2026-11.io.nvmf-rdma:killed";

/// Not a test: the target process of `a_killed_target_ends_the_job_with_an_error`,
/// which starts this test binary again to run only this function, then SIGKILLs it.
#[test]
#[ignore = "helper process of a_killed_target_ends_the_job_with_an_error (fails when run alone)"]
fn killed_target_helper() {
    let spec = std::env::var(TARGET_HELPER_ENV).expect(
        "run by a_killed_target_ends_the_job_with_an_error, which sets NVMF_BENCH_TEST_TARGET",
    );
    let (ip, path) = spec.split_once(',').expect("ADDRESS,FILE");
    let cfg = nvmf_target::config::TargetConfig::default_for(
        ip.parse().unwrap(),
        HELPER_NQN,
        Path::new(path),
        32 << 20,
    );
    let _target = nvmf_target::start(&cfg).expect("target");
    println!("READY");
    loop {
        std::thread::sleep(Duration::from_secs(1));
    }
}

#[test]
fn a_killed_target_ends_the_job_with_an_error() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let mut helper = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "killed_target_helper",
            "--ignored",
            "--nocapture",
        ])
        .env(
            TARGET_HELPER_ENV,
            format!("127.0.0.89,{}", dir.path().join("ns.img").display()),
        )
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("target helper process");
    let mut ready = BufReader::new(helper.stdout.take().unwrap());
    let mut line = String::new();
    while !line.contains("READY") {
        line.clear();
        if ready.read_line(&mut line).unwrap_or(0) == 0 {
            let _ = helper.kill();
            panic!("the target helper ended before it was ready");
        }
    }
    let mut run = Running::start(
        dir.path(),
        &[
            "--traddr=127.0.0.89",
            "--host-traddr=127.0.0.90",
            "--subnqn",
            HELPER_NQN,
            "--rw=randwrite",
            "--iodepth=16",
            "--time_based",
            "--runtime=300",
        ],
    );
    run.wait_for("(g=0): rw=randwrite", Duration::from_secs(60));
    std::thread::sleep(Duration::from_secs(1));
    // The target vanishes without a word (no DREQ): the job must end with an error
    // once the host sees the queue or the controller dead, not wait 30 s per batch of
    // outstanding I/Os. The guard is far below the 60 s hang once seen.
    helper.kill().unwrap();
    helper.wait().unwrap();
    let (status, out, err) = run.finish(Duration::from_secs(45));
    assert_eq!(status.code(), Some(1), "{out}\n{err}");
    // fio's forms: the I/O error on its own line (standard error), the job's verror.
    assert!(
        out.contains("(groupid=0, jobs=1): err= 5 (file:")
            && out.contains("func=io_u error, error=Input/output error): pid="),
        "{out}\n{err}"
    );
    assert!(
        err.contains("fio: io_u error on file nvmf-rdma/127.0.0.89/4420/ns1: Input/output error: write offset="),
        "{err}"
    );
    assert!(out.contains("  write: IOPS="), "{out}");
    assert!(out.contains("Run status group 0 (all jobs):"), "{out}");
}

/// Starts [`killed_target_helper`] serving on `ip` (a file in `dir`), once it is ready.
fn target_helper(ip: &str, dir: &Path) -> Child {
    let mut helper = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "killed_target_helper",
            "--ignored",
            "--nocapture",
        ])
        .env(
            TARGET_HELPER_ENV,
            format!("{ip},{}", dir.join("ns.img").display()),
        )
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("target helper process");
    let mut ready = BufReader::new(helper.stdout.take().unwrap());
    let mut line = String::new();
    while !line.contains("READY") {
        line.clear();
        if ready.read_line(&mut line).unwrap_or(0) == 0 {
            let _ = helper.kill();
            panic!("the target helper ended before it was ready");
        }
    }
    helper
}

#[test]
fn sigint_against_a_dead_target_ends_within_a_second() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let mut helper = target_helper("127.0.0.95", dir.path());
    let mut run = Running::start(
        dir.path(),
        &[
            "--traddr=127.0.0.95",
            "--host-traddr=127.0.0.96",
            "--subnqn",
            HELPER_NQN,
            "--rw=randwrite",
            "--iodepth=16",
            "--time_based",
            "--runtime=300",
        ],
    );
    run.wait_for("(g=0): rw=randwrite", Duration::from_secs(60));
    std::thread::sleep(Duration::from_secs(1));
    helper.kill().unwrap();
    helper.wait().unwrap();
    std::thread::sleep(Duration::from_millis(300));
    // The I/Os in flight never complete and the disconnect has no one to answer it:
    // the signal still ends the run at once, with the report of what ran.
    let t = Instant::now();
    run.signal(libc::SIGINT);
    let (status, out, err) = run.finish(Duration::from_secs(30));
    let took = t.elapsed();
    eprintln!("SIGINT against a dead target: exit after {took:?}");
    assert_eq!(status.code(), Some(128), "{out}\n{err}");
    assert!(out.contains("fio: terminating on signal 2"), "{out}");
    assert!(out.contains("Run status group 0 (all jobs):"), "{out}");
    // The goal is 1 s; the bound catches the old 8 s without timing a loaded machine.
    assert!(took < Duration::from_secs(3), "{took:?}");
}

/// `--roce-mtu` sets the RoCE MTU of the host's device and of the embedded target's
/// (issue 17 item 5): at 512 a 4 KiB read's data leaves the target as 8 RDMA WRITE
/// packets, at the loopback default (4096) as one; a value that is not a RoCE MTU is
/// refused, naming the ones that are.
#[test]
fn roce_mtu_sets_the_packets_per_read_and_bad_values_are_refused() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let per_io = |mtu: Option<&str>| {
        let mut args = vec![
            "--rw",
            "randread",
            "--bs",
            "4k",
            "--iodepth",
            "1",
            "--size",
            "1M",
            "--io_size",
            "2M",
            "--embedded-size",
            "16M",
        ];
        if let Some(m) = mtu {
            args.extend(["--roce-mtu", m]);
        }
        let (v, o) = json_run(dir.path(), &args);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let ios = v["jobs"][0]["read"]["total_ios"].as_u64().unwrap();
        let sent = v["nvmf-bench"]["target_counters"]["sent_pkts"]
            .as_u64()
            .unwrap();
        assert_eq!(ios, 512);
        sent as f64 / ios as f64
    };
    let small = per_io(Some("512"));
    let default = per_io(None);
    // Per read: the data WRITEs, the response SEND, the ACK of the capsule.
    assert!(
        (10.0..11.0).contains(&small),
        "{small} packets per read at 512"
    );
    assert!(
        (3.0..4.0).contains(&default),
        "{default} packets per read at 4096"
    );
    let o = bench()
        .args(["--roce-mtu", "1500", "--runtime", "1"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success());
    assert!(
        err.contains("not a RoCE MTU: 256, 512, 1024, 2048 or 4096"),
        "{err}"
    );
}
