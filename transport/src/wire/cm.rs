//! Communication management messages (IBTA Vol 1 §12.6) as they follow the MAD header
//! ([`MadHeader`]), and the RDMA CM IP header ([`CmaHeader`]) that librdmacm / the
//! kernel's rdma_cm put in front of the user's private data of a REQ.
//!
//! Every message is [`MAD_DATA_LEN`] (232) bytes, big endian, as a zerocopy
//! `#[repr(C)]` struct. Fields narrower than a byte or 24 bits wide share a byte or a
//! 32-bit word with their neighbours as on the wire; they are reached through accessor
//! methods (`local_qpn()` / `set_local_qpn()`, ...), whose setters drop bits above the
//! field width. [`CmMessage`] decodes a whole 256-byte MAD and encodes one back.
//!
//! Layouts checked byte for byte against Linux ib_cm traffic in `shared/captures/`
//! (see the tests).
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use zerocopy::byteorder::network_endian::{U16, U32, U64};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout, Unaligned};

use super::mad::*;

/// Private data bytes of a REQ (IBTA §12.6.5).
pub const REQ_PRIVATE_DATA_LEN: usize = 92;
/// Private data bytes of an MRA (IBTA §12.6.6).
pub const MRA_PRIVATE_DATA_LEN: usize = 222;
/// Private data bytes of a REJ (IBTA §12.6.7).
pub const REJ_PRIVATE_DATA_LEN: usize = 148;
/// Additional Rejection Information bytes of a REJ (IBTA §12.6.7).
pub const REJ_ARI_LEN: usize = 72;
/// Private data bytes of a REP (IBTA §12.6.8).
pub const REP_PRIVATE_DATA_LEN: usize = 196;
/// Private data bytes of an RTU (IBTA §12.6.9).
pub const RTU_PRIVATE_DATA_LEN: usize = 224;
/// Private data bytes of a DREQ (IBTA §12.6.10).
pub const DREQ_PRIVATE_DATA_LEN: usize = 220;
/// Private data bytes of a DREP (IBTA §12.6.11).
pub const DREP_PRIVATE_DATA_LEN: usize = 224;

/// REQ Transport Service Type: Reliable Connection (IBTA §12.6.5).
pub const CM_TRANSPORT_RC: u8 = 0;
/// REQ Transport Service Type: Unreliable Connection.
pub const CM_TRANSPORT_UC: u8 = 1;
/// REQ Transport Service Type: Reliable Datagram.
pub const CM_TRANSPORT_RD: u8 = 2;

/// REJ "MessageREJected" / MRA "MessageMRAed" value: the REQ (IBTA §12.6.6, §12.6.7).
pub const CM_MSG_REQ: u8 = 0;
/// REJ "MessageREJected" / MRA "MessageMRAed" value: the REP.
pub const CM_MSG_REP: u8 = 1;
/// REJ "MessageREJected": no message identified; MRA "MessageMRAed": the LAP.
pub const CM_MSG_OTHER: u8 = 2;

/// REJ reason (IBTA §12.6.7.2, Table 112): no QP available.
pub const CM_REJ_NO_QP: u16 = 1;
/// REJ reason: insufficient resources.
pub const CM_REJ_NO_RESOURCES: u16 = 3;
/// REJ reason: timeout (a REP went unanswered).
pub const CM_REJ_TIMEOUT: u16 = 4;
/// REJ reason: the request is not supported.
pub const CM_REJ_UNSUPPORTED: u16 = 5;
/// REJ reason: invalid communication ID (e.g. a REP for no known REQ).
pub const CM_REJ_INVALID_COMM_ID: u16 = 6;
/// REJ reason: invalid communication instance.
pub const CM_REJ_INVALID_COMM_INSTANCE: u16 = 7;
/// REJ reason: invalid service ID (nobody listens on it).
pub const CM_REJ_INVALID_SERVICE_ID: u16 = 8;
/// REJ reason: invalid transport service type.
pub const CM_REJ_INVALID_TRANSPORT_TYPE: u16 = 9;
/// REJ reason: stale connection.
pub const CM_REJ_STALE_CONN: u16 = 10;
/// REJ reason: invalid GID.
pub const CM_REJ_INVALID_GID: u16 = 12;
/// REJ reason: invalid path MTU.
pub const CM_REJ_INVALID_MTU: u16 = 26;
/// REJ reason: insufficient responder resources.
pub const CM_REJ_INSUFFICIENT_RESP_RESOURCES: u16 = 27;
/// REJ reason: consumer defined; the private data says why (NVMe/RDMA rejects use it).
pub const CM_REJ_CONSUMER_DEFINED: u16 = 28;
/// REJ reason: invalid RNR retry count.
pub const CM_REJ_INVALID_RNR_RETRY: u16 = 29;
/// REJ reason: duplicate local communication ID.
pub const CM_REJ_DUPLICATE_LOCAL_COMM_ID: u16 = 30;
/// REJ reason: invalid class version.
pub const CM_REJ_INVALID_CLASS_VERSION: u16 = 31;

/// REJ reason: vendor option not supported (Linux `IB_CM_REJ_VENDOR_OPTION_NOT_SUPPORTED`).
pub const CM_REJ_VENDOR_OPTION_NOT_SUPPORTED: u16 = 35;

/// REQ VendorID meaning "this side's RC QPs do selective retransmission" (our
/// extension; see [`CmReq::vendor_id`]). The value is a locally administered
/// OUI-shaped number (bit 1 of the first octet set, so no IEEE-assigned vendor has it):
/// 0x02 'S' 'R'. Linux kernel ULPs (nvme-rdma, nvmet-rdma) send 0 and never look at the
/// field.
pub const VENDOR_ID_SR_REQ: u32 = 0x02_53_52;
/// REP VendorID meaning "this side's RC QPs do selective retransmission": 0x02 'S' 'A'.
/// It differs from [`VENDOR_ID_SR_REQ`] on purpose: librdmacm's `rdma_accept` echoes
/// the REQ's vendor ID in its REP (`ucma_copy_ece_param_to_kern_rep`), and an echo must
/// not read as support.
pub const VENDOR_ID_SR_REP: u32 = 0x02_53_41;

/// RDMA CM port space TCP (`RDMA_PS_TCP`), the port space of RDMA_CM_ID with RC QPs.
pub const RDMA_PS_TCP: u16 = 0x0106;
/// RDMA CM port space UDP (`RDMA_PS_UDP`).
pub const RDMA_PS_UDP: u16 = 0x0111;
/// Service ID prefix of RDMA CM's IP-based port spaces (`RDMA_IB_IP_PS_MASK`).
pub const RDMA_IB_IP_PS_MASK: u64 = 0xFFFF_FFFF_FFFF_0000;
/// Service ID of the TCP port space with port 0 (`RDMA_IB_IP_PS_TCP`).
pub const RDMA_IB_IP_PS_TCP: u64 = 0x0000_0000_0106_0000;

