//! Target `capsule`: the NVMe-oF target's command capsule handling, without sockets
//! (NVMe over Fabrics 1.x §3.3, NVMe Base 2.x, NVMe RDMA Transport 1.x).
//!
//! One registry per input: subsystem [`FUZZ_NQN`] (any host, namespace 1 on a 1 MiB
//! sparse file, 512-byte blocks), a restricted subsystem, the discovery subsystem;
//! one admin queue and one I/O queue of the poll group's request core
//! ([`nvmf_target::rdma::core`], the code the target runs), driven through its
//! simulated transport ([`nvmf_target::rdma::sim`]: capsules land in receive buffers as
//! the two-SGE receive scatters them, RDMA READs read the input's host memory, every
//! work request and io_uring operation succeeds at once). The input is a program of
//! capsules: raw bytes (SQE and in-capsule data), structured SQEs (an admin or NVM
//! opcode, dwords, an SGL that is keyed, in-capsule, data block or raw), and shortcuts
//! that reach the connected, enabled state quickly (Connect with well-formed Connect
//! data, Property Set CC).
//!
//! Checked: no panic; every CQE answers its SQE (CID, SQ ID) and round trips as
//! bytes; controller-to-host data only on success and never longer than the keyed
//! SGL; RDMA READs never longer than the MDTS; in-capsule data written to the file only
//! from the bytes received; I/O only on an I/O queue and only for a command answered
//! with success; a successful Connect leaves the queue with a controller the registry
//! knows; after each capsule every receive buffer is posted again except those of held
//! Asynchronous Event Requests. Each SQE also goes through the `nvme` wire types (SQE
//! bytes, SGL decode/encode, Connect / Property commands, DSM ranges).
use std::net::{IpAddr, Ipv4Addr};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use nvme::fabrics::{
    CONNECT_DATA_CNTLID_OFFSET, CONNECT_DATA_HOSTNQN_OFFSET, CONNECT_DATA_SUBNQN_OFFSET,
};
use nvme::{
    ConnectCommand, Cqe, DsmRange, PropertyGetCommand, PropertySetCommand, Sgl, SglDescriptor, Sqe,
    NVMF_DISCOVERY_NQN,
};
use nvmf_target::backend::Backend;
use nvmf_target::rdma::action::{IoOp, RegionId};
use nvmf_target::rdma::core::ReqState;
use nvmf_target::rdma::queue::Queue;
use nvmf_target::rdma::sim::{loopback_queue_params, Seen, Sim, SimConfig};
use nvmf_target::rdma::SQE_LEN;
use nvmf_target::subsystem::{Limits, NamespaceEntry, PortInfo, Registry, Subsystem};

use super::input::Input;

/// The subsystem every host may connect to.
pub const FUZZ_NQN: &str = "nqn.2026-11.io.example:fuzz";
/// A subsystem that admits [`ALLOWED_HOST`] only.
pub const RESTRICTED_NQN: &str = "nqn.2026-11.io.example:restricted";
/// The host NQN the shortcuts use.
pub const HOST: &str = "nqn.2014-08.org.nvmexpress:uuid:cf25660b-4036-4a6d-88a2-80c857dbb57a";
/// The only host of the restricted subsystem.
pub const ALLOWED_HOST: &str =
    "nqn.2014-08.org.nvmexpress:uuid:00000000-0000-0000-0000-000000000001";
/// Namespace size, bytes (sparse; no I/O ever reaches it).
const NS_BYTES: u64 = 1 << 20;
/// In-capsule data bytes a receive buffer holds after the SQE (as the poll group).
const IN_CAPSULE: usize = 4096;
/// MDTS of the poll group, bytes.
const MAX_IO_BYTES: u32 = 1 << 20;
/// In-capsule or host data bytes a structured capsule takes from the input.
const DATA_FROM_INPUT: usize = 64;
/// Capsules run at most per input.
const MAX_CAPSULES: usize = 64;
/// Receive buffers of the simulated poll group (more than capsules per input).
const SRQ_DEPTH: u32 = 128;
/// QPN of the admin queue.
const ADMIN_QPN: u32 = 0x10;
/// QPN of the I/O queue.
const IO_QPN: u32 = 0x11;

