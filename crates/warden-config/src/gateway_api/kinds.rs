//! Serde shapes of the Kubernetes Gateway API kinds (`gateway.networking.k8s.io` v1, v1beta1,
//! v1alpha2), field names as users write them. Fields warden does not act on are still read,
//! so that setting one is reported by name (see `translate`), never dropped as a typo.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// `GatewayClass`: which controller serves the Gateways naming it.
#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct GatewayClassSpec {
    #[serde(default)]
    pub controller_name: String,
    #[serde(default)]
    pub parameters_ref: Option<serde_json::Value>,
    #[serde(default)]
    pub description: Option<String>,
}

/// `Gateway` (`gateway.networking.k8s.io`).
#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct GatewaySpec {
    #[serde(default)]
    pub gateway_class_name: String,
    #[serde(default)]
    pub listeners: Vec<Listener>,
    /// Addresses a controller would request for the Gateway's Service; a proxy binds its
    /// listeners where it is told (`warden proxy --listen-host`), so they are only reported.
    #[serde(default)]
    pub addresses: Vec<serde_json::Value>,
    #[serde(default)]
    pub infrastructure: Option<serde_json::Value>,
    #[serde(default)]
    pub tls: Option<serde_json::Value>,
}

#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Listener {
    pub name: String,
    #[serde(default)]
    pub hostname: Option<String>,
    pub port: u16,
    /// HTTP | HTTPS | TLS | TCP (UDP is refused).
    pub protocol: String,
    #[serde(default)]
    pub tls: Option<ListenerTls>,
    #[serde(default)]
    pub allowed_routes: Option<AllowedRoutes>,
}

#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ListenerTls {
    /// Terminate (default) | Passthrough.
    #[serde(default)]
    pub mode: Option<String>,
    #[serde(default)]
    pub certificate_refs: Vec<ObjectRef>,
    #[serde(default)]
    pub options: BTreeMap<String, String>,
    #[serde(default)]
    pub frontend_validation: Option<serde_json::Value>,
}

#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct AllowedRoutes {
    #[serde(default)]
    pub namespaces: Option<RouteNamespaces>,
    #[serde(default)]
    pub kinds: Vec<RouteGroupKind>,
}

#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct RouteNamespaces {
    /// Same (default) | All | Selector.
    #[serde(default)]
    pub from: Option<String>,
    #[serde(default)]
    pub selector: Option<LabelSelector>,
}

#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct LabelSelector {
    #[serde(default)]
    pub match_labels: BTreeMap<String, String>,
    #[serde(default)]
    pub match_expressions: Vec<LabelSelectorRequirement>,
}

#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct LabelSelectorRequirement {
    pub key: String,
    /// In | NotIn | Exists | DoesNotExist.
    pub operator: String,
    #[serde(default)]
    pub values: Vec<String>,
}

#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct RouteGroupKind {
    #[serde(default)]
    pub group: Option<String>,
    pub kind: String,
}

/// A reference to an object by group, kind, name and (optionally) namespace: certificate
/// refs, backend refs, mirror targets.
#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ObjectRef {
    #[serde(default)]
    pub group: Option<String>,
    #[serde(default)]
    pub kind: Option<String>,
    pub name: String,
    #[serde(default)]
    pub namespace: Option<String>,
    #[serde(default)]
    pub port: Option<u16>,
}

#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ParentRef {
    #[serde(default)]
    pub group: Option<String>,
    #[serde(default)]
    pub kind: Option<String>,
    #[serde(default)]
    pub namespace: Option<String>,
    pub name: String,
    #[serde(default)]
    pub section_name: Option<String>,
    #[serde(default)]
    pub port: Option<u16>,
}

/// `HTTPRoute` and `GRPCRoute` share parents and hostnames; their rules differ.
#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct HttpRouteSpec {
    #[serde(default)]
    pub parent_refs: Vec<ParentRef>,
    #[serde(default)]
    pub hostnames: Vec<String>,
    #[serde(default)]
    pub rules: Vec<HttpRouteRule>,
}

#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct HttpRouteRule {
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub matches: Vec<HttpRouteMatch>,
    #[serde(default)]
    pub filters: Vec<HttpRouteFilter>,
    #[serde(default)]
    pub backend_refs: Vec<HttpBackendRef>,
    #[serde(default)]
    pub timeouts: Option<HttpRouteTimeouts>,
    #[serde(default)]
    pub retry: Option<HttpRouteRetry>,
    #[serde(default)]
    pub session_persistence: Option<serde_json::Value>,
}

#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct HttpRouteMatch {
    #[serde(default)]
    pub path: Option<HttpPathMatch>,
    #[serde(default)]
    pub headers: Vec<NameValueMatch>,
    #[serde(default)]
    pub query_params: Vec<NameValueMatch>,
    #[serde(default)]
    pub method: Option<String>,
}

#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct HttpPathMatch {
    /// Exact | PathPrefix (default) | RegularExpression.
    #[serde(default, rename = "type")]
    pub kind: Option<String>,
    /// `/` when unset.
    #[serde(default)]
    pub value: Option<String>,
}

/// A header or query parameter match: Exact (default) or RegularExpression.
#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct NameValueMatch {
    #[serde(default, rename = "type")]
    pub kind: Option<String>,
    pub name: String,
    pub value: String,
}

