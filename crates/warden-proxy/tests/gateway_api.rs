//! The Kubernetes Gateway API served by a real proxy to real backends: the Gateway API's
//! user-guide examples (tests/fixtures/gateway-api, unchanged but where a test says), and
//! istio.io's ingress task in its Gateway API and Istio API forms side by side. Every backend
//! is an echo server naming itself in `x-upstream`, behind a Kubernetes Service and
//! EndpointSlice as a namespace dump would give them.

mod common;

use common::kube_dump::service;
use common::*;
use std::collections::HashMap;
use std::net::SocketAddr;

fn fixture(name: &str) -> String {
    common::kube_dump::fixture("gateway-api", name)
}

/// Listener ports of the Gateways in `yaml` made 0, so the proxy binds free ones (the only
/// change to a Gateway).
fn free_ports(yaml: &str) -> String {
    yaml.split("\n---\n")
        .map(|doc| {
            if !doc.contains("kind: Gateway\n") {
                return doc.to_string();
            }
            doc.lines()
                .map(|l| match l.trim_start().strip_prefix("port: ") {
                    Some(p) if p.parse::<u16>().is_ok() => {
                        l.replace(&format!("port: {p}"), "port: 0")
                    }
                    _ => l.to_string(),
                })
                .collect::<Vec<_>>()
                .join("\n")
        })
        .collect::<Vec<_>>()
        .join("\n---\n")
}

/// A snippet without `parentRefs` (the user guide shows only the part it is about) attached
/// to Gateway `gw`.
fn attached(route: &str, gw: &str) -> String {
    assert!(!route.contains("parentRefs"), "{route}");
    route.replacen(
        "spec:\n",
        &format!("spec:\n  parentRefs:\n  - name: {gw}\n"),
        1,
    )
}

