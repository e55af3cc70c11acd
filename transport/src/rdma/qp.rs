//! Queue pairs (RC, and UC and UD: [`build_attr_for`]): `ibv_create_qp`, `ibv_modify_qp` with the model's [`QpAttr`] mapped
//! to `struct ibv_qp_attr` and its mask, `ibv_query_qp`, `ibv_destroy_qp`.
//!
//! The state machine is checked before the device sees a transition (IBTA Vol 1
//! §10.3.1, the kernel's `ib_modify_qp_is_ok` table for RC), so a wrong call is a typed
//! [`VerbsError::InvalidTransition`] and a missing required attribute names itself,
//! instead of a bare EINVAL.
use rdma_sys::{
    ibv_ah_attr, ibv_cq, ibv_create_qp, ibv_destroy_qp, ibv_gid, ibv_global_route, ibv_modify_qp,
    ibv_pd, ibv_qp, ibv_qp_attr, ibv_qp_attr_mask, ibv_qp_cap, ibv_qp_init_attr, ibv_qp_state,
    ibv_qp_type, ibv_query_qp, ibv_srq,
};

use super::sys::{gid_of, os_err, rc_err};
use crate::verbs::{AccessFlags, DeviceCaps, QpAttr, QpCap, QpState, QpType, VerbsError};

/// Where the QP's address vectors start: the port and the RoCE v2 GID index of the
/// device's address (see [`super::gid`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PathInfo {
    /// The port (1-based).
    pub port_num: u8,
    /// The source GID index (`sgid_index` of every address vector).
    pub sgid_index: u8,
}

/// Whether the RC state machine allows `from -> to` (IBTA Vol 1 §10.3.1 Figure 124;
/// Linux `qp_state_table`): any state to Reset or Error; Reset -> Init; Init -> Init,
/// RTR; RTR -> RTS; RTS -> RTS, SQD; SQD -> SQD, RTS; SQE -> RTS.
pub fn transition_allowed(from: QpState, to: QpState) -> bool {
    use QpState::*;
    matches!(
        (from, to),
        (_, Reset)
            | (_, Error)
            | (Reset, Init)
            | (Init, Init)
            | (Init, Rtr)
            | (Rtr, Rts)
            | (Rts, Rts)
            | (Rts, Sqd)
            | (Sqd, Sqd)
            | (Sqd, Rts)
            | (SqError, Rts)
    )
}

/// `enum ibv_qp_state` of a model state (same order as ibverbs).
pub fn qp_state_to_ibv(s: QpState) -> ibv_qp_state::Type {
    use ibv_qp_state::*;
    match s {
        QpState::Reset => IBV_QPS_RESET,
        QpState::Init => IBV_QPS_INIT,
        QpState::Rtr => IBV_QPS_RTR,
        QpState::Rts => IBV_QPS_RTS,
        QpState::Sqd => IBV_QPS_SQD,
        QpState::SqError => IBV_QPS_SQE,
        QpState::Error => IBV_QPS_ERR,
    }
}

/// The model state of an `enum ibv_qp_state` value; `None` for IBV_QPS_UNKNOWN.
pub fn qp_state_from_ibv(s: ibv_qp_state::Type) -> Option<QpState> {
    use ibv_qp_state::*;
    Some(match s {
        IBV_QPS_RESET => QpState::Reset,
        IBV_QPS_INIT => QpState::Init,
        IBV_QPS_RTR => QpState::Rtr,
        IBV_QPS_RTS => QpState::Rts,
        IBV_QPS_SQD => QpState::Sqd,
        IBV_QPS_SQE => QpState::SqError,
        IBV_QPS_ERR => QpState::Error,
        _ => return None,
    })
}

const fn m(flag: ibv_qp_attr_mask) -> u32 {
    flag.0
}

/// Attributes ibverbs requires for RC Init -> RTR (Linux `qp_state_table` `req_param`),
/// as (mask bit, the model's field name).
const RTR_REQUIRED: [(u32, &str); 6] = {
    use ibv_qp_attr_mask as k;
    [
        (m(k::IBV_QP_AV), "ah_attr"),
        (m(k::IBV_QP_PATH_MTU), "path_mtu"),
        (m(k::IBV_QP_DEST_QPN), "dest_qp_num"),
        (m(k::IBV_QP_RQ_PSN), "rq_psn"),
        (m(k::IBV_QP_MAX_DEST_RD_ATOMIC), "max_dest_rd_atomic"),
        (m(k::IBV_QP_MIN_RNR_TIMER), "min_rnr_timer"),
    ]
};

