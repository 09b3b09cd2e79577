//! Envoy's `ext_authz` filter as Istio configures it for `action: CUSTOM` AuthorizationPolicies,
//! without I/O: the `envoy.service.auth.v3` CheckRequest a request, or a TCP connection for
//! the network filter, becomes ([`check_request`]), what the provider's CheckResponse does to the request and the answer
//! ([`answer`]: allowed with header edits and dynamic metadata, or denied with the provider's
//! status, headers and body), what a failed check gives (`failOpen`, `statusOnError`), and
//! `google.protobuf.Struct` as JSON ([`metadata`]); for HTTP providers, the check request and
//! the answer's meaning ([`http_check`]). The proxy makes the call
//! (`warden-proxy` `filters/ext_authz.rs`).

#![forbid(unsafe_code)]

pub mod answer;
pub mod check_request;
pub mod http_check;
pub mod metadata;

pub use envoy_types::pb::envoy::service::auth::v3::{CheckRequest, CheckResponse};

/// The gRPC method a provider serves.
pub const CHECK_METHOD: &str = "/envoy.service.auth.v3.Authorization/Check";
/// Dynamic metadata namespace of the filter (where the rate limit `metadata` action reads).
pub const METADATA_NAMESPACE: &str = "envoy.filters.http.ext_authz";
