//! The target's request core per command, without a provider or io_uring
//! (`target/src/rdma/core.rs`, NVMe RDMA Transport 1.x §3, SPDK's request states):
//!
//! - `request_core/read_4k`: a 4 KiB Read's whole life in the core: the capsule
//!   received (SQE copied, `classify`, keyed SGL checked, a data buffer taken),
//!   `SubmitIo`, the io_uring completion, `PostWriteAndSend` (RDMA WRITE + response
//!   SEND with Invalidate), the SEND's completion, `RepostRecv`.
//! - `request_core/read_4k_to_submit`: the first part alone, capsule received to the
//!   actions it returns (`SubmitIo`), timed over batches of 32 capsules (QD32); the
//!   rest of each command's life runs untimed.
//!
//! The simulated transport (`nvmf_target::rdma::sim`) only copies the 64-byte SQE into
//! the receive buffer and hands back re-posted buffers; io_uring and the work requests
//! "complete" at once with their full length. What the poll group adds on top is the
//! provider (`post_send_list`, `poll_cq`) and the ring.
//!
//! Run: `cargo bench --bench request_core` (`-- --quick` for a short run).
use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use nvmf_target::rdma::action::{Action, IoOp};
use transport::verbs::WcStatus;

#[path = "common/target_sim.rs"]
mod target_sim;
use target_sim::{read_capsule, Target, IO_QPN};

/// Commands in flight for `read_4k_to_submit` (within the I/O queue's SQ size).
const BATCH: u16 = 32;

/// Carries out the core's actions as a transport and io_uring that succeed at once
/// would, until it has none; returns the responses posted.
fn drain(t: &mut Target) -> u32 {
    let now = t.now;
    let mut responses = 0;
    while let Some(a) = t.sim.poll_action() {
        match a {
            Action::RepostRecv { .. } => {}
            Action::SubmitIo {
                req,
                op: IoOp::Read { buf, .. },
            } => t.sim.core.io_completed(req, buf.len as i32, now),
            Action::PostWriteAndSend { qpn, response, .. } => {
                responses += 1;
                t.sim
                    .core
                    .send_completed(response.wr_id, qpn, WcStatus::Success, now);
            }
            other => panic!("a 4 KiB Read does not ask for {other:?}"),
        }
    }
    responses
}

/// The capsule received, then actions until the core asks for the read; returns it.
fn to_submit(t: &mut Target, capsule: &[u8]) -> Option<(u32, IoOp)> {
    t.sim.deliver(IO_QPN, capsule, t.now)?;
    while let Some(a) = t.sim.poll_action() {
        if let Action::SubmitIo { req, op } = a {
            return Some((req, op));
        }
    }
    None
}

fn bench_request_core(c: &mut Criterion) {
    let mut t = target_sim::connected();
    let capsule = read_capsule();
    // One command first: the bench measures what it claims only if the core answers it.
    t.sim
        .deliver(IO_QPN, &capsule, t.now)
        .expect("a receive buffer");
    assert_eq!(drain(&mut t), 1, "one response to a 4 KiB Read");

    let mut g = c.benchmark_group("request_core");
    g.throughput(Throughput::Elements(1));
    g.bench_function("read_4k", |b| {
        b.iter(|| {
            t.sim.deliver(IO_QPN, black_box(&capsule), t.now);
            drain(&mut t)
        })
    });
    let capsules: Vec<[u8; 64]> = (0..BATCH)
        .map(|cid| {
            let mut sqe = nvme::Sqe::from_array(capsule);
            sqe.set_cid(cid);
            sqe.to_array()
        })
        .collect();
    g.bench_function("read_4k_to_submit", |b| {
        let mut submitted = Vec::with_capacity(usize::from(BATCH));
        b.iter_custom(|iters| {
            let mut timed = Duration::ZERO;
            let mut left = iters;
            while left > 0 {
                let n = left.min(u64::from(BATCH)) as usize;
                let start = Instant::now();
                for c in &capsules[..n] {
                    submitted
                        .push(to_submit(&mut t, black_box(c)).expect("SubmitIo of a 4 KiB Read"));
                }
                timed += start.elapsed();
                // Untimed: the reads complete and are answered.
                let now = t.now;
                for (req, op) in submitted.drain(..) {
                    let IoOp::Read { buf, .. } = op else {
                        panic!("a 4 KiB Read submits {op:?}");
                    };
                    t.sim.core.io_completed(req, buf.len as i32, now);
                }
                assert_eq!(drain(&mut t), n as u32, "every Read answered");
                left -= n as u64;
            }
            timed
        })
    });
    g.finish();
}

criterion_group!(benches, bench_request_core);
criterion_main!(benches);
