//! The service's stats, exposed under the Prometheus series the reference's exporter makes of
//! its statsd stats (`statsd_name`), so dashboards and alerts keep working:
//! `ratelimit.service.rate_limit.<domain>.<key1>[.<key2>...].total_hits` becomes
//! `ratelimit_service_rate_limit_total_hits{domain, key1[, key2]}` (no `_total` suffix, key2
//! only from two levels on, deeper levels folded into it), errors
//! `ratelimit_service_should_rate_limit_error{err_type}`, calls
//! `ratelimit_service_total_requests{grpc_method}` and
//! `ratelimit_service_response_time_seconds{grpc_method}`. Stats keys that map to one series
//! share one counter, as the exporter adds them up. A series appears once it has counted
//! something, as the reference's stats (flushed only when they changed).

mod exposition;
pub mod statsd_name;

use statsd_name::Series;
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};

/// A monotonic counter; clones share the value.
#[derive(Clone, Debug, Default)]
pub struct Counter(Arc<AtomicU64>);

impl Counter {
    pub fn inc(&self) {
        self.inc_by(1);
    }
    pub fn inc_by(&self, n: u64) {
        if n > 0 {
            self.0.fetch_add(n, Ordering::Relaxed);
        }
    }
    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// A gauge; clones share the value.
#[derive(Clone, Debug, Default)]
pub struct Gauge(Arc<AtomicI64>);

impl Gauge {
    pub fn set(&self, v: i64) {
        self.0.store(v, Ordering::Relaxed);
    }
    pub fn get(&self) -> i64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// `ShouldRateLimit` latency: the exporter's default buckets (seconds) with finer ones below
/// 5 ms, so every `le` a dashboard of the reference names exists.
#[derive(Debug)]
pub(crate) struct Histogram {
    bounds: &'static [f64],
    /// One per bound, plus +Inf.
    buckets: Box<[AtomicU64]>,
    sum_nanos: AtomicU64,
}

const LATENCY_BOUNDS: &[f64] = &[
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
    5.0, 10.0,
];

impl Histogram {
    fn new(bounds: &'static [f64]) -> Self {
        Histogram {
            bounds,
            buckets: (0..=bounds.len()).map(|_| AtomicU64::new(0)).collect(),
            sum_nanos: AtomicU64::new(0),
        }
    }

    fn observe(&self, seconds: f64) {
        let i = self.bounds.partition_point(|b| *b < seconds);
        if let Some(bucket) = self.buckets.get(i) {
            bucket.fetch_add(1, Ordering::Relaxed);
        }
        self.sum_nanos
            .fetch_add((seconds * 1e9) as u64, Ordering::Relaxed);
    }
}

/// Per-limit counters, resolved once per compiled limit (or per stats key for
/// `detailed_metric` / `value_to_metric`) so the hot path only does atomic adds.
#[derive(Clone, Debug, Default)]
pub struct LimitStats {
    pub total_hits: Counter,
    pub over_limit: Counter,
    pub near_limit: Counter,
    pub within_limit: Counter,
    pub over_limit_with_local_cache: Counter,
    pub shadow_mode: Counter,
    /// warden extension: calls refused because their client is banned (also in `over_limit`).
    pub banned: Counter,
    /// warden extension: bans started (each is one offence, one strike).
    pub ban_started: Counter,
}

/// All stats of the service.
#[derive(Debug)]
pub struct Stats {
    /// Counters by the series they are exposed as.
    series: Mutex<BTreeMap<Series, Counter>>,
    /// Per-limit counters by stats key: request-derived keys are looked up per call.
    limits: RwLock<HashMap<String, Arc<LimitStats>>>,
    domains_not_found: RwLock<HashMap<String, Counter>>,
    redis_error: Counter,
    service_error: Counter,
    total_requests: Counter,
    response_time: Histogram,
    pub config_load_success: Counter,
    pub config_load_error: Counter,
    pub global_shadow_mode: Counter,
    /// warden's own: 1 when the last Redis health probe succeeded.
    pub redis_healthy: Gauge,
}

impl Default for Stats {
    fn default() -> Self {
        Self::new()
    }
}

impl Stats {
    pub fn new() -> Self {
        let stats = Stats {
            series: Mutex::new(BTreeMap::new()),
            limits: RwLock::new(HashMap::new()),
            domains_not_found: RwLock::new(HashMap::new()),
            redis_error: Counter::default(),
            service_error: Counter::default(),
            total_requests: Counter::default(),
            response_time: Histogram::new(LATENCY_BOUNDS),
            config_load_success: Counter::default(),
            config_load_error: Counter::default(),
            global_shadow_mode: Counter::default(),
            redis_healthy: Gauge::default(),
        };
        let errors = |err_type: &str| Series {
            name: "ratelimit_service_should_rate_limit_error".into(),
            labels: vec![("err_type", err_type.into())],
        };
        for (series, counter) in [
            (errors("redis_error"), &stats.redis_error),
            (errors("service_error"), &stats.service_error),
            (
                Series {
                    name: "ratelimit_service_total_requests".into(),
                    labels: vec![("grpc_method", "ShouldRateLimit".into())],
                },
                &stats.total_requests,
            ),
            (
                statsd_name::map("ratelimit.service.config_load_success"),
                &stats.config_load_success,
            ),
            (
                statsd_name::map("ratelimit.service.config_load_error"),
                &stats.config_load_error,
            ),
            (
                statsd_name::map("ratelimit.service.global_shadow_mode"),
                &stats.global_shadow_mode,
            ),
        ] {
            stats.register(series, counter.clone());
        }
        stats
    }

