//! The clock a loop reads "now" from: the system's, shifted by an offset that only tests move, so a test of
//! "after downtime" moves time forward instead of waiting for it.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;

use chrono::{DateTime, Utc};

/// Clones share the offset: advancing one advances every loop built from the same settings.
#[derive(Clone, Debug, Default)]
pub struct Clock {
    offset_ms: Arc<AtomicI64>,
}

impl Clock {
    /// The system's clock (the service's only clock; tests advance theirs).
    pub fn system() -> Self {
        Self::default()
    }

    pub fn now(&self) -> DateTime<Utc> {
        Utc::now() + chrono::Duration::milliseconds(self.offset_ms.load(Ordering::SeqCst))
    }

    /// Moves this clock (and its clones) forward by `by`.
    pub fn advance(&self, by: chrono::Duration) {
        self.offset_ms
            .fetch_add(by.num_milliseconds(), Ordering::SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_advanced_clock_runs_ahead_and_its_clones_with_it() {
        let clock = Clock::system();
        let clone = clock.clone();
        clock.advance(chrono::Duration::hours(1));
        let ahead = clone.now() - Utc::now();
        assert!(ahead > chrono::Duration::minutes(59), "{ahead}");
        assert!(ahead <= chrono::Duration::hours(1), "{ahead}");
    }
}
