//! Command capsule micro benchmarks: what the target's poll group does with a received
//! 4 KiB Read capsule before it reaches io_uring (NVMe over Fabrics 1.x §3.3, NVMe
//! RDMA Transport 1.x §3):
//!
//! - `capsule/decode_sqe_keyed_sgl`: the 64-byte SQE from the receive buffer and its
//!   keyed SGL data block (address, 24-bit length, key, invalidate).
//! - `capsule/classify_read_4k`: the target's `classify` (PSDT, FUSE, controller
//!   ready, namespace lookup, `io::decode` against the namespace and MDTS).
//! - `capsule/decode_and_classify_read_4k`: both, as one command costs.
//!
//! The controller is real: an admin Connect, Property Set CC.EN=1 and an I/O Connect
//! run through `nvmf_target::fuzzing::dispatch_capsule` against a registry with one
//! 1 GiB sparse file namespace (4 KiB blocks) in a temporary directory.
//!
//! Run: `cargo bench --bench capsule` (`-- --quick` for a short run).
use std::hint::black_box;
use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;
use std::time::Instant;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use nvme::fabrics::{
    CONNECT_DATA_CNTLID_OFFSET, CONNECT_DATA_HOSTNQN_OFFSET, CONNECT_DATA_SUBNQN_OFFSET,
};
use nvme::{ConnectCommand, Sgl, SglDescriptor, Sqe};
use nvmf_target::controller::Controller;
use nvmf_target::fuzzing::{classify, dispatch_capsule, FuzzQueue, Kind};
use nvmf_target::namespace::FileNamespace;
use nvmf_target::subsystem::{Limits, NamespaceEntry, PortInfo, Registry, Subsystem};

const NQN: &str = "nqn.2026-11.io.nvmf-rdma:bench";
const HOST: &str = "nqn.2014-08.org.nvmexpress:uuid:cf25660b-4036-4a6d-88a2-80c857dbb57a";
const NS_BYTES: u64 = 1 << 30;
const BLOCK: u32 = 4096;
/// The poll group's MDTS, bytes.
const MAX_IO_BYTES: u32 = 1 << 20;

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

/// Runs a Connect for `q` (in-capsule data) and panics unless it succeeds.
fn connect(reg: &Registry, q: &mut FuzzQueue, cntlid: u16) {
    let (sqsize, kato_ms) = if q.qid == 0 { (31, 5000) } else { (127, 0) };
    let mut cmd = ConnectCommand::new(1, q.qid, sqsize, kato_ms);
    cmd.set_sgl(SglDescriptor::inline_offset(0, 1024));
    let mut capsule = cmd.to_sqe().to_array().to_vec();
    capsule.extend_from_slice(&connect_data(cntlid));
    let ans = dispatch_capsule(reg, q, &capsule, &[], MAX_IO_BYTES, Instant::now());
    let st = ans.cqe.expect("a CQE").status();
    assert!(st.is_success(), "Connect qid {}: {st:?}", q.qid);
}

/// A connected, enabled controller and its I/O queue's qid.
fn controller(dir: &std::path::Path) -> (Arc<Registry>, Arc<Controller>, u16) {
    let ns = FileNamespace::open(&dir.join("ns.img"), Some(NS_BYTES), BLOCK).expect("namespace");
    let sub = Subsystem::new(
        NQN.into(),
        None,
        true,
        vec![],
        vec![NamespaceEntry::new(1, Arc::new(ns), 0, NQN)],
    );
    let reg = Registry::new(
        vec![Arc::new(sub)],
        PortInfo {
            traddr: IpAddr::V4(Ipv4Addr::new(127, 0, 0, 1)),
            trsvcid: 4420,
        },
        Limits::default(),
    );
    let mut admin = FuzzQueue::new(0, 32);
    connect(&reg, &mut admin, 0xFFFF);
    let enable = Sqe::property_set(2, nvme::Property::Cc, 0x0046_0001).to_array();
    let ans = dispatch_capsule(&reg, &mut admin, &enable, &[], MAX_IO_BYTES, Instant::now());
    assert!(ans.cqe.expect("a CQE").status().is_success(), "CC.EN=1");
    let ctrl = admin.ctrl.clone().expect("admin queue controller");
    let mut io = FuzzQueue::new(1, 128);
    connect(&reg, &mut io, ctrl.cntlid);
    (reg, ctrl, io.qid)
}

/// The received capsule of a 4 KiB Read at LBA 4242 into a keyed host buffer that asks
/// for SEND with Invalidate, as Linux's nvme-rdma sends it.
fn read_capsule() -> [u8; 64] {
    let sgl = SglDescriptor::keyed(0x7f5d_e0d2_1000, 4096, 0x0002_8601, true).expect("keyed SGL");
    Sqe::read(0x2a, 1, 4242, 0, false).with_sgl(sgl).to_array()
}

fn decode(bytes: &[u8; 64]) -> (Sqe, Sgl) {
    let sqe = Sqe::from_array(*bytes);
    let sgl = sqe.sgl().decode().expect("a keyed SGL");
    (sqe, sgl)
}

fn bench_capsule(c: &mut Criterion) {
    let dir = tempfile::tempdir().expect("temporary directory");
    let (_reg, ctrl, qid) = controller(dir.path());
    let bytes = read_capsule();
    let (sqe, sgl) = decode(&bytes);
    assert!(matches!(sgl, Sgl::KeyedDataBlock { len: 4096, .. }));
    assert!(matches!(
        classify(&sqe, qid, Some(&ctrl), MAX_IO_BYTES),
        Ok((Kind::Io(_), _))
    ));

    let mut g = c.benchmark_group("capsule");
    g.throughput(Throughput::Elements(1));
    g.bench_function("decode_sqe_keyed_sgl", |b| {
        b.iter(|| decode(black_box(&bytes)))
    });
    g.bench_function("classify_read_4k", |b| {
        b.iter(|| classify(black_box(&sqe), qid, Some(&ctrl), MAX_IO_BYTES))
    });
    g.bench_function("decode_and_classify_read_4k", |b| {
        b.iter(|| {
            let (sqe, sgl) = decode(black_box(&bytes));
            (classify(&sqe, qid, Some(&ctrl), MAX_IO_BYTES), sgl)
        })
    });
    g.finish();
}

criterion_group!(benches, bench_capsule);
criterion_main!(benches);
