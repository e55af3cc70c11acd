use std::net::IpAddr;

use bitflags::bitflags;

bitflags! {
    /// Memory access rights of an MR or MW (`enum ibv_access_flags`, IBTA Vol 1 §10.6.3).
    ///
    /// Local read access is always granted. Remote write and remote atomic require local
    /// write (IBTA o10-31), checked at registration.
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
    pub struct AccessFlags: u32 {
        /// IBV_ACCESS_LOCAL_WRITE: the HCA may write the region (receive buffers, RDMA READ sinks).
        const LOCAL_WRITE = 1;
        /// IBV_ACCESS_REMOTE_WRITE: a peer may RDMA WRITE into the region.
        const REMOTE_WRITE = 1 << 1;
        /// IBV_ACCESS_REMOTE_READ: a peer may RDMA READ from the region.
        const REMOTE_READ = 1 << 2;
        /// IBV_ACCESS_REMOTE_ATOMIC (atomics are not implemented; accepted for parity).
        const REMOTE_ATOMIC = 1 << 3;
        /// IBV_ACCESS_MW_BIND: memory windows may be bound over the region.
        const MW_BIND = 1 << 4;
    }
}

bitflags! {
    /// Flags of a send work request (`enum ibv_send_flags`).
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
    pub struct SendFlags: u32 {
        /// IBV_SEND_FENCE: wait for prior RDMA READs to complete before this WR.
        const FENCE = 1;
        /// IBV_SEND_SIGNALED: generate a work completion on success.
        const SIGNALED = 1 << 1;
        /// IBV_SEND_SOLICITED: set the SE bit of the last packet.
        const SOLICITED = 1 << 2;
        /// IBV_SEND_INLINE: copy the payload at post time; the lkeys are not checked.
        const INLINE = 1 << 3;
    }
}

/// Queue pair states (`enum ibv_qp_state`, IBTA Vol 1 §10.3.1).
///
/// `SqError` is the send-queue-error state (IBV_QPS_SQE), spelled out so it is not
/// confused with an NVMe submission queue entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum QpState {
    #[default]
    Reset,
    Init,
    /// Ready to receive.
    Rtr,
    /// Ready to send.
    Rts,
    /// Send queue drained.
    Sqd,
    /// Send queue error (IBV_QPS_SQE).
    SqError,
    Error,
}

/// Queue pair transport service (`enum ibv_qp_type`, IBTA Vol 1 §9.8.1).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum QpType {
    /// Reliable Connection (IBV_QPT_RC): acknowledged, retransmitted, SEND, RDMA
    /// WRITE and READ.
    #[default]
    Rc,
    /// Unreliable Connection (IBV_QPT_UC, IBTA Vol 1 §9.7.7, §9.8): SEND and RDMA
    /// WRITE to one peer QP, no ACKs and no retransmission; a PSN gap loses the rest
    /// of the message in progress and the receiver resumes at the next First or Only
    /// packet. No RDMA READ, atomics or SEND with Invalidate.
    Uc,
    /// Unreliable Datagram (IBV_QPT_UD, IBTA Vol 1 §9.8.4): SEND only, each to the
    /// address handle, QPN and Q_Key its work request names ([`SendOp::UdSend`]),
    /// messages of at most one path MTU; each receive buffer starts with
    /// [`GRH_LEN`] bytes for the Global Route Header. (QP1, the CM agent's, is UD too,
    /// but the soft provider's CM agent runs it itself.)
    Ud,
}

impl QpType {
    /// perftest's spelling (`-c RC|UC|UD`) and ibverbs' (`IBV_QPT_RC` without the
    /// prefix).
    pub fn name(self) -> &'static str {
        match self {
            QpType::Rc => "RC",
            QpType::Uc => "UC",
            QpType::Ud => "UD",
        }
    }
}

/// Bytes of the Global Route Header area at the front of every UD receive buffer
/// (ibverbs, IBTA Vol 1 §11.4.1.1): the receiver's first 40 bytes take the GRH (for
/// RoCEv2 over IPv4, the IPv4 header in its last 20 bytes, as Linux rxe writes it), the
/// message follows, and the receive completion's `byte_len` counts both.
pub const GRH_LEN: usize = 40;

