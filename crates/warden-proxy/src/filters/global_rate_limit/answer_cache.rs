//! RLS answers remembered per descriptor set, so that repeats cost no call:
//! * OVER_LIMIT until its `duration_until_reset`: a client already over its limit is answered
//!   429 locally;
//! * an OK answer's quota lease (`RateLimitResponse.quota`, see `warden_ratelimit::lease`) until
//!   its requests are used or it expires: requests within a large limit are admitted locally.
//!
//! Only one call per descriptor set asks for a lease at a time: the service reserves each
//! lease it grants, so a burst of concurrent calls that all asked (every request in flight when
//! a lease runs out or its window ends) would reserve a lease each and hold back up to that
//! many times the lease from every other proxy. While one call asks, the others are plain
//! calls, counted one hit each; but when the set ran on a lease until now (its lease ran out,
//! or its window ended), they wait for the asking call's answer instead, which normally brings
//! the next lease: one call instead of one per request in flight. The next lease is asked for
//! when a quarter of the current one is spent, so that requests keep being admitted meanwhile.

use super::{response_headers, CODE_OK, CODE_OVER_LIMIT};
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::quota::ExpirationSpecifier;
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitResponse;
use envoy_types::pb::google::protobuf::Duration as PbDuration;
use http::{HeaderMap, HeaderName, HeaderValue};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};
use tokio::sync::watch;

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
        rule: Arc<str>,
    ) {
        let reset = resp
            .statuses
            .iter()
            .filter(|s| s.code == CODE_OVER_LIMIT)
            .filter_map(|s| s.duration_until_reset.as_ref())
            .map(std_duration)
            .max();
        if let Some(reset) = reset.filter(|r| !r.is_zero()) {
            self.cache.insert(
                key,
                Remembered::Denied(Denial {
                    until: now + reset,
                    headers: headers.clone(),
                    rule,
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
            .map(std_duration)
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
            Remembered::Leased(Lease::new(
                left,
                now + valid_for,
                remaining,
                admitted.clone(),
            )),
            now,
        );
    }

    /// A late answer (its call had timed out and the request went on): remember it if it says
    /// OVER_LIMIT, so the client's next requests get their 429 without another call, or if it
    /// carries a lease, whose requests the service has already counted.
    pub fn remember_late(&self, resp: &RateLimitResponse, key: String) {
        if resp.overall_code == CODE_OVER_LIMIT {
            let headers = self.headers(resp);
            let rule = Arc::from(super::limited_rule::limited_rule(&key, resp));
            self.remember(resp, key, &headers, Instant::now(), rule);
        } else if resp.overall_code == CODE_OK && resp.quota.is_some() {
            let admitted = self.admitted(resp);
            self.remember_lease(resp, key, &admitted, Instant::now());
        }
    }
}

/// A protobuf duration (negative parts read as zero).
fn std_duration(d: &PbDuration) -> Duration {
    Duration::new(d.seconds.max(0) as u64, d.nanos.max(0) as u32)
}

const SHARDS: usize = 16;

/// A remembered denial: until when, and the headers of the 429 it answered.
#[derive(Debug, Clone)]
pub struct Denial {
    pub until: Instant,
    pub headers: HeaderMap,
    /// The descriptor and limit that denied (`limited_rule`).
    pub rule: Arc<str>,
}

/// A quota lease: requests still to admit, until when, and what each admitted request gets.
#[derive(Debug, Clone)]
pub struct Lease {
    left: u32,
    until: Instant,
    /// `x-ratelimit-remaining` of the answer, counted down as the lease is used.
    remaining: Option<u32>,
    admitted: Admitted,
    /// Once `left` is down to this, one call asks for the next lease while the others still
    /// spend this one (so requests in flight need not call when it runs out).
    refill_at: u32,
    /// The call asking for the next lease, while it is in flight.
    refill: Option<Pending>,
}

/// A call asking for a lease, seen from the cache: it has ended when its [`Asking`] is dropped
/// (or, should the answer never come, at `until`).
#[derive(Debug, Clone)]
pub struct Pending {
    ends: watch::Receiver<()>,
    until: Instant,
}

impl Pending {
    fn live(&self, now: Instant) -> bool {
        self.until > now && self.ends.has_changed().is_ok()
    }
}

/// Held by the call that asks for a lease: dropping it (once the answer is remembered) wakes
/// the requests waiting for that lease.
#[derive(Debug)]
pub struct Asking {
    _ends_on_drop: watch::Sender<()>,
}

fn ask(now: Instant) -> (Asking, Pending) {
    let (tx, rx) = watch::channel(());
    let pending = Pending {
        ends: rx,
        until: now + ASKING_FOR,
    };
    (Asking { _ends_on_drop: tx }, pending)
}

#[derive(Debug, Clone)]
pub enum Remembered {
    Denied(Denial),
    Leased(Lease),
    /// A call asking for a lease is in flight. `wait`: the set's requests ran on a lease until
    /// now, so they wait for this one instead of calling.
    Asking {
        pending: Pending,
        wait: bool,
    },
}

impl Remembered {
    /// The set's lease is gone and `pending` asks for the next: its requests wait for it.
    fn waiting_for(pending: Pending) -> Remembered {
        Remembered::Asking {
            pending,
            wait: true,
        }
    }

    fn until(&self) -> Instant {
        match self {
            Remembered::Denied(d) => d.until,
            Remembered::Leased(l) => l.until,
            Remembered::Asking { pending, .. } => pending.until,
        }
    }
}

/// How long a call asking for a lease keeps other calls from asking, at most (its answer
/// normally ends that sooner; a lost answer must not stop leases for long).
const ASKING_FOR: Duration = Duration::from_secs(1);

/// What a lookup found.
#[derive(Debug)]
pub enum Hit {
    Denied(Denial),
    /// One request taken from a lease; `None` when admitted requests get no headers.
    Leased(Option<Admitted>),
    /// Call the service. With an [`Asking`], the call asks for a lease; hold it until the
    /// answer is remembered, then hand it to [`AnswerCache::done_asking`].
    Call(Option<Asking>),
    /// The set's lease ran out and another call is asking for the next one: wait until
    /// `changed()` returns, then look again.
    Wait(watch::Receiver<()>),
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

    /// The live answer for `key` at `now`, taking one request from a lease. Otherwise, when
    /// `leases` (the service may grant them): one call at a time asks for a lease; while it
    /// does, the set's other requests call without asking, or, if they ran on a lease until
    /// now, wait for the next one.
    pub fn take(&self, key: &str, now: Instant, leases: bool) -> Hit {
        let mut map = self.shard(key).lock().unwrap_or_else(|p| p.into_inner());
        let Some(entry) = map.get_mut(key) else {
            if !leases {
                return Hit::Call(None);
            }
            drop(map);
            let (asking, pending) = ask(now);
            let entry = Remembered::Asking {
                pending,
                wait: false,
            };
            self.insert(key.to_owned(), entry, now);
            return Hit::Call(Some(asking));
        };
        match entry {
            Remembered::Denied(d) if d.until > now => return Hit::Denied(d.clone()),
            Remembered::Leased(lease) if lease.until > now => {
                let refilling = lease.refill.as_ref().is_some_and(|p| p.live(now));
                if leases && !refilling && lease.left <= lease.refill_at {
                    let (asking, pending) = ask(now);
                    lease.refill = Some(pending);
                    return Hit::Call(Some(asking));
                }
                lease.left -= 1;
                let admitted = lease.headers(now);
                if lease.left == 0 {
                    match lease.live_refill(now) {
                        Some(pending) => *entry = Remembered::waiting_for(pending),
                        None => {
                            map.remove(key);
                        }
                    }
                }
                return Hit::Leased(admitted);
            }
            Remembered::Asking { pending, wait } if pending.live(now) => {
                return if *wait {
                    Hit::Wait(pending.ends.clone())
                } else {
                    Hit::Call(None)
                };
            }
            _ => {}
        }
        // Expired, or an asking call that ended without an answer.
        if !leases {
            map.remove(key);
            return Hit::Call(None);
        }
        let wait = match entry {
            Remembered::Denied(_) => false,
            Remembered::Leased(lease) => {
                if let Some(pending) = lease.live_refill(now) {
                    let ends = pending.ends.clone();
                    *entry = Remembered::waiting_for(pending);
                    return Hit::Wait(ends);
                }
                true
            }
            Remembered::Asking { wait, .. } => *wait,
        };
        let (asking, pending) = ask(now);
        *entry = Remembered::Asking { pending, wait };
        Hit::Call(Some(asking))
    }

    /// The call that asked for a lease for `key` is answered and its answer remembered: let
    /// the next call ask, and wake the requests waiting for it (by dropping `asking`).
    pub fn done_asking(&self, key: &str, asking: Asking) {
        let mut map = self.shard(key).lock().unwrap_or_else(|p| p.into_inner());
        match map.get_mut(key) {
            Some(Remembered::Asking { .. }) => {
                map.remove(key);
            }
            Some(Remembered::Leased(lease)) => lease.refill = None,
            _ => {}
        }
        drop(map);
        drop(asking);
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
                    let left = live.left.saturating_add(new.left);
                    let until = live.until.min(new.until);
                    *live = Lease::new(left, until, new.remaining, new.admitted);
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
    pub fn new(left: u32, until: Instant, remaining: Option<u32>, admitted: Admitted) -> Lease {
        Lease {
            left,
            until,
            remaining,
            admitted,
            // Asked early: under load the answer takes a while, and requests spending the
            // rest meanwhile do not wait (a quarter spent measured best at 1000 connections).
            refill_at: u32::try_from(u64::from(left) * 3 / 4).unwrap_or(u32::MAX),
            refill: None,
        }
    }

    /// The call asking for the next lease, if it is still in flight (taken out of the lease,
    /// which is spent or expired).
    fn live_refill(&mut self, now: Instant) -> Option<Pending> {
        self.refill.take().filter(|p| p.live(now))
    }

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
            rule: Arc::from("descriptor[]"),
        })
    }

    fn lease(left: u32, until: Instant) -> Remembered {
        Remembered::Leased(Lease::new(left, until, None, Admitted::default()))
    }

    fn plain_call(hit: &Hit) -> bool {
        matches!(hit, Hit::Call(None))
    }

    fn asking(hit: Hit) -> Asking {
        match hit {
            Hit::Call(Some(asking)) => asking,
            other => panic!("expected a call asking for a lease, got {other:?}"),
        }
    }

    fn is_leased(hit: &Hit) -> bool {
        matches!(hit, Hit::Leased(_))
    }

    #[test]
    fn denial_expires_at_reset() {
        let cache = AnswerCache::new(1000);
        let t0 = Instant::now();
        let until = t0 + Duration::from_secs(30);
        cache.insert("k".into(), denial(until), t0);
        assert!(matches!(
            cache.take("k", t0 + Duration::from_secs(29), false),
            Hit::Denied(_)
        ));
        assert!(plain_call(&cache.take("other", t0, false)));
        assert!(
            plain_call(&cache.take("k", until, false)),
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
            assert!(matches!(cache.take("k", t0, false), Hit::Leased(None)));
        }
        assert!(
            plain_call(&cache.take("k", t0, false)),
            "used up: call again"
        );
        assert!(cache.is_empty());
    }

    #[test]
    fn one_call_at_a_time_asks_for_a_lease() {
        let cache = AnswerCache::new(1000);
        let t0 = Instant::now();
        let first = asking(cache.take("k", t0, true));
        for _ in 0..3 {
            assert!(
                plain_call(&cache.take("k", t0, true)),
                "no lease yet: the others call, without asking"
            );
        }
        // Answered without a lease: the next call asks.
        cache.done_asking("k", first);
        let second = asking(cache.take("k", t0, true));
        // A call that never finishes (its request went away) does not stop leases.
        drop(second);
        let third = asking(cache.take("k", t0, true));
        // Nor does an answer that never comes, for long.
        let _fourth = asking(cache.take("k", t0 + ASKING_FOR, true));
        drop(third);
        // Services that grant no leases (the embedded limiter) leave nothing behind.
        assert!(plain_call(&cache.take("e", t0, false)));
        assert_eq!(cache.len(), 1);
    }

    #[test]
    fn requests_that_ran_on_a_lease_wait_for_the_next_one() {
        let cache = AnswerCache::new(1000);
        let t0 = Instant::now();
        let until = t0 + Duration::from_secs(5);
        cache.insert("k".into(), lease(8, until), t0);
        assert!(is_leased(&cache.take("k", t0, true)));
        assert!(is_leased(&cache.take("k", t0, true)));
        // A quarter spent: one call asks for the next lease while the rest is spent.
        let refill = asking(cache.take("k", t0, true));
        for _ in 0..6 {
            assert!(is_leased(&cache.take("k", t0, true)));
        }
        // Spent while the refill is in flight: wait for it, do not call.
        let Hit::Wait(ends) = cache.take("k", t0, true) else {
            panic!("expected to wait");
        };
        assert!(matches!(ends.has_changed(), Ok(false)));
        cache.insert("k".into(), lease(4, until), t0);
        cache.done_asking("k", refill);
        assert!(ends.has_changed().is_err(), "woken");
        assert!(is_leased(&cache.take("k", t0, true)), "the new lease");

        // At the window's end the lease expires: one call asks, the others wait.
        let later = until + Duration::from_millis(1);
        let next = asking(cache.take("k", later, true));
        assert!(matches!(cache.take("k", later, true), Hit::Wait(_)));
        // No lease this time (say, the limit is near): the others call again.
        cache.done_asking("k", next);
        let _again = asking(cache.take("k", later, true));
        assert!(plain_call(&cache.take("k", later, true)));
    }

    #[test]
    fn a_lease_expires_unused_and_joins_a_live_one() {
        let cache = AnswerCache::new(1000);
        let t0 = Instant::now();
        let (t1, t2) = (t0 + Duration::from_secs(1), t0 + Duration::from_secs(2));
        cache.insert("k".into(), lease(5, t1), t0);
        assert!(
            plain_call(&cache.take("k", t1, false)),
            "expired at valid_until"
        );
        cache.insert("k".into(), lease(1, t2), t0);
        cache.insert("k".into(), lease(1, t1), t0);
        let taken = (0..3)
            .filter(|_| is_leased(&cache.take("k", t0, false)))
            .count();
        assert_eq!(taken, 2, "joined: 1 + 1");
        cache.insert("k".into(), lease(1, t2), t0);
        cache.insert("k".into(), lease(1, t1), t0);
        assert!(
            plain_call(&cache.take("k", t1, false)),
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
        assert!(is_leased(&cache.take("k", t0, false)));
        assert!(plain_call(&cache.take("k", t0, false)), "spent: call again");
        cache.insert("k".into(), denial(until), t0);
        cache.insert("k".into(), lease(1, until), t0);
        assert!(is_leased(&cache.take("k", t0, false)));
    }

    /// An OK answer with a lease: remembered until the earlier of `valid_until` and the reset,
    /// and each leased request's `x-ratelimit-remaining` counts down from the answer's.
    #[test]
    fn a_remembered_lease_counts_its_headers_down_and_refuses_a_past_end() {
        use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::{
            DescriptorStatus, Quota, RateLimit,
        };
        use envoy_types::pb::google::protobuf::Timestamp;
        let memory = AnswerMemory {
            x_envoy_ratelimited: true,
            x_ratelimit_headers: true,
            limited_headers: Vec::new(),
            cache: std::sync::Arc::new(AnswerCache::new(1000)),
        };
        let at = |offset_secs: i64| {
            let now = SystemTime::now()
                .duration_since(SystemTime::UNIX_EPOCH)
                .unwrap();
            Timestamp {
                seconds: now.as_secs() as i64 + offset_secs,
                nanos: 0,
            }
        };
        let answer = |valid_until: Timestamp| RateLimitResponse {
            overall_code: CODE_OK,
            statuses: vec![DescriptorStatus {
                code: CODE_OK,
                current_limit: Some(RateLimit {
                    requests_per_unit: 3000,
                    unit: 2, // minute
                    ..Default::default()
                }),
                limit_remaining: 100,
                duration_until_reset: Some(PbDuration {
                    seconds: 30,
                    nanos: 0,
                }),
                ..Default::default()
            }],
            quota: Some(Quota {
                requests: 3,
                expiration_specifier: Some(ExpirationSpecifier::ValidUntil(valid_until)),
                ..Default::default()
            }),
            ..Default::default()
        };
        let t0 = Instant::now();
        // valid_until in an hour: the 30 s reset ends the lease first.
        let resp = answer(at(3600));
        let admitted = memory.admitted(&resp);
        assert_eq!(
            admitted.response[response_headers::X_RATELIMIT_REMAINING],
            "100"
        );
        memory.remember_lease(&resp, "k".into(), &admitted, t0);
        let remaining = |hit: Hit| match hit {
            Hit::Leased(Some(a)) => a.response[response_headers::X_RATELIMIT_REMAINING].clone(),
            other => panic!("expected a leased request with headers, got {other:?}"),
        };
        assert_eq!(remaining(memory.cache.take("k", t0, false)), "99");
        assert_eq!(remaining(memory.cache.take("k", t0, false)), "98");
        assert!(
            plain_call(&memory.cache.take("k", t0, false)),
            "2 of 3: spent"
        );
        memory.remember_lease(&resp, "r".into(), &admitted, t0);
        assert!(
            plain_call(&memory.cache.take("r", t0 + Duration::from_secs(30), false)),
            "ended at the reset"
        );
        // A valid_until already past on this host's clock: no lease.
        memory.remember_lease(&answer(at(-5)), "p".into(), &admitted, t0);
        assert!(plain_call(&memory.cache.take("p", t0, false)));
    }

    #[test]
    fn bounded_by_max_entries() {
        let cache = AnswerCache::new(SHARDS * 4);
        let t0 = Instant::now();
        let until = t0 + Duration::from_secs(60);
        for i in 0..10_000 {
            cache.insert(format!("k{i}"), denial(until), t0);
            let _ = cache.take(&format!("a{i}"), t0, true);
        }
        assert!(cache.len() <= SHARDS * 4);
    }
}
