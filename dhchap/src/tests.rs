//! The two roles driven against each other (every hash and DH group, wrong keys,
//! bidirectional, bad messages answered) and against the Linux 6.12 exchange of
//! `linux-nvme-rdma-dhchap.pcap`.
use std::sync::Arc;

use nvme::auth::{AuthMessage, DhGroupId, FailureExplanation, HashId};
use rand::rngs::StdRng;
use rand::SeedableRng;

use crate::capture::*;
use crate::{
    crypto, ControllerAuth, ControllerPolicy, HostAuth, HostAuthError, HostSecrets, Progress,
    Secret, RECEIVE_LEN,
};

const H1: &str = "nqn.2014-08.org.nvmexpress:uuid:00000000-0000-0000-0000-0000000000a1";
const SUBNQN: &str = "nqn.2026-11.io.example:auth";
const H1_KEY: &str = "DHHC-1:00:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh+KfiaR:";
const H1_WRONG_KEY: &str = "DHHC-1:00:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHv/ynCwx:";
const H2_KEY: &str =
    "DHHC-1:02:QEFCQ0RFRkdISUpLTE1OT1BRUlNUVVZXWFlaW1xdXl9gYWJjZGVmZ2hpamtsbW5voBXMjQ==:";
const CTRL_KEY: &str = "DHHC-1:03:gIGCg4SFhoeIiYqLjI2Oj5CRkpOUlZaXmJmam5ydnp+goaKjpKWmp6ipqqusra6vsLGys7S1tre4ubq7vL2+v6rfDIU=:";

fn hex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

fn secret(s: &str) -> Secret {
    s.parse().unwrap()
}

#[test]
fn the_linux_host_responses_recompute() {
    // Frame 35 (Challenge, SHA-256, null group) and 42 (the Linux host's Reply).
    let AuthMessage::Challenge {
        t_id,
        hash,
        dhgroup,
        seqnum,
        challenge,
        dh_value,
    } = AuthMessage::decode(&hex(FRAME_35)).unwrap()
    else {
        panic!("frame 35 is a Challenge")
    };
    assert_eq!((t_id, hash, dhgroup, dh_value.len()), (0, 1, 0, 0));
    let AuthMessage::Reply {
        response,
        challenge: c2,
        ..
    } = AuthMessage::decode(&hex(FRAME_42)).unwrap()
    else {
        panic!("frame 42 is a Reply")
    };
    assert_eq!(c2, None);
    let key = secret(H1_KEY).transformed(H1);
    let r1 = crypto::host_response(HashId::Sha256, &key, &challenge, seqnum, 0, H1, SUBNQN);
    assert_eq!(r1, response);
    // Our host, given the same Challenge, answers with the same response bytes.
    let mut host = HostAuth::new(HostSecrets::new(secret(H1_KEY), None), H1, SUBNQN, 0);
    let reply = host.on_challenge(&hex(FRAME_35)).unwrap();
    assert_eq!(&reply[16..48], &response[..]);
    assert_eq!(
        &reply[..10],
        &hex(FRAME_42)[..10],
        "type, id, T_ID, HL, CVALID 0"
    );
    // Frame 647: the Reply made with the wrong key verifies with that key only.
    let AuthMessage::Challenge {
        seqnum, challenge, ..
    } = AuthMessage::decode(&hex(FRAME_640)).unwrap()
    else {
        panic!("frame 640 is a Challenge")
    };
    let AuthMessage::Reply { response, .. } = AuthMessage::decode(&hex(FRAME_647)).unwrap() else {
        panic!("frame 647 is a Reply")
    };
    let right = crypto::host_response(HashId::Sha256, &key, &challenge, seqnum, 0, H1, SUBNQN);
    assert_ne!(right, response);
    let wrong = secret(H1_WRONG_KEY).transformed(H1);
    let r = crypto::host_response(HashId::Sha256, &wrong, &challenge, seqnum, 0, H1, SUBNQN);
    assert_eq!(r, response);
}