/// Path MTU (`enum ibv_mtu`): payload bytes per packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Mtu {
    Mtu256 = 1,
    Mtu512 = 2,
    Mtu1024 = 3,
    Mtu2048 = 4,
    Mtu4096 = 5,
}

impl Mtu {
    /// Payload bytes of a full packet at this MTU.
    pub const fn bytes(self) -> u32 {
        128 << (self as u32)
    }
    /// The `enum ibv_mtu` code (1..=5), as carried in the CM REQ's path MTU field.
    pub const fn code(self) -> u8 {
        self as u8
    }
    /// From payload bytes: 256, 512, 1024, 2048 or 4096 (`None` for anything else).
    pub fn from_bytes(bytes: u32) -> Option<Mtu> {
        (1..=5)
            .filter_map(Mtu::from_code)
            .find(|m| m.bytes() == bytes)
    }
    /// From the `enum ibv_mtu` code.
    pub fn from_code(code: u8) -> Option<Mtu> {
        Some(match code {
            1 => Mtu::Mtu256,
            2 => Mtu::Mtu512,
            3 => Mtu::Mtu1024,
            4 => Mtu::Mtu2048,
            5 => Mtu::Mtu4096,
            _ => return None,
        })
    }
    /// The RoCE path MTU for an Ethernet/IP interface MTU, as rxe derives it
    /// (`eth_mtu_int_to_enum(mtu - headers)`): the largest IB MTU not above the
    /// interface MTU less the IP, UDP, BTH and ICRC overhead (and at most 4096).
    /// 1500 -> 1024; 65536 (loopback) -> 4096.
    pub fn from_netdev_mtu(netdev_mtu: u32) -> Mtu {
        // rxe: mtu - (IPv6 40 + UDP 8 + BTH 12 + RETH 16 + ICRC 4) headroom, rounded down.
        let avail = netdev_mtu.saturating_sub(40 + 8 + 12 + 16 + 4 + 28);
        [Mtu::Mtu4096, Mtu::Mtu2048, Mtu::Mtu1024, Mtu::Mtu512]
            .into_iter()
            .find(|m| m.bytes() <= avail)
            .unwrap_or(Mtu::Mtu256)
    }
}

/// Work completion status (`enum ibv_wc_status`), with ibverbs' numeric values.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum WcStatus {
    Success = 0,
    LocLenErr = 1,
    LocQpOpErr = 2,
    LocEecOpErr = 3,
    LocProtErr = 4,
    WrFlushErr = 5,
    MwBindErr = 6,
    BadRespErr = 7,
    LocAccessErr = 8,
    RemInvReqErr = 9,
    RemAccessErr = 10,
    RemOpErr = 11,
    RetryExcErr = 12,
    RnrRetryExcErr = 13,
    LocRddViolErr = 14,
    RemInvRdReqErr = 15,
    RemAbortErr = 16,
    InvEecnErr = 17,
    InvEecStateErr = 18,
    FatalErr = 19,
    RespTimeoutErr = 20,
    GeneralErr = 21,
}

impl WcStatus {
    /// The ibverbs name, e.g. `IBV_WC_REM_ACCESS_ERR`.
    pub fn name(self) -> &'static str {
        use WcStatus::*;
        match self {
            Success => "IBV_WC_SUCCESS",
            LocLenErr => "IBV_WC_LOC_LEN_ERR",
            LocQpOpErr => "IBV_WC_LOC_QP_OP_ERR",
            LocEecOpErr => "IBV_WC_LOC_EEC_OP_ERR",
            LocProtErr => "IBV_WC_LOC_PROT_ERR",
            WrFlushErr => "IBV_WC_WR_FLUSH_ERR",
            MwBindErr => "IBV_WC_MW_BIND_ERR",
            BadRespErr => "IBV_WC_BAD_RESP_ERR",
            LocAccessErr => "IBV_WC_LOC_ACCESS_ERR",
            RemInvReqErr => "IBV_WC_REM_INV_REQ_ERR",
            RemAccessErr => "IBV_WC_REM_ACCESS_ERR",
            RemOpErr => "IBV_WC_REM_OP_ERR",
            RetryExcErr => "IBV_WC_RETRY_EXC_ERR",
            RnrRetryExcErr => "IBV_WC_RNR_RETRY_EXC_ERR",
            LocRddViolErr => "IBV_WC_LOC_RDD_VIOL_ERR",
            RemInvRdReqErr => "IBV_WC_REM_INV_RD_REQ_ERR",
            RemAbortErr => "IBV_WC_REM_ABORT_ERR",
            InvEecnErr => "IBV_WC_INV_EECN_ERR",
            InvEecStateErr => "IBV_WC_INV_EEC_STATE_ERR",
            FatalErr => "IBV_WC_FATAL_ERR",
            RespTimeoutErr => "IBV_WC_RESP_TIMEOUT_ERR",
            GeneralErr => "IBV_WC_GENERAL_ERR",
        }
    }
}