/// Echo backends for `names` (Services of `ns` on `port`), as YAML.
async fn backends(ns: &str, port: u16, names: &[&'static str]) -> String {
    let mut yaml = String::new();
    for name in names {
        let echo = echo_http(name).await;
        yaml.push_str(&service(ns, name, port, echo.addr));
    }
    yaml
}

/// What `warden check` prints for `yaml`.
fn check(yaml: &str) -> String {
    let loaded = warden_config::load_str("test.yaml", yaml).unwrap_or_else(|e| panic!("{e}"));
    let snap = warden_proxy::Snapshot::build(loaded, &Default::default(), None).unwrap();
    warden_proxy::runtime::check::describe(&snap)
}

/// Which backend answered, or the status when none did.
async fn who(
    c: &reqwest::Client,
    addr: SocketAddr,
    host: &str,
    path: &str,
    headers: &[(&str, &str)],
) -> String {
    let mut req = c.get(format!("http://{addr}{path}")).header("host", host);
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let resp = req.send().await.expect("request");
    match resp.headers().get("x-upstream") {
        Some(u) => u.to_str().unwrap().to_string(),
        None => resp.status().as_u16().to_string(),
    }
}

/// user-guides/http-routing: hostnames, a path prefix and a header match.
#[tokio::test]
async fn http_routing_by_host_path_and_header() {
    let yaml = format!(
        "{}\n---\n{}\n---\n{}\n{}",
        free_ports(&fixture("http-routing-gateway.yaml")),
        fixture("http-routing-foo-httproute.yaml"),
        fixture("http-routing-bar-httproute.yaml"),
        backends("default", 8080, &["foo-svc", "bar-svc", "bar-svc-canary"]).await,
    ) + &backends("default", 80, &["example-svc"]).await;
    let proxy = start(&yaml);
    let addr = addr(&proxy, 0);
    let c = client();
    let canary = [("env", "canary")];
    type Case<'a> = (&'a str, &'a str, &'a [(&'a str, &'a str)], &'a str);
    let cases: [Case; 10] = [
        ("foo.example.com", "/login", &[], "foo-svc"),
        ("foo.example.com", "/login/", &[], "foo-svc"),
        ("foo.example.com", "/login/form?x=1", &[], "foo-svc"),
        // A prefix matches whole path segments: /loginx is not below /login.
        ("foo.example.com", "/loginx", &[], "404"),
        ("foo.example.com", "/", &[], "404"),
        ("bar.example.com", "/", &canary, "bar-svc-canary"),
        (
            "bar.example.com",
            "/any/path",
            &[("env", "prod")],
            "bar-svc",
        ),
        ("bar.example.com", "/", &[], "bar-svc"),
        ("example.com", "/login", &[], "example-svc"),
        ("www.example.com", "/login", &[], "404"),
    ];
    for (host, path, headers, want) in cases {
        assert_eq!(
            who(&c, addr, host, path, headers).await,
            want,
            "{host}{path} {headers:?}"
        );
    }
}

/// user-guides/traffic-splitting: a canary by header, then 90/10 by weight.
#[tokio::test]
async fn traffic_splitting_by_header_then_by_weight() {
    let gw = free_ports(&fixture("http-routing-gateway.yaml"));
    let be = backends("default", 8080, &["foo-v1", "foo-v2"]).await;
    let by_header = attached(
        &fixture("traffic-splitting-traffic-split-1.yaml"),
        "example-gateway",
    );
    let proxy = start(&format!("{gw}\n---\n{by_header}\n{be}"));
    let addr = addr(&proxy, 0);
    let c = client();
    for _ in 0..10 {
        assert_eq!(who(&c, addr, "foo.example.com", "/", &[]).await, "foo-v1");
        // The rule with a header match takes precedence, whatever the rule order.
        assert_eq!(
            who(&c, addr, "foo.example.com", "/", &[("traffic", "test")]).await,
            "foo-v2"
        );
    }
    drop(proxy);
    let by_weight = attached(
        &fixture("traffic-splitting-traffic-split-2.yaml"),
        "example-gateway",
    );
    let proxy = start(&format!("{gw}\n---\n{by_weight}\n{be}"));
    let addr = common::addr(&proxy, 0);
    let mut seen: HashMap<String, u32> = HashMap::new();
    let n = 1000;
    for _ in 0..n {
        *seen
            .entry(who(&c, addr, "foo.example.com", "/", &[]).await)
            .or_default() += 1;
    }
    let v2 = seen.get("foo-v2").copied().unwrap_or(0);
    assert_eq!(seen.values().sum::<u32>(), n, "{seen:?}");
    // 10% of 1000: within 5 standard deviations (±47) of 100.
    assert!((53..=147).contains(&v2), "{seen:?}");
}

/// user-guides/http-redirect-rewrite: prefix and full-path redirects, prefix and host rewrites.
#[tokio::test]
async fn redirects_and_rewrites() {
    let gw = free_ports(&fixture("http-routing-gateway.yaml"));
    let yaml = format!(
        "{gw}\n---\n{}\n---\n{}\n{}",
        attached(
            &fixture("http-redirect-rewrite-httproute-redirect-prefix.yaml"),
            "example-gateway"
        ),
        attached(
            &fixture("http-redirect-rewrite-httproute-rewrite-prefix-path.yaml"),
            "example-gateway"
        ),
        backends("default", 80, &["example-svc"]).await,
    );
    let proxy = start(&yaml);
    let addr = addr(&proxy, 0);
    let c = reqwest::Client::builder()
        .no_proxy()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let get = |host: &'static str, path: &'static str| {
        c.get(format!("http://{addr}{path}"))
            .header("host", host)
            .send()
    };
    // No port in the request's Host, so none in the location (the filter sets no port).
    let cases = [
        ("/cayenne", "http://redirect.example/paprika"),
        (
            "/cayenne/pepper?hot=1",
            "http://redirect.example/paprika/pepper?hot=1",
        ),
    ];
    for (path, want) in cases {
        let resp = get("redirect.example", path).await.unwrap();
        assert_eq!(resp.status(), 302, "{path}");
        assert_eq!(resp.headers()["location"], want, "{path}");
    }
    assert_eq!(
        get("redirect.example", "/cayennes").await.unwrap().status(),
        404
    );
    let cases = [
        ("/cardamom", "/fennel"),
        ("/cardamom/", "/fennel/"),
        ("/cardamom/seed?x=1", "/fennel/seed?x=1"),
    ];
    for (path, want) in cases {
        let resp = get("rewrite.example", path).await.unwrap();
        assert_eq!(resp.status(), 200, "{path}");
        assert_eq!(resp.headers()["x-echo-path"], want, "{path}");
        assert_eq!(
            resp.headers()["x-echo-h-host"],
            "elsewhere.example",
            "{path}"
        );
    }
    drop(proxy);
    let full = format!(
        "{gw}\n---\n{}",
        attached(
            &fixture("http-redirect-rewrite-httproute-redirect-full.yaml"),
            "example-gateway"
        ),
    );
    let proxy = start(&full);
    let addr = common::addr(&proxy, 0);
    // With a port in the Host, the location keeps it.
    let resp = c
        .get(format!("http://{addr}/cayenne/pepper"))
        .header("host", "redirect.example:8080")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 302);
    assert_eq!(
        resp.headers()["location"],
        "http://redirect.example:8080/paprika"
    );
}

