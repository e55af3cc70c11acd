//! The queue core without sockets: submissions, completions in both orders, the
//! invalidation paths, SQ flow control and the death of the queue, driven by
//! hand-made work completions.
use nvme::{Cqe, GenericStatus, Sqe, Status};
use transport::verbs::{
    inc_rkey, AccessFlags, SendFlags, SendOp, Sge, VerbsError, WcOpcode, WcStatus, WorkCompletion,
};

use super::*;

const QPN: u32 = 0x11;
const MAX_IO: usize = 64 << 10;
const DATA: MrSpan = MrSpan {
    addr: 0x7f00_0000_0000,
    lkey: 0x100,
};
const SQES: MrSpan = MrSpan {
    addr: 0x7f00_1000_0000,
    lkey: 0x200,
};
const RSPS: MrSpan = MrSpan {
    addr: 0x7f00_2000_0000,
    lkey: 0x300,
};
/// Window `i`'s key as allocated.
fn mw_key(i: usize) -> u32 {
    0x0001_0000 * (i as u32 + 1)
}

fn core_with(qid: u16, depth: u16, in_capsule_bytes: usize) -> QueueCore {
    let mut cfg = QueueConfig::new(qid, depth, MAX_IO, "127.0.0.2:4420".parse().unwrap());
    cfg.in_capsule_bytes = in_capsule_bytes;
    let mem = QueueMemory {
        sqe: SQES,
        rsp: RSPS,
    };
    let keys: Vec<u32> = (0..usize::from(depth)).map(mw_key).collect();
    QueueCore::new(&cfg, mem, RemoteKeys::Windows(&keys)).unwrap()
}

/// A command's data buffer of `len` bytes at the start of the data region.
fn buf(len: usize) -> BufSpan {
    BufSpan {
        addr: DATA.addr,
        len,
        lkey: DATA.lkey,
    }
}

fn io_core() -> QueueCore {
    core_with(1, 8, 4096)
}

/// Posts `s` successfully.
fn posted(c: &mut QueueCore, s: Submission) -> u16 {
    c.submitted(s, Ok(())).unwrap()
}

fn read(c: &mut QueueCore, len: usize) -> u16 {
    let s = c
        .submit(
            Sqe::read(0, 1, 0, 0, false),
            DataDir::ControllerToHost { len },
            Some(buf(len)),
        )
        .unwrap();
    posted(c, s)
}

fn wc(kind: WrKind, index: u16) -> WorkCompletion {
    let id = WrId {
        kind,
        index: u32::from(index),
    };
    let op = match kind {
        WrKind::Recv => WcOpcode::Recv,
        WrKind::LocalInv => WcOpcode::LocalInv,
        WrKind::Bind => WcOpcode::BindMw,
        WrKind::Send => WcOpcode::Send,
    };
    WorkCompletion::new(id.to_u64(), WcStatus::Success, op, QPN)
}

fn send_done(c: &mut QueueCore, cid: u16, out: &mut Vec<QueueCompletion>) {
    c.handle_wc(&wc(WrKind::Send, cid), None, out);
}

/// The response `cqe` arriving in receive buffer `buf`, with `invalidated` as the
/// SEND with Invalidate's key.
fn response(
    c: &mut QueueCore,
    buf: u16,
    cqe: Cqe,
    invalidated: Option<u32>,
    out: &mut Vec<QueueCompletion>,
) {
    let mut w = wc(WrKind::Recv, buf);
    w.byte_len = 16;
    w.invalidated_rkey = invalidated;
    assert_eq!(c.response_index(&w), Some(usize::from(buf)));
    c.handle_wc(&w, Some(cqe.to_array()), out);
}

fn actions(c: &mut QueueCore) -> Vec<Action> {
    std::iter::from_fn(|| c.poll_action()).collect()
}

fn repost(c: &QueueCore, buf: u16) -> Action {
    Action::PostRecv(c.receive_wr(buf))
}

#[test]
fn wr_ids_round_trip_and_name_what_failed() {
    for kind in [WrKind::Send, WrKind::Bind, WrKind::LocalInv, WrKind::Recv] {
        let id = WrId { kind, index: 513 };
        assert_eq!(WrId::from_u64(id.to_u64()), Some(id));
        assert_eq!(WrId::what(id.to_u64()), kind.what());
    }
    assert_eq!(WrId::from_u64(7), None);
    assert_eq!(WrId::what(9 << 32), "work request");
}

