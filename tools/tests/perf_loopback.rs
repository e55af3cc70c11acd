//! `rdma-perf` against itself on loopback, one server and one client process per test,
//! over the soft provider (real UDP and TCP sockets): each of the six tests exits 0 on
//! both sides and prints a result row with the iterations asked for and positive
//! figures; the server of `write_bw`/`read_bw` prints the client's row, as perftest's.
//! Each test has its own addresses (127.0.N.1 and .2) and out-of-band port.
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_rdma-perf");

fn spawn(args: &[&str]) -> Child {
    Command::new(BIN)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// Waits for `c` for at most 120 s, killing it after that.
fn finish(mut c: Child, who: &str) -> Output {
    let deadline = Instant::now() + Duration::from_secs(120);
    while c.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            c.kill().ok();
            panic!("{who} did not finish in 120 s");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    c.wait_with_output().unwrap()
}

/// The numbers of the result rows (lines after the table header).
fn rows(out: &str, header: &str) -> Vec<Vec<f64>> {
    let mut it = out.lines().skip_while(|l| !l.starts_with(header));
    it.next();
    it.take_while(|l| !l.starts_with("----"))
        .map(|l| {
            l.split_whitespace()
                .map(|x| x.parse::<f64>().unwrap())
                .collect()
        })
        .collect()
}

fn pair(test: &str, net: u8, extra: &[&str]) -> (String, String) {
    let port = (18600 + u16::from(net)).to_string();
    let s_ip = format!("127.0.{net}.1");
    let c_ip = format!("127.0.{net}.2");
    let mut sa = vec![test, "--bind", &s_ip, "-p", &port];
    sa.extend_from_slice(extra);
    let server = spawn(&sa);
    let mut ca = vec![test, "--bind", &c_ip, "-p", &port];
    ca.extend_from_slice(extra);
    ca.push(&s_ip);
    let client = spawn(&ca);
    let c = finish(client, "client");
    let s = finish(server, "server");
    let (co, so) = (
        String::from_utf8_lossy(&c.stdout).into_owned(),
        String::from_utf8_lossy(&s.stdout).into_owned(),
    );
    assert!(
        c.status.success() && s.status.success(),
        "{test}: client {:?} {co} {}\nserver {:?} {so} {}",
        c.status,
        String::from_utf8_lossy(&c.stderr),
        s.status,
        String::from_utf8_lossy(&s.stderr)
    );
    (co, so)
}

const BW: &str = " #bytes     #iterations    BW peak";
const LAT: &str = " #bytes #iterations    t_min";

fn check_bw(out: &str, size: f64, iters: f64) {
    let r = rows(out, BW);
    assert_eq!(r.len(), 1, "{out}");
    assert_eq!((r[0][0], r[0][1]), (size, iters), "{out}");
    assert!(r[0][3] > 0.0 && r[0][4] > 0.0, "{out}");
}

fn check_lat(out: &str, size: f64, iters: f64) {
    let r = rows(out, LAT);
    assert_eq!(r.len(), 1, "{out}");
    let v = &r[0];
    assert_eq!((v[0], v[1]), (size, iters), "{out}");
    // min <= typical <= max, min <= avg <= max, percentiles within [min, max].
    assert!(
        v[2] > 0.0 && v[2] <= v[4] && v[4] <= v[3] && v[2] <= v[5],
        "{out}"
    );
    assert!(v[7] >= v[2] && v[8] >= v[7], "{out}");
}

#[test]
fn write_bw_loopback() {
    let (c, s) = pair("write_bw", 61, &["-s", "65536", "-n", "400"]);
    check_bw(&c, 65536.0, 400.0);
    // The passive server prints the client's row, received over TCP.
    assert_eq!(rows(&c, BW), rows(&s, BW));
    assert!(
        c.contains("RDMA_Write BW Test")
            && c.contains(" GID: 00:00:00:00:00:00:00:00:00:00:255:255:127:00:61:01")
    );
}

#[test]
fn read_bw_loopback() {
    let (c, s) = pair(
        "read_bw",
        62,
        &["-s", "65536", "-n", "300", "--report_gbits"],
    );
    check_bw(&c, 65536.0, 300.0);
    assert_eq!(rows(&c, BW), rows(&s, BW));
    assert!(c.contains("BW average[Gb/sec]") && c.contains(" OUT "));
}

#[test]
fn send_bw_loopback() {
    let (c, s) = pair("send_bw", 63, &["-s", "4096", "-n", "2000"]);
    check_bw(&c, 4096.0, 2000.0);
    // The receiver counts its own receives (no peak, as perftest's).
    check_bw(&s, 4096.0, 2000.0);
    assert_eq!(rows(&s, BW)[0][2], 0.0);
}

#[test]
fn write_bw_two_qps_and_all_sizes() {
    let (c, _) = pair("write_bw", 64, &["-q", "2", "-s", "8192", "-n", "100"]);
    check_bw(&c, 8192.0, 200.0);
    let (c, s) = pair("send_bw", 65, &["-a", "-n", "20"]);
    let r = rows(&c, BW);
    assert_eq!(r.len(), 23, "{c}");
    assert_eq!(r[22][0], 8_388_608.0);
    assert_eq!(rows(&s, BW).len(), 23, "{s}");
}

#[test]
fn duration_runs() {
    // -D 1: both sides stop on time; the server prints the client's row, no peak.
    let (c, s) = pair("write_bw", 69, &["-D", "1"]);
    let r = rows(&c, BW);
    assert_eq!(r.len(), 1, "{c}");
    assert!(r[0][1] > 0.0 && r[0][2] == 0.0 && r[0][3] > 0.0, "{c}");
    assert_eq!(rows(&s, BW), r);
    let (c, s) = pair("send_bw", 70, &["-D", "1", "-s", "4096"]);
    let (rc, rs) = (rows(&c, BW), rows(&s, BW));
    assert!(
        rc[0][1] > 0.0 && rs[0][1] > 0.0 && rs[0][1] <= rc[0][1],
        "{c}\n{s}"
    );
}

#[test]
fn write_lat_loopback() {
    let (c, s) = pair("write_lat", 66, &["-s", "64", "-n", "500"]);
    check_lat(&c, 64.0, 500.0);
    check_lat(&s, 64.0, 500.0);
}

#[test]
fn read_lat_loopback() {
    let (c, s) = pair("read_lat", 67, &["-s", "4096", "-n", "500"]);
    check_lat(&c, 4096.0, 500.0);
    // The server is passive and prints no row.
    assert!(rows(&s, LAT).is_empty(), "{s}");
}

#[test]
fn send_lat_loopback() {
    let (c, s) = pair("send_lat", 68, &["-s", "64", "-n", "500"]);
    check_lat(&c, 64.0, 500.0);
    check_lat(&s, 64.0, 500.0);
}

#[test]
fn bad_arguments_are_refused_by_name() {
    let o = Command::new(BIN).args(["write_bw"]).output().unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("--bind ADDR"));
    let o = Command::new(BIN)
        .args(["write_lat", "--bind", "127.0.0.1", "-q", "2"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    let o = Command::new(BIN)
        .args(["write_bw", "--bind", "127.0.0.1", "-s", "0"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    let o = Command::new(BIN)
        .args([
            "write_bw",
            "-d",
            "nosuchdev0",
            "-x",
            "1",
            "--sysfs-root",
            "/nonexistent",
        ])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("nosuchdev0"));
}

/// `-c UD`: `send_bw` at 64 KiB is clamped to the MTU (4096 on loopback) with
/// perftest's message; both sides print a row.
#[test]
fn ud_send_bw_and_send_lat_loopback() {
    let (c, s) = pair("send_bw", 71, &["-c", "UD", "-s", "65536", "-n", "500"]);
    assert!(
        c.contains(" Max msg size in UD is MTU 4096") && c.contains(" Changing to this MTU"),
        "{c}"
    );
    assert!(c.contains(" Connection type : UD"), "{c}");
    check_bw(&c, 4096.0, 500.0);
    let r = rows(&s, BW);
    assert!(r.len() == 1 && r[0][0] == 4096.0 && r[0][1] > 0.0, "{s}");
    let (c, s) = pair("send_lat", 72, &["-c", "UD", "-s", "64", "-n", "300"]);
    check_lat(&c, 64.0, 300.0);
    check_lat(&s, 64.0, 300.0);
}

/// `-c UC`: `write_bw` (the passive server prints the client's row), `send_bw` and
/// `write_lat`.
#[test]
fn uc_write_bw_send_bw_and_write_lat_loopback() {
    let (c, s) = pair("write_bw", 73, &["-c", "UC", "-s", "65536", "-n", "300"]);
    assert!(c.contains(" Connection type : UC"), "{c}");
    check_bw(&c, 65536.0, 300.0);
    assert_eq!(rows(&c, BW), rows(&s, BW));
    let (c, s) = pair("send_bw", 74, &["-c", "UC", "-s", "4096", "-n", "500"]);
    check_bw(&c, 4096.0, 500.0);
    assert!(rows(&s, BW)[0][1] > 0.0, "{s}");
    let (c, s) = pair("write_lat", 75, &["-c", "UC", "-s", "64", "-n", "300"]);
    check_lat(&c, 64.0, 300.0);
    check_lat(&s, 64.0, 300.0);
}

/// perftest's refusals of `-c`: UC without READ, UD for SEND only, RC/UC/UD only.
#[test]
fn connection_types_are_refused_as_perftest_does() {
    for (test, c, msg) in [
        (
            "read_bw",
            "UC",
            " UC connection not possible in READ/ATOMIC verbs",
        ),
        (
            "read_lat",
            "UC",
            " UC connection not possible in READ/ATOMIC verbs",
        ),
        (
            "write_bw",
            "UD",
            " UD connection only possible in SEND verb",
        ),
        ("read_bw", "UD", " UD connection only possible in SEND verb"),
        (
            "send_bw",
            "XC",
            " Invalid Connection type . please choose from {RC,UC,UD}",
        ),
    ] {
        let o = Command::new(BIN)
            .args([test, "--bind", "127.0.0.1", "-c", c])
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(2), "{test} -c {c}");
        assert!(
            String::from_utf8_lossy(&o.stderr).contains(msg),
            "{test} -c {c}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
    }
}
