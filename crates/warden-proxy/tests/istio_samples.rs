//! Istio's published samples, loaded as written (bookinfo's `destination-rule-all.yaml` and the
//! request-routing and traffic-shifting tasks' VirtualServices), then driven over loopback:
//! each reviews version is an echo backend naming itself in `x-upstream`. The tasks' YAML is
//! mesh-bound; here it is bound to a Gateway by one added `gateways:` line, since an in-process
//! proxy has no captured traffic (the sidecar tests in crates/warden/tests/sidecar.rs run the
//! mesh side for real).

mod common;

use common::*;
use std::collections::HashMap;
use warden_testkit::free_port;

/// istio/istio samples/bookinfo/networking/destination-rule-all.yaml, the reviews rule.
const DESTINATION_RULE: &str = r#"
apiVersion: networking.istio.io/v1
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
"#;

/// istio.io tasks/traffic-management/request-routing: virtual-service-reviews-test-v2.yaml.
const TEST_V2: &str = r#"
apiVersion: networking.istio.io/v1
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
"#;

/// istio.io tasks/traffic-management/traffic-shifting: virtual-service-reviews-50-v3.yaml.
const FIFTY_V3: &str = r#"
apiVersion: networking.istio.io/v1
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
"#;

/// The reviews Service as a ServiceEntry with one labelled endpoint per version, and a Gateway.
async fn bookinfo(vs: &str) -> (warden_proxy::RunningProxy, Vec<Echo>) {
    let versions = [
        echo_http("v1").await,
        echo_http("v2").await,
        echo_http("v3").await,
    ];
    let mut se = String::from(
        "apiVersion: networking.istio.io/v1\nkind: ServiceEntry\nmetadata: {name: reviews}\nspec:\n  hosts: [reviews.default.svc.cluster.local]\n  resolution: STATIC\n  ports: [{number: 9080, name: http, protocol: HTTP}]\n  endpoints:\n",
    );
    for (i, e) in versions.iter().enumerate() {
        se.push_str(&format!(
            "  - {{address: {}, ports: {{http: {}}}, labels: {{app: reviews, version: v{}}}}}\n",
            e.addr.ip(),
            e.addr.port(),
            i + 1
        ));
    }
    let vs = vs.replace(
        "  hosts:\n    - reviews\n",
        "  hosts:\n    - reviews\n  gateways: [gw]\n",
    );
    let yaml = format!(
        "{}\n---\n{se}---{DESTINATION_RULE}---{vs}",
        gateway(&[(0, "HTTP")])
    );
    (start(&yaml), versions.into())
}

async fn version(
    client: &reqwest::Client,
    addr: std::net::SocketAddr,
    user: Option<&str>,
) -> String {
    let mut req = client
        .get(format!("http://{addr}/reviews/0"))
        .header("host", "reviews");
    if let Some(u) = user {
        req = req.header("end-user", u);
    }
    let resp = req.send().await.unwrap();
    assert_eq!(resp.status(), 200);
    resp.headers()["x-upstream"].to_str().unwrap().to_string()
}

#[tokio::test]
async fn request_routing_jason_sees_reviews_v2_everyone_else_v1() {
    let (proxy, _versions) = bookinfo(TEST_V2).await;
    let addr = addr(&proxy, 0);
    let c = client();
    for _ in 0..20 {
        assert_eq!(version(&c, addr, Some("jason")).await, "v2");
        assert_eq!(version(&c, addr, None).await, "v1");
        assert_eq!(version(&c, addr, Some("mary")).await, "v1");
    }
    // Clusters are named as Envoy's under Istio: outbound|PORT|SUBSET|HOST.
    let dump = proxy_clusters(&proxy);
    for v in ["v1", "v2"] {
        let name = format!("outbound|9080|{v}|reviews.default.svc.cluster.local");
        assert!(dump.contains(&name), "{name} not in {dump}");
    }
}

fn proxy_clusters(proxy: &warden_proxy::RunningProxy) -> String {
    admin_text(proxy, "/config_dump")
}

/// An admin endpoint's answer, head and body.
fn admin_text(proxy: &warden_proxy::RunningProxy, path: &str) -> String {
    let admin = proxy.admin_addr().unwrap();
    let mut s = std::net::TcpStream::connect(admin).unwrap();
    use std::io::{Read, Write};
    write!(
        s,
        "GET {path} HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n"
    )
    .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    out
}

#[tokio::test]
async fn traffic_shifting_50_50_between_v1_and_v3() {
    let (proxy, _versions) = bookinfo(FIFTY_V3).await;
    let addr = addr(&proxy, 0);
    let c = client();
    let mut seen: HashMap<String, u32> = HashMap::new();
    let n = 1000;
    for _ in 0..n {
        *seen.entry(version(&c, addr, None).await).or_default() += 1;
    }
    let v1 = seen.get("v1").copied().unwrap_or(0);
    let v3 = seen.get("v3").copied().unwrap_or(0);
    assert_eq!(v1 + v3, n, "{seen:?}");
    // 50/50 over 1000 requests: within 5 standard deviations (±79) of 500.
    assert!((421..=579).contains(&v1), "{seen:?}");
}