/// The namespace file, opened once per process and unlinked at once (the descriptor
/// keeps it).
fn namespace() -> Option<Arc<Backend>> {
    static NS: OnceLock<Option<Arc<Backend>>> = OnceLock::new();
    NS.get_or_init(|| {
        let path = std::env::temp_dir().join(format!("nvmf-fuzz-ns-{}.img", std::process::id()));
        let _ = std::fs::remove_file(&path);
        let ns = Backend::open(&path, Some(NS_BYTES), 512).ok();
        let _ = std::fs::remove_file(&path);
        ns.map(Arc::new)
    })
    .clone()
}

fn registry(ns: Arc<Backend>) -> Arc<Registry> {
    let open = Subsystem::new(
        FUZZ_NQN.into(),
        None,
        true,
        vec![],
        vec![NamespaceEntry::new(1, ns, 0, FUZZ_NQN)],
    );
    let restricted = Subsystem::new(
        RESTRICTED_NQN.into(),
        None,
        false,
        vec![ALLOWED_HOST.into()],
        vec![],
    );
    Registry::new(
        vec![Arc::new(open), Arc::new(restricted)],
        PortInfo::new(IpAddr::V4(Ipv4Addr::new(127, 0, 0, 1)), 4420),
        Limits::default(),
    )
}

struct Harness {
    reg: Arc<Registry>,
    sim: Sim,
    io_qid: u16,
    now: Instant,
}

/// What the target did for one capsule.
#[derive(Debug, Default)]
struct CapsuleAnswer {
    /// Its response; `None` when the capsule was dropped (shorter than an SQE, no
    /// receive buffer, beyond the SQ flow control) or is a held Asynchronous Event
    /// Request.
    cqe: Option<Cqe>,
    /// Controller-to-host data RDMA written before that response.
    c2h: Vec<u8>,
    /// Host-to-controller bytes fetched by RDMA READ.
    rdma_read_len: usize,
    /// io_uring operations of the command.
    io: Vec<IoOp>,
    /// Responses of other requests (held Asynchronous Event Requests) it released.
    events: Vec<Cqe>,
    /// Length of the keyed SGL, if the command had one (bounds `c2h`).
    keyed_len: Option<u32>,
}

/// Runs one input; panics on a broken invariant.
pub fn run(data: &[u8]) {
    let Some(ns) = namespace() else {
        return;
    };
    let mut inp = Input::new(data);
    let io_qid = inp.pick(&[1u16, 1, 2, 8, 9]);
    let reg = registry(ns);
    let cfg = SimConfig {
        srq_depth: SRQ_DEPTH,
        in_capsule_bytes: IN_CAPSULE as u32,
        data_slab_bytes: MAX_IO_BYTES as usize,
        max_io_bytes: MAX_IO_BYTES,
        io_slots: 256,
    };
    let Ok(mut sim) = Sim::new(cfg, reg.clone()) else {
        return;
    };
    sim.add_queue(ADMIN_QPN, &loopback_queue_params(0, 32));
    sim.add_queue(IO_QPN, &loopback_queue_params(io_qid, 128));
    let mut h = Harness {
        reg,
        sim,
        io_qid,
        now: Instant::now(),
    };
    let mut n = 0;
    while !inp.is_empty() && n < MAX_CAPSULES {
        n += 1;
        let action = inp.u8();
        let admin_queue = action & 0x80 == 0;
        let (capsule, host_data) = match action % 8 {
            0..=3 => h.structured(&mut inp, admin_queue),
            4 => raw(&mut inp),
            5 => h.connect(&mut inp, admin_queue),
            6 => h.property(&mut inp),
            _ => {
                h.now += Duration::from_millis(u64::from(inp.u16()) * 16);
                continue;
            }
        };
        h.run_capsule(admin_queue, &capsule, &host_data);
    }
}

