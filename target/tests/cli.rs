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
    // ... and how to get out of it.
    assert!(err.contains("another with --addr"), "{err}");
    // The sparse file this start created is gone again (issue 16: a failed start
    // leaves nothing behind) ...
    assert!(!path.exists(), "{} left behind: {err}", path.display());
    assert!(err.contains("removed the namespace file"), "{err}");
    // ... while a file that was there before stays, with its contents.
    std::fs::write(&path, vec![7u8; 1 << 20]).unwrap();
    let (code, err) = run(&["--addr", "127.0.0.22", "--file", path.to_str().unwrap()]);
    assert_ne!(code, 0);
    assert_eq!(std::fs::read(&path).unwrap(), vec![7u8; 1 << 20], "{err}");
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
fn poll_groups_zero_is_refused_as_the_config_refuses_it() {
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("ns.img");
    let (code, cli) = run(&[
        "--addr",
        "127.0.0.200",
        "--file",
        img.to_str().unwrap(),
        "--size",
        "16M",
        "--poll-groups",
        "0",
    ]);
    assert_ne!(code, 0);
    assert!(!img.exists(), "refused before anything was created");
    let toml = dir.path().join("target.toml");
    std::fs::write(
        &toml,
        format!(
            "poll_groups = 0\n[[listen]]\naddr = \"127.0.0.200\"\n[[subsystems]]\nnqn = \"nqn.2026-11.io.example:a\"\n[[subsystems.namespaces]]\nnsid = 1\npath = \"{}\"\nsize = \"16M\"\n",
            img.display()
        ),
    )
    .unwrap();
    let (code, file) = run(&["--config", toml.to_str().unwrap()]);
    assert_ne!(code, 0);
    // "nvmf-target: <origin>: <reason>": the same reason from both.
    let reason = |m: &str| {
        m.trim()
            .split_once(": ")
            .unwrap()
            .1
            .split_once(": ")
            .unwrap()
            .1
            .to_string()
    };
    assert!(cli.contains("command line: poll_groups 0"), "{cli}");
    assert_eq!(reason(&cli), reason(&file), "{cli} / {file}");
}

#[test]
fn mdts_is_set_and_checked_on_the_command_line() {
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("ns.img");
    let img = img.to_str().unwrap();
    for (value, want) in [
        ("4K", "mdts_bytes 4096 must be a power of two from 8192"),
        ("3M", "mdts_bytes 3145728 must be a power of two"),
        ("16M", "mdts_bytes 16777216 must be a power of two"),
        ("lots", "--mdts: invalid size \"lots\""),
    ] {
        let (code, err) = run(&[
            "--addr",
            "127.0.0.201",
            "--file",
            img,
            "--size",
            "16M",
            "--mdts",
            value,
        ]);
        assert_ne!(code, 0, "--mdts {value}");
        assert!(err.contains(want), "--mdts {value}: {err}");
    }
}

#[test]
fn unknown_config_key_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let toml = dir.path().join("target.toml");
    std::fs::write(
        &toml,
        "[[listen]]\naddr = \"127.0.0.202\"\nport = 4420\n[[subsystems]]\nnqn = \"nqn.2026-11.io.example:a\"\n",
    )
    .unwrap();
    let (code, err) = run(&["--config", toml.to_str().unwrap()]);
    assert_ne!(code, 0);
    assert!(err.contains("unknown field `port`"), "{err}");
    assert!(
        err.contains("trsvcid"),
        "the message lists the known keys: {err}"
    );
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

#[test]
fn special_files_and_bad_block_sizes_are_named() {
    // A character device is neither a file nor a block device.
    let (code, err) = run(&["--addr", "127.0.0.23", "--file", "/dev/null", "--direct"]);
    assert_ne!(code, 0);
    assert!(
        err.contains("/dev/null") && err.contains("not a regular file or a block device"),
        "{err}"
    );
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("ns.img");
    let (code, err) = run(&[
        "--addr",
        "127.0.0.24",
        "--file",
        img.to_str().unwrap(),
        "--size",
        "1M",
        "--block-size",
        "1000",
    ]);
    assert_ne!(code, 0);
    assert!(err.contains("block_size 1000"), "{err}");
    assert!(!img.exists(), "nothing created for a refused configuration");
}

