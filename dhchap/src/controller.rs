//! The controller role of DH-HMAC-CHAP on one queue (NVMe Base 2.x §8.13.5, Linux's
//! `nvmet_execute_auth_send`/`_receive`), sans IO: the target hands it the data of each
//! Authentication Send and asks it for the data of each Authentication Receive.
//!
//! Steps: AUTH_Negotiate (Send) selects the hash and DH group, the first of the
//! policy's lists that the host offers; the next Receive returns the Challenge (C1,
//! S1, and the controller's DH value); the Reply (Send) is checked against the host
//! key; the next Receive returns Success1 (with R2 when the host asked for
//! bidirectional authentication) or, when anything failed, AUTH_Failure1 naming the
//! cause; with bidirectional authentication the host's Success2 (Send) ends it. A
//! Negotiate restarts the transaction at any time; an AUTH_Failure2 from the host
//! fails it. The queue is authenticated once Success1 went out (unidirectional) or
//! Success2 came in.
use std::sync::Arc;

use nvme::auth::{AuthMessage, DhGroupId, FailureExplanation, HashId, FAILURE_REASON_FAILED};
use rand::rngs::StdRng;
use rand::{RngCore, SeedableRng};

use crate::crypto;
use crate::dh::DhKeyPair;
use crate::secret::Secret;

/// What a subsystem requires of one host: its secret, the optional controller secret
/// for bidirectional authentication, and the hashes and DH groups the controller
/// accepts, in order of preference.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ControllerPolicy {
    /// The host's secret (Linux nvmet's `dhchap_key`).
    pub host_key: Secret,
    /// The controller's secret (`dhchap_ctrl_key`), for hosts that ask to
    /// authenticate the controller.
    pub ctrl_key: Option<Secret>,
    /// Hashes accepted, preferred first (default: SHA-256, SHA-384, SHA-512).
    pub hashes: Vec<HashId>,
    /// DH groups accepted, preferred first (default: null, then ffdhe2048..8192).
    pub dhgroups: Vec<DhGroupId>,
}

impl ControllerPolicy {
    /// A policy with `host_key`, no controller key and the default lists.
    pub fn new(host_key: Secret) -> ControllerPolicy {
        ControllerPolicy {
            host_key,
            ctrl_key: None,
            hashes: HashId::ALL.to_vec(),
            dhgroups: DhGroupId::ALL.to_vec(),
        }
    }
}

/// Why a transaction failed, for the operator's log and the Failure1 message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AuthFailure {
    /// The reason code explanation sent (or received in a Failure2).
    pub explanation: FailureExplanation,
    /// What happened, in words.
    pub detail: String,
}

/// Where a transaction stands after a step.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Progress {
    /// More messages are due.
    Pending,
    /// The host (and, if asked, the controller) authenticated.
    Authenticated,
    /// The transaction failed; the queue stays unauthenticated.
    Failed(AuthFailure),
}

#[derive(Debug)]
enum State {
    AwaitNegotiate,
    SendChallenge {
        t_id: u16,
        hash: HashId,
        group: DhGroupId,
    },
    AwaitReply {
        t_id: u16,
        hash: HashId,
        s1: u32,
        c1: Vec<u8>,
        dh: Option<DhKeyPair>,
    },
    SendSuccess1 {
        t_id: u16,
        hash: HashId,
        r2: Option<Vec<u8>>,
    },
    AwaitSuccess2 {
        t_id: u16,
    },
    SendFailure1 {
        t_id: u16,
        failure: AuthFailure,
    },
    Authenticated,
    Failed(AuthFailure),
}

/// The controller side of one queue's authentication.
#[derive(Debug)]
pub struct ControllerAuth {
    policy: Arc<ControllerPolicy>,
    hostnqn: String,
    subnqn: String,
    state: State,
    rng: StdRng,
    seqnum: u32,
}

fn fail(explanation: FailureExplanation, detail: impl Into<String>) -> AuthFailure {
    AuthFailure {
        explanation,
        detail: detail.into(),
    }
}

impl ControllerAuth {
    /// The machine for a queue of host `hostnqn` on subsystem `subnqn` under `policy`.
    pub fn new(policy: Arc<ControllerPolicy>, hostnqn: &str, subnqn: &str) -> ControllerAuth {
        ControllerAuth::with_rng(policy, hostnqn, subnqn, StdRng::from_entropy())
    }

    /// As [`ControllerAuth::new`] with a given random source (tests).
    pub fn with_rng(
        policy: Arc<ControllerPolicy>,
        hostnqn: &str,
        subnqn: &str,
        mut rng: StdRng,
    ) -> ControllerAuth {
        let seqnum = rng.next_u32() | 1;
        ControllerAuth {
            policy,
            hostnqn: hostnqn.to_string(),
            subnqn: subnqn.to_string(),
            state: State::AwaitNegotiate,
            rng,
            seqnum,
        }
    }

    /// Whether the queue is authenticated (commands other than Fabrics ones may run).
    pub fn is_authenticated(&self) -> bool {
        matches!(self.state, State::Authenticated)
    }

