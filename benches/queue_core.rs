//! The host queue core's own cost per command, without a provider: submit, commit the
//! posts, the SEND's completion, the response capsule (and a Local Invalidate where the
//! target answered with a plain SEND), the completion handed out. What the driver adds
//! on top is the provider's work (`post_send`, `poll_cq`, the soft provider's sockets).
//!
//! Run: `cargo bench --bench queue_core`.
use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion};
use nvme::{Cqe, Sqe};
use nvmf_initiator::queue::core::{BufSpan, MrSpan, QueueMemory, RemoteKeys, WrId, WrKind};
use nvmf_initiator::queue::{QueueCompletion, QueueConfig, QueueCore};
use nvmf_initiator::DataDir;
use transport::verbs::{WcOpcode, WcStatus, WorkCompletion};

const DEPTH: u16 = 32;
const MAX_IO: usize = 128 << 10;

fn core() -> QueueCore {
    let mut cfg = QueueConfig::new(1, DEPTH, MAX_IO, "127.0.0.2:4420".parse().unwrap());
    cfg.in_capsule_bytes = 4096;
    let span = |addr, lkey| MrSpan { addr, lkey };
    let mem = QueueMemory {
        sqe: span(0x7f00_1000_0000, 2),
        rsp: span(0x7f00_2000_0000, 3),
    };
    let keys: Vec<u32> = (1..=u32::from(DEPTH)).map(|i| i << 8).collect();
    QueueCore::new(&cfg, mem, RemoteKeys::Windows(&keys)).unwrap()
}

/// A pool buffer's span (the data lives in the host's pool, not in the queue).
fn data_buf(len: usize) -> Option<BufSpan> {
    Some(BufSpan {
        addr: 0x7f00_0000_0000,
        len,
        lkey: 1,
    })
}

fn wc(kind: WrKind, index: u16, op: WcOpcode) -> WorkCompletion {
    let id = WrId {
        kind,
        index: u32::from(index),
    };
    WorkCompletion::new(id.to_u64(), WcStatus::Success, op, 0x11)
}

/// How the target answers.
#[derive(Clone, Copy)]
enum Answer {
    /// SEND with Invalidate of the granted key.
    SendWithInvalidate,
    /// A plain SEND: the host posts a Local Invalidate.
    PlainSend,
}

/// One command through the core; `buf` is the receive buffer the response lands in.
fn one(
    c: &mut QueueCore,
    sqe: Sqe,
    data: DataDir,
    answer: Answer,
    buf: u16,
    out: &mut Vec<QueueCompletion>,
) {
    let buf_span = if data.is_empty() {
        None
    } else {
        data_buf(data.len())
    };
    let s = c.submit(sqe, data, buf_span).unwrap();
    let cid = c.submitted(black_box(s), Ok(())).unwrap();
    let key = c.window_key(cid);
    c.handle_wc(&wc(WrKind::Send, cid, WcOpcode::Send), None, out);
    let mut r = wc(WrKind::Recv, buf, WcOpcode::Recv);
    r.byte_len = 16;
    let granted = matches!(data, DataDir::ControllerToHost { .. });
    r.invalidated_rkey = match answer {
        Answer::SendWithInvalidate if granted => key,
        _ => None,
    };
    c.handle_wc(&r, Some(Cqe::success(cid, 1, 0).to_array()), out);
    while let Some(a) = c.poll_action() {
        let _ = black_box(a);
    }
    if granted && matches!(answer, Answer::PlainSend) {
        c.handle_wc(&wc(WrKind::LocalInv, cid, WcOpcode::LocalInv), None, out);
    }
    assert_eq!(out.len(), 1);
    out.clear();
}

fn bench_commands(c: &mut Criterion) {
    let mut g = c.benchmark_group("queue_core");
    let cases = [
        (
            "read_4k_send_with_invalidate",
            Sqe::read(0, 1, 0, 7, false),
            DataDir::ControllerToHost { len: 4096 },
            Answer::SendWithInvalidate,
        ),
        (
            "read_4k_plain_send_local_invalidate",
            Sqe::read(0, 1, 0, 7, false),
            DataDir::ControllerToHost { len: 4096 },
            Answer::PlainSend,
        ),
        (
            "write_4k_in_capsule",
            Sqe::write(0, 1, 0, 7, false),
            DataDir::HostToController { len: 4096 },
            Answer::SendWithInvalidate,
        ),
    ];
    for (name, sqe, data, answer) in cases {
        let mut q = core();
        let mut out = Vec::with_capacity(1);
        let mut buf = 0u16;
        g.bench_function(name, |b| {
            b.iter(|| {
                one(&mut q, sqe, data, answer, buf, &mut out);
                buf = (buf + 1) % DEPTH;
            })
        });
    }
    g.finish();
}

criterion_group!(benches, bench_commands);
criterion_main!(benches);
