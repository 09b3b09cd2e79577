//! Istio's pod annotations and which part of warden acts on each: `warden inject` (capture
//! rules, probes, the sidecar's image, resources and readiness) or the running proxy
//! (`proxy.istio.io/config`, read from the downward-API files). An annotation under one of
//! Istio's prefixes that neither acts on is reported by both (a warning at the proxy's start,
//! a note from `warden inject`), never dropped silently.

use std::collections::BTreeMap;

/// Who acts on an annotation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReadBy {
    Inject,
    Proxy,
}

const KNOWN: &[(&str, ReadBy)] = &[
    ("sidecar.istio.io/inject", ReadBy::Inject),
    ("sidecar.istio.io/status", ReadBy::Inject),
    ("sidecar.istio.io/interceptionMode", ReadBy::Inject),
    ("sidecar.istio.io/rewriteAppHTTPProbers", ReadBy::Inject),
    ("sidecar.istio.io/proxyImage", ReadBy::Inject),
    ("sidecar.istio.io/proxyCPU", ReadBy::Inject),
    ("sidecar.istio.io/proxyMemory", ReadBy::Inject),
    ("sidecar.istio.io/proxyCPULimit", ReadBy::Inject),
    ("sidecar.istio.io/proxyMemoryLimit", ReadBy::Inject),
    ("status.sidecar.istio.io/port", ReadBy::Inject),
    (
        "readiness.status.sidecar.istio.io/initialDelaySeconds",
        ReadBy::Inject,
    ),
    (
        "readiness.status.sidecar.istio.io/periodSeconds",
        ReadBy::Inject,
    ),
    (
        "readiness.status.sidecar.istio.io/failureThreshold",
        ReadBy::Inject,
    ),
    (
        "traffic.sidecar.istio.io/includeInboundPorts",
        ReadBy::Inject,
    ),
    (
        "traffic.sidecar.istio.io/excludeInboundPorts",
        ReadBy::Inject,
    ),
    (
        "traffic.sidecar.istio.io/includeOutboundIPRanges",
        ReadBy::Inject,
    ),
    (
        "traffic.sidecar.istio.io/excludeOutboundIPRanges",
        ReadBy::Inject,
    ),
    (
        "traffic.sidecar.istio.io/excludeOutboundPorts",
        ReadBy::Inject,
    ),
    // Refused by inject (an error naming the workload), so never ignored.
    (
        "traffic.sidecar.istio.io/includeOutboundPorts",
        ReadBy::Inject,
    ),
    (
        "traffic.sidecar.istio.io/kubevirtInterfaces",
        ReadBy::Inject,
    ),
    ("proxy.istio.io/config", ReadBy::Proxy),
];

/// The prefixes of Istio's sidecar and proxy annotations.
const PREFIXES: &[&str] = &[
    "sidecar.istio.io/",
    "proxy.istio.io/",
    "traffic.sidecar.istio.io/",
    "status.sidecar.istio.io/",
    "readiness.status.sidecar.istio.io/",
];

/// Who acts on `annotation`; `None` for one of Istio's that nothing in warden reads, and for
/// annotations that are not Istio's sidecar annotations at all (see [`is_istio`]).
pub fn read_by(annotation: &str) -> Option<ReadBy> {
    KNOWN
        .iter()
        .find(|(name, _)| *name == annotation)
        .map(|(_, by)| *by)
}

/// Whether `annotation` is one of Istio's sidecar or proxy annotations.
pub fn is_istio(annotation: &str) -> bool {
    PREFIXES.iter().any(|p| annotation.starts_with(p))
}

/// The Istio annotations of `annotations` that warden does not act on, in name order.
pub fn unused(annotations: &BTreeMap<String, String>) -> Vec<&str> {
    annotations
        .keys()
        .map(String::as_str)
        .filter(|k| is_istio(k) && read_by(k).is_none())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn who_reads_what() {
        let cases = [
            ("proxy.istio.io/config", Some(ReadBy::Proxy)),
            (
                "traffic.sidecar.istio.io/excludeOutboundPorts",
                Some(ReadBy::Inject),
            ),
            (
                "readiness.status.sidecar.istio.io/periodSeconds",
                Some(ReadBy::Inject),
            ),
            ("sidecar.istio.io/statsInclusionPrefixes", None),
            ("app.kubernetes.io/name", None),
        ];
        for (name, want) in cases {
            assert_eq!(read_by(name), want, "{name}");
        }
    }

    #[test]
    fn the_unused_ones_are_istios_only() {
        let annotations: BTreeMap<String, String> = [
            "sidecar.istio.io/userVolume",
            "sidecar.istio.io/proxyCPU",
            "proxy.istio.io/overrides",
            "prometheus.io/scrape",
            "kubectl.kubernetes.io/default-container",
            "readiness.status.sidecar.istio.io/applicationPorts",
        ]
        .iter()
        .map(|k| (k.to_string(), String::new()))
        .collect();
        assert_eq!(
            unused(&annotations),
            [
                "proxy.istio.io/overrides",
                "readiness.status.sidecar.istio.io/applicationPorts",
                "sidecar.istio.io/userVolume",
            ]
        );
    }
}
