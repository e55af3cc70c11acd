//! Bad input from the host, end to end on loopback: every malformed or out-of-range
//! command is answered with the exact NVMe status (SCT, SC, DNR; NVMe Base 2.x §4.2.3,
//! NVMe over Fabrics 1.1 §3.3, §7.3.2) and never obeyed (no data moved, the file
//! unchanged, no controller created), and the target keeps serving: the same queue
//! afterwards, and a fresh connection at the end of every test.
//!
//! Addresses: 127.0.0.60..=127.0.0.81 (each test its own target, host and fresh host).
mod common;

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use common::*;
use nvme::fabrics::CNTLID_DYNAMIC;
use nvme::sqe::{PSDT_PRP, PSDT_SGL_MPTR_SGL};
use nvme::status::StatusCodeType;
use nvme::{CommandSpecificStatus, Cqe, GenericStatus, SglDescriptor, Sqe, Status};
use nvmf_initiator::capsule::DataDir;
use nvmf_initiator::controller::{fabrics_connect, Controller, ControllerOptions};
use nvmf_initiator::queue::{NvmeRdmaQueue, QueueConfig};
use nvmf_initiator::HostError;
use transport::soft::{CmAgent, DeviceConfig, SoftDevice};

const BLOCK: usize = 512;

/// Sum of a poll-group counter over the target's poll groups.
fn counter(
    t: &TestTarget,
    f: impl Fn(&nvmf_target::rdma::PollGroupCounters) -> &std::sync::atomic::AtomicU64,
) -> u64 {
    t.target
        .poll_group_counters()
        .iter()
        .map(|c| f(c).load(Ordering::Relaxed))
        .sum()
}

fn errors(t: &TestTarget) -> u64 {
    counter(t, |c| &c.error_completions)
}

/// Asserts that `r` is an NVMe error completion with exactly `want` (SCT, SC, DNR, and
/// M and CRD clear); returns the CQE's DW0.
#[track_caller]
fn refused(r: Result<Cqe, HostError>, want: Status, what: &str) -> u32 {
    match r {
        Err(HostError::Nvme { status, dw0, .. }) => {
            assert_eq!(status.sct, want.sct, "{what}: SCT of {status}");
            assert_eq!(status.sc, want.sc, "{what}: SC of {status}");
            assert_eq!(status.dnr, want.dnr, "{what}: DNR of {status}");
            assert_eq!(status, want, "{what}");
            dw0
        }
        other => panic!("{what}: expected {want}, got {other:?}"),
    }
}

fn generic(code: GenericStatus) -> Status {
    Status::generic(code).with_dnr()
}

fn connect_invalid_parameters() -> Status {
    Status::command_specific(CommandSpecificStatus::ConnectInvalidParameters).with_dnr()
}

/// Submits `sqe` as given (PSDT and SGL untouched) with `in_capsule` data and waits.
fn run_raw(q: &mut NvmeRdmaQueue, sqe: Sqe, in_capsule: &[u8]) -> Result<Cqe, HostError> {
    let cid = q.submit_raw(sqe, in_capsule).expect("submit_raw");
    wait(q, cid)
}

/// Writes `data` at `slba` on `q` and checks success.
fn write_ok(q: &mut NvmeRdmaQueue, slba: u64, data: &[u8]) {
    let nlb = (data.len() / BLOCK) as u16;
    let (_, r) = run(
        q,
        Sqe::write(0, 1, slba, nlb - 1, false),
        DataDir::HostToController { len: data.len() },
        data,
    );
    r.expect("write");
}

/// Reads `len` bytes at `slba` on `q`.
fn read_ok(q: &mut NvmeRdmaQueue, slba: u64, len: usize) -> Vec<u8> {
    let nlb = (len / BLOCK) as u16;
    let (buf, r) = run(
        q,
        Sqe::read(0, 1, slba, nlb - 1, false),
        DataDir::ControllerToHost { len },
        &[],
    );
    r.expect("read");
    buf.as_deref().expect("data buffer")[..len].to_vec()
}

/// Test 6 of the issue: a fresh connection from 127.0.0.`local` writes and reads back
/// 64 KiB at `slba` (no panic, no stuck poll group after the bad input).
fn fresh_connection_serves_io(t: &TestTarget, local: u8, slba: u64) {
    let mut host = connect(t, local, 1, 16);
    let q = &mut host.io_queues()[0];
    let data = pattern(slba * BLOCK as u64, 65536, local);
    write_ok(q, slba, &data);
    assert!(
        read_ok(q, slba, data.len()) == data,
        "fresh connection reads back its data"
    );
    let file = std::fs::read(&t.path).unwrap();
    let off = slba as usize * BLOCK;
    assert!(
        file[off..off + data.len()] == data[..],
        "fresh connection's data in the file"
    );
    host.disconnect().expect("disconnect");
}

