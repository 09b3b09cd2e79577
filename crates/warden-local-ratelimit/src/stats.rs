//! Counters readable for metrics: Envoy's `http_local_rate_limit.{enabled,ok,rate_limited,enforced}`
//! per limiter group, the L4 `rate_limited`, and the key table's size and evictions.

use std::sync::atomic::{AtomicU64, Ordering};

/// Hot-path counters of one group; `enabled` is derived (`ok + rate_limited`) to save an atomic.
#[derive(Debug, Default)]
#[repr(align(64))]
pub struct GroupCounters {
    pub(crate) ok: AtomicU64,
    pub(crate) rate_limited: AtomicU64,
    pub(crate) enforced: AtomicU64,
}

impl GroupCounters {
    pub(crate) fn bump(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn snapshot(&self, name: &str) -> GroupStats {
        let ok = self.ok.load(Ordering::Relaxed);
        let rate_limited = self.rate_limited.load(Ordering::Relaxed);
        GroupStats {
            name: name.to_string(),
            enabled: ok + rate_limited,
            ok,
            rate_limited,
            enforced: self.enforced.load(Ordering::Relaxed),
        }
    }
}

/// One group's counters (for a RateLimitPolicy: `RateLimitPolicy/<name>`; for an EnvoyFilter:
/// its `stat_prefix`). For an L4 group, `ok` counts accepted and `rate_limited` closed
/// connections.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupStats {
    pub name: String,
    pub enabled: u64,
    pub ok: u64,
    pub rate_limited: u64,
    pub enforced: u64,
}
