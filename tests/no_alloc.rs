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

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use common::*;
use nvme::Sqe;
use nvmf_initiator::capsule::DataDir;
use nvmf_initiator::queue::{NvmeRdmaQueue, QueueCompletion};
use nvmf_initiator::IoBuf;

/// Counts allocations (alloc, alloc_zeroed, realloc) per thread while `WATCH` is set,
/// and keeps the backtraces of each thread's first few.
struct Counting;

static WATCH: AtomicBool = AtomicBool::new(false);
/// Per thread (by kernel thread ID): the TID (0 = free slot) and its allocations.
static SLOTS: [(AtomicI32, AtomicU64); 64] = [const { (AtomicI32::new(0), AtomicU64::new(0)) }; 64];
static TRACES: Mutex<Vec<(i32, String)>> = Mutex::new(Vec::new());
const KEEP_TRACES: u64 = 2;

thread_local! {
    /// Set while this thread records a backtrace (which allocates itself).
    static IN_TRACE: Cell<bool> = const { Cell::new(false) };
    /// This thread's kernel thread ID (0 until asked).
    static TID: Cell<i32> = const { Cell::new(0) };
}

fn tid() -> i32 {
    TID.with(|t| {
        if t.get() == 0 {
            // SAFETY: gettid has no preconditions.
            t.set(unsafe { libc::gettid() });
        }
        t.get()
    })
}

impl Counting {
    fn note(&self) {
        // A backtrace being recorded allocates (symbolization): not counted.
        if !WATCH.load(Ordering::Relaxed) || IN_TRACE.with(|t| t.get()) {
            return;
        }
        let me = tid();
        let Some((_, count)) = SLOTS.iter().find(|(t, _)| {
            let cur = t.load(Ordering::Relaxed);
            cur == me
                || (cur == 0
                    && t.compare_exchange(0, me, Ordering::Relaxed, Ordering::Relaxed)
                        .is_ok())
        }) else {
            return;
        };
        let n = count.fetch_add(1, Ordering::Relaxed);
        if n >= KEEP_TRACES {
            return;
        }
        IN_TRACE.with(|t| t.set(true));
        let bt = std::backtrace::Backtrace::force_capture().to_string();
        if let Ok(mut t) = TRACES.lock() {
            t.push((me, bt));
        }
        IN_TRACE.with(|t| t.set(false));
    }
}

/// `(thread name, allocations)` of every thread that allocated while watched.
fn per_thread() -> Vec<(i32, String, u64)> {
    SLOTS
        .iter()
        .map(|(t, c)| (t.load(Ordering::Relaxed), c.load(Ordering::Relaxed)))
        .filter(|&(t, _)| t != 0)
        .map(|(t, c)| {
            let name = std::fs::read_to_string(format!("/proc/self/task/{t}/comm"))
                .map(|s| s.trim().to_string())
                .unwrap_or_else(|_| "(gone)".into());
            (t, name, c)
        })
        .collect()
}

// SAFETY: every call is forwarded to the system allocator unchanged; counting touches
// only atomics and, on the recording thread, a reentrancy flag.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        self.note();
        // SAFETY: forwarded with the caller's guarantees.
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        self.note();
        // SAFETY: forwarded with the caller's guarantees.
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        self.note();
        // SAFETY: forwarded with the caller's guarantees.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded with the caller's guarantees.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

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
    for (_, c) in &SLOTS {
        c.store(0, Ordering::Relaxed);
    }
    TRACES.lock().unwrap_or_else(|e| e.into_inner()).clear();
    WATCH.store(true, Ordering::SeqCst);
    for w in MIX {
        run_ios(q, &mut out, &mut free, w, N);
    }
    WATCH.store(false, Ordering::SeqCst);
    let threads = per_thread();
    // The data path: the target's poll group thread(s) and this thread (the host
    // queue and its soft provider). The control, admin and CM threads are not.
    let data_path: Vec<_> = threads
        .iter()
        .filter(|(t, name, _)| *t == me || name.starts_with("nvmf-pg"))
        .collect();
    eprintln!("allocations while watched, per thread (tid, name, count): {threads:?}");
    let allocs: u64 = data_path.iter().map(|d| d.2).sum();
    let traces = TRACES
        .lock()
        .map(|t| {
            t.iter()
                .filter(|(tid, _)| data_path.iter().any(|d| d.0 == *tid))
                .map(|(tid, bt)| format!("thread {tid}:\n{bt}"))
                .collect::<Vec<_>>()
                .join("\n----\n")
        })
        .unwrap_or_default();
    assert_eq!(
        allocs,
        0,
        "{allocs} allocations on the data path during {} I/Os after warm-up (mix {MIX:?}); \
         per thread (tid, name, allocations): {threads:?}; the first of each:\n{traces}",
        N * MIX.len()
    );
    host.disconnect().expect("disconnect");
}
