//! No allocation per I/O (issue 10 item 2): a counting global allocator counts, per
//! thread, the allocations of the whole process while a loopback host runs reads and
//! writes (in-capsule, RDMA READ and RDMA WRITE data, QD1 to QD32) against an
//! in-process target on a real file. After a warm-up that lets every queue, table and
//! buffer reach its working size, the same I/O mix must allocate nothing on the data
//! path: the target's poll group thread (`nvmf-pg*`: request core, io_uring, its soft
//! provider) and the test's thread (the host queue and its soft provider). The
//! control thread's Keep Alive tick (every 100 ms) is not the data path; the counts of
//! every thread are printed (`-- --nocapture`).
//!
//! On failure the message names the threads and carries the backtraces of each data
//! path thread's first allocations, which name the code to fix.
mod common;

mod counting;

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use common::*;
use counting::*;
use nvme::Sqe;
use nvmf_initiator::capsule::DataDir;
use nvmf_initiator::queue::{NvmeRdmaQueue, QueueCompletion};
use nvmf_initiator::IoBuf;

#[global_allocator]
static GLOBAL: Counting = Counting;

/// The tests of this binary count process-wide: one at a time.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// The I/O mix: (bytes, write, queue depth). 4 KiB writes go in the capsule, 128 KiB
/// writes are RDMA READs by the target, reads are RDMA WRITEs of one or many packets.
const MIX: [(usize, bool, usize); 5] = [
    (4096, true, 1),
    (4096, false, 1),
    (4096, false, 32),
    (128 << 10, true, 16),
    (128 << 10, false, 16),
];

/// Runs `count` commands of `size` bytes at depth `depth` on `q` over the first
/// `span` bytes of the namespace; allocates nothing itself (`out` is reused, the
/// buffers go round between `free` and the queue, a write's data is what the buffer
/// held before).
fn run_ios(
    q: &mut NvmeRdmaQueue,
    out: &mut Vec<QueueCompletion>,
    free: &mut Vec<IoBuf>,
    (size, write, depth): (usize, bool, usize),
    count: usize,
) {
    let blocks = (size / 512) as u16;
    let span_blocks = (8 << 20) / 512u64;
    let (mut issued, mut done, mut inflight) = (0usize, 0usize, 0usize);
    let deadline = Instant::now() + Duration::from_secs(60);
    while done < count {
        assert!(
            Instant::now() < deadline,
            "I/O stalled: {size} B, QD{depth}"
        );
        while issued < count && inflight < depth && q.can_submit() {
            let slba = (issued as u64 * u64::from(blocks) * 7) % (span_blocks - u64::from(blocks));
            let mut buf = free.pop().expect("a buffer per command in flight");
            assert!(buf.set_len(size));
            let r = if write {
                q.submit(
                    Sqe::write(0, 1, slba, blocks - 1, false),
                    DataDir::HostToController { len: size },
                    Some(buf),
                )
            } else {
                q.submit(
                    Sqe::read(0, 1, slba, blocks - 1, false),
                    DataDir::ControllerToHost { len: size },
                    Some(buf),
                )
            };
            r.map_err(|e| e.error).expect("submit");
            issued += 1;
            inflight += 1;
        }
        q.poll(out);
        for c in out.drain(..) {
            let ok = c.result.as_ref().is_ok_and(|cqe| cqe.status().is_success());
            assert!(ok, "{size} B, QD{depth}: command {} failed", c.cid);
            free.push(c.buf.expect("the buffer comes back"));
            done += 1;
            inflight -= 1;
        }
    }
}

