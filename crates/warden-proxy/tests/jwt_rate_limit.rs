//! Identity as a rate-limit key, through the proxy over real sockets: `examples/jwt/gateway.yaml`
//! (its minute windows made a day, so no refill can land during a slow run and the counts are
//! exact): two users' tokens (PyJWT) over 8 connections each get exactly their per-user limit,
//! anonymous clients exactly their per-IP limit, `/login` its per-IP limit; and the
//! `metadata` action on jwt_authn's payload and `request_headers` on an `outputClaimToHeaders`
//! header key the local limiter's descriptors as Istio users write them.

mod common;

use common::*;
use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use warden_load::load::{self, LoadConfig};

const SECRET: &str = "demo-secret-of-thirty-two-bytes!!";

fn python() -> &'static str {
    for p in ["/usr/bin/python3", "python3"] {
        let ok = Command::new(p)
            .args(["-c", "import jwt, cryptography"])
            .status()
            .is_ok_and(|s| s.success());
        if ok {
            return p;
        }
    }
    panic!(
        "no python3 with PyJWT and cryptography (apt-get install python3-jwt python3-cryptography)"
    )
}

/// HS256 tokens of the example's issuer for these subjects (PyJWT via tests/jwt/mint.py).
fn tokens(subs: &[&str]) -> Vec<String> {
    let dir = warden_testkit::TempDir::new("jwt-rl").unwrap();
    let exp = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
        + 3600;
    let mut toks = serde_json::Map::new();
    for s in subs {
        toks.insert(
            (*s).into(),
            serde_json::json!({"kid": "demo", "claims":
                {"iss": "https://auth.example.com", "aud": "api", "sub": s, "exp": exp}}),
        );
    }
    let spec = serde_json::json!({"keys": {"demo": {"alg": "HS256", "secret": SECRET}},
        "tokens": toks});
    let spec_path = dir.path().join("spec.json");
    std::fs::write(&spec_path, spec.to_string()).unwrap();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/jwt/mint.py");
    let out = Command::new(python())
        .arg(script)
        .arg(&spec_path)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    subs.iter()
        .map(|s| v["tokens"][*s].as_str().unwrap().to_owned())
        .collect()
}