#[test]
fn unsupported_opcodes_are_invalid_command_opcode() {
    let t = start_target(60, 16 << 20);
    let mut host = connect(&t, 61, 1, 16);
    let before = errors(&t);

    // I/O queue: 7Eh is no NVM command set opcode; neither is a vendor specific one.
    assert!(nvme::NvmOpcode::from_value(0x7E).is_none());
    let q = &mut host.io_queues()[0];
    for op in [0x7Eu8, 0x85] {
        let (_, r) = run(q, Sqe::new(op, 0).with_nsid(1), DataDir::None, &[]);
        refused(
            r,
            generic(GenericStatus::InvalidOpcode),
            &format!("I/O opcode {op:#x}"),
        );
    }
    // A Fabrics command other than Connect on an I/O queue (Property Get is admin only).
    let (_, r) = run(
        q,
        Sqe::property_get(0, nvme::Property::Cap),
        DataDir::None,
        &[],
    );
    refused(
        r,
        generic(GenericStatus::InvalidOpcode),
        "Property Get on an I/O queue",
    );
    // An unknown opcode with data: refused before any data moves (no RDMA WRITE).
    let writes = counter(&t, |c| &c.rdma_write_reads);
    let cid = q
        .submit_with(
            Sqe::new(0x7E, 0).with_nsid(1),
            DataDir::ControllerToHost { len: 4096 },
            |b| b[..4096].fill(0xAA),
        )
        .unwrap();
    let (r, buf) = wait_buf(q, cid);
    refused(
        r,
        generic(GenericStatus::InvalidOpcode),
        "I/O opcode 7Eh with data",
    );
    assert!(
        buf.as_deref().expect("data buffer")[..4096]
            .iter()
            .all(|&b| b == 0xAA),
        "no data written to the host"
    );
    assert_eq!(counter(&t, |c| &c.rdma_write_reads), writes);
    // The queue still works.
    let data = pattern(0, 4096, 1);
    write_ok(q, 0, &data);
    assert!(read_ok(q, 0, 4096) == data);

    // Admin queue: 7Eh is no admin opcode either; nor a vendor specific C1h; nor a
    // Fabrics command type the target does not know.
    assert!(nvme::AdminOpcode::from_value(0x7E).is_none());
    let ctrl = host.controller();
    for op in [0x7Eu8, 0xC1] {
        let r = ctrl
            .admin_command(Sqe::new(op, 0), DataDir::None, |_| {})
            .map(|(c, _)| c);
        refused(
            r,
            generic(GenericStatus::InvalidOpcode),
            &format!("admin opcode {op:#x}"),
        );
    }
    let mut fab = Sqe::property_get(0, nvme::Property::Cap).to_array();
    fab[4] = 0x7E; // FCTYPE
    let r = ctrl
        .admin_command(Sqe::from_array(fab), DataDir::None, |_| {})
        .map(|(c, _)| c);
    refused(
        r,
        generic(GenericStatus::InvalidOpcode),
        "Fabrics command type 7Eh",
    );
    ctrl.keep_alive().expect("admin queue still works");

    assert_eq!(errors(&t) - before, 7, "poll-group error completions");
    host.disconnect().expect("disconnect");
    fresh_connection_serves_io(&t, 62, 1024);
}

