//! Unit tests of the request core, without sockets or io_uring: events in, actions and
//! state sequences out ([`crate::rdma::sim`] plays the transport and the ring).
use std::net::{IpAddr, Ipv4Addr};
use std::time::Instant;

use nvme::properties::Property;
use nvme::status::{GenericStatus, Status};
use nvme::{SglDescriptor, Sqe};
use transport::verbs::WcStatus;
use zerocopy::FromBytes;

use super::*;
use crate::fabrics::tests::connect_data;
use crate::rdma::action::IoOp;
use crate::rdma::queue::QueueParams;
use crate::rdma::sim::{Seen, Sim, SimConfig};
use crate::subsystem::tests::{file_ns, registry_with, HOST, REF_NQN};
use crate::subsystem::NamespaceEntry;
use crate::uring::FALLOC_DEALLOCATE;

const ADMIN: u32 = 0x100;
const IO: u32 = 0x101;
const BLOCK: usize = 512;

struct Fixture {
    sim: Sim,
    now: Instant,
    _dir: tempfile::TempDir,
}

fn params(qid: u16, sq_size: u16, send_depth: u32, ord: u8) -> QueueParams {
    QueueParams {
        qid,
        sq_size,
        remote: IpAddr::V4(Ipv4Addr::LOCALHOST),
        remote_qpn: 0x11,
        send_depth,
        ord,
        port: 0,
    }
}

/// A Connect with its data in the capsule.
fn connect_capsule(cid: u16, qid: u16, cntlid: u16) -> Vec<u8> {
    let sqe = Sqe::connect(cid, qid, 31, 0).with_sgl(SglDescriptor::inline_offset(0, 1024));
    let mut c = sqe.to_array().to_vec();
    c.extend_from_slice(&connect_data(cntlid, REF_NQN, HOST));
    c
}

/// The only response `seen` holds: its CQE status and request.
fn one_response(seen: &[Seen]) -> (Status, u32) {
    let r: Vec<_> = seen
        .iter()
        .filter_map(|s| match s {
            Seen::Response { cqe, req, .. } => Some((cqe.status(), *req)),
            _ => None,
        })
        .collect();
    assert_eq!(r.len(), 1, "{seen:?}");
    r[0]
}

/// A core with namespace 1 (1 MiB, 512-byte blocks), an admin queue connected and
/// enabled, and I/O queue 1 (`sq_size`, `send_depth`, `ord`) connected.
fn fixture(cfg: SimConfig, sq_size: u16, send_depth: u32, ord: u8) -> Fixture {
    let dir = tempfile::tempdir_in(std::env::temp_dir()).unwrap();
    let ns = file_ns(&dir, "ns1.img", 1 << 20, BLOCK as u32);
    let reg = registry_with(vec![NamespaceEntry::new(1, ns, 0, REF_NQN)]);
    let mut sim = Sim::new(cfg, reg).unwrap();
    let now = Instant::now();
    sim.add_queue(ADMIN, &params(0, 32, 144, 16));
    sim.deliver(ADMIN, &connect_capsule(1, 0, 0xFFFF), now)
        .unwrap();
    assert_eq!(one_response(&sim.run(&[], now)).0, Status::SUCCESS);
    let cntlid = sim.core.queue(ADMIN).unwrap().ctrl.as_ref().unwrap().cntlid;
    let enable = Sqe::property_set(2, Property::Cc, 0x0046_0001);
    sim.deliver(ADMIN, &enable.to_array(), now).unwrap();
    assert_eq!(one_response(&sim.run(&[], now)).0, Status::SUCCESS);
    sim.add_queue(IO, &params(1, sq_size, send_depth, ord));
    sim.deliver(IO, &connect_capsule(1, 1, cntlid), now)
        .unwrap();
    assert_eq!(one_response(&sim.run(&[], now)).0, Status::SUCCESS);
    sim.core.set_trace(true);
    Fixture {
        sim,
        now,
        _dir: dir,
    }
}

fn default_fixture() -> Fixture {
    fixture(SimConfig::default(), 32, 144, 16)
}

fn keyed(len: usize, key: u32) -> SglDescriptor {
    SglDescriptor::keyed(0x1000, len as u32, key, false).unwrap()
}

