//! Routing over real sockets: precedence, direct responses, weights, header operations,
//! forwarding headers, HTTP/2 downstream, 404.

mod common;

use common::*;
use std::collections::HashMap;
use warden_proxy::{Proxy, ProxyOptions};

fn routes_yaml(up_a: std::net::SocketAddr, up_b: std::net::SocketAddr) -> String {
    format!(
        r#"{gw}
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata:
  name: site
spec:
  hosts: ["site.test"]
  gateways: [gw]
  http:
  - name: exact-health
    match: [{{uri: {{exact: /health}}}}]
    directResponse:
      status: 333
      body: {{string: "healthy"}}
  - name: api-post
    match: [{{uri: {{prefix: /api}}, method: {{exact: POST}}}}]
    directResponse: {{status: 201}}
  - name: user-regex
    match: [{{uri: {{regex: "/users/[0-9]+"}}}}]
    directResponse:
      status: 200
      body: {{string: "user"}}
  - name: header-match
    match: [{{headers: {{x-canary: {{exact: "yes"}}}}}}]
    route: [{{destination: {{host: b.internal}}}}]
  - name: api
    match: [{{uri: {{prefix: /api}}}}]
    headers:
      request:
        set: {{x-added: "1"}}
        remove: [x-drop]
      response:
        set: {{x-route: api}}
    route: [{{destination: {{host: a.internal}}}}]
  - name: split
    match: [{{uri: {{prefix: /split}}}}]
    route:
    - {{destination: {{host: a.internal}}, weight: 80}}
    - {{destination: {{host: b.internal}}, weight: 20}}
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata:
  name: wild
spec:
  hosts: ["*.wild.test"]
  gateways: [gw]
  http:
  - directResponse:
      status: 200
      body: {{bytes: "d2lsZA=="}}
{sa}{sb}"#,
        gw = gateway(&[(0, "HTTP")]),
        sa = service_entry("a.internal", &[up_a]),
        sb = service_entry("b.internal", &[up_b]),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn routing_precedence_direct_responses_and_headers() {
    let a = echo_http("a").await;
    let b = echo_http("b").await;
    let proxy = start(&routes_yaml(a.addr, b.addr));
    let base = format!("http://{}", addr(&proxy, 0));
    let c = client();
    let get = |path: &str| c.get(format!("{base}{path}")).header("host", "site.test");

    let r = get("/health").send().await.unwrap();
    assert_eq!(r.status().as_u16(), 333);
    assert_eq!(r.headers()["content-type"], "text/plain");
    assert_eq!(r.text().await.unwrap(), "healthy");
    // A status without a standard reason phrase gets Envoy's `Unknown`.
    let head = raw(
        addr(&proxy, 0),
        b"GET /health HTTP/1.1\r\nHost: site.test\r\nConnection: close\r\n\r\n",
        std::time::Duration::from_secs(3),
    )
    .await;
    assert!(head.starts_with("HTTP/1.1 333 Unknown\r\n"), "{head}");

    // Exact beats nothing else: /healthz falls through to no route.
    assert_eq!(get("/healthz").send().await.unwrap().status(), 404);

    // Method match comes before the prefix route; a GET reaches the upstream.
    let r = c
        .post(format!("{base}/api/x"))
        .header("host", "site.test")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201);
    assert!(r.headers().get("content-type").is_none());

    let r = get("/users/42").send().await.unwrap();
    assert_eq!(r.text().await.unwrap(), "user");

    let r = get("/api/items?q=1")
        .header("x-drop", "secret")
        .header("x-forwarded-for", "9.9.9.9")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["x-upstream"], "a");
    assert_eq!(r.headers()["x-route"], "api");
    assert_eq!(r.headers()["x-echo-path"], "/api/items?q=1");
    assert_eq!(r.headers()["x-echo-h-x-added"], "1");
    assert!(r.headers().get("x-echo-h-x-drop").is_none());
    assert_eq!(r.headers()["x-echo-h-host"], "site.test");
    assert_eq!(
        r.headers()["x-echo-h-x-forwarded-for"],
        "9.9.9.9, 127.0.0.1"
    );
    assert_eq!(r.headers()["x-echo-h-x-forwarded-proto"], "http");
    // numTrustedProxies 0: the client address is the peer, not what XFF claims.
    assert_eq!(
        r.headers()["x-echo-h-x-envoy-external-address"],
        "127.0.0.1"
    );
    assert_eq!(r.headers()["x-echo-h-x-request-id"].len(), 36);

    // Header match wins over the later prefix route.
    let r = get("/api/items")
        .header("x-canary", "yes")
        .send()
        .await
        .unwrap();
    assert_eq!(r.headers()["x-upstream"], "b");

    // Wildcard host, base64 body; unknown host is 404.
    let r = c
        .get(format!("{base}/"))
        .header("host", "x.wild.test:8080")
        .send()
        .await
        .unwrap();
    assert_eq!(r.text().await.unwrap(), "wild");
    let r = c
        .get(format!("{base}/"))
        .header("host", "other.test")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404);
    assert_eq!(r.text().await.unwrap(), "");
}

