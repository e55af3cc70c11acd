//! Fabrics commands, controller properties and NVMe/RDMA CM private data as the host
//! builds and reads them (NVMe over Fabrics 1.1 §3, NVMe Base 2.x §3.1.4, NVMe RDMA
//! Transport 1.x §3.2).
//!
//! Small host-side helpers over [`nvme::Sqe`]; they fill SQE dwords by the spec's
//! field positions so the rest of the crate never handles byte offsets.
use nvme::{FabricsCommandType, Sqe, FABRICS_OPCODE};

/// Controller property offsets (NVMe Base 2.x §3.1.4 Figure "Controller Properties").
pub mod prop {
    /// Controller Capabilities (8 bytes).
    pub const CAP: u32 = 0x00;
    /// Version (4 bytes).
    pub const VS: u32 = 0x08;
    /// Controller Configuration (4 bytes).
    pub const CC: u32 = 0x14;
    /// Controller Status (4 bytes).
    pub const CSTS: u32 = 0x1C;

    /// CC.EN (bit 0).
    pub const CC_EN: u32 = 1;
    /// CC.SHN = 01b, normal shutdown (bits 15:14).
    pub const CC_SHN_NORMAL: u32 = 1 << 14;
    /// CC.SHN mask.
    pub const CC_SHN_MASK: u32 = 3 << 14;
    /// CC.IOSQES = 6 (64-byte SQEs, bits 19:16).
    pub const CC_IOSQES_64: u32 = 6 << 16;
    /// CC.IOCQES = 4 (16-byte CQEs, bits 23:20).
    pub const CC_IOCQES_16: u32 = 4 << 20;
    /// CSTS.RDY (bit 0).
    pub const CSTS_RDY: u32 = 1;
    /// CSTS.CFS, controller fatal status (bit 1).
    pub const CSTS_CFS: u32 = 2;
    /// CSTS.SHST mask (bits 3:2).
    pub const CSTS_SHST_MASK: u32 = 3 << 2;
    /// CSTS.SHST = 10b, shutdown processing complete.
    pub const CSTS_SHST_CMPLT: u32 = 2 << 2;

    /// CAP.MQES, maximum queue entries supported, 0's based (bits 15:0).
    pub fn cap_mqes(cap: u64) -> u16 {
        cap as u16
    }
    /// CAP.TO, worst-case time to ready in 500 ms units (bits 31:24).
    pub fn cap_to(cap: u64) -> u8 {
        (cap >> 24) as u8
    }
    /// CAP.MPSMIN, minimum memory page size 2^(12 + MPSMIN) (bits 51:48).
    pub fn cap_mpsmin(cap: u64) -> u8 {
        ((cap >> 48) & 0xF) as u8
    }
}

fn fabrics_sqe(fctype: FabricsCommandType) -> Sqe {
    // FCTYPE is SQE byte 4, the low byte of the NSID field.
    Sqe::new(FABRICS_OPCODE, 0).with_nsid(u32::from(fctype.value()))
}

/// Property Get (FCTYPE 04h, NVMe over Fabrics 1.1 §3.4): ATTRIB (byte 40) = 1 for an
/// 8-byte property, OFST (bytes 44..48). The value comes back in CQE DW0 (and DW1).
pub fn property_get(offset: u32, eight_bytes: bool) -> Sqe {
    let mut sqe = fabrics_sqe(FabricsCommandType::PropertyGet);
    sqe.set_cdw10(u32::from(eight_bytes));
    sqe.set_cdw11(offset);
    sqe
}

/// Property Set (FCTYPE 00h, NVMe over Fabrics 1.1 §3.5) of a 4-byte property: ATTRIB
/// 0, OFST (bytes 44..48), VALUE (bytes 48..56).
pub fn property_set(offset: u32, value: u32) -> Sqe {
    let mut sqe = fabrics_sqe(FabricsCommandType::PropertySet);
    sqe.set_cdw10(0);
    sqe.set_cdw11(offset);
    sqe.set_cdw12(value);
    sqe.set_cdw13(0);
    sqe
}