#[test]
fn a_command_without_data_is_one_send_of_the_sqe() {
    let mut c = io_core();
    let s = c.submit(Sqe::flush(0, 1), DataDir::None, None).unwrap();
    let cid = s.cid();
    assert_eq!(cid, 0);
    assert!(s.bind().is_none());
    assert_eq!(s.sqe_offset(), 0);
    let sqe = Sqe::from_array(s.sqe_bytes().try_into().unwrap());
    assert_eq!((sqe.cid(), sqe.sgl().identifier()), (0, 0x40));
    assert_eq!(s.send().op, SendOp::Send);
    assert_eq!(s.send().flags, SendFlags::SIGNALED);
    assert_eq!(
        s.send().sg_list.as_slice(),
        &[Sge {
            addr: SQES.addr,
            length: 64,
            lkey: SQES.lkey
        }]
    );
    // Nothing is outstanding until the posts are confirmed.
    assert_eq!(c.outstanding(), 0);
    assert_eq!(posted(&mut c, s), 0);
    assert_eq!(c.outstanding(), 1);
    // The next command takes the next slot and SQE buffer.
    let s = c.submit(Sqe::flush(0, 1), DataDir::None, None).unwrap();
    assert_eq!((s.cid(), s.sqe_offset()), (1, 64));
    assert_eq!(s.send().sg_list.as_slice()[0].addr, SQES.addr + 64);
}

#[test]
fn a_small_write_goes_in_capsule_a_large_one_binds_a_window_for_remote_read() {
    let mut c = io_core();
    let s = c
        .submit(
            Sqe::write(0, 1, 0, 7, false),
            DataDir::HostToController { len: 4096 },
            Some(buf(4096)),
        )
        .unwrap();
    assert!(s.bind().is_none());
    assert_eq!(
        s.send().sg_list.as_slice(),
        &[
            Sge {
                addr: SQES.addr,
                length: 64,
                lkey: SQES.lkey
            },
            Sge {
                addr: DATA.addr,
                length: 4096,
                lkey: DATA.lkey
            }
        ]
    );
    posted(&mut c, s);
    let s = c
        .submit(
            Sqe::write(0, 1, 0, 15, false),
            DataDir::HostToController { len: 8192 },
            Some(buf(8192)),
        )
        .unwrap();
    let key = inc_rkey(mw_key(1));
    assert_eq!(
        s.bind().map(|b| (b.op, b.flags)),
        Some((
            SendOp::BindMw {
                mw_handle: mw_key(1),
                rkey: key,
                mr_lkey: DATA.lkey,
                addr: DATA.addr,
                length: 8192,
                access: AccessFlags::REMOTE_READ,
            },
            // Unsignaled, as Linux posts its REG_MR.
            SendFlags::empty()
        ))
    );
    assert_eq!(s.send().sg_list.as_slice().len(), 1, "no in-capsule data");
    let sqe = Sqe::from_array(s.sqe_bytes().try_into().unwrap());
    let sgl = sqe.sgl();
    assert_eq!(
        (sgl.identifier(), sgl.key(), sgl.address()),
        (0x4F, key, DATA.addr)
    );
    // The window's key changes once the bind is posted.
    assert_eq!(c.window_key(1), Some(mw_key(1)));
    posted(&mut c, s);
    assert_eq!(c.window_key(1), Some(key));
    // A read binds for remote write, and the admin queue never sends data in-capsule.
    let s = c
        .submit(
            Sqe::read(0, 1, 0, 0, false),
            DataDir::ControllerToHost { len: 512 },
            Some(buf(512)),
        )
        .unwrap();
    assert!(matches!(
        s.bind().map(|b| b.op),
        Some(SendOp::BindMw {
            access: AccessFlags::REMOTE_WRITE,
            length: 512,
            ..
        })
    ));
    let mut admin = core_with(0, 4, 0);
    let s = admin
        .submit(
            Sqe::keep_alive(0),
            DataDir::HostToController { len: 1024 },
            Some(buf(1024)),
        )
        .unwrap();
    assert!(s.bind().is_some());
}

