//! Istio's per-proxy settings a user already has: the `proxy.istio.io/config` annotation
//! (a ProxyConfig in YAML or JSON) of the proxy's own pod. For a gateway that is the
//! `gatewayTopology` Istio's docs set on the ingress gateway: `numTrustedProxies` and
//! `forwardClientCertDetails` (what the gateway does with `x-forwarded-client-cert`).

use crate::document::Doc;
use crate::error::Problem;
use crate::kinds::kubernetes::Pod;
use crate::ConfigSet;
use std::collections::BTreeMap;

pub const ANNOTATION: &str = "proxy.istio.io/config";

/// Istio's `ForwardClientCertDetails` (MeshConfig ProxyConfig `gatewayTopology`): what a
/// gateway does with a request's `x-forwarded-client-cert`, as Envoy's HTTP connection manager
/// `forward_client_cert_details` of the same names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum ForwardClientCertDetails {
    /// Istio's zero value: the default (SANITIZE_SET at a gateway).
    Undefined,
    /// Never send the header on.
    Sanitize,
    /// Send a client's header on as it came when the connection is mutual TLS, else remove it.
    ForwardOnly,
    /// Mutual TLS: append this hop's element to the client's header; else remove it.
    AppendForward,
    /// Mutual TLS: replace the client's header by this hop's element; else remove it.
    SanitizeSet,
    /// Send a client's header on as it came, mutual TLS or not.
    AlwaysForwardOnly,
}

impl ForwardClientCertDetails {
    /// Istio's name.
    pub fn name(self) -> &'static str {
        match self {
            Self::Undefined => "UNDEFINED",
            Self::Sanitize => "SANITIZE",
            Self::ForwardOnly => "FORWARD_ONLY",
            Self::AppendForward => "APPEND_FORWARD",
            Self::SanitizeSet => "SANITIZE_SET",
            Self::AlwaysForwardOnly => "ALWAYS_FORWARD_ONLY",
        }
    }

    /// `None` for UNDEFINED: Istio treats it as not set.
    pub fn defined(self) -> Option<Self> {
        (self != Self::Undefined).then_some(self)
    }
}

/// A proxy's `gatewayTopology`, from its pod's annotation or the mesh config's
/// `defaultConfig`; `None`: not set there.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GatewayTopology {
    #[serde(default)]
    pub num_trusted_proxies: Option<u32>,
    #[serde(default)]
    pub forward_client_cert_details: Option<ForwardClientCertDetails>,
}

impl GatewayTopology {
    /// `self` over `defaults` field by field, as Istio merges a pod's annotation over the mesh
    /// config's `defaultConfig` (a protobuf merge of the fields set: a zero
    /// `numTrustedProxies` or UNDEFINED does not override).
    pub fn over(self, defaults: GatewayTopology) -> GatewayTopology {
        GatewayTopology {
            num_trusted_proxies: self
                .num_trusted_proxies
                .filter(|n| *n != 0)
                .or(defaults.num_trusted_proxies),
            forward_client_cert_details: self
                .forward_client_cert_details
                .and_then(ForwardClientCertDetails::defined)
                .or(defaults.forward_client_cert_details),
        }
    }
}

/// The XFCC part of Istio's ProxyConfig `proxyHeaders`, which a sidecar's inbound side takes
/// (a gateway takes `gatewayTopology` instead); `None`: not set there.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ProxyHeaders {
    #[serde(default)]
    pub forwarded_client_cert: Option<ForwardClientCertDetails>,
    #[serde(default)]
    pub set_current_client_cert_details: Option<SetCurrentClientCertDetails>,
}

/// Which client certificate details the inbound element carries (Istio: Subject, URI and DNS
/// unless set false; Cert and Chain only when set true).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SetCurrentClientCertDetails {
    #[serde(default)]
    pub subject: Option<bool>,
    #[serde(default)]
    pub cert: Option<bool>,
    #[serde(default)]
    pub chain: Option<bool>,
    #[serde(default)]
    pub dns: Option<bool>,
    #[serde(default)]
    pub uri: Option<bool>,
}

impl ProxyHeaders {
    /// `self` over `defaults` field by field (as [`GatewayTopology::over`]).
    pub fn over(self, defaults: ProxyHeaders) -> ProxyHeaders {
        let details = match (
            self.set_current_client_cert_details,
            defaults.set_current_client_cert_details,
        ) {
            (Some(a), Some(b)) => Some(SetCurrentClientCertDetails {
                subject: a.subject.or(b.subject),
                cert: a.cert.or(b.cert),
                chain: a.chain.or(b.chain),
                dns: a.dns.or(b.dns),
                uri: a.uri.or(b.uri),
            }),
            (a, b) => a.or(b),
        };
        ProxyHeaders {
            forwarded_client_cert: self
                .forwarded_client_cert
                .and_then(ForwardClientCertDetails::defined)
                .or(defaults.forwarded_client_cert),
            set_current_client_cert_details: details,
        }
    }
}

