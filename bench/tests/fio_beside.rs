//! nvmf-bench beside fio itself: the same workload through fio 3.33's io_uring engine
//! on a file and through nvmf-bench against its embedded target, and the two outputs'
//! structure compared line by line (text) and key by key (JSON), with and without
//! `--group_reporting`, and for an error (a write that finds the medium full). Values
//! differ; the lines, their order, their labels and their kinds of unit must not.
//!
//! These need Debian's `fio` (`apt-get install -y fio`; `fio --version` = fio-3.33),
//! and the error case needs root (a 1 MiB tmpfs to fill). They are ignored in
//! `cargo test --workspace`; `.ci/run` installs fio and runs them:
//! `cargo test -p nvmf-bench --test fio_beside -- --ignored`. Run without fio, they
//! fail and say so.
use std::path::Path;
use std::process::{Command, Output};

/// Runs that bring busy-polling threads go one at a time (2 cores).
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// fio, or a failure that says how to get it.
fn fio() -> Command {
    let v = Command::new("fio").arg("--version").output();
    match v {
        Ok(o) if o.status.success() => {
            let ver = String::from_utf8_lossy(&o.stdout);
            assert!(
                ver.starts_with("fio-3."),
                "fio --version says {ver:?}; these tests compare against fio 3.x"
            );
        }
        _ => panic!(
            "fio is not installed: these tests run fio beside nvmf-bench; install Debian's \
             fio (`apt-get install -y fio`) or let .ci/run do it"
        ),
    }
    Command::new("fio")
}

fn bench() -> Command {
    Command::new(env!("CARGO_BIN_EXE_nvmf-bench"))
}