/// A request header added, and a request mirrored (user-guides/http-header-modifier and
/// http-request-mirroring).
#[tokio::test]
async fn header_modifier_and_mirror() {
    let gw = free_ports(&fixture("http-routing-gateway.yaml"));
    let header =
        fixture("http-request-header-add.yaml").replace("name: acme-gw", "name: example-gateway");
    let (mirror_addr, mirrored) = recording_upstream().await;
    let mirror = fixture("http-request-mirroring-httproute-mirroring.yaml")
        .replace("name: mirror-gateway", "name: example-gateway");
    let yaml = format!(
        "{gw}\n---\n{header}\n---\n{mirror}\n{}\n{}",
        backends("default", 8080, &["echo", "foo-v1"]).await,
        service("default", "foo-v2", 8080, mirror_addr),
    );
    let proxy = start(&yaml);
    let addr = addr(&proxy, 0);
    let c = client();
    let resp = c
        .get(format!("http://{addr}/add-a-request-header"))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.headers()["x-echo-h-my-header-name"], "my-header-value");
    assert_eq!(
        who(&c, addr, "mirror.example", "/copied", &[]).await,
        "foo-v1"
    );
    let copied = warden_testkit::wait_until(std::time::Duration::from_secs(5), || {
        let got = mirrored.lock().unwrap();
        got.requests.iter().any(|r| r.contains("/copied"))
    });
    assert!(
        copied,
        "the mirror got no copy: {:?}",
        mirrored.lock().unwrap().requests
    );
}

/// reference-grant.yaml: a route of `prod` may send to a Service of `backend` only once a
/// ReferenceGrant in `backend` allows it; before, its status says RefNotPermitted and its
/// requests get 500, as the spec asks.
#[tokio::test]
async fn cross_namespace_backends_need_a_reference_grant() {
    let gw = "apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: gw, namespace: infra}
spec:
  gatewayClassName: istio
  listeners:
  - {name: http, port: 0, protocol: HTTP, allowedRoutes: {namespaces: {from: All}}}
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: api, namespace: prod}
spec:
  parentRefs: [{name: gw, namespace: infra}]
  rules:
  - backendRefs: [{name: api, namespace: backend, port: 8080}]
";
    let be = backends("backend", 8080, &["api"]).await;
    let grant = fixture("reference-grant.yaml").replace(
        "kind: ReferenceGrant\nmetadata:\n  name: allow-prod-traffic\n",
        "kind: ReferenceGrant\nmetadata:\n  name: allow-prod-traffic\n  namespace: backend\n",
    );
    assert!(grant.contains("namespace: backend"), "{grant}");
    let c = client();

    let refused = start(&format!("{gw}{be}"));
    assert_eq!(who(&c, addr(&refused, 0), "any", "/", &[]).await, "500");
    let status = check(&format!("{gw}{be}"));
    assert!(
        status.contains(
            "parent infra/gw: Accepted=True (Accepted), ResolvedRefs=False (RefNotPermitted"
        ),
        "{status}"
    );
    drop(refused);

    let granted = start(&format!("{gw}{be}---\n{grant}"));
    assert_eq!(who(&c, addr(&granted, 0), "any", "/", &[]).await, "api");
}

