//! `networking.istio.io` VirtualService.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct VirtualService {
    #[serde(default)]
    pub hosts: Vec<String>,
    #[serde(default)]
    pub gateways: Vec<String>,
    #[serde(default)]
    pub http: Vec<HttpRoute>,
    #[serde(default)]
    pub tcp: Vec<TcpRoute>,
    /// SNI routes of PASSTHROUGH servers: the connection's TLS is forwarded untouched.
    #[serde(default)]
    pub tls: Vec<TlsRoute>,
}

#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct TlsRoute {
    #[serde(default, rename = "match")]
    pub matches: Vec<TlsMatchAttributes>,
    #[serde(default)]
    pub route: Vec<RouteDestination>,
}

#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct TlsMatchAttributes {
    /// The SNI values this match takes (`*.example.com` wildcards as server hosts).
    #[serde(default)]
    pub sni_hosts: Vec<String>,
    #[serde(default)]
    pub port: Option<u16>,
    #[serde(default)]
    pub gateways: Vec<String>,
}

#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct HttpRoute {
    #[serde(default)]
    pub name: Option<String>,
    /// The Gateway API route this one was translated from, `Kind/namespace/name`
    /// ([`crate::gateway_api::route_source`]), so that policies targeting it find its rules;
    /// never read from YAML.
    #[serde(skip)]
    pub source_route: Option<String>,
    /// Match conditions are ORed; fields inside one condition are ANDed. Empty matches everything.
    #[serde(default, rename = "match")]
    pub matches: Vec<HttpMatchRequest>,
    #[serde(default)]
    pub route: Vec<HttpRouteDestination>,
    #[serde(default)]
    pub direct_response: Option<DirectResponse>,
    #[serde(default)]
    pub headers: Option<Headers>,
    /// Duration string such as `5s`, `250ms`.
    #[serde(default)]
    pub timeout: Option<String>,
    #[serde(default)]
    pub retries: Option<Retries>,
    #[serde(default)]
    pub fault: Option<HttpFault>,
    #[serde(default)]
    pub rewrite: Option<HttpRewrite>,
    #[serde(default)]
    pub redirect: Option<HttpRedirect>,
    /// A copy of each request, fire and forget, to another destination (Envoy's shadow).
    #[serde(default)]
    pub mirror: Option<Destination>,
    /// The share of requests `mirror` copies (default 100).
    #[serde(default)]
    pub mirror_percentage: Option<Percent>,
    /// Deprecated integer form of `mirrorPercentage`.
    #[serde(default)]
    pub mirror_percent: Option<u32>,
    /// Several mirrors, each with its own share (Istio 1.22+); not together with `mirror`.
    #[serde(default)]
    pub mirrors: Vec<HttpMirrorPolicy>,
    #[serde(default)]
    pub cors_policy: Option<CorsPolicy>,
}

#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct HttpMirrorPolicy {
    pub destination: Destination,
    #[serde(default)]
    pub percentage: Option<Percent>,
}

/// `corsPolicy`: Envoy's CORS filter for the route.
#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct CorsPolicy {
    #[serde(default)]
    pub allow_origins: Vec<StringMatch>,
    /// Deprecated exact origins (`*` allows any).
    #[serde(default)]
    pub allow_origin: Vec<String>,
    #[serde(default)]
    pub allow_methods: Vec<String>,
    #[serde(default)]
    pub allow_headers: Vec<String>,
    #[serde(default)]
    pub expose_headers: Vec<String>,
    /// Duration string; the preflight's `access-control-max-age` in seconds.
    #[serde(default)]
    pub max_age: Option<String>,
    #[serde(default)]
    pub allow_credentials: Option<bool>,
    /// `FORWARD` (default) or `IGNORE`: what becomes of a preflight whose origin is not allowed.
    #[serde(default)]
    pub unmatched_preflights: Option<String>,
}

#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct HttpMatchRequest {
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub uri: Option<StringMatch>,
    #[serde(default)]
    pub method: Option<StringMatch>,
    #[serde(default)]
    pub authority: Option<StringMatch>,
    #[serde(default)]
    pub headers: BTreeMap<String, StringMatch>,
    #[serde(default)]
    pub port: Option<u16>,
    #[serde(default)]
    pub gateways: Vec<String>,
    #[serde(default)]
    pub ignore_uri_case: bool,
    /// Query parameter name -> match on its value (the parameter must be present).
    #[serde(default)]
    pub query_params: BTreeMap<String, StringMatch>,
    /// Header name -> match that must NOT hold (an absent header passes).
    #[serde(default)]
    pub without_headers: BTreeMap<String, StringMatch>,
    /// `http` or `https`, as the request arrived.
    #[serde(default)]
    pub scheme: Option<StringMatch>,
    /// The calling workload's labels (a sidecar's own; a gateway's own labels at a gateway).
    #[serde(default)]
    pub source_labels: BTreeMap<String, String>,
    #[serde(default)]
    pub source_namespace: Option<String>,
}

