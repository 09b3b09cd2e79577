//! Istio's standard metrics as an operator reads them: a real Prometheus (Debian's
//! `prometheus`, on a free loopback port, scraping every second) scrapes a gateway while a
//! client runs, and the PromQL of Istio's Grafana dashboards returns the series and values the
//! traffic made: requests by response code for a destination workload, success rate,
//! P50/P90/P99 from `istio_request_duration_milliseconds_bucket`, TCP bytes per service,
//! 429s by `response_flags="RL"`. `promtool check metrics` passes on the exposition, and
//! OpenMetrics is served only when `Accept` asks for it; gRPC message counters from a grpcio
//! client streaming to a grpcio server; the mesh default provider. Skips, saying why, without
//! `prometheus`/`promtool` (test.sh installs them).

mod common;

use common::*;
use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use warden_testkit::{free_port, wait_until, KillOnDrop, TempDir};

/// reviews (pod `reviews-v1-…` at 127.0.0.1) and ratings (pod `ratings-v1` at 127.0.0.2,
/// every request delayed 300 ms by a fault) in `bookinfo`, a TCP echo service, and a limit
/// of 5 requests on `/limited`; a mesh-wide Telemetry turns `istio_response_bytes` off for
/// clients and removes `source_principal`.
fn config(
    http: u16,
    tcp: u16,
    reviews: SocketAddr,
    ratings: SocketAddr,
    echo: SocketAddr,
) -> String {
    format!(
        r#"{gw}
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {{name: bookinfo, namespace: bookinfo}}
spec:
  hosts: ["*"]
  gateways: [default/gw]
  http:
  - match: [{{uri: {{prefix: /ratings}}}}]
    fault: {{delay: {{fixedDelay: 300ms, percentage: {{value: 100}}}}}}
    route: [{{destination: {{host: ratings}}}}]
  - route: [{{destination: {{host: reviews}}}}]
  tcp:
  - match: [{{port: {tcp}}}]
    route: [{{destination: {{host: echo.bookinfo.svc.cluster.local, port: {{number: 9000}}}}}}]
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {{name: reviews, namespace: bookinfo}}
spec:
  hosts: [reviews.bookinfo.svc.cluster.local]
  resolution: STATIC
  ports: [{{number: 80, name: http, protocol: HTTP}}]
  endpoints: [{{address: {rip}, ports: {{http: {rport}}}}}]
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {{name: ratings, namespace: bookinfo}}
spec:
  hosts: [ratings.bookinfo.svc.cluster.local]
  resolution: STATIC
  ports: [{{number: 80, name: http, protocol: HTTP}}]
  endpoints: [{{address: {aip}, ports: {{http: {aport}}}}}]
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {{name: echo, namespace: bookinfo}}
spec:
  hosts: [echo.bookinfo.svc.cluster.local]
  resolution: STATIC
  ports: [{{number: 9000, name: tcp, protocol: TCP}}]
  endpoints: [{{address: 127.0.0.3, ports: {{tcp: {eport}}}}}]
---
apiVersion: v1
kind: Pod
metadata:
  name: reviews-v1-5b4c8d6f9-x7k2p
  namespace: bookinfo
  labels: {{app: reviews, version: v1, pod-template-hash: 5b4c8d6f9}}
spec: {{serviceAccountName: bookinfo-reviews, containers: [{{name: reviews}}]}}
status: {{podIP: {rip}}}
---
apiVersion: v1
kind: Pod
metadata:
  name: ratings-v1
  namespace: bookinfo
  labels: {{app: ratings, version: v1}}
spec: {{containers: [{{name: ratings}}]}}
status: {{podIP: {aip}}}
---
apiVersion: warden.dev/v1alpha1
kind: RateLimitPolicy
metadata: {{name: limited}}
spec:
  local:
    rules:
    - clientSelectors: [{{path: {{type: PathPrefix, value: /limited}}}}]
      limit: {{requests: 5, unit: Day}}
---
apiVersion: telemetry.istio.io/v1
kind: Telemetry
metadata: {{name: mesh-default, namespace: istio-system}}
spec:
  metrics:
  - providers: [{{name: prometheus}}]
    overrides:
    - match: {{metric: RESPONSE_SIZE, mode: CLIENT}}
      disabled: true
    - tagOverrides: {{source_principal: {{operation: REMOVE}}}}
"#,
        gw = gateway(&[(http, "HTTP"), (tcp, "TCP")]),
        rip = reviews.ip(),
        rport = reviews.port(),
        aip = ratings.ip(),
        aport = ratings.port(),
        eport = echo.port(),
    )
}

