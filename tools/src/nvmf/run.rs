//! The subcommands, over the host library: each one-shot command connects (admin
//! queue and one I/O queue), runs, and disconnects; `connect` holds.
use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use nvme::{ErrorLogEntry, IdentifyController, IdentifyNamespace, SmartLog, Sqe, Status};
use nvmf_initiator::capsule::DataDir;
use nvmf_initiator::lifecycle::CtrlState;
use nvmf_initiator::{DiscoveryController, Host, HostError, HostOptions};
use serde_json::{json, Value};
use zerocopy::FromBytes;

use super::args::{Command, Fabric, Io, OutputFormat, Transport};
use super::state::{self, HeldNamespace, Holder};
use super::{json as js, status};

/// Why a command failed: an NVMe status (printed as nvme-cli prints it) or anything
/// else (a message naming the cause and the fix).
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// The controller answered with an error status.
    #[error("{}", status::status_line(.status, *.fabrics))]
    Nvme {
        /// The status.
        status: Status,
        /// A Fabrics command (Connect): command specific codes are the Fabrics ones.
        fabrics: bool,
    },
    /// Bad input, an unreachable target, a transport failure, a local I/O error.
    #[error("{0}")]
    Other(String),
}

impl CliError {
    fn from_host(context: &str, e: HostError) -> Self {
        if let HostError::ConnectRefused { status, .. } = &e {
            // Connect's status, with what nvme-cli does not say: what was refused.
            return CliError::Other(format!(
                "{}\n{context}: {e}",
                status::status_line(status, true)
            ));
        }
        match e.nvme_status() {
            Some(status) => CliError::Nvme {
                status,
                fabrics: false,
            },
            None => CliError::Other(format!("{context}: {e}")),
        }
    }
}

type R<T = ()> = Result<T, CliError>;

fn bad(msg: impl Into<String>) -> CliError {
    CliError::Other(msg.into())
}

/// The NQN rules of NVMe Base 2.x §4.5: "nqn." first, at most 223 bytes, UTF-8
/// without NUL or whitespace.
pub fn check_nqn(flag: &str, nqn: &str) -> R {
    if !nqn.starts_with("nqn.")
        || nqn.len() > 223
        || nqn.chars().any(|c| c.is_whitespace() || c == '\0')
    {
        return Err(bad(format!(
            "{flag} {nqn:?} is not an NQN: an NVMe Qualified Name starts with \"nqn.\" \
             (e.g. nqn.2014-08.org.nvmexpress:uuid:... or nqn.2026-11.io.example:disk1), \
             has no spaces and is at most 223 bytes (NVMe Base 2.x §4.5); `nvmf discover` \
             lists the subsystems a target offers"
        )));
    }
    Ok(())
}

fn parse_hostid(s: &str) -> R<[u8; 16]> {
    let hex: String = s.chars().filter(|c| *c != '-').collect();
    let err = || {
        bad(format!(
            "-I {s:?} is not a host ID: give a UUID such as \
             4f1b8c4e-2d2a-4c1e-9a57-3c8f0d6e1b2a"
        ))
    };
    if hex.len() != 32 {
        return Err(err());
    }
    let mut out = [0u8; 16];
    for (i, o) in out.iter_mut().enumerate() {
        *o = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).map_err(|_| err())?;
    }
    Ok(out)
}

/// HostOptions from the fabrics flags; `need_nqn` for everything but discovery.
pub fn host_options(f: &Fabric, need_nqn: bool) -> R<HostOptions> {
    if f.transport != Transport::Rdma {
        return Err(bad(format!(
            "-t {}: nvmf speaks NVMe/RDMA only (RoCEv2 through this project's soft \
             provider): use -t rdma, or nvme-cli for other transports",
            format!("{:?}", f.transport).to_lowercase()
        )));
    }
    let traddr = f.traddr.as_deref().ok_or_else(|| {
        bad("-a TRADDR missing: give the target's IP address, e.g. -a 192.168.77.10 (and -s TRSVCID if it is not 4420)")
    })?;
    let ip: IpAddr = traddr.parse().map_err(|_| {
        bad(format!(
            "-a {traddr:?} is not an IP address: NVMe/RDMA needs the target's IPv4 or IPv6 \
             address (no host names)"
        ))
    })?;
    let subnqn = match (&f.nqn, need_nqn) {
        (Some(n), _) => {
            check_nqn("-n", n)?;
            n.clone()
        }
        (None, true) => {
            return Err(bad(
                "-n SUBNQN missing: give the subsystem's NQN (`nvmf discover -t rdma -a TRADDR` lists them)",
            ))
        }
        (None, false) => nvme::NVMF_DISCOVERY_NQN.to_string(),
    };
    let mut o = HostOptions::new(SocketAddr::new(ip, f.trsvcid), subnqn);
    if let Some(w) = &f.host_traddr {
        o.local_ip = Some(w.parse().map_err(|_| {
            bad(format!(
                "-w {w:?} is not an IP address: give the local address to connect from \
                 (one of this host's addresses)"
            ))
        })?);
    }
    if let Some(q) = &f.hostnqn {
        check_nqn("-q", q)?;
        o.hostnqn = q.clone();
    }
    if let Some(i) = &f.hostid {
        o.hostid = parse_hostid(i)?;
    }
    o.kato_ms = f.keep_alive_tmo.saturating_mul(1000);
    o.io_queues = 1;
    o.queue_depth = 32;
    // One-shot commands: a lost connection fails the command, no reconnect.
    o.ctrl_loss_tmo = Some(Duration::ZERO);
    let local = o.resolve_local_ip().map_err(|e| {
        bad(format!(
            "no local address toward {ip}: {e}; give one with -w"
        ))
    })?;
    if let Some(h) = state::holders()
        .into_iter()
        .find(|h| h.host_traddr == local.to_string() && h.pid != std::process::id())
    {
        return Err(bad(format!(
            "local address {local} is held by `nvmf connect` (pid {}, {} at {}): the soft \
             RDMA provider opens one device per local address; give another -w, or \
             `nvmf disconnect -n {}` first",
            h.pid, h.subnqn, h.traddr, h.subnqn
        )));
    }
    o.local_ip = Some(local);
    Ok(o)
}

