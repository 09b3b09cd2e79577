//! Which Telemetry `accessLogging` applies to this proxy, as Istio picks it: one selecting the
//! workload's labels in its namespace, else one for its namespace, else the root namespace's
//! (`istio-system`) for the mesh. Its entries turn the access log off (`disabled`) or filter
//! it by response code; with none, every request is logged (when a log is open).

use crate::core::access_log::CodeFilter;
use crate::core::identity::ProxyIdentity;
use warden_config::telemetry_access_logging::{TelemetryAccessLogging, ENVOY_PROVIDER};
use warden_config::Doc;

/// Istio's default `rootNamespace`: its Telemetry applies to the whole mesh.
pub const ROOT_NAMESPACE: &str = "istio-system";

/// What the applicable Telemetry says.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AccessLogPolicy {
    pub disabled: bool,
    pub filter: Option<CodeFilter>,
    /// `Telemetry/name` that decided, for `warden check` and `/config_dump`.
    pub from: Option<String>,
}

/// The policy for `identity` from the load's Telemetry documents.
pub fn access_log_policy(
    telemetries: &[Doc<TelemetryAccessLogging>],
    identity: &ProxyIdentity,
) -> AccessLogPolicy {
    let ns = |d: &&Doc<TelemetryAccessLogging>| d.metadata.namespace_or_default().to_string();
    let workload = telemetries.iter().find(|d| {
        ns(d) == identity.namespace
            && !d.spec.match_labels.is_empty()
            && d.spec
                .match_labels
                .iter()
                .all(|(k, v)| identity.labels.get(k) == Some(v))
    });
    let namespace = || {
        telemetries
            .iter()
            .find(|d| ns(d) == identity.namespace && d.spec.match_labels.is_empty())
    };
    let mesh = || {
        telemetries
            .iter()
            .find(|d| ns(d) == ROOT_NAMESPACE && d.spec.match_labels.is_empty())
    };
    let Some(doc) = workload.or_else(namespace).or_else(mesh) else {
        return AccessLogPolicy::default();
    };
    // Entries for the built-in provider (or the default providers, naming none).
    let entries = doc
        .spec
        .entries
        .iter()
        .filter(|e| e.providers.is_empty() || e.providers.iter().any(|p| p == ENVOY_PROVIDER));
    let mut policy = AccessLogPolicy {
        from: Some(doc.id()),
        ..AccessLogPolicy::default()
    };
    for e in entries {
        policy.disabled |= e.disabled;
        policy.filter = policy.filter.or(e.filter);
    }
    policy
}

#[cfg(test)]
mod tests {
    use super::*;
    use warden_config::telemetry_access_logging::parse_telemetry;

    fn doc(ns: &str, name: &str, spec: serde_json::Value) -> Doc<TelemetryAccessLogging> {
        Doc {
            file: "t.yaml".into(),
            index: 1,
            api_version: "telemetry.istio.io/v1".into(),
            kind: "Telemetry".into(),
            metadata: warden_config::document::Metadata {
                name: name.into(),
                namespace: Some(ns.into()),
                ..Default::default()
            },
            spec: parse_telemetry(&spec)
                .expect("valid")
                .expect("access logging")
                .0,
        }
    }

    #[test]
    fn the_most_specific_telemetry_wins() {
        let mesh = doc(
            ROOT_NAMESPACE,
            "mesh-default",
            serde_json::json!({"accessLogging": [{"providers": [{"name": "envoy"}],
                "filter": {"expression": "response.code >= 400"}}]}),
        );
        let ns_off = doc(
            "shop",
            "quiet",
            serde_json::json!({"accessLogging": [{"disabled": true}]}),
        );
        let workload = doc(
            "shop",
            "cart-errors",
            serde_json::json!({"selector": {"matchLabels": {"app": "cart"}},
                "accessLogging": [{"filter": {"expression": "response.code >= 500"}}]}),
        );
        let all = [mesh, ns_off, workload];
        let proxy = |ns: &str, app: &str| ProxyIdentity {
            namespace: ns.into(),
            labels: [("app".to_string(), app.to_string())].into(),
            ..Default::default()
        };
        let cases = [
            (
                proxy("shop", "cart"),
                false,
                Some(500),
                "Telemetry/cart-errors",
            ),
            (proxy("shop", "web"), true, None, "Telemetry/quiet"),
            (
                proxy("other", "cart"),
                false,
                Some(400),
                "Telemetry/mesh-default",
            ),
        ];
        for (identity, disabled, code, from) in cases {
            let p = access_log_policy(&all, &identity);
            assert_eq!(p.disabled, disabled, "{from}");
            assert_eq!(p.filter.map(|f| f.code), code, "{from}");
            assert_eq!(p.from.as_deref(), Some(from));
        }
        assert_eq!(
            access_log_policy(&[], &proxy("shop", "cart")),
            AccessLogPolicy::default()
        );
    }
}
