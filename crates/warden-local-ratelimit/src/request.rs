//! What the limiter needs to know about a request; built by the proxy once per request.

use std::net::IpAddr;

#[derive(Debug, Clone, Copy)]
pub struct RequestAttrs<'a> {
    /// The trusted client address (XFF trust rules already applied), never a raw header.
    pub client_ip: IpAddr,
    pub method: &'a http::Method,
    /// The path without query string.
    pub path: &'a str,
    /// The query string (after `?`), for Envoy's `:path` pseudo-header.
    pub query: Option<&'a str>,
    /// `:authority` as received (host and port).
    pub authority: &'a str,
    /// `:scheme`: `http` or `https`.
    pub scheme: &'a str,
    pub headers: &'a http::HeaderMap,
    /// Name of the Gateway whose listener accepted the request.
    pub gateway: &'a str,
    /// Name of the VirtualService whose route matched, if any.
    pub virtual_service: Option<&'a str>,
    /// The Gateway API route the matched route was translated from, `HTTPRoute/ns/name`.
    pub source_route: Option<&'a str>,
    /// The upstream cluster (service host) the route picked, for Envoy's `destination_cluster`.
    pub destination_cluster: Option<&'a str>,
    /// Which per-route `local_ratelimit` configs (indices into
    /// [`crate::envoy::EnvoyRateLimitPatches::route_local`]) the proxy resolved to this
    /// request's route; when any applies, the EnvoyFilters' filter-level configs do not (Envoy's
    /// per-route config replaces the filter's).
    pub route_local: &'a [u32],
    /// Which route `rate_limits` patches (indices into
    /// [`crate::envoy::EnvoyRateLimitPatches::route_rate_limits`]) feed descriptors here, as
    /// the proxy resolved them for this request's route; None: all of them.
    pub route_rate_limits: Option<&'a [u32]>,
    /// Envoy's dynamic metadata of the request (filters such as Lua wrote it), for the
    /// `metadata` / `dynamic_metadata` actions.
    pub dynamic_metadata: Option<&'a DynamicMetadata>,
}

/// Dynamic metadata: namespace -> fields, as Envoy's `filter_metadata` holds it.
pub type DynamicMetadata =
    std::collections::BTreeMap<String, serde_json::Map<String, serde_json::Value>>;

/// The namespace Envoy's jwt_authn writes and the field Istio puts the verified payload in
/// (`payload_in_metadata: payload`).
pub const JWT_AUTHN_METADATA: &str = "envoy.filters.http.jwt_authn";
pub const JWT_PAYLOAD_FIELD: &str = "payload";

/// The verified JWT's payload, when jwt_authn ran before and wrote it.
pub fn jwt_payload(
    metadata: &DynamicMetadata,
) -> Option<&serde_json::Map<String, serde_json::Value>> {
    metadata
        .get(JWT_AUTHN_METADATA)?
        .get(JWT_PAYLOAD_FIELD)?
        .as_object()
}
