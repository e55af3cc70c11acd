//! What the real `nvmf-target` binary tells its operator on stderr (issue 8, item 7):
//! a host's RDMA CM connection accepted, a request refused with the reason in words,
//! the host's disconnect; as JSON lines with `--log-format json` (every line parses,
//! the events carry the host address, QPNs and queue ID) and as plain text without
//! ANSI colour codes when stderr is not a terminal.
//!
//! The host is a bare CM agent of the soft provider on 127.0.0.205 / .209 (the target
//! on 127.0.0.204 / .208): the CM exchange is all these events need.
use std::io::{BufRead, BufReader};
use std::net::IpAddr;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use crossbeam::channel::Receiver;

use nvme::RdmaCmRequest;
use transport::cm::{CmEvent, ConnId, ConnectParams};
use transport::soft::{CmAgent, DeviceConfig, SoftDevice};
use transport::verbs::Mtu;

/// A bound for each wait, against hangs (not a timing assertion).
const PATIENCE: Duration = Duration::from_secs(60);

/// The target binary with its stderr lines arriving on a channel.
struct Target {
    child: Child,
    lines: mpsc::Receiver<String>,
    seen: Vec<String>,
    _dir: tempfile::TempDir,
}

impl Target {
    fn start(addr: &str, log_format: &str) -> Target {
        let dir = tempfile::tempdir().unwrap();
        let mut child = Command::new(env!("CARGO_BIN_EXE_nvmf-target"))
            .args(["--addr", addr, "--size", "16M", "--log-format", log_format])
            .arg("--file")
            .arg(dir.path().join("ns.img"))
            .env_remove("RUST_LOG")
            .env_remove("NO_COLOR")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("nvmf-target starts");
        let stderr = child.stderr.take().unwrap();
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for l in BufReader::new(stderr).lines() {
                let Ok(l) = l else { break };
                if tx.send(l).is_err() {
                    break;
                }
            }
        });
        let mut t = Target {
            child,
            lines,
            seen: Vec::new(),
            _dir: dir,
        };
        t.wait_for("serving");
        t
    }

    /// Waits for a line containing `text` and returns it.
    fn wait_for(&mut self, text: &str) -> String {
        if let Some(l) = self.seen.iter().find(|l| l.contains(text)) {
            return l.clone();
        }
        loop {
            match self.lines.recv_timeout(PATIENCE) {
                Ok(l) => {
                    self.seen.push(l.clone());
                    if l.contains(text) {
                        return l;
                    }
                }
                Err(e) => panic!(
                    "no line with {text:?} ({e}); stderr so far: {:#?}",
                    self.seen
                ),
            }
        }
    }

    /// Stops the target (SIGTERM) and returns every stderr line.
    fn stop(mut self) -> Vec<String> {
        let pid = nix::unistd::Pid::from_raw(self.child.id() as i32);
        nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
        let status = self.child.wait().unwrap();
        assert!(status.success(), "nvmf-target exit: {status}");
        while let Ok(l) = self.lines.recv_timeout(Duration::from_secs(5)) {
            self.seen.push(l);
        }
        std::mem::take(&mut self.seen)
    }
}

