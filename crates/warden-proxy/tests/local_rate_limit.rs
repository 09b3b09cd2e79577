//! Local rate limiting through the proxy over real sockets, counted at the upstream: the seed's
//! 300/min per client IP (clients bound to 127.0.0.1 and 127.0.0.2), 1000 concurrent
//! connections, XFF from an untrusted client, state kept across reload, the L4 connection limit.

mod common;

use common::*;
use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use warden_load::load::{self, LoadConfig};
use warden_proxy::{ConfigSource, Proxy, ProxyOptions, RunningProxy};

const LOCAL_1: &str = "127.0.0.1";
const LOCAL_2: &str = "127.0.0.2";

/// The seed's limit as a RateLimitPolicy: 300 per client address. The seed's window is a
/// minute; a day keeps the count exact here, since a minute refills one token every 200 ms,
/// which a slow (debug, shared-core) test run can reach.
const PER_IP_300: &str = r#"---
apiVersion: warden.dev/v1alpha1
kind: RateLimitPolicy
metadata: {name: per-ip}
spec:
  local:
    rules:
    - clientSelectors:
      - sourceCIDR: {type: Distinct, value: 0.0.0.0/0}
      limit: {requests: 300, unit: Day}
"#;

/// Exactly `count` GETs from `source` over `connections` connections; status -> count
/// (transport errors as 0).
async fn send(
    url: &str,
    source: &str,
    count: u64,
    connections: usize,
    headers: &[(&str, &str)],
) -> BTreeMap<u16, u64> {
    let report = load::run(LoadConfig {
        target: url.to_string(),
        connections,
        requests: Some(count),
        duration: None,
        timeout: Duration::from_secs(10),
        source_ips: vec![source.parse().unwrap()],
        headers: headers
            .iter()
            .map(|(n, v)| (n.parse().unwrap(), v.parse().unwrap()))
            .collect(),
        ..LoadConfig::default()
    })
    .await
    .unwrap();
    let mut codes = report.status_codes.clone();
    let errors: u64 = report.errors.values().sum();
    if errors > 0 {
        codes.insert(0, errors);
    }
    codes
}

fn codes(pairs: &[(u16, u64)]) -> BTreeMap<u16, u64> {
    pairs.iter().copied().collect()
}

async fn stop(proxy: RunningProxy) {
    tokio::task::spawn_blocking(move || proxy.shutdown(Duration::from_secs(1)))
        .await
        .unwrap();
}