/// Istio StringMatch: exactly one of exact / prefix / regex.
#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct StringMatch {
    #[serde(default)]
    pub exact: Option<String>,
    #[serde(default)]
    pub prefix: Option<String>,
    #[serde(default)]
    pub regex: Option<String>,
}

#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct HttpRouteDestination {
    pub destination: Destination,
    #[serde(default)]
    pub weight: Option<u32>,
    #[serde(default)]
    pub headers: Option<Headers>,
}

#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Destination {
    pub host: String,
    #[serde(default)]
    pub subset: Option<String>,
    #[serde(default)]
    pub port: Option<PortSelector>,
}

#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct PortSelector {
    pub number: u16,
}

#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct DirectResponse {
    pub status: u16,
    #[serde(default)]
    pub body: Option<HttpBody>,
}

/// Exactly one of `string` or `bytes` (base64).
#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct HttpBody {
    #[serde(default)]
    pub string: Option<String>,
    #[serde(default)]
    pub bytes: Option<String>,
}

#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Headers {
    #[serde(default)]
    pub request: Option<HeaderOperations>,
    #[serde(default)]
    pub response: Option<HeaderOperations>,
}

#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct HeaderOperations {
    #[serde(default)]
    pub set: BTreeMap<String, String>,
    #[serde(default)]
    pub add: BTreeMap<String, String>,
    #[serde(default)]
    pub remove: Vec<String>,
}

#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Retries {
    #[serde(default)]
    pub attempts: u32,
    #[serde(default)]
    pub per_try_timeout: Option<String>,
    #[serde(default)]
    pub retry_on: Option<String>,
}

#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct TcpRoute {
    #[serde(default, rename = "match")]
    pub matches: Vec<L4MatchAttributes>,
    #[serde(default)]
    pub route: Vec<RouteDestination>,
}

#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct L4MatchAttributes {
    #[serde(default)]
    pub port: Option<u16>,
    #[serde(default)]
    pub gateways: Vec<String>,
}

#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct RouteDestination {
    pub destination: Destination,
    #[serde(default)]
    pub weight: Option<u32>,
}

impl HttpBody {
    /// The body's bytes: `string` as UTF-8, or `bytes` decoded from standard base64 (padding
    /// optional, as protobuf JSON accepts). Validation guarantees `Ok` for loaded configs.
    pub fn to_bytes(&self) -> Result<Vec<u8>, String> {
        use base64::engine::{DecodePaddingMode, GeneralPurpose, GeneralPurposeConfig};
        use base64::Engine;
        const STANDARD_ANY_PADDING: GeneralPurpose = GeneralPurpose::new(
            &base64::alphabet::STANDARD,
            GeneralPurposeConfig::new().with_decode_padding_mode(DecodePaddingMode::Indifferent),
        );
        match (&self.string, &self.bytes) {
            (Some(s), None) => Ok(s.clone().into_bytes()),
            (None, Some(b)) => STANDARD_ANY_PADDING
                .decode(b)
                .map_err(|e| format!("bytes is not valid base64: {e}")),
            _ => Err("body needs exactly one of string or bytes".into()),
        }
    }
}