/// The RDMA CM service ID of `port` in the TCP port space:
/// `0x0000000001060000 | port` (4420 -> 0x0000000001061144).
pub const fn service_id_tcp(port: u16) -> u64 {
    RDMA_IB_IP_PS_TCP | port as u64
}

/// The port of an RDMA CM TCP port space service ID, `None` for other service IDs.
pub const fn service_id_tcp_port(service_id: u64) -> Option<u16> {
    if service_id & RDMA_IB_IP_PS_MASK == RDMA_IB_IP_PS_TCP {
        Some(service_id as u16)
    } else {
        None
    }
}

/// The GID RoCEv2 uses for an IP address (RoCEv2 Annex A17.4.5.1): an IPv6 address as
/// is, an IPv4 address IPv4-mapped (`::ffff:a.b.c.d`).
pub fn gid_from_ip(ip: IpAddr) -> [u8; 16] {
    match ip {
        IpAddr::V4(v4) => v4.to_ipv6_mapped().octets(),
        IpAddr::V6(v6) => v6.octets(),
    }
}

/// The IP address of a RoCEv2 GID: IPv4 for an IPv4-mapped GID, IPv6 otherwise.
pub fn ip_from_gid(gid: [u8; 16]) -> IpAddr {
    let v6 = Ipv6Addr::from(gid);
    match v6.to_ipv4_mapped() {
        Some(v4) => IpAddr::V4(v4),
        None => IpAddr::V6(v6),
    }
}

const fn mask(width: u32) -> u32 {
    if width >= 32 {
        u32::MAX
    } else {
        (1 << width) - 1
    }
}

/// Accessor pair for a bit field inside a big-endian `U32` word; `shift` counts from
/// the least significant bit of the word.
macro_rules! bits32 {
    ($(#[$doc:meta])* $get:ident, $set:ident, $field:ident, $shift:expr, $width:expr, $ty:ty) => {
        $(#[$doc])*
        pub fn $get(&self) -> $ty {
            ((self.$field.get() >> $shift) & mask($width)) as $ty
        }
        #[doc = concat!("Sets the field read by [`Self::", stringify!($get), "`] (", stringify!($width), " bits).")]
        pub fn $set(&mut self, v: $ty) {
            let m = mask($width) << $shift;
            self.$field.set((self.$field.get() & !m) | (((v as u32) << $shift) & m));
        }
    };
}

/// Accessor pair for a bit field inside a byte; `shift` counts from the least
/// significant bit.
macro_rules! bits8 {
    ($(#[$doc:meta])* $get:ident, $set:ident, $field:ident, $shift:expr, $width:expr) => {
        $(#[$doc])*
        pub fn $get(&self) -> u8 {
            ((self.$field as u32 >> $shift) & mask($width)) as u8
        }
        #[doc = concat!("Sets the field read by [`Self::", stringify!($get), "`] (", stringify!($width), " bits).")]
        pub fn $set(&mut self, v: u8) {
            let m = (mask($width) << $shift) as u8;
            self.$field = (self.$field & !m) | (((v as u32) << $shift) as u8 & m);
        }
    };
}

/// A CM path description as carried in the REQ (primary and alternate, IBTA §12.6.5,
/// REQ bytes 52..96 and 96..140), 44 bytes.
///
/// On RoCE, LIDs are 0xFFFF (permissive), the GIDs are the IP addresses
/// ([`gid_from_ip`]), and the flow label seeds the UDP source port of the RC QP.
#[derive(
    FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned, Clone, Copy, Debug, PartialEq, Eq,
)]
#[repr(C)]
pub struct CmPath {
    /// Local Port LID.
    pub local_lid: U16,
    /// Remote Port LID.
    pub remote_lid: U16,
    /// Local Port GID.
    pub local_gid: [u8; 16],
    /// Remote Port GID.
    pub remote_gid: [u8; 16],
    /// Flow Label (20 bits), reserved (6), Packet Rate (6).
    flow_label_rate: U32,
    /// Traffic Class.
    pub traffic_class: u8,
    /// Hop Limit.
    pub hop_limit: u8,
    /// SL (4 bits), Subnet Local (1), reserved (3).
    sl_subnet_local: u8,
    /// Local ACK Timeout (5 bits), reserved (3).
    local_ack_timeout_byte: u8,
}

const _: () = assert!(core::mem::size_of::<CmPath>() == 44);

impl CmPath {
    bits32!(
        /// Flow Label, 20 bits.
        flow_label, set_flow_label, flow_label_rate, 12, 20, u32
    );
    bits32!(
        /// Packet Rate (IBTA §9.11.1 rate code), 6 bits; Linux sends 0 on RoCE.
        packet_rate, set_packet_rate, flow_label_rate, 0, 6, u8
    );
    bits8!(
        /// Service Level, 4 bits.
        sl, set_sl, sl_subnet_local, 4, 4
    );
    bits8!(
        /// Subnet Local bit.
        subnet_local, set_subnet_local, sl_subnet_local, 3, 1
    );
    bits8!(
        /// Local ACK Timeout (4.096 us x 2^value), 5 bits.
        local_ack_timeout, set_local_ack_timeout, local_ack_timeout_byte, 3, 5
    );
}

/// ConnectRequest (REQ, IBTA §12.6.5, Table 99), 232 bytes.
#[derive(
    FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned, Clone, Copy, Debug, PartialEq, Eq,
)]
#[repr(C)]
pub struct CmReq {
    /// Local Communication ID of the sender.
    pub local_comm_id: U32,
    /// Reserved (8 bits), VendorID (24 bits): see [`CmReq::vendor_id`].
    vendor_word: U32,
    /// ServiceID (RDMA CM: [`service_id_tcp`]).
    pub service_id: U64,
    /// Local CA GUID.
    pub local_ca_guid: U64,
    reserved24: [u8; 4],
    /// Local Q_Key (0 for RC).
    pub local_qkey: U32,
    /// Local QPN (24 bits), Responder Resources (8).
    qpn_resp_res: U32,
    /// Local EECN (24 bits), Initiator Depth (8).
    eecn_init_depth: U32,
    /// Remote EECN (24), Remote CM Response Timeout (5), Transport Service Type (2),
    /// End-to-End Flow Control (1).
    remote_eecn_flags: U32,
    /// Starting PSN (24), Local CM Response Timeout (5), Retry Count (3).
    psn_flags: U32,
    /// Partition Key.
    pub partition_key: U16,
    /// Path Packet Payload MTU (4), RDC Exists (1), RNR Retry Count (3).
    mtu_rnr: u8,
    /// Max CM Retries (4), SRQ (1), Extended Transport Type (3).
    retries_srq: u8,
    /// Primary path.
    pub primary_path: CmPath,
    /// Alternate path (all zero: no alternate path).
    pub alternate_path: CmPath,
    /// Private data; under RDMA CM it starts with a [`CmaHeader`].
    pub private_data: [u8; REQ_PRIVATE_DATA_LEN],
}