/// A capsule of raw bytes (at most one receive buffer: the SQE and the first
/// in-capsule bytes from the input, zeros after) and raw host memory (likewise).
fn raw(inp: &mut Input<'_>) -> (Vec<u8>, Vec<u8>) {
    let len = usize::from(inp.u16()) % (SQE_LEN + IN_CAPSULE + 1);
    let capsule = pad(inp.bytes(len.min(SQE_LEN + DATA_FROM_INPUT)), len);
    let host_len = usize::from(inp.u16()) % 8192;
    let host = pad(inp.bytes(host_len.min(DATA_FROM_INPUT)), host_len);
    (capsule, host)
}

/// A dword: zero, a byte, a half word or a full word.
fn dword(inp: &mut Input<'_>) -> u32 {
    match inp.u8() % 4 {
        0 => 0,
        1 => u32::from(inp.u8()),
        2 => u32::from(inp.u16()),
        _ => inp.u32(),
    }
}

/// SGL1 of a structured SQE.
fn sgl(inp: &mut Input<'_>, in_capsule_len: usize) -> SglDescriptor {
    match inp.u8() % 6 {
        0..=2 => {
            let len = match inp.u8() % 5 {
                0 => 0,
                1 => 1024,
                2 => 4096,
                3 => u32::from(inp.u16()),
                _ => inp.u32() & 0xFF_FFFF,
            };
            let (addr, key) = (inp.u64(), inp.u32());
            SglDescriptor::keyed(addr, len, key, inp.bool()).unwrap_or(SglDescriptor::keyed_null())
        }
        3 | 4 => {
            let off = u64::from(inp.u8() % 32) * 16;
            let len = if inp.bool() {
                in_capsule_len.saturating_sub(off as usize) as u32
            } else {
                dword(inp)
            };
            SglDescriptor::inline_offset(off, len)
        }
        _ => {
            let mut b = [0u8; 16];
            b.copy_from_slice(&pad(inp.bytes(16), 16));
            SglDescriptor::from_array(b)
        }
    }
}

fn pad(b: &[u8], len: usize) -> Vec<u8> {
    let mut v = b.to_vec();
    v.resize(len, 0);
    v
}

/// Well-formed Connect data (NVMe Base 2.x §6.3): HOSTID, CNTLID, SUBNQN, HOSTNQN.
fn connect_data(cntlid: u16, subnqn: &str, hostnqn: &str) -> Vec<u8> {
    let mut d = vec![0u8; 1024];
    d[..16].copy_from_slice(&[0x5A; 16]);
    let c = usize::from(CONNECT_DATA_CNTLID_OFFSET);
    d[c..c + 2].copy_from_slice(&cntlid.to_le_bytes());
    let s = usize::from(CONNECT_DATA_SUBNQN_OFFSET);
    d[s..s + subnqn.len().min(255)].copy_from_slice(&subnqn.as_bytes()[..subnqn.len().min(255)]);
    let h = usize::from(CONNECT_DATA_HOSTNQN_OFFSET);
    d[h..h + hostnqn.len().min(255)].copy_from_slice(&hostnqn.as_bytes()[..hostnqn.len().min(255)]);
    d
}

impl Harness {
    fn qpn(admin: bool) -> u32 {
        if admin {
            ADMIN_QPN
        } else {
            IO_QPN
        }
    }

    fn qid(&self, admin: bool) -> u16 {
        if admin {
            0
        } else {
            self.io_qid
        }
    }