/// The one condition a valid [`StringMatch`] holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StringMatchKind<'a> {
    Exact(&'a str),
    Prefix(&'a str),
    /// An RE2-style pattern that must match the whole value; compile [`anchored_regex`] of it.
    Regex(&'a str),
}

impl StringMatch {
    /// The condition, or `None` unless exactly one of exact/prefix/regex is set.
    pub fn kind(&self) -> Option<StringMatchKind<'_>> {
        match (&self.exact, &self.prefix, &self.regex) {
            (Some(e), None, None) => Some(StringMatchKind::Exact(e)),
            (None, Some(p), None) => Some(StringMatchKind::Prefix(p)),
            (None, None, Some(r)) => Some(StringMatchKind::Regex(r)),
            _ => None,
        }
    }
}

/// Istio regexes are RE2 with full-match semantics (Envoy `safe_regex`): `a.c` matches `abc`
/// but not `xabcx`. Compile this anchored form with the `regex` crate to get the same result.
pub fn anchored_regex(pattern: &str) -> String {
    format!("^(?:{pattern})$")
}

/// Split weights for destinations with these `weight` values: a single destination takes all
/// traffic whatever its weight; with none set, traffic is split equally; otherwise the values
/// are relative (they need not sum to 100).
pub fn effective_weights(weights: &[Option<u32>]) -> Vec<u32> {
    if weights.len() == 1 || weights.iter().all(Option::is_none) {
        return vec![1; weights.len()];
    }
    weights.iter().map(|w| w.unwrap_or(0)).collect()
}

impl HttpRoute {
    /// [`effective_weights`] of `route[]`.
    pub fn weights(&self) -> Vec<u32> {
        effective_weights(&self.route.iter().map(|r| r.weight).collect::<Vec<_>>())
    }
}

impl TcpRoute {
    /// [`effective_weights`] of `route[]`.
    pub fn weights(&self) -> Vec<u32> {
        effective_weights(&self.route.iter().map(|r| r.weight).collect::<Vec<_>>())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn anchored_regex_is_a_full_match() {
        let re = regex::Regex::new(&anchored_regex("a.c|/x")).unwrap();
        assert!(re.is_match("abc"));
        assert!(re.is_match("/x"));
        assert!(!re.is_match("xabcx"));
        assert!(!re.is_match("/xy"));
    }

    #[test]
    fn body_bytes_accept_base64_with_or_without_padding() {
        let body = |b: &str| HttpBody {
            bytes: Some(b.into()),
            string: None,
        };
        assert_eq!(body("dGVzdA==").to_bytes(), Ok(b"test".to_vec()));
        assert_eq!(body("dGVzdA").to_bytes(), Ok(b"test".to_vec()));
        assert!(body("dGV*dA").to_bytes().is_err());
    }

    #[test]
    fn weights_single_equal_and_relative() {
        assert_eq!(effective_weights(&[Some(0)]), vec![1]);
        assert_eq!(effective_weights(&[None, None]), vec![1, 1]);
        assert_eq!(effective_weights(&[Some(3), Some(1)]), vec![3, 1]);
    }

    #[test]
    fn string_match_kind_needs_exactly_one() {
        let m = StringMatch {
            prefix: Some("/".into()),
            ..StringMatch::default()
        };
        assert_eq!(m.kind(), Some(StringMatchKind::Prefix("/")));
        let two = StringMatch {
            exact: Some("a".into()),
            ..m
        };
        assert_eq!(two.kind(), None);
        assert_eq!(StringMatch::default().kind(), None);
    }
}

/// `fault`: Envoy's fault filter, a delay and/or an abort for a share of the route's requests.
#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct HttpFault {
    #[serde(default)]
    pub delay: Option<FaultDelay>,
    #[serde(default)]
    pub abort: Option<FaultAbort>,
}

#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct FaultDelay {
    #[serde(default)]
    pub fixed_delay: Option<String>,
    /// Rejected: warden injects fixed delays only.
    #[serde(default)]
    pub exponential_delay: Option<String>,
    #[serde(default)]
    pub percentage: Option<Percent>,
    /// The deprecated integer form of `percentage`.
    #[serde(default)]
    pub percent: Option<u32>,
}

#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct FaultAbort {
    #[serde(default)]
    pub http_status: Option<u16>,
    /// Rejected: aborts are HTTP statuses.
    #[serde(default)]
    pub grpc_status: Option<String>,
    #[serde(default)]
    pub http2_error: Option<String>,
    #[serde(default)]
    pub percentage: Option<Percent>,
}

#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
pub struct Percent {
    #[serde(default)]
    pub value: f64,
}

impl HttpFault {
    /// The share of requests (0..=100) a fault applies to: `percentage.value`, else the
    /// integer `percent`, else all of them (Istio's default).
    pub fn share(percentage: Option<&Percent>, percent: Option<u32>) -> f64 {
        percentage
            .map(|p| p.value)
            .or(percent.map(f64::from))
            .unwrap_or(100.0)
    }
}

/// `rewrite`: what the upstream request carries instead of the client's path or Host.
#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct HttpRewrite {
    /// Replaces the matched prefix (a prefix match) or the whole path.
    #[serde(default)]
    pub uri: Option<String>,
    #[serde(default)]
    pub authority: Option<String>,
    #[serde(default)]
    pub uri_regex_rewrite: Option<RegexRewrite>,
}

#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct RegexRewrite {
    #[serde(rename = "match")]
    pub pattern: String,
    /// Envoy's substitution: `\1` is the first group.
    pub rewrite: String,
}

/// `redirect`: answered by the proxy with a `location` built from the request.
#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct HttpRedirect {
    #[serde(default)]
    pub uri: Option<String>,
    #[serde(default)]
    pub authority: Option<String>,
    #[serde(default)]
    pub port: Option<u16>,
    /// FROM_PROTOCOL_DEFAULT | FROM_REQUEST_PORT.
    #[serde(default)]
    pub derive_port: Option<String>,
    #[serde(default)]
    pub scheme: Option<String>,
    /// 301 unless set.
    #[serde(default)]
    pub redirect_code: Option<u16>,
    /// (matched prefix, replacement): a Gateway API `ReplacePrefixMatch` redirect, which
    /// Istio's API has no field for (set only by `gateway_api::translate`).
    #[serde(skip)]
    pub prefix_rewrite: Option<(String, String)>,
}