#[test]
fn too_large_and_busy_slots_are_refused_without_taking_anything() {
    let mut c = io_core();
    let e = c
        .submit(
            Sqe::read(0, 1, 0, 0, false),
            DataDir::ControllerToHost { len: MAX_IO + 1 },
            Some(buf(MAX_IO + 1)),
        )
        .unwrap_err();
    assert!(matches!(e, QueueError::TooLarge { len, max: MAX_IO } if len == MAX_IO + 1));
    // A buffer shorter than the data is refused too.
    assert!(matches!(
        c.submit(
            Sqe::read(0, 1, 0, 0, false),
            DataDir::ControllerToHost { len: 8192 },
            Some(buf(4096))
        ),
        Err(QueueError::ShortBuffer {
            len: 8192,
            buf: 4096
        })
    ));
    assert!(matches!(
        c.submit(
            Sqe::read(0, 1, 0, 0, false),
            DataDir::ControllerToHost { len: 512 },
            None
        ),
        Err(QueueError::ShortBuffer { len: 512, buf: 0 })
    ));
    // The refused commands took no slot.
    let s = c
        .submit_cid(3, Sqe::flush(0, 1), DataDir::None, None)
        .expect("slot 3 is free");
    assert!(matches!(
        c.submit_cid(3, Sqe::flush(0, 1), DataDir::None, None),
        Err(QueueError::BadCid(3))
    ));
    assert!(matches!(
        c.submit_cid(8, Sqe::flush(0, 1), DataDir::None, None),
        Err(QueueError::BadCid(8))
    ));
    assert!(matches!(
        c.send_runt(&[0u8; 65]),
        Err(QueueError::TooLarge { len: 65, max: 64 })
    ));
    posted(&mut c, s);
    // submit skips the slot submit_cid took.
    let mut cids: Vec<u16> = (0..6)
        .map(|_| {
            let s = c.submit(Sqe::flush(0, 1), DataDir::None, None).unwrap();
            posted(&mut c, s)
        })
        .collect();
    cids.sort_unstable();
    assert_eq!(cids, [0, 1, 2, 4, 5, 6]);
}

#[test]
fn the_sq_holds_its_size_minus_one_and_sqhd_frees_entries() {
    let mut c = io_core();
    c.limit_sq_size(4).unwrap();
    assert_eq!(c.max_outstanding(), 3);
    let cids: Vec<u16> = (0..3).map(|_| read(&mut c, 4096)).collect();
    assert!(!c.can_submit());
    assert!(matches!(
        c.submit(Sqe::flush(0, 1), DataDir::None, None),
        Err(QueueError::Full)
    ));
    assert!(matches!(c.next_free_slot(), Err(QueueError::Full)));
    let mut out = Vec::new();
    for &cid in &cids {
        send_done(&mut c, cid, &mut out);
    }
    // The controller fetched all three (SQHD 3) but completed only the last: the SQ is
    // empty again while two commands are still outstanding.
    let last = cids[2];
    let key = c.window_key(last);
    response(&mut c, 0, Cqe::success(last, 1, 3), key, &mut out);
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].cid, last);
    assert_eq!(c.outstanding(), 2);
    for _ in 0..3 {
        read(&mut c, 4096);
    }
    assert_eq!(c.outstanding(), 5);
    assert!(matches!(c.next_free_slot(), Err(QueueError::Full)));

    // An SQHD outside the SQ is ignored; the completion itself frees its own entry and
    // those before it (the controller fetches entries in order).
    let mut c = io_core();
    c.limit_sq_size(4).unwrap();
    let cids: Vec<u16> = (0..3).map(|_| read(&mut c, 4096)).collect();
    let mut out = Vec::new();
    send_done(&mut c, cids[1], &mut out);
    let key = c.window_key(cids[1]);
    response(&mut c, 0, Cqe::success(cids[1], 1, 0x7FFF), key, &mut out);
    assert_eq!(out.len(), 1);
    read(&mut c, 4096);
    read(&mut c, 4096);
    assert!(matches!(c.next_free_slot(), Err(QueueError::Full)));
}

#[test]
fn a_command_outstanding_while_the_sq_wraps_does_not_free_newer_entries() {
    // A (an Asynchronous Event Request, say) stays outstanding at SQ position 0 while
    // the SQ wraps and position 0 holds a newer entry the controller has not fetched.
    let mut c = io_core();
    c.limit_sq_size(4).unwrap();
    let mut out = Vec::new();
    let a = read(&mut c, 4096);
    send_done(&mut c, a, &mut out);
    let (b, d) = (read(&mut c, 4096), read(&mut c, 4096));
    for cid in [b, d] {
        send_done(&mut c, cid, &mut out);
        let key = c.window_key(cid);
        response(&mut c, 0, Cqe::success(cid, 1, 3), key, &mut out);
    }
    assert_eq!(out.len(), 2);
    // Head at 3: three entries free; positions 3, 0 and 1 take three new commands.
    for _ in 0..3 {
        read(&mut c, 4096);
    }
    assert!(!c.can_submit());
    // A completes; the controller still reports SQHD 3 (nothing new fetched). Its old
    // position 0 is now a newer entry: the SQ must stay full.
    let key = c.window_key(a);
    response(&mut c, 1, Cqe::success(a, 1, 3), key, &mut out);
    assert_eq!(out.last().map(|q| q.cid), Some(a));
    assert!(
        !c.can_submit(),
        "the completion of A freed entries the controller never fetched"
    );
}

