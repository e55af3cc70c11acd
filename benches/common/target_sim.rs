//! A connected target for the target-side benches (`capsule`, `request_core`): the
//! request core over its simulated transport ([`nvmf_target::rdma::sim`]), one
//! namespace on a 1 GiB sparse file (4 KiB blocks) in a temporary directory, an admin
//! queue connected and enabled (Property Set CC.EN=1) and I/O queue 1 connected, each
//! step through the core as a host's capsules would arrive (NVMe over Fabrics 1.x §3.3,
//! §6.3). Shared with `#[path]`: not a bench of its own.
// Each bench uses part of it.
#![allow(dead_code)]
use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;
use std::time::Instant;

use nvme::fabrics::{
    CONNECT_DATA_CNTLID_OFFSET, CONNECT_DATA_HOSTNQN_OFFSET, CONNECT_DATA_SUBNQN_OFFSET,
};
use nvme::{SglDescriptor, Sqe};
use nvmf_target::backend::Backend;
use nvmf_target::rdma::sim::{loopback_queue_params, Seen, Sim, SimConfig};
use nvmf_target::subsystem::{Limits, NamespaceEntry, PortInfo, Registry, Subsystem};

const NQN: &str = "nqn.2026-11.io.nvmf-rdma:bench";
const HOST: &str = "nqn.2014-08.org.nvmexpress:uuid:cf25660b-4036-4a6d-88a2-80c857dbb57a";
/// Namespace bytes (a sparse file: no bench reads it).
const NS_BYTES: u64 = 1 << 30;
/// Logical block bytes.
const BLOCK: u32 = 4096;
/// The poll group's MDTS, bytes.
pub const MAX_IO_BYTES: u32 = 1 << 20;
/// QPN of the admin queue.
pub const ADMIN_QPN: u32 = 0x100;
/// QPN of I/O queue 1.
pub const IO_QPN: u32 = 0x101;

/// A request core with a connected, enabled controller (see the module docs).
pub struct Target {
    pub sim: Sim,
    pub now: Instant,
    _dir: tempfile::TempDir,
}

/// Connect data (NVMe Base 2.x §6.3): HOSTID, CNTLID, SUBNQN, HOSTNQN.
fn connect_data(cntlid: u16) -> Vec<u8> {
    let mut d = vec![0u8; 1024];
    d[..16].copy_from_slice(&[0x5A; 16]);
    let c = usize::from(CONNECT_DATA_CNTLID_OFFSET);
    d[c..c + 2].copy_from_slice(&cntlid.to_le_bytes());
    let s = usize::from(CONNECT_DATA_SUBNQN_OFFSET);
    d[s..s + NQN.len()].copy_from_slice(NQN.as_bytes());
    let h = usize::from(CONNECT_DATA_HOSTNQN_OFFSET);
    d[h..h + HOST.len()].copy_from_slice(HOST.as_bytes());
    d
}

/// Delivers `capsule` on `qpn`, carries out what the core asks, and panics unless the
/// one response is a success.
fn expect_success(sim: &mut Sim, qpn: u32, capsule: &[u8], now: Instant, what: &str) {
    sim.deliver(qpn, capsule, now)
        .unwrap_or_else(|| panic!("{what}: no receive buffer"));
    let seen = sim.run(&[], now);
    let ok = seen.iter().any(|s| {
        matches!(s, Seen::Response { qpn: q, cqe, .. } if *q == qpn && cqe.status().is_success())
    });
    assert!(ok, "{what}: {seen:?}");
}

/// The target of the module docs; panics if any step fails (a bench has no one to
/// answer).
pub fn connected() -> Target {
    let dir = tempfile::tempdir().expect("temporary directory");
    let ns = Backend::open(&dir.path().join("ns.img"), Some(NS_BYTES), BLOCK).expect("namespace");
    let sub = Subsystem::new(
        NQN.into(),
        None,
        true,
        vec![],
        vec![NamespaceEntry::new(1, Arc::new(ns), 0, NQN)],
    );
    let reg = Registry::new(
        vec![Arc::new(sub)],
        PortInfo::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 4420),
        Limits::default(),
    );
    let mut sim = Sim::new(SimConfig::default(), reg).expect("simulated poll group");
    let now = Instant::now();
    let connect = |qid: u16, sqsize: u16, kato_ms: u32, cntlid: u16| {
        let sqe =
            Sqe::connect(1, qid, sqsize, kato_ms).with_sgl(SglDescriptor::inline_offset(0, 1024));
        let mut c = sqe.to_array().to_vec();
        c.extend_from_slice(&connect_data(cntlid));
        c
    };
    sim.add_queue(ADMIN_QPN, &loopback_queue_params(0, 32));
    expect_success(
        &mut sim,
        ADMIN_QPN,
        &connect(0, 31, 5000, 0xFFFF),
        now,
        "admin Connect",
    );
    let enable = Sqe::property_set(2, nvme::Property::Cc, 0x0046_0001).to_array();
    expect_success(&mut sim, ADMIN_QPN, &enable, now, "Property Set CC.EN=1");
    let cntlid = sim
        .core
        .queue(ADMIN_QPN)
        .and_then(|q| q.ctrl.as_ref())
        .expect("admin queue controller")
        .cntlid;
    sim.add_queue(IO_QPN, &loopback_queue_params(1, 128));
    expect_success(
        &mut sim,
        IO_QPN,
        &connect(1, 127, 0, cntlid),
        now,
        "I/O Connect",
    );
    Target {
        sim,
        now,
        _dir: dir,
    }
}

/// The received capsule of a 4 KiB Read at LBA 4242 into a keyed host buffer that asks
/// for SEND with Invalidate, as Linux's nvme-rdma sends it.
pub fn read_capsule() -> [u8; 64] {
    let sgl = SglDescriptor::keyed(0x7f5d_e0d2_1000, 4096, 0x0002_8601, true).expect("keyed SGL");
    Sqe::read(0x2a, 1, 4242, 0, false).with_sgl(sgl).to_array()
}
