//! Prometheus metrics of the proxy (served on the admin `/stats/prometheus`), plus a typed view
//! of the main counters for tests and embedders.

use crate::core::istio_metrics::AtomicHistogram;
use crate::core::metrics_exposition::{self, Exposition};
use prometheus_client::encoding::text;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::exponential_buckets;
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RouteCodeLabels {
    pub route: String,
    pub code: u16,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabels {
    pub reason: &'static str,
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
    /// Reloads the reload guard refused (also counted in `config_reload_errors`).
    pub config_reloads_refused: u64,
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
    /// Requests admitted on a quota lease, without an RPC.
    pub lease_hits: Counter,
    /// Failed RLS calls by reason (`timeout`, `unavailable`, `grpc_status`, ...).
    errors_by_reason: Family<ReasonLabels, Counter>,
}

impl GlobalRateLimitMetrics {
    fn register(&self, registry: &mut Registry) {
        let sub = registry.sub_registry_with_prefix("ratelimit");
        sub.register("ok", "RLS answers OK", self.ok.clone());
        sub.register(
            "over_limit",
            "RLS answers OVER_LIMIT",
            self.over_limit.clone(),
        );
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
        sub.register(
            "lease_hits",
            "Requests admitted on a quota lease the RLS granted, without an RLS call",
            self.lease_hits.clone(),
        );
        sub.register(
            "rls_failures",
            "RLS calls that failed, by reason (timeout, unavailable, grpc_status, unknown_code, embedded)",
            self.errors_by_reason.clone(),
        );
    }

    /// Count one failed call under `reason`.
    pub fn rls_failure(&self, reason: &'static str) {
        self.errors_by_reason
            .get_or_create(&ReasonLabels { reason })
            .inc();
    }
}

/// The label of a policy counter: an RBAC rule name (`ns[..]-policy[..]-rule[..]`) or `none`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PolicyLabels {
    pub policy: String,
}

/// Authorization outcomes (Envoy's `rbac.allowed` / `rbac.denied` / `rbac.shadow_denied`),
/// HTTP requests and TCP connections alike.
#[derive(Debug, Clone, Default)]
pub struct AuthzMetrics {
    pub allowed: Counter,
    pub denied: Family<PolicyLabels, Counter>,
    pub shadow_denied: Family<PolicyLabels, Counter>,
}

impl AuthzMetrics {
    fn register(&self, registry: &mut Registry) {
        let sub = registry.sub_registry_with_prefix("authz");
        sub.register(
            "allowed",
            "Requests and connections allowed by RBAC",
            self.allowed.clone(),
        );
        sub.register(
            "denied",
            "Requests and connections denied, by the rule that denied (`none`: no ALLOW rule matched)",
            self.denied.clone(),
        );
        sub.register(
            "shadow_denied",
            "Dry-run policies that would have denied, by rule",
            self.shadow_denied.clone(),
        );
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct GroupResultLabels {
    pub group: String,
    pub result: &'static str,
}

/// Prometheus text appended to `/stats/prometheus` at every scrape.
#[derive(Clone)]
pub struct ExtraMetrics(pub std::sync::Arc<dyn Fn(&mut String) + Send + Sync>);

impl std::fmt::Debug for ExtraMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ExtraMetrics")
    }
}

pub struct Metrics {
    registry: Registry,
    /// Istio's standard metrics.
    pub istio: crate::core::istio_metrics::IstioMetrics,
    pub authz: AuthzMetrics,
    pub global_rate_limit: GlobalRateLimitMetrics,
    /// The span exporter's counters (`core::trace_export`).
    pub tracing: crate::core::trace_export::TracingMetrics,
    pub requests_by_route: Family<RouteCodeLabels, Counter>,
    pub requests: Counter,
    /// Seconds, observed in microseconds (atomic buckets: no lock per request).
    pub duration: AtomicHistogram,
    pub active_connections: Gauge,
    pub tcp_connections: Counter,
    upstream_errors: Family<KindLabels, Counter>,
    pub upstream_errors_total: Counter,
    mirror_requests: Family<KindLabels, Counter>,
    pub config_reloads: Counter,
    pub config_reload_errors: Counter,
    config_reload_refused: Family<ReasonLabels, Counter>,
    config_reload_refused_total: Counter,
    downstream_rq_rejected: Family<ReasonLabels, Counter>,
    /// HTTP/2 connections sent a GOAWAY for resetting most of their streams.
    pub h2_premature_reset_closes: Counter,
    /// Connections closed at accept for a connection maximum (any of them).
    pub downstream_cx_overflow: Counter,
    /// Of those, the ones closed for the per-client-IP cap.
    downstream_cx_overflow_per_ip: Counter,
    downstream_timeouts: Family<ReasonLabels, Counter>,
    /// Downstream TLS handshakes completed, and those that failed by reason.
    pub tls_handshakes: Counter,
    tls_handshake_failures: Family<ReasonLabels, Counter>,
    /// Text another component renders at scrape time (the eBPF acceleration's counters).
    pub extra: std::sync::OnceLock<ExtraMetrics>,
}