/// Attributes ibverbs requires for RC RTR -> RTS.
const RTS_REQUIRED: [(u32, &str); 5] = {
    use ibv_qp_attr_mask as k;
    [
        (m(k::IBV_QP_SQ_PSN), "sq_psn"),
        (m(k::IBV_QP_TIMEOUT), "timeout"),
        (m(k::IBV_QP_RETRY_CNT), "retry_cnt"),
        (m(k::IBV_QP_RNR_RETRY), "rnr_retry"),
        (m(k::IBV_QP_MAX_QP_RD_ATOMIC), "max_rd_atomic"),
    ]
};

fn required(from: QpState, to: QpState) -> &'static [(u32, &'static str)] {
    match (from, to) {
        (QpState::Init, QpState::Rtr) => &RTR_REQUIRED,
        (QpState::Rtr, QpState::Rts) => &RTS_REQUIRED,
        _ => &[],
    }
}

/// The `ibv_qp_attr` and attribute mask for `attr` on a QP now in `from`.
///
/// Reset -> Init adds what ibverbs requires and the model leaves to the provider:
/// P_Key index 0, the device's port, and the access flags (none unless given). The
/// address vector is a RoCEv2 GRH from `path.sgid_index` to the IPv4-mapped or IPv6
/// GID of `ah_attr.dest`. `selective_retransmit` is the soft provider's and ignored.
///
/// # Errors
/// [`VerbsError::InvalidTransition`] for a transition the state machine lacks;
/// [`VerbsError::InvalidArgument`] naming the attributes a transition requires when one
/// is missing; [`VerbsError::CapabilityExceeded`] for RDMA READ depths beyond `caps`.
pub fn build_attr(
    attr: &QpAttr,
    from: QpState,
    path: PathInfo,
    caps: &DeviceCaps,
) -> Result<(ibv_qp_attr, i32), VerbsError> {
    let (a, mask) = fill_attr(attr, from, path, caps)?;
    let to = attr.qp_state.unwrap_or(from);
    let missing: Vec<&str> = required(from, to)
        .iter()
        .filter(|(bit, _)| mask & bit == 0)
        .map(|(_, name)| *name)
        .collect();
    if !missing.is_empty() {
        return Err(VerbsError::InvalidArgument(match (from, to) {
            (QpState::Init, QpState::Rtr) => {
                "Init -> RTR needs ah_attr, path_mtu, dest_qp_num, rq_psn, max_dest_rd_atomic and min_rnr_timer"
            }
            _ => "RTR -> RTS needs sq_psn, timeout, retry_cnt, rnr_retry and max_rd_atomic",
        }));
    }
    Ok((a, mask as i32))
}

/// The attributes a UC or UD QP takes on `from -> to` besides the state (the kernel's
/// `qp_state_table` `req_param | opt_param` for IB_QPT_UC / IB_QPT_UD; an RC-only
/// attribute there is EINVAL, so the model's others are left out), and those of them
/// required, with the message naming them.
fn unreliable_params(t: QpType, from: QpState, to: QpState) -> (u32, u32, &'static str) {
    use ibv_qp_attr_mask as k;
    use QpState::*;
    let (pkey, port, access, qkey) = (
        m(k::IBV_QP_PKEY_INDEX),
        m(k::IBV_QP_PORT),
        m(k::IBV_QP_ACCESS_FLAGS),
        m(k::IBV_QP_QKEY),
    );
    let rtr_uc =
        m(k::IBV_QP_AV) | m(k::IBV_QP_PATH_MTU) | m(k::IBV_QP_DEST_QPN) | m(k::IBV_QP_RQ_PSN);
    let sq_psn = m(k::IBV_QP_SQ_PSN);
    match (t, from, to) {
        (QpType::Ud, Reset, Init) => (
            pkey | port | qkey,
            pkey | port | qkey,
            "a UD QP's Reset -> Init needs qkey",
        ),
        (QpType::Ud, Init, Init) => (pkey | port | qkey, 0, ""),
        (QpType::Ud, Init, Rtr) => (pkey | qkey, 0, ""),
        (QpType::Ud, Rtr, Rts) => (sq_psn | qkey, sq_psn, "RTR -> RTS needs sq_psn"),
        (QpType::Ud, Rts | Sqd | SqError, Rts | Sqd) => (qkey, 0, ""),
        (_, Reset, Init) => (
            pkey | port | access,
            pkey | port | access,
            "Reset -> Init needs its port",
        ),
        (_, Init, Init) => (pkey | port | access, 0, ""),
        (_, Init, Rtr) => (
            rtr_uc | access | pkey,
            rtr_uc,
            "a UC QP's Init -> RTR needs ah_attr, path_mtu, dest_qp_num and rq_psn",
        ),
        (_, Rtr, Rts) => (sq_psn | access, sq_psn, "RTR -> RTS needs sq_psn"),
        (_, Rts | Sqd | SqError, Rts | Sqd) => (access, 0, ""),
        _ => (0, 0, ""),
    }
}