/// The message `--provider verbs` / `provider = "verbs"` gets: in a build without the
/// verbs provider, how to build it; with it, on a loopback address, that no RDMA device
/// has the address as its RoCE v2 GID (the device or the address named).
fn assert_verbs_refused(code: i32, err: &str) {
    assert_ne!(code, 0, "{err}");
    if cfg!(feature = "verbs") {
        assert!(err.contains("verbs provider"), "{err}");
    } else {
        assert!(
            err.contains("built without the verbs provider")
                && err.contains("--features verbs")
                && err.contains("libibverbs-dev"),
            "the refusal says how to build it: {err}"
        );
    }
}

#[test]
fn verbs_provider_is_refused_with_the_cause_and_the_fix() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("ns.img");
    let f = file.to_str().unwrap();
    let (code, err) = run(&[
        "--provider",
        "verbs",
        "--addr",
        "127.0.0.180",
        "--file",
        f,
        "--size",
        "16M",
    ]);
    assert_verbs_refused(code, &err);

    let toml = dir.path().join("target.toml");
    std::fs::write(
        &toml,
        format!(
            "provider = \"verbs\"\n[[listen]]\naddr = \"127.0.0.180\"\n[[subsystems]]\n\
             nqn = \"nqn.2026-11.io.example:a\"\nallow_any_host = true\n\
             [[subsystems.namespaces]]\nnsid = 1\npath = \"{f}\"\nsize = \"16M\"\n"
        ),
    )
    .unwrap();
    let (code, err) = run(&["--config", toml.to_str().unwrap()]);
    assert_verbs_refused(code, &err);
}

#[test]
fn unknown_provider_is_refused_with_the_known_ones() {
    let (code, err) = run(&["--provider", "rxe", "--file", "/dev/null"]);
    assert_ne!(code, 0);
    assert!(err.contains("soft") && err.contains("verbs"), "{err}");

    let dir = tempfile::tempdir().unwrap();
    let toml = dir.path().join("target.toml");
    std::fs::write(
        &toml,
        "provider = \"rxe\"\n[[listen]]\naddr = \"127.0.0.180\"\n[[subsystems]]\nnqn = \"nqn.2026-11.io.example:a\"\n",
    )
    .unwrap();
    let (code, err) = run(&["--config", toml.to_str().unwrap()]);
    assert_ne!(code, 0);
    assert!(
        err.contains("rxe") && err.contains("soft") && err.contains("verbs"),
        "{err}"
    );
}

#[test]
fn srq_depth_out_of_range_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let toml = dir.path().join("target.toml");
    std::fs::write(
        &toml,
        "srq_depth = 8\n[[listen]]\naddr = \"127.0.0.180\"\n[[subsystems]]\nnqn = \"nqn.2026-11.io.example:a\"\n",
    )
    .unwrap();
    let (code, err) = run(&["--config", toml.to_str().unwrap()]);
    assert_ne!(code, 0);
    assert!(
        err.contains("srq_depth 8") && err.contains("16 to 16384"),
        "{err}"
    );
}