const _: () = assert!(core::mem::size_of::<CmReq>() == MAD_DATA_LEN);

impl CmReq {
    bits32!(
        /// VendorID, 24 bits (REQ bytes 5..8; IBTA §12.6.5, Linux `CM_REQ_VENDOR_ID`, the
        /// "ECE" vendor ID). Linux's kernel consumers send 0 and ignore what they receive;
        /// we use it for [`VENDOR_ID_SR_REQ`].
        vendor_id, set_vendor_id, vendor_word, 0, 24, u32
    );
    bits32!(
        /// Local QPN, 24 bits.
        local_qpn, set_local_qpn, qpn_resp_res, 8, 24, u32
    );
    bits32!(
        /// Responder Resources: RDMA READs the sender will accept in flight as responder.
        responder_resources, set_responder_resources, qpn_resp_res, 0, 8, u8
    );
    bits32!(
        /// Local EECN, 24 bits (0 for RC).
        local_eecn, set_local_eecn, eecn_init_depth, 8, 24, u32
    );
    bits32!(
        /// Initiator Depth: RDMA READs the sender will issue in flight.
        initiator_depth, set_initiator_depth, eecn_init_depth, 0, 8, u8
    );
    bits32!(
        /// Remote EECN, 24 bits (0 for RC).
        remote_eecn, set_remote_eecn, remote_eecn_flags, 8, 24, u32
    );
    bits32!(
        /// Remote CM Response Timeout (4.096 us x 2^value), 5 bits.
        remote_cm_response_timeout, set_remote_cm_response_timeout, remote_eecn_flags, 3, 5, u8
    );
    bits32!(
        /// Transport Service Type ([`CM_TRANSPORT_RC`], ...), 2 bits.
        transport_service_type, set_transport_service_type, remote_eecn_flags, 1, 2, u8
    );
    bits32!(
        /// End-to-End Flow Control bit.
        end_to_end_flow_control, set_end_to_end_flow_control, remote_eecn_flags, 0, 1, u8
    );
    bits32!(
        /// Starting PSN, 24 bits: the PSN of the sender's first request packet.
        starting_psn, set_starting_psn, psn_flags, 8, 24, u32
    );
    bits32!(
        /// Local CM Response Timeout (4.096 us x 2^value), 5 bits.
        local_cm_response_timeout, set_local_cm_response_timeout, psn_flags, 3, 5, u8
    );
    bits32!(
        /// Retry Count (transport retries), 3 bits.
        retry_count, set_retry_count, psn_flags, 0, 3, u8
    );
    bits8!(
        /// Path Packet Payload MTU, 4 bits (the `Mtu::code`: 3 = 1024).
        path_mtu, set_path_mtu, mtu_rnr, 4, 4
    );
    bits8!(
        /// RDC Exists bit.
        rdc_exists, set_rdc_exists, mtu_rnr, 3, 1
    );
    bits8!(
        /// RNR Retry Count, 3 bits (7 = infinite).
        rnr_retry_count, set_rnr_retry_count, mtu_rnr, 0, 3
    );
    bits8!(
        /// Max CM Retries, 4 bits.
        max_cm_retries, set_max_cm_retries, retries_srq, 4, 4
    );
    bits8!(
        /// SRQ bit: the sender's QP uses a shared receive queue.
        srq, set_srq, retries_srq, 3, 1
    );
    bits8!(
        /// Extended Transport Type, 3 bits.
        extended_transport_type, set_extended_transport_type, retries_srq, 0, 3
    );
}

/// MsgRcptAck (MRA, IBTA §12.6.6, Table 101), 232 bytes: "I got your message, give me
/// more time".
#[derive(
    FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned, Clone, Copy, Debug, PartialEq, Eq,
)]
#[repr(C)]
pub struct CmMra {
    /// Local Communication ID of the sender.
    pub local_comm_id: U32,
    /// Remote Communication ID (the receiver's local ID; 0 if unknown).
    pub remote_comm_id: U32,
    /// Message MRAed (2 bits: [`CM_MSG_REQ`], [`CM_MSG_REP`], [`CM_MSG_OTHER`] = LAP),
    /// reserved (6).
    msg_mraed_byte: u8,
    /// Service Timeout (5 bits), reserved (3).
    service_timeout_byte: u8,
    /// Private data.
    pub private_data: [u8; MRA_PRIVATE_DATA_LEN],
}

const _: () = assert!(core::mem::size_of::<CmMra>() == MAD_DATA_LEN);

impl CmMra {
    bits8!(
        /// Message MRAed, 2 bits.
        message_mraed, set_message_mraed, msg_mraed_byte, 6, 2
    );
    bits8!(
        /// Service Timeout (4.096 us x 2^value), 5 bits: extra time the sender needs.
        service_timeout, set_service_timeout, service_timeout_byte, 3, 5
    );
}

/// ConnectReject (REJ, IBTA §12.6.7, Table 102), 232 bytes.
#[derive(
    FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned, Clone, Copy, Debug, PartialEq, Eq,
)]
#[repr(C)]
pub struct CmRej {
    /// Local Communication ID of the sender (0 when a REQ is rejected before one exists).
    pub local_comm_id: U32,
    /// Remote Communication ID: the local ID of the rejected message's sender.
    pub remote_comm_id: U32,
    /// Message REJected (2 bits), reserved (6).
    msg_rejected_byte: u8,
    /// Reject Info Length (7 bits), reserved (1).
    ari_length_byte: u8,
    /// Reason (`CM_REJ_*`).
    pub reason: U16,
    /// Additional Rejection Information.
    pub ari: [u8; REJ_ARI_LEN],
    /// Private data.
    pub private_data: [u8; REJ_PRIVATE_DATA_LEN],
}

const _: () = assert!(core::mem::size_of::<CmRej>() == MAD_DATA_LEN);

impl CmRej {
    bits8!(
        /// Message REJected, 2 bits ([`CM_MSG_REQ`], [`CM_MSG_REP`], [`CM_MSG_OTHER`]).
        message_rejected, set_message_rejected, msg_rejected_byte, 6, 2
    );
    bits8!(
        /// Reject Info Length: valid bytes of `ari`, 7 bits.
        reject_info_length, set_reject_info_length, ari_length_byte, 1, 7
    );
}