impl std::fmt::Display for WcStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// What a work completion completes (`enum ibv_wc_opcode`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum WcOpcode {
    Send,
    RdmaWrite,
    RdmaRead,
    LocalInv,
    BindMw,
    /// A received SEND (receive queue completion).
    Recv,
    /// A received RDMA WRITE with immediate (receive queue completion).
    RecvRdmaWithImm,
}

/// A work completion (`struct ibv_wc`).
#[must_use]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WorkCompletion {
    pub wr_id: u64,
    pub status: WcStatus,
    pub opcode: WcOpcode,
    /// Bytes received (receive completions) or transferred (RDMA READ).
    pub byte_len: u32,
    /// Immediate data (network order value as a host integer), IBV_WC_WITH_IMM.
    pub imm_data: Option<u32>,
    /// The rkey a SEND with Invalidate invalidated, IBV_WC_WITH_INV.
    pub invalidated_rkey: Option<u32>,
    /// Local QP number.
    pub qp_num: u32,
    /// Remote QP number (UD receive completions: the DETH's source QP).
    pub src_qp: u32,
    /// IBV_WC_GRH: the first [`GRH_LEN`] bytes of the receive buffer hold the Global
    /// Route Header (every UD receive completion over RoCE).
    pub grh: bool,
}

impl WorkCompletion {
    /// A completion with only id, status, opcode and QP set.
    pub fn new(wr_id: u64, status: WcStatus, opcode: WcOpcode, qp_num: u32) -> Self {
        WorkCompletion {
            wr_id,
            status,
            opcode,
            byte_len: 0,
            imm_data: None,
            invalidated_rkey: None,
            qp_num,
            src_qp: 0,
            grh: false,
        }
    }
}

/// A scatter/gather element (`struct ibv_sge`): `length` bytes at virtual address
/// `addr` inside the MR whose lkey is `lkey`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Sge {
    pub addr: u64,
    pub length: u32,
    pub lkey: u32,
}

/// Most SGEs a work request carries in this model.
pub const MAX_SGE: usize = 4;

/// A short list of SGEs, stored inline (no allocation per work request).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SgList {
    sges: [Sge; MAX_SGE],
    len: u8,
}

impl SgList {
    /// An empty list.
    pub const fn new() -> Self {
        SgList {
            sges: [Sge {
                addr: 0,
                length: 0,
                lkey: 0,
            }; MAX_SGE],
            len: 0,
        }
    }
    /// A list of one SGE.
    pub fn one(sge: Sge) -> Self {
        let mut l = Self::new();
        l.sges[0] = sge;
        l.len = 1;
        l
    }
    /// From a slice; `None` if it holds more than [`MAX_SGE`] elements.
    pub fn from_slice(s: &[Sge]) -> Option<Self> {
        if s.len() > MAX_SGE {
            return None;
        }
        let mut l = Self::new();
        l.sges[..s.len()].copy_from_slice(s);
        l.len = s.len() as u8;
        Some(l)
    }
    /// The SGEs.
    pub fn as_slice(&self) -> &[Sge] {
        &self.sges[..self.len as usize]
    }
    /// Sum of the SGE lengths in bytes.
    pub fn total_len(&self) -> u64 {
        self.as_slice().iter().map(|s| s.length as u64).sum()
    }
}

