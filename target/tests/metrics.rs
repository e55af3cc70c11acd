//! The metrics endpoint of the real `nvmf-target` binary (issue 16 item 6): started
//! with `--metrics 127.0.0.1:0` (the kernel picks a free port, which the log line
//! names), I/O from the host library over the soft provider, then `GET /metrics` over
//! TCP, parsed by a Prometheus text-format parser (`prometheus-parse`): the read and
//! write commands and bytes equal the I/O done, the latency histograms count as many
//! commands, one controller and its queues are connected, and a Connect from a host
//! NQN that the subsystem's allow list lacks is counted as `invalid_host`. Also: the
//! log lines of the controller's queues carry the controller's and the queue's spans;
//! another path is 404; a second target on the same metrics address fails to start,
//! naming the address and the fix.
//!
//! The hosts are the host library on 127.0.0.237 and .239; the target on 127.0.0.236
//! (a second one, refused at once, on 127.0.0.238).
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use nvme::Sqe;
use nvmf_initiator::queue::QueueCompletion;
use nvmf_initiator::{DataDir, HostOptions, SyncHost};
use prometheus_parse::{Scrape, Value};

/// A bound for each wait, against hangs (not a timing assertion).
const PATIENCE: Duration = Duration::from_secs(60);
const NQN: &str = "nqn.2026-12.io.nvmf-rdma:metrics";
const GOOD_HOST: &str = "nqn.2026-12.io.nvmf-rdma:host-allowed";
const BAD_HOST: &str = "nqn.2026-12.io.nvmf-rdma:host-not-allowed";
const TARGET: &str = "127.0.0.236";
const HOST: &str = "127.0.0.237";
/// The refused host's address.
const OTHER_HOST: &str = "127.0.0.239";

/// Writes of 4 KiB and reads of 8 KiB the test does.
const WRITES: u64 = 24;
const READS: u64 = 40;

struct Daemon {
    child: Child,
    lines: mpsc::Receiver<String>,
    seen: Vec<String>,
}

impl Daemon {
    fn spawn(config: &Path, metrics: &str) -> Daemon {
        let mut child = Command::new(env!("CARGO_BIN_EXE_nvmf-target"))
            .arg("--config")
            .arg(config)
            .args(["--metrics", metrics, "--log-format", "json"])
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
        Daemon {
            child,
            lines,
            seen: Vec::new(),
        }
    }

    /// Waits for a line containing every one of `texts` and returns it, parsed.
    fn wait_for(&mut self, texts: &[&str]) -> serde_json::Value {
        let found = |l: &String| texts.iter().all(|t| l.contains(t));
        let line = match self.seen.iter().find(|l| found(l)) {
            Some(l) => l.clone(),
            None => loop {
                match self.lines.recv_timeout(PATIENCE) {
                    Ok(l) => {
                        self.seen.push(l.clone());
                        if found(&l) {
                            break l;
                        }
                    }
                    Err(e) => panic!("no line with {texts:?} ({e}): {:#?}", self.seen),
                }
            },
        };
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line}"))
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn write_config(dir: &Path, addr: &str) -> std::path::PathBuf {
    let path = dir.join(format!("target-{addr}.toml"));
    let img = dir.join(format!("ns-{addr}.img"));
    std::fs::write(
        &path,
        format!(
            r#"
[[listen]]
addr = "{addr}"

[[subsystems]]
nqn = "{NQN}"
allow_any_host = false
hosts = ["{GOOD_HOST}"]

[[subsystems.namespaces]]
nsid = 1
path = "{}"
size = "16M"
"#,
            img.display()
        ),
    )
    .unwrap();
    path
}

/// `GET path` over a new TCP connection: the status code and the body.
fn get(addr: SocketAddr, path: &str) -> (u16, String) {
    let mut s = TcpStream::connect(addr).expect("metrics endpoint accepts");
    s.set_read_timeout(Some(PATIENCE)).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut raw = String::new();
    s.read_to_string(&mut raw).expect("a whole HTTP response");
    let (head, body) = raw.split_once("\r\n\r\n").expect("headers end");
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("status line: {head}"));
    if status == 200 {
        assert!(
            head.to_ascii_lowercase()
                .contains("content-type: text/plain; version=0.0.4"),
            "{head}"
        );
    }
    (status, body.to_string())
}

fn scrape(addr: SocketAddr) -> Scrape {
    let (status, body) = get(addr, "/metrics");
    assert_eq!(status, 200, "{body}");
    Scrape::parse(body.lines().map(|l| Ok(l.to_string()))).expect("Prometheus text format")
}

