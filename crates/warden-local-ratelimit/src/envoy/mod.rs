//! Istio EnvoyFilter patches that configure rate limiting, interpreted as Envoy would.
//!
//! Understood: the HTTP `local_ratelimit` filter (HTTP_FILTER, or `typed_per_filter_config` on
//! VIRTUAL_HOST / HTTP_ROUTE), the network `local_ratelimit` filter (NETWORK_FILTER), the HTTP
//! global `ratelimit` filter and route/vhost `rate_limits` actions (parsed for the RLS client),
//! and CLUSTER patches ADDing the static cluster a rate limit service is reached by.
//! Any other patch is reported as an "unsupported EnvoyFilter patch" warning naming its path.

pub mod actions;
pub mod cluster_config;
pub mod global_config;
pub mod local_config;
pub mod patches;
pub mod proto_json;
mod typed;

pub use patches::{interpret, EnvoyRateLimitPatches, PatchOrigin};
