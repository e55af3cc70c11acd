//! NVMe in-band authentication (DH-HMAC-CHAP) wire structures: the Fabrics
//! Authentication Send (FCTYPE 05h) and Receive (06h) commands and the messages
//! they carry (NVMe Base 2.x §8.13.5 "DH-HMAC-CHAP protocol", §6.2/§6.3 of the
//! Fabrics commands; TP 8006). Plain data with encode/decode; no cryptography
//! and no state (the `dhchap` crate holds the protocol).
//!
//! Every message starts with AUTH-TYPE (byte 0: 00h common, 01h DH-HMAC-CHAP),
//! AUTH-ID (byte 1) and T_ID (bytes 4..6, little endian):
//!
//! | message | type/id | layout after the 6-byte header |
//! | --- | --- | --- |
//! | AUTH_Negotiate | 00/00 | SC_C (6), NAPD (7), NAPD x 64-byte descriptors: AUTHID 01h, HALEN, DHLEN, hash IDs at 4.., DH group IDs at 34.. |
//! | DH-HMAC-CHAP_Challenge | 01/01 | HL (6), HASHID (8), DHGID (9), DHVLEN u16 (10), SEQNUM u32 (12), C1 (HL bytes at 16), DH value |
//! | DH-HMAC-CHAP_Reply | 01/02 | HL (6), CVALID (8), DHVLEN u16 (10), SEQNUM u32 (12), R1, C2 (HL bytes each at 16), DH value |
//! | DH-HMAC-CHAP_Success1 | 01/03 | HL (6), RVALID (8), R2 (HL bytes at 16 when RVALID) |
//! | DH-HMAC-CHAP_Success2 | 01/04 | 16 bytes |
//! | AUTH_Failure2 / Failure1 | 00/F0, 00/F1 | REASON CODE (6), EXPLANATION (7) |
//!
//! Layout checked against Linux 6.12 (`include/linux/nvme.h`) and the exchange in
//! `linux-nvme-rdma-dhchap.pcap` (tests cite its frames).
use thiserror::Error;

use crate::opcodes::{FabricsCommandType, FABRICS_OPCODE};
use crate::sgl::SglDescriptor;
use crate::sqe::{Sqe, PSDT_SGL_MPTR_CONTIG};

/// SECP of the Authentication Send/Receive commands for DH-HMAC-CHAP (E9h,
/// "NVMe in-band authentication", NVMe Base 2.x §6.2).
pub const AUTH_SECP: u8 = 0xE9;
/// SPSP0 and SPSP1 of the Authentication commands (01h each).
pub const AUTH_SPSP: u8 = 0x01;
/// AUTHID of the DH-HMAC-CHAP protocol descriptor in AUTH_Negotiate.
pub const DHCHAP_AUTH_ID: u8 = 0x01;
/// Connect response DW0 bit 17, AUTHREQ.ATR: authentication transaction required
/// (NVMe Base 2.x §6.3 Figure "Connect Response").
pub const CONNECT_AUTHREQ_ATR: u32 = 1 << 17;
/// Connect response DW0 bit 18, AUTHREQ.ASCR: secure channel concatenation required.
pub const CONNECT_AUTHREQ_ASCR: u32 = 1 << 18;
/// Byte offset of SECP in the Authentication Send/Receive SQE.
pub const AUTH_SQE_SECP_OFFSET: usize = 43;
/// Byte offset of TL (Send) / AL (Receive) in the Authentication SQE.
pub const AUTH_SQE_LEN_OFFSET: usize = 44;
/// Length of the fixed part of Challenge, Reply, Success1 and Success2.
pub const DHCHAP_HEADER_LEN: usize = 16;
/// Length of AUTH_Negotiate with one protocol descriptor (8 + 64), as Linux sends.
pub const NEGOTIATE_LEN: usize = 72;
/// Length of AUTH_Failure1/2: 8 bytes, as Linux sends them (frame 617 of the capture).
pub const FAILURE_LEN: usize = 8;
/// Room for at most this many hash IDs (HALEN) in a descriptor.
pub const MAX_HASH_IDS: usize = 30;
/// Room for at most this many DH group IDs (DHLEN) in a descriptor.
pub const MAX_DH_IDS: usize = 30;

