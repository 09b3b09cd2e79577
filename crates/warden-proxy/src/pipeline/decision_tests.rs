//! The gateway's decision for a request, as a table: decode, route and the filters of a
//! compiled snapshot, with no socket. Each row is a request and what [`decide`] makes of it:
//! an answer now (`STATUS FLAG`, with the rule or header that matters), a wait (`wait
//! FILTER`), or the cluster it is forwarded to (`forward CLUSTER`).

use super::*;
use crate::core::client_cert::Modes;
use crate::core::identity::ProxyIdentity;
use crate::core::metrics::Metrics;
use crate::filters::chain::{ChainExtensions, FilterState, Flow, HttpFilter, Position};
use std::sync::atomic::AtomicBool;

const GATEWAY: &str = r#"
apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {name: gw, namespace: istio-system}
spec:
  selector: {istio: ingressgateway}
  servers:
  - port: {number: 8080, name: http, protocol: HTTP}
    hosts: ["*"]
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: internal, namespace: istio-system}
spec:
  hosts: [api.internal, v2.internal, login.internal]
  ports: [{number: 80, name: http, protocol: HTTP}]
  resolution: DNS
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: shop, namespace: istio-system}
spec:
  hosts: [shop.example]
  gateways: [gw]
  http:
  - name: exact
    match: [{uri: {exact: /exact}}]
    directResponse: {status: 200, body: {string: ok}}
  - name: v2-header
    match: [{uri: {prefix: /api}, headers: {x-version: {exact: v2}}}]
    route: [{destination: {host: v2.internal}}]
  - name: api
    match: [{uri: {prefix: /api}}]
    route: [{destination: {host: api.internal}}]
  - name: login
    match: [{uri: {exact: /login}, method: {exact: POST}}]
    route: [{destination: {host: login.internal}}]
  - name: items
    match: [{uri: {regex: "/items/[0-9]+"}}]
    directResponse: {status: 204}
  - name: old
    match: [{uri: {prefix: /old}}]
    redirect: {uri: /new, redirectCode: 301}
  - name: secure
    match: [{uri: {exact: /secure}}]
    redirect: {scheme: https}
  - name: fault
    match: [{uri: {prefix: /fault}}]
    fault: {abort: {httpStatus: 503, percentage: {value: 100}}}
    route: [{destination: {host: api.internal}}]
  - name: cors
    match: [{uri: {prefix: /cors}}]
    corsPolicy:
      allowOrigins: [{exact: "https://ok.example"}]
      allowMethods: [GET, PUT]
    route: [{destination: {host: api.internal}}]
  - name: limited
    match: [{uri: {exact: /limited}}]
    directResponse: {status: 200}
  - name: admin
    match: [{uri: {prefix: /admin}}]
    directResponse: {status: 200}
  - name: debug
    match: [{queryParams: {debug: {exact: "1"}}}]
    directResponse: {status: 299}
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: other, namespace: istio-system}
spec:
  hosts: [other.example]
  gateways: [gw]
  http:
  - name: other
    directResponse: {status: 201}
---
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: deny-admin, namespace: istio-system}
spec:
  action: DENY
  rules: [{to: [{operation: {paths: ["/admin*"]}}]}]
---
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: deny-net, namespace: istio-system}
spec:
  action: DENY
  rules: [{from: [{source: {remoteIpBlocks: [203.0.113.0/24]}}]}]
---
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: deny-header, namespace: istio-system}
spec:
  action: DENY
  rules: [{when: [{key: "request.headers[x-bad]", values: ["*"]}]}]
---
apiVersion: warden.dev/v1alpha1
kind: RateLimitPolicy
metadata: {name: limited, namespace: istio-system}
spec:
  local:
    rules:
    - clientSelectors:
      - sourceCIDR: {type: Distinct, value: 0.0.0.0/0}
        path: {type: Exact, value: /limited}
      limit: {requests: 2, unit: Minute}
"#;

const GLOBAL: &str = r#"
---
apiVersion: warden.dev/v1alpha1
kind: RateLimitPolicy
metadata: {name: global, namespace: istio-system}
spec:
  global:
    rules:
    - clientSelectors:
      - sourceCIDR: {type: Distinct, value: 0.0.0.0/0}
        path: {type: Exact, value: /exact}
      limit: {requests: 100, unit: Minute}
"#;

/// Answers 418 to a request that carries `x-teapot`, as an added filter would.
#[derive(Debug)]
struct Teapot;

impl HttpFilter for Teapot {
    fn name(&self) -> &str {
        "test.teapot"
    }