/// A rule whose backends partly do not resolve: the share of requests that would have gone
/// to the missing Service gets 500, the rest reach the one that exists (the spec: "500 for
/// the portion of requests that would have gone to the invalid backend"); its status says
/// BackendNotFound.
#[tokio::test]
async fn an_unresolved_backend_answers_500_for_its_share() {
    let yaml = format!(
        "apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{name: gw}}
spec:
  gatewayClassName: istio
  listeners: [{{name: http, port: 0, protocol: HTTP}}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: split}}
spec:
  parentRefs: [{{name: gw}}]
  rules:
  - backendRefs:
    - {{name: api, port: 8080, weight: 3}}
    - {{name: gone, port: 8080, weight: 1}}
{}",
        backends("default", 8080, &["api"]).await
    );
    let proxy = start(&yaml);
    let c = client();
    let mut seen: HashMap<String, u32> = HashMap::new();
    let n = 400;
    for _ in 0..n {
        *seen
            .entry(who(&c, addr(&proxy, 0), "any", "/", &[]).await)
            .or_default() += 1;
    }
    let failed = seen.get("500").copied().unwrap_or(0);
    assert_eq!(
        failed + seen.get("api").copied().unwrap_or(0),
        n,
        "{seen:?}"
    );
    // 25% of 400: within 5 standard deviations (±43) of 100.
    assert!((57..=143).contains(&failed), "{seen:?}");
    let status = check(&yaml);
    assert!(
        status.contains(
            "parent default/gw: Accepted=True (Accepted), ResolvedRefs=False (BackendNotFound"
        ),
        "{status}"
    );
}

