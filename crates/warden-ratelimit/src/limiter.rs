//! The decision logic of `ShouldRateLimit`, shared by the gRPC server, the HTTP `/json` endpoint
//! and in-process callers (the proxy's embedded default): matching, `replaces`, hit counts,
//! cache keys, store round trip, per-descriptor statuses, overall code and response headers.

use crate::ban::{BanSubject, BAN_KEY_PREFIX};
use crate::clock::{Clock, SystemClock};
use crate::config::{Algorithm, ConfigSet, Unit};
use crate::dynamic_metadata;
use crate::lease::{self, LeasePolicy};
use crate::local_cache::OverLimitCache;
use crate::matcher::{Limit, Snapshot};
use crate::stats::{LimitStats, Stats};
use crate::stats_key;
use crate::store::{BanOp, BanOutcome, CounterOp, CounterResult, MemoryStore, Store, StoreError};
use arc_swap::ArcSwapOption;
use envoy_types::pb::envoy::config::core::v3::HeaderValue;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::{
    quota::ExpirationSpecifier, Code, DescriptorStatus, Quota, RateLimit,
};
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use envoy_types::pb::google::protobuf::Duration as PbDuration;
use std::collections::HashSet;
use std::fmt::Write;
use std::sync::Arc;

pub use envoy_types::pb::envoy::extensions::common::ratelimit::v3::{
    rate_limit_descriptor::{Entry, RateLimitOverride},
    RateLimitDescriptor,
};

/// Errors a decision can end with; the text is what the reference sends as gRPC UNKNOWN.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RlsError {
    #[error("rate limit domain must not be empty")]
    EmptyDomain,
    #[error("rate limit descriptor list must not be empty")]
    EmptyDescriptors,
    #[error("no rate limit configuration loaded")]
    NoConfig,
    /// The reference panics here; we answer with an error instead.
    #[error("rate limit override has an invalid unit {0}")]
    InvalidOverrideUnit(i32),
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl RlsError {
    /// The reference's error stat name.
    pub fn stat_name(&self) -> &'static str {
        match self {
            RlsError::Store(_) => "redis_error",
            _ => "service_error",
        }
    }
}

/// Names of the `LIMIT_RESPONSE_HEADERS_ENABLED` headers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResponseHeaderNames {
    pub limit: String,
    pub remaining: String,
    pub reset: String,
}

impl Default for ResponseHeaderNames {
    fn default() -> Self {
        ResponseHeaderNames {
            limit: "RateLimit-Limit".into(),
            remaining: "RateLimit-Remaining".into(),
            reset: "RateLimit-Reset".into(),
        }
    }
}

/// Behaviour settings of the limiter (the reference's env vars of the same meaning).
#[derive(Debug, Clone, PartialEq)]
pub struct LimiterSettings {
    /// `CACHE_KEY_PREFIX`.
    pub cache_key_prefix: String,
    /// `EXPIRATION_JITTER_MAX_SECONDS` (default 300).
    pub expiration_jitter_max_seconds: u64,
    /// `NEAR_LIMIT_RATIO` (default 0.8).
    pub near_limit_ratio: f32,
    /// `LOCAL_CACHE_SIZE_IN_BYTES` (0 = off).
    pub local_cache_size_in_bytes: usize,
    /// `SHADOW_MODE`: overall code forced to OK.
    pub shadow_mode: bool,
    /// `QUOTA_MODE`: every descriptor is a quota descriptor.
    pub quota_mode: bool,
    /// `STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT`: when a request is rejected, do not charge the
    /// descriptors that were still within their limits.
    pub stop_increment_when_overlimit: bool,
    /// warden extension (`RATE_LIMIT_ALGORITHM`): algorithm for limits that do not name one.
    pub default_algorithm: Algorithm,
    /// `LIMIT_RESPONSE_HEADERS_ENABLED` and the header names.
    pub response_headers: Option<ResponseHeaderNames>,
    /// Bound on live counters of the memory store.
    pub memory_max_keys: usize,
    /// warden extension (`QUOTA_LEASE_FRACTION`, `QUOTA_LEASE_MAX`): quota leases for clients
    /// that ask for them ([`crate::lease`]).
    pub lease: LeasePolicy,
    /// `RESPONSE_DYNAMIC_METADATA`: answers carry `dynamic_metadata` ([`crate::dynamic_metadata`]).
    pub response_dynamic_metadata: bool,
}