    /// An SQE with an opcode of the queue's command set, fields from the input.
    fn structured(&mut self, inp: &mut Input<'_>, admin: bool) -> (Vec<u8>, Vec<u8>) {
        let mut sqe = [0u8; SQE_LEN];
        sqe[0] = if admin {
            // Identify, Get Log Page, Set/Get Features, Keep Alive, AER, Abort, Fabrics.
            inp.pick(&[
                0x06, 0x02, 0x09, 0x0A, 0x18, 0x0C, 0x08, 0x7F, 0x06, 0x02, 0xFF,
            ])
        } else {
            // Flush, Write, Read, Write Zeroes, Dataset Management, Fabrics.
            inp.pick(&[0x00, 0x01, 0x02, 0x08, 0x09, 0x01, 0x02, 0x7F, 0xFF])
        };
        if sqe[0] == 0xFF {
            sqe[0] = inp.u8();
        }
        let flags = inp.u8();
        sqe[1] = if flags < 240 { 0x40 } else { flags };
        sqe[2..4].copy_from_slice(&inp.u16().to_le_bytes());
        let nsid = match inp.u8() % 6 {
            0..=2 => 1,
            3 => 0,
            4 => 0xFFFF_FFFF,
            _ => inp.u32(),
        };
        sqe[4..8].copy_from_slice(&nsid.to_le_bytes());
        if sqe[0] == 0x7F {
            // FCTYPE: Property Set, Connect, Property Get, or anything.
            sqe[4] = inp.pick(&[0x00, 0x01, 0x04, 0x05, 0x08]);
        }
        for i in 0..6 {
            let at = 40 + 4 * i;
            sqe[at..at + 4].copy_from_slice(&dword(inp).to_le_bytes());
        }
        let icd_len = match inp.u8() % 5 {
            0 | 1 => 0,
            2 => 16 * usize::from(inp.u8() % 9),
            3 => 1024,
            _ => usize::from(inp.u16()) % (IN_CAPSULE + 1),
        };
        sqe[24..40].copy_from_slice(&sgl(inp, icd_len).to_array());
        // Data: the first bytes from the input (enough for DSM ranges or a Connect
        // data prefix), the rest a pattern, so inputs stay small.
        let fill = inp.u8();
        let mut capsule = sqe.to_vec();
        let icd = inp.bytes(icd_len.min(DATA_FROM_INPUT));
        capsule.extend_from_slice(icd);
        capsule.extend((icd.len()..icd_len).map(|i| fill.wrapping_add(i as u8)));
        let host_len = match inp.u8() % 4 {
            0 => 0,
            1 => 1024,
            2 => 4096,
            _ => usize::from(inp.u16()) % 8192,
        };
        let host = inp.bytes(host_len.min(DATA_FROM_INPUT));
        let mut host_data = host.to_vec();
        host_data.extend((host.len()..host_len).map(|i| fill.wrapping_mul(i as u8)));
        (capsule, host_data)
    }

    /// A Connect with well-formed Connect data, keyed (RDMA READ) or in-capsule.
    fn connect(&mut self, inp: &mut Input<'_>, admin: bool) -> (Vec<u8>, Vec<u8>) {
        let qid = if inp.u8() < 224 {
            self.qid(admin)
        } else {
            inp.u16()
        };
        let sqsize = match inp.u8() % 4 {
            0 | 1 => 31,
            2 => 0,
            _ => inp.u16(),
        };
        let kato = match inp.u8() % 3 {
            0 => 0,
            1 => 5000,
            _ => inp.u32(),
        };
        let mut cmd = ConnectCommand::new(inp.u16(), qid, sqsize, kato);
        if inp.u8() == 0xFF {
            cmd.set_recfmt(inp.u16());
        }
        let subnqn = inp.pick(&[
            FUZZ_NQN,
            FUZZ_NQN,
            NVMF_DISCOVERY_NQN,
            RESTRICTED_NQN,
            "nqn.x",
        ]);
        let hostnqn = inp.pick(&[HOST, HOST, ALLOWED_HOST, "", "h"]);
        let admin_cntlid = self
            .sim
            .core
            .queue(ADMIN_QPN)
            .and_then(|q| q.ctrl.as_ref())
            .map_or(0xFFFF, |c| c.cntlid);
        let cntlid = match inp.u8() % 4 {
            0 | 1 if qid == 0 => 0xFFFF,
            0 | 1 => admin_cntlid,
            2 => 0xFFFF,
            _ => inp.u16(),
        };
        let data = connect_data(cntlid, subnqn, hostnqn);
        if inp.bool() {
            cmd.set_sgl(SglDescriptor::inline_offset(0, 1024));
            let mut capsule = cmd.to_sqe().to_array().to_vec();
            capsule.extend_from_slice(&data);
            (capsule, Vec::new())
        } else {
            let key = inp.u32();
            cmd.set_sgl(
                SglDescriptor::keyed(0x1000, 1024, key, inp.bool())
                    .unwrap_or(SglDescriptor::keyed_null()),
            );
            (cmd.to_sqe().to_array().to_vec(), data)
        }
    }