wire_enum! {
    /// HMAC hash function identifiers (HASHID), NVMe Base 2.x §8.13.5.2 Figure
    /// "DH-HMAC-CHAP Hash Function Identifiers"; the `xx` of a `DHHC-1:xx:` secret
    /// uses the same numbers (00 = no transformation).
    pub enum HashId: u8 {
        /// SHA-256, 32-byte digests (01h).
        Sha256 = 0x01 => "hmac(sha256)",
        /// SHA-384, 48-byte digests (02h).
        Sha384 = 0x02 => "hmac(sha384)",
        /// SHA-512, 64-byte digests (03h).
        Sha512 = 0x03 => "hmac(sha512)",
    }
}

impl HashId {
    /// Digest length HL in bytes.
    pub const fn digest_len(self) -> usize {
        match self {
            HashId::Sha256 => 32,
            HashId::Sha384 => 48,
            HashId::Sha512 => 64,
        }
    }

    /// The short name used in configs (`sha256`, `sha384`, `sha512`).
    pub const fn short_name(self) -> &'static str {
        match self {
            HashId::Sha256 => "sha256",
            HashId::Sha384 => "sha384",
            HashId::Sha512 => "sha512",
        }
    }

    /// Parses `sha256`/`hmac(sha256)` (and the 384/512 forms).
    pub fn parse(s: &str) -> Option<HashId> {
        let s = s.trim();
        let s = s
            .strip_prefix("hmac(")
            .and_then(|r| r.strip_suffix(')'))
            .unwrap_or(s);
        HashId::ALL
            .iter()
            .copied()
            .find(|h| h.short_name().eq_ignore_ascii_case(s))
    }
}

wire_enum! {
    /// Diffie-Hellman group identifiers (DHGID), NVMe Base 2.x §8.13.5.2 Figure
    /// "DH-HMAC-CHAP Diffie-Hellman Group Identifiers" (the ffdhe groups of RFC 7919).
    pub enum DhGroupId: u8 {
        /// No Diffie-Hellman exchange (00h).
        Null = 0x00 => "null",
        /// ffdhe2048 (01h).
        Ffdhe2048 = 0x01 => "ffdhe2048",
        /// ffdhe3072 (02h).
        Ffdhe3072 = 0x02 => "ffdhe3072",
        /// ffdhe4096 (03h).
        Ffdhe4096 = 0x03 => "ffdhe4096",
        /// ffdhe6144 (04h).
        Ffdhe6144 = 0x04 => "ffdhe6144",
        /// ffdhe8192 (05h).
        Ffdhe8192 = 0x05 => "ffdhe8192",
    }
}

impl DhGroupId {
    /// Size of the group's prime, hence of a DH value (DHVLEN), in bytes; 0 for null.
    pub const fn value_len(self) -> usize {
        match self {
            DhGroupId::Null => 0,
            DhGroupId::Ffdhe2048 => 256,
            DhGroupId::Ffdhe3072 => 384,
            DhGroupId::Ffdhe4096 => 512,
            DhGroupId::Ffdhe6144 => 768,
            DhGroupId::Ffdhe8192 => 1024,
        }
    }

    /// Parses a group name (`null`, `ffdhe2048`, ...).
    pub fn parse(s: &str) -> Option<DhGroupId> {
        let s = s.trim();
        DhGroupId::ALL
            .iter()
            .copied()
            .find(|g| g.name().eq_ignore_ascii_case(s))
    }
}