    fn on_request(
        &self,
        req: &RequestAttrs<'_>,
        _route: &Route,
        _state: &mut FilterState,
        _metrics: &Metrics,
    ) -> Flow {
        match req.header(&http::HeaderName::from_static("x-teapot")) {
            Some(_) => Flow::Reply(
                LocalReply::new(http::StatusCode::IM_A_TEAPOT, "", None).into_response(),
            ),
            None => Flow::Continue,
        }
    }
}

fn shared(yaml: &str, trusted_hops: u32, extensions: ChainExtensions) -> Shared {
    let identity = ProxyIdentity {
        namespace: "istio-system".into(),
        labels: [("istio".to_string(), "ingressgateway".to_string())].into(),
        ..ProxyIdentity::default()
    };
    let loaded = warden_config::load_str("gateway.yaml", yaml).expect("config loads");
    let snapshot =
        Snapshot::build_with(loaded, &identity, None, &extensions).expect("config compiles");
    Shared::new(
        snapshot,
        None,
        trusted_hops,
        Modes::default(),
        identity,
        extensions,
    )
}

/// A request as a client sends it: `METHOD path`, then header lines (`name: value`).
struct Req {
    peer: &'static str,
    line: &'static str,
    headers: &'static [(&'static str, &'static str)],
    framing_violation: bool,
}

const fn req(line: &'static str, headers: &'static [(&'static str, &'static str)]) -> Req {
    Req {
        peer: "10.0.0.1",
        line,
        headers,
        framing_violation: false,
    }
}

const fn from(peer: &'static str, line: &'static str) -> Req {
    Req {
        peer,
        line,
        headers: SHOP,
        framing_violation: false,
    }
}

const SHOP: &[(&str, &str)] = &[("host", "shop.example")];

fn describe(shared: &Shared, r: &Req) -> String {
    let (method, target) = r.line.split_once(' ').expect("METHOD path");
    let mut builder = Request::builder().method(method).uri(target);
    for (name, value) in r.headers {
        builder = builder.header(*name, *value);
    }
    let request = builder.body(ProxyBody::Empty).expect("request");
    let peer: IpAddr = r.peer.parse().expect("peer ip");
    let conn = ConnCtx::new(
        std::net::SocketAddr::new(peer, 40000),
        "127.0.0.1:8080".parse().expect("local"),
        8080,
        Arc::new(AtomicBool::new(r.framing_violation)),
    );
    let snapshot = shared.snapshot.load_full();
    let mut outcome = Outcome::default();
    let mut state = FilterState::new(true);
    let mut log = None;
    let decided = decide(
        request,
        None,
        &conn,
        shared,
        &snapshot,
        &mut outcome,
        &mut state,
        &mut log,
    );
    match decided {
        Decided::Now(response, _) => {
            let mut out = format!(
                "{} {}",
                response.status().as_u16(),
                state.notes.flag.map_or("-", |f| f.code())
            );
            if let Some(p) = &state.notes.policy {
                out.push_str(&format!(" policy={p}"));
            }
            for name in [header::LOCATION, header::ACCESS_CONTROL_ALLOW_ORIGIN] {
                if let Some(v) = response.headers().get(&name) {
                    out.push_str(&format!(" {name}={}", v.to_str().unwrap_or("?")));
                }
            }
            out
        }
        Decided::Later(w) => {
            let filters = snapshot.filters_for(conn.side);
            match filters.chain_names().get(w.resume) {
                Some(name) => format!("wait {name}"),
                None => match w.route.pick_cluster() {
                    Some(c) => format!("forward {}", c.cluster.name),
                    None => "forward nowhere".into(),
                },
            }
        }
    }
}

