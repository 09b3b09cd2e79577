//! What the loader does with a document's kind: read it, refuse it (it would change what
//! requests get and warden does not implement it), or pass it by (it cannot change a request:
//! a Deployment in a namespace dump). Kind names are case-sensitive, as in Kubernetes.

use crate::suggest::closest;

/// The kinds warden reads, their API groups and the versions accepted for them.
pub(crate) const READ_KINDS: &[(&str, &str, &[&str])] = &[
    ("Gateway", "networking.istio.io", ISTIO_NET_VERSIONS),
    ("VirtualService", "networking.istio.io", ISTIO_NET_VERSIONS),
    ("ServiceEntry", "networking.istio.io", ISTIO_NET_VERSIONS),
    ("DestinationRule", "networking.istio.io", ISTIO_NET_VERSIONS),
    ("EnvoyFilter", "networking.istio.io", &["v1alpha3"]),
    (
        "AuthorizationPolicy",
        "security.istio.io",
        &["v1beta1", "v1"],
    ),
    (
        "PeerAuthentication",
        "security.istio.io",
        &["v1beta1", "v1"],
    ),
    (
        "RequestAuthentication",
        "security.istio.io",
        &["v1beta1", "v1"],
    ),
    ("Sidecar", "networking.istio.io", ISTIO_NET_VERSIONS),
    ("WorkloadEntry", "networking.istio.io", ISTIO_NET_VERSIONS),
    // The warden group's versions are owned by the RateLimitPolicy kind; any is accepted here.
    ("RateLimitPolicy", "warden.dev", &[]),
    // Kubernetes objects read as the mesh's service registry.
    ("Service", "", &["v1"]),
    ("Endpoints", "", &["v1"]),
    ("Pod", "", &["v1"]),
    ("EndpointSlice", "discovery.k8s.io", &["v1"]),
];

const ISTIO_NET_VERSIONS: &[&str] = &["v1alpha3", "v1beta1", "v1"];

/// Kinds that change what a request gets and that warden does not implement: loading without
/// them would serve requests differently from Istio, so they are errors unless skipped
/// explicitly. `Telemetry` is here only for the fields in [`TELEMETRY_BEHAVIOUR_FIELDS`].
const REFUSED_KINDS: &[(&str, &str, &str)] = &[
    (
        "WasmPlugin",
        "extensions.istio.io",
        "Wasm plugins are not supported by warden; without the plugin requests would not get \
         what it does to them",
    ),
    (
        "Telemetry",
        "telemetry.istio.io",
        "a Telemetry field that changes what upstreams get is not implemented by warden",
    ),
];

/// `Telemetry` fields that change what upstreams get and that warden does not read (`tracing`
/// is read: `telemetry_tracing`; `metrics` and `accessLogging` change nothing upstream).
const TELEMETRY_BEHAVIOUR_FIELDS: &[&str] = &[];

/// The first field of a `Telemetry` spec that changes what upstreams get: a Telemetry without
/// one cannot change a request's outcome, and is passed by like someone else's object.
pub(crate) fn telemetry_behaviour_field(spec: &serde_json::Value) -> Option<&'static str> {
    TELEMETRY_BEHAVIOUR_FIELDS
        .iter()
        .copied()
        .find(|f| spec.get(*f).is_some())
}

/// Istio kinds that cannot change a request's outcome: passed by like someone else's object.
const ISTIO_IGNORED_KINDS: &[(&str, &str)] = &[
    ("ProxyConfig", "networking.istio.io"),
    ("WorkloadGroup", "networking.istio.io"),
];

/// Groups whose kinds are all known here: an unknown kind in one is a mistake.
const OWN_GROUPS: &[&str] = &[
    "networking.istio.io",
    "security.istio.io",
    "telemetry.istio.io",
    "extensions.istio.io",
    "warden.dev",
];

/// The Kubernetes Gateway API's groups (standard and experimental channels).
const GATEWAY_API_GROUPS: &[&str] = crate::gateway_api::GROUPS;

/// What to do with a document of `kind` in API group `group`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum KindVerdict {
    /// A kind warden reads (its apiVersion is checked next).
    Read,
    /// A kind warden refuses: an error, unless the skip list names it.
    Refused { why: String },
    /// A kind that cannot change what a request gets: one warning per kind.
    Ignored,
    /// A kind no one defines: an error.
    Unknown { why: String },
}

