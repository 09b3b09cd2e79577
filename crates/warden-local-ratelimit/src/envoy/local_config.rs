//! `envoy.extensions.filters.http.local_ratelimit.v3.LocalRateLimit` and
//! `envoy.extensions.filters.network.local_ratelimit.v3.LocalRateLimit`, as users write them in
//! EnvoyFilter patches (snake_case, or protobuf-JSON camelCase).

use super::actions::RateLimitEntry;
use super::proto_json::{
    HeaderValueOption, HttpStatus, ProtoDuration, RuntimeFractionalPercent, Uint,
};
use serde::Deserialize;

pub const HTTP_LOCAL_RATELIMIT_TYPE: &str =
    "type.googleapis.com/envoy.extensions.filters.http.local_ratelimit.v3.LocalRateLimit";
pub const NETWORK_LOCAL_RATELIMIT_TYPE: &str =
    "type.googleapis.com/envoy.extensions.filters.network.local_ratelimit.v3.LocalRateLimit";

#[derive(Debug, Clone, Deserialize, PartialEq)]
pub struct TokenBucket {
    #[serde(alias = "maxTokens")]
    pub max_tokens: Uint,
    #[serde(default, alias = "tokensPerFill")]
    pub tokens_per_fill: Option<Uint>,
    #[serde(alias = "fillInterval")]
    pub fill_interval: ProtoDuration,
}

#[derive(Debug, Clone, Deserialize, PartialEq)]
pub struct DescriptorEntry {
    pub key: String,
    /// Empty means "any value": one bucket per distinct value (a wildcard descriptor).
    #[serde(default)]
    pub value: String,
}

#[derive(Debug, Clone, Deserialize, PartialEq)]
pub struct LocalDescriptor {
    pub entries: Vec<DescriptorEntry>,
    #[serde(alias = "tokenBucket")]
    pub token_bucket: TokenBucket,
}

#[derive(Debug, Clone, Deserialize, PartialEq)]
pub struct HttpLocalRateLimit {
    #[serde(alias = "statPrefix")]
    pub stat_prefix: String,
    #[serde(default)]
    pub status: Option<HttpStatus>,
    #[serde(default, alias = "tokenBucket")]
    pub token_bucket: Option<TokenBucket>,
    #[serde(default, alias = "filterEnabled")]
    pub filter_enabled: Option<RuntimeFractionalPercent>,
    #[serde(default, alias = "filterEnforced")]
    pub filter_enforced: Option<RuntimeFractionalPercent>,
    #[serde(default, alias = "requestHeadersToAddWhenNotEnforced")]
    pub request_headers_to_add_when_not_enforced: Vec<HeaderValueOption>,
    #[serde(default, alias = "responseHeadersToAdd")]
    pub response_headers_to_add: Vec<HeaderValueOption>,
    #[serde(default)]
    pub descriptors: Vec<LocalDescriptor>,
    #[serde(default)]
    pub stage: u32,
    #[serde(default, alias = "localRateLimitPerDownstreamConnection")]
    pub local_rate_limit_per_downstream_connection: bool,
    #[serde(default, alias = "alwaysConsumeDefaultTokenBucket")]
    pub always_consume_default_token_bucket: Option<bool>,
    /// `OFF` (default) or `DRAFT_VERSION_03`.
    #[serde(default, alias = "enableXRatelimitHeaders")]
    pub enable_x_ratelimit_headers: Option<String>,
    #[serde(default, alias = "rateLimitedAsResourceExhausted")]
    pub rate_limited_as_resource_exhausted: bool,
    #[serde(default, alias = "maxDynamicDescriptors")]
    pub max_dynamic_descriptors: Option<Uint>,
    /// Newer Envoy: the actions embedded in the filter instead of on the route.
    #[serde(default, alias = "rateLimits")]
    pub rate_limits: Vec<RateLimitEntry>,
}

#[derive(Debug, Clone, Deserialize, PartialEq)]
pub struct NetworkLocalRateLimit {
    #[serde(alias = "statPrefix")]
    pub stat_prefix: String,
    #[serde(alias = "tokenBucket")]
    pub token_bucket: TokenBucket,
    #[serde(default, alias = "runtimeEnabled")]
    pub runtime_enabled: Option<serde_json::Value>,
    #[serde(default, alias = "shareKey")]
    pub share_key: Option<String>,
}