#[test]
fn crqsize_limits_the_sq_and_must_be_usable() {
    let mut c = io_core();
    assert_eq!(c.max_outstanding(), 7);
    c.limit_sq_size(32).unwrap();
    assert_eq!(c.max_outstanding(), 7, "never above the depth");
    assert!(matches!(c.limit_sq_size(1), Err(HostError::Protocol(_))));
    c.limit_sq_size(2).unwrap();
    assert_eq!(c.max_outstanding(), 1);
}

#[test]
fn the_response_completes_a_command_without_waiting_for_its_send_completion() {
    let mut c = io_core();
    let mut out = Vec::new();
    // Response first (SEND with Invalidate of the granted key): the command completes
    // and its slot is free at once; the SEND's completion that follows changes nothing.
    let a = read(&mut c, 4096);
    let key_a = c.window_key(a).unwrap();
    response(&mut c, 5, Cqe::success(a, 1, 1), Some(key_a), &mut out);
    assert_eq!(out.len(), 1, "the response completes the command");
    assert_eq!(out[0].cid, a);
    assert!(out[0].result.is_ok());
    assert_eq!(c.outstanding(), 0);
    assert_eq!(actions(&mut c), [repost(&c, 5)]);
    // The slot is reused before the old SEND's completion arrives (the bench's tags);
    // that completion neither completes nor frees the new command.
    let s = c.submit_cid(
        a,
        Sqe::read(0, 1, 0, 0, false),
        DataDir::ControllerToHost { len: 4096 },
        Some(buf(4096)),
    );
    assert_eq!(posted(&mut c, s.unwrap()), a);
    send_done(&mut c, a, &mut out);
    assert_eq!(out.len(), 1);
    assert_eq!(c.outstanding(), 1);
    assert!(matches!(
        c.submit_cid(a, Sqe::flush(0, 1), DataDir::None, None),
        Err(QueueError::BadCid(x)) if x == a
    ));
    // SEND completion first, then the response.
    send_done(&mut c, a, &mut out);
    let key = c.window_key(a).unwrap();
    response(&mut c, 6, Cqe::success(a, 1, 2), Some(key), &mut out);
    assert_eq!(out.len(), 2);
    assert_eq!(out[1].cid, a);
    assert_eq!(actions(&mut c), [repost(&c, 6)]);
    assert_eq!(c.outstanding(), 0);
}

#[test]
fn lingering_sends_bound_the_send_queue() {
    // Commands complete on their responses while their SENDs wait for RC ACKs: after
    // `depth` such SENDs the queue refuses submissions (Full, try later) so the send
    // queue (`send_queue_wrs`) cannot overflow; one SEND completion lets one more in.
    let mut c = io_core();
    let mut out = Vec::new();
    let depth = c.depth();
    assert_eq!(send_queue_wrs(depth), 5 * u32::from(depth));
    for i in 0..depth {
        let a = read(&mut c, 4096);
        let key = c.window_key(a).unwrap();
        response(
            &mut c,
            i % 8,
            Cqe::success(a, 1, (i + 1) % 8),
            Some(key),
            &mut out,
        );
        assert_eq!(out.len(), usize::from(i) + 1);
        let _ = actions(&mut c);
    }
    assert_eq!(c.outstanding(), 0);
    assert!(!c.can_submit());
    assert!(matches!(
        c.submit(Sqe::flush(0, 1), DataDir::None, None),
        Err(QueueError::Full)
    ));
    // The oldest SEND completes (in order: the first command's slot).
    let first = out[0].cid;
    send_done(&mut c, first, &mut out);
    assert!(c.can_submit());
    assert!(c.submit(Sqe::flush(0, 1), DataDir::None, None).is_ok());
}

#[test]
fn a_runt_slot_waits_for_its_send_completion() {
    let mut c = io_core();
    let mut out = Vec::new();
    let s = c.send_runt(&[1, 2, 3]).unwrap();
    let r = posted(&mut c, s);
    assert!(matches!(
        c.submit_cid(r, Sqe::flush(0, 1), DataDir::None, None),
        Err(QueueError::BadCid(x)) if x == r
    ));
    send_done(&mut c, r, &mut out);
    assert!(out.is_empty());
    assert!(c
        .submit_cid(r, Sqe::flush(0, 1), DataDir::None, None)
        .is_ok());
}