impl Default for LimiterSettings {
    fn default() -> Self {
        LimiterSettings {
            cache_key_prefix: String::new(),
            expiration_jitter_max_seconds: 300,
            near_limit_ratio: 0.8,
            local_cache_size_in_bytes: 0,
            shadow_mode: false,
            quota_mode: false,
            stop_increment_when_overlimit: false,
            default_algorithm: Algorithm::FixedWindow,
            response_headers: None,
            memory_max_keys: 1_000_000,
            lease: LeasePolicy::SERVER_DEFAULT,
            response_dynamic_metadata: false,
        }
    }
}

/// A descriptor that has a limit to check.
struct Checked {
    index: usize,
    limit: Arc<Limit>,
    stats: Arc<LimitStats>,
    hits: u64,
    unit: Unit,
    /// Window length in seconds: `unit × unit_multiplier`.
    window: u64,
    algorithm: Algorithm,
    /// Moved into the store op when there is one.
    key: String,
    /// The limit's ban, for this client (moved into the store op).
    ban: Option<BanOp>,
    /// Answered from the over-limit local cache; no store op.
    cached_over: bool,
}

/// The rate limiter: config snapshot + store + clock. Cheap to share behind an `Arc`.
#[derive(Debug)]
pub struct RateLimiter {
    snapshot: ArcSwapOption<Snapshot>,
    store: Store,
    clock: Arc<dyn Clock>,
    settings: LimiterSettings,
    stats: Arc<Stats>,
    local_cache: Option<OverLimitCache>,
    /// The descriptors answered OVER_LIMIT most, per domain (the debug port's
    /// `/ratelimit/top`).
    limited: crate::heavy_hitters::LimitedDescriptors,
}

impl RateLimiter {
    /// A limiter over `store`, with no config loaded yet (see [`RateLimiter::set_config`]).
    pub fn new(
        store: Store,
        settings: LimiterSettings,
        clock: Arc<dyn Clock>,
        stats: Arc<Stats>,
    ) -> Self {
        let local_cache = (settings.local_cache_size_in_bytes > 0)
            .then(|| OverLimitCache::new(settings.local_cache_size_in_bytes));
        RateLimiter {
            snapshot: ArcSwapOption::empty(),
            store,
            clock,
            settings,
            stats,
            local_cache,
            limited: Default::default(),
        }
    }

    /// The embedded default: an in-memory limiter over `config` with the system clock and the
    /// reference's default settings. The proxy calls [`RateLimiter::decide`] on it directly.
    pub fn in_memory(config: ConfigSet) -> Self {
        let settings = LimiterSettings::default();
        let store = Store::Memory(Arc::new(MemoryStore::new(settings.memory_max_keys)));
        let limiter = RateLimiter::new(
            store,
            settings,
            Arc::new(SystemClock),
            Arc::new(Stats::new()),
        );
        limiter.set_config(config);
        limiter
    }

    /// Compiles and swaps in a new config; in-flight decisions finish on the old one.
    /// Counters live in the store, so they survive the swap.
    pub fn set_config(&self, config: ConfigSet) {
        let snapshot = Snapshot::compile(config, &self.stats);
        self.snapshot.store(Some(Arc::new(snapshot)));
    }

    /// The active compiled config, if any.
    pub fn snapshot(&self) -> Option<Arc<Snapshot>> {
        self.snapshot.load_full()
    }

    pub fn stats(&self) -> &Arc<Stats> {
        &self.stats
    }

    pub fn store(&self) -> &Store {
        &self.store
    }

    /// The over-limit descriptors of a call answered OVER_LIMIT, in `/ratelimit/top`: their
    /// entries as `key=value,...`, with the limit's name (else its key).
    #[cold]
    fn note_limited(
        &self,
        domain: &str,
        request: &RateLimitRequest,
        checks: &[Checked],
        statuses: &[DescriptorStatus],
        now_millis: u64,
    ) {
        let now = std::time::UNIX_EPOCH + std::time::Duration::from_millis(now_millis);
        for check in checks {
            if statuses[check.index].code != Code::OverLimit as i32 {
                continue;
            }
            let Some(descriptor) = request.descriptors.get(check.index) else {
                continue;
            };
            let entries: Vec<String> = descriptor
                .entries
                .iter()
                .map(|e| format!("{}={}", e.key, e.value))
                .collect();
            let rule: Arc<str> = Arc::from(
                check
                    .limit
                    .name
                    .as_deref()
                    .unwrap_or(check.limit.full_key.as_str()),
            );
            self.limited.record(domain, entries.join(","), &rule, now);
        }
    }