wire_enum! {
    /// Reason code explanations of AUTH_Failure1/Failure2 (NVMe Base 2.x §8.13.5
    /// Figure "AUTH_Failure1/2 Reason Code Explanations"; reason code 01h
    /// "authentication failure").
    pub enum FailureExplanation: u8 {
        /// Authentication failed (01h): a response did not verify.
        Failed = 0x01 => "authentication failed",
        /// Authentication protocol not usable (02h).
        NotUsable = 0x02 => "authentication protocol not usable",
        /// Secure channel concatenation mismatch (03h).
        ConcatMismatch = 0x03 => "secure channel concatenation mismatch",
        /// Hash function not usable (04h).
        HashUnusable = 0x04 => "hash function not usable",
        /// DH group not usable (05h).
        DhGroupUnusable = 0x05 => "DH group not usable",
        /// Incorrect payload (06h).
        IncorrectPayload = 0x06 => "incorrect payload",
        /// Incorrect protocol message (07h).
        IncorrectMessage = 0x07 => "incorrect protocol message",
    }
}

/// Reason code of AUTH_Failure1/2: 01h, authentication failure.
pub const FAILURE_REASON_FAILED: u8 = 0x01;

/// A DH-HMAC-CHAP protocol message, decoded (see the module docs for layouts).
/// Hash and group lists of Negotiate keep unknown values as sent.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AuthMessage {
    /// AUTH_Negotiate (host to controller).
    Negotiate {
        /// Transaction ID.
        t_id: u16,
        /// Secure channel concatenation (SC_C; 0 = none).
        sc_c: u8,
        /// Hash IDs the host offers, in its order of preference.
        hashes: Vec<u8>,
        /// DH group IDs the host offers.
        dhgroups: Vec<u8>,
    },
    /// DH-HMAC-CHAP_Challenge (controller to host).
    Challenge {
        /// Transaction ID.
        t_id: u16,
        /// HASHID chosen.
        hash: u8,
        /// DHGID chosen.
        dhgroup: u8,
        /// SEQNUM S1.
        seqnum: u32,
        /// Challenge C1 (HL bytes).
        challenge: Vec<u8>,
        /// The controller's DH value g^x mod p (empty for the null group).
        dh_value: Vec<u8>,
    },
    /// DH-HMAC-CHAP_Reply (host to controller).
    Reply {
        /// Transaction ID.
        t_id: u16,
        /// Response R1 (HL bytes).
        response: Vec<u8>,
        /// Challenge C2 for bidirectional authentication (CVALID 1), else `None`.
        challenge: Option<Vec<u8>>,
        /// SEQNUM S2 (0 unless bidirectional).
        seqnum: u32,
        /// The host's DH value g^y mod p (empty for the null group).
        dh_value: Vec<u8>,
    },
    /// DH-HMAC-CHAP_Success1 (controller to host).
    Success1 {
        /// Transaction ID.
        t_id: u16,
        /// HL of the negotiated hash.
        hl: u8,
        /// Response R2 (RVALID 1) for bidirectional authentication.
        response: Option<Vec<u8>>,
    },
    /// DH-HMAC-CHAP_Success2 (host to controller).
    Success2 {
        /// Transaction ID.
        t_id: u16,
    },
    /// AUTH_Failure1 (controller to host).
    Failure1 {
        /// Transaction ID.
        t_id: u16,
        /// Reason code (01h).
        reason: u8,
        /// Reason code explanation ([`FailureExplanation`] value).
        explanation: u8,
    },
    /// AUTH_Failure2 (host to controller).
    Failure2 {
        /// Transaction ID.
        t_id: u16,
        /// Reason code (01h).
        reason: u8,
        /// Reason code explanation ([`FailureExplanation`] value).
        explanation: u8,
    },
}