#[test]
fn the_gateway_decides_each_request_as_envoy_would() {
    let plain = shared(GATEWAY, 0, ChainExtensions::default());
    let one_hop = shared(GATEWAY, 1, ChainExtensions::default());
    let global = shared(&format!("{GATEWAY}{GLOBAL}"), 0, ChainExtensions::default());
    let teapot = shared(
        GATEWAY,
        0,
        ChainExtensions(vec![(Position::First, Arc::new(Teapot))]),
    );
    let api = "forward outbound|80||api.internal";
    let deny_admin = "403 - policy=ns[istio-system]-policy[deny-admin]-rule[0]";
    let deny_net = "403 - policy=ns[istio-system]-policy[deny-net]-rule[0]";
    #[rustfmt::skip]
    let cases: Vec<(&Shared, Req, &str)> = vec![
        // routing: exact, prefix, regex, headers, method, query, hosts
        (&plain, req("GET /exact", SHOP), "200 -"),
        (&plain, req("GET /exact?x=1", SHOP), "200 -"),
        (&plain, req("POST /exact", SHOP), "200 -"),
        (&plain, req("HEAD /exact", SHOP), "200 -"),
        (&plain, req("GET /exactly", SHOP), "404 NR"),
        (&plain, req("GET /api", SHOP), api),
        (&plain, req("GET /api/x", SHOP), api),
        (&plain, req("GET /API/x", SHOP), "404 NR"),
        (&plain, req("GET /api/x", &[("host", "shop.example"), ("x-version", "v2")]), "forward outbound|80||v2.internal"),
        (&plain, req("GET /api/x", &[("host", "shop.example"), ("x-version", "v3")]), api),
        (&plain, req("POST /login", SHOP), "forward outbound|80||login.internal"),
        (&plain, req("GET /login", SHOP), "404 NR"),
        (&plain, req("GET /items/42", SHOP), "204 -"),
        (&plain, req("GET /items/abc", SHOP), "404 NR"),
        (&plain, req("GET /anything?debug=1", SHOP), "299 -"),
        (&plain, req("GET /anything?debug=2", SHOP), "404 NR"),
        (&plain, req("GET /nothing", SHOP), "404 NR"),
        (&plain, req("GET /x", &[("host", "other.example")]), "201 -"),
        (&plain, req("GET /x", &[("host", "unknown.example")]), "404 NR"),
        (&plain, req("GET /exact", &[("host", "shop.example:8080")]), "200 -"),
        (&plain, req("GET /exact", &[("host", "SHOP.Example")]), "200 -"),
        // redirects
        (&plain, req("GET /old/page", SHOP), "301 - location=http://shop.example/new"),
        (&plain, req("GET /secure", SHOP), "301 - location=https://shop.example/secure"),
        // decode: one authority, framing
        (&plain, req("GET /exact", &[]), "400 DPE"),
        (&plain, req("GET /exact", &[("host", "shop.example"), ("host", "other.example")]), "400 DPE"),
        (&plain, Req { framing_violation: true, ..req("GET /exact", SHOP) }, "400 DPE"),
        // RBAC
        (&plain, req("GET /admin", SHOP), deny_admin),
        (&plain, req("GET /admin/users", SHOP), deny_admin),
        (&plain, req("GET /administrator", SHOP), deny_admin),
        (&plain, from("203.0.113.7", "GET /exact"), deny_net),
        (&plain, from("203.0.113.7", "GET /api/x"), deny_net),
        (&plain, req("GET /exact", &[("host", "shop.example"), ("x-forwarded-for", "203.0.113.7")]), "200 -"),
        (&one_hop, req("GET /exact", &[("host", "shop.example"), ("x-forwarded-for", "203.0.113.7")]), deny_net),
        (&plain, req("GET /exact", &[("host", "shop.example"), ("x-bad", "1")]), "403 - policy=ns[istio-system]-policy[deny-header]-rule[0]"),
        // local rate limit: 2 a minute per client on /limited; RBAC first
        (&plain, from("10.0.0.2", "GET /limited"), "200 -"),
        (&plain, from("10.0.0.2", "GET /limited"), "200 -"),
        (&plain, from("10.0.0.2", "GET /limited"), "429 RL policy=RateLimitPolicy/limited spec.local.rules[0]"),
        (&plain, from("10.0.0.3", "GET /limited"), "200 -"),
        (&plain, from("203.0.113.9", "GET /limited"), deny_net),
        (&plain, from("10.0.0.2", "GET /exact"), "200 -"),
        // CORS after RBAC; a preflight from an allowed origin is answered here
        (&plain, req("OPTIONS /cors", &[("host", "shop.example"), ("origin", "https://ok.example"), ("access-control-request-method", "PUT")]), "200 - access-control-allow-origin=https://ok.example"),
        (&plain, req("OPTIONS /cors", &[("host", "shop.example"), ("origin", "https://bad.example"), ("access-control-request-method", "PUT")]), api),
        (&plain, req("GET /cors", &[("host", "shop.example"), ("origin", "https://ok.example")]), api),
        // fault and the global limit wait; the filters before them answer first
        (&plain, req("GET /fault", SHOP), "wait envoy.filters.http.fault"),
        (&global, req("GET /exact", SHOP), "wait envoy.filters.http.ratelimit"),
        (&global, req("GET /admin", SHOP), deny_admin),
        (&global, req("GET /nothing", SHOP), "404 NR"),
        // an added filter, first in the chain
        (&teapot, req("GET /exact", &[("host", "shop.example"), ("x-teapot", "1")]), "418 -"),
        (&teapot, req("GET /admin", &[("host", "shop.example"), ("x-teapot", "1")]), "418 -"),
        (&teapot, req("GET /exact", SHOP), "200 -"),
    ];
    let mut failures = Vec::new();
    for (i, (shared, r, want)) in cases.iter().enumerate() {
        let got = describe(shared, r);
        if got != *want {
            failures.push(format!(
                "case {i} `{}` {:?}: got `{got}`, want `{want}`",
                r.line, r.headers
            ));
        }
    }
    assert!(cases.len() >= 40);
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
