//! External authorization end to end (AuthorizationPolicy CUSTOM, Envoy's ext_authz): a
//! gateway-mode proxy in process, a Python grpcio provider on Envoy's published protos
//! following Istio's samples/extauthz contract (`fixtures/ext_authz/grpc_provider.py`: allow
//! iff `x-ext-authz: allow`, deny with its body, echo what it received, log every check), and
//! the istio.io "External Authorization" task's policy and mesh config, unchanged apart from
//! the provider's address (a ServiceEntry for `ext-authz.foo.svc.cluster.local` on loopback).

mod common;

use common::{addr, client, closed_port, echo_http, gateway, inline, service_entry};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use warden_proxy::{Proxy, ProxyOptions, RunningProxy};
use warden_testkit::{free_port, wait_until, KillOnDrop};

/// The task's policy (samples: `ext-authz` in namespace foo, for `app: httpbin`).
const TASK_POLICY: &str = r#"apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata:
  name: ext-authz
  namespace: foo
spec:
  selector:
    matchLabels:
      app: httpbin
  action: CUSTOM
  provider:
    # The provider name must match the extension provider defined in the mesh config.
    # You can also replace this with sample-ext-authz-http to test the other external authorizer definition.
    name: sample-ext-authz-grpc
  rules:
  # The rules specify when to trigger the external authorizer.
  - to:
    - operation:
        paths: ["/headers"]
"#;

/// The task's mesh config (`extensionProviders` of the `istio` ConfigMap's `mesh`).
const TASK_MESH: &str = r#"extensionProviders:
- name: "sample-ext-authz-grpc"
  envoyExtAuthzGrpc:
    service: "ext-authz.foo.svc.cluster.local"
    port: "9000"
- name: "sample-ext-authz-http"
  envoyExtAuthzHttp:
    service: "ext-authz.foo.svc.cluster.local"
    port: "8000"
    includeRequestHeadersInCheck: ["x-ext-authz"]
"#;

const DENY_BODY: &str =
    "denied by ext_authz for not found header `x-ext-authz: allow` in the request";

/// A Python provider on a free port, logging its checks to a file; killed on drop.
struct Provider {
    port: u16,
    log: PathBuf,
    _dir: warden_testkit::TempDir,
    _process: KillOnDrop,
}

impl Provider {
    /// `fixtures/ext_authz/grpc_provider.py`.
    fn grpc(hang: bool) -> Provider {
        let extra: &[&str] = if hang { &["--hang"] } else { &[] };
        Provider::start("grpc_provider.py", extra)
    }

    /// `fixtures/ext_authz/http_provider.py`.
    fn http() -> Provider {
        Provider::start("http_provider.py", &[])
    }

    fn start(script: &str, extra: &[&str]) -> Provider {
        let dir = warden_testkit::TempDir::new("ext-authz").unwrap();
        let log = dir.path().join("checks.log");
        std::fs::write(&log, "").unwrap();
        let port = free_port().unwrap();
        let path = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/ext_authz")
            .join(script);
        let mut command = std::process::Command::new("python3");
        command.arg(path).arg(port.to_string()).arg(&log);
        command.args(extra);
        let process = KillOnDrop::spawn(command).expect(
            "python3 runs (grpcio and xds-protos from PyPI: python3 -m pip install grpcio xds-protos)",
        );
        let up = wait_until(Duration::from_secs(20), || {
            std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
        });
        assert!(up, "the {script} provider listens on {port}");
        Provider {
            port,
            log,
            _dir: dir,
            _process: process,
        }
    }

    fn addr(&self) -> SocketAddr {
        ([127, 0, 0, 1], self.port).into()
    }

    /// The paths it was asked about, in order (a gRPC provider's lines go on with the
    /// principals, after a tab).
    fn checks(&self) -> Vec<String> {
        std::fs::read_to_string(&self.log)
            .unwrap()
            .lines()
            .map(|l| l.split('\t').next().unwrap_or_default().to_owned())
            .collect()
    }
}

/// The registry entry of the task's `ext-authz` service: its gRPC port 9000 and HTTP port
/// 8000 both at `at` (a test runs one provider).
fn provider_service(at: SocketAddr) -> String {
    format!(
        "---\napiVersion: networking.istio.io/v1\nkind: ServiceEntry\nmetadata: {{name: ext-authz, namespace: foo}}\nspec:\n  hosts: [ext-authz.foo.svc.cluster.local]\n  resolution: STATIC\n  ports:\n  - {{number: 9000, name: grpc, protocol: GRPC}}\n  - {{number: 8000, name: http, protocol: HTTP}}\n  endpoints:\n  - address: {}\n    ports: {{grpc: {}, http: {}}}\n",
        at.ip(),
        at.port(),
        at.port()
    )
}