/// ConnectReply (REP, IBTA §12.6.8, Table 103), 232 bytes.
#[derive(
    FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned, Clone, Copy, Debug, PartialEq, Eq,
)]
#[repr(C)]
pub struct CmRep {
    /// Local Communication ID of the sender (the passive side).
    pub local_comm_id: U32,
    /// Remote Communication ID: the REQ's local communication ID.
    pub remote_comm_id: U32,
    /// Local Q_Key (0 for RC).
    pub local_qkey: U32,
    /// Local QPN (24 bits), VendorID bits 23..16 (8).
    qpn_word: U32,
    /// Local EEC number (24 bits), VendorID bits 15..8 (8).
    eecn_word: U32,
    /// Starting PSN (24 bits), VendorID bits 7..0 (8).
    psn_word: U32,
    /// Responder Resources.
    pub responder_resources: u8,
    /// Initiator Depth.
    pub initiator_depth: u8,
    /// Target ACK Delay (5 bits), Failover Accepted (2), End-to-End Flow Control (1).
    flags26: u8,
    /// RNR Retry Count (3 bits), SRQ (1), reserved (4).
    flags27: u8,
    /// Local CA GUID.
    pub local_ca_guid: U64,
    /// Private data.
    pub private_data: [u8; REP_PRIVATE_DATA_LEN],
}

const _: () = assert!(core::mem::size_of::<CmRep>() == MAD_DATA_LEN);

impl CmRep {
    /// VendorID, 24 bits, spread over REP bytes 15, 19 and 23 (high, middle, low byte;
    /// IBTA §12.6.8, Linux `CM_REP_VENDOR_ID_H/M/L`). Linux's kernel consumers send 0;
    /// librdmacm's `rdma_accept` echoes the REQ's vendor ID. We use it for
    /// [`VENDOR_ID_SR_REP`].
    pub fn vendor_id(&self) -> u32 {
        ((self.qpn_word.get() & 0xFF) << 16)
            | ((self.eecn_word.get() & 0xFF) << 8)
            | (self.psn_word.get() & 0xFF)
    }

    /// Sets the field read by [`Self::vendor_id`] (24 bits; higher bits are dropped).
    pub fn set_vendor_id(&mut self, v: u32) {
        let put = |w: &mut U32, byte: u32| w.set((w.get() & !0xFF) | (byte & 0xFF));
        put(&mut self.qpn_word, v >> 16);
        put(&mut self.eecn_word, v >> 8);
        put(&mut self.psn_word, v);
    }

    bits32!(
        /// Local QPN, 24 bits.
        local_qpn, set_local_qpn, qpn_word, 8, 24, u32
    );
    bits32!(
        /// Local EEC number, 24 bits (0 for RC).
        local_eecn, set_local_eecn, eecn_word, 8, 24, u32
    );
    bits32!(
        /// Starting PSN, 24 bits.
        starting_psn, set_starting_psn, psn_word, 8, 24, u32
    );
    bits8!(
        /// Target ACK Delay (4.096 us x 2^value), 5 bits.
        target_ack_delay, set_target_ack_delay, flags26, 3, 5
    );
    bits8!(
        /// Failover Accepted, 2 bits (0 = accepted).
        failover_accepted, set_failover_accepted, flags26, 1, 2
    );
    bits8!(
        /// End-to-End Flow Control bit.
        end_to_end_flow_control, set_end_to_end_flow_control, flags26, 0, 1
    );
    bits8!(
        /// RNR Retry Count, 3 bits.
        rnr_retry_count, set_rnr_retry_count, flags27, 5, 3
    );
    bits8!(
        /// SRQ bit.
        srq, set_srq, flags27, 4, 1
    );
}

/// ReadyToUse (RTU, IBTA §12.6.9, Table 104), 232 bytes.
#[derive(
    FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned, Clone, Copy, Debug, PartialEq, Eq,
)]
#[repr(C)]
pub struct CmRtu {
    /// Local Communication ID of the sender (the active side).
    pub local_comm_id: U32,
    /// Remote Communication ID (the passive side's).
    pub remote_comm_id: U32,
    /// Private data.
    pub private_data: [u8; RTU_PRIVATE_DATA_LEN],
}

const _: () = assert!(core::mem::size_of::<CmRtu>() == MAD_DATA_LEN);

/// DisconnectRequest (DREQ, IBTA §12.6.10, Table 105), 232 bytes.
#[derive(
    FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned, Clone, Copy, Debug, PartialEq, Eq,
)]
#[repr(C)]
pub struct CmDreq {
    /// Local Communication ID of the sender.
    pub local_comm_id: U32,
    /// Remote Communication ID.
    pub remote_comm_id: U32,
    /// Remote QPN/EECN (24 bits), reserved (8).
    remote_qpn_word: U32,
    /// Private data.
    pub private_data: [u8; DREQ_PRIVATE_DATA_LEN],
}

const _: () = assert!(core::mem::size_of::<CmDreq>() == MAD_DATA_LEN);

impl CmDreq {
    bits32!(
        /// Remote QPN/EECN: the receiver's QPN, 24 bits.
        remote_qpn, set_remote_qpn, remote_qpn_word, 8, 24, u32
    );
}

/// DisconnectReply (DREP, IBTA §12.6.11, Table 106), 232 bytes.
#[derive(
    FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned, Clone, Copy, Debug, PartialEq, Eq,
)]
#[repr(C)]
pub struct CmDrep {
    /// Local Communication ID of the sender.
    pub local_comm_id: U32,
    /// Remote Communication ID.
    pub remote_comm_id: U32,
    /// Private data.
    pub private_data: [u8; DREP_PRIVATE_DATA_LEN],
}

const _: () = assert!(core::mem::size_of::<CmDrep>() == MAD_DATA_LEN);

/// A CM message body with its MAD AttributeID.
pub trait CmBody: IntoBytes + FromBytes + Immutable + KnownLayout + Unaligned + Sized {
    /// The MAD AttributeID (`CM_ATTR_*`).
    const ATTRIBUTE_ID: u16;

    /// An all-zero message.
    fn zeroed() -> Self {
        Self::new_zeroed()
    }

    /// The whole 256-byte MAD: a CM Send header with `transaction_id`, then `self`.
    fn to_mad(&self, transaction_id: u64) -> [u8; MAD_LEN] {
        let mut mad = [0u8; MAD_LEN];
        mad[..MAD_HEADER_LEN]
            .copy_from_slice(MadHeader::cm(Self::ATTRIBUTE_ID, transaction_id).as_bytes());
        mad[MAD_HEADER_LEN..].copy_from_slice(self.as_bytes());
        mad
    }
}

impl CmBody for CmReq {
    const ATTRIBUTE_ID: u16 = CM_ATTR_REQ;
}
impl CmBody for CmMra {
    const ATTRIBUTE_ID: u16 = CM_ATTR_MRA;
}
impl CmBody for CmRej {
    const ATTRIBUTE_ID: u16 = CM_ATTR_REJ;
}
impl CmBody for CmRep {
    const ATTRIBUTE_ID: u16 = CM_ATTR_REP;
}
impl CmBody for CmRtu {
    const ATTRIBUTE_ID: u16 = CM_ATTR_RTU;
}
impl CmBody for CmDreq {
    const ATTRIBUTE_ID: u16 = CM_ATTR_DREQ;
}
impl CmBody for CmDrep {
    const ATTRIBUTE_ID: u16 = CM_ATTR_DREP;
}

