//! The UD core, sans-IO: send to an address, receive behind the GRH area, Q_Key checks,
//! the one-MTU limit.
use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;

use super::grh::grh_source;
use super::UdQp;
use crate::rc::{CompletionQueueKind, KeyTable, MrKeys, MrMemory, RcEnv};
use crate::verbs::*;
use crate::wire::{build, parse, IcrcIpInfo};

const QKEY: u32 = 0x1111_1111;

struct Two {
    keys: KeyTable,
    a: UdQp,
    b: UdQp,
    mem: Arc<MrMemory>,
    mr: MrKeys,
}

fn up(qp: &mut UdQp, qkey: u32) {
    qp.modify(&QpAttr {
        qp_state: Some(QpState::Init),
        qkey: Some(qkey),
        ..Default::default()
    })
    .unwrap();
    qp.modify(&QpAttr {
        qp_state: Some(QpState::Rtr),
        ..Default::default()
    })
    .unwrap();
    qp.modify(&QpAttr {
        qp_state: Some(QpState::Rts),
        sq_psn: Some(5),
        ..Default::default()
    })
    .unwrap();
}

fn ah() -> AhAttr {
    AhAttr {
        dest: IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2)),
        flow_label: 0,
        hop_limit: 64,
        traffic_class: 0,
    }
}

impl Two {
    fn new(qkey_b: u32) -> Two {
        let keys = KeyTable::new();
        let pd = keys.alloc_pd();
        let mut a = UdQp::new(0x31, pd, QpCap::default(), false, Mtu::Mtu1024);
        let mut b = UdQp::new(0x32, pd, QpCap::default(), false, Mtu::Mtu1024);
        up(&mut a, QKEY);
        up(&mut b, qkey_b);
        let mem = MrMemory::new(1 << 14).unwrap();
        let mr = keys
            .reg_mr(pd, &mem, 0, 1 << 14, AccessFlags::LOCAL_WRITE)
            .unwrap();
        Two {
            keys,
            a,
            b,
            mem,
            mr,
        }
    }

    fn sge(&self, off: usize, len: usize) -> SgList {
        SgList::one(Sge {
            addr: self.mr.addr + off as u64,
            length: len as u32,
            lkey: self.mr.lkey,
        })
    }

    fn send(&mut self, len: usize, remote_qkey: u32) -> Result<(), VerbsError> {
        let wr = SendWr {
            wr_id: 9,
            op: SendOp::UdSend {
                dest: UdDest {
                    ah: Ah(0),
                    remote_qpn: 0x32,
                    remote_qkey,
                },
                imm_data: Some(0x1234),
            },
            sg_list: self.sge(0, len),
            flags: SendFlags::SIGNALED,
        };
        self.a.post_send(&wr, ah())
    }

    /// Moves A's packets to B as if from 10.0.0.1 to 10.0.0.2.
    fn run(&mut self) {
        let src: IpAddr = Ipv4Addr::new(10, 0, 0, 1).into();
        let ip = IcrcIpInfo {
            src,
            dst: ah().dest,
            ipv4_id: 0,
            udp_sport: 0xC000,
            udp_dport: 4791,
        };
        let mut env = RcEnv {
            keys: &self.keys,
            srq: None,
        };
        let mut buf = Vec::new();
        while let Some((p, to)) = self.a.poll_transmit(&mut env) {
            assert_eq!(to, ah());
            build(&p.hdr, &p.payload.to_vec(), &ip, &mut buf);
            let pkt = parse(&buf).unwrap();
            self.b
                .handle_packet(&pkt, src, to.dest, buf.len(), 0, &mut env);
        }
    }
}

