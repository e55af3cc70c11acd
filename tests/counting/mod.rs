//! A counting global allocator for the no-allocation tests (`tests/no_alloc.rs`,
//! `tests/async_no_alloc.rs`): each test binary installs [`Counting`] as its
//! `#[global_allocator]`; while [`WATCH`] is set it counts, per thread, the
//! allocations of the whole process and keeps the backtraces of each thread's first
//! few, which name the code to fix.
#![allow(dead_code)]
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, Ordering};
use std::sync::Mutex;

/// Counts allocations (alloc, alloc_zeroed, realloc) per thread while `WATCH` is set,
/// and keeps the backtraces of each thread's first few.
pub struct Counting;

pub static WATCH: AtomicBool = AtomicBool::new(false);
/// Per thread (by kernel thread ID): the TID (0 = free slot) and its allocations.
pub static SLOTS: [(AtomicI32, AtomicU64); 64] =
    [const { (AtomicI32::new(0), AtomicU64::new(0)) }; 64];
pub static TRACES: Mutex<Vec<(i32, String)>> = Mutex::new(Vec::new());
pub const KEEP_TRACES: u64 = 2;

thread_local! {
    /// Set while this thread records a backtrace (which allocates itself).
    static IN_TRACE: Cell<bool> = const { Cell::new(false) };
    /// This thread's kernel thread ID (0 until asked).
    static TID: Cell<i32> = const { Cell::new(0) };
}

pub fn tid() -> i32 {
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
pub fn per_thread() -> Vec<(i32, String, u64)> {
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

/// Clears the counts and traces.
pub fn reset() {
    for (_, c) in &SLOTS {
        c.store(0, Ordering::Relaxed);
    }
    TRACES.lock().unwrap_or_else(|e| e.into_inner()).clear();
}

/// The allocations counted on the threads `is_data_path` selects (by TID and name),
/// with the first backtraces of each of them.
pub fn data_path_allocs(
    is_data_path: impl Fn(i32, &str) -> bool,
) -> (u64, Vec<(i32, String, u64)>, String) {
    let threads = per_thread();
    let picked: Vec<_> = threads
        .iter()
        .filter(|(t, name, _)| is_data_path(*t, name))
        .cloned()
        .collect();
    let allocs = picked.iter().map(|d| d.2).sum();
    let traces = TRACES
        .lock()
        .map(|t| {
            t.iter()
                .filter(|(tid, _)| picked.iter().any(|d| d.0 == *tid))
                .map(|(tid, bt)| format!("thread {tid}:\n{bt}"))
                .collect::<Vec<_>>()
                .join("\n----\n")
        })
        .unwrap_or_default();
    (allocs, threads, traces)
}
