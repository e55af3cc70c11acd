//! Per-QP counters, named as Linux rxe's hw_counters (`rxe_hw_counters.c`).

/// Packet and error counters of one QP (RC; UC and UD use the ones that apply, plus
/// `dropped_msgs` and `qkey_violations`). Each counts events since the QP was created.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QpCounters {
    /// Packets handed to the driver by `poll_transmit` (requests, responses, ACKs).
    pub sent_pkts: u64,
    /// Packets accepted by `handle_packet` (addressed to this QP in a receiving state).
    pub rcvd_pkts: u64,
    /// Responder: duplicate requests (PSN before the expected PSN, or a second copy of
    /// a kept out-of-order packet), re-ACKed or, for RDMA READ, answered again, never
    /// re-executed.
    pub duplicate_request: u64,
    /// Responder: requests ahead of the expected PSN (go-back-N: dropped, one PSN
    /// sequence error NAK per gap; selective retransmission: kept, the gap NAKed as in
    /// go-back-N and again every 64 arrivals while it stays open).
    pub out_of_seq_request: u64,
    /// Requester: RNR NAKs received.
    pub rcvd_rnr_err: u64,
    /// Responder: RNR NAKs sent (no receive WQE for a SEND or WRITE with immediate).
    pub send_rnr_err: u64,
    /// Requester: PSN sequence error NAKs received.
    pub rcvd_seq_err: u64,
    /// Responder: ACKs merged into a later ACK (coalescing). rxe counts under this
    /// name (RXE_CNT_COMPLETER_SCHED) responses whose processing its completer had to
    /// defer; a sans-IO core processes every response at once, so the name is kept for
    /// the closest deferral it has.
    pub ack_deferred: u64,
    /// Requester: WRs completed with IBV_WC_RETRY_EXC_ERR.
    pub retry_exceeded_err: u64,
    /// Requester: WRs completed with IBV_WC_RNR_RETRY_EXC_ERR.
    pub retry_rnr_exceeded_err: u64,
    /// Requester: go-back-N retransmissions started (either timer, sequence NAK,
    /// missing READ response), as rxe's RXE_CNT_COMP_RETRY.
    pub completer_retry_err: u64,
    /// Requester: WRs completed with an error status other than flush. (rxe counts
    /// failed transmissions here; the core sees no socket, the soft provider counts
    /// those per device as `tx_dropped_pkts`.)
    pub send_err: u64,
    /// Requester: RDMA WRITE and READ Request packets sent.
    pub rdma_sends: u64,
    /// Responder: RDMA WRITE and READ Request packets executed.
    pub rdma_recvs: u64,
    /// Requester: IBTA local ACK timer expiries (each uses up one of `retry_cnt`).
    pub local_ack_timeout_err: u64,
    /// NAKs sent by the responder (sequence, invalid request, access, operational).
    pub sent_naks: u64,
    /// Requester: adaptive retransmission timer expiries (go-back-N before the IBTA
    /// local ACK timeout; no retry used up). Not an rxe counter.
    pub rto_timeouts: u64,
    /// Requester: tail loss probes sent (the first response to an adaptive timer
    /// expiry: the last packet sent, alone). Not an rxe counter.
    pub rto_probes: u64,
    /// Requester: adaptive timer expiries found to be a peer's stall rather than a loss
    /// (packets sent before the expiry acknowledged after it, or the tail loss probe
    /// answered later than the timeout); each raises the timeout's floor to the stall.
    /// Not an rxe counter.
    pub spurious_rto: u64,
    /// Requester: packets resent alone after a selective NAK (selective retransmission
    /// negotiated). Not an rxe counter.
    pub sr_retransmits: u64,
    /// Responder: out-of-order request packets kept for in-order execution (selective
    /// retransmission negotiated). Not an rxe counter.
    pub sr_buffered: u64,
    /// Notification point: CE-marked packets received (ConnectX's
    /// `np_ecn_marked_roce_packets`).
    pub np_ecn_marked_roce_packets: u64,
    /// Notification point: CNPs sent (`np_cnp_sent`).
    pub np_cnp_sent: u64,
    /// Reaction point: CNPs acted on by the rate control (`rp_cnp_handled`).
    pub rp_cnp_handled: u64,
    /// Reaction point: CNPs received without rate control to act on them
    /// (`rp_cnp_ignored`).
    pub rp_cnp_ignored: u64,
    /// UC and UD receiver: messages (UD: packets) dropped without a completion, as
    /// IBTA Vol 1 §9.7.7 / §9.8 and rxe drop them: UC, a PSN gap or an opcode out of
    /// sequence (the rest of the message is dropped), an R_Key or length violation,
    /// no receive WR; UD, no receive WR. Not an rxe counter.
    pub dropped_msgs: u64,
    /// UD receiver: packets dropped for a Q_Key other than the QP's (IBTA Vol 1
    /// §10.2.5; the port's Q_Key violation count, per QP here).
    pub qkey_violations: u64,
}

/// Sums counters (a poll group's QPs, live and destroyed).
impl std::ops::AddAssign<&QpCounters> for QpCounters {
    fn add_assign(&mut self, b: &QpCounters) {
        self.sent_pkts += b.sent_pkts;
        self.rcvd_pkts += b.rcvd_pkts;
        self.duplicate_request += b.duplicate_request;
        self.out_of_seq_request += b.out_of_seq_request;
        self.rcvd_rnr_err += b.rcvd_rnr_err;
        self.send_rnr_err += b.send_rnr_err;
        self.rcvd_seq_err += b.rcvd_seq_err;
        self.ack_deferred += b.ack_deferred;
        self.retry_exceeded_err += b.retry_exceeded_err;
        self.retry_rnr_exceeded_err += b.retry_rnr_exceeded_err;
        self.completer_retry_err += b.completer_retry_err;
        self.send_err += b.send_err;
        self.rdma_sends += b.rdma_sends;
        self.rdma_recvs += b.rdma_recvs;
        self.local_ack_timeout_err += b.local_ack_timeout_err;
        self.sent_naks += b.sent_naks;
        self.rto_timeouts += b.rto_timeouts;
        self.rto_probes += b.rto_probes;
        self.spurious_rto += b.spurious_rto;
        self.sr_retransmits += b.sr_retransmits;
        self.sr_buffered += b.sr_buffered;
        self.np_ecn_marked_roce_packets += b.np_ecn_marked_roce_packets;
        self.np_cnp_sent += b.np_cnp_sent;
        self.rp_cnp_handled += b.rp_cnp_handled;
        self.rp_cnp_ignored += b.rp_cnp_ignored;
        self.dropped_msgs += b.dropped_msgs;
        self.qkey_violations += b.qkey_violations;
    }
}
