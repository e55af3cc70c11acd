//! `nvmf-target` refuses bad setups with a message that names the problem and a
//! non-zero exit, never a panic.
use std::process::Command;

fn run(args: &[&str]) -> (i32, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_nvmf-target"))
        .args(args)
        .output()
        .expect("run nvmf-target");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        !stderr.contains("panicked"),
        "nvmf-target panicked: {stderr}"
    );
    (out.status.code().unwrap_or(-1), stderr)
}

#[test]
fn missing_backing_file_directory_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("no/such/dir/ns.img");
    let p = path.to_str().unwrap();
    let (code, err) = run(&["--addr", "127.0.0.20", "--file", p, "--size", "16M"]);
    assert_ne!(code, 0);
    assert!(err.contains(p), "message should name {p}: {err}");
}

#[test]
fn unreadable_backing_file_is_named() {
    let dir = tempfile::tempdir().unwrap();
    // A directory where the file should be: cannot be opened as a namespace.
    let p = dir.path().to_str().unwrap();
    let (code, err) = run(&["--addr", "127.0.0.21", "--file", p]);
    assert_ne!(code, 0);
    assert!(err.contains(p), "message should name {p}: {err}");
}

#[test]
fn udp_port_in_use_is_named() {
    let _holder = std::net::UdpSocket::bind("127.0.0.22:4791").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ns.img");
    let (code, err) = run(&[
        "--addr",
        "127.0.0.22",
        "--file",
        path.to_str().unwrap(),
        "--size",
        "16M",
    ]);
    assert_ne!(code, 0);
    assert!(
        err.contains("4791") && err.contains("127.0.0.22") && err.contains("in use"),
        "{err}"
    );
}

#[test]
fn bad_config_file_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("target.toml");
    std::fs::write(&path, "this is = not [valid toml").unwrap();
    let p = path.to_str().unwrap();
    let (code, err) = run(&["--config", p]);
    assert_ne!(code, 0);
    assert!(err.contains(p), "message should name {p}: {err}");
}

#[test]
fn data_slab_below_mdts_or_unparsable_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ns.img");
    let p = path.to_str().unwrap();
    let (code, err) = run(&["--addr", "127.0.0.23", "--file", p, "--data-slab", "512K"]);
    assert_ne!(code, 0);
    assert!(
        err.contains("data_slab 524288") && err.contains("mdts_bytes 1048576"),
        "{err}"
    );
    assert!(!path.exists(), "refused before creating the namespace file");
    let (code, err) = run(&["--addr", "127.0.0.23", "--file", p, "--data-slab", "lots"]);
    assert_ne!(code, 0);
    assert!(err.contains("--data-slab lots"), "{err}");
}
