//! The reference's over-limit local cache (`LOCAL_CACHE_SIZE_IN_BYTES`): keys known to be over
//! their limit are answered OVER_LIMIT without a store round trip until their window ends.

use std::collections::HashMap;
use std::hash::{BuildHasher, RandomState};
use std::sync::Mutex;

const SHARDS: usize = 16;
/// Rough per-entry overhead beyond the key bytes (hash slot, expiry, string header).
const ENTRY_OVERHEAD: usize = 48;

#[derive(Debug, Default)]
struct Shard {
    entries: HashMap<String, u64>,
    bytes: usize,
}

/// Bounded map of over-limit cache keys to their expiry (Unix millis).
#[derive(Debug)]
pub struct OverLimitCache {
    shards: Vec<Mutex<Shard>>,
    hasher: RandomState,
    max_bytes_per_shard: usize,
}

impl OverLimitCache {
    pub fn new(size_in_bytes: usize) -> Self {
        OverLimitCache {
            shards: (0..SHARDS).map(|_| Mutex::new(Shard::default())).collect(),
            hasher: RandomState::new(),
            max_bytes_per_shard: (size_in_bytes / SHARDS).max(1),
        }
    }

    fn shard(&self, key: &str) -> &Mutex<Shard> {
        &self.shards[(self.hasher.hash_one(key) as usize) % SHARDS]
    }

    pub fn contains(&self, key: &str, now_millis: u64) -> bool {
        let shard = self.shard(key).lock().unwrap_or_else(|e| e.into_inner());
        shard.entries.get(key).is_some_and(|&exp| exp > now_millis)
    }

    /// Remembers `key` until `expires_millis`; drops expired entries when full, and skips the
    /// insert when still full (the cache is an optimisation, never a source of truth).
    pub fn insert(&self, key: &str, expires_millis: u64, now_millis: u64) {
        let cost = key.len() + ENTRY_OVERHEAD;
        let mut shard = self.shard(key).lock().unwrap_or_else(|e| e.into_inner());
        if shard.entries.contains_key(key) {
            shard.entries.insert(key.to_owned(), expires_millis);
            return;
        }
        if shard.bytes + cost > self.max_bytes_per_shard {
            let mut freed = 0;
            shard.entries.retain(|k, &mut exp| {
                let keep = exp > now_millis;
                if !keep {
                    freed += k.len() + ENTRY_OVERHEAD;
                }
                keep
            });
            shard.bytes -= freed;
            if shard.bytes + cost > self.max_bytes_per_shard {
                return;
            }
        }
        shard.bytes += cost;
        shard.entries.insert(key.to_owned(), expires_millis);
    }
}

#[cfg(test)]
mod tests {
    use super::OverLimitCache;

    #[test]
    fn remembers_until_expiry_and_stays_bounded() {
        let cache = OverLimitCache::new(16 * 1024);
        cache.insert("k", 1_000, 0);
        assert!(cache.contains("k", 999));
        assert!(!cache.contains("k", 1_000));
        for i in 0..100_000 {
            cache.insert(&format!("key-{i}"), 10_000, 0);
        }
        let total: usize = cache
            .shards
            .iter()
            .map(|s| s.lock().map(|s| s.bytes).unwrap_or(0))
            .sum();
        assert!(total <= 16 * 1024, "{total}");
    }
}