#[test]
fn io_after_warm_up_allocates_nothing() {
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let t = start_target(60, 16 << 20);
    let mut opts = host_options(&t, 61, 1, 64);
    // No Keep Alive: a controller timer is not the data path.
    opts.kato_ms = 0;
    let mut host = nvmf_initiator::SyncHost::connect(&opts).expect("host connects");
    let pool = host.pool().clone();
    let q = &mut host.io_queues()[0];
    let mut out = Vec::with_capacity(256);
    // One pool buffer per command in flight, of the largest size; a command's buffer
    // is a truncated view of it, so the whole block goes round.
    let mut free: Vec<IoBuf> = (0..32)
        .map(|_| pool.try_alloc(128 << 10).unwrap().expect("pool space"))
        .collect();
    // Warm-up: every table, queue and buffer grows to its working size.
    for _ in 0..2 {
        for w in MIX {
            run_ios(q, &mut out, &mut free, w, 400);
        }
    }
    const N: usize = 400;
    // The counter counts: one allocation of this thread while watched.
    let me = tid();
    WATCH.store(true, Ordering::SeqCst);
    drop(std::hint::black_box(Box::new(7u64)));
    WATCH.store(false, Ordering::SeqCst);
    assert_eq!(
        per_thread().iter().find(|t| t.0 == me).map(|t| t.2),
        Some(1)
    );
    reset();
    WATCH.store(true, Ordering::SeqCst);
    for w in MIX {
        run_ios(q, &mut out, &mut free, w, N);
    }
    WATCH.store(false, Ordering::SeqCst);
    // The data path: the target's poll group thread(s) and this thread (the host
    // queue and its soft provider). The control, admin and CM threads are not.
    let (allocs, threads, traces) =
        data_path_allocs(|t, name| t == me || name.starts_with("nvmf-pg"));
    eprintln!("allocations while watched, per thread (tid, name, count): {threads:?}");
    assert_eq!(
        allocs,
        0,
        "{allocs} allocations on the data path during {} I/Os after warm-up (mix {MIX:?}); \
         per thread (tid, name, allocations): {threads:?}; the first of each:\n{traces}",
        N * MIX.len()
    );
    host.disconnect().expect("disconnect");
}

/// The ICRC checker meets a packet length or a source for the first time on the data
/// path (a train of a new shape, a first response of a new size): its per-length ID
/// basis and per-source state are made without allocating, on receive
/// (`IcrcChecker::check` solving a segment's IPv4 ID) and on transmit
/// (`IcrcChecker::ipv4_id_delta` for segment `i` of a GSO train).
#[test]
fn the_icrc_checker_meets_new_lengths_without_allocating() {
    use std::net::Ipv4Addr;
    use transport::wire::{icrc::IcrcIpInfo, IcrcCheck, IcrcChecker};
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let info = |id: u16, host: u8| IcrcIpInfo {
        src: Ipv4Addr::new(10, 0, 0, host).into(),
        dst: Ipv4Addr::new(10, 0, 0, 1).into(),
        ipv4_id: id,
        udp_sport: 0xC000,
        udp_dport: 4791,
    };
    // Packets of 40 lengths (12 bytes to ~4 KiB), each as segment 3 of a train, from
    // 8 sources; built before watching.
    let packets: Vec<(u8, Vec<u8>)> = (0..40usize)
        .map(|k| {
            let host = 2 + (k % 8) as u8;
            let mut p: Vec<u8> = (0..12 + k * 101).map(|i| (i * 7 + k) as u8).collect();
            let crc = transport::wire::icrc::icrc(&info(3, host), &p);
            p.extend_from_slice(&crc.to_le_bytes());
            (host, p)
        })
        .collect();
    let mut rx = IcrcChecker::new();
    let mut tx = IcrcChecker::new();
    let mut results = Vec::with_capacity(packets.len());
    let mut deltas = 0u32;
    let me = tid();
    reset();
    WATCH.store(true, Ordering::SeqCst);
    for (host, p) in &packets {
        results.push(rx.check(&info(0, *host), p));
        deltas ^= tx.ipv4_id_delta(p.len(), 5);
    }
    WATCH.store(false, Ordering::SeqCst);
    let (allocs, threads, traces) = data_path_allocs(|t, _| t == me);
    assert!(
        results.iter().all(|r| *r == IcrcCheck::SolvedIpv4Id(3)),
        "every segment's ID is solved: {results:?}"
    );
    std::hint::black_box(deltas);
    assert_eq!(
        allocs, 0,
        "{allocs} allocations for 40 new lengths; {threads:?}; the first:\n{traces}"
    );
}
