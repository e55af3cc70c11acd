//! What plain (unregistered) io_uring buffers cost against fixed ones (issue 20): the
//! fallback a target takes when `RLIMIT_MEMLOCK` leaves no room to register its data
//! slab (`nvmf_target::memory`, `Ring::add_plain_buffers`).
//!
//! - `uring_buffers/read_4k/{fixed,plain}` and `read_128k/...`: one io_uring read of a
//!   page-cached ext4 file into the slab, submitted and waited for (QD1): the
//!   `io_uring_enter`, the page-cache copy and, for a plain buffer, the kernel's lookup
//!   of the user pages.
//!
//! Registering the slab needs memlock room: run as root (or with `ulimit -l` above
//! 4 MiB). Run: `cargo bench --bench uring_buffers`.
use std::io::Write;
use std::os::fd::AsRawFd;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use nvmf_target::buffers::Slab;
use nvmf_target::uring::Ring;

const SLAB: usize = 4 << 20;

fn bench(c: &mut Criterion) {
    let mut file = tempfile::NamedTempFile::new_in(std::env::temp_dir()).unwrap();
    file.write_all(&vec![0x5A; 1 << 20]).unwrap();
    file.flush().unwrap();
    let fixed = Slab::new(SLAB).unwrap();
    let plain = Slab::new(SLAB).unwrap();
    let mut ring = Ring::new(64).unwrap();
    // SAFETY: both slabs outlive the ring's operations (each completes in its iteration)
    // and are dropped after the ring.
    unsafe {
        ring.register_buffers(&[(fixed.as_ptr(), fixed.len())])
            .expect("register a 4 MiB slab: run as root or raise ulimit -l");
        ring.add_plain_buffers(&[(plain.as_ptr(), plain.len())])
            .unwrap();
    }
    ring.register_files(&[file.as_file().as_raw_fd()]).unwrap();
    let mut g = c.benchmark_group("uring_buffers");
    for len in [4096u32, 128 << 10] {
        g.throughput(Throughput::Bytes(u64::from(len)));
        for (name, buf, slab) in [("fixed", 0u16, &fixed), ("plain", 1, &plain)] {
            let id = format!("read_{}k/{name}", len / 1024);
            g.bench_function(id, |b| {
                b.iter(|| {
                    ring.read_fixed(0, buf, slab.as_ptr(), len, 0, 1).unwrap();
                    ring.submit_and_wait(1).unwrap();
                    let mut res = 0;
                    while ring.poll_completions(|_, r| res = r) == 0 {
                        ring.submit_and_wait(1).unwrap();
                    }
                    assert_eq!(res, len as i32);
                })
            });
        }
    }
    g.finish();
    drop(ring);
}

criterion_group!(benches, bench);
criterion_main!(benches);