fn read(cid: u16, len: usize) -> Vec<u8> {
    let nlb = (len / BLOCK - 1) as u16;
    Sqe::read(cid, 1, 0, nlb, false)
        .with_sgl(keyed(len, 0x77))
        .to_array()
        .to_vec()
}

fn write_keyed(cid: u16, len: usize) -> Vec<u8> {
    let nlb = (len / BLOCK - 1) as u16;
    Sqe::write(cid, 1, 8, nlb, false)
        .with_sgl(keyed(len, 0x78))
        .to_array()
        .to_vec()
}

fn write_in_capsule(cid: u16, offset: u64, data: &[u8]) -> Vec<u8> {
    let nlb = (data.len() / BLOCK - 1) as u16;
    let sqe = Sqe::write(cid, 1, 8, nlb, false)
        .with_sgl(SglDescriptor::inline_offset(offset, data.len() as u32));
    let mut c = sqe.to_array().to_vec();
    c.resize(64 + offset as usize, 0);
    c.extend_from_slice(data);
    c
}

/// Counter `f` of the simulated poll group.
fn count(
    f: &Fixture,
    c: impl Fn(&crate::rdma::PollGroupCounters) -> &std::sync::atomic::AtomicU64,
) -> u64 {
    c(f.sim.counters()).load(std::sync::atomic::Ordering::Relaxed)
}

fn states(trace: &[(u32, ReqState)], req: u32) -> Vec<ReqState> {
    trace
        .iter()
        .filter(|(r, _)| *r == req)
        .map(|&(_, s)| s)
        .collect()
}

use ReqState as S;

#[test]
fn read_posts_the_data_write_and_the_response_together() {
    let mut f = default_fixture();
    let slot = f.sim.deliver(IO, &read(5, 4096), f.now).unwrap();
    let a = f.sim.actions();
    let [Action::SubmitIo {
        req,
        op: IoOp::Read {
            file: 0,
            buf,
            offset: 0,
        },
    }] = a[..]
    else {
        panic!("{a:?}")
    };
    assert_eq!((req, buf.region, buf.len), (slot, RegionId::Data, 4096));
    assert_eq!(buf.offset % MIN_DATA_BUFFER, 0, "slab chunks are aligned");
    f.sim.fill(buf, &[0xAB; 4096]);
    f.sim.core.io_completed(req, 4096, f.now);
    let a = f.sim.actions();
    let [Action::PostWriteAndSend {
        qpn: IO,
        write_wr_id,
        data,
        remote,
        response,
    }] = a[..]
    else {
        panic!("the WRITE and the SEND are one action: {a:?}")
    };
    assert_eq!(write_wr_id, WrId::RdmaWrite { req: slot });
    assert_eq!(data, buf);
    assert_eq!(f.sim.core.bytes(data), &[0xAB; 4096][..]);
    assert_eq!((remote.addr, remote.rkey), (0x1000, 0x77));
    assert_eq!(response.wr_id, WrId::Response { req: slot });
    let cqe = f.sim.cqe(&response);
    assert_eq!(
        (cqe.cid(), cqe.sqid(), cqe.status()),
        (5, 1, Status::SUCCESS)
    );
    assert_eq!(cqe.sqhd(), 2, "SQHD: the Connect and this read");
    assert_eq!(f.sim.core.queue(IO).unwrap().outstanding(), 0, "answered");
    f.sim
        .core
        .send_completed(response.wr_id, IO, WcStatus::Success, f.now);
    assert_eq!(f.sim.actions(), vec![Action::RepostRecv { slot }]);
    assert_eq!(
        states(&f.sim.core.take_trace(), slot),
        [
            S::New,
            S::NeedBuffer,
            S::ReadyToExecute,
            S::Executing,
            S::Executed,
            S::ReadyToComplete,
            S::TransferringControllerToHost,
            S::Completed,
            S::Free
        ]
    );
    assert_eq!(count(&f, |c| &c.rdma_write_reads), 1);
}

