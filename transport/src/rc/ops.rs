//! Opcode classification and AETH syndromes as the RC core needs them (IBTA Vol 1
//! §9.2 Table 37, §9.3.5 Tables 42-45). Kept private to the core so it does not depend on
//! the order in which the wire helpers appear.
use crate::wire::{NakCode, Opcode};

/// What an RC packet carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    Send,
    Write,
    ReadRequest,
    ReadResponse,
    Ack,
    /// Atomics and their acknowledgements (not implemented).
    Atomic,
    /// Not an RC packet (UC, UD, CNP).
    Other,
}

/// Position of a packet in its message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Pos {
    First,
    Middle,
    Last,
    Only,
}

/// Kind, position, ImmDt present, IETH present.
pub(crate) fn classify(op: Opcode) -> (Kind, Pos, bool, bool) {
    use Opcode::*;
    use Pos::*;
    match op {
        RcSendFirst => (Kind::Send, First, false, false),
        RcSendMiddle => (Kind::Send, Middle, false, false),
        RcSendLast => (Kind::Send, Last, false, false),
        RcSendLastImm => (Kind::Send, Last, true, false),
        RcSendOnly => (Kind::Send, Only, false, false),
        RcSendOnlyImm => (Kind::Send, Only, true, false),
        RcSendLastInv => (Kind::Send, Last, false, true),
        RcSendOnlyInv => (Kind::Send, Only, false, true),
        RcRdmaWriteFirst => (Kind::Write, First, false, false),
        RcRdmaWriteMiddle => (Kind::Write, Middle, false, false),
        RcRdmaWriteLast => (Kind::Write, Last, false, false),
        RcRdmaWriteLastImm => (Kind::Write, Last, true, false),
        RcRdmaWriteOnly => (Kind::Write, Only, false, false),
        RcRdmaWriteOnlyImm => (Kind::Write, Only, true, false),
        RcRdmaReadRequest => (Kind::ReadRequest, Only, false, false),
        RcRdmaReadResponseFirst => (Kind::ReadResponse, First, false, false),
        RcRdmaReadResponseMiddle => (Kind::ReadResponse, Middle, false, false),
        RcRdmaReadResponseLast => (Kind::ReadResponse, Last, false, false),
        RcRdmaReadResponseOnly => (Kind::ReadResponse, Only, false, false),
        RcAcknowledge => (Kind::Ack, Only, false, false),
        RcAtomicAcknowledge | RcCompareSwap | RcFetchAdd => (Kind::Atomic, Only, false, false),
        // UC and UD opcodes are not the RC core's (the `uc` and `ud` cores take them).
        UcSendFirst | UcSendMiddle | UcSendLast | UcSendLastImm | UcSendOnly | UcSendOnlyImm
        | UcRdmaWriteFirst | UcRdmaWriteMiddle | UcRdmaWriteLast | UcRdmaWriteLastImm
        | UcRdmaWriteOnly | UcRdmaWriteOnlyImm | UdSendOnly | UdSendOnlyImm | Cnp => {
            (Kind::Other, Only, false, false)
        }
    }
}

/// The opcode of a SEND packet at `pos`, with the variant for immediate / invalidate.
pub(crate) fn send_opcode(pos: Pos, imm: bool, inv: bool) -> Opcode {
    use Opcode::*;
    match (pos, imm, inv) {
        (Pos::First, ..) => RcSendFirst,
        (Pos::Middle, ..) => RcSendMiddle,
        (Pos::Last, true, _) => RcSendLastImm,
        (Pos::Last, _, true) => RcSendLastInv,
        (Pos::Last, ..) => RcSendLast,
        (Pos::Only, true, _) => RcSendOnlyImm,
        (Pos::Only, _, true) => RcSendOnlyInv,
        (Pos::Only, ..) => RcSendOnly,
    }
}

/// The opcode of an RDMA WRITE packet at `pos`.
pub(crate) fn write_opcode(pos: Pos, imm: bool) -> Opcode {
    use Opcode::*;
    match (pos, imm) {
        (Pos::First, _) => RcRdmaWriteFirst,
        (Pos::Middle, _) => RcRdmaWriteMiddle,
        (Pos::Last, true) => RcRdmaWriteLastImm,
        (Pos::Last, false) => RcRdmaWriteLast,
        (Pos::Only, true) => RcRdmaWriteOnlyImm,
        (Pos::Only, false) => RcRdmaWriteOnly,
    }
}

/// The opcode of an RDMA READ Response packet at `pos`.
pub(crate) fn read_response_opcode(pos: Pos) -> Opcode {
    use Opcode::*;
    match pos {
        Pos::First => RcRdmaReadResponseFirst,
        Pos::Middle => RcRdmaReadResponseMiddle,
        Pos::Last => RcRdmaReadResponseLast,
        Pos::Only => RcRdmaReadResponseOnly,
    }
}