    /// The descriptors answered OVER_LIMIT most, per domain.
    pub fn limited(&self) -> &crate::heavy_hitters::LimitedDescriptors {
        &self.limited
    }

    pub fn settings(&self) -> &LimiterSettings {
        &self.settings
    }

    /// The limiter's clock, in Unix milliseconds.
    pub fn now_millis(&self) -> u64 {
        self.clock.now_millis()
    }

    /// Bans in force now (warden extension `ban`), from the store.
    pub async fn bans(&self) -> Result<Vec<crate::ban::BanRecord>, StoreError> {
        self.store.list_bans(self.clock.now_millis()).await
    }

    /// Lifts the ban of `key` (a [`crate::ban::BanRecord::key`]) and forgets its strikes.
    pub async fn lift_ban(&self, key: &str) -> Result<bool, StoreError> {
        self.store.lift_ban(key).await
    }

    /// `ShouldRateLimit`.
    pub async fn decide(&self, request: &RateLimitRequest) -> Result<RateLimitResponse, RlsError> {
        self.decide_with(request, false).await
    }

    /// `ShouldRateLimit` for a client that takes quota leases ([`crate::lease`]): an OK answer
    /// may carry `quota`, reserved in the same store round trip.
    pub async fn decide_leasing(
        &self,
        request: &RateLimitRequest,
    ) -> Result<RateLimitResponse, RlsError> {
        self.decide_with(request, true).await
    }

    async fn decide_with(
        &self,
        request: &RateLimitRequest,
        leasing: bool,
    ) -> Result<RateLimitResponse, RlsError> {
        let result = self.decide_inner(request, leasing).await;
        if let Err(e) = &result {
            self.stats.error(e.stat_name());
        }
        result
    }