/// [`build_attr`] for a QP of type `t`: RC as there; UC and UD with only the
/// attributes their transitions take (IBTA Vol 1 §11.2.4.2; a UD QP has no path,
/// access flags or RDMA READ depths, a UC QP no timers, retries or READ depths), the
/// required ones checked (UD: the Q_Key at Init, `sq_psn` at RTS; UC: the path at RTR,
/// `sq_psn` at RTS).
///
/// # Errors
/// As [`build_attr`].
pub fn build_attr_for(
    t: QpType,
    attr: &QpAttr,
    from: QpState,
    path: PathInfo,
    caps: &DeviceCaps,
) -> Result<(ibv_qp_attr, i32), VerbsError> {
    if t == QpType::Rc {
        return build_attr(attr, from, path, caps);
    }
    let (a, mask) = fill_attr(attr, from, path, caps)?;
    let to = attr.qp_state.unwrap_or(from);
    let (allowed, need, msg) = unreliable_params(t, from, to);
    let mask = mask & (allowed | m(ibv_qp_attr_mask::IBV_QP_STATE));
    if mask & need != need {
        return Err(VerbsError::InvalidArgument(msg));
    }
    Ok((a, mask as i32))
}

/// The attribute values and mask of `attr` on a QP in `from`, before any check of what
/// the transition requires.
fn fill_attr(
    attr: &QpAttr,
    from: QpState,
    path: PathInfo,
    caps: &DeviceCaps,
) -> Result<(ibv_qp_attr, u32), VerbsError> {
    use ibv_qp_attr_mask as k;
    let to = attr.qp_state.unwrap_or(from);
    if !transition_allowed(from, to) {
        return Err(VerbsError::InvalidTransition { from, to });
    }
    caps.check_rd_atomic(attr.max_rd_atomic, attr.max_dest_rd_atomic)?;
    // SAFETY: ibv_qp_attr is plain data; zero is a valid value of every field.
    let mut a: ibv_qp_attr = unsafe { std::mem::zeroed() };
    let mut mask = 0u32;
    if let Some(s) = attr.qp_state {
        a.qp_state = qp_state_to_ibv(s);
        mask |= m(k::IBV_QP_STATE);
    }
    let mut access = attr.qp_access_flags;
    if from == QpState::Reset && to == QpState::Init {
        a.pkey_index = 0;
        a.port_num = path.port_num;
        mask |= m(k::IBV_QP_PKEY_INDEX) | m(k::IBV_QP_PORT);
        access.get_or_insert(AccessFlags::empty());
    }
    if let Some(f) = access {
        a.qp_access_flags = f.bits();
        mask |= m(k::IBV_QP_ACCESS_FLAGS);
    }
    if let Some(mtu) = attr.path_mtu {
        a.path_mtu = u32::from(mtu.code());
        mask |= m(k::IBV_QP_PATH_MTU);
    }
    if let Some(v) = attr.dest_qp_num {
        a.dest_qp_num = v & 0x00FF_FFFF;
        mask |= m(k::IBV_QP_DEST_QPN);
    }
    if let Some(v) = attr.rq_psn {
        a.rq_psn = v & 0x00FF_FFFF;
        mask |= m(k::IBV_QP_RQ_PSN);
    }
    if let Some(v) = attr.sq_psn {
        a.sq_psn = v & 0x00FF_FFFF;
        mask |= m(k::IBV_QP_SQ_PSN);
    }
    if let Some(v) = attr.max_rd_atomic {
        a.max_rd_atomic = v;
        mask |= m(k::IBV_QP_MAX_QP_RD_ATOMIC);
    }
    if let Some(v) = attr.max_dest_rd_atomic {
        a.max_dest_rd_atomic = v;
        mask |= m(k::IBV_QP_MAX_DEST_RD_ATOMIC);
    }
    if let Some(v) = attr.min_rnr_timer {
        a.min_rnr_timer = v;
        mask |= m(k::IBV_QP_MIN_RNR_TIMER);
    }
    if let Some(v) = attr.timeout {
        a.timeout = v;
        mask |= m(k::IBV_QP_TIMEOUT);
    }
    if let Some(v) = attr.retry_cnt {
        a.retry_cnt = v;
        mask |= m(k::IBV_QP_RETRY_CNT);
    }
    if let Some(v) = attr.rnr_retry {
        a.rnr_retry = v;
        mask |= m(k::IBV_QP_RNR_RETRY);
    }
    if let Some(v) = attr.qkey {
        a.qkey = v;
        mask |= m(k::IBV_QP_QKEY);
    }
    if let Some(ah) = attr.ah_attr {
        a.ah_attr = ibv_ah_attr {
            grh: ibv_global_route {
                dgid: ibv_gid {
                    raw: gid_of(ah.dest),
                },
                flow_label: ah.flow_label & 0x000F_FFFF,
                sgid_index: path.sgid_index,
                hop_limit: ah.hop_limit,
                traffic_class: ah.traffic_class,
            },
            dlid: 0,
            sl: 0,
            src_path_bits: 0,
            static_rate: 0,
            is_global: 1,
            port_num: path.port_num,
        };
        mask |= m(k::IBV_QP_AV);
    }
    Ok((a, mask))
}

