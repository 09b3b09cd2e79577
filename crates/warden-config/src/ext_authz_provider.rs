//! MeshConfig `extensionProviders[]`: the external authorizers (`envoyExtAuthzGrpc`,
//! `envoyExtAuthzHttp`) that `action: CUSTOM` AuthorizationPolicies name, in Istio's shape,
//! with istiod's checks ([`validate`]): a name each, unique; one provider kind; a service; a port
//! in 1-65535; `statusOnError` an HTTP status; `pathPrefix` starting with `/`; no lone `*` in
//! header lists. The telemetry kinds (`prometheus`, `zipkin`, ...) are read by Telemetry
//! resources, which warden does not have: warnings.

use crate::field_path::{FieldPath, Segment};
use serde::de::{self, Deserializer};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::time::Duration;

/// Istio's default check timeout when `timeout` is unset (`timeoutOrDefault`).
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(600);

/// One `extensionProviders[]` entry.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ExtensionProvider {
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub envoy_ext_authz_grpc: Option<GrpcProvider>,
    #[serde(default)]
    pub envoy_ext_authz_http: Option<HttpProvider>,
    /// A tracing provider (`crate::tracing_provider`).
    #[serde(default)]
    pub opentelemetry: Option<crate::tracing_provider::TracingProvider>,
    #[serde(default)]
    pub zipkin: Option<crate::tracing_provider::TracingProvider>,
}

/// `envoyExtAuthzGrpc` (Istio's EnvoyExternalAuthorizationGrpcProvider).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GrpcProvider {
    /// `host` or `namespace/host` of a registry service.
    #[serde(default)]
    pub service: String,
    #[serde(default, deserialize_with = "port")]
    pub port: u32,
    #[serde(default, deserialize_with = "duration")]
    pub timeout: Option<Duration>,
    #[serde(default)]
    pub fail_open: bool,
    #[serde(default)]
    pub clear_route_cache: bool,
    /// An HTTP status code as text; 403 when unset.
    #[serde(default)]
    pub status_on_error: Option<String>,
    #[serde(default)]
    pub include_request_body_in_check: Option<RequestBody>,
}

/// `envoyExtAuthzHttp` (Istio's EnvoyExternalAuthorizationHttpProvider).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HttpProvider {
    #[serde(default)]
    pub service: String,
    #[serde(default, deserialize_with = "port")]
    pub port: u32,
    #[serde(default, deserialize_with = "duration")]
    pub timeout: Option<Duration>,
    #[serde(default)]
    pub path_prefix: String,
    #[serde(default)]
    pub fail_open: bool,
    #[serde(default)]
    pub clear_route_cache: bool,
    #[serde(default)]
    pub status_on_error: Option<String>,
    /// Deprecated in Istio; used only when `includeRequestHeadersInCheck` is empty.
    #[serde(default)]
    pub include_headers_in_check: Vec<String>,
    #[serde(default)]
    pub include_request_headers_in_check: Vec<String>,
    #[serde(default)]
    pub include_additional_headers_in_check: BTreeMap<String, String>,
    #[serde(default)]
    pub include_request_body_in_check: Option<RequestBody>,
    #[serde(default)]
    pub headers_to_upstream_on_allow: Vec<String>,
    #[serde(default)]
    pub headers_to_downstream_on_allow: Vec<String>,
    #[serde(default)]
    pub headers_to_downstream_on_deny: Vec<String>,
}

/// `includeRequestBodyInCheck` (Envoy's BufferSettings).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RequestBody {
    #[serde(default)]
    pub max_request_bytes: u32,
    #[serde(default)]
    pub allow_partial_message: bool,
    #[serde(default)]
    pub pack_as_bytes: bool,
}

impl ExtensionProvider {
    /// The settings both kinds share: (service, port, timeout, failOpen, statusOnError, body).
    pub fn common(&self) -> Option<Common<'_>> {
        if let Some(g) = &self.envoy_ext_authz_grpc {
            return Some(Common {
                service: &g.service,
                port: g.port,
                timeout: g.timeout.unwrap_or(DEFAULT_TIMEOUT),
                fail_open: g.fail_open,
                clear_route_cache: g.clear_route_cache,
                status_on_error: g.status_on_error.as_deref(),
                body: g.include_request_body_in_check,
            });
        }
        self.envoy_ext_authz_http.as_ref().map(|h| Common {
            service: &h.service,
            port: h.port,
            timeout: h.timeout.unwrap_or(DEFAULT_TIMEOUT),
            fail_open: h.fail_open,
            clear_route_cache: h.clear_route_cache,
            status_on_error: h.status_on_error.as_deref(),
            body: h.include_request_body_in_check,
        })
    }
}

