//! Issue 19's features through the `nvmf-bench` binary against its embedded target:
//! jobs as threads (their own thread IDs, `--cpus_allowed`), a job file with two
//! reporting groups and `--showcmd`, the workload options (zipf, randtrim, fsync,
//! md5/sha256/pattern verification, verify_backlog, rate and thinktime,
//! percentile_list, bssplit), `--status-interval`, fio's logs parsed back and the
//! `--plot` SVG, and stop signals in the phases that used to ignore them (connecting
//! to a target that is not there, the verify read-back).
use std::collections::HashSet;
use std::io::Read;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// Runs that bring busy-polling threads go one at a time (2 cores).
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

fn bench(dir: &Path) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_nvmf-bench"));
    c.current_dir(dir)
        .arg("--embedded-size=16M")
        .arg("--eta=never")
        .arg(format!("--embedded-dir={}", dir.display()));
    c
}

fn out(o: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

fn json(o: &Output) -> serde_json::Value {
    let text = String::from_utf8_lossy(&o.stdout);
    let at = text.find('{').unwrap_or_else(|| panic!("no JSON: {text}"));
    serde_json::from_str(&text[at..]).expect("fio JSON")
}

/// The `pid=` of every job line of a text report.
fn pids(text: &str) -> Vec<i32> {
    text.lines()
        .filter(|l| l.contains("(groupid="))
        .filter_map(|l| l.split(" pid=").nth(1)?.split(':').next()?.parse().ok())
        .collect()
}

#[test]
fn every_job_is_a_thread_with_its_own_id_and_cpus_allowed_pins_them() {
    let _s = serial();
    let dir = tempfile::tempdir().unwrap();
    let o = bench(dir.path())
        .args(["--numjobs=3", "--iodepth=2", "--runtime=1", "--time_based"])
        .args(["--cpus_allowed=0", "--cpus_allowed_policy=split"])
        .output()
        .unwrap();
    let (text, err) = out(&o);
    assert!(o.status.success(), "{err}");
    assert!(text.contains("\nfio-3.33\nStarting 3 threads\n"), "{text}");
    let p = pids(&text);
    assert_eq!(p.len(), 3, "{text}");
    let distinct: HashSet<i32> = p.iter().copied().collect();
    assert_eq!(distinct.len(), 3, "one thread id per job: {p:?}");
    assert!(
        !text.contains("jobs=3"),
        "no group block without group_reporting"
    );
    // With group_reporting: one block, one JSON entry summing the three.
    let o = bench(dir.path())
        .args([
            "--numjobs=3",
            "--runtime=1",
            "--time_based",
            "--group_reporting",
        ])
        .args(["--output-format=json"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", out(&o).1);
    let v = json(&o);
    let jobs = v["jobs"].as_array().unwrap();
    assert_eq!(jobs.len(), 1);
    assert_eq!(jobs[0]["job options"]["numjobs"], "3");
    assert!(jobs[0]["read"]["total_ios"].as_u64().unwrap() > 0);
    assert!(
        jobs[0]["ctx"].as_u64().unwrap() > 0,
        "CPU usage measured per thread"
    );
    // A CPU the process may not use is refused before anything starts.
    let o = bench(dir.path())
        .args(["--cpus_allowed=999"])
        .output()
        .unwrap();
    let (_, err) = out(&o);
    assert!(!o.status.success());
    assert!(
        err.contains("CPU 999 is not one this process may run on") && !err.contains("Laying out"),
        "{err}"
    );
}

const TWO_GROUPS: &str = "\
; two reporting groups, the second after the first
[global]
ioengine=nvmf-rdma
size=4m
runtime=1
time_based
iodepth=2

[seq-read]
rw=read
numjobs=2

[rand-write]
stonewall
rw=randwrite
offset=8m
bssplit=4k/50:16k/50
";

#[test]
fn a_job_file_with_two_groups_runs_them_in_turn() {
    let _s = serial();
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("two.fio");
    std::fs::write(&f, TWO_GROUPS).unwrap();
    let o = bench(dir.path()).arg(&f).output().unwrap();
    let (text, err) = out(&o);
    assert!(o.status.success(), "{err}");
    assert!(text.starts_with(
        "seq-read: (g=0): rw=read, bs=(R) 4096B-4096B, (W) 4096B-4096B, (T) 4096B-4096B, ioengine=nvmf-rdma, iodepth=2\n...\n\
         rand-write: (g=1): rw=randwrite, bs=(R) 4096B-16.0KiB, (W) 4096B-16.0KiB, (T) 4096B-16.0KiB, ioengine=nvmf-rdma, iodepth=2\n\
         fio-3.33\nStarting 3 threads\n"
    ), "{text}");
    assert_eq!(text.matches("(groupid=0, jobs=1)").count(), 2, "{text}");
    assert_eq!(text.matches("(groupid=1, jobs=1)").count(), 1, "{text}");
    assert!(
        text.contains("\nRun status group 0 (all jobs):\n   READ: "),
        "{text}"
    );
    assert!(
        text.contains("\nRun status group 1 (all jobs):\n  WRITE: "),
        "{text}"
    );
    // --showcmd: the same jobs as one command line.
    let o = bench(dir.path()).arg("--showcmd").arg(&f).output().unwrap();
    let (cmd, _) = out(&o);
    assert_eq!(
        cmd,
        "nvmf-bench --embedded-size=16M --eta=never --embedded-dir=".to_string()
            + &dir.path().display().to_string()
            + " --ioengine=nvmf-rdma --size=4m --runtime=1 --time_based --iodepth=2 \
               --name=seq-read --rw=read --numjobs=2 --name=rand-write --stonewall --rw=randwrite \
               --offset=8m --bssplit=4k/50:16k/50 \n"
    );
    // An option nvmf-bench does not have is named, with the line.
    std::fs::write(&f, "[j]\nrw=read\nnorandommap\n").unwrap();
    let o = bench(dir.path()).arg(&f).output().unwrap();
    let (_, err) = out(&o);
    assert!(!o.status.success());
    assert!(
        err.contains("two.fio:3: fio option 'norandommap' is not supported"),
        "{err}"
    );
}

const OPTIONS: &str = "\
[global]
size=1m
iodepth=4
runtime=30

[zipf]
rw=randread
random_distribution=zipf:1.2
percentile_list=50:99:99.9
io_size=4m

[trim]
rw=randtrim
offset=1m

[flush]
rw=write
offset=2m
fsync=16
end_fsync=1
verify=md5
verify_backlog=32

[sha]
rw=randwrite
offset=3m
verify=sha256

[pattern]
rw=write
offset=4m
verify=pattern
verify_pattern=0xdeadbeef

[paced]
rw=read
offset=5m
size=256k
rate=512k
thinktime=2ms
thinktime_blocks=8
";

#[test]
fn the_workload_options_do_what_fio_says() {
    let _s = serial();
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("options.fio");
    std::fs::write(&f, OPTIONS).unwrap();
    let o = bench(dir.path())
        .arg("--output-format=json")
        .arg(&f)
        .output()
        .unwrap();
    let (_, err) = out(&o);
    assert!(o.status.success(), "{err}");
    let v = json(&o);
    let job = |name: &str| {
        v["jobs"]
            .as_array()
            .unwrap()
            .iter()
            .find(|j| j["jobname"] == name)
            .unwrap_or_else(|| panic!("no job {name}"))
            .clone()
    };
    // percentile_list: exactly those percentiles.
    let p = job("zipf")["read"]["clat_ns"]["percentile"].clone();
    let keys: Vec<&String> = p.as_object().unwrap().keys().collect();
    assert_eq!(keys, ["50.000000", "99.000000", "99.900000"]);
    assert_eq!(job("zipf")["read"]["io_bytes"], 4 << 20);
    // randtrim: Dataset Management deallocate, in fio's trim direction.
    let t = job("trim");
    assert_eq!(t["trim"]["total_ios"], 256);
    assert_eq!(t["trim"]["io_bytes"], 1 << 20);
    assert_eq!(t["read"]["total_ios"], 0);
    // fsync=16 over 256 writes: 16 flushes counted (end_fsync's is not, as fio).
    let fl = job("flush");
    assert_eq!(fl["sync"]["total_ios"], 16);
    assert_eq!(fl["sync"]["lat_ns"]["N"], 16);
    assert!(fl["sync"]["lat_ns"]["percentile"].is_object());
    // Every written block read back and checked, in md5, sha256 and pattern modes.
    let ver = &v["nvmf-bench"]["verify"];
    assert_eq!(ver["mismatches"], 0, "{ver}");
    assert_eq!(ver["passed"], 1, "{ver}");
    assert_eq!(ver["unchecked_blocks"], 0, "{ver}");
    assert!(ver["verified_blocks"].as_u64().unwrap() >= 3 * 256, "{ver}");
    assert_eq!(ver["mode"], "md5,sha256,pattern");
    // The backlog reads ran during the writes: the job read each block once.
    assert_eq!(fl["read"]["total_ios"], 256);
    // rate=512k: the reads were held to about that (an upper bound: a cap).
    let paced = job("paced");
    assert_eq!(paced["read"]["io_bytes"], 256 << 10);
    assert!(
        paced["read"]["bw_bytes"].as_u64().unwrap() <= 600 << 10,
        "{}",
        paced["read"]
    );
    // The text of the same file: fio's fsync and trim sections.
    let o = bench(dir.path()).arg(&f).output().unwrap();
    let (text, err) = out(&o);
    assert!(o.status.success(), "{err}");
    assert!(
        text.contains("\n  fsync/fdatasync/sync_file_range:\n    sync ("),
        "{text}"
    );
    assert!(text.contains("\n  trim: IOPS="), "{text}");
    assert!(text.contains("rw=randtrim"), "{text}");
}

fn log_lines(p: &Path) -> Vec<[u64; 5]> {
    std::fs::read_to_string(p)
        .unwrap_or_else(|e| panic!("{}: {e}", p.display()))
        .lines()
        .map(|l| {
            let f: Vec<u64> = l
                .split(", ")
                .map(|x| x.parse().unwrap_or_else(|_| panic!("{l:?}")))
                .collect();
            [f[0], f[1], f[2], f[3], f[4]]
        })
        .collect()
}

#[test]
fn fios_logs_read_back_and_the_plot_has_its_series() {
    let _s = serial();
    let dir = tempfile::tempdir().unwrap();
    let o = bench(dir.path())
        .args([
            "--name=lg",
            "--rw=randrw",
            "--iodepth=4",
            "--runtime=2",
            "--time_based",
        ])
        .args([
            "--write_lat_log",
            "--write_bw_log=bw",
            "--write_iops_log=bw",
        ])
        .args([
            "--log_avg_msec=250",
            "--plot=out.svg",
            "--output-format=json",
        ])
        .output()
        .unwrap();
    let (_, err) = out(&o);
    assert!(o.status.success(), "{err}");
    let v = json(&o);
    let total: u64 = ["read", "write"]
        .iter()
        .map(|d| v["jobs"][0][d]["total_ios"].as_u64().unwrap())
        .sum();
    assert!(total > 0);
    for name in [
        "lg_lat.1.log",
        "lg_clat.1.log",
        "lg_slat.1.log",
        "bw_bw.1.log",
        "bw_iops.1.log",
    ] {
        let lines = log_lines(&dir.path().join(name));
        assert!(lines.len() >= 4, "{name}: {} lines", lines.len());
        for d in 0..2u64 {
            let t: Vec<u64> = lines.iter().filter(|l| l[2] == d).map(|l| l[0]).collect();
            assert!(t.windows(2).all(|w| w[0] <= w[1]), "{name}: time goes back");
            assert!(!t.is_empty(), "{name}: no direction {d}");
        }
        // Averaged: block size 0, priority 0, every value positive.
        assert!(
            lines.iter().all(|l| l[3] == 0 && l[4] == 0 && l[1] > 0),
            "{name}"
        );
    }
    // Latencies in ns: the clat log's means sit within the run's clat range.
    let clat = &v["jobs"][0]["read"]["clat_ns"];
    let (min, max) = (clat["min"].as_u64().unwrap(), clat["max"].as_u64().unwrap());
    for l in log_lines(&dir.path().join("lg_clat.1.log"))
        .iter()
        .filter(|l| l[2] == 0)
    {
        assert!(l[1] >= min && l[1] <= max, "{l:?} outside {min}..{max}");
    }
    // The plot: every series named in the SVG.
    let svg = std::fs::read_to_string(dir.path().join("out.svg")).unwrap();
    for s in [
        "p50",
        "p90",
        "p99",
        "p99.9",
        "max",
        "read IOPS",
        "write IOPS",
    ] {
        assert!(
            svg.contains(&format!("{s}\n")) || svg.contains(&format!(">{s}<")),
            "no {s}"
        );
    }
    assert!(err.contains("nvmf-bench: plot of "), "{err}");
    // Without log_avg_msec: one latency line per I/O.
    let o = bench(dir.path())
        .args([
            "--name=one",
            "--rw=read",
            "--size=1m",
            "--runtime=0",
            "--write_lat_log",
        ])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", out(&o).1);
    let lines = log_lines(&dir.path().join("one_clat.1.log"));
    assert_eq!(lines.len(), 256);
    assert!(lines.iter().all(|l| l[2] == 0 && l[3] == 4096));
}

#[test]
fn status_interval_prints_the_report_while_the_jobs_run() {
    let _s = serial();
    let dir = tempfile::tempdir().unwrap();
    let o = bench(dir.path())
        .args(["--runtime=3", "--time_based", "--status-interval=1"])
        .output()
        .unwrap();
    let (text, err) = out(&o);
    assert!(o.status.success(), "{err}");
    assert!(
        text.matches("Run status group 0 (all jobs):").count() >= 3,
        "{text}"
    );
}

/// A child whose standard output is collected on a thread (so it never blocks).
struct Child {
    child: std::process::Child,
    stdout: std::sync::mpsc::Receiver<Vec<u8>>,
    seen: Vec<u8>,
}

impl Child {
    fn spawn(mut c: Command) -> Child {
        let mut child = c
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn nvmf-bench");
        let mut o = child.stdout.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n) = o.read(&mut buf) {
                if n == 0 || tx.send(buf[..n].to_vec()).is_err() {
                    break;
                }
            }
        });
        Child {
            child,
            stdout: rx,
            seen: Vec::new(),
        }
    }

    fn wait_for(&mut self, needle: &str, limit: Duration) {
        let end = Instant::now() + limit;
        while Instant::now() < end {
            if let Ok(b) = self.stdout.recv_timeout(Duration::from_millis(20)) {
                self.seen.extend(b);
                if String::from_utf8_lossy(&self.seen).contains(needle) {
                    return;
                }
            }
        }
        let _ = self.child.kill();
        panic!(
            "no {needle:?} within {limit:?}: {}",
            String::from_utf8_lossy(&self.seen)
        );
    }

    /// Sends SIGINT; returns the exit status, how long the exit took, stdout, stderr.
    fn interrupt(mut self, limit: Duration) -> (Option<i32>, Duration, String, String) {
        let t = Instant::now();
        // SAFETY: kill(2) on our own child.
        assert_eq!(
            unsafe { libc::kill(self.child.id() as i32, libc::SIGINT) },
            0
        );
        let status = loop {
            if let Some(s) = self.child.try_wait().unwrap() {
                break s;
            }
            if t.elapsed() > limit {
                let _ = self.child.kill();
                panic!("still running {limit:?} after SIGINT");
            }
            std::thread::sleep(Duration::from_millis(5));
        };
        let took = t.elapsed();
        while let Ok(b) = self.stdout.recv_timeout(Duration::from_secs(1)) {
            self.seen.extend(b);
        }
        let mut err = String::new();
        let _ = self.child.stderr.take().unwrap().read_to_string(&mut err);
        (
            status.code(),
            took,
            String::from_utf8_lossy(&self.seen).into_owned(),
            err,
        )
    }
}