/// Every match condition narrows its route: a request that does not meet it falls through to
/// the next route (here a direct 404-like "fallback"), never to the conditioned one.
#[tokio::test]
async fn match_conditions_narrow_their_routes() {
    let yaml = format!(
        r#"{gw}
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {{name: vs}}
spec:
  hosts: ["*"]
  gateways: [gw]
  http:
  - name: query
    match: [{{uri: {{prefix: /q}}, queryParams: {{version: {{exact: v2}}}}}}]
    directResponse: {{status: 200, body: {{string: query}}}}
  - name: without
    match: [{{uri: {{prefix: /w}}, withoutHeaders: {{x-debug: {{exact: "1"}}}}}}]
    directResponse: {{status: 200, body: {{string: without}}}}
  - name: scheme-https
    match: [{{uri: {{prefix: /s}}, scheme: {{exact: https}}}}]
    directResponse: {{status: 200, body: {{string: https}}}}
  - name: other-workload
    match: [{{uri: {{prefix: /l}}, sourceLabels: {{app: somebody-else}}}}]
    directResponse: {{status: 200, body: {{string: other}}}}
  - name: this-workload
    match: [{{uri: {{prefix: /l}}, sourceLabels: {{istio: ingressgateway}}}}]
    directResponse: {{status: 200, body: {{string: mine}}}}
  - name: case
    match: [{{uri: {{exact: /case}}, ignoreUriCase: true}}]
    directResponse: {{status: 200, body: {{string: case}}}}
  - name: fallback
    directResponse: {{status: 299, body: {{string: fallback}}}}
"#,
        gw = gateway(&[(0, "HTTP")])
    );
    let mut opts = warden_proxy::ProxyOptions::loopback(inline(&yaml));
    opts.labels.insert("istio".into(), "ingressgateway".into());
    let proxy = warden_proxy::Proxy::start(opts).unwrap();
    let base = format!("http://{}", addr(&proxy, 0));
    let c = client();
    let body = |path: &'static str, header: Option<(&'static str, &'static str)>| {
        let mut req = c.get(format!("{base}{path}"));
        if let Some((k, v)) = header {
            req = req.header(k, v);
        }
        async move { req.send().await.unwrap().text().await.unwrap() }
    };
    assert_eq!(body("/q?version=v2", None).await, "query");
    assert_eq!(body("/q?a=1&version=v2", None).await, "query");
    assert_eq!(body("/q?version=v1", None).await, "fallback");
    assert_eq!(body("/q", None).await, "fallback");
    assert_eq!(body("/w", None).await, "without");
    assert_eq!(body("/w", Some(("x-debug", "0"))).await, "without");
    assert_eq!(body("/w", Some(("x-debug", "1"))).await, "fallback");
    assert_eq!(body("/s", None).await, "fallback");
    assert_eq!(body("/l", None).await, "mine");
    assert_eq!(body("/CaSe", None).await, "case");
}

/// A ratings service (one echo endpoint) on a Gateway, with `vs` (mesh YAML as published;
/// bound to the Gateway here).
async fn ratings(vs: &str) -> (warden_proxy::RunningProxy, Echo) {
    let up = echo_http("ratings-v1").await;
    let se = format!(
        "apiVersion: networking.istio.io/v1\nkind: ServiceEntry\nmetadata: {{name: ratings}}\nspec:\n  hosts: [ratings.default.svc.cluster.local]\n  resolution: STATIC\n  ports: [{{number: 9080, name: http, protocol: HTTP}}]\n  endpoints: [{{address: {}, ports: {{http: {}}}, labels: {{version: v1}}}}]\n",
        up.addr.ip(),
        up.addr.port()
    );
    let dr = "apiVersion: networking.istio.io/v1\nkind: DestinationRule\nmetadata: {name: ratings}\nspec:\n  host: ratings\n  subsets: [{name: v1, labels: {version: v1}}]\n";
    let vs = vs.replace("  - ratings\n", "  - ratings\n  gateways: [gw]\n");
    let yaml = format!("{}\n---\n{se}---\n{dr}---{vs}", gateway(&[(0, "HTTP")]));
    (start(&yaml), up)
}

/// istio.io tasks/traffic-management/fault-injection: virtual-service-ratings-test-abort.yaml.
const RATINGS_ABORT: &str = r#"
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata:
  name: ratings
spec:
  hosts:
  - ratings
  http:
  - match:
    - headers:
        end-user:
          exact: jason
    fault:
      abort:
        percentage:
          value: 100.0
        httpStatus: 500
    route:
    - destination:
        host: ratings
        subset: v1
  - route:
    - destination:
        host: ratings
        subset: v1
