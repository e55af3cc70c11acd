//! Work completions: `struct ibv_wc` to [`WorkCompletion`], with `enum ibv_wc_status`
//! mapped one to one onto [`WcStatus`] (the verbs model keeps ibverbs' numbering).
use rdma_sys::{ibv_wc, ibv_wc_opcode, ibv_wc_status};

use crate::verbs::{WcOpcode, WcStatus, WorkCompletion};

/// IBV_WC_GRH in `ibv_wc.wc_flags`: a GRH fills the first 40 bytes of the receive buffer.
const IBV_WC_GRH: u32 = 1;
/// IBV_WC_WITH_IMM in `ibv_wc.wc_flags`.
const IBV_WC_WITH_IMM: u32 = 1 << 1;
/// IBV_WC_WITH_INV in `ibv_wc.wc_flags`.
const IBV_WC_WITH_INV: u32 = 1 << 3;
/// The kernel's IB_WC_WITH_INVALIDATE (`enum ib_wc_flags`: 1 << 2, which is
/// IBV_WC_IP_CSUM_OK to libibverbs). Linux rxe writes the kernel's flag into user CQs
/// unchanged (`rxe_resp.c` `do_complete`: `uwc->wc_flags |= IB_WC_WITH_INVALIDATE`,
/// through 6.1 at least), so on rxe a SEND with Invalidate arrives with this bit and
/// the rkey in the union. Missing it is not harmless: the host would then invalidate
/// the already invalidated memory window itself, and rxe 6.1 dereferences NULL on a
/// LOCAL_INV of a free type 2 window (`rxe_invalidate_mw`), a kernel panic. An RC
/// receive never carries an IP checksum verdict (offload of raw packet and UD QPs), so
/// on a receive with a non-zero rkey and no immediate this bit means invalidation.
const IB_WC_WITH_INVALIDATE_KERNEL: u32 = 1 << 2;

/// The model's status of an `enum ibv_wc_status` value; a value this rdma-core does not
/// know (a newer provider's) is reported as IBV_WC_GENERAL_ERR.
pub fn wc_status_from_ibv(status: ibv_wc_status::Type) -> WcStatus {
    use ibv_wc_status::*;
    use WcStatus::*;
    match status {
        IBV_WC_SUCCESS => Success,
        IBV_WC_LOC_LEN_ERR => LocLenErr,
        IBV_WC_LOC_QP_OP_ERR => LocQpOpErr,
        IBV_WC_LOC_EEC_OP_ERR => LocEecOpErr,
        IBV_WC_LOC_PROT_ERR => LocProtErr,
        IBV_WC_WR_FLUSH_ERR => WrFlushErr,
        IBV_WC_MW_BIND_ERR => MwBindErr,
        IBV_WC_BAD_RESP_ERR => BadRespErr,
        IBV_WC_LOC_ACCESS_ERR => LocAccessErr,
        IBV_WC_REM_INV_REQ_ERR => RemInvReqErr,
        IBV_WC_REM_ACCESS_ERR => RemAccessErr,
        IBV_WC_REM_OP_ERR => RemOpErr,
        IBV_WC_RETRY_EXC_ERR => RetryExcErr,
        IBV_WC_RNR_RETRY_EXC_ERR => RnrRetryExcErr,
        IBV_WC_LOC_RDD_VIOL_ERR => LocRddViolErr,
        IBV_WC_REM_INV_RD_REQ_ERR => RemInvRdReqErr,
        IBV_WC_REM_ABORT_ERR => RemAbortErr,
        IBV_WC_INV_EECN_ERR => InvEecnErr,
        IBV_WC_INV_EEC_STATE_ERR => InvEecStateErr,
        IBV_WC_FATAL_ERR => FatalErr,
        IBV_WC_RESP_TIMEOUT_ERR => RespTimeoutErr,
        _ => GeneralErr,
    }
}

/// The `enum ibv_wc_status` value of a model status.
pub fn wc_status_to_ibv(status: WcStatus) -> ibv_wc_status::Type {
    status as ibv_wc_status::Type
}

