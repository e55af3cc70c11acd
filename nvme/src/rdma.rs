//! NVMe/RDMA RDMA CM private data (NVMe RDMA Transport Specification 1.x
//! §3.3 "Connection Establishment"): what the host puts in the CM REQ
//! (after RDMA CM's own IP header), what the target answers in the REP or
//! REJ. All little endian.

use thiserror::Error;
use zerocopy::byteorder::little_endian::U16;
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout, Unaligned};

/// RECFMT 0: the only record format defined (NVMe RDMA Transport 1.0).
pub const NVME_RDMA_CM_FMT_1_0: u16 = 0;

/// RDMA_CM_REQUEST private data, 32 bytes (NVMe RDMA Transport 1.x §3.3
/// Figure "RDMA_CM_REQUEST Private Data Format").
///
/// HRQSIZE counts the host's receive queue entries (not 0's based); HSQSIZE
/// is the host's SQ size, 0's based (Linux admin queue: 32 and 31). CNTLID
/// (bytes 8..10, as in Linux's `struct nvme_rdma_cm_req`) is 0 from hosts
/// that do not set it.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, Hash, FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned,
)]
#[repr(C)]
pub struct RdmaCmRequest {
    recfmt: U16,
    qid: U16,
    hrqsize: U16,
    hsqsize: U16,
    cntlid: U16,
    rsvd: [u8; 22],
}
assert_size!(RdmaCmRequest, 32);

/// RDMA_CM_ACCEPT private data, 32 bytes (NVMe RDMA Transport 1.x §3.3):
/// RECFMT and CRQSIZE, the controller's receive queue size (= HSQSIZE + 1).
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, Hash, FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned,
)]
#[repr(C)]
pub struct RdmaCmAccept {
    recfmt: U16,
    crqsize: U16,
    rsvd: [u8; 28],
}
assert_size!(RdmaCmAccept, 32);

/// RDMA_CM_REJECT private data, 4 bytes (NVMe RDMA Transport 1.x §3.3):
/// RECFMT and STS, an [`RdmaCmRejectStatus`].
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, Hash, FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned,
)]
#[repr(C)]
pub struct RdmaCmReject {
    recfmt: U16,
    sts: U16,
}
assert_size!(RdmaCmReject, 4);

wire_enum! {
    /// RDMA_CM_REJECT status (STS), NVMe RDMA Transport 1.x §3.3 Figure
    /// "RDMA_CM_REJECT Status Codes" (Linux `NVME_RDMA_CM_*`).
    pub enum RdmaCmRejectStatus: u16 {
        /// Invalid private data length (01h): NVME_RDMA_CM_INVALID_LEN.
        InvalidLen = 0x01 => "Invalid Private Data Length",
        /// Invalid RECFMT (02h): NVME_RDMA_CM_INVALID_RECFMT.
        InvalidRecfmt = 0x02 => "Invalid RECFMT",
        /// Invalid QID (03h): NVME_RDMA_CM_INVALID_QID.
        InvalidQid = 0x03 => "Invalid Queue ID",
        /// Invalid HSQSIZE (04h): NVME_RDMA_CM_INVALID_HSQSIZE.
        InvalidHsqsize = 0x04 => "Invalid HSQSIZE",
        /// Invalid HRQSIZE (05h): NVME_RDMA_CM_INVALID_HRQSIZE.
        InvalidHrqsize = 0x05 => "Invalid HRQSIZE",
        /// No resources (06h): NVME_RDMA_CM_NO_RSC.
        NoResources = 0x06 => "No Resources",
        /// Invalid IRD (07h): NVME_RDMA_CM_INVALID_IRD.
        InvalidIrd = 0x07 => "Invalid IRD",
        /// Invalid ORD (08h): NVME_RDMA_CM_INVALID_ORD.
        InvalidOrd = 0x08 => "Invalid ORD",
        /// Invalid controller ID (09h): NVME_RDMA_CM_INVALID_CNTLID.
        InvalidCntlid = 0x09 => "Invalid Controller ID",
    }
}

/// Why CM private data was refused; each maps to the reject status to send.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Error)]
pub enum RdmaCmError {
    /// Fewer bytes than the structure needs.
    #[error("NVMe/RDMA private data of {len} bytes, need {need}")]
    TooShort {
        /// Bytes offered.
        len: usize,
        /// Bytes required.
        need: usize,
    },
    /// RECFMT other than 0.
    #[error("NVMe/RDMA RECFMT {recfmt} not supported")]
    UnsupportedRecfmt {
        /// RECFMT found.
        recfmt: u16,
    },
}