    /// Why the last transaction failed, while it stays failed (no new Negotiate yet).
    pub fn failure(&self) -> Option<&AuthFailure> {
        match &self.state {
            State::Failed(f) => Some(f),
            _ => None,
        }
    }

    fn next_seqnum(&mut self) -> u32 {
        self.seqnum = self.seqnum.wrapping_add(1).max(1);
        self.seqnum
    }

    fn t_id(&self) -> u16 {
        match &self.state {
            State::SendChallenge { t_id, .. }
            | State::AwaitReply { t_id, .. }
            | State::SendSuccess1 { t_id, .. }
            | State::AwaitSuccess2 { t_id }
            | State::SendFailure1 { t_id, .. } => *t_id,
            _ => 0,
        }
    }

    /// The data of an Authentication Send: one host message. Protocol failures do not
    /// fail the command; they make the next Receive an AUTH_Failure1 (`Pending`), or,
    /// for a Failure2 from the host, end the transaction (`Failed`).
    pub fn on_send(&mut self, data: &[u8]) -> Progress {
        let t_id = self.t_id();
        let msg = match AuthMessage::decode(data) {
            Ok(m) => m,
            Err(e) => return self.failure1(t_id, FailureExplanation::IncorrectPayload, e),
        };
        let state = std::mem::replace(&mut self.state, State::AwaitNegotiate);
        match (msg, state) {
            (
                AuthMessage::Negotiate {
                    t_id,
                    sc_c,
                    hashes,
                    dhgroups,
                },
                _,
            ) => self.negotiate(t_id, sc_c, &hashes, &dhgroups),
            (
                AuthMessage::Reply {
                    t_id,
                    response,
                    challenge,
                    seqnum,
                    dh_value,
                },
                State::AwaitReply {
                    t_id: want,
                    hash,
                    s1,
                    c1,
                    dh,
                },
            ) if t_id == want => self.reply(
                t_id,
                hash,
                s1,
                &c1,
                dh,
                &response,
                challenge.as_deref(),
                seqnum,
                &dh_value,
            ),
            (AuthMessage::Success2 { t_id }, State::AwaitSuccess2 { t_id: want })
                if t_id == want =>
            {
                self.state = State::Authenticated;
                Progress::Authenticated
            }
            (AuthMessage::Failure2 { explanation, .. }, _) => {
                let explanation = FailureExplanation::from_value(explanation)
                    .unwrap_or(FailureExplanation::Failed);
                let f = fail(
                    explanation,
                    format!("the host refused the controller: AUTH_Failure2 ({explanation})"),
                );
                self.state = State::Failed(f.clone());
                Progress::Failed(f)
            }
            (m, _) => self.failure1(
                t_id,
                FailureExplanation::IncorrectMessage,
                format!("{} (T_ID {}) out of sequence", m.name(), m.t_id()),
            ),
        }
    }

    fn failure1(
        &mut self,
        t_id: u16,
        explanation: FailureExplanation,
        detail: impl ToString,
    ) -> Progress {
        self.state = State::SendFailure1 {
            t_id,
            failure: fail(explanation, detail.to_string()),
        };
        Progress::Pending
    }

    fn negotiate(&mut self, t_id: u16, sc_c: u8, hashes: &[u8], dhgroups: &[u8]) -> Progress {
        if sc_c != 0 {
            return self.failure1(
                t_id,
                FailureExplanation::ConcatMismatch,
                format!("secure channel concatenation (SC_C {sc_c}) is not supported"),
            );
        }
        let policy = self.policy.clone();
        let Some(hash) = policy
            .hashes
            .iter()
            .copied()
            .find(|h| hashes.contains(&h.value()))
        else {
            return self.failure1(
                t_id,
                FailureExplanation::HashUnusable,
                format!(
                    "the host offers hash IDs {hashes:?}, the controller accepts {:?}",
                    policy
                        .hashes
                        .iter()
                        .map(|h| h.short_name())
                        .collect::<Vec<_>>()
                ),
            );
        };
        let Some(group) = policy
            .dhgroups
            .iter()
            .copied()
            .find(|g| dhgroups.contains(&g.value()))
        else {
            return self.failure1(
                t_id,
                FailureExplanation::DhGroupUnusable,
                format!(
                    "the host offers DH group IDs {dhgroups:?}, the controller accepts {:?}",
                    policy.dhgroups.iter().map(|g| g.name()).collect::<Vec<_>>()
                ),
            );
        };
        self.state = State::SendChallenge { t_id, hash, group };
        Progress::Pending
    }

