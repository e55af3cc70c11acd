//! The host library stays small for those who embed it (DESIGN.md, "Layers"): its
//! dependency tree, as `cargo tree` resolves it from this workspace's Cargo.lock, holds
//! neither the target (nor its io_uring) nor the benchmark's command-line parser and
//! histograms. `nvmf-bench` (bench/) is the crate that brings the target and the host
//! together.
use std::path::Path;
use std::process::Command;

/// Crates an embedder of the host library must not get.
const FORBIDDEN: &[&str] = &[
    "nvmf-target",
    "nvmf-bench",
    "io-uring",
    "clap",
    "hdrhistogram",
    "tracing-subscriber",
];

#[test]
fn the_host_library_pulls_in_neither_the_target_nor_the_bench_tools() {
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("initiator/ lives in the workspace");
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    // Normal and build dependencies (what an embedder compiles), from Cargo.lock only.
    let out = Command::new(&cargo)
        .current_dir(workspace)
        .args([
            "tree",
            "--offline",
            "-p",
            "nvmf-initiator",
            "-e",
            "no-dev",
            "--prefix",
            "none",
            "--format",
            "{p}",
        ])
        .output()
        .unwrap_or_else(|e| panic!("running `{cargo} tree`: {e}"));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "`cargo tree -p nvmf-initiator` failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let names: Vec<&str> = stdout
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    assert!(
        names.contains(&"nvmf-initiator") && names.contains(&"transport"),
        "unexpected `cargo tree` output:\n{stdout}"
    );
    let found: Vec<&str> = FORBIDDEN
        .iter()
        .copied()
        .filter(|f| names.contains(f))
        .collect();
    assert!(
        found.is_empty(),
        "nvmf-initiator depends on {found:?}; move what needs them to bench/ (nvmf-bench):\n{stdout}"
    );
}