#[test]
fn write_pulls_the_data_by_rdma_read_first() {
    let mut f = default_fixture();
    let slot = f.sim.deliver(IO, &write_keyed(6, 8192), f.now).unwrap();
    let a = f.sim.actions();
    let [Action::PostRdmaRead {
        qpn: IO,
        wr_id,
        local,
        remote,
    }] = a[..]
    else {
        panic!("{a:?}")
    };
    assert_eq!(wr_id, WrId::RdmaRead { req: slot });
    assert_eq!((local.region, local.len), (RegionId::Data, 8192));
    assert_eq!((remote.addr, remote.rkey), (0x1000, 0x78));
    f.sim.fill(local, &[0x5A; 8192]);
    f.sim
        .core
        .send_completed(wr_id, IO, WcStatus::Success, f.now);
    let a = f.sim.actions();
    let [Action::SubmitIo {
        req,
        op:
            IoOp::Write {
                buf,
                offset,
                dsync: false,
                ..
            },
    }] = a[..]
    else {
        panic!("{a:?}")
    };
    assert_eq!((req, buf, offset), (slot, local, 8 * BLOCK as u64));
    f.sim.core.io_completed(req, 8192, f.now);
    let a = f.sim.actions();
    let [Action::PostSend { qpn: IO, response }] = a[..] else {
        panic!("{a:?}")
    };
    assert_eq!(f.sim.cqe(&response).status(), Status::SUCCESS);
    f.sim
        .core
        .send_completed(response.wr_id, IO, WcStatus::Success, f.now);
    assert_eq!(f.sim.actions(), vec![Action::RepostRecv { slot }]);
    assert_eq!(
        states(&f.sim.core.take_trace(), slot),
        [
            S::New,
            S::NeedBuffer,
            S::DataTransferToControllerPending,
            S::TransferringHostToController,
            S::ReadyToExecute,
            S::Executing,
            S::Executed,
            S::ReadyToComplete,
            S::Completing,
            S::Completed,
            S::Free
        ]
    );
}

#[test]
fn in_capsule_write_goes_from_the_receive_buffer_to_the_file() {
    let mut f = default_fixture();
    let data: Vec<u8> = (0..4096u32).map(|i| (i * 7) as u8).collect();
    let slot = f
        .sim
        .deliver(IO, &write_in_capsule(7, 0, &data), f.now)
        .unwrap();
    let a = f.sim.actions();
    let [Action::SubmitIo {
        req,
        op: IoOp::Write { buf, .. },
    }] = a[..]
    else {
        panic!("{a:?}")
    };
    assert_eq!(buf.region, RegionId::InCapsule, "no copy, no RDMA READ");
    assert_eq!(buf.offset, slot as usize * 4096);
    assert_eq!(f.sim.core.bytes(buf), &data[..]);
    f.sim.core.io_completed(req, 4096, f.now);
    let a = f.sim.actions();
    assert!(matches!(a[..], [Action::PostSend { .. }]), "{a:?}");
    assert_eq!(
        states(&f.sim.core.take_trace(), slot),
        [
            S::New,
            S::ReadyToExecute,
            S::Executing,
            S::Executed,
            S::ReadyToComplete,
            S::Completing
        ]
    );
    assert_eq!(count(&f, |c| &c.in_capsule_writes), 1);
}

#[test]
fn no_buffer_waits_and_proceeds_when_one_is_freed() {
    // One 8 KiB buffer in the slab.
    let cfg = SimConfig {
        data_slab_bytes: 8192,
        max_io_bytes: 8192,
        ..SimConfig::default()
    };
    let mut f = fixture(cfg, 32, 144, 16);
    let first = f.sim.deliver(IO, &read(1, 8192), f.now).unwrap();
    let second = f.sim.deliver(IO, &read(2, 8192), f.now).unwrap();
    let a = f.sim.actions();
    assert!(
        matches!(a[..], [Action::SubmitIo { req, .. }] if req == first),
        "{a:?}"
    );
    assert_eq!(f.sim.core.state(second), Some(S::NeedBuffer));
    assert_eq!(count(&f, |c| &c.buffer_waits), 1);
    f.sim.core.io_completed(first, 8192, f.now);
    let a = f.sim.actions();
    let [Action::PostWriteAndSend { response, .. }] = a[..] else {
        panic!("{a:?}")
    };
    assert_eq!(
        f.sim.core.state(second),
        Some(S::NeedBuffer),
        "the first still sends from its buffer"
    );
    f.sim
        .core
        .send_completed(response.wr_id, IO, WcStatus::Success, f.now);
    let a = f.sim.actions();
    assert_eq!(a.len(), 2, "{a:?}");
    assert_eq!(a[0], Action::RepostRecv { slot: first });
    assert!(
        matches!(a[1], Action::SubmitIo { req, .. } if req == second),
        "{a:?}"
    );
    assert_eq!(
        states(&f.sim.core.take_trace(), second),
        [S::New, S::NeedBuffer, S::ReadyToExecute, S::Executing]
    );
}