/// Exactly `count` GETs from `source` over `connections` connections; status -> count.
async fn send(
    url: &str,
    source: &str,
    count: u64,
    connections: usize,
    token: Option<&str>,
) -> BTreeMap<u16, u64> {
    let headers = token
        .map(|t| {
            vec![(
                "authorization".parse().unwrap(),
                format!("Bearer {t}").parse().unwrap(),
            )]
        })
        .unwrap_or_default();
    let report = load::run(LoadConfig {
        target: url.to_string(),
        connections,
        requests: Some(count),
        duration: None,
        timeout: Duration::from_secs(10),
        source_ips: vec![source.parse().unwrap()],
        headers,
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn per_user_limits_are_exact_under_concurrency() {
    let example = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/jwt/gateway.yaml"),
    )
    .unwrap()
    .replace("number: 8080", "number: 0")
    .replace("unit: Minute", "unit: Day");
    let proxy = start(&example);
    let base = format!("http://{}", addr(&proxy, 0));
    let api = format!("{base}/api/items");
    let t = tokens(&["alice", "bob"]);

    // Two users, 8 connections each, at once: each gets exactly 100.
    let (alice, bob) = tokio::join!(
        send(&api, "127.0.0.1", 150, 8, Some(&t[0])),
        send(&api, "127.0.0.1", 130, 8, Some(&t[1])),
    );
    assert_eq!(alice, codes(&[(200, 100), (429, 50)]), "alice");
    assert_eq!(bob, codes(&[(200, 100), (429, 30)]), "bob");
    // Anonymous callers: 10 per client IP, whatever the users did from the same address.
    let (one, two) = tokio::join!(
        send(&api, "127.0.0.1", 30, 8, None),
        send(&api, "127.0.0.2", 25, 8, None),
    );
    assert_eq!(
        one,
        codes(&[(200, 10), (429, 20)]),
        "anonymous from 127.0.0.1"
    );
    assert_eq!(
        two,
        codes(&[(200, 10), (429, 15)]),
        "anonymous from 127.0.0.2"
    );
    // /login: 5 per client IP, tokens or not.
    let login = send(&format!("{base}/login"), "127.0.0.2", 8, 4, Some(&t[0])).await;
    assert_eq!(login, codes(&[(200, 5), (429, 3)]));
    // A forged token is refused before any limit counts it.
    let forged = format!("{}x", t[1]);
    let r = client().get(&api).bearer_auth(forged).send().await.unwrap();
    assert_eq!(r.status(), 401);

    // Who is being limited: users by their principal (alice's /login 429s too), anonymous
    // callers by address.
    let admin = proxy.admin_addr().unwrap();
    let top: serde_json::Value = client()
        .get(format!("http://{admin}/ratelimit/top"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let seen: Vec<(String, u64)> = top["local"]["clients"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["client"].as_str().unwrap().to_string(),
                c["count"].as_u64().unwrap(),
            )
        })
        .collect();
    let want = [
        ("https://auth.example.com/alice", 53),
        ("https://auth.example.com/bob", 30),
        ("127.0.0.1", 20),
        ("127.0.0.2", 15),
    ];
    let want: Vec<(String, u64)> = want.iter().map(|(c, n)| (c.to_string(), *n)).collect();
    assert_eq!(seen, want, "{top}");
}

/// Istio's way: an EnvoyFilter local rate limit whose route `rate_limits` take the user from
/// jwt_authn's dynamic metadata (`payload.sub`) or from the `outputClaimToHeaders` header.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn envoy_metadata_and_claim_header_actions_key_descriptors() {
    let t = tokens(&["carol", "dave"]);
    let up = echo_http("app").await;
    for action in [
        "{metadata: {descriptor_key: user, metadata_key: {key: envoy.filters.http.jwt_authn, path: [{key: payload}, {key: sub}]}}}",
        "{request_headers: {header_name: x-user, descriptor_key: user}}",
    ] {
        let policies = format!(
            r#"---
apiVersion: security.istio.io/v1
kind: RequestAuthentication
metadata: {{name: users}}
spec:
  jwtRules:
  - issuer: "https://auth.example.com"
    jwks: '{{"keys":[{{"kty":"oct","kid":"demo","k":"ZGVtby1zZWNyZXQtb2YtdGhpcnR5LXR3by1ieXRlcyEh"}}]}}'
    outputClaimToHeaders: [{{header: x-user, claim: sub}}]
---
apiVersion: networking.istio.io/v1alpha3
kind: EnvoyFilter
metadata: {{name: per-user}}
spec:
  configPatches:
  - applyTo: HTTP_FILTER
    match: {{context: GATEWAY, listener: {{filterChain: {{filter: {{name: envoy.filters.network.http_connection_manager}}}}}}}}
    patch:
      operation: INSERT_BEFORE
      value:
        name: envoy.filters.http.local_ratelimit
        typed_config:
          "@type": type.googleapis.com/udpa.type.v1.TypedStruct
          type_url: type.googleapis.com/envoy.extensions.filters.http.local_ratelimit.v3.LocalRateLimit
          value:
            stat_prefix: http_local_rate_limiter
            token_bucket: {{max_tokens: 1000, tokens_per_fill: 1000, fill_interval: 86400s}}
            filter_enabled: {{runtime_key: e, default_value: {{numerator: 100, denominator: HUNDRED}}}}
            filter_enforced: {{runtime_key: f, default_value: {{numerator: 100, denominator: HUNDRED}}}}
            descriptors:
            - entries: [{{key: user, value: carol}}]
              token_bucket: {{max_tokens: 3, tokens_per_fill: 3, fill_interval: 86400s}}
            - entries: [{{key: user, value: dave}}]
              token_bucket: {{max_tokens: 5, tokens_per_fill: 5, fill_interval: 86400s}}
  - applyTo: HTTP_ROUTE
    match: {{context: GATEWAY, routeConfiguration: {{vhost: {{route: {{action: ANY}}}}}}}}
    patch:
      operation: MERGE
      value:
        route:
          rate_limits:
          - actions: [{action}]
"#
        );
        let proxy = start(&http_config(up.addr, "", &policies));
        let url = format!("http://{}/", addr(&proxy, 0));
        let (carol, dave) = tokio::join!(
            send(&url, "127.0.0.1", 10, 8, Some(&t[0])),
            send(&url, "127.0.0.1", 10, 8, Some(&t[1])),
        );
        assert_eq!(carol, codes(&[(200, 3), (429, 7)]), "{action}");
        assert_eq!(dave, codes(&[(200, 5), (429, 5)]), "{action}");
        // A spoofed claim header is removed before the limiter reads it.
        let r = client()
            .get(&url)
            .header("x-user", "dave")
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200, "{action}: no token, no user descriptor");
    }
}