/// The operation of a send work request (`enum ibv_wr_opcode` plus its union fields).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SendOp {
    /// IBV_WR_SEND.
    Send,
    /// IBV_WR_SEND_WITH_IMM.
    SendWithImm { imm_data: u32 },
    /// IBV_WR_SEND_WITH_INV: the responder invalidates `invalidate_rkey` (IBTA §9.4.5 IETH).
    SendWithInv { invalidate_rkey: u32 },
    /// IBV_WR_RDMA_WRITE to `remote_addr` under `rkey`.
    RdmaWrite { remote_addr: u64, rkey: u32 },
    /// IBV_WR_RDMA_WRITE_WITH_IMM.
    RdmaWriteWithImm {
        remote_addr: u64,
        rkey: u32,
        imm_data: u32,
    },
    /// IBV_WR_RDMA_READ from `remote_addr` under `rkey` into the local SGEs.
    RdmaRead { remote_addr: u64, rkey: u32 },
    /// IBV_WR_LOCAL_INV: invalidate a memory window's rkey locally.
    LocalInv { rkey: u32 },
    /// IBV_WR_SEND (or IBV_WR_SEND_WITH_IMM with `imm_data`) on a UD QP, with the
    /// `wr.ud` fields of `struct ibv_send_wr` (IBTA Vol 1 §9.8.4): to QP
    /// `dest.remote_qpn` at the address of `dest.ah`, carrying `dest.remote_qkey` in
    /// the DETH. At most one path MTU of payload.
    UdSend { dest: UdDest, imm_data: Option<u32> },
    /// IBV_WR_BIND_MW (type 2 memory window, IBTA §10.6.7): grant `rkey` (the window's
    /// key with a fresh 8-bit tag, see [`inc_rkey`]) over exactly `[addr, addr + length)`
    /// of the MR `mr_lkey`, with `access` (remote read and/or write), to this QP's peer.
    BindMw {
        mw_handle: u32,
        rkey: u32,
        mr_lkey: u32,
        addr: u64,
        length: u64,
        access: AccessFlags,
    },
}

/// Where a UD SEND goes (`wr.ud` of `struct ibv_send_wr`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UdDest {
    /// The address handle (`ibv_create_ah`) of the destination.
    pub ah: crate::verbs::Ah,
    /// The destination QP number (24 bits).
    pub remote_qpn: u32,
    /// The Q_Key to send; one with bit 31 set means "the QP's own Q_Key" (IBTA Vol 1
    /// §10.2.5).
    pub remote_qkey: u32,
}

/// A send work request (`struct ibv_send_wr`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SendWr {
    pub wr_id: u64,
    pub op: SendOp,
    pub sg_list: SgList,
    pub flags: SendFlags,
}

/// A receive work request (`struct ibv_recv_wr`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecvWr {
    pub wr_id: u64,
    pub sg_list: SgList,
}

/// `ibv_inc_rkey`: the same key index with the next 8-bit tag.
pub const fn inc_rkey(rkey: u32) -> u32 {
    (rkey & 0xFFFF_FF00) | ((rkey.wrapping_add(1)) & 0xFF)
}

/// Queue sizes of a QP (`struct ibv_qp_cap`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QpCap {
    pub max_send_wr: u32,
    pub max_recv_wr: u32,
    pub max_send_sge: u32,
    pub max_recv_sge: u32,
    pub max_inline_data: u32,
}

impl Default for QpCap {
    fn default() -> Self {
        QpCap {
            max_send_wr: 256,
            max_recv_wr: 256,
            max_send_sge: 4,
            max_recv_sge: 4,
            max_inline_data: 256,
        }
    }
}

/// The remote end of a path (`struct ibv_ah_attr` with its GRH, for RoCEv2).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AhAttr {
    /// Destination IP address (the GID, as an IPv4 or IPv6 address).
    pub dest: IpAddr,
    /// Flow label of the GRH (20 bits). RoCEv2 derives the UDP source port from it
    /// (see [`crate::wire::udp_sport_from_flow_label`]); 0 lets the provider choose.
    pub flow_label: u32,
    /// Hop limit (IPv4 TTL / IPv6 hop limit).
    pub hop_limit: u8,
    /// Traffic class (DSCP and ECN).
    pub traffic_class: u8,
}