/// user-guides/cross-namespace-routing's routes on an HTTP listener (its HTTPS listener is
/// made HTTP here): only namespaces the listener's selector picks attach; a route of another
/// namespace is refused, and its status says NotAllowedByListeners.
#[tokio::test]
async fn routes_attach_from_selected_namespaces_only() {
    let gw = "apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: shared-gateway, namespace: infra-ns}
spec:
  gatewayClassName: shared-gateway-class
  listeners:
  - name: http
    hostname: foo.example.com
    protocol: HTTP
    port: 0
    allowedRoutes:
      namespaces:
        from: Selector
        selector: {matchLabels: {shared-gateway-access: \"true\"}}
";
    let outsider = "apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: private, namespace: no-external-access}
spec:
  parentRefs: [{name: shared-gateway, namespace: infra-ns}]
  rules:
  - matches: [{path: {value: /private}}]
    backendRefs: [{name: private, port: 8080}]
";
    let mut yaml = format!(
        "{gw}---\n{}\n---\n{}\n---\n{}\n---\n{outsider}",
        fixture("cross-namespace-routing-0-namespaces.yaml"),
        fixture("cross-namespace-routing-site-route.yaml"),
        fixture("cross-namespace-routing-store-route.yaml"),
    );
    yaml.push_str(&backends("site-ns", 8080, &["home", "login-v1", "login-v2"]).await);
    yaml.push_str(&backends("store-ns", 8080, &["store"]).await);
    yaml.push_str(&backends("no-external-access", 8080, &["private"]).await);
    let proxy = start(&yaml);
    let addr = addr(&proxy, 0);
    let c = client();
    assert_eq!(who(&c, addr, "foo.example.com", "/", &[]).await, "home");
    assert_eq!(
        who(&c, addr, "foo.example.com", "/store/cart", &[]).await,
        "store"
    );
    let login = who(&c, addr, "foo.example.com", "/login", &[]).await;
    assert!(login.starts_with("login-v"), "{login}");
    assert_eq!(
        who(&c, addr, "foo.example.com", "/private", &[]).await,
        "home"
    );
    assert_eq!(who(&c, addr, "bar.example.com", "/", &[]).await, "404");
    let status = check(&yaml);
    assert!(
        status.contains("parent infra-ns/shared-gateway: Accepted=False (NotAllowedByListeners: listener(s) http admit no HTTPRoute from namespace no-external-access)"),
        "{status}"
    );
    assert!(
        status.contains("listener http (port 0 HTTP, 3 route(s))"),
        "{status}"
    );
}

/// istio.io tasks/traffic-management/ingress/ingress-control, both forms (the task's YAML,
/// with port 80 made 0 and its httpbin Service as a dump gives it): the same requests get
/// the same answers.
#[tokio::test]
async fn istio_ingress_task_in_both_forms_answers_alike() {
    const ISTIO_API: &str = r#"apiVersion: networking.istio.io/v1
kind: Gateway
metadata:
  name: httpbin-gateway
spec:
  selector:
    istio: ingressgateway # use Istio default gateway implementation
  servers:
  - port:
      number: 80
      name: http
      protocol: HTTP
    hosts:
    - "httpbin.example.com"
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata:
  name: httpbin
spec:
  hosts:
  - "httpbin.example.com"
  gateways:
  - httpbin-gateway
  http:
  - match:
    - uri:
        prefix: /status
    - uri:
        prefix: /delay
    route:
    - destination:
        port:
          number: 8000
        host: httpbin
"#;
    const GATEWAY_API: &str = r#"apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata:
  name: httpbin-gateway
spec:
  gatewayClassName: istio
  listeners:
  - name: http
    hostname: "httpbin.example.com"
    port: 80
    protocol: HTTP
    allowedRoutes:
      namespaces:
        from: Same
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata:
  name: httpbin
spec:
  parentRefs:
  - name: httpbin-gateway
  hostnames: ["httpbin.example.com"]
  rules:
  - matches:
    - path:
        type: PathPrefix
        value: /status
    - path:
        type: PathPrefix
        value: /delay
    backendRefs:
    - name: httpbin
      port: 8000
"#;
    let be = backends("default", 8000, &["httpbin"]).await;
    let istio = start(&format!(
        "{}\n{be}",
        ISTIO_API.replace("number: 80\n", "number: 0\n")
    ));
    let gateway_api = start(&format!("{}\n{be}", free_ports(GATEWAY_API)));
    let c = client();
    let requests = [
        ("httpbin.example.com", "/status/200", "200"),
        ("httpbin.example.com", "/status/418", "418"),
        ("httpbin.example.com", "/delay/1", "200"),
        ("httpbin.example.com", "/headers", "404"),
        ("other.example.com", "/status/200", "404"),
    ];
    for (host, path, want) in requests {
        let mut answers = Vec::new();
        for proxy in [&istio, &gateway_api] {
            let resp = c
                .get(format!("http://{}{path}", addr(proxy, 0)))
                .header("host", host)
                .send()
                .await
                .unwrap();
            answers.push((
                resp.status().as_u16().to_string(),
                resp.headers().get("x-upstream").is_some(),
            ));
        }
        assert_eq!(
            answers[0], answers[1],
            "{host}{path}: Istio API vs Gateway API"
        );
        assert_eq!(answers[0].0, want, "{host}{path}");
    }
}

/// Policies attach to a Gateway API Gateway by its own name: Istio's AuthorizationPolicy
/// `targetRefs` (a DENY of /login/admin), and a RateLimitPolicy's (2 requests a minute per client);
/// a policy targeting another Gateway does not apply.
#[tokio::test]
async fn policies_target_a_gateway_api_gateway() {
    let policies = "---
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: no-admin, namespace: default}
spec:
  targetRefs:
  - {kind: Gateway, group: gateway.networking.k8s.io, name: example-gateway}
  action: DENY
  rules:
  - to: [{operation: {paths: [/login/admin]}}]
---
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: elsewhere, namespace: default}
spec:
  targetRefs:
  - {kind: Gateway, group: gateway.networking.k8s.io, name: another-gateway}
  action: DENY
  rules:
  - to: [{operation: {paths: [/login]}}]
---
apiVersion: warden.dev/v1alpha1
kind: RateLimitPolicy
metadata: {name: per-ip, namespace: default}
spec:
  targetRefs: [{kind: Gateway, name: example-gateway}]
  local:
    rules:
    - clientSelectors:
      - sourceCIDR: {type: Distinct, value: 0.0.0.0/0}
      limit: {requests: 3, unit: Minute}
";
    let yaml = format!(
        "{}\n---\n{}\n{}{policies}",
        free_ports(&fixture("http-routing-gateway.yaml")),
        fixture("http-routing-foo-httproute.yaml"),
        backends("default", 8080, &["foo-svc"]).await,
    );
    let proxy = start(&yaml);
    let addr = addr(&proxy, 0);
    let c = client();
    // The DENY is evaluated first and spends no token.
    assert_eq!(
        who(&c, addr, "foo.example.com", "/login/admin", &[]).await,
        "403"
    );
    assert_eq!(
        who(&c, addr, "foo.example.com", "/login", &[]).await,
        "foo-svc"
    );
    assert_eq!(
        who(&c, addr, "foo.example.com", "/login", &[]).await,
        "foo-svc"
    );
    assert_eq!(
        who(&c, addr, "foo.example.com", "/login", &[]).await,
        "foo-svc"
    );
    assert_eq!(who(&c, addr, "foo.example.com", "/login", &[]).await, "429");
}

