//! Upstream behaviour and local replies: streaming a 10 MB body, 503 (no healthy upstream,
//! connect failure), 504 timeout, retries, h2c upstream, 400 / 431 on malformed requests.

mod common;

use bytes::Bytes;
use common::*;
use std::time::Duration;

fn one_route(dest_host: &str, extra_route: &str, ses: &str) -> String {
    format!(
        r#"{head}  - route: [{{destination: {{host: {dest_host}}}}}]
{extra_route}
{ses}"#,
        head = gateway_and_route_head(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_megabyte_post_is_streamed_through() {
    let up = echo_http("up").await;
    let proxy = start(&one_route(
        "up.internal",
        "",
        &service_entry("up.internal", &[up.addr]),
    ));
    let url = format!("http://{}/upload", addr(&proxy, 0));
    // A streamed request body of 10 MB in 64 KiB chunks, without Content-Length.
    const CHUNK: usize = 64 * 1024;
    const CHUNKS: usize = 160;
    let chunks = futures_util::stream::iter(
        (0..CHUNKS).map(|i| Ok::<Bytes, std::io::Error>(Bytes::from(vec![(i % 251) as u8; CHUNK]))),
    );
    let r = client()
        .post(&url)
        .body(reqwest::Body::wrap_stream(chunks))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let total = read_patterned(r, CHUNK).await;
    assert_eq!(total, CHUNK * CHUNKS);
}

/// An HTTP/1.1 upstream serving 10 MB [`patterned`] bodies on keep-alive connections:
/// `/sized` with a content-length, anything else chunked in 64 KiB chunks.
async fn big_body_upstream() -> std::net::SocketAddr {
    raw_upstream(|head| {
        const CHUNK: usize = 64 * 1024;
        let body = patterned(160 * CHUNK, CHUNK);
        if head.contains(" /sized") {
            let head = format!("HTTP/1.1 200 OK\r\ncontent-length: {}\r\n\r\n", body.len());
            return [head.into_bytes(), body].concat();
        }
        let mut out = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n".to_vec();
        for data in body.chunks(CHUNK) {
            out.extend_from_slice(format!("{:x}\r\n", data.len()).as_bytes());
            out.extend_from_slice(data);
            out.extend_from_slice(b"\r\n");
        }
        out.extend_from_slice(b"0\r\n\r\n");
        out
    })
    .await
}

/// Body-less requests take the proxy's own HTTP/1.1 exchange (not hyper's client): large
/// responses, sized and chunked, stream through intact, one after the other on the same
/// connections.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_megabyte_responses_are_streamed_back() {
    const CHUNK: usize = 64 * 1024;
    let up = big_body_upstream().await;
    let proxy = start(&one_route(
        "up.internal",
        "",
        &service_entry("up.internal", &[up]),
    ));
    let client = client();
    for path in ["/sized", "/chunked", "/sized", "/chunked"] {
        let url = format!("http://{}{path}", addr(&proxy, 0));
        let r = client.get(&url).send().await.unwrap();
        assert_eq!(r.status(), 200, "{path}");
        let total = read_patterned(r, CHUNK).await;
        assert_eq!(total, 160 * CHUNK, "{path}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local_replies_503_and_504() {
    let up = echo_http("up").await;
    let dead = closed_port().await;
    let extra = r#"  - name: unused
    route: [{destination: {host: up.internal}}]"#;
    let yaml = format!(
        r#"{head}  - match: [{{uri: {{prefix: /limited}}}}]
    route: [{{destination: {{host: limited.internal}}}}]
  - match: [{{uri: {{prefix: /dead}}}}]
    route: [{{destination: {{host: dead.internal}}}}]
  - match: [{{uri: {{prefix: /delay}}}}]
    timeout: 200ms
    route: [{{destination: {{host: up.internal}}}}]
{extra}
{limited}{dead_se}{up_se}
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata:
  name: limited
spec:
  host: limited.internal
  trafficPolicy:
    connectionPool:
      http: {{http2MaxRequests: 1}}
"#,
        head = gateway_and_route_head(),
        limited = service_entry("limited.internal", &[up.addr]),
        dead_se = service_entry("dead.internal", &[dead.addr()]),
        up_se = service_entry("up.internal", &[up.addr]),
    );
    let proxy = start(&yaml);
    let base = format!("http://{}", addr(&proxy, 0));
    let c = client();

    // One request in flight fills the pool limit; the next one overflows (Envoy's UO).
    let slow = tokio::spawn({
        let c = c.clone();
        let url = format!("{base}/limited/delay/800");
        async move { c.get(url).send().await.unwrap().status() }
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    let r = c.get(format!("{base}/limited/now")).send().await.unwrap();
    assert_eq!(r.status(), 503);
    assert!(r.text().await.unwrap().ends_with("reset reason: overflow"));
    assert_eq!(slow.await.unwrap(), 200);
    let r = c.get(format!("{base}/limited/now")).send().await.unwrap();
    assert_eq!(r.status(), 200);

    let r = c.get(format!("{base}/dead")).send().await.unwrap();
    assert_eq!(r.status(), 503);
    assert!(r
        .text()
        .await
        .unwrap()
        .starts_with("upstream connect error or disconnect/reset before headers"));

    let started = std::time::Instant::now();
    let r = c.get(format!("{base}/delay/2000")).send().await.unwrap();
    assert_eq!(r.status(), 504);
    assert_eq!(r.text().await.unwrap(), "upstream request timeout");
    assert!(started.elapsed() < Duration::from_millis(1500));

    // Within the timeout the same route works.
    let r = c.get(format!("{base}/delay/10")).send().await.unwrap();
    assert_eq!(r.status(), 200);

    let m = proxy.metrics();
    assert!(m.upstream_errors >= 4, "{m:?}");
    let text = proxy.metrics_text();
    assert!(text.contains("kind=\"timeout\""), "{text}");
    assert!(text.contains("code=\"504\""), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retries_move_to_a_live_endpoint_and_h2_upstream() {
    let up = echo_http("live").await;
    let dead = closed_port().await;
    let yaml = format!(
        r#"{head}  - match: [{{uri: {{prefix: /h2}}}}]
    route: [{{destination: {{host: h2.internal}}}}]
  - retries: {{attempts: 3}}
    route: [{{destination: {{host: mixed.internal}}}}]
{mixed}{h2}
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata:
  name: mixed
spec:
  host: mixed.internal
  trafficPolicy:
    loadBalancer: {{simple: ROUND_ROBIN}}
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata:
  name: h2
spec:
  host: h2.internal
  trafficPolicy:
    connectionPool:
      http: {{h2UpgradePolicy: UPGRADE}}
"#,
        head = gateway_and_route_head(),
        mixed = service_entry("mixed.internal", &[dead.addr(), up.addr]),
        h2 = service_entry("h2.internal", &[up.addr]),
    );
    let proxy = start(&yaml);
    let base = format!("http://{}", addr(&proxy, 0));
    let c = client();
    for _ in 0..6 {
        let r = c.get(format!("{base}/x")).send().await.unwrap();
        assert_eq!(r.status(), 200);
        assert_eq!(r.headers()["x-upstream"], "live");
    }
    // A body-less HTTP/1.1 request's lines kept as read go into hyper's h2 request.
    let r = c
        .get(format!("{base}/h2"))
        .header("x-custom", "kept")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["x-echo-version"], "HTTP/2.0");
    assert_eq!(r.headers()["x-echo-h-x-custom"], "kept");
    assert_eq!(r.headers()["x-echo-h-x-forwarded-for"], "127.0.0.1");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_requests_get_400_and_431() {
    let up = echo_http("up").await;
    let proxy = start(&one_route(
        "up.internal",
        "",
        &service_entry("up.internal", &[up.addr]),
    ));
    let a = addr(&proxy, 0);
    let wait = Duration::from_secs(3);

    let both = b"POST /x HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n";
    let resp = raw(a, both, wait).await;
    assert!(resp.starts_with("HTTP/1.1 400"), "{resp}");
    assert!(!resp.contains("x-upstream"), "{resp}");

    let garbage = b"GET / HTTP/1.1\r\nHo st: a\r\n\r\n";
    let resp = raw(a, garbage, wait).await;
    assert!(resp.starts_with("HTTP/1.1 400"), "{resp}");

    let big = format!(
        "GET / HTTP/1.1\r\nHost: a\r\nx-big: {}\r\n\r\n",
        "a".repeat(100 * 1024)
    );
    let resp = raw(a, big.as_bytes(), wait).await;
    assert!(resp.starts_with("HTTP/1.1 431"), "{resp}");

    // A well-formed request on a fresh connection still works, and a chunked body alone is fine.
    let ok = b"POST /x HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n5\r\nhello\r\n0\r\n\r\n";
    let resp = raw(a, ok, wait).await;
    assert!(resp.starts_with("HTTP/1.1 200"), "{resp}");
    assert!(
        resp.ends_with("hello\r\n0\r\n\r\n") || resp.contains("hello"),
        "{resp}"
    );
}

/// A keep-alive HTTP/1.1 upstream on a raw TcpListener: answers every request head with `ok`
/// and counts the connections it accepted.
async fn counting_upstream() -> (
    std::net::SocketAddr,
    std::sync::Arc<std::sync::atomic::AtomicUsize>,
) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let accepted = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let count = accepted.clone();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            count.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            tokio::spawn(async move {
                let mut buf = Vec::new();
                let mut chunk = [0u8; 4096];
                loop {
                    // Requests have no body: a blank line ends each one.
                    while let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                        buf.drain(..end + 4);
                        let reply = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok";
                        if s.write_all(reply).await.is_err() {
                            return;
                        }
                    }
                    match s.read(&mut chunk).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => buf.extend_from_slice(&chunk[..n]),
                    }
                }
            });
        }
    });
    (addr, accepted)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn destination_rule_limits_upstream_connection_reuse() {
    let (per_conn_up, per_conn_accepted) = counting_upstream().await;
    let (idle_up, idle_accepted) = counting_upstream().await;
    let yaml = format!(
        r#"{head}  - match: [{{uri: {{prefix: /idle}}}}]
    route: [{{destination: {{host: idle.internal}}}}]
  - route: [{{destination: {{host: perconn.internal}}}}]
{perconn_se}{idle_se}
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata:
  name: perconn
spec:
  host: perconn.internal
  trafficPolicy:
    connectionPool:
      http: {{maxRequestsPerConnection: 2}}
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata:
  name: idle
spec:
  host: idle.internal
  trafficPolicy:
    connectionPool:
      http: {{idleTimeout: 300ms, maxRequestsPerConnection: 0}}
"#,
        head = gateway_and_route_head(),
        perconn_se = service_entry("perconn.internal", &[per_conn_up]),
        idle_se = service_entry("idle.internal", &[idle_up]),
    );
    let proxy = start(&yaml);
    let base = format!("http://{}", addr(&proxy, 0));
    let c = client();
    let get = |path: &'static str| {
        let (c, url) = (c.clone(), format!("{base}{path}"));
        async move {
            let r = c.get(url).send().await.unwrap();
            assert_eq!(r.status(), 200);
            assert_eq!(r.text().await.unwrap(), "ok");
            // Let the proxy's upstream connection see the end of the exchange.
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    };

    for _ in 0..6 {
        get("/x").await;
    }
    assert_eq!(
        per_conn_accepted.load(std::sync::atomic::Ordering::SeqCst),
        3
    );

    // 0 is unlimited; an idle connection is reused within the timeout, not after it.
    for _ in 0..3 {
        get("/idle").await;
    }
    assert_eq!(idle_accepted.load(std::sync::atomic::Ordering::SeqCst), 1);
    tokio::time::sleep(Duration::from_millis(600)).await;
    get("/idle").await;
    assert_eq!(idle_accepted.load(std::sync::atomic::Ordering::SeqCst), 2);

    // Applied, so shown and not warned about.
    let dump: serde_json::Value = c
        .get(format!(
            "http://{}/config_dump",
            proxy.admin_addr().unwrap()
        ))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let clusters = dump["clusters"].as_array().unwrap();
    let perconn = clusters
        .iter()
        .find(|c| c["name"] == "outbound|80||perconn.internal")
        .unwrap();
    assert_eq!(perconn["max_requests_per_connection"], 2);
    let idle = clusters
        .iter()
        .find(|c| c["name"] == "outbound|80||idle.internal")
        .unwrap();
    assert_eq!(idle["idle_timeout"], "300ms");
    assert_eq!(idle["max_requests_per_connection"], serde_json::Value::Null);
    assert_eq!(dump["warnings"], serde_json::json!([]));

    let loaded = warden_config::load_str("gw.yaml", &yaml).unwrap();
    let snap = warden_proxy::Snapshot::build(loaded, &Default::default(), None).unwrap();
    let text = warden_proxy::runtime::check::describe(&snap);
    assert!(text.contains("max 2 request(s)/connection"), "{text}");
    assert!(text.contains("idle timeout 300ms"), "{text}");
}

/// A keep-alive HTTP/1.1 upstream answering `/status/N` with N (else 200), counting requests.
async fn status_upstream() -> (
    std::net::SocketAddr,
    std::sync::Arc<std::sync::atomic::AtomicUsize>,
) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let requests = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let count = requests.clone();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            let count = count.clone();
            tokio::spawn(async move {
                let mut buf = Vec::new();
                let mut chunk = [0u8; 4096];
                loop {
                    while let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                        let head = String::from_utf8_lossy(&buf[..end]).into_owned();
                        buf.drain(..end + 4);
                        count.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                        let status = head
                            .split_whitespace()
                            .nth(1)
                            .and_then(|p| p.strip_prefix("/status/"))
                            .unwrap_or("200")
                            .to_string();
                        let reply = format!("HTTP/1.1 {status} X\r\ncontent-length: 0\r\n\r\n");
                        if s.write_all(reply.as_bytes()).await.is_err() {
                            return;
                        }
                    }
                    match s.read(&mut chunk).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => buf.extend_from_slice(&chunk[..n]),
                    }
                }
            });
        }
    });
    (addr, requests)
}