fn run(mut c: Command, what: &str) -> Output {
    let o = c.output().unwrap_or_else(|e| panic!("{what}: {e}"));
    eprintln!(
        "== {what}: {}\n{}{}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    o
}

/// The workload both run, in fio's option names.
const WORKLOAD: &[&str] = &[
    "--name=cmp",
    "--size=32M",
    "--rw=randrw",
    "--bs=4k",
    "--iodepth=4",
    "--numjobs=2",
    "--runtime=2",
    "--time_based",
    "--thread",
];

/// A file fio reads without laying it out first (fio prints "Laying out" only when
/// it creates or extends the file).
fn fio_file(dir: &Path, bytes: usize) -> String {
    let p = dir.join("fio.img");
    let mut x = 0x2545_F491_4F6C_DD1Du64;
    let data: Vec<u8> = (0..bytes)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect();
    std::fs::write(&p, data).unwrap();
    p.to_string_lossy().into_owned()
}

fn fio_run(dir: &Path, extra: &[&str]) -> Output {
    let file = fio_file(dir, 32 << 20);
    let mut c = fio();
    c.args(WORKLOAD)
        .arg("--ioengine=io_uring")
        .arg(format!("--filename={file}"))
        .args(extra);
    run(c, &format!("fio {extra:?}"))
}

fn bench_run(dir: &Path, extra: &[&str]) -> Output {
    let mut c = bench();
    c.args(WORKLOAD)
        .args(["--embedded-size=32M", "--eta=never"])
        .arg(format!("--embedded-dir={}", dir.display()))
        .args(extra);
    run(c, &format!("nvmf-bench {extra:?}"))
}

// ---- the text's shape

/// Replaces every number (with its SI/IEC prefix) by `N`, keeping the unit after it.
fn numbers(l: &str) -> String {
    let b: Vec<char> = l.chars().collect();
    let mut out = String::new();
    let mut i = 0;
    while i < b.len() {
        if b[i].is_ascii_digit() {
            while i < b.len() && (b[i].is_ascii_digit() || b[i] == '.') {
                i += 1;
            }
            // num2str's prefixes: k M G T P E, IEC with an 'i' before the unit.
            if i < b.len() && "kKMGTPE".contains(b[i]) {
                i += 1;
                if i < b.len() && b[i] == 'i' {
                    i += 1;
                }
            }
            out.push('N');
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    out
}

/// One line of fio's text as structure: numbers, engine, time stamps, error texts,
/// time units and padding normalized.
fn norm(l: &str) -> String {
    let mut s = l.to_string();
    // The engine and the file differ by design.
    if let Some(i) = s.find("ioengine=") {
        let end = s[i..].find(',').map_or(s.len(), |e| i + e);
        s.replace_range(i..end, "ioengine=E");
    }
    // ctime: "Wed Dec  2 11:16:58 2026".
    if let Some(i) = s.rfind(": ") {
        let tail = &s[i + 2..];
        if tail.len() >= 24 && tail.as_bytes().get(13) == Some(&b':') {
            s.replace_range(i + 2.., "DATE");
        }
    }
    for (from, to) in [("(nsec)", "(T)"), ("(usec)", "(T)"), ("(msec)", "(T)")] {
        s = s.replace(from, to);
    }
    // fio's verror and io_u error texts: where raised, and the strerror.
    for key in ["file:", "error=", "on file "] {
        while let Some(i) = s.find(key) {
            let start = i + key.len();
            let stop: &[char] = match key {
                "file:" => &[','],
                "error=" => &[')'],
                _ => &[':'],
            };
            let end = s[start..].find(stop).map_or(s.len(), |e| start + e);
            if s[start..end] == *"F" {
                break;
            }
            s.replace_range(start..end, "F");
            if key == "on file " {
                // ": <strerror>: write offset" -> ": E: write offset".
                if let Some(j) = s[start..].find(": ") {
                    let a = start + j + 2;
                    if let Some(k) = s[a..].find(": ") {
                        s.replace_range(a..a + k, "E");
                    }
                }
                break;
            }
        }
    }
    let s = numbers(&s);
    // Padding: "[    N]", "min=  N", "err= N".
    let mut out = String::new();
    let mut prev = ' ';
    for c in s.chars() {
        if c == ' ' && (prev == '[' || prev == '=') {
            continue;
        }
        out.push(c);
        prev = c;
    }
    out
}

/// fio's text as a list of shape lines: percentile tables as their list of
/// percentiles, the latency distribution as one line (its buckets depend on the
/// values), fio's disk statistics (a local disk only fio has) left out.
fn shape(text: &str) -> Vec<String> {
    let lines: Vec<&str> = text.lines().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let l = lines[i];
        i += 1;
        if l.starts_with("Disk stats") {
            while i < lines.len() && lines[i].starts_with("  ") {
                i += 1;
            }
            continue;
        }
        if l.starts_with("  lat (") && l.contains(")   : ") {
            while i < lines.len() && lines[i].starts_with("  lat (") {
                i += 1;
            }
            out.push("  lat (T)   : DISTRIBUTION".to_string());
            continue;
        }
        if l.contains(" percentiles (") {
            let mut names = Vec::new();
            while i < lines.len() && lines[i].starts_with("     |") {
                for e in lines[i].split("th=[").map(str::trim) {
                    if let Some(p) = e.rsplit([' ', '|']).next().filter(|p| {
                        !p.is_empty() && p.chars().all(|c| c.is_ascii_digit() || c == '.')
                    }) {
                        names.push(format!("{p}th"));
                    }
                }
                i += 1;
            }
            out.push(format!("{} {}", norm(l), names.join(",")));
            continue;
        }
        out.push(norm(l));
    }
    // The blank line fio leaves before its disk statistics.
    while out.last().is_some_and(|l| l.is_empty()) {
        out.pop();
    }
    out
}

fn assert_same_shape(fio_text: &str, ours: &str, what: &str) {
    let (a, b) = (shape(fio_text), shape(ours));
    if a != b {
        let mut diff = String::new();
        for k in 0..a.len().max(b.len()) {
            let (x, y) = (
                a.get(k).map_or("", String::as_str),
                b.get(k).map_or("", String::as_str),
            );
            let mark = if x == y { "  " } else { "!!" };
            diff += &format!("{mark} fio: {x}\n   ours: {y}\n");
        }
        let first = a.iter().zip(&b).position(|(x, y)| x != y);
        panic!(
            "{what}: the text differs from fio's in shape ({} lines against {}, first \
             difference at {first:?}: {:?} against {:?}):\n{diff}",
            a.len(),
            b.len(),
            first.map(|i| &a[i]),
            first.map(|i| &b[i])
        );
    }
}

#[test]
#[ignore = "needs Debian's fio (apt-get install -y fio); .ci/run installs it and runs it"]
fn text_has_fios_shape_with_and_without_group_reporting() {
    let _s = serial();
    for extra in [&[][..], &["--group_reporting"][..]] {
        let dir = tempfile::tempdir().unwrap();
        let f = fio_run(dir.path(), extra);
        let o = bench_run(dir.path(), extra);
        assert!(f.status.success() && o.status.success(), "{extra:?}");
        let (f, o) = (
            String::from_utf8_lossy(&f.stdout).into_owned(),
            String::from_utf8_lossy(&o.stdout).into_owned(),
        );
        assert_same_shape(&f, &o, &format!("{extra:?}"));
        // Job blocks: two without group reporting, one with it.
        let blocks = o.matches("(groupid=0, jobs=").count();
        assert_eq!(blocks, if extra.is_empty() { 2 } else { 1 }, "{o}");
        assert_eq!(blocks, f.matches("(groupid=0, jobs=").count());
    }
}

// ---- the JSON's shape

/// Every key path of a JSON document with the kind of its value (int, float,
/// string), in order; `skip` leaves out keys by name at any level.
fn keys(v: &serde_json::Value, path: &str, skip: &[&str], out: &mut Vec<String>) {
    match v {
        serde_json::Value::Object(m) => {
            for (k, x) in m {
                if skip.contains(&k.as_str()) {
                    continue;
                }
                let p = format!("{path}/{k}");
                keys(x, &p, skip, out);
            }
        }
        serde_json::Value::Array(a) => {
            for (i, x) in a.iter().enumerate() {
                keys(x, &format!("{path}[{i}]"), skip, out);
            }
        }
        serde_json::Value::Number(n) => out.push(format!(
            "{path}:{}",
            if n.is_f64() { "float" } else { "int" }
        )),
        serde_json::Value::String(_) => out.push(format!("{path}:string")),
        other => out.push(format!("{path}:{other}")),
    }
}

/// Engine- and medium-specific keys: fio's local disk and file, nvmf-bench's target
/// and own section.
const NOT_COMPARED: &[&str] = &[
    "disk_util",
    "nvmf-bench",
    "ioengine",
    "filename",
    "embedded-size",
    "embedded-dir",
    "eta",
    "traddr",
    "host-traddr",
    "subnqn",
];

fn json_of(o: &Output) -> (Vec<String>, serde_json::Value) {
    let text = String::from_utf8_lossy(&o.stdout);
    let at = text.find('{').unwrap_or_else(|| panic!("no JSON: {text}"));
    // What fio prints before its JSON (error lines), as shape.
    let before = text[..at].lines().map(norm).collect();
    let v: serde_json::Value = serde_json::from_str(&text[at..]).expect("JSON");
    (before, v)
}

fn assert_same_keys(f: &Output, o: &Output, what: &str) {
    let (fb, fv) = json_of(f);
    let (ob, ov) = json_of(o);
    assert_eq!(fb, ob, "{what}: the lines before the JSON differ");
    let (mut a, mut b) = (Vec::new(), Vec::new());
    keys(&fv, "", NOT_COMPARED, &mut a);
    keys(&ov, "", NOT_COMPARED, &mut b);
    // serde_json sorts keys; the order is compared on the text below.
    if a != b {
        let only_fio: Vec<&String> = a.iter().filter(|k| !b.contains(k)).collect();
        let only_ours: Vec<&String> = b.iter().filter(|k| !a.contains(k)).collect();
        panic!("{what}: keys differ: only fio's {only_fio:#?}, only ours {only_ours:#?}");
    }
    assert!(ov["nvmf-bench"].is_object(), "our own key");
}

/// The keys of a JSON text in the order written.
fn key_order(text: &str) -> Vec<String> {
    text.lines()
        .filter_map(|l| l.trim_start().strip_prefix('"'))
        .filter_map(|l| l.split_once("\" : ").map(|(k, _)| k.to_string()))
        .filter(|k| !NOT_COMPARED.contains(&k.as_str()))
        .collect()
}

#[test]
#[ignore = "needs Debian's fio (apt-get install -y fio); .ci/run installs it and runs it"]
fn json_has_fio_3_33s_keys_with_and_without_group_reporting() {
    let _s = serial();
    for extra in [
        &["--output-format=json"][..],
        &["--output-format=json", "--group_reporting"],
    ] {
        let dir = tempfile::tempdir().unwrap();
        let f = fio_run(dir.path(), extra);
        let o = bench_run(dir.path(), extra);
        assert!(f.status.success() && o.status.success(), "{extra:?}");
        assert_same_keys(&f, &o, &format!("{extra:?}"));
        let (ft, ot) = (
            String::from_utf8_lossy(&f.stdout),
            String::from_utf8_lossy(&o.stdout),
        );
        // The keys in fio's order, our section cut off (it comes last).
        let cut = |t: &str| {
            t[..t
                .find("\"nvmf-bench\"")
                .or(t.find("\"disk_util\""))
                .unwrap_or(t.len())]
                .to_string()
        };
        let (fk, ok) = (key_order(&cut(&ft)), key_order(&cut(&ot)));
        assert_eq!(fk, ok, "{extra:?}: key order");
        assert!(
            ot.starts_with("{\n  \"fio version\" : \"fio-3.33\",\n"),
            "{ot}"
        );
    }
}

// ---- an error, as fio reports it

/// A tmpfs of 1 MiB, unmounted when dropped (root only).
struct SmallFs(tempfile::TempDir);

impl SmallFs {
    fn mount() -> SmallFs {
        // SAFETY: geteuid has no arguments.
        assert_eq!(
            unsafe { libc::geteuid() },
            0,
            "the error case fills a 1 MiB tmpfs, which needs root to mount; run it as \
             root (.ci/run does)"
        );
        let d = tempfile::tempdir().unwrap();
        let st = Command::new("mount")
            .args(["-t", "tmpfs", "-o", "size=1m", "nvmf-fio-cmp"])
            .arg(d.path())
            .status()
            .expect("mount(8)");
        assert!(st.success(), "mount -t tmpfs failed");
        SmallFs(d)
    }
}

impl Drop for SmallFs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(self.0.path()).status();
    }
}