/// The bound these tests allow for a signal to end the run: the goal is 1 s; this
/// catches the old behaviour (the 5 s connect timeout, 8 s against a dead target)
/// without measuring a loaded machine's scheduling.
const SIGNAL_LIMIT: Duration = Duration::from_secs(3);

#[test]
fn sigint_while_connecting_to_nothing_ends_at_once_with_fios_status() {
    let _s = serial();
    let dir = tempfile::tempdir().unwrap();
    let mut c = bench(dir.path());
    c.args(["--traddr=127.0.0.98", "--host-traddr=127.0.0.97"])
        .args(["--subnqn=nqn.2026-11.io.nvmf-rdma:none", "--runtime=1"]);
    let mut ch = Child::spawn(c);
    ch.wait_for("Starting 1 thread\n", Duration::from_secs(30));
    std::thread::sleep(Duration::from_millis(300));
    let (code, took, out, err) = ch.interrupt(Duration::from_secs(10));
    eprintln!("SIGINT while connecting: exit after {took:?}");
    assert_eq!(code, Some(128), "{out}\n{err}");
    assert!(out.contains("\nfio: terminating on signal 2\n"), "{out}");
    assert!(took < SIGNAL_LIMIT, "{took:?}");
}

#[test]
fn sigint_during_the_read_back_says_it_was_cut_short() {
    let _s = serial();
    let dir = tempfile::tempdir().unwrap();
    let mut c = bench(dir.path());
    // Writes for a second, then a read-back held to 1 MiB/s by --rate: long enough
    // to be interrupted in the middle.
    c.args([
        "--rw=randwrite",
        "--verify=crc32c",
        "--iodepth=4",
        "--time_based",
    ])
    .args(["--runtime=1", "--rate=1m,"]);
    let mut ch = Child::spawn(c);
    ch.wait_for("Starting 1 thread\n", Duration::from_secs(30));
    std::thread::sleep(Duration::from_millis(2500));
    let (code, took, out, err) = ch.interrupt(Duration::from_secs(10));
    eprintln!("SIGINT during the read-back: exit after {took:?}");
    assert_eq!(code, Some(128), "{out}\n{err}");
    assert!(out.contains("fio: terminating on signal 2"), "{out}");
    assert!(
        out.contains("  write: IOPS=") && out.contains("  read: IOPS="),
        "{out}"
    );
    assert!(
        err.contains("verify: error: the read-back was cut short by a signal"),
        "{err}"
    );
    assert!(took < SIGNAL_LIMIT, "{took:?}");
}