#[test]
fn malformed_capsules_are_refused_or_dropped() {
    let t = start_target(63, 16 << 20);
    let mut host = connect(&t, 64, 1, 16);
    let q = &mut host.io_queues()[0];
    let original = pattern(0, 4096, 3);
    write_ok(q, 0, &original);
    let before = errors(&t);

    // PSDT 00b (PRP, flags 00h): a Fabrics capsule must use SGLs (NVMe over Fabrics
    // 1.1 §2.3.1) -> Invalid Field in Command. PRP1 names the host buffer as a PCIe host
    // would; nothing may be written there nor read from it.
    let mut read = Sqe::read(0, 1, 0, 7, false);
    read.set_psdt(PSDT_PRP);
    let mut prp = [0u8; 16];
    let spare = pool_buf(q, 4096);
    prp[..8].copy_from_slice(&spare.addr().to_le_bytes());
    read.set_sgl(SglDescriptor::from_array(prp));
    assert_eq!(read.flags(), 0x00);
    refused(
        run_raw(q, read, &[]),
        generic(GenericStatus::InvalidField),
        "PRP read",
    );
    // A PRP write with the data in the capsule is not obeyed either.
    let mut write = Sqe::write(0, 1, 0, 7, false);
    write.set_psdt(PSDT_PRP);
    write.set_sgl(SglDescriptor::inline_offset(0, 4096));
    refused(
        run_raw(q, write, &pattern(0, 4096, 0x55)),
        generic(GenericStatus::InvalidField),
        "PRP write",
    );
    // PSDT 10b (SGL with a metadata SGL) is no Fabrics form either.
    let mut write = Sqe::write(0, 1, 0, 7, false);
    write.set_psdt(PSDT_SGL_MPTR_SGL);
    write.set_sgl(SglDescriptor::inline_offset(0, 4096));
    refused(
        run_raw(q, write, &pattern(0, 4096, 0x56)),
        generic(GenericStatus::InvalidField),
        "PSDT 10b write",
    );
    assert_eq!(errors(&t) - before, 3);

    // Capsules shorter than an SQE: the first 32 and 63 bytes of a Write with its
    // data. No CID to answer to: dropped, no completion, the queue keeps working.
    let capsules = counter(&t, |c| &c.capsules);
    let errs = errors(&t);
    let mut w = Sqe::write(0, 1, 0, 0, false);
    w.set_sgl(SglDescriptor::inline_offset(0, 512));
    let bytes = w.to_array();
    q.send_runt(&bytes[..32]).expect("runt SEND");
    q.send_runt(&bytes[..63]).expect("runt SEND");
    assert!(
        read_ok(q, 0, 4096) == original,
        "the queue works after runt capsules; block 0 unchanged"
    );
    assert_eq!(
        counter(&t, |c| &c.capsules) - capsules,
        3,
        "two runts and the read arrived"
    );
    assert_eq!(errors(&t), errs, "runts are not answered");
    assert_eq!(q.outstanding(), 0);
    assert!(!q.is_dead());
    // SQ accounting on both sides still agrees: 20 more commands wrap the 16-entry SQ.
    for i in 0..20u64 {
        let d = pattern(i, 512, 9);
        write_ok(q, 100 + i, &d);
    }

    let file = std::fs::read(&t.path).unwrap();
    assert!(
        file[..4096] == original[..],
        "no refused write reached the file"
    );
    host.disconnect().expect("disconnect");
    fresh_connection_serves_io(&t, 65, 1024);
}

/// An SGL descriptor from its identifier byte and fields (bytes 0..8 address, 8..12
/// length, 12..15 zero or key).
fn sgl(identifier: u8, addr: u64, len: u32) -> SglDescriptor {
    let mut b = [0u8; 16];
    b[..8].copy_from_slice(&addr.to_le_bytes());
    b[8..12].copy_from_slice(&len.to_le_bytes());
    b[15] = identifier;
    SglDescriptor::from_array(b)
}

