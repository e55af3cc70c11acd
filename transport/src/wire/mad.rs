//! Management datagrams (MADs, IBTA Vol 1 §13.4): the 24-byte common MAD header and the
//! constants of the communication management class (IBTA Vol 1 ch. 12) that RoCE carries
//! in UD SEND Only packets to QP1 (Q_Key [`GSI_QKEY`](super::GSI_QKEY)).
//!
//! A MAD is always [`MAD_LEN`] (256) bytes: [`MadHeader`] followed by
//! [`MAD_DATA_LEN`] (232) bytes of class-specific data (for CM, one of the messages in
//! [`cm`](super::cm)). All fields are big endian.
use zerocopy::byteorder::network_endian::{U16, U32, U64};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout, Unaligned};

/// Length of every MAD, bytes (IBTA §13.4.1).
pub const MAD_LEN: usize = 256;
/// Length of the common MAD header, bytes (IBTA §13.4.2).
pub const MAD_HEADER_LEN: usize = 24;
/// Length of the MAD data following the common header, bytes (the CM message body).
pub const MAD_DATA_LEN: usize = MAD_LEN - MAD_HEADER_LEN;

/// BaseVersion of every MAD (IBTA §13.4.2).
pub const MAD_BASE_VERSION: u8 = 1;
/// MgmtClass of Communication Management (IBTA §13.4.4).
pub const MGMT_CLASS_CM: u8 = 0x07;
/// ClassVersion of the CM class that Linux ib_cm speaks (IBTA §12.11: version 2).
pub const CM_CLASS_VERSION: u8 = 2;

/// Method Get (IBTA §13.4.5).
pub const MAD_METHOD_GET: u8 = 0x01;
/// Method Set (IBTA §13.4.5).
pub const MAD_METHOD_SET: u8 = 0x02;
/// Method Send (IBTA §13.4.5): every CM message uses it.
pub const MAD_METHOD_SEND: u8 = 0x03;
/// The R bit of the Method byte: set on responses to Get/Set (IBTA §13.4.5).
pub const MAD_METHOD_RESPONSE: u8 = 0x80;

/// CM attribute ID: ClassPortInfo (IBTA §12.11.1, §13.4.8.1).
pub const CM_ATTR_CLASS_PORT_INFO: u16 = 0x0001;
/// CM attribute ID: ConnectRequest (REQ, IBTA §12.6.5).
pub const CM_ATTR_REQ: u16 = 0x0010;
/// CM attribute ID: MsgRcptAck (MRA, IBTA §12.6.6).
pub const CM_ATTR_MRA: u16 = 0x0011;
/// CM attribute ID: ConnectReject (REJ, IBTA §12.6.7).
pub const CM_ATTR_REJ: u16 = 0x0012;
/// CM attribute ID: ConnectReply (REP, IBTA §12.6.8).
pub const CM_ATTR_REP: u16 = 0x0013;
/// CM attribute ID: ReadyToUse (RTU, IBTA §12.6.9).
pub const CM_ATTR_RTU: u16 = 0x0014;
/// CM attribute ID: DisconnectRequest (DREQ, IBTA §12.6.10).
pub const CM_ATTR_DREQ: u16 = 0x0015;
/// CM attribute ID: DisconnectReply (DREP, IBTA §12.6.11).
pub const CM_ATTR_DREP: u16 = 0x0016;
/// CM attribute ID: ServiceIDResolutionRequest (SIDR_REQ, IBTA §12.11.2).
pub const CM_ATTR_SIDR_REQ: u16 = 0x0017;
/// CM attribute ID: ServiceIDResolutionResponse (SIDR_REP, IBTA §12.11.2).
pub const CM_ATTR_SIDR_REP: u16 = 0x0018;
/// CM attribute ID: LoadAlternatePath (LAP, IBTA §12.8.1).
pub const CM_ATTR_LAP: u16 = 0x0019;
/// CM attribute ID: AlternatePathResponse (APR, IBTA §12.8.2).
pub const CM_ATTR_APR: u16 = 0x001A;

/// The common MAD header (IBTA Vol 1 §13.4.2, Table 145), 24 bytes, big endian.
///
/// For CM messages: BaseVersion 1, MgmtClass 0x07, ClassVersion 2, Method 0x03 (Send),
/// Status 0, ClassSpecific 0, AttributeModifier 0. The TransactionID ties a response
/// (REP, REJ, MRA, DREP) to the request it answers: responders echo it.
#[derive(
    FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned, Clone, Copy, Debug, PartialEq, Eq,
)]
#[repr(C)]
pub struct MadHeader {
    /// BaseVersion: 1.
    pub base_version: u8,
    /// MgmtClass: 0x07 for CM.
    pub mgmt_class: u8,
    /// ClassVersion: 2 for CM.
    pub class_version: u8,
    /// Method, including the R (response) bit 7.
    pub method: u8,
    /// Status (IBTA §13.4.7): 0 in CM Sends.
    pub status: U16,
    /// ClassSpecific: 0 for CM.
    pub class_specific: U16,
    /// TransactionID.
    pub transaction_id: U64,
    /// AttributeID: which message follows (`CM_ATTR_*`).
    pub attribute_id: U16,
    /// Reserved, 0.
    pub reserved: U16,
    /// AttributeModifier: 0 for CM messages.
    pub attribute_modifier: U32,
}

