//! The host role of DH-HMAC-CHAP on one queue (NVMe Base 2.x §8.13.5, Linux's
//! `nvme_queue_auth_work`), sans IO. The driver runs, after a Connect whose response
//! asked for authentication (AUTHREQ):
//!
//! 1. Authentication Send of [`HostAuth::negotiate`];
//! 2. Authentication Receive ([`RECEIVE_LEN`]) → [`HostAuth::on_challenge`] → Send the
//!    Reply it returns;
//! 3. Authentication Receive → [`HostAuth::on_success1`] → Send the Success2 it returns,
//!    if any (bidirectional authentication).
//!
//! Any error is a [`HostAuthError`]; when [`HostAuth::failure2`] has a message for it,
//! the driver sends it (Authentication Send) before giving up, as Linux does.
use nvme::auth::{AuthMessage, DhGroupId, FailureExplanation, HashId, FAILURE_REASON_FAILED};
use rand::rngs::StdRng;
use rand::{RngCore, SeedableRng};
use thiserror::Error;

use crate::crypto;
use crate::dh::DhKeyPair;
use crate::secret::Secret;

/// Allocation Length of the host's Authentication Receives: 4 KiB, enough for an
/// ffdhe8192 Challenge (Linux's `CHAP_BUF_SIZE`).
pub const RECEIVE_LEN: usize = 4096;

/// The host's secrets and what it offers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostSecrets {
    /// The host's secret (`nvme connect --dhchap-secret`).
    pub host_key: Secret,
    /// The controller's secret (`--dhchap-ctrl-secret`): when set, the host also
    /// authenticates the controller (bidirectional).
    pub ctrl_key: Option<Secret>,
    /// Hashes offered (default all three, SHA-256 first, as Linux).
    pub hashes: Vec<HashId>,
    /// DH groups offered (default null and ffdhe2048..8192, as Linux).
    pub dhgroups: Vec<DhGroupId>,
}

impl HostSecrets {
    /// `host_key` and optionally `ctrl_key`, offering every hash and group.
    pub fn new(host_key: Secret, ctrl_key: Option<Secret>) -> HostSecrets {
        HostSecrets {
            host_key,
            ctrl_key,
            hashes: HashId::ALL.to_vec(),
            dhgroups: DhGroupId::ALL.to_vec(),
        }
    }
}

/// Why the host's authentication failed.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum HostAuthError {
    /// The controller refused the host with AUTH_Failure1.
    #[error("the controller refused authentication: AUTH_Failure1 ({explanation}){}", hint(*.explanation))]
    Refused {
        /// The reason code explanation the controller sent.
        explanation: FailureExplanation,
    },
    /// The controller's response R2 did not match the controller secret.
    #[error("the controller failed to authenticate itself: its response does not match the controller secret (--dhchap-ctrl-secret)")]
    ControllerNotAuthenticated,
    /// The controller sent a message the host cannot use.
    #[error("authentication protocol error: {detail}")]
    Protocol {
        /// What was wrong.
        detail: String,
        /// The explanation the host sends in its AUTH_Failure2.
        explanation: FailureExplanation,
    },
}

fn hint(e: FailureExplanation) -> &'static str {
    match e {
        FailureExplanation::Failed => {
            ": the host secret does not match the target's dhchap_key for this host NQN"
        }
        FailureExplanation::HashUnusable => ": no hash in common",
        FailureExplanation::DhGroupUnusable => ": no DH group in common",
        _ => "",
    }
}

impl HostAuthError {
    fn protocol(explanation: FailureExplanation, detail: impl Into<String>) -> HostAuthError {
        HostAuthError::Protocol {
            detail: detail.into(),
            explanation,
        }
    }

    /// The explanation of the AUTH_Failure2 the host sends for this error, if it sends
    /// one (not after a Failure1: the controller ended the transaction itself).
    pub fn failure2_explanation(&self) -> Option<FailureExplanation> {
        match self {
            HostAuthError::Refused { .. } => None,
            HostAuthError::ControllerNotAuthenticated => Some(FailureExplanation::Failed),
            HostAuthError::Protocol { explanation, .. } => Some(*explanation),
        }
    }
}