/// What a proxy takes from its pod's annotation.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct ProxyConfig {
    pub num_trusted_proxies: Option<u32>,
    pub forward_client_cert_details: Option<ForwardClientCertDetails>,
    /// `proxyHeaders.forwardedClientCert` and `setCurrentClientCertDetails`.
    pub proxy_headers: ProxyHeaders,
    /// How long SIGTERM lets requests finish (`--drain-timeout` wins).
    pub termination_drain_duration: Option<std::time::Duration>,
    /// Worker threads (`--concurrency` wins); Istio's 0 is a worker per core.
    pub concurrency: Option<usize>,
    /// `warden inject` starts the app containers once the sidecar is ready.
    pub hold_application_until_proxy_starts: Option<bool>,
    /// Top-level fields warden does not take (istiod's, tracing, ...).
    pub unused: Vec<String>,
    /// The pod it came from (`namespace/name`), for logs.
    pub source: Option<String>,
}

impl ConfigSet {
    /// The pods of `namespace` whose labels include every one of `labels`: the proxy's own.
    fn own_pods<'a>(
        &'a self,
        namespace: &'a str,
        labels: &'a BTreeMap<String, String>,
    ) -> impl Iterator<Item = &'a Doc<Pod>> + 'a {
        self.pods.iter().filter(move |p| {
            !labels.is_empty()
                && p.metadata.namespace_or_default() == namespace
                && labels
                    .iter()
                    .all(|(k, v)| p.metadata.labels.get(k) == Some(v))
        })
    }

    /// The `proxy.istio.io/config` of the first pod (in load order) of `namespace` carrying
    /// all of `labels` that has one. A value that does not parse, or a `numTrustedProxies`
    /// that is not a count, is an error naming the pod.
    // `Problem` is this crate's error everywhere; boxing it here alone would only change callers.
    #[allow(clippy::result_large_err)]
    pub fn proxy_config(
        &self,
        namespace: &str,
        labels: &BTreeMap<String, String>,
    ) -> Result<ProxyConfig, Problem> {
        let Some(pod) = self
            .own_pods(namespace, labels)
            .find(|p| p.metadata.annotations.contains_key(ANNOTATION))
        else {
            return Ok(ProxyConfig::default());
        };
        let text = &pod.metadata.annotations[ANNOTATION];
        let mut config = parse_annotation(text).map_err(|message| Problem {
            location: self.locate(pod, &format!("metadata.annotations[\"{ANNOTATION}\"]")),
            message,
            code: None,
        })?;
        config.source = Some(format!(
            "{}/{}",
            pod.metadata.namespace_or_default(),
            pod.metadata.name
        ));
        Ok(config)
    }
}

/// The ProxyConfig fields warden takes from a pod's annotation (the running proxy, or
/// `warden inject` for `holdApplicationUntilProxyStarts`); every other field is listed in
/// [`ProxyConfig::unused`] (the proxy warns about each).
const READ_FIELDS: &[&str] = &[
    "gatewayTopology",
    "proxyHeaders",
    "terminationDrainDuration",
    "concurrency",
    "holdApplicationUntilProxyStarts",
];

