//! RLS answers remembered per descriptor set, so that repeats cost no call:
//! * OVER_LIMIT until its `duration_until_reset`: a client already over its limit is answered
//!   429 locally;
//! * an OK answer's quota lease (`RateLimitResponse.quota`, see `warden_ratelimit::lease`) until
//!   its requests are used or it expires: requests within a large limit are admitted locally.

use super::{response_headers, CODE_OK, CODE_OVER_LIMIT};
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::quota::ExpirationSpecifier;
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitResponse;
use http::{HeaderMap, HeaderName, HeaderValue};
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime};

/// What a 429 and an admitted request carry besides their status, and the cache that remembers
/// answers: shared (`Arc`) with calls that outlive their timeout, whose late answers are
/// remembered too.
#[derive(Debug)]
pub struct AnswerMemory {
    pub x_envoy_ratelimited: bool,
    pub x_ratelimit_headers: bool,
    /// The filter's `response_headers_to_add`, on limited responses.
    pub limited_headers: Vec<(HeaderName, HeaderValue)>,
    pub cache: std::sync::Arc<AnswerCache>,
}

/// Headers an admitted request gets: on its response, and added to the request upstream.
#[derive(Debug, Clone, Default)]
pub struct Admitted {
    pub response: HeaderMap,
    pub request: HeaderMap,
}

impl AnswerMemory {
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