/// A gateway routing every request to `upstream` (httpbin's stand-in), with `policies`, and
/// the provider service at `provider`.
fn config(upstream: SocketAddr, provider: SocketAddr, policies: &str) -> String {
    format!(
        "{gw}---\napiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata:\n  name: httpbin\nspec:\n  hosts: [\"*\"]\n  gateways: [gw]\n  http:\n  - route:\n    - destination: {{host: echo.internal}}\n{se}{provider}---\n{policies}",
        gw = gateway(&[(0, "HTTP")]),
        se = service_entry("echo.internal", &[upstream]),
        provider = provider_service(provider),
    )
}

/// A proxy in namespace foo labelled `app: httpbin` (what the task's policy selects), with
/// the mesh config's extension providers.
fn start(yaml: &str, mesh: &str) -> RunningProxy {
    let (mesh, _) =
        warden_config::mesh_config::parse_mesh_config(Path::new("mesh.yaml"), mesh).unwrap();
    let mut opts = ProxyOptions::loopback(inline(yaml));
    opts.namespace = "foo".into();
    opts.labels.insert("app".into(), "httpbin".into());
    opts.extension_providers = Arc::new(mesh.extension_providers);
    Proxy::start(opts).expect("proxy starts")
}

/// The task's gRPC provider with its settings replaced by `settings` (YAML lines under
/// `envoyExtAuthzGrpc`).
fn grpc_mesh(settings: &str) -> String {
    format!(
        "extensionProviders:\n- name: sample-ext-authz-grpc\n  envoyExtAuthzGrpc:\n    service: ext-authz.foo.svc.cluster.local\n    port: 9000\n{settings}"
    )
}

async fn get(
    proxy: &RunningProxy,
    path: &str,
    headers: &[(&str, &str)],
) -> (u16, http::HeaderMap, String) {
    let url = format!("http://{}{path}", addr(proxy, 0));
    let mut req = client().get(url).header("host", "httpbin.foo:8000");
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let resp = req.send().await.unwrap();
    let status = resp.status().as_u16();
    let h = resp.headers().clone();
    (status, h, resp.text().await.unwrap())
}

async fn post(
    proxy: &RunningProxy,
    path: &str,
    body: &'static str,
) -> (u16, http::HeaderMap, String) {
    post_as(proxy, path, body, "allow").await
}

async fn post_as(
    proxy: &RunningProxy,
    path: &str,
    body: &'static str,
    ext_authz: &str,
) -> (u16, http::HeaderMap, String) {
    let url = format!("http://{}{path}", addr(proxy, 0));
    let resp = client()
        .post(url)
        .header("x-ext-authz", ext_authz)
        .body(body)
        .send()
        .await
        .unwrap();
    let status = resp.status().as_u16();
    let h = resp.headers().clone();
    (status, h, resp.text().await.unwrap())
}

/// What the provider said it received (its `x-ext-authz-check-received` JSON).
fn received(headers: &http::HeaderMap, name: &str) -> serde_json::Value {
    let text = headers
        .get(name)
        .unwrap_or_else(|| panic!("{name} in {headers:?}"))
        .to_str()
        .unwrap();
    serde_json::from_str(text).unwrap()
}

