//! Null and RAM namespaces (issue 16 item 8), end to end on loopback: a null namespace
//! reads zeroes and drops writes, a RAM namespace keeps what is written (also past a
//! 1 MiB stripe boundary, by RDMA READ and in the capsule), Compare, Write Zeroes and
//! Deallocate work on both, and both are counted in the SMART log. No file is made.
//!
//! Addresses: 127.0.0.170..=127.0.0.171 (the target binary's `--null` in
//! target/tests/cli.rs).
mod common;

use common::*;
use nvme::status::MediaStatus;
use nvme::{Sqe, Status};
use nvmf_initiator::capsule::DataDir;
use nvmf_initiator::HostError;
use nvmf_target::config::{NamespaceBackend, NamespaceConfig};

const BLOCK: usize = 512;

fn memory_ns(nsid: u32, backend: NamespaceBackend) -> NamespaceConfig {
    NamespaceConfig {
        backend,
        size: Some("16M".into()),
        ..NamespaceConfig::new(nsid)
    }
}

fn write(q: &mut nvmf_initiator::NvmeRdmaQueue, nsid: u32, slba: u64, data: &[u8]) {
    let nlb = (data.len() / BLOCK - 1) as u16;
    let (_, r) = run(
        q,
        Sqe::write(0, nsid, slba, nlb, false),
        DataDir::HostToController { len: data.len() },
        data,
    );
    r.expect("write");
}

fn read(q: &mut nvmf_initiator::NvmeRdmaQueue, nsid: u32, slba: u64, len: usize) -> Vec<u8> {
    let nlb = (len / BLOCK - 1) as u16;
    let (buf, r) = run(
        q,
        Sqe::read(0, nsid, slba, nlb, false),
        DataDir::ControllerToHost { len },
        &[],
    );
    r.expect("read");
    buf.expect("the read's buffer")[..len].to_vec()
}

#[test]
fn null_reads_zeroes_and_ram_keeps_what_is_written() {
    let t = start_target_with(170, 1 << 20, |c| {
        c.subsystems[0].namespaces = vec![
            memory_ns(1, NamespaceBackend::Null),
            memory_ns(2, NamespaceBackend::Ram),
        ];
    });
    let mut host = connect(&t, 171, 1, 16);
    let q = &mut host.io_queues()[0];
    // RAM: 64 KiB across the first 1 MiB stripe boundary, and 2 KiB in the capsule.
    let big = pattern(0, 65536, 5);
    let edge = (1 << 20) / BLOCK as u64 - 64;
    write(q, 2, edge, &big);
    assert!(read(q, 2, edge, 65536) == big);
    let small = pattern(7, 2048, 6);
    write(q, 2, 8, &small);
    assert!(read(q, 2, 8, 2048) == small);
    // Null: the write is dropped, reads return zeroes.
    write(q, 1, edge, &big);
    assert!(read(q, 1, edge, 65536).iter().all(|&b| b == 0));
    // Compare: RAM matches its data; null matches zeroes only.
    let (_, r) = run(
        q,
        Sqe::compare(0, 2, 8, 3),
        DataDir::HostToController { len: 2048 },
        &small,
    );
    assert!(r.expect("compare").status().is_success());
    let (_, r) = run(
        q,
        Sqe::compare(0, 1, 8, 3),
        DataDir::HostToController { len: 2048 },
        &small,
    );
    match r {
        Err(HostError::Nvme { status, .. }) => {
            assert_eq!(status, Status::media(MediaStatus::CompareFailure))
        }
        other => panic!("{other:?}"),
    }
    // Write Zeroes on RAM.
    let (_, r) = run(
        q,
        Sqe::write_zeroes(0, 2, edge, 7, false),
        DataDir::None,
        &[],
    );
    r.expect("write zeroes");
    let back = read(q, 2, edge, 65536);
    assert!(back[..4096].iter().all(|&b| b == 0) && back[4096..] == big[4096..]);
    // Flush answers at once.
    let (_, r) = run(q, Sqe::flush(0, 2), DataDir::None, &[]);
    r.expect("flush");
    // Counted for the SMART log: 3 reads + 1 compare of RAM, 2 writes.
    let sub = t.target.registry().subsystem(NQN).unwrap().clone();
    let ram = sub.namespace(2).unwrap().stats.totals();
    assert_eq!((ram.read_commands, ram.write_commands), (4, 2));
    assert!(!t.path.exists(), "no file for memory namespaces");
    host.disconnect().expect("disconnect");
}
