//! Asymmetric Namespace Access (ANA, NVMe Base 2.x §8.1.1 / 2.0 §8.20): the
//! ANA states, the ANA log page (LID 0Ch, §5.16.1.12), the ANA Change
//! asynchronous event and the path related statuses a controller answers
//! with when a namespace's group is not accessible through it.
//!
//! Log page layout (all little endian):
//!
//! | bytes | header (16) |
//! |---|---|
//! | 0..8 | Change Count |
//! | 8..10 | Number of ANA Group Descriptors |
//! | 10..16 | reserved |
//!
//! | bytes | group descriptor (32 + 4 x NNSID) |
//! |---|---|
//! | 0..4 | ANA Group ID (ANAGRPID) |
//! | 4..8 | Number of NSID Values (NNSID) |
//! | 8..16 | Change Count |
//! | 16 | ANA State (bits 3:0) |
//! | 17..32 | reserved |
//! | 32.. | NSIDs, in ascending order |
//!
//! With Return Groups Only (RGO, bit 0 of the Get Log Page LSP) the
//! descriptors carry NNSID 0 and no NSIDs.

use thiserror::Error;
use zerocopy::byteorder::little_endian::{U16, U32, U64};
use zerocopy::{FromBytes, FromZeros, Immutable, IntoBytes, KnownLayout, Unaligned};

use crate::features::{AsyncEvent, AsyncEventType, AEN_NOTICE_ANA_CHANGE};
use crate::status::{PathStatus, Status};

wire_enum! {
    /// ANA State (group descriptor byte 16 bits 3:0), NVMe Base 2.x §8.1.1.
    pub enum AnaState: u8 {
        /// ANA Optimized state (01h).
        Optimized = 0x01 => "optimized",
        /// ANA Non-Optimized state (02h).
        NonOptimized = 0x02 => "non-optimized",
        /// ANA Inaccessible state (03h).
        Inaccessible = 0x03 => "inaccessible",
        /// ANA Persistent Loss state (04h).
        PersistentLoss = 0x04 => "persistent-loss",
        /// ANA Change state (0Fh).
        Change = 0x0F => "change",
    }
}

impl AnaState {
    /// Whether commands that access the namespace's media are executed in
    /// this state (optimized and non-optimized).
    pub const fn is_accessible(self) -> bool {
        matches!(self, AnaState::Optimized | AnaState::NonOptimized)
    }

    /// The path related status (SCT 3h) a controller answers a command
    /// that needs the namespace with, in a state that refuses it; `None`
    /// in an accessible state (§8.1.1.3-8.1.1.5).
    pub const fn path_status(self) -> Option<Status> {
        match self {
            AnaState::Optimized | AnaState::NonOptimized => None,
            AnaState::Inaccessible => Some(Status::path(PathStatus::AnaInaccessible)),
            AnaState::PersistentLoss => Some(Status::path(PathStatus::AnaPersistentLoss)),
            AnaState::Change => Some(Status::path(PathStatus::AnaTransition)),
        }
    }

    /// Parses the names [`name`](Self::name) gives (as nvmetcli writes
    /// them: "optimized", "non-optimized", "inaccessible",
    /// "persistent-loss", "change"); `None` for any other.
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.iter().copied().find(|s| s.name() == name)
    }
}

/// Get Log Page LSP bit 0 for the ANA log: Return Groups Only (RGO).
pub const ANA_LOG_LSP_RGO: u8 = 1 << 0;

/// The largest ANAGRPID a Linux host accepts as ANAGRPMAX without limits of
/// its own, and what this project's target reports as ANAGRPMAX and
/// NANAGRPID (Linux nvmet: `NVMET_MAX_ANAGRPS` = 128).
pub const ANA_MAX_GROUPS: u32 = 128;

/// ANACAP bits 4:0: the controller reports the optimized (0), non-optimized
/// (1), inaccessible (2), persistent loss (3) and change (4) states (Linux
/// nvmet: 1Fh). Bit 6 (ANAGRPID does not change while attached) and bit 7
/// (non-zero ANAGRPID in Namespace Management) are not claimed.
pub const ANACAP_ALL_STATES: u8 = 0x1F;

