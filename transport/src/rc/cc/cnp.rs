//! The notification point: CNPs (RoCEv2, IBTA Vol 1 Annex A17.9.3: BTH opcode 0x81,
//! the sending QP as DestQP, BECN set, 16 reserved bytes) for CE-marked packets, at
//! most one per QP per interval (DCQCN's N, 50 us in the paper; ConnectX's
//! `min_time_between_cnps`).
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use crate::rc::payload::Payload;
use crate::rc::region::{MemRef, MrMemory};
use crate::time::Timestamp;
use crate::wire::{Bth, Opcode, PacketHeaders, DEFAULT_PKEY};

/// Bytes after a CNP's BTH (reserved, zero), before the ICRC.
pub const CNP_PAYLOAD_LEN: usize = 16;

/// Whether a CNP is due, per QP.
#[derive(Clone, Copy, Debug, Default)]
pub struct CnpPacer {
    last: Option<Timestamp>,
    due: bool,
}

impl CnpPacer {
    /// A CE-marked packet arrived at `now`: a CNP becomes due unless one was sent less
    /// than `min_gap` ago. Returns whether one became due.
    pub fn on_marked(&mut self, now: Timestamp, min_gap: Duration) -> bool {
        if self.due || self.last.is_some_and(|t| now.since(t) < min_gap) {
            return false;
        }
        self.due = true;
        true
    }

    /// Whether a CNP waits to be sent.
    pub fn is_due(&self) -> bool {
        self.due
    }

    /// The due CNP leaves at `now`.
    pub fn sent(&mut self, now: Timestamp) {
        self.due = false;
        self.last = Some(now);
    }
}

/// The headers of a CNP to `dest_qp`: PSN 0, BECN set, the default P_Key.
pub fn cnp_headers(dest_qp: u32) -> PacketHeaders {
    PacketHeaders {
        bth: Bth {
            opcode: Opcode::Cnp,
            se: false,
            migreq: false,
            pad_count: 0,
            tver: 0,
            pkey: DEFAULT_PKEY,
            fecn: false,
            becn: true,
            dest_qp,
            ack_req: false,
            psn: 0,
        },
        deth: None,
        reth: None,
        aeth: None,
        imm: None,
        ieth: None,
    }
}

/// A CNP's 16 reserved bytes: one zeroed block shared by every QP, never registered
/// (no key reaches it, so nothing writes it). Empty if it could not be allocated.
pub fn cnp_payload() -> Payload {
    static ZEROS: OnceLock<Option<Arc<MrMemory>>> = OnceLock::new();
    let mut p = Payload::empty();
    if let Some(m) = ZEROS
        .get_or_init(|| MrMemory::new(CNP_PAYLOAD_LEN).ok())
        .clone()
        .and_then(|m| MemRef::new(m, 0, CNP_PAYLOAD_LEN))
    {
        p.push(m);
    }
    p
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_cnp_per_interval_however_many_marks() {
        let gap = Duration::from_micros(50);
        let mut p = CnpPacer::default();
        assert!(p.on_marked(Timestamp(1_000), gap));
        assert!(!p.on_marked(Timestamp(2_000), gap), "already due");
        p.sent(Timestamp(3_000));
        assert!(
            !p.on_marked(Timestamp(40_000), gap),
            "37 us after the last CNP"
        );
        assert!(p.on_marked(Timestamp(53_000), gap), "50 us after it");
        assert!(p.is_due());
    }

    #[test]
    fn a_cnp_parses_back_as_roce_v2_writes_it() {
        let h = cnp_headers(0x1234);
        let pay = cnp_payload().to_vec();
        assert_eq!(pay, [0u8; CNP_PAYLOAD_LEN]);
        let mut buf = vec![0u8; 64];
        let n = h.write(&mut buf);
        buf.truncate(n);
        buf.extend_from_slice(&pay);
        buf.extend_from_slice(&[0; 4]); // ICRC (not checked by the parser)
        let pkt = crate::wire::parse(&buf).expect("a CNP parses");
        assert_eq!(pkt.hdr.bth.opcode, Opcode::Cnp);
        assert!(pkt.hdr.bth.becn);
        assert_eq!(pkt.hdr.bth.dest_qp, 0x1234);
        assert_eq!(pkt.payload.len(), CNP_PAYLOAD_LEN);
    }
}