/// The model's opcode of an `enum ibv_wc_opcode` value; `None` for the ones the model
/// has no use for (atomics, TSO), which this project never posts.
pub fn wc_opcode_from_ibv(opcode: ibv_wc_opcode::Type) -> Option<WcOpcode> {
    use ibv_wc_opcode::*;
    Some(match opcode {
        IBV_WC_SEND => WcOpcode::Send,
        IBV_WC_RDMA_WRITE => WcOpcode::RdmaWrite,
        IBV_WC_RDMA_READ => WcOpcode::RdmaRead,
        IBV_WC_LOCAL_INV => WcOpcode::LocalInv,
        IBV_WC_BIND_MW => WcOpcode::BindMw,
        IBV_WC_RECV => WcOpcode::Recv,
        IBV_WC_RECV_RDMA_WITH_IMM => WcOpcode::RecvRdmaWithImm,
        _ => return None,
    })
}

/// Converts one `ibv_wc`.
///
/// ibverbs defines `opcode` only for successful completions; for an error completion
/// the provider's value is passed on when it is a known opcode (rxe and mlx5 report
/// the WR's), otherwise [`WcOpcode::Send`]: identify error completions by `wr_id`.
pub fn work_completion(wc: &ibv_wc) -> WorkCompletion {
    let status = wc_status_from_ibv(wc.status);
    let opcode = wc_opcode_from_ibv(wc.opcode).unwrap_or(WcOpcode::Send);
    // SAFETY: both union fields are u32; which one is meant is given by wc_flags.
    let union = unsafe { wc.imm_data_invalidated_rkey_union.invalidated_rkey };
    let ok = status == WcStatus::Success;
    WorkCompletion {
        wr_id: wc.wr_id,
        status,
        opcode,
        byte_len: wc.byte_len,
        // imm_data is __be32: the model carries it as the value read in network order.
        imm_data: (ok && wc.wc_flags & IBV_WC_WITH_IMM != 0).then(|| u32::from_be(union)),
        invalidated_rkey: (ok && invalidated(wc, opcode, union)).then_some(union),
        qp_num: wc.qp_num,
        src_qp: wc.src_qp,
        grh: wc.wc_flags & IBV_WC_GRH != 0,
    }
}