/// The task's steps: `/headers` with `x-ext-authz: deny` is denied with the provider's body,
/// with `x-ext-authz: allow` reaches httpbin carrying `x-ext-authz-check-result: allowed`,
/// and `/ip` is never checked (the provider counts two checks). The answer's other edits land:
/// a header removed upstream, one added to the response.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_istio_task_with_the_grpc_provider_on_the_gateway() {
    let provider = Provider::grpc(false);
    let upstream = echo_http("httpbin").await;
    let proxy = start(
        &config(upstream.addr, provider.addr(), TASK_POLICY),
        TASK_MESH,
    );

    let (status, h, body) = get(&proxy, "/headers", &[("x-ext-authz", "deny")]).await;
    assert_eq!((status, body.as_str()), (403, DENY_BODY));
    assert_eq!(h["x-ext-authz-check-result"], "denied");
    assert!(h.get("x-upstream").is_none(), "denied before the upstream");
    let seen = received(&h, "x-ext-authz-check-received");
    assert_eq!(seen["path"], "/headers");
    assert_eq!(seen["x-ext-authz"], "deny");
    assert_eq!(seen["source"], "127.0.0.1");
    assert_ne!(seen["source_port"], 0, "the client's port: {seen}");
    assert_eq!(seen["protocol"], "HTTP/1.1");
    // No mTLS on a gateway's plain port: no principals.
    assert_eq!(
        (&seen["source_principal"], &seen["destination_principal"]),
        (&serde_json::json!(""), &serde_json::json!(""))
    );

    let (status, h, _) = get(
        &proxy,
        "/headers?x=1&secret=s",
        &[("x-ext-authz", "allow"), ("x-remove-me", "secret")],
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(h["x-echo-path"], "/headers?x=1&checked=1", "query edits");
    assert_eq!(h["x-upstream"], "httpbin");
    assert_eq!(h["x-echo-h-x-ext-authz-check-result"], "allowed");
    let seen = received(&h, "x-echo-h-x-ext-authz-check-received");
    assert_eq!(
        (&seen["method"], &seen["path"]),
        (&"GET".into(), &"/headers?x=1&secret=s".into())
    );
    assert_eq!(seen["host"], "httpbin.foo:8000");
    assert!(h.get("x-echo-h-x-remove-me").is_none(), "{h:?}");
    assert_eq!(h["x-ext-authz-downstream"], "allowed");

    let (status, h, _) = get(&proxy, "/ip", &[]).await;
    assert_eq!(status, 200);
    assert!(h.get("x-echo-h-x-ext-authz-check-result").is_none());
    assert_eq!(provider.checks(), ["/headers", "/headers?x=1&secret=s"]);
    let metrics = proxy.metrics_text();
    for line in [
        "ext_authz_checks_total{outcome=\"ok\"} 1",
        "ext_authz_checks_total{outcome=\"denied\"} 1",
        "ext_authz_checks_total{outcome=\"error\"} 0",
        "ext_authz_check_duration_seconds_count 2",
    ] {
        assert!(metrics.contains(line), "{line} in\n{metrics}");
    }
    proxy.shutdown(Duration::from_secs(1));
}

/// A provider that is down or answers past `timeout`: 403 (no body) by default, the
/// `statusOnError` when set, the upstream's answer with `failOpen`. Paths the policy does not
/// match are not affected.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fail_open_status_on_error_and_timeouts() {
    let upstream = echo_http("httpbin").await;
    let down = closed_port().await;
    let hanging = Provider::grpc(true);
    for (at, what) in [(down.addr(), "down"), (hanging.addr(), "hanging")] {
        let yaml = config(upstream.addr, at, TASK_POLICY);
        let cases = [
            ("    timeout: 300ms\n", 403, ""),
            ("    timeout: 300ms\n    statusOnError: \"503\"\n", 503, ""),
            ("    timeout: 300ms\n    failOpen: true\n", 200, "httpbin"),
        ];
        for (settings, want, upstream_name) in cases {
            let proxy = start(&yaml, &grpc_mesh(settings));
            let (status, h, body) = get(&proxy, "/headers", &[("x-ext-authz", "allow")]).await;
            assert_eq!(status, want, "{what} {settings}");
            if want != 200 {
                assert_eq!(body, "", "{what} {settings}");
            }
            assert_eq!(
                h.get("x-upstream")
                    .map(|v| v.to_str().unwrap())
                    .unwrap_or(""),
                upstream_name
            );
            let (status, _, _) = get(&proxy, "/ip", &[]).await;
            assert_eq!(status, 200, "unchecked path, {what}");
            let metrics = proxy.metrics_text();
            let allowed = if want == 200 { 1 } else { 0 };
            for line in [
                "ext_authz_checks_total{outcome=\"error\"} 1".to_string(),
                format!("ext_authz_checks_total{{outcome=\"failure_mode_allowed\"}} {allowed}"),
            ] {
                assert!(
                    metrics.contains(&line),
                    "{what} {settings}: {line} in\n{metrics}"
                );
            }
            proxy.shutdown(Duration::from_secs(1));
        }
    }
    assert_eq!(hanging.checks().len(), 3, "one check per hanging case");
}

