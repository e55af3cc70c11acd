//! Host-side helpers over the `nvme` crate's Fabrics and NVMe/RDMA types (NVMe over
//! Fabrics 1.1 §3.3, NVMe RDMA Transport 1.x §3.3): the Connect data written into a
//! slot buffer, the CM private data, and a readable name for the field a refused
//! Connect points at.
use nvme::fabrics::{
    ParameterLocation, CONNECT_DATA_CNTLID_OFFSET, CONNECT_DATA_HOSTID_OFFSET,
    CONNECT_DATA_HOSTNQN_OFFSET, CONNECT_DATA_SUBNQN_OFFSET, CONNECT_SQE_CATTR_OFFSET,
    CONNECT_SQE_KATO_OFFSET, CONNECT_SQE_QID_OFFSET, CONNECT_SQE_RECFMT_OFFSET,
    CONNECT_SQE_SQSIZE_OFFSET,
};
use nvme::{
    ConnectData, ConnectInvalidParameter, RdmaCmAccept, RdmaCmError, RdmaCmReject,
    RdmaCmRejectStatus, RdmaCmRequest,
};
use zerocopy::IntoBytes;

/// Length of the Connect command's data in bytes.
pub const CONNECT_DATA_LEN: usize = core::mem::size_of::<ConnectData>();

/// Why the Connect data could not be written.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConnectDataError {
    /// The output buffer is shorter than [`CONNECT_DATA_LEN`].
    #[error("Connect data buffer of {len} bytes, need {CONNECT_DATA_LEN}")]
    BufferTooSmall {
        /// The buffer's length in bytes.
        len: usize,
    },
    /// SUBNQN or HOSTNQN is empty.
    #[error("{field} is empty")]
    Empty {
        /// "SUBNQN" or "HOSTNQN".
        field: &'static str,
    },
    /// SUBNQN or HOSTNQN does not fit its field (1..=223 bytes, no NUL).
    #[error("{field} of the Connect data: {source}")]
    Field {
        /// "SUBNQN" or "HOSTNQN".
        field: &'static str,
        /// What is wrong with it.
        source: nvme::StrFieldError,
    },
}

/// Writes the Connect data (HOSTID, CNTLID, SUBNQN, HOSTNQN; NVMe over Fabrics 1.1
/// §3.3 Figure "Connect Command Data") into the first 1024 bytes of `out`.
///
/// # Errors
/// [`ConnectDataError`] naming the buffer or the NQN that does not fit (1..=223
/// bytes, no NUL).
pub fn write_connect_data(
    out: &mut [u8],
    hostid: &[u8; 16],
    cntlid: u16,
    subnqn: &str,
    hostnqn: &str,
) -> Result<(), ConnectDataError> {
    let len = out.len();
    let out = out
        .get_mut(..CONNECT_DATA_LEN)
        .ok_or(ConnectDataError::BufferTooSmall { len })?;
    let mut d =
        ConnectData::new(*hostid, cntlid, "-", "-").map_err(|source| ConnectDataError::Field {
            field: "SUBNQN",
            source,
        })?;
    for (field, nqn) in [("SUBNQN", subnqn), ("HOSTNQN", hostnqn)] {
        if nqn.is_empty() {
            return Err(ConnectDataError::Empty { field });
        }
        let set = if field == "SUBNQN" {
            d.set_subnqn(nqn)
        } else {
            d.set_hostnqn(nqn)
        };
        set.map_err(|source| ConnectDataError::Field { field, source })?;
    }
    out.copy_from_slice(d.as_bytes());
    Ok(())
}

/// Names the field a Connect Invalid Parameters status points at (IATTR/IPO of CQE
/// DW0, NVMe over Fabrics 1.1 §3.3 Figure "Connect Response").
pub fn connect_invalid_field(dw0: u32) -> String {
    let p = ConnectInvalidParameter::from_dw0(dw0);
    let ipo = p.offset;
    match p.location {
        ParameterLocation::Data => {
            let (name, hint) = match ipo {
                CONNECT_DATA_HOSTID_OFFSET => ("HOSTID", ""),
                CONNECT_DATA_CNTLID_OFFSET => (
                    "CNTLID",
                    ": the target has no such controller for this host (its Keep Alive expired?)",
                ),
                CONNECT_DATA_SUBNQN_OFFSET => (
                    "SUBNQN",
                    ": the target serves no subsystem of that NQN (check --subnqn)",
                ),
                CONNECT_DATA_HOSTNQN_OFFSET => ("HOSTNQN", ""),
                _ => ("a field", ""),
            };
            format!("{name} (offset {ipo}) of the Connect data{hint}")
        }
        ParameterLocation::Command => {
            let name = match ipo {
                CONNECT_SQE_RECFMT_OFFSET => "RECFMT",
                CONNECT_SQE_QID_OFFSET => "QID",
                CONNECT_SQE_SQSIZE_OFFSET => "SQSIZE",
                CONNECT_SQE_CATTR_OFFSET => "CATTR",
                CONNECT_SQE_KATO_OFFSET => "KATO",
                _ => "a field",
            };
            format!("{name} (byte {ipo}) of the Connect command")
        }
    }
}