fn connect_context(o: &HostOptions) -> String {
    format!(
        "connecting to {} at {} from {}",
        o.subnqn,
        o.traddr,
        o.local_ip.map_or_else(|| "?".into(), |i| i.to_string())
    )
}

async fn connect(o: &HostOptions) -> R<Host> {
    Host::connect(o.clone())
        .await
        .map_err(|e| CliError::from_host(&connect_context(o), e))
}

/// Runs `command`; the caller prints the error and exits 1.
pub fn run(command: Command) -> R {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| bad(format!("starting the async runtime: {e}")))?;
    rt.block_on(dispatch(command))
}

async fn dispatch(command: Command) -> R {
    match command {
        Command::Discover(f) => discover(&f).await,
        Command::Connect {
            fabric,
            nr_io_queues,
            queue_size,
            ublk,
            ublk_queues,
            ublk_depth,
        } => {
            let ublk = ublk.then_some(super::ublk_map::Options {
                queues: ublk_queues,
                depth: ublk_depth,
            });
            connect_hold(&fabric, nr_io_queues, queue_size, ublk).await
        }
        Command::ConnectAll {
            fabric,
            more_host_traddr,
        } => connect_all(&fabric, &more_host_traddr).await,
        Command::Disconnect { nqn } => {
            check_nqn("-n", &nqn)?;
            disconnect(Some(&nqn))
        }
        Command::DisconnectAll => disconnect(None),
        Command::List { output } => list(output),
        Command::ListSubsys { output } => list_subsys(output),
        Command::IdCtrl(f) => {
            let o = host_options(&f, true)?;
            let host = connect(&o).await?;
            let r = id_ctrl(&host, f.output).await;
            finish(host, r).await
        }
        Command::IdNs {
            fabric,
            namespace_id,
        } => {
            let o = host_options(&fabric, true)?;
            let host = connect(&o).await?;
            let r = id_ns(&host, namespace_id, fabric.output).await;
            finish(host, r).await
        }
        Command::GetLog {
            fabric,
            log_id,
            log_len,
            namespace_id,
            lpo,
            raw_binary,
        } => {
            let lid = u8::try_from(log_id)
                .map_err(|_| bad(format!("-i {log_id}: a log page identifier is 0..=255")))?;
            let o = host_options(&fabric, true)?;
            let host = connect(&o).await?;
            let r = get_log(&host, lid, namespace_id, lpo, log_len, raw_binary).await;
            finish(host, r).await
        }
        Command::SmartLog {
            fabric,
            namespace_id,
        } => {
            let o = host_options(&fabric, true)?;
            let host = connect(&o).await?;
            let r = smart_log(&host, namespace_id, fabric.output).await;
            finish(host, r).await
        }
        Command::ErrorLog {
            fabric,
            log_entries,
        } => {
            let o = host_options(&fabric, true)?;
            let host = connect(&o).await?;
            let r = error_log(&host, log_entries, fabric.output).await;
            finish(host, r).await
        }
        Command::GetFeature {
            fabric,
            feature_id,
            sel,
            cdw11,
            namespace_id,
        } => {
            let fid = feature(feature_id)?;
            if sel > 3 {
                return Err(bad(format!(
                    "--sel {sel}: 0 current, 1 default, 2 saved, 3 supported capabilities"
                )));
            }
            let o = host_options(&fabric, true)?;
            let host = connect(&o).await?;
            let r = get_feature(&host, fid, sel, cdw11, namespace_id, fabric.output).await;
            finish(host, r).await
        }
        Command::SetFeature {
            fabric,
            feature_id,
            value,
            save,
            namespace_id,
        } => {
            let fid = feature(feature_id)?;
            let o = host_options(&fabric, true)?;
            let host = connect(&o).await?;
            let r = set_feature(&host, fid, value, save, namespace_id).await;
            finish(host, r).await
        }
        Command::Read(io) => io_command(IoKind::Read, io).await,
        Command::Write(io) => io_command(IoKind::Write, io).await,
        Command::Compare(io) => io_command(IoKind::Compare, io).await,
        Command::Flush {
            fabric,
            namespace_id,
        } => {
            let o = host_options(&fabric, true)?;
            let host = connect(&o).await?;
            let r = async {
                let ns = namespace(&host, namespace_id).await?;
                ns.flush()
                    .await
                    .map_err(|e| CliError::from_host("Flush", e))?;
                eprintln!("NVMe Flush: success");
                Ok(())
            }
            .await;
            finish(host, r).await
        }
        Command::Dsm {
            fabric,
            namespace_id,
            slbs,
            blocks,
            ad,
        } => {
            if !ad {
                return Err(bad(
                    "dsm: only --ad (Attribute Deallocate) is served; add --ad",
                ));
            }
            if slbs.len() != blocks.len() {
                return Err(bad(format!(
                    "dsm: {} starting LBAs (--slbs) but {} lengths (-b): give one length per range",
                    slbs.len(),
                    blocks.len()
                )));
            }
            let o = host_options(&fabric, true)?;
            let host = connect(&o).await?;
            let r = async {
                let ns = namespace(&host, namespace_id).await?;
                let ranges: Vec<(u64, u32)> = slbs.into_iter().zip(blocks).collect();
                ns.deallocate(&ranges)
                    .await
                    .map_err(|e| CliError::from_host("Dataset Management", e))?;
                eprintln!("NVMe DSM: success");
                Ok(())
            }
            .await;
            finish(host, r).await
        }
        Command::WriteZeroes { fabric, range } => {
            let o = host_options(&fabric, true)?;
            let host = connect(&o).await?;
            let r = async {
                let ns = namespace(&host, range.namespace_id).await?;
                let nlb = u64::from(range.block_count.unwrap_or(0)) + 1;
                ns.write_zeroes(range.start_block, nlb)
                    .await
                    .map_err(|e| CliError::from_host("Write Zeroes", e))?;
                eprintln!("NVMe Write Zeroes Success");
                Ok(())
            }
            .await;
            finish(host, r).await
        }
    }
}

