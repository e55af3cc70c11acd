//! The async host's zero-copy path copies nothing and allocates nothing per I/O
//! (issue 15, item 3), in both completion modes: a counting global allocator
//! (`tests/counting`) counts, per thread, every allocation of the process while tasks
//! on a current-thread runtime write and read pool buffers with
//! `Namespace::write_buf` / `read_buf` (4 KiB in-capsule writes, 128 KiB RDMA READ
//! writes, 4 KiB and 128 KiB reads; one and eight commands in flight) against an
//! in-process target on a real file. After a warm-up, the host's data path must
//! allocate nothing: the runtime's thread (this test's: the tasks, their futures, the
//! queue and its soft provider in `Completions::Runtime`) and the host's poll thread
//! (`nvmf-poll*`). The target's poll group is `tests/no_alloc.rs`'s subject (its
//! soft provider builds per-length ICRC tables lazily, which the varying GSO trains of
//! this test's concurrent commands keep meeting now and then); its counts are
//! printed. No copy: the library's copy counter
//! (`Host::bytes_copied`) stays 0, every buffer comes back at the address it left
//! with, and what was read is what was written.
mod common;
mod counting;

use std::sync::atomic::Ordering;

use common::*;
use counting::*;
use nvmf_initiator::{Completions, Host, IoBuf, Namespace};

#[global_allocator]
static GLOBAL: Counting = Counting;

/// One round: writes then reads `bufs` at depth `bufs.len()` (a fixed set of futures
/// joined in place: no task spawned, nothing allocated here), checking the data and
/// that every buffer comes back where it was.
async fn round(ns: &Namespace, bufs: &mut [Option<IoBuf>], size: usize, base: u64, tag: u8) {
    let blocks = (size / 512) as u64;
    for (i, b) in bufs.iter_mut().enumerate() {
        let buf = b.as_mut().expect("buffer");
        assert!(buf.set_len(size));
        let fill = tag.wrapping_add(i as u8);
        buf.fill(fill);
    }
    for write in [true, false] {
        // Up to eight commands in flight, joined without allocation.
        let mut it = bufs.iter_mut();
        let next =
            |it: &mut std::slice::IterMut<'_, Option<IoBuf>>| it.next().and_then(|b| b.take());
        let mut taken: [Option<IoBuf>; 8] = Default::default();
        for t in taken.iter_mut() {
            *t = next(&mut it);
        }
        let addrs: [u64; 8] = std::array::from_fn(|i| taken[i].as_ref().map_or(0, |b| b.addr()));
        let go = |i: usize, b: Option<IoBuf>| {
            let ns = ns.clone();
            async move {
                let b = b?;
                let slba = base + i as u64 * blocks;
                let r = if write {
                    ns.write_buf(slba, b, false).await
                } else {
                    ns.read_buf(slba, b).await
                };
                Some(r.expect("I/O"))
            }
        };
        let [a0, a1, a2, a3, a4, a5, a6, a7] = taken;
        let back = tokio::join!(
            go(0, a0),
            go(1, a1),
            go(2, a2),
            go(3, a3),
            go(4, a4),
            go(5, a5),
            go(6, a6),
            go(7, a7)
        );
        let back = [
            back.0, back.1, back.2, back.3, back.4, back.5, back.6, back.7,
        ];
        for (i, b) in back.into_iter().enumerate() {
            if let Some(b) = b {
                assert_eq!(b.addr(), addrs[i], "buffer {i} came back where it left");
                let want = tag.wrapping_add(i as u8);
                assert!(b.iter().all(|&x| x == want), "buffer {i}: data read back");
                bufs[i] = Some(b);
            }
        }
        if write {
            for b in bufs.iter_mut().flatten() {
                b.fill(0);
            }
        }
    }
}

fn zero_copy_no_alloc(mode: Completions, target: u8, host_ip: u8) {
    let t = start_target(target, 32 << 20);
    let mut opts = host_options(&t, host_ip, 1, 32);
    opts.completions = mode;
    // No Keep Alive: the controller's timer is not the data path.
    opts.kato_ms = 0;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async move {
        let host = Host::connect(opts).await.expect("host connects");
        let ns = host.namespace(1).await.unwrap();
        let mut bufs: Vec<Option<IoBuf>> = Vec::new();
        for _ in 0..8 {
            bufs.push(Some(host.alloc(128 << 10).await.unwrap()));
        }
        let mix = [
            (4096usize, 1usize),
            (4096, 8),
            (128 << 10, 1),
            (128 << 10, 8),
        ];
        for _ in 0..3 {
            for (k, &(size, depth)) in mix.iter().enumerate() {
                for r in 0..20 {
                    round(&ns, &mut bufs[..depth], size, (k as u64) << 12, r as u8).await;
                }
            }
        }
        let me = tid();
        reset();
        WATCH.store(true, Ordering::SeqCst);
        let mut ios = 0;
        for (k, &(size, depth)) in mix.iter().enumerate() {
            for r in 0..50 {
                round(&ns, &mut bufs[..depth], size, (k as u64) << 12, r as u8).await;
                ios += 2 * depth;
            }
        }
        WATCH.store(false, Ordering::SeqCst);
        let (allocs, threads, traces) =
            data_path_allocs(|t, name| t == me || name.starts_with("nvmf-poll"));
        eprintln!("{mode:?}: allocations while watched (tid, name, count): {threads:?}");
        assert_eq!(
            allocs, 0,
            "{mode:?}: {allocs} allocations on the data path during {ios} zero-copy I/Os; \
             per thread: {threads:?}; the first of each:\n{traces}"
        );
        assert_eq!(host.bytes_copied(), 0, "the zero-copy path copied nothing");
        drop(bufs);
        host.disconnect().await.expect("disconnect");
    });
}

#[test]
fn zero_copy_io_allocates_nothing_with_poll_threads() {
    zero_copy_no_alloc(Completions::PollThread, 96, 97);
}

#[test]
fn zero_copy_io_allocates_nothing_polled_from_the_runtime() {
    zero_copy_no_alloc(Completions::Runtime, 98, 99);
}