/// One decoded CM message (the connection establishment and release messages; SIDR,
/// LAP and APR are not implemented).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CmMessage {
    /// ConnectRequest.
    Req(CmReq),
    /// MsgRcptAck.
    Mra(CmMra),
    /// ConnectReject.
    Rej(CmRej),
    /// ConnectReply.
    Rep(CmRep),
    /// ReadyToUse.
    Rtu(CmRtu),
    /// DisconnectRequest.
    Dreq(CmDreq),
    /// DisconnectReply.
    Drep(CmDrep),
}

impl CmMessage {
    /// Decodes a 256-byte CM MAD (extra trailing bytes are ignored).
    ///
    /// Errors: the [`MadError`] of [`MadHeader::parse_cm`], or
    /// [`MadError::Attribute`] for an AttributeID other than REQ, MRA, REJ, REP, RTU,
    /// DREQ, DREP.
    pub fn decode(mad: &[u8]) -> Result<(MadHeader, CmMessage), MadError> {
        let (hdr, data) = MadHeader::parse_cm(mad)?;
        fn body<T: CmBody>(data: &[u8]) -> Result<T, MadError> {
            T::read_from_bytes(data).map_err(|_| MadError::TooShort(data.len()))
        }
        let msg = match hdr.attribute_id.get() {
            CM_ATTR_REQ => CmMessage::Req(body(data)?),
            CM_ATTR_MRA => CmMessage::Mra(body(data)?),
            CM_ATTR_REJ => CmMessage::Rej(body(data)?),
            CM_ATTR_REP => CmMessage::Rep(body(data)?),
            CM_ATTR_RTU => CmMessage::Rtu(body(data)?),
            CM_ATTR_DREQ => CmMessage::Dreq(body(data)?),
            CM_ATTR_DREP => CmMessage::Drep(body(data)?),
            other => return Err(MadError::Attribute(other)),
        };
        Ok((hdr, msg))
    }

    /// The MAD AttributeID of this message.
    pub fn attribute_id(&self) -> u16 {
        match self {
            CmMessage::Req(_) => CM_ATTR_REQ,
            CmMessage::Mra(_) => CM_ATTR_MRA,
            CmMessage::Rej(_) => CM_ATTR_REJ,
            CmMessage::Rep(_) => CM_ATTR_REP,
            CmMessage::Rtu(_) => CM_ATTR_RTU,
            CmMessage::Dreq(_) => CM_ATTR_DREQ,
            CmMessage::Drep(_) => CM_ATTR_DREP,
        }
    }

    /// Encodes the message as a 256-byte MAD with `transaction_id`.
    pub fn encode(&self, transaction_id: u64) -> [u8; MAD_LEN] {
        match self {
            CmMessage::Req(m) => m.to_mad(transaction_id),
            CmMessage::Mra(m) => m.to_mad(transaction_id),
            CmMessage::Rej(m) => m.to_mad(transaction_id),
            CmMessage::Rep(m) => m.to_mad(transaction_id),
            CmMessage::Rtu(m) => m.to_mad(transaction_id),
            CmMessage::Dreq(m) => m.to_mad(transaction_id),
            CmMessage::Drep(m) => m.to_mad(transaction_id),
        }
    }
}

/// Length of the RDMA CM IP header, bytes.
pub const CMA_HEADER_LEN: usize = 36;
/// `cma_version` of the RDMA CM IP header (Linux `CMA_VERSION`).
pub const CMA_VERSION: u8 = 0x00;
/// User private data bytes left in a REQ after the [`CmaHeader`] (92 - 36).
pub const CMA_REQ_USER_PRIVATE_DATA_LEN: usize = REQ_PRIVATE_DATA_LEN - CMA_HEADER_LEN;

/// The RDMA CM IP header (Linux `struct cma_hdr`, Annex A11 "RDMA IP CM Service"), 36
/// bytes, at the start of the private data of a REQ in the IP port spaces.
///
/// An IPv4 address lives in the last 4 bytes of its 16-byte field, the first 12 bytes
/// zero (Linux `union cma_ip_addr`); an IPv6 address fills the field.
#[derive(
    FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned, Clone, Copy, Debug, PartialEq, Eq,
)]
#[repr(C)]
pub struct CmaHeader {
    /// Header version, [`CMA_VERSION`].
    pub cma_version: u8,
    /// IP version in the high nibble (0x40 or 0x60), low nibble reserved.
    ip_version_byte: u8,
    /// The active side's IP CM source port (a port it picked, not a UDP port).
    pub src_port: U16,
    /// Source (active side) address.
    pub src_addr: [u8; 16],
    /// Destination (passive side) address.
    pub dst_addr: [u8; 16],
}

const _: () = assert!(core::mem::size_of::<CmaHeader>() == CMA_HEADER_LEN);

fn cma_addr(ip: IpAddr) -> [u8; 16] {
    match ip {
        IpAddr::V4(v4) => {
            let mut a = [0u8; 16];
            a[12..].copy_from_slice(&v4.octets());
            a
        }
        IpAddr::V6(v6) => v6.octets(),
    }
}

impl CmaHeader {
    /// The header for a connection from `src`:`src_port` to `dst`. `None` if the two
    /// addresses are of different families.
    pub fn new(src: IpAddr, src_port: u16, dst: IpAddr) -> Option<Self> {
        let ip_version = match (src, dst) {
            (IpAddr::V4(_), IpAddr::V4(_)) => 4u8,
            (IpAddr::V6(_), IpAddr::V6(_)) => 6u8,
            _ => return None,
        };
        Some(CmaHeader {
            cma_version: CMA_VERSION,
            ip_version_byte: ip_version << 4,
            src_port: U16::new(src_port),
            src_addr: cma_addr(src),
            dst_addr: cma_addr(dst),
        })
    }

    /// Reads the header from the start of a REQ's private data; `None` if the bytes are
    /// too short, the version is not [`CMA_VERSION`] or the IP version is not 4 or 6.
    pub fn parse(private_data: &[u8]) -> Option<Self> {
        let (h, _) = CmaHeader::read_from_prefix(private_data).ok()?;
        (h.cma_version == CMA_VERSION && matches!(h.ip_version(), 4 | 6)).then_some(h)
    }

    /// The IP version: 4 or 6 (the high nibble of the second byte).
    pub fn ip_version(&self) -> u8 {
        self.ip_version_byte >> 4
    }

    fn ip(&self, a: [u8; 16]) -> Option<IpAddr> {
        match self.ip_version() {
            4 => Some(IpAddr::V4(Ipv4Addr::new(a[12], a[13], a[14], a[15]))),
            6 => Some(IpAddr::V6(Ipv6Addr::from(a))),
            _ => None,
        }
    }