fn feature(id: u32) -> R<u8> {
    u8::try_from(id).map_err(|_| bad(format!("-f {id}: a feature identifier is 0..=255")))
}

/// Disconnects `host`, keeping the command's own error first.
async fn finish(host: Host, r: R) -> R {
    let d = host.disconnect().await;
    r?;
    d.map_err(|e| CliError::from_host("disconnecting", e))
}

async fn namespace(host: &Host, nsid: u32) -> R<nvmf_initiator::Namespace> {
    match host.namespace(nsid).await {
        Ok(ns) => Ok(ns),
        Err(HostError::Protocol(m)) => Err(bad(format!(
            "{m}: the controller's active namespaces are {:?} (give one with --namespace-id)",
            host.active_namespace_ids()
        ))),
        Err(e) => Err(CliError::from_host(
            &format!("Identify Namespace {nsid}"),
            e,
        )),
    }
}

async fn identify(host: &Host, cns: nvme::IdentifyCns, nsid: u32) -> R<Vec<u8>> {
    let len = nvmf_initiator::identify::IDENTIFY_LEN;
    let buf = host
        .alloc(len)
        .await
        .map_err(|e| CliError::from_host("buffer", e))?;
    let (_, buf) = host
        .admin_passthrough(
            Sqe::identify(0, cns, nsid, 0),
            DataDir::ControllerToHost { len },
            Some(buf),
            None,
        )
        .await
        .map_err(|e| CliError::from_host("Identify", e))?;
    Ok(buf.map(|b| b[..len].to_vec()).unwrap_or_default())
}

fn print_value(v: &Value, output: OutputFormat, title: &str) {
    match output {
        OutputFormat::Json => {
            println!(
                "{}",
                serde_json::to_string_pretty(v).unwrap_or_else(|_| v.to_string())
            );
        }
        OutputFormat::Normal => {
            if !title.is_empty() {
                println!("{title}");
            }
            print_normal(v, "");
        }
    }
}

fn print_normal(v: &Value, indent: &str) {
    if let Value::Object(m) = v {
        for (k, x) in m {
            match x {
                Value::Array(a) => {
                    for (i, e) in a.iter().enumerate() {
                        println!("{indent}{k}[{i}]:");
                        print_normal(e, &format!("{indent}  "));
                    }
                }
                Value::String(s) => println!("{indent}{k:<10}: {s}"),
                x => println!("{indent}{k:<10}: {x}"),
            }
        }
    }
}

async fn id_ctrl(host: &Host, output: OutputFormat) -> R {
    let data = identify(host, nvme::IdentifyCns::Controller, 0).await?;
    let c = IdentifyController::read_from_bytes(&data)
        .map_err(|_| bad("Identify Controller data is short"))?;
    print_value(&js::id_ctrl(&c), output, "NVME Identify Controller:");
    Ok(())
}

async fn id_ns(host: &Host, nsid: u32, output: OutputFormat) -> R {
    let data = identify(host, nvme::IdentifyCns::Namespace, nsid).await?;
    let n = IdentifyNamespace::read_from_bytes(&data)
        .map_err(|_| bad("Identify Namespace data is short"))?;
    if n.nsze.get() == 0 {
        return Err(bad(format!(
            "namespace {nsid} is not active on this controller (its active namespaces: {:?}); \
             give one with --namespace-id",
            host.active_namespace_ids()
        )));
    }
    print_value(
        &js::id_ns(&n),
        output,
        &format!("NVME Identify Namespace {nsid}:"),
    );
    Ok(())
}

async fn log_page(host: &Host, lid: u8, nsid: u32, offset: u64, len: usize) -> R<Vec<u8>> {
    host.get_log_page(lid, nsid, offset, len)
        .await
        .map_err(|e| CliError::from_host("Get Log Page", e))
}

async fn get_log(host: &Host, lid: u8, nsid: u32, lpo: u64, len: u32, raw: bool) -> R {
    let data = log_page(host, lid, nsid, lpo, len as usize).await?;
    if raw {
        std::io::stdout()
            .write_all(&data)
            .map_err(|e| bad(format!("writing the log to stdout: {e}")))?;
        return Ok(());
    }
    println!("Device:nvmf log-id:{lid} namespace-id:{nsid:#x}");
    hex_dump(&data);
    Ok(())
}

fn hex_dump(data: &[u8]) {
    println!("       0  1  2  3  4  5  6  7  8  9  a  b  c  d  e  f");
    for (i, row) in data.chunks(16).enumerate() {
        let hex: Vec<String> = row.iter().map(|b| format!("{b:02x}")).collect();
        let text: String = row
            .iter()
            .map(|&b| {
                if (0x20..0x7f).contains(&b) {
                    b as char
                } else {
                    '.'
                }
            })
            .collect();
        println!("{:04x}: {:<47} \"{text}\"", i * 16, hex.join(" "));
    }
}

async fn smart_log(host: &Host, nsid: u32, output: OutputFormat) -> R {
    let data = log_page(host, nvme::LogPageId::SmartHealth.value(), nsid, 0, 512).await?;
    let s = SmartLog::read_from_bytes(&data).map_err(|_| bad("SMART log is short"))?;
    print_value(
        &js::smart_log(&s),
        output,
        &format!("Smart Log for NVME device:nvmf namespace-id:{nsid:x}"),
    );
    Ok(())
}