/// Why bytes are not a well-formed authentication message.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum AuthWireError {
    /// Fewer bytes than the message's fixed part or its length fields need.
    #[error("{message} of {len} bytes is too short (needs {need})")]
    Short {
        /// The message (or "message" before AUTH-ID is known).
        message: &'static str,
        /// Bytes given.
        len: usize,
        /// Bytes needed.
        need: usize,
    },
    /// AUTH-TYPE/AUTH-ID name no message.
    #[error("unknown authentication message type {auth_type:#04x} id {auth_id:#04x}")]
    Unknown {
        /// AUTH-TYPE (byte 0).
        auth_type: u8,
        /// AUTH-ID (byte 1).
        auth_id: u8,
    },
    /// AUTH_Negotiate without a DH-HMAC-CHAP descriptor, or lists too long.
    #[error("AUTH_Negotiate: {0}")]
    BadNegotiate(&'static str),
    /// A message field that may only be 0 or 1 (CVALID, RVALID) is neither, or HL is 0.
    #[error("{message}: {what}")]
    BadField {
        /// The message.
        message: &'static str,
        /// What is wrong.
        what: &'static str,
    },
}

fn le16(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}

fn le32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

fn need(message: &'static str, b: &[u8], need: usize) -> Result<(), AuthWireError> {
    if b.len() < need {
        return Err(AuthWireError::Short {
            message,
            len: b.len(),
            need,
        });
    }
    Ok(())
}

fn header(len: usize, auth_type: u8, auth_id: u8, t_id: u16) -> Vec<u8> {
    let mut v = vec![0u8; len];
    v[0] = auth_type;
    v[1] = auth_id;
    v[4..6].copy_from_slice(&t_id.to_le_bytes());
    v
}