fn have(program: &str) -> bool {
    Command::new(program)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Prometheus scraping `admin`'s `/stats/prometheus` every second.
struct Prometheus {
    port: u16,
    _dir: TempDir,
    _server: KillOnDrop,
}

impl Prometheus {
    fn start(admin: SocketAddr) -> Prometheus {
        let dir = TempDir::new("prometheus").unwrap();
        let config = dir.path().join("prometheus.yml");
        std::fs::write(
            &config,
            format!(
                "global: {{scrape_interval: 1s, evaluation_interval: 1s}}\n\
                 scrape_configs:\n\
                 - job_name: gateway\n  metrics_path: /stats/prometheus\n  \
                 static_configs: [{{targets: ['{admin}']}}]\n"
            ),
        )
        .unwrap();
        let port = free_port().unwrap();
        let mut cmd = Command::new("prometheus");
        cmd.arg(format!("--config.file={}", config.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.path().join("data").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stderr(Stdio::null());
        let server = KillOnDrop::spawn(cmd).unwrap();
        let p = Prometheus {
            port,
            _dir: dir,
            _server: server,
        };
        assert!(
            wait_until(Duration::from_secs(30), || p.get("/-/ready").is_some()),
            "prometheus did not become ready"
        );
        p
    }

    fn get(&self, path_and_query: &str) -> Option<String> {
        let out = Command::new("curl")
            .args([
                "-sf",
                &format!("http://127.0.0.1:{}{path_and_query}", self.port),
            ])
            .output()
            .ok()?;
        out.status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// An instant query's result: each series' labels and value.
    fn query(&self, promql: &str) -> Vec<(serde_json::Value, f64)> {
        let out = Command::new("curl")
            .args([
                "-sf",
                "--get",
                "--data-urlencode",
                &format!("query={promql}"),
                &format!("http://127.0.0.1:{}/api/v1/query", self.port),
            ])
            .output()
            .unwrap();
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
        v["data"]["result"]
            .as_array()
            .map(|r| {
                r.iter()
                    .map(|s| {
                        let value = s["value"][1]
                            .as_str()
                            .unwrap_or("NaN")
                            .parse()
                            .unwrap_or(f64::NAN);
                        (s["metric"].clone(), value)
                    })
                    .collect()
            })
            .unwrap_or_default()
    }

    /// The single value of `promql` once it equals `want` (waiting for scrapes).
    fn wait_for(&self, promql: &str, want: f64) {
        let mut last = Vec::new();
        let ok = wait_until(Duration::from_secs(30), || {
            last = self.query(promql);
            last.len() == 1 && last[0].1 == want
        });
        assert!(ok, "{promql}: want {want}, got {last:?}");
    }
}

async fn get_status(url: &str) -> u16 {
    client()
        .get(url)
        .send()
        .await
        .map_or(0, |r| r.status().as_u16())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prometheus_reads_istio_dashboards_queries_from_a_gateway() {
    if !have("prometheus") || !have("promtool") {
        eprintln!("skipped: prometheus and promtool are needed (Debian's prometheus; test.sh installs it)");
        return;
    }
    let reviews = echo_http_on("reviews", ([127, 0, 0, 1], 0).into()).await;
    let ratings = echo_http_on("ratings", ([127, 0, 0, 2], 0).into()).await;
    let echo = {
        let l = tokio::net::TcpListener::bind("127.0.0.3:0").await.unwrap();
        let at = l.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((mut s, _)) = l.accept().await {
                tokio::spawn(async move {
                    let mut buf = [0u8; 4096];
                    while let Ok(n @ 1..) = s.read(&mut buf).await {
                        if s.write_all(&buf[..n]).await.is_err() {
                            return;
                        }
                    }
                    let _ = s.shutdown().await;
                });
            }
        });
        at
    };
    let (http, tcp) = (free_port().unwrap(), free_port().unwrap());
    let proxy = start(&config(http, tcp, reviews.addr, ratings.addr, echo));
    let admin = proxy.admin_addr().unwrap();
    let base = format!("http://{}", addr(&proxy, http));
    let prometheus = Prometheus::start(admin);

    // A client keeps calling reviews while Prometheus scrapes; it counts what it sent.
    let running = Arc::new(AtomicBool::new(true));
    let sent = Arc::new(AtomicU64::new(0));
    let background = {
        let (running, sent, url) = (running.clone(), sent.clone(), format!("{base}/reviews/1"));
        tokio::spawn(async move {
            while running.load(Ordering::Relaxed) {
                assert_eq!(get_status(&url).await, 200);
                sent.fetch_add(1, Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
    };
    for _ in 0..15 {
        get_status(&format!("{base}/limited")).await;
    }
    for _ in 0..3 {
        assert_eq!(get_status(&format!("{base}/status/503")).await, 503);
    }
    // And ratings, each answer 300 ms late.
    let slow = {
        let (running, url) = (running.clone(), format!("{base}/ratings/1"));
        tokio::spawn(async move {
            while running.load(Ordering::Relaxed) {
                assert_eq!(get_status(&url).await, 200);
            }
        })
    };
    let mut conn = tokio::net::TcpStream::connect(addr(&proxy, tcp))
        .await
        .unwrap();
    conn.write_all(&[7u8; 1000]).await.unwrap();
    let mut back = vec![0u8; 1000];
    conn.read_exact(&mut back).await.unwrap();
    conn.shutdown().await.unwrap();
    let mut rest = Vec::new();
    conn.read_to_end(&mut rest).await.unwrap();
    drop(conn);

    let dest = r#"reporter="source",destination_workload="reviews-v1",destination_workload_namespace="bookinfo""#;
    // Rates by response code while the client runs (Istio's "Incoming Requests By Source
    // And Response Code" panel).
    tokio::task::block_in_place(|| {
        let q = format!(
            "sum(rate(istio_requests_total{{{dest}}}[1m])) by (source_workload, response_code)"
        );
        let mut got = Vec::new();
        let seen = wait_until(Duration::from_secs(30), || {
            got = prometheus.query(&q);
            got.iter()
                .any(|(m, v)| m["response_code"] == "200" && *v > 0.0)
                && got.iter().any(|(m, _)| m["response_code"] == "429")
                && got.iter().any(|(m, _)| m["response_code"] == "503")
        });
        assert!(seen, "{q}: {got:?}");
        // P50/P90/P99 of ratings: every request waited 300 ms, so all three fall in Istio's
        // (250, 500] bucket.
        for quantile in ["0.50", "0.90", "0.99"] {
            let q = format!(
                r#"histogram_quantile({quantile}, sum(rate(istio_request_duration_milliseconds_bucket{{reporter="source",destination_workload="ratings-v1"}}[1m])) by (le))"#
            );
            let seen = wait_until(Duration::from_secs(30), || {
                got = prometheus.query(&q);
                got.len() == 1 && !got[0].1.is_nan()
            });
            assert!(seen && (250.0..=500.0).contains(&got[0].1), "{q}: {got:?}");
        }
    });
    running.store(false, Ordering::Relaxed);
    background.await.unwrap();
    slow.await.unwrap();
    let sent = sent.load(Ordering::Relaxed) as f64;

    tokio::task::block_in_place(|| {
        // Exact counts once the last scrape has them.
        prometheus.wait_for(
            &format!(r#"sum(istio_requests_total{{{dest},response_code="200"}})"#),
            sent + 5.0,
        );
        prometheus.wait_for(
            r#"sum(istio_requests_total{response_code="429",response_flags="RL"})"#,
            10.0,
        );
        prometheus.wait_for(
            &format!(
                r#"sum(istio_requests_total{{{dest},response_code="503",response_flags="-"}})"#
            ),
            3.0,
        );
        // The labels Istio's dashboards group by.
        let series = prometheus.query(&format!(
            r#"istio_requests_total{{{dest},response_code="200"}}"#
        ));
        let m = &series.first().expect("a reviews series").0;
        for (label, want) in [
            ("source_workload", "unknown"),
            ("destination_app", "reviews"),
            ("destination_version", "v1"),
            ("destination_canonical_service", "reviews"),
            ("destination_canonical_revision", "v1"),
            (
                "destination_principal",
                "spiffe://cluster.local/ns/bookinfo/sa/bookinfo-reviews",
            ),
            ("destination_service", "reviews.bookinfo.svc.cluster.local"),
            ("destination_service_name", "reviews"),
            ("destination_service_namespace", "bookinfo"),
            ("destination_cluster", "Kubernetes"),
            ("request_protocol", "http"),
            ("connection_security_policy", "unknown"),
        ] {
            assert_eq!(m[label], want, "{label} of {m}");
        }
        // The Telemetry's overrides: a label removed, a metric off, the others on.
        assert!(m.get("source_principal").is_none(), "{m}");
        assert!(prometheus.query("istio_response_bytes_count").is_empty());
        assert!(!prometheus.query("istio_request_bytes_count").is_empty());
        // Success rate (non-5xx over all) for the destination workload.
        let q = format!(
            r#"sum(istio_requests_total{{{dest},response_code!~"5.*"}}) / sum(istio_requests_total{{{dest}}})"#
        );
        let want = (sent + 15.0) / (sent + 18.0);
        let got = prometheus.query(&q);
        assert!(
            got.len() == 1 && (got[0].1 - want).abs() < 1e-9,
            "{q}: want {want}, got {got:?}"
        );
        // TCP bytes per service, each way: 1000 in, 1000 echoed back.
        for metric in [
            "istio_tcp_received_bytes_total",
            "istio_tcp_sent_bytes_total",
        ] {
            prometheus.wait_for(
                &format!(
                    r#"sum({metric}{{reporter="source",destination_service="echo.bookinfo.svc.cluster.local"}})"#
                ),
                1000.0,
            );
        }
        prometheus.wait_for(
            r#"sum(istio_tcp_connections_closed_total{destination_service_name="echo",destination_service_namespace="bookinfo"})"#,
            1.0,
        );
    });

    // promtool accepts the exposition as served; OpenMetrics only when asked.
    let text = client()
        .get(format!("http://{admin}/stats/prometheus"))
        .send()
        .await
        .unwrap();
    assert_eq!(
        text.headers()["content-type"],
        "text/plain; version=0.0.4; charset=utf-8"
    );
    let text = text.text().await.unwrap();
    assert!(!text.contains("# EOF"), "{text}");
    assert!(
        text.contains("# TYPE istio_requests_total counter\n"),
        "{text}"
    );
    assert!(
        text.contains("# TYPE warden_http_requests_total counter\n"),
        "{text}"
    );
    assert_promtool_accepts(&text);
    let om = client()
        .get(format!("http://{admin}/stats/prometheus"))
        .header(
            "accept",
            "application/openmetrics-text;version=1.0.0,text/plain;q=0.5",
        )
        .send()
        .await
        .unwrap();
    assert!(om.headers()["content-type"]
        .to_str()
        .unwrap()
        .starts_with("application/openmetrics-text"));
    assert!(om.text().await.unwrap().ends_with("# EOF\n"));
}

/// `--mesh-config`'s `defaultProviders.metrics` is the bottom layer of the Telemetry API's
/// providers, as istiod merges them: without `prometheus` no Istio metric is written, a
/// Telemetry naming `prometheus` (with its overrides) turns them on again, and a mesh config
/// that does not say keeps Istio's installed default (`[prometheus]`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_mesh_default_metrics_provider_is_the_bottom_layer() {
    let up = echo_http("mesh-default").await;
    let named = r#"---
apiVersion: telemetry.istio.io/v1
kind: Telemetry
metadata: {name: mesh, namespace: istio-system}
spec:
  metrics:
  - providers: [{name: prometheus}]
    overrides:
    - match: {metric: REQUEST_SIZE}
      disabled: true
"#;
    let cases = [
        ("", "", true),
        ("defaultProviders:\n  metrics: [prometheus]\n", "", true),
        ("defaultProviders:\n  metrics: []\n", "", false),
        ("defaultProviders:\n  metrics: []\n", named, true),
    ];
    for (mesh, telemetry, on) in cases {
        let (config, _) =
            warden_config::mesh_config::parse_mesh_config(std::path::Path::new("mesh.yaml"), mesh)
                .unwrap();
        let yaml = format!("{}{telemetry}", http_config(up.addr, "", ""));
        let mut opts = warden_proxy::ProxyOptions::loopback(inline(&yaml));
        opts.mesh_metrics_off = !config.default_providers.prometheus();
        let proxy = warden_proxy::Proxy::start(opts).unwrap();
        let r = client()
            .get(format!("http://{}/", addr(&proxy, 0)))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
        let text = proxy.metrics_text();
        let requests = text
            .lines()
            .filter(|l| l.starts_with("istio_requests_total{"))
            .count();
        assert_eq!(requests > 0, on, "{mesh:?} {telemetry:?}: {text}");
        if !telemetry.is_empty() {
            // The Telemetry's own override holds under its provider.
            assert!(!text.contains("istio_request_bytes_bucket{"), "{text}");
        }
        tokio::task::spawn_blocking(move || proxy.shutdown(Duration::from_secs(1)))
            .await
            .unwrap();
    }
}

/// A Python grpcio server echoing every message of a bidirectional stream twice (raw bytes:
/// generic handlers, no generated code). Prints `ready` once listening.
const GRPC_SERVER: &str = r#"
import sys, grpc
from concurrent import futures

def chat(requests, context):
    for m in requests:
        yield m
        yield m

server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(
    "test.Echo", {"Chat": grpc.stream_stream_rpc_method_handler(chat)}),))
server.add_insecure_port("127.0.0.1:" + sys.argv[1])
server.start()
print("ready", flush=True)
server.wait_for_termination()
"#;

/// A Python grpcio client streaming `sys.argv[2]` messages through the gateway at
/// `sys.argv[1]`; prints how many came back.
const GRPC_CLIENT: &str = r#"
import sys, grpc
channel = grpc.insecure_channel(sys.argv[1])
chat = channel.stream_stream("/test.Echo/Chat")
replies = list(chat(iter([b"m%d" % i for i in range(int(sys.argv[2]))]), timeout=10))
print(len(replies))
"#;

/// Istio's gRPC message counters: a grpcio client streams 3 messages through the gateway to a
/// grpcio server that answers each twice; `istio_request_messages_total` counts 3 and
/// `istio_response_messages_total` 6 on the request's series (`request_protocol="grpc"`,
/// `grpc_response_status="0"`), and `promtool check metrics` accepts the exposition.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpc_messages_are_counted_both_ways() {
    if !have("promtool") || !have("python3") {
        eprintln!("skipped: promtool and python3 (grpcio) are needed; test.sh installs them");
        return;
    }
    let dir = TempDir::new("grpc-messages").unwrap();
    let server_py = dir.write("server.py", GRPC_SERVER).unwrap();
    let client_py = dir.write("client.py", GRPC_CLIENT).unwrap();
    let port = free_port().unwrap();
    let mut server = Command::new("python3");
    server
        .arg(&server_py)
        .arg(port.to_string())
        .stdout(Stdio::piped());
    let _server = KillOnDrop::spawn(server).unwrap();
    assert!(
        wait_until(Duration::from_secs(20), || std::net::TcpStream::connect((
            "127.0.0.1",
            port
        ))
        .is_ok()),
        "the grpcio server listens"
    );
    let yaml = format!(
        r#"{gw}
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {{name: chat}}
spec:
  hosts: [chat.internal]
  resolution: STATIC
  ports: [{{number: 80, name: grpc, protocol: GRPC}}]
  endpoints: [{{address: 127.0.0.1, ports: {{grpc: {port}}}}}]
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {{name: chat}}
spec:
  hosts: ["*"]
  gateways: [gw]
  http:
  - route: [{{destination: {{host: chat.internal}}}}]
"#,
        gw = gateway(&[(0, "HTTP")]),
    );
    let proxy = start(&yaml);
    let at = addr(&proxy, 0);
    let out = tokio::task::spawn_blocking(move || {
        Command::new("python3")
            .arg(&client_py)
            .arg(at.to_string())
            .arg("3")
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    assert!(
        out.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&out.stderr),
        proxy.metrics_text()
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "6");
    // The series is reported when the response body ends, after the client has it all.
    let series = |text: &str, name: &str| -> Vec<String> {
        text.lines()
            .filter(|l| l.starts_with(&format!("{name}{{")))
            .map(str::to_string)
            .collect()
    };
    let mut text = proxy.metrics_text();
    for _ in 0..200 {
        if !series(&text, "istio_response_messages_total").is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
        text = proxy.metrics_text();
    }
    for (name, count) in [
        ("istio_request_messages_total", 3),
        ("istio_response_messages_total", 6),
    ] {
        let lines = series(&text, name);
        assert_eq!(lines.len(), 1, "{name}: {text}");
        let line = &lines[0];
        assert!(line.ends_with(&format!(" {count}")), "{line}");
        for label in [
            r#"request_protocol="grpc""#,
            r#"grpc_response_status="0""#,
            r#"response_code="200""#,
        ] {
            assert!(line.contains(label), "{label} in {line}");
        }
    }
    assert_promtool_accepts(&text);
    tokio::task::spawn_blocking(move || proxy.shutdown(Duration::from_secs(1)))
        .await
        .unwrap();
}

/// `promtool check metrics` on `text`: exit 0, or 3 (lint problems only) for the one name Istio
/// fixes against Prometheus' base-unit advice (Envoy's exposition gets the same line).
fn assert_promtool_accepts(text: &str) {
    let mut promtool = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    {
        use std::io::Write;
        promtool
            .stdin
            .take()
            .unwrap()
            .write_all(text.as_bytes())
            .unwrap();
    }
    let checked = promtool.wait_with_output().unwrap();
    let said = String::from_utf8_lossy(&checked.stderr).into_owned()
        + &String::from_utf8_lossy(&checked.stdout);
    let istio_name =
        "istio_request_duration_milliseconds use base unit \"seconds\" instead of \"milliseconds\"";
    assert!(
        checked.status.success()
            || (checked.status.code() == Some(3)
                && said
                    .lines()
                    .filter(|l| !l.is_empty())
                    .all(|l| l == istio_name)),
        "promtool check metrics ({:?}): {said}",
        checked.status
    );
}