async fn error_log(host: &Host, entries: Option<u32>, output: OutputFormat) -> R {
    let elpe = u32::from(elpe(host).await?) + 1;
    let n = entries.unwrap_or(elpe).clamp(1, elpe);
    let data = log_page(
        host,
        nvme::LogPageId::ErrorInformation.value(),
        0xFFFF_FFFF,
        0,
        n as usize * 64,
    )
    .await?;
    let list: Vec<ErrorLogEntry> = data
        .chunks_exact(64)
        .filter_map(|c| ErrorLogEntry::read_from_bytes(c).ok())
        .collect();
    print_value(
        &js::error_log(&list),
        output,
        "Error Log Entries for device:nvmf",
    );
    Ok(())
}

/// ELPE (Identify Controller byte 262, 0's based), read now.
async fn elpe(host: &Host) -> R<u8> {
    let data = identify(host, nvme::IdentifyCns::Controller, 0).await?;
    let c = IdentifyController::read_from_bytes(&data)
        .map_err(|_| bad("Identify Controller data is short"))?;
    Ok(c.elpe)
}

fn feature_name(fid: u8) -> &'static str {
    match fid {
        0x01 => "Arbitration",
        0x02 => "Power Management",
        0x03 => "LBA Range Type",
        0x04 => "Temperature Threshold",
        0x05 => "Error Recovery",
        0x06 => "Volatile Write Cache",
        0x07 => "Number of Queues",
        0x08 => "Interrupt Coalescing",
        0x09 => "Interrupt Vector Configuration",
        0x0a => "Write Atomicity Normal",
        0x0b => "Async Event Configuration",
        0x0c => "Autonomous Power State Transition",
        0x0d => "Host Memory Buffer",
        0x0e => "Timestamp",
        0x0f => "Keep Alive Timer",
        0x10 => "Host Controlled Thermal Management",
        0x11 => "Non-Operational Power State Config",
        0x80 => "Software Progress",
        0x81 => "Host Identifier",
        0x82 => "Reservation Notification Mask",
        0x83 => "Reservation Persistence",
        0x84 => "Namespace Write Protection Config",
        _ => "Unknown",
    }
}

async fn get_feature(
    host: &Host,
    fid: u8,
    sel: u8,
    cdw11: u32,
    nsid: u32,
    output: OutputFormat,
) -> R {
    let mut sqe = Sqe::new(nvme::AdminOpcode::GetFeatures.value(), 0).with_nsid(nsid);
    sqe.set_cdw10(u32::from(fid) | (u32::from(sel) << 8));
    sqe.set_cdw11(cdw11);
    let (cqe, _) = host
        .admin_passthrough(sqe, DataDir::None, None, None)
        .await
        .map_err(|e| CliError::from_host("Get Features", e))?;
    let value = cqe.dw0();
    match output {
        OutputFormat::Json => print_value(
            &json!({"feature_id": fid, "name": feature_name(fid), "sel": sel, "value": value}),
            output,
            "",
        ),
        OutputFormat::Normal => println!(
            "get-feature:{fid:#04x} ({}), {} value:{value:#010x}",
            feature_name(fid),
            ["Current", "Default", "Saved", "Supported capabilities"][usize::from(sel & 3)]
        ),
    }
    Ok(())
}

async fn set_feature(host: &Host, fid: u8, value: u32, save: bool, nsid: u32) -> R {
    let mut sqe = Sqe::new(nvme::AdminOpcode::SetFeatures.value(), 0).with_nsid(nsid);
    sqe.set_cdw10(u32::from(fid) | if save { 1 << 31 } else { 0 });
    sqe.set_cdw11(value);
    host.admin_passthrough(sqe, DataDir::None, None, None)
        .await
        .map_err(|e| CliError::from_host("Set Features", e))?;
    println!(
        "set-feature:{fid:#04x} ({}), value:{value:#010x}, cdw12:0x00000000, save:{}",
        feature_name(fid),
        u8::from(save)
    );
    Ok(())
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum IoKind {
    Read,
    Write,
    Compare,
}

impl IoKind {
    fn name(self) -> &'static str {
        match self {
            IoKind::Read => "read",
            IoKind::Write => "write",
            IoKind::Compare => "compare",
        }
    }
}

fn read_input(io: &Io, len: Option<usize>) -> R<Vec<u8>> {
    let mut data = Vec::new();
    let r = match &io.data {
        Some(p) => std::fs::File::open(p)
            .and_then(|f| match len {
                Some(n) => f.take(n as u64).read_to_end(&mut data),
                None => {
                    let mut f = f;
                    f.read_to_end(&mut data)
                }
            })
            .map_err(|e| bad(format!("-d {}: {e}", p.display()))),
        None => {
            let stdin = std::io::stdin().lock();
            match len {
                Some(n) => stdin.take(n as u64).read_to_end(&mut data),
                None => {
                    let mut s = stdin;
                    s.read_to_end(&mut data)
                }
            }
            .map_err(|e| bad(format!("reading stdin: {e}")))
        }
    };
    r.map(|_| data)
}

async fn io_command(kind: IoKind, io: Io) -> R {
    if let Some(p) = &io.data {
        if kind != IoKind::Read && !p.exists() {
            return Err(bad(format!("-d {}: no such file", p.display())));
        }
    }
    let o = host_options(&io.fabric, true)?;
    let host = connect(&o).await?;
    let r = io_run(kind, &host, &io).await;
    finish(host, r).await
}

