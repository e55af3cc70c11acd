//! The command line (clap derive): nvme-cli's subcommands and flags.
//!
//! Every subcommand names its target with nvme-cli's fabrics flags (`-t rdma -a
//! TRADDR -s TRSVCID -w HOST_TRADDR -n SUBNQN -q HOSTNQN -I HOSTID`), as `nvme
//! discover` does, because no kernel device node stands for a controller: each
//! command connects, runs and disconnects. Where nvme-cli's own short flags of an I/O
//! command collide with these (`-s` start block, `-n` namespace ID), the fabrics
//! meaning wins and the I/O flag is long only (`--start-block`, `--namespace-id`).
use std::net::IpAddr;

use clap::{Args, Parser, Subcommand, ValueEnum};

/// nvme-cli's `-o` formats.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum OutputFormat {
    /// Human-readable text.
    Normal,
    /// JSON with nvme-cli's field names.
    Json,
}

/// nvme-cli's `-t` transports; only RDMA is served.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Transport {
    /// NVMe/RDMA (RoCEv2 over the soft provider).
    Rdma,
    /// NVMe/TCP: refused with a message (this tool speaks NVMe/RDMA only).
    Tcp,
    /// Fibre Channel: refused with a message.
    Fc,
    /// The kernel's loop transport: refused with a message.
    Loop,
}

/// The target and the host: nvme-cli's fabrics flags.
#[derive(Args, Clone, Debug)]
pub struct Fabric {
    /// Transport type (nvme-cli's -t); only rdma is served.
    #[arg(short = 't', long = "transport", value_enum, default_value = "rdma")]
    pub transport: Transport,
    /// The target's IP address (TRADDR).
    #[arg(short = 'a', long = "traddr")]
    pub traddr: Option<String>,
    /// The target's RDMA CM port (TRSVCID).
    #[arg(short = 's', long = "trsvcid", default_value_t = 4420)]
    pub trsvcid: u16,
    /// The local address to open the RDMA device on (HOST_TRADDR; default: the
    /// kernel's source address toward the target).
    #[arg(short = 'w', long = "host-traddr")]
    pub host_traddr: Option<String>,
    /// The subsystem NQN (SUBNQN).
    #[arg(short = 'n', long = "nqn")]
    pub nqn: Option<String>,
    /// This host's NQN (default: /etc/nvme/hostnqn, else one made for the process).
    #[arg(short = 'q', long = "hostnqn")]
    pub hostnqn: Option<String>,
    /// This host's ID, a UUID (default: /etc/nvme/hostid, else one made for the process).
    #[arg(short = 'I', long = "hostid")]
    pub hostid: Option<String>,
    /// Keep Alive Timeout in seconds.
    #[arg(short = 'k', long = "keep-alive-tmo", default_value_t = 10)]
    pub keep_alive_tmo: u32,
    /// Output format (nvme-cli's -o).
    #[arg(
        short = 'o',
        long = "output-format",
        value_enum,
        default_value = "normal"
    )]
    pub output: OutputFormat,
}

/// An I/O command's namespace and range (nvme-cli's `--namespace-id`,
/// `--start-block`, `-c/--block-count` 0's based).
#[derive(Args, Clone, Debug)]
pub struct Range {
    /// Namespace ID.
    #[arg(long = "namespace-id", default_value_t = 1)]
    pub namespace_id: u32,
    /// First logical block (nvme-cli's -s, long only here: -s is the TRSVCID).
    #[arg(long = "start-block", default_value_t = 0)]
    pub start_block: u64,
    /// Number of logical blocks, 0's based (nvme-cli's -c).
    #[arg(short = 'c', long = "block-count")]
    pub block_count: Option<u32>,
}