/// What both provider kinds set.
#[derive(Debug, Clone, Copy)]
pub struct Common<'a> {
    pub service: &'a str,
    pub port: u32,
    pub timeout: Duration,
    pub fail_open: bool,
    pub clear_route_cache: bool,
    pub status_on_error: Option<&'a str>,
    pub body: Option<RequestBody>,
}

/// `statusOnError` as a status code (403 when unset); `Err` names what is wrong.
pub fn status_on_error(text: Option<&str>) -> Result<u16, String> {
    let Some(text) = text else {
        return Ok(403);
    };
    let code: u16 = text
        .trim()
        .parse()
        .map_err(|_| format!("invalid statusOnError {text:?}: not a number"))?;
    // Envoy's `type.v3.StatusCode` enum: the registered codes (canonical reasons).
    let known = http::StatusCode::from_u16(code)
        .ok()
        .and_then(|s| s.canonical_reason())
        .is_some();
    if !known || code < 100 {
        return Err(format!(
            "unsupported statusOnError {text}: not an HTTP status code"
        ));
    }
    Ok(code)
}

/// The telemetry provider kinds (read by Telemetry resources, not by CUSTOM policies).
const TELEMETRY_KINDS: &[&str] = &[
    "prometheus",
    "stackdriver",
    "lightstep",
    "datadog",
    "opencensus",
    "skywalking",
    "envoyFileAccessLog",
    "envoyHttpAls",
    "envoyTcpAls",
    "envoyOtelAls",
    "sds",
];

/// Whether an unread mesh-config field is a telemetry provider's (a warning, not an error).
pub fn is_telemetry_provider(field: &FieldPath) -> bool {
    matches!(
        field.segments(),
        [Segment::Key(top), Segment::Index(_), Segment::Key(kind), ..]
            if top == "extensionProviders" && TELEMETRY_KINDS.contains(&kind.as_str())
    )
}

/// istiod's checks of the ext_authz providers: (field, message) per problem.
pub fn validate(providers: &[ExtensionProvider]) -> Vec<(FieldPath, String)> {
    let mut problems = Vec::new();
    let mut seen = std::collections::HashSet::new();
    for (i, p) in providers.iter().enumerate() {
        let at = FieldPath::root().key("extensionProviders").index(i);
        if p.name.is_empty() {
            problems.push((at.key("name"), "name is required".into()));
        } else if !seen.insert(p.name.as_str()) {
            problems.push((
                at.key("name"),
                format!("duplicate provider name {:?}", p.name),
            ));
        }
        let (kind, lists): (&str, Vec<(&str, &[String])>) =
            match (&p.envoy_ext_authz_grpc, &p.envoy_ext_authz_http) {
                (Some(_), Some(_)) => {
                    problems.push((
                        at.clone(),
                        "a provider has one kind: envoyExtAuthzGrpc or envoyExtAuthzHttp".into(),
                    ));
                    continue;
                }
                (Some(_), None) => ("envoyExtAuthzGrpc", Vec::new()),
                (None, Some(h)) => {
                    if !h.path_prefix.is_empty() && !h.path_prefix.starts_with('/') {
                        problems.push((
                            at.key("envoyExtAuthzHttp").key("pathPrefix"),
                            format!("pathPrefix must begin with `/`, found: {:?}", h.path_prefix),
                        ));
                    }
                    (
                        "envoyExtAuthzHttp",
                        vec![
                            (
                                "includeRequestHeadersInCheck",
                                &h.include_request_headers_in_check[..],
                            ),
                            ("includeHeadersInCheck", &h.include_headers_in_check[..]),
                            (
                                "headersToUpstreamOnAllow",
                                &h.headers_to_upstream_on_allow[..],
                            ),
                            (
                                "headersToDownstreamOnAllow",
                                &h.headers_to_downstream_on_allow[..],
                            ),
                            (
                                "headersToDownstreamOnDeny",
                                &h.headers_to_downstream_on_deny[..],
                            ),
                        ],
                    )
                }
                // Telemetry kinds (warned about) or nothing: not an authorizer.
                (None, None) => continue,
            };
        let Some(c) = p.common() else { continue };
        let at = at.key(kind);
        if c.service.trim().is_empty() {
            problems.push((at.key("service"), "service is required".into()));
        }
        if !(1..=65535).contains(&c.port) {
            problems.push((
                at.key("port"),
                format!("port must be in the range [1, 65535], found: {}", c.port),
            ));
        }
        if let Err(e) = status_on_error(c.status_on_error) {
            problems.push((at.key("statusOnError"), e));
        }
        // Envoy refuses a BufferSettings without a positive size.
        if c.body.is_some_and(|b| b.max_request_bytes == 0) {
            problems.push((
                at.key("includeRequestBodyInCheck").key("maxRequestBytes"),
                "maxRequestBytes must be greater than 0".into(),
            ));
        }
        for (field, values) in lists {
            for (j, v) in values.iter().enumerate() {
                if v == "*" {
                    problems.push((
                        at.key(field).index(j),
                        "a single wildcard (\"*\") is not supported, change it to either prefix \
                         or suffix match"
                            .into(),
                    ));
                }
            }
        }
    }
    problems
}