    /// Property Get or Set on the admin queue: CC enable / shutdown, or any value.
    fn property(&mut self, inp: &mut Input<'_>) -> (Vec<u8>, Vec<u8>) {
        let cid = inp.u16();
        let sqe = match inp.u8() % 5 {
            0 | 1 => Sqe::property_set(cid, nvme::Property::Cc, 0x0046_0001),
            2 => Sqe::property_set(cid, nvme::Property::Cc, 0x0046_4001),
            3 => Sqe::property_set(cid, nvme::Property::Cc, u64::from(inp.u32())),
            _ => Sqe::property_get(
                cid,
                inp.pick(&[
                    nvme::Property::Cap,
                    nvme::Property::Vs,
                    nvme::Property::Cc,
                    nvme::Property::Csts,
                ]),
            ),
        };
        (sqe.to_array().to_vec(), Vec::new())
    }

    fn run_capsule(&mut self, admin: bool, capsule: &[u8], host_data: &[u8]) {
        if let Some(b) = capsule.get(..SQE_LEN) {
            nvme_types(b, host_data);
        }
        let qpn = Self::qpn(admin);
        let had_ctrl = self.sim.core.queue(qpn).is_some_and(|q| q.ctrl.is_some());
        let slot = self.sim.deliver(qpn, capsule, self.now);
        let seen = self.sim.run(host_data, self.now);
        let ans = answer(slot, capsule, &seen);
        let q = self.sim.core.queue(qpn).expect("the harness's queues stay");
        check_answer(&self.reg, q, capsule, &ans, had_ctrl);
        // Every receive buffer is posted again, but those of held AERs.
        let held = (0..SRQ_DEPTH)
            .filter(|&i| self.sim.core.state(i) != Some(ReqState::Free))
            .inspect(|&i| {
                assert_eq!(self.sim.core.state(i), Some(ReqState::AwaitingEvent));
            })
            .count();
        assert_eq!(
            self.sim.posted() + held,
            SRQ_DEPTH as usize,
            "a receive buffer leaked"
        );
    }
}

/// Sorts what the core did into the answer to the capsule in receive buffer `slot`.
fn answer(slot: Option<u32>, capsule: &[u8], seen: &[Seen]) -> CapsuleAnswer {
    let mut ans = CapsuleAnswer::default();
    if let Some(Ok(b)) = capsule.get(..SQE_LEN).map(<[u8; SQE_LEN]>::try_from) {
        if let Ok(Sgl::KeyedDataBlock { len, .. }) = Sqe::from_array(b).sgl().decode() {
            ans.keyed_len = Some(len);
        }
    }
    for s in seen {
        match s {
            Seen::Response { req, cqe, data, .. } if Some(*req) == slot => {
                assert!(ans.cqe.is_none(), "two responses to one command");
                ans.cqe = Some(*cqe);
                ans.c2h = data.clone();
            }
            Seen::Response { cqe, data, .. } => {
                assert!(data.is_empty(), "data with an AER completion");
                ans.events.push(*cqe);
            }
            Seen::RdmaRead { req, len, .. } => {
                assert_eq!(Some(*req), slot, "an RDMA READ for another command");
                ans.rdma_read_len += *len as usize;
            }
            Seen::Io { req, op } => {
                assert_eq!(Some(*req), slot, "I/O for another command");
                if let IoOp::Write { buf, .. } = op {
                    if buf.region == RegionId::InCapsule {
                        // In-capsule data goes to the file only from what was received.
                        let start = slot.unwrap_or(0) as usize * IN_CAPSULE;
                        let received = capsule.len().saturating_sub(SQE_LEN);
                        assert!(buf.offset >= start, "in-capsule data of another buffer");
                        assert!(
                            buf.offset - start + buf.len as usize <= received,
                            "in-capsule write beyond the bytes received"
                        );
                    }
                }
                ans.io.push(*op);
            }
            Seen::QpError { .. } => panic!("a work request failed in the simulation"),
            // A Fabrics Disconnect was answered: the queue ends after its response.
            Seen::QueueEnded { .. } => {}
        }
    }
    ans
}