    async fn decide_inner(
        &self,
        request: &RateLimitRequest,
        leasing: bool,
    ) -> Result<RateLimitResponse, RlsError> {
        if request.domain.is_empty() {
            return Err(RlsError::EmptyDomain);
        }
        if request.descriptors.is_empty() {
            return Err(RlsError::EmptyDescriptors);
        }
        let snapshot = self.snapshot.load_full().ok_or(RlsError::NoConfig)?;
        let now_millis = self.clock.now_millis();
        let now = now_millis / 1000;
        let domain = request.domain.as_str();
        let domain_known = snapshot.has_domain(domain);
        if !domain_known {
            self.stats.domain_not_found(domain);
        }

        // 1. Match every descriptor.
        let mut limits: Vec<Option<Arc<Limit>>> = Vec::with_capacity(request.descriptors.len());
        for descriptor in &request.descriptors {
            limits.push(self.resolve(&snapshot, domain, domain_known, descriptor)?);
        }

        // 2. `replaces`: drop matched limits whose name another matched limit replaces.
        let replaced: HashSet<String> = limits
            .iter()
            .flatten()
            .flat_map(|l| l.replaces.iter().cloned())
            .collect();
        if !replaced.is_empty() {
            for slot in limits.iter_mut() {
                if slot
                    .as_ref()
                    .and_then(|l| l.name.as_deref())
                    .is_some_and(|n| replaced.contains(n))
                {
                    *slot = None;
                }
            }
        }

        // 3. Build the checks (unlimited limits are answered without the store).
        let mut statuses = vec![ok_status(); request.descriptors.len()];
        // The longest ban in force for this call, in ms (`Retry-After`).
        let mut banned_ms: Option<u64> = None;
        let mut checks = Vec::new();
        for (index, (descriptor, limit)) in request.descriptors.iter().zip(limits).enumerate() {
            let Some(limit) = limit else { continue };
            let Some(unit) = limit.unit.filter(|_| !limit.unlimited) else {
                statuses[index].limit_remaining = u32::MAX;
                continue;
            };
            let hits = match &descriptor.hits_addend {
                Some(h) => h.value,
                None => u64::from(request.hits_addend.max(1)),
            };
            // A ban counts in the fixed window its script (and the memory store) counts.
            let algorithm = match limit.ban {
                Some(_) => Algorithm::FixedWindow,
                None => limit.algorithm.unwrap_or(self.settings.default_algorithm),
            };
            let window = unit.window(limit.unit_multiplier);
            let key = self.cache_key(domain, descriptor, &limit, window, now);
            let ban = limit
                .ban
                .as_ref()
                .map(|config| self.ban_op(index, &limit, config, &key, now_millis));
            // A banned client is answered by its ban, not by the over-limit cache.
            let cached_over = ban.is_none()
                && self
                    .local_cache
                    .as_ref()
                    .is_some_and(|c| c.contains(&key, now_millis));
            let stats = self.stats_for(domain, descriptor, &limit);
            stats.total_hits.inc_by(hits);
            checks.push(Checked {
                index,
                limit,
                stats,
                hits,
                unit,
                window,
                algorithm,
                key,
                ban,
                cached_over,
            });
        }

        // 4. One store round trip for all descriptors still to count, reserving a lease's
        //    requests along with the call's own hits.
        let lease_size = if leasing { self.lease_size(&checks) } else { 0 };
        let mut ops: Vec<CounterOp> = checks
            .iter_mut()
            .filter(|c| !c.cached_over)
            .map(|c| self.counter_op(c, now))
            .collect();
        for op in &mut ops {
            op.hits += u64::from(lease_size);
        }
        if self.settings.stop_increment_when_overlimit && !ops.is_empty() {
            let before = self.store.get(&ops, now_millis).await?;
            let live: Vec<&Checked> = checks.iter().filter(|c| !c.cached_over).collect();
            let any_over = checks.iter().any(|c| c.cached_over)
                || live
                    .iter()
                    .zip(&before)
                    .any(|(c, b)| b.saturating_add(c.hits) > u64::from(c.limit.requests_per_unit));
            if any_over {
                for ((op, c), b) in ops.iter_mut().zip(&live).zip(&before) {
                    if b.saturating_add(c.hits) <= u64::from(c.limit.requests_per_unit) {
                        op.hits = 0;
                    }
                }
            }
        }
        let results = if ops.is_empty() {
            Vec::new()
        } else {
            let subject_of = |descriptor: usize| {
                let rule = checks
                    .iter()
                    .find(|c| c.index == descriptor)
                    .map(|c| c.limit.full_key.as_str());
                ban_subject(domain, request.descriptors.get(descriptor), rule)
            };
            self.store.apply(&ops, now_millis, &subject_of).await?
        };

        // 5. Statuses (of the call's own request: a reservation is taken off the counts). The
        //    lease is what every descriptor still has room for.
        let mut results = results.into_iter().zip(&ops);
        let mut grant = lease_size;
        for check in &checks {
            let div = check.window;
            let reset = div - now % div;
            let rpu = check.limit.requests_per_unit;
            let status = &mut statuses[check.index];
            status.current_limit = Some(current_limit(&check.limit, check.unit));
            status.duration_until_reset = Some(PbDuration {
                seconds: reset as i64,
                nanos: 0,
            });
            let over = if check.cached_over {
                check.stats.over_limit.inc_by(check.hits);
                check.stats.over_limit_with_local_cache.inc_by(check.hits);
                true
            } else {
                let (result, hits, key) = results
                    .next()
                    .map_or((CounterResult::default(), 0, None), |(r, op)| {
                        (r, op.hits, Some(op.key.as_str()))
                    });
                let after = match check.algorithm {
                    Algorithm::FixedWindow => result.after,
                    Algorithm::SlidingWindow => {
                        let div_ms = div * 1000;
                        let elapsed = now_millis % div_ms;
                        let weight = (div_ms - elapsed) as f64 / div_ms as f64;
                        result.after + (result.prev as f64 * weight).floor() as u64
                    }
                };
                match result.ban {
                    Some(BanOutcome::Refused { remaining_ms, .. }) => {
                        banned_ms = banned_ms.max(Some(remaining_ms));
                        check.stats.over_limit.inc_by(hits);
                        check.stats.banned.inc_by(hits);
                        status.duration_until_reset = Some(seconds_of(remaining_ms));
                        status.code = Code::OverLimit as i32;
                        continue;
                    }
                    Some(BanOutcome::Started { duration_ms, .. }) => {
                        banned_ms = banned_ms.max(Some(duration_ms));
                        check.stats.ban_started.inc();
                        status.duration_until_reset = Some(seconds_of(duration_ms));
                    }
                    None => {}
                }
                let reserved = u64::from(lease_size).min(hits);
                let (after, hits) = (after.saturating_sub(reserved), hits - reserved);
                let before = after.saturating_sub(hits);
                let over = self.count_stats(&check.stats, rpu, before, after, hits);
                let room = u64::from(rpu).saturating_sub(after);
                grant = grant.min(u32::try_from(room).unwrap_or(u32::MAX));
                if over {
                    if let (Some(cache), Some(key), Algorithm::FixedWindow) =
                        (&self.local_cache, key, check.algorithm)
                    {
                        cache.insert(key, now_millis + div * 1000, now_millis);
                    }
                } else {
                    status.limit_remaining = (u64::from(rpu) - after) as u32;
                }
                over
            };
            if over {
                status.limit_remaining = 0;
                if check.limit.shadow_mode {
                    check.stats.shadow_mode.inc_by(check.hits);
                } else {
                    status.code = Code::OverLimit as i32;
                }
            }
        }

        // 6. Overall code: non-quota over-limit, or every quota descriptor over limit.
        let mut overall = Code::Ok;
        let (mut quota_total, mut quota_over) = (0, 0);
        for check in &checks {
            let over = statuses[check.index].code == Code::OverLimit as i32;
            if check.limit.quota_mode || self.settings.quota_mode {
                quota_total += 1;
                quota_over += usize::from(over);
            } else if over {
                overall = Code::OverLimit;
            }
        }
        if quota_total > 0 && quota_over == quota_total {
            overall = Code::OverLimit;
        }
        let mut headers = self.response_headers(&checks, &statuses);
        if let Some(ms) = banned_ms.filter(|_| overall == Code::OverLimit) {
            // A ban's end is known: say it the standard way (RFC 9110 §10.2.3), on the 429
            // Envoy (or warden) answers with the service's `response_headers_to_add`.
            headers.push(HeaderValue {
                key: "retry-after".to_owned(),
                value: ms.div_ceil(1000).to_string(),
                ..Default::default()
            });
        }
        if overall == Code::OverLimit && !self.settings.shadow_mode {
            self.note_limited(domain, request, &checks, &statuses, now_millis);
        }
        if overall == Code::OverLimit && self.settings.shadow_mode {
            self.stats.global_shadow_mode.inc();
            overall = Code::Ok;
        }
        let quota = (lease_size > 0 && grant > 0 && overall == Code::Ok).then(|| {
            // Counted as hits now: the client admits them without calling again.
            for check in &checks {
                check.stats.total_hits.inc_by(u64::from(grant));
                check.stats.within_limit.inc_by(u64::from(grant));
            }
            let shortest = checks.iter().map(|c| c.window).min().unwrap_or(1);
            Quota {
                requests: grant.saturating_add(1),
                id: String::new(),
                expiration_specifier: Some(ExpirationSpecifier::ValidUntil(lease::window_end(
                    now_millis, shortest,
                ))),
            }
        });
        let dynamic_metadata = self.settings.response_dynamic_metadata.then(|| {
            let passed = checks
                .iter()
                .filter(|c| statuses[c.index].code != Code::OverLimit as i32)
                .filter_map(|c| c.limit.metadata.as_ref());
            dynamic_metadata::build(request, passed)
        });
        Ok(RateLimitResponse {
            overall_code: overall as i32,
            statuses,
            response_headers_to_add: headers,
            quota,
            dynamic_metadata,
            ..Default::default()
        })
    }