    #[allow(clippy::too_many_arguments)]
    fn reply(
        &mut self,
        t_id: u16,
        hash: HashId,
        s1: u32,
        c1: &[u8],
        dh: Option<DhKeyPair>,
        response: &[u8],
        c2: Option<&[u8]>,
        s2: u32,
        dh_value: &[u8],
    ) -> Progress {
        if response.len() != hash.digest_len() {
            return self.failure1(
                t_id,
                FailureExplanation::IncorrectPayload,
                format!("Reply HL {} for {}", response.len(), hash.name()),
            );
        }
        let session = match (&dh, dh_value.is_empty()) {
            (None, true) => None,
            (None, false) => {
                return self.failure1(
                    t_id,
                    FailureExplanation::IncorrectPayload,
                    "a DH value in the Reply of a null-group transaction",
                )
            }
            (Some(_), true) => {
                return self.failure1(
                    t_id,
                    FailureExplanation::IncorrectPayload,
                    "no DH value in the Reply of a DH transaction",
                )
            }
            (Some(pair), false) => match pair.shared(dh_value) {
                Ok(k) => Some(k),
                Err(e) => {
                    return self.failure1(t_id, FailureExplanation::DhGroupUnusable, e);
                }
            },
        };
        let augment = |c: &[u8]| match &session {
            Some(k) => crypto::augmented_challenge(hash, k, c),
            None => c.to_vec(),
        };
        let key = self.policy.host_key.transformed(&self.hostnqn);
        let want = crypto::host_response(
            hash,
            &key,
            &augment(c1),
            s1,
            t_id,
            &self.hostnqn,
            &self.subnqn,
        );
        if !crypto::same(&want, response) {
            return self.failure1(
                t_id,
                FailureExplanation::Failed,
                "the host's response does not match its secret (wrong dhchap_key on the host \
                 or here)",
            );
        }
        let r2 = match c2 {
            Some(c2) if s2 != 0 => {
                let Some(ck) = &self.policy.ctrl_key else {
                    return self.failure1(
                        t_id,
                        FailureExplanation::Failed,
                        "the host asks to authenticate the controller, which has no \
                         dhchap_ctrl_key for it",
                    );
                };
                let key = ck.transformed(&self.subnqn);
                Some(crypto::controller_response(
                    hash,
                    &key,
                    &augment(c2),
                    s2,
                    t_id,
                    &self.subnqn,
                    &self.hostnqn,
                ))
            }
            _ => None,
        };
        self.state = State::SendSuccess1 { t_id, hash, r2 };
        Progress::Pending
    }

    /// The data of an Authentication Receive of at most `al` bytes: the message due
    /// now (Challenge, Success1 or Failure1; a Receive out of turn gets a Failure1
    /// "incorrect protocol message"). The message is never cut: a Receive whose AL is
    /// too small for it fails the transaction with "incorrect payload".
    pub fn on_receive(&mut self, al: usize) -> (Vec<u8>, Progress) {
        let state = std::mem::replace(&mut self.state, State::AwaitNegotiate);
        let (msg, progress) = match state {
            State::SendChallenge { t_id, hash, group } => {
                let mut c1 = vec![0u8; hash.digest_len()];
                self.rng.fill_bytes(&mut c1);
                let s1 = self.next_seqnum();
                let dh = match group {
                    DhGroupId::Null => None,
                    g => Some(DhKeyPair::generate(g, &mut self.rng).expect("a DH group")),
                };
                let msg = AuthMessage::Challenge {
                    t_id,
                    hash: hash.value(),
                    dhgroup: group.value(),
                    seqnum: s1,
                    challenge: c1.clone(),
                    dh_value: dh.as_ref().map(|d| d.public().to_vec()).unwrap_or_default(),
                };
                self.state = State::AwaitReply {
                    t_id,
                    hash,
                    s1,
                    c1,
                    dh,
                };
                (msg, Progress::Pending)
            }
            State::SendSuccess1 { t_id, hash, r2 } => {
                let bidirectional = r2.is_some();
                let msg = AuthMessage::Success1 {
                    t_id,
                    hl: hash.digest_len() as u8,
                    response: r2,
                };
                if bidirectional {
                    self.state = State::AwaitSuccess2 { t_id };
                    (msg, Progress::Pending)
                } else {
                    self.state = State::Authenticated;
                    (msg, Progress::Authenticated)
                }
            }
            State::SendFailure1 { t_id, failure } => {
                let msg = AuthMessage::Failure1 {
                    t_id,
                    reason: FAILURE_REASON_FAILED,
                    explanation: failure.explanation.value(),
                };
                self.state = State::Failed(failure.clone());
                (msg, Progress::Failed(failure))
            }
            other => {
                self.state = other;
                let t_id = self.t_id();
                let failure = fail(
                    FailureExplanation::IncorrectMessage,
                    "Authentication Receive when no controller message is due",
                );
                self.state = State::Failed(failure.clone());
                let msg = AuthMessage::Failure1 {
                    t_id,
                    reason: FAILURE_REASON_FAILED,
                    explanation: failure.explanation.value(),
                };
                (msg, Progress::Failed(failure))
            }
        };
        let bytes = msg.encode();
        if bytes.len() > al {
            let failure = fail(
                FailureExplanation::IncorrectPayload,
                format!(
                    "Authentication Receive AL {al} is too small for the {} of {} bytes",
                    msg.name(),
                    bytes.len()
                ),
            );
            self.state = State::Failed(failure.clone());
            let f1 = AuthMessage::Failure1 {
                t_id: msg.t_id(),
                reason: FAILURE_REASON_FAILED,
                explanation: failure.explanation.value(),
            }
            .encode();
            let f1 = f1[..f1.len().min(al)].to_vec();
            return (f1, Progress::Failed(failure));
        }
        (bytes, progress)
    }
}