#[test]
fn bad_sgls_are_refused_before_data_moves() {
    let t = start_target(66, 16 << 20);
    let mut host = connect(&t, 67, 1, 16);
    let q = &mut host.io_queues()[0];
    let original = pattern(0, 8192, 4);
    write_ok(q, 0, &original);
    let before = errors(&t);
    let rdma_reads = counter(&t, |c| &c.rdma_read_writes);
    let rdma_writes = counter(&t, |c| &c.rdma_write_reads);
    let spare = pool_buf(q, 4096);
    let addr = spare.addr();

    // Descriptor types the target does not take: Segment (20h), Last Segment (30h),
    // Bit Bucket (10h), Data Block Address (00h, no memory addresses over RDMA), a
    // keyed sub type that is neither Address nor Invalidate (41h), vendor (F0h).
    for id in [0x20u8, 0x30, 0x10, 0x00, 0x41, 0xF0] {
        let r = run_raw(
            q,
            Sqe::read(0, 1, 0, 7, false).with_sgl(sgl(id, addr, 4096)),
            &[],
        );
        refused(
            r,
            generic(GenericStatus::SglDescriptorTypeInvalid),
            &format!("read, SGL identifier {id:#04x}"),
        );
        let r = run_raw(
            q,
            Sqe::write(0, 1, 0, 7, false).with_sgl(sgl(id, addr, 4096)),
            &pattern(0, 4096, 0x60),
        );
        refused(
            r,
            generic(GenericStatus::SglDescriptorTypeInvalid),
            &format!("write, SGL identifier {id:#04x}"),
        );
    }

    // Keyed SGL of 512 bytes for a read of 8 blocks (4096): Data SGL Length Invalid,
    // nothing written to host memory (the window covers 512 bytes only anyway).
    let mut b = pool_buf(q, 4096);
    b.fill(0xAA);
    let cid = q
        .submit(
            Sqe::read(0, 1, 0, 7, false),
            DataDir::ControllerToHost { len: 512 },
            Some(b),
        )
        .unwrap();
    let (r, buf) = wait_buf(q, cid);
    refused(
        r,
        generic(GenericStatus::DataSglLengthInvalid),
        "keyed SGL shorter than a read",
    );
    assert!(
        buf.as_deref().expect("data buffer")[..4096]
            .iter()
            .all(|&b| b == 0xAA),
        "nothing written to the host"
    );
    // Keyed SGL (40h, no invalidate; the key is never bound) of 512 bytes for a write
    // of 8 blocks: refused before any RDMA READ.
    let key = 0x0012_3400;
    let short = SglDescriptor::keyed(addr, 512, key, false).unwrap();
    let r = run_raw(q, Sqe::write(0, 1, 0, 7, false).with_sgl(short), &[]);
    refused(
        r,
        generic(GenericStatus::DataSglLengthInvalid),
        "keyed SGL shorter than a write",
    );

    // In-capsule (01h) data: offset beyond the capsule's data -> SGL Offset Invalid.
    for off in [4096u64, 513, u64::MAX - 100] {
        let r = run_raw(
            q,
            Sqe::write(0, 1, 0, 0, false).with_sgl(SglDescriptor::inline_offset(off, 512)),
            &pattern(0, 512, 0x61),
        );
        refused(
            r,
            generic(GenericStatus::SglOffsetInvalid),
            &format!("in-capsule offset {off}"),
        );
    }
    // In-capsule length larger than the data sent -> Data SGL Length Invalid.
    let r = run_raw(
        q,
        Sqe::write(0, 1, 0, 7, false).with_sgl(SglDescriptor::inline_offset(0, 4096)),
        &pattern(0, 512, 0x62),
    );
    refused(
        r,
        generic(GenericStatus::DataSglLengthInvalid),
        "in-capsule length 4096 with 512 bytes sent",
    );
    // Offset inside, but offset + length past the data sent.
    let r = run_raw(
        q,
        Sqe::write(0, 1, 0, 0, false).with_sgl(SglDescriptor::inline_offset(256, 512)),
        &pattern(0, 512, 0x63),
    );
    refused(
        r,
        generic(GenericStatus::DataSglLengthInvalid),
        "in-capsule offset 256 + 512 over 512 sent",
    );
    // In-capsule SGL shorter than the command's data (all of it sent).
    let r = run_raw(
        q,
        Sqe::write(0, 1, 0, 7, false).with_sgl(SglDescriptor::inline_offset(0, 512)),
        &pattern(0, 4096, 0x64),
    );
    refused(
        r,
        generic(GenericStatus::DataSglLengthInvalid),
        "in-capsule length 512 for 4096 bytes",
    );
    // In-capsule data for a read (controller-to-host data cannot be in a command capsule).
    let r = run_raw(
        q,
        Sqe::read(0, 1, 0, 0, false).with_sgl(SglDescriptor::inline_offset(0, 512)),
        &[],
    );
    refused(
        r,
        generic(GenericStatus::SglDescriptorTypeInvalid),
        "in-capsule SGL on a read",
    );

    assert_eq!(
        errors(&t) - before,
        12 + 2 + 3 + 3 + 1,
        "poll-group error completions"
    );
    assert_eq!(
        counter(&t, |c| &c.rdma_read_writes),
        rdma_reads,
        "no RDMA READ for a refused write"
    );
    assert_eq!(
        counter(&t, |c| &c.rdma_write_reads),
        rdma_writes,
        "no RDMA WRITE for a refused read"
    );
    let file = std::fs::read(&t.path).unwrap();
    assert!(
        file[..8192] == original[..],
        "no refused write reached the file"
    );
    // A well-formed in-capsule write with a non-zero offset is fine on the same queue.
    let good = pattern(0, 512, 0x65);
    let mut capsule = vec![0u8; 64];
    capsule.extend_from_slice(&good);
    let r = run_raw(
        q,
        Sqe::write(0, 1, 0, 0, false).with_sgl(SglDescriptor::inline_offset(64, 512)),
        &capsule,
    );
    r.expect("in-capsule write at offset 64");
    assert!(read_ok(q, 0, 512) == good);
    host.disconnect().expect("disconnect");
    fresh_connection_serves_io(&t, 68, 1024);
}