/// Where fio and nvmf-bench write 8 MiB into a 1 MiB medium: ENOSPC for fio's file,
/// Capacity Exceeded from the target for nvmf-bench (err= 5, EIO).
const FULL: &[&str] = &[
    "--name=cmp",
    "--size=8M",
    "--rw=write",
    "--bs=4k",
    "--iodepth=1",
    "--thread",
];

#[test]
#[ignore = "needs Debian's fio (apt-get install -y fio) and root (a tmpfs); .ci/run runs it"]
fn an_error_is_reported_as_fio_reports_it() {
    let _s = serial();
    let nqn = "nqn.2026-11.io.nvmf-rdma:full";
    let ip: std::net::IpAddr = "127.0.0.93".parse().unwrap();
    for extra in [&[][..], &["--output-format=json"][..]] {
        // A full medium each: one for fio's file, one for the target's.
        let (fs, target_fs) = (SmallFs::mount(), SmallFs::mount());
        let cfg = nvmf_target::config::TargetConfig::default_for(
            ip,
            nqn,
            &target_fs.0.path().join("ns.img"),
            8 << 20,
        );
        let target = nvmf_target::start(&cfg).expect("target on the tmpfs");
        let fio_file = fs.0.path().join("fio.img");
        std::fs::File::create(&fio_file)
            .unwrap()
            .set_len(8 << 20)
            .unwrap();
        let mut c = fio();
        c.args(FULL)
            .arg("--ioengine=io_uring")
            .arg(format!("--filename={}", fio_file.display()))
            .args(extra);
        let f = run(c, "fio, medium full");
        let _ = std::fs::remove_file(&fio_file);
        let mut c = bench();
        c.args(FULL)
            .args([
                "--traddr=127.0.0.93",
                "--host-traddr=127.0.0.94",
                "--eta=never",
            ])
            .arg(format!("--subnqn={nqn}"))
            .args(extra);
        let o = run(c, "nvmf-bench, medium full");
        assert_eq!(f.status.code(), Some(1), "fio fails");
        assert_eq!(o.status.code(), Some(1), "nvmf-bench fails as fio does");
        // The I/O error on its own line, on standard error, in fio's form.
        let io_u = |o: &Output| -> Vec<String> {
            String::from_utf8_lossy(&o.stderr)
                .lines()
                .filter(|l| l.starts_with("fio: io_u error"))
                .map(norm)
                .collect()
        };
        let (fe, oe) = (io_u(&f), io_u(&o));
        assert_eq!(fe.len(), 1, "fio: one io_u error line");
        assert_eq!(fe.first(), oe.first(), "the io_u error line");
        if extra.is_empty() {
            assert_same_shape(
                &String::from_utf8_lossy(&f.stdout),
                &String::from_utf8_lossy(&o.stdout),
                "medium full",
            );
            let out = String::from_utf8_lossy(&o.stdout);
            assert!(out.contains("err= 5 (file:"), "{out}");
        } else {
            assert_same_keys(&f, &o, "medium full, JSON");
        }
        target.shutdown();
    }
}