/// Creates an RC QP in Reset (`ibv_create_qp`) and returns it with the capacities the
/// device granted (ibverbs writes them back; `max_inline_data` may differ from the
/// request).
///
/// # Errors
/// [`VerbsError::CapabilityExceeded`] before the call for sizes beyond `caps`;
/// [`VerbsError::Os`] from `ibv_create_qp`: EINVAL (bad attributes), ENOMEM (no
/// resources), ENOSYS (no RC QPs), EPERM.
///
/// # Safety
/// `pd`, `send_cq`, `recv_cq` and `srq` (or NULL) are live objects of one device.
pub unsafe fn create(
    pd: *mut ibv_pd,
    send_cq: *mut ibv_cq,
    recv_cq: *mut ibv_cq,
    srq: *mut ibv_srq,
    cap: &QpCap,
    qp_type: QpType,
    caps: &DeviceCaps,
) -> Result<(*mut ibv_qp, QpCap), VerbsError> {
    caps.check_qp_cap(cap, !srq.is_null())?;
    let mut init = init_attr(send_cq, recv_cq, srq, cap);
    init.qp_type = ibv_qp_type_of(qp_type);
    let qp = ibv_create_qp(pd, &mut init);
    if qp.is_null() {
        return Err(os_err("ibv_create_qp"));
    }
    Ok((qp, granted(&init.cap)))
}

/// `enum ibv_qp_type` of a model QP type.
pub fn ibv_qp_type_of(t: QpType) -> ibv_qp_type::Type {
    match t {
        QpType::Rc => ibv_qp_type::IBV_QPT_RC,
        QpType::Uc => ibv_qp_type::IBV_QPT_UC,
        QpType::Ud => ibv_qp_type::IBV_QPT_UD,
    }
}

/// The `ibv_qp_init_attr` of an RC QP (no `sq_sig_all`: completions where signaled).
pub fn init_attr(
    send_cq: *mut ibv_cq,
    recv_cq: *mut ibv_cq,
    srq: *mut ibv_srq,
    cap: &QpCap,
) -> ibv_qp_init_attr {
    ibv_qp_init_attr {
        qp_context: std::ptr::null_mut(),
        send_cq,
        recv_cq,
        srq,
        cap: ibv_qp_cap {
            max_send_wr: cap.max_send_wr,
            max_recv_wr: if srq.is_null() { cap.max_recv_wr } else { 0 },
            max_send_sge: cap.max_send_sge,
            max_recv_sge: if srq.is_null() { cap.max_recv_sge } else { 0 },
            max_inline_data: cap.max_inline_data,
        },
        qp_type: ibv_qp_type::IBV_QPT_RC,
        sq_sig_all: 0,
    }
}