#[test]
fn lba_out_of_range_is_refused_and_nothing_is_written() {
    const SIZE: u64 = 1 << 20;
    let nlb = SIZE / BLOCK as u64; // 2048 blocks
    let t = start_target(69, SIZE);
    let mut host = connect(&t, 70, 1, 16);
    let q = &mut host.io_queues()[0];
    // The last 64 blocks hold a known pattern.
    let tail_slba = nlb - 64;
    let tail = pattern(tail_slba * BLOCK as u64, 64 * BLOCK, 5);
    write_ok(q, tail_slba, &tail);
    let before = errors(&t);
    let rdma_reads = counter(&t, |c| &c.rdma_read_writes);
    let lba = generic(GenericStatus::LbaOutOfRange);

    // Reads: starting at the end, crossing it, far beyond, and slba + nlb wrapping u64.
    for (slba, n) in [
        (nlb, 1u16),
        (nlb - 1, 2),
        (nlb - 4, 8),
        (1 << 40, 8),
        (u64::MAX, 1),
        (u64::MAX - 3, 8),
    ] {
        let (_, r) = run(
            q,
            Sqe::read(0, 1, slba, n - 1, false),
            DataDir::ControllerToHost {
                len: n as usize * BLOCK,
            },
            &[],
        );
        refused(r, lba, &format!("read slba {slba:#x} nlb {n}"));
    }
    // Writes crossing the end: in-capsule (4 KiB) and by keyed SGL (64 KiB, which the
    // target would pull by RDMA READ); starting past the end; wrapping u64.
    for (slba, n) in [
        (nlb - 4, 8u16),
        (nlb - 64, 128),
        (nlb, 1),
        (u64::MAX, 1),
        (u64::MAX - 3, 8),
    ] {
        let len = n as usize * BLOCK;
        let data = pattern(0, len, 0x70);
        let (_, r) = run(
            q,
            Sqe::write(0, 1, slba, n - 1, false),
            DataDir::HostToController { len },
            &data,
        );
        refused(r, lba, &format!("write slba {slba:#x} nlb {n}"));
    }
    // Write Zeroes and Deallocate across the end would zero the tail if obeyed.
    let (_, r) = run(
        q,
        Sqe::write_zeroes(0, 1, nlb - 8, 15, false),
        DataDir::None,
        &[],
    );
    refused(r, lba, "write zeroes across the end");
    let (_, r) = run(
        q,
        Sqe::write_zeroes(0, 1, u64::MAX, 0, false),
        DataDir::None,
        &[],
    );
    refused(r, lba, "write zeroes at u64::MAX");
    let mut range = [0u8; 16];
    range[4..8].copy_from_slice(&16u32.to_le_bytes());
    range[8..16].copy_from_slice(&(nlb - 8).to_le_bytes());
    let (_, r) = run(
        q,
        Sqe::dsm_deallocate(0, 1, 0),
        DataDir::HostToController { len: 16 },
        &range,
    );
    refused(r, lba, "deallocate across the end");

    assert_eq!(
        errors(&t) - before,
        6 + 5 + 3,
        "poll-group error completions"
    );
    assert_eq!(
        counter(&t, |c| &c.rdma_read_writes),
        rdma_reads,
        "no data pulled for a refused write"
    );
    // Never partial data: the file keeps its size and its last blocks.
    let file = std::fs::read(&t.path).unwrap();
    assert_eq!(file.len() as u64, SIZE, "the file was not extended");
    assert!(
        file[tail_slba as usize * BLOCK..] == tail[..],
        "the last 64 blocks are unchanged"
    );
    // The last block itself is in range.
    assert!(read_ok(q, nlb - 1, BLOCK) == tail[63 * BLOCK..]);
    host.disconnect().expect("disconnect");
    fresh_connection_serves_io(&t, 71, 0);
}