    /// Requests a lease may reserve for these checks: the smallest of their limits' shares, and
    /// none unless every check is a plain fixed-window count of one hit (quota, shadow, sliding
    /// windows, hits addends and the stop-increment mode keep their exact per-call answers).
    fn lease_size(&self, checks: &[Checked]) -> u32 {
        let s = &self.settings;
        if s.lease.fraction <= 0.0
            || s.shadow_mode
            || s.quota_mode
            || s.stop_increment_when_overlimit
            || checks.is_empty()
        {
            return 0;
        }
        let plain = |c: &Checked| {
            c.hits == 1
                && c.ban.is_none()
                && !c.cached_over
                && c.algorithm == Algorithm::FixedWindow
                && !c.limit.shadow_mode
                && !c.limit.quota_mode
        };
        if !checks.iter().all(plain) {
            return 0;
        }
        checks
            .iter()
            .map(|c| s.lease.size_for(c.limit.requests_per_unit))
            .min()
            .unwrap_or(0)
    }

    fn resolve(
        &self,
        snapshot: &Snapshot,
        domain: &str,
        domain_known: bool,
        descriptor: &RateLimitDescriptor,
    ) -> Result<Option<Arc<Limit>>, RlsError> {
        if descriptor.entries.is_empty() || !domain_known {
            return Ok(None);
        }
        if let Some(over) = &descriptor.limit {
            let unit =
                Unit::from_override(over.unit).ok_or(RlsError::InvalidOverrideUnit(over.unit))?;
            let full_key = stats_key::override_key(domain, descriptor);
            return Ok(Some(Arc::new(Limit {
                stats: self.stats.limit_stats(domain, &full_key),
                full_key,
                requests_per_unit: over.requests_per_unit,
                unit: Some(unit),
                unit_multiplier: 1,
                unlimited: false,
                name: None,
                replaces: Vec::new(),
                shadow_mode: false,
                quota_mode: false,
                detailed_metric: false,
                value_to_metric: false,
                algorithm: None,
                metadata: None,
                ban: None,
                levels: Vec::new(),
            })));
        }
        let entries = descriptor
            .entries
            .iter()
            .map(|e| (e.key.as_str(), e.value.as_str()));
        Ok(snapshot.get_limit_of(domain, entries))
    }