/// `retries.retryOn` decides which answers are retried, as Istio configures Envoy: without it,
/// Istio's default (503 and connect failures); `5xx` every 5xx; `gateway-error` 502-504;
/// status codes in the list replace the default 503.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retry_on_selects_which_answers_are_retried() {
    let (up, requests) = status_upstream().await;
    let yaml = format!(
        r#"{head}  - match: [{{uri: {{prefix: /five}}}}]
    retries: {{attempts: 3, retryOn: 5xx}}
    rewrite: {{uri: /status}}
    route: [{{destination: {{host: up.internal}}}}]
  - match: [{{uri: {{prefix: /gw}}}}]
    retries: {{attempts: 3, retryOn: "gateway-error"}}
    rewrite: {{uri: /status}}
    route: [{{destination: {{host: up.internal}}}}]
  - match: [{{uri: {{prefix: /codes}}}}]
    retries: {{attempts: 3, retryOn: "connect-failure,500"}}
    rewrite: {{uri: /status}}
    route: [{{destination: {{host: up.internal}}}}]
  - match: [{{uri: {{prefix: /none}}}}]
    retries: {{attempts: 0}}
    rewrite: {{uri: /status}}
    route: [{{destination: {{host: up.internal}}}}]
  - match: [{{uri: {{prefix: /default}}}}]
    rewrite: {{uri: /status}}
    route: [{{destination: {{host: up.internal}}}}]
{se}"#,
        head = gateway_and_route_head(),
        se = service_entry("up.internal", &[up]),
    );
    let proxy = start(&yaml);
    let base = format!("http://{}", addr(&proxy, 0));
    let c = client();
    let attempts = |path: &'static str, want: u16| {
        let c = c.clone();
        let url = format!("{base}{path}");
        let requests = requests.clone();
        async move {
            let before = requests.load(std::sync::atomic::Ordering::SeqCst);
            let r = c.get(url).send().await.unwrap();
            assert_eq!(r.status(), want, "{path}");
            requests.load(std::sync::atomic::Ordering::SeqCst) - before
        }
    };
    // Istio's default policy: 2 retries on 503 only.
    assert_eq!(attempts("/default/503", 503).await, 3);
    assert_eq!(attempts("/default/500", 500).await, 1);
    assert_eq!(attempts("/five/500", 500).await, 4);
    assert_eq!(attempts("/five/503", 503).await, 4);
    assert_eq!(attempts("/five/404", 404).await, 1);
    assert_eq!(attempts("/gw/500", 500).await, 1);
    assert_eq!(attempts("/gw/504", 504).await, 4);
    assert_eq!(attempts("/codes/500", 500).await, 4);
    assert_eq!(attempts("/codes/503", 503).await, 1);
    assert_eq!(attempts("/none/503", 503).await, 1);
}

/// A ServiceEntry without `resolution` is Istio's NONE: connections go to their original
/// destination. A gateway's requests have none, so a route to it answers 503 (UH), and
/// `warden check` says why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resolution_none_at_a_gateway_is_503_and_check_says_why() {
    let yaml = format!(
        r#"{head}  - route: [{{destination: {{host: external.example.com}}}}]
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {{name: external}}
spec:
  hosts: [external.example.com]
  ports: [{{number: 80, name: http, protocol: HTTP}}]
  location: MESH_EXTERNAL
"#,
        head = gateway_and_route_head(),
    );
    let proxy = start(&yaml);
    let r = client()
        .get(format!("http://{}/", addr(&proxy, 0)))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 503);
    assert_eq!(r.text().await.unwrap(), "no healthy upstream");
    let loaded = warden_config::load_str("gw.yaml", &yaml).unwrap();
    let snap = warden_proxy::Snapshot::build(loaded, &Default::default(), None).unwrap();
    let text = warden_proxy::runtime::check::describe(&snap);
    assert!(
        text.contains("ORIGINAL_DST (resolution NONE") && text.contains("a gateway has none"),
        "{text}"
    );
}