impl AuthMessage {
    /// The message's name as the specification writes it.
    pub fn name(&self) -> &'static str {
        match self {
            AuthMessage::Negotiate { .. } => "AUTH_Negotiate",
            AuthMessage::Challenge { .. } => "DH-HMAC-CHAP_Challenge",
            AuthMessage::Reply { .. } => "DH-HMAC-CHAP_Reply",
            AuthMessage::Success1 { .. } => "DH-HMAC-CHAP_Success1",
            AuthMessage::Success2 { .. } => "DH-HMAC-CHAP_Success2",
            AuthMessage::Failure1 { .. } => "AUTH_Failure1",
            AuthMessage::Failure2 { .. } => "AUTH_Failure2",
        }
    }

    /// The transaction ID (T_ID) of any message.
    pub fn t_id(&self) -> u16 {
        match *self {
            AuthMessage::Negotiate { t_id, .. }
            | AuthMessage::Challenge { t_id, .. }
            | AuthMessage::Reply { t_id, .. }
            | AuthMessage::Success1 { t_id, .. }
            | AuthMessage::Success2 { t_id }
            | AuthMessage::Failure1 { t_id, .. }
            | AuthMessage::Failure2 { t_id, .. } => t_id,
        }
    }

    /// The message's bytes as they go in the command's data.
    pub fn encode(&self) -> Vec<u8> {
        match self {
            AuthMessage::Negotiate {
                t_id,
                sc_c,
                hashes,
                dhgroups,
            } => {
                let mut v = header(NEGOTIATE_LEN, 0x00, 0x00, *t_id);
                v[6] = *sc_c;
                v[7] = 1;
                v[8] = DHCHAP_AUTH_ID;
                let h = hashes.len().min(MAX_HASH_IDS);
                let d = dhgroups.len().min(MAX_DH_IDS);
                v[10] = h as u8;
                v[11] = d as u8;
                v[12..12 + h].copy_from_slice(&hashes[..h]);
                v[42..42 + d].copy_from_slice(&dhgroups[..d]);
                v
            }
            AuthMessage::Challenge {
                t_id,
                hash,
                dhgroup,
                seqnum,
                challenge,
                dh_value,
            } => {
                let mut v = header(DHCHAP_HEADER_LEN, 0x01, 0x01, *t_id);
                v[6] = challenge.len() as u8;
                v[8] = *hash;
                v[9] = *dhgroup;
                v[10..12].copy_from_slice(&(dh_value.len() as u16).to_le_bytes());
                v[12..16].copy_from_slice(&seqnum.to_le_bytes());
                v.extend_from_slice(challenge);
                v.extend_from_slice(dh_value);
                v
            }
            AuthMessage::Reply {
                t_id,
                response,
                challenge,
                seqnum,
                dh_value,
            } => {
                let hl = response.len();
                let mut v = header(DHCHAP_HEADER_LEN, 0x01, 0x02, *t_id);
                v[6] = hl as u8;
                v[8] = u8::from(challenge.is_some());
                v[10..12].copy_from_slice(&(dh_value.len() as u16).to_le_bytes());
                v[12..16].copy_from_slice(&seqnum.to_le_bytes());
                v.extend_from_slice(response);
                match challenge {
                    Some(c) => v.extend_from_slice(c),
                    None => v.resize(v.len() + hl, 0),
                }
                v.extend_from_slice(dh_value);
                v
            }
            AuthMessage::Success1 { t_id, hl, response } => {
                let mut v = header(DHCHAP_HEADER_LEN, 0x01, 0x03, *t_id);
                v[6] = *hl;
                if let Some(r) = response {
                    v[8] = 1;
                    v.extend_from_slice(r);
                }
                v
            }
            AuthMessage::Success2 { t_id } => header(DHCHAP_HEADER_LEN, 0x01, 0x04, *t_id),
            AuthMessage::Failure1 {
                t_id,
                reason,
                explanation,
            }
            | AuthMessage::Failure2 {
                t_id,
                reason,
                explanation,
            } => {
                let id = if matches!(self, AuthMessage::Failure1 { .. }) {
                    0xF1
                } else {
                    0xF0
                };
                let mut v = header(FAILURE_LEN, 0x00, id, *t_id);
                v[6] = *reason;
                v[7] = *explanation;
                v
            }
        }
    }

    /// Decodes the message at the start of `b` (trailing bytes are ignored, as a
    /// Receive buffer is larger than its message).
    ///
    /// Errors: [`AuthWireError`] naming what is short or unknown.
    pub fn decode(b: &[u8]) -> Result<AuthMessage, AuthWireError> {
        need("message", b, 8)?;
        let t_id = le16(b, 4);
        match (b[0], b[1]) {
            (0x00, 0x00) => {
                let m = "AUTH_Negotiate";
                need(m, b, NEGOTIATE_LEN)?;
                let (sc_c, napd) = (b[6], b[7] as usize);
                if napd == 0 {
                    return Err(AuthWireError::BadNegotiate("no protocol descriptor"));
                }
                need(m, b, 8 + 64 * napd)?;
                let d = (0..napd)
                    .map(|i| &b[8 + 64 * i..8 + 64 * (i + 1)])
                    .find(|d| d[0] == DHCHAP_AUTH_ID)
                    .ok_or(AuthWireError::BadNegotiate(
                        "no DH-HMAC-CHAP protocol descriptor (AUTHID 01h)",
                    ))?;
                let (h, g) = (d[2] as usize, d[3] as usize);
                if h > MAX_HASH_IDS || g > MAX_DH_IDS {
                    return Err(AuthWireError::BadNegotiate("HALEN or DHLEN above 30"));
                }
                Ok(AuthMessage::Negotiate {
                    t_id,
                    sc_c,
                    hashes: d[4..4 + h].to_vec(),
                    dhgroups: d[34..34 + g].to_vec(),
                })
            }
            (0x00, id @ (0xF0 | 0xF1)) => {
                let (reason, explanation) = (b[6], b[7]);
                Ok(if id == 0xF1 {
                    AuthMessage::Failure1 {
                        t_id,
                        reason,
                        explanation,
                    }
                } else {
                    AuthMessage::Failure2 {
                        t_id,
                        reason,
                        explanation,
                    }
                })
            }
            (0x01, 0x01) => {
                let m = "DH-HMAC-CHAP_Challenge";
                need(m, b, DHCHAP_HEADER_LEN)?;
                let hl = b[6] as usize;
                let dhvlen = le16(b, 10) as usize;
                if hl == 0 {
                    return Err(AuthWireError::BadField {
                        message: m,
                        what: "HL is 0",
                    });
                }
                need(m, b, DHCHAP_HEADER_LEN + hl + dhvlen)?;
                let c = DHCHAP_HEADER_LEN;
                Ok(AuthMessage::Challenge {
                    t_id,
                    hash: b[8],
                    dhgroup: b[9],
                    seqnum: le32(b, 12),
                    challenge: b[c..c + hl].to_vec(),
                    dh_value: b[c + hl..c + hl + dhvlen].to_vec(),
                })
            }
            (0x01, 0x02) => {
                let m = "DH-HMAC-CHAP_Reply";
                need(m, b, DHCHAP_HEADER_LEN)?;
                let hl = b[6] as usize;
                let cvalid = b[8];
                let dhvlen = le16(b, 10) as usize;
                if hl == 0 {
                    return Err(AuthWireError::BadField {
                        message: m,
                        what: "HL is 0",
                    });
                }
                if cvalid > 1 {
                    return Err(AuthWireError::BadField {
                        message: m,
                        what: "CVALID is neither 0 nor 1",
                    });
                }
                need(m, b, DHCHAP_HEADER_LEN + 2 * hl + dhvlen)?;
                let r = DHCHAP_HEADER_LEN;
                Ok(AuthMessage::Reply {
                    t_id,
                    response: b[r..r + hl].to_vec(),
                    challenge: (cvalid == 1).then(|| b[r + hl..r + 2 * hl].to_vec()),
                    seqnum: le32(b, 12),
                    dh_value: b[r + 2 * hl..r + 2 * hl + dhvlen].to_vec(),
                })
            }
            (0x01, 0x03) => {
                let m = "DH-HMAC-CHAP_Success1";
                need(m, b, DHCHAP_HEADER_LEN)?;
                let hl = b[6];
                let rvalid = b[8];
                if rvalid > 1 {
                    return Err(AuthWireError::BadField {
                        message: m,
                        what: "RVALID is neither 0 nor 1",
                    });
                }
                let response = if rvalid == 1 {
                    need(m, b, DHCHAP_HEADER_LEN + hl as usize)?;
                    Some(b[DHCHAP_HEADER_LEN..DHCHAP_HEADER_LEN + hl as usize].to_vec())
                } else {
                    None
                };
                Ok(AuthMessage::Success1 { t_id, hl, response })
            }
            (0x01, 0x04) => Ok(AuthMessage::Success2 { t_id }),
            (auth_type, auth_id) => Err(AuthWireError::Unknown { auth_type, auth_id }),
        }
    }
}