#[test]
fn the_linux_messages_decode_and_encode_back() {
    for (frame, h) in [
        (27, FRAME_27),
        (35, FRAME_35),
        (42, FRAME_42),
        (50, FRAME_50),
        (313, FRAME_313),
        (320, FRAME_320),
        (328, FRAME_328),
        (335, FRAME_335),
        (617, FRAME_617),
    ] {
        let b = hex(h);
        let m = AuthMessage::decode(&b).unwrap_or_else(|e| panic!("frame {frame}: {e}"));
        assert_eq!(m.encode(), b, "frame {frame}: {}", m.name());
    }
    // Frame 313: ffdhe2048 with SHA-384, a 256-byte DH value; 320: CVALID 1.
    let m = AuthMessage::decode(&hex(FRAME_313)).unwrap();
    assert!(matches!(
        m,
        AuthMessage::Challenge { hash: 2, dhgroup: 1, ref dh_value, .. } if dh_value.len() == 256
    ));
    let m = AuthMessage::decode(&hex(FRAME_320)).unwrap();
    assert!(matches!(
        m,
        AuthMessage::Reply {
            challenge: Some(_),
            ..
        }
    ));
}

/// Runs a whole transaction between `host` and `ctrl` as the transports do; the
/// host's result and the controller's last progress.
fn run(host: &mut HostAuth, ctrl: &mut ControllerAuth) -> (Result<(), HostAuthError>, Progress) {
    let mut last = ctrl.on_send(&host.negotiate());
    let (chal, p) = ctrl.on_receive(RECEIVE_LEN);
    if p != Progress::Pending {
        last = p;
    }
    let reply = match host.on_challenge(&chal) {
        Ok(r) => r,
        Err(e) => {
            if let Some(f2) = host.failure2(&e) {
                last = ctrl.on_send(&f2);
            }
            return (Err(e), last);
        }
    };
    assert_eq!(ctrl.on_send(&reply), Progress::Pending);
    let (s1, p) = ctrl.on_receive(RECEIVE_LEN);
    last = p;
    match host.on_success1(&s1) {
        Ok(Some(s2)) => (Ok(()), ctrl.on_send(&s2)),
        Ok(None) => (Ok(()), last),
        Err(e) => {
            if let Some(f2) = host.failure2(&e) {
                last = ctrl.on_send(&f2);
            }
            (Err(e), last)
        }
    }
}

fn policy(host_key: &str, ctrl_key: Option<&str>) -> ControllerPolicy {
    let mut p = ControllerPolicy::new(secret(host_key));
    p.ctrl_key = ctrl_key.map(secret);
    p
}

fn pair(p: ControllerPolicy, host: HostSecrets, seed: u64) -> (HostAuth, ControllerAuth) {
    let h = HostAuth::with_rng(host, H1, SUBNQN, 7, StdRng::seed_from_u64(seed));
    let c = ControllerAuth::with_rng(Arc::new(p), H1, SUBNQN, StdRng::seed_from_u64(seed + 1));
    (h, c)
}

#[test]
fn every_hash_and_dh_group_both_directions() {
    for (i, &hash) in HashId::ALL.iter().enumerate() {
        for (j, &group) in DhGroupId::ALL.iter().enumerate() {
            let mut p = policy(H2_KEY, Some(CTRL_KEY));
            p.hashes = vec![hash];
            p.dhgroups = vec![group];
            let hs = HostSecrets::new(secret(H2_KEY), Some(secret(CTRL_KEY)));
            let (mut h, mut c) = pair(p, hs, (i * 10 + j) as u64);
            let (r, last) = run(&mut h, &mut c);
            assert_eq!(r, Ok(()), "{hash} {group}");
            assert_eq!(last, Progress::Authenticated, "{hash} {group}");
            assert!(c.is_authenticated());
        }
    }
}