#[test]
fn a_failed_send_after_its_response_fails_nothing_twice() {
    let mut c = io_core();
    let mut out = Vec::new();
    let a = read(&mut c, 4096);
    let key_a = c.window_key(a).unwrap();
    response(&mut c, 0, Cqe::success(a, 1, 1), Some(key_a), &mut out);
    assert_eq!(out.len(), 1);
    // The ACK never came: the SEND fails with the retries exhausted; the queue dies,
    // the command already completed is not reported again.
    let mut w = wc(WrKind::Send, a);
    w.status = WcStatus::RetryExcErr;
    c.handle_wc(&w, None, &mut out);
    assert_eq!(out.len(), 1);
    assert!(c.dead_reason().is_some());
    assert_eq!(c.outstanding(), 0);
}

#[test]
fn a_plain_send_to_a_keyed_command_is_answered_by_a_local_invalidate() {
    let mut c = io_core();
    let mut out = Vec::new();
    let cid = read(&mut c, 8192);
    let key = c.window_key(cid).unwrap();
    send_done(&mut c, cid, &mut out);
    response(&mut c, 0, Cqe::success(cid, 1, 1), None, &mut out);
    assert!(out.is_empty(), "the key is still valid");
    let acts = actions(&mut c);
    assert_eq!(acts.len(), 2);
    assert_eq!(acts[0], repost(&c, 0), "the receive goes back first");
    let Action::PostSend(inv) = acts[1] else {
        panic!("{acts:?}")
    };
    assert_eq!(inv.op, SendOp::LocalInv { rkey: key });
    assert_eq!(inv.flags, SendFlags::SIGNALED);
    assert_eq!(
        WrId::from_u64(inv.wr_id),
        Some(WrId {
            kind: WrKind::LocalInv,
            index: u32::from(cid)
        })
    );
    c.handle_wc(&wc(WrKind::LocalInv, cid), None, &mut out);
    assert_eq!(out.len(), 1);
    assert!(out[0].result.is_ok());
    // A command without a key needs no invalidation either way.
    let s = c.submit(Sqe::flush(0, 1), DataDir::None, None).unwrap();
    let f = posted(&mut c, s);
    send_done(&mut c, f, &mut out);
    response(&mut c, 1, Cqe::success(f, 1, 2), None, &mut out);
    assert_eq!(actions(&mut c), [repost(&c, 1)]);
    assert_eq!(out.len(), 2);
}

#[test]
fn invalidating_a_key_the_command_did_not_grant_kills_the_queue() {
    let mut c = io_core();
    let mut out = Vec::new();
    let a = read(&mut c, 4096);
    let b = read(&mut c, 4096);
    let key_b = c.window_key(b).unwrap();
    send_done(&mut c, a, &mut out);
    // The response to `a` invalidates `b`'s key.
    response(&mut c, 0, Cqe::success(a, 1, 1), Some(key_b), &mut out);
    let mut cids: Vec<u16> = out.iter().map(|c| c.cid).collect();
    cids.sort_unstable();
    assert_eq!(cids, [a, b]);
    assert!(out.iter().all(
        |c| matches!(&c.result, Err(HostError::Protocol(m)) if m.contains("invalidated rkey"))
    ));
    assert_eq!(c.outstanding(), 0);
    assert!(c.dead_reason().is_some());
    assert!(matches!(
        c.submit(Sqe::flush(0, 1), DataDir::None, None),
        Err(QueueError::Dead { qid: 1, .. })
    ));
    // Completions that arrive for the dead queue change nothing.
    out.clear();
    send_done(&mut c, b, &mut out);
    assert!(out.is_empty());
}

#[test]
fn a_failed_work_completion_fails_every_outstanding_command() {
    let mut c = io_core();
    let mut out = Vec::new();
    let cids: Vec<u16> = (0..3).map(|_| read(&mut c, 4096)).collect();
    let runt = c.send_runt(&[0u8; 32]).unwrap();
    posted(&mut c, runt);
    let mut w = wc(WrKind::Send, cids[1]);
    w.status = WcStatus::RetryExcErr;
    c.handle_wc(&w, None, &mut out);
    assert_eq!(out.len(), 3, "every command, not the runt SEND");
    for done in &out {
        assert!(matches!(
            done.result,
            Err(HostError::Transport {
                qid: 1,
                status: WcStatus::RetryExcErr,
                what: "command capsule SEND"
            })
        ));
    }
    assert_eq!(c.outstanding(), 0);
    assert!(!c.can_submit());
    assert!(matches!(
        c.submit_raw(Sqe::flush(0, 1), None),
        Err(QueueError::Dead { .. })
    ));
}