/// The same per-user limit through the global limiter: `warden ratelimit` on Redis, the
/// EnvoyFilter's route `rate_limits` taking the user from jwt_authn's metadata; two users over
/// 8 connections each get exactly the RLS's 7 per minute (its clock is frozen in one window).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn per_user_limits_through_warden_ratelimit_and_redis() {
    use std::sync::Arc;
    use warden_ratelimit::{Backend, ConfigSource, ManualClock, Server, Settings};
    let redis = warden_testkit::RedisServer::start().expect("redis-server");
    let dir = warden_testkit::TempDir::new("jwt-rls").unwrap();
    let config = dir
        .write(
            "config.yaml",
            "domain: jwt\ndescriptors:\n  - key: user\n    rate_limit: {unit: minute, requests_per_unit: 7}\n",
        )
        .unwrap();
    let mut s = Settings::loopback_for_tests(ConfigSource::Paths(vec![config]));
    s.backend = Backend::Redis;
    s.redis.socket_type = "tcp".into();
    s.redis.url = redis.addr();
    s.redis.timeout = Duration::from_secs(2);
    let rls = Server::start_with_clock(s, Arc::new(ManualClock::new(1_700_000_010_000)))
        .await
        .expect("rls starts");
    let t = tokens(&["erin", "frank"]);
    let up = echo_http("app").await;
    let policies = format!(
        r#"---
apiVersion: security.istio.io/v1
kind: RequestAuthentication
metadata: {{name: users}}
spec:
  jwtRules:
  - issuer: "https://auth.example.com"
    jwks: '{{"keys":[{{"kty":"oct","kid":"demo","k":"ZGVtby1zZWNyZXQtb2YtdGhpcnR5LXR3by1ieXRlcyEh"}}]}}'
---
apiVersion: networking.istio.io/v1alpha3
kind: EnvoyFilter
metadata: {{name: per-user-global}}
spec:
  configPatches:
  - applyTo: HTTP_FILTER
    match: {{context: GATEWAY, listener: {{filterChain: {{filter: {{name: envoy.filters.network.http_connection_manager, subFilter: {{name: envoy.filters.http.router}}}}}}}}}}
    patch:
      operation: INSERT_BEFORE
      value:
        name: envoy.filters.http.ratelimit
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.http.ratelimit.v3.RateLimit
          domain: jwt
          failure_mode_deny: true
          timeout: 2s
          rate_limit_service:
            grpc_service: {{envoy_grpc: {{cluster_name: "outbound|{port}||127.0.0.1"}}}}
            transport_api_version: V3
  - applyTo: VIRTUAL_HOST
    match: {{context: GATEWAY, routeConfiguration: {{vhost: {{name: "", route: {{action: ANY}}}}}}}}
    patch:
      operation: MERGE
      value:
        rate_limits:
        - actions:
          - metadata: {{descriptor_key: user, metadata_key: {{key: envoy.filters.http.jwt_authn, path: [{{key: payload}}, {{key: sub}}]}}}}
"#,
        port = rls.grpc_addr().port()
    );
    let proxy = start(&http_config(up.addr, "", &policies));
    let url = format!("http://{}/", addr(&proxy, 0));
    let (erin, frank) = tokio::join!(
        send(&url, "127.0.0.1", 20, 8, Some(&t[0])),
        send(&url, "127.0.0.1", 12, 8, Some(&t[1])),
    );
    assert_eq!(erin, codes(&[(200, 7), (429, 13)]), "erin");
    assert_eq!(frank, codes(&[(200, 7), (429, 5)]), "frank");
    // Without a token no descriptor is made: the request is not limited.
    let anon = send(&url, "127.0.0.1", 10, 4, None).await;
    assert_eq!(anon, codes(&[(200, 10)]));
    proxy.shutdown(Duration::from_secs(1));
    rls.shutdown().await;
}