/// `includeRequestBodyInCheck`: a body within `maxRequestBytes` is sent whole; a longer one is
/// cut (`x-envoy-auth-partial-body: true`) with `allowPartialMessage` and refused 413 without;
/// the upstream gets the whole body either way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_request_body_is_passed_and_cut_at_max_request_bytes() {
    let provider = Provider::grpc(false);
    let upstream = echo_http("httpbin").await;
    let yaml = config(upstream.addr, provider.addr(), TASK_POLICY);
    let partial = start(
        &yaml,
        &grpc_mesh("    includeRequestBodyInCheck:\n      maxRequestBytes: 8\n      allowPartialMessage: true\n"),
    );
    let (status, h, body) = post(&partial, "/headers", "0123456789abcdef").await;
    assert_eq!(status, 200);
    assert_eq!(body, "0123456789abcdef", "the upstream gets it all");
    let seen = received(&h, "x-echo-h-x-ext-authz-check-received");
    assert_eq!(
        (&seen["body"], &seen["partial"]),
        (&"01234567".into(), &"true".into())
    );
    let (status, h, body) = post(&partial, "/headers", "short").await;
    assert_eq!((status, body.as_str()), (200, "short"));
    let seen = received(&h, "x-echo-h-x-ext-authz-check-received");
    assert_eq!(
        (&seen["body"], &seen["partial"]),
        (&"short".into(), &"false".into())
    );
    partial.shutdown(Duration::from_secs(1));

    let whole = start(
        &yaml,
        &grpc_mesh(
            "    includeRequestBodyInCheck:\n      maxRequestBytes: 8\n      packAsBytes: true\n",
        ),
    );
    let (status, _, _) = post(&whole, "/headers", "0123456789abcdef").await;
    assert_eq!(status, 413);
    let (status, h, _) = post(&whole, "/headers", "bytes").await;
    assert_eq!(status, 200);
    let seen = received(&h, "x-echo-h-x-ext-authz-check-received");
    assert_eq!(seen["body"], "bytes", "raw_body");
    whole.shutdown(Duration::from_secs(1));
    assert_eq!(
        provider.checks().len(),
        3,
        "the 413 is answered before any check"
    );
}

/// A policy naming a provider the mesh config lacks: every request is denied, as Istio's
/// deny-all, and the snapshot's warnings (what `warden check` prints) say why; a dry-run
/// CUSTOM policy sends nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_provider_denies_everything_and_dry_run_sends_nothing() {
    let provider = Provider::grpc(false);
    let upstream = echo_http("httpbin").await;
    let unknown = TASK_POLICY.replace("name: sample-ext-authz-grpc", "name: nope");
    let yaml = config(upstream.addr, provider.addr(), &unknown);
    let proxy = start(&yaml, TASK_MESH);
    let (status, _, body) = get(&proxy, "/ip", &[("x-ext-authz", "allow")]).await;
    assert_eq!((status, body.as_str()), (403, "RBAC: access denied"));
    proxy.shutdown(Duration::from_secs(1));

    let (mesh, _) =
        warden_config::mesh_config::parse_mesh_config(Path::new("mesh.yaml"), TASK_MESH).unwrap();
    let identity = warden_proxy::ProxyIdentity {
        namespace: "foo".into(),
        labels: [("app".to_string(), "httpbin".to_string())].into(),
        extension_providers: Arc::new(mesh.extension_providers),
        ..Default::default()
    };
    let loaded = warden_config::load_str("t.yaml", &yaml).unwrap();
    let snap = warden_proxy::Snapshot::build(loaded, &identity, None).unwrap();
    let text = warden_proxy::runtime::check::describe(&snap);
    assert!(
        text.contains("external authorization (CUSTOM): every request denied: available providers"),
        "{text}"
    );
    let known = config(upstream.addr, provider.addr(), TASK_POLICY);
    let known = warden_proxy::Snapshot::build(
        warden_config::load_str("t.yaml", &known).unwrap(),
        &identity,
        None,
    )
    .unwrap();
    let text = warden_proxy::runtime::check::describe(&known);
    let want = format!(
        "external authorization (CUSTOM): provider sample-ext-authz-grpc at {} \
         (ServiceEntry foo/ext-authz), timeout 600s, 403 on error",
        provider.addr()
    );
    assert!(text.contains(&want), "{want}\n{text}");
    let warnings: Vec<String> = snap.warnings.iter().map(ToString::to_string).collect();
    assert!(
        warnings
            .iter()
            .any(|w| w.contains("AuthorizationPolicy/ext-authz")
                && w.contains("spec.provider.name")
                && w.contains("\"nope\"")
                && w.contains("every request to this workload is denied")),
        "{warnings:?}"
    );

    let dry_run = TASK_POLICY.replace(
        "  namespace: foo\n",
        "  namespace: foo\n  annotations: {\"istio.io/dry-run\": \"true\"}\n",
    );
    let proxy = start(&config(upstream.addr, provider.addr(), &dry_run), TASK_MESH);
    let (status, _, _) = get(&proxy, "/headers", &[("x-ext-authz", "deny")]).await;
    assert_eq!(status, 200);
    assert!(provider.checks().is_empty());
    proxy.shutdown(Duration::from_secs(1));
}

