//! `nvmf-bench --baseline`: the floor measured in the same run (UDP round trips, a
//! local io_uring read of the embedded target's file) and the fabric's overhead
//! against it, in the JSON and the text report, and its refusal with a remote target.
//! Functional checks only: the numbers exist and are positive; how large they are is
//! for the benchmark scripts (BENCHMARKS.md), not for a test.
use std::process::{Command, Output};

/// Runs that bring busy-polling threads (a target, a bench) go one at a time: this
/// machine has 2 cores.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn run(extra: &[&str], dir: &std::path::Path) -> Output {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    Command::new(env!("CARGO_BIN_EXE_nvmf-bench"))
        .args([
            "--baseline",
            "--rw=randread",
            "--bs=4k",
            "--iodepth=1",
            "--time_based",
            "--runtime=1",
            "--embedded-size=16M",
        ])
        .arg("--embedded-dir")
        .arg(dir)
        .args(extra)
        .output()
        .expect("run nvmf-bench")
}

fn positive(v: &serde_json::Value, what: &str) -> f64 {
    let x = v
        .as_f64()
        .unwrap_or_else(|| panic!("{what}: not a number: {v}"));
    assert!(x > 0.0, "{what} = {x}");
    x
}

#[test]
fn baseline_figures_are_in_the_json_and_positive() {
    let dir = tempfile::tempdir().unwrap();
    let out = run(&["--output-format=json"], dir.path());
    assert!(
        out.status.success(),
        "nvmf-bench failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON on stdout");
    let b = &v["nvmf-bench"]["baseline"];
    assert!(b.is_object(), "no baseline object: {v}");
    for lat in ["udp_rtt_64", "udp_rtt_4096", "uring_read_4096"] {
        for p in ["p50_us", "p90_us", "p99_us"] {
            positive(&b[lat][p], &format!("{lat}.{p}"));
        }
        positive(&b[lat]["samples"], &format!("{lat}.samples"));
    }
    let read_p50 = positive(&b["read_clat_p50_us"], "read_clat_p50_us");
    let floor = b["udp_rtt_4096"]["p50_us"].as_f64().unwrap();
    // The overhead may be negative in principle (a read faster than the round trip):
    // only its arithmetic is checked.
    let overhead = b["fabric_overhead_us"]
        .as_f64()
        .expect("fabric_overhead_us");
    assert!((overhead - (read_p50 - floor)).abs() < 0.01, "{b}");
    let ratio = positive(&b["p50_over_floor"], "p50_over_floor");
    assert!((ratio - read_p50 / floor).abs() < 0.01, "{b}");
    // The run's read p50 is the one fio's JSON reports (both from one histogram).
    let fio_p50 = v["jobs"][0]["read"]["clat_ns"]["percentile"]["50.000000"]
        .as_f64()
        .expect("fio clat p50");
    assert!(
        (fio_p50 / 1000.0 - read_p50).abs() < 0.01,
        "{fio_p50} ns vs {read_p50} us"
    );
    for ip in ["local_ip", "peer_ip"] {
        let s = b[ip].as_str().unwrap_or_default();
        assert!(s.parse::<std::net::IpAddr>().is_ok(), "{ip}: {s:?}");
    }
}

#[test]
fn baseline_lines_are_on_standard_error() {
    let dir = tempfile::tempdir().unwrap();
    let out = run(&[], dir.path());
    assert!(
        out.status.success(),
        "nvmf-bench failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    // nvmf-bench's own lines: on standard error, after fio's report on standard output.
    let text = String::from_utf8_lossy(&out.stderr);
    for line in [
        "UDP round trip     64 B: p50",
        "UDP round trip   4096 B: p50",
        "io_uring read    4096 B: p50",
        "fabric: read clat p50",
    ] {
        assert!(text.contains(line), "no {line:?} in:\n{text}");
    }
}

#[test]
fn baseline_with_a_remote_target_is_refused_with_the_fix() {
    let dir = tempfile::tempdir().unwrap();
    let out = run(
        &["--traddr=127.0.0.1", "--subnqn=nqn.2026-11.io.example:x"],
        dir.path(),
    );
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--baseline") && err.contains("drop --traddr"),
        "{err}"
    );
}