impl Drop for Target {
    /// A failed test must not leave the target running (it would hold the address).
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

fn req(target: &str, qid: u16, qpn: u32) -> ConnectParams {
    let pd = RdmaCmRequest::new(qid, 32, 31);
    ConnectParams {
        dest: ip(target),
        dest_port: 4420,
        src_port: 0xC456,
        local_qpn: qpn,
        starting_psn: 0x10,
        responder_resources: 16,
        initiator_depth: 0,
        retry_count: 7,
        rnr_retry_count: 7,
        path_mtu: Mtu::Mtu1024,
        local_ack_timeout: 17,
        private_data: zerocopy::IntoBytes::as_bytes(&pd).to_vec(),
    }
}

/// Connects QP `qpn` for queue `qid` to `target`: returns the established connection
/// and its events.
fn establish(cm: &CmAgent, target: &str, qid: u16, qpn: u32) -> (ConnId, Receiver<CmEvent>) {
    let (id, events) = cm.connect(req(target, qid, qpn)).unwrap();
    match events.recv_timeout(PATIENCE) {
        Ok(CmEvent::ConnectReply { .. }) => cm.send_rtu(id).unwrap(),
        other => panic!("not accepted: {other:?}"),
    }
    (id, events)
}

#[test]
fn json_log_lines_carry_the_connection_fields() {
    const TARGET: &str = "127.0.0.204";
    const HOST: &str = "127.0.0.205";
    let mut t = Target::start(TARGET, "json");
    let dev = SoftDevice::open(DeviceConfig::new(ip(HOST))).unwrap();
    let cm = CmAgent::start(&dev).unwrap();
    let (id, events) = establish(&cm, TARGET, 0, 0x77);
    t.wait_for("RDMA CM connection accepted");
    // Queue ID 99: more than the target allows.
    let (_, refused) = cm.connect(req(TARGET, 99, 0x79)).unwrap();
    match refused.recv_timeout(PATIENCE) {
        Ok(CmEvent::Rejected { reason: 28, .. }) => {}
        other => panic!("not rejected: {other:?}"),
    }
    t.wait_for("refused an RDMA CM connection request");
    cm.disconnect(id).unwrap();
    loop {
        match events.recv_timeout(PATIENCE) {
            Ok(CmEvent::Disconnected { .. }) => break,
            Ok(CmEvent::Established { .. }) => {}
            other => panic!("not disconnected: {other:?}"),
        }
    }
    t.wait_for("queue disconnected");
    let lines = t.stop();
    let json: Vec<serde_json::Value> = lines
        .iter()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect();
    let find = |msg: &str| {
        json.iter()
            .find(|j| j["message"].as_str().is_some_and(|m| m.starts_with(msg)))
            .unwrap_or_else(|| panic!("no {msg:?} in {lines:#?}"))
    };
    let serving = find("serving");
    assert_eq!(
        (&serving["level"], &serving["traddr"]),
        (&"INFO".into(), &TARGET.into())
    );
    let words = serving["message"].as_str().unwrap();
    assert!(
        words.contains("(soft provider, RoCEv2 over UDP 127.0.0.204:4791, path MTU"),
        "{words}"
    );
    let stop = find("received SIGTERM, shutting down");
    assert_eq!(stop["level"], "INFO");
    let accepted = find("RDMA CM connection accepted");
    assert_eq!(accepted["level"], "INFO");
    assert_eq!(accepted["host_addr"], HOST);
    assert_eq!(accepted["host_qpn"], "0x77");
    assert_eq!(accepted["qid"], 0);
    assert_eq!(accepted["sq_size"], 32);
    let qpn = accepted["qpn"].as_str().expect("our QPN");
    assert!(qpn.starts_with("0x"), "{accepted}");
    let refused = find("refused an RDMA CM connection request");
    assert_eq!(refused["level"], "WARN");
    assert_eq!(
        (&refused["host_qpn"], &refused["qid"]),
        (&"0x79".into(), &99.into())
    );
    assert_eq!(refused["status"], "Invalid Queue ID");
    let reason = refused["reason"].as_str().unwrap();
    assert!(
        reason.contains("queue ID 99 is above the 64 I/O queues"),
        "{reason}"
    );
    let closed = find("queue disconnected");
    assert_eq!(closed["level"], "INFO");
    assert_eq!(
        (&closed["by"], &closed["qpn"]),
        (&"host".into(), &qpn.into())
    );
    assert_eq!(
        (&closed["host_addr"], &closed["qid"]),
        (&HOST.into(), &0.into())
    );
}

#[test]
fn text_log_has_no_colour_codes_when_not_a_terminal() {
    let mut t = Target::start("127.0.0.208", "text");
    let dev = SoftDevice::open(DeviceConfig::new(ip("127.0.0.209"))).unwrap();
    let cm = CmAgent::start(&dev).unwrap();
    let _conn = establish(&cm, "127.0.0.208", 0, 0x91);
    let line = t.wait_for("RDMA CM connection accepted");
    assert!(
        line.contains(" INFO ") && line.contains("host_addr=127.0.0.209"),
        "{line}"
    );
    assert!(line.contains("host_qpn=0x91 "), "{line}");
    let lines = t.stop();
    for l in &lines {
        assert!(!l.contains('\u{1b}'), "ANSI escape in {l:?}");
    }
}