/// Exactly `count` GETs of `url` over `connections` connections with `headers`; status ->
/// count (0: transport errors).
async fn send(
    url: &str,
    count: u64,
    connections: usize,
    headers: &[(&str, &str)],
) -> std::collections::BTreeMap<u16, u64> {
    use warden_load::load::{self, LoadConfig};
    let report = load::run(LoadConfig {
        target: url.to_string(),
        connections,
        requests: Some(count),
        duration: None,
        timeout: Duration::from_secs(10),
        headers: headers
            .iter()
            .map(|(k, v)| (k.parse().unwrap(), v.parse().unwrap()))
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

/// A local limit keyed by what the provider decided: it returns the client's plan (`x-plan`
/// header and `plan` dynamic metadata; `x-api-key: key-pro` is pro), and the local limiter's
/// descriptors give free clients 10 and pro clients 100 requests, exactly, over 8 connections
/// each at once; keyed by the `request_headers` action on the header the provider set, then by
/// the `metadata` action on `envoy.filters.http.ext_authz`. A client's own `x-plan: pro` is
/// overwritten by the provider's answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_limit_keyed_by_the_providers_plan_is_exact_under_concurrency() {
    let provider = Provider::grpc(false);
    let upstream = echo_http("httpbin").await;
    for action in [
        "{request_headers: {header_name: x-plan, descriptor_key: plan}}",
        "{metadata: {descriptor_key: plan, metadata_key: {key: envoy.filters.http.ext_authz, path: [{key: plan}]}}}",
    ] {
        let limits = format!(
            r#"---
apiVersion: networking.istio.io/v1alpha3
kind: EnvoyFilter
metadata: {{name: per-plan, namespace: foo}}
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
            token_bucket: {{max_tokens: 100000, tokens_per_fill: 100000, fill_interval: 86400s}}
            filter_enabled: {{runtime_key: e, default_value: {{numerator: 100, denominator: HUNDRED}}}}
            filter_enforced: {{runtime_key: f, default_value: {{numerator: 100, denominator: HUNDRED}}}}
            descriptors:
            - entries: [{{key: plan, value: free}}]
              token_bucket: {{max_tokens: 10, tokens_per_fill: 10, fill_interval: 86400s}}
            - entries: [{{key: plan, value: pro}}]
              token_bucket: {{max_tokens: 100, tokens_per_fill: 100, fill_interval: 86400s}}
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
        let policies = format!("{TASK_POLICY}{limits}");
        let proxy = start(
            &config(upstream.addr, provider.addr(), &policies),
            TASK_MESH,
        );
        let url = format!("http://{}/headers", addr(&proxy, 0));
        let (free, pro) = tokio::join!(
            send(
                &url,
                30,
                8,
                &[("x-ext-authz", "allow"), ("x-plan", "pro")]
            ),
            send(
                &url,
                130,
                8,
                &[("x-ext-authz", "allow"), ("x-api-key", "key-pro")]
            ),
        );
        assert_eq!(free, [(200, 10), (429, 20)].into(), "free, {action}");
        assert_eq!(pro, [(200, 100), (429, 30)].into(), "pro, {action}");
        // Denied requests never reach the limiter.
        let (status, _, _) = get(&proxy, "/headers", &[("x-ext-authz", "deny")]).await;
        assert_eq!(status, 403, "{action}");
        proxy.shutdown(Duration::from_secs(1));
    }
    assert_eq!(provider.checks().len(), 2 * (30 + 130 + 1));
}

/// The task with the HTTP provider (`sample-ext-authz-http`, mesh config unchanged): denied
/// with the provider's status, body and headers; allowed requests reach httpbin unmodified
/// (no `headersToUpstreamOnAllow`); the check carries only `Host`, `Content-Length` and the
/// listed `x-ext-authz`; `/ip` is not checked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_istio_task_with_the_http_provider_on_the_gateway() {
    let provider = Provider::http();
    let upstream = echo_http("httpbin").await;
    let policy = TASK_POLICY.replace("name: sample-ext-authz-grpc", "name: sample-ext-authz-http");
    let proxy = start(&config(upstream.addr, provider.addr(), &policy), TASK_MESH);

    let (status, h, body) = get(
        &proxy,
        "/headers",
        &[("x-ext-authz", "deny"), ("cookie", "c")],
    )
    .await;
    assert_eq!((status, body.as_str()), (403, DENY_BODY));
    assert_eq!(h["x-ext-authz-check-result"], "denied");
    let seen = received(&h, "x-ext-authz-check-received");
    assert_eq!(
        seen["headers"],
        serde_json::json!(["content-length", "host", "x-ext-authz"])
    );
    assert_eq!(
        (&seen["method"], &seen["path"]),
        (&"GET".into(), &"/headers".into())
    );
    assert_eq!(
        (&seen["host"], &seen["content-length"]),
        (&"httpbin.foo:8000".into(), &"0".into())
    );

    let (status, h, _) = get(&proxy, "/headers?a=1", &[("x-ext-authz", "allow")]).await;
    assert_eq!(status, 200);
    assert_eq!(h["x-upstream"], "httpbin");
    assert!(
        h.get("x-echo-h-x-ext-authz-check-result").is_none(),
        "{h:?}"
    );
    assert!(h.get("x-ext-authz-downstream").is_none(), "{h:?}");

    let (status, _, _) = get(&proxy, "/ip", &[]).await;
    assert_eq!(status, 200);
    assert_eq!(provider.checks(), ["/headers", "/headers?a=1"]);
    proxy.shutdown(Duration::from_secs(1));
}

/// The HTTP provider's settings: `pathPrefix`, `includeAdditionalHeadersInCheck`,
/// `headersToUpstreamOnAllow` (prefix pattern), `headersToDownstreamOnAllow`,
/// `headersToDownstreamOnDeny`, `includeRequestBodyInCheck` (cut at `maxRequestBytes`, the
/// upstream gets it whole); a provider that is down answers `statusOnError`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_provider_settings_shape_the_check_and_the_answers() {
    let provider = Provider::http();
    let upstream = echo_http("httpbin").await;
    let policy = TASK_POLICY.replace("name: sample-ext-authz-grpc", "name: sample-ext-authz-http");
    let mesh = r#"extensionProviders:
- name: sample-ext-authz-http
  envoyExtAuthzHttp:
    service: foo/ext-authz.foo.svc.cluster.local
    port: 8000
    pathPrefix: /check
    includeRequestHeadersInCheck: ["x-ext-*"]
    includeAdditionalHeadersInCheck: {x-added: "1"}
    headersToUpstreamOnAllow: ["x-ext-authz-check-*"]
    headersToDownstreamOnAllow: ["x-ext-authz-downstream"]
    headersToDownstreamOnDeny: ["x-ext-authz-check-result"]
    includeRequestBodyInCheck: {maxRequestBytes: 4, allowPartialMessage: true}
"#;
    let proxy = start(&config(upstream.addr, provider.addr(), &policy), mesh);
    let (status, h, body) = post(&proxy, "/headers", "0123456789").await;
    assert_eq!((status, body.as_str()), (200, "0123456789"));
    assert_eq!(h["x-echo-h-x-ext-authz-check-result"], "allowed");
    assert_eq!(h["x-ext-authz-downstream"], "allowed");
    let seen = received(&h, "x-echo-h-x-ext-authz-check-received");
    assert_eq!(seen["path"], "/check/headers");
    assert_eq!(
        (&seen["body"], &seen["partial"]),
        (&"0123".into(), &"true".into())
    );
    assert_eq!(seen["content-length"], "4");
    let names = seen["headers"].as_array().unwrap();
    assert!(
        names.contains(&"x-added".into()) && names.contains(&"x-ext-authz".into()),
        "{names:?}"
    );

    let (status, h, body) = post_as(&proxy, "/headers", "x", "deny").await;
    assert_eq!((status, body.as_str()), (403, DENY_BODY));
    assert_eq!(h["x-ext-authz-check-result"], "denied");
    assert!(
        h.get("x-ext-authz-check-received").is_none(),
        "not listed for denials"
    );
    proxy.shutdown(Duration::from_secs(1));
    assert_eq!(provider.checks(), ["/check/headers", "/check/headers"]);

    let down = closed_port().await;
    let failing = mesh.replace(
        "    pathPrefix: /check\n",
        "    pathPrefix: /check\n    statusOnError: \"503\"\n",
    );
    let proxy = start(&config(upstream.addr, down.addr(), &policy), &failing);
    let (status, _, body) = get(&proxy, "/headers", &[("x-ext-authz", "allow")]).await;
    assert_eq!((status, body.as_str()), (503, ""));
    proxy.shutdown(Duration::from_secs(1));
}

/// `clearRouteCache`: the route is picked again after the provider's header edits (a route
/// matching `x-ext-authz-check-result: allowed` then wins); without it the request keeps the
/// route it had before the check, as in Envoy.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clear_route_cache_routes_the_edited_request_again() {
    let provider = Provider::grpc(false);
    let plain = echo_http("httpbin").await;
    let checked = echo_http("checked").await;
    let yaml = format!(
        "{gw}---\napiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata:\n  name: httpbin\nspec:\n  hosts: [\"*\"]\n  gateways: [gw]\n  http:\n  - match: [{{headers: {{x-ext-authz-check-result: {{exact: allowed}}}}}}]\n    route: [{{destination: {{host: checked.internal}}}}]\n  - route: [{{destination: {{host: echo.internal}}}}]\n{se}{checked}{provider}---\n{TASK_POLICY}",
        gw = gateway(&[(0, "HTTP")]),
        se = service_entry("echo.internal", &[plain.addr]),
        checked = service_entry("checked.internal", &[checked.addr]),
        provider = provider_service(provider.addr()),
    );
    for (setting, want) in [("false", "httpbin"), ("true", "checked")] {
        let proxy = start(
            &yaml,
            &grpc_mesh(&format!("    clearRouteCache: {setting}\n")),
        );
        let (status, h, _) = get(&proxy, "/headers", &[("x-ext-authz", "allow")]).await;
        assert_eq!(status, 200);
        assert_eq!(h["x-upstream"], want, "clearRouteCache: {setting}");
        assert_eq!(h["x-echo-h-x-ext-authz-check-result"], "allowed");
        proxy.shutdown(Duration::from_secs(1));
    }
}

