//! The pool on a real soft device: sizes, splitting, back-pressure, and the sizing
//! rules of [`pool_bytes`].
use std::time::Duration;

use transport::soft::SoftProvider;
use transport::verbs::Provider;

use super::*;

const MIB: usize = 1 << 20;

fn pool(ip_last: u8, bytes: usize) -> BufferPool {
    let ip = std::net::IpAddr::from([127, 0, 77, ip_last]);
    let dev = SoftProvider::open(&SoftProvider::device_config(ip, 1)).expect("soft device");
    let pd = transport::verbs::Device::alloc_pd(&*dev).unwrap();
    BufferPool::register::<SoftProvider>(&dev, pd, bytes, RemoteAccess::Windows).unwrap()
}

#[test]
fn buffers_are_disjoint_views_that_come_back() {
    let p = pool(1, 64 << 10);
    assert_eq!(
        (p.capacity(), p.max_alloc(), p.free_bytes()),
        (65536, 65536, 65536)
    );
    let mut a = p.try_alloc(4096).unwrap().unwrap();
    let mut b = p.try_alloc(5000).unwrap().unwrap();
    assert_eq!((a.len(), b.len()), (4096, 5000));
    // 5000 bytes take an 8 KiB block.
    assert_eq!(p.free_bytes(), 65536 - 4096 - 8192);
    a.fill(1);
    b.fill(2);
    assert!(a.iter().all(|&x| x == 1) && b.iter().all(|&x| x == 2));
    assert!(a.addr() + 4096 <= b.addr() || b.addr() + 8192 <= a.addr());
    assert_eq!(a.lkey(), p.lkey());
    assert_eq!(b.capacity(), 8192);
    assert!(b.set_len(8192) && b.len() == 8192);
    assert!(!b.set_len(8193));
    assert!(b.set_len(5000));
    drop(a);
    drop(b);
    assert_eq!(p.free_bytes(), 65536);
    assert!(matches!(p.try_alloc(0), Err(PoolError::Empty)));
    let e = p.try_alloc(65537).unwrap_err();
    assert!(matches!(
        e,
        PoolError::TooLarge {
            len: 65537,
            max: 65536,
            ..
        }
    ));
    assert!(e.to_string().contains("buffer_pool_bytes"), "{e}");
}

#[test]
fn split_views_share_the_block_until_the_last_is_dropped() {
    let p = pool(2, 64 << 10);
    let mut whole = p.try_alloc(16384).unwrap().unwrap();
    let base = whole.addr();
    let head = whole.split_to(4096);
    assert!(!whole.set_len(16384), "a shared view cannot grow");
    let mut tail = whole.split_off(8192);
    assert_eq!((head.addr(), head.len()), (base, 4096));
    assert_eq!((whole.addr(), whole.len()), (base + 4096, 8192));
    assert_eq!((tail.addr(), tail.len()), (base + 12288, 4096));
    tail.fill(9);
    // Not neighbours: refused and handed back.
    let tail = head.is_from(&p).then_some(tail).unwrap();
    let mut head = head;
    let tail = head.unsplit(tail).unwrap_err();
    head.unsplit(whole).unwrap();
    head.unsplit(tail).unwrap();
    assert_eq!((head.addr(), head.len()), (base, 16384));
    assert!(head[12288..].iter().all(|&x| x == 9));
    assert_eq!(p.free_bytes(), 65536 - 16384);
    let bytes = head.into_bytes();
    let clone = bytes.clone();
    drop(bytes);
    assert_eq!(
        p.free_bytes(),
        65536 - 16384,
        "a Bytes clone still holds it"
    );
    assert_eq!(clone.len(), 16384);
    drop(clone);
    assert_eq!(p.free_bytes(), 65536);
}

#[test]
fn a_full_pool_makes_the_next_buffer_wait_never_fail() {
    let p = pool(3, 64 << 10);
    let held = p.try_alloc(65536).unwrap().unwrap();
    assert!(p.try_alloc(4096).unwrap().is_none());
    assert!(matches!(
        p.alloc_blocking(4096, Duration::from_millis(20)),
        Err(PoolError::Timeout { len: 4096, .. })
    ));
    // A blocked allocation gets its buffer once the holder gives it back.
    let p2 = p.clone();
    let t = std::thread::spawn(move || p2.alloc_blocking(8192, Duration::from_secs(10)));
    std::thread::sleep(Duration::from_millis(50));
    drop(held);
    let b = t.join().unwrap().expect("served after the release");
    assert_eq!(b.len(), 8192);
    assert!(p.waits() >= 2);
    // The async wait likewise.
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let got = rt.block_on(async {
        let big = p.alloc(32768).await.unwrap();
        let waiter = {
            let p = p.clone();
            tokio::task::spawn(async move { p.alloc(65536).await.map(|b| b.len()) })
        };
        tokio::task::yield_now().await;
        drop(big);
        drop(b);
        waiter.await.unwrap()
    });
    assert_eq!(got, Ok(65536));
}

#[test]
fn pool_size_from_the_caller_or_the_memlock_limit() {
    // The soft provider pins nothing: the default, or the caller's size.
    assert_eq!(
        pool_bytes(None, false, Some(0), Some(8 * MIB as u64), 0, MIB),
        Ok(DEFAULT_POOL_BYTES)
    );
    assert_eq!(
        pool_bytes(Some(5 * MIB + 100), false, None, None, 0, MIB),
        Ok(5 * MIB)
    );
    // A pinning provider under 8 MiB: what fits after the queues' slots and 1/8.
    let limit = 8 * MIB as u64;
    let got = pool_bytes(None, true, Some(limit), Some(limit), 64 << 10, MIB).unwrap();
    assert_eq!(got, 8 * MIB - MIB - (64 << 10));
    // Unlimited: the default.
    assert_eq!(
        pool_bytes(None, true, None, None, 0, MIB),
        Ok(DEFAULT_POOL_BYTES)
    );
    // Too little for one MDTS I/O: an error naming the limit and the fix.
    let e = pool_bytes(None, true, Some(MIB as u64), Some(MIB as u64), 0, MIB)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("RLIMIT_MEMLOCK") && e.contains("ulimit -l"),
        "{e}"
    );
    // A caller's pool that does not fit the limit, or cannot hold one I/O.
    let e = pool_bytes(Some(16 * MIB), true, Some(limit), Some(limit), 0, MIB)
        .unwrap_err()
        .to_string();
    assert!(e.contains("do not fit") && e.contains("prlimit"), "{e}");
    let e = pool_bytes(Some(512 << 10), false, None, None, 0, MIB)
        .unwrap_err()
        .to_string();
    assert!(e.contains("cannot hold one I/O"), "{e}");
}