    /// Counters for this request: the limit's own, or those of the key the reference would
    /// count it under ([`crate::stats_key`]).
    fn stats_for(
        &self,
        domain: &str,
        descriptor: &RateLimitDescriptor,
        limit: &Limit,
    ) -> Arc<LimitStats> {
        match stats_key::request_key(domain, descriptor, limit) {
            Some(key) => self.stats.limit_stats(domain, &key),
            None => limit.stats.clone(),
        }
    }

    /// `CACHE_KEY_PREFIX + domain + "_" + Σ(key + "_" + value + "_") + windowStart`, the window
    /// being `unit × unit_multiplier` seconds.
    fn cache_key(
        &self,
        domain: &str,
        descriptor: &RateLimitDescriptor,
        limit: &Limit,
        window: u64,
        now: u64,
    ) -> String {
        let div = window;
        let mut key = String::with_capacity(64);
        key.push_str(&self.settings.cache_key_prefix);
        key.push_str(domain);
        key.push('_');
        for (i, entry) in descriptor.entries.iter().enumerate() {
            key.push_str(&entry.key);
            key.push('_');
            let shared = limit
                .levels
                .get(i)
                .filter(|l| l.share_threshold && l.wildcard)
                .and_then(|l| l.config_value.as_deref());
            key.push_str(shared.unwrap_or(&entry.value));
            key.push('_');
        }
        let _ = write!(key, "{}", (now / div) * div);
        key
    }

    /// The ban part of a call's op: the client's ban key (the counter key's stem, without its
    /// window). Who it is for is written only when a ban starts ([`ban_subject`]).
    fn ban_op(
        &self,
        index: usize,
        limit: &Limit,
        config: &Arc<crate::config::BanConfig>,
        counter_key: &str,
        now_millis: u64,
    ) -> BanOp {
        let prefix = &self.settings.cache_key_prefix;
        let stem = counter_key
            .trim_end_matches(|c: char| c.is_ascii_digit())
            .strip_prefix(prefix.as_str())
            .unwrap_or(counter_key);
        BanOp {
            key: format!("{prefix}{BAN_KEY_PREFIX}{stem}"),
            config: config.clone(),
            limit: limit.requests_per_unit,
            descriptor: index,
            now_ms: now_millis,
        }
    }