impl RdmaCmError {
    /// The NVMe/RDMA reject status for this error.
    pub const fn reject_status(&self) -> RdmaCmRejectStatus {
        match self {
            RdmaCmError::TooShort { .. } => RdmaCmRejectStatus::InvalidLen,
            RdmaCmError::UnsupportedRecfmt { .. } => RdmaCmRejectStatus::InvalidRecfmt,
        }
    }
}

impl RdmaCmRequest {
    /// A request for queue `qid` with HRQSIZE `hrqsize` and HSQSIZE
    /// `hsqsize_0based`, RECFMT 0, CNTLID 0.
    pub fn new(qid: u16, hrqsize: u16, hsqsize_0based: u16) -> Self {
        RdmaCmRequest {
            recfmt: U16::new(NVME_RDMA_CM_FMT_1_0),
            qid: U16::new(qid),
            hrqsize: U16::new(hrqsize),
            hsqsize: U16::new(hsqsize_0based),
            cntlid: U16::ZERO,
            rsvd: [0; 22],
        }
    }

    /// Reads the request from the start of the NVMe part of the CM REQ
    /// private data (after RDMA CM's IP header); extra bytes are ignored.
    ///
    /// Errors: [`RdmaCmError::TooShort`] under 32 bytes,
    /// [`RdmaCmError::UnsupportedRecfmt`] for RECFMT other than 0.
    pub fn parse(private_data: &[u8]) -> Result<Self, RdmaCmError> {
        let (req, _) =
            RdmaCmRequest::read_from_prefix(private_data).map_err(|_| RdmaCmError::TooShort {
                len: private_data.len(),
                need: core::mem::size_of::<Self>(),
            })?;
        if req.recfmt() != NVME_RDMA_CM_FMT_1_0 {
            return Err(RdmaCmError::UnsupportedRecfmt {
                recfmt: req.recfmt(),
            });
        }
        Ok(req)
    }

    /// Record format.
    pub fn recfmt(&self) -> u16 {
        self.recfmt.get()
    }

    /// Queue ID (0 = admin).
    pub fn qid(&self) -> u16 {
        self.qid.get()
    }

    /// Host receive queue size (entries, not 0's based).
    pub fn hrqsize(&self) -> u16 {
        self.hrqsize.get()
    }

    /// Host send queue size, 0's based.
    pub fn hsqsize(&self) -> u16 {
        self.hsqsize.get()
    }

    /// Number of SQ entries the host will use (HSQSIZE + 1).
    pub fn sq_entries(&self) -> u32 {
        u32::from(self.hsqsize()) + 1
    }

    /// Controller ID (bytes 8..10), 0 if not set.
    pub fn cntlid(&self) -> u16 {
        self.cntlid.get()
    }

    /// Sets CNTLID.
    pub fn set_cntlid(&mut self, cntlid: u16) {
        self.cntlid.set(cntlid);
    }
}

/// What a controller accepts in an RDMA_CM_REQUEST (see [`RdmaCmRequest::validate`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RdmaCmLimits {
    /// Largest admin SQ (HSQSIZE + 1) accepted: [`NVME_AQ_DEPTH`](crate::NVME_AQ_DEPTH)
    /// (32) for nvmet-rdma.
    pub max_admin_sq_entries: u32,
    /// Largest I/O SQ (HSQSIZE + 1) accepted (the controller's MQES + 1).
    pub max_io_sq_entries: u32,
    /// Largest queue ID accepted (0xFFFF is never valid).
    pub max_qid: u16,
}

impl RdmaCmRequest {
    /// Checks the request as a controller does before accepting the connection and
    /// returns the number of SQ entries (HSQSIZE + 1). The checks, in order: QID at most
    /// `max_qid` and not 0xFFFF ([`RdmaCmRejectStatus::InvalidQid`]); HSQSIZE + 1 between
    /// 2 and the admin or I/O limit ([`RdmaCmRejectStatus::InvalidHsqsize`], as nvmet-rdma
    /// for the admin queue); HRQSIZE at least HSQSIZE + 1, since the host receives one
    /// response per command ([`RdmaCmRejectStatus::InvalidHrqsize`]).
    pub fn validate(&self, limits: &RdmaCmLimits) -> Result<u32, RdmaCmRejectStatus> {
        if self.qid() == 0xFFFF || self.qid() > limits.max_qid {
            return Err(RdmaCmRejectStatus::InvalidQid);
        }
        let sq = self.sq_entries();
        let max = if self.qid() == 0 {
            limits.max_admin_sq_entries
        } else {
            limits.max_io_sq_entries
        };
        if sq < 2 || sq > max {
            return Err(RdmaCmRejectStatus::InvalidHsqsize);
        }
        if u32::from(self.hrqsize()) < sq {
            return Err(RdmaCmRejectStatus::InvalidHrqsize);
        }
        Ok(sq)
    }
}