#[test]
fn the_shape_normalizer_keeps_structure_and_drops_values() {
    assert_eq!(
        norm("  read: IOPS=34.9k, BW=136MiB/s (143MB/s)(273MiB/2001msec)"),
        "  read: IOPS=N, BW=NB/s (NB/s)(NB/Nmsec)"
    );
    assert_eq!(
        norm("cmp: (groupid=0, jobs=1): err=28 (file:io_u.c:1876, func=io_u error, error=No space left on device): pid=30847: Wed Dec  2 11:19:53 2026"),
        "cmp: (groupid=N, jobs=N): err=N (file:F, func=io_u error, error=F): pid=N: DATE"
    );
    assert_eq!(
        norm("fio: io_u error on file /dev/full: No space left on device: write offset=0, buflen=4096"),
        "fio: io_u error on file F: E: write offset=N, buflen=N"
    );
    assert_eq!(
        norm("   bw (  KiB/s): min=  14739, max=21576, per=80.37%"),
        "   bw (  KiB/s): min=N, max=N, per=N%"
    );
    let t = "    clat percentiles (usec):\n     |  1.00th=[   25],  5.00th=[   40],\n     | 99.99th=[33817]\n  lat (usec)   : 20=0.67%\n  lat (msec)   : 2=0.80%\n";
    assert_eq!(
        shape(t),
        vec![
            "    clat percentiles (T): 1.00th,5.00th,99.99th".to_string(),
            "  lat (T)   : DISTRIBUTION".to_string()
        ]
    );
}
