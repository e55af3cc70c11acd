//! NVMe in-band authentication (DH-HMAC-CHAP, NVMe Base 2.x §8.13) between our host
//! library and our target over real sockets (loopback UDP, the soft RoCE provider):
//! the right secret connects every queue and I/O runs; a wrong one is refused at once
//! with the controller's AUTH_Failure1 as a typed error; no secret is refused as
//! "authentication required"; bidirectional authentication with a DH group succeeds,
//! and a wrong controller secret is caught by the host; an unauthenticated queue
//! answers every non-Fabrics command with Authentication Required.
mod common;

use std::time::{Duration, Instant};

use common::{addr, host_options, ip, run, start_target_with, test_pool, TestTarget};
use dhchap::{FailureExplanation, HostAuthError, Secret};
use nvme::status::CommandSpecificStatus;
use nvme::{IdentifyCns, Sqe};
use nvmf_initiator::controller::{fabrics_connect, ControllerOptions, CNTLID_DYNAMIC};
use nvmf_initiator::{DataDir, HostError, NvmeRdmaQueue, QueueConfig, SyncHost};
use nvmf_target::config::HostKeyConfig;
use transport::soft::{CmAgent, DeviceConfig, SoftDevice};

const HOSTNQN: &str = "nqn.2014-08.org.nvmexpress:uuid:00000000-0000-0000-0000-0000000000a1";
/// The keys of the Linux 6.12 capture linux-nvme-rdma-dhchap.pcap (listed in its README).
const H1_KEY: &str = "DHHC-1:00:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh+KfiaR:";
const H1_WRONG_KEY: &str = "DHHC-1:00:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHv/ynCwx:";
const H2_KEY: &str =
    "DHHC-1:02:QEFCQ0RFRkdISUpLTE1OT1BRUlNUVVZXWFlaW1xdXl9gYWJjZGVmZ2hpamtsbW5voBXMjQ==:";
const CTRL_KEY: &str = "DHHC-1:03:gIGCg4SFhoeIiYqLjI2Oj5CRkpOUlZaXmJmam5ydnp+goaKjpKWmp6ipqqusra6vsLGys7S1tre4ubq7vL2+v6rfDIU=:";
const WRONG_CTRL_KEY: &str = "DHHC-1:03:gIGCg4SFhoeIiYqLjI2Oj5CRkpOUlZaXmJmam5ydnp+goaKjpKWmp6ipqqusra6vsLGys7S1tre4ubq7vL2+ALdx0t4=:";

fn secret(s: &str) -> Secret {
    s.parse().expect("a valid DHHC-1 secret")
}

/// A target on 127.0.0.`last` whose host HOSTNQN must authenticate with H1's key, or
/// (`bidirectional`) with H2's key and the controller key, SHA-384 and ffdhe2048 only.
fn target(last: u8, bidirectional: bool) -> TestTarget {
    start_target_with(last, 16 << 20, |cfg| {
        let key = if bidirectional {
            HostKeyConfig {
                hostnqn: HOSTNQN.into(),
                dhchap_key: H2_KEY.into(),
                dhchap_ctrl_key: Some(CTRL_KEY.into()),
                dhchap_hash: Some(vec!["sha384".into()]),
                dhchap_dhgroup: Some(vec!["ffdhe2048".into()]),
            }
        } else {
            HostKeyConfig {
                hostnqn: HOSTNQN.into(),
                dhchap_key: H1_KEY.into(),
                dhchap_ctrl_key: None,
                dhchap_hash: None,
                dhchap_dhgroup: None,
            }
        };
        cfg.subsystems[0].host_keys = vec![key];
    })
}

fn options(
    t: &TestTarget,
    local: u8,
    key: Option<&str>,
    ctrl: Option<&str>,
) -> nvmf_initiator::HostOptions {
    let mut o = host_options(t, local, 2, 16);
    o.hostnqn = HOSTNQN.into();
    o.kato_ms = 0;
    o.dhchap_secret = key.map(secret);
    o.dhchap_ctrl_secret = ctrl.map(secret);
    o
}

/// A write and a read back on every I/O queue.
fn io_works(host: &mut SyncHost) {
    for (i, q) in host.io_queues().iter_mut().enumerate() {
        let data = common::pattern(i as u64 * 4096, 4096, 0xD1);
        let (_, r) = run(
            q,
            Sqe::write(0, 1, i as u64 * 8, 7, false),
            DataDir::HostToController { len: 4096 },
            &data,
        );
        assert!(r.expect("write").status().is_success());
        let (buf, r) = run(
            q,
            Sqe::read(0, 1, i as u64 * 8, 7, false),
            DataDir::ControllerToHost { len: 4096 },
            &[],
        );
        assert!(r.expect("read").status().is_success());
        assert_eq!(&buf.expect("data")[..4096], &data[..]);
    }
}

