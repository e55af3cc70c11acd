//! Command capsule micro benchmarks: what the target's request core does with a
//! received 4 KiB Read capsule before it reaches io_uring (NVMe over Fabrics 1.x §3.3,
//! NVMe RDMA Transport 1.x §3):
//!
//! - `capsule/decode_sqe_keyed_sgl`: the 64-byte SQE from the receive buffer and its
//!   keyed SGL data block (address, 24-bit length, key, invalidate).
//! - `capsule/classify_read_4k`: the target's `classify` (PSDT, FUSE, controller
//!   ready, namespace lookup, `io::decode` against the namespace and MDTS).
//! - `capsule/decode_and_classify_read_4k`: both, as one command costs.
//!
//! The controller is real: an admin Connect, Property Set CC.EN=1 and an I/O Connect
//! run through the request core (`common/target_sim.rs`). The whole request-core step
//! is `benches/request_core.rs`.
//!
//! Run: `cargo bench --bench capsule` (`-- --quick` for a short run).
use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use nvme::{Sgl, Sqe};
use nvmf_target::ana::AnaTable;
use nvmf_target::capsule::{classify, Kind};

#[path = "common/target_sim.rs"]
mod target_sim;
use target_sim::{read_capsule, IO_QPN, MAX_IO_BYTES};

fn decode(bytes: &[u8; 64]) -> (Sqe, Sgl) {
    let sqe = Sqe::from_array(*bytes);
    let sgl = sqe.sgl().decode().expect("a keyed SGL");
    (sqe, sgl)
}

fn bench_capsule(c: &mut Criterion) {
    let target = target_sim::connected();
    let queue = target.sim.core.queue(IO_QPN).expect("I/O queue");
    let ctrl = queue.ctrl.clone().expect("I/O queue controller");
    let qid = queue.qid;
    let ana = AnaTable::default();
    let bytes = read_capsule();
    let (sqe, sgl) = decode(&bytes);
    assert!(matches!(sgl, Sgl::KeyedDataBlock { len: 4096, .. }));
    assert!(matches!(
        classify(&sqe, qid, Some(&ctrl), true, MAX_IO_BYTES, &ana),
        Ok((Kind::Io(_), _))
    ));

    let mut g = c.benchmark_group("capsule");
    g.throughput(Throughput::Elements(1));
    g.bench_function("decode_sqe_keyed_sgl", |b| {
        b.iter(|| decode(black_box(&bytes)))
    });
    g.bench_function("classify_read_4k", |b| {
        b.iter(|| classify(black_box(&sqe), qid, Some(&ctrl), true, MAX_IO_BYTES, &ana))
    });
    g.bench_function("decode_and_classify_read_4k", |b| {
        b.iter(|| {
            let (sqe, sgl) = decode(black_box(&bytes));
            (
                classify(&sqe, qid, Some(&ctrl), true, MAX_IO_BYTES, &ana),
                sgl,
            )
        })
    });
    g.finish();
}

criterion_group!(benches, bench_capsule);
criterion_main!(benches);
