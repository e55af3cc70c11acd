//! `rdma-doctor` against planted problems on real parts (needs root): two network
//! namespaces joined by a veth pair (10.77.0.1/24 and 10.77.0.2/24, MTU 1500), a
//! peer's `rdma-doctor --listen` in the second one, and one problem at a time: a
//! firewall drop of UDP 4791 (nftables, then iptables), an interface MTU below the
//! RoCE MTU (here, then only on the peer's side, which the path probe finds), a small
//! `net.core.rmem_max` (a global sysctl: set for the run and restored by a guard), and
//! a memlock limit too small for the target's slab (the doctor run under `prlimit
//! --memlock` as a uid of its own, without CAP_IPC_LOCK). The healthy setup passes.
//!
//! `.ci/run` runs them: `cargo test -p rdma-tools --test planted -- --ignored`
//! (Debian's nftables and iptables).
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_rdma-doctor");
const A: &str = "10.77.0.1";
const B: &str = "10.77.0.2";

/// The sysctl test changes a global value: the tests run one at a time.
static SERIAL: Mutex<()> = Mutex::new(());

fn sh(cmd: &str) {
    let o = Command::new("sh").args(["-c", cmd]).output().unwrap();
    assert!(
        o.status.success(),
        "{cmd}: {}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
}

/// Two namespaces and a veth pair; removed on drop.
struct Pair {
    a: String,
    b: String,
    peer: Option<Child>,
}

impl Pair {
    fn new(tag: &str) -> Pair {
        let id = std::process::id();
        let (a, b) = (format!("rdt{id}{tag}a"), format!("rdt{id}{tag}b"));
        for ns in [&a, &b] {
            let _ = Command::new("ip")
                .args(["netns", "del", ns])
                .stderr(Stdio::null())
                .status();
        }
        sh(&format!("ip netns add {a} && ip netns add {b}"));
        let p = Pair { a, b, peer: None };
        sh(&format!(
            "ip -n {a} link add va type veth peer name vb netns {b} && \
             ip -n {a} link set lo up && ip -n {b} link set lo up && \
             ip -n {a} addr add {A}/24 dev va && ip -n {b} addr add {B}/24 dev vb && \
             ip -n {a} link set va up && ip -n {b} link set vb up",
            a = p.a,
            b = p.b
        ));
        // Until both ends have carrier (the kernel's link watch sets it shortly after).
        let start = Instant::now();
        for (ns, dev) in [(&p.a, "va"), (&p.b, "vb")] {
            loop {
                let o = Command::new("ip")
                    .args(["-n", ns, "link", "show", dev])
                    .output()
                    .unwrap();
                if String::from_utf8_lossy(&o.stdout).contains("LOWER_UP") {
                    break;
                }
                assert!(
                    start.elapsed() < Duration::from_secs(10),
                    "{dev} has no carrier"
                );
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        p
    }

    /// Starts the peer's doctor in namespace b and waits until it answers.
    fn start_peer(&mut self) {
        let c = Command::new("ip")
            .args(["netns", "exec", &self.b, BIN, "--listen", "--addr", B])
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        self.peer = Some(c);
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(10) {
            let o = self.doctor(&["--peer", B, "--peer-timeout-ms", "100"], &[]);
            if finding(&o.1, "peer_gid")["status"] != "warn" {
                return;
            }
        }
        panic!("the peer's doctor never answered");
    }

    /// Runs the doctor on 10.77.0.1 in namespace a (`wrap`: a command line before it,
    /// e.g. prlimit).
    fn doctor(&self, args: &[&str], wrap: &[&str]) -> (i32, serde_json::Value) {
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", &self.a]).args(wrap).arg(BIN);
        cmd.args(["--addr", A, "-o", "json"]).args(args);
        let o = cmd.output().unwrap();
        let v = serde_json::from_slice(&o.stdout).unwrap_or_else(|e| {
            panic!(
                "{e}: {}{}",
                String::from_utf8_lossy(&o.stdout),
                String::from_utf8_lossy(&o.stderr)
            )
        });
        (o.status.code().unwrap_or(-1), v)
    }
}

impl Drop for Pair {
    fn drop(&mut self) {
        if let Some(mut c) = self.peer.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        let _ = Command::new("ip").args(["netns", "del", &self.a]).status();
        let _ = Command::new("ip").args(["netns", "del", &self.b]).status();
    }
}

fn finding<'a>(v: &'a serde_json::Value, check: &str) -> &'a serde_json::Value {
    v["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["check"] == check)
        .unwrap_or_else(|| panic!("no {check} finding in {v:#}"))
}

fn status<'a>(v: &'a serde_json::Value, check: &str) -> &'a str {
    finding(v, check)["status"].as_str().unwrap()
}