fn client_from(source: &str) -> reqwest::Client {
    reqwest::Client::builder()
        .no_proxy()
        .local_address(source.parse::<IpAddr>().unwrap())
        .build()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seed_effect_301st_request_is_429_and_never_reaches_the_upstream() {
    let up = counting_echo().await;
    let proxy = start(&http_config(up.http_addr().unwrap(), "", PER_IP_300));
    let url = format!("http://{}/", addr(&proxy, 0));

    assert_eq!(
        send(&url, LOCAL_1, 301, 4, &[]).await,
        codes(&[(200, 300), (429, 1)])
    );
    assert_eq!(up.total(), 300);

    // The 429 itself: Envoy's body and content type, plus the x-ratelimit headers.
    let r = client_from(LOCAL_1).get(&url).send().await.unwrap();
    assert_eq!(r.status(), 429);
    assert_eq!(r.headers()["content-type"], "text/plain");
    assert_eq!(r.headers()["x-ratelimit-limit"], "300");
    assert_eq!(r.headers()["x-ratelimit-remaining"], "0");
    assert!(r.headers().contains_key("x-ratelimit-reset"));
    assert_eq!(r.text().await.unwrap(), "local_rate_limited");
    assert_eq!(up.total(), 300);
    // A gRPC request gets gRPC's form of it: the limiter reads `content-type` from the
    // request's lines as read (no stage here reads headers, so there is no map).
    let r = client_from(LOCAL_1)
        .get(&url)
        .header("content-type", "application/grpc+proto")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["grpc-status"], "14");
    assert_eq!(r.headers()["grpc-message"], "local_rate_limited");
    assert_eq!(up.total(), 300);

    // Another client address has its own bucket.
    assert_eq!(send(&url, LOCAL_2, 90, 4, &[]).await, codes(&[(200, 90)]));
    assert_eq!(up.total(), 390);
    let r = client_from(LOCAL_2).get(&url).send().await.unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["x-ratelimit-limit"], "300");
    assert_eq!(r.headers()["x-ratelimit-remaining"], "209");

    let text = proxy.metrics_text();
    for line in [
        "warden_local_rate_limit_requests_total{group=\"RateLimitPolicy/per-ip\",result=\"enforced\"} 3",
        "warden_local_rate_limit_requests_total{group=\"RateLimitPolicy/per-ip\",result=\"ok\"} 391",
        "warden_local_rate_limit_keys 2",
        "warden_local_rate_limit_evictions_total 0",
    ] {
        assert!(text.contains(line), "missing {line:?} in\n{text}");
    }
    stop(proxy).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exactly_300_reach_the_upstream_under_1000_concurrent_connections() {
    let up = counting_echo().await;
    let mut opts = ProxyOptions::loopback(inline(&http_config(
        up.http_addr().unwrap(),
        "",
        PER_IP_300,
    )));
    opts.concurrency = 2;
    let proxy = Proxy::start(opts).unwrap();
    let url = format!("http://{}/", addr(&proxy, 0));
    assert_eq!(
        send(&url, LOCAL_1, 2000, 1000, &[]).await,
        codes(&[(200, 300), (429, 1700)])
    );
    assert_eq!(up.total(), 300);
    stop(proxy).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn x_forwarded_for_from_an_untrusted_client_does_not_dodge_the_limit() {
    let up = counting_echo().await;
    let proxy = start(&http_config(up.http_addr().unwrap(), "", PER_IP_300));
    let url = format!("http://{}/", addr(&proxy, 0));
    let c = client_from(LOCAL_1);
    let mut statuses = BTreeMap::new();
    for i in 0..301u32 {
        let r = c
            .get(&url)
            .header("x-forwarded-for", format!("198.51.{}.{}", i / 256, i % 256))
            .send()
            .await
            .unwrap();
        *statuses.entry(r.status().as_u16()).or_insert(0u64) += 1;
    }
    assert_eq!(statuses, codes(&[(200, 300), (429, 1)]));
    assert_eq!(up.total(), 300);
    stop(proxy).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bucket_state_survives_a_reload_of_an_unchanged_rule() {
    let up = counting_echo().await;
    let dir = warden_testkit::TempDir::new("local-rl-reload").unwrap();
    let direct = "\n  - name: direct\n    match: [{uri: {prefix: /direct}}]\n    directResponse: {status: 204}";
    let file = dir
        .write(
            "gw.yaml",
            &http_config(up.http_addr().unwrap(), "", PER_IP_300),
        )
        .unwrap();
    let proxy = Proxy::start(ProxyOptions::loopback(ConfigSource::Paths(vec![
        file.clone()
    ])))
    .unwrap();
    let url = format!("http://{}/", addr(&proxy, 0));
    assert_eq!(send(&url, LOCAL_1, 300, 4, &[]).await, codes(&[(200, 300)]));

    // Routes change, the rule does not: the client's bucket stays empty.
    std::fs::write(
        &file,
        http_config(up.http_addr().unwrap(), direct, PER_IP_300),
    )
    .unwrap();
    proxy.reload().unwrap();
    assert_eq!(send(&url, LOCAL_1, 5, 1, &[]).await, codes(&[(429, 5)]));
    let r = client_from(LOCAL_1)
        .get(format!("{url}direct"))
        .send()
        .await
        .unwrap();
    assert_eq!(
        r.status(),
        429,
        "the new route is limited by the same bucket"
    );

    // A changed rule starts full.
    std::fs::write(
        &file,
        http_config(
            up.http_addr().unwrap(),
            direct,
            &PER_IP_300.replace("300", "301"),
        ),
    )
    .unwrap();
    proxy.reload().unwrap();
    assert_eq!(send(&url, LOCAL_1, 5, 1, &[]).await, codes(&[(200, 5)]));
    assert_eq!(up.total(), 305);
    stop(proxy).await;
}

async fn tcp_from(source: &str, to: SocketAddr) -> tokio::net::TcpStream {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket
        .bind(SocketAddr::new(source.parse().unwrap(), 0))
        .unwrap();
    socket.connect(to).await.unwrap()
}

/// Write `hello`, half-close, read everything back.
async fn round_trip(source: &str, to: SocketAddr) -> Vec<u8> {
    let mut s = tcp_from(source, to).await;
    let _ = s.write_all(b"hello").await;
    let _ = s.shutdown().await;
    let mut got = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut got))
        .await
        .expect("connection ends");
    got
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tcp_connection_limit_closes_over_limit_connections_writing_nothing() {
    let up = echo_tcp().await;
    let yaml = format!(
        r#"{gw}
{tcp}---
apiVersion: warden.dev/v1alpha1
kind: RateLimitPolicy
metadata: {{name: conns}}
spec:
  targetRefs: [{{kind: Gateway, name: gw}}]
  local:
    connections:
    - sourceCIDR: {{type: Distinct, value: 0.0.0.0/0}}
      limit: {{requests: 3, unit: Day}}
"#,
        gw = gateway(&[(0, "TCP")]),
        tcp = tcp_route(up.port()),
    );
    let proxy = start(&yaml);
    let to = addr(&proxy, 0);
    for _ in 0..3 {
        assert_eq!(round_trip(LOCAL_1, to).await, b"hellobye");
    }
    assert_eq!(
        round_trip(LOCAL_1, to).await,
        b"",
        "4th connection is closed"
    );
    assert_eq!(round_trip(LOCAL_2, to).await, b"hellobye");
    let text = proxy.metrics_text();
    assert!(
        text.contains("warden_local_rate_limit_connections_total{group=\"RateLimitPolicy/conns connections\",result=\"rate_limited\"} 1"),
        "{text}"
    );
    stop(proxy).await;
}

/// A local rate limit EnvoyFilter for `context` (1 request per minute).
fn local_limit_filter(context: &str) -> String {
    format!(
        r#"---
apiVersion: networking.istio.io/v1alpha3
kind: EnvoyFilter
metadata: {{name: local, namespace: istio-system}}
spec:
  configPatches:
  - applyTo: HTTP_FILTER
    match:
      context: {context}
      listener: {{filterChain: {{filter: {{name: envoy.filters.network.http_connection_manager}}}}}}
    patch:
      operation: INSERT_BEFORE
      value:
        name: envoy.filters.http.local_ratelimit
        typed_config:
          "@type": type.googleapis.com/udpa.type.v1.TypedStruct
          type_url: type.googleapis.com/envoy.extensions.filters.http.local_ratelimit.v3.LocalRateLimit
          value:
            stat_prefix: http_local_rate_limiter
            token_bucket: {{max_tokens: 1, tokens_per_fill: 1, fill_interval: 60s}}
            filter_enabled: {{runtime_key: e, default_value: {{numerator: 100, denominator: HUNDRED}}}}
            filter_enforced: {{runtime_key: f, default_value: {{numerator: 100, denominator: HUNDRED}}}}
"#
    )
}

/// EnvoyFilter `match.context` is honoured: a SIDECAR_INBOUND patch does not apply to a
/// gateway (and `warden check` says so), a GATEWAY one does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn envoy_filter_context_selects_gateway_or_sidecar() {
    let up = echo_http("up").await;
    for (context, second) in [("SIDECAR_INBOUND", 200), ("GATEWAY", 429), ("ANY", 429)] {
        let yaml = format!(
            "{}{}",
            http_config(up.addr, "", ""),
            local_limit_filter(context)
        );
        let proxy = start(&yaml);
        let url = format!("http://{}/", addr(&proxy, 0));
        let c = client();
        assert_eq!(c.get(&url).send().await.unwrap().status(), 200, "{context}");
        assert_eq!(
            c.get(&url).send().await.unwrap().status(),
            second,
            "{context}"
        );
        let loaded = warden_config::load_str("t.yaml", &yaml).unwrap();
        let snap = warden_proxy::Snapshot::build(loaded, &Default::default(), None).unwrap();
        let said = snap.warnings.iter().any(|w| {
            w.message
                .contains("is for sidecars; this proxy is a gateway")
        });
        assert_eq!(
            said,
            context == "SIDECAR_INBOUND",
            "{context}: {:?}",
            snap.warnings
        );
    }
}

