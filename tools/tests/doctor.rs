//! `rdma-doctor` as a program, without root: the default path on loopback passes, a
//! peer's doctor answers over real UDP sockets (GID comparison and the DF-set path MTU
//! probe), and an address this host does not hold fails with the command that fixes
//! it. The planted problems that need root (veth, firewall, sysctl, memlock without
//! CAP_IPC_LOCK) are in `tests/planted.rs`.
use std::net::UdpSocket;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_rdma-doctor");

fn doctor(args: &[&str]) -> (i32, serde_json::Value) {
    let o = Command::new(BIN)
        .args(args)
        .args(["-o", "json"])
        .output()
        .unwrap();
    let v = serde_json::from_slice(&o.stdout).unwrap_or_else(|e| {
        panic!(
            "{e}: {}\n{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        )
    });
    (o.status.code().unwrap_or(-1), v)
}

fn finding<'a>(v: &'a serde_json::Value, check: &str) -> &'a serde_json::Value {
    v["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["check"] == check)
        .unwrap_or_else(|| panic!("no {check} finding in {v:#}"))
}

/// A free UDP port on `ip`.
fn free_port(ip: &str) -> u16 {
    UdpSocket::bind((ip, 0))
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

struct Listener(Child);
impl Drop for Listener {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn listen(addr: &str, port: u16) -> Listener {
    let c = Listener(
        Command::new(BIN)
            .args([
                "--listen",
                "--addr",
                addr,
                "--doctor-port",
                &port.to_string(),
            ])
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    // Until it answers.
    let s = UdpSocket::bind("127.0.0.1:0").unwrap();
    s.set_read_timeout(Some(Duration::from_millis(50))).unwrap();
    let start = Instant::now();
    let mut buf = [0u8; 4096];
    while start.elapsed() < Duration::from_secs(5) {
        let _ = s.send_to(b"RDQ1", (addr, port));
        if s.recv(&mut buf).is_ok() {
            return c;
        }
    }
    panic!("rdma-doctor --listen on {addr}:{port} did not answer");
}

#[test]
fn default_path_on_loopback_passes() {
    let (rc, v) = doctor(&["--addr", "127.0.0.2"]);
    assert_eq!(rc, 0, "{v:#}");
    assert_eq!(v["provider"], "soft");
    assert_eq!(v["roce_mtu"], 1024);
    let f = v["findings"].as_array().unwrap();
    assert!(f.iter().all(|f| f["status"] != "fail"), "{v:#}");
    assert_eq!(finding(&v, "gid")["status"], "ok");
    let gid = finding(&v, "gid")["summary"].as_str().unwrap();
    assert!(gid.contains("RoCE v2 GID ::ffff:127.0.0.2 on lo"), "{gid}");
    assert_eq!(finding(&v, "mtu")["status"], "ok");
    for check in [
        "memlock",
        "nofile",
        "rmem_max",
        "wmem_max",
        "ecn",
        "rp_filter",
        "firewall",
        "dcb",
    ] {
        let s = finding(&v, check)["status"].as_str().unwrap();
        assert!(["ok", "warn", "skip"].contains(&s), "{check}: {v:#}");
    }
    let ecn = finding(&v, "ecn")["summary"].as_str().unwrap();
    assert!(
        ecn.contains("TCP's setting") && ecn.contains("ECT(0)"),
        "{ecn}"
    );
    // Every finding that is not ok says what it means; every warn/fail has a fix.
    for f in f {
        if f["status"] == "warn" || f["status"] == "fail" {
            assert!(
                f["fix"].is_string() && f["meaning"].as_str().is_some_and(|m| !m.is_empty()),
                "{f:#}"
            );
        }
    }
    // The text form: one tagged line per finding and the count.
    let o = Command::new(BIN)
        .args(["--addr", "127.0.0.2"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(
        text.starts_with("rdma-doctor: soft provider on 127.0.0.2, RoCE MTU 1024\n"),
        "{text}"
    );
    assert!(text.contains("[ ok ] gid "), "{text}");
    assert!(text.contains(" fail, "), "{text}");
}

#[test]
fn a_peer_answers_and_the_path_mtu_is_probed_end_to_end() {
    let port = free_port("127.0.0.3");
    let _peer = listen("127.0.0.3", port);
    let p = port.to_string();
    let (rc, v) = doctor(&[
        "--addr",
        "127.0.0.2",
        "--peer",
        "127.0.0.3",
        "--doctor-port",
        &p,
        "--mtu",
        "4096",
    ]);
    assert_eq!(rc, 0, "{v:#}");
    let g = finding(&v, "peer_gid");
    assert_eq!(g["status"], "ok", "{g:#}");
    assert!(
        g["summary"].as_str().unwrap().contains("peer RoCE v2"),
        "{g:#}"
    );
    let m = finding(&v, "path_mtu");
    assert_eq!(m["status"], "ok", "{m:#}");
    assert!(
        m["summary"]
            .as_str()
            .unwrap()
            .contains("RoCE MTU 4096 crosses the path (4156 B crossed)"),
        "{m:#}"
    );

    // No doctor on the peer's port: a warning that says to start one.
    let (rc, v) = doctor(&[
        "--addr",
        "127.0.0.2",
        "--peer",
        "127.0.0.3",
        "--doctor-port",
        &free_port("127.0.0.3").to_string(),
        "--peer-timeout-ms",
        "50",
    ]);
    assert_eq!(rc, 0);
    let g = finding(&v, "peer_gid");
    assert_eq!(g["status"], "warn");
    assert!(
        g["fix"]
            .as_str()
            .unwrap()
            .contains("rdma-doctor --listen --addr 127.0.0.3"),
        "{g:#}"
    );
    assert_eq!(
        finding(&v, "path_mtu")["status"],
        "warn",
        "route MTU only: {v:#}"
    );
}

#[test]
fn an_address_this_host_does_not_hold_fails_with_the_fix() {
    let (rc, v) = doctor(&["--addr", "192.0.2.77"]);
    assert_eq!(rc, 1, "{v:#}");
    let g = finding(&v, "gid");
    assert_eq!(g["status"], "fail");
    assert!(
        g["summary"]
            .as_str()
            .unwrap()
            .contains("no interface of this host holds 192.0.2.77"),
        "{g:#}"
    );
    assert!(
        g["fix"]
            .as_str()
            .unwrap()
            .starts_with("ip addr add 192.0.2.77/24 dev "),
        "{g:#}"
    );
    // The verbs provider on a host without RDMA devices: the sysfs root lists none.
    let empty = tempfile::tempdir().unwrap();
    let (rc, v) = doctor(&[
        "--addr",
        "127.0.0.2",
        "--provider",
        "verbs",
        "--sysfs-root",
        empty.path().to_str().unwrap(),
    ]);
    assert_eq!(rc, 1);
    let g = finding(&v, "gid");
    assert!(
        g["summary"]
            .as_str()
            .unwrap()
            .starts_with("no RDMA devices"),
        "{g:#}"
    );
    assert_eq!(g["fix"], "rdma link add rxe0 type rxe netdev lo");
    // Bad arguments: exit 2, naming the fix.
    let o = Command::new(BIN).args(["--mtu", "1500"]).output().unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("256, 512, 1024, 2048 or 4096"));
}