/// Attributes to change with `modify_qp` (`struct ibv_qp_attr` with its mask: `None`
/// leaves a field as it is). IBTA Vol 1 §11.2.4.2 lists which are required per transition.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QpAttr {
    pub qp_state: Option<QpState>,
    pub qp_access_flags: Option<AccessFlags>,
    pub path_mtu: Option<Mtu>,
    pub dest_qp_num: Option<u32>,
    /// Expected PSN of the first packet received (24 bits).
    pub rq_psn: Option<u32>,
    /// PSN of the first packet sent (24 bits).
    pub sq_psn: Option<u32>,
    /// ORD: RDMA READs this QP may have outstanding as requester.
    pub max_rd_atomic: Option<u8>,
    /// IRD: RDMA READs this QP accepts outstanding as responder.
    pub max_dest_rd_atomic: Option<u8>,
    /// RNR NAK timer code sent by this responder (IBTA Table 45, 5 bits).
    pub min_rnr_timer: Option<u8>,
    /// Local ACK timeout: 4.096 us x 2^timeout, 0 = infinite (IBTA §9.7.6.1.3).
    pub timeout: Option<u8>,
    /// Transport retries before IBV_WC_RETRY_EXC_ERR (0..=7).
    pub retry_cnt: Option<u8>,
    /// RNR retries before IBV_WC_RNR_RETRY_EXC_ERR; 7 = infinite.
    pub rnr_retry: Option<u8>,
    pub ah_attr: Option<AhAttr>,
    /// Q_Key (UD QPs).
    pub qkey: Option<u32>,
    /// Selective retransmission (not an ibverbs attribute; see `docs/reliability.md`):
    /// `Some(true)` only when the connection layer has learned, through a capability
    /// exchange that a Linux peer ignores, that the peer is of this project. `None` or
    /// `Some(false)`: strict go-back-N (IBTA Vol 1 §9.7.5.1.3), the default. The
    /// `verbs` provider (real RNICs) ignores it.
    pub selective_retransmit: Option<bool>,
}

/// Errors of verbs calls (the `errno` values ibverbs would return).
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
pub enum VerbsError {
    #[error("invalid argument: {0}")]
    InvalidArgument(&'static str),
    #[error("queue full")]
    QueueFull,
    #[error("operation not allowed in QP state {0:?}")]
    InvalidState(QpState),
    #[error("no such object")]
    NoSuchObject,
    #[error("out of resources: {0}")]
    NoResources(&'static str),
    /// `modify_qp` asked for a state change the QP state machine does not have (IBTA
    /// Vol 1 §10.3.1, Figure 124): e.g. Reset -> RTS.
    #[error("invalid QP state transition {from:?} -> {to:?}")]
    InvalidTransition { from: QpState, to: QpState },
    /// A request beyond a device capability (`ibv_query_device`): `what` names the
    /// attribute and the capability, `asked` the value requested, `max` the limit.
    #[error("{what}: asked for {asked}, the device supports at most {max}")]
    CapabilityExceeded {
        what: &'static str,
        asked: u32,
        max: u32,
    },
    /// No RDMA device (or none that fits); the message says what was looked at and
    /// what to check.
    #[error("{0}")]
    NoDevice(String),
    /// Registering memory would take the process's pinned memory over
    /// `RLIMIT_MEMLOCK` (checked against [`crate::memlock::PinBudget::process`] before
    /// the kernel is asked); the error states the limit, what is pinned, what was
    /// needed and how to raise the limit.
    #[error(transparent)]
    Memlock(#[from] crate::memlock::MemlockError),
    /// Opening a QP's socket (the soft provider's one UDP send socket per QP) found no
    /// file descriptor left; the error states `RLIMIT_NOFILE` and how to raise it.
    #[error(transparent)]
    OpenFiles(#[from] crate::fdlimit::NofileError),
    /// A provider call failed with `errno` (the verbs provider's C calls).
    #[error("{call} failed: {} (errno {errno})", std::io::Error::from_raw_os_error(*errno))]
    Os { call: &'static str, errno: i32 },
}