/// A port as Istio's samples write it: a number or a quoted number.
pub(crate) fn port<'de, D: Deserializer<'de>>(d: D) -> Result<u32, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Port {
        Number(u32),
        Text(String),
    }
    match Port::deserialize(d)? {
        Port::Number(n) => Ok(n),
        Port::Text(t) => t
            .trim()
            .parse()
            .map_err(|_| de::Error::custom(format!("port {t:?} is not a number"))),
    }
}

fn duration<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
    let text = Option::<String>::deserialize(d)?;
    text.map(|t| crate::duration::parse_duration(&t).map_err(de::Error::custom))
        .transpose()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mesh_config::parse_mesh_config;
    use std::path::Path;

    #[test]
    fn the_istio_task_providers_are_read() {
        let text = "extensionProviders:\n\
            - name: sample-ext-authz-grpc\n  envoyExtAuthzGrpc:\n    service: ext-authz.foo.svc.cluster.local\n    port: \"9000\"\n\
            - name: sample-ext-authz-http\n  envoyExtAuthzHttp:\n    service: ext-authz.foo.svc.cluster.local\n    port: \"8000\"\n    \
            includeRequestHeadersInCheck: [\"x-ext-authz\"]\n    timeout: 250ms\n\
            - name: prom\n  prometheus: {}\n";
        let (config, warnings) = parse_mesh_config(Path::new("mesh.yaml"), text).unwrap();
        let p = &config.extension_providers;
        assert_eq!(p.len(), 3);
        let grpc = p[0].common().unwrap();
        assert_eq!(
            (grpc.service, grpc.port),
            ("ext-authz.foo.svc.cluster.local", 9000)
        );
        assert_eq!(grpc.timeout, DEFAULT_TIMEOUT);
        let http = p[1].envoy_ext_authz_http.as_ref().unwrap();
        assert_eq!(http.include_request_headers_in_check, ["x-ext-authz"]);
        assert_eq!(http.timeout, Some(Duration::from_millis(250)));
        assert!(p[2].common().is_none());
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        assert!(warnings[0]
            .to_string()
            .contains("extensionProviders[2].prometheus"));
    }

    #[test]
    fn istiod_refuses_what_these_refuse() {
        let cases: &[(&str, &str)] = &[
            ("- envoyExtAuthzGrpc: {service: a, port: 1}\n", "extensionProviders[0].name"),
            (
                "- name: a\n  envoyExtAuthzGrpc: {service: a, port: 1}\n- name: a\n  envoyExtAuthzGrpc: {service: a, port: 1}\n",
                "duplicate provider name",
            ),
            ("- name: a\n  envoyExtAuthzGrpc: {port: 1}\n", "service is required"),
            ("- name: a\n  envoyExtAuthzGrpc: {service: a, port: 0}\n", "[1, 65535]"),
            ("- name: a\n  envoyExtAuthzGrpc: {service: a, port: 70000}\n", "[1, 65535]"),
            (
                "- name: a\n  envoyExtAuthzGrpc: {service: a, port: 1, statusOnError: \"999\"}\n",
                "unsupported statusOnError",
            ),
            (
                "- name: a\n  envoyExtAuthzHttp: {service: a, port: 1, pathPrefix: check}\n",
                "pathPrefix must begin",
            ),
            (
                "- name: a\n  envoyExtAuthzHttp: {service: a, port: 1, headersToUpstreamOnAllow: [\"*\"]}\n",
                "envoyExtAuthzHttp.headersToUpstreamOnAllow[0]",
            ),
            ("- name: a\n  envoyExtAuthzGrpc: {service: a, port: 1, bogus: 1}\n", "bogus"),
            (
                "- name: a\n  envoyExtAuthzGrpc: {service: a, port: 1, includeRequestBodyInCheck: {}}\n",
                "maxRequestBytes must be greater than 0",
            ),
        ];
        for (providers, want) in cases {
            let text = format!("extensionProviders:\n{providers}");
            let err = parse_mesh_config(Path::new("mesh.yaml"), &text).unwrap_err();
            assert!(err.to_string().contains(want), "{providers}: {err}");
            assert!(err.to_string().contains("mesh.yaml:"), "{err}");
        }
        assert_eq!(status_on_error(None), Ok(403));
        assert_eq!(status_on_error(Some("503")), Ok(503));
    }
}
