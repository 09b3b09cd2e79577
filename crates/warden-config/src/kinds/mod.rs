//! Serde shapes of every supported kind, field names exactly as users write them.

pub mod authorization_policy;
pub mod destination_rule;
pub mod envoy_filter;
pub mod gateway;
pub mod kubernetes;
pub mod peer_authentication;
pub mod rate_limit_policy;
pub mod request_authentication;
pub mod service_entry;
pub mod sidecar;
pub mod telemetry;
pub mod virtual_service;