impl Metrics {
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("warden");
        let requests_by_route = Family::<RouteCodeLabels, Counter>::default();
        let requests = Counter::default();
        // 100µs .. ~52s, doubling.
        let duration = AtomicHistogram::new(exponential_buckets(0.0001, 2.0, 20), 1_000_000);
        let active_connections = Gauge::default();
        let tcp_connections = Counter::default();
        let upstream_errors = Family::<KindLabels, Counter>::default();
        let upstream_errors_total = Counter::default();
        let mirror_requests = Family::<KindLabels, Counter>::default();
        let config_reloads = Counter::default();
        let config_reload_errors = Counter::default();
        let config_reload_refused = Family::<ReasonLabels, Counter>::default();
        let downstream_rq_rejected = Family::<ReasonLabels, Counter>::default();
        let h2_premature_reset_closes = Counter::default();
        let downstream_cx_overflow = Counter::default();
        let downstream_cx_overflow_per_ip = Counter::default();
        let downstream_timeouts = Family::<ReasonLabels, Counter>::default();
        let tls_handshakes = Counter::default();
        let tls_handshake_failures = Family::<ReasonLabels, Counter>::default();
        registry.register(
            "downstream_tls_handshakes",
            "Downstream TLS handshakes completed (terminated here)",
            tls_handshakes.clone(),
        );
        registry.register(
            "downstream_tls_handshake_failures",
            "Downstream TLS connections that failed before serving, by reason (no_client_certificate, unknown_ca, peer_rejected_certificate, no_matching_server, not_tls, timeout, ...)",
            tls_handshake_failures.clone(),
        );
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
            "Upstream failures by kind (connect, timeout, reset, overflow, no_healthy, no_cluster)",
            upstream_errors.clone(),
        );
        registry.register(
            "mirror_requests",
            "Mirrored (shadow) requests by outcome (answered, failed, overflow, body_dropped)",
            mirror_requests.clone(),
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
        registry.register(
            "config_reload_refused",
            "Reloads refused although the config parsed (empty_file, no_listeners, listener_without_routes); also in config_reload_errors",
            config_reload_refused.clone(),
        );
        registry.register(
            "downstream_rq_rejected",
            "Requests answered 400 before routing, by reason (missing_host, multiple_hosts, authority_mismatch, invalid_host, ...)",
            downstream_rq_rejected.clone(),
        );
        registry.register(
            "downstream_cx_too_many_premature_resets",
            "HTTP/2 connections sent a GOAWAY because the client reset most of its streams before their response",
            h2_premature_reset_closes.clone(),
        );
        registry.register(
            "downstream_cx_overflow",
            "Connections closed as soon as accepted: the global, the listener's or the client IP's connection maximum was reached",
            downstream_cx_overflow.clone(),
        );
        registry.register(
            "downstream_cx_overflow_per_ip",
            "Connections closed as soon as accepted because their client IP held --max-connections-per-ip already (also in downstream_cx_overflow)",
            downstream_cx_overflow_per_ip.clone(),
        );
        registry.register(
            "downstream_cx_timeout",
            "Downstream connections and streams ended by a timeout (request_headers: answered 408, idle, max_duration, stream_idle: answered 408 or reset)",
            downstream_timeouts.clone(),
        );
        let global_rate_limit = GlobalRateLimitMetrics::default();
        global_rate_limit.register(&mut registry);
        let authz = AuthzMetrics::default();
        authz.register(&mut registry);
        let tracing = crate::core::trace_export::TracingMetrics::default();
        tracing.register(&mut registry);
        Metrics {
            registry,
            istio: Default::default(),
            authz,
            tracing,
            global_rate_limit,
            requests_by_route,
            requests,
            duration,
            active_connections,
            tcp_connections,
            upstream_errors,
            upstream_errors_total,
            mirror_requests,
            config_reloads,
            config_reload_errors,
            config_reload_refused,
            config_reload_refused_total: Counter::default(),
            downstream_rq_rejected,
            h2_premature_reset_closes,
            downstream_cx_overflow,
            downstream_cx_overflow_per_ip,
            downstream_timeouts,
            tls_handshakes,
            tls_handshake_failures,
            extra: std::sync::OnceLock::new(),
        }
    }

    pub fn route_code_counter(&self, route: &str, code: u16) -> Counter {
        self.requests_by_route
            .get_or_create_owned(&RouteCodeLabels {
                route: route.to_string(),
                code,
            })
    }

    pub fn config_reload_refused(&self, reason: &'static str) {
        self.config_reload_refused
            .get_or_create(&ReasonLabels { reason })
            .inc();
        self.config_reload_refused_total.inc();
    }

    /// A request refused as malformed before routing (400, `DPE`).
    pub fn downstream_rejected(&self, reason: &'static str) {
        self.downstream_rq_rejected
            .get_or_create(&ReasonLabels { reason })
            .inc();
    }

    pub fn downstream_timeout(&self, expired: crate::core::timeouts::Expired) {
        use crate::core::timeouts::Expired;
        let reason = match expired {
            Expired::RequestHeaders => "request_headers",
            Expired::Idle => "idle",
            Expired::MaxDuration => "max_duration",
            Expired::StreamIdle => "stream_idle",
        };
        self.downstream_timeouts
            .get_or_create(&ReasonLabels { reason })
            .inc();
    }

    pub fn mirror(&self, kind: &'static str) {
        self.mirror_requests
            .get_or_create(&KindLabels { kind })
            .inc();
    }

    /// A connection closed at accept for a connection maximum.
    /// A connection refused for a connection maximum; `per_ip` when it was the client's own.
    pub fn downstream_overflow(&self, per_ip: bool) {
        self.downstream_cx_overflow.inc();
        if per_ip {
            self.downstream_cx_overflow_per_ip.inc();
        }
    }

    pub fn tls_handshake_failed(&self, reason: &'static str) {
        self.tls_handshake_failures
            .get_or_create(&ReasonLabels { reason })
            .inc();
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

    /// [`Self::encode`] plus the counters the current snapshot's engines keep themselves
    /// (`scraped` registers them: local limiter groups, connection limits, key table and
    /// evictions); those survive reloads inside the engines, so they are read at scrape time.
    /// Text 0.0.4, as a scrape without an OpenMetrics `Accept` gets it.
    pub fn encode_with(&self, scraped: impl FnOnce(&mut Registry)) -> String {
        self.encode_as(Exposition::Text004, scraped)
    }

    /// [`Self::encode_with`] in the exposition the scraper asked for.
    pub fn encode_as(&self, exposition: Exposition, scraped: impl FnOnce(&mut Registry)) -> String {
        let mut out = String::new();
        let mut registry = Registry::with_prefix("warden");
        scraped(&mut registry);
        let scraped = registry;
        // Writing to a String cannot fail.
        let _ = text::encode_registry(&mut out, &self.registry);
        let _ = text::encode_registry(&mut out, &scraped);
        self.istio.encode(&mut out);
        if let Some(extra) = self.extra.get() {
            (extra.0)(&mut out);
        }
        match exposition {
            Exposition::OpenMetrics => {
                let _ = text::encode_eof(&mut out);
                out
            }
            Exposition::Text004 => metrics_exposition::to_text004(&out),
        }
    }

    pub fn authz_denied(&self, policy: &str) {
        self.authz
            .denied
            .get_or_create_owned(&PolicyLabels {
                policy: policy.to_string(),
            })
            .inc();
    }

    pub fn authz_shadow_denied(&self, policy: &str) {
        self.authz
            .shadow_denied
            .get_or_create_owned(&PolicyLabels {
                policy: policy.to_string(),
            })
            .inc();
    }

    pub fn view(&self) -> MetricsView {
        MetricsView {
            requests: self.requests.get(),
            active_connections: self.active_connections.get(),
            upstream_errors: self.upstream_errors_total.get(),
            config_reloads: self.config_reloads.get(),
            config_reload_errors: self.config_reload_errors.get(),
            config_reloads_refused: self.config_reload_refused_total.get(),
        }
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}
