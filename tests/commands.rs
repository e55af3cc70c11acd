//! The commands and logs hosts expect (issue 16 item 7), end to end on loopback against
//! the in-process target with a real file: Compare (05h) with its Compare Failure,
//! Fabrics Disconnect of an I/O queue, the SMART / Health log counting what the host
//! read and wrote, the Error Information log listing the host's failed commands, and
//! Get Log Page offsets and Retain Asynchronous Event.
//!
//! Addresses: 127.0.0.150..=127.0.0.159.
mod common;

use std::time::{Duration, Instant};

use common::*;
use nvme::log::{ErrorLogEntry, SmartLog};
use nvme::status::{GenericStatus, MediaStatus};
use nvme::{LogPageId, SglDescriptor, Sqe, Status};
use nvmf_initiator::capsule::DataDir;
use nvmf_initiator::HostError;
use zerocopy::FromBytes;

const BLOCK: usize = 512;

/// Get Log Page `lid` of `len` bytes at offset `lpo` for `nsid` over the admin queue.
fn get_log(
    host: &mut nvmf_initiator::SyncHost,
    lid: LogPageId,
    nsid: u32,
    len: usize,
    lpo: u64,
) -> Vec<u8> {
    let numd = (len / 4 - 1) as u32;
    let sqe = Sqe::get_log_page(0, lid, numd, lpo).with_nsid(nsid);
    let (_, data) = host
        .controller()
        .admin_command(sqe, DataDir::ControllerToHost { len }, |_| {})
        .expect("get log page");
    data
}

#[test]
fn compare_matches_or_fails_with_compare_failure() {
    let t = start_target(150, 16 << 20);
    let mut host = connect(&t, 151, 1, 16);
    let q = &mut host.io_queues()[0];
    // 8 KiB by RDMA READ (keyed), and 2 KiB in the capsule.
    for (slba, len) in [(64u64, 8192usize), (200, 2048)] {
        let data = pattern(slba * BLOCK as u64, len, 7);
        let nlb = (len / BLOCK - 1) as u16;
        let (_, r) = run(
            q,
            Sqe::write(0, 1, slba, nlb, false),
            DataDir::HostToController { len },
            &data,
        );
        r.expect("write");
        let (_, r) = run(
            q,
            Sqe::compare(0, 1, slba, nlb),
            DataDir::HostToController { len },
            &data,
        );
        assert!(r.expect("compare of equal data").status().is_success());
        let mut other = data.clone();
        other[len - 1] ^= 0x80;
        let (_, r) = run(
            q,
            Sqe::compare(0, 1, slba, nlb),
            DataDir::HostToController { len },
            &other,
        );
        match r {
            Err(HostError::Nvme { status, .. }) => {
                assert_eq!(status, Status::media(MediaStatus::CompareFailure), "{len}")
            }
            other => panic!("compare of different data: {other:?}"),
        }
    }
    // The misses are in the controller's error log (newest first), sqid 1.
    let log = get_log(&mut host, LogPageId::ErrorInformation, 0, 4096, 0);
    let newest = ErrorLogEntry::read_from_bytes(&log[..64]).unwrap();
    assert_eq!(newest.error_count.get(), 2);
    assert_eq!((newest.sqid.get(), newest.lba.get()), (1, 200));
    assert_eq!(
        newest.status_field.get(),
        Status::media(MediaStatus::CompareFailure).to_field()
    );
    host.disconnect().expect("disconnect");
}

#[test]
fn smart_log_counts_the_hosts_reads_and_writes() {
    let t = start_target(152, 64 << 20);
    let mut host = connect(&t, 153, 2, 32);
    // 1000 writes and 2000 reads of 4 KiB: 8000 and 16000 units of 512 bytes.
    pass(&mut host, 0, 4096, 1000, 32, true, 3);
    pass(&mut host, 0, 4096, 1000, 32, false, 3);
    pass(&mut host, 0, 4096, 1000, 32, false, 3);
    let page = get_log(&mut host, LogPageId::SmartHealth, u32::MAX, 512, 0);
    let log = SmartLog::read_from_bytes(&page).unwrap();
    assert_eq!(log.host_write_commands.get(), 1000);
    assert_eq!(log.host_read_commands.get(), 2000);
    assert_eq!(log.data_units_written.get(), 8);
    assert_eq!(log.data_units_read.get(), 16);
    // The same for namespace 1 alone (LPA bit 0), and at an offset: Host Read
    // Commands are bytes 64..80.
    let ns1 = get_log(&mut host, LogPageId::SmartHealth, 1, 512, 0);
    assert_eq!(ns1, page);
    let tail = get_log(&mut host, LogPageId::SmartHealth, u32::MAX, 16, 64);
    assert_eq!(&tail[..], &page[64..80]);
    host.disconnect().expect("disconnect");
}