/// An Authentication Send (FCTYPE 05h) or Receive (06h) command, decoded from its SQE
/// (NVMe Base 2.x §6.2, §6.3): SECP (byte 43), SPSP0 (42), SPSP1 (41), TL/AL (44..48).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AuthCommand {
    /// Authentication Send of `tl` bytes of host data (a message to the controller).
    Send {
        /// Transfer Length in bytes.
        tl: u32,
    },
    /// Authentication Receive of at most `al` bytes (a message from the controller).
    Receive {
        /// Allocation Length in bytes.
        al: u32,
    },
}

/// Why an SQE is not a usable Authentication Send/Receive for DH-HMAC-CHAP.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Error)]
pub enum AuthCommandError {
    /// Not a Fabrics Authentication Send or Receive.
    #[error("not an Authentication Send/Receive command")]
    NotAuth,
    /// SECP other than E9h, SPSP0/SPSP1 other than 01h, or a zero TL/AL; `offset` is
    /// the SQE byte at fault (for the error log's parameter location).
    #[error("invalid field at SQE byte {offset}")]
    InvalidField {
        /// SQE byte offset.
        offset: usize,
    },
}

impl AuthCommand {
    /// Decodes `sqe`; see [`AuthCommandError`] for what is refused (as Linux nvmet's
    /// `nvmet_execute_auth_send`/`_receive` check it: Invalid Field in Command, DNR).
    pub fn from_sqe(sqe: &Sqe) -> Result<AuthCommand, AuthCommandError> {
        let b = sqe.to_array();
        let send = match (b[0], b[4]) {
            (FABRICS_OPCODE, 0x05) => true,
            (FABRICS_OPCODE, 0x06) => false,
            _ => return Err(AuthCommandError::NotAuth),
        };
        for (offset, want) in [(43, AUTH_SECP), (42, AUTH_SPSP), (41, AUTH_SPSP)] {
            if b[offset] != want {
                return Err(AuthCommandError::InvalidField { offset });
            }
        }
        let len = le32(&b, AUTH_SQE_LEN_OFFSET);
        if len == 0 {
            return Err(AuthCommandError::InvalidField {
                offset: AUTH_SQE_LEN_OFFSET,
            });
        }
        Ok(if send {
            AuthCommand::Send { tl: len }
        } else {
            AuthCommand::Receive { al: len }
        })
    }