"#;

#[tokio::test]
async fn fault_abort_500_for_jason_and_at_its_percentage() {
    let (proxy, _up) = ratings(RATINGS_ABORT).await;
    let base = format!("http://{}/ratings/0", addr(&proxy, 0));
    let c = client();
    let r = c
        .get(&base)
        .header("host", "ratings")
        .header("end-user", "jason")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 500);
    assert_eq!(r.text().await.unwrap(), "fault filter abort");
    let r = c.get(&base).header("host", "ratings").send().await.unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["x-upstream"], "ratings-v1");
    drop(proxy);

    // The same abort for 25% of requests: 400 requests land within 5 sigma (±43) of 100.
    let quarter = RATINGS_ABORT.replace("value: 100.0", "value: 25.0");
    let (proxy, _up) = ratings(&quarter).await;
    let base = format!("http://{}/ratings/0", addr(&proxy, 0));
    let mut aborted = 0;
    for _ in 0..400 {
        let r = c
            .get(&base)
            .header("host", "ratings")
            .header("end-user", "jason")
            .send()
            .await
            .unwrap();
        match r.status().as_u16() {
            500 => aborted += 1,
            200 => {}
            other => panic!("status {other}"),
        }
    }
    assert!((57..=143).contains(&aborted), "{aborted} of 400 aborted");
}

/// istio.io tasks/traffic-management/request-timeouts: the ratings delay of 2 s.
const RATINGS_DELAY: &str = r#"
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata:
  name: ratings
spec:
  hosts:
  - ratings
  http:
  - fault:
      delay:
        percentage:
          value: 100
        fixedDelay: 2s
    route:
    - destination:
        host: ratings
        subset: v1
"#;

#[tokio::test]
async fn fault_delay_holds_requests_for_the_fixed_delay() {
    let (proxy, _up) = ratings(RATINGS_DELAY).await;
    let base = format!("http://{}/ratings/0", addr(&proxy, 0));
    let started = std::time::Instant::now();
    let r = client()
        .get(&base)
        .header("host", "ratings")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let took = started.elapsed();
    assert!(
        took >= std::time::Duration::from_secs(2),
        "answered after {took:?}"
    );
}

/// The VirtualService reference's rewrite and redirect examples (istio.io
/// reference/config/networking/virtual-service, HTTPRewrite and HTTPRedirect), on a Gateway.
#[tokio::test]
async fn rewrite_and_redirect_as_the_reference_examples() {
    let up = echo_http("ratings").await;
    let yaml = format!(
        r#"{gw}
---
{se}
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata:
  name: ratings-route
spec:
  hosts:
  - ratings.prod.svc.cluster.local
  gateways: [gw]
  http:
  - match:
    - uri:
        prefix: /ratings
    rewrite:
      uri: /v1/bookRatings
      authority: ratings-v1.internal
    route:
    - destination:
        host: ratings.prod.svc.cluster.local
  - match:
    - uri:
        exact: /v1/getProductRatings
    redirect:
      uri: /v1/bookRatings
      authority: newratings.default.svc.cluster.local
  - match:
    - uri:
        prefix: /regex
    rewrite:
      uriRegexRewrite:
        match: ^/regex/([^/]+)/(.*)$
        rewrite: /\2/\1
    route:
    - destination:
        host: ratings.prod.svc.cluster.local
  - match:
    - uri:
        prefix: /old
    redirect:
      scheme: https
      redirectCode: 308
      derivePort: FROM_PROTOCOL_DEFAULT
"#,
        gw = gateway(&[(0, "HTTP")]),
        se = service_entry("ratings.prod.svc.cluster.local", &[up.addr]),
    );
    let proxy = start(&yaml);
    let base = format!("http://{}", addr(&proxy, 0));
    let c = reqwest::Client::builder()
        .no_proxy()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let host = "ratings.prod.svc.cluster.local";
    // Prefix rewrite keeps the rest of the path and the query; Host is rewritten.
    let r = c
        .get(format!("{base}/ratings/7?x=1"))
        .header("host", host)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["x-echo-path"], "/v1/bookRatings/7?x=1");
    assert_eq!(r.headers()["x-echo-h-host"], "ratings-v1.internal");
    let r = c
        .get(format!("{base}/regex/a/b"))
        .header("host", host)
        .send()
        .await
        .unwrap();
    assert_eq!(r.headers()["x-echo-path"], "/b/a");
    // Redirects are answered by the proxy.
    let r = c
        .get(format!("{base}/v1/getProductRatings?id=3"))
        .header("host", host)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 301);
    assert_eq!(
        r.headers()["location"],
        "http://newratings.default.svc.cluster.local/v1/bookRatings?id=3"
    );
    let r = c
        .get(format!("{base}/old/page"))
        .header("host", format!("{host}:8080"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 308);
    assert_eq!(r.headers()["location"], format!("https://{host}/old/page"));
}

