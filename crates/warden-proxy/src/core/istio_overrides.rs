//! The Telemetry API's `metrics` for one proxy: which of Istio's standard metrics are off and
//! which labels are removed, for client reporting (a gateway, a sidecar's outbound side) or
//! server reporting (a sidecar's inbound side). Istio's order: the root namespace's
//! Telemetries, then the proxy's namespace's without a selector, then those whose selector
//! picks the proxy; later overrides win. Computed once per edge, never per request.
//!
//! Providers as istiod's `mergeMetrics` reads them: the mesh config's
//! `defaultProviders.metrics` is the bottom layer, and the last Telemetry that names providers
//! replaces the list; when `prometheus` is not in the final list, no metric is written. An
//! entry without providers inherits the list above it, and its overrides count only when that
//! list has `prometheus`.

use crate::core::istio_metrics::{tag_bit, Metric};
use std::collections::BTreeMap;
use warden_config::document::Doc;
use warden_config::kinds::telemetry::{IstioMetric, TagOperation, Telemetry};

/// Istio's default root namespace (MeshConfig `rootNamespace`).
pub const ROOT_NAMESPACE: &str = "istio-system";

/// The [`Metric`] bits an override's metric stands for (unset: all).
fn mask(metric: Option<IstioMetric>) -> u16 {
    match metric {
        None | Some(IstioMetric::AllMetrics) => Metric::ALL,
        Some(IstioMetric::RequestCount) => Metric::REQUEST_COUNT,
        Some(IstioMetric::RequestDuration) => Metric::REQUEST_DURATION,
        Some(IstioMetric::RequestSize) => Metric::REQUEST_SIZE,
        Some(IstioMetric::ResponseSize) => Metric::RESPONSE_SIZE,
        Some(IstioMetric::TcpOpenedConnections) => Metric::TCP_OPENED,
        Some(IstioMetric::TcpClosedConnections) => Metric::TCP_CLOSED,
        Some(IstioMetric::TcpSentBytes) => Metric::TCP_SENT,
        Some(IstioMetric::TcpReceivedBytes) => Metric::TCP_RECEIVED,
        Some(IstioMetric::GrpcRequestMessages) => Metric::GRPC_REQUEST_MESSAGES,
        Some(IstioMetric::GrpcResponseMessages) => Metric::GRPC_RESPONSE_MESSAGES,
    }
}

/// The provider warden writes metrics for.
const PROMETHEUS: &str = "prometheus";