/// Length of the Connect command's data (NVMe over Fabrics 1.1 §3.3 Figure "Connect
/// Command - Data").
pub const CONNECT_DATA_LEN: usize = 1024;
/// Offset of SUBNQN in the Connect data.
pub const CONNECT_DATA_SUBNQN: usize = 256;
/// Offset of HOSTNQN in the Connect data.
pub const CONNECT_DATA_HOSTNQN: usize = 512;

/// Connect (FCTYPE 01h, NVMe over Fabrics 1.1 §3.3): RECFMT 0 (bytes 40..42), QID
/// (42..44), SQSIZE 0's based (44..46), CATTR 0 (46), KATO in ms (48..52).
pub fn connect(qid: u16, sqsize_0based: u16, kato_ms: u32) -> Sqe {
    let mut sqe = fabrics_sqe(FabricsCommandType::Connect);
    sqe.set_cdw10(u32::from(qid) << 16);
    sqe.set_cdw11(u32::from(sqsize_0based));
    sqe.set_cdw12(kato_ms);
    sqe
}

/// Fills `out` (at least [`CONNECT_DATA_LEN`] bytes) with the Connect data: HOSTID
/// (bytes 0..16), CNTLID (16..18), SUBNQN (256..512) and HOSTNQN (512..768), NUL
/// padded. Errors name the NQN that does not fit (223 bytes at most).
pub fn write_connect_data(out: &mut [u8], hostid: &[u8; 16], cntlid: u16, subnqn: &str, hostnqn: &str) -> Result<(), String> {
    let out = out.get_mut(..CONNECT_DATA_LEN).ok_or("Connect data buffer too small")?;
    out.fill(0);
    out[..16].copy_from_slice(hostid);
    out[16..18].copy_from_slice(&cntlid.to_le_bytes());
    for (name, nqn, at) in [("SUBNQN", subnqn, CONNECT_DATA_SUBNQN), ("HOSTNQN", hostnqn, CONNECT_DATA_HOSTNQN)] {
        let b = nqn.as_bytes();
        if b.is_empty() || b.len() > nvme::NVME_NQN_MAX || b.contains(&0) {
            return Err(format!("{name} {nqn:?} must be 1..={} bytes without NUL", nvme::NVME_NQN_MAX));
        }
        out[at..at + b.len()].copy_from_slice(b);
    }
    Ok(())
}

/// Names the Connect field that a Connect Invalid Parameters status points at: DW0
/// bits 15:0 IPO (byte offset), bit 16 IATTR (1 = in the Connect data, 0 = in the
/// SQE) (NVMe over Fabrics 1.1 §3.3 Figure "Connect Response").
pub fn connect_invalid_field(dw0: u32) -> String {
    let ipo = dw0 & 0xFFFF;
    let in_data = (dw0 >> 16) & 1 == 1;
    if in_data {
        let name = match ipo as usize {
            0 => "HOSTID",
            16 => "CNTLID",
            CONNECT_DATA_SUBNQN => "SUBNQN",
            CONNECT_DATA_HOSTNQN => "HOSTNQN",
            _ => "a field",
        };
        format!("{name} (offset {ipo}) of the Connect data")
    } else {
        let name = match ipo {
            40 => "RECFMT",
            42 => "QID",
            44 => "SQSIZE",
            46 => "CATTR",
            48 => "KATO",
            _ => "a field",
        };
        format!("{name} (byte {ipo}) of the Connect command")
    }
}

/// Length of the NVMe/RDMA CM request private data (Linux `struct nvme_rdma_cm_req`).
pub const RDMA_CM_REQ_LEN: usize = 32;

/// The RDMA_CM_REQUEST private data (NVMe RDMA Transport 1.x §3.2): RECFMT 0, QID,
/// HRQSIZE (not 0's based), HSQSIZE (0's based), CNTLID (reserved in 1.0, Linux sends
/// the controller ID), then reserved bytes; all little endian.
pub fn rdma_cm_request(qid: u16, hrqsize: u16, hsqsize_0based: u16, cntlid: u16) -> Vec<u8> {
    let mut v = vec![0u8; RDMA_CM_REQ_LEN];
    v[2..4].copy_from_slice(&qid.to_le_bytes());
    v[4..6].copy_from_slice(&hrqsize.to_le_bytes());
    v[6..8].copy_from_slice(&hsqsize_0based.to_le_bytes());
    v[8..10].copy_from_slice(&cntlid.to_le_bytes());
    v
}