/// Gateway `tls.httpsRedirect: true` (istio.io reference/config/networking/gateway): the
/// server's requests get a 301 to https, with nothing forwarded.
#[tokio::test]
async fn gateway_https_redirect_answers_301() {
    let up = echo_http("web").await;
    let yaml = format!(
        r#"apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {{name: gw}}
spec:
  servers:
  - port: {{number: 0, name: http, protocol: HTTP}}
    hosts: [uk.bookinfo.com]
    tls:
      httpsRedirect: true
---
{se}
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {{name: vs}}
spec:
  hosts: [uk.bookinfo.com]
  gateways: [gw]
  http:
  - route: [{{destination: {{host: web.internal}}}}]
"#,
        se = service_entry("web.internal", &[up.addr]),
    );
    let proxy = start(&yaml);
    let c = reqwest::Client::builder()
        .no_proxy()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let r = c
        .get(format!("http://{}/reviews?x=1", addr(&proxy, 0)))
        .header("host", "uk.bookinfo.com")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 301);
    assert_eq!(
        r.headers()["location"],
        "https://uk.bookinfo.com/reviews?x=1"
    );
    assert!(r.headers().get("x-upstream").is_none());
}

#[test]
fn gateway_tls_settings_other_than_https_redirect_are_errors() {
    let yaml = "apiVersion: networking.istio.io/v1\nkind: Gateway\nmetadata: {name: gw}\nspec:\n  servers:\n  - port: {number: 80, name: http, protocol: HTTP}\n    hosts: ['*']\n    tls: {mode: SIMPLE, credentialName: cert}\n";
    let err = warden_config::load_str("gw.yaml", yaml)
        .unwrap_err()
        .to_string();
    assert!(err.contains("spec.servers[0].tls"), "{err}");
    assert!(
        err.contains("protocol HTTP takes only tls.httpsRedirect"),
        "{err}"
    );
}

/// istio.io tasks/traffic-management/mirroring: httpbin v1 serves, v2 gets a copy of every
/// request ("mirror" with mirrorPercentage 100).
const HTTPBIN_MIRROR: &str = r#"
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata:
  name: httpbin
spec:
  hosts:
  - httpbin
  http:
  - route:
    - destination:
        host: httpbin
        subset: v1
      weight: 100
    mirror:
      host: httpbin
      subset: v2
    mirrorPercentage:
      value: 100.0
"#;

/// The same task's DestinationRule.
const HTTPBIN_SUBSETS: &str = r#"
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata:
  name: httpbin
spec:
  host: httpbin
  subsets:
  - name: v1
    labels:
      version: v1
  - name: v2
    labels:
      version: v2
"#;

/// httpbin v1 and v2 (recording upstreams) behind a Gateway with `vs` and the task's rule.
async fn httpbin(vs: &str) -> (warden_proxy::RunningProxy, Recording, Recording) {
    let (v1, seen_v1) = recording_upstream().await;
    let (v2, seen_v2) = recording_upstream().await;
    let se = format!(
        "apiVersion: networking.istio.io/v1\nkind: ServiceEntry\nmetadata: {{name: httpbin}}\nspec:\n  hosts: [httpbin.default.svc.cluster.local]\n  resolution: STATIC\n  ports: [{{number: 8000, name: http, protocol: HTTP}}]\n  endpoints:\n  - {{address: {}, ports: {{http: {}}}, labels: {{version: v1}}}}\n  - {{address: {}, ports: {{http: {}}}, labels: {{version: v2}}}}\n",
        v1.ip(),
        v1.port(),
        v2.ip(),
        v2.port()
    );
    let vs = vs.replace(
        "  - httpbin\n  http:",
        "  - httpbin\n  gateways: [gw]\n  http:",
    );
    let yaml = format!(
        "{}\n---\n{se}---{HTTPBIN_SUBSETS}---{vs}",
        gateway(&[(0, "HTTP")])
    );
    (start(&yaml), seen_v1, seen_v2)
}