/// The target's RDMA READ depth (its ORD, the REP's Initiator Depth) for a host that
/// accepts `host_ird` READs in flight (the REQ's Responder Resources), as nvmet-rdma
/// and SPDK negotiate it: `min(host_ird, max_ord)`. A host IRD of 0 leaves the target
/// no way to fetch host data: [`RdmaCmRejectStatus::InvalidIrd`]. (The host's own
/// Initiator Depth is tolerated whatever it is: an NVMe host never reads from the
/// target.)
pub fn negotiate_ord(host_ird: u8, max_ord: u8) -> Result<u8, RdmaCmRejectStatus> {
    if host_ird == 0 {
        return Err(RdmaCmRejectStatus::InvalidIrd);
    }
    Ok(host_ird.min(max_ord.max(1)))
}

impl RdmaCmAccept {
    /// An accept with RECFMT 0 and CRQSIZE `crqsize` (the number of
    /// receive entries the controller posts for this queue).
    pub fn new(crqsize: u16) -> Self {
        RdmaCmAccept {
            recfmt: U16::new(NVME_RDMA_CM_FMT_1_0),
            crqsize: U16::new(crqsize),
            rsvd: [0; 28],
        }
    }

    /// Reads the accept from the start of the CM REP private data.
    ///
    /// Errors: [`RdmaCmError::TooShort`] under 32 bytes,
    /// [`RdmaCmError::UnsupportedRecfmt`].
    pub fn parse(private_data: &[u8]) -> Result<Self, RdmaCmError> {
        let (acc, _) =
            RdmaCmAccept::read_from_prefix(private_data).map_err(|_| RdmaCmError::TooShort {
                len: private_data.len(),
                need: core::mem::size_of::<Self>(),
            })?;
        if acc.recfmt() != NVME_RDMA_CM_FMT_1_0 {
            return Err(RdmaCmError::UnsupportedRecfmt {
                recfmt: acc.recfmt(),
            });
        }
        Ok(acc)
    }

    /// Record format.
    pub fn recfmt(&self) -> u16 {
        self.recfmt.get()
    }

    /// Controller receive queue size (entries).
    pub fn crqsize(&self) -> u16 {
        self.crqsize.get()
    }
}

impl RdmaCmReject {
    /// A reject with RECFMT 0 and `status`.
    pub fn new(status: RdmaCmRejectStatus) -> Self {
        RdmaCmReject {
            recfmt: U16::new(NVME_RDMA_CM_FMT_1_0),
            sts: U16::new(status.value()),
        }
    }

    /// Reads the reject from the start of the CM REJ private data.
    ///
    /// Errors: [`RdmaCmError::TooShort`] under 4 bytes.
    pub fn parse(private_data: &[u8]) -> Result<Self, RdmaCmError> {
        RdmaCmReject::read_from_prefix(private_data)
            .map(|(r, _)| r)
            .map_err(|_| RdmaCmError::TooShort {
                len: private_data.len(),
                need: core::mem::size_of::<Self>(),
            })
    }

    /// Record format.
    pub fn recfmt(&self) -> u16 {
        self.recfmt.get()
    }

    /// STS as sent.
    pub fn sts(&self) -> u16 {
        self.sts.get()
    }