/// The model's capacities of a granted `ibv_qp_cap`.
pub fn granted(c: &ibv_qp_cap) -> QpCap {
    QpCap {
        max_send_wr: c.max_send_wr,
        max_recv_wr: c.max_recv_wr,
        max_send_sge: c.max_send_sge,
        max_recv_sge: c.max_recv_sge,
        max_inline_data: c.max_inline_data,
    }
}

/// The QP's current state (`ibv_query_qp` with IBV_QP_STATE); `None` if the query fails.
///
/// # Safety
/// `qp` is a live QP.
pub unsafe fn query_state(qp: *mut ibv_qp) -> Option<QpState> {
    let mut a: ibv_qp_attr = std::mem::zeroed();
    let mut init: ibv_qp_init_attr = std::mem::zeroed();
    let rc = ibv_query_qp(
        qp,
        &mut a,
        ibv_qp_attr_mask::IBV_QP_STATE.0 as i32,
        &mut init,
    );
    if rc != 0 {
        return None;
    }
    qp_state_from_ibv(a.qp_state)
}

/// Modifies the QP (`ibv_modify_qp`) after checking the transition from its current
/// state (queried, since rdma_cm and the device change it too).
///
/// # Errors
/// Those of [`build_attr`]; [`VerbsError::Os`] from `ibv_modify_qp` (EINVAL: an
/// attribute value the device refuses; ENOMEM; EPERM).
///
/// # Safety
/// `qp` is a live QP.
pub unsafe fn modify(
    qp: *mut ibv_qp,
    qp_type: QpType,
    attr: &QpAttr,
    path: PathInfo,
    caps: &DeviceCaps,
) -> Result<(), VerbsError> {
    let from = query_state(qp).ok_or_else(|| os_err("ibv_query_qp"))?;
    let (mut a, mask) = build_attr_for(qp_type, attr, from, path, caps)?;
    let rc = ibv_modify_qp(qp, &mut a, mask);
    if rc != 0 {
        return Err(rc_err("ibv_modify_qp", rc));
    }
    Ok(())
}