#[derive(Debug)]
struct Pending {
    hash: HashId,
    /// S2 and C2, when the host authenticates the controller.
    c2: Option<(u32, Vec<u8>)>,
    session: Option<Vec<u8>>,
}

/// The host side of one queue's authentication transaction.
#[derive(Debug)]
pub struct HostAuth {
    secrets: HostSecrets,
    hostnqn: String,
    subnqn: String,
    t_id: u16,
    rng: StdRng,
    pending: Option<Pending>,
}

impl HostAuth {
    /// A transaction `t_id` of host `hostnqn` with subsystem `subnqn`.
    pub fn new(secrets: HostSecrets, hostnqn: &str, subnqn: &str, t_id: u16) -> HostAuth {
        HostAuth::with_rng(secrets, hostnqn, subnqn, t_id, StdRng::from_entropy())
    }

    /// As [`HostAuth::new`] with a given random source (tests).
    pub fn with_rng(
        secrets: HostSecrets,
        hostnqn: &str,
        subnqn: &str,
        t_id: u16,
        rng: StdRng,
    ) -> HostAuth {
        HostAuth {
            secrets,
            hostnqn: hostnqn.to_string(),
            subnqn: subnqn.to_string(),
            t_id,
            rng,
            pending: None,
        }
    }

    /// The AUTH_Negotiate to send first.
    pub fn negotiate(&self) -> Vec<u8> {
        AuthMessage::Negotiate {
            t_id: self.t_id,
            sc_c: 0,
            hashes: self.secrets.hashes.iter().map(|h| h.value()).collect(),
            dhgroups: self.secrets.dhgroups.iter().map(|g| g.value()).collect(),
        }
        .encode()
    }

    /// The AUTH_Failure2 to send for `e` (None when none is due).
    pub fn failure2(&self, e: &HostAuthError) -> Option<Vec<u8>> {
        e.failure2_explanation().map(|x| {
            AuthMessage::Failure2 {
                t_id: self.t_id,
                reason: FAILURE_REASON_FAILED,
                explanation: x.value(),
            }
            .encode()
        })
    }

    fn expect(&self, data: &[u8], what: &str) -> Result<AuthMessage, HostAuthError> {
        let msg = AuthMessage::decode(data).map_err(|e| {
            HostAuthError::protocol(FailureExplanation::IncorrectPayload, e.to_string())
        })?;
        if let AuthMessage::Failure1 { explanation, .. } = msg {
            return Err(HostAuthError::Refused {
                explanation: FailureExplanation::from_value(explanation)
                    .unwrap_or(FailureExplanation::Failed),
            });
        }
        if msg.t_id() != self.t_id {
            return Err(HostAuthError::protocol(
                FailureExplanation::IncorrectMessage,
                format!(
                    "{} with T_ID {} in transaction {}",
                    msg.name(),
                    msg.t_id(),
                    self.t_id
                ),
            ));
        }
        if msg.name() != what {
            return Err(HostAuthError::protocol(
                FailureExplanation::IncorrectMessage,
                format!("{} where {what} was due", msg.name()),
            ));
        }
        Ok(msg)
    }

