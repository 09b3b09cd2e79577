//! Time source for window arithmetic, so tests can move time without sleeping.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

/// Wall-clock time in milliseconds since the Unix epoch (windows are epoch-aligned).
pub trait Clock: Send + Sync + std::fmt::Debug + 'static {
    fn now_millis(&self) -> u64;
}

/// The system clock.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_millis(&self) -> u64 {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0)
    }
}

/// A clock tests set and advance by hand; clones share the same time.
#[derive(Debug, Default, Clone)]
pub struct ManualClock(Arc<AtomicU64>);

impl ManualClock {
    pub fn new(now_millis: u64) -> Self {
        ManualClock(Arc::new(AtomicU64::new(now_millis)))
    }
    pub fn set_millis(&self, now_millis: u64) {
        self.0.store(now_millis, Ordering::SeqCst);
    }
    pub fn advance_millis(&self, by: u64) {
        self.0.fetch_add(by, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now_millis(&self) -> u64 {
        self.0.load(Ordering::SeqCst)
    }
}