    /// STS decoded; `None` for a code this crate does not name.
    pub fn status(&self) -> Option<RdmaCmRejectStatus> {
        RdmaCmRejectStatus::from_value(self.sts())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::hex;

    #[test]
    fn capture_request() {
        // linux-nvme-rdma-rxe.pcap frame 4 (CM REQ, discovery admin queue):
        // NVMe/RDMA part of the private data = recfmt 0, qid 0, hrqsize 32,
        // hsqsize 31, then zeros.
        let mut wire = hex("0000 0000 2000 1f00");
        wire.resize(32, 0);
        let req = RdmaCmRequest::parse(&wire).unwrap();
        assert_eq!((req.qid(), req.hrqsize(), req.hsqsize()), (0, 32, 31));
        assert_eq!(req.sq_entries(), u32::from(crate::NVME_AQ_DEPTH));
        assert_eq!(RdmaCmRequest::new(0, 32, 31).as_bytes(), &wire[..]);
        // Frame 168 (I/O queue): qid 1, hrqsize 128, hsqsize 127.
        let mut wire = hex("0000 0100 8000 7f00");
        wire.resize(56, 0); // the rest of the REQ private data
        let req = RdmaCmRequest::parse(&wire).unwrap();
        assert_eq!(
            (req.qid(), req.hrqsize(), req.hsqsize(), req.cntlid()),
            (1, 128, 127, 0)
        );
        assert_eq!(RdmaCmRequest::new(1, 128, 127).as_bytes(), &wire[..32]);
    }

    #[test]
    fn capture_accept() {
        // Frame 5 (CM REP): recfmt 0, crqsize 32; frame 169: crqsize 128.
        let mut wire = hex("0000 2000");
        wire.resize(32, 0);
        assert_eq!(RdmaCmAccept::new(32).as_bytes(), &wire[..]);
        assert_eq!(RdmaCmAccept::parse(&wire).unwrap().crqsize(), 32);
        let mut wire = hex("0000 8000");
        wire.resize(32, 0);
        assert_eq!(RdmaCmAccept::parse(&wire).unwrap().crqsize(), 128);
    }

    #[test]
    fn validate_and_negotiate() {
        let limits = RdmaCmLimits {
            max_admin_sq_entries: 32,
            max_io_sq_entries: 128,
            max_qid: 8,
        };
        // Frame 4 (admin: 32 / 31) and frame 168 (I/O: 128 / 127) are accepted.
        assert_eq!(RdmaCmRequest::new(0, 32, 31).validate(&limits), Ok(32));
        assert_eq!(RdmaCmRequest::new(1, 128, 127).validate(&limits), Ok(128));
        let bad = |qid, hrq, hsq| RdmaCmRequest::new(qid, hrq, hsq).validate(&limits);
        assert_eq!(bad(9, 32, 31), Err(RdmaCmRejectStatus::InvalidQid));
        assert_eq!(bad(0xFFFF, 32, 31), Err(RdmaCmRejectStatus::InvalidQid));
        assert_eq!(bad(0, 33, 32), Err(RdmaCmRejectStatus::InvalidHsqsize));
        assert_eq!(bad(1, 129, 128), Err(RdmaCmRejectStatus::InvalidHsqsize));
        assert_eq!(bad(1, 2, 0), Err(RdmaCmRejectStatus::InvalidHsqsize));
        assert_eq!(bad(1, 16, 31), Err(RdmaCmRejectStatus::InvalidHrqsize));
        // Linux host IRD 0x80 against a target ORD limit of 16; rping-like IRD 1.
        assert_eq!(negotiate_ord(0x80, 16), Ok(16));
        assert_eq!(negotiate_ord(1, 16), Ok(1));
        assert_eq!(negotiate_ord(0, 16), Err(RdmaCmRejectStatus::InvalidIrd));
        assert_eq!(RdmaCmRejectStatus::InvalidIrd.value(), 7);
        assert_eq!(RdmaCmRejectStatus::InvalidOrd.value(), 8);
    }

    #[test]
    fn reject_and_errors() {
        let rej = RdmaCmReject::new(RdmaCmRejectStatus::InvalidHsqsize);
        assert_eq!(rej.as_bytes(), &[0, 0, 4, 0]);
        let back = RdmaCmReject::parse(rej.as_bytes()).unwrap();
        assert_eq!(back.status(), Some(RdmaCmRejectStatus::InvalidHsqsize));
        assert_eq!(RdmaCmRejectStatus::InvalidCntlid.value(), 9);
        assert_eq!(RdmaCmRejectStatus::NoResources.value(), 6);
        let e = RdmaCmRequest::parse(&[0; 31]).unwrap_err();
        assert_eq!(e, RdmaCmError::TooShort { len: 31, need: 32 });
        assert_eq!(e.reject_status(), RdmaCmRejectStatus::InvalidLen);
        let mut bad = [0u8; 32];
        bad[0] = 1;
        let e = RdmaCmRequest::parse(&bad).unwrap_err();
        assert_eq!(e.reject_status(), RdmaCmRejectStatus::InvalidRecfmt);
        assert!(RdmaCmAccept::parse(&bad).is_err());
        assert!(RdmaCmReject::parse(&[0; 3]).is_err());
        let mut r = RdmaCmRequest::new(2, 128, 127);
        r.set_cntlid(1);
        assert_eq!(&r.as_bytes()[8..10], &[1, 0]);
    }
}
