//! Replays every committed fuzz corpus file (`fuzz/corpus/<target>/`) through the fuzz
//! harnesses under the stable toolchain, so `cargo test` guards against regressions
//! of anything the fuzzers found (crash inputs are added to the corpus).
//!
//! The harness modules are the very files the cargo-fuzz targets use (`fuzz/src/`),
//! included here by path: they only depend on `std`, `nvme`, `transport` and
//! `nvmf-target`.
use std::path::{Path, PathBuf};

#[path = "../fuzz/src/input.rs"]
mod input;

#[path = "../fuzz/src/packet_parse.rs"]
mod packet_parse;

#[path = "../fuzz/src/rc_responder.rs"]
mod rc_responder;

#[path = "../fuzz/src/capsule.rs"]
mod capsule;

fn corpus_dir(target: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fuzz")
        .join("corpus")
        .join(target)
}

/// Runs `run` over every file of the target's corpus; returns how many.
fn replay(target: &str, run: fn(&[u8])) -> usize {
    let dir = corpus_dir(target);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("corpus {}: {e}", dir.display()))
        .map(|e| e.expect("corpus entry").path())
        .filter(|p| p.is_file())
        .collect();
    files.sort();
    for f in &files {
        let data = std::fs::read(f).unwrap_or_else(|e| panic!("{}: {e}", f.display()));
        let r = std::panic::catch_unwind(|| run(&data));
        assert!(r.is_ok(), "{target}: corpus file {} fails", f.display());
    }
    files.len()
}

#[test]
fn packet_parse_corpus() {
    assert!(
        replay("packet_parse", packet_parse::run) > 0,
        "empty corpus"
    );
}

#[test]
fn rc_responder_corpus() {
    assert!(
        replay("rc_responder", rc_responder::run) > 0,
        "empty corpus"
    );
}

#[test]
fn capsule_corpus() {
    assert!(replay("capsule", capsule::run) > 0, "empty corpus");
}

/// The harnesses hold on inputs of every small length (the decoders' edges).
#[test]
fn short_inputs() {
    for len in 0..=64usize {
        for fill in [0x00u8, 0x01, 0x7F, 0xFF] {
            let data = vec![fill; len];
            packet_parse::run(&data);
            rc_responder::run(&data);
            capsule::run(&data);
        }
    }
}

/// The first crash `rc_responder` found: a SEND First took a receive WQE, an invalid
/// next request (another SEND First) sent the QP to Error, and the WQE vanished
/// without a completion. Every WQE must complete (IBTA Vol 1 §10.3.1): the one in
/// progress with the NAK's error status, as rxe.
#[test]
fn fatal_request_completes_the_receive_in_progress() {
    use std::net::{IpAddr, Ipv4Addr};
    use transport::rc::{CompletionQueueKind, KeyTable, MrMemory, RcConfig, RcEnv, RcQp};
    use transport::time::Timestamp;
    use transport::verbs::{
        AccessFlags, AhAttr, Mtu, QpAttr, QpCap, QpState, RecvWr, SgList, Sge, WcStatus,
    };
    use transport::wire::{parse, Bth, Opcode, PacketHeaders};

    let keys = KeyTable::new();
    let pd = keys.alloc_pd();
    let mem = MrMemory::new(4096).expect("memory");
    let mr = keys
        .reg_mr(pd, &mem, 0, 4096, AccessFlags::LOCAL_WRITE)
        .expect("MR");
    let mut qp = RcQp::new(0x12, pd, QpCap::default(), false, RcConfig::default());
    let ah = AhAttr {
        dest: IpAddr::V4(Ipv4Addr::LOCALHOST),
        flow_label: 0,
        hop_limit: 64,
        traffic_class: 0,
    };
    for attr in [
        QpAttr {
            qp_state: Some(QpState::Init),
            ..Default::default()
        },
        QpAttr {
            qp_state: Some(QpState::Rtr),
            dest_qp_num: Some(0x11),
            rq_psn: Some(0x1000),
            path_mtu: Some(Mtu::Mtu256),
            ah_attr: Some(ah),
            ..Default::default()
        },
        QpAttr {
            qp_state: Some(QpState::Rts),
            sq_psn: Some(0x2000),
            ..Default::default()
        },
    ] {
        qp.modify(&attr).expect("modify");
    }
    qp.post_recv(&RecvWr {
        wr_id: 7,
        sg_list: SgList::one(Sge {
            addr: mr.addr,
            length: 4096,
            lkey: mr.lkey,
        }),
    })
    .expect("post_recv");
    let send_first = |psn: u32| {
        let mut bytes = vec![0u8; 12];
        PacketHeaders::new(Bth::new(Opcode::RcSendFirst, 0x12, psn, false)).write(&mut bytes);
        bytes.extend_from_slice(&[0xAB; 256]);
        bytes.extend_from_slice(&[0; 4]);
        bytes
    };
    let mut env = RcEnv {
        keys: &keys,
        srq: None,
    };
    let (first, second) = (send_first(0x1000), send_first(0x1001));
    let now = Timestamp(1);
    qp.handle_packet(now, &parse(&first).expect("packet"), &mut env);
    assert_eq!(qp.state(), QpState::Rts);
    qp.handle_packet(now, &parse(&second).expect("packet"), &mut env);
    assert_eq!(qp.state(), QpState::Error);
    let wcs: Vec<_> = std::iter::from_fn(|| qp.poll_completion()).collect();
    assert_eq!(wcs.len(), 1, "{wcs:?}");
    assert_eq!(wcs[0].queue, CompletionQueueKind::Recv);
    assert_eq!(
        (wcs[0].wc.wr_id, wcs[0].wc.status),
        (7, WcStatus::RemInvReqErr)
    );
}