    /// The store op of `check`, taking its key.
    fn counter_op(&self, check: &mut Checked, now: u64) -> CounterOp {
        let div = check.window;
        let jitter = match self.settings.expiration_jitter_max_seconds {
            0 => 0,
            max => fastrand::u64(0..max),
        };
        let (ttl_secs, prev_key) = match check.algorithm {
            Algorithm::FixedWindow => (div + jitter, None),
            Algorithm::SlidingWindow => {
                // The previous window's key: same prefix, window start one divider earlier.
                let start = (now / div) * div;
                let stem = check
                    .key
                    .strip_suffix(&start.to_string())
                    .unwrap_or(&check.key);
                let prev = format!("{stem}{}", start.saturating_sub(div));
                (2 * div + jitter, Some(prev))
            }
        };
        CounterOp {
            key: std::mem::take(&mut check.key),
            hits: check.hits,
            ttl_secs,
            prev_key,
            per_second: check.unit == Unit::Second,
            ban: check.ban.take(),
        }
    }

    /// The reference's over/near/within accounting (`base_limiter.go`); true when over limit.
    fn count_stats(
        &self,
        stats: &LimitStats,
        rpu: u32,
        before: u64,
        after: u64,
        hits: u64,
    ) -> bool {
        let over_threshold = u64::from(rpu);
        let near_threshold = (rpu as f32 * self.settings.near_limit_ratio).floor() as u64;
        if after > over_threshold {
            if before >= over_threshold {
                stats.over_limit.inc_by(hits);
            } else {
                stats.over_limit.inc_by(after - over_threshold);
                stats
                    .near_limit
                    .inc_by(over_threshold - near_threshold.max(before));
            }
            true
        } else {
            if after > near_threshold {
                if before >= near_threshold {
                    stats.near_limit.inc_by(hits);
                } else {
                    stats.near_limit.inc_by(after - near_threshold);
                }
            }
            stats.within_limit.inc_by(hits);
            false
        }
    }

    /// `LIMIT_RESPONSE_HEADERS_ENABLED`: from the last over-limit non-quota descriptor, else the
    /// descriptor with the lowest remaining.
    fn response_headers(
        &self,
        checks: &[Checked],
        statuses: &[DescriptorStatus],
    ) -> Vec<HeaderValue> {
        let Some(names) = &self.settings.response_headers else {
            return Vec::new();
        };
        let quota = |c: &Checked| c.limit.quota_mode || self.settings.quota_mode;
        let chosen = checks
            .iter()
            .rev()
            .find(|c| !quota(c) && statuses[c.index].code == Code::OverLimit as i32)
            .or_else(|| {
                checks
                    .iter()
                    .min_by_key(|c| statuses[c.index].limit_remaining)
            });
        let Some(check) = chosen else {
            return Vec::new();
        };
        let status = &statuses[check.index];
        let reset = status
            .duration_until_reset
            .as_ref()
            .map_or(0, |d| d.seconds);
        let header = |key: &str, value: String| HeaderValue {
            key: key.to_owned(),
            value,
            ..Default::default()
        };
        vec![
            header(&names.limit, check.limit.requests_per_unit.to_string()),
            header(&names.remaining, status.limit_remaining.to_string()),
            header(&names.reset, reset.to_string()),
        ]
    }
}

/// Who a ban is for, as stored with it and listed: the descriptor and the rule it broke.
fn ban_subject(
    domain: &str,
    descriptor: Option<&RateLimitDescriptor>,
    rule: Option<&str>,
) -> String {
    BanSubject {
        domain: domain.to_owned(),
        entries: descriptor.map_or_else(Vec::new, |d| {
            d.entries
                .iter()
                .map(|e| (e.key.clone(), e.value.clone()))
                .collect()
        }),
        rule: rule.unwrap_or_default().to_owned(),
    }
    .to_json()
}

/// Whole seconds, rounded up: a client told to come back after this is not banned then.
fn seconds_of(ms: u64) -> PbDuration {
    PbDuration {
        seconds: ms.div_ceil(1000) as i64,
        nanos: 0,
    }
}

fn ok_status() -> DescriptorStatus {
    DescriptorStatus {
        code: Code::Ok as i32,
        ..Default::default()
    }
}

fn current_limit(limit: &Limit, unit: Unit) -> RateLimit {
    RateLimit {
        name: limit.name.clone().unwrap_or_default(),
        requests_per_unit: limit.requests_per_unit,
        unit: unit.proto(),
    }
}
