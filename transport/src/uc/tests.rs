//! The UC receive state machine, sans-IO: two [`UcQp`]s joined by a lossy in-memory
//! wire (every packet is written with the wire encoders and parsed back).
use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;

use super::UcQp;
use crate::rc::{CompletionQueueKind, KeyTable, MrKeys, MrMemory, RcEnv};
use crate::verbs::*;
use crate::wire::{build, parse, IcrcIpInfo};

const MTU: Mtu = Mtu::Mtu1024;

struct Net {
    keys: KeyTable,
    a: UcQp,
    b: UcQp,
    /// Packets A sent so far (the index the drop filter sees).
    sent: usize,
    drop: Vec<usize>,
    mem_a: Arc<MrMemory>,
    mem_b: Arc<MrMemory>,
    mr_a: MrKeys,
    mr_b: MrKeys,
}

fn connect(qp: &mut UcQp, dest: u32, rq_psn: u32, sq_psn: u32) {
    let ah = AhAttr {
        dest: IpAddr::V4(Ipv4Addr::LOCALHOST),
        flow_label: 0,
        hop_limit: 64,
        traffic_class: 0,
    };
    qp.modify(&QpAttr {
        qp_state: Some(QpState::Init),
        qp_access_flags: Some(AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE),
        ..Default::default()
    })
    .unwrap();
    qp.modify(&QpAttr {
        qp_state: Some(QpState::Rtr),
        path_mtu: Some(MTU),
        dest_qp_num: Some(dest),
        rq_psn: Some(rq_psn),
        ah_attr: Some(ah),
        ..Default::default()
    })
    .unwrap();
    qp.modify(&QpAttr {
        qp_state: Some(QpState::Rts),
        sq_psn: Some(sq_psn),
        ..Default::default()
    })
    .unwrap();
}

impl Net {
    fn new() -> Net {
        let keys = KeyTable::new();
        let pd = keys.alloc_pd();
        let cap = QpCap::default();
        let mut a = UcQp::new(0x11, pd, cap, false);
        let mut b = UcQp::new(0x22, pd, cap, false);
        // PSNs near the wrap, so the checks cross it.
        connect(&mut a, 0x22, 0x00FF_FFF0, 0x00FF_FFFA);
        connect(&mut b, 0x11, 0x00FF_FFFA, 0x00FF_FFF0);
        let mem_a = MrMemory::new(1 << 16).unwrap();
        let mem_b = MrMemory::new(1 << 16).unwrap();
        let access = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE;
        let mr_a = keys.reg_mr(pd, &mem_a, 0, 1 << 16, access).unwrap();
        let mr_b = keys.reg_mr(pd, &mem_b, 0, 1 << 16, access).unwrap();
        Net {
            keys,
            a,
            b,
            sent: 0,
            drop: Vec::new(),
            mem_a,
            mem_b,
            mr_a,
            mr_b,
        }
    }

    /// Fills A's memory at `off` with a pattern of `len` bytes numbered by `tag`.
    fn fill_a(&self, off: usize, len: usize, tag: u8) {
        for i in 0..len {
            // SAFETY: test memory nobody else touches.
            unsafe { *self.mem_a.as_ptr().add(off + i) = tag ^ (i as u8) };
        }
    }

    fn b_bytes(&self, off: usize, len: usize) -> Vec<u8> {
        // SAFETY: as above.
        unsafe { std::slice::from_raw_parts(self.mem_b.as_ptr().add(off), len).to_vec() }
    }

    fn sge_a(&self, off: usize, len: usize) -> SgList {
        SgList::one(Sge {
            addr: self.mr_a.addr + off as u64,
            length: len as u32,
            lkey: self.mr_a.lkey,
        })
    }

    fn post_recv_b(&mut self, wr_id: u64, off: usize, len: usize) {
        let wr = RecvWr {
            wr_id,
            sg_list: SgList::one(Sge {
                addr: self.mr_b.addr + off as u64,
                length: len as u32,
                lkey: self.mr_b.lkey,
            }),
        };
        self.b.post_recv(&wr).unwrap();
    }

    fn send(&mut self, wr_id: u64, off: usize, len: usize) {
        let wr = SendWr {
            wr_id,
            op: SendOp::Send,
            sg_list: self.sge_a(off, len),
            flags: SendFlags::SIGNALED,
        };
        self.a.post_send(&wr).unwrap();
    }

