//! Prometheus metrics named after the reference's stats (its statsd->Prometheus mapping):
//! `ratelimit.service.rate_limit.<domain>.<key...>.<stat>` becomes
//! `ratelimit_service_rate_limit_<stat>{domain, key1, key2}` where key1 is the first descriptor
//! level and key2 the remaining levels joined by `.`.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;
use std::sync::Arc;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct LimitLabels {
    pub domain: String,
    pub key1: String,
    pub key2: String,
}

impl LimitLabels {
    /// From a stats key `domain.k1_v1.k2...`.
    pub fn from_stats_key(domain: &str, stats_key: &str) -> Self {
        let rest = stats_key
            .strip_prefix(domain)
            .and_then(|r| r.strip_prefix('.'))
            .unwrap_or(stats_key);
        let (key1, key2) = match rest.split_once('.') {
            Some((a, b)) => (a, b),
            None => (rest, ""),
        };
        LimitLabels {
            domain: sanitize(domain),
            key1: sanitize(key1),
            key2: sanitize(key2),
        }
    }
}

/// The reference replaces `:` and `|` in stat names (and so in these labels) with `_`.
fn sanitize(text: &str) -> String {
    text.replace([':', '|'], "_")
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DomainLabels {
    domain: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ErrLabels {
    err_type: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct MethodLabels {
    grpc_method: String,
}

/// Per-limit counters, resolved once per compiled limit so the hot path only does atomic adds.
#[derive(Clone, Debug, Default)]
pub struct LimitStats {
    pub total_hits: Counter,
    pub over_limit: Counter,
    pub near_limit: Counter,
    pub within_limit: Counter,
    pub over_limit_with_local_cache: Counter,
    pub shadow_mode: Counter,
}

/// All metrics of the service and their registry.
#[derive(Debug)]
pub struct Stats {
    registry: Registry,
    total_hits: Family<LimitLabels, Counter>,
    over_limit: Family<LimitLabels, Counter>,
    near_limit: Family<LimitLabels, Counter>,
    within_limit: Family<LimitLabels, Counter>,
    over_limit_with_local_cache: Family<LimitLabels, Counter>,
    shadow_mode: Family<LimitLabels, Counter>,
    domain_not_found: Family<DomainLabels, Counter>,
    errors: Family<ErrLabels, Counter>,
    total_requests: Family<MethodLabels, Counter>,
    response_time: Family<MethodLabels, Histogram>,
    /// `ShouldRateLimit`'s series, resolved once (the hot path only touches atomics).
    should_rate_limit: (Counter, Histogram),
    pub config_load_success: Counter,
    pub config_load_error: Counter,
    pub global_shadow_mode: Counter,
    pub redis_healthy: Gauge,
}

impl Default for Stats {
    fn default() -> Self {
        Self::new()
    }
}

impl Stats {
    pub fn new() -> Self {
        let mut registry = Registry::default();
        let response_time = Family::<MethodLabels, Histogram>::new_with_constructor(|| {
            Histogram::new(exponential_buckets(0.000_05, 2.0, 16))
        });
        let method = MethodLabels {
            grpc_method: "ShouldRateLimit".into(),
        };
        let total_requests = Family::<MethodLabels, Counter>::default();
        let should_rate_limit = (
            total_requests.get_or_create(&method).clone(),
            response_time.get_or_create(&method).clone(),
        );
        let stats = Stats {
            registry: Registry::default(),
            should_rate_limit,
            total_hits: Family::default(),
            over_limit: Family::default(),
            near_limit: Family::default(),
            within_limit: Family::default(),
            over_limit_with_local_cache: Family::default(),
            shadow_mode: Family::default(),
            domain_not_found: Family::default(),
            errors: Family::default(),
            total_requests,
            response_time,
            config_load_success: Counter::default(),
            config_load_error: Counter::default(),
            global_shadow_mode: Counter::default(),
            redis_healthy: Gauge::default(),
        };
        let limit_families = [
            (
                "total_hits",
                &stats.total_hits,
                "Hits counted against a limit",
            ),
            ("over_limit", &stats.over_limit, "Hits over the limit"),
            (
                "near_limit",
                &stats.near_limit,
                "Hits over NEAR_LIMIT_RATIO of the limit",
            ),
            ("within_limit", &stats.within_limit, "Hits within the limit"),
            (
                "over_limit_with_local_cache",
                &stats.over_limit_with_local_cache,
                "Over-limit hits answered from the local over-limit cache",
            ),
            (
                "shadow_mode",
                &stats.shadow_mode,
                "Over-limit hits let through by shadow_mode",
            ),
        ];
        for (name, family, help) in limit_families {
            registry.register(
                format!("ratelimit_service_rate_limit_{name}"),
                help,
                family.clone(),
            );
        }
        registry.register(
            "ratelimit_service_rate_limit_domain_not_found",
            "Requests naming a domain that is not configured",
            stats.domain_not_found.clone(),
        );
        registry.register(
            "ratelimit_service_should_rate_limit_error",
            "ShouldRateLimit calls that failed, by error type (redis_error, service_error)",
            stats.errors.clone(),
        );
        registry.register(
            "ratelimit_service_total_requests",
            "ShouldRateLimit calls",
            stats.total_requests.clone(),
        );
        registry.register(
            "ratelimit_service_response_time_seconds",
            "ShouldRateLimit latency",
            stats.response_time.clone(),
        );
        registry.register(
            "ratelimit_service_config_load_success",
            "Successful config loads",
            stats.config_load_success.clone(),
        );
        registry.register(
            "ratelimit_service_config_load_error",
            "Failed config loads (the previous config stays active)",
            stats.config_load_error.clone(),
        );
        registry.register(
            "ratelimit_service_global_shadow_mode",
            "Over-limit responses turned OK by SHADOW_MODE",
            stats.global_shadow_mode.clone(),
        );
        registry.register(
            "ratelimit_redis_healthy",
            "1 when the last Redis health probe succeeded",
            stats.redis_healthy.clone(),
        );
        Stats { registry, ..stats }
    }

    /// Counters of one stats key (`domain.k1_v1.k2`).
    pub fn limit_stats(&self, domain: &str, stats_key: &str) -> Arc<LimitStats> {
        let labels = LimitLabels::from_stats_key(domain, stats_key);
        Arc::new(LimitStats {
            total_hits: self.total_hits.get_or_create(&labels).clone(),
            over_limit: self.over_limit.get_or_create(&labels).clone(),
            near_limit: self.near_limit.get_or_create(&labels).clone(),
            within_limit: self.within_limit.get_or_create(&labels).clone(),
            over_limit_with_local_cache: self
                .over_limit_with_local_cache
                .get_or_create(&labels)
                .clone(),
            shadow_mode: self.shadow_mode.get_or_create(&labels).clone(),
        })
    }

    pub fn domain_not_found(&self, domain: &str) {
        self.domain_not_found
            .get_or_create(&DomainLabels {
                domain: sanitize(domain),
            })
            .inc();
    }

    pub fn error(&self, err_type: &str) {
        self.errors
            .get_or_create(&ErrLabels {
                err_type: err_type.to_owned(),
            })
            .inc();
    }

    /// One `ShouldRateLimit` call and its latency.
    pub fn should_rate_limit(&self, seconds: f64) {
        self.should_rate_limit.0.inc();
        self.should_rate_limit.1.observe(seconds);
    }

    /// Prometheus text exposition.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }
}

/// Shared handle.
pub type SharedStats = Arc<Stats>;
