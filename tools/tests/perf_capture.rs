//! perftest's out-of-band exchange as Linux's perftest 4.5 ran it between two QEMU
//! guests over rxe (`testdata/captures/linux-perftest-rxe.pcap`: ib_write_bw,
//! ib_read_bw, ib_send_lat): every QP record decodes, re-encodes byte for byte, names
//! the QP and PSN the RoCE packets then carry, and the number of record exchanges
//! before and after the data phase is what `rdma-perf`'s plan for the test does.
use std::collections::BTreeMap;

use rdma_tools::perf::kind::{Step, TestKind};
use rdma_tools::perf::oob::{self, BwReport, QpRecord};
#[path = "../../transport/src/test_captures.rs"]
mod test_captures;
use test_captures::{Capture, CapturedFrame};

/// A TCP segment's payload with its source and destination ports.
struct Seg {
    frame: usize,
    sport: u16,
    dport: u16,
    payload: Vec<u8>,
}

fn tcp(f: &CapturedFrame) -> Option<Seg> {
    let ip = f.ip_packet()?;
    if ip[0] >> 4 != 4 || ip[9] != 6 {
        return None;
    }
    let ihl = usize::from(ip[0] & 0x0F) * 4;
    let total = usize::from(u16::from_be_bytes([ip[2], ip[3]]));
    let t = &ip[ihl..total];
    let off = usize::from(t[12] >> 4) * 4;
    Some(Seg {
        frame: f.number,
        sport: u16::from_be_bytes([t[0], t[1]]),
        dport: u16::from_be_bytes([t[2], t[3]]),
        payload: t[off..].to_vec(),
    })
}

/// The record exchanges `rdma-perf` does before the data phase (one QP, one size).
fn ours_before(kind: TestKind) -> usize {
    let setup = kind
        .setup_plan()
        .iter()
        .filter(|s| matches!(s, Step::AllQps | Step::FirstQp))
        .count();
    // SEND tests: one more after the receives are posted, per size.
    setup + usize::from(matches!(kind, TestKind::send_bw | TestKind::send_lat))
}

#[test]
fn perftest_exchange_from_the_capture() {
    let pcap = Capture::open("linux-perftest-rxe.pcap");
    let frames = &pcap.frames;
    let segs: Vec<Seg> = frames
        .iter()
        .filter_map(tcp)
        .filter(|s| !s.payload.is_empty())
        .collect();
    // The client's connections, by source port, in order: write_bw, read_bw, send_lat.
    let mut conns: BTreeMap<u16, Vec<&Seg>> = BTreeMap::new();
    for s in &segs {
        if s.dport == 18515 {
            conns.entry(s.sport).or_default().push(s);
        }
    }
    let kinds = [TestKind::write_bw, TestKind::read_bw, TestKind::send_lat];
    assert_eq!(conns.len(), kinds.len());
    let roce: Vec<(usize, u32, u32)> = frames
        .iter()
        .filter_map(|f| {
            let u = f.roce()?;
            let p = u.payload;
            let qpn = u32::from_be_bytes([0, p[5], p[6], p[7]]);
            let psn = u32::from_be_bytes([0, p[9], p[10], p[11]]);
            Some((f.number, qpn, psn))
        })
        .collect();
    for ((sport, msgs), kind) in conns.iter().zip(kinds) {
        // Version, cycle buffer, cache line, MTU: as rdma-perf sends them.
        assert_eq!(&msgs[0].payload[..], &oob::encode_version()[..], "{kind:?}");
        assert_eq!(
            oob::decode_version(msgs[0].payload[..16].try_into().unwrap()).unwrap(),
            6.06
        );
        assert_eq!(msgs[1].payload, oob::CYCLE_BUFFER.to_be_bytes());
        assert_eq!(msgs[2].payload, oob::CACHE_LINE.to_be_bytes());
        assert_eq!(msgs[3].payload, oob::encode_mtu(3));
        let first_roce = roce
            .iter()
            .find(|r| r.0 > msgs[3].frame)
            .map(|r| r.0)
            .unwrap();
        let records: Vec<&&Seg> = msgs
            .iter()
            .filter(|m| m.payload.len() == oob::RECORD_LEN)
            .collect();
        let before = records.iter().filter(|m| m.frame < first_roce).count();
        assert_eq!(
            before,
            ours_before(kind),
            "{kind:?}: records before the data"
        );
        let after: Vec<usize> = msgs
            .iter()
            .filter(|m| m.frame > first_roce)
            .map(|m| m.payload.len())
            .collect();
        let want: Vec<usize> = if kind.is_bw() {
            vec![108, 8, 8, 8, 8, 8, 108, 5]
        } else {
            vec![108, 5]
        };
        assert_eq!(
            after, want,
            "{kind:?}: the client's messages after the data"
        );
        for m in &records {
            let r = QpRecord::decode(&m.payload).unwrap();
            assert_eq!(
                &r.encode()[..],
                &m.payload[..],
                "{kind:?} frame {}",
                m.frame
            );
            assert_eq!(r.gid_ip().to_string(), "192.168.77.11");
            assert_eq!(r.lid, 0);
        }
        let client = QpRecord::decode(&records[0].payload).unwrap();
        // The server's answer to the first record.
        let server_seg = segs
            .iter()
            .find(|s| s.sport == 18515 && s.dport == *sport && s.payload.len() == oob::RECORD_LEN)
            .unwrap();
        let server = QpRecord::decode(&server_seg.payload).unwrap();
        assert_eq!(server.gid_ip().to_string(), "192.168.77.10");
        // The client's first RoCE packet goes to the server's QPN with the client's PSN.
        let (_, qpn, psn) = roce.iter().find(|r| r.0 >= first_roce).unwrap();
        assert_eq!((*qpn, *psn), (server.qpn, client.psn), "{kind:?}");
        match kind {
            TestKind::write_bw => {
                assert_eq!(
                    (client.qpn, client.psn, client.rkey),
                    (0x11, 0x43cd86, 0x294)
                );
                assert_eq!(server.vaddr, 0x7f5de0d21000);
                assert_eq!(client.out_reads, 1);
            }
            TestKind::read_bw => assert_eq!(client.out_reads, 0x80),
            _ => assert_eq!(client.rkey, 0),
        }
        if kind.is_bw() {
            let rep: Vec<[u8; 8]> = msgs
                .iter()
                .filter(|m| m.frame > first_roce && m.payload.len() == 8)
                .map(|m| m.payload[..].try_into().unwrap())
                .collect();
            let r = BwReport::decode(&rep.try_into().unwrap());
            assert_eq!((r.size, r.iters), (65536, 5), "{kind:?}");
            assert!(r.bw_avg > 0.0 && r.bw_peak >= r.bw_avg && r.msg_rate > 0.0);
        }
        assert_eq!(&msgs.last().unwrap().payload[..], &oob::DONE[..]);
    }
}
