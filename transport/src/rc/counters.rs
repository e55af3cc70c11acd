//! Per-QP counters, named as Linux rxe's hw_counters (`rxe_hw_counters.c`).

/// Packet and error counters of one RC QP. Each counts events since the QP was created.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QpCounters {
    /// Packets handed to the driver by `poll_transmit` (requests, responses, ACKs).
    pub sent_pkts: u64,
    /// Packets accepted by `handle_packet` (addressed to this QP in a receiving state).
    pub rcvd_pkts: u64,
    /// Responder: duplicate requests (PSN before the expected PSN), re-ACKed or, for
    /// RDMA READ, answered again, never re-executed.
    pub duplicate_request: u64,
    /// Responder: requests ahead of the expected PSN (dropped; one PSN sequence error
    /// NAK per gap).
    pub out_of_seq_request: u64,
    /// Requester: RNR NAKs received.
    pub rcvd_rnr_err: u64,
    /// Responder: RNR NAKs sent (no receive WQE for a SEND or WRITE with immediate).
    pub send_rnr_err: u64,
    /// Requester: PSN sequence error NAKs received.
    pub rcvd_seq_err: u64,
    /// Responder: ACKs merged into a later ACK (coalescing).
    pub ack_deferred: u64,
    /// Requester: WRs completed with IBV_WC_RETRY_EXC_ERR.
    pub retry_exceeded_err: u64,
    /// Requester: WRs completed with IBV_WC_RNR_RETRY_EXC_ERR.
    pub retry_rnr_exceeded_err: u64,
    /// Requester: go-back-N retransmissions started (timeout, sequence NAK, missing
    /// READ response).
    pub completer_retry_err: u64,
    /// Requester: WRs completed with an error status other than flush.
    pub send_err: u64,
    /// Requester: RDMA WRITE and READ Request packets sent.
    pub rdma_sends: u64,
    /// Responder: RDMA WRITE and READ Request packets executed.
    pub rdma_recvs: u64,
    /// Requester: local ACK timer expiries.
    pub local_ack_timeout_err: u64,
    /// NAKs sent by the responder (sequence, invalid request, access, operational).
    pub sent_naks: u64,
}
