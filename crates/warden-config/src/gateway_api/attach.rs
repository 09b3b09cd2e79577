//! Which listeners of a Gateway a route's `parentRef` attaches to, or why none: the parent's
//! `sectionName` and `port`, each listener's `allowedRoutes` (kinds, namespaces) and the
//! hostname intersection (`hostnames`).

use super::hostnames::intersect;
use super::kinds::{LabelSelector, Listener, ParentRef, RouteGroupKind};
use super::status::Refusal;
use std::collections::BTreeMap;

pub const GROUP: &str = "gateway.networking.k8s.io";

/// The route asking to attach.
#[derive(Debug, Clone, Copy)]
pub struct RouteInfo<'a> {
    /// `HTTPRoute`, `GRPCRoute`, `TCPRoute`, `TLSRoute`.
    pub kind: &'a str,
    pub namespace: &'a str,
    pub hostnames: &'a [String],
}

/// One listener a route attached to, with the hostnames it serves there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attached {
    pub listener: usize,
    pub hostnames: Vec<String>,
}

/// The route kinds a listener of `protocol` (and TLS `mode`) can serve.
pub fn supported_kinds(protocol: &str, passthrough: bool) -> &'static [&'static str] {
    match protocol {
        "HTTP" | "HTTPS" => &["HTTPRoute", "GRPCRoute"],
        "TLS" if passthrough => &["TLSRoute"],
        "TLS" => &["TCPRoute", "TLSRoute"],
        "TCP" => &["TCPRoute"],
        _ => &[],
    }
}

/// The kinds `listener` admits: its `allowedRoutes.kinds` that it supports, else every kind
/// it supports. The second list holds the asked kinds it cannot serve (`InvalidRouteKinds`).
pub fn admitted_kinds(listener: &Listener) -> (Vec<&'static str>, Vec<String>) {
    let passthrough = listener
        .tls
        .as_ref()
        .and_then(|t| t.mode.as_deref())
        .is_some_and(|m| m == "Passthrough");
    let supported = supported_kinds(&listener.protocol, passthrough);
    let asked: &[RouteGroupKind] = listener
        .allowed_routes
        .as_ref()
        .map_or(&[], |a| a.kinds.as_slice());
    if asked.is_empty() {
        return (supported.to_vec(), Vec::new());
    }
    let mut ok = Vec::new();
    let mut invalid = Vec::new();
    for k in asked {
        let group_ok = k.group.as_deref().is_none_or(|g| g == GROUP);
        match supported.iter().find(|s| **s == k.kind) {
            Some(s) if group_ok => ok.push(*s),
            _ => invalid.push(k.kind.clone()),
        }
    }
    (ok, invalid)
}

/// Whether a route of `route_ns` may attach to a listener of a Gateway in `gateway_ns`;
/// `labels` of a namespace (with `kubernetes.io/metadata.name` implied, as the API server
/// sets it).
pub fn namespace_allowed(
    listener: &Listener,
    gateway_ns: &str,
    route_ns: &str,
    labels: &dyn Fn(&str) -> BTreeMap<String, String>,
) -> bool {
    let ns = listener
        .allowed_routes
        .as_ref()
        .and_then(|a| a.namespaces.as_ref());
    match ns.and_then(|n| n.from.as_deref()).unwrap_or("Same") {
        "All" => true,
        "Selector" => {
            let mut l = labels(route_ns);
            l.insert("kubernetes.io/metadata.name".into(), route_ns.into());
            ns.and_then(|n| n.selector.as_ref())
                .is_some_and(|s| selector_matches(s, &l))
        }
        _ => route_ns == gateway_ns,
    }
}

/// Kubernetes label selector semantics (an empty selector selects everything).
pub fn selector_matches(s: &LabelSelector, labels: &BTreeMap<String, String>) -> bool {
    s.match_labels.iter().all(|(k, v)| labels.get(k) == Some(v))
        && s.match_expressions.iter().all(|e| {
            let v = labels.get(&e.key);
            match e.operator.as_str() {
                "In" => v.is_some_and(|v| e.values.contains(v)),
                "NotIn" => v.is_none_or(|v| !e.values.contains(v)),
                "Exists" => v.is_some(),
                "DoesNotExist" => v.is_none(),
                _ => false,
            }
        })
}

