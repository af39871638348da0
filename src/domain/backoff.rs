//! The one exponential backoff: a first delay, doubled per failure up to a bound on the doublings and a cap on the
//! delay. The projectors' retries, the effects' transient failures and the dispatcher's attempts each hold one.

use std::time::Duration;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Backoff {
    pub first: Duration,
    /// At most this many doublings (the delay's growth stops there even under the cap).
    pub max_doublings: u32,
    pub cap: Duration,
}

impl Backoff {
    /// The delay after `failures` failures in a row: `first` for the first (and for none), doubling per failure.
    pub fn after(&self, failures: u32) -> Duration {
        let doublings = failures.saturating_sub(1).min(self.max_doublings).min(31);
        self.first.saturating_mul(1u32 << doublings).min(self.cap)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles_per_failure_up_to_its_bounds() {
        let b = Backoff {
            first: Duration::from_secs(2),
            max_doublings: 3,
            cap: Duration::from_secs(10),
        };
        let secs: Vec<u64> = (0..7).map(|n| b.after(n).as_secs()).collect();
        assert_eq!(secs, [2, 2, 4, 8, 10, 10, 10]);
        let unbounded = Backoff {
            first: Duration::from_secs(1),
            max_doublings: u32::MAX,
            cap: Duration::MAX,
        };
        assert_eq!(unbounded.after(33), Duration::from_secs(1 << 31));
        assert_eq!(unbounded.after(u32::MAX), Duration::from_secs(1 << 31));
    }
}