/// Whether `wc` (a successful completion of `opcode`) reports a remote invalidation of
/// `union`: IBV_WC_WITH_INV, or rxe's kernel flag ([`IB_WC_WITH_INVALIDATE_KERNEL`]).
fn invalidated(wc: &ibv_wc, opcode: WcOpcode, union: u32) -> bool {
    let flags = wc.wc_flags;
    flags & IBV_WC_WITH_INV != 0
        || (opcode == WcOpcode::Recv
            && flags & IB_WC_WITH_INVALIDATE_KERNEL != 0
            && flags & IBV_WC_WITH_IMM == 0
            && union != 0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rdma_sys::imm_data_invalidated_rkey_union_t;

    /// Every `enum ibv_wc_status` value of rdma-core, by its C name, against the model.
    const ALL: [(ibv_wc_status::Type, WcStatus); 22] = {
        use ibv_wc_status::*;
        use WcStatus::*;
        [
            (IBV_WC_SUCCESS, Success),
            (IBV_WC_LOC_LEN_ERR, LocLenErr),
            (IBV_WC_LOC_QP_OP_ERR, LocQpOpErr),
            (IBV_WC_LOC_EEC_OP_ERR, LocEecOpErr),
            (IBV_WC_LOC_PROT_ERR, LocProtErr),
            (IBV_WC_WR_FLUSH_ERR, WrFlushErr),
            (IBV_WC_MW_BIND_ERR, MwBindErr),
            (IBV_WC_BAD_RESP_ERR, BadRespErr),
            (IBV_WC_LOC_ACCESS_ERR, LocAccessErr),
            (IBV_WC_REM_INV_REQ_ERR, RemInvReqErr),
            (IBV_WC_REM_ACCESS_ERR, RemAccessErr),
            (IBV_WC_REM_OP_ERR, RemOpErr),
            (IBV_WC_RETRY_EXC_ERR, RetryExcErr),
            (IBV_WC_RNR_RETRY_EXC_ERR, RnrRetryExcErr),
            (IBV_WC_LOC_RDD_VIOL_ERR, LocRddViolErr),
            (IBV_WC_REM_INV_RD_REQ_ERR, RemInvRdReqErr),
            (IBV_WC_REM_ABORT_ERR, RemAbortErr),
            (IBV_WC_INV_EECN_ERR, InvEecnErr),
            (IBV_WC_INV_EEC_STATE_ERR, InvEecStateErr),
            (IBV_WC_FATAL_ERR, FatalErr),
            (IBV_WC_RESP_TIMEOUT_ERR, RespTimeoutErr),
            (IBV_WC_GENERAL_ERR, GeneralErr),
        ]
    };

    #[test]
    fn every_status_maps_one_to_one() {
        let mut seen = std::collections::HashSet::new();
        for (ibv, ours) in ALL {
            assert_eq!(wc_status_from_ibv(ibv), ours, "ibv value {ibv}");
            assert_eq!(wc_status_to_ibv(ours), ibv, "{ours}");
            assert!(seen.insert(ours), "{ours} twice");
            // The model's names are the C names.
            // SAFETY: ibv_wc_status_str returns a static string for any value.
            let c = unsafe { std::ffi::CStr::from_ptr(rdma_sys::ibv_wc_status_str(ibv)) };
            assert!(!c.to_bytes().is_empty(), "{}", ours.name());
        }
        // The values are 0..=21 without gaps: nothing of rdma-core's is missing.
        let mut v: Vec<u32> = ALL.iter().map(|(i, _)| *i).collect();
        v.sort_unstable();
        assert_eq!(v, (0..22).collect::<Vec<_>>());
        assert_eq!(wc_status_from_ibv(22), WcStatus::GeneralErr);
        assert_eq!(wc_status_from_ibv(u32::MAX), WcStatus::GeneralErr);
    }

    #[test]
    fn every_opcode_maps() {
        use ibv_wc_opcode::*;
        let pairs = [
            (IBV_WC_SEND, Some(WcOpcode::Send)),
            (IBV_WC_RDMA_WRITE, Some(WcOpcode::RdmaWrite)),
            (IBV_WC_RDMA_READ, Some(WcOpcode::RdmaRead)),
            (IBV_WC_COMP_SWAP, None),
            (IBV_WC_FETCH_ADD, None),
            (IBV_WC_BIND_MW, Some(WcOpcode::BindMw)),
            (IBV_WC_LOCAL_INV, Some(WcOpcode::LocalInv)),
            (IBV_WC_TSO, None),
            (IBV_WC_RECV, Some(WcOpcode::Recv)),
            (IBV_WC_RECV_RDMA_WITH_IMM, Some(WcOpcode::RecvRdmaWithImm)),
        ];
        for (ibv, ours) in pairs {
            assert_eq!(wc_opcode_from_ibv(ibv), ours, "ibv opcode {ibv}");
        }
    }

    fn wc(status: u32, opcode: u32, flags: u32, union: u32) -> ibv_wc {
        ibv_wc {
            wr_id: 7,
            status,
            opcode,
            vendor_err: 0,
            byte_len: 64,
            imm_data_invalidated_rkey_union: imm_data_invalidated_rkey_union_t {
                invalidated_rkey: union,
            },
            qp_num: 0x11,
            src_qp: 0,
            wc_flags: flags,
            pkey_index: 0,
            slid: 0,
            sl: 0,
            dlid_path_bits: 0,
        }
    }

    #[test]
    fn immediate_and_invalidate_fields() {
        let w = work_completion(&wc(
            0,
            ibv_wc_opcode::IBV_WC_RECV,
            IBV_WC_WITH_IMM,
            0x1234_5678u32.to_be(),
        ));
        assert_eq!(w.imm_data, Some(0x1234_5678));
        assert_eq!(w.invalidated_rkey, None);
        assert_eq!((w.wr_id, w.byte_len, w.qp_num), (7, 64, 0x11));
        let w = work_completion(&wc(0, ibv_wc_opcode::IBV_WC_RECV, IBV_WC_WITH_INV, 0xabcd));
        assert_eq!((w.imm_data, w.invalidated_rkey), (None, Some(0xabcd)));
        // Linux rxe: the kernel's IB_WC_WITH_INVALIDATE (1 << 2) with IBV_WC_GRH.
        let w = work_completion(&wc(0, ibv_wc_opcode::IBV_WC_RECV, 1 | 1 << 2, 0xce4));
        assert_eq!((w.imm_data, w.invalidated_rkey), (None, Some(0xce4)));
        // The same bit without an rkey, or on a send completion, is no invalidation.
        let w = work_completion(&wc(0, ibv_wc_opcode::IBV_WC_RECV, 1 << 2, 0));
        assert_eq!(w.invalidated_rkey, None);
        let w = work_completion(&wc(0, ibv_wc_opcode::IBV_WC_SEND, 1 << 2, 0xce4));
        assert_eq!(w.invalidated_rkey, None);
        let w = work_completion(&wc(5, 0xdead, IBV_WC_WITH_IMM, 1));
        assert_eq!(w.status, WcStatus::WrFlushErr);
        assert_eq!(w.imm_data, None, "no fields of an error completion");
    }
}