/// Connect data (NVMe Base 2.x §6.3 Figure "Connect Command - Data", 1024 bytes):
/// HOSTID at 0, CNTLID at 16, SUBNQN at 256, HOSTNQN at 512 (NUL padded).
fn connect_data(opts: &ControllerOptions, cntlid: u16, subnqn: &str, hostnqn: &str) -> Vec<u8> {
    let mut d = vec![0u8; 1024];
    d[..16].copy_from_slice(&opts.hostid);
    d[16..18].copy_from_slice(&cntlid.to_le_bytes());
    d[256..256 + subnqn.len()].copy_from_slice(subnqn.as_bytes());
    d[512..512 + hostnqn.len()].copy_from_slice(hostnqn.as_bytes());
    d
}

/// A Connect of queue `qid` (SQSIZE `sqsize`, 0's based) with `data`, by keyed SGL.
fn raw_connect(
    q: &mut NvmeRdmaQueue,
    qid: u16,
    sqsize: u16,
    data: &[u8],
) -> Result<Cqe, HostError> {
    let (_, r) = run(
        q,
        Sqe::connect(0, qid, sqsize, 0),
        DataDir::HostToController { len: data.len() },
        data,
    );
    r
}

#[test]
fn connect_errors_name_the_offending_field() {
    let t = start_target(72, 16 << 20);
    let target = addr(&t);
    let bad_nqn = "nqn.2026-11.io.nvmf-rdma:no-such-subsystem";
    let mut dcfg = DeviceConfig::new(ip(73));
    dcfg.rx_queues = 3;
    let dev = SoftDevice::open(dcfg).expect("host device");
    let cm = CmAgent::start(&dev).expect("CM agent");
    let opts = ControllerOptions::from(&host_options(&t, 73, 1, 16));
    let before = errors(&t);

    // Admin Connect to an unknown subsystem: SCT 1h, SC 82h, DNR, DW0 IATTR 1, IPO 256
    // (SUBNQN of the Connect data) = 00010100h, as nvmet answers.
    let (pd, pool) = test_pool(&dev);
    let mut aq = NvmeRdmaQueue::connect(
        dev.open_context(0).unwrap(),
        &cm,
        QueueConfig::new(0, 32, 4096, target),
        pd,
        &pool,
    )
    .unwrap();
    let dw0 = refused(
        raw_connect(
            &mut aq,
            0,
            31,
            &connect_data(&opts, CNTLID_DYNAMIC, bad_nqn, &opts.hostnqn),
        ),
        connect_invalid_parameters(),
        "unknown SUBNQN",
    );
    assert_eq!(dw0, 0x0001_0100, "IATTR 1, IPO 256");
    // Admin Connect with a static CNTLID (not FFFFh): IATTR 1, IPO 16.
    let dw0 = refused(
        raw_connect(
            &mut aq,
            0,
            31,
            &connect_data(&opts, 1, &opts.subnqn, &opts.hostnqn),
        ),
        connect_invalid_parameters(),
        "admin CNTLID 1",
    );
    assert_eq!(dw0, 0x0001_0010, "IATTR 1, IPO 16");
    assert!(
        t.target.registry().controllers().is_empty(),
        "no controller created"
    );
    aq.disconnect(Duration::from_millis(500));
    // The same through the host API: HostError::ConnectRefused names SUBNQN. (Its own
    // device on 127.0.0.78: a failed Controller::connect drops its poll group, and a
    // soft device whose poll group is closed while others live misroutes their packets,
    // see the report.)
    let mut bad = host_options(&t, 78, 1, 16);
    bad.subnqn = bad_nqn.into();
    match nvmf_initiator::SyncHost::connect(&bad) {
        Err(HostError::ConnectRefused {
            qid: 0,
            status,
            detail,
        }) => {
            assert_eq!(status, connect_invalid_parameters());
            assert_eq!(
                (status.sct, status.sc, status.dnr),
                (StatusCodeType::CommandSpecific, 0x82, true)
            );
            let detail = detail.expect("field named");
            assert!(detail.contains("SUBNQN (offset 256)"), "{detail}");
        }
        other => panic!("expected ConnectRefused, got {other:?}"),
    }

    // A real controller, then I/O queue 1 connected at the RDMA level only.
    let mut ctrl = Controller::connect(dev.open_context(1).unwrap(), &cm, opts.clone(), pd, &pool)
        .expect("controller");
    assert!(ctrl.set_number_of_queues(1).unwrap() >= 1);
    let cntlid = ctrl.cntlid();
    let mut qcfg = QueueConfig::new(1, 16, 65536, target);
    qcfg.cntlid = cntlid;
    let mut q = NvmeRdmaQueue::connect(dev.open_context(2).unwrap(), &cm, qcfg, pd, &pool).unwrap();

    // Before its Connect the queue obeys nothing: Command Sequence Error.
    let (_, r) = run(
        &mut q,
        Sqe::write(0, 1, 0, 0, false),
        DataDir::HostToController { len: 512 },
        &[0x77; 512],
    );
    refused(
        r,
        generic(GenericStatus::CommandSequenceError),
        "write before Connect",
    );
    // Wrong host NQN (not the controller's): IATTR 1, IPO 16 (CNTLID), as nvmet.
    let mut wrong_host = opts.clone();
    wrong_host.hostnqn =
        "nqn.2014-08.org.nvmexpress:uuid:00000000-0000-4000-8000-000000000bad".into();
    match fabrics_connect(&mut q, &wrong_host, cntlid, 0) {
        Err(HostError::ConnectRefused {
            qid: 1,
            status,
            detail,
        }) => {
            assert_eq!(status, connect_invalid_parameters());
            let detail = detail.expect("field named");
            assert!(detail.contains("CNTLID (offset 16)"), "{detail}");
        }
        other => panic!("expected ConnectRefused, got {other:?}"),
    }
    let cases: [(&str, u16, u16, Vec<u8>, u32); 6] = [
        (
            "wrong host NQN",
            1,
            15,
            connect_data(&opts, cntlid, &opts.subnqn, &wrong_host.hostnqn),
            0x0001_0010,
        ),
        (
            "wrong controller ID",
            1,
            15,
            connect_data(&opts, cntlid.wrapping_add(100), &opts.subnqn, &opts.hostnqn),
            0x0001_0010,
        ),
        (
            "CNTLID FFFFh on an I/O queue",
            1,
            15,
            connect_data(&opts, CNTLID_DYNAMIC, &opts.subnqn, &opts.hostnqn),
            0x0001_0010,
        ),
        (
            "unknown SUBNQN on an I/O queue",
            1,
            15,
            connect_data(&opts, cntlid, bad_nqn, &opts.hostnqn),
            0x0001_0100,
        ),
        // QID 2 in the SQE on the RDMA connection of queue 1: IATTR 0, IPO 42 (QID).
        (
            "QID other than the RDMA connection's",
            2,
            15,
            connect_data(&opts, cntlid, &opts.subnqn, &opts.hostnqn),
            0x0000_002A,
        ),
        // SQSIZE 0 is invalid: IATTR 0, IPO 44 (SQSIZE).
        (
            "SQSIZE 0",
            1,
            0,
            connect_data(&opts, cntlid, &opts.subnqn, &opts.hostnqn),
            0x0000_002C,
        ),
    ];
    for (what, qid, sqsize, data, want_dw0) in &cases {
        let dw0 = refused(
            raw_connect(&mut q, *qid, *sqsize, data),
            connect_invalid_parameters(),
            what,
        );
        assert_eq!(dw0, *want_dw0, "{what}: DW0");
    }
    // RECFMT 1: Connect Incompatible Format (SCT 1h, SC 80h, DNR).
    let mut sqe = Sqe::connect(0, 1, 15, 0).to_array();
    sqe[40] = 1;
    let good_data = connect_data(&opts, cntlid, &opts.subnqn, &opts.hostnqn);
    let (_, r) = run(
        &mut q,
        Sqe::from_array(sqe),
        DataDir::HostToController { len: 1024 },
        &good_data,
    );
    refused(
        r,
        Status::command_specific(CommandSpecificStatus::ConnectIncompatibleFormat).with_dnr(),
        "RECFMT 1",
    );
    // Connect data shorter than 1024 bytes (in-capsule SGL of 512): Data SGL Length Invalid.
    let r = run_raw(
        &mut q,
        Sqe::connect(0, 1, 15, 0).with_sgl(SglDescriptor::inline_offset(0, 512)),
        &good_data[..512],
    );
    refused(
        r,
        generic(GenericStatus::DataSglLengthInvalid),
        "512 bytes of Connect data",
    );
    assert_eq!(
        errors(&t) - before,
        3 + 1 + 1 + 6 + 2,
        "poll-group error completions"
    );

    // The right Connect now succeeds on the same queue, and I/O works.
    assert_eq!(
        fabrics_connect(&mut q, &opts, cntlid, 0).expect("Connect"),
        cntlid
    );
    let data = pattern(0, 8192, 6);
    write_ok(&mut q, 0, &data);
    assert!(read_ok(&mut q, 0, 8192) == data);
    q.disconnect(Duration::from_millis(500));
    ctrl.shutdown(Vec::new()).expect("shutdown");
    fresh_connection_serves_io(&t, 74, 1024);
}

