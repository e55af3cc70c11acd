//! The real `nvmf-target` binary shut down by a signal and killed (issue 16 item 3):
//!
//! - SIGTERM with commands in flight: every command the host sent gets its CQE (those
//!   in flight: success; those sent during the shutdown: Command Aborted due to SQ
//!   Deletion, no DNR), then the host gets a CM DREQ, and the target exits 0 with a
//!   log line that names the bound and what it did;
//! - kill -9 during writes, then a restart on the same file: no write the target
//!   acknowledged with FUA, or before a Flush it acknowledged, is lost (checked in the
//!   file, and read back over the fabric from the restarted target).
//!
//! The host is the host library on 127.0.0.167 / .169; the targets on .166 / .168.
use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::net::{IpAddr, SocketAddr};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use nvme::status::GenericStatus;
use nvme::{Sqe, Status};
use nvmf_initiator::queue::{NvmeRdmaQueue, QueueCompletion};
use nvmf_initiator::{DataDir, HostError, HostOptions, IoBuf, SyncHost};

/// A bound for each wait, against hangs (not a timing assertion).
const PATIENCE: Duration = Duration::from_secs(60);
/// The binary's default subsystem NQN.
const NQN: &str = "nqn.2026-11.io.nvmf-rdma:target";
const BLOCK: u64 = 512;

/// The target binary with its stderr lines arriving on a channel.
struct Daemon {
    child: Child,
    lines: mpsc::Receiver<String>,
    seen: Vec<String>,
}