async fn io_run(kind: IoKind, host: &Host, io: &Io) -> R {
    let ns = namespace(host, io.range.namespace_id).await?;
    let bs = u64::from(ns.block_size);
    let slba = io.range.start_block;
    // The blocks: -c (0's based), else from -z, else (write/compare) the input's size.
    let (nlb, data) = match (io.range.block_count, io.data_size, kind) {
        (Some(c), _, IoKind::Read) => (u64::from(c) + 1, None),
        (None, Some(z), IoKind::Read) => (z.div_ceil(bs).max(1), None),
        (None, None, IoKind::Read) => (1, None),
        (c, z, _) => {
            let want = c.map(|c| (u64::from(c) + 1) * bs).or(z);
            let d = read_input(io, want.map(|w| w as usize))?;
            let nlb = match c {
                Some(c) => u64::from(c) + 1,
                None => (want.unwrap_or(d.len() as u64)).div_ceil(bs).max(1),
            };
            (nlb, Some(d))
        }
    };
    if let Some(z) = io.data_size {
        if z < nlb * bs {
            return Err(bad(format!(
                "-z {z}: {nlb} blocks of {bs} bytes need a data size of at least {} (or give -c)",
                nlb * bs
            )));
        }
    }
    if slba.checked_add(nlb).is_none_or(|e| e > ns.nlb) {
        return Err(bad(format!(
            "blocks {slba}..+{nlb} are beyond namespace {}'s {} blocks",
            ns.nsid, ns.nlb
        )));
    }
    let len = (nlb * bs) as usize;
    match kind {
        IoKind::Read => {
            let mut buf = vec![0u8; len];
            ns.read(slba, &mut buf)
                .await
                .map_err(|e| CliError::from_host("Read", e))?;
            let out = io.data_size.map_or(len, |z| (z as usize).min(len));
            match &io.data {
                Some(p) => std::fs::write(p, &buf[..out])
                    .map_err(|e| bad(format!("-d {}: {e}", p.display())))?,
                None => {
                    let mut so = std::io::stdout().lock();
                    so.write_all(&buf[..out])
                        .and_then(|_| so.flush())
                        .map_err(|e| bad(format!("writing stdout: {e}")))?;
                }
            }
        }
        IoKind::Write => {
            let mut buf = data.unwrap_or_default();
            buf.resize(len, 0);
            ns.write(slba, &buf, io.force)
                .await
                .map_err(|e| CliError::from_host("Write", e))?;
        }
        IoKind::Compare => {
            let mut buf = data.unwrap_or_default();
            buf.resize(len, 0);
            compare(host, &ns, slba, &buf).await?;
        }
    }
    eprintln!("{}: Success", kind.name());
    Ok(())
}

/// Compare (NVM Command Set 1.x §3.3.1) of `data` with the blocks from `slba`, in
/// commands of at most 64 KiB.
async fn compare(host: &Host, ns: &nvmf_initiator::Namespace, slba: u64, data: &[u8]) -> R {
    let bs = ns.block_size as usize;
    let step = ((64 << 10) / bs).max(1) * bs;
    for (i, part) in data.chunks(step).enumerate() {
        let mut b = host
            .alloc(part.len())
            .await
            .map_err(|e| CliError::from_host("buffer", e))?;
        b[..part.len()].copy_from_slice(part);
        let at = slba + (i * step / bs) as u64;
        let mut sqe = Sqe::new(nvme::NvmOpcode::Compare.value(), 0).with_nsid(ns.nsid);
        sqe.set_slba(at);
        sqe.set_cdw12((part.len() / bs - 1) as u32);
        ns.passthrough(sqe, DataDir::HostToController { len: part.len() }, Some(b))
            .await
            .map_err(|e| CliError::from_host("Compare", e.error))?;
    }
    Ok(())
}

async fn discover(f: &Fabric) -> R {
    let o = host_options(f, false)?;
    let ctx = format!(
        "discovery controller at {} from {}",
        o.traddr,
        o.local_ip.map_or_else(|| "?".into(), |i| i.to_string())
    );
    let log = tokio::task::spawn_blocking(move || {
        let dc = DiscoveryController::connect(&o)?;
        let log = dc.log();
        let d = dc.disconnect();
        let log = log?;
        d.map(|_| log)
    })
    .await
    .map_err(|_| bad("discovery thread panicked"))?
    .map_err(|e| CliError::from_host(&ctx, e))?;
    match f.output {
        OutputFormat::Json => print_value(&js::discovery_log(&log), f.output, ""),
        OutputFormat::Normal => {
            println!(
                "\nDiscovery Log Number of Records {}, Generation counter {}",
                log.entries.len(),
                log.genctr
            );
            for (i, e) in log.entries.iter().enumerate() {
                println!("=====Discovery Log Entry {i}======");
                if let Value::Object(m) = js::discovery_record(e) {
                    for (k, v) in m {
                        let v = match v {
                            Value::String(s) => s,
                            Value::Number(n) if k == "rdma_pkey" => {
                                format!("{:#06x}", n.as_u64().unwrap_or(0))
                            }
                            v => v.to_string(),
                        };
                        println!("{:<8} {v}", format!("{k}:"));
                    }
                }
            }
        }
    }
    Ok(())
}

