//! `nvmf` (the built binary) against our target, started in-process on loopback with a
//! real sparse file through io_uring: discovery, Identify fields equal to what the
//! library's Identify returns, write/read/compare, DSM deallocate and Write Zeroes
//! read back as zeros, flush, SMART counters that move with the I/O, `connect` held
//! and seen by `list`/`list-subsys` until `disconnect`, and bad input answered with a
//! message and exit status 1 (nvme-cli's).
//!
//! Each test has its own target address (127.0.7.N) and host addresses; they run one
//! at a time (each brings busy-polling threads on a 2-core machine).
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{IpAddr, Ipv4Addr};
use std::process::{Command, Output, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use nvmf_target::config::TargetConfig;
use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_nvmf");
const NQN: &str = "nqn.2026-11.io.nvmf-rdma:cli";
static SERIAL: Mutex<()> = Mutex::new(());

struct Target {
    handle: nvmf_target::TargetHandle,
    ip: String,
    _dir: tempfile::TempDir,
    state: tempfile::TempDir,
    _serial: std::sync::MutexGuard<'static, ()>,
}

fn target(net: u8) -> Target {
    let serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let ip = IpAddr::V4(Ipv4Addr::new(127, 0, 7, net));
    let cfg = TargetConfig::default_for(ip, NQN, &dir.path().join("ns1.img"), 8 << 20);
    let handle = nvmf_target::start(&cfg).expect("target starts");
    Target {
        handle,
        ip: ip.to_string(),
        _dir: dir,
        state: tempfile::tempdir().unwrap(),
        _serial: serial,
    }
}

impl Target {
    /// `nvmf ARGS -t rdma -a TARGET -w HOST` with `stdin`; NQN appended when `nqn`.
    fn run(&self, host: u8, args: &[&str], nqn: bool, stdin: &[u8]) -> Output {
        let mut a: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        a.extend(["-t", "rdma", "-a", &self.ip, "-s", "4420"].map(String::from));
        a.extend(["-w".into(), format!("127.0.8.{host}")]);
        if nqn {
            a.extend(["-n".into(), NQN.into()]);
        }
        run_bin(&a, stdin, self.state.path())
    }
}

fn run_bin(args: &[String], stdin: &[u8], state: &std::path::Path) -> Output {
    let mut c = Command::new(BIN)
        .args(args)
        .env("NVMF_STATE_DIR", state)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    c.stdin.take().unwrap().write_all(stdin).unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while c.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            c.kill().ok();
            panic!("nvmf {args:?} did not finish in 60 s");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    c.wait_with_output().unwrap()
}

fn ok(o: &Output, what: &str) -> String {
    assert!(
        o.status.success(),
        "{what}: exit {:?}\nstdout {}\nstderr {}",
        o.status.code(),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn json_of(o: &Output, what: &str) -> Value {
    serde_json::from_str(&ok(o, what)).unwrap_or_else(|e| panic!("{what}: not JSON: {e}"))
}

fn failed(o: &Output, what: &str) -> String {
    assert_eq!(
        o.status.code(),
        Some(1),
        "{what}: nvme-cli exits 1 on failure; stdout {} stderr {}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    let e = String::from_utf8_lossy(&o.stderr).into_owned();
    assert!(!e.contains("panicked"), "{what}: panicked: {e}");
    e
}

fn pattern(len: usize, tag: u8) -> Vec<u8> {
    (0..len).map(|i| (i * 7 + i / 512) as u8 ^ tag).collect()
}

#[test]
fn discover_and_identify_match_the_library() {
    let t = target(1);
    let d = json_of(
        &t.run(1, &["discover", "-o", "json"], false, b""),
        "discover",
    );
    let recs = d["records"].as_array().expect("records");
    let ours = recs
        .iter()
        .find(|r| r["subnqn"] == NQN)
        .unwrap_or_else(|| panic!("discover lists {NQN}: {d}"));
    assert_eq!(ours["trtype"], "rdma");
    assert_eq!(ours["adrfam"], "ipv4");
    assert_eq!(ours["subtype"], "nvme subsystem");
    assert_eq!(ours["traddr"], t.ip.as_str());
    assert_eq!(ours["trsvcid"], "4420");
    assert_eq!(ours["rdma_qptype"], "connected");
    assert_eq!(ours["rdma_cms"], "rdma-cm");
    assert!(d["genctr"].is_u64());

    // What the library's Identify returns, from a host of the test's own.
    let rt = tokio::runtime::Runtime::new().unwrap();
    let (info, ns) = rt.block_on(async {
        let mut o = nvmf_initiator::HostOptions::new(t.handle.listen_addr(), NQN);
        o.local_ip = Some("127.0.8.2".parse().unwrap());
        let h = nvmf_initiator::Host::connect(o)
            .await
            .expect("library host");
        let info = h.identify_controller().await.unwrap();
        let ns = h.identify_namespace(1).await.unwrap();
        h.disconnect().await.unwrap();
        (info, ns)
    });
    let c = json_of(&t.run(1, &["id-ctrl", "-o", "json"], true, b""), "id-ctrl");
    assert_eq!(c["vid"], info.vid);
    assert_eq!(c["sn"].as_str().unwrap().trim_end(), info.serial_number);
    assert_eq!(c["mn"].as_str().unwrap().trim_end(), info.model_number);
    assert_eq!(c["fr"].as_str().unwrap().trim_end(), info.firmware_revision);
    assert_eq!(c["cmic"], info.cmic);
    assert_eq!(c["mdts"], info.mdts);
    assert_eq!(c["ver"], info.ver);
    assert_eq!(c["oaes"], info.oaes);
    assert_eq!(c["ctratt"], info.ctratt);
    assert_eq!(c["aerl"], info.aerl);
    assert_eq!(c["kas"], info.kas);
    assert_eq!(c["anacap"], info.anacap);
    assert_eq!(c["nanagrpid"], info.nanagrpid);
    assert_eq!(c["maxcmd"], info.maxcmd);
    assert_eq!(c["nn"], info.nn);
    assert_eq!(c["oncs"], info.oncs);
    assert_eq!(c["vwc"], info.vwc);
    assert_eq!(c["sgls"], info.sgls);
    assert_eq!(c["subnqn"], info.subnqn.as_str());
    assert_eq!(c["ioccsz"], info.ioccsz);
    assert_eq!(c["iorcsz"], info.iorcsz);
    assert_eq!(c["icdoff"], info.icdoff);
    assert_eq!(c["msdbd"], info.msdbd);
    // Dynamic controller model: each connection has its own controller ID.
    assert!(c["cntlid"].as_u64().unwrap() > 0);
    assert_eq!(
        c["psds"].as_array().unwrap().len(),
        c["npss"].as_u64().unwrap() as usize + 1
    );

    let n = json_of(&t.run(1, &["id-ns", "-o", "json"], true, b""), "id-ns");
    assert_eq!(n["nsze"], ns.nsze);
    assert_eq!(n["ncap"], ns.ncap);
    assert_eq!(n["nmic"], ns.nmic);
    assert_eq!(n["anagrpid"], ns.anagrpid);
    assert_eq!(n["flbas"], ns.flbas);
    let lbaf = usize::from(ns.flbas & 0xF);
    assert_eq!(
        1u64 << n["lbafs"][lbaf]["ds"].as_u64().unwrap(),
        u64::from(ns.block_size)
    );
    assert_eq!(
        n["nsze"].as_u64().unwrap() * u64::from(ns.block_size),
        8 << 20
    );
    // The normal output names the fields too.
    let text = ok(&t.run(1, &["id-ctrl"], true, b""), "id-ctrl text");
    assert!(text.contains("subnqn") && text.contains(NQN), "{text}");
}

#[test]
fn io_commands_round_trip_and_move_the_smart_counters() {
    let t = target(2);
    let dir = tempfile::tempdir().unwrap();
    let smart0 = json_of(
        &t.run(3, &["smart-log", "-o", "json"], true, b""),
        "smart-log",
    );

    // write from a file, read to stdout: the same bytes.
    let data = pattern(16 * 512, 0x5A);
    let file = dir.path().join("in.bin");
    std::fs::write(&file, &data).unwrap();
    let f = file.to_str().unwrap();
    let w = t.run(
        3,
        &["write", "--start-block", "8", "-c", "15", "-d", f],
        true,
        b"",
    );
    ok(&w, "write");
    assert!(String::from_utf8_lossy(&w.stderr).contains("write: Success"));
    let r = t.run(3, &["read", "--start-block", "8", "-c", "15"], true, b"");
    ok(&r, "read");
    assert_eq!(r.stdout, data, "read returns what write wrote");
    // write from stdin, read to a file.
    let d2 = pattern(512, 0x33);
    ok(
        &t.run(
            3,
            &["write", "--start-block", "100", "-z", "512"],
            true,
            &d2,
        ),
        "write stdin",
    );
    let out = dir.path().join("out.bin");
    let o = out.to_str().unwrap();
    ok(
        &t.run(
            3,
            &["read", "--start-block", "100", "-z", "512", "-d", o],
            true,
            b"",
        ),
        "read -d",
    );
    assert_eq!(std::fs::read(&out).unwrap(), d2);

    // compare: matching data succeeds, different data is a Compare Failure (exit 1).
    let c = t.run(
        3,
        &["compare", "--start-block", "8", "-c", "15", "-d", f],
        true,
        b"",
    );
    ok(&c, "compare (same)");
    assert!(String::from_utf8_lossy(&c.stderr).contains("compare: Success"));
    let mut other = data.clone();
    other[700] ^= 1;
    let c = t.run(
        3,
        &["compare", "--start-block", "8", "-c", "15"],
        true,
        &other,
    );
    let e = failed(&c, "compare (different)");
    assert!(
        e.contains("NVMe status: Compare Failure: The command failed due to a miscompare during a Compare command(0x"),
        "{e}"
    );

    // dsm --ad, then the blocks read as zeros (the target punches a hole).
    ok(
        &t.run(3, &["dsm", "--ad", "--slbs", "8", "-b", "8"], true, b""),
        "dsm --ad",
    );
    let r = t.run(3, &["read", "--start-block", "8", "-c", "15"], true, b"");
    let back = r.stdout.clone();
    ok(&r, "read after dsm");
    assert!(
        back[..8 * 512].iter().all(|&b| b == 0),
        "deallocated blocks read as zeros"
    );
    assert_eq!(
        &back[8 * 512..],
        &data[8 * 512..],
        "blocks outside the range kept"
    );

    // write-zeroes, flush.
    ok(
        &t.run(
            3,
            &["write-zeroes", "--start-block", "16", "-c", "3"],
            true,
            b"",
        ),
        "write-zeroes",
    );
    let r = t.run(3, &["read", "--start-block", "16", "-c", "7"], true, b"");
    let back = r.stdout.clone();
    ok(&r, "read after write-zeroes");
    assert!(back[..4 * 512].iter().all(|&b| b == 0), "zeroed blocks");
    assert_eq!(
        &back[4 * 512..],
        &data[12 * 512..],
        "blocks after them kept"
    );
    ok(&t.run(3, &["flush"], true, b""), "flush");

    // SMART: commands counted by the target between the two reads of the log.
    let smart1 = json_of(
        &t.run(3, &["smart-log", "-o", "json"], true, b""),
        "smart-log",
    );
    let n = |v: &Value, k: &str| v[k].as_u64().unwrap_or_else(|| panic!("{k} in {v}"));
    // Reads: 2 reads of 16 blocks, 1 of 1, 1 of 8 + compare (counted as reads).
    assert!(
        n(&smart1, "host_read_commands") >= n(&smart0, "host_read_commands") + 5,
        "{smart0} -> {smart1}"
    );
    assert!(n(&smart1, "host_write_commands") >= n(&smart0, "host_write_commands") + 2);
    assert!(n(&smart1, "data_units_written") > n(&smart0, "data_units_written"));
    assert!(n(&smart1, "data_units_read") > n(&smart0, "data_units_read"));

    // get-feature: Number of Queues; get-log: raw SMART bytes, 512 of them.
    let g = ok(
        &t.run(3, &["get-feature", "-f", "7"], true, b""),
        "get-feature",
    );
    assert!(
        g.starts_with("get-feature:0x07 (Number of Queues), Current value:0x"),
        "{g}"
    );
    let l = t.run(3, &["get-log", "-i", "2", "-l", "512", "-b"], true, b"");
    ok(&l, "get-log -b");
    assert_eq!(l.stdout.len(), 512);
    let el = json_of(
        &t.run(3, &["error-log", "-o", "json", "-e", "4"], true, b""),
        "error-log",
    );
    assert_eq!(el["errors"].as_array().unwrap().len(), 4);
}

#[test]
fn connect_holds_until_disconnect_and_list_sees_it() {
    let t = target(3);
    let mut args: Vec<String> = [
        "connect",
        "-t",
        "rdma",
        "-a",
        &t.ip,
        "-w",
        "127.0.8.5",
        "-n",
        NQN,
        "-o",
        "json",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    args.push("-q".into());
    args.push("nqn.2014-08.org.nvmexpress:uuid:0b5c5d7e-1111-4222-8333-944455556666".into());
    let mut holder = Command::new(BIN)
        .args(&args)
        .env("NVMF_STATE_DIR", t.state.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The controller and its namespaces, as one JSON object.
    let mut out = BufReader::new(holder.stdout.take().unwrap());
    let mut text = String::new();
    loop {
        let mut line = String::new();
        if out.read_line(&mut line).unwrap() == 0 {
            let mut err = String::new();
            holder
                .stderr
                .take()
                .unwrap()
                .read_to_string(&mut err)
                .unwrap();
            panic!(
                "connect printed {text:?} and exited: {:?} {err}",
                holder.wait()
            );
        }
        text.push_str(&line);
        if line == "}\n" {
            break;
        }
    }
    let c: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(c["subnqn"], NQN);
    assert_eq!(c["namespaces"][0]["nsid"], 1);
    assert_eq!(c["namespaces"][0]["nsze"], (8 << 20) / 512);
    let pid = holder.id();
    assert_eq!(c["pid"], pid);

    let l = json_of(
        &run_bin(
            &["list".into(), "-o".into(), "json".into()],
            b"",
            t.state.path(),
        ),
        "list",
    );
    let dev = &l["Devices"][0];
    assert_eq!(dev["DevicePath"], format!("nvmf-{pid}n1"));
    assert_eq!(dev["NameSpace"], 1);
    assert_eq!(dev["SectorSize"], 512);
    let s = json_of(
        &run_bin(
            &["list-subsys".into(), "-o".into(), "json".into()],
            b"",
            t.state.path(),
        ),
        "list-subsys",
    );
    let sub = &s[0]["Subsystems"][0];
    assert_eq!(sub["NQN"], NQN);
    let path = &sub["Paths"][0];
    assert_eq!(path["Transport"], "rdma");
    assert_eq!(path["State"], "live");
    assert!(path["Address"]
        .as_str()
        .unwrap()
        .contains(&format!("traddr={}", t.ip)));
    // Our target reports ANA (CMIC bit 3): the path's state is read from its ANA log.
    assert_eq!(path["ANAState"], "optimized", "{s}");

    // Another command from the holder's address is refused with the reason.
    let busy = t.run(5, &["id-ctrl"], true, b"");
    let e = failed(&busy, "id-ctrl from a held address");
    assert!(e.contains("is held by `nvmf connect`"), "{e}");

    let d = run_bin(
        &["disconnect".into(), "-n".into(), NQN.into()],
        b"",
        t.state.path(),
    );
    assert_eq!(
        ok(&d, "disconnect"),
        format!("NQN:{NQN} disconnected 1 controller(s)\n")
    );
    let st = holder.wait().unwrap();
    let mut err = String::new();
    holder
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    assert!(
        st.success(),
        "the holder disconnects cleanly on SIGTERM: {st:?} {err}"
    );
    let l = json_of(
        &run_bin(
            &["list".into(), "-o".into(), "json".into()],
            b"",
            t.state.path(),
        ),
        "list",
    );
    assert_eq!(l["Devices"].as_array().unwrap().len(), 0);
}

#[test]
fn bad_input_is_answered_not_panicked_on() {
    let t = target(4);
    // No target at that address: the connection request is not answered.
    let o = run_bin(
        &["id-ctrl", "-a", "127.0.7.250", "-w", "127.0.8.7", "-n", NQN].map(String::from),
        b"",
        t.state.path(),
    );
    let e = failed(&o, "no target");
    assert!(
        e.contains("no answer from 127.0.7.250:4420") && e.contains("is a target running there"),
        "{e}"
    );
    // Not an NQN.
    let e = failed(
        &t.run(7, &["id-ctrl", "-n", "disk1"], false, b""),
        "bad NQN",
    );
    assert!(
        e.contains("\"disk1\" is not an NQN") && e.contains("nvmf discover"),
        "{e}"
    );
    // An NQN the target does not serve: the Connect is refused with its status.
    let e = failed(
        &t.run(
            7,
            &["id-ctrl", "-n", "nqn.2026-11.io.example:nothing"],
            false,
            b"",
        ),
        "unknown subsystem",
    );
    assert!(e.contains("NVMe status: Connect Invalid Parameters"), "{e}");
    // A flag nvme-cli does not have, a transport we do not speak, no address.
    let e = failed(&t.run(7, &["id-ctrl", "--bogus"], true, b""), "bad flag");
    assert!(e.contains("--bogus"), "{e}");
    let e = failed(
        &run_bin(
            &["id-ctrl", "-t", "tcp", "-a", &t.ip, "-n", NQN].map(String::from),
            b"",
            t.state.path(),
        ),
        "-t tcp",
    );
    assert!(e.contains("NVMe/RDMA only"), "{e}");
    let e = failed(&run_bin(&["id-ctrl".into()], b"", t.state.path()), "no -a");
    assert!(e.contains("-a TRADDR missing"), "{e}");
    let e = failed(
        &run_bin(
            &["id-ctrl", "-a", "target.example", "-n", NQN].map(String::from),
            b"",
            t.state.path(),
        ),
        "host name",
    );
    assert!(e.contains("is not an IP address"), "{e}");
    // Beyond the namespace, an inactive namespace, a missing data file.
    let e = failed(
        &t.run(7, &["read", "--start-block", "16383", "-c", "1"], true, b""),
        "read past the end",
    );
    assert!(e.contains("beyond namespace 1's 16384 blocks"), "{e}");
    let e = failed(
        &t.run(7, &["id-ns", "--namespace-id", "9"], true, b""),
        "inactive ns",
    );
    assert!(e.contains("namespace 9"), "{e}");
    let e = failed(
        &t.run(7, &["write", "-d", "/nonexistent/data.bin"], true, b""),
        "missing file",
    );
    assert!(e.contains("/nonexistent/data.bin: no such file"), "{e}");
    // A status from the controller: a log page the target does not have.
    let e = failed(
        &t.run(7, &["get-log", "-i", "0xc0", "-l", "512"], true, b""),
        "bad log",
    );
    assert!(e.starts_with("NVMe status: "), "{e}");
}

/// `connect --ublk` on a kernel without the ublk driver (this machine's: no
/// /dev/ublk-control) exits 1 before connecting, naming `modprobe ublk_drv` and the
/// kernel it needs. The ublk path itself runs in Linux 6.12 in QEMU (the interop
/// matrix's `dhchap` group, cells `ublk/*`).
#[test]
fn connect_ublk_without_the_driver_says_how_to_load_it() {
    assert!(
        !std::path::Path::new("/dev/ublk-control").exists(),
        "this test checks the answer of a kernel without ublk: /dev/ublk-control exists \
         here; run it where ublk_drv is not loaded (modprobe -r ublk_drv)"
    );
    let state = tempfile::tempdir().unwrap();
    let args: Vec<String> = [
        "connect",
        "--ublk",
        "-t",
        "rdma",
        "-a",
        "127.0.7.9",
        "-w",
        "127.0.8.9",
        "-n",
        NQN,
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let t0 = Instant::now();
    let o = run_bin(&args, b"", state.path());
    let e = failed(&o, "connect --ublk without ublk_drv");
    assert!(e.contains("modprobe ublk_drv"), "{e}");
    assert!(
        e.contains("Linux >= 6.0") && e.contains("CONFIG_BLK_DEV_UBLK"),
        "{e}"
    );
    // Refused before connecting: no target answers at 127.0.7.9, and no wait for one.
    assert!(t0.elapsed() < Duration::from_secs(10), "{:?}", t0.elapsed());
    // The ublk flags need --ublk.
    let o = run_bin(
        &[
            "connect".into(),
            "--ublk-depth".into(),
            "8".into(),
            "-a".into(),
            "127.0.7.9".into(),
        ],
        b"",
        state.path(),
    );
    let e = failed(&o, "--ublk-depth without --ublk");
    assert!(e.contains("--ublk"), "{e}");
}

/// `connect-all`: the Discovery log of our target, then every NVM subsystem it lists
/// connected (one local address each), printed as one JSON document with an entry per
/// controller, held until SIGTERM, then disconnected (exit 0).
#[test]
fn connect_all_connects_every_subsystem_of_the_discovery_log() {
    let serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let ip = IpAddr::V4(Ipv4Addr::new(127, 0, 7, 10));
    let nqn2 = "nqn.2026-11.io.nvmf-rdma:cli-second";
    let mut cfg = TargetConfig::default_for(ip, NQN, &dir.path().join("ns1.img"), 8 << 20);
    let mut second =
        TargetConfig::default_for(ip, nqn2, &dir.path().join("ns2.img"), 4 << 20).subsystems;
    cfg.subsystems.append(&mut second);
    let handle = nvmf_target::start(&cfg).expect("target starts");
    let state = tempfile::tempdir().unwrap();
    let mut holder = Command::new(BIN)
        .args([
            "connect-all",
            "-t",
            "rdma",
            "-a",
            "127.0.7.10",
            "-w",
            "127.0.8.10",
            "--host-traddr-more",
            "127.0.8.11",
            "-o",
            "json",
        ])
        .env("NVMF_STATE_DIR", state.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(holder.stdout.take().unwrap());
    let mut text = String::new();
    loop {
        let mut line = String::new();
        if out.read_line(&mut line).unwrap() == 0 {
            let mut err = String::new();
            holder
                .stderr
                .take()
                .unwrap()
                .read_to_string(&mut err)
                .unwrap();
            panic!(
                "connect-all printed {text:?} and exited: {:?} {err}",
                holder.wait()
            );
        }
        text.push_str(&line);
        if line == "]\n" {
            break;
        }
    }
    let v: Value = serde_json::from_str(&text).unwrap();
    let ctrls = v.as_array().expect("one entry per controller");
    assert_eq!(ctrls.len(), 2, "{text}");
    let mut nqns: Vec<&str> = ctrls
        .iter()
        .map(|c| c["subnqn"].as_str().unwrap())
        .collect();
    nqns.sort();
    assert_eq!(nqns, [NQN, nqn2]);
    for c in ctrls {
        assert_eq!(c["traddr"], "127.0.7.10");
        assert_eq!(c["trsvcid"], "4420");
        assert_eq!(c["namespaces"][0]["nsid"], 1);
        let want = if c["subnqn"] == NQN { 8 << 20 } else { 4 << 20 } / 512;
        assert_eq!(c["namespaces"][0]["nsze"], want, "{c}");
    }
    let mut hosts: Vec<&str> = ctrls
        .iter()
        .map(|c| c["host_traddr"].as_str().unwrap())
        .collect();
    hosts.sort();
    assert_eq!(
        hosts,
        ["127.0.8.10", "127.0.8.11"],
        "one local address per subsystem"
    );
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(holder.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let st = holder.wait().unwrap();
    let mut err = String::new();
    holder
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    assert!(
        st.success(),
        "connect-all disconnects on SIGTERM: {st:?} {err}"
    );
    handle.shutdown();
    drop(serial);
}