const _: () = assert!(core::mem::size_of::<MadHeader>() == MAD_HEADER_LEN);

/// Why bytes are not a usable CM MAD.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum MadError {
    /// Fewer than [`MAD_LEN`] bytes.
    #[error("MAD too short: {0} bytes, need 256")]
    TooShort(usize),
    /// BaseVersion is not 1.
    #[error("unsupported MAD BaseVersion {0}")]
    BaseVersion(u8),
    /// MgmtClass is not CM (0x07).
    #[error("MgmtClass {0:#04x} is not CM (0x07)")]
    NotCm(u8),
    /// ClassVersion is not 2.
    #[error("unsupported CM ClassVersion {0}")]
    ClassVersion(u8),
    /// Method is not Send (0x03).
    #[error("unsupported CM method {0:#04x}")]
    Method(u8),
    /// AttributeID is not a CM message this crate implements.
    #[error("unsupported CM attribute {0:#06x}")]
    Attribute(u16),
}

impl MadHeader {
    /// The header of a CM message (Method Send) with `attribute_id` (`CM_ATTR_*`) and
    /// `transaction_id`.
    pub fn cm(attribute_id: u16, transaction_id: u64) -> Self {
        MadHeader {
            base_version: MAD_BASE_VERSION,
            mgmt_class: MGMT_CLASS_CM,
            class_version: CM_CLASS_VERSION,
            method: MAD_METHOD_SEND,
            status: U16::ZERO,
            class_specific: U16::ZERO,
            transaction_id: U64::new(transaction_id),
            attribute_id: U16::new(attribute_id),
            reserved: U16::ZERO,
            attribute_modifier: U32::ZERO,
        }
    }

    /// Splits a MAD into its header and its 232 data bytes, checking the length and
    /// that it is a CM (class 0x07, version 2) Send. Bytes past [`MAD_LEN`] are ignored.
    pub fn parse_cm(mad: &[u8]) -> Result<(MadHeader, &[u8]), MadError> {
        let mad = mad.get(..MAD_LEN).ok_or(MadError::TooShort(mad.len()))?;
        let (hdr, data) =
            MadHeader::read_from_prefix(mad).map_err(|_| MadError::TooShort(mad.len()))?;
        if hdr.base_version != MAD_BASE_VERSION {
            return Err(MadError::BaseVersion(hdr.base_version));
        }
        if hdr.mgmt_class != MGMT_CLASS_CM {
            return Err(MadError::NotCm(hdr.mgmt_class));
        }
        if hdr.class_version != CM_CLASS_VERSION {
            return Err(MadError::ClassVersion(hdr.class_version));
        }
        if hdr.method != MAD_METHOD_SEND {
            return Err(MadError::Method(hdr.method));
        }
        Ok((hdr, data))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cm_header_bytes() {
        // MAD header of the CM REQ in linux-nvme-rdma-rxe.pcap frame 4.
        let want: [u8; 24] = [
            0x01, 0x07, 0x02, 0x03, 0, 0, 0, 0, 0x00, 0x00, 0x00, 0x02, 0x4b, 0x9a, 0xf5, 0x54,
            0x00, 0x10, 0, 0, 0, 0, 0, 0,
        ];
        let h = MadHeader::cm(CM_ATTR_REQ, 0x0000_0002_4b9a_f554);
        assert_eq!(h.as_bytes(), &want);
        let mut mad = [0u8; MAD_LEN];
        mad[..24].copy_from_slice(&want);
        let (p, data) = MadHeader::parse_cm(&mad).unwrap();
        assert_eq!(p, h);
        assert_eq!(data.len(), MAD_DATA_LEN);
    }

    #[test]
    fn parse_rejects_bad_headers() {
        let mut mad = [0u8; MAD_LEN];
        mad[..24].copy_from_slice(MadHeader::cm(CM_ATTR_RTU, 1).as_bytes());
        assert_eq!(
            MadHeader::parse_cm(&mad[..255]),
            Err(MadError::TooShort(255))
        );
        let mut m = mad;
        m[0] = 2;
        assert_eq!(MadHeader::parse_cm(&m), Err(MadError::BaseVersion(2)));
        let mut m = mad;
        m[1] = 0x81;
        assert_eq!(MadHeader::parse_cm(&m), Err(MadError::NotCm(0x81)));
        let mut m = mad;
        m[2] = 1;
        assert_eq!(MadHeader::parse_cm(&m), Err(MadError::ClassVersion(1)));
        let mut m = mad;
        m[3] = MAD_METHOD_GET;
        assert_eq!(MadHeader::parse_cm(&m), Err(MadError::Method(1)));
    }
}
