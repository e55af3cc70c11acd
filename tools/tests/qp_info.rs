//! `rdma-info` reading another process's soft-provider QPs: an `rdma-perf write_bw`
//! server and client (two real processes, soft provider, loopback 127.0.77.1 and .2)
//! run for a few seconds while `rdma-info -o json` reads their info sockets; each
//! side's RC QP is listed in RTS with a RoCEv2 UDP source port in 0xC000..=0xFFFF and
//! the other side's QPN as its dest QPN, with the device counters moving. Stale socket
//! files (a refused socket whose PID is gone, one whose PID is alive) are skipped
//! without a word, the first removed. The sockets live in a temporary directory
//! (`XDG_RUNTIME_DIR` of the children, `--soft-dir` of rdma-info), so other soft
//! devices of this host stay out of it.
use std::os::unix::net::UnixListener;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

const PERF: &str = env!("CARGO_BIN_EXE_rdma-perf");
const INFO: &str = env!("CARGO_BIN_EXE_rdma-info");

fn perf(dir: &Path, args: &[&str]) -> Child {
    Command::new(PERF)
        .args(args)
        .env("XDG_RUNTIME_DIR", dir)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// `rdma-info -o json --provider soft` over `dir`: its JSON and its stderr.
fn info_json(dir: &Path) -> (Value, String) {
    let out = Command::new(INFO)
        .args(["-o", "json", "--provider", "soft", "--soft-dir"])
        .arg(dir.join("soft-roce"))
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    (
        serde_json::from_slice(&out.stdout).unwrap(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A socket file nobody listens on (its listener closed), named for `pid`.
fn stale_socket(dir: &Path, pid: u32) -> std::path::PathBuf {
    let p = dir.join(format!("127.0.77.9-{pid}-0.sock"));
    drop(UnixListener::bind(&p).unwrap());
    p
}

struct Kill(Vec<Child>);
impl Drop for Kill {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

#[test]
fn rdma_info_lists_another_processes_qps_with_udp_sports() {
    let tmp = tempfile::tempdir().unwrap();
    let socks = tmp.path().join("soft-roce");
    std::fs::create_dir_all(&socks).unwrap();
    // A PID that is gone: a child that exited.
    let mut gone = Command::new("true").spawn().unwrap();
    gone.wait().unwrap();
    let dead = stale_socket(&socks, gone.id());
    let alive = stale_socket(&socks, std::process::id());

    let port = "18777";
    let server = perf(
        tmp.path(),
        &["write_bw", "--bind", "127.0.77.1", "-p", port, "-D", "6"],
    );
    std::thread::sleep(Duration::from_millis(300));
    let client = perf(
        tmp.path(),
        &[
            "write_bw",
            "--bind",
            "127.0.77.2",
            "-p",
            port,
            "-D",
            "6",
            "127.0.77.1",
        ],
    );
    let mut kids = Kill(vec![server, client]);

    // Until both sides' QPs are in RTS (connection bring-up takes a moment).
    let deadline = Instant::now() + Duration::from_secs(15);
    let (first, stderr) = loop {
        let (j, e) = info_json(tmp.path());
        let rts = j["soft_live"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|d| d["qps"].as_array().unwrap().iter())
            .filter(|q| q["state"] == "RTS")
            .count();
        if rts >= 2 {
            break (j, e);
        }
        for c in &mut kids.0 {
            if let Some(st) = c.try_wait().unwrap() {
                panic!("rdma-perf exited early ({st}): {j}");
            }
        }
        assert!(Instant::now() < deadline, "no two QPs in RTS in 15 s: {j}");
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(stderr, "", "stale sockets are skipped without a word");
    let live = first["soft_live"].as_array().unwrap();
    assert_eq!(live.len(), 2, "{first}");
    // One device of an `rdma-info -o json` snapshot, by its address.
    let by_ip = |j: &Value, ip: &str| -> Value {
        let live = j["soft_live"].as_array().unwrap();
        live.iter().find(|d| d["ip"] == ip).expect(ip).clone()
    };
    let (s, c) = (by_ip(&first, "127.0.77.1"), by_ip(&first, "127.0.77.2"));
    let pids: Vec<u64> = kids.0.iter().map(|k| u64::from(k.id())).collect();
    assert_eq!(s["pid"].as_u64().unwrap(), pids[0]);
    assert_eq!(c["pid"].as_u64().unwrap(), pids[1]);
    assert_eq!(s["process"], "rdma-perf");
    let rc = |d: &Value| -> Value {
        let qps: Vec<&Value> = d["qps"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|q| q["type"] == "RC")
            .collect();
        assert_eq!(qps.len(), 1, "one RC QP per side: {d}");
        qps[0].clone()
    };
    let (sq, cq) = (rc(&s), rc(&c));
    for (q, me, peer, other) in [
        (&sq, "127.0.77.1", "127.0.77.2", &cq),
        (&cq, "127.0.77.2", "127.0.77.1", &sq),
    ] {
        assert_eq!(q["state"], "RTS", "{q}");
        assert_eq!(q["dest_qpn"], other["qpn"], "{q} vs {other}");
        assert_eq!(
            (q["local_ip"].as_str(), q["remote_ip"].as_str()),
            (Some(me), Some(peer))
        );
        let sport = q["udp_sport"].as_u64().unwrap();
        assert!((0xC000..=0xFFFF).contains(&sport), "{q}");
        assert!(q["mtu"].as_u64().unwrap() >= 256, "{q}");
    }

    // The counters are there and move while the test runs.
    let counter = |d: &Value, name: &str| -> u64 {
        d["counters"]
            .as_array()
            .unwrap()
            .iter()
            .find(|x| x["name"] == name)
            .unwrap_or_else(|| panic!("no {name}: {d}"))["value"]
            .as_u64()
            .unwrap()
    };
    // The first snapshot can come between RTS and the first data packet: read again
    // until both have moved (bounded).
    let sent0 = counter(&c, "sent_pkts");
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        std::thread::sleep(Duration::from_millis(200));
        let (again, _) = info_json(tmp.path());
        let (s2, c2) = (by_ip(&again, "127.0.77.1"), by_ip(&again, "127.0.77.2"));
        if counter(&c2, "sent_pkts") > sent0 && counter(&s2, "rcvd_pkts") > 0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "counters did not move in 10 s: {c} then {c2}; server {s2}"
        );
    }

    // The text table shows the same QPs with their sports.
    let t = Command::new(INFO)
        .args(["--qps", "--soft-dir"])
        .arg(&socks)
        .output()
        .unwrap();
    let t = String::from_utf8_lossy(&t.stdout);
    let sport = sq["udp_sport"].as_u64().unwrap();
    assert!(
        t.lines().any(|l| l.starts_with("link soft/127.0.77.1 ")
            && l.contains(&format!(" lqpn {} type RC state RTS ", sq["qpn"]))
            && l.contains(&format!(" sport {sport} "))),
        "{t}"
    );

    assert!(!dead.exists(), "a dead PID's refused socket is removed");
    assert!(alive.exists(), "a live PID's socket is left alone");

    // Both exit 0 and remove their sockets.
    for (i, mut k) in std::mem::take(&mut kids.0).into_iter().enumerate() {
        let st = k.wait().unwrap();
        let mut e = String::new();
        use std::io::Read as _;
        k.stderr.take().unwrap().read_to_string(&mut e).unwrap();
        assert!(st.success(), "rdma-perf {i}: {st} {e}");
    }
    let left: Vec<_> = std::fs::read_dir(&socks)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .filter(|n| {
            n.to_string_lossy().starts_with("127.0.77.1-")
                || n.to_string_lossy().starts_with("127.0.77.2-")
        })
        .collect();
    assert!(left.is_empty(), "sockets left after exit: {left:?}");
}