    fn write(&mut self, wr_id: u64, off: usize, len: usize, to: usize, imm: Option<u32>) {
        let (remote_addr, rkey) = (self.mr_b.addr + to as u64, self.mr_b.rkey);
        let op = match imm {
            None => SendOp::RdmaWrite { remote_addr, rkey },
            Some(imm_data) => SendOp::RdmaWriteWithImm {
                remote_addr,
                rkey,
                imm_data,
            },
        };
        let wr = SendWr {
            wr_id,
            op,
            sg_list: self.sge_a(off, len),
            flags: SendFlags::SIGNALED,
        };
        self.a.post_send(&wr).unwrap();
    }

    /// Moves every packet A has to B (through the encoders), dropping those whose
    /// index is in `drop`.
    fn run(&mut self) {
        let ip = IcrcIpInfo {
            src: Ipv4Addr::LOCALHOST.into(),
            dst: Ipv4Addr::LOCALHOST.into(),
            ipv4_id: 0,
            udp_sport: 0xC000,
            udp_dport: 4791,
        };
        let mut buf = Vec::new();
        loop {
            let mut env = RcEnv {
                keys: &self.keys,
                srq: None,
            };
            let Some(p) = self.a.poll_transmit(&mut env) else {
                break;
            };
            let i = self.sent;
            self.sent += 1;
            if self.drop.contains(&i) {
                continue;
            }
            build(&p.hdr, &p.payload.to_vec(), &ip, &mut buf);
            let pkt = parse(&buf).unwrap();
            assert!(!pkt.hdr.bth.ack_req, "UC asks for no ACKs");
            self.b.handle_packet(&pkt, &mut env);
        }
        // UC never answers.
        let mut env = RcEnv {
            keys: &self.keys,
            srq: None,
        };
        assert!(self.b.poll_transmit(&mut env).is_none());
    }

    fn wcs(qp: &mut UcQp, queue: CompletionQueueKind) -> Vec<WorkCompletion> {
        let mut v = Vec::new();
        while let Some(c) = qp.poll_completion() {
            assert_eq!(c.queue, queue, "{c:?}");
            v.push(c.wc);
        }
        v
    }
}

/// An RDMA WRITE and a SEND of three packets each arrive whole; each WR completes at
/// the sender once sent, the SEND at the receiver with its length and source QP.
#[test]
fn a_write_and_a_send_arrive_whole() {
    let mut n = Net::new();
    n.fill_a(0, 3000, 0x5A);
    n.fill_a(4096, 2500, 0xA5);
    n.post_recv_b(7, 8192, 4096);
    n.write(1, 0, 3000, 0, None);
    n.send(2, 4096, 2500);
    n.run();
    assert_eq!(n.sent, 6);
    let sent = Net::wcs(&mut n.a, CompletionQueueKind::Send);
    assert_eq!(
        sent.iter()
            .map(|w| (w.wr_id, w.status, w.opcode, w.byte_len))
            .collect::<Vec<_>>(),
        [
            (1, WcStatus::Success, WcOpcode::RdmaWrite, 3000),
            (2, WcStatus::Success, WcOpcode::Send, 2500)
        ]
    );
    let got = Net::wcs(&mut n.b, CompletionQueueKind::Recv);
    assert_eq!(got.len(), 1);
    assert_eq!(
        (got[0].wr_id, got[0].status, got[0].byte_len, got[0].src_qp),
        (7, WcStatus::Success, 2500, 0x11)
    );
    let want: Vec<u8> = (0..3000).map(|i| 0x5A ^ (i as u8)).collect();
    assert_eq!(n.b_bytes(0, 3000), want);
    let want: Vec<u8> = (0..2500).map(|i| 0xA5 ^ (i as u8)).collect();
    assert_eq!(n.b_bytes(8192, 2500), want);
    assert_eq!(n.b.counters().dropped_msgs, 0);
    assert_eq!(n.b.counters().rdma_recvs, 3);
}