/// Escalating bans on a local rule: 3 per day per client on `/login`, then banned 2 s, 3 s.
/// The durations are short so the test can wait one out; the schedule's arithmetic over hours
/// is tested on a manual clock (warden-local-ratelimit's `ban_table`, warden-ratelimit's
/// `bans` tests).
const LOGIN_BAN: &str = r#"---
apiVersion: warden.dev/v1alpha1
kind: RateLimitPolicy
metadata: {name: login}
spec:
  local:
    rules:
    - clientSelectors:
      - sourceCIDR: {type: Distinct, value: 0.0.0.0/0}
        path: {type: Exact, value: /login}
      limit: {requests: 3, unit: Day}
      ban: {durations: [2s, 3s], forgetAfter: 1h}
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_over_its_limit_is_banned_for_longer_each_time_and_can_be_lifted() {
    let up = counting_echo().await;
    let proxy = start(&http_config(up.http_addr().unwrap(), "", LOGIN_BAN));
    let login = format!("http://{}/login", addr(&proxy, 0));
    let admin = format!("http://{}", proxy.admin_addr().unwrap());
    let attacker = client_from(LOCAL_1);
    let get = |c: &reqwest::Client| c.get(&login).send();

    for _ in 0..3 {
        let r = get(&attacker).await.unwrap();
        assert_eq!(r.status(), 200);
        assert!(r.headers().get("retry-after").is_none());
    }
    // The offence: refused, the first ban starts, and the client is told how long.
    let r = get(&attacker).await.unwrap();
    assert_eq!(r.status(), 429);
    assert_eq!(r.headers()["retry-after"], "2");
    assert_eq!(r.headers()["x-ratelimit-remaining"], "0");
    assert_eq!(r.text().await.unwrap(), "local_rate_limited");
    // Banned: refused without counting, whatever the bucket says.
    let r = get(&attacker).await.unwrap();
    assert_eq!(r.status(), 429);
    let secs: u64 = r.headers()["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!((1..=2).contains(&secs), "{secs}");
    // Another client, and the attacker elsewhere, are not banned.
    assert_eq!(get(&client_from(LOCAL_2)).await.unwrap().status(), 200);
    let home = format!("http://{}/", addr(&proxy, 0));
    assert_eq!(attacker.get(&home).send().await.unwrap().status(), 200);

    let bans: serde_json::Value = attacker
        .get(format!("{admin}/ratelimit/bans"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let listed = bans["bans"].as_array().unwrap();
    assert_eq!(listed.len(), 1, "{bans}");
    assert_eq!(listed[0]["client"], LOCAL_1);
    assert_eq!(listed[0]["strikes"], 1);
    assert_eq!(
        listed[0]["rule"],
        "RateLimitPolicy/login spec.local.rules[0]"
    );
    let metrics = proxy.metrics_text();
    assert!(
        metrics.contains("warden_local_rate_limit_bans 1"),
        "{metrics}"
    );
    let policy = attacker
        .get(format!("{admin}/ratelimit/bans/authorizationpolicy"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(policy.contains("action: DENY"), "{policy}");
    assert!(policy.contains(&format!("- \"{LOCAL_1}\"")), "{policy}");

    // The ban ends; the bucket is still empty, so the next request is the second offence.
    tokio::time::sleep(Duration::from_millis(2100)).await;
    let r = get(&attacker).await.unwrap();
    assert_eq!(r.status(), 429);
    assert_eq!(
        r.headers()["retry-after"],
        "3",
        "the schedule's second period"
    );

    // Lifted on the admin port: strikes forgotten, so the next offence is a first one again.
    let lifted: serde_json::Value = attacker
        .delete(format!("{admin}/ratelimit/bans?client={LOCAL_1}"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(lifted["lifted"], 1);
    let r = get(&attacker).await.unwrap();
    assert_eq!(r.status(), 429);
    assert_eq!(r.headers()["retry-after"], "2");
    // 3 admitted logins, 1 from the other client, 1 elsewhere.
    assert_eq!(up.total(), 5);
    stop(proxy).await;
}

#[test]
fn a_ban_needs_a_counted_rule_and_valid_durations() {
    for (rule, field) in [
        (
            "- limit: {requests: 3, unit: Day}\n      ban: {durations: [2s], forgetAfter: 1h}",
            "spec.local.rules[0].ban",
        ),
        (
            "- clientSelectors: [{sourceCIDR: {type: Distinct, value: 0.0.0.0/0}}]\n      limit: {requests: 3, unit: Day}\n      ban: {durations: [2s, 0s], forgetAfter: 1h}",
            "spec.local.rules[0].ban.durations[1]",
        ),
    ] {
        let yaml = format!(
            "apiVersion: warden.dev/v1alpha1\nkind: RateLimitPolicy\nmetadata: {{name: bad}}\nspec:\n  local:\n    rules:\n    {rule}\n"
        );
        let err = Proxy::start(ProxyOptions::loopback(inline(&yaml)))
            .err()
            .expect("refused")
            .to_string();
        assert!(err.contains(field), "{field} not in {err}");
    }
}