/// Decide about a document's kind. `kind` is non-empty.
pub(crate) fn classify(kind: &str, group: &str) -> KindVerdict {
    if GATEWAY_API_GROUPS.contains(&group) {
        if crate::gateway_api::READ_KINDS
            .iter()
            .any(|(k, _)| *k == kind)
        {
            return KindVerdict::Read;
        }
        return KindVerdict::Refused {
            why: format!(
                "{kind} of the Kubernetes Gateway API ({group}) is not supported by warden yet \
                 (supported: {})",
                crate::gateway_api::READ_KINDS
                    .iter()
                    .map(|(k, _)| *k)
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        };
    }
    // Only a Namespace's labels are read (Gateway listeners select route namespaces by them).
    if READ_KINDS.iter().any(|(k, _, _)| *k == kind) || (kind == "Namespace" && group.is_empty()) {
        return KindVerdict::Read;
    }
    if let Some((_, _, why)) = REFUSED_KINDS
        .iter()
        .find(|(k, g, _)| *k == kind && *g == group)
    {
        return KindVerdict::Refused {
            why: (*why).to_owned(),
        };
    }
    if ISTIO_IGNORED_KINDS.contains(&(kind, group)) {
        return KindVerdict::Ignored;
    }
    // A known kind spelt with other case: Kubernetes would refuse it as an unknown kind.
    if let Some(known) = known_kinds().find(|k| k.eq_ignore_ascii_case(kind)) {
        return KindVerdict::Unknown {
            why: format!("unknown kind {kind:?}; kinds are case-sensitive: did you mean {known}?"),
        };
    }
    let same_group: Vec<&str> = known_kinds_in(group).collect();
    if OWN_GROUPS.contains(&group) {
        let hint = match closest(kind, same_group.iter().copied()) {
            Some(k) => format!("did you mean {k}?"),
            None => format!("known kinds of {group}: {}", same_group.join(", ")),
        };
        return KindVerdict::Unknown {
            why: format!("unknown kind {kind:?} in {group}; {hint}"),
        };
    }
    // Someone else's kind, unless it is one letter away from one warden reads in that group
    // (`Servce`): skipping that one would drop what the user meant to configure.
    if let Some(k) = same_group
        .iter()
        .find(|k| strsim::damerau_levenshtein(kind, k) == 1)
    {
        return KindVerdict::Unknown {
            why: format!("unknown kind {kind:?}; did you mean {k}?"),
        };
    }
    KindVerdict::Ignored
}

/// Every kind name this module knows (read, refused, ignored).
fn known_kinds() -> impl Iterator<Item = &'static str> {
    READ_KINDS
        .iter()
        .map(|(k, _, _)| *k)
        .chain(REFUSED_KINDS.iter().map(|(k, _, _)| *k))
        .chain(ISTIO_IGNORED_KINDS.iter().map(|(k, _)| *k))
}

/// The kinds this module knows in `group`.
fn known_kinds_in(group: &str) -> impl Iterator<Item = &'static str> + '_ {
    READ_KINDS
        .iter()
        .filter(move |(_, g, _)| *g == group)
        .map(|(k, _, _)| *k)
        .chain(
            REFUSED_KINDS
                .iter()
                .filter(move |(_, g, _)| *g == group)
                .map(|(k, _, _)| *k),
        )
        .chain(
            ISTIO_IGNORED_KINDS
                .iter()
                .filter(move |(_, g)| *g == group)
                .map(|(k, _)| *k),
        )
}

/// Whether the skip list entry `entry` (`Kind` or `Kind.group`, as `kubectl` names resources)
/// names documents of `kind` in `group`.
pub(crate) fn skip_matches(entry: &str, kind: &str, group: &str) -> bool {
    entry == kind || entry.strip_prefix(kind).and_then(|r| r.strip_prefix('.')) == Some(group)
}

/// Check one entry of a skip list (`--skip-kind`): it must name a kind warden refuses, so a
/// typo does not silently skip nothing. Returns the entry's error.
pub fn check_skip_kind(entry: &str) -> Result<(), String> {
    let (kind, group) = entry.split_once('.').unwrap_or((entry, ""));
    let refused = REFUSED_KINDS
        .iter()
        .any(|(k, g, _)| *k == kind && (group.is_empty() || *g == group))
        || (GATEWAY_API_GROUPS.contains(&group) && !kind.is_empty())
        || (group.is_empty() && GATEWAY_API_KINDS.contains(&kind));
    if refused {
        return Ok(());
    }
    let names: Vec<&str> = REFUSED_KINDS
        .iter()
        .map(|(k, _, _)| *k)
        .chain(GATEWAY_API_KINDS.iter().copied())
        .collect();
    let hint = match closest(kind, names.iter().copied())
        .or_else(|| names.iter().copied().find(|n| n.eq_ignore_ascii_case(kind)))
    {
        Some(k) => format!("; did you mean {k}?"),
        None => String::new(),
    };
    Err(format!(
        "{entry:?} is not a kind warden refuses (refused: {}, and the Gateway API's kinds){hint}",
        REFUSED_KINDS
            .iter()
            .map(|(k, _, _)| *k)
            .collect::<Vec<_>>()
            .join(", ")
    ))
}