/// Reads RDMA_CM_ACCEPT private data: (RECFMT, CRQSIZE). `None` if shorter than 4 bytes.
pub fn rdma_cm_accept(pd: &[u8]) -> Option<(u16, u16)> {
    let b = pd.get(..4)?;
    Some((u16::from_le_bytes([b[0], b[1]]), u16::from_le_bytes([b[2], b[3]])))
}

/// Reads RDMA_CM_REJECT private data: (RECFMT, STS). `None` if shorter than 4 bytes.
pub fn rdma_cm_reject(pd: &[u8]) -> Option<(u16, u16)> {
    rdma_cm_accept(pd)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connect_sqe_bytes() {
        // Admin Connect as in linux-nvme-rdma-errors.pcap frame 7: opcode 7Fh, flags
        // 40h, FCTYPE 01h, QID 0, SQSIZE 31, KATO 5000.
        let b = connect(0, 31, 5000).to_array();
        assert_eq!(b[0], 0x7F);
        assert_eq!(b[1], 0x40);
        assert_eq!(b[4], 0x01);
        assert_eq!(&b[40..44], &[0, 0, 0, 0]);
        assert_eq!(&b[44..46], &31u16.to_le_bytes());
        assert_eq!(&b[48..52], &5000u32.to_le_bytes());
        let io = connect(1, 127, 0).to_array();
        assert_eq!(&io[42..44], &[1, 0]);
    }

    #[test]
    fn property_sqes() {
        let g = property_get(prop::CAP, true).to_array();
        assert_eq!((g[4], g[40], &g[44..48]), (0x04, 1, &[0u8, 0, 0, 0][..]));
        let s = property_set(prop::CC, 0x0046_0001).to_array();
        assert_eq!((s[4], s[40]), (0x00, 0));
        assert_eq!(&s[44..48], &0x14u32.to_le_bytes());
        assert_eq!(&s[48..56], &[1, 0, 0x46, 0, 0, 0, 0, 0]);
    }

    #[test]
    fn connect_data_layout() {
        let mut d = vec![0xAAu8; 1024];
        write_connect_data(&mut d, &[7; 16], 0xFFFF, "nqn.2026-11.io.example:ref", "nqn.h").unwrap();
        assert_eq!(&d[..16], &[7; 16]);
        assert_eq!(&d[16..18], &[0xFF, 0xFF]);
        assert_eq!(&d[256..282], b"nqn.2026-11.io.example:ref");
        assert_eq!(d[282], 0);
        assert_eq!(&d[512..517], b"nqn.h");
        assert!(d[768..].iter().all(|&b| b == 0));
        assert!(write_connect_data(&mut d, &[0; 16], 1, &"x".repeat(224), "h").is_err());
    }

    #[test]
    fn connect_invalid_field_names() {
        // linux-nvme-rdma-errors.pcap: DW0 0x00010100 (unknown subsystem) and 0x00010200.
        assert_eq!(connect_invalid_field(0x0001_0100), "SUBNQN (offset 256) of the Connect data");
        assert_eq!(connect_invalid_field(0x0001_0200), "HOSTNQN (offset 512) of the Connect data");
        assert_eq!(connect_invalid_field(44), "SQSIZE (byte 44) of the Connect command");
    }

    #[test]
    fn cm_private_data() {
        // Capture: admin queue recfmt 0, qid 0, hrqsize 32, hsqsize 31.
        let r = rdma_cm_request(0, 32, 31, 0);
        assert_eq!(&r[..8], &[0, 0, 0, 0, 32, 0, 31, 0]);
        assert_eq!(r.len(), 32);
        assert_eq!(rdma_cm_accept(&[0, 0, 128, 0, 0, 0]), Some((0, 128)));
        assert_eq!(rdma_cm_reject(&[0, 0]), None);
    }
}
