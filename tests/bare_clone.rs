//! `cargo test --workspace` runs from a clone of this repository alone: no test source
//! reads anything beside the checkout. `../shared` (the project's reference material:
//! the Linux peer harness, the full capture set) is for the interop matrix only
//! (`tests/interop.rs`, `tests/interop/`); the captures the tests need ship in
//! `testdata/captures/`.
use std::path::{Path, PathBuf};

/// Every `.rs` file under `dir`, skipping build output, VCS data and hidden folders.
fn rust_sources(dir: &Path, out: &mut Vec<PathBuf>) {
    let entries = std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    for entry in entries {
        let path = entry.expect("directory entry").path();
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if path.is_dir() {
            // `build/` is cargo's output (.cargo/config.toml), `fuzz/target` cargo-fuzz's.
            let skip = name.starts_with('.')
                || name == "build"
                || (name == "target" && dir.ends_with("fuzz"));
            if !skip {
                rust_sources(&path, out);
            }
        } else if name.ends_with(".rs") {
            out.push(path);
        }
    }
}

/// Lines of Rust sources that reach beside the repository: a `../shared` path, or a
/// `"shared"` path component built in code.
#[test]
fn no_test_source_reads_beside_the_repository() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    rust_sources(root, &mut files);
    assert!(files.len() > 50, "only {} Rust sources found", files.len());
    let mut offenders = Vec::new();
    for file in &files {
        let rel = file.strip_prefix(root).expect("under the root");
        // tests/interop.rs and tests/interop/: the interop matrix, which needs ../shared.
        if rel.to_string_lossy().starts_with("tests/interop") || rel == Path::new(file!()) {
            continue;
        }
        let text = std::fs::read_to_string(file).expect("UTF-8 source");
        for (n, line) in text.lines().enumerate() {
            let code = !line.trim_start().starts_with("//");
            let quoted_component = line.contains("\"shared\"") || line.contains("\"shared/");
            if line.contains("../shared") || (code && quoted_component) {
                offenders.push(format!("{}:{}: {}", rel.display(), n + 1, line.trim()));
            }
        }
    }
    assert!(
        offenders.is_empty(),
        "test data must come from this repository (testdata/), not from ../shared:\n{}",
        offenders.join("\n")
    );
}
