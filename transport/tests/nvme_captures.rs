//! Sweeps the Linux reference captures with the `nvme` crate (`testdata/captures/` of this repository,
//! see its README): every NVMe/RDMA command capsule, response capsule and
//! NVMe/RDMA CM private data block in them must decode with this crate's public API.
//!
//! The packets come from the test support every capture test shares
//! (`src/test_captures.rs`: the `pcap-file` crate's frames, the transport's link-frame
//! parser) and [`transport::wire::parse`]. A missing capture fails the test.

use std::collections::HashMap;

use nvme::fabrics::{ConnectCommand, PropertyGetCommand, PropertySetCommand};
use nvme::{
    AdminOpcode, CommandSpecificStatus, Cqe, FabricsCommandType, RdmaCmAccept, RdmaCmRequest, Sgl,
    Sqe, Status, FABRICS_OPCODE, PSDT_SGL_MPTR_CONTIG,
};
use zerocopy::FromBytes;

#[path = "../src/test_captures.rs"]
mod test_captures;

struct Packet {
    opcode: u8,
    dest_qp: u32,
    payload: Vec<u8>,
}

/// The RoCEv2 packets of reference capture `name` that parse.
fn roce_packets(name: &str) -> Vec<Packet> {
    let pcap = test_captures::Capture::open(name);
    pcap.roce()
        .filter_map(|(_, udp)| {
            let pkt = transport::wire::parse(udp.payload).ok()?;
            Some(Packet {
                opcode: pkt.hdr.bth.opcode.into(),
                dest_qp: pkt.hdr.bth.dest_qp,
                payload: pkt.payload.to_vec(),
            })
        })
        .collect()
}

#[derive(Default, Debug, PartialEq)]
struct Counts {
    sqes: usize,
    cqes: usize,
    cm_requests: usize,
    cm_accepts: usize,
    keep_alives: usize,
    failed: Vec<Status>,
}

fn sweep(name: &str) -> Counts {
    let mut c = Counts::default();
    // Outstanding CIDs per destination QP of the command.
    let mut outstanding: HashMap<u16, usize> = HashMap::new();
    let mut last_hsqsize = None;
    for p in roce_packets(name) {
        let is_capsule = (p.opcode == 4 && p.payload.len() == 64) || p.opcode == 0;
        if is_capsule {
            let sqe = Sqe::read_from_prefix(&p.payload).unwrap().0;
            assert_eq!(sqe.psdt(), PSDT_SGL_MPTR_CONTIG, "{name}: PSDT");
            let sgl = sqe.sgl().decode().unwrap_or_else(|e| panic!("{name}: {e}"));
            if let Sgl::DataBlockOffset { offset, len } = sgl {
                assert_eq!(offset, 0);
                assert!(len > 0 && len <= 4096);
            }
            if sqe.opcode() == FABRICS_OPCODE {
                let t = FabricsCommandType::try_from(sqe.fctype().unwrap()).unwrap();
                match t {
                    FabricsCommandType::Connect => {
                        let cc = ConnectCommand::from_sqe(&sqe).unwrap();
                        assert_eq!(cc.recfmt(), 0);
                        assert!(matches!(cc.sqsize(), 31 | 127), "{name}: SQSIZE");
                        assert!(matches!(cc.kato(), 0 | 5000), "{name}: KATO");
                    }
                    FabricsCommandType::PropertyGet => {
                        let g = PropertyGetCommand::from_sqe(&sqe).unwrap();
                        assert!(g.size().is_ok() && g.property().is_some());
                    }
                    FabricsCommandType::PropertySet => {
                        let s = PropertySetCommand::from_sqe(&sqe).unwrap();
                        assert!(s.size().is_ok() && s.property().is_some());
                    }
                    other => panic!("{name}: unexpected fabrics command {other}"),
                }
            } else if p.dest_qp == 0x13 && sqe.opcode() == AdminOpcode::KeepAlive.value() {
                // Keep Alive on the admin queue (QPN 13h in the errors run).
                assert_eq!(sqe.sgl().identifier(), 0x40);
                c.keep_alives += 1;
            }
            *outstanding.entry(sqe.cid()).or_default() += 1;
            c.sqes += 1;
        } else if matches!(p.opcode, 4 | 23) && p.payload.len() == 16 {
            let cqe = Cqe::read_from_bytes(&p.payload).unwrap();
            assert!(!cqe.phase(), "{name}: fabrics CQEs carry phase 0");
            let n = outstanding.get_mut(&cqe.cid()).filter(|n| **n > 0);
            *n.unwrap_or_else(|| panic!("{name}: CQE for unknown CID {:#x}", cqe.cid())) -= 1;
            if !cqe.status().is_success() {
                c.failed.push(cqe.status());
            }
            c.cqes += 1;
        } else if p.opcode == 100 && p.payload.len() == 256 {
            // CM MAD: attribute ID at MAD bytes 16..18.
            match u16::from_be_bytes([p.payload[16], p.payload[17]]) {
                // REQ: private data at MAD byte 0xA4, after RDMA CM's 36-byte
                // IP header comes the NVMe/RDMA request.
                0x0010 => {
                    let req = RdmaCmRequest::parse(&p.payload[0xA4 + 36..]).unwrap();
                    assert_eq!(req.hrqsize(), req.hsqsize() + 1);
                    last_hsqsize = Some(req.hsqsize());
                    c.cm_requests += 1;
                }
                // REP: private data at MAD byte 0x3C.
                0x0013 => {
                    let acc = RdmaCmAccept::parse(&p.payload[0x3C..]).unwrap();
                    assert_eq!(Some(acc.crqsize()), last_hsqsize.map(|h| h + 1));
                    c.cm_accepts += 1;
                }
                _ => {}
            }
        }
    }
    // Commands never answered in the window: Asynchronous Event Requests.
    let open: usize = outstanding.values().sum();
    assert_eq!(c.sqes - c.cqes, open);
    c
}

#[test]
fn linux_nvme_rdma_rxe() {
    let c = sweep("linux-nvme-rdma-rxe.pcap");
    assert_eq!(
        (c.sqes, c.cqes, c.cm_requests, c.cm_accepts),
        (61, 59, 3, 3)
    );
    assert!(c.failed.is_empty(), "{:?}", c.failed);
}

#[test]
fn linux_nvme_rdma_rxe_ipv6() {
    let c = sweep("linux-nvme-rdma-rxe-ipv6.pcap");
    assert_eq!(
        (c.sqes, c.cqes, c.cm_requests, c.cm_accepts),
        (61, 59, 3, 3)
    );
    assert!(c.failed.is_empty(), "{:?}", c.failed);
}

#[test]
fn linux_nvme_rdma_errors() {
    let c = sweep("linux-nvme-rdma-errors.pcap");
    assert_eq!(
        (c.sqes, c.cqes, c.cm_requests, c.cm_accepts),
        (41, 40, 4, 4)
    );
    assert_eq!(
        c.failed,
        vec![
            Status::command_specific(CommandSpecificStatus::ConnectInvalidParameters).with_dnr(),
            Status::command_specific(CommandSpecificStatus::ConnectInvalidHost).with_dnr(),
        ]
    );
    // README: 10 Keep Alive commands on the admin queue (frames 204-244).
    assert_eq!(c.keep_alives, 10);
}