fn text<'a>(v: &'a serde_json::Value, check: &str, field: &str) -> &'a str {
    finding(v, check)[field].as_str().unwrap_or("")
}

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

#[test]
#[ignore = "needs root: network namespaces, a veth pair, nft/iptables, sysctl, prlimit"]
fn healthy_veth_pair_passes() {
    let _s = serial();
    let mut p = Pair::new("h");
    p.start_peer();
    let (rc, v) = p.doctor(&["--peer", B], &[]);
    assert_eq!(rc, 0, "{v:#}");
    for check in [
        "gid",
        "peer_gid",
        "mtu",
        "path_mtu",
        "firewall",
        "rp_filter",
    ] {
        assert_eq!(status(&v, check), "ok", "{check}: {v:#}");
    }
    assert!(
        text(&v, "gid", "summary").contains("RoCE v2 GID ::ffff:10.77.0.1 on va"),
        "{v:#}"
    );
    assert!(
        text(&v, "path_mtu", "summary").contains("RoCE MTU 1024 crosses the path"),
        "{v:#}"
    );
    assert!(
        text(&v, "firewall", "summary").contains("read: nft"),
        "{v:#}"
    );
    assert_eq!(status(&v, "dcb"), "skip", "a veth has no DCB: {v:#}");
}

#[test]
#[ignore = "needs root: network namespaces, a veth pair, nft/iptables, sysctl, prlimit"]
fn firewall_drops_of_udp_4791_are_found() {
    let _s = serial();
    let p = Pair::new("f");
    sh(&format!(
        "ip netns exec {} nft 'add table inet roce_test; add chain inet roce_test input_rt {{ type filter hook input priority 0; }}; \
         add rule inet roce_test input_rt udp dport 4791 drop'",
        p.a
    ));
    let (rc, v) = p.doctor(&[], &[]);
    assert_eq!(rc, 1, "{v:#}");
    assert_eq!(status(&v, "firewall"), "fail", "{v:#}");
    let fix = text(&v, "firewall", "fix");
    assert!(
        fix.starts_with("nft delete rule inet roce_test input_rt handle "),
        "{fix}"
    );
    // The fix works: after it, nothing is found.
    sh(&format!("ip netns exec {} {fix}", p.a));
    let (rc, v) = p.doctor(&[], &[]);
    assert_eq!((rc, status(&v, "firewall")), (0, "ok"), "{v:#}");

    // iptables (Debian's is iptables-nft: its rules show in both rule sets).
    sh(&format!(
        "ip netns exec {} iptables -A INPUT -p udp --dport 4791 -j DROP",
        p.a
    ));
    let (rc, v) = p.doctor(&[], &[]);
    assert_eq!((rc, status(&v, "firewall")), (1, "fail"), "{v:#}");
    assert!(
        text(&v, "firewall", "summary")
            .contains("iptables INPUT: -A INPUT -p udp -m udp --dport 4791 -j DROP"),
        "{v:#}"
    );
    assert!(
        text(&v, "firewall", "fix")
            .contains("iptables -D INPUT -p udp -m udp --dport 4791 -j DROP"),
        "{v:#}"
    );
}

#[test]
#[ignore = "needs root: network namespaces, a veth pair, nft/iptables, sysctl, prlimit"]
fn an_mtu_below_the_roce_mtu_is_found_here_and_on_the_path() {
    let _s = serial();
    let mut p = Pair::new("m");
    sh(&format!("ip -n {} link set va mtu 1000", p.a));
    let (rc, v) = p.doctor(&[], &[]);
    assert_eq!((rc, status(&v, "mtu")), (1, "fail"), "{v:#}");
    assert!(
        text(&v, "mtu", "summary").contains("va has MTU 1000, which carries RoCE MTU 512 at most"),
        "{v:#}"
    );
    assert_eq!(text(&v, "mtu", "fix"), "ip link set dev va mtu 1132");
    sh(&format!("ip -n {} link set va mtu 1132", p.a));
    let (_, v) = p.doctor(&[], &[]);
    assert_eq!(status(&v, "mtu"), "ok", "1132 carries 1024: {v:#}");

    // Only the peer's side is small: this host's interface is fine, the probe is not.
    sh(&format!(
        "ip -n {} link set va mtu 1500 && ip -n {} link set vb mtu 1000",
        p.a, p.b
    ));
    p.start_peer();
    let (rc, v) = p.doctor(&["--peer", B], &[]);
    assert_eq!(rc, 1, "{v:#}");
    assert_eq!(status(&v, "mtu"), "ok", "{v:#}");
    assert_eq!(status(&v, "path_mtu"), "fail", "{v:#}");
    let s = text(&v, "path_mtu", "summary");
    assert!(
        s.contains("carries RoCE MTU 512 at most, 1024 wanted"),
        "{s}"
    );
    assert!(
        s.contains("1084 B lost") && s.contains("572 B crossed"),
        "{s}"
    );
}