    /// The command's SQE with command identifier `cid`, SGL1 a keyed null descriptor
    /// (the transport fills it in), SECP E9h, SPSP0 = SPSP1 = 01h.
    pub fn to_sqe(self, cid: u16) -> Sqe {
        let mut b = [0u8; 64];
        b[0] = FABRICS_OPCODE;
        b[1] = PSDT_SGL_MPTR_CONTIG << 6;
        b[2..4].copy_from_slice(&cid.to_le_bytes());
        let (fctype, len) = match self {
            AuthCommand::Send { tl } => (FabricsCommandType::AuthenticationSend, tl),
            AuthCommand::Receive { al } => (FabricsCommandType::AuthenticationReceive, al),
        };
        b[4] = fctype.value();
        b[41] = AUTH_SPSP;
        b[42] = AUTH_SPSP;
        b[43] = AUTH_SECP;
        b[44..48].copy_from_slice(&len.to_le_bytes());
        let mut sqe = Sqe::from_array(b);
        sqe.set_sgl(SglDescriptor::keyed_null());
        sqe
    }

    /// The data length: TL of a Send, AL of a Receive.
    pub fn len(self) -> u32 {
        match self {
            AuthCommand::Send { tl } => tl,
            AuthCommand::Receive { al } => al,
        }
    }

