//! OVER_LIMIT answers remembered per descriptor set until their `duration_until_reset`, so a
//! client already over its limit is answered 429 without an RLS call.

use http::HeaderMap;
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Instant;

const SHARDS: usize = 16;

/// A remembered denial: until when, and the headers of the 429 it answered.
#[derive(Debug, Clone)]
pub struct Denial {
    pub until: Instant,
    pub headers: HeaderMap,
}

/// Bounded: a full shard first drops expired entries, then everything (a flood of distinct
/// keys only costs RPCs, never memory).
#[derive(Debug)]
pub struct OverLimitCache {
    shards: Vec<Mutex<HashMap<String, Denial>>>,
    max_per_shard: usize,
}

impl OverLimitCache {
    pub fn new(max_entries: usize) -> Self {
        OverLimitCache {
            shards: (0..SHARDS).map(|_| Mutex::new(HashMap::new())).collect(),
            max_per_shard: (max_entries / SHARDS).max(1),
        }
    }

    fn shard(&self, key: &str) -> &Mutex<HashMap<String, Denial>> {
        // FNV-1a: cheap and good enough to spread keys over a few shards.
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for b in key.as_bytes() {
            h = (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3);
        }
        &self.shards[(h as usize) % SHARDS]
    }

    /// The live denial for `key` at `now`, if any.
    pub fn get(&self, key: &str, now: Instant) -> Option<Denial> {
        let mut map = self.shard(key).lock().unwrap_or_else(|p| p.into_inner());
        match map.get(key) {
            Some(d) if d.until > now => Some(d.clone()),
            Some(_) => {
                map.remove(key);
                None
            }
            None => None,
        }
    }

    pub fn insert(&self, key: String, denial: Denial, now: Instant) {
        let mut map = self.shard(&key).lock().unwrap_or_else(|p| p.into_inner());
        if map.len() >= self.max_per_shard && !map.contains_key(&key) {
            map.retain(|_, d| d.until > now);
            if map.len() >= self.max_per_shard {
                map.clear();
            }
        }
        map.insert(key, denial);
    }

    pub fn len(&self) -> usize {
        self.shards
            .iter()
            .map(|s| s.lock().unwrap_or_else(|p| p.into_inner()).len())
            .sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn denial_expires_at_reset() {
        let cache = OverLimitCache::new(1000);
        let t0 = Instant::now();
        let until = t0 + Duration::from_secs(30);
        cache.insert(
            "k".into(),
            Denial {
                until,
                headers: HeaderMap::new(),
            },
            t0,
        );
        assert!(cache.get("k", t0 + Duration::from_secs(29)).is_some());
        assert!(cache.get("other", t0).is_none());
        assert!(
            cache.get("k", until).is_none(),
            "expired at duration_until_reset"
        );
        assert!(cache.is_empty(), "expired entry removed");
    }

    #[test]
    fn bounded_by_max_entries() {
        let cache = OverLimitCache::new(SHARDS * 4);
        let t0 = Instant::now();
        let until = t0 + Duration::from_secs(60);
        for i in 0..10_000 {
            cache.insert(
                format!("k{i}"),
                Denial {
                    until,
                    headers: HeaderMap::new(),
                },
                t0,
            );
        }
        assert!(cache.len() <= SHARDS * 4);
    }
}