/// Attach `route` to the `listeners` of the Gateway `parent` names (in `gateway_ns`).
/// `usable[i]`: whether listener `i` is served at all (a refused listener attaches nothing).
pub fn attach(
    listeners: &[Listener],
    usable: &[bool],
    gateway_ns: &str,
    parent: &ParentRef,
    route: RouteInfo<'_>,
    labels: &dyn Fn(&str) -> BTreeMap<String, String>,
) -> Result<Vec<Attached>, Refusal> {
    let candidates: Vec<usize> = (0..listeners.len())
        .filter(|&i| {
            let l = &listeners[i];
            parent.section_name.as_deref().is_none_or(|s| s == l.name)
                && parent.port.is_none_or(|p| p == l.port)
                && usable.get(i).copied().unwrap_or(false)
        })
        .collect();
    if candidates.is_empty() {
        let what = match (&parent.section_name, parent.port) {
            (Some(s), Some(p)) => format!("no listener named {s:?} on port {p}"),
            (Some(s), None) => format!("no listener named {s:?}"),
            (None, Some(p)) => format!("no listener on port {p}"),
            (None, None) => "the Gateway has no usable listener".into(),
        };
        return Err(Refusal::NoMatchingParent(what));
    }
    let admitted: Vec<usize> = candidates
        .iter()
        .copied()
        .filter(|&i| {
            let l = &listeners[i];
            admitted_kinds(l).0.contains(&route.kind)
                && namespace_allowed(l, gateway_ns, route.namespace, labels)
        })
        .collect();
    if admitted.is_empty() {
        let names: Vec<&str> = candidates
            .iter()
            .map(|&i| listeners[i].name.as_str())
            .collect();
        return Err(Refusal::NotAllowedByListeners(format!(
            "listener(s) {} admit no {} from namespace {}",
            names.join(", "),
            route.kind,
            route.namespace
        )));
    }
    let uses_hostnames = route.kind != "TCPRoute";
    let out: Vec<Attached> = admitted
        .iter()
        .filter_map(|&i| {
            let l = &listeners[i];
            let hostnames = match uses_hostnames {
                true => intersect(l.hostname.as_deref(), route.hostnames),
                false => vec!["*".into()],
            };
            (!hostnames.is_empty()).then_some(Attached {
                listener: i,
                hostnames,
            })
        })
        .collect();
    if out.is_empty() {
        let listener_hosts: Vec<&str> = admitted
            .iter()
            .map(|&i| listeners[i].hostname.as_deref().unwrap_or("*"))
            .collect();
        return Err(Refusal::NoMatchingListenerHostname(format!(
            "hostnames [{}] match no listener hostname [{}]",
            route.hostnames.join(", "),
            listener_hosts.join(", ")
        )));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gateway_api::kinds::{AllowedRoutes, ListenerTls, RouteNamespaces};

    fn listener(name: &str, port: u16, protocol: &str, host: Option<&str>) -> Listener {
        Listener {
            name: name.into(),
            hostname: host.map(Into::into),
            port,
            protocol: protocol.into(),
            tls: None,
            allowed_routes: None,
        }
    }

    fn from(from: &str, labels: &[(&str, &str)]) -> Option<AllowedRoutes> {
        Some(AllowedRoutes {
            namespaces: Some(RouteNamespaces {
                from: Some(from.into()),
                selector: Some(LabelSelector {
                    match_labels: labels
                        .iter()
                        .map(|(k, v)| (k.to_string(), v.to_string()))
                        .collect(),
                    match_expressions: Vec::new(),
                }),
            }),
            kinds: Vec::new(),
        })
    }

    fn parent(section: Option<&str>, port: Option<u16>) -> ParentRef {
        ParentRef {
            name: "gw".into(),
            section_name: section.map(Into::into),
            port,
            ..ParentRef::default()
        }
    }

    fn outcome(r: Result<Vec<Attached>, Refusal>) -> String {
        match r {
            Ok(a) => a
                .iter()
                .map(|a| format!("{}:{}", a.listener, a.hostnames.join("|")))
                .collect::<Vec<_>>()
                .join(" "),
            Err(e) => e.reason().to_string(),
        }
    }

    #[test]
    fn parents_attach_by_section_port_kind_namespace_and_hostname() {
        let mut shared = listener("shared", 443, "HTTPS", Some("*.example.com"));
        shared.allowed_routes = from("Selector", &[("shared-gateway-access", "true")]);
        let mut all = listener("all", 8080, "HTTP", None);
        all.allowed_routes = from("All", &[]);
        let mut passthrough = listener("tls", 8443, "TLS", Some("db.example.com"));
        passthrough.tls = Some(ListenerTls {
            mode: Some("Passthrough".into()),
            ..ListenerTls::default()
        });
        let listeners = vec![
            listener("http", 80, "HTTP", None),
            shared,
            all,
            passthrough,
            listener("tcp", 9000, "TCP", None),
        ];
        let usable = vec![true; listeners.len()];
        let labels = |ns: &str| -> BTreeMap<String, String> {
            match ns {
                "site" => [("shared-gateway-access".to_string(), "true".to_string())].into(),
                _ => BTreeMap::new(),
            }
        };
        let h = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let none = h(&[]);
        let foo = h(&["foo.example.com"]);
        let other = h(&["foo.other.com"]);
        let db = h(&["db.example.com"]);
        let route = |kind, namespace, hostnames| RouteInfo {
            kind,
            namespace,
            hostnames,
        };
        let cases = [
            (
                "same namespace: http and all",
                parent(None, None),
                route("HTTPRoute", "infra", &none),
                "0:* 2:*",
            ),
            (
                "another namespace: All only",
                parent(None, None),
                route("HTTPRoute", "store", &none),
                "2:*",
            ),
            (
                "selected namespace",
                parent(Some("shared"), None),
                route("HTTPRoute", "site", &foo),
                "1:foo.example.com",
            ),
            (
                "unselected namespace",
                parent(Some("shared"), None),
                route("HTTPRoute", "store", &foo),
                "NotAllowedByListeners",
            ),
            (
                "hostnames do not intersect",
                parent(Some("shared"), None),
                route("HTTPRoute", "site", &other),
                "NoMatchingListenerHostname",
            ),
            (
                "listener hostname taken when the route has none",
                parent(Some("shared"), None),
                route("HTTPRoute", "site", &none),
                "1:*.example.com",
            ),
            (
                "no such section",
                parent(Some("nope"), None),
                route("HTTPRoute", "infra", &none),
                "NoMatchingParent",
            ),
            (
                "port selects",
                parent(None, Some(8080)),
                route("HTTPRoute", "infra", &none),
                "2:*",
            ),
            (
                "section and port disagree",
                parent(Some("http"), Some(8080)),
                route("HTTPRoute", "infra", &none),
                "NoMatchingParent",
            ),
            (
                "TCPRoute on the TCP listener only",
                parent(None, None),
                route("TCPRoute", "infra", &none),
                "4:*",
            ),
            (
                "TLSRoute on passthrough",
                parent(None, None),
                route("TLSRoute", "infra", &db),
                "3:db.example.com",
            ),
            (
                "HTTPRoute on a TCP listener",
                parent(Some("tcp"), None),
                route("HTTPRoute", "infra", &none),
                "NotAllowedByListeners",
            ),
        ];
        for (why, p, r, want) in cases {
            assert_eq!(
                outcome(attach(&listeners, &usable, "infra", &p, r, &labels)),
                want,
                "{why}"
            );
        }
        let unusable = vec![false; listeners.len()];
        assert_eq!(
            outcome(attach(
                &listeners,
                &unusable,
                "infra",
                &parent(None, None),
                route("HTTPRoute", "infra", &none),
                &labels
            )),
            "NoMatchingParent"
        );
    }

    #[test]
    fn allowed_kinds_keep_the_supported_ones() {
        let mut l = listener("http", 80, "HTTP", None);
        l.allowed_routes = Some(AllowedRoutes {
            namespaces: None,
            kinds: vec![
                RouteGroupKind {
                    group: None,
                    kind: "HTTPRoute".into(),
                },
                RouteGroupKind {
                    group: None,
                    kind: "TCPRoute".into(),
                },
            ],
        });
        assert_eq!(
            admitted_kinds(&l),
            (vec!["HTTPRoute"], vec!["TCPRoute".to_string()])
        );
    }

    #[test]
    fn label_selectors() {
        let labels: BTreeMap<String, String> = [("env".to_string(), "prod".to_string())].into();
        let expr = |op: &str, values: &[&str]| LabelSelector {
            match_labels: BTreeMap::new(),
            match_expressions: vec![crate::gateway_api::kinds::LabelSelectorRequirement {
                key: "env".into(),
                operator: op.into(),
                values: values.iter().map(|v| v.to_string()).collect(),
            }],
        };
        assert!(selector_matches(&LabelSelector::default(), &labels));
        assert!(selector_matches(&expr("In", &["prod", "dev"]), &labels));
        assert!(!selector_matches(&expr("NotIn", &["prod"]), &labels));
        assert!(selector_matches(&expr("Exists", &[]), &labels));
        assert!(!selector_matches(&expr("DoesNotExist", &[]), &labels));
    }
}