#[test]
fn null_namespace_from_the_command_line_serves_without_a_file() {
    let dir = tempfile::tempdir().unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_nvmf-target"))
        .args(["--addr", "127.0.0.172", "--null", "1G"])
        .current_dir(dir.path())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("nvmf-target starts");
    let stderr = child.stderr.take().unwrap();
    let mut lines = std::io::BufRead::lines(std::io::BufReader::new(stderr));
    let serving = lines
        .by_ref()
        .map_while(Result::ok)
        .find(|l| l.contains("serving") || l.contains("error"))
        .expect("a serving line");
    assert!(serving.contains("serving"), "{serving}");
    let pid = nix::unistd::Pid::from_raw(child.id() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
    assert!(child.wait().unwrap().success());
    assert_eq!(
        std::fs::read_dir(dir.path()).unwrap().count(),
        0,
        "no file made"
    );
    // --null and --file together: refused by name.
    let (code, err) = run(&["--null", "1G", "--file", "x.img"]);
    assert_ne!(code, 0);
    assert!(err.contains("--null") && err.contains("--file"), "{err}");
}

/// Issue 20: with --config, the flags that describe the default subsystem are refused
/// by name (nothing is created); the flags that tune the whole target override the
/// file, each with a log line.
#[test]
fn config_refuses_subsystem_flags_and_logs_overrides() {
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("x.img");
    let toml = dir.path().join("target.toml");
    // A namespace in a missing directory: the target stops after reading the flags.
    let ns = dir.path().join("missing/ns.img");
    std::fs::write(
        &toml,
        format!(
            "poll_groups = 1\n[[listen]]\naddr = \"127.0.61.2\"\n[[subsystems]]\n\
             nqn = \"nqn.2026-11.io.example:cfg\"\n[[subsystems.namespaces]]\nnsid = 1\n\
             path = \"{}\"\nsize = \"16M\"\n",
            ns.display()
        ),
    )
    .unwrap();
    let t = toml.to_str().unwrap();
    let (code, err) = run(&[
        "--config",
        t,
        "--addr",
        "127.0.61.4",
        "--file",
        img.to_str().unwrap(),
        "--nqn",
        "nqn.x:y",
    ]);
    assert_eq!(code, 2, "{err}");
    for want in ["--addr, --nqn, --file", "cannot be given with --config", t] {
        assert!(err.contains(want), "missing {want:?}: {err}");
    }
    assert!(!img.exists(), "nothing created");
    let (code, err) = run(&["--config", t, "--size", "1G", "--port", "4421"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--port, --size"), "{err}");
    // Overrides are applied and said.
    let (code, err) = run(&[
        "--config",
        t,
        "--poll-groups",
        "2",
        "--mdts",
        "128K",
        "--data-slab",
        "4M",
    ]);
    assert_ne!(code, 0);
    for want in [
        "--poll-groups 2 overrides the configuration file's poll_groups",
        "--mdts 131072 overrides the configuration file's mdts_bytes",
        "--data-slab 4M overrides the configuration file's data_slab",
        "parent directory",
    ] {
        assert!(err.contains(want), "missing {want:?}: {err}");
    }
    let (_, help) = {
        let out = Command::new(env!("CARGO_BIN_EXE_nvmf-target"))
            .arg("--help")
            .output()
            .unwrap();
        (0, String::from_utf8_lossy(&out.stdout).into_owned())
    };
    assert!(
        help.contains("are refused") && help.contains("override"),
        "{help}"
    );
}

/// A started target, its stderr read until it serves; killed on drop.
struct Serving(std::process::Child);

impl Serving {
    fn start(args: &[&str]) -> Serving {
        use std::io::{BufRead, BufReader};
        let mut child = Command::new(env!("CARGO_BIN_EXE_nvmf-target"))
            .args(args)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("nvmf-target starts");
        let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
        loop {
            match lines.next() {
                Some(Ok(l)) if l.contains("serving") => break,
                Some(Ok(_)) => {}
                _ => {
                    let _ = child.kill();
                    panic!("nvmf-target {args:?} ended before serving");
                }
            }
        }
        // Keep draining stderr so the target never blocks on it.
        std::thread::spawn(move || lines.for_each(drop));
        Serving(child)
    }
}

impl Drop for Serving {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Issue 20: two targets on one file: the second is refused, naming the file and the
/// first target's PID.
#[test]
fn a_second_target_on_the_same_file_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("ns.img");
    let p = img.to_str().unwrap();
    let first = Serving::start(&["--addr", "127.0.61.6", "--file", p, "--size", "16M"]);
    let (code, err) = run(&["--addr", "127.0.61.8", "--file", p]);
    assert_ne!(code, 0);
    let pid = format!("(pid {})", first.0.id());
    for want in [p, "in use", pid.as_str(), "exclusive"] {
        assert!(err.contains(want), "missing {want:?}: {err}");
    }
    // Once the first has gone (SIGKILL: its io_uring ring, which holds the file, is torn
    // down by the kernel a moment later), the file is free again.
    drop(first);
    let again = Serving::start(&["--addr", "127.0.61.8", "--file", p]);
    drop(again);
}

/// Issue 20: a namespace file in a directory this user cannot write names the
/// directory and the permission. As root the child runs without the capabilities that
/// bypass file modes (dropped from its bounding set), in a directory root does not own.
#[test]
fn an_unwritable_directory_is_named() {
    use std::os::unix::fs::PermissionsExt;
    use std::os::unix::process::CommandExt;
    let dir = tempfile::tempdir().unwrap();
    let locked = dir.path().join("locked");
    std::fs::create_dir(&locked).unwrap();
    let root = nix::unistd::geteuid().is_root();
    if root {
        nix::unistd::chown(&locked, Some(nix::unistd::Uid::from_raw(65534)), None).unwrap();
        std::fs::set_permissions(&locked, std::fs::Permissions::from_mode(0o755)).unwrap();
    } else {
        std::fs::set_permissions(&locked, std::fs::Permissions::from_mode(0o555)).unwrap();
    }
    let img = locked.join("ns.img");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_nvmf-target"));
    cmd.args(["--addr", "127.0.61.10", "--file"])
        .arg(&img)
        .args(["--size", "16M"]);
    if root {
        // SAFETY: only prctl between fork and exec.
        unsafe {
            cmd.pre_exec(|| {
                // CAP_DAC_OVERRIDE 1, CAP_DAC_READ_SEARCH 2, CAP_FOWNER 3.
                for cap in [1, 2, 3] {
                    if libc::prctl(libc::PR_CAPBSET_DROP, cap, 0, 0, 0) != 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                }
                Ok(())
            })
        };
    }
    let out = cmd.output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    let locked_s = locked.display().to_string();
    for want in [
        img.display().to_string().as_str(),
        "permission denied",
        &format!("directory {locked_s}"),
        "no write permission",
        "creating the file",
    ] {
        assert!(err.contains(want), "missing {want:?}: {err}");
    }
    std::fs::set_permissions(&locked, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// target/examples/nvmetcli.json (the shape `nvmetcli save` writes) with `from`
/// replaced by `to`, in a file ending in .json.
fn nvmetcli_file(dir: &std::path::Path, from: &str, to: &str) -> std::path::PathBuf {
    let example = include_str!("../examples/nvmetcli.json");
    assert!(example.contains(from), "{from}");
    let path = dir.join("config.json");
    std::fs::write(&path, example.replacen(from, to, 1)).unwrap();
    path
}

#[test]
fn nvmetcli_json_unsupported_values_and_unknown_keys_are_named_with_their_path() {
    let dir = tempfile::tempdir().unwrap();
    for (from, to, want) in [
        (
            r#""trtype": "rdma""#,
            r#""trtype": "tcp""#,
            r#"ports[0].addr.trtype = "tcp": only rdma is served"#,
        ),
        (
            r#""pi_enable": "0""#,
            r#""pi_enable": "1""#,
            r#"ports[0].param.pi_enable = "1": protection information (T10 PI) is not served"#,
        ),
        (
            r#""nsid": 1,"#,
            r#""nsid": 1, "buffered_io": "1","#,
            "subsystems[0].namespaces[0].buffered_io: not a key this target serves",
        ),
    ] {
        let path = nvmetcli_file(dir.path(), from, to);
        let p = path.to_str().unwrap();
        let (code, err) = run(&["--config", p]);
        assert_ne!(code, 0, "{err}");
        assert!(
            err.contains(&format!("{p}: {want}")),
            "{want}\n  got: {err}"
        );
    }
    // Not JSON at all: named with its line.
    let path = dir.path().join("broken.json");
    std::fs::write(&path, "{\n  \"hosts\": [\n").unwrap();
    let (code, err) = run(&["--config", path.to_str().unwrap()]);
    assert_ne!(code, 0);
    assert!(
        err.contains("broken.json") && err.contains("line 3"),
        "{err}"
    );
}