    /// The source address, `None` if the IP version is neither 4 nor 6.
    pub fn src_ip(&self) -> Option<IpAddr> {
        self.ip(self.src_addr)
    }

    /// The destination address, `None` if the IP version is neither 4 nor 6.
    pub fn dst_ip(&self) -> Option<IpAddr> {
        self.ip(self.dst_addr)
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use zerocopy::FromZeros;

    /// CM MADs of the reference captures (`testdata/captures/`), trailing zero bytes
    /// trimmed: (capture, frame number, hex).
    const GOLDEN: &[(&str, usize, &str)] = &[
        ("linux-nvme-rdma-rxe.pcap", 4, "0107020300000000000000024b9af554001000000000000054f59a4b000000000000000001061144505400fffe77000b00000000000000000000118000000000000000a129fa4ca7ffff37f0ffffffff00000000000000000000ffffc0a84d0b00000000000000000000ffffc0a84d0a68fc20000040009800000000000000000000000000000000000000000000000000000000000000000000000000000000000000000040b9c2000000000000000000000000c0a84d0b000000000000000000000000c0a84d0a0000000020001f"),
        ("linux-nvme-rdma-rxe.pcap", 5, "0107020300000000000000024b9af554001300000000000060c4ee3d54f59a4b00000000000011000000000029864d00008079e0505400fffe77000a000020"),
        ("linux-nvme-rdma-rxe.pcap", 6, "0107020300000000000000024b9af554001400000000000054f59a4b60c4ee3d"),
        ("linux-nvme-rdma-rxe.pcap", 87, "0107020300000000000000024b9af554001500000000000054f59a4b60c4ee3d000011"),
        ("linux-nvme-rdma-rxe.pcap", 88, "0107020300000000000000024b9af554001600000000000060c4ee3d54f59a4b"),
        ("linux-rping-rxe.pcap", 4, "01070203000000000000000225c94a6c00100000000000006c4ac925000000000000000001061c06505400fffe77000b00000000000000000000110100000001000000a0757b14a7ffff37f0ffffffff00000000000000000000ffffc0a84d0b00000000000000000000ffffc0a84d0a9cd5a0000040009800000000000000000000000000000000000000000000000000000000000000000000000000000000000000000040d42c000000000000000000000000c0a84d0b000000000000000000000000c0a84d0a"),
        ("linux-rping-rxe.pcap", 5, "01070203000000000000000225c94a6c00130000000000001b279e1a6c4ac925000000000000110000000000939bce00010178e0505400fffe77000a"),
        ("linux-rping-rxe.pcap", 43, "01070203000000000000000225c94a6c00150000000000006c4ac9251b279e1a000011"),
        ("linux-rping-rxe.pcap", 44, "01070203000000000000000225c94a6c00160000000000001b279e1a6c4ac925"),
        ("e-roce-probe.pcap", 6, "010702030000000000000000eb773f80001200000000000000000000bc69498d00000008"),
        ("linux-nvme-rdma-rxe-ipv6.pcap", 23, "010702030000000000000002f7fcc4c50010000000000000c5c4fcf7000000000000000001061144505400fffe77000b00000000000000000000118000000000000000a155b602a7ffff37f0fffffffffd770000000000000000000000000011fd7700000000000000000000000000108f9180000040009800000000000000000000000000000000000000000000000000000000000000000000000000000000000000000060cdacfd770000000000000000000000000011fd7700000000000000000000000000100000000020001f"),
    ];

    /// The golden MAD of `capture` frame `frame` (must be listed in `GOLDEN`).
    pub(crate) fn golden(capture: &str, frame: usize) -> [u8; MAD_LEN] {
        let (_, _, hex) = GOLDEN
            .iter()
            .find(|(c, f, _)| *c == capture && *f == frame)
            .expect("golden frame listed");
        let mut mad = [0u8; MAD_LEN];
        for (i, b) in mad.iter_mut().enumerate().take(hex.len() / 2) {
            *b = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).expect("hex");
        }
        mad
    }

    /// Decodes, checks the round trip to the same 256 bytes, returns header and message.
    fn decode_roundtrip(mad: &[u8; MAD_LEN]) -> (MadHeader, CmMessage) {
        let (hdr, msg) = CmMessage::decode(mad).expect("decodes");
        assert_eq!(
            &msg.encode(hdr.transaction_id.get()),
            mad,
            "re-encode differs"
        );
        (hdr, msg)
    }

    fn v4(s: &str) -> IpAddr {
        s.parse().expect("ip")
    }

    /// NVMe/RDMA CM request private data (NVMe RDMA Transport 1.x §3.2): recfmt, qid,
    /// hrqsize, hsqsize, little endian.
    fn nvme_req(pd: &[u8]) -> [u16; 4] {
        let f = |i: usize| u16::from_le_bytes([pd[2 * i], pd[2 * i + 1]]);
        [f(0), f(1), f(2), f(3)]
    }

    #[test]
    fn nvme_req_frame4() {
        let mad = golden("linux-nvme-rdma-rxe.pcap", 4);
        let (hdr, msg) = decode_roundtrip(&mad);
        assert_eq!(hdr.transaction_id.get(), 0x0000_0002_4b9a_f554);
        let CmMessage::Req(req) = msg else {
            panic!("not a REQ: {msg:?}")
        };
        assert_eq!(req.local_comm_id.get(), 0x54f5_9a4b);
        assert_eq!(req.service_id.get(), 0x0000_0000_0106_1144);
        assert_eq!(req.service_id.get(), service_id_tcp(4420));
        assert_eq!(service_id_tcp_port(req.service_id.get()), Some(4420));
        assert_eq!(req.local_ca_guid.get(), 0x5054_00ff_fe77_000b);
        assert_eq!(req.local_qkey.get(), 0);
        assert_eq!(req.local_qpn(), 0x11);
        assert_eq!(req.responder_resources(), 0x80);
        assert_eq!(req.initiator_depth(), 0);
        assert_eq!(req.remote_cm_response_timeout(), 0x14);
        assert_eq!(req.local_cm_response_timeout(), 0x14);
        assert_eq!(req.transport_service_type(), CM_TRANSPORT_RC);
        assert_eq!(req.end_to_end_flow_control(), 1);
        assert_eq!(req.starting_psn(), 0x29fa4c);
        assert_eq!(req.retry_count(), 7);
        assert_eq!(req.rnr_retry_count(), 7);
        assert_eq!(req.max_cm_retries(), 15);
        assert_eq!(req.path_mtu(), 3);
        assert_eq!(req.srq(), 0);
        assert_eq!(req.partition_key.get(), 0xFFFF);
        let p = &req.primary_path;
        assert_eq!((p.local_lid.get(), p.remote_lid.get()), (0xFFFF, 0xFFFF));
        assert_eq!(ip_from_gid(p.local_gid), v4("192.168.77.11"));
        assert_eq!(ip_from_gid(p.remote_gid), v4("192.168.77.10"));
        assert_eq!(p.local_gid, gid_from_ip(v4("192.168.77.11")));
        assert_eq!(p.flow_label(), 0x68fc2);
        assert_eq!(p.packet_rate(), 0);
        assert_eq!((p.traffic_class, p.hop_limit, p.sl()), (0, 64, 0));
        assert_eq!(p.local_ack_timeout(), 0x13);
        assert_eq!(req.alternate_path, CmPath::new_zeroed());
        let cma = CmaHeader::parse(&req.private_data).expect("cma header");
        assert_eq!(cma.ip_version(), 4);
        assert_eq!(cma.src_ip(), Some(v4("192.168.77.11")));
        assert_eq!(cma.dst_ip(), Some(v4("192.168.77.10")));
        assert_eq!(cma.src_port.get(), 0xb9c2);
        assert_eq!(
            crate::wire::cm_flow_label(cma.src_port.get(), 4420),
            p.flow_label()
        );
        assert_eq!(
            CmaHeader::new(v4("192.168.77.11"), 0xb9c2, v4("192.168.77.10")),
            Some(cma)
        );
        assert_eq!(
            nvme_req(&req.private_data[CMA_HEADER_LEN..]),
            [0, 0, 32, 31]
        );
    }