/// `warden proxy --gateway default/a` (the label Istio puts on an auto-deployed gateway's
/// pod): of two Gateways sharing a port, only `a`'s routes are served; without it, both.
#[tokio::test]
async fn a_proxy_for_one_gateway_serves_its_routes_only() {
    let gateways = "apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: a}
spec:
  gatewayClassName: istio
  listeners: [{name: http, port: 0, protocol: HTTP}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: b}
spec:
  gatewayClassName: istio
  listeners: [{name: http, port: 0, protocol: HTTP}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: a}
spec:
  parentRefs: [{name: a}]
  hostnames: [a.example.com]
  rules: [{backendRefs: [{name: svc-a, port: 80}]}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: b}
spec:
  parentRefs: [{name: b}]
  hostnames: [b.example.com]
  rules: [{backendRefs: [{name: svc-b, port: 80}]}]
";
    let yaml = format!(
        "{gateways}{}",
        backends("default", 80, &["svc-a", "svc-b"]).await
    );
    let c = client();
    let every = start(&yaml);
    assert_eq!(
        who(&c, addr(&every, 0), "a.example.com", "/", &[]).await,
        "svc-a"
    );
    assert_eq!(
        who(&c, addr(&every, 0), "b.example.com", "/", &[]).await,
        "svc-b"
    );
    drop(every);
    let mut opts = warden_proxy::ProxyOptions::loopback(inline(&yaml));
    opts.labels.insert(
        warden_config::gateway_api::selection::GATEWAY_NAME_LABEL.into(),
        "a".into(),
    );
    let only_a = warden_proxy::Proxy::start(opts).expect("proxy starts");
    assert_eq!(
        who(&c, addr(&only_a, 0), "a.example.com", "/", &[]).await,
        "svc-a"
    );
    assert_eq!(
        who(&c, addr(&only_a, 0), "b.example.com", "/", &[]).await,
        "404"
    );
}

/// istio.io's bookinfo tasks in both forms: the Istio API's VirtualServices and
/// DestinationRule subsets of `reviews`, and the Gateway API's HTTPRoutes to the
/// `reviews-v1..3` Services (istio/istio samples/bookinfo/gateway-api). The tasks route mesh
/// traffic; an in-process proxy has no captured traffic, so both are bound to an ingress here:
/// the VirtualService by an added `gateways:` line (as istio_samples.rs does), the HTTPRoute by
/// its Service parentRef replaced with a Gateway's. Every version is an echo naming itself.
mod istio_tasks {
    use super::*;
    use warden_proxy::RunningProxy;