/// The annotation's text (ProxyConfig in YAML or JSON) as a proxy takes it; why not, when it
/// cannot be read.
pub fn parse_annotation(text: &str) -> Result<ProxyConfig, String> {
    let value: serde_json::Value = serde_saphyr::from_str(text)
        .map_err(|e| format!("{ANNOTATION} is not YAML or JSON: {e}"))?;
    if !value.is_object() && !value.is_null() {
        return Err(format!("{ANNOTATION} is not a ProxyConfig mapping"));
    }
    let trusted = value
        .get("gatewayTopology")
        .and_then(|g| g.get("numTrustedProxies"));
    let num_trusted_proxies = match trusted {
        None => None,
        Some(v) => Some(
            v.as_u64()
                .and_then(|n| u32::try_from(n).ok())
                .ok_or_else(|| {
                    format!("gatewayTopology.numTrustedProxies must be a count, not {v}")
                })?,
        ),
    };
    let forward_client_cert_details = match value
        .get("gatewayTopology")
        .and_then(|g| g.get("forwardClientCertDetails"))
    {
        None => None,
        Some(v) => Some(
            serde_json::from_value::<ForwardClientCertDetails>(v.clone()).map_err(|e| {
                format!(
                    "gatewayTopology.forwardClientCertDetails: {e} (one of SANITIZE, \
                     FORWARD_ONLY, APPEND_FORWARD, SANITIZE_SET, ALWAYS_FORWARD_ONLY)"
                )
            })?,
        ),
    };
    let proxy_headers = match value.get("proxyHeaders") {
        None => ProxyHeaders::default(),
        // Only the XFCC fields are read; the other proxyHeaders fields are not.
        Some(v) => serde_json::from_value::<ProxyHeaders>(v.clone()).map_err(|e| {
            format!(
                "proxyHeaders: {e} (forwardedClientCert is one of SANITIZE, FORWARD_ONLY, \
                 APPEND_FORWARD, SANITIZE_SET, ALWAYS_FORWARD_ONLY; setCurrentClientCertDetails \
                 holds booleans subject, cert, chain, dns, uri)"
            )
        })?,
    };
    let termination_drain_duration = match value.get("terminationDrainDuration") {
        None => None,
        Some(v) => Some(
            v.as_str()
                .ok_or_else(|| format!("terminationDrainDuration must be a duration, not {v}"))
                .and_then(|t| {
                    crate::duration::parse_duration(t)
                        .map_err(|e| format!("terminationDrainDuration: {e}"))
                })?,
        ),
    };
    let concurrency = match value.get("concurrency") {
        None => None,
        Some(v) => Some(
            v.as_u64()
                .and_then(|n| usize::try_from(n).ok())
                .ok_or_else(|| format!("concurrency must be a count, not {v}"))?,
        ),
    };
    let hold_application_until_proxy_starts = match value.get("holdApplicationUntilProxyStarts") {
        None => None,
        Some(v) => Some(v.as_bool().ok_or_else(|| {
            format!("holdApplicationUntilProxyStarts must be true or false, not {v}")
        })?),
    };
    let mut unused: Vec<String> = value
        .as_object()
        .map(|o| {
            o.keys()
                .filter(|k| !READ_FIELDS.contains(&k.as_str()))
                .cloned()
                .collect()
        })
        .unwrap_or_default();
    unused.sort();
    Ok(ProxyConfig {
        num_trusted_proxies,
        forward_client_cert_details,
        proxy_headers,
        termination_drain_duration,
        concurrency,
        hold_application_until_proxy_starts,
        unused,
        source: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_a_proxy_takes_from_the_annotation() {
        use std::time::Duration;
        let c = parse_annotation(
            "terminationDrainDuration: 45s\nconcurrency: 4\nholdApplicationUntilProxyStarts: true\ntracing: {zipkin: {address: z:9411}}\nproxyMetadata: {A: b}\n",
        )
        .unwrap();
        assert_eq!(c.termination_drain_duration, Some(Duration::from_secs(45)));
        assert_eq!(c.concurrency, Some(4));
        assert_eq!(c.hold_application_until_proxy_starts, Some(true));
        assert_eq!(c.unused, ["proxyMetadata", "tracing"]);
        let json =
            parse_annotation(r#"{"concurrency": 0, "gatewayTopology": {"numTrustedProxies": 1}}"#)
                .unwrap();
        assert_eq!(json.concurrency, Some(0), "a worker per core");
        assert_eq!(json.num_trusted_proxies, Some(1));
        assert!(json.unused.is_empty());
        for (bad, why) in [
            ("concurrency: -1", "concurrency"),
            (
                "holdApplicationUntilProxyStarts: yes please",
                "holdApplicationUntilProxyStarts",
            ),
            ("terminationDrainDuration: 5", "terminationDrainDuration"),
            ("terminationDrainDuration: soon", "terminationDrainDuration"),
            ("[1, 2]", "not a ProxyConfig"),
            ("{", "not YAML"),
        ] {
            let e = parse_annotation(bad).unwrap_err();
            assert!(e.contains(why), "{bad}: {e}");
        }
    }

    const PODS: &str = r#"
apiVersion: v1
kind: Pod
metadata:
  name: istio-ingressgateway-abc
  namespace: istio-system
  labels: {app: istio-ingressgateway, istio: ingressgateway}
  annotations:
    proxy.istio.io/config: '{"gatewayTopology" : { "numTrustedProxies": 2 } }'
status: {podIP: 10.0.0.9}
---
apiVersion: v1
kind: Pod
metadata:
  name: other
  namespace: istio-system
  labels: {app: other}
  annotations:
    proxy.istio.io/config: 'gatewayTopology: {numTrustedProxies: 7}'
"#;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn the_gateway_pods_annotation_sets_trusted_proxies() {
        let set = crate::load_str("pods.yaml", PODS).expect("loads").set;
        let mine = set
            .proxy_config("istio-system", &labels(&[("istio", "ingressgateway")]))
            .expect("valid");
        assert_eq!(mine.num_trusted_proxies, Some(2));
        assert_eq!(
            mine.source.as_deref(),
            Some("istio-system/istio-ingressgateway-abc")
        );
        let none = set
            .proxy_config("default", &labels(&[("istio", "ingressgateway")]))
            .expect("valid");
        assert_eq!(none.num_trusted_proxies, None);
    }

    #[test]
    fn the_annotation_sets_forward_client_cert_details() {
        let with = PODS.replace(
            "\"numTrustedProxies\": 2",
            "\"numTrustedProxies\": 2, \"forwardClientCertDetails\": \"APPEND_FORWARD\"",
        );
        let set = crate::load_str("pods.yaml", &with).expect("loads").set;
        let mine = set
            .proxy_config("istio-system", &labels(&[("istio", "ingressgateway")]))
            .expect("valid");
        assert_eq!(
            mine.forward_client_cert_details,
            Some(ForwardClientCertDetails::AppendForward)
        );
        let bad = PODS.replace(
            "\"numTrustedProxies\": 2",
            "\"forwardClientCertDetails\": \"APPEND\"",
        );
        let set = crate::load_str("pods.yaml", &bad).expect("loads").set;
        let err = set
            .proxy_config("istio-system", &labels(&[("istio", "ingressgateway")]))
            .unwrap_err();
        assert_eq!(err.location.object, "Pod/istio-ingressgateway-abc");
        assert!(
            err.message.contains("forwardClientCertDetails") && err.message.contains("APPEND"),
            "{}",
            err.message
        );
    }

    #[test]
    fn the_annotation_wins_field_by_field_over_the_mesh_default() {
        let mesh = GatewayTopology {
            num_trusted_proxies: Some(3),
            forward_client_cert_details: Some(ForwardClientCertDetails::ForwardOnly),
        };
        let pod = GatewayTopology {
            num_trusted_proxies: Some(1),
            forward_client_cert_details: None,
        };
        let merged = pod.over(mesh);
        assert_eq!(merged.num_trusted_proxies, Some(1));
        assert_eq!(
            merged.forward_client_cert_details,
            Some(ForwardClientCertDetails::ForwardOnly)
        );
        let zero = GatewayTopology {
            num_trusted_proxies: Some(0),
            forward_client_cert_details: Some(ForwardClientCertDetails::Undefined),
        };
        assert_eq!(zero.over(mesh), mesh);
    }

    #[test]
    fn proxy_headers_from_the_annotation_over_the_mesh_default() {
        let with = PODS.replace(
            "{ \"numTrustedProxies\": 2 } }",
            "{ \"numTrustedProxies\": 2 }, \"proxyHeaders\": {\"server\": {\"disabled\": true}, \
             \"forwardedClientCert\": \"SANITIZE_SET\", \"setCurrentClientCertDetails\": {\"dns\": false}} }",
        );
        let set = crate::load_str("pods.yaml", &with).expect("loads").set;
        let pod = set
            .proxy_config("istio-system", &labels(&[("istio", "ingressgateway")]))
            .expect("valid")
            .proxy_headers;
        assert_eq!(
            pod.forwarded_client_cert,
            Some(ForwardClientCertDetails::SanitizeSet)
        );
        let mesh = ProxyHeaders {
            forwarded_client_cert: Some(ForwardClientCertDetails::ForwardOnly),
            set_current_client_cert_details: Some(SetCurrentClientCertDetails {
                cert: Some(true),
                dns: Some(true),
                ..Default::default()
            }),
        };
        let merged = pod.over(mesh);
        assert_eq!(
            merged.forwarded_client_cert,
            Some(ForwardClientCertDetails::SanitizeSet)
        );
        let details = merged.set_current_client_cert_details.unwrap();
        assert_eq!(
            (details.cert, details.dns, details.uri),
            (Some(true), Some(false), None)
        );
        let bad = PODS.replace(
            "{ \"numTrustedProxies\": 2 } }",
            "{}, \"proxyHeaders\": {\"setCurrentClientCertDetails\": {\"dns\": \"no\"}} }",
        );
        let set = crate::load_str("pods.yaml", &bad).expect("loads").set;
        let err = set
            .proxy_config("istio-system", &labels(&[("istio", "ingressgateway")]))
            .unwrap_err();
        assert!(err.message.contains("proxyHeaders"), "{}", err.message);
    }

    #[test]
    fn a_bad_annotation_is_an_error_naming_the_pod() {
        let bad = PODS.replace("\"numTrustedProxies\": 2", "\"numTrustedProxies\": -1");
        let set = crate::load_str("pods.yaml", &bad).expect("loads").set;
        let err = set
            .proxy_config("istio-system", &labels(&[("app", "istio-ingressgateway")]))
            .unwrap_err();
        assert_eq!(err.location.object, "Pod/istio-ingressgateway-abc");
        assert!(err.message.contains("numTrustedProxies"), "{}", err.message);
    }
}
