//! What verification cost and decided, counted where it happens and read at scrape time.

use crate::status::{Status, REASONS};
use std::sync::atomic::{AtomicU64, Ordering};

#[derive(Debug, Default)]
pub struct Stats {
    /// Signature checks made (cache misses that reached the keys).
    pub verifications: AtomicU64,
    /// Tokens accepted from the verified-token cache.
    pub cache_hits: AtomicU64,
    /// Requests whose tokens were all valid.
    pub allowed: AtomicU64,
    /// Requests without a token (passed, no principal).
    pub no_token: AtomicU64,
    denied: [AtomicU64; REASONS.len()],
}

impl Stats {
    pub fn deny(&self, status: Status) {
        if let Some(i) = REASONS.iter().position(|r| *r == status.reason()) {
            self.denied[i].fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Denials per reason label, every reason listed.
    pub fn denied(&self) -> impl Iterator<Item = (&'static str, u64)> + '_ {
        REASONS
            .iter()
            .zip(&self.denied)
            .map(|(r, n)| (*r, n.load(Ordering::Relaxed)))
    }

    pub fn get(counter: &AtomicU64) -> u64 {
        counter.load(Ordering::Relaxed)
    }
}
