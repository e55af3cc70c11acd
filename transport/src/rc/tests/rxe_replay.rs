//! Linux rxe's answer to a READ re-issued from the middle of a message: it replays the
//! response with the original message's opcodes (READ Response Middle .. Last, no
//! First), where our responder starts again at First (rxe_resp.c, read_reply with
//! `rdatm_res_state_replay`). The requester must accept both; found by tests/interop
//! against Linux 6.1 (a 128 KiB READ stalled the queue for good).
use super::*;
use crate::wire::{Opcode, Packet};

/// A's READ of `len` bytes from B, with the READ Response packet at message index
/// `drop_idx` lost once and B's replayed responses rewritten to rxe's opcodes.
fn read_with_rxe_replay(len: usize, drop_idx: u32) {
    let o = Opts::default();
    let first_psn = o.psn_a;
    let mut n = Net::new(o);
    let (src, ks) = n.mr(n.b.pd, len, ALL, pattern(7));
    let (dst, kd) = n.mr(n.a.pd, len, ALL, |_| 0);
    n.a.qp
        .post_send(&send_wr(
            1,
            SendOp::RdmaRead {
                remote_addr: ks.addr,
                rkey: ks.rkey,
            },
            &[sge(&kd, 0, len as u32)],
        ))
        .unwrap();
    let npkts = len.div_ceil(1024) as u32;
    let mut dropped = false;
    let mut rewritten = 0;
    for _round in 0..20 {
        loop {
            let mut moved = false;
            let mut env = RcEnv {
                keys: &n.keys,
                srq: None,
            };
            while let Some(tx) = n.a.qp.poll_transmit(n.now, &mut env) {
                moved = true;
                let (h, k) = tx.hdr.to_bytes();
                let mut bytes = h[..k].to_vec();
                bytes.extend(tx.payload.to_vec());
                bytes.extend([0u8; 4]);
                let pkt = parse(&bytes).unwrap();
                let mut env_b = RcEnv {
                    keys: &n.keys,
                    srq: None,
                };
                n.b.qp.handle_packet(n.now, &pkt, &mut env_b);
            }
            let mut env = RcEnv {
                keys: &n.keys,
                srq: None,
            };
            while let Some(tx) = n.b.qp.poll_transmit(n.now, &mut env) {
                moved = true;
                let mut hdr = tx.hdr;
                let i = hdr.bth.psn.wrapping_sub(first_psn) & 0x00FF_FFFF;
                if i == drop_idx && !dropped {
                    dropped = true;
                    continue;
                }
                // rxe: a replay keeps the message's positions.
                if i > 0 {
                    let op = match hdr.bth.opcode {
                        Opcode::RcRdmaReadResponseFirst => Some(Opcode::RcRdmaReadResponseMiddle),
                        Opcode::RcRdmaReadResponseOnly => Some(Opcode::RcRdmaReadResponseLast),
                        _ => None,
                    };
                    if let Some(op) = op {
                        hdr.bth.opcode = op;
                        if op == Opcode::RcRdmaReadResponseMiddle {
                            hdr.aeth = None;
                        }
                        rewritten += 1;
                    }
                }
                let (h, k) = hdr.to_bytes();
                let mut bytes = h[..k].to_vec();
                bytes.extend(tx.payload.to_vec());
                bytes.extend([0u8; 4]);
                let pkt: Packet = parse(&bytes).unwrap();
                let mut env_a = RcEnv {
                    keys: &n.keys,
                    srq: None,
                };
                n.a.qp.handle_packet(n.now, &pkt, &mut env_a);
            }
            n.collect();
            if !moved {
                break;
            }
        }
        if !n.a.send_wcs().is_empty() {
            break;
        }
        let Some(t) = n.a.qp.poll_timeout() else {
            break;
        };
        n.now = n.now.max(t);
        let mut env = RcEnv {
            keys: &n.keys,
            srq: None,
        };
        n.a.qp.handle_timeout(n.now, &mut env);
    }
    assert!(dropped, "the READ had no packet {drop_idx} of {npkts}");
    assert!(rewritten > 0, "no replay was rewritten to rxe's opcodes");
    let wcs = n.a.send_wcs();
    assert_eq!(wcs.len(), 1);
    assert_eq!(wcs[0].status, WcStatus::Success);
    assert_eq!(bytes(&dst), bytes(&src));
}

#[test]
fn read_replayed_from_the_middle_with_middle_opcodes_completes() {
    // 10 packets; the 4th is lost, the replay starts with READ Response Middle.
    read_with_rxe_replay(10_000, 3);
}

#[test]
fn read_replay_of_the_last_packet_as_last_completes() {
    // The replay is one packet: rxe sends Last where a fresh request would get Only.
    read_with_rxe_replay(10_000, 9);
}
