//! Istio's per-proxy settings a user already has: the `proxy.istio.io/config` annotation
//! (a ProxyConfig in YAML or JSON) of the proxy's own pod. For a gateway that is the
//! `gatewayTopology.numTrustedProxies` Istio's docs set on the ingress gateway.

use crate::document::Doc;
use crate::error::Problem;
use crate::kinds::kubernetes::Pod;
use crate::ConfigSet;
use std::collections::BTreeMap;

pub const ANNOTATION: &str = "proxy.istio.io/config";

/// What a proxy takes from its pod's annotation.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct ProxyConfig {
    pub num_trusted_proxies: Option<u32>,
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
        let problem = |message: String| Problem {
            location: self.locate(pod, &format!("metadata.annotations[\"{ANNOTATION}\"]")),
            message,
        };
        let value: serde_json::Value = serde_saphyr::from_str(text)
            .map_err(|e| problem(format!("{ANNOTATION} is not YAML or JSON: {e}")))?;
        let trusted = value
            .get("gatewayTopology")
            .and_then(|g| g.get("numTrustedProxies"));
        let num_trusted_proxies =
            match trusted {
                None => None,
                Some(v) => Some(v.as_u64().and_then(|n| u32::try_from(n).ok()).ok_or_else(
                    || {
                        problem(format!(
                            "gatewayTopology.numTrustedProxies must be a count, not {v}"
                        ))
                    },
                )?),
            };
        Ok(ProxyConfig {
            num_trusted_proxies,
            source: Some(format!(
                "{}/{}",
                pod.metadata.namespace_or_default(),
                pod.metadata.name
            )),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