    const DESTINATION_RULE: &str = "apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata:
  name: reviews
spec:
  host: reviews
  subsets:
  - name: v1
    labels:
      version: v1
  - name: v2
    labels:
      version: v2
  - name: v3
    labels:
      version: v3
";

    const SERVICE_PARENT: &str = "  parentRefs:
  - group: \"\"
    kind: Service
    name: reviews
    port: 9080
";

    /// The two proxies, Istio API first, for the task's two forms.
    async fn both(vs: &str, route: &str) -> (RunningProxy, RunningProxy) {
        let (v1, v2, v3) = (
            echo_http("v1").await,
            echo_http("v2").await,
            echo_http("v3").await,
        );
        let mut se = String::from(
            "apiVersion: networking.istio.io/v1\nkind: ServiceEntry\nmetadata: {name: reviews}\nspec:\n  hosts: [reviews.default.svc.cluster.local]\n  resolution: STATIC\n  ports: [{number: 9080, name: http, protocol: HTTP}]\n  endpoints:\n",
        );
        for (i, e) in [&v1, &v2, &v3].iter().enumerate() {
            se.push_str(&format!(
                "  - {{address: {}, ports: {{http: {}}}, labels: {{app: reviews, version: v{}}}}}\n",
                e.addr.ip(),
                e.addr.port(),
                i + 1
            ));
        }
        let vs = vs.replace(
            "  hosts:\n  - reviews\n",
            "  hosts:\n  - reviews\n  gateways: [gw]\n",
        );
        assert!(vs.contains("gateways: [gw]"), "{vs}");
        let istio = start(&format!(
            "{}\n---\n{se}---\n{DESTINATION_RULE}---\n{vs}",
            gateway(&[(0, "HTTP")])
        ));
        assert!(route.contains(SERVICE_PARENT), "{route}");
        let route = route.replace(SERVICE_PARENT, "  parentRefs:\n  - name: ingress\n");
        let gateway_api = start(&format!(
            "apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{name: ingress}}
spec:
  gatewayClassName: istio
  listeners: [{{name: http, port: 0, protocol: HTTP}}]
---
{route}{}{}{}",
            service("default", "reviews-v1", 9080, v1.addr),
            service("default", "reviews-v2", 9080, v2.addr),
            service("default", "reviews-v3", 9080, v3.addr),
        ));
        (istio, gateway_api)
    }

    async fn answer(
        c: &reqwest::Client,
        p: &RunningProxy,
        path: &str,
        user: Option<&str>,
    ) -> String {
        let headers: Vec<(&str, &str)> = user.map(|u| ("end-user", u)).into_iter().collect();
        who(c, addr(p, 0), "reviews", path, &headers).await
    }

    /// tasks/traffic-management/request-routing: jason sees v2, everyone else v1.
    #[tokio::test]
    async fn request_routing() {
        let vs = "apiVersion: networking.istio.io/v1
kind: VirtualService
metadata:
  name: reviews
spec:
  hosts:
  - reviews
  http:
  - match:
    - headers:
        end-user:
          exact: jason
    route:
    - destination:
        host: reviews
        subset: v2
  - route:
    - destination:
        host: reviews
        subset: v1
";
        let route = "apiVersion: gateway.networking.k8s.io/v1
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
  - matches:
    - headers:
      - name: end-user
        value: jason
    backendRefs:
    - name: reviews-v2
      port: 9080
  - backendRefs:
    - name: reviews-v1
      port: 9080
";
        let (istio, gateway_api) = both(vs, route).await;
        let c = client();
        for (user, want) in [(Some("jason"), "v2"), (None, "v1"), (Some("mary"), "v1")] {
            for _ in 0..10 {
                let a = answer(&c, &istio, "/reviews/0", user).await;
                let b = answer(&c, &gateway_api, "/reviews/0", user).await;
                assert_eq!((a.as_str(), b.as_str()), (want, want), "{user:?}");
            }
        }
    }