    /// The counter of `series`, shared with every stat that maps to it.
    fn counter(&self, series: Series) -> Counter {
        let mut map = self.series.lock().unwrap_or_else(|e| e.into_inner());
        map.entry(series).or_default().clone()
    }

    fn register(&self, series: Series, counter: Counter) {
        let mut map = self.series.lock().unwrap_or_else(|e| e.into_inner());
        map.insert(series, counter);
    }

    /// Counters of one stats key (`domain.k1_v1.k2`, unsanitized).
    pub fn limit_stats(&self, _domain: &str, stats_key: &str) -> Arc<LimitStats> {
        if let Some(s) = self
            .limits
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(stats_key)
        {
            return s.clone();
        }
        let c = |stat| self.counter(statsd_name::limit_series(stats_key, stat));
        let stats = Arc::new(LimitStats {
            total_hits: c("total_hits"),
            over_limit: c("over_limit"),
            near_limit: c("near_limit"),
            within_limit: c("within_limit"),
            over_limit_with_local_cache: c("over_limit_with_local_cache"),
            shadow_mode: c("shadow_mode"),
            banned: c("banned"),
            ban_started: c("ban_started"),
        });
        let mut limits = self.limits.write().unwrap_or_else(|e| e.into_inner());
        limits.entry(stats_key.to_owned()).or_insert(stats).clone()
    }

    pub fn domain_not_found(&self, domain: &str) {
        if let Some(c) = self
            .domains_not_found
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(domain)
        {
            c.inc();
            return;
        }
        let counter = self.counter(statsd_name::domain_not_found_series(domain));
        counter.inc();
        self.domains_not_found
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .insert(domain.to_owned(), counter);
    }

    /// A failed call, by the reference's error stat (`redis_error` or `service_error`).
    pub fn error(&self, err_type: &str) {
        match err_type {
            "redis_error" => self.redis_error.inc(),
            _ => self.service_error.inc(),
        }
    }

    /// One `ShouldRateLimit` call and its latency.
    pub fn should_rate_limit(&self, seconds: f64) {
        self.total_requests.inc();
        self.response_time.observe(seconds);
    }

    /// Prometheus text exposition (format 0.0.4).
    pub fn encode(&self) -> String {
        let series = self.series.lock().unwrap_or_else(|e| e.into_inner());
        let mut out = String::new();
        exposition::counters(&mut out, series.iter().map(|(s, c)| (s, c.get())));
        drop(series);
        exposition::histogram(
            &mut out,
            "ratelimit_service_response_time_seconds",
            &[("grpc_method", "ShouldRateLimit")],
            self.response_time.bounds,
            &self
                .response_time
                .buckets
                .iter()
                .map(|b| b.load(Ordering::Relaxed))
                .collect::<Vec<_>>(),
            self.response_time.sum_nanos.load(Ordering::Relaxed) as f64 / 1e9,
        );
        exposition::gauge(
            &mut out,
            "ratelimit_redis_healthy",
            "1 when the last Redis health probe succeeded (warden)",
            self.redis_healthy.get(),
        );
        out
    }
}

/// Shared handle.
pub type SharedStats = Arc<Stats>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_that_map_to_one_series_share_its_counter() {
        let stats = Stats::new();
        stats.limit_stats("d", "d.a_1.b_2").total_hits.inc_by(2);
        stats.limit_stats("d", "d.a_1.b_2.c_3").total_hits.inc_by(3);
        stats.limit_stats("d", "d.a_1").total_hits.inc();
        let text = stats.encode();
        assert!(
            text.contains(
                "ratelimit_service_rate_limit_total_hits{domain=\"d\",key1=\"a_1\",key2=\"b_2\"} 5\n"
            ),
            "{text}"
        );
        assert!(
            text.contains("ratelimit_service_rate_limit_total_hits{domain=\"d\",key1=\"a_1\"} 1\n"),
            "{text}"
        );
        // Nothing counted yet: not exposed.
        assert!(!text.contains("over_limit"), "{text}");
    }

    #[test]
    fn latency_buckets_are_cumulative_seconds() {
        let stats = Stats::new();
        assert!(!stats.encode().contains("response_time"));
        stats.should_rate_limit(0.0002);
        stats.should_rate_limit(0.2);
        let text = stats.encode();
        for line in [
            "ratelimit_service_response_time_seconds_bucket{grpc_method=\"ShouldRateLimit\",le=\"0.0001\"} 0",
            "ratelimit_service_response_time_seconds_bucket{grpc_method=\"ShouldRateLimit\",le=\"0.00025\"} 1",
            "ratelimit_service_response_time_seconds_bucket{grpc_method=\"ShouldRateLimit\",le=\"0.25\"} 2",
            "ratelimit_service_response_time_seconds_bucket{grpc_method=\"ShouldRateLimit\",le=\"+Inf\"} 2",
            "ratelimit_service_response_time_seconds_count{grpc_method=\"ShouldRateLimit\"} 2",
            "ratelimit_service_total_requests{grpc_method=\"ShouldRateLimit\"} 2",
        ] {
            assert!(text.contains(&format!("{line}\n")), "missing {line} in\n{text}");
        }
    }
}