    /// Builds frame 4's REQ with the setters, field by field.
    #[test]
    fn nvme_req_frame4_built_with_setters() {
        let mut req = CmReq::zeroed();
        req.local_comm_id.set(0x54f5_9a4b);
        req.service_id.set(service_id_tcp(4420));
        req.local_ca_guid.set(0x5054_00ff_fe77_000b);
        req.set_local_qpn(0x11);
        req.set_responder_resources(0x80);
        req.set_remote_cm_response_timeout(0x14);
        req.set_transport_service_type(CM_TRANSPORT_RC);
        req.set_end_to_end_flow_control(1);
        req.set_starting_psn(0x29fa4c);
        req.set_local_cm_response_timeout(0x14);
        req.set_retry_count(7);
        req.partition_key.set(0xFFFF);
        req.set_path_mtu(3);
        req.set_rnr_retry_count(7);
        req.set_max_cm_retries(15);
        let p = &mut req.primary_path;
        p.local_lid.set(0xFFFF);
        p.remote_lid.set(0xFFFF);
        p.local_gid = gid_from_ip(v4("192.168.77.11"));
        p.remote_gid = gid_from_ip(v4("192.168.77.10"));
        p.set_flow_label(crate::wire::cm_flow_label(0xb9c2, 4420));
        p.hop_limit = 64;
        p.set_local_ack_timeout(0x13);
        let cma = CmaHeader::new(v4("192.168.77.11"), 0xb9c2, v4("192.168.77.10")).unwrap();
        req.private_data[..CMA_HEADER_LEN].copy_from_slice(cma.as_bytes());
        req.private_data[CMA_HEADER_LEN..CMA_HEADER_LEN + 8]
            .copy_from_slice(&[0, 0, 0, 0, 32, 0, 31, 0]);
        assert_eq!(
            req.to_mad(0x0000_0002_4b9a_f554),
            golden("linux-nvme-rdma-rxe.pcap", 4)
        );
    }

    #[test]
    fn nvme_rep_rtu_dreq_drep() {
        let (hdr, msg) = decode_roundtrip(&golden("linux-nvme-rdma-rxe.pcap", 5));
        // The REP echoes the REQ's transaction ID.
        assert_eq!(hdr.transaction_id.get(), 0x0000_0002_4b9a_f554);
        let CmMessage::Rep(rep) = msg else {
            panic!("not a REP: {msg:?}")
        };
        assert_eq!(rep.local_comm_id.get(), 0x60c4_ee3d);
        assert_eq!(rep.remote_comm_id.get(), 0x54f5_9a4b);
        assert_eq!(rep.local_qkey.get(), 0);
        assert_eq!(rep.local_qpn(), 0x11);
        assert_eq!(rep.starting_psn(), 0x29864d);
        assert_eq!(rep.responder_resources, 0);
        assert_eq!(rep.initiator_depth, 0x80);
        assert_eq!(rep.target_ack_delay(), 15);
        assert_eq!(rep.failover_accepted(), 0);
        assert_eq!(rep.end_to_end_flow_control(), 1);
        assert_eq!(rep.rnr_retry_count(), 7);
        assert_eq!(rep.srq(), 0);
        assert_eq!(rep.local_ca_guid.get(), 0x5054_00ff_fe77_000a);
        // NVMe/RDMA CM accept: recfmt 0, crqsize 32 (little endian).
        assert_eq!(&rep.private_data[..4], &[0, 0, 32, 0]);
        assert!(rep.private_data[4..].iter().all(|&b| b == 0));

        let (_, msg) = decode_roundtrip(&golden("linux-nvme-rdma-rxe.pcap", 6));
        let CmMessage::Rtu(rtu) = msg else {
            panic!("not an RTU: {msg:?}")
        };
        assert_eq!(
            (rtu.local_comm_id.get(), rtu.remote_comm_id.get()),
            (0x54f5_9a4b, 0x60c4_ee3d)
        );
        assert!(rtu.private_data.iter().all(|&b| b == 0));

        let (hdr, msg) = decode_roundtrip(&golden("linux-nvme-rdma-rxe.pcap", 87));
        // Linux's DREQ reuses the connection's transaction ID (cm_form_tid).
        assert_eq!(hdr.transaction_id.get(), 0x0000_0002_4b9a_f554);
        let CmMessage::Dreq(dreq) = msg else {
            panic!("not a DREQ: {msg:?}")
        };
        assert_eq!(
            (dreq.local_comm_id.get(), dreq.remote_comm_id.get()),
            (0x54f5_9a4b, 0x60c4_ee3d)
        );
        assert_eq!(dreq.remote_qpn(), 0x11);

        let (_, msg) = decode_roundtrip(&golden("linux-nvme-rdma-rxe.pcap", 88));
        let CmMessage::Drep(drep) = msg else {
            panic!("not a DREP: {msg:?}")
        };
        assert_eq!(
            (drep.local_comm_id.get(), drep.remote_comm_id.get()),
            (0x60c4_ee3d, 0x54f5_9a4b)
        );
    }