impl Daemon {
    fn start(addr: &str, img: &Path) -> Daemon {
        let mut child = Command::new(env!("CARGO_BIN_EXE_nvmf-target"))
            .args(["--addr", addr, "--size", "64M", "--log-format", "json"])
            .arg("--file")
            .arg(img)
            .env_remove("RUST_LOG")
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
        let mut d = Daemon {
            child,
            lines,
            seen: Vec::new(),
        };
        d.wait_for("serving");
        d
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
                Err(e) => panic!("no line with {text:?} ({e}): {:#?}", self.seen),
            }
        }
    }

    fn signal(&self, sig: nix::sys::signal::Signal) {
        let pid = nix::unistd::Pid::from_raw(self.child.id() as i32);
        nix::sys::signal::kill(pid, sig).unwrap();
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn host(target: &str, local: &str, depth: u16) -> SyncHost {
    let traddr = SocketAddr::new(target.parse().unwrap(), 4420);
    let mut o = HostOptions::new(traddr, NQN);
    o.local_ip = Some(local.parse::<IpAddr>().unwrap());
    o.io_queues = 1;
    o.queue_depth = depth;
    SyncHost::connect(&o).expect("host connects")
}

/// 4 KiB (8 blocks) that differ by `seq`.
fn block_data(seq: u64) -> Vec<u8> {
    (0..4096u64)
        .map(|i| (i.wrapping_mul(31) ^ seq.wrapping_mul(0x9E37_79B9)) as u8 ^ (seq >> 8) as u8)
        .collect()
}

/// Polls `q` until `n` completions came, returning them (status by CID).
/// Each with the buffer it carried back.
type Completions = HashMap<u16, (Result<nvme::Cqe, HostError>, Option<IoBuf>)>;

fn collect(q: &mut NvmeRdmaQueue, n: usize) -> Completions {
    let deadline = Instant::now() + PATIENCE;
    let mut got = HashMap::new();
    let mut out = Vec::new();
    while got.len() < n {
        assert!(Instant::now() < deadline, "only {} of {n} CQEs", got.len());
        out.clear();
        q.poll(&mut out);
        for QueueCompletion { cid, result, buf } in out.drain(..) {
            got.insert(cid, (result, buf));
        }
    }
    got
}

#[test]
fn sigterm_answers_every_command_then_disconnects_and_exits_0() {
    const TARGET: &str = "127.0.0.166";
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("ns.img");
    let mut t = Daemon::start(TARGET, &img);
    let mut h = host(TARGET, "127.0.0.167", 32);
    let q = &mut h.io_queues()[0];
    // 16 writes of 128 KiB: the target pulls their data by RDMA READ, which this host
    // answers only while it polls, so they stay in flight at the target.
    let mut writes = Vec::new();
    for k in 0..16u64 {
        let data: Vec<u8> = (0..131_072u64).map(|i| (i ^ k) as u8).collect();
        let cid = q
            .submit_with(
                Sqe::write(0, 1, k * 256, 255, false),
                DataDir::HostToController { len: 131_072 },
                |b| b[..data.len()].copy_from_slice(&data),
            )
            .expect("submit");
        writes.push((cid, k, data));
    }
    // One poll sends what the queue deferred (memory window binds, capsules); the
    // target's READs then wait for this host.
    let mut early = Vec::new();
    q.poll(&mut early);
    std::thread::sleep(Duration::from_millis(200));
    t.signal(nix::sys::signal::Signal::SIGTERM);
    t.wait_for("received SIGTERM, shutting down");
    // The poll groups begin to drain right after that line.
    std::thread::sleep(Duration::from_millis(200));
    // Sent during the shutdown: answered, not run.
    let mut late = Vec::new();
    for k in 0..4u64 {
        let cid = q
            .submit_with(
                Sqe::read(0, 1, k * 8, 7, false),
                DataDir::ControllerToHost { len: 4096 },
                |_| {},
            )
            .expect("submit");
        late.push(cid);
    }
    let mut got = collect(q, writes.len() + late.len() - early.len());
    for c in early {
        got.insert(c.cid, (c.result, c.buf));
    }
    for (cid, k, _) in &writes {
        let r = &got[cid].0;
        assert!(
            matches!(r, Ok(c) if c.status().is_success()),
            "write {k} in flight at the signal: {r:?}"
        );
    }
    for cid in &late {
        match &got[cid].0 {
            Err(HostError::Nvme { status, .. }) => assert_eq!(
                *status,
                Status::generic(GenericStatus::AbortedSqDeletion),
                "no DNR: the host may retry it elsewhere"
            ),
            other => panic!("a read sent during the shutdown: {other:?}"),
        }
    }
    // Then the target disconnects the queue (CM DREQ) and exits 0.
    let deadline = Instant::now() + PATIENCE;
    while !q.peer_disconnected() {
        assert!(Instant::now() < deadline, "no DREQ from the target");
        q.progress();
        std::thread::sleep(Duration::from_millis(1));
    }
    let status = t.child.wait().unwrap();
    assert!(status.success(), "exit status {status}");
    let line = t.wait_for("shut down in");
    let j: serde_json::Value = serde_json::from_str(&line).unwrap();
    assert_eq!(j["level"], "INFO", "{line}");
    assert_eq!(j["bound_ms"], 10_000, "{line}");
    assert!(j["in_flight"].as_u64().unwrap() >= 1, "{line}");
    assert!(
        j["aborted"].as_u64().unwrap() >= late.len() as u64,
        "{line}"
    );
    assert_eq!(j["namespaces_flushed"], 1, "{line}");
    assert_eq!(j["queues_disconnected"], 2, "admin and I/O queue: {line}");
    // What the writes carried is in the file.
    let file = std::fs::read(&img).unwrap();
    for (_, k, data) in &writes {
        let at = (k * 256 * BLOCK) as usize;
        assert!(
            file[at..at + data.len()] == data[..],
            "write {k} in the file"
        );
    }
}

#[test]
fn kill_9_during_writes_loses_nothing_acknowledged_with_fua_or_flushed() {
    const TARGET: &str = "127.0.0.168";
    const LOCAL: &str = "127.0.0.169";
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("ns.img");
    let mut t = Daemon::start(TARGET, &img);
    let mut h = host(TARGET, LOCAL, 16);
    let q = &mut h.io_queues()[0];
    // Write 4 KiB blocks to distinct LBAs, 12 in flight (room for a Flush on the
    // 16-entry queue): odd ones with FUA, even ones made durable by the next Flush
    // (one every 32 writes).
    let mut durable: Vec<u64> = Vec::new();
    let mut done_unflushed: Vec<u64> = Vec::new();
    let mut flush: Option<(u16, Vec<u64>)> = None;
    let mut inflight: HashMap<u16, u64> = HashMap::new();
    let (mut next, mut completed) = (0u64, 0u64);
    let mut out = Vec::new();
    let deadline = Instant::now() + PATIENCE;
    while completed < 600 {
        assert!(Instant::now() < deadline, "writes stalled at {completed}");
        while inflight.len() < 12 && q.can_submit() {
            let data = block_data(next);
            let sqe = Sqe::write(0, 1, next * 8, 7, next % 2 == 1);
            let cid = q
                .submit_with(sqe, DataDir::HostToController { len: 4096 }, |b| {
                    b[..4096].copy_from_slice(&data)
                })
                .expect("submit");
            inflight.insert(cid, next);
            next += 1;
        }
        if flush.is_none() && done_unflushed.len() >= 32 && q.can_submit() {
            let cid = q
                .submit(Sqe::flush(0, 1), DataDir::None, None)
                .expect("flush");
            flush = Some((cid, std::mem::take(&mut done_unflushed)));
        }
        out.clear();
        q.poll(&mut out);
        for QueueCompletion { cid, result, .. } in out.drain(..) {
            let ok = matches!(&result, Ok(c) if c.status().is_success());
            assert!(ok, "command {cid}: {result:?}");
            if let Some(seq) = inflight.remove(&cid) {
                completed += 1;
                if seq % 2 == 1 {
                    durable.push(seq);
                } else {
                    done_unflushed.push(seq);
                }
            } else if flush.as_ref().is_some_and(|(c, _)| *c == cid) {
                let (_, covered) = flush.take().unwrap();
                durable.extend(covered);
            }
        }
    }
    // Kill -9 with writes in flight.
    while inflight.len() < 12 && q.can_submit() {
        let data = block_data(next);
        let sqe = Sqe::write(0, 1, next * 8, 7, next % 2 == 1);
        let cid = q
            .submit_with(sqe, DataDir::HostToController { len: 4096 }, |b| {
                b[..4096].copy_from_slice(&data)
            })
            .expect("submit");
        inflight.insert(cid, next);
        next += 1;
    }
    assert!(!inflight.is_empty());
    t.signal(nix::sys::signal::Signal::SIGKILL);
    let _ = t.child.wait();
    drop(h);
    let flushed = durable.iter().filter(|&&s| s % 2 == 0).count();
    assert!(
        durable.len() > 300 && flushed > 0,
        "{} durable writes, {flushed} by a Flush",
        durable.len()
    );
    let file = std::fs::read(&img).unwrap();
    for &seq in &durable {
        let at = (seq * 8 * BLOCK) as usize;
        assert!(
            file[at..at + 4096] == block_data(seq)[..],
            "write {seq} was acknowledged durable but is not in the file"
        );
    }
    // Restarted on the same file, the target serves the same data.
    let _t2 = Daemon::start(TARGET, &img);
    let mut h = host(TARGET, LOCAL, 16);
    let q = &mut h.io_queues()[0];
    for &seq in durable.iter().step_by(7) {
        let cid = q
            .submit_with(
                Sqe::read(0, 1, seq * 8, 7, false),
                DataDir::ControllerToHost { len: 4096 },
                |_| {},
            )
            .expect("submit");
        let got = collect(q, 1);
        let (r, buf) = &got[&cid];
        assert!(matches!(r, Ok(c) if c.status().is_success()));
        let data = buf.as_ref().expect("the read's buffer");
        assert!(
            data[..4096] == block_data(seq)[..],
            "write {seq} after the restart"
        );
    }
}