    /// The controller's Challenge (the data of the first Receive): returns the Reply.
    ///
    /// Errors: [`HostAuthError::Refused`] for a Failure1, [`HostAuthError::Protocol`]
    /// for a malformed or unexpected message, a hash or group not offered, a bad DH
    /// value.
    pub fn on_challenge(&mut self, data: &[u8]) -> Result<Vec<u8>, HostAuthError> {
        let AuthMessage::Challenge {
            hash,
            dhgroup,
            seqnum: s1,
            challenge: c1,
            dh_value,
            ..
        } = self.expect(data, "DH-HMAC-CHAP_Challenge")?
        else {
            unreachable!("expect checked the message")
        };
        let hash = HashId::from_value(hash)
            .filter(|h| self.secrets.hashes.contains(h))
            .ok_or_else(|| {
                HostAuthError::protocol(
                    FailureExplanation::HashUnusable,
                    format!("the controller chose hash ID {hash}, which the host did not offer"),
                )
            })?;
        if c1.len() != hash.digest_len() {
            return Err(HostAuthError::protocol(
                FailureExplanation::HashUnusable,
                format!("Challenge HL {} for {}", c1.len(), hash.name()),
            ));
        }
        let group = DhGroupId::from_value(dhgroup)
            .filter(|g| self.secrets.dhgroups.contains(g))
            .ok_or_else(|| {
                HostAuthError::protocol(
                    FailureExplanation::DhGroupUnusable,
                    format!(
                        "the controller chose DH group ID {dhgroup}, which the host did not offer"
                    ),
                )
            })?;
        let (session, our_value) = match group {
            DhGroupId::Null if dh_value.is_empty() => (None, Vec::new()),
            DhGroupId::Null => {
                return Err(HostAuthError::protocol(
                    FailureExplanation::IncorrectPayload,
                    "a DH value in a null-group Challenge",
                ))
            }
            g => {
                let pair = DhKeyPair::generate(g, &mut self.rng).expect("a DH group");
                let k = pair.shared(&dh_value).map_err(|e| {
                    HostAuthError::protocol(FailureExplanation::DhGroupUnusable, e.to_string())
                })?;
                (Some(k), pair.public().to_vec())
            }
        };
        let augment = |c: &[u8]| match &session {
            Some(k) => crypto::augmented_challenge(hash, k, c),
            None => c.to_vec(),
        };
        let key = self.secrets.host_key.transformed(&self.hostnqn);
        let r1 = crypto::host_response(
            hash,
            &key,
            &augment(&c1),
            s1,
            self.t_id,
            &self.hostnqn,
            &self.subnqn,
        );
        let c2 = self.secrets.ctrl_key.as_ref().map(|_| {
            let mut c = vec![0u8; hash.digest_len()];
            self.rng.fill_bytes(&mut c);
            ((self.rng.next_u32() >> 1) | 1, c)
        });
        let reply = AuthMessage::Reply {
            t_id: self.t_id,
            response: r1,
            challenge: c2.as_ref().map(|(_, c)| c.clone()),
            seqnum: c2.as_ref().map_or(0, |(s, _)| *s),
            dh_value: our_value,
        };
        self.pending = Some(Pending { hash, c2, session });
        Ok(reply.encode())
    }

    /// The controller's Success1 (the data of the second Receive): `Ok(Some(success2))`
    /// when the host authenticated the controller (send it), `Ok(None)` when done.
    ///
    /// Errors: [`HostAuthError::Refused`] for a Failure1 (the host secret was wrong),
    /// [`HostAuthError::ControllerNotAuthenticated`] when R2 does not match the
    /// controller secret, [`HostAuthError::Protocol`] for a malformed message.
    pub fn on_success1(&mut self, data: &[u8]) -> Result<Option<Vec<u8>>, HostAuthError> {
        let AuthMessage::Success1 { hl, response, .. } =
            self.expect(data, "DH-HMAC-CHAP_Success1")?
        else {
            unreachable!("expect checked the message")
        };
        let p = self.pending.take().ok_or_else(|| {
            HostAuthError::protocol(
                FailureExplanation::IncorrectMessage,
                "Success1 before a Challenge",
            )
        })?;
        if usize::from(hl) != p.hash.digest_len() {
            return Err(HostAuthError::protocol(
                FailureExplanation::HashUnusable,
                format!("Success1 HL {hl} for {}", p.hash.name()),
            ));
        }
        let Some((s2, c2)) = p.c2 else {
            return Ok(None);
        };
        let Some(r2) = response else {
            return Err(HostAuthError::ControllerNotAuthenticated);
        };
        let ck = self
            .secrets
            .ctrl_key
            .as_ref()
            .expect("c2 only with a ctrl key");
        let challenge = match &p.session {
            Some(k) => crypto::augmented_challenge(p.hash, k, &c2),
            None => c2,
        };
        let want = crypto::controller_response(
            p.hash,
            &ck.transformed(&self.subnqn),
            &challenge,
            s2,
            self.t_id,
            &self.subnqn,
            &self.hostnqn,
        );
        if !crypto::same(&want, &r2) {
            return Err(HostAuthError::ControllerNotAuthenticated);
        }
        Ok(Some(AuthMessage::Success2 { t_id: self.t_id }.encode()))
    }
}
