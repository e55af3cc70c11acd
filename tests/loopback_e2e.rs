//! End to end on loopback: the target and the host in this process, each on its own
//! 127.0.0.x address, real UDP sockets (RoCEv2 on port 4791), a real file through
//! io_uring. Patterned writes from 512 B to 1 MiB at queue depth 1 and 32, read back
//! and compared byte for byte, and the counters that show which paths ran.
mod common;

use std::sync::atomic::Ordering;

use common::*;
use nvme::Sqe;
use nvmf_initiator::capsule::DataDir;

const SIZES: [usize; 6] = [512, 4096, 8192, 65536, 131072, 1 << 20];

#[test]
fn patterned_data_round_trips_at_qd1_and_qd32() {
    let t = start_target(50, 256 << 20);
    // Four I/O queues plus the admin queue: five QPs on the target's one poll group.
    // This test sends no Keep Alive: KATO 0 turns the target's timer off, so a slow
    // phase on a loaded machine cannot expire the controller.
    let mut opts = host_options(&t, 51, 4, 64);
    opts.kato_ms = 0;
    let mut host = nvmf_initiator::SyncHost::connect(&opts).expect("host connects");
    let pg = t.target.poll_group_counters()[0].clone();
    let mut base = 0u64;
    let mut regions = Vec::new();
    for depth in [1usize, 32] {
        for size in SIZES {
            let count = if size >= 1 << 20 { 24 } else { 48 };
            pass(&mut host, base, size, count, depth, true, depth as u8);
            regions.push((base, size, count, depth));
            base += (size * count) as u64;
        }
    }
    let copied_before_reads = pg.data_bytes_copied.load(Ordering::Relaxed);
    let dev = t.target.device().counters().snapshot();
    let mut read_bytes = 0u64;
    for &(b, size, count, depth) in &regions {
        pass(&mut host, b, size, count, depth, false, depth as u8);
        read_bytes += (size * count) as u64;
    }
    let dev_after = t.target.device().counters().snapshot();

    // The file itself holds the data (through io_uring, not a cache of ours).
    let file = std::fs::read(&t.path).unwrap();
    for &(b, size, count, depth) in &regions {
        for i in [0, count - 1] {
            let off = b + (i * size) as u64;
            assert!(
                file[off as usize..off as usize + size] == pattern(off, size, depth as u8)[..],
                "file bytes at {off}"
            );
        }
    }

    // Both write paths ran: in-capsule (<= 4 KiB) and keyed SGL pulled by RDMA READ.
    assert!(
        pg.in_capsule_writes.load(Ordering::Relaxed) >= 2 * 2 * 48,
        "in-capsule writes"
    );
    assert!(
        pg.rdma_read_writes.load(Ordering::Relaxed) >= 2 * (3 * 48 + 24),
        "RDMA READ writes"
    );
    // The I/O queues drew receive buffers from the poll group's one SRQ; the admin
    // queue has buffers of its own (issue 16 item 9).
    assert!(pg.srq_qps.load(Ordering::Relaxed) >= 4, "QPs on the SRQ");
    assert_eq!(pg.admin_own_buffers.load(Ordering::Relaxed), 1);
    // Reads: file -> slab (io_uring) -> wire (RDMA WRITE gathered from the slab), no copy.
    assert_eq!(
        pg.data_bytes_copied.load(Ordering::Relaxed),
        copied_before_reads,
        "bytes copied on the read path"
    );
    assert_eq!(dev_after.tx_payload_bytes_copied, 0);
    assert!(dev_after.tx_payload_bytes_zero_copy - dev.tx_payload_bytes_zero_copy >= read_bytes);
    assert!(
        pg.rdma_write_reads.load(Ordering::Relaxed)
            >= regions.iter().map(|r| r.2 as u64).sum::<u64>()
    );
    host.disconnect().expect("disconnect");
}

#[test]
fn flush_write_zeroes_and_deallocate() {
    let t = start_target(52, 64 << 20);
    let mut host = connect(&t, 53, 1, 32);
    let q = &mut host.io_queues()[0];
    let data = pattern(0, 65536, 9);
    let (_, r) = run(
        q,
        Sqe::write(0, 1, 0, 127, false),
        DataDir::HostToController { len: 65536 },
        &data,
    );
    r.expect("write");
    let (_, r) = run(q, Sqe::flush(0, 1), DataDir::None, &[]);
    r.expect("flush");
    // FUA write.
    let (_, r) = run(
        q,
        Sqe::write(0, 1, 128, 7, true),
        DataDir::HostToController { len: 4096 },
        &data[..4096],
    );
    r.expect("FUA write");
    // Write Zeroes of blocks 8..16, Deallocate of blocks 64..128 (punches a hole).
    let (_, r) = run(q, Sqe::write_zeroes(0, 1, 8, 7, false), DataDir::None, &[]);
    r.expect("write zeroes");
    let mut range = [0u8; 16];
    range[4..8].copy_from_slice(&64u32.to_le_bytes());
    range[8..16].copy_from_slice(&64u64.to_le_bytes());
    let (_, r) = run(
        q,
        Sqe::dsm_deallocate(0, 1, 0),
        DataDir::HostToController { len: 16 },
        &range,
    );
    r.expect("deallocate");
    let (buf, r) = run(
        q,
        Sqe::read(0, 1, 0, 127, false),
        DataDir::ControllerToHost { len: 65536 },
        &[],
    );
    r.expect("read back");
    let got = buf.as_deref().expect("data buffer")[..65536].to_vec();
    let mut want = data.clone();
    want[8 * 512..16 * 512].fill(0);
    want[64 * 512..].fill(0);
    assert!(
        got == want,
        "zeroed and deallocated ranges read as zeroes, the rest as written"
    );
    let file = std::fs::read(&t.path).unwrap();
    assert!(file[..65536] == want[..]);
    host.disconnect().expect("disconnect");
}

#[test]
fn keep_alive_timeout_tears_the_controller_down() {
    let t = start_target(54, 16 << 20);
    // KATO 1 s and no Keep Alive sender: the target must give up on the controller.
    let mut opts = host_options(&t, 55, 1, 8);
    opts.kato_ms = 1000;
    let mut host = nvmf_initiator::SyncHost::connect(&opts).expect("connect");
    assert_eq!(t.target.registry().controllers().len(), 1);
    let q = &mut host.io_queues()[0];
    let data = pattern(0, 4096, 1);
    let (_, r) = run(
        q,
        Sqe::write(0, 1, 0, 7, false),
        DataDir::HostToController { len: 4096 },
        &data,
    );
    r.expect("write while the controller is alive");
    // Wait (bounded) for the target's Keep Alive check to remove it; KATO is 1 s, the
    // target checks every 100 ms.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while !t.target.registry().controllers().is_empty() {
        assert!(
            std::time::Instant::now() < deadline,
            "controller still there long after KATO"
        );
        q.progress();
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    // Its queues are gone too: a command now fails instead of being served.
    let failed = q
        .submit_with(
            Sqe::read(0, 1, 0, 7, false),
            DataDir::ControllerToHost { len: 4096 },
            |_| {},
        )
        .map(|cid| wait(q, cid).is_err())
        .unwrap_or(true);
    assert!(failed, "a queue of an expired controller still serves I/O");
}