#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct HttpRouteFilter {
    #[serde(rename = "type")]
    pub kind: String,
    #[serde(default)]
    pub request_header_modifier: Option<HeaderFilter>,
    #[serde(default)]
    pub response_header_modifier: Option<HeaderFilter>,
    #[serde(default)]
    pub request_mirror: Option<MirrorFilter>,
    #[serde(default)]
    pub request_redirect: Option<RedirectFilter>,
    #[serde(default)]
    pub url_rewrite: Option<UrlRewriteFilter>,
    #[serde(default)]
    pub cors: Option<serde_json::Value>,
    #[serde(default)]
    pub external_auth: Option<serde_json::Value>,
    #[serde(default)]
    pub extension_ref: Option<ObjectRef>,
}

#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct HeaderFilter {
    #[serde(default)]
    pub set: Vec<NameValue>,
    #[serde(default)]
    pub add: Vec<NameValue>,
    #[serde(default)]
    pub remove: Vec<String>,
}

#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct NameValue {
    pub name: String,
    pub value: String,
}

#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct MirrorFilter {
    pub backend_ref: ObjectRef,
    #[serde(default)]
    pub percent: Option<u32>,
    #[serde(default)]
    pub fraction: Option<Fraction>,
}

#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Fraction {
    pub numerator: u32,
    #[serde(default)]
    pub denominator: Option<u32>,
}

#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct RedirectFilter {
    #[serde(default)]
    pub scheme: Option<String>,
    #[serde(default)]
    pub hostname: Option<String>,
    #[serde(default)]
    pub path: Option<PathModifier>,
    #[serde(default)]
    pub port: Option<u16>,
    #[serde(default)]
    pub status_code: Option<u16>,
}

#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct UrlRewriteFilter {
    #[serde(default)]
    pub hostname: Option<String>,
    #[serde(default)]
    pub path: Option<PathModifier>,
}

#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct PathModifier {
    /// ReplaceFullPath | ReplacePrefixMatch.
    #[serde(rename = "type")]
    pub kind: String,
    #[serde(default)]
    pub replace_full_path: Option<String>,
    #[serde(default)]
    pub replace_prefix_match: Option<String>,
}

#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct HttpBackendRef {
    #[serde(default)]
    pub group: Option<String>,
    #[serde(default)]
    pub kind: Option<String>,
    pub name: String,
    #[serde(default)]
    pub namespace: Option<String>,
    #[serde(default)]
    pub port: Option<u16>,
    /// 1 when unset.
    #[serde(default)]
    pub weight: Option<u32>,
    #[serde(default)]
    pub filters: Vec<HttpRouteFilter>,
}

#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct HttpRouteTimeouts {
    #[serde(default)]
    pub request: Option<String>,
    #[serde(default)]
    pub backend_request: Option<String>,
}

#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct HttpRouteRetry {
    #[serde(default)]
    pub codes: Vec<u16>,
    #[serde(default)]
    pub attempts: Option<u32>,
    #[serde(default)]
    pub backoff: Option<String>,
}

/// `GRPCRoute`.
#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct GrpcRouteSpec {
    #[serde(default)]
    pub parent_refs: Vec<ParentRef>,
    #[serde(default)]
    pub hostnames: Vec<String>,
    #[serde(default)]
    pub rules: Vec<GrpcRouteRule>,
}

#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct GrpcRouteRule {
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub matches: Vec<GrpcRouteMatch>,
    #[serde(default)]
    pub filters: Vec<HttpRouteFilter>,
    #[serde(default)]
    pub backend_refs: Vec<HttpBackendRef>,
    #[serde(default)]
    pub session_persistence: Option<serde_json::Value>,
}

#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct GrpcRouteMatch {
    #[serde(default)]
    pub method: Option<GrpcMethodMatch>,
    #[serde(default)]
    pub headers: Vec<NameValueMatch>,
}

#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct GrpcMethodMatch {
    /// Exact (default) | RegularExpression.
    #[serde(default, rename = "type")]
    pub kind: Option<String>,
    #[serde(default)]
    pub service: Option<String>,
    #[serde(default)]
    pub method: Option<String>,
}

/// `TCPRoute` and `TLSRoute`: parents, (TLS: SNI hostnames) and rules of backends only.
#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct L4RouteSpec {
    #[serde(default)]
    pub parent_refs: Vec<ParentRef>,
    #[serde(default)]
    pub hostnames: Vec<String>,
    #[serde(default)]
    pub rules: Vec<L4RouteRule>,
}

#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct L4RouteRule {
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub backend_refs: Vec<HttpBackendRef>,
}

/// `ReferenceGrant`: objects of `from` may reference objects of `to` in the grant's namespace.
#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ReferenceGrantSpec {
    #[serde(default)]
    pub from: Vec<GrantFrom>,
    #[serde(default)]
    pub to: Vec<GrantTo>,
}

#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct GrantFrom {
    #[serde(default)]
    pub group: String,
    pub kind: String,
    pub namespace: String,
}

#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct GrantTo {
    #[serde(default)]
    pub group: String,
    pub kind: String,
    #[serde(default)]
    pub name: Option<String>,
}

impl HttpBackendRef {
    /// The object this backend names.
    pub fn target(&self) -> ObjectRef {
        ObjectRef {
            group: self.group.clone(),
            kind: self.kind.clone(),
            name: self.name.clone(),
            namespace: self.namespace.clone(),
            port: self.port,
        }
    }
}