/// The Gateway API's kinds, for skip-list entries written without their group.
const GATEWAY_API_KINDS: &[&str] = &[
    "GatewayClass",
    "HTTPRoute",
    "GRPCRoute",
    "TCPRoute",
    "TLSRoute",
    "UDPRoute",
    "ReferenceGrant",
    "BackendTLSPolicy",
    "ListenerSet",
];

#[cfg(test)]
mod tests {
    use super::*;

    fn verdict(kind: &str, group: &str) -> String {
        match classify(kind, group) {
            KindVerdict::Read => "read".into(),
            KindVerdict::Ignored => "ignored".into(),
            KindVerdict::Refused { why } => format!("refused: {why}"),
            KindVerdict::Unknown { why } => format!("unknown: {why}"),
        }
    }

    #[test]
    fn kinds_are_read_refused_ignored_or_unknown() {
        let cases = [
            ("VirtualService", "networking.istio.io", "read"),
            ("Service", "", "read"),
            ("RequestAuthentication", "security.istio.io", "read"),
            ("WasmPlugin", "extensions.istio.io", "refused: Wasm"),
            ("Telemetry", "telemetry.istio.io", "refused: a Telemetry field"),
            ("HTTPRoute", "gateway.networking.k8s.io", "read"),
            ("Gateway", "gateway.networking.k8s.io", "read"),
            ("ReferenceGrant", "gateway.networking.k8s.io", "read"),
            (
                "UDPRoute",
                "gateway.networking.k8s.io",
                "refused: UDPRoute of the Kubernetes Gateway API (gateway.networking.k8s.io) \
                 is not supported by warden yet",
            ),
            ("Namespace", "", "read"),
            ("Deployment", "apps", "ignored"),
            ("ConfigMap", "", "ignored"),
            ("ServiceAccount", "", "ignored"),
            ("Node", "", "ignored"),
            ("Secret", "", "ignored"),
            ("ProxyConfig", "networking.istio.io", "ignored"),
            (
                "virtualservice",
                "networking.istio.io",
                "unknown: unknown kind \"virtualservice\"; kinds are case-sensitive: did you \
                 mean VirtualService?",
            ),
            ("service", "", "unknown: unknown kind \"service\"; kinds are case-sensitive: did you mean Service?"),
            (
                "VirtualSevice",
                "networking.istio.io",
                "unknown: unknown kind \"VirtualSevice\" in networking.istio.io; did you mean \
                 VirtualService?",
            ),
            ("Bar", "warden.dev", "unknown: unknown kind \"Bar\" in warden.dev; known kinds of warden.dev: RateLimitPolicy"),
            ("Servce", "", "unknown: unknown kind \"Servce\"; did you mean Service?"),
        ];
        for (kind, group, want) in cases {
            let got = verdict(kind, group);
            assert!(got.starts_with(want), "{kind} ({group}): {got}");
        }
    }

    #[test]
    fn telemetry_is_read_for_tracing_metrics_and_access_logging() {
        let cases = [
            (
                serde_json::json!({"tracing": [{"randomSamplingPercentage": 0}]}),
                None,
            ),
            (
                serde_json::json!({"accessLogging": [{}], "metrics": [{}]}),
                None,
            ),
            (serde_json::json!(null), None),
        ];
        for (spec, want) in cases {
            assert_eq!(telemetry_behaviour_field(&spec), want, "{spec}");
        }
    }

    #[test]
    fn skip_entries_name_a_kind_or_kind_and_group() {
        assert!(skip_matches(
            "HTTPRoute",
            "HTTPRoute",
            "gateway.networking.k8s.io"
        ));
        assert!(skip_matches(
            "Gateway.gateway.networking.k8s.io",
            "Gateway",
            "gateway.networking.k8s.io"
        ));
        assert!(!skip_matches(
            "Gateway.gateway.networking.k8s.io",
            "Gateway",
            "networking.istio.io"
        ));
        assert!(!skip_matches(
            "HTTPRoute",
            "GRPCRoute",
            "gateway.networking.k8s.io"
        ));
        for ok in [
            "WasmPlugin",
            "Telemetry",
            "HTTPRoute",
            "Gateway.gateway.networking.k8s.io",
            "WasmPlugin.extensions.istio.io",
        ] {
            assert_eq!(check_skip_kind(ok), Ok(()), "{ok}");
        }
        let err = check_skip_kind("WasmPlugn").unwrap_err();
        assert!(err.ends_with("did you mean WasmPlugin?"), "{err}");
        let err = check_skip_kind("wasmplugin").unwrap_err();
        assert!(err.ends_with("did you mean WasmPlugin?"), "{err}");
        assert!(check_skip_kind("RequestAuthentication").is_err());
        assert!(check_skip_kind("VirtualService").is_err());
    }
}
