//! The CM's timer arithmetic, as Linux ib_cm computes it (`drivers/infiniband/core/cm.c`):
//! IBTA time values (4.096 us x 2^value) turned into retransmission intervals and the
//! TimeWait period.
use std::time::Duration;

/// Longest TimeWait we keep a connection for. Linux uses `cm_convert(ack_timeout)`
/// uncapped, but the ACK timeout comes from the peer's REQ: a REQ with timeout 31 would
/// pin a connection's state for 2^23 ms (2.3 hours). 10 s covers every sane timeout
/// (Linux hosts ask for 0x13: 2 s).
pub const MAX_TIMEWAIT: Duration = Duration::from_secs(10);

/// Linux `cm_convert_to_ms`: 4.096 us x 2^`iba_time`, approximated as
/// `2^(iba_time - 8)` ms (at least 1 ms). 20 -> 4096 ms, 19 -> 2048 ms.
pub fn cm_convert(iba_time: u8) -> Duration {
    Duration::from_millis(1u64 << iba_time.saturating_sub(8).min(31))
}

/// Linux `cm_ack_timeout`: the local ACK timeout (5-bit IBTA time value) for a CA ACK
/// delay and a path's packet life time, ~ `ack_delay + 2 x life_time` in IBTA time
/// values, capped at 31.
pub fn cm_ack_timeout(ca_ack_delay: u8, packet_life_time: u8) -> u8 {
    let (delay, life) = (i32::from(ca_ack_delay), i32::from(packet_life_time));
    let mut ack = life + 1;
    if ack >= delay {
        ack += i32::from(delay >= ack - 1);
    } else {
        ack = delay + i32::from(ack >= delay - 1);
    }
    ack.min(31) as u8
}

/// The packet life time a REQ's Primary Local ACK Timeout stands for, as ib_cm's
/// passive side derives it (`cm_format_paths_from_req`): the value minus one.
pub fn packet_life_time(local_ack_timeout: u8) -> u8 {
    local_ack_timeout.saturating_sub(1)
}

/// The active side's REQ retransmission interval (Linux `ib_send_cm_req`): twice the
/// path's packet life time plus the peer's CM response time. The same interval times
/// the active side's DREQ.
pub fn req_interval(packet_life_time: u8, remote_cm_response_timeout: u8) -> Duration {
    cm_convert(packet_life_time) * 2 + cm_convert(remote_cm_response_timeout)
}

/// The interval after an MRA with `service_timeout` (Linux `cm_mra_handler`): the
/// service timeout plus the connection's ACK timeout.
pub fn mra_interval(service_timeout: u8, ack_timeout: u8) -> Duration {
    cm_convert(service_timeout) + cm_convert(ack_timeout)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn linux_values() {
        assert_eq!(cm_convert(20), Duration::from_millis(4096));
        assert_eq!(cm_convert(19), Duration::from_millis(2048));
        assert_eq!(cm_convert(3), Duration::from_millis(1));
        assert_eq!(cm_convert(31), Duration::from_millis(1 << 23));
        // rxe (ACK delay 15) with the REQ's 0x13: TimeWait 2048 ms.
        assert_eq!(cm_ack_timeout(15, packet_life_time(0x13)), 0x13);
        assert_eq!(cm_ack_timeout(15, 11), 15);
        assert_eq!(cm_ack_timeout(15, 13), 16);
        assert_eq!(cm_ack_timeout(15, 40), 31);
        assert_eq!(packet_life_time(0), 0);
        // A Linux host (life time 18, response timeout 20): 2 x 1024 + 4096 ms.
        assert_eq!(req_interval(18, 20), Duration::from_millis(6144));
        assert_eq!(mra_interval(24, 19), Duration::from_millis(65536 + 2048));
    }
}