    /// Whether the length is zero (never for a decoded command).
    pub fn is_empty(self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn negotiate_as_linux_sends_it() {
        // linux-nvme-rdma-dhchap.pcap frame 27: T_ID 0, SC_C 0, NAPD 1, AUTHID 1,
        // HALEN 3 (01 02 03), DHLEN 6 (00..05).
        let m = AuthMessage::Negotiate {
            t_id: 0,
            sc_c: 0,
            hashes: vec![1, 2, 3],
            dhgroups: vec![0, 1, 2, 3, 4, 5],
        };
        let b = m.encode();
        assert_eq!(b.len(), 72);
        assert_eq!(&b[..12], &[0, 0, 0, 0, 0, 0, 0, 1, 1, 0, 3, 6]);
        assert_eq!(&b[12..15], &[1, 2, 3]);
        assert_eq!(&b[42..48], &[0, 1, 2, 3, 4, 5]);
        assert_eq!(AuthMessage::decode(&b).unwrap(), m);
    }

    #[test]
    fn every_message_round_trips() {
        let msgs = [
            AuthMessage::Challenge {
                t_id: 3,
                hash: 2,
                dhgroup: 1,
                seqnum: 0xDEAD_BEEF,
                challenge: vec![7; 48],
                dh_value: vec![9; 256],
            },
            AuthMessage::Reply {
                t_id: 3,
                response: vec![1; 32],
                challenge: Some(vec![2; 32]),
                seqnum: 5,
                dh_value: vec![],
            },
            AuthMessage::Reply {
                t_id: 3,
                response: vec![1; 32],
                challenge: None,
                seqnum: 0,
                dh_value: vec![4; 384],
            },
            AuthMessage::Success1 {
                t_id: 1,
                hl: 64,
                response: Some(vec![3; 64]),
            },
            AuthMessage::Success1 {
                t_id: 1,
                hl: 32,
                response: None,
            },
            AuthMessage::Success2 { t_id: 9 },
            AuthMessage::Failure1 {
                t_id: 2,
                reason: 1,
                explanation: 1,
            },
            AuthMessage::Failure2 {
                t_id: 2,
                reason: 1,
                explanation: 7,
            },
        ];
        for m in msgs {
            let mut b = m.encode();
            assert_eq!(AuthMessage::decode(&b).unwrap(), m, "{}", m.name());
            b.resize(4096, 0);
            assert_eq!(AuthMessage::decode(&b).unwrap(), m, "{} in 4 KiB", m.name());
        }
    }

    #[test]
    fn short_and_unknown_messages_are_named() {
        let c = AuthMessage::Challenge {
            t_id: 0,
            hash: 1,
            dhgroup: 1,
            seqnum: 1,
            challenge: vec![0; 32],
            dh_value: vec![0; 256],
        }
        .encode();
        assert!(matches!(
            AuthMessage::decode(&c[..100]),
            Err(AuthWireError::Short { need: 304, .. })
        ));
        assert_eq!(
            AuthMessage::decode(&[2, 0, 0, 0, 0, 0, 0, 0]),
            Err(AuthWireError::Unknown {
                auth_type: 2,
                auth_id: 0
            })
        );
        let mut n = vec![0u8; 72];
        n[7] = 1;
        n[8] = 2;
        assert!(matches!(
            AuthMessage::decode(&n),
            Err(AuthWireError::BadNegotiate(_))
        ));
    }

    #[test]
    fn auth_commands_round_trip_and_bad_fields_are_located() {
        let s = AuthCommand::Send { tl: 72 }.to_sqe(5);
        let b = s.to_array();
        assert_eq!((b[0], b[4], b[41], b[42], b[43]), (0x7F, 5, 1, 1, 0xE9));
        assert_eq!(AuthCommand::from_sqe(&s), Ok(AuthCommand::Send { tl: 72 }));
        let r = AuthCommand::Receive { al: 4096 }.to_sqe(6);
        assert_eq!(
            AuthCommand::from_sqe(&r),
            Ok(AuthCommand::Receive { al: 4096 })
        );
        let mut bad = r.to_array();
        bad[43] = 0xEA;
        assert_eq!(
            AuthCommand::from_sqe(&Sqe::from_array(bad)),
            Err(AuthCommandError::InvalidField { offset: 43 })
        );
        let zero = AuthCommand::Send { tl: 0 }.to_sqe(1);
        assert_eq!(
            AuthCommand::from_sqe(&zero),
            Err(AuthCommandError::InvalidField { offset: 44 })
        );
    }

    #[test]
    fn names_parse() {
        assert_eq!(HashId::parse("hmac(sha384)"), Some(HashId::Sha384));
        assert_eq!(HashId::parse("SHA512"), Some(HashId::Sha512));
        assert_eq!(HashId::parse("md5"), None);
        assert_eq!(DhGroupId::parse("ffdhe6144"), Some(DhGroupId::Ffdhe6144));
        assert_eq!(DhGroupId::Ffdhe8192.value_len(), 1024);
    }
}