#[test]
fn a_response_without_send_credit_waits_and_is_never_dropped() {
    // Two send queue entries: one read's WRITE + SEND.
    let mut f = fixture(SimConfig::default(), 32, 2, 16);
    let a_slot = f.sim.deliver(IO, &read(1, 4096), f.now).unwrap();
    let b_slot = f.sim.deliver(IO, &read(2, 4096), f.now).unwrap();
    let _ = f.sim.actions();
    f.sim.core.io_completed(a_slot, 4096, f.now);
    f.sim.core.io_completed(b_slot, 4096, f.now);
    let a = f.sim.actions();
    let [Action::PostWriteAndSend { response, .. }] = a[..] else {
        panic!("only the first response fits: {a:?}")
    };
    assert_eq!(response.wr_id, WrId::Response { req: a_slot });
    assert_eq!(f.sim.core.state(b_slot), Some(S::ReadyToComplete));
    assert_eq!(f.sim.core.queue(IO).unwrap().send_credits(), 0);
    assert_eq!(count(&f, |c| &c.send_credit_waits), 1);
    f.sim
        .core
        .send_completed(response.wr_id, IO, WcStatus::Success, f.now);
    let a = f.sim.actions();
    assert_eq!(a.len(), 2, "{a:?}");
    assert_eq!(a[0], Action::RepostRecv { slot: a_slot });
    let Action::PostWriteAndSend { response, .. } = a[1] else {
        panic!("{a:?}")
    };
    assert_eq!(response.wr_id, WrId::Response { req: b_slot });
    assert_eq!(f.sim.cqe(&response).cid(), 2);
}

#[test]
fn rdma_reads_beyond_the_ord_wait_for_a_read_credit() {
    let mut f = fixture(SimConfig::default(), 32, 144, 1);
    let a_slot = f.sim.deliver(IO, &write_keyed(1, 4096), f.now).unwrap();
    let b_slot = f.sim.deliver(IO, &write_keyed(2, 4096), f.now).unwrap();
    let a = f.sim.actions();
    let [Action::PostRdmaRead { wr_id, .. }] = a[..] else {
        panic!("ORD 1: one READ in flight: {a:?}")
    };
    assert_eq!(wr_id, WrId::RdmaRead { req: a_slot });
    assert_eq!(
        f.sim.core.state(b_slot),
        Some(S::DataTransferToControllerPending)
    );
    assert_eq!(count(&f, |c| &c.read_credit_waits), 1);
    f.sim
        .core
        .send_completed(wr_id, IO, WcStatus::Success, f.now);
    let a = f.sim.actions();
    assert_eq!(a.len(), 2, "{a:?}");
    assert!(
        matches!(a[0], Action::SubmitIo { req, .. } if req == a_slot),
        "{a:?}"
    );
    assert!(
        matches!(a[1], Action::PostRdmaRead { wr_id: WrId::RdmaRead { req }, .. } if req == b_slot),
        "{a:?}"
    );
}

#[test]
fn an_error_completion_reports_the_qp_once_and_answers_nothing() {
    let mut f = default_fixture();
    let a_slot = f.sim.deliver(IO, &write_keyed(1, 4096), f.now).unwrap();
    let b_slot = f.sim.deliver(IO, &write_keyed(2, 4096), f.now).unwrap();
    let _ = f.sim.actions();
    for (slot, st) in [
        (a_slot, WcStatus::RemAccessErr),
        (b_slot, WcStatus::WrFlushErr),
    ] {
        f.sim
            .core
            .send_completed(WrId::RdmaRead { req: slot }, IO, st, f.now);
    }
    assert_eq!(
        f.sim.actions(),
        vec![
            Action::ReportQpError { qpn: IO },
            Action::RepostRecv { slot: a_slot },
            Action::RepostRecv { slot: b_slot }
        ]
    );
    let q = f.sim.core.queue(IO).unwrap();
    assert_eq!(q.outstanding(), 0);
    assert_eq!(
        (q.send_credits(), q.read_credits()),
        (144, 16),
        "credits came back"
    );
    // A stale completion (the request is gone) changes nothing.
    f.sim.core.send_completed(
        WrId::Response { req: a_slot },
        IO,
        WcStatus::WrFlushErr,
        f.now,
    );
    assert_eq!(f.sim.actions(), vec![]);
}