/// Position of packet `i` (0-based) of a message of `n` packets.
pub(crate) fn pos_of(i: u32, n: u32) -> Pos {
    match (i, n) {
        (_, 0 | 1) => Pos::Only,
        (0, _) => Pos::First,
        (i, n) if i + 1 >= n => Pos::Last,
        _ => Pos::Middle,
    }
}

/// AETH syndrome of an ACK with "no credit information" (credit code 0b11111), as
/// Linux rxe sends (IBTA §9.7.5.2.1).
pub(crate) const SYNDROME_ACK: u8 = 0x1F;

/// AETH syndrome of an RNR NAK with RNR timer code `timer` (IBTA Table 42).
pub(crate) fn syndrome_rnr(timer: u8) -> u8 {
    0x20 | (timer & 0x1F)
}

/// AETH syndrome of a NAK (IBTA Table 43).
pub(crate) fn syndrome_nak(code: NakCode) -> u8 {
    0x60 | match code {
        NakCode::PsnSequenceError => 0,
        NakCode::InvalidRequest => 1,
        NakCode::RemoteAccessError => 2,
        NakCode::RemoteOperationalError => 3,
        NakCode::InvalidRdRequest => 4,
        NakCode::Reserved(c) => c & 0x1F,
    }
}

/// A decoded AETH syndrome.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Syndrome {
    Ack,
    Rnr(u8),
    Nak(NakCode),
    Reserved,
}

/// Decodes an AETH syndrome byte (IBTA §9.3.5 Table 42).
pub(crate) fn decode_syndrome(s: u8) -> Syndrome {
    let low = s & 0x1F;
    match (s >> 5) & 3 {
        0 => Syndrome::Ack,
        1 => Syndrome::Rnr(low),
        3 => Syndrome::Nak(match low {
            0 => NakCode::PsnSequenceError,
            1 => NakCode::InvalidRequest,
            2 => NakCode::RemoteAccessError,
            3 => NakCode::RemoteOperationalError,
            4 => NakCode::InvalidRdRequest,
            c => NakCode::Reserved(c),
        }),
        _ => Syndrome::Reserved,
    }
}

/// RNR NAK timer values in microseconds by 5-bit code (IBTA Vol 1 Table 45).
pub const RNR_TIMER_US: [u32; 32] = [
    655_360, 10, 20, 30, 40, 60, 80, 120, 160, 240, 320, 480, 640, 960, 1_280, 1_920, 2_560, 3_840,
    5_120, 7_680, 10_240, 15_360, 20_480, 30_720, 40_960, 61_440, 81_920, 122_880, 163_840,
    245_760, 327_680, 491_520,
];

/// The RNR wait for a timer code, as a duration (IBTA Table 45).
pub fn rnr_timer(code: u8) -> std::time::Duration {
    std::time::Duration::from_micros(RNR_TIMER_US[(code & 0x1F) as usize] as u64)
}

/// Local ACK timeout: 4.096 us x 2^`timeout`; `None` for 0 (no timer), IBTA §9.7.6.1.3.
pub fn ack_timeout(timeout: u8) -> Option<std::time::Duration> {
    if timeout == 0 {
        return None;
    }
    let exp = timeout.min(31) as u32;
    Some(std::time::Duration::from_nanos(4096u64 << exp))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn syndromes_round_trip() {
        assert_eq!(decode_syndrome(SYNDROME_ACK), Syndrome::Ack);
        assert_eq!(decode_syndrome(syndrome_rnr(14)), Syndrome::Rnr(14));
        for c in [
            NakCode::PsnSequenceError,
            NakCode::InvalidRequest,
            NakCode::RemoteAccessError,
            NakCode::RemoteOperationalError,
            NakCode::InvalidRdRequest,
        ] {
            assert_eq!(decode_syndrome(syndrome_nak(c)), Syndrome::Nak(c));
        }
        assert_eq!(syndrome_nak(NakCode::RemoteAccessError), 0x62);
    }

    #[test]
    fn timers() {
        assert_eq!(rnr_timer(0).as_micros(), 655_360);
        assert_eq!(rnr_timer(14).as_micros(), 1_280);
        assert_eq!(ack_timeout(0), None);
        assert_eq!(ack_timeout(14).unwrap().as_nanos(), 4096 * 16384);
        assert_eq!(pos_of(0, 1), Pos::Only);
        assert_eq!(pos_of(0, 3), Pos::First);
        assert_eq!(pos_of(1, 3), Pos::Middle);
        assert_eq!(pos_of(2, 3), Pos::Last);
    }
}