/// TLS to the provider by its service's DestinationRule (`SIMPLE`, `caCertificates`), as for
/// any upstream: gRPC (h2 by ALPN) and HTTP providers serving TLS answer the task's checks; the
/// same providers without the DestinationRule cannot be asked (plain text to a TLS port), so
/// the check fails closed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_to_the_provider_by_destination_rule() {
    let pki = warden_testkit::pki::Pki::new("ext-authz");
    let (cert, key) = pki.issue(
        "ext-authz",
        &warden_testkit::pki::Leaf {
            common_name: "ext-authz".into(),
            dns: vec!["ext-authz.foo.svc.cluster.local".into()],
            ..Default::default()
        },
    );
    let tls = ["--tls", cert.to_str().unwrap(), key.to_str().unwrap()];
    let upstream = echo_http("httpbin").await;
    let dr = format!(
        "---\napiVersion: networking.istio.io/v1\nkind: DestinationRule\nmetadata: {{name: ext-authz, namespace: foo}}\nspec:\n  host: ext-authz.foo.svc.cluster.local\n  trafficPolicy:\n    tls: {{mode: SIMPLE, caCertificates: {}}}\n",
        pki.ca_path.display()
    );
    for (script, provider_name) in [
        ("grpc_provider.py", "sample-ext-authz-grpc"),
        ("http_provider.py", "sample-ext-authz-http"),
    ] {
        let provider = Provider::start(script, &tls);
        let policy = TASK_POLICY.replace(
            "name: sample-ext-authz-grpc",
            &format!("name: {provider_name}"),
        );
        let yaml = config(upstream.addr, provider.addr(), &policy);
        let proxy = start(&format!("{yaml}{dr}"), TASK_MESH);
        let (status, _, body) = get(&proxy, "/headers", &[("x-ext-authz", "deny")]).await;
        assert_eq!((status, body.as_str()), (403, DENY_BODY), "{script}");
        let (status, h, _) = get(&proxy, "/headers", &[("x-ext-authz", "allow")]).await;
        assert_eq!(
            (status, h["x-upstream"].to_str().unwrap()),
            (200, "httpbin"),
            "{script}"
        );
        proxy.shutdown(Duration::from_secs(1));
        assert_eq!(provider.checks().len(), 2, "{script}");

        let plain = start(&yaml, TASK_MESH);
        let (status, _, body) = get(&plain, "/headers", &[("x-ext-authz", "allow")]).await;
        assert_eq!((status, body.as_str()), (403, ""), "{script} without TLS");
        plain.shutdown(Duration::from_secs(1));
    }
}