#[test]
fn a_queue_destroyed_while_executing_releases_the_request_when_io_uring_returns_it() {
    let mut f = default_fixture();
    let executing = f.sim.deliver(IO, &read(1, 4096), f.now).unwrap();
    let waiting = f.sim.deliver(IO, &write_keyed(2, 4096), f.now).unwrap();
    let a = f.sim.actions();
    assert_eq!(a.len(), 2, "{a:?}");
    f.sim
        .core
        .remove_queue(IO, crate::oplog::QueueEnd::HostDisconnected, f.now);
    assert_eq!(
        f.sim.actions(),
        vec![Action::RepostRecv { slot: waiting }],
        "the request io_uring holds stays"
    );
    assert_eq!(f.sim.core.state(executing), Some(S::Executing));
    f.sim.core.io_completed(executing, 4096, f.now);
    assert_eq!(
        f.sim.actions(),
        vec![Action::RepostRecv { slot: executing }],
        "no response on a destroyed queue"
    );
    assert_eq!(f.sim.core.io_slots_free(), 512);
    // A capsule for the gone queue only gives its buffer back.
    let slot = f.sim.deliver(IO, &read(3, 4096), f.now).unwrap();
    assert_eq!(f.sim.actions(), vec![Action::RepostRecv { slot }]);
}

#[test]
fn capsules_beyond_twice_the_sq_size_are_dropped() {
    let mut f = fixture(SimConfig::default(), 2, 144, 16);
    // The Connect was answered; four reads stay unanswered (io_uring holds them).
    for cid in 1..=4 {
        f.sim.deliver(IO, &read(cid, 4096), f.now).unwrap();
    }
    let _ = f.sim.actions();
    let dropped = f.sim.deliver(IO, &read(5, 4096), f.now).unwrap();
    assert_eq!(f.sim.actions(), vec![Action::RepostRecv { slot: dropped }]);
    assert_eq!(count(&f, |c| &c.sq_overflows), 1);
}

#[test]
fn deallocate_takes_its_io_uring_slots_all_at_once() {
    let cfg = SimConfig {
        io_slots: 4,
        ..SimConfig::default()
    };
    let mut f = fixture(cfg, 32, 144, 16);
    let r1 = f.sim.deliver(IO, &read(1, 4096), f.now).unwrap();
    f.sim.deliver(IO, &read(2, 4096), f.now).unwrap();
    let _ = f.sim.actions();
    let dsm = |cid: u16, n: u8| {
        let mut c = Sqe::dsm_deallocate(cid, 1, n - 1)
            .with_sgl(SglDescriptor::inline_offset(0, 16 * u32::from(n)))
            .to_array()
            .to_vec();
        for k in 0..u64::from(n) {
            let mut range = [0u8; 16];
            range[4..8].copy_from_slice(&8u32.to_le_bytes());
            range[8..16].copy_from_slice(&(k * 100).to_le_bytes());
            c.extend_from_slice(&range);
        }
        c
    };
    let d = f.sim.deliver(IO, &dsm(3, 3), f.now).unwrap();
    assert_eq!(
        f.sim.actions(),
        vec![],
        "3 ranges, 2 slots free: none queued"
    );
    assert_eq!(f.sim.core.state(d), Some(S::ReadyToExecute));
    f.sim.core.io_completed(r1, 4096, f.now);
    let a = f.sim.actions();
    let holes: Vec<_> = a
        .iter()
        .filter_map(|a| match *a {
            Action::SubmitIo {
                req,
                op: IoOp::Fallocate {
                    mode, offset, len, ..
                },
            } if req == d => Some((mode, offset, len)),
            _ => None,
        })
        .collect();
    assert_eq!(
        holes,
        [0, 100, 200].map(|s| (FALLOC_DEALLOCATE, s * BLOCK as u64, 8 * BLOCK as u64))
    );
    // More ranges than the ring has slots: refused.
    let big = f.sim.deliver(IO, &dsm(4, 5), f.now).unwrap();
    let seen = f.sim.run(&[], f.now);
    let answered: Vec<_> = seen
        .iter()
        .filter_map(|s| match s {
            Seen::Response { req, cqe, .. } if *req == big => Some(cqe.status()),
            _ => None,
        })
        .collect();
    assert_eq!(
        answered,
        [Status::generic(GenericStatus::InvalidField).with_dnr()]
    );
}