#[test]
fn unidirectional_with_the_defaults() {
    let (mut h, mut c) = pair(
        policy(H1_KEY, None),
        HostSecrets::new(secret(H1_KEY), None),
        1,
    );
    assert_eq!(run(&mut h, &mut c), (Ok(()), Progress::Authenticated));
}

#[test]
fn a_wrong_host_key_gets_failure1() {
    let (mut h, mut c) = pair(
        policy(H1_KEY, None),
        HostSecrets::new(secret(H1_WRONG_KEY), None),
        2,
    );
    let (r, last) = run(&mut h, &mut c);
    assert_eq!(
        r,
        Err(HostAuthError::Refused {
            explanation: FailureExplanation::Failed
        })
    );
    assert!(matches!(last, Progress::Failed(f) if f.explanation == FailureExplanation::Failed));
    assert!(!c.is_authenticated());
    // A new Negotiate starts over, and the right key then succeeds.
    let mut h = HostAuth::new(HostSecrets::new(secret(H1_KEY), None), H1, SUBNQN, 8);
    assert_eq!(run(&mut h, &mut c), (Ok(()), Progress::Authenticated));
}

#[test]
fn a_wrong_controller_key_is_refused_by_the_host_with_failure2() {
    let mut wrong = secret(CTRL_KEY).key().to_vec();
    wrong[63] ^= 0xFF;
    let wrong = Secret::new(wrong, Some(HashId::Sha512)).unwrap();
    let (mut h, mut c) = pair(
        policy(H2_KEY, Some(&wrong.to_string())),
        HostSecrets::new(secret(H2_KEY), Some(secret(CTRL_KEY))),
        3,
    );
    let (r, last) = run(&mut h, &mut c);
    assert_eq!(r, Err(HostAuthError::ControllerNotAuthenticated));
    assert!(matches!(last, Progress::Failed(f) if f.explanation == FailureExplanation::Failed));
    assert!(!c.is_authenticated());
}

#[test]
fn a_host_asking_for_bidirectional_without_a_controller_key_is_refused() {
    let (mut h, mut c) = pair(
        policy(H2_KEY, None),
        HostSecrets::new(secret(H2_KEY), Some(secret(CTRL_KEY))),
        4,
    );
    let (r, _) = run(&mut h, &mut c);
    assert_eq!(
        r,
        Err(HostAuthError::Refused {
            explanation: FailureExplanation::Failed
        })
    );
}

#[test]
fn no_common_hash_or_group_is_named() {
    let mut p = policy(H1_KEY, None);
    p.hashes = vec![HashId::Sha512];
    let mut hs = HostSecrets::new(secret(H1_KEY), None);
    hs.hashes = vec![HashId::Sha256];
    let (mut h, mut c) = pair(p, hs, 5);
    assert_eq!(
        run(&mut h, &mut c).0,
        Err(HostAuthError::Refused {
            explanation: FailureExplanation::HashUnusable
        })
    );
    let mut p = policy(H1_KEY, None);
    p.dhgroups = vec![DhGroupId::Ffdhe8192];
    let mut hs = HostSecrets::new(secret(H1_KEY), None);
    hs.dhgroups = vec![DhGroupId::Null];
    let (mut h, mut c) = pair(p, hs, 6);
    assert_eq!(
        run(&mut h, &mut c).0,
        Err(HostAuthError::Refused {
            explanation: FailureExplanation::DhGroupUnusable
        })
    );
}

