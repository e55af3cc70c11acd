//! The device's QP registry: what `rdma-info --qps` shows of each QP of a soft device
//! (as `rdma res show qp` does for a kernel device), kept on the cold path only: QP
//! create, modify and destroy (never per packet).
//!
//! A QP's state is the one its last `modify_qp` set: a QP the RC core moved to Error
//! on its own (retry exceeded, a NAK) still shows its last modified state here.
use std::collections::BTreeMap;
use std::net::IpAddr;

use parking_lot::Mutex;

use crate::verbs::{QpState, QpType};

/// One QP as the registry knows it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QpInfo {
    /// The local QP number (24 bits).
    pub qpn: u32,
    /// The transport service (RC, UC, UD).
    pub qp_type: QpType,
    /// The state the last `modify_qp` set (Reset at create).
    pub state: QpState,
    /// The device's address (the QP's source IP).
    pub local_ip: IpAddr,
    /// The peer's address, once a path was set (RC, UC); `None` for UD.
    pub remote_ip: Option<IpAddr>,
    /// The connected peer's QP number (BTH DestQP), 0 before RTR and for UD.
    pub dest_qpn: u32,
    /// The UDP source port the QP sends from (RoCEv2 Annex A17: 0xC000..=0xFFFF,
    /// derived from the flow label, or from the QPN for UD), once it has a send path.
    pub udp_sport: Option<u16>,
    /// The path MTU in bytes (256..=4096): the one `modify_qp` set, else the device's.
    pub mtu: u32,
    /// The poll group (receive queue) the QP belongs to.
    pub poll_group: u32,
}

/// The QPs of one device, by QPN; shared by its poll groups (each updates its own QPs).
#[derive(Debug, Default)]
pub struct QpRegistry {
    qps: Mutex<BTreeMap<u32, QpInfo>>,
}

impl QpRegistry {
    /// Records a new QP, or replaces what was recorded under its QPN.
    pub fn insert(&self, info: QpInfo) {
        self.qps.lock().insert(info.qpn, info);
    }

    /// Changes the record of QP `qpn` with `f` (nothing if it is not recorded).
    pub fn update(&self, qpn: u32, f: impl FnOnce(&mut QpInfo)) {
        if let Some(q) = self.qps.lock().get_mut(&qpn) {
            f(q);
        }
    }

    /// Forgets QP `qpn` (destroyed, or its poll group closed).
    pub fn remove(&self, qpn: u32) {
        self.qps.lock().remove(&qpn);
    }

    /// The recorded QPs, by QPN.
    pub fn snapshot(&self) -> Vec<QpInfo> {
        self.qps.lock().values().copied().collect()
    }
}

/// The name `ibv_qp_type_str` gives a QP type (`RC`, `UC`, `UD`).
pub fn qp_type_name(t: QpType) -> &'static str {
    match t {
        QpType::Rc => "RC",
        QpType::Uc => "UC",
        QpType::Ud => "UD",
    }
}

/// The name `rdma res show qp` gives a QP state (`RESET`, `INIT`, `RTR`, `RTS`, `SQD`,
/// `SQE`, `ERR`).
pub fn qp_state_name(s: QpState) -> &'static str {
    match s {
        QpState::Reset => "RESET",
        QpState::Init => "INIT",
        QpState::Rtr => "RTR",
        QpState::Rts => "RTS",
        QpState::Sqd => "SQD",
        QpState::SqError => "SQE",
        QpState::Error => "ERR",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registry_tracks_create_modify_destroy() {
        let r = QpRegistry::default();
        let ip: IpAddr = "127.0.0.1".parse().unwrap();
        r.insert(QpInfo {
            qpn: 0x12,
            qp_type: QpType::Rc,
            state: QpState::Reset,
            local_ip: ip,
            remote_ip: None,
            dest_qpn: 0,
            udp_sport: None,
            mtu: 1024,
            poll_group: 0,
        });
        r.update(0x12, |q| {
            q.state = QpState::Rts;
            q.dest_qpn = 0x34;
        });
        r.update(0x99, |q| q.state = QpState::Error);
        let s = r.snapshot();
        assert_eq!(s.len(), 1);
        assert_eq!((s[0].state, s[0].dest_qpn), (QpState::Rts, 0x34));
        r.remove(0x12);
        assert!(r.snapshot().is_empty());
    }
}