/// The value of the one sample of `metric` whose labels include every one of `labels`.
fn value(s: &Scrape, metric: &str, labels: &[(&str, &str)]) -> f64 {
    let found: Vec<_> = s
        .samples
        .iter()
        .filter(|x| x.metric == metric)
        .filter(|x| labels.iter().all(|(k, v)| x.labels.get(k) == Some(*v)))
        .collect();
    assert_eq!(found.len(), 1, "{metric} {labels:?}: {found:#?}");
    match &found[0].value {
        Value::Counter(v) | Value::Gauge(v) | Value::Untyped(v) => *v,
        Value::Histogram(b) => {
            b.iter()
                .find(|c| c.less_than.is_infinite())
                .expect("+Inf bucket")
                .count
        }
        other => panic!("{metric}: {other:?}"),
    }
}

/// A host on local address `local` (each host device needs its own: UDP 4791).
fn host(local: &str, hostnqn: &str) -> Result<SyncHost, nvmf_initiator::HostError> {
    let traddr = SocketAddr::new(TARGET.parse().unwrap(), 4420);
    let mut o = HostOptions::new(traddr, NQN);
    o.local_ip = Some(local.parse::<IpAddr>().unwrap());
    o.hostnqn = hostnqn.to_string();
    o.io_queues = 1;
    o.queue_depth = 4;
    o.kato_ms = 0;
    SyncHost::connect(&o)
}

/// One command on the host's I/O queue, waited for; panics unless it succeeds.
fn run(host: &mut SyncHost, sqe: Sqe, dir: DataDir) {
    let q = &mut host.io_queues()[0];
    let len = dir.len();
    let cid = q
        .submit_with(sqe, dir, |b| b[..len].fill(0x5A))
        .expect("submit");
    let deadline = Instant::now() + PATIENCE;
    let mut out = Vec::new();
    loop {
        assert!(Instant::now() < deadline, "no completion for cid {cid}");
        q.poll(&mut out);
        if let Some(c) = out.drain(..).find(|c: &QueueCompletion| c.cid == cid) {
            let cqe = c.result.expect("command completes");
            assert!(cqe.status().is_success(), "{:?}", cqe.status());
            return;
        }
    }
}

