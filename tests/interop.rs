//! The interop matrix against Linux (issue 3 §4), as a cargo test.
//!
//! Runs `tests/interop/run-matrix.sh`, which boots Debian's Linux 6.1 in QEMU through
//! `../shared/linux-peer` and checks, cell by cell:
//! - Linux's NVMe/RDMA host (nvme-cli, fio with crc32c verification) against our
//!   `nvmf-target`: discover, connect, list, id-ctrl, id-ns, 4 KiB / 128 KiB at QD 1 / 32,
//!   flush, blkdiscard reading back zeroes, disconnect, data intact in our backing file;
//! - our initiator (`nvmf-bench --verify crc32c`) against Linux's nvmet-rdma target;
//! - both directions again over IPv6 (fd77::/64, where Linux rxe sends UDP checksum 0);
//! - tshark's decoding of both captures (RoCEv2, CM, NVMe-oF, no malformed packet
//!   beyond the multi-packet limitation Linux's own capture shows), ICRCs recomputed.
//!
//! It needs root, network namespaces, `qemu-system-x86_64`, `tcpdump` and `tshark`
//! (`.ci/run` installs them), so plain `cargo test --workspace` lists it as ignored;
//! `.ci/run` runs it with `cargo test --test interop -- --ignored`. Run that way, it
//! FAILS and says why wherever the matrix cannot run: it never passes by not running.
//! It takes a few minutes: four guest boots under TCG emulation.
use std::path::{Path, PathBuf};
use std::process::Command;

/// `build/<profile>` of this test executable (`build/<profile>/deps/interop-<hash>`).
fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("path of the test executable");
    exe.parent()
        .and_then(Path::parent)
        .expect("test executable lives in <target>/<profile>/deps")
        .to_path_buf()
}

/// Builds `nvmf-target` and `nvmf-bench` in this test's profile (a no-op when they are
/// current) and returns their paths. With the test targets, as `cargo test --workspace`
/// builds them: one feature set (dev-dependencies included), so after the test suite's
/// own build this builds nothing.
fn build_bins(repo: &Path) -> (PathBuf, PathBuf) {
    let dir = profile_dir();
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.current_dir(repo)
        .args(["build", "--workspace", "--bins", "--tests"]);
    if dir.file_name().is_some_and(|n| n == "release") {
        cmd.arg("--release");
    }
    let status = cmd.status().expect("running cargo build for the binaries");
    assert!(
        status.success(),
        "cargo build of nvmf-target / nvmf-bench failed"
    );
    (dir.join("nvmf-target"), dir.join("nvmf-bench"))
}

#[test]
#[ignore = "needs root, QEMU, tcpdump and tshark; .ci/run runs it: cargo test --test interop -- --ignored"]
fn interop_matrix_against_linux_in_qemu() {
    let repo = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let (target, bench) = build_bins(&repo);
    let script = repo.join("tests/interop/run-matrix.sh");
    let out = Command::new("bash")
        .arg(&script)
        .env("NVMF_TARGET_BIN", &target)
        .env("NVMF_BENCH_BIN", &bench)
        .output()
        .expect("running tests/interop/run-matrix.sh");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    println!("{stdout}");
    eprintln!("{stderr}");
    match out.status.code() {
        Some(0) => {
            let passed = stdout.lines().filter(|l| l.contains(" PASS ")).count();
            assert!(passed > 0, "the matrix reported no passing cell");
        }
        Some(2) => panic!(
            "the interop matrix CANNOT RUN on this machine: {}",
            stderr.trim()
        ),
        code => {
            let failed: Vec<&str> = stdout
                .lines()
                .filter(|l| l.starts_with("cell ") && l.contains(" FAIL "))
                .collect();
            panic!(
                "interop matrix failed (exit status {code:?}), {} cell(s):\n{}",
                failed.len(),
                failed.join("\n")
            );
        }
    }
}
