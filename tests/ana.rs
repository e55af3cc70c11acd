//! ANA end to end (issue 16 item 4): our host library against our target on two ports
//! of one address, real sockets and a real file. Flipping a group's state on one port
//! through `TargetHandle::set_ana_state` completes a held Asynchronous Event Request
//! with the ANA change notice at once, the port's I/O gets the ANA path status, its
//! ANA log reports the new state, and the other port serves on.
mod common;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use common::*;
use nvme::ana::{AnaLog, AnaState, ANA_CHANGE_AEN_DW0};
use nvme::features::AEC_ANA_CHANGE;
use nvme::status::{PathStatus, Status};
use nvme::{FeatureId, IdentifyCns, LogPageId, Sqe};
use nvmf_initiator::capsule::DataDir;
use nvmf_initiator::queue::QueueCompletion;
use nvmf_initiator::{HostError, SyncHost};
use nvmf_target::config::{AnaGroupConfig, AnaStateConfig, ListenAddr};

const PORT2: u16 = 4421;

fn ana_log(host: &mut SyncHost) -> AnaLog {
    let sqe = Sqe::get_log_page(0, LogPageId::AnaLog, 1023, 0).with_nsid(u32::MAX);
    let (_, data) = host
        .controller()
        .admin_command(sqe, DataDir::ControllerToHost { len: 4096 }, |_| {})
        .expect("ANA log");
    AnaLog::decode(&data).expect("a well-formed ANA log")
}

fn read(host: &mut SyncHost) -> Result<nvme::Cqe, HostError> {
    let q = &mut host.io_queues()[0];
    run(
        q,
        Sqe::read(0, 1, 0, 7, false),
        DataDir::ControllerToHost { len: 4096 },
        &[],
    )
    .1
}

#[test]
fn ana_state_flip_reaches_io_the_log_and_the_aer() {
    let t = start_target_with(180, 1 << 20, |c| {
        c.listen[0].ana_groups = vec![AnaGroupConfig {
            grpid: 1,
            state: AnaStateConfig::Optimized,
        }];
        let mut second = ListenAddr::new(ip(180), PORT2);
        second.ana_groups = vec![AnaGroupConfig {
            grpid: 1,
            state: AnaStateConfig::NonOptimized,
        }];
        c.listen.push(second);
    });
    let mut a = connect(&t, 181, 1, 16);
    let mut opts = host_options(&t, 182, 1, 16);
    opts.traddr = SocketAddr::new(ip(180), PORT2);
    let mut b = SyncHost::connect(&opts).expect("host connects to port 2");

    // Identify: CMIC 0Bh, ANACAP 1Fh, ANAGRPMAX 128; namespace 1 in group 1.
    let (_, id) = a
        .controller()
        .admin_command(
            Sqe::identify(0, IdentifyCns::Controller, 0, 0),
            DataDir::ControllerToHost { len: 4096 },
            |_| {},
        )
        .unwrap();
    assert_eq!((id[76], id[343], id[344]), (0x0B, 0x1F, 128));
    let (_, idns) = a
        .controller()
        .admin_command(
            Sqe::identify(0, IdentifyCns::Namespace, 1, 0),
            DataDir::ControllerToHost { len: 4096 },
            |_| {},
        )
        .unwrap();
    assert_eq!(&idns[92..96], &[1, 0, 0, 0], "ANAGRPID 1");

    // Each port's log: its own state.
    assert_eq!(ana_log(&mut a).state_of_nsid(1), Some(AnaState::Optimized));
    assert_eq!(
        ana_log(&mut b).state_of_nsid(1),
        Some(AnaState::NonOptimized)
    );
    assert!(read(&mut a).is_ok() && read(&mut b).is_ok());

    // Host A enables ANA Change Notices and leaves an AER with the controller.
    a.controller()
        .admin_command(
            Sqe::set_features(0, FeatureId::AsyncEventConfiguration, AEC_ANA_CHANGE),
            DataDir::None,
            |_| {},
        )
        .unwrap();
    let admin = a.controller().admin_queue_mut();
    let aer = admin
        .submit(Sqe::async_event_request(0), DataDir::None, None)
        .map_err(|e| e.error)
        .expect("AER submitted");

    // Port 1 (PORTID 1) loses group 1; port 2 becomes optimized.
    let log_before = ana_log(&mut b).chgcnt;
    assert_eq!(
        t.target.set_ana_state(1, 1, AnaState::Inaccessible),
        Ok(true)
    );
    assert_eq!(
        t.target.set_ana_state(1, 1, AnaState::Inaccessible),
        Ok(false)
    );
    assert_eq!(t.target.set_ana_state(2, 1, AnaState::Optimized), Ok(true));
    assert!(t.target.set_ana_state(3, 1, AnaState::Optimized).is_err());

    // The held AER completes with the ANA change notice, no other admin command sent.
    let admin = a.controller().admin_queue_mut();
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut got: Vec<QueueCompletion> = Vec::new();
    let dw0 = loop {
        assert!(Instant::now() < deadline, "the AER was not completed");
        admin.poll(&mut got);
        if let Some(c) = got.iter().find(|c| c.cid == aer) {
            break c.result.as_ref().expect("AER succeeds").dw0();
        }
        admin.wait(Duration::from_millis(1));
    };
    assert_eq!(dw0, ANA_CHANGE_AEN_DW0);

    // Port 1: I/O gets Asymmetric Access Inaccessible (SCT 3h, SC 02h) without DNR;
    // its log says inaccessible; admin commands still run there.
    match read(&mut a) {
        Err(HostError::Nvme { status, .. }) => {
            assert_eq!(status, Status::path(PathStatus::AnaInaccessible));
            assert!(
                !status.dnr,
                "a multipath host must be free to retry elsewhere"
            );
        }
        other => panic!("expected the ANA status, got {other:?}"),
    }
    let log = ana_log(&mut a);
    assert_eq!(log.state_of_nsid(1), Some(AnaState::Inaccessible));
    assert!(log.chgcnt > log_before);
    // Port 2 serves, now optimized.
    assert!(read(&mut b).is_ok());
    assert_eq!(ana_log(&mut b).state_of_nsid(1), Some(AnaState::Optimized));

    // Change (transition) and persistent loss answer their own statuses; back to
    // optimized, I/O runs again.
    for (state, status) in [
        (AnaState::Change, PathStatus::AnaTransition),
        (AnaState::PersistentLoss, PathStatus::AnaPersistentLoss),
    ] {
        t.target.set_ana_state(1, 1, state).unwrap();
        match read(&mut a) {
            Err(HostError::Nvme { status: s, .. }) => assert_eq!(s, Status::path(status)),
            other => panic!("expected {status:?}, got {other:?}"),
        }
    }
    t.target.set_ana_state(1, 1, AnaState::Optimized).unwrap();
    assert!(read(&mut a).is_ok());
    a.disconnect().unwrap();
    b.disconnect().unwrap();
}
