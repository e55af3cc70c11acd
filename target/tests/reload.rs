//! The real `nvmf-target` binary reconfigured live (issue 16 item 2): SIGHUP reads the
//! --config file again and a connected host sees namespace 2 appear; a file that does
//! not parse changes nothing, and `nvmf-target reload --control-socket` exits 1 with
//! the parse error; the reload CLI removes namespace 2 and prints what changed; the
//! daemon then stops cleanly on SIGTERM. A second listen address added by SIGHUP
//! serves a host; the reload CLI removes it again and that host's queue is
//! disconnected.
//!
//! The targets on 127.0.0.181 and .185 (and .183), the host library on .182 (and .184).
use std::io::{BufRead, BufReader};
use std::net::{IpAddr, SocketAddr};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use nvme::Sqe;
use nvmf_initiator::queue::{NvmeRdmaQueue, QueueCompletion};
use nvmf_initiator::{DataDir, HostOptions, SyncHost};

/// A bound for each wait, against hangs (not a timing assertion).
const PATIENCE: Duration = Duration::from_secs(60);
const NQN: &str = "nqn.2026-12.io.nvmf-rdma:reload-cli";
const ADDR: &str = "127.0.0.181";

fn config(with_ns2: bool) -> String {
    let mut s = format!(
        "[[listen]]\naddr = \"{ADDR}\"\n\n[[subsystems]]\nnqn = \"{NQN}\"\n\n\
         [[subsystems.namespaces]]\nnsid = 1\nbackend = \"ram\"\nsize = \"4M\"\n"
    );
    if with_ns2 {
        s.push_str("\n[[subsystems.namespaces]]\nnsid = 2\nbackend = \"ram\"\nsize = \"4M\"\n");
    }
    s
}

/// The daemon with its stderr lines arriving on a channel.
struct Daemon {
    child: Child,
    lines: mpsc::Receiver<String>,
}

impl Daemon {
    fn start(cfg: &Path, socket: &Path) -> Daemon {
        let mut child = Command::new(env!("CARGO_BIN_EXE_nvmf-target"))
            .arg("--config")
            .arg(cfg)
            .arg("--control-socket")
            .arg(socket)
            .env_remove("RUST_LOG")
            .env("NO_COLOR", "1")
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
        let mut d = Daemon { child, lines };
        d.wait_for("control socket");
        d
    }

    /// Waits for a line containing `text` and returns it.
    fn wait_for(&mut self, text: &str) -> String {
        let deadline = Instant::now() + PATIENCE;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(l) if l.contains(text) => return l,
                Ok(_) => {}
                Err(_) => panic!("no line with {text:?} from nvmf-target"),
            }
        }
    }

    fn signal(&self, sig: nix::sys::signal::Signal) {
        let pid = nix::unistd::Pid::from_raw(self.child.id() as i32);
        nix::sys::signal::kill(pid, sig).expect("signal");
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn active(admin: &mut NvmeRdmaQueue) -> Vec<u32> {
    let sqe = Sqe::identify(0, nvme::IdentifyCns::ActiveNamespaceList, 0, 0);
    let cid = admin
        .submit_with(sqe, DataDir::ControllerToHost { len: 4096 }, |_| {})
        .expect("submit");
    let deadline = Instant::now() + PATIENCE;
    let mut out: Vec<QueueCompletion> = Vec::new();
    loop {
        assert!(Instant::now() < deadline, "identify did not complete");
        out.clear();
        admin.poll(&mut out);
        if let Some(c) = out.iter().find(|c| c.cid == cid) {
            c.result.as_ref().expect("identify 02h");
            let buf = c.buf.as_ref().expect("its buffer");
            return (buf[..4096].chunks(4))
                .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .take_while(|&n| n != 0)
                .collect();
        }
    }
}

fn reload_cli(socket: &Path) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_nvmf-target"))
        .args(["reload", "--control-socket"])
        .arg(socket)
        .output()
        .expect("nvmf-target reload runs")
}

