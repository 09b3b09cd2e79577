//! Global rate limiting end to end: real proxies on loopback, the embedded limiter, and
//! `warden ratelimit` in process with a real redis-server; clients bound to 127.0.0.1 and
//! 127.0.0.2 so the limiter sees two client addresses.

mod common;

use common::{addr, counting_echo, gateway, inline, service_entry};
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use warden_proxy::{Proxy, ProxyOptions, RunningProxy};
use warden_ratelimit::{Backend, ConfigSource, ManualClock, RunningServer, Server, Settings};
use warden_testkit::RedisServer;

const POLICY: &str = include_str!("../../../examples/ratelimit-global/policy-per-ip-path.yaml");
const SEED_FILTERS: &str =
    include_str!("../../../examples/ratelimit-global/seed-envoyfilter-global.yaml");

fn examples_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../examples/ratelimit-global")
}

/// Gateway on a free port, every host routed to the echo upstream.
fn routes(upstream: SocketAddr) -> String {
    format!(
        "{gw}---\napiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata:\n  name: api\nspec:\n  hosts: [\"*\"]\n  gateways: [gw]\n  http:\n  - route:\n    - destination: {{host: echo.internal}}\n{se}",
        gw = gateway(&[(0, "HTTP")]),
        se = service_entry("echo.internal", &[upstream]),
    )
}

/// The seed's EnvoyFilters pointed at `rls`, with `failure_mode_deny` and `timeout` set.
fn seed_filters(rls: SocketAddr, fail_closed: bool, timeout: &str) -> String {
    SEED_FILTERS
        .replace(
            "outbound|8081||ratelimit.default.svc.cluster.local",
            &format!("outbound|{}||127.0.0.1", rls.port()),
        )
        .replace(
            "failure_mode_deny: true",
            &format!("failure_mode_deny: {fail_closed}"),
        )
        .replace("timeout: 10s", &format!("timeout: {timeout}"))
}

/// Routes to `upstream` plus the seed's EnvoyFilters pointed at `rls`, failing open, 1 s timeout.
fn seed_config(upstream: SocketAddr, rls: SocketAddr) -> String {
    format!(
        "{}---\n{}",
        routes(upstream),
        seed_filters(rls, false, "1s")
    )
}

fn start_proxy(yaml: &str) -> RunningProxy {
    Proxy::start(ProxyOptions::loopback(inline(yaml))).expect("proxy starts")
}

fn client_from(ip: [u8; 4]) -> reqwest::Client {
    reqwest::Client::builder()
        .no_proxy()
        .local_address(IpAddr::from(ip))
        .build()
        .unwrap()
}

/// Send `n` GETs (at most 16 in flight); returns (status counts: 200, 429, 500, other).
async fn send(client: &reqwest::Client, url: &str, n: usize) -> [usize; 4] {
    send_with(client, url, n, 16).await
}

/// [`send`] with at most `in_flight` requests at once.
async fn send_with(client: &reqwest::Client, url: &str, n: usize, in_flight: usize) -> [usize; 4] {
    use futures_util::StreamExt;
    let results: Vec<u16> = futures_util::stream::iter(0..n)
        .map(|i| {
            let c = client.clone();
            // Varying query strings: the limit is on the path without the query.
            let url = format!("{url}?i={i}");
            async move { c.get(url).send().await.map_or(0, |r| r.status().as_u16()) }
        })
        .buffer_unordered(in_flight)
        .collect()
        .await;
    let mut out = [0; 4];
    for s in results {
        let slot = match s {
            200 => 0,
            429 => 1,
            500 => 2,
            _ => 3,
        };
        out[slot] += 1;
    }
    out
}

fn counter(p: &RunningProxy, name: &str) -> u64 {
    let text = p.metrics_text();
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("warden_ratelimit_{name}_total ")))
        .and_then(|v| v.parse::<f64>().ok())
        .map_or(0, |v| v as u64)
}

/// Wait out the last seconds of a wall-clock minute: the embedded limiter counts in fixed
/// windows on the system clock, and a test must not straddle two windows.
async fn away_from_minute_edge() {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs();
    if secs % 60 >= 55 {
        tokio::time::sleep(Duration::from_secs(61 - secs % 60)).await;
    }
}

/// `warden ratelimit` on Redis with a frozen clock (one window for the whole test), reading
/// `config` of the examples.
async fn rls_on_redis(
    redis: &RedisServer,
    config: &str,
    grpc: Option<SocketAddr>,
) -> RunningServer {
    let mut s = rls_settings(redis, examples_dir().join(config));
    if let Some(a) = grpc {
        s.grpc_addr = a;
    }
    start_rls(s).await
}