#[test]
fn fused_commands_and_repeated_connects_are_refused() {
    let t = start_target(75, 16 << 20);
    let mut host = connect(&t, 76, 1, 16);
    let original = pattern(0, 4096, 7);
    write_ok(&mut host.io_queues()[0], 0, &original);
    let before = errors(&t);

    // Fused operations (FUSE 01b/10b): the target reports none (Identify Controller
    // FUSES 0), so a fused half is refused with Invalid Field in Command, as nvmet.
    let q = &mut host.io_queues()[0];
    for fuse in [nvme::sqe::FUSE_FIRST, nvme::sqe::FUSE_SECOND] {
        let mut w = Sqe::write(0, 1, 0, 7, false);
        w.set_fuse(fuse);
        let (_, r) = run(
            q,
            w,
            DataDir::HostToController { len: 4096 },
            &pattern(0, 4096, 0x80),
        );
        refused(
            r,
            generic(GenericStatus::InvalidField),
            &format!("write with FUSE {fuse:#04b}"),
        );
    }
    assert!(read_ok(q, 0, 4096) == original, "no fused write obeyed");

    // A second Connect on a queue that is already connected: Connect Controller Busy
    // with DNR (nvmet: "queue already connected!"), and nothing changes: no second
    // controller, the queue keeps its controller.
    let opts = host.controller().options().clone();
    let cntlid = host.controller().cntlid();
    let q = &mut host.io_queues()[0];
    match fabrics_connect(q, &opts, cntlid, 0) {
        Err(HostError::ConnectRefused { qid: 1, status, .. }) => assert_eq!(
            status,
            Status::command_specific(CommandSpecificStatus::ConnectControllerBusy).with_dnr(),
            "second I/O queue Connect"
        ),
        other => panic!("second I/O queue Connect: {other:?}"),
    }
    assert!(read_ok(q, 0, 4096) == original, "the I/O queue still works");
    let admin = host.controller().admin_queue_mut();
    match fabrics_connect(admin, &opts, CNTLID_DYNAMIC, opts.kato_ms) {
        Err(HostError::ConnectRefused { qid: 0, status, .. }) => assert_eq!(
            status,
            Status::command_specific(CommandSpecificStatus::ConnectControllerBusy).with_dnr(),
            "second admin Connect"
        ),
        other => panic!("second admin Connect: {other:?}"),
    }
    let ctrls = t.target.registry().controllers();
    assert_eq!(ctrls.len(), 1, "no second controller");
    assert_eq!(ctrls[0].cntlid, cntlid);
    host.controller()
        .keep_alive()
        .expect("the admin queue keeps its controller");
    assert_eq!(errors(&t) - before, 4, "poll-group error completions");
    host.disconnect().expect("disconnect");
    fresh_connection_serves_io(&t, 77, 1024);
}