fn check_answer(reg: &Registry, q: &Queue, capsule: &[u8], ans: &CapsuleAnswer, had_ctrl: bool) {
    let Some(b) = capsule.get(..SQE_LEN) else {
        assert!(
            ans.cqe.is_none(),
            "a capsule shorter than an SQE is dropped"
        );
        return;
    };
    let sqe = Sqe::from_array(b.try_into().expect("64 bytes"));
    for cqe in ans.cqe.iter().chain(ans.events.iter()) {
        assert_eq!(cqe.sqid(), q.qid);
        assert_eq!(Cqe::from_array(cqe.to_array()), *cqe);
    }
    let Some(cqe) = ans.cqe else {
        assert!(
            ans.c2h.is_empty() && ans.io.is_empty(),
            "work for no response"
        );
        return;
    };
    assert_eq!(cqe.cid(), sqe.cid(), "CQE answers another command");
    let ok = cqe.status().is_success();
    assert!(ok || ans.c2h.is_empty(), "data sent with an error status");
    if !ans.c2h.is_empty() {
        let keyed = ans.keyed_len.expect("RDMA WRITE needs a keyed SGL");
        assert!(
            ans.c2h.len() <= keyed as usize,
            "more data than the host's buffer"
        );
    }
    assert!(ans.rdma_read_len <= MAX_IO_BYTES as usize);
    if sqe.opcode() == nvme::FABRICS_OPCODE && sqe.fctype() == Some(0x01) && ok {
        let ctrl = q
            .ctrl
            .as_ref()
            .expect("a successful Connect gives the queue a controller");
        assert!(!had_ctrl, "second Connect on a connected queue succeeded");
        assert!(reg.controller(ctrl.cntlid).is_some());
        if q.qid == 0 {
            assert_eq!(cqe.dw0() & 0xFFFF, u32::from(ctrl.cntlid));
        }
    }
    if !ans.io.is_empty() {
        assert!(
            ok && q.qid != 0,
            "I/O for a failed command or on the admin queue"
        );
    }
}

/// The `nvme` crate's wire types over the SQE bytes and the host data.
fn nvme_types(sqe_bytes: &[u8], data: &[u8]) {
    let Ok(arr) = <[u8; SQE_LEN]>::try_from(sqe_bytes) else {
        return;
    };
    let sqe = Sqe::from_array(arr);
    assert_eq!(sqe.to_array(), arr);
    let d = sqe.sgl();
    assert_eq!(SglDescriptor::from_array(d.to_array()), d);
    match d.decode() {
        Ok(s) => {
            let back = SglDescriptor::from(s)
                .decode()
                .expect("encoded SGL decodes");
            assert_eq!(back, s, "SGL decode/encode round trip");
            let len = match s {
                Sgl::KeyedDataBlock { len, .. } => {
                    assert!(len <= 0xFF_FFFF);
                    len
                }
                Sgl::DataBlockOffset { len, .. } | Sgl::DataBlockAddress { len, .. } => len,
            };
            assert_eq!(d.len(), len);
        }
        Err(_) => assert_eq!(d.len(), 0),
    }
    if let Ok(c) = ConnectCommand::from_sqe(&sqe) {
        assert_eq!(c.queue_entries(), u32::from(c.sqsize()) + 1);
        let _ = (c.recfmt(), c.qid(), c.kato(), c.cattr());
        assert_eq!(c.to_sqe(), sqe);
    }
    if let Ok(p) = PropertyGetCommand::from_sqe(&sqe) {
        let _ = (p.size(), p.ofst(), p.property());
    }
    if let Ok(p) = PropertySetCommand::from_sqe(&sqe) {
        let _ = (p.size(), p.ofst(), p.property(), p.value());
    }
    let _ = (
        sqe.slba(),
        sqe.nlb(),
        sqe.log_page_len(),
        sqe.lpo(),
        sqe.fid(),
        sqe.cns(),
    );
    for r in DsmRange::slice_from(data) {
        let _ = (r.nlb.get(), r.slba.get());
    }
}
