//! `rdma-doctor`: a checklist of this host's RoCE configuration, optionally against a
//! peer, each [`Finding`] with its status, what it means and the command that fixes
//! it.
//!
//! The checks, one module each:
//! - [`gid`]: a RoCE v2 GID for `--addr` (soft provider: the address on an interface
//!   that is up; verbs: the RoCE v2 entry in the sysfs GID table) and, with a peer, the
//!   same GID type and index on both ends.
//! - [`mtu`]: the interface MTU (and the route's, with a peer) against the RoCE MTU;
//!   with a peer that runs `rdma-doctor --listen`, the path MTU probed end to end with
//!   DF-set UDP datagrams ([`peer`]).
//! - [`limits`]: `RLIMIT_MEMLOCK` against what the target's data slab pins
//!   (`nvmf_target::memory::plan`, the rule the target itself applies) and
//!   `RLIMIT_NOFILE` against one socket per QP.
//! - [`sysctl`]: `net.core.rmem_max`/`wmem_max` against the soft provider's socket
//!   buffers, the ECN settings (and what matters for RoCE), `rp_filter`.
//! - [`firewall`]: nftables and iptables rules that drop UDP 4791, parsed from `nft -j
//!   list ruleset` and `iptables -S` / `ip6tables -S`.
//! - [`dcb`]: PFC and ETS state from `dcb` (iproute2) or `lldptool`, where the
//!   interface's driver shows it.
//!
//! The process's own limits and capabilities are the ones checked: run the doctor as
//! the user, and under the limits, the target runs with.
use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Duration;

use serde::Serialize;
use transport::verbs::Mtu;
use transport::ProviderKind;

pub mod dcb;
pub mod firewall;
pub mod gid;
pub mod limits;
pub mod mtu;
pub mod peer;
pub mod sysctl;

/// A finding's verdict.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    /// Nothing to do.
    Ok,
    /// Not visible from here, or not applicable to the chosen provider.
    Skip,
    /// Works, but slower or more fragile than it should be.
    Warn,
    /// RoCE traffic will fail or the target will not start.
    Fail,
}

impl Status {
    /// The tag the text report starts a finding with.
    pub fn tag(self) -> &'static str {
        match self {
            Status::Ok => "[ ok ]",
            Status::Skip => "[skip]",
            Status::Warn => "[warn]",
            Status::Fail => "[FAIL]",
        }
    }
}

/// One finding.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Finding {
    /// The check's name (`gid`, `mtu`, `memlock`, `rmem_max`, `firewall`, ...).
    pub check: &'static str,
    /// Its verdict.
    pub status: Status,
    /// What was found, with the values read.
    pub summary: String,
    /// What it means for RoCE traffic.
    pub meaning: String,
    /// The exact command that fixes it (none when nothing is to be fixed).
    pub fix: Option<String>,
}

impl Finding {
    /// A finding.
    pub fn new(
        check: &'static str,
        status: Status,
        summary: impl Into<String>,
        meaning: impl Into<String>,
        fix: Option<String>,
    ) -> Finding {
        Finding {
            check,
            status,
            summary: summary.into(),
            meaning: meaning.into(),
            fix,
        }
    }
}

/// What to check.
#[derive(Clone, Debug)]
pub struct Options {
    /// The address RoCE traffic uses on this host (the target's `--addr`).
    pub addr: IpAddr,
    /// The provider the target runs.
    pub provider: ProviderKind,
    /// The RoCE MTU expected end to end.
    pub roce_mtu: Mtu,
    /// A peer to compare with (its RoCE address).
    pub peer: Option<IpAddr>,
    /// The UDP port the peer's `rdma-doctor --listen` answers on.
    pub peer_port: u16,
    /// How long to wait for each answer of the peer.
    pub peer_timeout: Duration,
    /// The target's data slab per poll group (`--data-slab`), `None` for automatic.
    pub data_slab_bytes: Option<u64>,
    /// The target's poll groups.
    pub poll_groups: u32,
    /// The target's MDTS in bytes.
    pub mdts_bytes: u32,
    /// QPs the host is expected to carry (one socket each on the soft provider).
    pub qps: u64,
    /// Where the RDMA devices are listed (`/sys/class/infiniband`).
    pub sysfs_root: PathBuf,
    /// Where the interfaces are listed (`/sys/class/net`).
    pub net_root: PathBuf,
}

/// The report: every finding, in the order checked.
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    /// The address checked.
    pub addr: IpAddr,
    /// The provider checked for.
    pub provider: &'static str,
    /// The RoCE MTU checked for, bytes.
    pub roce_mtu: u32,
    /// The peer, if any.
    pub peer: Option<IpAddr>,
    /// The findings.
    pub findings: Vec<Finding>,
}

impl Report {
    /// The worst status of any finding.
    pub fn worst(&self) -> Status {
        self.findings
            .iter()
            .map(|f| f.status)
            .max()
            .unwrap_or(Status::Ok)
    }