/// Three SENDs of three packets; the second's Middle is lost: the second message is
/// dropped, its receive WR is not completed but filled by the third, which arrives
/// whole, as does the first.
#[test]
fn a_lost_middle_loses_only_its_message_and_its_wr_takes_the_next() {
    let mut n = Net::new();
    for m in 0..3u8 {
        n.fill_a(m as usize * 4096, 2500, m * 0x10);
        n.post_recv_b(100 + m as u64, 16384 + m as usize * 4096, 4096);
    }
    n.drop = vec![4];
    for m in 0..3 {
        n.send(m as u64, m * 4096, 2500);
    }
    n.run();
    assert_eq!(Net::wcs(&mut n.a, CompletionQueueKind::Send).len(), 3);
    let got = Net::wcs(&mut n.b, CompletionQueueKind::Recv);
    assert_eq!(
        got.iter()
            .map(|w| (w.wr_id, w.byte_len))
            .collect::<Vec<_>>(),
        [(100, 2500), (101, 2500)]
    );
    // WR 101 holds the third message.
    let want: Vec<u8> = (0..2500).map(|i| 0x20 ^ (i as u8)).collect();
    assert_eq!(n.b_bytes(16384 + 4096, 2500), want);
    let c = n.b.counters();
    assert_eq!((c.dropped_msgs, c.out_of_seq_request), (1, 1));
    assert!(!n.b.dropping());
    assert_eq!(n.b.state(), QpState::Rts);
}

/// A lost Last: the message in progress is dropped when the next First arrives out
/// of sequence, and that message is placed.
#[test]
fn a_lost_last_is_noticed_at_the_next_first_which_is_placed() {
    let mut n = Net::new();
    n.fill_a(0, 3000, 1);
    n.fill_a(4096, 3000, 2);
    n.post_recv_b(1, 16384, 4096);
    n.post_recv_b(2, 20480, 4096);
    n.drop = vec![2];
    n.send(1, 0, 3000);
    n.send(2, 4096, 3000);
    n.run();
    let got = Net::wcs(&mut n.b, CompletionQueueKind::Recv);
    assert_eq!(
        got.iter()
            .map(|w| (w.wr_id, w.byte_len))
            .collect::<Vec<_>>(),
        [(1, 3000)]
    );
    let want: Vec<u8> = (0..3000).map(|i| 2 ^ (i as u8)).collect();
    assert_eq!(n.b_bytes(16384, 3000), want, "the second message, in WR 1");
    assert_eq!(n.b.counters().dropped_msgs, 1);
}

/// A lost First: its Middle and Last are dropped (nothing to continue), the next
/// message is placed.
#[test]
fn a_lost_first_drops_the_rest_of_its_message() {
    let mut n = Net::new();
    n.fill_a(0, 3000, 1);
    n.fill_a(4096, 3000, 2);
    n.post_recv_b(1, 16384, 4096);
    n.drop = vec![0];
    n.write(1, 0, 3000, 0, None);
    n.write(2, 4096, 3000, 8192, None);
    n.run();
    assert_eq!(
        n.b_bytes(0, 3000),
        vec![0u8; 3000],
        "nothing of the first WRITE"
    );
    let want: Vec<u8> = (0..3000).map(|i| 2 ^ (i as u8)).collect();
    assert_eq!(n.b_bytes(8192, 3000), want);
    let c = n.b.counters();
    assert_eq!((c.dropped_msgs, c.out_of_seq_request), (1, 1));
}

/// A SEND without a receive WR is dropped (no RNR NAK on UC); the next one, after a
/// WR was posted, arrives. A WRITE with immediate takes a receive WR.
#[test]
fn a_send_without_a_receive_wr_is_dropped_and_the_next_arrives() {
    let mut n = Net::new();
    n.fill_a(0, 100, 9);
    n.send(1, 0, 100);
    n.run();
    assert_eq!(n.b.counters().dropped_msgs, 1);
    n.post_recv_b(5, 16384, 4096);
    n.post_recv_b(6, 20480, 4096);
    n.send(2, 0, 100);
    n.write(3, 0, 100, 0, Some(0xBEEF));
    n.run();
    let got = Net::wcs(&mut n.b, CompletionQueueKind::Recv);
    assert_eq!(
        got.iter()
            .map(|w| (w.wr_id, w.opcode, w.byte_len, w.imm_data))
            .collect::<Vec<_>>(),
        [
            (5, WcOpcode::Recv, 100, None),
            (6, WcOpcode::RecvRdmaWithImm, 100, Some(0xBEEF))
        ]
    );
}

/// A WRITE under a bad rkey is dropped and counted; the QP stays in RTS and the next
/// WRITE lands.
#[test]
fn a_write_under_a_bad_rkey_is_dropped_and_the_qp_goes_on() {
    let mut n = Net::new();
    n.fill_a(0, 2000, 3);
    let wr = SendWr {
        wr_id: 1,
        op: SendOp::RdmaWrite {
            remote_addr: n.mr_b.addr,
            rkey: n.mr_b.rkey ^ 0x100,
        },
        sg_list: n.sge_a(0, 2000),
        flags: SendFlags::SIGNALED,
    };
    n.a.post_send(&wr).unwrap();
    n.write(2, 0, 2000, 100, None);
    n.run();
    assert_eq!(n.b.counters().dropped_msgs, 1);
    assert_eq!(n.b.state(), QpState::Rts);
    let want: Vec<u8> = (0..2000).map(|i| 3 ^ (i as u8)).collect();
    assert_eq!(n.b_bytes(100, 2000), want);
}