#[test]
fn the_right_secret_authenticates_every_queue_and_a_wrong_one_is_refused_at_once() {
    let t = target(150, false);
    // Right: admin and both I/O queues authenticate; I/O runs.
    let mut host = SyncHost::connect(&options(&t, 151, Some(H1_KEY), None)).expect("connects");
    assert_eq!(host.io_queues().len(), 2);
    io_works(&mut host);
    host.disconnect().expect("disconnect");
    // Wrong: the controller's AUTH_Failure1 (authentication failed) comes back as a
    // typed error within a second, not after a command timeout.
    let started = Instant::now();
    match SyncHost::connect(&options(&t, 152, Some(H1_WRONG_KEY), None)) {
        Err(HostError::Authentication {
            qid: 0,
            source:
                HostAuthError::Refused {
                    explanation: FailureExplanation::Failed,
                },
        }) => {}
        other => panic!("expected Authentication Refused, got {:?}", other.err()),
    }
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "refused in {:?}",
        started.elapsed()
    );
    let Err(e) = SyncHost::connect(&options(&t, 153, Some(H1_WRONG_KEY), None)) else {
        panic!("a wrong secret connected");
    };
    assert!(e.to_string().contains("host secret does not match"), "{e}");
    // No secret: the target asks (AUTHREQ) and the host says what is missing.
    match SyncHost::connect(&options(&t, 154, None, None)) {
        Err(HostError::AuthenticationRequired { qid: 0 }) => {}
        other => panic!("expected AuthenticationRequired, got {:?}", other.err()),
    }
    // The target still serves the right secret afterwards, and no controller of the
    // refused hosts is left behind.
    let host = SyncHost::connect(&options(&t, 155, Some(H1_KEY), None)).expect("connects");
    host.disconnect().expect("disconnect");
    let deadline = Instant::now() + Duration::from_secs(5);
    while !t.target.registry().controllers().is_empty() {
        assert!(Instant::now() < deadline, "controllers left behind");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn bidirectional_with_ffdhe2048_and_a_wrong_controller_secret() {
    let t = target(160, true);
    let mut host = SyncHost::connect(&options(&t, 161, Some(H2_KEY), Some(CTRL_KEY)))
        .expect("bidirectional connect");
    io_works(&mut host);
    host.disconnect().expect("disconnect");
    // The host holds a controller secret the target does not prove: the host refuses
    // the controller (and sends its AUTH_Failure2).
    match SyncHost::connect(&options(&t, 162, Some(H2_KEY), Some(WRONG_CTRL_KEY))) {
        Err(HostError::Authentication {
            qid: 0,
            source: HostAuthError::ControllerNotAuthenticated,
        }) => {}
        other => panic!("expected ControllerNotAuthenticated, got {:?}", other.err()),
    }
    // Unidirectional against the same target: the host key alone suffices.
    let host = SyncHost::connect(&options(&t, 163, Some(H2_KEY), None)).expect("connects");
    host.disconnect().expect("disconnect");
}

#[test]
fn an_unauthenticated_queue_runs_fabrics_commands_only() {
    let t = target(170, false);
    let dev = SoftDevice::open(DeviceConfig::new(ip(171))).expect("host device");
    let cm = CmAgent::start(&dev).expect("CM agent");
    let opts = ControllerOptions::from(&options(&t, 171, None, None));
    let (pd, pool) = test_pool(&dev);
    let mut aq = NvmeRdmaQueue::connect(
        dev.open_context(0).unwrap(),
        &cm,
        QueueConfig::new(0, 32, 4096, addr(&t)),
        pd,
        &pool,
    )
    .unwrap();
    // The Connect succeeds with AUTHREQ; the host without a secret stops there.
    match fabrics_connect(&mut aq, &opts, CNTLID_DYNAMIC, 0) {
        Err(HostError::AuthenticationRequired { qid: 0 }) => {}
        other => panic!("expected AuthenticationRequired, got {other:?}"),
    }
    // Identify: Authentication Required (SCT 1h, SC 91h), DNR, as nvmet answers.
    let (_, r) = run(
        &mut aq,
        Sqe::identify(0, IdentifyCns::Controller, 0, 0),
        DataDir::ControllerToHost { len: 4096 },
        &[],
    );
    match r {
        Err(HostError::Nvme { status, .. }) => {
            assert_eq!(
                status.as_command_specific(),
                Some(CommandSpecificStatus::AuthenticationRequired)
            );
            assert!(status.dnr);
        }
        other => panic!("expected Authentication Required, got {other:?}"),
    }
    // Property Get (a Fabrics command) still runs.
    let (_, r) = run(
        &mut aq,
        Sqe::property_get(0, nvme::Property::Cap),
        DataDir::None,
        &[],
    );
    assert!(r.expect("Property Get").status().is_success());
    aq.disconnect(Duration::from_millis(500));
}
