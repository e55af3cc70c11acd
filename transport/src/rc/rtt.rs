//! Round-trip time estimation and the adaptive retransmission timeout (RFC 6298 §2-§5,
//! applied to RC requests; see `docs/reliability.md`).
//!
//! Samples come only from request packets sent once (Karn's algorithm, RFC 6298 §3):
//! the requester times one AckReq packet at a time and discards the measurement when any
//! go-back-N or selective retransmission happens before its acknowledgement. The
//! timeout is `SRTT + max(G, 4 x RTTVAR)`, clamped to `[floor, ceiling]`, where the
//! ceiling is the IBTA local ACK timeout of the QP (4.096 us x 2^timeout, IBTA Vol 1
//! §9.7.6.1.3), and doubles on every expiry without progress (RFC 6298 §5.5), never
//! beyond the ceiling.
use std::time::Duration;

/// Clock granularity G of RFC 6298 §2.4: the virtual and real clocks are in ns, so one
/// microsecond stands for "a tick".
const GRANULARITY: Duration = Duration::from_micros(1);

/// Smoothed round-trip time state of one requester.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RttEstimator {
    /// SRTT; `None` before the first sample.
    srtt: Option<Duration>,
    /// RTTVAR.
    rttvar: Duration,
    /// Expiries without progress since the last acknowledgement (exponent of the
    /// back-off).
    backoff: u32,
    /// Samples taken.
    samples: u64,
}

impl RttEstimator {
    /// Folds in one round-trip sample (RFC 6298 §2.2-§2.3, alpha 1/8, beta 1/4).
    pub fn sample(&mut self, r: Duration) {
        self.samples += 1;
        match self.srtt {
            None => {
                self.srtt = Some(r);
                self.rttvar = r / 2;
            }
            Some(s) => {
                let dev = s.abs_diff(r);
                self.rttvar = (self.rttvar * 3 + dev) / 4;
                self.srtt = Some((s * 7 + r) / 8);
            }
        }
    }

    /// SRTT, `None` before the first sample.
    pub fn srtt(&self) -> Option<Duration> {
        self.srtt
    }

    /// RTTVAR.
    pub fn rttvar(&self) -> Duration {
        self.rttvar
    }

    /// Samples taken so far.
    pub fn samples(&self) -> u64 {
        self.samples
    }

    /// Records an expiry: the next timeout is twice as long (RFC 6298 §5.5).
    pub fn back_off(&mut self) {
        self.backoff = (self.backoff + 1).min(16);
    }

    /// A new valid sample: the back-off ends.
    pub fn reset_backoff(&mut self) {
        self.backoff = 0;
    }

    /// Forward progress without a valid sample (every acknowledged packet was resent
    /// or its measurement discarded, Karn): undoes one doubling, so that a loss that
    /// keeps recurring cannot pin the timeout at its ceiling while the peer answers.
    pub fn ease_backoff(&mut self) {
        self.backoff = self.backoff.saturating_sub(1);
    }

    /// Doublings in force (expiries not yet undone by progress or a sample).
    pub fn backoff(&self) -> u32 {
        self.backoff
    }

    /// The retransmission timeout: `SRTT + max(G, 4 x RTTVAR)` (or `initial` before the
    /// first sample), raised to `floor`, doubled per back-off step, clamped to `ceiling`
    /// (`ceiling` wins when `floor > ceiling`), and never below 1 us.
    pub fn rto(&self, initial: Duration, floor: Duration, ceiling: Duration) -> Duration {
        let base = match self.srtt {
            None => initial,
            Some(s) => s + (self.rttvar * 4).max(GRANULARITY),
        };
        // RFC 6298 §5.5 doubles the timeout in force, floor included (a back-off of
        // the bare estimate stays under a floor that exceeds it, and the timer would
        // keep expiring at the floor).
        let backed = base.max(floor).saturating_mul(1u32 << self.backoff.min(16));
        backed.min(ceiling).max(GRANULARITY)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const US: Duration = Duration::from_micros(1);

    #[test]
    fn first_sample_then_smoothing() {
        let mut r = RttEstimator::default();
        assert_eq!(r.rto(1000 * US, 10 * US, 100_000 * US), 1000 * US);
        r.sample(100 * US);
        assert_eq!(r.srtt(), Some(100 * US));
        assert_eq!(r.rttvar(), 50 * US);
        // 100 + 4 x 50
        assert_eq!(r.rto(1000 * US, 10 * US, 100_000 * US), 300 * US);
        for _ in 0..100 {
            r.sample(100 * US);
        }
        // Converges to SRTT = 100 us with RTTVAR near 0, so the floor or G decides.
        assert_eq!(r.srtt(), Some(100 * US));
        assert!(r.rto(1000 * US, 10 * US, 100_000 * US) < 110 * US);
        assert_eq!(r.rto(1000 * US, 200 * US, 100_000 * US), 200 * US);
    }

    #[test]
    fn backoff_doubles_up_to_the_ceiling() {
        let mut r = RttEstimator::default();
        r.sample(100 * US);
        let c = 1000 * US;
        assert_eq!(r.rto(c, US, c), 300 * US);
        r.back_off();
        assert_eq!(r.rto(c, US, c), 600 * US);
        r.back_off();
        assert_eq!(r.rto(c, US, c), c);
        r.reset_backoff();
        assert_eq!(r.rto(c, US, c), 300 * US);
    }

    #[test]
    fn progress_without_a_sample_undoes_one_doubling() {
        let mut r = RttEstimator::default();
        r.sample(100 * US);
        let c = 100_000 * US;
        for _ in 0..5 {
            r.back_off();
        }
        assert_eq!(r.rto(c, US, c), 300 * US * 32);
        r.ease_backoff();
        assert_eq!(r.backoff(), 4);
        assert_eq!(r.rto(c, US, c), 300 * US * 16);
        for _ in 0..10 {
            r.ease_backoff();
        }
        assert_eq!(r.backoff(), 0);
        assert_eq!(r.rto(c, US, c), 300 * US);
        // The estimate itself is untouched.
        assert_eq!(r.srtt(), Some(100 * US));
        assert_eq!(r.samples(), 1);
    }
}