#[test]
fn malformed_or_unexpected_responses_kill_the_queue() {
    // Shorter than a CQE.
    let mut c = io_core();
    let mut out = Vec::new();
    let cid = read(&mut c, 4096);
    let mut w = wc(WrKind::Recv, 2);
    w.byte_len = 15;
    c.handle_wc(&w, Some(Cqe::success(cid, 1, 1).to_array()), &mut out);
    assert_eq!(out.len(), 1);
    assert!(matches!(&out[0].result, Err(HostError::Protocol(m)) if m.contains("15 bytes")));
    // For a command that is not outstanding.
    let mut c = io_core();
    let mut out = Vec::new();
    let cid = read(&mut c, 4096);
    response(&mut c, 0, Cqe::success(cid + 1, 1, 1), None, &mut out);
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].cid, cid);
    assert!(matches!(&out[0].result, Err(HostError::Protocol(m)) if m.contains("not outstanding")));
    // A second response for the same command.
    let mut c = io_core();
    let mut out = Vec::new();
    let cid = read(&mut c, 4096);
    let key = c.window_key(cid);
    response(&mut c, 0, Cqe::success(cid, 1, 1), key, &mut out);
    response(&mut c, 1, Cqe::success(cid, 1, 1), None, &mut out);
    assert!(c.dead_reason().is_some());
    assert_eq!(out.len(), 1);
    // A receive the queue never posted.
    let mut c = io_core();
    let mut w = wc(WrKind::Recv, 8);
    w.byte_len = 16;
    assert_eq!(c.response_index(&w), None);
    read(&mut c, 4096);
    let mut out = Vec::new();
    c.handle_wc(&w, None, &mut out);
    assert_eq!(out.len(), 1);
    assert!(c.dead_reason().is_some());
}

#[test]
fn an_error_status_completes_the_command_with_its_name_and_status() {
    let mut c = io_core();
    let mut out = Vec::new();
    let cid = read(&mut c, 4096);
    let key = c.window_key(cid);
    send_done(&mut c, cid, &mut out);
    let status = Status::generic(GenericStatus::InvalidField).with_dnr();
    response(&mut c, 0, Cqe::new(cid, 1, 1, status, 7), key, &mut out);
    assert!(matches!(
        &out[0].result,
        Err(HostError::Nvme { command: "Read", status: s, dw0: 7 }) if *s == status
    ));
    assert!(
        c.dead_reason().is_none(),
        "an NVMe error is not a transport error"
    );
    assert!(c.can_submit());
}

#[test]
fn failed_posts_undo_the_submission_and_a_send_lost_after_a_bind_kills_the_queue() {
    let err = || VerbsError::NoSuchObject;
    // The bind could not be posted: nothing happened.
    let mut c = io_core();
    let s = c
        .submit(
            Sqe::read(0, 1, 0, 0, false),
            DataDir::ControllerToHost { len: 8192 },
            Some(buf(8192)),
        )
        .unwrap();
    let cid = s.cid();
    assert!(matches!(
        c.submitted(s, Err(PostFailure::Bind(err()))),
        Err(QueueError::Verbs(_))
    ));
    assert_eq!(c.outstanding(), 0);
    assert_eq!(c.window_key(cid), Some(mw_key(usize::from(cid))));
    assert!(c.dead_reason().is_none());
    assert!(c
        .submit_cid(cid, Sqe::flush(0, 1), DataDir::None, None)
        .is_ok());
    // A SEND without a bind could not be posted: the queue lives on.
    let mut c = io_core();
    let s = c.submit(Sqe::flush(0, 1), DataDir::None, None).unwrap();
    assert!(c.submitted(s, Err(PostFailure::Send(err()))).is_err());
    assert!(c.dead_reason().is_none());
    assert_eq!(c.outstanding(), 0);
    // The SEND after a posted bind: the window is bound with no command to use it.
    let s = c
        .submit(
            Sqe::read(0, 1, 0, 0, false),
            DataDir::ControllerToHost { len: 8192 },
            Some(buf(8192)),
        )
        .unwrap();
    let bound = match s.bind().map(|b| b.op) {
        Some(SendOp::BindMw { rkey, .. }) => rkey,
        other => panic!("{other:?}"),
    };
    let cid = s.cid();
    assert!(c.submitted(s, Err(PostFailure::Send(err()))).is_err());
    assert_eq!(c.window_key(cid), Some(bound));
    assert!(c.dead_reason().unwrap().contains("after a bind"));
    assert!(matches!(
        c.submit(Sqe::flush(0, 1), DataDir::None, None),
        Err(QueueError::Dead { .. })
    ));
}