/// Restores `net.core.rmem_max` when dropped.
struct SysctlGuard(&'static str, String);
impl Drop for SysctlGuard {
    fn drop(&mut self) {
        let _ = std::fs::write(self.0, &self.1);
    }
}

#[test]
#[ignore = "needs root: network namespaces, a veth pair, nft/iptables, sysctl, prlimit"]
fn a_small_rmem_max_is_found() {
    let _s = serial();
    let p = Pair::new("r");
    // net.core.rmem_max is global (other namespaces read the init namespace's and may
    // not write it): changed for the doctor's run only, restored at once.
    const PATH: &str = "/proc/sys/net/core/rmem_max";
    let before = std::fs::read_to_string(PATH).unwrap();
    let guard = SysctlGuard(PATH, before.clone());
    std::fs::write(PATH, "65536").unwrap();
    let (rc, v) = p.doctor(&[], &[]);
    drop(guard);
    assert_eq!(std::fs::read_to_string(PATH).unwrap(), before, "restored");
    assert_eq!(rc, 0, "a warning does not fail the run: {v:#}");
    assert_eq!(status(&v, "rmem_max"), "warn", "{v:#}");
    assert!(
        text(&v, "rmem_max", "summary").starts_with("net.core.rmem_max = 65536, below"),
        "{v:#}"
    );
    assert!(
        text(&v, "rmem_max", "meaning").contains("64 KiB receive buffer instead of 32 MiB"),
        "{v:#}"
    );
    assert!(
        text(&v, "rmem_max", "fix").starts_with("sysctl -w net.core.rmem_max=33554432"),
        "{v:#}"
    );
}

#[test]
#[ignore = "needs root: network namespaces, a veth pair, nft/iptables, sysctl, prlimit"]
fn a_memlock_limit_too_small_for_the_slab_is_found() {
    let _s = serial();
    let p = Pair::new("l");
    // Root's CAP_IPC_LOCK lifts the limit, and io_uring charges all of a user's
    // processes together (root's other processes pin what they pin): the doctor runs
    // as a uid of its own, without capabilities, under 1 MiB.
    const AS_USER: [&str; 4] = [
        "setpriv",
        "--reuid=64977",
        "--regid=64977",
        "--clear-groups",
    ];
    let wrap: Vec<&str> = ["prlimit", "--memlock=1048576"]
        .into_iter()
        .chain(AS_USER)
        .collect();
    let (rc, v) = p.doctor(&["--data-slab", "64M"], &wrap);
    assert_eq!(rc, 0, "{v:#}");
    assert_eq!(status(&v, "memlock"), "warn", "soft: plain buffers: {v:#}");
    let s = text(&v, "memlock", "summary");
    assert!(s.starts_with("RLIMIT_MEMLOCK 1 MiB is too small for 1 poll group(s) x (64 MiB data slab + 2 MiB receive region)"), "{s}");
    // 64 MiB + 2 MiB, and whatever the user's other processes pin.
    let fix = text(&v, "memlock", "fix");
    let kib: u64 = fix
        .strip_prefix("ulimit -l ")
        .and_then(|r| r.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{fix}"));
    assert!(kib >= 67584, "{fix}");
    // The verbs provider must pin it: the target would not start.
    let (rc, v) = p.doctor(&["--data-slab", "64M", "--provider", "verbs"], &wrap);
    assert_eq!(rc, 1, "{v:#}");
    assert_eq!(status(&v, "memlock"), "fail", "{v:#}");
    // A slab that fits the limit registers (1 MiB + 2 MiB under 8 MiB; the limit is not
    // raised above the hard one, which needs CAP_SYS_RESOURCE).
    let (_, v) = p.doctor(
        &["--data-slab", "1M"],
        &["prlimit", "--memlock=8388608"]
            .into_iter()
            .chain(AS_USER)
            .collect::<Vec<_>>(),
    );
    assert_eq!(status(&v, "memlock"), "ok", "{v:#}");
}