/// The namespaces of `host` with their ANA states (read now).
async fn held_namespaces(host: &Host) -> R<Vec<HeldNamespace>> {
    let info = host.controller_info().clone();
    let mut ana = std::collections::HashMap::new();
    if info.cmic & 0x08 != 0 {
        // In pieces of at most 4 KiB (one admin command), until the log is whole.
        let len = nvmf_initiator::aen::ana_log_len(&info).next_multiple_of(4);
        let mut raw = Vec::with_capacity(len);
        while raw.len() < len && !(raw.len() >= 16 && nvmf_initiator::aen::ana_log_is_whole(&raw)) {
            let piece = (len - raw.len()).min(4096);
            let lid = nvme::LogPageId::AnaLog.value();
            raw.extend(log_page(host, lid, 0xFFFF_FFFF, raw.len() as u64, piece).await?);
        }
        if let Ok(log) = nvme::AnaLog::decode(&raw) {
            for g in log.groups {
                ana.insert(g.grpid, g.state.name().to_string());
            }
        }
    }
    let mut out = Vec::new();
    for nsid in host
        .namespaces()
        .await
        .map_err(|e| CliError::from_host("Identify (active namespaces)", e))?
    {
        let n = host
            .identify_namespace(nsid)
            .await
            .map_err(|e| CliError::from_host("Identify Namespace", e))?;
        out.push(HeldNamespace {
            nsid,
            nsze: n.nsze,
            lba_size: n.block_size,
            anagrpid: n.anagrpid,
            ana_state: ana.get(&n.anagrpid).cloned().unwrap_or_default(),
            ublk: None,
        });
    }
    Ok(out)
}

fn holder_of(host: &Host, o: &HostOptions, namespaces: Vec<HeldNamespace>) -> Holder {
    let c = host.controller_info();
    Holder {
        pid: std::process::id(),
        subnqn: o.subnqn.clone(),
        traddr: o.traddr.ip().to_string(),
        trsvcid: o.traddr.port(),
        host_traddr: o.local_ip.map(|i| i.to_string()).unwrap_or_default(),
        hostnqn: o.hostnqn.clone(),
        hostid: super::json::uuid_text(&o.hostid),
        cntlid: c.cntlid,
        model: c.model_number.clone(),
        serial: c.serial_number.clone(),
        firmware: c.firmware_revision.clone(),
        state: "live".into(),
        namespaces,
    }
}

fn print_connected(holders: &[Holder], output: OutputFormat) {
    match output {
        OutputFormat::Json => {
            let v: Vec<Value> = holders
                .iter()
                .map(|h| {
                    json!({
                        "device": format!("nvmf-{}", h.pid),
                        "pid": h.pid,
                        "subnqn": h.subnqn,
                        "traddr": h.traddr,
                        "trsvcid": h.trsvcid.to_string(),
                        "host_traddr": h.host_traddr,
                        "hostnqn": h.hostnqn,
                        "cntlid": h.cntlid,
                        "mn": h.model,
                        "sn": h.serial,
                        "fr": h.firmware,
                        "namespaces": h.namespaces,
                    })
                })
                .collect();
            let v = if v.len() == 1 {
                v[0].clone()
            } else {
                Value::Array(v)
            };
            print_value(&v, output, "");
        }
        OutputFormat::Normal => {
            for h in holders {
                println!(
                    "connected {} at {}:{} from {}: controller {} ({}, sn {}, fr {}), pid {}",
                    h.subnqn,
                    h.traddr,
                    h.trsvcid,
                    h.host_traddr,
                    h.cntlid,
                    h.model,
                    h.serial,
                    h.firmware,
                    h.pid
                );
                for n in h.namespaces.iter().filter(|n| n.ublk.is_some()) {
                    println!(
                        "{} namespace {}: {} blocks of {} bytes",
                        n.ublk.as_deref().unwrap_or(""),
                        n.nsid,
                        n.nsze,
                        n.lba_size
                    );
                }
                for n in h.namespaces.iter().filter(|n| n.ublk.is_none()) {
                    println!(
                        "  namespace {}: {} blocks of {} bytes{}",
                        n.nsid,
                        n.nsze,
                        n.lba_size,
                        if n.ana_state.is_empty() {
                            String::new()
                        } else {
                            format!(", ANA group {} {}", n.anagrpid, n.ana_state)
                        }
                    );
                }
            }
        }
    }
    let _ = std::io::stdout().flush();
}

fn stop_flag() -> R<Arc<AtomicBool>> {
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(sig, stop.clone())
            .map_err(|e| bad(format!("installing the signal handler: {e}")))?;
    }
    Ok(stop)
}

/// Holds `hosts` until SIGINT/SIGTERM, republishing ANA changes; then disconnects.
/// With `ublk` (one controller), each namespace is first made a ublk block device,
/// deleted again before the disconnect.
async fn hold(
    mut held: Vec<(Host, HostOptions)>,
    output: OutputFormat,
    ublk: Option<super::ublk_map::Options>,
) -> R {
    let stop = stop_flag()?;
    let mut holders = Vec::new();
    for (h, o) in &held {
        let ns = held_namespaces(h).await?;
        holders.push(holder_of(h, o, ns));
    }
    #[cfg(feature = "ublk")]
    let devices = match (ublk, held.first()) {
        (Some(opts), Some((h, _))) => {
            let d = ublk_start(h, opts).await;
            let d = match d {
                Ok(d) => d,
                Err(e) => {
                    for (h, _) in held.drain(..) {
                        let _ = h.disconnect().await;
                    }
                    return Err(e);
                }
            };
            for n in holders[0].namespaces.iter_mut() {
                n.ublk = d
                    .ready
                    .iter()
                    .find(|r| r.nsid == n.nsid)
                    .map(|r| r.path.clone());
            }
            Some(d)
        }
        _ => None,
    };
    #[cfg(not(feature = "ublk"))]
    let _ = ublk;
    // One holder file per process: the first controller's (connect-all lists each
    // subsystem in the same file's siblings below).
    let me = merge(&holders);
    state::publish(&me).map_err(|e| {
        bad(format!(
            "writing the state file in {}: {e} (set NVMF_STATE_DIR to a writable directory)",
            state::dir().display()
        ))
    })?;
    print_connected(&holders, output);
    let mut events: Vec<_> = held.iter().map(|(h, _)| h.events()).collect();
    let mut result = Ok(());
    while !stop.load(Ordering::Relaxed) {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let mut changed = false;
        for (i, ev) in events.iter_mut().enumerate() {
            while let Ok(e) = ev.try_recv() {
                if matches!(
                    e,
                    nvmf_initiator::ControllerEvent::AnaChanged { .. }
                        | nvmf_initiator::ControllerEvent::NamespacesChanged { .. }
                ) {
                    if let Ok(mut ns) = held_namespaces(&held[i].0).await {
                        for n in ns.iter_mut() {
                            n.ublk = holders[i]
                                .namespaces
                                .iter()
                                .find(|o| o.nsid == n.nsid)
                                .and_then(|o| o.ublk.clone());
                        }
                        holders[i].namespaces = ns;
                        changed = true;
                    }
                }
            }
        }
        if let Some((h, o)) = held.iter().find(|(h, _)| h.state() == CtrlState::Dead) {
            let _ = h;
            result = Err(bad(format!(
                "the controller of {} at {} was lost and did not come back within \
                 ctrl_loss_tmo: disconnected",
                o.subnqn, o.traddr
            )));
            break;
        }
        if changed {
            let _ = state::publish(&merge(&holders));
        }
    }
    #[cfg(feature = "ublk")]
    if let Some(d) = devices {
        // The block devices go first (their queues drain), then the controller.
        let r = tokio::task::spawn_blocking(move || d.stop())
            .await
            .map_err(|_| bad("the ublk teardown thread panicked"))
            .and_then(|r| r.map_err(bad));
        if result.is_ok() {
            result = r;
        }
    }
    state::withdraw(std::process::id());
    let mut first = result;
    for (h, o) in held.drain(..) {
        if let Err(e) = h.disconnect().await {
            if first.is_ok() {
                first = Err(CliError::from_host(
                    &format!("disconnecting {}", o.subnqn),
                    e,
                ));
            }
        }
    }
    first
}