#[test]
fn failed_commands_are_listed_in_the_error_log() {
    let t = start_target(154, 1 << 20);
    let mut host = connect(&t, 155, 1, 16);
    let q = &mut host.io_queues()[0];
    // Past the end of the 2048-block namespace, and an opcode we do not serve.
    let cid = q
        .submit_with(
            Sqe::read(0, 1, 4090, 15, false),
            DataDir::ControllerToHost { len: 8192 },
            |_| {},
        )
        .expect("submit");
    let r = wait(q, cid);
    assert!(matches!(r, Err(HostError::Nvme { .. })), "{r:?}");
    let mut bad = Sqe::flush(0, 1);
    bad.set_opcode(0x7E);
    let cid2 = q
        .submit_raw(bad.with_sgl(SglDescriptor::keyed_null()), &[])
        .unwrap();
    assert!(wait(q, cid2).is_err());
    let log = get_log(&mut host, LogPageId::ErrorInformation, 0, 4096, 0);
    let e: Vec<ErrorLogEntry> = (0..3)
        .map(|k| ErrorLogEntry::read_from_bytes(&log[k * 64..(k + 1) * 64]).unwrap())
        .collect();
    assert_eq!((e[0].error_count.get(), e[0].cid.get()), (2, cid2));
    assert_eq!(
        e[0].status_field.get(),
        Status::generic(GenericStatus::InvalidOpcode)
            .with_dnr()
            .to_field()
    );
    assert_eq!((e[1].error_count.get(), e[1].cid.get()), (1, cid));
    assert_eq!(
        (e[1].lba.get(), e[1].nsid.get(), e[1].sqid.get()),
        (4090, 1, 1)
    );
    assert_eq!(e[1].parameter_error_location.get(), 40, "the SLBA field");
    assert_eq!(e[2].error_count.get(), 0, "no third entry");
    // LPO: the second entry alone.
    let second = get_log(&mut host, LogPageId::ErrorInformation, 0, 64, 64);
    assert_eq!(&second[..], &log[64..128]);
    // The SMART log counts them.
    let smart = get_log(&mut host, LogPageId::SmartHealth, u32::MAX, 512, 0);
    assert_eq!(
        SmartLog::read_from_bytes(&smart)
            .unwrap()
            .num_error_log_entries
            .get(),
        2
    );
    host.disconnect().expect("disconnect");
}

#[test]
fn fabrics_disconnect_deletes_the_io_queue_which_connects_again() {
    let t = start_target(156, 16 << 20);
    let mut host = connect(&t, 157, 1, 16);
    let data = pattern(0, 4096, 9);
    {
        let q = &mut host.io_queues()[0];
        let (_, r) = run(
            q,
            Sqe::write(0, 1, 0, 7, false),
            DataDir::HostToController { len: 4096 },
            &data,
        );
        r.expect("write");
        let cid = q
            .submit_raw(
                Sqe::disconnect(0).with_sgl(SglDescriptor::keyed_null()),
                &[],
            )
            .unwrap();
        assert!(wait(q, cid)
            .expect("Disconnect completes")
            .status()
            .is_success());
        // The target then ends the connection (CM DREQ).
        let deadline = Instant::now() + Duration::from_secs(20);
        while !q.peer_disconnected() {
            assert!(Instant::now() < deadline, "no DREQ after the Disconnect");
            q.progress();
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    // Queue 1 left the controller: it connects again on a new connection and serves.
    let (dev, ctrl, queues) = host.into_parts();
    drop(queues);
    let ctx = dev.open_context(1).expect("poll group 1 again");
    let mut q = ctrl
        .connect_io_queue(ctx, 1, 16, 1 << 20)
        .expect("queue 1 connects again");
    let (buf, r) = run(
        &mut q,
        Sqe::read(0, 1, 0, 7, false),
        DataDir::ControllerToHost { len: 4096 },
        &[],
    );
    r.expect("read");
    assert!(buf.expect("the read's buffer")[..4096] == data[..]);
    ctrl.shutdown(vec![q]).expect("shutdown");
    // The end is logged as the host's, and was no trouble.
    let _ = t;
}