#[test]
fn bad_messages_are_answered_with_failure1() {
    let p = Arc::new(policy(H1_KEY, None));
    let failure1 = |c: &mut ControllerAuth| {
        let (b, prog) = c.on_receive(RECEIVE_LEN);
        match AuthMessage::decode(&b).unwrap() {
            AuthMessage::Failure1 { explanation, .. } => {
                assert!(matches!(prog, Progress::Failed(_)));
                FailureExplanation::from_value(explanation).unwrap()
            }
            m => panic!("{} instead of Failure1", m.name()),
        }
    };
    // Garbage, a Reply before any Negotiate, a Receive out of turn.
    let mut c = ControllerAuth::new(p.clone(), H1, SUBNQN);
    assert_eq!(c.on_send(&[0xEE; 20]), Progress::Pending);
    assert_eq!(failure1(&mut c), FailureExplanation::IncorrectPayload);
    let mut c = ControllerAuth::new(p.clone(), H1, SUBNQN);
    let reply = AuthMessage::Reply {
        t_id: 0,
        response: vec![0; 32],
        challenge: None,
        seqnum: 0,
        dh_value: vec![],
    };
    c.on_send(&reply.encode());
    assert_eq!(failure1(&mut c), FailureExplanation::IncorrectMessage);
    let mut c = ControllerAuth::new(p.clone(), H1, SUBNQN);
    assert_eq!(failure1(&mut c), FailureExplanation::IncorrectMessage);
    // A Reply of another transaction, and one with a DH value in a null-group exchange.
    let mut h = HostAuth::new(HostSecrets::new(secret(H1_KEY), None), H1, SUBNQN, 3);
    let mut c = ControllerAuth::new(p.clone(), H1, SUBNQN);
    c.on_send(&h.negotiate());
    let (chal, _) = c.on_receive(RECEIVE_LEN);
    let reply = h.on_challenge(&chal).unwrap();
    let mut other = reply.clone();
    other[4] = 9;
    c.on_send(&other);
    assert_eq!(failure1(&mut c), FailureExplanation::IncorrectMessage);
    let mut c = ControllerAuth::new(p.clone(), H1, SUBNQN);
    c.on_send(&h.negotiate());
    let (chal, _) = c.on_receive(RECEIVE_LEN);
    let AuthMessage::Reply { t_id, response, .. } =
        AuthMessage::decode(&h.on_challenge(&chal).unwrap()).unwrap()
    else {
        unreachable!()
    };
    let with_dh = AuthMessage::Reply {
        t_id,
        response,
        challenge: None,
        seqnum: 0,
        dh_value: vec![5; 256],
    };
    c.on_send(&with_dh.encode());
    assert_eq!(failure1(&mut c), FailureExplanation::IncorrectPayload);
    // A Receive whose AL cannot hold the Challenge.
    let mut c = ControllerAuth::new(p, H1, SUBNQN);
    c.on_send(&h.negotiate());
    let (b, prog) = c.on_receive(20);
    assert!(b.len() <= 20);
    assert!(
        matches!(prog, Progress::Failed(f) if f.explanation == FailureExplanation::IncorrectPayload)
    );
}

#[test]
fn the_host_refuses_bad_controller_messages() {
    let hs = HostSecrets::new(secret(H1_KEY), None);
    let mut h = HostAuth::new(hs.clone(), H1, SUBNQN, 1);
    // The Linux target's Challenge of transaction 0 in transaction 1.
    let e = h.on_challenge(&hex(FRAME_35)).unwrap_err();
    assert!(
        matches!(
            e,
            HostAuthError::Protocol {
                explanation: FailureExplanation::IncorrectMessage,
                ..
            }
        ),
        "{e}"
    );
    assert!(h.failure2(&e).is_some());
    let mut h = HostAuth::new(hs.clone(), H1, SUBNQN, 0);
    let e = h.on_challenge(&hex(FRAME_50)).unwrap_err();
    assert!(
        e.to_string()
            .contains("Success1 where DH-HMAC-CHAP_Challenge was due"),
        "{e}"
    );
    let mut only256 = hs;
    only256.hashes = vec![HashId::Sha256];
    only256.dhgroups = vec![DhGroupId::Null];
    let mut h = HostAuth::new(only256, H1, SUBNQN, 0);
    let e = h.on_challenge(&hex(FRAME_313)).unwrap_err();
    assert!(
        matches!(
            e,
            HostAuthError::Protocol {
                explanation: FailureExplanation::HashUnusable,
                ..
            }
        ),
        "{e}"
    );
}
