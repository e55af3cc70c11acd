//! The workload plan: a random mix of SEND, RDMA WRITE and RDMA READ (with and without
//! immediate data) with sizes, offsets, SGE splits and the receive WRs they consume.
use rand::rngs::StdRng;
use rand::Rng;

use crate::verbs::WcOpcode;

/// Kinds of work request in the mix.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum OpKind {
    Send,
    SendImm,
    Write,
    WriteImm,
    Read,
}

impl OpKind {
    const ALL: [OpKind; 5] = [
        OpKind::Send,
        OpKind::SendImm,
        OpKind::Write,
        OpKind::WriteImm,
        OpKind::Read,
    ];
    /// Consumes a receive WR at the responder.
    pub fn consumes_recv(self) -> bool {
        matches!(self, OpKind::Send | OpKind::SendImm | OpKind::WriteImm)
    }
    /// Writes the responder's target region.
    pub fn writes_target(self) -> bool {
        matches!(self, OpKind::Write | OpKind::WriteImm)
    }
    /// The opcode of its send completion.
    pub fn wc_opcode(self) -> WcOpcode {
        match self {
            OpKind::Send | OpKind::SendImm => WcOpcode::Send,
            OpKind::Write | OpKind::WriteImm => WcOpcode::RdmaWrite,
            OpKind::Read => WcOpcode::RdmaRead,
        }
    }
}

/// Shape of a workload.
#[derive(Clone, Copy, Debug)]
pub(crate) struct WorkloadCfg {
    /// Work requests in all.
    pub wrs: usize,
    /// Most WRs outstanding (posted, not completed).
    pub qd: usize,
    /// Receive WRs kept posted ahead of the receive completions (1 to [`RECV_AHEAD`](super::workload::RECV_AHEAD));
    /// below the number of SENDs outstanding the responder answers RNR NAKs.
    pub recv_ahead: usize,
    /// Virtual delay (ns) after each receive completion before the responder's
    /// application posts receives again.
    pub recv_delay_ns: u64,
    /// Message sizes, bytes, inclusive.
    pub min_len: u32,
    pub max_len: u32,
    /// Path MTU in bytes (sizes near its multiples are favoured).
    pub mtu: u32,
    /// Weights of Send, SendImm, Write, WriteImm, Read.
    pub mix: [u32; 5],
    /// READs read the region WRITEs write (every WRITE is fenced behind earlier READs,
    /// IBTA §10.8.3.3, since a retransmitted READ reads memory again); otherwise READs
    /// read a separate region nobody writes.
    pub shared: bool,
}

/// One planned work request.
#[derive(Clone, Debug)]
pub(crate) struct Planned {
    pub kind: OpKind,
    pub len: u32,
    /// Offset in the requester's source (SEND, WRITE) or sink (READ) region.
    pub local_off: usize,
    /// Offset in the responder's target (WRITE; READ when shared) or read-source region.
    pub remote_off: usize,
    /// Lengths of the local SGEs (sum `len`).
    pub local_sges: Vec<u32>,
    pub imm: u32,
    /// Receive slot consumed (SEND, WRITE with immediate).
    pub slot: Option<usize>,
}

/// One receive WR of the plan.
#[derive(Clone, Debug)]
pub(crate) struct Slot {
    pub wr: usize,
    /// Offset and capacity of its buffer in the receive region.
    pub off: usize,
    pub cap: usize,
    /// Length of the first of its two SGEs.
    pub cut: usize,
}

/// A generated workload: the WRs and the sizes of the regions they use.
#[derive(Clone, Debug)]
pub(crate) struct Plan {
    pub cfg: WorkloadCfg,
    pub wrs: Vec<Planned>,
    pub slots: Vec<Slot>,
    /// Bytes of each of the source, sink, target and read-source regions.
    pub region: usize,
    /// Bytes of the receive region.
    pub recv_bytes: usize,
    /// Seed of the regions' initial contents.
    pub seed: u64,
}

impl Plan {
    /// A random plan for `cfg`.
    pub fn generate(cfg: WorkloadCfg, rng: &mut StdRng) -> Plan {
        let region = 2 * cfg.max_len as usize;
        let total: u32 = cfg.mix.iter().sum();
        let mut wrs = Vec::with_capacity(cfg.wrs);
        let mut slots = Vec::new();
        let mut recv_bytes = 0;
        for i in 0..cfg.wrs {
            let mut pick = rng.gen_range(0..total.max(1));
            let mut kind = OpKind::Write;
            for (k, w) in OpKind::ALL.iter().zip(cfg.mix) {
                if pick < w {
                    kind = *k;
                    break;
                }
                pick -= w;
            }
            let len = pick_len(&cfg, rng);
            let l = len as usize;
            let local_off = rng.gen_range(0..=region - l);
            let remote_off = rng.gen_range(0..=region - l);
            let slot = kind.consumes_recv().then(|| {
                let cap = if kind == OpKind::WriteImm {
                    0
                } else {
                    l + rng.gen_range(0..=32)
                };
                slots.push(Slot {
                    wr: i,
                    off: recv_bytes,
                    cap,
                    cut: rng.gen_range(0..=cap),
                });
                recv_bytes += cap;
                slots.len() - 1
            });
            wrs.push(Planned {
                kind,
                len,
                local_off,
                remote_off,
                local_sges: split(len, rng),
                imm: rng.gen(),
                slot,
            });
        }
        Plan {
            cfg,
            wrs,
            slots,
            region,
            recv_bytes: recv_bytes.max(1),
            seed: rng.gen(),
        }
    }

    /// PSNs the plan consumes at the requester (packets of SEND / WRITE, response
    /// packets of READ).
    pub fn psns(&self) -> u64 {
        self.wrs
            .iter()
            .map(|w| (w.len as u64).div_ceil(self.cfg.mtu as u64).max(1))
            .sum()
    }
}

/// A size in `min_len..=max_len`: mostly log-uniform, some tiny, some next to a
/// multiple of the MTU, some the maximum.
fn pick_len(cfg: &WorkloadCfg, rng: &mut StdRng) -> u32 {
    let (lo, hi) = (cfg.min_len.max(1), cfg.max_len.max(cfg.min_len.max(1)));
    let v = match rng.gen_range(0..20) {
        0..=1 => rng.gen_range(1..=8),
        2..=4 => (rng.gen_range(1..=4) * cfg.mtu + rng.gen_range(0..=2)).saturating_sub(1),
        5 => hi,
        _ => {
            let e = rng.gen_range((lo as f64).ln()..=(hi as f64).ln());
            e.exp() as u32
        }
    };
    v.clamp(lo, hi)
}

/// Lengths of 1 to 3 non-empty SGEs adding up to `len`.
fn split(len: u32, rng: &mut StdRng) -> Vec<u32> {
    let n = rng.gen_range(1..=3u32).min(len);
    let mut cuts: Vec<u32> = (1..n).map(|_| rng.gen_range(1..len)).collect();
    cuts.sort_unstable();
    cuts.dedup();
    let mut out = Vec::new();
    let mut prev = 0;
    for c in cuts.into_iter().chain([len]) {
        out.push(c - prev);
        prev = c;
    }
    out
}