#[test]
fn a_failed_repost_or_invalidate_kills_the_queue() {
    let mut c = io_core();
    let mut out = Vec::new();
    let a = read(&mut c, 4096);
    let b = read(&mut c, 4096);
    send_done(&mut c, a, &mut out);
    response(&mut c, 3, Cqe::success(a, 1, 1), None, &mut out);
    let acts = actions(&mut c);
    assert_eq!(acts.len(), 2);
    c.post_failed(acts[1].wr_id(), VerbsError::NoSuchObject, &mut out);
    assert!(c.poll_action().is_none());
    let mut cids: Vec<u16> = out.iter().map(|c| c.cid).collect();
    cids.sort_unstable();
    assert_eq!(cids, [a, b]);
    assert!(out.iter().all(
        |c| matches!(&c.result, Err(HostError::Protocol(m)) if m.contains("local invalidate"))
    ));
    let mut c = io_core();
    let mut out = Vec::new();
    let a = read(&mut c, 4096);
    let b = read(&mut c, 4096);
    let key = c.window_key(a);
    response(&mut c, 0, Cqe::success(a, 1, 1), key, &mut out);
    let acts = actions(&mut c);
    c.post_failed(acts[0].wr_id(), VerbsError::NoSuchObject, &mut out);
    assert_eq!(out.len(), 2);
    assert_eq!((out[0].cid, out[1].cid), (a, b));
    assert!(out[0].result.is_ok(), "its response completed it");
    assert!(matches!(&out[1].result, Err(HostError::Protocol(m)) if m.contains("re-posting")));
    assert!(c.dead_reason().is_some());
}

#[test]
fn the_targets_disconnect_fails_what_is_outstanding_once() {
    let mut c = io_core();
    let mut out = Vec::new();
    read(&mut c, 4096);
    read(&mut c, 4096);
    c.on_peer_disconnected();
    assert!(c.is_disconnected());
    assert!(matches!(
        c.submit(Sqe::flush(0, 1), DataDir::None, None),
        Err(QueueError::Dead { .. })
    ));
    c.fail_if_peer_gone(&mut out);
    assert_eq!(out.len(), 2);
    assert!(out
        .iter()
        .all(|c| matches!(c.result, Err(HostError::TargetDisconnected { qid: 1 }))));
    c.fail_if_peer_gone(&mut out);
    assert_eq!(out.len(), 2);
    assert_eq!(c.outstanding(), 0);
    // After our own disconnect, the target's is no news and fails nothing.
    let mut c = io_core();
    read(&mut c, 4096);
    assert!(c.on_local_disconnect());
    assert!(!c.on_local_disconnect());
    c.on_peer_disconnected();
    let mut out = Vec::new();
    c.fail_if_peer_gone(&mut out);
    assert!(out.is_empty());
    assert_eq!(c.dead_reason(), Some("disconnected"));
}

#[test]
fn a_runt_send_holds_its_slot_until_it_completes_and_takes_no_sq_entry() {
    let mut c = core_with(1, 2, 0);
    let s = c.send_runt(&[0xAB; 32]).unwrap();
    assert_eq!(s.sqe_bytes(), &[0xAB; 32]);
    assert_eq!(s.send().sg_list.as_slice()[0].length, 32);
    let cid = posted(&mut c, s);
    assert_eq!(c.outstanding(), 0);
    // One slot left, and one SQ entry (depth 2 - 1).
    let s = c.submit(Sqe::flush(0, 1), DataDir::None, None).unwrap();
    assert_ne!(s.cid(), cid);
    posted(&mut c, s);
    let mut out = Vec::new();
    send_done(&mut c, cid, &mut out);
    assert!(out.is_empty(), "no completion for a runt");
}