/// A SEND longer than its receive WR completes the WR with IBV_WC_LOC_LEN_ERR.
#[test]
fn a_send_longer_than_the_receive_wr_completes_it_with_loc_len_err() {
    let mut n = Net::new();
    n.post_recv_b(1, 16384, 1500);
    n.send(1, 0, 3000);
    n.run();
    let got = Net::wcs(&mut n.b, CompletionQueueKind::Recv);
    assert_eq!(
        got.iter().map(|w| (w.wr_id, w.status)).collect::<Vec<_>>(),
        [(1, WcStatus::LocLenErr)]
    );
}

/// UC has no RDMA READ, SEND with Invalidate or remote read access.
#[test]
fn reads_invalidates_and_remote_read_access_are_refused() {
    let mut n = Net::new();
    for op in [
        SendOp::RdmaRead {
            remote_addr: 0,
            rkey: 1,
        },
        SendOp::SendWithInv { invalidate_rkey: 1 },
    ] {
        let wr = SendWr {
            wr_id: 1,
            op,
            sg_list: n.sge_a(0, 8),
            flags: SendFlags::SIGNALED,
        };
        assert!(matches!(
            n.a.post_send(&wr),
            Err(VerbsError::InvalidArgument(m)) if m.contains("UC QP")
        ));
    }
    let r = n.a.modify(&QpAttr {
        qp_access_flags: Some(AccessFlags::REMOTE_READ | AccessFlags::LOCAL_WRITE),
        ..Default::default()
    });
    assert!(matches!(r, Err(VerbsError::InvalidArgument(_))));
}

/// A duplicated Middle is a PSN error on UC (no duplicate detection): the message is
/// dropped, the next arrives.
#[test]
fn a_duplicated_middle_drops_the_message() {
    let mut n = Net::new();
    n.post_recv_b(1, 16384, 4096);
    n.post_recv_b(2, 20480, 4096);
    n.send(1, 0, 3000);
    n.send(2, 4096, 3000);
    // Deliver message 1 with its Middle twice, by hand.
    let ip = IcrcIpInfo {
        src: Ipv4Addr::LOCALHOST.into(),
        dst: Ipv4Addr::LOCALHOST.into(),
        ipv4_id: 0,
        udp_sport: 0xC000,
        udp_dport: 4791,
    };
    let mut env = RcEnv {
        keys: &n.keys,
        srq: None,
    };
    let mut pkts = Vec::new();
    while let Some(p) = n.a.poll_transmit(&mut env) {
        let mut buf = Vec::new();
        build(&p.hdr, &p.payload.to_vec(), &ip, &mut buf);
        pkts.push(buf);
    }
    assert_eq!(pkts.len(), 6);
    for i in [0, 1, 1, 2, 3, 4, 5] {
        n.b.handle_packet(&parse(&pkts[i]).unwrap(), &mut env);
    }
    let got = Net::wcs(&mut n.b, CompletionQueueKind::Recv);
    assert_eq!(
        got.iter()
            .map(|w| (w.wr_id, w.byte_len))
            .collect::<Vec<_>>(),
        [(1, 3000)]
    );
    assert_eq!(n.b.counters().dropped_msgs, 1);
}

/// Error flushes what is posted, held and in progress.
#[test]
fn error_flushes_posted_and_held_receive_wrs() {
    let mut n = Net::new();
    n.post_recv_b(1, 16384, 4096);
    n.post_recv_b(2, 20480, 4096);
    n.drop = vec![1];
    n.send(1, 0, 3000);
    n.run();
    n.b.modify(&QpAttr {
        qp_state: Some(QpState::Error),
        ..Default::default()
    })
    .unwrap();
    let got = Net::wcs(&mut n.b, CompletionQueueKind::Recv);
    let mut ids: Vec<_> = got
        .iter()
        .map(|w| {
            assert_eq!(w.status, WcStatus::WrFlushErr);
            w.wr_id
        })
        .collect();
    ids.sort();
    assert_eq!(ids, [1, 2]);
    let _ = (&n.mem_a, n.mr_a);
}
