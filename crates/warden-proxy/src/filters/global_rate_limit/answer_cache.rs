//! OVER_LIMIT answers remembered per descriptor set until their `duration_until_reset`, so a
//! client already over its limit is answered 429 without an RLS call.

use super::{response_headers, CODE_OVER_LIMIT};
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitResponse;
use http::{HeaderMap, HeaderName, HeaderValue};
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// What a 429 carries besides its status, and the cache that remembers it: shared (`Arc`) with
/// calls that outlive their timeout, whose late OVER_LIMIT answers are remembered too.
#[derive(Debug)]
pub struct OverLimitMemory {
    pub x_envoy_ratelimited: bool,
    pub x_ratelimit_headers: bool,
    /// The filter's `response_headers_to_add`, on limited responses.
    pub limited_headers: Vec<(HeaderName, HeaderValue)>,
    pub cache: std::sync::Arc<OverLimitCache>,
}

impl OverLimitMemory {
    /// The headers of the 429 answering `resp`.
    pub fn headers(&self, resp: &RateLimitResponse) -> HeaderMap {
        let mut headers = HeaderMap::new();
        if self.x_envoy_ratelimited {
            headers.insert(
                response_headers::X_ENVOY_RATELIMITED,
                HeaderValue::from_static("true"),
            );
        }
        if self.x_ratelimit_headers {
            response_headers::x_ratelimit(&resp.statuses, &mut headers);
        }
        for (n, v) in &self.limited_headers {
            headers.append(n.clone(), v.clone());
        }
        response_headers::append_rls_headers(&resp.response_headers_to_add, &mut headers);
        headers
    }

    /// Remember an OVER_LIMIT answer for `key` until the latest reset among its over-limit
    /// descriptors (not at all when the service gave no reset).
    pub fn remember(
        &self,
        resp: &RateLimitResponse,
        key: String,
        headers: &HeaderMap,
        now: Instant,
    ) {
        let reset = resp
            .statuses
            .iter()
            .filter(|s| s.code == CODE_OVER_LIMIT)
            .filter_map(|s| s.duration_until_reset.as_ref())
            .map(|d| Duration::new(d.seconds.max(0) as u64, d.nanos.max(0) as u32))
            .max();
        if let Some(reset) = reset.filter(|r| !r.is_zero()) {
            self.cache.insert(
                key,
                Denial {
                    until: now + reset,
                    headers: headers.clone(),
                },
                now,
            );
        }
    }

    /// A late answer (its call had timed out and the request went on): remember it if it
    /// says OVER_LIMIT, so the client's next requests get their 429 without another call.
    pub fn remember_late(&self, resp: &RateLimitResponse, key: String) {
        if resp.overall_code == CODE_OVER_LIMIT {
            let headers = self.headers(resp);
            self.remember(resp, key, &headers, Instant::now());
        }
    }
}

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