/// A TCP echo that counts the connections it accepted (what reached the upstream): echoes
/// until the client's EOF, then closes.
async fn counting_tcp_echo() -> (SocketAddr, Arc<std::sync::atomic::AtomicUsize>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let at = listener.local_addr().unwrap();
    let accepted = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let count = accepted.clone();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            count.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            tokio::spawn(async move {
                let mut buf = [0u8; 1024];
                while let Ok(n @ 1..) = s.read(&mut buf).await {
                    if s.write_all(&buf[..n]).await.is_err() {
                        return;
                    }
                }
                let _ = s.shutdown().await;
            });
        }
    });
    (at, accepted)
}

/// From loopback address `from`, send `hello` to `to`, half-close and read all that comes
/// back; a connection closed unanswered (or reset) reads as nothing.
async fn tcp_exchange(from: [u8; 4], to: SocketAddr) -> Vec<u8> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind((from, 0).into()).unwrap();
    let mut s = socket.connect(to).await.unwrap();
    // A peer that already closed fails the write or the shutdown; the read says how it ended.
    let _ = s.write_all(b"hello").await;
    let _ = s.shutdown().await;
    let mut back = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut back))
        .await
        .expect("the connection ends");
    match read {
        Ok(_) => back,
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => back,
        Err(e) => panic!("{e}"),
    }
}