    /// tasks/traffic-management/traffic-shifting (samples/bookinfo/gateway-api/
    /// route-reviews-50-v3.yaml): half to v1, half to v3, in both forms.
    #[tokio::test]
    async fn traffic_shifting() {
        let vs = "apiVersion: networking.istio.io/v1
kind: VirtualService
metadata:
  name: reviews
spec:
  hosts:
  - reviews
  http:
  - route:
    - destination:
        host: reviews
        subset: v1
      weight: 50
    - destination:
        host: reviews
        subset: v3
      weight: 50
";
        let route = "apiVersion: gateway.networking.k8s.io/v1
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
        let (istio, gateway_api) = both(vs, route).await;
        let c = client();
        for p in [&istio, &gateway_api] {
            let mut seen: HashMap<String, u32> = HashMap::new();
            for _ in 0..1000 {
                *seen.entry(answer(&c, p, "/", None).await).or_default() += 1;
            }
            let v1 = seen.get("v1").copied().unwrap_or(0);
            assert_eq!(v1 + seen.get("v3").copied().unwrap_or(0), 1000, "{seen:?}");
            // 50/50 over 1000 requests: within 5 standard deviations (±79) of 500.
            assert!((421..=579).contains(&v1), "{seen:?}");
        }
    }

    /// tasks/traffic-management/request-timeouts: a 0.5 s timeout on reviews v2; a reply that
    /// takes a second is cut at the timeout (504), a quick one passes, in both forms.
    #[tokio::test]
    async fn request_timeouts() {
        let vs = "apiVersion: networking.istio.io/v1
kind: VirtualService
metadata:
  name: reviews
spec:
  hosts:
  - reviews
  http:
  - route:
    - destination:
        host: reviews
        subset: v2
    timeout: 0.5s
";
        let route = "apiVersion: gateway.networking.k8s.io/v1
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
    - name: reviews-v2
      port: 9080
    timeouts:
      request: 500ms
";
        let (istio, gateway_api) = both(vs, route).await;
        let c = client();
        for p in [&istio, &gateway_api] {
            assert_eq!(answer(&c, p, "/reviews/0", None).await, "v2");
            assert_eq!(answer(&c, p, "/delay/1000", None).await, "504");
        }
    }
}

/// A RateLimitPolicy whose `targetRefs` name an HTTPRoute applies to that route's rules only:
/// `foo-route` gets 3 requests a minute per client, `bar-route` on the same Gateway and port
/// is not limited, and a policy naming a `foo-route` of another namespace does not apply.
#[tokio::test]
async fn a_rate_limit_policy_targets_one_httproute() {
    let policies = "---
apiVersion: warden.dev/v1alpha1
kind: RateLimitPolicy
metadata: {name: foo-per-ip, namespace: default}
spec:
  targetRefs: [{kind: HTTPRoute, group: gateway.networking.k8s.io, name: foo-route}]
  local:
    rules:
    - clientSelectors:
      - sourceCIDR: {type: Distinct, value: 0.0.0.0/0}
      limit: {requests: 3, unit: Minute}
---
apiVersion: warden.dev/v1alpha1
kind: RateLimitPolicy
metadata: {name: elsewhere, namespace: default}
spec:
  targetRefs: [{kind: HTTPRoute, name: foo-route, namespace: other}]
  local:
    rules:
    - limit: {requests: 1, unit: Minute}
";
    let yaml = format!(
        "{}\n---\n{}\n---\n{}\n{}{policies}",
        free_ports(&fixture("http-routing-gateway.yaml")),
        fixture("http-routing-foo-httproute.yaml"),
        fixture("http-routing-bar-httproute.yaml"),
        backends("default", 8080, &["foo-svc", "bar-svc", "bar-svc-canary"]).await,
    );
    let proxy = start(&yaml);
    let addr = addr(&proxy, 0);
    let c = client();
    for _ in 0..3 {
        assert_eq!(
            who(&c, addr, "foo.example.com", "/login", &[]).await,
            "foo-svc"
        );
    }
    assert_eq!(who(&c, addr, "foo.example.com", "/login", &[]).await, "429");
    for _ in 0..6 {
        assert_eq!(who(&c, addr, "bar.example.com", "/", &[]).await, "bar-svc");
    }
}