/// `nvmf`, nvme-cli's fabrics and I/O commands over this project's NVMe/RDMA host
/// library (soft RoCEv2 provider, no kernel module, no root).
///
/// There is no kernel controller: every command connects, runs and disconnects
/// (give -a/-s/-n as to `nvme discover`). `connect` holds its controller until SIGINT
/// or SIGTERM and records itself in the state directory ($NVMF_STATE_DIR, else
/// $XDG_RUNTIME_DIR/nvmf, else /tmp/nvmf-UID) so that `list`, `list-subsys` and
/// `disconnect` find it. The soft provider opens one RDMA device per local address:
/// a holder owns its -w address, so run other commands from another -w.
///
/// Output and exit codes are nvme-cli's: `-o json` with its field names, a failed
/// command prints `NVMe status: <name>: <description>(0x<value>)` and any failure
/// exits 1.
#[derive(Parser, Debug)]
#[command(name = "nvmf", version)]
pub struct Cli {
    /// The command.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands (the flattened flag groups are documented on their types).
#[allow(missing_docs)]
#[derive(Subcommand, Debug)]
pub enum Command {
    /// Reads the Discovery log of the discovery controller at -a/-s.
    Discover(Fabric),
    /// Connects subsystem -n at -a/-s, prints the controller and its namespaces, and
    /// holds the controller until SIGINT/SIGTERM (`nvmf disconnect -n NQN`), then
    /// disconnects cleanly.
    Connect {
        #[command(flatten)]
        fabric: Fabric,
        /// I/O queues to ask for (nvme-cli's -i).
        #[arg(short = 'i', long = "nr-io-queues", default_value_t = 1)]
        nr_io_queues: u16,
        /// Entries per I/O queue (nvme-cli's -Q).
        #[arg(short = 'Q', long = "queue-size", default_value_t = 128)]
        queue_size: u16,
        /// Make each namespace a local block device /dev/ublkbN through the kernel's
        /// ublk driver (Linux >= 6.0 with CONFIG_BLK_DEV_UBLK, `modprobe ublk_drv`,
        /// as root), served by this process until SIGINT/SIGTERM, then deleted: one
        /// line per device (`/dev/ublkbN namespace NSID: ...`) once all are up, or
        /// "ublk" in each namespace of `-o json`. mkfs and mount work on it with no
        /// nvme-rdma in the kernel. Needs an nvmf built with the `ublk` feature.
        #[arg(long = "ublk")]
        ublk: bool,
        /// ublk queues per device (with --ublk): each a thread, ublk queue q on I/O
        /// queue q modulo -i.
        #[arg(long = "ublk-queues", default_value_t = super::ublk_map::DEFAULT_QUEUES, requires = "ublk")]
        ublk_queues: u16,
        /// Requests in flight per ublk queue (with --ublk), 1..=4096.
        #[arg(long = "ublk-depth", default_value_t = super::ublk_map::DEFAULT_DEPTH, requires = "ublk")]
        ublk_depth: u16,
    },
    /// Discovers at -a/-s and connects every NVM subsystem listed over RDMA, each on
    /// its own local address (-w may be given once per subsystem: the soft provider
    /// opens one RDMA device per address), prints them and holds them until
    /// SIGINT/SIGTERM.
    ConnectAll {
        #[command(flatten)]
        fabric: Fabric,
        /// More local addresses, one per further subsystem.
        #[arg(long = "host-traddr-more", value_delimiter = ',')]
        more_host_traddr: Vec<IpAddr>,
    },
    /// Disconnects the `nvmf connect` holders of subsystem -n (SIGTERM; waits for
    /// them to disconnect).
    Disconnect {
        /// Subsystem NQN.
        #[arg(short = 'n', long = "nqn")]
        nqn: String,
    },
    /// Disconnects every `nvmf connect` holder of this user.
    DisconnectAll,
    /// Lists the namespaces of the live `nvmf connect` holders (nvme list).
    List {
        /// Output format.
        #[arg(
            short = 'o',
            long = "output-format",
            value_enum,
            default_value = "normal"
        )]
        output: OutputFormat,
    },
    /// Lists the subsystems of the live holders with their paths and ANA states.
    ListSubsys {
        /// Output format.
        #[arg(
            short = 'o',
            long = "output-format",
            value_enum,
            default_value = "normal"
        )]
        output: OutputFormat,
    },
    /// Identify Controller.
    IdCtrl(Fabric),
    /// Identify Namespace.
    IdNs {
        #[command(flatten)]
        fabric: Fabric,
        /// Namespace ID.
        #[arg(long = "namespace-id", default_value_t = 1)]
        namespace_id: u32,
    },
    /// Get Log Page: a hex dump, or the raw bytes with -b.
    GetLog {
        #[command(flatten)]
        fabric: Fabric,
        /// Log page identifier.
        #[arg(short = 'i', long = "log-id", value_parser = parse_u32)]
        log_id: u32,
        /// Bytes to read (a multiple of 4).
        #[arg(short = 'l', long = "log-len", value_parser = parse_u32)]
        log_len: u32,
        /// Namespace ID (default: all, FFFFFFFFh).
        #[arg(long = "namespace-id", default_value = "0xffffffff", value_parser = parse_u32)]
        namespace_id: u32,
        /// Log page offset in bytes (a multiple of 4).
        #[arg(short = 'L', long = "lpo", default_value_t = 0)]
        lpo: u64,
        /// Write the log's raw bytes to stdout.
        #[arg(short = 'b', long = "raw-binary")]
        raw_binary: bool,
    },
    /// The SMART / Health Information log.
    SmartLog {
        #[command(flatten)]
        fabric: Fabric,
        /// Namespace ID (default: the controller, FFFFFFFFh).
        #[arg(long = "namespace-id", default_value = "0xffffffff", value_parser = parse_u32)]
        namespace_id: u32,
    },
    /// The Error Information log.
    ErrorLog {
        #[command(flatten)]
        fabric: Fabric,
        /// Entries to read (default: as many as the controller keeps, ELPE + 1).
        #[arg(short = 'e', long = "log-entries")]
        log_entries: Option<u32>,
    },
    /// Get Features.
    GetFeature {
        #[command(flatten)]
        fabric: Fabric,
        /// Feature identifier.
        #[arg(short = 'f', long = "feature-id", value_parser = parse_u32)]
        feature_id: u32,
        /// Select: 0 current, 1 default, 2 saved, 3 supported capabilities.
        #[arg(long = "sel", default_value_t = 0)]
        sel: u8,
        /// Command Dword 11.
        #[arg(long = "cdw11", default_value = "0", value_parser = parse_u32)]
        cdw11: u32,
        /// Namespace ID.
        #[arg(long = "namespace-id", default_value = "0", value_parser = parse_u32)]
        namespace_id: u32,
    },
    /// Set Features.
    SetFeature {
        #[command(flatten)]
        fabric: Fabric,
        /// Feature identifier.
        #[arg(short = 'f', long = "feature-id", value_parser = parse_u32)]
        feature_id: u32,
        /// The value (Command Dword 11).
        #[arg(short = 'v', long = "value", value_parser = parse_u32)]
        value: u32,
        /// Save across resets (SV).
        #[arg(long = "save")]
        save: bool,
        /// Namespace ID.
        #[arg(long = "namespace-id", default_value = "0", value_parser = parse_u32)]
        namespace_id: u32,
    },
    /// Reads blocks to a file (-d) or stdout.
    Read(Io),
    /// Writes blocks from a file (-d) or stdin.
    Write(Io),
    /// Compares blocks with a file (-d) or stdin (Compare Failure when they differ).
    Compare(Io),
    /// Flush.
    Flush {
        #[command(flatten)]
        fabric: Fabric,
        /// Namespace ID.
        #[arg(long = "namespace-id", default_value_t = 1)]
        namespace_id: u32,
    },
    /// Dataset Management: with --ad, deallocate the ranges.
    Dsm {
        #[command(flatten)]
        fabric: Fabric,
        /// Namespace ID.
        #[arg(long = "namespace-id", default_value_t = 1)]
        namespace_id: u32,
        /// Comma-separated starting LBAs (nvme-cli's -s, long only here).
        #[arg(long = "slbs", value_delimiter = ',', required = true)]
        slbs: Vec<u64>,
        /// Comma-separated lengths in logical blocks (nvme-cli's -b).
        #[arg(short = 'b', long = "blocks", value_delimiter = ',', required = true)]
        blocks: Vec<u32>,
        /// Attribute Deallocate (the only one served).
        #[arg(short = 'd', long = "ad")]
        ad: bool,
    },
    /// Write Zeroes.
    WriteZeroes {
        #[command(flatten)]
        fabric: Fabric,
        #[command(flatten)]
        range: Range,
    },
}

/// `read`, `write`, `compare`: the range, the data size and the data file.
#[allow(missing_docs)]
#[derive(Args, Clone, Debug)]
pub struct Io {
    #[command(flatten)]
    pub fabric: Fabric,
    #[command(flatten)]
    pub range: Range,
    /// Bytes of data (nvme-cli's -z; default: the blocks' size).
    #[arg(short = 'z', long = "data-size")]
    pub data_size: Option<u64>,
    /// The data file (default: stdin for write/compare, stdout for read).
    #[arg(short = 'd', long = "data")]
    pub data: Option<std::path::PathBuf>,
    /// Force Unit Access (writes).
    #[arg(short = 'f', long = "force")]
    pub force: bool,
}

/// A number in decimal or `0x` hex.
pub fn parse_u32(s: &str) -> Result<u32, String> {
    let r = match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(h) => u32::from_str_radix(h, 16),
        None => s.parse(),
    };
    r.map_err(|_| format!("'{s}' is not a 32-bit number (decimal or 0x hex)"))
}