/// The RDMA_CM_REQUEST private data of queue `qid`: RECFMT 0, HRQSIZE, HSQSIZE (0's
/// based) and CNTLID (as Linux's `struct nvme_rdma_cm_req` carries it).
pub fn rdma_cm_request(qid: u16, hrqsize: u16, hsqsize_0based: u16, cntlid: u16) -> Vec<u8> {
    let mut r = RdmaCmRequest::new(qid, hrqsize, hsqsize_0based);
    r.set_cntlid(cntlid);
    r.as_bytes().to_vec()
}

/// CRQSIZE of an RDMA_CM_ACCEPT (NVMe RDMA Transport 1.x §3.2).
///
/// # Errors
/// [`RdmaCmError`] when the private data is too short or its RECFMT is not 0.
pub fn rdma_cm_accept_crqsize(private_data: &[u8]) -> Result<u16, RdmaCmError> {
    RdmaCmAccept::parse(private_data).map(|a| a.crqsize())
}

/// The NVMe/RDMA status of an RDMA_CM_REJECT, if the private data carries a known one.
pub fn rdma_cm_reject_status(private_data: &[u8]) -> Option<RdmaCmRejectStatus> {
    RdmaCmReject::parse(private_data)
        .ok()
        .and_then(|r| r.status())
}

#[cfg(test)]
mod tests {
    use super::*;
    use nvme::{Property, Sqe};

    #[test]
    fn capture_bytes_of_what_the_host_sends() {
        // linux-nvme-rdma-rxe.pcap frame 13 (Property Get CAP) and 29 (Property Set CC
        // = 0x00460061 with EN): ATTRIB at byte 40, OFST at 44, VALUE at 48.
        let g = Sqe::property_get(1, Property::Cap).to_array();
        assert_eq!((g[0], g[1], g[4], g[40]), (0x7F, 0x40, 0x04, 1));
        let s = Sqe::property_set(0x2001, Property::Cc, 0x0046_0061).to_array();
        assert_eq!(&s[44..48], &0x14u32.to_le_bytes());
        assert_eq!(&s[48..52], &0x0046_0061u32.to_le_bytes());
        // Frame 171: I/O queue Connect, QID 1, SQSIZE 127, KATO 0.
        let c = Sqe::connect(0, 1, 127, 0).to_array();
        assert_eq!(
            (c[4], &c[40..48]),
            (0x01, &[0u8, 0, 1, 0, 127, 0, 0, 0][..])
        );
    }

    #[test]
    fn connect_data_layout() {
        let mut d = vec![0xAAu8; 1024];
        write_connect_data(
            &mut d,
            &[7; 16],
            0xFFFF,
            "nqn.2026-11.io.example:ref",
            "nqn.h",
        )
        .unwrap();
        assert_eq!(&d[..16], &[7; 16]);
        assert_eq!(&d[16..18], &[0xFF, 0xFF]);
        assert_eq!(&d[256..282], b"nqn.2026-11.io.example:ref");
        assert_eq!(d[282], 0);
        assert_eq!(&d[512..517], b"nqn.h");
        assert!(d[768..].iter().all(|&b| b == 0));
        assert!(write_connect_data(&mut d, &[0; 16], 1, &"x".repeat(224), "h").is_err());
        assert!(write_connect_data(&mut d, &[0; 16], 1, "", "h").is_err());
    }

    #[test]
    fn connect_invalid_field_names() {
        // linux-nvme-rdma-errors.pcap: DW0 0x00010100 (unknown subsystem) and 0x00010200.
        assert_eq!(
            connect_invalid_field(0x0001_0100),
            "SUBNQN (offset 256) of the Connect data: the target serves no subsystem of that \
             NQN (check --subnqn)"
        );
        assert_eq!(
            connect_invalid_field(0x0001_0200),
            "HOSTNQN (offset 512) of the Connect data"
        );
        assert_eq!(
            connect_invalid_field(44),
            "SQSIZE (byte 44) of the Connect command"
        );
    }

    #[test]
    fn cm_private_data() {
        // Capture: admin queue recfmt 0, qid 0, hrqsize 32, hsqsize 31.
        let r = rdma_cm_request(0, 32, 31, 0);
        assert_eq!(&r[..8], &[0, 0, 0, 0, 32, 0, 31, 0]);
        assert_eq!(r.len(), 32);
        let mut a = vec![0u8; 32];
        a[2] = 128;
        assert_eq!(rdma_cm_accept_crqsize(&a), Ok(128));
        assert!(rdma_cm_accept_crqsize(&[0, 0]).is_err());
        assert_eq!(
            rdma_cm_reject_status(&[0, 0, 6, 0]),
            Some(RdmaCmRejectStatus::NoResources)
        );
        assert_eq!(rdma_cm_reject_status(&[0, 0, 0, 0]), None);
    }
}