#[test]
fn an_event_completes_the_held_asynchronous_event_request_after_the_command() {
    let mut f = default_fixture();
    let aer = f
        .sim
        .deliver(ADMIN, &Sqe::async_event_request(9).to_array(), f.now)
        .unwrap();
    assert_eq!(f.sim.run(&[], f.now), vec![]);
    assert_eq!(f.sim.core.state(aer), Some(S::AwaitingEvent));
    let ctrl = f.sim.core.queue(ADMIN).unwrap().ctrl.clone().unwrap();
    ctrl.post_event(0x0002_0002);
    let ka = f
        .sim
        .deliver(ADMIN, &Sqe::keep_alive(10).to_array(), f.now)
        .unwrap();
    let seen = f.sim.run(&[], f.now);
    let order: Vec<_> = seen
        .iter()
        .filter_map(|s| match s {
            Seen::Response { req, cqe, .. } => Some((*req, cqe.cid(), cqe.dw0())),
            _ => None,
        })
        .collect();
    assert_eq!(order, [(ka, 10, 0), (aer, 9, 0x0002_0002)]);
}

#[test]
fn a_second_connect_on_a_queue_is_refused() {
    let mut f = default_fixture();
    f.sim.deliver(IO, &connect_capsule(4, 1, 1), f.now).unwrap();
    let (status, _) = one_response(&f.sim.run(&[], f.now));
    assert_eq!(
        status,
        Status::command_specific(nvme::status::CommandSpecificStatus::ConnectControllerBusy)
            .with_dnr()
    );
}

/// A Compare of `data` at LBA 8, in the capsule.
fn compare_in_capsule(cid: u16, data: &[u8]) -> Vec<u8> {
    let nlb = (data.len() / BLOCK - 1) as u16;
    let sqe =
        Sqe::compare(cid, 1, 8, nlb).with_sgl(SglDescriptor::inline_offset(0, data.len() as u32));
    let mut c = sqe.to_array().to_vec();
    c.extend_from_slice(data);
    c
}

/// Runs the Compare whose actions come next: the blocks "read" are `media`.
fn finish_compare(f: &mut Fixture, media: &[u8]) -> Status {
    let a = f.sim.actions();
    let [Action::SubmitIo {
        req,
        op: IoOp::Read { buf, offset, .. },
    }] = a[..]
    else {
        panic!("{a:?}")
    };
    assert_eq!((buf.region, offset), (RegionId::Data, 8 * BLOCK as u64));
    f.sim.fill(buf, media);
    f.sim.core.io_completed(req, buf.len as i32, f.now);
    one_response(&f.sim.run(&[], f.now)).0
}

#[test]
fn compare_reads_the_blocks_into_a_buffer_of_its_own_and_judges_them() {
    let mut f = default_fixture();
    let data: Vec<u8> = (0..4096u32).map(|i| (i * 13) as u8).collect();
    // In-capsule data: only the buffer for the blocks is taken from the slab.
    f.sim
        .deliver(IO, &compare_in_capsule(3, &data), f.now)
        .unwrap();
    assert_eq!(finish_compare(&mut f, &data), Status::SUCCESS);
    let mut other = data.clone();
    other[4095] ^= 1;
    f.sim
        .deliver(IO, &compare_in_capsule(4, &data), f.now)
        .unwrap();
    let miss = finish_compare(&mut f, &other);
    assert_eq!(
        miss,
        Status::media(nvme::status::MediaStatus::CompareFailure)
    );
    // Keyed data: RDMA READ into one buffer, the blocks into a second.
    let sqe = Sqe::compare(5, 1, 8, 15).with_sgl(keyed(8192, 0x79));
    f.sim.deliver(IO, &sqe.to_array(), f.now).unwrap();
    let a = f.sim.actions();
    let [Action::PostRdmaRead {
        qpn, wr_id, local, ..
    }] = a[..]
    else {
        panic!("{a:?}")
    };
    let host: Vec<u8> = (0..8192u32).map(|i| (i % 251) as u8).collect();
    f.sim.fill(local, &host);
    f.sim
        .core
        .send_completed(wr_id, qpn, WcStatus::Success, f.now);
    let a = f.sim.actions();
    let [Action::SubmitIo {
        req,
        op: IoOp::Read { buf, .. },
    }] = a[..]
    else {
        panic!("{a:?}")
    };
    assert_ne!(buf.offset, local.offset, "two buffers");
    f.sim.fill(buf, &host);
    f.sim.core.io_completed(req, 8192, f.now);
    assert_eq!(one_response(&f.sim.run(&[], f.now)).0, Status::SUCCESS);
    // Both buffers went back to the pool; the Compare counted as reads (SMART), the
    // miss in the controller's error log.
    assert_eq!(f.sim.core.pool.in_use_bytes(), 0);
    let ctrl = f.sim.core.queue(IO).unwrap().ctrl.clone().unwrap();
    let ns = ctrl.subsys.namespace(1).unwrap();
    assert_eq!(ns.stats.totals().read_commands, 2);
    assert_eq!(ns.stats.totals().read_bytes, 4096 + 8192);
    assert_eq!(ctrl.error_count(), 1);
}