/// A UD SEND lands after the 40-byte GRH area, which names the sender; the completion
/// counts GRH and message and carries the source QP, IBV_WC_GRH and the immediate.
#[test]
fn a_ud_send_lands_behind_the_grh_with_src_qp() {
    let mut t = Two::new(QKEY);
    for i in 0..1000 {
        // SAFETY: test memory.
        unsafe { *t.mem.as_ptr().add(i) = i as u8 };
    }
    let wr = RecvWr {
        wr_id: 3,
        sg_list: t.sge(4096, 1024 + GRH_LEN),
    };
    t.b.post_recv(&wr).unwrap();
    t.send(1000, QKEY).unwrap();
    t.run();
    let c = t.b.poll_completion().unwrap();
    assert_eq!(c.queue, CompletionQueueKind::Recv);
    let wc = c.wc;
    assert_eq!(
        (
            wc.wr_id,
            wc.status,
            wc.byte_len,
            wc.src_qp,
            wc.grh,
            wc.imm_data
        ),
        (3, WcStatus::Success, 1040, 0x31, true, Some(0x1234))
    );
    let mut g = [0u8; GRH_LEN];
    // SAFETY: test memory.
    unsafe { std::ptr::copy_nonoverlapping(t.mem.as_ptr().add(4096), g.as_mut_ptr(), GRH_LEN) };
    assert_eq!(grh_source(&g), IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)));
    // SAFETY: test memory.
    let body = unsafe { std::slice::from_raw_parts(t.mem.as_ptr().add(4096 + GRH_LEN), 1000) };
    assert!(body.iter().enumerate().all(|(i, &b)| b == i as u8));
    let s = t.a.poll_completion().unwrap();
    assert_eq!((s.queue, s.wc.byte_len), (CompletionQueueKind::Send, 1000));
}

/// A Q_Key other than the QP's is dropped and counted; a Q_Key with the high bit set
/// sends the sender's own.
#[test]
fn a_wrong_qkey_is_dropped_and_counted() {
    let mut t = Two::new(0x2222_2222);
    let wr = RecvWr {
        wr_id: 3,
        sg_list: t.sge(4096, 2048),
    };
    t.b.post_recv(&wr).unwrap();
    t.send(10, QKEY).unwrap();
    t.send(10, 0x8000_0000).unwrap(); // the sender's own Q_Key: also wrong here
    t.run();
    assert!(t.b.poll_completion().is_none());
    assert_eq!(t.b.counters().qkey_violations, 2);
    t.send(10, 0x2222_2222).unwrap();
    t.run();
    assert_eq!(t.b.poll_completion().unwrap().wc.status, WcStatus::Success);
}

/// A message longer than the MTU is refused at post; a receive buffer without room
/// for the GRH completes with IBV_WC_LOC_LEN_ERR.
#[test]
fn oversize_sends_are_refused_and_short_buffers_fail_with_loc_len_err() {
    let mut t = Two::new(QKEY);
    assert!(matches!(
        t.send(1025, QKEY),
        Err(VerbsError::CapabilityExceeded {
            asked: 1025,
            max: 1024,
            ..
        })
    ));
    let wr = RecvWr {
        wr_id: 4,
        sg_list: t.sge(4096, 1024),
    };
    t.b.post_recv(&wr).unwrap();
    t.send(1024, QKEY).unwrap();
    t.run();
    let c = t.b.poll_completion().unwrap();
    assert_eq!((c.wc.wr_id, c.wc.status), (4, WcStatus::LocLenErr));
    assert_eq!(t.b.state(), QpState::Rts);
}

/// Init needs a Q_Key; only UD sends are taken.
#[test]
fn init_needs_a_qkey_and_only_ud_sends_are_taken() {
    let keys = KeyTable::new();
    let pd = keys.alloc_pd();
    let mut q = UdQp::new(0x40, pd, QpCap::default(), false, Mtu::Mtu1024);
    let r = q.modify(&QpAttr {
        qp_state: Some(QpState::Init),
        ..Default::default()
    });
    assert!(matches!(r, Err(VerbsError::InvalidArgument(m)) if m.contains("Q_Key")));
    up(&mut q, 1);
    let wr = SendWr {
        wr_id: 1,
        op: SendOp::Send,
        sg_list: SgList::new(),
        flags: SendFlags::SIGNALED,
    };
    assert!(matches!(
        q.post_send(&wr, ah()),
        Err(VerbsError::InvalidArgument(_))
    ));
}