    /// The exit status: 1 when a finding failed, else 0 (warnings are listed but do
    /// not fail the run).
    pub fn exit_code(&self) -> u8 {
        u8::from(self.worst() == Status::Fail)
    }

    /// The finding of `check`, the first if several.
    pub fn finding(&self, check: &str) -> Option<&Finding> {
        self.findings.iter().find(|f| f.check == check)
    }

    /// The text report: one block per finding, then a count.
    pub fn text(&self) -> String {
        use std::fmt::Write as _;
        let mut o = String::new();
        let peer = self.peer.map_or(String::new(), |p| format!(", peer {p}"));
        let _ = writeln!(
            o,
            "rdma-doctor: {} provider on {}, RoCE MTU {}{peer}",
            self.provider, self.addr, self.roce_mtu
        );
        for f in &self.findings {
            let _ = writeln!(o, "{} {:<10} {}", f.status.tag(), f.check, f.summary);
            if f.status != Status::Ok {
                let _ = writeln!(o, "       {:<10} {}", "means:", f.meaning);
            }
            if let Some(fix) = &f.fix {
                let _ = writeln!(o, "       {:<10} {fix}", "fix:");
            }
        }
        let n = |s| self.findings.iter().filter(|f| f.status == s).count();
        let _ = writeln!(
            o,
            "{} ok, {} warn, {} fail, {} skipped",
            n(Status::Ok),
            n(Status::Warn),
            n(Status::Fail),
            n(Status::Skip)
        );
        o
    }
}

/// Runs every check.
pub fn run(opts: &Options) -> Report {
    let mut findings = Vec::new();
    let ifs = crate::netif::interfaces(&opts.net_root).unwrap_or_default();
    let local = gid::check_local(opts, &ifs, &mut findings);
    let peer = opts
        .peer
        .map(|p| peer::query(opts.addr, p, opts.peer_port, opts.peer_timeout));
    if let (Some(p), Some(answer)) = (opts.peer, &peer) {
        gid::check_peer(p, opts.peer_port, local.as_ref(), answer, &mut findings);
    }
    mtu::check(opts, &ifs, peer.as_ref(), &mut findings);
    limits::check(opts, &mut findings);
    sysctl::check(opts, &ifs, &mut findings);
    firewall::check(&mut findings);
    dcb::check(opts, &ifs, &mut findings);
    Report {
        addr: opts.addr,
        provider: opts.provider.name(),
        roce_mtu: opts.roce_mtu.bytes(),
        peer: opts.peer,
        findings,
    }
}

/// The target's configuration defaults (`nvmf-target` with no flags): poll groups,
/// MDTS, in-capsule data size, provider.
pub fn target_defaults() -> nvmf_target::config::TargetConfig {
    nvmf_target::config::TargetConfig::default_for(
        IpAddr::from([127, 0, 0, 2]),
        "nqn.2026-11.io.nvmf-rdma:target",
        std::path::Path::new("nvmf-target.img"),
        0,
    )
}

/// What running an outside command gave.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CmdOutput {
    /// It ran and exited 0: its standard output.
    Ok(String),
    /// It is not installed (not on `PATH`).
    Missing,
    /// It ran and failed: its exit status and standard error.
    Failed(String),
}

/// Runs `prog args` and collects its output (see [`CmdOutput`]).
pub fn command(prog: &str, args: &[&str]) -> CmdOutput {
    match std::process::Command::new(prog)
        .args(args)
        .stdin(std::process::Stdio::null())
        .output()
    {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => CmdOutput::Missing,
        Err(e) => CmdOutput::Failed(e.to_string()),
        Ok(o) if o.status.success() => CmdOutput::Ok(String::from_utf8_lossy(&o.stdout).into()),
        Ok(o) => CmdOutput::Failed(format!(
            "{}: {}",
            o.status,
            String::from_utf8_lossy(&o.stderr)
                .split_whitespace()
                .collect::<Vec<_>>()
                .join(" ")
        )),
    }
}

/// The bytes of IP, UDP and RoCE headers around a full RDMA WRITE First packet's
/// payload: IP (20, IPv6 40), UDP 8, BTH 12, RETH 16, ICRC 4.
pub fn roce_overhead_bytes(ip: IpAddr) -> u32 {
    let ip_hdr = if ip.to_canonical().is_ipv4() { 20 } else { 40 };
    ip_hdr + 8 + 12 + 16 + 4
}

/// The smallest interface MTU from which the soft provider (and rxe) derive `mtu` as
/// the RoCE MTU ([`Mtu::from_netdev_mtu`]).
pub fn netdev_mtu_for(mtu: Mtu) -> u32 {
    (mtu.bytes()..mtu.bytes() + 256)
        .find(|&m| Mtu::from_netdev_mtu(m) >= mtu)
        .unwrap_or(mtu.bytes() + 256)
}