/// The forwarding headers a route without header operations sends: the upstream encoder
/// writes them into the head (`Forwarding::encode`), replacing what the client claimed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forwarding_headers_without_header_operations() {
    let a = echo_http("a").await;
    let b = echo_http("b").await;
    let yaml = routes_yaml(a.addr, b.addr);
    let echoed = |r: &reqwest::Response, name: &str| -> Vec<String> {
        r.headers()
            .get_all(format!("x-echo-h-{name}"))
            .iter()
            .map(|v| v.to_str().unwrap().to_string())
            .collect()
    };
    let c = client();
    // A GET to the `header-match` route, which has no header operations.
    let to_b = |proxy: &warden_proxy::RunningProxy| {
        c.get(format!("http://{}/x", addr(proxy, 0)))
            .header("host", "site.test")
            .header("x-canary", "yes")
    };
    // The edge (numTrustedProxies 0): the peer is the client.
    let proxy = start(&yaml);
    let r = to_b(&proxy)
        .header("x-forwarded-for", "9.9.9.9")
        .header("x-forwarded-for", "8.8.8.8, 7.7.7.7")
        .header("x-forwarded-proto", "https")
        .header("x-envoy-external-address", "6.6.6.6")
        .send()
        .await
        .unwrap();
    assert_eq!(r.headers()["x-upstream"], "b");
    assert_eq!(
        echoed(&r, "x-forwarded-for"),
        ["9.9.9.9, 8.8.8.8, 7.7.7.7, 127.0.0.1"]
    );
    assert_eq!(echoed(&r, "x-forwarded-proto"), ["http"]);
    assert_eq!(echoed(&r, "x-envoy-external-address"), ["127.0.0.1"]);
    let id = echoed(&r, "x-request-id");
    assert!(id.len() == 1 && id[0].len() == 36, "{id:?}");
    let r = to_b(&proxy)
        .header("x-request-id", "from-client")
        .send()
        .await
        .unwrap();
    assert_eq!(echoed(&r, "x-request-id"), ["from-client"]);
    assert_eq!(echoed(&r, "x-forwarded-for"), ["127.0.0.1"]);

    // One trusted hop: the client is the last XFF entry, and its proto is kept.
    let mut opts = ProxyOptions::loopback(inline(&yaml));
    opts.num_trusted_proxies = Some(1);
    let trusting = Proxy::start(opts).expect("proxy starts");
    let r = to_b(&trusting)
        .header("x-forwarded-for", "9.9.9.9, 5.5.5.5")
        .header("x-forwarded-proto", "https")
        .send()
        .await
        .unwrap();
    assert_eq!(
        echoed(&r, "x-forwarded-for"),
        ["9.9.9.9, 5.5.5.5, 127.0.0.1"]
    );
    assert_eq!(echoed(&r, "x-forwarded-proto"), ["https"]);
    assert_eq!(echoed(&r, "x-envoy-external-address"), ["5.5.5.5"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn weighted_routes_split_traffic() {
    let a = echo_http("a").await;
    let b = echo_http("b").await;
    let proxy = start(&routes_yaml(a.addr, b.addr));
    let base = format!("http://{}", addr(&proxy, 0));
    let c = client();
    let mut seen: HashMap<String, u32> = HashMap::new();
    for _ in 0..400 {
        let r = c
            .get(format!("{base}/split"))
            .header("host", "site.test")
            .send()
            .await
            .unwrap();
        let up = r.headers()["x-upstream"].to_str().unwrap().to_string();
        *seen.entry(up).or_default() += 1;
    }
    let a_share = seen.get("a").copied().unwrap_or(0);
    let b_share = seen.get("b").copied().unwrap_or(0);
    assert_eq!(a_share + b_share, 400);
    // 80/20 of 400: expect 320 ± generous tolerance (p of failing is negligible).
    assert!((270..=370).contains(&a_share), "a got {a_share} of 400");
    assert!(b_share >= 30, "b got {b_share} of 400");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http2_prior_knowledge_client_is_served_and_forwarded() {
    let a = echo_http("a").await;
    let b = echo_http("b").await;
    let proxy = start(&routes_yaml(a.addr, b.addr));
    // reqwest over h2c sends :authority from the URL, so name the host there.
    let url = format!("http://site.test:{}/api/h2", addr(&proxy, 0).port());
    let c = reqwest::Client::builder()
        .no_proxy()
        .http2_prior_knowledge()
        .resolve("site.test", addr(&proxy, 0))
        .build()
        .unwrap();
    let r = c.post(&url).body("over h2").send().await.unwrap();
    // POST /api matches the direct 201 route.
    assert_eq!(r.version(), reqwest::Version::HTTP_2);
    assert_eq!(r.status(), 201);
    let r = c.get(&url).send().await.unwrap();
    assert_eq!(r.version(), reqwest::Version::HTTP_2);
    assert_eq!(r.status(), 200);
    // Upstream is HTTP/1.1 and still gets a Host header.
    assert_eq!(r.headers()["x-echo-version"], "HTTP/1.1");
    assert_eq!(
        r.headers()["x-echo-h-host"],
        format!("site.test:{}", addr(&proxy, 0).port()).as_str()
    );
}

/// The ingress gateway pod's `proxy.istio.io/config` annotation (Istio's documented way to set
/// `numTrustedProxies`) is read when `--num-trusted-proxies` is not given: with 1 trusted
/// hop, the client address is the last x-forwarded-for entry.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trusted_proxies_come_from_the_gateway_pods_annotation() {
    let up = echo_http("up").await;
    let pod = r#"
---
apiVersion: v1
kind: Pod
metadata:
  name: istio-ingressgateway-7d4f
  namespace: default
  labels: {istio: ingressgateway, app: istio-ingressgateway}
  annotations:
    proxy.istio.io/config: '{"gatewayTopology" : { "numTrustedProxies": 1 } }'
status: {podIP: 10.0.0.9}
"#;
    let yaml = format!("{}{pod}", http_config(up.addr, "", ""));
    let mut opts = warden_proxy::ProxyOptions::loopback(inline(&yaml));
    opts.labels.insert("istio".into(), "ingressgateway".into());
    let proxy = warden_proxy::Proxy::start(opts).unwrap();
    let r = client()
        .get(format!("http://{}/", addr(&proxy, 0)))
        .header("x-forwarded-for", "203.0.113.7")
        .send()
        .await
        .unwrap();
    // One trusted hop: the external address is the client the hop saw.
    assert_eq!(
        r.headers()["x-echo-h-x-envoy-external-address"],
        "203.0.113.7"
    );
    let loaded = warden_config::load_str("t.yaml", &yaml).unwrap();
    let identity = warden_proxy::ProxyIdentity {
        namespace: "default".into(),
        labels: [("istio".to_string(), "ingressgateway".to_string())].into(),
        ..Default::default()
    };
    let snap = warden_proxy::Snapshot::build(loaded, &identity, None).unwrap();
    let text = warden_proxy::runtime::check::describe(&snap);
    assert!(text.contains("trusted proxies: 1"), "{text}");

    // The mesh config's defaultConfig.gatewayTopology: 2 trusted hops, unless the pod's
    // annotation says otherwise (it wins, as Istio merges them).
    let external = |yaml: String, mesh: u32| async move {
        let mut opts = warden_proxy::ProxyOptions::loopback(inline(&yaml));
        opts.labels.insert("istio".into(), "ingressgateway".into());
        opts.mesh_defaults.gateway_topology.num_trusted_proxies = Some(mesh);
        let proxy = warden_proxy::Proxy::start(opts).unwrap();
        let r = client()
            .get(format!("http://{}/", addr(&proxy, 0)))
            .header("x-forwarded-for", "198.51.100.1, 203.0.113.7")
            .send()
            .await
            .unwrap();
        r.headers()["x-echo-h-x-envoy-external-address"]
            .to_str()
            .unwrap()
            .to_string()
    };
    assert_eq!(
        external(http_config(up.addr, "", ""), 2).await,
        "198.51.100.1"
    );
    assert_eq!(external(yaml.clone(), 2).await, "203.0.113.7");
}