/// A read whose keyed SGL names a key the host never registered (0): the target's RDMA
/// WRITE is NAKed with a remote access error and nothing lands in host memory; the
/// target's QP goes to Error, and the target disconnects that queue with a CM DREQ
/// (the host does not disconnect by itself, so its Disconnected event can only come
/// from the target's DREQ). Other connections keep working.
#[test]
fn bad_rkey_fails_the_queue_and_the_target_sends_dreq() {
    let t = start_target(79, 16 << 20);
    let mut host = connect(&t, 80, 1, 16);
    let q = &mut host.io_queues()[0];
    let mut spare = pool_buf(q, 4096);
    spare.fill(0xA5);
    let addr = spare.addr();
    let r = run_raw(
        q,
        Sqe::read(0, 1, 0, 7, false).with_sgl(sgl(0x40, addr, 4096)),
        &[],
    );
    assert!(
        r.is_err(),
        "a read into an unregistered key must fail: {r:?}"
    );
    assert!(spare.iter().all(|&b| b == 0xA5));
    let deadline = Instant::now() + Duration::from_secs(10);
    while !q.peer_disconnected() {
        assert!(
            Instant::now() < deadline,
            "the target did not disconnect the failed queue"
        );
        q.wait(Duration::from_millis(10));
    }
    fresh_connection_serves_io(&t, 81, 0);
}
