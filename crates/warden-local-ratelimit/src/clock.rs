//! Time source for the limiter: monotonic nanoseconds, injectable so tests control time.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

/// Monotonic nanoseconds since an arbitrary, fixed origin.
pub trait Clock: Send + Sync + 'static {
    fn now_nanos(&self) -> u64;
}

/// The real clock: nanoseconds since a process-wide origin, so limiters built at different
/// times (config reloads) agree on what a stored bucket timestamp means.
#[derive(Debug, Clone, Copy)]
pub struct MonotonicClock {
    origin: Instant,
}

static ORIGIN: OnceLock<Instant> = OnceLock::new();

impl MonotonicClock {
    pub fn new() -> Self {
        Self {
            origin: *ORIGIN.get_or_init(Instant::now),
        }
    }
}

impl Default for MonotonicClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for MonotonicClock {
    fn now_nanos(&self) -> u64 {
        // u64 nanoseconds last 584 years; saturate rather than wrap.
        u64::try_from(self.origin.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }
}

/// A clock that only moves when told to; clones share the same time.
#[derive(Debug, Clone, Default)]
pub struct ManualClock {
    nanos: Arc<AtomicU64>,
}

impl ManualClock {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn advance(&self, by: Duration) {
        let by = u64::try_from(by.as_nanos()).unwrap_or(u64::MAX);
        self.nanos.fetch_add(by, Ordering::SeqCst);
    }

    pub fn set_nanos(&self, nanos: u64) {
        self.nanos.store(nanos, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now_nanos(&self) -> u64 {
        self.nanos.load(Ordering::SeqCst)
    }
}