    #[test]
    fn rping_req_rep_dreq_drep() {
        let (_, msg) = decode_roundtrip(&golden("linux-rping-rxe.pcap", 4));
        let CmMessage::Req(req) = msg else {
            panic!("not a REQ: {msg:?}")
        };
        assert_eq!(req.service_id.get(), 0x0000_0000_0106_1c06);
        assert_eq!(service_id_tcp_port(req.service_id.get()), Some(7174));
        assert_eq!((req.responder_resources(), req.initiator_depth()), (1, 1));
        assert_eq!(req.end_to_end_flow_control(), 0);
        assert_eq!((req.retry_count(), req.rnr_retry_count()), (7, 7));
        assert_eq!(req.primary_path.local_ack_timeout(), 0x13);
        assert_eq!(req.path_mtu(), 3);
        let cma = CmaHeader::parse(&req.private_data).expect("cma header");
        assert_eq!(cma.src_port.get(), 54316);
        assert_eq!(req.primary_path.flow_label(), 0x9cd5a);
        assert_eq!(crate::wire::cm_flow_label(54316, 7174), 0x9cd5a);
        assert!(req.private_data[CMA_HEADER_LEN..].iter().all(|&b| b == 0));

        let (_, msg) = decode_roundtrip(&golden("linux-rping-rxe.pcap", 5));
        let CmMessage::Rep(rep) = msg else {
            panic!("not a REP: {msg:?}")
        };
        assert_eq!((rep.responder_resources, rep.initiator_depth), (1, 1));
        assert_eq!((rep.target_ack_delay(), rep.rnr_retry_count()), (15, 7));
        assert_eq!(rep.end_to_end_flow_control(), 0);

        let (_, msg) = decode_roundtrip(&golden("linux-rping-rxe.pcap", 43));
        assert!(matches!(msg, CmMessage::Dreq(d) if d.remote_qpn() == 0x11));
        let (_, msg) = decode_roundtrip(&golden("linux-rping-rxe.pcap", 44));
        assert!(matches!(msg, CmMessage::Drep(_)));
    }

    #[test]
    fn rej_invalid_service_id_from_linux() {
        let (hdr, msg) = decode_roundtrip(&golden("e-roce-probe.pcap", 6));
        // Echoes the probe REQ's transaction ID.
        assert_eq!(hdr.transaction_id.get(), 0xeb77_3f80);
        let CmMessage::Rej(rej) = msg else {
            panic!("not a REJ: {msg:?}")
        };
        assert_eq!(rej.local_comm_id.get(), 0);
        assert_eq!(rej.remote_comm_id.get(), 0xbc69_498d);
        assert_eq!(rej.message_rejected(), CM_MSG_REQ);
        assert_eq!(rej.reject_info_length(), 0);
        assert_eq!(rej.reason.get(), CM_REJ_INVALID_SERVICE_ID);
    }

    #[test]
    fn ipv6_req() {
        let (_, msg) = decode_roundtrip(&golden("linux-nvme-rdma-rxe-ipv6.pcap", 23));
        let CmMessage::Req(req) = msg else {
            panic!("not a REQ: {msg:?}")
        };
        let p = &req.primary_path;
        assert_eq!(
            ip_from_gid(p.local_gid),
            "fd77::11".parse::<IpAddr>().unwrap()
        );
        assert_eq!(
            ip_from_gid(p.remote_gid),
            "fd77::10".parse::<IpAddr>().unwrap()
        );
        assert_eq!(p.flow_label(), 0x8f918);
        let cma = CmaHeader::parse(&req.private_data).expect("cma header");
        assert_eq!(cma.ip_version(), 6);
        assert_eq!(cma.src_ip(), Some("fd77::11".parse().unwrap()));
        assert_eq!(cma.dst_ip(), Some("fd77::10".parse().unwrap()));
        assert_eq!(
            crate::wire::cm_flow_label(cma.src_port.get(), 4420),
            0x8f918
        );
        assert_eq!(
            nvme_req(&req.private_data[CMA_HEADER_LEN..]),
            [0, 0, 32, 31]
        );
    }

    #[test]
    fn setters_mask_to_field_width() {
        let mut req = CmReq::zeroed();
        req.set_local_qpn(0xFFFF_FFFF);
        assert_eq!(req.local_qpn(), 0xFF_FFFF);
        assert_eq!(req.responder_resources(), 0);
        req.set_retry_count(0xFF);
        assert_eq!(req.retry_count(), 7);
        assert_eq!(req.local_cm_response_timeout(), 0);
        req.primary_path.set_flow_label(u32::MAX);
        assert_eq!(req.primary_path.flow_label(), 0xF_FFFF);
        assert_eq!(req.primary_path.packet_rate(), 0);
    }

    #[test]
    fn decode_errors() {
        let mut mad = golden("linux-nvme-rdma-rxe.pcap", 6);
        mad[17] = 0x17; // SIDR_REQ: not implemented
        assert_eq!(
            CmMessage::decode(&mad),
            Err(MadError::Attribute(CM_ATTR_SIDR_REQ))
        );
        assert_eq!(CmMessage::decode(&mad[..100]), Err(MadError::TooShort(100)));
        assert!(CmaHeader::parse(&[0u8; 10]).is_none());
        assert!(CmaHeader::parse(&[0u8; 36]).is_none()); // IP version 0
        assert!(CmaHeader::new(v4("10.0.0.1"), 1, "::1".parse().unwrap()).is_none());
    }

    /// The CM MADs (UD SEND Only to QP1) of a reference capture by frame number
    /// (`testdata/captures/`; a missing capture fails the test).
    pub(crate) fn capture_mads(name: &str) -> Vec<(usize, Vec<u8>)> {
        let bytes = crate::test_captures::read(name);
        let pcap = crate::test_captures::Capture::parse(&bytes).expect("capture parses");
        pcap.roce()
            .filter(|(_, udp)| udp.payload.first() == Some(&0x64)) // UD SEND Only
            .filter_map(|(f, udp)| Some((f.number, udp.payload.get(20..20 + MAD_LEN)?.to_vec())))
            .collect()
    }

    /// The golden bytes are the captures' bytes; every CM MAD in the captures decodes
    /// and re-encodes to itself.
    #[test]
    fn golden_matches_captures_and_all_cm_mads_roundtrip() {
        let mut checked = 0;
        for capture in [
            "linux-nvme-rdma-rxe.pcap",
            "linux-nvme-rdma-rxe-ipv6.pcap",
            "linux-nvme-rdma-errors.pcap",
            "linux-rping-rxe.pcap",
            "e-roce-probe.pcap",
        ] {
            let mads = capture_mads(capture);
            for (_frame, mad) in &mads {
                let (hdr, msg) = CmMessage::decode(mad).expect("capture MAD decodes");
                assert_eq!(&msg.encode(hdr.transaction_id.get())[..], &mad[..]);
                checked += 1;
            }
            for (c, frame, _) in GOLDEN.iter().filter(|(c, _, _)| *c == capture) {
                let (_, mad) = mads
                    .iter()
                    .find(|(n, _)| n == frame)
                    .expect("frame in capture");
                assert_eq!(&mad[..], &golden(c, *frame)[..], "{c} frame {frame}");
            }
        }
        // 15 (IPv4 NVMe) + 15 (IPv6 NVMe) + 20 (errors) + 5 (rping) + 2 (probe).
        assert_eq!(checked, 57, "CM MADs in the reference captures");
    }
}
