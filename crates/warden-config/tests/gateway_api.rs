//! Gateway API documents through the loader: the status condition of every refused case (a
//! route not attached, a reference not resolved, a listener not served), each with its
//! located warning, and the errors the CRDs' validation would give, located at the field.

use warden_config::load_str;

const GATEWAY: &str = "apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: gw, namespace: infra}
spec:
  gatewayClassName: istio
  listeners:
  - name: web
    port: 80
    protocol: HTTP
    hostname: \"*.example.com\"
  - name: tcp
    port: 9000
    protocol: TCP
---
apiVersion: v1
kind: Service
metadata: {name: api, namespace: infra}
spec:
  ports: [{name: http, port: 8080}]
---
apiVersion: v1
kind: Service
metadata: {name: api, namespace: other}
spec:
  ports: [{name: http, port: 8080}]
";

/// `route` loaded with [`GATEWAY`]: the status text and the warnings (`line field: message`).
fn load(route: &str) -> (String, Vec<String>) {
    let yaml = format!("{GATEWAY}---\n{route}");
    let loaded = load_str("t.yaml", &yaml).unwrap_or_else(|e| panic!("{e}"));
    let warnings = loaded
        .warnings
        .iter()
        .map(|w| {
            format!(
                "{} {}: {}",
                w.location.line.unwrap_or(0),
                w.location.field,
                w.message
            )
        })
        .collect();
    (loaded.set.gateway_api.describe_status(), warnings)
}

fn route(ns: &str, parent: &str, hostnames: &str, rule: &str) -> String {
    format!(
        "apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: r, namespace: {ns}}}
spec:
  parentRefs: [{parent}]
  hostnames: {hostnames}
  rules:
  - {rule}
"
    )
}

#[test]
fn every_refused_route_says_why_in_its_status_and_a_located_warning() {
    let ok_rule = "backendRefs: [{name: api, port: 8080}]";
    let cases = [
        (
            route("infra", "{name: gw}", "[a.example.com]", ok_rule),
            "Accepted=True (Accepted), ResolvedRefs=True (ResolvedRefs)",
            None,
        ),
        (
            route("other", "{name: gw, namespace: infra}", "[a.example.com]", ok_rule),
            "Accepted=False (NotAllowedByListeners: listener(s) web, tcp admit no HTTPRoute from namespace other)",
            Some("31 spec.parentRefs[0]: not attached to infra/gw"),
        ),
        (
            route("infra", "{name: gw}", "[a.other.com]", ok_rule),
            "Accepted=False (NoMatchingListenerHostname: hostnames [a.other.com] match no listener hostname [*.example.com])",
            Some("31 spec.parentRefs[0]"),
        ),
        (
            route("infra", "{name: nope}", "[]", ok_rule),
            "Accepted=False (NoMatchingParent: no Gateway infra/nope in the config)",
            Some("31 spec.parentRefs[0]"),
        ),
        (
            route("infra", "{name: gw, sectionName: tls}", "[]", ok_rule),
            "Accepted=False (NoMatchingParent: no listener named \"tls\")",
            None,
        ),
        (
            route("infra", "{name: gw}", "[]", "backendRefs: [{name: api, namespace: other, port: 8080}]"),
            "Accepted=True (Accepted), ResolvedRefs=False (RefNotPermitted: backendRef Service other/api is in another namespace and no ReferenceGrant there allows HTTPRoutes of infra)",
            Some("34 spec.rules: unresolved references (RefNotPermitted)"),
        ),
        (
            route("infra", "{name: gw}", "[]", "backendRefs: [{name: web, port: 8080}]"),
            "ResolvedRefs=False (BackendNotFound: backendRef web.infra.svc.cluster.local port 8080 is not in the config",
            Some("34 spec.rules: unresolved references (BackendNotFound)"),
        ),
        (
            route("infra", "{name: gw}", "[]", "backendRefs: [{name: api, port: 9999}]"),
            "ResolvedRefs=False (BackendNotFound: backendRef api.infra.svc.cluster.local port 9999",
            None,
        ),
        (
            route("infra", "{name: gw}", "[]", "backendRefs: [{group: apps, kind: Deployment, name: api}]"),
            "ResolvedRefs=False (InvalidKind: backendRef apps/Deployment api is not a Service",
            None,
        ),
        (
            route("infra", "{name: gw}", "[]", "filters: [{type: ExtensionRef, extensionRef: {group: example.com, kind: Filter, name: f}}]"),
            "Accepted=False (UnsupportedValue: filter type ExtensionRef (spec.rules[0].filters[0]) is not supported",
            None,
        ),
    ];
    for (yaml, want, warning) in cases {
        let (status, warnings) = load(&yaml);
        assert!(status.contains(want), "want {want}\n{status}");
        if let Some(w) = warning {
            assert!(
                warnings.iter().any(|x| x.starts_with(w)),
                "want {w}: {warnings:#?}"
            );
        }
    }
}