    /// The headers of a request `resp` admits.
    pub fn admitted(&self, resp: &RateLimitResponse) -> Admitted {
        let mut admitted = Admitted::default();
        if self.x_ratelimit_headers {
            response_headers::x_ratelimit(&resp.statuses, &mut admitted.response);
        }
        response_headers::append_rls_headers(&resp.response_headers_to_add, &mut admitted.response);
        response_headers::append_rls_headers(&resp.request_headers_to_add, &mut admitted.request);
        admitted
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
                Remembered::Denied(Denial {
                    until: now + reset,
                    headers: headers.clone(),
                }),
                now,
            );
        }
    }

    /// Remember the quota lease of an OK answer for `key`: `quota.requests` counts the call's
    /// own request, the rest are admitted locally until the lease expires. It expires at the
    /// earlier of `valid_until` (read on this host's clock) and the shortest
    /// `duration_until_reset` (which needs no clock agreement).
    pub fn remember_lease(
        &self,
        resp: &RateLimitResponse,
        key: String,
        admitted: &Admitted,
        now: Instant,
    ) {
        let Some(quota) = &resp.quota else { return };
        let left = quota.requests.saturating_sub(1);
        if left == 0 {
            return;
        }
        let valid_for = quota.expiration_specifier.as_ref().map(|e| match e {
            ExpirationSpecifier::ValidUntil(t) => {
                let until = SystemTime::UNIX_EPOCH
                    + Duration::new(t.seconds.max(0) as u64, t.nanos.max(0) as u32);
                until
                    .duration_since(SystemTime::now())
                    .unwrap_or(Duration::ZERO)
            }
        });
        let reset = resp
            .statuses
            .iter()
            .filter(|s| s.current_limit.is_some())
            .filter_map(|s| s.duration_until_reset.as_ref())
            .map(|d| Duration::new(d.seconds.max(0) as u64, d.nanos.max(0) as u32))
            .min();
        let Some(valid_for) = [valid_for, reset].into_iter().flatten().min() else {
            return; // a lease without an end is not taken
        };
        if valid_for.is_zero() {
            return;
        }
        let remaining = admitted
            .response
            .get(response_headers::X_RATELIMIT_REMAINING)
            .and_then(|v| v.to_str().ok()?.parse().ok());
        self.cache.insert(
            key,
            Remembered::Leased(Lease {
                left,
                until: now + valid_for,
                remaining,
                admitted: admitted.clone(),
            }),
            now,
        );
    }

    /// A late answer (its call had timed out and the request went on): remember it if it says
    /// OVER_LIMIT, so the client's next requests get their 429 without another call, or if it
    /// carries a lease, whose requests the service has already counted.
    pub fn remember_late(&self, resp: &RateLimitResponse, key: String) {
        if resp.overall_code == CODE_OVER_LIMIT {
            let headers = self.headers(resp);
            self.remember(resp, key, &headers, Instant::now());
        } else if resp.overall_code == CODE_OK && resp.quota.is_some() {
            let admitted = self.admitted(resp);
            self.remember_lease(resp, key, &admitted, Instant::now());
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

/// A quota lease: requests still to admit, until when, and what each admitted request gets.
#[derive(Debug, Clone)]
pub struct Lease {
    pub left: u32,
    pub until: Instant,
    /// `x-ratelimit-remaining` of the answer, counted down as the lease is used.
    pub remaining: Option<u32>,
    pub admitted: Admitted,
}

#[derive(Debug, Clone)]
pub enum Remembered {
    Denied(Denial),
    Leased(Lease),
}

impl Remembered {
    fn until(&self) -> Instant {
        match self {
            Remembered::Denied(d) => d.until,
            Remembered::Leased(l) => l.until,
        }
    }
}

/// What a lookup found.
#[derive(Debug)]
pub enum Hit {
    Denied(Denial),
    /// One request taken from a lease; `None` when admitted requests get no headers.
    Leased(Option<Admitted>),
}

/// Bounded: a full shard first drops expired entries, then everything (a flood of distinct
/// keys only costs RPCs, never memory).
#[derive(Debug)]
pub struct AnswerCache {
    shards: Vec<Mutex<HashMap<String, Remembered>>>,
    max_per_shard: usize,
}

impl AnswerCache {
    pub fn new(max_entries: usize) -> Self {
        AnswerCache {
            shards: (0..SHARDS).map(|_| Mutex::new(HashMap::new())).collect(),
            max_per_shard: (max_entries / SHARDS).max(1),
        }
    }

    fn shard(&self, key: &str) -> &Mutex<HashMap<String, Remembered>> {
        // FNV-1a: cheap and good enough to spread keys over a few shards.
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for b in key.as_bytes() {
            h = (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3);
        }
        &self.shards[(h as usize) % SHARDS]
    }

    /// The live answer for `key` at `now`, taking one request from a lease.
    pub fn take(&self, key: &str, now: Instant) -> Option<Hit> {
        let mut map = self.shard(key).lock().unwrap_or_else(|p| p.into_inner());
        let entry = map.get_mut(key)?;
        if entry.until() <= now {
            map.remove(key);
            return None;
        }
        let hit = match entry {
            Remembered::Denied(d) => Hit::Denied(d.clone()),
            Remembered::Leased(lease) => {
                lease.left -= 1;
                let admitted = lease.headers(now);
                if lease.left == 0 {
                    map.remove(key);
                }
                Hit::Leased(admitted)
            }
        };
        Some(hit)
    }

    /// Remember `answer` for `key`. A live lease is never dropped: its requests are counted by
    /// the service already, within the limit. A new lease joins it (ending with the earlier of
    /// the two); a denial that raced it is not kept (once the lease is spent, the next call
    /// hears OVER_LIMIT again).
    pub fn insert(&self, key: String, answer: Remembered, now: Instant) {
        let mut map = self.shard(&key).lock().unwrap_or_else(|p| p.into_inner());
        if let Some(Remembered::Leased(live)) = map.get_mut(&key) {
            if live.until > now {
                if let Remembered::Leased(new) = answer {
                    live.left = live.left.saturating_add(new.left);
                    live.until = live.until.min(new.until);
                    live.remaining = new.remaining;
                    live.admitted = new.admitted;
                }
                return;
            }
        }
        if map.len() >= self.max_per_shard && !map.contains_key(&key) {
            map.retain(|_, a| a.until() > now);
            if map.len() >= self.max_per_shard {
                map.clear();
            }
        }
        map.insert(key, answer);
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

impl Lease {
    /// The headers of the request just taken from this lease (none when there are none):
    /// `x-ratelimit-remaining` counts down, `x-ratelimit-reset` is the time left.
    fn headers(&mut self, now: Instant) -> Option<Admitted> {
        if self.admitted.response.is_empty() && self.admitted.request.is_empty() {
            return None;
        }
        let mut admitted = self.admitted.clone();
        if let Some(r) = self.remaining.as_mut() {
            *r = r.saturating_sub(1);
            admitted.response.insert(
                response_headers::X_RATELIMIT_REMAINING,
                HeaderValue::from(*r),
            );
        }
        if admitted
            .response
            .contains_key(response_headers::X_RATELIMIT_RESET)
        {
            let left = self
                .until
                .saturating_duration_since(now)
                .as_secs_f64()
                .ceil();
            admitted.response.insert(
                response_headers::X_RATELIMIT_RESET,
                HeaderValue::from(left as u64),
            );
        }
        Some(admitted)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn denial(until: Instant) -> Remembered {
        Remembered::Denied(Denial {
            until,
            headers: HeaderMap::new(),
        })
    }

    fn lease(left: u32, until: Instant) -> Remembered {
        Remembered::Leased(Lease {
            left,
            until,
            remaining: None,
            admitted: Admitted::default(),
        })
    }

    #[test]
    fn denial_expires_at_reset() {
        let cache = AnswerCache::new(1000);
        let t0 = Instant::now();
        let until = t0 + Duration::from_secs(30);
        cache.insert("k".into(), denial(until), t0);
        assert!(matches!(
            cache.take("k", t0 + Duration::from_secs(29)),
            Some(Hit::Denied(_))
        ));
        assert!(cache.take("other", t0).is_none());
        assert!(
            cache.take("k", until).is_none(),
            "expired at duration_until_reset"
        );
        assert!(cache.is_empty(), "expired entry removed");
    }

    #[test]
    fn a_lease_admits_its_requests_then_is_gone() {
        let cache = AnswerCache::new(1000);
        let t0 = Instant::now();
        cache.insert("k".into(), lease(3, t0 + Duration::from_secs(1)), t0);
        for _ in 0..3 {
            assert!(matches!(cache.take("k", t0), Some(Hit::Leased(None))));
        }
        assert!(cache.take("k", t0).is_none(), "used up: call again");
        assert!(cache.is_empty());
    }

    #[test]
    fn a_lease_expires_unused_and_joins_a_live_one() {
        let cache = AnswerCache::new(1000);
        let t0 = Instant::now();
        let (t1, t2) = (t0 + Duration::from_secs(1), t0 + Duration::from_secs(2));
        cache.insert("k".into(), lease(5, t1), t0);
        assert!(cache.take("k", t1).is_none(), "expired at valid_until");
        cache.insert("k".into(), lease(1, t2), t0);
        cache.insert("k".into(), lease(1, t1), t0);
        let taken = (0..3).filter(|_| cache.take("k", t0).is_some()).count();
        assert_eq!(taken, 2, "joined: 1 + 1");
        cache.insert("k".into(), lease(1, t2), t0);
        cache.insert("k".into(), lease(1, t1), t0);
        assert!(
            cache.take("k", t1).is_none(),
            "the joined lease ends with the earlier"
        );
    }

    #[test]
    fn a_lease_outlives_a_racing_denial_and_replaces_one() {
        let cache = AnswerCache::new(1000);
        let t0 = Instant::now();
        let until = t0 + Duration::from_secs(10);
        cache.insert("k".into(), lease(1, until), t0);
        cache.insert("k".into(), denial(until), t0);
        assert!(matches!(cache.take("k", t0), Some(Hit::Leased(_))));
        assert!(cache.take("k", t0).is_none(), "spent: call again");
        cache.insert("k".into(), denial(until), t0);
        cache.insert("k".into(), lease(1, until), t0);
        assert!(matches!(cache.take("k", t0), Some(Hit::Leased(_))));
    }

    #[test]
    fn bounded_by_max_entries() {
        let cache = AnswerCache::new(SHARDS * 4);
        let t0 = Instant::now();
        let until = t0 + Duration::from_secs(60);
        for i in 0..10_000 {
            cache.insert(format!("k{i}"), denial(until), t0);
        }
        assert!(cache.len() <= SHARDS * 4);
    }
}