/// The holder file of a process holding several controllers: the first's, with the
/// namespaces of all (connect-all).
fn merge(holders: &[Holder]) -> Holder {
    let mut h = holders[0].clone();
    if holders.len() > 1 {
        h.state = format!("live ({} controllers)", holders.len());
    }
    h
}

/// Starts the ublk devices of every active namespace of `host`.
#[cfg(feature = "ublk")]
async fn ublk_start(host: &Host, opts: super::ublk_map::Options) -> R<super::ublk::Devices> {
    let mut namespaces = Vec::new();
    for nsid in host.active_namespace_ids() {
        namespaces.push(namespace(host, nsid).await?);
    }
    if namespaces.is_empty() {
        return Err(bad(
            "--ublk: the controller has no active namespace to make a block device of",
        ));
    }
    let c = host.controller_info();
    let features = super::ublk_map::Features::from_identify(c.oncs, c.vwc);
    let rt = tokio::runtime::Handle::current();
    tokio::task::spawn_blocking(move || super::ublk::start(rt, namespaces, features, opts))
        .await
        .map_err(|_| bad("the ublk start thread panicked"))?
        .map_err(bad)
}

async fn connect_hold(
    f: &Fabric,
    io_queues: u16,
    depth: u16,
    ublk: Option<super::ublk_map::Options>,
) -> R {
    if let Some(u) = &ublk {
        // Before connecting: a kernel without ublk, or a user who may not use it, is
        // told at once.
        u.check().map_err(bad)?;
        super::ublk_map::check_kernel().map_err(bad)?;
        if !cfg!(feature = "ublk") {
            return Err(bad(
                "--ublk: this nvmf was built without ublk support: build it with \
                 `cargo build -p rdma-tools --features ublk --bin nvmf` (libublk's \
                 bindings need libclang-dev)",
            ));
        }
    }
    let mut o = host_options(f, true)?;
    o.io_queues = io_queues.max(1);
    o.queue_depth = depth.max(2);
    o.ctrl_loss_tmo = Some(nvmf_initiator::lifecycle::DEFAULT_CTRL_LOSS_TMO);
    let host = connect(&o).await?;
    hold(vec![(host, o)], f.output, ublk).await
}

async fn connect_all(f: &Fabric, more: &[IpAddr]) -> R {
    let o = host_options(f, false)?;
    let ctx = format!("discovery controller at {}", o.traddr);
    let entries = {
        let o = o.clone();
        tokio::task::spawn_blocking(move || nvmf_initiator::discovery::discover(&o))
            .await
            .map_err(|_| bad("discovery thread panicked"))?
            .map_err(|e| CliError::from_host(&ctx, e))?
    };
    let mut locals: Vec<IpAddr> = o.local_ip.into_iter().chain(more.iter().copied()).collect();
    locals.reverse();
    let mut held = Vec::new();
    for e in entries.iter().filter(|e| e.is_rdma_nvm()) {
        let Some(local) = locals.pop() else {
            eprintln!(
                "{} at {}: not connected: no local address left (the soft provider opens \
                 one RDMA device per local address): add one with --host-traddr-more",
                e.subnqn, e.traddr
            );
            continue;
        };
        let addr = match e.socket_addr() {
            Ok(a) => a,
            Err(err) => {
                eprintln!("{}: {err}", e.subnqn);
                continue;
            }
        };
        let mut so = o.clone();
        so.traddr = addr;
        so.subnqn = e.subnqn.clone();
        so.local_ip = Some(local);
        so.ctrl_loss_tmo = Some(nvmf_initiator::lifecycle::DEFAULT_CTRL_LOSS_TMO);
        match connect(&so).await {
            Ok(h) => held.push((h, so)),
            Err(err) => eprintln!("{err}"),
        }
    }
    if held.is_empty() {
        return Err(bad(format!(
            "no NVM subsystem connected ({} discovery log entries at {})",
            entries.len(),
            o.traddr
        )));
    }
    hold(held, f.output, None).await
}