#[test]
fn sighup_and_the_reload_command_change_namespaces_live() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("target.toml");
    let socket = dir.path().join("ctl.sock");
    std::fs::write(&cfg, config(false)).unwrap();
    let mut d = Daemon::start(&cfg, &socket);
    let traddr = SocketAddr::new(ADDR.parse::<IpAddr>().unwrap(), 4420);
    let mut o = HostOptions::new(traddr, NQN);
    o.local_ip = Some("127.0.0.182".parse().unwrap());
    o.io_queues = 1;
    o.queue_depth = 8;
    o.kato_ms = 0;
    let mut host = SyncHost::connect(&o).expect("host connects");
    let admin = host.controller().admin_queue_mut();
    assert_eq!(active(admin), vec![1]);

    // SIGHUP: namespace 2 from the edited file.
    std::fs::write(&cfg, config(true)).unwrap();
    d.signal(nix::sys::signal::Signal::SIGHUP);
    let line = d.wait_for("configuration reloaded");
    assert!(
        line.contains(&format!("namespaces added: {NQN} nsid 2")),
        "{line}"
    );
    assert_eq!(active(admin), vec![1, 2]);

    // A file that does not parse: the CLI says why and exits 1; nothing changes.
    std::fs::write(&cfg, "[[listen]\n").unwrap();
    let out = reload_cli(&socket);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("target.toml"), "{stderr}");
    d.wait_for("runs on unchanged");
    assert_eq!(active(admin), vec![1, 2]);

    // The CLI removes namespace 2 and prints what changed.
    std::fs::write(&cfg, config(false)).unwrap();
    let out = reload_cli(&socket);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains(&format!("namespaces removed: {NQN} nsid 2")),
        "{stdout}"
    );
    assert_eq!(active(admin), vec![1]);

    host.disconnect().expect("disconnect");
    d.signal(nix::sys::signal::Signal::SIGTERM);
    let status = d.child.wait().expect("exit");
    assert!(status.success(), "{status:?}");
    assert!(!socket.exists(), "the control socket is removed at exit");
}

#[test]
fn a_listen_address_is_added_by_sighup_and_removed_by_the_cli() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("target.toml");
    let socket = dir.path().join("ctl.sock");
    // Addresses of its own: the other test's daemon may run at the same time.
    let first = config(false).replace(ADDR, "127.0.0.185");
    std::fs::write(&cfg, &first).unwrap();
    let mut d = Daemon::start(&cfg, &socket);
    // A second [[listen]] entry, PORTID given so the first keeps its own.
    let second = "127.0.0.183";
    let two = first.replacen(
        "\n[[subsystems]]",
        &format!("portid = 1\n\n[[listen]]\naddr = \"{second}\"\nportid = 2\n\n[[subsystems]]"),
        1,
    );
    std::fs::write(&cfg, &two).unwrap();
    d.signal(nix::sys::signal::Signal::SIGHUP);
    let line = d.wait_for("configuration reloaded");
    assert!(
        line.contains(&format!("listen added: {second}:4420")),
        "{line}"
    );
    let mut o = HostOptions::new(SocketAddr::new(second.parse().unwrap(), 4420), NQN);
    o.local_ip = Some("127.0.0.184".parse().unwrap());
    o.io_queues = 1;
    o.queue_depth = 8;
    o.kato_ms = 0;
    let mut host = SyncHost::connect(&o).expect("host connects through the new address");
    assert_eq!(active(host.controller().admin_queue_mut()), vec![1]);

    // The CLI removes it: the output says so and the host's queue is disconnected.
    let one = two.replacen(
        &format!("[[listen]]\naddr = \"{second}\"\nportid = 2\n\n"),
        "",
        1,
    );
    std::fs::write(&cfg, one).unwrap();
    let out = reload_cli(&socket);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains(&format!("listen removed: {second}:4420")),
        "{stdout}"
    );
    let q = &mut host.io_queues()[0];
    let deadline = Instant::now() + PATIENCE;
    loop {
        assert!(
            Instant::now() < deadline,
            "the host's queue is still served"
        );
        let sqe = Sqe::read(0, 1, 0, 7, false);
        let Ok(cid) = q.submit_with(sqe, DataDir::ControllerToHost { len: 4096 }, |_| {}) else {
            break;
        };
        let mut out: Vec<QueueCompletion> = Vec::new();
        let mut failed = false;
        while out.iter().all(|c| c.cid != cid) {
            assert!(Instant::now() < deadline, "the read did not complete");
            q.poll(&mut out);
        }
        if let Some(c) = out.iter().find(|c| c.cid == cid) {
            failed = c.result.is_err();
        }
        if failed {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    drop(host);
    d.signal(nix::sys::signal::Signal::SIGTERM);
    let status = d.child.wait().expect("exit");
    assert!(status.success(), "{status:?}");
}