/// Destroys the QP (`ibv_destroy_qp`).
///
/// # Errors
/// [`VerbsError::Os`]: EBUSY (still attached, e.g. to a multicast group).
///
/// # Safety
/// `qp` is a live QP that nothing uses afterwards.
pub unsafe fn destroy(qp: *mut ibv_qp) -> Result<(), VerbsError> {
    let rc = ibv_destroy_qp(qp);
    if rc != 0 {
        return Err(rc_err("ibv_destroy_qp", rc));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::verbs::{AhAttr, Mtu};
    use rdma_sys::ibv_access_flags;

    const PATH: PathInfo = PathInfo {
        port_num: 1,
        sgid_index: 1,
    };

    fn caps() -> DeviceCaps {
        DeviceCaps {
            max_qp_rd_atom: 16,
            max_qp_init_rd_atom: 16,
            ..Default::default()
        }
    }

    const ALL: [QpState; 7] = [
        QpState::Reset,
        QpState::Init,
        QpState::Rtr,
        QpState::Rts,
        QpState::Sqd,
        QpState::SqError,
        QpState::Error,
    ];

    #[test]
    fn states_map_to_ibverbs_values() {
        for (i, s) in ALL.iter().enumerate() {
            assert_eq!(qp_state_to_ibv(*s), i as u32);
            assert_eq!(qp_state_from_ibv(i as u32), Some(*s));
        }
        assert_eq!(qp_state_from_ibv(ibv_qp_state::IBV_QPS_UNKNOWN), None);
    }

    #[test]
    fn transition_table() {
        let ok: Vec<(QpState, QpState)> = ALL
            .iter()
            .flat_map(|&f| ALL.iter().map(move |&t| (f, t)))
            .filter(|&(f, t)| transition_allowed(f, t))
            .collect();
        use QpState::*;
        for bad in [
            (Reset, Rtr),
            (Reset, Rts),
            (Init, Rts),
            (Rtr, Init),
            (Error, Rts),
            (Rts, Rtr),
        ] {
            assert!(!ok.contains(&bad), "{bad:?}");
        }
        // 7 states x (to Reset, to Error) + 9 others.
        assert_eq!(ok.len(), 14 + 9, "{ok:?}");
        let e = build_attr(
            &QpAttr {
                qp_state: Some(Rts),
                ..Default::default()
            },
            Reset,
            PATH,
            &caps(),
        )
        .err()
        .unwrap();
        assert_eq!(
            e,
            VerbsError::InvalidTransition {
                from: Reset,
                to: Rts
            }
        );
        assert_eq!(e.to_string(), "invalid QP state transition Reset -> Rts");
    }

    #[test]
    fn reset_to_init_adds_port_pkey_and_access() {
        let (a, mask) = build_attr(
            &QpAttr {
                qp_state: Some(QpState::Init),
                qp_access_flags: Some(AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ),
                ..Default::default()
            },
            QpState::Reset,
            PATH,
            &caps(),
        )
        .unwrap();
        use ibv_qp_attr_mask as k;
        let want = k::IBV_QP_STATE | k::IBV_QP_PKEY_INDEX | k::IBV_QP_PORT | k::IBV_QP_ACCESS_FLAGS;
        assert_eq!(mask as u32, want.0);
        assert_eq!((a.qp_state, a.port_num, a.pkey_index), (1, 1, 0));
        assert_eq!(
            a.qp_access_flags,
            (ibv_access_flags::IBV_ACCESS_LOCAL_WRITE | ibv_access_flags::IBV_ACCESS_REMOTE_READ).0
        );
    }

    /// UC and UD transitions carry only the attributes their QP type takes: the
    /// kernel refuses RC's (EINVAL), so a UD RTR with a path, or a UC RTS with retry
    /// counts, leaves them out; the required ones are named when missing.
    #[test]
    fn uc_and_ud_transitions_carry_only_their_attributes() {
        use ibv_qp_attr_mask as k;
        let (a, mask) = build_attr_for(
            QpType::Ud,
            &QpAttr {
                qp_state: Some(QpState::Init),
                qkey: Some(0x1111_1111),
                qp_access_flags: Some(AccessFlags::LOCAL_WRITE),
                ..Default::default()
            },
            QpState::Reset,
            PATH,
            &caps(),
        )
        .unwrap();
        let want = k::IBV_QP_STATE | k::IBV_QP_PKEY_INDEX | k::IBV_QP_PORT | k::IBV_QP_QKEY;
        assert_eq!(mask as u32, want.0);
        assert_eq!(a.qkey, 0x1111_1111);
        let e = build_attr_for(
            QpType::Ud,
            &QpAttr {
                qp_state: Some(QpState::Init),
                ..Default::default()
            },
            QpState::Reset,
            PATH,
            &caps(),
        )
        .err()
        .unwrap();
        assert_eq!(
            e,
            VerbsError::InvalidArgument("a UD QP's Reset -> Init needs qkey")
        );
        let (_, mask) = build_attr_for(QpType::Ud, &rtr(), QpState::Init, PATH, &caps()).unwrap();
        assert_eq!(mask as u32, k::IBV_QP_STATE.0, "no path on a UD QP");
        let (_, mask) = build_attr_for(QpType::Uc, &rtr(), QpState::Init, PATH, &caps()).unwrap();
        let want = k::IBV_QP_STATE
            | k::IBV_QP_AV
            | k::IBV_QP_PATH_MTU
            | k::IBV_QP_DEST_QPN
            | k::IBV_QP_RQ_PSN;
        assert_eq!(mask as u32, want.0, "no RDMA READ depth or RNR timer on UC");
        let (_, mask) = build_attr_for(
            QpType::Uc,
            &QpAttr {
                qp_state: Some(QpState::Rts),
                sq_psn: Some(5),
                timeout: Some(14),
                retry_cnt: Some(7),
                rnr_retry: Some(7),
                max_rd_atomic: Some(1),
                ..Default::default()
            },
            QpState::Rtr,
            PATH,
            &caps(),
        )
        .unwrap();
        assert_eq!(mask as u32, (k::IBV_QP_STATE | k::IBV_QP_SQ_PSN).0);
        assert_eq!(ibv_qp_type_of(QpType::Uc), ibv_qp_type::IBV_QPT_UC);
        assert_eq!(ibv_qp_type_of(QpType::Ud), ibv_qp_type::IBV_QPT_UD);
    }

    #[test]
    fn access_and_send_flags_share_ibverbs_bits() {
        use crate::verbs::SendFlags;
        use ibv_access_flags as a;
        assert_eq!(AccessFlags::LOCAL_WRITE.bits(), a::IBV_ACCESS_LOCAL_WRITE.0);
        assert_eq!(
            AccessFlags::REMOTE_WRITE.bits(),
            a::IBV_ACCESS_REMOTE_WRITE.0
        );
        assert_eq!(AccessFlags::REMOTE_READ.bits(), a::IBV_ACCESS_REMOTE_READ.0);
        assert_eq!(
            AccessFlags::REMOTE_ATOMIC.bits(),
            a::IBV_ACCESS_REMOTE_ATOMIC.0
        );
        assert_eq!(AccessFlags::MW_BIND.bits(), a::IBV_ACCESS_MW_BIND.0);
        use rdma_sys::ibv_send_flags as s;
        assert_eq!(SendFlags::FENCE.bits(), s::IBV_SEND_FENCE.0);
        assert_eq!(SendFlags::SIGNALED.bits(), s::IBV_SEND_SIGNALED.0);
        assert_eq!(SendFlags::SOLICITED.bits(), s::IBV_SEND_SOLICITED.0);
        assert_eq!(SendFlags::INLINE.bits(), s::IBV_SEND_INLINE.0);
    }

    fn rtr() -> QpAttr {
        QpAttr {
            qp_state: Some(QpState::Rtr),
            path_mtu: Some(Mtu::Mtu1024),
            dest_qp_num: Some(0x1_000_012),
            rq_psn: Some(0x1ab_cdef),
            max_dest_rd_atomic: Some(16),
            min_rnr_timer: Some(12),
            ah_attr: Some(AhAttr {
                dest: "192.168.77.11".parse().unwrap(),
                flow_label: 0x12345,
                hop_limit: 64,
                traffic_class: 0,
            }),
            ..Default::default()
        }
    }

    #[test]
    fn init_to_rtr_builds_a_rocev2_address_vector() {
        let (a, mask) = build_attr(&rtr(), QpState::Init, PATH, &caps()).unwrap();
        use ibv_qp_attr_mask as k;
        let want = k::IBV_QP_STATE
            | k::IBV_QP_AV
            | k::IBV_QP_PATH_MTU
            | k::IBV_QP_DEST_QPN
            | k::IBV_QP_RQ_PSN
            | k::IBV_QP_MAX_DEST_RD_ATOMIC
            | k::IBV_QP_MIN_RNR_TIMER;
        assert_eq!(mask as u32, want.0);
        assert_eq!(a.path_mtu, rdma_sys::ibv_mtu::IBV_MTU_1024);
        assert_eq!(a.dest_qp_num, 0x12, "24 bits");
        assert_eq!(a.rq_psn, 0xab_cdef, "24 bits");
        assert_eq!((a.ah_attr.is_global, a.ah_attr.port_num), (1, 1));
        assert_eq!(a.ah_attr.grh.sgid_index, 1);
        assert_eq!(a.ah_attr.grh.flow_label, 0x12345);
        // SAFETY: raw is the union's byte view.
        let dgid = unsafe { a.ah_attr.grh.dgid.raw };
        assert_eq!(
            std::net::Ipv6Addr::from(dgid),
            "::ffff:192.168.77.11"
                .parse::<std::net::Ipv6Addr>()
                .unwrap()
        );
    }

    #[test]
    fn missing_required_attributes_and_capabilities() {
        let mut a = rtr();
        a.min_rnr_timer = None;
        let e = build_attr(&a, QpState::Init, PATH, &caps()).err().unwrap();
        assert!(e.to_string().contains("min_rnr_timer"), "{e}");
        let e = build_attr(
            &QpAttr {
                qp_state: Some(QpState::Rts),
                sq_psn: Some(1),
                ..Default::default()
            },
            QpState::Rtr,
            PATH,
            &caps(),
        )
        .err()
        .unwrap();
        assert!(e.to_string().contains("RTR -> RTS needs"), "{e}");
        let mut a = rtr();
        a.max_dest_rd_atomic = Some(17);
        assert_eq!(
            build_attr(&a, QpState::Init, PATH, &caps()).err().unwrap(),
            VerbsError::CapabilityExceeded {
                what: "max_dest_rd_atomic (max_qp_rd_atom)",
                asked: 17,
                max: 16
            }
        );
        // A modify without a state change (timeout in RTS) needs nothing more.
        let (_, mask) = build_attr(
            &QpAttr {
                timeout: Some(17),
                ..Default::default()
            },
            QpState::Rts,
            PATH,
            &caps(),
        )
        .unwrap();
        assert_eq!(mask as u32, ibv_qp_attr_mask::IBV_QP_TIMEOUT.0);
    }
}