#[test]
fn scraped_metrics_count_the_io_the_controller_and_a_refused_host() {
    let dir = tempfile::tempdir().unwrap();
    let mut d = Daemon::spawn(&write_config(dir.path(), TARGET), "127.0.0.1:0");
    let line = d.wait_for(&["metrics endpoint", "metrics_addr"]);
    let addr: SocketAddr = line["metrics_addr"].as_str().unwrap().parse().unwrap();
    d.wait_for(&["serving"]);

    let before = scrape(addr);
    let ns = [("subnqn", NQN), ("nsid", "1")];
    let with = |op: &'static str| [ns[0], ns[1], ("op", op)];
    assert_eq!(
        value(&before, "nvmf_target_io_commands_total", &with("read")),
        0.0
    );
    assert_eq!(
        value(&before, "nvmf_target_controllers", &[("subnqn", NQN)]),
        0.0
    );
    assert_eq!((get(addr, "/").0, get(addr, "/metrics/x").0), (404, 404));

    let mut h = host(HOST, GOOD_HOST).expect("the allowed host connects");
    for i in 0..WRITES {
        run(
            &mut h,
            Sqe::write(0, 1, i * 8, 7, false),
            DataDir::HostToController { len: 4096 },
        );
    }
    for i in 0..READS {
        run(
            &mut h,
            Sqe::read(0, 1, i * 16, 15, false),
            DataDir::ControllerToHost { len: 8192 },
        );
    }
    let refused = host(OTHER_HOST, BAD_HOST).err();
    let e = refused.expect("a host not on the allow list is refused");
    assert!(e.to_string().contains("Connect Invalid Host"), "{e}");

    let s = scrape(addr);
    if std::env::var_os("METRICS_DUMP").is_some() {
        eprintln!("{}", get(addr, "/metrics").1);
    }
    assert_eq!(
        value(&s, "nvmf_target_io_commands_total", &with("read")),
        READS as f64
    );
    assert_eq!(
        value(&s, "nvmf_target_io_commands_total", &with("write")),
        WRITES as f64
    );
    assert_eq!(
        value(&s, "nvmf_target_io_bytes_total", &with("read")),
        (READS * 8192) as f64
    );
    assert_eq!(
        value(&s, "nvmf_target_io_bytes_total", &with("write")),
        (WRITES * 4096) as f64
    );
    // The histograms: the +Inf bucket and the _count equal the commands, the sum is
    // positive and below PATIENCE per command.
    for (op, n) in [("read", READS), ("write", WRITES)] {
        let l = with(op);
        assert_eq!(
            value(&s, "nvmf_target_io_latency_seconds", &l),
            n as f64,
            "{op}"
        );
        assert_eq!(
            value(&s, "nvmf_target_io_latency_seconds_count", &l),
            n as f64,
            "{op}"
        );
        let sum = value(&s, "nvmf_target_io_latency_seconds_sum", &l);
        assert!(
            sum > 0.0 && sum < n as f64 * PATIENCE.as_secs_f64(),
            "{op}: {sum}"
        );
    }
    assert_eq!(
        value(&s, "nvmf_target_controllers", &[("subnqn", NQN)]),
        1.0
    );
    let q = |t| {
        value(
            &s,
            "nvmf_target_queues",
            &[("poll_group", "0"), ("type", t)],
        )
    };
    assert_eq!((q("admin"), q("io")), (1.0, 1.0));
    let refusals = |layer, reason| {
        value(
            &s,
            "nvmf_target_refused_connects_total",
            &[("layer", layer), ("reason", reason)],
        )
    };
    assert_eq!(refusals("fabrics", "invalid_host"), 1.0);
    assert_eq!(refusals("fabrics", "unknown_subsystem"), 0.0);
    // The transport counted the packets, per poll group and per device.
    let pg = [("poll_group", "0"), ("traddr", TARGET)];
    assert!(value(&s, "nvmf_target_rdma_rcvd_pkts_total", &pg) >= (READS + WRITES) as f64);
    assert!(value(&s, "nvmf_target_rdma_sent_pkts_total", &pg) >= (READS + WRITES) as f64);
    assert!(value(&s, "nvmf_target_rdma_rdma_sends_total", &pg) >= READS as f64);
    assert_eq!(
        value(&s, "nvmf_target_rdma_retry_exceeded_err_total", &pg),
        0.0
    );
    let dev = [("traddr", TARGET)];
    assert!(value(&s, "nvmf_target_rdma_device_rcvd_pkts_total", &dev) > 0.0);
    assert_eq!(
        value(&s, "nvmf_target_rdma_device_icrc_errors_total", &dev),
        0.0
    );
    assert!(
        value(&s, "nvmf_target_poll_group_capsules_received_total", &pg) >= (READS + WRITES) as f64
    );

    // The log lines of the controller's queues carry its span and theirs.
    h.disconnect().expect("disconnect");
    let closed = d.wait_for(&["queue disconnected", "\"qid\":1"]);
    let spans = closed["spans"].as_array().expect("spans");
    let names: Vec<_> = spans.iter().map(|s| s["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["controller", "queue"], "{closed}");
    assert_eq!(spans[0]["hostnqn"], GOOD_HOST, "{closed}");
    assert_eq!(spans[0]["subnqn"], NQN, "{closed}");
    assert!(spans[0]["cntlid"].as_u64().is_some(), "{closed}");
    assert_eq!(spans[1]["qid"], 1, "{closed}");
    let after = scrape(addr);
    assert_eq!(
        value(&after, "nvmf_target_controllers", &[("subnqn", NQN)]),
        0.0
    );
    // Counters never go down: the QPs that are gone are still counted.
    let rcvd = |s: &Scrape| value(s, "nvmf_target_rdma_rcvd_pkts_total", &pg);
    assert!(rcvd(&after) >= rcvd(&s));

    // A second target on the same metrics address stops at once, naming it and the fix.
    let mut second = Command::new(env!("CARGO_BIN_EXE_nvmf-target"))
        .arg("--config")
        .arg(write_config(dir.path(), "127.0.0.238"))
        .args(["--metrics", &addr.to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut err = String::new();
    second
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    let status = second.wait().unwrap();
    assert!(!status.success(), "{err}");
    assert!(
        err.contains(&format!("metrics endpoint {addr}: cannot listen")),
        "{err}"
    );
    assert!(err.contains("choose another port with --metrics"), "{err}");
    assert!(
        !dir.path().join("ns-127.0.0.238.img").exists(),
        "the refused start created no namespace file"
    );
}