fn rls_settings(redis: &RedisServer, config: PathBuf) -> Settings {
    let mut s = Settings::loopback_for_tests(ConfigSource::Paths(vec![config]));
    s.backend = Backend::Redis;
    s.redis.socket_type = "tcp".into();
    s.redis.url = redis.addr();
    s.redis.timeout = Duration::from_secs(2);
    s
}

async fn start_rls(s: Settings) -> RunningServer {
    start_rls_at(s, 1_700_000_010_000).await
}

async fn start_rls_at(s: Settings, now_millis: u64) -> RunningServer {
    Server::start_with_clock(s, Arc::new(ManualClock::new(now_millis)))
        .await
        .expect("rls starts")
}

/// `warden ratelimit` on Redis with the seed's descriptors at 3000/min and leases of
/// `fraction` of it. A lease lasts until its window ends on the proxy's clock, so the service's
/// clock is frozen at the real time, away from a minute's end. Keep the dir while it runs.
async fn rls_leasing_3000_per_minute(
    redis: &RedisServer,
    fraction: f64,
) -> (warden_testkit::TempDir, RunningServer) {
    let dir = warden_testkit::TempDir::new("rls-lease").unwrap();
    let config = std::fs::read_to_string(examples_dir().join("ratelimit-config-300.yaml"))
        .unwrap()
        .replace("requests_per_unit: 300", "requests_per_unit: 3000");
    dir.write("config.yaml", &config).unwrap();
    let mut settings = rls_settings(redis, dir.path().to_path_buf());
    settings.limiter.lease.fraction = fraction;
    away_from_minute_edge().await;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap();
    let rls = start_rls_at(settings, now.as_millis() as u64).await;
    (dir, rls)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn embedded_policy_limits_per_ip_and_path() {
    let up = counting_echo().await;
    let proxy = start_proxy(&format!("{}---\n{POLICY}", routes(up.http_addr().unwrap())));
    let base = format!("http://{}", addr(&proxy, 0));
    away_from_minute_edge().await;

    let first = send(
        &client_from([127, 0, 0, 1]),
        &format!("{base}/api/healthz"),
        180,
    )
    .await;
    assert_eq!(first, [100, 80, 0, 0], "180 from 127.0.0.1");
    assert_eq!(up.total(), 100, "exactly 100 reach the upstream");

    let second = send(
        &client_from([127, 0, 0, 2]),
        &format!("{base}/api/healthz"),
        90,
    )
    .await;
    assert_eq!(second, [90, 0, 0, 0], "90 from 127.0.0.2 all pass");
    // Another path is not limited by this rule.
    let other = send(&client_from([127, 0, 0, 1]), &format!("{base}/other"), 5).await;
    assert_eq!(other, [5, 0, 0, 0]);
    assert_eq!(up.total(), 195);

    // A limited response carries Envoy's headers.
    let r = client_from([127, 0, 0, 1])
        .get(format!("{base}/api/healthz"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 429);
    assert_eq!(r.headers()["x-envoy-ratelimited"], "true");
    assert_eq!(r.headers()["x-ratelimit-remaining"], "0");
    assert!(r.headers()["x-ratelimit-limit"]
        .to_str()
        .unwrap()
        .starts_with("100, 100;w=60"));
    // Once an OVER_LIMIT is cached, the limited client costs no decision (a few requests
    // already in flight when the first answer came back were decided too).
    let (over, hits) = (
        counter(&proxy, "over_limit"),
        counter(&proxy, "over_limit_cache_hits"),
    );
    assert_eq!(over + hits, 81, "every 429 counted once");
    assert!(
        over >= 1 && hits >= 60,
        "over_limit {over}, cache hits {hits}"
    );
    assert_eq!(
        counter(&proxy, "ok"),
        190,
        "/other selects no rule: no decision"
    );
    proxy.shutdown(Duration::from_secs(1));
}

/// A direct response behind a global limit waits for the limiter's answer like a proxied
/// request: the seed's 333 until the limit, 429 after it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_direct_response_is_globally_limited() {
    let yaml = format!(
        "{gw}---\napiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata:\n  name: api\nspec:\n  hosts: [\"*\"]\n  gateways: [gw]\n  http:\n  - directResponse: {{status: 333, body: {{string: test}}}}\n---\n{POLICY}",
        gw = gateway(&[(0, "HTTP")]),
    );
    let proxy = start_proxy(&yaml);
    let base = format!("http://{}", addr(&proxy, 0));
    away_from_minute_edge().await;
    // 200, 429, 500, other (the 333s).
    let counts = send(
        &client_from([127, 0, 0, 1]),
        &format!("{base}/api/healthz"),
        120,
    )
    .await;
    assert_eq!(counts, [0, 20, 0, 100], "120 from 127.0.0.1");
    let r = client_from([127, 0, 0, 2])
        .get(format!("{base}/api/healthz"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 333);
    assert_eq!(r.text().await.unwrap(), "test");
    proxy.shutdown(Duration::from_secs(1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seed_envoyfilters_through_warden_ratelimit_and_redis() {
    let redis = RedisServer::start().expect("redis-server");
    let rls = rls_on_redis(&redis, "ratelimit-config.yaml", None).await;
    let up = counting_echo().await;
    let proxy = start_proxy(&format!(
        "{}---\n{}",
        routes(up.http_addr().unwrap()),
        seed_filters(rls.grpc_addr(), true, "1s")
    ));
    let base = format!("http://{}", addr(&proxy, 0));

    let first = send(
        &client_from([127, 0, 0, 1]),
        &format!("{base}/api/healthz"),
        180,
    )
    .await;
    assert_eq!(first, [100, 80, 0, 0], "180 from 127.0.0.1");
    assert_eq!(up.total(), 100);
    let second = send(
        &client_from([127, 0, 0, 2]),
        &format!("{base}/api/healthz"),
        90,
    )
    .await;
    assert_eq!(second, [90, 0, 0, 0], "90 from 127.0.0.2");
    // The key is method + path: a POST to the same path has its own counter.
    let post = client_from([127, 0, 0, 1])
        .post(format!("{base}/api/healthz"))
        .send()
        .await
        .unwrap();
    assert_eq!(post.status(), 200);
    assert_eq!(up.total(), 191);
    let (over, hits) = (
        counter(&proxy, "over_limit"),
        counter(&proxy, "over_limit_cache_hits"),
    );
    assert_eq!(over + hits, 80);
    assert!(
        hits >= 60,
        "most 429s came from the over-limit cache: {hits}"
    );
    proxy.shutdown(Duration::from_secs(1));
    rls.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_proxies_share_one_limit() {
    let redis = RedisServer::start().expect("redis-server");
    let rls = rls_on_redis(&redis, "ratelimit-config-300.yaml", None).await;
    let up = counting_echo().await;
    let yaml = seed_config(up.http_addr().unwrap(), rls.grpc_addr());
    let proxies: Vec<RunningProxy> = (0..3).map(|_| start_proxy(&yaml)).collect();
    let client = client_from([127, 0, 0, 1]);
    let mut passed = 0;
    for p in &proxies {
        let url = format!("http://{}/login", addr(p, 0));
        passed += send(&client, &url, 150).await[0];
    }
    assert_eq!(passed, 300, "300/min held across three proxies");
    assert_eq!(up.total(), 300, "the upstream sees exactly 300");
    for p in proxies {
        p.shutdown(Duration::from_secs(1));
    }
    rls.shutdown().await;
}

/// A limit large enough for quota leases (3000/min, leases of 1% here): the proxies admit most
/// requests on their leases without a call, and across three proxies taking turns the upstream
/// sees exactly the limit once each has spent its lease (a proxy calls again, and hears
/// OVER_LIMIT, only when its lease is spent).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_proxies_on_quota_leases_hold_the_limit_exactly() {
    let redis = RedisServer::start().expect("redis-server");
    let (_dir, rls) = rls_leasing_3000_per_minute(&redis, 0.01).await; // leases of 30
    let up = counting_echo().await;
    let yaml = seed_config(up.http_addr().unwrap(), rls.grpc_addr());
    let proxies: Vec<RunningProxy> = (0..3).map(|_| start_proxy(&yaml)).collect();
    let client = client_from([127, 0, 0, 1]);
    let (mut passed, mut limited) = (0, 0);
    for _round in 0..11 {
        for p in &proxies {
            let [ok, over, ..] = send(&client, &format!("http://{}/login", addr(p, 0)), 100).await;
            passed += ok;
            limited += over;
        }
    }
    // A proxy that last got a lease may hold some of it when its traffic stops: those requests
    // are counted and lost (the limit admits fewer, never more). Spend what is left.
    assert!((2900..=3000).contains(&passed), "{passed} admitted");
    for p in &proxies {
        let url = format!("http://{}/login", addr(p, 0));
        for _ in 0..100 {
            match client.get(&url).send().await.unwrap().status().as_u16() {
                200 => passed += 1,
                429 => break,
                other => panic!("status {other}"),
            }
        }
    }
    assert_eq!(passed, 3000, "3000/min held across three proxies");
    assert!(limited >= 300);
    assert_eq!(up.total(), 3000, "the upstream sees exactly 3000");
    let leased: u64 = proxies.iter().map(|p| counter(p, "lease_hits")).sum();
    let calls: u64 = proxies
        .iter()
        .map(|p| counter(p, "ok") + counter(p, "over_limit"))
        .sum();
    assert!(leased >= 2500, "{leased} requests admitted on leases");
    assert!(calls <= 800, "{calls} RLS calls for 3300 requests");
    for p in proxies {
        p.shutdown(Duration::from_secs(1));
    }
    rls.shutdown().await;
}

/// A burst of concurrent requests on one proxy, then the other proxy: leases reserved for
/// the burst do not take the rest of the limit from the other proxy.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_on_one_proxy_does_not_reserve_the_limit_away() {
    let redis = RedisServer::start().expect("redis-server");
    let (_dir, rls) = rls_leasing_3000_per_minute(&redis, 0.02).await; // leases of 60
    let up = counting_echo().await;
    let yaml = seed_config(up.http_addr().unwrap(), rls.grpc_addr());
    let (a, b) = (start_proxy(&yaml), start_proxy(&yaml));
    let client = client_from([127, 0, 0, 1]);
    let url = |p: &RunningProxy| format!("http://{}/login", addr(p, 0));
    // 64 calls at once with no lease yet: were each to reserve 60, the limit would be gone.
    let [burst, ..] = send_with(&client, &url(&a), 500, 64).await;
    assert_eq!(burst, 500);
    let [rest, ..] = send(&client, &url(&b), 2000).await;
    assert_eq!(rest, 2000, "the other proxy still gets its requests");
    assert_eq!(up.total(), 2500);
    a.shutdown(Duration::from_secs(1));
    b.shutdown(Duration::from_secs(1));
    rls.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rls_down_fails_open_or_closed_and_limiting_resumes() {
    let redis = RedisServer::start().expect("redis-server");
    let rls = rls_on_redis(&redis, "ratelimit-config.yaml", None).await;
    let rls_addr = rls.grpc_addr();
    let up = counting_echo().await;
    let open = start_proxy(&seed_config(up.http_addr().unwrap(), rls_addr));
    let closed = start_proxy(&format!(
        "{}---\n{}",
        routes(up.http_addr().unwrap()),
        seed_filters(rls_addr, true, "1s")
    ));
    let c1 = client_from([127, 0, 0, 1]);
    let open_url = format!("http://{}/api/healthz", addr(&open, 0));
    let closed_url = format!("http://{}/api/healthz", addr(&closed, 0));
    assert_eq!(send(&c1, &open_url, 3).await, [3, 0, 0, 0], "RLS up");

    rls.shutdown().await;
    assert_eq!(send(&c1, &open_url, 5).await, [5, 0, 0, 0], "fail open");
    assert_eq!(
        send(&c1, &closed_url, 5).await,
        [0, 0, 5, 0],
        "fail closed: 500"
    );
    assert!(counter(&open, "failure_mode_allowed") >= 5);
    assert!(counter(&closed, "error") >= 5);

    // Back on the same port and the same Redis: the proxies reconnect by themselves.
    let rls = rls_on_redis(&redis, "ratelimit-config.yaml", Some(rls_addr)).await;
    let mut resumed = [0; 4];
    for _ in 0..50 {
        resumed = send(&c1, &closed_url, 1).await;
        if resumed[0] == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(resumed, [1, 0, 0, 0], "RLS back: requests pass again");
    // The counter kept the 3 + 1 requests counted before and after the outage.
    let rest = send(&c1, &closed_url, 120).await;
    assert_eq!(rest[0], 96, "limiting resumed at 100 per minute: {rest:?}");
    assert_eq!(rest[1], 24);
    open.shutdown(Duration::from_secs(1));
    closed.shutdown(Duration::from_secs(1));
    rls.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local_limit_applies_before_global() {
    let up = counting_echo().await;
    // Local: 5 per minute per IP; global: 10 per minute per IP. The local limit decides first,
    // so the global limiter only ever sees the 5 requests the local one let through.
    let policy = r#"apiVersion: warden.dev/v1alpha1
kind: RateLimitPolicy
metadata:
  name: both
spec:
  local:
    rules:
    - clientSelectors:
      - sourceCIDR: {type: Distinct, value: 0.0.0.0/0}
      limit: {requests: 5, unit: Minute}
  global:
    rules:
    - clientSelectors:
      - sourceCIDR: {type: Distinct, value: 0.0.0.0/0}
      limit: {requests: 10, unit: Minute}
"#;
    let proxy = start_proxy(&format!("{}---\n{policy}", routes(up.http_addr().unwrap())));
    away_from_minute_edge().await;
    let url = format!("http://{}/x", addr(&proxy, 0));
    let got = send(&client_from([127, 0, 0, 1]), &url, 20).await;
    assert_eq!(got, [5, 15, 0, 0]);
    assert_eq!(up.total(), 5);
    assert_eq!(
        counter(&proxy, "ok"),
        5,
        "global saw only what local let through"
    );
    assert_eq!(counter(&proxy, "over_limit"), 0);
    proxy.shutdown(Duration::from_secs(1));
}

/// The seed's Lua edited three ways (lower-cased path, a second header, `replace` for `add`)
/// runs as code: each still limits 100 of 180 by method + path. With `replace`, a client's
/// own `x-envoy-original-limit-rate-path` (a different one per request) does not get it past.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_seed_lua_edited_three_ways_limits_as_before() {
    let redis = RedisServer::start().expect("redis-server");
    let rls = rls_on_redis(&redis, "ratelimit-config.yaml", None).await;
    let up = counting_echo().await;
    let add = r#"request_handle:headers():add("x-envoy-original-limit-rate-path", method .. path)"#;
    let variants = [
        (
            "lower-cased path",
            add.replace("method .. path", "method .. string.lower(path)"),
            "/v1/Login",
            false,
        ),
        (
            "a second header",
            format!(
                "{add}\n                request_handle:headers():add(\"x-limit-method\", method)"
            ),
            "/v2/login",
            false,
        ),
        (
            "replace",
            add.replace(":add(", ":replace("),
            "/v3/login",
            true,
        ),
    ];
    for (what, line, path, forged) in variants {
        let filters = seed_filters(rls.grpc_addr(), true, "1s");
        assert!(filters.contains(add));
        let proxy = start_proxy(&format!(
            "{}---\n{}",
            routes(up.http_addr().unwrap()),
            filters.replace(add, &line)
        ));
        let base = format!("http://{}", addr(&proxy, 0));
        let client = client_from([127, 0, 0, 1]);
        use futures_util::StreamExt;
        let statuses: Vec<u16> = futures_util::stream::iter(0..180)
            .map(|i| {
                // The lower-cased variant's key is the same for /v1/Login and /v1/LOGIN.
                let path = if i % 2 == 1 && what.starts_with("lower") {
                    path.to_uppercase()
                } else {
                    path.to_string()
                };
                let mut r = client.get(format!("{base}{path}?i={i}"));
                if forged {
                    r = r.header(
                        "x-envoy-original-limit-rate-path",
                        format!("GET/forged/{i}"),
                    );
                }
                async move { r.send().await.map_or(0, |r| r.status().as_u16()) }
            })
            .buffer_unordered(16)
            .collect()
            .await;
        let ok = statuses.iter().filter(|s| **s == 200).count();
        let limited = statuses.iter().filter(|s| **s == 429).count();
        assert_eq!((ok, limited), (100, 80), "{what}");
        proxy.shutdown(Duration::from_secs(1));
    }
    rls.shutdown().await;
}

/// An RLS that answers after `delay`: OK asking for one request and one response header, or
/// OVER_LIMIT for the next 60 s.
#[derive(Clone)]
struct ScriptedRls {
    delay: Duration,
    over_limit: bool,
}

#[tonic::async_trait]
impl envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_server::RateLimitService
    for ScriptedRls
{
    async fn should_rate_limit(
        &self,
        _request: tonic::Request<warden_ratelimit::RateLimitRequest>,
    ) -> Result<tonic::Response<warden_ratelimit::RateLimitResponse>, tonic::Status> {
        use envoy_types::pb::envoy::config::core::v3::HeaderValue;
        use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::DescriptorStatus;
        tokio::time::sleep(self.delay).await;
        if self.over_limit {
            return Ok(tonic::Response::new(warden_ratelimit::RateLimitResponse {
                overall_code: 2,
                statuses: vec![DescriptorStatus {
                    code: 2,
                    duration_until_reset: Some(envoy_types::pb::google::protobuf::Duration {
                        seconds: 60,
                        nanos: 0,
                    }),
                    ..Default::default()
                }],
                ..Default::default()
            }));
        }
        let header = |k: &str, v: &str| HeaderValue {
            key: k.into(),
            value: v.into(),
            ..Default::default()
        };
        Ok(tonic::Response::new(warden_ratelimit::RateLimitResponse {
            overall_code: 1,
            request_headers_to_add: vec![header("x-rls-note", "checked")],
            response_headers_to_add: vec![header("x-rls-resp", "yes")],
            ..Default::default()
        }))
    }
}

/// An RLS that answers OK after `delay`, with a lease of `lease` requests (valid for a minute)
/// to calls that ask if `lease` > 0, and counts the calls, and those that asked for a lease.
#[derive(Clone, Default)]
struct CountingRls {
    delay: Duration,
    lease: u32,
    calls: Arc<std::sync::atomic::AtomicUsize>,
    asked: Arc<std::sync::atomic::AtomicUsize>,
}

impl CountingRls {
    fn counts(&self) -> (usize, usize) {
        use std::sync::atomic::Ordering::SeqCst;
        (self.calls.load(SeqCst), self.asked.load(SeqCst))
    }
}

#[tonic::async_trait]
impl envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_server::RateLimitService
    for CountingRls
{
    async fn should_rate_limit(
        &self,
        request: tonic::Request<warden_ratelimit::RateLimitRequest>,
    ) -> Result<tonic::Response<warden_ratelimit::RateLimitResponse>, tonic::Status> {
        use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::{
            quota::ExpirationSpecifier, Quota,
        };
        use std::sync::atomic::Ordering::SeqCst;
        self.calls.fetch_add(1, SeqCst);
        let asked = request.metadata().contains_key("warden-quota-lease");
        if asked {
            self.asked.fetch_add(1, SeqCst);
        }
        tokio::time::sleep(self.delay).await;
        let in_a_minute = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            + Duration::from_secs(60);
        let valid_until = envoy_types::pb::google::protobuf::Timestamp {
            seconds: in_a_minute.as_secs() as i64,
            nanos: 0,
        };
        let quota = (asked && self.lease > 0).then(|| Quota {
            requests: self.lease,
            expiration_specifier: Some(ExpirationSpecifier::ValidUntil(valid_until)),
            ..Default::default()
        });
        Ok(tonic::Response::new(warden_ratelimit::RateLimitResponse {
            overall_code: 1,
            quota,
            ..Default::default()
        }))
    }
}

/// Serve `service` (an RLS) on a free loopback port.
async fn serve_rls<S>(service: S) -> SocketAddr
where
    S: envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_server::RateLimitService,
{
    use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_server::RateLimitServiceServer;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let incoming = futures_util::stream::unfold(listener, |l| async move {
        let conn = l.accept().await.map(|(s, _)| s);
        Some((conn, l))
    });
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(RateLimitServiceServer::new(service))
            .serve_with_incoming(incoming),
    );
    addr
}

/// Requests in flight together make one call each, and only one of them asks for a lease:
/// the service reserves every lease it grants, and a lease per call would hold back the
/// limit from other proxies.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_call_at_a_time_asks_for_a_lease() {
    let rls = CountingRls {
        delay: Duration::from_millis(200),
        ..Default::default()
    };
    let rls_addr = serve_rls(rls.clone()).await;
    let up = counting_echo().await;
    let yaml = seed_config(up.http_addr().unwrap(), rls_addr);
    let proxy = start_proxy(&yaml);
    let client = client_from([127, 0, 0, 1]);
    let url = format!("http://{}/login", addr(&proxy, 0));
    for burst in 1..=2 {
        let [ok, ..] = send_with(&client, &url, 32, 32).await;
        assert_eq!(ok, 32);
        assert_eq!(rls.counts(), (32 * burst, burst), "burst {burst}");
    }
    proxy.shutdown(Duration::from_secs(1));
}

/// Requests of a set that runs on leases wait for the next lease when theirs is spent, instead
/// of calling one by one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_on_a_spent_lease_wait_for_the_next_one() {
    let rls = CountingRls {
        delay: Duration::from_millis(100),
        lease: 10,
        ..Default::default()
    };
    let rls_addr = serve_rls(rls.clone()).await;
    let up = counting_echo().await;
    let yaml = seed_config(up.http_addr().unwrap(), rls_addr);
    let proxy = start_proxy(&yaml);
    let client = client_from([127, 0, 0, 1]);
    let url = format!("http://{}/login", addr(&proxy, 0));
    let [ok, ..] = send_with(&client, &url, 1, 1).await;
    assert_eq!((ok, rls.counts()), (1, (1, 1)), "the first call asks");
    // 64 at once on the 9 left: each call asking for the next lease serves ten requests.
    let [ok, ..] = send_with(&client, &url, 64, 64).await;
    assert_eq!(ok, 64);
    assert_eq!(up.total(), 65);
    let (calls, asked) = rls.counts();
    assert_eq!(
        calls, asked,
        "no call without a lease request: the others waited"
    );
    assert!(
        calls <= 1 + 8,
        "{calls} calls for 65 requests on leases of 10"
    );
    proxy.shutdown(Duration::from_secs(1));
}

async fn scripted_rls(delay: Duration, over_limit: bool) -> SocketAddr {
    serve_rls(ScriptedRls { delay, over_limit }).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rls_headers_are_applied_to_request_and_response() {
    let rls = scripted_rls(Duration::ZERO, false).await;
    let up = common::echo_http("up").await;
    let proxy = start_proxy(&format!(
        "{}---\n{}",
        routes(up.addr),
        seed_filters(rls, true, "1s")
    ));
    let r = client_from([127, 0, 0, 1])
        .get(format!("http://{}/api/healthz", addr(&proxy, 0)))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["x-rls-resp"], "yes", "response_headers_to_add");
    assert_eq!(
        r.headers()["x-echo-h-x-rls-note"],
        "checked",
        "request_headers_to_add reached the upstream"
    );
    // The seed's Lua header goes upstream, as Envoy sends it.
    assert_eq!(
        r.headers()["x-echo-h-x-envoy-original-limit-rate-path"],
        "GET/api/healthz"
    );
    proxy.shutdown(Duration::from_secs(1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_rls_hits_the_default_20ms_timeout() {
    let rls = scripted_rls(Duration::from_millis(300), false).await;
    let up = counting_echo().await;
    let filters =
        |closed: bool| seed_filters(rls, closed, "1s").replace("            timeout: 1s\n", "");
    let open = start_proxy(&format!(
        "{}---\n{}",
        routes(up.http_addr().unwrap()),
        filters(false)
    ));
    let closed = start_proxy(&format!(
        "{}---\n{}",
        routes(up.http_addr().unwrap()),
        filters(true)
    ));
    let c = client_from([127, 0, 0, 1]);
    let started = std::time::Instant::now();
    assert_eq!(
        send(&c, &format!("http://{}/a", addr(&open, 0)), 4).await,
        [4, 0, 0, 0]
    );
    assert_eq!(
        send(&c, &format!("http://{}/a", addr(&closed, 0)), 4).await,
        [0, 0, 4, 0]
    );
    assert!(
        started.elapsed() < Duration::from_millis(290),
        "answered before the RLS did: {:?}",
        started.elapsed()
    );
    assert_eq!(counter(&open, "failure_mode_allowed"), 4);
    assert_eq!(counter(&closed, "error"), 4);
    open.shutdown(Duration::from_secs(1));
    closed.shutdown(Duration::from_secs(1));
}

/// Under overload every RLS call can miss its deadline: the request fails open, but the late
/// OVER_LIMIT answer still fills the over-limit cache, so the limit holds from then on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn late_over_limit_answer_still_fills_the_cache() {
    let rls = scripted_rls(Duration::from_millis(100), true).await;
    let up = counting_echo().await;
    let proxy = start_proxy(&format!(
        "{}---\n{}",
        routes(up.http_addr().unwrap()),
        seed_filters(rls, false, "20ms")
    ));
    let c = client_from([127, 0, 0, 1]);
    let url = format!("http://{}/a", addr(&proxy, 0));
    assert_eq!(
        send(&c, &url, 1).await,
        [1, 0, 0, 0],
        "timed out: fails open"
    );
    assert_eq!(counter(&proxy, "failure_mode_allowed"), 1);
    // The answer arrives ~80 ms after the timeout.
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while counter(&proxy, "over_limit_cache_hits") == 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "late answer never cached"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert_ne!(send(&c, &url, 1).await[3], 1, "no other status");
    }
    assert_eq!(
        send(&c, &url, 5).await,
        [0, 5, 0, 0],
        "answered from the cache"
    );
    proxy.shutdown(Duration::from_secs(1));
}

/// The native `method` and `path` actions (warden extension) replace the seed's Lua header: the
/// descriptor is remote_address + method + path without the query, decided by `warden ratelimit`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn native_method_and_path_actions_key_the_limit() {
    let dir = warden_testkit::TempDir::new("native-actions").unwrap();
    let config = dir
        .write(
            "config.yaml",
            "domain: ratelimit\ndescriptors:\n  - key: remote_address\n    descriptors:\n      - key: method\n        value: GET\n        descriptors:\n          - key: PATH\n            rate_limit: {unit: minute, requests_per_unit: 5}\n",
        )
        .unwrap();
    let settings = Settings::loopback_for_tests(ConfigSource::Paths(vec![config]));
    let rls = Server::start_with_clock(settings, Arc::new(ManualClock::new(1_700_000_010_000)))
        .await
        .expect("rls starts");
    // The seed's filters without the Lua patch, and native actions instead of its header.
    let filters = seed_filters(rls.grpc_addr(), true, "1s");
    let without_lua = filters
        .split_once("    - applyTo: HTTP_FILTER")
        .and_then(|(head, rest)| {
            rest.split_once("    - applyTo: HTTP_FILTER")
                .map(|(_, tail)| format!("{head}    - applyTo: HTTP_FILTER{tail}"))
        })
        .expect("the seed has two HTTP_FILTER patches");
    let native = without_lua.replace(
        "                - request_headers:\n                    header_name: \"x-envoy-original-limit-rate-path\"\n                    descriptor_key: \"PATH\"",
        "                - method: {}\n                - path:\n                    descriptor_key: \"PATH\"",
    );
    assert!(!native.contains("envoy.lua") && native.contains("- method: {}"));
    let up = counting_echo().await;
    let proxy = start_proxy(&format!("{}---\n{native}", routes(up.http_addr().unwrap())));
    let base = format!("http://{}", addr(&proxy, 0));
    let client = client_from([127, 0, 0, 1]);

    // Query strings vary (send() appends ?i=N): one counter for /a.
    assert_eq!(send(&client, &format!("{base}/a"), 8).await, [5, 3, 0, 0]);
    assert_eq!(send(&client, &format!("{base}/b"), 2).await, [2, 0, 0, 0]);
    // POST has no limit in the config (method value GET only).
    for _ in 0..3 {
        let r = client.post(format!("{base}/a")).send().await.unwrap();
        assert_eq!(r.status(), 200);
    }
    // Another client address has its own counter.
    assert_eq!(
        send(&client_from([127, 0, 0, 2]), &format!("{base}/a"), 5).await,
        [5, 0, 0, 0]
    );
    assert_eq!(up.total(), 15);
    proxy.shutdown(Duration::from_secs(1));
    rls.shutdown().await;
}

/// Seed 000's attack against an escalating ban shared through Redis: the attacker goes over
/// 300/min at the first proxy and is refused at once by the two others, which never saw it,
/// each 429 saying how long in `retry-after`; another client is untouched. The service's clock
/// is a test clock: advanced past the first ban (2 s), the next offence gets the second (5 min),
/// again at every proxy.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_proxies_ban_an_attacker_together() {
    let redis = RedisServer::start().expect("redis-server");
    let dir = warden_testkit::TempDir::new("rls-ban").unwrap();
    let config = std::fs::read_to_string(examples_dir().join("ratelimit-config-300.yaml"))
        .unwrap()
        .replace(
            "          requests_per_unit: 300",
            "          requests_per_unit: 300\n        ban:\n          durations: [2s, 5m]\n          forget_after: 1h",
        );
    assert!(config.contains("ban:"), "{config}");
    dir.write("config.yaml", &config).unwrap();
    let clock = ManualClock::new(1_700_000_010_000);
    let rls = Server::start_with_clock(
        rls_settings(&redis, dir.path().to_path_buf()),
        Arc::new(clock.clone()),
    )
    .await
    .expect("rls starts");
    let up = counting_echo().await;
    let yaml = seed_config(up.http_addr().unwrap(), rls.grpc_addr());
    let proxies: Vec<RunningProxy> = (0..3).map(|_| start_proxy(&yaml)).collect();
    let urls: Vec<String> = proxies
        .iter()
        .map(|p| format!("http://{}/login", addr(p, 0)))
        .collect();
    let attacker = client_from([127, 0, 0, 1]);
    let other = client_from([127, 0, 0, 2]);
    let retry_after = |r: &reqwest::Response| -> u64 {
        r.headers()["retry-after"]
            .to_str()
            .unwrap()
            .parse()
            .unwrap()
    };

    assert_eq!(send(&attacker, &urls[0], 300).await, [300, 0, 0, 0]);
    let offence = attacker.get(&urls[0]).send().await.unwrap();
    assert_eq!(offence.status(), 429);
    assert_eq!(offence.headers()["x-envoy-ratelimited"], "true");
    assert_eq!(retry_after(&offence), 2, "the first ban");
    for url in &urls[1..] {
        let r = attacker.get(url).send().await.unwrap();
        assert_eq!(r.status(), 429, "banned at {url} too");
        assert_eq!(retry_after(&r), 2);
        assert_eq!(other.get(url).send().await.unwrap().status(), 200);
    }
    assert_eq!(up.total(), 302);

    // The first ban over (on the service's clock, and on the proxies', which remember the
    // answer until then): the window's count is still over, so the next call is the second
    // offence, and every proxy refuses the attacker for the second period.
    clock.advance_millis(2_100);
    tokio::time::sleep(Duration::from_millis(2_100)).await;
    let second = attacker.get(&urls[2]).send().await.unwrap();
    assert_eq!(second.status(), 429);
    assert_eq!(retry_after(&second), 300, "the second ban: 5 minutes");
    for url in &urls[..2] {
        let r = attacker.get(url).send().await.unwrap();
        assert_eq!(r.status(), 429);
        assert_eq!(retry_after(&r), 300);
    }
    assert_eq!(up.total(), 302, "no banned request reached the upstream");
    for p in proxies {
        p.shutdown(Duration::from_secs(1));
    }
    rls.shutdown().await;
}