/// CMIC bit 0: the subsystem may have more than one port.
pub const CMIC_MULTI_PORT: u8 = 1 << 0;
/// CMIC bit 1: the subsystem may have two or more controllers.
pub const CMIC_MULTI_CONTROLLER: u8 = 1 << 1;
/// CMIC bit 3: the controller reports Asymmetric Namespace Access.
pub const CMIC_ANA_REPORTING: u8 = 1 << 3;

/// The Asynchronous Event Request completion DW0 of an ANA change notice:
/// type Notice (2h), information ANA Change (03h), log page 0Ch =
/// 000C0302h (§5.2.1).
pub const ANA_CHANGE_AEN_DW0: u32 = AsyncEvent::new(
    AsyncEventType::Notice,
    AEN_NOTICE_ANA_CHANGE,
    crate::opcodes::LogPageId::AnaLog as u8,
)
.to_dw0();

/// ANA log page header, 16 bytes.
#[derive(
    Clone, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned,
)]
#[repr(C)]
pub struct AnaLogHeader {
    /// Change Count: incremented whenever the log changes.
    pub chgcnt: U64,
    /// Number of ANA Group Descriptors.
    pub ngrps: U16,
    /// Reserved.
    pub rsvd10: [u8; 6],
}
assert_size!(AnaLogHeader, 16);

/// ANA group descriptor without its NSID list, 32 bytes.
#[derive(
    Clone, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned,
)]
#[repr(C)]
pub struct AnaGroupDescHeader {
    /// ANA Group ID.
    pub grpid: U32,
    /// Number of NSID Values that follow.
    pub nnsids: U32,
    /// Change Count of this group.
    pub chgcnt: U64,
    /// ANA State, bits 3:0 ([`AnaState`]).
    pub state: u8,
    /// Reserved.
    pub rsvd17: [u8; 15],
}
assert_size!(AnaGroupDescHeader, 32);

/// One ANA group as the log page reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AnaGroupDesc {
    /// ANA Group ID (1..=ANAGRPMAX).
    pub grpid: u32,
    /// Change Count of this group.
    pub chgcnt: u64,
    /// The group's state through the controller that reports it.
    pub state: AnaState,
    /// The attached namespaces in the group, ascending; empty under RGO.
    pub nsids: Vec<u32>,
}

impl AnaGroupDesc {
    /// Bytes this descriptor takes in the log: 32, plus 4 per NSID unless
    /// `rgo`.
    pub fn encoded_len(&self, rgo: bool) -> usize {
        32 + if rgo { 0 } else { 4 * self.nsids.len() }
    }
}

/// The ANA log page (LID 0Ch) of one controller.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AnaLog {
    /// Change Count of the whole log.
    pub chgcnt: u64,
    /// The group descriptors, in the order they appear.
    pub groups: Vec<AnaGroupDesc>,
}

/// Why bytes are not an ANA log page.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Error)]
pub enum AnaLogError {
    /// The data ends before the header, a descriptor or its NSID list.
    #[error("ANA log truncated: {needed} bytes needed at offset {offset}, {len} present")]
    Truncated {
        /// Where the missing piece starts.
        offset: usize,
        /// Bytes the piece needs.
        needed: usize,
        /// Length of the data.
        len: usize,
    },
    /// A descriptor's ANAGRPID is 0, which names no group.
    #[error("ANA group descriptor {index} has ANAGRPID 0")]
    ZeroGroupId {
        /// Position of the descriptor (0-based).
        index: usize,
    },
    /// A descriptor's state is none of the defined ANA states.
    #[error("ANA group {grpid} has unknown state {value:#x}")]
    UnknownState {
        /// The group.
        grpid: u32,
        /// Bits 3:0 of byte 16.
        value: u8,
    },
}

impl AnaLog {
    /// Bytes [`encode`](Self::encode) writes: the 16-byte header and each
    /// descriptor's [`AnaGroupDesc::encoded_len`].
    pub fn encoded_len(&self, rgo: bool) -> usize {
        16 + self
            .groups
            .iter()
            .map(|g| g.encoded_len(rgo))
            .sum::<usize>()
    }

