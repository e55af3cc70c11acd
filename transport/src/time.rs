//! Time as the sans-IO cores see it: a monotonic nanosecond count passed in by the
//! driver (a real clock in the soft provider, virtual time in simulations).
use std::time::Duration;

/// A point in time: nanoseconds since an arbitrary, driver-chosen epoch.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Timestamp(pub u64);

impl Timestamp {
    /// Nanoseconds since the driver's epoch.
    pub const fn as_nanos(self) -> u64 {
        self.0
    }
    /// `self - earlier`, zero if `earlier` is later.
    pub fn since(self, earlier: Timestamp) -> Duration {
        Duration::from_nanos(self.0.saturating_sub(earlier.0))
    }
}

impl std::ops::Add<Duration> for Timestamp {
    type Output = Timestamp;
    /// `self + d`, saturating.
    fn add(self, d: Duration) -> Timestamp {
        Timestamp(
            self.0
                .saturating_add(d.as_nanos().min(u64::MAX as u128) as u64),
        )
    }
}

/// A monotonic clock for drivers: `Timestamp`s relative to its creation.
#[derive(Clone, Copy, Debug)]
pub struct Clock {
    epoch: std::time::Instant,
}

impl Default for Clock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock {
    /// A clock whose epoch is now.
    pub fn new() -> Self {
        Clock {
            epoch: std::time::Instant::now(),
        }
    }
    /// The current time.
    pub fn now(&self) -> Timestamp {
        Timestamp(self.epoch.elapsed().as_nanos() as u64)
    }
}