#[test]
fn a_compare_the_slab_cannot_hold_twice_is_refused() {
    // A slab of one MDTS (1 MiB): a 1 MiB Compare could never get both buffers.
    let cfg = SimConfig {
        data_slab_bytes: 1 << 20,
        ..SimConfig::default()
    };
    let mut f = fixture(cfg, 32, 144, 16);
    let sqe = Sqe::compare(6, 1, 0, 2047).with_sgl(keyed(1 << 20, 0x7A));
    f.sim.deliver(IO, &sqe.to_array(), f.now).unwrap();
    let (status, _) = one_response(&f.sim.run(&[], f.now));
    assert_eq!(
        status,
        Status::generic(GenericStatus::InvalidField).with_dnr()
    );
    // Half of it fits.
    let sqe = Sqe::compare(7, 1, 0, 1023).with_sgl(keyed(1 << 19, 0x7B));
    f.sim.deliver(IO, &sqe.to_array(), f.now).unwrap();
    let (status, _) = one_response(&f.sim.run(&[], f.now));
    assert_eq!(status, Status::SUCCESS, "zeros read, zeros sent");
}

#[test]
fn reads_and_writes_are_counted_and_errors_logged_for_the_controller() {
    let mut f = default_fixture();
    f.sim.deliver(IO, &read(1, 4096), f.now).unwrap();
    assert_eq!(one_response(&f.sim.run(&[], f.now)).0, Status::SUCCESS);
    f.sim.deliver(IO, &write_keyed(2, 8192), f.now).unwrap();
    assert_eq!(
        one_response(&f.sim.run(&[1; 8192], f.now)).0,
        Status::SUCCESS
    );
    // Past the end of the 1 MiB namespace: LBA Out of Range, logged.
    let bad = Sqe::read(3, 1, 4096, 0, false).with_sgl(keyed(512, 0x77));
    f.sim.deliver(IO, &bad.to_array(), f.now).unwrap();
    let (status, _) = one_response(&f.sim.run(&[], f.now));
    assert_eq!(status.as_generic(), Some(GenericStatus::LbaOutOfRange));
    let ctrl = f.sim.core.queue(IO).unwrap().ctrl.clone().unwrap();
    let t = ctrl.subsys.namespace(1).unwrap().stats.totals();
    assert_eq!(
        (
            t.read_commands,
            t.read_bytes,
            t.write_commands,
            t.write_bytes
        ),
        (1, 4096, 1, 8192)
    );
    assert_eq!(ctrl.error_count(), 1);
    let page = ctrl.error_log_page();
    let e = nvme::log::ErrorLogEntry::read_from_bytes(&page[..64]).unwrap();
    assert_eq!((e.sqid.get(), e.cid.get(), e.lba.get()), (1, 3, 4096));
}