#[test]
fn raw_submissions_keep_the_sqe_and_carry_in_capsule_data() {
    let mut c = io_core();
    let mut sqe = Sqe::write(0, 1, 0, 0, false);
    sqe.set_psdt(0);
    let s = c.submit_raw(sqe, Some(buf(100))).unwrap();
    let sent = Sqe::from_array(s.sqe_bytes().try_into().unwrap());
    assert_eq!(sent.cid(), s.cid());
    assert_eq!(sent.sgl(), sqe.sgl(), "the SGL is left as given");
    assert!(s.bind().is_none());
    assert_eq!(s.send().sg_list.as_slice()[1].length, 100);
    let cid = posted(&mut c, s);
    assert_eq!(c.outstanding(), 1);
    let mut out = Vec::new();
    send_done(&mut c, cid, &mut out);
    response(&mut c, 0, Cqe::success(cid, 1, 1), None, &mut out);
    assert_eq!(out.len(), 1);
}

#[test]
fn deferred_acks_start_with_the_first_io_command_and_never_on_the_admin_queue() {
    let mut c = io_core();
    let connect = c
        .submit(Sqe::connect(0, 1, 7, 0), DataDir::None, None)
        .unwrap();
    assert!(!connect.turns_on_deferred_acks(), "a Fabrics command");
    posted(&mut c, connect);
    let s = c.submit(Sqe::flush(0, 1), DataDir::None, None).unwrap();
    assert!(s.turns_on_deferred_acks());
    posted(&mut c, s);
    let s = c.submit(Sqe::flush(0, 1), DataDir::None, None).unwrap();
    assert!(!s.turns_on_deferred_acks(), "once");
    let mut admin = core_with(0, 4, 0);
    let s = admin
        .submit(Sqe::keep_alive(0), DataDir::None, None)
        .unwrap();
    assert!(!s.turns_on_deferred_acks());
}

#[test]
fn bad_shapes_are_refused() {
    let cfg = QueueConfig::new(1, 1, MAX_IO, "127.0.0.2:4420".parse().unwrap());
    let mem = *io_core().memory();
    assert!(matches!(
        QueueCore::new(&cfg, mem, RemoteKeys::Windows(&[1])),
        Err(HostError::InvalidArgument(_))
    ));
    let cfg = QueueConfig::new(1, 4, MAX_IO, "127.0.0.2:4420".parse().unwrap());
    assert!(matches!(
        QueueCore::new(&cfg, mem, RemoteKeys::Windows(&[1, 2, 3])),
        Err(HostError::InvalidArgument(_))
    ));
}

/// Without memory windows (a device with none): keyed commands carry the data region's
/// own rkey, bind nothing, ask for no invalidation, and complete on their response.
#[test]
fn without_windows_keyed_commands_carry_the_region_key() {
    const REGION_RKEY: u32 = 0x00AB_CD00;
    let cfg = QueueConfig::new(1, 8, MAX_IO, "127.0.0.2:4420".parse().unwrap());
    let mem = *io_core().memory();
    let mut c = QueueCore::new(&cfg, mem, RemoteKeys::Region { rkey: REGION_RKEY }).unwrap();
    assert!(!c.uses_windows());
    let s = c
        .submit(
            Sqe::read(0, 1, 0, 15, false),
            DataDir::ControllerToHost { len: 8192 },
            Some(buf(8192)),
        )
        .unwrap();
    assert!(s.bind().is_none());
    let sqe = Sqe::from_array(s.sqe_bytes().try_into().unwrap());
    let sgl = sqe.sgl();
    assert_eq!(
        (sgl.identifier(), sgl.key(), sgl.address()),
        (0x40, REGION_RKEY, DATA.addr)
    );
    let cid = posted(&mut c, s);
    assert_eq!(c.window_key(cid), None);
    let mut out = Vec::new();
    response(&mut c, 0, Cqe::success(cid, 1, 1), None, &mut out);
    assert_eq!(out.len(), 1, "no Local Invalidate to wait for");
    assert!(out[0].result.is_ok());
    assert_eq!(
        c.poll_action().map(|a| matches!(a, Action::PostRecv(_))),
        Some(true)
    );
    assert!(c.poll_action().is_none());
    // A target that invalidates the region's key breaks the protocol: the queue dies.
    let s = c
        .submit(
            Sqe::read(0, 1, 0, 0, false),
            DataDir::ControllerToHost { len: 512 },
            Some(buf(512)),
        )
        .unwrap();
    let cid = posted(&mut c, s);
    let mut out = Vec::new();
    response(
        &mut c,
        1,
        Cqe::success(cid, 1, 2),
        Some(REGION_RKEY),
        &mut out,
    );
    assert!(matches!(out[0].result, Err(HostError::Protocol(_))));
    assert!(c.dead_reason().is_some());
}
