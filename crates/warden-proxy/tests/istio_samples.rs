//! Istio's published samples, loaded as written (bookinfo's `destination-rule-all.yaml` and the
//! request-routing and traffic-shifting tasks' VirtualServices), then driven over loopback:
//! each reviews version is an echo backend naming itself in `x-upstream`. The tasks' YAML is
//! mesh-bound; here it is bound to a Gateway by one added `gateways:` line, since an in-process
//! proxy has no captured traffic (the sidecar tests in crates/warden/tests/sidecar.rs run the
//! mesh side for real).

mod common;

use common::*;
use std::collections::HashMap;

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
    let admin = proxy.admin_addr().unwrap();
    let mut s = std::net::TcpStream::connect(admin).unwrap();
    use std::io::{Read, Write};
    s.write_all(b"GET /config_dump HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
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
