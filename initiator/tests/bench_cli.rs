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
    assert_eq!(v["verify"]["mismatches"], 0);
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
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(
        out.contains("write: IOPS=") && out.contains("err= 0"),
        "{out}"
    );
    assert!(out.contains("0 mismatches"), "{out}");
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
    let verified = v["verify"]["verified_blocks"].as_u64().unwrap();
    assert!(verified > 0);
    assert_eq!(v["verify"]["mismatches"], 0);
    // The final line on standard error repeats the counts.
    assert!(
        err.contains(&format!("verify: {verified} blocks verified, 0 mismatches")),
        "{err}"
    );
    let f = &v["faults"];
    assert_eq!(f["loss"], 0.002);
    assert_eq!(f["seed"], 7);
    assert_eq!(v["global options"]["inject_loss"], "0.002");
    let devices = f["devices"].as_array().expect("faults.devices[]");
    assert_eq!(devices.len(), 2);
    for d in devices {
        assert!(d["dropped"].as_u64().unwrap() > 0, "{d}");
        assert_eq!(d["duplicated"], 0);
    }
    assert!(f["injected_total"].as_u64().unwrap() > 0);
}