/// (metrics off, labels removed) for a proxy in `namespace` with `labels`; `mesh_default`:
/// the mesh config's default providers include `prometheus`.
pub fn overrides(
    telemetries: &[Doc<Telemetry>],
    namespace: &str,
    labels: &BTreeMap<String, String>,
    client: bool,
    mesh_default: bool,
) -> (u16, u32) {
    let selects = |t: &Doc<Telemetry>| match &t.spec.selector {
        Some(s) => s.match_labels.iter().all(|(k, v)| labels.get(k) == Some(v)),
        None => true,
    };
    let tiers = [
        |t: &Doc<Telemetry>, _: &str| {
            t.metadata.namespace_or_default() == ROOT_NAMESPACE && t.spec.selector.is_none()
        },
        |t: &Doc<Telemetry>, ns: &str| {
            t.metadata.namespace_or_default() == ns
                && ns != ROOT_NAMESPACE
                && t.spec.selector.is_none()
        },
    ];
    let mut ordered: Vec<&Doc<Telemetry>> = Vec::new();
    for tier in tiers {
        ordered.extend(telemetries.iter().filter(|t| tier(t, namespace)));
    }
    ordered.extend(telemetries.iter().filter(|t| {
        t.spec.selector.is_some() && t.metadata.namespace_or_default() == namespace && selects(t)
    }));
    let names_prometheus = |m: &warden_config::kinds::telemetry::Metrics| {
        m.providers.iter().any(|p| p.name == PROMETHEUS)
    };
    // The list the last entry naming providers leaves (else the mesh's).
    let in_scope = ordered
        .iter()
        .flat_map(|t| t.spec.metrics.iter())
        .rfind(|m| !m.providers.is_empty())
        .map_or(mesh_default, names_prometheus);
    let (mut off, mut removed) = (0u16, 0u32);
    let mut inherited = mesh_default;
    for t in &ordered {
        for m in &t.spec.metrics {
            let applies = if m.providers.is_empty() {
                inherited
            } else {
                names_prometheus(m)
            };
            inherited = applies;
            if !applies {
                continue;
            }
            for o in &m.overrides {
                let selector = o.selector.clone().unwrap_or_default();
                if !selector.mode.unwrap_or_default().covers(client) {
                    continue;
                }
                match o.disabled {
                    Some(true) => off |= mask(selector.metric),
                    Some(false) => off &= !mask(selector.metric),
                    None => {}
                }
                for (tag, t) in &o.tag_overrides {
                    let Some(bit) = tag_bit(tag) else { continue };
                    match t.operation.unwrap_or_default() {
                        TagOperation::Remove => removed |= bit,
                        TagOperation::Upsert => removed &= !bit,
                    }
                }
            }
        }
    }
    if !in_scope {
        off = Metric::ALL;
    }
    (off, removed)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(yaml: &str) -> Vec<Doc<Telemetry>> {
        warden_config::load_str("t.yaml", yaml)
            .expect("loads")
            .set
            .telemetries
    }

    const DOCS: &str = r#"apiVersion: telemetry.istio.io/v1
kind: Telemetry
metadata: {name: mesh, namespace: istio-system}
spec:
  metrics:
  - overrides:
    - match: {metric: REQUEST_SIZE}
      disabled: true
    - tagOverrides: {source_principal: {operation: REMOVE}}
---
apiVersion: telemetry.istio.io/v1
kind: Telemetry
metadata: {name: ns, namespace: bookinfo}
spec:
  metrics:
  - overrides:
    - match: {metric: REQUEST_SIZE, mode: SERVER}
      disabled: false
---
apiVersion: telemetry.istio.io/v1
kind: Telemetry
metadata: {name: reviews, namespace: bookinfo}
spec:
  selector: {matchLabels: {app: reviews}}
  metrics:
  - overrides:
    - match: {mode: CLIENT}
      disabled: true
---
apiVersion: telemetry.istio.io/v1
kind: Telemetry
metadata: {name: other, namespace: elsewhere}
spec:
  metrics:
  - providers: [{name: stackdriver}]
    overrides: [{disabled: false}]
---
apiVersion: telemetry.istio.io/v1
kind: Telemetry
metadata: {name: named, namespace: named}
spec:
  metrics:
  - providers: [{name: prometheus}]
"#;

    #[test]
    fn root_then_namespace_then_workload() {
        let docs = load(DOCS);
        let app = |a: &str| [("app".to_string(), a.to_string())].into();
        let principal = tag_bit("source_principal").expect("a tag");
        let cases = [
            // (namespace, app, client) -> (off, removed)
            ("default", "x", true, (Metric::REQUEST_SIZE, principal)),
            (
                "bookinfo",
                "ratings",
                true,
                (Metric::REQUEST_SIZE, principal),
            ),
            ("bookinfo", "ratings", false, (0, principal)),
            ("bookinfo", "reviews", true, (Metric::ALL, principal)),
            ("bookinfo", "reviews", false, (0, principal)),
            // Its namespace's providers leave prometheus out: nothing is written.
            ("elsewhere", "x", false, (Metric::ALL, principal)),
        ];
        for (ns, a, client, want) in cases {
            assert_eq!(
                overrides(&docs, ns, &app(a), client, true),
                want,
                "{ns} {a} client={client}"
            );
        }
    }

    #[test]
    fn the_mesh_default_is_the_bottom_layer() {
        let docs = load(DOCS);
        let app = |a: &str| [("app".to_string(), a.to_string())].into();
        let principal = tag_bit("source_principal").expect("a tag");
        let cases = [
            // (telemetries?, namespace, mesh default) -> (off, removed)
            (false, "default", true, (0, 0)),
            (false, "default", false, (Metric::ALL, 0)),
            // The root's entry names no provider: it inherits the mesh's (none), and its
            // overrides do not count either.
            (true, "default", false, (Metric::ALL, 0)),
            // A namespace's Telemetry naming prometheus turns it on over the mesh's default
            // (the root's overrides, which named none, still do not count).
            (true, "named", false, (0, 0)),
            (true, "named", true, (Metric::REQUEST_SIZE, principal)),
        ];
        for (with_docs, ns, mesh, want) in cases {
            let docs = if with_docs { &docs[..] } else { &[] };
            assert_eq!(
                overrides(docs, ns, &app("x"), true, mesh),
                want,
                "{ns} mesh={mesh}"
            );
        }
    }
}