/// A gateway TCP port relaying to `upstream`, with `policies` and the provider service at
/// `provider`.
fn tcp_config(upstream: SocketAddr, provider: SocketAddr, policies: &str) -> String {
    format!(
        "{gw}{route}{provider}---\n{policies}",
        gw = gateway(&[(0, "TCP")]),
        route = common::tcp_route(upstream.port()),
        provider = provider_service(provider),
    )
}

/// CUSTOM on a TCP port (Envoy's network ext_authz as Istio builds it for a gRPC provider):
/// the task's policy, whose `paths` a connection does not have, sends every connection to the
/// provider on its first byte with only the peers (no request); the provider allows by source
/// address, and a denied connection is closed before anything reaches the upstream. An
/// `envoyExtAuthzHttp` provider is left out of TCP chains: connections are not checked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tcp_connections_are_checked_and_denied_ones_never_reach_the_upstream() {
    let provider = Provider::start("grpc_provider.py", &["--allow-tcp", "127.0.0.2"]);
    let (echo, accepted) = counting_tcp_echo().await;
    let yaml = tcp_config(echo, provider.addr(), TASK_POLICY);
    let proxy = start(&yaml, TASK_MESH);
    let gateway = addr(&proxy, 0);
    assert_eq!(tcp_exchange([127, 0, 0, 2], gateway).await, b"hello");
    assert_eq!(accepted.load(std::sync::atomic::Ordering::SeqCst), 1);
    assert_eq!(tcp_exchange([127, 0, 0, 1], gateway).await, b"");
    assert_eq!(
        accepted.load(std::sync::atomic::Ordering::SeqCst),
        1,
        "the denied connection never reached the upstream"
    );
    let log = std::fs::read_to_string(&provider.log).unwrap();
    assert_eq!(log, "tcp\t127.0.0.2\t\t\ntcp\t127.0.0.1\t\t\n");
    let metrics = proxy.metrics_text();
    for line in [
        "warden_ext_authz_tcp_checks_total{outcome=\"ok\"} 1",
        "warden_ext_authz_tcp_checks_total{outcome=\"denied\"} 1",
        "warden_ext_authz_checks_total{outcome=\"ok\"} 0",
    ] {
        assert!(metrics.contains(line), "{line} in\n{metrics}");
    }
    proxy.shutdown(Duration::from_secs(1));

    let http_policy =
        TASK_POLICY.replace("name: sample-ext-authz-grpc", "name: sample-ext-authz-http");
    let proxy = start(&tcp_config(echo, provider.addr(), &http_policy), TASK_MESH);
    assert_eq!(
        tcp_exchange([127, 0, 0, 1], addr(&proxy, 0)).await,
        b"hello"
    );
    assert_eq!(accepted.load(std::sync::atomic::Ordering::SeqCst), 2);
    assert_eq!(provider.checks().len(), 2, "an HTTP provider is not asked");
    proxy.shutdown(Duration::from_secs(1));
}

/// A TCP check that cannot be made (the provider down): the connection is closed unrelayed,
/// or relayed with `failOpen`. A provider the mesh config lacks closes the connections the
/// policy matches (Istio's deny rules for a bad CUSTOM action).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tcp_checks_fail_closed_or_open() {
    let down = closed_port().await;
    let (echo, accepted) = counting_tcp_echo().await;
    let unknown = TASK_POLICY.replace("name: sample-ext-authz-grpc", "name: nowhere");
    let proxy = start(&tcp_config(echo, down.addr(), &unknown), TASK_MESH);
    assert_eq!(tcp_exchange([127, 0, 0, 1], addr(&proxy, 0)).await, b"");
    assert_eq!(accepted.load(std::sync::atomic::Ordering::SeqCst), 0);
    proxy.shutdown(Duration::from_secs(1));
    let yaml = tcp_config(echo, down.addr(), TASK_POLICY);
    for (settings, back, relayed) in [
        ("    timeout: 300ms\n", &b""[..], 0),
        ("    timeout: 300ms\n    failOpen: true\n", &b"hello"[..], 1),
    ] {
        let proxy = start(&yaml, &grpc_mesh(settings));
        assert_eq!(
            tcp_exchange([127, 0, 0, 1], addr(&proxy, 0)).await,
            back,
            "{settings}"
        );
        assert_eq!(
            accepted.load(std::sync::atomic::Ordering::SeqCst),
            relayed,
            "{settings}"
        );
        let metrics = proxy.metrics_text();
        for line in [
            "warden_ext_authz_tcp_checks_total{outcome=\"error\"} 1".to_string(),
            format!(
                "warden_ext_authz_tcp_checks_total{{outcome=\"failure_mode_allowed\"}} {relayed}"
            ),
        ] {
            assert!(metrics.contains(&line), "{settings}: {line} in\n{metrics}");
        }
        proxy.shutdown(Duration::from_secs(1));
    }
}
