//! The QP's timers as one named table (quinn-proto's shape): each timer is a deadline
//! or nothing, [`Timers::next`] is what `RcQp::poll_timeout` reports, and the driver's
//! one call `RcQp::handle_timeout` finds the expired ones by name.
use crate::time::Timestamp;

/// The timers of one RC QP.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Timer {
    /// The IBTA local ACK timer (IBTA Vol 1 §9.7.6.1.3): each expiry uses up one of
    /// `retry_cnt`.
    Ack,
    /// The adaptive retransmission timer (RFC 6298): go-back-N before the local ACK
    /// timeout, no retry used up.
    Rto,
    /// The end of an RNR NAK's wait (IBTA §9.7.5.2.8).
    Rnr,
    /// Congestion control: the rate-increase timer (DCQCN's `rpg_time_reset`).
    CcRate,
    /// Congestion control: the alpha (congestion estimate) update timer.
    CcAlpha,
    /// Congestion control: the earliest time a paced request packet may leave.
    Pacing,
}

impl Timer {
    /// Every timer, in table order.
    pub const ALL: [Timer; 6] = [
        Timer::Ack,
        Timer::Rto,
        Timer::Rnr,
        Timer::CcRate,
        Timer::CcAlpha,
        Timer::Pacing,
    ];
}

/// One deadline per [`Timer`] (`None`: not armed).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Timers {
    at: [Option<Timestamp>; Timer::ALL.len()],
}

impl Timers {
    /// The deadline of `t`, if armed.
    pub fn get(&self, t: Timer) -> Option<Timestamp> {
        self.at[t as usize]
    }

    /// Arms `t` for `at` (re-arming replaces the deadline).
    pub fn set(&mut self, t: Timer, at: Timestamp) {
        self.at[t as usize] = Some(at);
    }

    /// Arms `t` for `at`, or disarms it for `None`.
    pub fn set_opt(&mut self, t: Timer, at: Option<Timestamp>) {
        self.at[t as usize] = at;
    }

    /// Disarms `t`.
    pub fn stop(&mut self, t: Timer) {
        self.at[t as usize] = None;
    }

    /// Whether `t` is armed.
    pub fn is_armed(&self, t: Timer) -> bool {
        self.at[t as usize].is_some()
    }

    /// Whether `t` is armed and due at `now`.
    pub fn is_due(&self, t: Timer, now: Timestamp) -> bool {
        self.at[t as usize].is_some_and(|d| now >= d)
    }

    /// The earliest armed deadline.
    pub fn next(&self) -> Option<Timestamp> {
        self.at.iter().flatten().min().copied()
    }

    /// Disarms every timer (the QP left the states that run them).
    pub fn clear(&mut self) {
        *self = Timers::default();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_reports_its_earliest_deadline_by_name() {
        let mut t = Timers::default();
        assert_eq!(t.next(), None);
        t.set(Timer::Ack, Timestamp(500));
        t.set(Timer::CcAlpha, Timestamp(100));
        t.set_opt(Timer::Rto, Some(Timestamp(300)));
        assert_eq!(t.next(), Some(Timestamp(100)));
        assert!(t.is_due(Timer::CcAlpha, Timestamp(100)));
        assert!(!t.is_due(Timer::Rto, Timestamp(299)));
        t.stop(Timer::CcAlpha);
        assert_eq!(t.next(), Some(Timestamp(300)));
        assert!(!t.is_armed(Timer::CcAlpha));
        t.clear();
        assert_eq!(t.next(), None);
    }
}