#[test]
fn disconnect_answers_last_then_ends_the_queue() {
    let mut f = default_fixture();
    let ctrl = f.sim.core.queue(IO).unwrap().ctrl.clone().unwrap();
    assert!(ctrl.queue_connected(1));
    // A read in io_uring, then the Disconnect: the Disconnect waits for the read.
    let read_slot = f.sim.deliver(IO, &read(1, 4096), f.now).unwrap();
    let a = f.sim.actions();
    let [Action::SubmitIo { req, .. }] = a[..] else {
        panic!("{a:?}")
    };
    let disc = Sqe::disconnect(2).with_sgl(SglDescriptor::keyed_null());
    let disc_slot = f.sim.deliver(IO, &disc.to_array(), f.now).unwrap();
    assert!(f.sim.actions().is_empty(), "no CQE before the read's");
    assert_eq!(f.sim.core.state(disc_slot), Some(S::AwaitingEvent));
    // A capsule after the Disconnect is dropped: no CQE, its buffer goes back.
    let late = f.sim.deliver(IO, &read(3, 512), f.now).unwrap();
    assert_eq!(f.sim.core.state(late), Some(S::Free));
    // The read completes: its response, then the Disconnect's, then the queue's end.
    f.sim.core.io_completed(req, 4096, f.now);
    let seen = f.sim.run(&[], f.now);
    let order: Vec<_> = seen
        .iter()
        .filter_map(|s| match s {
            Seen::Response { req, cqe, .. } => Some((*req, cqe.status())),
            Seen::QueueEnded { qpn } => Some((*qpn, Status::SUCCESS)),
            _ => None,
        })
        .collect();
    assert_eq!(
        order,
        [
            (read_slot, Status::SUCCESS),
            (disc_slot, Status::SUCCESS),
            (IO, Status::SUCCESS)
        ],
        "{seen:?}"
    );
    // The queue ID left the controller: the host may connect it again.
    assert!(!ctrl.queue_connected(1));
    assert!(f.sim.core.queue(IO).unwrap().ctrl.is_none());
}

#[test]
fn disconnect_on_the_admin_queue_or_with_a_bad_format_is_refused() {
    let mut f = default_fixture();
    let disc = Sqe::disconnect(9).with_sgl(SglDescriptor::keyed_null());
    f.sim.deliver(ADMIN, &disc.to_array(), f.now).unwrap();
    let (st, _) = one_response(&f.sim.run(&[], f.now));
    let queue_type = Status::command_specific(nvme::CommandSpecificStatus::InvalidQueueType);
    assert_eq!(st, queue_type.with_dnr());
    let mut bad = disc;
    bad.set_cdw10(1);
    f.sim.deliver(IO, &bad.to_array(), f.now).unwrap();
    let (st, _) = one_response(&f.sim.run(&[], f.now));
    assert_eq!(
        st,
        Status::command_specific(nvme::CommandSpecificStatus::ConnectIncompatibleFormat).with_dnr()
    );
    // The queue still serves.
    f.sim.deliver(IO, &read(10, 512), f.now).unwrap();
    assert_eq!(one_response(&f.sim.run(&[], f.now)).0, Status::SUCCESS);
}

#[test]
fn a_draining_core_answers_what_is_in_flight_and_aborts_what_comes() {
    let mut f = default_fixture();
    // A held AER and a read in io_uring.
    f.sim
        .deliver(ADMIN, &Sqe::async_event_request(5).to_array(), f.now)
        .unwrap();
    assert!(f.sim.run(&[], f.now).is_empty(), "the AER is held");
    f.sim.deliver(IO, &read(1, 4096), f.now).unwrap();
    let a = f.sim.actions();
    let [Action::SubmitIo { req, .. }] = a[..] else {
        panic!("{a:?}")
    };
    assert_eq!(f.sim.core.drain(f.now), 2);
    // The AER is answered at once with Command Aborted due to SQ Deletion.
    let (st, _) = one_response(&f.sim.run(&[], f.now));
    assert_eq!(st, DRAIN_STATUS);
    assert!(!st.dnr);
    // A command that arrives now is answered the same way, not run.
    f.sim.deliver(IO, &read(2, 4096), f.now).unwrap();
    let seen = f.sim.run(&[], f.now);
    assert_eq!(one_response(&seen).0, DRAIN_STATUS);
    assert!(!seen.iter().any(|s| matches!(s, Seen::Io { .. })));
    assert_eq!(f.sim.core.in_flight(), 1, "the read is still in io_uring");
    // The read in flight completes normally; then nothing is in flight.
    f.sim.core.io_completed(req, 4096, f.now);
    assert_eq!(one_response(&f.sim.run(&[], f.now)).0, Status::SUCCESS);
    assert_eq!(f.sim.core.in_flight(), 0);
    let c = f.sim.core.drain_counts();
    assert_eq!((c.in_flight_at_start, c.aborted), (2, 2));
}
