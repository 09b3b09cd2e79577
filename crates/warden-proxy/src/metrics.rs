//! Prometheus metrics of the proxy (served on the admin `/stats/prometheus`), plus a typed view
//! of the main counters for tests and embedders.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RouteCodeLabels {
    pub route: String,
    pub code: u16,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindLabels {
    pub kind: &'static str,
}

/// Counters that the admin endpoint exposes and tests read.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MetricsView {
    pub requests: u64,
    pub active_connections: i64,
    pub upstream_errors: u64,
    pub config_reloads: u64,
    pub config_reload_errors: u64,
}

/// Global rate limit stage outcomes (Envoy's `cluster.<c>.ratelimit.*`).
#[derive(Debug, Clone, Default)]
pub struct GlobalRateLimitMetrics {
    pub ok: Counter,
    pub over_limit: Counter,
    pub error: Counter,
    pub failure_mode_allowed: Counter,
    /// Requests answered 429 from the over-limit cache, without an RPC.
    pub over_limit_cache_hits: Counter,
}

impl GlobalRateLimitMetrics {
    fn register(&self, registry: &mut Registry) {
        let sub = registry.sub_registry_with_prefix("ratelimit");
        sub.register("ok", "RLS answers OK", self.ok.clone());
        sub.register("over_limit", "RLS answers OVER_LIMIT", self.over_limit.clone());
        sub.register(
            "error",
            "RLS calls that failed or timed out",
            self.error.clone(),
        );
        sub.register(
            "failure_mode_allowed",
            "Requests let through because the RLS failed (fail open)",
            self.failure_mode_allowed.clone(),
        );
        sub.register(
            "over_limit_cache_hits",
            "Requests limited from the over-limit cache, without an RLS call",
            self.over_limit_cache_hits.clone(),
        );
    }
}

pub struct Metrics {
    registry: Registry,
    pub global_rate_limit: GlobalRateLimitMetrics,
    pub requests_by_route: Family<RouteCodeLabels, Counter>,
    pub requests: Counter,
    pub duration: Histogram,
    pub active_connections: Gauge,
    pub tcp_connections: Counter,
    upstream_errors: Family<KindLabels, Counter>,
    pub upstream_errors_total: Counter,
    pub config_reloads: Counter,
    pub config_reload_errors: Counter,
}

impl Metrics {
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("warden");
        let requests_by_route = Family::<RouteCodeLabels, Counter>::default();
        let requests = Counter::default();
        // 100µs .. ~52s, doubling.
        let duration = Histogram::new(exponential_buckets(0.0001, 2.0, 20));
        let active_connections = Gauge::default();
        let tcp_connections = Counter::default();
        let upstream_errors = Family::<KindLabels, Counter>::default();
        let upstream_errors_total = Counter::default();
        let config_reloads = Counter::default();
        let config_reload_errors = Counter::default();
        registry.register(
            "http_requests",
            "HTTP requests by route and status code",
            requests_by_route.clone(),
        );
        registry.register(
            "http_request_duration_seconds",
            "Time from request headers to response headers",
            duration.clone(),
        );
        registry.register(
            "downstream_connections_active",
            "Open downstream connections (HTTP and TCP)",
            active_connections.clone(),
        );
        registry.register(
            "tcp_connections",
            "TCP proxy connections accepted",
            tcp_connections.clone(),
        );
        registry.register(
            "upstream_errors",
            "Upstream failures by kind (connect, timeout, reset, overflow, no_healthy)",
            upstream_errors.clone(),
        );
        registry.register(
            "config_reloads",
            "Successful config reloads",
            config_reloads.clone(),
        );
        registry.register(
            "config_reload_errors",
            "Rejected config reloads (the running config was kept)",
            config_reload_errors.clone(),
        );
        let global_rate_limit = GlobalRateLimitMetrics::default();
        global_rate_limit.register(&mut registry);
        Metrics {
            registry,
            global_rate_limit,
            requests_by_route,
            requests,
            duration,
            active_connections,
            tcp_connections,
            upstream_errors,
            upstream_errors_total,
            config_reloads,
            config_reload_errors,
        }
    }

    pub fn route_code_counter(&self, route: &str, code: u16) -> Counter {
        self.requests_by_route
            .get_or_create_owned(&RouteCodeLabels {
                route: route.to_string(),
                code,
            })
    }

    pub fn upstream_error(&self, kind: &'static str) {
        self.upstream_errors
            .get_or_create(&KindLabels { kind })
            .inc();
        self.upstream_errors_total.inc();
    }

    pub fn encode(&self) -> String {
        let mut out = String::new();
        // Writing to a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }

    pub fn view(&self) -> MetricsView {
        MetricsView {
            requests: self.requests.get(),
            active_connections: self.active_connections.get(),
            upstream_errors: self.upstream_errors_total.get(),
            config_reloads: self.config_reloads.get(),
            config_reload_errors: self.config_reload_errors.get(),
        }
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}