#[test]
fn listeners_that_cannot_be_served_say_why() {
    let yaml = "apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: gw, namespace: infra}
spec:
  gatewayClassName: istio
  listeners:
  - {name: udp, port: 53, protocol: UDP}
  - {name: http, port: 80, protocol: HTTP}
  - {name: tcp, port: 80, protocol: TCP}
  - {name: a, port: 8080, protocol: HTTP, hostname: a.example.com}
  - {name: a2, port: 8080, protocol: HTTP, hostname: a.example.com}
  - name: other-secret
    port: 443
    protocol: HTTPS
    hostname: s.example.com
    tls: {certificateRefs: [{name: cert, namespace: certs}]}
  - name: configmap
    port: 443
    protocol: HTTPS
    hostname: c.example.com
    tls: {certificateRefs: [{kind: ConfigMap, name: cert}]}
  - name: kinds
    port: 9000
    protocol: TCP
    allowedRoutes: {kinds: [{kind: HTTPRoute}]}
";
    let loaded = load_str("t.yaml", yaml).unwrap_or_else(|e| panic!("{e}"));
    let status = loaded.set.gateway_api.describe_status();
    let want = [
        "listener udp (port 53 UDP, 0 route(s)): Accepted=False (UnsupportedProtocol",
        "listener http (port 80 HTTP, 0 route(s)): Accepted=True (Accepted), ResolvedRefs=True (ResolvedRefs), Conflicted=True (ProtocolConflict: port 80 is also TCP listener \"tcp\")",
        "listener a2 (port 8080 HTTP, 0 route(s)): Accepted=True (Accepted), ResolvedRefs=True (ResolvedRefs), Conflicted=True (HostnameConflict",
        "listener other-secret (port 443 HTTPS, 0 route(s)): Accepted=True (Accepted), ResolvedRefs=False (RefNotPermitted: Secret certs/cert needs a ReferenceGrant)",
        "listener configmap (port 443 HTTPS, 0 route(s)): Accepted=True (Accepted), ResolvedRefs=False (InvalidCertificateRef",
        "listener kinds (port 9000 TCP, 0 route(s)): Accepted=True (Accepted), ResolvedRefs=False (InvalidRouteKinds: route kinds HTTPRoute cannot attach to a TCP listener)",
        "Gateway infra/gw (t.yaml document 1): Accepted=True (Accepted), Programmed=False (Invalid: 1 of 8 listeners are served)",
    ];
    for w in want {
        assert!(status.contains(w), "want {w}\n{status}");
    }
    // Only the served listener becomes an Istio server.
    let servers: Vec<&str> = loaded.set.gateways[0]
        .spec
        .servers
        .iter()
        .filter_map(|s| s.name.as_deref())
        .collect();
    assert_eq!(servers, ["kinds"]);
}

#[test]
fn what_the_crds_refuse_is_a_located_error() {
    let yaml = format!(
        "{GATEWAY}---\n{}",
        route(
            "infra",
            "{name: gw}",
            "[]",
            "matches: [{path: {type: Exact, value: nope}}, {path: {type: RegularExpression, value: \"(\"}}, {headers: [{type: Glob, name: a, value: b}]}]
    filters: [{type: RequestRedirect, requestRedirect: {statusCode: 305}}]
    timeouts: {request: soon}",
        )
    );
    let err = load_str("t.yaml", &yaml).unwrap_err();
    let found: Vec<String> = err
        .errors
        .iter()
        .map(|p| format!("{} {}", p.location.line.unwrap_or(0), p.location.field))
        .collect();
    assert_eq!(
        found,
        [
            "34 spec.rules[0].matches[0].path.value",
            "34 spec.rules[0].matches[1].path.value",
            "34 spec.rules[0].matches[2].headers",
            "35 spec.rules[0].filters[0].requestRedirect.statusCode",
            "36 spec.rules[0].timeouts.request",
        ],
        "{err}"
    );
    // An unknown field is an error too: every field the Gateway API has is read.
    let typo = GATEWAY.replace(
        "    hostname: \"*.example.com\"",
        "    hostnme: \"*.example.com\"",
    );
    let err = load_str("t.yaml", &typo).unwrap_err().to_string();
    assert!(
        err.contains("t.yaml:10: document 1 (Gateway/gw), field spec.listeners[0].hostnme"),
        "{err}"
    );
}

/// GAMMA: a route whose parent is a Service is that Service's mesh route (no gateway), as
/// istio/istio samples/bookinfo/gateway-api/route-reviews-50-v3.yaml is under Istio.
#[test]
fn a_service_parent_makes_a_mesh_route() {
    let yaml = "apiVersion: v1
kind: Service
metadata: {name: reviews}
spec:
  ports: [{name: http, port: 9080}]
---
apiVersion: v1
kind: Service
metadata: {name: reviews-v1}
spec:
  ports: [{name: http, port: 9080}]
---
apiVersion: v1
kind: Service
metadata: {name: reviews-v3}
spec:
  ports: [{name: http, port: 9080}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata:
  name: reviews
spec:
  parentRefs:
  - group: \"\"
    kind: Service
    name: reviews
    port: 9080
  rules:
  - backendRefs:
    - name: reviews-v1
      port: 9080
      weight: 50
    - name: reviews-v3
      port: 9080
      weight: 50
";
    let loaded = load_str("t.yaml", yaml).unwrap_or_else(|e| panic!("{e}"));
    let set = &loaded.set;
    assert!(set.gateways.is_empty());
    let vs = &set.virtual_services[0];
    assert!(vs.spec.gateways.is_empty(), "a mesh route");
    assert_eq!(vs.spec.hosts, ["reviews.default.svc.cluster.local"]);
    let route = &vs.spec.http[0];
    assert_eq!(route.matches[0].port, Some(9080));
    let to: Vec<(&str, Option<u32>)> = route
        .route
        .iter()
        .map(|d| (d.destination.host.as_str(), d.weight))
        .collect();
    assert_eq!(
        to,
        [
            ("reviews-v1.default.svc.cluster.local", Some(50)),
            ("reviews-v3.default.svc.cluster.local", Some(50))
        ]
    );
    let status = set.gateway_api.describe_status();
    assert!(
        status
            .contains("parent Service reviews.default.svc.cluster.local: Accepted=True (Accepted)"),
        "{status}"
    );
}