/// Wait (bounded) until `seen` holds `n` requests: shadows are fire and forget.
async fn wait_for_requests(seen: &Recording, n: usize) -> Vec<String> {
    for _ in 0..200 {
        let got = seen.lock().unwrap().requests.clone();
        if got.len() >= n {
            return got;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    seen.lock().unwrap().requests.clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mirroring_copies_every_request_to_v2_with_a_shadow_host() {
    let (proxy, seen_v1, seen_v2) = httpbin(HTTPBIN_MIRROR).await;
    let base = format!("http://{}", addr(&proxy, 0));
    let c = client();
    for i in 0..10 {
        let r = c
            .get(format!("{base}/headers?i={i}"))
            .header("host", "httpbin:8000")
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
    }
    // A body is copied too, whole.
    let r = c
        .post(format!("{base}/post"))
        .header("host", "httpbin:8000")
        .body("mirrored body")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let v1 = wait_for_requests(&seen_v1, 11).await;
    let v2 = wait_for_requests(&seen_v2, 11).await;
    assert_eq!(v1.len(), 11);
    assert_eq!(v2.len(), 11, "{v2:?}");
    for r in &v1 {
        assert_eq!(host_lines(r), vec!["httpbin:8000"], "{r}");
    }
    for r in &v2 {
        // Envoy's shadow suffix goes before the port.
        assert_eq!(host_lines(r), vec!["httpbin-shadow:8000"], "{r}");
    }
    assert!(v2
        .iter()
        .any(|r| r.starts_with("POST /post") && r.ends_with("mirrored body")));
    // Counted once each shadow's answer is read, a moment after the mirror recorded it.
    let want = "warden_mirror_requests_total{kind=\"answered\"} 11";
    let mut metrics = String::new();
    for _ in 0..200 {
        metrics = admin_text(&proxy, "/stats/prometheus");
        if metrics.contains(want) {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    assert!(metrics.contains(want), "{metrics}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mirror_percentage_copies_its_share() {
    let half = HTTPBIN_MIRROR.replace("value: 100.0", "value: 50.0");
    let (proxy, seen_v1, seen_v2) = httpbin(&half).await;
    let base = format!("http://{}", addr(&proxy, 0));
    let c = client();
    let n = 400;
    for _ in 0..n {
        let r = c
            .get(format!("{base}/get"))
            .header("host", "httpbin")
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
    }
    assert_eq!(wait_for_requests(&seen_v1, n).await.len(), n);
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    let copies = seen_v2.lock().unwrap().requests.len();
    // 50% of 400 within 5 standard deviations (±50).
    assert!((150..=250).contains(&copies), "{copies} copies of {n}");
}

/// istio.io reference/config/networking/virtual-service/#CorsPolicy: the ratings example.
const RATINGS_CORS: &str = r#"
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata:
  name: ratings-route
spec:
  hosts:
  - ratings
  http:
  - route:
    - destination:
        host: ratings
        subset: v1
    corsPolicy:
      allowOrigins:
      - exact: https://example.com
      allowMethods:
      - POST
      - GET
      allowCredentials: false
      allowHeaders:
      - X-Foo-Bar
      maxAge: "24h"
"#;

#[tokio::test]
async fn cors_preflight_is_answered_at_the_proxy() {
    let (proxy, _up) = ratings(RATINGS_CORS).await;
    let url = format!("http://{}/ratings/0", addr(&proxy, 0));
    let c = client();
    let r = c
        .request(reqwest::Method::OPTIONS, &url)
        .header("host", "ratings")
        .header("origin", "https://example.com")
        .header("access-control-request-method", "POST")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let h = r.headers();
    assert!(
        !h.contains_key("x-upstream"),
        "answered by the proxy: {h:?}"
    );
    assert_eq!(h["access-control-allow-origin"], "https://example.com");
    assert_eq!(h["access-control-allow-methods"], "POST,GET");
    assert_eq!(h["access-control-allow-headers"], "X-Foo-Bar");
    assert_eq!(h["access-control-max-age"], "86400");
    assert!(!h.contains_key("access-control-allow-credentials"));

    // An allowed origin's request reaches the service and gets the allow-origin header.
    let r = c
        .get(&url)
        .header("host", "ratings")
        .header("origin", "https://example.com")
        .send()
        .await
        .unwrap();
    assert_eq!(r.headers()["x-upstream"], "ratings-v1");
    assert_eq!(
        r.headers()["access-control-allow-origin"],
        "https://example.com"
    );

    // Another origin's preflight goes on to the service, without CORS headers.
    let r = c
        .request(reqwest::Method::OPTIONS, &url)
        .header("host", "ratings")
        .header("origin", "https://evil.example")
        .header("access-control-request-method", "POST")
        .send()
        .await
        .unwrap();
    assert_eq!(r.headers()["x-upstream"], "ratings-v1");
    assert!(!r.headers().contains_key("access-control-allow-origin"));
}

/// istio/istio samples/helloworld/helloworld-gateway.yaml (port 80 -> a free port).
const HELLOWORLD_GATEWAY: &str = r#"
apiVersion: networking.istio.io/v1
kind: Gateway
metadata:
  name: helloworld-gateway
spec:
  selector:
    istio: ingressgateway # use istio default controller
  servers:
  - port:
      number: 80
      name: http
      protocol: HTTP
    hosts:
    - "*"
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata:
  name: helloworld
spec:
  hosts:
  - "*"
  gateways:
  - helloworld-gateway
  http:
  - match:
    - uri:
        exact: /hello
    route:
    - destination:
        host: helloworld
        port:
          number: 5000
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn helloworld_gateway_balances_v1_and_v2() {
    // Each pod has its own IP and listens on the sample's port 5000: two loopback addresses.
    let _v1 = echo_http_on("helloworld-v1", "127.77.0.1:5000".parse().unwrap()).await;
    let _v2 = echo_http_on("helloworld-v2", "127.77.0.2:5000".parse().unwrap()).await;
    let port = free_port().expect("a free port");
    // samples/helloworld/helloworld.yaml's Service as written, and its two Deployments' pods.
    let service = r#"
apiVersion: v1
kind: Service
metadata:
  name: helloworld
  labels:
    app: helloworld
    service: helloworld
spec:
  ports:
  - port: 5000
    name: http
  selector:
    app: helloworld
---
apiVersion: v1
kind: Pod
metadata: {name: helloworld-v1-1, labels: {app: helloworld, version: v1}}
spec: {containers: [{name: helloworld, ports: [{containerPort: 5000}]}]}
status: {podIP: 127.77.0.1}
---
apiVersion: v1
kind: Pod
metadata: {name: helloworld-v2-1, labels: {app: helloworld, version: v2}}
spec: {containers: [{name: helloworld, ports: [{containerPort: 5000}]}]}
status: {podIP: 127.77.0.2}
"#;
    let gw = HELLOWORLD_GATEWAY.replace("number: 80\n", &format!("number: {port}\n"));
    let proxy = start(&format!("{gw}---{service}"));
    let c = client();
    let mut seen = HashMap::<String, u32>::new();
    for _ in 0..40 {
        let r = c
            .get(format!("http://127.0.0.1:{port}/hello"))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
        *seen
            .entry(r.headers()["x-upstream"].to_str().unwrap().to_owned())
            .or_default() += 1;
    }
    assert!(
        seen.contains_key("helloworld-v1") && seen.contains_key("helloworld-v2"),
        "{seen:?}"
    );
    let r = c
        .get(format!("http://127.0.0.1:{port}/other"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404);
    drop(proxy);
}

/// A TCP echo that answers each line with its version first, as samples/tcp-echo's server
/// (`tcp-echo --prefix one`).
async fn tcp_echo_version(prefix: &'static str) -> std::net::SocketAddr {
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((s, _)) = listener.accept().await {
            tokio::spawn(async move {
                let (r, mut w) = s.into_split();
                let mut lines = BufReader::new(r).lines();
                while let Ok(Some(line)) = lines.next_line().await {
                    if w.write_all(format!("{prefix} {line}\n").as_bytes())
                        .await
                        .is_err()
                    {
                        return;
                    }
                }
            });
        }
    });
    addr
}

/// istio/istio samples/tcp-echo/tcp-echo-all-v1.yaml (port 31400 -> a free port).
const TCP_ECHO_ALL_V1: &str = r#"
apiVersion: networking.istio.io/v1
kind: Gateway
metadata:
  name: tcp-echo-gateway
spec:
  selector:
    istio: ingressgateway
  servers:
  - port:
      number: 31400
      name: tcp
      protocol: TCP
    hosts:
    - "*"
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata:
  name: tcp-echo-destination
spec:
  host: tcp-echo
  subsets:
  - name: v1
    labels:
      version: v1
  - name: v2
    labels:
      version: v2
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata:
  name: tcp-echo
spec:
  hosts:
  - "*"
  gateways:
  - tcp-echo-gateway
  tcp:
  - match:
    - port: 31400
    route:
    - destination:
        host: tcp-echo
        port:
          number: 9000
        subset: v1
"#;

/// istio/istio samples/tcp-echo/tcp-echo-20-v2.yaml: the VirtualService, 80/20.
const TCP_ECHO_20_V2: &str = r#"
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata:
  name: tcp-echo
spec:
  hosts:
  - "*"
  gateways:
  - tcp-echo-gateway
  tcp:
  - match:
    - port: 31400
    route:
    - destination:
        host: tcp-echo
        port:
          number: 9000
        subset: v1
      weight: 80
    - destination:
        host: tcp-echo
        port:
          number: 9000
        subset: v2
      weight: 20
"#;

async fn tcp_echo_versions(port: u16, connections: usize) -> HashMap<String, usize> {
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
    let mut seen = HashMap::new();
    for i in 0..connections {
        let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .unwrap();
        s.write_all(format!("hello {i}\n").as_bytes())
            .await
            .unwrap();
        let mut line = String::new();
        BufReader::new(&mut s).read_line(&mut line).await.unwrap();
        let version = line.split_whitespace().next().unwrap_or("").to_owned();
        assert!(line.ends_with(&format!("hello {i}\n")), "{line:?}");
        *seen.entry(version).or_default() += 1;
    }
    seen
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tcp_traffic_shifting_all_v1_then_80_20() {
    let one = tcp_echo_version("one").await;
    let two = tcp_echo_version("two").await;
    // samples/tcp-echo/tcp-echo-services.yaml's Service, with one pod per version.
    let service = format!(
        r#"
apiVersion: v1
kind: Service
metadata:
  name: tcp-echo
  labels:
    app: tcp-echo
    service: tcp-echo
spec:
  ports:
  - name: tcp
    port: 9000
  - name: tcp-other
    port: 9001
  # Port 9002 is omitted intentionally for testing the pass through filter chain.
  selector:
    app: tcp-echo
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {{name: tcp-echo-1, labels: {{kubernetes.io/service-name: tcp-echo}}}}
addressType: IPv4
endpoints:
- {{addresses: ["{}"], targetRef: {{kind: Pod, name: tcp-echo-v1}}}}
ports: [{{name: tcp, port: {}}}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {{name: tcp-echo-2, labels: {{kubernetes.io/service-name: tcp-echo}}}}
addressType: IPv4
endpoints:
- {{addresses: ["{}"], targetRef: {{kind: Pod, name: tcp-echo-v2}}}}
ports: [{{name: tcp, port: {}}}]
---
apiVersion: v1
kind: Pod
metadata: {{name: tcp-echo-v1, labels: {{app: tcp-echo, version: v1}}}}
status: {{podIP: "{}"}}
---
apiVersion: v1
kind: Pod
metadata: {{name: tcp-echo-v2, labels: {{app: tcp-echo, version: v2}}}}
status: {{podIP: "{}"}}
"#,
        one.ip(),
        one.port(),
        two.ip(),
        two.port(),
        one.ip(),
        two.ip()
    );
    let port = free_port().expect("a free port");
    let all_v1 = TCP_ECHO_ALL_V1.replace("31400", &port.to_string());
    let proxy = start(&format!("{all_v1}---{service}"));
    let seen = tcp_echo_versions(port, 20).await;
    assert_eq!(seen.get("one"), Some(&20), "{seen:?}");
    drop(proxy);

    let port = free_port().expect("a free port");
    // The Gateway and DestinationRule of tcp-echo-all-v1.yaml, then the 80/20 VirtualService.
    let gw_dr = TCP_ECHO_ALL_V1
        .split("---\napiVersion: networking.istio.io/v1\nkind: VirtualService")
        .next()
        .unwrap()
        .replace("31400", &port.to_string());
    let shifted = TCP_ECHO_20_V2.replace("31400", &port.to_string());
    let proxy = start(&format!("{gw_dr}---{shifted}---{service}"));
    let n = 400;
    let seen = tcp_echo_versions(port, n).await;
    let v2 = seen.get("two").copied().unwrap_or(0);
    assert_eq!(seen.values().sum::<usize>(), n);
    // 20% of 400 within 5 standard deviations (±40).
    assert!((40..=120).contains(&v2), "{seen:?}");
    drop(proxy);
}

/// istio.io tasks/traffic-management/ingress/ingress-control: the httpbin Gateway and
/// VirtualService (port 80 -> a free port), httpbin as an echo answering `/status/N`.
const HTTPBIN_INGRESS: &str = r#"
apiVersion: networking.istio.io/v1
kind: Gateway
metadata:
  name: httpbin-gateway
spec:
  # The selector matches the ingress gateway pod labels.
  # If you installed Istio using Helm following the standard documentation, this would be "istio=ingress"
  selector:
    istio: ingressgateway
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

/// samples/httpbin/httpbin.yaml's Service (port 8000 -> targetPort 8080) over an echo pod.
fn httpbin_service(echo: std::net::SocketAddr) -> String {
    format!(
        r#"
apiVersion: v1
kind: Service
metadata:
  name: httpbin
  labels:
    app: httpbin
    service: httpbin
spec:
  ports:
  - name: http
    port: 8000
    targetPort: {}
  selector:
    app: httpbin
---
apiVersion: v1
kind: Pod
metadata: {{name: httpbin-1, labels: {{app: httpbin, version: v1}}}}
status: {{podIP: "{}"}}
"#,
        echo.port(),
        echo.ip()
    )
}

/// istio.io tasks/security/authorization/authz-ingress: the IP-based ALLOW policy as
/// published (the client, 127.0.0.1, is in neither block), then the DENY form for the
/// client's own address.
const INGRESS_IP_ALLOW: &str = r#"
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata:
  name: ingress-policy
  namespace: istio-system
spec:
  selector:
    matchLabels:
      app: istio-ingressgateway
  action: ALLOW
  rules:
  - from:
    - source:
        ipBlocks: ["1.2.3.4", "5.6.7.0/24"]
"#;

const INGRESS_IP_DENY: &str = r#"
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata:
  name: ingress-policy
  namespace: istio-system
spec:
  selector:
    matchLabels:
      app: istio-ingressgateway
  action: DENY
  rules:
  - from:
    - source:
        ipBlocks: ["127.0.0.1"]
"#;

/// The ingress task's Gateway on a free port, with `extra` documents, on a proxy carrying the
/// ingress gateway pod's labels (both `istio` and `app`, as Istio's charts set them).
async fn httpbin_ingress(extra: &str) -> (warden_proxy::RunningProxy, u16, Echo) {
    let httpbin = echo_http("httpbin").await;
    let port = free_port().expect("a free port");
    let gw = HTTPBIN_INGRESS.replace("number: 80\n", &format!("number: {port}\n"));
    let yaml = format!("{gw}---{}---{extra}", httpbin_service(httpbin.addr));
    let mut opts = warden_proxy::ProxyOptions::loopback(inline(&yaml));
    opts.labels.insert("istio".into(), "ingressgateway".into());
    opts.labels
        .insert("app".into(), "istio-ingressgateway".into());
    (warden_proxy::Proxy::start(opts).unwrap(), port, httpbin)
}

async fn status_of(port: u16, host: &str, path: &str) -> u16 {
    client()
        .get(format!("http://127.0.0.1:{port}{path}"))
        .header("host", host)
        .send()
        .await
        .unwrap()
        .status()
        .as_u16()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ingress_task_routes_httpbin_example_com_only() {
    let (_proxy, port, _httpbin) = httpbin_ingress("").await;
    assert_eq!(
        status_of(port, "httpbin.example.com", "/status/200").await,
        200
    );
    assert_eq!(
        status_of(port, "httpbin.example.com", "/status/418").await,
        418
    );
    // Not a route of the VirtualService, and not its host.
    assert_eq!(
        status_of(port, "httpbin.example.com", "/headers").await,
        404
    );
    assert_eq!(
        status_of(port, "other.example.com", "/status/200").await,
        404
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn authz_ingress_ip_policies_as_the_task() {
    let (proxy, port, _httpbin) = httpbin_ingress(INGRESS_IP_ALLOW).await;
    assert_eq!(
        status_of(port, "httpbin.example.com", "/status/200").await,
        403
    );
    drop(proxy);
    let allowed = INGRESS_IP_ALLOW.replace("\"5.6.7.0/24\"", "\"127.0.0.1\"");
    let (proxy, port, _httpbin) = httpbin_ingress(&allowed).await;
    assert_eq!(
        status_of(port, "httpbin.example.com", "/status/200").await,
        200
    );
    drop(proxy);
    let (proxy, port, _httpbin) = httpbin_ingress(INGRESS_IP_DENY).await;
    assert_eq!(
        status_of(port, "httpbin.example.com", "/status/200").await,
        403
    );
    drop(proxy);
    // istio.io tasks/security/authorization/authz-dry-run: the same DENY, annotated dry-run,
    // denies nothing.
    let dry = INGRESS_IP_DENY.replace(
        "  namespace: istio-system\n",
        "  namespace: istio-system\n  annotations:\n    \"istio.io/dry-run\": \"true\"\n",
    );
    let (_proxy, port, _httpbin) = httpbin_ingress(&dry).await;
    assert_eq!(
        status_of(port, "httpbin.example.com", "/status/200").await,
        200
    );
}

/// istio.io tasks/traffic-management/circuit-breaking: the httpbin DestinationRule as
/// published.
const HTTPBIN_CIRCUIT_BREAKER: &str = r#"
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata:
  name: httpbin
spec:
  host: httpbin
  trafficPolicy:
    connectionPool:
      tcp:
        maxConnections: 1
      http:
        http1MaxPendingRequests: 1
        maxRequestsPerConnection: 1
    outlierDetection:
      consecutive5xxErrors: 1
      interval: 1s
      baseEjectionTime: 3m
      maxEjectionPercent: 100
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn circuit_breaking_overflows_and_ejects_as_the_task() {
    let (_proxy, port, _httpbin) = httpbin_ingress(HTTPBIN_CIRCUIT_BREAKER).await;
    // Five requests at once against a slow httpbin: one connection and one pending request
    // are allowed, the rest overflow (503, UO) without reaching it.
    let c = client();
    let calls = (0..5).map(|_| {
        let c = c.clone();
        async move {
            c.get(format!("http://127.0.0.1:{port}/delay/1000"))
                .header("host", "httpbin.example.com")
                .send()
                .await
                .unwrap()
                .status()
                .as_u16()
        }
    });
    let mut codes = futures_util::future::join_all(calls).await;
    codes.sort();
    assert_eq!(codes, [200, 200, 503, 503, 503], "{codes:?}");
    // One 5xx ejects the only endpoint for 3 minutes: then no healthy upstream.
    assert_eq!(
        status_of(port, "httpbin.example.com", "/status/500").await,
        500
    );
    let r = client()
        .get(format!("http://127.0.0.1:{port}/status/200"))
        .header("host", "httpbin.example.com")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 503);
    assert_eq!(r.text().await.unwrap(), "no healthy upstream");
}
