//! `envoy.extensions.filters.http.ratelimit.v3.RateLimit` (the global limiter's filter), parsed
//! and validated here so the proxy's RLS client (warden-proxy's
//! `pipeline/filters/global_rate_limit`) can build on it; warden-local-ratelimit does not act
//! on it.

use super::proto_json::{HeaderValueOption, HttpStatus, ProtoDuration, RuntimeFractionalPercent};
use serde::Deserialize;
use std::time::Duration;

pub const HTTP_RATELIMIT_TYPE: &str =
    "type.googleapis.com/envoy.extensions.filters.http.ratelimit.v3.RateLimit";

/// Envoy's default RLS call timeout.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_millis(20);

#[derive(Debug, Clone, Deserialize, PartialEq)]
pub struct HttpRateLimit {
    pub domain: String,
    #[serde(default)]
    pub stage: u32,
    /// `internal`, `external` or `both` (default).
    #[serde(default, alias = "requestType")]
    pub request_type: Option<String>,
    #[serde(default)]
    pub timeout: Option<ProtoDuration>,
    #[serde(default, alias = "failureModeDeny")]
    pub failure_mode_deny: bool,
    #[serde(default, alias = "rateLimitedAsResourceExhausted")]
    pub rate_limited_as_resource_exhausted: bool,
    #[serde(alias = "rateLimitService")]
    pub rate_limit_service: RateLimitServiceConfig,
    #[serde(default, alias = "enableXRatelimitHeaders")]
    pub enable_x_ratelimit_headers: Option<String>,
    #[serde(default, alias = "disableXEnvoyRatelimitedHeader")]
    pub disable_x_envoy_ratelimited_header: bool,
    #[serde(default, alias = "rateLimitedStatus")]
    pub rate_limited_status: Option<HttpStatus>,
    #[serde(default, alias = "statusOnError")]
    pub status_on_error: Option<HttpStatus>,
    #[serde(default, alias = "responseHeadersToAdd")]
    pub response_headers_to_add: Vec<HeaderValueOption>,
    #[serde(default, alias = "filterEnabled")]
    pub filter_enabled: Option<RuntimeFractionalPercent>,
    #[serde(default, alias = "filterEnforced")]
    pub filter_enforced: Option<RuntimeFractionalPercent>,
}

impl HttpRateLimit {
    pub fn timeout(&self) -> Duration {
        self.timeout.map_or(DEFAULT_TIMEOUT, |t| t.0)
    }
}

#[derive(Debug, Clone, Deserialize, PartialEq)]
pub struct RateLimitServiceConfig {
    #[serde(alias = "grpcService")]
    pub grpc_service: GrpcService,
    /// Only `V3` is meaningful.
    #[serde(default, alias = "transportApiVersion")]
    pub transport_api_version: Option<String>,
}

#[derive(Debug, Clone, Deserialize, PartialEq)]
pub struct GrpcService {
    #[serde(default, alias = "envoyGrpc")]
    pub envoy_grpc: Option<EnvoyGrpc>,
    #[serde(default)]
    pub timeout: Option<ProtoDuration>,
}

#[derive(Debug, Clone, Deserialize, PartialEq)]
pub struct EnvoyGrpc {
    /// Istio style `outbound|8081||ratelimit.default.svc.cluster.local`.
    #[serde(alias = "clusterName")]
    pub cluster_name: String,
    #[serde(default)]
    pub authority: Option<String>,
}

impl EnvoyGrpc {
    /// Host and port of an Istio `outbound|PORT|SUBSET|HOST` cluster name, if it is one.
    pub fn istio_host_port(&self) -> Option<(&str, u16)> {
        let mut parts = self.cluster_name.split('|');
        let (dir, port, _subset, host) =
            (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
        (dir == "outbound").then_some(())?;
        Some((host, port.parse().ok()?))
    }
}