fn disconnect(nqn: Option<&str>) -> R {
    let targets: Vec<Holder> = state::holders()
        .into_iter()
        .filter(|h| nqn.is_none_or(|n| h.subnqn == n))
        .collect();
    for h in &targets {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(h.pid as i32),
            nix::sys::signal::Signal::SIGTERM,
        );
    }
    let deadline = Instant::now() + Duration::from_secs(20);
    let pending = || {
        let live: Vec<u32> = state::holders().iter().map(|h| h.pid).collect();
        targets.iter().filter(|t| live.contains(&t.pid)).count()
    };
    while pending() > 0 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    let left = pending();
    if left > 0 {
        return Err(bad(format!(
            "{left} holder(s) did not disconnect within 20 s (pids {:?})",
            targets.iter().map(|t| t.pid).collect::<Vec<_>>()
        )));
    }
    match nqn {
        Some(n) => println!("NQN:{n} disconnected {} controller(s)", targets.len()),
        None => println!("disconnected {} controller(s)", targets.len()),
    }
    Ok(())
}

fn list(output: OutputFormat) -> R {
    let holders = state::holders();
    let mut devices = Vec::new();
    for h in &holders {
        for n in &h.namespaces {
            let bytes = n.nsze * u64::from(n.lba_size);
            devices.push(json!({
                "NameSpace": n.nsid,
                "DevicePath": h.device_name(n.nsid),
                "Firmware": h.firmware,
                "Index": devices.len(),
                "ModelNumber": h.model,
                "SerialNumber": h.serial,
                "UsedBytes": bytes,
                "MaximumLBA": n.nsze,
                "PhysicalSize": bytes,
                "SectorSize": n.lba_size,
            }));
        }
    }
    match output {
        OutputFormat::Json => print_value(&json!({ "Devices": devices }), output, ""),
        OutputFormat::Normal => {
            println!(
                "{:<21} {:<20} {:<40} {:<9} {:<26} {:<16} {:<8}",
                "Node", "SN", "Model", "Namespace", "Usage", "Format", "FW Rev"
            );
            println!(
                "{} {} {} {} {} {} {}",
                "-".repeat(21),
                "-".repeat(20),
                "-".repeat(40),
                "-".repeat(9),
                "-".repeat(26),
                "-".repeat(16),
                "-".repeat(8)
            );
            for d in &devices {
                let s = |k: &str| d[k].as_str().unwrap_or("").to_string();
                let bytes = d["PhysicalSize"].as_u64().unwrap_or(0);
                println!(
                    "{:<21} {:<20} {:<40} {:<9} {:<26} {:<16} {:<8}",
                    s("DevicePath"),
                    s("SerialNumber"),
                    s("ModelNumber"),
                    d["NameSpace"],
                    format!(
                        "{:.2} GB / {:.2} GB",
                        bytes as f64 / 1e9,
                        bytes as f64 / 1e9
                    ),
                    format!("{:<3} B +  0 B", d["SectorSize"]),
                    s("Firmware")
                );
            }
        }
    }
    Ok(())
}

fn list_subsys(output: OutputFormat) -> R {
    let holders = state::holders();
    let mut hosts: Vec<(String, String, Vec<&Holder>)> = Vec::new();
    for h in &holders {
        match hosts.iter_mut().find(|(n, _, _)| *n == h.hostnqn) {
            Some(e) => e.2.push(h),
            None => hosts.push((h.hostnqn.clone(), h.hostid.clone(), vec![h])),
        }
    }
    let value: Vec<Value> = hosts
        .iter()
        .map(|(hostnqn, hostid, hs)| {
            let mut subs: Vec<(String, Vec<&Holder>)> = Vec::new();
            for h in hs {
                match subs.iter_mut().find(|(n, _)| *n == h.subnqn) {
                    Some(e) => e.1.push(h),
                    None => subs.push((h.subnqn.clone(), vec![h])),
                }
            }
            json!({
                "HostNQN": hostnqn,
                "HostID": hostid,
                "Subsystems": subs.iter().enumerate().map(|(i, (nqn, paths))| json!({
                    "Name": format!("nvmf-subsys{i}"),
                    "NQN": nqn,
                    "Paths": paths.iter().map(|p| json!({
                        "Name": format!("nvmf-{}", p.pid),
                        "Transport": "rdma",
                        "Address": format!("traddr={},trsvcid={},host_traddr={}", p.traddr, p.trsvcid, p.host_traddr),
                        "State": p.state,
                        "ANAState": p.namespaces.first().map(|n| n.ana_state.clone()).unwrap_or_default(),
                        "Namespaces": p.namespaces.iter().map(|n| json!({
                            "NSID": n.nsid, "ANAGroup": n.anagrpid, "ANAState": n.ana_state,
                        })).collect::<Vec<_>>(),
                    })).collect::<Vec<_>>(),
                })).collect::<Vec<_>>(),
            })
        })
        .collect();
    match output {
        OutputFormat::Json => print_value(&Value::Array(value), output, ""),
        OutputFormat::Normal => {
            for h in &value {
                for s in h["Subsystems"].as_array().into_iter().flatten() {
                    println!(
                        "{} - NQN={}\n\\",
                        s["Name"].as_str().unwrap_or(""),
                        s["NQN"].as_str().unwrap_or("")
                    );
                    for p in s["Paths"].as_array().into_iter().flatten() {
                        let ana = p["ANAState"].as_str().unwrap_or("");
                        println!(
                            " +- {} rdma {} {}{}",
                            p["Name"].as_str().unwrap_or(""),
                            p["Address"].as_str().unwrap_or(""),
                            p["State"].as_str().unwrap_or(""),
                            if ana.is_empty() {
                                String::new()
                            } else {
                                format!(" {ana}")
                            }
                        );
                    }
                }
            }
        }
    }
    Ok(())
}