    /// The log page bytes; with `rgo` (Return Groups Only) every descriptor
    /// has NNSID 0 and no NSIDs. NGRPS saturates at 65535 descriptors.
    pub fn encode(&self, rgo: bool) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.encoded_len(rgo));
        let mut hdr = AnaLogHeader::new_zeroed();
        hdr.chgcnt.set(self.chgcnt);
        hdr.ngrps
            .set(u16::try_from(self.groups.len()).unwrap_or(u16::MAX));
        out.extend_from_slice(hdr.as_bytes());
        for g in self.groups.iter().take(usize::from(u16::MAX)) {
            let mut d = AnaGroupDescHeader::new_zeroed();
            d.grpid.set(g.grpid);
            d.chgcnt.set(g.chgcnt);
            d.state = g.state.value();
            if !rgo {
                d.nnsids
                    .set(u32::try_from(g.nsids.len()).unwrap_or(u32::MAX));
            }
            out.extend_from_slice(d.as_bytes());
            if !rgo {
                for nsid in &g.nsids {
                    out.extend_from_slice(&nsid.to_le_bytes());
                }
            }
        }
        out
    }

    /// Reads a log page: the header, then NGRPS descriptors with NNSID
    /// NSIDs each. Bytes after the last descriptor are ignored (a host
    /// reads a buffer sized for the most groups and namespaces).
    ///
    /// Errors: [`AnaLogError::Truncated`] when the data ends inside the
    /// header, a descriptor or its NSID list; [`AnaLogError::ZeroGroupId`]
    /// and [`AnaLogError::UnknownState`] for a descriptor no controller may
    /// send. Never panics.
    pub fn decode(data: &[u8]) -> Result<AnaLog, AnaLogError> {
        let truncated = |offset: usize, needed: usize| AnaLogError::Truncated {
            offset,
            needed,
            len: data.len(),
        };
        let (hdr, _) = AnaLogHeader::ref_from_prefix(data).map_err(|_| truncated(0, 16))?;
        let mut offset = 16;
        let ngrps = usize::from(hdr.ngrps.get());
        let mut groups = Vec::with_capacity(ngrps.min(data.len() / 32));
        for index in 0..ngrps {
            let rest = data.get(offset..).unwrap_or(&[]);
            let (d, rest) =
                AnaGroupDescHeader::ref_from_prefix(rest).map_err(|_| truncated(offset, 32))?;
            let grpid = d.grpid.get();
            if grpid == 0 {
                return Err(AnaLogError::ZeroGroupId { index });
            }
            let value = d.state & 0x0F;
            let state =
                AnaState::from_value(value).ok_or(AnaLogError::UnknownState { grpid, value })?;
            let nnsids = usize::try_from(d.nnsids.get()).unwrap_or(usize::MAX);
            let list_len = nnsids.saturating_mul(4);
            let list = rest
                .get(..list_len)
                .ok_or(truncated(offset + 32, list_len))?;
            let nsids = list
                .chunks_exact(4)
                .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                .collect();
            groups.push(AnaGroupDesc {
                grpid,
                chgcnt: d.chgcnt.get(),
                state,
                nsids,
            });
            offset += 32 + list_len;
        }
        Ok(AnaLog {
            chgcnt: hdr.chgcnt.get(),
            groups,
        })
    }

    /// The descriptor of group `grpid`, if the log has it.
    pub fn group(&self, grpid: u32) -> Option<&AnaGroupDesc> {
        self.groups.iter().find(|g| g.grpid == grpid)
    }

    /// The state of the group holding namespace `nsid` (`None` when no
    /// descriptor lists it, as under RGO).
    pub fn state_of_nsid(&self, nsid: u32) -> Option<AnaState> {
        self.groups
            .iter()
            .find(|g| g.nsids.contains(&nsid))
            .map(|g| g.state)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::{assert_bytes_eq, sparse};

    #[test]
    fn capture_ana_log() {
        // linux-nvme-rdma-rxe.pcap frame 146 (RDMA WRITE First, after the
        // 16-byte RETH): nvmet's ANA log: change count 1, one group; group 1,
        // one NSID, change count 0, optimized; NSID 1. Zero to the end of
        // the host's 8208-byte buffer.
        let wire = sparse(
            8208,
            &[
                (0, "0100000000000000 0100"),
                (16, "01000000 01000000 0000000000000000 01"),
                (48, "01000000"),
            ],
        );
        let log = AnaLog::decode(&wire).unwrap();
        assert_eq!(
            log,
            AnaLog {
                chgcnt: 1,
                groups: vec![AnaGroupDesc {
                    grpid: 1,
                    chgcnt: 0,
                    state: AnaState::Optimized,
                    nsids: vec![1],
                }],
            }
        );
        assert_bytes_eq(&log.encode(false), &wire[..52]);
        assert_eq!(log.encoded_len(false), 52);
        assert_eq!(log.state_of_nsid(1), Some(AnaState::Optimized));
        assert_eq!(log.state_of_nsid(2), None);
    }

    #[test]
    fn rgo_drops_nsids() {
        let log = AnaLog {
            chgcnt: 7,
            groups: vec![
                AnaGroupDesc {
                    grpid: 1,
                    chgcnt: 3,
                    state: AnaState::Inaccessible,
                    nsids: vec![1, 3],
                },
                AnaGroupDesc {
                    grpid: 2,
                    chgcnt: 4,
                    state: AnaState::Change,
                    nsids: vec![2],
                },
            ],
        };
        let full = log.encode(false);
        assert_eq!(full.len(), 16 + 32 + 8 + 32 + 4);
        assert_eq!(AnaLog::decode(&full).unwrap(), log);
        let rgo = log.encode(true);
        assert_eq!(rgo.len(), 16 + 64);
        assert_eq!(&rgo[16 + 4..16 + 8], &[0, 0, 0, 0], "NNSID 0 under RGO");
        assert_eq!(rgo[16 + 32 + 16], 0x0F);
        let back = AnaLog::decode(&rgo).unwrap();
        assert_eq!(back.groups.len(), 2);
        assert!(back.groups.iter().all(|g| g.nsids.is_empty()));
        assert_eq!(back.group(2).map(|g| g.state), Some(AnaState::Change));
    }

    #[test]
    fn decode_refuses_bad_input() {
        assert!(matches!(
            AnaLog::decode(&[0; 15]),
            Err(AnaLogError::Truncated { offset: 0, .. })
        ));
        // One group announced, none present.
        let mut b = sparse(16, &[(8, "0100")]);
        assert!(matches!(
            AnaLog::decode(&b),
            Err(AnaLogError::Truncated { offset: 16, .. })
        ));
        // Group 1 with 2 NSIDs, one present.
        b.extend_from_slice(&sparse(36, &[(0, "01000000 02000000"), (16, "01")]));
        assert!(matches!(
            AnaLog::decode(&b),
            Err(AnaLogError::Truncated {
                offset: 48,
                needed: 8,
                ..
            })
        ));
        // A huge NNSID neither panics nor allocates.
        b[20..24].copy_from_slice(&[0xff; 4]);
        assert!(matches!(
            AnaLog::decode(&b),
            Err(AnaLogError::Truncated { .. })
        ));
        b[20..24].copy_from_slice(&[1, 0, 0, 0]);
        assert_eq!(AnaLog::decode(&b).unwrap().groups[0].nsids, vec![0]);
        b[32] = 0x05;
        assert_eq!(
            AnaLog::decode(&b),
            Err(AnaLogError::UnknownState { grpid: 1, value: 5 })
        );
        b[32] = 0x01;
        b[16] = 0;
        assert_eq!(
            AnaLog::decode(&b),
            Err(AnaLogError::ZeroGroupId { index: 0 })
        );
    }

    #[test]
    fn states_statuses_and_event() {
        assert_eq!(ANA_CHANGE_AEN_DW0, 0x000C_0302);
        assert_eq!(
            CMIC_MULTI_PORT | CMIC_MULTI_CONTROLLER | CMIC_ANA_REPORTING,
            0x0B
        );
        assert_eq!(AnaState::Optimized.path_status(), None);
        assert_eq!(AnaState::NonOptimized.path_status(), None);
        // Linux: NVME_SC_ANA_PERSISTENT_LOSS 301h, INACCESSIBLE 302h,
        // TRANSITION 303h (SCT 3 in bits 10:8 of the status, SC in 7:0).
        for (s, sc) in [
            (AnaState::PersistentLoss, 0x01),
            (AnaState::Inaccessible, 0x02),
            (AnaState::Change, 0x03),
        ] {
            let st = s.path_status().unwrap();
            assert_eq!((st.sct as u8, st.sc), (3, sc));
            assert!(!s.is_accessible());
        }
        for s in AnaState::ALL {
            assert_eq!(AnaState::from_name(s.name()), Some(*s));
        }
        assert_eq!(AnaState::from_name("standby"), None);
    }
}
